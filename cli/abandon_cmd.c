/*
 * abandon_cmd.c - `agentbus abandon THREAD RUN [--reason TEXT]`: end an
 * orphaned run (docs/PROTOCOL.md 7.17) with the RUN_ERROR the broker writes
 * itself, marked `by: "broker"` in its stamp.
 *
 * Exit status: 0 abandoned; 1 the broker refused (a live owner, not started,
 * already ended, not dispatched: the message says which); 2 usage.
 */
#include "cli.h"
#include "dispatch.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SV(s) ((ab_str_t){(s), strlen(s)})

static void help(void)
{
    printf(
        "usage: agentbus abandon THREAD RUN [--reason TEXT] [--json] [--broker ENDPOINT]\n"
        "                        [--timeout MS]\n\n"
        "End an orphaned run (started, its worker gone; `agentbus runs --requests` marks it\n"
        "ORPHANED) with a terminal RUN_ERROR the broker writes itself (code\n"
        "agentbus.abandoned, its stamp marked by: broker). A run with a live worker is\n"
        "cancelled instead (agentbus cancel).\n\n"
        "options:\n"
        "  --reason TEXT      the RUN_ERROR's message (default: the broker's own)\n"
        "  --json             the answer as one JSON object: op, thread, run, seq, pos\n"
        "  --broker ENDPOINT  command endpoint (default $AGENTBUS_BROKER, else " AB_DEFAULT_BROKER
        ")\n"
        "  --timeout MS       bound of connecting and of the request (default 5000)\n"
        "  -h, --help         show this help\n\n"
        "exit status: 0 abandoned, 1 refused by the broker, 2 usage\n");
}

static int parse(int argc, char **argv, cli_dopts_t *d, const char **reason)
{
    static const struct option lo[] = {
        {"reason", required_argument, NULL, 'R'}, {"json", no_argument, NULL, 'j'},
        {"broker", required_argument, NULL, 'b'}, {"timeout", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = cli_getopt(argc, argv, ":h", lo, NULL)) != -1) {
        switch (c) {
        case 'R': *reason = optarg; break;
        case 'h': help(); return -1;
        default:
            if (cli_dispatch_opt("abandon", c, d) != 0)
                return AB_EXIT_USAGE;
        }
    }
    if (argc - optind != 2)
        return cli_usage_error("abandon", "want THREAD RUN, got %d argument%s", argc - optind,
                               argc - optind == 1 ? "" : "s");
    if (*reason && strlen(*reason) > AB_REASON_MAX)
        return cli_usage_error("abandon", "--reason is longer than %d bytes", AB_REASON_MAX);
    int rc = cli_check_id("abandon", "THREAD", argv[optind]);
    return rc ? rc : cli_check_id("abandon", "RUN", argv[optind + 1]);
}

int cmd_abandon(int argc, char **argv)
{
    cli_dopts_t d = {.timeout_ms = 5000};
    const char *reason = NULL;
    int rc = parse(argc, argv, &d, &reason);
    if (rc != 0)
        return rc < 0 ? AB_EXIT_OK : rc;
    const char *thread = argv[optind], *run = argv[optind + 1];
    if (cli_endpoint("abandon", d.broker, &d.broker) != 0)
        return AB_EXIT_USAGE;
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_abandon_run_t q = {SV(thread), SV(run), reason ? SV(reason) : (ab_str_t){0}};
    ab_abandoned_t r;
    ab_status_t st = ab_doc_new(&doc) == AB_OK
                         ? cli_dispatch_connect("abandon", &d, AB_CAP_DISPATCH, &c, &err)
                         : ab_error_set(&err, AB_NOMEM, "", "out of memory");
    if (st == AB_OK)
        st = ab_conn_abandon_run(c, &q, doc, &r, (int)d.timeout_ms, &err);
    if (st != AB_OK) {
        rc = cli_refused("abandon", &err);
    } else if (d.json) {
        printf(
            "{\"op\":\"abandoned\",\"thread\":\"%s\",\"run\":\"%s\",\"seq\":%llu,\"pos\":%llu}\n",
            thread, run, (unsigned long long)r.seq, (unsigned long long)r.pos);
    } else {
        printf("run %s/%s abandoned: the broker's RUN_ERROR is seq %llu, pos %llu\n", thread, run,
               (unsigned long long)r.seq, (unsigned long long)r.pos);
    }
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    return rc;
}

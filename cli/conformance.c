/*
 * conformance.c - `agentbus conformance ENDPOINT [--only NAME] [--timeout MS]`:
 * runs the conformance checks (conformance.h) against a broker's command
 * endpoint, prints `PASS name`, `FAIL name: reason` or `SKIP name: reason`
 * per check and a final `N passed, M failed, K skipped`, and exits 1 when
 * any check failed (2 on a usage error). docs/CONFORMANCE.md says what each
 * check proves.
 *
 * Invariants:
 *  1. Each check gets a fresh connection (hello/welcome done) and its own
 *     docs; the runner frees them and any SUB socket afterwards.
 *  2. A check that cannot even connect FAILs (the endpoint must answer hello).
 */
#ifdef AB_HAVE_CLIENT
#include "conformance.h"
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

struct check {
    const char *name;
    conf_fn fn;
};

static const struct check checks[] = {
    {"version", conf_check_version},
    {"ordering", conf_check_ordering},
    {"gap", conf_check_gap},
    {"duplicate", conf_check_duplicate},
    {"conflict", conf_check_conflict},
    {"fencing", conf_check_fencing},
    {"terminal", conf_check_terminal},
    {"errors", conf_check_errors},
    {"replay_run", conf_check_replay_run},
    {"replay_thread", conf_check_replay_thread},
    {"replay_all", conf_check_replay_all},
    {"heartbeat", conf_check_heartbeat},
    {"flow_control", conf_check_flow_control},
    {"unsupported", conf_check_unsupported},
    {"snapshots", conf_check_snapshots},
};
#define NCHECKS (sizeof(checks) / sizeof(checks[0]))

static void print_help(void)
{
    printf("usage: agentbus conformance ENDPOINT [--only NAME] [--timeout MS]\n\n"
           "Check a broker's command endpoint against docs/PROTOCOL.md, through the wire only.\n"
           "Prints PASS/FAIL/SKIP per check and 'N passed, M failed, K skipped'; exits 1 when\n"
           "any check failed. See docs/CONFORMANCE.md.\n\n"
           "options:\n"
           "  --only NAME    run one check (repeatable)\n"
           "  --timeout MS   bound of each request (default 5000)\n\n"
           "checks:");
    for (size_t i = 0; i < NCHECKS; i++)
        printf(" %s", checks[i].name);
    printf("\n");
}

static conf_result_t run_one(conf_t *cf, const struct check *ck)
{
    cf->reason[0] = '\0';
    ab_error_t err = AB_ERROR_INIT;
    conf_result_t r = CONF_FAIL;
    if (ab_doc_new(&cf->doc) != AB_OK || ab_doc_new(&cf->tmp) != AB_OK)
        conf_fail(cf, "out of memory");
    else if ((cf->c = conf_connect(cf, NULL, 0, &err)) != NULL)
        r = ck->fn(cf);
    if (cf->sub)
        zmq_close(cf->sub);
    cf->sub = NULL;
    ab_conn_destroy(&cf->c);
    ab_doc_destroy(&cf->doc);
    ab_doc_destroy(&cf->tmp);
    return r;
}

static int run_all(conf_t *cf, char **only, int nonly)
{
    int npass = 0, nfail = 0, nskip = 0;
    for (size_t i = 0; i < NCHECKS; i++) {
        bool want = nonly == 0;
        for (int k = 0; k < nonly; k++)
            want = want || strcmp(only[k], checks[i].name) == 0;
        if (!want)
            continue;
        conf_result_t r = run_one(cf, &checks[i]);
        if (r == CONF_PASS)
            printf("PASS %s\n", checks[i].name), npass++;
        else if (r == CONF_SKIP)
            printf("SKIP %s: %s\n", checks[i].name, cf->reason), nskip++;
        else
            printf("FAIL %s: %s\n", checks[i].name, cf->reason), nfail++;
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", npass, nfail, nskip);
    return nfail ? AB_EXIT_FAIL : AB_EXIT_OK;
}

static bool known(const char *name)
{
    for (size_t i = 0; i < NCHECKS; i++)
        if (strcmp(name, checks[i].name) == 0)
            return true;
    return false;
}

int cmd_conformance(int argc, char **argv)
{
    static const struct option lo[] = {{"only", required_argument, NULL, 'o'},
                                       {"timeout", required_argument, NULL, 't'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    conf_t cf = {.timeout_ms = 5000};
    char *only[NCHECKS];
    int nonly = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        if (ch == 'h') {
            print_help();
            return AB_EXIT_OK;
        } else if (ch == 'o') {
            if (!known(optarg))
                return cli_usage_error("conformance", "unknown check '%s'", optarg);
            if (nonly < (int)NCHECKS)
                only[nonly++] = optarg;
        } else if (ch == 't') {
            long v;
            if (!cli_parse_long(optarg, 100, 600000, &v))
                return cli_usage_error("conformance", "--timeout: 100..600000 ms");
            cf.timeout_ms = (int)v;
        } else
            return cli_usage_error("conformance", "unknown option");
    }
    if (optind != argc - 1)
        return cli_usage_error("conformance", "expected one ENDPOINT");
    cf.endpoint = argv[optind];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(cf.prefix, sizeof(cf.prefix), "conf-%ld-%lx%05lx", (long)getpid(), (long)ts.tv_sec,
             (long)(ts.tv_nsec / 10000));
    return run_all(&cf, only, nonly);
}
#endif

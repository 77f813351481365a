/*
 * status_cmd.c - `agentbus status`: what the broker is doing, from its
 * `stats` answer (docs/PROTOCOL.md 7.18), as a few lines for a person or one
 * JSON object for a machine; --watch asks again every few seconds.
 *
 * Invariants:
 *  1. One connection for the whole command; each refresh is one `stats`
 *     request, so --watch costs the broker one request per interval.
 *  2. With --watch the screen is cleared between refreshes only when
 *     standard output is a terminal; otherwise every refresh is appended
 *     (one JSON object per line with --json).
 */
#include "ab_common.h"
#include "agentbus/client.h"
#include "cli.h"

#include <ctype.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct sopts {
    const char *broker;
    bool json;
    long watch_s; /* 0: once */
    long count;   /* refreshes with --watch; 0: until interrupted */
    long timeout_ms;
};

static void help(void)
{
    printf("usage: agentbus status [--broker ENDPOINT] [--json] [--watch [SECONDS]] [--count N]\n"
           "                       [--timeout MS]\n\n"
           "Show what the broker is doing: version, instance, uptime, head position, runs\n"
           "(active and total), store and WAL size, connections, subscribers, the ingest\n"
           "queue, commits and events per second, commit latency percentiles, open replays.\n\n"
           "options:\n"
           "  --broker ENDPOINT  the broker's command endpoint (default $AGENTBUS_BROKER, else\n"
           "                     " AB_DEFAULT_BROKER ")\n"
           "  --json             one JSON object (per refresh) on standard output\n"
           "  --watch [SECONDS]  ask again every SECONDS (1..3600, default 2) until interrupted\n"
           "  --count N          with --watch: stop after N refreshes\n"
           "  --timeout MS       bound of connecting and of each request (default 5000)\n"
           "  -h, --help         show this help\n");
}

/* --watch [SECONDS]: the value attached (--watch=5) or the next argument when it is not an
 * option - status takes no operand, so `--watch 0` is a bad value, not a stray word. */
static int watch_value(int argc, char **argv, struct sopts *o)
{
    const char *v = optarg;
    if (!v && optind < argc && (argv[optind][0] != '-' || isdigit((unsigned char)argv[optind][1])))
        v = argv[optind++];
    o->watch_s = 2;
    if (v && !cli_parse_long(v, 1, 3600, &o->watch_s))
        return cli_usage_error("status", "--watch wants 1..3600 seconds, got '%s'", v);
    return 0;
}

static int parse(int argc, char **argv, struct sopts *o)
{
    static const struct option lo[] = {
        {"broker", required_argument, NULL, 'b'},
        {"json", no_argument, NULL, 'j'},
        {"watch", optional_argument, NULL, 'w'},
        {"count", required_argument, NULL, 'c'},
        {"timeout", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = cli_getopt(argc, argv, ":h", lo, NULL)) != -1) {
        switch (c) {
        case 'b': o->broker = optarg; break;
        case 'j': o->json = true; break;
        case 'w':
            if (watch_value(argc, argv, o) != 0)
                return AB_EXIT_USAGE;
            break;
        case 'c':
            if (!cli_parse_long(optarg, 1, 1000000, &o->count))
                return cli_usage_error("status", "--count wants a positive number, got '%s'",
                                       optarg);
            break;
        case 'T':
            if (!cli_parse_long(optarg, 1, 600000, &o->timeout_ms))
                return cli_usage_error("status", "--timeout wants milliseconds, got '%s'", optarg);
            break;
        case 'h': help(); return -1;
        default: return cli_bad_option("status", c);
        }
    }
    if (optind < argc)
        return cli_usage_error("status", "unexpected argument '%s'", argv[optind]);
    if (o->count && !o->watch_s)
        return cli_usage_error("status", "--count goes with --watch");
    return cli_endpoint("status", o->broker, &o->broker);
}

/* "12.3 MiB" */
static const char *bytes(uint64_t n, char *buf, size_t size)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4)
        v /= 1024, u++;
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
    return buf;
}

static void print_text(const ab_stats_reply_t *r, const char *ep)
{
    char b1[32], b2[32], b3[32];
    uint64_t s = r->uptime_ms / 1000;
    printf("broker   %s  version %.*s  instance %.*s  up %llud %02lluh %02llum %02llus\n", ep,
           (int)r->version.len, r->version.ptr, (int)r->instance.len, r->instance.ptr,
           (unsigned long long)(s / 86400), (unsigned long long)(s / 3600 % 24),
           (unsigned long long)(s / 60 % 60), (unsigned long long)(s % 60));
    if (r->store_known)
        printf("store    runs %llu (%llu active)  database %s  WAL %s  head position %llu\n",
               (unsigned long long)r->runs_total, (unsigned long long)r->runs_active,
               bytes(r->store_bytes, b1, sizeof b1), bytes(r->wal_bytes, b2, sizeof b2),
               (unsigned long long)r->head_pos);
    else
        printf("store    (the plugin reports no figures)  head position %llu\n",
               (unsigned long long)r->head_pos);
    if (r->replicas_known)
        printf("standby  %llu streaming (%llu synchronous)  replay lag %s, %.1f ms%s\n",
               (unsigned long long)r->replicas, (unsigned long long)r->replicas_sync,
               bytes(r->replica_lag_bytes, b1, sizeof b1), (double)r->replica_lag_us / 1000,
               r->replicas_sync ? "" : "  (no commit waits for a standby)");
    printf("clients  connections %llu  subscribers %llu  replays open %llu\n",
           (unsigned long long)r->connections, (unsigned long long)r->subscribers,
           (unsigned long long)r->replays_open);
    printf("ingest   queue %llu (%s)  %llu commits/s  %llu events/s (last %d s)\n",
           (unsigned long long)r->queue_events, bytes(r->queue_bytes, b3, sizeof b3),
           (unsigned long long)r->commits_per_s, (unsigned long long)r->events_per_s, 10);
    printf("commit   p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  max %.2f ms (last %llu commits)\n",
           (double)r->commit_p50_us / 1000, (double)r->commit_p90_us / 1000,
           (double)r->commit_p99_us / 1000, (double)r->commit_max_us / 1000,
           (unsigned long long)r->commit_window);
    printf("totals   %llu commits  %llu events  %llu rejected\n", (unsigned long long)r->commits,
           (unsigned long long)r->events, (unsigned long long)r->rejected);
}

#define JU(name) printf(",\"" #name "\":%llu", (unsigned long long)r->name)

static void print_json(const ab_stats_reply_t *r, const char *ep)
{
    printf("{\"broker\":");
    cli_json_str(stdout, ep);
    printf(",\"instance\":\"%.*s\",\"version\":\"%.*s\"", (int)r->instance.len, r->instance.ptr,
           (int)r->version.len, r->version.ptr);
    JU(uptime_ms);
    JU(head_pos);
    printf(",\"store_known\":%s", r->store_known ? "true" : "false");
    JU(runs_total);
    JU(runs_active);
    JU(store_bytes);
    JU(wal_bytes);
    JU(connections);
    JU(subscribers);
    JU(queue_events);
    JU(queue_bytes);
    JU(replays_open);
    JU(commits);
    JU(events);
    JU(rejected);
    JU(commits_per_s);
    JU(events_per_s);
    JU(commit_p50_us);
    JU(commit_p90_us);
    JU(commit_p99_us);
    JU(commit_max_us);
    JU(commit_window);
    printf(",\"replicas_known\":%s", r->replicas_known ? "true" : "false");
    JU(replicas);
    JU(replicas_sync);
    JU(replica_lag_bytes);
    JU(replica_lag_us);
    printf("}\n");
}

static int report(const char *what, const ab_error_t *err)
{
    char buf[768];
    fprintf(stderr, "agentbus status: %s%s\n", what, cli_error_text(err, buf, sizeof buf));
    return AB_EXIT_FAIL;
}

static int run_status(const struct sopts *o, ab_conn_t *conn, const char *ep)
{
    ab_doc_t *doc = NULL;
    if (ab_doc_new(&doc) != AB_OK) {
        fprintf(stderr, "agentbus status: out of memory\n");
        return AB_EXIT_FAIL;
    }
    bool tty = isatty(STDOUT_FILENO);
    int rc = AB_EXIT_OK;
    for (long i = 0; o->count == 0 || i < o->count; i++) {
        ab_stats_reply_t r;
        ab_error_t err = AB_ERROR_INIT;
        if (ab_conn_stats(conn, doc, &r, (int)o->timeout_ms, &err) != AB_OK) {
            rc = report("", &err);
            break;
        }
        if (o->watch_s && tty && !o->json)
            fputs("\033[H\033[2J", stdout); /* invariant 2 */
        o->json ? print_json(&r, ep) : print_text(&r, ep);
        fflush(stdout);
        if (!o->watch_s || (o->count && i + 1 == o->count))
            break;
        nanosleep(&(struct timespec){o->watch_s, 0}, NULL);
    }
    ab_doc_destroy(&doc);
    return rc;
}

int cmd_status(int argc, char **argv)
{
    struct sopts o = {.timeout_ms = AB_CONN_TIMEOUT_DEFAULT};
    int rc = parse(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? AB_EXIT_OK : rc;
    char epc[300];
    snprintf(epc, sizeof epc, "%s", o.broker);
    ab_conn_opts_t co = {.client_name = "agentbus-status", .timeout_ms = (int)o.timeout_ms};
    ab_conn_t *conn = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_new(&conn, epc, &co, &err) != AB_OK)
        return report("", &err);
    rc = run_status(&o, conn, epc);
    ab_conn_destroy(&conn);
    return rc;
}

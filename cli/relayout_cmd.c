/*
 * relayout_cmd.c - `agentbus relayout [--data DIR] [--json]`: rewrite the
 * chunks table of a store migrated from schema 4 with events so that its
 * links come before its data (store/store_relayout.c; docs/OPERATIONS.md
 * "Relayout of a migrated store"), while no broker runs.
 *
 * Invariants:
 *  1. It never creates a store: a data directory without agentbus.db is
 *     exit 1, named.
 *  2. It opens the store as its exclusive owner, so a running broker makes
 *     it refuse (exit 1, the broker's pid named) before anything is written.
 *  3. Progress goes to stderr, at most one line a second; the result to
 *     stdout (one JSON object with --json).
 */
#include "agentbus/broker.h"
#include "cli.h"
#include "store.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef struct ropts {
    const char *data;
    bool json;
} ropts_t;

static void print_help(void)
{
    printf("usage: agentbus relayout [--data DIR] [--json]\n\n"
           "Rewrite the event store of a broker's data directory in the current layout.\n"
           "A store made before schema 5 and migrated with events keeps each chunk's links\n"
           "after its data, so replays of its runs read the data to find the links; this\n"
           "copies the chunks table in the new column order (every event, position and id\n"
           "kept). Run it while no broker uses the directory. One transaction: interrupted,\n"
           "it leaves the store as it was. It needs about twice the store file's size free\n"
           "on its filesystem, and does nothing to a store already in the current layout.\n\n"
           "options:\n"
           "  --data DIR  the broker's data directory (default %s)\n"
           "  --json      print the result as one JSON object\n"
           "  -h, --help  show this help\n\n"
           "Exit status: 0 done or nothing to do, 1 failed (no store, a broker is running,\n"
           "too little free space, I/O), 2 usage error.\n",
           AB_BROKER_DEFAULT_DATA);
}

static int parse_args(int argc, char **argv, ropts_t *o)
{
    static const struct option longopts[] = {
        {"data", required_argument, NULL, 'd'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = cli_getopt(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': o->data = optarg; break;
        case 'j': o->json = true; break;
        case 'h': print_help(); return -1;
        default: return cli_bad_option("relayout", c);
        }
    }
    if (optind < argc)
        return cli_usage_error("relayout", "unexpected argument '%s'", argv[optind]);
    if (o->data[0] == '\0')
        return cli_usage_error("relayout", "--data wants a directory");
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct progress {
    double start, last;
} progress_t;

/* Invariant 3: a line on stderr at most once a second. */
static void on_progress(void *ud, uint64_t chunks, uint64_t pos, uint64_t pos_max)
{
    progress_t *p = ud;
    double now = now_s();
    if (now - p->last < 1.0)
        return;
    p->last = now;
    fprintf(stderr, "agentbus relayout: %3.0f %% of the positions, %llu chunks, %.0f s\n",
            pos_max ? 100.0 * (double)pos / (double)pos_max : 100.0, (unsigned long long)chunks,
            now - p->start);
}

static void print_result(const char *db, const ab_store_relayout_t *r, double seconds, bool json)
{
    if (json) {
        printf("{\"db\":");
        cli_json_str(stdout, db);
        printf(",\"needed\":%s,\"chunks\":%llu,\"seconds\":%.3f,\"free_bytes\":%llu}\n",
               r->needed ? "true" : "false", (unsigned long long)r->chunks, seconds,
               (unsigned long long)r->free_bytes);
    } else if (!r->needed) {
        printf("%s: nothing to do, its chunks' links already come before their data\n", db);
    } else {
        printf("%s: %llu chunks rewritten in %.1f s, their links now before their data; "
               "%.1f MiB of the file are free pages, which later writes reuse\n",
               db, (unsigned long long)r->chunks, seconds, (double)r->free_bytes / 1048576.0);
    }
}

int cmd_relayout(int argc, char **argv)
{
    ropts_t o = {.data = AB_BROKER_DEFAULT_DATA};
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? AB_EXIT_OK : rc;
    char db[4200];
    struct stat sb;
    snprintf(db, sizeof db, "%s/%s", o.data, AB_STORE_DB_NAME);
    if (stat(db, &sb) != 0) { /* invariant 1 */
        fprintf(stderr, "agentbus relayout: no store in %s (no %s there)\n", o.data,
                AB_STORE_DB_NAME);
        return AB_EXIT_FAIL;
    }
    ab_store_opts_t so = {.exclusive = true};
    ab_store_t *st = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_store_relayout_t r = {0};
    progress_t p = {.start = now_s()};
    p.last = p.start;
    ab_status_t s = ab__store_open(&st, o.data, &so, &err);
    if (s == AB_OK)
        s = ab__store_relayout(st, on_progress, &p, &r, &err);
    ab__store_close(&st);
    if (s != AB_OK) {
        fprintf(stderr, "agentbus relayout: %s\n", err.message);
        return AB_EXIT_FAIL;
    }
    print_result(db, &r, now_s() - p.start, o.json);
    return AB_EXIT_OK;
}

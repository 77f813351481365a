/*
 * restart_bench.c - how long a broker takes to start on a store of a given
 * size, and where that time goes (see docs/OPERATIONS.md "Restart time" and
 * docs/PERFORMANCE.md "Restart").
 *
 * Usage: restart_bench AGENTBUS_BIN DIR [--starts N] [--crash EVENTS] SIZE...
 *   SIZE...        store sizes in events, ascending (e.g. 64000 1000000 2000000)
 *   --starts N     broker starts timed per size (default 7; the median is shown)
 *   --crash EVENTS after the last size, 3 times: a child process appends EVENTS
 *                  more and exits without closing (leaving its WAL); the
 *                  writer's open without quick_check is timed (WAL recovery);
 *                  then the same again with one broker start timed
 *
 * The store in DIR (emptied first) is grown through the persistence plugin:
 * 256-byte events over 100 runs of one thread, round robin, batches of 4000,
 * durability process. For each size it prints the database size, the
 * in-process cost of the store opens the broker makes (writer with and
 * without quick_check, a reader beside the writer, a reader alone; median of
 * 3) and the time from fork/exec of `AGENTBUS_BIN broker` to its ready line
 * (then SIGTERM and reap; its log goes to /dev/null), as median, min and max
 * of N starts.
 *
 * Invariants:
 *  1. No store handle of this process is open while a broker child runs or
 *     when it forks (a forked child must not share SQLite's lock table).
 *  2. A failed call aborts with its message: no figure without its store.
 */
#include "ab_common.h"
#include "agentbus/plugin.h"
#include "loader.h"
#include "store.h"
#define TOOL_NAME "restart_bench"
#include "tool.h"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUNS     100
#define EV_BYTES 256
#define BATCH    4000
#define MAXSIZES 16

static long long file_bytes(const char *dir, const char *name)
{
    char p[1024];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0 ? (long long)sb.st_size : 0;
}

static char run_names[RUNS][16];
static uint64_t seqs[RUNS];
static size_t next_run;

/* Append @p n events (a multiple of BATCH) through the plugin's writer. */
static void grow(const ab_plugin_t *p, const char *dir, size_t n)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_plugin_open_opts_t o = {.data_dir = dir, .durability = AB_DURABILITY_PROCESS};
    ab_plugin_db_t *db = NULL;
    if (p->open(&o, &db, &err) != AB_OK)
        die("open", &err);
    static uint8_t body[EV_BYTES];
    memset(body, 'x', sizeof body);
    static ab_append_event_t evs[BATCH];
    for (size_t done = 0; done < n; done += BATCH) {
        for (size_t i = 0; i < BATCH; i++) {
            size_t r = next_run++ % RUNS;
            evs[i] = (ab_append_event_t){
                .thread = {"bench-thread", 12},
                .run = {run_names[r], strlen(run_names[r])},
                .seq = ++seqs[r],
                .epoch = 1,
                .bytes = body,
                .len = sizeof body,
                .status = seqs[r] == 1 ? AB_RUN_STATUS_ACTIVE : AB_RUN_STATUS_UNKNOWN,
            };
        }
        uint64_t first = 0;
        if (p->append_batch(db, evs, BATCH, 1, &first, &err) != AB_OK)
            die("append_batch", &err);
    }
    p->close(db);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Time one ab__store_open(); @p beside: with an exclusive writer open. */
static double time_open(const char *dir, ab_store_opts_t o, bool beside)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *owner = NULL, *st = NULL;
    ab_store_opts_t ow = {.exclusive = true, .durability = AB_DURABILITY_PROCESS};
    if (beside && ab__store_open(&owner, dir, &ow, &err) != AB_OK)
        die("open owner", &err);
    double t[3];
    for (int i = 0; i < 3; i++) {
        double t0 = 1e3 * ab__mono_s();
        if (ab__store_open(&st, dir, &o, &err) != AB_OK)
            die("open", &err);
        t[i] = 1e3 * ab__mono_s() - t0;
        ab__store_close(&st);
    }
    ab__store_close(&owner);
    qsort(t, 3, sizeof t[0], cmp_double);
    return t[1];
}

/* fork/exec the broker, wait for its ready line; returns ms, or -1. Stops it. */
static double time_start(const char *bin, const char *dir)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    double t0 = 1e3 * ab__mono_s();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        if (freopen("/dev/null", "w", stderr) == NULL)
            _exit(126);
        execl(bin, bin, "broker", "--data", dir, "--cmd", "tcp://127.0.0.1:*", "--events",
              "tcp://127.0.0.1:*", "--durability", "process", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char buf[1024];
    size_t used = 0;
    double ms = -1;
    while (pid > 0 && used + 1 < sizeof buf) {
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        if (poll(&pfd, 1, 60000) <= 0)
            break;
        ssize_t n = read(fds[0], buf + used, sizeof buf - 1 - used);
        if (n <= 0)
            break;
        used += (size_t)n;
        buf[used] = '\0';
        if (strstr(buf, "agentbus broker ready") && strchr(buf, '\n')) {
            ms = 1e3 * ab__mono_s() - t0;
            break;
        }
    }
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    close(fds[0]);
    return ms;
}

static void report_size(const char *bin, const char *dir, size_t events, int starts)
{
    ab_store_opts_t w = {.exclusive = true, .durability = AB_DURABILITY_PROCESS};
    ab_store_opts_t wskip = w, r = {.readonly = true};
    wskip.skip_quick_check = true;
    double wc = time_open(dir, w, false), ws = time_open(dir, wskip, false);
    double rb = time_open(dir, r, true), ra = time_open(dir, r, false);
    double t[64];
    int n = starts < 64 ? starts : 64;
    for (int i = 0; i < n; i++)
        if ((t[i] = time_start(bin, dir)) < 0) {
            fprintf(stderr, "restart_bench: no ready line from %s on %s\n", bin, dir);
            exit(1);
        }
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    printf("%9zu events %6.0f MB | open: writer %7.1f ms (no check %5.1f), reader beside "
           "writer %5.1f, reader alone %7.1f | broker ready: median %7.1f ms, min %7.1f, "
           "max %7.1f (n=%d)\n",
           events, (double)file_bytes(dir, AB_STORE_DB_NAME) / 1e6, wc, ws, rb, ra, t[n / 2], t[0],
           t[n - 1], n);
    fflush(stdout);
}

/* A child appends @p events and exits without closing, leaving its WAL (invariant 1). */
static void crash_child(const ab_plugin_t *p, const char *dir, size_t events)
{
    pid_t pid = fork();
    if (pid == 0) {
        ab_error_t err = AB_ERROR_INIT;
        ab_plugin_open_opts_t o = {.data_dir = dir, .durability = AB_DURABILITY_PROCESS};
        ab_plugin_db_t *w = NULL;
        if (p->open(&o, &w, &err) != AB_OK)
            die("open (crash child)", &err);
        static uint8_t body[EV_BYTES];
        memset(body, 'x', sizeof body);
        static ab_append_event_t evs[BATCH];
        for (size_t done = 0; done < events; done += BATCH) {
            for (size_t i = 0; i < BATCH; i++) {
                size_t r = next_run++ % RUNS;
                evs[i] = (ab_append_event_t){.thread = {"bench-thread", 12},
                                             .run = {run_names[r], strlen(run_names[r])},
                                             .seq = ++seqs[r],
                                             .epoch = 1,
                                             .bytes = body,
                                             .len = sizeof body};
            }
            uint64_t first = 0;
            if (p->append_batch(w, evs, BATCH, 1, &first, &err) != AB_OK)
                die("append_batch (crash child)", &err);
        }
        _exit(0); /* no close: the WAL stays as a crash leaves it */
    }
    waitpid(pid, NULL, 0);
    for (size_t i = 0; i < events; i++) /* what the child appended, in the same order */
        seqs[next_run++ % RUNS]++;
}

/* After a crash: the writer's open without quick_check (WAL recovery), and
 * after another crash of the same size, one broker start. */
static void report_crash(const ab_plugin_t *p, const char *bin, const char *dir, size_t events)
{
    crash_child(p, dir, events);
    long long wal = file_bytes(dir, AB_STORE_DB_NAME "-wal");
    ab_store_opts_t o = {
        .exclusive = true, .durability = AB_DURABILITY_PROCESS, .skip_quick_check = true};
    ab_store_t *st = NULL;
    ab_error_t err = AB_ERROR_INIT;
    double t0 = 1e3 * ab__mono_s();
    if (ab__store_open(&st, dir, &o, &err) != AB_OK)
        die("open after a crash", &err);
    double recover = 1e3 * ab__mono_s() - t0;
    ab__store_close(&st);
    crash_child(p, dir, events);
    long long wal2 = file_bytes(dir, AB_STORE_DB_NAME "-wal");
    double ms = time_start(bin, dir);
    printf("after a crash (db %6.0f MB): writer open without quick_check %6.1f ms (WAL %4.0f "
           "MB); broker ready %7.1f ms (WAL %4.0f MB)\n",
           (double)file_bytes(dir, AB_STORE_DB_NAME) / 1e6, recover, (double)wal / 1e6, ms,
           (double)wal2 / 1e6);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr,
                "usage: restart_bench AGENTBUS_BIN DIR [--starts N] [--crash EVENTS] SIZE...\n");
        return 2;
    }
    const char *bin = argv[1], *dir = argv[2];
    int starts = 7;
    size_t crash = 0, sizes[MAXSIZES], nsizes = 0;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--starts") == 0 && i + 1 < argc)
            starts = atoi(argv[++i]);
        else if (strcmp(argv[i], "--crash") == 0 && i + 1 < argc)
            crash = (size_t)strtoull(argv[++i], NULL, 10) / BATCH * BATCH;
        else if (nsizes < MAXSIZES)
            sizes[nsizes++] = (size_t)strtoull(argv[i], NULL, 10) / BATCH * BATCH;
    }
    if (starts < 1)
        starts = 1;
    for (int r = 0; r < RUNS; r++)
        snprintf(run_names[r], sizeof run_names[r], "run-%03d", r);
    const ab_plugin_t *p = ab__plugin_sqlite();
    empty_dir(dir);
    size_t have = 0;
    for (size_t i = 0; i < nsizes; i++) {
        if (sizes[i] > have) {
            grow(p, dir, sizes[i] - have);
            have = sizes[i];
        }
        report_size(bin, dir, have, starts);
    }
    for (int i = 0; crash > 0 && i < 3; i++)
        report_crash(p, bin, dir, crash);
    return 0;
}

/*
 * restart_bench.c - how long a broker takes to start on a store of a given
 * size, and where that time goes (see docs/OPERATIONS.md "Restart time" and
 * docs/PERFORMANCE.md "Restart").
 *
 * Usage: restart_bench AGENTBUS_BIN DIR [--starts N] [--probe] [--crash EVENTS] SIZE...
 *   SIZE...        store sizes in events, ascending (e.g. 64000 1000000 2000000)
 *   --starts N     broker starts timed per size (default 7; the median is shown)
 *   --probe        at each size, also what a client feels on a store that big
 *                  (probe.c): a run of PROBE_EVENTS real envelopes is appended
 *                  through the plugin, then a broker (fsync durability) is
 *                  started and asked to replay it (events/s), and one producer
 *                  publishes PROBE_ACKS events of a new run one at a time, at
 *                  most 1,000 a second (publish -> `published` p50, p99, p99.9,
 *                  max, and how many took over 5 and over 10 ms)
 *   --acks N       the probe's publishes (default PROBE_ACKS, 2,000; 300000 is
 *                  the five minutes of issue 15's "no publish over 10 ms")
 *   --floor        after each size's probes, the floor on DIR's disk at the same
 *                  pace and count: a write + fdatasync of 4,120 bytes (a WAL
 *                  frame) per millisecond, the file rewritten from its start
 *                  every 16,384 writes as a WAL is; same figures as the probe
 *   --vs BIN2      the probe also with the broker BIN2 (another build) on the
 *                  same store, alternating with AGENTBUS_BIN: A B A B ...
 *   --rounds N     probes per binary and size (default 1), alternating
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
#include "agentbus/client.h"
#include "agentbus/plugin.h"
#include "loader.h"
#include "store.h"
#define TOOL_NAME "restart_bench"
#include "tool.h"

#include <dirent.h>
#include <fcntl.h>
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

/*
 * fork/exec the broker (@p durability), wait for its ready line; returns ms,
 * or -1. With @p keep the broker is left running: its pid in *keep, its
 * command endpoint in @p ep (@p eplen bytes); else it is stopped.
 */
static double start_broker(const char *bin, const char *dir, const char *durability, pid_t *keep,
                           char *ep, size_t eplen)
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
        /* AB_BENCH_BROKER_LOG=FILE: the brokers log at debug to FILE (slow groups, snapshot
         * stores: for naming stalls), else their stderr is dropped */
        const char *log = getenv("AB_BENCH_BROKER_LOG");
        if (freopen(log && *log ? log : "/dev/null", log && *log ? "a" : "w", stderr) == NULL)
            _exit(126);
        execl(bin, bin, "broker", "--data", dir, "--cmd", "tcp://127.0.0.1:*", "--events",
              "tcp://127.0.0.1:*", "--durability", durability, "--log-level",
              log && *log ? "debug" : "info", (char *)NULL);
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
    const char *cmd = ms >= 0 ? strstr(buf, "cmd=") : NULL;
    if (keep != NULL && cmd != NULL) {
        snprintf(ep, eplen, "%.*s", (int)strcspn(cmd + 4, " \n"), cmd + 4);
        *keep = pid;
    } else if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    close(fds[0]);
    return keep != NULL && cmd == NULL ? -1 : ms;
}

static double time_start(const char *bin, const char *dir)
{
    return start_broker(bin, dir, "process", NULL, NULL, 0);
}

/* ---- --probe: replay and publish latency on a store of this size ------------------ */

#define PROBE_EVENTS 100000
#define PROBE_ACKS   2000 /* default of --acks */

static size_t probe_acks_n = PROBE_ACKS; /* --acks N */

/* A real envelope (about 256 bytes) of @p run's event @p seq: RUN_STARTED, then text. */
static void probe_envelope(ab_buf_t *out, const char *thread, const char *run, uint64_t seq)
{
    char json[512];
    ab_error_t err = AB_ERROR_INIT;
    if (seq == 1)
        snprintf(json, sizeof json,
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                 "\"protocolVersion\":\"1.0\"}",
                 thread, run);
    else if (seq == 2)
        snprintf(json, sizeof json,
                 "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\",\"role\":\"assistant\"}");
    else
        snprintf(json, sizeof json,
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"%0160llu\"}",
                 (unsigned long long)seq);
    ab_buf_reset(out);
    if (ab_envelope_json(out, 1, thread, run, seq, 1, json, &err) != AB_OK)
        die("envelope", &err);
}

/* Append the probe run (PROBE_EVENTS envelopes) of size @p k through the plugin. */
static void probe_grow(const ab_plugin_t *p, const char *dir, const char *thread, const char *run)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_plugin_open_opts_t o = {.data_dir = dir, .durability = AB_DURABILITY_PROCESS};
    ab_plugin_db_t *db = NULL;
    if (p->open(&o, &db, &err) != AB_OK)
        die("open (probe)", &err);
    static ab_buf_t env[BATCH];
    static ab_append_event_t evs[BATCH];
    for (uint64_t seq = 1; seq <= PROBE_EVENTS; seq += BATCH) {
        for (size_t i = 0; i < BATCH; i++) {
            probe_envelope(&env[i], thread, run, seq + i);
            evs[i] = (ab_append_event_t){.thread = {thread, strlen(thread)},
                                         .run = {run, strlen(run)},
                                         .seq = seq + i,
                                         .epoch = 1,
                                         .bytes = env[i].data,
                                         .len = env[i].len,
                                         .status = seq + i == 1 ? AB_RUN_STATUS_ACTIVE
                                                                : AB_RUN_STATUS_UNKNOWN};
        }
        uint64_t first = 0;
        if (p->append_batch(db, evs, BATCH, 1, &first, &err) != AB_OK)
            die("append_batch (probe)", &err);
    }
    for (size_t i = 0; i < BATCH; i++)
        ab_buf_free(&env[i]);
    p->close(db);
}

static ab_status_t probe_count(void *ud, const ab_stamp_t *st, const uint8_t *ev, size_t len,
                               ab_error_t *err)
{
    (void)st, (void)ev, (void)len, (void)err;
    ++*(uint64_t *)ud;
    return AB_OK;
}

/* Replay the probe run; events/s. */
static double probe_replay(ab_conn_t *c, const char *thread, const char *run)
{
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay.scope = AB_REPLAY_RUN;
    q.u.replay.thread = (ab_str_t){thread, strlen(thread)};
    q.u.replay.run = (ab_str_t){run, strlen(run)};
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    uint64_t got = 0;
    if (ab_doc_new(&doc) != AB_OK)
        exit(1);
    double t0 = ab__mono_s();
    if (ab_conn_replay(c, &q, probe_count, &got, doc, NULL, 30000, &err) != AB_OK)
        die("replay (probe)", &err);
    double dt = ab__mono_s() - t0;
    ab_doc_destroy(&doc);
    if (got != PROBE_EVENTS) {
        fprintf(stderr, "restart_bench: the probe replay gave %llu events of %d\n",
                (unsigned long long)got, PROBE_EVENTS);
        exit(1);
    }
    return (double)got / dt;
}

/* probe_acks_n publishes of one event each, one in flight, at most 1,000/s: sorted us in @p t. */
static void probe_acks(ab_conn_t *c, const char *thread, const char *run, double *t)
{
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_claimed_t cl;
    ab_buf_t env = AB_BUF_INIT;
    if (ab_doc_new(&doc) != AB_OK || ab_conn_claim(c, thread, run, doc, &cl, 10000, &err) != AB_OK)
        die("claim (probe)", &err);
    double next = ab__mono_s();
    for (size_t i = 0; i < probe_acks_n; i++) {
        while (ab__mono_s() < next)
            ; /* pace: a publish at most every millisecond (the light load of bench latency) */
        next += 0.001;
        probe_envelope(&env, thread, run, (uint64_t)i + 1);
        const ab_result_t *res = NULL;
        double t0 = ab__mono_s();
        if (ab_conn_publish(c, &env, 1, doc, &res, 10000, &err) != AB_OK)
            die("publish (probe)", &err);
        t[i] = 1e6 * (ab__mono_s() - t0);
        if (res[0].status != AB_RESULT_ACCEPTED) {
            fprintf(stderr, "restart_bench: probe publish %zu not accepted: %s\n", i + 1,
                    res[0].error ? res[0].error->message : "(no error)");
            exit(1);
        }
    }
    ab_buf_free(&env);
    ab_doc_destroy(&doc);
    qsort(t, probe_acks_n, sizeof t[0], cmp_double);
}

/* The figures of @p n sorted latencies in us @p t, after @p head, as one line on stdout. */
static void print_tail(const char *head, const double *t, size_t n)
{
    size_t over5 = 0, over10 = 0;
    for (size_t i = 0; i < n; i++) {
        over5 += t[i] > 5000;
        over10 += t[i] > 10000;
    }
    printf("%s: p50 %6.0f us, p99 %6.0f us, p99.9 %6.0f us, max %7.0f us, %zu over 5 ms, %zu over "
           "10 ms (n=%zu)\n",
           head, t[n / 2], t[n * 99 / 100], t[n * 999 / 1000], t[n - 1], over5, over10, n);
    fflush(stdout);
}

/* --floor: probe_acks_n write + fdatasync of a WAL frame, paced as the probe's publishes. */
static void probe_floor(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/floor.tmp", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    size_t n = probe_acks_n;
    double *t = malloc(n * sizeof(*t));
    if (fd < 0 || t == NULL) {
        fprintf(stderr, "restart_bench: cannot write %s\n", path);
        exit(1);
    }
    static char frame[4120];
    memset(frame, 'f', sizeof frame);
    double next = ab__mono_s();
    for (size_t i = 0; i < n; i++) {
        while (ab__mono_s() < next)
            ; /* the probe's pace */
        next += 0.001;
        off_t at = (off_t)(i % 16384) * (off_t)sizeof frame;
        double t0 = ab__mono_s();
        if (pwrite(fd, frame, sizeof frame, at) != (ssize_t)sizeof frame || fdatasync(fd) != 0) {
            fprintf(stderr, "restart_bench: write + fdatasync of %s failed\n", path);
            exit(1);
        }
        t[i] = 1e6 * (ab__mono_s() - t0);
    }
    close(fd);
    unlink(path);
    qsort(t, n, sizeof t[0], cmp_double);
    print_tail("          floor: write + fdatasync of 4120 B, <= 1,000/s", t, n);
    free(t);
}

static pid_t probe_pid = -1; /* the probe's broker while it runs */

static void stop_probe_broker(void)
{
    if (probe_pid > 0) {
        kill(probe_pid, SIGTERM);
        waitpid(probe_pid, NULL, 0);
        probe_pid = -1;
    }
}

/* The probe of size index @p k (invariant 1: the plugin is closed before the broker starts);
 * @return the events it added to the store. */
static size_t probe_size(const ab_plugin_t *p, const char *bin, const char *dir, size_t k,
                         const char *label)
{
    char thread[48], run[48], ack_run[48], ep[256];
    snprintf(thread, sizeof thread, "probe-thread-%zu", k);
    snprintf(run, sizeof run, "probe-%zu", k);
    snprintf(ack_run, sizeof ack_run, "ack-%zu", k);
    probe_grow(p, dir, thread, run);
    pid_t pid = -1;
    static bool registered;
    if (!registered) /* a failed probe exits: its broker must not outlive it */
        registered = atexit(stop_probe_broker) == 0;
    if (start_broker(bin, dir, "fsync", &pid, ep, sizeof ep) < 0) {
        fprintf(stderr, "restart_bench: no ready line from the probe broker\n");
        exit(1);
    }
    probe_pid = pid;
    ab_conn_t *c = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_conn_opts_t co = {.client_name = "restart-bench", .timeout_ms = 10000};
    if (ab_conn_new(&c, ep, &co, &err) != AB_OK)
        die("connect (probe)", &err);
    double rate = probe_replay(c, thread, run);
    size_t n = probe_acks_n;
    double *t = malloc(n * sizeof(*t));
    if (t == NULL)
        exit(1);
    probe_acks(c, thread, ack_run, t);
    ab_conn_destroy(&c);
    stop_probe_broker();
    char head[160];
    snprintf(head, sizeof head,
             "          probe %s: replay of one run of %d events %9.0f events/s | publish -> "
             "published, 1 event, fsync, <= 1,000/s",
             label, PROBE_EVENTS, rate);
    print_tail(head, t, n);
    free(t);
    return PROBE_EVENTS + n;
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
        fprintf(
            stderr,
            "usage: restart_bench AGENTBUS_BIN DIR [--starts N] [--probe [--acks N] [--vs BIN2] "
            "[--rounds N] [--floor]] "
            "[--crash EVENTS] SIZE...\n");
        return 2;
    }
    const char *bin = argv[1], *dir = argv[2], *vs = NULL;
    int starts = 7, rounds = 1;
    bool probe = false, floor_too = false;
    size_t crash = 0, sizes[MAXSIZES], nsizes = 0;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--starts") == 0 && i + 1 < argc)
            starts = atoi(argv[++i]);
        else if (strcmp(argv[i], "--probe") == 0)
            probe = true;
        else if (strcmp(argv[i], "--acks") == 0 && i + 1 < argc)
            probe_acks_n = (size_t)strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--floor") == 0)
            floor_too = true;
        else if (strcmp(argv[i], "--vs") == 0 && i + 1 < argc)
            vs = argv[++i];
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--crash") == 0 && i + 1 < argc)
            crash = (size_t)strtoull(argv[++i], NULL, 10) / BATCH * BATCH;
        else if (nsizes < MAXSIZES)
            sizes[nsizes++] = (size_t)strtoull(argv[i], NULL, 10) / BATCH * BATCH;
    }
    if (probe_acks_n < 1)
        probe_acks_n = 1;
    if (starts < 1)
        starts = 1;
    if (rounds < 1)
        rounds = 1;
    for (int r = 0; r < RUNS; r++)
        snprintf(run_names[r], sizeof run_names[r], "run-%03d", r);
    const ab_plugin_t *p = ab__plugin_sqlite();
    empty_dir(dir);
    size_t have = 0, nprobe = 0;
    for (size_t i = 0; i < nsizes; i++) {
        if (sizes[i] > have) {
            grow(p, dir, sizes[i] - have);
            have = sizes[i];
        }
        report_size(bin, dir, have, starts);
        for (int r = 0; probe && r < rounds; r++) { /* alternating pairs: A B A B */
            have += probe_size(p, bin, dir, nprobe++, "A");
            if (vs != NULL)
                have += probe_size(p, vs, dir, nprobe++, "B");
        }
        if (probe && floor_too)
            probe_floor(dir);
    }
    for (int i = 0; crash > 0 && i < 3; i++)
        report_crash(p, bin, dir, crash);
    return 0;
}

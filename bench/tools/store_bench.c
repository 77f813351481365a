/*
 * store_bench.c - throughput of the persistence plugin's append_batch and
 * replay reads, next to a raw SQLite ceiling (see docs/STORE.md).
 *
 * Usage: store_bench [dir] [events] [fsync|process batch [read|relayout]]
 *        (defaults: /tmp/ab_store_bench, 400000, every case)
 *
 * Workload: 256-byte events over 100 runs of one thread, interleaved round
 * robin, in batches of 100, 1000 and 4000 events, at fsync and process
 * durability, each in a fresh database. Then replay of the last database:
 * the head of every run, then every run by RUN scope and the thread by
 * THREAD scope, 1000 rows a page.
 * With `relayout` instead: half the events, the store made one of schema 4
 * and migrated, the other half, reads, ab__store_relayout() timed, reads.
 *
 * Invariants:
 *  1. Every database starts empty (the directory is emptied first) and is
 *     written through the public plugin table only (raw ceiling and the
 *     relayout's schema-4 store and ab__store_relayout() aside).
 *  2. A failed call aborts the program with its message: no number is
 *     printed for a run that did not store everything.
 */
#include "ab_common.h"
#include "agentbus/plugin.h"
#include "loader.h"
#include "store.h"
#include "store_int.h"
#define TOOL_NAME "store_bench"
#include "tool.h"

#include <dirent.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RUNS_DEFAULT 100
#define EV_BYTES     256
#define PAGE         1000

static size_t g_runs = RUNS_DEFAULT;
static bool g_thread_each; /* every run in a thread of its own */
static bool g_warm;        /* every run gets two events before the clock */
static bool g_scatter;     /* timed events go to runs 7919 apart, not round robin */
static bool g_append_only; /* no raw ceilings */
static char (*run_names)[32];

/* The bytes this process has caused to be written to storage (/proc/self/io). */
static uint64_t io_written(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    char line[128];
    unsigned long long v = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "write_bytes: %llu", &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

typedef struct append_res {
    double rate;      /* events/s */
    double io_per_ev; /* bytes written to storage per event */
} append_res_t;

static ab_str_t thread_of(size_t r)
{
    if (g_thread_each)
        return (ab_str_t){run_names[r], strlen(run_names[r])};
    return (ab_str_t){"bench-thread", 12};
}

/* Append @p total events (after the warm-up) in batches of @p batch to the open @p db, each
 * run's seqs going on from @p seq (g_runs entries); the clock and the bytes written start
 * after the warm-up. */
static append_res_t append_events(const ab_plugin_t *p, ab_plugin_db_t *db, size_t batch,
                                  size_t total, size_t warm, uint64_t *seq)
{
    ab_error_t err = AB_ERROR_INIT;
    static uint8_t body[EV_BYTES];
    memset(body, 'x', sizeof body);
    ab_append_event_t *evs = calloc(batch, sizeof *evs);
    if (!evs)
        die("alloc", &(ab_error_t){.code = AB_NOMEM, .message = "out of memory"});
    size_t next_run = 0;
    uint64_t io0 = io_written();
    double t0 = ab__mono_s();
    for (size_t done = 0, n = 0; done < warm + total; done += n) {
        if (done == warm && warm > 0) { /* the runs are in flight: the clock starts */
            io0 = io_written();
            t0 = ab__mono_s();
        }
        /* the warm-up's last batch ends at warm exactly, so the clock starts after it */
        size_t end = done < warm ? warm : warm + total;
        n = end - done < batch ? end - done : batch;
        for (size_t i = 0; i < n; i++) {
            size_t k = next_run++;
            size_t r = g_scatter && k >= warm ? (k * 7919) % g_runs : k % g_runs;
            evs[i] = (ab_append_event_t){
                .thread = thread_of(r),
                .run = {run_names[r], strlen(run_names[r])},
                .seq = ++seq[r],
                .epoch = 1,
                .bytes = body,
                .len = sizeof body,
                .status = seq[r] == 1 ? AB_RUN_STATUS_ACTIVE : AB_RUN_STATUS_UNKNOWN,
            };
        }
        uint64_t first = 0;
        if (p->append_batch(db, evs, n, 1, &first, &err) != AB_OK)
            die("append_batch", &err);
    }
    append_res_t res = {.rate = (double)total / (ab__mono_s() - t0)};
    res.io_per_ev = (double)(io_written() - io0) / (double)total;
    free(evs);
    return res;
}

static ab_plugin_db_t *open_writer(const ab_plugin_t *p, const char *dir, ab_durability_t dur)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_plugin_open_opts_t o = {.data_dir = dir, .durability = dur};
    ab_plugin_db_t *db = NULL;
    if (p->open(&o, &db, &err) != AB_OK)
        die("open", &err);
    return db;
}

static append_res_t bench_append(const ab_plugin_t *p, const char *dir, ab_durability_t dur,
                                 size_t batch, size_t total)
{
    empty_dir(dir);
    ab_plugin_db_t *db = open_writer(p, dir, dur);
    uint64_t *seq = calloc(g_runs, sizeof *seq);
    if (!seq)
        die("alloc", &(ab_error_t){.code = AB_NOMEM, .message = "out of memory"});
    append_res_t res = append_events(p, db, batch, total, g_warm ? 2 * g_runs : 0, seq);
    free(seq);
    p->close(db);
    return res;
}

/*
 * Plain INSERTs of 256-byte blobs into a rowid table, same pragmas: a row per
 * event. With @p indexed the table also has the store's two chunk indexes (by
 * run and seq, by thread) filled as the workload's runs and threads would fill
 * them: the ceiling of any layout that stores a row per event and finds a
 * run's rows by an index, which is what the store's chunks become when every
 * event of a commit is of another run.
 */
static double bench_raw(const char *dir, size_t batch, size_t total, ab_durability_t dur,
                        bool indexed)
{
    empty_dir(dir);
    char path[1024];
    snprintf(path, sizeof path, "%s/raw.db", dir);
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    sqlite3_open(path, &db);
    sqlite3_exec(db,
                 dur == AB_DURABILITY_PROCESS
                     ? "PRAGMA page_size=8192; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                     : "PRAGMA page_size=8192; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
                 NULL, NULL, NULL);
    sqlite3_exec(db,
                 "PRAGMA cache_size=-65536; PRAGMA wal_autocheckpoint=8192;"
                 "CREATE TABLE e(pos INTEGER PRIMARY KEY, run INTEGER, thread INTEGER,"
                 " seq INTEGER, b BLOB)",
                 NULL, NULL, NULL);
    if (indexed)
        sqlite3_exec(db,
                     "CREATE UNIQUE INDEX e_run ON e(run, seq, pos);"
                     "CREATE INDEX e_thread ON e(thread);",
                     NULL, NULL, NULL);
    sqlite3_prepare_v2(db, "INSERT INTO e VALUES(?1, ?2, ?3, ?4, ?5)", -1, &q, NULL);
    static uint8_t body[EV_BYTES];
    memset(body, 'x', sizeof body);
    uint64_t *seq = calloc(g_runs, sizeof *seq);
    size_t next_run = 0;
    double t0 = ab__mono_s();
    sqlite3_int64 pos = 1;
    for (size_t done = 0; seq && done < total; done += batch) {
        sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
        for (size_t i = 0; i < batch; i++) {
            size_t r = next_run++ % g_runs;
            sqlite3_bind_int64(q, 1, pos++);
            sqlite3_bind_int64(q, 2, (sqlite3_int64)r);
            sqlite3_bind_int64(q, 3, g_thread_each ? (sqlite3_int64)r : 0);
            sqlite3_bind_int64(q, 4, (sqlite3_int64)++seq[r]);
            sqlite3_bind_blob(q, 5, body, sizeof body, SQLITE_STATIC);
            if (sqlite3_step(q) != SQLITE_DONE) {
                fprintf(stderr, "store_bench: raw insert: %s\n", sqlite3_errmsg(db));
                exit(1);
            }
            sqlite3_reset(q);
        }
        sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    }
    double rate = (double)total / (ab__mono_s() - t0);
    free(seq);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return rate;
}

typedef struct cursor {
    uint64_t seq, pos;
} cursor_t;

static int on_row(void *ud, const ab_row_t *row)
{
    cursor_t *c = ud;
    c->seq = row->seq;
    c->pos = row->pos;
    return 0;
}

/* Page through one scope to its end; returns the rows read. */
static size_t read_scope(const ab_plugin_t *p, ab_plugin_db_t *db, ab_read_t req)
{
    ab_error_t err = AB_ERROR_INIT;
    size_t rows = 0;
    for (;;) {
        cursor_t c = {0};
        uint32_t n = 0;
        if (p->read(db, &req, on_row, &c, &n, &err) != AB_OK)
            die("read", &err);
        rows += n;
        if (n < req.limit)
            return rows;
        req.after_seq = c.seq;
        req.after_pos = c.pos;
    }
}

/* The generations in the store's tails logs (docs/STORE.md "Tails in two levels"). */
static long long log_generations(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/" AB_STORE_DB_NAME, dir);
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    long long n = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT count(*) FROM tails_gens", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        n = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return n;
}

/* The head of every run, each a read of its tail (through the logs' generations). */
static void bench_heads(const ab_plugin_t *p, ab_plugin_db_t *db, const char *dir)
{
    ab_error_t err = AB_ERROR_INIT;
    double t0 = ab__mono_s();
    for (size_t r = 0; r < g_runs; r++) {
        ab_run_head_t h;
        if (p->head(db, thread_of(r), (ab_str_t){run_names[r], strlen(run_names[r])}, &h, &err) !=
            AB_OK)
            die("head", &err);
    }
    printf("head of every run %7zu heads %9.0f heads/s (tails logs: %lld generations)\n", g_runs,
           (double)g_runs / (ab__mono_s() - t0), log_generations(dir));
}

static void bench_reads(const ab_plugin_t *p, const char *dir, size_t total)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_plugin_open_opts_t o = {.data_dir = dir, .readonly = true};
    ab_plugin_db_t *db = NULL;
    if (p->open(&o, &db, &err) != AB_OK)
        die("open reader", &err);
    bench_heads(p, db, dir);
    double t0 = ab__mono_s();
    size_t rows = 0;
    for (size_t r = 0; r < g_runs; r++) {
        ab_read_t req = {.scope = AB_REPLAY_RUN,
                         .thread = thread_of(r),
                         .run = {run_names[r], strlen(run_names[r])},
                         .limit = PAGE};
        rows += read_scope(p, db, req);
    }
    double t1 = ab__mono_s();
    printf("read RUN scope    %7zu rows  %10.0f rows/s\n", rows, (double)rows / (t1 - t0));
    size_t stored = total + (g_warm ? 2 * g_runs : 0); /* the warm-up's events too */
    if (rows != stored)
        fprintf(stderr, "store_bench: RUN scope: expected %zu rows\n", stored);
    if (!g_thread_each) {
        ab_read_t req = {.scope = AB_REPLAY_THREAD, .thread = thread_of(0), .limit = PAGE};
        rows = read_scope(p, db, req);
        printf("read THREAD scope %7zu rows  %10.0f rows/s\n", rows,
               (double)rows / (ab__mono_s() - t1));
        if (rows != stored)
            fprintf(stderr, "store_bench: THREAD scope: expected %zu rows\n", stored);
    }
    p->close(db);
}

/* `relayout` (docs/PERFORMANCE.md "Relayout of a migrated store"): half the events written
 * by this build, the store turned into one of schema 4 and migrated by a writer's open (the
 * links after the data), the other half written after the migration (chained chunks, which
 * reads walk); read; ab__store_relayout() timed; read again. */
static void bench_relayout(const ab_plugin_t *p, const char *dir, ab_durability_t dur, size_t batch,
                           size_t total)
{
    empty_dir(dir);
    uint64_t *seq = calloc(g_runs, sizeof *seq);
    if (!seq)
        die("alloc", &(ab_error_t){.code = AB_NOMEM, .message = "out of memory"});
    ab_plugin_db_t *db = open_writer(p, dir, dur);
    append_events(p, db, batch, total / 2, 0, seq);
    p->close(db);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, AB_STORE_DB_NAME);
    sqlite3 *raw = NULL;
    if (sqlite3_open(path, &raw) != SQLITE_OK ||
        sqlite3_exec(raw, AB__TO_V4_SQL, NULL, NULL, NULL) != SQLITE_OK) {
        fprintf(stderr, "store_bench: cannot make %s a schema-4 store: %s\n", path,
                sqlite3_errmsg(raw));
        exit(1);
    }
    sqlite3_close(raw);
    db = open_writer(p, dir, dur); /* migrates 4 -> 5: the links after the data */
    append_events(p, db, batch, total - total / 2, 0, seq);
    free(seq);
    printf("migrated from schema 4 at half the events, links after the data:\n");
    bench_reads(p, dir, total);
    ab_error_t err = AB_ERROR_INIT;
    ab_store_relayout_t r;
    double t0 = ab__mono_s();
    if (ab__store_relayout((ab_store_t *)db, NULL, NULL, &r, &err) != AB_OK)
        die("relayout", &err);
    printf("relayout          %7llu chunks %9.2f s\n", (unsigned long long)r.chunks,
           ab__mono_s() - t0);
    p->close(db);
    printf("relaid out, links before the data:\n");
    bench_reads(p, dir, total);
}

static void print_append(const char *dur, size_t batch, append_res_t r)
{
    printf("append_batch %-7s batch %4zu  %10.0f events/s  %8.0f bytes written/event\n", dur, batch,
           r.rate, r.io_per_ev);
}

/* AB_STORE_BENCH_RUNS (1..1000000) and AB_STORE_BENCH_THREAD_EACH=1 shape the workload;
 * AB_STORE_BENCH_WARM=1 starts every run (two events) before the clock, AB_STORE_BENCH_SCATTER=1
 * sends the timed events to runs 7919 apart (runs in flight in no order, as bench scale
 * --row ...-scatter), AB_STORE_BENCH_APPEND_ONLY=1 leaves out the raw ceilings. */
static void read_env(void)
{
    const char *v = getenv("AB_STORE_BENCH_RUNS");
    if (v) {
        char *end = NULL;
        unsigned long long n = strtoull(v, &end, 10);
        if (!*v || *end || n < 1 || n > 1000000) {
            fprintf(stderr, "store_bench: AB_STORE_BENCH_RUNS must be 1..1000000, not '%s'\n", v);
            exit(2);
        }
        g_runs = (size_t)n;
    }
    v = getenv("AB_STORE_BENCH_THREAD_EACH");
    g_thread_each = v && strcmp(v, "1") == 0;
    v = getenv("AB_STORE_BENCH_WARM");
    g_warm = v && strcmp(v, "1") == 0;
    v = getenv("AB_STORE_BENCH_SCATTER");
    g_scatter = v && strcmp(v, "1") == 0;
    v = getenv("AB_STORE_BENCH_APPEND_ONLY");
    g_append_only = v && strcmp(v, "1") == 0;
    run_names = calloc(g_runs, sizeof *run_names);
    if (!run_names) {
        fprintf(stderr, "store_bench: out of memory\n");
        exit(1);
    }
    for (size_t r = 0; r < g_runs; r++)
        snprintf(run_names[r], sizeof run_names[r], "run-%06zu", r);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/tmp/ab_store_bench";
    size_t total = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : 400000;
    read_env();
    const ab_plugin_t *p = ab__plugin_sqlite();
    printf("%zu events of %d bytes, %zu interleaved runs, %s\n", total, EV_BYTES, g_runs,
           g_thread_each ? "a thread each" : "one thread");
    if (argc > 4) { /* one case only: <dir> <events> fsync|process <batch> */
        ab_durability_t d =
            strcmp(argv[3], "process") == 0 ? AB_DURABILITY_PROCESS : AB_DURABILITY_FSYNC;
        size_t b = (size_t)strtoull(argv[4], NULL, 10);
        if (!g_append_only) {
            printf("raw sqlite, a row per event          %10.0f events/s\n",
                   bench_raw(dir, b, total, d, false));
            printf("raw sqlite, a row per event, indexed %10.0f events/s\n",
                   bench_raw(dir, b, total, d, true));
        }
        if (argc > 5 && strcmp(argv[5], "relayout") == 0) {
            bench_relayout(p, dir, d, b, total);
            free(run_names);
            return 0;
        }
        print_append(argv[3], b, bench_append(p, dir, d, b, total));
        if (argc > 5 && strcmp(argv[5], "read") == 0)
            bench_reads(p, dir, total);
        free(run_names);
        return 0;
    }
    static const size_t batches[] = {100, 1000, 4000};
    for (size_t i = 0; i < 3; i++)
        printf("raw sqlite ceiling  batch %4zu  %10.0f events/s\n", batches[i],
               bench_raw(dir, batches[i], total, AB_DURABILITY_FSYNC, false));
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < 3; i++)
            print_append(d ? "process" : "fsync", batches[i],
                         bench_append(p, dir, d ? AB_DURABILITY_PROCESS : AB_DURABILITY_FSYNC,
                                      batches[i], total));
    bench_append(p, dir, AB_DURABILITY_FSYNC, 4000, total);
    bench_reads(p, dir, total);
    empty_dir(dir);
    rmdir(dir);
    free(run_names);
    return 0;
}

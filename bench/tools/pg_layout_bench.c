/*
 * pg_layout_bench.c - the PostgreSQL plugin's append path measured without a
 * broker, and the layout choice behind it (docs/SCALING.md "Layout"):
 *
 *   plugin   append_batch of the plugin module (one row per event, the
 *            conditional append, the position counter), 1 and 2 connections;
 *   events   the same rows by a plain multi-row INSERT ... SELECT unnest(...)
 *            (no checks, no counter; positions from the client): the ceiling
 *            of one row per event;
 *   chunks   one row per run per commit (the SQLite store's layout): the
 *            run's events of the batch packed into one bytea.
 *
 * 256-byte events over 100 runs, round robin, batches of B, synchronous_commit
 * on (fsync=on on the server). Usage:
 *   pg_layout_bench MODULE CONNINFO [EVENTS] [BATCH]
 * The database should be empty or disposable: the tool creates and drops its
 * own tables (lb_*) and uses the plugin's (ab_*).
 */
#include "agentbus/plugin.h"

#include <dlfcn.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RUNS 100
#define SIZE 256

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const ab_plugin_t *P;
static const char *g_conninfo;
static int g_rows; /* plugin rows run: fresh thread ids per row */

typedef struct job {
    int id;
    long events, batch;
    double secs;
    int failed;
} job_t;

static void *plugin_job(void *arg)
{
    job_t *j = arg;
    ab_plugin_open_opts_t o = {.data_dir = "/", .conninfo = g_conninfo};
    ab_plugin_db_t *db = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (P->open(&o, &db, &err) != AB_OK) {
        fprintf(stderr, "open: %s\n", err.message);
        j->failed = 1;
        return NULL;
    }
    ab_append_event_t *evs = calloc((size_t)j->batch, sizeof *evs);
    static char body[SIZE];
    memset(body, 'x', sizeof body);
    char thread[32], runs[RUNS][16];
    snprintf(thread, sizeof thread, "lb-%d-%d-%d", (int)getpid(), g_rows, j->id);
    for (int r = 0; r < RUNS; r++)
        snprintf(runs[r], sizeof runs[r], "r%d", r);
    uint64_t seq[RUNS] = {0};
    double t0 = now_s();
    for (long done = 0; done < j->events && !j->failed; done += j->batch) {
        for (long i = 0; i < j->batch; i++) {
            int r = (int)((done + i) % RUNS);
            evs[i] = (ab_append_event_t){.thread = {thread, strlen(thread)},
                                         .run = {runs[r], strlen(runs[r])},
                                         .seq = ++seq[r],
                                         .epoch = 1,
                                         .bytes = (const uint8_t *)body,
                                         .len = SIZE};
        }
        uint64_t first = 0;
        if (P->append_batch(db, evs, (size_t)j->batch, 1, &first, &err) != AB_OK) {
            fprintf(stderr, "append: %s\n", err.message);
            j->failed = 1;
        }
    }
    j->secs = now_s() - t0;
    free(evs);
    P->close(db);
    return NULL;
}

static double plugin_row(int conns, long events, long batch)
{
    pthread_t th[2];
    job_t j[2];
    double t0 = now_s();
    for (int i = 0; i < conns; i++) {
        j[i] = (job_t){.id = i, .events = events / conns, .batch = batch};
        pthread_create(&th[i], NULL, plugin_job, &j[i]);
    }
    for (int i = 0; i < conns; i++)
        pthread_join(th[i], NULL);
    double dt = now_s() - t0;
    g_rows++;
    int failed = 0;
    for (int i = 0; i < conns; i++)
        failed |= j[i].failed;
    return failed ? -1 : (double)events / dt;
}

static void quiet(void *arg, const char *message)
{
    (void)arg, (void)message;
}

static int exec_ok(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    int ok = r && (PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK);
    if (!ok)
        fprintf(stderr, "%s: %s\n", sql, PQerrorMessage(c));
    PQclear(r);
    return ok;
}

/* A text-format array literal of @p n copies built by @p put into @p buf. */
static double raw_row(PGconn *c, long events, long batch, int chunks)
{
    exec_ok(c, "DROP TABLE IF EXISTS lb_events; DROP TABLE IF EXISTS lb_chunks;"
               "CREATE TABLE lb_events(pos bigint PRIMARY KEY, thread text, run text, seq bigint,"
               " commit_us bigint, data bytea, UNIQUE(thread, run, seq));"
               "CREATE INDEX ON lb_events(thread, pos);"
               "CREATE TABLE lb_chunks(first_pos bigint PRIMARY KEY, thread text, run text,"
               " first_seq bigint, last_seq bigint, data bytea, UNIQUE(thread, run, last_seq));"
               "CREATE INDEX ON lb_chunks(thread, first_pos)");
    /* encode(data, 'hex') keeps the literal text-only: the ceiling, not the plugin's path */
    size_t cap = (size_t)batch * (SIZE * 2 + 64) + 4096;
    char *sql = malloc(cap);
    long pos = 1, seq[RUNS] = {0};
    double t0 = now_s();
    for (long done = 0; done < events; done += batch) {
        size_t n = 0;
        if (!chunks) {
            n += (size_t)snprintf(sql + n, cap - n,
                                  "INSERT INTO lb_events SELECT p, 'lb', 'r' || (p %% %d), s, 1,"
                                  " decode(repeat('78', %d), 'hex') FROM unnest(array[",
                                  RUNS, SIZE);
            for (long i = 0; i < batch; i++)
                n += (size_t)snprintf(sql + n, cap - n, "%s%ld", i ? "," : "", pos + i);
            n += (size_t)snprintf(sql + n, cap - n, "]::bigint[], array[");
            for (long i = 0; i < batch; i++)
                n += (size_t)snprintf(sql + n, cap - n, "%s%ld", i ? "," : "",
                                      ++seq[(pos + i) % RUNS]);
            snprintf(sql + n, cap - n, "]::bigint[]) AS u(p, s)");
        } else {
            long per = batch / RUNS;
            n += (size_t)snprintf(sql + n, cap - n,
                                  "INSERT INTO lb_chunks SELECT %ld + k, 'lb', 'r' || k, %ld, %ld,"
                                  " decode(repeat('78', %ld), 'hex') FROM generate_series(0, %d) k",
                                  pos, seq[0] + 1, seq[0] + per, per * (SIZE + 24), RUNS - 1);
            seq[0] += per;
        }
        pos += batch;
        if (!exec_ok(c, sql))
            break;
    }
    double dt = now_s() - t0;
    free(sql);
    exec_ok(c, "DROP TABLE IF EXISTS lb_events; DROP TABLE IF EXISTS lb_chunks");
    return (double)events / dt;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: pg_layout_bench MODULE CONNINFO [EVENTS] [BATCH]\n");
        return 2;
    }
    g_conninfo = argv[2];
    long events = argc > 3 ? atol(argv[3]) : 200000, batch = argc > 4 ? atol(argv[4]) : 1000;
    void *dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    void *sym = dl ? dlsym(dl, AB_PLUGIN_ENTRY_SYMBOL) : NULL;
    if (!sym) {
        fprintf(stderr, "cannot load %s: %s\n", argv[1], dlerror());
        return 1;
    }
    ab_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);
    P = entry();
    PGconn *c = PQconnectdb(g_conninfo);
    PQsetNoticeProcessor(c, quiet, NULL);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "connect: %s\n", PQerrorMessage(c));
        return 1;
    }
    printf("%ld events of %d B over %d runs, batch %ld, synchronous_commit on\n", events, SIZE,
           RUNS, batch);
    printf("raw one row per event (INSERT, 3 indexes, bytes made by the server) %10.0f events/s\n",
           raw_row(c, events, batch, 0));
    printf("raw one row per run per commit (chunks, 2 indexes, server's bytes) %10.0f events/s\n",
           raw_row(c, events, batch, 1));
    printf("plugin append_batch, 1 connection                    %10.0f events/s\n",
           plugin_row(1, events, batch));
    printf("plugin append_batch, 2 connections                   %10.0f events/s\n",
           plugin_row(2, events, batch));
    PQfinish(c);
    dlclose(dl);
    return 0;
}

/*
 * bench_pg.c - `agentbus bench pg`: the bus on the PostgreSQL plugin beside
 * the SQLite broker, in one run (docs/PERFORMANCE.md "PostgreSQL",
 * docs/SCALING.md):
 *
 *   ingest   the ingest load (bench ingest's: 4 producers, 100 runs, 256 B,
 *            fsync) on an SQLite broker; on one PostgreSQL primary with one
 *            broker and with two (two producers each); the same with a
 *            synchronous standby;
 *   replay   bench replay's rows (one run of 100k events, a thread of 10 x
 *            10k) on SQLite and on PostgreSQL with the standby;
 *   latency  publish->ack p50/p99, one event per publish at 1,000/s, on both;
 *   failover one producer publishing one event at a time while the primary
 *            is SIGKILLed and the standby promoted: the longest wait for an
 *            ack, and how much of it came after the promotion.
 *
 * The servers are started here (tests/pg/pg_fixture.h: initdb in temporary
 * directories, loopback ports, fsync=on; as the user postgres when run as
 * root) and stopped by pid before the benchmark returns, as are the broker
 * children.
 */
#define _GNU_SOURCE /* the fixture's nftw and prctl */
#include "bench_int.h"

#include <stdio.h>

#ifndef AB_HAVE_PG
int bench_pg(const bench_opts_t *o, void *ctx, const bodies_t *b)
{
    (void)o, (void)ctx, (void)b;
    fprintf(stderr, "agentbus bench: pg: this build has no libpq (scripts/install-deps)\n");
    return AB_BENCH_FAIL;
}
#else
#include "pg_fixture.h"

#include "ab_common.h"
#include "agentbus/producer.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct pgb {
    pgfx_t pri, sb;
    bool has_sb;
    char conninfo[600];
    child_t brokers[2];
} pgb_t;

static int broker_start(pgb_t *g, int i)
{
    spawn_opts_t so = {.tmp_prefix = "agentbus-bench-pg",
                       .quiet = true,
                       .extra = {"--plugin", "postgres", "--pg", g->conninfo}};
    if (spawn_broker(&g->brokers[i], &so) != 0) {
        fprintf(stderr, "agentbus bench: a broker on PostgreSQL did not start\n");
        return -1;
    }
    return 0;
}

static void brokers_stop(pgb_t *g)
{
    for (int i = 0; i < 2; i++)
        child_stop(&g->brokers[i]);
}

/* Ingest with @p nbrokers brokers on the database; events/s or -1. */
static double pg_ingest(pgb_t *g, const bench_opts_t *o, void *ctx, const bodies_t *b, int nbrokers,
                        const char *label)
{
    for (int i = 0; i < nbrokers; i++)
        if (broker_start(g, i) != 0) {
            brokers_stop(g);
            return -1;
        }
    prod_t tmpl = load_producer(g->brokers[0].cmd, ctx, b, o->seconds, "pg-ingest-%d");
    prod_t ps[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++) {
        ps[i] = tmpl;
        ps[i].endpoint = g->brokers[i % nbrokers].cmd;
    }
    double rate = run_producers_into(ps, PRODUCERS);
    uint64_t rej = 0;
    for (int i = 0; i < PRODUCERS; i++)
        rej += ps[i].rejected;
    bench_emit("pg", label, "events_per_s", rate, "rejected", (double)rej, NULL);
    printf("pg ingest  %-40s %10.0f events/s acked  (%d producers, %d runs, %d B, batch %d, "
           "%d in flight; rejected %llu)\n",
           label, rate, PRODUCERS, tmpl.nruns * PRODUCERS, EVENT_SIZE, BATCH, PIPE,
           (unsigned long long)rej);
    brokers_stop(g);
    return rate;
}

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* publish->ack p50/p99, one event per publish at 1,000/s, against @p ep. */
static int ack_latency(const char *ep, void *ctx, const bodies_t *b, double seconds,
                       const char *label)
{
    prod_t p = {.endpoint = ep,
                .ctx = ctx,
                .bodies = b,
                .nruns = 4,
                .batch = 1,
                .pipe = 64,
                .seconds = seconds,
                .rate = 1000,
                .thread_fmt = "pg-lat-%d",
                .want_lat = true};
    bench_run_tag(p.run_tag);
    if (run_producers_into(&p, 1) < 0 || p.nlat == 0) {
        free(p.lat);
        return -1;
    }
    qsort(p.lat, p.nlat, sizeof(double), cmp_d);
    bench_emit("pg", label, "p50_us", p.lat[p.nlat / 2] * 1e6, "p99_us",
               p.lat[(size_t)((double)p.nlat * 0.99)] * 1e6, "samples", (double)p.nlat, NULL);
    printf("pg latency %-40s p50 %7.0f us  p99 %7.0f us  (%zu samples, 1 event/publish, "
           "1,000/s)\n",
           label, p.lat[p.nlat / 2] * 1e6, p.lat[(size_t)((double)p.nlat * 0.99)] * 1e6, p.nlat);
    free(p.lat);
    return 0;
}

static int add_standby(pgb_t *g)
{
    const char *conf[] = {"synchronous_standby_names=", "wal_retrieve_retry_interval=200ms",
                          "max_wal_size=8GB", "checkpoint_timeout=30min", NULL};
    if (pgfx_standby(&g->sb, &g->pri, "sb1", conf) != 0)
        return -1;
    g->has_sb = true;
    PGconn *c = pgfx_connect(&g->pri);
    if (!c)
        return -1;
    PQclear(PQexec(c, "ALTER SYSTEM SET synchronous_standby_names = 'sb1'"));
    PQclear(PQexec(c, "SELECT pg_reload_conf()"));
    double end = ab__mono_s() + 30;
    bool sync = false;
    while (!sync && ab__mono_s() < end) {
        sync = pgfx_scalar(c, "SELECT count(*) FROM pg_stat_replication WHERE sync_state = "
                              "'sync'") == 1;
        if (!sync)
            pgfx_sleep_ms(20);
    }
    PQfinish(c);
    snprintf(g->conninfo, sizeof g->conninfo,
             "host=127.0.0.1,127.0.0.1 port=%d,%d user=agentbus dbname=postgres"
             " target_session_attrs=read-write connect_timeout=2",
             g->pri.port, g->sb.port);
    return sync ? 0 : -1;
}

/* ---- failover stall ----------------------------------------------------------------- */

typedef struct stall {
    const char *ep;
    atomic_int stop;
    double last_ack, worst, worst_end; /* ab__mono_s() */
    uint64_t acked;
    int failed;
} stall_t;

static void *stall_main(void *arg)
{
    stall_t *s = arg;
    ab_producer_opts_t o = {.timeout_ms = 2000,
                            .batch_max = 1,
                            .backoff_base_ms = 5,
                            .backoff_max_ms = 50,
                            .max_retries = 1000};
    ab_producer_t *p = NULL;
    ab_error_t err = AB_ERROR_INIT;
    char thread[64], body[256];
    snprintf(thread, sizeof thread, "pg-stall-%d", (int)getpid());
    if (ab_producer_new(&p, s->ep, &o, &err) != AB_OK ||
        ab_producer_claim(p, thread, "r", NULL, &err) != AB_OK) {
        fprintf(stderr, "agentbus bench: failover producer: %s\n", err.message);
        s->failed = 1;
        ab_producer_destroy(&p);
        return NULL;
    }
    s->last_ack = ab__mono_s();
    for (uint64_t seq = 1; !atomic_load(&s->stop); seq++) {
        if (seq == 1)
            snprintf(body, sizeof body,
                     "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"r\","
                     "\"protocolVersion\":\"1.0\"}",
                     thread);
        else if (seq == 2)
            snprintf(body, sizeof body, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\"}");
        else
            snprintf(body, sizeof body,
                     "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"x\"}");
        if (ab_producer_publish_json(p, body, strlen(body), &err) != AB_OK ||
            ab_producer_flush(p, 30000, &err) != AB_OK) {
            fprintf(stderr, "agentbus bench: failover producer: %s\n", err.message);
            s->failed = 1;
            break;
        }
        double now = ab__mono_s();
        if (now - s->last_ack > s->worst) {
            s->worst = now - s->last_ack;
            s->worst_end = now;
        }
        s->last_ack = now;
        s->acked++;
    }
    ab_producer_destroy(&p);
    return NULL;
}

static int failover_row(pgb_t *g)
{
    if (broker_start(g, 0) != 0)
        return -1;
    stall_t s = {.ep = g->brokers[0].cmd};
    atomic_init(&s.stop, 0);
    pthread_t th;
    pthread_create(&th, NULL, stall_main, &s);
    pgfx_sleep_ms(1000);
    double t_kill = ab__mono_s();
    pgfx_kill(&g->pri);
    PGconn *c = pgfx_connect(&g->sb);
    long long promoted = c ? pgfx_scalar(c, "SELECT pg_promote(true, 60)::int") : -1;
    double t_promoted = ab__mono_s();
    if (c)
        PQfinish(c);
    pgfx_sleep_ms(1500);
    atomic_store(&s.stop, 1);
    pthread_join(th, NULL);
    brokers_stop(g);
    if (s.failed || promoted != 1) {
        fprintf(stderr, "agentbus bench: failover row failed (promoted: %lld)\n", promoted);
        return -1;
    }
    double after = s.worst_end > t_promoted ? s.worst_end - t_promoted : 0;
    bench_emit("pg", "failover", "longest_ack_wait_s", s.worst, "promotion_s", t_promoted - t_kill,
               "first_ack_after_promotion_s", after, "acks", (double)s.acked, NULL);
    printf("pg failover longest ack wait %7.3f s; promotion took %.3f s after the kill; first ack "
           "%.3f s after the promotion returned (%llu acks, 1 event at a time)\n",
           s.worst, t_promoted - t_kill, after, (unsigned long long)s.acked);
    return 0;
}

static void pgb_cleanup(pgb_t *g)
{
    brokers_stop(g);
    if (g->has_sb)
        pgfx_cleanup(&g->sb);
    pgfx_cleanup(&g->pri);
}

int bench_pg(const bench_opts_t *o, void *ctx, const bodies_t *b)
{
    pgb_t g;
    memset(&g, 0, sizeof g);
    int rc = pgfx_init(&g.pri);
    /* no checkpoint inside a row: a 4 s row writes several hundred MB of WAL */
    const char *conf[] = {"max_wal_size=8GB", "checkpoint_timeout=30min", NULL};
    if (rc != 0 || pgfx_start(&g.pri, conf) != 0) {
        fprintf(stderr, "agentbus bench: cannot start a PostgreSQL server (initdb %s)\n",
                rc == 77 ? "not found: pg_config --bindir" : "or postgres failed");
        pgfx_cleanup(&g.pri);
        return AB_BENCH_FAIL;
    }
    snprintf(g.conninfo, sizeof g.conninfo, "%s", g.pri.conninfo);
    bench_opts_t sq = *o;
    sq.broker = NULL;
    rc = AB_BENCH_FAIL;
    printf("pg: SQLite broker (the peer in this run), then the same load on PostgreSQL 15\n");
    if (ingest_row(&sq, ctx, b, "fsync") < 0 ||
        pg_ingest(&g, o, ctx, b, 1, "primary only, 1 broker") < 0 ||
        pg_ingest(&g, o, ctx, b, 2, "primary only, 2 brokers") < 0 || add_standby(&g) != 0 ||
        pg_ingest(&g, o, ctx, b, 1, "primary + sync standby, 1 broker") < 0 ||
        pg_ingest(&g, o, ctx, b, 2, "primary + sync standby, 2 brokers") < 0)
        goto out;
    printf("pg: replay on SQLite, then on PostgreSQL (primary + sync standby)\n");
    if (bench_replay(&sq, ctx, b) != AB_BENCH_OK || broker_start(&g, 0) != 0)
        goto out;
    bench_opts_t po = *o;
    po.broker = g.brokers[0].cmd;
    if (bench_replay(&po, ctx, b) != AB_BENCH_OK ||
        ack_latency(g.brokers[0].cmd, ctx, b, o->seconds, "primary + sync standby") != 0)
        goto out;
    brokers_stop(&g);
    child_t ch;
    const char *ep;
    if (row_begin(&sq, &ch, "fsync", &ep) != 0)
        goto out;
    int lr = ack_latency(ep, ctx, b, o->seconds, "SQLite broker, fsync");
    child_stop(&ch);
    if (lr != 0 || failover_row(&g) != 0)
        goto out;
    rc = AB_BENCH_OK;
out:
    pgb_cleanup(&g);
    return rc;
}
#endif /* AB_HAVE_PG */

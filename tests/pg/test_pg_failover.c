/*
 * test_pg_failover.c - the kill test: a primary with a synchronous standby
 * (pg_basebackup, synchronous_standby_names), two brokers on a multi-host
 * conninfo with target_session_attrs=read-write, producers on both brokers;
 * the primary is SIGKILLed under load and the standby promoted. The
 * producers ride it out (their batches in doubt are re-sent and answered
 * accepted or duplicate); afterwards every event every producer had
 * published is acknowledged and stored on the promoted standby exactly once,
 * every run contiguous from seq 1, and a whole-bus subscriber on each broker
 * received every event exactly once, in position order (the other broker's
 * commits through the follow path, across the failover too).
 *
 * The second test kills a broker too: the primary is SIGKILLed, the standby's
 * promotion started, and broker B SIGKILLed while it is under way. Broker A
 * reconnects to the promoted standby by itself and its producers go on; B's
 * producers stop where B left them (their last batches in doubt). B is
 * restarted on the new primary; B's runs are continued by claims, one
 * through A and one through the restarted B, each claim's last seq between
 * what its old producer had acknowledged and what it had published. Then
 * every acknowledged event is stored exactly once, every run contiguous from
 * seq 1, the subscriber on A (the whole time) and a subscriber on the
 * restarted B (replaying from position 0) each received every stored event
 * exactly once, in position order.
 *
 * AB_PG_KILL_REPEAT=N repeats each test's cycle N times (the long mode; the
 * normal suite runs each once). A failed assertion still stops the cycle's
 * brokers and servers (the teardown). A subscriber's hole prints the stored
 * chunks around it: so far a hole has been a read of a commit that the
 * primary's death made visible before its standby had it (docs/SCALING.md
 * "Failover": narrowed by the plugin's read check, not closed; about 1 in 95
 * cycles here).
 */
#include "pg_fixture.h"
#include "testutil.h"

#include "agentbus/producer.h"
#include "agentbus/subscriber.h"
#include "broker_proc.h"

#include <pthread.h>
#include <stdatomic.h>

#define PRODUCERS 4

typedef struct prod {
    const bp_t *broker;
    char thread[64];
    uint64_t published;
    ab_status_t failed;
    char why[256];
    uint64_t acked;
    uint64_t retries, duplicates;
    bool on_killed;     /* its broker is SIGKILLed during the failover */
    uint64_t acked_seq; /* the highest seq acknowledged to it */
    uint64_t sent_seq;  /* the highest seq it gave an event (acknowledged or not) */
    uint64_t final_seq; /* on_killed: the run's last seq once continued elsewhere */
} prod_t;

static atomic_int g_stop;
static atomic_int g_primary_down; /* set before the primary is killed */

/* A whole-bus subscriber on one broker, polled by its own thread through the failover. */
typedef struct watch {
    const bp_t *broker;
    prod_t *p;
    atomic_int stop;
    uint64_t last_seq[PRODUCERS];
    uint64_t total, last_pos;
    bool hole, foreign, failed;
    char why[200]; /* the first hole */
    uint64_t hole_pos;
    int hole_i; /* its producer (-1: a position hole) */
} watch_t;

static void hole(watch_t *w, const ab_sub_event_t *e, int i, uint64_t want)
{
    if (!w->hole) {
        snprintf(w->why, sizeof w->why, "pos %llu (after %llu), %.*s seq %llu, expected %llu (%s)",
                 (unsigned long long)e->stamp.pos, (unsigned long long)w->last_pos,
                 (int)e->ev.thread.len, e->ev.thread.ptr, (unsigned long long)e->ev.seq,
                 (unsigned long long)want, e->replayed ? "replayed" : "live");
        w->hole_pos = e->stamp.pos;
        w->hole_i = i;
    }
    w->hole = true;
}

static int watch_event(void *ud, const ab_sub_event_t *e)
{
    watch_t *w = ud;
    if (w->last_pos && e->stamp.pos != w->last_pos + 1)
        hole(w, e, -1, w->last_pos + 1);
    w->last_pos = e->stamp.pos;
    w->total++;
    for (int i = 0; i < PRODUCERS; i++)
        if (e->ev.thread.len == strlen(w->p[i].thread) &&
            memcmp(e->ev.thread.ptr, w->p[i].thread, e->ev.thread.len) == 0) {
            if (e->ev.seq != w->last_seq[i] + 1)
                hole(w, e, i, w->last_seq[i] + 1);
            w->last_seq[i] = e->ev.seq;
            return 0;
        }
    w->foreign = true;
    return 0;
}

static void *watch_main(void *arg)
{
    watch_t *w = arg;
    ab_sub_opts_t o = {.scope = AB_SUB_ALL,
                       .on_event = watch_event,
                       .ud = w,
                       .timeout_ms = 3000,
                       .silence_ms = 2000};
    ab_sub_t *sub = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_sub_new(&sub, w->broker->cmd, &o, &err) != AB_OK) {
        w->failed = true;
        return NULL;
    }
    while (!atomic_load(&w->stop)) {
        ab_error_clear(&err);
        (void)!ab_sub_poll(sub, 50, &err); /* errors while the database is away: it retries */
    }
    ab_sub_destroy(&sub);
    return NULL;
}
static unsigned g_serial;

static void *produce(void *arg)
{
    prod_t *p = arg;
    /* a producer of the broker that is killed gives up after a second (its requests time
     * out); the others ride the failover out */
    ab_producer_opts_t o = {.timeout_ms = p->on_killed ? 1000 : 3000,
                            .batch_max = 32,
                            .backoff_base_ms = 20,
                            .backoff_max_ms = 200,
                            .max_retries = 200};
    ab_producer_t *pr = NULL;
    ab_error_t err = AB_ERROR_INIT;
    p->failed = ab_producer_new(&pr, p->broker->cmd, &o, &err);
    if (p->failed == AB_OK)
        p->failed = ab_producer_claim(pr, p->thread, "r", NULL, &err);
    while (p->failed == AB_OK && !atomic_load(&g_stop)) {
        char body[512];
        it_body(body, sizeof body, p->thread, "r", p->published + 1, 0, 64);
        p->failed = ab_producer_publish_json(pr, body, strlen(body), &err);
        if (p->failed == AB_OK)
            p->published++;
    }
    if (p->failed == AB_OK && !p->on_killed)
        p->failed = ab_producer_flush(pr, 30000, &err);
    if (p->failed != AB_OK && p->on_killed && atomic_load(&g_primary_down))
        p->failed = AB_OK; /* its broker went away: what it had acknowledged is checked */
    if (p->failed != AB_OK)
        snprintf(p->why, sizeof p->why, "%s: %s", ab_status_name(err.code), err.message);
    ab_producer_stats_t st = pr ? ab_producer_stats(pr) : (ab_producer_stats_t){0};
    p->acked = st.acked;
    p->retries = st.retries;
    p->duplicates = st.duplicates;
    p->acked_seq = pr ? ab_producer_acked_seq(pr) : 0;
    p->sent_seq = pr && ab_producer_next_seq(pr) ? ab_producer_next_seq(pr) - 1 : 0;
    ab_producer_destroy(&pr);
    return NULL;
}

static bool wait_sync(const pgfx_t *primary)
{
    PGconn *c = pgfx_connect(primary);
    long end = pgfx_now_ms() + 30000;
    bool ok = false;
    while (c && !ok && pgfx_now_ms() < end) {
        ok = pgfx_scalar(c, "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'") ==
             1;
        if (!ok)
            pgfx_sleep_ms(20);
    }
    if (c)
        PQfinish(c);
    return ok;
}

/* The run's last seq: what the producer published, or where its run was continued. */
static uint64_t expected(const prod_t *p)
{
    return p->on_killed ? p->final_seq : p->published;
}

/* Events stored of each producer's run on @p db: count, max seq. */
static void check_stored(const pgfx_t *db, prod_t *p, int n)
{
    PGconn *c = pgfx_connect(db);
    assert_non_null(c);
    for (int i = 0; i < n; i++) {
        char sql[256];
        snprintf(
            sql, sizeof sql,
            "SELECT coalesce(sum(last_seq - first_seq + 1), 0) FROM ab_chunks WHERE thread = '%s'",
            p[i].thread);
        long long count = pgfx_scalar(c, sql);
        snprintf(
            sql, sizeof sql,
            "SELECT coalesce(max(last_seq), 0) FROM ab_chunks WHERE thread = '%s' AND run = 'r'",
            p[i].thread);
        long long max = pgfx_scalar(c, sql);
        print_message("producer %d: published %llu acked %llu (%llu as duplicates, %llu batches "
                      "re-sent) stored %lld (max seq %lld)\n",
                      i, (unsigned long long)p[i].published, (unsigned long long)p[i].acked,
                      (unsigned long long)p[i].duplicates, (unsigned long long)p[i].retries, count,
                      max);
        assert_int_equal(p[i].failed, AB_OK);
        if (!p[i].on_killed)
            assert_int_equal(p[i].acked, p[i].published);
        assert_int_equal(count, (long long)expected(&p[i]));
        assert_int_equal(max, (long long)expected(&p[i]));
        /* the run's chunks follow each other from seq 1: each event once, none missing */
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM (SELECT first_seq, lag(last_seq) OVER (ORDER BY first_seq)"
                 " AS prev FROM ab_chunks WHERE thread = '%s') x WHERE first_seq <>"
                 " coalesce(prev, 0) + 1",
                 p[i].thread);
        assert_int_equal(pgfx_scalar(c, sql), 0);
    }
    PQfinish(c);
}

/* Promote the standby. @p wait: until done (pg_promote's own wait), else only started. */
static void promote(const pgfx_t *sb, bool wait)
{
    PGconn *s = pgfx_connect(sb);
    assert_non_null(s);
    assert_int_equal(
        pgfx_scalar(s, wait ? "SELECT pg_promote(true, 30)::int" : "SELECT pg_promote(false)::int"),
        1);
    PQfinish(s);
}

/* Wait (bounded) until @p sb has left recovery: promoted, writable. */
static void wait_promoted(const pgfx_t *sb)
{
    long end = pgfx_now_ms() + 30000;
    while (pgfx_scalar1(sb, "SELECT (NOT pg_is_in_recovery())::int") != 1 && pgfx_now_ms() < end)
        pgfx_sleep_ms(10);
    assert_int_equal(pgfx_scalar1(sb, "SELECT (NOT pg_is_in_recovery())::int"), 1);
}

/* Continue the run of @p p (its broker was killed) through broker @p to: a claim, whose
 * last seq holds everything acknowledged and nothing never sent, then @p more events. */
static void continue_run(prod_t *p, const bp_t *to, int more)
{
    ab_producer_opts_t o = {.timeout_ms = 5000, .batch_max = 32};
    ab_producer_t *pr = NULL;
    ab_error_t err = AB_ERROR_INIT;
    uint64_t last = 0;
    assert_int_equal(ab_producer_new(&pr, to->cmd, &o, &err), AB_OK);
    assert_int_equal(ab_producer_claim(pr, p->thread, "r", &last, &err), AB_OK);
    print_message("%s: acknowledged %llu, sent %llu, stored %llu when continued\n", p->thread,
                  (unsigned long long)p->acked_seq, (unsigned long long)p->sent_seq,
                  (unsigned long long)last);
    assert_true(last >= p->acked_seq);
    assert_true(last <= p->sent_seq);
    for (int k = 1; k <= more; k++) {
        char body[512];
        it_body(body, sizeof body, p->thread, "r", last + (uint64_t)k, 0, 64);
        assert_int_equal(ab_producer_publish_json(pr, body, strlen(body), &err), AB_OK);
    }
    assert_int_equal(ab_producer_flush(pr, 10000, &err), AB_OK);
    assert_int_equal(ab_producer_acked_seq(pr), last + (uint64_t)more);
    p->final_seq = last + (uint64_t)more;
    ab_producer_destroy(&pr);
}

/* Wait (bounded) until @p w has @p want events, stop it, check it saw each stored one once. */
/* The stored chunks around position @p pos (what a hole is compared with). */
static void print_chunks(const pgfx_t *db, uint64_t pos)
{
    PGconn *c = pgfx_connect(db);
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT first_pos, thread, first_seq, last_seq, batch_first FROM ab_chunks WHERE"
             " first_pos BETWEEN %llu AND %llu ORDER BY first_pos",
             (unsigned long long)(pos > 200 ? pos - 200 : 0), (unsigned long long)pos + 40);
    PGresult *r = c ? PQexec(c, sql) : NULL;
    for (int i = 0; r && PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++)
        print_message("  chunk at %s: %s seq %s..%s (batch %s)\n", PQgetvalue(r, i, 0),
                      PQgetvalue(r, i, 1), PQgetvalue(r, i, 2), PQgetvalue(r, i, 3),
                      PQgetvalue(r, i, 4));
    PQclear(r);
    if (c)
        PQfinish(c);
}

static void watch_done(watch_t *w, pthread_t th, const prod_t *p, uint64_t want, char name,
                       const pgfx_t *db)
{
    long end = pgfx_now_ms() + 20000;
    while (w->total < want && pgfx_now_ms() < end)
        pgfx_sleep_ms(20); /* the subscriber's own thread catches up */
    atomic_store(&w->stop, 1);
    pthread_join(th, NULL);
    print_message("subscriber on broker %c: %llu events, last position %llu\n", name,
                  (unsigned long long)w->total, (unsigned long long)w->last_pos);
    assert_false(w->failed);
    if (w->hole) {
        print_message("subscriber on broker %c: a hole at %s\n", name, w->why);
        print_chunks(db, w->hole_pos);
    }
    assert_false(w->hole);
    assert_false(w->foreign);
    assert_int_equal(w->total, want);
    for (int i = 0; i < PRODUCERS; i++)
        assert_int_equal(w->last_seq[i], expected(&p[i]));
}

/* The cycle's servers and brokers: stopped by cleanup() also when an assertion ends a cycle. */
static pgfx_t g_pri, g_sb;
static bp_t g_a, g_b;

static int cleanup(void **state)
{
    (void)state;
    bp_cleanup(&g_a);
    bp_cleanup(&g_b);
    pgfx_cleanup(&g_sb);
    pgfx_cleanup(&g_pri);
    return 0;
}

/*
 * One cycle: primary and synchronous standby, brokers A and B, producers on both, a
 * whole-bus subscriber on each; the primary SIGKILLed under load and the standby promoted.
 * @p kill_b: B is SIGKILLed while the promotion is under way, then restarted (see the top).
 */
static void one_cycle(bool kill_b)
{
    memset(&g_a, 0, sizeof g_a);
    memset(&g_b, 0, sizeof g_b);
    assert_int_equal(pgfx_init(&g_pri), 0);
    const char *pri_conf[] = {"synchronous_standby_names=sb1", "wal_level=replica",
                              "max_wal_senders=4", NULL};
    assert_int_equal(pgfx_start(&g_pri, pri_conf), 0);
    const char *sb_conf[] = {"synchronous_standby_names=", "wal_retrieve_retry_interval=200ms",
                             NULL};
    assert_int_equal(pgfx_standby(&g_sb, &g_pri, "sb1", sb_conf), 0);
    assert_true(wait_sync(&g_pri));
    char conninfo[512];
    snprintf(conninfo, sizeof conninfo,
             "host=127.0.0.1,127.0.0.1 port=%d,%d user=agentbus dbname=postgres"
             " target_session_attrs=read-write connect_timeout=2",
             g_pri.port, g_sb.port);
    const char *extra[] = {"--plugin", "postgres", "--pg", conninfo, NULL};
    assert_int_equal(bp_start(&g_a, NULL, extra), 0);
    assert_int_equal(bp_start(&g_b, NULL, extra), 0);
    prod_t p[PRODUCERS];
    pthread_t th[PRODUCERS];
    memset(p, 0, sizeof p);
    atomic_store(&g_stop, 0);
    atomic_store(&g_primary_down, 0);
    watch_t w[2]; /* one on each broker */
    memset(w, 0, sizeof w);
    pthread_t wth[2];
    for (int k = 0; k < 2; k++) {
        w[k].broker = k ? &g_b : &g_a;
        w[k].p = p;
        atomic_init(&w[k].stop, 0);
    }
    for (int i = 0; i < PRODUCERS; i++) {
        p[i].broker = i % 2 ? &g_b : &g_a;
        p[i].on_killed = kill_b && i % 2;
        snprintf(p[i].thread, sizeof p[i].thread, "kill-%d-%u-%d", (int)getpid(), ++g_serial, i);
        assert_int_equal(pthread_create(&th[i], NULL, produce, &p[i]), 0);
    }
    int watchers = kill_b ? 1 : 2; /* B's subscriber would die with B: one on the new B below */
    for (int k = 0; k < watchers; k++)
        assert_int_equal(pthread_create(&wth[k], NULL, watch_main, &w[k]), 0);
    /* under load: every producer has had events acknowledged */
    PGconn *c = pgfx_connect(&g_pri);
    assert_non_null(c);
    long end = pgfx_now_ms() + 20000;
    while (pgfx_scalar(c, "SELECT count(DISTINCT thread) FROM ab_chunks") < PRODUCERS &&
           pgfx_now_ms() < end)
        pgfx_sleep_ms(20);
    pgfx_sleep_ms(300); /* load for a while: a time, not an assertion */
    PQfinish(c);
    atomic_store(&g_primary_down, 1);
    pgfx_kill(&g_pri);
    if (kill_b) {
        promote(&g_sb, false);
        bp_kill(&g_b); /* while the standby is being promoted */
        wait_promoted(&g_sb);
    } else {
        promote(&g_sb, true);
    }
    pgfx_sleep_ms(500); /* load on the promoted standby for a while */
    atomic_store(&g_stop, 1);
    for (int i = 0; i < PRODUCERS; i++) {
        pthread_join(th[i], NULL);
        if (p[i].failed != AB_OK)
            print_message("producer %d: %s\n", i, p[i].why);
    }
    if (kill_b) {
        assert_int_equal(bp_restart(&g_b), 0); /* on the new primary */
        for (int i = 1; i < PRODUCERS; i += 2)
            continue_run(&p[i], i == 1 ? &g_b : &g_a, 20);
    }
    check_stored(&g_sb, p, PRODUCERS);
    uint64_t want = 0;
    for (int i = 0; i < PRODUCERS; i++)
        want += expected(&p[i]);
    if (kill_b) /* the restarted B replays everything from position 0 */
        assert_int_equal(pthread_create(&wth[1], NULL, watch_main, &w[1]), 0);
    for (int k = 0; k < 2; k++)
        watch_done(&w[k], wth[k], p, want, "AB"[k], &g_sb);
    assert_int_equal(bp_stop(&g_a), 0);
    assert_int_equal(bp_stop(&g_b), 0);
    bp_cleanup(&g_a);
    bp_cleanup(&g_b);
    pgfx_cleanup(&g_sb);
    pgfx_cleanup(&g_pri);
}

static void cycles(bool kill_b)
{
    pgfx_t probe;
    memset(&probe, 0, sizeof probe);
    if (!pgfx_find_bindir(&probe))
        skip();
    const char *rep = getenv("AB_PG_KILL_REPEAT");
    int n = rep && atoi(rep) > 0 ? atoi(rep) : 1;
    for (int i = 0; i < n; i++) {
        print_message("kill cycle %d of %d%s\n", i + 1, n, kill_b ? " (and broker B)" : "");
        one_cycle(kill_b);
    }
}

static void test_primary_killed_under_load(void **state)
{
    (void)state;
    cycles(false);
}

static void test_broker_killed_during_failover(void **state)
{
    (void)state;
    cycles(true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_primary_killed_under_load, cleanup),
        cmocka_unit_test_teardown(test_broker_killed_during_failover, cleanup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

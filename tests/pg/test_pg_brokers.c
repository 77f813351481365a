/*
 * test_pg_brokers.c - two broker processes on one PostgreSQL database (the
 * server of pg_fixture.h): the conformance suite against each endpoint;
 * fan-out across brokers (producers on both brokers write into one thread,
 * a subscriber on each broker receives every event exactly once, most of the
 * other broker's live, and a whole-bus subscriber sees the positions without
 * a hole); fencing across brokers (a writer fenced by a claim on the other
 * broker is refused, though its own broker's cache still held its epoch);
 * one broker SIGKILLed while the other goes on; the plugin's store figures
 * through `stats` and `agentbus status --json` on either broker.
 *
 * One server and two brokers for the file (group setup); fresh ids per test.
 */
#include "pg_brokers.h"
#include "testutil.h"

#include "agentbus/producer.h"
#include "agentbus/subscriber.h"
#include "broker_proc.h"

#define OUT_MAX 16384
#include "cli_run.h"

static unsigned g_serial;

static void fresh(char *out, size_t cap, const char *what)
{
    snprintf(out, cap, "%s-%d-%u", what, (int)getpid(), ++g_serial);
}

static ab_producer_t *producer(const bp_t *b)
{
    ab_producer_opts_t o = {.timeout_ms = IT_TIMEOUT, .batch_max = 8};
    ab_producer_t *p = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_producer_new(&p, b->cmd, &o, &err) != AB_OK)
        fail_msg("producer: %s: %s", ab_status_name(err.code), err.message);
    return p;
}

static void publish(ab_producer_t *p, const char *thread, const char *run, uint64_t from,
                    uint64_t to, uint64_t n)
{
    for (uint64_t s = from; s <= to; s++) {
        char body[512];
        it_body(body, sizeof body, thread, run, s, n, 16);
        ab_error_t err = AB_ERROR_INIT;
        if (ab_producer_publish_json(p, body, strlen(body), &err) != AB_OK)
            fail_msg("publish %s seq %llu: %s", run, (unsigned long long)s, err.message);
    }
}

static void test_conformance_each_broker(void **state)
{
    (void)state;
    char out[OUT_MAX];
    assert_int_equal(it_run_cli(out, "conformance %s", g_a.cmd), 0);
    assert_non_null(strstr(out, "19 passed, 0 failed, 1 skipped\n"));
    assert_int_equal(it_run_cli(out, "conformance %s", g_b.cmd), 0);
    assert_non_null(strstr(out, "19 passed, 0 failed, 1 skipped\n"));
}

/* ---- fan-out across brokers ------------------------------------------------------------- */

#define FAN_N 60

typedef struct seen {
    char run_a[64], run_b[64];
    uint64_t n_a, n_b;       /* events of each run delivered */
    uint64_t last_a, last_b; /* their last seq */
    uint64_t live_a, live_b; /* delivered live */
    bool out_of_order;
    uint64_t last_pos; /* scope all: the last position, to see holes */
    bool hole;
} seen_t;

static int on_event(void *ud, const ab_sub_event_t *e)
{
    seen_t *s = ud;
    bool a =
        e->ev.run.len == strlen(s->run_a) && memcmp(e->ev.run.ptr, s->run_a, e->ev.run.len) == 0;
    bool b =
        e->ev.run.len == strlen(s->run_b) && memcmp(e->ev.run.ptr, s->run_b, e->ev.run.len) == 0;
    if (a) {
        s->out_of_order |= e->ev.seq != s->last_a + 1;
        s->last_a = e->ev.seq, s->n_a++, s->live_a += !e->replayed;
    } else if (b) {
        s->out_of_order |= e->ev.seq != s->last_b + 1;
        s->last_b = e->ev.seq, s->n_b++, s->live_b += !e->replayed;
    }
    if (s->last_pos && e->stamp.pos != s->last_pos + 1)
        s->hole = true;
    s->last_pos = e->stamp.pos;
    return 0;
}

static ab_sub_t *subscribe(const bp_t *b, ab_sub_scope_t scope, const char *thread, uint64_t after,
                           seen_t *s)
{
    ab_sub_opts_t o = {.scope = scope,
                       .thread = thread,
                       .after_pos = after,
                       .on_event = on_event,
                       .ud = s,
                       .timeout_ms = IT_TIMEOUT};
    ab_sub_t *sub = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_sub_new(&sub, b->cmd, &o, &err) != AB_OK)
        fail_msg("subscribe: %s", err.message);
    return sub;
}

static void poll_until(ab_sub_t *const *subs, seen_t *const *seen, int n, uint64_t want)
{
    long end = pgfx_now_ms() + 20000;
    for (;;) {
        bool all = true;
        for (int i = 0; i < n; i++)
            all = all && seen[i]->n_a >= want && seen[i]->n_b >= want;
        if (all || pgfx_now_ms() > end)
            return;
        for (int i = 0; i < n; i++) {
            ab_error_t err = AB_ERROR_INIT;
            assert_int_equal(ab_sub_poll(subs[i], 20, &err), AB_OK);
        }
    }
}

static uint64_t head_pos(const bp_t *b)
{
    ab_conn_t *c = it_connect(b);
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    ab_pong_t pong;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_ping(c, doc, &pong, IT_TIMEOUT, &err), AB_OK);
    uint64_t pos = pong.head_pos;
    ab_doc_destroy(&doc);
    ab_conn_destroy(&c);
    return pos;
}

static void test_fanout_across_brokers_exactly_once(void **state)
{
    (void)state;
    char th[64];
    fresh(th, sizeof th, "fan");
    seen_t sa = {0}, sb = {0}, sall = {0};
    fresh(sa.run_a, sizeof sa.run_a, "ra");
    fresh(sa.run_b, sizeof sa.run_b, "rb");
    memcpy(sb.run_a, sa.run_a, sizeof sa.run_a), memcpy(sb.run_b, sa.run_b, sizeof sa.run_b);
    memcpy(sall.run_a, sa.run_a, sizeof sa.run_a), memcpy(sall.run_b, sa.run_b, sizeof sa.run_b);
    uint64_t start = head_pos(&g_a);
    ab_sub_t *subs[3] = {subscribe(&g_a, AB_SUB_THREAD, th, 0, &sa),
                         subscribe(&g_b, AB_SUB_THREAD, th, 0, &sb),
                         subscribe(&g_a, AB_SUB_ALL, NULL, start, &sall)};
    seen_t *seen[3] = {&sa, &sb, &sall};
    ab_producer_t *pa = producer(&g_a), *pb = producer(&g_b);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_producer_claim(pa, th, sa.run_a, NULL, &err), AB_OK);
    assert_int_equal(ab_producer_claim(pb, th, sa.run_b, NULL, &err), AB_OK);
    /* warm-up: each run's RUN_STARTED, until every subscriber has both */
    publish(pa, th, sa.run_a, 1, 1, FAN_N);
    publish(pb, th, sa.run_b, 1, 1, FAN_N);
    assert_int_equal(ab_producer_flush(pa, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(ab_producer_flush(pb, IT_TIMEOUT, &err), AB_OK);
    poll_until(subs, seen, 3, 1);
    for (uint64_t s = 2; s <= FAN_N; s += 4) {
        uint64_t to = s + 3 > FAN_N ? FAN_N : s + 3;
        publish(pa, th, sa.run_a, s, to, FAN_N);
        publish(pb, th, sa.run_b, s, to, FAN_N);
    }
    assert_int_equal(ab_producer_flush(pa, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(ab_producer_flush(pb, IT_TIMEOUT, &err), AB_OK);
    poll_until(subs, seen, 3, FAN_N);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ab_sub_poll(subs[i], 300, &err), AB_OK); /* nothing more may come */
        assert_int_equal(seen[i]->n_a, FAN_N);
        assert_int_equal(seen[i]->n_b, FAN_N);
        assert_false(seen[i]->out_of_order);
    }
    assert_false(sall.hole);
    /* the other broker's events reached each subscriber live, not only by replay */
    assert_true(sa.live_b >= FAN_N / 2);
    assert_true(sb.live_a >= FAN_N / 2);
    for (int i = 0; i < 3; i++)
        ab_sub_destroy(&subs[i]);
    ab_producer_destroy(&pa);
    ab_producer_destroy(&pb);
}

/* ---- fencing across brokers -------------------------------------------------------------- */

static void test_fencing_across_brokers(void **state)
{
    (void)state;
    char th[64];
    fresh(th, sizeof th, "fence");
    ab_producer_t *p1 = producer(&g_a), *p2 = producer(&g_b);
    ab_error_t err = AB_ERROR_INIT;
    uint64_t last = 9;
    assert_int_equal(ab_producer_claim(p1, th, "r", &last, &err), AB_OK);
    assert_int_equal(last, 0);
    publish(p1, th, "r", 1, 3, 8);
    assert_int_equal(ab_producer_flush(p1, IT_TIMEOUT, &err), AB_OK);
    /* broker B claims: epoch 2 in the database; broker A still caches epoch 1 */
    assert_int_equal(ab_producer_claim(p2, th, "r", &last, &err), AB_OK);
    assert_int_equal(last, 3);
    assert_true(ab_producer_epoch(p2) > ab_producer_epoch(p1));
    publish(p2, th, "r", 4, 4, 8);
    assert_int_equal(ab_producer_flush(p2, IT_TIMEOUT, &err), AB_OK);
    publish(p1, th, "r", 4, 4, 8);
    assert_int_equal(ab_producer_flush(p1, IT_TIMEOUT, &err), AB_FENCED);
    ab_error_clear(&err);
    publish(p2, th, "r", 5, 8, 8);
    assert_int_equal(ab_producer_flush(p2, IT_TIMEOUT, &err), AB_OK);
    /* exactly the new writer's seqs 4..8 follow the old writer's 1..3 */
    PGconn *c = pgfx_connect(&g_pg);
    assert_non_null(c);
    char sql[512];
    snprintf(
        sql, sizeof sql,
        "SELECT sum(last_seq - first_seq + 1) FROM ab_chunks WHERE thread = '%s' AND run = 'r'",
        th);
    assert_int_equal(pgfx_scalar(c, sql), 8);
    snprintf(sql, sizeof sql, "SELECT epoch FROM ab_runs WHERE thread = '%s' AND run = 'r'", th);
    assert_int_equal(pgfx_scalar(c, sql), (long long)ab_producer_epoch(p2));
    PQfinish(c);
    ab_producer_destroy(&p1);
    ab_producer_destroy(&p2);
}

/* An event committed through broker B is sent again through broker A, whose
 * cache has not seen it (a batch in doubt re-sent after a lost answer): the
 * database refuses the append, A reloads the head and answers duplicate at the
 * original position; other bytes for that seq are a conflict. */
static void test_resent_through_other_broker_is_duplicate(void **state)
{
    (void)state;
    char th[64];
    fresh(th, sizeof th, "dup");
    ab_conn_t *ca = it_connect(&g_a), *cb = it_connect(&g_b);
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    ab_buf_t ev = {0};
    ab_error_t rej = AB_ERROR_INIT;
    for (uint64_t s = 1; s <= 3; s++) {
        ab_buf_reset(&ev);
        it_event(&ev, th, "r", s, 0, 1);
        assert_int_equal(it_publish1(ca, doc, &ev, &rej).status, AB_RESULT_ACCEPTED);
    }
    ab_buf_reset(&ev);
    it_event(&ev, th, "r", 4, 0, 1);
    ab_result_t first = it_publish1(cb, doc, &ev, &rej);
    assert_int_equal(first.status, AB_RESULT_ACCEPTED);
    ab_result_t again = it_publish1(ca, doc, &ev, &rej);
    assert_int_equal(again.status, AB_RESULT_DUPLICATE);
    assert_int_equal(again.pos, first.pos);
    ab_buf_reset(&ev);
    it_event_json(&ev, th, "r", 5, 1, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"n\"}");
    assert_int_equal(it_publish1(cb, doc, &ev, &rej).status, AB_RESULT_ACCEPTED);
    ab_buf_reset(&ev);
    it_event_json(&ev, th, "r", 5, 1, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"o\"}");
    assert_int_equal(it_publish1(ca, doc, &ev, &rej).status, AB_RESULT_REJECTED);
    assert_int_equal(rej.code, AB_CONFLICT);
    ab_buf_free(&ev);
    ab_doc_destroy(&doc);
    ab_conn_destroy(&ca);
    ab_conn_destroy(&cb);
}

/* ---- the plugin's figures (stats entry) ------------------------------------------------------ */

static long long sql_count(const char *sql)
{
    return pgfx_scalar1(&g_pg, sql);
}

/* The broker's store figures, once they are @p total runs (@p active of them
 * active): the writer reads them about once a second. */
static ab_stats_reply_t stats_until(const bp_t *b, long long total, long long active)
{
    ab_conn_t *c = it_connect(b);
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    ab_stats_reply_t r;
    for (int i = 0; i < 500; i++) {
        ab_error_t err = AB_ERROR_INIT;
        if (ab_conn_stats(c, doc, &r, IT_TIMEOUT, &err) != AB_OK)
            fail_msg("stats: %s", err.message);
        if (r.store_known && r.runs_total == (uint64_t)total && r.runs_active == (uint64_t)active)
            break;
        assert_int_equal(ab_conn_wait(c, 10), 0);
    }
    ab_doc_destroy(&doc);
    ab_conn_destroy(&c);
    return r;
}

static void test_status_reports_the_plugins_figures(void **state)
{
    (void)state;
    char th[64], out[OUT_MAX], want[160];
    fresh(th, sizeof th, "stat");
    long long before = sql_count("SELECT count(*) FROM ab_runs");
    long long active0 = sql_count("SELECT count(*) FROM ab_runs WHERE status = 'active'");
    ab_producer_t *pa = producer(&g_a), *pb = producer(&g_b);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_producer_claim(pa, th, "done", NULL, &err), AB_OK);
    publish(pa, th, "done", 1, 4, 4); /* started and finished */
    assert_int_equal(ab_producer_claim(pb, th, "open", NULL, &err), AB_OK);
    publish(pb, th, "open", 1, 2, 0); /* started, still active */
    assert_int_equal(ab_producer_flush(pa, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(ab_producer_flush(pb, IT_TIMEOUT, &err), AB_OK);
    ab_producer_destroy(&pa);
    pa = producer(&g_a);
    assert_int_equal(ab_producer_claim(pa, th, "claimed", NULL, &err), AB_OK); /* a run too */
    assert_int_equal(ab_producer_claim(pb, th, "claimed", NULL, &err), AB_OK); /* not again */
    ab_producer_destroy(&pa);
    ab_producer_destroy(&pb);
    assert_int_equal(sql_count("SELECT count(*) FROM ab_runs"), before + 3);
    long long active = active0 + 1;
    assert_int_equal(sql_count("SELECT count(*) FROM ab_runs WHERE status = 'active'"), active);
    /* each broker reports the database's figures, its own runs and the other's */
    for (int i = 0; i < 2; i++) {
        ab_stats_reply_t r = stats_until(i ? &g_b : &g_a, before + 3, active);
        assert_true(r.store_known);
        assert_int_equal(r.runs_total, before + 3);
        assert_int_equal(r.runs_active, active);
        assert_true(r.store_bytes > 0);
        assert_true(r.replicas_known); /* the fixture's superuser sees the WAL senders */
        assert_int_equal(r.replicas, 0);
        assert_int_equal(r.replicas_sync, 0);
    }
    assert_int_equal(it_run_cli(out, "status --broker %s --json", g_b.cmd), 0);
    snprintf(want, sizeof want, ",\"store_known\":true,\"runs_total\":%lld,\"runs_active\":%lld,",
             before + 3, active);
    assert_non_null(strstr(out, want));
    assert_null(strstr(out, "\"store_bytes\":0,"));
    assert_non_null(strstr(out, ",\"replicas_known\":true,\"replicas\":0,\"replicas_sync\":0,"));
    assert_int_equal(it_run_cli(out, "status --broker %s", g_a.cmd), 0);
    assert_null(strstr(out, "reports no figures"));
    assert_non_null(strstr(out, "standby  0 streaming (0 synchronous)"));
    assert_non_null(strstr(out, "(no commit waits for a standby)"));
}

/* ---- a broker lost -------------------------------------------------------------------------- */

static void test_broker_killed_other_goes_on(void **state)
{
    (void)state;
    char th[64];
    fresh(th, sizeof th, "kill");
    ab_producer_t *pb = producer(&g_b);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_producer_claim(pb, th, "r", NULL, &err), AB_OK);
    publish(pb, th, "r", 1, 5, 0);
    assert_int_equal(ab_producer_flush(pb, IT_TIMEOUT, &err), AB_OK);
    ab_producer_destroy(&pb);
    bp_kill(&g_b);
    /* the writer moves to broker A and continues the run where it was */
    ab_producer_t *pa = producer(&g_a);
    uint64_t last = 0;
    assert_int_equal(ab_producer_claim(pa, th, "r", &last, &err), AB_OK);
    assert_int_equal(last, 5);
    publish(pa, th, "r", 6, 10, 10);
    assert_int_equal(ab_producer_flush(pa, IT_TIMEOUT, &err), AB_OK);
    ab_producer_destroy(&pa);
    /* broker B back: it serves the whole run from the database */
    assert_int_equal(bp_restart(&g_b), 0);
    seen_t s = {0};
    snprintf(s.run_a, sizeof s.run_a, "r");
    ab_sub_t *sub = subscribe(&g_b, AB_SUB_THREAD, th, 0, &s);
    long end = pgfx_now_ms() + 10000;
    while (s.n_a < 10 && pgfx_now_ms() < end)
        assert_int_equal(ab_sub_poll(sub, 50, &err), AB_OK);
    assert_int_equal(s.n_a, 10);
    assert_false(s.out_of_order);
    ab_sub_destroy(&sub);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conformance_each_broker),
        cmocka_unit_test(test_fanout_across_brokers_exactly_once),
        cmocka_unit_test(test_fencing_across_brokers),
        cmocka_unit_test(test_resent_through_other_broker_is_duplicate),
        cmocka_unit_test(test_status_reports_the_plugins_figures),
        cmocka_unit_test(test_broker_killed_other_goes_on),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

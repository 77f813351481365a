/*
 * test_pg_tprev.c - the live stamp's tprev (docs/PROTOCOL.md section 5) with
 * two broker processes on one PostgreSQL database (pg_fixture.h): each
 * broker fans out the other's commits it reads back (broker/follow.c) through
 * the same table as its own, so on either broker every live event of a
 * thread written through both carries the position of the thread's previous
 * event, whichever broker committed either. Checked with an ordered thread
 * subscription on each broker while a third producer writes another thread
 * in between: each event once, in position order, every live one (after the
 * thread's first) with tprev == the previous delivered position, and no
 * live event taken for a hole.
 *
 * One server and two brokers for the file; processes stopped by pid.
 */
#include "pg_brokers.h"
#include "testutil.h"

#include "agentbus/producer.h"
#include "agentbus/subscriber.h"
#include "broker_proc.h"

#define N 40

static ab_producer_t *producer(const bp_t *b, const char *thread, const char *run)
{
    ab_producer_opts_t o = {.timeout_ms = IT_TIMEOUT, .batch_max = 4};
    ab_producer_t *p = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_producer_new(&p, b->cmd, &o, &err) != AB_OK)
        fail_msg("producer: %s: %s", ab_status_name(err.code), err.message);
    assert_int_equal(ab_producer_claim(p, thread, run, NULL, &err), AB_OK);
    return p;
}

static void publish1(ab_producer_t *p, const char *thread, const char *run, uint64_t seq)
{
    char body[512];
    it_body(body, sizeof body, thread, run, seq, 0, 16);
    ab_error_t err = AB_ERROR_INIT;
    if (ab_producer_publish_json(p, body, strlen(body), &err) != AB_OK)
        fail_msg("publish %s seq %llu: %s", run, (unsigned long long)seq, err.message);
}

typedef struct ord {
    uint64_t last_pos, n, live, chained;
    bool bad;
} ord_t;

static int on_event(void *ud, const ab_sub_event_t *e)
{
    ord_t *o = ud;
    if (e->stamp.pos <= o->last_pos)
        o->bad = true; /* twice or out of order */
    if (!e->replayed && o->n > 0) {
        if (!e->stamp.has_tprev || e->stamp.tprev != o->last_pos) {
            print_message("live pos %llu: tprev %s%llu, the previous one was %llu\n",
                          (unsigned long long)e->stamp.pos, e->stamp.has_tprev ? "" : "absent ",
                          (unsigned long long)e->stamp.tprev, (unsigned long long)o->last_pos);
            o->bad = true;
        }
        o->chained++;
    }
    o->last_pos = e->stamp.pos;
    o->n++;
    o->live += !e->replayed;
    return 0;
}

static void test_tprev_across_brokers(void **state)
{
    (void)state;
    char th[64], noise[64];
    snprintf(th, sizeof th, "tp-%d", (int)getpid());
    snprintf(noise, sizeof noise, "tp-noise-%d", (int)getpid());
    ord_t oa = {0}, ob = {0};
    ab_sub_t *subs[2] = {NULL, NULL};
    ord_t *ords[2] = {&oa, &ob};
    const bp_t *bps[2] = {&g_a, &g_b};
    ab_error_t err = AB_ERROR_INIT;
    for (int i = 0; i < 2; i++) {
        ab_sub_opts_t o = {.scope = AB_SUB_THREAD,
                           .thread = th,
                           .ordered = true,
                           .on_event = on_event,
                           .ud = ords[i],
                           .timeout_ms = IT_TIMEOUT};
        assert_int_equal(ab_sub_new(&subs[i], bps[i]->cmd, &o, &err), AB_OK);
        assert_int_equal(ab_sub_poll(subs[i], 300, &err), AB_OK);
    }
    ab_producer_t *pa = producer(&g_a, th, "ra"), *pb = producer(&g_b, th, "rb");
    ab_producer_t *pn = producer(&g_b, noise, "rn");
    for (uint64_t s = 1; s <= N; s++) {
        publish1(pa, th, "ra", s);
        publish1(pn, noise, "rn", s);
        publish1(pb, th, "rb", s);
        if (s % 4 == 0) {
            assert_int_equal(ab_producer_flush(pa, IT_TIMEOUT, &err), AB_OK);
            assert_int_equal(ab_producer_flush(pn, IT_TIMEOUT, &err), AB_OK);
            assert_int_equal(ab_producer_flush(pb, IT_TIMEOUT, &err), AB_OK);
            for (int i = 0; i < 2; i++)
                assert_int_equal(ab_sub_poll(subs[i], 0, &err), AB_OK);
        }
    }
    long end = pgfx_now_ms() + 20000;
    while ((oa.n < 2 * N || ob.n < 2 * N) && pgfx_now_ms() < end)
        for (int i = 0; i < 2; i++)
            assert_int_equal(ab_sub_poll(subs[i], 20, &err), AB_OK);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ab_sub_poll(subs[i], 300, &err), AB_OK); /* nothing more */
        ab_sub_stats_t st = ab_sub_stats(subs[i]);
        print_message("broker %c: %llu events, %llu live (%llu chained), holes %llu, "
                      "replays %llu\n",
                      i ? 'b' : 'a', (unsigned long long)ords[i]->n,
                      (unsigned long long)ords[i]->live, (unsigned long long)ords[i]->chained,
                      (unsigned long long)st.holes, (unsigned long long)st.replays);
        assert_int_equal(ords[i]->n, 2 * N);
        assert_false(ords[i]->bad);
        assert_true(ords[i]->chained >= N); /* most arrived live, each with its tprev */
        assert_int_equal(st.holes, 0);
        ab_sub_destroy(&subs[i]);
    }
    ab_producer_destroy(&pa);
    ab_producer_destroy(&pb);
    ab_producer_destroy(&pn);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tprev_across_brokers),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

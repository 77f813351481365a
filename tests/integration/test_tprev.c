/*
 * test_tprev.c - a real broker process: the live stamp's tprev
 * (docs/PROTOCOL.md section 5) and the ordered thread subscription that
 * uses it (docs/CLIENT.md "Subscriber").
 *
 *  - tprev chains: every live event's tprev is the position of the previous
 *    event of its thread (0 for a thread's first), across group commits,
 *    within one group holding several threads, and with threads interleaved
 *    by turns; after a restart the first event of a thread known before it
 *    gets the store's head at start (a bound: nothing of the thread lies
 *    between), and the chain is exact again from there on;
 *  - `--tprev false`: no stamp carries it;
 *  - an ordered thread subscription on a bus where another thread's events
 *    take the positions in between sees no hole at all with tprev (so no
 *    replay per event), and a hole per turn without it; either way every
 *    event of the thread is delivered once, in position order.
 *
 * Brokers bind 127.0.0.1 on ports the system picks (fixed ones for the
 * restart) and are stopped by pid (broker_proc.h).
 */
#include "testutil.h"

#include "agentbus/subscriber.h"
#include "broker_proc.h"

#include <zmq.h>

/* A SUB on every event and heartbeats, returned once a heartbeat arrived (6.2: then the
 * event subscription made before it is active at the broker). */
static void *raw_sub(ab_conn_t *c)
{
    void *sub = zmq_socket(ab_conn_zmq_ctx(c), ZMQ_SUB);
    assert_non_null(sub);
    int zero = 0;
    zmq_setsockopt(sub, ZMQ_LINGER, &zero, sizeof(zero));
    assert_int_equal(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, AB_TOPIC_EVENTS, AB_TOPIC_EVENTS_LEN), 0);
    assert_int_equal(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "hb", 2), 0);
    assert_int_equal(zmq_connect(sub, ab_conn_event_endpoint(c)), 0);
    zmq_pollitem_t it = {.socket = sub, .events = ZMQ_POLLIN};
    for (;;) {
        if (zmq_poll(&it, 1, 3000) <= 0)
            fail_msg("no heartbeat within 3 s");
        zmq_msg_t m;
        zmq_msg_init(&m);
        assert_true(zmq_msg_recv(&m, sub, 0) >= 0);
        bool hb = zmq_msg_size(&m) == 2 && memcmp(zmq_msg_data(&m), "hb", 2) == 0;
        while (zmq_msg_more(&m)) {
            zmq_msg_close(&m);
            zmq_msg_init(&m);
            assert_true(zmq_msg_recv(&m, sub, 0) >= 0);
        }
        zmq_msg_close(&m);
        if (hb)
            return sub;
    }
}

typedef struct seen {
    uint64_t pos;
    bool has;
    uint64_t tprev;
    char thread[16];
} seen_t;

/* Receive live events until @p n are in @p out (heartbeats skipped). */
static void recv_events(void *sub, ab_doc_t *doc, seen_t *out, size_t n)
{
    size_t got = 0;
    ab_doc_t *edoc = NULL;
    assert_int_equal(ab_doc_new(&edoc), AB_OK);
    zmq_pollitem_t it = {.socket = sub, .events = ZMQ_POLLIN};
    while (got < n) {
        if (zmq_poll(&it, 1, 5000) <= 0)
            fail_msg("only %zu of %zu live events arrived", got, n);
        zmq_msg_t part[2];
        zmq_msg_init(&part[0]);
        zmq_msg_init(&part[1]);
        assert_true(zmq_msg_recv(&part[0], sub, 0) >= 0);
        assert_true(zmq_msg_more(&part[0]));
        assert_true(zmq_msg_recv(&part[1], sub, 0) >= 0);
        assert_false(zmq_msg_more(&part[1]));
        if (zmq_msg_size(&part[0]) != 2) {
            const uint8_t *p = zmq_msg_data(&part[1]), *end = p + zmq_msg_size(&part[1]);
            while (p < end) {
                const uint8_t *sb, *eb;
                size_t slen, elen;
                assert_true(ab_record_next(&p, end, &sb, &slen, &eb, &elen));
                ab_stamp_t st;
                ab_event_t ev;
                ab_error_t err = AB_ERROR_INIT;
                assert_int_equal(ab_stamp_decode(doc, sb, slen, &st, &err), AB_OK);
                assert_int_equal(ab_event_decode_head(edoc, eb, elen, NULL, &ev, &err), AB_OK);
                assert_true(got < n);
                out[got] = (seen_t){.pos = st.pos, .has = st.has_tprev, .tprev = st.tprev};
                snprintf(out[got].thread, sizeof out[got].thread, "%.*s", (int)ev.thread.len,
                         ev.thread.ptr);
                got++;
            }
        }
        zmq_msg_close(&part[0]);
        zmq_msg_close(&part[1]);
    }
    ab_doc_destroy(&edoc);
}

/* Publish events of (thread, run) given as parallel arrays, all in one request (one
 * group commit), each accepted. */
static void publish_group(ab_conn_t *c, ab_doc_t *doc, size_t n, const char *const *threads,
                          const char *const *runs, const uint64_t *seqs)
{
    ab_buf_t batch[16];
    assert_true(n <= 16);
    for (size_t i = 0; i < n; i++) {
        batch[i] = (ab_buf_t)AB_BUF_INIT;
        it_event(&batch[i], threads[i], runs[i], seqs[i], 0, 1);
    }
    const ab_result_t *res = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_publish(c, batch, n, doc, &res, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("publish: %s", err.message);
    for (size_t i = 0; i < n; i++) {
        if (res[i].status != AB_RESULT_ACCEPTED)
            fail_msg("event %zu: %s", i, res[i].error ? res[i].error->message : "?");
        ab_buf_free(&batch[i]);
    }
}

/* The truth kept by the test: each thread's last position. */
typedef struct last {
    char thread[4][16];
    uint64_t pos[4];
    int n;
} last_t;

static uint64_t *last_of(last_t *l, const char *thread)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->thread[i], thread) == 0)
            return &l->pos[i];
    assert_true(l->n < 4);
    snprintf(l->thread[l->n], sizeof l->thread[0], "%s", thread);
    l->pos[l->n] = 0;
    return &l->pos[l->n++];
}

/* Every one of @p n events has tprev == its thread's previous position, or (when
 * @p bound is not 0 and the thread has not been seen since) exactly @p bound. */
static void check_chain(last_t *l, const seen_t *ev, size_t n, uint64_t bound, last_t *fresh)
{
    for (size_t i = 0; i < n; i++) {
        assert_true(ev[i].has);
        assert_true(ev[i].tprev < ev[i].pos);
        uint64_t *prev = last_of(l, ev[i].thread);
        bool first_since = bound != 0 && *last_of(fresh, ev[i].thread) == 0;
        if (first_since) { /* a bound: nothing of the thread between it and pos */
            assert_int_equal(ev[i].tprev, bound);
            assert_true(ev[i].tprev >= *prev);
        } else {
            assert_int_equal(ev[i].tprev, *prev);
        }
        *prev = ev[i].pos;
        *last_of(fresh, ev[i].thread) = ev[i].pos;
    }
}

static char fixed_cmd[64], fixed_ev[64];

static int setup_fixed(void **state)
{
    static const char *extra[5];
    bp_fixed_ports(fixed_cmd, fixed_ev, extra);
    return it_setup_with(state, extra);
}

static void test_chain_groups_threads_restart(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    void *sub = raw_sub(c);
    static seen_t ev[64];
    last_t l = {.n = 0}, fresh = {.n = 0};
    /* group 1: one thread; group 2: three threads mixed; then turns of two threads */
    publish_group(c, t->doc, 3, (const char *[]){"a", "a", "a"}, (const char *[]){"r", "r", "r"},
                  (const uint64_t[]){1, 2, 3});
    publish_group(c, t->doc, 6, (const char *[]){"b", "a", "b", "c", "a", "c"},
                  (const char *[]){"r", "r", "r", "r", "r2", "r"},
                  (const uint64_t[]){1, 4, 2, 1, 1, 2});
    for (uint64_t k = 0; k < 6; k++) /* b 3, c 3, b 4, c 4, b 5, c 5 */
        publish_group(c, t->doc, 1, (const char *[]){k % 2 ? "c" : "b"}, (const char *[]){"r"},
                      (const uint64_t[]){3 + k / 2});
    recv_events(sub, t->doc, ev, 15);
    check_chain(&l, ev, 15, 0, &fresh);
    assert_int_equal(ev[0].tprev, 0); /* a's first event */
    assert_int_equal(ev[3].tprev, 0); /* b's */
    assert_int_equal(ev[4].tprev, ev[2].pos);
    assert_int_equal(ev[5].tprev, ev[3].pos); /* b after a in the same group */
    uint64_t head = ev[14].pos, a_before = *last_of(&l, "a");
    assert_true(a_before < head);
    zmq_close(sub);
    ab_conn_destroy(&c);

    /* a restart: the table starts empty, the store's head is its bound */
    assert_int_equal(bp_stop(&t->bp), 0);
    assert_int_equal(bp_restart(&t->bp), 0);
    c = it_connect(&t->bp);
    sub = raw_sub(c);
    publish_group(c, t->doc, 4, (const char *[]){"a", "b", "a", "d"},
                  (const char *[]){"r", "r", "r", "r"}, (const uint64_t[]){5, 6, 6, 1});
    publish_group(c, t->doc, 2, (const char *[]){"b", "a"}, (const char *[]){"r", "r"},
                  (const uint64_t[]){7, 7});
    memset(&fresh, 0, sizeof fresh);
    recv_events(sub, t->doc, ev, 6);
    assert_int_equal(ev[0].pos, head + 1);
    check_chain(&l, ev, 6, head, &fresh);
    assert_true(ev[0].tprev > a_before);      /* a bound, not a's previous event */
    assert_int_equal(ev[2].tprev, ev[0].pos); /* exact again from a's first event on */
    zmq_close(sub);
    ab_conn_destroy(&c);
}

static int setup_no_tprev(void **state)
{
    static const char *const extra[] = {"--tprev", "false", NULL};
    return it_setup_with(state, extra);
}

static void test_no_tprev_flag(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    void *sub = raw_sub(c);
    seen_t ev[3];
    publish_group(c, t->doc, 3, (const char *[]){"a", "b", "a"}, (const char *[]){"r", "r", "r"},
                  (const uint64_t[]){1, 1, 2});
    recv_events(sub, t->doc, ev, 3);
    for (int i = 0; i < 3; i++)
        assert_false(ev[i].has);
    zmq_close(sub);
    ab_conn_destroy(&c);
}

/* ---- the ordered thread subscription on a busy bus ------------------------------------ */

typedef struct ord {
    uint64_t last_pos, next_seq, live, replayed;
} ord_t;

static int on_ordered(void *ud, const ab_sub_event_t *e)
{
    ord_t *o = ud;
    if (e->stamp.pos <= o->last_pos || e->ev.seq != o->next_seq)
        fail_msg("seq %llu at pos %llu after pos %llu, expected seq %llu (%s)",
                 (unsigned long long)e->ev.seq, (unsigned long long)e->stamp.pos,
                 (unsigned long long)o->last_pos, (unsigned long long)o->next_seq,
                 e->replayed ? "replayed" : "live");
    o->last_pos = e->stamp.pos;
    o->next_seq++;
    if (e->replayed)
        o->replayed++;
    else
        o->live++;
    return 0;
}

/* TURNS turns of: an event of thread "noise", then one of "mine"; the subscriber polls
 * after each turn. @return its stats once every event of "mine" was delivered. */
static ab_sub_stats_t busy_bus(it_t *t, ord_t *o)
{
    enum { TURNS = 60 };
    ab_conn_t *c = it_connect(&t->bp);
    ab_sub_opts_t so = {
        .scope = AB_SUB_THREAD, .thread = "mine", .ordered = true, .on_event = on_ordered, .ud = o};
    ab_sub_t *s = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_sub_new(&s, t->bp.cmd, &so, &err), AB_OK);
    assert_int_equal(ab_sub_poll(s, 300, &err), AB_OK); /* the first replay: nothing yet */
    o->next_seq = 1;
    for (uint64_t i = 1; i <= TURNS; i++) {
        publish_group(c, t->doc, 1, (const char *[]){"noise"}, (const char *[]){"n"},
                      (const uint64_t[]){i});
        publish_group(c, t->doc, 1, (const char *[]){"mine"}, (const char *[]){"m"},
                      (const uint64_t[]){i});
        assert_int_equal(ab_sub_poll(s, 0, &err), AB_OK);
    }
    long deadline = ab__mono_ms() + 20000;
    while (o->next_seq <= TURNS && ab__mono_ms() < deadline)
        assert_int_equal(ab_sub_poll(s, 100, &err), AB_OK);
    assert_int_equal(o->next_seq, TURNS + 1); /* each once: the callback checks the order */
    assert_int_equal(ab_sub_poll(s, 200, &err), AB_OK); /* and nothing more */
    assert_int_equal(o->next_seq, TURNS + 1);
    ab_sub_stats_t st = ab_sub_stats(s);
    print_message("holes %llu, replays %llu, live %llu, replayed %llu\n",
                  (unsigned long long)st.holes, (unsigned long long)st.replays,
                  (unsigned long long)o->live, (unsigned long long)o->replayed);
    ab_sub_destroy(&s);
    ab_conn_destroy(&c);
    return st;
}

static void test_ordered_busy_bus_no_replay_per_event(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ord_t o = {0};
    ab_sub_stats_t st = busy_bus(t, &o);
    assert_int_equal(st.holes, 0); /* no live event of "mine" looked like a hole */
    assert_true(o.live > o.replayed);
}

static void test_ordered_busy_bus_without_tprev(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ord_t o = {0};
    ab_sub_stats_t st = busy_bus(t, &o);
    /* the rule without tprev: "noise" between every two events, so each live one that
     * arrives is a hole and a replay (one replay often brings two turns' events) */
    assert_true(st.holes >= 15);
    assert_true(o.replayed > o.live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_chain_groups_threads_restart, setup_fixed,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_no_tprev_flag, setup_no_tprev, it_teardown),
        cmocka_unit_test_setup_teardown(test_ordered_busy_bus_no_replay_per_event, it_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_ordered_busy_bus_without_tprev, setup_no_tprev,
                                        it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_live.c - a real broker process: live fan-out on the event endpoint
 * (topics, [topic][records] messages, stamps, heartbeats, thread
 * isolation), a slow subscriber that
 * fills its holes with replay, replay by thread cursors and from a commit
 * position, and replay credit (a window of 1 and no credit: one chunk only).
 */
#include "testutil.h"

#include "broker_proc.h"

#include <zmq.h>

typedef struct live {
    zmq_msg_t part[3];
    int n;
} live_t;

static void live_close(live_t *l)
{
    for (int i = 0; i < l->n; i++)
        zmq_msg_close(&l->part[i]);
    l->n = 0;
}

/* Receive one message (at most 3 frames) within @p ms; false on timeout. */
static bool live_recv(void *sub, live_t *l, int ms)
{
    live_close(l);
    zmq_pollitem_t it = {.socket = sub, .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, ms) <= 0)
        return false;
    int more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        assert_true(zmq_msg_recv(&m, sub, 0) >= 0);
        more = zmq_msg_more(&m);
        assert_true(l->n < 3);
        l->part[l->n++] = m;
    }
    return true;
}

static bool is_hb(live_t *l)
{
    return zmq_msg_size(&l->part[0]) == AB_TOPIC_HEARTBEAT_LEN &&
           memcmp(zmq_msg_data(&l->part[0]), "hb", 2) == 0;
}

/* A SUB on the event endpoint subscribed to @p thread (NULL: every event)
 * and to heartbeats; returns once a heartbeat proves the subscription is
 * live (subscriptions travel in order on one connection). */
static void *sub_open(ab_conn_t *c, const char *thread, int rcvhwm, ab_doc_t *doc)
{
    void *sub = zmq_socket(ab_conn_zmq_ctx(c), ZMQ_SUB);
    assert_non_null(sub);
    int zero = 0;
    zmq_setsockopt(sub, ZMQ_LINGER, &zero, sizeof(zero));
    if (rcvhwm > 0)
        zmq_setsockopt(sub, ZMQ_RCVHWM, &rcvhwm, sizeof(rcvhwm));
    ab_buf_t topic = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    if (thread)
        assert_int_equal(ab_topic_thread_prefix(&topic, (ab_str_t){thread, strlen(thread)}, &err),
                         AB_OK);
    else
        assert_int_equal(ab_buf_append(&topic, AB_TOPIC_EVENTS, AB_TOPIC_EVENTS_LEN), AB_OK);
    assert_int_equal(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, topic.data, topic.len), 0);
    assert_int_equal(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "hb", 2), 0);
    assert_int_equal(zmq_connect(sub, ab_conn_event_endpoint(c)), 0);
    ab_buf_free(&topic);
    live_t l = {.n = 0};
    for (;;) {
        if (!live_recv(sub, &l, 3000))
            fail_msg("no heartbeat within 3 s");
        if (!is_hb(&l))
            continue;
        ab_msg_t m;
        assert_int_equal(l.n, 2);
        assert_int_equal(
            ab_msg_decode(doc, zmq_msg_data(&l.part[1]), zmq_msg_size(&l.part[1]), NULL, &m, &err),
            AB_OK);
        assert_int_equal(m.op, AB_OP_HEARTBEAT);
        assert_int_equal(m.u.heartbeat.instance.len, strlen(ab_conn_instance(c)));
        assert_memory_equal(m.u.heartbeat.instance.ptr, ab_conn_instance(c),
                            m.u.heartbeat.instance.len);
        break;
    }
    live_close(&l);
    return sub;
}

/* Publish events [from, to] of a run with @p pad bytes of content each,
 * keeping the envelopes in @p keep (indexed by seq - 1) when not NULL. */
static void publish_range(ab_conn_t *c, ab_doc_t *doc, const char *thread, const char *run,
                          uint64_t from, uint64_t to, size_t pad, ab_buf_t *keep,
                          uint64_t *last_pos)
{
    enum { B = 200 };
    ab_buf_t batch[B];
    ab_error_t err = AB_ERROR_INIT;
    for (uint64_t s = from; s <= to;) {
        size_t n = 0;
        for (; n < B && s <= to; n++, s++) {
            char body[4096];
            it_body(body, sizeof(body), thread, run, s, 0, pad);
            batch[n] = (ab_buf_t)AB_BUF_INIT;
            assert_int_equal(ab_envelope_json(&batch[n], 1, thread, run, s, 1, body, &err), AB_OK);
        }
        const ab_result_t *res = NULL;
        if (ab_conn_publish(c, batch, n, doc, &res, IT_TIMEOUT, &err) != AB_OK)
            fail_msg("publish: %s", err.message);
        for (size_t i = 0; i < n; i++) {
            if (res[i].status != AB_RESULT_ACCEPTED)
                fail_msg("event %zu: %s", i, res[i].error ? res[i].error->message : "?");
            if (last_pos)
                *last_pos = res[i].pos;
            if (keep)
                keep[s - n + i - 1] = batch[i];
            else
                ab_buf_free(&batch[i]);
        }
    }
}

static void test_fanout_topics(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    void *sub = sub_open(c, "a", 0, t->doc);
    ab_buf_t sent[10];
    publish_range(c, t->doc, "a", "r", 1, 5, 0, sent, NULL);
    publish_range(c, t->doc, "ab", "r", 1, 5, 0, NULL, NULL);
    publish_range(c, t->doc, "a", "r", 6, 10, 0, sent, NULL);
    ab_buf_t topic = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_topic_event(&topic, (ab_str_t){"a", 1}, (ab_str_t){"r", 1}, &err), AB_OK);
    live_t l = {.n = 0};
    uint64_t last_pos = 0;
    int got = 0, hbs = 0;
    int messages = 0;
    while (got < 10) {
        if (!live_recv(sub, &l, 3000))
            fail_msg("only %d of 10 live events arrived", got);
        if (is_hb(&l)) {
            hbs++;
            continue;
        }
        assert_int_equal(l.n, 2); /* [topic][records] */
        messages++;
        assert_int_equal(zmq_msg_size(&l.part[0]), topic.len);
        assert_memory_equal(zmq_msg_data(&l.part[0]), topic.data, topic.len);
        const uint8_t *p = zmq_msg_data(&l.part[1]), *end = p + zmq_msg_size(&l.part[1]);
        while (p < end) {
            const uint8_t *sb, *eb;
            size_t slen, elen;
            assert_true(ab_record_next(&p, end, &sb, &slen, &eb, &elen));
            ab_stamp_t st;
            assert_int_equal(ab_stamp_decode(t->doc, sb, slen, &st, &err), AB_OK);
            assert_true(st.pos > last_pos);
            last_pos = st.pos;
            assert_true(got < 10);
            assert_int_equal(elen, sent[got].len);
            assert_memory_equal(eb, sent[got].data, sent[got].len);
            got++;
        }
    }
    /* each publish of 5 was its own group commit: one live message each */
    assert_int_equal(messages, 2);
    live_close(&l);
    for (int i = 0; i < 10; i++)
        ab_buf_free(&sent[i]);
    ab_buf_free(&topic);
    zmq_close(sub);
    ab_conn_destroy(&c);
}

typedef struct gapfill {
    uint64_t next; /* next seq to deliver */
    uint64_t delivered;
    ab_doc_t *edoc;
} gapfill_t;

static ab_status_t gap_row(void *ud, const ab_stamp_t *st, const uint8_t *b, size_t len,
                           ab_error_t *err)
{
    gapfill_t *g = ud;
    (void)st;
    ab_event_t ev;
    assert_int_equal(ab_event_decode(g->edoc, b, len, NULL, &ev, err), AB_OK);
    assert_int_equal(ev.seq, g->next);
    g->next++;
    g->delivered++;
    return AB_OK;
}

static void fill_from(ab_conn_t *c, ab_doc_t *doc, gapfill_t *g)
{
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay.scope = AB_REPLAY_RUN;
    q.u.replay.thread = (ab_str_t){"slow", 4};
    q.u.replay.run = (ab_str_t){"r", 1};
    q.u.replay.after_seq = g->next - 1;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_replay(c, &q, gap_row, g, doc, NULL, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("replay: %s", err.message);
}

static int setup_hwm(void **state)
{
    static const char *const extra[] = {"--hwm", "10", NULL};
    return it_setup_with(state, extra);
}

static void test_slow_subscriber(void **state)
{
    enum { TOTAL = 3000 };
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    void *sub = sub_open(c, "slow", 1, t->doc);
    publish_range(c, t->doc, "slow", "r", 1, TOTAL, 2000, NULL, NULL);
    gapfill_t g = {.next = 1};
    assert_int_equal(ab_doc_new(&g.edoc), AB_OK);
    live_t l = {.n = 0};
    int holes = 0, dropped_dups = 0;
    ab_error_t err = AB_ERROR_INIT;
    while (g.next <= TOTAL && live_recv(sub, &l, 1000)) {
        if (is_hb(&l))
            continue;
        assert_int_equal(l.n, 2);
        const uint8_t *p = zmq_msg_data(&l.part[1]), *end = p + zmq_msg_size(&l.part[1]);
        const uint8_t *sb, *eb;
        size_t slen, elen;
        while (p < end) {
            assert_true(ab_record_next(&p, end, &sb, &slen, &eb, &elen));
            ab_event_t ev;
            assert_int_equal(ab_event_decode(g.edoc, eb, elen, NULL, &ev, &err), AB_OK);
            if (ev.seq > g.next) {
                holes++;
                fill_from(c, t->doc, &g); /* never deliver past a hole */
            }
            if (ev.seq < g.next) {
                dropped_dups++;
                continue;
            }
            assert_int_equal(ev.seq, g.next);
            g.next++;
            g.delivered++;
        }
    }
    if (g.next <= TOTAL) /* the tail was dropped */
        fill_from(c, t->doc, &g);
    print_message("slow subscriber: %d holes filled, %d already replayed\n", holes, dropped_dups);
    assert_int_equal(g.delivered, TOTAL);
    assert_int_equal(g.next, TOTAL + 1);
    live_close(&l);
    ab_doc_destroy(&g.edoc);
    zmq_close(sub);
    ab_conn_destroy(&c);
}

typedef struct collect {
    ab_doc_t *edoc;
    char runs[64];
    uint64_t seqs[64];
    uint64_t pos[64];
    int n;
} collect_t;

static ab_status_t collect_row(void *ud, const ab_stamp_t *st, const uint8_t *b, size_t len,
                               ab_error_t *err)
{
    collect_t *k = ud;
    ab_event_t ev;
    assert_int_equal(ab_event_decode(k->edoc, b, len, NULL, &ev, err), AB_OK);
    assert_true(k->n < 64);
    k->runs[k->n] = ev.run.ptr[1];
    k->seqs[k->n] = ev.seq;
    k->pos[k->n] = st->pos;
    k->n++;
    return AB_OK;
}

static void test_replay_cursors_and_position(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    uint64_t pos5 = 0, last = 0;
    publish_range(c, t->doc, "tc", "r1", 1, 5, 0, NULL, &pos5);
    publish_range(c, t->doc, "tc", "r2", 1, 10, 0, NULL, NULL);
    publish_range(c, t->doc, "tc", "r1", 6, 10, 0, NULL, &last);
    publish_range(c, t->doc, "other", "r9", 1, 3, 0, NULL, NULL);
    collect_t k = {.n = 0};
    assert_int_equal(ab_doc_new(&k.edoc), AB_OK);
    ab_error_t err = AB_ERROR_INIT;
    /* thread scope: r1 after 4, r2 from the start */
    ab_cursor_t cur = {{"r1", 2}, 4};
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay.scope = AB_REPLAY_THREAD;
    q.u.replay.thread = (ab_str_t){"tc", 2};
    q.u.replay.cursors = &cur;
    q.u.replay.ncursors = 1;
    ab_replay_end_t end;
    assert_int_equal(ab_conn_replay(c, &q, collect_row, &k, t->doc, &end, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(k.n, 6 + 10);
    uint64_t next[3] = {0, 5, 1};
    for (int i = 0; i < k.n; i++) {
        int r = k.runs[i] - '0';
        assert_int_equal(k.seqs[i], next[r]++);
        if (i)
            assert_true(k.pos[i] > k.pos[i - 1]);
    }
    assert_int_equal(end.nheads, 2);
    /* all scope after the position of r1's 5th event */
    k.n = 0;
    ab_msg_t qa = {.op = AB_OP_REPLAY};
    qa.u.replay.scope = AB_REPLAY_ALL;
    qa.u.replay.after_pos = pos5;
    assert_int_equal(ab_conn_replay(c, &qa, collect_row, &k, t->doc, &end, IT_TIMEOUT, &err),
                     AB_OK);
    assert_int_equal(k.n, 10 + 5 + 3);
    assert_true(k.pos[0] > pos5);
    assert_int_equal(k.seqs[0], 1); /* r2's first event comes next */
    ab_doc_destroy(&k.edoc);
    ab_conn_destroy(&c);
}

static void test_replay_credit_window(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    publish_range(c, t->doc, "cw", "r", 1, 30, 0, NULL, NULL);
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay = (ab_replay_t){.scope = AB_REPLAY_RUN, .window = 1, .chunk_events = 2};
    q.u.replay.thread = (ab_str_t){"cw", 2};
    q.u.replay.run = (ab_str_t){"r", 1};
    ab_error_t err = AB_ERROR_INIT;
    uint64_t cid = 0;
    assert_int_equal(ab_conn_send(c, &q, NULL, 0, &cid, &err), AB_OK);
    ab_msg_t m;
    assert_int_equal(ab_conn_recv(c, cid, t->doc, &m, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(m.op, AB_OP_REPLAY_CHUNK);
    assert_int_equal(m.u.replay_chunk.count, 2);
    assert_int_equal(ab_conn_nframes(c), 1); /* one records frame */
    /* no credit: nothing more may arrive */
    assert_int_equal(ab_conn_recv(c, cid, t->doc, &m, 700, &err), AB_TIMEOUT);
    /* cancel ends the stream with request_aborted */
    ab_error_clear(&err);
    ab_msg_t cancel = {.op = AB_OP_CANCEL, .cid = cid};
    assert_int_equal(ab_conn_send(c, &cancel, NULL, 0, NULL, &err), AB_OK);
    assert_int_equal(ab_conn_recv(c, cid, t->doc, &m, IT_TIMEOUT, &err), AB_REQUEST_ABORTED);
    assert_int_equal(err.cid, cid);
    ab_conn_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fanout_topics, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_slow_subscriber, setup_hwm, it_teardown),
        cmocka_unit_test_setup_teardown(test_replay_cursors_and_position, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_replay_credit_window, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

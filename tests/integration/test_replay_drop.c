/*
 * test_replay_drop.c - a replay whose chunk the broker's ROUTER drops at a full
 * queue (docs/PROTOCOL.md 7.6.2): the replay ends with `error` `overloaded`, never
 * continues past the dropped chunk, and its cid is free again once it ended.
 *
 * A raw connection (receive high-water mark 1) floods `ping`s without reading
 * until the broker logs a dropped `pong` (its queue of answers is at ZeroMQ's
 * high-water mark), then asks a `replay` of a run of RUN_EVENTS events (window
 * 2, one event per chunk), pinging on until its first chunk is dropped (the
 * broker logs it; the pongs take any room that frees meanwhile). The
 * connection then reads everything queued (a `ping` handshake tells when), and
 * asks the same replay, with the same cid, again: it must start (the first one
 * ended) and give every event once, in order. Before the fix the first replay
 * stayed open forever without credit (its credits went with the dropped chunks),
 * so the second was refused `invalid_argument` ("already running"); and a chunk
 * that found room after a dropped one was delivered past the hole.
 */
#include "testutil.h"

#include "raw_client.h"

#define RUN_EVENTS 5
#define T_CID      900
#define PING_CID   10000 /* pings' cids from here */
#define MARK_CID   5000000
#define PING_BATCH 1000
#define FULL_DROPS 2000 /* pongs dropped before the replay */
#define MAX_PINGS  400000
#define WAIT_MS    20000

static int setup(void **state)
{
    static const char *const extra[] = {"--log-level", "debug", "--snapshot-every", "0", NULL};
    char log[64];
    snprintf(log, sizeof log, "/tmp/agentbus-rdrop-%d.log", (int)getpid());
    return it_setup_log(state, extra, log);
}

static int teardown(void **state)
{
    it_t *t = *state;
    if (t != NULL && t->bp.log[0])
        unlink(t->bp.log);
    return it_teardown(state);
}

static void publish_run(it_t *t)
{
    ab_conn_t *c = it_connect(&t->bp);
    ab_buf_t evs[RUN_EVENTS];
    for (uint64_t i = 0; i < RUN_EVENTS; i++) {
        evs[i] = (ab_buf_t)AB_BUF_INIT;
        it_event(&evs[i], "th", "r1", i + 1, RUN_EVENTS, 1);
    }
    const ab_result_t *res = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_publish(c, evs, RUN_EVENTS, t->doc, &res, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("publish: %s", err.message);
    for (int i = 0; i < RUN_EVENTS; i++) {
        assert_int_equal(res[i].status, AB_RESULT_ACCEPTED);
        ab_buf_free(&evs[i]);
    }
    ab_conn_destroy(&c);
}

static void send_msg(void *s, const ab_msg_t *m)
{
    ab_buf_t buf = AB_BUF_INIT;
    rc_encode(m, &buf);
    assert_true(rc_send(s, &buf, WAIT_MS));
    ab_buf_free(&buf);
}

static void send_ping(void *s, uint64_t cid)
{
    ab_msg_t m = {.op = AB_OP_PING, .v = rc_version(), .cid = cid};
    send_msg(s, &m);
}

static void send_replay(void *s, uint32_t window)
{
    ab_msg_t q = {.op = AB_OP_REPLAY, .v = rc_version(), .cid = T_CID};
    q.u.replay = (ab_replay_t){.scope = AB_REPLAY_RUN, .window = window, .chunk_events = 1};
    q.u.replay.thread = (ab_str_t){"th", 2};
    q.u.replay.run = (ab_str_t){"r1", 2};
    send_msg(s, &q);
}

static void decode(ab_doc_t *doc, zmq_msg_t *hdr, ab_msg_t *m)
{
    ab_error_t err = AB_ERROR_INIT;
    if (ab_msg_decode(doc, zmq_msg_data(hdr), zmq_msg_size(hdr), NULL, m, &err) != AB_OK)
        fail_msg("undecodable message from the broker: %s", err.message);
}

/* A DEALER that reads nothing: ZeroMQ keeps one message, the kernel a small fixed buffer
 * (SO_RCVBUF set: no autotuning), so what the broker sends waits in its own queue. */
static void *stubborn_dealer(void *ctx, const char *ep)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    assert_non_null(s);
    int zero = 0, one = 1, small = 4096;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVHWM, &one, sizeof one);
    zmq_setsockopt(s, ZMQ_RCVBUF, &small, sizeof small);
    rc_curve_from_env(s);
    assert_int_equal(zmq_connect(s, ep), 0);
    return s;
}

/* Fill the connection's queue of answers: ping until the broker has dropped FULL_DROPS pongs,
 * so the kernel's buffers towards the client are full too. @return the next ping's cid. */
static uint64_t fill_queue(it_t *t, void *s)
{
    uint64_t cid = PING_CID;
    while (cid < PING_CID + MAX_PINGS) {
        for (int i = 0; i < PING_BATCH; i++)
            send_ping(s, cid++);
        if (bp_wait_log(&t->bp, "dropped a pong reply", FULL_DROPS, 0) >= FULL_DROPS)
            return cid;
    }
    fail_msg("%llu pings unread and not %d pongs dropped", (unsigned long long)cid, FULL_DROPS);
    return cid;
}

/* After the replay's request, keep pinging until the broker logs its first chunk dropped: the
 * queue may still drain into the kernel for a while (a slow, sanitized broker), and a pong
 * answered after the request takes any room that frees before the chunk comes. */
static void keep_full(it_t *t, void *s, uint64_t cid)
{
    while (cid + PING_BATCH < PING_CID + MAX_PINGS) {
        if (bp_wait_log(&t->bp, "dropped a replay_chunk (cid 900)", 1, 0) >= 1)
            return;
        for (int i = 0; i < PING_BATCH; i++)
            send_ping(s, cid++);
    }
    if (bp_wait_log(&t->bp, "dropped a replay_chunk (cid 900)", 1, WAIT_MS) < 1)
        fail_msg("the broker did not drop the replay's first chunk");
}

/* Whether @p m is the end of the first replay: `overloaded` naming the dropped chunk. */
static bool drop_end(const ab_msg_t *m)
{
    return m->op == AB_OP_ERROR && m->cid == T_CID && m->u.error.error->code == AB_OVERLOADED &&
           strstr(m->u.error.error->message, "dropped") != NULL;
}

/* Seq of each record of a chunk's records frame, checked to follow *@p last. */
static uint32_t check_chunk(zmq_msg_t *frame, ab_doc_t *edoc, uint64_t *last)
{
    const uint8_t *p = zmq_msg_data(frame), *end = p + zmq_msg_size(frame);
    const uint8_t *st, *ev;
    size_t slen, elen;
    uint32_t n = 0;
    while (p < end) {
        assert_true(ab_record_next(&p, end, &st, &slen, &ev, &elen));
        ab_event_t e;
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab_event_decode(edoc, ev, elen, NULL, &e, &err), AB_OK);
        if (e.seq != *last + 1)
            fail_msg("replay delivered seq %llu after %llu", (unsigned long long)e.seq,
                     (unsigned long long)*last);
        *last = e.seq;
        n++;
    }
    return n;
}

/* Read everything queued: until a marker ping's pong (a later marker when one was dropped).
 * Chunks of the first replay queued before its dropped one may come, in order. */
static void drain(void *s, ab_doc_t *doc, ab_doc_t *edoc, int *old_ends)
{
    uint64_t last = 0;
    long deadline = ab__mono_ms() + WAIT_MS;
    uint64_t mark = MARK_CID;
    send_ping(s, mark);
    for (int read = 0; ab__mono_ms() < deadline; read++) {
        zmq_msg_t parts[3];
        size_t n = rc_recv(s, parts, 3, deadline - ab__mono_ms());
        if (n == 0)
            break;
        ab_msg_t m;
        decode(doc, &parts[0], &m);
        bool done = m.op == AB_OP_PONG && m.cid >= MARK_CID;
        if (m.cid == T_CID && m.op == AB_OP_REPLAY_CHUNK && n == 2)
            check_chunk(&parts[1], edoc, &last); /* sent before the drop: no hole */
        else if (m.cid == T_CID && !drop_end(&m))
            fail_msg("the first replay got a %s after its chunk was dropped", ab_op_name(m.op));
        *old_ends += drop_end(&m);
        rc_close(parts, n);
        if (done)
            return;
        if (read > 0 && read % (2 * PING_BATCH) == 0)
            send_ping(s, ++mark); /* the previous marker's pong may have been dropped */
    }
    fail_msg("the queued answers were not read within %d ms", WAIT_MS);
}

/* The second replay with the first one's cid: every event once, then replay_end. */
static void replay_again(void *s, ab_doc_t *doc, int *old_ends)
{
    ab_doc_t *edoc = NULL;
    assert_int_equal(ab_doc_new(&edoc), AB_OK);
    send_replay(s, 8);
    long deadline = ab__mono_ms() + WAIT_MS;
    uint64_t last = 0, events = 0;
    for (bool ended = false; !ended;) {
        zmq_msg_t parts[3];
        size_t n = rc_recv(s, parts, 3, deadline - ab__mono_ms());
        if (n == 0)
            fail_msg("the second replay did not end within %d ms", WAIT_MS);
        ab_msg_t m;
        decode(doc, &parts[0], &m);
        if (m.cid != T_CID) { /* a pong */
        } else if (m.op == AB_OP_REPLAY_CHUNK) {
            assert_int_equal(n, 2);
            events += check_chunk(&parts[1], edoc, &last);
            ab_msg_t c = {.op = AB_OP_CREDIT, .v = rc_version(), .cid = T_CID};
            c.u.credit.chunks = 1;
            send_msg(s, &c);
        } else if (drop_end(&m) && events == 0) {
            ++*old_ends; /* the first replay's end, read after the marker */
        } else if (m.op == AB_OP_REPLAY_END) {
            assert_int_equal(m.u.replay_end.events, RUN_EVENTS);
            ended = true;
        } else {
            fail_msg("second replay: %s %s: %s", ab_op_name(m.op),
                     m.op == AB_OP_ERROR ? ab_status_name(m.u.error.error->code) : "",
                     m.op == AB_OP_ERROR ? m.u.error.error->message : "");
        }
        rc_close(parts, n);
    }
    assert_int_equal(events, RUN_EVENTS);
    assert_int_equal(last, RUN_EVENTS);
    ab_doc_destroy(&edoc);
}

static void test_dropped_chunk_ends_replay(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    publish_run(t);
    void *ctx = zmq_ctx_new();
    void *s = stubborn_dealer(ctx, t->bp.cmd);
    ab_buf_t buf = AB_BUF_INIT;
    rc_encode_hello(&buf, 1);
    assert_true(rc_send(s, &buf, WAIT_MS));
    ab_buf_free(&buf);
    zmq_msg_t parts[3];
    size_t n = rc_recv(s, parts, 3, WAIT_MS); /* welcome */
    assert_int_equal(n, 1);
    rc_close(parts, n);

    uint64_t cid = fill_queue(t, s);
    send_replay(s, 2);
    /* its first chunk (a second one may follow, before the reader hears of the first) */
    keep_full(t, s, cid);
    int old_ends = 0;
    ab_doc_t *edoc = NULL;
    assert_int_equal(ab_doc_new(&edoc), AB_OK);
    drain(s, t->doc, edoc, &old_ends);
    ab_doc_destroy(&edoc);
    replay_again(s, t->doc, &old_ends);
    assert_true(old_ends <= 1); /* its end may have been dropped too */

    zmq_close(s);
    zmq_ctx_term(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dropped_chunk_ends_replay, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

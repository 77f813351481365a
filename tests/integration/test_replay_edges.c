/*
 * test_replay_edges.c - the edges of `replay` against a real broker
 * (docs/PROTOCOL.md 7.6): cursors at and after the end, unknown runs and
 * threads, a chunk boundary that needs one more credit for the end, the byte
 * window, late and unknown credit, a cid reused while running.
 *
 * "Nothing more was sent" is shown by a handshake, not a wait: a second
 * replay on the same connection is served by the same reader thread, which
 * pumps its sessions in order, so that replay's end arrives after anything
 * the first one could have sent meanwhile.
 */
#include "testutil.h"

#include "broker_proc.h"

#define N 8 /* events of run ed/r */

static void publish_run(ab_conn_t *c, ab_doc_t *doc, const char *thread, const char *run, int n,
                        size_t pad, uint64_t *last_pos)
{
    ab_buf_t evs[64];
    ab_error_t err = AB_ERROR_INIT;
    assert_true(n <= 64);
    for (int i = 0; i < n; i++) {
        char body[4096];
        it_body(body, sizeof body, thread, run, (uint64_t)i + 1, (uint64_t)n, pad);
        evs[i] = (ab_buf_t)AB_BUF_INIT;
        assert_int_equal(ab_envelope_json(&evs[i], 1, thread, run, (uint64_t)i + 1, 1, body, &err),
                         AB_OK);
    }
    const ab_result_t *res = NULL;
    if (ab_conn_publish(c, evs, (size_t)n, doc, &res, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("publish: %s", err.message);
    for (int i = 0; i < n; i++) {
        assert_int_equal(res[i].status, AB_RESULT_ACCEPTED);
        if (last_pos)
            *last_pos = res[i].pos;
        ab_buf_free(&evs[i]);
    }
}

static ab_msg_t run_q(const char *thread, const char *run, uint64_t after, uint32_t window,
                      uint32_t chunk)
{
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay = (ab_replay_t){.scope = AB_REPLAY_RUN, .window = window, .chunk_events = chunk};
    q.u.replay.thread = (ab_str_t){thread, strlen(thread)};
    q.u.replay.run = (ab_str_t){run, strlen(run)};
    q.u.replay.after_seq = after;
    return q;
}

static uint64_t send_req(ab_conn_t *c, const ab_msg_t *m)
{
    uint64_t cid = 0;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_send(c, m, NULL, 0, &cid, &err) != AB_OK)
        fail_msg("send %s: %s", ab_op_name(m->op), err.message);
    return cid;
}

static void credit(ab_conn_t *c, uint64_t cid, uint32_t n)
{
    ab_msg_t m = {.op = AB_OP_CREDIT, .cid = cid};
    m.u.credit.chunks = n;
    (void)send_req(c, &m);
}

/* The next message of any cid; an error's status in *st. */
static ab_msg_t next_msg(ab_conn_t *c, ab_doc_t *doc, ab_status_t *st, ab_error_t *err)
{
    ab_msg_t m = {.op = AB_OP_NONE_};
    ab_error_clear(err);
    *st = ab_conn_recv(c, 0, doc, &m, IT_TIMEOUT, err);
    if (*st != AB_OK && m.op != AB_OP_ERROR)
        fail_msg("recv: %s: %s", ab_status_name(*st), err->message);
    return m;
}

/* A replay of an unknown run (the handshake): its end, with nothing of @p other before it. */
static void handshake(ab_conn_t *c, ab_doc_t *doc, uint64_t other)
{
    ab_msg_t q = run_q("ed", "none", 0, 1, 1);
    uint64_t hs = send_req(c, &q);
    ab_status_t st;
    ab_error_t err = AB_ERROR_INIT;
    ab_msg_t m = next_msg(c, doc, &st, &err);
    if (m.cid == other)
        fail_msg("replay %llu sent a %s without credit or room", (unsigned long long)other,
                 ab_op_name(m.op));
    assert_int_equal(m.cid, hs);
    assert_int_equal(m.op, AB_OP_REPLAY_END);
}

/* Run scope at and after the end, and an unknown run: replay_end at once, events 0,
 * one head (status unknown for the unknown run). */
static void test_cursor_at_end(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    publish_run(c, t->doc, "ed", "r", N, 0, NULL);
    const uint64_t afters[] = {N, N + 1, INT64_MAX};
    for (size_t i = 0; i < 3; i++) {
        ab_msg_t q = run_q("ed", "r", afters[i], 1, 0);
        uint64_t cid = send_req(c, &q);
        ab_msg_t m;
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab_conn_recv(c, cid, t->doc, &m, IT_TIMEOUT, &err), AB_OK);
        assert_int_equal(m.op, AB_OP_REPLAY_END);
        assert_int_equal(m.u.replay_end.events, 0);
        assert_int_equal(m.u.replay_end.nheads, 1);
        assert_int_equal(m.u.replay_end.heads[0].last_seq, N);
        assert_int_equal(m.u.replay_end.heads[0].status, AB_RUN_STATUS_FINISHED);
    }
    ab_msg_t q = run_q("ed", "nope", 0, 1, 0);
    uint64_t cid = send_req(c, &q);
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_recv(c, cid, t->doc, &m, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(m.op, AB_OP_REPLAY_END);
    assert_int_equal(m.u.replay_end.events, 0);
    assert_int_equal(m.u.replay_end.nheads, 1);
    assert_int_equal(m.u.replay_end.heads[0].status, AB_RUN_STATUS_UNKNOWN);
    assert_int_equal(m.u.replay_end.heads[0].run.len, 4);
    /* scope all after the head, thread scope of an unknown thread */
    ab_msg_t qa = {.op = AB_OP_REPLAY};
    qa.u.replay = (ab_replay_t){.scope = AB_REPLAY_ALL, .window = 1, .after_pos = 1u << 30};
    cid = send_req(c, &qa);
    assert_int_equal(ab_conn_recv(c, cid, t->doc, &m, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(m.op, AB_OP_REPLAY_END);
    assert_int_equal(m.u.replay_end.events, 0);
    ab_msg_t qt = {.op = AB_OP_REPLAY};
    qt.u.replay = (ab_replay_t){.scope = AB_REPLAY_THREAD, .window = 1};
    qt.u.replay.thread = (ab_str_t){"nobody", 6};
    cid = send_req(c, &qt);
    assert_int_equal(ab_conn_recv(c, cid, t->doc, &m, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(m.op, AB_OP_REPLAY_END);
    assert_int_equal(m.u.replay_end.events, 0);
    assert_int_equal(m.u.replay_end.nheads, 0);
    ab_conn_destroy(&c);
}

/* N events in chunks of N/2 with a window of 2: two full chunks, then the end needs one more
 * credit (7.6.1 step 4); no event twice. */
static void test_chunk_boundary(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    publish_run(c, t->doc, "ed", "r", N, 0, NULL);
    ab_msg_t q = run_q("ed", "r", 0, 2, N / 2);
    uint64_t cid = send_req(c, &q);
    ab_status_t st;
    ab_error_t err = AB_ERROR_INIT;
    for (int i = 0; i < 2; i++) {
        ab_msg_t m = next_msg(c, t->doc, &st, &err);
        assert_int_equal(m.cid, cid);
        assert_int_equal(m.op, AB_OP_REPLAY_CHUNK);
        assert_int_equal(m.u.replay_chunk.count, N / 2);
    }
    handshake(c, t->doc, cid);
    credit(c, cid, 2);
    ab_msg_t m = next_msg(c, t->doc, &st, &err);
    assert_int_equal(m.cid, cid);
    assert_int_equal(m.op, AB_OP_REPLAY_END);
    assert_int_equal(m.u.replay_end.events, N);
    ab_conn_destroy(&c);
}

/* window_bytes smaller than one event: one event per chunk, and no second chunk before the
 * first is credited. */
static void test_window_bytes(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    publish_run(c, t->doc, "ed", "r", N, 300, NULL);
    ab_msg_t q = run_q("ed", "r", 0, 64, 256);
    q.u.replay.window_bytes = 100;
    uint64_t cid = send_req(c, &q);
    ab_status_t st;
    ab_error_t err = AB_ERROR_INIT;
    uint64_t got = 0;
    for (;;) {
        ab_msg_t m = next_msg(c, t->doc, &st, &err);
        assert_int_equal(m.cid, cid);
        if (m.op == AB_OP_REPLAY_END) {
            assert_int_equal(m.u.replay_end.events, N);
            break;
        }
        assert_int_equal(m.op, AB_OP_REPLAY_CHUNK);
        assert_int_equal(m.u.replay_chunk.count, 1);
        got++;
        handshake(c, t->doc, cid);
        credit(c, cid, 1);
    }
    assert_int_equal(got, N);
    ab_conn_destroy(&c);
}

/* credit and cancel naming no replay: not_found, field cid; a running cid reused:
 * invalid_argument, field cid, and the running replay goes on. */
static void test_unknown_and_reused_cid(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    publish_run(c, t->doc, "ed", "r", N, 0, NULL);
    ab_status_t st;
    ab_error_t err = AB_ERROR_INIT;
    credit(c, 777777, 1);
    ab_msg_t m = next_msg(c, t->doc, &st, &err);
    assert_int_equal(st, AB_NOT_FOUND);
    assert_int_equal(m.cid, 777777);
    assert_string_equal(err.field, "cid");
    ab_msg_t cancel = {.op = AB_OP_CANCEL, .cid = 777778};
    (void)send_req(c, &cancel);
    m = next_msg(c, t->doc, &st, &err);
    assert_int_equal(st, AB_NOT_FOUND);
    assert_int_equal(m.cid, 777778);

    ab_msg_t q = run_q("ed", "r", 0, 1, 1);
    uint64_t cid = send_req(c, &q);
    m = next_msg(c, t->doc, &st, &err);
    assert_int_equal(m.op, AB_OP_REPLAY_CHUNK);
    ab_buf_t raw = AB_BUF_INIT;
    q.v = 1;
    q.cid = cid;
    assert_int_equal(ab_msg_encode(&q, &raw, &err), AB_OK);
    assert_int_equal(ab_conn_send_raw(c, &raw, 1, &err), AB_OK);
    ab_buf_free(&raw);
    m = next_msg(c, t->doc, &st, &err);
    assert_int_equal(st, AB_INVALID_ARGUMENT);
    assert_int_equal(m.cid, cid);
    assert_string_equal(err.field, "cid");
    for (uint64_t got = 1;;) {
        credit(c, cid, 1);
        m = next_msg(c, t->doc, &st, &err);
        assert_int_equal(m.cid, cid);
        if (m.op == AB_OP_REPLAY_END) {
            assert_int_equal(m.u.replay_end.events, N);
            assert_int_equal(got, N);
            break;
        }
        assert_int_equal(m.op, AB_OP_REPLAY_CHUNK);
        got++;
    }
    /* late credit after the end: ignored (no answer): the handshake's end comes next */
    credit(c, cid, 1);
    handshake(c, t->doc, cid);
    ab_conn_destroy(&c);
}

/* Publish @p n content events of thread @p thread, run @p run (no RUN_FINISHED), in batches. */
static void publish_many(ab_conn_t *c, ab_doc_t *doc, const char *thread, const char *run,
                         uint64_t n)
{
    enum { B = 1000 };
    ab_buf_t *evs = calloc(B, sizeof *evs);
    ab_error_t err = AB_ERROR_INIT;
    assert_non_null(evs);
    for (uint64_t base = 0; base < n; base += B) {
        size_t k = 0;
        for (; k < B && base + k < n; k++) {
            char body[256];
            it_body(body, sizeof body, thread, run, base + k + 1, 0, 0);
            evs[k].len = 0;
            assert_int_equal(ab_envelope_json(&evs[k], 1, thread, run, base + k + 1, 1, body, &err),
                             AB_OK);
        }
        const ab_result_t *res = NULL;
        if (ab_conn_publish(c, evs, k, doc, &res, 30000, &err) != AB_OK)
            fail_msg("publish: %s", err.message);
        for (size_t i = 0; i < k; i++)
            assert_int_equal(res[i].status, AB_RESULT_ACCEPTED);
    }
    for (size_t i = 0; i < B; i++)
        ab_buf_free(&evs[i]);
    free(evs);
}

/* A thread replay whose cursors skip SKIPPED events (no after_pos: the reader reads them all)
 * does not hold its reader thread: a replay asked right after it on the same connection (so
 * the same reader) ends first (7.6.1 step 5, round robin). Before, the first replay read every
 * skipped row in one turn, and nothing else of that reader (replays, credit, cancel,
 * snapshot, threads) moved meanwhile. */
#define SKIPPED 100000
static void test_skipping_replay_yields(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    publish_many(c, t->doc, "long", "old", SKIPPED);
    publish_run(c, t->doc, "long", "new", 1, 0, NULL);
    ab_cursor_t cur = {{"old", 3}, SKIPPED};
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay = (ab_replay_t){.scope = AB_REPLAY_THREAD, .window = 4, .chunk_events = 256};
    q.u.replay.thread = (ab_str_t){"long", 4};
    q.u.replay.cursors = &cur;
    q.u.replay.ncursors = 1;
    uint64_t slow = send_req(c, &q);
    ab_msg_t q2 = run_q("long", "none", 0, 1, 1);
    uint64_t quick = send_req(c, &q2);
    ab_status_t st;
    ab_error_t err = AB_ERROR_INIT;
    ab_msg_t m = next_msg(c, t->doc, &st, &err);
    if (m.cid != quick)
        fail_msg("the skipping replay's %s came before the short replay's end", ab_op_name(m.op));
    assert_int_equal(m.op, AB_OP_REPLAY_END);
    m = next_msg(c, t->doc, &st, &err); /* the new run's one event, exactly */
    assert_int_equal(m.cid, slow);
    assert_int_equal(m.op, AB_OP_REPLAY_CHUNK);
    assert_int_equal(m.u.replay_chunk.count, 1);
    credit(c, slow, 1);
    m = next_msg(c, t->doc, &st, &err);
    assert_int_equal(m.cid, slow);
    assert_int_equal(m.op, AB_OP_REPLAY_END);
    assert_int_equal(m.u.replay_end.events, 1);
    ab_conn_destroy(&c);
}

/* A thread of MANY_RUNS runs with ids of 256 bytes: the replay_end of a thread replay carries
 * the heads of its newest HEADS_MAX runs, in the order they were recorded, and fits a reply.
 * Before, it carried all of them (17 MB, over the 16 MiB a reply may have): every thread
 * replay of it failed at its end (invalid_envelope at the client), and the broker held every
 * head of the thread for it. */
#define MANY_RUNS 30000
#define HEADS_MAX 16384
static void long_id(char *out, int n)
{
    snprintf(out, 257, "%0256d", n);
}

static ab_status_t ignore_row(void *ud, const ab_stamp_t *st, const uint8_t *ev, size_t len,
                              ab_error_t *err)
{
    (void)ud, (void)st, (void)ev, (void)len, (void)err;
    return AB_OK;
}

static void test_many_runs_end_fits(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    char thread[257], run[257];
    memset(thread, 't', 256);
    thread[256] = '\0';
    enum { B = 1000 };
    ab_buf_t *evs = calloc(B, sizeof *evs);
    ab_error_t err = AB_ERROR_INIT;
    assert_non_null(evs);
    for (int base = 0; base < MANY_RUNS; base += B) {
        for (int k = 0; k < B; k++) {
            char body[1024];
            long_id(run, base + k);
            it_body(body, sizeof body, thread, run, 1, 0, 0);
            evs[k].len = 0;
            assert_int_equal(ab_envelope_json(&evs[k], 1, thread, run, 1, 1, body, &err), AB_OK);
        }
        const ab_result_t *res = NULL;
        if (ab_conn_publish(c, evs, B, t->doc, &res, 60000, &err) != AB_OK)
            fail_msg("publish: %s", err.message);
        for (int k = 0; k < B; k++)
            assert_int_equal(res[k].status, AB_RESULT_ACCEPTED);
    }
    for (int k = 0; k < B; k++)
        ab_buf_free(&evs[k]);
    free(evs);
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay = (ab_replay_t){.scope = AB_REPLAY_THREAD, .window = 4, .chunk_events = 16};
    q.u.replay.thread = (ab_str_t){thread, 256};
    q.u.replay.after_pos = MANY_RUNS - 1; /* the last event only */
    ab_replay_end_t end;
    ab_status_t st = ab_conn_replay(c, &q, ignore_row, NULL, t->doc, &end, 60000, &err);
    if (st != AB_OK)
        fail_msg("thread replay: %s: %s", ab_status_name(st), err.message);
    assert_int_equal(end.events, 1);
    assert_int_equal(end.nheads, HEADS_MAX);
    for (size_t i = 0; i < end.nheads; i += HEADS_MAX - 1) {
        long_id(run, (int)(MANY_RUNS - HEADS_MAX + i));
        assert_int_equal(end.heads[i].run.len, 256);
        assert_memory_equal(end.heads[i].run.ptr, run, 256);
    }
    ab_conn_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cursor_at_end, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_chunk_boundary, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_window_bytes, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_unknown_and_reused_cid, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_skipping_replay_yields, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_many_runs_end_fits, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

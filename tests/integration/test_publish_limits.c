/*
 * test_publish_limits.c - publishes near the broker's byte limits, against a
 * real broker process (issue 11, item 2):
 *  - the limits are announced in `welcome` (max_publish_bytes, and the
 *    configured value when the operator changes it);
 *  - 300 events of ~10 KB published with the default batch of 256, and three
 *    800 KB STATE_SNAPSHOT events, are all acknowledged (before the fix the
 *    ~2.5 MB frame passed the broker's ZMQ_MAXMSGSIZE, was dropped by ZeroMQ
 *    and the publish retried until it timed out); 200 events of 100 KB (one
 *    batch by count, 20 MB) go in several publishes, split by the producer
 *    at max_publish_bytes;
 *  - a publish above max_publish_bytes from a client that ignores the limit
 *    is answered `too_large` (limit and actual size in the details, its cid
 *    echoed), the connection stays usable, and the client library refuses to
 *    send one at all;
 *  - publishes whose bytes would pass --queue-mib while the writer is held
 *    up are answered `overloaded` (detail limit_bytes) and not stored; a
 *    retry later is accepted;
 *  - with --max-event-bytes above the default 1 MiB, a thread holding a larger
 *    event is folded into its SNAPSHOT like any other (before the fix the
 *    fold decoded stored events with the default limits and answered
 *    `corrupt`), and so are `agentbus replay --verify` and `agentbus runs`.
 */
#include "testutil.h"

#include "agentbus/producer.h"
#include "cli_run.h"
#include "db_lock.h"
#include "raw_client.h"

#define SMALL_PUBLISH 262144 /* --max-publish-bytes of the small broker */

/* A JSON body: TEXT_MESSAGE_CONTENT (or a STATE_SNAPSHOT when @p state) of about @p size bytes. */
static char *big_body(size_t size, bool state, uint64_t i)
{
    char *b = malloc(size + 128);
    assert_non_null(b);
    int k =
        state
            ? snprintf(b, 128, "{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":{\"n\":%llu,\"blob\":\"",
                       (unsigned long long)i)
            : snprintf(b, 128,
                       "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"%llu",
                       (unsigned long long)i);
    memset(b + k, 'x', size);
    snprintf(b + k + size, 64, state ? "\"}}" : "\"}");
    return b;
}

static ab_producer_t *producer(const it_t *t, const char *run)
{
    ab_producer_t *p = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_producer_opts_t o = {.client_name = "limits", .timeout_ms = 10000};
    if (ab_producer_new(&p, t->bp.cmd, &o, &err) != AB_OK ||
        ab_producer_claim(p, "lim", run, NULL, &err) != AB_OK)
        fail_msg("producer %s: %s: %s", run, ab_status_name(err.code), err.message);
    char start[256];
    snprintf(start, sizeof(start),
             "{\"type\":\"RUN_STARTED\",\"threadId\":\"lim\",\"runId\":\"%s\","
             "\"protocolVersion\":\"1.0\"}",
             run);
    if (ab_producer_publish_json(p, start, strlen(start), &err) != AB_OK)
        fail_msg("RUN_STARTED: %s", err.message);
    return p;
}

static void publish_big(ab_producer_t *p, int n, size_t size, bool state)
{
    ab_error_t err = AB_ERROR_INIT;
    static const char tm_start[] = "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\"}";
    if (!state && ab_producer_publish_json(p, tm_start, strlen(tm_start), &err) != AB_OK)
        fail_msg("TEXT_MESSAGE_START: %s", err.message);
    for (int i = 0; i < n; i++) {
        char *b = big_body(size, state, (uint64_t)i);
        ab_status_t st = ab_producer_publish_json(p, b, strlen(b), &err);
        free(b);
        if (st != AB_OK)
            fail_msg("event %d: %s: %s", i, ab_status_name(st), err.message);
    }
    if (ab_producer_flush(p, 30000, &err) != AB_OK)
        fail_msg("flush: %s: %s", ab_status_name(err.code), err.message);
}

static void test_limits_announced(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    const ab_limits_t *l = ab_conn_limits(c);
    ab_limits_t d = ab_limits_default();
    assert_int_equal(l->max_publish_bytes, d.max_publish_bytes);
    assert_int_equal(l->max_replay_bytes, d.max_replay_bytes);
    assert_true((uint64_t)l->max_publish_bytes >= (uint64_t)l->max_event_bytes + 4);
    ab_conn_destroy(&c);
}

static void test_large_events_are_split(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_producer_t *p = producer(t, "tenk");
    publish_big(p, 300, 10000, false); /* 256 of them are ~2.5 MB: more than one publish */
    ab_producer_stats_t s = ab_producer_stats(p);
    print_message("300 events of 10 KB: %llu acked in %llu publishes, %llu retries\n",
                  (unsigned long long)s.acked, (unsigned long long)s.batches,
                  (unsigned long long)s.retries);
    assert_int_equal(s.acked, 302);
    assert_int_equal(s.retries, 0);
    ab_producer_destroy(&p);
    /* 200 events of 100 KB: one batch by count, 20 MB: more than max_publish_bytes */
    p = producer(t, "hundredk");
    publish_big(p, 200, 100000, false);
    s = ab_producer_stats(p);
    print_message("200 events of 100 KB: %llu acked in %llu publishes, %llu retries\n",
                  (unsigned long long)s.acked, (unsigned long long)s.batches,
                  (unsigned long long)s.retries);
    assert_int_equal(s.acked, 202);
    assert_int_equal(s.retries, 0);
    assert_true(s.batches >= 2); /* 202 events fit one batch by count, not by bytes */
    ab_producer_destroy(&p);
    p = producer(t, "state");
    publish_big(p, 3, 800000, true); /* three 800 KB STATE_SNAPSHOTs: 2.4 MB */
    s = ab_producer_stats(p);
    assert_int_equal(s.acked, 4);
    assert_int_equal(s.retries, 0);
    ab_producer_destroy(&p);
    /* every event is stored: the run's head */
    ab_conn_t *c = it_connect(&t->bp);
    assert_int_equal(it_head(c, t->doc, "lim", "tenk").last_seq, 302);
    ab_conn_destroy(&c);
}

/* ---- a broker that takes events over the default 1 MiB ------------------------------ */

static int large_setup(void **state)
{
    static const char *const extra[] = {"--max-event-bytes", "2097152", NULL};
    return it_setup_with(state, extra);
}

/* A 1.5 MB STATE_SNAPSHOT, stored within this broker's limits, is folded into the thread's
 * SNAPSHOT: its state is in the answer, byte for byte. */
static void test_snapshot_folds_a_large_event(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_producer_t *p = producer(t, "large");
    publish_big(p, 1, 1500000, true);
    ab_producer_destroy(&p);
    ab_conn_t *c = it_connect(&t->bp);
    ab_msg_t q = {.op = AB_OP_SNAPSHOT, .u.snapshot = {.thread = {"lim", 3}}}, m;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_request(c, &q, NULL, 0, t->doc, &m, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("snapshot: %s: %s", ab_status_name(err.code), err.message);
    assert_int_equal(m.op, AB_OP_SNAPSHOT_REPLY);
    const ab_val_t *st = ab_val_get(ab_val_get(m.u.snapshot_reply.snapshot, "projection"), "state");
    const ab_val_t *blob = ab_val_get(st, "blob");
    assert_non_null(blob);
    assert_int_equal(blob->type, AB_VAL_STR);
    assert_int_equal(blob->len, 1500000);
    ab_conn_destroy(&c);
    /* the command line's readers decode it too: the audit and the run listing */
    char out[OUT_MAX];
    assert_int_equal(it_run_cli(out, "replay --thread lim --verify --broker '%s'", t->bp.cmd), 0);
    assert_non_null(strstr(out, "run lim/large: 2 events, seq 1..2, still active\n"));
    assert_int_equal(it_run_cli(out, "runs --thread lim --broker '%s'", t->bp.cmd), 0);
    assert_non_null(strstr(out, "large"));
}

/* ---- a broker with a small max_publish_bytes ----------------------------------- */

static int small_setup(void **state)
{
    static const char *const extra[] = {"--max-publish-bytes", "262144", "--max-event-bytes",
                                        "131072", NULL};
    return it_setup_with(state, extra);
}

static void test_over_limit_answered(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    assert_int_equal(ab_conn_limits(c)->max_publish_bytes, SMALL_PUBLISH);
    /* three envelopes of ~100 KB: each within max_event_bytes, together above the limit */
    ab_buf_t ev[3];
    memset(ev, 0, sizeof(ev));
    for (int i = 0; i < 3; i++) {
        char *b = big_body(100000, false, (uint64_t)i);
        it_event_json(&ev[i], "lim", "over", (uint64_t)i + 2, 1, b);
        free(b);
    }
    /* the library refuses before sending */
    const ab_result_t *res = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_publish(c, ev, 3, t->doc, &res, IT_TIMEOUT, &err), AB_TOO_LARGE);
    assert_non_null(ab_error_detail(&err, "limit"));
    /* an envelope the packed form cannot hold (over 4 GiB, refused before it is read), with
     * no error struct: its own status comes back (it read err->code before) */
    static uint8_t tiny[1];
    ab_buf_t huge = {.data = tiny, .len = (size_t)UINT32_MAX + 1};
    assert_int_equal(ab_conn_publish(c, &huge, 1, t->doc, &res, IT_TIMEOUT, NULL), AB_TOO_LARGE);
    /* a raw client that ignores the limit gets a typed answer (frame-per-envelope form) */
    void *ctx = zmq_ctx_new();
    void *s = rc_dealer(ctx, t->bp.cmd, 0);
    ab_buf_t buf = AB_BUF_INIT;
    rc_encode_hello(&buf, 1);
    assert_true(rc_send(s, &buf, 5000));
    zmq_msg_t parts[4];
    size_t n = rc_recv(s, parts, 4, IT_TIMEOUT);
    assert_int_equal(n, 1);
    rc_close(parts, n);
    ab_msg_t m = {.op = AB_OP_PUBLISH, .v = rc_version(), .cid = 77};
    m.u.publish.count = 3;
    rc_encode(&m, &buf);
    assert_int_equal(zmq_send(s, buf.data, buf.len, ZMQ_SNDMORE), (int)buf.len);
    for (int i = 0; i < 3; i++)
        assert_int_equal(zmq_send(s, ev[i].data, ev[i].len, i < 2 ? ZMQ_SNDMORE : 0),
                         (int)ev[i].len);
    n = rc_recv(s, parts, 4, IT_TIMEOUT);
    assert_int_equal(n, 1);
    ab_msg_t r;
    ab_error_clear(&err);
    assert_int_equal(
        ab_msg_decode(t->doc, zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]), NULL, &r, &err),
        AB_OK);
    assert_int_equal(r.op, AB_OP_ERROR);
    assert_int_equal(r.cid, 77);
    const ab_error_t *e = r.u.error.error;
    assert_int_equal(e->code, AB_TOO_LARGE);
    const ab_error_detail_t *lim = ab_error_detail(e, "limit");
    const ab_error_detail_t *act = ab_error_detail(e, "actual");
    assert_non_null(lim);
    assert_non_null(act);
    assert_int_equal(lim->i, SMALL_PUBLISH);
    assert_true(act->i > SMALL_PUBLISH);
    rc_close(parts, n);
    /* the connection still works */
    ab_msg_t ping = {.op = AB_OP_PING, .v = rc_version(), .cid = 78};
    rc_encode(&ping, &buf);
    assert_true(rc_send(s, &buf, 5000));
    n = rc_recv(s, parts, 4, IT_TIMEOUT);
    assert_int_equal(n, 1);
    assert_int_equal(
        ab_msg_decode(t->doc, zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]), NULL, &r, &err),
        AB_OK);
    assert_int_equal(r.op, AB_OP_PONG);
    assert_int_equal(r.cid, 78);
    rc_close(parts, n);
    ab_buf_free(&buf);
    zmq_close(s);
    zmq_ctx_term(ctx);
    for (int i = 0; i < 3; i++)
        ab_buf_free(&ev[i]);
    ab_conn_destroy(&c);
}

/* ---- the ingest queue's byte bound ------------------------------------------------ */

static int queue_setup(void **state)
{
    static const char *const extra[] = {
        "--queue-mib", "1", "--max-event-bytes", "524288", "--max-publish-bytes", "1048576", NULL};
    return it_setup_with(state, extra);
}

/*
 * Publish A (~900 KB in three events) is held in the queue by a write-locked
 * database; B (~200 KB) arrives behind it and would pass the 1 MiB byte bound: it is
 * refused `overloaded` at once, well inside the writer's ~1 s busy wait, so
 * when the lock goes A still commits.
 */
static void test_queue_bytes_bound(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    ab_buf_t a[3], b[2];
    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
    it_event_json(&a[0], "lim", "qa", 1, 1,
                  "{\"type\":\"RUN_STARTED\",\"threadId\":\"lim\",\"runId\":\"qa\","
                  "\"protocolVersion\":\"1.0\"}");
    it_event_json(&b[0], "lim", "qb", 1, 1,
                  "{\"type\":\"RUN_STARTED\",\"threadId\":\"lim\",\"runId\":\"qb\","
                  "\"protocolVersion\":\"1.0\"}");
    for (int i = 1; i < 3; i++) {
        char *body = big_body(450000, true, (uint64_t)i);
        it_event_json(&a[i], "lim", "qa", (uint64_t)i + 1, 1, body);
        free(body);
    }
    char *body = big_body(200000, true, 9);
    it_event_json(&b[1], "lim", "qb", 2, 1, body);
    free(body);
    ab_buf_t *bs = b;
    sqlite3 *db = dl_lock(t->bp.dir);
    uint64_t cid_a = it_send_publish(c, a, 3);
    uint64_t cid_b = it_send_publish(c, bs, 2);
    ab_msg_t reply;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_recv(c, cid_b, t->doc, &reply, IT_TIMEOUT, &err);
    assert_int_equal(st, AB_OVERLOADED);
    assert_true(err.retryable);
    assert_non_null(ab_error_detail(&err, "limit_bytes"));
    dl_unlock(&db);
    ab_error_clear(&err);
    assert_int_equal(ab_conn_recv(c, cid_a, t->doc, &reply, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(reply.u.published.nresults, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(reply.u.published.results[i].status, AB_RESULT_ACCEPTED);
    /* B was not stored; a retry is accepted */
    const ab_result_t *res = NULL;
    st = AB_OVERLOADED;
    for (int k = 0; k < 100 && st == AB_OVERLOADED; k++) {
        ab_error_clear(&err);
        st = ab_conn_publish(c, bs, 2, t->doc, &res, IT_TIMEOUT, &err);
        if (st == AB_OVERLOADED)
            nanosleep(&(struct timespec){.tv_nsec = 1000000L * (k + 1)}, NULL);
    }
    assert_int_equal(st, AB_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(res[i].status, AB_RESULT_ACCEPTED);
    for (int i = 0; i < 3; i++)
        ab_buf_free(&a[i]);
    for (int i = 0; i < 2; i++)
        ab_buf_free(&b[i]);
    ab_conn_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_limits_announced, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_large_events_are_split, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_folds_a_large_event, large_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_over_limit_answered, small_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_queue_bytes_bound, queue_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

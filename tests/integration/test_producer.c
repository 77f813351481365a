/*
 * test_producer.c - the producer (agentbus/producer.h) against a real broker
 * process: a whole run published and read back identical, a second claim
 * fencing the first writer, a restarted producer continuing the run, local
 * validation, the outbox bound, and a flush bounded by its timeout when the
 * broker is gone. A scripted fake broker (a ROUTER in a thread) answers
 * `overloaded` and `gap`, which a real broker does not produce on demand, to
 * check the retry and resend paths.
 */
#include "testutil.h"

#include "agentbus/producer.h"
#include "broker_proc.h"

#include <pthread.h>
#include <zmq.h>

typedef struct readback {
    ab_doc_t *doc;
    char bodies[64][512];
    uint64_t epochs[64];
    size_t n;
} readback_t;

static ab_status_t keep_row(void *ud, const ab_stamp_t *st, const uint8_t *bytes, size_t len,
                            ab_error_t *err)
{
    (void)st;
    readback_t *rb = ud;
    ab_event_t ev;
    assert_int_equal(ab_event_decode(rb->doc, bytes, len, NULL, &ev, err), AB_OK);
    assert_true(rb->n < 64);
    assert_int_equal(ev.seq, rb->n + 1); /* contiguous from 1 */
    ab_buf_t js = AB_BUF_INIT;
    assert_int_equal(ab_val_to_json(ev.body, &js), AB_OK);
    assert_true(js.len < sizeof(rb->bodies[0]));
    memcpy(rb->bodies[rb->n], js.data, js.len);
    rb->bodies[rb->n][js.len] = '\0';
    rb->epochs[rb->n] = ev.epoch;
    rb->n++;
    ab_buf_free(&js);
    return AB_OK;
}

/* Replay run (thread, run) into @p rb. */
static void read_run(it_t *t, const char *thread, const char *run, readback_t *rb)
{
    ab_conn_t *c = it_connect(&t->bp);
    memset(rb, 0, sizeof(*rb));
    assert_int_equal(ab_doc_new(&rb->doc), AB_OK);
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay.scope = AB_REPLAY_RUN;
    q.u.replay.thread = (ab_str_t){thread, strlen(thread)};
    q.u.replay.run = (ab_str_t){run, strlen(run)};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_replay(c, &q, keep_row, rb, t->doc, NULL, IT_TIMEOUT, &err), AB_OK);
    ab_doc_destroy(&rb->doc);
    ab_conn_destroy(&c);
}

static ab_producer_t *new_producer(it_t *t, const ab_producer_opts_t *o)
{
    ab_producer_opts_t d = {.timeout_ms = IT_TIMEOUT};
    ab_producer_t *p = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_producer_new(&p, t->bp.cmd, o ? o : &d, &err) != AB_OK)
        fail_msg("producer: %s: %s", ab_status_name(err.code), err.message);
    return p;
}

/* Publish events [from, to] of an n-event run as JSON; fail on any error. */
static void publish_range(ab_producer_t *p, const char *thread, const char *run, uint64_t from,
                          uint64_t to, uint64_t n)
{
    for (uint64_t s = from; s <= to; s++) {
        char body[512];
        it_body(body, sizeof(body), thread, run, s, n, 0);
        ab_error_t err = AB_ERROR_INIT;
        if (ab_producer_publish_json(p, body, strlen(body), &err) != AB_OK)
            fail_msg("publish seq %llu: %s: %s", (unsigned long long)s, ab_status_name(err.code),
                     err.message);
    }
}

static void test_full_run_round_trip(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_producer_opts_t o = {.timeout_ms = IT_TIMEOUT, .batch_max = 4};
    ab_producer_t *p = new_producer(t, &o);
    ab_error_t err = AB_ERROR_INIT;
    uint64_t last = 99;
    assert_int_equal(ab_producer_claim(p, "tr", "r1", &last, &err), AB_OK);
    assert_int_equal(last, 0);
    assert_int_equal(ab_producer_next_seq(p), 1);
    publish_range(p, "tr", "r1", 1, 9, 10);
    /* the last one as a built value */
    tu_ctx_t tc;
    tu_ctx_init(&tc);
    char body[512];
    it_body(body, sizeof(body), "tr", "r1", 10, 10, 0);
    assert_int_equal(ab_producer_publish_val(p, tu_json(&tc, body), &err), AB_OK);
    tu_ctx_free(&tc);
    assert_int_equal(ab_producer_flush(p, IT_TIMEOUT, &err), AB_OK);
    ab_producer_stats_t s = ab_producer_stats(p);
    assert_int_equal(s.acked, 10);
    assert_int_equal(s.duplicates, 0);
    assert_int_equal(s.outbox, 0);
    assert_true(s.batches >= 3); /* batch_max 4 */
    assert_int_equal(ab_producer_acked_seq(p), 10);
    readback_t rb;
    read_run(t, "tr", "r1", &rb);
    assert_int_equal(rb.n, 10);
    for (uint64_t i = 0; i < 10; i++) {
        it_body(body, sizeof(body), "tr", "r1", i + 1, 10, 0);
        assert_string_equal(rb.bodies[i], body);
        assert_int_equal(rb.epochs[i], ab_producer_epoch(p));
    }
    ab_run_ref_t ref = {{"tr", 2}, {"r1", 2}};
    ab_heads_t q = {.runs = &ref, .nruns = 1};
    ab_heads_reply_t hr;
    assert_int_equal(ab_conn_heads(ab_producer_conn(p), &q, t->doc, &hr, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(hr.nheads, 1);
    assert_int_equal(hr.heads[0].status, AB_RUN_STATUS_FINISHED);
    assert_int_equal(hr.heads[0].last_seq, 10);
    ab_producer_destroy(&p);
    assert_null(p);
}

static void test_second_claim_fences_first(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_producer_t *p1 = new_producer(t, NULL);
    ab_producer_t *p2 = new_producer(t, NULL);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_producer_claim(p1, "tf", "r", NULL, &err), AB_OK);
    publish_range(p1, "tf", "r", 1, 3, 8);
    assert_int_equal(ab_producer_flush(p1, IT_TIMEOUT, &err), AB_OK);
    uint64_t last = 0;
    assert_int_equal(ab_producer_claim(p2, "tf", "r", &last, &err), AB_OK);
    assert_int_equal(last, 3);
    assert_true(ab_producer_epoch(p2) > ab_producer_epoch(p1));
    publish_range(p1, "tf", "r", 4, 4, 8); /* queued locally */
    assert_int_equal(ab_producer_flush(p1, IT_TIMEOUT, &err), AB_FENCED);
    const ab_error_detail_t *d = ab_error_detail(&err, "seq");
    assert_non_null(d);
    assert_int_equal(d->i, 4);
    /* failed state: refuses everything with the same typed error */
    ab_error_clear(&err);
    char body[256];
    it_body(body, sizeof(body), "tf", "r", 5, 8, 0);
    assert_int_equal(ab_producer_publish_json(p1, body, strlen(body), &err), AB_FENCED);
    ab_error_clear(&err);
    assert_int_equal(ab_producer_flush(p1, IT_TIMEOUT, &err), AB_FENCED);
    /* the new writer continues */
    ab_error_clear(&err);
    publish_range(p2, "tf", "r", 4, 8, 8);
    assert_int_equal(ab_producer_flush(p2, IT_TIMEOUT, &err), AB_OK);
    readback_t rb;
    read_run(t, "tf", "r", &rb);
    assert_int_equal(rb.n, 8);
    assert_int_equal(rb.epochs[2], ab_producer_epoch(p1));
    assert_int_equal(rb.epochs[3], ab_producer_epoch(p2));
    ab_producer_destroy(&p1);
    ab_producer_destroy(&p2);
}

static void test_restart_continues(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_producer_t *p = new_producer(t, NULL);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_producer_claim(p, "tc", "r", NULL, &err), AB_OK);
    publish_range(p, "tc", "r", 1, 10, 20);
    assert_int_equal(ab_producer_flush(p, IT_TIMEOUT, &err), AB_OK);
    uint64_t epoch1 = ab_producer_epoch(p);
    ab_producer_destroy(&p);
    p = new_producer(t, NULL); /* the restarted worker */
    uint64_t last = 0;
    assert_int_equal(ab_producer_claim(p, "tc", "r", &last, &err), AB_OK);
    assert_int_equal(last, 10);
    assert_int_equal(ab_producer_next_seq(p), 11);
    assert_true(ab_producer_epoch(p) > epoch1);
    publish_range(p, "tc", "r", 11, 20, 20);
    assert_int_equal(ab_producer_flush(p, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(ab_producer_stats(p).acked, 10);
    readback_t rb;
    read_run(t, "tc", "r", &rb);
    assert_int_equal(rb.n, 20);
    assert_int_equal(rb.epochs[9], epoch1);
    assert_int_equal(rb.epochs[10], ab_producer_epoch(p));
    ab_producer_destroy(&p);
}

static void test_local_validation(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_producer_t *p = new_producer(t, NULL);
    ab_error_t err = AB_ERROR_INIT;
    const char *ev = "{\"type\":\"TEXT_MESSAGE_START\"}";
    assert_int_equal(ab_producer_publish_json(p, ev, strlen(ev), &err), AB_INVALID_ARGUMENT);
    ab_error_clear(&err);
    assert_int_equal(ab_producer_claim(p, "tv", "r", NULL, &err), AB_OK);
    publish_range(p, "tv", "r", 1, 1, 4);
    assert_int_equal(ab_producer_publish_json(p, ev, strlen(ev), &err), AB_INVALID_EVENT);
    assert_string_equal(err.field, "/messageId");
    ab_error_clear(&err);
    const char *bad_json = "{\"type\":";
    assert_int_equal(ab_producer_publish_json(p, bad_json, strlen(bad_json), &err),
                     AB_INVALID_EVENT);
    ab_error_clear(&err);
    const char *other = "{\"type\":\"RUN_FINISHED\",\"threadId\":\"tv\",\"runId\":\"zz\"}";
    assert_int_equal(ab_producer_publish_json(p, other, strlen(other), &err), AB_INVALID_EVENT);
    assert_string_equal(err.field, "/runId");
    /* nothing consumed a seq; the producer goes on */
    assert_int_equal(ab_producer_next_seq(p), 2);
    ab_error_clear(&err);
    publish_range(p, "tv", "r", 2, 4, 4);
    assert_int_equal(ab_producer_flush(p, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(ab_producer_stats(p).acked, 4);
    ab_producer_destroy(&p);
}

static void test_outbox_bound(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_producer_opts_t o = {.timeout_ms = IT_TIMEOUT, .outbox_max = 8, .batch_max = 64};
    ab_producer_t *p = new_producer(t, &o);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_producer_claim(p, "tb", "r", NULL, &err), AB_OK);
    for (uint64_t s = 1; s <= 100; s++) {
        publish_range(p, "tb", "r", s, s, 100);
        assert_true(ab_producer_stats(p).outbox <= 8);
        if (s % 25 == 0)
            assert_int_equal(ab_producer_flush(p, IT_TIMEOUT, &err), AB_OK);
    }
    ab_producer_stats_t st = ab_producer_stats(p);
    assert_int_equal(st.acked, 100);
    assert_int_equal(st.outbox, 0);
    assert_true(st.outbox_peak <= 8);
    assert_true(st.batches >= 100 / 8);
    ab_producer_destroy(&p);
}

static void test_flush_times_out_without_broker(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_producer_opts_t o = {.timeout_ms = 400, .max_retries = 50, .backoff_base_ms = 20};
    ab_producer_t *p = new_producer(t, &o);
    ab_error_t err = AB_ERROR_INIT;
    /* 400 ms per request is short on a loaded machine: the claim may be asked again (each
     * claim only moves the epoch); the flush below is what this test is about */
    ab_status_t cst = AB_TIMEOUT;
    for (int i = 0; i < 10 && cst == AB_TIMEOUT; i++) {
        ab_error_clear(&err);
        cst = ab_producer_claim(p, "tt", "r", NULL, &err);
    }
    assert_int_equal(cst, AB_OK);
    publish_range(p, "tt", "r", 1, 2, 4);
    assert_int_equal(bp_stop(&t->bp), 0);
    long t0 = ab__mono_ms();
    ab_status_t st = ab_producer_flush(p, 1200, &err);
    long took = ab__mono_ms() - t0;
    assert_true(st == AB_TIMEOUT || st == AB_UNAVAILABLE || st == AB_IO);
    assert_true(err.retryable || ab_status_retryable(err.code));
    /* it waited for its timeout, not less (a lower bound: load cannot make it fail; how
     * soon after the timeout it returned is a timing, not asserted) */
    assert_true(took >= 1000);
    /* nothing was lost: the outbox still holds both events */
    assert_int_equal(ab_producer_stats(p).outbox, 2);
    ab_producer_destroy(&p);
}

/* ---- a scripted fake broker: hello, claim and three publish answers ---- */

typedef struct fake {
    void *ctx;
    void *sock;
    char ep[128];
    uint64_t first_seq[8]; /* first seq of each publish request */
    uint32_t count[8];
    int npub;
    int failed;
} fake_t;

/* Send [identity, header] for reply @p m. */
static void fake_send(fake_t *f, zmq_msg_t *id, const ab_msg_t *m)
{
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_msg_encode(m, &b, &err) != AB_OK) {
        f->failed = 1;
        return;
    }
    zmq_msg_send(id, f->sock, ZMQ_SNDMORE);
    zmq_send(f->sock, b.data, b.len, 0);
    ab_buf_free(&b);
}

/* The scripted answer to publish number f->npub (0-based) of n events. */
static void fake_results(fake_t *f, ab_result_t *res, ab_error_t *errs, size_t n)
{
    int k = f->npub;
    for (size_t i = 0; i < n; i++) {
        uint64_t seq = f->first_seq[k] + i;
        res[i] = (ab_result_t){.seq = seq, .status = AB_RESULT_ACCEPTED, .pos = seq};
        ab_error_t *e = &errs[i];
        bool reject = (k == 0 && i >= 1) || (k == 1);
        if (!reject)
            continue;
        if (k == 0) /* seq 1 accepted, then overloaded: retry from 2 */
            ab_error_set(e, AB_OVERLOADED, NULL, "queue full");
        else { /* claim that 2 and 3 are committed: gap, expected 4 */
            ab_error_set(e, AB_GAP, "seq", "expected seq 4");
            ab_error_detail_int(e, "expected_seq", 4);
        }
        res[i] = (ab_result_t){.seq = seq, .status = AB_RESULT_REJECTED, .error = e};
    }
}

static void fake_publish(fake_t *f, zmq_msg_t *id, const ab_msg_t *req, ab_doc_t *edoc)
{
    size_t n = req->u.publish.count;
    ab_result_t res[16];
    ab_error_t errs[16];
    memset(errs, 0, sizeof(errs));
    for (size_t i = 0; i < n && i < 16; i++) {
        zmq_msg_t fr;
        zmq_msg_init(&fr);
        zmq_msg_recv(&fr, f->sock, 0);
        ab_event_t ev;
        ab_error_t err = AB_ERROR_INIT;
        if (ab_event_decode(edoc, zmq_msg_data(&fr), zmq_msg_size(&fr), NULL, &ev, &err) != AB_OK)
            f->failed = 1;
        else if (i == 0 && f->npub < 8)
            f->first_seq[f->npub] = ev.seq;
        zmq_msg_close(&fr);
    }
    if (n > 16 || f->npub >= 8) {
        f->failed = 1;
        return;
    }
    f->count[f->npub] = (uint32_t)n;
    fake_results(f, res, errs, n);
    f->npub++;
    for (size_t i = 0; i < n; i++)
        errs[i].cid = req->cid;
    ab_msg_t m = {.op = AB_OP_PUBLISHED, .v = 1, .cid = req->cid};
    m.u.published = (ab_published_t){.results = res, .nresults = n};
    fake_send(f, id, &m);
}

static void fake_answer(fake_t *f, zmq_msg_t *id, const ab_msg_t *req, ab_doc_t *edoc)
{
    static const ab_cap_t caps[] = {{AB_CAP_PUBLISH, sizeof(AB_CAP_PUBLISH) - 1, AB_CAP_AVAILABLE}};
    ab_msg_t m = {.v = 1, .cid = req->cid};
    if (req->op == AB_OP_HELLO) {
        m.op = AB_OP_WELCOME;
        m.u.welcome = (ab_welcome_t){.instance = {"fake", 4},
                                     .event_endpoint = {"tcp://x:1", 9},
                                     .limits = ab_limits_default(),
                                     .caps = caps,
                                     .ncaps = 1};
    } else if (req->op == AB_OP_CLAIM) {
        m.op = AB_OP_CLAIMED;
        m.u.claimed = (ab_claimed_t){.thread = req->u.claim.thread,
                                     .run = req->u.claim.run,
                                     .epoch = 1,
                                     .last_seq = 0,
                                     .status = AB_RUN_STATUS_UNKNOWN};
    } else if (req->op == AB_OP_PUBLISH) {
        fake_publish(f, id, req, edoc);
        return;
    } else {
        f->failed = 1;
        return;
    }
    fake_send(f, id, &m);
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    ab_doc_t *doc = NULL, *edoc = NULL;
    if (ab_doc_new(&doc) != AB_OK || ab_doc_new(&edoc) != AB_OK)
        f->failed = 1;
    for (;;) {
        zmq_msg_t id, hdr;
        zmq_msg_init(&id);
        if (zmq_msg_recv(&id, f->sock, 0) < 0) { /* context terminated: done */
            zmq_msg_close(&id);
            break;
        }
        zmq_msg_init(&hdr);
        zmq_msg_recv(&hdr, f->sock, 0);
        ab_msg_t req;
        ab_error_t err = AB_ERROR_INIT;
        if (ab_msg_decode(doc, zmq_msg_data(&hdr), zmq_msg_size(&hdr), NULL, &req, &err) != AB_OK)
            f->failed = 1;
        else
            fake_answer(f, &id, &req, edoc);
        zmq_msg_close(&hdr);
        zmq_msg_close(&id);
    }
    ab_doc_destroy(&doc);
    ab_doc_destroy(&edoc);
    zmq_close(f->sock);
    return NULL;
}

static void test_retry_and_gap_resend(void **state)
{
    (void)state;
    fake_t f = {0};
    f.ctx = zmq_ctx_new();
    f.sock = zmq_socket(f.ctx, ZMQ_ROUTER);
    assert_int_equal(zmq_bind(f.sock, "tcp://127.0.0.1:*"), 0);
    size_t len = sizeof(f.ep);
    assert_int_equal(zmq_getsockopt(f.sock, ZMQ_LAST_ENDPOINT, f.ep, &len), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fake_main, &f), 0);
    ab_producer_opts_t o = {.timeout_ms = IT_TIMEOUT, .backoff_base_ms = 1};
    ab_producer_t *p = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_producer_new(&p, f.ep, &o, &err), AB_OK);
    assert_int_equal(ab_producer_claim(p, "tg", "r", NULL, &err), AB_OK);
    publish_range(p, "tg", "r", 1, 4, 10);
    assert_int_equal(ab_producer_flush(p, IT_TIMEOUT, &err), AB_OK);
    ab_producer_stats_t s = ab_producer_stats(p);
    ab_producer_destroy(&p);
    zmq_ctx_shutdown(f.ctx); /* unblocks the fake's receive */
    pthread_join(th, NULL);
    zmq_ctx_term(f.ctx);
    assert_false(f.failed);
    assert_int_equal(f.npub, 3);
    assert_int_equal(f.first_seq[0], 1); /* 1..4: 1 accepted, 2 overloaded */
    assert_int_equal(f.count[0], 4);
    assert_int_equal(f.first_seq[1], 2); /* retried from 2: gap, expected 4 */
    assert_int_equal(f.count[1], 3);
    assert_int_equal(f.first_seq[2], 4); /* resent from the expected seq */
    assert_int_equal(f.count[2], 1);
    assert_int_equal(s.acked, 4);
    assert_int_equal(s.retries, 1);
    assert_int_equal(s.gaps, 1);
    assert_int_equal(s.outbox, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_full_run_round_trip, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_second_claim_fences_first, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_restart_continues, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_local_validation, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_outbox_bound, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_flush_times_out_without_broker, it_setup, it_teardown),
        cmocka_unit_test(test_retry_and_gap_resend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

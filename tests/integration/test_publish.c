/*
 * test_publish.c - a real broker process: several producers publish whole
 * runs at once and read them back byte for byte with replay (run and all
 * scopes); every typed per-event answer (gap, duplicate, conflict, fenced,
 * run_terminal, invalid_event) and batch isolation between runs.
 */
#include "testutil.h"

#include "broker_proc.h"

#include <pthread.h>

#define PRODUCERS 4
#define RUNS      3
#define EVENTS    20 /* per run */
#define BATCH     5

typedef struct sent {
    ab_buf_t ev[PRODUCERS][RUNS][EVENTS];
    const bp_t *bp;
} sent_t;

typedef struct producer {
    sent_t *s;
    int id;
    int failed;
    char why[600];
} producer_t;

static void *produce(void *arg)
{
    producer_t *p = arg;
    ab_conn_opts_t o = {.timeout_ms = IT_TIMEOUT};
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    char thread[32];
    snprintf(thread, sizeof(thread), "tp-%d", p->id);
    if (ab_doc_new(&doc) != AB_OK || ab_conn_new(&c, p->s->bp->cmd, &o, &err) != AB_OK)
        goto fail;
    /* interleave the runs: batch k of every run in turn, mixed in one publish */
    for (int off = 0; off < EVENTS; off += BATCH) {
        ab_buf_t batch[RUNS * BATCH];
        size_t n = 0;
        for (int r = 0; r < RUNS; r++) {
            char run[16];
            snprintf(run, sizeof(run), "r%d", r);
            for (int i = off; i < off + BATCH; i++) {
                ab_buf_t *b = &p->s->ev[p->id][r][i];
                char body[512];
                it_body(body, sizeof(body), thread, run, (uint64_t)i + 1, EVENTS, 32);
                if (ab_envelope_json(b, 1, thread, run, (uint64_t)i + 1, 1, body, &err) != AB_OK)
                    goto fail;
                batch[n++] = *b;
            }
        }
        const ab_result_t *res = NULL;
        if (ab_conn_publish(c, batch, n, doc, &res, IT_TIMEOUT, &err) != AB_OK)
            goto fail;
        for (size_t i = 0; i < n; i++)
            if (res[i].status != AB_RESULT_ACCEPTED) {
                snprintf(p->why, sizeof(p->why), "event %zu not accepted: %s", i,
                         res[i].error ? res[i].error->message : "?");
                p->failed = 1;
                goto out;
            }
    }
    goto out;
fail:
    p->failed = 1;
    snprintf(p->why, sizeof(p->why), "%s: %s", ab_status_name(err.code), err.message);
out:
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    return NULL;
}

typedef struct check {
    sent_t *s;
    ab_doc_t *doc;
    uint64_t last_pos;
    uint64_t next_seq[PRODUCERS][RUNS];
    size_t n;
} check_t;

static ab_status_t check_row(void *ud, const ab_stamp_t *st, const uint8_t *bytes, size_t len,
                             ab_error_t *err)
{
    check_t *k = ud;
    ab_event_t ev;
    assert_int_equal(ab_event_decode(k->doc, bytes, len, NULL, &ev, err), AB_OK);
    int p = -1, r = -1;
    assert_int_equal(sscanf(ev.thread.ptr, "tp-%d", &p), 1);
    assert_int_equal(sscanf(ev.run.ptr, "r%d", &r), 1);
    assert_true(p >= 0 && p < PRODUCERS && r >= 0 && r < RUNS);
    assert_true(st->pos > k->last_pos);
    k->last_pos = st->pos;
    assert_int_equal(ev.seq, k->next_seq[p][r] + 1);
    k->next_seq[p][r] = ev.seq;
    const ab_buf_t *want = &k->s->ev[p][r][ev.seq - 1];
    assert_int_equal(len, want->len);
    assert_memory_equal(bytes, want->data, len);
    k->n++;
    return AB_OK;
}

static void test_concurrent_producers_replay(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    sent_t *s = calloc(1, sizeof(*s));
    s->bp = &t->bp;
    producer_t pr[PRODUCERS];
    pthread_t th[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++) {
        pr[i] = (producer_t){.s = s, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, produce, &pr[i]), 0);
    }
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < PRODUCERS; i++)
        if (pr[i].failed)
            fail_msg("producer %d: %s", i, pr[i].why);
    ab_conn_t *c = it_connect(&t->bp);
    ab_doc_t *edoc = NULL;
    assert_int_equal(ab_doc_new(&edoc), AB_OK);
    ab_error_t err = AB_ERROR_INIT;
    /* scope all */
    check_t k = {.s = s, .doc = edoc};
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay.scope = AB_REPLAY_ALL;
    ab_replay_end_t end;
    assert_int_equal(ab_conn_replay(c, &q, check_row, &k, t->doc, &end, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(k.n, PRODUCERS * RUNS * EVENTS);
    assert_int_equal(end.events, k.n);
    assert_int_equal(end.head_pos, k.last_pos);
    /* scope all again in chunks of 7 events, 35 pumps: the end still carries the head, read
     * before the final read (a final read without one before it in its pump answers 0) */
    check_t k7 = {.s = s, .doc = edoc};
    q.u.replay.chunk_events = 7;
    assert_int_equal(ab_conn_replay(c, &q, check_row, &k7, t->doc, &end, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(k7.n, PRODUCERS * RUNS * EVENTS);
    assert_int_equal(end.events, k7.n);
    assert_int_equal(end.head_pos, k.last_pos);
    /* scope run, with a small window and small chunks */
    for (int p = 0; p < PRODUCERS; p++)
        for (int r = 0; r < RUNS; r++) {
            char thread[32], run[16];
            snprintf(thread, sizeof(thread), "tp-%d", p);
            snprintf(run, sizeof(run), "r%d", r);
            check_t kr = {.s = s, .doc = edoc};
            ab_msg_t qr = {.op = AB_OP_REPLAY};
            qr.u.replay = (ab_replay_t){.scope = AB_REPLAY_RUN, .window = 1, .chunk_events = 3};
            qr.u.replay.thread = (ab_str_t){thread, strlen(thread)};
            qr.u.replay.run = (ab_str_t){run, strlen(run)};
            assert_int_equal(ab_conn_replay(c, &qr, check_row, &kr, t->doc, &end, IT_TIMEOUT, &err),
                             AB_OK);
            assert_int_equal(kr.n, EVENTS);
            assert_int_equal(kr.next_seq[p][r], EVENTS);
            assert_int_equal(end.nheads, 1);
            assert_int_equal(end.heads[0].status, AB_RUN_STATUS_FINISHED);
        }
    for (int p = 0; p < PRODUCERS; p++)
        for (int r = 0; r < RUNS; r++)
            for (int i = 0; i < EVENTS; i++)
                ab_buf_free(&s->ev[p][r][i]);
    free(s);
    ab_doc_destroy(&edoc);
    ab_conn_destroy(&c);
}

#define EXPECT_REJECT(res, rej, code_)                                                             \
    do {                                                                                           \
        assert_int_equal((res).status, AB_RESULT_REJECTED);                                        \
        if ((rej).code != (code_))                                                                 \
            fail_msg("expected %s, got %s: %s", ab_status_name(code_), ab_status_name((rej).code), \
                     (rej).message);                                                               \
    } while (0)

static void test_typed_answers(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    ab_error_t err = AB_ERROR_INIT, rej = AB_ERROR_INIT;
    ab_claimed_t cl;
    assert_int_equal(ab_conn_claim(c, "ta", "r1", t->doc, &cl, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(cl.last_seq, 0);
    if (cl.status != AB_RUN_STATUS_UNKNOWN)
        fail_msg("claim of a new run: status %s, want unknown (PROTOCOL 7.3)",
                 ab_run_status_name(cl.status));
    uint64_t e1 = cl.epoch;
    ab_buf_t ev[4] = {AB_BUF_INIT, AB_BUF_INIT, AB_BUF_INIT, AB_BUF_INIT};
    it_event(&ev[0], "ta", "r1", 1, 5, e1);
    ab_result_t r = it_publish1(c, t->doc, &ev[0], &rej);
    assert_int_equal(r.status, AB_RESULT_ACCEPTED);
    uint64_t pos1 = r.pos;
    /* gap: seq 3 while 2 is expected */
    it_event(&ev[1], "ta", "r1", 3, 5, e1);
    r = it_publish1(c, t->doc, &ev[1], &rej);
    EXPECT_REJECT(r, rej, AB_GAP);
    assert_non_null(ab_error_detail(&rej, "expected_seq"));
    assert_int_equal(ab_error_detail(&rej, "expected_seq")->i, 2);
    /* duplicate: same bytes again */
    r = it_publish1(c, t->doc, &ev[0], &rej);
    assert_int_equal(r.status, AB_RESULT_DUPLICATE);
    assert_int_equal(r.pos, pos1);
    /* conflict: seq 1 with other bytes */
    it_event_json(&ev[2], "ta", "r1", 1, e1,
                  "{\"type\":\"RUN_STARTED\",\"threadId\":\"ta\",\"runId\":\"r1\","
                  "\"protocolVersion\":\"1.0\",\"parentRunId\":\"p0\"}");
    r = it_publish1(c, t->doc, &ev[2], &rej);
    EXPECT_REJECT(r, rej, AB_CONFLICT);
    /* invalid_event with a path: content without delta */
    it_event_json(&ev[3], "ta", "r1", 2, e1,
                  "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\"}");
    r = it_publish1(c, t->doc, &ev[3], &rej);
    EXPECT_REJECT(r, rej, AB_INVALID_EVENT);
    if (!strstr(rej.field, "delta"))
        fail_msg("invalid_event field '%s' does not name delta", rej.field);
    for (int i = 0; i < 4; i++)
        ab_buf_free(&ev[i]);
    ab_conn_destroy(&c);
}

/* Publish @p json as event @p seq of run tf/r1 and return its result. */
static ab_result_t pub_json(ab_conn_t *c, ab_doc_t *doc, uint64_t seq, uint64_t epoch,
                            const char *json, ab_error_t *rej)
{
    ab_buf_t ev = AB_BUF_INIT;
    it_event_json(&ev, "tf", "r1", seq, epoch, json);
    ab_result_t r = it_publish1(c, doc, &ev, rej);
    ab_buf_free(&ev);
    return r;
}

static void test_fenced_and_terminal(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp), *c2 = it_connect(&t->bp);
    ab_error_t err = AB_ERROR_INIT, rej = AB_ERROR_INIT;
    ab_claimed_t cl;
    assert_int_equal(ab_conn_claim(c, "tf", "r1", t->doc, &cl, IT_TIMEOUT, &err), AB_OK);
    uint64_t e1 = cl.epoch;
    /* the first claim fences a writer that never claimed: its implicit epoch 1 is refused (it
     * was accepted, and took seq 1 from the claimant, when the first claim gave epoch 1) */
    assert_int_equal(e1, 2);
    ab_buf_t first = AB_BUF_INIT;
    it_event(&first, "tf", "r1", 1, 0, 1);
    ab_result_t r = it_publish1(c2, t->doc, &first, &rej);
    EXPECT_REJECT(r, rej, AB_FENCED);
    ab_buf_reset(&first);
    it_event(&first, "tf", "r1", 1, 0, e1);
    r = it_publish1(c, t->doc, &first, &rej);
    ab_buf_free(&first);
    assert_int_equal(r.status, AB_RESULT_ACCEPTED);
    /* fenced: a second claim bumps the epoch */
    assert_int_equal(ab_conn_claim(c2, "tf", "r1", t->doc, &cl, IT_TIMEOUT, &err), AB_OK);
    assert_true(cl.epoch > e1);
    assert_int_equal(cl.last_seq, 1);
    assert_int_equal(cl.status, AB_RUN_STATUS_ACTIVE);
    uint64_t e2 = cl.epoch;
    r = pub_json(c, t->doc, 2, e1, "{\"type\":\"STEP_STARTED\",\"stepName\":\"s\"}", &rej);
    EXPECT_REJECT(r, rej, AB_FENCED);
    /* the new writer finishes the run, then run_terminal */
    r = pub_json(c2, t->doc, 2, e2, "{\"type\":\"STEP_STARTED\",\"stepName\":\"s\"}", &rej);
    assert_int_equal(r.status, AB_RESULT_ACCEPTED);
    r = pub_json(c2, t->doc, 3, e2, "{\"type\":\"STEP_FINISHED\",\"stepName\":\"s\"}", &rej);
    assert_int_equal(r.status, AB_RESULT_ACCEPTED);
    r = pub_json(c2, t->doc, 4, e2,
                 "{\"type\":\"RUN_FINISHED\",\"threadId\":\"tf\",\"runId\":\"r1\"}", &rej);
    if (r.status != AB_RESULT_ACCEPTED)
        fail_msg("finish: %s", rej.message);
    r = pub_json(c2, t->doc, 5, e2, "{\"type\":\"STEP_STARTED\",\"stepName\":\"late\"}", &rej);
    EXPECT_REJECT(r, rej, AB_RUN_TERMINAL);
    /* a RUN_FINISHED without outcome is a success in heads, as in the snapshot (7.1) */
    ab_head_t h = it_head(c, t->doc, "tf", "r1");
    assert_int_equal(h.status, AB_RUN_STATUS_FINISHED);
    assert_int_equal(h.outcome, AB_OUTCOME_SUCCESS);
    ab_conn_destroy(&c2);
    ab_conn_destroy(&c);
}

static void test_batch_isolation(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_t b[4] = {AB_BUF_INIT, AB_BUF_INIT, AB_BUF_INIT, AB_BUF_INIT};
    it_event(&b[0], "tb", "good", 1, 0, 1);
    it_event(&b[1], "tb", "bad", 4, 0, 1); /* a new run must start at seq 1 */
    it_event(&b[2], "tb", "good", 2, 0, 1);
    it_event(&b[3], "tb", "good", 3, 0, 1);
    const ab_result_t *res = NULL;
    assert_int_equal(ab_conn_publish(c, b, 4, t->doc, &res, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(res[0].status, AB_RESULT_ACCEPTED);
    assert_int_equal(res[1].status, AB_RESULT_REJECTED);
    assert_non_null(res[1].error);
    assert_int_equal(res[2].status, AB_RESULT_ACCEPTED);
    assert_int_equal(res[3].status, AB_RESULT_ACCEPTED);
    assert_true(res[0].pos < res[2].pos && res[2].pos < res[3].pos);
    ab_run_ref_t refs[2] = {{{"tb", 2}, {"good", 4}}, {{"tb", 2}, {"bad", 3}}};
    ab_heads_t q = {.runs = refs, .nruns = 2};
    ab_heads_reply_t hr;
    assert_int_equal(ab_conn_heads(c, &q, t->doc, &hr, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(hr.nheads, 2);
    for (size_t i = 0; i < 2; i++) {
        if (hr.heads[i].run.len == 4)
            assert_int_equal(hr.heads[i].last_seq, 3);
        else
            assert_int_equal(hr.heads[i].last_seq, 0);
    }
    for (int i = 0; i < 4; i++)
        ab_buf_free(&b[i]);
    ab_conn_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_concurrent_producers_replay, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_typed_answers, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_fenced_and_terminal, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_batch_isolation, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

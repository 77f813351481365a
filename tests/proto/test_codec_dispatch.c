/*
 * test_codec_dispatch.c - the wire codec's dispatch headers (docs/PROTOCOL.md
 * 7.12 - 7.16) and stats (7.18): a round trip of each, decoding from JSON as
 * another client would write it, and the refusals with the field they name.
 */
#include "codec_fixture.h"

static void test_op_kinds(void **state)
{
    (void)state;
    assert_true(ab_op_is_request(AB_OP_START_RUN));
    assert_true(ab_op_is_request(AB_OP_DECLINE));
    assert_true(ab_op_is_request(AB_OP_CANCEL_RUN));
    assert_true(ab_op_is_request(AB_OP_RESUME_RUN));
    assert_true(ab_op_is_request(AB_OP_ABANDON_RUN));
    assert_true(ab_op_is_request(AB_OP_REQUESTS));
    assert_false(ab_op_is_request(AB_OP_ASSIGN)); /* the broker sends it */
    assert_false(ab_op_is_request(AB_OP_RUN_CANCEL));
    assert_false(ab_op_is_request(AB_OP_RUN_ACCEPTED));
    assert_string_equal(ab_op_name(AB_OP_RESUME_RUN), "resume_run");
    assert_string_equal(ab_request_state_name(AB_REQ_ASSIGNED), "assigned");
    assert_string_equal(ab_request_state_name(AB_REQ_NONE), "?");
}

static void test_rt_start_run(void **state)
{
    fx_t *f = *state;
    const ab_val_t *in = tu_json(&f->tu, "{\"messages\":[],\"state\":{\"n\":1}}");
    ab_msg_t m = mk(AB_OP_START_RUN, 3), b;
    m.u.start_run =
        (ab_start_run_t){S("planner"), S("t-1"), S("r-1"), in, S("k-1"), AB_IF_BUSY_INTERRUPT};
    msg_rt(f, &m, &b);
    assert_str(b.u.start_run.run, "r-1");
    assert_true(ab_val_equal(b.u.start_run.input, in));
    assert_int_equal(b.u.start_run.if_busy, AB_IF_BUSY_INTERRUPT);
    m.u.start_run.run = (ab_str_t){0};
    m.u.start_run.if_busy = AB_IF_BUSY_OMIT;
    msg_rt(f, &m, &b);
    assert_null(b.u.start_run.run.ptr);
    assert_int_equal(b.u.start_run.if_busy, AB_IF_BUSY_OMIT);

    m = mk(AB_OP_RUN_ACCEPTED, 3);
    m.u.run_accepted =
        (ab_run_accepted_t){7, S("planner"), S("t-1"), S("r-1"), AB_REQ_QUEUED, 2, true};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.run_accepted.request, 7);
    assert_int_equal(b.u.run_accepted.state, AB_REQ_QUEUED);
    assert_int_equal(b.u.run_accepted.position, 2);
    assert_true(b.u.run_accepted.existing);
}

static void test_rt_worker_side(void **state)
{
    fx_t *f = *state;
    const ab_val_t *in = tu_json(&f->tu, "{\"threadId\":\"t\",\"runId\":\"r\",\"messages\":[]}");
    ab_msg_t m = mk(AB_OP_ASSIGN, 0), b;
    m.u.assign = (ab_assign_t){9, S("a"), S("t"), S("r"), in, 4, 2};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.assign.epoch, 4);
    assert_int_equal(b.u.assign.attempt, 2);
    assert_true(ab_val_equal(b.u.assign.input, in));

    m = mk(AB_OP_DECLINE, 5);
    m.u.decline = (ab_decline_t){9, 4, S("busy")};
    msg_rt(f, &m, &b);
    assert_str(b.u.decline.reason, "busy");
    m = mk(AB_OP_DECLINED, 5);
    m.u.declined = (ab_declined_t){9, AB_REQ_QUEUED};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.declined.state, AB_REQ_QUEUED);

    m = mk(AB_OP_RUN_CANCEL, 0);
    m.u.run_cancel = (ab_run_cancel_t){9, S("t"), S("r"), 4, {0}};
    msg_rt(f, &m, &b);
    assert_null(b.u.run_cancel.reason.ptr);
}

static void test_rt_control(void **state)
{
    fx_t *f = *state;
    ab_msg_t m = mk(AB_OP_CANCEL_RUN, 2), b;
    m.u.cancel_run = (ab_cancel_run_t){S("t"), S("r"), S("user asked")};
    msg_rt(f, &m, &b);
    assert_str(b.u.cancel_run.reason, "user asked");
    m = mk(AB_OP_CANCEL_REPLY, 2);
    m.u.cancel_reply = (ab_cancel_reply_t){S("t"), S("r"), AB_CANCEL_NO_OWNER, 0};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.cancel_reply.outcome, AB_CANCEL_NO_OWNER);
    assert_int_equal(b.u.cancel_reply.request, 0);

    const ab_val_t *res = tu_json(&f->tu, "[{\"interruptId\":\"i1\",\"status\":\"cancelled\"}]");
    m = mk(AB_OP_RESUME_RUN, 3);
    m.u.resume_run = (ab_resume_run_t){S("t"), S("r"), res, S("k2"), {0}, S("r2"), NULL};
    msg_rt(f, &m, &b);
    assert_true(ab_val_equal(b.u.resume_run.resume, res));
    assert_str(b.u.resume_run.new_run, "r2");
    assert_null(b.u.resume_run.agent.ptr);
    assert_null(b.u.resume_run.input);

    m = mk(AB_OP_ABANDON_RUN, 4);
    m.u.abandon_run = (ab_abandon_run_t){S("t"), S("r"), {0}};
    msg_rt(f, &m, &b);
    m = mk(AB_OP_LEAVE, 4); /* bare headers */
    msg_rt(f, &m, &b);
    m = mk(AB_OP_LEFT, 4);
    msg_rt(f, &m, &b);
    assert_true(ab_op_is_request(AB_OP_LEAVE));
    assert_false(ab_op_is_request(AB_OP_LEFT));
    m = mk(AB_OP_ABANDONED, 4);
    m.u.abandoned = (ab_abandoned_t){S("t"), S("r"), 12, 99};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.abandoned.pos, 99);
}

static void test_rt_requests(void **state)
{
    fx_t *f = *state;
    ab_request_info_t r[] = {
        {1, S("a"), S("t"), S("r"), AB_REQ_STARTED, S("w-1"), 3, 1, true, 1700000000000000},
        {2, S("a"), S("t2"), S("r2"), AB_REQ_QUEUED, {0}, 0, 0, false, 1700000000000001},
    };
    ab_msg_t m = mk(AB_OP_REQUESTS, 6), b;
    m.u.requests = (ab_requests_t){AB_REQ_QUEUED, S("a"), 5, 10};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.requests.limit, 10);
    m.u.requests = (ab_requests_t){0};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.requests.state, AB_REQ_NONE);
    m = mk(AB_OP_REQUESTS_REPLY, 6);
    m.u.requests_reply = (ab_requests_reply_t){r, 2, true};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.requests_reply.nrequests, 2);
    assert_true(b.u.requests_reply.requests[0].orphaned);
    assert_str(b.u.requests_reply.requests[0].worker, "w-1");
    assert_null(b.u.requests_reply.requests[1].worker.ptr);
    assert_true(b.u.requests_reply.more);
}

static void test_decode_from_json(void **state)
{
    fx_t *f = *state;
    ab_msg_t m;
    msg_ok(f,
           "{\"op\":\"start_run\",\"v\":1,\"cid\":2,\"agent\":\"coder\",\"thread\":\"t-9\","
           "\"input\":{\"messages\":[{\"id\":\"m1\",\"role\":\"user\",\"content\":\"hi\"}]},"
           "\"key\":\"req-1\",\"if_busy\":\"reject\"}",
           &m);
    assert_int_equal(m.op, AB_OP_START_RUN);
    assert_int_equal(m.u.start_run.if_busy, AB_IF_BUSY_REJECT);
    assert_str(m.u.start_run.key, "req-1");
    msg_ok(f,
           "{\"op\":\"resume_run\",\"v\":1,\"cid\":3,\"thread\":\"t\",\"run\":\"r\",\"key\":\"k\","
           "\"resume\":[{\"interruptId\":\"i\",\"status\":\"resolved\",\"payload\":true}]}",
           &m);
    assert_int_equal(m.u.resume_run.resume->len, 1);
}

#define START "{\"op\":\"start_run\",\"v\":1,\"cid\":2,\"agent\":\"a\",\"thread\":\"t\","

static void test_refusals(void **state)
{
    fx_t *f = *state;
    msg_err(f, START "\"key\":\"k\"}", AB_INVALID_ENVELOPE, "input");
    msg_err(f, START "\"input\":[],\"key\":\"k\"}", AB_INVALID_ENVELOPE, "input");
    msg_err(f, START "\"input\":{}}", AB_INVALID_ENVELOPE, "key");
    msg_err(f, START "\"input\":{},\"key\":\"\"}", AB_INVALID_ENVELOPE, "key");
    msg_err(f, START "\"input\":{},\"key\":\"k\",\"if_busy\":\"wait\"}", AB_INVALID_ENVELOPE,
            "if_busy");
    msg_err(f, START "\"input\":{},\"key\":\"k\",\"run\":\"a\\u0001\"}", AB_INVALID_ENVELOPE,
            "run");
    msg_err(f, "{\"op\":\"decline\",\"v\":1,\"cid\":2,\"request\":0,\"epoch\":1}",
            AB_INVALID_ENVELOPE, "request");
    msg_err(f,
            "{\"op\":\"resume_run\",\"v\":1,\"cid\":3,\"thread\":\"t\",\"run\":\"r\",\"key\":"
            "\"k\",\"resume\":{}}",
            AB_INVALID_ENVELOPE, "resume");
    msg_err(f,
            "{\"op\":\"resume_run\",\"v\":1,\"cid\":3,\"thread\":\"t\",\"run\":\"r\",\"key\":"
            "\"k\",\"resume\":[]}",
            AB_INVALID_ENVELOPE, "resume");
    msg_err(f, "{\"op\":\"requests\",\"v\":1,\"cid\":3,\"limit\":1001}", AB_TOO_LARGE, "limit");
    msg_err(f, "{\"op\":\"requests\",\"v\":1,\"cid\":3,\"state\":\"orphaned\"}",
            AB_INVALID_ENVELOPE, "state");
}

static void test_reason_bound(void **state)
{
    fx_t *f = *state;
    char json[AB_REASON_MAX + 200];
    int n = snprintf(json, sizeof json,
                     "{\"op\":\"cancel_run\",\"v\":1,\"cid\":2,\"thread\":\"t\",\"run\":\"r\","
                     "\"reason\":\"");
    memset(json + n, 'x', AB_REASON_MAX + 1);
    snprintf(json + n + AB_REASON_MAX + 1, sizeof json - (size_t)n - AB_REASON_MAX - 1, "\"}");
    msg_err(f, json, AB_TOO_LARGE, "reason");
}

/* stats (7.18): a bare request; a reply of 24 required figures and 5 optional ones */
static void test_rt_stats(void **state)
{
    fx_t *f = *state;
    assert_true(ab_op_is_request(AB_OP_STATS));
    assert_false(ab_op_is_request(AB_OP_STATS_REPLY));
    ab_msg_t m = mk(AB_OP_STATS, 9), b;
    msg_rt(f, &m, &b);
    assert_int_equal(b.op, AB_OP_STATS);
    m = mk(AB_OP_STATS_REPLY, 9);
    ab_stats_reply_t *r = &m.u.stats_reply;
    *r = (ab_stats_reply_t){.instance = S("i"), .version = S("0.1.0"), .store_known = true};
    /* without the optional standby figures: sent absent, decoded false and 0 */
    msg_rt(f, &m, &b);
    assert_false(b.u.stats_reply.replicas_known);
    assert_int_equal(b.u.stats_reply.replicas_sync, 0);
    r->replicas_known = true;
    uint64_t *fields[] = {
        &r->uptime_ms,     &r->head_pos,      &r->runs_total,    &r->runs_active,
        &r->store_bytes,   &r->wal_bytes,     &r->connections,   &r->subscribers,
        &r->queue_events,  &r->queue_bytes,   &r->replays_open,  &r->commits,
        &r->events,        &r->rejected,      &r->commits_per_s, &r->events_per_s,
        &r->commit_p50_us, &r->commit_p90_us, &r->commit_p99_us, &r->commit_max_us,
        &r->commit_window, &r->replicas,      &r->replicas_sync, &r->replica_lag_bytes,
        &r->replica_lag_us};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        *fields[i] = 1000 + i; /* each its own value: a swapped pair would show */
    msg_rt(f, &m, &b);
    const ab_stats_reply_t *g = &b.u.stats_reply;
    assert_str(g->instance, "i");
    assert_str(g->version, "0.1.0");
    assert_true(g->store_known);
    assert_true(g->replicas_known);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        size_t off = (size_t)((const char *)fields[i] - (const char *)r);
        assert_int_equal(*(const uint64_t *)(const void *)((const char *)g + off), 1000 + i);
    }
    msg_err(f, "{\"op\":\"stats_reply\",\"v\":1,\"cid\":1,\"instance\":\"i\"}", AB_INVALID_ENVELOPE,
            "version");
    /* strict as every message (section 2): the whole reply and one field more is refused,
     * naming it (PROTOCOL.md 7.18) */
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_reset(&f->out);
    assert_int_equal(ab_msg_encode(&m, &f->out, &err), AB_OK);
    assert_int_equal(f->out.data[0], 0xde); /* map 16: the count in the next two bytes */
    uint16_t n = (uint16_t)(f->out.data[1] << 8 | f->out.data[2]);
    ab_buf_reset(&f->in);
    static const uint8_t more[] = {0xa5, 'l', 'a', 't', 'e', 'r', 0x01}; /* "later": 1 */
    assert_int_equal(ab_buf_append(&f->in, f->out.data, f->out.len), AB_OK);
    assert_int_equal(ab_buf_append(&f->in, more, sizeof more), AB_OK);
    f->in.data[1] = (uint8_t)((n + 1) >> 8);
    f->in.data[2] = (uint8_t)(n + 1);
    msg_err(f, NULL, AB_INVALID_ENVELOPE, "later");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_kinds),
        cmocka_unit_test_setup_teardown(test_rt_start_run, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_rt_worker_side, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_rt_control, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_rt_requests, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_decode_from_json, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_refusals, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_reason_bound, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_rt_stats, codec_setup, codec_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

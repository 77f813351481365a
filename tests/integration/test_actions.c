/*
 * test_actions.c - workers and action calls through a real broker process
 * (docs/PROTOCOL.md 7.10, 7.11): a worker serves an agent's actions, a
 * caller's invoke_action reaches it and its result comes back; errors pass
 * through; unsupported, timeout, cancel and a lapsed lease each answer the
 * caller with their code; the `actions` capability follows the workers.
 */
#include "testutil.h"

#include "agentbus/nego.h"
#include "broker_proc.h"

#include <string.h>

typedef struct side {
    ab_conn_t *c;
    ab_doc_t *doc;
} side_t;

static side_t side_new(it_t *t)
{
    side_t s = {it_connect(&t->bp), NULL};
    assert_int_equal(ab_doc_new(&s.doc), AB_OK);
    return s;
}

static void side_free(side_t *s)
{
    ab_conn_destroy(&s->c);
    ab_doc_destroy(&s->doc);
}

/* Register @p s as worker "w1" serving agent "planner" (actions approve, slow). */
static void serve(side_t *s, uint32_t lease_ms, ab_msg_t *served)
{
    static const ab_str_t actions[] = {{"approve", 7}, {"slow", 4}};
    ab_served_agent_t agents[] = {{{"planner", 7}, 2, actions, 2}};
    ab_msg_t m = {.op = AB_OP_SERVE};
    m.u.serve = (ab_serve_t){{"w1", 2}, agents, 1, lease_ms};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_request(s->c, &m, NULL, 0, s->doc, served, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(served->op, AB_OP_SERVED);
}

/* Send invoke_action for @p action with payload @p json; @return its cid. */
static uint64_t invoke(side_t *s, const char *action, const char *json, uint32_t timeout_ms)
{
    tu_ctx_t tu;
    tu_ctx_init(&tu);
    ab_msg_t m = {.op = AB_OP_INVOKE_ACTION};
    m.u.invoke_action = (ab_invoke_action_t){{"planner", 7},
                                             {action, strlen(action)},
                                             json ? tu_json(&tu, json) : NULL,
                                             {"t-1", 3},
                                             timeout_ms};
    uint64_t cid = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_send(s->c, &m, NULL, 0, &cid, &err), AB_OK);
    tu_ctx_free(&tu);
    return cid;
}

/* The next unsolicited action_call on worker @p w. */
static ab_action_call_t next_call(side_t *w)
{
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_recv(w->c, 0, w->doc, &m, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(m.op, AB_OP_ACTION_CALL);
    assert_int_equal(m.cid, 0);
    return m.u.action_call;
}

/* Answer call @p call with @p json (or error @p e) and return the ack's `delivered`. */
static bool answer(side_t *w, uint64_t call, const char *json, const ab_error_t *e)
{
    tu_ctx_t tu;
    tu_ctx_init(&tu);
    ab_msg_t m = {.op = AB_OP_ACTION_RESULT}, ack;
    m.u.action_result = (ab_action_result_t){call, json ? tu_json(&tu, json) : NULL, e};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_request(w->c, &m, NULL, 0, w->doc, &ack, IT_TIMEOUT, &err), AB_OK);
    tu_ctx_free(&tu);
    assert_int_equal(ack.op, AB_OP_ACTION_ACK);
    assert_int_equal(ack.u.action_ack.call, call);
    return ack.u.action_ack.delivered;
}

/* The caller's answer for @p cid: its status, the reply in *out. */
static ab_status_t outcome(side_t *s, uint64_t cid, ab_msg_t *out, ab_error_t *err)
{
    return ab_conn_recv(s->c, cid, s->doc, out, IT_TIMEOUT, err);
}

static void test_call_routed_and_answered(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(t), c = side_new(t);
    ab_msg_t served, r;
    serve(&w, 0, &served);
    assert_int_equal(served.u.served.lease_ms, 10000); /* the broker's default */
    uint64_t cid = invoke(&c, "approve", "{\"toolCallId\":\"tc-1\",\"approved\":true}", 0);
    ab_action_call_t call = next_call(&w);
    assert_true(call.call >= 1);
    assert_int_equal(call.agent.len, 7);
    assert_memory_equal(call.action.ptr, "approve", 7);
    assert_memory_equal(call.thread.ptr, "t-1", 3);
    assert_true(call.timeout_ms >= 1 && call.timeout_ms <= 30000);
    assert_non_null(ab_val_get(call.payload, "toolCallId"));
    assert_true(answer(&w, call.call, "{\"ok\":true}", NULL));
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(outcome(&c, cid, &r, &err), AB_OK);
    assert_int_equal(r.op, AB_OP_ACTION_REPLY);
    assert_int_equal(r.u.action_reply.worker_id.len, served.u.served.worker_id.len);
    assert_true(ab_val_get(r.u.action_reply.result, "ok")->u.b);
    /* the worker's error reaches the caller as it was */
    cid = invoke(&c, "approve", NULL, 0);
    call = next_call(&w);
    assert_null(call.payload);
    ab_error_t e = AB_ERROR_INIT;
    ab_error_set(&e, AB_INVALID_ARGUMENT, "payload/toolCallId", "no pending tool call");
    assert_true(answer(&w, call.call, NULL, &e));
    ab_error_clear(&err);
    assert_int_equal(outcome(&c, cid, &r, &err), AB_INVALID_ARGUMENT);
    assert_string_equal(err.field, "payload/toolCallId");
    assert_string_equal(err.message, "no pending tool call");
    side_free(&c);
    side_free(&w);
}

static void test_unsupported_timeout_and_cancel(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(t), c = side_new(t);
    ab_msg_t served, r;
    serve(&w, 0, &served);
    ab_error_t err = AB_ERROR_INIT;
    uint64_t cid = invoke(&c, "deploy", NULL, 0); /* never served by anyone */
    assert_int_equal(outcome(&c, cid, &r, &err), AB_UNSUPPORTED);
    assert_string_equal(err.field, "action");
    /* no answer within 300 ms: timeout (retryable); the late answer is not delivered */
    cid = invoke(&c, "slow", NULL, 300);
    ab_action_call_t call = next_call(&w);
    ab_error_clear(&err);
    assert_int_equal(outcome(&c, cid, &r, &err), AB_TIMEOUT);
    assert_true(err.retryable);
    assert_false(answer(&w, call.call, "1", NULL));
    /* the caller cancels by cid: request_aborted, and only that call ends */
    uint64_t keep = invoke(&c, "slow", NULL, 0);
    ab_action_call_t kept = next_call(&w);
    cid = invoke(&c, "slow", NULL, 0);
    call = next_call(&w);
    ab_msg_t cancel = {.op = AB_OP_CANCEL, .cid = cid};
    assert_int_equal(ab_conn_send(c.c, &cancel, NULL, 0, NULL, &err), AB_OK);
    ab_error_clear(&err);
    assert_int_equal(outcome(&c, cid, &r, &err), AB_REQUEST_ABORTED);
    assert_false(answer(&w, call.call, "1", NULL));
    assert_true(answer(&w, kept.call, "2", NULL));
    ab_error_clear(&err);
    assert_int_equal(outcome(&c, keep, &r, &err), AB_OK);
    assert_int_equal(r.u.action_reply.result->u.i, 2);
    side_free(&c);
    side_free(&w);
}

/* Workers listed, the capability announced, until the lease lapses. */
static void test_lease_lapses(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(t), c = side_new(t);
    ab_msg_t served, r;
    serve(&w, AB_LEASE_MS_MIN, &served);
    assert_int_equal(served.u.served.lease_ms, AB_LEASE_MS_MIN);
    side_t probe = side_new(t); /* a new connection's welcome sees the worker */
    size_t ncaps = 0;
    const ab_cap_t *caps = ab_conn_caps(probe.c, &ncaps);
    assert_int_equal(ab_caps_lookup(caps, ncaps, AB_CAP_ACTIONS), AB_CAP_AVAILABLE);
    side_free(&probe);
    ab_msg_t list = {.op = AB_OP_WORKERS};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_request(c.c, &list, NULL, 0, c.doc, &r, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(r.u.workers_reply.nworkers, 1);
    assert_int_equal(r.u.workers_reply.workers[0].agents[0].capacity, 2);
    assert_int_equal(r.u.workers_reply.workers[0].agents[0].nactions, 2);
    /* the worker says nothing more: after its lease it is gone */
    long deadline = ab__mono_ms() + IT_TIMEOUT;
    size_t n = 1;
    while (n > 0 && ab__mono_ms() < deadline) {
        assert_int_equal(ab_conn_wait(c.c, 100), 0); /* nothing arrives unasked */
        assert_int_equal(ab_conn_request(c.c, &list, NULL, 0, c.doc, &r, IT_TIMEOUT, &err), AB_OK);
        n = r.u.workers_reply.nworkers;
    }
    assert_int_equal(n, 0);
    uint64_t cid = invoke(&c, "approve", NULL, 0); /* served once, by nobody now */
    ab_error_clear(&err);
    assert_int_equal(outcome(&c, cid, &r, &err), AB_UNAVAILABLE);
    assert_true(err.retryable);
    probe = side_new(t);
    caps = ab_conn_caps(probe.c, &ncaps);
    assert_int_equal(ab_caps_lookup(caps, ncaps, AB_CAP_ACTIONS), AB_CAP_UNAVAILABLE);
    side_free(&probe);
    side_free(&c);
    side_free(&w);
}

/* A call open when its worker's lease lapses ends `unavailable` for the caller. */
static void test_worker_lost_mid_call(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(t), c = side_new(t);
    ab_msg_t served, r;
    serve(&w, AB_LEASE_MS_MIN, &served);
    uint64_t cid = invoke(&c, "slow", NULL, 20000);
    (void)next_call(&w);
    side_free(&w); /* gone without a word */
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(outcome(&c, cid, &r, &err), AB_UNAVAILABLE);
    assert_non_null(strstr(err.message, "lapsed"));
    side_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_call_routed_and_answered, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_unsupported_timeout_and_cancel, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_lease_lapses, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_worker_lost_mid_call, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_codec_coord.c - the wire codec's worker and action headers
 * (docs/PROTOCOL.md 7.10, 7.11): a round trip of each, the bytes of the
 * common ones read back from JSON, and every refusal with the field it names.
 */
#include "codec_fixture.h"

static const ab_str_t ACTIONS[] = {{"approve", 7}, {"retry", 5}};

static void test_op_kinds(void **state)
{
    (void)state;
    assert_true(ab_op_is_request(AB_OP_SERVE));
    assert_true(ab_op_is_request(AB_OP_WORKERS));
    assert_true(ab_op_is_request(AB_OP_INVOKE_ACTION));
    assert_true(ab_op_is_request(AB_OP_ACTION_RESULT));
    assert_false(ab_op_is_request(AB_OP_ACTION_CALL)); /* the broker sends it */
    assert_false(ab_op_is_request(AB_OP_SERVED));
    assert_false(ab_op_is_request(AB_OP_ACTION_REPLY));
    assert_string_equal(ab_op_name(AB_OP_INVOKE_ACTION), "invoke_action");
}

static void test_rt_serve_served(void **state)
{
    fx_t *f = *state;
    ab_served_agent_t agents[] = {{S("planner"), 4, ACTIONS, 2}, {S("coder"), 1, NULL, 0}};
    ab_msg_t m = mk(AB_OP_SERVE, 3), b;
    m.u.serve = (ab_serve_t){S("pool-a/7"), agents, 2, 5000};
    msg_rt(f, &m, &b);
    assert_str(b.u.serve.worker, "pool-a/7");
    assert_int_equal(b.u.serve.nagents, 2);
    assert_int_equal(b.u.serve.agents[0].capacity, 4);
    assert_int_equal(b.u.serve.agents[0].nactions, 2);
    assert_str(b.u.serve.agents[0].actions[1], "retry");
    assert_int_equal(b.u.serve.agents[1].nactions, 0);
    assert_int_equal(b.u.serve.lease_ms, 5000);
    m.u.serve.lease_ms = 0; /* omitted */
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.serve.lease_ms, 0);

    m = mk(AB_OP_SERVED, 3);
    m.u.served = (ab_served_t){S("w-00c1"), 10000};
    msg_rt(f, &m, &b);
    assert_str(b.u.served.worker_id, "w-00c1");
    assert_int_equal(b.u.served.lease_ms, 10000);
}

static void test_rt_workers(void **state)
{
    fx_t *f = *state;
    ab_served_agent_t agents[] = {{S("planner"), 2, ACTIONS, 1}};
    ab_worker_info_t w[] = {{S("w-1"), S("pool"), agents, 1, 10000, 12, 3}};
    ab_msg_t m = mk(AB_OP_WORKERS, 9), b;
    msg_rt(f, &m, &b);
    m = mk(AB_OP_WORKERS_REPLY, 9);
    m.u.workers_reply = (ab_workers_reply_t){w, 1};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.workers_reply.nworkers, 1);
    assert_int_equal(b.u.workers_reply.workers[0].idle_ms, 12);
    assert_int_equal(b.u.workers_reply.workers[0].calls, 3);
    m.u.workers_reply = (ab_workers_reply_t){NULL, 0}; /* no worker: an empty list */
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.workers_reply.nworkers, 0);
}

static void test_rt_action_messages(void **state)
{
    fx_t *f = *state;
    const ab_val_t *payload = tu_json(&f->tu, "{\"id\":\"tc-1\",\"approved\":true,\"n\":[1,2]}");
    const ab_val_t *result = tu_json(&f->tu, "\"done\"");
    ab_msg_t m = mk(AB_OP_INVOKE_ACTION, 5), b;
    m.u.invoke_action = (ab_invoke_action_t){S("planner"), S("approve"), payload, S("t-1"), 2500};
    msg_rt(f, &m, &b);
    assert_true(ab_val_equal(b.u.invoke_action.payload, payload));
    assert_str(b.u.invoke_action.thread, "t-1");
    m.u.invoke_action = (ab_invoke_action_t){S("planner"), S("approve"), NULL, {0}, 0};
    msg_rt(f, &m, &b);
    assert_null(b.u.invoke_action.payload);
    assert_null(b.u.invoke_action.thread.ptr);
    assert_int_equal(b.u.invoke_action.timeout_ms, 0);

    m = mk(AB_OP_ACTION_CALL, 0);
    m.u.action_call = (ab_action_call_t){77, S("planner"), S("approve"), payload, {0}, 900};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.action_call.call, 77);
    assert_int_equal(b.u.action_call.timeout_ms, 900);

    m = mk(AB_OP_ACTION_RESULT, 6);
    m.u.action_result = (ab_action_result_t){77, result, NULL};
    msg_rt(f, &m, &b);
    assert_true(ab_val_equal(b.u.action_result.result, result));
    ab_error_t e = AB_ERROR_INIT;
    ab_error_set(&e, AB_INVALID_ARGUMENT, "payload/id", "no tool call tc-1");
    e.cid = 6; /* an error map in a header carries the header's cid */
    m.u.action_result = (ab_action_result_t){77, NULL, &e};
    msg_rt(f, &m, &b);
    assert_non_null(b.u.action_result.error);
    assert_int_equal(b.u.action_result.error->code, AB_INVALID_ARGUMENT);

    m = mk(AB_OP_ACTION_ACK, 6);
    m.u.action_ack = (ab_action_ack_t){77, true};
    msg_rt(f, &m, &b);
    assert_true(b.u.action_ack.delivered);

    m = mk(AB_OP_ACTION_REPLY, 5);
    m.u.action_reply = (ab_action_reply_t){S("planner"), S("approve"), S("w-1"), result};
    msg_rt(f, &m, &b);
    assert_str(b.u.action_reply.worker_id, "w-1");
}

/* The field names of PROTOCOL.md, read from JSON text as another client would write them. */
static void test_decode_from_json(void **state)
{
    fx_t *f = *state;
    ab_msg_t m;
    msg_ok(f,
           "{\"op\":\"serve\",\"v\":1,\"cid\":2,\"worker\":\"py-worker\",\"agents\":[{\"name\":"
           "\"summarizer\",\"capacity\":3,\"actions\":[\"regenerate\"]}],\"lease_ms\":4000}",
           &m);
    assert_int_equal(m.op, AB_OP_SERVE);
    assert_str(m.u.serve.agents[0].name, "summarizer");
    assert_str(m.u.serve.agents[0].actions[0], "regenerate");
    msg_ok(f,
           "{\"op\":\"invoke_action\",\"v\":1,\"cid\":4,\"agent\":\"summarizer\",\"action\":"
           "\"regenerate\",\"payload\":null}",
           &m);
    assert_non_null(m.u.invoke_action.payload);
    assert_int_equal(m.u.invoke_action.payload->type, AB_VAL_NULL);
    msg_ok(f, "{\"op\":\"action_result\",\"v\":1,\"cid\":5,\"call\":1}", &m); /* result null */
    assert_null(m.u.action_result.result);
    assert_null(m.u.action_result.error);
}

#define SERVE_HEAD "{\"op\":\"serve\",\"v\":1,\"cid\":2,\"worker\":\"w\",\"agents\":"

static void test_serve_refusals(void **state)
{
    fx_t *f = *state;
    msg_err(f, SERVE_HEAD "[]}", AB_INVALID_ENVELOPE, "agents");
    msg_err(f, "{\"op\":\"serve\",\"v\":1,\"cid\":2,\"agents\":[{\"name\":\"a\",\"capacity\":1}]}",
            AB_INVALID_ENVELOPE, "worker");
    msg_err(f, SERVE_HEAD "[{\"name\":\"a\",\"capacity\":0}]}", AB_INVALID_ENVELOPE,
            "agents/0/capacity");
    msg_err(f, SERVE_HEAD "[{\"name\":\"a\",\"capacity\":1025}]}", AB_TOO_LARGE,
            "agents/0/capacity");
    msg_err(f, SERVE_HEAD "[{\"name\":\"a\\u0001b\",\"capacity\":1}]}", AB_INVALID_ENVELOPE,
            "agents/0/name");
    msg_err(f, SERVE_HEAD "[{\"name\":\"a\",\"capacity\":1},{\"name\":\"a\",\"capacity\":2}]}",
            AB_INVALID_ENVELOPE, "agents/1/name");
    msg_err(f, SERVE_HEAD "[{\"name\":\"a\",\"capacity\":1,\"actions\":[\"x\",\"x\"]}]}",
            AB_INVALID_ENVELOPE, "agents/0/actions");
    msg_err(f, SERVE_HEAD "[{\"name\":\"a\",\"capacity\":1,\"actions\":[\"\"]}]}",
            AB_INVALID_ENVELOPE, "agents/0/actions/0");
    msg_err(f, SERVE_HEAD "[{\"name\":\"a\",\"capacity\":1,\"actions\":[7]}]}", AB_INVALID_ENVELOPE,
            "agents/0/actions/0");
    msg_err(f, SERVE_HEAD "[{\"name\":\"a\",\"capacity\":1}],\"lease_ms\":999}",
            AB_INVALID_ENVELOPE, "lease_ms");
    msg_err(f, SERVE_HEAD "[{\"name\":\"a\",\"capacity\":1}],\"lease_ms\":600001}",
            AB_INVALID_ENVELOPE, "lease_ms");
    msg_err(f, SERVE_HEAD "[{\"name\":\"a\",\"capacity\":1}],\"lease\":1000}", AB_INVALID_ENVELOPE,
            "lease");
}

/* 65 actions for one agent: one more than AB_SERVE_ACTIONS_MAX. */
static void test_serve_too_many_actions(void **state)
{
    fx_t *f = *state;
    char json[4096];
    size_t n = (size_t)snprintf(json, sizeof json,
                                SERVE_HEAD "[{\"name\":\"a\",\"capacity\":1,"
                                           "\"actions\":[");
    for (int i = 0; i <= AB_SERVE_ACTIONS_MAX; i++)
        n += (size_t)snprintf(json + n, sizeof json - n, "%s\"a%d\"", i ? "," : "", i);
    snprintf(json + n, sizeof json - n, "]}]}");
    msg_err(f, json, AB_TOO_LARGE, "agents/0/actions");
}

static void test_action_refusals(void **state)
{
    fx_t *f = *state;
    msg_err(f, "{\"op\":\"invoke_action\",\"v\":1,\"cid\":4,\"action\":\"x\"}", AB_INVALID_ENVELOPE,
            "agent");
    msg_err(f, "{\"op\":\"invoke_action\",\"v\":1,\"cid\":4,\"agent\":\"a\",\"action\":\"\"}",
            AB_INVALID_ENVELOPE, "action");
    msg_err(f,
            "{\"op\":\"invoke_action\",\"v\":1,\"cid\":4,\"agent\":\"a\",\"action\":\"x\","
            "\"timeout_ms\":0}",
            AB_INVALID_ENVELOPE, "timeout_ms");
    msg_err(f,
            "{\"op\":\"invoke_action\",\"v\":1,\"cid\":4,\"agent\":\"a\",\"action\":\"x\","
            "\"timeout_ms\":600001}",
            AB_TOO_LARGE, "timeout_ms");
    msg_err(f, "{\"op\":\"action_result\",\"v\":1,\"cid\":5,\"call\":0}", AB_INVALID_ENVELOPE,
            "call");
    msg_err(f,
            "{\"op\":\"action_result\",\"v\":1,\"cid\":5,\"call\":1,\"result\":1,\"error\":"
            "{\"code\":\"internal\",\"message\":\"x\",\"retryable\":false}}",
            AB_INVALID_ENVELOPE, "error");
}

/* Encoding refuses what decoding would: nothing invalid reaches the wire. */
static void test_encode_refusals(void **state)
{
    fx_t *f = *state;
    ab_error_t err = AB_ERROR_INIT;
    ab_str_t twice[] = {{"x", 1}, {"x", 1}};
    ab_served_agent_t agents[] = {{S("a"), 1, twice, 2}};
    ab_msg_t m = mk(AB_OP_SERVE, 1);
    m.u.serve = (ab_serve_t){S("w"), agents, 1, 0};
    size_t before = f->out.len;
    assert_int_equal(ab_msg_encode(&m, &f->out, &err), AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "agents/0/actions");
    assert_int_equal(f->out.len, before);
    ab_error_clear(&err);
    m = mk(AB_OP_ACTION_RESULT, 1);
    ab_error_t e = AB_ERROR_INIT;
    ab_error_set(&e, AB_INTERNAL, "", "x");
    m.u.action_result = (ab_action_result_t){1, tu_json(&f->tu, "1"), &e};
    assert_int_equal(ab_msg_encode(&m, &f->out, &err), AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_kinds),
        cmocka_unit_test_setup_teardown(test_rt_serve_served, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_rt_workers, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_rt_action_messages, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_decode_from_json, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_serve_refusals, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_serve_too_many_actions, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_action_refusals, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_encode_refusals, codec_setup, codec_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

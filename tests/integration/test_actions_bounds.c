/*
 * test_actions_bounds.c - the memory bounds of workers and action calls
 * (docs/OPERATIONS.md "Memory bounds", broker/workers.h) with a real broker:
 * registrations stop at 8 MiB with `overloaded` (and the listing of all of
 * them still answers), and a worker that never answers holds at most 256
 * open calls (the next is `overloaded`, an answer frees a place).
 */
#include "testutil.h"

#include "broker_proc.h"

#include <stdio.h>
#include <string.h>

#define CONNS_MAX 160

/* `serve` of 64 agents with 64 actions each: a registration of about 100 KiB. */
static ab_status_t serve_big(ab_conn_t *c, ab_doc_t *doc, int k, ab_error_t *err)
{
    static char names[AB_SERVE_AGENTS_MAX][16];
    static char acts[AB_SERVE_ACTIONS_MAX][16];
    static ab_str_t actv[AB_SERVE_ACTIONS_MAX];
    ab_served_agent_t agents[AB_SERVE_AGENTS_MAX];
    for (int j = 0; j < AB_SERVE_ACTIONS_MAX; j++) {
        snprintf(acts[j], sizeof(acts[j]), "act-%06d", j);
        actv[j] = (ab_str_t){acts[j], strlen(acts[j])};
    }
    for (int i = 0; i < AB_SERVE_AGENTS_MAX; i++) {
        snprintf(names[i], sizeof(names[i]), "ag%03d-%04d", i, k);
        agents[i] =
            (ab_served_agent_t){{names[i], strlen(names[i])}, 1, actv, AB_SERVE_ACTIONS_MAX};
    }
    ab_msg_t m = {.op = AB_OP_SERVE}, r;
    m.u.serve = (ab_serve_t){{"big", 3}, agents, AB_SERVE_AGENTS_MAX, 60000};
    return ab_conn_request(c, &m, NULL, 0, doc, &r, IT_TIMEOUT, err);
}

static void test_registration_bytes_bound(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    static ab_conn_t *conns[CONNS_MAX];
    int n = 0;
    ab_status_t st = AB_OK;
    ab_error_t err = AB_ERROR_INIT;
    while (st == AB_OK && n < CONNS_MAX) {
        conns[n] = it_connect(&t->bp);
        ab_error_clear(&err);
        st = serve_big(conns[n], t->doc, n, &err);
        n++;
    }
    assert_int_equal(st, AB_OVERLOADED); /* 8 MiB of registrations: about 80 of these */
    assert_true(err.retryable);
    assert_non_null(strstr(err.message, "MiB of worker registrations"));
    assert_true(n > 40 && n < CONNS_MAX);
    ab_msg_t list = {.op = AB_OP_WORKERS}, r;
    ab_error_clear(&err);
    assert_int_equal(ab_conn_request(conns[0], &list, NULL, 0, t->doc, &r, IT_TIMEOUT, &err),
                     AB_OK);
    assert_int_equal(r.u.workers_reply.nworkers, (size_t)(n - 1)); /* every accepted one */
    /* a registration that replaces its own (same connection) still fits */
    ab_error_clear(&err);
    assert_int_equal(serve_big(conns[0], t->doc, 0, &err), AB_OK);
    for (int i = 0; i < n; i++)
        ab_conn_destroy(&conns[i]);
}

static void test_open_calls_per_worker_bound(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *w = it_connect(&t->bp), *c = it_connect(&t->bp);
    static const ab_str_t act = {"slow", 4};
    ab_served_agent_t a = {{"busy", 4}, 1, &act, 1};
    ab_msg_t m = {.op = AB_OP_SERVE}, r;
    m.u.serve = (ab_serve_t){{"w", 1}, &a, 1, 60000};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_request(w, &m, NULL, 0, t->doc, &r, IT_TIMEOUT, &err), AB_OK);
    ab_msg_t inv = {.op = AB_OP_INVOKE_ACTION};
    inv.u.invoke_action = (ab_invoke_action_t){{"busy", 4}, act, NULL, {0}, 60000};
    for (int i = 0; i < 256; i++)
        assert_int_equal(ab_conn_send(c, &inv, NULL, 0, NULL, &err), AB_OK);
    uint64_t cid = 0;
    assert_int_equal(ab_conn_send(c, &inv, NULL, 0, &cid, &err), AB_OK);
    assert_int_equal(ab_conn_recv(c, cid, t->doc, &r, IT_TIMEOUT, &err), AB_OVERLOADED);
    assert_string_equal(err.field, "action");
    /* the worker got the 256 calls; answering one frees a place */
    ab_msg_t call;
    assert_int_equal(ab_conn_recv(w, 0, t->doc, &call, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(call.op, AB_OP_ACTION_CALL);
    ab_msg_t res = {.op = AB_OP_ACTION_RESULT};
    res.u.action_result = (ab_action_result_t){call.u.action_call.call, NULL, NULL};
    assert_int_equal(ab_conn_send(w, &res, NULL, 0, NULL, &err), AB_OK);
    ab_status_t st = AB_OVERLOADED;
    long deadline = ab__mono_ms() + IT_TIMEOUT;
    while (st == AB_OVERLOADED && ab__mono_ms() < deadline) { /* the answer is on its way */
        ab_error_clear(&err);
        assert_int_equal(ab_conn_send(c, &inv, NULL, 0, &cid, &err), AB_OK);
        ab_msg_t ans;
        st = ab_conn_recv(c, cid, t->doc, &ans, 200, &err);
    }
    assert_int_equal(st, AB_TIMEOUT); /* accepted: it waits for the worker, which stays silent */
    ab_conn_destroy(&c);
    ab_conn_destroy(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_registration_bytes_bound, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_open_calls_per_worker_bound, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * dispatch_side.h - a worker's side of dispatch in an integration test (docs/PROTOCOL.md
 * 7.10 - 7.15): its unsolicited messages, its assignments, the events it publishes for them
 * and the requests as `requests` lists them. Shared by the dispatch tests (integration/
 * test_dispatch*, pg/test_pg_dispatch).
 */
#ifndef AB_TESTS_DISPATCH_SIDE_H
#define AB_TESTS_DISPATCH_SIDE_H

#include "side.h"

#include <string.h>

/* The next unsolicited message on worker @p w within @p ms, of op @p op. */
static inline ab_msg_t next_msg_within(side_t *w, ab_op_t op, int ms)
{
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_recv(w->c, 0, w->doc, &m, ms, &err) != AB_OK)
        fail_msg("no %s: %s: %s", ab_op_name(op), ab_status_name(err.code), err.message);
    if (m.op != op)
        fail_msg("expected %s, got %s", ab_op_name(op), ab_op_name(m.op));
    assert_int_equal(m.cid, 0);
    return m;
}

/* The next unsolicited message on worker @p w, of op @p op. */
static inline ab_msg_t next_msg(side_t *w, ab_op_t op)
{
    return next_msg_within(w, op, IT_TIMEOUT);
}

/* Whether anything unsolicited arrives on @p w within @p ms. */
static inline bool quiet(side_t *w, int ms)
{
    ab_msg_t m;
    return ab_conn_recv(w->c, 0, w->doc, &m, ms, NULL) == AB_TIMEOUT;
}

/* Copied ids of an assignment (the worker's doc is reused). */
typedef struct asg {
    uint64_t request, epoch;
    uint32_t attempt;
    char thread[64], run[128];
    char input[2048]; /* the assignment's input as JSON */
} asg_t;

/* The ids of assignment @p m, its input naming its thread and run. */
static inline asg_t asg_of(const ab_msg_t *m)
{
    asg_t a = {m->u.assign.request, m->u.assign.epoch, m->u.assign.attempt, "", "", ""};
    ab_buf_t js = AB_BUF_INIT;
    assert_int_equal(ab_val_to_json(m->u.assign.input, &js), AB_OK);
    assert_true(js.len < sizeof a.input);
    memcpy(a.input, js.data, js.len);
    ab_buf_free(&js);
    snprintf(a.thread, sizeof a.thread, "%.*s", (int)m->u.assign.thread.len,
             m->u.assign.thread.ptr);
    snprintf(a.run, sizeof a.run, "%.*s", (int)m->u.assign.run.len, m->u.assign.run.ptr);
    assert_true(ab_val_str_eq(ab_val_get(m->u.assign.input, "threadId"), a.thread));
    assert_true(ab_val_str_eq(ab_val_get(m->u.assign.input, "runId"), a.run));
    return a;
}

static inline asg_t next_assign_within(side_t *w, int ms)
{
    ab_msg_t m = next_msg_within(w, AB_OP_ASSIGN, ms);
    return asg_of(&m);
}

static inline asg_t next_assign(side_t *w)
{
    return next_assign_within(w, IT_TIMEOUT);
}

/* Publish one event of @p a's run with @p seq; @return the result status (error in *err). */
static inline ab_result_status_t publish(side_t *w, const asg_t *a, uint64_t seq, const char *type,
                                         ab_error_t *err)
{
    char body[3072];
    if (strcmp(type, "RUN_STARTED") == 0) /* it echoes the input it was given */
        snprintf(body, sizeof body,
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                 "\"protocolVersion\":\"1.0\",\"input\":%s}",
                 a->thread, a->run, a->input);
    else if (strcmp(type, "INTERRUPT") == 0)
        snprintf(body, sizeof body,
                 "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                 "\"outcome\":{\"type\":\"interrupt\",\"interrupts\":[{\"id\":\"i1\","
                 "\"reason\":\"confirmation\"},{\"id\":\"i2\",\"reason\":\"tool_call\","
                 "\"expiresAt\":\"2001-01-01T00:00:00Z\"}]}}",
                 a->thread, a->run);
    else
        snprintf(body, sizeof body, "{\"type\":\"%s\",\"threadId\":\"%s\",\"runId\":\"%s\"}", type,
                 a->thread, a->run);
    ab_buf_t ev = AB_BUF_INIT;
    assert_int_equal(ab_envelope_json(&ev, 1, a->thread, a->run, seq, a->epoch, body, NULL), AB_OK);
    ab_result_t r = it_publish1(w->c, w->doc, &ev, err);
    ab_buf_free(&ev);
    return r.status;
}

/* Publish @p type of @p a's run at @p seq on @p w, which must be accepted. */
static inline void publish_ok(side_t *w, const asg_t *a, uint64_t seq, const char *type)
{
    ab_error_t err = AB_ERROR_INIT;
    if (publish(w, a, seq, type, &err) != AB_RESULT_ACCEPTED)
        fail_msg("publish %s: %s: %s", type, ab_status_name(err.code), err.message);
}

/* Register @p s as worker @p name serving @p agent, @p cap runs at once, with a lease of
 * @p lease_ms (0: the broker's default). */
static inline void serve_agent(side_t *s, const char *name, const char *agent, uint32_t cap,
                               uint32_t lease_ms)
{
    ab_served_agent_t agents[] = {{SV(agent), cap, NULL, 0}};
    ab_msg_t m = {.op = AB_OP_SERVE}, r;
    m.u.serve = (ab_serve_t){SV(name), agents, 1, lease_ms};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_request(s->c, &m, NULL, 0, s->doc, &r, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(r.op, AB_OP_SERVED);
}

static inline void run_through(side_t *w, const asg_t *a)
{
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(publish(w, a, 1, "RUN_STARTED", &err), AB_RESULT_ACCEPTED);
    assert_int_equal(publish(w, a, 2, "RUN_FINISHED", &err), AB_RESULT_ACCEPTED);
}

/* The request @p id as `requests` lists it (all states); false when not listed. */
static inline bool find_req(side_t *s, uint64_t id, ab_request_state_t state,
                            ab_request_info_t *out)
{
    ab_requests_t q = {state, {0}, id - 1, 1};
    ab_requests_reply_t r;
    ab_error_t err = AB_ERROR_INIT;
    *out = (ab_request_info_t){0}; /* set on every path: callers read it after assert_true() */
    if (ab_conn_requests(s->c, &q, s->doc, &r, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("requests: %s: %s (field %s)", ab_status_name(err.code), err.message, err.field);
    if (r.nrequests == 0 || r.requests[0].request != id)
        return false;
    *out = r.requests[0];
    return true;
}

/* Wait until request @p id is in @p state (moves follow commits between groups). */
static inline ab_request_info_t wait_state(side_t *s, uint64_t id, ab_request_state_t state)
{
    ab_request_info_t info = {0};
    for (int i = 0; i < 500; i++) {
        if (find_req(s, id, state, &info))
            return info;
        ab_conn_wait(s->c, 10);
    }
    fail_msg("request %llu never reached %s", (unsigned long long)id, ab_request_state_name(state));
    return info;
}

#endif

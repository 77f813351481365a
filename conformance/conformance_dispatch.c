/*
 * conformance_dispatch.c - the conformance checks of run dispatch
 * (PROTOCOL.md 7.12 - 7.15, capabilities `dispatch`, `cancelRun`,
 * `resumeRun`). Where a capability is announced its rules are checked on
 * requests of a fresh agent; where it is not, the op must fail with a typed
 * error, never succeed silently.
 *
 * Invariants:
 *  1. Agents, threads and keys are fresh (conf_id()), so no worker of the
 *     broker under test is ever given a request of the suite, and every
 *     request the suite makes is cancelled before the check returns (none
 *     is left queued on the broker).
 *  2. The suite's worker reads with cid 0: an assignment is unsolicited.
 */
#include "conformance.h"

#include <stdio.h>
#include <string.h>

#define SV(s) ((ab_str_t){(s), strlen(s)})

static bool announced(conf_t *cf, const char *cap)
{
    size_t n = 0;
    const ab_cap_t *caps = ab_conn_caps(cf->c, &n); /* before n is read */
    ab_cap_state_t s = ab_caps_lookup(caps, n, cap);
    return s == AB_CAP_AVAILABLE || s == AB_CAP_DEGRADED;
}

/* An op that is not announced fails with a typed error. */
static conf_result_t refused(conf_t *cf, ab_msg_t *req, const char *cap)
{
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_request(cf->c, req, NULL, 0, cf->doc, &m, cf->timeout_ms, &err);
    if (st == AB_OK || st == AB_TIMEOUT || st == AB_IO)
        return conf_fail(cf, "%s is not announced but %s answered %s", cap, ab_op_name(req->op),
                         st == AB_OK ? ab_op_name(m.op) : ab_status_name(st));
    return CONF_PASS;
}

typedef struct req {
    char agent[96], thread[96], key[96], run[300];
    uint64_t id;
} req_t;

static conf_result_t start(conf_t *cf, req_t *q, bool fresh, ab_run_accepted_t *out)
{
    if (fresh) {
        conf_id(cf, q->agent, sizeof(q->agent), "agent");
        conf_id(cf, q->thread, sizeof(q->thread), "thread");
        conf_id(cf, q->key, sizeof(q->key), "key");
    }
    ab_kv_t kv = {"messages", 8, {.type = AB_VAL_ARRAY}};
    ab_val_t input = {.type = AB_VAL_MAP, .len = 1, .u.pairs = &kv};
    ab_start_run_t s = {SV(q->agent), SV(q->thread), {0}, &input, SV(q->key), AB_IF_BUSY_OMIT};
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_start_run(cf->c, &s, cf->doc, out, cf->timeout_ms, &err);
    if (st != AB_OK)
        return conf_fail(cf, "start_run answered %s: %s", ab_status_name(st), err.message);
    if (out->request == 0 || out->run.len == 0 || out->run.len >= sizeof(q->run))
        return conf_fail(cf, "run_accepted has request %llu and a run of %zu bytes",
                         (unsigned long long)out->request, out->run.len);
    memcpy(q->run, out->run.ptr, out->run.len);
    q->run[out->run.len] = '\0';
    q->id = out->request;
    return CONF_PASS;
}

static conf_result_t cancel(conf_t *cf, const req_t *q, ab_cancel_outcome_t want)
{
    ab_cancel_run_t c = {SV(q->thread), SV(q->run), SV("conformance")};
    ab_cancel_reply_t r;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_cancel_run(cf->c, &c, cf->doc, &r, cf->timeout_ms, &err);
    if (st != AB_OK)
        return conf_fail(cf, "cancel_run answered %s: %s", ab_status_name(st), err.message);
    if (r.outcome != want)
        return conf_fail(cf, "cancel_run of a %s request answered outcome %d, not %d",
                         want == AB_CANCEL_DEQUEUED ? "queued" : "cancelled", (int)r.outcome,
                         (int)want);
    return CONF_PASS;
}

/* A fresh agent's request is queued, its key answers it again, a worker serving the agent
 * is assigned it with a claim epoch, and a decline gives it back. */
static conf_result_t dispatched(conf_t *cf)
{
    req_t q;
    ab_run_accepted_t a;
    conf_result_t r = start(cf, &q, true, &a);
    if (r == CONF_PASS && (a.state != AB_REQ_QUEUED || a.position != 0 || a.existing))
        r = conf_fail(cf, "a request nobody serves is %s at position %llu (existing %d)",
                      ab_request_state_name(a.state), (unsigned long long)a.position, a.existing);
    if (r == CONF_PASS && (r = start(cf, &q, false, &a)) == CONF_PASS &&
        (!a.existing || a.request != q.id))
        r = conf_fail(cf, "the same key did not name the same request");
    ab_error_t err = AB_ERROR_INIT;
    ab_conn_t *w = r == CONF_PASS ? conf_connect(cf, NULL, 0, &err) : NULL;
    if (r == CONF_PASS && !w)
        r = CONF_FAIL;
    ab_served_agent_t ag = {SV(q.agent), 1, NULL, 0};
    ab_msg_t m = {.op = AB_OP_SERVE}, got;
    m.u.serve = (ab_serve_t){SV("conformance"), &ag, 1, 0};
    if (r == CONF_PASS &&
        (ab_conn_request(w, &m, NULL, 0, cf->tmp, &got, cf->timeout_ms, &err) != AB_OK ||
         got.op != AB_OP_SERVED))
        r = conf_fail(cf, "serve answered %s: %s", ab_op_name(got.op), err.message);
    if (r == CONF_PASS && (ab_conn_recv(w, 0, cf->tmp, &got, cf->timeout_ms, &err) != AB_OK ||
                           got.op != AB_OP_ASSIGN || got.u.assign.request != q.id ||
                           got.u.assign.epoch == 0 || got.u.assign.attempt != 1 ||
                           !ab_val_str_eq(ab_val_get(got.u.assign.input, "threadId"), q.thread)))
        r = conf_fail(cf, "the worker was not assigned the queued request (got %s)",
                      ab_op_name(got.op));
    if (r == CONF_PASS) {
        ab_msg_t dc = {.op = AB_OP_DECLINE};
        dc.u.decline = (ab_decline_t){q.id, got.u.assign.epoch, SV("conformance")};
        if (ab_conn_request(w, &dc, NULL, 0, cf->tmp, &got, cf->timeout_ms, &err) != AB_OK ||
            got.op != AB_OP_DECLINED || got.u.declined.state != AB_REQ_QUEUED)
            r = conf_fail(cf, "decline was not answered declined/queued (%s)", err.message);
    }
    ab_conn_destroy(&w);
    if (q.id && r == CONF_PASS)
        r = cancel(cf, &q, AB_CANCEL_DEQUEUED);
    return r;
}

conf_result_t conf_check_dispatch(conf_t *cf)
{
    if (announced(cf, AB_CAP_DISPATCH))
        return dispatched(cf);
    ab_msg_t m = {.op = AB_OP_REQUESTS};
    return refused(cf, &m, AB_CAP_DISPATCH);
}

conf_result_t conf_check_cancel_run(conf_t *cf)
{
    req_t q;
    ab_run_accepted_t a;
    if (!announced(cf, AB_CAP_CANCEL_RUN)) {
        conf_id(cf, q.thread, sizeof(q.thread), "thread");
        ab_msg_t m = {.op = AB_OP_CANCEL_RUN};
        m.u.cancel_run = (ab_cancel_run_t){SV(q.thread), SV("r"), {0}};
        return refused(cf, &m, AB_CAP_CANCEL_RUN);
    }
    if (!announced(cf, AB_CAP_DISPATCH))
        return conf_need(cf, AB_CAP_DISPATCH);
    conf_result_t r = start(cf, &q, true, &a);
    if (r == CONF_PASS)
        r = cancel(cf, &q, AB_CANCEL_DEQUEUED);
    if (r == CONF_PASS) /* a cancelled request has ended: a second cancel says so */
        r = cancel(cf, &q, AB_CANCEL_ENDED);
    ab_cancel_run_t c = {SV(q.thread), SV("conformance-never-ran"), {0}};
    ab_cancel_reply_t rep;
    ab_error_t err = AB_ERROR_INIT;
    if (r == CONF_PASS &&
        ab_conn_cancel_run(cf->c, &c, cf->doc, &rep, cf->timeout_ms, &err) != AB_NOT_FOUND)
        r = conf_fail(cf, "cancel_run of an unknown run answered %s, not not_found",
                      ab_status_name(err.code));
    return r;
}

conf_result_t conf_check_resume_run(conf_t *cf)
{
    char thread[96], key[96];
    conf_id(cf, thread, sizeof(thread), "thread");
    conf_id(cf, key, sizeof(key), "key");
    ab_kv_t kv[2] = {{"interruptId", 11, {.type = AB_VAL_STR, .len = 2, .u.s = "i1"}},
                     {"status", 6, {.type = AB_VAL_STR, .len = 9, .u.s = "cancelled"}}};
    ab_val_t entry = {.type = AB_VAL_MAP, .len = 2, .u.pairs = kv};
    ab_val_t resume = {.type = AB_VAL_ARRAY, .len = 1, .u.items = &entry};
    ab_resume_run_t rr = {SV(thread), SV("r1"), &resume, SV(key), SV("conf-agent"), {0}, NULL};
    if (!announced(cf, AB_CAP_RESUME_RUN)) {
        ab_msg_t m = {.op = AB_OP_RESUME_RUN, .u.resume_run = rr};
        return refused(cf, &m, AB_CAP_RESUME_RUN);
    }
    /* a thread with no interrupted run has nothing to resume: conflict on `run` */
    ab_run_accepted_t a;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_resume_run(cf->c, &rr, cf->doc, &a, cf->timeout_ms, &err);
    if (st != AB_CONFLICT || strcmp(err.field, "run") != 0)
        return conf_fail(cf,
                         "resume_run of a run that was never interrupted answered %s (field "
                         "%s), not conflict on run",
                         ab_status_name(st), err.field);
    return CONF_PASS;
}

/*
 * dispatch.c - the client side of run dispatch for a caller (docs/PROTOCOL.md
 * 7.12 - 7.16): start_run, resume_run, cancel_run and requests. The worker
 * side (assign, run_cancel, decline) is worker.c.
 *
 * Invariants:
 *  1. Each call is one request and its one answer (ab_conn_request()); a
 *     reply of another op than the one due is AB_INVALID_ENVELOPE.
 *  2. The request is encoded before the answer is decoded into @p doc, so
 *     a request tree may live in @p doc too.
 */
#include "agentbus/client.h"

static ab_status_t call(ab_conn_t *c, ab_msg_t *req, ab_op_t want, ab_doc_t *doc, ab_msg_t *m,
                        int timeout_ms, ab_error_t *err)
{
    ab_status_t st = ab_conn_request(c, req, NULL, 0, doc, m, timeout_ms, err);
    if (st == AB_OK && m->op != want)
        st = ab_error_set(err, AB_INVALID_ENVELOPE, "op", "expected %s, got %s", ab_op_name(want),
                          ab_op_name(m->op));
    return st;
}

ab_status_t ab_conn_start_run(ab_conn_t *c, const ab_start_run_t *req, ab_doc_t *doc,
                              ab_run_accepted_t *out, int timeout_ms, ab_error_t *err)
{
    ab_msg_t r = {.op = AB_OP_START_RUN, .u.start_run = *req}, m;
    ab_status_t st = call(c, &r, AB_OP_RUN_ACCEPTED, doc, &m, timeout_ms, err);
    if (st == AB_OK)
        *out = m.u.run_accepted;
    return st;
}

ab_status_t ab_conn_resume_run(ab_conn_t *c, const ab_resume_run_t *req, ab_doc_t *doc,
                               ab_run_accepted_t *out, int timeout_ms, ab_error_t *err)
{
    ab_msg_t r = {.op = AB_OP_RESUME_RUN, .u.resume_run = *req}, m;
    ab_status_t st = call(c, &r, AB_OP_RUN_ACCEPTED, doc, &m, timeout_ms, err);
    if (st == AB_OK)
        *out = m.u.run_accepted;
    return st;
}

ab_status_t ab_conn_cancel_run(ab_conn_t *c, const ab_cancel_run_t *req, ab_doc_t *doc,
                               ab_cancel_reply_t *out, int timeout_ms, ab_error_t *err)
{
    ab_msg_t r = {.op = AB_OP_CANCEL_RUN, .u.cancel_run = *req}, m;
    ab_status_t st = call(c, &r, AB_OP_CANCEL_REPLY, doc, &m, timeout_ms, err);
    if (st == AB_OK)
        *out = m.u.cancel_reply;
    return st;
}

ab_status_t ab_conn_abandon_run(ab_conn_t *c, const ab_abandon_run_t *req, ab_doc_t *doc,
                                ab_abandoned_t *out, int timeout_ms, ab_error_t *err)
{
    ab_msg_t r = {.op = AB_OP_ABANDON_RUN, .u.abandon_run = *req}, m;
    ab_status_t st = call(c, &r, AB_OP_ABANDONED, doc, &m, timeout_ms, err);
    if (st == AB_OK)
        *out = m.u.abandoned;
    return st;
}

ab_status_t ab_conn_requests(ab_conn_t *c, const ab_requests_t *req, ab_doc_t *doc,
                             ab_requests_reply_t *out, int timeout_ms, ab_error_t *err)
{
    ab_msg_t r = {.op = AB_OP_REQUESTS, .u.requests = *req}, m;
    ab_status_t st = call(c, &r, AB_OP_REQUESTS_REPLY, doc, &m, timeout_ms, err);
    if (st == AB_OK)
        *out = m.u.requests_reply;
    return st;
}

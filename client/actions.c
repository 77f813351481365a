/*
 * actions.c - the client side of workers and action calls for a caller
 * (docs/PROTOCOL.md 7.10, 7.11): listing workers and invoking an action.
 * The worker side is worker.c.
 *
 * Invariants:
 *  1. An action's payload is parsed from JSON text into a document of its
 *     own, so the reply decoded into the caller's @p doc cannot overwrite it
 *     before the request is encoded.
 */
#include "agentbus/client.h"
#include "agentbus/json.h"

#include <stdio.h>
#include <string.h>

ab_status_t ab_conn_workers(ab_conn_t *c, ab_doc_t *doc, ab_workers_reply_t *out, int timeout_ms,
                            ab_error_t *err)
{
    ab_msg_t req = {.op = AB_OP_WORKERS}, m;
    ab_status_t st = ab_conn_request(c, &req, NULL, 0, doc, &m, timeout_ms, err);
    if (st == AB_OK && m.op != AB_OP_WORKERS_REPLY)
        st = ab_error_set(err, AB_INVALID_ENVELOPE, "op", "expected workers_reply, got %s",
                          ab_op_name(m.op));
    if (st == AB_OK)
        *out = m.u.workers_reply;
    return st;
}

/* Parse @p json into a tree of @p pdoc (invariant 1). */
static ab_status_t payload_of(const char *json, ab_doc_t *pdoc, ab_buf_t *mp, const ab_val_t **out,
                              ab_error_t *err)
{
    ab_limits_t lim = ab_limits_default();
    ab_status_t st = ab_json_to_msgpack(json, strlen(json), lim.max_depth, lim.max_header_bytes,
                                        AB_INVALID_ARGUMENT, mp, err);
    if (st == AB_OK)
        st = ab_doc_parse(pdoc, mp->data, mp->len, lim.max_header_bytes, lim.max_depth,
                          AB_INVALID_ARGUMENT, out, err);
    if (st != AB_OK && err && err->field[0] == '\0')
        snprintf(err->field, sizeof(err->field), "payload");
    return st;
}

ab_status_t ab_conn_invoke_send(ab_conn_t *c, const char *agent, const char *action,
                                const char *payload_json, const char *thread, uint32_t timeout_ms,
                                uint64_t *cid, ab_error_t *err)
{
    if (agent == NULL || action == NULL)
        return ab_error_set(err, AB_INVALID_ARGUMENT, agent ? "action" : "agent", "missing");
    ab_doc_t *pdoc = NULL;
    ab_buf_t mp = AB_BUF_INIT;
    ab_msg_t req = {.op = AB_OP_INVOKE_ACTION};
    req.u.invoke_action = (ab_invoke_action_t){{agent, strlen(agent)},
                                               {action, strlen(action)},
                                               NULL,
                                               {thread, thread ? strlen(thread) : 0},
                                               timeout_ms};
    ab_status_t st = payload_json ? ab_doc_new(&pdoc) : AB_OK;
    if (st != AB_OK)
        st = ab_error_set(err, st, "", "out of memory");
    else if (payload_json)
        st = payload_of(payload_json, pdoc, &mp, &req.u.invoke_action.payload, err);
    if (st == AB_OK)
        st = ab_conn_send(c, &req, NULL, 0, cid, err);
    ab_doc_destroy(&pdoc);
    ab_buf_free(&mp);
    return st;
}

ab_status_t ab_conn_invoke_action(ab_conn_t *c, const char *agent, const char *action,
                                  const char *payload_json, const char *thread, uint32_t timeout_ms,
                                  ab_doc_t *doc, ab_action_reply_t *out, ab_error_t *err)
{
    uint64_t cid = 0;
    ab_msg_t m;
    /* the broker itself answers `timeout` when the call's time is up */
    int wait = (int)(timeout_ms ? timeout_ms : AB_ACTION_TIMEOUT_MS_DEFAULT) + 5000;
    ab_status_t st =
        ab_conn_invoke_send(c, agent, action, payload_json, thread, timeout_ms, &cid, err);
    if (st == AB_OK)
        st = ab_conn_recv(c, cid, doc, &m, wait, err);
    if (st == AB_OK && m.op != AB_OP_ACTION_REPLY)
        st = ab_error_set(err, AB_INVALID_ENVELOPE, "op", "expected action_reply, got %s",
                          ab_op_name(m.op));
    if (st == AB_OK)
        *out = m.u.action_reply;
    return st;
}

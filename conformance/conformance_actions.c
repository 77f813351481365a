/*
 * conformance_actions.c - the conformance check of workers and action calls
 * (PROTOCOL.md 7.10, 7.11, capability `actions`): where the capability is
 * announced, a connection of the suite serves a fresh agent and answers the
 * call another connection invokes; an action nobody ever served is
 * `unsupported`. Where it is not announced, invoke_action must fail with a
 * typed error, never succeed silently.
 *
 * Invariants:
 *  1. The agent and action names are fresh (conf_id()), so workers of the
 *     broker under test are never called.
 *  2. The worker connection reads with cid 0 (any): the action_call is
 *     unsolicited.
 */
#include "conformance.h"

#include <stdio.h>
#include <string.h>

/* Serve agent @p agent with action "conf-act" on @p w. */
static conf_result_t serve(conf_t *cf, ab_conn_t *w, const char *agent)
{
    static const ab_str_t act = {"conf-act", 8};
    ab_served_agent_t a = {{agent, strlen(agent)}, 1, &act, 1};
    ab_msg_t m = {.op = AB_OP_SERVE}, r;
    m.u.serve = (ab_serve_t){{"conformance", 11}, &a, 1, 0};
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_request(w, &m, NULL, 0, cf->tmp, &r, cf->timeout_ms, &err);
    if (st != AB_OK || r.op != AB_OP_SERVED)
        return conf_fail(cf, "serve answered %s: %s", ab_status_name(st), err.message);
    if (r.u.served.worker_id.len == 0 || r.u.served.lease_ms < 1)
        return conf_fail(cf, "served has an empty worker_id or a zero lease");
    return CONF_PASS;
}

/* Send invoke_action of (@p agent, @p action) on cf->c; its cid in *cid. */
static conf_result_t invoke(conf_t *cf, const char *agent, const char *action, uint64_t *cid)
{
    ab_msg_t m = {.op = AB_OP_INVOKE_ACTION};
    m.u.invoke_action.agent = (ab_str_t){agent, strlen(agent)};
    m.u.invoke_action.action = (ab_str_t){action, strlen(action)};
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_send(cf->c, &m, NULL, 0, cid, &err) != AB_OK)
        return conf_fail(cf, "cannot send invoke_action: %s", err.message);
    return CONF_PASS;
}

/* On worker @p w: take the action_call and answer it with result 7. */
static conf_result_t answer_call(conf_t *cf, ab_conn_t *w)
{
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_recv(w, 0, cf->tmp, &m, cf->timeout_ms, &err);
    if (st != AB_OK || m.op != AB_OP_ACTION_CALL)
        return conf_fail(cf, "the worker got %s (%s) instead of action_call", ab_op_name(m.op),
                         ab_status_name(st));
    if (m.cid != 0 || m.u.action_call.call == 0)
        return conf_fail(cf, "action_call has cid %llu and call %llu (want 0 and >= 1)",
                         (unsigned long long)m.cid, (unsigned long long)m.u.action_call.call);
    ab_val_t seven = {.type = AB_VAL_INT, .u.i = 7};
    ab_msg_t res = {.op = AB_OP_ACTION_RESULT}, ack;
    res.u.action_result = (ab_action_result_t){m.u.action_call.call, &seven, NULL};
    st = ab_conn_request(w, &res, NULL, 0, cf->tmp, &ack, cf->timeout_ms, &err);
    if (st != AB_OK || ack.op != AB_OP_ACTION_ACK || !ack.u.action_ack.delivered)
        return conf_fail(cf, "action_result was not acknowledged as delivered (%s)",
                         ab_status_name(st));
    return CONF_PASS;
}

/* Where `actions` is announced: a call is routed to the suite's worker and answered. */
static conf_result_t routed(conf_t *cf)
{
    char agent[96];
    conf_id(cf, agent, sizeof(agent), "agent");
    ab_error_t err = AB_ERROR_INIT;
    ab_conn_t *w = conf_connect(cf, NULL, 0, &err);
    if (w == NULL)
        return CONF_FAIL;
    uint64_t cid = 0;
    ab_msg_t m;
    conf_result_t r = serve(cf, w, agent);
    if (r == CONF_PASS)
        r = invoke(cf, agent, "conf-act", &cid);
    if (r == CONF_PASS)
        r = answer_call(cf, w);
    ab_status_t st =
        r == CONF_PASS ? ab_conn_recv(cf->c, cid, cf->doc, &m, cf->timeout_ms, &err) : AB_OK;
    if (r == CONF_PASS &&
        (st != AB_OK || m.op != AB_OP_ACTION_REPLY || !m.u.action_reply.result ||
         m.u.action_reply.result->type != AB_VAL_INT || m.u.action_reply.result->u.i != 7))
        r = conf_fail(cf, "the caller did not get action_reply with result 7 (%s)",
                      ab_status_name(st));
    if (r == CONF_PASS)
        r = invoke(cf, agent, "conf-never-served", &cid);
    if (r == CONF_PASS &&
        ab_conn_recv(cf->c, cid, cf->doc, &m, cf->timeout_ms, &err) != AB_UNSUPPORTED)
        r = conf_fail(cf, "an action no worker ever served answered %s, not unsupported",
                      ab_status_name(err.code));
    ab_conn_destroy(&w);
    return r;
}

conf_result_t conf_check_actions(conf_t *cf)
{
    size_t n = 0;
    const ab_cap_t *caps = ab_conn_caps(cf->c, &n); /* before n is read */
    ab_cap_state_t s = ab_caps_lookup(caps, n, AB_CAP_ACTIONS);
    if (s != AB_CAP_UNSUPPORTED && s != AB_CAP_UNKNOWN)
        return routed(cf);
    char agent[96];
    conf_id(cf, agent, sizeof(agent), "agent");
    uint64_t cid = 0;
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    conf_result_t r = invoke(cf, agent, "conf-act", &cid);
    ab_status_t st =
        r == CONF_PASS ? ab_conn_recv(cf->c, cid, cf->doc, &m, cf->timeout_ms, &err) : AB_OK;
    if (r == CONF_PASS && (st == AB_OK || m.op != AB_OP_ERROR))
        r = conf_fail(cf, "actions is not announced but invoke_action answered %s",
                      ab_status_name(st));
    return r;
}

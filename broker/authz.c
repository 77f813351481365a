/*
 * authz.c - which role each request needs, on which thread (authz.h;
 * docs/PROTOCOL.md 1.2 "Authorization", docs/OPERATIONS.md "The access
 * file").
 *
 * Invariants:
 *  1. The answer depends on the authenticated key's principal and on the
 *     request's op and thread ids alone, and is decided before the request
 *     reaches anything that knows what exists: a refusal reads the same
 *     whether or not the thread, run or request is there.
 *  2. Nothing a request says about itself (ids of workers, names, input,
 *     metadata) grants anything: thread ids only select which prefix must
 *     cover them.
 *  3. A request that names no thread but reaches every thread (the
 *     firehose replay, an action call without a thread) needs its role on
 *     every thread; `requests` needs `control` somewhere and lists only the
 *     threads it covers (dispatch_ops.c), `threads` likewise with `observe`
 *     (threads_cmd.c).
 */
#include "authz.h"

#include <stdio.h>
#include <string.h>

static bool refuse(const ab__principal_t *p, ab__role_t role, const char *what, ab_str_t thread,
                   ab_error_t *e)
{
    const char *who = p ? ab__principal_name(p) : "";
    if (p == NULL)
        ab_error_set(e, AB_UNAUTHORIZED, "",
                     "this connection's key is no longer in the broker's access table");
    else if (thread.ptr != NULL)
        ab_error_set(e, AB_UNAUTHORIZED, "thread", "key '%s' may not %s on thread '%.*s'", who,
                     what, (int)(thread.len > 200 ? 200 : thread.len), thread.ptr);
    else
        ab_error_set(e, AB_UNAUTHORIZED, "", "key '%s' may not %s", who, what);
    if (p != NULL)
        ab_error_detail_str(e, "role", ab__role_name(role));
    return false;
}

static bool need(const ab__principal_t *p, ab__role_t role, ab_str_t thread, const char *what,
                 ab_error_t *e)
{
    if (ab__access_may(p, role, thread.ptr, thread.len))
        return true;
    return refuse(p, role, what, thread, e);
}

static bool need_all(const ab__principal_t *p, ab__role_t role, const char *what, ab_error_t *e)
{
    if (ab__access_may_all(p, role))
        return true;
    return refuse(p, role, what, (ab_str_t){NULL, 0}, e);
}

static bool need_any(const ab__principal_t *p, ab__role_t role, const char *what, ab_error_t *e)
{
    if (ab__access_has(p, role))
        return true;
    return refuse(p, role, what, (ab_str_t){NULL, 0}, e);
}

static bool heads(const ab__principal_t *p, const ab_heads_t *h, ab_error_t *e)
{
    if (h->thread.ptr != NULL)
        return need(p, AB__ROLE_OBSERVE, h->thread, "read heads", e);
    for (size_t i = 0; i < h->nruns; i++)
        if (!need(p, AB__ROLE_OBSERVE, h->runs[i].thread, "read heads", e))
            return false;
    return true;
}

static bool replay(const ab__principal_t *p, const ab_replay_t *r, ab_error_t *e)
{
    if (r->scope == AB_REPLAY_ALL)
        return need_all(p, AB__ROLE_ADMIN, "replay the whole bus (admin)", e);
    return need(p, AB__ROLE_OBSERVE, r->thread, "replay", e);
}

static bool invoke(const ab__principal_t *p, const ab_invoke_action_t *a, ab_error_t *e)
{
    if (a->thread.ptr != NULL)
        return need(p, AB__ROLE_CONTROL, a->thread, "invoke actions", e);
    return need_all(p, AB__ROLE_CONTROL, "invoke an action without a thread", e);
}

bool ab__authorize(const ab__principal_t *p, const ab_msg_t *m, ab_error_t *e)
{
    if (p == NULL)
        return refuse(NULL, AB__ROLE_ADMIN, "", (ab_str_t){NULL, 0}, e);
    switch (m->op) {
    case AB_OP_HELLO:
    case AB_OP_PING:
    case AB_OP_STATS:  /* bus-wide counts only: no thread or run is named */
    case AB_OP_CREDIT: /* the connection's own replays */
    case AB_OP_CANCEL: /* its own replays and action calls */
    case AB_OP_PUBLISH: /* each event is checked (ab__authorize_event) */ return true;
    case AB_OP_CLAIM: return need(p, AB__ROLE_PUBLISH, m->u.claim.thread, "claim runs", e);
    case AB_OP_HEADS: return heads(p, &m->u.heads, e);
    case AB_OP_REPLAY: return replay(p, &m->u.replay, e);
    case AB_OP_SNAPSHOT:
        return need(p, AB__ROLE_OBSERVE, m->u.snapshot.thread, "read snapshots", e);
    case AB_OP_SERVE:
    case AB_OP_DECLINE:
    case AB_OP_ACTION_RESULT:
    case AB_OP_LEAVE: return need_any(p, AB__ROLE_SERVE, "serve agents (be a worker)", e);
    case AB_OP_WORKERS: return need_any(p, AB__ROLE_CONTROL, "list workers", e);
    case AB_OP_INVOKE_ACTION: return invoke(p, &m->u.invoke_action, e);
    case AB_OP_START_RUN: return need(p, AB__ROLE_CONTROL, m->u.start_run.thread, "start runs", e);
    case AB_OP_CANCEL_RUN:
        return need(p, AB__ROLE_CONTROL, m->u.cancel_run.thread, "cancel runs", e);
    case AB_OP_RESUME_RUN:
        return need(p, AB__ROLE_CONTROL, m->u.resume_run.thread, "resume runs", e);
    case AB_OP_ABANDON_RUN:
        return need(p, AB__ROLE_CONTROL, m->u.abandon_run.thread, "abandon runs", e);
    case AB_OP_REQUESTS: /* the answer lists only the threads it may control */
        return need_any(p, AB__ROLE_CONTROL, "list run requests", e);
    case AB_OP_THREADS: /* the answer lists only the threads it may observe (threads_cmd.c) */
        return need_any(p, AB__ROLE_OBSERVE, "list threads", e);
    default: return true; /* not a request: answered unsupported by the caller */
    }
}

bool ab__authorize_event(const ab__principal_t *p, ab_str_t thread, ab_error_t *e)
{
    return need(p, AB__ROLE_PUBLISH, thread, "publish", e);
}

void ab__access_describe(const ab__principal_t *p, ab__access_view_t *w)
{
    uint32_t nr = 0;
    for (int r = 0; r < AB__ROLES; r++) {
        bool all;
        const char *const *pfx;
        const uint16_t *lens;
        size_t n;
        ab__access_grant(p, (ab__role_t)r, &all, &pfx, &lens, &n);
        if (!all && n == 0)
            continue;
        ab_kv_t *kv = &w->roles[nr++];
        kv->key = ab__role_name((ab__role_t)r);
        kv->klen = (uint32_t)strlen(kv->key);
        if (all) {
            kv->val = (ab_val_t){.type = AB_VAL_BOOL, .u.b = true};
            continue;
        }
        for (size_t i = 0; i < n; i++)
            w->items[r][i] = (ab_val_t){.type = AB_VAL_STR, .len = lens[i], .u.s = pfx[i]};
        kv->val = (ab_val_t){.type = AB_VAL_ARRAY, .len = (uint32_t)n, .u.items = w->items[r]};
    }
    const char *name = ab__principal_name(p);
    w->top[0] = (ab_kv_t){.key = "name",
                          .klen = 4,
                          .val = {.type = AB_VAL_STR, .len = (uint32_t)strlen(name), .u.s = name}};
    w->top[1] = (ab_kv_t){
        .key = "roles", .klen = 5, .val = {.type = AB_VAL_MAP, .len = nr, .u.pairs = w->roles}};
    w->v = (ab_val_t){.type = AB_VAL_MAP, .len = 2, .u.pairs = w->top};
}

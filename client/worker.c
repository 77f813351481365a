/*
 * worker.c - a worker connection: serve agents and their actions, answer
 * action calls, keep the lease (agentbus/worker.h).
 *
 * Invariants:
 *  1. After `served`, every message is read by ab_worker_run() with cid 0
 *     (any), so an unsolicited action_call is never discarded while the
 *     worker waits for something else; nothing after serve() waits for a
 *     particular reply.
 *  2. Each action call gets exactly one action_result.
 *  3. Something is sent at least every lease / 3 (a ping when idle), while
 *     the broker is connected (invariant 7).
 *  4. The agents to serve are copies, owned by the worker.
 *  5. A pong from another broker instance than the one the worker served
 *     (the broker restarted and forgot it, PROTOCOL.md 7.10) makes it send
 *     `serve` again, without waiting; its `served` updates id and lease and
 *     only then makes that instance the served one. Until then every such
 *     pong sends `serve` again, unless one is outstanding (serve_cid) to
 *     the same instance for less than timeout_ms: a retryable refusal, a
 *     send that could not go or a lost answer are retried at the next pong
 *     (every lease / 3); a refusal that is not retryable is also returned
 *     by ab_worker_run().
 *  6. Instances are kept whole (heap copies with their length): the
 *     protocol bounds them by nothing but the header size.
 *  7. No send waits past the call's deadline (ab_worker_run(): its timeout;
 *     the others: timeout_ms). A ping that cannot go is tried again at the
 *     next ab_worker_run(); an answer that cannot go is counted undelivered.
 *  8. Each decline sent is kept (with its cid) until its answer: `declined` forgets it; an
 *     `error` is a refusal, counted (decline_refused): a retryable one is sent again
 *     DECLINE_RETRY_MS later by ab_worker_run(), any other forgotten (the broker's
 *     not_found: no such assignment of this worker's any more). A pong of another broker
 *     instance forgets
 *     them all (the restart put back what was assigned), so does DECLINE_FORGET_MS without
 *     an answer.
 */
#include "agentbus/worker.h"

#include "ab_common.h"
#include "agentbus/client.h"
#include "agentbus/ids.h"
#include "agentbus/json.h"
#include "conn_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEAVE_WAIT_MS     500   /* how long destroy waits for `left` */
#define DECLINE_RETRY_MS  100   /* a decline refused retryably is sent again this much later */
#define DECLINE_FORGET_MS 60000 /* a decline not answered this long is forgotten */

typedef struct agent {
    char *name;
    uint32_t capacity;
    char **actions;
    size_t nactions;
} agent_t;

/* A decline sent and not answered yet, or refused retryably and to send again (invariant 8). */
typedef struct decline {
    uint64_t cid; /* the decline sent; 0 = to send again at at_ms */
    uint64_t request, epoch;
    char *reason; /* what was sent (cut), owned; NULL for none */
    size_t reason_len;
    int64_t at_ms; /* when it was sent, or when to send it again */
} decline_t;

struct ab_worker {
    ab_conn_t *c;
    ab_doc_t *doc;
    char name[AB_WORKER_NAME_MAX + 1];
    uint32_t lease_asked;
    int timeout_ms;
    agent_t *agents;
    size_t nagents, cap_agents;
    ab_action_fn fn;
    void *ud;
    ab_assign_fn on_assign;
    void *assign_ud;
    ab_run_cancel_fn on_cancel;
    void *cancel_ud;
    char id[65];
    char *instance; /* the broker instance that answered `served` last (invariant 6) */
    size_t instance_len;
    char *pending; /* the instance a `serve` is outstanding to (invariant 5) */
    size_t pending_len;
    uint64_t serve_cid; /* that `serve`'s cid; 0 = none outstanding */
    int64_t serve_sent_ms;
    uint32_t lease_ms;
    int64_t last_sent_ms;
    ab_buf_t result;     /* the callback's JSON text */
    ab_buf_t mp;         /* ... as msgpack */
    ab_doc_t *rdoc;      /* ... as a tree */
    decline_t *declines; /* invariant 8 */
    size_t ndeclines, cap_declines;
    ab_worker_stats_t stats;
};

static void free_agent(agent_t *a)
{
    for (size_t i = 0; i < a->nactions; i++)
        free(a->actions[i]);
    free(a->actions);
    free(a->name);
}

ab_status_t ab_worker_new(ab_worker_t **out, const char *endpoint, const ab_worker_opts_t *opts,
                          ab_error_t *err)
{
    if (out == NULL || opts == NULL || opts->name == NULL || opts->name[0] == '\0' ||
        strlen(opts->name) > AB_WORKER_NAME_MAX)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "name",
                            "a worker needs a name of 1 to %d bytes", AB_WORKER_NAME_MAX);
    ab_worker_t *w = calloc(1, sizeof(*w));
    if (w == NULL || ab_doc_new(&w->doc) != AB_OK || ab_doc_new(&w->rdoc) != AB_OK) {
        ab_worker_destroy(&w);
        return ab_error_set(err, AB_NOMEM, "", "out of memory");
    }
    snprintf(w->name, sizeof(w->name), "%s", opts->name);
    w->lease_asked = opts->lease_ms;
    w->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : AB_CONN_TIMEOUT_DEFAULT;
    ab_conn_opts_t co = {.client_name = "agentbus-worker", .timeout_ms = w->timeout_ms};
    ab_status_t st = ab_conn_new(&w->c, endpoint, &co, err);
    if (st != AB_OK) {
        ab_worker_destroy(&w);
        return st;
    }
    *out = w;
    return AB_OK;
}

void ab_worker_destroy(ab_worker_t **wp)
{
    if (wp == NULL || *wp == NULL)
        return;
    ab_worker_t *w = *wp;
    if (w->id[0] != '\0') { /* registered: leave now, so nothing more is assigned to it */
        ab_msg_t m = {.op = AB_OP_LEAVE}, r;
        if (ab_conn_request(w->c, &m, NULL, 0, w->doc, &r, LEAVE_WAIT_MS, NULL) != AB_OK)
            r.op = AB_OP_NONE_; /* not answered: the broker drops it when its lease lapses */
    }
    for (size_t i = 0; i < w->nagents; i++)
        free_agent(&w->agents[i]);
    free(w->agents);
    ab_conn_destroy(&w->c);
    ab_doc_destroy(&w->doc);
    ab_doc_destroy(&w->rdoc);
    ab_buf_free(&w->result);
    ab_buf_free(&w->mp);
    free(w->instance);
    free(w->pending);
    for (size_t i = 0; i < w->ndeclines; i++)
        free(w->declines[i].reason);
    free(w->declines);
    free(w);
    *wp = NULL;
}

static ab_status_t check_agent(const char *agent, uint32_t capacity, const char *const *actions,
                               size_t n, ab_error_t *err)
{
    if (agent == NULL || ab_id_check(agent, strlen(agent), 0, "agent", err) != AB_OK)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "agent", "not a valid agent name");
    if (capacity < 1 || capacity > AB_SERVE_CAPACITY_MAX)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "capacity", "capacity must be 1 ... %d",
                            AB_SERVE_CAPACITY_MAX);
    if (n > AB_SERVE_ACTIONS_MAX)
        return ab_error_set(err, AB_TOO_LARGE, "actions", "at most %d actions per agent",
                            AB_SERVE_ACTIONS_MAX);
    for (size_t i = 0; i < n; i++)
        if (actions[i] == NULL || actions[i][0] == '\0' || strlen(actions[i]) > AB_ACTION_ID_MAX)
            return ab_error_set(err, AB_INVALID_ARGUMENT, "actions",
                                "action %zu must be 1 to %d bytes", i, AB_ACTION_ID_MAX);
    return AB_OK;
}

ab_status_t ab_worker_add_agent(ab_worker_t *w, const char *agent, uint32_t capacity,
                                const char *const *actions, size_t nactions, ab_error_t *err)
{
    ab_status_t st = check_agent(agent, capacity, actions, nactions, err);
    if (st != AB_OK)
        return st;
    if (w->nagents >= AB_SERVE_AGENTS_MAX)
        return ab_error_set(err, AB_TOO_LARGE, "agents", "at most %d agents per worker",
                            AB_SERVE_AGENTS_MAX);
    agent_t *v = ab__grow(w->agents, &w->cap_agents, w->nagents + 1, sizeof(*v), 4);
    if (v == NULL)
        return ab_error_set(err, AB_NOMEM, "", "out of memory");
    w->agents = v;
    agent_t a = {.name = strdup(agent), .capacity = capacity};
    a.actions = nactions ? calloc(nactions, sizeof(*a.actions)) : NULL;
    bool ok = a.name != NULL && (nactions == 0 || a.actions != NULL);
    for (size_t i = 0; ok && i < nactions; i++, a.nactions++)
        ok = (a.actions[i] = strdup(actions[i])) != NULL;
    if (!ok) {
        free_agent(&a);
        return ab_error_set(err, AB_NOMEM, "", "out of memory");
    }
    w->agents[w->nagents++] = a;
    return AB_OK;
}

void ab_worker_on_action(ab_worker_t *w, ab_action_fn fn, void *ud)
{
    w->fn = fn;
    w->ud = ud;
}

/* The `serve` request's agents, as views of the worker's copies. */
static ab_served_agent_t *served_agents(const ab_worker_t *w, ab_str_t **views)
{
    size_t nviews = 0;
    for (size_t i = 0; i < w->nagents; i++)
        nviews += w->agents[i].nactions;
    ab_served_agent_t *a = calloc(w->nagents ? w->nagents : 1, sizeof(*a));
    *views = calloc(nviews ? nviews : 1, sizeof(**views));
    if (a == NULL || *views == NULL) {
        free(a);
        free(*views);
        return NULL;
    }
    ab_str_t *v = *views;
    for (size_t i = 0; i < w->nagents; i++) {
        const agent_t *g = &w->agents[i];
        a[i] = (ab_served_agent_t){{g->name, strlen(g->name)}, g->capacity, v, g->nactions};
        for (size_t j = 0; j < g->nactions; j++)
            *v++ = (ab_str_t){g->actions[j], strlen(g->actions[j])};
    }
    return a;
}

/* Send `serve`; with @p reply, wait for `served` into it, else send it by @p deadline and
 * return at once with its cid in *@p cid (invariant 5). */
static ab_status_t send_serve(ab_worker_t *w, ab_msg_t *reply, uint64_t *cid, int64_t deadline,
                              ab_error_t *err)
{
    ab_str_t *views = NULL;
    ab_served_agent_t *agents = served_agents(w, &views);
    if (agents == NULL)
        return ab_error_set(err, AB_NOMEM, "", "out of memory");
    ab_msg_t req = {.op = AB_OP_SERVE};
    req.u.serve = (ab_serve_t){{w->name, strlen(w->name)}, agents, w->nagents, w->lease_asked};
    ab_status_t st = reply ? ab_conn_request(w->c, &req, NULL, 0, w->doc, reply, w->timeout_ms, err)
                           : ab__conn_send_by(w->c, &req, NULL, 0, cid, deadline, err);
    free(agents);
    free(views);
    return st;
}

static bool same_instance(const char *s, size_t len, ab_str_t p)
{
    return s != NULL && len == p.len && memcmp(s, p.ptr, len) == 0;
}

/* Copy instance @p p into *@p dst (invariant 6). */
static ab_status_t keep_instance(char **dst, size_t *len, ab_str_t p, ab_error_t *err)
{
    char *s = malloc(p.len + 1);
    if (s == NULL)
        return ab_error_set(err, AB_NOMEM, "", "out of memory");
    memcpy(s, p.ptr, p.len);
    s[p.len] = '\0';
    free(*dst);
    *dst = s;
    *len = p.len;
    return AB_OK;
}

/* `served`: the id and lease; the answer to an outstanding `serve` makes its
 * instance the served one (invariant 5). */
static void on_served(ab_worker_t *w, const ab_msg_t *m)
{
    const ab_served_t *s = &m->u.served;
    snprintf(w->id, sizeof(w->id), "%.*s", (int)s->worker_id.len, s->worker_id.ptr);
    w->lease_ms = s->lease_ms;
    if (w->serve_cid == 0 || m->cid != w->serve_cid)
        return;
    free(w->instance);
    w->instance = w->pending;
    w->instance_len = w->pending_len;
    w->pending = NULL;
    w->serve_cid = 0;
    w->stats.reserved++;
}

ab_status_t ab_worker_serve(ab_worker_t *w, ab_error_t *err)
{
    ab_msg_t m;
    ab_status_t st = send_serve(w, &m, NULL, 0, err);
    if (st == AB_OK && m.op != AB_OP_SERVED)
        st = ab_error_set(err, AB_INVALID_ENVELOPE, "op", "expected served, got %s",
                          ab_op_name(m.op));
    const char *inst = ab_conn_instance(w->c);
    if (st == AB_OK)
        st = keep_instance(&w->instance, &w->instance_len, (ab_str_t){inst, strlen(inst)}, err);
    if (st != AB_OK)
        return st;
    w->serve_cid = 0;
    on_served(w, &m);
    w->last_sent_ms = ab__mono_ms();
    return AB_OK;
}

/* Send @p m by @p deadline without waiting for its answer (invariants 1, 7); its cid in
 * *@p cid when not NULL. */
static ab_status_t send_async(ab_worker_t *w, const ab_msg_t *m, uint64_t *cid, int64_t deadline,
                              ab_error_t *err)
{
    ab_status_t st = ab__conn_send_by(w->c, m, NULL, 0, cid, deadline, err);
    if (st == AB_OK)
        w->last_sent_ms = ab__mono_ms();
    return st;
}

/* The callback's JSON text as a value tree (NULL for no result). */
static ab_status_t result_tree(ab_worker_t *w, const ab_val_t **out, ab_error_t *err)
{
    *out = NULL;
    if (w->result.len == 0)
        return AB_OK;
    ab_limits_t lim = ab_limits_default();
    ab_buf_reset(&w->mp);
    ab_status_t st = ab_json_to_msgpack((const char *)w->result.data, w->result.len, lim.max_depth,
                                        lim.max_header_bytes, AB_INVALID_ARGUMENT, &w->mp, err);
    if (st == AB_OK)
        st = ab_doc_parse(w->rdoc, w->mp.data, w->mp.len, lim.max_header_bytes, lim.max_depth,
                          AB_INVALID_ARGUMENT, out, err);
    return st;
}

/* Send an action_result by @p deadline; one that cannot go is undelivered (invariant 7). */
static ab_status_t send_result(ab_worker_t *w, const ab_msg_t *m, int64_t deadline, ab_error_t *err)
{
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t st = send_async(w, m, NULL, deadline, &e);
    if (st == AB_TIMEOUT) { /* the broker is gone or does not read: nobody gets it */
        w->stats.undelivered++;
        return AB_OK;
    }
    if (st != AB_OK && err != NULL && err->code == AB_OK)
        *err = e;
    return st;
}

/* Answer one call through the callback (invariant 2), by @p deadline (invariant 7). */
static ab_status_t on_call(ab_worker_t *w, const ab_action_call_t *call, int64_t deadline,
                           ab_error_t *err)
{
    ab_error_t e = AB_ERROR_INIT;
    const ab_val_t *result = NULL;
    ab_buf_reset(&w->result);
    w->stats.calls++;
    ab_status_t st = w->fn ? w->fn(w->ud, call, &w->result, &e)
                           : ab_error_set(&e, AB_UNSUPPORTED, "action",
                                          "this worker has no "
                                          "action handler");
    ab_error_t je = AB_ERROR_INIT;
    if (st == AB_OK && result_tree(w, &result, &je) != AB_OK)
        ab_error_set(&e, AB_INTERNAL, "result", "the action's result is not JSON: %s", je.message);
    if (st != AB_OK && e.code == AB_OK)
        ab_error_set(&e, st, "", "%s", ab_status_str(st));
    if (e.code != AB_OK)
        w->stats.failed++;
    ab_msg_t m = {.op = AB_OP_ACTION_RESULT};
    m.u.action_result = (ab_action_result_t){call->call, e.code == AB_OK ? result : NULL,
                                             e.code == AB_OK ? NULL : &e};
    return send_result(w, &m, deadline, err);
}

/* Send decline @p d by @p deadline; its cid and time go into it (invariant 8). */
static ab_status_t send_decline(ab_worker_t *w, decline_t *d, int64_t deadline, ab_error_t *err)
{
    ab_msg_t m = {.op = AB_OP_DECLINE};
    m.u.decline = (ab_decline_t){d->request, d->epoch, {d->reason, d->reason_len}};
    ab_status_t st = send_async(w, &m, &d->cid, deadline, err);
    if (st == AB_OK)
        d->at_ms = w->last_sent_ms;
    return st;
}

static ab_status_t decline_by(ab_worker_t *w, uint64_t request, uint64_t epoch, const char *reason,
                              int64_t deadline, ab_error_t *err)
{
    if (request == 0 || epoch == 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "request", "decline names an assignment");
    decline_t d = {.request = request, .epoch = epoch};
    /* the reason: at most AB_REASON_MAX bytes of valid UTF-8, no character split */
    d.reason_len = reason ? ab__utf8_cut(reason, strlen(reason), AB_REASON_MAX) : 0;
    decline_t *v = ab__grow(w->declines, &w->cap_declines, w->ndeclines + 1, sizeof(*v), 4);
    if (v != NULL)
        w->declines = v;
    if (v == NULL || (d.reason_len > 0 && (d.reason = malloc(d.reason_len)) == NULL))
        return ab_error_set(err, AB_NOMEM, "", "out of memory");
    if (d.reason != NULL)
        memcpy(d.reason, reason, d.reason_len);
    ab_status_t st = send_decline(w, &d, deadline, err);
    if (st != AB_OK) {
        free(d.reason);
        return st;
    }
    w->declines[w->ndeclines++] = d;
    w->stats.declined++;
    return AB_OK;
}

/* The kept decline sent with @p cid, or NULL (invariant 8). */
static decline_t *find_decline(ab_worker_t *w, uint64_t cid)
{
    for (size_t i = 0; cid != 0 && i < w->ndeclines; i++)
        if (w->declines[i].cid == cid)
            return &w->declines[i];
    return NULL;
}

static void forget_decline(ab_worker_t *w, decline_t *d)
{
    free(d->reason);
    *d = w->declines[--w->ndeclines];
}

static void forget_declines(ab_worker_t *w)
{
    while (w->ndeclines > 0)
        forget_decline(w, &w->declines[0]);
}

/* A decline refused (invariant 8): counted; a retryable refusal is sent again later, any
 * other forgotten (the assignment is not, or no longer, this worker's to give back). */
static void on_decline_refused(ab_worker_t *w, decline_t *d, const ab_error_t *e)
{
    w->stats.decline_refused++;
    if (e->retryable || ab_status_retryable(e->code)) {
        d->cid = 0;
        d->at_ms = ab__mono_ms() + DECLINE_RETRY_MS;
        return;
    }
    forget_decline(w, d);
}

/* Send again the declines refused retryably whose time has come, forget those never
 * answered (invariant 8); one that cannot go by @p deadline waits for the next run. */
static ab_status_t resend_declines(ab_worker_t *w, int64_t deadline, ab_error_t *err)
{
    int64_t now = ab__mono_ms();
    for (size_t i = 0; i < w->ndeclines;) {
        decline_t *d = &w->declines[i];
        if (d->cid != 0 && now - d->at_ms >= DECLINE_FORGET_MS) {
            forget_decline(w, d);
            continue;
        }
        i++;
        if (d->cid != 0 || now < d->at_ms)
            continue;
        ab_error_t e = AB_ERROR_INIT;
        ab_status_t st = send_decline(w, d, deadline, &e);
        if (st == AB_TIMEOUT)
            return AB_OK; /* the broker does not take it now: the next run tries again */
        if (st != AB_OK) {
            if (err != NULL && err->code == AB_OK)
                *err = e;
            return st;
        }
    }
    return AB_OK;
}

ab_status_t ab_worker_decline(ab_worker_t *w, uint64_t request, uint64_t epoch, const char *reason,
                              ab_error_t *err)
{
    return decline_by(w, request, epoch, reason, ab__mono_ms() + w->timeout_ms, err);
}

static ab_status_t on_assign(ab_worker_t *w, const ab_assign_t *a, int64_t deadline,
                             ab_error_t *err)
{
    w->stats.assigned++;
    if (w->on_assign == NULL)
        return decline_by(w, a->request, a->epoch, "this worker runs no agents", deadline, err);
    w->on_assign(w->assign_ud, w, a);
    return AB_OK;
}

static void on_run_cancel(ab_worker_t *w, const ab_run_cancel_t *c)
{
    w->stats.cancels++;
    if (w->on_cancel != NULL)
        w->on_cancel(w->cancel_ud, w, c);
}

void ab_worker_on_assign(ab_worker_t *w, ab_assign_fn fn, void *ud)
{
    w->on_assign = fn;
    w->assign_ud = ud;
}

void ab_worker_on_cancel(ab_worker_t *w, ab_run_cancel_fn fn, void *ud)
{
    w->on_cancel = fn;
    w->cancel_ud = ud;
}

/* A pong of another broker instance: serve it again (invariant 5). */
static ab_status_t on_pong(ab_worker_t *w, const ab_pong_t *p, ab_error_t *err)
{
    int64_t now = ab__mono_ms();
    if (w->instance == NULL || same_instance(w->instance, w->instance_len, p->instance))
        return AB_OK;
    forget_declines(w); /* the restart put back what was assigned (invariant 8) */
    if (w->serve_cid != 0 && same_instance(w->pending, w->pending_len, p->instance) &&
        now - w->serve_sent_ms < w->timeout_ms)
        return AB_OK; /* its answer may still come */
    ab_status_t st = keep_instance(&w->pending, &w->pending_len, p->instance, err);
    if (st != AB_OK)
        return st;
    ab_error_t e = AB_ERROR_INIT;
    w->serve_cid = 0;
    st = send_serve(w, NULL, &w->serve_cid, now, &e);
    if (st == AB_TIMEOUT)
        return AB_OK; /* could not go now: the next pong sends it */
    if (st != AB_OK) {
        if (err != NULL && err->code == AB_OK)
            *err = e;
        return st;
    }
    w->serve_sent_ms = w->last_sent_ms = now;
    return AB_OK;
}

/* An `error` answer: to a decline or the outstanding `serve`, a refusal (invariants 8, 5);
 * to anything else, one of our sends refused (a late result): nothing to do. */
static ab_status_t on_error(ab_worker_t *w, const ab_msg_t *m, const ab_error_t *e, ab_error_t *err)
{
    decline_t *d = find_decline(w, m->cid);
    if (d != NULL) {
        on_decline_refused(w, d, e);
        return AB_OK;
    }
    if (w->serve_cid == 0 || m->cid != w->serve_cid)
        return AB_OK;
    w->serve_cid = 0;
    if (e->retryable || ab_status_retryable(e->code))
        return AB_OK; /* the next pong sends it again */
    if (err != NULL && err->code == AB_OK)
        *err = *e;
    return e->code;
}

/* `declined`: that decline was answered (invariant 8). */
static void on_declined(ab_worker_t *w, uint64_t cid)
{
    decline_t *d = find_decline(w, cid);
    if (d != NULL)
        forget_decline(w, d);
}

/* One message that arrived (invariant 1). */
static ab_status_t on_message(ab_worker_t *w, const ab_msg_t *m, int64_t deadline, ab_error_t *err)
{
    switch (m->op) {
    case AB_OP_ACTION_CALL: return on_call(w, &m->u.action_call, deadline, err);
    case AB_OP_ACTION_ACK: w->stats.undelivered += !m->u.action_ack.delivered; return AB_OK;
    case AB_OP_SERVED: on_served(w, m); return AB_OK;
    case AB_OP_PONG: return on_pong(w, &m->u.pong, err);
    case AB_OP_ASSIGN: return on_assign(w, &m->u.assign, deadline, err);
    case AB_OP_RUN_CANCEL: on_run_cancel(w, &m->u.run_cancel); return AB_OK;
    case AB_OP_DECLINED: on_declined(w, m->cid); return AB_OK;
    default: return AB_OK;
    }
}

/* A ping when nothing was sent for a third of the lease (invariant 3); one that cannot
 * go by @p deadline (the broker is not connected) is tried again at the next run. */
static ab_status_t keep_lease(ab_worker_t *w, int64_t deadline, ab_error_t *err)
{
    if (!w->lease_ms || ab__mono_ms() - w->last_sent_ms < (int64_t)(w->lease_ms / 3))
        return AB_OK;
    ab_msg_t ping = {.op = AB_OP_PING};
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t st = send_async(w, &ping, NULL, deadline, &e);
    if (st == AB_OK)
        w->stats.pings++;
    else if (st != AB_TIMEOUT && err != NULL && err->code == AB_OK)
        *err = e;
    return st;
}

/* How long ab_worker_run() may wait for messages: up to @p timeout_ms, the next ping
 * (invariant 3) or the next decline to send again (invariant 8), whichever comes first. */
static int run_wait(const ab_worker_t *w, int timeout_ms)
{
    int64_t now = ab__mono_ms(), wait = timeout_ms;
    if (w->lease_ms && w->last_sent_ms + w->lease_ms / 3 - now < wait)
        wait = w->last_sent_ms + w->lease_ms / 3 - now;
    for (size_t i = 0; i < w->ndeclines; i++)
        if (w->declines[i].cid == 0 && w->declines[i].at_ms - now < wait)
            wait = w->declines[i].at_ms - now;
    return wait > 0 ? (int)wait : 0;
}

ab_status_t ab_worker_run(ab_worker_t *w, int timeout_ms, ab_error_t *err)
{
    int64_t now = ab__mono_ms(), deadline = now + (timeout_ms > 0 ? timeout_ms : 0);
    ab_status_t st = keep_lease(w, deadline, err);
    if (st != AB_OK && st != AB_TIMEOUT) /* a timeout: read what came meanwhile, if anything */
        return st;
    st = resend_declines(w, deadline, err);
    if (st != AB_OK)
        return st;
    int wait = run_wait(w, timeout_ms);
    for (bool first = true;; first = false) {
        ab_msg_t m = {.op = AB_OP_NONE_};
        ab_error_t e = AB_ERROR_INIT;
        st = ab_conn_recv(w->c, 0, w->doc, &m, first ? (wait > 0 ? wait : 1) : 1, &e);
        if (st == AB_TIMEOUT)
            return AB_OK;
        if (st != AB_OK && m.op == AB_OP_ERROR)
            st = on_error(w, &m, &e, err);
        else if (st != AB_OK) {
            if (err)
                *err = e;
            return st;
        } else
            st = on_message(w, &m, deadline, err);
        if (st != AB_OK)
            return st;
    }
}

const char *ab_worker_id(const ab_worker_t *w)
{
    return w->id;
}

uint32_t ab_worker_lease_ms(const ab_worker_t *w)
{
    return w->lease_ms;
}

ab_worker_stats_t ab_worker_stats(const ab_worker_t *w)
{
    return w->stats;
}

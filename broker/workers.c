/*
 * workers.c - the registry of workers and the routing of action calls
 * (workers.h; docs/PROTOCOL.md 7.10, 7.11). Command thread only.
 *
 * Invariants:
 *  1. A worker is one ROUTER identity. Its registration (name, agents,
 *     action ids) is one allocation holding copies of every string, so it
 *     lives independently of the request it came in.
 *  2. Every open call names its caller (identity, cid, v) and its worker (by
 *     the registration's sequence number, which never repeats); each ends
 *     exactly once: with the worker's result, a timeout, the caller's cancel,
 *     the worker's loss, or the broker's stop. Its caller gets one answer.
 *  3. Every `action_result` is acknowledged; delivered=false when its call
 *     had already ended.
 *  4. Bounds hold before anything is allocated: workers, registration
 *     bytes, calls in total and per worker, remembered (agent, action) pairs.
 *  5. due_ms is never later than the earliest lease end or call deadline:
 *     a new lease or call lowers it, renewals only move deadlines later. So
 *     ab__workers_tick(), called before every poll of the command loop,
 *     looks at the workers and calls only once something may be due.
 */
#include "workers.h"

#include "ab_common.h"
#include "internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDENT_MAX 255 /* a ROUTER identity: 1..255 bytes */

typedef struct worker {
    uint8_t ident[IDENT_MAX];
    size_t ident_len;
    uint64_t seq;   /* registration number, >= 1, never reused */
    char wid[24];   /* "w-<seq in hex>", the wire's worker_id */
    char *mem;      /* one allocation: name, agents, action views and bytes */
    size_t mem_len; /* counted in reg_bytes */
    ab_str_t name;
    ab_served_agent_t *agents;
    size_t nagents;
    uint32_t lease_ms;
    int64_t last_ms; /* last message from it */
    uint32_t calls;  /* open calls routed to it */
    uint64_t given;  /* when it was last given a call (ties go to the oldest) */
} worker_t;

typedef struct call {
    uint64_t id;
    uint64_t worker_seq;
    uint8_t caller[IDENT_MAX];
    size_t caller_len;
    uint64_t cid;
    uint32_t v;
    int64_t deadline_ms;
    char agent[AB_ID_MAX_BYTES + 1];
    char action[AB_ACTION_ID_MAX + 1];
} call_t;

struct ab__workers {
    void *router;
    const char *instance;
    worker_t *w;
    size_t nw, cap_w;
    size_t reg_bytes;
    uint64_t next_seq;
    call_t *calls;
    size_t ncalls, cap_calls;
    uint64_t next_call;
    uint64_t gives;
    uint64_t *seen; /* FNV-1a of agent NUL action, ever served, sorted */
    int64_t due_ms; /* earliest deadline there may be (invariant 5); 0 = none */
    ab__workers_hook hook;
    void *hook_ud;
    size_t nseen, cap_seen;
};

/* A new lease end or call deadline at @p at (invariant 5). */
static void due_by(ab__workers_t *w, int64_t at)
{
    if (w->due_ms == 0 || at < w->due_ms)
        w->due_ms = at;
}

/* ---- answering ----------------------------------------------------------- */

static void send_to(ab__workers_t *w, const uint8_t *ident, size_t len, const ab_msg_t *m)
{
    zmq_msg_t id;
    if (zmq_msg_init_size(&id, len) != 0)
        return;
    memcpy(zmq_msg_data(&id), ident, len);
    if (ab__reply_msg(w->router, &id, m) != 0)
        ab__log(AB_LOG_DEBUG, "dropped a %s message: %s", ab_op_name(m->op),
                zmq_strerror(zmq_errno()));
    zmq_msg_close(&id);
}

static void fail_to(ab__workers_t *w, const uint8_t *ident, size_t len, uint32_t v, uint64_t cid,
                    const ab_error_t *e)
{
    zmq_msg_t id;
    if (zmq_msg_init_size(&id, len) != 0)
        return;
    memcpy(zmq_msg_data(&id), ident, len);
    if (ab__reply_error(w->router, &id, v, cid, e) != 0)
        ab__log(AB_LOG_DEBUG, "dropped an error reply (cid %" PRIu64 "): %s", cid,
                zmq_strerror(zmq_errno()));
    zmq_msg_close(&id);
}

static void fail_msg(ab__workers_t *w, zmq_msg_t *id, const ab_msg_t *m, ab_status_t code,
                     const char *field, const char *fmt, ...) AB_PRINTF(6, 7);
static void fail_msg(ab__workers_t *w, zmq_msg_t *id, const ab_msg_t *m, ab_status_t code,
                     const char *field, const char *fmt, ...)
{
    ab_error_t e = AB_ERROR_INIT;
    va_list ap;
    va_start(ap, fmt);
    ab_error_vset(&e, code, field, fmt, ap);
    va_end(ap);
    fail_to(w, zmq_msg_data(id), zmq_msg_size(id), m->v, m->cid, &e);
}

/* End call @p i with error @p code for its caller (invariant 2) and forget it. */
static void end_call(ab__workers_t *w, size_t i, ab_status_t code, const char *msg)
{
    call_t *c = &w->calls[i];
    ab_error_t e = AB_ERROR_INIT;
    ab_error_set(&e, code, "", "action %s of agent %s: %s", c->action, c->agent, msg);
    fail_to(w, c->caller, c->caller_len, c->v, c->cid, &e);
    for (size_t k = 0; k < w->nw; k++)
        if (w->w[k].seq == c->worker_seq && w->w[k].calls > 0)
            w->w[k].calls--;
    w->calls[i] = w->calls[--w->ncalls];
}

/* ---- the registry ---------------------------------------------------------- */

ab__workers_t *ab__workers_new(void *router, const char *instance)
{
    ab__workers_t *w = calloc(1, sizeof(*w));
    if (w != NULL) {
        w->router = router;
        w->instance = instance;
        w->next_seq = 1;
        w->next_call = 1;
    }
    return w;
}

void ab__workers_destroy(ab__workers_t **wp)
{
    if (wp == NULL || *wp == NULL)
        return;
    ab__workers_t *w = *wp;
    for (size_t i = 0; i < w->nw; i++)
        free(w->w[i].mem);
    free(w->w);
    free(w->calls);
    free(w->seen);
    free(w);
    *wp = NULL;
}

static worker_t *find_worker(ab__workers_t *w, const void *ident, size_t len)
{
    for (size_t i = 0; i < w->nw; i++)
        if (w->w[i].ident_len == len && memcmp(w->w[i].ident, ident, len) == 0)
            return &w->w[i];
    return NULL;
}

void ab__workers_touch(ab__workers_t *w, zmq_msg_t *id, int64_t now_ms)
{
    if (w->nw == 0)
        return;
    worker_t *k = find_worker(w, zmq_msg_data(id), zmq_msg_size(id));
    if (k != NULL)
        k->last_ms = now_ms;
}

/* Remove worker @p i: its open calls end `unavailable` (invariant 2). */
static void drop_worker(ab__workers_t *w, size_t i, const char *why)
{
    worker_t *k = &w->w[i];
    ab__log(AB_LOG_INFO, "worker %s (%.*s) %s", k->wid, (int)k->name.len, k->name.ptr, why);
    if (w->hook)
        w->hook(w->hook_ud, k->wid, k->ident, k->ident_len, NULL);
    for (size_t c = w->ncalls; c-- > 0;)
        if (w->calls[c].worker_seq == k->seq)
            end_call(w, c, AB_UNAVAILABLE, why);
    w->reg_bytes -= k->mem_len;
    free(k->mem);
    w->w[i] = w->w[--w->nw];
}

/* ---- remembered (agent, action) pairs ---------------------------------------- */

static uint64_t pair_hash(ab_str_t agent, ab_str_t action)
{
    static const unsigned char sep = 0; /* ids and action ids hold no NUL */
    uint64_t h = ab__fnv64(agent.ptr, agent.len);
    h = ab__fnv64_more(h, &sep, 1);
    return ab__fnv64_more(h, action.ptr, action.len);
}

static size_t seen_at(const ab__workers_t *w, uint64_t h)
{
    size_t lo = 0, hi = w->nseen;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (w->seen[mid] < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool seen(const ab__workers_t *w, ab_str_t agent, ab_str_t action)
{
    uint64_t h = pair_hash(agent, action);
    size_t i = seen_at(w, h);
    return i < w->nseen && w->seen[i] == h;
}

/* Remember the pairs of a registration, up to AB__WK_SEEN (then the rest are
 * answered `unavailable`, never wrongly `unsupported`: see workers.h). */
static void remember(ab__workers_t *w, const ab_served_agent_t *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < a[i].nactions && w->nseen < AB__WK_SEEN; j++) {
            uint64_t h = pair_hash(a[i].name, a[i].actions[j]);
            size_t at = seen_at(w, h);
            if (at < w->nseen && w->seen[at] == h)
                continue;
            uint64_t *s = ab__grow(w->seen, &w->cap_seen, w->nseen + 1, sizeof(*s), 64);
            if (s == NULL)
                return;
            w->seen = s;
            memmove(&s[at + 1], &s[at], (w->nseen - at) * sizeof(*s));
            s[at] = h;
            w->nseen++;
        }
}

/* ---- serve ------------------------------------------------------------------- */

static size_t reg_size(const ab_serve_t *s)
{
    size_t n = s->worker.len + s->nagents * sizeof(ab_served_agent_t);
    for (size_t i = 0; i < s->nagents; i++) {
        n += s->agents[i].name.len + s->agents[i].nactions * sizeof(ab_str_t);
        for (size_t j = 0; j < s->agents[i].nactions; j++)
            n += s->agents[i].actions[j].len;
    }
    return n + 16;
}

static ab_str_t copy_str(char **at, ab_str_t s)
{
    memcpy(*at, s.ptr, s.len);
    ab_str_t out = {*at, s.len};
    *at += s.len;
    return out;
}

/* Copy registration @p s into one allocation (invariant 1). */
static bool copy_reg(worker_t *k, const ab_serve_t *s, size_t size)
{
    char *mem = malloc(size);
    if (mem == NULL)
        return false;
    ab_served_agent_t *agents = (ab_served_agent_t *)(void *)mem;
    ab_str_t *views = (ab_str_t *)(void *)(agents + s->nagents);
    size_t nviews = 0;
    for (size_t i = 0; i < s->nagents; i++)
        nviews += s->agents[i].nactions;
    char *bytes = (char *)(views + nviews);
    k->name = copy_str(&bytes, s->worker);
    for (size_t i = 0; i < s->nagents; i++) {
        agents[i] = s->agents[i];
        agents[i].name = copy_str(&bytes, s->agents[i].name);
        agents[i].actions = s->agents[i].nactions ? views : NULL;
        for (size_t j = 0; j < s->agents[i].nactions; j++)
            *views++ = copy_str(&bytes, s->agents[i].actions[j]);
    }
    k->mem = mem;
    k->mem_len = size;
    k->agents = agents;
    k->nagents = s->nagents;
    return true;
}

/* The worker entry of @p id for a new registration of @p size bytes; NULL (and the request
 * answered) when a bound would be passed. */
static worker_t *slot_for(ab__workers_t *w, zmq_msg_t *id, const ab_msg_t *m, size_t size)
{
    worker_t *k = find_worker(w, zmq_msg_data(id), zmq_msg_size(id));
    size_t old = k != NULL ? k->mem_len : 0;
    if (w->reg_bytes - old + size > AB__WK_REG_BYTES) {
        fail_msg(w, id, m, AB_OVERLOADED, "agents",
                 "the broker holds %u MiB of worker registrations already", AB__WK_REG_BYTES >> 20);
        return NULL;
    }
    if (k != NULL)
        return k;
    if (w->nw >= AB_WORKERS_MAX) {
        fail_msg(w, id, m, AB_OVERLOADED, "", "the broker serves %d workers already",
                 AB_WORKERS_MAX);
        return NULL;
    }
    worker_t *v = ab__grow(w->w, &w->cap_w, w->nw + 1, sizeof(*v), 8);
    if (v == NULL) {
        fail_msg(w, id, m, AB_NOMEM, "", "out of memory registering a worker");
        return NULL;
    }
    w->w = v;
    k = &w->w[w->nw++];
    memset(k, 0, sizeof(*k));
    k->ident_len = zmq_msg_size(id);
    memcpy(k->ident, zmq_msg_data(id), k->ident_len);
    k->seq = w->next_seq++;
    snprintf(k->wid, sizeof(k->wid), "w-%" PRIx64, k->seq);
    return k;
}

static void serve(ab__workers_t *w, zmq_msg_t *id, const ab_msg_t *m, int64_t now)
{
    const ab_serve_t *s = &m->u.serve;
    if (zmq_msg_size(id) == 0 || zmq_msg_size(id) > IDENT_MAX) {
        fail_msg(w, id, m, AB_INVALID_ENVELOPE, "", "connection identity of %zu bytes",
                 zmq_msg_size(id));
        return;
    }
    size_t size = reg_size(s);
    worker_t *k = slot_for(w, id, m, size);
    if (k == NULL)
        return;
    char *old = k->mem;
    size_t old_len = k->mem_len;
    if (!copy_reg(k, s, size)) {
        fail_msg(w, id, m, AB_NOMEM, "", "out of memory registering a worker");
        if (old == NULL) /* a new entry: take it back */
            w->w[k - w->w] = w->w[--w->nw];
        return;
    }
    free(old);
    w->reg_bytes = w->reg_bytes - old_len + size;
    k->lease_ms = s->lease_ms ? s->lease_ms : AB_LEASE_MS_DEFAULT;
    k->last_ms = now;
    due_by(w, now + k->lease_ms);
    remember(w, s->agents, s->nagents);
    ab_msg_t r = {.op = AB_OP_SERVED, .v = m->v, .cid = m->cid};
    r.u.served = (ab_served_t){{k->wid, strlen(k->wid)}, k->lease_ms};
    send_to(w, k->ident, k->ident_len, &r);
    if (w->hook)
        w->hook(w->hook_ud, k->wid, k->ident, k->ident_len, m);
    ab__log(AB_LOG_INFO, "worker %s (%.*s) serves %zu agent(s), lease %u ms", k->wid,
            (int)k->name.len, k->name.ptr, k->nagents, k->lease_ms);
}

/* ---- workers -------------------------------------------------------------------- */

static void list(ab__workers_t *w, zmq_msg_t *id, const ab_msg_t *m, int64_t now)
{
    ab_worker_info_t *v = w->nw ? calloc(w->nw, sizeof(*v)) : NULL;
    if (w->nw && v == NULL) {
        fail_msg(w, id, m, AB_NOMEM, "", "out of memory listing workers");
        return;
    }
    for (size_t i = 0; i < w->nw; i++) {
        const worker_t *k = &w->w[i];
        int64_t idle = now - k->last_ms;
        v[i] = (ab_worker_info_t){
            {k->wid, strlen(k->wid)},        k->name, k->agents, k->nagents, k->lease_ms,
            (uint32_t)(idle < 0 ? 0 : idle), k->calls};
    }
    ab_msg_t r = {.op = AB_OP_WORKERS_REPLY, .v = m->v, .cid = m->cid};
    r.u.workers_reply = (ab_workers_reply_t){v, w->nw};
    send_to(w, zmq_msg_data(id), zmq_msg_size(id), &r);
    free(v);
}

/* ---- invoke_action ------------------------------------------------------------------ */

static bool serves(const worker_t *k, ab_str_t agent, ab_str_t action)
{
    for (size_t i = 0; i < k->nagents; i++) {
        const ab_served_agent_t *a = &k->agents[i];
        if (a->name.len != agent.len || memcmp(a->name.ptr, agent.ptr, agent.len) != 0)
            continue;
        for (size_t j = 0; j < a->nactions; j++)
            if (a->actions[j].len == action.len &&
                memcmp(a->actions[j].ptr, action.ptr, action.len) == 0)
                return true;
    }
    return false;
}

/* The live worker for a call: fewest open calls, then the longest since it was given one. */
static worker_t *pick(ab__workers_t *w, ab_str_t agent, ab_str_t action, bool *busy)
{
    worker_t *best = NULL;
    *busy = false;
    for (size_t i = 0; i < w->nw; i++) {
        worker_t *k = &w->w[i];
        if (!serves(k, agent, action))
            continue;
        if (k->calls >= AB__WK_CALLS_PER_WORKER) {
            *busy = true;
            continue;
        }
        if (best == NULL || k->calls < best->calls ||
            (k->calls == best->calls && k->given < best->given))
            best = k;
    }
    return best;
}

/* Why no worker takes the call: answer the caller. */
static void refuse_call(ab__workers_t *w, zmq_msg_t *id, const ab_msg_t *m, bool busy)
{
    const ab_invoke_action_t *a = &m->u.invoke_action;
    if (busy)
        fail_msg(w, id, m, AB_OVERLOADED, "action",
                 "every worker of action %.*s of agent %.*s has %d calls open", (int)a->action.len,
                 a->action.ptr, (int)a->agent.len, a->agent.ptr, AB__WK_CALLS_PER_WORKER);
    else if (seen(w, a->agent, a->action) || w->nseen >= AB__WK_SEEN)
        fail_msg(w, id, m, AB_UNAVAILABLE, "action",
                 "no live worker serves action %.*s of agent %.*s now", (int)a->action.len,
                 a->action.ptr, (int)a->agent.len, a->agent.ptr);
    else
        fail_msg(w, id, m, AB_UNSUPPORTED, "action",
                 "no worker has served action %.*s of agent %.*s since the broker started",
                 (int)a->action.len, a->action.ptr, (int)a->agent.len, a->agent.ptr);
}

/* Record call @p c and send it to worker @p k; false when the worker is gone. */
static bool send_call(ab__workers_t *w, worker_t *k, call_t *c, const ab_msg_t *m)
{
    const ab_invoke_action_t *a = &m->u.invoke_action;
    ab_msg_t out = {.op = AB_OP_ACTION_CALL, .v = m->v, .cid = 0};
    out.u.action_call = (ab_action_call_t){
        c->id,      a->agent,  a->action,
        a->payload, a->thread, a->timeout_ms ? a->timeout_ms : AB_ACTION_TIMEOUT_MS_DEFAULT};
    zmq_msg_t wid;
    if (zmq_msg_init_size(&wid, k->ident_len) != 0)
        return false;
    memcpy(zmq_msg_data(&wid), k->ident, k->ident_len);
    int rc = ab__reply_msg(w->router, &wid, &out);
    zmq_msg_close(&wid);
    return rc == 0;
}

static void invoke(ab__workers_t *w, zmq_msg_t *id, const ab_msg_t *m, int64_t now)
{
    const ab_invoke_action_t *a = &m->u.invoke_action;
    if (w->ncalls >= AB__WK_CALLS) {
        fail_msg(w, id, m, AB_OVERLOADED, "", "%d action calls are open", AB__WK_CALLS);
        return;
    }
    call_t *v = ab__grow(w->calls, &w->cap_calls, w->ncalls + 1, sizeof(*v), 16);
    if (v == NULL) {
        fail_msg(w, id, m, AB_NOMEM, "", "out of memory starting an action call");
        return;
    }
    w->calls = v;
    call_t c; /* appended once a worker has it: dropping a worker moves the calls */
    memset(&c, 0, sizeof(c));
    c.id = w->next_call++;
    c.caller_len = zmq_msg_size(id) > IDENT_MAX ? IDENT_MAX : zmq_msg_size(id);
    memcpy(c.caller, zmq_msg_data(id), c.caller_len);
    c.cid = m->cid;
    c.v = m->v;
    c.deadline_ms = now + (a->timeout_ms ? a->timeout_ms : AB_ACTION_TIMEOUT_MS_DEFAULT);
    memcpy(c.agent, a->agent.ptr, a->agent.len);
    memcpy(c.action, a->action.ptr, a->action.len);
    for (;;) { /* a worker whose connection is gone is dropped; try the next */
        bool busy = false;
        worker_t *k = pick(w, a->agent, a->action, &busy);
        if (k == NULL) {
            refuse_call(w, id, m, busy);
            return;
        }
        c.worker_seq = k->seq;
        if (send_call(w, k, &c, m)) {
            k->calls++;
            k->given = ++w->gives;
            w->calls[w->ncalls++] = c;
            due_by(w, c.deadline_ms);
            return;
        }
        drop_worker(w, (size_t)(k - w->w), "is gone (its connection refused a call)");
    }
}

/* ---- action_result ------------------------------------------------------------------- */

static size_t find_call(const ab__workers_t *w, uint64_t id)
{
    for (size_t i = 0; i < w->ncalls; i++)
        if (w->calls[i].id == id)
            return i;
    return SIZE_MAX;
}

/* Pass a worker's answer to call @p c to its caller. */
static void deliver(ab__workers_t *w, const call_t *c, const worker_t *k, const ab_msg_t *m)
{
    const ab_action_result_t *r = &m->u.action_result;
    if (r->error != NULL) {
        fail_to(w, c->caller, c->caller_len, c->v, c->cid, r->error);
        return;
    }
    ab_msg_t out = {.op = AB_OP_ACTION_REPLY, .v = c->v, .cid = c->cid};
    out.u.action_reply = (ab_action_reply_t){{c->agent, strlen(c->agent)},
                                             {c->action, strlen(c->action)},
                                             {k->wid, strlen(k->wid)},
                                             r->result};
    send_to(w, c->caller, c->caller_len, &out);
}

static void result(ab__workers_t *w, zmq_msg_t *id, const ab_msg_t *m)
{
    worker_t *k = find_worker(w, zmq_msg_data(id), zmq_msg_size(id));
    size_t i = find_call(w, m->u.action_result.call);
    bool delivered = i != SIZE_MAX && k != NULL && w->calls[i].worker_seq == k->seq;
    if (delivered) {
        deliver(w, &w->calls[i], k, m);
        k->calls--;
        w->calls[i] = w->calls[--w->ncalls];
    }
    ab_msg_t ack = {.op = AB_OP_ACTION_ACK, .v = m->v, .cid = m->cid};
    ack.u.action_ack = (ab_action_ack_t){m->u.action_result.call, delivered};
    send_to(w, zmq_msg_data(id), zmq_msg_size(id), &ack);
}

/* ---- cancel, deadlines, stop ----------------------------------------------------------- */

/* The caller's `cancel` of an open call: it ends `request_aborted` (the run or the worker's
 * work is not touched; the worker's later result is acknowledged delivered=false). */
static bool cancel(ab__workers_t *w, zmq_msg_t *id, const ab_msg_t *m)
{
    for (size_t i = 0; i < w->ncalls; i++) {
        call_t *c = &w->calls[i];
        if (c->cid == m->cid && c->caller_len == zmq_msg_size(id) &&
            memcmp(c->caller, zmq_msg_data(id), c->caller_len) == 0) {
            end_call(w, i, AB_REQUEST_ABORTED, "the caller cancelled the call");
            return true;
        }
    }
    return false;
}

/* `leave`: the connection stops being a worker now (not at its lease's end). */
static void leave(ab__workers_t *w, zmq_msg_t *id, const ab_msg_t *m)
{
    worker_t *k = find_worker(w, zmq_msg_data(id), zmq_msg_size(id));
    if (k != NULL)
        drop_worker(w, (size_t)(k - w->w), "left");
    ab_msg_t r = {.op = AB_OP_LEFT, .v = m->v, .cid = m->cid};
    send_to(w, zmq_msg_data(id), zmq_msg_size(id), &r);
}

bool ab__workers_request(ab__workers_t *w, zmq_msg_t *id, const ab_msg_t *m, int64_t now_ms)
{
    switch (m->op) {
    case AB_OP_SERVE: serve(w, id, m, now_ms); return true;
    case AB_OP_WORKERS: list(w, id, m, now_ms); return true;
    case AB_OP_INVOKE_ACTION: invoke(w, id, m, now_ms); return true;
    case AB_OP_ACTION_RESULT: result(w, id, m); return true;
    case AB_OP_LEAVE: leave(w, id, m); return true;
    case AB_OP_CANCEL: return w->ncalls > 0 && cancel(w, id, m);
    default: return false;
    }
}

long ab__workers_tick(ab__workers_t *w, int64_t now)
{
    if (w->due_ms == 0)
        return -1;
    if (now < w->due_ms)
        return (long)(w->due_ms - now);
    for (size_t i = w->nw; i-- > 0;)
        if (now - w->w[i].last_ms >= (int64_t)w->w[i].lease_ms)
            drop_worker(w, i, "lapsed (no message within its lease)");
    for (size_t i = w->ncalls; i-- > 0;)
        if (now >= w->calls[i].deadline_ms)
            end_call(w, i, AB_TIMEOUT, "no answer within the call's timeout");
    w->due_ms = 0;
    for (size_t i = 0; i < w->nw; i++)
        due_by(w, w->w[i].last_ms + w->w[i].lease_ms);
    for (size_t i = 0; i < w->ncalls; i++)
        due_by(w, w->calls[i].deadline_ms);
    return w->due_ms == 0 ? -1 : (long)(w->due_ms > now ? w->due_ms - now : 0);
}

void ab__workers_stop(ab__workers_t *w)
{
    while (w != NULL && w->ncalls > 0)
        end_call(w, w->ncalls - 1, AB_UNAVAILABLE, "the broker is shutting down");
}

bool ab__workers_any_actions(const ab__workers_t *w)
{
    for (size_t i = 0; i < w->nw; i++)
        for (size_t j = 0; j < w->w[i].nagents; j++)
            if (w->w[i].agents[j].nactions > 0)
                return true;
    return false;
}

void ab__workers_set_hook(ab__workers_t *w, ab__workers_hook fn, void *ud)
{
    w->hook = fn;
    w->hook_ud = ud;
}

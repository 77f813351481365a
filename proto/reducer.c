/*
 * reducer.c - the thread reducer: lifecycle, dispatch, the shared helpers,
 * runs, shared state and approvals. Streamed messages, tool calls, reasoning
 * and activities are in reducer_items.c, whole messages (MESSAGES_SNAPSHOT,
 * RUN_STARTED input) in reducer_msgs.c, AgentKit CUSTOM events in
 * reducer_custom.c. The projection is specified in docs/REDUCER.md.
 *
 * Invariants:
 *  1. Every key of the projection exists from ab_reducer_new() on; arrays and
 *     objects are replaced, never removed.
 *  2. No event is kept: only the projection, one id index per indexed array
 *     (coll[i].idx: id -> position, always in step with coll[i].arr), the
 *     holder of each tool call (holders: call id -> message id) and the
 *     current id of each chunk lane. Memory follows the state, not the
 *     event count; warnings are capped at AB_REDUCER_MAX_WARNINGS.
 *  3. Nothing in the projection points into an event: values are copied.
 *     Inside the projection a tool call's name and arguments strings may be
 *     one node in two places (its toolCalls item and its ToolCall).
 *  4. A change that cannot apply (patch failure, unknown target, malformed
 *     AgentKit value) leaves the projection as it was and adds a warning.
 *  5. "state" changes atomically: a STATE_DELTA is applied to a copy.
 */
#include "ab_common.h"
#include "alloc_internal.h"
#include "reducer_internal.h"

#include "agentbus/jsonpatch.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    const char *key;
} coll_defs[RD_NCOLL] = {
    [RD_RUNS] = {"runs", "id"},
    [RD_MESSAGES] = {"messages", "id"},
    [RD_TOOLS] = {"toolCalls", "id"},
    [RD_REASONING] = {"reasoning", "messageId"},
    [RD_SPANS] = {"reasoningSpans", "id"},
    [RD_ACTIVITIES] = {"activities", "messageId"},
    [RD_TASKS] = {"tasks", "id"},
    [RD_ROSTER] = {"roster", "agentId"},
    [RD_ARTIFACTS] = {"artifacts", "id"},
    [RD_SUGGESTIONS] = {"suggestions", "id"},
    [RD_WIDGETS] = {"widgets", "id"},
};

/* ---- helpers shared with reducer_items.c / reducer_custom.c ---- */

const char *ab__rd_str(const ab_val_t *ev, const char *key, size_t *len)
{
    const ab_val_t *v = ab_val_get(ev, key);
    if (!v || v->type != AB_VAL_STR)
        return NULL;
    *len = v->len;
    return v->u.s;
}

void ab__rd_set(ab_reducer_t *r, json_t *obj, const char *key, json_t *v)
{
    if (!v || json_object_set_new(obj, key, v) != 0)
        r->oom = true;
}

/* Set integer member @p key of @p obj: the member's own node is changed in place when no
 * other tree holds it (no allocation per event for a counter such as lastSeq). */
static void rd_set_int(ab_reducer_t *r, json_t *obj, const char *key, json_int_t v)
{
    json_t *cur = json_object_get(obj, key);
    if (json_is_integer(cur) && cur->refcount == 1)
        json_integer_set(cur, v);
    else
        ab__rd_set(r, obj, key, json_integer(v));
}

void ab__rd_copy_str(ab_reducer_t *r, json_t *obj, const ab_val_t *ev, const char *key)
{
    size_t n;
    const char *s = ab__rd_str(ev, key, &n);
    if (s)
        ab__rd_set(r, obj, key, json_stringn(s, n));
}

/* Write slot @p p's value into its nodes and free the slot (a small buffer is kept). */
static void pend_flush(ab_reducer_t *r, rd_pend_t *p)
{
    if (!p->node)
        return;
    if (json_string_setn_nocheck(p->node, p->buf, p->len) != 0 ||
        (p->mirror && json_string_setn_nocheck(p->mirror, p->buf, p->len) != 0))
        r->oom = true;
    json_decref(p->node);
    json_decref(p->mirror);
    p->node = p->mirror = NULL;
    p->len = 0;
    p->appends = 0;
    r->npend--;
    if (p->cap > RD_PENDING_KEEP) { /* the value is in the node now: no large buffer kept */
        ab__free(p->buf);
        p->buf = NULL;
        p->cap = 0;
    }
}

static void flush_pending(ab_reducer_t *r)
{
    for (int i = 0; r->npend > 0 && i < RD_PENDING; i++)
        pend_flush(r, &r->pend[i]);
}

static rd_pend_t *pend_of(const ab_reducer_t *r, const json_t *node)
{
    if (node && r->pend[r->pend_mru].node == node) /* the same string as the last append */
        return (rd_pend_t *)(uintptr_t)&r->pend[r->pend_mru];
    for (int i = 0; node && i < RD_PENDING; i++)
        if (r->pend[i].node == node)
            return (rd_pend_t *)(uintptr_t)&r->pend[i];
    return NULL;
}

bool ab__rd_pending(const ab_reducer_t *r, const json_t *node)
{
    return pend_of(r, node) != NULL;
}

/*
 * A free slot: an unused one, else the least recently used, flushed. When that one had a
 * single append (more strings stream in turn than there are slots, none comes back in
 * time), the most recently used goes instead: the string just appended to, still in the
 * cache, as with a single pending value.
 */
static rd_pend_t *pend_free(ab_reducer_t *r)
{
    rd_pend_t *lru = &r->pend[0], *mru = &r->pend[0];
    for (int i = 0; i < RD_PENDING && lru->node; i++) {
        if (!r->pend[i].node || r->pend[i].used < lru->used)
            lru = &r->pend[i];
        if (r->pend[i].node && r->pend[i].used > mru->used)
            mru = &r->pend[i];
    }
    rd_pend_t *p = lru->node && lru->appends <= 1 ? mru : lru;
    pend_flush(r, p);
    return p;
}

/* Room for @p more bytes after slot @p p's value (amortised doubling). */
static bool pend_room(rd_pend_t *p, size_t more)
{
    if (p->len + more <= p->cap)
        return true;
    size_t cap = p->cap ? p->cap : 64;
    while (cap < p->len + more)
        cap *= 2;
    char *b = ab__realloc(p->buf, cap);
    if (!b)
        return false;
    p->buf = b;
    p->cap = cap;
    return true;
}

/* Start a pending value for string node @p cur (obj[key]) from its own value. */
static rd_pend_t *pend_start(ab_reducer_t *r, json_t *cur, json_t *mirror, const char *key)
{
    rd_pend_t *p = pend_free(r);
    size_t old = json_string_length(cur);
    if (!pend_room(p, old))
        return NULL;
    if (old > 0)
        memcpy(p->buf, json_string_value(cur), old);
    p->len = old;
    p->node = json_incref(cur);
    r->npend++;
    json_t *m = mirror ? json_object_get(mirror, key) : NULL;
    if (json_is_string(m) && m != cur)
        p->mirror = json_incref(m);
    else if (mirror && !m)
        ab__rd_set(r, mirror, key, json_incref(cur));
    return p;
}

void ab__rd_append2(ab_reducer_t *r, json_t *obj, json_t *mirror, const char *key, const char *d,
                    size_t n)
{
    json_t *cur = json_object_get(obj, key);
    if (!json_is_string(cur)) {
        json_t *v = json_stringn_nocheck(d, n);
        if (mirror && v)
            ab__rd_set(r, mirror, key, json_incref(v)); /* one node, shared */
        ab__rd_set(r, obj, key, v);
        return;
    }
    if (n == 0)
        return;
    rd_pend_t *p = pend_of(r, cur);
    if (!p && (p = pend_start(r, cur, mirror, key)) == NULL) {
        r->oom = true;
        return;
    }
    if (!pend_room(p, n)) {
        r->oom = true;
        return;
    }
    memcpy(p->buf + p->len, d, n);
    p->len += n;
    p->used = ++r->pend_tick;
    p->appends++;
    r->pend_mru = (unsigned)(p - r->pend);
}

void ab__rd_append(ab_reducer_t *r, json_t *obj, const char *key, const char *d, size_t n)
{
    ab__rd_append2(r, obj, NULL, key, d, n);
}

void ab__rd_meta(ab_reducer_t *r, json_t *target, const ab_val_t *ev)
{
    const ab_val_t *md = ab_val_get(ev, "metadata");
    if (!target || !md || md->type != AB_VAL_MAP)
        return;
    json_t *dst = json_object_get(target, "metadata");
    if (!json_is_object(dst)) {
        dst = json_object();
        ab__rd_set(r, target, "metadata", dst);
        if (r->oom)
            return;
    }
    for (uint32_t i = 0; i < md->len; i++) {
        const ab_kv_t *kv = &md->u.pairs[i];
        json_t *v = ab__val_to_jansson(&kv->val);
        if (!v || json_object_setn_new_nocheck(dst, kv->key, kv->klen, v) != 0)
            r->oom = true;
    }
}

bool ab__rd_is(const json_t *obj, const char *key, const char *s)
{
    const json_t *v = json_object_get(obj, key);
    size_t n = strlen(s);
    return json_is_string(v) && json_string_length(v) == n &&
           memcmp(json_string_value(v), s, n) == 0;
}

void ab__rd_warn(ab_reducer_t *r, const char *fmt, ...)
{
    char msg[AB_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t len = strlen(msg);
    len = ab__utf8_cut(msg, len, len); /* truncation may split a character */
    json_t *w = json_pack("{s:I,s:s,s:s#}", "seq", (json_int_t)r->seq, "run", r->run, "message",
                          msg, (int)len);
    json_t *list = json_object_get(r->root, "warnings");
    if (!w || json_array_append_new(list, w) != 0) {
        r->oom = true;
        return;
    }
    while (json_array_size(list) > AB_REDUCER_MAX_WARNINGS)
        json_array_remove(list, 0);
}

json_t *ab__rd_find(const rd_coll_t *c, const char *id, size_t n)
{
    json_t *pos = json_object_getn(c->idx, id, n);
    return pos ? json_array_get(c->arr, (size_t)json_integer_value(pos)) : NULL;
}

long ab__rd_pos(const rd_coll_t *c, const char *id, size_t n)
{
    json_t *pos = json_object_getn(c->idx, id, n);
    return pos ? (long)json_integer_value(pos) : -1;
}

json_t *ab__rd_insert(ab_reducer_t *r, rd_coll_t *c, size_t at, const char *id, size_t n,
                      json_t *item)
{
    if (at >= json_array_size(c->arr))
        return ab__rd_add(r, c, id, n, item);
    if (!item || json_array_insert_new(c->arr, at, item) != 0) {
        r->oom = true;
        return NULL;
    }
    for (size_t i = at; i < json_array_size(c->arr); i++) {
        const char *k = id;
        size_t kn = n;
        if (i != at) {
            json_t *key = json_object_get(json_array_get(c->arr, i), c->key);
            if (!json_is_string(key))
                continue;
            k = json_string_value(key);
            kn = json_string_length(key);
        }
        json_t *pos = json_integer((json_int_t)i);
        if (!pos || json_object_setn_new(c->idx, k, kn, pos) != 0)
            r->oom = true;
    }
    return item;
}

json_t *ab__rd_add(ab_reducer_t *r, rd_coll_t *c, const char *id, size_t n, json_t *item)
{
    if (!item) {
        r->oom = true;
        return NULL;
    }
    json_t *pos = json_integer((json_int_t)json_array_size(c->arr));
    if (!pos || json_object_setn_new(c->idx, id, n, pos) != 0) {
        json_decref(item); /* the _new calls own their value only once reached */
        r->oom = true;
        return NULL;
    }
    if (json_array_append_new(c->arr, item) != 0) {
        json_object_deln(c->idx, id, n);
        r->oom = true;
        return NULL;
    }
    return item;
}

void ab__rd_replace(ab_reducer_t *r, rd_coll_t *c, json_t *arr)
{
    if (!arr || json_object_set_new(r->root, c->name, arr) != 0) {
        r->oom = true;
        return;
    }
    c->arr = arr;
    json_object_clear(c->idx);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *id = json_object_get(json_array_get(arr, i), c->key);
        json_t *pos = json_integer((json_int_t)i);
        if (json_is_string(id) && (!pos || json_object_setn_new(c->idx, json_string_value(id),
                                                                json_string_length(id), pos)))
            r->oom = true;
        else if (!json_is_string(id))
            json_decref(pos);
    }
}

const char *ab__rd_lane(ab_reducer_t *r, const char *kind, const ab_val_t *ev, const char *id,
                        size_t *len)
{
    char key[320];
    size_t sn = 0, kn = strlen(kind);
    const char *sub = ab__rd_str(ev, "subagentRunId", &sn);
    if (!sub || sn > sizeof key - kn - 1)
        sn = 0; /* validated ids are far shorter; an absurd one shares the untagged lane */
    memcpy(key, kind, kn);
    key[kn] = '\x1f';
    if (sn)
        memcpy(key + kn + 1, sub, sn); /* byte-exact: an id may hold any character, NUL too */
    kn += 1 + sn;
    if (id) {
        json_t *v = json_stringn_nocheck(id, *len);
        if (!v || json_object_setn_new_nocheck(r->lanes, key, kn, v) != 0)
            r->oom = true;
    }
    json_t *cur = json_object_getn(r->lanes, key, kn);
    if (!json_is_string(cur))
        return NULL;
    *len = json_string_length(cur);
    return json_string_value(cur);
}

json_t *ab__val_to_jansson(const ab_val_t *v)
{
    json_t *o = NULL;
    switch (v->type) {
    case AB_VAL_NULL: return json_null();
    case AB_VAL_BOOL: return json_boolean(v->u.b);
    case AB_VAL_INT: return json_integer((json_int_t)v->u.i);
    /* beyond json_int_t (long long): the nearest double, as a JavaScript client holds it */
    case AB_VAL_UINT: return json_real((double)v->u.u);
    case AB_VAL_FLOAT: return json_real(v->u.f);
    case AB_VAL_STR: return json_stringn_nocheck(v->u.s, v->len);
    case AB_VAL_ARRAY:
        o = json_array();
        for (uint32_t i = 0; o && i < v->len; i++) {
            if (json_array_append_new(o, ab__val_to_jansson(&v->u.items[i])) != 0)
                json_decref(o), o = NULL;
        }
        return o;
    case AB_VAL_MAP:
        o = json_object();
        for (uint32_t i = 0; o && i < v->len; i++) {
            const ab_kv_t *kv = &v->u.pairs[i];
            if (json_object_setn_new_nocheck(o, kv->key, kv->klen, ab__val_to_jansson(&kv->val)))
                json_decref(o), o = NULL;
        }
        return o;
    }
    return NULL;
}

/* ---- runs ---- */

static json_t *run_get(ab_reducer_t *r)
{
    rd_coll_t *c = &r->coll[RD_RUNS];
    json_t *run = r->cur_run;
    if (!run)
        run = ab__rd_find(c, r->run, strlen(r->run));
    if (!run)
        run = ab__rd_add(r, c, r->run, strlen(r->run),
                         json_pack("{s:s,s:s}", "id", r->run, "status", "active"));
    if (run)
        rd_set_int(r, run, "lastSeq", (json_int_t)r->seq);
    r->cur_run = run;
    return run;
}

static void seq_set(ab_reducer_t *r, json_t *run, const char *key)
{
    ab__rd_set(r, run, key, json_integer((json_int_t)r->seq));
}

/* Pending approval with this exact interrupt id (latest first), or NULL. */
static json_t *approval_pending(ab_reducer_t *r, const char *id, size_t n)
{
    json_t *list = json_object_get(r->root, "approvals");
    for (size_t i = json_array_size(list); i-- > 0;) {
        json_t *a = json_array_get(list, i);
        json_t *iid = json_object_get(a, "interruptId");
        if (json_string_length(iid) == n && memcmp(json_string_value(iid), id, n) == 0 &&
            strcmp(json_string_value(json_object_get(a, "status")), "pending") == 0)
            return a;
    }
    return NULL;
}

/* One resume entry of RUN_STARTED.input.resume: decide its approval. */
static void resume_entry(ab_reducer_t *r, const ab_val_t *e)
{
    size_t n = 0, sn = 0;
    const char *id = ab__rd_str(e, "interruptId", &n);
    const char *st = ab__rd_str(e, "status", &sn);
    if (!id || !st) {
        ab__rd_warn(r, "resume entry without interruptId or status");
        return;
    }
    bool resolved = sn == 8 && memcmp(st, "resolved", 8) == 0;
    if (!resolved && !(sn == 9 && memcmp(st, "cancelled", 9) == 0)) {
        ab__rd_warn(r, "resume entry for '%.*s' has unknown status '%.*s'", (int)n, id, (int)sn,
                    st);
        return;
    }
    json_t *a = approval_pending(r, id, n);
    if (!a) {
        ab__rd_warn(r, "resume entry for unknown or answered interrupt '%.*s'", (int)n, id);
        return;
    }
    ab__rd_set(r, a, "status", json_string(resolved ? "resolved" : "cancelled"));
    ab__rd_set(r, a, "resumedByRunId", json_string(r->run));
    const ab_val_t *payload = ab_val_get(e, "payload");
    if (payload)
        ab__rd_set(r, a, "payload", ab__val_to_jansson(payload));
}

static void run_started(ab_reducer_t *r, const ab_val_t *ev)
{
    json_t *run = run_get(r);
    if (!run)
        return;
    json_object_del(run, "endedSeq");
    ab__rd_set(r, run, "status", json_string("active"));
    seq_set(r, run, "startedSeq");
    ab__rd_copy_str(r, run, ev, "parentRunId");
    json_object_clear(r->lanes);
    const ab_val_t *input = ab_val_get(ev, "input");
    ab__rd_input_messages(r, ab_val_get(input, "messages"));
    const ab_val_t *state = ab_val_get(input, "state");
    if (state && state->type != AB_VAL_NULL)
        ab__rd_set(r, r->root, "state", ab__val_to_jansson(state));
    const ab_val_t *resume = ab_val_get(input, "resume");
    if (resume && resume->type == AB_VAL_ARRAY)
        for (uint32_t i = 0; i < resume->len; i++)
            resume_entry(r, &resume->u.items[i]);
}

/* RUN_FINISHED with the interrupt outcome: one pending approval each. */
static void add_approvals(ab_reducer_t *r, const ab_val_t *interrupts)
{
    json_t *list = json_object_get(r->root, "approvals");
    static const char *const opt[] = {"message", "toolCallId", "expiresAt", "subagentRunId"};
    for (uint32_t i = 0; interrupts && interrupts->type == AB_VAL_ARRAY && i < interrupts->len;
         i++) {
        const ab_val_t *in = &interrupts->u.items[i];
        size_t n = 0;
        const char *id = ab__rd_str(in, "id", &n);
        json_t *a = json_object();
        if (!id || !a) {
            json_decref(a);
            continue;
        }
        ab__rd_set(r, a, "interruptId", json_stringn(id, n));
        ab__rd_set(r, a, "runId", json_string(r->run));
        ab__rd_copy_str(r, a, in, "reason");
        for (size_t k = 0; k < sizeof opt / sizeof opt[0]; k++)
            ab__rd_copy_str(r, a, in, opt[k]);
        ab__rd_set(r, a, "status", json_string("pending"));
        if (json_array_append_new(list, a) != 0)
            r->oom = true;
    }
}

static void run_finished(ab_reducer_t *r, const ab_val_t *ev)
{
    json_t *run = run_get(r);
    if (!run)
        return;
    const ab_val_t *outcome = ab_val_get(ev, "outcome");
    size_t n = 7;
    const char *type = ab__rd_str(outcome, "type", &n);
    if (!type)
        type = "success";
    const char *status = "finished";
    if (n == 9 && memcmp(type, "interrupt", 9) == 0)
        status = "interrupted";
    else if (n == 9 && memcmp(type, "cancelled", 9) == 0)
        status = "cancelled";
    ab__rd_set(r, run, "status", json_string(status));
    ab__rd_set(r, run, "outcome", json_stringn(type, n));
    const ab_val_t *result = ab_val_get(ev, "result");
    if (result)
        ab__rd_set(r, run, "result", ab__val_to_jansson(result));
    const ab_val_t *pending = ab_val_get(outcome, "pendingToolCallIds");
    if (pending)
        ab__rd_set(r, run, "pendingToolCallIds", ab__val_to_jansson(pending));
    seq_set(r, run, "endedSeq");
    json_object_clear(r->lanes);
    if (strcmp(status, "interrupted") == 0)
        add_approvals(r, ab_val_get(outcome, "interrupts"));
}

static void run_error(ab_reducer_t *r, const ab_val_t *ev)
{
    json_t *run = run_get(r);
    if (!run)
        return;
    json_t *e = json_object();
    if (!e) {
        r->oom = true;
        return;
    }
    ab__rd_copy_str(r, e, ev, "message");
    ab__rd_copy_str(r, e, ev, "code");
    ab__rd_set(r, run, "status", json_string("error"));
    ab__rd_set(r, run, "error", e);
    seq_set(r, run, "endedSeq");
    json_object_clear(r->lanes);
}

/* ---- shared state ---- */

static void state_snapshot(ab_reducer_t *r, const ab_val_t *ev)
{
    const ab_val_t *s = ab_val_get(ev, "snapshot");
    if (s)
        ab__rd_set(r, r->root, "state", ab__val_to_jansson(s));
}

static void patch_warn(void *ud, size_t index, const char *op)
{
    ab__rd_warn(ud, "patch operation %zu skipped: unknown op '%s'", index, op);
}

static void state_delta(ab_reducer_t *r, const ab_val_t *ev)
{
    const ab_val_t *d = ab_val_get(ev, "delta");
    json_t *patch = d ? ab__val_to_jansson(d) : NULL;
    if (!patch) {
        if (d)
            r->oom = true;
        return;
    }
    json_t *state = json_incref(json_object_get(r->root, "state"));
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab__jsonpatch_apply_ex(&state, patch, patch_warn, r, &err);
    json_decref(patch);
    if (st == AB_OK) {
        ab__rd_set(r, r->root, "state", state);
        return;
    }
    json_decref(state);
    if (st == AB_NOMEM)
        r->oom = true;
    else
        ab__rd_warn(r, "STATE_DELTA not applied, state unchanged: %s: %s (at %s)",
                    ab_status_name(err.code), err.message, err.field);
}

/* ---- lifecycle and dispatch ---- */

/* The handler of each event type; `appends`: it touches strings only through
 * ab__rd_append (the pending value may stay pending). Lengths are computed at
 * compile time: the lookup runs once per event. */
#define H(t, f, a)                                                                                 \
    {                                                                                              \
        t, sizeof(t) - 1, f, a                                                                     \
    }
static const struct {
    const char *type;
    size_t len;
    rd_handler_fn fn;
    bool appends;
} handlers[] = {
    H("RUN_STARTED", run_started, false),
    H("RUN_FINISHED", run_finished, false),
    H("RUN_ERROR", run_error, false),
    H("TEXT_MESSAGE_START", ab__rd_text_start, false),
    H("TEXT_MESSAGE_CONTENT", ab__rd_text_content, true),
    H("TEXT_MESSAGE_END", ab__rd_text_end, false),
    H("TEXT_MESSAGE_CHUNK", ab__rd_text_chunk, false),
    H("TOOL_CALL_START", ab__rd_tool_start, false),
    H("TOOL_CALL_ARGS", ab__rd_tool_args, true),
    H("TOOL_CALL_END", ab__rd_tool_end, false),
    H("TOOL_CALL_CHUNK", ab__rd_tool_chunk, false),
    H("TOOL_CALL_RESULT", ab__rd_tool_result, false),
    H("STATE_SNAPSHOT", state_snapshot, false),
    H("STATE_DELTA", state_delta, false),
    H("MESSAGES_SNAPSHOT", ab__rd_messages_snapshot, false),
    H("ACTIVITY_SNAPSHOT", ab__rd_activity_snapshot, false),
    H("ACTIVITY_DELTA", ab__rd_activity_delta, false),
    H("CUSTOM", ab__rd_custom, false),
    H("REASONING_START", ab__rd_reasoning_span, false),
    H("REASONING_END", ab__rd_reasoning_span_end, false),
    H("REASONING_MESSAGE_START", ab__rd_reasoning_start, false),
    H("REASONING_MESSAGE_CONTENT", ab__rd_reasoning_content, true),
    H("REASONING_MESSAGE_END", ab__rd_reasoning_end, false),
    H("REASONING_MESSAGE_CHUNK", ab__rd_reasoning_chunk, false),
    H("REASONING_ENCRYPTED_VALUE", ab__rd_encrypted_value, false),
};
#undef H

ab_status_t ab_reducer_new(ab_reducer_t **out, const char *thread_id, ab_error_t *err)
{
    if (!out || !thread_id)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "reducer needs a thread id");
    unsigned long failures = ab__alloc_failures();
    ab_reducer_t *r = ab__calloc(1, sizeof *r);
    if (!r)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    r->run = ab__calloc(1, 1);
    r->run_cap = 1;
    r->lanes = json_object();
    r->holders = json_object();
    r->root = json_pack("{s:i,s:s,s:o}", "formatVersion", AB_REDUCER_FORMAT_VERSION, "threadId",
                        thread_id, "state", json_object());
    static const char *const plain[] = {"approvals", "interactions", "warnings"};
    for (size_t i = 0; r->root && i < sizeof plain / sizeof plain[0]; i++)
        ab__rd_set(r, r->root, plain[i], json_array());
    for (int i = 0; r->root && i < RD_NCOLL; i++) {
        r->coll[i].name = coll_defs[i].name;
        r->coll[i].key = coll_defs[i].key;
        r->coll[i].idx = json_object();
        if (!r->coll[i].idx)
            r->oom = true;
        ab__rd_replace(r, &r->coll[i], json_array());
    }
    if (!r->run || !r->lanes || !r->holders || !r->root || r->oom ||
        ab__alloc_failures() != failures) {
        ab_reducer_destroy(&r);
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    }
    *out = r;
    return AB_OK;
}

void ab_reducer_destroy(ab_reducer_t **rp)
{
    if (!rp || !*rp)
        return;
    ab_reducer_t *r = *rp;
    for (int i = 0; i < RD_NCOLL; i++)
        json_decref(r->coll[i].idx);
    for (int i = 0; i < RD_PENDING; i++) {
        json_decref(r->pend[i].node);
        json_decref(r->pend[i].mirror);
        ab__free(r->pend[i].buf);
    }
    json_decref(r->lanes);
    json_decref(r->holders);
    json_decref(r->root);
    ab__free(r->run);
    ab__free(r);
    *rp = NULL;
}

const json_t *ab__reducer_state(const ab_reducer_t *r)
{
    if (!r)
        return NULL;
    flush_pending(
        (ab_reducer_t *)(uintptr_t)r); /* logically const: the value it shows is current */
    return r->root;
}

/* Copy the run id of this event into r->run. */
static ab_status_t set_run(ab_reducer_t *r, const ab_val_t *ev, const char *run_id)
{
    size_t n = 0;
    const char *s = run_id;
    if (s)
        n = strlen(s);
    else if (!(s = ab__rd_str(ev, "runId", &n)))
        s = "", n = 0;
    if (n + 1 > r->run_cap) {
        char *p = ab__realloc(r->run, n + 1);
        if (!p)
            return AB_NOMEM;
        r->run = p;
        r->run_cap = n + 1;
    }
    memcpy(r->run, s, n);
    r->run[n] = '\0';
    return AB_OK;
}

/* Fold @p ev, the current run (r->run, r->cur_run when known) set. */
static ab_status_t apply(ab_reducer_t *r, const ab_val_t *ev, const char *type, size_t tn,
                         ab_error_t *err)
{
    size_t h = 0, nh = sizeof handlers / sizeof handlers[0];
    while (h < nh && (handlers[h].len != tn || memcmp(handlers[h].type, type, tn) != 0))
        h++;
    if (h == nh || !handlers[h].appends)
        flush_pending(r);
    unsigned long failures = ab__alloc_failures();
    if (!run_get(r))
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    if (h < nh)
        handlers[h].fn(r, ev);
    if (r->oom || ab__alloc_failures() != failures)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory while folding seq %llu",
                            (unsigned long long)r->seq);
    return AB_OK;
}

ab_status_t ab__reducer_apply_run(ab_reducer_t *r, const ab_val_t *ev, const char *run_id,
                                  uint64_t seq, json_t **item, ab_error_t *err)
{
    size_t tn = 0;
    const char *type = ev && ev->type == AB_VAL_MAP ? ab__rd_str(ev, "type", &tn) : NULL;
    if (!r || !type)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "/type", "event is not a map with a type");
    if (set_run(r, ev, run_id) != AB_OK)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    r->seq = seq;
    r->oom = false;
    r->cur_run = item ? *item : NULL;
    ab_status_t st = apply(r, ev, type, tn, err);
    if (st == AB_OK && item)
        *item = r->cur_run;
    r->cur_run = NULL;
    return st;
}

ab_status_t ab_reducer_apply(ab_reducer_t *r, const ab_val_t *ev, const char *run_id, uint64_t seq,
                             ab_error_t *err)
{
    return ab__reducer_apply_run(r, ev, run_id, seq, NULL, err);
}

/* ---- continuing from a stored projection (snapshots) ---- */

const json_t *ab__reducer_lanes(const ab_reducer_t *r)
{
    return r ? r->lanes : NULL;
}

size_t ab__reducer_pending_bytes(const ab_reducer_t *r)
{
    size_t n = 0;
    for (int i = 0; r && i < RD_PENDING; i++)
        n += r->pend[i].cap;
    return n;
}

/* Copy projection key @p key into r (type-checked against the empty value). */
static ab_status_t load_key(ab_reducer_t *r, const json_t *p, const char *key, bool take,
                            ab_error_t *err)
{
    json_t *want = json_object_get(r->root, key);
    json_t *got = json_object_get(p, key);
    char field[64];
    snprintf(field, sizeof field, "/%s", key);
    if (!got || (json_is_array(want) && !json_is_array(got)))
        return ab_error_set(err, AB_INVALID_ARGUMENT, field,
                            "projection key '%s' missing or not %s", key,
                            json_is_array(want) ? "an array" : "a value");
    json_t *copy = take ? json_incref(got) : json_deep_copy(got);
    for (int i = 0; i < RD_NCOLL; i++)
        if (strcmp(r->coll[i].name, key) == 0) {
            ab__rd_replace(r, &r->coll[i], copy);
            return AB_OK;
        }
    ab__rd_set(r, r->root, key, copy);
    return AB_OK;
}

/* Check that @p lanes (may be NULL) is an object of strings. */
static ab_status_t check_lanes(const json_t *lanes, ab_error_t *err)
{
    if (!lanes)
        return AB_OK;
    if (!json_is_object(lanes))
        return ab_error_set(err, AB_INVALID_ARGUMENT, "lanes", "lanes is not an object");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)(uintptr_t)lanes, k, v)
    {
        if (!json_is_string(v))
            return ab_error_set(err, AB_INVALID_ARGUMENT, "lanes", "lane '%s' is not a string", k);
    }
    return AB_OK;
}

ab_status_t ab__reducer_from_state(ab_reducer_t **out, const json_t *p, const json_t *lanes,
                                   ab_error_t *err)
{
    return ab__reducer_from_state_ex(out, p, lanes, false, err);
}

ab_status_t ab__reducer_from_state_ex(ab_reducer_t **out, const json_t *p, const json_t *lanes,
                                      bool take, ab_error_t *err)
{
    const char *thread = json_string_value(json_object_get(p, "threadId"));
    if (!out || !json_is_object(p) || !thread)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "/threadId",
                            "projection is not an object with a threadId");
    if (json_integer_value(json_object_get(p, "formatVersion")) != AB_REDUCER_FORMAT_VERSION)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "/formatVersion",
                            "projection formatVersion is not %d", AB_REDUCER_FORMAT_VERSION);
    ab_status_t st = check_lanes(lanes, err);
    ab_reducer_t *r = NULL;
    if (st != AB_OK || (st = ab_reducer_new(&r, thread, err)) != AB_OK)
        return st;
    static const char *const plain[] = {"state", "approvals", "interactions", "warnings"};
    for (size_t i = 0; st == AB_OK && i < sizeof plain / sizeof plain[0]; i++)
        st = load_key(r, p, plain[i], take, err);
    for (int i = 0; st == AB_OK && i < RD_NCOLL; i++)
        st = load_key(r, p, coll_defs[i].name, take, err);
    json_t *lc = !lanes ? NULL
                 : take ? json_incref((json_t *)(uintptr_t)lanes)
                        : json_deep_copy(lanes);
    if (st == AB_OK && lanes && (!lc || json_object_update(r->lanes, lc) != 0))
        r->oom = true;
    json_decref(lc);
    if (st == AB_OK) {
        ab__rd_holders_rebuild(r);
        ab__rd_calls_share(r);
    }
    if (st == AB_OK && r->oom)
        st = ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    if (st != AB_OK) {
        ab_reducer_destroy(&r);
        return st;
    }
    *out = r;
    return AB_OK;
}

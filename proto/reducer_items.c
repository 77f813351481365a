/*
 * reducer_items.c - the streamed items of the thread projection: text
 * messages, tool calls and their results, reasoning and activities
 * (docs/REDUCER.md, "messages" to "activities"). Whole messages
 * (MESSAGES_SNAPSHOT, RUN_STARTED input) are in reducer_msgs.c.
 *
 * Invariants:
 *  1. Streamed items are created by their first event (start, content or
 *     chunk - lenient about a missing start) and grow by appending deltas in
 *     arrival order; a reopening start appends to the existing item.
 *  2. A chunk without an id continues the current item of its lane (kind x
 *     subagentRunId); run boundaries and MESSAGES_SNAPSHOT end every lane.
 *  3. Every tool call that can be attached is also an AG-UI ToolCall in the
 *     toolCalls of one assistant message of "messages" (its holder, found as
 *     the AG-UI client finds it: the parentMessageId's assistant message,
 *     else a new assistant message), and r->holders maps the call to that
 *     message's id. Its arguments there and in the toolCalls index hold the
 *     same value (one shared string node, or ab__rd_append2's mirror).
 *  4. A TOOL_CALL_RESULT's tool message stands right after its call's holder
 *     and the tool messages already following it; without a holder it is
 *     appended.
 *  5. "metadata" of the events that build an item is merged into that item
 *     key by key (text and reasoning messages, the ToolCall, the tool message,
 *     the activity); the creating event's subagentRunId is the item's.
 *  6. An ACTIVITY_DELTA patch applies atomically; its result must be an
 *     object.
 */
#include "reducer_internal.h"

#include "agentbus/jsonpatch.h"

#include <string.h>

/* ---- text messages ---- */

static json_t *msg_open(ab_reducer_t *r, const char *id, size_t n, const ab_val_t *ev)
{
    rd_coll_t *c = &r->coll[RD_MESSAGES];
    json_t *m = ab__rd_find(c, id, n);
    if (m)
        return m;
    size_t rn = 9;
    const char *role = ab__rd_str(ev, "role", &rn);
    m = json_object();
    if (!m) {
        r->oom = true;
        return NULL;
    }
    ab__rd_set(r, m, "id", json_stringn(id, n));
    ab__rd_set(r, m, "role", role ? json_stringn(role, rn) : json_string("assistant"));
    ab__rd_set(r, m, "content", json_string(""));
    ab__rd_copy_str(r, m, ev, "name");
    ab__rd_copy_str(r, m, ev, "subagentRunId");
    return ab__rd_add(r, c, id, n, m);
}

void ab__rd_text_start(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = ab__rd_str(ev, "messageId", &n);
    if (id)
        ab__rd_meta(r, msg_open(r, id, n, ev), ev);
}

void ab__rd_text_content(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n, dn = 0;
    const char *id = ab__rd_str(ev, "messageId", &n);
    const char *d = ab__rd_str(ev, "delta", &dn);
    json_t *m = id ? msg_open(r, id, n, ev) : NULL;
    if (m && d)
        ab__rd_append(r, m, "content", d, dn);
    ab__rd_meta(r, m, ev);
}

void ab__rd_text_end(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = ab__rd_str(ev, "messageId", &n);
    if (id)
        ab__rd_meta(r, ab__rd_find(&r->coll[RD_MESSAGES], id, n), ev);
}

void ab__rd_text_chunk(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n = 0, dn = 0;
    const char *id = ab__rd_lane(r, "text", ev, ab__rd_str(ev, "messageId", &n), &n);
    if (!id) {
        ab__rd_warn(r, "TEXT_MESSAGE_CHUNK without messageId and no open chunk stream: skipped");
        return;
    }
    json_t *m = msg_open(r, id, n, ev);
    const char *d = ab__rd_str(ev, "delta", &dn);
    if (m && d)
        ab__rd_append(r, m, "content", d, dn);
    ab__rd_meta(r, m, ev);
}

/* ---- tool calls ---- */

/* The "function" object of an AG-UI ToolCall, or NULL. */
static json_t *fn_of(json_t *entry)
{
    json_t *f = json_object_get(entry, "function");
    return json_is_object(f) ? f : NULL;
}

/* The AG-UI ToolCall of call [id, id+n) in its holder's toolCalls, or NULL. */
static json_t *call_entry(ab_reducer_t *r, const char *id, size_t n)
{
    json_t *h = json_object_getn(r->holders, id, n);
    if (!json_is_string(h))
        return NULL;
    json_t *m = ab__rd_find(&r->coll[RD_MESSAGES], json_string_value(h), json_string_length(h));
    json_t *calls = json_object_get(m, "toolCalls");
    for (size_t i = json_array_size(calls); i-- > 0;) { /* the newest call is the usual one */
        json_t *e = json_array_get(calls, i), *eid = json_object_get(e, "id");
        if (json_is_string(eid) && json_string_length(eid) == n &&
            memcmp(json_string_value(eid), id, n) == 0)
            return e;
    }
    return NULL;
}

/*
 * The assistant message a new tool call goes into, picked as the AG-UI client
 * picks it: the parentMessageId's message when that is an assistant message;
 * else a new assistant message whose id is the parentMessageId (when no
 * message has it) or the toolCallId. NULL (warned) when that id is taken by a
 * message of another role.
 */
static json_t *holder_for(ab_reducer_t *r, const char *tid, size_t tn, const ab_val_t *ev)
{
    rd_coll_t *c = &r->coll[RD_MESSAGES];
    size_t pn = 0, hn = tn;
    const char *p = ab__rd_str(ev, "parentMessageId", &pn), *hid = tid;
    json_t *m = p ? ab__rd_find(c, p, pn) : NULL;
    if (m && ab__rd_is(m, "role", "assistant"))
        return m;
    if (p && !m)
        hid = p, hn = pn;
    if ((m = ab__rd_find(c, hid, hn)) != NULL) {
        if (ab__rd_is(m, "role", "assistant"))
            return m;
        ab__rd_warn(r,
                    "tool call '%.*s': message '%.*s' is not an assistant message; the call is "
                    "only in toolCalls",
                    (int)tn, tid, (int)hn, hid);
        return NULL;
    }
    m = json_object();
    if (!m) {
        r->oom = true;
        return NULL;
    }
    ab__rd_set(r, m, "id", json_stringn(hid, hn));
    ab__rd_set(r, m, "role", json_string("assistant"));
    ab__rd_set(r, m, "toolCalls", json_array());
    ab__rd_copy_str(r, m, ev, "subagentRunId");
    return ab__rd_add(r, c, hid, hn, m);
}

/* Put call @p t (its toolCalls item) into its holder's toolCalls as an AG-UI ToolCall. */
static json_t *call_attach(ab_reducer_t *r, json_t *t, const char *id, size_t n, const ab_val_t *ev)
{
    json_t *m = holder_for(r, id, n, ev);
    if (!m)
        return NULL;
    json_t *calls = json_object_get(m, "toolCalls");
    if (!json_is_array(calls)) {
        calls = json_array();
        ab__rd_set(r, m, "toolCalls", calls);
        if (r->oom)
            return NULL;
    }
    json_t *args = json_object_get(t, "arguments");
    if (!json_is_string(args)) { /* a call a snapshot gave without arguments */
        args = json_string("");
        ab__rd_set(r, t, "arguments", args);
        if (r->oom)
            return NULL;
    }
    json_t *name = json_object_get(t, "name"), *fn = json_object(), *e = json_object();
    if (fn) { /* name and arguments are the nodes of the toolCalls item: shared, not copied */
        ab__rd_set(r, fn, "name", json_is_string(name) ? json_incref(name) : json_string(""));
        ab__rd_set(r, fn, "arguments", json_incref(args));
    }
    if (e) {
        ab__rd_set(r, e, "id", json_stringn(id, n));
        ab__rd_set(r, e, "type", json_string("function"));
    }
    ab__rd_set(r, e, "function", fn);
    if (!e || r->oom) {
        json_decref(e);
        r->oom = true;
        return NULL;
    }
    json_t *hid = json_object_get(m, "id");
    if (json_array_append_new(calls, e) != 0 ||
        json_object_setn_new_nocheck(r->holders, id, n, json_incref(hid)) != 0) {
        r->oom = true;
        return NULL;
    }
    return e;
}

/*
 * The toolCalls item of call [id, id+n), created when unknown, with the
 * event's toolCallName and parentMessageId; *entry = its AG-UI ToolCall. A
 * call is attached to a holder when it is created or restarted (the event
 * names the tool), never by a continuation, so a failed attachment warns once.
 */
static json_t *tool_open(ab_reducer_t *r, const char *id, size_t n, const ab_val_t *ev,
                         json_t **entry)
{
    rd_coll_t *c = &r->coll[RD_TOOLS];
    json_t *t = ab__rd_find(c, id, n);
    bool created = !t;
    if (!t) {
        t = json_object();
        if (!t)
            return NULL;
        ab__rd_set(r, t, "id", json_stringn(id, n));
        ab__rd_set(r, t, "arguments", json_string(""));
        t = ab__rd_add(r, c, id, n, t);
        if (!t)
            return NULL;
    }
    size_t sn;
    const char *s = ab__rd_str(ev, "toolCallName", &sn);
    json_t *name = s ? json_stringn(s, sn) : NULL;
    if (s && !name)
        r->oom = true;
    if (name)
        ab__rd_set(r, t, "name", json_incref(name));
    ab__rd_copy_str(r, t, ev, "parentMessageId");
    json_t *e = call_entry(r, id, n);
    if (!e && (created || name))
        e = call_attach(r, t, id, n, ev);
    else if (e && name && fn_of(e))
        ab__rd_set(r, fn_of(e), "name", json_incref(name));
    json_decref(name);
    *entry = e;
    return t;
}

void ab__rd_calls_share(ab_reducer_t *r)
{
    static const char *const keys[] = {"name", "arguments"};
    json_t *calls = r->coll[RD_TOOLS].arr;
    for (size_t i = 0; i < json_array_size(calls); i++) {
        json_t *t = json_array_get(calls, i), *id = json_object_get(t, "id");
        json_t *fn = json_is_string(id)
                         ? fn_of(call_entry(r, json_string_value(id), json_string_length(id)))
                         : NULL;
        for (size_t k = 0; fn && k < 2; k++) {
            json_t *a = json_object_get(t, keys[k]), *b = json_object_get(fn, keys[k]);
            if (a && b && a != b && json_equal(a, b))
                ab__rd_set(r, fn, keys[k], json_incref(a));
        }
    }
}

void ab__rd_tool_start(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    json_t *e = NULL;
    const char *id = ab__rd_str(ev, "toolCallId", &n);
    if (id && tool_open(r, id, n, ev, &e))
        ab__rd_meta(r, e, ev);
}

void ab__rd_tool_args(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n, dn = 0;
    const char *id = ab__rd_str(ev, "toolCallId", &n);
    const char *d = ab__rd_str(ev, "delta", &dn);
    if (!id)
        return;
    json_t *e = NULL, *t = ab__rd_find(&r->coll[RD_TOOLS], id, n);
    /* the fast path: the call's arguments are pending (their mirror already known) */
    if (!t || !ab__rd_pending(r, json_object_get(t, "arguments")) || ab_val_get(ev, "metadata"))
        t = tool_open(r, id, n, ev, &e);
    if (t && d)
        ab__rd_append2(r, t, fn_of(e), "arguments", d, dn);
    ab__rd_meta(r, e, ev);
}

void ab__rd_tool_end(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = ab__rd_str(ev, "toolCallId", &n);
    if (id && ab_val_get(ev, "metadata"))
        ab__rd_meta(r, call_entry(r, id, n), ev);
}

void ab__rd_tool_chunk(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n = 0, dn = 0;
    const char *id = ab__rd_lane(r, "tool", ev, ab__rd_str(ev, "toolCallId", &n), &n);
    if (!id) {
        ab__rd_warn(r, "TOOL_CALL_CHUNK without toolCallId and no open chunk stream: skipped");
        return;
    }
    json_t *e = NULL, *t = tool_open(r, id, n, ev, &e);
    const char *d = ab__rd_str(ev, "delta", &dn);
    if (t && d)
        ab__rd_append2(r, t, fn_of(e), "arguments", d, dn);
    ab__rd_meta(r, e, ev);
}

/* Where a new tool message for call [tid, tid+tn) goes: after the call's
 * holder and the tool messages that follow it, else at the end. */
static size_t result_slot(ab_reducer_t *r, const char *tid, size_t tn)
{
    rd_coll_t *c = &r->coll[RD_MESSAGES];
    size_t end = json_array_size(c->arr);
    json_t *h = json_object_getn(r->holders, tid, tn);
    long at = json_is_string(h) ? ab__rd_pos(c, json_string_value(h), json_string_length(h)) : -1;
    if (at < 0)
        return end;
    size_t i = (size_t)at + 1;
    while (i < end && ab__rd_is(json_array_get(c->arr, i), "role", "tool"))
        i++;
    return i;
}

void ab__rd_tool_result(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n, tn;
    const char *id = ab__rd_str(ev, "messageId", &n);
    const char *tid = ab__rd_str(ev, "toolCallId", &tn);
    const ab_val_t *content = ab_val_get(ev, "content");
    if (!id || !tid || !content)
        return;
    rd_coll_t *c = &r->coll[RD_MESSAGES];
    json_t *m = ab__rd_find(c, id, n);
    if (!m) {
        m = json_object();
        if (m) {
            ab__rd_set(r, m, "id", json_stringn(id, n));
            ab__rd_set(r, m, "role", json_string("tool"));
            ab__rd_set(r, m, "toolCallId", json_stringn(tid, tn));
            ab__rd_copy_str(r, m, ev, "subagentRunId");
        }
        if (!(m = ab__rd_insert(r, c, result_slot(r, tid, tn), id, n, m)))
            return;
    }
    ab__rd_set(r, m, "content", ab__val_to_jansson(content));
    ab__rd_meta(r, m, ev);
    json_t *t = ab__rd_find(&r->coll[RD_TOOLS], tid, tn);
    if (t)
        ab__rd_set(r, t, "result", ab__val_to_jansson(content));
}

/* ---- reasoning ---- */

void ab__rd_reasoning_span(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = ab__rd_str(ev, "messageId", &n);
    if (!id)
        return;
    rd_coll_t *c = &r->coll[RD_SPANS];
    json_t *s = ab__rd_find(c, id, n);
    if (!s) {
        s = json_object();
        if (!s || !(s = ab__rd_add(r, c, id, n, s)))
            return;
        ab__rd_set(r, s, "id", json_stringn(id, n));
        ab__rd_set(r, s, "runId", json_string(r->run));
    }
    ab__rd_set(r, s, "status", json_string("open"));
}

void ab__rd_reasoning_span_end(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = ab__rd_str(ev, "messageId", &n);
    json_t *s = id ? ab__rd_find(&r->coll[RD_SPANS], id, n) : NULL;
    if (s)
        ab__rd_set(r, s, "status", json_string("closed"));
}

static json_t *reasoning_open(ab_reducer_t *r, const char *id, size_t n, const ab_val_t *ev)
{
    rd_coll_t *c = &r->coll[RD_REASONING];
    json_t *m = ab__rd_find(c, id, n);
    if (m)
        return m;
    m = json_object();
    if (!m || !(m = ab__rd_add(r, c, id, n, m)))
        return NULL;
    ab__rd_set(r, m, "messageId", json_stringn(id, n));
    ab__rd_set(r, m, "content", json_string(""));
    ab__rd_copy_str(r, m, ev, "subagentRunId");
    return m;
}

void ab__rd_reasoning_start(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = ab__rd_str(ev, "messageId", &n);
    if (id)
        ab__rd_meta(r, reasoning_open(r, id, n, ev), ev);
}

void ab__rd_reasoning_content(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n, dn = 0;
    const char *id = ab__rd_str(ev, "messageId", &n);
    const char *d = ab__rd_str(ev, "delta", &dn);
    json_t *m = id ? reasoning_open(r, id, n, ev) : NULL;
    if (m && d)
        ab__rd_append(r, m, "content", d, dn);
    ab__rd_meta(r, m, ev);
}

void ab__rd_reasoning_end(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = ab__rd_str(ev, "messageId", &n);
    if (id)
        ab__rd_meta(r, ab__rd_find(&r->coll[RD_REASONING], id, n), ev);
}

void ab__rd_reasoning_chunk(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n = 0, dn = 0;
    const char *id = ab__rd_lane(r, "reasoning", ev, ab__rd_str(ev, "messageId", &n), &n);
    if (!id) {
        ab__rd_warn(r,
                    "REASONING_MESSAGE_CHUNK without messageId and no open chunk stream: skipped");
        return;
    }
    json_t *m = reasoning_open(r, id, n, ev);
    const char *d = ab__rd_str(ev, "delta", &dn);
    if (m && d)
        ab__rd_append(r, m, "content", d, dn);
    ab__rd_meta(r, m, ev);
}

void ab__rd_encrypted_value(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t sn = 0, n = 0, vn = 0;
    const char *sub = ab__rd_str(ev, "subtype", &sn);
    const char *id = ab__rd_str(ev, "entityId", &n);
    const char *v = ab__rd_str(ev, "encryptedValue", &vn);
    if (!sub || !id || !v)
        return;
    json_t *target = NULL, *entry = NULL;
    if (sn == 9 && memcmp(sub, "tool-call", 9) == 0) {
        target = ab__rd_find(&r->coll[RD_TOOLS], id, n);
        entry = call_entry(r, id, n); /* the AG-UI ToolCall in its message */
    } else {
        target = ab__rd_find(&r->coll[RD_MESSAGES], id, n);
        if (!target)
            target = ab__rd_find(&r->coll[RD_REASONING], id, n);
    }
    if (!target && !entry) {
        ab__rd_warn(r, "REASONING_ENCRYPTED_VALUE for unknown %.*s '%.*s': skipped", (int)sn, sub,
                    (int)n, id);
        return;
    }
    if (target)
        ab__rd_set(r, target, "encryptedValue", json_stringn(v, vn));
    if (entry)
        ab__rd_set(r, entry, "encryptedValue", json_stringn(v, vn));
}

/* ---- activities ---- */

void ab__rd_activity_snapshot(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = ab__rd_str(ev, "messageId", &n);
    const ab_val_t *content = ab_val_get(ev, "content");
    const ab_val_t *replace = ab_val_get(ev, "replace");
    if (!id || !content)
        return;
    rd_coll_t *c = &r->coll[RD_ACTIVITIES];
    json_t *a = ab__rd_find(c, id, n);
    bool keep = a && replace && replace->type == AB_VAL_BOOL && !replace->u.b;
    if (!a) {
        a = json_object();
        if (!a || !(a = ab__rd_add(r, c, id, n, a)))
            return;
        ab__rd_set(r, a, "messageId", json_stringn(id, n));
    }
    if (!keep) { /* replace:false keeps an existing activity; a replacement re-mints its owner */
        ab__rd_copy_str(r, a, ev, "activityType");
        ab__rd_set(r, a, "content", ab__val_to_jansson(content));
        json_object_del(a, "subagentRunId");
        ab__rd_copy_str(r, a, ev, "subagentRunId");
    }
    ab__rd_meta(r, a, ev); /* metadata accumulates across replacements */
}

static void activity_patch_warn(void *ud, size_t index, const char *op)
{
    ab__rd_warn(ud, "activity patch operation %zu skipped: unknown op '%s'", index, op);
}

void ab__rd_activity_delta(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = ab__rd_str(ev, "messageId", &n);
    const ab_val_t *p = ab_val_get(ev, "patch");
    if (!id || !p)
        return;
    json_t *a = ab__rd_find(&r->coll[RD_ACTIVITIES], id, n);
    if (!a) {
        ab__rd_warn(r, "ACTIVITY_DELTA for unknown activity '%.*s': skipped", (int)n, id);
        return;
    }
    ab__rd_meta(r, a, ev); /* the event's metadata does not depend on its patch applying */
    json_t *patch = ab__val_to_jansson(p);
    json_t *content = json_incref(json_object_get(a, "content"));
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st =
        patch ? ab__jsonpatch_apply_ex(&content, patch, activity_patch_warn, r, &err) : AB_NOMEM;
    json_decref(patch);
    if (st == AB_OK && json_is_object(content)) {
        ab__rd_set(r, a, "content", content);
        ab__rd_copy_str(r, a, ev, "activityType");
        return;
    }
    json_decref(content);
    if (st == AB_NOMEM)
        r->oom = true;
    else
        ab__rd_warn(r, "ACTIVITY_DELTA for '%.*s' not applied: %s", (int)n, id,
                    st == AB_OK ? "result is not an object" : err.message);
}

/*
 * reducer_items.c - messages, tool calls, reasoning and activities of the
 * thread projection (docs/REDUCER.md, "messages" to "activities").
 *
 * Invariants:
 *  1. Streamed items are created by their first event (start, content or
 *     chunk - lenient about a missing start) and grow by appending deltas in
 *     arrival order; a reopening start appends to the existing item.
 *  2. A chunk without an id continues the current item of its lane (kind x
 *     subagentRunId); run boundaries and MESSAGES_SNAPSHOT end every lane.
 *  3. MESSAGES_SNAPSHOT keeps positions: a message whose id is in the
 *     snapshot is replaced where it stands, new ids are appended in snapshot
 *     order, others are dropped. Activities and reasoning are only replaced
 *     when the snapshot holds at least one message of that role (AG-UI 1.0
 *     section 5).
 *  4. An ACTIVITY_DELTA applies atomically; its result must be an object.
 */
#include "reducer_internal.h"

#include "agentbus/jsonpatch.h"

#include <string.h>

/* ---- text messages ---- */

static json_t *msg_open(ab_reducer_t *r, const char *id, size_t n, const ab_val_t *ev)
{
    rd_coll_t *c = &r->coll[RD_MESSAGES];
    json_t *m = rd_find(c, id, n);
    if (m)
        return m;
    size_t rn = 9;
    const char *role = rd_str(ev, "role", &rn);
    m = json_object();
    if (!m) {
        r->oom = true;
        return NULL;
    }
    rd_set(r, m, "id", json_stringn(id, n));
    rd_set(r, m, "role", role ? json_stringn(role, rn) : json_string("assistant"));
    rd_set(r, m, "content", json_string(""));
    rd_copy_str(r, m, ev, "name");
    return rd_add(r, c, id, n, m);
}

void rd_text_start(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = rd_str(ev, "messageId", &n);
    if (id)
        msg_open(r, id, n, ev);
}

void rd_text_content(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n, dn = 0;
    const char *id = rd_str(ev, "messageId", &n);
    const char *d = rd_str(ev, "delta", &dn);
    json_t *m = id ? msg_open(r, id, n, ev) : NULL;
    if (m && d)
        rd_append(r, m, "content", d, dn);
}

void rd_text_chunk(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n = 0, dn = 0;
    const char *id = rd_lane(r, "text", ev, rd_str(ev, "messageId", &n), &n);
    if (!id) {
        rd_warn(r, "TEXT_MESSAGE_CHUNK without messageId and no open chunk stream: skipped");
        return;
    }
    json_t *m = msg_open(r, id, n, ev);
    const char *d = rd_str(ev, "delta", &dn);
    if (m && d)
        rd_append(r, m, "content", d, dn);
}

/* ---- tool calls ---- */

static json_t *tool_open(ab_reducer_t *r, const char *id, size_t n, const ab_val_t *ev)
{
    rd_coll_t *c = &r->coll[RD_TOOLS];
    json_t *t = rd_find(c, id, n);
    if (!t) {
        t = json_object();
        if (!t)
            return NULL;
        rd_set(r, t, "id", json_stringn(id, n));
        rd_set(r, t, "arguments", json_string(""));
        t = rd_add(r, c, id, n, t);
        if (!t)
            return NULL;
    }
    size_t sn;
    const char *s = rd_str(ev, "toolCallName", &sn);
    if (s)
        rd_set(r, t, "name", json_stringn(s, sn));
    rd_copy_str(r, t, ev, "parentMessageId");
    return t;
}

void rd_tool_start(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = rd_str(ev, "toolCallId", &n);
    if (id)
        tool_open(r, id, n, ev);
}

void rd_tool_args(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n, dn = 0;
    const char *id = rd_str(ev, "toolCallId", &n);
    const char *d = rd_str(ev, "delta", &dn);
    json_t *t = id ? tool_open(r, id, n, ev) : NULL;
    if (t && d)
        rd_append(r, t, "arguments", d, dn);
}

void rd_tool_chunk(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n = 0, dn = 0;
    const char *id = rd_lane(r, "tool", ev, rd_str(ev, "toolCallId", &n), &n);
    if (!id) {
        rd_warn(r, "TOOL_CALL_CHUNK without toolCallId and no open chunk stream: skipped");
        return;
    }
    json_t *t = tool_open(r, id, n, ev);
    const char *d = rd_str(ev, "delta", &dn);
    if (t && d)
        rd_append(r, t, "arguments", d, dn);
}

void rd_tool_result(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n, tn;
    const char *id = rd_str(ev, "messageId", &n);
    const char *tid = rd_str(ev, "toolCallId", &tn);
    const ab_val_t *content = ab_val_get(ev, "content");
    if (!id || !tid || !content)
        return;
    rd_coll_t *c = &r->coll[RD_MESSAGES];
    json_t *m = rd_find(c, id, n);
    if (!m) {
        m = json_object();
        if (!m || !(m = rd_add(r, c, id, n, m)))
            return;
        rd_set(r, m, "id", json_stringn(id, n));
        rd_set(r, m, "role", json_string("tool"));
        rd_set(r, m, "toolCallId", json_stringn(tid, tn));
    }
    rd_set(r, m, "content", ab_val_to_jansson(content));
    json_t *t = rd_find(&r->coll[RD_TOOLS], tid, tn);
    if (t)
        rd_set(r, t, "result", ab_val_to_jansson(content));
}

/* ---- reasoning ---- */

void rd_reasoning_span(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = rd_str(ev, "messageId", &n);
    if (!id)
        return;
    rd_coll_t *c = &r->coll[RD_SPANS];
    json_t *s = rd_find(c, id, n);
    if (!s) {
        s = json_object();
        if (!s || !(s = rd_add(r, c, id, n, s)))
            return;
        rd_set(r, s, "id", json_stringn(id, n));
        rd_set(r, s, "runId", json_string(r->run));
    }
    rd_set(r, s, "status", json_string("open"));
}

void rd_reasoning_span_end(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = rd_str(ev, "messageId", &n);
    json_t *s = id ? rd_find(&r->coll[RD_SPANS], id, n) : NULL;
    if (s)
        rd_set(r, s, "status", json_string("closed"));
}

static json_t *reasoning_open(ab_reducer_t *r, const char *id, size_t n)
{
    rd_coll_t *c = &r->coll[RD_REASONING];
    json_t *m = rd_find(c, id, n);
    if (m)
        return m;
    m = json_object();
    if (!m || !(m = rd_add(r, c, id, n, m)))
        return NULL;
    rd_set(r, m, "messageId", json_stringn(id, n));
    rd_set(r, m, "content", json_string(""));
    return m;
}

void rd_reasoning_start(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = rd_str(ev, "messageId", &n);
    if (id)
        reasoning_open(r, id, n);
}

void rd_reasoning_content(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n, dn = 0;
    const char *id = rd_str(ev, "messageId", &n);
    const char *d = rd_str(ev, "delta", &dn);
    json_t *m = id ? reasoning_open(r, id, n) : NULL;
    if (m && d)
        rd_append(r, m, "content", d, dn);
}

void rd_reasoning_chunk(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n = 0, dn = 0;
    const char *id = rd_lane(r, "reasoning", ev, rd_str(ev, "messageId", &n), &n);
    if (!id) {
        rd_warn(r, "REASONING_MESSAGE_CHUNK without messageId and no open chunk stream: skipped");
        return;
    }
    json_t *m = reasoning_open(r, id, n);
    const char *d = rd_str(ev, "delta", &dn);
    if (m && d)
        rd_append(r, m, "content", d, dn);
}

void rd_encrypted_value(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t sn = 0, n = 0, vn = 0;
    const char *sub = rd_str(ev, "subtype", &sn);
    const char *id = rd_str(ev, "entityId", &n);
    const char *v = rd_str(ev, "encryptedValue", &vn);
    if (!sub || !id || !v)
        return;
    json_t *target = NULL;
    if (sn == 9 && memcmp(sub, "tool-call", 9) == 0) {
        target = rd_find(&r->coll[RD_TOOLS], id, n);
    } else {
        target = rd_find(&r->coll[RD_MESSAGES], id, n);
        if (!target)
            target = rd_find(&r->coll[RD_REASONING], id, n);
    }
    if (!target) {
        rd_warn(r, "REASONING_ENCRYPTED_VALUE for unknown %.*s '%.*s': skipped", (int)sn, sub,
                (int)n, id);
        return;
    }
    rd_set(r, target, "encryptedValue", json_stringn(v, vn));
}

/* ---- activities ---- */

void rd_activity_snapshot(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = rd_str(ev, "messageId", &n);
    const ab_val_t *content = ab_val_get(ev, "content");
    const ab_val_t *replace = ab_val_get(ev, "replace");
    if (!id || !content)
        return;
    rd_coll_t *c = &r->coll[RD_ACTIVITIES];
    json_t *a = rd_find(c, id, n);
    if (a && replace && replace->type == AB_VAL_BOOL && !replace->u.b)
        return; /* replace:false keeps an existing activity */
    if (!a) {
        a = json_object();
        if (!a || !(a = rd_add(r, c, id, n, a)))
            return;
        rd_set(r, a, "messageId", json_stringn(id, n));
    }
    rd_copy_str(r, a, ev, "activityType");
    rd_set(r, a, "content", ab_val_to_jansson(content));
}

static void activity_patch_warn(void *ud, size_t index, const char *op)
{
    rd_warn(ud, "activity patch operation %zu skipped: unknown op '%s'", index, op);
}

void rd_activity_delta(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *id = rd_str(ev, "messageId", &n);
    const ab_val_t *p = ab_val_get(ev, "patch");
    if (!id || !p)
        return;
    json_t *a = rd_find(&r->coll[RD_ACTIVITIES], id, n);
    if (!a) {
        rd_warn(r, "ACTIVITY_DELTA for unknown activity '%.*s': skipped", (int)n, id);
        return;
    }
    json_t *patch = ab_val_to_jansson(p);
    json_t *content = json_incref(json_object_get(a, "content"));
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st =
        patch ? ab_jsonpatch_apply_ex(&content, patch, activity_patch_warn, r, &err) : AB_NOMEM;
    json_decref(patch);
    if (st == AB_OK && json_is_object(content)) {
        rd_set(r, a, "content", content);
        rd_copy_str(r, a, ev, "activityType");
        return;
    }
    json_decref(content);
    if (st == AB_NOMEM)
        r->oom = true;
    else
        rd_warn(r, "ACTIVITY_DELTA for '%.*s' not applied: %s", (int)n, id,
                st == AB_OK ? "result is not an object" : err.message);
}

/* ---- MESSAGES_SNAPSHOT ---- */

/* Replace @p c by @p snap: matching ids in place, new ids appended. */
static void merge_snapshot(ab_reducer_t *r, rd_coll_t *c, json_t *snap)
{
    json_t *sidx = json_object(), *out = json_array();
    for (size_t i = 0; sidx && i < json_array_size(snap); i++) {
        json_t *id = json_object_get(json_array_get(snap, i), c->key);
        if (json_is_string(id) &&
            json_object_setn(sidx, json_string_value(id), json_string_length(id),
                             json_array_get(snap, i)) != 0)
            r->oom = true;
    }
    for (size_t i = 0; sidx && out && i < json_array_size(c->arr); i++) {
        json_t *id = json_object_get(json_array_get(c->arr, i), c->key);
        json_t *m = json_object_getn(sidx, json_string_value(id), json_string_length(id));
        if (m && json_array_append(out, m) != 0)
            r->oom = true;
    }
    for (size_t i = 0; sidx && out && i < json_array_size(snap); i++) {
        json_t *m = json_array_get(snap, i);
        json_t *id = json_object_get(m, c->key);
        if (json_is_string(id) && !rd_find(c, json_string_value(id), json_string_length(id)) &&
            json_array_append(out, m) != 0)
            r->oom = true;
    }
    if (!sidx)
        r->oom = true;
    json_decref(sidx);
    rd_replace(r, c, out);
}

static void set_present(ab_reducer_t *r, json_t *obj, const char *key, json_t *v)
{
    if (v)
        rd_set(r, obj, key, json_incref(v));
}

/* Tool calls of an assistant message and results of a tool message. */
static void snapshot_tools(ab_reducer_t *r, json_t *m, const char *role)
{
    json_t *calls = json_object_get(m, "toolCalls");
    for (size_t i = 0; strcmp(role, "assistant") == 0 && i < json_array_size(calls); i++) {
        json_t *tc = json_array_get(calls, i), *fn = json_object_get(tc, "function");
        const char *id = json_string_value(json_object_get(tc, "id"));
        if (!id)
            continue;
        json_t *t = rd_find(&r->coll[RD_TOOLS], id, strlen(id));
        if (!t && !(t = rd_add(r, &r->coll[RD_TOOLS], id, strlen(id), json_object())))
            return;
        rd_set(r, t, "id", json_string(id));
        set_present(r, t, "name", json_object_get(fn, "name"));
        set_present(r, t, "arguments", json_object_get(fn, "arguments"));
        set_present(r, t, "parentMessageId", json_object_get(m, "id"));
    }
    const char *tid = json_string_value(json_object_get(m, "toolCallId"));
    json_t *t =
        tid && strcmp(role, "tool") == 0 ? rd_find(&r->coll[RD_TOOLS], tid, strlen(tid)) : NULL;
    if (t && json_object_get(m, "content"))
        rd_set(r, t, "result", json_deep_copy(json_object_get(m, "content")));
}

/* Sort one snapshot message into messages, activities or reasoning. */
static void snapshot_one(ab_reducer_t *r, json_t *m, json_t *plain, json_t *acts, json_t *reas)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    json_t *id = json_object_get(m, "id");
    if (!role || !json_is_string(id))
        return;
    json_t *dst = plain, *item = json_incref(m);
    if (strcmp(role, "activity") == 0 || strcmp(role, "reasoning") == 0) {
        bool act = role[0] == 'a';
        dst = act ? acts : reas;
        json_decref(item);
        item = act ? json_pack("{s:O,s:O*,s:O*}", "messageId", id, "activityType",
                               json_object_get(m, "activityType"), "content",
                               json_object_get(m, "content"))
                   : json_pack("{s:O,s:O*}", "messageId", id, "content",
                               json_object_get(m, "content"));
        json_t *ev = json_object_get(m, "encryptedValue");
        if (item && !act && ev)
            rd_set(r, item, "encryptedValue", json_incref(ev));
    } else {
        snapshot_tools(r, m, role);
    }
    if (!item || json_array_append_new(dst, item) != 0)
        r->oom = true;
}

void rd_messages_snapshot(ab_reducer_t *r, const ab_val_t *ev)
{
    const ab_val_t *mv = ab_val_get(ev, "messages");
    if (!mv || mv->type != AB_VAL_ARRAY)
        return;
    json_t *msgs = ab_val_to_jansson(mv);
    json_t *plain = json_array(), *acts = json_array(), *reas = json_array();
    if (!msgs || !plain || !acts || !reas) {
        r->oom = true;
        goto out;
    }
    for (size_t i = 0; i < json_array_size(msgs); i++)
        snapshot_one(r, json_array_get(msgs, i), plain, acts, reas);
    merge_snapshot(r, &r->coll[RD_MESSAGES], plain);
    if (json_array_size(acts) > 0)
        merge_snapshot(r, &r->coll[RD_ACTIVITIES], acts);
    if (json_array_size(reas) > 0)
        merge_snapshot(r, &r->coll[RD_REASONING], reas);
    json_object_clear(r->lanes);
out:
    json_decref(msgs);
    json_decref(plain);
    json_decref(acts);
    json_decref(reas);
}

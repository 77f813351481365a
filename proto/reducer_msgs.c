/*
 * reducer_msgs.c - whole AG-UI messages into the thread projection:
 * MESSAGES_SNAPSHOT (replacement by the rule of AG-UI 1.0 section 5),
 * RUN_STARTED.input.messages (the history the consumer sent) and the index
 * of which assistant message holds each tool call (docs/REDUCER.md,
 * "messages").
 *
 * Invariants:
 *  1. MESSAGES_SNAPSHOT keeps positions: a message whose id is in the
 *     snapshot is replaced where it stands, new ids are appended in snapshot
 *     order, others are dropped. Activities and reasoning are only replaced
 *     when the snapshot holds at least one message of that role.
 *  2. An input message whose id the thread already holds (in messages,
 *     activities or reasoning) is left alone: the thread's copy, folded from
 *     the producer's events, wins. The others are appended in input order.
 *  3. Activity and reasoning messages become items of "activities" /
 *     "reasoning" ({messageId, ...}); every other role stays an AG-UI
 *     message as given.
 *  4. After a snapshot or input, r->holders maps the id of every tool call
 *     of an assistant message to the first message holding it.
 */
#include "reducer_internal.h"

#include <string.h>

static void set_present(ab_reducer_t *r, json_t *obj, const char *key, json_t *v)
{
    if (v)
        ab__rd_set(r, obj, key, json_incref(v));
}

/* Index the tool calls of assistant message @p m that no message holds yet. */
static void holders_note(ab_reducer_t *r, json_t *m)
{
    json_t *calls = json_object_get(m, "toolCalls"), *mid = json_object_get(m, "id");
    if (!json_is_string(mid) || !ab__rd_is(m, "role", "assistant"))
        return;
    for (size_t i = 0; i < json_array_size(calls); i++) {
        json_t *id = json_object_get(json_array_get(calls, i), "id");
        if (!json_is_string(id) ||
            json_object_getn(r->holders, json_string_value(id), json_string_length(id)))
            continue;
        if (json_object_setn_new_nocheck(r->holders, json_string_value(id), json_string_length(id),
                                         json_incref(mid)) != 0)
            r->oom = true;
    }
}

void ab__rd_holders_rebuild(ab_reducer_t *r)
{
    json_t *msgs = r->coll[RD_MESSAGES].arr;
    json_object_clear(r->holders);
    for (size_t i = 0; i < json_array_size(msgs); i++)
        holders_note(r, json_array_get(msgs, i));
}

/*
 * The toolCalls items of whole message @p m: an assistant message's calls
 * (name, arguments, parentMessageId = the message) and a tool message's
 * result. A snapshot (@p authoritative) overwrites what is known; the input
 * only adds what is missing.
 */
static void message_tools(ab_reducer_t *r, json_t *m, bool authoritative)
{
    rd_coll_t *c = &r->coll[RD_TOOLS];
    json_t *calls = ab__rd_is(m, "role", "assistant") ? json_object_get(m, "toolCalls") : NULL;
    for (size_t i = 0; i < json_array_size(calls); i++) {
        json_t *tc = json_array_get(calls, i), *fn = json_object_get(tc, "function");
        json_t *id = json_object_get(tc, "id");
        if (!json_is_string(id))
            continue;
        const char *s = json_string_value(id);
        size_t n = json_string_length(id);
        json_t *t = ab__rd_find(c, s, n);
        if (t && !authoritative)
            continue;
        if (!t && !(t = ab__rd_add(r, c, s, n, json_object())))
            return;
        set_present(r, t, "id", id);
        set_present(r, t, "name", json_object_get(fn, "name"));
        set_present(r, t, "arguments", json_object_get(fn, "arguments"));
        set_present(r, t, "parentMessageId", json_object_get(m, "id"));
    }
    json_t *tid = json_object_get(m, "toolCallId"), *content = json_object_get(m, "content");
    json_t *t = json_is_string(tid) && ab__rd_is(m, "role", "tool")
                    ? ab__rd_find(c, json_string_value(tid), json_string_length(tid))
                    : NULL;
    if (t && content && (authoritative || !json_object_get(t, "result")))
        ab__rd_set(r, t, "result", json_deep_copy(content));
}

/* An activity or reasoning message as an item of "activities" / "reasoning". */
static json_t *side_item(ab_reducer_t *r, json_t *m, bool activity)
{
    json_t *item = json_object();
    if (!item) {
        r->oom = true;
        return NULL;
    }
    set_present(r, item, "messageId", json_object_get(m, "id"));
    if (activity)
        set_present(r, item, "activityType", json_object_get(m, "activityType"));
    set_present(r, item, "content", json_object_get(m, "content"));
    if (!activity)
        set_present(r, item, "encryptedValue", json_object_get(m, "encryptedValue"));
    set_present(r, item, "subagentRunId", json_object_get(m, "subagentRunId"));
    set_present(r, item, "metadata", json_object_get(m, "metadata"));
    return item;
}

/* 1 for an activity message, 2 for a reasoning message, 0 for the others. */
static int side_kind(const json_t *m)
{
    return ab__rd_is(m, "role", "activity") ? 1 : ab__rd_is(m, "role", "reasoning") ? 2 : 0;
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
        if (json_is_string(id) && !ab__rd_find(c, json_string_value(id), json_string_length(id)) &&
            json_array_append(out, m) != 0)
            r->oom = true;
    }
    if (!sidx)
        r->oom = true;
    json_decref(sidx);
    ab__rd_replace(r, c, out);
}

/* Sort one snapshot message into messages, activities or reasoning. */
static void snapshot_one(ab_reducer_t *r, json_t *m, json_t *plain, json_t *acts, json_t *reas)
{
    if (!json_is_string(json_object_get(m, "role")) || !json_is_string(json_object_get(m, "id")))
        return;
    int kind = side_kind(m);
    json_t *dst = kind == 1 ? acts : kind == 2 ? reas : plain;
    json_t *item = kind ? side_item(r, m, kind == 1) : json_incref(m);
    if (!kind)
        message_tools(r, m, true);
    if (!item || json_array_append_new(dst, item) != 0)
        r->oom = true;
}

void ab__rd_messages_snapshot(ab_reducer_t *r, const ab_val_t *ev)
{
    const ab_val_t *mv = ab_val_get(ev, "messages");
    if (!mv || mv->type != AB_VAL_ARRAY)
        return;
    json_t *msgs = ab__val_to_jansson(mv);
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
    ab__rd_holders_rebuild(r);
out:
    json_decref(msgs);
    json_decref(plain);
    json_decref(acts);
    json_decref(reas);
}

/* ---- RUN_STARTED.input.messages ---- */

static bool held(ab_reducer_t *r, const char *id, size_t n)
{
    return ab__rd_find(&r->coll[RD_MESSAGES], id, n) ||
           ab__rd_find(&r->coll[RD_ACTIVITIES], id, n) ||
           ab__rd_find(&r->coll[RD_REASONING], id, n);
}

/* Fold input message @p m (a new reference, consumed), whose id is not held. */
static void input_one(ab_reducer_t *r, json_t *m, const char *id, size_t n)
{
    int kind = side_kind(m);
    if (kind) {
        ab__rd_add(r, &r->coll[kind == 1 ? RD_ACTIVITIES : RD_REASONING], id, n,
                   side_item(r, m, kind == 1));
        json_decref(m);
        return;
    }
    if (!ab__rd_add(r, &r->coll[RD_MESSAGES], id, n, m))
        return;
    message_tools(r, m, false);
    holders_note(r, m);
}

void ab__rd_input_messages(ab_reducer_t *r, const ab_val_t *mv)
{
    for (uint32_t i = 0; mv && mv->type == AB_VAL_ARRAY && i < mv->len; i++) {
        const ab_val_t *v = &mv->u.items[i];
        size_t n = 0, rn = 0;
        const char *id = ab__rd_str(v, "id", &n);
        if (!id || !ab__rd_str(v, "role", &rn) || held(r, id, n))
            continue;
        json_t *m = ab__val_to_jansson(v);
        if (!m) {
            r->oom = true;
            return;
        }
        input_one(r, m, id, n);
    }
}

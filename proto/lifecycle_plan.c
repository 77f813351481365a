/*
 * lifecycle_plan.c - the in-run rules of the lifecycle checker: streaming
 * triads, the chunk form and its lanes, reasoning spans, steps, subagents,
 * activity messages and tool results (docs/LIFECYCLE.md, reference section 4).
 *
 * A planner reads the checker and the event and either rejects the event or
 * fills an ab__lc_op_t describing the change; it never writes the checker.
 *
 * Invariants:
 *  1. Planners are pure: const checker in, op or error out. The one call
 *     out is the caller's baseline callback (R20 for an activity message the
 *     run does not hold), which never sees the checker.
 *  2. An item keeps the spelling it was first opened with (triad or chunk);
 *     an event of the other spelling for the same id is rejected.
 *  3. A lane is an owner (a subagentRunId, or none for the parent agent) and
 *     holds at most one open chunk stream. An event "in" a lane that the
 *     reference lists as ending chunk streams puts that stream in
 *     op->lane_close; RAW, ACTIVITY_*, REASONING_ENCRYPTED_VALUE and
 *     SUBAGENT_STARTED end nothing.
 *  4. The lane of an event is its subagentRunId; for a continuation of an
 *     existing item (and an untagged reopening) it is the item's owner; a
 *     tool call whose parentMessageId names a known text message takes that
 *     message's owner.
 *  5. A subagentRunId on an attributable event that names no known
 *     invocation is remembered (status SEEN), so a later SUBAGENT_STARTED
 *     for it is caught as "announced after attribution".
 *
 * Item state changes planned here (applied by lifecycle_table.c):
 *
 *   event                       item before        item after
 *   *_START / first chunk       none               OPEN (new)
 *   *_START / chunk (reopen)    CLOSED, same form  OPEN
 *   *_CONTENT / chunk           OPEN, same form    OPEN
 *   *_END                       OPEN triad         CLOSED
 *   lane event (see 3)          OPEN chunk stream  CLOSED
 *   REASONING_START/STEP_STARTED none              OPEN
 *   REASONING_END/STEP_FINISHED OPEN               none
 *   SUBAGENT_STARTED            none               OPEN (active)
 *   SUBAGENT_FINISHED/ERROR     OPEN               DONE
 *   ACTIVITY_SNAPSHOT           none / CLOSED      CLOSED (re-minted owner)
 *   ACTIVITY_DELTA              CLOSED             CLOSED; none: the thread's baseline
 *                                                  callback decides, nothing is created
 *   (MESSAGES_SNAPSHOT is not planned here: ab__lc_messages_snapshot)
 *   TOOL_CALL_RESULT            CLOSED call        CLOSED, answered
 */
#include "lifecycle_internal.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

static const ab_str_t no_str = {NULL, 0};
static const ab_str_t assistant = {"assistant", 9};

#define SHOW(s) ab__lc_show(s), (s).ptr

/* ---- errors ------------------------------------------------------------- */

static ab_status_t missing(ab_error_t *err, const char *field, ab_agui_type_t t)
{
    return ab_error_set(err, AB_INVALID_EVENT, field, "%s must carry %s", ab_agui_type_name(t),
                        field + 1);
}

static ab_status_t not_open(ab_error_t *err, int kind, ab_str_t id)
{
    return ab_error_set(err, AB_INVALID_EVENT, ab__lc_kinds[kind].key_field, "%s %.*s is not open",
                        ab__lc_kinds[kind].name, SHOW(id));
}

static ab_status_t already_open(ab_error_t *err, const ab__lc_item_t *it)
{
    return ab_error_set(err, AB_INVALID_EVENT, ab__lc_kinds[it->kind].key_field,
                        "%s %.*s is already open", ab__lc_kinds[it->kind].name, SHOW(it->key));
}

static ab_status_t mixed(ab_error_t *err, const ab__lc_item_t *it, ab_agui_type_t t)
{
    return ab_error_set(err, AB_INVALID_EVENT, ab__lc_kinds[it->kind].key_field,
                        "%s %.*s was opened in %s form; %s mixes triad and chunk forms for one "
                        "item",
                        ab__lc_kinds[it->kind].name, SHOW(it->key),
                        it->form == AB__LC_CHUNK ? "chunk" : "triad", ab_agui_type_name(t));
}

static ab_status_t owner_mismatch(ab_error_t *err, const ab__lc_item_t *it,
                                  const ab_agui_info_t *ev)
{
    char who[96];
    return ab_error_set(err, AB_INVALID_EVENT, "/subagentRunId",
                        "%s carries subagentRunId %.*s, but %s %.*s belongs to %s",
                        ab_agui_type_name(ev->type), SHOW(ev->subagent_run_id),
                        ab__lc_kinds[it->kind].name, SHOW(it->key),
                        ab__lc_owner_name(it->owner, who, sizeof(who)));
}

static ab_status_t conflict(ab_error_t *err, const ab__lc_item_t *it, const ab_agui_info_t *ev,
                            const char *field, ab_str_t got, ab_str_t had)
{
    ab_str_t none = {"(absent)", 8};
    if (!got.ptr)
        got = none;
    if (!had.ptr)
        had = none;
    return ab_error_set(err, AB_INVALID_EVENT, field,
                        "%s conflicts with %s %.*s: %s is %.*s, but the item has %.*s",
                        ab_agui_type_name(ev->type), ab__lc_kinds[it->kind].name, SHOW(it->key),
                        field + 1, SHOW(got), SHOW(had));
}

/* ---- building the op ---------------------------------------------------- */

static void add_spec(ab__lc_op_t *op, int kind, int status, int form, ab_str_t key, ab_str_t owner,
                     ab_str_t a1, ab_str_t a2)
{
    assert(op->nspec < 2);
    ab__lc_spec_t *s = &op->spec[op->nspec++];
    s->kind = (uint8_t)kind;
    s->status = (uint8_t)status;
    s->form = (uint8_t)form;
    s->key = key;
    s->owner = owner;
    s->a1 = a1;
    s->a2 = a2;
}

/* Invariant 5: remember the first attribution to an unknown invocation. */
static ab_status_t note_attribution(const ab_lifecycle_t *lc, const ab_agui_info_t *ev,
                                    ab__lc_op_t *op)
{
    ab_str_t tag = ev->subagent_run_id;
    if (tag.ptr && !ab__lc_find(lc, AB__LC_SUB, tag, no_str))
        add_spec(op, AB__LC_SUB, AB__LC_SEEN, AB__LC_TRIAD, tag, no_str, no_str, no_str);
    return AB_OK;
}

/* The event is in @p lane: the lane's chunk stream (if any) ends. */
static void end_lane(const ab_lifecycle_t *lc, ab__lc_op_t *op, ab_str_t lane)
{
    op->lane_close = ab__lc_lane(lc, lane);
}

static void target(ab__lc_op_t *op, ab__lc_item_t *it, int action)
{
    op->target = it;
    op->action = action;
}

static ab_str_t item_id(const ab_agui_info_t *ev, int kind)
{
    return kind == AB__LC_TOOL ? ev->tool_call_id : ev->message_id;
}

/* ---- shared checks ------------------------------------------------------ */

/* Reopening a closed message or call: same form, not open, same owner. */
static ab_status_t check_reopen(const ab__lc_item_t *it, int form, const ab_agui_info_t *ev,
                                ab_error_t *err)
{
    if (it->form != form)
        return mixed(err, it, ev->type);
    if (it->status == AB__LC_OPEN)
        return already_open(err, it);
    if (ev->subagent_run_id.ptr && !ab__lc_str_eq(ev->subagent_run_id, it->owner))
        return owner_mismatch(err, it, ev);
    return AB_OK;
}

/*
 * Attributes an opener established (text: name, role; tool: toolCallName,
 * parentMessageId). A reopening *_START must restate them exactly (@p strict;
 * an absent role means assistant); a chunk may omit them, but a value it
 * repeats must agree.
 */
static ab_status_t check_attrs(const ab__lc_item_t *it, const ab_agui_info_t *ev, bool strict,
                               ab_error_t *err)
{
    ab_str_t v1, v2;
    if (it->kind == AB__LC_TEXT) {
        v1 = ev->name;
        v2 = ev->role.ptr ? ev->role : strict ? assistant : no_str;
    } else if (it->kind == AB__LC_TOOL) {
        v1 = ev->tool_call_name;
        v2 = ev->parent_message_id;
    } else {
        return AB_OK;
    }
    const ab__lc_kind_info_t *k = &ab__lc_kinds[it->kind];
    if ((strict || v1.ptr) && !ab__lc_str_eq(v1, it->a1))
        return conflict(err, it, ev, k->a1_field, v1, it->a1);
    if ((strict || v2.ptr) && !ab__lc_str_eq(v2, it->a2))
        return conflict(err, it, ev, k->a2_field, v2, it->a2);
    return AB_OK;
}

/* Owner of a new tool call: its parent message's owner when that is known. */
static ab_status_t tool_owner(const ab_lifecycle_t *lc, const ab_agui_info_t *ev, ab_str_t *owner,
                              ab_error_t *err)
{
    ab_str_t tag = ev->subagent_run_id, pm = ev->parent_message_id;
    const ab__lc_item_t *msg = pm.ptr ? ab__lc_find(lc, AB__LC_TEXT, pm, no_str) : NULL;
    *owner = tag;
    if (!msg)
        return AB_OK;
    if (tag.ptr && !ab__lc_str_eq(tag, msg->owner)) {
        char who[96];
        return ab_error_set(err, AB_INVALID_EVENT, "/subagentRunId",
                            "%s attributes tool call %.*s to subagent %.*s, but its parent "
                            "message %.*s belongs to %s",
                            ab_agui_type_name(ev->type), SHOW(ev->tool_call_id), SHOW(tag),
                            SHOW(pm), ab__lc_owner_name(msg->owner, who, sizeof(who)));
    }
    *owner = msg->owner;
    return AB_OK;
}

/* ---- triads ------------------------------------------------------------- */

/* TEXT_MESSAGE_START, REASONING_MESSAGE_START, TOOL_CALL_START. */
static ab_status_t plan_start(const ab_lifecycle_t *lc, const ab_agui_info_t *ev, ab__lc_op_t *op,
                              int kind, ab_error_t *err)
{
    ab_str_t id = item_id(ev, kind), lane = ev->subagent_run_id;
    if (!id.ptr)
        return missing(err, ab__lc_kinds[kind].key_field, ev->type);
    if (kind == AB__LC_TOOL && !ev->tool_call_name.ptr)
        return missing(err, "/toolCallName", ev->type);
    ab__lc_item_t *it = ab__lc_find(lc, kind, id, no_str);
    ab_status_t st;
    if (it) {
        st = check_reopen(it, AB__LC_TRIAD, ev, err);
        if (st == AB_OK)
            st = check_attrs(it, ev, true, err);
        if (st != AB_OK)
            return st;
        target(op, it, AB__LC_DO_OPEN);
        lane = it->owner;
    } else if (kind == AB__LC_TOOL) {
        st = tool_owner(lc, ev, &lane, err);
        if (st != AB_OK)
            return st;
        add_spec(op, kind, AB__LC_OPEN, AB__LC_TRIAD, id, lane, ev->tool_call_name,
                 ev->parent_message_id);
    } else if (kind == AB__LC_TEXT) {
        add_spec(op, kind, AB__LC_OPEN, AB__LC_TRIAD, id, lane, ev->name,
                 ev->role.ptr ? ev->role : assistant);
    } else {
        add_spec(op, kind, AB__LC_OPEN, AB__LC_TRIAD, id, lane, no_str, no_str);
    }
    end_lane(lc, op, lane);
    return note_attribution(lc, ev, op);
}

/* *_CONTENT, TOOL_CALL_ARGS and *_END of the three triads. */
static ab_status_t plan_continue(const ab_lifecycle_t *lc, const ab_agui_info_t *ev,
                                 ab__lc_op_t *op, int kind, bool end, ab_error_t *err)
{
    ab_str_t id = item_id(ev, kind);
    if (!id.ptr)
        return missing(err, ab__lc_kinds[kind].key_field, ev->type);
    ab__lc_item_t *it = ab__lc_find(lc, kind, id, no_str);
    if (it && it->form == AB__LC_CHUNK)
        return mixed(err, it, ev->type);
    if (!it || it->status != AB__LC_OPEN)
        return not_open(err, kind, id);
    if (ev->subagent_run_id.ptr && !ab__lc_str_eq(ev->subagent_run_id, it->owner))
        return owner_mismatch(err, it, ev);
    if (end)
        target(op, it, AB__LC_DO_CLOSE);
    end_lane(lc, op, it->owner);
    return note_attribution(lc, ev, op);
}

static ab_status_t plan_tool_result(const ab_lifecycle_t *lc, const ab_agui_info_t *ev,
                                    ab__lc_op_t *op, ab_error_t *err)
{
    ab_str_t id = ev->tool_call_id, tag = ev->subagent_run_id;
    if (!id.ptr)
        return missing(err, "/toolCallId", ev->type);
    ab__lc_item_t *it = ab__lc_find(lc, AB__LC_TOOL, id, no_str);
    ab_str_t lane = tag.ptr ? tag : it ? it->owner : no_str;
    ab__lc_item_t *stream = ab__lc_lane(lc, lane);
    /* A call streamed in chunks ends here when the result is in its lane. */
    if (it && it->status == AB__LC_OPEN && it != stream)
        return ab_error_set(err, AB_INVALID_EVENT, "/toolCallId",
                            "tool call %.*s is still open: TOOL_CALL_RESULT before TOOL_CALL_END",
                            SHOW(id));
    op->lane_close = stream;
    if (it)
        target(op, it, AB__LC_DO_RESULT);
    return note_attribution(lc, ev, op);
}

/* ---- chunks ------------------------------------------------------------- */

static ab_status_t no_stream(ab_error_t *err, const ab_agui_info_t *ev, int kind)
{
    return ab_error_set(err, AB_INVALID_EVENT, ab__lc_kinds[kind].key_field,
                        "the first %s of a %s must carry %s; no %s chunk stream is open to "
                        "continue",
                        ab_agui_type_name(ev->type), ab__lc_kinds[kind].name,
                        kind == AB__LC_TOOL ? "toolCallId and toolCallName" : "messageId",
                        ab__lc_kinds[kind].name);
}

/* A chunk without an id continues the open stream of its kind it resolves to. */
static ab_status_t plan_chunk_anon(const ab_lifecycle_t *lc, const ab_agui_info_t *ev,
                                   ab__lc_op_t *op, int kind, ab_error_t *err)
{
    ab_str_t tag = ev->subagent_run_id;
    ab__lc_item_t *s = ab__lc_lane(lc, tag);
    if (!tag.ptr && (!s || s->kind != kind)) {
        /* Untagged: the parent's stream of this kind, else the only one. */
        size_t n = 0;
        s = NULL;
        for (ab__lc_item_t *x = lc->chunks; x; x = x->chunk_next)
            if (x->kind == kind) {
                s = x;
                n++;
            }
        if (n > 1)
            return ab_error_set(err, AB_INVALID_EVENT, "/subagentRunId",
                                "%s without %s or subagentRunId is ambiguous: %zu subagents "
                                "have an open %s chunk stream",
                                ab_agui_type_name(ev->type), ab__lc_kinds[kind].key_field + 1, n,
                                ab__lc_kinds[kind].name);
    }
    if (!s || s->kind != kind)
        return no_stream(err, ev, kind);
    ab_status_t st = check_attrs(s, ev, false, err);
    return st != AB_OK ? st : note_attribution(lc, ev, op);
}

/* A chunk opening a new item: its owner and lane. */
static ab_status_t chunk_new(const ab_lifecycle_t *lc, const ab_agui_info_t *ev, ab__lc_op_t *op,
                             int kind, ab_str_t *lane, ab_error_t *err)
{
    ab_str_t id = item_id(ev, kind);
    *lane = ev->subagent_run_id;
    if (kind == AB__LC_TOOL) {
        ab_status_t st = tool_owner(lc, ev, lane, err);
        if (st != AB_OK)
            return st;
        add_spec(op, kind, AB__LC_OPEN, AB__LC_CHUNK, id, *lane, ev->tool_call_name,
                 ev->parent_message_id);
    } else if (kind == AB__LC_TEXT) {
        add_spec(op, kind, AB__LC_OPEN, AB__LC_CHUNK, id, *lane, ev->name,
                 ev->role.ptr ? ev->role : assistant);
    } else {
        add_spec(op, kind, AB__LC_OPEN, AB__LC_CHUNK, id, *lane, no_str, no_str);
    }
    return AB_OK;
}

/* TEXT_MESSAGE_CHUNK, TOOL_CALL_CHUNK, REASONING_MESSAGE_CHUNK. */
static ab_status_t plan_chunk(const ab_lifecycle_t *lc, const ab_agui_info_t *ev, ab__lc_op_t *op,
                              int kind, ab_error_t *err)
{
    ab_str_t id = item_id(ev, kind), tag = ev->subagent_run_id, lane;
    if (!id.ptr)
        return plan_chunk_anon(lc, ev, op, kind, err);
    ab__lc_item_t *it = ab__lc_find(lc, kind, id, no_str);
    if (it && it->form == AB__LC_TRIAD)
        return mixed(err, it, ev->type);
    ab_status_t st = AB_OK;
    if (it && it->status == AB__LC_OPEN) { /* continues its own stream */
        if (tag.ptr && !ab__lc_str_eq(tag, it->owner))
            return owner_mismatch(err, it, ev);
        st = check_attrs(it, ev, false, err);
        return st != AB_OK ? st : note_attribution(lc, ev, op);
    }
    if (kind == AB__LC_TOOL && !ev->tool_call_name.ptr)
        return ab_error_set(err, AB_INVALID_EVENT, "/toolCallName",
                            "the first TOOL_CALL_CHUNK of tool call %.*s must carry toolCallName",
                            SHOW(id));
    if (it) { /* reopens a closed chunk item */
        st = check_reopen(it, AB__LC_CHUNK, ev, err);
        if (st == AB_OK)
            st = check_attrs(it, ev, false, err);
        target(op, it, AB__LC_DO_OPEN);
        lane = it->owner;
    } else {
        st = chunk_new(lc, ev, op, kind, &lane, err);
    }
    if (st != AB_OK)
        return st;
    end_lane(lc, op, lane);
    return note_attribution(lc, ev, op);
}

/* ---- spans, steps ------------------------------------------------------- */

static ab_status_t plan_span(const ab_lifecycle_t *lc, const ab_agui_info_t *ev, ab__lc_op_t *op,
                             bool start, ab_error_t *err)
{
    ab_str_t id = ev->message_id, lane = ev->subagent_run_id;
    if (!id.ptr)
        return missing(err, "/messageId", ev->type);
    ab__lc_item_t *it = ab__lc_find(lc, AB__LC_SPAN, id, no_str);
    if (start) {
        if (it)
            return already_open(err, it);
        add_spec(op, AB__LC_SPAN, AB__LC_OPEN, AB__LC_TRIAD, id, lane, no_str, no_str);
    } else {
        if (!it)
            return not_open(err, AB__LC_SPAN, id);
        if (lane.ptr && !ab__lc_str_eq(lane, it->owner))
            return owner_mismatch(err, it, ev);
        target(op, it, AB__LC_DO_REMOVE);
        lane = it->owner;
    }
    end_lane(lc, op, lane);
    return note_attribution(lc, ev, op);
}

/* Steps are per owner: the parent and each subagent have their own names. */
static ab_status_t plan_step(const ab_lifecycle_t *lc, const ab_agui_info_t *ev, ab__lc_op_t *op,
                             bool start, ab_error_t *err)
{
    ab_str_t name = ev->step_name, owner = ev->subagent_run_id;
    if (!name.ptr)
        return missing(err, "/stepName", ev->type);
    ab__lc_item_t *it = ab__lc_find(lc, AB__LC_STEP, name, owner);
    char who[96];
    if (start && it)
        return ab_error_set(err, AB_INVALID_EVENT, "/stepName", "step %.*s of %s is already open",
                            SHOW(name), ab__lc_owner_name(owner, who, sizeof(who)));
    if (!start && !it)
        return ab_error_set(err, AB_INVALID_EVENT, "/stepName", "step %.*s of %s is not open",
                            SHOW(name), ab__lc_owner_name(owner, who, sizeof(who)));
    if (start)
        add_spec(op, AB__LC_STEP, AB__LC_OPEN, AB__LC_TRIAD, name, owner, no_str, no_str);
    else
        target(op, it, AB__LC_DO_REMOVE);
    end_lane(lc, op, owner);
    return note_attribution(lc, ev, op);
}

/* ---- subagents ---------------------------------------------------------- */

static ab_status_t plan_sub_start(const ab_lifecycle_t *lc, const ab_agui_info_t *ev,
                                  ab__lc_op_t *op, ab_error_t *err)
{
    ab_str_t id = ev->subagent_run_id, parent = ev->parent_subagent_run_id;
    if (!id.ptr)
        return missing(err, "/subagentRunId", ev->type);
    const ab__lc_item_t *it = ab__lc_find(lc, AB__LC_SUB, id, no_str);
    if (it) {
        const char *why = it->status == AB__LC_OPEN ? "is already active"
                          : it->status == AB__LC_DONE
                              ? "already finished in this run; a new invocation needs a new id"
                              : "is announced after events attributed to it; SUBAGENT_STARTED "
                                "must come first";
        return ab_error_set(err, AB_INVALID_EVENT, "/subagentRunId", "subagent %.*s %s", SHOW(id),
                            why);
    }
    if (parent.ptr) {
        const ab__lc_item_t *p = ab__lc_find(lc, AB__LC_SUB, parent, no_str);
        if (!p || p->status == AB__LC_SEEN)
            return ab_error_set(err, AB_INVALID_EVENT, "/parentSubagentRunId",
                                "parent subagent %.*s was not announced in this run", SHOW(parent));
    }
    add_spec(op, AB__LC_SUB, AB__LC_OPEN, AB__LC_TRIAD, id, no_str, no_str, no_str);
    return AB_OK;
}

/* SUBAGENT_FINISHED, SUBAGENT_ERROR: close an announced, active invocation. */
static ab_status_t plan_sub_end(const ab_lifecycle_t *lc, const ab_agui_info_t *ev, ab__lc_op_t *op,
                                ab_error_t *err)
{
    ab_str_t id = ev->subagent_run_id;
    if (!id.ptr)
        return missing(err, "/subagentRunId", ev->type);
    ab__lc_item_t *it = ab__lc_find(lc, AB__LC_SUB, id, no_str);
    if (!it || it->status == AB__LC_SEEN)
        return ab_error_set(err, AB_INVALID_EVENT, "/subagentRunId",
                            "subagent %.*s was never announced with SUBAGENT_STARTED", SHOW(id));
    if (it->status == AB__LC_DONE)
        return ab_error_set(err, AB_INVALID_EVENT, "/subagentRunId",
                            "subagent %.*s already finished", SHOW(id));
    target(op, it, AB__LC_DO_DONE);
    end_lane(lc, op, id);
    return AB_OK;
}

/* ---- activity ----------------------------------------------------------- */

static bool keeps_existing(const ab_agui_info_t *ev)
{
    const ab_val_t *r = ev->event ? ab_val_get(ev->event, "replace") : NULL;
    return r && r->type == AB_VAL_BOOL && !r->u.b;
}

/*
 * R20 for an activity message the run does not hold: the caller's baseline
 * callback says whether the thread holds it from an earlier run (the owner
 * is not known then, so R15 has nothing to compare); without one, or when it
 * does not, the delta has no baseline.
 */
static ab_status_t thread_baseline(const ab_lifecycle_t *lc, ab_str_t id, ab_error_t *err)
{
    ab_status_t st = lc->baseline ? lc->baseline(lc->baseline_ud, id, err) : AB_NOT_FOUND;
    if (st != AB_NOT_FOUND)
        return st;
    return ab_error_set(err, AB_INVALID_EVENT, "/messageId",
                        "ACTIVITY_DELTA needs a baseline: no ACTIVITY_SNAPSHOT or "
                        "MESSAGES_SNAPSHOT of this %s holds activity message %.*s",
                        lc->baseline ? "thread" : "run", SHOW(id));
}

/* A replacing snapshot re-mints the owner; replace:false must agree with it. */
static ab_status_t plan_activity(const ab_lifecycle_t *lc, const ab_agui_info_t *ev,
                                 ab__lc_op_t *op, bool delta, ab_error_t *err)
{
    ab_str_t id = ev->message_id, tag = ev->subagent_run_id;
    if (!id.ptr)
        return missing(err, "/messageId", ev->type);
    ab__lc_item_t *it = ab__lc_find(lc, AB__LC_ACT, id, no_str);
    if (delta && !it) { /* R20: no snapshot of this run holds it: the thread's may */
        ab_status_t st = thread_baseline(lc, id, err);
        return st != AB_OK ? st : note_attribution(lc, ev, op);
    }
    if (it && (delta || keeps_existing(ev))) {
        if (tag.ptr && !ab__lc_str_eq(tag, it->owner))
            return owner_mismatch(err, it, ev);
    } else if (!it || !ab__lc_str_eq(tag, it->owner)) {
        if (it)
            target(op, it, AB__LC_DO_REMOVE);
        add_spec(op, AB__LC_ACT, AB__LC_CLOSED, AB__LC_TRIAD, id, tag, no_str, no_str);
    }
    return note_attribution(lc, ev, op);
}

/* ---- dispatch ----------------------------------------------------------- */

static ab_status_t plan_standalone(const ab_lifecycle_t *lc, const ab_agui_info_t *ev,
                                   ab__lc_op_t *op, bool ends_lane)
{
    if (ends_lane)
        end_lane(lc, op, ev->subagent_run_id);
    return note_attribution(lc, ev, op);
}

ab_status_t ab__lc_plan(const ab_lifecycle_t *lc, const ab_agui_info_t *ev, ab__lc_op_t *op,
                        ab_error_t *err)
{
    switch (ev->type) {
    case AB_AGUI_TEXT_MESSAGE_START: return plan_start(lc, ev, op, AB__LC_TEXT, err);
    case AB_AGUI_TEXT_MESSAGE_CONTENT: return plan_continue(lc, ev, op, AB__LC_TEXT, false, err);
    case AB_AGUI_TEXT_MESSAGE_END: return plan_continue(lc, ev, op, AB__LC_TEXT, true, err);
    case AB_AGUI_TEXT_MESSAGE_CHUNK: return plan_chunk(lc, ev, op, AB__LC_TEXT, err);
    case AB_AGUI_TOOL_CALL_START: return plan_start(lc, ev, op, AB__LC_TOOL, err);
    case AB_AGUI_TOOL_CALL_ARGS: return plan_continue(lc, ev, op, AB__LC_TOOL, false, err);
    case AB_AGUI_TOOL_CALL_END: return plan_continue(lc, ev, op, AB__LC_TOOL, true, err);
    case AB_AGUI_TOOL_CALL_CHUNK: return plan_chunk(lc, ev, op, AB__LC_TOOL, err);
    case AB_AGUI_TOOL_CALL_RESULT: return plan_tool_result(lc, ev, op, err);
    case AB_AGUI_REASONING_MESSAGE_START: return plan_start(lc, ev, op, AB__LC_RMSG, err);
    case AB_AGUI_REASONING_MESSAGE_CONTENT:
        return plan_continue(lc, ev, op, AB__LC_RMSG, false, err);
    case AB_AGUI_REASONING_MESSAGE_END: return plan_continue(lc, ev, op, AB__LC_RMSG, true, err);
    case AB_AGUI_REASONING_MESSAGE_CHUNK: return plan_chunk(lc, ev, op, AB__LC_RMSG, err);
    case AB_AGUI_REASONING_START: return plan_span(lc, ev, op, true, err);
    case AB_AGUI_REASONING_END: return plan_span(lc, ev, op, false, err);
    case AB_AGUI_STEP_STARTED: return plan_step(lc, ev, op, true, err);
    case AB_AGUI_STEP_FINISHED: return plan_step(lc, ev, op, false, err);
    case AB_AGUI_SUBAGENT_STARTED: return plan_sub_start(lc, ev, op, err);
    case AB_AGUI_SUBAGENT_FINISHED:
    case AB_AGUI_SUBAGENT_ERROR: return plan_sub_end(lc, ev, op, err);
    case AB_AGUI_ACTIVITY_SNAPSHOT: return plan_activity(lc, ev, op, false, err);
    case AB_AGUI_ACTIVITY_DELTA: return plan_activity(lc, ev, op, true, err);
    case AB_AGUI_STATE_SNAPSHOT:
    case AB_AGUI_STATE_DELTA:
    case AB_AGUI_CUSTOM: return plan_standalone(lc, ev, op, true);
    case AB_AGUI_RAW:
    case AB_AGUI_REASONING_ENCRYPTED_VALUE: return plan_standalone(lc, ev, op, false);
    default:
        return ab_error_set(err, AB_INTERNAL, "/type", "%s is not an in-run event",
                            ab_agui_type_name(ev->type));
    }
}

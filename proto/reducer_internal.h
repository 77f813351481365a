/*
 * reducer_internal.h - shared between reducer.c (lifecycle, runs, state,
 * approvals), reducer_items.c (streamed messages, tool calls, reasoning,
 * activities), reducer_msgs.c (whole messages: MESSAGES_SNAPSHOT and
 * RUN_STARTED.input.messages) and reducer_custom.c (AgentKit CUSTOM
 * projections). Not installed.
 */
#ifndef AB_REDUCER_INTERNAL_H
#define AB_REDUCER_INTERNAL_H

#include "agentbus/reducer.h"
#include "jansson_internal.h"

#include <jansson.h>

/* Strings being appended to at once (ab__rd_append2): runs streaming in turn each keep
 * their own pending value, up to this many. */
#define RD_PENDING 16
/* A buffer larger than this is freed when its value is written back, so between events the
 * buffers hold at most RD_PENDING * RD_PENDING_KEEP bytes (64 KiB). */
#define RD_PENDING_KEEP 4096u

/* One pending string: @p node (a reference) takes @p buf's value when flushed; @p mirror,
 * when set, is a second node that gets the same value. node NULL: the slot is free. */
typedef struct rd_pend {
    json_t *node;
    json_t *mirror;
    char *buf;
    size_t len, cap;
    uint64_t used;    /* when last appended to (least recently used goes first) */
    uint32_t appends; /* appends since it started */
} rd_pend_t;

/*
 * A projection array with an id index. arr is owned by the root document
 * under @p name; idx maps the id (member @p key of each item) to its
 * position and is rebuilt whenever items move (only snapshots move them).
 */
typedef struct rd_coll {
    const char *name;
    const char *key;
    json_t *arr;
    json_t *idx;
} rd_coll_t;

enum {
    RD_RUNS,
    RD_MESSAGES,
    RD_TOOLS,
    RD_REASONING,
    RD_SPANS,
    RD_ACTIVITIES,
    RD_TASKS,
    RD_ROSTER,
    RD_ARTIFACTS,
    RD_SUGGESTIONS,
    RD_WIDGETS,
    RD_NCOLL
};

struct ab_reducer {
    json_t *root;             /* the projection document */
    rd_coll_t coll[RD_NCOLL]; /* indexed arrays of root */
    json_t *lanes;            /* chunk lanes: "<kind>\x1f<subagent>" -> current id */
    json_t *holders;          /* tool call id -> id of the assistant message holding it */
    char *run;                /* run id of the event being folded */
    size_t run_cap;
    json_t *cur_run; /* its run item once found (borrowed; NULL between events) */
    uint64_t seq;    /* seq of the event being folded */
    bool oom;        /* an allocation failed during this event */
    /* Streaming appends (ab__rd_append): the string nodes being appended to and
     * their whole pending values, flushed into the nodes before anything may read
     * them (flush_pending: before every event that is not an append, and before
     * the projection is read), so k deltas cost O(total), not O(k^2), also when up
     * to RD_PENDING messages stream in turn. A mirror is a second string node
     * that gets the same value (a tool call's arguments in toolCalls and in its
     * assistant message). */
    rd_pend_t pend[RD_PENDING];
    uint64_t pend_tick;
    unsigned npend;    /* slots holding a value (flush_pending has nothing to do at 0) */
    unsigned pend_mru; /* the slot appended to last, looked at first */
};

/* Whether string node @p node has a pending value (ab__rd_append2). */
bool ab__rd_pending(const ab_reducer_t *r, const json_t *node);

/* A string member of @p ev as a view; NULL when absent or not a string. */
const char *ab__rd_str(const ab_val_t *ev, const char *key, size_t *len);

/* Set obj[key] = v (a new reference, consumed); flags r->oom on failure. */
void ab__rd_set(ab_reducer_t *r, json_t *obj, const char *key, json_t *v);

/* Set obj[key] to the string member @p key of @p ev when present. */
void ab__rd_copy_str(ab_reducer_t *r, json_t *obj, const ab_val_t *ev, const char *key);

/* Append [d, d+n) to the string obj[key] (created when absent). */
void ab__rd_append(ab_reducer_t *r, json_t *obj, const char *key, const char *d, size_t n);

/* ab__rd_append that also writes the result into mirror[key] when @p mirror is
 * not NULL (the two strings then hold the same value). */
void ab__rd_append2(ab_reducer_t *r, json_t *obj, json_t *mirror, const char *key, const char *d,
                    size_t n);

/* Merge the event's "metadata" object into target["metadata"], key by key,
 * last write wins (AG-UI: no deep merge). Nothing when either is absent. */
void ab__rd_meta(ab_reducer_t *r, json_t *target, const ab_val_t *ev);

/* True when the string member @p key of @p obj equals the C string @p s. */
bool ab__rd_is(const json_t *obj, const char *key, const char *s);

/* Record a warning {seq, run, message} (bounded, oldest dropped). */
void ab__rd_warn(ab_reducer_t *r, const char *fmt, ...) AB_PRINTF(2, 3);

/* ab_reducer_apply() for a caller that may know the run's item: @p *item, when not NULL,
 * must be the item of run @p run_id in the projection's runs (it is not looked up); on
 * AB_OK @p *item is that item. Run items are never removed, so it stays valid for the
 * reducer's life. */
ab_status_t ab__reducer_apply_run(ab_reducer_t *r, const ab_val_t *ev, const char *run_id,
                                  uint64_t seq, json_t **item, ab_error_t *err);

/* Item with id [id, id+n) in @p c, or NULL. */
json_t *ab__rd_find(const rd_coll_t *c, const char *id, size_t n);

/* Append @p item (consumed) with id [id, id+n); returns it or NULL (oom). */
json_t *ab__rd_add(ab_reducer_t *r, rd_coll_t *c, const char *id, size_t n, json_t *item);

/* Position of the item with id [id, id+n) in @p c, or -1. */
long ab__rd_pos(const rd_coll_t *c, const char *id, size_t n);

/* Insert @p item (consumed) at position @p at (<= size): later items move
 * down one and their index entries follow. Returns it or NULL (oom). */
json_t *ab__rd_insert(ab_reducer_t *r, rd_coll_t *c, size_t at, const char *id, size_t n,
                      json_t *item);

/* Replace the array of @p c by @p arr (consumed) and rebuild its index. */
void ab__rd_replace(ab_reducer_t *r, rd_coll_t *c, json_t *arr);

/* Current id of chunk lane @p kind for event @p ev (NULL when none). */
const char *ab__rd_lane(ab_reducer_t *r, const char *kind, const ab_val_t *ev, const char *id,
                        size_t *len);

/* Event handlers of reducer_items.c and reducer_custom.c. */
typedef void (*rd_handler_fn)(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_text_start(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_text_content(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_text_end(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_text_chunk(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_tool_start(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_tool_args(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_tool_end(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_tool_chunk(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_tool_result(ab_reducer_t *r, const ab_val_t *ev);
/* Make each held ToolCall share its name and arguments nodes with its toolCalls
 * item again where they are equal (after a restore copied them apart). */
void ab__rd_calls_share(ab_reducer_t *r);
void ab__rd_reasoning_span(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_reasoning_span_end(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_reasoning_start(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_reasoning_content(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_reasoning_end(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_reasoning_chunk(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_encrypted_value(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_activity_snapshot(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_activity_delta(ab_reducer_t *r, const ab_val_t *ev);
void ab__rd_custom(ab_reducer_t *r, const ab_val_t *ev);

/* reducer_msgs.c: whole messages. */
void ab__rd_messages_snapshot(ab_reducer_t *r, const ab_val_t *ev);
/* RUN_STARTED.input.messages: the messages not yet held, in order. */
void ab__rd_input_messages(ab_reducer_t *r, const ab_val_t *messages);
/* Rebuild r->holders from the assistant messages' toolCalls. */
void ab__rd_holders_rebuild(ab_reducer_t *r);

#endif

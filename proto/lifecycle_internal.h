/*
 * lifecycle_internal.h - private model of the AG-UI 1.0 run lifecycle checker.
 *
 * Files: lifecycle.c (public API, run boundaries, outcomes), lifecycle_plan.c
 * (the in-run rules: triads, chunks, steps, spans, subagents, activity),
 * lifecycle_table.c (the item table, limits, applying a plan).
 * docs/LIFECYCLE.md describes the rules and the memory bound.
 *
 * Checking one event is two-phase. A planner inspects the checker without
 * changing it and describes the change as an ab__lc_op_t: at most two items
 * to create, at most one existing item to act on, and which chunk streams end.
 * ab__lc_apply() then checks the limits, allocates everything the change
 * needs and only then commits it, a step that cannot fail. So a rejected
 * event - for any reason, AB_NOMEM included - leaves the checker as it was.
 */
#ifndef AGENTBUS_LIFECYCLE_INTERNAL_H
#define AGENTBUS_LIFECYCLE_INTERNAL_H

#include "agentbus/agui.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Longest string the checker copies (ids, names, roles), in bytes. */
#define AB__LC_STR_MAX 256u
/** Fewest hash buckets once the table exists (a power of two). */
#define AB__LC_MIN_BUCKETS 16u
/** Bytes of an id quoted in an error message; longer ids are cut. */
#define AB__LC_SHOW 64

/* What an item is; each kind is its own namespace. */
typedef enum ab__lc_kind {
    AB__LC_TEXT = 0, /* text message, by messageId */
    AB__LC_TOOL,     /* tool call, by toolCallId */
    AB__LC_RMSG,     /* reasoning message, by messageId */
    AB__LC_SPAN,     /* reasoning span, by messageId */
    AB__LC_STEP,     /* step, by (owner, stepName) */
    AB__LC_SUB,      /* subagent invocation, by subagentRunId */
    AB__LC_ACT,      /* activity message, by messageId */
    AB__LC_KIND_COUNT
} ab__lc_kind_t;

/* Item status. Spans and steps exist only while open. */
enum {
    AB__LC_CLOSED = 0, /* closed message or call (may reopen); known activity */
    AB__LC_OPEN,       /* open item; for a subagent: announced and active */
    AB__LC_SEEN,       /* subagent: events attributed to it, never announced */
    AB__LC_DONE,       /* subagent: finished or errored in this run */
};

/* Spelling an item was opened with; the two never mix for one item. */
enum { AB__LC_TRIAD = 0, AB__LC_CHUNK };

/* What a plan does to an existing item. */
enum {
    AB__LC_DO_NONE = 0,
    AB__LC_DO_OPEN,   /* reopen a closed message or call */
    AB__LC_DO_CLOSE,  /* *_END of a triad */
    AB__LC_DO_REMOVE, /* close a span or step; drop a re-minted activity */
    AB__LC_DO_RESULT, /* TOOL_CALL_RESULT answered the call */
    AB__LC_DO_DONE,   /* SUBAGENT_FINISHED / SUBAGENT_ERROR */
};

/*
 * One tracked item, allocated as a single block: the header, then the bytes
 * of its strings (no terminators). A string with ptr == NULL is absent; an
 * absent owner means the parent agent.
 */
typedef struct ab__lc_item ab__lc_item_t;
struct ab__lc_item {
    ab__lc_item_t *hnext;      /* hash chain */
    ab__lc_item_t *call_next;  /* tool calls, in call order */
    ab__lc_item_t *chunk_prev; /* open chunk streams (at most one per lane) */
    ab__lc_item_t *chunk_next; /*   "   */
    uint64_t opened;           /* sequence number of the latest opening */
    size_t size;               /* bytes of this block */
    uint32_t hash;             /* of (kind, key[, owner for steps]) */
    uint8_t kind;              /* ab__lc_kind_t */
    uint8_t status;            /* AB__LC_CLOSED ... */
    uint8_t form;              /* AB__LC_TRIAD or AB__LC_CHUNK */
    bool answered;             /* tool call: a TOOL_CALL_RESULT was seen */
    ab_str_t key;              /* the id (step: stepName) */
    ab_str_t owner;            /* subagentRunId of the owner */
    ab_str_t a1;               /* text: name; tool: toolCallName */
    ab_str_t a2;               /* text: role (never absent); tool: parentMessageId */
    char data[];               /* the strings */
};

/* An item a plan wants created. */
typedef struct ab__lc_spec {
    uint8_t kind, status, form;
    ab_str_t key, owner, a1, a2;
} ab__lc_spec_t;

/* The whole change one event makes; built by a planner, run by ab__lc_apply. */
typedef struct ab__lc_op {
    ab__lc_spec_t spec[2];  /* items to create, in this order */
    ab__lc_item_t *made[2]; /* their blocks, allocated by ab__lc_apply */
    int nspec;
    ab__lc_item_t *target;     /* existing item acted on, or NULL */
    int action;                /* AB__LC_DO_* on target */
    ab__lc_item_t *lane_close; /* a chunk stream this event ends, or NULL */
} ab__lc_op_t;

/* The checker. */
struct ab_lifecycle {
    ab_run_state_t state;
    bool ids_given; /* ids fixed by ab_lifecycle_new */
    ab_lifecycle_limits_t lim;
    char *thread_id, *run_id; /* owned; NULL until known */
    size_t thread_len, run_len;
    ab__lc_item_t **buckets; /* hash table; NULL until the first item */
    size_t nbuckets, nitems;
    uint32_t n_open;  /* open items (triad and chunk), spans, steps, active subagents */
    uint32_t n_calls; /* tool call items */
    uint32_t n_ids;   /* text, reasoning, subagent and activity items */
    ab__lc_item_t *calls_head, *calls_tail;
    ab__lc_item_t *chunks; /* open chunk-form items */
    uint64_t seq;
    size_t mem;                        /* bytes held, see ab_lifecycle_memory() */
    ab_lifecycle_baseline_fn baseline; /* R20 outside the run, or NULL */
    void *baseline_ud;
};

/* Static facts about each kind: its name in messages and its fields. */
typedef struct ab__lc_kind_info {
    const char *name;      /* "text message" */
    const char *key_field; /* "/messageId" */
    const char *a1_field;  /* field stored in a1, or NULL */
    const char *a2_field;  /* field stored in a2, or NULL */
} ab__lc_kind_info_t;

extern const ab__lc_kind_info_t ab__lc_kinds[AB__LC_KIND_COUNT];

/* ---- lifecycle_table.c -------------------------------------------------- */

/** Presence-sensitive equality: two absent strings are equal. */
bool ab__lc_str_eq(ab_str_t a, ab_str_t b);

/** Bytes of @p s to quote in a message (at most AB__LC_SHOW). */
int ab__lc_show(ab_str_t s);

/** "the parent agent" or "subagent <id>", into @p buf. @return buf. */
const char *ab__lc_owner_name(ab_str_t owner, char *buf, size_t size);

/** Find an item; @p owner matters for steps only. NULL when absent. */
ab__lc_item_t *ab__lc_find(const ab_lifecycle_t *lc, int kind, ab_str_t key, ab_str_t owner);

/** The open chunk stream of the lane of @p owner, or NULL. */
ab__lc_item_t *ab__lc_lane(const ab_lifecycle_t *lc, ab_str_t owner);

/** Limits, allocation, commit. On error nothing changed. */
ab_status_t ab__lc_apply(ab_lifecycle_t *lc, ab__lc_op_t *op, ab_error_t *err);

/** Drop every item (the run ended). */
void ab__lc_clear(ab_lifecycle_t *lc);

/**
 * MESSAGES_SNAPSHOT with its "messages" array (NULL when unknown): ends every
 * chunk stream and, when it holds activity messages, makes exactly those the
 * run's known activity messages (AG-UI 1.0 section 5: such a snapshot is the
 * complete activity set; one without activity messages keeps them). Limits
 * and allocation first: on error nothing changed.
 */
ab_status_t ab__lc_messages_snapshot(ab_lifecycle_t *lc, const ab_val_t *messages, ab_error_t *err);

/* ---- lifecycle_plan.c --------------------------------------------------- */

/** Plan an event of an active run other than RUN_STARTED/FINISHED/ERROR. */
ab_status_t ab__lc_plan(const ab_lifecycle_t *lc, const ab_agui_info_t *ev, ab__lc_op_t *op,
                        ab_error_t *err);

#endif /* AGENTBUS_LIFECYCLE_INTERNAL_H */

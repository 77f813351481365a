/*
 * agentbus/agui.h - AG-UI 1.0 event validation and the per-run lifecycle
 * checker.
 *
 * Validation (ab_agui_validate) checks one event body - a JSON-safe map as
 * parsed by ab_doc_parse() - against the AG-UI 1.0 schema of its type: all 31
 * event types, required fields, field types, closed value sets (roles,
 * outcome types, subtypes), nested types (interrupts, resume entries,
 * messages, content parts, JSON Patch operations, token usage, tools,
 * context) and "absent, never null" for optional fields. Errors are
 * AB_INVALID_EVENT with err->field set to the JSON pointer of the bad value,
 * relative to the event ("/messageId", "/outcome/interrupts/0/id").
 *
 * Strict mode (producers) rejects unknown event types and unknown fields.
 * Lenient mode (consumers, AG-UI "processing model") reports them through the
 * warning callback and accepts the event; malformed *known* fields are fatal
 * in both modes.
 *
 * The lifecycle checker (ab_lifecycle_t) is a small state machine per run fed
 * with the ab_agui_info_t of each validated event, in order. See
 * docs/LIFECYCLE.md for the rules and the memory bound.
 *
 * Ownership: ab_agui_info_t holds views (ab_str_t / const ab_val_t *) into the
 * event tree; valid as long as that tree is.
 * Thread-safety: validation is reentrant; one lifecycle checker per thread.
 */
#ifndef AGENTBUS_AGUI_H
#define AGENTBUS_AGUI_H

#include "agentbus/model.h"
#include "agentbus/status.h"
#include "agentbus/value.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(ENUM, "WIRE_NAME") in the order of the AG-UI 1.0 reference table. */
#define AB_AGUI_TYPE_MAP(X)                                                                        \
    X(RUN_STARTED, "RUN_STARTED")                                                                  \
    X(RUN_FINISHED, "RUN_FINISHED")                                                                \
    X(RUN_ERROR, "RUN_ERROR")                                                                      \
    X(STEP_STARTED, "STEP_STARTED")                                                                \
    X(STEP_FINISHED, "STEP_FINISHED")                                                              \
    X(TEXT_MESSAGE_START, "TEXT_MESSAGE_START")                                                    \
    X(TEXT_MESSAGE_CONTENT, "TEXT_MESSAGE_CONTENT")                                                \
    X(TEXT_MESSAGE_END, "TEXT_MESSAGE_END")                                                        \
    X(TEXT_MESSAGE_CHUNK, "TEXT_MESSAGE_CHUNK")                                                    \
    X(TOOL_CALL_START, "TOOL_CALL_START")                                                          \
    X(TOOL_CALL_ARGS, "TOOL_CALL_ARGS")                                                            \
    X(TOOL_CALL_END, "TOOL_CALL_END")                                                              \
    X(TOOL_CALL_CHUNK, "TOOL_CALL_CHUNK")                                                          \
    X(TOOL_CALL_RESULT, "TOOL_CALL_RESULT")                                                        \
    X(STATE_SNAPSHOT, "STATE_SNAPSHOT")                                                            \
    X(STATE_DELTA, "STATE_DELTA")                                                                  \
    X(MESSAGES_SNAPSHOT, "MESSAGES_SNAPSHOT")                                                      \
    X(ACTIVITY_SNAPSHOT, "ACTIVITY_SNAPSHOT")                                                      \
    X(ACTIVITY_DELTA, "ACTIVITY_DELTA")                                                            \
    X(RAW, "RAW")                                                                                  \
    X(CUSTOM, "CUSTOM")                                                                            \
    X(REASONING_START, "REASONING_START")                                                          \
    X(REASONING_MESSAGE_START, "REASONING_MESSAGE_START")                                          \
    X(REASONING_MESSAGE_CONTENT, "REASONING_MESSAGE_CONTENT")                                      \
    X(REASONING_MESSAGE_END, "REASONING_MESSAGE_END")                                              \
    X(REASONING_MESSAGE_CHUNK, "REASONING_MESSAGE_CHUNK")                                          \
    X(REASONING_END, "REASONING_END")                                                              \
    X(REASONING_ENCRYPTED_VALUE, "REASONING_ENCRYPTED_VALUE")                                      \
    X(SUBAGENT_STARTED, "SUBAGENT_STARTED")                                                        \
    X(SUBAGENT_FINISHED, "SUBAGENT_FINISHED")                                                      \
    X(SUBAGENT_ERROR, "SUBAGENT_ERROR")

/** The 31 AG-UI 1.0 event types; AB_AGUI_UNKNOWN for anything else. */
typedef enum ab_agui_type {
    AB_AGUI_UNKNOWN = 0,
#define AB_AGUI_ENUM_(e, s) AB_AGUI_##e,
    AB_AGUI_TYPE_MAP(AB_AGUI_ENUM_)
#undef AB_AGUI_ENUM_
        AB_AGUI_TYPE_COUNT_
} ab_agui_type_t;

/** Wire name of a type ("RUN_STARTED"); "UNKNOWN" for AB_AGUI_UNKNOWN. */
AB_API const char *ab_agui_type_name(ab_agui_type_t t);

/** Type from its wire name; AB_AGUI_UNKNOWN when not one of the 31. */
AB_API ab_agui_type_t ab_agui_type_from(const char *s, size_t len);

typedef enum ab_agui_mode {
    AB_AGUI_STRICT = 0, /**< producer: unknown types and fields are errors */
    AB_AGUI_LENIENT,    /**< consumer: unknown material is a warning */
} ab_agui_mode_t;

/**
 * What the lifecycle checker (and the broker) need from one event. Filled by
 * ab_agui_validate() on success; fields that the event type does not carry
 * are absent (ptr NULL / NULL pointers).
 */
typedef struct ab_agui_info {
    ab_agui_type_t type;
    const ab_val_t *event;                 /**< the whole event map (for anything else) */
    ab_str_t thread_id;                    /**< RUN_STARTED, RUN_FINISHED */
    ab_str_t run_id;                       /**< RUN_STARTED, RUN_FINISHED */
    ab_str_t parent_run_id;                /**< RUN_STARTED */
    ab_str_t message_id;                   /**< text/reasoning/activity/tool result/span */
    ab_str_t tool_call_id;                 /**< TOOL_CALL_*, TOOL_CALL_RESULT */
    ab_str_t tool_call_name;               /**< TOOL_CALL_START, TOOL_CALL_CHUNK */
    ab_str_t parent_message_id;            /**< TOOL_CALL_START, TOOL_CALL_CHUNK */
    ab_str_t role;                         /**< TEXT_MESSAGE_START/CHUNK */
    ab_str_t name;                         /**< TEXT_MESSAGE_START/CHUNK, SUBAGENT_STARTED */
    ab_str_t step_name;                    /**< STEP_* */
    ab_str_t subagent_run_id;              /**< any attributable event */
    ab_str_t parent_subagent_run_id;       /**< SUBAGENT_STARTED */
    ab_agui_outcome_t outcome;             /**< RUN_FINISHED, SUBAGENT_FINISHED */
    const ab_val_t *interrupts;            /**< RUN_FINISHED interrupt outcome: array */
    const ab_val_t *pending_tool_call_ids; /**< RUN_FINISHED success: array or NULL */
    const ab_val_t *resume;                /**< RUN_STARTED input.resume: array or NULL */
    const ab_val_t *protocol_version;      /**< RUN_STARTED protocolVersion or NULL */
    const ab_val_t *input;                 /**< RUN_STARTED input (RunAgentInput map) or NULL */
} ab_agui_info_t;

/**
 * Called in lenient mode for unknown material (and for advisory notes in
 * either mode). @p path is the JSON pointer, @p msg a short reason.
 */
typedef void (*ab_agui_warn_cb)(void *ud, const char *path, const char *msg);

/**
 * Validate one AG-UI event body.
 *
 * @param event  borrowed; the event map.
 * @param mode   strict (producer) or lenient (consumer).
 * @param warn   optional; receives warnings (unknown fields in lenient mode).
 * @param info   out, optional; filled only on AB_OK.
 * @param err    optional; AB_INVALID_EVENT with err->field = JSON pointer.
 * @return AB_OK or AB_INVALID_EVENT. In lenient mode an unknown event type
 *         returns AB_OK with info->type == AB_AGUI_UNKNOWN (the caller drops
 *         it, as the AG-UI processing model requires).
 */
AB_API AB_NODISCARD ab_status_t ab_agui_validate(const ab_val_t *event, ab_agui_mode_t mode,
                                                 ab_agui_warn_cb warn, void *ud,
                                                 ab_agui_info_t *info, ab_error_t *err);

/**
 * Validate a RunAgentInput as a client sends it (start_run, resume_run):
 * the members and their types of reference section 3. Field paths start
 * at "input" with no leading slash (err->field "input/messages/0/role"),
 * as the paths of a command's fields are (docs/PROTOCOL.md 8.2).
 * @return AB_OK or AB_INVALID_EVENT.
 */
AB_API AB_NODISCARD ab_status_t ab_agui_validate_input(const ab_val_t *input, ab_agui_mode_t mode,
                                                       ab_agui_warn_cb warn, void *ud,
                                                       ab_error_t *err);

/* ---- lifecycle -------------------------------------------------------- */

/** Limits of one lifecycle checker (its memory bound). */
typedef struct ab_lifecycle_limits {
    uint32_t max_open;       /**< open items (messages, calls, spans, steps, subagents) */
    uint32_t max_tool_calls; /**< tool calls tracked per run (pendingToolCallIds) */
    uint32_t max_ids;        /**< other ids remembered per run (closed subagents, ...) */
} ab_lifecycle_limits_t;

/** Defaults: 1024 open items, 4096 tool calls, 4096 other ids. */
AB_API ab_lifecycle_limits_t ab_lifecycle_limits_default(void);

typedef struct ab_lifecycle ab_lifecycle_t;

/** Run status as the checker sees it. */
typedef enum ab_run_state {
    AB_RUN_NEW = 0,  /**< nothing seen yet */
    AB_RUN_ACTIVE,   /**< RUN_STARTED seen */
    AB_RUN_FINISHED, /**< RUN_FINISHED seen (one late RUN_ERROR allowed) */
    AB_RUN_ERRORED,  /**< RUN_ERROR seen: terminal */
} ab_run_state_t;

/**
 * Create a checker for one run.
 * @param thread_id, run_id  the envelope's ids; boundary events must match.
 *        Copied. Pass NULL/0 to learn them from RUN_STARTED instead.
 * @param limits  NULL for the defaults.
 * @return AB_OK, AB_NOMEM or AB_INVALID_ARGUMENT.
 */
AB_API AB_NODISCARD ab_status_t ab_lifecycle_new(ab_lifecycle_t **out, const char *thread_id,
                                                 size_t thread_len, const char *run_id,
                                                 size_t run_len,
                                                 const ab_lifecycle_limits_t *limits);

/** Free a checker. NULL-safe; sets *lc = NULL. */
AB_API void ab_lifecycle_destroy(ab_lifecycle_t **lc);

/**
 * Check the next event of the run and advance the state. On an error the
 * state is unchanged, so the caller may reject the event and go on.
 * @return AB_OK, AB_INVALID_EVENT (rule broken; err->field names the field,
 *         err->message the rule), AB_RUN_TERMINAL (event after the end),
 *         AB_TOO_LARGE (a memory bound of the checker), AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_lifecycle_check(ab_lifecycle_t *lc, const ab_agui_info_t *ev,
                                                   ab_error_t *err);

/**
 * Whether the thread holds activity message @p message_id from outside the
 * run (rule R20 across runs, docs/LIFECYCLE.md): asked when an
 * ACTIVITY_DELTA names an activity message that no snapshot of this run
 * holds. Return AB_OK when an earlier event of the thread created it and no
 * later one dropped it (the delta is accepted), AB_NOT_FOUND when not (the
 * delta is refused with AB_INVALID_EVENT, as without a callback), or another
 * code with @p err set, which the check returns as it is. @p message_id is a
 * view valid for the call.
 */
typedef ab_status_t (*ab_lifecycle_baseline_fn)(void *ud, ab_str_t message_id, ab_error_t *err);

/**
 * Install the baseline callback of @p lc (NULL @p fn: none, the default, so
 * a delta needs a baseline in its own run). Both are borrowed.
 */
AB_API void ab_lifecycle_set_baseline(ab_lifecycle_t *lc, ab_lifecycle_baseline_fn fn, void *ud);

/** The run's state after the events checked so far. */
AB_API ab_run_state_t ab_lifecycle_state(const ab_lifecycle_t *lc);

/** Bytes of memory the checker currently holds (for the documented bound). */
AB_API size_t ab_lifecycle_memory(const ab_lifecycle_t *lc);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_AGUI_H */

/*
 * agentbus/model.h - one type per concept: what the wire codec, the event
 * store, the persistence plugin ABI and the broker all speak about.
 *
 * Each concept has exactly one C type, defined here and nowhere else: a
 * string view, a run's status and outcome, a run head, an event to append,
 * a stored event, the durability of a commit, a replay scope, a cursor and
 * what to read. The store and the plugin ABI (agentbus/plugin.h) take and
 * return these types unchanged, and so does the broker. The wire has its own
 * views where its shape differs (codec.h: ab_head_t, ab_replay_t) and
 * converts only at the codec's edge (ab_head_view(), ab_replay_read()).
 *
 * This header depends on status.h and ids.h only (no msgpack, jansson,
 * ZeroMQ or SQLite), so a plugin author's build needs nothing else.
 *
 * Ownership: ab_str_t and the pointers in ab_append_event_t and ab_row_t are
 * borrowed (their owner says for how long); ab_run_head_t owns copies.
 */
#ifndef AGENTBUS_MODEL_H
#define AGENTBUS_MODEL_H

#include "agentbus/ids.h"
#include "agentbus/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A borrowed string view (not NUL-terminated). ptr == NULL means absent. */
typedef struct ab_str {
    const char *ptr;
    size_t len;
} ab_str_t;

/** RUN_FINISHED / SUBAGENT_FINISHED outcome kinds (AG-UI). */
typedef enum ab_agui_outcome {
    AB_OUTCOME_NONE = 0, /**< absent (= success) */
    AB_OUTCOME_SUCCESS,
    AB_OUTCOME_INTERRUPT,
    AB_OUTCOME_CANCELLED,
    AB_OUTCOME_SUSPENDED, /**< SUBAGENT_FINISHED only */
    AB_OUTCOME_UNKNOWN,   /**< lenient mode: unrecognised outcome type */
} ab_agui_outcome_t;

/** A run's status as the broker reports it. */
typedef enum ab_run_status {
    AB_RUN_STATUS_UNKNOWN = 0, /**< "unknown": never seen */
    AB_RUN_STATUS_ACTIVE,      /**< "active" */
    AB_RUN_STATUS_FINISHED,    /**< "finished" (terminal) */
    AB_RUN_STATUS_ERRORED,     /**< "errored" (terminal) */
} ab_run_status_t;

/** What an acknowledged (committed) event survives. */
typedef enum ab_durability {
    AB_DURABILITY_FSYNC = 0, /**< power loss (SQLite synchronous=FULL); the default */
    AB_DURABILITY_PROCESS,   /**< a crash of the broker (synchronous=NORMAL) */
} ab_durability_t;

/** Scope of a replay and of a read. */
typedef enum ab_replay_scope {
    AB_REPLAY_RUN = 1, /**< "run": one run after a seq */
    AB_REPLAY_THREAD,  /**< "thread": every run of a thread, per-run cursors */
    AB_REPLAY_ALL,     /**< "all": everything after a commit position */
} ab_replay_scope_t;

/** A per-run replay cursor: replay the run from after_seq + 1. */
typedef struct ab_cursor {
    ab_str_t run;
    uint64_t after_seq;
} ab_cursor_t;

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_MODEL_H */

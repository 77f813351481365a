/*
 * agentbus/reducer.h - the thread reducer: folds a thread's AG-UI events, in
 * order, into the current state of the thread (its projection).
 *
 * One reducer per thread. It is pure (no I/O, no clock) and keeps no events:
 * its memory is proportional to the projection (messages, tool calls, state,
 * ...), not to the number of events folded. The projection document and the
 * meaning of every key are specified in docs/REDUCER.md; in short:
 *
 *   { "formatVersion": 2, "threadId": "...", "runs": [], "messages": [],
 *     "toolCalls": [], "reasoning": [], "reasoningSpans": [], "activities": [],
 *     "state": {}, "approvals": [], "tasks": [], "roster": [],
 *     "interactions": [], "artifacts": [], "suggestions": [], "widgets": [],
 *     "warnings": [] }
 *
 * Every key is always present (empty projections as [] or {}).
 *
 * Lenient folding: the reducer expects events that passed the bus's AG-UI
 * validation. Anything it cannot apply (a STATE_DELTA patch that does not
 * apply, an ACTIVITY_DELTA for an unknown activity, a resume entry for an
 * unknown interrupt, a malformed agentkit.* value) leaves the projection
 * unchanged and is recorded in "warnings"; it is never an error.
 *
 * Thread-safety: a reducer is used by one thread at a time.
 */
#ifndef AGENTBUS_REDUCER_H
#define AGENTBUS_REDUCER_H

#include "agentbus/status.h"
#include "agentbus/value.h"

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Version of the projection document ("formatVersion"). */
#define AB_REDUCER_FORMAT_VERSION 2

/** At most this many warnings are kept; older ones are dropped first. */
#define AB_REDUCER_MAX_WARNINGS 64

typedef struct ab_reducer ab_reducer_t;

/**
 * Create an empty reducer for thread @p thread_id (NUL-terminated, copied).
 * @param out  out: the reducer, written only on AB_OK.
 * @return AB_OK, AB_INVALID_ARGUMENT (NULL out or thread id) or AB_NOMEM.
 */
AB_NODISCARD ab_status_t ab_reducer_new(ab_reducer_t **out, const char *thread_id, ab_error_t *err);

/** Free a reducer and its projection. NULL-safe; sets *r = NULL. */
void ab_reducer_destroy(ab_reducer_t **r);

/**
 * Fold one event.
 *
 * @param event_body  the AG-UI event (a map with "type"), borrowed; nothing
 *                    in it is referenced after the call.
 * @param run_id      the envelope's run id (NUL-terminated, borrowed); NULL
 *                    falls back to the event's own "runId", then "".
 * @param seq         the event's seq within its run (recorded as
 *                    startedSeq/endedSeq/lastSeq and in warnings).
 * @return AB_OK; AB_INVALID_ARGUMENT when @p event_body is not a map with a
 *         string "type" (the projection is unchanged); AB_NOMEM (the
 *         projection may then be partially updated: rebuild the reducer).
 *         Unknown event types and unknown CUSTOM names are ignored (AB_OK).
 */
AB_NODISCARD ab_status_t ab_reducer_apply(ab_reducer_t *r, const ab_val_t *event_body,
                                          const char *run_id, uint64_t seq, ab_error_t *err);

/**
 * The current projection (see docs/REDUCER.md). Borrowed: valid until the
 * next ab_reducer_apply() or ab_reducer_destroy(); callers must not modify
 * it (json_deep_copy() it to keep or change it).
 */
const json_t *ab_reducer_state(const ab_reducer_t *r);

/**
 * The reducer's continuation state that is not part of the projection: the
 * current id of each chunk lane (a chunk without an id continues it). An
 * object mapping "<kind>\x1f<subagentRunId>" (kind: text, tool, reasoning)
 * to the current id. Borrowed like ab_reducer_state(). A snapshot stores it
 * so that a restored reducer continues exactly (docs/REDUCER.md, section 6).
 */
const json_t *ab_reducer_lanes(const ab_reducer_t *r);

/**
 * Create a reducer that continues from a projection (as returned by
 * ab_reducer_state()) and its lanes (ab_reducer_lanes(); NULL = none). Both
 * are deep-copied; id indexes are rebuilt. Folding the events that followed
 * then gives exactly what the original reducer would have.
 * @param out  out: the reducer, written only on AB_OK.
 * @return AB_OK; AB_INVALID_ARGUMENT when @p projection is not an object with
 *         every projection key of the right type and the current
 *         formatVersion (err->field names the key), or @p lanes is not an
 *         object of strings; AB_NOMEM.
 */
AB_NODISCARD ab_status_t ab_reducer_from_state(ab_reducer_t **out, const json_t *projection,
                                               const json_t *lanes, ab_error_t *err);

/**
 * Convert a value tree to a new jansson value (strings and keys copied,
 * NUL-safe). Numbers keep their type and value, except an integer above
 * INT64_MAX (AB_VAL_UINT), which jansson's json_int_t cannot hold: it
 * becomes the nearest double, as a JavaScript client holds it.
 * @return the value, or NULL when out of memory.
 */
json_t *ab_val_to_jansson(const ab_val_t *v);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_REDUCER_H */

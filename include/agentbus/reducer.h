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

#include "agentbus/buf.h"
#include "agentbus/status.h"
#include "agentbus/value.h"

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
AB_API AB_NODISCARD ab_status_t ab_reducer_new(ab_reducer_t **out, const char *thread_id,
                                               ab_error_t *err);

/** Free a reducer and its projection. NULL-safe; sets *r = NULL. */
AB_API void ab_reducer_destroy(ab_reducer_t **r);

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
AB_API AB_NODISCARD ab_status_t ab_reducer_apply(ab_reducer_t *r, const ab_val_t *event_body,
                                                 const char *run_id, uint64_t seq, ab_error_t *err);

/**
 * Append the current projection (see docs/REDUCER.md) to @p out as compact
 * JSON text, keys in the document's order.
 * @return AB_OK; AB_INVALID_ARGUMENT (NULL argument); AB_NOMEM (@p out keeps
 *         its length).
 */
AB_API AB_NODISCARD ab_status_t ab_reducer_projection_json(const ab_reducer_t *r, ab_buf_t *out,
                                                           ab_error_t *err);

/**
 * Append the reducer's chunk lanes (the continuation state that is not part
 * of the projection: the current id of each chunk lane, an object mapping
 * "<kind>\x1f<subagentRunId>" to an id) to @p out as compact JSON text. A
 * snapshot stores them so that a restored reducer continues exactly
 * (docs/REDUCER.md, section 7). @return as ab_reducer_projection_json().
 */
AB_API AB_NODISCARD ab_status_t ab_reducer_lanes_json(const ab_reducer_t *r, ab_buf_t *out,
                                                      ab_error_t *err);

/**
 * Create a reducer that continues from a projection and its lanes, given as
 * JSON text (what ab_reducer_projection_json() and ab_reducer_lanes_json()
 * wrote; @p lanes NULL = none). Folding the events that followed then gives
 * exactly what the original reducer would have.
 * @param out  out: the reducer, written only on AB_OK.
 * @return AB_OK; AB_INVALID_ARGUMENT when either text is not JSON, or the
 *         projection is not an object with every projection key of the right
 *         type and the current formatVersion (err->field names the key), or
 *         the lanes are not an object of strings; AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_reducer_from_json(ab_reducer_t **out, const char *projection,
                                                     size_t projection_len, const char *lanes,
                                                     size_t lanes_len, ab_error_t *err);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_REDUCER_H */

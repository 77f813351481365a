/*
 * jansson_internal.h - the jansson side of the reducer, the snapshots and
 * JSON Patch (proto/, and the broker, the command and the tests through the
 * static library): public headers include no third-party header, so what
 * takes or gives a json_t lives here. The public API has the same operations
 * on JSON text (agentbus/reducer.h, snapshot.h, jsonpatch.h).
 */
#ifndef AB_PROTO_JANSSON_INTERNAL_H
#define AB_PROTO_JANSSON_INTERNAL_H

#include "agentbus/jsonpatch.h"
#include "agentbus/reducer.h"
#include "agentbus/snapshot.h"

#include <jansson.h>

struct ab__val_spans; /* value_internal.h */

/* ---- reducer ------------------------------------------------------------- */

/**
 * The current projection (see docs/REDUCER.md). Borrowed: valid until the
 * next ab_reducer_apply() or ab_reducer_destroy(); callers must not modify
 * it (json_deep_copy() it to keep or change it).
 */
const json_t *ab__reducer_state(const ab_reducer_t *r);

/**
 * The reducer's continuation state that is not part of the projection: the
 * current id of each chunk lane (a chunk without an id continues it). An
 * object mapping "<kind>\x1f<subagentRunId>" (kind: text, tool, reasoning)
 * to the current id. Borrowed like ab__reducer_state(). A snapshot stores it
 * so that a restored reducer continues exactly (docs/REDUCER.md, section 6).
 */
const json_t *ab__reducer_lanes(const ab_reducer_t *r);

/** Bytes of the values being appended to that are not written into the projection yet. */
size_t ab__reducer_pending_bytes(const ab_reducer_t *r);

/**
 * Create a reducer that continues from a projection (as returned by
 * ab__reducer_state()) and its lanes (ab__reducer_lanes(); NULL = none). Both
 * are deep-copied; id indexes are rebuilt. Folding the events that followed
 * then gives exactly what the original reducer would have.
 * @param out  out: the reducer, written only on AB_OK.
 * @return AB_OK; AB_INVALID_ARGUMENT when @p projection is not an object with
 *         every projection key of the right type and the current
 *         formatVersion (err->field names the key), or @p lanes is not an
 *         object of strings; AB_NOMEM.
 */
AB_NODISCARD ab_status_t ab__reducer_from_state(ab_reducer_t **out, const json_t *projection,
                                                const json_t *lanes, ab_error_t *err);

/** ab__reducer_from_state(); with @p take the reducer holds references to the projection's
 *  values instead of deep copies (the caller gives its trees up: nothing else may read or
 *  change them afterwards). */
AB_NODISCARD ab_status_t ab__reducer_from_state_ex(ab_reducer_t **out, const json_t *projection,
                                                   const json_t *lanes, bool take, ab_error_t *err);

/**
 * Convert a value tree to a new jansson value (strings and keys copied,
 * NUL-safe). Numbers keep their type and value, except an integer above
 * INT64_MAX (AB_VAL_UINT), which jansson's json_int_t cannot hold: it
 * becomes the nearest double, as a JavaScript client holds it.
 * @return the value, or NULL when out of memory.
 */
json_t *ab__val_to_jansson(const ab_val_t *v);

/* ---- snapshots ----------------------------------------------------------- */

/**
 * The snapshot document of everything fed so far.
 * @param out  out: a new reference (the caller json_decref()s it), AB_OK only.
 * @return AB_OK, AB_INVALID_ARGUMENT (NULL argument), AB_NOMEM.
 */
AB_NODISCARD ab_status_t ab__snapshot_builder_document(const ab_snapshot_builder_t *b, json_t **out,
                                                       ab_error_t *err);

/**
 * Check a snapshot document against every rule of docs/REDUCER.md section 7.
 * @return AB_OK; AB_CORRUPT naming the broken rule (message, detail "rule",
 *         err->field = JSON pointer); AB_INVALID_ARGUMENT for NULL.
 */
AB_NODISCARD ab_status_t ab__snapshot_validate(const json_t *doc, ab_error_t *err);

/** One activeEvents item as the rules read it (a field that is absent or of the wrong type
 *  reads as 0 / NULL / false, which breaks rule "active-events"). */
typedef struct sn_item {
    const char *run;     /**< NUL-terminated, or NULL */
    json_int_t seq, pos; /**< 0 when absent or not an integer */
    bool shape_ok;       /**< the item is a map whose "event" is a map with a string type */
} sn_item_t;

/** Fill @p it with item @p i of @p ud; @p run is a buffer of AB_ID_MAX_BYTES + 1 bytes for
 *  a run id that must be copied to be NUL-terminated. */
typedef void (*sn_item_fn)(const void *ud, size_t i, sn_item_t *it, char *run);

/**
 * ab__snapshot_validate() with the @p n active events given by @p fn instead of the
 * document's own activeEvents (which is then not read): the binary stored form's events,
 * kept packed.
 */
AB_NODISCARD ab_status_t ab__snapshot_validate_items(const json_t *doc, size_t n, sn_item_fn fn,
                                                     const void *ud, ab_error_t *err);

/**
 * The snapshot of a binary stored document (ab_snapshot_load()): @p root is the parsed
 * msgpack map. Every key but activeEvents becomes the jansson document; the active events
 * are validated from @p root and kept packed (not as jansson trees), so that
 * ab_snapshot_builder_from() copies them as bytes. @p spans (NULL = none) is what the parse
 * of the @p len bytes recorded of root.activeEvents[i].event and the tree's depth: the kept
 * events are then copied from those bytes instead of packed again, and the depth is not
 * walked for.
 * @return as ab__snapshot_validate(), plus AB_NOMEM.
 */
AB_NODISCARD ab_status_t ab__snapshot_from_binary(const ab_val_t *root,
                                                  const struct ab__val_spans *spans, size_t len,
                                                  ab_snapshot_t **out, ab_error_t *err);

/**
 * Validate @p doc and wrap it as a snapshot (takes a new reference to it;
 * the caller keeps its own).
 * @return as ab__snapshot_validate(), plus AB_NOMEM.
 */
AB_NODISCARD ab_status_t ab__snapshot_from_json(const json_t *doc, ab_snapshot_t **out,
                                                ab_error_t *err);

/** The whole document, activeEvents included also for the binary form (a new reference;
 *  NULL = no memory). */
json_t *ab__snapshot_full_document(const ab_snapshot_t *s);

/** The validated document (borrowed, valid until ab_snapshot_destroy()); for the binary
 *  form its activeEvents is empty (ab__snapshot_full_document() has them). */
const json_t *ab__snapshot_document(const ab_snapshot_t *s);

/* ---- JSON Patch ---------------------------------------------------------- */

/**
 * Called for each skipped operation with an unknown "op".
 * @param index  position of the operation in the patch.
 * @param op     its "op" value (borrowed, valid during the call).
 */
typedef void (*ab__jsonpatch_warn_fn)(void *ud, size_t index, const char *op);

/**
 * Apply @p patch (a JSON array of operations) to *@p doc.
 *
 * @param doc    in/out: the document (never NULL; json_null() for null). On
 *               AB_OK *doc may be a new reference (the old one is released);
 *               on any error *doc is untouched.
 * @param patch  borrowed; values are deep-copied into the document.
 * @return AB_OK, AB_INVALID_EVENT, AB_NOT_FOUND, AB_CONFLICT, AB_TOO_LARGE
 *         or AB_NOMEM (see agentbus/jsonpatch.h, with the bounds);
 *         AB_INVALID_ARGUMENT when doc is NULL.
 */
AB_NODISCARD ab_status_t ab__jsonpatch_apply(json_t **doc, const json_t *patch, ab_error_t *err);

/** ab__jsonpatch_apply() with a callback for skipped unknown operations. */
AB_NODISCARD ab_status_t ab__jsonpatch_apply_ex(json_t **doc, const json_t *patch,
                                                ab__jsonpatch_warn_fn warn, void *ud,
                                                ab_error_t *err);

/**
 * JSON equality as "test" uses it: numbers by value, objects as key sets.
 * NULL equals only NULL.
 */
bool ab__json_equal_value(const json_t *a, const json_t *b);

#endif /* AB_PROTO_JANSSON_INTERNAL_H */

/*
 * agentbus/snapshot.h - durable thread snapshots: build, parse/validate,
 * restore and continue.
 *
 * A snapshot is one JSON document (docs/REDUCER.md, section 7):
 *
 *   { "formatVersion": 1, "threadId": "t",
 *     "projection": { ...the reducer's projection, every key present... },
 *     "lanes": { ...the reducer's chunk lanes (ab_reducer_lanes_json())... },
 *     "checkpoint": { "runs": { "run-1": 26, "run-2": 3 }, "position": 29 },
 *     "activeRuns": [ "run-2" ],
 *     "activeEvents": [ { "run": "run-2", "seq": 1, "pos": 27, "event": {...} }, ... ] }
 *
 * The builder folds a thread's events in commit order into a reducer and
 * keeps the events of runs that are still active (dropping a run's events as
 * soon as it ends), so its memory is proportional to the state plus the
 * active runs. The parser checks every rule of the document; a broken rule
 * is AB_CORRUPT with the rule's name in the message ("snapshot rule
 * 'active-run-terminal': ..."), in the error detail "rule" and the JSON
 * pointer of the offending value in err->field.
 *
 * Pure: no I/O, no clock. Thread-safety: one thread at a time per handle;
 * a parsed snapshot is read-only and may be shared once built.
 */
#ifndef AGENTBUS_SNAPSHOT_H
#define AGENTBUS_SNAPSHOT_H

#include "agentbus/buf.h"
#include "agentbus/reducer.h"
#include "agentbus/status.h"
#include "agentbus/value.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Version of the snapshot document ("formatVersion"). */
#define AB_SNAPSHOT_FORMAT_VERSION 1

typedef struct ab_snapshot ab_snapshot_t;
typedef struct ab_snapshot_builder ab_snapshot_builder_t;

/**
 * Create a builder for thread @p thread_id (copied; must pass ab_id_check).
 * @param out  out: the builder, written only on AB_OK.
 * @return AB_OK, AB_INVALID_ARGUMENT (NULL out, bad thread id), AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_snapshot_builder_new(ab_snapshot_builder_t **out,
                                                        const char *thread_id, ab_error_t *err);

/**
 * Create a builder that continues from a parsed snapshot: its reducer,
 * checkpoint and the events of its active runs. @p snap is borrowed.
 * @return AB_OK, AB_INVALID_ARGUMENT (NULL argument), AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_snapshot_builder_from(ab_snapshot_builder_t **out,
                                                         const ab_snapshot_t *snap,
                                                         ab_error_t *err);

/**
 * ab_snapshot_builder_from() that consumes the snapshot: its trees and kept
 * events are moved into the builder instead of copied (when nothing else
 * holds the document), which is what a restore followed by
 * ab_snapshot_destroy() would do, at a fraction of the cost. *@p snap is
 * destroyed and set to NULL in every case but AB_INVALID_ARGUMENT.
 * @return as ab_snapshot_builder_from().
 */
AB_API AB_NODISCARD ab_status_t ab_snapshot_builder_take(ab_snapshot_builder_t **out,
                                                         ab_snapshot_t **snap, ab_error_t *err);

/** Free a builder. NULL-safe; sets *b = NULL. */
AB_API void ab_snapshot_builder_destroy(ab_snapshot_builder_t **b);

/**
 * Fold one committed event.
 * @param run    the envelope's run id (NUL-terminated, borrowed, a valid id).
 * @param seq    its seq within the run: 1 for a new run, else the run's last
 *               seq + 1.
 * @param pos    its commit position: greater than that of every earlier
 *               event fed (or restored).
 * @param event  the AG-UI event body (borrowed, copied when kept).
 * @return AB_OK; AB_INVALID_ARGUMENT (bad run id, seq not next, pos not
 *         increasing, body not a map with a type: nothing changes); AB_NOMEM
 *         (the builder is then unusable: rebuild it).
 */
AB_API AB_NODISCARD ab_status_t ab_snapshot_builder_feed(ab_snapshot_builder_t *b, const char *run,
                                                         uint64_t seq, uint64_t pos,
                                                         const ab_val_t *event, ab_error_t *err);

/** The builder's reducer (borrowed; do not apply events to it directly). */
AB_API const ab_reducer_t *ab_snapshot_builder_reducer(const ab_snapshot_builder_t *b);

/** Commit position of the last event fed or restored (0 = none). */
AB_API uint64_t ab_snapshot_builder_position(const ab_snapshot_builder_t *b);

/**
 * An estimate of the builder's memory in bytes: its kept events exactly, the
 * projection as 4x its msgpack size when last encoded (0 before the first
 * ab_snapshot_builder_msgpack()). For cache bounds, not for accounting.
 */
AB_API size_t ab_snapshot_builder_memory(const ab_snapshot_builder_t *b);

/**
 * Append the snapshot document of everything fed so far to @p out as one
 * msgpack map: the same keys, order and values as the JSON document of
 * the snapshot document encoded by ab_json_to_msgpack(), without
 * building that document (the kept events' bodies are copied as packed).
 * Records the projection's encoded size for ab_snapshot_builder_memory().
 * @param max_depth  nesting limit of the document (its root is depth 1).
 * @param max_bytes  limit on the encoded size.
 * @return AB_OK; AB_TOO_LARGE (deeper or larger than the limits);
 *         AB_INVALID_ARGUMENT; AB_NOMEM. On failure @p out keeps its length.
 */
AB_API AB_NODISCARD ab_status_t ab_snapshot_builder_msgpack(ab_snapshot_builder_t *b,
                                                            uint32_t max_depth, size_t max_bytes,
                                                            ab_buf_t *out, ab_error_t *err);

/**
 * Append the snapshot document as compact JSON text (what
 * ab_snapshot_parse() reads back) to @p out, without building it as a
 * jansson tree.
 * @return AB_OK, AB_INVALID_ARGUMENT, AB_NOMEM (@p out keeps its length).
 */
AB_API AB_NODISCARD ab_status_t ab_snapshot_builder_json(ab_snapshot_builder_t *b, ab_buf_t *out,
                                                         ab_error_t *err);

/**
 * Parse and validate snapshot text (@p len bytes, no NUL needed) against
 * every rule of docs/REDUCER.md section 7.
 * @param out  out: the snapshot, written only on AB_OK.
 * @return AB_OK; AB_CORRUPT naming the broken rule (message, detail "rule",
 *         err->field = JSON pointer; rule "json" for text that is not a JSON
 *         object); AB_INVALID_ARGUMENT (NULL); AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_snapshot_parse(const char *json, size_t len, ab_snapshot_t **out,
                                                  ab_error_t *err);

/**
 * Validate a snapshot document given as a value tree - the `snapshot` of a
 * `snapshot_reply` (docs/PROTOCOL.md 7.8) - and hold it. Every string is read
 * by length, so U+0000 in a string is kept. @p doc is borrowed.
 * @param out  out: the snapshot, written only on AB_OK.
 * @return as ab_snapshot_parse() (without rule "json").
 */
AB_API AB_NODISCARD ab_status_t ab_snapshot_from_value(const ab_val_t *doc, ab_snapshot_t **out,
                                                       ab_error_t *err);

/**
 * Read a stored snapshot document in either of its stored forms and validate
 * it as ab_snapshot_parse() does: the binary form (the document as one
 * msgpack map, what ab_snapshot_builder_msgpack() writes and the broker
 * stores) or JSON text (what brokers before the binary form stored). The
 * form is told by the first byte: a msgpack map starts 0x80-0x8f, 0xde or
 * 0xdf, none of which JSON text can start with.
 * @param out  out: the snapshot, written only on AB_OK.
 * @return as ab_snapshot_parse(); a binary document that is not one msgpack
 *         map breaks rule "msgpack" (AB_CORRUPT, detail "rule").
 */
AB_API AB_NODISCARD ab_status_t ab_snapshot_load(const uint8_t *data, size_t len,
                                                 ab_snapshot_t **out, ab_error_t *err);

/** Free a parsed snapshot. NULL-safe; sets *s = NULL. */
AB_API void ab_snapshot_destroy(ab_snapshot_t **s);

/**
 * Append the validated document to @p out as compact JSON text.
 * @return AB_OK, AB_INVALID_ARGUMENT (NULL argument), AB_NOMEM (@p out keeps
 *         its length).
 */
AB_API AB_NODISCARD ab_status_t ab_snapshot_json(const ab_snapshot_t *s, ab_buf_t *out,
                                                 ab_error_t *err);

/** threadId of the snapshot (borrowed, valid until ab_snapshot_destroy()). */
AB_API const char *ab_snapshot_thread_id(const ab_snapshot_t *s);

/** checkpoint.runs[@p run]: the last seq of that run the snapshot covers; 0 = not covered. */
AB_API uint64_t ab_snapshot_checkpoint_seq(const ab_snapshot_t *s, const char *run);

/** Number of activeRuns. */
AB_API size_t ab_snapshot_active_count(const ab_snapshot_t *s);

/** activeRuns[@p i] (borrowed), or NULL past the end. */
AB_API const char *ab_snapshot_active_run(const ab_snapshot_t *s, size_t i);

/** checkpoint.position: commit position of the last event covered. */
AB_API uint64_t ab_snapshot_position(const ab_snapshot_t *s);

/**
 * The nesting depth (the root map is depth 1) of a document ab_snapshot_load()
 * read in its binary form; 0 for one read as JSON text or given as a value.
 * A caller that holds the loaded bytes may send them on as the document (for
 * example as the `snapshot` of a reply) when this depth and their length fit
 * its limits: they passed every rule, and are the same map
 * ab_snapshot_builder_msgpack() writes for the same state.
 */
AB_API uint32_t ab_snapshot_binary_depth(const ab_snapshot_t *s);

/**
 * A reducer that continues exactly where the snapshot's ended: folding the
 * events after checkpoint.position gives the projection of all events.
 * @param out  out: the reducer (caller destroys it), written only on AB_OK.
 * @return AB_OK, AB_INVALID_ARGUMENT (NULL argument), AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_snapshot_restore(const ab_snapshot_t *s, ab_reducer_t **out,
                                                    ab_error_t *err);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_SNAPSHOT_H */

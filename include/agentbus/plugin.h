/*
 * agentbus/plugin.h - the persistence plugin ABI (docs/STORE.md, docs/ARCHITECTURE.md).
 *
 * A persistence plugin is the only place that knows how events are stored.
 * It exports one symbol, AB_PLUGIN_ENTRY_SYMBOL ("ab_plugin_entry"), a
 * function returning a pointer to a constant ab_plugin_t. The broker loads the
 * built-in SQLite plugin by default, or any other shared object by path with
 * dlopen(), and refuses a table whose abi_version differs from
 * AB_PLUGIN_ABI_VERSION (or whose struct_size is smaller than it knows) with
 * a clear error naming both versions.
 *
 * Threading contract: a plugin handle (ab_plugin_db_t) is used by one thread
 * at a time. The broker opens one writer handle (append, claim, heads, snapshot_put) for
 * its writer thread and one read-only handle per replay reader thread; the
 * plugin must let readers read while the writer writes (SQLite: WAL).
 *
 * Durability contract: append_batch() returns AB_OK only after every event of
 * the batch is durable at the configured durability; on any failure nothing
 * of the batch is stored (all or nothing) and the status says whether a retry
 * may help (AB_UNAVAILABLE: disk full, I/O error, locked; AB_CONFLICT: a
 * (run, seq) already stored). Positions are assigned contiguously: the i-th
 * event of a committed batch has position first_pos + i, and positions grow
 * strictly in commit order across batches.
 *
 * Memory contract: append_batch() gets each event's bytes as a borrowed
 * pointer into the producer's frame (ab_append_event_t), valid for the call:
 * a plugin writes them from there or copies them, as it needs.
 *
 * Every function returns an ab_status_t and fills the optional ab_error_t.
 * Strings passed in are borrowed for the call and not NUL-terminated. The
 * types are those of agentbus/model.h; this header needs no other agentbus
 * header beyond status.h, buf.h and ids.h (no msgpack, jansson, ZeroMQ).
 */
#ifndef AGENTBUS_PLUGIN_H
#define AGENTBUS_PLUGIN_H

#include "agentbus/buf.h"
#include "agentbus/ids.h"
#include "agentbus/model.h"
#include "agentbus/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Bumped on any incompatible change of ab_plugin_t or of the model.h types
 * it takes. 2: one run head type (ab_run_head_t, with the parent run and the
 * start and end times), one event-to-append type (ab_append_event_t), one
 * read request and stored row (ab_read_t, ab_row_t).
 */
#define AB_PLUGIN_ABI_VERSION 2
/** The one exported entry point of a plugin shared object. */
#define AB_PLUGIN_ENTRY_SYMBOL "ab_plugin_entry"

typedef struct ab_plugin_db ab_plugin_db_t; /**< a plugin's handle, opaque */

/** Options to open a handle. */
typedef struct ab_plugin_open_opts {
    const char *data_dir;       /**< NUL-terminated; created if missing (writer) */
    ab_durability_t durability; /**< writer only */
    bool readonly;              /**< a replay reader's handle */
} ab_plugin_open_opts_t;

/**
 * The versioned function table. Fields are appended only; a plugin fills
 * struct_size with sizeof(ab_plugin_t) as it was built.
 */
typedef struct ab_plugin {
    uint32_t abi_version; /**< AB_PLUGIN_ABI_VERSION the plugin was built for */
    uint32_t struct_size; /**< sizeof(ab_plugin_t) at build time */
    const char *name;     /**< e.g. "sqlite" */

    /** Open a handle. Writer handles take the data directory lock. */
    ab_status_t (*open)(const ab_plugin_open_opts_t *opts, ab_plugin_db_t **out, ab_error_t *err);
    /** Close a handle (NULL-safe); a writer releases the lock. */
    void (*close)(ab_plugin_db_t *db);

    /** Durably append a batch as one transaction (see the durability contract). */
    ab_status_t (*append_batch)(ab_plugin_db_t *db, const ab_append_event_t *evs, size_t n,
                                int64_t commit_us, uint64_t *first_pos, ab_error_t *err);
    /** Bump the run's epoch (creating the run at epoch 1); report its last seq. */
    ab_status_t (*claim)(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, uint64_t *epoch,
                         uint64_t *last_seq, ab_error_t *err);
    /** Head of one run; status UNKNOWN (and AB_OK) when never seen, its ids filled in. */
    ab_status_t (*head)(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, ab_run_head_t *out,
                        ab_error_t *err);
    /** Heads of every run of a thread, in start order; an unknown thread has none (AB_OK). */
    ab_status_t (*thread_heads)(ab_plugin_db_t *db, ab_str_t thread, ab_head_cb cb, void *ud,
                                ab_error_t *err);
    /** Highest committed position (0 = empty store). */
    ab_status_t (*head_pos)(ab_plugin_db_t *db, uint64_t *pos, ab_error_t *err);
    /** Read rows of one scope after its cursor, in position order, at most
     *  req->limit (>= 1); *count = rows delivered (see ab_read_t). */
    ab_status_t (*read)(ab_plugin_db_t *db, const ab_read_t *req, ab_row_cb cb, void *ud,
                        uint32_t *count, ab_error_t *err);
    /** Exact bytes of (run, seq) into out (reset first) and its position;
     *  AB_NOT_FOUND if absent. Used to tell a duplicate from a conflict. */
    ab_status_t (*event_bytes)(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, uint64_t seq,
                               ab_buf_t *out, uint64_t *pos, ab_error_t *err);

    /*
     * Durable snapshots (docs/REDUCER.md section 7). Both optional: NULL =
     * unsupported (the broker then computes SNAPSHOT by folding the whole
     * thread and announces durableThreadSnapshots `degraded`).
     */
    /** Store @p doc (@p len bytes) as the snapshot of @p thread covering every
     *  committed event up to position @p pos; writer handles only. A
     *  snapshot at a position not above the stored one is ignored (AB_OK).
     *  Its own transaction, or the caller's open one. */
    ab_status_t (*snapshot_put)(ab_plugin_db_t *db, ab_str_t thread, uint64_t pos,
                                const uint8_t *doc, size_t len, ab_error_t *err);
    /** The latest stored snapshot of @p thread into @p doc (reset first) and
     *  its position; AB_NOT_FOUND when none is stored. */
    ab_status_t (*snapshot_get)(ab_plugin_db_t *db, ab_str_t thread, ab_buf_t *doc, uint64_t *pos,
                                ab_error_t *err);
} ab_plugin_t;

/** Signature of the exported entry point. */
typedef const ab_plugin_t *(*ab_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_PLUGIN_H */

/*
 * agentbus/plugin.h - the persistence plugin ABI (docs/STORE.md, docs/ARCHITECTURE.md).
 *
 * A persistence plugin is the only place that knows how events are stored.
 * It exports one symbol, AB_PLUGIN_ENTRY_SYMBOL ("ab_plugin_entry"), a
 * function returning a pointer to a constant ab_plugin_t. The broker loads the
 * built-in SQLite plugin by default, or any other shared object by path with
 * dlopen(), and refuses a table whose abi_version is not between
 * AB_PLUGIN_ABI_OLDEST and AB_PLUGIN_ABI_VERSION (or whose struct_size is
 * smaller than that version's table) with a clear error naming both versions.
 *
 * Threading contract: a plugin handle (ab_plugin_db_t) is used by one thread
 * at a time. The broker opens one writer handle (append, claim, heads, snapshot_put,
 * requests) for
 * its writer thread and one read-only handle per replay reader thread; the
 * plugin must let readers read while the writer writes (SQLite: WAL).
 *
 * Durability contract: every write (append_batch, claim, request_put,
 * request_move) returns AB_OK only after it is durable at the configured
 * durability; append_batch() in particular returns AB_OK only after every event of
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

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Bumped on any incompatible change of ab_plugin_t or of the model.h types
 * it takes. 2: one run head type (ab_run_head_t, with the parent run and the
 * start and end times), one event-to-append type (ab_append_event_t), one
 * read request and stored row (ab_read_t, ab_row_t). 3: durable run
 * requests for dispatch (the request_* entries, ab_request_t and its kin).
 * 4: the optional stats entry (ab_plugin_stats_t) behind `agentbus status`;
 * the open option conninfo and the optional wake_fd/wake_drain pair of a
 * store shared by several brokers (docs/SCALING.md). 5: the optional
 * snapshot_put_part entry (snapshots stored a part per call). 6: dispatch
 * across brokers: ab_request_t.broker, ab_request_move_t.broker,
 * ab_request_new_t.parent_run, the optional request_take, broker_lease and
 * request_cancel entries, and wake_drain's bit mask (AB_WAKE_*) instead of a count.
 * 7: the optional threads_list entry (the `threads` request); cancelling a started run
 * across brokers: ab_request_t.cancel_epoch and the optional request_cancel_held entry.
 * ab_request_t grew, and a table of ABI 6 fills it shorter, so no older table loads
 * (AB_PLUGIN_ABI_OLDEST); an ABI that only adds entries at the end can keep the oldest
 * where it is: the broker reads entries past a table's struct_size as NULL
 * (ab_plugin_has()).
 * 8: the optional append_fenced entry (the thread rules serialised by a shared store), the
 * optional heads_of entry (many heads in one read) and the standby figures at the end of
 * ab_plugin_stats_t (the broker zeroes the struct before
 * the stats call); only additions at the end, so tables of ABI 7 still load.
 * 9: the optional set_lock_wait entry (the broker's commits that must not wait for a
 * lock); an addition at the end, so tables of ABI 7 and 8 still load.
 */
#define AB_PLUGIN_ABI_VERSION 9
/** The oldest abi_version a broker of this header loads (its later entries read as NULL). */
#define AB_PLUGIN_ABI_OLDEST 7
/** The one exported entry point of a plugin shared object. */
#define AB_PLUGIN_ENTRY_SYMBOL "ab_plugin_entry"

typedef struct ab_plugin_db ab_plugin_db_t; /**< a plugin's handle, opaque */

/** What woke a shared store's descriptor (wake_drain's mask). */
#define AB_WAKE_EVENTS   1u /**< another writer may have committed events */
#define AB_WAKE_REQUESTS 2u /**< another broker put or moved a run request */

/** What a store holds, for `agentbus status` and the metrics (stats entry). */
typedef struct ab_plugin_stats {
    uint64_t runs_total;  /**< runs ever recorded (events, a claim or a request made them) */
    uint64_t runs_active; /**< runs started and not ended */
    uint64_t store_bytes; /**< the size of the stored data (SQLite: the database file) */
    uint64_t wal_bytes;   /**< the size of the write-ahead log not yet checkpointed, 0 = none */
    uint64_t checkpoints; /**< WAL checkpoints since the handle opened (0: none or n/a) */
    uint64_t checkpoints_slow;        /**< of which took 100 ms or more */
    uint64_t checkpoint_last_slow_us; /**< the latest slow one's duration */
    uint64_t checkpoint_max_us;       /**< the longest one's */
    /* ABI 8: a store's standbys (a table of ABI 7 leaves them as the broker zeroed them) */
    bool replicas_known;        /**< the plugin reports its standbys (the four below) */
    uint64_t replicas;          /**< standbys streaming the store's changes now */
    uint64_t replicas_sync;     /**< of which a commit waits for (synchronous) */
    uint64_t replica_lag_bytes; /**< WAL the furthest-behind standby has not replayed yet */
    uint64_t replica_lag_us;    /**< the longest replay lag of a standby, in microseconds */
} ab_plugin_stats_t;

/** Options to open a handle. */
typedef struct ab_plugin_open_opts {
    const char *data_dir; /**< NUL-terminated; created if missing (writer) */
    /** The class of the writer's commits; a reader's handle gets the same (the PostgreSQL
     *  plugin holds back a read under `fsync` until the standby has what it read). */
    ab_durability_t durability;
    bool readonly; /**< a replay reader's handle */
    /** The plugin's connection string (NUL-terminated; NULL = none), for a
     *  plugin over a database server: PostgreSQL's libpq conninfo, given to
     *  the broker with --pg. The SQLite plugin ignores it. */
    const char *conninfo;
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
    /**
     * Bump the run's epoch to max(epoch, 1) + 1, creating a new run at epoch 2,
     * and report its last seq. Epoch 1 is the implicit epoch of a run written
     * without a claim (docs/PROTOCOL.md 7.3), so a claim's epoch is always at
     * least 2 and fences every writer that did not claim. (A plugin that
     * returns 1, as this contract once said, costs the broker a second claim.)
     */
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

    /*
     * Durable run requests (dispatch: docs/STORE.md "Run requests"). All
     * eight or none: a plugin that cannot dispatch leaves every one NULL;
     * the broker then announces the `dispatch` capability unsupported and
     * refuses start_run, and the loader refuses a table with only some of
     * them. Writes (put, move) are writer-handle only, each its own durable
     * transaction, and must never run inside an open append batch. The
     * built-in plugin's contract in full is store/store.h's
     * ab__store_request_*().
     */
    /** Store a new request (queued), or return the one its idempotency key
     *  names (*existing = true); AB_CONFLICT when the key comes with another
     *  agent, thread, input or named run. Ids grow in commit order. */
    ab_status_t (*request_put)(ab_plugin_db_t *db, const ab_request_new_t *req, ab_request_t *out,
                               bool *existing, ab_error_t *err);
    /** The request @p id; its input into @p input (reset first) unless NULL.
     *  AB_NOT_FOUND when absent. */
    ab_status_t (*request_get)(ab_plugin_db_t *db, uint64_t id, ab_request_t *out, ab_buf_t *input,
                               ab_error_t *err);
    /** The request of an idempotency key, as request_get. */
    ab_status_t (*request_by_key)(ab_plugin_db_t *db, ab_str_t key, ab_request_t *out,
                                  ab_buf_t *input, ab_error_t *err);
    /** Compare-and-set move (ab_request_move_t): AB_CONFLICT, nothing changed,
     *  when the request is no longer in the expected state and epoch. */
    ab_status_t (*request_move)(ab_plugin_db_t *db, uint64_t id, const ab_request_move_t *mv,
                                ab_request_t *out, ab_error_t *err);
    /** Requests in @p state (of @p agent if agent.ptr), id > after_id, in id
     *  order, at most limit (>= 1); *count = delivered. */
    ab_status_t (*request_list)(ab_plugin_db_t *db, ab_request_state_t state, ab_str_t agent,
                                uint64_t after_id, uint32_t limit, ab_request_cb cb, void *ud,
                                uint32_t *count, ab_error_t *err);
    /** Requests of @p thread that are queued, assigned or started, in id order. */
    ab_status_t (*request_thread_open)(ab_plugin_db_t *db, ab_str_t thread, ab_request_cb cb,
                                       void *ud, ab_error_t *err);
    /** Queued requests of the same agent ahead of @p id (0 = next). */
    ab_status_t (*request_position)(ab_plugin_db_t *db, uint64_t id, uint64_t *ahead,
                                    ab_error_t *err);
    /** The request of run @p run of @p thread, whatever its state, as request_get
     *  (AB_NOT_FOUND when no request names that run). */
    ab_status_t (*request_by_run)(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run,
                                  ab_request_t *out, ab_buf_t *input, ab_error_t *err);

    /* ---- optional (NULL: `agentbus status` reports the figures as unknown) ---- */

    /** What the store holds now, on the writer handle. Must be cheap (it runs on the
     *  writer thread, between group commits): no scan of the events or the runs. */
    ab_status_t (*stats)(ab_plugin_db_t *db, ab_plugin_stats_t *out, ab_error_t *err);

    /*
     * A store shared by several brokers (ABI 4; docs/SCALING.md). Both or
     * none (the loader refuses one alone). NULL: this broker is the store's
     * only writer (SQLite, which locks its directory), so every committed
     * event is its own. Set: other writers may commit; the broker then reads
     * the positions it did not commit itself (read, scope ALL) and fans them
     * out in position order, and answers an AB_CONFLICT of append_batch by
     * reloading the heads of the batch's runs and staging the batch again.
     */
    /** A descriptor that becomes readable when another writer may have
     *  committed (the broker polls it; never read or closed by the broker);
     *  -1 when there is none now (the broker then looks at its poll timeout). */
    int (*wake_fd)(ab_plugin_db_t *db);
    /** Consume what made wake_fd readable, and what the plugin had already
     *  received, without blocking; *woken = what it was, a mask of AB_WAKE_*
     *  (0: nothing new since the last drain; this handle's own request moves
     *  do not count). AB_UNAVAILABLE when the connection is lost (wake_fd may
     *  change once it is back). */
    ab_status_t (*wake_drain)(ab_plugin_db_t *db, uint32_t *woken, ab_error_t *err);

    /*
     * Optional (ABI 5; NULL: the broker stores every snapshot with one
     * snapshot_put). Store the snapshot of @p thread at @p pos in parts, a
     * call per part, so that no call writes more than one part: the broker's
     * writer stores a large document between group commits without holding
     * publishes for the whole of it. Parts come in order, @p idx 0, 1, ...;
     * on @p last the document made of parts 0 … idx (their bytes one after
     * the other) becomes the stored snapshot, atomically, as snapshot_put
     * would store it (ignored when @p pos is not above the stored one). A
     * sequence never finished (an error, a crash, a new sequence for the
     * thread) leaves the stored snapshot as it was; snapshot_get returns the
     * document whole either way. Writer handles only.
     */
    ab_status_t (*snapshot_put_part)(ab_plugin_db_t *db, ab_str_t thread, uint64_t pos,
                                     uint32_t idx, const uint8_t *part, size_t len, bool last,
                                     ab_error_t *err);

    /*
     * Dispatch across brokers (ABI 6; docs/SCALING.md "Dispatch across
     * brokers"). All three optional and all or none; only with the request
     * entries and wake_fd. NULL: this broker is its store's only dispatcher
     * (SQLite), which assigns with claim and request_move.
     */
    /** Take queued request @p id for @p worker of broker @p broker in one
     *  transaction: the request must still be queued, not locked by another
     *  taker, and not held back by its thread (another request of the thread
     *  assigned or started that is not its parent run, or an earlier queued
     *  one); then its run is claimed (the epoch bumped, as claim) and the
     *  request moved to assigned at that epoch. *out = the request as
     *  assigned, its input into @p input (reset first) unless NULL.
     *  AB_CONFLICT, nothing changed, when it cannot be taken now. */
    ab_status_t (*request_take)(ab_plugin_db_t *db, uint64_t id, ab_str_t worker, ab_str_t broker,
                                ab_request_t *out, ab_buf_t *input, ab_error_t *err);
    /** Renew the lease of broker @p broker until @p alive_until_us (wall
     *  clock, us) and deliver the assigned and started requests held through
     *  a broker whose lease ended before @p now_us (a lost broker), in id
     *  order, at most @p limit. */
    ab_status_t (*broker_lease)(ab_plugin_db_t *db, ab_str_t broker, int64_t now_us,
                                int64_t alive_until_us, uint32_t limit, ab_request_cb lost,
                                void *ud, ab_error_t *err);
    /** Cancel request @p id, assigned at @p epoch, in one transaction: unless its run's
     *  RUN_STARTED has committed (the run has a status: started or ended), claim the
     *  run (fencing the assignee) and move the request to cancelled at the claim's epoch.
     *  *out = the request as cancelled. AB_CONFLICT, nothing changed, when it is no longer
     *  assigned at @p epoch or its run has started. */
    ab_status_t (*request_cancel)(ab_plugin_db_t *db, uint64_t id, uint64_t epoch,
                                  ab_request_t *out, ab_error_t *err);

    /*
     * Optional (ABI 7; only with request_cancel; NULL: cancel_run through another broker
     * than the holder of a started run answers no_owner). docs/SCALING.md "Cancelling a
     * started run across brokers".
     */
    /** Ask the holder of request @p id to cancel its run, in one transaction guarded by
     *  state and epoch: the request must be started at @p epoch, or assigned at @p epoch
     *  with its run's RUN_STARTED committed (the run has a status). When the lease of the
     *  broker holding it (ab_request_t.broker) is alive at @p now_us (wall clock, us), its
     *  cancel_epoch is set to @p epoch (a change that notifies the other brokers, as every
     *  move does; already set: nothing changes) and *alive = true; else nothing changes
     *  and *alive = false. *out = the request as stored after it. AB_CONFLICT, nothing
     *  changed, when it is not held so at @p epoch. */
    ab_status_t (*request_cancel_held)(ab_plugin_db_t *db, uint64_t id, uint64_t epoch,
                                       int64_t now_us, ab_request_t *out, bool *alive,
                                       ab_error_t *err);

    /*
     * Optional (ABI 7; NULL: the broker answers `threads` with `unsupported`). The threads with at
     * least one committed event whose id sorts after @p after (bytes compared unsigned, a shorter
     * id first; after.len 0: from the first) and starts with @p prefix (len 0: every thread), in
     * that order, at most @p limit (>= 1); *count = delivered. Must be an index range scan that
     * stops after @p limit threads, never a scan of every thread; any handle (a replay reader's
     * read-only one in the broker).
     */
    ab_status_t (*threads_list)(ab_plugin_db_t *db, ab_str_t after, ab_str_t prefix, uint32_t limit,
                                ab_thread_cb cb, void *ud, uint32_t *count, ab_error_t *err);

    /*
     * Optional (ABI 8; only with wake_fd; docs/SCALING.md "Thread rules across brokers").
     * NULL: a shared store does not serialise the thread rules (within the follow lag two
     * brokers may decide on one thread from states that lack each other's events).
     */
    /** append_batch, fenced by the threads whose state the batch's checks read or change:
     *  in the same transaction, before the batch takes its positions, refuse it whole with
     *  AB_CONFLICT (field "thread", detail "thread_pos") when a batch committed after
     *  position @p seen was fenced by one of @p threads (the @p nthreads ids, repeats
     *  allowed); else store it and record it as the latest fenced batch of each of them.
     *  The broker passes as @p seen a position up to which it has applied every committed
     *  event, its own and the other brokers'. Two batches fenced by one thread therefore
     *  commit one after the other, and the later one only if its broker had seen the earlier
     *  one. @p nthreads 0 is append_batch. */
    ab_status_t (*append_fenced)(ab_plugin_db_t *db, const ab_append_event_t *evs, size_t n,
                                 const ab_str_t *threads, size_t nthreads, uint64_t seen,
                                 int64_t commit_us, uint64_t *first_pos, ab_error_t *err);

    /** Optional (ABI 8; NULL: the broker reads the head of each run it has not cached
     *  with head, a call each). The heads of the runs (@p threads[i], @p runs[i]) for
     *  i < @p n, in one read, each as head would give it (an unknown run's with status
     *  UNKNOWN and its ids filled in), one per entry, in the order asked. */
    ab_status_t (*heads_of)(ab_plugin_db_t *db, const ab_str_t *threads, const ab_str_t *runs,
                            size_t n, ab_head_cb cb, void *ud, ab_error_t *err);

    /** Optional (ABI 9). How long the writes of writer handle @p db wait for a lock that
     *  another process holds before they fail (AB_UNAVAILABLE, nothing written): @p ms
     *  milliseconds, 0 not at all, or the plugin's own wait when @p ms is negative. The
     *  broker sets 0 around the commits its command thread makes itself (the lone path,
     *  docs/ARCHITECTURE.md), which must never wait for a lock, then gives the work to its
     *  writer if one fails; NULL: the broker makes no such commits with this plugin. */
    void (*set_lock_wait)(ab_plugin_db_t *db, int ms);
} ab_plugin_t;

/**
 * Whether table @p p has entry @p field set: within its struct_size and not
 * NULL. Use it for every entry added after AB_PLUGIN_ABI_OLDEST.
 */
#define ab_plugin_has(p, field)                                                                    \
    ((p)->struct_size >= offsetof(ab_plugin_t, field) + sizeof((p)->field) && (p)->field != NULL)

/** Signature of the exported entry point. */
typedef const ab_plugin_t *(*ab_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_PLUGIN_H */

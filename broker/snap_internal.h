/*
 * snap_internal.h - the broker's snapshot machinery (docs/REDUCER.md section
 * 6, docs/OPERATIONS.md "Snapshots"): each broker's cache of thread
 * builders (snapcache.c), the current document of a thread
 * (snapshot_cmd.c) and the low-priority snapshot worker (snapshot_worker.c).
 */
#ifndef AB_BROKER_SNAP_INTERNAL_H
#define AB_BROKER_SNAP_INTERNAL_H

#include "agentbus/snapshot.h"
#include "internal.h"
#include "snapfeed.h"

/** Bound of one broker's builder cache (estimated bytes). */
#define AB_SNAPCACHE_BYTES (64u << 20)
/** The worker folds at most this many events per hold of a thread's builder. */
#define AB_SNAPWORKER_CHUNK 1024u
/** Bound of its number of threads. */
#define AB_SNAPCACHE_ENTRIES 1024u
/** Bound of the worker's queue of threads to snapshot (requests beyond it are dropped). */
#define AB_SNAPWORKER_QUEUE 4096u
/** A clean stop asks for the documents of threads with at least this many events since
 *  their last request (snapsched.c invariant 4) */
#define AB_SNAP_FLUSH_EVENTS 1024u
/** On shutdown the worker computes queued requests for at most this long. */
#define AB_SNAPWORKER_DRAIN_MS 2000
/** The worker thread's nice value (Linux; lower priority than the bus threads). */
#define AB_SNAPWORKER_NICE 19
/** Bound of the documents waiting to be stored, in the writer's store queue and in the
 *  worker's results alike (snapstore.c invariant 2, snapshot_worker.c invariant 8). */
#define AB_SNAP_PENDING_BYTES (64u << 20)

/** A thread's builder with the msgpack document last encoded from it. */
typedef struct ab_snapent {
    char thread[AB_ID_MAX_BYTES + 1];
    size_t tlen;
    ab_snapshot_builder_t *sb;
    ab_buf_t reply; /**< msgpack document at reply_pos (len 0 = none) */
    uint64_t reply_pos;
    size_t unmeasured; /**< bytes of rows folded since the last encode */
    size_t bytes;      /**< estimate, fixed while cached */
    bool listed;       /**< in the cache's list (snapcache.c) */
    bool busy;         /**< taken: owned by one user until put or discarded */
    struct ab_snapent *prev, *next;
} ab_snapent_t;

/**
 * A broker's builder cache, empty (ab__shared_t.snaps: one per broker, made
 * at start-up, shared by its readers and its snapshot worker). Thread-safe:
 * every function below may be called from any of the broker's threads.
 * @return the cache, or NULL when out of memory.
 */
ab__snapcache_t *ab__snapcache_new(void);
/** Free the cache and every entry in it; no entry may be taken (NULL-safe; *c = NULL). */
void ab__snapcache_destroy(ab__snapcache_t **c);
/** Take @p thread's entry (NULL = none); waits while another user has it. */
ab_snapent_t *ab__snapcache_take(ab__snapcache_t *c, ab_str_t thread);
/** Put an entry back (most recently used); evicts least recently used entries over the bounds. */
void ab__snapcache_put(ab__snapcache_t *c, ab_snapent_t *e);
/** Whether @p e would be kept by ab__snapcache_put() (its estimate is within the bound). */
bool ab__snapcache_fits(const ab_snapent_t *e);
/** Free a taken or new entry instead of putting it back (NULL-safe). */
void ab__snapcache_discard(ab__snapcache_t *c, ab_snapent_t *e);

/** Where the snapshot worker is in the feeds of a request (snapshot_cmd.c invariant 6). */
typedef struct ab__feedread {
    const ab__snapfeed_t *seg; /**< the segment being folded, NULL when none is left */
    ab__feedcur_t cur;         /**< place in it */
    uint64_t passed;           /**< position of the last record the place passed (0 = none) */
    uint64_t events;           /**< events folded from feeds */
} ab__feedread_t;

/**
 * The entry of @p thread brought up to every committed event (on handle
 * @p db): *out when not NULL (an entry the caller holds; freed on failure),
 * else from the cache, else from the stored snapshot (or nothing), then
 * the later stored events folded in (at most @p max_events of them, 0 = all:
 * then the entry may not be current yet), taken from the writer's feeds
 * @p feed where they hold them (NULL = none; snapshot_cmd.c invariant 6). The caller owns the entry
 * (put it back with ab__snapcache_put() or ab__snapcache_discard()). @p folded: events folded now.
 * @p memory_max: 0, or the most bytes the builder may hold (ab_snapshot_builder_memory); beyond it
 * the entry is dropped and the answer is AB_TOO_LARGE.
 * @return AB_OK; AB_NOT_FOUND (no stored event); the store's error; AB_CORRUPT
 *         (a stored event that does not fold); AB_TOO_LARGE; AB_NOMEM.
 */
AB_NODISCARD ab_status_t ab__snapshot_current(ab__shared_t *b, ab_plugin_db_t *db, ab_str_t thread,
                                              uint64_t max_events, size_t memory_max,
                                              ab__feedread_t *feed, ab_snapent_t **out,
                                              uint64_t *folded, ab_error_t *err);

typedef struct ab_snapworker ab_snapworker_t;

/** Start the worker of broker @p b (its own read-only handle). NULL when it cannot start. */
ab_snapworker_t *ab__snapworker_start(ab__shared_t *b);
/**
 * Ask for a stored snapshot of @p thread covering at least every event
 * committed now; @p run_end: a run of it ended (else an every-N request,
 * skipped when its document exceeds AB_MAX_REPLY_BYTES). @p feed: NULL, or
 * the thread's events committed since its last request (snapfeed.h), which
 * the worker takes (chained after those of a request still queued, freed
 * when the request is dropped).
 */
void ab__snapworker_request(ab_snapworker_t *w, ab_str_t thread, bool run_end,
                            ab__snapfeed_t *feed);
/** Whether requests are queued or being computed, or documents wait to be collected. */
bool ab__snapworker_busy(ab_snapworker_t *w);
/** The bytes of the documents waiting to be collected; @p waiting (may be NULL): the worker
 *  computes nothing now (no request left, or results to collect first: invariant 8). */
size_t ab__snapworker_pending(ab_snapworker_t *w, bool *waiting);
/**
 * Called by ab__snapworker_collect() per computed snapshot: @p doc is the
 * document to store in its binary form (one msgpack map, read back by
 * ab_snapshot_load()), or empty when it is not to be stored; @p size is the
 * document's size. @p too_large: a request of the thread was over
 * --snapshot-memory since the last collect (@p doc may still hold an earlier
 * document of it). The callback may take the document's buffer (leaving
 * @p doc empty); what it leaves is freed after it returns.
 */
typedef void (*ab_snapworker_cb)(void *ud, ab_str_t thread, uint64_t pos, ab_buf_t *doc,
                                 size_t size, bool too_large);
/** Hand the oldest computed snapshots whose documents fit @p budget bytes (at least one) to
 *  @p cb (on the caller's thread); the rest stay for the next collect. @return how many. */
size_t ab__snapworker_collect(ab_snapworker_t *w, size_t budget, ab_snapworker_cb cb, void *ud);
/** Compute the queued requests (bounded time), stop and free the worker; then collect what is left.
 */
void ab__snapworker_stop(ab_snapworker_t **w, ab_snapworker_cb cb, void *ud);

#endif

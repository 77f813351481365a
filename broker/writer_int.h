/*
 * writer_int.h - the writer thread's three jobs, one file each (broker/ only):
 *
 *   writer.c     group commit and the answers to publish, claim and heads:
 *                the thread's loop, which calls the other two;
 *   fanout.c     the XPUB event endpoint: live messages of committed events
 *                and heartbeats;
 *   snapsched.c  which threads get a durable snapshot when, the counts that
 *                decide it, and storing what the snapshot worker computed.
 *
 * All three run on the writer thread only; their structs are the writer's
 * members, not shared with any other thread.
 */
#ifndef AB_BROKER_WRITER_INT_H
#define AB_BROKER_WRITER_INT_H

#include "snap_internal.h"
#include "snapcount.h"
#include "tprev.h"

/* ---- fanout.c ----------------------------------------------------------- */

/** About how often a heartbeat goes out. */
#define AB__HEARTBEAT_MS 1000

/**
 * The XPUB side of the writer. Live messages are [topic][records]: the
 * consecutive committed events of one run, at most AB_LIVE_EVENTS_MAX
 * records and about AB_LIVE_BYTES_MAX bytes (a larger event goes alone).
 */
typedef struct ab__fanout {
    ab__shared_t *b;
    void *xpub;      /**< bound at start-up, used by the writer thread only */
    ab_buf_t topic;  /**< topic of the live message being built (reused while it matches) */
    ab_buf_t live;   /**< its records frame */
    uint32_t live_n; /**< records in it */
    ab_buf_t hb;     /**< heartbeat encoding */
    ab_error_t
        scratch;     /**< per-event encode error: clear, set only by a failure and then cleared */
    int64_t next_hb; /**< ab__mono_ms() when the next heartbeat is due */
    int sub_opt;     /**< ZMQ_SUBSCRIBE or ZMQ_UNSUBSCRIBE, while a subscription is applied */

    ab__tprev_t tprev; /**< each thread's last position, for the stamps' tprev (tprev.h) */
    bool no_tprev;     /**< --tprev false: the stamps leave it out */
} ab__fanout_t;

/** Set up @p f on broker @p b's XPUB socket; the first heartbeat is due now. */
void ab__fanout_init(ab__fanout_t *f, ab__shared_t *b);

/**
 * Add committed event @p it (stamped @p pos, @p time_us) to the live message
 * of its run; a message is sent when full or when the run changes. Every
 * committed event comes here in position order (the follower's too), and is
 * noted in the tprev table first, also when its message is lost. Never
 * fails: out of memory is a live loss, which subscribers fill from the store.
 */
void ab__fanout_event(ab__fanout_t *f, const ab_seq_item_t *it, int64_t time_us);

/** Send the live message being built, if any (before any answer of its group). */
void ab__fanout_flush(ab__fanout_t *f);

/** Send a heartbeat if one is due. @return ms until the next one is due (>= 0). */
int64_t ab__fanout_tick(ab__fanout_t *f);

/** Read and drop the subscription messages waiting on the XPUB socket. */
void ab__fanout_drain(ab__fanout_t *f);

/**
 * Drain until the socket has no message and no command left, so that its descriptor
 * (ab__fanout_fd) becomes readable again when the next subscription arrives: the lone
 * path's writer waits on that descriptor, not on the socket (writer.c invariant 7).
 * @return false when subscriptions kept coming (bounded): look again without waiting.
 */
bool ab__fanout_settle(ab__fanout_t *f);

/** The XPUB socket's ZMQ_FD, or -1. */
int ab__fanout_fd(ab__fanout_t *f);

/** Free the buffers (the socket is closed by the broker). */
void ab__fanout_free(ab__fanout_t *f);

/* ---- snapsched.c ---------------------------------------------------------- */

/**
 * Durable snapshot scheduling (docs/REDUCER.md section 6): after a group
 * commit, the threads due a snapshot go to the snapshot worker; the
 * documents it computes come back here and are stored with the writer's
 * handle, between groups.
 */
typedef struct ab__snapsched {
    ab__shared_t *b;
    ab_snapworker_t *worker; /**< NULL: the plugin stores no snapshots (or it did not start) */
    /* threads due a snapshot after the last committed group */
    char (*due)[AB_ID_MAX_BYTES + 1];
    bool *run_end; /**< per entry of due: a run ended (else every-N) */
    size_t ndue, due_cap;
    ab__snapcounts_t counts; /**< committed events per thread since its last request */
    bool feeds;              /**< hand committed events to the worker (snapsched.c invariant 5) */
    /* documents waiting to be stored, oldest first (snapstore.c) */
    struct ab__snappend *pend;
    size_t npend, pend_cap;
    size_t pend_bytes; /**< their bytes not yet stored */
} ab__snapsched_t;

/** Start the snapshot worker when the plugin stores snapshots; sets b->snap_failed. */
void ab__snapsched_start(ab__snapsched_t *s, ab__shared_t *b);

/**
 * The group @p evs (@p n events) was committed at positions @p first, first + 1,
 * ...: note the threads with a run
 * that ended in it and those whose counts reached the every-N rule. Call
 * before the pending events are released (ab__seq_commit()).
 */
void ab__snapsched_committed(ab__snapsched_t *s, const ab_append_event_t *evs, size_t n,
                             uint64_t first);

/** Hand the threads noted for the last committed group to the worker (after its answers).
 *  @return whether any was handed (the writer then collects the documents soon). */
bool ab__snapsched_request(ab__snapsched_t *s);

/** Take the documents the worker has computed into the store queue (snapstore.c), while
 *  the queue holds less than AB_SNAP_PENDING_BYTES. */
void ab__snapsched_collect(ab__snapsched_t *s);

/* ---- snapstore.c: storing the documents, a bounded piece between groups ----- */

/** Most bytes one ab__snapstore_step() writes when the plugin stores in parts. */
#define AB_SNAP_PART_BYTES (512u << 10)

/** Queue @p doc (taken: left empty) as the snapshot of @p thread at @p pos; a document of
 *  the thread already waiting is dropped for it. */
void ab__snapstore_add(ab__snapsched_t *s, ab_str_t thread, uint64_t pos, ab_buf_t *doc);
/** Store the next piece (a whole small document, or one part); whether more waits. */
bool ab__snapstore_step(ab__snapsched_t *s);
/** Whether documents wait to be stored. */
bool ab__snapstore_pending(const ab__snapsched_t *s);
/** Store everything waiting (at shutdown), then free the queue. */
void ab__snapstore_drain(ab__snapsched_t *s);

/** Whether the worker has work queued, in progress or waiting to be collected. */
bool ab__snapsched_busy(ab__snapsched_t *s);

/** Let the worker finish (bounded), store what it computed, free everything. */
void ab__snapsched_stop(ab__snapsched_t *s);

#endif /* AB_BROKER_WRITER_INT_H */

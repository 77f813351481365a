/*
 * dispatch_int.h - what dispatch.c (requests, workers, assignment) and
 * dispatch_ops.c (the requests clients send) share. Writer thread only.
 */
#ifndef AB_BROKER_DISPATCH_INT_H
#define AB_BROKER_DISPATCH_INT_H

#include "dispatch.h"

/** One open request (queued, assigned or started), as stored, plus what dispatch needs. */
typedef struct ab__dreq {
    ab_request_t r;
    char parent[AB_ID_MAX_BYTES + 1]; /**< its input's parentRunId; "" = a top-level run */
    char avoid[AB_REQUEST_WORKER_MAX_BYTES + 1]; /**< the worker that declined it last */
    int64_t avoid_until_ms; /**< ... is not given it again before this (mono ms) */
    bool loaded;            /**< read from the store at start-up (its owner may not be back yet) */
    bool lost;              /**< held through another broker whose lease ended (shared store) */
    uint64_t cancel_told;   /**< shared store: the r.cancel_epoch whose run_cancel went out */
    /* a kept move (dispatch_moves.c): one a commit of its run asked for, not stored yet */
    ab_request_state_t mv_to; /**< STARTED or ENDED; AB_REQ_NONE = none */
    uint64_t mv_epoch;        /**< the RUN_STARTED's epoch (0: an end noted alone) */
    uint32_t mv_tries;        /**< store writes of it that failed */
    bool mv_parked;           /**< a hard store error: not retried until its run notes more */
} ab__dreq_t;

/** Shared store: how often the lease is renewed and the table refreshed (ms). */
#define AB__DISPATCH_SYNC_MS 1000
/**
 * Shared store: the soonest a request wake refreshes the table after the last refresh: one
 * millisecond per AB__DISPATCH_REFRESH_ROWS_PER_MS rows that refresh read, at least 1 ms and
 * at most AB__DISPATCH_REFRESH_MS, so that wakes read at most about that many rows a
 * millisecond however large the table is, and a small table follows another broker's moves
 * within a few milliseconds (dispatch_shared.c invariant 3).
 */
#define AB__DISPATCH_REFRESH_MS          100
#define AB__DISPATCH_REFRESH_ROWS_PER_MS 10
/** Rows of a request_list page (start-up, refresh). */
#define AB__DISPATCH_PAGE 1000

/** How long a declined request is not offered to the worker that declined it (ms). */
#define AB__DECLINE_BACKOFF_MS 1000

/** A kept move the store refused (retryable) is tried again after this back-off, doubled
 *  after each failed try up to AB__DISPATCH_MOVE_RETRY_MAX_MS (dispatch_moves.c). */
#define AB__DISPATCH_MOVE_RETRY_MS     100
#define AB__DISPATCH_MOVE_RETRY_MAX_MS 2000

/** Start-up: a load of the open requests the store refused (retryable) is tried again after
 *  this back-off, doubled after each failed try up to AB__DISPATCH_LOAD_RETRY_MAX_MS. */
#define AB__DISPATCH_LOAD_RETRY_MS     100
#define AB__DISPATCH_LOAD_RETRY_MAX_MS 2000

/** One agent of a live worker: capacity and what is assigned to or started by it. */
typedef struct ab__dagent {
    char name[AB_ID_MAX_BYTES + 1];
    uint32_t cap;
    uint32_t used; /**< its assigned and started requests, counted by each pump */
} ab__dagent_t;

/** A live worker registration, as the command thread announced it. */
typedef struct ab__dwk {
    char wid[24];
    char name[AB_REQUEST_WORKER_MAX_BYTES + 1]; /**< the serve's worker name (clipped) */
    zmq_msg_t ident;
    ab__dagent_t *agents;
    size_t nagents;
    uint64_t order;            /**< registration order: ties go to the older */
    char key[AB_KEY_Z85_SIZE]; /**< its authenticated key ("" = no keys): serve prefixes */
} ab__dwk_t;

struct ab__dispatch {
    ab__shared_t *b;
    ab_seq_t *seq;
    void *sock;
    const ab_plugin_t *p;
    ab_plugin_db_t *db;
    ab__dreq_t *q; /**< open requests in id order (= queue order) */
    size_t nq, capq;
    ab__dwk_t *wk;
    size_t nwk, capwk;
    size_t nmoves;         /**< kept moves to try (not parked); at most nq (dispatch_moves.c) */
    int64_t mv_due_ms;     /**< the next try of the kept moves (mono ms; 0 = at the next pump) */
    int64_t mv_backoff_ms; /**< the back-off after the last failed try; 0 = none failed */
    uint64_t next_run;     /**< made run ids: r-<instance>-<n> */
    uint64_t order;
    int64_t grace_until_ms; /**< after start-up: started runs are not orphaned before this */
    /* start-up (dispatch.c "start-up"): the table is the store's only once load() succeeded */
    bool ready;              /**< loaded: requests are served; else answered `unavailable` */
    int64_t load_due_ms;     /**< not ready: the next try of load() (mono ms); -1 = none (off) */
    int64_t load_backoff_ms; /**< the back-off after the last failed try */
    uint32_t load_tries;     /**< failed tries of load() */
    char load_why[AB_ERROR_MESSAGE_MAX]; /**< not ready: why the last try failed */
    bool dirty;                          /**< something changed: the pump may assign */
    ab__dispatch_commit_fn commit;       /**< the writer's: a broker-authored event */
    void *commit_ud;
    ab_doc_t *doc;     /**< the job being answered */
    ab_doc_t *idoc;    /**< stored inputs read back */
    ab_buf_t buf;      /**< scratch: inputs, encodings */
    ab__access_t *acc; /**< during a pump: the access table (NULL = no keys) */
    /* a store shared by brokers (dispatch_shared.c) */
    bool takes;              /**< the plugin takes requests (request_take, broker_lease) */
    bool stale;              /**< another broker moved a request: refresh the table soon */
    int64_t next_sync_ms;    /**< next lease renewal and refresh (mono ms) */
    int64_t last_refresh_ms; /**< the last refresh (mono ms) */
    int64_t refresh_gap_ms;  /**< the soonest a wake refreshes after it (AB__DISPATCH_REFRESH_MS) */
};

/** A growable copy of requests, filled by ab__dq_collect (an ab_request_cb). */
typedef struct ab__rlist {
    ab_request_t *v;
    size_t n, cap;
    bool nomem; /**< a copy failed: the listing stopped there */
} ab__rlist_t;
int ab__dq_collect(void *ud, const ab_request_t *r);

/* dispatch.c */
ab__dreq_t *ab__dq_by_run(ab__dispatch_t *d, ab_str_t thread, ab_str_t run);
ab__dreq_t *ab__dq_by_id(ab__dispatch_t *d, uint64_t id);
/** Insert a stored request (kept in id order). @return false when out of memory. */
bool ab__dq_add(ab__dispatch_t *d, const ab_request_t *r, const char *parent);
/** Replace the copy of request r->id with @p r; remove it when it is no longer open. */
void ab__dq_update(ab__dispatch_t *d, const ab_request_t *r);
/** Whether this broker owns @p q: no broker recorded ("" on SQLite), or this instance. */
bool ab__dq_mine(const ab__dispatch_t *d, const ab__dreq_t *q);
/** Tell the thread's subscribers that run q is orphaned. */
void ab__dq_notice_orphan(ab__dispatch_t *d, const ab__dreq_t *q);
/** Whether a live worker carries the name @p name (clipped). */
bool ab__dq_owner_live(const ab__dispatch_t *d, const char *name);
/** Orphaned: started, its owner not live, past the start-up grace. */
bool ab__dq_orphaned(const ab__dispatch_t *d, const ab__dreq_t *q);
/** ms left of the start-up grace in which started request @p q, its owner not live, is not
 *  orphaned yet (its worker may come back after the restart); 0 = none. */
int64_t ab__dq_grace_left_ms(const ab__dispatch_t *d, const ab__dreq_t *q);
/** The live worker named @p name serving @p agent, or NULL. */
ab__dwk_t *ab__dq_owner(ab__dispatch_t *d, const char *name, const char *agent);
/** The live registration carrying the owner name @p name (PROTOCOL.md 7.12: the owner is
 *  a name), one serving @p agent first; NULL when the run is orphaned. */
ab__dwk_t *ab__dq_named(ab__dispatch_t *d, const char *name, const char *agent);
/** The registration of connection @p identity, or NULL. */
ab__dwk_t *ab__dq_worker_of(ab__dispatch_t *d, zmq_msg_t *identity);
/** Compare-and-set move of request @p q (see ab_request_move_t); updates the table. */
AB_NODISCARD ab_status_t ab__dq_move(ab__dispatch_t *d, ab__dreq_t *q, ab_request_state_t to,
                                     const char *worker, uint64_t epoch, ab_error_t *err);
/** Put assigned request @p q back in the queue, its assignee fenced by a claim (invariant 2
 *  of dispatch.c); the table follows. */
AB_NODISCARD ab_status_t ab__dq_requeue(ab__dispatch_t *d, ab__dreq_t *q, ab_error_t *err);
/** Send @p m unsolicited to worker @p w. */
void ab__dq_send(ab__dispatch_t *d, ab__dwk_t *w, const ab_msg_t *m);
/** Answer @p job with @p m or error @p e and free it. */
void ab__dq_answer(ab__dispatch_t *d, ab_job_t *job, const ab_msg_t *m, const ab_error_t *e);

/** Whether a commit of @p q's run asked for a move the store has not taken yet (a kept
 *  move): its RUN_STARTED (or end) committed, so it is started in all but its stored row
 *  and never goes back to the queue (invariant 2 of dispatch.c). */
static inline bool ab__dq_kept(const ab__dreq_t *q)
{
    return q->mv_to != AB_REQ_NONE;
}

/* dispatch_moves.c */
/** Store the kept moves that are due, in id order (between groups; ab__dispatch_pump). */
void ab__dq_apply_moves(ab__dispatch_t *d);
/** ms until the kept moves are next tried: 0 = now, -1 = none kept. */
long ab__dq_moves_due(const ab__dispatch_t *d, int64_t now);

/* dispatch_load.c */
/** List the store's open requests (started, assigned, queued), at most @p cap, by id. */
AB_NODISCARD ab_status_t ab__dq_list_open(ab__dispatch_t *d, ab__rlist_t *l, size_t cap,
                                          ab_error_t *err);
/** The input's parentRunId of request @p id, into @p out ("" = none). */
AB_NODISCARD ab_status_t ab__dq_parent_of(ab__dispatch_t *d, uint64_t id, char *out, size_t size,
                                          ab_error_t *err);
/** After a restart (own rows) or a lost broker (its rows): settle an assigned request by
 *  its run's head: started (then ended, when its run ended) only when the run's first event
 *  has the request's epoch, else queued again, its assignee fenced (dispatch.c invariant 2). */
AB_NODISCARD ab_status_t ab__dq_recover(ab__dispatch_t *d, ab__dreq_t *q, ab_error_t *err);
/** Not ready (the store's requests not loaded yet): try the load when its back-off is over.
 *  @return ms until its next try (0: loaded now), -1 = none (dispatch is off). */
long ab__dq_load_tick(ab__dispatch_t *d);
/** Not ready: answer dispatch request @p job `unavailable`, saying why; frees it. */
void ab__dq_answer_unready(ab__dispatch_t *d, ab_job_t *job);
/** Not ready: a claim of run @p run of @p thread, which has an open request in the store, is
 *  refused `unavailable` (dispatch cannot judge it yet); AB_OK for any other run. */
AB_NODISCARD ab_status_t ab__dq_claim_unready(ab__dispatch_t *d, ab_str_t thread, ab_str_t run,
                                              ab_error_t *err);

/* dispatch_ops.c */
void ab__dispatch_op(ab__dispatch_t *d, ab_job_t *job, const ab_msg_t *m);
/** Cancel the active (assigned or started, top-level) run of @p thread (if_busy interrupt). */
void ab__dispatch_cancel(ab__dispatch_t *d, ab_str_t thread, const char *reason);

/** A new request as the store takes it (start_run, resume_run). */
typedef struct ab__newreq {
    ab_str_t agent, thread, run, key;
    bool run_named;
    const ab_val_t *input;  /**< as the caller gave it (a map) */
    const ab_val_t *resume; /**< resume_run: the input's resume; NULL = keep the input's */
} ab__newreq_t;
/** The run id: the caller's, else input.runId, else one the broker makes into @p made. */
AB_NODISCARD ab_status_t ab__dispatch_run_id(ab__dispatch_t *d, ab__newreq_t *n, ab_str_t run,
                                             char *made, size_t size, ab_error_t *err);
/** When a request is stored under @p key, answer @p job with it (existing) and @return true;
 *  start_run and resume_run ask first, before judging anything else of the request. */
bool ab__dispatch_known(ab__dispatch_t *d, ab_job_t *job, ab_str_t key);
/** Store @p n (a key stored meanwhile by another broker: its request) and answer run_accepted. */
void ab__dispatch_put(ab__dispatch_t *d, ab_job_t *job, ab__newreq_t *n, ab_if_busy_t if_busy);
/** Answer run_accepted for request @p id. */
void ab__dispatch_accepted(ab__dispatch_t *d, ab_job_t *job, uint64_t id, bool existing);

/* dispatch_shared.c */
/** Take request @p q for worker @p w in one store transaction (plugin request_take): *r =
 *  the request as assigned (its input in d->buf). AB_CONFLICT: not takeable now. */
AB_NODISCARD ab_status_t ab__dq_take(ab__dispatch_t *d, ab__dreq_t *q, const ab__dwk_t *w,
                                     ab_request_t *r, ab_error_t *err);
/** Cancel assigned request @p q in one store transaction (plugin request_cancel): unless its
 *  RUN_STARTED has committed, its run is claimed (the assignee fenced) and it is stored
 *  cancelled; the table follows (q is then gone). AB_CONFLICT: it moved on or started (the
 *  table holds it as stored now). */
AB_NODISCARD ab_status_t ab__dq_cancel_assigned(ab__dispatch_t *d, ab__dreq_t *q, ab_error_t *err);
/** Shared store: ask the broker holding started request @p q (its RUN_STARTED committed,
 *  the request started or still assigned) to cancel its run (plugin request_cancel_held);
 *  *out = delivered when that broker's lease is alive (it sends its worker run_cancel at its
 *  next refresh), else no_owner. AB_CONFLICT: no longer held so (the table reloaded). */
AB_NODISCARD ab_status_t ab__dq_cancel_held(ab__dispatch_t *d, ab__dreq_t *q,
                                            ab_cancel_outcome_t *out, ab_error_t *err);
/** Shared store: read the request of run @p run again into the table (before an op acts
 *  on one run: cancel_run, a claim), so it acts on the stored state, not a second-old copy. */
void ab__dq_reload_run(ab__dispatch_t *d, ab_str_t thread, ab_str_t run);
/** Renew the lease, settle lost brokers' requests, refresh the table when due; the ms
 *  until the next of these (-1 when the store is not shared). */
long ab__dispatch_sync(ab__dispatch_t *d, int64_t now);

/* dispatch_abandon.c */
void ab__dispatch_abandon(ab__dispatch_t *d, ab_job_t *job, const ab_abandon_run_t *a);

/* dispatch_resume.c */
void ab__dispatch_resume(ab__dispatch_t *d, ab_job_t *job, const ab_resume_run_t *r);

#endif /* AB_BROKER_DISPATCH_INT_H */

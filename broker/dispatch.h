/*
 * dispatch.h - run dispatch on the writer thread (docs/PROTOCOL.md 7.12 -
 * 7.16, docs/ARCHITECTURE.md "Dispatch"): the durable requests of
 * start_run and resume_run, their assignment to workers, cancel_run, and
 * what committed RUN_STARTED / RUN_FINISHED / RUN_ERROR events do to them.
 *
 * It lives on the writer thread because everything it decides needs the
 * writer's two things: the plugin's writer handle (requests are stored
 * with it, between event groups) and the sequencer (an assignment is a
 * claim: its epoch fences every other writer of the run). The command
 * thread tells it which workers are live (AB_JOB_WORKER_UP / _DOWN) and
 * hands it the dispatch requests (AB_JOB_DISPATCH); assignments and
 * cancels go to workers as unsolicited messages on the writer's PAIR,
 * which the command thread forwards like any reply.
 */
#ifndef AB_BROKER_DISPATCH_H
#define AB_BROKER_DISPATCH_H

#include "internal.h"

/** Most open requests (queued, assigned, started) a broker holds; beyond: `overloaded`. */
#define AB__DISPATCH_OPEN_MAX 16384

typedef struct ab__dispatch ab__dispatch_t;

/**
 * Set up dispatch over the writer's handle and sequencer (borrowed), loading
 * the open requests of the store: an assigned request whose run its assignee
 * never started goes back to the queue; one whose run it started (its
 * RUN_STARTED committed at the assignment's epoch before the broker stopped)
 * is started. A load the store refuses retryably (locked, I/O error) is not
 * fatal: *out is set, not ready, and ab__dispatch_tick() tries again on a
 * back-off while dispatch requests are answered `unavailable`
 * (dispatch_load.c). *out is NULL (and AB_OK) when the plugin stores no
 * requests: dispatch is then unsupported. A hard error (a damaged store) is
 * returned: dispatch is off.
 */
AB_NODISCARD ab_status_t ab__dispatch_new(ab__dispatch_t **out, ab__shared_t *b, ab_seq_t *seq,
                                          void *sock, ab_error_t *err);

/**
 * Commit one event the broker writes itself (abandon_run's RUN_ERROR), as a
 * group of its own: sequenced, stored, fanned out. Set by the writer.
 * @return AB_OK with its position, or the sequencer's or the store's error.
 */
typedef ab_status_t (*ab__dispatch_commit_fn)(void *ud, const uint8_t *env, size_t len,
                                              uint64_t *pos, ab_error_t *err);

/** Install the writer's commit function (before any job). */
void ab__dispatch_set_commit(ab__dispatch_t *d, ab__dispatch_commit_fn fn, void *ud);

/** Free everything (NULL-safe; *d = NULL). */
void ab__dispatch_destroy(ab__dispatch_t **d);

/** Answer a DISPATCH job, or take in a WORKER_UP / WORKER_DOWN one; frees @p job. */
void ab__dispatch_job(ab__dispatch_t *d, ab_job_t *job);

/**
 * The group @p evs was committed: note the requests it started or ended
 * (applied by ab__dispatch_pump()). Cheap when no request is open.
 */
void ab__dispatch_committed(ab__dispatch_t *d, const ab_append_event_t *evs, size_t n);

/** Store the noted moves (those kept after a refusal once their back-off is over) and assign
 *  what can be assigned (between groups). */
void ab__dispatch_pump(ab__dispatch_t *d);

/** Whether ab__dispatch_pump() has anything to do (a change to assign, kept moves whose
 *  next try is due: none while their back-off runs, dispatch_moves.c). */
bool ab__dispatch_wants_pump(const ab__dispatch_t *d);

/**
 * May connection @p identity claim run @p run of @p thread? Not while the
 * run's request is queued, assigned, or started by a live worker: that
 * would fence the run's owner (AB_CONFLICT naming the owner). An orphaned
 * run may be claimed (continue-by-claim): call ab__dispatch_claimed() after.
 */
AB_NODISCARD ab_status_t ab__dispatch_claim_check(ab__dispatch_t *d, ab_str_t thread, ab_str_t run,
                                                  ab_error_t *err);

/** The claim of @p run by @p identity succeeded with @p epoch: a worker adopts an orphan. */
void ab__dispatch_claimed(ab__dispatch_t *d, ab_str_t thread, ab_str_t run, zmq_msg_t *identity,
                          uint64_t epoch);

/**
 * The sequencer's check of an implicit claim (ab__seq_unclaimed_fn, @p ud the dispatcher): a
 * run queued for dispatch is refused `conflict`, field `run`, to anyone who publishes into it
 * without a claim, as ab__dispatch_claim_check() refuses a claim of it.
 */
AB_NODISCARD ab_status_t ab__dispatch_unclaimed(void *ud, ab_str_t thread, ab_str_t run,
                                                ab_error_t *err);

/** Whether run @p run of @p thread is a dispatched run that is orphaned now (NULL-safe). */
bool ab__dispatch_is_orphan(ab__dispatch_t *d, ab_str_t thread, ab_str_t run);

/** ms until dispatch next has something to do by itself (the next try of a refused load,
 *  orphan grace, decline back-off, the next try of kept moves), -1 = nothing; runs the load
 *  or the pump when that is due. */
long ab__dispatch_tick(ab__dispatch_t *d);

/** Another broker put or moved a request (a shared store's wake): refresh the table soon. */
void ab__dispatch_stale(ab__dispatch_t *d);

/** The access table was reloaded: queued requests may find a worker now. */
void ab__dispatch_access_changed(ab__dispatch_t *d);

#endif /* AB_BROKER_DISPATCH_H */

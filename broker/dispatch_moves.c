/*
 * dispatch_moves.c - the moves committed events ask of their requests (assigned → started at
 * a RUN_STARTED, → ended at a RUN_FINISHED or RUN_ERROR), kept until the store has them.
 *
 * Invariants:
 *  1. A move is noted on its request's entry in the table (ab__dreq_t.mv_to), never in memory
 *     of its own: noting allocates nothing and cannot fail, and there is at most one kept move
 *     per open request the table holds, so at most d->nq of them (AB__DISPATCH_OPEN_MAX for
 *     new requests). A request that leaves the table takes its kept move with it: moot.
 *  2. A later move of a request supersedes the kept one only forward: an end noted after a
 *     start replaces it (storing an end from assigned stores started first, at the
 *     RUN_STARTED's epoch, which the entry keeps), a start noted after an end is dropped.
 *  3. A move the store refuses with a retryable status (ab_status_retryable: locked, I/O
 *     error, disk full) is kept and tried again at the next pump after a back-off,
 *     AB__DISPATCH_MOVE_RETRY_MS doubled after each failed try up to
 *     AB__DISPATCH_MOVE_RETRY_MAX_MS, and reset once a try stores everything kept. A try goes
 *     through the kept moves in request id order and stops at the first retryable failure:
 *     a locked store is waited for once per try, not once per kept move.
 *     ab__dispatch_tick() wakes the writer for the next try (its poll timeout), and
 *     ab__dispatch_wants_pump() says nothing is to do while the back-off runs, so neither the
 *     writer nor the lone path spins while the store is locked.
 *  4. Dropped: a move that no longer applies (apply_move's checks: not assigned at the
 *     RUN_STARTED's epoch any more, or neither assigned nor started for an end), and one the
 *     store refuses with AB_CONFLICT or AB_NOT_FOUND (another broker of a shared store moved
 *     the request first, or it is gone): the store's row wins.
 *  5. Parked: a move the store refuses with a hard error (AB_CORRUPT, AB_INTERNAL, an illegal
 *     move...) stays on its request but is not retried on the timer: the same write fails the
 *     same way until an operator repairs the store, and a retry in id order would hold back
 *     every later kept move. Kept (not dropped), the request still counts as started: never
 *     queued again, its worker's capacity and its thread held (ab__dq_kept). A later move of
 *     its run (its end) tries again; a restart settles it from the run's head
 *     (ab__dq_recover) once the store is readable.
 *  6. Logs: a move's first failed try at warn, later ones at debug, and at info when a move
 *     that failed is finally stored.
 */
#include "dispatch_int.h"

#include <inttypes.h>
#include <string.h>

/* A kept move as apply_move takes it (a copy: the table may move under it). */
typedef struct kmove {
    uint64_t id;
    ab_request_state_t to; /* STARTED or ENDED */
    uint64_t epoch;        /* the RUN_STARTED's epoch; 0 = an end noted alone */
} kmove_t;

/* Whether kept move @p mv still applies to the copy @p q as it is now (invariant 4). */
static bool applies(const ab__dreq_t *q, const kmove_t *mv)
{
    if (mv->to == AB_REQ_STARTED)
        return q->r.state == AB_REQ_ASSIGNED && q->r.epoch == mv->epoch;
    if (q->r.state == AB_REQ_ASSIGNED) /* an end from assigned: at the RUN_STARTED's epoch */
        return mv->epoch == 0 || q->r.epoch == mv->epoch;
    return q->r.state == AB_REQ_STARTED;
}

/*
 * Make kept move @p mv from the copy @p q as it is now. A move to started is made only from
 * assigned at the RUN_STARTED's epoch: on a shared store a refresh between the note and now
 * may show it started already (its holder moved it), and moving it again from there would be
 * a worker here adopting a started run, recording this broker as its holder (move_broker).
 */
static ab_status_t apply_move(ab__dispatch_t *d, ab__dreq_t *q, const kmove_t *mv, ab_error_t *e)
{
    if (!applies(q, mv)) {
        ab__log(AB_LOG_DEBUG,
                "dispatch: request %" PRIu64 " is %s at epoch %" PRIu64 ": not moved to %s here",
                q->r.id, ab_request_state_name(q->r.state), q->r.epoch,
                ab_request_state_name(mv->to));
        return AB_OK;
    }
    if (mv->to == AB_REQ_ENDED && q->r.state == AB_REQ_ASSIGNED) {
        /* an error before start (a RUN_ERROR first, docs/LIFECYCLE.md 2), or a start not
         * stored yet: its assignee ran it, so it is started, then ended (the store moves a
         * request to ended only from started) */
        uint64_t id = q->r.id;
        ab_status_t rc = ab__dq_move(d, q, AB_REQ_STARTED, q->r.worker, q->r.epoch, e);
        if (rc != AB_OK || (q = ab__dq_by_id(d, id)) == NULL)
            return rc;
    }
    uint64_t epoch = mv->to == AB_REQ_STARTED ? mv->epoch : q->r.epoch;
    return ab__dq_move(d, q, mv->to, q->r.worker, epoch, e);
}

/*
 * Shared store: move @p mv was refused against this broker's copy, which may be stale (another
 * broker made the move first, or this broker had not yet seen the assignment): read the stored
 * request and try once more from it when the move starts there (started from assigned at the
 * RUN_STARTED's epoch, ended from started). From any other state it is not this broker's to make
 * now: done already, or the request not yet started, which its holder moves first (or, once that
 * broker's lease has ended, the settlement of its requests).
 */
static ab_status_t move_again(ab__dispatch_t *d, const kmove_t *mv, ab_error_t *e)
{
    ab_request_t r;
    ab_error_clear(e);
    ab_status_t rc = d->p->request_get(d->db, mv->id, &r, NULL, e);
    if (rc != AB_OK)
        return rc;
    ab__dq_update(d, &r);
    ab__dreq_t *q = ab__dq_by_id(d, mv->id);
    ab_request_state_t from = mv->to == AB_REQ_STARTED ? AB_REQ_ASSIGNED : AB_REQ_STARTED;
    if (q == NULL || r.state != from || (mv->to == AB_REQ_STARTED && r.epoch != mv->epoch)) {
        ab__log(AB_LOG_DEBUG, "dispatch: request %" PRIu64 " is %s: not moved to %s here", mv->id,
                ab_request_state_name(r.state), ab_request_state_name(mv->to));
        return AB_OK;
    }
    return apply_move(d, q, mv, e);
}

static void clear(ab__dreq_t *q)
{
    q->mv_to = AB_REQ_NONE;
    q->mv_epoch = 0;
    q->mv_tries = 0;
    q->mv_parked = false;
}

/* What became of kept move @p mv after a try that returned @p rc (error @p e): cleared,
 * kept for a retry, or parked (invariants 3 - 6). @return whether it waits for a retry. */
static bool settle(ab__dispatch_t *d, const kmove_t *mv, uint32_t tries, ab_status_t rc,
                   const ab_error_t *e)
{
    ab__dreq_t *q = ab__dq_by_id(d, mv->id); /* NULL: it left the table (ended, or moot) */
    char line[256];
    if (rc == AB_OK || rc == AB_CONFLICT || rc == AB_NOT_FOUND || q == NULL) {
        bool stored = q != NULL ? q->r.state == mv->to : mv->to == AB_REQ_ENDED;
        if (rc == AB_OK && tries > 0)
            ab__log(AB_LOG_INFO,
                    "dispatch: request %" PRIu64 " %s %s after %" PRIu32 " failed tries", mv->id,
                    stored ? "moved to" : "needs no move to", ab_request_state_name(mv->to), tries);
        else if (rc != AB_OK) /* a conflict: another broker made the move first */
            ab__log(rc == AB_CONFLICT ? AB_LOG_DEBUG : AB_LOG_WARN,
                    "dispatch: request %" PRIu64 " not moved to %s: %s", mv->id,
                    ab_request_state_name(mv->to), ab_error_format(e, line, sizeof(line)));
        if (q != NULL)
            clear(q);
        if (q != NULL && stored && ab__dq_orphaned(d, q)) { /* its worker left meanwhile */
            ab__log(AB_LOG_WARN, "dispatch: run %s of thread %s is orphaned (worker %s is gone)",
                    q->r.run, q->r.thread, q->r.worker);
            ab__dq_notice_orphan(d, q);
        }
        return false;
    }
    q->mv_tries++;
    if (!ab_status_retryable(rc)) {
        q->mv_parked = true;
        ab__log(AB_LOG_ERROR,
                "dispatch: request %" PRIu64 " not moved to %s: %s; kept, not tried again "
                "until its run moves on (a restart settles it)",
                mv->id, ab_request_state_name(mv->to), ab_error_format(e, line, sizeof(line)));
        return false;
    }
    ab__log(
        q->mv_tries == 1 ? AB_LOG_WARN : AB_LOG_DEBUG,
        "dispatch: request %" PRIu64 " not moved to %s: %s; kept and tried again (try %" PRIu32 ")",
        mv->id, ab_request_state_name(mv->to), ab_error_format(e, line, sizeof(line)), q->mv_tries);
    return true;
}

/* Try kept move of @p q once. @return whether it waits for a retry. */
static bool try_one(ab__dispatch_t *d, ab__dreq_t *q)
{
    kmove_t mv = {q->r.id, q->mv_to, q->mv_epoch};
    uint32_t tries = q->mv_tries;
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t rc = apply_move(d, q, &mv, &e); /* q may have moved or gone after this */
    if (rc != AB_OK && !ab_status_retryable(rc) && d->takes)
        rc = move_again(d, &mv, &e);
    return settle(d, &mv, tries, rc, &e);
}

/* After a try: the back-off when a move waits for a retry (invariant 3), else none. */
static void schedule(ab__dispatch_t *d, bool retry)
{
    if (!retry) {
        d->mv_backoff_ms = 0;
        d->mv_due_ms = 0;
        return;
    }
    int64_t b = d->mv_backoff_ms ? 2 * d->mv_backoff_ms : AB__DISPATCH_MOVE_RETRY_MS;
    d->mv_backoff_ms = b < AB__DISPATCH_MOVE_RETRY_MAX_MS ? b : AB__DISPATCH_MOVE_RETRY_MAX_MS;
    d->mv_due_ms = ab__mono_ms() + d->mv_backoff_ms;
}

void ab__dq_apply_moves(ab__dispatch_t *d)
{
    if (d->nmoves == 0 || ab__mono_ms() < d->mv_due_ms)
        return;
    size_t kept = 0;
    bool retry = false;
    for (size_t i = 0; i < d->nq; i++) {
        ab__dreq_t *q = &d->q[i];
        if (!ab__dq_kept(q) || q->mv_parked)
            continue;
        if (retry) { /* after a retryable failure the rest waits for the next try */
            kept++;
            continue;
        }
        uint64_t id = q->r.id;
        retry = try_one(d, q);
        if ((q = ab__dq_by_id(d, id)) == NULL)
            i--; /* it left the table: the next entry is at i now */
        else
            kept += ab__dq_kept(q) && !q->mv_parked;
    }
    d->nmoves = kept;
    schedule(d, retry);
}

long ab__dq_moves_due(const ab__dispatch_t *d, int64_t now)
{
    if (d->nmoves == 0)
        return -1;
    return now >= d->mv_due_ms ? 0 : (long)(d->mv_due_ms - now);
}

bool ab__dispatch_wants_pump(const ab__dispatch_t *d)
{
    /* asked after every lone commit: the clock is read only when a move is kept */
    return d != NULL && (d->dirty || (d->nmoves > 0 && ab__dq_moves_due(d, ab__mono_ms()) == 0));
}

/* Keep move @p to (at RUN_STARTED epoch @p epoch) on @p q, after any it holds (invariant 2). */
static void note_move(ab__dispatch_t *d, ab__dreq_t *q, ab_request_state_t to, uint64_t epoch)
{
    if (!ab__dq_kept(q) || q->mv_parked)
        d->nmoves++;
    if (!ab__dq_kept(q))
        q->mv_epoch = to == AB_REQ_STARTED ? epoch : 0;
    if (q->mv_to != AB_REQ_ENDED) /* a start after an end is not one: the end stays */
        q->mv_to = to;
    q->mv_parked = false; /* its run moved on: the store is tried again */
    d->dirty = true;      /* a followed commit: the next tick's pump stores it */
}

void ab__dispatch_committed(ab__dispatch_t *d, const ab_append_event_t *evs, size_t n)
{
    if (d == NULL || d->nq == 0)
        return;
    for (size_t i = 0; i < n; i++) {
        const ab_append_event_t *ev = &evs[i];
        if (ev->status == AB_RUN_STATUS_UNKNOWN)
            continue;
        ab__dreq_t *q = ab__dq_by_run(d, ev->thread, ev->run);
        if (q == NULL)
            continue;
        if (ev->status == AB_RUN_STATUS_ACTIVE && q->r.state == AB_REQ_ASSIGNED &&
            ev->epoch == q->r.epoch)
            note_move(d, q, AB_REQ_STARTED, ev->epoch);
        else if (ev->status == AB_RUN_STATUS_FINISHED || ev->status == AB_RUN_STATUS_ERRORED)
            note_move(d, q, AB_REQ_ENDED, 0);
    }
}

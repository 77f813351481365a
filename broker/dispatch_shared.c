/*
 * dispatch_shared.c - dispatch over a store shared by several brokers
 * (docs/SCALING.md "Dispatch across brokers"): taking a request in one store
 * transaction, the broker's lease, the requests of a lost broker, the
 * refresh of the table of open requests from the store, and cancels across
 * brokers.
 *
 * Invariants:
 *  1. Nothing here runs unless the plugin takes requests (d->takes: PostgreSQL);
 *     over SQLite the broker is its store's only dispatcher and its table is
 *     the truth (dispatch.c invariant 1).
 *  2. An assignment is one store transaction (request_take): the claim that
 *     fences the run's earlier writers happens only with the move to assigned,
 *     so a broker with a stale copy of a request fences nobody.
 *  3. The table is the store's open requests as of the last refresh (at most
 *     AB__DISPATCH_SYNC_MS old; after another broker's move woke this one, one
 *     ms per AB__DISPATCH_REFRESH_ROWS_PER_MS rows the last refresh read, 1 to
 *     AB__DISPATCH_REFRESH_MS), bounded by AB__DISPATCH_OPEN_MAX rows, the held ones
 *     (assigned, started) first. What only this broker knows of a row (its
 *     parent run, the decline back-off, loaded, lost) is kept across refreshes.
 *  4. A broker moves back to the queue, or calls orphaned, only what it owns
 *     (ab__dq_mine) or what a broker whose lease ended held; every such move is
 *     a compare-and-set, so of two brokers settling one lost request one wins.
 *  5. A cancel of a started run that another broker holds claims nothing
 *     (request_cancel_held marks the request at its epoch, the worker is not
 *     fenced); the holder sends its worker run_cancel once per marked epoch,
 *     at the refresh that finds the mark (the mark's update woke it).
 */
#include "dispatch_int.h"
#include "seq_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static ab_str_t sv(const char *s)
{
    return (ab_str_t){s, strlen(s)};
}

ab_status_t ab__dq_take(ab__dispatch_t *d, ab__dreq_t *q, const ab__dwk_t *w, ab_request_t *r,
                        ab_error_t *err)
{
    uint64_t id = q->r.id;
    ab_status_t rc =
        d->p->request_take(d->db, id, sv(w->name), sv(d->b->instance), r, &d->buf, err);
    if (rc == AB_CONFLICT) {
        ab__log(AB_LOG_DEBUG, "dispatch: request %" PRIu64 " not taken: %s", id, err->message);
        d->stale = true;
        return rc;
    }
    if (rc != AB_OK)
        return rc;
    ab__seq_run_t *run = ab__seq_find(d->seq, sv(r->thread), sv(r->run));
    if (run != NULL)
        ab__seq_evict(d->seq, run); /* its epoch moved in the store: reload the head */
    ab__dq_update(d, r);
    return AB_OK;
}

/*
 * A request of a worker here that another broker cancelled before RUN_STARTED (cancel_run
 * through it: its claim fenced the worker, the request left the open ones): tell the worker,
 * as a cancel through this broker would (PROTOCOL.md 7.13). @p old: the copy before the
 * refresh, which left the table.
 */
static void tell_cancelled(ab__dispatch_t *d, const ab__dreq_t *old)
{
    ab_request_t r;
    ab_error_t e = AB_ERROR_INIT;
    ab__dwk_t *w = ab__dq_owner(d, old->r.worker, old->r.agent);
    if (w == NULL || d->p->request_get(d->db, old->r.id, &r, NULL, &e) != AB_OK ||
        r.state != AB_REQ_CANCELLED)
        return;
    ab_msg_t m = {.op = AB_OP_RUN_CANCEL, .v = 1};
    m.u.run_cancel = (ab_run_cancel_t){old->r.id, sv(old->r.thread), sv(old->r.run), old->r.epoch,
                                       sv("cancelled through another broker")};
    ab__dq_send(d, w, &m);
    ab__log(AB_LOG_INFO, "dispatch: request %" PRIu64 " was cancelled through another broker",
            old->r.id);
}

/* Whether request @p id is in the listing @p l (sorted by id). */
static bool listed(const ab__rlist_t *l, uint64_t id)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (l->v[mid].id == id)
            return true;
        if (l->v[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

ab_status_t ab__dq_cancel_assigned(ab__dispatch_t *d, ab__dreq_t *q, ab_error_t *err)
{
    ab_request_t r;
    char thread[sizeof(q->r.thread)], run[sizeof(q->r.run)];
    memcpy(thread, q->r.thread, sizeof(thread));
    memcpy(run, q->r.run, sizeof(run));
    ab_status_t rc = d->p->request_cancel(d->db, q->r.id, q->r.epoch, &r, err);
    if (rc == AB_CONFLICT)
        ab__dq_reload_run(d, sv(thread), sv(run));
    if (rc != AB_OK)
        return rc;
    ab__seq_run_t *sr = ab__seq_find(d->seq, sv(thread), sv(run));
    if (sr != NULL)
        ab__seq_evict(d->seq, sr); /* the claim moved its epoch in the store */
    ab__dq_update(d, &r);
    return AB_OK;
}

ab_status_t ab__dq_cancel_held(ab__dispatch_t *d, ab__dreq_t *q, ab_cancel_outcome_t *out,
                               ab_error_t *err)
{
    ab_request_t r;
    bool alive = false;
    char thread[sizeof(q->r.thread)], run[sizeof(q->r.run)];
    memcpy(thread, q->r.thread, sizeof(thread));
    memcpy(run, q->r.run, sizeof(run));
    ab_status_t rc =
        d->p->request_cancel_held(d->db, q->r.id, q->r.epoch, ab__now_us(), &r, &alive, err);
    if (rc == AB_CONFLICT)
        ab__dq_reload_run(d, sv(thread), sv(run));
    if (rc != AB_OK)
        return rc;
    ab__dq_update(d, &r);
    *out = alive ? AB_CANCEL_DELIVERED : AB_CANCEL_NO_OWNER;
    if (alive)
        ab__log(AB_LOG_INFO, "dispatch: cancel of run %s asked of broker %s", run, r.broker);
    return AB_OK;
}

/*
 * Requests of workers here whose run another broker was asked to cancel (cancel_run
 * through it: the request's cancel_epoch is its epoch): send the worker run_cancel with that
 * epoch, once per epoch, as a cancel through this broker would (PROTOCOL.md 7.13).
 */
static void tell_held_cancels(ab__dispatch_t *d)
{
    for (size_t i = 0; i < d->nq; i++) {
        ab__dreq_t *q = &d->q[i];
        bool held = q->r.state == AB_REQ_STARTED || q->r.state == AB_REQ_ASSIGNED;
        if (!held || q->r.cancel_epoch == 0 || q->r.cancel_epoch != q->r.epoch ||
            q->cancel_told == q->r.cancel_epoch || !ab__dq_mine(d, q))
            continue;
        ab__dwk_t *w = ab__dq_owner(d, q->r.worker, q->r.agent);
        if (w == NULL)
            continue; /* not connected (orphaned): told if it comes back at this epoch */
        ab_msg_t m = {.op = AB_OP_RUN_CANCEL, .v = 1};
        m.u.run_cancel = (ab_run_cancel_t){q->r.id, sv(q->r.thread), sv(q->r.run), q->r.epoch,
                                           sv("cancelled through another broker")};
        ab__dq_send(d, w, &m);
        q->cancel_told = q->r.cancel_epoch;
        ab__log(AB_LOG_INFO, "dispatch: run %s: cancel through another broker sent to %s", q->r.run,
                w->wid);
    }
}

void ab__dq_reload_run(ab__dispatch_t *d, ab_str_t thread, ab_str_t run)
{
    ab_request_t r;
    ab_error_t e = AB_ERROR_INIT;
    if (d == NULL || !d->takes || d->p->request_by_run(d->db, thread, run, &r, NULL, &e) != AB_OK)
        return; /* not a dispatched run (or the store is away: the table answers) */
    if (ab__dq_by_id(d, r.id) != NULL) {
        ab__dq_update(d, &r);
        return;
    }
    char parent[AB_ID_MAX_BYTES + 1];
    bool open = r.state == AB_REQ_QUEUED || r.state == AB_REQ_ASSIGNED || r.state == AB_REQ_STARTED;
    if (open && d->nq < AB__DISPATCH_OPEN_MAX &&
        ab__dq_parent_of(d, r.id, parent, sizeof(parent), &e) == AB_OK)
        (void)ab__dq_add(d, &r, parent);
}

/* Replace the table with the store's open requests (invariant 3). */
static void refresh(ab__dispatch_t *d, int64_t now)
{
    ab__rlist_t l = {0};
    ab_error_t e = AB_ERROR_INIT;
    ab__dreq_t *v = NULL;
    d->last_refresh_ms = now;
    d->stale = false;
    ab_status_t rc = ab__dq_list_open(d, &l, AB__DISPATCH_OPEN_MAX, &e);
    if (rc == AB_OK && l.n > 0 && (v = calloc(l.n, sizeof(*v))) == NULL)
        rc = ab_error_set(&e, AB_NOMEM, "", "out of memory refreshing requests");
    for (size_t i = 0; rc == AB_OK && i < l.n; i++) {
        const ab__dreq_t *old = ab__dq_by_id(d, l.v[i].id);
        if (old != NULL)
            v[i] = *old;
        else
            rc = ab__dq_parent_of(d, l.v[i].id, v[i].parent, sizeof(v[i].parent), &e);
        v[i].r = l.v[i];
    }
    for (size_t i = 0; rc == AB_OK && i < d->nq; i++)
        if (d->q[i].r.state == AB_REQ_ASSIGNED && ab__dq_mine(d, &d->q[i]) &&
            !listed(&l, d->q[i].r.id) && l.n < AB__DISPATCH_OPEN_MAX)
            tell_cancelled(d, &d->q[i]);
    free(l.v);
    if (rc != AB_OK) {
        char line[256];
        ab__log(AB_LOG_WARN, "dispatch: cannot refresh the open requests: %s",
                ab_error_format(&e, line, sizeof(line)));
        free(v);
        d->stale = true; /* again at the next sync */
        return;
    }
    free(d->q);
    d->q = v;
    d->nq = d->capq = l.n;
    d->dirty = true;
    d->refresh_gap_ms = (int64_t)(l.n / AB__DISPATCH_REFRESH_ROWS_PER_MS);
    if (d->refresh_gap_ms < 1)
        d->refresh_gap_ms = 1;
    if (d->refresh_gap_ms > AB__DISPATCH_REFRESH_MS)
        d->refresh_gap_ms = AB__DISPATCH_REFRESH_MS;
    tell_held_cancels(d);
}

/* The requests a lost broker held (broker_lease): settled after the refresh (invariant 4). */
static void settle_lost(ab__dispatch_t *d, const ab__rlist_t *lost)
{
    for (size_t i = 0; i < lost->n; i++) {
        ab__dreq_t *q = ab__dq_by_id(d, lost->v[i].id);
        ab_error_t e = AB_ERROR_INIT;
        if (q == NULL || ab__dq_mine(d, q))
            continue;
        uint64_t id = q->r.id;
        if (q->r.state == AB_REQ_ASSIGNED) {
            char broker[sizeof(q->r.broker)];
            memcpy(broker, q->r.broker, sizeof(broker));
            if (ab__dq_recover(d, q, &e) == AB_OK)
                ab__log(AB_LOG_INFO, "dispatch: request %" PRIu64 " of lost broker %s settled", id,
                        broker);
            else
                ab__log(e.code == AB_CONFLICT ? AB_LOG_DEBUG : AB_LOG_WARN,
                        "dispatch: request %" PRIu64 " of lost broker %s: %s", id, broker,
                        e.message);
            q = ab__dq_by_id(d, id);
        }
        if (q != NULL && q->r.state == AB_REQ_STARTED && !ab__dq_mine(d, q) && !q->lost) {
            q->lost = true;
            ab__log(AB_LOG_WARN, "dispatch: run %s of thread %s is orphaned (broker %s is lost)",
                    q->r.run, q->r.thread, q->r.broker);
            ab__dq_notice_orphan(d, q);
        }
    }
}

/* Renew this broker's lease; the requests of lost brokers into @p lost. */
static void lease(ab__dispatch_t *d, ab__rlist_t *lost)
{
    ab_error_t e = AB_ERROR_INIT;
    int64_t now = ab__now_us();
    ab_status_t rc = d->p->broker_lease(d->db, sv(d->b->instance), now,
                                        now + (int64_t)AB_LEASE_MS_DEFAULT * 1000,
                                        AB__DISPATCH_PAGE, lost ? ab__dq_collect : NULL, lost, &e);
    if (rc != AB_OK) {
        char line[256];
        ab__log(AB_LOG_WARN, "dispatch: cannot renew the broker's lease: %s",
                ab_error_format(&e, line, sizeof(line)));
    }
}

/* The soonest a wake refreshes after the last refresh (invariant 3; before any: the most). */
static int64_t gap(const ab__dispatch_t *d)
{
    return d->refresh_gap_ms > 0 ? d->refresh_gap_ms : AB__DISPATCH_REFRESH_MS;
}

long ab__dispatch_sync(ab__dispatch_t *d, int64_t now)
{
    if (d == NULL || !d->takes)
        return -1;
    if (now >= d->next_sync_ms) {
        bool first = d->next_sync_ms == 0; /* at start-up: the lease only, load() follows */
        ab__rlist_t lost = {0};
        lease(d, first ? NULL : &lost);
        if (!first) {
            refresh(d, now);
            settle_lost(d, &lost);
        }
        free(lost.v);
        d->next_sync_ms = now + AB__DISPATCH_SYNC_MS;
    } else if (d->stale && now >= d->last_refresh_ms + gap(d)) {
        refresh(d, now);
    }
    int64_t due = d->next_sync_ms - now;
    if (d->stale && d->last_refresh_ms + gap(d) - now < due)
        due = d->last_refresh_ms + gap(d) - now;
    return due < 0 ? 0 : (long)due;
}

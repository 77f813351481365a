/*
 * dispatch_load.c - dispatch's start-up (dispatch.h ab__dispatch_new): the store's open
 * requests read into the table, the assigned ones this broker held when it stopped settled
 * from their runs' heads (ab__dq_recover, also used for a lost broker's requests on a shared
 * store, dispatch_shared.c), and the retries of a load the store refused.
 *
 * Invariants:
 *  1. Dispatch serves requests only once the table is the store's (d->ready): load() read
 *     every open request and settled every assigned one of this broker. Until then the table
 *     is empty (nothing is assigned, moved or called orphaned), every dispatch request is
 *     answered `unavailable` (retryable) saying why, the `dispatch` capability is announced
 *     `unavailable` (b->dispatch_failed), and a claim of a run with an open request is
 *     refused `unavailable`. Worker registrations are taken in all the same: they are not
 *     stored, and the first pump after the load assigns to the workers live then.
 *  2. A load the store refuses with a retryable status (locked by another process, an I/O
 *     error, a full disk) is tried again from scratch after a back-off,
 *     AB__DISPATCH_LOAD_RETRY_MS doubled after each failed try up to
 *     AB__DISPATCH_LOAD_RETRY_MAX_MS, from ab__dispatch_tick() (the writer's poll timeout: no
 *     spin, and a locked store is waited for once per try). A try that fails empties the
 *     table; what it settled is in the store, which the next try reads. A hard error (a
 *     damaged store) turns dispatch off for the broker's run, at the first try as at a
 *     later one.
 *  3. Settling is idempotent and reads the runs' heads as they are when it runs: a
 *     RUN_STARTED that commits before the load (its assignee back before the store was) is
 *     found there, and its request is started, never queued again; one whose run has no
 *     event of its assignment goes back to the queue with a claim that fences its assignee.
 *  4. An assigned request is moved on to started only when its run's first event (its
 *     RUN_STARTED, or a RUN_ERROR first) has the request's own epoch: events of an earlier
 *     writer of the run, whose epoch the assignment's claim fenced, were not its assignee's
 *     (dispatch.c invariant 2). It is started at its own epoch, as a live commit starts it.
 *  5. The start-up grace (ab__dq_grace_left_ms) runs from the broker's start, not from the
 *     load: a worker registers while dispatch loads. Its end is looked at once loaded.
 */
#include "dispatch_int.h"
#include "loader.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static ab_str_t sv(const char *s)
{
    return (ab_str_t){s, strlen(s)};
}

int ab__dq_collect(void *ud, const ab_request_t *r)
{
    ab__rlist_t *l = ud;
    ab_request_t *v = ab__grow(l->v, &l->cap, l->n + 1, sizeof(*v), 64);
    if (v == NULL) {
        l->nomem = true;
        return 1;
    }
    l->v = v;
    l->v[l->n++] = *r;
    return 0;
}

static int by_id(const void *a, const void *b)
{
    const ab_request_t *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

ab_status_t ab__dq_list_open(ab__dispatch_t *d, ab__rlist_t *l, size_t cap, ab_error_t *err)
{
    /* held ones first: a table cut at cap keeps what workers hold */
    static const ab_request_state_t states[] = {AB_REQ_STARTED, AB_REQ_ASSIGNED, AB_REQ_QUEUED};
    for (size_t s = 0; s < 3; s++) {
        uint64_t after = 0;
        uint32_t got = 0;
        do {
            size_t before = l->n;
            if (l->n >= cap)
                break;
            uint32_t page =
                cap - l->n < AB__DISPATCH_PAGE ? (uint32_t)(cap - l->n) : AB__DISPATCH_PAGE;
            ab_status_t rc = d->p->request_list(d->db, states[s], (ab_str_t){0}, after, page,
                                                ab__dq_collect, l, &got, err);
            if (rc != AB_OK)
                return rc;
            if (l->nomem)
                return ab_error_set(err, AB_NOMEM, "", "out of memory loading requests");
            if (l->n > before)
                after = l->v[l->n - 1].id;
        } while (got == AB__DISPATCH_PAGE);
    }
    if (l->n > AB__DISPATCH_OPEN_MAX && cap > AB__DISPATCH_OPEN_MAX)
        ab__log(AB_LOG_WARN,
                "dispatch: %zu open requests in the store, more than the %d the "
                "broker takes in new",
                l->n, AB__DISPATCH_OPEN_MAX);
    if (l->n > 1)
        qsort(l->v, l->n, sizeof(*l->v), by_id);
    return AB_OK;
}

ab_status_t ab__dq_parent_of(ab__dispatch_t *d, uint64_t id, char *out, size_t size,
                             ab_error_t *err)
{
    ab_request_t r;
    const ab_val_t *input = NULL;
    ab_status_t rc = d->p->request_get(d->db, id, &r, &d->buf, err);
    if (rc == AB_OK)
        rc = ab_doc_parse(d->idoc, d->buf.data, d->buf.len, UINT32_MAX, UINT32_MAX, AB_INTERNAL,
                          &input, err);
    out[0] = '\0';
    const ab_val_t *p = rc == AB_OK ? ab_val_get(input, "parentRunId") : NULL;
    if (p != NULL && p->type == AB_VAL_STR && p->len < size) {
        memcpy(out, p->u.s, p->len);
        out[p->len] = '\0';
    }
    ab_doc_reset(d->idoc);
    return rc;
}

/*
 * Whether assigned request @p q's run was started by its assignee (invariant 4): its first
 * event has the request's epoch. A first event the store does not have (a head with a
 * status but no event 1: a damaged or hand-edited store) counts as the assignee's, so a
 * run that may have started is never handed out again.
 */
static ab_status_t started_by_assignee(ab__dispatch_t *d, const ab__dreq_t *q, bool *yes,
                                       ab_error_t *err)
{
    uint64_t pos = 0;
    ab_event_t ev;
    const ab_limits_t *lim = d->b->cfg != NULL ? &d->b->cfg->limits : NULL;
    *yes = true;
    ab_status_t rc = d->p->event_bytes(d->db, sv(q->r.thread), sv(q->r.run), 1, &d->buf, &pos, err);
    if (rc == AB_NOT_FOUND) {
        ab_error_clear(err);
        return AB_OK;
    }
    if (rc == AB_OK)
        rc = ab_event_decode_head(d->idoc, d->buf.data, d->buf.len, lim, &ev, err);
    if (rc == AB_OK && ev.epoch != q->r.epoch) {
        *yes = false;
        ab__log(AB_LOG_INFO,
                "dispatch: request %" PRIu64 " (epoch %" PRIu64 "): run %s of thread %s was "
                "started at epoch %" PRIu64 " by an earlier writer, not by worker %s",
                q->r.id, q->r.epoch, q->r.run, q->r.thread, ev.epoch, q->r.worker);
    }
    ab_doc_reset(d->idoc);
    return rc;
}

/* After a restart: an assigned request whose run its assignee has not started goes back to
 * the queue; one whose RUN_STARTED (or end) committed before the stop is moved on (invariant
 * 2 of dispatch.c; invariants 3 and 4 here). */
ab_status_t ab__dq_recover(ab__dispatch_t *d, ab__dreq_t *q, ab_error_t *err)
{
    if (q->r.state == AB_REQ_QUEUED)
        return AB_OK;
    ab_headlist_t hl = {0};
    ab_status_t rc = ab__heads_add_run(d->p, d->db, &hl, sv(q->r.thread), sv(q->r.run), err);
    ab_run_status_t st = rc == AB_OK && hl.n ? hl.v[0].status : AB_RUN_STATUS_UNKNOWN;
    ab__headlist_free(&hl);
    uint64_t id = q->r.id;
    bool ran = st != AB_RUN_STATUS_UNKNOWN;
    if (rc == AB_OK && ran && q->r.state == AB_REQ_ASSIGNED)
        rc = started_by_assignee(d, q, &ran, err);
    if (rc == AB_OK && q->r.state == AB_REQ_ASSIGNED && !ran)
        return ab__dq_requeue(d, q, err);
    if (rc == AB_OK && q->r.state == AB_REQ_ASSIGNED)
        rc = ab__dq_move(d, q, AB_REQ_STARTED, q->r.worker, q->r.epoch, err);
    q = ab__dq_by_id(d, id);
    if (rc == AB_OK && q && (st == AB_RUN_STATUS_FINISHED || st == AB_RUN_STATUS_ERRORED))
        rc = ab__dq_move(d, q, AB_REQ_ENDED, q->r.worker, q->r.epoch, err);
    return rc;
}

static ab_status_t load(ab__dispatch_t *d, ab_error_t *err)
{
    ab__rlist_t l = {0};
    ab_status_t rc = ab__dq_list_open(d, &l, SIZE_MAX, err);
    char parent[AB_ID_MAX_BYTES + 1];
    for (size_t i = 0; rc == AB_OK && i < l.n; i++) {
        rc = ab__dq_parent_of(d, l.v[i].id, parent, sizeof(parent), err);
        if (rc == AB_OK && !ab__dq_add(d, &l.v[i], parent))
            rc = ab_error_set(err, AB_NOMEM, "", "out of memory loading requests");
        ab__dreq_t *q = rc == AB_OK ? ab__dq_by_id(d, l.v[i].id) : NULL;
        if (q != NULL)
            q->loaded = true;
    }
    for (size_t i = 0; rc == AB_OK && i < l.n; i++) {
        ab__dreq_t *q = ab__dq_by_id(d, l.v[i].id);
        if (q != NULL && ab__dq_mine(d, q)) /* another broker's: its own, or its lease's */
            rc = ab__dq_recover(d, q, err);
    }
    if (rc == AB_OK && d->nq > 0)
        ab__log(AB_LOG_INFO, "dispatch: %zu open requests", d->nq);
    free(l.v);
    return rc;
}

/* A failed try of load(): the table emptied, the next try scheduled (invariant 2) or dispatch
 * off (a hard error). */
static void load_failed(ab__dispatch_t *d, ab_status_t rc, const ab_error_t *e)
{
    char line[256];
    d->nq = 0; /* what the try read is read again by the next, as the store has it then */
    d->nmoves = 0;
    d->load_tries++;
    snprintf(d->load_why, sizeof(d->load_why), "%s", e->message);
    atomic_store(&d->b->dispatch_failed, true);
    if (!ab_status_retryable(rc)) {
        d->load_due_ms = -1;
        if (d->load_tries > 1) /* a first try's hard error: the writer says dispatch is off */
            ab__log(AB_LOG_ERROR, "dispatch is off: %s", ab_error_format(e, line, sizeof(line)));
        return;
    }
    int64_t b = d->load_backoff_ms ? 2 * d->load_backoff_ms : AB__DISPATCH_LOAD_RETRY_MS;
    d->load_backoff_ms = b < AB__DISPATCH_LOAD_RETRY_MAX_MS ? b : AB__DISPATCH_LOAD_RETRY_MAX_MS;
    d->load_due_ms = ab__mono_ms() + d->load_backoff_ms;
    ab__log(d->load_tries == 1 ? AB_LOG_WARN : AB_LOG_DEBUG,
            "dispatch: cannot load the store's run requests: %s; run requests are refused "
            "`unavailable` until it can (try %" PRIu32 ", the next in %" PRId64 " ms)",
            ab_error_format(e, line, sizeof(line)), d->load_tries, d->load_backoff_ms);
}

/* One try of the load (invariants 1, 2). */
static ab_status_t try_load(ab__dispatch_t *d, ab_error_t *err)
{
    d->next_sync_ms = 0; /* a shared store: the lease first, this broker is alive from now */
    ab__dispatch_sync(d, ab__mono_ms());
    ab_status_t rc = load(d, err);
    if (rc != AB_OK) {
        load_failed(d, rc, err);
        return rc;
    }
    if (d->load_tries > 0)
        ab__log(AB_LOG_INFO,
                "dispatch: the store's run requests loaded after %" PRIu32
                " failed tries; run requests are served again",
                d->load_tries);
    d->ready = true;
    d->dirty = true; /* the workers that registered meanwhile may take the queue */
    d->load_why[0] = '\0';
    atomic_store(&d->b->dispatch_failed, false);
    return AB_OK;
}

long ab__dq_load_tick(ab__dispatch_t *d)
{
    if (d->load_due_ms < 0)
        return -1; /* off */
    if (ab__mono_ms() >= d->load_due_ms) {
        ab_error_t e = AB_ERROR_INIT;
        if (try_load(d, &e) == AB_OK)
            return 0; /* loaded: the next tick pumps */
        if (d->load_due_ms < 0)
            return -1;
    }
    int64_t due = d->load_due_ms - ab__mono_ms();
    return due > 0 ? (long)due : 0;
}

void ab__dq_answer_unready(ab__dispatch_t *d, ab_job_t *job)
{
    ab_error_t e = AB_ERROR_INIT;
    if (d->load_due_ms < 0) {
        ab_error_set(&e, AB_UNAVAILABLE, "",
                     "dispatch is off until a restart: the broker could not load its run "
                     "requests from the store (%s)",
                     d->load_why);
    } else {
        ab_error_set(&e, AB_UNAVAILABLE, "",
                     "dispatch is not ready, retry: the broker cannot load its run requests "
                     "from the store yet (%s)",
                     d->load_why);
        int64_t due = d->load_due_ms - ab__mono_ms();
        ab_error_detail_int(&e, "retry_ms", due > 0 ? due : 0);
    }
    e.cid = job->cid;
    ab__dq_answer(d, job, NULL, &e);
}

ab_status_t ab__dq_claim_unready(ab__dispatch_t *d, ab_str_t thread, ab_str_t run, ab_error_t *err)
{
    ab_request_t r;
    ab_status_t rc = d->p->request_by_run(d->db, thread, run, &r, NULL, err);
    if (rc == AB_NOT_FOUND) { /* not a dispatched run: the claim is the sequencer's alone */
        ab_error_clear(err);
        return AB_OK;
    }
    if (rc != AB_OK)
        return rc;
    if (r.state != AB_REQ_QUEUED && r.state != AB_REQ_ASSIGNED && r.state != AB_REQ_STARTED)
        return AB_OK;
    return ab_error_set(err, AB_UNAVAILABLE, "run",
                        "run %s is dispatched (request %" PRIu64 ", %s) and dispatch is not "
                        "ready yet (its requests are not loaded): retry the claim",
                        r.run, r.id, ab_request_state_name(r.state));
}

ab_status_t ab__dispatch_new(ab__dispatch_t **out, ab__shared_t *b, ab_seq_t *seq, void *sock,
                             ab_error_t *err)
{
    *out = NULL;
    if (!ab__plugin_dispatches(b->plugin))
        return AB_OK;
    ab__dispatch_t *d = calloc(1, sizeof(*d));
    if (d == NULL || ab_doc_new(&d->doc) != AB_OK || ab_doc_new(&d->idoc) != AB_OK) {
        if (d)
            ab_doc_destroy(&d->doc);
        free(d);
        return ab_error_set(err, AB_NOMEM, "", "out of memory setting up dispatch");
    }
    d->b = b;
    d->seq = seq;
    d->sock = sock;
    d->p = b->plugin;
    d->db = b->wdb;
    d->grace_until_ms = ab__mono_ms() + AB_LEASE_MS_DEFAULT;
    d->takes = ab__plugin_takes(d->p);
    ab_status_t rc = try_load(d, err);
    if (rc != AB_OK && !ab_status_retryable(rc)) {
        ab__dispatch_destroy(&d);
        return rc;
    }
    *out = d; /* not ready when the store refused the load: tried again (invariant 2) */
    return AB_OK;
}

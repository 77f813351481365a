/*
 * dispatch_ops.c - the dispatch requests clients and workers send
 * (docs/PROTOCOL.md 7.12 - 7.16): start_run, resume_run, decline,
 * cancel_run, requests; and the claim rule of dispatched runs.
 *
 * Invariants:
 *  1. Every request is answered exactly once, by ab__dq_answer().
 *  2. A request is answered after it is durable: run_accepted comes after
 *     request_put returned (and after the pump that may have assigned it),
 *     cancel_reply after the cancelled state is stored.
 *  3. The same idempotency key gets the same request back, whatever the
 *     thread's state is now (if_busy is judged only for a new request).
 *  4. The input a worker is given is the caller's RunAgentInput with its
 *     threadId and runId set to the request's: the RUN_STARTED that echoes
 *     it passes the sequencer's input-identity rule.
 */
#include "dispatch_int.h"

#include <inttypes.h>
#include <string.h>

static ab_str_t sv(const char *s)
{
    return (ab_str_t){s, strlen(s)};
}

static bool val_is(const ab_val_t *v, ab_str_t s)
{
    return v && v->type == AB_VAL_STR && v->len == s.len && memcmp(v->u.s, s.ptr, s.len) == 0;
}

static void fail(ab__dispatch_t *d, ab_job_t *job, ab_status_t code, const char *field,
                 const char *fmt, ...) AB_PRINTF(5, 6);
static void fail(ab__dispatch_t *d, ab_job_t *job, ab_status_t code, const char *field,
                 const char *fmt, ...)
{
    ab_error_t e = AB_ERROR_INIT;
    va_list ap;
    va_start(ap, fmt);
    ab_error_vset(&e, code, field, fmt, ap);
    va_end(ap);
    e.cid = job->cid;
    ab__dq_answer(d, job, NULL, &e);
}

static void fail_err(ab__dispatch_t *d, ab_job_t *job, ab_error_t *e)
{
    e->cid = job->cid;
    ab__dq_answer(d, job, NULL, e);
}

/* ---- start_run ------------------------------------------------------------------ */

static ab_status_t encode_input(ab__dispatch_t *d, const ab__newreq_t *n, ab_error_t *err)
{
    const ab_val_t *in = n->input;
    size_t extra = 2 + (n->resume != NULL);
    ab_kv_t *kv = ab_doc_alloc(d->doc, (in->len + extra) * sizeof(*kv));
    if (kv == NULL)
        return ab_error_set(err, AB_NOMEM, "", "out of memory building the input");
    uint32_t k = 0;
    kv[k++] = (ab_kv_t){"threadId", 8, {AB_VAL_STR, (uint32_t)n->thread.len, {.s = n->thread.ptr}}};
    kv[k++] = (ab_kv_t){"runId", 5, {AB_VAL_STR, (uint32_t)n->run.len, {.s = n->run.ptr}}};
    if (n->resume)
        kv[k++] = (ab_kv_t){"resume", 6, *n->resume};
    for (uint32_t i = 0; i < in->len; i++) {
        const ab_kv_t *p = &in->u.pairs[i];
        bool ours = (p->klen == 8 && memcmp(p->key, "threadId", 8) == 0) ||
                    (p->klen == 5 && memcmp(p->key, "runId", 5) == 0) ||
                    (n->resume && p->klen == 6 && memcmp(p->key, "resume", 6) == 0);
        if (!ours)
            kv[k++] = *p;
    }
    ab_val_t map = {AB_VAL_MAP, k, {.pairs = kv}};
    ab_status_t rc = ab_agui_validate_input(&map, AB_AGUI_STRICT, NULL, NULL, err);
    if (rc != AB_OK)
        return rc;
    ab_buf_reset(&d->buf);
    if (ab_val_encode(&map, &d->buf) != AB_OK)
        return ab_error_set(err, AB_NOMEM, "", "out of memory encoding the input");
    if (d->buf.len > AB_REQUEST_INPUT_MAX_BYTES) {
        ab_error_set(err, AB_TOO_LARGE, "input", "the input is %zu bytes; a request holds %u",
                     d->buf.len, (unsigned)AB_REQUEST_INPUT_MAX_BYTES);
        ab_error_detail_int(err, "limit", AB_REQUEST_INPUT_MAX_BYTES);
        return AB_TOO_LARGE;
    }
    return AB_OK;
}

/* The run id: the caller's, else input.runId, else one the broker makes. */
ab_status_t ab__dispatch_run_id(ab__dispatch_t *d, ab__newreq_t *n, ab_str_t run, char *made,
                                size_t size, ab_error_t *err)
{
    const ab_val_t *tid = ab_val_get(n->input, "threadId"), *rid = ab_val_get(n->input, "runId");
    if (tid && !val_is(tid, n->thread))
        return ab_error_set(err, AB_INVALID_EVENT, "input/threadId",
                            "input.threadId names another thread than the request's %.*s",
                            (int)(n->thread.len > 64 ? 64 : n->thread.len), n->thread.ptr);
    if (rid && rid->type == AB_VAL_STR && run.ptr && !val_is(rid, run))
        return ab_error_set(err, AB_INVALID_EVENT, "input/runId",
                            "input.runId names another run than the request's %.*s",
                            (int)(run.len > 64 ? 64 : run.len), run.ptr);
    n->run_named = run.ptr != NULL || (rid && rid->type == AB_VAL_STR);
    if (run.ptr)
        n->run = run;
    else if (rid && rid->type == AB_VAL_STR)
        n->run = (ab_str_t){rid->u.s, rid->len};
    else
        n->run = (ab_str_t){
            made, (size_t)snprintf(made, size, "run-%s-%" PRIu64, d->b->instance, ++d->next_run)};
    return AB_OK;
}

void ab__dispatch_accepted(ab__dispatch_t *d, ab_job_t *job, uint64_t id, bool existing)
{
    ab_request_t r;
    ab_error_t e = AB_ERROR_INIT;
    uint64_t ahead = 0;
    ab__dreq_t *q = ab__dq_by_id(d, id);
    ab_status_t rc = AB_OK;
    if (q != NULL)
        r = q->r;
    else
        rc = d->p->request_get(d->db, id, &r, NULL, &e);
    if (rc == AB_OK && r.state == AB_REQ_QUEUED)
        rc = d->p->request_position(d->db, id, &ahead, &e);
    if (rc != AB_OK) {
        fail_err(d, job, &e);
        return;
    }
    ab_msg_t m = {.op = AB_OP_RUN_ACCEPTED, .v = job->v, .cid = job->cid};
    m.u.run_accepted =
        (ab_run_accepted_t){r.id, sv(r.agent), sv(r.thread), sv(r.run), r.state, ahead, existing};
    ab__dq_answer(d, job, &m, NULL);
}

/* The open top-level request that makes thread @p thread busy for a new run, or NULL: only
 * top-level requests count (PROTOCOL.md 7.12 if_busy); an open child run alone does not. */
static ab__dreq_t *busy_with(ab__dispatch_t *d, ab_str_t thread, const ab_val_t *parent)
{
    for (size_t i = 0; i < d->nq; i++) {
        ab__dreq_t *q = &d->q[i];
        if (q->parent[0] || strlen(q->r.thread) != thread.len ||
            memcmp(q->r.thread, thread.ptr, thread.len))
            continue;
        if (parent && val_is(parent, sv(q->r.run)))
            return NULL; /* a child run of the thread's active run */
        return q;
    }
    return NULL;
}

/* Put @p n (a new request) and answer; interrupt cancels what it would wait behind. */
bool ab__dispatch_known(ab__dispatch_t *d, ab_job_t *job, ab_str_t key)
{
    ab_error_t e = AB_ERROR_INIT;
    ab_request_t r;
    if (d->p->request_by_key(d->db, key, &r, NULL, &e) != AB_OK)
        return false;
    ab__dispatch_accepted(d, job, r.id, true); /* invariant 3: before the input is judged */
    return true;
}

/*
 * A run the request names must be new (7.12): no event (its assignee starts it with
 * RUN_STARTED at seq 1, which a run with events refuses, so the request could never start),
 * and no claim (a writer holding one could write it while it waits in the queue, before the
 * assignment's claim fences it). Runs the broker names are new.
 */
static ab_status_t run_is_new(ab__dispatch_t *d, const ab__newreq_t *n, ab_error_t *err)
{
    if (!n->run_named)
        return AB_OK;
    ab_headlist_t hl = {0};
    ab_status_t rc = ab__heads_add_run(d->p, d->db, &hl, n->thread, n->run, err);
    uint64_t last = rc == AB_OK && hl.n ? hl.v[0].last_seq : 0;
    uint64_t epoch = rc == AB_OK && hl.n ? hl.v[0].epoch : 0;
    ab__headlist_free(&hl);
    if (rc != AB_OK || (last == 0 && epoch == 0))
        return rc;
    int rl = (int)ab__utf8_cut(n->run.ptr, n->run.len, 64);
    int tl = (int)ab__utf8_cut(n->thread.ptr, n->thread.len, 64);
    if (last > 0)
        rc = ab_error_set(err, AB_CONFLICT, "run",
                          "run %.*s of thread %.*s has events already (its last seq is %" PRIu64
                          "): a dispatched run is started by its assignee's RUN_STARTED at seq "
                          "1; name a new run, or none",
                          rl, n->run.ptr, tl, n->thread.ptr, last);
    else
        rc = ab_error_set(err, AB_CONFLICT, "run",
                          "run %.*s of thread %.*s is claimed already (epoch %" PRIu64
                          "): only the worker it is assigned to may write a dispatched run; "
                          "name a new run, or none",
                          rl, n->run.ptr, tl, n->thread.ptr, epoch);
    ab_error_detail_int(err, last > 0 ? "last_seq" : "epoch", (int64_t)(last > 0 ? last : epoch));
    return rc;
}

void ab__dispatch_put(ab__dispatch_t *d, ab_job_t *job, ab__newreq_t *n, ab_if_busy_t if_busy)
{
    ab_error_t e = AB_ERROR_INIT;
    ab_request_t r;
    bool existing = false; /* a key stored since ab__dispatch_known() looked (a shared store) */
    const ab_val_t *parent = ab_val_get(n->input, "parentRunId");
    ab__dreq_t *busy = busy_with(d, n->thread, parent);
    if (busy && if_busy == AB_IF_BUSY_REJECT) {
        fail(d, job, AB_CONFLICT, "thread", "thread %s is busy: run %s is %s (if_busy reject)",
             busy->r.thread, busy->r.run, ab_request_state_name(busy->r.state));
        return;
    }
    if (d->nq >= AB__DISPATCH_OPEN_MAX) {
        fail(d, job, AB_OVERLOADED, "", "the broker holds %d open run requests already",
             AB__DISPATCH_OPEN_MAX);
        return;
    }
    if (run_is_new(d, n, &e) != AB_OK) {
        if (!ab__dispatch_known(d, job, n->key)) /* a shared store: stored since it looked */
            fail_err(d, job, &e);
        return;
    }
    if (encode_input(d, n, &e) != AB_OK) {
        fail_err(d, job, &e);
        return;
    }
    ab_request_new_t nr = {n->key,       n->agent,    n->thread,  n->run,
                           n->run_named, d->buf.data, d->buf.len, {0}};
    if (parent && parent->type == AB_VAL_STR && parent->len <= AB_ID_MAX_BYTES)
        nr.parent_run = (ab_str_t){parent->u.s, parent->len}; /* the store's thread rule */
    if (d->p->request_put(d->db, &nr, &r, &existing, &e) != AB_OK) {
        fail_err(d, job, &e);
        return;
    }
    char pr[AB_ID_MAX_BYTES + 1] = "";
    if (parent && parent->type == AB_VAL_STR && parent->len < sizeof(pr))
        memcpy(pr, parent->u.s, parent->len);
    if (!existing && !ab__dq_add(d, &r, pr))
        ab__log(AB_LOG_WARN, "dispatch: out of memory holding request %" PRIu64, r.id);
    if (!existing && busy && if_busy == AB_IF_BUSY_INTERRUPT)
        ab__dispatch_cancel(d, n->thread, "interrupted by a newer request");
    ab__dispatch_pump(d);
    ab__dispatch_accepted(d, job, r.id, existing);
}

static void start_run(ab__dispatch_t *d, ab_job_t *job, const ab_start_run_t *s)
{
    if (ab__dispatch_known(d, job, s->key))
        return;
    ab_error_t e = AB_ERROR_INIT;
    char made[AB_ID_MAX_BYTES + 1];
    ab__newreq_t n = {.agent = s->agent, .thread = s->thread, .key = s->key, .input = s->input};
    if (ab__dispatch_run_id(d, &n, s->run, made, sizeof(made), &e) != AB_OK) {
        fail_err(d, job, &e);
        return;
    }
    ab__dispatch_put(d, job, &n, s->if_busy);
}

/* ---- decline -------------------------------------------------------------------- */

static void decline(ab__dispatch_t *d, ab_job_t *job, const ab_decline_t *dc)
{
    ab__dreq_t *q = ab__dq_by_id(d, dc->request);
    ab__dwk_t *w = ab__dq_worker_of(d, &job->identity);
    ab_error_t e = AB_ERROR_INIT;
    ab_msg_t m = {.op = AB_OP_DECLINED, .v = job->v, .cid = job->cid};
    if (q == NULL || q->r.state != AB_REQ_ASSIGNED || q->r.epoch != dc->epoch || w == NULL ||
        strcmp(w->name, q->r.worker) != 0 || !ab__dq_mine(d, q) || ab__dq_kept(q)) {
        ab_request_t r;
        if (d->p->request_get(d->db, dc->request, &r, NULL, &e) != AB_OK) {
            fail_err(d, job, &e);
            return;
        }
        if (q != NULL && ab__dq_kept(q))
            r.state = q->mv_to; /* its run started (or ended): the store has not that yet */
        m.u.declined = (ab_declined_t){r.id, r.state}; /* not (or no longer) this assignment */
        ab__dq_answer(d, job, &m, NULL);
        return;
    }
    if (ab__dq_requeue(d, q, &e) != AB_OK) {
        fail_err(d, job, &e);
        return;
    }
    ab__log(AB_LOG_INFO, "dispatch: request %" PRIu64 " declined by %s%s%.*s", dc->request, w->wid,
            dc->reason.ptr ? ": " : "", (int)dc->reason.len, dc->reason.ptr ? dc->reason.ptr : "");
    q = ab__dq_by_id(d, dc->request);
    if (q != NULL) {
        snprintf(q->avoid, sizeof(q->avoid), "%s", w->name);
        q->avoid_until_ms = ab__mono_ms() + AB__DECLINE_BACKOFF_MS;
    }
    m.u.declined = (ab_declined_t){dc->request, AB_REQ_QUEUED};
    ab__dq_answer(d, job, &m, NULL);
    ab__dispatch_pump(d);
}

/* ---- cancel_run ----------------------------------------------------------------- */

static void send_cancel(ab__dispatch_t *d, ab__dwk_t *w, const ab_request_t *r, ab_str_t reason)
{
    ab_msg_t m = {.op = AB_OP_RUN_CANCEL, .v = 1};
    m.u.run_cancel = (ab_run_cancel_t){r->id, sv(r->thread), sv(r->run), r->epoch, reason};
    ab__dq_send(d, w, &m);
}

/*
 * Cancel request @p q whose run's RUN_STARTED has committed (started, or still assigned in
 * the moment before the move to started): its worker here is sent run_cancel; on a shared
 * store, the broker holding it is asked to send it (ab__dq_cancel_held).
 */
static ab_status_t cancel_started(ab__dispatch_t *d, ab__dreq_t *q, ab_str_t reason,
                                  ab_cancel_outcome_t *out, ab_error_t *err)
{
    ab__dwk_t *w = ab__dq_mine(d, q) ? ab__dq_named(d, q->r.worker, q->r.agent) : NULL;
    *out = w ? AB_CANCEL_DELIVERED : AB_CANCEL_NO_OWNER;
    if (w) {
        ab_request_t r = q->r;
        send_cancel(d, w, &r, reason);
        return AB_OK;
    }
    if (!d->takes || d->p->request_cancel_held == NULL || ab__dq_mine(d, q) || q->lost)
        return AB_OK; /* orphaned, or the store cannot ask its holder */
    return ab__dq_cancel_held(d, q, out, err);
}

/* After a refused cancel (the table reloaded): what run @p r's request is now, or NULL. */
static ab__dreq_t *moved_on(ab__dispatch_t *d, const ab_request_t *r, ab_cancel_outcome_t *out,
                            ab_error_t *err)
{
    ab__dreq_t *now = ab__dq_by_run(d, sv(r->thread), sv(r->run));
    if (now == NULL) { /* ended or cancelled meanwhile */
        ab_error_clear(err);
        *out = AB_CANCEL_ENDED;
    }
    return now;
}

/* Cancel open request @p q: what happened, or AB_CANCEL_ENDED on a store failure (in *err).
 * @p tries bounds the retries after another broker moved it on. */
static ab_status_t cancel_one_(ab__dispatch_t *d, ab__dreq_t *q, ab_str_t reason,
                               ab_cancel_outcome_t *out, ab_error_t *err, int tries)
{
    ab_request_t r = q->r;
    ab__dwk_t *w = ab__dq_mine(d, q) ? ab__dq_owner(d, r.worker, r.agent) : NULL;
    if (q->mv_to == AB_REQ_ENDED) { /* its run ended; the store has not that yet */
        *out = AB_CANCEL_ENDED;
        return AB_OK;
    }
    if (q->mv_to == AB_REQ_STARTED) /* its RUN_STARTED committed: started but in the store */
        r.state = AB_REQ_STARTED;
    if (r.state == AB_REQ_STARTED) {
        ab_status_t rc = cancel_started(d, q, reason, out, err);
        ab__dreq_t *now = rc == AB_CONFLICT ? moved_on(d, &r, out, err) : NULL;
        if (rc == AB_CONFLICT && now == NULL)
            return AB_OK;
        if (now != NULL && tries > 0) {
            ab_error_clear(err);
            return cancel_one_(d, now, reason, out, err, tries - 1);
        }
        return rc;
    }
    if (r.state == AB_REQ_ASSIGNED && d->takes) { /* claim and move in one transaction */
        ab_status_t rc = ab__dq_cancel_assigned(d, q, err);
        ab__dreq_t *now = rc == AB_CONFLICT ? moved_on(d, &r, out, err) : NULL;
        if (rc == AB_CONFLICT && now == NULL)
            return AB_OK;
        if (now != NULL && now->r.state == AB_REQ_ASSIGNED && now->r.epoch == r.epoch) {
            ab_error_clear(err); /* its RUN_STARTED committed; the move to started follows */
            return cancel_started(d, now, reason, out, err);
        }
        if (now != NULL && tries > 0) { /* it started first, or went back to the queue */
            ab_error_clear(err);
            return cancel_one_(d, now, reason, out, err, tries - 1);
        }
        if (rc == AB_OK && w)
            send_cancel(d, w, &r, reason);
        *out = AB_CANCEL_DEQUEUED;
        return rc;
    }
    uint64_t epoch = r.epoch, last = 0;
    ab_run_status_t st;
    ab_status_t rc = AB_OK;
    if (r.state == AB_REQ_ASSIGNED) /* fence the assignee: its RUN_STARTED can no longer commit */
        rc = ab__seq_claim(d->seq, sv(r.thread), sv(r.run), &epoch, &last, &st, err);
    if (rc == AB_OK)
        rc = ab__dq_move(d, q, AB_REQ_CANCELLED, r.state == AB_REQ_ASSIGNED ? r.worker : NULL,
                         epoch, err);
    if (rc == AB_OK && r.state == AB_REQ_ASSIGNED && w)
        send_cancel(d, w, &r, reason);
    *out = AB_CANCEL_DEQUEUED;
    return rc;
}

static ab_status_t cancel_one(ab__dispatch_t *d, ab__dreq_t *q, ab_str_t reason,
                              ab_cancel_outcome_t *out, ab_error_t *err)
{
    return cancel_one_(d, q, reason, out, err, 2);
}

static bool of_thread(const ab__dreq_t *q, ab_str_t thread)
{
    return strlen(q->r.thread) == thread.len && memcmp(q->r.thread, thread.ptr, thread.len) == 0;
}

/* Shared store: read thread @p thread's requests in the table again (another broker may have
 * assigned or started them since the last refresh), in id order. */
static void reload_thread(ab__dispatch_t *d, ab_str_t thread)
{
    uint64_t after = 0;
    for (;;) {
        const ab__dreq_t *next = NULL;
        for (size_t i = 0; i < d->nq && next == NULL; i++)
            if (d->q[i].r.id > after && of_thread(&d->q[i], thread))
                next = &d->q[i];
        if (next == NULL)
            return;
        char run[sizeof(next->r.run)];
        memcpy(run, next->r.run, sizeof(run));
        after = next->r.id;
        ab__dq_reload_run(d, thread, sv(run));
    }
}

void ab__dispatch_cancel(ab__dispatch_t *d, ab_str_t thread, const char *reason)
{
    if (d->takes)
        reload_thread(d, thread);
    for (size_t i = 0; i < d->nq; i++) {
        ab__dreq_t *q = &d->q[i];
        ab_cancel_outcome_t out;
        ab_error_t e = AB_ERROR_INIT;
        if (q->r.state == AB_REQ_QUEUED || !of_thread(q, thread) || q->parent[0])
            continue;
        size_t before = d->nq;
        char run[sizeof(q->r.run)];
        memcpy(run, q->r.run, sizeof(run));
        if (cancel_one(d, q, sv(reason), &out, &e) != AB_OK)
            ab__log(AB_LOG_WARN, "dispatch: cannot interrupt run %s: %s", run, e.message);
        if (d->nq < before)
            i--; /* it left the table */
    }
}

static void cancel_run(ab__dispatch_t *d, ab_job_t *job, const ab_cancel_run_t *c)
{
    ab_error_t e = AB_ERROR_INIT;
    ab_msg_t m = {.op = AB_OP_CANCEL_REPLY, .v = job->v, .cid = job->cid};
    m.u.cancel_reply = (ab_cancel_reply_t){c->thread, c->run, AB_CANCEL_ENDED, 0};
    ab__dq_reload_run(d, c->thread, c->run); /* another broker may have moved it */
    ab__dreq_t *q = ab__dq_by_run(d, c->thread, c->run);
    if (q != NULL) {
        m.u.cancel_reply.request = q->r.id;
        if (cancel_one(d, q, c->reason, &m.u.cancel_reply.outcome, &e) != AB_OK) {
            fail_err(d, job, &e);
            return;
        }
        ab__dq_answer(d, job, &m, NULL);
        ab__dispatch_pump(d);
        return;
    }
    ab_request_t r;
    if (d->p->request_by_run(d->db, c->thread, c->run, &r, NULL, &e) == AB_OK) {
        m.u.cancel_reply.request = r.id; /* cancelled or ended already */
        ab__dq_answer(d, job, &m, NULL);
        return;
    }
    ab_error_clear(&e);
    ab_headlist_t hl = {0};
    ab_status_t rc = ab__heads_add_run(d->p, d->db, &hl, c->thread, c->run, &e);
    ab_run_status_t st = rc == AB_OK && hl.n ? hl.v[0].status : AB_RUN_STATUS_UNKNOWN;
    ab__headlist_free(&hl);
    if (rc != AB_OK) {
        fail_err(d, job, &e);
    } else if (st == AB_RUN_STATUS_UNKNOWN) {
        fail(d, job, AB_NOT_FOUND, "run", "run %.*s of thread %.*s is neither queued nor known",
             (int)c->run.len, c->run.ptr, (int)c->thread.len, c->thread.ptr);
    } else {
        /* an ended run, or one that was published directly: no worker of ours owns it */
        m.u.cancel_reply.outcome =
            st == AB_RUN_STATUS_ACTIVE ? AB_CANCEL_NO_OWNER : AB_CANCEL_ENDED;
        ab__dq_answer(d, job, &m, NULL);
    }
}

/* ---- requests ------------------------------------------------------------------- */

static bool matches(const ab_requests_t *rq, const ab_request_t *r)
{
    if (rq->state != AB_REQ_NONE && r->state != rq->state)
        return false;
    if (rq->agent.ptr &&
        (strlen(r->agent) != rq->agent.len || memcmp(r->agent, rq->agent.ptr, rq->agent.len) != 0))
        return false;
    return r->id > rq->after;
}

/* A listing cut to what the caller's key may control (PROTOCOL.md 1, "Authorization"). */
typedef struct flist {
    ab__rlist_t l;
    const ab__principal_t *p; /* the caller's principal (NULL: a key no longer admitted) */
    bool filter;              /* keys on, and the caller lacks control on every thread */
    uint64_t last;            /* the last id the store delivered */
} flist_t;

static int flist_add(void *ud, const ab_request_t *r)
{
    flist_t *f = ud;
    f->last = r->id;
    if (f->filter && !ab__access_may(f->p, AB__ROLE_CONTROL, r->thread, strlen(r->thread)))
        return 0;
    return ab__dq_collect(&f->l, r);
}

/* Stored (ended, cancelled) requests, page by page until limit + 1 pass the filter. */
static ab_status_t list_stored(ab__dispatch_t *d, const ab_requests_t *rq, uint32_t limit,
                               flist_t *f, ab_error_t *e)
{
    uint64_t after = rq->after;
    for (;;) {
        uint32_t got = 0;
        ab_status_t st = d->p->request_list(d->db, rq->state, rq->agent, after, limit + 1,
                                            flist_add, f, &got, e);
        if (st != AB_OK || !f->filter || got < limit + 1 || f->l.n > limit || f->l.nomem)
            return st;
        after = f->last;
    }
}

static void requests(ab__dispatch_t *d, ab_job_t *job, const ab_requests_t *rq)
{
    uint32_t limit = rq->limit ? rq->limit : AB_REQUESTS_LIMIT_DEFAULT;
    ab__access_t *acc = ab__access_box_get(&d->b->access);
    flist_t f = {.p = ab__access_find_z85(acc, job->key, strlen(job->key))};
    f.filter = acc != NULL && !ab__access_may_all(f.p, AB__ROLE_CONTROL);
    ab__rlist_t l;
    ab_error_t e = AB_ERROR_INIT;
    if (rq->state == AB_REQ_CANCELLED || rq->state == AB_REQ_ENDED) {
        if (list_stored(d, rq, limit, &f, &e) != AB_OK) {
            ab__access_unref(&acc);
            free(f.l.v);
            fail_err(d, job, &e);
            return;
        }
    } else {
        for (size_t i = 0; i < d->nq && f.l.n <= limit && !f.l.nomem; i++)
            if (matches(rq, &d->q[i].r))
                flist_add(&f, &d->q[i].r);
    }
    ab__access_unref(&acc);
    l = f.l;
    ab_request_info_t *info = l.n ? calloc(l.n, sizeof(*info)) : NULL;
    if (l.nomem || (l.n && info == NULL)) {
        free(l.v);
        fail(d, job, AB_NOMEM, "", "out of memory listing requests");
        return;
    }
    size_t n = l.n > limit ? limit : l.n;
    for (size_t i = 0; i < n; i++) {
        const ab_request_t *r = &l.v[i];
        const ab__dreq_t *q = ab__dq_by_id(d, r->id);
        info[i] = (ab_request_info_t){r->id,        sv(r->agent), sv(r->thread),
                                      sv(r->run),   r->state,     {0},
                                      r->epoch,     r->attempts,  q && ab__dq_orphaned(d, q),
                                      r->created_us};
        if (r->worker[0])
            info[i].worker = sv(r->worker);
    }
    ab_msg_t m = {.op = AB_OP_REQUESTS_REPLY, .v = job->v, .cid = job->cid};
    m.u.requests_reply = (ab_requests_reply_t){info, n, l.n > limit};
    ab__dq_answer(d, job, &m, NULL);
    free(info);
    free(l.v);
}

/* ---- claims of dispatched runs -------------------------------------------------- */

/* The refusal of a write into queued request @p q's run: its assignee's alone (7.12). */
static ab_status_t refuse_queued(const ab__dreq_t *q, ab_error_t *err)
{
    return ab_error_set(err, AB_CONFLICT, "run",
                        "run %s is queued for dispatch (request %" PRIu64
                        "): only its assigned worker may write it",
                        q->r.run, q->r.id);
}

ab_status_t ab__dispatch_claim_check(ab__dispatch_t *d, ab_str_t thread, ab_str_t run,
                                     ab_error_t *err)
{
    if (d != NULL && !d->ready) /* the table is not the store's yet (dispatch_load.c) */
        return ab__dq_claim_unready(d, thread, run, err);
    ab__dq_reload_run(d, thread, run); /* a shared store: another broker may hold it */
    ab__dreq_t *q = d ? ab__dq_by_run(d, thread, run) : NULL;
    if (q == NULL || ab__dq_orphaned(d, q))
        return AB_OK;
    if (q->r.state == AB_REQ_QUEUED)
        return refuse_queued(q, err);
    return ab_error_set(err, AB_CONFLICT, "run",
                        "run %s is %s by worker %s (request %" PRIu64
                        "): a claim would fence its owner; claim it once it is orphaned",
                        q->r.run, q->r.state == AB_REQ_ASSIGNED ? "assigned to" : "owned",
                        q->r.worker, q->r.id);
}

ab_status_t ab__dispatch_unclaimed(void *ud, ab_str_t thread, ab_str_t run, ab_error_t *err)
{
    ab__dispatch_t *d = ud;
    if (d == NULL)
        return AB_OK;
    if (!d->ready) /* the table is not the store's yet (dispatch_load.c) */
        return ab__dq_claim_unready(d, thread, run, err);
    const ab__dreq_t *q = ab__dq_by_run(d, thread, run);
    if (q == NULL || q->r.state != AB_REQ_QUEUED) /* an assigned run is claimed already */
        return AB_OK;
    return refuse_queued(q, err);
}

void ab__dispatch_claimed(ab__dispatch_t *d, ab_str_t thread, ab_str_t run, zmq_msg_t *identity,
                          uint64_t epoch)
{
    ab__dreq_t *q = d ? ab__dq_by_run(d, thread, run) : NULL;
    ab__dwk_t *w = q && q->r.state == AB_REQ_STARTED ? ab__dq_worker_of(d, identity) : NULL;
    ab_error_t e = AB_ERROR_INIT;
    if (w == NULL)
        return; /* not an orphan, or not a worker: the run stays orphaned */
    if (ab__dq_move(d, q, AB_REQ_STARTED, w->name, epoch, &e) == AB_OK)
        ab__log(AB_LOG_INFO, "dispatch: worker %s continues orphaned run %.*s", w->wid,
                (int)run.len, run.ptr);
}

/* ---- the requests ----------------------------------------------------------------- */

void ab__dispatch_op(ab__dispatch_t *d, ab_job_t *job, const ab_msg_t *m)
{
    switch (m->op) {
    case AB_OP_START_RUN: start_run(d, job, &m->u.start_run); return;
    case AB_OP_DECLINE: decline(d, job, &m->u.decline); return;
    case AB_OP_CANCEL_RUN: cancel_run(d, job, &m->u.cancel_run); return;
    case AB_OP_RESUME_RUN: ab__dispatch_resume(d, job, &m->u.resume_run); return;
    case AB_OP_REQUESTS: requests(d, job, &m->u.requests); return;
    case AB_OP_ABANDON_RUN: ab__dispatch_abandon(d, job, &m->u.abandon_run); return;
    default: break;
    }
    fail(d, job, AB_UNSUPPORTED, "op", "'%s' is not a dispatch request this broker serves",
         ab_op_name(m->op));
}

/*
 * dispatch.c - the open requests, the live workers and assignment
 * (dispatch.h). The requests clients send are in dispatch_ops.c; the load
 * of the store's open requests at start-up is in dispatch_load.c.
 *
 * Invariants:
 *  1. The table q holds exactly the store's open requests (queued,
 *     assigned, started), in id order, as last stored: every change goes
 *     through ab__dq_move(), a compare-and-set in the store first.
 *  2. Assignment is at-least-once until RUN_STARTED commits, never after.
 *     A request is assigned with a fresh claim (its epoch fences every
 *     earlier writer of the run), moves to started only when a RUN_STARTED
 *     of that epoch commits, and goes back to the queue (declined, lease
 *     lapsed, restart) only while it is assigned and no commit of its run
 *     asked it to move on, with a claim that fences the assignee at once
 *     (ab__dq_requeue), so no RUN_STARTED commits while it waits. A started
 *     request is never queued again: its run ends, or it is orphaned. A
 *     terminal event ends it from assigned too (an error before start).
 *     The move a commit asks for is kept on the request until the store has
 *     it (dispatch_moves.c: retried on a back-off while the store refuses it
 *     retryably, one per request); while kept, the request counts as started
 *     (ab__dq_kept): never queued again, a decline changes nothing, a cancel
 *     goes to its worker. A restart settles one the broker stopped with from
 *     the run's head (ab__dq_recover, dispatch_load.c): started only when the
 *     run's first event has the request's epoch.
 *  3. One dispatched run per thread: a queued request is not assigned while
 *     another request of its thread is assigned or started, unless its
 *     input's parentRunId names that run (a child run); requests of a
 *     thread are taken in id order.
 *  4. Among live workers serving the agent, the one with the most free
 *     capacity gets the request; ties go to the oldest registration. A
 *     worker's load is counted from the table: its assigned and started
 *     requests of that agent.
 *  5. Store writes happen between event groups (ab__dispatch_pump() and
 *     jobs), never while a group is staged.
 *  6. Memory is bounded by the table: at most AB__DISPATCH_OPEN_MAX new
 *     open requests, each with at most one kept move on its entry.
 */
#include "dispatch_int.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static bool str_is(const char *a, ab_str_t b)
{
    return strlen(a) == b.len && memcmp(a, b.ptr, b.len) == 0;
}

static ab_str_t sv(const char *s)
{
    return (ab_str_t){s, strlen(s)};
}

/* ---- the table ---------------------------------------------------------------- */

ab__dreq_t *ab__dq_by_run(ab__dispatch_t *d, ab_str_t thread, ab_str_t run)
{
    for (size_t i = d->nq; i-- > 0;)
        if (str_is(d->q[i].r.run, run) && str_is(d->q[i].r.thread, thread))
            return &d->q[i];
    return NULL;
}

ab__dreq_t *ab__dq_by_id(ab__dispatch_t *d, uint64_t id)
{
    size_t lo = 0, hi = d->nq;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->q[mid].r.id == id)
            return &d->q[mid];
        if (d->q[mid].r.id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static bool is_open(ab_request_state_t s)
{
    return s == AB_REQ_QUEUED || s == AB_REQ_ASSIGNED || s == AB_REQ_STARTED;
}

bool ab__dq_add(ab__dispatch_t *d, const ab_request_t *r, const char *parent)
{
    ab__dreq_t *q = ab__grow(d->q, &d->capq, d->nq + 1, sizeof(*q), 64);
    if (q == NULL)
        return false;
    d->q = q;
    size_t at = d->nq;
    while (at > 0 && d->q[at - 1].r.id > r->id)
        at--;
    memmove(&d->q[at + 1], &d->q[at], (d->nq - at) * sizeof(*q));
    d->nq++;
    memset(&d->q[at], 0, sizeof(d->q[at]));
    d->q[at].r = *r;
    snprintf(d->q[at].parent, sizeof(d->q[at].parent), "%s", parent ? parent : "");
    d->dirty = true;
    return true;
}

void ab__dq_update(ab__dispatch_t *d, const ab_request_t *r)
{
    ab__dreq_t *q = ab__dq_by_id(d, r->id);
    if (q == NULL)
        return;
    d->dirty = true;
    if (is_open(r->state)) {
        q->r = *r;
        return;
    }
    size_t at = (size_t)(q - d->q);
    memmove(&d->q[at], &d->q[at + 1], (d->nq - at - 1) * sizeof(*q));
    d->nq--;
}

bool ab__dq_mine(const ab__dispatch_t *d, const ab__dreq_t *q)
{
    return q->r.broker[0] == '\0' || strcmp(q->r.broker, d->b->instance) == 0;
}

/* The broker a move to @p to records: none when queued; this one when it assigns or a
 * worker here adopts a started run; else the holder's (a commit, an end, a cancel). */
static ab_str_t move_broker(const ab__dispatch_t *d, const ab__dreq_t *q, ab_request_state_t to)
{
    if (to == AB_REQ_QUEUED)
        return (ab_str_t){0};
    if (to == AB_REQ_ASSIGNED || (to == AB_REQ_STARTED && q->r.state == AB_REQ_STARTED))
        return sv(d->b->instance);
    return sv(q->r.broker);
}

ab_status_t ab__dq_move(ab__dispatch_t *d, ab__dreq_t *q, ab_request_state_t to, const char *worker,
                        uint64_t epoch, ab_error_t *err)
{
    ab_request_move_t mv = {.expect_state = q->r.state,
                            .expect_epoch = q->r.epoch,
                            .state = to,
                            .worker = worker ? sv(worker) : (ab_str_t){0},
                            .epoch = epoch,
                            .broker = move_broker(d, q, to)};
    ab_request_t out;
    ab_status_t rc = d->p->request_move(d->db, q->r.id, &mv, &out, err);
    if (rc == AB_OK)
        ab__dq_update(d, &out);
    return rc;
}

/*
 * Put assigned request @p q back in the queue (a decline, its worker gone or registered again
 * without its agent, a restart), fencing its assignee first with a claim of the run: a
 * RUN_STARTED it still sends at its epoch is refused `fenced` instead of committing while the
 * request waits, which would have it handed out again after its start (invariant 2). A shared
 * store fences at the next take (request_take), which claims in its own transaction.
 */
ab_status_t ab__dq_requeue(ab__dispatch_t *d, ab__dreq_t *q, ab_error_t *err)
{
    if (!d->takes) {
        uint64_t epoch = 0, last = 0;
        ab_run_status_t st;
        ab_status_t rc =
            ab__seq_claim(d->seq, sv(q->r.thread), sv(q->r.run), &epoch, &last, &st, err);
        if (rc != AB_OK)
            return rc;
    }
    return ab__dq_move(d, q, AB_REQ_QUEUED, NULL, q->r.epoch, err);
}

/* ---- workers ------------------------------------------------------------------ */

bool ab__dq_owner_live(const ab__dispatch_t *d, const char *name)
{
    for (size_t i = 0; name[0] && i < d->nwk; i++)
        if (strcmp(d->wk[i].name, name) == 0)
            return true;
    return false;
}

bool ab__dq_orphaned(const ab__dispatch_t *d, const ab__dreq_t *q)
{
    if (q->r.state != AB_REQ_STARTED)
        return false;
    if (!ab__dq_mine(d, q))
        return q->lost; /* another broker's: orphaned once its lease ended */
    return !ab__dq_owner_live(d, q->r.worker) && ab__dq_grace_left_ms(d, q) == 0;
}

int64_t ab__dq_grace_left_ms(const ab__dispatch_t *d, const ab__dreq_t *q)
{
    if (q->r.state != AB_REQ_STARTED || !ab__dq_mine(d, q) || !q->loaded ||
        ab__dq_owner_live(d, q->r.worker))
        return 0;
    int64_t left = d->grace_until_ms - ab__mono_ms();
    return d->grace_until_ms != 0 && left > 0 ? left : 0;
}

static ab__dagent_t *serves(const ab__dwk_t *w, const char *agent)
{
    for (size_t j = 0; j < w->nagents; j++)
        if (strcmp(w->agents[j].name, agent) == 0)
            return &w->agents[j];
    return NULL;
}

ab__dwk_t *ab__dq_owner(ab__dispatch_t *d, const char *name, const char *agent)
{
    for (size_t i = 0; name[0] && i < d->nwk; i++)
        if (strcmp(d->wk[i].name, name) == 0 && serves(&d->wk[i], agent))
            return &d->wk[i];
    return NULL;
}

ab__dwk_t *ab__dq_named(ab__dispatch_t *d, const char *name, const char *agent)
{
    ab__dwk_t *w = ab__dq_owner(d, name, agent);
    for (size_t i = 0; w == NULL && name[0] && i < d->nwk; i++)
        if (strcmp(d->wk[i].name, name) == 0)
            w = &d->wk[i];
    return w;
}

ab__dwk_t *ab__dq_worker_of(ab__dispatch_t *d, zmq_msg_t *identity)
{
    size_t n = zmq_msg_size(identity);
    for (size_t i = 0; i < d->nwk; i++)
        if (zmq_msg_size(&d->wk[i].ident) == n &&
            memcmp(zmq_msg_data(&d->wk[i].ident), zmq_msg_data(identity), n) == 0)
            return &d->wk[i];
    return NULL;
}

static void worker_free(ab__dwk_t *w)
{
    zmq_msg_close(&w->ident);
    free(w->agents);
}

static ab__dwk_t *worker_by_wid(ab__dispatch_t *d, const char *wid)
{
    for (size_t i = 0; i < d->nwk; i++)
        if (strcmp(d->wk[i].wid, wid) == 0)
            return &d->wk[i];
    return NULL;
}

static void worker_remove(ab__dispatch_t *d, ab__dwk_t *w)
{
    worker_free(w);
    *w = d->wk[--d->nwk];
}

/* Requests assigned to a worker name that no live worker carries go back to the queue. */
static void requeue_unowned(ab__dispatch_t *d)
{
    for (size_t i = 0; i < d->nq;) {
        ab__dreq_t *q = &d->q[i];
        ab_error_t e = AB_ERROR_INIT;
        if (q->r.state != AB_REQ_ASSIGNED || !ab__dq_mine(d, q) || ab__dq_kept(q) ||
            ab__dq_owner(d, q->r.worker, q->r.agent)) { /* kept: its run started */
            i++;
            continue;
        }
        uint64_t id = q->r.id;
        if (ab__dq_requeue(d, q, &e) != AB_OK) {
            char line[256];
            ab__log(AB_LOG_WARN, "dispatch: request %" PRIu64 " stays assigned: %s", id,
                    ab_error_format(&e, line, sizeof(line)));
        } else {
            ab__log(AB_LOG_INFO, "dispatch: request %" PRIu64 " goes back to the queue", id);
        }
        i++;
    }
}

static void note_orphans(ab__dispatch_t *d, const char *name);

static void worker_up(ab__dispatch_t *d, ab_job_t *job)
{
    ab_msg_t m;
    if (ab_msg_decode(d->doc, job->raw, job->raw_len, NULL, &m, NULL) != AB_OK ||
        m.op != AB_OP_SERVE)
        return;
    ab__dwk_t *w = worker_by_wid(d, job->wid);
    uint64_t order = w != NULL ? w->order : ++d->order; /* a replacement keeps its place */
    char was[sizeof(w->name)] = "";
    if (w != NULL) {
        memcpy(was, w->name, sizeof(was));
        worker_remove(d, w); /* a new registration replaces the old */
    }
    ab__dagent_t *agents = calloc(m.u.serve.nagents, sizeof(*agents));
    ab__dwk_t *v = ab__grow(d->wk, &d->capwk, d->nwk + 1, sizeof(*v), 8);
    if (agents == NULL || v == NULL) {
        free(agents);
        ab__log(AB_LOG_WARN, "dispatch: out of memory noting worker %s", job->wid);
        requeue_unowned(d);
        note_orphans(d, was);
        return;
    }
    d->wk = v;
    w = &d->wk[d->nwk++];
    memset(w, 0, sizeof(*w));
    snprintf(w->wid, sizeof(w->wid), "%s", job->wid);
    memcpy(w->key, job->key, sizeof(w->key));
    ab_str_t nm = m.u.serve.worker; /* clipped, never inside a character: it goes on the wire */
    memcpy(w->name, nm.ptr, ab__utf8_cut(nm.ptr, nm.len, AB_REQUEST_WORKER_MAX_BYTES));
    zmq_msg_init(&w->ident);
    zmq_msg_copy(&w->ident, &job->identity);
    for (size_t j = 0; j < m.u.serve.nagents; j++) {
        const ab_served_agent_t *a = &m.u.serve.agents[j];
        memcpy(agents[j].name, a->name.ptr, a->name.len);
        agents[j].cap = a->capacity;
    }
    w->agents = agents;
    w->nagents = m.u.serve.nagents;
    w->order = order;   /* ties go to the worker that registered first (PROTOCOL.md 7.12) */
    requeue_unowned(d); /* the name may no longer serve an agent it was assigned */
    if (strcmp(was, w->name) != 0)
        note_orphans(d, was); /* registered again under another name: the old one is gone */
    d->dirty = true;
}

/*
 * Tell the thread's subscribers that run q is orphaned (PROTOCOL.md 6.4): a
 * 3-frame message on the event endpoint, [topic "ev" NUL thread NUL NUL]
 * [notice header] [empty], sent between groups (no live message is being
 * built then). Best effort, like live events: a subscriber that misses it
 * finds the orphan in `requests`.
 */
void ab__dq_notice_orphan(ab__dispatch_t *d, const ab__dreq_t *q)
{
    ab_msg_t m = {.op = AB_OP_NOTICE, .v = 1};
    m.u.notice = (ab_notice_t){AB_NOTICE_ORPHANED, sv(q->r.thread), sv(q->r.run), q->r.id,
                               q->r.worker[0] ? sv(q->r.worker) : (ab_str_t){0}};
    ab_buf_t topic = AB_BUF_INIT, hdr = AB_BUF_INIT;
    if (d->b->xpub && ab_topic_notice(&topic, sv(q->r.thread), NULL) == AB_OK &&
        ab_msg_encode(&m, &hdr, NULL) == AB_OK) {
        zmq_send(d->b->xpub, topic.data, topic.len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(d->b->xpub, hdr.data, hdr.len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(d->b->xpub, "", 0, ZMQ_DONTWAIT);
    }
    ab_buf_free(&topic);
    ab_buf_free(&hdr);
}

/* Log and tell the started runs of worker name @p name that it left orphaned (7.12). */
static void note_orphans(ab__dispatch_t *d, const char *name)
{
    for (size_t i = 0; name[0] && i < d->nq; i++)
        if (strcmp(d->q[i].r.worker, name) == 0 && ab__dq_mine(d, &d->q[i]) &&
            ab__dq_orphaned(d, &d->q[i])) {
            ab__log(AB_LOG_WARN, "dispatch: run %s of thread %s is orphaned (worker %s is gone)",
                    d->q[i].r.run, d->q[i].r.thread, name);
            ab__dq_notice_orphan(d, &d->q[i]);
        }
}

static void worker_down(ab__dispatch_t *d, ab_job_t *job)
{
    ab__dwk_t *w = worker_by_wid(d, job->wid);
    if (w == NULL)
        return;
    char name[sizeof(w->name)];
    memcpy(name, w->name, sizeof(name));
    worker_remove(d, w);
    requeue_unowned(d);
    note_orphans(d, name);
}

/* ---- messages ----------------------------------------------------------------- */

void ab__dq_send(ab__dispatch_t *d, ab__dwk_t *w, const ab_msg_t *m)
{
    if (ab__reply_msg(d->sock, &w->ident, m) != 0)
        ab__log(AB_LOG_WARN, "dispatch: cannot hand a %s to the command thread", ab_op_name(m->op));
}

void ab__dq_answer(ab__dispatch_t *d, ab_job_t *job, const ab_msg_t *m, const ab_error_t *e)
{
    atomic_fetch_sub(&d->b->in_flight, job->weight);
    int rc = m != NULL ? ab__reply_msg(d->sock, &job->identity, m)
                       : ab__reply_error(d->sock, &job->identity, job->v, job->cid, e);
    if (rc != 0)
        ab__log(AB_LOG_WARN, "dispatch: cannot hand a reply to the command thread");
    ab__job_free(job);
}

void ab__dispatch_job(ab__dispatch_t *d, ab_job_t *job)
{
    if (job->kind == AB_JOB_WORKER_UP) {
        worker_up(d, job); /* taken in also before the load: registrations are not stored */
    } else if (job->kind == AB_JOB_WORKER_DOWN) {
        worker_down(d, job);
    } else if (!d->ready) {
        ab__dq_answer_unready(d, job);
        return;
    } else {
        ab_msg_t m;
        ab_error_t e = AB_ERROR_INIT;
        if (ab_msg_decode(d->doc, job->raw, job->raw_len, &d->b->cfg->limits, &m, &e) != AB_OK) {
            ab__dq_answer(d, job, NULL, &e);
            return;
        }
        ab__dispatch_op(d, job, &m);
        ab_doc_reset(d->doc);
        return;
    }
    ab_doc_reset(d->doc);
    ab__job_free(job);
}

/* ---- assignment --------------------------------------------------------------- */

/* Count each worker agent's assigned and started requests (invariant 4), once per pump. */
static void count_load(ab__dispatch_t *d)
{
    for (size_t i = 0; i < d->nwk; i++)
        for (size_t j = 0; j < d->wk[i].nagents; j++)
            d->wk[i].agents[j].used = 0;
    for (size_t k = 0; k < d->nq; k++) {
        const ab_request_t *r = &d->q[k].r;
        if ((r->state != AB_REQ_ASSIGNED && r->state != AB_REQ_STARTED) ||
            !ab__dq_mine(d, &d->q[k]))
            continue;
        for (size_t i = 0; i < d->nwk; i++) {
            ab__dagent_t *a =
                strcmp(r->worker, d->wk[i].name) == 0 ? serves(&d->wk[i], r->agent) : NULL;
            if (a != NULL) {
                a->used++;
                break; /* one registration of the name carries it */
            }
        }
    }
}

/* With keys: whether worker @p w's key may serve thread @p thread (its serve prefixes). */
static bool may_serve(const ab__dispatch_t *d, const ab__dwk_t *w, const char *thread)
{
    if (d->acc == NULL)
        return true;
    const ab__principal_t *p = ab__access_find_z85(d->acc, w->key, strlen(w->key));
    return ab__access_may(p, AB__ROLE_SERVE, thread, strlen(thread));
}

static ab__dwk_t *pick(ab__dispatch_t *d, const ab__dreq_t *q, int64_t now)
{
    ab__dwk_t *best = NULL;
    uint32_t best_free = 0;
    const char *agent = q->r.agent;
    for (size_t i = 0; i < d->nwk; i++) {
        const ab__dagent_t *a = serves(&d->wk[i], agent);
        if (a == NULL || (now < q->avoid_until_ms && strcmp(d->wk[i].name, q->avoid) == 0) ||
            !may_serve(d, &d->wk[i], q->r.thread))
            continue;
        uint32_t free_ = a->used < a->cap ? a->cap - a->used : 0;
        if (free_ > best_free ||
            (free_ > 0 && free_ == best_free && d->wk[i].order < best->order)) {
            best = &d->wk[i];
            best_free = free_;
        }
    }
    return best;
}

/*
 * The threads one pump has seen (invariant 3), by a 64-bit hash of the id:
 * those with an assigned or started request (with its run, for the child
 * rule) and those with a queued request met earlier in this pass. Open
 * addressing, at most half full; two threads with one hash could only delay
 * a request to a later pump.
 */
typedef struct tseen {
    uint64_t h;      /* 0 = empty (hashes are made odd) */
    const char *run; /* busy: the request's run; NULL: an earlier queued request */
} tseen_t;

typedef struct tset {
    tseen_t *v;
    size_t mask;
} tset_t;

static uint64_t thash(const char *thread)
{
    return ab__fnv64(thread, strlen(thread)) | 1;
}

static void tset_add(tset_t *t, uint64_t h, const char *run)
{
    size_t i = h & t->mask;
    while (t->v[i].h != 0)
        i = (i + 1) & t->mask;
    t->v[i] = (tseen_t){h, run};
}

/* Whether queued request @p q must wait (invariant 3); notes it as seen. */
static bool held_back(tset_t *t, const ab__dreq_t *q)
{
    uint64_t h = thash(q->r.thread);
    bool child = false, busy = false, earlier = false;
    for (size_t i = h & t->mask; t->v[i].h != 0; i = (i + 1) & t->mask) {
        if (t->v[i].h != h)
            continue;
        if (t->v[i].run == NULL)
            earlier = true;
        else if (q->parent[0] && strcmp(q->parent, t->v[i].run) == 0)
            child = true;
        else
            busy = true;
    }
    if (!child && (busy || earlier))
        return true;
    tset_add(t, h, NULL); /* later requests of the thread wait behind this one */
    return false;
}

static bool tset_init(tset_t *t, const ab__dispatch_t *d)
{
    size_t n = 16;
    while (n < 2 * d->nq + 2)
        n *= 2;
    t->v = calloc(n, sizeof(*t->v));
    t->mask = n - 1;
    for (size_t i = 0; t->v && i < d->nq; i++)
        if (d->q[i].r.state != AB_REQ_QUEUED)
            tset_add(t, thash(d->q[i].r.thread), d->q[i].r.run);
    return t->v != NULL;
}

/* Assign @p q to @p w (invariant 2). @return whether it is assigned now. */
static bool assign(ab__dispatch_t *d, ab__dreq_t *q, ab__dwk_t *w)
{
    ab_error_t e = AB_ERROR_INIT;
    uint64_t epoch = 0, last = 0, id = q->r.id;
    ab_run_status_t st;
    ab_request_t r;
    const ab_val_t *input = NULL;
    bool moved = false;
    ab_status_t rc;
    if (d->takes) { /* claim and move in one transaction (bug 3 of SCALING.md) */
        if ((rc = ab__dq_take(d, q, w, &r, &e)) == AB_CONFLICT)
            return false; /* another broker took it, or its thread is busy: refreshed soon */
        moved = rc == AB_OK;
        epoch = r.epoch;
    } else {
        rc = ab__seq_claim(d->seq, sv(q->r.thread), sv(q->r.run), &epoch, &last, &st, &e);
        if (rc == AB_OK)
            moved = (rc = ab__dq_move(d, q, AB_REQ_ASSIGNED, w->name, epoch, &e)) == AB_OK;
        if (rc == AB_OK)
            rc = d->p->request_get(d->db, id, &r, &d->buf, &e);
    }
    if (rc == AB_OK)
        rc = ab_doc_parse(d->idoc, d->buf.data, d->buf.len, UINT32_MAX, UINT32_MAX, AB_INTERNAL,
                          &input, &e);
    if (rc != AB_OK) {
        char line[256];
        ab__log(AB_LOG_WARN, "dispatch: cannot assign request %" PRIu64 ": %s", id,
                ab_error_format(&e, line, sizeof(line)));
        ab__dreq_t *back = moved ? ab__dq_by_id(d, id) : NULL;
        ab_error_t e2 = AB_ERROR_INIT;
        if (back && ab__dq_move(d, back, AB_REQ_QUEUED, NULL, epoch, &e2) == AB_OK)
            moved = false; /* the worker never heard of it: back in the queue */
        return moved;
    }
    ab_msg_t m = {.op = AB_OP_ASSIGN, .v = 1};
    m.u.assign =
        (ab_assign_t){r.id, sv(r.agent), sv(r.thread), sv(r.run), input, epoch, r.attempts};
    ab__dq_send(d, w, &m);
    ab_doc_reset(d->idoc);
    ab__log(AB_LOG_DEBUG, "dispatch: request %" PRIu64 " assigned to %s (epoch %" PRIu64 ")", id,
            w->wid, epoch);
    return true;
}

void ab__dispatch_pump(ab__dispatch_t *d)
{
    if (d == NULL)
        return;
    ab__dq_apply_moves(d);
    if (!d->dirty)
        return;
    d->dirty = false;
    tset_t seen;
    if (d->nwk == 0 || d->nq == 0)
        return;
    if (!tset_init(&seen, d)) {
        d->dirty = true; /* out of memory: try again at the next tick */
        return;
    }
    int64_t now = ab__mono_ms();
    count_load(d);
    d->acc = ab__access_box_get(&d->b->access);
    for (size_t i = 0; i < d->nq; i++) {
        if (d->q[i].r.state != AB_REQ_QUEUED || held_back(&seen, &d->q[i]))
            continue;
        ab__dwk_t *w = pick(d, &d->q[i], now);
        if (w != NULL && assign(d, &d->q[i], w))
            (serves(w, d->q[i].r.agent))->used++;
    }
    ab__access_unref(&d->acc);
    free(seen.v);
    d->dirty = false;
}

/* ms until a declined request may go back to the worker that declined it; -1 = none. */
static long backoff_due(ab__dispatch_t *d, int64_t now)
{
    long due = -1;
    for (size_t i = 0; i < d->nq; i++) {
        int64_t until = d->q[i].avoid_until_ms;
        if (until == 0 || d->q[i].r.state != AB_REQ_QUEUED)
            continue;
        if (until <= now) {
            d->q[i].avoid_until_ms = 0;
            d->dirty = true;
        } else if (due < 0 || until - now < due) {
            due = (long)(until - now);
        }
    }
    return due;
}

bool ab__dispatch_is_orphan(ab__dispatch_t *d, ab_str_t thread, ab_str_t run)
{
    const ab__dreq_t *q = d && d->nq ? ab__dq_by_run(d, thread, run) : NULL;
    return q != NULL && ab__dq_orphaned(d, q);
}

/* The sooner of two dues in ms (-1 = none). */
static long sooner(long a, long b)
{
    return a >= 0 && (b < 0 || a < b) ? a : b;
}

long ab__dispatch_tick(ab__dispatch_t *d)
{
    if (d == NULL)
        return -1;
    if (!d->ready) /* the load's next try; the grace is looked at once loaded */
        return ab__dq_load_tick(d);
    int64_t now = ab__mono_ms();
    long sync = ab__dispatch_sync(d, now);
    long backoff = sooner(d->nq ? backoff_due(d, now) : -1, sync);
    if (d->dirty || ab__dq_moves_due(d, now) == 0)
        ab__dispatch_pump(d);
    backoff = sooner(backoff, ab__dq_moves_due(d, ab__mono_ms())); /* kept moves' next try */
    if (d->grace_until_ms == 0)
        return backoff;
    if (now < d->grace_until_ms) {
        long g = (long)(d->grace_until_ms - now);
        return backoff >= 0 && backoff < g ? backoff : g;
    }
    d->grace_until_ms = 0; /* the grace is over: every unowned started run is orphaned now */
    for (size_t i = 0; i < d->nq; i++)
        if (ab__dq_orphaned(d, &d->q[i])) {
            ab__log(AB_LOG_WARN,
                    "dispatch: run %s of thread %s is orphaned (no worker %s after the restart)",
                    d->q[i].r.run, d->q[i].r.thread, d->q[i].r.worker);
            ab__dq_notice_orphan(d, &d->q[i]);
        }
    return backoff;
}

void ab__dispatch_stale(ab__dispatch_t *d)
{
    if (d != NULL && d->takes)
        d->stale = true;
}

void ab__dispatch_access_changed(ab__dispatch_t *d)
{
    if (d != NULL)
        d->dirty = true; /* a worker may serve threads it could not */
}

void ab__dispatch_set_commit(ab__dispatch_t *d, ab__dispatch_commit_fn fn, void *ud)
{
    if (d != NULL) {
        d->commit = fn;
        d->commit_ud = ud;
    }
}

void ab__dispatch_destroy(ab__dispatch_t **dp)
{
    ab__dispatch_t *d = dp ? *dp : NULL;
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->nwk; i++)
        worker_free(&d->wk[i]);
    free(d->wk);
    free(d->q);
    ab_doc_destroy(&d->doc);
    ab_doc_destroy(&d->idoc);
    ab_buf_free(&d->buf);
    free(d);
    *dp = NULL;
}

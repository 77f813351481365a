/*
 * dispatch_abandon.c - abandon_run (docs/PROTOCOL.md 7.17): a controller
 * ends an orphaned run. The broker writes the run's terminal RUN_ERROR itself
 * (code "agentbus.abandoned"), which its stamp marks `by: "broker"`, on live
 * delivery and on every replay.
 *
 * Invariants:
 *  1. Only an orphaned run is abandoned: a started request whose owner has no
 *     live registration. A run with a live owner is cancelled (cancel_run);
 *     one not started is dequeued; one that ended stays as it ended. In the
 *     start-up grace a started run whose owner is not back is not orphaned
 *     yet (its worker may register again): refused, saying for how long, as
 *     retryable; so is one whose RUN_STARTED the store has not taken yet
 *     (a kept move, dispatch_moves.c: `unavailable`), and one whose end
 *     committed is ended, also before the store has taken that.
 *  2. The RUN_ERROR is written under a fresh claim, so an owner that comes
 *     back cannot write after it: its epoch is fenced. It goes through the
 *     sequencer and the store like any event (a group of its own), so the
 *     run's seqs stay contiguous and its end is terminal.
 *  3. The request becomes ended by that commit (dispatch.c's moves), like any
 *     run end.
 */
#include "dispatch_int.h"

#include <inttypes.h>
#include <string.h>

static ab_str_t sv(const char *s)
{
    return (ab_str_t){s, strlen(s)};
}

static void refuse(ab__dispatch_t *d, ab_job_t *job, ab_status_t code, const char *field,
                   const char *what, const ab_request_t *r)
{
    ab_error_t e = AB_ERROR_INIT;
    ab_error_set(&e, code, field, "run %s of thread %s %s", r->run, r->thread, what);
    e.cid = job->cid;
    ab__dq_answer(d, job, NULL, &e);
}

/*
 * Refuse to abandon started request @p q that is not orphaned (invariant 1), saying why: its
 * owner is live; or, after a restart, the broker still waits for it (conflict, retryable,
 * detail wait_ms); or it is held through another broker of a shared store whose lease is alive.
 */
static void refuse_held(ab__dispatch_t *d, ab_job_t *job, const ab__dreq_t *q)
{
    ab_error_t e = AB_ERROR_INIT;
    int64_t wait = ab__dq_grace_left_ms(d, q);
    if (wait > 0) {
        ab_error_set(&e, AB_CONFLICT, "run",
                     "the broker waits %" PRId64 " s more for the run's owner to come back after "
                     "its restart; abandon it then if it does not (worker %s)",
                     (wait + 999) / 1000, q->r.worker);
        e.retryable = true; /* the same request may go through then */
        ab_error_detail_int(&e, "wait_ms", wait);
    } else if (!ab__dq_mine(d, q)) {
        ab_error_set(&e, AB_CONFLICT, "run",
                     "run %s of thread %s is held through broker %s, whose lease is alive: "
                     "abandon it through that broker",
                     q->r.run, q->r.thread, q->r.broker);
    } else {
        ab_error_set(&e, AB_CONFLICT, "run",
                     "run %s of thread %s has a live owner (worker %s): cancel_run asks it to "
                     "end the run instead",
                     q->r.run, q->r.thread, q->r.worker);
    }
    e.cid = job->cid;
    ab__dq_answer(d, job, NULL, &e);
}

/* Whether request @p q may be abandoned; answers the job when not (invariant 1). */
static bool may_abandon(ab__dispatch_t *d, ab_job_t *job, const ab_abandon_run_t *a,
                        ab__dreq_t **out)
{
    ab_request_t r;
    ab_error_t e = AB_ERROR_INIT;
    ab__dreq_t *q = ab__dq_by_run(d, a->thread, a->run);
    *out = q;
    if (q == NULL) {
        if (d->p->request_by_run(d->db, a->thread, a->run, &r, NULL, &e) == AB_OK) {
            refuse(d, job, AB_CONFLICT, "run", "has already ended", &r);
        } else {
            ab_error_clear(&e);
            ab_error_set(&e, AB_NOT_FOUND, "run",
                         "run %.*s of thread %.*s was not dispatched: only a dispatched run "
                         "can be abandoned",
                         (int)(a->run.len > 64 ? 64 : a->run.len), a->run.ptr,
                         (int)(a->thread.len > 64 ? 64 : a->thread.len), a->thread.ptr);
            e.cid = job->cid;
            ab__dq_answer(d, job, NULL, &e);
        }
        return false;
    }
    if (q->mv_to == AB_REQ_ENDED) { /* its end committed; the store has not that yet */
        refuse(d, job, AB_CONFLICT, "run", "has already ended", &q->r);
        return false;
    }
    if (q->r.state != AB_REQ_STARTED && ab__dq_kept(q)) {
        refuse(d, job, AB_UNAVAILABLE, "run",
               "has started, but the store has not taken its start yet: retry", &q->r);
        return false;
    }
    if (q->r.state != AB_REQ_STARTED) {
        refuse(d, job, AB_CONFLICT, "run", "has not started: cancel_run dequeues it", &q->r);
        return false;
    }
    if (!ab__dq_orphaned(d, q)) {
        refuse_held(d, job, q);
        return false;
    }
    return true;
}

/* The RUN_ERROR envelope at @p seq and @p epoch into d->buf. */
static ab_status_t envelope(ab__dispatch_t *d, const ab_abandon_run_t *a, const ab_request_t *r,
                            uint64_t seq, uint64_t epoch, ab_error_t *err)
{
    char msg[AB_REASON_MAX + 128];
    if (a->reason.ptr && a->reason.len)
        snprintf(msg, sizeof msg, "%.*s", (int)a->reason.len, a->reason.ptr);
    else
        snprintf(msg, sizeof msg, "abandoned by a controller: worker %s, which ran it, is gone",
                 r->worker[0] ? r->worker : "(none)");
    static const char code[] = AB_BROKER_CODE_PREFIX "abandoned";
    ab_kv_t kv[3] = {
        {"type", 4, {.type = AB_VAL_STR, .len = 9, .u.s = "RUN_ERROR"}},
        {"message", 7, {.type = AB_VAL_STR, .len = (uint32_t)strlen(msg), .u.s = msg}},
        {"code", 4, {.type = AB_VAL_STR, .len = sizeof(code) - 1, .u.s = code}},
    };
    ab_val_t body = {.type = AB_VAL_MAP, .len = 3, .u.pairs = kv};
    ab_event_t ev = {1, a->thread, a->run, seq, epoch, ab__now_us() / 1000, &body};
    ab_buf_reset(&d->buf);
    return ab_event_encode(&ev, &d->buf, err);
}

void ab__dispatch_abandon(ab__dispatch_t *d, ab_job_t *job, const ab_abandon_run_t *a)
{
    ab__dreq_t *q = NULL;
    if (!may_abandon(d, job, a, &q))
        return;
    ab_request_t r = q->r;
    ab_error_t e = AB_ERROR_INIT;
    uint64_t epoch = 0, last = 0, pos = 0;
    ab_run_status_t st;
    ab_status_t rc = ab__seq_claim(d->seq, a->thread, a->run, &epoch, &last, &st, &e);
    if (rc == AB_OK && st != AB_RUN_STATUS_ACTIVE)
        rc = ab_error_set(&e, AB_CONFLICT, "run", "run %s has already ended", r.run);
    if (rc == AB_OK)
        rc = envelope(d, a, &r, last + 1, epoch, &e);
    if (rc == AB_OK && d->commit == NULL)
        rc = ab_error_set(&e, AB_INTERNAL, "", "the writer cannot commit for dispatch");
    if (rc == AB_OK)
        rc = d->commit(d->commit_ud, d->buf.data, d->buf.len, &pos, &e);
    if (rc != AB_OK) {
        e.cid = job->cid;
        ab__dq_answer(d, job, NULL, &e);
        return;
    }
    ab__log(AB_LOG_WARN,
            "dispatch: run %s of thread %s abandoned (RUN_ERROR at seq %" PRIu64 ", pos %" PRIu64
            ")",
            r.run, r.thread, last + 1, pos);
    ab__dispatch_pump(d); /* stores the move to ended the commit noted */
    ab_msg_t m = {.op = AB_OP_ABANDONED, .v = job->v, .cid = job->cid};
    m.u.abandoned = (ab_abandoned_t){sv(r.thread), sv(r.run), last + 1, pos};
    ab__dq_answer(d, job, &m, NULL);
}

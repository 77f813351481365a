/*
 * writer.c - the writer thread: owns the sequencer and the plugin's writer
 * handle. Group commit and the answers to publish, claim and heads; its
 * other two jobs have their own files (writer_int.h): live fan-out and
 * heartbeats (fanout.c), durable snapshot scheduling (snapsched.c).
 *
 * Invariants:
 *  1. Acked means durable, published means durable: a `published` reply and
 *     a live event are sent only after append_batch() returned AB_OK for the
 *     group holding the event; a failed group is aborted and every event it
 *     staged is answered `rejected` with the store's (retryable) error.
 *  2. The events a group hands to append_batch() point into the producers'
 *     frames (job->frames, kept until the job is answered): the store writes
 *     them from there. Every live message of a group is sent (fanout.c)
 *     before any `published` answer of that group.
 *  3. A group holds whole publish jobs, in arrival order, up to group_max
 *     events (at least one job); claim and heads run between groups, so their
 *     order relative to publishes on the same connection is kept.
 *  4. Every job is answered exactly once and its weight returned to the
 *     ingest queue after its answer is handed to the command thread.
 *  5. The loop waits in zmq_poll at most until the next heartbeat is due
 *     (and SNAP_POLL_MS while the snapshot worker is busy, to store its
 *     documents soon; not at all while a document waits to be stored);
 *     documents are stored between groups, at most one piece of
 *     AB_SNAP_PART_BYTES between two (snapstore.c).
 *  6. After the stop job (sent last by the command thread) the writer has
 *     answered everything queued before it; it then stops the snapshot
 *     worker (bounded) and reports "stopped".
 *  7. The lone path: the writer's state (sequencer, store handle, event
 *     socket, counts) is used under b->wlock, which the writer thread holds
 *     at all times but its wait for work in zmq_poll. While it waits, the
 *     command thread may take the lock (ab__writer_borrow) and commit one
 *     small publish itself, as a group of its own, with the same steps and
 *     order as commit_group(); only its answer goes straight to the ROUTER.
 *     It does so only when the writer has received every job the command
 *     thread sent (b->wjobs_taken), so nothing queued is overtaken, and
 *     after forwarding the writer's answers already sent (cmd.c), so the
 *     answers of a connection keep their order. The writer waits on the
 *     event socket's descriptor, not on the socket, and whoever used the
 *     socket settles it (ab__fanout_settle) before letting go of the lock.
 *     Work that needs the writer's own socket (dispatch assignments) or
 *     its later attention (snapshot documents) is left to it: the command
 *     thread wakes it with an AB_JOB_NUDGE. A lone commit never waits for a
 *     lock (the plugin's set_lock_wait 0); one the store refuses is not
 *     answered but handed to the writer, whose commit waits and answers.
 *     A commit that fails or takes over AB__LONE_SLOW_US, lone or not,
 *     turns the path off for AB__LONE_BACKOFF_US. No lone
 *     path with a followed shared store (its notifications are the
 *     writer's) or a plugin without set_lock_wait.
 */
#include "ab_common.h"
#include "dispatch.h"
#include "follow.h"
#include "loader.h"
#include "stats.h"
#include "writer_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SNAP_POLL_MS 20  /* longest wait for a job while the snapshot worker is busy */
#define BUSY_RING    8   /* the writer's last pieces of work kept for the slow-group line */
#define BUSY_MIN_US  200 /* a piece shorter than this is not kept */

typedef struct ab__writer {
    ab__shared_t *b;
    void *sock;
    void *reply_sock;       /**< where answers go: sock, or the ROUTER during a lone commit */
    bool lone_ok;           /**< the command thread may borrow this state (invariant 7) */
    int64_t lone_off_until; /**< ab__mono_us() before which it may not (a failed or slow commit) */
    ab_seq_t *seq;
    ab_job_t **group;
    size_t ngroup, cap;
    ab_job_t *held; /**< a non-publish job received while filling a group */
    bool stop;
    ab__fanout_t fan;        /**< live messages and heartbeats */
    ab__snapsched_t snap;    /**< durable snapshot scheduling */
    ab__dispatch_t *disp;    /**< run dispatch (dispatch.h); NULL: the plugin stores no requests */
    ab__follow_t follow;     /**< other brokers' commits to a shared store (follow.h) */
    bool fences;             /**< the shared store serialises the thread rules (append_fenced) */
    int64_t slow_logged_us;  /**< when the last slow-group line was written */
    uint64_t slow_unlogged;  /**< slow groups since, not written */
    ab__wstats_t stats;      /**< commits, rejections, latency (stats.h); copied to b->stats */
    int64_t store_stats_us;  /**< when the store's figures were last read */
    uint64_t ckpt_slow_seen; /**< slow checkpoints already logged */
    /** the writer's last pieces of work of BUSY_MIN_US or more, for the slow-group line */
    struct busy {
        const char *what;
        int64_t from, to; /* ab__mono_us() */
    } busy[BUSY_RING];
    unsigned nbusy; /**< pieces noted; the last BUSY_RING are kept */
} writer_t;

/* Note a piece of the writer's work that began at @p from and ends now (kept when it took
 * BUSY_MIN_US or more): a publish that waited for the writer meanwhile is told it. */
static void busy_note(writer_t *w, const char *what, int64_t from)
{
    int64_t to = ab__mono_us();
    if (to - from >= BUSY_MIN_US)
        w->busy[w->nbusy++ % BUSY_RING] = (struct busy){what, from, to};
}

/* What of [from, to] the writer spent on its noted work, as "; of it: WHAT N.N ms, ..." in
 * @p out (empty when nothing overlaps). */
static void busy_during(const writer_t *w, int64_t from, int64_t to, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    for (unsigned i = 0; i < BUSY_RING && i < w->nbusy; i++) {
        const struct busy *b = &w->busy[i];
        int64_t lo = b->from > from ? b->from : from, hi = b->to < to ? b->to : to;
        if (hi <= lo || n >= size)
            continue;
        int k = snprintf(out + n, size - n, "%s%s %.1f ms", n ? ", " : "; of it: ", b->what,
                         (double)(hi - lo) / 1e3);
        n += k > 0 ? (size_t)k : 0;
    }
}

/* Receive a job from the command thread and count it (invariant 7). */
static ab_job_t *take_job(writer_t *w, int flags)
{
    ab_job_t *job = ab__job_recv(w->sock, flags);
    if (job != NULL)
        atomic_fetch_add(&w->b->wjobs_taken, 1);
    return job;
}

/* Send one answer to the command thread and release the job. */
static void finish(writer_t *w, ab_job_t *job, const ab_msg_t *m, const ab_error_t *e)
{
    /* Give the job's share of the ingest queue back before the reply can
     * reach the client, so a request sent right after the reply never meets
     * a queue still counting the answered one (a spurious `overloaded`). */
    atomic_fetch_sub(&w->b->in_flight, job->weight);
    atomic_fetch_sub(&w->b->in_flight_bytes, job->bytes);
    void *to = w->reply_sock;
    int rc = m != NULL ? ab__reply_msg(to, &job->identity, m)
                       : ab__reply_error(to, &job->identity, job->v, job->cid, e);
    if (rc != 0 && to == w->sock)
        ab__log(AB_LOG_WARN, "writer: cannot hand a reply to the command thread");
    else if (rc != 0) /* the ROUTER refused it: the client is gone or not reading (cmd.c) */
        ab__log(AB_LOG_DEBUG, "dropped a lone publish's reply (cid %llu): %s",
                (unsigned long long)job->cid, zmq_strerror(zmq_errno()));
    ab__job_free(job);
}

static void do_claim(writer_t *w, ab_job_t *job)
{
    ab_msg_t m = {.op = AB_OP_CLAIMED, .v = job->v, .cid = job->cid};
    ab_error_t e = AB_ERROR_INIT;
    ab_claimed_t *c = &m.u.claimed;
    if (ab__dispatch_claim_check(w->disp, job->thread, job->run, &e) != AB_OK ||
        ab__seq_claim(w->seq, job->thread, job->run, &c->epoch, &c->last_seq, &c->status, &e) !=
            AB_OK) {
        finish(w, job, NULL, &e);
        return;
    }
    ab__dispatch_claimed(w->disp, job->thread, job->run, &job->identity, c->epoch);
    /* a run's first claim (epoch 2, nothing written) fences only the implicit epoch 1 */
    bool first = c->epoch <= 2 && c->last_seq == 0 && c->status == AB_RUN_STATUS_UNKNOWN;
    if (!first) /* a new writer fences the one before it */
        ab__log(AB_LOG_INFO,
                "claim: run %.*s of thread %.*s at epoch %llu (epoch %llu fenced; "
                "last seq %llu)",
                (int)job->run.len, job->run.ptr, (int)job->thread.len, job->thread.ptr,
                (unsigned long long)c->epoch, (unsigned long long)(c->epoch - 1),
                (unsigned long long)c->last_seq);
    else
        ab__log(AB_LOG_DEBUG, "claim: run %.*s of thread %.*s at epoch %llu (its first)",
                (int)job->run.len, job->run.ptr, (int)job->thread.len, job->thread.ptr,
                (unsigned long long)c->epoch);
    c->thread = job->thread;
    c->run = job->run;
    finish(w, job, &m, NULL);
}

static void do_heads(writer_t *w, ab_job_t *job)
{
    ab_headlist_t hl = {0};
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t st = AB_OK;
    const ab_plugin_t *p = w->b->plugin;
    if (job->thread.ptr != NULL)
        st = ab__heads_add_thread(p, w->b->wdb, &hl, job->thread, &e);
    for (size_t i = 0; st == AB_OK && i < job->nrefs; i++)
        st = ab__heads_add_run(p, w->b->wdb, &hl, job->refs[i].thread, job->refs[i].run, &e);
    ab_head_t *view = st == AB_OK ? ab__heads_view(&hl) : NULL;
    if (st == AB_OK && hl.n > 0 && view == NULL)
        st = ab_error_set(&e, AB_NOMEM, "", "out of memory");
    if (st != AB_OK) {
        finish(w, job, NULL, &e);
    } else {
        for (size_t i = 0; i < hl.n; i++) /* PROTOCOL.md 7.5: orphaned runs say so */
            view[i].orphaned = ab__dispatch_is_orphan(w->disp, view[i].thread, view[i].run);
        ab_msg_t m = {.op = AB_OP_HEADS_REPLY, .v = job->v, .cid = job->cid};
        m.u.heads_reply.head_pos = atomic_load(&w->b->head_pos);
        m.u.heads_reply.heads = view;
        m.u.heads_reply.nheads = hl.n;
        finish(w, job, &m, NULL);
    }
    free(view);
    ab__headlist_free(&hl);
}

/* About once a second, the store's figures into the stats box (they need the writer's handle). */
static void refresh_store_stats(writer_t *w, int64_t now)
{
    ab__shared_t *b = w->b;
    if (now - w->store_stats_us < AB__STATS_STORE_US)
        return;
    w->store_stats_us = now;
    ab_plugin_stats_t ps = {0};
    ab_error_t e = AB_ERROR_INIT;
    bool known = b->plugin->stats != NULL && b->plugin->stats(b->wdb, &ps, &e) == AB_OK;
    if (b->plugin->stats != NULL && !known) {
        char line[512];
        ab__log(AB_LOG_DEBUG, "stats: the store's figures are unknown: %s",
                ab_error_format(&e, line, sizeof line));
    }
    ab__statbox_store(&b->stats, &ps, known, now);
    if (known && ps.checkpoints_slow > w->ckpt_slow_seen) /* at most a line a second */
        ab__log(AB_LOG_WARN,
                "slow checkpoint: %llu WAL checkpoint(s) of 100 ms or more since the last "
                "such line, the latest %.1f ms (the longest since start %.1f ms)",
                (unsigned long long)(ps.checkpoints_slow - w->ckpt_slow_seen),
                (double)ps.checkpoint_last_slow_us / 1e3, (double)ps.checkpoint_max_us / 1e3);
    if (known)
        w->ckpt_slow_seen = ps.checkpoints_slow;
}

/*
 * The access table narrowed what some key may read (cmd.c reload): close the
 * event endpoint and bind it again, so that every subscriber reconnects and
 * each of its subscriptions is decided again under the new table (fanout.c
 * invariant 5; a key no longer admitted is refused at the handshake).
 * Subscribers fill what they miss meanwhile from the store. The port is
 * the one bound at start; its listener is released by ZeroMQ's I/O thread,
 * so the bind is retried for up to REBIND_MS.
 */
#define REBIND_MS 2000
static void rebind_events(writer_t *w)
{
    ab__shared_t *b = w->b;
    ab__fanout_flush(&w->fan);
    ab_error_t e = AB_ERROR_INIT;
    void *s = zmq_socket(b->zctx, ZMQ_XPUB);
    int zero = 0;
    if (s == NULL || zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        ab__secure_socket(b, s, ZMQ_XPUB, b->events_ep, &e) != AB_OK) {
        ab__log(AB_LOG_ERROR, "access: cannot make a new event socket: live subscriptions stay");
        if (s != NULL)
            zmq_close(s);
        return;
    }
    zmq_close(b->xpub);
    int rc = -1;
    for (int waited = 0; (rc = zmq_bind(s, b->events_ep)) != 0 && waited < REBIND_MS; waited += 10)
        nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
    if (rc != 0)
        ab__log(AB_LOG_ERROR, "access: cannot bind %s again (%s): no live events until a restart",
                b->events_ep, zmq_strerror(zmq_errno()));
    else
        ab__log(AB_LOG_INFO, "access: %s bound again: subscribers reconnect under the new table",
                b->events_ep);
    ab__monitor_close(&b->ev_mon); /* every subscriber was cut: a fresh count */
    (void)ab__monitor_open(&b->ev_mon, b->zctx, s, "event", &b->subscribers);
    b->xpub = s;
    w->fan.xpub = s;
}

/* A job that is not a publish: claim, heads or stop. */
static void do_single(writer_t *w, ab_job_t *job)
{
    switch (job->kind) {
    case AB_JOB_CLAIM: do_claim(w, job); return;
    case AB_JOB_HEADS: do_heads(w, job); return;
    case AB_JOB_STOP:
        w->stop = true;
        ab__job_free(job);
        return;
    case AB_JOB_NUDGE: /* a lone commit left work (invariant 7): snapshots are looked at next */
        ab__dispatch_pump(w->disp);
        ab__job_free(job);
        return;
    case AB_JOB_ACCESS:
        if (job->narrowed)
            rebind_events(w);
        ab__dispatch_access_changed(w->disp);
        ab__job_free(job);
        return;
    case AB_JOB_DISPATCH:
    case AB_JOB_WORKER_UP:
    case AB_JOB_WORKER_DOWN:
        if (w->disp != NULL) {
            ab__dispatch_job(w->disp, job);
        } else if (job->kind == AB_JOB_DISPATCH) {
            ab_error_t u = AB_ERROR_INIT;
            if (atomic_load(&w->b->dispatch_failed))
                ab_error_set(&u, AB_UNAVAILABLE, "",
                             "dispatch could not load the store's run "
                             "requests (the broker log says why)");
            else
                ab_error_set(&u, AB_UNSUPPORTED, "op", "this broker's store keeps no run requests");
            finish(w, job, NULL, &u);
        } else {
            ab__job_free(job);
        }
        return;
    default: break;
    }
    ab_error_t e = AB_ERROR_INIT;
    ab_error_set(&e, AB_INTERNAL, "", "writer got an unexpected job");
    finish(w, job, NULL, &e);
}

/* Turn whatever was staged in a failed group into rejections. */
static void fail_staged(writer_t *w, const ab_error_t *store_err)
{
    ab_error_t e = *store_err;
    if (e.code == AB_OK)
        ab_error_set(&e, AB_UNAVAILABLE, "", "the store failed to commit the group");
    e.retryable = e.retryable || e.code == AB_UNAVAILABLE || e.code == AB_IO;
    for (size_t j = 0; j < w->ngroup; j++) {
        ab_job_t *job = w->group[j];
        for (uint32_t i = 0; i < job->count; i++) {
            ab_seq_item_t *it = &job->items[i];
            if (it->status == AB_RESULT_ACCEPTED ||
                (it->status == AB_RESULT_DUPLICATE && it->pos == 0)) {
                it->status = AB_RESULT_REJECTED;
                it->pos = 0;
                it->err = e;
            }
        }
    }
}

/* Answer one publish job with its results, in request order. */
static void answer_publish(writer_t *w, ab_job_t *job)
{
    ab_result_t *res = calloc(job->count, sizeof(*res));
    if (res == NULL) {
        ab_error_t e = AB_ERROR_INIT;
        ab_error_set(&e, AB_NOMEM, "", "out of memory building the published reply");
        finish(w, job, NULL, &e);
        return;
    }
    for (uint32_t i = 0; i < job->count; i++) {
        ab_seq_item_t *it = &job->items[i];
        bool has_pos = it->status == AB_RESULT_ACCEPTED || it->status == AB_RESULT_DUPLICATE;
        if ((has_pos && it->pos == 0) || (!has_pos && it->status != AB_RESULT_REJECTED)) {
            it->status = AB_RESULT_REJECTED;
            ab_error_clear(&it->err);
            ab_error_set(&it->err, AB_INTERNAL, "", "the sequencer left this event undecided");
        }
        if (it->status == AB_RESULT_REJECTED && it->err.code == AB_OK)
            ab_error_set(&it->err, AB_INTERNAL, "", "rejected without a reason");
        it->err.cid = job->cid;
        res[i].seq = it->ev != NULL ? it->ev->seq : 0;
        res[i].status = it->status;
        res[i].pos = it->status == AB_RESULT_REJECTED ? 0 : it->pos;
        res[i].error = it->status == AB_RESULT_REJECTED ? &it->err : NULL;
    }
    ab_msg_t m = {.op = AB_OP_PUBLISHED, .v = job->v, .cid = job->cid};
    m.u.published.results = res;
    m.u.published.nresults = job->count;
    finish(w, job, &m, NULL);
    free(res);
}

/* The group's pending events are committed at @p first: count them for
 * snapshots, settle the sequencer, then fan the accepted events out. */
static void committed(writer_t *w, const ab_append_event_t *evs, size_t n, uint64_t first,
                      int64_t now)
{
    ab__snapsched_committed(&w->snap, evs, n,
                            first); /* before ab__seq_commit: the events are its */
    ab__dispatch_committed(w->disp, evs, n);
    ab__seq_commit(w->seq, first);
    atomic_store(&w->b->head_pos, first + n - 1);
    ab__follow_before(&w->follow, &w->fan, first);
    for (size_t j = 0; j < w->ngroup; j++) {
        const ab_job_t *job = w->group[j];
        for (uint32_t i = 0; i < job->count; i++)
            if (job->items[i].status == AB_RESULT_ACCEPTED)
                ab__fanout_event(&w->fan, &job->items[i], now);
    }
    ab__fanout_flush(&w->fan); /* before any answer (invariant 2) */
    ab__follow_after(&w->follow, &w->fan, first, first + n - 1);
}

/* Stage the group's jobs in order, each after reading ahead the heads of its uncached runs
 * (one read per job on a store with heads_of, instead of one per run). */
static void stage_group(writer_t *w)
{
    for (size_t j = 0; j < w->ngroup; j++) {
        ab__seq_prefetch(w->seq, w->group[j]->items, w->group[j]->count);
        ab__seq_stage(w->seq, w->group[j]->items, w->group[j]->count);
    }
}

/*
 * Append the staged events. On a store that serialises the thread rules (append_fenced),
 * the batch is fenced by the threads its checks read or change, at the position up to
 * which this broker has applied every committed event (the follower's: invariant 6 of
 * follow.c), so that a thread event another broker committed past it refuses the batch.
 */
static ab_status_t store_append(writer_t *w, const ab_append_event_t *evs, size_t n, int64_t now,
                                uint64_t *first, ab_error_t *e)
{
    const ab_plugin_t *p = w->b->plugin;
    if (!w->fences)
        return p->append_batch(w->b->wdb, evs, n, now, first, e);
    size_t nt = 0;
    bool nomem = false;
    const ab_str_t *th = ab__seq_fence_threads(w->seq, &nt, &nomem);
    if (nomem)
        return ab_error_set(e, AB_NOMEM, NULL, "out of memory listing the group's threads");
    return p->append_fenced(w->b->wdb, evs, n, th, nt, ab__follow_seen(&w->follow), now, first, e);
}

/*
 * Commit the staged group. A shared store refuses a batch as AB_CONFLICT when
 * another broker committed to one of its runs (this broker's cached head was
 * stale): the abort drops the group's runs from the cache, and the group is
 * staged again against the stored heads (answered duplicate, gap, fenced ...
 * as the store now says), a few times at most; then the group fails as unavailable
 * (retryable), since the refusal was not of one producer's events.
 */
static ab_status_t append_group(writer_t *w, int64_t now, const ab_append_event_t **evs, size_t *n,
                                uint64_t *first, ab_error_t *e)
{
    ab_status_t rc = store_append(w, *evs, *n, now, first, e);
    for (int again = 0; rc == AB_CONFLICT && w->follow.on && again < 3; again++) {
        ab__seq_abort(w->seq);
        ab_error_clear(e);
        ab__follow_poll(&w->follow, &w->fan); /* what the store holds that we did not see */
        stage_group(w);
        *evs = ab__seq_pending(w->seq, n);
        if (*n == 0)
            return AB_OK;
        rc = store_append(w, *evs, *n, now, first, e);
    }
    if (rc == AB_CONFLICT && w->follow.on) { /* not the producer's conflict: retryable */
        char why[256];
        snprintf(why, sizeof why, "%s", e->message);
        ab_error_set(e, AB_UNAVAILABLE, "",
                     "other brokers kept committing to the group's runs "
                     "or threads (last refusal: %s)",
                     why);
        e->retryable = true;
        rc = AB_UNAVAILABLE;
    }
    return rc;
}

/*
 * A group whose first publish waited more than AB__SLOW_GROUP_US from the command
 * thread's receipt to its answers is logged (info, at most once a second, the
 * others counted; every one at debug), with where the time went: waiting for the writer (other
 * jobs, the thread not running), the store's commit (SQLite: WAL write and
 * fsync), fan-out and answers; of the wait, what the writer was doing meanwhile
 * (its last BUSY_RING pieces of work of BUSY_MIN_US or more: storing snapshots,
 * reading the store's figures, an earlier group, a command job; the rest of the
 * wait it was idle or not running). Every one is counted by the part that took
 * longest (`agentbus_slow_groups_total`). docs/PERFORMANCE.md "Latency" uses these.
 */
#define SLOW_COMMIT_US 100000 /* a commit this slow is a warning: the disk, or a stall */
static void note_slow(writer_t *w, size_t events, int64_t t_recv, int64_t t0, int64_t t1,
                      int64_t t2)
{
    if (t2 - t_recv < AB__SLOW_GROUP_US)
        return;
    int64_t wait = t0 - t_recv, commit = t1 - t0, answer = t2 - t1; /* counted, all of them */
    int part = commit >= wait && commit >= answer ? AB__SLOW_COMMIT
               : wait >= answer                   ? AB__SLOW_WAIT
                                                  : AB__SLOW_ANSWER;
    atomic_fetch_add_explicit(&w->b->slow_groups[part], 1, memory_order_relaxed);
    if (commit >= SLOW_COMMIT_US) /* rare: every one is told */
        ab__log(AB_LOG_WARN, "slow commit: %zu event(s) took %.1f ms in the store's commit", events,
                (double)commit / 1e3);
    bool every = w->b->cfg->log_level == AB_LOG_DEBUG; /* --log-level debug: each one */
    if (!every && t2 - w->slow_logged_us < 1000000) {
        w->slow_unlogged++;
        return;
    }
    char during[256];
    busy_during(w, t_recv, t0, during, sizeof during);
    ab__log(every ? AB_LOG_DEBUG : AB_LOG_INFO,
            "slow group: %zu event(s) answered %.1f ms after receipt: %.1f ms waiting for the "
            "writer%s, %.1f ms in the store's commit, %.1f ms fan-out and answers%s",
            events, (double)(t2 - t_recv) / 1e3, (double)wait / 1e3, during, (double)commit / 1e3,
            (double)answer / 1e3,
            w->slow_unlogged ? " (and more slow groups since the last line)" : "");
    w->slow_logged_us = t2;
    w->slow_unlogged = 0;
}

/* The group's events that will be answered rejected (or undecided: answered so too). */
static void count_rejected(writer_t *w)
{
    for (size_t j = 0; j < w->ngroup; j++)
        for (uint32_t i = 0; i < w->group[j]->count; i++) {
            const ab_seq_item_t *it = &w->group[j]->items[i];
            if (it->status != AB_RESULT_ACCEPTED && it->status != AB_RESULT_DUPLICATE)
                ab__wstats_rejected(&w->stats, it->err.code ? it->err.code : AB_INTERNAL);
        }
}

/* The group's commit failed with @p e: on the lone path nothing is answered (the command
 * thread gives the job to the writer, whose commit waits for a lock); else every staged
 * event is answered rejected. @return whether the group is still to be answered. */
static bool group_failed(writer_t *w, const ab_error_t *e, size_t n, bool lone)
{
    char line[512];
    ab__seq_abort(w->seq);
    if (lone) {
        ab__log(AB_LOG_INFO, "lone commit refused by the store, the writer takes it: %s",
                ab_error_format(e, line, sizeof(line)));
        w->ngroup = 0;
        return false;
    }
    ab__log(AB_LOG_ERROR, "store error: group commit of %zu events failed: %s", n,
            ab_error_format(e, line, sizeof(line)));
    fail_staged(w, e);
    return true;
}

/* A commit of the store that failed or took over AB__LONE_SLOW_US, a group's or one of the
 * broker's own events, turns the lone path off for a while (invariant 7). */
static void note_commit(writer_t *w, ab_status_t rc, int64_t t0, int64_t t1)
{
    if (rc != AB_OK || t1 - t0 > AB__LONE_SLOW_US)
        w->lone_off_until = t1 + AB__LONE_BACKOFF_US;
}

/* Stage, commit, fan out and answer the jobs of the current group; on the lone path
 * (@p lone) the dispatch moves are left to the writer (invariant 7). */
static ab__lone_end_t commit_group(writer_t *w, bool lone)
{
    int64_t t_recv = INT64_MAX, t0 = ab__mono_us();
    for (size_t j = 0; j < w->ngroup; j++)
        if (w->group[j]->recv_us > 0 && w->group[j]->recv_us < t_recv)
            t_recv = w->group[j]->recv_us;
    int64_t now = ab__now_us(); /* the commit time, also the resume rule's clock */
    ab__seq_set_now(w->seq, now);
    stage_group(w);
    size_t n = 0;
    const ab_append_event_t *evs = ab__seq_pending(w->seq, &n);
    uint64_t first = 0;
    ab_error_t e = AB_ERROR_INIT;
    int64_t t1 = t0;
    ab_status_t rc = n == 0 ? AB_OK : append_group(w, now, &evs, &n, &first, &e);
    int64_t tc = ab__mono_us();
    note_commit(w, rc, t0, tc);
    if (n > 0)
        t1 = tc; /* the store's part, committed or not (a failed one may have waited a lock) */
    if (rc == AB_OK && n == 0) {
        ab__seq_commit(w->seq, atomic_load(&w->b->head_pos) + 1);
    } else if (rc == AB_OK) {
        ab__wstats_commit(&w->stats, n, t1 - t0, t1);
        committed(w, evs, n, first, now);
    } else if (!group_failed(w, &e, n, lone)) {
        return AB__LONE_GIVEN_BACK;
    }
    count_rejected(w);
    ab__statbox_publish(&w->b->stats, &w->stats); /* before the answers: a client that asks
                                                     `stats` after its answer sees its group */
    for (size_t j = 0; j < w->ngroup; j++)
        answer_publish(w, w->group[j]);
    w->ngroup = 0;
    int64_t t2 = ab__mono_us();
    if (t_recv != INT64_MAX)
        note_slow(w, n, t_recv, t0, t1, t2);
    ab__wstats_tick(&w->stats, t2);
    bool left = ab__snapsched_request(&w->snap);
    if (lone)
        return left || ab__dispatch_wants_pump(w->disp) ? AB__LONE_NUDGE : AB__LONE_DONE;
    ab__dispatch_pump(w->disp); /* requests move and are assigned between groups */
    return AB__LONE_DONE;
}

/* Stage and commit the one item @p it as a group; @return AB_OK with it->pos set. */
static ab_status_t commit_item(writer_t *w, ab_seq_item_t *it, ab_error_t *err)
{
    int64_t now = ab__now_us();
    ab__seq_set_now(w->seq, now);
    ab__seq_stage(w->seq, it, 1);
    size_t n = 0;
    const ab_append_event_t *evs = ab__seq_pending(w->seq, &n);
    uint64_t first = 0;
    if (it->status != AB_RESULT_ACCEPTED || n != 1) {
        if (n == 0)
            ab__seq_commit(w->seq, atomic_load(&w->b->head_pos) + 1);
        else
            ab__seq_abort(w->seq);
        if (it->status == AB_RESULT_REJECTED && err)
            *err = it->err;
        else
            ab_error_set(err, AB_CONFLICT, "", "the event was not staged as new");
        return err ? err->code : AB_CONFLICT;
    }
    int64_t t0 = ab__mono_us();
    ab_status_t rc = store_append(w, evs, n, now, &first, err);
    int64_t t1 = ab__mono_us();
    note_commit(w, rc, t0, t1);
    if (rc != AB_OK) {
        ab__seq_abort(w->seq);
        return rc;
    }
    ab__wstats_commit(&w->stats, n, t1 - t0, t1);
    ab__statbox_publish(&w->b->stats, &w->stats);
    ab__snapsched_committed(&w->snap, evs, n, first);
    ab__dispatch_committed(w->disp, evs, n);
    ab__seq_commit(w->seq, first);
    atomic_store(&w->b->head_pos, first);
    ab__follow_before(&w->follow, &w->fan, first);
    ab__fanout_event(&w->fan, it, now);
    ab__fanout_flush(&w->fan);
    ab__follow_after(&w->follow, &w->fan, first, first);
    ab__snapsched_request(&w->snap);
    return AB_OK;
}

/* An event the broker writes itself (dispatch.h: abandon_run), between groups. */
static ab_status_t commit_own(void *ud, const uint8_t *env, size_t len, uint64_t *pos,
                              ab_error_t *err)
{
    writer_t *w = ud;
    ab_doc_t *doc = NULL;
    ab_event_t ev;
    ab_agui_info_t info;
    if (ab_doc_new(&doc) != AB_OK)
        return ab_error_set(err, AB_NOMEM, "", "out of memory");
    ab_seq_item_t it = {.ev = &ev, .info = &info, .bytes = env, .len = len};
    ab_status_t rc = ab_event_decode(doc, env, len, &w->b->cfg->limits, &ev, err);
    if (rc == AB_OK)
        rc = ab_agui_validate(ev.body, AB_AGUI_STRICT, NULL, NULL, &info, err);
    if (rc == AB_OK)
        rc = commit_item(w, &it, err);
    if (rc == AB_OK)
        *pos = it.pos;
    ab_doc_destroy(&doc);
    return rc;
}

static bool group_add(writer_t *w, ab_job_t *job)
{
    ab_job_t **g = ab__grow(w->group, &w->cap, w->ngroup + 1, sizeof(*g), 64);
    if (g == NULL)
        return false;
    w->group = g;
    w->group[w->ngroup++] = job;
    return true;
}

/* Fill a group starting with @p first: every publish job already queued, up to group_max. */
static void fill_group(writer_t *w, ab_job_t *first)
{
    uint64_t events = first->count;
    if (!group_add(w, first)) {
        ab_error_t e = AB_ERROR_INIT;
        ab_error_set(&e, AB_NOMEM, "", "out of memory");
        finish(w, first, NULL, &e);
        return;
    }
    while (events < w->b->cfg->group_max) {
        ab_job_t *job = take_job(w, ZMQ_DONTWAIT);
        if (job == NULL)
            break;
        if (job->kind != AB_JOB_PUBLISH || !group_add(w, job)) {
            w->held = job;
            break;
        }
        events += job->count;
    }
    commit_group(w, false);
}

/* Wait for the next job (heartbeats while waiting). @return NULL on timeout. */
static ab_job_t *wait_job(writer_t *w)
{
    if (w->held != NULL) {
        ab_job_t *job = w->held;
        w->held = NULL;
        return job;
    }
    zmq_pollitem_t items[4] = {{.socket = w->sock, .events = ZMQ_POLLIN},
                               {.socket = w->fan.xpub, .events = ZMQ_POLLIN}};
    if (w->lone_ok) /* the command thread may use the socket meanwhile: wait on its descriptor */
        items[1] = (zmq_pollitem_t){.fd = ab__fanout_fd(&w->fan), .events = ZMQ_POLLIN};
    int nitems = 2, ifollow = -1, imon = -1;
    int ffd = ab__follow_fd(&w->follow);
    if (ffd >= 0) {
        ifollow = nitems;
        items[nitems++] = (zmq_pollitem_t){.fd = ffd, .events = ZMQ_POLLIN};
    }
    if (w->b->ev_mon.pair != NULL) {
        imon = nitems;
        items[nitems++] = (zmq_pollitem_t){.socket = w->b->ev_mon.pair, .events = ZMQ_POLLIN};
    }
    int64_t wait = ab__fanout_tick(&w->fan);
    if (wait > SNAP_POLL_MS && ab__snapsched_busy(&w->snap))
        wait = SNAP_POLL_MS;
    if (ab__snapstore_pending(&w->snap))
        wait = 0; /* a snapshot's next piece is stored after this look for work */
    long due = ab__dispatch_tick(w->disp);
    if (due >= 0 && due < wait)
        wait = due;
    /* notifications the store's client read during the statements above (the descriptor is
     * then not readable): acted on now, and the dispatcher looked at again before sleeping */
    if (ab__follow_pending(&w->follow, &w->fan))
        wait = 0;
    if (w->lone_ok && !ab__fanout_settle(&w->fan))
        wait = 0;
    if (w->lone_ok)
        pthread_mutex_unlock(&w->b->wlock); /* invariant 7: only while waiting */
    int ready = zmq_poll(items, nitems, (long)wait);
    if (w->lone_ok)
        pthread_mutex_lock(&w->b->wlock);
    if (ready < 0)
        return NULL;
    if (w->lone_ok || (items[1].revents & ZMQ_POLLIN))
        ab__fanout_drain(&w->fan);
    if (imon >= 0 && (items[imon].revents & ZMQ_POLLIN))
        ab__monitor_drain(&w->b->ev_mon);
    if (w->follow.on && (ready == 0 || (ifollow >= 0 && (items[ifollow].revents & ZMQ_POLLIN))))
        ab__follow_poll(&w->follow, &w->fan);
    ab__fanout_tick(&w->fan);
    return (items[0].revents & ZMQ_POLLIN) ? take_job(w, ZMQ_DONTWAIT) : NULL;
}

ab__writer_t *ab__writer_borrow(ab__shared_t *b)
{
    if (pthread_mutex_trylock(&b->wlock) != 0)
        return NULL;
    if (b->writer == NULL || !b->writer->lone_ok || ab__mono_us() < b->writer->lone_off_until) {
        pthread_mutex_unlock(&b->wlock);
        return NULL;
    }
    return b->writer;
}

ab__lone_end_t ab__writer_commit_lone(ab__writer_t *w, ab_job_t *job, void *router)
{
    ab__lone_end_t end = AB__LONE_DONE;
    const ab_plugin_t *p = w->b->plugin;
    w->reply_sock = router;
    if (!group_add(w, job)) {
        end = AB__LONE_GIVEN_BACK; /* out of memory here: the writer may do better */
    } else {
        bool rejected[AB__LONE_EVENTS_MAX]; /* by the command thread, before any staging */
        for (uint32_t i = 0; i < job->count; i++)
            rejected[i] = job->items[i].status == AB_RESULT_REJECTED;
        /* counted before the answer leaves: a client that reads the metric after it sees it */
        atomic_fetch_add_explicit(&w->b->lone_commits, 1, memory_order_relaxed);
        p->set_lock_wait(w->b->wdb, 0); /* never wait for another process's lock here */
        end = commit_group(w, true);
        p->set_lock_wait(w->b->wdb, -1);
        for (uint32_t i = 0; end == AB__LONE_GIVEN_BACK && i < job->count; i++)
            if (!rejected[i]) /* as the command thread handed it over: the writer decides */
                job->items[i].status = (ab_result_status_t)0;
    }
    w->reply_sock = w->sock;
    ab__fanout_tick(&w->fan);
    if (!ab__fanout_settle(&w->fan) && end == AB__LONE_DONE)
        end = AB__LONE_NUDGE; /* subscriptions kept coming: the writer looks again */
    return end;
}

void ab__writer_return(ab__writer_t *w)
{
    pthread_mutex_unlock(&w->b->wlock);
}

/* One turn of the writer's loop: the snapshot worker's documents, the store's figures, then
 * one job (a publish with all queued behind it as a group), each noted for busy_during(). */
static void writer_turn(writer_t *w)
{
    int64_t a = ab__mono_us();
    ab__snapsched_collect(&w->snap);
    ab__snapstore_step(&w->snap); /* at most one piece between two groups */
    busy_note(w, "storing snapshots", a);
    a = ab__mono_us();
    refresh_store_stats(w, a);
    busy_note(w, "reading the store's figures", a);
    ab_job_t *job = wait_job(w);
    if (job == NULL)
        return;
    a = ab__mono_us();
    bool publish = job->kind == AB_JOB_PUBLISH;
    if (publish)
        fill_group(w, job);
    else
        do_single(w, job);
    ab__fanout_tick(&w->fan);
    busy_note(w, publish ? "an earlier group" : "a command job", a);
}

void *ab__writer_main(void *arg)
{
    ab_writer_args_t *a = arg;
    writer_t w = {.b = a->b, .seq = a->seq, .sock = a->sock, .reply_sock = a->sock};
    pthread_mutex_lock(&w.b->wlock); /* held but while waiting for work (invariant 7) */
    ab__thread_start("ab-writer", a->b->cfg->log_level, a->b->cfg->log_json);
    ab__fanout_init(&w.fan, w.b);
    ab__follow_init(&w.follow, w.b, w.seq);
    w.fences = w.follow.on && ab__plugin_fences(w.b->plugin);
    if (w.follow.on && !w.fences)
        ab__log(AB_LOG_WARN,
                "plugin %s has no append_fenced: the thread rules are not "
                "serialised across the brokers of its store (docs/SCALING.md)",
                w.b->plugin->name);
    ab__snapsched_start(&w.snap, w.b);
    ab_error_t de = AB_ERROR_INIT;
    if (ab__dispatch_new(&w.disp, w.b, w.seq, w.sock, &de) != AB_OK) {
        char line[512];
        ab__log(AB_LOG_ERROR, "dispatch is off: %s", ab_error_format(&de, line, sizeof(line)));
        atomic_store(&w.b->dispatch_failed, true);
    }
    ab__dispatch_set_commit(w.disp, commit_own, &w);
    if (w.disp != NULL) /* a queued run is its assignee's to write (dispatch.h) */
        ab__seq_set_unclaimed(w.seq, ab__dispatch_unclaimed, w.disp);
    w.follow.disp = w.disp; /* followed commits move requests too (docs/SCALING.md) */
    w.lone_ok = !w.follow.on && ab_plugin_has(w.b->plugin, set_lock_wait);
    w.b->writer = &w;
    while (!w.stop)
        writer_turn(&w);
    w.b->writer = NULL;
    ab__snapsched_stop(&w.snap);
    ab__seq_set_unclaimed(w.seq, NULL, NULL);
    ab__dispatch_destroy(&w.disp);
    zmq_send(w.sock, "", 0, 0); /* "stopped" */
    zmq_close(w.sock);
    free(w.group);
    ab__fanout_free(&w.fan);
    ab__follow_free(&w.follow);
    ab__seq_destroy(&w.seq);
    pthread_mutex_unlock(&w.b->wlock);
    return NULL;
}

/*
 * writer.c - the writer thread: owns the sequencer, the plugin's writer
 * handle and the XPUB event endpoint. Group commit, live fan-out, heartbeats
 * and the answers to publish, claim and heads.
 *
 * Invariants:
 *  1. Acked means durable, published means durable: a `published` reply and
 *     a live event are sent only after append_batch() returned AB_OK for the
 *     group holding the event; a failed group is aborted and every event it
 *     staged is answered `rejected` with the store's (retryable) error.
 *  2. Live events go out in commit-position order, as [topic][records]
 *     messages: consecutive committed events of one run in a group share a
 *     message of at most AB_LIVE_EVENTS_MAX records and about AB_LIVE_BYTES_MAX
 *     bytes (a larger event goes alone); each record is the stamp and the
 *     producer's envelope copied once (PROTOCOL.md 6.2). Every message of
 *     a group is sent before any `published` answer of that group.
 *  3. A group holds whole publish jobs, in arrival order, up to group_max
 *     events (at least one job); claim and heads run between groups, so their
 *     order relative to publishes on the same connection is kept.
 *  4. Every job is answered exactly once and its weight returned to the
 *     ingest queue after its answer is handed to the command thread.
 *  5. A heartbeat goes out about once a second, timed by zmq_poll timeouts.
 *  6. After the stop job (sent last by the command thread) the writer has
 *     answered everything queued before it; it then reports "stopped".
 *  7. Durable snapshots (docs/REDUCER.md section 6): after a group commit,
 *     every thread with a run that ended in it, and every thread whose
 *     committed events since its last snapshot request reached
 *     --snapshot-every N (0 = off) AND whose committed bytes since then
 *     reached the size of its last document, is handed to the
 *     snapshot worker (snapshot_worker.c), which computes the document off
 *     this thread from committed events only; the writer stores the
 *     documents it hands back (snapshot_put) between groups. The counts live
 *     in a bounded map of at most AB_BROKER_CACHED_RUNS threads (the
 *     sequencer's cached runs): when it is full a new thread evicts the one
 *     in its home slot, whose count and document size restart at 0 (its next
 *     snapshot comes up to N events later; the SNAPSHOT answer stays
 *     current). A failed group is counted nowhere. A thread whose last
 *     document could not be stored (too large for a reply, or over
 *     --snapshot-memory to build) gets no every-N request until one of its
 *     runs ends: each attempt would fold it all again for nothing.
 */
#include "snap_internal.h"

#include <stdlib.h>
#include <string.h>

#define HEARTBEAT_MS 1000

#define COUNT_SLOTS  (2u * AB_BROKER_CACHED_RUNS) /* power of two, load at most 1/2 */
#define SNAP_POLL_MS 20 /* longest wait for a job while the snapshot worker is busy */

typedef struct count_slot {
    uint32_t len;      /**< 0 = free (thread ids are never empty) */
    uint32_t count;    /**< committed events since the last snapshot request */
    uint64_t bytes;    /**< their envelope bytes */
    uint64_t last_doc; /**< size of the last stored document (0 = unknown) */
    bool too_large;    /**< its last document could not be stored: no every-N until a run ends */
    char id[AB_ID_MAX_BYTES];
} count_slot_t;

typedef struct writer {
    ab_broker_t *b;
    void *sock;
    void *xpub;
    ab_seq_t *seq;
    ab_job_t **group;
    size_t ngroup, cap;
    ab_job_t *held; /**< a non-publish job received while filling a group */
    ab_buf_t buf;
    ab_buf_t topic;     /**< topic of the live message being built (reused while it matches) */
    ab_buf_t live;      /**< its records frame (invariant 2) */
    uint32_t live_n;    /**< records in it */
    ab_error_t scratch; /**< fan_out's encode error: reset per event, never zeroed whole */
    int64_t next_hb;
    bool stop;
    /* threads due a snapshot after the last committed group (snapshot step) */
    char (*ended)[AB_ID_MAX_BYTES + 1];
    bool *run_end; /**< per entry of ended: a run ended (else every-N) */
    size_t nended, ended_cap;
    /* committed events per thread since its last stored snapshot (invariant 7) */
    count_slot_t *counts; /**< COUNT_SLOTS slots, open addressing, linear probing */
    size_t ncounts;
    ab_snapworker_t *worker; /**< NULL: the plugin stores no snapshots */
} writer_t;

/* Remember @p thread (deduplicated) for the snapshot step; drops it when out of memory. */
static void note_ended(writer_t *w, ab_str_t thread, bool run_end)
{
    if (thread.len > AB_ID_MAX_BYTES)
        return;
    for (size_t i = 0; i < w->nended; i++)
        if (strlen(w->ended[i]) == thread.len && memcmp(w->ended[i], thread.ptr, thread.len) == 0) {
            w->run_end[i] = w->run_end[i] || run_end;
            return;
        }
    if (w->nended == w->ended_cap) {
        size_t cap = w->ended_cap ? w->ended_cap * 2 : 8;
        char(*v)[AB_ID_MAX_BYTES + 1] = realloc(w->ended, cap * sizeof(*v));
        if (v != NULL)
            w->ended = v;
        bool *r = v != NULL ? realloc(w->run_end, cap * sizeof(*r)) : NULL;
        if (r == NULL)
            return;
        w->run_end = r;
        w->ended_cap = cap;
    }
    memcpy(w->ended[w->nended], thread.ptr, thread.len);
    w->ended[w->nended][thread.len] = '\0';
    w->run_end[w->nended] = run_end;
    w->nended++;
}

static size_t count_home(ab_str_t thread)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < thread.len; i++)
        h = (h ^ (unsigned char)thread.ptr[i]) * 1099511628211ull;
    return (size_t)(h & (COUNT_SLOTS - 1));
}

/* Free slot @p i, shifting later entries of its cluster back (no tombstones). */
static void count_remove(writer_t *w, size_t i)
{
    count_slot_t *c = w->counts;
    size_t j = i;
    for (;;) {
        c[i].len = 0;
        for (;;) {
            j = (j + 1) & (COUNT_SLOTS - 1);
            if (c[j].len == 0) {
                w->ncounts--;
                return;
            }
            size_t k = count_home((ab_str_t){c[j].id, c[j].len});
            /* c[j] may move to i when its home k is not cyclically in (i, j] */
            if (i <= j ? (i >= k || k > j) : (i >= k && k > j))
                break;
        }
        c[i] = c[j];
        i = j;
    }
}

/* The slot of @p thread: found, or claimed (evicting one when full); NULL when unusable. */
static count_slot_t *count_slot(writer_t *w, ab_str_t thread)
{
    if (thread.len == 0 || thread.len > AB_ID_MAX_BYTES)
        return NULL;
    if (w->counts == NULL && (w->counts = calloc(COUNT_SLOTS, sizeof(*w->counts))) == NULL)
        return NULL;
    size_t home = count_home(thread), i = home;
    for (; w->counts[i].len != 0; i = (i + 1) & (COUNT_SLOTS - 1))
        if (w->counts[i].len == thread.len && memcmp(w->counts[i].id, thread.ptr, thread.len) == 0)
            return &w->counts[i];
    if (w->ncounts >= AB_BROKER_CACHED_RUNS) {
        /* evict the entry nearest the home slot; its count restarts */
        size_t v = home;
        while (w->counts[v].len == 0)
            v = (v + 1) & (COUNT_SLOTS - 1);
        count_remove(w, v);
        for (i = home; w->counts[i].len != 0; i = (i + 1) & (COUNT_SLOTS - 1))
            ;
    }
    count_slot_t *c = &w->counts[i];
    c->len = (uint32_t)thread.len;
    c->count = 0;
    c->bytes = 0;
    c->last_doc = 0;
    memcpy(c->id, thread.ptr, thread.len);
    w->ncounts++;
    return c;
}

/* The slot of @p thread if it has one. */
static count_slot_t *count_find(writer_t *w, ab_str_t thread)
{
    if (w->counts == NULL || thread.len == 0 || thread.len > AB_ID_MAX_BYTES)
        return NULL;
    for (size_t i = count_home(thread); w->counts[i].len != 0; i = (i + 1) & (COUNT_SLOTS - 1))
        if (w->counts[i].len == thread.len && memcmp(w->counts[i].id, thread.ptr, thread.len) == 0)
            return &w->counts[i];
    return NULL;
}

/*
 * Count the committed events of a group; note the threads due an every-N
 * snapshot: since their last request, at least snapshot_every events AND at
 * least as many envelope bytes as their last document had. A document is
 * then at most about twice the bytes committed since the previous one, so
 * the documents written cost O(bytes committed), not O(events^2) on a long
 * active run whose document carries all its events.
 */
static void count_committed(writer_t *w, const ab_append_event_t *evs, size_t n)
{
    uint32_t every = w->b->cfg->snapshot_every;
    count_slot_t *last = NULL;
    ab_str_t last_thread = {NULL, 0};
    for (size_t i = 0; i < n; i++) {
        ab_str_t t = evs[i].thread;
        /* events of a group mostly share a thread: skip the lookup then */
        if (last == NULL || t.len != last_thread.len ||
            memcmp(t.ptr, last_thread.ptr, t.len) != 0) {
            last = count_slot(w, t);
            last_thread = t;
            if (last == NULL)
                continue;
        }
        last->count++;
        last->bytes += evs[i].len;
        if (last->count >= every && last->bytes >= last->last_doc && !last->too_large)
            note_ended(w, t, false);
    }
}

/*
 * The durable snapshot step: hand the threads noted for the last committed
 * group to the worker (after the group is answered); their counts restart.
 */
static void request_snapshots(writer_t *w)
{
    for (size_t i = 0; i < w->nended; i++) {
        ab_str_t t = {w->ended[i], strlen(w->ended[i])};
        count_slot_t *c = count_find(w, t);
        if (c != NULL)
            c->count = 0, c->bytes = 0;
        ab__snapworker_request(w->worker, t, w->run_end[i]);
    }
    w->nended = 0;
}

/* Store one document computed by the worker (ab_snapworker_cb); learn its size. */
static void store_doc(void *ud, ab_str_t thread, uint64_t pos, const ab_buf_t *text, size_t size)
{
    writer_t *w = ud;
    ab_error_t e = AB_ERROR_INIT;
    count_slot_t *c = w->b->cfg->snapshot_every > 0 ? count_slot(w, thread) : NULL;
    if (c != NULL)
        c->last_doc = size;
    if (c != NULL)
        c->too_large = text->len == 0;
    if (text->len == 0)
        return; /* too large to answer or to build: not stored (snapshot_worker.c) */
    if (w->b->plugin->snapshot_put(w->b->wdb, thread, pos, text->data, text->len, &e) != AB_OK) {
        char line[512];
        ab__log(AB_LOG_WARN, "cannot store the snapshot of %.*s: %s", (int)thread.len, thread.ptr,
                ab_error_format(&e, line, sizeof(line)));
    }
}

static void heartbeat(writer_t *w)
{
    ab_msg_t m = {.op = AB_OP_HEARTBEAT, .v = AB_PROTOCOL_VERSION};
    ab_error_t e = AB_ERROR_INIT;
    m.u.heartbeat.instance = (ab_str_t){w->b->instance, strlen(w->b->instance)};
    m.u.heartbeat.head_pos = atomic_load(&w->b->head_pos);
    m.u.heartbeat.time_us = ab__now_us();
    ab_buf_reset(&w->buf);
    if (ab_msg_encode(&m, &w->buf, &e) == AB_OK) {
        zmq_send(w->xpub, AB_TOPIC_HEARTBEAT, AB_TOPIC_HEARTBEAT_LEN, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(w->xpub, w->buf.data, w->buf.len, ZMQ_DONTWAIT);
    }
    w->next_hb = ab__mono_ms() + HEARTBEAT_MS;
}

/* Send one answer to the command thread and release the job. */
static void finish(writer_t *w, ab_job_t *job, const ab_msg_t *m, const ab_error_t *e)
{
    /* Give the job's share of the ingest queue back before the reply can
     * reach the client, so a request sent right after the reply never meets
     * a queue still counting the answered one (a spurious `overloaded`). */
    atomic_fetch_sub(&w->b->in_flight, job->weight);
    atomic_fetch_sub(&w->b->in_flight_bytes, job->bytes);
    int rc = m != NULL ? ab__reply_msg(w->sock, &job->identity, m)
                       : ab__reply_error(w->sock, &job->identity, job->v, job->cid, e);
    if (rc != 0)
        ab__log(AB_LOG_WARN, "writer: cannot hand a reply to the command thread");
    ab__job_free(job);
}

static void do_claim(writer_t *w, ab_job_t *job)
{
    ab_msg_t m = {.op = AB_OP_CLAIMED, .v = job->v, .cid = job->cid};
    ab_error_t e = AB_ERROR_INIT;
    ab_claimed_t *c = &m.u.claimed;
    if (ab__seq_claim(w->seq, job->thread, job->run, &c->epoch, &c->last_seq, &c->status, &e) !=
        AB_OK) {
        finish(w, job, NULL, &e);
        return;
    }
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
        ab_msg_t m = {.op = AB_OP_HEADS_REPLY, .v = job->v, .cid = job->cid};
        m.u.heads_reply.head_pos = atomic_load(&w->b->head_pos);
        m.u.heads_reply.heads = view;
        m.u.heads_reply.nheads = hl.n;
        finish(w, job, &m, NULL);
    }
    free(view);
    ab__headlist_free(&hl);
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
    default: break;
    }
    ab_error_t e = AB_ERROR_INIT;
    ab_error_set(&e, AB_INTERNAL, "", "writer got an unexpected job");
    finish(w, job, NULL, &e);
}

/*
 * Whether @p t is already the topic of (thread, run): "ev" NUL thread NUL run
 * NUL. Ids never hold NUL, so equal lengths and bytes mean the same ids; the
 * events of a publish usually share one run, and building (and re-checking)
 * the topic per event was a visible share of the writer's time.
 */
static bool topic_is(const ab_buf_t *t, ab_str_t thread, ab_str_t run)
{
    size_t p = AB_TOPIC_EVENTS_LEN;
    return t->len == p + thread.len + 1 + run.len + 1 &&
           memcmp(t->data + p, thread.ptr, thread.len) == 0 &&
           memcmp(t->data + p + thread.len + 1, run.ptr, run.len) == 0;
}

/* Send the live message being built, if any: [topic][records]. */
static void live_flush(writer_t *w)
{
    if (w->live_n == 0)
        return;
    zmq_send(w->xpub, w->topic.data, w->topic.len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(w->xpub, w->live.data, w->live.len, ZMQ_DONTWAIT);
    ab_buf_reset(&w->live);
    w->live_n = 0;
}

/* Add one committed event to the live message of its run (sent when full or at a new run). */
static void fan_out(writer_t *w, ab_job_t *job, uint32_t i, int64_t time_us)
{
    const ab_seq_item_t *it = &job->items[i];
    ab_stamp_t stamp = {.pos = it->pos, .time_us = time_us};
    ab_error_t *e = &w->scratch;
    ab_seq_error_reset(e);
    if (!topic_is(&w->topic, it->ev->thread, it->ev->run)) {
        live_flush(w);
        ab_buf_reset(&w->topic);
        if (ab_topic_event(&w->topic, it->ev->thread, it->ev->run, e) != AB_OK) {
            ab_buf_reset(&w->topic);
            return;
        }
    }
    size_t len = it->len;
    if (w->live_n > 0 && w->live.len + len + AB_CHUNK_RECORD_OVERHEAD > AB_LIVE_BYTES_MAX)
        live_flush(w);
    if (ab_record_append(&w->live, &stamp, it->bytes, len, e) != AB_OK)
        return; /* out of memory: a live loss, which subscribers fill from the store */
    if (++w->live_n >= AB_LIVE_EVENTS_MAX || w->live.len >= AB_LIVE_BYTES_MAX)
        live_flush(w);
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

/* Stage, commit, fan out and answer the jobs of the current group. */
static void commit_group(writer_t *w)
{
    for (size_t j = 0; j < w->ngroup; j++)
        ab__seq_stage(w->seq, w->group[j]->items, w->group[j]->count);
    size_t n = 0;
    const ab_append_event_t *evs = ab__seq_pending(w->seq, &n);
    int64_t now = ab__now_us();
    if (n == 0) {
        ab__seq_commit(w->seq, atomic_load(&w->b->head_pos) + 1);
    } else {
        uint64_t first = 0;
        ab_error_t e = AB_ERROR_INIT;
        if (w->b->plugin->append_batch(w->b->wdb, evs, n, now, &first, &e) == AB_OK) {
            /* before ab__seq_commit: the pending events are its */
            if (w->worker != NULL) {
                for (size_t i = 0; i < n; i++)
                    if (evs[i].status == AB_RUN_STATUS_FINISHED ||
                        evs[i].status == AB_RUN_STATUS_ERRORED) {
                        note_ended(w, evs[i].thread, true);
                        count_slot_t *c = count_find(w, evs[i].thread);
                        if (c != NULL)
                            c->too_large = false; /* its document may fit again */
                    }
                if (w->b->cfg->snapshot_every > 0)
                    count_committed(w, evs, n);
            }
            ab__seq_commit(w->seq, first);
            atomic_store(&w->b->head_pos, first + n - 1);
            for (size_t j = 0; j < w->ngroup; j++)
                for (uint32_t i = 0; i < w->group[j]->count; i++)
                    if (w->group[j]->items[i].status == AB_RESULT_ACCEPTED)
                        fan_out(w, w->group[j], i, now);
            live_flush(w); /* before any answer (invariant 2) */
        } else {
            char line[512];
            ab__log(AB_LOG_WARN, "group commit of %zu events failed: %s", n,
                    ab_error_format(&e, line, sizeof(line)));
            ab__seq_abort(w->seq);
            fail_staged(w, &e);
        }
    }
    for (size_t j = 0; j < w->ngroup; j++)
        answer_publish(w, w->group[j]);
    w->ngroup = 0;
    request_snapshots(w);
}

static bool group_add(writer_t *w, ab_job_t *job)
{
    if (w->ngroup == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        ab_job_t **g = realloc(w->group, cap * sizeof(*g));
        if (g == NULL)
            return false;
        w->group = g;
        w->cap = cap;
    }
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
        ab_job_t *job = ab__job_recv(w->sock, ZMQ_DONTWAIT);
        if (job == NULL)
            break;
        if (job->kind != AB_JOB_PUBLISH || !group_add(w, job)) {
            w->held = job;
            break;
        }
        events += job->count;
    }
    commit_group(w);
}

static void drain_xpub(writer_t *w)
{
    char sub[512];
    while (zmq_recv(w->xpub, sub, sizeof(sub), ZMQ_DONTWAIT) >= 0)
        ;
}

/* Wait for the next job (heartbeats while waiting). @return NULL on timeout. */
static ab_job_t *wait_job(writer_t *w)
{
    if (w->held != NULL) {
        ab_job_t *job = w->held;
        w->held = NULL;
        return job;
    }
    zmq_pollitem_t items[2] = {{.socket = w->sock, .events = ZMQ_POLLIN},
                               {.socket = w->xpub, .events = ZMQ_POLLIN}};
    int64_t wait = w->next_hb - ab__mono_ms();
    if (wait < 0)
        wait = 0;
    if (wait > SNAP_POLL_MS && ab__snapworker_busy(w->worker))
        wait = SNAP_POLL_MS;
    if (zmq_poll(items, 2, (long)wait) < 0)
        return NULL;
    if (items[1].revents & ZMQ_POLLIN)
        drain_xpub(w);
    if (ab__mono_ms() >= w->next_hb)
        heartbeat(w);
    return (items[0].revents & ZMQ_POLLIN) ? ab__job_recv(w->sock, ZMQ_DONTWAIT) : NULL;
}

void *ab__writer_main(void *arg)
{
    ab_writer_args_t *a = arg;
    writer_t w = {.b = a->b, .xpub = a->b->xpub, .seq = a->seq, .sock = a->sock};
    ab__thread_name("ab-writer");
    w.next_hb = ab__mono_ms();
    if (w.b->plugin->snapshot_put != NULL && w.b->plugin->snapshot_get != NULL) {
        w.worker = ab__snapworker_start(w.b);
        atomic_store(&w.b->snap_failed, w.worker == NULL); /* HELLO then says degraded */
    }
    while (!w.stop) {
        ab__snapworker_collect(w.worker, store_doc, &w);
        ab_job_t *job = wait_job(&w);
        if (job == NULL)
            continue;
        if (job->kind == AB_JOB_PUBLISH)
            fill_group(&w, job);
        else
            do_single(&w, job);
        if (ab__mono_ms() >= w.next_hb)
            heartbeat(&w);
    }
    ab__snapworker_stop(&w.worker, store_doc, &w);
    zmq_send(w.sock, "", 0, 0); /* "stopped" */
    zmq_close(w.sock);
    free(w.group);
    free(w.ended);
    free(w.run_end);
    free(w.counts);
    ab_buf_free(&w.buf);
    ab_buf_free(&w.topic);
    ab_buf_free(&w.live);
    ab__seq_destroy(&w.seq);
    return NULL;
}

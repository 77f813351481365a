/*
 * snapshot_worker.c - the snapshot worker: a thread, started and stopped by
 * the writer, that computes the durable snapshots the writer asks for (run
 * ends, every-N events; snapsched.c invariant 1) off the writer thread, and
 * hands each document back to the writer, which stores it (snapshot_put
 * needs the writer handle).
 *
 * Invariants:
 *  1. A document is computed with ab__snapshot_current() on the worker's own
 *     read-only handle, so it covers committed events only (at least every
 *     event committed when it was requested) and never claims more.
 *  2. Requests are deduplicated per thread and bounded (AB_SNAPWORKER_QUEUE;
 *     beyond it a request is dropped with a warning: the next run end or N
 *     events ask again, and the SNAPSHOT answer stays current). Results are
 *     coalesced per thread (only the highest position is kept).
 *  3. The thread runs at nice AB_SNAPWORKER_NICE (Linux), so under a
 *     saturated CPU it yields to the bus threads; its requests then coalesce.
 *  4. ab__snapworker_stop() computes the queued requests for at most
 *     AB_SNAPWORKER_DRAIN_MS (checked between chunks of AB_SNAPWORKER_CHUNK
 *     events), so a clean shutdown usually stores the snapshots of the runs
 *     that ended, and never waits long; what is dropped only makes the next
 *     SNAPSHOT answer fold more.
 *  5. A document is handed on in its binary stored form, the msgpack map
 *     ab_snapshot_builder_msgpack() writes (ab_snapshot_load() reads it, and
 *     the JSON text older brokers stored), so storing costs no conversion and
 *     a cold SNAPSHOT no JSON parse.
 *  6. A request carries the feeds the writer made of the thread's events
 *     since its last request (snapfeed.h); a request merged into a queued
 *     one chains its feeds after the queued one's. The worker folds from
 *     them instead of reading the events back (snapshot_cmd.c invariant 6)
 *     and frees them when the request is computed, dropped or abandoned.
 *  7. An every-N request still queued for a thread whose document was just
 *     found too large for --snapshot-memory is dropped (it was made before
 *     the writer learnt that; snapsched.c invariant 3). That a thread was
 *     too large is kept with its result until the writer collects it, even
 *     when the result also holds an earlier document of the thread.
 *  8. The computed documents waiting to be collected hold at most
 *     AB_SNAP_PENDING_BYTES plus the one that crossed it: past that the
 *     worker computes nothing more until the writer has collected (at a
 *     stop it abandons the rest, as past its drain time). A collect takes
 *     documents, oldest first, up to the budget its caller gives, at least
 *     one; the rest stay for the next.
 */
#include "ab_common.h"
#include "snap_internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

typedef char tid_t[AB_ID_MAX_BYTES + 1];

typedef struct todo {
    tid_t thread; /**< "" = dropped while queued (invariant 7) */
    bool run_end;
    ab__snapfeed_t *feed, *feed_tail; /**< its feeds, oldest first (invariant 6) */
} todo_t;

typedef struct done {
    tid_t thread;
    uint64_t pos;
    ab_buf_t stored;
    size_t size;
    bool too_large; /**< a request of the thread was over --snapshot-memory (invariant 7) */
} done_t;

struct ab_snapworker {
    ab__shared_t *b;
    ab_plugin_db_t *db;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    todo_t *todo; /**< ring of AB_SNAPWORKER_QUEUE */
    size_t first, ntodo;
    done_t *done;
    size_t ndone, done_cap;
    size_t done_bytes; /**< the documents' bytes in done (invariant 8) */
    bool computing;
    bool stop;
    int64_t deadline; /**< when stopping: give up after this (ab__mono_ms) */
};

static bool given_up(ab_snapworker_t *w)
{
    pthread_mutex_lock(&w->mu);
    bool late = w->stop && ab__mono_ms() > w->deadline;
    pthread_mutex_unlock(&w->mu);
    return late;
}

static todo_t *queued(ab_snapworker_t *w, ab_str_t t)
{
    for (size_t i = 0; i < w->ntodo; i++) {
        todo_t *q = &w->todo[(w->first + i) % AB_SNAPWORKER_QUEUE];
        if (strlen(q->thread) == t.len && memcmp(q->thread, t.ptr, t.len) == 0)
            return q;
    }
    return NULL;
}

/* Chain @p feed after @p q's feeds (invariant 6). */
static void chain_feed(todo_t *q, ab__snapfeed_t *feed)
{
    if (feed == NULL)
        return;
    if (q->feed_tail != NULL)
        q->feed_tail->next = feed;
    else
        q->feed = feed;
    q->feed_tail = feed;
}

void ab__snapworker_request(ab_snapworker_t *w, ab_str_t t, bool run_end, ab__snapfeed_t *feed)
{
    if (w == NULL || t.len == 0 || t.len > AB_ID_MAX_BYTES) {
        ab__snapfeed_free(&feed);
        return;
    }
    pthread_mutex_lock(&w->mu);
    bool dropped = false;
    todo_t *q = queued(w, t);
    if (q != NULL) {
        q->run_end = q->run_end || run_end;
        chain_feed(q, feed);
    } else if (w->ntodo < AB_SNAPWORKER_QUEUE) {
        q = &w->todo[(w->first + w->ntodo++) % AB_SNAPWORKER_QUEUE];
        memcpy(q->thread, t.ptr, t.len);
        q->thread[t.len] = '\0';
        q->run_end = run_end;
        q->feed = q->feed_tail = NULL;
        chain_feed(q, feed);
        pthread_cond_signal(&w->cv);
    } else {
        dropped = true;
    }
    pthread_mutex_unlock(&w->mu);
    if (dropped) {
        ab__snapfeed_free(&feed);
        ab__log(AB_LOG_WARN, "snapshot queue full: snapshot of %.*s skipped", (int)t.len, t.ptr);
    }
}

/* Drop an every-N request of @p thread still queued (invariant 7). */
static void drop_every_n(ab_snapworker_t *w, const char *thread)
{
    pthread_mutex_lock(&w->mu);
    todo_t *q = queued(w, (ab_str_t){thread, strlen(thread)});
    if (q != NULL && !q->run_end) {
        q->thread[0] = '\0';
        ab__snapfeed_free(&q->feed);
        q->feed_tail = NULL;
    }
    pthread_mutex_unlock(&w->mu);
}

/* Record a computed document (replacing an older one of the thread), or with @p too_large
 * that the thread's builder was over --snapshot-memory; takes @p stored. */
static void add_done(ab_snapworker_t *w, const char *thread, uint64_t pos, ab_buf_t *stored,
                     size_t size, bool too_large)
{
    pthread_mutex_lock(&w->mu);
    done_t *d = NULL;
    for (size_t i = 0; i < w->ndone && d == NULL; i++)
        if (strcmp(w->done[i].thread, thread) == 0)
            d = &w->done[i];
    if (d == NULL) {
        done_t *v = ab__grow(w->done, &w->done_cap, w->ndone + 1, sizeof(*v), 16);
        if (v != NULL)
            w->done = v;
    }
    if (d == NULL && w->ndone < w->done_cap) {
        d = &w->done[w->ndone++];
        memset(d, 0, sizeof(*d));
        strcpy(d->thread, thread);
    }
    if (d != NULL && too_large) { /* kept whatever document the entry holds (invariant 7) */
        d->too_large = true;
        d->size = size;
    } else if (d != NULL && pos >= d->pos) {
        w->done_bytes -= d->stored.len;
        ab_buf_free(&d->stored);
        d->stored = *stored;
        d->pos = pos;
        d->size = size;
        d->too_large = false;
        w->done_bytes += d->stored.len;
        *stored = (ab_buf_t)AB_BUF_INIT;
    }
    pthread_mutex_unlock(&w->mu);
    ab_buf_free(stored);
}

/*
 * The thread's entry, current: folded in chunks of AB_SNAPWORKER_CHUNK
 * events, putting the entry back between chunks when the cache keeps it,
 * so that a SNAPSHOT waiting for it folds the rest at its own priority.
 */
static ab_status_t current(ab_snapworker_t *w, ab_str_t t, size_t memory_max, ab__feedread_t *feed,
                           ab_snapent_t **ent, ab_error_t *e)
{
    for (;;) {
        uint64_t folded = 0;
        ab_status_t st = ab__snapshot_current(w->b, w->db, t, AB_SNAPWORKER_CHUNK, memory_max, feed,
                                              ent, &folded, e);
        if (st != AB_OK || folded < AB_SNAPWORKER_CHUNK)
            return st;
        if (given_up(w)) {
            ab__snapcache_put(w->b->snaps, *ent);
            *ent = NULL;
            return ab_error_set(e, AB_REQUEST_ABORTED, "", "broker stopping");
        }
        if (ab__snapcache_fits(*ent)) {
            ab__snapcache_put(w->b->snaps, *ent);
            *ent = NULL;
        }
    }
}

/*
 * Compute the document of @p q's thread now and hand it to the writer. An
 * every-N document larger than a SNAPSHOT reply can carry is not converted
 * nor stored (the answer would be too_large anyway); its size is reported
 * so that the writer's rule spaces the next request.
 */
static void compute(ab_snapworker_t *w, const todo_t *q)
{
    const char *thread = q->thread;
    ab_error_t e = AB_ERROR_INIT;
    ab_snapent_t *ent = NULL;
    ab_buf_t mp = AB_BUF_INIT, stored = AB_BUF_INIT;
    ab_str_t t = {thread, strlen(thread)};
    /* every-N only: capped by --snapshot-memory (a run end is always computed) */
    size_t cap = q->run_end ? 0 : (size_t)w->b->cfg->snapshot_memory << 20;
    ab__feedread_t feed = {.seg = q->feed};
    ab_status_t st = current(w, t, cap, &feed, &ent, &e);
    atomic_fetch_add(&w->b->snapfeed_folded, feed.events);
    if (st == AB_OK)
        st = ab_snapshot_builder_msgpack(ent->sb, UINT32_MAX, SIZE_MAX, &mp, &e);
    uint64_t pos = st == AB_OK ? ab_snapshot_builder_position(ent->sb) : 0;
    if (st == AB_OK)
        ent->unmeasured = 0; /* the encoding measured the projection */
    if (st == AB_OK)
        ab__snapcache_put(w->b->snaps,
                          ent); /* before the document is handed on: the builder is free again */
    else
        ab__snapcache_discard(w->b->snaps, ent);
    size_t size = mp.len;
    if (st == AB_OK && (q->run_end || mp.len <= AB_MAX_REPLY_BYTES)) {
        stored = mp; /* the binary stored form (ab_snapshot_load) */
        mp = (ab_buf_t)AB_BUF_INIT;
    }
    ab_buf_free(&mp);
    if (st == AB_OK) {
        add_done(w, thread, pos, &stored, stored.len > 0 ? stored.len : size, false);
    } else if (st == AB_TOO_LARGE) { /* over --snapshot-memory: the writer stops asking */
        drop_every_n(w, thread);
        add_done(w, thread, 0, &stored, (size_t)w->b->cfg->snapshot_memory << 20, true);
        ab__log(AB_LOG_INFO, "snapshot of %s not stored: %s", thread, e.message);
    } else if (st != AB_NOT_FOUND && st != AB_REQUEST_ABORTED) {
        char line[512];
        ab__log(AB_LOG_WARN, "cannot compute the snapshot of %s: %s", thread,
                ab_error_format(&e, line, sizeof(line)));
    }
    ab_buf_free(&stored);
}

static void *worker_main(void *arg)
{
    ab_snapworker_t *w = arg;
    ab__thread_start("ab-snapshot", w->b->cfg->log_level, w->b->cfg->log_json);
#ifdef __linux__
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), AB_SNAPWORKER_NICE);
#endif
    todo_t cur;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while ((w->ntodo == 0 || w->done_bytes >= AB_SNAP_PENDING_BYTES) && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu); /* nothing to do, or results to collect first */
        if (w->ntodo == 0 || (w->stop && ab__mono_ms() > w->deadline) ||
            w->done_bytes >= AB_SNAP_PENDING_BYTES) /* stopping: the rest is abandoned */
            break;
        cur = w->todo[w->first];
        w->first = (w->first + 1) % AB_SNAPWORKER_QUEUE;
        w->ntodo--;
        if (cur.thread[0] == '\0') /* dropped while queued (invariant 7) */
            continue;
        w->computing = true;
        pthread_mutex_unlock(&w->mu);
        compute(w, &cur);
        ab__snapfeed_free(&cur.feed);
        pthread_mutex_lock(&w->mu);
        w->computing = false;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

ab_snapworker_t *ab__snapworker_start(ab__shared_t *b)
{
    ab_snapworker_t *w = calloc(1, sizeof(*w));
    ab_error_t e = AB_ERROR_INIT;
    ab_plugin_open_opts_t o = {.data_dir = b->cfg->data_dir,
                               .durability = b->cfg->durability,
                               .readonly = true,
                               .conninfo = b->cfg->pg_conninfo[0] ? b->cfg->pg_conninfo : NULL};
    if (w == NULL || (w->todo = calloc(AB_SNAPWORKER_QUEUE, sizeof(*w->todo))) == NULL)
        goto fail;
    w->b = b;
    if (b->plugin->open(&o, &w->db, &e) != AB_OK)
        goto fail;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->th, NULL, worker_main, w) == 0)
        return w;
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    b->plugin->close(w->db);
fail:
    ab__log(AB_LOG_WARN, "cannot start the snapshot worker: snapshots are not stored (%s)",
            e.message);
    if (w != NULL)
        free(w->todo);
    free(w);
    return NULL;
}

bool ab__snapworker_busy(ab_snapworker_t *w)
{
    if (w == NULL)
        return false;
    pthread_mutex_lock(&w->mu);
    bool busy = w->ntodo > 0 || w->computing || w->ndone > 0;
    pthread_mutex_unlock(&w->mu);
    return busy;
}

/* Take the oldest results whose documents fit @p budget bytes (at least one) out of the
 * list, into @p out (invariant 8). @return how many; w->mu held. */
static size_t take_done(ab_snapworker_t *w, size_t budget, done_t **out)
{
    size_t n = 0, bytes = 0;
    while (n < w->ndone && (n == 0 || bytes + w->done[n].stored.len <= budget))
        bytes += w->done[n++].stored.len;
    *out = NULL;
    if (n == w->ndone) { /* all of them (a stop's collect, and most): the list itself */
        *out = w->done;
        w->done = NULL;
        w->ndone = w->done_cap = 0;
    } else if ((*out = malloc(n * sizeof(**out))) != NULL) {
        memcpy(*out, w->done, n * sizeof(**out));
        memmove(w->done, w->done + n, (w->ndone - n) * sizeof(*w->done));
        w->ndone -= n;
    } else {
        return 0; /* out of memory: left for the next collect */
    }
    w->done_bytes -= bytes;
    pthread_cond_signal(&w->cv); /* the worker may be waiting for room */
    return n;
}

size_t ab__snapworker_pending(ab_snapworker_t *w, bool *waiting)
{
    pthread_mutex_lock(&w->mu);
    size_t bytes = w->done_bytes;
    if (waiting != NULL)
        *waiting = !w->computing && (w->ntodo == 0 || bytes >= AB_SNAP_PENDING_BYTES);
    pthread_mutex_unlock(&w->mu);
    return bytes;
}

size_t ab__snapworker_collect(ab_snapworker_t *w, size_t budget, ab_snapworker_cb cb, void *ud)
{
    if (w == NULL)
        return 0;
    done_t *d = NULL;
    pthread_mutex_lock(&w->mu);
    size_t n = take_done(w, budget, &d);
    pthread_mutex_unlock(&w->mu);
    for (size_t i = 0; i < n; i++) {
        ab_str_t t = {d[i].thread, strlen(d[i].thread)};
        cb(ud, t, d[i].pos, &d[i].stored, d[i].size, d[i].too_large);
        ab_buf_free(&d[i].stored);
    }
    free(d);
    return n;
}

void ab__snapworker_stop(ab_snapworker_t **wp, ab_snapworker_cb cb, void *ud)
{
    ab_snapworker_t *w = *wp;
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    w->deadline = ab__mono_ms() + AB_SNAPWORKER_DRAIN_MS;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    for (size_t i = 0; i < w->ntodo; i++) /* abandoned: over the drain time */
        ab__snapfeed_free(&w->todo[(w->first + i) % AB_SNAPWORKER_QUEUE].feed);
    ab__snapworker_collect(w, SIZE_MAX, cb, ud);
    free(w->done);
    w->b->plugin->close(w->db);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->todo);
    free(w);
    *wp = NULL;
}

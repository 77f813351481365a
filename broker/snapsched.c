/*
 * snapsched.c - durable snapshot scheduling on the writer thread
 * (writer_int.h; docs/REDUCER.md section 6, docs/OPERATIONS.md "Snapshots"):
 * which threads the snapshot worker (snapshot_worker.c) computes a document
 * for, and storing the documents it hands back with the writer's handle.
 *
 * Invariants:
 *  1. After a group commit, every thread with a run that ended in it, and
 *     every thread whose committed events since its last snapshot request
 *     reached --snapshot-every N (0 = off) AND whose committed bytes since
 *     then reached the size of its last document, is handed to the worker,
 *     after the group's answers. The worker computes the document off the
 *     writer thread from committed events only; the writer stores it between
 *     groups, a bounded piece at a time (snapstore.c). A failed group is
 *     counted nowhere.
 *  2. The counts live in a bounded map of at most AB__SNAPCOUNT_THREADS
 *     (4096) threads (snapcount.h): when it is full a new thread evicts the
 *     one nearest its home slot, whose count and document size restart at 0
 *     (its next snapshot comes up to N events later; the SNAPSHOT answer
 *     stays current).
 *  3. A thread whose last document could not be stored (too large for a
 *     reply, or over --snapshot-memory to build) gets no every-N request
 *     until one of its runs ends: each attempt would fold it all again for
 *     nothing.
 *  4. A clean stop asks for the document of every counted thread with at
 *     least AB_SNAP_FLUSH_EVENTS committed events since its last request
 *     (with every-N on or off; invariant 3 applies), before the worker
 *     drains (snapshot_worker.c invariant 4): after a restart, a SNAPSHOT of
 *     such a thread starts from a document at the head instead of folding
 *     up to the bytes of a document again. Threads with fewer are cheap to
 *     fold and get none, so a stop does not fold every quiet thread.
 *  5. When this broker is the store's only writer (no wake_fd), each
 *     counted thread's committed events since its last request are copied
 *     into its feed (snapfeed.h) as they commit, and the request hands the
 *     feed to the worker, which folds them instead of reading them back.
 *     A feed's cover is the thread's last position seen before it (every
 *     commit passes here, in position order), or the position before its
 *     first event for a thread just counted. Feeds are bounded together
 *     (AB__SNAPFEED_BYTES): an event that does not fit ends its thread's
 *     feed, and the thread gets no feed until its next request (copies
 *     the worker would not get are not made); the worker reads what no
 *     feed holds from the store.
 */
#include "ab_common.h"
#include "writer_int.h"

#include <stdlib.h>
#include <string.h>

void ab__snapsched_start(ab__snapsched_t *s, ab__shared_t *b)
{
    memset(s, 0, sizeof(*s));
    s->b = b;
    if (b->plugin->snapshot_put != NULL && b->plugin->snapshot_get != NULL) {
        s->worker = ab__snapworker_start(b);
        s->feeds = s->worker != NULL && b->plugin->wake_fd == NULL; /* invariant 5 */
        atomic_store(&b->snap_failed, s->worker == NULL);           /* HELLO then says degraded */
    }
}

/* Remember @p thread (deduplicated) for the next request; drops it when out of memory. */
static void note_due(ab__snapsched_t *s, ab_str_t thread, bool run_end)
{
    if (thread.len > AB_ID_MAX_BYTES)
        return;
    for (size_t i = 0; i < s->ndue; i++)
        if (strlen(s->due[i]) == thread.len && memcmp(s->due[i], thread.ptr, thread.len) == 0) {
            s->run_end[i] = s->run_end[i] || run_end;
            return;
        }
    if (s->ndue == s->due_cap) { /* two arrays of one capacity */
        size_t cap = s->due_cap, cap_r = s->due_cap;
        char(*v)[AB_ID_MAX_BYTES + 1] = ab__grow(s->due, &cap, s->ndue + 1, sizeof(*v), 8);
        if (v == NULL)
            return;
        s->due = v;
        bool *r = ab__grow(s->run_end, &cap_r, s->ndue + 1, sizeof(*r), 8);
        if (r == NULL)
            return;
        s->run_end = r;
        s->due_cap = cap;
    }
    memcpy(s->due[s->ndue], thread.ptr, thread.len);
    s->due[s->ndue][thread.len] = '\0';
    s->run_end[s->ndue] = run_end;
    s->ndue++;
}

/* Copy a committed event into its thread's feed (invariant 5). */
static void feed_event(ab__snapsched_t *s, ab__snapcount_t *c, const ab_append_event_t *ev,
                       uint64_t pos)
{
    uint64_t cover = c->last_pos > 0 ? c->last_pos : pos - 1;
    c->last_pos = pos;
    if (s->feeds && !c->feed_off &&
        !ab__snapfeed_add(&c->feed, &s->b->snapfeed_bytes, cover, pos, ev->run, ev->seq, ev->bytes,
                          ev->len))
        c->feed_off = true; /* no copies the worker would not get: none until the request */
}

/*
 * Count the committed events of a group; note the threads due an every-N
 * snapshot: since their last request, at least snapshot_every events AND at
 * least as many envelope bytes as their last document had. A document is
 * then at most about twice the bytes committed since the previous one, so
 * the documents written cost O(bytes committed), not O(events^2) on a long
 * active run whose document carries all its events.
 */
static void count_committed(ab__snapsched_t *s, const ab_append_event_t *evs, size_t n,
                            uint64_t first)
{
    uint32_t every = s->b->cfg->snapshot_every;
    ab__snapcount_t *last = NULL;
    ab_str_t last_thread = {NULL, 0};
    for (size_t i = 0; i < n; i++) {
        ab_str_t t = evs[i].thread;
        /* events of a group mostly share a thread: skip the lookup then */
        if (last == NULL || t.len != last_thread.len ||
            memcmp(t.ptr, last_thread.ptr, t.len) != 0) {
            last = ab__snapcount_slot(&s->counts, t);
            last_thread = t;
            if (last == NULL)
                continue;
        }
        feed_event(s, last, &evs[i], first + i);
        last->count++;
        last->bytes += evs[i].len;
        if (every > 0 && last->count >= every && last->bytes >= last->last_doc && !last->too_large)
            note_due(s, t, false);
    }
}

void ab__snapsched_committed(ab__snapsched_t *s, const ab_append_event_t *evs, size_t n,
                             uint64_t first)
{
    if (s->worker == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        if (evs[i].status != AB_RUN_STATUS_FINISHED && evs[i].status != AB_RUN_STATUS_ERRORED)
            continue;
        note_due(s, evs[i].thread, true);
        ab__snapcount_t *c = ab__snapcount_find(&s->counts, evs[i].thread);
        if (c != NULL)
            c->too_large = false; /* its document may fit again */
    }
    count_committed(s, evs, n, first); /* also with every-N off: the stop's flush reads them */
}

/* The feed a request of @p c's thread hands over; the thread is fed again from here on. */
static ab__snapfeed_t *take_feed(ab__snapcount_t *c)
{
    ab__snapfeed_t *feed = c->feed;
    c->feed = NULL;
    c->feed_off = false;
    return feed;
}

bool ab__snapsched_request(ab__snapsched_t *s)
{
    bool any = s->ndue > 0;
    for (size_t i = 0; i < s->ndue; i++) {
        ab_str_t t = {s->due[i], strlen(s->due[i])};
        ab__snapcount_t *c = ab__snapcount_find(&s->counts, t);
        ab__snapfeed_t *feed = NULL;
        if (c != NULL) {
            c->count = 0, c->bytes = 0;
            feed = take_feed(c);
        }
        ab__snapworker_request(s->worker, t, s->run_end[i], feed);
    }
    s->ndue = 0;
    return any;
}

/* Queue one document computed by the worker (ab_snapworker_cb) for storing; learn its size. */
static void queue_doc(void *ud, ab_str_t thread, uint64_t pos, ab_buf_t *doc, size_t size,
                      bool too_large)
{
    ab__snapsched_t *s = ud;
    ab__snapcount_t *c = ab__snapcount_slot(&s->counts, thread);
    if (c != NULL) {
        c->last_doc = size;
        c->too_large = too_large || doc->len == 0;
    }
    if (doc->len > 0) /* else too large to answer or to build: not stored (snapshot_worker.c) */
        ab__snapstore_add(s, thread, pos, doc);
}

void ab__snapsched_collect(ab__snapsched_t *s)
{
    if (s->pend_bytes < AB_SNAP_PENDING_BYTES) /* snapstore.c invariant 2 */
        ab__snapworker_collect(s->worker, AB_SNAP_PENDING_BYTES - s->pend_bytes, queue_doc, s);
}

bool ab__snapsched_busy(ab__snapsched_t *s)
{
    return ab__snapworker_busy(s->worker);
}

/*
 * At a clean stop: ask for the document of every thread with at least AB_SNAP_FLUSH_EVENTS
 * committed events since its last request (invariant 4), so that its first SNAPSHOT after
 * the restart folds none of them. The worker computes them within its drain time.
 */
static void request_flush(ab__snapsched_t *s)
{
    for (size_t i = 0; s->counts.slot != NULL && i < AB__SNAPCOUNT_SLOTS; i++) {
        ab__snapcount_t *c = &s->counts.slot[i];
        if (c->len > 0 && c->count >= AB_SNAP_FLUSH_EVENTS && !c->too_large)
            ab__snapworker_request(s->worker, (ab_str_t){c->id, c->len}, false, take_feed(c));
    }
}

void ab__snapsched_stop(ab__snapsched_t *s)
{
    if (s->worker != NULL)
        request_flush(s);
    ab__snapworker_stop(&s->worker, queue_doc, s);
    ab__snapstore_drain(s);
    free(s->due);
    free(s->run_end);
    ab__snapcount_free(&s->counts);
    memset(s, 0, sizeof(*s));
}

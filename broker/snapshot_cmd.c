/*
 * snapshot_cmd.c - the `snapshot` request on a replay reader: the current
 * snapshot document of a thread (docs/REDUCER.md section 7, docs/PROTOCOL.md
 * 7.8), and ab__snapshot_current(), shared with the snapshot worker.
 *
 * ab__snapshot_current() takes the thread's builder from the broker's
 * cache (snapcache.c) when there is one; otherwise it starts from the latest
 * stored snapshot when the plugin has snapshot_get (ab_snapshot_load(), the
 * binary form or older brokers' JSON text, then ab_snapshot_builder_take()),
 * or from nothing. It then folds the thread's
 * events after the builder's position (plugin read, scope thread,
 * after_pos, pages of PAGE_ROWS). A stored snapshot that does not parse, or
 * names another thread, or whose checkpoint is not its row's position or lies
 * beyond the head, is logged and ignored (full fold).
 *
 * Invariants:
 *  1. The document covers a prefix of the commit order: every event up to
 *     its checkpoint.position that belongs to the thread, and no other. A
 *     builder is fed only committed events: read back from the store, or
 *     handed on by the writer after their commit (invariant 6), so neither
 *     a cached builder nor a stored snapshot claims more than is committed.
 *  2. Memory: the builder's state (projection plus the events of active
 *     runs, msgpack), one page of decoded rows at a time (one arena, reset
 *     per row) and the encoded document; never the whole thread's events.
 *     Cached builders are bounded by snapcache.c. With a memory_max (the
 *     snapshot worker's every-N requests: --snapshot-memory), a builder
 *     that grows past it (ab_snapshot_builder_memory: mostly the events of
 *     active runs) is dropped at once with too_large, so a thread whose
 *     runs never end cannot keep the worker folding it, nor hold its memory.
 *     SNAPSHOT requests and run-end snapshots have no such cap (a long run
 *     passes through that size on its way to its end).
 *  3. Every request gets exactly one answer: snapshot_reply, or error
 *     not_found (no stored event of the thread), too_large (the document
 *     does not fit a reply frame of AB_MAX_REPLY_BYTES or max_depth), the
 *     store's error, corrupt (a stored event that does not decode or fold),
 *     or no_memory. A builder that failed is freed, never cached.
 *  4. The request runs to completion on the reader's thread: replays
 *     served by the same reader wait meanwhile (cost: the events after the
 *     cached or stored position, plus encoding the document unless the
 *     cached encoding is at the same position).
 *  5. A thread not cached whose stored document is at the head (so nothing
 *     is left to fold: the answer would be that document) is answered with
 *     the stored bytes as soon as they are loaded and checked, before the
 *     builder is made from them; the builder is then made and cached as for
 *     any answer. A failure after that answer is logged, never answered
 *     twice (invariant 3).
 *  6. The snapshot worker passes the feeds the writer handed it with the
 *     request (snapfeed.h), segments in position order. A builder at L
 *     folds a segment's events after L only when L >= its cover; else it
 *     first folds the store's events up to the cover (a read that stops
 *     there). Whatever the feeds leave, the store's events after the
 *     builder's position are folded as without a feed, so a feed only
 *     replaces reads, never changes what is folded.
 */
#include "agentbus/json.h"
#include "agentbus/snapshot.h"
#include "snap_internal.h"

#include <stdlib.h>
#include <string.h>

#define PAGE_ROWS 1024u

typedef struct fold {
    ab_snapshot_builder_t *sb;
    ab_doc_t *doc;
    ab_limits_t dec; /**< decoding committed events: ab__limits_stored() */
    uint64_t last_pos;
    uint64_t events;
    uint64_t max_events; /**< 0 = no limit */
    uint64_t stop_pos;   /**< 0, or the store's rows after it are left (invariant 6) */
    bool stopped;        /**< a read met a row after stop_pos */
    size_t bytes;
    size_t memory_max; /**< 0, or the builder's cap in bytes */
    ab_buf_t stored;   /**< the stored document's bytes when a reply may carry them as they are */
    ab_status_t st;
    ab_error_t *err;
} fold_t;

/* Fold one committed event of the thread (a stored row or a feed's record). */
static int fold_one(fold_t *f, ab_str_t run_id, uint64_t seq, uint64_t pos, const uint8_t *bytes,
                    size_t len)
{
    ab_event_t ev;
    char run[AB_ID_MAX_BYTES + 1];
    f->last_pos = pos;
    if (run_id.len > AB_ID_MAX_BYTES) {
        f->st = ab_error_set(f->err, AB_CORRUPT, "", "stored run id at position %llu too long",
                             (unsigned long long)pos);
        return 1;
    }
    memcpy(run, run_id.ptr, run_id.len);
    run[run_id.len] = '\0';
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t st = ab_event_decode(f->doc, bytes, len, &f->dec, &ev, &e);
    if (st == AB_OK)
        st = ab_snapshot_builder_feed(f->sb, run, seq, pos, ev.body, &e);
    if (st != AB_OK) {
        f->st = st == AB_NOMEM ? AB_NOMEM
                               : ab_error_set(f->err, AB_CORRUPT, "",
                                              "stored event at position %llu (run %s seq %llu) "
                                              "cannot be folded: %s",
                                              (unsigned long long)pos, run, (unsigned long long)seq,
                                              e.message);
        return 1;
    }
    f->events++;
    f->bytes += len;
    if (f->memory_max > 0 && ab_snapshot_builder_memory(f->sb) > f->memory_max) {
        f->st = ab_error_set(f->err, AB_TOO_LARGE, "thread",
                             "the thread's snapshot builder passed %zu MiB at position %llu "
                             "(events of runs still active); every-N snapshots of it stop "
                             "until one of its runs ends",
                             f->memory_max >> 20, (unsigned long long)pos);
        return 1;
    }
    return 0;
}

static int fold_row(void *ud, const ab_row_t *row)
{
    fold_t *f = ud;
    if (f->stop_pos > 0 && row->pos > f->stop_pos) {
        f->stopped = true; /* left for the feed (invariant 6) */
        return 1;
    }
    return fold_one(f, row->run, row->seq, row->pos, row->bytes, row->len);
}

/* Fold every stored event of the thread. */
static ab_status_t fold_thread(ab__shared_t *b, ab_plugin_db_t *db, ab_str_t thread, fold_t *f)
{
    const ab_plugin_t *p = b->plugin;
    while (f->max_events == 0 || f->events < f->max_events) {
        ab_read_t req = {.scope = AB_REPLAY_THREAD, .thread = thread};
        req.after_pos = f->last_pos;
        req.limit = PAGE_ROWS;
        if (f->max_events > 0 && f->max_events - f->events < PAGE_ROWS)
            req.limit = (uint32_t)(f->max_events - f->events);
        uint32_t got = 0;
        ab_status_t st = p->read(db, &req, fold_row, f, &got, f->err);
        if (f->st != AB_OK)
            return f->st;
        if (st != AB_OK)
            return st;
        if (f->stopped)
            return AB_OK;
        if (got < req.limit)
            return AB_OK;
    }
    return AB_OK;
}

static bool budget_left(const fold_t *f)
{
    return f->max_events == 0 || f->events < f->max_events;
}

/*
 * Fold the events of the feed segment @p r->seg after the builder's position, reading the
 * store first up to its cover when the builder is below it (invariant 6). @return AB_OK
 * also when the budget ran out in the segment (r stays on it).
 */
static ab_status_t fold_segment(ab__shared_t *b, ab_plugin_db_t *db, ab_str_t thread, fold_t *f,
                                ab__feedread_t *r)
{
    const ab__snapfeed_t *seg = r->seg;
    if (f->last_pos < r->passed) /* the builder went back (evicted, reloaded): from the start */
        r->cur = (ab__feedcur_t){0}, r->passed = 0;
    if (f->last_pos < seg->cover && r->passed == 0) {
        f->stop_pos = seg->cover;
        ab_status_t st = fold_thread(b, db, thread, f);
        bool done = st == AB_OK && (f->stopped || budget_left(f));
        f->stop_pos = 0;
        f->stopped = false;
        if (st != AB_OK || !done)
            return st; /* the budget ran out before the cover: read on from there next time */
    }
    ab__snaprec_t rec;
    while (budget_left(f) && ab__snapfeed_next(seg, &r->cur, &rec)) {
        r->passed = rec.pos;
        if (rec.pos <= f->last_pos)
            continue;
        if (fold_one(f, rec.run, rec.seq, rec.pos, rec.bytes, rec.len))
            return f->st;
        r->events++;
    }
    return AB_OK;
}

/* Fold the feeds of @p r (when any), then the store's events after them (invariant 6). */
static ab_status_t fold_fed(ab__shared_t *b, ab_plugin_db_t *db, ab_str_t thread, fold_t *f,
                            ab__feedread_t *r)
{
    while (r != NULL && r->seg != NULL && budget_left(f)) {
        if (f->last_pos < r->seg->last) {
            ab_status_t st = fold_segment(b, db, thread, f, r);
            if (st != AB_OK || !budget_left(f))
                return st;
        } /* else the builder is past the segment */
        r->seg = r->seg->next;
        r->cur = (ab__feedcur_t){0};
        r->passed = 0;
    }
    return budget_left(f) ? fold_thread(b, db, thread, f) : AB_OK;
}

/* The nesting limit of the document inside a snapshot_reply (its map is depth 2 of the reply). */
static uint32_t reply_depth(const ab_limits_t *lim)
{
    return lim->max_depth > 1 ? lim->max_depth - 1 : 1;
}

/*
 * Whether the stored bytes (@p len) of @p s can be a reply's document as they are: the
 * binary form (validated by ab_snapshot_load), within the reply's depth and size. Then a
 * SNAPSHOT that folds nothing after a restart sends them without encoding the state again.
 */
static bool reply_ready(const ab__shared_t *b, const ab_snapshot_t *s, size_t len)
{
    uint32_t depth = ab_snapshot_binary_depth(s);
    return depth > 0 && depth <= reply_depth(&b->cfg->limits) && len <= AB_MAX_REPLY_BYTES - 4096;
}

/* The stored snapshot of @p thread, loaded and checked against its row and the head. */
static ab_status_t load_stored(ab__shared_t *b, ab_plugin_db_t *db, ab_str_t thread,
                               ab_buf_t *bytes, ab_snapshot_t **snap, ab_error_t *e)
{
    uint64_t pos = 0;
    ab_status_t st = b->plugin->snapshot_get(db, thread, bytes, &pos, e);
    if (st == AB_OK)
        st = ab_snapshot_load(bytes->data, bytes->len, snap, e);
    if (st != AB_OK)
        return st;
    const char *tid = ab_snapshot_thread_id(*snap);
    uint64_t at = ab_snapshot_position(*snap), head = atomic_load(&b->head_pos);
    if (tid == NULL || strlen(tid) != thread.len || memcmp(tid, thread.ptr, thread.len))
        return ab_error_set(e, AB_CORRUPT, "threadId", "stored snapshot of another thread");
    if (at != pos || at > head)
        return ab_error_set(
            e, AB_CORRUPT, "checkpoint", "stored snapshot at position %llu (row %llu, head %llu)",
            (unsigned long long)at, (unsigned long long)pos, (unsigned long long)head);
    return AB_OK;
}

/* Start @p f->sb from the loaded stored snapshot @p *snap (taken; its @p bytes kept in
 * f->stored when a reply may carry them as they are). */
static ab_status_t take_stored(ab__shared_t *b, ab_snapshot_t **snap, ab_buf_t *bytes, fold_t *f,
                               ab_error_t *e)
{
    uint64_t at_pos = ab_snapshot_position(*snap);
    bool keep = reply_ready(b, *snap, bytes->len);
    /* the snapshot's trees move into the builder: no copy */
    ab_status_t st = ab_snapshot_builder_take(&f->sb, snap, e);
    if (st == AB_OK && keep) {
        f->stored = *bytes;
        *bytes = (ab_buf_t)AB_BUF_INIT;
    }
    if (st == AB_OK)
        f->last_pos = at_pos;
    return st;
}

/* Start @p f->sb from the stored snapshot of @p thread, if any (else a fresh builder). */
static ab_status_t start_builder(ab__shared_t *b, ab_plugin_db_t *db, ab_str_t thread, fold_t *f,
                                 bool *from_stored)
{
    *from_stored = false;
    if (b->plugin->snapshot_get != NULL) {
        ab_buf_t bytes = AB_BUF_INIT;
        ab_error_t e = AB_ERROR_INIT;
        ab_snapshot_t *snap = NULL;
        ab_status_t st = load_stored(b, db, thread, &bytes, &snap, &e);
        if (st == AB_OK)
            st = take_stored(b, &snap, &bytes, f, &e);
        ab_snapshot_destroy(&snap);
        ab_buf_free(&bytes);
        if (st == AB_OK) {
            *from_stored = true;
            return AB_OK;
        }
        if (st == AB_NOMEM)
            return ab_error_set(f->err, AB_NOMEM, "", "out of memory restoring a snapshot");
        if (st != AB_NOT_FOUND) {
            char line[512];
            ab__log(AB_LOG_WARN, "stored snapshot of %.*s ignored (full fold): %s", (int)thread.len,
                    thread.ptr, ab_error_format(&e, line, sizeof(line)));
        }
    }
    return ab_snapshot_builder_new(&f->sb, thread.ptr, f->err);
}

/* A cache entry for @p thread around f->sb (and f->stored as its reply at f->last_pos). */
static ab_status_t entry_wrap(ab_str_t thread, fold_t *f, ab_snapent_t **out)
{
    ab_snapent_t *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        ab_snapshot_builder_destroy(&f->sb);
        ab_buf_free(&f->stored);
        return ab_error_set(f->err, AB_NOMEM, "", "out of memory");
    }
    memcpy(e->thread, thread.ptr, thread.len);
    e->tlen = thread.len;
    e->sb = f->sb;
    if (f->stored.len > 0) { /* the reply at the stored position is these bytes */
        e->reply = f->stored;
        e->reply_pos = f->last_pos;
        e->unmeasured = f->stored.len; /* the projection is not measured until encoded */
        f->stored = (ab_buf_t)AB_BUF_INIT;
    }
    *out = e;
    return AB_OK;
}

/* A fresh entry for @p thread, its builder started from the stored snapshot or empty. */
static ab_status_t entry_new(ab__shared_t *b, ab_plugin_db_t *db, ab_str_t thread, fold_t *f,
                             ab_snapent_t **out, bool *from_stored)
{
    if (thread.len > AB_ID_MAX_BYTES)
        return ab_error_set(f->err, AB_INVALID_ARGUMENT, "thread", "thread id too long");
    ab_status_t st = start_builder(b, db, thread, f, from_stored);
    return st == AB_OK ? entry_wrap(thread, f, out) : st;
}

ab_status_t ab__snapshot_current(ab__shared_t *b, ab_plugin_db_t *db, ab_str_t thread,
                                 uint64_t max_events, size_t memory_max, ab__feedread_t *feed,
                                 ab_snapent_t **out, uint64_t *folded, ab_error_t *err)
{
    fold_t f = {
        .dec = ab__limits_stored(), .err = err, .max_events = max_events, .memory_max = memory_max};
    bool known = false;
    ab_snapent_t *e = *out != NULL ? *out : ab__snapcache_take(b->snaps, thread);
    ab_status_t st = AB_OK;
    *out = NULL;
    if (e != NULL) {
        f.sb = e->sb;
        f.last_pos = ab_snapshot_builder_position(e->sb);
        known = true;
    } else {
        st = entry_new(b, db, thread, &f, &e, &known);
    }
    if (st == AB_OK)
        st = ab_doc_new(&f.doc);
    if (st == AB_OK)
        st = fold_fed(b, db, thread, &f, feed);
    ab_doc_destroy(&f.doc);
    if (st == AB_OK && f.events == 0 && !known)
        st = ab_error_set(err, AB_NOT_FOUND, "thread", "thread '%.*s' has no stored events",
                          (int)thread.len, thread.ptr);
    if (folded != NULL)
        *folded = f.events;
    if (st != AB_OK) {
        ab__snapcache_discard(b->snaps, e); /* a builder that failed half-way is never reused */
        return st;
    }
    e->unmeasured += f.bytes;
    *out = e;
    return AB_OK;
}

/* The entry's document as msgpack at its builder's position (re-encoded only when it moved). */
static ab_status_t entry_encode(ab_snapent_t *e, const ab_limits_t *lim, ab_error_t *err)
{
    uint64_t pos = ab_snapshot_builder_position(e->sb);
    if (e->reply.len > 0 && e->reply_pos == pos)
        return AB_OK;
    ab_buf_reset(&e->reply);
    ab_status_t st = ab_snapshot_builder_msgpack(e->sb, reply_depth(lim), AB_MAX_REPLY_BYTES - 4096,
                                                 &e->reply, err);
    if (st != AB_OK) {
        ab_buf_free(&e->reply);
        return st;
    }
    e->reply_pos = pos;
    e->unmeasured = 0;
    return AB_OK;
}

/* Send the snapshot_reply of @p job carrying document @p mp (@p len bytes). */
static int send_reply(void *sock, ab_job_t *job, const uint8_t *mp, size_t len)
{
    ab_msg_t m = {.op = AB_OP_SNAPSHOT_REPLY, .v = job->v, .cid = job->cid};
    m.u.snapshot_reply.thread = job->thread;
    m.u.snapshot_reply.snapshot_mp = mp;
    m.u.snapshot_reply.snapshot_mp_len = len;
    return ab__reply_msg(sock, &job->identity, &m);
}

/*
 * A thread not cached: its entry made from the stored snapshot (@p *out; NULL when there is
 * none or it does not load: then ab__snapshot_current() starts it as usual). When that
 * document is at the head and a reply may carry its stored bytes as they are, they are sent
 * before the builder is made from it (the reply does not need it; invariant 5).
 * @return whether the request was answered.
 */
static bool answer_stored(ab__shared_t *b, ab_plugin_db_t *db, void *sock, ab_job_t *job,
                          ab_snapent_t **out)
{
    ab_buf_t bytes = AB_BUF_INIT;
    ab_error_t e = AB_ERROR_INIT;
    ab_snapshot_t *snap = NULL;
    fold_t f = {.dec = ab__limits_stored(), .err = &e};
    bool answered = false;
    *out = NULL;
    if (b->plugin->snapshot_get == NULL || job->thread.len > AB_ID_MAX_BYTES ||
        load_stored(b, db, job->thread, &bytes, &snap, &e) != AB_OK)
        goto done;
    if (ab_snapshot_position(snap) == atomic_load(&b->head_pos) && reply_ready(b, snap, bytes.len))
        answered = send_reply(sock, job, bytes.data, bytes.len) == 0;
    if (take_stored(b, &snap, &bytes, &f, &e) == AB_OK)
        (void)entry_wrap(job->thread, &f, out);
done:
    ab_snapshot_destroy(&snap);
    ab_buf_free(&bytes);
    return answered;
}

void ab__reader_snapshot(ab__shared_t *b, ab_plugin_db_t *db, void *sock, ab_job_t *job)
{
    ab_error_t e = AB_ERROR_INIT;
    ab_snapent_t *ent = ab__snapcache_take(b->snaps, job->thread);
    uint64_t folded = 0;
    bool answered = ent == NULL && answer_stored(b, db, sock, job, &ent);
    ab_status_t st = ab__snapshot_current(b, db, job->thread, 0, 0, NULL, &ent, &folded, &e);
    if (answered) { /* the builder is made for the next request; no second answer */
        if (st == AB_OK)
            ab__snapcache_put(b->snaps, ent);
        else
            ab__log(AB_LOG_WARN, "snapshot of %s answered from its stored document, but: %s",
                    job->thread.ptr, e.message);
        return;
    }
    if (st == AB_OK)
        st = entry_encode(ent, &b->cfg->limits, &e);
    if (st == AB_OK) {
        if (send_reply(sock, job, ent->reply.data, ent->reply.len) != 0)
            st = ab_error_set(&e, AB_TOO_LARGE, "thread",
                              "the thread's snapshot does not fit a reply");
        else
            ab__log(AB_LOG_DEBUG, "snapshot of %s: %llu events folded", job->thread.ptr,
                    (unsigned long long)folded);
    }
    if (st == AB_OK || st == AB_TOO_LARGE)
        ab__snapcache_put(b->snaps,
                          ent); /* the builder is sound even when its document is too large */
    else
        ab__snapcache_discard(b->snaps, ent);
    if (st != AB_OK) {
        ab_error_set(&e, st, "", "cannot compute the snapshot"); /* no-op when e is set */
        ab__reply_error(sock, &job->identity, job->v, job->cid, &e);
    }
}

/*
 * store_read.c - reads of the event store: a run after a seq, a thread or
 * everything after a position, and one event's exact bytes.
 *
 * Invariants:
 *  1. Rows are delivered in ascending position order. A run's chunks come
 *     in seq order (its chain, store_walk.c) and their records are already
 *     in position order. Thread and all reads take chunks in rowid order
 *     (the thread's chain; the table) starting at the first chunk of the
 *     commit holding after_pos + 1 (a chunk's rowid is its first position,
 *     so a commit's chunks are adjacent): the chunks of one commit are
 *     gathered into a group, sorted by position and delivered before the
 *     next commit's.
 *  2. A chunk's data must be exactly the n records its row counts, the
 *     first at the chunk's rowid with its first_seq, the last at its
 *     last_pos with its last_seq: a record that runs past the end of the
 *     data, data that ends before its n-th record or goes on after it (a
 *     row cut at a record's end would otherwise lose events silently), or
 *     an end record that disagrees with the row is AB_CORRUPT naming the
 *     chunk and the record; never an out-of-bounds read.
 *     A chunk whose run's row is gone is AB_CORRUPT in every scope (an all
 *     read's join would skip it).
 *  3. A read is one read transaction (its own, unless the handle has one
 *     open), so a walk's statements see one committed state; every
 *     statement is reset before returning, so no read transaction stays
 *     open and borrowed row pointers never outlive the callback.
 *  4. A thread read delivers only chunks whose run is of that thread: a
 *     chunk whose thread and run's thread differ is AB_CORRUPT.
 *  5. Whatever the stored data, a read delivers rows strictly above its
 *     cursor and rising (a run's by seq, the others by position): a row at
 *     or below the last ends the read with AB_CORRUPT. Records at or below
 *     the cursor are left out (not refused) only until the first row is
 *     delivered: they belong in the chunk or commit the cursor falls in.
 *  6. A run or thread read that stops at its limit in a segment below an
 *     anchor keeps its walk, at the chunk (a run) or the commit's first
 *     chunk (a thread) it stopped in, with its last row as the cursor; a
 *     read of the same chain from exactly that cursor goes on with it
 *     instead of walking the segment down again (a paged replay would walk
 *     up to AB_STORE_ANCHOR_EVERY links per page). Sound because a
 *     committed chunk is never changed or deleted and a segment below an
 *     anchor never grows; so only a read in its own transaction (whose
 *     chunks are all committed) keeps its walk, and never one in the
 *     chain's last segment, which later commits extend. Records at or
 *     below the cursor in the chunk gone on from are skipped as on a fresh
 *     walk.
 *  7. A thread's segment that the walk found by a scan of its range
 *     (store_walk.c invariant 6) has its records read by one more scan of
 *     the same range (Q_THREAD_SEG_DATA) instead of a lookup per chunk:
 *     each row must be the walk's next chunk, else that chunk is looked up
 *     alone, as any other is.
 */
#include "ab_common.h"
#include "store_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One decoded record of a chunk. */
typedef struct rec {
    uint64_t pos;
    uint64_t seq;
    int64_t commit_us;
    const uint8_t *bytes;
    size_t len;
} rec_t;

/* What is wrong with a chunk's row, for the message of the read it ends (why[0] == 0:
 * nothing). */
typedef struct damage {
    sqlite3_int64 chunk;
    char why[192];
} damage_t;

/* The records of one chunk's row, decoded one at a time (invariant 2). */
typedef struct chunk_it {
    sqlite3_int64 chunk;
    uint64_t bf;
    const uint8_t *data;
    size_t size, off;
    int64_t n, k; /* the records its row says data holds; those decoded so far */
    uint64_t first_seq, last_seq, last_pos; /* its first record's and its last's, as its row says */
} chunk_it_t;

/* Start decoding the chunk of the row @p q is on (its columns: AB__CK_*). */
static void chunk_open(chunk_it_t *it, sqlite3_stmt *q)
{
    const uint8_t *data = sqlite3_column_blob(q, AB__CK_DATA);
    *it = (chunk_it_t){.chunk = sqlite3_column_int64(q, AB__CK_ROWID),
                       .bf = (uint64_t)sqlite3_column_int64(q, AB__CK_BATCH_FIRST),
                       .data = data,
                       .size = data ? (size_t)sqlite3_column_bytes(q, AB__CK_DATA) : 0,
                       .n = sqlite3_column_int64(q, AB__CK_N),
                       .first_seq = (uint64_t)sqlite3_column_int64(q, AB__CK_FIRST_SEQ),
                       .last_seq = (uint64_t)sqlite3_column_int64(q, AB__CK_LAST_SEQ),
                       .last_pos = (uint64_t)sqlite3_column_int64(q, AB__CK_LAST_POS)};
}

/* Record in @p bad that chunk @p c is damaged, as @p fmt says; false. */
static bool chunk_bad(damage_t *bad, sqlite3_int64 c, const char *fmt, ...) AB_PRINTF(3, 4);
static bool chunk_bad(damage_t *bad, sqlite3_int64 c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bad->chunk = c;
    vsnprintf(bad->why, sizeof bad->why, fmt, ap);
    va_end(ap);
    return false;
}

/* Whether record @p r, just decoded, agrees with the row's summary of its chunk: the first
 * record is at the chunk's rowid (its first position) with its first_seq, the last at its
 * last_pos with its last_seq (a walk keys on last_seq: a record that disagrees would be skipped
 * or delivered in another chunk's place). Else false, @p bad saying how. */
static bool ends_agree(const chunk_it_t *it, const rec_t *r, damage_t *bad)
{
    const char *which = NULL;
    uint64_t pos = 0, seq = 0;
    if (it->k == 1 && (r->pos != (uint64_t)it->chunk || r->seq != it->first_seq)) {
        which = "first";
        pos = (uint64_t)it->chunk;
        seq = it->first_seq;
    } else if (it->k == it->n && (r->pos != it->last_pos || r->seq != it->last_seq)) {
        which = "last";
        pos = it->last_pos;
        seq = it->last_seq;
    }
    if (which == NULL)
        return true;
    return chunk_bad(bad, it->chunk,
                     "record %lld (position %llu, seq %llu) is not its row's %s (position %llu, "
                     "seq %llu)",
                     (long long)it->k, (unsigned long long)r->pos, (unsigned long long)r->seq,
                     which, (unsigned long long)pos, (unsigned long long)seq);
}

/* Decode the chunk's next record into *r; false at its end, or when the chunk is damaged
 * (then @p bad says how): a record that runs past the data's end, more records than the
 * row's n, or fewer (data cut at a record's end). */
static bool chunk_next(chunk_it_t *it, rec_t *r, damage_t *bad)
{
    size_t left = it->size - it->off;
    if (left == 0 && it->k == it->n)
        return false;
    if (left == 0 || it->k >= it->n)
        return chunk_bad(bad, it->chunk,
                         "holds %s records than the %lld its row counts (%zu bytes)",
                         left ? "more" : "fewer", (long long)it->n, it->size);
    if (left < CHUNK_HDR)
        return chunk_bad(bad, it->chunk,
                         "record %lld at byte %zu: its %d-byte header runs past the end of the "
                         "chunk's %zu bytes",
                         (long long)it->k + 1, it->off, CHUNK_HDR, it->size);
    const uint8_t *p = it->data + it->off;
    r->len = ab__store_get_u32(p + 4);
    if (left - CHUNK_HDR < r->len)
        return chunk_bad(bad, it->chunk,
                         "record %lld at byte %zu: its %zu bytes run past the end of the "
                         "chunk's %zu bytes",
                         (long long)it->k + 1, it->off, r->len, it->size);
    r->pos = it->bf + ab__store_get_u32(p);
    r->seq = ab__store_get_u64(p + 8);
    r->commit_us = (int64_t)ab__store_get_u64(p + 16);
    r->bytes = p + CHUNK_HDR;
    it->off += CHUNK_HDR + r->len;
    it->k++;
    return ends_agree(it, r, bad);
}

static ab_status_t damaged(ab_store_t *st, const damage_t *bad, ab_error_t *err)
{
    ab_error_set(err, AB_CORRUPT, "store", "database %s is damaged: chunk %lld %s", st->path,
                 (long long)bad->chunk, bad->why);
    ab_error_detail_int(err, "chunk", bad->chunk);
    return AB_CORRUPT;
}

/* Read state shared by the scopes. */
typedef struct reader {
    ab_store_t *st;
    ab_row_cb cb;
    void *ud;
    uint32_t limit;
    uint32_t n;
    bool stop;
    bool by_seq;   /* a run's read: rows rise by seq (else by position) */
    bool disorder; /* a row at or below the last one: the read ends, AB_CORRUPT */
    uint64_t last; /* the last row's seq or position (at first, the cursor) */
    bool keep;     /* the read's own transaction: it may keep its walk (invariant 6) */
} reader_t;

/* Start walking @p owner's chain above @p lower for a read from cursor @p after: the walk a
 * read kept there, or a fresh one (invariant 6). */
static void walk_take(ab_store_t *st, ab__walk_t *w, bool thread, sqlite3_int64 owner,
                      sqlite3_int64 lower, uint64_t after)
{
    if (st->resume_ok && st->resume->thread == thread && st->resume->owner == owner &&
        st->resume_after == after)
        *w = *st->resume;
    else
        ab__walk_init(w, st, thread, owner, lower);
    st->resume_ok = false;
}

/* Keep @p w to go on at seg[@p at] from cursor rd->last, when invariant 6 allows. */
static void walk_keep(ab_store_t *st, const ab__walk_t *w, size_t at, const reader_t *rd)
{
    if (!rd->keep || !rd->stop || rd->disorder || w->done || at >= w->n)
        return;
    if (st->resume == NULL && (st->resume = malloc(sizeof *st->resume)) == NULL)
        return; /* nothing kept: the next read walks afresh */
    *st->resume = *w;
    st->resume->i = at;
    st->resume_after = rd->last;
    st->resume_ok = true;
}

static ab_str_t col_str(sqlite3_stmt *q, int col)
{
    const char *t = (const char *)sqlite3_column_text(q, col);
    return (ab_str_t){t ? t : "", t ? (size_t)sqlite3_column_bytes(q, col) : 0};
}

static void emit(reader_t *rd, const rec_t *r, ab_str_t thread, ab_str_t run)
{
    uint64_t key = rd->by_seq ? r->seq : r->pos;
    if (key <= rd->last) { /* invariant 5 */
        rd->disorder = rd->stop = true;
        return;
    }
    rd->last = key;
    ab_row_t row = {.pos = r->pos,
                    .seq = r->seq,
                    .commit_us = r->commit_us,
                    .thread = thread,
                    .run = run,
                    .bytes = r->len ? r->bytes : (const uint8_t *)"",
                    .len = r->len};
    rd->n++;
    if ((rd->cb && rd->cb(rd->ud, &row) != 0) || rd->n >= rd->limit)
        rd->stop = true;
}

/* The rowid of @p thread's run @p run into *rowid (0: no such run), by Q_RUN_ROWID. */
static ab_status_t run_rowid(ab_store_t *st, ab_str_t thread, ab_str_t run, sqlite3_int64 *rowid,
                             ab_error_t *err)
{
    sqlite3_stmt *q = st->q[Q_RUN_ROWID];
    sqlite3_bind_text(q, 1, thread.ptr, (int)thread.len, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, run.ptr, (int)run.len, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    *rowid = rc == SQLITE_ROW ? sqlite3_column_int64(q, 0) : 0;
    ab__store_done(q);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? AB_OK : ab__store_sqlerr(st, rc, "read", err);
}

/* AB_CORRUPT: a chain named chunk @p c, which is gone, or whose run's row is. */
static ab_status_t missing(ab_store_t *st, sqlite3_int64 c, ab_error_t *err)
{
    ab_error_set(err, AB_CORRUPT, "store",
                 "database %s is damaged: chunk %lld or its run is missing", st->path,
                 (long long)c);
    ab_error_detail_int(err, "chunk", c);
    return AB_CORRUPT;
}

/* Step Q_CHUNK_DATA on chunk @p c: its row, or AB_CORRUPT when a chain named a missing one.
 * The caller resets the statement. */
static ab_status_t chunk_row(ab_store_t *st, sqlite3_int64 c, ab_error_t *err)
{
    sqlite3_stmt *q = st->q[Q_CHUNK_DATA];
    sqlite3_bind_int64(q, 1, c);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        return AB_OK;
    if (rc == SQLITE_DONE)
        return missing(st, c, err);
    return ab__store_sqlerr(st, rc, "read", err);
}

/* How a scope's read ends: @p s, else AB_CORRUPT for a damaged chunk, else AB_OK with the
 * rows delivered into *delivered. */
static ab_status_t read_end(ab_store_t *st, ab_status_t s, const damage_t *bad, const reader_t *rd,
                            uint32_t *delivered, ab_error_t *err)
{
    if (s != AB_OK)
        return s;
    if (bad->why[0])
        return damaged(st, bad, err);
    if (delivered)
        *delivered = rd->n;
    return AB_OK;
}

/* Deliver the records above @p after_seq of the run's chunk @p q is on: only the chunks before
 * the first row delivered may hold records at or below the cursor (the one it falls in); once
 * a row is delivered every record goes to emit(), which refuses one at or below the last
 * (invariant 5) instead of leaving it out. */
static void run_chunk(reader_t *rd, sqlite3_stmt *q, uint64_t after_seq, damage_t *bad)
{
    chunk_it_t it;
    chunk_open(&it, q);
    ab_str_t t = col_str(q, AB__CK_THREAD), r = col_str(q, AB__CK_RUN);
    rec_t rec = {0};
    while (!rd->stop && chunk_next(&it, &rec, bad))
        if (rec.seq > after_seq || rd->n > 0)
            emit(rd, &rec, t, r);
}

/* Scope run: the run's chunks in seq order, along its chain (invariant 1). */
static ab_status_t read_run(ab_store_t *st, const ab_read_t *req, reader_t *rd, uint32_t *delivered,
                            ab_error_t *err)
{
    sqlite3_int64 rowid = 0;
    ab_status_t s = run_rowid(st, req->thread, req->run, &rowid, err);
    ab__walk_t w;
    walk_take(st, &w, false, rowid, ab__store_i64(req->after_seq), req->after_seq);
    damage_t bad = {0};
    sqlite3_stmt *q = st->q[Q_CHUNK_DATA];
    while (s == AB_OK && rowid != 0 && !rd->stop && !bad.why[0]) {
        sqlite3_int64 c = 0;
        s = ab__walk_next(&w, &c, err);
        if (s != AB_OK || c == 0)
            break;
        s = chunk_row(st, c, err);
        if (s == AB_OK)
            run_chunk(rd, q, req->after_seq, &bad);
        ab__store_done(q);
    }
    if (s == AB_OK && !bad.why[0] && w.i > 0)
        walk_keep(st, &w, w.i - 1, rd); /* the chunk it stopped in */
    return read_end(st, s, &bad, rd, delivered, err);
}

/* A commit's records gathered from its chunks (thread and all scopes). */
typedef struct group {
    ab_buf_t *buf; /* copies of chunk data and "thread\0run\0" */
    struct grec {
        rec_t r;
        size_t boff, soff; /* offsets of bytes and names in buf */
    } * recs;
    size_t n, cap;
} group_t;

static ab_status_t group_add(group_t *g, sqlite3_stmt *q, uint64_t after_pos, damage_t *bad)
{
    chunk_it_t it;
    chunk_open(&it, q);
    ab_str_t t = col_str(q, AB__CK_THREAD), r = col_str(q, AB__CK_RUN);
    size_t soff = g->buf->len, doff = soff + t.len + r.len + 2;
    if (ab_buf_append(g->buf, t.ptr, t.len + 1) != AB_OK ||
        ab_buf_append(g->buf, r.ptr, r.len + 1) != AB_OK ||
        (it.size && ab_buf_append(g->buf, it.data, it.size) != AB_OK))
        return AB_NOMEM;
    rec_t rec = {0};
    while (chunk_next(&it, &rec, bad)) {
        if (rec.pos <= after_pos)
            continue;
        struct grec *nr = ab__grow(g->recs, &g->cap, g->n + 1, sizeof *nr, 256);
        if (!nr)
            return AB_NOMEM;
        g->recs = nr;
        g->recs[g->n++] =
            (struct grec){.r = rec, .boff = doff + (size_t)(rec.bytes - it.data), .soff = soff};
    }
    return AB_OK;
}

static int cmp_grec(const void *a, const void *b)
{
    uint64_t x = ((const struct grec *)a)->r.pos, y = ((const struct grec *)b)->r.pos;
    return x < y ? -1 : x > y;
}

static void group_flush(group_t *g, reader_t *rd)
{
    if (g->n > 1)
        qsort(g->recs, g->n, sizeof *g->recs, cmp_grec);
    for (size_t i = 0; i < g->n && !rd->stop; i++) {
        rec_t r = g->recs[i].r;
        r.bytes = g->buf->data + g->recs[i].boff;
        const char *t = (const char *)g->buf->data + g->recs[i].soff;
        size_t tl = strlen(t);
        const char *run = t + tl + 1;
        emit(rd, &r, (ab_str_t){t, tl}, (ab_str_t){run, strlen(run)});
    }
    g->n = 0;
    ab_buf_reset(g->buf);
}

/* Where a grouped read takes its chunks from: the table's statement (all), or a thread's
 * chain and Q_CHUNK_DATA, or Q_THREAD_SEG_DATA for a segment found by scan (thread). */
typedef struct source {
    sqlite3_stmt *q; /* stepped: every row a chunk, in rowid order */
    ab__walk_t *walk;
    unsigned seg_fills; /* the walk's segment Q_THREAD_SEG_DATA is stepping (0: none) */
} source_t;

/* Chunk @p c of a segment the walk found by scan: the next row of Q_THREAD_SEG_DATA over the
 * rest of the segment, started at @p c (invariant 7); *q NULL when that row is not @p c. */
static ab_status_t seg_row(ab_store_t *st, source_t *src, sqlite3_int64 c, sqlite3_stmt **q,
                           ab_error_t *err)
{
    const ab__walk_t *w = src->walk;
    sqlite3_stmt *sq = st->q[Q_THREAD_SEG_DATA];
    *q = NULL;
    if (src->seg_fills != w->fills) {
        ab__store_done(sq);
        sqlite3_bind_int64(sq, 1, c - 1);
        sqlite3_bind_int64(sq, 2, w->seg[w->n - 1]);
        sqlite3_bind_int64(sq, 3, w->owner);
        src->seg_fills = w->fills;
    }
    int rc = sqlite3_step(sq);
    if (rc == SQLITE_ROW && sqlite3_column_int64(sq, AB__CK_ROWID) == c) {
        *q = sq;
        return AB_OK;
    }
    ab__store_done(sq); /* not what the scan found: the chunk is looked up alone */
    src->seg_fills = 0;
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? AB_OK : ab__store_sqlerr(st, rc, "read", err);
}

/* The next row of the table's statement @p tq (an all read) into *q (NULL at the end); a chunk
 * whose run's row is gone (the LEFT JOIN's NULL) is AB_CORRUPT, as in a thread read. */
static ab_status_t table_next(ab_store_t *st, sqlite3_stmt *tq, sqlite3_stmt **q, ab_error_t *err)
{
    int rc = sqlite3_step(tq);
    if (rc == SQLITE_DONE)
        return AB_OK;
    if (rc != SQLITE_ROW)
        return ab__store_sqlerr(st, rc, "read", err);
    if (sqlite3_column_type(tq, AB__CK_RUN_ROWID) == SQLITE_NULL)
        return missing(st, sqlite3_column_int64(tq, AB__CK_ROWID), err);
    *q = tq;
    return AB_OK;
}

/* The next chunk's row on the statement into *q (NULL at the end). */
static ab_status_t source_next(ab_store_t *st, source_t *src, sqlite3_stmt **q, ab_error_t *err)
{
    *q = NULL;
    if (src->walk == NULL)
        return table_next(st, src->q, q, err);
    ab__store_done(st->q[Q_CHUNK_DATA]);
    sqlite3_int64 c = 0;
    ab_status_t s = ab__walk_next(src->walk, &c, err);
    if (s != AB_OK || c == 0)
        return s;
    if (src->walk->scanned && (s = seg_row(st, src, c, q, err)) != AB_OK)
        return s;
    if (*q == NULL && (s = chunk_row(st, c, err)) == AB_OK)
        *q = st->q[Q_CHUNK_DATA];
    if (s != AB_OK)
        return s;
    if (sqlite3_column_int(*q, AB__CK_SAME_THREAD) != 1) /* invariant 4 */
        return ab_error_set(err, AB_CORRUPT, "store",
                            "database %s is damaged: chunk %lld is in a thread its run is not in",
                            st->path, (long long)c);
    return AB_OK;
}

/* Deliver the rows of chunks ordered by commit. */
static ab_status_t read_grouped(ab_store_t *st, source_t *src, uint64_t after_pos, reader_t *rd,
                                uint32_t *delivered, ab_error_t *err)
{
    group_t g = {.buf = &st->scratch};
    ab_buf_reset(g.buf);
    damage_t bad = {0};
    int64_t cur = -1;
    ab_status_t s = AB_OK;
    sqlite3_stmt *q = NULL;
    const ab__walk_t *w = src->walk;
    size_t at = 0;      /* the walk's index of the chunk the gathered commit began with */
    unsigned fills = 0; /* and its segment (invariant 6) */
    while (!rd->stop && !bad.why[0] && (s = source_next(st, src, &q, err)) == AB_OK && q != NULL) {
        int64_t bf = sqlite3_column_int64(q, AB__CK_BATCH_FIRST);
        if (bf != cur) {
            group_flush(&g, rd);
            if (rd->stop)
                break;
            at = w ? w->i - 1 : 0;
            fills = w ? w->fills : 0;
        }
        cur = bf;
        /* records at or below the cursor are left out of the commits before the first row
         * delivered only: later, emit() refuses them (invariant 5) */
        if (group_add(&g, q, rd->n > 0 ? 0 : after_pos, &bad) != AB_OK) {
            s = ab_error_set(err, AB_NOMEM, "store", "out of memory (read)");
            break;
        }
    }
    if (s == AB_OK && !bad.why[0])
        group_flush(&g, rd);
    if (s == AB_OK && !bad.why[0] && w && fills == w->fills)
        walk_keep(st, w, at, rd);
    ab__store_done(st->q[Q_CHUNK_DATA]);
    ab__store_done(st->q[Q_THREAD_SEG_DATA]);
    if (src->q)
        ab__store_done(src->q);
    free(g.recs);
    return read_end(st, s, &bad, rd, delivered, err);
}

/* Scope thread: its chunks from the first of the commit holding after_pos + 1, along its
 * chain (invariant 1). */
static ab_status_t read_thread(ab_store_t *st, const ab_read_t *req, reader_t *rd,
                               uint32_t *delivered, ab_error_t *err)
{
    sqlite3_stmt *q = st->q[Q_THREAD_ROWID];
    sqlite3_bind_text(q, 1, req->thread.ptr, (int)req->thread.len, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, ab__store_i64(req->after_pos));
    int rc = sqlite3_step(q);
    sqlite3_int64 rowid = rc == SQLITE_ROW ? sqlite3_column_int64(q, 0) : 0;
    sqlite3_int64 start = rc == SQLITE_ROW ? sqlite3_column_int64(q, 1) : 0;
    ab__store_done(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return ab__store_sqlerr(st, rc, "read", err);
    if (rowid == 0) {
        if (delivered)
            *delivered = 0;
        return AB_OK;
    }
    ab__walk_t w;
    walk_take(st, &w, true, rowid, start - 1, req->after_pos);
    source_t src = {.walk = &w};
    return read_grouped(st, &src, req->after_pos, rd, delivered, err);
}

static ab_status_t read_scope(ab_store_t *st, const ab_read_t *req, reader_t *rd, uint32_t *count,
                              ab_error_t *err)
{
    ab_status_t s = AB_OK;
    switch (req->scope) {
    case AB_REPLAY_RUN:
        s = ab__store_check_id(req->thread, "thread", err);
        if (s == AB_OK)
            s = ab__store_check_id(req->run, "run", err);
        return s == AB_OK ? read_run(st, req, rd, count, err) : s;
    case AB_REPLAY_THREAD:
        s = ab__store_check_id(req->thread, "thread", err);
        return s == AB_OK ? read_thread(st, req, rd, count, err) : s;
    case AB_REPLAY_ALL: {
        source_t src = {.q = st->q[Q_READ_ALL]};
        sqlite3_bind_int64(src.q, 1, ab__store_i64(req->after_pos));
        return read_grouped(st, &src, req->after_pos, rd, count, err);
    }
    default:
        return ab_error_set(err, AB_INVALID_ARGUMENT, "scope", "store: unknown scope %d",
                            (int)req->scope);
    }
}

ab_status_t ab__store_read(ab_store_t *st, const ab_read_t *req, ab_row_cb cb, void *ud,
                           uint32_t *count, ab_error_t *err)
{
    if (!st || !req)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle or request");
    if (req->limit == 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "limit", "store: limit must be >= 1");
    bool by_seq = req->scope == AB_REPLAY_RUN;
    bool own = false;
    ab_status_t s = ab__store_read_begin(st, &own, "read", err); /* invariant 3 */
    if (s != AB_OK)
        return s;
    reader_t rd = {.st = st,
                   .cb = cb,
                   .ud = ud,
                   .limit = req->limit,
                   .by_seq = by_seq,
                   .last = by_seq ? req->after_seq : req->after_pos,
                   .keep = own};
    s = read_scope(st, req, &rd, count, err);
    if (s == AB_OK && rd.disorder)
        s = ab_error_set(err, AB_CORRUPT, "store",
                         "database %s is damaged: its rows are out of order after %s %llu",
                         st->path, by_seq ? "seq" : "position", (unsigned long long)rd.last);
    ab__store_read_end(st, own);
    return s;
}

/* ab__store_event_bytes: keep the row of the wanted seq. */
typedef struct one_event {
    uint64_t seq, pos;
    ab_buf_t *out;
    bool found, nomem;
} one_event_t;

static int keep_event(void *ud, const ab_row_t *row)
{
    one_event_t *o = ud;
    if (row->seq == o->seq) {
        o->found = true;
        o->pos = row->pos;
        ab_buf_reset(o->out);
        o->nomem = row->len && ab_buf_append(o->out, row->bytes, row->len) != AB_OK;
    }
    return 1; /* one row is all it reads */
}

ab_status_t ab__store_event_bytes(ab_store_t *st, ab_str_t thread, ab_str_t run, uint64_t seq,
                                  ab_buf_t *out, uint64_t *pos_out, ab_error_t *err)
{
    if (!st || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle or out");
    if (seq == 0)
        return ab_error_set(err, AB_NOT_FOUND, "seq", "run %.*s has no seq 0", (int)run.len,
                            run.ptr);
    one_event_t o = {.seq = seq, .out = out};
    ab_read_t req = {
        .scope = AB_REPLAY_RUN, .thread = thread, .run = run, .after_seq = seq - 1, .limit = 1};
    ab_status_t s = ab__store_read(st, &req, keep_event, &o, NULL, err);
    if (s != AB_OK)
        return s;
    if (o.nomem)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory");
    if (!o.found)
        return ab_error_set(err, AB_NOT_FOUND, "seq", "run %.*s has no seq %llu", (int)run.len,
                            run.ptr, (unsigned long long)seq);
    if (pos_out)
        *pos_out = o.pos;
    return AB_OK;
}

/*
 * store_read.c - reads of the event store: a run after a seq, a thread or
 * everything after a position, and one event's exact bytes.
 *
 * Invariants:
 *  1. Rows are delivered in ascending position order. A run's chunks are
 *     read in seq order (chunks_by_run) and their records are already in
 *     position order. Thread and all reads fetch chunks in rowid order (a
 *     chunk's rowid is its first position, so the chunks of one commit are
 *     adjacent), starting at the first chunk of the commit holding
 *     after_pos + 1: the chunks of one commit are gathered into a group,
 *     sorted by position and delivered before the next commit's.
 *  2. A record that runs past the end of its chunk is AB_CORRUPT, never an
 *     out-of-bounds read.
 *  3. The statement is always reset before returning, so no read
 *     transaction stays open and borrowed row pointers never outlive the
 *     callback.
 */
#include "ab_common.h"
#include "store_int.h"

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

/* Decode the record at *off of a chunk; false at the end or when damaged. */
static bool next_rec(const uint8_t *data, size_t size, uint64_t batch_first, size_t *off, rec_t *r,
                     bool *damaged)
{
    *damaged = false;
    if (*off >= size)
        return false;
    if (size - *off < CHUNK_HDR) {
        *damaged = true;
        return false;
    }
    const uint8_t *p = data + *off;
    r->pos = batch_first + ab__store_get_u32(p);
    r->len = ab__store_get_u32(p + 4);
    r->seq = ab__store_get_u64(p + 8);
    r->commit_us = (int64_t)ab__store_get_u64(p + 16);
    if (size - *off - CHUNK_HDR < r->len) {
        *damaged = true;
        return false;
    }
    r->bytes = p + CHUNK_HDR;
    *off += CHUNK_HDR + r->len;
    return true;
}

static ab_status_t damaged(ab_store_t *st, ab_error_t *err)
{
    return ab_error_set(err, AB_CORRUPT, "store", "database %s is damaged: truncated event chunk",
                        st->path);
}

/* Read state shared by the scopes. */
typedef struct reader {
    ab_store_t *st;
    ab_row_cb cb;
    void *ud;
    uint32_t limit;
    uint32_t n;
    bool stop;
} reader_t;

static ab_str_t col_str(sqlite3_stmt *q, int col)
{
    const char *t = (const char *)sqlite3_column_text(q, col);
    return (ab_str_t){t ? t : "", t ? (size_t)sqlite3_column_bytes(q, col) : 0};
}

static void emit(reader_t *rd, const rec_t *r, ab_str_t thread, ab_str_t run)
{
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

static ab_status_t finish(reader_t *rd, sqlite3_stmt *q, int rc, bool bad, uint32_t *delivered,
                          ab_error_t *err)
{
    ab__store_done(q);
    if (bad)
        return damaged(rd->st, err);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return ab__store_sqlerr(rd->st, rc, "read", err);
    if (delivered)
        *delivered = rd->n;
    return AB_OK;
}

/* Scope run: the run's chunks in seq order (invariant 1). */
static ab_status_t read_run(ab_store_t *st, const ab_read_t *req, reader_t *rd, uint32_t *delivered,
                            ab_error_t *err)
{
    ab_status_t s = ab__store_check_id(req->thread, "thread", err);
    if (s == AB_OK)
        s = ab__store_check_id(req->run, "run", err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = st->q[Q_READ_RUN];
    sqlite3_bind_text(q, 1, req->thread.ptr, (int)req->thread.len, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, req->run.ptr, (int)req->run.len, SQLITE_STATIC);
    sqlite3_bind_int64(q, 3, ab__store_i64(req->after_seq));
    bool bad = false;
    int rc = SQLITE_DONE;
    while (!rd->stop && !bad && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        uint64_t bf = (uint64_t)sqlite3_column_int64(q, 0);
        const uint8_t *data = sqlite3_column_blob(q, 1);
        size_t size = (size_t)sqlite3_column_bytes(q, 1);
        ab_str_t t = col_str(q, 2), r = col_str(q, 3);
        size_t off = 0;
        rec_t rec;
        while (!rd->stop && next_rec(data, size, bf, &off, &rec, &bad))
            if (rec.seq > req->after_seq)
                emit(rd, &rec, t, r);
    }
    return finish(rd, q, rd->stop ? SQLITE_DONE : rc, bad, delivered, err);
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

static ab_status_t group_add(group_t *g, sqlite3_stmt *q, uint64_t after_pos, bool *bad)
{
    uint64_t bf = (uint64_t)sqlite3_column_int64(q, 0);
    const uint8_t *data = sqlite3_column_blob(q, 1);
    size_t size = (size_t)sqlite3_column_bytes(q, 1);
    ab_str_t t = col_str(q, 2), r = col_str(q, 3);
    size_t soff = g->buf->len, doff = soff + t.len + r.len + 2;
    if (ab_buf_append(g->buf, t.ptr, t.len + 1) != AB_OK ||
        ab_buf_append(g->buf, r.ptr, r.len + 1) != AB_OK ||
        (size && ab_buf_append(g->buf, data, size) != AB_OK))
        return AB_NOMEM;
    size_t off = 0;
    rec_t rec;
    while (next_rec(data, size, bf, &off, &rec, bad)) {
        if (rec.pos <= after_pos)
            continue;
        struct grec *nr = ab__grow(g->recs, &g->cap, g->n + 1, sizeof *nr, 256);
        if (!nr)
            return AB_NOMEM;
        g->recs = nr;
        g->recs[g->n++] =
            (struct grec){.r = rec, .boff = doff + (size_t)(rec.bytes - data), .soff = soff};
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

/* Deliver the rows of a statement over chunks ordered by commit. */
static ab_status_t read_grouped(ab_store_t *st, sqlite3_stmt *q, uint64_t after_pos, reader_t *rdp,
                                uint32_t *delivered, ab_error_t *err)
{
    reader_t rd = *rdp;
    group_t g = {.buf = &st->scratch};
    ab_buf_reset(g.buf);
    bool bad = false;
    int64_t cur = -1;
    int rc = SQLITE_DONE;
    while (!rd.stop && !bad && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t bf = sqlite3_column_int64(q, 0);
        if (bf != cur)
            group_flush(&g, &rd);
        cur = bf;
        if (!rd.stop && group_add(&g, q, after_pos, &bad) != AB_OK) {
            ab__store_done(q);
            free(g.recs);
            return ab_error_set(err, AB_NOMEM, "store", "out of memory (read)");
        }
    }
    if (!bad && (rc == SQLITE_DONE || rd.stop))
        group_flush(&g, &rd);
    free(g.recs);
    return finish(&rd, q, rd.stop ? SQLITE_DONE : rc, bad, delivered, err);
}

ab_status_t ab__store_read(ab_store_t *st, const ab_read_t *req, ab_row_cb cb, void *ud,
                           uint32_t *count, ab_error_t *err)
{
    if (!st || !req)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle or request");
    if (req->limit == 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "limit", "store: limit must be >= 1");
    reader_t rd = {.st = st, .cb = cb, .ud = ud, .limit = req->limit};
    ab_status_t s = AB_OK;
    sqlite3_stmt *q = NULL;
    switch (req->scope) {
    case AB_REPLAY_RUN: return read_run(st, req, &rd, count, err);
    case AB_REPLAY_THREAD:
        s = ab__store_check_id(req->thread, "thread", err);
        if (s != AB_OK)
            return s;
        q = st->q[Q_READ_THREAD];
        sqlite3_bind_text(q, 1, req->thread.ptr, (int)req->thread.len, SQLITE_STATIC);
        sqlite3_bind_int64(q, 2, ab__store_i64(req->after_pos));
        break;
    case AB_REPLAY_ALL:
        q = st->q[Q_READ_ALL];
        sqlite3_bind_int64(q, 1, ab__store_i64(req->after_pos));
        break;
    default:
        return ab_error_set(err, AB_INVALID_ARGUMENT, "scope", "store: unknown scope %d",
                            (int)req->scope);
    }
    return read_grouped(st, q, req->after_pos, &rd, count, err);
}

ab_status_t ab__store_event_bytes(ab_store_t *st, ab_str_t thread, ab_str_t run, uint64_t seq,
                                  ab_buf_t *out, uint64_t *pos_out, ab_error_t *err)
{
    if (!st || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle or out");
    ab_status_t s = ab__store_check_id(thread, "thread", err);
    if (s == AB_OK)
        s = ab__store_check_id(run, "run", err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = st->q[Q_EVENT_CHUNK];
    sqlite3_bind_text(q, 1, thread.ptr, (int)thread.len, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, run.ptr, (int)run.len, SQLITE_STATIC);
    sqlite3_bind_int64(q, 3, ab__store_i64(seq));
    int rc = sqlite3_step(q);
    bool bad = false, found = false;
    rec_t rec;
    if (rc == SQLITE_ROW) {
        const uint8_t *data = sqlite3_column_blob(q, 1);
        size_t size = (size_t)sqlite3_column_bytes(q, 1), off = 0;
        uint64_t bf = (uint64_t)sqlite3_column_int64(q, 0);
        while (!found && next_rec(data, size, bf, &off, &rec, &bad))
            found = rec.seq == seq;
        ab_buf_reset(out);
        if (found && rec.len && ab_buf_append(out, rec.bytes, rec.len) != AB_OK)
            s = ab_error_set(err, AB_NOMEM, "store", "out of memory");
    }
    ab__store_done(q);
    if (s != AB_OK)
        return s;
    if (bad)
        return damaged(st, err);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return ab__store_sqlerr(st, rc, "event", err);
    if (!found)
        return ab_error_set(err, AB_NOT_FOUND, "seq", "run %.*s has no seq %llu", (int)run.len,
                            run.ptr, (unsigned long long)seq);
    if (pos_out)
        *pos_out = rec.pos;
    return AB_OK;
}

/*
 * pg_read.c - the PostgreSQL plugin's reads: rows of a run, a thread or
 * everything after a cursor, unpacked from the chunks (one row per run per
 * batch, pg_int.h "Chunks"), and the exact bytes of one event.
 *
 * Invariants:
 *  1. Rows are delivered in ascending position order, at most req->limit of
 *     them, and fewer only when no more are committed: a caller that pages
 *     until a short page has read everything.
 *  2. Scope all reads by windows of positions: positions are dense, so the
 *     chunks holding positions (P, P + W] are exactly those from the batch
 *     holding P + 1 up to first position P + W whose last position is past P
 *     (a chunk stored before schema 6 has none and is always fetched); each
 *     position lands in its slot, and the first empty slot is the end of what
 *     is committed.
 *  3. Scope thread reads whole batches (a batch's chunks interleave their
 *     positions), from the batch holding P + 1 up to the batch of its
 *     k-th chunk (k = 4 first, then what the rest of the page needs at
 *     the size of the chunks read, at most 256), but for the chunks whose last
 *     position is not past P (as in 2), and sorts their records by position;
 * a pass that delivered fewer than the limit reads on from the next batch. Scope run reads the
 * chunks holding seqs (S, S + limit]: a run's seqs are dense, so that is exactly one page.
 *  4. A malformed chunk (a record running past its end) is AB_CORRUPT naming
 *     the run; nothing past it is delivered.
 *  5. Every result is cleared before returning (but the one invariant 7 keeps);
 *     callbacks get views into it, or into its chunks unpacked (pg_chunk.h:
 *     a chunk stored packed is unpacked once, when its result arrives; one that
 *     does not unpack is malformed, as in invariant 4).
 *  6. No row of a result is delivered before its highest position is settled
 *     (ab__pg_settle, pg_conn.c invariant 4): a read of a commit the standby
 *     never had is unavailable, not delivered.
 *  7. A read that stops before the end of the records it fetched (the page's
 *     limit, or the callback) keeps them with their result (db->ahead, one per
 *     handle, at most PG_AHEAD_MAX_BYTES of chunks), and the read that continues
 *     it (the same scope, thread and run, after the last position, or seq,
 *     delivered) takes them first, then goes on from where the first would have
 *     (a thread pass: the next batch): a page boundary inside a batch or a chunk
 *     does not read it twice. Scope all fetches up to ALL_AHEAD times its limit
 *     for that, so that pages of everything cost a statement per ALL_AHEAD
 *     pages. They stay right: chunks are never rewritten, and the records are
 *     settled (invariant 6). A read that does not continue them, a dropped
 *     connection or close clears them.
 */
#include "pg_int.h"

#include <stdlib.h>
#include <string.h>

#define ALL_WINDOW 4096 /* most positions per read of scope all */
#define ALL_AHEAD  4    /* a read of scope all fetches up to this many times its limit (kept) */
/* chunks (and their whole batches) per pass of scope thread: 4 first, then as many as the rest
 * of the page needs at the size of the chunks just read, at most 256 */
#define THREAD_CHUNKS_MIN 4
#define THREAD_CHUNKS_MAX 256

static ab_status_t corrupt(ab_str_t run, ab_error_t *err)
{
    return ab_error_set(err, AB_CORRUPT, "data", "postgres: a stored chunk of run %.*s is damaged",
                        (int)run.len, run.ptr);
}

/* Cursor @p v as a parameter that the statement adds @p add to: at most INT64_MAX - @p add, so
 * that the sum cannot overflow (no stored position or seq comes near: the answer is the same). */
static int64_t clamp(uint64_t v, uint64_t add)
{
    uint64_t top = (uint64_t)INT64_MAX - add;
    return v > top ? (int64_t)top : (int64_t)v;
}

/* ---- rows: a result with its chunks unpacked (invariant 5) --------------------------- */

static void rows_close(pg_rows_t *rs)
{
    PQclear(rs->r);
    free(rs->view);
    free(rs->buf);
    *rs = (pg_rows_t){0};
}

/* Run statement @p which (@p what, for its errors) and take its result into *rs (chunks in
 * column @p data_col), the packed chunks unpacked into one allocation. On failure *rs is
 * empty. */
static ab_status_t rows_exec(ab_plugin_db_t *db, int which, const pg_params_t *p, const char *what,
                             int data_col, pg_rows_t *rs, ab_error_t *err)
{
    *rs = (pg_rows_t){.r = ab__pg_exec(db, which, p, what, err)};
    if (!rs->r)
        return err ? err->code : AB_UNAVAILABLE;
    int nrow = PQntuples(rs->r);
    size_t need = 0, plain = 0;
    rs->view = calloc(nrow > 0 ? (size_t)nrow : 1, sizeof *rs->view);
    for (int i = 0; rs->view && i < nrow; i++) { /* a packed chunk: p NULL until unpacked */
        const uint8_t *d = (const uint8_t *)PQgetvalue(rs->r, i, data_col);
        size_t len = (size_t)PQgetlength(rs->r, i, data_col);
        int k = ab__pg_chunk_packed(d, len, &plain);
        rs->view[i] =
            (struct pg_view){.p = k == 1 ? NULL : d, .len = k == 1 ? plain : len, .bad = k < 0};
        need += k == 1 ? plain : 0;
        rs->plain += rs->view[i].len;
    }
    if (!rs->view || (need && !(rs->buf = malloc(need)))) {
        rows_close(rs);
        return ab_error_set(err, AB_NOMEM, "store", "out of memory (read)");
    }
    uint8_t *at = rs->buf;
    for (int i = 0; i < nrow; i++) {
        struct pg_view *v = &rs->view[i];
        if (v->p)
            continue;
        v->bad = ab__pg_chunk_unpack((const uint8_t *)PQgetvalue(rs->r, i, data_col),
                                     (size_t)PQgetlength(rs->r, i, data_col), at, v->len) != 0;
        v->p = at;
        at += v->len;
    }
    return AB_OK;
}

/* The next record of row @p i (ab__pg_chunk_next; -1 for a chunk that did not unpack). */
static int rows_next(const pg_rows_t *rs, int i, size_t *at, pg_rec_t *rec)
{
    const struct pg_view *v = &rs->view[i];
    return v->bad ? -1 : ab__pg_chunk_next(v->p, v->len, at, rec);
}

/* The position of the last record of chunk row @p i (0 when it has none; a malformed one
 * is reported by the delivery that follows). */
static uint64_t chunk_last(const pg_rows_t *rs, int i)
{
    size_t at = 0;
    pg_rec_t rec;
    uint64_t last = 0;
    while (rows_next(rs, i, &at, &rec) == 1)
        last = (uint64_t)ab__pg_i64(rs->r, i, 0) + rec.off;
    return last;
}

/* ---- scope all ---------------------------------------------------------------------- */

typedef pg_slot_t slot_t;

/* Place the records of @p rs with positions in (after, after + w] into @p slots. */
static ab_status_t fill_slots(const pg_rows_t *rs, int run_col, uint64_t after, uint32_t w,
                              slot_t *slots, ab_error_t *err)
{
    const PGresult *r = rs->r;
    for (int i = 0; i < PQntuples(r); i++) {
        uint64_t bf = (uint64_t)ab__pg_i64(r, i, 0);
        size_t at = 0;
        pg_rec_t rec;
        int k;
        while ((k = rows_next(rs, i, &at, &rec)) == 1) {
            uint64_t pos = bf + rec.off;
            if (pos > after && pos - after <= w)
                slots[pos - after - 1] = (slot_t){.r = r, .row = i, .rec = rec, .pos = pos};
        }
        if (k < 0)
            return corrupt(ab__pg_str(r, i, run_col), err);
    }
    return AB_OK;
}

/* ---- scope thread -------------------------------------------------------------------- */

static int cmp_slot(const void *x, const void *y)
{
    const slot_t *a = x, *b = y;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

void ab__pg_ahead_clear(ab_plugin_db_t *db)
{
    pg_ahead_t *a = &db->ahead;
    rows_close(&a->rows);
    free(a->recs);
    free(a->thread);
    *a = (pg_ahead_t){0};
}

/* Invariant 7: keep recs[next..n) of *rs (owned from here on; *rs is emptied) if small
 * enough; else free both. */
static void ahead_keep(ab_plugin_db_t *db, const ab_read_t *q, pg_rows_t *rs, slot_t *recs,
                       size_t next, size_t n, uint64_t last, uint64_t from)
{
    size_t rl = q->scope == AB_REPLAY_RUN ? q->run.len : 0;
    size_t tl = q->scope == AB_REPLAY_ALL ? 0 : q->thread.len;
    char *t = rs->plain <= PG_AHEAD_MAX_BYTES ? malloc(tl + rl + 1) : NULL;
    if (!t) {
        free(recs);
        rows_close(rs);
        return;
    }
    if (tl)
        memcpy(t, q->thread.ptr, tl);
    if (rl)
        memcpy(t + tl, q->run.ptr, rl);
    db->ahead = (pg_ahead_t){.rows = *rs,
                             .recs = recs,
                             .next = next,
                             .n = n,
                             .scope = (int)q->scope,
                             .thread = t,
                             .thread_len = tl,
                             .run_len = rl,
                             .last = last,
                             .from = from};
    *rs = (pg_rows_t){0};
}

static bool ahead_continues(const ab_plugin_db_t *db, const ab_read_t *q)
{
    const pg_ahead_t *a = &db->ahead;
    if (!a->rows.r || a->scope != (int)q->scope)
        return false;
    if (q->scope == AB_REPLAY_ALL)
        return q->after_pos == a->last;
    if (q->thread.len != a->thread_len || memcmp(q->thread.ptr, a->thread, a->thread_len) != 0)
        return false;
    if (q->scope == AB_REPLAY_THREAD)
        return q->after_pos == a->last;
    return q->after_seq == a->last && q->run.len == a->run_len &&
           memcmp(q->run.ptr, a->thread + a->thread_len, a->run_len) == 0;
}

/* Deliver recs[*i..nrec) of result @p r until the limit or the callback stops; *last: the
 * position (scope thread, all) or seq (scope run) of the last one. Column 1 is the commit
 * time; scope thread has the run in column 2, scope all the thread in 2 and the run in 3. */
static void deliver_recs(const PGresult *r, const slot_t *recs, size_t nrec, size_t *i,
                         const ab_read_t *q, ab_row_cb cb, void *ud, uint32_t *n, bool *stop,
                         uint64_t *last)
{
    bool run = q->scope == AB_REPLAY_RUN, all = q->scope == AB_REPLAY_ALL;
    for (; !*stop && *i < nrec && *n < q->limit; (*i)++) {
        const slot_t *sl = &recs[*i];
        ab_row_t row = {.pos = sl->pos,
                        .commit_us = ab__pg_i64(r, sl->row, 1),
                        .seq = sl->rec.seq,
                        .thread = all ? ab__pg_str(r, sl->row, 2) : q->thread,
                        .run = run ? q->run : ab__pg_str(r, sl->row, all ? 3 : 2),
                        .bytes = sl->rec.bytes,
                        .len = sl->rec.len};
        (*n)++;
        *last = run ? row.seq : row.pos;
        *stop = cb && cb(ud, &row) != 0;
    }
    if (*n >= q->limit)
        *stop = true;
}

/* The records of @p rs past @p after: by position for
 * scope thread (sorted; the run in column 2), by seq for scope run (in result order) — into
 * *out, *nout; *seen counts every record. On a damaged chunk, those before it and AB_CORRUPT
 * (invariant 4). */
static ab_status_t records_of(const pg_rows_t *rs, const ab_read_t *q, uint64_t after, slot_t **out,
                              size_t *nout, size_t *seen, ab_error_t *err)
{
    const PGresult *r = rs->r;
    bool by_seq = q->scope == AB_REPLAY_RUN;
    size_t nrec = 0, cap = 0;
    slot_t *recs = NULL;
    ab_status_t s = AB_OK;
    for (int i = 0; s == AB_OK && i < PQntuples(r); i++) {
        size_t at = 0;
        uint64_t bf = (uint64_t)ab__pg_i64(r, i, 0);
        pg_rec_t rec;
        int k;
        while (s == AB_OK && (k = rows_next(rs, i, &at, &rec)) == 1) {
            (*seen)++;
            if ((by_seq ? rec.seq : bf + rec.off) <= after)
                continue;
            if (nrec == cap) {
                slot_t *g = realloc(recs, (cap = cap ? cap * 2 : 256) * sizeof *g);
                if (!g)
                    s = ab_error_set(err, AB_NOMEM, "store", "out of memory (read)");
                else
                    recs = g;
            }
            if (s == AB_OK)
                recs[nrec++] = (slot_t){.r = r, .row = i, .rec = rec, .pos = bf + rec.off};
        }
        if (s == AB_OK && k < 0)
            s = corrupt(by_seq ? q->run : ab__pg_str(r, i, 2), err);
    }
    if (s == AB_OK && !by_seq && nrec > 1)
        qsort(recs, nrec, sizeof *recs, cmp_slot);
    *out = recs;
    *nout = nrec;
    return s;
}

/* One read of whole batches from batch *from on (invariant 3); *last = the
 * last position delivered, *from = the batch after the last one read, 0 when
 * nothing follows; *per = records per chunk read (at least 1). */
static ab_status_t thread_pass(ab_plugin_db_t *db, const ab_read_t *q, uint64_t after,
                               uint32_t want, ab_row_cb cb, void *ud, uint32_t *n, bool *stop,
                               uint64_t *last, uint64_t *from, uint32_t *per, ab_error_t *err)
{
    pg_params_t p = {0};
    ab__pg_p_text(&p, q->thread);
    ab__pg_p_i64(&p, clamp(after, 1));
    ab__pg_p_i64(&p, want);
    ab__pg_p_i64(&p, clamp(*from, 0));
    pg_rows_t rs;
    ab_status_t s = rows_exec(db, PQ_READ_THREAD, &p, "read", 3, &rs, err);
    if (s != AB_OK)
        return s;
    const PGresult *r = rs.r;
    uint64_t cut = PQntuples(r) > 0 ? (uint64_t)ab__pg_i64(r, 0, 4) : 0;
    *from = cut ? cut + 1 : 0;
    size_t nrec = 0, seen = 0, i = 0, rows = (size_t)PQntuples(r);
    slot_t *recs = NULL;
    s = records_of(&rs, q, after, &recs, &nrec, &seen, err);
    if (s == AB_OK && nrec) /* invariant 6 */
        s = ab__pg_settle(db, recs[nrec - 1].pos, err);
    if (s == AB_OK)
        deliver_recs(r, recs, nrec, &i, q, cb, ud, n, stop, last);
    *per = rows > 0 && seen > rows ? (uint32_t)(seen / rows) : 1;
    if (s == AB_OK && i < nrec) { /* invariant 7 */
        ahead_keep(db, q, &rs, recs, i, nrec, *last, *from);
        return s;
    }
    free(recs);
    rows_close(&rs);
    return s;
}

/* Invariant 7: a read that continues what the handle kept takes those records first; any
 * other read clears them. @return whether the read is done (*from: where a thread pass goes
 * on, as after a pass). */
static bool take_ahead(ab_plugin_db_t *db, const ab_read_t *q, ab_row_cb cb, void *ud, uint32_t *n,
                       bool *stop, uint64_t *after, uint64_t *from)
{
    pg_ahead_t *a = &db->ahead;
    if (!ahead_continues(db, q)) {
        ab__pg_ahead_clear(db);
        return false;
    }
    deliver_recs(a->rows.r, a->recs, a->n, &a->next, q, cb, ud, n, stop, after);
    a->last = *after;
    *from = a->from;
    if (a->next < a->n)
        return true; /* stopped inside: the rest stays kept */
    ab__pg_ahead_clear(db);
    return *stop;
}

static ab_status_t read_thread(ab_plugin_db_t *db, const ab_read_t *q, ab_row_cb cb, void *ud,
                               uint32_t *count, ab_error_t *err)
{
    uint64_t after = q->after_pos, from = 0;
    uint32_t n = 0, chunks = THREAD_CHUNKS_MIN;
    bool stop = false;
    ab_status_t s = AB_OK;
    bool done = take_ahead(db, q, cb, ud, &n, &stop, &after, &from);
    /* every record past `after` of the batches read so far was delivered; a kept pass that
     * read everything committed then (from 0) is followed by a fresh look from `after` */
    while (s == AB_OK && !done) {
        uint32_t want = q->limit - n < chunks ? q->limit - n : chunks;
        uint32_t per = 1;
        s = thread_pass(db, q, after, want, cb, ud, &n, &stop, &after, &from, &per, err);
        /* next pass: about the chunks the rest of the page needs, at these chunks' size */
        chunks = (q->limit - n) / per + 1;
        if (chunks > THREAD_CHUNKS_MAX)
            chunks = THREAD_CHUNKS_MAX;
        done = stop || from == 0;
    }
    if (s == AB_OK && count)
        *count = n;
    return s;
}

/* ---- scope all (reading) ------------------------------------------------------------- */

/* One window of scope all: positions (*after, *after + w]; delivered up to the limit, the
 * rest kept (invariant 7). *end: nothing committed past what the window held. */
static ab_status_t all_window(ab_plugin_db_t *db, const ab_read_t *q, uint32_t w, ab_row_cb cb,
                              void *ud, uint32_t *n, bool *stop, uint64_t *after, bool *end,
                              ab_error_t *err)
{
    slot_t *slots = calloc(w, sizeof *slots);
    if (!slots)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory (read)");
    pg_params_t p = {0};
    ab__pg_p_i64(&p, clamp(*after, w));
    ab__pg_p_i64(&p, w);
    pg_rows_t rs;
    ab_status_t s = rows_exec(db, PQ_READ_ALL, &p, "read", 4, &rs, err);
    if (s != AB_OK) {
        free(slots);
        return s;
    }
    const PGresult *r = rs.r;
    s = fill_slots(&rs, 3, *after, w, slots, err);
    size_t got = 0, i = 0; /* invariant 2: the first empty slot ends what is committed */
    while (s == AB_OK && got < w && slots[got].r)
        got++;
    *end = got < w;
    if (s == AB_OK && got) /* invariant 6: settled up to the last slot delivered or kept */
        s = ab__pg_settle(db, *after + got, err);
    if (s == AB_OK)
        deliver_recs(r, slots, got, &i, q, cb, ud, n, stop, after);
    if (s == AB_OK && i < got) {
        ahead_keep(db, q, &rs, slots, i, got, *after, 0);
        return s;
    }
    free(slots);
    rows_close(&rs);
    return s;
}

static ab_status_t read_all(ab_plugin_db_t *db, const ab_read_t *q, ab_row_cb cb, void *ud,
                            uint32_t *count, ab_error_t *err)
{
    uint64_t after = q->after_pos, from = 0;
    uint32_t n = 0;
    bool stop = false, end = false;
    ab_status_t s = AB_OK;
    bool done = take_ahead(db, q, cb, ud, &n, &stop, &after, &from);
    while (s == AB_OK && !done && !end && !stop && n < q->limit) {
        uint64_t w = (uint64_t)(q->limit - n) * ALL_AHEAD;
        s = all_window(db, q, w < ALL_WINDOW ? (uint32_t)w : ALL_WINDOW, cb, ud, &n, &stop, &after,
                       &end, err);
    }
    if (s == AB_OK && count)
        *count = n;
    return s;
}

/* ---- scope run -------------------------------------------------------------------- */

static ab_status_t read_run(ab_plugin_db_t *db, const ab_read_t *q, ab_row_cb cb, void *ud,
                            uint32_t *count, ab_error_t *err)
{
    uint64_t after = q->after_seq, from = 0;
    uint32_t n = 0;
    bool stop = false;
    if (take_ahead(db, q, cb, ud, &n, &stop, &after, &from)) {
        if (count)
            *count = n;
        return AB_OK;
    }
    pg_params_t p = {0};
    ab__pg_p_text(&p, q->thread);
    ab__pg_p_text(&p, q->run);
    ab__pg_p_i64(&p, clamp(after, q->limit - n));
    ab__pg_p_i64(&p, q->limit - n);
    pg_rows_t rs;
    ab_status_t s = rows_exec(db, PQ_READ_RUN, &p, "read", 2, &rs, err);
    if (s != AB_OK)
        return s;
    const PGresult *r = rs.r;
    /* invariant 6: the last chunk (by seq) holds the run's highest position read */
    if (PQntuples(r))
        s = ab__pg_settle(db, chunk_last(&rs, PQntuples(r) - 1), err);
    slot_t *recs = NULL;
    size_t nrec = 0, i = 0, seen = 0;
    ab_status_t bad = s == AB_OK ? records_of(&rs, q, after, &recs, &nrec, &seen, err) : AB_OK;
    if (s == AB_OK)
        deliver_recs(r, recs, nrec, &i, q, cb, ud, &n, &stop, &after);
    if (s == AB_OK && bad == AB_OK && i < nrec) {
        ahead_keep(db, q, &rs, recs, i, nrec, after, 0); /* invariant 7 */
    } else {
        free(recs);
        rows_close(&rs);
    }
    if (s == AB_OK)
        s = bad;
    if (s == AB_OK && count)
        *count = n;
    return s;
}

ab_status_t ab__pg_read(ab_plugin_db_t *db, const ab_read_t *req, ab_row_cb cb, void *ud,
                        uint32_t *count, ab_error_t *err)
{
    if (!req || req->limit == 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "limit",
                            "postgres: read needs a request and a limit >= 1");
    ab_status_t s = AB_OK;
    if (req->scope == AB_REPLAY_RUN || req->scope == AB_REPLAY_THREAD)
        s = ab__pg_check_id(req->thread, "thread", err);
    if (s == AB_OK && req->scope == AB_REPLAY_RUN)
        s = ab__pg_check_id(req->run, "run", err);
    if (s != AB_OK)
        return s;
    switch (req->scope) {
    case AB_REPLAY_RUN: return read_run(db, req, cb, ud, count, err);
    case AB_REPLAY_THREAD: return read_thread(db, req, cb, ud, count, err);
    case AB_REPLAY_ALL: return read_all(db, req, cb, ud, count, err);
    default: return ab_error_set(err, AB_INVALID_ARGUMENT, "scope", "postgres: unknown scope");
    }
}

ab_status_t ab__pg_event_bytes(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, uint64_t seq,
                               ab_buf_t *out, uint64_t *pos, ab_error_t *err)
{
    ab_status_t s = ab__pg_check_id(thread, "thread", err);
    if (s == AB_OK)
        s = ab__pg_check_id(run, "run", err);
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_text(&p, thread);
    ab__pg_p_text(&p, run);
    ab__pg_p_i64(&p, clamp(seq, 0));
    pg_rows_t rs;
    s = rows_exec(db, PQ_EVENT, &p, "event bytes", 1, &rs, err);
    if (s != AB_OK)
        return s;
    const PGresult *r = rs.r;
    pg_rec_t rec = {0};
    int k = 0;
    size_t at = 0;
    if (PQntuples(r) > 0)
        while ((k = rows_next(&rs, 0, &at, &rec)) == 1 && rec.seq != seq)
            ;
    if (k < 0)
        s = corrupt(run, err);
    else if (k == 0)
        s = ab_error_set(err, AB_NOT_FOUND, "seq", "postgres: no event %.*s/%llu", (int)run.len,
                         run.ptr, (unsigned long long)seq);
    if (s == AB_OK) /* invariant 6 */
        s = ab__pg_settle(db, (uint64_t)ab__pg_i64(r, 0, 0) + rec.off, err);
    if (s == AB_OK && out) {
        ab_buf_reset(out);
        if (rec.len && ab_buf_append(out, rec.bytes, rec.len) != AB_OK)
            s = ab_error_set(err, AB_NOMEM, "store", "out of memory");
    }
    if (s == AB_OK && pos)
        *pos = (uint64_t)ab__pg_i64(r, 0, 0) + rec.off;
    rows_close(&rs);
    return s;
}

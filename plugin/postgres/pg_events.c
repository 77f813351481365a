/*
 * pg_events.c - the PostgreSQL plugin's writes and heads: the conditional
 * append of a batch (one chunk row per run), claims, heads and snapshots
 * (docs/SCALING.md "Layout", "Appends", "Positions"; reads: pg_read.c).
 *
 * Invariants:
 *  1. A batch is one call of the ab_append() function, hence one transaction:
 *     stored whole or not at all. The runs it touches are locked in (thread,
 *     run) order; an event whose epoch is below the stored one (fenced on
 *     some broker) or a run whose first seq of the batch is not its stored
 *     last seq + 1 refuses the whole batch with AB_CONFLICT (field epoch or
 *     seq), so two brokers can never both commit seq N of a run.
 *  2. Inside a batch a run's events must have consecutive seqs; the plugin
 *     refuses anything else before sending (AB_CONFLICT, nothing stored). A
 *     run's events of the batch go into one chunk row (pg_int.h "Chunks"),
 *     whose key is the position of its first event.
 *  3. Positions come from the counter row ab_head(id 1), updated in the
 *     append's transaction and so locked until its commit: the next batch
 *     of any connection takes its positions only after this one is visible,
 *     so positions are dense and a reader "after P" never sees a hole that
 *     fills later.
 *  4. Every result is cleared before returning; callbacks get views into it.
 *  5. A fenced append (plugin.h append_fenced) is one call of ab_append() with the
 *     fencing threads and `seen`: holding the counter row (so no other append writes
 *     ab_threads meanwhile) it sets each thread's row to the batch's last position, and
 *     refuses the batch (AB_CONFLICT, field thread) when one was last fenced past `seen`.
 */
#include "pg_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const STATUS_TEXT[] = {NULL, "active", "finished", "errored"};
static const char *const OUTCOME_TEXT[] = {NULL, "success", "interrupt", "cancelled"};

enum {
    A_THREAD,
    A_RUN,
    A_FIRST,
    A_LAST,
    A_EPOCH,
    A_LASTOFF,
    A_STATUS,
    A_OUTCOME,
    A_PARENT,
    A_FIRSTOFF,
    A_DATA,
    A_COUNT_
};

static const Oid ELEM[A_COUNT_] = {PG_TEXT, PG_TEXT, PG_INT8, PG_INT8, PG_INT8, PG_INT8,
                                   PG_TEXT, PG_TEXT, PG_TEXT, PG_INT8, PG_BYTEA};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- binary arrays ------------------------------------------------------------- */

static bool bytes_room(pg_bytes_t *a, size_t more)
{
    if (a->len + more <= a->cap)
        return true;
    size_t cap = a->cap ? a->cap : 4096;
    while (cap < a->len + more)
        cap *= 2;
    uint8_t *d = realloc(a->data, cap);
    if (!d)
        return false;
    a->data = d;
    a->cap = cap;
    return true;
}

static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static bool arr_begin(pg_bytes_t *a, Oid elem, size_t count)
{
    a->len = 0;
    if (!bytes_room(a, 20))
        return false;
    be32(a->data, 1);
    be32(a->data + 4, 0);
    be32(a->data + 8, elem);
    be32(a->data + 12, (uint32_t)count);
    be32(a->data + 16, 1);
    a->len = 20;
    return true;
}

/* One element; @p p NULL = an SQL NULL. */
static bool arr_put(pg_bytes_t *a, const void *p, size_t len)
{
    if (!bytes_room(a, 4 + (p ? len : 0)))
        return false;
    be32(a->data + a->len, p ? (uint32_t)len : 0xffffffffu);
    a->len += 4;
    if (p && len)
        memcpy(a->data + a->len, p, len);
    if (p)
        a->len += len;
    return true;
}

static bool arr_i64(pg_bytes_t *a, int64_t v)
{
    uint8_t b[8];
    uint64_t x = (uint64_t)v;
    for (int i = 7; i >= 0; i--, x >>= 8)
        b[i] = (uint8_t)x;
    return arr_put(a, b, 8);
}

static bool arr_text(pg_bytes_t *a, const char *s)
{
    return arr_put(a, s, s ? strlen(s) : 0);
}

void ab__pg_stage_free(ab_plugin_db_t *db)
{
    for (int i = 0; i < A_COUNT_; i++)
        free(db->arr[i].data);
    free(db->pack.data);
    free(db->fence.data);
}

/* ---- staging a batch ------------------------------------------------------------ */

/* An event of the batch with its index, sorted by run then index. */
typedef struct ev_ref {
    const ab_append_event_t *ev;
    uint32_t idx;
} ev_ref_t;

static int cmp_str(ab_str_t a, ab_str_t b)
{
    size_t n = a.len < b.len ? a.len : b.len;
    int c = memcmp(a.ptr, b.ptr, n);
    return c ? c : (a.len > b.len) - (a.len < b.len);
}

static int cmp_ref(const void *x, const void *y)
{
    const ev_ref_t *a = x, *b = y;
    int c = cmp_str(a->ev->thread, b->ev->thread);
    if (!c)
        c = cmp_str(a->ev->run, b->ev->run);
    return c ? c : (a->idx > b->idx) - (a->idx < b->idx);
}

static ab_status_t check_event(const ab_append_event_t *ev, ab_error_t *err)
{
    ab_status_t s = ab__pg_check_id(ev->thread, "thread", err);
    if (s == AB_OK)
        s = ab__pg_check_id(ev->run, "run", err);
    if (s == AB_OK && ev->parent_run.ptr)
        s = ab__pg_check_id(ev->parent_run, "parent_run", err);
    if (s == AB_OK && ((!ev->bytes && ev->len) || ev->len > (size_t)INT32_MAX))
        s = ab_error_set(err, AB_INVALID_ARGUMENT, "bytes", "postgres: bad event bytes");
    return s;
}

/*
 * The run's chunk as one element of the data array: per event a record
 * (pg_int.h "Chunks") of the position offset in the batch, the length, the
 * seq and the producer's bytes, copied once from where the caller holds them;
 * then packed in place when that makes it smaller (pg_chunk.h, schema 7), so
 * that the server, its standby and every read are sent fewer bytes.
 */
static bool put_chunk(pg_bytes_t *a, pg_bytes_t *pack, const ev_ref_t *refs, size_t lo, size_t hi)
{
    size_t len = 0;
    for (size_t i = lo; i < hi; i++)
        len += PG_REC_HDR + refs[i].ev->len;
    if (len > PG_PLAIN_MAX || !bytes_room(a, 4 + len))
        return false;
    uint8_t *p = a->data + a->len + 4, *plain = p;
    for (size_t i = lo; i < hi; i++) {
        const ab_append_event_t *e = refs[i].ev;
        be32(p, refs[i].idx);
        be32(p + 4, (uint32_t)e->len);
        be32(p + 8, (uint32_t)(e->seq >> 32));
        be32(p + 12, (uint32_t)e->seq);
        if (e->len)
            memcpy(p + PG_REC_HDR, e->bytes, e->len);
        p += PG_REC_HDR + e->len;
    }
    size_t packed = 0;
    if (len >= PG_PACK_MIN && bytes_room(pack, ab__pg_chunk_pack_bound(len)))
        packed = ab__pg_chunk_pack(plain, len, pack->data);
    if (packed) {
        memcpy(plain, pack->data, packed);
        len = packed;
    }
    be32(a->data + a->len, (uint32_t)len);
    a->len += 4 + len;
    return true;
}

/* The run-level arrays of one run: its events are refs[lo..hi). */
static ab_status_t stage_run(ab_plugin_db_t *db, const ev_ref_t *refs, size_t lo, size_t hi,
                             ab_error_t *err)
{
    const ab_append_event_t *f = refs[lo].ev;
    uint64_t epoch = 0;
    int status = 0, outcome = 0;
    const ab_append_event_t *parent = NULL;
    for (size_t i = lo; i < hi; i++) {
        const ab_append_event_t *e = refs[i].ev;
        if (i > lo && e->seq != refs[i - 1].ev->seq + 1) {
            ab_error_set(err, AB_CONFLICT, "seq",
                         "postgres: run %.*s: seq %llu does not follow seq %llu in the batch",
                         (int)e->run.len, e->run.ptr, (unsigned long long)e->seq,
                         (unsigned long long)refs[i - 1].ev->seq);
            ab_error_detail_int(err, "index", refs[i].idx);
            return AB_CONFLICT;
        }
        if (e->epoch > epoch)
            epoch = e->epoch;
        if (e->status > AB_RUN_STATUS_UNKNOWN && e->status <= AB_RUN_STATUS_ERRORED)
            status = (int)e->status;
        if (e->outcome > AB_OUTCOME_NONE && e->outcome <= AB_OUTCOME_CANCELLED)
            outcome = (int)e->outcome;
        if (e->parent_run.ptr)
            parent = e;
    }
    bool ok = arr_put(&db->arr[A_THREAD], f->thread.ptr, f->thread.len) &&
              arr_put(&db->arr[A_RUN], f->run.ptr, f->run.len) &&
              arr_i64(&db->arr[A_FIRST], (int64_t)f->seq) &&
              arr_i64(&db->arr[A_LAST], (int64_t)refs[hi - 1].ev->seq) &&
              arr_i64(&db->arr[A_EPOCH], (int64_t)epoch) &&
              arr_i64(&db->arr[A_LASTOFF], refs[hi - 1].idx) &&
              arr_text(&db->arr[A_STATUS], STATUS_TEXT[status]) &&
              arr_text(&db->arr[A_OUTCOME], OUTCOME_TEXT[outcome]) &&
              (parent ? arr_put(&db->arr[A_PARENT], parent->parent_run.ptr, parent->parent_run.len)
                      : arr_put(&db->arr[A_PARENT], NULL, 0)) &&
              arr_i64(&db->arr[A_FIRSTOFF], refs[lo].idx) &&
              put_chunk(&db->arr[A_DATA], &db->pack, refs, lo, hi);
    return ok ? AB_OK : ab_error_set(err, AB_NOMEM, "store", "out of memory (batch)");
}

/* Count the runs of sorted @p refs. */
static size_t count_runs(const ev_ref_t *refs, size_t n)
{
    size_t runs = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || cmp_str(refs[i].ev->thread, refs[i - 1].ev->thread) ||
            cmp_str(refs[i].ev->run, refs[i - 1].ev->run))
            runs++;
    return runs;
}

/* Encode the batch's arrays (run arrays in (thread, run) order, events in batch order). */
static ab_status_t stage(ab_plugin_db_t *db, const ab_append_event_t *evs, size_t n, ev_ref_t *refs,
                         ab_error_t *err)
{
    for (size_t i = 0; i < n; i++) {
        ab_status_t s = check_event(&evs[i], err);
        if (s != AB_OK) {
            ab_error_detail_int(err, "index", (int64_t)i);
            return s;
        }
        refs[i] = (ev_ref_t){.ev = &evs[i], .idx = (uint32_t)i};
    }
    qsort(refs, n, sizeof *refs, cmp_ref);
    size_t runs = count_runs(refs, n);
    bool ok = true;
    for (int a = 0; a < A_COUNT_; a++)
        ok = ok && arr_begin(&db->arr[a], ELEM[a], runs);
    if (!ok)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory (batch)");
    for (size_t lo = 0; lo < n;) {
        size_t hi = lo + 1;
        while (hi < n && !cmp_str(refs[hi].ev->thread, refs[lo].ev->thread) &&
               !cmp_str(refs[hi].ev->run, refs[lo].ev->run))
            hi++;
        ab_status_t s = stage_run(db, refs, lo, hi, err);
        if (s != AB_OK)
            return s;
        lo = hi;
    }
    return AB_OK;
}

/* The fenced append's thread array; each id checked. */
/* @p ids as one text array in @p a, each id checked (@p field names it in an error). */
static ab_status_t put_ids(pg_bytes_t *a, const ab_str_t *ids, size_t n, const char *field,
                           ab_error_t *err)
{
    if ((!ids && n) || n > INT32_MAX)
        return ab_error_set(err, AB_INVALID_ARGUMENT, field, "postgres: bad id list");
    if (!arr_begin(a, PG_TEXT, n))
        return ab_error_set(err, AB_NOMEM, "store", "out of memory");
    for (size_t i = 0; i < n; i++) {
        ab_status_t s = ab__pg_check_id(ids[i], field, err);
        if (s != AB_OK) {
            ab_error_detail_int(err, "index", (int64_t)i);
            return s;
        }
        if (!arr_put(a, ids[i].ptr, ids[i].len))
            return ab_error_set(err, AB_NOMEM, "store", "out of memory");
    }
    return AB_OK;
}

/* One append: plain (nthreads 0) or fenced (plugin.h append_fenced). */
static ab_status_t append(ab_plugin_db_t *db, const ab_append_event_t *evs, size_t n,
                          const ab_str_t *threads, size_t nthreads, uint64_t seen,
                          int64_t commit_us, uint64_t *first_pos, ab_error_t *err)
{
    ab_status_t s = ab__pg_check_writer(db, "append", err);
    if (s != AB_OK)
        return s;
    if ((!evs && n) || !first_pos)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "events", "postgres: NULL argument");
    if (n == 0 || n > INT32_MAX)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "events", "postgres: empty batch");
    if (nthreads && (s = put_ids(&db->fence, threads, nthreads, "threads", err)) != AB_OK)
        return s;
    ev_ref_t *refs = malloc(n * sizeof *refs);
    if (!refs)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory (batch)");
    s = stage(db, evs, n, refs, err);
    free(refs);
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_i64(&p, commit_us);
    for (int a = 0; a < A_COUNT_; a++) {
        p.val[p.n] = (const char *)db->arr[a].data;
        p.len[p.n] = (int)db->arr[a].len;
        p.fmt[p.n++] = 1;
    }
    ab__pg_p_i64(&p, (int64_t)n);
    if (nthreads) {
        p.val[p.n] = (const char *)db->fence.data;
        p.len[p.n] = (int)db->fence.len;
        p.fmt[p.n++] = 1;
        ab__pg_p_i64(&p, (int64_t)seen);
    }
    PGresult *r = ab__pg_exec(db, nthreads ? PQ_APPEND_FENCED : PQ_APPEND, &p, "append", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    *first_pos = (uint64_t)ab__pg_i64(r, 0, 0);
    PQclear(r);
    if (*first_pos + n - 1 > db->safe_pos) /* acknowledged: durable up to its last (settle) */
        db->safe_pos = *first_pos + n - 1;
    return AB_OK;
}

ab_status_t ab__pg_append_batch(ab_plugin_db_t *db, const ab_append_event_t *evs, size_t n,
                                int64_t commit_us, uint64_t *first_pos, ab_error_t *err)
{
    return append(db, evs, n, NULL, 0, 0, commit_us, first_pos, err);
}

ab_status_t ab__pg_append_fenced(ab_plugin_db_t *db, const ab_append_event_t *evs, size_t n,
                                 const ab_str_t *threads, size_t nthreads, uint64_t seen,
                                 int64_t commit_us, uint64_t *first_pos, ab_error_t *err)
{
    if (seen > INT64_MAX)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "seen", "postgres: position out of range");
    return append(db, evs, n, threads, nthreads, seen, commit_us, first_pos, err);
}

/* ---- claims and heads ------------------------------------------------------------ */

ab_status_t ab__pg_claim(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, uint64_t *epoch,
                         uint64_t *last_seq, ab_error_t *err)
{
    ab_status_t s = ab__pg_check_writer(db, "claim", err);
    if (s == AB_OK)
        s = ab__pg_check_id(thread, "thread", err);
    if (s == AB_OK)
        s = ab__pg_check_id(run, "run", err);
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_text(&p, thread);
    ab__pg_p_text(&p, run);
    ab__pg_p_i64(&p, now_us());
    PGresult *r = ab__pg_exec(db, PQ_CLAIM, &p, "claim", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    if (epoch)
        *epoch = (uint64_t)ab__pg_i64(r, 0, 0);
    if (last_seq)
        *last_seq = (uint64_t)ab__pg_i64(r, 0, 1);
    PQclear(r);
    return AB_OK;
}

static ab_run_status_t status_of(ab_str_t t)
{
    for (int i = 1; i <= AB_RUN_STATUS_ERRORED; i++)
        if (t.len == strlen(STATUS_TEXT[i]) && memcmp(t.ptr, STATUS_TEXT[i], t.len) == 0)
            return (ab_run_status_t)i;
    return AB_RUN_STATUS_UNKNOWN;
}

static ab_agui_outcome_t outcome_of(ab_str_t t)
{
    for (int i = 1; i <= AB_OUTCOME_CANCELLED; i++)
        if (t.len == strlen(OUTCOME_TEXT[i]) && memcmp(t.ptr, OUTCOME_TEXT[i], t.len) == 0)
            return (ab_agui_outcome_t)i;
    return AB_OUTCOME_NONE;
}

/* Columns RUN_COLS of row @p row into @p h. */
static void fill_head(const PGresult *r, int row, ab_run_head_t *h)
{
    memset(h, 0, sizeof *h);
    ab__pg_copy(h->thread, sizeof h->thread, r, row, 0);
    ab__pg_copy(h->run, sizeof h->run, r, row, 1);
    ab__pg_copy(h->parent_run, sizeof h->parent_run, r, row, 2);
    h->epoch = (uint64_t)ab__pg_i64(r, row, 3);
    h->last_seq = (uint64_t)ab__pg_i64(r, row, 4);
    h->last_pos = (uint64_t)ab__pg_i64(r, row, 5);
    h->status = status_of(ab__pg_str(r, row, 6));
    h->outcome = outcome_of(ab__pg_str(r, row, 7));
    h->started_us = ab__pg_i64(r, row, 8);
    h->ended_us = ab__pg_i64(r, row, 9);
}

ab_status_t ab__pg_head(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, ab_run_head_t *out,
                        ab_error_t *err)
{
    ab_status_t s = ab__pg_check_id(thread, "thread", err);
    if (s == AB_OK)
        s = ab__pg_check_id(run, "run", err);
    if (s == AB_OK && !out)
        s = ab_error_set(err, AB_INVALID_ARGUMENT, "head", "postgres: NULL out");
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_text(&p, thread);
    ab__pg_p_text(&p, run);
    PGresult *r = ab__pg_exec(db, PQ_HEAD, &p, "head", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    if (PQntuples(r) > 0 && (s = ab__pg_settle(db, (uint64_t)ab__pg_i64(r, 0, 5), err)) != AB_OK) {
        PQclear(r);
        return s;
    }
    if (PQntuples(r) > 0) {
        fill_head(r, 0, out);
    } else {
        memset(out, 0, sizeof *out);
        memcpy(out->thread, thread.ptr, thread.len);
        memcpy(out->run, run.ptr, run.len);
    }
    PQclear(r);
    return AB_OK;
}

/* Heads (RUN_COLS rows of @p r) are handed on only once settled up to the highest last
 * position among them (pg_conn.c invariant 4); on failure @p r is cleared. */
static ab_status_t settle_heads(ab_plugin_db_t *db, PGresult *r, ab_error_t *err)
{
    uint64_t top = 0;
    for (int i = 0; i < PQntuples(r); i++)
        if ((uint64_t)ab__pg_i64(r, i, 5) > top)
            top = (uint64_t)ab__pg_i64(r, i, 5);
    ab_status_t s = ab__pg_settle(db, top, err);
    if (s != AB_OK)
        PQclear(r);
    return s;
}

ab_status_t ab__pg_thread_heads(ab_plugin_db_t *db, ab_str_t thread, ab_head_cb cb, void *ud,
                                ab_error_t *err)
{
    ab_status_t s = ab__pg_check_id(thread, "thread", err);
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_text(&p, thread);
    PGresult *r = ab__pg_exec(db, PQ_THREAD_HEADS, &p, "thread heads", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    if ((s = settle_heads(db, r, err)) != AB_OK)
        return s;
    ab_run_head_t h;
    for (int i = 0; i < PQntuples(r); i++) {
        fill_head(r, i, &h);
        if (cb && cb(ud, &h) != 0)
            break;
    }
    PQclear(r);
    return AB_OK;
}

ab_status_t ab__pg_heads_of(ab_plugin_db_t *db, const ab_str_t *threads, const ab_str_t *runs,
                            size_t n, ab_head_cb cb, void *ud, ab_error_t *err)
{
    if (n == 0)
        return AB_OK;
    ab_status_t s = put_ids(&db->arr[A_THREAD], threads, n, "thread", err);
    if (s == AB_OK)
        s = put_ids(&db->arr[A_RUN], runs, n, "run", err);
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    for (int a = A_THREAD; a <= A_RUN; a++) {
        p.val[p.n] = (const char *)db->arr[a].data;
        p.len[p.n] = (int)db->arr[a].len;
        p.fmt[p.n++] = 1;
    }
    PGresult *r = ab__pg_exec(db, PQ_HEADS_OF, &p, "heads", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    int rows = PQntuples(r);
    if ((s = settle_heads(db, r, err)) != AB_OK)
        return s;
    ab_run_head_t h;
    for (size_t i = 0, row = 0; i < n; i++) {
        if ((int)row < rows && (uint64_t)ab__pg_i64(r, (int)row, 10) == i + 1) {
            fill_head(r, (int)row++, &h);
        } else { /* not stored: unknown, as head gives it */
            memset(&h, 0, sizeof h);
            memcpy(h.thread, threads[i].ptr, threads[i].len);
            memcpy(h.run, runs[i].ptr, runs[i].len);
        }
        if (cb && cb(ud, &h) != 0)
            break;
    }
    PQclear(r);
    return AB_OK;
}

ab_status_t ab__pg_head_pos(ab_plugin_db_t *db, uint64_t *pos, ab_error_t *err)
{
    if (!pos)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "pos", "postgres: NULL out");
    PGresult *r = ab__pg_exec(db, PQ_HEAD_POS, NULL, "head position", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    uint64_t v = PQntuples(r) ? (uint64_t)ab__pg_i64(r, 0, 0) : 0;
    PQclear(r);
    ab_status_t s = ab__pg_settle(db, v, err);
    if (s == AB_OK)
        *pos = v;
    return s;
}

/* ---- snapshots ------------------------------------------------------------------------ */

ab_status_t ab__pg_snapshot_put(ab_plugin_db_t *db, ab_str_t thread, uint64_t pos,
                                const uint8_t *doc, size_t len, ab_error_t *err)
{
    ab_status_t s = ab__pg_check_writer(db, "snapshot put", err);
    if (s == AB_OK)
        s = ab__pg_check_id(thread, "thread", err);
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_text(&p, thread);
    ab__pg_p_i64(&p, (int64_t)pos);
    ab__pg_p_bytes(&p, doc, len);
    PGresult *r = ab__pg_exec(db, PQ_SNAP_PUT, &p, "snapshot put", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    PQclear(r);
    return AB_OK;
}

ab_status_t ab__pg_snapshot_get(ab_plugin_db_t *db, ab_str_t thread, ab_buf_t *doc, uint64_t *pos,
                                ab_error_t *err)
{
    ab_status_t s = ab__pg_check_id(thread, "thread", err);
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_text(&p, thread);
    PGresult *r = ab__pg_exec(db, PQ_SNAP_GET, &p, "snapshot get", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return ab_error_set(err, AB_NOT_FOUND, "thread", "postgres: no snapshot of %.*s",
                            (int)thread.len, thread.ptr);
    }
    /* a document up to pos is only as durable as the events up to pos */
    s = ab__pg_settle(db, (uint64_t)ab__pg_i64(r, 0, 1), err);
    if (s == AB_OK && doc) {
        ab_buf_reset(doc);
        size_t len = (size_t)PQgetlength(r, 0, 0);
        if (len && ab_buf_append(doc, PQgetvalue(r, 0, 0), len) != AB_OK)
            s = ab_error_set(err, AB_NOMEM, "store", "out of memory");
    }
    if (s == AB_OK && pos)
        *pos = (uint64_t)ab__pg_i64(r, 0, 1);
    PQclear(r);
    return s;
}

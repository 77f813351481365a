/*
 * store_commit.c - writing a staged batch (store_rw.c) in one transaction:
 * the rows of new runs, one chunk per run, the chains and tails, changed
 * run states, then COMMIT (docs/STORE.md "Writing: group commits", "Chains
 * and anchors").
 *
 * Invariants:
 *  1. Per run the batch touched: its runs row first when it is new (the
 *     chunk needs its rowid), then one chunk row holding its events of the
 *     batch in position order, gathered once from the caller's bytes; an
 *     UPDATE of its runs row only when the batch changes its state (status,
 *     outcome, parent, a higher epoch). Then one tail row per run and per
 *     thread written to (invariant 5), then COMMIT.
 *  2. Chains: a chunk links to the previous chunk of its run and of its
 *     thread, both of lower rowid (chunks are written in the order of their
 *     rowids, the positions of their first events). Its distance in each
 *     chain is 0 (an anchor: the first chunk of the chain, and every
 *     AB_STORE_ANCHOR_EVERY-th after) or one more than its predecessor's.
 *     Only anchors enter chunks_by_run and chunks_by_thread.
 *  3. Chunks and tails are inserted AB_STORE_ROWS_PER_INSERT rows per
 *     statement (the rest one by one): chunks in the order they were staged
 *     (their rowids'), their records in st->scratch until their statement
 *     ran; tails sorted by rowid.
 *  4. Nothing of the batch reaches the caches before COMMIT succeeded; any
 *     failure rolls back and clears both caches (store_cache.c).
 *  5. Tails in two levels (docs/STORE.md), written and merged by
 *     store_tails.c before COMMIT; its counts of the logs become the
 *     committed ones only after it.
 */
#include "ab_common.h"
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

/* Bind a run's pending status, outcome, parent and end to parameters @p col .. col + 3 (an
 * unset one stays NULL). */
static void bind_state(ab_store_t *st, sqlite3_stmt *q, const run_ent_t *e, int col)
{
    if (e->p_status)
        sqlite3_bind_text(q, col, ab__store_status_text[e->p_status], -1, SQLITE_STATIC);
    if (e->p_outcome)
        sqlite3_bind_text(q, col + 1, ab__store_outcome_text[e->p_outcome], -1, SQLITE_STATIC);
    if (e->p_has_parent)
        sqlite3_bind_text(q, col + 2, (const char *)st->parents.data + e->p_parent_off,
                          (int)e->p_parent_len, SQLITE_STATIC);
    sqlite3_bind_int64(q, col + 3, e->p_ended_us);
}

/* Create the runs row of a run first seen in this batch (or made by a claim). */
static ab_status_t create_run(ab_store_t *st, run_ent_t *e, ab_error_t *err)
{
    sqlite3_stmt *q = st->q[Q_THREAD_PUT];
    sqlite3_bind_text(q, 1, e->thread, (int)e->thread_len, SQLITE_STATIC);
    ab_status_t s = ab__store_int_q(st, Q_THREAD_PUT, "thread", &e->thread_rowid, err);
    if (s != AB_OK)
        return s;
    q = st->q[Q_RUN_NEW];
    sqlite3_bind_int64(q, 1, e->thread_rowid);
    sqlite3_bind_text(q, 2, e->thread, (int)e->thread_len, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, e->run, (int)e->run_len, SQLITE_STATIC);
    sqlite3_bind_int64(q, 4, ab__store_i64(e->p_epoch));
    sqlite3_bind_int64(q, 5, e->p_started_us);
    bind_state(st, q, e, 6);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        e->rowid = sqlite3_column_int64(q, 0);
        e->epoch = (uint64_t)sqlite3_column_int64(q, 1);
    }
    ab__store_done(q);
    return rc == SQLITE_ROW ? AB_OK : ab__store_sqlerr(st, rc, "run create", err);
}

static ab_status_t update_run(ab_store_t *st, const run_ent_t *e, ab_error_t *err)
{
    sqlite3_stmt *q = st->q[Q_RUN_UPDATE];
    sqlite3_bind_int64(q, 1, e->rowid);
    sqlite3_bind_int64(q, 2, ab__store_i64(e->p_epoch));
    bind_state(st, q, e, 3);
    return ab__store_run_q(st, Q_RUN_UPDATE, "run update", err);
}

/* ---- chunks --------------------------------------------------------------------- */

/* Insert the pending chunks (invariant 3): one statement for a full block, else each. */
static ab_status_t flush_chunks(ab_store_t *st, ab_error_t *err)
{
    bool block = st->npend == AB_STORE_ROWS_PER_INSERT;
    ab_status_t s = AB_OK;
    for (size_t i = 0; s == AB_OK && i < st->npend; i++) {
        int which = block ? Q_CHUNK_INSERT_N : Q_CHUNK_INSERT;
        sqlite3_stmt *q = st->q[which];
        const struct pending_chunk *c = &st->pend[i];
        int base = block ? (int)i * (AB_STORE_CHUNK_INTS + 1) : 0;
        for (int k = 0; k < AB_STORE_CHUNK_INTS; k++) /* data is the 8th column */
            sqlite3_bind_int64(q, base + k + (k >= 7 ? 2 : 1), c->v[k]);
        sqlite3_bind_blob64(q, base + 8, st->scratch.data + c->off, c->len, SQLITE_STATIC);
        if (!block || i + 1 == st->npend)
            s = ab__store_run_q(st, which, "append", err);
    }
    st->npend = 0;
    ab_buf_reset(&st->scratch);
    return s;
}

/*
 * Append the run's records of this batch to st->scratch: for each of its events the record
 * header, then its bytes copied from where the caller holds them (the producer's frame).
 * This is the one copy the store makes of an event before SQLite (docs/ARCHITECTURE.md
 * "Copies of event bytes").
 */
static ab_status_t gather_chunk(ab_store_t *st, const run_ent_t *e, size_t *off, ab_error_t *err)
{
    *off = st->scratch.len;
    if (ab_buf_reserve(&st->scratch, e->p_bytes) != AB_OK)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory (chunk)");
    uint8_t *p = st->scratch.data + *off;
    for (int32_t i = e->p_head; i >= 0; i = st->recs[i].next) {
        const stage_rec_t *r = &st->recs[i];
        ab__store_put_u32(p, r->pos_off);
        ab__store_put_u32(p + 4, r->len);
        ab__store_put_u64(p + 8, r->seq);
        ab__store_put_u64(p + 16, (uint64_t)st->commit_us);
        if (r->len)
            memcpy(p + CHUNK_HDR, r->bytes, r->len);
        p += CHUNK_HDR + r->len;
    }
    st->scratch.len += e->p_bytes;
    return AB_OK;
}

/* The thread of a run being written, staged for this batch (invariant 2). */
static ab_status_t stage_thread(ab_store_t *st, run_ent_t *e, thr_ent_t **out, ab_error_t *err)
{
    thr_ent_t *t = e->thr;
    if (t == NULL) {
        ab_status_t s = ab__store_thread_get(st, e->thread_rowid, &t, err);
        if (s != AB_OK)
            return s;
        e->thr = t;
    }
    if (t->batch != st->batch) {
        thr_ent_t **tt =
            ab__grow(st->ttouched, &st->ttouched_cap, st->nttouched + 1, sizeof *tt, 64);
        if (!tt)
            return ab_error_set(err, AB_NOMEM, "store", "out of memory (stage)");
        st->ttouched = tt;
        st->ttouched[st->nttouched++] = t;
        t->batch = st->batch;
        t->p_tail = t->tail;
        t->p_dist = t->dist;
    }
    *out = t;
    return AB_OK;
}

/* Queue the run's chunk of this batch, linked into its two chains (invariant 2). */
static ab_status_t queue_chunk(ab_store_t *st, run_ent_t *e, ab_error_t *err)
{
    thr_ent_t *t = NULL;
    size_t off = 0;
    ab_status_t s = stage_thread(st, e, &t, err);
    if (s == AB_OK)
        s = gather_chunk(st, e, &off, err);
    if (s != AB_OK)
        return s;
    e->p_dist = e->tail ? ab__store_next_dist(e->dist) : 0;
    uint32_t tdist = t->p_tail ? ab__store_next_dist(t->p_dist) : 0;
    sqlite3_int64 rowid = ab__store_i64(e->p_first_pos);
    st->pend[st->npend++] = (struct pending_chunk){
        .v = {e->rowid, e->thread_rowid, ab__store_i64(e->p_first_seq),
              ab__store_i64(e->p_last_seq), ab__store_i64(st->batch_first),
              ab__store_i64(st->next_pos - 1), e->p_n, rowid, ab__store_i64(e->p_last_pos), e->tail,
              e->p_dist, t->p_tail, tdist},
        .off = off,
        .len = e->p_bytes};
    t->p_tail = rowid;
    t->p_dist = tdist;
    return st->npend == AB_STORE_ROWS_PER_INSERT ? flush_chunks(st, err) : AB_OK;
}

/* ---- the batch ------------------------------------------------------------------ */

static ab_status_t write_batch(ab_store_t *st, ab_error_t *err)
{
    ab_status_t s = AB_OK;
    st->nttouched = 0;
    st->npend = 0;
    ab_buf_reset(&st->scratch);
    for (size_t i = 0; s == AB_OK && i < st->ntouched; i++) {
        run_ent_t *e = st->touched[i];
        if (e->p_n == 0)
            continue;
        bool created = e->rowid == 0; /* its row then holds the batch's state already */
        if (created)
            s = create_run(st, e, err);
        if (s == AB_OK && !created &&
            (e->p_status || e->p_outcome || e->p_has_parent || e->p_epoch > e->epoch))
            s = update_run(st, e, err);
        if (s == AB_OK)
            s = queue_chunk(st, e, err);
    }
    if (s == AB_OK)
        s = flush_chunks(st, err);
    if (s == AB_OK)
        s = ab__store_tails_write(st, err);
    return s == AB_OK ? ab__store_run_q(st, Q_COMMIT, "commit", err) : s;
}

/* After COMMIT: the batch's state becomes the caches' committed state (invariant 4). */
static void committed(ab_store_t *st)
{
    for (size_t i = 0; i < st->ntouched; i++) {
        run_ent_t *e = st->touched[i];
        if (e->p_n == 0)
            continue;
        e->last_seq = e->p_last_seq;
        if (e->p_epoch > e->epoch)
            e->epoch = e->p_epoch;
        e->tail = ab__store_i64(e->p_first_pos);
        e->dist = e->p_dist;
    }
    for (size_t i = 0; i < st->nttouched; i++) {
        thr_ent_t *t = st->ttouched[i];
        t->tail = t->p_tail;
        t->dist = t->p_dist;
    }
    ab__store_tails_committed(st);
}

ab_status_t ab__store_commit(ab_store_t *st, ab_error_t *err)
{
    ab_status_t s = ab__store_check_writer(st, true, err);
    if (s != AB_OK)
        return s;
    s = write_batch(st, err);
    st->in_txn = false;
    if (s != AB_OK) {
        if (!sqlite3_get_autocommit(st->db))
            ab__store_run_q(st, Q_ROLLBACK, "rollback", NULL);
        ab__store_cache_clear(st);              /* rowids of this batch's new runs are gone */
        ab__store_tails_forget(st->tails_view); /* store_tails.c invariant 7 */
        st->batch++;
        return s;
    }
    committed(st);
    st->ntouched = 0;
    st->nttouched = 0;
    st->nrecs = 0;
    st->batch++;
    return AB_OK;
}

/*
 * store_runs.c - claims, run heads and the head position of the event store.
 *
 * Invariants:
 *  1. A claim runs in its own IMMEDIATE transaction and never while a batch
 *     is open; it creates the run row (epoch 1) or bumps its epoch. The
 *     writer's run cache stays valid: a claim changes neither rowids nor
 *     last seqs of existing runs, a commit creates rows with an upsert and
 *     raises epochs with max().
 *  2. Heads are the runs row (epoch, state, times) plus the run's newest
 *     chunk (last seq and position), both written by the same commit.
 *  3. Every statement is reset (and its bindings cleared) before returning.
 */
#include "store_int.h"

#include <string.h>
#include <time.h>

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static ab_status_t exec_q(ab_store_t *st, int which, const char *what, ab_error_t *err)
{
    int rc = sqlite3_step(st->q[which]);
    ab__store_done(st->q[which]);
    if (rc == SQLITE_DONE || rc == SQLITE_ROW)
        return AB_OK;
    return ab__store_sqlerr(st, rc, what, err);
}

static ab_status_t claim_txn(ab_store_t *st, const char *t, size_t tl, const char *r, size_t rl,
                             uint64_t *epoch, uint64_t *last_seq, ab_error_t *err)
{
    sqlite3_stmt *q = st->q[Q_THREAD_PUT];
    sqlite3_bind_text(q, 1, t, (int)tl, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    sqlite3_int64 thread = rc == SQLITE_ROW ? sqlite3_column_int64(q, 0) : 0;
    ab__store_done(q);
    if (rc != SQLITE_ROW)
        return ab__store_sqlerr(st, rc, "thread", err);
    q = st->q[Q_CLAIM];
    sqlite3_bind_int64(q, 1, thread);
    sqlite3_bind_text(q, 2, t, (int)tl, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, r, (int)rl, SQLITE_STATIC);
    sqlite3_bind_int64(q, 4, now_us());
    rc = sqlite3_step(q);
    sqlite3_int64 run_rowid = 0;
    if (rc == SQLITE_ROW) {
        *epoch = (uint64_t)sqlite3_column_int64(q, 0);
        run_rowid = sqlite3_column_int64(q, 1);
    }
    ab__store_done(q);
    if (rc != SQLITE_ROW)
        return ab__store_sqlerr(st, rc, "claim", err);
    q = st->q[Q_RUN_LAST];
    sqlite3_bind_int64(q, 1, run_rowid);
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        *last_seq = (uint64_t)sqlite3_column_int64(q, 0);
    ab__store_done(q);
    return rc == SQLITE_ROW ? AB_OK : ab__store_sqlerr(st, rc, "claim", err);
}

ab_status_t ab__store_claim(ab_store_t *st, ab_str_t thread, ab_str_t run, uint64_t *epoch_out,
                            uint64_t *last_seq_out, ab_error_t *err)
{
    if (!st || st->readonly || st->in_txn)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store",
                            "store: claim needs a writer handle without an open transaction");
    ab_status_t s = ab__store_check_id(thread, "thread", err);
    if (s == AB_OK)
        s = ab__store_check_id(run, "run", err);
    if (s == AB_OK)
        s = exec_q(st, Q_BEGIN, "claim", err);
    if (s != AB_OK)
        return s;
    uint64_t epoch = 0, last_seq = 0;
    s = claim_txn(st, thread.ptr, thread.len, run.ptr, run.len, &epoch, &last_seq, err);
    if (s == AB_OK)
        s = exec_q(st, Q_COMMIT, "claim commit", err);
    if (s != AB_OK) {
        if (!sqlite3_get_autocommit(st->db))
            exec_q(st, Q_ROLLBACK, "rollback", NULL);
        return s;
    }
    if (epoch_out)
        *epoch_out = epoch;
    if (last_seq_out)
        *last_seq_out = last_seq;
    return AB_OK;
}

/* The index in @p table (1 .. n - 1) of the text in column @p col, 0 when NULL or empty;
 * -1 for any other text (damage: no writer stores it). */
static int text_index(const char *const *table, int n, sqlite3_stmt *q, int col)
{
    const unsigned char *t = sqlite3_column_text(q, col);
    if (t == NULL || *t == '\0')
        return 0;
    for (int i = 1; i < n; i++)
        if (strcmp(table[i], (const char *)t) == 0)
            return i;
    return -1;
}

/* Copy the id in column @p col into @p dst (AB_ID_MAX_BYTES + 1 bytes); false when it is
 * longer (damage: every id stored was checked). */
static bool copy_text(char *dst, sqlite3_stmt *q, int col)
{
    const unsigned char *t = sqlite3_column_text(q, col);
    size_t n = t ? strlen((const char *)t) : 0;
    bool fits = n <= AB_ID_MAX_BYTES;
    if (!fits)
        n = AB_ID_MAX_BYTES;
    memcpy(dst, t ? (const char *)t : "", n);
    dst[n] = '\0';
    return fits;
}

/* The head of the runs row @p q is on into @p out; AB_CORRUPT naming the run when a column
 * holds what no writer stores (an unknown status or outcome, a parent id too long). */
static ab_status_t fill_run(ab_store_t *st, sqlite3_stmt *q, ab_run_head_t *out, ab_error_t *err)
{
    bool ids = copy_text(out->thread, q, 0);
    ids = copy_text(out->run, q, 1) && ids;
    ids = copy_text(out->parent_run, q, 2) && ids;
    int status = text_index(ab__store_status_text, 4, q, 6);
    int outcome = text_index(ab__store_outcome_text, 4, q, 7);
    out->epoch = (uint64_t)sqlite3_column_int64(q, 3);
    out->last_seq = (uint64_t)sqlite3_column_int64(q, 4);
    out->last_pos = (uint64_t)sqlite3_column_int64(q, 5);
    out->status = status > 0 ? (ab_run_status_t)status : AB_RUN_STATUS_UNKNOWN;
    out->outcome = outcome > 0 ? (ab_agui_outcome_t)outcome : 0;
    out->started_us = sqlite3_column_int64(q, 8);
    out->ended_us = sqlite3_column_int64(q, 9);
    if (ids && status >= 0 && outcome >= 0)
        return AB_OK;
    if (!ids)
        return ab_error_set(err, AB_CORRUPT, "store",
                            "database %s is damaged: a run of thread %.64s has an id or a parent "
                            "run id over %d bytes (run %.64s)",
                            st->path, out->thread, AB_ID_MAX_BYTES, out->run);
    int col = status < 0 ? 6 : 7;
    const char *text = (const char *)sqlite3_column_text(q, col);
    return ab_error_set(err, AB_CORRUPT, "store",
                        "database %s is damaged: run %s of thread %s has the %s '%.64s'", st->path,
                        out->run, out->thread, col == 6 ? "status" : "outcome", text ? text : "");
}

/* The head of a run never seen: its ids, zeros, status UNKNOWN. */
static void unknown_run(ab_str_t thread, ab_str_t run, ab_run_head_t *out)
{
    memset(out, 0, sizeof *out);
    memcpy(out->thread, thread.ptr, thread.len);
    memcpy(out->run, run.ptr, run.len);
}

ab_status_t ab__store_head(ab_store_t *st, ab_str_t thread, ab_str_t run, ab_run_head_t *out,
                           ab_error_t *err)
{
    if (!st || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle or out");
    ab_status_t s = ab__store_check_id(thread, "thread", err);
    if (s == AB_OK)
        s = ab__store_check_id(run, "run", err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = st->q[Q_HEAD];
    sqlite3_bind_text(q, 1, thread.ptr, (int)thread.len, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, run.ptr, (int)run.len, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    s = rc == SQLITE_ROW ? fill_run(st, q, out, err) : AB_OK;
    ab__store_done(q);
    if (rc == SQLITE_DONE)
        unknown_run(thread, run, out);
    if (rc == SQLITE_ROW || rc == SQLITE_DONE)
        return s;
    return ab__store_sqlerr(st, rc, "head", err);
}

ab_status_t ab__store_thread_heads(ab_store_t *st, ab_str_t thread, ab_head_cb cb, void *ud,
                                   ab_error_t *err)
{
    if (!st)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle");
    ab_status_t s = ab__store_check_id(thread, "thread", err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = st->q[Q_RUNS_OF_THREAD];
    sqlite3_bind_text(q, 1, thread.ptr, (int)thread.len, SQLITE_STATIC);
    ab_run_head_t r;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if ((s = fill_run(st, q, &r, err)) != AB_OK)
            break;
        if (cb && cb(ud, &r) != 0) {
            rc = SQLITE_DONE;
            break;
        }
    }
    ab__store_done(q);
    if (s != AB_OK)
        return s;
    return rc == SQLITE_DONE ? AB_OK : ab__store_sqlerr(st, rc, "runs", err);
}

ab_status_t ab__store_head_pos(ab_store_t *st, uint64_t *pos_out, ab_error_t *err)
{
    if (!st || !pos_out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle or out");
    if (st->in_txn) {
        *pos_out = st->next_pos - 1; /* includes this handle's staged appends */
        return AB_OK;
    }
    sqlite3_stmt *q = st->q[Q_MAX_POS];
    int rc = sqlite3_step(q);
    uint64_t pos = rc == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(q, 0) : 0;
    ab__store_done(q);
    if (rc != SQLITE_ROW)
        return ab__store_sqlerr(st, rc, "head_pos", err);
    *pos_out = pos;
    return AB_OK;
}

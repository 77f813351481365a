/*
 * store_rw.c - appends, claims, reads and heads of the event store.
 *
 * Invariants:
 *  1. pos is assigned here, densely: at BEGIN IMMEDIATE the handle reads
 *     max(pos) under the write lock, so no other writer can interleave and
 *     positions are exactly the commit order (INTEGER PRIMARY KEY: appends
 *     go to the right edge of the table B-tree).
 *  2. Each append runs inside a SAVEPOINT: it is applied whole or not at
 *     all, and next_pos advances only when it succeeded.
 *  3. A failed COMMIT leaves no transaction open: it is rolled back whole.
 *  4. Every statement is reset (and its bindings cleared) before returning,
 *     so borrowed row pointers never outlive the callback and no read
 *     transaction is left open on a reader handle.
 */
#include "store_int.h"

#include <string.h>
#include <time.h>

static const char *const SQL[Q_COUNT_] = {
    [Q_BEGIN] = "BEGIN IMMEDIATE",
    [Q_COMMIT] = "COMMIT",
    [Q_ROLLBACK] = "ROLLBACK",
    [Q_SAVEPOINT] = "SAVEPOINT ab_append",
    [Q_RELEASE] = "RELEASE ab_append",
    [Q_ROLLBACK_TO] = "ROLLBACK TO ab_append",
    [Q_MAX_POS] = "SELECT coalesce(max(pos), 0) FROM events",
    [Q_THREAD_PUT] = "INSERT INTO threads(thread) VALUES(?1) ON CONFLICT(thread)"
                     " DO UPDATE SET thread = excluded.thread RETURNING rowid",
    [Q_RUN_GET] = "SELECT rowid, thread_rowid FROM runs WHERE thread = ?1 AND run = ?2",
    [Q_RUN_NEW] = "INSERT INTO runs(thread_rowid, thread, run, epoch, started_us)"
                  " VALUES(?1, ?2, ?3, ?4, ?5)",
    [Q_EV_INSERT] = "INSERT INTO events(pos, run_rowid, thread_rowid, seq, commit_us, bytes)"
                    " VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
    [Q_RUN_UPDATE] = "UPDATE runs SET last_seq = max(last_seq, ?2), last_pos = ?3,"
                     " epoch = max(epoch, ?4), status = coalesce(?5, status),"
                     " outcome = coalesce(?6, outcome), parent_run = coalesce(?7, parent_run),"
                     " ended_us = CASE WHEN ?5 IN ('finished', 'errored') THEN ?8"
                     " ELSE ended_us END WHERE rowid = ?1",
    [Q_CLAIM] = "INSERT INTO runs(thread_rowid, thread, run, epoch, started_us)"
                " VALUES(?1, ?2, ?3, 1, ?4) ON CONFLICT(thread, run)"
                " DO UPDATE SET epoch = epoch + 1 RETURNING epoch, last_seq",
    [Q_READ_RUN] = "SELECT e.pos, e.seq, e.commit_us, e.bytes, r.thread, r.run"
                   " FROM runs r JOIN events e ON e.run_rowid = r.rowid"
                   " WHERE r.thread = ?1 AND r.run = ?2 AND e.seq > ?3 ORDER BY e.seq LIMIT ?4",
    [Q_READ_THREAD] = "SELECT e.pos, e.seq, e.commit_us, e.bytes, r.thread, r.run"
                      " FROM events e JOIN runs r ON r.rowid = e.run_rowid"
                      " WHERE e.thread_rowid = (SELECT rowid FROM threads WHERE thread = ?1)"
                      " AND e.pos > ?2 ORDER BY e.pos LIMIT ?3",
    [Q_READ_ALL] = "SELECT e.pos, e.seq, e.commit_us, e.bytes, r.thread, r.run"
                   " FROM events e JOIN runs r ON r.rowid = e.run_rowid"
                   " WHERE e.pos > ?1 ORDER BY e.pos LIMIT ?2",
    [Q_HEAD] = "SELECT thread, run, coalesce(parent_run, ''), epoch, last_seq, last_pos, status,"
               " coalesce(outcome, ''), started_us, coalesce(ended_us, 0)"
               " FROM runs WHERE thread = ?1 AND run = ?2",
    [Q_RUNS_OF_THREAD] = "SELECT thread, run, coalesce(parent_run, ''), epoch, last_seq,"
                         " last_pos, status, coalesce(outcome, ''), started_us,"
                         " coalesce(ended_us, 0) FROM runs WHERE thread = ?1 ORDER BY rowid",
};

static const char *const STATUS_TEXT[] = {NULL, "active", "finished", "errored"};
static const char *const OUTCOME_TEXT[] = {NULL, "success", "interrupt", "cancelled"};

ab_status_t ab_store_prepare_(ab_store_t *st, ab_error_t *err)
{
    for (int i = 0; i < Q_COUNT_; i++) {
        int rc = sqlite3_prepare_v3(st->db, SQL[i], -1, SQLITE_PREPARE_PERSISTENT, &st->q[i], NULL);
        if (rc != SQLITE_OK)
            return ab_store_sqlerr_(st, rc, "prepare", err);
    }
    return AB_OK;
}

static void done(sqlite3_stmt *q)
{
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
}

/* Step a statement that returns no row (or whose row is ignored) and reset it. */
static ab_status_t run_q(ab_store_t *st, int which, const char *what, ab_error_t *err)
{
    int rc = sqlite3_step(st->q[which]);
    done(st->q[which]);
    if (rc == SQLITE_DONE || rc == SQLITE_ROW)
        return AB_OK;
    return ab_store_sqlerr_(st, rc, what, err);
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static sqlite3_int64 clamp64(uint64_t v)
{
    return v > (uint64_t)INT64_MAX ? INT64_MAX : (sqlite3_int64)v;
}

static ab_status_t check_id(const char *id, size_t len, const char *field, ab_error_t *err)
{
    if (!id || len == 0 || len > AB_ID_MAX_BYTES)
        return ab_error_set(err, AB_INVALID_ARGUMENT, field, "store: %s id must be 1..%d bytes",
                            field, AB_ID_MAX_BYTES);
    return AB_OK;
}

static ab_status_t check_writer(ab_store_t *st, bool want_txn, ab_error_t *err)
{
    if (!st)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle");
    if (st->readonly)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: handle is read-only");
    if (st->in_txn != want_txn)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store",
                            want_txn ? "store: no transaction is open"
                                     : "store: a transaction is already open");
    return AB_OK;
}

ab_status_t ab_store_begin(ab_store_t *st, ab_error_t *err)
{
    ab_status_t s = check_writer(st, false, err);
    if (s != AB_OK)
        return s;
    s = run_q(st, Q_BEGIN, "begin", err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = st->q[Q_MAX_POS];
    int rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) {
        done(q);
        s = ab_store_sqlerr_(st, rc, "begin", err);
        run_q(st, Q_ROLLBACK, "rollback", NULL);
        return s;
    }
    st->next_pos = (uint64_t)sqlite3_column_int64(q, 0) + 1;
    done(q);
    st->in_txn = true;
    return AB_OK;
}

/* Ensure the thread row exists; *rowid receives its rowid. */
static ab_status_t thread_put(ab_store_t *st, const char *t, size_t tl, sqlite3_int64 *rowid,
                              ab_error_t *err)
{
    sqlite3_stmt *q = st->q[Q_THREAD_PUT];
    sqlite3_bind_text(q, 1, t, (int)tl, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        *rowid = sqlite3_column_int64(q, 0);
    done(q);
    return rc == SQLITE_ROW ? AB_OK : ab_store_sqlerr_(st, rc, "thread", err);
}

/* Find or create the run's row: rowids of the run and its thread. */
static ab_status_t run_get(ab_store_t *st, const ab_store_event_t *ev, sqlite3_int64 *run_rowid,
                           sqlite3_int64 *thread_rowid, ab_error_t *err)
{
    sqlite3_stmt *q = st->q[Q_RUN_GET];
    sqlite3_bind_text(q, 1, ev->thread, (int)ev->thread_len, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, ev->run, (int)ev->run_len, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        *run_rowid = sqlite3_column_int64(q, 0);
        *thread_rowid = sqlite3_column_int64(q, 1);
    }
    done(q);
    if (rc == SQLITE_ROW)
        return AB_OK;
    if (rc != SQLITE_DONE)
        return ab_store_sqlerr_(st, rc, "run lookup", err);
    ab_status_t s = thread_put(st, ev->thread, ev->thread_len, thread_rowid, err);
    if (s != AB_OK)
        return s;
    q = st->q[Q_RUN_NEW];
    sqlite3_bind_int64(q, 1, *thread_rowid);
    sqlite3_bind_text(q, 2, ev->thread, (int)ev->thread_len, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, ev->run, (int)ev->run_len, SQLITE_STATIC);
    sqlite3_bind_int64(q, 4, clamp64(ev->epoch));
    sqlite3_bind_int64(q, 5, ev->commit_us);
    s = run_q(st, Q_RUN_NEW, "run create", err);
    *run_rowid = sqlite3_last_insert_rowid(st->db);
    return s;
}

static ab_status_t insert_event(ab_store_t *st, const ab_store_event_t *ev, sqlite3_int64 run,
                                sqlite3_int64 thread, ab_error_t *err)
{
    sqlite3_stmt *q = st->q[Q_EV_INSERT];
    sqlite3_bind_int64(q, 1, (sqlite3_int64)st->next_pos);
    sqlite3_bind_int64(q, 2, run);
    sqlite3_bind_int64(q, 3, thread);
    sqlite3_bind_int64(q, 4, clamp64(ev->seq));
    sqlite3_bind_int64(q, 5, ev->commit_us);
    sqlite3_bind_blob64(q, 6, ev->len ? ev->bytes : "", ev->len, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    done(q);
    if (rc == SQLITE_DONE)
        return AB_OK;
    if ((rc & 0xff) == SQLITE_CONSTRAINT) {
        ab_error_set(err, AB_CONFLICT, "seq", "run %.*s already has seq %llu", (int)ev->run_len,
                     ev->run, (unsigned long long)ev->seq);
        ab_error_detail_int(err, "seq", clamp64(ev->seq));
        return AB_CONFLICT;
    }
    return ab_store_sqlerr_(st, rc, "append", err);
}

static ab_status_t update_run(ab_store_t *st, const ab_store_event_t *ev, sqlite3_int64 run,
                              ab_error_t *err)
{
    sqlite3_stmt *q = st->q[Q_RUN_UPDATE];
    sqlite3_bind_int64(q, 1, run);
    sqlite3_bind_int64(q, 2, clamp64(ev->seq));
    sqlite3_bind_int64(q, 3, (sqlite3_int64)st->next_pos);
    sqlite3_bind_int64(q, 4, clamp64(ev->epoch));
    if (ev->status > AB_RUN_STATUS_UNKNOWN && ev->status <= AB_RUN_STATUS_ERRORED)
        sqlite3_bind_text(q, 5, STATUS_TEXT[ev->status], -1, SQLITE_STATIC);
    if (ev->outcome > AB_OUTCOME_NONE && ev->outcome <= AB_OUTCOME_CANCELLED)
        sqlite3_bind_text(q, 6, OUTCOME_TEXT[ev->outcome], -1, SQLITE_STATIC);
    if (ev->parent_run)
        sqlite3_bind_text(q, 7, ev->parent_run, (int)ev->parent_run_len, SQLITE_STATIC);
    sqlite3_bind_int64(q, 8, ev->commit_us);
    return run_q(st, Q_RUN_UPDATE, "run update", err);
}

static ab_status_t check_event(const ab_store_event_t *ev, ab_error_t *err)
{
    if (!ev)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "event", "store: NULL event");
    ab_status_t s = check_id(ev->thread, ev->thread_len, "thread", err);
    if (s == AB_OK)
        s = check_id(ev->run, ev->run_len, "run", err);
    if (s == AB_OK && ev->parent_run)
        s = check_id(ev->parent_run, ev->parent_run_len, "parent_run", err);
    if (s == AB_OK && ((!ev->bytes && ev->len) || ev->len > (size_t)INT32_MAX))
        s = ab_error_set(err, AB_INVALID_ARGUMENT, "bytes", "store: bad event bytes");
    return s;
}

ab_status_t ab_store_append(ab_store_t *st, const ab_store_event_t *ev, uint64_t *pos_out,
                            ab_error_t *err)
{
    ab_status_t s = check_writer(st, true, err);
    if (s == AB_OK)
        s = check_event(ev, err);
    if (s != AB_OK)
        return s;
    s = run_q(st, Q_SAVEPOINT, "savepoint", err);
    if (s != AB_OK)
        return s;
    sqlite3_int64 run = 0, thread = 0;
    s = run_get(st, ev, &run, &thread, err);
    if (s == AB_OK)
        s = insert_event(st, ev, run, thread, err);
    if (s == AB_OK)
        s = update_run(st, ev, run, err);
    if (s != AB_OK) {
        run_q(st, Q_ROLLBACK_TO, "rollback to", NULL);
        run_q(st, Q_RELEASE, "release", NULL);
        return s;
    }
    s = run_q(st, Q_RELEASE, "release", err);
    if (s != AB_OK)
        return s;
    if (pos_out)
        *pos_out = st->next_pos;
    st->next_pos++;
    return AB_OK;
}

ab_status_t ab_store_commit(ab_store_t *st, ab_error_t *err)
{
    ab_status_t s = check_writer(st, true, err);
    if (s != AB_OK)
        return s;
    s = run_q(st, Q_COMMIT, "commit", err);
    if (s != AB_OK && !sqlite3_get_autocommit(st->db))
        run_q(st, Q_ROLLBACK, "rollback", NULL);
    st->in_txn = false;
    return s;
}

void ab_store_rollback(ab_store_t *st)
{
    if (!st || !st->in_txn)
        return;
    if (!sqlite3_get_autocommit(st->db))
        run_q(st, Q_ROLLBACK, "rollback", NULL);
    st->in_txn = false;
}

static ab_status_t claim_txn(ab_store_t *st, const char *t, size_t tl, const char *r, size_t rl,
                             uint64_t *epoch, uint64_t *last_seq, ab_error_t *err)
{
    sqlite3_int64 thread = 0;
    ab_status_t s = thread_put(st, t, tl, &thread, err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = st->q[Q_CLAIM];
    sqlite3_bind_int64(q, 1, thread);
    sqlite3_bind_text(q, 2, t, (int)tl, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, r, (int)rl, SQLITE_STATIC);
    sqlite3_bind_int64(q, 4, now_us());
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        *epoch = (uint64_t)sqlite3_column_int64(q, 0);
        *last_seq = (uint64_t)sqlite3_column_int64(q, 1);
    }
    done(q);
    return rc == SQLITE_ROW ? AB_OK : ab_store_sqlerr_(st, rc, "claim", err);
}

ab_status_t ab_store_claim(ab_store_t *st, const char *thread, size_t thread_len, const char *run,
                           size_t run_len, uint64_t *epoch_out, uint64_t *last_seq_out,
                           ab_error_t *err)
{
    ab_status_t s = check_writer(st, false, err);
    if (s == AB_OK)
        s = check_id(thread, thread_len, "thread", err);
    if (s == AB_OK)
        s = check_id(run, run_len, "run", err);
    if (s == AB_OK)
        s = run_q(st, Q_BEGIN, "claim", err);
    if (s != AB_OK)
        return s;
    uint64_t epoch = 0, last_seq = 0;
    s = claim_txn(st, thread, thread_len, run, run_len, &epoch, &last_seq, err);
    if (s == AB_OK)
        s = run_q(st, Q_COMMIT, "claim commit", err);
    if (s != AB_OK) {
        if (!sqlite3_get_autocommit(st->db))
            run_q(st, Q_ROLLBACK, "rollback", NULL);
        return s;
    }
    if (epoch_out)
        *epoch_out = epoch;
    if (last_seq_out)
        *last_seq_out = last_seq;
    return AB_OK;
}

/* Step a read statement, delivering rows; always resets it. */
static ab_status_t deliver(ab_store_t *st, sqlite3_stmt *q, ab_store_row_cb cb, void *ud,
                           size_t *delivered, ab_error_t *err)
{
    size_t n = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        ab_store_row_t row = {
            .pos = (uint64_t)sqlite3_column_int64(q, 0),
            .seq = (uint64_t)sqlite3_column_int64(q, 1),
            .commit_us = sqlite3_column_int64(q, 2),
            .bytes = sqlite3_column_blob(q, 3),
            .len = (size_t)sqlite3_column_bytes(q, 3),
            .thread = (const char *)sqlite3_column_text(q, 4),
            .run = (const char *)sqlite3_column_text(q, 5),
        };
        n++;
        if (cb && cb(ud, &row) != 0) {
            rc = SQLITE_DONE;
            break;
        }
    }
    done(q);
    if (rc != SQLITE_DONE)
        return ab_store_sqlerr_(st, rc, "read", err);
    if (delivered)
        *delivered = n;
    return AB_OK;
}

static sqlite3_int64 limit64(uint32_t limit)
{
    return limit == 0 ? -1 : (sqlite3_int64)limit;
}

ab_status_t ab_store_read_run(ab_store_t *st, const char *thread, size_t thread_len,
                              const char *run, size_t run_len, uint64_t after_seq, uint32_t limit,
                              ab_store_row_cb cb, void *ud, size_t *delivered, ab_error_t *err)
{
    if (!st)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle");
    ab_status_t s = check_id(thread, thread_len, "thread", err);
    if (s == AB_OK)
        s = check_id(run, run_len, "run", err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = st->q[Q_READ_RUN];
    sqlite3_bind_text(q, 1, thread, (int)thread_len, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, run, (int)run_len, SQLITE_STATIC);
    sqlite3_bind_int64(q, 3, clamp64(after_seq));
    sqlite3_bind_int64(q, 4, limit64(limit));
    return deliver(st, q, cb, ud, delivered, err);
}

ab_status_t ab_store_read_thread(ab_store_t *st, const char *thread, size_t thread_len,
                                 uint64_t after_pos, uint32_t limit, ab_store_row_cb cb, void *ud,
                                 size_t *delivered, ab_error_t *err)
{
    if (!st)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle");
    ab_status_t s = check_id(thread, thread_len, "thread", err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = st->q[Q_READ_THREAD];
    sqlite3_bind_text(q, 1, thread, (int)thread_len, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, clamp64(after_pos));
    sqlite3_bind_int64(q, 3, limit64(limit));
    return deliver(st, q, cb, ud, delivered, err);
}

ab_status_t ab_store_read_all(ab_store_t *st, uint64_t after_pos, uint32_t limit,
                              ab_store_row_cb cb, void *ud, size_t *delivered, ab_error_t *err)
{
    if (!st)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle");
    sqlite3_stmt *q = st->q[Q_READ_ALL];
    sqlite3_bind_int64(q, 1, clamp64(after_pos));
    sqlite3_bind_int64(q, 2, limit64(limit));
    return deliver(st, q, cb, ud, delivered, err);
}

static int text_index(const char *const *table, int n, const unsigned char *t)
{
    for (int i = 1; t && i < n; i++)
        if (strcmp(table[i], (const char *)t) == 0)
            return i;
    return 0;
}

static void copy_text(char *dst, sqlite3_stmt *q, int col)
{
    const unsigned char *t = sqlite3_column_text(q, col);
    size_t n = t ? strlen((const char *)t) : 0;
    if (n > AB_ID_MAX_BYTES)
        n = AB_ID_MAX_BYTES;
    memcpy(dst, t ? (const char *)t : "", n);
    dst[n] = '\0';
}

static void fill_run(sqlite3_stmt *q, ab_store_run_t *out)
{
    copy_text(out->thread, q, 0);
    copy_text(out->run, q, 1);
    copy_text(out->parent_run, q, 2);
    out->epoch = (uint64_t)sqlite3_column_int64(q, 3);
    out->last_seq = (uint64_t)sqlite3_column_int64(q, 4);
    out->last_pos = (uint64_t)sqlite3_column_int64(q, 5);
    out->status = (ab_run_status_t)text_index(STATUS_TEXT, 4, sqlite3_column_text(q, 6));
    out->outcome = (ab_agui_outcome_t)text_index(OUTCOME_TEXT, 4, sqlite3_column_text(q, 7));
    out->started_us = sqlite3_column_int64(q, 8);
    out->ended_us = sqlite3_column_int64(q, 9);
}

ab_status_t ab_store_head(ab_store_t *st, const char *thread, size_t thread_len, const char *run,
                          size_t run_len, ab_store_run_t *out, ab_error_t *err)
{
    if (!st || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle or out");
    ab_status_t s = check_id(thread, thread_len, "thread", err);
    if (s == AB_OK)
        s = check_id(run, run_len, "run", err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = st->q[Q_HEAD];
    sqlite3_bind_text(q, 1, thread, (int)thread_len, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, run, (int)run_len, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        fill_run(q, out);
    done(q);
    if (rc == SQLITE_ROW)
        return AB_OK;
    if (rc == SQLITE_DONE)
        return ab_error_set(err, AB_NOT_FOUND, "run", "no run %.*s in thread %.*s", (int)run_len,
                            run, (int)thread_len, thread);
    return ab_store_sqlerr_(st, rc, "head", err);
}

ab_status_t ab_store_runs_of_thread(ab_store_t *st, const char *thread, size_t thread_len,
                                    ab_store_run_cb cb, void *ud, size_t *delivered,
                                    ab_error_t *err)
{
    if (!st)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle");
    ab_status_t s = check_id(thread, thread_len, "thread", err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = st->q[Q_RUNS_OF_THREAD];
    sqlite3_bind_text(q, 1, thread, (int)thread_len, SQLITE_STATIC);
    ab_store_run_t r;
    size_t n = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        fill_run(q, &r);
        n++;
        if (cb && cb(ud, &r) != 0) {
            rc = SQLITE_DONE;
            break;
        }
    }
    done(q);
    if (rc != SQLITE_DONE)
        return ab_store_sqlerr_(st, rc, "runs", err);
    if (delivered)
        *delivered = n;
    return AB_OK;
}

ab_status_t ab_store_head_pos(ab_store_t *st, uint64_t *pos_out, ab_error_t *err)
{
    if (!st || !pos_out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle or out");
    sqlite3_stmt *q = st->q[Q_MAX_POS];
    int rc = sqlite3_step(q);
    uint64_t pos = rc == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(q, 0) : 0;
    done(q);
    if (rc != SQLITE_ROW)
        return ab_store_sqlerr_(st, rc, "head_pos", err);
    *pos_out = pos;
    return AB_OK;
}

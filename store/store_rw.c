/*
 * store_rw.c - the statements of the event store, opening a group commit and
 * staging its appends (the commit itself: store_commit.c).
 *
 * Invariants:
 *  1. pos is assigned densely: at BEGIN IMMEDIATE the handle reads the
 *     highest stored position under the write lock (one indexed lookup per
 *     batch), so positions are exactly the commit order.
 *  2. ab__store_append() only stages: it checks the event (ids, seq strictly
 *     above the run's last seq, committed or staged) and records where its
 *     bytes are, without copying them (they are borrowed until commit or
 *     rollback); a refused event leaves the stage untouched. Nothing is
 *     written to SQLite before ab__store_commit().
 *  3. A run's last seq and position are those of its newest chunk, which
 *     its tail names (docs/STORE.md "Chains and anchors"), so the common
 *     batch updates no runs row at all.
 *  4. Every statement is reset (and its bindings cleared) before returning.
 *  5. A tail is read as AB__TAIL_OF (store_int.h): its logged tail if the
 *     logs hold one, else the main table's (docs/STORE.md "Tails in two
 *     levels"; store_tails.c writes, reads and merges the logs).
 *  6. A begin that finds another connection wrote since this handle's last
 *     commit (PRAGMA data_version) counts the logs again, inside its write
 *     lock: that writer may have filled or merged them.
 */
#include "ab_common.h"
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUNS_ROW_TAIL  AB__RUN_TAIL("runs.rowid")
#define R_TAIL         AB__RUN_TAIL("r.rowid")
#define T_TAIL         AB__THREAD_TAIL("t.rowid")
#define THREAD_TAIL_P1 AB__THREAD_TAIL("?1")
/* a runs row's status: NULL reads as 'active' once the run has events, else unknown (claimed
 * only) */
#define RUN_STATUS "coalesce(status, CASE WHEN " RUNS_ROW_TAIL " IS NOT NULL THEN 'active' END)"
/* A run's last seq and position live in its newest chunk, which its tail names. */
#define LAST_OF(col, run)                                                                          \
    "coalesce((SELECT c." col " FROM chunks c WHERE c.rowid = " AB__RUN_TAIL(run) "), 0)"
#define RUN_LAST_SEQ LAST_OF("last_seq", "runs.rowid")
#define RUN_LAST_POS LAST_OF("last_pos", "runs.rowid")
#define RUN_COLS                                                                                   \
    "thread, run, coalesce(parent_run, ''), epoch, " RUN_LAST_SEQ ", " RUN_LAST_POS                \
    ", " RUN_STATUS ", coalesce(outcome, ''), started_us, coalesce(ended_us, 0)"
/* a chunk's columns as the readers decode them (store_int.h AB__CK_*): r.rowid is NULL when the
 * chunk's run row is gone (an all read joins the runs with LEFT JOIN, to name that damage) */
#define CHUNK_COLS                                                                                 \
    "c.batch_first, c.data, r.thread, r.run, c.n, c.rowid, r.rowid, c.first_seq, c.last_seq,"      \
    " c.last_pos"
/* rowid of the first chunk of the commit holding position ?N + 1 */
#define START_ROWID(n)                                                                             \
    "coalesce((SELECT batch_first FROM chunks WHERE rowid <= ?" n " + 1"                           \
    " ORDER BY rowid DESC LIMIT 1), 0)"
#define LINK_COLS "run_rowid, prev_run, run_dist, last_seq, thread_rowid, prev_thread, thread_dist"
/* a chunk's columns as written (store_commit.c binds them in this order, data the 8th) */
#define CHUNK_INSERT_HEAD                                                                          \
    "INSERT INTO chunks(run_rowid, thread_rowid, first_seq, last_seq, batch_first, batch_last,"    \
    " n, data, rowid, last_pos, prev_run, run_dist, prev_thread, thread_dist)"

static const char *const SQL[Q_COUNT_] = {
    [Q_BEGIN] = "BEGIN IMMEDIATE",
    [Q_COMMIT] = "COMMIT",
    [Q_ROLLBACK] = "ROLLBACK",
    [Q_MAX_POS] = "SELECT coalesce((SELECT batch_last FROM chunks ORDER BY rowid DESC LIMIT 1), 0)",
    [Q_DATA_VERSION] = "PRAGMA data_version",
    [Q_THREAD_PUT] = "INSERT INTO threads(thread) VALUES(?1) ON CONFLICT(thread)"
                     " DO UPDATE SET thread = excluded.thread RETURNING rowid",
    /* a run's committed state, and its newest chunk with that chunk's distance */
    [Q_RUN_GET] = "SELECT r.rowid, r.thread_rowid, r.epoch, coalesce(c.last_seq, 0),"
                  " coalesce(c.rowid, 0), coalesce(c.run_dist, 0) FROM runs r"
                  " LEFT JOIN chunks c ON c.rowid = " R_TAIL " WHERE r.thread = ?1 AND r.run = ?2",
    [Q_THREAD_GET] = "SELECT rowid, thread_dist FROM chunks WHERE rowid = " AB__THREAD_TAIL("?1"),
    [Q_RUN_LAST] = "SELECT " LAST_OF("last_seq", "?1"),
    /* a new run's row with its batch's state: no UPDATE of it in the same commit */
    [Q_RUN_NEW] = "INSERT INTO runs(thread_rowid, thread, run, epoch, started_us, status, outcome,"
                  " parent_run, ended_us) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,"
                  " CASE WHEN ?6 IN ('finished', 'errored') THEN ?9 END)"
                  " ON CONFLICT(thread, run) DO UPDATE SET epoch = max(epoch, excluded.epoch),"
                  " status = coalesce(excluded.status, status),"
                  " outcome = coalesce(excluded.outcome, outcome),"
                  " parent_run = coalesce(excluded.parent_run, parent_run),"
                  " ended_us = coalesce(excluded.ended_us, ended_us) RETURNING rowid, epoch",
    [Q_CHUNK_INSERT] =
        CHUNK_INSERT_HEAD " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    [Q_RUN_UPDATE] = "UPDATE runs SET epoch = max(epoch, ?2), status = coalesce(?3, status),"
                     " outcome = coalesce(?4, outcome), parent_run = coalesce(?5, parent_run),"
                     " ended_us = CASE WHEN ?3 IN ('finished', 'errored') THEN ?6"
                     " ELSE ended_us END WHERE rowid = ?1",
    /* a claim's epoch is at least 2: 1 is the implicit epoch of a run written without a claim
     * (PROTOCOL.md 7.3), which every claim fences */
    [Q_CLAIM] = "INSERT INTO runs(thread_rowid, thread, run, epoch, started_us)"
                " VALUES(?1, ?2, ?3, 2, ?4) ON CONFLICT(thread, run)"
                " DO UPDATE SET epoch = max(epoch, 1) + 1 RETURNING epoch, rowid",
    [Q_READ_ALL] = "SELECT " CHUNK_COLS " FROM chunks c LEFT JOIN runs r ON r.rowid = c.run_rowid"
                   " WHERE c.rowid >= " START_ROWID("1") " ORDER BY c.rowid",
    [Q_RUN_ROWID] = "SELECT rowid FROM runs WHERE thread = ?1 AND run = ?2",
    [Q_THREAD_ROWID] = "SELECT rowid, " START_ROWID("2") " FROM threads WHERE thread = ?1",
    /* the partial indexes: a term run_dist = 0 (thread_dist = 0) lets the planner use them */
    [Q_RUN_ANCHOR] = "SELECT rowid, last_seq FROM chunks INDEXED BY chunks_by_run"
                     " WHERE run_rowid = ?1 AND run_dist = 0 AND last_seq > ?2"
                     " ORDER BY last_seq LIMIT 1",
    [Q_THREAD_ANCHOR] = "SELECT rowid, rowid FROM chunks INDEXED BY chunks_by_thread"
                        " WHERE thread_rowid = ?1 AND thread_dist = 0 AND rowid > ?2"
                        " ORDER BY rowid LIMIT 1",
    /* NULL (no tail: an empty chain, store_walk.c invariant 7) when the run or thread has no
     * chunk */
    [Q_RUN_TAIL] = "SELECT " AB__RUN_TAIL("?1"),
    [Q_THREAD_TAIL] = "SELECT " AB__THREAD_TAIL("?1"),
    [Q_CHUNK_LINK] = "SELECT " LINK_COLS " FROM chunks WHERE rowid = ?1",
    [Q_RUN_ANCHOR_BELOW] = "SELECT rowid FROM chunks INDEXED BY chunks_by_run"
                           " WHERE run_rowid = ?1 AND run_dist = 0 AND last_seq <= ?2"
                           " ORDER BY last_seq DESC LIMIT 1",
    /* a damaged chain's repair (store_walk.c invariant 5): a range of the table, scanned */
    [Q_RUN_RANGE] = "SELECT rowid FROM chunks WHERE rowid > ?1 AND rowid < ?2"
                    " AND run_rowid = ?3 AND last_seq > ?4 ORDER BY rowid",
    [Q_THREAD_RANGE] = "SELECT rowid FROM chunks WHERE rowid > ?1 AND rowid < ?2"
                       " AND thread_rowid = ?3 AND ?4 = ?4 ORDER BY rowid",
    /* store_walk.c invariant 6: a thread's chunks in (?1, ?2], rowid order, with distances */
    [Q_THREAD_SEG] = "SELECT rowid, thread_dist FROM chunks WHERE rowid > ?1 AND rowid <= ?2"
                     " AND thread_rowid = ?3 ORDER BY rowid",
    /* store_read.c: the records of a scanned segment from ?1 (excluded) to ?2, as
     * Q_CHUNK_DATA gives them; the chunks drive the join */
    [Q_THREAD_SEG_DATA] = "SELECT " CHUNK_COLS ", r.thread_rowid = c.thread_rowid"
                          " FROM chunks c CROSS JOIN runs r ON r.rowid = c.run_rowid"
                          " WHERE c.rowid > ?1 AND c.rowid <= ?2 AND c.thread_rowid = ?3"
                          " ORDER BY c.rowid",
    /* AB__CK_SAME_THREAD: whether the chunk's thread is its run's (a thread read checks it) */
    [Q_CHUNK_DATA] = "SELECT " CHUNK_COLS ", r.thread_rowid = c.thread_rowid FROM chunks c"
                     " JOIN runs r ON r.rowid = c.run_rowid WHERE c.rowid = ?1",
    [Q_HEAD] = "SELECT " RUN_COLS " FROM runs WHERE thread = ?1 AND run = ?2",
    [Q_RUNS_OF_THREAD] = "SELECT " RUN_COLS " FROM runs WHERE thread = ?1 ORDER BY rowid",
    /* store_threads.c: ?1 the lower bound (included), ?2 the upper (excluded), ?3 the cursor */
    [Q_THREADS_LIST] =
        "SELECT t.rowid, t.thread FROM threads t INDEXED BY sqlite_autoindex_threads_1"
        " WHERE t.thread >= ?1 AND t.thread < ?2 AND t.thread <> ?3"
        " AND " T_TAIL " IS NOT NULL ORDER BY t.thread LIMIT ?4",
    /* ?1 the thread's rowid, ?2 its id: runs, of which active (as RUN_COLS), newest event:
     * the highest last_pos of the thread's chunks in its newest chunk's commit, found by
     * walking its chain back from the tail while in that commit (links only ever point to
     * lower rowids, so the walk ends on any data) */
    [Q_THREAD_FIGURES] =
        "WITH RECURSIVE w(id, bf) AS (SELECT c.rowid, c.batch_first FROM chunks c"
        " WHERE c.rowid = " THREAD_TAIL_P1
        " UNION ALL SELECT c.prev_thread, w.bf FROM w JOIN chunks c ON c.rowid = w.id"
        " WHERE c.prev_thread >= w.bf AND c.prev_thread < w.id)"
        " SELECT (SELECT count(*) FROM runs WHERE thread = ?2),"
        " (SELECT count(*) FROM runs WHERE thread = ?2 AND " RUN_STATUS " = 'active'),"
        " c.last_pos, r.run FROM w JOIN chunks c ON c.rowid = w.id JOIN runs r"
        " ON r.rowid = c.run_rowid ORDER BY c.last_pos DESC LIMIT 1",
    /* store_tails.c: the logs of recent tails and their merge into the main tables */
    [Q_TAILS_RECENT] = "SELECT coalesce(sum(runs), 0), coalesce(sum(threads), 0), count(*)"
                       " FROM tails_gens",
    [Q_TAILS_GEN_PUT] = "INSERT INTO tails_gens(gen, runs, threads) VALUES(?1, ?2, ?3)",
    [Q_RUN_TAILS_LOG] = "INSERT INTO run_tails_log(gen, first, tails) VALUES(?1, ?2, ?3)",
    [Q_THREAD_TAILS_LOG] = "INSERT INTO thread_tails_log(gen, first, tails) VALUES(?1, ?2, ?3)",
    [Q_RUN_TAILS_READ] = "SELECT first, tails FROM run_tails_log",
    [Q_THREAD_TAILS_READ] = "SELECT first, tails FROM thread_tails_log",
    [Q_RUN_TAILS_CLEAR] = "DELETE FROM run_tails_log",
    [Q_THREAD_TAILS_CLEAR] = "DELETE FROM thread_tails_log",
    [Q_TAILS_GENS_CLEAR] = "DELETE FROM tails_gens",
};

const char *const ab__store_status_text[4] = {NULL, "active", "finished", "errored"};
const char *const ab__store_outcome_text[4] = {NULL, "success", "interrupt", "cancelled"};

/* The statements of many rows at once (Q_*_N): @p head, then AB_STORE_ROWS_PER_INSERT times
 * @p row joined by commas, then @p tail; NULL when out of memory. */
static char *rows_sql(const char *head, const char *row, const char *tail)
{
    size_t hl = strlen(head), rl = strlen(row), tl = strlen(tail);
    char *sql = malloc(hl + AB_STORE_ROWS_PER_INSERT * (rl + 1) + tl + 1), *p = sql;
    if (!sql)
        return NULL;
    memcpy(p, head, hl);
    p += hl;
    for (int i = 0; i < AB_STORE_ROWS_PER_INSERT; i++) {
        if (i > 0)
            *p++ = ',';
        memcpy(p, row, rl);
        p += rl;
    }
    memcpy(p, tail, tl + 1);
    return sql;
}

/* The upsert of tails Q_TAIL_PUT + @p k (AB_TAIL_Q): one row, or AB_STORE_ROWS_PER_INSERT. */
static char *tail_put_sql(int k)
{
    static const char *const heads[2] = {
        "INSERT INTO run_tails(rowid, chunk) VALUES",
        "INSERT INTO thread_tails(rowid, chunk) VALUES",
    };
    if (k % 2)
        return rows_sql(heads[k / 2], "(?,?)", AB__TAIL_UPSERT);
    size_t n = strlen(heads[k / 2]) + sizeof "(?1, ?2)" AB__TAIL_UPSERT;
    char *sql = malloc(n);
    if (sql)
        snprintf(sql, n, "%s(?1, ?2)" AB__TAIL_UPSERT, heads[k / 2]);
    return sql;
}

/* Prepare a statement SQL[] leaves NULL: built here (Q_CHUNK_INSERT_N, the upserts of tails). */
static ab_status_t prepare_rows(ab_store_t *st, int which, ab_error_t *err)
{
    char *sql = NULL;
    if (which == Q_CHUNK_INSERT_N)
        sql = rows_sql(CHUNK_INSERT_HEAD " VALUES", "(?,?,?,?,?,?,?,?,?,?,?,?,?,?)", "");
    else
        sql = tail_put_sql(which - Q_TAIL_PUT);
    if (!sql)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory (prepare)");
    int rc = sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st->q[which], NULL);
    free(sql);
    return rc == SQLITE_OK ? AB_OK : ab__store_sqlerr(st, rc, "prepare", err);
}

ab_status_t ab__store_prepare(ab_store_t *st, ab_error_t *err)
{
    if (ab__store_tails_register(st->db, &st->tails_view) != AB_OK)
        return ab__store_sqlerr(st, SQLITE_NOMEM, "register ab_logged_tail", err);
    for (int i = 0; i < Q_COUNT_; i++) {
        if (SQL[i] == NULL) { /* built by prepare_rows */
            ab_status_t s = prepare_rows(st, i, err);
            if (s != AB_OK)
                return s;
            continue;
        }
        int rc = sqlite3_prepare_v3(st->db, SQL[i], -1, SQLITE_PREPARE_PERSISTENT, &st->q[i], NULL);
        if (rc != SQLITE_OK)
            return ab__store_sqlerr(st, rc, "prepare", err);
    }
    st->data_version = -1;
    return AB_OK;
}

void ab__store_done(sqlite3_stmt *q)
{
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
}

ab_status_t ab__store_read_begin(ab_store_t *st, bool *own, const char *what, ab_error_t *err)
{
    *own = sqlite3_get_autocommit(st->db) != 0;
    if (!*own)
        return AB_OK;
    ab__store_gate_pass(st); /* store_file.c invariant 5 */
    int rc = sqlite3_exec(st->db, "BEGIN", NULL, NULL, NULL);
    return rc == SQLITE_OK ? AB_OK : ab__store_sqlerr(st, rc, what, err);
}

void ab__store_read_end(ab_store_t *st, bool own)
{
    if (own)
        sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL); /* a read: nothing to lose */
}

/* Step a statement that returns no row (or whose row is ignored) and reset it. */
ab_status_t ab__store_run_q(ab_store_t *st, int which, const char *what, ab_error_t *err)
{
    int rc = sqlite3_step(st->q[which]);
    ab__store_done(st->q[which]);
    if (rc == SQLITE_DONE || rc == SQLITE_ROW)
        return AB_OK;
    return ab__store_sqlerr(st, rc, what, err);
}

/* Step a one-row statement returning an integer in column 0; reset it. */
ab_status_t ab__store_int_q(ab_store_t *st, int which, const char *what, sqlite3_int64 *out,
                            ab_error_t *err)
{
    sqlite3_stmt *q = st->q[which];
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(q, 0);
    ab__store_done(q);
    return rc == SQLITE_ROW ? AB_OK : ab__store_sqlerr(st, rc, what, err);
}

sqlite3_int64 ab__store_i64(uint64_t v)
{
    return v > (uint64_t)INT64_MAX ? INT64_MAX : (sqlite3_int64)v;
}

ab_status_t ab__store_check_id(ab_str_t id, const char *field, ab_error_t *err)
{
    if (!id.ptr || id.len == 0 || id.len > AB_ID_MAX_BYTES)
        return ab_error_set(err, AB_INVALID_ARGUMENT, field, "store: %s id must be 1..%d bytes",
                            field, AB_ID_MAX_BYTES);
    return AB_OK;
}

ab_status_t ab__store_check_writer(ab_store_t *st, bool want_txn, ab_error_t *err)
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

ab_status_t ab__store_begin(ab_store_t *st, int64_t commit_us, ab_error_t *err)
{
    ab_status_t s = ab__store_check_writer(st, false, err);
    if (s == AB_OK)
        s = ab__store_run_q(st, Q_BEGIN, "begin", err);
    if (s != AB_OK)
        return s;
    sqlite3_int64 version = 0, max_pos = 0;
    s = ab__store_int_q(st, Q_DATA_VERSION, "begin", &version, err);
    if (s == AB_OK)
        s = ab__store_int_q(st, Q_MAX_POS, "begin", &max_pos, err);
    if (s == AB_OK && version != st->data_version)
        s = ab__store_tails_count(st, err); /* invariant 6 */
    if (s != AB_OK) {
        ab__store_run_q(st, Q_ROLLBACK, "rollback", NULL);
        return s;
    }
    if (version != st->data_version || st->nruns > RUN_CACHE_MAX || st->nthreads > RUN_CACHE_MAX)
        ab__store_cache_clear(st); /* another connection wrote: the cache may be stale */
    st->data_version = version;
    st->next_pos = (uint64_t)max_pos + 1;
    st->batch_first = st->next_pos;
    st->batch++;
    st->commit_us = commit_us;
    st->ntouched = 0;
    st->nrecs = 0;
    ab_buf_reset(&st->parents);
    st->in_txn = true;
    return AB_OK;
}

static ab_status_t check_event(const ab_append_event_t *ev, ab_error_t *err)
{
    if (!ev)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "event", "store: NULL event");
    ab_status_t s = ab__store_check_id(ev->thread, "thread", err);
    if (s == AB_OK)
        s = ab__store_check_id(ev->run, "run", err);
    if (s == AB_OK && ev->parent_run.ptr)
        s = ab__store_check_id(ev->parent_run, "parent_run", err);
    if (s == AB_OK && ((!ev->bytes && ev->len) || ev->len > (size_t)INT32_MAX))
        s = ab_error_set(err, AB_INVALID_ARGUMENT, "bytes", "store: bad event bytes");
    return s;
}

/* Make room for one more event of the batch (and one more touched run). */
static ab_status_t stage_reserve(ab_store_t *st, ab_error_t *err)
{
    stage_rec_t *r = ab__grow(st->recs, &st->recs_cap, st->nrecs + 1, sizeof *r, 1024);
    if (!r)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory (stage)");
    st->recs = r;
    run_ent_t **t = ab__grow(st->touched, &st->touched_cap, st->ntouched + 1, sizeof *t, 128);
    if (!t)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory (stage)");
    st->touched = t;
    return AB_OK;
}

/* First event of a run in this batch: reset its staging and list it. */
static void stage_start(ab_store_t *st, run_ent_t *e, const ab_append_event_t *ev)
{
    e->batch = st->batch;
    e->p_n = 0;
    e->p_bytes = 0;
    e->p_head = e->p_tail = -1;
    e->p_first_seq = ev->seq;
    e->p_first_pos = st->next_pos;
    e->p_epoch = ev->epoch;
    e->p_status = 0;
    e->p_outcome = 0;
    e->p_has_parent = false;
    e->p_started_us = st->commit_us;
    e->p_ended_us = 0;
    st->touched[st->ntouched++] = e;
}

/* Fold the event's run-state change into its run's staging. */
static void stage_state(ab_store_t *st, run_ent_t *e, const ab_append_event_t *ev)
{
    if (ev->epoch > e->p_epoch)
        e->p_epoch = ev->epoch;
    if (ev->status > AB_RUN_STATUS_UNKNOWN && ev->status <= AB_RUN_STATUS_ERRORED) {
        e->p_status = (int)ev->status;
        if (ev->status != AB_RUN_STATUS_ACTIVE)
            e->p_ended_us = st->commit_us;
    }
    if (ev->outcome > AB_OUTCOME_NONE && ev->outcome <= AB_OUTCOME_CANCELLED)
        e->p_outcome = (int)ev->outcome;
    if (ev->parent_run.ptr) { /* room reserved by ab__store_append */
        e->p_parent_off = (uint32_t)st->parents.len;
        memcpy(st->parents.data + st->parents.len, ev->parent_run.ptr, ev->parent_run.len);
        st->parents.len += ev->parent_run.len;
        e->p_parent_len = (uint32_t)ev->parent_run.len;
        e->p_has_parent = true;
    }
}

/* Remember where the event's bytes are (no copy) and link it to its run. */
static void stage_event(ab_store_t *st, run_ent_t *e, const ab_append_event_t *ev)
{
    int32_t i = (int32_t)st->nrecs++;
    st->recs[i] = (stage_rec_t){.bytes = ev->bytes,
                                .len = (uint32_t)ev->len,
                                .pos_off = (uint32_t)(st->next_pos - st->batch_first),
                                .seq = ev->seq,
                                .next = -1};
    if (e->p_tail >= 0)
        st->recs[e->p_tail].next = i;
    else
        e->p_head = i;
    e->p_tail = i;
    e->p_n++;
    e->p_bytes += CHUNK_HDR + ev->len;
    e->p_last_seq = ev->seq;
    e->p_last_pos = st->next_pos;
    stage_state(st, e, ev);
}

static ab_status_t seq_conflict(const ab_append_event_t *ev, uint64_t last, ab_error_t *err)
{
    ab_error_set(err, AB_CONFLICT, "seq", "run %.*s already has seq %llu (last seq %llu)",
                 (int)ev->run.len, ev->run.ptr, (unsigned long long)ev->seq,
                 (unsigned long long)last);
    ab_error_detail_int(err, "seq", ab__store_i64(ev->seq));
    ab_error_detail_int(err, "last_seq", ab__store_i64(last));
    return AB_CONFLICT;
}

/* ab__store_append() with the run cache's hash of the event's run given. */
static ab_status_t append_h(ab_store_t *st, const ab_append_event_t *ev, uint64_t hash,
                            uint64_t *pos_out, ab_error_t *err)
{
    ab_status_t s = ab__store_check_writer(st, true, err);
    if (s == AB_OK)
        s = check_event(ev, err);
    run_ent_t *e = NULL;
    if (s == AB_OK)
        s = ab__store_cache_get(st, ev->thread, ev->run, hash, &e, err);
    if (s != AB_OK)
        return s;
    bool fresh = e->batch != st->batch;
    uint64_t last = fresh ? e->last_seq : e->p_last_seq;
    if (ev->seq <= last)
        return seq_conflict(ev, last, err);
    if (st->next_pos - st->batch_first >= UINT32_MAX)
        return ab_error_set(err, AB_TOO_LARGE, "store", "store: batch too large");
    s = stage_reserve(st, err);
    if (s == AB_OK && ev->parent_run.ptr &&
        ab_buf_reserve(&st->parents, ev->parent_run.len) != AB_OK)
        s = ab_error_set(err, AB_NOMEM, "store", "out of memory (stage)");
    if (s != AB_OK)
        return s;
    if (fresh)
        stage_start(st, e, ev);
    stage_event(st, e, ev);
    if (pos_out)
        *pos_out = st->next_pos;
    st->next_pos++;
    return AB_OK;
}

ab_status_t ab__store_append(ab_store_t *st, const ab_append_event_t *ev, uint64_t *pos_out,
                             ab_error_t *err)
{
    uint64_t hash = ev ? ab__store_cache_hash(ev->thread, ev->run) : 0; /* NULL: refused */
    return append_h(st, ev, hash, pos_out, err);
}

ab_status_t ab__store_append_batch(ab_store_t *st, const ab_append_event_t *evs, size_t n,
                                   int64_t commit_us, uint64_t *first_pos, ab_error_t *err)
{
    if (!st || (!evs && n) || !first_pos)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "events", "store: NULL handle or argument");
    if (n == 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "events", "store: empty batch");
    ab_status_t s = ab__store_begin(st, commit_us, err);
    if (s != AB_OK)
        return s;
    uint64_t first = st->next_pos;
    uint64_t ring[AB__STORE_AHEAD];
    for (size_t i = 0; i < n; i++) {
        uint64_t h = ab__store_cache_ahead(st, evs, n, i, ring);
        s = append_h(st, &evs[i], h, NULL, err);
        if (s != AB_OK) {
            ab_error_detail_int(err, "index", (int64_t)i);
            ab__store_rollback(st);
            return s;
        }
    }
    s = ab__store_commit(st, err); /* rolls back whole on failure */
    if (s != AB_OK)
        return s;
    *first_pos = first;
    return AB_OK;
}

void ab__store_rollback(ab_store_t *st)
{
    if (!st || !st->in_txn)
        return;
    if (!sqlite3_get_autocommit(st->db))
        ab__store_run_q(st, Q_ROLLBACK, "rollback", NULL);
    st->in_txn = false;
    st->ntouched = 0;
    st->nttouched = 0;
    st->nrecs = 0;
    st->batch++;
}

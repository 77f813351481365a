/*
 * store_req.c - durable run requests in the `requests` table (agentbus/store.h,
 * docs/STORE.md "Run requests"): put with an idempotency key, get, the
 * compare-and-set move, lists in queue order and the queue position.
 *
 * Invariants:
 *  1. Every write is one transaction of its own, committed (at the handle's
 *     durability) before the call returns; a put runs its key lookup and its
 *     insert inside one BEGIN IMMEDIATE, so two puts of one key store one
 *     request. No write runs while an event batch is open on the handle.
 *  2. An id is assigned by SQLite as the highest stored id + 1 inside that
 *     write transaction; rows are never deleted, so ids grow strictly in
 *     commit order and are never reused: id order is queue order.
 *  3. A move is a single UPDATE guarded by the expected state and epoch: a
 *     writer that read an older state changes nothing and gets AB_CONFLICT.
 *     Only the moves listed at ab_request_state_t are accepted.
 *  4. The input bytes are stored as given and compared byte for byte; the
 *     store never parses them.
 *  5. Every statement is reset (and its bindings cleared) before returning.
 */
#include "req_check.h"
#include "store_int.h"

#include <string.h>
#include <time.h>

#define REQ_COLS                                                                                   \
    "id, key, agent, thread, run, run_named, state, worker, epoch, attempts, created_us,"          \
    " updated_us"

static const char *const RQ_SQL[RQ_COUNT_] = {
    [RQ_BY_ID] = "SELECT " REQ_COLS ", input FROM requests WHERE id = ?1",
    [RQ_BY_KEY] = "SELECT " REQ_COLS ", input FROM requests WHERE key = ?1",
    [RQ_BY_RUN] = "SELECT " REQ_COLS ", input FROM requests WHERE thread = ?1 AND run = ?2",
    [RQ_INSERT] = "INSERT INTO requests(key, agent, thread, run, run_named, state, created_us,"
                  " updated_us, input) VALUES(?1, ?2, ?3, ?4, ?5, 'queued', ?6, ?6, ?7)"
                  " RETURNING " REQ_COLS,
    [RQ_MOVE] = "UPDATE requests SET state = ?3, worker = ?4, epoch = ?5,"
                " attempts = attempts + (?3 = 'assigned'), updated_us = ?6"
                " WHERE id = ?1 AND state = ?2 AND epoch = ?7 RETURNING " REQ_COLS,
    [RQ_LIST_STATE] = "SELECT " REQ_COLS " FROM requests INDEXED BY requests_by_state"
                      " WHERE state = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
    [RQ_LIST_AGENT] = "SELECT " REQ_COLS " FROM requests INDEXED BY requests_queue"
                      " WHERE agent = ?1 AND state = ?2 AND id > ?3 ORDER BY id LIMIT ?4",
    [RQ_LIST_THREAD] = "SELECT " REQ_COLS " FROM requests INDEXED BY requests_open"
                       " WHERE thread = ?1 AND state IN ('queued','assigned','started')"
                       " ORDER BY id",
    [RQ_AHEAD] = "SELECT count(*) FROM requests INDEXED BY requests_queue"
                 " WHERE agent = (SELECT agent FROM requests WHERE id = ?1)"
                 " AND state = 'queued' AND id < ?1",
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

ab_status_t ab__store_req_prepare(ab_store_t *st, ab_error_t *err)
{
    for (int i = 0; i < RQ_COUNT_; i++) {
        int rc =
            sqlite3_prepare_v3(st->db, RQ_SQL[i], -1, SQLITE_PREPARE_PERSISTENT, &st->rq[i], NULL);
        if (rc != SQLITE_OK)
            return ab__store_sqlerr(st, rc, "prepare requests", err);
    }
    return AB_OK;
}

void ab__store_req_finalize(ab_store_t *st)
{
    for (int i = 0; i < RQ_COUNT_; i++) {
        sqlite3_finalize(st->rq[i]);
        st->rq[i] = NULL;
    }
}

static void copy_col(char *dst, size_t max, sqlite3_stmt *q, int col)
{
    const unsigned char *t = sqlite3_column_text(q, col);
    size_t n = t ? (size_t)sqlite3_column_bytes(q, col) : 0;
    if (n > max)
        n = max;
    if (n)
        memcpy(dst, t, n);
    dst[n] = '\0';
}

/* Columns REQ_COLS of the current row into @p out. */
static void fill_req(sqlite3_stmt *q, ab_request_t *out)
{
    memset(out, 0, sizeof *out);
    out->id = (uint64_t)sqlite3_column_int64(q, 0);
    copy_col(out->key, AB_ID_MAX_BYTES, q, 1);
    copy_col(out->agent, AB_ID_MAX_BYTES, q, 2);
    copy_col(out->thread, AB_ID_MAX_BYTES, q, 3);
    copy_col(out->run, AB_ID_MAX_BYTES, q, 4);
    out->run_named = sqlite3_column_int(q, 5) != 0;
    const char *state = (const char *)sqlite3_column_text(q, 6); /* then its size */
    out->state = ab__req_state_of(state, (size_t)sqlite3_column_bytes(q, 6));
    copy_col(out->worker, AB_REQUEST_WORKER_MAX_BYTES, q, 7);
    out->epoch = (uint64_t)sqlite3_column_int64(q, 8);
    out->attempts = (uint32_t)sqlite3_column_int64(q, 9);
    out->created_us = sqlite3_column_int64(q, 10);
    out->updated_us = sqlite3_column_int64(q, 11);
}

static ab_status_t check_write(ab_store_t *st, const char *what, ab_error_t *err)
{
    if (!st)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle");
    if (st->readonly)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store",
                            "store: %s needs a writer handle (this one is read-only)", what);
    if (st->in_txn)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store",
                            "store: %s cannot run inside an open event batch", what);
    return AB_OK;
}

static bool same_str(sqlite3_stmt *q, int col, ab_str_t v)
{
    const unsigned char *t = sqlite3_column_text(q, col);
    return t && (size_t)sqlite3_column_bytes(q, col) == v.len && memcmp(t, v.ptr, v.len) == 0;
}

/* Whether the stored row (RQ_BY_KEY) is the request @p r asks for again. */
static const char *differs(sqlite3_stmt *q, const ab_request_new_t *r)
{
    if (!same_str(q, 2, r->agent))
        return "agent";
    if (!same_str(q, 3, r->thread))
        return "thread";
    if (r->run_named && !same_str(q, 4, r->run))
        return "run";
    const void *in = sqlite3_column_blob(q, 12);
    size_t n = (size_t)sqlite3_column_bytes(q, 12);
    if (n != r->input_len || (n > 0 && memcmp(in, r->input, n) != 0))
        return "input";
    return NULL;
}

/* Inside the put's transaction: the stored request of the key, if any. */
static ab_status_t put_lookup(ab_store_t *st, const ab_request_new_t *r, ab_request_t *out,
                              bool *found, ab_error_t *err)
{
    sqlite3_stmt *q = st->rq[RQ_BY_KEY];
    sqlite3_bind_text(q, 1, r->key.ptr, (int)r->key.len, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    ab_status_t s = AB_OK;
    *found = rc == SQLITE_ROW;
    if (rc == SQLITE_ROW) {
        const char *field = differs(q, r);
        fill_req(q, out);
        if (field)
            s = ab__req_key_differs(r->key, out->id, field, err);
    } else if (rc != SQLITE_DONE) {
        s = ab__store_sqlerr(st, rc, "request key", err);
    }
    ab__store_done(q);
    return s;
}

static ab_status_t put_insert(ab_store_t *st, const ab_request_new_t *r, ab_request_t *out,
                              ab_error_t *err)
{
    sqlite3_stmt *q = st->rq[RQ_INSERT];
    static const uint8_t none[1] = {0};
    sqlite3_bind_text(q, 1, r->key.ptr, (int)r->key.len, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, r->agent.ptr, (int)r->agent.len, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, r->thread.ptr, (int)r->thread.len, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, r->run.ptr, (int)r->run.len, SQLITE_STATIC);
    sqlite3_bind_int(q, 5, r->run_named ? 1 : 0);
    sqlite3_bind_int64(q, 6, now_us());
    sqlite3_bind_blob(q, 7, r->input_len ? (const void *)r->input : none, (int)r->input_len,
                      SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        fill_req(q, out);
    ab__store_done(q);
    if (rc == SQLITE_ROW)
        return AB_OK;
    if ((rc & 0xff) == SQLITE_CONSTRAINT) /* the key was looked up: (thread, run) is taken */
        return ab__req_run_taken(r->thread, r->run, err);
    return ab__store_sqlerr(st, rc, "request put", err);
}

static ab_status_t step_simple(ab_store_t *st, int which, const char *what, ab_error_t *err)
{
    int rc = sqlite3_step(st->q[which]);
    ab__store_done(st->q[which]);
    return rc == SQLITE_DONE ? AB_OK : ab__store_sqlerr(st, rc, what, err);
}

ab_status_t ab__store_request_put(ab_store_t *st, const ab_request_new_t *req, ab_request_t *out,
                                  bool *existing, ab_error_t *err)
{
    ab_status_t s = check_write(st, "request put", err);
    if (s != AB_OK)
        return s;
    if (!req || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "request", "store: NULL request or out");
    s = ab__req_check_new("store", req, err);
    if (s == AB_OK)
        s = step_simple(st, Q_BEGIN, "request put", err);
    if (s != AB_OK)
        return s;
    ab_request_t rec;
    bool found = false;
    s = put_lookup(st, req, &rec, &found, err);
    if (s == AB_OK && !found)
        s = put_insert(st, req, &rec, err);
    if (s == AB_OK)
        s = step_simple(st, Q_COMMIT, "request put commit", err);
    if (s != AB_OK) {
        if (!sqlite3_get_autocommit(st->db))
            step_simple(st, Q_ROLLBACK, "rollback", NULL);
        return s;
    }
    *out = rec;
    if (existing)
        *existing = found;
    return AB_OK;
}

/* Step a one-row lookup (RQ_BY_ID, RQ_BY_KEY, bound) into out and input. */
static ab_status_t get_row(ab_store_t *st, int which, const char *field, ab_request_t *out,
                           ab_buf_t *input, ab_error_t *err)
{
    sqlite3_stmt *q = st->rq[which];
    int rc = sqlite3_step(q);
    ab_status_t s = AB_OK;
    if (rc == SQLITE_ROW) {
        ab_request_t rec;
        fill_req(q, &rec);
        const void *in = sqlite3_column_blob(q, 12);
        size_t n = (size_t)sqlite3_column_bytes(q, 12);
        if (input) {
            ab_buf_reset(input);
            if (n > 0 && ab_buf_append(input, in, n) != AB_OK)
                s = ab_error_set(err, AB_NOMEM, "store", "out of memory");
        }
        if (s == AB_OK)
            *out = rec;
    } else if (rc == SQLITE_DONE) {
        s = ab_error_set(err, AB_NOT_FOUND, field, "store: no request with this %s", field);
    } else {
        s = ab__store_sqlerr(st, rc, "request get", err);
    }
    ab__store_done(q);
    return s;
}

ab_status_t ab__store_request_get(ab_store_t *st, uint64_t id, ab_request_t *out, ab_buf_t *input,
                                  ab_error_t *err)
{
    if (!st || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle or out");
    sqlite3_bind_int64(st->rq[RQ_BY_ID], 1, ab__store_i64(id));
    return get_row(st, RQ_BY_ID, "id", out, input, err);
}

ab_status_t ab__store_request_by_key(ab_store_t *st, ab_str_t key, ab_request_t *out,
                                     ab_buf_t *input, ab_error_t *err)
{
    if (!st || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle or out");
    ab_status_t s = ab__store_check_id(key, "key", err);
    if (s != AB_OK)
        return s;
    sqlite3_bind_text(st->rq[RQ_BY_KEY], 1, key.ptr, (int)key.len, SQLITE_STATIC);
    return get_row(st, RQ_BY_KEY, "key", out, input, err);
}

ab_status_t ab__store_request_by_run(ab_store_t *st, ab_str_t thread, ab_str_t run,
                                     ab_request_t *out, ab_buf_t *input, ab_error_t *err)
{
    if (!st || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle or out");
    ab_status_t s = ab__store_check_id(thread, "thread", err);
    if (s == AB_OK)
        s = ab__store_check_id(run, "run", err);
    if (s != AB_OK)
        return s;
    sqlite3_bind_text(st->rq[RQ_BY_RUN], 1, thread.ptr, (int)thread.len, SQLITE_STATIC);
    sqlite3_bind_text(st->rq[RQ_BY_RUN], 2, run.ptr, (int)run.len, SQLITE_STATIC);
    return get_row(st, RQ_BY_RUN, "run", out, input, err);
}

/* After a move changed nothing: why (the request is gone or moved on). */
static ab_status_t move_refused(ab_store_t *st, uint64_t id, ab_error_t *err)
{
    ab_request_t cur;
    ab_status_t s = ab__store_request_get(st, id, &cur, NULL, err);
    if (s != AB_OK)
        return s;
    return ab__req_refused(id, &cur, err);
}

ab_status_t ab__store_request_move(ab_store_t *st, uint64_t id, const ab_request_move_t *mv,
                                   ab_request_t *out, ab_error_t *err)
{
    ab_status_t s = check_write(st, "request move", err);
    if (s == AB_OK && !mv)
        s = ab_error_set(err, AB_INVALID_ARGUMENT, "request", "store: NULL move");
    if (s == AB_OK)
        s = ab__req_check_move("store", mv, err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = st->rq[RQ_MOVE];
    sqlite3_bind_int64(q, 1, ab__store_i64(id));
    sqlite3_bind_text(q, 2, ab__req_state_name(mv->expect_state), -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, ab__req_state_name(mv->state), -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, mv->worker.ptr ? mv->worker.ptr : "", (int)mv->worker.len,
                      SQLITE_STATIC);
    sqlite3_bind_int64(q, 5, ab__store_i64(mv->epoch));
    sqlite3_bind_int64(q, 6, now_us());
    sqlite3_bind_int64(q, 7, ab__store_i64(mv->expect_epoch));
    ab_request_t rec;
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        fill_req(q, &rec);
    int rc2 = rc == SQLITE_ROW ? sqlite3_step(q) : rc; /* runs the statement to its end */
    ab__store_done(q);
    if (rc == SQLITE_DONE)
        return move_refused(st, id, err);
    if (rc != SQLITE_ROW || rc2 != SQLITE_DONE)
        return ab__store_sqlerr(st, rc != SQLITE_ROW ? rc : rc2, "request move", err);
    if (out)
        *out = rec;
    return AB_OK;
}

/* Deliver every row of a bound list statement; *n counts them. */
static ab_status_t deliver(ab_store_t *st, sqlite3_stmt *q, ab_request_cb cb, void *ud, uint32_t *n,
                           ab_error_t *err)
{
    ab_request_t rec;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        fill_req(q, &rec);
        (*n)++;
        if (cb && cb(ud, &rec) != 0) {
            rc = SQLITE_DONE;
            break;
        }
    }
    ab_status_t s = rc == SQLITE_DONE ? AB_OK : ab__store_sqlerr(st, rc, "request list", err);
    ab__store_done(q);
    return s;
}

ab_status_t ab__store_request_list(ab_store_t *st, ab_request_state_t state, ab_str_t agent,
                                   uint64_t after_id, uint32_t limit, ab_request_cb cb, void *ud,
                                   uint32_t *count, ab_error_t *err)
{
    ab_status_t s = ab__req_check_list("store", st != NULL, state, agent, limit, err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = st->rq[agent.ptr ? RQ_LIST_AGENT : RQ_LIST_STATE];
    int i = 1;
    if (agent.ptr)
        sqlite3_bind_text(q, i++, agent.ptr, (int)agent.len, SQLITE_STATIC);
    sqlite3_bind_text(q, i++, ab__req_state_name(state), -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, i++, ab__store_i64(after_id));
    sqlite3_bind_int64(q, i, limit);
    uint32_t n = 0;
    s = deliver(st, q, cb, ud, &n, err);
    if (s != AB_OK)
        return s;
    if (count)
        *count = n;
    return AB_OK;
}

ab_status_t ab__store_request_thread_open(ab_store_t *st, ab_str_t thread, ab_request_cb cb,
                                          void *ud, ab_error_t *err)
{
    if (!st)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle");
    ab_status_t s = ab__store_check_id(thread, "thread", err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = st->rq[RQ_LIST_THREAD];
    sqlite3_bind_text(q, 1, thread.ptr, (int)thread.len, SQLITE_STATIC);
    uint32_t n = 0;
    return deliver(st, q, cb, ud, &n, err);
}

ab_status_t ab__store_request_position(ab_store_t *st, uint64_t id, uint64_t *ahead,
                                       ab_error_t *err)
{
    if (!st || !ahead)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle or out");
    ab_request_t cur;
    ab_status_t s = ab__store_request_get(st, id, &cur, NULL, err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = st->rq[RQ_AHEAD];
    sqlite3_bind_int64(q, 1, ab__store_i64(id));
    int rc = sqlite3_step(q);
    uint64_t n = rc == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(q, 0) : 0;
    ab__store_done(q);
    if (rc != SQLITE_ROW)
        return ab__store_sqlerr(st, rc, "request position", err);
    *ahead = n;
    return AB_OK;
}

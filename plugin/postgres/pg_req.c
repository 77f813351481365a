/*
 * pg_req.c - durable run requests in the ab_requests table, shared by every
 * broker on the database (docs/STORE.md "Run requests": the same contract as
 * the SQLite store's, docs/SCALING.md "Coordination").
 *
 * Invariants:
 *  1. A put is one statement (its own transaction): the key's row if stored,
 *     else an insert whose id comes from the counter row ab_head(id 2),
 *     locked to commit, so ids grow in commit order across brokers. Two
 *     brokers putting one key at once: the loser's insert hits the key's
 *     unique index and it reads the winner's row instead.
 *  2. A move is one UPDATE guarded by the expected state and epoch: a stale
 *     writer on any broker changes nothing and gets AB_CONFLICT.
 *  3. The input bytes are stored and compared byte for byte, never parsed.
 */
#include "pg_int.h"
#include "req_check.h"

#include <string.h>
#include <time.h>

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Columns REQ_COLS of row @p i into @p out. */
static void fill_req(const PGresult *r, int i, ab_request_t *out)
{
    memset(out, 0, sizeof *out);
    out->id = (uint64_t)ab__pg_i64(r, i, 0);
    ab__pg_copy(out->key, sizeof out->key, r, i, 1);
    ab__pg_copy(out->agent, sizeof out->agent, r, i, 2);
    ab__pg_copy(out->thread, sizeof out->thread, r, i, 3);
    ab__pg_copy(out->run, sizeof out->run, r, i, 4);
    out->run_named = PQgetvalue(r, i, 5)[0] != 0;
    ab_str_t st = ab__pg_str(r, i, 6);
    out->state = ab__req_state_of(st.ptr, st.len);
    ab__pg_copy(out->worker, sizeof out->worker, r, i, 7);
    out->epoch = (uint64_t)ab__pg_i64(r, i, 8);
    out->attempts = (uint32_t)ab__pg_i64(r, i, 9);
    out->created_us = ab__pg_i64(r, i, 10);
    out->updated_us = ab__pg_i64(r, i, 11);
    ab__pg_copy(out->broker, sizeof out->broker, r, i, 12);
    out->cancel_epoch = (uint64_t)ab__pg_i64(r, i, 13);
}

#define INPUT_COL 14 /* after REQ_COLS */

static bool same(const PGresult *r, int col, ab_str_t v)
{
    ab_str_t s = ab__pg_str(r, 0, col);
    return s.len == v.len && (v.len == 0 || memcmp(s.ptr, v.ptr, v.len) == 0);
}

static const char *differs(const PGresult *r, const ab_request_new_t *q)
{
    if (!same(r, 2, q->agent))
        return "agent";
    if (!same(r, 3, q->thread))
        return "thread";
    if (q->run_named && !same(r, 4, q->run))
        return "run";
    ab_str_t in = {.ptr = (const char *)q->input, .len = q->input_len};
    if (!same(r, INPUT_COL, in))
        return "input";
    return NULL;
}

/* One put statement; *again = the insert lost a race on the key. */
static ab_status_t put_once(ab_plugin_db_t *db, const ab_request_new_t *q, ab_request_t *out,
                            bool *existing, bool *again, ab_error_t *err)
{
    pg_params_t p = {0};
    ab__pg_p_text(&p, q->key);
    ab__pg_p_text(&p, q->agent);
    ab__pg_p_text(&p, q->thread);
    ab__pg_p_text(&p, q->run);
    ab__pg_p_bool(&p, q->run_named);
    ab__pg_p_i64(&p, now_us());
    ab__pg_p_bytes(&p, q->input, q->input_len);
    ab__pg_p_text(&p, q->parent_run);
    ab_error_t e = AB_ERROR_INIT;
    PGresult *r = ab__pg_exec(db, PQ_REQ_PUT, &p, "request put", &e);
    if (!r) {
        const ab_error_detail_t *d = ab_error_detail(&e, "sqlstate");
        bool uniq = e.code == AB_CONFLICT && d && strcmp(d->s, "23505") == 0;
        *again = uniq && strstr(e.message, "ab_requests_key_key") != NULL; /* the key's index */
        if (uniq && !*again)
            return ab__req_run_taken(q->thread, q->run, err);
        if (!*again && err)
            *err = e;
        return e.code;
    }
    ab_status_t s = AB_OK;
    fill_req(r, 0, out);
    *existing = PQgetvalue(r, 0, INPUT_COL + 1)[0] != 0;
    const char *field = *existing ? differs(r, q) : NULL;
    if (field)
        s = ab__req_key_differs(q->key, out->id, field, err);
    PQclear(r);
    return s;
}

ab_status_t ab__pg_request_put(ab_plugin_db_t *db, const ab_request_new_t *req, ab_request_t *out,
                               bool *existing, ab_error_t *err)
{
    ab_status_t s = ab__pg_check_writer(db, "request put", err);
    if (s == AB_OK && (!req || !out))
        s = ab_error_set(err, AB_INVALID_ARGUMENT, "request", "postgres: NULL request or out");
    if (s == AB_OK)
        s = ab__req_check_new("postgres", req, err);
    if (s != AB_OK)
        return s;
    ab_request_t rec;
    bool found = false, again = false;
    s = put_once(db, req, &rec, &found, &again, err);
    if (s != AB_OK && again) /* invariant 1: another broker stored the key first */
        s = put_once(db, req, &rec, &found, &again, err);
    if (s != AB_OK)
        return s;
    *out = rec;
    if (existing)
        *existing = found;
    return AB_OK;
}

static ab_status_t get_row(ab_plugin_db_t *db, int which, pg_params_t *p, const char *field,
                           ab_request_t *out, ab_buf_t *input, ab_error_t *err)
{
    PGresult *r = ab__pg_exec(db, which, p, "request get", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    ab_status_t s = AB_OK;
    if (PQntuples(r) == 0) {
        s = ab_error_set(err, AB_NOT_FOUND, field, "postgres: no request with this %s", field);
    } else {
        size_t n = (size_t)PQgetlength(r, 0, INPUT_COL);
        if (input) {
            ab_buf_reset(input);
            if (n > 0 && ab_buf_append(input, PQgetvalue(r, 0, INPUT_COL), n) != AB_OK)
                s = ab_error_set(err, AB_NOMEM, "store", "out of memory");
        }
        if (s == AB_OK)
            fill_req(r, 0, out);
    }
    PQclear(r);
    return s;
}

ab_status_t ab__pg_request_get(ab_plugin_db_t *db, uint64_t id, ab_request_t *out, ab_buf_t *input,
                               ab_error_t *err)
{
    if (!db || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "postgres: NULL handle or out");
    pg_params_t p = {0};
    ab__pg_p_i64(&p, id > INT64_MAX ? INT64_MAX : (int64_t)id);
    return get_row(db, PQ_REQ_BY_ID, &p, "id", out, input, err);
}

ab_status_t ab__pg_request_by_key(ab_plugin_db_t *db, ab_str_t key, ab_request_t *out,
                                  ab_buf_t *input, ab_error_t *err)
{
    if (!db || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "postgres: NULL handle or out");
    ab_status_t s = ab__pg_check_id(key, "key", err);
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_text(&p, key);
    return get_row(db, PQ_REQ_BY_KEY, &p, "key", out, input, err);
}

ab_status_t ab__pg_request_by_run(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run,
                                  ab_request_t *out, ab_buf_t *input, ab_error_t *err)
{
    if (!db || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "postgres: NULL handle or out");
    ab_status_t s = ab__pg_check_id(thread, "thread", err);
    if (s == AB_OK)
        s = ab__pg_check_id(run, "run", err);
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_text(&p, thread);
    ab__pg_p_text(&p, run);
    return get_row(db, PQ_REQ_BY_RUN, &p, "run", out, input, err);
}

static ab_status_t move_refused(ab_plugin_db_t *db, uint64_t id, ab_error_t *err)
{
    ab_request_t cur;
    ab_status_t s = ab__pg_request_get(db, id, &cur, NULL, err);
    if (s != AB_OK)
        return s;
    return ab__req_refused(id, &cur, err);
}

ab_status_t ab__pg_request_move(ab_plugin_db_t *db, uint64_t id, const ab_request_move_t *mv,
                                ab_request_t *out, ab_error_t *err)
{
    ab_status_t s = ab__pg_check_writer(db, "request move", err);
    if (s == AB_OK && !mv)
        s = ab_error_set(err, AB_INVALID_ARGUMENT, "request", "postgres: NULL move");
    if (s == AB_OK)
        s = ab__req_check_move("postgres", mv, err);
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_i64(&p, id > INT64_MAX ? INT64_MAX : (int64_t)id);
    ab__pg_p_cstr(&p, ab__req_state_name(mv->expect_state));
    ab__pg_p_cstr(&p, ab__req_state_name(mv->state));
    ab__pg_p_text(&p,
                  (ab_str_t){.ptr = mv->worker.ptr ? mv->worker.ptr : "", .len = mv->worker.len});
    ab__pg_p_i64(&p, (int64_t)mv->epoch);
    ab__pg_p_i64(&p, now_us());
    ab__pg_p_i64(&p, (int64_t)mv->expect_epoch);
    ab__pg_p_text(&p, mv->broker);
    PGresult *r = ab__pg_exec(db, PQ_REQ_MOVE, &p, "request move", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    bool moved = PQntuples(r) > 0;
    ab_request_t rec;
    if (moved)
        fill_req(r, 0, &rec);
    PQclear(r);
    if (!moved)
        return move_refused(db, id, err);
    if (out)
        *out = rec;
    return AB_OK;
}

static ab_status_t deliver(ab_plugin_db_t *db, int which, pg_params_t *p, ab_request_cb cb,
                           void *ud, uint32_t *count, ab_error_t *err)
{
    PGresult *r = ab__pg_exec(db, which, p, "request list", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    uint32_t n = 0;
    ab_request_t rec;
    for (int i = 0; i < PQntuples(r); i++) {
        fill_req(r, i, &rec);
        n++;
        if (cb && cb(ud, &rec) != 0)
            break;
    }
    PQclear(r);
    if (count)
        *count = n;
    return AB_OK;
}

ab_status_t ab__pg_request_list(ab_plugin_db_t *db, ab_request_state_t state, ab_str_t agent,
                                uint64_t after_id, uint32_t limit, ab_request_cb cb, void *ud,
                                uint32_t *count, ab_error_t *err)
{
    ab_status_t s = ab__req_check_list("postgres", db != NULL, state, agent, limit, err);
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    if (agent.ptr)
        ab__pg_p_text(&p, agent);
    ab__pg_p_cstr(&p, ab__req_state_name(state));
    ab__pg_p_i64(&p, after_id > INT64_MAX ? INT64_MAX : (int64_t)after_id);
    ab__pg_p_i64(&p, limit);
    return deliver(db, agent.ptr ? PQ_REQ_LIST_AGENT : PQ_REQ_LIST_STATE, &p, cb, ud, count, err);
}

ab_status_t ab__pg_request_thread_open(ab_plugin_db_t *db, ab_str_t thread, ab_request_cb cb,
                                       void *ud, ab_error_t *err)
{
    if (!db)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "postgres: NULL handle");
    ab_status_t s = ab__pg_check_id(thread, "thread", err);
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_text(&p, thread);
    return deliver(db, PQ_REQ_THREAD_OPEN, &p, cb, ud, NULL, err);
}

ab_status_t ab__pg_request_position(ab_plugin_db_t *db, uint64_t id, uint64_t *ahead,
                                    ab_error_t *err)
{
    if (!db || !ahead)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "postgres: NULL handle or out");
    ab_request_t cur;
    ab_status_t s = ab__pg_request_get(db, id, &cur, NULL, err);
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_i64(&p, (int64_t)id);
    PGresult *r = ab__pg_exec(db, PQ_REQ_AHEAD, &p, "request position", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    *ahead = (uint64_t)ab__pg_i64(r, 0, 0);
    PQclear(r);
    return AB_OK;
}

/* ---- dispatch across brokers (plugin.h ABI 6) ------------------------------------ */

ab_status_t ab__pg_request_take(ab_plugin_db_t *db, uint64_t id, ab_str_t worker, ab_str_t broker,
                                ab_request_t *out, ab_buf_t *input, ab_error_t *err)
{
    ab_status_t s = ab__pg_check_writer(db, "request take", err);
    if (s == AB_OK && !out)
        s = ab_error_set(err, AB_INVALID_ARGUMENT, "request", "postgres: NULL out");
    if (s == AB_OK &&
        (worker.len > AB_REQUEST_WORKER_MAX_BYTES || broker.len > AB_REQUEST_BROKER_MAX_BYTES))
        s = ab_error_set(err, AB_INVALID_ARGUMENT, "worker",
                         "postgres: request take: worker or broker id too long");
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_i64(&p, id > INT64_MAX ? INT64_MAX : (int64_t)id);
    ab__pg_p_text(&p, worker);
    ab__pg_p_text(&p, broker);
    ab__pg_p_i64(&p, now_us());
    s = get_row(db, PQ_REQ_TAKE, &p, "id", out, input, err);
    if (s == AB_NOT_FOUND && err)
        ab_error_clear(err);
    if (s == AB_NOT_FOUND) /* taken, locked or held back by its thread: nothing changed */
        return ab_error_set(err, AB_CONFLICT, "id",
                            "postgres: request %llu cannot be taken now (not queued, being "
                            "taken by another broker, or its thread is busy)",
                            (unsigned long long)id);
    return s;
}

ab_status_t ab__pg_broker_lease(ab_plugin_db_t *db, ab_str_t broker, int64_t now_us,
                                int64_t alive_until_us, uint32_t limit, ab_request_cb lost,
                                void *ud, ab_error_t *err)
{
    ab_status_t s = ab__pg_check_writer(db, "broker lease", err);
    if (s == AB_OK && (broker.len == 0 || broker.len > AB_REQUEST_BROKER_MAX_BYTES || limit < 1))
        s = ab_error_set(err, AB_INVALID_ARGUMENT, "broker",
                         "postgres: broker lease: broker id of 1..%d bytes and a limit >= 1",
                         AB_REQUEST_BROKER_MAX_BYTES);
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_text(&p, broker);
    ab__pg_p_i64(&p, now_us);
    ab__pg_p_i64(&p, alive_until_us);
    PGresult *r = ab__pg_exec(db, PQ_LEASE, &p, "broker lease", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    PQclear(r);
    p = (pg_params_t){0};
    ab__pg_p_text(&p, broker);
    ab__pg_p_i64(&p, now_us);
    ab__pg_p_i64(&p, limit);
    return deliver(db, PQ_LOST, &p, lost, ud, NULL, err);
}

ab_status_t ab__pg_request_cancel(ab_plugin_db_t *db, uint64_t id, uint64_t epoch,
                                  ab_request_t *out, ab_error_t *err)
{
    ab_status_t s = ab__pg_check_writer(db, "request cancel", err);
    if (s == AB_OK && !out)
        s = ab_error_set(err, AB_INVALID_ARGUMENT, "request", "postgres: NULL out");
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_i64(&p, id > INT64_MAX ? INT64_MAX : (int64_t)id);
    ab__pg_p_i64(&p, epoch > INT64_MAX ? INT64_MAX : (int64_t)epoch);
    ab__pg_p_i64(&p, now_us());
    s = get_row(db, PQ_REQ_CANCEL, &p, "id", out, NULL, err);
    if (s == AB_NOT_FOUND && err)
        ab_error_clear(err);
    if (s == AB_NOT_FOUND) /* moved on, or its run started: nothing claimed, nothing moved */
        return ab_error_set(err, AB_CONFLICT, "state",
                            "postgres: request %llu is no longer assigned at epoch %llu, or its "
                            "run has started (nothing changed)",
                            (unsigned long long)id, (unsigned long long)epoch);
    return s;
}

ab_status_t ab__pg_request_cancel_held(ab_plugin_db_t *db, uint64_t id, uint64_t epoch,
                                       int64_t now_us, ab_request_t *out, bool *alive,
                                       ab_error_t *err)
{
    ab_status_t s = ab__pg_check_writer(db, "request cancel held", err);
    if (s == AB_OK && (!out || !alive))
        s = ab_error_set(err, AB_INVALID_ARGUMENT, "request", "postgres: NULL out or alive");
    if (s != AB_OK)
        return s;
    pg_params_t p = {0};
    ab__pg_p_i64(&p, id > INT64_MAX ? INT64_MAX : (int64_t)id);
    ab__pg_p_i64(&p, epoch > INT64_MAX ? INT64_MAX : (int64_t)epoch);
    ab__pg_p_i64(&p, now_us);
    PGresult *r = ab__pg_exec(db, PQ_REQ_CANCEL_HELD, &p, "request cancel held", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    bool found = PQntuples(r) > 0;
    if (found) {
        fill_req(r, 0, out);
        *alive = PQgetvalue(r, 0, INPUT_COL + 1)[0] != 0;
    }
    PQclear(r);
    if (!found) /* not started, nor assigned with its RUN_STARTED committed, at this epoch */
        return ab_error_set(err, AB_CONFLICT, "state",
                            "postgres: request %llu is not held at epoch %llu with its run "
                            "started (nothing changed)",
                            (unsigned long long)id, (unsigned long long)epoch);
    return AB_OK;
}

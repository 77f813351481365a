/*
 * test_store_req.c - durable run requests in the store (store/store_req.c,
 * docs/STORE.md "Run requests"): put and idempotency keys, ids in commit
 * order, lists and paging, the compare-and-set move, queue positions, the
 * open requests of a thread, survival across a reopen, the migration from
 * schema version 1, bounds, and refusals that change nothing.
 *
 * Unlike test_store.c this file includes sqlite3.h, for one thing only: to
 * turn a current database back into a version-1 one (drop the requests
 * table, set user_version 1) for the migration test.
 */
#include "store.h"
#include "store_fixture.h"
#include "testutil.h"

#include <dirent.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef sf_fx_t fx_t;

static int setup(void **state)
{
    return sf_fx_setup(state, "req", false);
}

static int teardown(void **state)
{
    return sf_fx_teardown(state);
}

static ab_str_t S(const char *s)
{
    return (ab_str_t){s, strlen(s)};
}

static ab_request_new_t rq(const char *key, const char *agent, const char *thread, const char *run,
                           const char *input)
{
    return (ab_request_new_t){.key = S(key),
                              .agent = S(agent),
                              .thread = S(thread),
                              .run = S(run),
                              .run_named = true,
                              .input = (const uint8_t *)input,
                              .input_len = strlen(input)};
}

static ab_request_t put_ok(ab_store_t *st, const ab_request_new_t *r, bool want_existing)
{
    ab_request_t out;
    bool existing = !want_existing;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = ab__store_request_put(st, r, &out, &existing, &err);
    if (s != AB_OK)
        fail_msg("put %.*s: %s: %s", (int)r->key.len, r->key.ptr, ab_status_name(s), err.message);
    assert_int_equal(existing, want_existing);
    return out;
}

/* Put a new request; @return its id. */
static uint64_t put_new(ab_store_t *st, const char *key, const char *agent, const char *thread,
                        const char *run, const char *input)
{
    ab_request_new_t r = rq(key, agent, thread, run, input);
    return put_ok(st, &r, false).id;
}

static ab_status_t put_code(ab_store_t *st, const ab_request_new_t *r, ab_error_t *err)
{
    ab_request_t out;
    memset(&out, 0x5a, sizeof out);
    ab_error_clear(err);
    ab_status_t s = ab__store_request_put(st, r, &out, NULL, err);
    if (s != AB_OK)
        assert_int_equal(out.id, 0x5a5a5a5a5a5a5a5aULL); /* out-params only on success */
    return s;
}

static ab_status_t move(ab_store_t *st, uint64_t id, ab_request_state_t from, uint64_t from_epoch,
                        ab_request_state_t to, const char *worker, uint64_t epoch,
                        ab_request_t *out, ab_error_t *err)
{
    ab_request_move_t mv = {.expect_state = from,
                            .expect_epoch = from_epoch,
                            .state = to,
                            .worker = worker ? S(worker) : (ab_str_t){0},
                            .epoch = epoch};
    ab_error_clear(err);
    return ab__store_request_move(st, id, &mv, out, err);
}

static void move_ok(ab_store_t *st, uint64_t id, ab_request_state_t from, uint64_t from_epoch,
                    ab_request_state_t to, const char *worker, uint64_t epoch)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = move(st, id, from, from_epoch, to, worker, epoch, NULL, &err);
    if (s != AB_OK)
        fail_msg("move %llu: %s: %s", (unsigned long long)id, ab_status_name(s), err.message);
}

/* A list callback writing "id:key;" per request. */
typedef struct acc {
    char text[1024];
    int n, stop_after;
} acc_t;

static int collect(void *ud, const ab_request_t *r)
{
    acc_t *a = ud;
    size_t used = strlen(a->text);
    snprintf(a->text + used, sizeof a->text - used, "%llu:%s;", (unsigned long long)r->id, r->key);
    a->n++;
    return a->stop_after && a->n >= a->stop_after;
}

static const char *list_text(ab_store_t *st, ab_request_state_t state, const char *agent,
                             uint64_t after, uint32_t limit, acc_t *a)
{
    memset(a, 0, sizeof *a);
    ab_error_t err = AB_ERROR_INIT;
    uint32_t count = 0;
    ab_status_t s = ab__store_request_list(st, state, agent ? S(agent) : (ab_str_t){0}, after,
                                           limit, collect, a, &count, &err);
    if (s != AB_OK)
        fail_msg("list: %s", err.message);
    assert_int_equal(count, (uint32_t)a->n);
    return a->text;
}

static const char *open_text(ab_store_t *st, const char *thread, acc_t *a)
{
    memset(a, 0, sizeof *a);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_request_thread_open(st, S(thread), collect, a, &err), AB_OK);
    return a->text;
}

static uint64_t ahead_of(ab_store_t *st, uint64_t id)
{
    uint64_t n = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_request_position(st, id, &n, &err), AB_OK);
    return n;
}

static void test_put_get_idempotent(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    ab_request_new_t a = rq("key-1", "planner", "T", "r1", "\x81\xa1x\x01");
    ab_request_t r = put_ok(f->st, &a, false);
    assert_int_equal(r.id, 1);
    assert_int_equal(r.state, AB_REQ_QUEUED);
    assert_string_equal(r.key, "key-1");
    assert_string_equal(r.agent, "planner");
    assert_string_equal(r.thread, "T");
    assert_string_equal(r.run, "r1");
    assert_true(r.run_named);
    assert_string_equal(r.worker, "");
    assert_int_equal(r.epoch, 0);
    assert_int_equal(r.attempts, 0);
    assert_true(r.created_us > 0 && r.updated_us == r.created_us);
    ab_request_t again = put_ok(f->st, &a, true); /* the same key: the same record */
    assert_memory_equal(&again, &r, sizeof r);
    ab_request_t got;
    ab_buf_t in = {0};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_request_get(f->st, 1, &got, &in, &err), AB_OK);
    assert_memory_equal(&got, &r, sizeof r);
    assert_int_equal(in.len, 4);
    assert_memory_equal(in.data, "\x81\xa1x\x01", 4);
    assert_int_equal(ab__store_request_by_key(f->st, S("key-1"), &got, &in, &err), AB_OK);
    assert_int_equal(got.id, 1);
    ab_buf_free(&in);
    ab_error_clear(&err);
    assert_int_equal(ab__store_request_get(f->st, 2, &got, NULL, &err), AB_NOT_FOUND);
    tu_assert_error(&err, AB_NOT_FOUND, "id");
    ab_error_clear(&err);
    assert_int_equal(ab__store_request_by_key(f->st, S("nope"), &got, NULL, &err), AB_NOT_FOUND);
    tu_assert_error(&err, AB_NOT_FOUND, "key");
}

/* One key names one request: any other content under it is refused, and stores nothing. */
static void test_key_conflicts(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    ab_request_new_t a = rq("k", "planner", "T", "r1", "in");
    put_ok(f->st, &a, false);
    static const char *const what[] = {"input", "agent", "thread", "run"};
    ab_request_new_t other[4] = {a, a, a, a};
    other[0].input = (const uint8_t *)"IN";
    other[1].agent = S("coder");
    other[2].thread = S("U");
    other[3].run = S("r2");
    for (int i = 0; i < 4; i++) {
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(put_code(f->st, &other[i], &err), AB_CONFLICT);
        tu_assert_error(&err, AB_CONFLICT, "key");
        const ab_error_detail_t *d = ab_error_detail(&err, "differs");
        assert_non_null(d);
        assert_string_equal(d->s, what[i]);
        d = ab_error_detail(&err, "id");
        assert_non_null(d);
        assert_int_equal(d->i, 1);
    }
    /* a run id the broker made is not the client's: a retry brings another one */
    ab_request_new_t made = a;
    made.run = S("broker-made-2");
    made.run_named = false;
    ab_request_t r = put_ok(f->st, &made, true);
    assert_string_equal(r.run, "r1");
    /* another key for the same thread and run would start that run twice */
    ab_request_new_t twin = rq("k2", "planner", "T", "r1", "in");
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(put_code(f->st, &twin, &err), AB_CONFLICT);
    tu_assert_error(&err, AB_CONFLICT, "run");
    acc_t acc;
    assert_string_equal(list_text(f->st, AB_REQ_QUEUED, NULL, 0, 100, &acc), "1:k;");
    assert_int_equal(put_new(f->st, "k3", "planner", "T", "r3", ""),
                     2); /* refused puts used no id */
}

static void test_ids_and_lists(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    const char *agents[] = {"a", "b", "a", "a", "b", "a"};
    char key[8], run[8];
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof key, "k%d", i + 1);
        snprintf(run, sizeof run, "r%d", i + 1);
        ab_request_new_t r = rq(key, agents[i], "T", run, "x");
        assert_int_equal(put_ok(f->st, &r, false).id, (uint64_t)i + 1);
    }
    acc_t a;
    assert_string_equal(list_text(f->st, AB_REQ_QUEUED, NULL, 0, 100, &a),
                        "1:k1;2:k2;3:k3;4:k4;5:k5;6:k6;");
    assert_string_equal(list_text(f->st, AB_REQ_QUEUED, "a", 0, 100, &a), "1:k1;3:k3;4:k4;6:k6;");
    /* paging: after_id moves to the last id delivered */
    assert_string_equal(list_text(f->st, AB_REQ_QUEUED, "a", 0, 2, &a), "1:k1;3:k3;");
    assert_string_equal(list_text(f->st, AB_REQ_QUEUED, "a", 3, 2, &a), "4:k4;6:k6;");
    assert_string_equal(list_text(f->st, AB_REQ_QUEUED, "a", 6, 2, &a), "");
    assert_string_equal(list_text(f->st, AB_REQ_QUEUED, NULL, 4, 1, &a), "5:k5;");
    move_ok(f->st, 3, AB_REQ_QUEUED, 0, AB_REQ_ASSIGNED, "w1", 1);
    assert_string_equal(list_text(f->st, AB_REQ_QUEUED, "a", 0, 100, &a), "1:k1;4:k4;6:k6;");
    assert_string_equal(list_text(f->st, AB_REQ_ASSIGNED, NULL, 0, 100, &a), "3:k3;");
    assert_string_equal(list_text(f->st, AB_REQ_STARTED, NULL, 0, 100, &a), "");
    assert_string_equal(list_text(f->st, AB_REQ_QUEUED, "nobody", 0, 100, &a), "");
    /* a callback that stops: the one it stopped at counts */
    memset(&a, 0, sizeof a);
    a.stop_after = 2;
    uint32_t count = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_request_list(f->st, AB_REQ_QUEUED, (ab_str_t){0}, 0, 100, collect,
                                            &a, &count, &err),
                     AB_OK);
    assert_int_equal(count, 2);
    assert_string_equal(a.text, "1:k1;2:k2;");
}

/* The life of a request, and every stale or illegal move refused with nothing changed. */
static void test_move_compare(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    uint64_t id = put_new(f->st, "k", "a", "T", "r", "x");
    ab_request_t r;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(move(f->st, id, AB_REQ_QUEUED, 0, AB_REQ_ASSIGNED, "w1", 5, &r, &err), AB_OK);
    assert_int_equal(r.state, AB_REQ_ASSIGNED);
    assert_string_equal(r.worker, "w1");
    assert_int_equal(r.epoch, 5);
    assert_int_equal(r.attempts, 1);
    assert_true(r.updated_us >= r.created_us);
    /* a second dispatcher that still thinks it is queued */
    assert_int_equal(move(f->st, id, AB_REQ_QUEUED, 0, AB_REQ_ASSIGNED, "w2", 6, NULL, &err),
                     AB_CONFLICT);
    tu_assert_error(&err, AB_CONFLICT, "state");
    assert_string_equal(err.message, "request 1 moved on: it is assigned at epoch 5 now (nothing "
                                     "changed)");
    const ab_error_detail_t *d = ab_error_detail(&err, "state");
    assert_non_null(d);
    assert_string_equal(d->s, "assigned");
    d = ab_error_detail(&err, "epoch");
    assert_non_null(d);
    assert_int_equal(d->i, 5);
    /* w1 declines (or its lease lapses): back to the queue; then w2 gets it at epoch 6 */
    move_ok(f->st, id, AB_REQ_ASSIGNED, 5, AB_REQ_QUEUED, NULL, 0);
    move_ok(f->st, id, AB_REQ_QUEUED, 0, AB_REQ_ASSIGNED, "w2", 6);
    /* w1's late RUN_STARTED: same state, stale epoch -> refused */
    assert_int_equal(move(f->st, id, AB_REQ_ASSIGNED, 5, AB_REQ_STARTED, "w1", 5, NULL, &err),
                     AB_CONFLICT);
    move_ok(f->st, id, AB_REQ_ASSIGNED, 6, AB_REQ_STARTED, "w2", 6);
    assert_int_equal(ab__store_request_get(f->st, id, &r, NULL, &err), AB_OK);
    assert_int_equal(r.state, AB_REQ_STARTED);
    assert_string_equal(r.worker, "w2");
    assert_int_equal(r.attempts, 2);
    /* never run again: a started request cannot go back to the queue */
    assert_int_equal(move(f->st, id, AB_REQ_STARTED, 6, AB_REQ_QUEUED, NULL, 0, NULL, &err),
                     AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "state");
    assert_string_equal(err.message, "store: a request cannot move started -> queued");
    /* an orphan continued by another worker's claim, then ended */
    move_ok(f->st, id, AB_REQ_STARTED, 6, AB_REQ_STARTED, "w3", 7);
    move_ok(f->st, id, AB_REQ_STARTED, 7, AB_REQ_ENDED, "w3", 7);
    assert_int_equal(move(f->st, id, AB_REQ_ENDED, 7, AB_REQ_STARTED, "w3", 8, NULL, &err),
                     AB_INVALID_ARGUMENT);
    assert_int_equal(move(f->st, id, AB_REQ_QUEUED, 0, AB_REQ_STARTED, "w3", 8, NULL, &err),
                     AB_INVALID_ARGUMENT); /* queued -> started skips the assignment */
    assert_int_equal(move(f->st, 99, AB_REQ_QUEUED, 0, AB_REQ_ASSIGNED, "w", 1, NULL, &err),
                     AB_NOT_FOUND);
    char big[AB_REQUEST_WORKER_MAX_BYTES + 2];
    memset(big, 'w', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    uint64_t id2 = put_new(f->st, "k2", "a", "T", "r2", "x");
    assert_int_equal(move(f->st, id2, AB_REQ_QUEUED, 0, AB_REQ_ASSIGNED, big, 1, NULL, &err),
                     AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "worker");
    assert_non_null(strstr(err.message, "store: worker id must be 0.."));
    big[AB_REQUEST_WORKER_MAX_BYTES] = '\0'; /* exactly the maximum */
    assert_int_equal(move(f->st, id2, AB_REQ_QUEUED, 0, AB_REQ_ASSIGNED, big, 1, &r, &err), AB_OK);
    assert_int_equal(strlen(r.worker), AB_REQUEST_WORKER_MAX_BYTES);
    assert_int_equal(ab__store_request_get(f->st, id, &r, NULL, &err), AB_OK);
    assert_int_equal(r.state, AB_REQ_ENDED); /* the refused moves changed nothing */
    assert_int_equal(r.epoch, 7);
}

static void test_position_and_thread_open(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    uint64_t a1 = put_new(f->st, "1", "a", "T", "r1", "");
    uint64_t b1 = put_new(f->st, "2", "b", "T", "r2", "");
    uint64_t a2 = put_new(f->st, "3", "a", "U", "r3", "");
    uint64_t a3 = put_new(f->st, "4", "a", "T", "r4", "");
    assert_int_equal(ahead_of(f->st, a1), 0);
    assert_int_equal(ahead_of(f->st, a2), 1);
    assert_int_equal(ahead_of(f->st, a3), 2);
    assert_int_equal(ahead_of(f->st, b1), 0); /* other agents' queues do not count */
    acc_t acc;
    assert_string_equal(open_text(f->st, "T", &acc), "1:1;2:2;4:4;");
    move_ok(f->st, a1, AB_REQ_QUEUED, 0, AB_REQ_ASSIGNED, "w", 1);
    assert_int_equal(ahead_of(f->st, a2), 0);
    assert_int_equal(ahead_of(f->st, a3), 1);
    move_ok(f->st, a1, AB_REQ_ASSIGNED, 1, AB_REQ_STARTED, "w", 1);
    move_ok(f->st, b1, AB_REQ_QUEUED, 0, AB_REQ_CANCELLED, NULL, 0);
    assert_string_equal(open_text(f->st, "T", &acc), "1:1;4:4;"); /* started holds it busy */
    move_ok(f->st, a1, AB_REQ_STARTED, 1, AB_REQ_ENDED, "w", 1);
    assert_string_equal(open_text(f->st, "T", &acc), "4:4;");
    assert_string_equal(open_text(f->st, "nobody", &acc), "");
    uint64_t n = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_request_position(f->st, 77, &n, &err), AB_NOT_FOUND);
}

/* A broker restart: everything accepted is there, the same key gets the same answer. */
static void test_survives_reopen(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    ab_request_new_t a = rq("ka", "a", "T", "r1", "input-a");
    ab_request_new_t b = rq("kb", "a", "U", "r2", "input-b");
    ab_request_t ra = put_ok(f->st, &a, false);
    ab_request_t rb = put_ok(f->st, &b, false);
    move_ok(f->st, ra.id, AB_REQ_QUEUED, 0, AB_REQ_ASSIGNED, "w1", 3);
    ab__store_close(&f->st);
    f->st = open_ok(f->dir, false);
    ab_request_t again = put_ok(f->st, &b, true);
    assert_memory_equal(&again, &rb, sizeof rb);
    ab_request_t got;
    ab_buf_t in = {0};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_request_by_key(f->st, S("ka"), &got, &in, &err), AB_OK);
    assert_int_equal(got.state, AB_REQ_ASSIGNED);
    assert_int_equal(got.epoch, 3);
    assert_int_equal(got.attempts, 1);
    assert_int_equal(in.len, strlen("input-a"));
    assert_memory_equal(in.data, "input-a", in.len);
    ab_buf_free(&in);
    assert_int_equal(ahead_of(f->st, rb.id), 0);
    ab_request_new_t c = rq("kc", "a", "V", "r3", "");
    assert_int_equal(put_ok(f->st, &c, false).id, rb.id + 1); /* ids continue */
    /* a reader (a replay thread's handle) sees the same */
    ab_store_t *ro = open_ok(f->dir, true);
    assert_int_equal(ab__store_request_get(ro, rb.id, &got, NULL, &err), AB_OK);
    assert_string_equal(got.key, "kb");
    ab__store_close(&ro);
}

/* A version-1 database (events, no requests table) is migrated and keeps its events. */
static void test_migrates_from_v1(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    ab_append_event_t ev = {.thread = S("T"),
                            .run = S("r"),
                            .seq = 1,
                            .epoch = 1,
                            .bytes = (const uint8_t *)"e1",
                            .len = 2};
    uint64_t first = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_append_batch(f->st, &ev, 1, 1000, &first, &err), AB_OK);
    ab__store_close(&f->st);
    char path[128];
    snprintf(path, sizeof path, "%s/%s", f->dir, AB_STORE_DB_NAME);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db,
                     SF_TO_V4_SQL
                     "DROP TABLE requests; DROP INDEX runs_active; DROP TABLE snapshot_parts; "
                     "ALTER TABLE snapshots DROP COLUMN parts; PRAGMA user_version = 1",
                     NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    ab_store_opts_t ro = {.readonly = true};
    ab_store_t *st = NULL;
    assert_int_equal(ab__store_open(&st, f->dir, &ro, &err), AB_UNSUPPORTED); /* older */
    f->st = open_ok(f->dir, false); /* migrates 1 -> 2 -> 3 -> 4 -> 5 */
    ab_plugin_stats_t ps;
    assert_int_equal(ab__store_stats(f->st, &ps, &err), AB_OK); /* runs_active is there again */
    assert_int_equal(ps.runs_total, 1);
    ab_buf_t bytes = {0};
    assert_int_equal(ab__store_event_bytes(f->st, S("T"), S("r"), 1, &bytes, NULL, &err), AB_OK);
    assert_memory_equal(bytes.data, "e1", 2);
    ab_buf_free(&bytes);
    ab_request_new_t a = rq("k", "a", "T", "r2", "x");
    assert_int_equal(put_ok(f->st, &a, false).id, 1);
    ab__store_close(&f->st);
    f->st = open_ok(f->dir, true); /* now current: a reader opens it */
    ab_request_t got;
    assert_int_equal(ab__store_request_get(f->st, 1, &got, NULL, &err), AB_OK);
}

/* stats: runs recorded and active follow the appends, without a scan (store_stats.c). */
static void test_stats(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    ab_plugin_stats_t ps;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_stats(f->st, &ps, &err), AB_OK);
    assert_int_equal(ps.runs_total, 0);
    assert_int_equal(ps.runs_active, 0);
    assert_true(ps.store_bytes > 0);
    const char *runs[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) { /* three runs start */
        ab_append_event_t ev = {.thread = S("T"),
                                .run = {runs[i], 1},
                                .seq = 1,
                                .epoch = 1,
                                .bytes = (const uint8_t *)"s",
                                .len = 1,
                                .status = AB_RUN_STATUS_ACTIVE};
        uint64_t first = 0;
        assert_int_equal(ab__store_append_batch(f->st, &ev, 1, 1000, &first, &err), AB_OK);
    }
    ab_append_event_t end = {.thread = S("T"),
                             .run = S("b"),
                             .seq = 2,
                             .epoch = 1,
                             .bytes = (const uint8_t *)"f",
                             .len = 1,
                             .status = AB_RUN_STATUS_FINISHED,
                             .outcome = AB_OUTCOME_SUCCESS};
    uint64_t first = 0;
    assert_int_equal(ab__store_append_batch(f->st, &end, 1, 1000, &first, &err), AB_OK);
    uint64_t epoch = 0, last = 0;
    assert_int_equal(ab__store_claim(f->st, S("T"), S("d"), &epoch, &last, &err), AB_OK);
    assert_int_equal(ab__store_stats(f->st, &ps, &err), AB_OK);
    assert_int_equal(ps.runs_total, 4); /* a claim records a run too */
    assert_int_equal(ps.runs_active, 2);
    assert_true(ps.wal_bytes > 0); /* the appends are in the WAL until a checkpoint */
}

static void test_bounds(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    char longid[AB_ID_MAX_BYTES + 2];
    memset(longid, 'i', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    static const char *const field[] = {"key", "agent", "thread", "run"};
    for (int i = 0; i < 4; i++) {
        for (int empty = 0; empty < 2; empty++) {
            ab_request_new_t r = rq("k", "a", "T", "r", "x");
            ab_str_t *s[] = {&r.key, &r.agent, &r.thread, &r.run};
            *s[i] = empty ? S("") : S(longid);
            ab_error_t err = AB_ERROR_INIT;
            assert_int_equal(put_code(f->st, &r, &err), AB_INVALID_ARGUMENT);
            tu_assert_error(&err, AB_INVALID_ARGUMENT, field[i]);
        }
    }
    longid[AB_ID_MAX_BYTES] = '\0'; /* exactly the maximum is fine */
    ab_request_new_t maxed = rq(longid, longid, longid, longid, "x");
    assert_string_equal(put_ok(f->st, &maxed, false).key, longid);
    uint8_t *big = calloc(1, AB_REQUEST_INPUT_MAX_BYTES + 1);
    assert_non_null(big);
    ab_request_new_t r = rq("kbig", "a", "T", "rbig", "");
    r.input = big;
    r.input_len = AB_REQUEST_INPUT_MAX_BYTES + 1;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(put_code(f->st, &r, &err), AB_TOO_LARGE);
    tu_assert_error(&err, AB_TOO_LARGE, "input");
    r.input_len = AB_REQUEST_INPUT_MAX_BYTES;
    ab_request_t rec = put_ok(f->st, &r, false);
    ab_buf_t in = {0};
    assert_int_equal(ab__store_request_get(f->st, rec.id, &rec, &in, &err), AB_OK);
    assert_int_equal(in.len, AB_REQUEST_INPUT_MAX_BYTES);
    ab_buf_free(&in);
    free(big);
    r = rq("knull", "a", "T", "rnull", "");
    r.input = NULL;
    r.input_len = 3;
    assert_int_equal(put_code(f->st, &r, &err), AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "input");
    uint32_t n = 0;
    assert_int_equal(
        ab__store_request_list(f->st, AB_REQ_QUEUED, (ab_str_t){0}, 0, 0, NULL, NULL, &n, &err),
        AB_INVALID_ARGUMENT);
    assert_int_equal(
        ab__store_request_list(f->st, AB_REQ_NONE, (ab_str_t){0}, 0, 1, NULL, NULL, &n, &err),
        AB_INVALID_ARGUMENT);
    assert_int_equal(ab__store_request_list(f->st, (ab_request_state_t)9, (ab_str_t){0}, 0, 1, NULL,
                                            NULL, &n, &err),
                     AB_INVALID_ARGUMENT);
}

/* Writes refused on a read-only handle, inside an event batch, and while another
 * writer holds the write lock: typed errors, and nothing is stored or moved. */
static void test_refusals_change_nothing(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    ab_request_new_t a = rq("k", "a", "T", "r", "x");
    uint64_t id = put_ok(f->st, &a, false).id;
    ab_request_new_t b = rq("k2", "a", "T", "r2", "x");
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *ro = open_ok(f->dir, true);
    assert_int_equal(put_code(ro, &b, &err), AB_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "read-only"));
    assert_int_equal(move(ro, id, AB_REQ_QUEUED, 0, AB_REQ_ASSIGNED, "w", 1, NULL, &err),
                     AB_INVALID_ARGUMENT);
    ab__store_close(&ro);
    assert_int_equal(ab__store_begin(f->st, 1, &err), AB_OK);
    assert_int_equal(put_code(f->st, &b, &err), AB_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "event batch"));
    ab__store_rollback(f->st);
    /* a second writer handle holds the write lock: fail fast, retryable */
    ab_store_t *other = open_ok(f->dir, false);
    assert_int_equal(ab__store_begin(other, 1, &err), AB_OK);
    assert_int_equal(put_code(f->st, &b, &err), AB_UNAVAILABLE);
    assert_int_equal(move(f->st, id, AB_REQ_QUEUED, 0, AB_REQ_ASSIGNED, "w", 1, NULL, &err),
                     AB_UNAVAILABLE);
    ab__store_rollback(other);
    ab__store_close(&other);
    acc_t acc;
    assert_string_equal(list_text(f->st, AB_REQ_QUEUED, NULL, 0, 10, &acc), "1:k;");
    assert_int_equal(put_ok(f->st, &b, false).id, 2); /* after the lock: the retry works */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_get_idempotent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_conflicts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ids_and_lists, setup, teardown),
        cmocka_unit_test_setup_teardown(test_move_compare, setup, teardown),
        cmocka_unit_test_setup_teardown(test_position_and_thread_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_survives_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migrates_from_v1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals_change_nothing, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

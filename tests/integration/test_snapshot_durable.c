/*
 * test_snapshot_durable.c - durable thread snapshots against a real broker
 * (docs/PROTOCOL.md 7.8, docs/REDUCER.md section 6): after a run finishes
 * the persistence plugin holds a stored snapshot of the thread (read back
 * with a readonly plugin handle on the data directory) at the run's last
 * position; `snapshot` equals a local fold; events published after it are
 * folded on top of the stored one (the stored position does not move while
 * no run ends); SIGKILL during a run and between runs, restart: `snapshot`
 * equals a fresh fold of every stored event (and, answered from the stored
 * document at the head, the builder made after that answer folds the next
 * run on top). The capability is `available`.
 * With --snapshot-every 50, 120 events of one still-active run store a
 * snapshot (the stored position advances with no run end, to at least the
 * 50th event; the snapshot worker may cover more) and `snapshot` still
 * equals a local fold. With --snapshot-memory 1 (MiB), every-N snapshots of
 * an active run stop once its events take more than that (no stored
 * snapshot past the 128th 8 KiB event), while `snapshot` and the run-end
 * snapshot still cover everything; that run-end document, over 2 MiB, is
 * stored in parts and read back whole after a SIGKILL and restart. With
 * --snapshot-every 0, 1,100 events of an active run store nothing until a
 * clean stop, which stores the thread's document at its last event.
 */
#include "testutil.h"

#include "agentbus/json.h"
#include "agentbus/nego.h"
#include "agentbus/plugin.h"
#include "agentbus/snapshot.h"
#include "broker_proc.h"
#include "snap_fixture.h"

#include <sqlite3.h>

#define THREAD "thread-1"

static void publish_fold(snapfx_t *f, const char *run, uint64_t seq, const char *body, bool claim)
{
    ab_error_t err = AB_ERROR_INIT;
    if (claim) {
        ab_claimed_t cl;
        assert_int_equal(ab_conn_claim(f->c, THREAD, run, f->t->doc, &cl, IT_TIMEOUT, &err), AB_OK);
        f->epoch = cl.epoch;
        assert_int_equal(cl.last_seq, seq - 1);
    }
    ab_buf_t b = AB_BUF_INIT;
    assert_int_equal(ab_envelope_json(&b, 1, THREAD, run, seq, f->epoch, body, &err), AB_OK);
    ab_error_t rej;
    ab_result_t res = it_publish1(f->c, f->t->doc, &b, &rej);
    if (res.status != AB_RESULT_ACCEPTED)
        fail_msg("%s seq %llu not accepted: %s", run, (unsigned long long)seq, rej.message);
    f->last_pos = res.pos;
    ab_buf_free(&b);
    tu_ctx_t tc;
    tu_ctx_init(&tc);
    const ab_val_t *v = tu_json(&tc, body);
    assert_non_null(v);
    assert_int_equal(ab_reducer_apply(f->r, v, run, seq, &err), AB_OK);
    tu_ctx_free(&tc);
}

/* RUN_STARTED of @p run (claiming it); with @p message, then TEXT_MESSAGE_START of m-1. */
static void start_run(snapfx_t *f, const char *run, bool message)
{
    char body[512];
    snprintf(body, sizeof(body),
             "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
             "\"protocolVersion\":\"1.0\"}",
             THREAD, run);
    publish_fold(f, run, 1, body, true);
    if (message)
        publish_fold(
            f, run, 2,
            "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m-1\",\"role\":\"assistant\"}",
            false);
}

/* The full-run fixture: run-1 of thread-1, ending with RUN_FINISHED. */
static void publish_fixture(snapfx_t *f)
{
    size_t len = 0;
    char *text = tu_read_file(AB_FIXTURES_DIR "/threads/full-run.jsonl", &len);
    assert_non_null(text);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        char *body = json_dumps(json_object_get(j, "event"), JSON_COMPACT);
        uint64_t seq = (uint64_t)json_integer_value(json_object_get(j, "seq"));
        publish_fold(f, json_string_value(json_object_get(j, "run")), seq, body, seq == 1);
        free(body);
        json_decref(j);
    }
    free(text);
}

/* The part rows of THREAD's snapshot at @p pos (store/store_snap.c), read with sqlite3. */
static int64_t part_rows(const char *dir, uint64_t pos)
{
    char path[600];
    snprintf(path, sizeof path, "%s/agentbus.db", dir);
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT count(*) FROM snapshot_parts WHERE thread = ?1 "
                                        "AND pos = ?2",
                                        -1, &q, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(q, 1, THREAD, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, (sqlite3_int64)pos);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    int64_t n = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return n;
}

static void reconnect(snapfx_t *f, bool kill_first)
{
    ab_conn_destroy(&f->c);
    if (kill_first)
        bp_kill(&f->t->bp);
    assert_int_equal(bp_restart(&f->t->bp), 0);
    f->c = it_connect(&f->t->bp);
}

static void test_snapshot_durable(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    snapfx_t f = snapfx_open(t, THREAD);
    /* default --snapshot-every 1000: run ends and every N events -> available */
    snapfx_require_available(&f);
    assert_int_equal(snapfx_stored(t->bp.dir, THREAD, NULL, true), 0);

    /* a finished run: a stored snapshot at its last position */
    publish_fixture(&f);
    uint64_t run1_end = f.last_pos;
    assert_int_equal(snapfx_wait_stored(t->bp.dir, THREAD, run1_end, true), run1_end);
    assert_int_equal(snapfx_check(&f), run1_end);

    /* later events are folded on top of the stored snapshot */
    char body[512];
    snprintf(body, sizeof(body),
             "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"run-2\","
             "\"protocolVersion\":\"1.0\"}",
             THREAD);
    publish_fold(&f, "run-2", 1, body, true);
    publish_fold(&f, "run-2", 2,
                 "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m-2\",\"role\":\"assistant\"}",
                 false);
    publish_fold(&f, "run-2", 3,
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-2\",\"delta\":\"half\"}",
                 false);
    assert_int_equal(snapfx_check(&f), f.last_pos);
    assert_int_equal(snapfx_stored(t->bp.dir, THREAD, NULL, true), run1_end);

    /* SIGKILL during a run: restart, same answer */
    reconnect(&f, true);
    assert_int_equal(snapfx_check(&f), f.last_pos);
    assert_int_equal(snapfx_stored(t->bp.dir, THREAD, NULL, true), run1_end);

    /* finish run-2 (claimed again after the restart): the stored snapshot moves */
    publish_fold(&f, "run-2", 4,
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-2\",\"delta\":\" done\"}",
                 true);
    publish_fold(&f, "run-2", 5, "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m-2\"}", false);
    snprintf(body, sizeof(body),
             "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"run-2\"}", THREAD);
    publish_fold(&f, "run-2", 6, body, false);
    uint64_t run2_end = f.last_pos;
    assert_int_equal(snapfx_wait_stored(t->bp.dir, THREAD, run2_end, true), run2_end);
    assert_int_equal(snapfx_check(&f), run2_end);

    /* SIGKILL between runs: restart, same answer from the stored snapshot (at the head, so
     * sent as stored before the builder is made: snapshot_cmd.c invariant 5); the builder
     * made after that answer then folds what follows */
    reconnect(&f, true);
    assert_int_equal(snapfx_stored(t->bp.dir, THREAD, NULL, true), run2_end);
    assert_int_equal(snapfx_check(&f), run2_end);
    start_run(&f, "run-3", true);
    assert_int_equal(snapfx_check(&f), f.last_pos);

    /* a clean restart, then one more run folded on top */
    ab_conn_destroy(&f.c);
    assert_int_equal(bp_stop(&t->bp), 0);
    reconnect(&f, false);
    start_run(&f, "run-4", false);
    assert_int_equal(snapfx_check(&f), f.last_pos);

    snapfx_close(&f);
}

/* Snapshots every 50 events: an active run of 120 events gets stored snapshots. */
static void test_snapshot_every(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    snapfx_t f = snapfx_open(t, THREAD);
    /* run ends and every N events stored: the capability is complete */
    snapfx_require_available(&f);
    char body[512];
    start_run(&f, "run-1", true);
    uint64_t pos50 = 0;
    for (uint64_t seq = 3; seq <= 120; seq++) {
        snprintf(body, sizeof(body),
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-1\",\"delta\":\"d%llu \"}",
                 (unsigned long long)seq);
        publish_fold(&f, "run-1", seq, body, false);
        if (seq == 50)
            pos50 = f.last_pos;
    }
    /* one event per publish: each group holds one event; the first every-N
     * request comes at the 50th, the worker may cover a few more */
    assert_true(pos50 > 0);
    (void)snapfx_wait_stored(t->bp.dir, THREAD, pos50, true);
    assert_int_equal(snapfx_check(&f), f.last_pos);

    /* a restart folds on top of the stored snapshot: same answer */
    reconnect(&f, true);
    uint64_t at = snapfx_stored(t->bp.dir, THREAD, NULL, true);
    assert_true(at >= pos50 && at <= f.last_pos);
    assert_int_equal(snapfx_check(&f), f.last_pos);

    snapfx_close(&f);
}

static int setup_every_off(void **state)
{
    static const char *const extra[] = {"--snapshot-every", "0", NULL};
    return it_setup_with(state, extra);
}

/* A clean stop stores the document of a thread with AB_SNAP_FLUSH_EVENTS (1024) or more
 * events since its last one (broker/snapsched.c invariant 4), also with every-N off. */
static void test_snapshot_stop_flush(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    snapfx_t f = snapfx_open(t, THREAD);
    char body[512];
    start_run(&f, "run-1", true);
    for (uint64_t seq = 3; seq <= 1100; seq++) {
        snprintf(body, sizeof(body),
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-1\",\"delta\":\"d%llu \"}",
                 (unsigned long long)seq);
        publish_fold(&f, "run-1", seq, body, false);
    }
    /* no run ended and every-N is off: nothing is stored while the broker runs */
    assert_int_equal(snapfx_stored(t->bp.dir, THREAD, NULL, true), 0);
    ab_conn_destroy(&f.c);
    assert_int_equal(bp_stop(&t->bp), 0);
    assert_int_equal(snapfx_stored(t->bp.dir, THREAD, NULL, true), f.last_pos);
    assert_int_equal(bp_restart(&t->bp), 0);
    f.c = it_connect(&t->bp);
    assert_int_equal(snapfx_check(&f), f.last_pos);
    snapfx_close(&f);
}

static int setup_memory_cap(void **state)
{
    static const char *const extra[] = {"--snapshot-every", "20", "--snapshot-memory", "1", NULL};
    return it_setup_with(state, extra);
}

static void test_snapshot_memory_cap(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    snapfx_t f = snapfx_open(t, THREAD);
    static char body[9000];
    start_run(&f, "run-1", true);
    uint64_t pos128 = 0;
    for (uint64_t seq = 3; seq <= 260; seq++) { /* 8 KiB deltas: 1 MiB of them by the 128th */
        int k = snprintf(body, sizeof(body),
                         "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-1\",\"delta\":\"");
        memset(body + k, 'a' + (int)(seq % 26), 8192);
        snprintf(body + k + 8192, sizeof(body) - (size_t)k - 8192, "\"}");
        publish_fold(&f, "run-1", seq, body, false);
        if (seq == 128)
            pos128 = f.last_pos;
    }
    /* whatever the worker managed to store, it held at most 1 MiB of events: never
     * past the 128th (the worker only lags, so this cannot fail by timing) */
    uint64_t before_end = snapfx_stored(t->bp.dir, THREAD, NULL, true);
    if (before_end > pos128)
        fail_msg("stored snapshot at %llu, past the cap (128th event at %llu)",
                 (unsigned long long)before_end, (unsigned long long)pos128);
    assert_int_equal(snapfx_check(&f), f.last_pos); /* SNAPSHOT has no cap */
    publish_fold(&f, "run-1", 261, "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m-1\"}", false);
    snprintf(body, sizeof(body),
             "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"run-1\"}", THREAD);
    publish_fold(&f, "run-1", 262, body, false);
    /* the run end is stored whatever its size: over 2 MiB of text, so in parts of
     * AB_SNAP_PART_BYTES, one between two groups (broker/snapstore.c) */
    assert_int_equal(snapfx_wait_stored(t->bp.dir, THREAD, f.last_pos, true), f.last_pos);
    size_t size = 0;
    assert_int_equal(snapfx_stored(t->bp.dir, THREAD, &size, true), f.last_pos);
    assert_true(size > 4 * (512u << 10));
    assert_true(part_rows(t->bp.dir, f.last_pos) >= 4);
    assert_int_equal(snapfx_check(&f), f.last_pos);
    /* SIGKILL, restart: the cold SNAPSHOT reads the document back from its parts */
    reconnect(&f, true);
    assert_int_equal(snapfx_check(&f), f.last_pos);
    snapfx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_snapshot_durable, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_every, snapfx_setup_every50, it_teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_memory_cap, setup_memory_cap, it_teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_stop_flush, setup_every_off, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

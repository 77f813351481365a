/*
 * test_snapshot_store.c - stored snapshots against a real broker (docs/
 * REDUCER.md section 6, docs/OPERATIONS.md "Snapshots"):
 *  - a stored snapshot of an older projection format (what a build before
 *    AB_REDUCER_FORMAT_VERSION 2 stored), one that is garbage, the document
 *    of another thread, or a valid document of the thread claiming a
 *    position beyond the head,
 *    written into the store while the broker is stopped: after the restart
 *    `snapshot` still equals a fresh local fold of every stored event, and
 *    the broker logs a warning naming the ignored snapshot;
 *  - with the default configuration a long active run gets stored
 *    snapshots while it runs (every N = 1000 events);
 *  - with --snapshot-every 50 a 1,500-event active run is not snapshotted
 *    every 50 events: each stored snapshot follows at least N events and at
 *    least its predecessor's size in bytes (a bounded number of documents).
 */
#include "testutil.h"

#include "agentbus/json.h"
#include "agentbus/nego.h"
#include "agentbus/plugin.h"
#include "agentbus/snapshot.h"
#include "broker_proc.h"
#include "loader.h"
#include "snap_fixture.h"

#include <fcntl.h>
#include <unistd.h>

#define THREAD "thread-1"
#define BATCH  100

/* Publish @p n events of run-1 (RUN_STARTED first, then text deltas), folding them locally. */
static void publish_run(snapfx_t *f, uint64_t n, uint64_t *pos_of, uint64_t pos_seq)
{
    ab_error_t err = AB_ERROR_INIT;
    if (f->next_seq == 0) {
        ab_claimed_t cl;
        assert_int_equal(ab_conn_claim(f->c, THREAD, "run-1", f->t->doc, &cl, IT_TIMEOUT, &err),
                         AB_OK);
        f->epoch = cl.epoch;
        f->next_seq = 1;
    }
    ab_buf_t evs[BATCH];
    char body[256];
    tu_ctx_t tc;
    tu_ctx_init(&tc);
    memset(evs, 0, sizeof(evs));
    for (uint64_t done = 0; done < n;) {
        size_t k = 0;
        uint64_t first = f->next_seq;
        for (; k < BATCH && done < n; k++, done++, f->next_seq++) {
            if (f->next_seq == 1)
                snprintf(body, sizeof(body),
                         "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"run-1\","
                         "\"protocolVersion\":\"1.0\"}",
                         THREAD);
            else if (f->next_seq == 2)
                snprintf(
                    body, sizeof(body),
                    "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\",\"role\":\"assistant\"}");
            else
                snprintf(
                    body, sizeof(body),
                    "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"d%llu \"}",
                    (unsigned long long)f->next_seq);
            evs[k].len = 0;
            assert_int_equal(
                ab_envelope_json(&evs[k], 1, THREAD, "run-1", f->next_seq, f->epoch, body, &err),
                AB_OK);
            assert_int_equal(ab_reducer_apply(f->r, tu_json(&tc, body), "run-1", f->next_seq, &err),
                             AB_OK);
        }
        const ab_result_t *res = NULL;
        if (ab_conn_publish(f->c, evs, k, f->t->doc, &res, IT_TIMEOUT, &err) != AB_OK)
            fail_msg("publish: %s", err.message);
        for (size_t i = 0; i < k; i++) {
            if (res[i].status != AB_RESULT_ACCEPTED)
                fail_msg("seq %llu rejected: %s", (unsigned long long)(first + i),
                         res[i].error ? res[i].error->message : "?");
            if (pos_of != NULL && first + i == pos_seq)
                *pos_of = res[i].pos;
        }
        f->last_pos = res[k - 1].pos;
    }
    for (size_t i = 0; i < BATCH; i++)
        ab_buf_free(&evs[i]);
    tu_ctx_free(&tc);
}

/* Overwrite the stored snapshot of THREAD (broker stopped) with @p doc. */
static void put_stored(const char *dir, uint64_t pos, const char *doc)
{
    const ab_plugin_t *p = ab__plugin_sqlite();
    ab_plugin_open_opts_t o = {.data_dir = dir};
    ab_plugin_db_t *db = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(p->open(&o, &db, &err), AB_OK);
    assert_int_equal(p->snapshot_put(db, (ab_str_t){THREAD, strlen(THREAD)}, pos,
                                     (const uint8_t *)doc, strlen(doc), &err),
                     AB_OK);
    p->close(db);
}

/* The stored snapshot of THREAD (broker stopped) as a jansson document; its row position in @p pos.
 */
static json_t *get_stored(const char *dir, uint64_t *pos)
{
    const ab_plugin_t *p = ab__plugin_sqlite();
    ab_plugin_open_opts_t o = {.data_dir = dir, .readonly = true};
    ab_plugin_db_t *db = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(p->open(&o, &db, &err), AB_OK);
    ab_buf_t text = AB_BUF_INIT;
    assert_int_equal(p->snapshot_get(db, (ab_str_t){THREAD, strlen(THREAD)}, &text, pos, &err),
                     AB_OK);
    ab_snapshot_t *s = NULL; /* the binary form, read back as JSON */
    ab_buf_t json = AB_BUF_INIT;
    assert_int_equal(ab_snapshot_load(text.data, text.len, &s, &err), AB_OK);
    assert_int_equal(ab_snapshot_json(s, &json, &err), AB_OK);
    json_t *doc = json_loadb((const char *)json.data, json.len, JSON_ALLOW_NUL, NULL);
    assert_non_null(doc);
    ab_snapshot_destroy(&s);
    ab_buf_free(&json);
    ab_buf_free(&text);
    p->close(db);
    return doc;
}

/* Start the stopped broker with its stderr in @p log; true when the log names the ignored
 * snapshot. */
static bool restart_logged(snapfx_t *f, const char *log)
{
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, STDERR_FILENO); /* the broker child inherits it */
    int rc = bp_restart(&f->t->bp);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fd);
    assert_int_equal(rc, 0);
    f->c = it_connect(&f->t->bp);
    assert_int_equal(snapfx_check(f), f->last_pos);
    size_t len = 0;
    char *text = tu_read_file(log, &len);
    bool found = text != NULL && strstr(text, "stored snapshot of " THREAD " ignored") != NULL;
    free(text);
    return found;
}

static void test_corrupt_stored(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char log[512];
    snprintf(log, sizeof(log), "%s/broker-stderr.log", t->bp.dir);
    snapfx_t f = snapfx_open(t, THREAD);
    publish_run(&f, 1200, NULL, 0); /* an every-N snapshot is stored at about 1000 */
    uint64_t at = snapfx_wait_stored(t->bp.dir, THREAD, 1, false);
    assert_true(at <= f.last_pos);

    /* the stored document as an older build wrote it (projection format 1): ignored with a
     * warning, the answer folded from the events, never an error */
    ab_conn_destroy(&f.c);
    assert_int_equal(bp_stop(&t->bp), 0);
    uint64_t row = 0;
    json_t *old = get_stored(t->bp.dir, &row);
    assert_int_equal(row, at);
    json_object_set_new(json_object_get(old, "projection"), "formatVersion", json_integer(1));
    json_object_set_new(json_object_get(old, "checkpoint"), "position",
                        json_integer((json_int_t)(at + 1)));
    char *text = json_dumps(old, JSON_COMPACT);
    put_stored(t->bp.dir, at + 1, text);
    free(text);
    json_decref(old);
    assert_true(restart_logged(&f, log));
    char *logged = tu_read_file(log, NULL);
    assert_non_null(strstr(logged, "projection formatVersion is 1"));
    free(logged);

    /* garbage at a higher position: ignored with a warning, full fold */
    ab_conn_destroy(&f.c);
    assert_int_equal(bp_stop(&t->bp), 0);
    put_stored(t->bp.dir, at + 2, "{\"formatVersion\":1, this is not JSON");
    assert_true(restart_logged(&f, log));

    /* a binary document cut short (a map of one pair whose key is cut): ignored, full fold */
    ab_conn_destroy(&f.c);
    assert_int_equal(bp_stop(&t->bp), 0);
    put_stored(t->bp.dir, at + 3,
               "\x81\xa5"
               "abc");
    assert_true(restart_logged(&f, log));
    logged = tu_read_file(log, NULL);
    assert_non_null(strstr(logged, "snapshot rule 'msgpack'"));
    free(logged);

    /* the document of another thread, stored under this one */
    ab_conn_destroy(&f.c);
    assert_int_equal(bp_stop(&t->bp), 0);
    ab_snapshot_builder_t *sb = NULL;
    json_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_snapshot_builder_new(&sb, "thread-other", &err), AB_OK);
    assert_int_equal(ab__snapshot_builder_document(sb, &doc, &err), AB_OK);
    text = json_dumps(doc, JSON_COMPACT);
    put_stored(t->bp.dir, at + 4, text);
    free(text);
    json_decref(doc);
    ab_snapshot_builder_destroy(&sb);
    assert_true(restart_logged(&f, log));

    /* a valid document of this thread claiming events beyond the head */
    ab_conn_destroy(&f.c);
    assert_int_equal(bp_stop(&t->bp), 0);
    assert_int_equal(ab_snapshot_builder_new(&sb, THREAD, &err), AB_OK);
    assert_int_equal(ab__snapshot_builder_document(sb, &doc, &err), AB_OK);
    json_object_set_new(json_object_get(doc, "checkpoint"), "position",
                        json_integer((json_int_t)(f.last_pos + 1000)));
    text = json_dumps(doc, JSON_COMPACT);
    put_stored(t->bp.dir, f.last_pos + 1000, text);
    free(text);
    json_decref(doc);
    ab_snapshot_builder_destroy(&sb);
    assert_true(restart_logged(&f, log));

    /* more events fold on top; a sound snapshot replaces the bad one at the next run end */
    publish_run(&f, 10, NULL, 0);
    assert_int_equal(snapfx_check(&f), f.last_pos);
    snapfx_close(&f);
}

/* Default configuration: a long active run gets stored snapshots while it runs. */
static void test_default_every_n(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    snapfx_t f = snapfx_open(t, THREAD);
    snapfx_require_available(&f);
    uint64_t pos999 = 0;
    publish_run(&f, 998, &pos999, 998);
    assert_int_equal(snapfx_stored(t->bp.dir, THREAD, NULL, false),
                     0); /* fewer than N events, no run end */
    publish_run(&f, 302, NULL, 0);
    uint64_t at = snapfx_wait_stored(t->bp.dir, THREAD, 1, false);
    assert_true(at > pos999);      /* at least N events covered */
    assert_true(at <= f.last_pos); /* never more than committed; the run is still active */
    assert_int_equal(snapfx_check(&f), f.last_pos);
    snapfx_close(&f);
}

/* --snapshot-every 50 on a 1,500-event active run: stored snapshots spaced by the byte rule. */
static void test_every_n_not_quadratic(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    snapfx_t f = snapfx_open(t, THREAD);
    uint64_t seen_pos[64], prev_pos = 0;
    size_t seen_size[64], n = 0;
    for (int batch = 0; batch < 15; batch++) {
        publish_run(&f, BATCH, NULL, 0);
        long end = ab__mono_ms() + 300; /* let the worker catch up a little */
        size_t size = 0;
        uint64_t at = 0;
        while ((at = snapfx_stored(t->bp.dir, THREAD, &size, false)) == prev_pos &&
               ab__mono_ms() < end)
            usleep(10 * 1000);
        if (at != prev_pos && n < 64) {
            seen_pos[n] = at;
            seen_size[n++] = size;
            prev_pos = at;
        }
    }
    /* stored while the run is active, more than once, never claiming more than committed */
    assert_true(n >= 2);
    assert_true(seen_pos[n - 1] <= f.last_pos);
    /* every 50 events would be 30 documents; the rule (N events and the last
     * document's size in bytes) grows the spacing with the document */
    assert_true(n <= 10);
    for (size_t i = 1; i < n; i++)
        assert_true(seen_pos[i] - seen_pos[i - 1] >= 50);
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += seen_size[i];
    assert_true(total <= 4 * seen_size[n - 1]); /* geometric, not quadratic */
    assert_int_equal(snapfx_check(&f), f.last_pos);
    snapfx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_corrupt_stored, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_default_every_n, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_every_n_not_quadratic, snapfx_setup_every50,
                                        it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

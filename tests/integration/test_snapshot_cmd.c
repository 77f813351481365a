/*
 * test_snapshot_cmd.c - the `snapshot` request against a real broker
 * (docs/PROTOCOL.md 7.8): a thread with an interrupted run, its resume and a
 * run still active is published; the `snapshot_reply` document passes
 * ab_snapshot_parse(), its projection equals a local ab_reducer fold of the
 * same events and it names the active run; an unknown thread is not_found;
 * `agentbus snapshot T --json` prints the document and the summary names the
 * runs; the capability is announced `available` (durable snapshots). A
 * thread whose strings hold U+0000 gives the same answer, through the CLI too,
 * and the snapshot the broker stores for it parses back.
 */
#include "testutil.h"

#include "agentbus/json.h"
#include "agentbus/nego.h"
#include "agentbus/snapshot.h"
#include "broker_proc.h"
#include "snap_fixture.h"

#define OUT_MAX (64 * 1024)
#define THREAD  "thread-2"

#include "cli_run.h"

/* Publish one event (claiming the run at its first seq) and fold it locally. */
static void publish_fold_in(ab_conn_t *c, it_t *t, ab_reducer_t *r, const char *thread,
                            const char *run, uint64_t seq, const char *body, uint64_t *epoch)
{
    ab_error_t err = AB_ERROR_INIT;
    if (seq == 1) {
        ab_claimed_t cl;
        assert_int_equal(ab_conn_claim(c, thread, run, t->doc, &cl, IT_TIMEOUT, &err), AB_OK);
        *epoch = cl.epoch;
    }
    ab_buf_t b = AB_BUF_INIT;
    assert_int_equal(ab_envelope_json(&b, 1, thread, run, seq, *epoch, body, &err), AB_OK);
    const ab_result_t *res = NULL;
    assert_int_equal(ab_conn_publish(c, &b, 1, t->doc, &res, IT_TIMEOUT, &err), AB_OK);
    if (res[0].status != AB_RESULT_ACCEPTED)
        fail_msg("%s seq %llu not accepted: %s", run, (unsigned long long)seq,
                 res[0].error ? res[0].error->message : "?");
    ab_buf_free(&b);
    tu_ctx_t tc;
    tu_ctx_init(&tc);
    const ab_val_t *v = tu_json(&tc, body);
    assert_non_null(v);
    assert_int_equal(ab_reducer_apply(r, v, run, seq, &err), AB_OK);
    tu_ctx_free(&tc);
}

static void publish_fold(ab_conn_t *c, it_t *t, ab_reducer_t *r, const char *run, uint64_t seq,
                         const char *body, uint64_t *epoch)
{
    publish_fold_in(c, t, r, THREAD, run, seq, body, epoch);
}

/* The broker refuses a resume entry for an interrupt that was never raised
 * (docs/SEQUENCER.md section 2a) while the reducer only warns about one, and
 * a fixture may hold one for the reducer's sake: drop such entries from
 * @p ev, given the interrupts @p raised so far (a JSON array of ids). */
static void keep_raised(json_t *ev, json_t *raised)
{
    json_t *ints = json_object_get(json_object_get(ev, "outcome"), "interrupts");
    for (size_t i = 0; i < json_array_size(ints); i++)
        json_array_append(raised, json_object_get(json_array_get(ints, i), "id"));
    json_t *resume = json_object_get(json_object_get(ev, "input"), "resume");
    for (size_t i = json_array_size(resume); i-- > 0;) {
        json_t *id = json_object_get(json_array_get(resume, i), "interruptId");
        bool known = false;
        for (size_t k = 0; k < json_array_size(raised); k++)
            known = known || json_equal(json_array_get(raised, k), id);
        if (!known)
            json_array_remove(resume, i);
    }
}

/* Publish (and fold) every event of fixture thread file @p name as thread @p thread. */
static void publish_fixture(ab_conn_t *c, it_t *t, ab_reducer_t *r, const char *thread,
                            const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/threads/%s.jsonl", AB_FIXTURES_DIR, name);
    size_t len = 0;
    char *text = tu_read_file(path, &len);
    uint64_t epoch = 0;
    json_t *raised = json_array();
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, JSON_ALLOW_NUL, NULL);
        assert_non_null(j);
        keep_raised(json_object_get(j, "event"), raised);
        char *body = json_dumps(json_object_get(j, "event"), JSON_COMPACT);
        publish_fold_in(c, t, r, thread, json_string_value(json_object_get(j, "run")),
                        (uint64_t)json_integer_value(json_object_get(j, "seq")), body, &epoch);
        free(body);
        json_decref(j);
    }
    json_decref(raised);
    free(text);
}

/* The fixture thread (interrupt, then resume) plus a run left active. */
static void publish_thread(ab_conn_t *c, it_t *t, ab_reducer_t *r)
{
    uint64_t epoch = 0;
    publish_fixture(c, t, r, THREAD, "interrupt-resume");
    publish_fold(c, t, r, "run-9", 1,
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"" THREAD
                 "\",\"runId\":\"run-9\",\"protocolVersion\":\"1.0\"}",
                 &epoch);
    publish_fold(c, t, r, "run-9", 2,
                 "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m-9\",\"role\":\"assistant\"}",
                 &epoch);
    publish_fold(c, t, r, "run-9", 3,
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-9\",\"delta\":\"half\"}",
                 &epoch);
}

static ab_status_t ask(ab_conn_t *c, it_t *t, const char *thread, ab_msg_t *m, ab_error_t *err)
{
    ab_msg_t q = {.op = AB_OP_SNAPSHOT, .u.snapshot = {.thread = {thread, strlen(thread)}}};
    return ab_conn_request(c, &q, NULL, 0, t->doc, m, IT_TIMEOUT, err);
}

static void test_snapshot_matches_local_fold(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    size_t ncaps = 0;
    const ab_cap_t *caps = ab_conn_caps(c, &ncaps);
    assert_int_equal(ab_caps_lookup(caps, ncaps, AB_CAP_DURABLE_SNAPSHOTS), AB_CAP_AVAILABLE);
    ab_reducer_t *r = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_reducer_new(&r, THREAD, &err), AB_OK);
    publish_thread(c, t, r);

    ab_msg_t m;
    assert_int_equal(ask(c, t, THREAD, &m, &err), AB_OK);
    assert_int_equal(m.op, AB_OP_SNAPSHOT_REPLY);
    assert_non_null(m.u.snapshot_reply.snapshot);
    ab_buf_t text = AB_BUF_INIT;
    assert_int_equal(ab_val_to_json(m.u.snapshot_reply.snapshot, &text), AB_OK);
    ab_snapshot_t *snap = NULL;
    if (ab_snapshot_parse((const char *)text.data, text.len, &snap, &err) != AB_OK)
        fail_msg("snapshot rejected: %s", err.message);
    const json_t *doc = ab__snapshot_document(snap);
    const json_t *proj = json_object_get(doc, "projection");
    if (!json_equal((json_t *)(uintptr_t)proj, (json_t *)(uintptr_t)ab__reducer_state(r))) {
        char *a = json_dumps(proj, JSON_COMPACT),
             *b = json_dumps(ab__reducer_state(r), JSON_COMPACT);
        fail_msg("projection differs:\n broker %s\n local  %s", a, b);
    }
    const json_t *active = json_object_get(doc, "activeRuns");
    assert_int_equal(json_array_size(active), 1);
    assert_string_equal(json_string_value(json_array_get(active, 0)), "run-9");
    /* approvals: the interrupt of run-1 was answered by run-2 */
    assert_true(json_array_size(json_object_get(proj, "approvals")) >= 1);
    ab_snapshot_destroy(&snap);
    ab_buf_free(&text);

    /* unknown thread */
    ab_error_t e2 = AB_ERROR_INIT;
    assert_int_equal(ask(c, t, "no-such-thread", &m, &e2), AB_NOT_FOUND);
    assert_int_equal(m.op, AB_OP_ERROR);
    assert_false(e2.retryable);

    /* the CLI */
    char *out = malloc(OUT_MAX);
    assert_non_null(out);
    assert_int_equal(it_run_cli(out, "snapshot %s --broker %s --json", THREAD, t->bp.cmd), 0);
    json_t *cli_doc = json_loads(out, 0, NULL);
    assert_non_null(cli_doc);
    assert_true(json_equal(json_object_get(cli_doc, "projection"),
                           (json_t *)(uintptr_t)ab__reducer_state(r)));
    json_decref(cli_doc);
    assert_int_equal(it_run_cli(out, "snapshot %s --broker %s", THREAD, t->bp.cmd), 0);
    assert_non_null(strstr(out, "thread " THREAD));
    assert_non_null(strstr(out, "run-1"));
    assert_non_null(strstr(out, "interrupted"));
    assert_non_null(strstr(out, "run-9"));
    assert_non_null(strstr(out, "pending approvals: "));
    assert_int_equal(it_run_cli(out, "snapshot nope --broker %s", t->bp.cmd), 1);
    assert_non_null(strstr(out, "not_found"));
    assert_int_equal(it_run_cli(out, "snapshot"), 2);
    assert_int_equal(it_run_cli(out, "snapshot --help"), 0);
    free(out);
    ab_reducer_destroy(&r);
    ab_conn_destroy(&c);
}

/* U+0000 in strings (text, arguments, state, metadata, an active run's events): the reply,
 * and `agentbus snapshot` (which failed with "snapshot rule 'json'" before), keep them. */
static void test_snapshot_with_nul(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    ab_reducer_t *r = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_reducer_new(&r, "thread-9", &err), AB_OK);
    publish_fixture(c, t, r, "thread-9", "nul-bytes");
    ab_msg_t m;
    assert_int_equal(ask(c, t, "thread-9", &m, &err), AB_OK);
    ab_buf_t text = AB_BUF_INIT;
    assert_int_equal(ab_val_to_json(m.u.snapshot_reply.snapshot, &text), AB_OK);
    ab_snapshot_t *snap = NULL;
    if (ab_snapshot_parse((const char *)text.data, text.len, &snap, &err) != AB_OK)
        fail_msg("snapshot rejected: %s", err.message);
    assert_true(json_equal(json_object_get(ab__snapshot_document(snap), "projection"),
                           (json_t *)(uintptr_t)ab__reducer_state(r)));
    ab_snapshot_destroy(&snap);
    ab_buf_free(&text);
    char *out = malloc(OUT_MAX);
    assert_non_null(out);
    assert_int_equal(it_run_cli(out, "snapshot thread-9 --broker %s --json", t->bp.cmd), 0);
    json_t *cli_doc = json_loads(out, JSON_ALLOW_NUL, NULL);
    assert_non_null(cli_doc);
    const json_t *proj = json_object_get(cli_doc, "projection");
    assert_true(json_equal(proj, (json_t *)(uintptr_t)ab__reducer_state(r)));
    const json_t *msg = json_array_get(json_object_get(proj, "messages"), 1);
    assert_int_equal(json_string_length(json_object_get(msg, "content")), 7); /* "a\0b\0end" */
    json_decref(cli_doc);
    assert_int_equal(it_run_cli(out, "snapshot thread-9 --broker %s", t->bp.cmd), 0);
    assert_non_null(strstr(out, "thread thread-9"));
    free(out);
    /* the document the broker stored at run-1's end (JSON text) parses back */
    snapfx_wait_stored(t->bp.dir, "thread-9", 1, true);
    ab_reducer_destroy(&r);
    ab_conn_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_snapshot_matches_local_fold, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_with_nul, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

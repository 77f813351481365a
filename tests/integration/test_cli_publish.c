/*
 * test_cli_publish.c - `agentbus publish` and `agentbus runs` as processes
 * against a real broker: a fixture stream published with the ids of its
 * RUN_STARTED line and listed as finished, then again as duplicates without
 * a claim; a stream the broker rejects, with the line, seq and typed error;
 * a malformed or illegal line found before anything is sent; an empty input
 * that leaves no run; --append; a changed file answered as a conflict;
 * usage errors (exit 2) in one format; an unreachable broker.
 */
#include "testutil.h"

#include "broker_proc.h"

#include "cli_run.h"

struct head {
    uint64_t seq, epoch;
    ab_run_status_t status;
    ab_agui_outcome_t outcome;
};

static struct head head_of(it_t *t, const char *thread, const char *run)
{
    ab_conn_t *c = it_connect(&t->bp);
    ab_run_ref_t ref = {{thread, strlen(thread)}, {run, strlen(run)}};
    ab_heads_t q = {.runs = &ref, .nruns = 1};
    ab_heads_reply_t hr;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_heads(c, &q, t->doc, &hr, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(hr.nheads, 1);
    struct head h = {hr.heads[0].last_seq, hr.heads[0].epoch, hr.heads[0].status,
                     hr.heads[0].outcome};
    ab_conn_destroy(&c);
    return h;
}

static uint64_t head_seq(it_t *t, const char *thread, const char *run)
{
    return head_of(t, thread, run).seq;
}

static void test_publish_fixture_and_list(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char out[OUT_MAX];
    int rc = it_run_cli(out, "publish --broker %s --batch 7 %s/streams/valid/full-run.jsonl",
                        t->bp.cmd, AB_FIXTURES_DIR);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "published 31 events to thread thread-1 run run-1 "
                                "(seq 1..31, 0 duplicates) in "));
    assert_int_equal(head_seq(t, "thread-1", "run-1"), 31);
    rc = it_run_cli(out, "runs --broker %s --thread thread-1", t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "THREAD"));
    char *row = strstr(out, "thread-1 ");
    assert_non_null(row);
    assert_non_null(strstr(row, "run-1"));
    assert_non_null(strstr(row, "finished"));
    assert_non_null(strstr(row, " 31 "));
    rc = it_run_cli(out, "runs --broker %s --json", t->bp.cmd); /* the whole bus */
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "{\"thread\":\"thread-1\",\"run\":\"run-1\",\"status\":"
                                "\"finished\",\"outcome\":\"success\",\"seq\":31,"));
    assert_null(strstr(out, "\"ended\":null"));
    /* the same stream again: every event is a duplicate, and the run is not claimed again */
    for (int i = 0; i < 2; i++) {
        rc = it_run_cli(out, "publish --broker %s %s/streams/valid/full-run.jsonl", t->bp.cmd,
                        AB_FIXTURES_DIR);
        assert_int_equal(rc, 0);
        assert_non_null(strstr(out, "published 31 events to thread thread-1 run run-1 "
                                    "(seq 1..31, 31 duplicates) in "));
    }
    rc = it_run_cli(out, "publish --broker %s --json - < %s/streams/valid/full-run.jsonl",
                    t->bp.cmd, AB_FIXTURES_DIR); /* standard input, spooled */
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "{\"ok\":true,\"thread\":\"thread-1\",\"run\":\"run-1\","
                                "\"events\":31,\"acked\":31,\"duplicates\":31,"));
    assert_int_equal(head_of(t, "thread-1", "run-1").epoch, 1);
}

/* An ACTIVITY_DELTA whose baseline may be in an earlier run is the broker's to judge. */
static void test_publish_broker_rejection(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char path[64], out[OUT_MAX];
    it_temp_file(path, sizeof(path),
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"tb\",\"runId\":\"rb\","
                 "\"protocolVersion\":\"1.0\"}\n"
                 "{\"type\":\"STEP_STARTED\",\"stepName\":\"s\"}\n\n"
                 "{\"type\":\"ACTIVITY_DELTA\",\"messageId\":\"nope\",\"activityType\":\"x\","
                 "\"patch\":[]}\n");
    int rc = it_run_cli(out, "publish --broker %s --batch 1 %s", t->bp.cmd, path);
    unlink(path);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "rejected at line 4 (seq 3): invalid_event: "));
    assert_non_null(strstr(out, "(at /messageId)")); /* a JSON Pointer into the line's event */
    assert_null(strstr(out, "published "));
    assert_int_equal(head_seq(t, "tb", "rb"), 2); /* the accepted prefix stays */
}

/* Every line is checked before anything is sent (issue 16): nothing is published. */
static void test_publish_local_rejection(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char path[64], out[OUT_MAX];
    static const char *const bad[][2] = {
        {"{\"type\":\"RUN_STARTED\",\"threadId\":\"tl\",\"runId\":\"rl\","
         "\"protocolVersion\":\"1.0\"}\n\n{\"type\":\"TEXT_MESSAGE_START\"}\n",
         "line 3: invalid_event: "},
        {"{\"type\":\"RUN_STARTED\",\"threadId\":\"tl\",\"runId\":\"rl\","
         "\"protocolVersion\":\"1.0\"}\n{\"type\":1,}\n",
         "line 2: invalid_event: invalid JSON at column 11"},
        {"{\"type\":\"RUN_STARTED\",\"threadId\":\"tl\",\"runId\":\"rl\","
         "\"protocolVersion\":\"1.0\"}\n{\"type\":\"RUN_STARTED\",\"threadId\":\"tl\","
         "\"runId\":\"rl\"}\n",
         "line 2: invalid_event: "},
        {"{\n  \"type\": \"RUN_STARTED\"\n}\n", "line 1: invalid_event: not JSON Lines"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        it_temp_file(path, sizeof(path), bad[i][0]);
        int rc = it_run_cli(out, "publish --broker %s --thread tl --run rl %s", t->bp.cmd, path);
        unlink(path);
        assert_int_equal(rc, 1);
        if (!strstr(out, bad[i][1]) || !strstr(out, "nothing was published"))
            fail_msg("case %zu: no '%s' in: %s", i, bad[i][1], out);
        struct head h = head_of(t, "tl", "rl");
        assert_int_equal(h.seq, 0);
        assert_int_equal(h.status, AB_RUN_STATUS_UNKNOWN); /* not even claimed */
    }
    /* the fixed file then publishes from seq 1 */
    it_temp_file(path, sizeof(path),
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"tl\",\"runId\":\"rl\","
                 "\"protocolVersion\":\"1.0\"}\n");
    assert_int_equal(it_run_cli(out, "publish --broker %s %s", t->bp.cmd, path), 0);
    unlink(path);
    assert_non_null(strstr(out, "(seq 1..1, 0 duplicates)"));
    /* empty input: nothing sent, no phantom run */
    assert_int_equal(
        it_run_cli(out, "publish --broker %s --thread te --run re < /dev/null", t->bp.cmd), 1);
    assert_non_null(strstr(out, "no events in the input: nothing was published"));
    assert_int_equal(head_of(t, "te", "re").status, AB_RUN_STATUS_UNKNOWN);
}

/* A run in two files: the second with --append; a changed file is a conflict. */
static void test_publish_append_and_conflict(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char a[64], b[64], out[OUT_MAX];
    it_temp_file(a, sizeof(a),
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"ta\",\"runId\":\"ra\","
                 "\"protocolVersion\":\"1.0\"}\n"
                 "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\",\"role\":\"assistant\"}\n");
    it_temp_file(b, sizeof(b),
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"hi\"}\n"
                 "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m\"}\n"
                 "{\"type\":\"RUN_FINISHED\",\"threadId\":\"ta\",\"runId\":\"ra\"}\n");
    /* --append to a run with no events; then the file that needs the first one */
    assert_int_equal(
        it_run_cli(out, "publish --broker %s --append --thread ta --run ra %s", t->bp.cmd, a), 1);
    assert_non_null(strstr(out, "not_found: run 'ra' of thread 'ta' has no stored events"));
    assert_int_equal(it_run_cli(out, "publish --broker %s %s", t->bp.cmd, a), 0);
    assert_int_equal(it_run_cli(out, "publish --broker %s --thread ta --run ra %s", t->bp.cmd, b),
                     1); /* without --append a file starts the run */
    assert_non_null(strstr(out, "line 1: invalid_event: "));
    assert_int_equal(
        it_run_cli(out, "publish --broker %s --append --thread ta --run ra %s", t->bp.cmd, b), 0);
    assert_non_null(strstr(out, "published 3 events to thread ta run ra (seq 3..5, 0 dup"));
    assert_int_equal(head_seq(t, "ta", "ra"), 5);
    /* the first file again: its two events are the run's first two */
    assert_int_equal(it_run_cli(out, "publish --broker %s %s", t->bp.cmd, a), 0);
    assert_non_null(strstr(out, "(seq 1..2, 2 duplicates)"));
    unlink(b);
    it_temp_file(b, sizeof(b),
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"ta\",\"runId\":\"ra\","
                 "\"protocolVersion\":\"1.0\"}\n"
                 "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"n\",\"role\":\"assistant\"}\n");
    assert_int_equal(it_run_cli(out, "publish --broker %s --json %s", t->bp.cmd, b), 1);
    assert_non_null(strstr(out, "rejected at line 2 (seq 2): conflict: the run already holds a "
                                "different event at seq 2"));
    assert_non_null(strstr(out, "\"ok\":false"));
    assert_non_null(strstr(out, "\"line\":2,\"seq\":2,\"error\":{\"code\":\"conflict\""));
    assert_int_equal(head_seq(t, "ta", "ra"), 5);
    unlink(a);
    unlink(b);
}

static void test_publish_ids_from_flags_and_usage(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char path[64], out[OUT_MAX];
    it_temp_file(path, sizeof(path),
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"tg\",\"runId\":\"rg\","
                 "\"protocolVersion\":\"1.0\"}\n"
                 "{\"type\":\"RUN_FINISHED\",\"threadId\":\"tg\",\"runId\":\"rg\"}\n");
    int rc = it_run_cli(out, "publish --broker %s --thread tg --run rg --timeout 3000 %s",
                        t->bp.cmd, path);
    unlink(path);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "published 2 events to thread tg run rg (seq 1..2,"));
    /* RUN_FINISHED without outcome: success, as tail and snapshot say (one answer) */
    assert_int_equal(it_run_cli(out, "runs --broker %s --thread tg --json", t->bp.cmd), 0);
    assert_non_null(strstr(out, "\"status\":\"finished\",\"outcome\":\"success\""));
    assert_int_equal(it_run_cli(out, "runs --broker %s --thread tg", t->bp.cmd), 0);
    assert_non_null(strstr(out, "finished  success"));
    assert_int_equal(head_of(t, "tg", "rg").outcome, AB_OUTCOME_SUCCESS); /* the wire's too */
    it_temp_file(path, sizeof(path), "{\"type\":\"STEP_STARTED\",\"stepName\":\"s\"}\n");
    rc = it_run_cli(out, "publish --broker %s %s", t->bp.cmd, path);
    unlink(path);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "no thread id"));
    assert_int_equal(it_run_cli(out, "publish --batch 0 %s", path), 2);
    assert_int_equal(it_run_cli(out, "publish --help"), 0);
    assert_non_null(strstr(out, "--broker ENDPOINT"));
    assert_non_null(strstr(out, "--timeout MS"));
    assert_int_equal(it_run_cli(out, "runs --help"), 0);
    assert_non_null(strstr(out, "--json"));
    assert_int_equal(it_run_cli(out, "runs --bogus"), 2);
    /* one format for a bad option: agentbus CMD: ... plus the hint */
    assert_int_equal(it_run_cli(out, "publish --bogus"), 2);
    assert_string_equal(out, "agentbus publish: unknown option '--bogus'\n"
                             "Run 'agentbus publish --help' for usage.\n");
    assert_int_equal(it_run_cli(out, "publish --batch"), 2);
    assert_string_equal(out, "agentbus publish: option '--batch' needs a value\n"
                             "Run 'agentbus publish --help' for usage.\n");
    assert_int_equal(it_run_cli(out, "publish --append x"), 2);
    assert_non_null(strstr(out, "--append needs --thread and --run"));
}

/* --version and -h on every command, and agentbus help CMD (issue 16). */
static void test_version_and_help_everywhere(void **state)
{
    (void)state;
    static const char *const cmds[] = {
        "broker",  "publish", "tail",    "replay",   "runs",        "snapshot", "workers",
        "whoami",  "keygen",  "demo",    "validate", "bench",       "run",      "cancel",
        "approve", "deny",    "abandon", "invoke",   "conformance", "gateway",  "status"};
    char out[OUT_MAX], want[64];
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (it_run_cli(out, "%s --version", cmds[i]) != 0 || strncmp(out, "agentbus ", 9) != 0 ||
            strstr(out, "(protocol ") == NULL || strstr(out, "libzmq ") == NULL ||
            strstr(out, "; SQLite 3.") == NULL)
            fail_msg("agentbus %s --version: %s", cmds[i], out);
        snprintf(want, sizeof want, "usage: agentbus %s", cmds[i]);
        if (it_run_cli(out, "%s -h", cmds[i]) != 0 || strstr(out, want) == NULL)
            fail_msg("agentbus %s -h: %s", cmds[i], out);
        if (it_run_cli(out, "help %s", cmds[i]) != 0 || strstr(out, want) == NULL)
            fail_msg("agentbus help %s: %s", cmds[i], out);
        /* one format for a bad option everywhere (and no getopt message before it) */
        char bad[200];
        snprintf(bad, sizeof bad,
                 "agentbus %s: unknown option '--no-such-flag'\n"
                 "Run 'agentbus %s --help' for usage.\n",
                 cmds[i], cmds[i]);
        if (it_run_cli(out, "%s --no-such-flag", cmds[i]) != 2 || strcmp(out, bad) != 0)
            fail_msg("agentbus %s --no-such-flag: %s", cmds[i], out);
    }
    assert_int_equal(it_run_cli(out, "help nosuch"), 2);
    assert_non_null(strstr(out, "unknown command 'nosuch'"));
}

static void test_publish_unreachable(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char out[OUT_MAX];
    char ep[160];
    snprintf(ep, sizeof(ep), "%s", t->bp.cmd);
    assert_int_equal(bp_stop(&t->bp), 0);
    int rc = it_run_cli(out, "publish --broker %s --timeout 500 %s/streams/valid/full-run.jsonl",
                        ep, AB_FIXTURES_DIR);
    assert_int_equal(rc, 1);
    /* nothing listens: the refusal named, with the endpoint (a wait to the timeout
     * would end in the timeout's message instead; no clock is asserted) */
    char want[300];
    snprintf(want, sizeof want,
             "agentbus publish: unavailable: nothing answers at %s "
             "(connection refused): is 'agentbus broker' running there?",
             ep);
    if (strstr(out, want) == NULL)
        fail_msg("no '%s' in: %s", want, out);
    assert_int_equal(it_run_cli(out, "runs --broker %s --timeout 500", ep), 1);
    assert_non_null(strstr(out, "agentbus runs: unavailable: nothing answers at"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_publish_fixture_and_list, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_publish_broker_rejection, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_publish_local_rejection, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_publish_append_and_conflict, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_publish_ids_from_flags_and_usage, it_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_publish_unreachable, it_setup, it_teardown),
        cmocka_unit_test(test_version_and_help_everywhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

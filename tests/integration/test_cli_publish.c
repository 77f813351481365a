/*
 * test_cli_publish.c - `agentbus publish` and `agentbus runs` as processes
 * against a real broker: a fixture stream published with the ids of its
 * RUN_STARTED line and listed as finished; a stream the broker rejects and
 * one rejected locally, each with the line, seq and typed error and exit 1;
 * usage errors (exit 2); an unreachable broker (typed timeout, exit 1).
 */
#include "testutil.h"

#include "broker_proc.h"

#include "cli_run.h"

/* Write @p text to a temp file; the path goes into @p path. */
static void temp_stream(char *path, size_t size, const char *text)
{
    snprintf(path, size, "/tmp/agentbus-cli-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
}

static uint64_t head_seq(it_t *t, const char *thread, const char *run)
{
    ab_conn_t *c = it_connect(&t->bp);
    ab_run_ref_t ref = {{thread, strlen(thread)}, {run, strlen(run)}};
    ab_heads_t q = {.runs = &ref, .nruns = 1};
    ab_heads_reply_t hr;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_heads(c, &q, t->doc, &hr, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(hr.nheads, 1);
    uint64_t s = hr.heads[0].last_seq;
    ab_conn_destroy(&c);
    return s;
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
    /* the same stream again: the run has ended, typed rejection */
    rc = it_run_cli(out, "publish --broker %s %s/streams/valid/full-run.jsonl", t->bp.cmd,
                    AB_FIXTURES_DIR);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "rejected at line 1 (seq 32): run_terminal: "));
}

static void test_publish_broker_rejection(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char out[OUT_MAX];
    /* RUN_STARTED, TEXT_MESSAGE_START, a nested RUN_STARTED (lifecycle error) */
    int rc = it_run_cli(out, "publish --broker %s %s/streams/invalid/nested-run-started.jsonl",
                        t->bp.cmd, AB_FIXTURES_DIR);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "rejected at line 3 (seq 3): invalid_event: "));
    assert_null(strstr(out, "published "));
    assert_int_equal(head_seq(t, "thread-1", "run-1"), 2); /* the accepted prefix stays */
}

static void test_publish_local_rejection(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char path[64], out[OUT_MAX];
    temp_stream(path, sizeof(path),
                "{\"type\":\"RUN_STARTED\",\"threadId\":\"tl\",\"runId\":\"rl\","
                "\"protocolVersion\":\"1.0\"}\n\n"
                "{\"type\":\"TEXT_MESSAGE_START\"}\n");
    int rc = it_run_cli(out, "publish --broker %s %s", t->bp.cmd, path);
    unlink(path);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "rejected at line 3 (seq 2): invalid_event: "));
    assert_non_null(strstr(out, "/messageId"));
    assert_int_equal(head_seq(t, "tl", "rl"), 1);
}

static void test_publish_ids_from_flags_and_usage(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char path[64], out[OUT_MAX];
    temp_stream(path, sizeof(path),
                "{\"type\":\"RUN_STARTED\",\"threadId\":\"tg\",\"runId\":\"rg\","
                "\"protocolVersion\":\"1.0\"}\n"
                "{\"type\":\"RUN_FINISHED\",\"threadId\":\"tg\",\"runId\":\"rg\"}\n");
    int rc = it_run_cli(out, "publish --broker %s --thread tg --run rg --timeout 3000 %s",
                        t->bp.cmd, path);
    unlink(path);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "published 2 events to thread tg run rg (seq 1..2,"));
    temp_stream(path, sizeof(path), "{\"type\":\"STEP_STARTED\",\"stepName\":\"s\"}\n");
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
}

/* --version and -h on every command, and agentbus help CMD (issue 16). */
static void test_version_and_help_everywhere(void **state)
{
    (void)state;
    static const char *const cmds[] = {"broker",   "publish", "tail",   "replay", "runs",
                                       "snapshot", "workers", "whoami", "keygen", "demo"};
    char out[OUT_MAX], want[64];
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (it_run_cli(out, "%s --version", cmds[i]) != 0 || strncmp(out, "agentbus ", 9) != 0 ||
            strstr(out, "(protocol ") == NULL || strstr(out, "libzmq ") == NULL)
            fail_msg("agentbus %s --version: %s", cmds[i], out);
        snprintf(want, sizeof want, "usage: agentbus %s", cmds[i]);
        if (it_run_cli(out, "%s -h", cmds[i]) != 0 || strstr(out, want) == NULL)
            fail_msg("agentbus %s -h: %s", cmds[i], out);
        if (it_run_cli(out, "help %s", cmds[i]) != 0 || strstr(out, want) == NULL)
            fail_msg("agentbus help %s: %s", cmds[i], out);
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
    long t0 = ab__mono_ms();
    int rc = it_run_cli(out, "publish --broker %s --timeout 500 %s/streams/valid/full-run.jsonl",
                        ep, AB_FIXTURES_DIR);
    assert_int_equal(rc, 1);
    /* nothing listens: said at once, naming the endpoint, not after the timeout */
    char want[300];
    snprintf(want, sizeof want,
             "agentbus publish: unavailable: nothing answers at %s "
             "(connection refused): is 'agentbus broker' running there?",
             ep);
    if (strstr(out, want) == NULL)
        fail_msg("no '%s' in: %s", want, out);
    assert_true(ab__mono_ms() - t0 < 5000);
    assert_int_equal(it_run_cli(out, "runs --broker %s --timeout 500", ep), 1);
    assert_non_null(strstr(out, "agentbus runs: unavailable: nothing answers at"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_publish_fixture_and_list, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_publish_broker_rejection, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_publish_local_rejection, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_publish_ids_from_flags_and_usage, it_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_publish_unreachable, it_setup, it_teardown),
        cmocka_unit_test(test_version_and_help_everywhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

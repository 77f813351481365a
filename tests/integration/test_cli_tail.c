/*
 * test_cli_tail.c - `agentbus tail` and `agentbus replay` against a real
 * broker: tail --json --from-start equals the published events; the human
 * view of fixture runs marks every outcome and streams text and tool
 * arguments inline; replay exports JSON Lines and --verify reports finished
 * and still-active runs with a verdict. The human view's render-error path
 * is checked directly on demo/render.c (the broker never fans out an
 * event that fails the check).
 */
#include "testutil.h"

#include "broker_proc.h"
#include "cli_run.h"

#include "render.h"

/* Run a shell command, capture stdout into @p out; returns the exit status. */
static int run_cmd(const char *cmd, char *out, size_t size)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void publish_json(ab_conn_t *c, ab_doc_t *doc, const char *thread, const char *run,
                         const char *const *bodies, ab_buf_t *keep)
{
    for (uint64_t i = 0; bodies[i]; i++) {
        ab_buf_t ev = AB_BUF_INIT;
        it_event_json(&ev, thread, run, i + 1, 1, bodies[i]);
        ab_error_t rej = AB_ERROR_INIT;
        ab_result_t r = it_publish1(c, doc, &ev, &rej);
        if (r.status != AB_RESULT_ACCEPTED)
            fail_msg("%s/%s #%llu: %s (%s)", thread, run, (unsigned long long)i + 1, rej.message,
                     rej.field);
        if (keep)
            keep[i] = ev;
        else
            ab_buf_free(&ev);
    }
}

static const char *const RUN_OK[] = {
    "{\"type\":\"RUN_STARTED\",\"threadId\":\"th\",\"runId\":\"ok\",\"protocolVersion\":\"1.0\"}",
    "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m1\",\"role\":\"assistant\"}",
    "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"Hello \"}",
    "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"world\"}",
    "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m1\"}",
    "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c1\",\"toolCallName\":\"search\"}",
    "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"c1\",\"delta\":\"{\\\"q\\\":\"}",
    "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"c1\",\"delta\":\"\\\"x\\\"}\"}",
    "{\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"c1\"}",
    "{\"type\":\"TOOL_CALL_RESULT\",\"messageId\":\"m2\",\"toolCallId\":\"c1\",\"content\":\"3 "
    "hits\"}",
    "{\"type\":\"STATE_DELTA\",\"delta\":[{\"op\":\"replace\",\"path\":\"/count\",\"value\":3}]}",
    "{\"type\":\"RUN_FINISHED\",\"threadId\":\"th\",\"runId\":\"ok\"}",
    NULL,
};

static const char *const RUN_INT[] = {
    "{\"type\":\"RUN_STARTED\",\"threadId\":\"th\",\"runId\":\"int\",\"protocolVersion\":\"1.0\"}",
    "{\"type\":\"RUN_FINISHED\",\"threadId\":\"th\",\"runId\":\"int\",\"outcome\":{\"type\":"
    "\"interrupt\",\"interrupts\":[{\"id\":\"i1\",\"reason\":\"approval\",\"message\":\"Deploy "
    "now?\"}]}}",
    NULL,
};

static const char *const RUN_ERR[] = {
    "{\"type\":\"RUN_STARTED\",\"threadId\":\"th\",\"runId\":\"err\",\"protocolVersion\":\"1.0\"}",
    "{\"type\":\"RUN_ERROR\",\"message\":\"boom\",\"code\":\"E42\"}",
    NULL,
};

static const char *const RUN_CANCEL[] = {
    "{\"type\":\"RUN_STARTED\",\"threadId\":\"th\",\"runId\":\"cx\",\"protocolVersion\":\"1.0\"}",
    "{\"type\":\"RUN_FINISHED\",\"threadId\":\"th\",\"runId\":\"cx\",\"outcome\":{\"type\":"
    "\"cancelled\"}}",
    NULL,
};

static const char *const RUN_OPEN[] = {
    "{\"type\":\"RUN_STARTED\",\"threadId\":\"th\",\"runId\":\"open\",\"protocolVersion\":\"1.0\"}",
    "{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":{\"a\":1}}",
    NULL,
};

static void publish_fixture(it_t *t)
{
    ab_conn_t *c = it_connect(&t->bp);
    publish_json(c, t->doc, "th", "ok", RUN_OK, NULL);
    publish_json(c, t->doc, "th", "int", RUN_INT, NULL);
    publish_json(c, t->doc, "th", "err", RUN_ERR, NULL);
    publish_json(c, t->doc, "th", "cx", RUN_CANCEL, NULL);
    publish_json(c, t->doc, "th", "open", RUN_OPEN, NULL);
    ab_conn_destroy(&c);
}

#define FIXTURE_EVENTS (12 + 2 + 2 + 2 + 2)

static void test_tail_json_equals_published(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    ab_buf_t sent[12];
    publish_json(c, t->doc, "th", "ok", RUN_OK, sent);
    char cmd[512], *out = malloc(1 << 16);
    assert_non_null(out);
    snprintf(cmd, sizeof(cmd),
             "%s tail --broker %s --thread th --from-start --json --count 12 "
             "--for 10",
             AB_AGENTBUS_BIN, t->bp.cmd);
    assert_int_equal(run_cmd(cmd, out, 1 << 16), 0);
    char *line = out;
    ab_error_t err = AB_ERROR_INIT;
    for (int i = 0; i < 12; i++) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        ab_event_t ev;
        assert_int_equal(ab_event_decode(t->doc, sent[i].data, sent[i].len, NULL, &ev, &err),
                         AB_OK);
        ab_buf_t want = AB_BUF_INIT;
        assert_int_equal(tail_json_line(&want, &ev, &(ab_stamp_t){.pos = 1, .time_us = 1}), AB_OK);
        /* the same record but for the broker stamp: compare around it */
        assert_int_equal(ab_buf_append(&want, "", 1), AB_OK);
        const char *w = (const char *)want.data;
        const char *pos = strstr(line, ",\"pos\":");
        assert_non_null(pos);
        assert_memory_equal(line, w, (size_t)(pos - line));
        const char *wev = strstr(w, ",\"event\":");
        char *wnl = strchr(wev, '\n');
        *wnl = '\0';
        assert_string_equal(strstr(line, ",\"event\":"), wev);
        ab_buf_free(&want);
        ab_buf_free(&sent[i]);
        line = nl + 1;
    }
    assert_string_equal(line, ""); /* exactly 12 lines */
    /* `tail | head -3`: tail ends by itself once the pipe's reader left, though no event
     * comes any more (exit 0, or SIGPIPE when it was still writing; a tail that waited on
     * would be ended by `timeout`: 124) - issue 16 */
    snprintf(cmd, sizeof(cmd),
             "bash -c '\''timeout 60 %s tail --broker %s --thread th --from-start 2>/dev/null | "
             "head -3; echo \"tail=${PIPESTATUS[0]}\"'\''",
             AB_AGENTBUS_BIN, t->bp.cmd);
    assert_int_equal(run_cmd(cmd, out, 1 << 16), 0);
    if (!strstr(out, "tail=0\n") && !strstr(out, "tail=141\n")) /* 141: SIGPIPE, a write */
        fail_msg("tail did not stop when its pipe closed: %s", out);
    assert_non_null(strstr(out, "th/ok #1  "));
    free(out);
    ab_conn_destroy(&c);
}

static void test_tail_human_view(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    publish_fixture(t);
    char cmd[512], *out = malloc(1 << 16);
    assert_non_null(out);
    snprintf(cmd, sizeof(cmd), "%s tail --broker %s --thread th --from-start --count %d --for 10",
             AB_AGENTBUS_BIN, t->bp.cmd, FIXTURE_EVENTS);
    assert_int_equal(run_cmd(cmd, out, 1 << 16), 0);
    print_message("%s", out);
    assert_null(strchr(out, '\033')); /* a pipe: no colour */
    assert_non_null(strstr(out, "th/ok #2  assistant: Hello world\n"));
    assert_non_null(strstr(out, "tool search({\"q\":\"x\"})\n"));
    assert_non_null(strstr(out, "tool result: 3 hits"));
    assert_non_null(strstr(out, "state delta: replace /count"));
    assert_non_null(strstr(out, "th/ok #12  \u2713 run finished (success)"));
    assert_non_null(strstr(out, "\u23f8 run interrupted: approval - Deploy now?"));
    assert_non_null(strstr(out, "\u2717 RUN_ERROR: boom (E42)"));
    assert_non_null(strstr(out, "\u2717 run cancelled"));
    assert_non_null(strstr(out, "state snapshot (1 keys)"));
    free(out);
}

static void test_replay_export_and_verify(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    publish_fixture(t);
    char cmd[512], *out = malloc(1 << 16);
    assert_non_null(out);
    snprintf(cmd, sizeof(cmd), "%s replay --broker %s --thread th", AB_AGENTBUS_BIN, t->bp.cmd);
    assert_int_equal(run_cmd(cmd, out, 1 << 16), 0);
    int lines = 0;
    for (char *p = out; (p = strchr(p, '\n')) != NULL; p++)
        lines++;
    assert_int_equal(lines, FIXTURE_EVENTS);
    assert_non_null(strstr(out, "\"thread\":\"th\",\"run\":\"ok\",\"seq\":1,"));
    snprintf(cmd, sizeof(cmd), "%s replay --broker %s --all --verify", AB_AGENTBUS_BIN, t->bp.cmd);
    assert_int_equal(run_cmd(cmd, out, 1 << 16), 0);
    print_message("%s", out);
    assert_non_null(strstr(out, "run th/ok: 12 events, seq 1..12, finished (success)\n"));
    assert_non_null(strstr(out, "run th/int: 2 events, seq 1..2, finished (interrupt)\n"));
    assert_non_null(strstr(out, "run th/err: 2 events, seq 1..2, errored (RUN_ERROR)\n"));
    assert_non_null(strstr(out, "run th/open: 2 events, seq 1..2, still active\n"));
    assert_non_null(strstr(out, "verified: 4 runs ok, 0 failed, 1 still active\n"));
    /* usage errors exit 2 */
    snprintf(cmd, sizeof(cmd), "%s replay --broker %s --all --after-pos 3 --verify 2>/dev/null",
             AB_AGENTBUS_BIN, t->bp.cmd);
    assert_int_equal(run_cmd(cmd, out, 1 << 16), 2);
    free(out);
}

/* How many entries (besides . and ..) directory @p dir holds. */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* replay FILE writes a temporary beside FILE and renames it at the end: a replay that fails
 * (broker unreachable, thread not found) leaves an earlier export as it was, and no
 * temporary behind. */
static void test_replay_failure_keeps_file(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    publish_fixture(t);
    char dir[] = "/tmp/ab-replay-keep-XXXXXX", path[64], out[OUT_MAX];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/export.jsonl", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("earlier export\n", f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(it_run_cli(out, "replay --broker '%s' --thread nosuch %s", t->bp.cmd, path),
                     1);
    assert_non_null(strstr(out, "not_found"));
    int port = bp_free_port();
    assert_true(port > 0);
    assert_int_equal(it_run_cli(out, "replay --broker :%d --thread th %s", port, path), 1);
    char *text = tu_read_file(path, NULL);
    assert_string_equal(text, "earlier export\n");
    free(text);
    assert_int_equal(dir_entries(dir), 1);
    assert_int_equal(it_run_cli(out, "replay --broker '%s' --thread th %s", t->bp.cmd, path), 0);
    text = tu_read_file(path, NULL);
    assert_non_null(strstr(text, "\"thread\":\"th\",\"run\":\"ok\",\"seq\":1,"));
    free(text);
    assert_int_equal(dir_entries(dir), 1);
    unlink(path);
    rmdir(dir);
}

/* Read one line of what `agentbus ARGS` prints, close the pipe, and @return its exit status
 * (-1 when a signal ended it). Leak detection is off for it: a command that stops in the
 * middle of a replay closes its connection with chunks still arriving, and libzmq 4.3.4 then
 * loses an 18 KB receive buffer now and then. ab_conn_destroy() reads a stopped replay to
 * its end first, but for 0.25 s at most, so a slow broker can still leave one, which would
 * turn the exit status this test checks into 1 (docs/CLIENT.md "A connection closed while
 * replies still arrive"). */
static int first_line_then_close(const char *args)
{
    char cmd[700], line[8192];
    snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" %s %s 2>/dev/null",
             AB_AGENTBUS_BIN, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    assert_non_null(fgets(line, sizeof line, p));
    int st = pclose(p);
    print_message("$ agentbus %s | head -1: %s%s, status %d\n", args, line,
                  WIFSIGNALED(st) ? "killed by a signal" : "exited", st);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* `tail | head -1` and `replay --all | head -1` exit 0, not by SIGPIPE: the output (about
 * 180 KiB) is more than a pipe holds, so the reader leaves while they still write. */
static void test_closed_stdout_exits_zero(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    enum { N = 600 };
    char path[] = "/tmp/ab-pipe-XXXXXX", body[1024], out[OUT_MAX];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    for (uint64_t seq = 1; seq <= N; seq++) {
        it_body(body, sizeof body, "pipe", "r1", seq, N, 200);
        fprintf(f, "%s\n", body);
    }
    assert_int_equal(fclose(f), 0);
    assert_int_equal(it_run_cli(out, "publish --broker '%s' %s", t->bp.cmd, path), 0);
    unlink(path);
    char args[300];
    snprintf(args, sizeof args, "tail --broker '%s' --thread pipe --from-start --json --for 60",
             t->bp.cmd);
    assert_int_equal(first_line_then_close(args), 0);
    snprintf(args, sizeof args, "tail --broker '%s' --from-start --for 60", t->bp.cmd);
    assert_int_equal(first_line_then_close(args), 0);
    snprintf(args, sizeof args, "replay --broker '%s' --all", t->bp.cmd);
    assert_int_equal(first_line_then_close(args), 0);
}

/* The render-error path, on the view itself: an event that fails the
 * lenient check prints a notice and the next event still renders. */
static void test_render_error_notice(void **state)
{
    (void)state;
    tu_ctx_t tu;
    tu_ctx_init(&tu);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    tail_view_t v;
    tail_view_init(&v, f, false);
    ab_event_t ev = {.v = 1, .thread = {"t", 1}, .run = {"r", 1}, .seq = 7, .epoch = 1};
    ab_stamp_t st = {.pos = 9, .time_us = 1700000000000000};
    ev.body = tu_json(&tu, "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"delta\":5}");
    tail_view_event(&v, &ev, &st);
    ev.seq = 8;
    ev.body = tu_json(&tu, "{\"type\":\"RUN_ERROR\",\"message\":\"bad\\u001b[31m\"}");
    tail_view_event(&v, &ev, &st);
    tail_view_finish(&v);
    fclose(f);
    assert_non_null(strstr(buf, "[render error at seq 7: "));
    assert_non_null(strstr(buf, "t/r #8  \u2717 RUN_ERROR: bad?[31m\n"));
    assert_int_equal(v.errors, 1);
    free(buf);
    tu_ctx_free(&tu);
}

/* Render @p n events given as (run, JSON body) pairs of thread t; the output into @p buf. */
static char *render_all(tu_ctx_t *tu, const char *const (*evs)[2], size_t n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    tail_view_t v;
    tail_view_init(&v, f, false);
    for (size_t i = 0; i < n; i++) {
        ab_event_t ev = {.v = 1,
                         .thread = {"t", 1},
                         .run = {evs[i][0], strlen(evs[i][0])},
                         .seq = i + 1,
                         .epoch = 1};
        ab_stamp_t st = {.pos = i + 1, .time_us = 1700000000000000};
        ev.body = tu_json(tu, evs[i][1]);
        tail_view_event(&v, &ev, &st);
    }
    tail_view_finish(&v);
    fclose(f);
    return buf;
}

/* Two runs streaming text at once: each message is read whole, not a line per token; a
 * tool call continued after an interruption has no stray '('; one-liners (issue 16). */
static void test_render_interleaved(void **state)
{
    (void)state;
    tu_ctx_t tu;
    tu_ctx_init(&tu);
    static const char *const evs[][2] = {
        {"a", "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"ma\",\"role\":\"assistant\"}"},
        {"b", "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"mb\",\"role\":\"assistant\"}"},
        {"a", "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"ma\",\"delta\":\"Hel\"}"},
        {"b", "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"mb\",\"delta\":\"Wor\"}"},
        {"a", "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"ma\",\"delta\":\"lo\"}"},
        {"b", "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"mb\",\"delta\":\"ld\"}"},
        {"b", "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"mb\"}"},
        {"a", "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"ma\"}"},
        {"a", "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c\",\"toolCallName\":\"get\"}"},
        {"a", "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"c\",\"delta\":\"{\\\"q\\\"\"}"},
        {"b", "{\"type\":\"STEP_STARTED\",\"stepName\":\"plan\"}"},
        {"a", "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"c\",\"delta\":\":1}\"}"},
        {"a", "{\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"c\"}"},
        {"b", "{\"type\":\"CUSTOM\",\"name\":\"agentkit.task\",\"value\":{\"id\":\"t1\","
              "\"title\":\"Book\",\"status\":\"running\",\"refs\":[1]}}"},
        {"b", "{\"type\":\"REASONING_START\",\"messageId\":\"r\"}"},
        {"b", "{\"type\":\"REASONING_MESSAGE_START\",\"messageId\":\"rm\",\"role\":\"reasoning\"}"},
        {"b", "{\"type\":\"REASONING_MESSAGE_CONTENT\",\"messageId\":\"rm\",\"delta\":\"hmm\"}"},
        {"b", "{\"type\":\"REASONING_MESSAGE_END\",\"messageId\":\"rm\"}"},
        {"b", "{\"type\":\"STEP_FINISHED\",\"stepName\":\"plan\"}"},
    };
    char *out = render_all(&tu, evs, sizeof evs / sizeof evs[0]);
    print_message("%s", out);
    assert_non_null(strstr(out, "t/a #1  assistant: Hello\n")); /* kept the line */
    assert_non_null(strstr(out, "t/b #2  assistant: World\n")); /* gathered, one line */
    assert_null(strstr(out, "Wor\n"));
    assert_non_null(strstr(out, "t/a #9  tool get({\"q\"\n"));
    assert_non_null(strstr(out, "t/b #11  step plan started\n"));
    assert_non_null(strstr(out, "t/a #12  tool get(...:1})\n")); /* continued, balanced */
    assert_non_null(strstr(out, "t/b #14  agentkit.task: id=t1, title=Book, status=running "
                                "(1 more field)\n"));
    assert_non_null(strstr(out, "t/b #15  reasoning started\n"));
    assert_non_null(strstr(out, "t/b #16  reasoning: hmm\n"));
    assert_non_null(strstr(out, "t/b #19  step plan finished\n"));
    free(out);
    tu_ctx_free(&tu);
}

/* NO_COLOR set and not empty turns colour off whatever the caller asked (issue 16). */
static void test_no_color(void **state)
{
    (void)state;
    tail_view_t v;
    unsetenv("NO_COLOR");
    tail_view_init(&v, stdout, true);
    assert_true(v.color);
    setenv("NO_COLOR", "", 1); /* empty: as if unset */
    tail_view_init(&v, stdout, true);
    assert_true(v.color);
    setenv("NO_COLOR", "1", 1);
    tail_view_init(&v, stdout, true);
    assert_false(v.color);
    unsetenv("NO_COLOR");
}

/* tail waits for a thread (or run) with no event yet, and says so on stderr; not for one that has.
 */
static void test_tail_says_it_waits(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char out[OUT_MAX];
    assert_int_equal(it_run_cli(out, "tail --broker '%s' --thread nosuch --for 0.3", t->bp.cmd), 0);
    assert_non_null(strstr(out, "agentbus tail: thread 'nosuch' has no events yet: waiting"));
    ab_conn_t *c = it_connect(&t->bp);
    ab_claimed_t cl;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_claim(c, "has-ev", "r1", t->doc, &cl, IT_TIMEOUT, &err), AB_OK);
    ab_buf_t ev = AB_BUF_INIT;
    it_event(&ev, "has-ev", "r1", 1, 0, cl.epoch);
    assert_int_equal(it_publish1(c, t->doc, &ev, NULL).status, AB_RESULT_ACCEPTED);
    ab_buf_free(&ev);
    ab_conn_destroy(&c);
    assert_int_equal(it_run_cli(out, "tail --broker '%s' --thread has-ev --for 0.3", t->bp.cmd), 0);
    assert_null(strstr(out, "has no events yet"));
    assert_int_equal(
        it_run_cli(out, "tail --broker '%s' --thread has-ev --run r2 --for 0.3", t->bp.cmd), 0);
    assert_non_null(strstr(out, "run 'r2' of thread 'has-ev' has no events yet"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tail_json_equals_published, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_tail_human_view, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_replay_export_and_verify, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_replay_failure_keeps_file, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_closed_stdout_exits_zero, it_setup, it_teardown),
        cmocka_unit_test(test_render_error_notice),
        cmocka_unit_test(test_no_color),
        cmocka_unit_test(test_render_interleaved),
        cmocka_unit_test_setup_teardown(test_tail_says_it_waits, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

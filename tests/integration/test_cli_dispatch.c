/*
 * test_cli_dispatch.c - `agentbus run`, `cancel`, `approve`, `deny` and
 * `runs --requests` as processes against a real broker and examples/worker
 * processes: a run followed to success; an interrupting run exits 3 and
 * names its interrupt, approve and deny dispatch the replacement run (which
 * the worker runs, saying what it was told) with explicit answers; cancel of
 * a long run is delivered and its follower exits 4; cancel of a queued
 * request dequeues it and its follower exits 4 too; Ctrl-C stops following
 * (130) and the run goes on; the request listing shows queued, assigned
 * (held by a worker speaking the wire itself) and ORPHANED requests; usage
 * errors exit 2 before anything is sent.
 */
#include "testutil.h"

#define OUT_MAX 32768
#include "broker_proc.h"
#include "cli_run.h"
#include "worker_proc.h"

/* ---- a CLI process in the background ---------------------------------------- */

typedef struct bg {
    pid_t pid;
    char path[64]; /* its stdout and stderr */
} bg_t;

static bg_t bg_start(const char *const *args)
{
    bg_t b = {0};
    snprintf(b.path, sizeof(b.path), "/tmp/agentbus-cli-dispatch-XXXXXX");
    int fd = mkstemp(b.path);
    assert_true(fd >= 0);
    b.pid = fork();
    assert_true(b.pid >= 0);
    if (b.pid == 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        const char *argv[24] = {AB_AGENTBUS_BIN};
        for (int i = 0; args[i] && i < 22; i++)
            argv[i + 1] = args[i];
        execv(AB_AGENTBUS_BIN, (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    close(fd);
    return b;
}

/* What it printed so far. */
static void bg_output(const bg_t *b, char *out)
{
    FILE *f = fopen(b->path, "r");
    size_t n = f ? fread(out, 1, OUT_MAX - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
}

/* Poll its output until it holds @p needle (bounded). */
static bool printed(const bg_t *b, const char *needle, char *out)
{
    for (long end = ab__mono_ms() + IT_TIMEOUT; ab__mono_ms() < end; poll(NULL, 0, 20)) {
        bg_output(b, out);
        if (strstr(out, needle))
            return true;
    }
    return false;
}

/* Wait (bounded) for its exit; its status, its output in @p out. */
static int bg_wait(bg_t *b, char *out)
{
    int st = 0;
    long deadline = ab__mono_ms() + 3 * IT_TIMEOUT;
    pid_t r = 0;
    while ((r = waitpid(b->pid, &st, WNOHANG)) == 0 && ab__mono_ms() < deadline)
        poll(NULL, 0, 20);
    if (r == 0) {
        kill(b->pid, SIGKILL);
        waitpid(b->pid, &st, 0);
    }
    bg_output(b, out);
    unlink(b->path);
    print_message("background agentbus:\n%.4000s", out);
    assert_int_equal(r, b->pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Poll `agentbus runs --requests --json` until a line holds both needles. */
static bool requests_show(const it_t *t, const char *a, const char *b)
{
    char out[OUT_MAX];
    for (long end = ab__mono_ms() + IT_TIMEOUT; ab__mono_ms() < end; poll(NULL, 0, 50)) {
        assert_int_equal(it_run_cli(out, "runs --requests --json --broker %s", t->bp.cmd), 0);
        for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
            if (strstr(line, a) && strstr(line, b))
                return true;
    }
    return false;
}

/* The value of "key":"..." in @p out (the first one) into @p buf. */
static void json_str(const char *out, const char *key, char *buf, size_t size)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":\"", key);
    const char *p = strstr(out, pat);
    assert_non_null(p);
    p += strlen(pat);
    const char *q = strchr(p, '"');
    assert_non_null(q);
    snprintf(buf, size, "%.*s", (int)(q - p), p);
}

/* Write @p json to a fresh file; its path in @p path (64 bytes; the caller unlinks it). */
static void input_file(char *path, const char *json)
{
    snprintf(path, 64, "/tmp/agentbus-cli-input-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
}

static void coder_worker(wproc_t *w, const it_t *t)
{
    const char *argv[] = {t->bp.cmd, "cli-d", "coder", NULL};
    worker_start_args(w, argv);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_run_to_success(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    wproc_t w;
    coder_worker(&w, t);
    char out[OUT_MAX];
    int rc = it_run_cli(out, "run coder --thread t-ok --broker %s", t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "request 1 accepted: run t-ok/"));
    assert_non_null(strstr(out, "key key-"));
    assert_non_null(strstr(out, "step 1 step 2 step 3"));
    assert_non_null(strstr(out, "finished at seq 7: success"));
    /* --json: the acceptance, then each event as tail --json prints it */
    rc = it_run_cli(out, "run coder --thread t-ok2 --run r-ok2 --key k-ok2 --json --broker %s",
                    t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_true(strncmp(out,
                        "{\"op\":\"run_accepted\",\"request\":2,\"agent\":\"coder\","
                        "\"thread\":\"t-ok2\",\"run\":\"r-ok2\"",
                        62) == 0);
    assert_non_null(
        strstr(out, "\"key\":\"k-ok2\"}\n{\"thread\":\"t-ok2\",\"run\":\"r-ok2\",\"seq\":1,"));
    assert_non_null(strstr(out, "\"seq\":7,"));
    assert_non_null(strstr(out, "\"type\":\"RUN_FINISHED\""));
    /* the same key again: the same request, its run replayed to the same end */
    rc = it_run_cli(out, "run coder --thread t-ok2 --key k-ok2 --broker %s", t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "request 2 (already made with this key)"));
    assert_non_null(strstr(out, "finished at seq 7: success"));
    worker_stop(&w);
}

/* Start an interrupting run on @p thread, check exit 3, return its run id. */
static void interrupted(const it_t *t, const char *thread, char *run, size_t size)
{
    char out[OUT_MAX], in[64];
    input_file(in, "{\"messages\":[],\"forwardedProps\":{\"interrupt\":true}}");
    int rc = it_run_cli(out, "run coder --thread %s --json --input %s --broker %s", thread, in,
                        t->bp.cmd);
    unlink(in);
    assert_int_equal(rc, 3);
    json_str(out, "run", run, size);
    assert_non_null(strstr(out, "1 pending interrupt"));
    assert_non_null(strstr(out, "interrupt approve-1  reason confirmation"));
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "agentbus approve %s %s", thread, run);
    assert_non_null(strstr(out, cmd));
}

static void test_interrupt_then_approve(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    wproc_t w;
    coder_worker(&w, t);
    char run[128], out[OUT_MAX];
    interrupted(t, "t-int", run, sizeof(run));
    /* an --interrupt the run did not raise: nothing is sent */
    assert_int_equal(
        it_run_cli(out, "approve t-int %s --interrupt nope=deny --broker %s", run, t->bp.cmd), 2);
    assert_non_null(strstr(out, "raised no interrupt with that id"));
    int rc = it_run_cli(out, "approve t-int %s --json --broker %s", run, t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "interrupt approve-1: approve (resolved, payload "
                                "{\"approved\":true})"));
    assert_non_null(strstr(out, "{\"op\":\"resume\",\"thread\":\"t-int\""));
    assert_non_null(strstr(out, "\"op\":\"run_accepted\""));
    /* the replacement run's input carries the answer; the worker says what it was told */
    assert_non_null(strstr(out, "\"resume\":[{\"interruptId\":\"approve-1\",\"status\":"
                                "\"resolved\",\"payload\":{\"approved\":true}}]"));
    assert_non_null(strstr(out, "\"delta\":\"resolved1 \""));
    assert_non_null(strstr(out, "finished at seq 7: success"));
    /* answered already: the broker refuses, exit 1 with its code */
    rc = it_run_cli(out, "deny t-int %s --broker %s", run, t->bp.cmd);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "agentbus deny: conflict: "));
    worker_stop(&w);
}

static void test_deny_and_cancel_answers(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    wproc_t w;
    coder_worker(&w, t);
    char run[128], out[OUT_MAX];
    interrupted(t, "t-deny", run, sizeof(run));
    int rc = it_run_cli(out, "deny t-deny %s --json --broker %s", run, t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "interrupt approve-1: deny (resolved, payload "
                                "{\"approved\":false})"));
    assert_non_null(strstr(out, "\"status\":\"resolved\",\"payload\":{\"approved\":false}}]"));
    assert_non_null(strstr(out, "finished at seq 7: success"));
    /* --interrupt ID=cancel: status cancelled, no payload */
    interrupted(t, "t-cxl", run, sizeof(run));
    rc = it_run_cli(out, "approve t-cxl %s --interrupt approve-1=cancel --json --broker %s", run,
                    t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "interrupt approve-1: cancel (cancelled)"));
    assert_non_null(strstr(out, "{\"interruptId\":\"approve-1\",\"status\":\"cancelled\"}]"));
    assert_non_null(strstr(out, "\"delta\":\"cancelled1 \""));
    /* --payload replaces the payload of the command's own answers */
    interrupted(t, "t-pl", run, sizeof(run));
    rc = it_run_cli(out,
                    "approve t-pl %s --payload '{\"approved\":true,\"note\":\"ok\"}' "
                    "--no-follow --broker %s",
                    run, t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "payload {\"approved\":true,\"note\":\"ok\"}"));
    assert_non_null(strstr(out, " accepted: run t-pl/"));
    /* a run that did not end with an interrupt has nothing to answer */
    rc = it_run_cli(out, "run coder --thread t-plain --run r-plain --broker %s", t->bp.cmd);
    assert_int_equal(rc, 0);
    rc = it_run_cli(out, "approve t-plain r-plain --broker %s", t->bp.cmd);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "did not end with an interrupt (status finished, outcome "
                                "success)"));
    worker_stop(&w);
}

static void test_cancel_long_run(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    wproc_t w;
    coder_worker(&w, t);
    char in[64];
    input_file(in, "{\"messages\":[],\"forwardedProps\":{\"steps\":1000,\"step_ms\":50}}");
    const char *args[] = {"run",     "coder", "--thread", "t-long",  "--run", "r-long",
                          "--input", in,      "--broker", t->bp.cmd, NULL};
    bg_t f = bg_start(args);
    char out[OUT_MAX];
    assert_true(printed(&f, "step 2", out));
    int rc = it_run_cli(out, "cancel t-long r-long --reason enough --wait --broker %s", t->bp.cmd);
    assert_int_equal(rc, 4);
    assert_non_null(strstr(out, "run t-long/r-long: delivered: "));
    assert_non_null(strstr(out, "run cancelled"));
    assert_null(strstr(out, "step 1")); /* --wait prints only the terminal event */
    assert_int_equal(bg_wait(&f, out), 4);
    unlink(in);
    assert_non_null(strstr(out, "step 1 step 2"));
    assert_non_null(strstr(out, "run t-long/r-long cancelled at seq"));
    /* cancelled already: ended */
    rc = it_run_cli(out, "cancel t-long r-long --json --broker %s", t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\"outcome\":\"ended\""));
    worker_stop(&w);
}

static void test_ctrl_c_stops_following(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    wproc_t w;
    coder_worker(&w, t);
    char in[64];
    input_file(in, "{\"messages\":[],\"forwardedProps\":{\"steps\":1000,\"step_ms\":50}}");
    const char *args[] = {"run",     "coder", "--thread", "t-sig",   "--run", "r-sig",
                          "--input", in,      "--broker", t->bp.cmd, NULL};
    bg_t f = bg_start(args);
    char out[OUT_MAX];
    assert_true(printed(&f, "step 2", out)); /* it follows: events are printed */
    assert_int_equal(kill(f.pid, SIGINT), 0);
    assert_int_equal(bg_wait(&f, out), 130);
    unlink(in);
    assert_non_null(strstr(out, "stopped following run t-sig/r-sig"));
    assert_non_null(strstr(out, "the run goes on"));
    /* it does go on */
    assert_true(requests_show(t, "\"run\":\"r-sig\"", "\"state\":\"started\""));
    int rc = it_run_cli(out, "cancel t-sig r-sig --wait --broker %s", t->bp.cmd);
    assert_int_equal(rc, 4);
    worker_stop(&w);
}

static void test_queued_then_dequeued(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    /* no worker serves agent nobody: the request waits in the queue */
    const char *args[] = {"run", "nobody",   "--thread", "t-q", "--run",
                          "r-q", "--broker", t->bp.cmd,  NULL};
    bg_t f = bg_start(args);
    assert_true(requests_show(t, "\"run\":\"r-q\"", "\"state\":\"queued\""));
    char out[OUT_MAX];
    int rc = it_run_cli(out, "runs --requests --broker %s", t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "REQUEST AGENT"));
    assert_non_null(strstr(out, "nobody"));
    assert_non_null(strstr(out, "1 request\n"));
    rc = it_run_cli(out, "cancel t-q r-q --broker %s", t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "run t-q/r-q: dequeued: "));
    assert_int_equal(bg_wait(&f, out), 4);
    assert_non_null(strstr(out, "queued (position 0)"));
    assert_non_null(strstr(out, "was cancelled before run t-q/r-q started"));
    rc = it_run_cli(out, "runs --requests --state cancelled --agent nobody --json --broker %s",
                    t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\"run\":\"r-q\",\"state\":\"cancelled\""));
    rc = it_run_cli(out, "runs --requests --json --broker %s", t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_null(strstr(out, "r-q")); /* not open any more */
}

/* A worker that speaks the wire itself holds an assignment: assigned, then orphaned. */
static void test_requests_assigned_and_orphaned(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *wc = it_connect(&t->bp);
    ab_served_agent_t agents[] = {{{"holder", 6}, 1, NULL, 0}};
    ab_msg_t m = {.op = AB_OP_SERVE}, r;
    /* a lease of 3 s, renewed (ping) before each command that expects it held: a loaded
     * machine can take longer than the 1 s minimum to run one CLI process (ASan), and the
     * orphan below must still come within IT_TIMEOUT of the worker going away */
    m.u.serve = (ab_serve_t){{"raw-w", 5}, agents, 1, 3000};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_request(wc, &m, NULL, 0, t->doc, &r, IT_TIMEOUT, &err), AB_OK);
    char out[OUT_MAX];
    int rc =
        it_run_cli(out, "run holder --thread t-h --run r-h --no-follow --broker %s", t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_int_equal(ab_conn_recv(wc, 0, t->doc, &m, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(m.op, AB_OP_ASSIGN);
    uint64_t epoch = m.u.assign.epoch;
    ab_pong_t pong;
    assert_int_equal(ab_conn_ping(wc, t->doc, &pong, IT_TIMEOUT, &err), AB_OK);
    assert_true(requests_show(t, "\"state\":\"assigned\",\"worker\":\"raw-w\"", "\"attempts\":1"));
    assert_int_equal(ab_conn_ping(wc, t->doc, &pong, IT_TIMEOUT, &err), AB_OK);
    rc = it_run_cli(out, "runs --requests --state assigned --broker %s", t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "assigned  raw-w"));
    /* it starts the run, then goes away: the request is orphaned */
    ab_buf_t ev = AB_BUF_INIT;
    it_event_json(&ev, "t-h", "r-h", 1, epoch,
                  "{\"type\":\"RUN_STARTED\",\"threadId\":\"t-h\",\"runId\":\"r-h\","
                  "\"protocolVersion\":\"1.0\"}");
    ab_result_t res = it_publish1(wc, t->doc, &ev, NULL);
    ab_buf_free(&ev);
    assert_int_equal(res.status, AB_RESULT_ACCEPTED);
    ab_conn_destroy(&wc);
    assert_true(requests_show(t, "\"run\":\"r-h\"", "\"orphaned\":true"));
    rc = it_run_cli(out, "runs --requests --broker %s", t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "ORPHANED"));
    rc = it_run_cli(out, "cancel t-h r-h --broker %s", t->bp.cmd);
    assert_int_equal(rc, 1); /* no_owner: nothing was cancelled */
    assert_non_null(strstr(out, "no_owner"));
    /* abandon ends it with the broker's own RUN_ERROR, marked so in its stamp */
    rc = it_run_cli(out, "abandon t-h r-h --reason 'worker lost' --broker %s", t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "run t-h/r-h abandoned: the broker's RUN_ERROR is seq"));
    rc = it_run_cli(out, "tail --thread t-h --run r-h --from-start --count 2 --json --broker %s",
                    t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\"by\":\"broker\",\"event\":{\"type\":\"RUN_ERROR\",\"message\":"
                                "\"worker lost\",\"code\":\"agentbus.abandoned\"}"));
    rc = it_run_cli(out, "abandon t-h r-h --broker %s", t->bp.cmd);
    assert_int_equal(rc, 1); /* it has ended now */
    assert_non_null(strstr(out, "already ended"));
}

static void test_usage_errors(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char out[OUT_MAX];
    static const char *const bad[] = {
        "run",
        "run a b",
        "run coder --if-busy maybe",
        "run coder --timeout 0",
        "run coder --input /nonexistent/input.json",
        "run coder --thread ''",
        "run coder --bogus",
        "cancel t-1",
        "cancel t-1 r-1 extra",
        "approve t-1",
        "approve t-1 r-1 --interrupt approve-1",
        "approve t-1 r-1 --interrupt approve-1=maybe",
        "approve t-1 r-1 --interrupt a=deny --interrupt a=cancel",
        "deny t-1 r-1 --payload '{bad'",
        "runs --state queued",
        "runs --requests --state bogus",
        "runs --requests --thread t-1",
        "abandon t-1",
        "abandon t-1 r-1 --timeout 0",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = it_run_cli(out, "%s --broker %s", bad[i], t->bp.cmd);
        if (rc != 2)
            fail_msg("'agentbus %s' exited %d, not 2: %s", bad[i], rc, out);
        assert_non_null(strstr(out, "Run 'agentbus "));
    }
    static const char *const inputs[][2] = {
        {"[1]", "a RunAgentInput is a JSON object, not array"},
        {"{\"a\":", "invalid JSON at column"},
    };
    char in[64];
    for (size_t i = 0; i < 2; i++) {
        input_file(in, inputs[i][0]);
        int rc = it_run_cli(out, "run coder --input %s --broker %s", in, t->bp.cmd);
        unlink(in);
        assert_int_equal(rc, 2);
        assert_non_null(strstr(out, inputs[i][1]));
    }
    /* the broker refuses a bad RunAgentInput: exit 1, with the field */
    input_file(in, "{\"messages\":{}}");
    int rc = it_run_cli(out, "run coder --input %s --broker %s", in, t->bp.cmd);
    unlink(in);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "invalid_event: "));
    assert_non_null(strstr(out, "input/messages"));
    assert_int_equal(it_run_cli(out, "cancel t-none r-none --broker %s", t->bp.cmd), 1);
    assert_non_null(strstr(out, "not_found"));
    assert_int_equal(it_run_cli(out, "approve t-none r-none --broker %s", t->bp.cmd), 1);
    assert_int_equal(it_run_cli(out, "run --help"), 0);
    assert_non_null(strstr(out, "--if-busy"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_run_to_success, it_setup, teardown_worker),
        cmocka_unit_test_setup_teardown(test_interrupt_then_approve, it_setup, teardown_worker),
        cmocka_unit_test_setup_teardown(test_deny_and_cancel_answers, it_setup, teardown_worker),
        cmocka_unit_test_setup_teardown(test_cancel_long_run, it_setup, teardown_worker),
        cmocka_unit_test_setup_teardown(test_ctrl_c_stops_following, it_setup, teardown_worker),
        cmocka_unit_test_setup_teardown(test_queued_then_dequeued, it_setup, teardown_worker),
        cmocka_unit_test_setup_teardown(test_requests_assigned_and_orphaned, it_setup,
                                        teardown_worker),
        cmocka_unit_test_setup_teardown(test_usage_errors, it_setup, teardown_worker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_cli_workers.c - the worker library (examples/worker, a process built
 * on agentbus/worker.h) serving a real broker, driven by `agentbus invoke`
 * and `agentbus workers` as processes: results and errors, unsupported
 * actions, bad payloads and usage errors with their exit status, the
 * listing in text and JSON, the worker's own counters when it stops, and
 * the worker serving again by itself after the broker restarts.
 */
#include "testutil.h"

#include "broker_proc.h"
#include "cli_run.h"
#include "worker_proc.h"

#include <fcntl.h>

/* Start examples/worker serving agent planner with actions echo, fail, plan, sleep. */
static void worker_start(wproc_t *w, const char *endpoint)
{
    const char *argv[] = {endpoint, "cli-w", "planner", "echo", "fail", "plan", "sleep", NULL};
    worker_start_args(w, argv);
}

static void test_invoke_and_list(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    wproc_t w;
    worker_start(&w, t->bp.cmd);
    char out[OUT_MAX];
    int rc = it_run_cli(out, "invoke planner echo --payload '{\"a\":[1,2]}' --broker %s --json",
                        t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\"result\":{\"a\":[1,2]}"));
    assert_non_null(strstr(out, "\"worker_id\":\"w-"));
    rc = it_run_cli(out, "invoke planner plan --thread t-9 --broker %s", t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\"thread\":\"t-9\""));
    rc = it_run_cli(out, "invoke planner fail --broker %s", t->bp.cmd);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "invalid_argument"));
    assert_non_null(strstr(out, "this action always fails"));
    rc = it_run_cli(out, "invoke planner deploy --broker %s", t->bp.cmd);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "unsupported"));
    rc = it_run_cli(out, "invoke planner echo --payload '{bad' --broker %s", t->bp.cmd);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "invalid_argument"));
    rc = it_run_cli(out, "workers --broker %s --json", t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\"worker\":\"cli-w\""));
    assert_non_null(strstr(out, "\"name\":\"planner\",\"capacity\":4,\"actions\":[\"echo\","
                                "\"fail\",\"plan\",\"sleep\"]"));
    assert_non_null(strstr(out, "\"calls\":0"));
    rc = it_run_cli(out, "workers --broker %s", t->bp.cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "1 worker\n"));
    worker_stop(&w);
    assert_non_null(strstr(w.line, "3 calls, 1 failed, 0 undelivered"));
}

static void test_usage_errors(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char out[OUT_MAX];
    assert_int_equal(it_run_cli(out, "invoke planner"), 2);
    assert_non_null(strstr(out, "usage: agentbus invoke AGENT ACTION"));
    assert_int_equal(it_run_cli(out, "invoke a b --timeout 0"), 2);
    assert_int_equal(it_run_cli(out, "workers extra --broker %s", t->bp.cmd), 2);
    assert_int_equal(it_run_cli(out, "workers --broker %s", t->bp.cmd), 0);
    assert_non_null(strstr(out, "0 workers\n"));
    assert_int_equal(it_run_cli(out, "invoke --help"), 0);
    assert_non_null(strstr(out, "--payload JSON"));
}

/* Ctrl-C on `agentbus invoke` cancels its call (only it): exit 130, the broker frees it. */
static void test_invoke_interrupted(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    wproc_t w;
    worker_start(&w, t->bp.cmd);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDOUT_FILENO);
        execl(AB_AGENTBUS_BIN, AB_AGENTBUS_BIN, "invoke", "planner", "sleep", "--payload", "4000",
              "--broker", t->bp.cmd, (char *)NULL);
        _exit(127);
    }
    char out[OUT_MAX];
    long deadline = ab__mono_ms() + IT_TIMEOUT;
    bool open_call = false; /* the worker holds the call (it sleeps in it) */
    while (!open_call && ab__mono_ms() < deadline) {
        assert_int_equal(it_run_cli(out, "workers --broker %s --json", t->bp.cmd), 0);
        open_call = strstr(out, "\"calls\":1") != NULL;
    }
    assert_true(open_call);
    assert_int_equal(kill(pid, SIGINT), 0);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 130);
    assert_int_equal(it_run_cli(out, "workers --broker %s --json", t->bp.cmd), 0);
    assert_non_null(strstr(out, "\"calls\":0")); /* the cancel ended it in the broker */
    worker_stop(&w);
}

static char fixed_cmd[64], fixed_ev[64];

static int setup_fixed_ports(void **state)
{
    static const char *extra[5];
    bp_fixed_ports(fixed_cmd, fixed_ev, extra);
    return it_setup_with(state, extra);
}

/* The broker restarts and forgets its workers: the worker serves again by itself. */
static void test_worker_serves_again_after_restart(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    wproc_t w;
    worker_start(&w, t->bp.cmd);
    char out[OUT_MAX];
    assert_int_equal(it_run_cli(out, "invoke planner echo --payload 1 --broker %s", t->bp.cmd), 0);
    assert_int_equal(bp_stop(&t->bp), 0);
    assert_int_equal(bp_restart(&t->bp), 0);
    /* its next ping (a third of its 10 s lease) meets the new instance */
    long deadline = ab__mono_ms() + 15000;
    bool listed = false;
    while (!listed && ab__mono_ms() < deadline) {
        assert_int_equal(it_run_cli(out, "workers --broker %s --json", t->bp.cmd), 0);
        listed = strstr(out, "\"worker\":\"cli-w\"") != NULL;
        if (!listed)
            (void)poll(NULL, 0, 200);
    }
    assert_true(listed);
    assert_int_equal(it_run_cli(out, "invoke planner echo --payload 2 --broker %s", t->bp.cmd), 0);
    assert_non_null(strstr(out, "2"));
    worker_stop(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_invoke_and_list, it_setup, teardown_worker),
        cmocka_unit_test_setup_teardown(test_usage_errors, it_setup, teardown_worker),
        cmocka_unit_test_setup_teardown(test_invoke_interrupted, it_setup, teardown_worker),
        cmocka_unit_test_setup_teardown(test_worker_serves_again_after_restart, setup_fixed_ports,
                                        teardown_worker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

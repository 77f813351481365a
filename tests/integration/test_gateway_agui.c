/*
 * test_gateway_agui.c - the real AG-UI client through the gateway: node runs
 * tests/gateway/agui/run_agent.mjs, which drives HttpAgent of @ag-ui/client
 * 1.0.0 (the exact version of that directory's package-lock.json, installed
 * by scripts/install-deps with `npm ci`) against `agentbus gateway`, a real
 * broker and examples/worker serving agent "demo". HttpAgent must see the
 * whole run in order (RUN_STARTED ... RUN_FINISHED) and end with the agent's
 * message assembled from the deltas; a second run on the same thread too.
 * Skipped (77) only when node is not installed.
 */
#include "testutil.h"

#include "gw_proc.h"
#include "worker_proc.h"

#define AGUI_DIR AB_SOURCE_DIR "/tests/gateway/agui"

static gwp_t gw;

static int teardown(void **state)
{
    if (gw.pid > 0)
        gw_stop(&gw, true);
    return teardown_worker(state);
}

/* Run HttpAgent on thread @p thread with @p props; its output in @p out; its exit status. */
static int run_node(const char *thread, const char *props, char *out, size_t cap)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && node run_agent.mjs 'http://127.0.0.1:%u/agents/demo' '%s' '%s' 2>&1",
             AGUI_DIR, gw.port, thread, props);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The event types HttpAgent reported, in order, joined by spaces. */
static void types(const char *out, char *joined, size_t cap)
{
    joined[0] = '\0';
    for (const char *p = out; (p = strstr(p, "{\"event\":\"")) != NULL; p += 10) {
        size_t l = strcspn(p + 10, "\"");
        size_t used = strlen(joined);
        snprintf(joined + used, cap - used, "%s%.*s", used ? " " : "", (int)l, p + 10);
    }
}

static void test_http_agent_runs_through_the_gateway(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    if (system("node --version >/dev/null 2>&1") != 0) {
        print_message("node is not installed (scripts/install-deps installs it): skipped\n");
        skip();
    }
    if (access(AGUI_DIR "/node_modules/@ag-ui/client/package.json", R_OK) != 0)
        fail_msg("@ag-ui/client is not installed in tests/gateway/agui: run scripts/install-deps "
                 "(it runs npm ci there)");
    wproc_t w;
    const char *wargs[] = {t->bp.cmd, "w1", "demo", NULL};
    worker_start_args(&w, wargs);
    assert_int_equal(gw_start(&gw, t->bp.cmd, NULL), 0);
    static char out[65536];
    char seen[1024];
    int rc = run_node("t-agui", "{\"steps\":3}", out, sizeof out);
    if (rc != 0)
        fail_msg("HttpAgent failed (%d): %s", rc, out);
    types(out, seen, sizeof seen);
    assert_string_equal(seen, "RUN_STARTED TEXT_MESSAGE_START TEXT_MESSAGE_CONTENT "
                              "TEXT_MESSAGE_CONTENT TEXT_MESSAGE_CONTENT TEXT_MESSAGE_END "
                              "RUN_FINISHED");
    assert_non_null(strstr(out, "\"done\":true"));
    assert_non_null(strstr(out, "\"role\":\"assistant\",\"content\":\"step 1 step 2 step 3 \""));
    /* A second run of the same thread (a new runId HttpAgent makes). */
    rc = run_node("t-agui", "{\"steps\":1}", out, sizeof out);
    if (rc != 0)
        fail_msg("HttpAgent failed on the second run (%d): %s", rc, out);
    types(out, seen, sizeof seen);
    assert_string_equal(seen, "RUN_STARTED TEXT_MESSAGE_START TEXT_MESSAGE_CONTENT "
                              "TEXT_MESSAGE_END RUN_FINISHED");
    char body[4096];
    assert_int_equal(gw_http(&gw, "GET", "/threads/t-agui/runs", NULL, NULL, body, sizeof body),
                     200);
    assert_non_null(strstr(body, "\"status\":\"finished\""));
    assert_non_null(strstr(strstr(body, "\"status\":\"finished\"") + 1, "\"status\":\"finished\""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_http_agent_runs_through_the_gateway, it_setup,
                                        teardown),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

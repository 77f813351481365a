/*
 * test_conformance.c - `agentbus conformance` as a process against our own
 * broker: the whole suite passes (exit 0, "0 failed", every check named),
 * `--only gap` runs that one check alone, a second run against the same
 * broker passes too (fresh ids per run), and usage errors exit 2. A broker
 * that does not answer makes every check fail with exit 1, within bounds.
 */
#include "testutil.h"

#include "broker_proc.h"

#define OUT_MAX 16384

static const char *const check_names[] = {
    "version",    "ordering",  "gap",          "duplicate",   "conflict",
    "fencing",    "terminal",  "errors",       "replay_run",  "replay_thread",
    "replay_all", "heartbeat", "flow_control", "unsupported", "snapshots",
};
#define NCHECKS (sizeof(check_names) / sizeof(check_names[0]))

/* Run `agentbus ARGS 2>&1`; output into @p out; returns the exit status. */
static int run_cli(char *out, const char *fmt, ...) AB_PRINTF(2, 3);
static int run_cli(char *out, const char *fmt, ...)
{
    char args[1024], cmd[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof(cmd), "%s %s 2>&1", AB_AGENTBUS_BIN, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, OUT_MAX - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    print_message("$ agentbus %s\n%s", args, out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* True when @p out has a line "<verdict> <name>" (then end of line or ':'). */
static bool has_line(const char *out, const char *verdict, const char *name)
{
    char want[128];
    snprintf(want, sizeof(want), "%s %s", verdict, name);
    for (const char *p = out; (p = strstr(p, want)) != NULL; p++)
        if ((p == out || p[-1] == '\n') && (p[strlen(want)] == '\n' || p[strlen(want)] == ':'))
            return true;
    return false;
}

static void assert_all_pass(const char *out)
{
    for (size_t i = 0; i < NCHECKS; i++) {
        bool pass = has_line(out, "PASS", check_names[i]);
        /* our broker announces durableThreadSnapshots (available): unsupported is skipped */
        bool skip =
            strcmp(check_names[i], "unsupported") == 0 && has_line(out, "SKIP", "unsupported");
        if (!pass && !skip)
            fail_msg("check %s did not pass", check_names[i]);
    }
    assert_non_null(strstr(out, "14 passed, 0 failed, 1 skipped\n"));
}

static void test_conformance_full_suite(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char out[OUT_MAX];
    assert_int_equal(run_cli(out, "conformance %s", t->bp.cmd), 0);
    assert_all_pass(out);
    /* again on the same broker: every check uses fresh ids */
    assert_int_equal(run_cli(out, "conformance --timeout 5000 %s", t->bp.cmd), 0);
    assert_all_pass(out);
}

static void test_conformance_only_gap(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char out[OUT_MAX];
    assert_int_equal(run_cli(out, "conformance %s --only gap", t->bp.cmd), 0);
    assert_true(has_line(out, "PASS", "gap"));
    assert_non_null(strstr(out, "1 passed, 0 failed, 0 skipped\n"));
    for (size_t i = 0; i < NCHECKS; i++)
        if (strcmp(check_names[i], "gap") != 0)
            assert_null(strstr(out, check_names[i]));
}

static void test_conformance_usage_and_unreachable(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char out[OUT_MAX], ep[160];
    assert_int_equal(run_cli(out, "conformance"), 2);
    assert_int_equal(run_cli(out, "conformance %s --only nope", t->bp.cmd), 2);
    assert_int_equal(run_cli(out, "conformance --help"), 0);
    snprintf(ep, sizeof(ep), "%s", t->bp.cmd);
    assert_int_equal(bp_stop(&t->bp), 0);
    long t0 = bp_now_ms();
    assert_int_equal(run_cli(out, "conformance %s --timeout 300 --only gap --only errors", ep), 1);
    assert_true(has_line(out, "FAIL", "gap"));
    assert_true(has_line(out, "FAIL", "errors"));
    assert_non_null(strstr(out, "0 passed, 2 failed, 0 skipped\n"));
    assert_true(bp_now_ms() - t0 < 5000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_conformance_full_suite, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_conformance_only_gap, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_conformance_usage_and_unreachable, it_setup,
                                        it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

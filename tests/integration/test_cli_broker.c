/*
 * test_cli_broker.c - `agentbus broker` as its operator sees it: what it logs at start.
 *
 * --metrics 127.0.0.1:0 lets the system pick the port; the start log must name the port
 * actually bound (not 0), and that port must answer GET /metrics.
 */
#include "testutil.h"

#include "broker_proc.h"
#include "cli_run.h"
#include "http_get.h"

static const char *const metrics_any[] = {"--metrics", "127.0.0.1:0", NULL};

static int setup_metrics_any(void **state)
{
    char log[64];
    snprintf(log, sizeof log, "/tmp/ab-cli-broker-%d.log", (int)getpid());
    return it_setup_log(state, metrics_any, log);
}

static int teardown_log(void **state)
{
    it_t *t = *state;
    if (t && t->bp.log[0])
        unlink(t->bp.log);
    return it_teardown(state);
}

static void test_metrics_port_zero_logged(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    const char *needle = "info metrics: http://127.0.0.1:";
    assert_int_equal(bp_wait_log(&t->bp, needle, 1, IT_TIMEOUT), 1);
    char *log = tu_read_file(t->bp.log, NULL);
    const char *at = strstr(log, needle);
    assert_non_null(at);
    int port = atoi(at + strlen(needle));
    assert_non_null(strstr(at, "/metrics\n"));
    free(log);
    assert_true(port > 0 && port <= 65535);
    static char out[16384];
    it_http(port, "GET /metrics HTTP/1.0\r\n\r\n", out, sizeof out);
    assert_int_equal(strncmp(out + 8, " 200 ", 5), 0); /* HTTP/1.x 200 */
    assert_non_null(strstr(out, "\nagentbus_uptime_seconds "));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_metrics_port_zero_logged, setup_metrics_any,
                                        teardown_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

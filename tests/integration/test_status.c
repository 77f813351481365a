/*
 * test_status.c - the `stats` request (docs/PROTOCOL.md 7.18) and `agentbus
 * status` against a real broker: every figure follows what the test did
 * (runs started and ended, events and commits, a rejection, connections and
 * subscribers opened and closed), and the command prints it for a person, as
 * JSON, and again with --watch; the broker's --log-format json and its
 * systemd readiness message.
 */
#include "testutil.h"

#include "broker_proc.h"
#include "cli_run.h"
#include "http_get.h"

#include "agentbus/subscriber.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

/* The broker a test starts itself (not the fixture's): stopped by pid after the test, also
 * when it failed half way. */
static bp_t own;

static int stop_own(void **state)
{
    (void)state;
    bp_cleanup(&own);
    return 0;
}

static ab_stats_reply_t stats(ab_conn_t *c, ab_doc_t *doc)
{
    ab_stats_reply_t r;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_stats(c, doc, &r, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("stats: %s: %s", ab_status_name(err.code), err.message);
    return r;
}

/* Ask until @p field of the answer is @p want (connection counts follow
 * socket events, which reach the broker a moment after the act). */
#define STATS_UNTIL(c, doc, field, want)                                                           \
    do {                                                                                           \
        ab_stats_reply_t s_ = stats((c), (doc));                                                   \
        for (int i_ = 0; i_ < 500 && s_.field != (uint64_t)(want); i_++) {                         \
            assert_int_equal(ab_conn_wait((c), 10), 0);                                            \
            s_ = stats((c), (doc));                                                                \
        }                                                                                          \
        assert_int_equal(s_.field, (want));                                                        \
    } while (0)

static int on_event(void *ud, const ab_sub_event_t *e)
{
    (void)e;
    (*(int *)ud)++;
    return 0;
}

static void test_stats_follow_the_bus(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    STATS_UNTIL(c, t->doc, store_known, 1);
    ab_stats_reply_t s = stats(c, t->doc);
    assert_int_equal(s.runs_total, 0);
    assert_int_equal(s.head_pos, 0);
    assert_int_equal(s.commits, 0);
    assert_true(s.version.len > 0 && s.instance.len == 16);
    assert_memory_equal(s.instance.ptr, ab_conn_instance(c), 16);
    STATS_UNTIL(c, t->doc, connections, 1);

    /* two runs started, one of them ended: 6 events */
    ab_buf_t ev = AB_BUF_INIT;
    for (uint64_t seq = 1; seq <= 4; seq++) {
        ab_buf_reset(&ev);
        it_event(&ev, "t-s", "r-done", seq, 4, 1);
        assert_int_equal(it_publish1(c, t->doc, &ev, NULL).status, AB_RESULT_ACCEPTED);
    }
    for (uint64_t seq = 1; seq <= 2; seq++) {
        ab_buf_reset(&ev);
        it_event(&ev, "t-s", "r-open", seq, 0, 1);
        assert_int_equal(it_publish1(c, t->doc, &ev, NULL).status, AB_RESULT_ACCEPTED);
    }
    ab_buf_reset(&ev); /* a gap: rejected, and counted */
    it_event(&ev, "t-s", "r-open", 9, 0, 1);
    assert_int_equal(it_publish1(c, t->doc, &ev, NULL).status, AB_RESULT_REJECTED);
    ab_buf_free(&ev);
    STATS_UNTIL(c, t->doc, runs_total, 2); /* the store's figures: a second old at most */
    STATS_UNTIL(c, t->doc, runs_active, 1);
    s = stats(c, t->doc);
    assert_int_equal(s.events, 6);
    assert_int_equal(s.commits, 6); /* one event per request, one group each */
    assert_int_equal(s.rejected, 1);
    assert_int_equal(s.head_pos, 6);
    assert_int_equal(s.commit_window, 6);
    assert_true(s.commit_p50_us <= s.commit_p99_us && s.commit_p99_us <= s.commit_max_us);
    assert_true(s.store_bytes > 0);
    assert_int_equal(s.queue_events, 0);

    /* a second connection and a subscriber come and go */
    ab_conn_t *c2 = it_connect(&t->bp);
    STATS_UNTIL(c, t->doc, connections, 2);
    int got = 0;
    ab_sub_opts_t so = {.scope = AB_SUB_ALL, .on_event = on_event, .ud = &got};
    ab_sub_t *sub = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_sub_new(&sub, t->bp.cmd, &so, &err), AB_OK);
    assert_int_equal(ab_sub_poll(sub, 100, &err), AB_OK);
    STATS_UNTIL(c, t->doc, subscribers, 1);
    ab_sub_destroy(&sub);
    ab_conn_destroy(&c2);
    STATS_UNTIL(c, t->doc, subscribers, 0);
    STATS_UNTIL(c, t->doc, connections, 1);
    ab_conn_destroy(&c);
}

static void test_status_command(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char out[OUT_MAX];
    ab_conn_t *c = it_connect(&t->bp);
    ab_buf_t ev = AB_BUF_INIT;
    it_event(&ev, "t-c", "r-c", 1, 0, 1);
    assert_int_equal(it_publish1(c, t->doc, &ev, NULL).status, AB_RESULT_ACCEPTED);
    ab_buf_free(&ev);
    STATS_UNTIL(c, t->doc, runs_active, 1);
    ab_conn_destroy(&c);
    assert_int_equal(it_run_cli(out, "status --broker %s", t->bp.cmd), 0);
    assert_non_null(strstr(out, "store    runs 1 (1 active)"));
    assert_non_null(strstr(out, "head position 1"));
    assert_non_null(strstr(out, "totals   1 commits  1 events  0 rejected"));
    assert_null(strstr(out, "standby")); /* SQLite has no standbys to report */
    assert_int_equal(it_run_cli(out, "status --broker %s --json", t->bp.cmd), 0);
    assert_non_null(strstr(out, ",\"replicas_known\":false,\"replicas\":0,"));
    assert_non_null(strstr(out, ",\"head_pos\":1,\"store_known\":true,\"runs_total\":1,"
                                "\"runs_active\":1,"));
    assert_non_null(strstr(out, ",\"events\":1,\"rejected\":0,"));
    /* --watch: one object per refresh, then --count ends it */
    assert_int_equal(it_run_cli(out, "status --broker %s --json --watch 1 --count 2", t->bp.cmd),
                     0);
    char *second = strstr(out, "}\n{\"broker\":");
    assert_non_null(second);
    assert_null(strstr(second + 2, "}\n{"));
    assert_int_equal(it_run_cli(out, "status --broker %s --count 2", t->bp.cmd), 2);
    assert_non_null(strstr(out, "--count goes with --watch"));
}

/* --log-format json: every line one object; the connection lines are there at debug. */
static void test_log_json(void **state)
{
    (void)state;
    if (!bp_available())
        skip();
    bp_t *b = &own; /* stopped by stop_own() whatever the outcome */
    memset(b, 0, sizeof *b);
    snprintf(b->log, sizeof b->log, "/tmp/ab_it_status_log_%d", (int)getpid());
    unlink(b->log);
    const char *extra[] = {"--log-format", "json", "--log-level", "debug", NULL};
    assert_int_equal(bp_start(b, NULL, extra), 0);
    ab_conn_t *c = it_connect(b);
    assert_true(bp_wait_log(b, "\"level\":\"debug\",\"msg\":\"command connection opened", 1,
                            IT_TIMEOUT) >= 1);
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    ab_claimed_t cl;
    ab_error_t err = AB_ERROR_INIT;
    for (int i = 0; i < 2; i++) /* the second claim fences the first: said at info */
        assert_int_equal(ab_conn_claim(c, "t-l", "r-l", doc, &cl, IT_TIMEOUT, &err), AB_OK);
    assert_true(bp_wait_log(b,
                            "\"level\":\"info\",\"msg\":\"claim: run r-l of thread t-l at "
                            "epoch 3 (epoch 2 fenced; last seq 0)\"",
                            1, IT_TIMEOUT) >= 1);
    ab_doc_destroy(&doc);
    ab_conn_destroy(&c);
    assert_true(bp_wait_log(b, "\"msg\":\"command connection closed", 1, IT_TIMEOUT) >= 1);
    assert_true(bp_wait_log(b, "\"level\":\"info\",\"msg\":\"ready: cmd=", 1, 0) >= 1);
    FILE *f = fopen(b->log, "r");
    assert_non_null(f);
    char line[2048];
    int lines = 0;
    while (fgets(line, sizeof line, f)) { /* each line a whole object, nothing else */
        lines++;
        size_t n = strlen(line);
        if (strncmp(line, "{\"time\":\"", 9) != 0 || n < 3 || strcmp(line + n - 3, "\"}\n") != 0)
            fail_msg("not one JSON object: %s", line);
    }
    fclose(f);
    assert_true(lines >= 3);
    bp_cleanup(b);
    unlink(b->log);
    char out[OUT_MAX];
    assert_int_equal(it_run_cli(out, "broker --log-format yaml"), 2);
    assert_non_null(strstr(out, "log-format: 'yaml' is not text or json"));
}

/*
 * Start the test's own broker (stopped by stop_own() whatever the outcome) with --metrics on
 * a free port, connect, and publish events 1 to @p n of run "r" of @p thread, a run of
 * @p total events (0: one that never ends). @return the metrics port.
 */
static int metrics_broker(ab_conn_t **c, ab_doc_t **doc, const char *thread, uint64_t n,
                          uint64_t total)
{
    int port = bp_free_port();
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    const char *extra[] = {"--metrics", addr, NULL};
    memset(&own, 0, sizeof own);
    assert_int_equal(bp_start(&own, NULL, extra), 0);
    *c = it_connect(&own);
    assert_int_equal(ab_doc_new(doc), AB_OK);
    ab_buf_t ev = AB_BUF_INIT;
    for (uint64_t seq = 1; seq <= n; seq++) {
        ab_buf_reset(&ev);
        it_event(&ev, thread, "r", seq, total, 1);
        assert_int_equal(it_publish1(*c, *doc, &ev, NULL).status, AB_RESULT_ACCEPTED);
    }
    ab_buf_free(&ev);
    return port;
}

/* The value of metric @p name (a line "NAME VALUE") in @p text, or -1 when absent. */
static long long metric_of(const char *text, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(text, key);
    return p != NULL ? strtoll(p + strlen(key), NULL, 10) : -1;
}

/* --metrics: the figures of stats as Prometheus text; other paths and methods refused. */
static void test_metrics(void **state)
{
    (void)state;
    if (!bp_available())
        skip();
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    int port = metrics_broker(&c, &doc, "t-m", 3, 0);
    bp_t *b = &own;
    STATS_UNTIL(c, doc, runs_active, 1); /* the store's figures are in the box */
    static char out[16384];
    it_http(port, "GET /metrics HTTP/1.0\r\n\r\n", out, sizeof out);
    assert_int_equal(strncmp(out + 8, " 200 ", 5), 0); /* HTTP/1.x 200 */
    assert_non_null(strstr(out, "Content-Type: text/plain; version=0.0.4"));
    assert_non_null(strstr(out, "\n# TYPE agentbus_events_committed_total counter\n"
                                "agentbus_events_committed_total 3\n"));
    assert_non_null(strstr(out, "\nagentbus_head_position 3\n"));
    /* one thread of three events: the first a miss (tprev = the start's head), two hits */
    assert_non_null(strstr(out, "\nagentbus_tprev_misses_total 1\n"));
    assert_non_null(strstr(out, "\nagentbus_tprev_hits_total 2\n"));
    assert_non_null(strstr(out, "\nagentbus_tprev_gaps_total 0\n"));
    assert_non_null(strstr(out, "\nagentbus_store_runs_active 1\n"));
    assert_non_null(strstr(out, "\nagentbus_connections 1\n"));
    assert_non_null(strstr(out, "agentbus_commit_seconds{quantile=\"0.99\"} "));
    assert_non_null(strstr(out, "agentbus_info{version=\""));
    /* one publish at a time to an idle writer: each may be a lone commit (when it met the
     * writer asleep and the store quick; test_lone.c), never more than the publishes */
    long long nlone = metric_of(out, "agentbus_lone_commits_total"); /* -1: absent */
    assert_true(nlone >= 0 && nlone <= 3);
    it_http(port, "GET /nope HTTP/1.0\r\n\r\n", out, sizeof out);
    assert_int_equal(strncmp(out + 8, " 404 ", 5), 0);
    it_http(port, "POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc", out, sizeof out);
    assert_int_equal(strncmp(out + 8, " 405 ", 5), 0);
    assert_non_null(strstr(out, "Allow: GET, HEAD"));
    it_http(port, "garbage\r\n\r\n", out, sizeof out); /* libmicrohttpd's to refuse */
    assert_null(strstr(out, " 200 "));
    ab_doc_destroy(&doc);
    ab_conn_destroy(&c);
    bp_cleanup(b);
    char cli[OUT_MAX];
    assert_int_equal(it_run_cli(cli, "broker --metrics 127.0.0.1"), 2);
    assert_non_null(strstr(cli, "metrics: '127.0.0.1' is not HOST:PORT"));
}

/* The snapshot worker folds a run's events from the writer's feed (broker/snapfeed.h): after
 * a run of five events ends, the metrics count five events fed and no byte still held. */
static void test_metrics_snapshot_feed(void **state)
{
    (void)state;
    if (!bp_available())
        skip();
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    int port = metrics_broker(&c, &doc, "t-f", 5, 5); /* RUN_STARTED ... RUN_FINISHED */
    bp_t *b = &own;
    static char out[16384];
    long long fed = -1, held = -1;
    for (int i = 0; i < 500 && (fed != 5 || held != 0); i++) { /* the worker runs at nice 19 */
        if (i > 0)
            assert_int_equal(ab_conn_wait(c, 10), 0);
        it_http(port, "GET /metrics HTTP/1.0\r\n\r\n", out, sizeof out);
        fed = metric_of(out, "agentbus_snapshot_fed_events_total");
        held = metric_of(out, "agentbus_snapshot_feed_bytes");
    }
    assert_int_equal(fed, 5);
    assert_int_equal(held, 0);
    ab_doc_destroy(&doc);
    ab_conn_destroy(&c);
    bp_cleanup(b);
}

/* Type=notify readiness: READY=1 on $NOTIFY_SOCKET once both endpoints are bound. */
static void test_notify_ready(void **state)
{
    (void)state;
    if (!bp_available())
        skip();
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "/tmp/ab_it_notify_%d", (int)getpid());
    unlink(sa.sun_path);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    setenv("NOTIFY_SOCKET", sa.sun_path, 1);
    bp_t *b = &own; /* stopped by stop_own() whatever the outcome */
    memset(b, 0, sizeof *b);
    int started = bp_start(b, NULL, NULL);
    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(started, 0);
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, IT_TIMEOUT), 1);
    char msg[600];
    ssize_t n = recv(fd, msg, sizeof msg - 1, 0);
    assert_true(n > 0);
    msg[n] = '\0';
    assert_non_null(strstr(msg, "READY=1\n"));
    char want[2048];
    snprintf(want, sizeof want, "STATUS=ready: cmd=%s events=", b->cmd);
    assert_non_null(strstr(msg, want));
    snprintf(want, sizeof want, "MAINPID=%ld", (long)b->pid);
    assert_non_null(strstr(msg, want));
    bp_cleanup(b);
    close(fd);
    unlink(sa.sun_path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stats_follow_the_bus, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_status_command, it_setup, it_teardown),
        cmocka_unit_test_teardown(test_log_json, stop_own),
        cmocka_unit_test_teardown(test_notify_ready, stop_own),
        cmocka_unit_test_teardown(test_metrics, stop_own),
        cmocka_unit_test_teardown(test_metrics_snapshot_feed, stop_own),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_gateway_auth.c - bearer tokens of `agentbus gateway --tokens FILE`
 * against a broker with keys and an access file: every endpoint (the page,
 * /metrics and GET /threads too) refuses a request without a token or with an
 * unknown one (401, WWW-Authenticate, the typed error unauthorized), before
 * its route, method or body is looked at; a CORS preflight needs none (204);
 * a known token acts as its identity of the access file, whose roles the
 * broker enforces: an observer of team-a/ reads team-a/ threads and gets 403
 * unauthorized for team-b/ and for starting a run; an admin may start one;
 * GET /threads lists the team-b/ thread to the admin and not to the observer.
 * Without tokens the gateway refuses to listen on a non-loopback address.
 */
#include "testutil.h"

#include "agentbus/keys.h"
#include "cli_run.h"
#include "gw_proc.h"
#include "worker_proc.h"

#define VIEWER "Authorization: Bearer viewer-token-0123456789\r\n"
#define OPS    "Authorization: Bearer ops-token-0123456789abcdef\r\n"

typedef struct afx {
    char dir[64];  /* the broker's keys and access file */
    char mine[64]; /* the identities' secret keys, and the token file */
    char tokens[96], server[96];
    it_t it;
    gwp_t g;
} afx_t;

static afx_t F;
static char body[65536];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void make_identity(const char *name, ab_keypair_t *kp)
{
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_keypair_new(kp, &err), AB_OK);
    assert_int_equal(ab_keypair_write(kp, F.mine, name, &err), AB_OK);
}

static int setup(void **state)
{
    memset(&F, 0, sizeof F);
    *state = &F.it;
    snprintf(F.dir, sizeof F.dir, "/tmp/ab-gwauth-keys-XXXXXX");
    snprintf(F.mine, sizeof F.mine, "/tmp/ab-gwauth-mine-XXXXXX");
    assert_non_null(mkdtemp(F.dir));
    assert_non_null(mkdtemp(F.mine));
    ab_keypair_t broker, viewer, ops, worker;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_keypair_new(&broker, &err), AB_OK);
    assert_int_equal(ab_keypair_write(&broker, F.dir, "broker", &err), AB_OK);
    make_identity("viewer", &viewer);
    make_identity("ops", &ops);
    make_identity("worker", &worker);
    char acl[1024], path[160];
    snprintf(acl, sizeof acl, "viewer %s observe:team-a/\nops %s admin\nworker %s serve publish\n",
             viewer.public_key, ops.public_key, worker.public_key);
    snprintf(path, sizeof path, "%s/access", F.dir);
    write_file(path, acl);
    snprintf(F.tokens, sizeof F.tokens, "%s/tokens", F.mine);
    write_file(F.tokens, "# token identity\nviewer-token-0123456789 viewer\n"
                         "ops-token-0123456789abcdef ops\n");
    snprintf(F.server, sizeof F.server, "%s/broker.key", F.dir);
    F.it.available = bp_available();
    if (!F.it.available)
        return 0;
    assert_int_equal(ab_doc_new(&F.it.doc), AB_OK);
    const char *extra[] = {"--keys", F.dir, NULL};
    return bp_start(&F.it.bp, NULL, extra);
}

static int teardown(void **state)
{
    (void)state;
    if (F.g.pid > 0)
        gw_stop(&F.g, true);
    if (running_worker > 0) {
        kill(running_worker, SIGKILL);
        waitpid(running_worker, NULL, 0);
        running_worker = 0;
    }
    bp_cleanup(&F.it.bp);
    ab_doc_destroy(&F.it.doc);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", F.dir, F.mine);
    assert_int_equal(system(cmd), 0);
    return 0;
}

/* The gateway with tokens; its broker key from the environment (the global --server-key). */
static void start_gateway(void)
{
    setenv("AGENTBUS_SERVER_KEY", F.server, 1);
    const char *extra[] = {"--tokens", F.tokens, "--keys", F.mine, NULL};
    assert_int_equal(gw_start(&F.g, F.it.bp.cmd, extra), 0);
    unsetenv("AGENTBUS_SERVER_KEY");
}

/* Method and path of every endpoint, with a body where one is wanted. */
static const char *const endpoints[][3] = {
    {"GET", "/", NULL},
    {"GET", "/index.html", NULL},
    {"GET", "/healthz", NULL},
    {"GET", "/metrics", NULL},
    {"GET", "/workers", NULL},
    {"GET", "/threads", NULL},
    {"GET", "/threads/team-a%2F1/events", NULL},
    {"GET", "/threads/team-a%2F1/snapshot", NULL},
    {"GET", "/threads/team-a%2F1/runs", NULL},
    {"GET", "/threads/team-a%2F1/runs/r/events", NULL},
    {"POST", "/threads/team-a%2F1/runs/r/cancel", "{}"},
    {"POST", "/threads/team-a%2F1/runs/r/resume", "{\"decisions\":{\"i\":\"approve\"}}"},
    {"POST", "/agents/demo", "{\"threadId\":\"team-a/1\",\"runId\":\"r\"}"},
    {"POST", "/agents/demo/actions/echo", "{}"},
    {"GET", "/no/such/endpoint", NULL},
};

static void expect_401(const char *method, const char *path, const char *hdr, const char *b)
{
    int st = gw_http(&F.g, method, path, hdr, b, body, sizeof body);
    if (st != 401 || !strstr(body, "\"code\":\"unauthorized\"") ||
        !strstr(body, "\"field\":\"Authorization\""))
        fail_msg("%s %s with %s: want 401 unauthorized, got %d %s", method, path,
                 hdr[0] ? hdr : "no token", st, body);
}

static void test_every_endpoint_refuses_bad_tokens(void **state)
{
    IT_REQUIRE_BROKER((it_t *)*state);
    start_gateway();
    const char *bad[] = {"", "Authorization: Bearer nope-nope-nope-nope\r\n",
                         "Authorization: Basic dmlld2VyOng=\r\n",
                         "Authorization: Bearer viewer-token-012345678\r\n", /* a prefix */
                         "Authorization: Bearer viewer-token-01234567890\r\n"};
    for (size_t i = 0; i < sizeof endpoints / sizeof endpoints[0]; i++)
        for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++)
            expect_401(endpoints[i][0], endpoints[i][1], bad[j], endpoints[i][2]);
    /* The refusal carries the challenge; /metrics counts the refusals. */
    int fd = gw_send(&F.g, "GET", "/healthz", "", NULL, 0, 0);
    assert_true(fd >= 0);
    gw_sse_t s = {.fd = fd};
    ssize_t n = read(fd, s.buf, sizeof s.buf - 1);
    close(fd);
    assert_true(n > 0);
    s.buf[n] = '\0';
    assert_non_null(strstr(s.buf, "WWW-Authenticate: Bearer"));
    assert_int_equal(gw_http(&F.g, "GET", "/metrics", OPS, NULL, body, sizeof body), 200);
    assert_non_null(strstr(body, "agentbus_gateway_unauthorized_total 76\n"));
    /* A CORS preflight carries no credentials: 204 on any path without a token. */
    fd = gw_send(&F.g, "OPTIONS", "/threads/team-a%2F1/events", "", NULL, 0, 0);
    assert_true(fd >= 0);
    n = read(fd, s.buf, sizeof s.buf - 1);
    close(fd);
    assert_true(n > 0);
    s.buf[n] = '\0';
    assert_non_null(strstr(s.buf, " 204 "));
}

static void test_tokens_act_as_their_identity(void **state)
{
    IT_REQUIRE_BROKER((it_t *)*state);
    start_gateway();
    wproc_t w;
    char wkey[160];
    snprintf(wkey, sizeof wkey, "%s/worker.key_secret", F.mine);
    setenv("AGENTBUS_KEY", wkey, 1);
    setenv("AGENTBUS_SERVER_KEY", F.server, 1);
    const char *wargs[] = {F.it.bp.cmd, "w1", "demo", NULL};
    worker_start_args(&w, wargs);
    unsetenv("AGENTBUS_KEY");
    unsetenv("AGENTBUS_SERVER_KEY");
    assert_int_equal(gw_http(&F.g, "GET", "/healthz", VIEWER, NULL, body, sizeof body), 200);
    /* the scheme's case and the spaces after it are the client's (RFC 7235 2.1) */
    assert_int_equal(gw_http(&F.g, "GET", "/healthz",
                             "authorization: bearer   viewer-token-0123456789\r\n", NULL, body,
                             sizeof body),
                     200);
    /* The viewer may not start a run (control) ... */
    const char *in = "{\"threadId\":\"team-a/1\",\"runId\":\"r1\",\"messages\":[],\"tools\":[],"
                     "\"context\":[],\"state\":{},\"forwardedProps\":{}}";
    int st = gw_http(&F.g, "POST", "/agents/demo", VIEWER, in, body, sizeof body);
    if (st != 403 || !strstr(body, "\"code\":\"unauthorized\""))
        fail_msg("viewer start_run: want 403, got %d %s", st, body);
    /* ... ops may; the viewer then reads the run on team-a/ ... */
    gw_sse_t s;
    gw_ev_t e;
    assert_int_equal(gw_sse_open(&s, &F.g, "POST", "/agents/demo", OPS, in, 0), 0);
    int events = 0;
    while (gw_sse_next(&s, &e, IT_TIMEOUT) == 1)
        events++;
    gw_sse_close(&s);
    assert_int_equal(events, 7);
    assert_int_equal(
        gw_http(&F.g, "GET", "/threads/team-a%2F1/runs", VIEWER, NULL, body, sizeof body), 200);
    assert_non_null(strstr(body, "\"status\":\"finished\""));
    assert_int_equal(gw_sse_open(&s, &F.g, "GET", "/threads/team-a%2F1/events", VIEWER, NULL, 0),
                     0);
    events = 0;
    while (events < 7 && gw_sse_next(&s, &e, IT_TIMEOUT) == 1)
        events++;
    gw_sse_close(&s);
    assert_int_equal(events, 7);
    /* ... and nothing of team-b/, on any endpoint that reads a thread. */
    const char *b[] = {"/threads/team-b%2F1/runs", "/threads/team-b%2F1/snapshot",
                       "/threads/team-b%2F1/events", "/threads/team-b%2F1/runs/r/events"};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        st = gw_http(&F.g, "GET", b[i], VIEWER, NULL, body, sizeof body);
        if (st != 403 || !strstr(body, "\"code\":\"unauthorized\""))
            fail_msg("viewer GET %s: want 403 unauthorized, got %d %s", b[i], st, body);
    }
    /* GET /threads lists what the token's identity may observe: team-b/1 (written by ops)
     * is ops's to see, never the viewer's. */
    const char *inb = "{\"threadId\":\"team-b/1\",\"runId\":\"r1\",\"messages\":[],\"tools\":[],"
                      "\"context\":[],\"state\":{},\"forwardedProps\":{}}";
    assert_int_equal(gw_sse_open(&s, &F.g, "POST", "/agents/demo", OPS, inb, 0), 0);
    for (events = 0; gw_sse_next(&s, &e, IT_TIMEOUT) == 1;)
        events++;
    gw_sse_close(&s);
    assert_int_equal(events, 7);
    assert_int_equal(gw_http(&F.g, "GET", "/threads", OPS, NULL, body, sizeof body), 200);
    assert_non_null(strstr(body, "{\"thread\":\"team-a/1\""));
    assert_non_null(strstr(body, "{\"thread\":\"team-b/1\""));
    assert_int_equal(gw_http(&F.g, "GET", "/threads", VIEWER, NULL, body, sizeof body), 200);
    assert_non_null(strstr(body, "{\"thread\":\"team-a/1\""));
    assert_null(strstr(body, "team-b"));
    assert_int_equal(
        gw_http(&F.g, "GET", "/threads?prefix=team-b%2F", VIEWER, NULL, body, sizeof body), 200);
    assert_string_equal(body, "{\"threads\":[]}\n");
    assert_int_equal(gw_stop(&F.g, false), 0); /* SIGTERM: exit 0 (under ASan: no leak) */
}

static void test_no_tokens_loopback_only(void **state)
{
    IT_REQUIRE_BROKER((it_t *)*state);
    char out[OUT_MAX];
    int rc = it_run_cli(out, "gateway --broker %s --listen 0.0.0.0:0", F.it.bp.cmd);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "loopback only"));
    rc = it_run_cli(out, "gateway --broker %s --tokens %s --keys %s --listen 127.0.0.1:0",
                    F.it.bp.cmd, F.tokens, F.mine);
    assert_int_equal(rc, 2); /* tokens need the broker's key (--server-key) */
    assert_non_null(strstr(out, "--server-key"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_endpoint_refuses_bad_tokens, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tokens_act_as_their_identity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_tokens_loopback_only, setup, teardown),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

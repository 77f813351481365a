/*
 * test_gateway.c - `agentbus gateway` as a process between a real broker
 * (with examples/worker serving agent "demo") and HTTP clients on loopback:
 *  - /healthz, an unknown path, a wrong method, all typed;
 *  - POST /agents/demo streams the run's events as SSE, ids increasing,
 *    ending after RUN_FINISHED; Accept: application/json gets the acceptance;
 *  - resume at every point of a live run: for each k the client disconnects
 *    after k events and reconnects with Last-Event-ID, and the events it got
 *    are exactly the run's (as the JSON Lines export lists them), once each;
 *    ?after= does the same;
 *  - two clients on one thread see the same events;
 *  - malformed requests (bad JSON, a huge body, bad ids, bad cursors, a bad
 *    RunAgentInput) are answered with the bus's typed error;
 *  - a run id too long for its idempotency key is refused naming where it came
 *    from (body/runId of POST /agents, path/run of resume) and the real limit
 *    (236 and 235 bytes), a run id of exactly that length is served; a body
 *    within --max-body is never 413; /healthz without a broker is 503 "broker";
 *  - a slow client is cut at --sse-buffer and resumes without loss;
 *  - heartbeat comments on an idle stream, CORS headers and preflight,
 *    --max-streams (429), a stream released once its client left;
 *  - a gateway killed mid-stream: a new one resumes the client exactly;
 *  - GET /threads: every thread with events in byte order, paged and
 *    filtered by its query, its refusals;
 *  - cancel, resume (approve per interrupt id), actions, workers, snapshot,
 *    runs and /metrics; a POST /agents stream whose queued run is cancelled
 *    before it starts ends with an error frame (request_aborted);
 *  - resume answers above the broker's max_header_bytes are 413 naming
 *    body/decisions (body/resume) and the limit, fewer reach the broker; a bad
 *    decision names its JSON pointer body/decisions/ID, the id escaped.
 */
#include "testutil.h"

#include "gw_proc.h"
#include "worker_proc.h"

#include "agentbus/producer.h"

#define BODY_MAX 65536

typedef struct gt {
    it_t *it;
    wproc_t w;
    gwp_t g;
} gt_t;

static gt_t G;

/* Broker (from it_setup), a worker for agent "demo" and a gateway with @p extra args. */
static void start_all(void **state, const char *const *extra)
{
    memset(&G, 0, sizeof G);
    G.it = *state;
    IT_REQUIRE_BROKER(G.it);
    const char *wargs[] = {G.it->bp.cmd, "w1", "demo", "echo", NULL};
    worker_start_args(&G.w, wargs);
    assert_int_equal(gw_start(&G.g, G.it->bp.cmd, extra), 0);
}

static int teardown(void **state)
{
    if (G.g.pid > 0)
        gw_stop(&G.g, true);
    return teardown_worker(state);
}

static char body[BODY_MAX];

/* A RunAgentInput for thread @p t, run @p r with the worker's forwardedProps. */
static const char *input(const char *t, const char *r, const char *props)
{
    static char in[1024];
    snprintf(in, sizeof in,
             "{\"threadId\":\"%s\",\"runId\":\"%s\",\"messages\":[],\"tools\":[],\"context\":[],"
             "\"state\":{},\"forwardedProps\":%s}",
             t, r, props ? props : "{}");
    return in;
}

/* Read a stream to its end (at most @p max events); the count; ids into @p ids. */
static size_t read_all(gw_sse_t *s, uint64_t *ids, size_t max, char types[][32])
{
    gw_ev_t e;
    size_t n = 0;
    int rc;
    while (n < max && (rc = gw_sse_next(s, &e, IT_TIMEOUT)) == 1) {
        ids[n] = e.id;
        if (types) {
            const char *t = strstr(e.data, "\"type\":\"");
            snprintf(types[n], 32, "%.*s", t ? (int)strcspn(t + 8, "\"") : 0, t ? t + 8 : "");
        }
        n++;
    }
    return n;
}

/* Start a run through POST /agents/demo and read its stream to the end. */
static size_t run_stream(const char *t, const char *r, const char *props, uint64_t *ids,
                         char types[][32])
{
    gw_sse_t s;
    assert_int_equal(gw_sse_open(&s, &G.g, "POST", "/agents/demo", "Accept: text/event-stream\r\n",
                                 input(t, r, props), 0),
                     0);
    size_t n = read_all(&s, ids, 64, types);
    assert_int_equal(s.status, 200);
    gw_sse_close(&s);
    return n;
}

static void test_health_and_routes(void **state)
{
    start_all(state, NULL);
    assert_int_equal(gw_http(&G.g, "GET", "/healthz", NULL, NULL, body, sizeof body), 200);
    assert_non_null(strstr(body, "\"ok\":true"));
    assert_int_equal(gw_http(&G.g, "GET", "/nope", NULL, NULL, body, sizeof body), 404);
    assert_non_null(strstr(body, "\"code\":\"not_found\""));
    assert_int_equal(gw_http(&G.g, "POST", "/healthz", NULL, "{}", body, sizeof body), 501);
    assert_non_null(strstr(body, "\"field\":\"method\""));
    assert_int_equal(gw_http(&G.g, "GET", "/", NULL, NULL, body, sizeof body), 200);
    assert_non_null(strstr(body, "agentbus observer"));
}

static void test_agent_run_streams_to_its_end(void **state)
{
    start_all(state, NULL);
    uint64_t ids[64];
    char types[64][32];
    size_t n = run_stream("t-run", "r-1", "{\"steps\":3}", ids, types);
    assert_int_equal(n, 7); /* RUN_STARTED, START, 3 x CONTENT, END, RUN_FINISHED */
    assert_string_equal(types[0], "RUN_STARTED");
    assert_string_equal(types[n - 1], "RUN_FINISHED");
    for (size_t i = 1; i < n; i++)
        assert_true(ids[i] > ids[i - 1]);
    /* The same POST again (same runId) is the same run: its events again, not a second run. */
    uint64_t again[64];
    assert_int_equal(run_stream("t-run", "r-1", "{\"steps\":3}", again, NULL), n);
    assert_memory_equal(ids, again, n * sizeof ids[0]);
    assert_int_equal(gw_http(&G.g, "POST", "/agents/demo", "Accept: application/json\r\n",
                             input("t-run", "r-2", NULL), body, sizeof body),
                     200);
    assert_non_null(strstr(body, "\"run\":\"r-2\""));
    assert_int_equal(gw_http(&G.g, "GET", "/threads/t-run/runs", NULL, NULL, body, sizeof body),
                     200);
    assert_non_null(
        strstr(body, "\"run\":\"r-1\",\"status\":\"finished\",\"outcome\":\"success\""));
}

/* The run's event ids as its JSON Lines export lists them. */
static size_t export_ids(const char *t, const char *r, uint64_t *ids, size_t max)
{
    char path[256];
    snprintf(path, sizeof path, "/threads/%s/runs/%s/events", t, r);
    assert_int_equal(gw_http(&G.g, "GET", path, NULL, NULL, body, sizeof body), 200);
    size_t n = 0;
    for (const char *p = body; (p = strstr(p, "{\"pos\":")) != NULL && n < max; p++)
        ids[n++] = strtoull(p + 7, NULL, 10);
    return n;
}

/* How resume_after() gives the last id: a header, ?after=ID, or ?after= percent-encoded. */
typedef enum { BY_HEADER, BY_QUERY, BY_QUERY_ESCAPED } resume_by_t;

/* Disconnect after k events of a live run, reconnect with the last id: exactly the run. */
static void resume_after(const char *t, const char *r, size_t k, resume_by_t by)
{
    char path[300], hdr[128];
    gw_sse_t s;
    gw_ev_t e;
    uint64_t got[64];
    size_t n = 0;
    snprintf(path, sizeof path, "/threads/%s/events", t);
    assert_int_equal(gw_sse_open(&s, &G.g, "GET", path, "", NULL, 0), 0);
    assert_int_equal(gw_http(&G.g, "POST", "/agents/demo", "Accept: application/json\r\n",
                             input(t, r, "{\"steps\":5,\"step_ms\":20}"), body, sizeof body),
                     200);
    while (n < k && gw_sse_next(&s, &e, IT_TIMEOUT) == 1)
        got[n++] = e.id;
    assert_int_equal(n, k);
    gw_sse_close(&s);
    char id[24], esc[72];
    snprintf(id, sizeof id, "%llu", (unsigned long long)got[k - 1]);
    for (size_t i = 0; i < strlen(id); i++) /* each digit D as %3D */
        snprintf(esc + 3 * i, sizeof esc - 3 * i, "%%%02X", (unsigned)id[i]);
    if (by == BY_HEADER) {
        snprintf(hdr, sizeof hdr, "Last-Event-ID: %s\r\n", id);
        assert_int_equal(gw_sse_open(&s, &G.g, "GET", path, hdr, NULL, 0), 0);
    } else {
        snprintf(path, sizeof path, "/threads/%s/events?after=%s", t, by == BY_QUERY ? id : esc);
        assert_int_equal(gw_sse_open(&s, &G.g, "GET", path, "", NULL, 0), 0);
    }
    while (n < 64 && gw_sse_next(&s, &e, IT_TIMEOUT) == 1) {
        got[n++] = e.id;
        if (strstr(e.data, "\"RUN_FINISHED\""))
            break;
    }
    gw_sse_close(&s);
    uint64_t want[64];
    size_t nw = export_ids(t, r, want, 64);
    assert_int_equal(nw, 9);
    assert_int_equal(n, nw);
    assert_memory_equal(got, want, n * sizeof got[0]);
}

static void test_resume_at_every_point(void **state)
{
    start_all(state, NULL);
    for (size_t k = 1; k < 9; k++) {
        char t[32];
        snprintf(t, sizeof t, "t-resume-%zu", k);
        resume_after(t, "r", k, BY_HEADER);
    }
    resume_after("t-resume-q", "r", 4, BY_QUERY);
    resume_after("t-resume-e", "r", 3, BY_QUERY_ESCAPED); /* ?after=%34%32 is ?after=42 */
    /* A thread stream from 0 after the run: the run's events, then the next run's live. */
    gw_sse_t s;
    gw_ev_t e;
    assert_int_equal(
        gw_sse_open(&s, &G.g, "GET", "/threads/t-resume-3/events?after=0", "", NULL, 0), 0);
    uint64_t want[64];
    size_t nw = export_ids("t-resume-3", "r", want, 64);
    for (size_t i = 0; i < nw; i++) {
        assert_int_equal(gw_sse_next(&s, &e, IT_TIMEOUT), 1);
        assert_int_equal(e.id, want[i]);
    }
    assert_int_equal(gw_http(&G.g, "POST", "/agents/demo", "Accept: application/json\r\n",
                             input("t-resume-3", "r-next", NULL), body, sizeof body),
                     200);
    assert_int_equal(gw_sse_next(&s, &e, IT_TIMEOUT), 1);
    assert_true(e.id > want[nw - 1]);
    assert_non_null(strstr(e.data, "\"runId\":\"r-next\""));
    gw_sse_close(&s);
}

static void test_two_clients_one_thread(void **state)
{
    start_all(state, NULL);
    gw_sse_t a, b;
    gw_ev_t ea, eb;
    assert_int_equal(gw_sse_open(&a, &G.g, "GET", "/threads/t-two/events", "", NULL, 0), 0);
    assert_int_equal(gw_sse_open(&b, &G.g, "GET", "/threads/t-two/events", "", NULL, 0), 0);
    assert_int_equal(gw_http(&G.g, "POST", "/agents/demo", "Accept: application/json\r\n",
                             input("t-two", "r", "{\"steps\":4}"), body, sizeof body),
                     200);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(gw_sse_next(&a, &ea, IT_TIMEOUT), 1);
        assert_int_equal(gw_sse_next(&b, &eb, IT_TIMEOUT), 1);
        assert_int_equal(ea.id, eb.id);
        assert_string_equal(ea.data, eb.data);
    }
    assert_non_null(strstr(ea.data, "\"RUN_FINISHED\""));
    gw_sse_close(&a);
    gw_sse_close(&b);
}

/* Status @p st and an error body of @p code naming @p field. */
static void refused(int got, int st, const char *code, const char *field)
{
    char want[128];
    if (got != st)
        fail_msg("want status %d, got %d: %s", st, got, body);
    snprintf(want, sizeof want, "\"code\":\"%s\"", code);
    if (!strstr(body, want))
        fail_msg("want %s, got %s", want, body);
    if (field) {
        snprintf(want, sizeof want, "\"field\":\"%s", field);
        if (!strstr(body, want))
            fail_msg("want field %s, got %s", field, body);
    }
}

static void test_malformed_requests(void **state)
{
    const char *extra[] = {"--max-body", "4096", NULL};
    start_all(state, extra);
    refused(gw_http(&G.g, "POST", "/agents/demo", NULL, "{\"threadId\":", body, sizeof body), 400,
            "invalid_argument", "body");
    refused(gw_http(&G.g, "POST", "/agents/demo", NULL, "{\"a\":1,\"a\":2}", body, sizeof body),
            400, "invalid_argument", "body");
    refused(gw_http(&G.g, "POST", "/agents/demo", NULL, "[1]", body, sizeof body), 400,
            "invalid_argument", "body");
    refused(gw_http(&G.g, "POST", "/agents/demo", NULL, "{\"runId\":\"r\"}", body, sizeof body),
            400, "invalid_argument", "body/threadId");
    refused(gw_http(&G.g, "POST", "/agents/demo", NULL,
                    "{\"threadId\":\"t\",\"runId\":\"r\",\"messages\":7}", body, sizeof body),
            400, "invalid_event", "input/messages");
    char *huge = malloc(10000);
    assert_non_null(huge);
    memset(huge, ' ', 9999);
    huge[9999] = '\0';
    huge[0] = '{';
    huge[9998] = '}';
    refused(gw_http(&G.g, "POST", "/agents/demo", NULL, huge, body, sizeof body), 413, "too_large",
            "body");
    free(huge);
    refused(gw_http(&G.g, "GET", "/threads/a%ZZ/events", NULL, NULL, body, sizeof body), 400,
            "invalid_argument", "path/thread");
    refused(gw_http(&G.g, "GET", "/threads/a%01b/snapshot", NULL, NULL, body, sizeof body), 400,
            "invalid_argument", "path/thread");
    refused(gw_http(&G.g, "POST", "/agents/%00/actions/x", NULL, NULL, body, sizeof body), 400,
            "invalid_argument", "path/agent");
    refused(gw_http(&G.g, "GET", "/threads/t/events", "Last-Event-ID: abc\r\n", NULL, body,
                    sizeof body),
            400, "invalid_argument", "Last-Event-ID");
    refused(gw_http(&G.g, "GET", "/threads/t/events?after=-1", NULL, NULL, body, sizeof body), 400,
            "invalid_argument", "after");
    refused(gw_http(&G.g, "GET", "/threads/t/events?after=99999999999999999999", NULL, NULL, body,
                    sizeof body),
            400, "invalid_argument", "after");
    refused(gw_http(&G.g, "GET", "/threads/none/snapshot", NULL, NULL, body, sizeof body), 404,
            "not_found", NULL);
    refused(gw_http(&G.g, "GET", "/threads/none/runs/r/events", NULL, NULL, body, sizeof body), 404,
            "not_found", NULL);
    /* After all that the gateway still serves. */
    assert_int_equal(gw_http(&G.g, "GET", "/healthz", NULL, NULL, body, sizeof body), 200);
}

/* 400 invalid_argument naming exactly @p field, with the limit @p limit in the message and as
 * the detail "limit". */
static void refused_limit(int got, const char *field, unsigned limit)
{
    char want[128];
    refused(got, 400, "invalid_argument", NULL);
    snprintf(want, sizeof want, "\"field\":\"%s\"", field);
    if (!strstr(body, want))
        fail_msg("want %s, got %s", want, body);
    snprintf(want, sizeof want, "\"details\":{\"limit\":%u}", limit);
    if (!strstr(body, want))
        fail_msg("want %s, got %s", want, body);
    const char *m = strstr(body, "\"message\":\""), *end = m ? strstr(m, "\",\"field\"") : NULL;
    snprintf(want, sizeof want, " %u", limit);
    const char *at = m ? strstr(m, want) : NULL;
    if (at == NULL || at > end || (at[strlen(want)] >= '0' && at[strlen(want)] <= '9'))
        fail_msg("want the limit %u in the message, got %s", limit, body);
}

/* @p n bytes of 'a' and a NUL into @p out. */
static char *long_id(char *out, size_t n)
{
    memset(out, 'a', n);
    out[n] = '\0';
    return out;
}

#define RESUME_BODY "{\"decisions\":{\"approve-1\":\"approve\"},\"newRunId\":\"r-key-2\"}"

/* POST /agents builds the key "gw-HASH-RUNID" and resume "gwr-HASH-RUN", each at most 256 bytes:
 * a runId (from the body) of at most 236 bytes, a resumed run (from the path) of at most 235. */
static void test_run_id_key_limits(void **state)
{
    start_all(state, NULL);
    char run[320], path[480];
    uint64_t ids[64];
    char types[64][32];
    refused_limit(gw_http(&G.g, "POST", "/agents/demo", NULL,
                          input("t-key", long_id(run, 237), NULL), body, sizeof body),
                  "body/runId", 236);
    refused_limit(gw_http(&G.g, "POST", "/agents/demo", NULL,
                          input("t-key", long_id(run, 300), NULL), body, sizeof body),
                  "body/runId", 236);
    assert_int_equal(gw_http(&G.g, "POST", "/agents/demo", "Accept: application/json\r\n",
                             input("t-key", long_id(run, 236), NULL), body, sizeof body),
                     200);
    assert_non_null(strstr(body, "\"existing\":false"));
    const size_t bad[] = {236, 256, 300};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "/threads/t-key/runs/%s/resume", long_id(run, bad[i]));
        refused_limit(gw_http(&G.g, "POST", path, NULL, RESUME_BODY, body, sizeof body), "path/run",
                      235);
    }
    /* exactly the limit: an interrupted run of a 235-byte id resumed */
    size_t n =
        run_stream("t-key2", long_id(run, 235), "{\"steps\":1,\"interrupt\":true}", ids, types);
    assert_string_equal(types[n - 1], "RUN_FINISHED");
    snprintf(path, sizeof path, "/threads/t-key2/runs/%s/resume", run);
    assert_int_equal(gw_http(&G.g, "POST", path, NULL, RESUME_BODY, body, sizeof body), 200);
    assert_non_null(strstr(body, "\"run\":\"r-key-2\""));
    /* its other endpoints take any id (256 bytes) */
    snprintf(path, sizeof path, "/threads/t-key2/runs/%s/events", run);
    assert_int_equal(gw_http(&G.g, "GET", path, NULL, NULL, body, sizeof body), 200);
}

/* A RunAgentInput of at most @p cap - 1 bytes whose forwardedProps is an array of "1e9": 4 bytes of
 * JSON each, 9 of msgpack (a float64). */
static const char *float_input(char *out, size_t cap)
{
    int n = snprintf(out, cap,
                     "{\"threadId\":\"t-num\",\"runId\":\"r\",\"messages\":[],\"tools\":[],"
                     "\"context\":[],\"state\":{},\"forwardedProps\":{\"n\":[1e9");
    size_t len = (size_t)n;
    while (len + 4 + 3 < cap) {
        memcpy(out + len, ",1e9", 4);
        len += 4;
    }
    memcpy(out + len, "]}}", 4);
    return out;
}

/* Every body --max-body lets in is parsed (its msgpack may be larger than twice the JSON), and
 * /healthz of a gateway without a reachable broker names "broker". */
static void test_body_limit_and_health_refusals(void **state)
{
    const char *extra[] = {"--max-body", "4096", NULL};
    start_all(state, extra);
    char in[4097];
    int st = gw_http(&G.g, "POST", "/agents/demo", "Accept: application/json\r\n",
                     float_input(in, sizeof in), body, sizeof body);
    if (st != 200 || !strstr(body, "\"thread\":\"t-num\""))
        fail_msg("want the run accepted, got %d: %s", st, body);
    gwp_t dead;
    const char *dx[] = {"--timeout", "300", NULL};
    assert_int_equal(gw_start(&dead, "tcp://127.0.0.1:1", dx), 0);
    st = gw_http(&dead, "GET", "/healthz", NULL, NULL, body, sizeof body);
    assert_int_equal(gw_stop(&dead, false), 0);
    refused(st, 503, "unavailable", "broker\"");
}

/* Publish @p n padded events of run (t, r) with a producer of the test's own. */
static void publish_run(const char *t, const char *r, uint64_t n, size_t pad)
{
    gw_publish_run(G.it->bp.cmd, t, r, n, pad);
}

/* A broker that takes events up to 2 MiB (the default is 1 MiB). */
static int large_setup(void **state)
{
    static const char *const extra[] = {"--max-event-bytes", "2097152", NULL};
    return it_setup_with(state, extra);
}

/* A run holding a 1.5 MB event, stored within its broker's limits, is exported whole (before
 * the fix the export decoded stored events with the default limits and failed). */
static void test_export_of_a_large_event(void **state)
{
    start_all(state, NULL);
    enum { BLOB = 1500000 };
    static char ev[BLOB + 256], out[2 * BLOB];
    ab_producer_t *p = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_producer_opts_t po = {.timeout_ms = IT_TIMEOUT};
    assert_int_equal(ab_producer_new(&p, G.it->bp.cmd, &po, &err), AB_OK);
    assert_int_equal(ab_producer_claim(p, "t-big", "r", NULL, &err), AB_OK);
    const char *start = "{\"type\":\"RUN_STARTED\",\"threadId\":\"t-big\",\"runId\":\"r\","
                        "\"protocolVersion\":\"1.0\"}";
    int k = snprintf(ev, 64, "{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":{\"blob\":\"");
    memset(ev + k, 'x', BLOB);
    strcpy(ev + k + BLOB, "\"}}");
    const char *end = "{\"type\":\"RUN_FINISHED\",\"threadId\":\"t-big\",\"runId\":\"r\"}";
    const char *evs[3] = {start, ev, end};
    for (int i = 0; i < 3; i++)
        if (ab_producer_publish_json(p, evs[i], strlen(evs[i]), &err) != AB_OK)
            fail_msg("publish %d: %s", i + 1, err.message);
    assert_int_equal(ab_producer_flush(p, 30000, &err), AB_OK);
    ab_producer_destroy(&p);
    assert_int_equal(
        gw_http(&G.g, "GET", "/threads/t-big/runs/r/events", NULL, NULL, out, sizeof out), 200);
    const char *blob = strstr(out, "\"blob\":\"");
    assert_non_null(blob);
    blob += 8;
    assert_int_equal(strspn(blob, "x"), BLOB);
    assert_non_null(strstr(blob, "\"seq\":3,")); /* and the run's end after it */
}

static uint64_t metric(const char *name)
{
    assert_int_equal(gw_http(&G.g, "GET", "/metrics", NULL, NULL, body, sizeof body), 200);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *m = strstr(body, key);
    assert_non_null(m);
    return strtoull(m + strlen(key), NULL, 10);
}

static void test_slow_client_cut_and_resumed(void **state)
{
    const char *extra[] = {"--sse-buffer", "65536", "--slow-ms", "300", NULL};
    start_all(state, extra);
    gw_sse_t s;
    /* A client that reads nothing, with a small receive buffer. */
    assert_int_equal(gw_sse_open(&s, &G.g, "GET", "/threads/t-slow/events", "", NULL, 4096), 0);
    const uint64_t n = 1200; /* 1200 events of 8 KiB: more than the socket buffers hold */
    publish_run("t-slow", "r", n, 8000);
    long deadline = ab__mono_ms() + 4 * IT_TIMEOUT;
    while (metric("agentbus_gateway_slow_clients_cut_total") == 0 && ab__mono_ms() < deadline)
        poll(NULL, 0, 50);
    assert_int_equal(metric("agentbus_gateway_slow_clients_cut_total"), 1);
    /* Read what arrived before the cut, then resume from the last whole event. */
    uint64_t last = 0, count = 0; /* this bus numbers one run's events without gaps */
    assert_int_equal(gw_sse_read_on(&s, &last, &count, UINT64_MAX), 0); /* the gateway closed it */
    gw_sse_close(&s);
    assert_true(count < n);
    /* Resume as a client does: from the last id, again after any further cut (a loaded
     * machine may starve this reader for --slow-ms too), until every event arrived. */
    for (int tries = 0; count < n && tries < 20; tries++)
        gw_sse_resume(&G.g, "/threads/t-slow/events", &last, &count, n);
    assert_int_equal(count, n);
}

static void test_gateway_restart_mid_stream(void **state)
{
    start_all(state, NULL);
    gw_sse_t s;
    gw_ev_t e;
    uint64_t got[64], n = 0;
    assert_int_equal(gw_sse_open(&s, &G.g, "GET", "/threads/t-gwr/events", "", NULL, 0), 0);
    assert_int_equal(gw_http(&G.g, "POST", "/agents/demo", "Accept: application/json\r\n",
                             input("t-gwr", "r", "{\"steps\":8,\"step_ms\":30}"), body,
                             sizeof body),
                     200);
    while (n < 3 && gw_sse_next(&s, &e, IT_TIMEOUT) == 1)
        got[n++] = e.id;
    assert_int_equal(n, 3);
    assert_int_equal(gw_stop(&G.g, true), 0); /* SIGKILL mid-run */
    gw_sse_close(&s);
    assert_int_equal(gw_start(&G.g, G.it->bp.cmd, NULL), 0);
    char hdr[64];
    snprintf(hdr, sizeof hdr, "Last-Event-ID: %llu\r\n", (unsigned long long)got[n - 1]);
    assert_int_equal(gw_sse_open(&s, &G.g, "GET", "/threads/t-gwr/events", hdr, NULL, 0), 0);
    while (n < 64 && gw_sse_next(&s, &e, IT_TIMEOUT) == 1) {
        got[n++] = e.id;
        if (strstr(e.data, "\"RUN_FINISHED\""))
            break;
    }
    gw_sse_close(&s);
    uint64_t want[64];
    size_t nw = export_ids("t-gwr", "r", want, 64);
    assert_int_equal(n, nw);
    assert_memory_equal(got, want, n * sizeof got[0]);
}

/* A resume body answering @p n interrupts "i00000", "i00001", ...: {"decisions": {...}} (each
 * 55 bytes of msgpack) or, @p raw, {"resume": [...]} of cancelled entries (37 bytes each). */
static char *many_answers(size_t n, bool raw)
{
    size_t cap = 32 + n * 64, len;
    char *s = malloc(cap);
    assert_non_null(s);
    len = (size_t)snprintf(s, cap, raw ? "{\"resume\":[" : "{\"decisions\":{");
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(s + len, cap - len,
                                raw ? "%s{\"interruptId\":\"i%05zu\",\"status\":\"cancelled\"}"
                                    : "%s\"i%05zu\":\"approve\"",
                                i ? "," : "", i);
    snprintf(s + len, cap - len, raw ? "]}" : "}}");
    return s;
}

/* POST resume of thread t-big with @p n answers; refused as @p st with @p code naming exactly
 * @p field (NULL: any) and, when @p limit, the detail limit. The answer may take a while: the
 * gateway parses and encodes up to 6 MB of JSON (2 s under TSan on an idle machine, more than
 * IT_TIMEOUT beside the rest of the suite), so it is waited for six times as long. */
static void resume_many(size_t n, bool raw, int st, const char *code, const char *field,
                        unsigned limit)
{
    char *in = many_answers(n, raw), want[96];
    int got = gw_http_within(&G.g, "POST", "/threads/t-big/runs/r/resume", NULL, in, body,
                             sizeof body, 6L * IT_TIMEOUT);
    free(in);
    snprintf(want, sizeof want, "%s\"", field ? field : "");
    refused(got, st, code, field ? want : NULL);
    snprintf(want, sizeof want, "\"limit\":%u", limit);
    if (limit && !strstr(body, want))
        fail_msg("want %s, got %s", want, body);
}

/* A resume_run request holds at most the broker's max_header_bytes (65536), whatever --max-body
 * is: more decisions are refused by the gateway naming body/decisions (body/resume) and the
 * limit, both when the answers alone and when the whole request is over it; fewer reach the
 * broker. A bad decision names its JSON pointer, the id escaped. */
static void test_resume_bounds(void **state)
{
    const char *extra[] = {"--max-body", "8388608", NULL};
    start_all(state, extra);
    resume_many(1100, false, 409, "conflict", NULL, 0); /* 60 KB: the broker's answer */
    resume_many(1191, false, 413, "too_large", "body/decisions", 65536); /* 65,508 + the ids */
    resume_many(3000, false, 413, "too_large", "body/decisions", 65536);
    /* 6 MB of JSON, 17.6 MB of msgpack: once refused with no field */
    resume_many(320000, false, 413, "too_large", "body/decisions", 65536);
    resume_many(1500, true, 409, "conflict", NULL, 0); /* 55.5 KB */
    resume_many(2000, true, 413, "too_large", "body/resume", 65536);
    /* a RunAgentInput within --max-body whose start_run is over the header limit: once 413
     * with no field, from the broker; one of half the size is started */
    static char in[40000];
    int st = gw_http(&G.g, "POST", "/agents/demo", "Accept: application/json\r\n",
                     float_input(in, 20000), body, sizeof body); /* 45 KB of msgpack */
    if (st != 200 || !strstr(body, "\"thread\":\"t-num\""))
        fail_msg("want the run accepted, got %d: %s", st, body);
    st = gw_http(&G.g, "POST", "/agents/demo", "Accept: application/json\r\n",
                 float_input(in, sizeof in), body, sizeof body); /* 90 KB of msgpack */
    refused(st, 413, "too_large", "body\"");
    assert_non_null(strstr(body, "\"limit\":65536"));
    const char *bad[][2] = {
        {"{\"decisions\":{\"approve-1\":\"maybe\"}}", "body/decisions/approve-1\""},
        {"{\"decisions\":{\"ok\":\"cancel\",\"a/b~c\":7}}", "body/decisions/a~1b~0c\""},
        {"{\"decisions\":{\"i-0123456789012345678901234567890123456789012345678\":\"no\"}}",
         "body/decisions\""}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        refused(gw_http(&G.g, "POST", "/threads/t-big/runs/r/resume", NULL, bad[i][0], body,
                        sizeof body),
                400, "invalid_argument", bad[i][1]);
    assert_non_null(strstr(body, "interrupt i-0123456789")); /* the message names it */
}

static void test_json_endpoints(void **state)
{
    start_all(state, NULL);
    uint64_t ids[64];
    char types[64][32];
    /* An interrupting run, approved per interrupt id: the worker runs the continuation. */
    size_t n = run_stream("t-int", "r-1", "{\"steps\":1,\"interrupt\":true}", ids, types);
    assert_string_equal(types[n - 1], "RUN_FINISHED");
    assert_int_equal(gw_http(&G.g, "GET", "/threads/t-int/runs", NULL, NULL, body, sizeof body),
                     200);
    assert_non_null(strstr(body, "\"outcome\":\"interrupt\""));
    refused(gw_http(&G.g, "POST", "/threads/t-int/runs/r-1/resume", NULL,
                    "{\"decisions\":{\"approve-1\":\"maybe\"}}", body, sizeof body),
            400, "invalid_argument", "body/decisions");
    refused(gw_http(&G.g, "POST", "/threads/t-int/runs/r-1/resume", NULL,
                    "{\"decisions\":{\"other\":\"approve\"}}", body, sizeof body),
            409, "conflict", NULL);
    assert_int_equal(gw_http(&G.g, "POST", "/threads/t-int/runs/r-1/resume", NULL,
                             "{\"decisions\":{\"approve-1\":\"approve\"},\"newRunId\":\"r-2\"}",
                             body, sizeof body),
                     200);
    assert_non_null(strstr(body, "\"run\":\"r-2\""));
    gw_sse_t s;
    gw_ev_t e;
    assert_int_equal(gw_sse_open(&s, &G.g, "GET", "/threads/t-int/events", "", NULL, 0), 0);
    bool resumed = false;
    while (!resumed && gw_sse_next(&s, &e, IT_TIMEOUT) == 1)
        resumed = strstr(e.data, "\"runId\":\"r-2\"") && strstr(e.data, "RUN_FINISHED");
    gw_sse_close(&s);
    assert_true(resumed);
    /* A long run cancelled: delivered, and it ends cancelled. */
    assert_int_equal(gw_http(&G.g, "POST", "/agents/demo", "Accept: application/json\r\n",
                             input("t-can", "r", "{\"steps\":500,\"step_ms\":20}"), body,
                             sizeof body),
                     200);
    assert_int_equal(gw_sse_open(&s, &G.g, "GET", "/threads/t-can/events", "", NULL, 0), 0);
    assert_int_equal(gw_sse_next(&s, &e, IT_TIMEOUT), 1); /* RUN_STARTED: it is running */
    assert_int_equal(gw_http(&G.g, "POST", "/threads/t-can/runs/r/cancel", NULL,
                             "{\"reason\":\"test\"}", body, sizeof body),
                     200);
    assert_non_null(strstr(body, "\"outcome\":\"delivered\""));
    bool cancelled = false;
    while (!cancelled && gw_sse_next(&s, &e, IT_TIMEOUT) == 1)
        cancelled = strstr(e.data, "\"cancelled\"") != NULL;
    gw_sse_close(&s);
    assert_true(cancelled);
    /* A run queued for an agent nobody serves, cancelled before it starts: its stream ends
     * with a typed error instead of waiting for ever. */
    assert_int_equal(gw_sse_open(&s, &G.g, "POST", "/agents/ghost", "Accept: text/event-stream\r\n",
                                 input("t-ghost", "r", NULL), 0),
                     0);
    assert_int_equal(gw_sse_status(&s, IT_TIMEOUT), 200); /* accepted: now it can be cancelled */
    assert_int_equal(
        gw_http(&G.g, "POST", "/threads/t-ghost/runs/r/cancel", NULL, NULL, body, sizeof body),
        200);
    assert_non_null(strstr(body, "\"outcome\":\"dequeued\""));
    assert_int_equal(gw_sse_next(&s, &e, 3 * IT_TIMEOUT), 1);
    assert_string_equal(e.event, "error");
    assert_non_null(strstr(e.data, "\"code\":\"request_aborted\""));
    assert_int_equal(gw_sse_next(&s, &e, IT_TIMEOUT), 0); /* and it ends */
    gw_sse_close(&s);
    /* Actions, workers, snapshot, metrics. */
    assert_int_equal(gw_http(&G.g, "POST", "/agents/demo/actions/echo?thread=t-int", NULL,
                             "{\"x\":[1,2]}", body, sizeof body),
                     200);
    assert_non_null(strstr(body, "\"result\":{\"x\":[1,2]}"));
    /* its thread is percent-decoded, as the path's ids are: %2D is '-', %01 a control byte */
    assert_int_equal(gw_http(&G.g, "POST", "/agents/demo/actions/echo?thread=t%2Dint", NULL,
                             "{\"x\":1}", body, sizeof body),
                     200);
    refused(gw_http(&G.g, "POST", "/agents/demo/actions/echo?thread=t%01", NULL, "{\"x\":1}", body,
                    sizeof body),
            400, "invalid_argument", "thread");
    assert_int_equal(gw_http(&G.g, "GET", "/workers", NULL, NULL, body, sizeof body), 200);
    assert_non_null(strstr(body, "\"name\":\"demo\""));
    assert_int_equal(gw_http(&G.g, "GET", "/threads/t-int/snapshot", NULL, NULL, body, sizeof body),
                     200);
    assert_non_null(strstr(body, "\"threadId\":\"t-int\""));
    assert_true(metric("agentbus_gateway_events_sent_total") > 0);
    assert_true(metric("agentbus_gateway_runs_started_total") >= 2);
    /* SIGTERM: every stream closed, exit 0 (under ASan: nothing leaked either). */
    assert_int_equal(gw_sse_open(&s, &G.g, "GET", "/threads/t-int/events", "", NULL, 0), 0);
    assert_int_equal(gw_sse_next(&s, &e, IT_TIMEOUT), 1);
    assert_int_equal(gw_stop(&G.g, false), 0);
    int rc;
    while ((rc = gw_sse_next(&s, &e, IT_TIMEOUT)) == 1) /* what was sent before, then the end */
        ;
    assert_int_equal(rc, 0);
    gw_sse_close(&s);
}

/* Raw bytes of an answer or stream until @p needle arrived (bounded); true when it did. */
static bool raw_until(int fd, const char *needle, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (long end = ab__mono_ms() + IT_TIMEOUT; ab__mono_ms() < end && used + 1 < cap;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        ssize_t n = read(fd, buf + used, cap - 1 - used);
        if (n <= 0)
            break;
        used += (size_t)n;
        buf[used] = '\0';
        if (strstr(buf, needle))
            return true;
    }
    return false;
}

static void test_heartbeat_cors_and_stream_limit(void **state)
{
    const char *extra[] = {"--heartbeat", "200", "--max-streams", "2", "--cors", "*", NULL};
    start_all(state, extra);
    /* An idle stream gets heartbeat comments. */
    int a = gw_send(&G.g, "GET", "/threads/t-idle/events", "", NULL, 0, 0);
    assert_true(a >= 0);
    assert_true(raw_until(a, "\n\n: hb\n\n", body, sizeof body));
    assert_non_null(strstr(body, "Content-Type: text/event-stream"));
    assert_non_null(strstr(body, "Access-Control-Allow-Origin: *"));
    /* A third stream is refused while two are open; after one leaves it is not. */
    int b = gw_send(&G.g, "GET", "/threads/t-idle/events", "", NULL, 0, 0);
    assert_true(raw_until(b, ": agentbus", body, sizeof body));
    refused(gw_http(&G.g, "GET", "/threads/t-idle/events", NULL, NULL, body, sizeof body), 429,
            "overloaded", "streams");
    assert_non_null(strstr(body, "\"limit\":2"));
    close(b);
    long deadline = ab__mono_ms() + IT_TIMEOUT; /* noticed at its next heartbeat */
    while (metric("agentbus_gateway_streams_open") != 1 && ab__mono_ms() < deadline)
        poll(NULL, 0, 20);
    assert_int_equal(metric("agentbus_gateway_streams_open"), 1);
    int c = gw_send(&G.g, "GET", "/threads/t-idle/events", "", NULL, 0, 0);
    assert_true(raw_until(c, ": agentbus", body, sizeof body));
    close(c);
    close(a);
    /* A CORS preflight: 204 with the allowed headers, no token or body needed. */
    int p = gw_send(&G.g, "OPTIONS", "/agents/demo", "Origin: http://example.test\r\n", NULL, 0, 0);
    assert_true(raw_until(p, "\r\n\r\n", body, sizeof body));
    close(p);
    assert_non_null(strstr(body, " 204 "));
    assert_non_null(strstr(body, "Access-Control-Allow-Headers: Authorization, Content-Type, "
                                 "Last-Event-ID"));
    assert_non_null(strstr(body, "Access-Control-Allow-Methods: GET, POST, OPTIONS"));
}

/* A run of thread @p t written by a producer (not dispatched); @return its last position. */
static uint64_t produced_run(const char *t, bool finish)
{
    ab_conn_t *c = it_connect(&G.it->bp);
    ab_claimed_t cl;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_claim(c, t, "r", G.it->doc, &cl, IT_TIMEOUT, &err), AB_OK);
    ab_buf_t ev = AB_BUF_INIT;
    uint64_t pos = 0;
    for (uint64_t seq = 1; seq <= (finish ? 4u : 1u); seq++) {
        ab_buf_reset(&ev);
        it_event(&ev, t, "r", seq, finish ? 4 : 0, cl.epoch);
        pos = it_publish1(c, G.it->doc, &ev, NULL).pos;
    }
    ab_buf_free(&ev);
    ab_conn_destroy(&c);
    return pos;
}

/* The thread ids of a GET /threads answer, in order, as "a,b,". */
static const char *listed(char *out, size_t cap)
{
    out[0] = '\0';
    for (const char *p = strstr(body, "{\"thread\":\""); p; p = strstr(p + 1, "{\"thread\":\"")) {
        const char *id = p + 11, *end = strchr(id, '"');
        size_t used = strlen(out);
        snprintf(out + used, cap - used, "%.*s,", (int)(end - id), id);
    }
    return out;
}

/* GET /threads: every thread with events (produced ones too), in byte order, paged by
 * ?after= and ?limit=, filtered by ?prefix= (percent-encoded, multibyte), and the refusals. */
static void test_threads_listing(void **state)
{
    start_all(state, NULL);
    char ids[512];
    assert_int_equal(gw_http(&G.g, "GET", "/threads", NULL, NULL, body, sizeof body), 200);
    assert_string_equal(body, "{\"threads\":[]}\n");
    produced_run("t-2", true);
    produced_run("\xc3\xa9", false);
    uint64_t pos = produced_run("u/1", false);
    produced_run("t-1", true);
    assert_int_equal(gw_http(&G.g, "GET", "/threads", NULL, NULL, body, sizeof body), 200);
    assert_string_equal(listed(ids, sizeof ids), "t-1,t-2,u/1,\xc3\xa9,");
    assert_null(strstr(body, "\"next\""));
    assert_int_equal(gw_http(&G.g, "GET", "/threads?limit=2", NULL, NULL, body, sizeof body), 200);
    assert_string_equal(listed(ids, sizeof ids), "t-1,t-2,");
    assert_non_null(strstr(body, "],\"next\":\"t-2\"}"));
    assert_non_null(strstr(body, "{\"thread\":\"t-1\",\"runs\":1,\"active\":false,"));
    assert_int_equal(
        gw_http(&G.g, "GET", "/threads?after=t-2&limit=2", NULL, NULL, body, sizeof body), 200);
    assert_string_equal(listed(ids, sizeof ids), "u/1,\xc3\xa9,");
    assert_null(strstr(body, "\"next\""));
    /* a query value is percent-decoded, a number as an id: "%32" is "2" */
    assert_int_equal(
        gw_http(&G.g, "GET", "/threads?after=t%2D2&limit=%32", NULL, NULL, body, sizeof body), 200);
    assert_string_equal(listed(ids, sizeof ids), "u/1,\xc3\xa9,");
    char want[160];
    snprintf(want, sizeof want,
             "{\"threads\":[{\"thread\":\"u/1\",\"runs\":1,\"active\":true,\"last_run\":\"r\","
             "\"last_pos\":%llu}]}\n",
             (unsigned long long)pos);
    assert_int_equal(gw_http(&G.g, "GET", "/threads?prefix=u%2F", NULL, NULL, body, sizeof body),
                     200);
    assert_string_equal(body, want);
    assert_int_equal(
        gw_http(&G.g, "GET", "/threads?prefix=%C3%A9&after=", NULL, NULL, body, sizeof body), 200);
    assert_string_equal(listed(ids, sizeof ids), "\xc3\xa9,");
    assert_int_equal(gw_http(&G.g, "GET", "/threads?prefix=zzz", NULL, NULL, body, sizeof body),
                     200);
    assert_string_equal(body, "{\"threads\":[]}\n");
    const char *bad[][2] = {{"/threads?limit=0", "limit"},     {"/threads?limit=1001", "limit"},
                            {"/threads?limit=abc", "limit"},   {"/threads?limit=", "limit"},
                            {"/threads?after=a%01", "after"},  {"/threads?prefix=a%00b", "prefix"},
                            {"/threads?prefix=%FF", "prefix"}, {"/threads?after=%ZZ", "after"},
                            {"/threads?limit=%3", "limit"},    {"/threads?limit=%30", "limit"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        refused(gw_http(&G.g, "GET", bad[i][0], NULL, NULL, body, sizeof body), 400,
                "invalid_argument", bad[i][1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_health_and_routes, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_agent_run_streams_to_its_end, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_at_every_point, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_clients_one_thread, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_requests, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_id_key_limits, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_limit_and_health_refusals, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_slow_client_cut_and_resumed, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_gateway_restart_mid_stream, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_endpoints, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_bounds, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_export_of_a_large_event, large_setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_listing, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_heartbeat_cors_and_stream_limit, it_setup, teardown),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

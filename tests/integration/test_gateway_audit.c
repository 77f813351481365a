/*
 * test_gateway_audit.c - `agentbus gateway` against its own contract
 * (docs/GATEWAY.md "Errors", "Limits", "Event ids and resuming"), as a
 * careless or hostile HTTP client tries it, with a real broker on loopback:
 *  - an error answer is JSON of valid UTF-8 whatever bytes the request held
 *    (a 404 quotes its path: raw bytes that are not UTF-8 became invalid JSON);
 *  - a client cut off for not reading gives its stream slot back at once (it
 *    kept it, its connection and its thread until the idle timeout, 90 s,
 *    and every other stream was 429 meanwhile); it still resumes without loss;
 *  - POST /agents answered 429 (--max-streams) has started nothing (the run
 *    was started first and then refused);
 *  - cancel and resume want a JSON object: an array, a string or null is
 *    400 field "body" (a cancel with any non-object body cancelled the run);
 *  - a bare "?after" or "?limit" (no '=') is refused as an empty one (it was
 *    read as absent: the whole thread from its start, the default page);
 *  - --max-conns: more connections are refused, served again once one leaves;
 *  - a thread stream resumed again and again while three runs are written:
 *    the ids read are exactly the thread's stored positions, once each;
 *  - two thread ids whose 64-bit FNV-1a hashes are equal make the same
 *    idempotency key for one runId: the second thread's POST /agents is 409
 *    conflict, neither streamed nor answered with the first thread's run (it
 *    got the first thread's request, and its stream would have followed
 *    that run: a wait forever, or another thread's events);
 *  - run exports held at once are bounded by --export-budget: an export
 *    while another is held (its client reads slowly) is 429 overloaded,
 *    detail limit, and served once the first is sent; a bad value is exit 2.
 */
#include "testutil.h"

#include "cli_run.h"
#include "gw_proc.h"

#include "ab_common.h"

#include "agentbus/producer.h"

static gwp_t G;
static it_t *IT;
static char body[65536];

static int teardown(void **state)
{
    if (G.pid > 0)
        gw_stop(&G, true);
    return it_teardown(state);
}

static void start_gw(void **state, const char *const *extra)
{
    IT = *state;
    IT_REQUIRE_BROKER(IT);
    memset(&G, 0, sizeof G);
    assert_int_equal(gw_start(&G, IT->bp.cmd, extra), 0);
}

static uint64_t metric(const char *name)
{
    assert_int_equal(gw_http(&G, "GET", "/metrics", NULL, NULL, body, sizeof body), 200);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *m = strstr(body, key);
    assert_non_null(m);
    return strtoull(m + strlen(key), NULL, 10);
}

/* Poll /metrics until @p name is @p want (bounded); true when it came. */
static bool metric_becomes(const char *name, uint64_t want, long ms)
{
    long deadline = ab__mono_ms() + ms;
    while (metric(name) != want && ab__mono_ms() < deadline)
        poll(NULL, 0, 20);
    return metric(name) == want;
}

/* Status @p st and an error body of @p code naming exactly @p field. */
static void refused(int got, int st, const char *code, const char *field)
{
    char want[128];
    if (got != st)
        fail_msg("want status %d, got %d: %s", st, got, body);
    snprintf(want, sizeof want, "\"code\":\"%s\"", code);
    if (!strstr(body, want))
        fail_msg("want %s, got %s", want, body);
    snprintf(want, sizeof want, "\"field\":\"%s\"", field);
    if (!strstr(body, want))
        fail_msg("want field %s, got %s", field, body);
}

/* A RunAgentInput of thread @p t, run @p r. */
static const char *input(const char *t, const char *r)
{
    static char in[512];
    snprintf(in, sizeof in,
             "{\"threadId\":\"%s\",\"runId\":\"%s\",\"messages\":[],\"tools\":[],\"context\":[],"
             "\"state\":{},\"forwardedProps\":{}}",
             t, r);
    return in;
}

/* ---- error answers are JSON ------------------------------------------------------ */

static void test_error_answers_are_utf8_json(void **state)
{
    start_gw(state, NULL);
    /* raw bytes in the path: not UTF-8, a sequence cut short, a control byte */
    const char *paths[] = {"/\xff\xfe", "/nope\xe2\x82", "/threads/t/\xc3", "/x\x1b[1m\xc0\xaf"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        int st = gw_http(&G, "GET", paths[i], NULL, NULL, body, sizeof body);
        refused(st, 404, "not_found", "path");
        size_t n = strlen(body);
        if (!ab_utf8_valid(body, n))
            fail_msg("answer %zu is not UTF-8: %s", i, body);
        ab_buf_t mp = AB_BUF_INIT;
        ab_error_t err = AB_ERROR_INIT;
        if (ab_json_to_msgpack(body, n, 16, 1 << 16, AB_INVALID_ARGUMENT, &mp, &err) != AB_OK)
            fail_msg("answer %zu is not JSON (%s): %s", i, err.message, body);
        ab_buf_free(&mp);
    }
    assert_non_null(strstr(body, "/x\\u001b[1m\xef\xbf\xbd\xef\xbf\xbd")); /* each byte U+FFFD */
}

/* ---- a client cut off gives its stream back ------------------------------------------ */

/* Publish @p n padded events of run (t, r) with a producer of the test's own. */
static void publish_run(const char *t, const char *r, uint64_t n, size_t pad)
{
    gw_publish_run(IT->bp.cmd, t, r, n, pad);
}

/* --heartbeat 1000 makes the idle timeout 34 s (4 heartbeats + 30 s): a cut stream that waited
 * for it held its slot far longer than the bounded waits below, while a client that left is
 * noticed within a second. */
static void test_cut_client_gives_back_its_stream(void **state)
{
    const char *extra[] = {"--max-streams", "1",           "--sse-buffer", "65536", "--slow-ms",
                           "300",           "--heartbeat", "1000",         NULL};
    start_gw(state, extra);
    gw_sse_t s, other;
    assert_int_equal(gw_sse_open(&s, &G, "GET", "/threads/t-cut/events", "", NULL, 4096), 0);
    assert_int_equal(gw_sse_status(&s, IT_TIMEOUT), 200);
    const uint64_t n = 1200; /* 1200 events of 8 KiB: more than the socket buffers hold */
    publish_run("t-cut", "r", n, 8000);
    assert_true(metric_becomes("agentbus_gateway_slow_clients_cut_total", 1, 4 * IT_TIMEOUT));
    /* the client has read nothing since its headers: its slot is free all the same */
    if (!metric_becomes("agentbus_gateway_streams_open", 0, IT_TIMEOUT))
        fail_msg("a stream cut for a full queue still holds its slot");
    assert_int_equal(gw_sse_open(&other, &G, "GET", "/threads/t-other/events", "", NULL, 0), 0);
    assert_int_equal(gw_sse_status(&other, IT_TIMEOUT), 200);
    gw_sse_close(&other);
    /* what reached the client before the cut, then the end; then the rest by resuming */
    uint64_t last = 0, count = 0; /* the only events of this bus: positions 1, 2, ... */
    assert_int_equal(gw_sse_read_on(&s, &last, &count, UINT64_MAX), 0);
    gw_sse_close(&s);
    assert_true(count < n);
    for (int tries = 0; count < n && tries < 20; tries++) {
        /* the stream before it may still hold the only slot until its client is noticed gone */
        assert_true(metric_becomes("agentbus_gateway_streams_open", 0, IT_TIMEOUT));
        gw_sse_resume(&G, "/threads/t-cut/events", &last, &count, n);
    }
    assert_int_equal(count, n);
}

/* ---- 429 starts nothing -------------------------------------------------------- */

static void test_refused_stream_starts_no_run(void **state)
{
    const char *extra[] = {"--max-streams", "1", "--heartbeat", "200", NULL};
    start_gw(state, extra);
    gw_sse_t s;
    assert_int_equal(gw_sse_open(&s, &G, "GET", "/threads/t-busy/events", "", NULL, 0), 0);
    assert_int_equal(gw_sse_status(&s, IT_TIMEOUT), 200);
    /* no worker serves "ghost": an accepted run stays queued, so the broker remembers it */
    refused(gw_http(&G, "POST", "/agents/ghost", "Accept: text/event-stream\r\n",
                    input("t-429", "r"), body, sizeof body),
            429, "overloaded", "streams");
    gw_sse_close(&s);
    assert_true(metric_becomes("agentbus_gateway_streams_open", 0, IT_TIMEOUT));
    assert_int_equal(metric("agentbus_gateway_runs_started_total"), 0);
    assert_int_equal(gw_http(&G, "POST", "/agents/ghost", "Accept: application/json\r\n",
                             input("t-429", "r"), body, sizeof body),
                     200);
    if (!strstr(body, "\"existing\":false"))
        fail_msg("the POST refused 429 had started the run: %s", body);
}

/* ---- bodies of the wrong shape --------------------------------------------------- */

static void test_cancel_and_resume_want_an_object(void **state)
{
    start_gw(state, NULL);
    assert_int_equal(gw_http(&G, "POST", "/agents/ghost", "Accept: application/json\r\n",
                             input("t-shape", "r"), body, sizeof body),
                     200);
    assert_non_null(strstr(body, "\"state\":\"queued\""));
    const char *bad[] = {"[1]", "\"stop\"", "null", "5", "[{\"reason\":\"x\"}]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        refused(
            gw_http(&G, "POST", "/threads/t-shape/runs/r/cancel", NULL, bad[i], body, sizeof body),
            400, "invalid_argument", "body");
        refused(
            gw_http(&G, "POST", "/threads/t-shape/runs/r/resume", NULL, bad[i], body, sizeof body),
            400, "invalid_argument", "body");
    }
    /* none of them cancelled the run: it is still queued, and a cancel (its body optional)
     * takes it out */
    assert_int_equal(
        gw_http(&G, "POST", "/threads/t-shape/runs/r/cancel", NULL, NULL, body, sizeof body), 200);
    assert_non_null(strstr(body, "\"outcome\":\"dequeued\""));
}

/* ---- query parameters without a value ----------------------------------------------- */

static void test_bare_query_parameters(void **state)
{
    start_gw(state, NULL);
    refused(gw_http(&G, "GET", "/threads/t/events?after", NULL, NULL, body, sizeof body), 400,
            "invalid_argument", "after");
    refused(gw_http(&G, "GET", "/threads/t/events?x=1&after", NULL, NULL, body, sizeof body), 400,
            "invalid_argument", "after");
    refused(gw_http(&G, "GET", "/threads?limit", NULL, NULL, body, sizeof body), 400,
            "invalid_argument", "limit");
    /* empty `after` and `prefix` of GET /threads are documented as absent: bare ones too */
    assert_int_equal(gw_http(&G, "GET", "/threads?after&prefix", NULL, NULL, body, sizeof body),
                     200);
    assert_string_equal(body, "{\"threads\":[]}\n");
}

/* ---- --max-conns ------------------------------------------------------------ */

static void test_connection_limit(void **state)
{
    const char *extra[] = {"--max-conns", "4", "--heartbeat", "200", NULL};
    start_gw(state, extra);
    gw_sse_t s[4];
    for (int i = 0; i < 4; i++) { /* four connections the gateway holds (it answered each) */
        assert_int_equal(gw_sse_open(&s[i], &G, "GET", "/threads/t-conn/events", "", NULL, 0), 0);
        assert_int_equal(gw_sse_status(&s[i], IT_TIMEOUT), 200);
    }
    assert_int_equal(gw_http(&G, "GET", "/healthz", NULL, NULL, body, sizeof body), -1);
    gw_sse_close(&s[0]); /* noticed at its next heartbeat */
    long deadline = ab__mono_ms() + IT_TIMEOUT;
    int st = -1;
    while ((st = gw_http(&G, "GET", "/healthz", NULL, NULL, body, sizeof body)) != 200 &&
           ab__mono_ms() < deadline)
        poll(NULL, 0, 20);
    assert_int_equal(st, 200);
    for (int i = 1; i < 4; i++)
        gw_sse_close(&s[i]);
}

/* ---- resuming across the replay/live seam ------------------------------------------ */

#define SEAM_RUNS 3
#define SEAM_N    120 /* events per run */

static ab_status_t collect_pos(void *ud, const ab_stamp_t *st, const uint8_t *ev, size_t len,
                               ab_error_t *err)
{
    (void)ev;
    (void)len;
    (void)err;
    uint64_t *v = ud;
    if (v[0] < SEAM_RUNS * SEAM_N)
        v[1 + v[0]] = st->pos;
    v[0]++;
    return AB_OK;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The commit positions the broker stored for thread @p t, ascending, into v[1..v[0]]. */
static void stored_positions(const char *t, uint64_t *v)
{
    ab_conn_t *c = it_connect(&IT->bp);
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay = (ab_replay_t){.scope = AB_REPLAY_THREAD, .thread = {t, strlen(t)}};
    ab_error_t err = AB_ERROR_INIT;
    v[0] = 0;
    if (ab_conn_replay(c, &q, collect_pos, v, IT->doc, NULL, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("replay %s: %s", t, err.message);
    ab_conn_destroy(&c);
    assert_true(v[0] <= SEAM_RUNS * SEAM_N);
    qsort(v + 1, (size_t)v[0], sizeof v[1], cmp_u64);
}

static const char *const seam_runs[SEAM_RUNS] = {"a", "b", "c"};

/* Event @p seq of run @p r of thread @p t (a message of its own, "m-RUN"). */
static void seam_body(char *buf, size_t size, const char *t, const char *r, uint64_t seq)
{
    char msg[16];
    snprintf(msg, sizeof msg, "m-%s", r);
    it_body_msg(buf, size, t, r, msg, seq, SEAM_N, 0);
}

typedef struct seam {
    ab_producer_t *p[SEAM_RUNS];
    uint64_t next[SEAM_RUNS]; /* the next seq of each run */
    uint64_t got[SEAM_RUNS * SEAM_N];
    size_t ngot;
} seam_t;

/* Publish @p k more events, the runs in turns (each flushed: durable before the next); @return
 * how many events are published in all. */
static size_t seam_publish(seam_t *m, const char *t, size_t k)
{
    char ev[256];
    ab_error_t err = AB_ERROR_INIT;
    for (size_t i = 0; k > 0 && i < SEAM_RUNS * SEAM_N; i++) {
        int r = (int)(i % SEAM_RUNS);
        if (m->next[r] > SEAM_N)
            continue;
        seam_body(ev, sizeof ev, t, seam_runs[r], m->next[r]);
        if (ab_producer_publish_json(m->p[r], ev, strlen(ev), &err) != AB_OK ||
            ab_producer_flush(m->p[r], IT_TIMEOUT, &err) != AB_OK)
            fail_msg("publish %s/%llu: %s", seam_runs[r], (unsigned long long)m->next[r],
                     err.message);
        m->next[r]++;
        k--;
    }
    size_t all = 0;
    for (int r = 0; r < SEAM_RUNS; r++)
        all += (size_t)m->next[r] - 1;
    return all;
}

/* Open the thread stream after the last id read, publish @p burst events meanwhile, read @p k
 * events (each above the one before; at most what is published), leave. */
static void seam_round(seam_t *m, const char *t, size_t burst, size_t k)
{
    char path[64], hdr[64] = "";
    gw_sse_t s;
    gw_ev_t e;
    snprintf(path, sizeof path, "/threads/%s/events", t);
    if (m->ngot > 0)
        snprintf(hdr, sizeof hdr, "Last-Event-ID: %llu\r\n",
                 (unsigned long long)m->got[m->ngot - 1]);
    assert_int_equal(gw_sse_open(&s, &G, "GET", path, hdr, NULL, 0), 0);
    size_t all = seam_publish(m, t, burst);
    if (k > all - m->ngot)
        k = all - m->ngot;
    for (size_t i = 0; i < k; i++) {
        if (gw_sse_next(&s, &e, IT_TIMEOUT) != 1)
            fail_msg("the stream after %zu events ended or stalled (HTTP %d)", m->ngot, s.status);
        if (m->ngot > 0 && e.id <= m->got[m->ngot - 1])
            fail_msg("id %llu after %llu: twice or out of order", (unsigned long long)e.id,
                     (unsigned long long)m->got[m->ngot - 1]);
        m->got[m->ngot++] = e.id;
    }
    gw_sse_close(&s);
}

static void test_resume_across_the_seam(void **state)
{
    const char *extra[] = {"--heartbeat", "200", NULL};
    start_gw(state, extra);
    static seam_t m;
    memset(&m, 0, sizeof m);
    ab_producer_opts_t po = {.timeout_ms = IT_TIMEOUT};
    ab_error_t err = AB_ERROR_INIT;
    for (int r = 0; r < SEAM_RUNS; r++) {
        assert_int_equal(ab_producer_new(&m.p[r], IT->bp.cmd, &po, &err), AB_OK);
        assert_int_equal(ab_producer_claim(m.p[r], "t-seam", seam_runs[r], NULL, &err), AB_OK);
        m.next[r] = 1;
    }
    /* a varying pattern: bursts of 0..12 published while 1..19 are read, so a stream opens
     * behind the head (its replay) while live events arrive, and sometimes at the head */
    for (unsigned i = 0; m.ngot < SEAM_RUNS * SEAM_N; i++) {
        size_t burst = (i * 7) % 13, k = 1 + (i * 11) % 19;
        size_t published = 0;
        for (int r = 0; r < SEAM_RUNS; r++)
            published += (size_t)m.next[r] - 1;
        if (published == m.ngot && burst == 0)
            burst = 1; /* never wait for an event nobody writes */
        seam_round(&m, "t-seam", burst, k);
    }
    for (int r = 0; r < SEAM_RUNS; r++)
        ab_producer_destroy(&m.p[r]);
    static uint64_t stored[1 + SEAM_RUNS * SEAM_N];
    stored_positions("t-seam", stored);
    assert_int_equal(stored[0], SEAM_RUNS * SEAM_N);
    assert_int_equal(m.ngot, SEAM_RUNS * SEAM_N);
    for (size_t i = 0; i < m.ngot; i++)
        if (m.got[i] != stored[1 + i])
            fail_msg("event %zu of the thread: read %llu, stored %llu", i,
                     (unsigned long long)m.got[i], (unsigned long long)stored[1 + i]);
}

/* ---- idempotency keys of colliding threads --------------------------------------- */

/* Two thread ids of equal 64-bit FNV-1a hash (0x284e151619bc118a), found by a Pollard rho search
 * over ids "tc-" + 11 characters (about 4.6e9 hashes): "gw-HASH-RUN" is one key for both. */
#define COLLIDE_A "tc-J3AJ1rkVLGJ"
#define COLLIDE_B "tc-80Yshk3M5qF"

static void test_colliding_threads_are_refused(void **state)
{
    start_gw(state, NULL);
    assert_true(ab__fnv64(COLLIDE_A, strlen(COLLIDE_A)) == ab__fnv64(COLLIDE_B, strlen(COLLIDE_B)));
    /* no worker serves "ghost": the accepted run stays queued */
    assert_int_equal(gw_http(&G, "POST", "/agents/ghost", "Accept: application/json\r\n",
                             input(COLLIDE_A, "r1"), body, sizeof body),
                     200);
    assert_non_null(strstr(body, "\"thread\":\"" COLLIDE_A "\",\"run\":\"r1\""));
    refused(gw_http(&G, "POST", "/agents/ghost", "Accept: application/json\r\n",
                    input(COLLIDE_B, "r1"), body, sizeof body),
            409, "conflict", "body/runId");
    if (strstr(body, COLLIDE_A) != NULL)
        fail_msg("the refusal names the other thread: %s", body);
    /* as a stream: refused before any event, its stream slot given back */
    refused(gw_http(&G, "POST", "/agents/ghost", "Accept: text/event-stream\r\n",
                    input(COLLIDE_B, "r1"), body, sizeof body),
            409, "conflict", "body/runId");
    assert_true(metric_becomes("agentbus_gateway_streams_open", 0, IT_TIMEOUT));
    assert_int_equal(metric("agentbus_gateway_runs_started_total"), 1);
    /* another runId is another key */
    assert_int_equal(gw_http(&G, "POST", "/agents/ghost", "Accept: application/json\r\n",
                             input(COLLIDE_B, "r2"), body, sizeof body),
                     200);
    assert_non_null(strstr(body, "\"thread\":\"" COLLIDE_B "\",\"run\":\"r2\""));
    assert_non_null(strstr(body, "\"existing\":false"));
}

/* Run "r1" of thread @p t, written by a producer, ends interrupted (interrupt "ok-1"). */
static void interrupted_run(const char *t)
{
    ab_producer_t *p = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_producer_opts_t po = {.timeout_ms = IT_TIMEOUT};
    char ev[2][256];
    snprintf(ev[0], sizeof ev[0],
             "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"r1\","
             "\"protocolVersion\":\"1.0\"}",
             t);
    snprintf(
        ev[1], sizeof ev[1],
        "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"r1\",\"outcome\":"
        "{\"type\":\"interrupt\",\"interrupts\":[{\"id\":\"ok-1\",\"reason\":\"confirmation\"}]}}",
        t);
    assert_int_equal(ab_producer_new(&p, IT->bp.cmd, &po, &err), AB_OK);
    assert_int_equal(ab_producer_claim(p, t, "r1", NULL, &err), AB_OK);
    for (int i = 0; i < 2; i++)
        if (ab_producer_publish_json(p, ev[i], strlen(ev[i]), &err) != AB_OK)
            fail_msg("publish %s: %s (%s)", ev[i], err.message, err.field);
    assert_int_equal(ab_producer_flush(p, IT_TIMEOUT, &err), AB_OK);
    ab_producer_destroy(&p);
}

/* Resume's key ("gwr-HASH-RUN") collides the same way: the second thread's resume is 409. */
static void test_colliding_threads_resume_is_refused(void **state)
{
    start_gw(state, NULL);
    interrupted_run(COLLIDE_A);
    interrupted_run(COLLIDE_B);
    const char *answer = "{\"agent\":\"ghost\",\"decisions\":{\"ok-1\":\"approve\"}}";
    assert_int_equal(gw_http(&G, "POST", "/threads/" COLLIDE_A "/runs/r1/resume", NULL, answer,
                             body, sizeof body),
                     200);
    assert_non_null(strstr(body, "\"thread\":\"" COLLIDE_A "\""));
    refused(gw_http(&G, "POST", "/threads/" COLLIDE_B "/runs/r1/resume", NULL, answer, body,
                    sizeof body),
            409, "conflict", "path/thread");
    if (strstr(body, COLLIDE_A) != NULL)
        fail_msg("the refusal names the other thread: %s", body);
}

/* ---- the export budget ---------------------------------------------------------- */

#define EXP_EVENTS 40
#define EXP_DELTA  (256 << 10)
#define EXP_BUDGET "20971520" /* 20 MiB: one export of ~10 MB (a 16 MiB buffer), not two */

/* Run r-exp of thread t-exp: EXP_EVENTS deltas of EXP_DELTA bytes, about 10 MB of JSON Lines. */
static void write_big_run(void)
{
    ab_producer_t *p = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_producer_opts_t po = {.timeout_ms = IT_TIMEOUT};
    static char ev[EXP_DELTA + 256];
    assert_int_equal(ab_producer_new(&p, IT->bp.cmd, &po, &err), AB_OK);
    assert_int_equal(ab_producer_claim(p, "t-exp", "r-exp", NULL, &err), AB_OK);
    const char *head[] = {"{\"type\":\"RUN_STARTED\",\"threadId\":\"t-exp\",\"runId\":\"r-exp\","
                          "\"protocolVersion\":\"1.0\"}",
                          "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\"}"};
    for (int i = 0; i < 2; i++)
        assert_int_equal(ab_producer_publish_json(p, head[i], strlen(head[i]), &err), AB_OK);
    int n = snprintf(ev, sizeof ev,
                     "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"");
    memset(ev + n, 'x', EXP_DELTA);
    memcpy(ev + n + EXP_DELTA, "\"}", 3);
    for (int i = 0; i < EXP_EVENTS; i++)
        if (ab_producer_publish_json(p, ev, strlen(ev), &err) != AB_OK ||
            ab_producer_flush(p, IT_TIMEOUT, &err) != AB_OK)
            fail_msg("publish %d: %s", i, err.message);
    ab_producer_destroy(&p);
}

/* Read @p fd until the end of the answer; @return the bytes read. */
static size_t drain(int fd)
{
    size_t all = 0;
    long deadline = ab__mono_ms() + 4 * IT_TIMEOUT;
    char tmp[65536];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (ab__mono_ms() > deadline || poll(&p, 1, 100) < 0)
            fail_msg("the held export did not end (%zu bytes read)", all);
        if (!(p.revents & (POLLIN | POLLHUP)))
            continue;
        ssize_t r = read(fd, tmp, sizeof tmp);
        if (r <= 0)
            return all;
        all += (size_t)r;
    }
}

static void test_export_budget(void **state)
{
    const char *extra[] = {"--export-budget", EXP_BUDGET, NULL};
    start_gw(state, extra);
    write_big_run();
    const char *path = "/threads/t-exp/runs/r-exp/events";
    assert_int_equal(gw_http(&G, "GET", path, NULL, NULL, body, sizeof body), 200);
    /* a client that reads slowly: its export is held while it is being sent */
    int fd = gw_send(&G, "GET", path, NULL, NULL, 0, 4096);
    assert_true(fd >= 0);
    char head[16] = "";
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&pf, 1, 4 * IT_TIMEOUT), 1);
    assert_int_equal(read(fd, head, 12), 12);
    if (strncmp(head, "HTTP/1.", 7) != 0 || strncmp(head + 8, " 200", 4) != 0)
        fail_msg("the held export answered %.12s", head);
    refused(gw_http(&G, "GET", path, NULL, NULL, body, sizeof body), 429, "overloaded", "exports");
    assert_non_null(strstr(body, "\"limit\":" EXP_BUDGET));
    size_t got = drain(fd);
    close(fd);
    assert_true(got > (size_t)EXP_EVENTS * EXP_DELTA);
    /* the budget is back once it is sent */
    long deadline = ab__mono_ms() + IT_TIMEOUT;
    int st;
    while ((st = gw_http(&G, "GET", path, NULL, NULL, body, sizeof body)) == 429 &&
           ab__mono_ms() < deadline)
        poll(NULL, 0, 20);
    assert_int_equal(st, 200);
    /* a bad budget is a usage error naming the option */
    char out[OUT_MAX];
    assert_int_equal(it_run_cli(out, "gateway --export-budget 100"), 2);
    assert_non_null(strstr(out, "--export-budget"));
    assert_int_equal(it_run_cli(out, "gateway --export-budget lots"), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_error_answers_are_utf8_json, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_cut_client_gives_back_its_stream, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_stream_starts_no_run, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_and_resume_want_an_object, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_bare_query_parameters, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_connection_limit, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_across_the_seam, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_colliding_threads_are_refused, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_colliding_threads_resume_is_refused, it_setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_export_budget, it_setup, teardown),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

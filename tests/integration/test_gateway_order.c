/*
 * test_gateway_order.c - a thread stream of `agentbus gateway` stays in
 * strict commit order, and so resumes exactly, when its live side loses
 * messages while two runs of the thread are written at once:
 *  - a broker with --hwm 1 and a client that reads nothing while two
 *    producers write runs "a" and "b" of one thread in turns, with events
 *    large enough that the gateway's live side must drop (the stream's
 *    queue is full, its SUB and the socket buffers too);
 *  - the client then reads the whole stream: every id above the one before,
 *    both runs complete (each in seq order), no event twice;
 *  - a client that disconnected after one of those events (every 7th) resumes
 *    with Last-Event-ID = its id and gets exactly the next one first; from
 *    three points it reads on to the end and gets exactly the rest.
 * Before the gateway's ordered thread subscription a live drop of one run's
 * message followed by the other run's next one delivered the late events
 * after later ids (then counted as agentbus_gateway_reordered_total). That
 * drop pattern is timing-dependent (here the loopback buffers absorb most of
 * it), so this test checks the invariant rather than reproducing the old
 * failure every time; test_subscriber.c checks the ordered subscription's
 * rule itself.
 */
#include "testutil.h"

#include "gw_proc.h"

#include "agentbus/producer.h"

#define N   600   /* events per run */
#define PAD 12000 /* bytes of padding per content event */

static gwp_t G;
static it_t *IT;

static int setup(void **state)
{
    /* --hwm 1: live drops at once. A resumed stream that is left after its first event
     * abandons its replay; the broker keeps such a replay's slot until it learns the
     * connection is gone (docs/PROTOCOL.md 7.6.3), so 600 of them in a row need more slots
     * than the default and less unread bytes each. */
    static const char *const extra[] = {"--hwm", "1", "--replays", "4096", "--max-replay-bytes",
                                        "65536", NULL};
    return it_setup_with(state, extra);
}

static int teardown(void **state)
{
    if (G.pid > 0)
        gw_stop(&G, true);
    return it_teardown(state);
}

/* Event @p seq of run @p r: its run is readable from the data (runId or messageId "m-RUN"). */
static void body_of(char *buf, size_t size, const char *t, const char *r, unsigned seq)
{
    char msg[16];
    snprintf(msg, sizeof msg, "m-%s", r);
    it_body_msg(buf, size, t, r, msg, seq, N, PAD);
}

static uint64_t ids[2 * N];
static size_t nids, per_run[2];

/* The run of an event's data: 0 for "a", 1 for "b". */
static int run_of(const char *data)
{
    if (strstr(data, "\"runId\":\"a\"") || strstr(data, "\"messageId\":\"m-a\""))
        return 0;
    if (strstr(data, "\"runId\":\"b\"") || strstr(data, "\"messageId\":\"m-b\""))
        return 1;
    fail_msg("an event of neither run: %.80s", data);
    return -1;
}

/* Read the next event of the stream within @p ms, checking it is above the one before. */
static bool read_one(gw_sse_t *s, long ms)
{
    static gw_ev_t e;
    if (nids == 2 * N || gw_sse_next(s, &e, ms) != 1)
        return false;
    if (nids > 0 && e.id <= ids[nids - 1])
        fail_msg("event %zu has id %llu after id %llu: not in commit order", nids,
                 (unsigned long long)e.id, (unsigned long long)ids[nids - 1]);
    per_run[run_of(e.data)]++;
    ids[nids++] = e.id;
    return true;
}

/* Runs "a" and "b" of thread @p t, one event of each in turn, each acknowledged; the
 * client reads at most one event per four published, so it falls behind for good. */
static void publish_two(const char *t, gw_sse_t *s)
{
    ab_producer_t *p[2] = {NULL, NULL};
    const char *runs[2] = {"a", "b"};
    ab_error_t err = AB_ERROR_INIT;
    ab_producer_opts_t po = {.timeout_ms = IT_TIMEOUT};
    static char ev[PAD + 256];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ab_producer_new(&p[i], IT->bp.cmd, &po, &err), AB_OK);
        assert_int_equal(ab_producer_claim(p[i], t, runs[i], NULL, &err), AB_OK);
    }
    for (unsigned seq = 1; seq <= N; seq++)
        for (int i = 0; i < 2; i++) {
            body_of(ev, sizeof ev, t, runs[i], seq);
            if (ab_producer_publish_json(p[i], ev, strlen(ev), &err) != AB_OK ||
                ab_producer_flush(p[i], IT_TIMEOUT, &err) != AB_OK)
                fail_msg("publish %s/%u: %s", runs[i], seq, err.message);
            if (i == 1)
                (void)read_one(s, 1);
        }
    for (int i = 0; i < 2; i++)
        ab_producer_destroy(&p[i]);
}

static char body[65536];

static uint64_t metric(const char *name)
{
    assert_int_equal(gw_http(&G, "GET", "/metrics", NULL, NULL, body, sizeof body), 200);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *m = strstr(body, key);
    assert_non_null(m);
    return strtoull(m + strlen(key), NULL, 10);
}

/* Resume after ids[k]: the next events are ids[k + 1 ...], @p all of them or the first. */
static void resume_after(size_t k, bool all)
{
    char hdr[64];
    gw_sse_t s;
    gw_ev_t e;
    snprintf(hdr, sizeof hdr, "Last-Event-ID: %llu\r\n", (unsigned long long)ids[k]);
    assert_int_equal(gw_sse_open(&s, &G, "GET", "/threads/t-ord/events", hdr, NULL, 0), 0);
    size_t want_end = all ? 2 * N : k + 2;
    for (size_t i = k + 1; i < want_end; i++) {
        int rc = gw_sse_next(&s, &e, IT_TIMEOUT);
        if (rc != 1)
            fail_msg("resume after %llu: the stream ended (%d, HTTP %d) before event %zu",
                     (unsigned long long)ids[k], rc, s.status, i);
        if (e.id != ids[i])
            fail_msg("resume after %llu: event %zu is %llu, not %llu", (unsigned long long)ids[k],
                     i, (unsigned long long)e.id, (unsigned long long)ids[i]);
    }
    gw_sse_close(&s);
    /* the gateway lets go of a stream whose client left (at its next write) */
    long deadline = ab__mono_ms() + IT_TIMEOUT;
    while (metric("agentbus_gateway_streams_open") != 0 && ab__mono_ms() < deadline)
        poll(NULL, 0, 5);
    if (metric("agentbus_gateway_streams_open") != 0)
        fail_msg("after resume %zu: %llu streams still open", k,
                 (unsigned long long)metric("agentbus_gateway_streams_open"));
}

static void test_two_runs_ordered_after_live_drops(void **state)
{
    IT = *state;
    IT_REQUIRE_BROKER(IT);
    memset(&G, 0, sizeof G);
    /* a small queue, no cut while the client does not read, and a client that left
     * noticed soon (at the next heartbeat of an idle stream) */
    const char *extra[] = {"--sse-buffer", "65536", "--slow-ms", "120000",
                           "--heartbeat",  "100",   NULL};
    assert_int_equal(gw_start(&G, IT->bp.cmd, extra), 0);
    gw_sse_t s;
    assert_int_equal(gw_sse_open(&s, &G, "GET", "/threads/t-ord/events", "", NULL, 4096), 0);
    assert_int_equal(gw_sse_status(&s, IT_TIMEOUT), 200); /* subscribed before the runs */
    nids = per_run[0] = per_run[1] = 0;
    publish_two("t-ord", &s);
    while (read_one(&s, IT_TIMEOUT))
        ;
    gw_sse_close(&s);
    assert_int_equal(nids, 2 * N);
    assert_int_equal(per_run[0], N);
    assert_int_equal(per_run[1], N);
    /* Ids strictly increasing and every event of the thread once: "everything up to this id
     * was sent" held after every event. A client that disconnected after an event resumes
     * exactly there: after every 7th one (and the last) it gets the next one first, and
     * from three points it reads on and gets exactly the rest. */
    for (size_t k = 0; k + 1 < 2 * N; k++)
        if (k % 7 == 0 || k + 2 == 2 * N)
            resume_after(k, k == 0 || k == N || k + 2 == 2 * N);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_two_runs_ordered_after_live_drops, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

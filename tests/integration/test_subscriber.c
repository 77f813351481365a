/*
 * test_subscriber.c - ab_sub_t against a real broker process: exactly once
 * and in seq order across the replay -> live seam, resume from a persisted
 * cursor, holes from a tiny high-water mark, a broker restart (new instance
 * id), scope "all" from a commit position, and "from now"; a callback that
 * stops in the middle of a live message, with bodies not decoded; a broker
 * frozen with SIGSTOP: the reconnect attempts back off (the delays drawn
 * grow to the cap), and once it runs again every event arrives exactly once;
 * an ordered thread subscription (two runs in turns, a tiny high-water mark)
 * delivers strictly by position and resumes exactly from any position.
 */
#include "testutil.h"

#include "agentbus/subscriber.h"
#include "broker_proc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#define MAX_RUNS 8

/* What the callback saw: per run the next expected seq (any other seq fails
 * the test, so a duplicate or a skip is caught where it happens). */
typedef struct rec {
    char runs[MAX_RUNS][32];
    uint64_t next[MAX_RUNS]; /* next expected seq; preset for cursors */
    uint64_t last_pos[MAX_RUNS];
    int nruns;
    uint64_t total, live, replayed;
    uint64_t last_pos_all;
    bool skip_body;      /* the subscriber was opened with skip_body */
    uint64_t stop_every; /* the callback stops after every that many events; 0 = never */
} rec_t;

static int rec_slot(rec_t *r, const ab_str_t *run)
{
    for (int i = 0; i < r->nruns; i++)
        if (strlen(r->runs[i]) == run->len && memcmp(r->runs[i], run->ptr, run->len) == 0)
            return i;
    assert_true(r->nruns < MAX_RUNS);
    snprintf(r->runs[r->nruns], sizeof(r->runs[0]), "%.*s", (int)run->len, run->ptr);
    r->next[r->nruns] = 1;
    return r->nruns++;
}

static void rec_expect(rec_t *r, const char *run, uint64_t next)
{
    int i = rec_slot(r, &(ab_str_t){run, strlen(run)});
    r->next[i] = next;
}

static int on_event(void *ud, const ab_sub_event_t *e)
{
    rec_t *r = ud;
    int i = rec_slot(r, &e->ev.run);
    if (e->ev.seq != r->next[i])
        fail_msg("run %s: got seq %llu, expected %llu (%s)", r->runs[i],
                 (unsigned long long)e->ev.seq, (unsigned long long)r->next[i],
                 e->replayed ? "replayed" : "live");
    assert_true(e->stamp.pos > r->last_pos[i]);
    assert_true(e->stamp.time_us > 0);
    if (r->skip_body)
        assert_null(e->ev.body);
    else
        assert_non_null(e->ev.body);
    assert_true(e->len > 0);
    r->last_pos[i] = e->stamp.pos;
    r->next[i]++;
    r->total++;
    if (e->replayed)
        r->replayed++;
    else
        r->live++;
    r->last_pos_all = e->stamp.pos;
    return r->stop_every && r->total % r->stop_every == 0;
}

/* Publish the @p n envelopes of @p batch in one request, each accepted (the test fails
 * otherwise), then free them; @p last_pos (may be NULL): the last one's position. */
static void publish_all(ab_conn_t *c, ab_doc_t *doc, ab_buf_t *batch, size_t n, uint64_t *last_pos)
{
    ab_error_t err = AB_ERROR_INIT;
    const ab_result_t *res = NULL;
    if (ab_conn_publish(c, batch, n, doc, &res, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("publish: %s", err.message);
    for (size_t i = 0; i < n; i++) {
        if (res[i].status != AB_RESULT_ACCEPTED)
            fail_msg("event %zu: %s", i, res[i].error ? res[i].error->message : "?");
        if (last_pos)
            *last_pos = res[i].pos;
        ab_buf_free(&batch[i]);
    }
}

static void publish_range(ab_conn_t *c, ab_doc_t *doc, const char *thread, const char *run,
                          uint64_t from, uint64_t to, size_t pad, uint64_t *last_pos)
{
    enum { B = 200 };
    ab_buf_t batch[B];
    ab_error_t err = AB_ERROR_INIT;
    for (uint64_t s = from; s <= to;) {
        size_t n = 0;
        for (; n < B && s <= to; n++, s++) {
            char body[4096];
            it_body(body, sizeof(body), thread, run, s, 0, pad);
            batch[n] = (ab_buf_t)AB_BUF_INIT;
            assert_int_equal(ab_envelope_json(&batch[n], 1, thread, run, s, 1, body, &err), AB_OK);
        }
        publish_all(c, doc, batch, n, last_pos);
    }
}

/* Poll until the recorder holds @p total events (or @p ms pass); retryable
 * errors (a broker away) are tolerated. */
static void poll_until(ab_sub_t *s, rec_t *r, uint64_t total, long ms)
{
    long deadline = ab__mono_ms() + ms;
    while (r->total < total && ab__mono_ms() < deadline) {
        ab_error_t err = AB_ERROR_INIT;
        ab_status_t rc = ab_sub_poll(s, 100, &err);
        if (rc != AB_OK && !ab_status_retryable(rc))
            fail_msg("poll: %s: %s", ab_status_name(rc), err.message);
    }
    if (r->total != total)
        fail_msg("delivered %llu events, expected %llu", (unsigned long long)r->total,
                 (unsigned long long)total);
}

static ab_sub_t *sub_open(const char *ep, ab_sub_opts_t *o, rec_t *r)
{
    o->on_event = on_event;
    o->ud = r;
    ab_sub_t *s = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_sub_new(&s, ep, o, &err) != AB_OK)
        fail_msg("ab_sub_new: %s: %s", ab_status_name(err.code), err.message);
    return s;
}

static void test_seam_and_resume(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    publish_range(c, t->doc, "t", "r1", 1, 5, 0, NULL);
    publish_range(c, t->doc, "t", "r2", 1, 3, 0, NULL);
    publish_range(c, t->doc, "u", "r1", 1, 4, 0, NULL); /* another thread: never seen */
    rec_t r = {.nruns = 0};
    rec_expect(&r, "r1", 4);
    ab_sub_cursor_t cur[] = {{"r1", 3}};
    ab_sub_opts_t o = {.scope = AB_SUB_THREAD, .thread = "t", .cursors = cur, .ncursors = 1};
    ab_sub_t *s = sub_open(t->bp.cmd, &o, &r);
    /* publish while the subscriber starts: replay and live overlap */
    for (uint64_t k = 0; k < 15; k++) {
        publish_range(c, t->doc, "t", "r1", 6 + k, 6 + k, 0, NULL);
        if (k < 7)
            publish_range(c, t->doc, "t", "r2", 4 + k, 4 + k, 0, NULL);
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab_sub_poll(s, 0, &err), AB_OK);
    }
    poll_until(s, &r, 17 + 10, 10000);
    assert_true(r.replayed >= 5); /* r1 4..5 and r2 1..3 came from the store */
    print_message("seam: %llu replayed, %llu live\n", (unsigned long long)r.replayed,
                  (unsigned long long)r.live);
    /* resume: keep the cursor, close, publish more, reopen from the cursor */
    const ab_sub_cursor_t *cv = NULL;
    size_t n = ab_sub_cursors(s, &cv);
    assert_int_equal(n, 2);
    ab_sub_cursor_t saved[2];
    char names[2][8];
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof(names[i]), "%s", cv[i].run);
        saved[i] = (ab_sub_cursor_t){names[i], cv[i].after_seq};
    }
    ab_sub_destroy(&s);
    assert_null(s);
    publish_range(c, t->doc, "t", "r1", 21, 25, 0, NULL);
    publish_range(c, t->doc, "t", "r3", 1, 2, 0, NULL);
    uint64_t before = r.total;
    ab_sub_opts_t o2 = {.scope = AB_SUB_THREAD, .thread = "t", .cursors = saved, .ncursors = 2};
    s = sub_open(t->bp.cmd, &o2, &r);
    poll_until(s, &r, before + 7, 10000);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_sub_poll(s, 1200, &err), AB_OK); /* nothing more arrives */
    assert_int_equal(r.total, before + 7);
    ab_sub_destroy(&s);
    ab_conn_destroy(&c);
}

static int setup_hwm(void **state)
{
    static const char *const extra[] = {"--hwm", "10", NULL};
    return it_setup_with(state, extra);
}

static void test_holes_from_tiny_hwm(void **state)
{
    enum { TOTAL = 2000 };
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    rec_t r = {.nruns = 0};
    ab_sub_opts_t o = {.scope = AB_SUB_RUN, .thread = "slow", .run = "r", .rcvhwm = 1};
    ab_sub_t *s = sub_open(t->bp.cmd, &o, &r);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_sub_poll(s, 300, &err), AB_OK);
    for (uint64_t from = 1; from <= TOTAL; from += 400) {
        publish_range(c, t->doc, "slow", "r", from, from + 399, 2000, NULL);
        assert_int_equal(ab_sub_poll(s, 0, &err), AB_OK);
    }
    poll_until(s, &r, TOTAL, 20000);
    ab_sub_stats_t st = ab_sub_stats(s);
    print_message("holes %llu, replays %llu, dups %llu, live %llu\n", (unsigned long long)st.holes,
                  (unsigned long long)st.replays, (unsigned long long)st.dups,
                  (unsigned long long)r.live);
    assert_true(st.replays >= 2); /* the live stream lost events: the store filled them */
    assert_int_equal(st.delivered, TOTAL);
    ab_sub_destroy(&s);
    ab_conn_destroy(&c);
}

/* Runs "a" and "b" of @p thread, seqs @p from..to, in turns within each publish (so every
 * event is a live message of its own), 100 of each per publish. */
static void publish_mixed(ab_conn_t *c, ab_doc_t *doc, const char *thread, uint64_t from,
                          uint64_t to)
{
    enum { B = 200 };
    static ab_buf_t batch[B];
    ab_error_t err = AB_ERROR_INIT;
    for (uint64_t s = from; s <= to;) {
        size_t n = 0;
        for (; n + 1 < B && s <= to; s++)
            for (int i = 0; i < 2; i++, n++) {
                char body[4096];
                it_body(body, sizeof(body), thread, i ? "b" : "a", s, 0, 2000);
                batch[n] = (ab_buf_t)AB_BUF_INIT;
                assert_int_equal(
                    ab_envelope_json(&batch[n], 1, thread, i ? "b" : "a", s, 1, body, &err), AB_OK);
            }
        publish_all(c, doc, batch, n, NULL);
    }
}

/* Ordered thread subscription: commit positions in a fixed array, strictly increasing. */
typedef struct ordrec {
    uint64_t pos[2000];
    size_t n;
} ordrec_t;

static int on_ordered(void *ud, const ab_sub_event_t *e)
{
    ordrec_t *r = ud;
    if (r->n > 0 && e->stamp.pos <= r->pos[r->n - 1])
        fail_msg("pos %llu delivered after pos %llu (%s)", (unsigned long long)e->stamp.pos,
                 (unsigned long long)r->pos[r->n - 1], e->replayed ? "replayed" : "live");
    assert_true(r->n < 2000);
    r->pos[r->n++] = e->stamp.pos;
    return 0;
}

static void poll_ordered(ab_sub_t *s, ordrec_t *r, size_t total)
{
    long deadline = ab__mono_ms() + 30000;
    while (r->n < total && ab__mono_ms() < deadline) {
        ab_error_t err = AB_ERROR_INIT;
        ab_status_t rc = ab_sub_poll(s, 100, &err);
        if (rc != AB_OK && !ab_status_retryable(rc))
            fail_msg("poll: %s: %s", ab_status_name(rc), err.message);
    }
    assert_int_equal(r->n, total);
}

/* Two runs of a thread written in turns (and another thread in between, so positions of
 * the thread are not contiguous), a tiny high-water mark and a subscriber that polls only
 * now and then: an ordered thread subscription delivers strictly by position, every event
 * once, and a new one from any delivered position gets exactly the rest. */
static void test_ordered_thread_holes(void **state)
{
    enum { PER = 300 };
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    static ordrec_t r, r2;
    memset(&r, 0, sizeof r);
    ab_sub_opts_t o = {.scope = AB_SUB_THREAD,
                       .thread = "ord",
                       .ordered = true,
                       .rcvhwm = 1,
                       .on_event = on_ordered,
                       .ud = &r};
    ab_error_t err = AB_ERROR_INIT;
    ab_sub_t *s = NULL;
    /* ordered is for scope thread, with a position cursor only */
    ab_sub_cursor_t cur = {"a", 1};
    ab_sub_opts_t bad = o;
    bad.cursors = &cur;
    bad.ncursors = 1;
    assert_int_equal(ab_sub_new(&s, t->bp.cmd, &bad, &err), AB_INVALID_ARGUMENT);
    assert_string_equal(err.field, "cursors");
    ab_error_clear(&err);
    bad = o;
    bad.scope = AB_SUB_ALL;
    assert_int_equal(ab_sub_new(&s, t->bp.cmd, &bad, &err), AB_INVALID_ARGUMENT);
    assert_string_equal(err.field, "ordered");
    ab_error_clear(&err);
    assert_int_equal(ab_sub_new(&s, t->bp.cmd, &o, &err), AB_OK);
    assert_int_equal(ab_sub_poll(s, 300, &err), AB_OK);
    for (uint64_t from = 1; from <= PER; from += 100) {
        publish_mixed(c, t->doc, "ord", from, from + 99);
        uint64_t x = from / 100 + 1; /* another thread takes positions in between */
        publish_range(c, t->doc, "ord-other", "x", x, x, 0, NULL);
        assert_int_equal(ab_sub_poll(s, 0, &err), AB_OK);
    }
    poll_ordered(s, &r, 2 * PER);
    ab_sub_stats_t st = ab_sub_stats(s);
    print_message("holes %llu, replays %llu, dups %llu\n", (unsigned long long)st.holes,
                  (unsigned long long)st.replays, (unsigned long long)st.dups);
    assert_true(st.replays >= 2); /* gaps of position (lost, or another thread's): replayed */
    assert_int_equal(ab_sub_position(s), r.pos[2 * PER - 1]);
    ab_sub_destroy(&s);
    /* resume from the position of event k: exactly the events after it */
    for (size_t k = 0; k < 2 * PER; k += 97) {
        memset(&r2, 0, sizeof r2);
        ab_sub_opts_t o2 = o;
        o2.ud = &r2;
        o2.after_pos = r.pos[k];
        assert_int_equal(ab_sub_new(&s, t->bp.cmd, &o2, &err), AB_OK);
        poll_ordered(s, &r2, 2 * PER - k - 1);
        assert_memory_equal(r2.pos, r.pos + k + 1, r2.n * sizeof r.pos[0]);
        assert_int_equal(ab_sub_poll(s, 300, &err), AB_OK); /* nothing more */
        assert_int_equal(r2.n, 2 * PER - k - 1);
        ab_sub_destroy(&s);
    }
    ab_conn_destroy(&c);
}

static char restart_cmd[64], restart_ev[64];

static int setup_fixed_ports(void **state)
{
    static const char *extra[5];
    bp_fixed_ports(restart_cmd, restart_ev, extra);
    return it_setup_with(state, extra);
}

static void test_broker_restart(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    publish_range(c, t->doc, "rs", "r1", 1, 5, 0, NULL);
    rec_t r = {.nruns = 0};
    ab_sub_opts_t o = {
        .scope = AB_SUB_THREAD, .thread = "rs", .silence_ms = 1500, .timeout_ms = 1000};
    ab_sub_t *s = sub_open(t->bp.cmd, &o, &r);
    poll_until(s, &r, 5, 5000);
    char old_instance[128];
    snprintf(old_instance, sizeof(old_instance), "%s", t->bp.instance);
    ab_conn_destroy(&c);
    bp_kill(&t->bp);
    assert_int_equal(bp_restart(&t->bp), 0);
    assert_string_not_equal(old_instance, t->bp.instance);
    assert_string_equal(t->bp.cmd, restart_cmd);
    c = it_connect(&t->bp);
    publish_range(c, t->doc, "rs", "r1", 6, 10, 0, NULL);
    publish_range(c, t->doc, "rs", "r2", 1, 3, 0, NULL);
    poll_until(s, &r, 13, 15000);
    assert_true(ab_sub_stats(s).reconnects >= 1);
    ab_sub_destroy(&s);
    ab_conn_destroy(&c);
}

static void test_scope_all_and_from_now(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    uint64_t pos3 = 0;
    publish_range(c, t->doc, "a", "r", 1, 3, 0, &pos3);
    publish_range(c, t->doc, "b", "r", 1, 4, 0, NULL);
    rec_t r = {.nruns = 0};
    ab_sub_opts_t o = {.scope = AB_SUB_ALL, .after_pos = pos3};
    ab_sub_t *s = sub_open(t->bp.cmd, &o, &r);
    /* thread "a" run "r" and thread "b" run "r" share a run id: scope all
     * orders by position, so record by thread via distinct run ids below */
    poll_until(s, &r, 4, 5000);
    publish_range(c, t->doc, "c", "x", 1, 6, 0, NULL);
    poll_until(s, &r, 10, 5000);
    assert_true(ab_sub_position(s) > pos3);
    ab_sub_destroy(&s);
    /* from now: only what is published after the subscription */
    rec_t n = {.nruns = 0};
    rec_expect(&n, "x", 7);
    ab_sub_opts_t on = {.scope = AB_SUB_THREAD, .thread = "c", .start = AB_SUB_FROM_NOW};
    s = sub_open(t->bp.cmd, &on, &n);
    publish_range(c, t->doc, "c", "x", 7, 9, 0, NULL);
    poll_until(s, &n, 3, 5000);
    ab_sub_destroy(&s);
    ab_conn_destroy(&c);
}

/* Live events are delivered straight from the ZeroMQ message; a callback that
 * stops halfway through one must lose nothing and repeat nothing: the rest
 * of the message is delivered by the next polls, without a replay. */
static void test_stop_mid_message_skip_body(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    rec_t r = {.nruns = 0, .skip_body = true, .stop_every = 7};
    ab_sub_opts_t o = {.scope = AB_SUB_ALL, .start = AB_SUB_FROM_NOW, .skip_body = true};
    ab_sub_t *s = sub_open(t->bp.cmd, &o, &r);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_sub_poll(s, 100, &err), AB_OK);    /* the first (empty) replay */
    publish_range(c, t->doc, "t", "big", 1, 600, 0, NULL); /* 200 per publish: whole messages */
    long deadline = ab__mono_ms() + 10000;
    int stops = 0;
    while (r.total < 600 && ab__mono_ms() < deadline) {
        ab_status_t rc = ab_sub_poll(s, 100, &err);
        if (rc == AB_REQUEST_ABORTED)
            stops++;
        else if (rc != AB_OK)
            fail_msg("poll: %s: %s", ab_status_name(rc), err.message);
    }
    assert_int_equal(r.total, 600);
    assert_int_equal(stops, 600 / 7);
    assert_int_equal(r.live, 600);
    ab_sub_stats_t st = ab_sub_stats(s);
    assert_int_equal(st.holes, 0);
    assert_int_equal(st.replays, 1);                    /* the first one only */
    assert_int_equal(ab_sub_poll(s, 300, &err), AB_OK); /* nothing more arrives */
    assert_int_equal(r.total, 600);
    ab_sub_destroy(&s);
    ab_conn_destroy(&c);
}

/* A frozen broker (SIGSTOP): its port still accepts connections, nothing answers. The
 * subscriber notices the silence, then retries with growing, capped delays; after
 * SIGCONT it reconnects, replays and delivers what was published meanwhile, once. */
static void test_frozen_broker_backoff(void **state)
{
    enum { BASE = 100, CAP = 800, N = 5 };
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    publish_range(c, t->doc, "fz", "r1", 1, 40, 0, NULL);
    rec_t r = {.nruns = 0};
    ab_sub_opts_t o = {.scope = AB_SUB_THREAD,
                       .thread = "fz",
                       .silence_ms = 1500,
                       .timeout_ms = 300,
                       .reconnect_base_ms = BASE,
                       .reconnect_max_ms = CAP};
    ab_sub_t *s = sub_open(t->bp.cmd, &o, &r);
    poll_until(s, &r, 40, 10000);
    uint64_t r0 = ab_sub_stats(s).reconnects;
    assert_int_equal(kill(t->bp.pid, SIGSTOP), 0);
    uint64_t delay[N];
    int seen = 0;
    long deadline = ab__mono_ms() + 60000;
    while (seen < N && ab__mono_ms() < deadline) {
        ab_error_t err = AB_ERROR_INIT;
        ab_status_t rc = ab_sub_poll(s, 100, &err);
        if (rc != AB_OK && !ab_status_retryable(rc))
            fail_msg("poll: %s: %s", ab_status_name(rc), err.message);
        ab_sub_stats_t st = ab_sub_stats(s);
        assert_true(st.reconnects - r0 <= (uint64_t)seen + 1); /* one attempt per poll */
        if (st.reconnects - r0 == (uint64_t)seen + 1)
            delay[seen++] = st.backoff_ms;
    }
    assert_int_equal(kill(t->bp.pid, SIGCONT), 0);
    assert_int_equal(seen, N);
    for (int k = 1; k <= N; k++) {
        uint64_t cl = (uint64_t)BASE << (k - 1) < CAP ? (uint64_t)BASE << (k - 1) : CAP;
        print_message("frozen: attempt %d, next in %llu ms (%llu..%llu)\n", k,
                      (unsigned long long)delay[k - 1], (unsigned long long)(cl - cl / 2),
                      (unsigned long long)cl);
        assert_true(delay[k - 1] >= cl - cl / 2 && delay[k - 1] <= cl);
    }
    /* running again: what is published now reaches the subscriber through its replay */
    publish_range(c, t->doc, "fz", "r1", 41, 60, 0, NULL);
    publish_range(c, t->doc, "fz", "r2", 1, 10, 0, NULL);
    poll_until(s, &r, 70, 30000);                    /* on_event fails on any duplicate or skip */
    assert_int_equal(ab_sub_stats(s).backoff_ms, 0); /* the connection proved itself */
    assert_true(ab_sub_stats(s).reconnects - r0 > N);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_sub_poll(s, 500, &err), AB_OK); /* nothing more arrives */
    assert_int_equal(r.total, 70);
    assert_int_equal(ab_sub_stats(s).delivered, 70);
    ab_sub_destroy(&s);
    ab_conn_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_seam_and_resume, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_holes_from_tiny_hwm, setup_hwm, it_teardown),
        cmocka_unit_test_setup_teardown(test_ordered_thread_holes, setup_hwm, it_teardown),
        cmocka_unit_test_setup_teardown(test_broker_restart, setup_fixed_ports, it_teardown),
        cmocka_unit_test_setup_teardown(test_scope_all_and_from_now, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_stop_mid_message_skip_body, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_frozen_broker_backoff, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

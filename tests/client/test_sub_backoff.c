/*
 * test_sub_backoff.c - the subscriber's reconnect backoff against a scripted
 * in-process broker (a ROUTER and a PUB in a thread, speaking the real
 * codec) that the test can stall: it then still reads and counts every
 * `hello` but answers nothing and sends no heartbeat.
 *
 * Checked without asserting a time: every reconnect attempt is exactly one
 * hello at the broker; the delays drawn after the n-th failed attempt lie in
 * [c - c/2, c] with c = min(max, base * 2^(n-1)), so they grow up to the cap;
 * the attempts never outrun those delays (the count stays within what the
 * schedule allows in the elapsed time, far below one per hello timeout);
 * once the broker answers again, the subscriber reconnects, a heartbeat or
 * replay resets the backoff, and a new stall starts again from the base.
 * Options are checked too (negative values refused).
 */
#include "agentbus/subscriber.h"
#include "fake_router.h"
#include "testutil.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define CMD_EP   "inproc://backoff-broker"
#define EV_EP    "inproc://backoff-events"
#define INSTANCE "inst-backoff"
#define BASE_MS  100
#define MAX_MS   800
#define HELLO_MS 200 /* the subscriber's request timeout: each stalled hello waits it */

typedef struct fake {
    fr_t fr;   /* the ROUTER, its thread and the client's identity */
    void *pub; /* the event endpoint (fr.side) */
    atomic_bool stalled;
    atomic_int hellos;  /* hellos received */
    atomic_int replays; /* replays answered */
} fake_t;

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void send_reply(fake_t *f, const ab_msg_t *m)
{
    fr_reply(&f->fr, m, NULL, 0);
}

static void heartbeat(fake_t *f)
{
    ab_msg_t m = {.op = AB_OP_HEARTBEAT, .v = 1};
    m.u.heartbeat.instance = (ab_str_t){INSTANCE, strlen(INSTANCE)};
    m.u.heartbeat.time_us = 1;
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_msg_encode(&m, &b, &err), AB_OK);
    zmq_send(f->pub, AB_TOPIC_HEARTBEAT, AB_TOPIC_HEARTBEAT_LEN, ZMQ_SNDMORE);
    zmq_send(f->pub, b.data, b.len, 0);
    ab_buf_free(&b);
}

static void handle(fake_t *f, const ab_msg_t *q)
{
    if (q->op == AB_OP_HELLO)
        atomic_fetch_add(&f->hellos, 1);
    if (atomic_load(&f->stalled))
        return; /* read, never answered */
    ab_msg_t m = {.v = 1, .cid = q->cid};
    if (q->op == AB_OP_HELLO) {
        m.op = AB_OP_WELCOME;
        m.u.welcome.instance = (ab_str_t){INSTANCE, strlen(INSTANCE)};
        m.u.welcome.event_endpoint = (ab_str_t){EV_EP, strlen(EV_EP)};
        m.u.welcome.limits = ab_limits_default();
        send_reply(f, &m);
    } else if (q->op == AB_OP_REPLAY) { /* an empty store: the end at once */
        m.op = AB_OP_REPLAY_END;
        send_reply(f, &m);
        atomic_fetch_add(&f->replays, 1);
    }
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    long next_hb = 0;
    while (!atomic_load(&f->fr.stop)) {
        if (!atomic_load(&f->stalled) && now_ms() >= next_hb) {
            heartbeat(f);
            next_hb = now_ms() + 50;
        }
        ab_msg_t q; /* identity, header, any further frames dropped */
        if (fr_recv(&f->fr, &q, 10))
            handle(f, &q);
    }
    return NULL;
}

static int setup(void **state)
{
    fake_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    fr_open(&f->fr, CMD_EP);
    f->pub = fr_side(&f->fr, ZMQ_PUB, EV_EP);
    fr_run(&f->fr, fake_main, f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fake_t *f = *state;
    fr_stop(&f->fr);
    free(f);
    return 0;
}

static int on_event(void *ud, const ab_sub_event_t *e)
{
    (void)ud;
    (void)e;
    fail_msg("the fake broker has no events");
    return 1;
}

static ab_sub_t *open_sub(fake_t *f)
{
    ab_sub_opts_t o = {.scope = AB_SUB_ALL,
                       .on_event = on_event,
                       .silence_ms = 300,
                       .timeout_ms = HELLO_MS,
                       .zmq_ctx = f->fr.ctx,
                       .reconnect_base_ms = BASE_MS,
                       .reconnect_max_ms = MAX_MS};
    ab_sub_t *s = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_sub_new(&s, CMD_EP, &o, &err) != AB_OK)
        fail_msg("ab_sub_new: %s", err.message);
    return s;
}

/* Poll until the subscriber made @p n more attempts; the delay drawn after each goes to
 * delays[]. Every poll result is one a caller sees while the broker is away. */
static void attempts(ab_sub_t *s, int n, uint64_t *delays)
{
    uint64_t r0 = ab_sub_stats(s).reconnects;
    long deadline = now_ms() + 60000;
    int seen = 0;
    while (seen < n && now_ms() < deadline) {
        ab_error_t err = AB_ERROR_INIT;
        ab_status_t rc = ab_sub_poll(s, 50, &err);
        if (rc != AB_OK && rc != AB_TIMEOUT && rc != AB_UNAVAILABLE)
            fail_msg("poll: %s: %s", ab_status_name(rc), err.message);
        ab_sub_stats_t st = ab_sub_stats(s);
        assert_true(st.reconnects - r0 <= (uint64_t)seen + 1); /* one attempt per poll */
        if (st.reconnects - r0 == (uint64_t)seen + 1)
            delays[seen++] = st.backoff_ms;
    }
    assert_int_equal(seen, n);
}

/* The ceiling after the n-th failed attempt in a row (n >= 1). */
static uint64_t ceiling(int n)
{
    uint64_t c = (uint64_t)BASE_MS << (n - 1);
    return c < MAX_MS ? c : MAX_MS;
}

/* Wait until the fake counted @p n hellos (it counts in its own thread). */
static void wait_hellos(fake_t *f, int n)
{
    long deadline = now_ms() + 10000;
    while (atomic_load(&f->hellos) < n && now_ms() < deadline) {
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(atomic_load(&f->hellos), n);
}

/* Poll until the connection works again (reset backoff) and a new replay was answered. */
static void recover(fake_t *f, ab_sub_t *s)
{
    int replays = atomic_load(&f->replays);
    long deadline = now_ms() + 30000;
    while ((ab_sub_stats(s).backoff_ms != 0 || atomic_load(&f->replays) == replays) &&
           now_ms() < deadline) {
        ab_error_t err = AB_ERROR_INIT;
        ab_status_t rc = ab_sub_poll(s, 50, &err);
        if (rc != AB_OK && !ab_status_retryable(rc))
            fail_msg("poll: %s: %s", ab_status_name(rc), err.message);
    }
    assert_int_equal(ab_sub_stats(s).backoff_ms, 0);
    assert_true(atomic_load(&f->replays) > replays);
}

static void test_backoff_grows_caps_and_resets(void **state)
{
    enum { N = 7 };
    fake_t *f = *state;
    ab_sub_t *s = open_sub(f);
    recover(f, s); /* the first replay, and heartbeats */
    int h0 = atomic_load(&f->hellos);
    assert_int_equal(h0, 1);

    atomic_store(&f->stalled, true);
    long t0 = now_ms();
    uint64_t d[N];
    attempts(s, N, d);
    long elapsed = now_ms() - t0;
    wait_hellos(f, h0 + N); /* each attempt is one connection and one hello, no more */
    uint64_t floor_sum = 0;
    for (int k = 1; k <= N; k++) {
        uint64_t c = ceiling(k);
        print_message("attempt %d: next in %llu ms (range %llu..%llu)\n", k,
                      (unsigned long long)d[k - 1], (unsigned long long)(c - c / 2),
                      (unsigned long long)c);
        assert_true(d[k - 1] >= c - c / 2 && d[k - 1] <= c);
        if (k < N)
            floor_sum += c - c / 2 + HELLO_MS - 5; /* 5: millisecond rounding */
    }
    assert_true(d[N - 1] > d[0]); /* grown: 50..100 first, 400..800 at the cap */
    /* The attempts kept to the schedule: before attempts 2..N the subscriber waited a
     * hello timeout and at least the lower end of the delay, so they cannot fit in less
     * time (whatever the machine's speed); without backoff the same time would have held
     * one attempt per hello timeout. */
    print_message("%d attempts in %ld ms; without backoff about %ld\n", N, elapsed,
                  elapsed / HELLO_MS);
    assert_true((uint64_t)elapsed >= floor_sum);
    assert_true(N < elapsed / HELLO_MS);

    /* the broker answers again: reconnected, and the backoff is reset */
    atomic_store(&f->stalled, false);
    recover(f, s);
    /* a new stall starts from the base again */
    atomic_store(&f->stalled, true);
    attempts(s, 2, d);
    assert_true(d[0] >= BASE_MS / 2 && d[0] <= BASE_MS);
    assert_true(d[1] >= BASE_MS && d[1] <= 2 * BASE_MS);
    atomic_store(&f->stalled, false);
    recover(f, s);
    ab_sub_destroy(&s);
}

static void test_backoff_options(void **state)
{
    fake_t *f = *state;
    ab_sub_opts_t o = {.scope = AB_SUB_ALL, .on_event = on_event, .zmq_ctx = f->fr.ctx};
    ab_sub_t *s = NULL;
    ab_error_t err = AB_ERROR_INIT;
    o.reconnect_base_ms = -1;
    assert_int_equal(ab_sub_new(&s, CMD_EP, &o, &err), AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "reconnect_base_ms");
    assert_null(s);
    o.reconnect_base_ms = 0;
    o.reconnect_max_ms = -5;
    ab_error_clear(&err);
    assert_int_equal(ab_sub_new(&s, CMD_EP, &o, &err), AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "reconnect_max_ms");
    /* a base above the cap is lowered to it: the first delay is within the cap */
    o.reconnect_base_ms = 10000;
    o.reconnect_max_ms = 300;
    o.silence_ms = 200;
    o.timeout_ms = HELLO_MS;
    ab_error_clear(&err);
    assert_int_equal(ab_sub_new(&s, CMD_EP, &o, &err), AB_OK);
    recover(f, s);
    atomic_store(&f->stalled, true);
    uint64_t d[1];
    attempts(s, 1, d);
    assert_true(d[0] >= 150 && d[0] <= 300);
    atomic_store(&f->stalled, false);
    ab_sub_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_backoff_grows_caps_and_resets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backoff_options, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

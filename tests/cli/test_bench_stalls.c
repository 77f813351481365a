/*
 * test_bench_stalls.c - the pieces of `agentbus bench latency --stalls`
 * (bench/stalls.c): the bounded log of slow samples, the overlap of a row's
 * slow samples with the timer thread's stalls, the timer's bookkeeping of a
 * late wake-up, that the timer thread runs and stops, and where a paced floor
 * sample's clock starts.
 */
#include "testutil.h"

#include "stalls.h"

#include <sched.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Only spans at or over the minimum are noted; the log keeps BENCH_SPANS and counts the rest,
 * and its max is the longest of all, kept or not. */
static void test_log_is_bounded(void **state)
{
    (void)state;
    bench_spans_t s;
    assert_int_equal(bench_spans_init(&s), 0);
    bench_spans_note(&s, 1.0, 0.004, BENCH_SLOW_S);
    assert_int_equal(bench_spans_count(&s), 0);
    for (size_t i = 0; i < BENCH_SPANS + 10; i++)
        bench_spans_note(&s, (double)i, 0.005 + (double)i * 1e-6, BENCH_SLOW_S);
    assert_int_equal(s.n, BENCH_SPANS);
    assert_int_equal(s.over, 10);
    assert_int_equal(bench_spans_count(&s), BENCH_SPANS + 10);
    assert_true(s.max > 0.005 + (double)(BENCH_SPANS + 8) * 1e-6); /* from a span not kept */
    assert_true(s.v[BENCH_SPANS - 1].t0 == (double)(BENCH_SPANS - 1));
    bench_spans_free(&s);
    assert_null(s.v);
}

static void put(bench_spans_t *s, double t0, double dt)
{
    bench_spans_note(s, t0, dt, 0);
}

/* A slow sample counts when it meets any stall: inside one, around one, touching one's end or
 * start by a sample; one between stalls or after the last does not. */
static void test_overlap(void **state)
{
    (void)state;
    bench_spans_t stalls, slow;
    assert_int_equal(bench_spans_init(&stalls), 0);
    assert_int_equal(bench_spans_init(&slow), 0);
    put(&stalls, 10.0, 0.003); /* [10, 10.003] */
    put(&stalls, 20.0, 0.010); /* [20, 20.010] */
    put(&stalls, 30.0, 0.002); /* [30, 30.002] */
    assert_int_equal(bench_spans_overlap(&slow, &stalls), 0);
    put(&slow, 9.990, 0.006);  /* ends before the first: no */
    put(&slow, 9.998, 0.005);  /* reaches into the first: yes */
    put(&slow, 20.002, 0.001); /* inside the second: yes */
    put(&slow, 19.990, 0.050); /* around the second: yes */
    put(&slow, 20.010, 0.005); /* begins at the second's end: yes */
    put(&slow, 25.000, 0.005); /* between: no */
    put(&slow, 29.996, 0.005); /* reaches into the third: yes */
    put(&slow, 40.000, 0.009); /* after the last: no */
    assert_int_equal(bench_spans_overlap(&slow, &stalls), 5);
    bench_spans_t none = {0};
    assert_int_equal(bench_spans_overlap(&slow, &none), 0);
    bench_spans_free(&stalls);
    bench_spans_free(&slow);
}

/* A wake-up on time is no stall and the next tick follows; one 7.5 ms late is a stall from its
 * due time, and the next tick is the first after the wake-up, not the missed ones. */
static void test_meter_woke(void **state)
{
    (void)state;
    bench_spans_t late;
    assert_int_equal(bench_spans_init(&late), 0);
    double next = bench_meter_woke(&late, 100.0, 100.0001);
    assert_true(next > 100.0009 && next < 100.0011);
    assert_int_equal(bench_spans_count(&late), 0);
    next = bench_meter_woke(&late, 100.001, 100.0085);
    assert_int_equal(bench_spans_count(&late), 1);
    assert_true(late.v[0].t0 == 100.001 && late.v[0].dt > 0.0074 && late.v[0].dt < 0.0076);
    assert_true(next > 100.0085 && next <= 100.0095 + 1e-9);
    next = bench_meter_woke(&late, next, next + 0.0019); /* under BENCH_LATE_S: not a stall */
    assert_int_equal(bench_spans_count(&late), 1);
    bench_spans_free(&late);
}

/* A floor sample that had to wait for the one before it counts from when it was due; one
 * that did not counts from when it began, its own late wake-up left out. A stall of 30 ms
 * in a loop paced at 1 ms then makes about 30 slow samples, not one. */
static void test_paced_start(void **state)
{
    (void)state;
    assert_true(bench_paced_start(10.000, 10.0002, 9.9995) == 10.0002); /* free: from began */
    assert_true(bench_paced_start(10.000, 10.0002, 10.000) == 10.0002); /* ended as due */
    assert_true(bench_paced_start(10.000, 10.0301, 10.030) == 10.000);  /* waited in line */
    /* a 1 ms loop whose sample 0 took 30 ms, the later ones 0.2 ms each: sample n waits
     * until 10.030 + 0.2 (n - 1) ms and ends 30 - 0.8 n ms after it was due, so samples
     * 1..31 are slow (5 ms or more) where measuring from when each began would make none */
    double end = 10.030, slow = 0;
    for (int n = 1; n < 40; n++) {
        double due = 10.0 + n * 0.001, began = end > due ? end : due + 0.00005;
        double t0 = bench_paced_start(due, began, end);
        end = began + 0.0002; /* each later sample takes 0.2 ms itself */
        slow += end - t0 >= BENCH_SLOW_S;
    }
    assert_true(slow == 31);
}

/* The thread wakes (its ticks grow) and stops when asked, handing its log over. */
static void test_meter_runs(void **state)
{
    (void)state;
    bench_meter_t *m = bench_meter_start();
    assert_non_null(m);
    double deadline = now_s() + 10;
    while (bench_meter_ticks(m) < 5 && now_s() < deadline)
        sched_yield();
    assert_true(bench_meter_ticks(m) >= 5);
    bench_spans_t late;
    bench_meter_stop(m, &late);
    assert_true(late.v != NULL);
    assert_true(late.n <= BENCH_SPANS);
    bench_spans_free(&late);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_is_bounded), cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_meter_woke),     cmocka_unit_test(test_meter_runs),
        cmocka_unit_test(test_paced_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

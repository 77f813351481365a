/*
 * test_bench_targets.c - issue 15's targets as the bench judges them
 * (bench/targets.c): each bound at and beside its limit, a row without a
 * figure not judged, the report's lines and count, the list bounded (what
 * is left out is counted and said), and the report emptying the list.
 */
#include "testutil.h"

#include "targets.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int verdict(double value, bench_bound_t bound, double limit)
{
    bench_target_t t = {.value = value, .limit = limit, .bound = bound, .unit = "us"};
    return bench_target_verdict(&t);
}

static void test_bounds(void **state)
{
    (void)state;
    assert_int_equal(verdict(400, BENCH_AT_MOST, 400), 1);
    assert_int_equal(verdict(400.5, BENCH_AT_MOST, 400), 0);
    assert_int_equal(verdict(49.9, BENCH_UNDER, 50), 1);
    assert_int_equal(verdict(50, BENCH_UNDER, 50), 0);
    assert_int_equal(verdict(70, BENCH_AT_LEAST, 70), 1);
    assert_int_equal(verdict(69.9, BENCH_AT_LEAST, 70), 0);
    assert_int_equal(verdict(NAN, BENCH_AT_MOST, 400), -1); /* the row had no sample */
    assert_int_equal(verdict(300, BENCH_AT_MOST, NAN), -1); /* nor its floor */
}

/* The report of @p ts into a string (the caller frees it); its return in @p met. */
static char *report(bench_targets_t *ts, int *met)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    *met = bench_targets_report(ts, "latency", out);
    assert_int_equal(fclose(out), 0);
    return text;
}

static void test_report(void **state)
{
    (void)state;
    bench_targets_t *ts = calloc(1, sizeof *ts);
    assert_non_null(ts);
    bench_target_add(ts, 443, BENCH_AT_MOST, 404, "us", "fsync light, ack p50 <= %s", "floor");
    bench_target_add(ts, 12.5, BENCH_AT_MOST, 20, "ms", "80%% of max, ack p99 <= 20 ms");
    bench_target_add(ts, NAN, BENCH_AT_MOST, 0, "publishes", "no sample");
    int met;
    char *text = report(ts, &met);
    assert_int_equal(met, 1);
    assert_non_null(strstr(text, "target  fsync light, ack p50 <= floor: 443 us, at most 404 us: "
                                 "not met\n"));
    assert_non_null(strstr(text, "target  80% of max, ack p99 <= 20 ms: 12.5 ms, at most 20 ms: "
                                 "met\n"));
    assert_non_null(strstr(text, "target  no sample: no figure: not judged\n"));
    assert_non_null(strstr(text, "targets 1 of 2 met in this run"));
    assert_null(strstr(text, "left out"));
    free(text);
    /* the report emptied the list: a second one writes nothing */
    assert_int_equal(ts->n, 0);
    text = report(ts, &met);
    assert_int_equal(met, 0);
    assert_true(text == NULL || text[0] == '\0');
    free(text);
    free(ts);
}

static void test_bounded(void **state)
{
    (void)state;
    bench_targets_t *ts = calloc(1, sizeof *ts);
    assert_non_null(ts);
    for (int i = 0; i < BENCH_TARGETS_MAX + 3; i++)
        bench_target_add(ts, i, BENCH_AT_LEAST, 0, "%", "row %d", i);
    assert_int_equal(ts->n, BENCH_TARGETS_MAX);
    assert_int_equal(ts->dropped, 3);
    int met;
    char *text = report(ts, &met);
    assert_int_equal(met, BENCH_TARGETS_MAX);
    char want[96];
    snprintf(want, sizeof want, "targets %d of %d met in this run", BENCH_TARGETS_MAX,
             BENCH_TARGETS_MAX);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof want, "; 3 more left out (a list holds %d)", BENCH_TARGETS_MAX);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof want, "target  row %d:", BENCH_TARGETS_MAX); /* the first left out */
    assert_null(strstr(text, want));
    free(text);
    free(ts);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_report),
        cmocka_unit_test(test_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

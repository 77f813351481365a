/*
 * test_snapcount.c - the snapshot scheduler's bounded map of per-thread
 * counts (broker/snapcount.c): counts kept per thread, never more than
 * AB__SNAPCOUNT_THREADS held whatever the number of threads, every held
 * thread found again after the evictions that shifted its cluster, an
 * evicted thread's counts restarting, and the ids it refuses.
 */
#include "snapcount.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MANY 20000 /* threads noted: about five times what the map holds */

static ab_str_t id_of(char *buf, size_t cap, int i)
{
    int n = snprintf(buf, cap, "thread-%d", i);
    return (ab_str_t){buf, (size_t)n};
}

static void test_counts_kept_per_thread(void **state)
{
    (void)state;
    ab__snapcounts_t m = {0};
    char b[32];
    assert_null(ab__snapcount_find(&m, id_of(b, sizeof b, 1))); /* nothing allocated yet */
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 100; i++) {
            ab__snapcount_t *c = ab__snapcount_slot(&m, id_of(b, sizeof b, i));
            assert_non_null(c);
            assert_int_equal(c->count, round);
            c->count++;
            c->bytes += (uint64_t)i;
        }
    assert_int_equal(m.n, 100);
    for (int i = 0; i < 100; i++) {
        ab__snapcount_t *c = ab__snapcount_find(&m, id_of(b, sizeof b, i));
        assert_non_null(c);
        assert_int_equal(c->count, 3);
        assert_int_equal(c->bytes, 3 * (uint64_t)i);
        assert_memory_equal(c->id, b, strlen(b));
    }
    assert_null(ab__snapcount_find(&m, id_of(b, sizeof b, 100)));
    ab__snapcount_free(&m);
    assert_null(m.slot);
}

/*
 * Past the bound every new thread evicts one: the map never holds more, each held thread
 * (tracked here by the count it was given) is found with its own count after all the
 * shifting, and an evicted thread comes back with its counts restarted.
 */
static void test_bound_and_evictions(void **state)
{
    (void)state;
    ab__snapcounts_t m = {0};
    char b[32];
    for (int i = 0; i < MANY; i++) {
        ab__snapcount_t *c = ab__snapcount_slot(&m, id_of(b, sizeof b, i));
        assert_non_null(c);
        assert_int_equal(c->count, 0);
        c->count = (uint32_t)i + 1; /* its own mark */
        assert_true(m.n <= AB__SNAPCOUNT_THREADS);
    }
    assert_int_equal(m.n, AB__SNAPCOUNT_THREADS);
    assert_int_equal(m.evictions, MANY - AB__SNAPCOUNT_THREADS);
    size_t held = 0, free_slots = 0;
    for (size_t s = 0; s < AB__SNAPCOUNT_SLOTS; s++) {
        assert_true((m.hash[s] == 0) == (m.slot[s].len == 0)); /* invariant 1 */
        free_slots += m.hash[s] == 0;
    }
    assert_int_equal(free_slots, AB__SNAPCOUNT_SLOTS - AB__SNAPCOUNT_THREADS);
    int evicted = -1;
    for (int i = 0; i < MANY; i++) {
        ab__snapcount_t *c = ab__snapcount_find(&m, id_of(b, sizeof b, i));
        if (c == NULL) {
            evicted = i;
            continue;
        }
        assert_int_equal(c->count, (uint32_t)i + 1); /* its own counts, not a neighbour's */
        held++;
    }
    assert_int_equal(held, AB__SNAPCOUNT_THREADS); /* every held thread is found */
    assert_true(evicted >= 0);
    ab__snapcount_t *back = ab__snapcount_slot(&m, id_of(b, sizeof b, evicted));
    assert_non_null(back);
    assert_int_equal(back->count, 0); /* restarted */
    assert_int_equal(m.n, AB__SNAPCOUNT_THREADS);
    ab__snapcount_free(&m);
}

static void test_refused_ids(void **state)
{
    (void)state;
    ab__snapcounts_t m = {0};
    char big[AB_ID_MAX_BYTES + 1];
    memset(big, 'x', sizeof big);
    assert_null(ab__snapcount_slot(&m, (ab_str_t){"", 0}));
    assert_null(ab__snapcount_slot(&m, (ab_str_t){big, sizeof big}));
    assert_int_equal(m.n, 0);
    ab__snapcount_t *c = ab__snapcount_slot(&m, (ab_str_t){big, AB_ID_MAX_BYTES});
    assert_non_null(c); /* the longest id fits */
    assert_int_equal(c->len, AB_ID_MAX_BYTES);
    assert_ptr_equal(ab__snapcount_find(&m, (ab_str_t){big, AB_ID_MAX_BYTES}), c);
    assert_null(ab__snapcount_find(&m, (ab_str_t){big, AB_ID_MAX_BYTES - 1}));
    ab__snapcount_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_kept_per_thread),
        cmocka_unit_test(test_bound_and_evictions),
        cmocka_unit_test(test_refused_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

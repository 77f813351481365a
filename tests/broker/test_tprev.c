/*
 * test_tprev.c - the writer's table of each thread's last position
 * (broker/tprev.c): exact answers for held threads across interleaved
 * threads, a bound after a start with a non-empty store, a gap or an
 * eviction, never an answer that hides an event of the thread, and at most
 * AB__TPREV_SETS * AB__TPREV_WAYS threads held whatever the number noted.
 */
#include "testutil.h"
#include "tprev.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ab_str_t S(const char *s)
{
    return (ab_str_t){s, strlen(s)};
}

static uint64_t note(ab__tprev_t *t, const char *thread, uint64_t pos)
{
    uint64_t prev = UINT64_MAX;
    assert_true(ab__tprev_note(t, S(thread), pos, &prev));
    assert_true(prev < pos);
    return prev;
}

/* Interleaved threads chain exactly; a new thread of an empty store answers 0. */
static void test_chain_interleaved(void **state)
{
    (void)state;
    ab__tprev_t t;
    assert_int_equal(ab__tprev_init(&t, 0, 0), AB_OK);
    assert_int_equal(note(&t, "a", 1), 0);
    assert_int_equal(note(&t, "a", 2), 1); /* one group, one thread: each after the other */
    assert_int_equal(note(&t, "a", 3), 2);
    assert_int_equal(note(&t, "b", 4), 0);
    assert_int_equal(note(&t, "a", 5), 3);
    assert_int_equal(note(&t, "b", 6), 4);
    assert_int_equal(note(&t, "c", 7), 0);
    assert_int_equal(note(&t, "b", 8), 6);
    assert_int_equal(t.hits, 5);
    assert_int_equal(ab__tprev_count(&t), 3);
    ab__tprev_free(&t);
}

/* A start over a store with events: an unknown thread's answer is the head
 * (nothing of it above), and the chain is exact from its first event on. */
static void test_start_bound(void **state)
{
    (void)state;
    ab__tprev_t t;
    assert_int_equal(ab__tprev_init(&t, 0, 100), AB_OK);
    assert_int_equal(note(&t, "old", 101), 100);
    assert_int_equal(note(&t, "other", 102), 100);
    assert_int_equal(note(&t, "old", 103), 101);
    ab__tprev_free(&t);
}

/* Positions that are skipped (a lost follower read) or do not grow: nothing
 * before them is claimed any more. */
static void test_gaps(void **state)
{
    (void)state;
    ab__tprev_t t;
    assert_int_equal(ab__tprev_init(&t, 0, 0), AB_OK);
    assert_int_equal(note(&t, "a", 1), 0);
    assert_int_equal(note(&t, "b", 2), 0);
    /* 3..9 never noted: "a" may have events there */
    assert_int_equal(note(&t, "a", 10), 9);
    assert_int_equal(note(&t, "a", 11), 10);
    assert_int_equal(note(&t, "b", 12), 9);
    uint64_t prev = 0;
    assert_false(ab__tprev_note(&t, S("a"), 12, &prev)); /* not growing: no answer */
    assert_int_equal(note(&t, "a", 13), 12);
    assert_int_equal(t.gaps, 2);
    ab__tprev_free(&t);
}

/* Many more threads than the table holds: memory stays bounded, and every
 * answer is checked against the truth (a thread's real previous position
 * must never lie between the answer and pos). */
static void test_bounded_never_wrong(void **state)
{
    (void)state;
    enum { THREADS = 3000, EVENTS = 60000 };
    ab__tprev_t t;
    assert_int_equal(ab__tprev_init(&t, 64, 0), AB_OK); /* 64 sets: 256 threads */
    assert_int_equal(t.nsets, 64);
    uint64_t *last = calloc(THREADS, sizeof(*last));
    assert_non_null(last);
    uint64_t x = 12345, exact = 0;
    char id[32];
    for (uint64_t pos = 1; pos <= EVENTS; pos++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        /* a skewed choice: a few hot threads, a long tail of cold ones */
        uint64_t r = (x >> 33) % 100;
        size_t th = r < 70 ? (size_t)((x >> 20) % 16) : (size_t)((x >> 20) % THREADS);
        snprintf(id, sizeof id, "thread-%zu", th);
        uint64_t prev = note(&t, id, pos);
        assert_true(prev >= last[th]); /* nothing of the thread between prev and pos */
        exact += prev == last[th];
        last[th] = pos;
        assert_true(ab__tprev_count(&t) <= 64 * AB__TPREV_WAYS);
    }
    assert_true(t.evictions > 0);
    assert_true(exact > EVENTS / 2); /* the hot threads stay held */
    free(last);
    ab__tprev_free(&t);
}

/* The default size is the documented bound (docs/PROTOCOL.md section 5). */
static void test_default_bound(void **state)
{
    (void)state;
    ab__tprev_t t;
    assert_int_equal(ab__tprev_init(&t, 0, 0), AB_OK);
    assert_int_equal(t.nsets * AB__TPREV_WAYS, 16384);
    char id[32];
    for (uint64_t pos = 1; pos <= 40000; pos++) {
        snprintf(id, sizeof id, "t%llu", (unsigned long long)pos);
        (void)note(&t, id, pos); /* new threads: any answer below pos is true */
    }
    size_t held = ab__tprev_count(&t); /* sets by hash: a few may hold fewer than 4 */
    assert_true(held <= 16384 && held > 16000);
    assert_int_equal(t.evictions, 40000 - held);
    ab__tprev_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_interleaved),
        cmocka_unit_test(test_start_bound),
        cmocka_unit_test(test_gaps),
        cmocka_unit_test(test_bounded_never_wrong),
        cmocka_unit_test(test_default_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

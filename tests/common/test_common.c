/*
 * test_common.c - the header-only helpers of common/ab_common.h: FNV-1a
 * against its published test vectors, the doubling array's growth, overflow
 * refusal and failure behaviour, and the monotonic clock's direction.
 */
#include "ab_common.h"
#include "testutil.h"

#include <string.h>

static void test_fnv_vectors(void **state)
{
    (void)state;
    /* Vectors from the FNV reference (Fowler, Noll, Vo): "", "a", "foobar". */
    assert_true(ab__fnv64("", 0) == 0xcbf29ce484222325ull);
    assert_true(ab__fnv64("a", 1) == 0xaf63dc4c8601ec8cull);
    assert_true(ab__fnv64("foobar", 6) == 0x85944171f73967e8ull);
    assert_true(ab__fnv32_more(AB__FNV32_BASIS, "a", 1) == 0xe40c292cu);
    assert_true(ab__fnv32_more(AB__FNV32_BASIS, "foobar", 6) == 0xbf9cf968u);
    /* Continuing a hash is hashing the concatenation. */
    assert_true(ab__fnv64_more(ab__fnv64("foo", 3), "bar", 3) == ab__fnv64("foobar", 6));
}

static void test_grow_doubles(void **state)
{
    (void)state;
    size_t cap = 0;
    int *a = ab__grow(NULL, &cap, 1, sizeof(int), 4);
    assert_non_null(a);
    assert_int_equal(cap, 4);
    for (int i = 0; i < 4; i++)
        a[i] = i;
    int *same = ab__grow(a, &cap, 4, sizeof(int), 4); /* room already */
    assert_ptr_equal(same, a);
    assert_int_equal(cap, 4);
    a = ab__grow(a, &cap, 9, sizeof(int), 4);
    assert_non_null(a);
    assert_int_equal(cap, 16);
    for (int i = 0; i < 4; i++)
        assert_int_equal(a[i], i); /* the elements moved with the array */
    free(a);
}

static void test_grow_refuses_overflow(void **state)
{
    (void)state;
    size_t cap = 8;
    char buf[8];
    assert_null(ab__grow(buf, &cap, SIZE_MAX, 1, 8));
    assert_int_equal(cap, 8);
    assert_null(ab__grow(buf, &cap, SIZE_MAX / 4, 64, 8)); /* count fits, bytes do not */
    assert_int_equal(cap, 8);
}

static int g_fail_next;
static void *failing_realloc(void *p, size_t n)
{
    if (g_fail_next)
        return NULL;
    return realloc(p, n);
}

static void test_grow_failure_keeps_array(void **state)
{
    (void)state;
    size_t cap = 0;
    char *a = ab__grow_with(failing_realloc, NULL, &cap, 3, 1, 2);
    assert_non_null(a);
    assert_int_equal(cap, 4);
    memcpy(a, "abc", 4);
    g_fail_next = 1;
    assert_null(ab__grow_with(failing_realloc, a, &cap, 5, 1, 2));
    assert_int_equal(cap, 4);      /* unchanged ... */
    assert_string_equal(a, "abc"); /* ... and the array still valid */
    free(a);
}

static void test_clock_moves_forward(void **state)
{
    (void)state;
    int64_t ms = ab__mono_ms();
    double s = ab__mono_s();
    assert_true(ms >= 0);
    assert_true(ab__mono_ms() >= ms);
    assert_true(ab__mono_s() >= s);
    assert_true(s * 1000.0 + 1000.0 > (double)ms); /* the same clock in two units */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fnv_vectors),
        cmocka_unit_test(test_grow_doubles),
        cmocka_unit_test(test_grow_refuses_overflow),
        cmocka_unit_test(test_grow_failure_keeps_array),
        cmocka_unit_test(test_clock_moves_forward),
    };
    return cmocka_run_group_tests_name("common", tests, NULL, NULL);
}

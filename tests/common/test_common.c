/*
 * test_common.c - the header-only helpers of common/ab_common.h: FNV-1a
 * against its published test vectors, the doubling array's growth, overflow
 * refusal and failure behaviour, the monotonic clock's direction, and the
 * UTF-8 cut at its edges (inside 2-, 3- and 4-byte characters, exact fit,
 * invalid bytes, a zero limit).
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

/* ab__utf8_cut(): the longest valid UTF-8 prefix of at most max bytes. */
static void test_utf8_cut(void **state)
{
    (void)state;
    const char *e2 = "ab\xc3\xa9";               /* a, b, e-acute (2 bytes) */
    const char *e3 = "a\xe2\x82\xac";            /* a, euro sign (3 bytes) */
    const char *e4 = "a\xf0\x9f\x98\x80";        /* a, a smile (4 bytes) */
    assert_int_equal(ab__utf8_cut(e2, 4, 4), 4); /* exact fit */
    assert_int_equal(ab__utf8_cut(e2, 4, 9), 4); /* room to spare */
    assert_int_equal(ab__utf8_cut(e2, 4, 3), 2); /* inside the 2-byte sequence */
    assert_int_equal(ab__utf8_cut(e3, 4, 3), 1); /* inside the 3-byte one, after 1 byte ... */
    assert_int_equal(ab__utf8_cut(e3, 4, 2), 1); /* ... and after its lead */
    assert_int_equal(ab__utf8_cut(e4, 5, 4), 1); /* inside the 4-byte one, after 3 bytes ... */
    assert_int_equal(ab__utf8_cut(e4, 5, 2), 1); /* ... and after its lead */
    assert_int_equal(ab__utf8_cut(e4, 5, 5), 5);
    assert_int_equal(ab__utf8_cut(e4, 4, 9), 1); /* n itself cuts it short */
    assert_int_equal(ab__utf8_cut(e2, 4, 0), 0); /* zero limit */
    assert_int_equal(ab__utf8_cut("", 0, 8), 0);
    assert_int_equal(ab__utf8_cut("\xc3\xa9", 2, 1), 0); /* nothing whole fits */
    /* invalid bytes: the prefix ends before the first, wherever the limit is */
    static const struct {
        const char *s;
        size_t n, max, want;
    } bad[] = {
        {"ab\xff-d", 5, 5, 2},          /* not UTF-8 at all */
        {"ab\x80-d", 5, 5, 2},          /* a stray continuation */
        {"ab\xc0\xaf-d", 6, 6, 2},      /* an overlong '/' */
        {"a\xed\xa0\x80-", 5, 5, 1},    /* a surrogate */
        {"a\xf4\x90\x80\x80", 5, 5, 1}, /* above U+10FFFF */
        {"a\xc3x", 3, 3, 1},            /* a lead byte without its continuation */
        {"ab\xff-d", 5, 2, 2},          /* past the limit: not looked at */
        {"a\0b", 3, 3, 3},              /* NUL is a character */
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
        assert_int_equal(ab__utf8_cut(bad[k].s, bad[k].n, bad[k].max), bad[k].want);
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
        cmocka_unit_test(test_utf8_cut),
        cmocka_unit_test(test_grow_doubles),
        cmocka_unit_test(test_grow_refuses_overflow),
        cmocka_unit_test(test_grow_failure_keeps_array),
        cmocka_unit_test(test_clock_moves_forward),
    };
    return cmocka_run_group_tests_name("common", tests, NULL, NULL);
}

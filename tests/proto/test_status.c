/*
 * test_status.c - the status table, the error struct, ids and negotiation.
 */
#include "agentbus/ids.h"
#include "agentbus/nego.h"
#include "testutil.h"

#include "agentbus/value.h"

#include <stdio.h>
#include <string.h>

static void test_names_roundtrip(void **state)
{
    (void)state;
    for (int i = 0; i < AB_STATUS_COUNT_; i++) {
        const char *n = ab_status_name((ab_status_t)i);
        ab_status_t back;
        assert_int_equal(ab_status_from_name(n, strlen(n), &back), AB_OK);
        assert_int_equal(back, i);
    }
    ab_status_t s;
    assert_int_equal(ab_status_from_name("nope", 4, &s), AB_NOT_FOUND);
    assert_string_equal(ab_status_name(AB_GAP), "gap");
    assert_string_equal(ab_status_name(AB_RUN_TERMINAL), "run_terminal");
    assert_true(ab_status_retryable(AB_OVERLOADED));
    assert_true(ab_status_retryable(AB_UNAVAILABLE));
    assert_false(ab_status_retryable(AB_CONFLICT));
    assert_false(ab_status_retryable(AB_INCOMPATIBLE_VERSION));
}

static void test_first_error_wins(void **state)
{
    (void)state;
    ab_error_t e = AB_ERROR_INIT;
    assert_int_equal(ab_error_set(&e, AB_GAP, "seq", "expected %d", 7), AB_GAP);
    ab_error_detail_int(&e, "expected_seq", 7);
    assert_int_equal(ab_error_set(&e, AB_INTERNAL, "x", "later"), AB_INTERNAL);
    assert_int_equal(e.code, AB_GAP);
    assert_string_equal(e.field, "seq");
    assert_string_equal(e.message, "expected 7");
    assert_int_equal(ab_error_detail(&e, "expected_seq")->i, 7);
    assert_null(ab_error_detail(&e, "nope"));
    ab_error_prefix_field(&e, "/results/2/");
    assert_string_equal(e.field, "/results/2/seq");
    char buf[128];
    assert_string_equal(ab_error_format(&e, buf, sizeof(buf)),
                        "gap: expected 7 (at /results/2/seq)");
    for (int i = 0; i < 10; i++) /* bounded */
        ab_error_detail_str(&e, "k", "v");
    assert_int_equal(e.ndetails, AB_ERROR_DETAILS_MAX);
    ab_error_clear(&e);
    assert_int_equal(e.code, AB_OK);
    assert_int_equal(ab_error_set(NULL, AB_GAP, NULL, "x"), AB_GAP); /* NULL-safe */
}

static void test_ids(void **state)
{
    (void)state;
    ab_error_t e = AB_ERROR_INIT;
    assert_int_equal(ab_id_check("thread-1", 8, 0, "thread", &e), AB_OK);
    assert_int_equal(ab_id_check("caf\xc3\xa9 \xe2\x9c\x93", 9, 0, "run", &e), AB_OK);
    const char *bad[] = {"", "a\nb", "a\x7f", "a\x00b", "\xc2\x85x", "\xff"};
    const size_t len[] = {0, 3, 2, 3, 3, 1};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ab_error_clear(&e);
        assert_int_equal(ab_id_check(bad[i], len[i], 0, "run", &e), AB_INVALID_ENVELOPE);
        tu_assert_error(&e, AB_INVALID_ENVELOPE, "run");
    }
    char long_id[258];
    memset(long_id, 'x', sizeof(long_id));
    assert_int_equal(ab_id_check(long_id, 256, 0, "thread", &e), AB_OK);
    ab_error_clear(&e);
    assert_int_equal(ab_id_check(long_id, 257, 0, "thread", &e), AB_INVALID_ENVELOPE);
    assert_int_equal(ab_error_detail(&e, "limit")->i, 256);
    ab_error_clear(&e);
    assert_int_equal(ab_id_check(long_id, 11, 10, "thread", &e), AB_INVALID_ENVELOPE);
}

/* Ids of 1 to 24 bytes with every byte value at every place among printable ASCII: ids.c
 * checks 8 bytes at a time where it can, so a byte refused at any place of any word (or of
 * the overlapping tail) must be refused, and every printable one accepted. A lone byte
 * from 0x80 is not UTF-8. */
static void test_id_check_every_byte_everywhere(void **state)
{
    (void)state;
    char id[24];
    for (size_t len = 1; len <= sizeof id; len++)
        for (size_t at = 0; at < len; at++)
            for (unsigned v = 0; v < 256; v++) {
                memset(id, 'k', len);
                id[at] = (char)v;
                ab_error_t e = AB_ERROR_INIT;
                ab_status_t want = v >= 0x20 && v <= 0x7e ? AB_OK : AB_INVALID_ENVELOPE;
                if (ab_id_check(id, len, 0, "run", &e) != want)
                    fail_msg("byte 0x%02x at %zu of %zu: %s", v, at, len, e.message);
            }
    /* two words, a control character in the second only; UTF-8 after 8 ASCII bytes */
    ab_error_t e = AB_ERROR_INIT;
    assert_int_equal(ab_id_check("abcdefgh\x01"
                                 "bcdefgh",
                                 16, 0, "run", &e),
                     AB_INVALID_ENVELOPE);
    assert_non_null(strstr(e.message, "at byte 8"));
    assert_int_equal(ab_id_check("thread-caf\xc3\xa9", 12, 0, "thread", &e), AB_OK);
    assert_int_equal(ab_id_check("thread-\xc2\x85"
                                 "Abcdefgh",
                                 17, 0, "thread", &e),
                     AB_INVALID_ENVELOPE);
}

static void test_version_negotiation(void **state)
{
    (void)state;
    const uint32_t ours[] = {1, 2, 3};
    const uint32_t theirs[] = {2, 3, 4};
    uint32_t chosen = 0;
    ab_error_t e = AB_ERROR_INIT;
    assert_int_equal(ab_version_negotiate(ours, 3, theirs, 3, &chosen, &e), AB_OK);
    assert_int_equal(chosen, 3);
    const uint32_t other[] = {7, 9};
    chosen = 42;
    assert_int_equal(ab_version_negotiate(ours, 3, other, 2, &chosen, &e), AB_INCOMPATIBLE_VERSION);
    assert_int_equal(chosen, 42); /* untouched */
    assert_false(e.retryable);
    assert_string_equal(ab_error_detail(&e, "ours")->s, "1,2,3");
    assert_string_equal(ab_error_detail(&e, "theirs")->s, "7,9");
    ab_error_clear(&e);
    assert_int_equal(ab_version_negotiate(ours, 3, other, 0, &chosen, &e), AB_INVALID_ARGUMENT);
    size_t n;
    const uint32_t *vs = ab_versions_supported(&n);
    assert_true(n >= 1);
    assert_int_equal(vs[n - 1], AB_PROTOCOL_VERSION);
    assert_true(ab_version_supported(AB_PROTOCOL_VERSION));
    assert_false(ab_version_supported(AB_PROTOCOL_VERSION + 1));
}

static void test_capabilities(void **state)
{
    (void)state;
    const ab_cap_t caps[] = {
        {"replay", 6, AB_CAP_AVAILABLE},
        {"heads", 5, AB_CAP_DEGRADED},
        {"durableThreadSnapshots", 22, AB_CAP_UNSUPPORTED},
        {"publish", 7, AB_CAP_UNAVAILABLE},
    };
    assert_int_equal(ab_caps_lookup(caps, 4, "replay"), AB_CAP_AVAILABLE);
    assert_int_equal(ab_caps_lookup(caps, 4, "missing"), AB_CAP_UNKNOWN);
    ab_error_t e = AB_ERROR_INIT;
    assert_int_equal(ab_caps_require(caps, 4, "heads", &e), AB_OK);
    assert_int_equal(ab_caps_require(caps, 4, "durableThreadSnapshots", &e), AB_UNSUPPORTED);
    ab_error_clear(&e);
    assert_int_equal(ab_caps_require(caps, 4, "publish", &e), AB_UNAVAILABLE);
    assert_true(e.retryable);
    ab_error_clear(&e);
    assert_int_equal(ab_caps_require(caps, 4, "missing", &e), AB_UNSUPPORTED);
    ab_cap_state_t s;
    assert_int_equal(ab_cap_state_from("degraded", 8, &s), AB_OK);
    assert_int_equal(s, AB_CAP_DEGRADED);
    assert_int_equal(ab_cap_state_from("unknown", 7, &s), AB_INVALID_ENVELOPE);
    assert_string_equal(ab_cap_state_name(AB_CAP_UNSUPPORTED), "unsupported");
}

/* The error is small (status.h) and what does not fit is cut where it stays well-formed. */
static void test_error_is_small(void **state)
{
    (void)state;
    assert_true(sizeof(ab_error_t) <= 360);
    ab_error_t e = AB_ERROR_INIT;
    char msg[400], path[200];
    memset(msg, 'a', sizeof(msg));
    memcpy(msg + AB_ERROR_MESSAGE_MAX - 3, "\xc3\xa9\xc3\xa9", 4); /* é straddles the end */
    msg[sizeof(msg) - 1] = '\0';
    size_t n = 0;
    for (int i = 0; n + 8 < sizeof(path); i++)
        n += (size_t)snprintf(path + n, sizeof(path) - n, "/seg%d", i);
    ab_error_set(&e, AB_INVALID_EVENT, path, "%s", msg);
    assert_true(strlen(e.message) < AB_ERROR_MESSAGE_MAX);
    assert_true(ab_utf8_valid(e.message, strlen(e.message)));
    assert_true(strlen(e.field) < AB_ERROR_FIELD_MAX);
    assert_memory_equal(e.field, path, strlen(e.field)); /* a prefix of the path ... */
    assert_true(path[strlen(e.field)] == '/');           /* ... ending at a whole segment */
    ab_error_detail_int(&e, "expected_seq", 7);
    ab_error_detail_str(&e, "rule", "active-run-terminal");
    ab_error_detail_int(&e, "retry_after_ms", 5);
    ab_error_detail_int(&e, "dropped", 1); /* past the last slot */
    assert_int_equal(e.ndetails, AB_ERROR_DETAILS_MAX);
    assert_int_equal(ab_error_detail(&e, "expected_seq")->i, 7);
    assert_string_equal(ab_error_detail(&e, "rule")->s, "active-run-terminal");
    assert_int_equal(ab_error_detail(&e, "retry_after_ms")->i, 5);
    assert_null(ab_error_detail(&e, "dropped"));
}

/* A message or string detail cut at its limit is valid UTF-8 even when the text was not:
 * the cut ends before the first byte that is not UTF-8, as the wire's encoding of the error
 * does (before: the cut only stepped back over a split character and kept the bad byte). */
static void test_error_cut_invalid(void **state)
{
    (void)state;
    ab_error_t e = AB_ERROR_INIT;
    char msg[300];
    memset(msg, 'a', sizeof(msg));
    msg[10] = '\xff';
    msg[sizeof(msg) - 1] = '\0';
    ab_error_set(&e, AB_INVALID_EVENT, "", "%s", msg);
    assert_int_equal(strlen(e.message), 10);
    ab_error_detail_str(&e, "k", msg);
    assert_int_equal(strlen(ab_error_detail(&e, "k")->s), 10);
    /* not cut: kept as it is */
    ab_error_t f = AB_ERROR_INIT;
    ab_error_set(&f, AB_INVALID_EVENT, "", "%s", "short \xff");
    assert_string_equal(f.message, "short \xff");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_roundtrip),
        cmocka_unit_test(test_first_error_wins),
        cmocka_unit_test(test_error_is_small),
        cmocka_unit_test(test_error_cut_invalid),
        cmocka_unit_test(test_ids),
        cmocka_unit_test(test_id_check_every_byte_everywhere),
        cmocka_unit_test(test_version_negotiation),
        cmocka_unit_test(test_capabilities),
    };
    return cmocka_run_group_tests_name("status", tests, NULL, NULL);
}

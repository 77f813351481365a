/*
 * test_codec_peek.c - ab_msg_peek(): the cid and v of headers that do not
 * decode, and ab_msg_decode() echoing them in its error (PROTOCOL.md 7.1,
 * 8.1; issue 11 "the wire spec says what is true", items 4 and 5).
 */
#include "testutil.h"

#include "agentbus/codec.h"

#include <stdio.h>
#include <string.h>

/* Bytes from a hex string (spaces ignored) into @p out; @return the length. */
static size_t hex(const char *h, uint8_t *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = h; *p && n < cap;) {
        if (*p == ' ') {
            p++;
            continue;
        }
        unsigned b = 0;
        assert_int_equal(sscanf(p, "%2x", &b), 1);
        out[n++] = (uint8_t)b;
        p += 2;
    }
    return n;
}

static void peek_hex(const char *h, bool map, uint64_t cid, uint32_t v)
{
    uint8_t buf[512];
    size_t n = hex(h, buf, sizeof(buf));
    uint64_t c = 99;
    uint32_t vv = 99;
    assert_int_equal(ab_msg_peek(buf, n, &c, &vv), map);
    assert_int_equal(c, cid);
    assert_int_equal(vv, v);
}

static void test_plain_headers(void **state)
{
    (void)state;
    /* {"op":"ping","v":1,"cid":7} */
    peek_hex("83 a26f70 a470696e67 a176 01 a3636964 07", true, 7, 1);
    /* cid as uint64, v as uint8, a map16 header */
    peek_hex("de0003 a26f70 a470696e67 a176 cc01 a3636964 cf0000000100000000", true, 4294967296ull,
             1);
    /* no v (hello), cid uint32 */
    peek_hex("82 a26f70 a568656c6c6f a3636964 ce00010000", true, 65536, 0);
    /* keys in str8 form */
    peek_hex("82 d903636964 05 d90176 01", true, 5, 1);
}

static void test_faulty_headers(void **state)
{
    (void)state;
    /* a value 66 levels deep after the cid, and before it */
    char deep[600] = "84 a26f70 a470696e67 a176 01 a3636964 2a a178 ";
    for (int i = 0; i < 66; i++)
        strcat(deep, "91");
    strcat(deep, "c0");
    peek_hex(deep, true, 42, 1);
    char first[600] = "84 a178 ";
    for (int i = 0; i < 66; i++)
        strcat(first, "91");
    strcat(first, "c0 a26f70 a470696e67 a176 01 a3636964 2b");
    peek_hex(first, true, 43, 1);
    /* trailing bytes after the map are not looked at */
    peek_hex("82 a176 01 a3636964 09 c0 c1 ff", true, 9, 1);
    /* bin, ext and an invalid UTF-8 string before the cid are skipped by length */
    peek_hex("84 a162 c40301 0203 a165 d40105 a173 a2c3 28 a3636964 0b", true, 11, 0);
    /* a non-string key is skipped with its value */
    peek_hex("82 01 02 a3636964 0c", true, 12, 0);
}

static void test_refusals(void **state)
{
    (void)state;
    /* not a map */
    peek_hex("93 01 02 03", false, 0, 0);
    peek_hex("c1", false, 0, 0);
    /* cid of the wrong type: negative, string, float */
    peek_hex("81 a3636964 ff", true, 0, 0);
    peek_hex("81 a3636964 a131", true, 0, 0);
    peek_hex("81 a3636964 cb3ff0000000000000", true, 0, 0);
    /* v beyond 32 bits is not a version */
    peek_hex("82 a176 cf0000000100000000 a3636964 03", true, 3, 0);
    /* cut short: the cid before the cut is kept, nothing after it */
    peek_hex("83 a3636964 04 a26f70 a4706967", true, 4, 0);
    peek_hex("83 a26f70 a4706967", true, 0, 0);
    /* a count beyond the bytes left stops the scan before the cid */
    peek_hex("82 a178 ddffffffff a3636964 05", true, 0, 0);
    /* the byte never used */
    peek_hex("82 a178 c1 a3636964 06", true, 0, 0);
    uint64_t c = 5;
    uint32_t v = 5;
    assert_false(ab_msg_peek(NULL, 0, &c, &v));
    assert_int_equal(c, 0);
    assert_int_equal(v, 0);
}

/* ab_msg_decode() refuses these headers but its error echoes the cid. */
static void test_decode_echoes_cid(void **state)
{
    (void)state;
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    char deep[600] = "84 a26f70 a470696e67 a176 01 a3636964 2a a178 ";
    for (int i = 0; i < 64; i++)
        strcat(deep, "91");
    strcat(deep, "c0");
    uint8_t buf[512];
    size_t n = hex(deep, buf, sizeof(buf));
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_msg_decode(doc, buf, n, NULL, &m, &err), AB_TOO_LARGE);
    assert_int_equal(err.cid, 42);
    n = hex("83 a26f70 a470696e67 a176 01 a3636964 2b c0", buf, sizeof(buf));
    ab_error_clear(&err);
    assert_int_equal(ab_msg_decode(doc, buf, n, NULL, &m, &err), AB_INVALID_ENVELOPE);
    assert_int_equal(err.cid, 43);
    /* a first error is kept whole: its cid is not overwritten */
    ab_error_clear(&err);
    ab_error_set(&err, AB_GAP, "seq", "earlier");
    err.cid = 1;
    assert_int_equal(ab_msg_decode(doc, buf, n, NULL, &m, &err), AB_INVALID_ENVELOPE);
    assert_int_equal(err.code, AB_GAP);
    assert_int_equal(err.cid, 1);
    ab_doc_destroy(&doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_headers),
        cmocka_unit_test(test_faulty_headers),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_decode_echoes_cid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

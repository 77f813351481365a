/*
 * test_value.c - the strict msgpack reader: JSON-safe acceptance, every
 * rejection path with its code and JSON pointer, limits and helpers.
 */
#include "agentbus/json.h"
#include "testutil.h"
#include "value_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static ab_status_t parse_bytes(const void *p, size_t n, ab_error_t *err, const ab_val_t **root)
{
    static ab_doc_t *doc;
    if (!doc)
        assert_int_equal(ab_doc_new(&doc), AB_OK);
    const ab_val_t *r = NULL;
    ab_status_t rc =
        ab_doc_parse(doc, p, n, 1u << 20, 64, AB_INVALID_ENVELOPE, root ? root : &r, err);
    return rc;
}

#define EXPECT_FAIL(bytes, code, field)                                                            \
    do {                                                                                           \
        ab_error_t e_ = AB_ERROR_INIT;                                                             \
        assert_int_equal(parse_bytes(bytes, sizeof(bytes) - 1, &e_, NULL), code);                  \
        tu_assert_error(&e_, code, field);                                                         \
    } while (0)

static void test_scalars(void **state)
{
    (void)state;
    const ab_val_t *v;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(parse_bytes("\xd3\x80\x00\x00\x00\x00\x00\x00\x00", 9, &err, &v), AB_OK);
    assert_int_equal(v->type, AB_VAL_INT);
    assert_true(v->u.i == INT64_MIN);
    assert_int_equal(parse_bytes("\xcf\x7f\xff\xff\xff\xff\xff\xff\xff", 9, &err, &v), AB_OK);
    assert_true(v->u.i == INT64_MAX);
    assert_int_equal(parse_bytes("\xd0\xfe", 2, &err, &v), AB_OK);
    assert_int_equal(v->u.i, -2);
    assert_int_equal(parse_bytes("\xd1\xff\x00", 3, &err, &v), AB_OK);
    assert_int_equal(v->u.i, -256);
    assert_int_equal(parse_bytes("\xe0", 1, &err, &v), AB_OK);
    assert_int_equal(v->u.i, -32);
    assert_int_equal(parse_bytes("\xca\x3f\xc0\x00\x00", 5, &err, &v), AB_OK);
    assert_int_equal(v->type, AB_VAL_FLOAT);
    assert_true(v->u.f == 1.5);
    assert_int_equal(parse_bytes("\xc3", 1, &err, &v), AB_OK);
    assert_true(v->type == AB_VAL_BOOL && v->u.b);
    assert_int_equal(parse_bytes("\xc0", 1, &err, &v), AB_OK);
    assert_int_equal(v->type, AB_VAL_NULL);
}

/* Every msgpack integer is JSON-safe: uint 64 above INT64_MAX is AB_VAL_UINT, all else INT. */
static void test_uint64(void **state)
{
    (void)state;
    const ab_val_t *v;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(parse_bytes("\xcf\xff\xff\xff\xff\xff\xff\xff\xff", 9, &err, &v), AB_OK);
    assert_int_equal(v->type, AB_VAL_UINT);
    assert_true(v->u.u == UINT64_MAX);
    assert_string_equal(ab_val_type_name(v->type), "integer");
    assert_int_equal(parse_bytes("\xcf\x80\x00\x00\x00\x00\x00\x00\x00", 9, &err, &v), AB_OK);
    assert_int_equal(v->type, AB_VAL_UINT);
    assert_true(v->u.u == (uint64_t)INT64_MAX + 1);
    /* within int64, uint 64 and uint 8 give the same AB_VAL_INT: one number, one form */
    assert_int_equal(parse_bytes("\xcf\x00\x00\x00\x00\x00\x00\x00\x05", 9, &err, &v), AB_OK);
    assert_int_equal(v->type, AB_VAL_INT);
    assert_int_equal(v->u.i, 5);
    /* equality and packing keep the type; uint 64 is packed as uint 64 */
    static const char in[] = "\x93\xcf\xff\xff\xff\xff\xff\xff\xff\xfe\xd3\x80\x00\x00\x00\x00\x00"
                             "\x00\x00\xcf\x80\x00\x00\x00\x00\x00\x00\x00";
    ab_doc_t *d1, *d2;
    const ab_val_t *a, *b;
    assert_int_equal(ab_doc_new(&d1), AB_OK);
    assert_int_equal(ab_doc_new(&d2), AB_OK);
    assert_int_equal(
        ab_doc_parse(d1, (const uint8_t *)in, sizeof(in) - 1, 64, 4, AB_INVALID_EVENT, &a, &err),
        AB_OK);
    ab_buf_t out = AB_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &out, ab_buf_msgpack_write);
    assert_int_equal(ab__val_pack(&pk, a), AB_OK);
    assert_int_equal(out.len, sizeof(in) - 1);
    assert_memory_equal(out.data, in, out.len);
    assert_int_equal(ab_doc_parse(d2, out.data, out.len, 64, 4, AB_INVALID_EVENT, &b, &err), AB_OK);
    assert_true(ab_val_equal(a, b));
    assert_false(ab_val_equal(&a->u.items[0], &a->u.items[2]));
    assert_false(ab_val_equal(&a->u.items[1], &a->u.items[2])); /* -2^63 is not 2^63 */
    ab_buf_free(&out);
    ab_doc_destroy(&d1);
    ab_doc_destroy(&d2);
}

static void test_containers_and_views(void **state)
{
    (void)state;
    /* {"a":[1,"x"],"b":{}} */
    static const char in[] = "\x82\xa1\x61\x92\x01\xa1\x78\xa1\x62\x80";
    const ab_val_t *v;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(parse_bytes(in, sizeof(in) - 1, &err, &v), AB_OK);
    assert_int_equal(v->type, AB_VAL_MAP);
    const ab_val_t *a = ab_val_get(v, "a");
    assert_non_null(a);
    assert_int_equal(a->type, AB_VAL_ARRAY);
    assert_int_equal(a->len, 2);
    assert_true(ab_val_str_eq(&a->u.items[1], "x"));
    /* strings are views into the input, not copies */
    assert_ptr_equal(a->u.items[1].u.s, in + 6);
    assert_int_equal(ab_val_get(v, "b")->type, AB_VAL_MAP);
    assert_null(ab_val_get(v, "c"));
}

static void test_rejections(void **state)
{
    (void)state;
    EXPECT_FAIL("\x81\xa1k\xc4\x01\x00", AB_INVALID_ENVELOPE, "/k");                /* bin */
    EXPECT_FAIL("\x91\xd4\x01\x00", AB_INVALID_ENVELOPE, "/0");                     /* fixext */
    EXPECT_FAIL("\x81\xa1k\xc7\x01\x05\x00", AB_INVALID_ENVELOPE, "/k");            /* ext8 */
    EXPECT_FAIL("\x81\x01\x02", AB_INVALID_ENVELOPE, "");                           /* int key */
    EXPECT_FAIL("\x82\xa1k\x01\xa1k\x02", AB_INVALID_ENVELOPE, "/k");               /* duplicate */
    EXPECT_FAIL("\xa2\xc3\x28", AB_INVALID_ENVELOPE, "");                           /* bad UTF-8 */
    EXPECT_FAIL("\xa3\xed\xa0\x80", AB_INVALID_ENVELOPE, "");                       /* surrogate */
    EXPECT_FAIL("\xa2\xc0\x80", AB_INVALID_ENVELOPE, "");                           /* overlong */
    EXPECT_FAIL("\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00", AB_INVALID_ENVELOPE, "");   /* NaN */
    EXPECT_FAIL("\xcb\x7f\xf0\x00\x00\x00\x00\x00\x00", AB_INVALID_ENVELOPE, "");   /* inf */
    EXPECT_FAIL("\x91\xcf\xff\xff\xff\xff\xff\xff\xff", AB_INVALID_ENVELOPE, "/0"); /* short */
    EXPECT_FAIL("\xcf\xff\xff\xff\xff\xff\xff\xff\xff\x00", AB_INVALID_ENVELOPE, ""); /* trail */
    EXPECT_FAIL("\xc1", AB_INVALID_ENVELOPE, "");     /* never used */
    EXPECT_FAIL("\x01\x02", AB_INVALID_ENVELOPE, ""); /* trailing */
    EXPECT_FAIL("\x92\xa3"
                "ab",
                AB_INVALID_ENVELOPE, "/0");                                     /* truncated */
    EXPECT_FAIL("\xdd\xff\xff\xff\xff\x01", AB_INVALID_ENVELOPE, "");           /* huge count */
    EXPECT_FAIL("\xdb\x00\x00\x00\x09\x61", AB_INVALID_ENVELOPE, "");           /* short str */
    EXPECT_FAIL("\x81\xa3\x61\x2f\x7e\xc4\x00", AB_INVALID_ENVELOPE, "/a~1~0"); /* escaping */
    ab_error_t e = AB_ERROR_INIT;
    assert_int_equal(parse_bytes("", 0, &e, NULL), AB_INVALID_ENVELOPE);
}

static void test_depth_and_size_limits(void **state)
{
    (void)state;
    uint8_t deep[70];
    memset(deep, 0x91, sizeof(deep)); /* [[[[...1]]]] */
    ab_doc_t *doc;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    const ab_val_t *v;
    ab_error_t err = AB_ERROR_INIT;
    deep[63] = 0x01; /* 63 arrays + the integer = depth 64: allowed */
    assert_int_equal(ab_doc_parse(doc, deep, 64, 1024, 64, AB_INVALID_EVENT, &v, &err), AB_OK);
    deep[63] = 0x91;
    deep[64] = 0x01; /* depth 65 */
    assert_int_equal(ab_doc_parse(doc, deep, 65, 1024, 64, AB_INVALID_EVENT, &v, &err),
                     AB_TOO_LARGE);
    ab_error_clear(&err);
    assert_int_equal(ab_doc_parse(doc, deep, 65, 64, 100, AB_INVALID_EVENT, &v, &err),
                     AB_TOO_LARGE);
    assert_non_null(ab_error_detail(&err, "limit"));
    assert_int_equal(ab_error_detail(&err, "limit")->i, 64);
    ab_doc_destroy(&doc);
    assert_null(doc);
}

static void test_big_document_uses_extra_blocks(void **state)
{
    (void)state;
    /* an array of 100000 small maps: forces arena growth beyond the first block */
    ab_buf_t b = AB_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, ab_buf_msgpack_write);
    msgpack_pack_array(&pk, 100000);
    for (int i = 0; i < 100000; i++) {
        msgpack_pack_map(&pk, 1);
        msgpack_pack_str_with_body(&pk, "k", 1);
        msgpack_pack_int(&pk, i);
    }
    ab_doc_t *doc;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    const ab_val_t *v;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_doc_parse(doc, b.data, b.len, 1u << 24, 64, AB_INVALID_EVENT, &v, &err),
                     AB_OK);
    assert_int_equal(v->len, 100000);
    assert_int_equal(ab_val_get(&v->u.items[99999], "k")->u.i, 99999);
    /* reuse after reset */
    assert_int_equal(
        ab_doc_parse(doc, (const uint8_t *)"\x90", 1, 16, 4, AB_INVALID_EVENT, &v, &err), AB_OK);
    assert_int_equal(v->len, 0);
    ab_doc_destroy(&doc);
    ab_buf_free(&b);
}

/* ab_doc_keep: many parses into one arena, every tree valid until the reset. */
static void test_doc_keep(void **state)
{
    (void)state;
    ab_doc_t *doc;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    ab_doc_keep(doc, true);
    const ab_val_t *roots[3000];
    ab_error_t err = AB_ERROR_INIT;
    static uint8_t m[3000][6];       /* trees point into their input: keep every message */
    for (int i = 0; i < 3000; i++) { /* {"k": i}: well past the first 2 KiB block */
        const uint8_t one[6] = {0x81, 0xa1, 'k', 0xcd, (uint8_t)(i >> 8), (uint8_t)i};
        memcpy(m[i], one, sizeof(one));
        assert_int_equal(ab_doc_parse(doc, m[i], 6, 64, 4, AB_INVALID_EVENT, &roots[i], &err),
                         AB_OK);
    }
    assert_int_equal(
        ab_doc_parse(doc, (const uint8_t *)"\xc1", 1, 64, 4, AB_INVALID_EVENT, &roots[0], &err),
        AB_INVALID_EVENT); /* a failure leaves the earlier trees alone */
    for (int i = 0; i < 3000; i++)
        assert_int_equal(ab_val_get(roots[i], "k")->u.i, i);
    ab_doc_keep(doc, false); /* back to one tree per parse */
    const ab_val_t *v;
    assert_int_equal(
        ab_doc_parse(doc, (const uint8_t *)"\x90", 1, 16, 4, AB_INVALID_EVENT, &v, &err), AB_OK);
    assert_int_equal(v->type, AB_VAL_ARRAY);
    ab_doc_destroy(&doc);
}

static void test_large_map_duplicate_detection(void **state)
{
    (void)state;
    ab_buf_t b = AB_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, ab_buf_msgpack_write);
    msgpack_pack_map(&pk, 40);
    char key[16];
    for (int i = 0; i < 40; i++) {
        int n = snprintf(key, sizeof(key), "key%d", i == 39 ? 7 : i);
        msgpack_pack_str_with_body(&pk, key, (size_t)n);
        msgpack_pack_nil(&pk);
    }
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(parse_bytes(b.data, b.len, &err, NULL), AB_INVALID_ENVELOPE);
    tu_assert_error(&err, AB_INVALID_ENVELOPE, "/key7");
    ab_buf_free(&b);
}

static void test_utf8(void **state)
{
    (void)state;
    assert_true(ab_utf8_valid("h\xc3\xa9llo \xf0\x9f\x98\x80 plain ascii text", 27));
    assert_false(ab_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    assert_false(ab_utf8_valid("\xe2\x82", 2));         /* truncated */
    assert_false(ab_utf8_valid("abcdefgh\xff", 9));     /* after the fast path */
    assert_false(ab_utf8_valid("\xe0\x80\xaf", 3));     /* overlong */
}

/* ab__doc_parse_spans records root.activeEvents[i].event only (not the same keys deeper or in
 * another array), each span exactly one value of the input with its depth, and the depth of
 * the whole tree; a record marked lost records nothing; the parse is ab_doc_parse's. */
static void test_parse_spans(void **state)
{
    (void)state;
    static const char json[] =
        "{\"pre\":{\"activeEvents\":[{\"event\":{\"x\":[[[[1]]]]}}]},"
        "\"activeEvents\":[{\"run\":\"r1\",\"event\":{\"type\":\"A\",\"d\":[1,[2]]}},"
        "{\"event\":7,\"seq\":1},{\"seq\":2},{\"event\":{}}],"
        "\"post\":[{\"event\":1}]}";
    ab_buf_t mp = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    ab_doc_t *doc = NULL;
    assert_int_equal(
        ab_json_to_msgpack(json, sizeof json - 1, 64, 1u << 20, AB_INVALID_EVENT, &mp, &err),
        AB_OK);
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    const ab_val_t *root = NULL;
    ab__val_spans_t sp = {.outer = "activeEvents", .inner = "event"};
    assert_int_equal(
        ab__doc_parse_spans(doc, mp.data, mp.len, 1u << 20, 64, AB_CORRUPT, &root, &sp, &err),
        AB_OK);
    assert_int_equal(sp.n, 3); /* the item without an event has none */
    assert_false(sp.lost);
    assert_int_equal(sp.depth, tu_val_depth(root)); /* from pre.activeEvents, not recorded */
    assert_int_equal(sp.depth, 10);
    const ab_val_t *items = ab_val_get(root, "activeEvents");
    static const uint32_t item_of[3] = {0, 1, 3};
    for (size_t i = 0; i < sp.n; i++) {
        assert_true(sp.v[i].p >= mp.data && sp.v[i].p + sp.v[i].len <= mp.data + mp.len);
        ab_doc_t *one = NULL;
        const ab_val_t *v = NULL;
        assert_int_equal(ab_doc_new(&one), AB_OK); /* exactly one whole value: no trailing byte */
        assert_int_equal(
            ab_doc_parse(one, sp.v[i].p, sp.v[i].len, 1u << 20, 64, AB_CORRUPT, &v, &err), AB_OK);
        const ab_val_t *want = ab_val_get(&items->u.items[item_of[i]], "event");
        assert_int_equal(v->type, want->type);
        assert_int_equal(sp.v[i].depth, tu_val_depth(want));
        ab_doc_destroy(&one);
    }
    assert_int_equal(sp.v[0].depth, 4);
    assert_int_equal(sp.v[1].depth, 1);
    free(sp.v);
    ab__val_spans_t lost = {.outer = "activeEvents", .inner = "event", .lost = true};
    assert_int_equal(
        ab__doc_parse_spans(doc, mp.data, mp.len, 1u << 20, 64, AB_CORRUPT, &root, &lost, &err),
        AB_OK);
    assert_int_equal(lost.n, 0);
    assert_null(lost.v);
    /* under a map, not an array, the same keys are not an item's */
    static const char in_map[] = "{\"activeEvents\":{\"a\":{\"event\":1}}}";
    ab__val_spans_t none = {.outer = "activeEvents", .inner = "event"};
    ab_buf_reset(&mp);
    assert_int_equal(
        ab_json_to_msgpack(in_map, sizeof in_map - 1, 64, 1u << 20, AB_INVALID_EVENT, &mp, &err),
        AB_OK);
    assert_int_equal(
        ab__doc_parse_spans(doc, mp.data, mp.len, 1u << 20, 64, AB_CORRUPT, &root, &none, &err),
        AB_OK);
    assert_int_equal(none.n, 0);
    assert_int_equal(none.depth, 4);
    ab_doc_destroy(&doc);
    ab_buf_free(&mp);
}

static void test_pack_roundtrip(void **state)
{
    (void)state;
    tu_ctx_t c;
    tu_ctx_init(&c);
    const ab_val_t *v = tu_json(&c, "{\"a\":[1,-2,3.25,\"s\",null,true,{}],\"b\":[]}");
    ab_buf_t b = AB_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, ab_buf_msgpack_write);
    assert_int_equal(ab__val_pack(&pk, v), AB_OK);
    ab_doc_t *doc;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    const ab_val_t *w;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_doc_parse(doc, b.data, b.len, 1024, 64, AB_INVALID_EVENT, &w, &err), AB_OK);
    assert_true(ab_val_equal(v, w));
    ab_doc_destroy(&doc);
    ab_buf_free(&b);
    tu_ctx_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_uint64),
        cmocka_unit_test(test_containers_and_views),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_depth_and_size_limits),
        cmocka_unit_test(test_big_document_uses_extra_blocks),
        cmocka_unit_test(test_doc_keep),
        cmocka_unit_test(test_large_map_duplicate_detection),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_pack_roundtrip),
        cmocka_unit_test(test_parse_spans),
    };
    return cmocka_run_group_tests_name("value", tests, NULL, NULL);
}

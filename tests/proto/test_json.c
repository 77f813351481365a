/*
 * test_json.c - the JSON bridge: lossless round trips for every JSON-safe
 * value and the rejections of the JSON side. The parser's number mapping,
 * encodings and error positions are in test_json_parse.c.
 */
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* JSON text -> msgpack -> tree -> JSON text; returns a heap string. */
static char *roundtrip(const char *json)
{
    tu_ctx_t c;
    tu_ctx_init(&c);
    const ab_val_t *v = tu_json(&c, json);
    ab_buf_t out = AB_BUF_INIT;
    assert_int_equal(ab_val_to_json(v, &out), AB_OK);
    assert_int_equal(ab_buf_append(&out, "", 1), AB_OK);
    char *s = strdup((const char *)out.data);
    ab_buf_free(&out);
    tu_ctx_free(&c);
    return s;
}

static void expect_same(const char *json)
{
    char *s = roundtrip(json);
    assert_string_equal(s, json);
    free(s);
}

static void test_identity_cases(void **state)
{
    (void)state;
    expect_same("{}");
    expect_same("[]");
    expect_same("{\"a\":{},\"b\":[],\"c\":[{}],\"d\":null}");
    expect_same("{\"z\":1,\"a\":2,\"m\":3}"); /* key order is kept */
    expect_same("[9223372036854775807,-9223372036854775808,0,-1]");
    expect_same("[18446744073709551615,9223372036854775808]"); /* uint 64, exact */
    expect_same("[1767225600000.0,-9.223372036854776e+18]");   /* floats stay floats */
    expect_same("[0.1,1.0,-0.0,1e+300,2.5e-308,0.30000000000000004,123456789.125]");
    expect_same("[true,false,null,\"\"]");
    expect_same("\"tab\\tnl\\nquote\\\"bs\\\\ctl\\u0001\"");
    expect_same("\"h\xc3\xa9llo \xf0\x9f\x98\x80\"");
}

static void test_escapes_become_utf8(void **state)
{
    (void)state;
    char *s = roundtrip("\"\\u00e9\\ud83d\\ude00\\/\"");
    assert_string_equal(s, "\"\xc3\xa9\xf0\x9f\x98\x80/\"");
    free(s);
    /* NUL inside a string survives */
    tu_ctx_t c;
    tu_ctx_init(&c);
    const ab_val_t *v = tu_json(&c, "\"a\\u0000b\"");
    assert_int_equal(v->len, 3);
    assert_int_equal(v->u.s[1], '\0');
    tu_ctx_free(&c);
}

static void test_doubles_roundtrip_exactly(void **state)
{
    (void)state;
    const double samples[] = {0.1,  1.0 / 3.0, DBL_MAX, DBL_MIN,           5e-324,
                              -2.5, 1e21,      1e-7,    9007199254740993.0};
    for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
        char text[64];
        int n = snprintf(text, sizeof(text), "[%.17g", samples[i]);
        snprintf(text + n, sizeof(text) - (size_t)n, "%s]", strpbrk(text, ".e") ? "" : ".0");
        tu_ctx_t c;
        tu_ctx_init(&c);
        const ab_val_t *v = tu_json(&c, text);
        ab_buf_t out = AB_BUF_INIT;
        assert_int_equal(ab_val_to_json(v, &out), AB_OK);
        assert_int_equal(ab_buf_append(&out, "", 1), AB_OK);
        const ab_val_t *w = tu_json(&c, (const char *)out.data);
        assert_int_equal(w->u.items[0].type, AB_VAL_FLOAT);
        assert_memory_equal(&w->u.items[0].u.f, &samples[i], sizeof(double));
        ab_buf_free(&out);
        tu_ctx_free(&c);
    }
}

static void expect_reject(const char *json, ab_status_t code, const char *field)
{
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_buf_append(&b, "xy", 2), AB_OK);
    assert_int_equal(ab_json_to_msgpack(json, strlen(json), 4, 64, AB_INVALID_EVENT, &b, &err),
                     code);
    tu_assert_error(&err, code, field);
    assert_int_equal(b.len, 2); /* output untouched on failure */
    ab_buf_free(&b);
}

static void test_rejections(void **state)
{
    (void)state;
    expect_reject("{\"a\":1,\"a\":2}", AB_INVALID_EVENT, "/a");
    expect_reject("{\"a\":", AB_INVALID_EVENT, "/a");
    expect_reject("[1] x", AB_INVALID_EVENT, "");
    expect_reject("[1e999]", AB_INVALID_EVENT, "/0");
    expect_reject("NaN", AB_INVALID_EVENT, "");
    expect_reject("\"\\ud800\"", AB_INVALID_EVENT, "");
    expect_reject("{\"a\":[[[[1]]]]}", AB_TOO_LARGE, "/a/0/0/0");
    expect_reject("[\"0123456789012345678901234567890123456789012345678901234567890123\"]",
                  AB_TOO_LARGE, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_cases),
        cmocka_unit_test(test_escapes_become_utf8),
        cmocka_unit_test(test_doubles_roundtrip_exactly),
        cmocka_unit_test(test_rejections),
    };
    return cmocka_run_group_tests_name("json", tests, NULL, NULL);
}

/*
 * test_json_parse.c - the JSON bridge's parser (proto/json_parse.c): every
 * JSON number carried (exact integers up to uint 64, the nearest double
 * otherwise, no infinities), the encodings it writes (compared with what
 * msgpack-c writes for the same value), duplicate keys in small and big
 * objects, malformed input refused with its line, column and JSON pointer,
 * and the memory bound (every allocation is counted: main() installs a
 * counting allocator).
 */
#include "agentbus/alloc.h"
#include "testutil.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ab_status_t to_mp(const char *json, size_t len, uint32_t max_bytes, ab_buf_t *out,
                         ab_error_t *err)
{
    return ab_json_to_msgpack(json, len, 8, max_bytes, AB_INVALID_EVENT, out, err);
}

static size_t unhex(const char *hex, uint8_t *out)
{
    size_t n = 0;
    for (; hex[0] && hex[1]; hex += 2) {
        unsigned b = 0;
        assert_int_equal(sscanf(hex, "%2x", &b), 1);
        out[n++] = (uint8_t)b;
    }
    return n;
}

static void expect_bytes(const char *json, const char *hex)
{
    uint8_t want[64];
    size_t n = unhex(hex, want);
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    if (to_mp(json, strlen(json), 1u << 20, &b, &err) != AB_OK)
        fail_msg("%s: %s", json, err.message);
    if (b.len != n || memcmp(b.data, want, n) != 0)
        fail_msg("%s: %zu bytes, not the %zu of %s", json, b.len, n, hex);
    ab_buf_free(&b);
}

/* @p json fails with @p code at @p field and a message holding @p part; the output is untouched. */
static void expect_error_n(const char *json, size_t len, ab_status_t code, const char *field,
                           const char *part)
{
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_buf_append(&b, "x", 1), AB_OK);
    assert_int_equal(to_mp(json, len, 1u << 20, &b, &err), code);
    tu_assert_error(&err, code, field);
    if (!strstr(err.message, part))
        fail_msg("%s: message '%s' does not hold '%s'", json, err.message, part);
    const ab_error_detail_t *line = ab_error_detail(&err, "line");
    const ab_error_detail_t *col = ab_error_detail(&err, "column");
    if (code != AB_NOMEM) { /* the position, also as details (the CLI names its input line) */
        assert_non_null(line);
        assert_non_null(col);
        char where[64];
        snprintf(where, sizeof(where), "column %lld", (long long)col->i);
        assert_non_null(strstr(err.message, where));
        if (memchr(json, '\n', len)) {
            snprintf(where, sizeof(where), "line %lld column", (long long)line->i);
            assert_non_null(strstr(err.message, where));
        } else {
            assert_int_equal(line->i, 1);
        }
    }
    assert_int_equal(b.len, 1);
    ab_buf_free(&b);
}

static void expect_error(const char *json, const char *field, const char *part)
{
    expect_error_n(json, strlen(json), AB_INVALID_EVENT, field, part);
}

/* ---- numbers ------------------------------------------------------------- */

static void test_integers_are_exact(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"0", "00"},
        {"-0", "00"},
        {"127", "7f"},
        {"128", "cc80"},
        {"-1", "ff"},
        {"-32", "e0"},
        {"-33", "d0df"},
        {"65535", "cdffff"},
        {"4294967296", "cf0000000100000000"},
        {"-2147483649", "d3ffffffff7fffffff"},
        {"9223372036854775807", "cf7fffffffffffffff"},
        {"9223372036854775808", "cf8000000000000000"},
        {"18446744073709551615", "cfffffffffffffffff"},
        {"-9223372036854775808", "d38000000000000000"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect_bytes(cases[i][0], cases[i][1]);
    tu_ctx_t c;
    tu_ctx_init(&c);
    const ab_val_t *v =
        tu_json(&c, "[18446744073709551615,9223372036854775808,9223372036854775807]");
    assert_true(v->u.items[0].type == AB_VAL_UINT && v->u.items[0].u.u == UINT64_MAX);
    assert_true(v->u.items[1].type == AB_VAL_UINT && v->u.items[1].u.u == 1ull << 63);
    assert_true(v->u.items[2].type == AB_VAL_INT && v->u.items[2].u.i == INT64_MAX);
    tu_ctx_free(&c);
}

/* The double the C compiler makes of the same decimal text is the one expected. */
static void test_other_numbers_are_the_nearest_double(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        double want;
    } cases[] = {
        {"-9223372036854775809", -9223372036854775809.0},
        {"18446744073709551616", 18446744073709551616.0},
        {"123456789012345678901234567890", 123456789012345678901234567890.0},
        {"-99999999999999999999999", -99999999999999999999999.0},
        {"1767225600000.0", 1767225600000.0},
        {"1E2", 1E2},
        {"1e+2", 1e+2},
        {"-2.5e-3", -2.5e-3},
        {"0.1", 0.1},
        {"-0.0", -0.0},
        {"4.9e-324", 4.9e-324},
        {"1e-400", 0.0},
        {"-1e-400", -0.0},
        {"1.7976931348623157e308", 1.7976931348623157e308},
    };
    tu_ctx_t c;
    tu_ctx_init(&c);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const ab_val_t *v = tu_json(&c, cases[i].json);
        if (v->type != AB_VAL_FLOAT || memcmp(&v->u.f, &cases[i].want, sizeof(double)) != 0)
            fail_msg("%s: type %d value %.17g, want the float %.17g", cases[i].json, v->type,
                     v->u.f, cases[i].want);
    }
    /* carried as float64 on the wire: 0xcb and the IEEE bits of 1767225600000.0 */
    expect_bytes("1767225600000.0", "cb4279b76daa800000");
    tu_ctx_free(&c);
}

static void test_no_infinities(void **state)
{
    (void)state;
    expect_error("1e400", "", "beyond the range of a double");
    expect_error("-1e400", "", "at column 1");
    expect_error("{\"a\":[1,\n  -1.8e308]}", "/a/1", "line 2 column 3");
    char big[420] = "[1";
    memset(big + 2, '0', 400); /* an integer of 401 digits: beyond every double */
    memcpy(big + 402, "]", 2);
    expect_error(big, "/0", "beyond the range of a double");
}

/* ---- strings ------------------------------------------------------------- */

/* A string of n 'x' written plain and written with every 'x' escaped gives msgpack-c's bytes. */
static void check_string_size(size_t n)
{
    char *plain = malloc(n + 3), *esc = malloc(6 * n + 3);
    assert_true(plain && esc);
    plain[0] = esc[0] = '"';
    memset(plain + 1, 'x', n);
    for (size_t i = 0; i < n; i++)
        memcpy(esc + 1 + 6 * i, i % 2 ? "\\u0078" : "\\u0058", 6);
    memcpy(plain + 1 + n, "\"", 2);
    memcpy(esc + 1 + 6 * n, "\"", 2);
    for (size_t i = 0; i < n; i += 2)
        plain[1 + i] = 'X';
    ab_buf_t want = AB_BUF_INIT, got = AB_BUF_INIT, got2 = AB_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &want, ab_buf_msgpack_write);
    assert_int_equal(msgpack_pack_str_with_body(&pk, plain + 1, n), 0);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(to_mp(plain, n + 2, 1u << 20, &got, &err), AB_OK);
    assert_int_equal(to_mp(esc, 6 * n + 2, 1u << 20, &got2, &err), AB_OK);
    assert_int_equal(got.len, want.len);
    assert_memory_equal(got.data, want.data, want.len);
    assert_int_equal(got2.len, want.len);
    assert_memory_equal(got2.data, want.data, want.len);
    ab_buf_free(&want);
    ab_buf_free(&got);
    ab_buf_free(&got2);
    free(plain);
    free(esc);
}

static void test_string_encodings(void **state)
{
    (void)state;
    static const size_t sizes[] = {0, 1, 7, 8, 31, 32, 255, 256, 65535, 65536};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        check_string_size(sizes[i]);
    expect_bytes("\"\\ud83d\\ude00\\u00e9\\u20AC\\/\\b\\f\\n\\r\\t\\\"\\\\\"",
                 "b1f09f9880c3a9e282ac2f080c0a0d09225c");
    expect_bytes("\"a\\u0000b\"", "a3610062");
    expect_bytes("{\"a\\u0000\":1}", "81a2610001"); /* NUL in a key too */
    expect_bytes("\"\xf0\x9f\x98\x80 \xc3\xa9\"", "a7f09f988020c3a9");
}

static void test_string_errors(void **state)
{
    (void)state;
    expect_error("\"\\ud800\"", "", "high surrogate \\ud800 is not followed by a low one");
    expect_error("\"\\ud800\\u0041\"", "", "at column 2");
    expect_error("[\"\\udc00\"]", "/0", "lone low surrogate \\udc00");
    expect_error("\"\\x\"", "", "invalid escape");
    expect_error("\"\\u12\"", "", "4 hex digits");
    expect_error("\"\\u12g4\"", "", "4 hex digits");
    expect_error("\"abc", "", "unterminated string");
    expect_error("\"abc\\", "", "unterminated string");
    expect_error("[\"a\tb\"]", "/0", "control character 0x09");
    expect_error("\"\xc3\x28\"", "", "invalid UTF-8");
    expect_error("\"\xc0\xaf\"", "", "invalid UTF-8");     /* overlong */
    expect_error("\"\xed\xa0\x80\"", "", "invalid UTF-8"); /* an encoded surrogate */
    expect_error("\"\\n\xff\"", "", "invalid UTF-8");      /* after an escape */
    expect_error("{\"k\":\"\xf4\x90\x80\x80\"}", "/k", "at column 7");
}

/* ---- containers and keys ------------------------------------------------- */

/* An array and an object of n items give the bytes msgpack-c writes for them. */
static void check_container_size(size_t n)
{
    size_t cap = 16 * n + 16, len = 0;
    char *arr = malloc(cap), *obj = malloc(cap);
    assert_true(arr && obj);
    ab_buf_t want = AB_BUF_INIT, got = AB_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &want, ab_buf_msgpack_write);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_array(&pk, n);
    arr[len++] = '[';
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(arr + len, cap - len, "%s%zu", i ? "," : "", i % 200);
        msgpack_pack_uint64(&pk, i % 200);
    }
    len += (size_t)snprintf(arr + len, cap - len, "],");
    msgpack_pack_map(&pk, n);
    obj[0] = '{';
    size_t olen = 1;
    for (size_t i = 0; i < n; i++) {
        char k[16];
        int kn = snprintf(k, sizeof(k), "k%zu", i);
        olen += (size_t)snprintf(obj + olen, cap - olen, "%s\"%s\":[]", i ? "," : "", k);
        msgpack_pack_str_with_body(&pk, k, (size_t)kn);
        msgpack_pack_array(&pk, 0);
    }
    snprintf(obj + olen, cap - olen, "}]");
    char *all = malloc(len + olen + 4);
    assert_non_null(all);
    snprintf(all, len + olen + 4, "[%s%s", arr, obj);
    ab_error_t err = AB_ERROR_INIT;
    if (to_mp(all, strlen(all), 1u << 24, &got, &err) != AB_OK)
        fail_msg("n=%zu: %s", n, err.message);
    assert_int_equal(got.len, want.len);
    assert_memory_equal(got.data, want.data, want.len);
    ab_buf_free(&want);
    ab_buf_free(&got);
    free(arr);
    free(obj);
    free(all);
}

static void test_container_encodings(void **state)
{
    (void)state;
    static const size_t sizes[] = {0, 1, 15, 16, 17, 65535, 65536};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        check_container_size(sizes[i]);
    expect_bytes(" [ {} , [ ] , { \"a\" : [ [ ] ] } ] ", "93809081a1619190");
}

/* {"k0":0,...,"k<n-1>":n-1} with key @p a repeated at index @p at (and @p b at @p at2). */
static char *big_object(size_t n, size_t at, size_t a, size_t at2, size_t b)
{
    char *s = malloc(16 * n + 16);
    assert_non_null(s);
    size_t len = 0;
    s[len++] = '{';
    for (size_t i = 0; i < n; i++) {
        size_t k = i == at ? a : i == at2 ? b : i;
        len += (size_t)sprintf(s + len, "%s\n\"k%zu\":%zu", i ? "," : "", k, i);
    }
    memcpy(s + len, "}", 2);
    return s;
}

static void test_duplicate_keys(void **state)
{
    (void)state;
    expect_error("{\"a\":1,\"a\":2}", "/a", "at column 8: duplicate object key");
    expect_error("{\"a\":1,\"\\u0061\":2}", "/a", "duplicate object key"); /* after decoding */
    expect_error("{\"o\":{\"b\":1,\"c\":{\"b\":2},\"b\":3}}", "/o/b", "column 25");
    char *s = big_object(40, 39, 7, SIZE_MAX, 0); /* found when the object closes */
    expect_error(s, "/k7", "line 41 column 1: duplicate object key");
    free(s);
    s = big_object(40, 30, 3, 35, 1); /* the earliest repeat is reported */
    expect_error(s, "/k3", "line 32 column 1");
    free(s);
    s = big_object(40, SIZE_MAX, 0, SIZE_MAX, 0);
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(to_mp(s, strlen(s), 1u << 20, &b, &err), AB_OK);
    ab_buf_free(&b);
    free(s);
    s = big_object(17, 16, 15, SIZE_MAX, 0); /* the 17th key repeats the 16th */
    expect_error(s, "/k15", "line 18");
    free(s);
}

/* ---- malformed text ------------------------------------------------------ */

static void test_syntax_errors(void **state)
{
    (void)state;
    static const char *const cases[][3] = {
        {"", "", "at column 1: expected a value, found the end of the input"},
        {"  \n ", "", "line 2 column 2: expected a value"},
        {"[1] x", "", "at column 5: expected the end of the input after the value, found 'x'"},
        {"{}{}", "", "column 3"},
        {"[1 2]", "", "expected ',' or ']', found '2'"},
        {"[1,]", "/1", "at column 4: expected a value, found ']'"},
        {"{\"a\":1,}", "", "expected a string key, found '}'"},
        {"{\"a\" 1}", "/a", "expected ':' after the key, found '1'"},
        {"{1:2}", "", "expected a string key, found '1'"},
        {"{\"a\":1 \"b\":2}", "", "expected ',' or '}', found '\"'"},
        {"{\"a\":[1,\n  2,,3]}", "/a/2", "line 2 column 5: expected a value, found ','"},
        {"[\"\xc3\xa9\", x]", "/1", "at column 7"}, /* columns count characters */
        {"01", "", "leading zeros"},
        {"-01", "", "leading zeros"},
        {"1.", "", "expected a digit after '.'"},
        {".5", "", "found '.'"},
        {"-", "", "expected a digit after '-'"},
        {"+1", "", "found '+'"},
        {"1e", "", "expected a digit in the exponent"},
        {"1e+", "", "expected a digit in the exponent"},
        {"0x10", "", "found 'x'"},
        {"NaN", "", "found 'N'"},
        {"-Infinity", "", "expected a digit after '-'"},
        {"tru", "", "invalid literal (expected true)"},
        {"nul", "", "invalid literal (expected null)"},
        {"[True]", "/0", "found 'T'"},
        {"/* c */ 1", "", "found '/'"},
        {"{\"a\":{\"b\":[1,}}}", "/a/b/1", "found '}'"},
        {"\xef\xbb\xbf{}", "", "found byte 0xef"}, /* no byte-order mark */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect_error(cases[i][0], cases[i][1], cases[i][2]);
    expect_error_n("[1,\0 2]", 7, AB_INVALID_EVENT, "/1", "found byte 0x00");
    expect_error_n("{\"a\"\0", 5, AB_INVALID_EVENT, "/a", "expected ':'");
    /* the bad code is the caller's */
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_json_to_msgpack("[", 1, 8, 64, AB_INVALID_ARGUMENT, &b, &err),
                     AB_INVALID_ARGUMENT);
    ab_buf_free(&b);
}

/* The text need not be NUL-terminated: nothing at or past text + len is read. */
static void test_length_bounds_the_text(void **state)
{
    (void)state;
    static const char text[] = "[12345,\"ab\"]xyz";
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(to_mp(text, 12, 64, &b, &err), AB_OK);
    ab_buf_reset(&b);
    assert_int_equal(to_mp(text + 1, 3, 64, &b, &err), AB_OK);
    assert_int_equal(b.len, 1);
    assert_int_equal(b.data[0], 123);
    ab_buf_free(&b);
    /* each cut of a valid text is refused as incomplete, never read past */
    static const char full[] = "{\"a\":[1.5e3,\"\\u00e9\",true,null,-7],\"b\":{}}";
    for (size_t n = 0; n + 1 < sizeof(full) - 1; n++) {
        char *cut = malloc(n ? n : 1); /* exactly n bytes: ASan sees a read past them */
        memcpy(cut, full, n);
        ab_buf_t o = AB_BUF_INIT;
        ab_error_t e = AB_ERROR_INIT;
        assert_int_equal(to_mp(cut, n, 64, &o, &e), AB_INVALID_EVENT);
        ab_buf_free(&o);
        free(cut);
    }
}

static void test_limits(void **state)
{
    (void)state;
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    /* depth: 8 levels pass, 9 do not (limit 8 in to_mp) */
    assert_int_equal(to_mp("[[[[[[[1]]]]]]]", 15, 64, &b, &err), AB_OK);
    expect_error_n("[[[[[[[[1]]]]]]]]", 17, AB_TOO_LARGE, "/0/0/0/0/0/0/0/0", "limit of 8");
    expect_error_n("{\"a\":{\"b\":[[[[[[{}]]]]]]}}", 26, AB_TOO_LARGE, "/a/b/0/0/0/0/0/0",
                   "(column 17)");
    /* size: the encoded size is held to max_bytes, exactly */
    ab_buf_reset(&b);
    assert_int_equal(to_mp("[\"abcdefghij\"]", 14, 12, &b, &err), AB_OK);
    assert_int_equal(b.len, 12);
    ab_buf_reset(&b);
    assert_int_equal(to_mp("[\"abcdefghij\"]", 14, 11, &b, &err), AB_TOO_LARGE);
    tu_assert_error(&err, AB_TOO_LARGE, "");
    assert_int_equal(ab_error_detail(&err, "limit")->i, 11);
    assert_int_equal(b.len, 0);
    /* a long input gives up once the encoding cannot fit, before reading all of it */
    size_t n = 1u << 20;
    char *big = malloc(n);
    assert_non_null(big);
    big[0] = '[';
    for (size_t i = 1; i + 1 < n; i += 2)
        memcpy(big + i, "1,", 2);
    big[n - 1] = '?'; /* malformed at the very end: the size limit is found first */
    ab_error_clear(&err);
    assert_int_equal(to_mp(big, n, 1000, &b, &err), AB_TOO_LARGE);
    tu_assert_error(&err, AB_TOO_LARGE, "");
    free(big);
    ab_buf_free(&b);
}

/* ---- memory -------------------------------------------------------------- */

static size_t g_live, g_peak; /* bytes requested through the hooks */

static void *cnt_malloc(size_t n)
{
    size_t *p = malloc(n + 16);
    if (!p)
        return NULL;
    p[0] = n;
    g_live += n;
    g_peak = g_live > g_peak ? g_live : g_peak;
    return (char *)p + 16;
}

static void *cnt_realloc(void *q, size_t n)
{
    size_t *p = (size_t *)(void *)((char *)q - 16), old = p[0];
    size_t *r = realloc(p, n + 16);
    if (!r)
        return NULL;
    r[0] = n;
    g_live = g_live - old + n;
    g_peak = g_live > g_peak ? g_live : g_peak;
    return (char *)r + 16;
}

static void cnt_free(void *q)
{
    if (!q)
        return;
    size_t *p = (size_t *)(void *)((char *)q - 16);
    g_live -= p[0];
    free(p);
}

/* Peak bytes allocated while converting @p text, less the output buffer's capacity. */
static size_t peak_beyond_output(const char *text, size_t len, size_t *nout)
{
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    size_t base = g_live;
    g_peak = base;
    if (to_mp(text, len, 1u << 24, &b, &err) != AB_OK)
        fail_msg("%s", err.message);
    size_t extra = g_peak - base - b.cap;
    *nout = b.len;
    ab_buf_free(&b);
    return extra;
}

/* Beyond its output, only the keys of the open objects cost memory (json.h states the bound). */
static void test_memory_bound(void **state)
{
    (void)state;
    enum { N = 100000 };
    char *text = malloc(16 * N + 16);
    assert_non_null(text);
    size_t len = 0, nout = 0;
    text[len++] = '[';
    for (int i = 0; i < N; i++) /* sibling containers: none is remembered once closed */
        len += (size_t)sprintf(text + len, "%s[{}]", i ? "," : "");
    text[len++] = ']';
    assert_int_equal(peak_beyond_output(text, len, &nout), 0);
    assert_int_equal(nout, 5 + 2 * (size_t)N);
    len = 0;
    text[len++] = '{';
    for (int i = 0; i < N; i++) /* one object of N keys: at most 72 bytes a key */
        len += (size_t)sprintf(text + len, "%s\"%x\":0", i ? "," : "", i);
    text[len++] = '}';
    size_t extra = peak_beyond_output(text, len, &nout);
    assert_true(extra > 24 * (size_t)N); /* the keys are held */
    assert_true(extra <= 72 * (size_t)N);
    free(text);
}

int main(void)
{
    ab_set_allocator(cnt_malloc, cnt_realloc, cnt_free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_integers_are_exact),
        cmocka_unit_test(test_other_numbers_are_the_nearest_double),
        cmocka_unit_test(test_no_infinities),
        cmocka_unit_test(test_string_encodings),
        cmocka_unit_test(test_string_errors),
        cmocka_unit_test(test_container_encodings),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_length_bounds_the_text),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_memory_bound),
    };
    return cmocka_run_group_tests_name("json_parse", tests, NULL, NULL);
}

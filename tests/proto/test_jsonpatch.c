/*
 * test_jsonpatch.c - RFC 6902 JSON Patch: the examples of the RFC's appendix
 * A (A.1-A.16, written here as JSON), pointer escaping, and the error cases,
 * each of which must leave the document unchanged, and the bounds on what a
 * patch may copy, hold and nest (findings of tests/fuzz/fuzz_jsonpatch.c).
 */
#include "testutil.h"

#include "agentbus/jsonpatch.h"
#include "jansson_internal.h"

#include <string.h>

static json_t *load(const char *text)
{
    json_error_t je;
    json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!v)
        fail_msg("bad test JSON '%s': %s", text, je.text);
    return v;
}

/* Apply @p patch to @p doc and expect success with result @p want. */
static void expect_ok(const char *doc, const char *patch, const char *want)
{
    json_t *d = load(doc), *p = load(patch), *w = load(want);
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab__jsonpatch_apply(&d, p, &err);
    if (st != AB_OK)
        fail_msg("patch %s failed: %s (at %s)", patch, err.message, err.field);
    if (!json_equal(d, w)) {
        char *got = json_dumps(d, JSON_SORT_KEYS | JSON_ENCODE_ANY);
        fail_msg("patch %s: got %s, want %s", patch, got, want);
    }
    json_decref(d);
    json_decref(p);
    json_decref(w);
}

/* Expect failure with @p code naming @p field, and the document untouched. */
static void expect_fail(const char *doc, const char *patch, ab_status_t code, const char *field)
{
    json_t *d = load(doc), *p = load(patch), *orig = load(doc);
    json_t *before = d;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_not_equal(ab__jsonpatch_apply(&d, p, &err), AB_OK);
    tu_assert_error(&err, code, field);
    assert_ptr_equal(d, before);
    assert_true(json_equal(d, orig));
    json_decref(d);
    json_decref(p);
    json_decref(orig);
}

static void test_rfc6902_appendix_a_success(void **state)
{
    (void)state;
    /* A.1 adding an object member */
    expect_ok("{\"foo\":\"bar\"}", "[{\"op\":\"add\",\"path\":\"/baz\",\"value\":\"qux\"}]",
              "{\"baz\":\"qux\",\"foo\":\"bar\"}");
    /* A.2 adding an array element */
    expect_ok("{\"foo\":[\"bar\",\"baz\"]}",
              "[{\"op\":\"add\",\"path\":\"/foo/1\",\"value\":\"qux\"}]",
              "{\"foo\":[\"bar\",\"qux\",\"baz\"]}");
    /* A.3 removing an object member */
    expect_ok("{\"baz\":\"qux\",\"foo\":\"bar\"}", "[{\"op\":\"remove\",\"path\":\"/baz\"}]",
              "{\"foo\":\"bar\"}");
    /* A.4 removing an array element */
    expect_ok("{\"foo\":[\"bar\",\"qux\",\"baz\"]}", "[{\"op\":\"remove\",\"path\":\"/foo/1\"}]",
              "{\"foo\":[\"bar\",\"baz\"]}");
    /* A.5 replacing a value */
    expect_ok("{\"baz\":\"qux\",\"foo\":\"bar\"}",
              "[{\"op\":\"replace\",\"path\":\"/baz\",\"value\":\"boo\"}]",
              "{\"baz\":\"boo\",\"foo\":\"bar\"}");
    /* A.6 moving a value */
    expect_ok("{\"foo\":{\"bar\":\"baz\",\"waldo\":\"fred\"},\"qux\":{\"corge\":\"grault\"}}",
              "[{\"op\":\"move\",\"from\":\"/foo/waldo\",\"path\":\"/qux/thud\"}]",
              "{\"foo\":{\"bar\":\"baz\"},\"qux\":{\"corge\":\"grault\",\"thud\":\"fred\"}}");
    /* A.7 moving an array element */
    expect_ok("{\"foo\":[\"all\",\"grass\",\"cows\",\"eat\"]}",
              "[{\"op\":\"move\",\"from\":\"/foo/1\",\"path\":\"/foo/3\"}]",
              "{\"foo\":[\"all\",\"cows\",\"eat\",\"grass\"]}");
    /* A.8 testing a value: success */
    expect_ok("{\"baz\":\"qux\",\"foo\":[\"a\",2,\"c\"]}",
              "[{\"op\":\"test\",\"path\":\"/baz\",\"value\":\"qux\"},"
              "{\"op\":\"test\",\"path\":\"/foo/1\",\"value\":2}]",
              "{\"baz\":\"qux\",\"foo\":[\"a\",2,\"c\"]}");
    /* A.10 adding a nested member object */
    expect_ok("{\"foo\":\"bar\"}",
              "[{\"op\":\"add\",\"path\":\"/child\",\"value\":{\"grandchild\":{}}}]",
              "{\"foo\":\"bar\",\"child\":{\"grandchild\":{}}}");
    /* A.11 ignoring unrecognized elements */
    expect_ok("{\"foo\":\"bar\"}",
              "[{\"op\":\"add\",\"path\":\"/baz\",\"value\":\"qux\",\"xyz\":123}]",
              "{\"foo\":\"bar\",\"baz\":\"qux\"}");
    /* A.14 ~ escape ordering */
    expect_ok("{\"/\":9,\"~1\":10}", "[{\"op\":\"test\",\"path\":\"/~01\",\"value\":10}]",
              "{\"/\":9,\"~1\":10}");
    /* A.16 adding an array value */
    expect_ok("{\"foo\":[\"bar\"]}",
              "[{\"op\":\"add\",\"path\":\"/foo/-\",\"value\":[\"abc\",\"def\"]}]",
              "{\"foo\":[\"bar\",[\"abc\",\"def\"]]}");
}

static void test_rfc6902_appendix_a_errors(void **state)
{
    (void)state;
    /* A.9 testing a value: error */
    expect_fail("{\"baz\":\"qux\"}", "[{\"op\":\"test\",\"path\":\"/baz\",\"value\":\"bar\"}]",
                AB_CONFLICT, "/0/path");
    /* A.12 adding to a nonexistent target */
    expect_fail("{\"foo\":\"bar\"}", "[{\"op\":\"add\",\"path\":\"/baz/bat\",\"value\":\"qux\"}]",
                AB_NOT_FOUND, "/0/path");
    /* A.13 invalid JSON Patch document: duplicate "op" is refused by the parser */
    json_error_t je;
    json_t *bad =
        json_loads("[{\"op\":\"add\",\"path\":\"/baz\",\"value\":\"qux\",\"op\":\"remove\"}]",
                   JSON_REJECT_DUPLICATES, &je);
    assert_null(bad);
    /* A.15 comparing strings and numbers */
    expect_fail("{\"/\":9,\"~1\":10}", "[{\"op\":\"test\",\"path\":\"/~01\",\"value\":\"10\"}]",
                AB_CONFLICT, "/0/path");
}

static void test_pointer_escapes_and_root(void **state)
{
    (void)state;
    expect_ok("{\"a/b\":1,\"m~n\":2}",
              "[{\"op\":\"replace\",\"path\":\"/a~1b\",\"value\":3},"
              "{\"op\":\"remove\",\"path\":\"/m~0n\"}]",
              "{\"a/b\":3}");
    expect_ok("{\"\":1}", "[{\"op\":\"replace\",\"path\":\"/\",\"value\":2}]", "{\"\":2}");
    expect_ok("{\"a\":1}", "[{\"op\":\"add\",\"path\":\"\",\"value\":[1,2]}]", "[1,2]");
    expect_ok("{\"a\":1}", "[{\"op\":\"replace\",\"path\":\"\",\"value\":null}]", "null");
    expect_ok("[1,2]", "[{\"op\":\"add\",\"path\":\"/2\",\"value\":3}]", "[1,2,3]");
    expect_ok("{\"a\":{\"b\":[1]}}", "[{\"op\":\"copy\",\"from\":\"/a\",\"path\":\"/c\"}]",
              "{\"a\":{\"b\":[1]},\"c\":{\"b\":[1]}}");
    expect_ok("{\"a\":1}", "[{\"op\":\"move\",\"from\":\"/a\",\"path\":\"/a\"}]", "{\"a\":1}");
    expect_ok("{\"a\":1}", "[{\"op\":\"test\",\"path\":\"/a\",\"value\":1.0}]", "{\"a\":1}");
    expect_ok("{\"a\":{\"x\":1,\"y\":2}}",
              "[{\"op\":\"test\",\"path\":\"/a\",\"value\":{\"y\":2,\"x\":1}}]",
              "{\"a\":{\"x\":1,\"y\":2}}");
    expect_ok("{}", "[]", "{}");
}

static void test_errors_leave_document_unchanged(void **state)
{
    (void)state;
    const char *doc = "{\"foo\":[1,2],\"bar\":{\"baz\":true}}";
    /* bad pointers */
    expect_fail(doc, "[{\"op\":\"remove\",\"path\":\"foo\"}]", AB_INVALID_EVENT, "/0/path");
    expect_fail(doc, "[{\"op\":\"remove\",\"path\":\"/bar/~2\"}]", AB_INVALID_EVENT, "/0/path");
    expect_fail(doc, "[{\"op\":\"remove\",\"path\":\"/bar~\"}]", AB_INVALID_EVENT, "/0/path");
    expect_fail(doc, "[{\"op\":\"remove\",\"path\":\"/foo/01\"}]", AB_INVALID_EVENT, "/0/path");
    expect_fail(doc, "[{\"op\":\"remove\",\"path\":\"/foo/x\"}]", AB_INVALID_EVENT, "/0/path");
    expect_fail(doc, "[{\"op\":\"remove\",\"path\":\"\"}]", AB_INVALID_EVENT, "/0/path");
    /* malformed operations */
    expect_fail(doc, "[{\"op\":\"add\",\"path\":\"/x\"}]", AB_INVALID_EVENT, "/0/value");
    expect_fail(doc, "[{\"path\":\"/x\"}]", AB_INVALID_EVENT, "/0/op");
    expect_fail(doc, "[{\"op\":\"move\",\"path\":\"/x\"}]", AB_INVALID_EVENT, "/0/from");
    expect_fail(doc, "[{\"op\":\"add\",\"path\":7,\"value\":1}]", AB_INVALID_EVENT, "/0/path");
    expect_fail(doc, "[1]", AB_INVALID_EVENT, "/0");
    expect_fail(doc, "{\"op\":\"add\"}", AB_INVALID_EVENT, "");
    /* test failing, after an operation that did apply (atomicity) */
    expect_fail(doc,
                "[{\"op\":\"add\",\"path\":\"/new\",\"value\":1},"
                "{\"op\":\"test\",\"path\":\"/bar/baz\",\"value\":false}]",
                AB_CONFLICT, "/1/path");
    /* removing a missing member, indexes out of range */
    expect_fail(doc, "[{\"op\":\"remove\",\"path\":\"/nope\"}]", AB_NOT_FOUND, "/0/path");
    expect_fail(doc, "[{\"op\":\"remove\",\"path\":\"/foo/2\"}]", AB_NOT_FOUND, "/0/path");
    expect_fail(doc, "[{\"op\":\"add\",\"path\":\"/foo/3\",\"value\":0}]", AB_NOT_FOUND, "/0/path");
    expect_fail(doc, "[{\"op\":\"replace\",\"path\":\"/foo/-\",\"value\":0}]", AB_NOT_FOUND,
                "/0/path");
    expect_fail(doc, "[{\"op\":\"replace\",\"path\":\"/zip\",\"value\":0}]", AB_NOT_FOUND,
                "/0/path");
    expect_fail(doc, "[{\"op\":\"add\",\"path\":\"/bar/baz/x\",\"value\":0}]", AB_NOT_FOUND,
                "/0/path");
    expect_fail(doc, "[{\"op\":\"copy\",\"from\":\"/nope\",\"path\":\"/x\"}]", AB_NOT_FOUND,
                "/0/from");
    /* move into its own child */
    expect_fail(doc, "[{\"op\":\"move\",\"from\":\"/bar\",\"path\":\"/bar/baz/q\"}]", AB_CONFLICT,
                "/0/from");
    expect_fail(doc, "[{\"op\":\"move\",\"from\":\"/bar\",\"path\":\"/bar/inner\"}]", AB_CONFLICT,
                "/0/from");
}

static void count_warn(void *ud, size_t index, const char *op)
{
    int *n = ud;
    assert_int_equal(index, 0);
    assert_string_equal(op, "frobnicate");
    (*n)++;
}

static void test_unknown_op_skipped_with_warning(void **state)
{
    (void)state;
    json_t *d = load("{\"a\":1}");
    json_t *p = load("[{\"op\":\"frobnicate\",\"path\":\"/a\"},"
                     "{\"op\":\"add\",\"path\":\"/b\",\"value\":2}]");
    int warned = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__jsonpatch_apply_ex(&d, p, count_warn, &warned, &err), AB_OK);
    assert_int_equal(warned, 1);
    json_t *w = load("{\"a\":1,\"b\":2}");
    assert_true(json_equal(d, w));
    /* without a callback it is skipped silently */
    assert_int_equal(ab__jsonpatch_apply(&d, p, &err), AB_OK);
    json_decref(w);
    json_decref(d);
    json_decref(p);
}

/* A patch of @p n operations copying the whole document into "a" and "b" in turn. */
static json_t *doubling_patch(size_t n)
{
    json_t *p = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(
            p, json_pack("{s:s,s:s,s:s}", "op", "copy", "from", "", "path", i % 2 ? "/a" : "/b"));
    return p;
}

/*
 * Regression (fuzz_jsonpatch): each copy of the whole document into one of
 * two members doubles it, so 34 operations of a 1.4 KB patch asked for more
 * than 2 GB; the copies are now bounded by AB_JSONPATCH_MAX_SIZE and the
 * document is left as it was (tests/fuzz/corpus/jsonpatch/regress-copy-doubling).
 */
static void test_copy_doubling_is_bounded(void **state)
{
    (void)state;
    json_t *d = load("{\"a\":1,\"b\":2}"), *orig = json_deep_copy(d), *before = d;
    json_t *p = doubling_patch(60);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__jsonpatch_apply(&d, p, &err), AB_TOO_LARGE);
    assert_int_equal(err.code, AB_TOO_LARGE);
    assert_non_null(strstr(err.field, "/from"));
    assert_ptr_equal(d, before);
    assert_true(json_equal(d, orig));
    json_decref(p);
    /* a few doublings are fine: ten copies make about 2^11 values, within the
     * bound of the normal build and of the libFuzzer build (1 MiB) alike */
    p = doubling_patch(10);
    assert_int_equal(ab__jsonpatch_apply(&d, p, &err), AB_OK);
    json_decref(p);
    json_decref(d);
    json_decref(orig);
}

/* Copying the same large member again and again stops at the bound on what copies take. */
static void test_repeated_large_copies_are_bounded(void **state)
{
    (void)state;
    json_t *big = json_array(), *p = json_array();
    for (int i = 0; i < 1000; i++)
        json_array_append_new(big, json_integer(i));
    json_t *d = json_pack("{s:o}", "big", big);
    /* each copy takes 1001 values: 32 MiB / 32 / 1001 is about 1047 copies */
    for (int i = 0; i < 1100; i++) {
        json_array_append_new(
            p, json_pack("{s:s,s:s,s:s}", "op", "copy", "from", "/big", "path", "/c"));
        json_array_append_new(p, json_pack("{s:s,s:s}", "op", "remove", "path", "/c"));
    }
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__jsonpatch_apply(&d, p, &err), AB_TOO_LARGE);
    assert_null(json_object_get(d, "c"));
    json_decref(p);
    json_decref(d);
}

static void test_depth_is_bounded(void **state)
{
    (void)state;
    enum { K = AB_JSONPATCH_MAX_DEPTH - 3 };
    /* d = {"y":{"y":...}} K levels below the root; v is 10 deep */
    json_t *d = json_object(), *cur = d, *v = json_object(), *deep = v;
    for (int i = 0; i < K; i++) {
        json_t *c = json_object();
        json_object_set_new(cur, "y", c);
        cur = c;
    }
    for (int i = 0; i < 9; i++) {
        json_t *c = json_object();
        json_object_set_new(deep, "x", c);
        deep = c;
    }
    static char path[2 * K + 8];
    for (int i = 0; i <= K; i++)
        strcat(path, "/y");
    /* K + 1 tokens plus a value 10 deep passes the bound; plus a number does not */
    json_t *orig = json_deep_copy(d), *before = d;
    json_t *p = json_pack("[{s:s,s:s,s:O}]", "op", "add", "path", path, "value", v);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__jsonpatch_apply(&d, p, &err), AB_TOO_LARGE);
    tu_assert_error(&err, AB_TOO_LARGE, "/0/path");
    assert_ptr_equal(d, before);
    assert_true(json_equal(d, orig));
    json_decref(p);
    p = json_pack("[{s:s,s:s,s:i}]", "op", "add", "path", path, "value", 1);
    assert_int_equal(ab__jsonpatch_apply(&d, p, &err), AB_OK);
    json_decref(p);
    /* the same value near the root is fine */
    p = json_pack("[{s:s,s:s,s:O}]", "op", "add", "path", "/v", "value", v);
    assert_int_equal(ab__jsonpatch_apply(&d, p, &err), AB_OK);
    json_decref(p);
    json_decref(v);
    json_decref(orig);
    json_decref(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc6902_appendix_a_success),
        cmocka_unit_test(test_rfc6902_appendix_a_errors),
        cmocka_unit_test(test_pointer_escapes_and_root),
        cmocka_unit_test(test_errors_leave_document_unchanged),
        cmocka_unit_test(test_unknown_op_skipped_with_warning),
        cmocka_unit_test(test_copy_doubling_is_bounded),
        cmocka_unit_test(test_repeated_large_copies_are_bounded),
        cmocka_unit_test(test_depth_is_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

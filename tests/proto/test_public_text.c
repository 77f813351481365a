/*
 * test_public_text.c - the jansson-free public forms of the reducer, the
 * snapshots and JSON Patch (agentbus/reducer.h, snapshot.h, jsonpatch.h;
 * proto/jansson_text.c): JSON text and value trees in, JSON text out, with
 * the same results as the jansson side the library uses inside. Only public
 * headers are included here, as a program built on the installed library
 * would.
 */
#include "testutil.h"

#include "agentbus/json.h"
#include "agentbus/jsonpatch.h"
#include "agentbus/reducer.h"
#include "agentbus/snapshot.h"

#include <string.h>

static const char *const EVENTS[] = {
    "{\"type\":\"RUN_STARTED\",\"threadId\":\"t1\",\"runId\":\"r1\"}",
    "{\"type\":\"TEXT_MESSAGE_CHUNK\",\"messageId\":\"m1\",\"role\":\"assistant\","
    "\"delta\":\"hel\"}",
    "{\"type\":\"TEXT_MESSAGE_CHUNK\",\"delta\":\"lo\"}",
    "{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":{\"n\":18446744073709551615,\"s\":\"a\\u0000b\"}}",
    "{\"type\":\"RUN_FINISHED\",\"threadId\":\"t1\",\"runId\":\"r1\"}",
    "{\"type\":\"RUN_STARTED\",\"threadId\":\"t1\",\"runId\":\"r2\"}",
    "{\"type\":\"TEXT_MESSAGE_CHUNK\",\"messageId\":\"m2\",\"delta\":\"x\"}",
};
#define NEV (sizeof(EVENTS) / sizeof(EVENTS[0]))

/* Whether @p b (not NUL-terminated) holds @p needle. */
static bool holds(const ab_buf_t *b, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= b->len; i++)
        if (memcmp(b->data + i, needle, n) == 0)
            return true;
    return false;
}

static const char *run_of(size_t i)
{
    return i < 5 ? "r1" : "r2";
}

static void fold(ab_reducer_t *r, size_t from, size_t to)
{
    tu_ctx_t c;
    tu_ctx_init(&c);
    for (size_t i = from; i < to; i++) {
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab_reducer_apply(r, tu_json(&c, EVENTS[i]), run_of(i), i + 1, &err),
                         AB_OK);
    }
    tu_ctx_free(&c);
}

static void text_of(const ab_reducer_t *r, ab_buf_t *proj, ab_buf_t *lanes)
{
    ab_error_t err = AB_ERROR_INIT;
    proj->len = lanes->len = 0;
    assert_int_equal(ab_reducer_projection_json(r, proj, &err), AB_OK);
    assert_int_equal(ab_reducer_lanes_json(r, lanes, &err), AB_OK);
}

/* A reducer rebuilt from its own JSON text continues exactly. */
static void test_reducer_text_round_trip(void **state)
{
    (void)state;
    ab_reducer_t *a = NULL, *b = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_reducer_new(&a, "t1", &err), AB_OK);
    fold(a, 0, 2); /* the chunk lane of m1 is open: the next chunk needs the lanes */
    ab_buf_t p = AB_BUF_INIT, l = AB_BUF_INIT, p2 = AB_BUF_INIT, l2 = AB_BUF_INIT;
    text_of(a, &p, &l);
    assert_true(holds(&p, "\"formatVersion\":2"));
    assert_true(holds(&p, "\"hel\""));
    assert_true(holds(&l, "\"m1\""));
    assert_int_equal(
        ab_reducer_from_json(&b, (const char *)p.data, p.len, (const char *)l.data, l.len, &err),
        AB_OK);
    fold(a, 2, NEV);
    fold(b, 2, NEV);
    text_of(a, &p, &l);
    text_of(b, &p2, &l2);
    assert_true(holds(&p, "\"hello\""));
    assert_int_equal(p.len, p2.len);
    assert_memory_equal(p.data, p2.data, p.len);
    /* U+0000 is kept, the uint64 held as its nearest double (docs/REDUCER.md) */
    assert_true(holds(&p, "a\\u0000b"));
    assert_true(holds(&p, "1.8446744073709552e")); /* e19 (jansson) or e+19 */
    ab_reducer_destroy(&a);
    ab_reducer_destroy(&b);
    ab_buf_free(&p);
    ab_buf_free(&l);
    ab_buf_free(&p2);
    ab_buf_free(&l2);
}

static void test_reducer_text_refusals(void **state)
{
    (void)state;
    ab_reducer_t *r = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_reducer_from_json(&r, "{\"formatVersion\":", 17, NULL, 0, &err),
                     AB_INVALID_ARGUMENT);
    assert_null(r);
    ab_error_clear(&err);
    assert_int_equal(ab_reducer_from_json(&r, "{\"formatVersion\":1}", 19, NULL, 0, &err),
                     AB_INVALID_ARGUMENT);
    ab_error_clear(&err);
    assert_int_equal(ab_reducer_from_json(&r, NULL, 0, NULL, 0, &err), AB_INVALID_ARGUMENT);
    ab_buf_t out = AB_BUF_INIT;
    assert_int_equal(ab_reducer_projection_json(NULL, &out, NULL), AB_INVALID_ARGUMENT);
    assert_int_equal(out.len, 0);
}

/* A snapshot document read back from text and from a value tree, and its accessors. */
static void test_snapshot_accessors(void **state)
{
    (void)state;
    ab_snapshot_builder_t *b = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_snapshot_builder_new(&b, "t1", &err), AB_OK);
    tu_ctx_t c;
    tu_ctx_init(&c);
    uint64_t seq[2] = {0, 0};
    for (size_t i = 0; i < NEV; i++) {
        uint64_t *s = &seq[i < 5 ? 0 : 1];
        assert_int_equal(
            ab_snapshot_builder_feed(b, run_of(i), ++*s, i + 1, tu_json(&c, EVENTS[i]), &err),
            AB_OK);
    }
    ab_buf_t text = AB_BUF_INIT, again = AB_BUF_INIT, mp = AB_BUF_INIT;
    assert_int_equal(ab_snapshot_builder_json(b, &text, &err), AB_OK);
    ab_snapshot_t *s = NULL, *v = NULL;
    assert_int_equal(ab_snapshot_parse((const char *)text.data, text.len, &s, &err), AB_OK);
    assert_string_equal(ab_snapshot_thread_id(s), "t1");
    assert_int_equal(ab_snapshot_checkpoint_seq(s, "r1"), 5);
    assert_int_equal(ab_snapshot_checkpoint_seq(s, "r2"), 2);
    assert_int_equal(ab_snapshot_checkpoint_seq(s, "nope"), 0);
    assert_int_equal(ab_snapshot_position(s), NEV);
    assert_int_equal(ab_snapshot_active_count(s), 1);
    assert_string_equal(ab_snapshot_active_run(s, 0), "r2");
    assert_null(ab_snapshot_active_run(s, 1));
    /* the same document as a value tree (as a snapshot_reply carries it) */
    assert_int_equal(ab_snapshot_builder_msgpack(b, 64, 1 << 20, &mp, &err), AB_OK);
    ab_doc_t *doc = NULL;
    const ab_val_t *root = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    assert_int_equal(ab_doc_parse(doc, mp.data, mp.len, 1 << 20, 64, AB_CORRUPT, &root, &err),
                     AB_OK);
    assert_int_equal(ab_snapshot_from_value(root, &v, &err), AB_OK);
    assert_int_equal(ab_snapshot_json(v, &again, &err), AB_OK);
    ab_snapshot_t *w = NULL;
    assert_int_equal(ab_snapshot_parse((const char *)again.data, again.len, &w, &err), AB_OK);
    assert_int_equal(ab_snapshot_position(w), NEV);
    /* a broken rule is still found from a value tree */
    const ab_val_t *bad = tu_json(&c, "{\"formatVersion\":1,\"threadId\":\"t1\"}");
    ab_snapshot_t *x = NULL;
    ab_error_clear(&err);
    assert_int_equal(ab_snapshot_from_value(bad, &x, &err), AB_CORRUPT);
    assert_null(x);
    ab_snapshot_destroy(&s);
    ab_snapshot_destroy(&v);
    ab_snapshot_destroy(&w);
    ab_snapshot_builder_destroy(&b);
    ab_doc_destroy(&doc);
    tu_ctx_free(&c);
    ab_buf_free(&text);
    ab_buf_free(&again);
    ab_buf_free(&mp);
}

static void patch(const char *doc, const char *p, ab_status_t want, const char *result)
{
    ab_buf_t out = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_jsonpatch_apply_json(doc, strlen(doc), p, strlen(p), &out, &err);
    if (st != want)
        fail_msg("patch %s on %s: %s (%s), expected %s", p, doc, ab_status_name(st), err.message,
                 ab_status_name(want));
    if (result) {
        assert_int_equal(out.len, strlen(result));
        assert_memory_equal(out.data, result, out.len);
    } else {
        assert_int_equal(out.len, 0); /* atomic: nothing written */
    }
    ab_buf_free(&out);
}

static void test_jsonpatch_text(void **state)
{
    (void)state;
    /* RFC 6902 A.1, A.2, A.10 */
    patch("{\"foo\":\"bar\"}", "[{\"op\":\"add\",\"path\":\"/baz\",\"value\":\"qux\"}]", AB_OK,
          "{\"foo\":\"bar\",\"baz\":\"qux\"}");
    patch("{\"foo\":[\"bar\",\"baz\"]}", "[{\"op\":\"add\",\"path\":\"/foo/1\",\"value\":\"qux\"}]",
          AB_OK, "{\"foo\":[\"bar\",\"qux\",\"baz\"]}");
    patch("{\"foo\":\"bar\"}",
          "[{\"op\":\"add\",\"path\":\"/child\",\"value\":{\"grandchild\":{}}}]", AB_OK,
          "{\"foo\":\"bar\",\"child\":{\"grandchild\":{}}}");
    /* a failing test op: nothing applied */
    patch("{\"a\":1}",
          "[{\"op\":\"replace\",\"path\":\"/a\",\"value\":2},{\"op\":\"test\",\"path\":\"/a\","
          "\"value\":3}]",
          AB_CONFLICT, NULL);
    patch("{\"a\":1}", "[{\"op\":\"remove\",\"path\":\"/b\"}]", AB_NOT_FOUND, NULL);
    patch("{\"a\":1}", "[{\"op\":\"add\"}]", AB_INVALID_EVENT, NULL);
    patch("{\"a\":", "[]", AB_INVALID_EVENT, NULL);
    patch("{}", "[", AB_INVALID_EVENT, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reducer_text_round_trip),
        cmocka_unit_test(test_reducer_text_refusals),
        cmocka_unit_test(test_snapshot_accessors),
        cmocka_unit_test(test_jsonpatch_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

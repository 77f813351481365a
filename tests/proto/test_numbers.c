/*
 * test_numbers.c - numbers beyond int64 after the bridge: the reducer's
 * projection holds an integer above INT64_MAX as its nearest double (what a
 * JavaScript AG-UI client holds) and every other number exactly, and a
 * snapshot holding such an event writes it the same way in both encodings,
 * so the JSON text parses back (ab_snapshot_parse) and restores.
 */
#include "agentbus/reducer.h"
#include "agentbus/snapshot.h"
#include "jansson_internal.h"
#include "testutil.h"

#include <string.h>

static const char STATE[] =
    "{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":{\"max\":18446744073709551615,"
    "\"top\":9223372036854775808,\"i64\":9223372036854775807,\"min\":-9223372036854775808,"
    "\"past\":-9223372036854775809,\"at\":1767225600000.0}}";

static void expect_real(const json_t *v, double want)
{
    assert_true(json_is_real(v));
    assert_memory_equal(&(double){json_real_value(v)}, &want, sizeof(double));
}

static void test_projection_holds_nearest_double(void **state)
{
    (void)state;
    tu_ctx_t c;
    tu_ctx_init(&c);
    ab_reducer_t *r = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_reducer_new(&r, "t", &err), AB_OK);
    assert_int_equal(ab_reducer_apply(r, tu_json(&c, STATE), "r1", 1, &err), AB_OK);
    const json_t *s = json_object_get(ab__reducer_state(r), "state");
    expect_real(json_object_get(s, "max"), 18446744073709551615.0);
    expect_real(json_object_get(s, "top"), 9223372036854775808.0);
    assert_true(json_is_integer(json_object_get(s, "i64")));
    assert_true(json_integer_value(json_object_get(s, "i64")) == INT64_MAX);
    assert_true(json_integer_value(json_object_get(s, "min")) == INT64_MIN);
    expect_real(json_object_get(s, "past"), -9223372036854775808.0); /* a float already */
    expect_real(json_object_get(s, "at"), 1767225600000.0);
    /* an agentkit value carries its numbers the same way */
    assert_int_equal(ab_reducer_apply(r,
                                      tu_json(&c, "{\"type\":\"CUSTOM\",\"name\":\"agentkit.task\","
                                                  "\"value\":{\"id\":\"t1\",\"title\":\"x\","
                                                  "\"status\":\"done\",\"n\":18446744073709551615,"
                                                  "\"m\":42}}"),
                                      "r1", 2, &err),
                     AB_OK);
    const json_t *task = json_array_get(json_object_get(ab__reducer_state(r), "tasks"), 0);
    expect_real(json_object_get(task, "n"), 18446744073709551615.0);
    assert_int_equal(json_integer_value(json_object_get(task, "m")), 42);
    ab_reducer_destroy(&r);
    tu_ctx_free(&c);
}

/* A document as text through jansson, for comparing. */
static json_t *load(const ab_buf_t *b)
{
    json_error_t je;
    json_t *j = json_loadb((const char *)b->data, b->len, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        fail_msg("not JSON: %s", je.text);
    return j;
}

static void test_snapshot_of_an_active_run(void **state)
{
    (void)state;
    tu_ctx_t c;
    tu_ctx_init(&c);
    ab_snapshot_builder_t *b = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_snapshot_builder_new(&b, "t", &err), AB_OK);
    assert_int_equal(
        ab_snapshot_builder_feed(
            b, "r1", 1, 1,
            tu_json(&c, "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r1\"}"), &err),
        AB_OK);
    assert_int_equal(ab_snapshot_builder_feed(b, "r1", 2, 2, tu_json(&c, STATE), &err), AB_OK);
    json_t *doc = NULL;
    assert_int_equal(ab__snapshot_builder_document(b, &doc, &err), AB_OK);
    const json_t *ev =
        json_object_get(json_array_get(json_object_get(doc, "activeEvents"), 1), "event");
    expect_real(json_object_get(json_object_get(ev, "snapshot"), "max"), 18446744073709551615.0);
    /* the JSON text: what ab_snapshot_parse() reads, equal to the document */
    ab_buf_t text = AB_BUF_INIT, mp = AB_BUF_INIT, back = AB_BUF_INIT;
    assert_int_equal(ab_snapshot_builder_json(b, &text, &err), AB_OK);
    json_t *got = load(&text);
    assert_true(json_equal(got, doc));
    json_decref(got);
    ab_snapshot_t *snap = NULL;
    assert_int_equal(ab_snapshot_parse((const char *)text.data, text.len, &snap, &err), AB_OK);
    ab_reducer_t *r = NULL;
    assert_int_equal(ab_snapshot_restore(snap, &r, &err), AB_OK);
    assert_true(json_equal(ab__reducer_state(r), json_object_get(doc, "projection")));
    /* the msgpack: the same values (the body re-encoded, not copied) */
    assert_int_equal(ab_snapshot_builder_msgpack(b, 64, SIZE_MAX, &mp, &err), AB_OK);
    ab_doc_t *d = NULL;
    const ab_val_t *root = NULL;
    assert_int_equal(ab_doc_new(&d), AB_OK);
    assert_int_equal(ab_doc_parse(d, mp.data, mp.len, UINT32_MAX, 64, AB_CORRUPT, &root, &err),
                     AB_OK);
    assert_int_equal(ab_val_to_json(root, &back), AB_OK);
    got = load(&back);
    assert_true(json_equal(got, doc));
    json_decref(got);
    ab_doc_destroy(&d);
    ab_reducer_destroy(&r);
    ab_snapshot_destroy(&snap);
    ab_buf_free(&text);
    ab_buf_free(&mp);
    ab_buf_free(&back);
    json_decref(doc);
    ab_snapshot_builder_destroy(&b);
    tu_ctx_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_projection_holds_nearest_double),
        cmocka_unit_test(test_snapshot_of_an_active_run),
    };
    return cmocka_run_group_tests_name("numbers", tests, NULL, NULL);
}

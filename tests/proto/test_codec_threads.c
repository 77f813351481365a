/*
 * test_codec_threads.c - the wire codec's `threads` and `threads_reply`
 * (docs/PROTOCOL.md 7.19): round trips (with every optional field absent,
 * empty and set), decoding from JSON as another client would write it, and
 * the refusal of every malformed field with the code and field it names.
 */
#include "codec_fixture.h"

#define TH(rest) "{\"op\":\"threads\",\"v\":1,\"cid\":4" rest "}"
#define TR(rest) "{\"op\":\"threads_reply\",\"v\":1,\"cid\":4" rest "}"
#define ENTRY    "{\"thread\":\"t\",\"runs\":1,\"active\":false,\"last_run\":\"r\",\"last_pos\":3}"

static void test_op_kinds(void **state)
{
    (void)state;
    assert_true(ab_op_is_request(AB_OP_THREADS));
    assert_false(ab_op_is_request(AB_OP_THREADS_REPLY));
    assert_string_equal(ab_op_name(AB_OP_THREADS), "threads");
    assert_string_equal(ab_op_name(AB_OP_THREADS_REPLY), "threads_reply");
    ab_op_t op;
    assert_int_equal(ab_op_from_name("threads_reply", 13, &op), AB_OK);
    assert_int_equal(op, AB_OP_THREADS_REPLY);
}

static void test_rt_request(void **state)
{
    fx_t *f = *state;
    ab_msg_t m = mk(AB_OP_THREADS, 5), b;
    msg_rt(f, &m, &b); /* every field absent */
    assert_null(b.u.threads.after.ptr);
    assert_null(b.u.threads.prefix.ptr);
    assert_int_equal(b.u.threads.limit, 0);
    m.u.threads = (ab_threads_req_t){S("team-a/7"), S("team-"), 1000};
    msg_rt(f, &m, &b);
    assert_str(b.u.threads.after, "team-a/7");
    assert_str(b.u.threads.prefix, "team-");
    assert_int_equal(b.u.threads.limit, 1000);
    m.u.threads = (ab_threads_req_t){S(""), S(""), 1}; /* empty: from the start, every thread */
    msg_rt(f, &m, &b);
    assert_non_null(b.u.threads.after.ptr);
    assert_int_equal(b.u.threads.after.len, 0);
    assert_int_equal(b.u.threads.prefix.len, 0);
    m.u.threads = (ab_threads_req_t){S("\xc3\xa9t\xc3\xa9"), S("\xe6\x97\xa5"), 7}; /* UTF-8 */
    msg_rt(f, &m, &b);
    assert_str(b.u.threads.prefix, "\xe6\x97\xa5");
}

static void test_rt_reply(void **state)
{
    fx_t *f = *state;
    ab_thread_entry_t t[] = {
        {S("a"), 3, true, S("r-3"), 41},
        {S("b\xc3\xa9"), 1, false, S("r"), 7},
    };
    ab_msg_t m = mk(AB_OP_THREADS_REPLY, 5), b;
    m.u.threads_reply = (ab_threads_reply_t){t, 2, S("b\xc3\xa9")};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.threads_reply.nthreads, 2);
    assert_str(b.u.threads_reply.threads[0].thread, "a");
    assert_int_equal(b.u.threads_reply.threads[0].runs, 3);
    assert_true(b.u.threads_reply.threads[0].active);
    assert_str(b.u.threads_reply.threads[0].last_run, "r-3");
    assert_int_equal(b.u.threads_reply.threads[0].last_pos, 41);
    assert_false(b.u.threads_reply.threads[1].active);
    assert_str(b.u.threads_reply.next, "b\xc3\xa9");
    m.u.threads_reply = (ab_threads_reply_t){NULL, 0, {0}}; /* empty and done */
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.threads_reply.nthreads, 0);
    assert_null(b.u.threads_reply.next.ptr);
}

static void test_decode_from_json(void **state)
{
    fx_t *f = *state;
    ab_msg_t m;
    msg_ok(f, TH(",\"after\":\"t-1\",\"prefix\":\"t-\",\"limit\":2"), &m);
    assert_int_equal(m.op, AB_OP_THREADS);
    assert_str(m.u.threads.after, "t-1");
    assert_int_equal(m.u.threads.limit, 2);
    msg_ok(f, TR(",\"threads\":[" ENTRY "],\"next\":\"t\""), &m);
    assert_int_equal(m.u.threads_reply.nthreads, 1);
    assert_int_equal(m.u.threads_reply.threads[0].last_pos, 3);
    msg_ok(f, TR(",\"threads\":[]"), &m);
    assert_null(m.u.threads_reply.next.ptr);
}

static void test_refusals(void **state)
{
    fx_t *f = *state;
    msg_err(f, TH(",\"limit\":0"), AB_INVALID_ENVELOPE, "limit");
    msg_err(f, TH(",\"limit\":1001"), AB_TOO_LARGE, "limit");
    msg_err(f, TH(",\"limit\":-1"), AB_INVALID_ENVELOPE, "limit");
    msg_err(f, TH(",\"limit\":\"5\""), AB_INVALID_ENVELOPE, "limit");
    msg_err(f, TH(",\"after\":7"), AB_INVALID_ENVELOPE, "after");
    msg_err(f, TH(",\"after\":\"a\\u0001\""), AB_INVALID_ENVELOPE, "after");
    msg_err(f, TH(",\"prefix\":null"), AB_INVALID_ENVELOPE, "prefix");
    msg_err(f, TH(",\"prefix\":\"x\\u0000\""), AB_INVALID_ENVELOPE, "prefix");
    msg_err(f, TH(",\"order\":\"desc\""), AB_INVALID_ENVELOPE, "order"); /* unknown key */
    char json[600];
    int n = snprintf(json, sizeof json, "{\"op\":\"threads\",\"v\":1,\"cid\":4,\"prefix\":\"");
    memset(json + n, 'p', 257); /* one byte over the id limit */
    snprintf(json + n + 257, sizeof json - (size_t)n - 257, "\"}");
    msg_err(f, json, AB_INVALID_ENVELOPE, "prefix");

    msg_err(f, TR(""), AB_INVALID_ENVELOPE, "threads");
    msg_err(f, TR(",\"threads\":{}"), AB_INVALID_ENVELOPE, "threads");
    msg_err(f, TR(",\"threads\":[],\"next\":\"\""), AB_INVALID_ENVELOPE, "next");
    msg_err(f,
            TR(",\"threads\":[{\"thread\":\"t\",\"runs\":1,\"active\":false,\"last_run\":\"r\","
               "\"last_pos\":0}]"),
            AB_INVALID_ENVELOPE, "threads/0/last_pos");
    msg_err(f, TR(",\"threads\":[{\"thread\":\"t\",\"runs\":1,\"last_run\":\"r\",\"last_pos\":1}]"),
            AB_INVALID_ENVELOPE, "threads/0/active");
    msg_err(f,
            TR(",\"threads\":[" ENTRY ",{\"thread\":\"\",\"runs\":1,\"active\":true,"
               "\"last_run\":\"r\",\"last_pos\":1}]"),
            AB_INVALID_ENVELOPE, "threads/1/thread");
}

/* The encoder refuses what the decoder would: a bad id, a limit out of range. */
static void test_encode_refusals(void **state)
{
    (void)state;
    ab_buf_t out = AB_BUF_INIT;
    ab_error_t e = AB_ERROR_INIT;
    ab_msg_t m = mk(AB_OP_THREADS, 1);
    m.u.threads.limit = AB_THREADS_LIMIT_MAX + 1;
    assert_int_not_equal(ab_msg_encode(&m, &out, &e), AB_OK);
    assert_string_equal(e.field, "limit");
    ab_error_clear(&e);
    m.u.threads = (ab_threads_req_t){S("a\x01"), {0}, 0};
    assert_int_not_equal(ab_msg_encode(&m, &out, &e), AB_OK);
    assert_string_equal(e.field, "after");
    assert_int_equal(out.len, 0);
    ab_buf_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_kinds),
        cmocka_unit_test_setup_teardown(test_rt_request, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_rt_reply, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_decode_from_json, codec_setup, codec_teardown),
        cmocka_unit_test_setup_teardown(test_refusals, codec_setup, codec_teardown),
        cmocka_unit_test(test_encode_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

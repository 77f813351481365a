/*
 * test_codec_fast.c - the envelope decoder's canonical fast path accepts
 * exactly what the generic decoder accepts: the same event in canonical and
 * in shuffled key order decodes to equal results, and invalid values in the
 * canonical order still get the generic decoder's typed errors. The same for
 * the header-only decoder (ab_event_decode_head), which also leaves a body
 * it does not read unchecked.
 */
#include "agentbus/codec.h"
#include "testutil.h"
#include "value_internal.h"

#include <string.h>

struct kvspec {
    const char *key;
    int kind; /* 0 int, 1 str, 2 body */
    int64_t i;
    const char *s;
};

/* Pack a map of the given entries in the given order. */
static void pack_env(ab_buf_t *b, const struct kvspec *kv, size_t n, const ab_val_t *body)
{
    msgpack_packer pk;
    ab_buf_reset(b);
    msgpack_packer_init(&pk, b, ab_buf_msgpack_write);
    msgpack_pack_map(&pk, n);
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_str_with_body(&pk, kv[i].key, strlen(kv[i].key));
        if (kv[i].kind == 0)
            msgpack_pack_int64(&pk, kv[i].i);
        else if (kv[i].kind == 1)
            msgpack_pack_str_with_body(&pk, kv[i].s, strlen(kv[i].s));
        else
            assert_int_equal(ab__val_pack(&pk, body), AB_OK);
    }
}

static void canonical(struct kvspec kv[7])
{
    const struct kvspec c[7] = {
        {"v", 0, 1, NULL},     {"thread", 1, 0, "t-1"}, {"run", 1, 0, "r-1"},  {"seq", 0, 7, NULL},
        {"epoch", 0, 2, NULL}, {"ts", 0, -5, NULL},     {"event", 2, 0, NULL},
    };
    memcpy(kv, c, sizeof(c));
}

static void test_shuffled_order_decodes_the_same(void **state)
{
    (void)state;
    tu_ctx_t t;
    tu_ctx_init(&t);
    const ab_val_t *body = tu_json(&t, "{\"type\":\"STEP_STARTED\",\"stepName\":\"s\"}");
    struct kvspec kv[7], shuffled[7];
    canonical(kv);
    for (int i = 0; i < 7; i++)
        shuffled[i] = kv[6 - i];
    ab_buf_t b1 = AB_BUF_INIT, b2 = AB_BUF_INIT;
    pack_env(&b1, kv, 7, body);
    pack_env(&b2, shuffled, 7, body);
    ab_doc_t *d1, *d2;
    assert_int_equal(ab_doc_new(&d1), AB_OK);
    assert_int_equal(ab_doc_new(&d2), AB_OK);
    ab_event_t e1, e2;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_event_decode(d1, b1.data, b1.len, NULL, &e1, &err), AB_OK);
    assert_int_equal(ab_event_decode(d2, b2.data, b2.len, NULL, &e2, &err), AB_OK);
    assert_true(ab_event_equal(&e1, &e2));
    assert_int_equal(e1.seq, 7);
    assert_int_equal(e1.epoch, 2);
    assert_true(e1.ts == -5);
    ab_event_t h1, h2; /* header only: the same header, no body, in both orders */
    assert_int_equal(ab_event_decode_head(d1, b1.data, b1.len, NULL, &h1, &err), AB_OK);
    assert_int_equal(ab_event_decode_head(d2, b2.data, b2.len, NULL, &h2, &err), AB_OK);
    assert_null(h1.body);
    assert_null(h2.body);
    e1.body = NULL;
    assert_true(ab_event_equal(&h1, &e1));
    assert_true(ab_event_equal(&h2, &e1));
    ab_doc_destroy(&d1);
    ab_doc_destroy(&d2);
    ab_buf_free(&b1);
    ab_buf_free(&b2);
    tu_ctx_free(&t);
}

static void expect_canonical_error(int idx, struct kvspec repl, ab_status_t code, const char *field)
{
    tu_ctx_t t;
    tu_ctx_init(&t);
    const ab_val_t *body = tu_json(&t, "{\"type\":\"STEP_STARTED\",\"stepName\":\"s\"}");
    struct kvspec kv[7];
    canonical(kv);
    kv[idx] = repl;
    ab_buf_t b = AB_BUF_INIT;
    pack_env(&b, kv, 7, body);
    ab_doc_t *d;
    assert_int_equal(ab_doc_new(&d), AB_OK);
    ab_event_t e;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_event_decode(d, b.data, b.len, NULL, &e, &err), code);
    tu_assert_error(&err, code, field);
    ab_error_t herr = AB_ERROR_INIT; /* the header-only decoder refuses it the same way */
    assert_int_equal(ab_event_decode_head(d, b.data, b.len, NULL, &e, &herr), code);
    tu_assert_error(&herr, code, field);
    ab_doc_destroy(&d);
    ab_buf_free(&b);
    tu_ctx_free(&t);
}

static void test_canonical_order_with_bad_values_fails_typed(void **state)
{
    (void)state;
    expect_canonical_error(3, (struct kvspec){"seq", 0, 0, NULL}, AB_INVALID_ENVELOPE, "seq");
    expect_canonical_error(4, (struct kvspec){"epoch", 0, 0, NULL}, AB_INVALID_ENVELOPE, "epoch");
    expect_canonical_error(0, (struct kvspec){"v", 0, 99, NULL}, AB_INCOMPATIBLE_VERSION, "v");
    expect_canonical_error(1, (struct kvspec){"thread", 1, 0, "a\tb"}, AB_INVALID_ENVELOPE,
                           "thread");
    expect_canonical_error(2, (struct kvspec){"run", 1, 0, ""}, AB_INVALID_ENVELOPE, "run");
    expect_canonical_error(5, (struct kvspec){"ts", 1, 0, "now"}, AB_INVALID_ENVELOPE, "ts");
    expect_canonical_error(6, (struct kvspec){"event", 0, 1, NULL}, AB_INVALID_ENVELOPE, "event");
    expect_canonical_error(6, (struct kvspec){"extra", 0, 1, NULL}, AB_INVALID_ENVELOPE, NULL);
}

/* A canonical header followed by a body that is not valid msgpack: the header-only
 * decoder reads the header and does not look further (documented), the full one refuses. */
static void test_head_leaves_the_body_unread(void **state)
{
    (void)state;
    tu_ctx_t t;
    tu_ctx_init(&t);
    const ab_val_t *body = tu_json(&t, "{}");
    struct kvspec kv[7];
    canonical(kv);
    ab_buf_t b = AB_BUF_INIT;
    pack_env(&b, kv, 7, body);
    b.data[b.len - 1] = 0x81; /* {} becomes a map of one pair that is missing */
    ab_doc_t *d;
    assert_int_equal(ab_doc_new(&d), AB_OK);
    ab_event_t e;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_event_decode(d, b.data, b.len, NULL, &e, &err), AB_INVALID_ENVELOPE);
    assert_int_equal(ab_event_decode_head(d, b.data, b.len, NULL, &e, &err), AB_OK);
    assert_int_equal(e.seq, 7);
    assert_int_equal(e.run.len, 3);
    assert_memory_equal(e.run.ptr, "r-1", 3);
    assert_null(e.body);
    b.data[b.len - 1] = 0xa1; /* the body is a string, not a map: refused */
    assert_int_equal(ab_event_decode_head(d, b.data, b.len, NULL, &e, &err), AB_INVALID_ENVELOPE);
    ab_limits_t lim = ab_limits_default(); /* the byte limit holds without reading the body */
    lim.max_event_bytes = (uint32_t)b.len - 1;
    b.data[b.len - 1] = 0x80;
    assert_int_equal(ab_event_decode_head(d, b.data, b.len, &lim, &e, &err), AB_TOO_LARGE);
    ab_doc_destroy(&d);
    ab_buf_free(&b);
    tu_ctx_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shuffled_order_decodes_the_same),
        cmocka_unit_test(test_canonical_order_with_bad_values_fails_typed),
        cmocka_unit_test(test_head_leaves_the_body_unread),
    };
    return cmocka_run_group_tests_name("codec_fast", tests, NULL, NULL);
}

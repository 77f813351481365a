/*
 * test_session.c - a real broker process: hello/welcome, version refusal,
 * ping, malformed frames answered with typed errors while another client is
 * served, packed and frame-per-event publishes (and malformed packed ones),
 * and a second broker on the same data directory.
 */
#include "testutil.h"

#include "broker_proc.h"

#include <zmq.h>

static void test_welcome(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    assert_int_equal(ab_conn_version(c), 1);
    assert_string_equal(ab_conn_event_endpoint(c), t->bp.events);
    assert_true(strlen(ab_conn_instance(c)) > 0);
    if (t->bp.instance[0])
        assert_string_equal(ab_conn_instance(c), t->bp.instance);
    const ab_limits_t *l = ab_conn_limits(c);
    assert_true(l->max_event_bytes >= 1 && l->max_batch >= 1 && l->max_replay_window >= 1);
    size_t n;
    const ab_cap_t *caps = ab_conn_caps(c, &n);
    assert_int_equal(ab_caps_lookup(caps, n, AB_CAP_PUBLISH), AB_CAP_AVAILABLE);
    assert_int_equal(ab_caps_lookup(caps, n, AB_CAP_REPLAY), AB_CAP_AVAILABLE);
    assert_int_equal(ab_caps_lookup(caps, n, AB_CAP_PACKED_PUBLISH), AB_CAP_AVAILABLE);
    ab_conn_destroy(&c);
}

static void test_incompatible_version(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    static const uint32_t v99[] = {99};
    ab_conn_opts_t o = {.versions = v99, .nversions = 1, .timeout_ms = IT_TIMEOUT};
    ab_conn_t *c = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_new(&c, t->bp.cmd, &o, &err), AB_INCOMPATIBLE_VERSION);
    assert_null(c);
    assert_false(err.retryable);
    assert_string_equal(err.field, "versions");
    const ab_error_detail_t *ours = ab_error_detail(&err, "ours");
    const ab_error_detail_t *theirs = ab_error_detail(&err, "theirs");
    assert_non_null(ours);
    assert_non_null(theirs);
    assert_string_equal(ours->s, "1");
    assert_string_equal(theirs->s, "99");
}

static void test_ping(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    ab_error_t err = AB_ERROR_INIT;
    ab_pong_t p;
    assert_int_equal(ab_conn_ping(c, t->doc, &p, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(p.instance.len, strlen(ab_conn_instance(c)));
    assert_memory_equal(p.instance.ptr, ab_conn_instance(c), p.instance.len);
    assert_int_equal(p.head_pos, 0);
    ab_conn_destroy(&c);
}

/* Send raw frames on the connection's socket and expect an `error` reply. */
static void expect_error(ab_conn_t *c, ab_doc_t *doc, const void *const *frames, const size_t *lens,
                         size_t n, ab_status_t code)
{
    ab_buf_t f[8];
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++)
        f[i] = (ab_buf_t){.data = (uint8_t *)(uintptr_t)frames[i], .len = lens[i]};
    ab_error_t serr = AB_ERROR_INIT;
    assert_int_equal(ab_conn_send_raw(c, f, n, &serr), AB_OK);
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_recv(c, 0, doc, &m, IT_TIMEOUT, &err);
    if (st != code)
        fail_msg("expected %s, got %s: %s", ab_status_name(code), ab_status_name(st), err.message);
    assert_int_equal(m.op, AB_OP_ERROR);
}

static void test_malformed_frames(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *bad = it_connect(&t->bp);
    ab_conn_t *good = it_connect(&t->bp);
    ab_error_t err = AB_ERROR_INIT;
    /* garbage header */
    static const char junk[] = "\xc1\xff garbage";
    const void *f1[] = {junk};
    size_t l1[] = {sizeof(junk) - 1};
    expect_error(bad, t->doc, f1, l1, 1, AB_INVALID_ENVELOPE);
    /* oversized header frame: a valid ping with a long extra string */
    static const uint8_t ping[] = {0x84, 0xa2, 'o', 'p', 0xa4, 'p',  'i',  'n', 'g', 0xa1, 'v',
                                   0x01, 0xa3, 'c', 'i', 'd',  0x09, 0xa3, 'p', 'a', 'd',  0xdb};
    uint32_t pad = ab_conn_limits(bad)->max_header_bytes + 16;
    size_t big = sizeof(ping) + 4 + pad;
    uint8_t *huge = malloc(big);
    memcpy(huge, ping, sizeof(ping));
    for (int i = 0; i < 4; i++)
        huge[sizeof(ping) + (size_t)i] = (uint8_t)(pad >> (24 - 8 * i));
    memset(huge + sizeof(ping) + 4, 'x', pad);
    const void *f2[] = {huge};
    size_t l2[] = {big};
    expect_error(bad, t->doc, f2, l2, 1, AB_TOO_LARGE);
    free(huge);
    /* publish with count 2 and one frame */
    ab_buf_t hdr = AB_BUF_INIT, ev = AB_BUF_INIT;
    ab_msg_t pub = {.op = AB_OP_PUBLISH, .v = 1, .cid = 77};
    pub.u.publish.count = 2;
    assert_int_equal(ab_msg_encode(&pub, &hdr, &err), AB_OK);
    it_event(&ev, "mf", "r1", 1, 0, 1);
    const void *f3[] = {hdr.data, ev.data};
    size_t l3[] = {hdr.len, ev.len};
    expect_error(bad, t->doc, f3, l3, 2, AB_INVALID_ENVELOPE);
    /* unknown op */
    static const char unk[] = "\x83\xa2op\xa6nosuch\xa1v\x01\xa3\x63id\x05";
    const void *f4[] = {unk};
    size_t l4[] = {sizeof(unk) - 1};
    expect_error(bad, t->doc, f4, l4, 1, AB_UNSUPPORTED);
    /* the other client keeps being served, and so does the bad one */
    ab_pong_t p;
    assert_int_equal(ab_conn_ping(good, t->doc, &p, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(ab_conn_ping(bad, t->doc, &p, IT_TIMEOUT, &err), AB_OK);
    ab_buf_free(&hdr);
    ab_buf_free(&ev);
    ab_conn_destroy(&bad);
    ab_conn_destroy(&good);
}

/* Publish seq from..to of run r of thread "pk" on @p c; every one accepted at a rising pos. */
static void publish_ok(ab_conn_t *c, ab_doc_t *doc, const char *run, uint64_t from, uint64_t to)
{
    ab_buf_t evs[8];
    size_t n = (size_t)(to - from + 1);
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++) {
        evs[i] = (ab_buf_t)AB_BUF_INIT;
        it_event(&evs[i], "pk", run, from + i, 0, 1);
    }
    const ab_result_t *res = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_publish(c, evs, n, doc, &res, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("publish: %s", err.message);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(res[i].status, AB_RESULT_ACCEPTED);
        assert_int_equal(res[i].seq, from + i);
        assert_true(i == 0 || res[i].pos == res[i - 1].pos + 1);
        ab_buf_free(&evs[i]);
    }
}

/* Both forms of publish work, and a packed one that does not match its header is
 * refused whole with a typed error naming what is wrong (PROTOCOL.md 7.4). */
static void test_packed_publish(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *packed = it_connect(&t->bp); /* packs: the broker announces packedPublish */
    ab_conn_opts_t o = {.timeout_ms = IT_TIMEOUT, .frame_per_event = true};
    ab_conn_t *framed = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_new(&framed, t->bp.cmd, &o, &err), AB_OK);
    publish_ok(packed, t->doc, "r1", 1, 5);
    publish_ok(framed, t->doc, "r1", 6, 8);
    publish_ok(packed, t->doc, "r1", 9, 9);
    /* malformed packed publishes: header says count 2, packed */
    ab_buf_t hdr = AB_BUF_INIT, e1 = AB_BUF_INIT, e2 = AB_BUF_INIT, one = AB_BUF_INIT,
             two = AB_BUF_INIT, tail = AB_BUF_INIT;
    ab_msg_t pub = {.op = AB_OP_PUBLISH, .v = 1, .cid = 78};
    pub.u.publish.count = 2;
    pub.u.publish.packed = true;
    assert_int_equal(ab_msg_encode(&pub, &hdr, &err), AB_OK);
    it_event(&e1, "pk", "r2", 1, 0, 1);
    it_event(&e2, "pk", "r2", 2, 0, 1);
    assert_int_equal(ab_packed_append(&one, e1.data, e1.len, &err), AB_OK);
    assert_int_equal(ab_packed_append(&two, e1.data, e1.len, &err), AB_OK);
    assert_int_equal(ab_packed_append(&two, e2.data, e2.len, &err), AB_OK);
    assert_int_equal(ab_buf_append(&tail, two.data, two.len), AB_OK);
    assert_int_equal(ab_buf_append(&tail, "xyz", 3), AB_OK);
    struct {
        const void *f[3];
        size_t l[3];
        size_t n;
        const char *field;
    } bad[] = {
        {{hdr.data}, {hdr.len}, 1, "packed"},                                     /* no frame */
        {{hdr.data, one.data}, {hdr.len, one.len}, 2, "count"},                   /* one of two */
        {{hdr.data, tail.data}, {hdr.len, tail.len}, 2, "packed"},                /* trailing */
        {{hdr.data, two.data, e1.data}, {hdr.len, two.len, e1.len}, 3, "packed"}, /* 2 frames */
        {{hdr.data, two.data}, {hdr.len, two.len - 1}, 2, "count"},               /* truncated */
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        ab_buf_t f[3];
        for (size_t i = 0; i < bad[k].n; i++)
            f[i] = (ab_buf_t){.data = (uint8_t *)(uintptr_t)bad[k].f[i], .len = bad[k].l[i]};
        ab_error_t serr = AB_ERROR_INIT;
        assert_int_equal(ab_conn_send_raw(packed, f, bad[k].n, &serr), AB_OK);
        ab_msg_t m;
        err = (ab_error_t)AB_ERROR_INIT;
        assert_int_equal(ab_conn_recv(packed, 78, t->doc, &m, IT_TIMEOUT, &err),
                         AB_INVALID_ENVELOPE);
        if (strcmp(err.field, bad[k].field) != 0)
            fail_msg("case %zu: field '%s' (%s), expected '%s'", k, err.field, err.message,
                     bad[k].field);
    }
    /* nothing of them was stored: r2 still starts at seq 1, and both forms go on working */
    publish_ok(framed, t->doc, "r2", 1, 2);
    publish_ok(packed, t->doc, "r2", 3, 4);
    ab_buf_free(&hdr);
    ab_buf_free(&e1);
    ab_buf_free(&e2);
    ab_buf_free(&one);
    ab_buf_free(&two);
    ab_buf_free(&tail);
    ab_conn_destroy(&packed);
    ab_conn_destroy(&framed);
}

static void test_second_broker_refused(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char out[2048];
    int rc = bp_run_second(t->bp.dir, out, sizeof(out));
    assert_int_equal(rc, 1);
    if (!strstr(out, "in use by another broker"))
        fail_msg("second broker said: %s", out);
    /* the first one is unharmed */
    ab_conn_t *c = it_connect(&t->bp);
    ab_conn_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_welcome, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_incompatible_version, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_ping, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_malformed_frames, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_packed_publish, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_second_broker_refused, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

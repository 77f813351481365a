/*
 * test_cmd_drops.c - the command thread's record of replay streams that lost
 * a chunk at a full queue (broker/cmd_drops.c): later chunks of such a stream
 * are dropped, its replay_end becomes the drop's error, an error passes, and
 * the stream is forgotten at that end or when its connection is gone; other
 * streams and connections pass untouched; at most `max` streams are kept.
 */
#include "cmd_drops.h"
#include "testutil.h"

#include <string.h>

static zmq_msg_t id_of(const char *s)
{
    zmq_msg_t m;
    assert_int_equal(zmq_msg_init_size(&m, strlen(s)), 0);
    memcpy(zmq_msg_data(&m), s, strlen(s));
    return m;
}

static ab_msg_t msg(ab_op_t op, uint64_t cid)
{
    ab_msg_t m = {.op = op, .v = 1, .cid = cid};
    return m;
}

static void test_stream_filtered_until_its_end(void **state)
{
    (void)state;
    ab__drops_t d;
    ab__drops_init(&d, 4);
    zmq_msg_t a = id_of("conn-a"), b = id_of("conn-b");
    assert_false(ab__drops_peer(&d, &a));
    ab__drops_add(&d, &a, 7);
    ab__drops_add(&d, &a, 7); /* once */
    assert_int_equal(d.n, 1);
    assert_true(ab__drops_peer(&d, &a));
    assert_false(ab__drops_peer(&d, &b));
    ab_msg_t chunk = msg(AB_OP_REPLAY_CHUNK, 7), other = msg(AB_OP_REPLAY_CHUNK, 8);
    assert_int_equal(ab__drops_filter(&d, &a, &chunk), AB__DROP_CHUNK);
    assert_int_equal(ab__drops_filter(&d, &a, &other), AB__DROP_PASS);
    assert_int_equal(ab__drops_filter(&d, &b, &chunk), AB__DROP_PASS);
    ab_msg_t pong = msg(AB_OP_PONG, 0);
    assert_int_equal(ab__drops_filter(&d, &a, &pong), AB__DROP_PASS);
    ab_msg_t end = msg(AB_OP_REPLAY_END, 7);
    assert_int_equal(ab__drops_filter(&d, &a, &end), AB__DROP_END);
    assert_int_equal(d.n, 0); /* forgotten at its end */
    assert_int_equal(ab__drops_filter(&d, &a, &chunk), AB__DROP_PASS);

    ab__drops_add(&d, &a, 9);
    ab_msg_t err = msg(AB_OP_ERROR, 9);
    assert_int_equal(ab__drops_filter(&d, &a, &err), AB__DROP_PASS); /* the reader's end */
    assert_int_equal(d.n, 0);
    zmq_msg_close(&a);
    zmq_msg_close(&b);
    ab__drops_free(&d);
}

static void test_forget_and_bound(void **state)
{
    (void)state;
    ab__drops_t d;
    ab__drops_init(&d, 2);
    zmq_msg_t a = id_of("conn-a"), b = id_of("conn-b");
    ab__drops_add(&d, &a, 1);
    ab__drops_add(&d, &b, 1);
    ab__drops_add(&d, &a, 2); /* past the bound: not kept */
    assert_int_equal(d.n, 2);
    ab__drops_forget(&d, &a); /* the connection is gone */
    assert_int_equal(d.n, 1);
    assert_false(ab__drops_peer(&d, &a));
    assert_true(ab__drops_peer(&d, &b));
    zmq_msg_close(&a);
    zmq_msg_close(&b);
    ab__drops_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_filtered_until_its_end),
        cmocka_unit_test(test_forget_and_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

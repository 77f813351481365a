/*
 * test_zpoll.c - the command thread's wait (broker/zpoll.c):
 *  - input on a socket or a plain descriptor makes that entry ready, and
 *    only that one; nothing waiting is 0 at the deadline;
 *  - input left after a partial read is found again at once (invariant 1:
 *    an entry found ready stays asked), and a socket read to its end is not;
 *  - no wake-up is lost while the same sockets are also sent on (sends run
 *    ZeroMQ's commands, which can leave input that no descriptor announces):
 *    a peer thread streams 20,000 messages over two sockets and reads an
 *    answer to each, sent on the other socket; every wait with input
 *    outstanding finds some.
 */
#include "zpoll.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <zmq.h>

#define STREAM_N 20000
#define WAIT_MS  10000 /* a deadline, never reached when nothing is lost */

static void *pair_bind(void *ctx, const char *ep)
{
    void *s = zmq_socket(ctx, ZMQ_PAIR);
    int zero = 0, hwm = 0; /* no high-water mark: the stream below never blocks a send */
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
    assert_int_equal(zmq_bind(s, ep), 0);
    return s;
}

static void *pair_connect(void *ctx, const char *ep)
{
    void *s = zmq_socket(ctx, ZMQ_PAIR);
    int zero = 0, hwm = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (zmq_connect(s, ep) != 0)
        return NULL;
    return s;
}

static int recv_now(void *s)
{
    char b[16];
    return zmq_recv(s, b, sizeof b, ZMQ_DONTWAIT);
}

static void test_ready_entries(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    void *a = pair_bind(ctx, "inproc://zp-a"), *b = pair_bind(ctx, "inproc://zp-b");
    void *pa = pair_connect(ctx, "inproc://zp-a"), *pb = pair_connect(ctx, "inproc://zp-b");
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    ab__zpoll_item_t it[3] = {{.fd = pfd[0]}, {.socket = a}, {.socket = b}};
    ab__zpoll_t *zp = ab__zpoll_new(it, 3);
    assert_non_null(zp);
    assert_int_equal(ab__zpoll_wait(zp, 0), 0);
    assert_int_equal(ab__zpoll_wait(zp, 20), 0); /* the deadline, nothing waiting */

    assert_int_equal(zmq_send(pa, "x", 1, 0), 1);
    assert_int_equal(zmq_send(pa, "y", 1, 0), 1);
    assert_int_equal(ab__zpoll_wait(zp, WAIT_MS), 1);
    assert_false(it[0].ready);
    assert_true(it[1].ready);
    assert_false(it[2].ready);
    assert_int_equal(recv_now(a), 1); /* one of two read: the other is found at once */
    assert_int_equal(ab__zpoll_wait(zp, 0), 1);
    assert_true(it[1].ready);
    assert_int_equal(recv_now(a), 1);
    assert_int_equal(ab__zpoll_wait(zp, 0), 0); /* read to its end */
    assert_false(it[1].ready);

    assert_int_equal(write(pfd[1], "s", 1), 1);
    assert_int_equal(zmq_send(pb, "z", 1, 0), 1);
    int n = 0;
    while (n < 2) { /* the two may be seen by one wait or two */
        int r = ab__zpoll_wait(zp, WAIT_MS);
        assert_true(r > 0);
        if (it[0].ready) {
            char c;
            assert_int_equal(read(pfd[0], &c, 1), 1);
            n++;
        }
        if (it[2].ready) {
            assert_int_equal(recv_now(b), 1);
            n++;
        }
        assert_false(it[1].ready);
    }
    assert_int_equal(ab__zpoll_wait(zp, 0), 0);

    ab__zpoll_destroy(&zp);
    assert_null(zp);
    close(pfd[0]);
    close(pfd[1]);
    zmq_close(a);
    zmq_close(b);
    zmq_close(pa);
    zmq_close(pb);
    zmq_ctx_term(ctx);
}

typedef struct peer {
    void *ctx;
    int answers; /* read back by the peer */
    int sent;
} peer_t;

/* Streams STREAM_N messages over two sockets, reading answers as they come, then the rest. */
static void *peer_main(void *arg)
{
    peer_t *p = arg;
    void *s[2] = {pair_connect(p->ctx, "inproc://zp-s0"), pair_connect(p->ctx, "inproc://zp-s1")};
    if (s[0] == NULL || s[1] == NULL)
        return NULL;
    for (int i = 0; i < STREAM_N; i++) {
        if (zmq_send(s[i & 1], "m", 1, 0) == 1)
            p->sent++;
        for (int k = 0; k < 2; k++)
            while (recv_now(s[k]) >= 0)
                p->answers++;
        if (i % 997 == 0)
            usleep(200); /* not a handshake: idle gaps, so the reader also sleeps and wakes */
    }
    zmq_pollitem_t it[2] = {{.socket = s[0], .events = ZMQ_POLLIN},
                            {.socket = s[1], .events = ZMQ_POLLIN}};
    while (p->answers < STREAM_N && zmq_poll(it, 2, WAIT_MS) > 0)
        for (int k = 0; k < 2; k++)
            while (recv_now(s[k]) >= 0)
                p->answers++;
    zmq_close(s[0]);
    zmq_close(s[1]);
    return NULL;
}

static void test_no_lost_wakeup(void **state)
{
    (void)state;
    peer_t p = {.ctx = zmq_ctx_new()};
    void *s0 = pair_bind(p.ctx, "inproc://zp-s0"), *s1 = pair_bind(p.ctx, "inproc://zp-s1");
    ab__zpoll_item_t it[2] = {{.socket = s0}, {.socket = s1}};
    ab__zpoll_t *zp = ab__zpoll_new(it, 2);
    assert_non_null(zp);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, peer_main, &p), 0);
    int got = 0;
    while (got < STREAM_N) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int r = ab__zpoll_wait(zp, WAIT_MS);
        assert_true(r >= 0);
        if (r == 0) { /* a descriptor fired for ZeroMQ's commands only, never the deadline */
            clock_gettime(CLOCK_MONOTONIC, &t1);
            long ms = (long)(t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
            if (ms >= WAIT_MS)
                fail_msg("a wake-up was lost: %d of %d read, none announced", got, STREAM_N);
            continue;
        }
        for (size_t k = 0; k < 2; k++) {
            /* at most 3 a pass, as the broker reads a burst, each answered on the *other*
             * socket, which may not have been ready: the send must mark it */
            for (int i = 0; it[k].ready && i < 3 && recv_now(it[k].socket) >= 0; i++) {
                got++;
                assert_int_equal(zmq_send(it[1 - k].socket, "a", 1, 0), 1);
                ab__zpoll_touch(zp, 1 - k);
            }
        }
    }
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(p.sent, STREAM_N);
    assert_int_equal(p.answers, STREAM_N);
    ab__zpoll_destroy(&zp);
    zmq_close(s0);
    zmq_close(s1);
    zmq_ctx_term(p.ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ready_entries),
        cmocka_unit_test(test_no_lost_wakeup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

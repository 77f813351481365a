/*
 * fake_router.c - the scripted in-process broker's ROUTER, thread and
 * request/reply framing (fake_router.h).
 */
#include "fake_router.h"

#include "testutil.h"

#include <zmq.h>

void fr_open(fr_t *f, const char *bind_ep)
{
    f->ctx = zmq_ctx_new();
    assert_non_null(f->ctx);
    f->router = zmq_socket(f->ctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(f->router, ZMQ_LINGER, &zero, sizeof(zero));
    assert_int_equal(zmq_bind(f->router, bind_ep), 0);
    size_t size = sizeof(f->ep);
    assert_int_equal(zmq_getsockopt(f->router, ZMQ_LAST_ENDPOINT, f->ep, &size), 0);
    assert_int_equal(ab_doc_new(&f->doc), AB_OK);
}

void *fr_side(fr_t *f, int type, const char *bind_ep)
{
    f->side = zmq_socket(f->ctx, type);
    int zero = 0;
    zmq_setsockopt(f->side, ZMQ_LINGER, &zero, sizeof(zero));
    assert_int_equal(zmq_bind(f->side, bind_ep), 0);
    return f->side;
}

void fr_run(fr_t *f, void *(*thread_main)(void *), void *arg)
{
    assert_int_equal(pthread_create(&f->th, NULL, thread_main, arg), 0);
}

void fr_start(fr_t *f, const char *bind_ep, void *(*thread_main)(void *), void *arg)
{
    fr_open(f, bind_ep);
    fr_run(f, thread_main, arg);
}

void fr_stop(fr_t *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    zmq_close(f->router);
    if (f->side)
        zmq_close(f->side);
    zmq_ctx_term(f->ctx);
    ab_doc_destroy(&f->doc);
    ab_buf_free(&f->id);
    ab_buf_free(&f->hdr);
}

/* Read one frame of the current message into @p out (NULL: dropped); @return whether more
 * frames follow. */
static bool recv_frame(fr_t *f, ab_buf_t *out)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    zmq_msg_recv(&m, f->router, 0);
    if (out) {
        ab_buf_reset(out);
        assert_int_equal(ab_buf_append(out, zmq_msg_data(&m), zmq_msg_size(&m)), AB_OK);
    }
    bool more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    return more;
}

bool fr_recv(fr_t *f, ab_msg_t *q, int timeout_ms)
{
    zmq_pollitem_t it = {.socket = f->router, .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, timeout_ms) <= 0)
        return false;
    recv_frame(f, &f->id);
    bool more = recv_frame(f, &f->hdr);
    while (more) /* publish records and the like: not looked at */
        more = recv_frame(f, NULL);
    ab_error_t err = AB_ERROR_INIT;
    return ab_msg_decode(f->doc, f->hdr.data, f->hdr.len, NULL, q, &err) == AB_OK;
}

void fr_send(fr_t *f, const ab_buf_t *hdr, const ab_buf_t *frames, size_t n)
{
    zmq_send(f->router, f->id.data, f->id.len, ZMQ_SNDMORE);
    zmq_send(f->router, hdr->data, hdr->len, n ? ZMQ_SNDMORE : 0);
    for (size_t i = 0; i < n; i++)
        zmq_send(f->router, frames[i].data, frames[i].len, i + 1 < n ? ZMQ_SNDMORE : 0);
}

void fr_reply(fr_t *f, const ab_msg_t *m, const ab_buf_t *frames, size_t n)
{
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_msg_encode(m, &b, &err), AB_OK);
    fr_send(f, &b, frames, n);
    ab_buf_free(&b);
}

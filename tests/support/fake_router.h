/*
 * fake_router.h - the common part of the client tests' scripted in-process
 * brokers: a ZeroMQ ROUTER (LINGER 0) on a context of its own, a thread
 * running the test's loop, and one request read or one reply written at a
 * time with the real codec. What the broker answers stays in each test.
 *
 * A test embeds an fr_t in its fake broker, then fr_start() it (or
 * fr_open(), fr_side() for a PUB/XPUB, fr_run()), and fr_stop() it. Its
 * thread loops until `stop` is set, calling fr_recv() and fr_reply() or
 * fr_send(). Every failure fails the cmocka test.
 */
#ifndef AB_TESTS_FAKE_ROUTER_H
#define AB_TESTS_FAKE_ROUTER_H

#include "agentbus/buf.h"
#include "agentbus/codec.h"
#include "agentbus/value.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct fr {
    void *ctx;        /* the broker's own context (clients may share it for inproc) */
    void *router;     /* bound at ep */
    void *side;       /* NULL, or the socket fr_side() made; closed by fr_stop() */
    pthread_t th;     /* runs the test's loop */
    atomic_bool stop; /* set by fr_stop(): the loop returns */
    ab_doc_t *doc;    /* the requests are decoded into it */
    ab_buf_t id;      /* the identity of the last request's client: replies go there */
    ab_buf_t hdr;     /* the last request's header frame (the decoded request's bytes) */
    char ep[64];      /* the address bound (ZMQ_LAST_ENDPOINT: the port of a tcp ":*") */
} fr_t;

/** Make the context, the ROUTER bound at @p bind_ep, its endpoint and the doc of a zeroed @p f. */
void fr_open(fr_t *f, const char *bind_ep);

/** Make a socket of @p type (LINGER 0) on @p f's context bound at @p bind_ep, before fr_run(). */
void *fr_side(fr_t *f, int type, const char *bind_ep);

/** Start the thread: @p thread_main(@p arg). */
void fr_run(fr_t *f, void *(*thread_main)(void *), void *arg);

/** fr_open() then fr_run(). */
void fr_start(fr_t *f, const char *bind_ep, void *(*thread_main)(void *), void *arg);

/** Set stop, join the thread, close the sockets, end the context, free the doc and buffers
 *  (not @p f itself): the endpoint is gone. */
void fr_stop(fr_t *f);

/**
 * Wait up to @p timeout_ms for a request; read its identity and header frame, drop any
 * further frames and decode the header into @p q (valid until the next call).
 * @return true when a request was read and decoded; false on none or an undecodable one.
 */
bool fr_recv(fr_t *f, ab_msg_t *q, int timeout_ms);

/** Send the encoded header @p hdr and @p n further frames to the last request's client. */
void fr_send(fr_t *f, const ab_buf_t *hdr, const ab_buf_t *frames, size_t n);

/** Encode @p m and send it with @p n further frames (@p frames may be NULL when 0). */
void fr_reply(fr_t *f, const ab_msg_t *m, const ab_buf_t *frames, size_t n);

#endif

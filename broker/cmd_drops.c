/*
 * cmd_drops.c - replay streams that lost a chunk at a full queue, on the
 * command thread (cmd_drops.h; docs/PROTOCOL.md 7.6.2).
 *
 * The ROUTER drops a message to a connection whose queue of answers is at
 * ZeroMQ's high-water mark (cmd.c invariant 2). A dropped `replay_chunk`
 * leaves a hole in its stream: the reader ends the session with `overloaded`
 * when it hears of it (replay_book.c invariant 6), but it may already have
 * handed over more chunks, or the stream's `replay_end`, and the queue may
 * have room again by the time they are forwarded.
 *
 * Invariants:
 *  1. From a dropped chunk of (connection, cid) on, nothing of that stream
 *     reaches the client but its end as an error: its later chunks are
 *     dropped here (and reported to the reader as undelivered, so its count
 *     of unread bytes stays exact), a `replay_end` becomes the `overloaded`
 *     error AB__RB_DROPPED, an error passes. The stream is forgotten at that
 *     end, or when the connection is found gone.
 *  2. Bounded: at most `max` streams (the broker's replay slots: a stream is
 *     broken only while its session holds one). Past it a stream is not
 *     remembered (logged): its reader still ends it at the report.
 *  3. Cheap when empty: ab__drops_peer() is one comparison then.
 */
#include "cmd_drops.h"

#include "ab_common.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

/* zmq_msg_size/zmq_msg_data take non-const messages, so these do too. */
static bool same_id(zmq_msg_t *a, zmq_msg_t *b)
{
    size_t n = zmq_msg_size(a);
    return n == zmq_msg_size(b) && memcmp(zmq_msg_data(a), zmq_msg_data(b), n) == 0;
}

static size_t find(ab__drops_t *d, zmq_msg_t *id, uint64_t cid)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->v[i].cid == cid && same_id(&d->v[i].id, id))
            return i;
    return d->n;
}

static void remove_at(ab__drops_t *d, size_t i)
{
    zmq_msg_close(&d->v[i].id);
    d->v[i] = d->v[--d->n];
}

void ab__drops_init(ab__drops_t *d, size_t max)
{
    memset(d, 0, sizeof *d);
    d->max = max;
}

void ab__drops_free(ab__drops_t *d)
{
    while (d->n > 0)
        remove_at(d, d->n - 1);
    free(d->v);
    memset(d, 0, sizeof *d);
}

void ab__drops_add(ab__drops_t *d, zmq_msg_t *id, uint64_t cid)
{
    if (find(d, id, cid) < d->n)
        return;
    ab__drop_t *v = d->n < d->max ? ab__grow(d->v, &d->cap, d->n + 1, sizeof *v, 8) : NULL;
    if (v == NULL) {
        ab__log(AB_LOG_WARN, "replay %llu lost a chunk and cannot be remembered (%zu are)",
                (unsigned long long)cid, d->n);
        return;
    }
    d->v = v;
    ab__drop_t *e = &d->v[d->n++];
    zmq_msg_init(&e->id);
    zmq_msg_copy(&e->id, id);
    e->cid = cid;
}

void ab__drops_forget(ab__drops_t *d, zmq_msg_t *id)
{
    for (size_t i = d->n; i-- > 0;)
        if (same_id(&d->v[i].id, id))
            remove_at(d, i);
}

bool ab__drops_peer(ab__drops_t *d, zmq_msg_t *id)
{
    for (size_t i = 0; i < d->n; i++)
        if (same_id(&d->v[i].id, id))
            return true;
    return false;
}

ab__drop_act_t ab__drops_filter(ab__drops_t *d, zmq_msg_t *id, const ab_msg_t *m)
{
    size_t i = find(d, id, m->cid);
    if (i == d->n)
        return AB__DROP_PASS;
    if (m->op == AB_OP_REPLAY_CHUNK)
        return AB__DROP_CHUNK;
    if (m->op != AB_OP_REPLAY_END && m->op != AB_OP_ERROR)
        return AB__DROP_PASS;
    remove_at(d, i); /* the stream's end */
    return m->op == AB_OP_REPLAY_END ? AB__DROP_END : AB__DROP_PASS;
}

size_t ab__drops_recv(void *from, zmq_msg_t *f, size_t max)
{
    size_t n = 0;
    bool more = true;
    for (; more && n < max; n++) {
        zmq_msg_init(&f[n]);
        if (zmq_msg_recv(&f[n], from, 0) < 0) {
            zmq_msg_close(&f[n]);
            return n;
        }
        more = zmq_msg_more(&f[n]);
    }
    ab__discard_rest(from, more); /* frames past max */
    return n;
}

int ab__drops_send(void *router, zmq_msg_t *id, zmq_msg_t *f, size_t n)
{
    zmq_msg_t copy;
    zmq_msg_init(&copy);
    zmq_msg_copy(&copy, id);
    if (zmq_msg_send(&copy, router, n > 0 ? ZMQ_SNDMORE : 0) < 0) {
        int why = zmq_errno();
        zmq_msg_close(&copy);
        return why;
    }
    for (size_t i = 0; i < n; i++)
        if (zmq_msg_send(&f[i], router, i + 1 < n ? ZMQ_SNDMORE : 0) < 0)
            break; /* only the identity frame can be refused (ROUTER_MANDATORY) */
    return 0;
}

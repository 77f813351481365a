/*
 * sub_live.c - the subscriber's live side: the SUB socket on the event
 * endpoint, receiving [topic][records] live messages (each record a stamp
 * and an envelope) into the bounded FIFO and heartbeats into the resync
 * triggers (docs/PROTOCOL.md 6.2-6.3).
 *
 * Invariants:
 *  1. Live events enter the FIFO in arrival order and ab__sub_fifo_run()
 *     decides (dup / next / hole), except in the steady state: when the poll
 *     loop drains (s->live_err set, never during a replay), the FIFO is
 *     empty and no replay is pending, each event goes straight through
 *     ab__sub_live_event() from the ZeroMQ message, with the same decisions and
 *     no copy. Once the callback stops, a hole asks for a replay or a
 *     delivery fails, the rest of the message takes the FIFO path (or is
 *     dropped when a replay will cover it).
 *  2. A FIFO overflow drops the whole buffer and asks for a replay, so
 *     memory stays bounded by max_pending and nothing is skipped.
 *  3. A heartbeat from another broker instance asks for a reconnect.
 *  4. A heartbeat of the connected instance proves the connection: it
 *     resets the reconnect backoff (subscriber.c invariant 4).
 */
#include "ab_common.h"
#include "conn_int.h"
#include "sub_int.h"

#include <errno.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

ab_status_t ab__sub_live_open(ab_sub_t *s, ab_error_t *err)
{
    void *sock = zmq_socket(s->ctx, ZMQ_SUB);
    if (!sock)
        return ab_error_set(err, AB_IO, NULL, "zmq_socket: %s", zmq_strerror(zmq_errno()));
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof(zero));
    if (s->o.rcvhwm > 0)
        zmq_setsockopt(sock, ZMQ_RCVHWM, &s->o.rcvhwm, sizeof(s->o.rcvhwm));
    if (s->o.rcvbuf > 0)
        zmq_setsockopt(sock, ZMQ_RCVBUF, &s->o.rcvbuf, sizeof(s->o.rcvbuf));
    if (ab__conn_curve_apply(s->conn, sock) != 0) { /* the conn's CURVE keys (client.h) */
        zmq_close(sock);
        return ab_error_set(err, AB_IO, NULL, "cannot use the CURVE keys on the event socket");
    }
    if (zmq_setsockopt(sock, ZMQ_SUBSCRIBE, s->topic.data, s->topic.len) != 0 ||
        zmq_setsockopt(sock, ZMQ_SUBSCRIBE, AB_TOPIC_HEARTBEAT, AB_TOPIC_HEARTBEAT_LEN) != 0 ||
        zmq_connect(sock, ab_conn_event_endpoint(s->conn)) != 0) {
        int e = zmq_errno();
        zmq_close(sock);
        return ab_error_set(err, AB_IO, NULL, "event endpoint %s: %s",
                            ab_conn_event_endpoint(s->conn), zmq_strerror(e));
    }
    s->sock = sock;
    return AB_OK;
}

void ab__sub_live_close(ab_sub_t *s)
{
    if (s->sock)
        zmq_close(s->sock);
    s->sock = NULL;
}

static void on_heartbeat(ab_sub_t *s, zmq_msg_t *body)
{
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_msg_decode(s->ldoc, zmq_msg_data(body), zmq_msg_size(body), NULL, &m, &err) != AB_OK ||
        m.op != AB_OP_HEARTBEAT)
        return; /* not ours to judge: ignore a malformed heartbeat */
    s->last_hb_ms = ab__mono_ms();
    const char *inst = s->conn ? ab_conn_instance(s->conn) : "";
    if (m.u.heartbeat.instance.len != strlen(inst) ||
        memcmp(m.u.heartbeat.instance.ptr, inst, m.u.heartbeat.instance.len) != 0) {
        s->reconnect = true; /* the broker restarted (invariant 3) */
        return;
    }
    s->hb_head = m.u.heartbeat.head_pos;
    ab__sub_backoff_reset(s); /* invariant 4 */
}

/* A 3-frame message: a notice when its topic ends with an empty run (PROTOCOL.md 6.4);
 * anything else of 3 frames is not ours to judge and is ignored. */
static void on_notice(ab_sub_t *s, zmq_msg_t *topic, zmq_msg_t *body)
{
    const uint8_t *t = zmq_msg_data(topic);
    size_t tn = zmq_msg_size(topic);
    ab_msg_t m;
    if (!s->o.on_notice || tn < 5 || t[tn - 1] != 0 || t[tn - 2] != 0 ||
        ab_msg_decode(s->ldoc, zmq_msg_data(body), zmq_msg_size(body), NULL, &m, NULL) != AB_OK ||
        m.op != AB_OP_NOTICE)
        return;
    s->o.on_notice(s->o.ud, &m.u.notice);
}

/* Deliver one live event straight away when the steady state allows it (invariant 1).
 * @return true when it was handled (delivered, counted or a hole). */
static bool direct(ab_sub_t *s, const ab_stamp_t *st, const uint8_t *b, size_t len)
{
    if (s->live_err == NULL || s->live_rc != AB_OK || s->stop || s->fifo.n > 0)
        return false;
    s->live_rc = ab__sub_live_event(s, st, b, len, s->live_err);
    return true;
}

/* Queue the records of one live message; a malformed record ends it (the hole check refills). */
static void on_events(ab_sub_t *s, zmq_msg_t *records)
{
    if (zmq_msg_size(records) == 0)
        return;
    const uint8_t *p = zmq_msg_data(records), *end = p + zmq_msg_size(records);
    const uint8_t *sb, *eb;
    size_t slen, elen;
    while (!s->need_replay && p < end && ab_record_next(&p, end, &sb, &slen, &eb, &elen)) {
        ab_stamp_t st;
        ab_error_t err = AB_ERROR_INIT;
        if (ab_stamp_decode(s->ldoc, sb, slen, &st, &err) != AB_OK)
            return; /* a bad stamp cannot be placed; the replay path will fill it */
        s->drained++;
        if (direct(s, &st, eb, elen))
            continue;
        if (ab__sub_fifo_push(&s->fifo, &st, eb, elen) != AB_OK) {
            /* full (or no memory): drop all, catch up from the store */
            ab__sub_fifo_clear(&s->fifo);
            s->stats.overflows++;
            s->need_replay = true;
            return;
        }
    }
}

/* Receive one whole message (at most 3 frames kept). @return frames, or -1. */
static int recv_one(void *sock, zmq_msg_t part[3])
{
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(&m);
            return n == 0 && zmq_errno() == EAGAIN ? 0 : -1;
        }
        more = zmq_msg_more(&m);
        if (n < 3)
            part[n++] = m;
        else
            zmq_msg_close(&m);
    }
    return n;
}

int ab__sub_live_drain(ab_sub_t *s, int wait_ms)
{
    if (!s->sock)
        return 0;
    zmq_pollitem_t it = {.socket = s->sock, .events = ZMQ_POLLIN};
    int r = zmq_poll(&it, 1, wait_ms);
    if (r < 0)
        return zmq_errno() == EINTR ? 0 : -1;
    int handled = 0;
    s->drained = 0;
    for (; handled < 4096; handled++) {
        /* after the first message, stop unless a whole one still fits the FIFO
         * (and, delivering directly, the events taken stay within max_pending,
         * so one poll's work stays bounded): the rest waits in the socket
         * (bounded by its rcvhwm) */
        if (handled > 0 && (s->fifo.n + AB_LIVE_EVENTS_MAX > s->fifo.max ||
                            s->drained + AB_LIVE_EVENTS_MAX > s->fifo.max))
            break;
        if (s->stop || s->need_replay || s->live_rc != AB_OK)
            break; /* let the poll loop act first */
        zmq_msg_t part[3];
        int n = recv_one(s->sock, part);
        if (n <= 0)
            return n < 0 ? -1 : handled;
        bool hb = zmq_msg_size(&part[0]) == AB_TOPIC_HEARTBEAT_LEN &&
                  memcmp(zmq_msg_data(&part[0]), AB_TOPIC_HEARTBEAT, AB_TOPIC_HEARTBEAT_LEN) == 0;
        if (n == 2 && hb)
            on_heartbeat(s, &part[1]);
        else if (n == 2)
            on_events(s, &part[1]);
        else if (n == 3)
            on_notice(s, &part[0], &part[1]);
        for (int i = 0; i < n; i++)
            zmq_msg_close(&part[i]);
    }
    return handled;
}

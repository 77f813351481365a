/*
 * monitor.c - connection counts from ZeroMQ socket monitor events
 * (monitor.h).
 *
 * Invariants:
 *  1. Each monitor has its own inproc address (a process-wide counter), so
 *     a socket made again (the event endpoint after an access reload) gets a
 *     new monitor while the old one's events are discarded with its PAIR.
 *  2. A monitor event is two frames: 6 bytes (uint16 event, uint32 value)
 *     and the endpoint. Anything else is dropped whole. The count never goes
 *     below 0 (a disconnect of a connection accepted before the monitor).
 */
#include "monitor.h"
#include "ab_common.h"
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <zmq.h>

static atomic_uint next_id;

int ab__monitor_open(ab__monitor_t *m, void *zctx, void *sock, const char *what,
                     _Atomic int64_t *count)
{
    char addr[64];
    snprintf(addr, sizeof addr, "inproc://ab-monitor-%u", atomic_fetch_add(&next_id, 1));
    *m = (ab__monitor_t){.count = count, .what = what};
    atomic_store(count, 0);
    if (zmq_socket_monitor(sock, addr, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0)
        goto fail;
    m->pair = zmq_socket(zctx, ZMQ_PAIR);
    int zero = 0;
    if (m->pair == NULL || zmq_setsockopt(m->pair, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_connect(m->pair, addr) != 0)
        goto fail;
    return 0;
fail:
    ab__log(AB_LOG_WARN, "%s endpoint: no connection count (socket monitor: %s)", what,
            zmq_strerror(zmq_errno()));
    if (m->pair != NULL)
        zmq_close(m->pair);
    m->pair = NULL;
    return -1;
}

/* One event; @return false when none is waiting. */
static bool drain_one(ab__monitor_t *m)
{
    zmq_msg_t ev, ep;
    zmq_msg_init(&ev);
    zmq_msg_init(&ep);
    bool got = zmq_msg_recv(&ev, m->pair, ZMQ_DONTWAIT) >= 0;
    bool two = got && zmq_msg_more(&ev) && zmq_msg_recv(&ep, m->pair, ZMQ_DONTWAIT) >= 0;
    if (two && zmq_msg_size(&ev) == 6) {
        const uint8_t *d = zmq_msg_data(&ev);
        uint16_t kind;
        uint32_t fd;
        memcpy(&kind, d, 2);
        memcpy(&fd, d + 2, 4);
        int64_t n = atomic_load(m->count);
        if (kind == ZMQ_EVENT_ACCEPTED)
            n++;
        else if (kind == ZMQ_EVENT_DISCONNECTED && n > 0)
            n--;
        atomic_store(m->count, n);
        ab__log(AB_LOG_DEBUG, "%s connection %s (fd %u at %.*s): %lld open", m->what,
                kind == ZMQ_EVENT_ACCEPTED ? "opened" : "closed", (unsigned)fd,
                (int)zmq_msg_size(&ep), (const char *)zmq_msg_data(&ep), (long long)n);
    }
    while (got && zmq_msg_more(two ? &ep : &ev)) { /* drop the rest of a strange one */
        zmq_msg_close(&ep);
        zmq_msg_init(&ep);
        if (zmq_msg_recv(&ep, m->pair, ZMQ_DONTWAIT) < 0)
            break;
        two = true;
    }
    zmq_msg_close(&ev);
    zmq_msg_close(&ep);
    return got;
}

void ab__monitor_drain(ab__monitor_t *m)
{
    if (m->pair == NULL)
        return;
    while (drain_one(m)) {
    }
}

void ab__monitor_close(ab__monitor_t *m)
{
    if (m->pair != NULL)
        zmq_close(m->pair);
    m->pair = NULL;
}

/*
 * monitor.h - counting the connections of a listening socket (the command
 * ROUTER, the event XPUB) from ZeroMQ's socket monitor events, for `stats`
 * and the metrics, with a debug log line per connection opened or closed.
 */
#ifndef AB_BROKER_MONITOR_H
#define AB_BROKER_MONITOR_H

#include <stdatomic.h>
#include <stdint.h>

/** One monitored socket. The consumer socket belongs to the thread that drains it. */
typedef struct ab__monitor {
    void *pair;             /**< the monitor's PAIR (consumer side); NULL = off */
    _Atomic int64_t *count; /**< connections open now (written by the draining thread) */
    const char *what;       /**< "command" or "event", for the log */
} ab__monitor_t;

/**
 * Start monitoring @p sock (call in the thread that owns it, or before the
 * thread that will drain starts): accepted and disconnected events go to a
 * PAIR on a fresh inproc address. Sets *count to 0.
 * @return 0, or -1 (logged; the count then stays 0 and the broker runs on).
 */
int ab__monitor_open(ab__monitor_t *m, void *zctx, void *sock, const char *what,
                     _Atomic int64_t *count);

/** Read the waiting events (never blocks) and update the count. */
void ab__monitor_drain(ab__monitor_t *m);

/** Stop: close the consumer PAIR (the monitored socket stops it by closing). */
void ab__monitor_close(ab__monitor_t *m);

#endif /* AB_BROKER_MONITOR_H */

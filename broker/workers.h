/*
 * workers.h - the broker's registry of workers and their action calls
 * (docs/PROTOCOL.md 7.10, 7.11), owned by the command thread.
 *
 * A connection that sends `serve` becomes a worker: the agents it serves,
 * each with a capacity and the action ids it handles, and a lease that any
 * message from the connection renews. `invoke_action` is routed to a live
 * worker serving the action, as an unsolicited `action_call`; the worker's
 * `action_result` goes back to the caller as `action_reply` (or its error)
 * and is acknowledged with `action_ack`. Nothing here is durable: a broker
 * restart forgets the workers, which register again when they reconnect,
 * and fails no accepted request (calls in flight at a stop are answered
 * `unavailable`).
 *
 * Bounds (docs/OPERATIONS.md "Memory bounds"): AB_WORKERS_MAX workers and
 * AB__WK_REG_BYTES of their registrations; AB__WK_CALLS calls in flight in
 * total and AB__WK_CALLS_PER_WORKER per worker (beyond: `overloaded`);
 * AB__WK_SEEN (agent, action) pairs remembered as ever served, for telling
 * `unsupported` from `unavailable`.
 */
#ifndef AB_BROKER_WORKERS_H
#define AB_BROKER_WORKERS_H

#include "agentbus/codec.h"

#include <stdint.h>
#include <zmq.h>

#define AB__WK_REG_BYTES        (8u << 20)
#define AB__WK_CALLS            4096
#define AB__WK_CALLS_PER_WORKER 256
#define AB__WK_SEEN             65536

typedef struct ab__workers ab__workers_t;

/** A registry answering on @p router (borrowed). NULL when out of memory. */
ab__workers_t *ab__workers_new(void *router, const char *instance);

/** Free the registry (NULL-safe, *w = NULL). Calls still open are dropped unanswered. */
void ab__workers_destroy(ab__workers_t **w);

/**
 * Every decoded request of connection @p id renews its lease if it is a
 * worker. Cheap when no worker is registered.
 */
void ab__workers_touch(ab__workers_t *w, zmq_msg_t *id, int64_t now_ms);

/**
 * Handle a request of the registry's ops (serve, workers, invoke_action,
 * action_result, leave) and `cancel` of an open action call. Every path answers
 * the request (or, for cancel, the aborted call).
 * @return true when it handled @p m; false for a `cancel` that names no
 *         action call of @p id (the replay readers' then).
 */
bool ab__workers_request(ab__workers_t *w, zmq_msg_t *id, const ab_msg_t *m, int64_t now_ms);

/**
 * Expire lapsed leases and timed-out calls (answering their callers).
 * @return ms until the next deadline, or -1 when there is none.
 */
long ab__workers_tick(ab__workers_t *w, int64_t now_ms);

/** Fail every open call with `unavailable` (the broker is stopping). NULL-safe. */
void ab__workers_stop(ab__workers_t *w);

/**
 * Told of every registration (@p serve: the accepted `serve`) and of every
 * worker gone (@p serve NULL: lapsed, replaced by another connection's, or
 * the broker stopping), with the worker's id and connection identity.
 * Dispatch (on the writer thread) learns which workers are live from it.
 */
typedef void (*ab__workers_hook)(void *ud, const char *wid, const uint8_t *ident, size_t len,
                                 const ab_msg_t *serve);

/** Set the hook (one; NULL to unset). */
void ab__workers_set_hook(ab__workers_t *w, ab__workers_hook fn, void *ud);

/** Whether some live worker handles an action (the `actions` capability). */
bool ab__workers_any_actions(const ab__workers_t *w);

#endif /* AB_BROKER_WORKERS_H */

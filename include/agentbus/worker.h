/*
 * agentbus/worker.h - a worker: one connection that serves agents and their
 * actions (docs/PROTOCOL.md 7.10, 7.11; docs/CLIENT.md "Worker").
 *
 *   ab_worker_t *w = NULL;
 *   ab_worker_opts_t o = {.name = "pool-a/7"};
 *   ab_worker_new(&w, "tcp://127.0.0.1:7710", &o, &err);
 *   static const char *const acts[] = {"approve"};
 *   ab_worker_add_agent(w, "planner", 4, acts, 1, &err);
 *   ab_worker_on_action(w, on_action, app);
 *   ab_worker_serve(w, &err);                       // registers: `served`
 *   while (running) ab_worker_run(w, 100, &err);    // calls on_action, keeps the lease
 *   ab_worker_destroy(&w);
 *
 * The worker keeps its lease itself: ab_worker_run() sends a `ping` when it
 * has sent nothing for a third of the lease. When a pong comes from another
 * broker instance (the broker restarted and forgot its workers), it sends
 * `serve` again by itself, and again at each later pong until that instance
 * answers `served`: a retryable refusal (overloaded, ...) or a `serve` that
 * could not be sent is retried so, a refusal that is not retryable is also
 * returned by ab_worker_run(). Every message of the
 * connection is read by ab_worker_run(), so an action call is never lost
 * behind a reply the worker waits for: it waits for none (results are sent
 * and their acknowledgements counted as they arrive).
 *
 * Runs (docs/PROTOCOL.md 7.12, 7.13) arrive through the same loop: an
 * assignment (ab_worker_on_assign) hands the worker a request to run, with
 * the claim epoch to publish it with (ab_producer_assigned() on a producer
 * of its own connection); a cancel (ab_worker_on_cancel) asks it to end a
 * run it owns with outcome cancelled. A worker with no assignment callback
 * declines every assignment. An assignment may be declined (given back to
 * the queue) until its RUN_STARTED is published, with ab_worker_decline().
 *
 * Thread-safety: one thread per worker.
 */
#ifndef AGENTBUS_WORKER_H
#define AGENTBUS_WORKER_H

#include "agentbus/buf.h"
#include "agentbus/codec.h"
#include "agentbus/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ab_worker ab_worker_t;

typedef struct ab_worker_opts {
    const char *name;  /**< the worker's name (required), 1..AB_WORKER_NAME_MAX bytes */
    uint32_t lease_ms; /**< asked for; 0 = the broker's default (10 s) */
    int timeout_ms;    /**< connect, `serve` and decline wait; 0 = 5000 */
} ab_worker_opts_t;

/**
 * Answer one action call. @p call (borrowed for the call) holds the agent,
 * action, payload and thread. Write the result as JSON text to @p result
 * (left empty: no result) and return AB_OK; or return an error status with
 * @p err set, which the caller receives as it is.
 *
 * The callback runs inside ab_worker_run(), so while it runs the worker
 * reads nothing and renews no lease: keep it shorter than the lease and than
 * call->timeout_ms (a call answered after its timeout reaches nobody:
 * stats.undelivered). There is no way yet to answer a call later, from
 * another thread.
 */
typedef ab_status_t (*ab_action_fn)(void *ud, const ab_action_call_t *call, ab_buf_t *result,
                                    ab_error_t *err);

/**
 * A run was assigned to this worker (@p a borrowed for the call: copy what
 * you keep). Publish its RUN_STARTED with a->epoch soon: until it commits,
 * the broker may hand the request to another worker if this one's lease
 * lapses. Runs inside ab_worker_run(), like the action callback.
 */
typedef void (*ab_assign_fn)(void *ud, ab_worker_t *w, const ab_assign_t *a);

/** The broker asks to cancel a run this worker owns (@p c borrowed for the call). */
typedef void (*ab_run_cancel_fn)(void *ud, ab_worker_t *w, const ab_run_cancel_t *c);

/** What a worker has done so far. */
typedef struct ab_worker_stats {
    uint64_t calls;           /**< action calls received */
    uint64_t failed;          /**< ... answered with an error */
    uint64_t undelivered;     /**< answers the broker could no longer deliver (acks false), or
                                   that could not be sent in time (the broker gone) */
    uint64_t pings;           /**< lease renewals sent */
    uint64_t reserved;        /**< times it was served again (`served`), after a broker restart */
    uint64_t assigned;        /**< assignments received */
    uint64_t declined;        /**< assignments declined (by the app or for want of a callback) */
    uint64_t cancels;         /**< run cancels received */
    uint64_t decline_refused; /**< declines the broker refused (an `error` answer; one that is
                                   retryable is sent again) */
} ab_worker_stats_t;

/** Connect to @p endpoint (hello/welcome). @return AB_OK or the connection's error. */
AB_API AB_NODISCARD ab_status_t ab_worker_new(ab_worker_t **out, const char *endpoint,
                                              const ab_worker_opts_t *opts, ab_error_t *err);

/**
 * Leave (a served worker sends `leave` and waits up to 0.5 s for `left`, so
 * the broker assigns it nothing more and requeues what it holds that has
 * not started), close the connection and free the worker (NULL-safe;
 * *w = NULL). Runs it had started are orphaned: end them first.
 */
AB_API void ab_worker_destroy(ab_worker_t **w);

/**
 * Add an agent to serve, before ab_worker_serve(): its name (an id), its
 * capacity (1..AB_SERVE_CAPACITY_MAX runs at once) and the action ids it
 * handles (copied). @return AB_OK, AB_INVALID_ARGUMENT or AB_TOO_LARGE.
 */
AB_API AB_NODISCARD ab_status_t ab_worker_add_agent(ab_worker_t *w, const char *agent,
                                                    uint32_t capacity, const char *const *actions,
                                                    size_t nactions, ab_error_t *err);

/** The callback for action calls (none set: each call is answered `unsupported`). */
AB_API void ab_worker_on_action(ab_worker_t *w, ab_action_fn fn, void *ud);

/** The callback for assignments (none set: each is declined). */
AB_API void ab_worker_on_assign(ab_worker_t *w, ab_assign_fn fn, void *ud);

/** The callback for run cancels (none set: they are counted and ignored). */
AB_API void ab_worker_on_cancel(ab_worker_t *w, ab_run_cancel_fn fn, void *ud);

/**
 * Give assignment (@p request, @p epoch) back before its run starts; it goes
 * back to the head of the queue (and not to this worker for a second).
 * Sent without waiting for the answer (the `declined` answer is read by
 * ab_worker_run()); the send waits at most opts.timeout_ms for the broker.
 * A refusal (an `error` answer) is counted in stats.decline_refused: when
 * retryable (overloaded ...) ab_worker_run() sends the decline again 0.1 s
 * later, until it is answered; any other (not_found: the assignment is not,
 * or no longer, this worker's) is only counted.
 * @p reason may be NULL; one over AB_REASON_MAX bytes is cut there, or
 * before the UTF-8 character the cut would split; one with bytes that are
 * not UTF-8 is cut before the first (the decline still goes).
 * @return AB_OK, AB_INVALID_ARGUMENT, AB_TIMEOUT (retryable: the broker is
 *         not connected or not reading; nothing sent), AB_IO, AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_worker_decline(ab_worker_t *w, uint64_t request, uint64_t epoch,
                                                  const char *reason, ab_error_t *err);

/**
 * Send `serve` with the agents added so far and wait for `served`.
 * @return AB_OK, or the broker's refusal (AB_INVALID_ENVELOPE, AB_TOO_LARGE,
 *         AB_OVERLOADED, AB_UNSUPPORTED from a broker without workers),
 *         AB_TIMEOUT, AB_IO, AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_worker_serve(ab_worker_t *w, ab_error_t *err);

/**
 * Handle what arrives for up to @p timeout_ms: action calls (answered through
 * the callback), acknowledgements, lease renewals. Returns after the first
 * batch of messages, or at the timeout. No send waits past the timeout:
 * while the broker is not connected, the ping waits for it that long and is
 * tried again at the next call; an answer that cannot be sent by then is
 * dropped and counted in stats.undelivered.
 * @return AB_OK; the broker's refusal of a `serve` sent again after a
 *         restart when it is not retryable (e.g. AB_UNSUPPORTED; the error
 *         in @p err; the next pong tries again); AB_IO or
 *         AB_INVALID_ENVELOPE when the connection fails.
 */
AB_API AB_NODISCARD ab_status_t ab_worker_run(ab_worker_t *w, int timeout_ms, ab_error_t *err);

/** The broker's id of this worker ("" before ab_worker_serve()). */
AB_API const char *ab_worker_id(const ab_worker_t *w);

/** The lease granted (0 before ab_worker_serve()). */
AB_API uint32_t ab_worker_lease_ms(const ab_worker_t *w);

/** Counters so far. */
AB_API ab_worker_stats_t ab_worker_stats(const ab_worker_t *w);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_WORKER_H */

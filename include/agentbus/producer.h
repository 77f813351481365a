/*
 * agentbus/producer.h - the producer: one writer of one run at a time
 * (docs/CLIENT.md "Producer").
 *
 * An ab_producer_t owns one connection (ab_conn_t) to a broker's command
 * endpoint. It claims a run (learning the epoch and the last committed seq,
 * so a restarted worker continues where the bus left off), validates each
 * AG-UI event locally (strict producer rules), wraps it in an envelope with
 * the next seq, the epoch and the current time, and keeps the encoded
 * envelope in a bounded outbox until the broker acknowledges it. The outbox
 * holds at most min(batch_max, outbox_max, the broker's max_batch) events
 * (256 with the defaults).
 *
 * Sending: when batch_max events are pending, or on ab_producer_flush(), the
 * producer sends one `publish` of up to batch_max envelopes and waits for its
 * `published` reply (one request in flight). Per-event answers:
 *  - accepted / duplicate: the event leaves the outbox;
 *  - gap (detail expected_seq): the broker lacks events this producer saw
 *    acknowledged (its expected_seq is below the rejected seq, PROTOCOL.md
 *    7.4.2 rule 4: e.g. a data directory wiped or restored from an older
 *    backup); the outbox cannot fill that in, so the producer enters the
 *    failed state below with AB_GAP (details expected_seq and seq);
 *  - overloaded / unavailable / timeout / io (and a timed-out request): the
 *    batch is sent again after an exponential backoff (base, doubled per try,
 *    capped at max, each delay drawn from its upper half), at most
 *    max_retries times in a row;
 *  - anything else (fenced, conflict, run_terminal, invalid_event, ...):
 *    the producer enters the failed state, keeps that error (with an int
 *    detail "seq" naming the rejected event) and returns its code from this
 *    and every later publish/flush call.
 *
 * Errors: every function returns an ab_status_t and fills @p err (may be
 * NULL) with the typed error of the wire; out-params are written only on
 * AB_OK. Every call that can block is bounded: publish by opts->timeout_ms
 * (a full outbox sends a batch and waits at most that long), claim by
 * opts->timeout_ms, flush by its own timeout. That includes the sending: a
 * broker that is gone makes them return AB_TIMEOUT (agentbus/client.h,
 * "Sending is bounded").
 *
 * Ownership: the producer copies the endpoint, ids and options; event text
 * and values passed to publish are borrowed for the call only.
 *
 * Thread-safety: a producer is used by one thread at a time. Distinct
 * producers may run in different threads.
 */
#ifndef AGENTBUS_PRODUCER_H
#define AGENTBUS_PRODUCER_H

#include "agentbus/client.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Default outbox_max. The outbox holds at most min(batch_max, outbox_max,
 * the broker's max_batch) events, so outbox_max matters only below
 * batch_max; with the defaults the bound is 256.
 */
#define AB_PRODUCER_OUTBOX_DEFAULT 4096
/** Default events per publish (also capped by the broker's max_batch). */
#define AB_PRODUCER_BATCH_DEFAULT 256
/** Default first retry backoff and its cap, ms. */
#define AB_PRODUCER_BACKOFF_BASE_DEFAULT 10
#define AB_PRODUCER_BACKOFF_MAX_DEFAULT  1000
/** Default retries in a row of a retryable failure before giving up. */
#define AB_PRODUCER_RETRIES_DEFAULT 8

/** Producer options; zero-initialise and set what you need (0 = default). */
typedef struct ab_producer_opts {
    void *zmq_ctx;           /**< borrowed ZeroMQ context; NULL = owned by the connection */
    const char *client_name; /**< `hello.client`; NULL = "agentbus-producer" */
    uint32_t outbox_max;     /**< outbox cap, effective only below batch_max; 0 = 4096 */
    uint32_t batch_max;      /**< events per publish; 0 = 256; capped by welcome max_batch */
    int timeout_ms;          /**< bound of connect, claim, publish and each request; 0 = 5000 */
    int backoff_base_ms;     /**< first retry delay; 0 = 10 */
    int backoff_max_ms;      /**< retry delay cap; 0 = 1000 */
    int max_retries;         /**< retryable failures in a row before failing; 0 = 8, <0 = none */
} ab_producer_opts_t;

/** Counters since ab_producer_new(). */
typedef struct ab_producer_stats {
    uint64_t published;   /**< events appended to the outbox */
    uint64_t acked;       /**< events acknowledged (accepted + duplicate) */
    uint64_t duplicates;  /**< of which acknowledged as duplicate */
    uint64_t retries;     /**< batches sent again after a retryable failure */
    uint64_t gaps;        /**< gap answers recovered by resending (0 with a broker that
                               follows PROTOCOL.md 7.4.2: a gap fails the producer) */
    uint64_t batches;     /**< publish requests sent */
    uint32_t outbox;      /**< events in the outbox now */
    uint32_t outbox_peak; /**< most events ever held in the outbox (<= outbox_max) */
} ab_producer_stats_t;

typedef struct ab_producer ab_producer_t;

/**
 * Connect to @p endpoint and negotiate (hello/welcome).
 * @param opts  NULL for defaults; copied.
 * @return AB_OK; AB_TIMEOUT (retryable) when the broker does not answer in
 *         time; AB_INCOMPATIBLE_VERSION; AB_INVALID_ARGUMENT; AB_IO; AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_producer_new(ab_producer_t **out, const char *endpoint,
                                                const ab_producer_opts_t *opts, ab_error_t *err);

/** Close the connection and free the outbox (unacknowledged events are dropped).
 *  NULL-safe; sets *p = NULL. */
AB_API void ab_producer_destroy(ab_producer_t **p);

/**
 * Claim run (@p thread, @p run): a new epoch that fences any earlier writer.
 * The next event gets seq *last_seq + 1. Allowed again (another or the same
 * run) only while the outbox is empty.
 * @param last_seq  out, may be NULL: the last committed seq (0 = none).
 * @return AB_OK, AB_INVALID_ARGUMENT (bad id, outbox not empty), the
 *         broker's error, AB_TIMEOUT, AB_IO, AB_NOMEM; the failed state's code.
 */
AB_API AB_NODISCARD ab_status_t ab_producer_claim(ab_producer_t *p, const char *thread,
                                                  const char *run, uint64_t *last_seq,
                                                  ab_error_t *err);

/**
 * Write an assigned run (worker.h): the assignment's claim epoch instead of
 * a claim of its own (a claim of an assigned run is refused: it would fence
 * the assignee). The next event gets seq 1: an assigned run has not started.
 * Allowed only while the outbox is empty.
 * @return AB_OK, AB_INVALID_ARGUMENT, AB_NOMEM; the failed state's code.
 */
AB_API AB_NODISCARD ab_status_t ab_producer_assigned(ab_producer_t *p, const char *thread,
                                                     const char *run, uint64_t epoch,
                                                     ab_error_t *err);

/**
 * Publish one AG-UI event given as JSON text (@p len bytes, no NUL needed).
 * It is validated strictly first; a local rejection (AB_INVALID_EVENT with
 * err->field the JSON pointer, AB_TOO_LARGE) consumes no seq and leaves the
 * producer usable. Otherwise the event gets the next seq and enters the
 * outbox; a batch is sent when batch_max events are pending.
 * @return AB_OK, AB_INVALID_EVENT, AB_TOO_LARGE, AB_INVALID_ARGUMENT (not
 *         claimed), AB_NOMEM, or a send failure as for ab_producer_flush().
 */
AB_API AB_NODISCARD ab_status_t ab_producer_publish_json(ab_producer_t *p, const char *json,
                                                         size_t len, ab_error_t *err);

/** Same as ab_producer_publish_json() for an event built as a value tree
 *  (borrowed; must be a JSON-safe map). */
AB_API AB_NODISCARD ab_status_t ab_producer_publish_val(ab_producer_t *p, const ab_val_t *body,
                                                        ab_error_t *err);

/**
 * Send everything pending and wait until every event of the outbox is
 * acknowledged, or @p timeout_ms (<= 0: opts->timeout_ms) passes.
 * @return AB_OK (outbox empty); AB_TIMEOUT / AB_UNAVAILABLE / AB_OVERLOADED /
 *         AB_IO when retries ran out or the time passed (the outbox is kept;
 *         flush may be called again); the failed state's code (fenced,
 *         conflict, run_terminal, invalid_event, ...; err detail "seq").
 */
AB_API AB_NODISCARD ab_status_t ab_producer_flush(ab_producer_t *p, int timeout_ms,
                                                  ab_error_t *err);

/** Counters; never fails. */
AB_API ab_producer_stats_t ab_producer_stats(const ab_producer_t *p);

/** The seq the next published event will get (0 before a claim). */
AB_API uint64_t ab_producer_next_seq(const ab_producer_t *p);

/** The epoch of the current claim (0 before a claim). */
AB_API uint64_t ab_producer_epoch(const ab_producer_t *p);

/** The highest acknowledged seq of the current run. */
AB_API uint64_t ab_producer_acked_seq(const ab_producer_t *p);

/** The connection (borrowed), e.g. for heads or replay on the same broker. */
AB_API ab_conn_t *ab_producer_conn(ab_producer_t *p);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_PRODUCER_H */

/*
 * agentbus/subscriber.h - an exact, resumable subscription to a run, a
 * thread or every event of a broker (docs/CLIENT.md "Subscriber";
 * docs/PROTOCOL.md sections 6 and 7.6-7.7).
 *
 * An ab_sub_t combines the live event endpoint (a SUB socket) with the
 * durable history (`replay` on the command endpoint), the ZeroMQ guide's
 * Clone pattern: subscribe live first, replay from the cursor, then deliver
 * the buffered live events the replay did not already deliver. The callback
 * sees every event of a run exactly once, in seq order, with its broker
 * stamp. The subscriber replays from its cursor again when:
 *   - a live event shows a hole (seq > cursor + 1 for its run; for scope
 *     "all", pos > last pos + 1; for an ordered thread, a stamp tprev above
 *     the position up to which the thread is synced, or, from a broker that
 *     sends no tprev, pos > that position + 1) - it never delivers past a
 *     hole; for a thread not ordered, also a stamp tprev above the position
 *     up to which the thread is known complete (another run's last events
 *     may be lost; the event itself is delivered when it is next of its
 *     run);
 *   - a heartbeat's head_pos is above the position up to which the scope is
 *     known complete (a dropped tail; for a thread not ordered, a live event
 *     moves that position only when its tprev is at or below it or, without
 *     tprev, its pos is the one after, so a run's lost last events are
 *     replayed although other runs' later events arrived);
 *   - the live buffer overflowed opts->max_pending during a replay;
 *   - the broker restarted (a heartbeat with a new instance id) or fell
 *     silent for opts->silence_ms (it then reconnects and sends `hello`).
 *
 * Reconnecting backs off: the first attempt after a working connection is
 * immediate; after each attempt that does not lead to a working connection
 * (a `welcome`, then a heartbeat of that broker or a completed replay) the
 * next waits a delay drawn from [c/2, c], c = min(opts->reconnect_max_ms,
 * opts->reconnect_base_ms * 2^(n-1)) after n such attempts. A failed replay
 * waits the same way. So a fleet does not hammer a stalled broker, and its
 * attempts spread out (docs/CLIENT.md "Reconnecting").
 *
 * The cursor (ab_sub_cursors() / ab_sub_position()) is exact: a new
 * subscriber created from it after a crash of the application receives
 * precisely the events after the last one delivered.
 *
 * Driving: single-threaded and caller-driven. Nothing happens outside
 * ab_sub_poll(), which runs the loop for up to its timeout and calls the
 * callback from inside. Closing (ab_sub_destroy) sends nothing that changes
 * a run.
 *
 * Memory: bounded by opts->max_pending buffered live events (plus the
 * cursor map: one entry per run of a subscribed thread, none when ordered). A subscriber far
 * behind drops its live buffer and catches up from the store.
 *
 * Thread-safety: one thread at a time per ab_sub_t.
 */
#ifndef AGENTBUS_SUBSCRIBER_H
#define AGENTBUS_SUBSCRIBER_H

#include "agentbus/codec.h"
#include "agentbus/keys.h"
#include "agentbus/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Default bound of live events buffered while a replay runs. */
#define AB_SUB_MAX_PENDING_DEFAULT 10000
/** Default silence (no heartbeat) after which the subscriber reconnects, ms. */
#define AB_SUB_SILENCE_DEFAULT_MS 3000
/** Default ceiling of the first reconnect backoff, ms (the delay is half to all of it). */
#define AB_SUB_RECONNECT_BASE_DEFAULT_MS 200
/** Default cap of the reconnect backoff ceiling, ms. */
#define AB_SUB_RECONNECT_MAX_DEFAULT_MS 5000

/**
 * What a subscription covers: a replay scope (the one scope type of
 * agentbus/model.h; the AB_SUB_ names are kept for this API).
 */
typedef ab_replay_scope_t ab_sub_scope_t;
#define AB_SUB_RUN    AB_REPLAY_RUN    /**< one run: opts->thread + opts->run, cursor after_seq */
#define AB_SUB_THREAD AB_REPLAY_THREAD /**< every run of opts->thread, cursor a run -> seq map */
#define AB_SUB_ALL    AB_REPLAY_ALL    /**< every event of the broker, cursor a commit position */

/** Where a subscription starts. */
typedef enum ab_sub_start {
    AB_SUB_FROM_CURSOR = 0, /**< after the given cursor (0 / empty = from the start) */
    AB_SUB_FROM_NOW,        /**< after the broker's current heads (live only) */
} ab_sub_start_t;

/** One per-run cursor: the run's events after after_seq are wanted. */
typedef struct ab_sub_cursor {
    const char *run; /**< NUL-terminated run id */
    uint64_t after_seq;
} ab_sub_cursor_t;

/** One delivered event; every pointer is valid during the callback only. */
typedef struct ab_sub_event {
    ab_event_t ev;        /**< decoded envelope: thread, run, seq, epoch, ts, body */
    const uint8_t *bytes; /**< the envelope exactly as the producer sent it */
    size_t len;
    ab_stamp_t stamp; /**< broker stamp: commit position and time */
    bool replayed;    /**< came from the store (replay), not the live stream */
} ab_sub_event_t;

/**
 * The application callback. Return 0 to go on; any other value stops the
 * current ab_sub_poll() (which returns AB_REQUEST_ABORTED). The event is
 * delivered (the cursor has advanced) either way.
 */
typedef int (*ab_sub_cb)(void *ud, const ab_sub_event_t *e);

/**
 * A notice about the subscribed thread (docs/PROTOCOL.md 6.4; thread and
 * whole-bus scopes only): for example a started run whose worker is gone
 * (orphaned). Live only and best effort: a notice missed while disconnected
 * is not replayed (the broker's `requests` listing has the same facts).
 */
typedef void (*ab_sub_notice_cb)(void *ud, const ab_notice_t *n);

/** Subscription options; zero-initialise and set what you need. */
typedef struct ab_sub_opts {
    ab_sub_scope_t scope;
    const char *thread; /**< AB_SUB_RUN, AB_SUB_THREAD */
    const char *run;    /**< AB_SUB_RUN */
    ab_sub_start_t start;
    uint64_t after_seq;             /**< AB_SUB_RUN cursor */
    const ab_sub_cursor_t *cursors; /**< AB_SUB_THREAD cursors; runs absent start at seq 1 */
    size_t ncursors;
    uint64_t after_pos; /**< AB_SUB_ALL (and ordered AB_SUB_THREAD) cursor: pos > after_pos */
    ab_sub_cb on_event; /**< required */
    void *ud;
    ab_sub_notice_cb on_notice; /**< optional (same @p ud): notices about the thread */
    size_t max_pending;         /**< 0 = AB_SUB_MAX_PENDING_DEFAULT */
    int silence_ms;             /**< 0 = AB_SUB_SILENCE_DEFAULT_MS */
    int timeout_ms;             /**< per request to the broker; 0 = 5000 */
    int rcvhwm;                 /**< SUB receive high-water mark; 0 = ZeroMQ's default */
    void *zmq_ctx;              /**< borrowed ZeroMQ context; NULL = own one */
    /** First reconnect backoff ceiling, ms; 0 = AB_SUB_RECONNECT_BASE_DEFAULT_MS;
     *  at most reconnect_max_ms (a larger one is lowered to it). < 0 is refused. */
    int reconnect_base_ms;
    /** Cap of the backoff ceiling, ms; 0 = AB_SUB_RECONNECT_MAX_DEFAULT_MS; < 0 is refused. */
    int reconnect_max_ms;
    /**
     * Do not decode event bodies: the callback's ev.body is NULL (the
     * envelope is in bytes/len; its header is still decoded and checked).
     * For subscribers that forward, store or count envelopes; it saves most
     * of the subscriber's CPU per event (docs/PERFORMANCE.md, fan-out).
     */
    bool skip_body;
    /**
     * CURVE, as ab_conn_opts_t key and server_key (client.h): this client's
     * key pair and the broker's public key (Z85), both or neither; copied.
     * Neither: the environment's AGENTBUS_KEY / AGENTBUS_SERVER_KEY, when
     * set. For a process that subscribes as several identities (the HTTP
     * gateway, one per bearer token).
     */
    const ab_keypair_t *key;
    const char *server_key;
    /* Added after the fields above (kept in place for programs built against them). */
    int rcvbuf; /**< SUB's kernel receive buffer, bytes (SO_RCVBUF); 0 = the system's */
    /**
     * AB_SUB_THREAD only: deliver the thread in strict commit-position
     * order, with a position cursor (after_pos, as AB_SUB_ALL; cursors must
     * be empty). A live event is delivered straight away only when nothing
     * of the thread can lie between the last position known complete and
     * it: its stamp's tprev is at or below that position or, from a broker
     * that sends no tprev, its pos is the one after it; any other live
     * event makes the subscriber replay the thread from that position
     * (`replay` scope thread with `after_pos`, docs/PROTOCOL.md 7.6) and
     * buffer what comes live meanwhile (at most max_pending). So every
     * delivered pos is above the previous one and "everything of the thread
     * up to the last delivered pos" holds at every event: ab_sub_position()
     * is an exact cursor. Keeps no per-run map.
     */
    bool ordered;
} ab_sub_opts_t;

typedef struct ab_sub ab_sub_t;

/**
 * Connect to the broker at @p endpoint (command endpoint), open the SUB on
 * the event endpoint named by `welcome` and subscribe. The first replay
 * happens in the first ab_sub_poll(). With AB_SUB_FROM_NOW the cursor is
 * read from the broker (ping / heads) here.
 * @return AB_OK; AB_INVALID_ARGUMENT (bad options, field named); the
 *         errors of ab_conn_new(); AB_IO or AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_sub_new(ab_sub_t **out, const char *endpoint,
                                           const ab_sub_opts_t *opts, ab_error_t *err);

/**
 * Close the sockets (linger 0) and free. Sends nothing; reads a replay the callback
 * stopped to its end first, for 0.25 s at most (ab_conn_destroy()). NULL-safe; *s = NULL.
 */
AB_API void ab_sub_destroy(ab_sub_t **s);

/**
 * Run the subscription for up to @p timeout_ms (0: handle what is ready,
 * then return), calling the callback for each event. A replay that is
 * running when the time is up is finished first.
 * While a reconnect or a failed replay waits for its backoff delay, the
 * poll sleeps until the delay or its timeout ends, whichever is first. When
 * the timeout came first, it returns AB_UNAVAILABLE if a reconnect is owed
 * (no connection, or a replay failed with AB_TIMEOUT or AB_IO), and AB_OK
 * if the connection is kept and only a replay is owed (it runs in a later
 * poll, once the delay has passed).
 * @return AB_OK; AB_REQUEST_ABORTED when the callback stopped it; a
 *         retryable error (AB_TIMEOUT, AB_UNAVAILABLE, AB_IO ...) while the
 *         broker is unreachable - keep polling, it reconnects; AB_CORRUPT
 *         when a replay skipped a seq; AB_TOO_LARGE (field "cursors") when a
 *         replay is owed and the thread's cursor map has more runs than the
 *         broker's max_batch - every later poll returns it again; AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_sub_poll(ab_sub_t *s, int timeout_ms, ab_error_t *err);

/**
 * The per-run cursors (AB_SUB_RUN: one entry; AB_SUB_THREAD: one per run
 * seen or given; AB_SUB_ALL: none). *out points into the subscriber, valid
 * until the next ab_sub_poll() or ab_sub_destroy().
 * @return the number of entries.
 */
AB_API size_t ab_sub_cursors(const ab_sub_t *s, const ab_sub_cursor_t **out);

/** The commit position of the last delivered event (AB_SUB_ALL: the cursor). */
AB_API uint64_t ab_sub_position(const ab_sub_t *s);

/** Counters for tests and monitoring. */
typedef struct ab_sub_stats {
    uint64_t delivered;  /**< events given to the callback */
    uint64_t replays;    /**< replays run (the first included) */
    uint64_t holes;      /**< holes seen in the live stream */
    uint64_t dups;       /**< live events dropped as already delivered */
    uint64_t overflows;  /**< live buffer overflows (max_pending) */
    uint64_t reconnects; /**< reconnect attempts (restart, silence or a lost connection) */
    /** The backoff delay drawn after the latest attempt or failed replay, ms;
     *  0 once the connection works (a heartbeat or a completed replay). */
    uint64_t backoff_ms;
} ab_sub_stats_t;

/** Copy of the counters. */
AB_API ab_sub_stats_t ab_sub_stats(const ab_sub_t *s);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_SUBSCRIBER_H */

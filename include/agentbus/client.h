/*
 * agentbus/client.h - the client side of the command endpoint
 * (docs/PROTOCOL.md sections 1, 7 and 9).
 *
 * An ab_conn_t is one DEALER connection to a broker's command endpoint.
 * ab_conn_new() connects, sends `hello` and waits for `welcome`; after that
 * every request carries the negotiated version and a correlation id chosen
 * by the connection (a counter starting at 1). Replies are matched by cid,
 * so several requests may be outstanding (ab_conn_send() + ab_conn_recv());
 * replies of cids nobody waits for any more are discarded.
 *
 * Errors: every blocking call takes a timeout in milliseconds (<= 0 means
 * the connection's default, opts->timeout_ms) and fails with AB_TIMEOUT
 * (retryable) when it passes, except where a function's own comment says
 * otherwise (ab_conn_wait(): <= 0 does not wait; ab_conn_invoke_action():
 * 0 is the broker's default of 30 s, waited for plus 5 s). An `error`
 * reply from the broker becomes the returned status, with the broker's
 * error (code, message, field, details, retryable, cid) copied into @p err.
 * A reply that does not decode, or that has the wrong op, is
 * AB_INVALID_ENVELOPE. ZeroMQ failures are AB_IO.
 *
 * Sending is bounded too: a request is handed to ZeroMQ only while the
 * broker is connected (ZMQ_IMMEDIATE), and a send waits for that (or for
 * room in a full queue) until the call's timeout at most, then fails with
 * AB_TIMEOUT (retryable) having sent nothing. While the broker is gone,
 * requests do not pile up to be delivered when it comes back: a call that
 * gave up is not carried out later. A request already queued when the
 * connection breaks is dropped with it (its call times out).
 *
 * Ownership: decoded replies (ab_msg_t views, result arrays, heads) point
 * into the caller's ab_doc_t and into the connection's receive buffer; both
 * are valid until the next call on the same connection or doc.
 *
 * Thread-safety: a connection is used by one thread at a time (ZeroMQ
 * sockets are not thread-safe). Distinct connections may share a ZeroMQ
 * context (opts->zmq_ctx) and be used from different threads.
 */
#ifndef AGENTBUS_CLIENT_H
#define AGENTBUS_CLIENT_H

#include "agentbus/buf.h"
#include "agentbus/codec.h"
#include "agentbus/keys.h"
#include "agentbus/status.h"
#include "agentbus/value.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Default timeout of blocking calls, ms. */
#define AB_CONN_TIMEOUT_DEFAULT 5000
/** Default replay window (chunks granted at once). */
#define AB_CONN_WINDOW_DEFAULT 8

/** Connection options; zero-initialise and set what you need. */
typedef struct ab_conn_opts {
    void *zmq_ctx;             /**< borrowed ZeroMQ context; NULL = the conn owns one */
    const char *client_name;   /**< `hello.client`; NULL = "agentbus-c" */
    const uint32_t *versions;  /**< versions offered; NULL = ab_versions_supported() */
    size_t nversions;          /**< entries of versions (1..AB_MAX_VERSIONS) */
    int timeout_ms;            /**< default timeout of every call; 0 = 5000 */
    uint32_t replay_window;    /**< replay chunks granted at once; 0 = 8 */
    uint32_t replay_chunk_max; /**< chunk_events asked for; 0 = broker default */
    /**
     * Send a publish's envelopes as one frame each even when the broker
     * announces `packedPublish` (by default they then go packed in one
     * frame, PROTOCOL.md 7.4; that saves ZeroMQ's per-frame cost).
     */
    bool frame_per_event;
    /**
     * CURVE (a broker started with --keys, docs/OPERATIONS.md "Securing a bus
     * across machines"): this client's key pair (its secret key set) and the
     * broker's public key (Z85, 40 characters); both or neither. Neither:
     * the files named by the environment, AGENTBUS_KEY (this client's secret
     * key file) and AGENTBUS_SERVER_KEY (the broker's public key file, or a
     * directory holding it as broker.key: the broker's keys directory), when
     * set; else no CURVE. The event endpoint's SUB sockets of a subscriber
     * use the same keys.
     */
    const ab_keypair_t *key;
    const char *server_key;
} ab_conn_opts_t;

typedef struct ab_conn ab_conn_t;

/**
 * Connect a DEALER to @p endpoint, send `hello` and wait for `welcome`.
 * @param out   receives the connection on AB_OK.
 * @param opts  NULL for defaults; copied.
 * @return AB_OK; AB_UNAVAILABLE (retryable, field "endpoint") at once when a
 *         tcp connection is refused (nothing listens there); AB_TIMEOUT
 *         (retryable) when no welcome arrives in time (the message names the
 *         endpoint; a broker with keys never answers a key it does not list);
 *         the broker's error code (e.g. AB_INCOMPATIBLE_VERSION with details
 *         "ours"/"theirs") with the error copied into @p err;
 *         AB_INVALID_ARGUMENT, AB_INVALID_ENVELOPE, AB_IO or AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_conn_new(ab_conn_t **out, const char *endpoint,
                                            const ab_conn_opts_t *opts, ab_error_t *err);

/**
 * Close the socket (linger 0), the owned context and free. NULL-safe; *c = NULL.
 * A replay that ab_conn_replay() stopped (not timed out) and whose end was not read
 * yet is read to its end first, for 0.25 s at most: libzmq 4.3.4 loses the memory of
 * a message closed half received (docs/CLIENT.md "A connection closed while replies
 * still arrive").
 */
AB_API void ab_conn_destroy(ab_conn_t **c);

/* Welcome facts, owned by the connection and valid until it is destroyed. */
/** The negotiated protocol version. */
AB_API uint32_t ab_conn_version(const ab_conn_t *c);
/** The broker instance id (NUL-terminated). */
AB_API const char *ab_conn_instance(const ab_conn_t *c);
/** The event endpoint named by the broker (NUL-terminated). */
AB_API const char *ab_conn_event_endpoint(const ab_conn_t *c);
/** The broker's limits. */
AB_API const ab_limits_t *ab_conn_limits(const ab_conn_t *c);
/** The broker's capabilities; *n receives the count. Names are NUL-terminated copies. */
AB_API const ab_cap_t *ab_conn_caps(const ab_conn_t *c, size_t *n);
/**
 * What this connection's key may do, as the broker's welcome said (JSON text:
 * {"name": NAME, "roles": {ROLE: true | [PREFIX, ...]}}, docs/PROTOCOL.md
 * 1.2), or NULL from a broker without keys (where anyone may do anything).
 */
AB_API const char *ab_conn_access(const ab_conn_t *c);
/** The ZeroMQ context (owned or borrowed), e.g. to open a SUB on the event endpoint. */
AB_API void *ab_conn_zmq_ctx(const ab_conn_t *c);

/**
 * Wait up to @p timeout_ms (<= 0: do not wait) until a reply can be received
 * without blocking. @return 1 when one can, 0 after the timeout, -1 on a
 * ZeroMQ error.
 */
AB_API int ab_conn_wait(ab_conn_t *c, int timeout_ms);

/**
 * Send @p n frames as one message, exactly as given: no header is encoded
 * and nothing is checked. For tools that test a broker's answers to
 * malformed requests (the conformance suite); a normal client uses
 * ab_conn_send(). Replies come back through ab_conn_recv(). The send is
 * bounded as ab_conn_send()'s.
 * @return AB_OK; AB_INVALID_ARGUMENT (n == 0); AB_TIMEOUT as ab_conn_send();
 *         AB_IO when ZeroMQ refuses.
 */
AB_API AB_NODISCARD ab_status_t ab_conn_send_raw(ab_conn_t *c, const ab_buf_t *frames, size_t n,
                                                 ab_error_t *err);

/**
 * Send one request without waiting. The header is @p req with `v` and `cid`
 * filled by the connection (for `credit` and `cancel`, req->cid is kept: it
 * names the stream); @p frames follow it (publish envelopes). A publish to a
 * broker that announced `packedPublish` goes packed (the envelopes copied
 * into one frame, `packed: true`) unless opts.frame_per_event.
 * The send waits at most opts->timeout_ms for the broker ("Sending is bounded" at the top).
 * @param cid  out: the cid used (may be NULL).
 * @return AB_OK, AB_INVALID_ARGUMENT (encoding refused), AB_TOO_LARGE (a
 *         publish whose envelopes exceed the broker's max_publish_bytes,
 *         int detail "limit", or a packed one with an envelope over 4 GiB;
 *         nothing is sent), AB_TIMEOUT (retryable: the broker did not take
 *         the request in time, not connected or not reading; nothing is
 *         sent), AB_IO or AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_conn_send(ab_conn_t *c, const ab_msg_t *req,
                                             const ab_buf_t *frames, size_t nframes, uint64_t *cid,
                                             ab_error_t *err);

/**
 * Wait for the next message for @p cid (0 = any cid) and decode its header
 * into @p reply. Messages of other cids are discarded when @p cid != 0. An
 * `error` message is returned as its code (copied into @p err), with
 * reply->op = AB_OP_ERROR and reply->cid set. Extra frames of the message
 * (a replay_chunk's records frame) are available with ab_conn_frame().
 * @return AB_OK, the broker's error code, AB_TIMEOUT, AB_INVALID_ENVELOPE,
 *         AB_IO or AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_conn_recv(ab_conn_t *c, uint64_t cid, ab_doc_t *doc,
                                             ab_msg_t *reply, int timeout_ms, ab_error_t *err);

/**
 * Frame @p i (from 0) after the header of the last received message; *len
 * receives its length. NULL with *len = 0 when @p i >= ab_conn_nframes().
 */
AB_API const uint8_t *ab_conn_frame(const ab_conn_t *c, size_t i, size_t *len);
/** Number of frames after the header of the last received message. */
AB_API size_t ab_conn_nframes(const ab_conn_t *c);

/**
 * Send @p req and wait for its reply (same cid); @p timeout_ms bounds both
 * together. Errors as ab_conn_send() and ab_conn_recv().
 */
AB_API AB_NODISCARD ab_status_t ab_conn_request(ab_conn_t *c, const ab_msg_t *req,
                                                const ab_buf_t *frames, size_t nframes,
                                                ab_doc_t *doc, ab_msg_t *reply, int timeout_ms,
                                                ab_error_t *err);

/**
 * Publish @p n envelope frames in one request. On AB_OK *results points to
 * n results (views into @p doc). A reply with another number of results is
 * AB_INVALID_ENVELOPE.
 */
AB_API AB_NODISCARD ab_status_t ab_conn_publish(ab_conn_t *c, const ab_buf_t *events, size_t n,
                                                ab_doc_t *doc, const ab_result_t **results,
                                                int timeout_ms, ab_error_t *err);

/** Claim a run; *out receives the `claimed` reply (views into @p doc). */
AB_API AB_NODISCARD ab_status_t ab_conn_claim(ab_conn_t *c, const char *thread, const char *run,
                                              ab_doc_t *doc, ab_claimed_t *out, int timeout_ms,
                                              ab_error_t *err);

/** Ask for heads; *out receives the `heads_reply` (views into @p doc). */
AB_API AB_NODISCARD ab_status_t ab_conn_heads(ab_conn_t *c, const ab_heads_t *q, ab_doc_t *doc,
                                              ab_heads_reply_t *out, int timeout_ms,
                                              ab_error_t *err);

/** Ping; *out receives the `pong` (views into @p doc). */
AB_API AB_NODISCARD ab_status_t ab_conn_ping(ab_conn_t *c, ab_doc_t *doc, ab_pong_t *out,
                                             int timeout_ms, ab_error_t *err);

/**
 * Ask what the broker is doing (`stats`, docs/PROTOCOL.md 7.18); *out receives
 * the `stats_reply` (views into @p doc). Any connection may ask.
 * @return AB_OK, the broker's error (AB_UNSUPPORTED from a broker before
 *         `stats`), AB_TIMEOUT, AB_IO or AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_conn_stats(ab_conn_t *c, ab_doc_t *doc, ab_stats_reply_t *out,
                                              int timeout_ms, ab_error_t *err);

/**
 * List one page of the threads with stored events (`threads`, docs/PROTOCOL.md
 * 7.19): those after q->after (ptr NULL or len 0: from the first), starting
 * with q->prefix (ptr NULL or len 0: every thread), at most q->limit (0: 100;
 * at most AB_THREADS_LIMIT_MAX), in byte order of their ids; with keys, only
 * those the connection's key may observe. *out receives the `threads_reply`
 * (views into @p doc); when out->next.ptr is set, more may follow: ask again
 * with after = out->next. Capability `threads`.
 * @return AB_OK; AB_INVALID_ARGUMENT (a limit above AB_THREADS_LIMIT_MAX, a
 *         cursor or prefix that is not an id: nothing is sent); the broker's
 *         error (AB_UNAUTHORIZED without observe, AB_UNSUPPORTED from a broker
 *         or plugin that cannot list threads); AB_TIMEOUT, AB_IO, AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_conn_threads(ab_conn_t *c, const ab_threads_req_t *q,
                                                ab_doc_t *doc, ab_threads_reply_t *out,
                                                int timeout_ms, ab_error_t *err);

/**
 * Called once per replayed event with its stamp and envelope bytes
 * (borrowed, valid during the call). Return AB_OK to go on; anything else
 * stops the replay (a `cancel` is sent) and is returned by ab_conn_replay().
 */
typedef ab_status_t (*ab_conn_row_cb)(void *ud, const ab_stamp_t *stamp, const uint8_t *event,
                                      size_t len, ab_error_t *err);

/**
 * Stream a replay: sends @p replay_req (op AB_OP_REPLAY; a window of 0 means
 * opts->replay_window, chunk_events 0 means opts->replay_chunk_max), calls
 * @p cb for every event of every chunk in order and grants one more chunk
 * (`credit` {chunks: 1}) per chunk received, until `replay_end`, which is
 * written to @p end (views into @p doc; may be NULL). Chunks of a replay
 * this call gave up on (timeout, callback refusal) that arrive later are
 * credited by ab_conn_recv() as it discards them: the broker counts a
 * chunk's bytes as unread until its credit (docs/PROTOCOL.md 7.6.1).
 * @p timeout_ms bounds the wait for each message, not the whole replay; on
 * a timeout a `cancel` is sent and AB_TIMEOUT returned.
 * @return AB_OK, the broker's error code, the callback's status, AB_TIMEOUT,
 *         AB_INVALID_ENVELOPE (bad chunk/stamp), AB_IO or AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_conn_replay(ab_conn_t *c, const ab_msg_t *replay_req,
                                               ab_conn_row_cb cb, void *ud, ab_doc_t *doc,
                                               ab_replay_end_t *end, int timeout_ms,
                                               ab_error_t *err);

/** List the live workers; *out receives the `workers_reply` (views into @p doc). */
AB_API AB_NODISCARD ab_status_t ab_conn_workers(ab_conn_t *c, ab_doc_t *doc,
                                                ab_workers_reply_t *out, int timeout_ms,
                                                ab_error_t *err);

/**
 * Invoke action @p action of agent @p agent (docs/PROTOCOL.md 7.11) and wait
 * for its answer: @p payload_json is the payload as JSON text (NULL: none),
 * @p thread the thread the call is about (NULL: none), @p timeout_ms the
 * call's timeout (0: the broker's default, 30 s); the wait lasts that long
 * plus 5 s (the broker itself answers `timeout` when the call's time is up).
 * @param out  the `action_reply` (views into @p doc), written only on AB_OK.
 * @return AB_OK; the worker's error as the worker sent it; AB_UNSUPPORTED
 *         (no worker ever served it), AB_UNAVAILABLE (none live; retryable),
 *         AB_OVERLOADED, AB_TIMEOUT, AB_REQUEST_ABORTED; AB_INVALID_ARGUMENT
 *         (bad JSON, id or action id); AB_IO, AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_conn_invoke_action(ab_conn_t *c, const char *agent,
                                                      const char *action, const char *payload_json,
                                                      const char *thread, uint32_t timeout_ms,
                                                      ab_doc_t *doc, ab_action_reply_t *out,
                                                      ab_error_t *err);

/**
 * Send the invoke_action of ab_conn_invoke_action() without waiting: its cid
 * goes to *@p cid. Take the answer with ab_conn_recv(c, cid, ...) (an
 * `action_reply`, or the error as its status); abort it with a `cancel` of
 * that cid (ab_conn_send()), which ends it `request_aborted`.
 * @return AB_OK, AB_INVALID_ARGUMENT (bad JSON, id or action id), AB_IO, AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_conn_invoke_send(ab_conn_t *c, const char *agent,
                                                    const char *action, const char *payload_json,
                                                    const char *thread, uint32_t timeout_ms,
                                                    uint64_t *cid, ab_error_t *err);

/* ---- dispatch (docs/PROTOCOL.md 7.12 - 7.16; worker side: worker.h) ---- */

/**
 * Ask the broker to run an agent (start_run) and wait for `run_accepted`:
 * the request's id, its run id (the caller's, the input's runId, or one the
 * broker made), its state (queued or already assigned) and queue position.
 * The same req->key gets the same answer again (out->existing), also after
 * a broker restart. Views of *out point into @p doc.
 * @return AB_OK; AB_INVALID_EVENT (the input breaks RunAgentInput: field
 *         "input/..."), AB_CONFLICT (if_busy reject on a busy thread; the key
 *         names another request), AB_OVERLOADED, AB_UNSUPPORTED (a broker
 *         without dispatch), AB_TIMEOUT, AB_IO, AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_conn_start_run(ab_conn_t *c, const ab_start_run_t *req,
                                                  ab_doc_t *doc, ab_run_accepted_t *out,
                                                  int timeout_ms, ab_error_t *err);

/**
 * Answer every pending interrupt of an interrupted run and queue the run
 * that continues it (resume_run), as ab_conn_start_run().
 * @return as ab_conn_start_run(); AB_CONFLICT naming the interrupt (detail
 *         "interruptId") when an entry is missing, unknown, repeated or
 *         resolves an expired interrupt, or the run is not the thread's
 *         pending interrupted run.
 */
AB_API AB_NODISCARD ab_status_t ab_conn_resume_run(ab_conn_t *c, const ab_resume_run_t *req,
                                                   ab_doc_t *doc, ab_run_accepted_t *out,
                                                   int timeout_ms, ab_error_t *err);

/**
 * Cancel a run (cancel_run): *out says whether it was dequeued, delivered
 * to its owner (which ends it with outcome cancelled), has no live owner,
 * or had already ended. Wait for the terminal event by subscribing.
 * @return AB_OK, AB_NOT_FOUND (neither a request nor a known run), ...
 */
AB_API AB_NODISCARD ab_status_t ab_conn_cancel_run(ab_conn_t *c, const ab_cancel_run_t *req,
                                                   ab_doc_t *doc, ab_cancel_reply_t *out,
                                                   int timeout_ms, ab_error_t *err);

/**
 * End an orphaned run (abandon_run, PROTOCOL.md 7.17): the broker commits its
 * terminal RUN_ERROR itself (code "agentbus.abandoned", stamp `by: broker`);
 * *out has its seq and pos.
 * @return AB_OK; AB_CONFLICT (a live owner, not started, already ended);
 *         AB_NOT_FOUND (never dispatched); AB_TIMEOUT, AB_IO, AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_conn_abandon_run(ab_conn_t *c, const ab_abandon_run_t *req,
                                                    ab_doc_t *doc, ab_abandoned_t *out,
                                                    int timeout_ms, ab_error_t *err);

/** List run requests (requests): open ones by default, or one state. */
AB_API AB_NODISCARD ab_status_t ab_conn_requests(ab_conn_t *c, const ab_requests_t *req,
                                                 ab_doc_t *doc, ab_requests_reply_t *out,
                                                 int timeout_ms, ab_error_t *err);

/**
 * Build an event envelope from a JSON body: append to @p out the envelope
 * {v, thread, run, seq, epoch, ts (now), event: <json>}.
 * @return AB_OK, AB_INVALID_ARGUMENT (bad id, bad JSON, not a map) or AB_NOMEM.
 *         On failure out->len is unchanged. Reentrant.
 */
AB_API AB_NODISCARD ab_status_t ab_envelope_json(ab_buf_t *out, uint32_t v, const char *thread,
                                                 const char *run, uint64_t seq, uint64_t epoch,
                                                 const char *json, ab_error_t *err);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_CLIENT_H */

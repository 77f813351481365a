/*
 * gateway.h - internals of `agentbus gateway`, the HTTP/SSE front of a bus
 * (docs/GATEWAY.md). The gateway is a client of the broker (the client
 * library) and an HTTP server (libmicrohttpd, one thread per connection).
 *
 * Files:
 *   gw_route.c   decoding what HTTP hands in: the path into a route with its
 *                ids, the event cursor (Last-Event-ID / ?after=), the query
 *                of GET /threads, the token file. Pure functions with no I/O: the fuzz target's
 * subject. gw_server.c  the daemon: request contexts, bodies, access, CORS, errors, metrics,
 * dispatch to the handlers. gw_sse.c     event streams: a pump thread per stream feeding a bounded
 *                queue that the connection's thread drains into SSE frames.
 *   gw_api.c     the JSON endpoints (snapshot, runs, events as JSON Lines,
 *                cancel, resume, actions, workers) and POST /agents/{agent}.
 *   gw_threads.c GET /threads: a page of the broker's `threads` listing.
 *
 * Cursor: the SSE `id:` of an event is its commit position (broker stamp
 * `pos`, docs/PROTOCOL.md section 5); resuming after cursor P sends exactly
 * the events of the scope whose pos is above P (gw_sse.c explains how).
 */
#ifndef AB_GATEWAY_H
#define AB_GATEWAY_H

#include "agentbus/buf.h"
#include "agentbus/status.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Defaults of the limits (docs/GATEWAY.md "Limits"). */
#define AB_GW_BODY_MAX_DEFAULT  (1u << 20) /* request body bytes */
#define AB_GW_SSE_BUF_DEFAULT   (1u << 20) /* bytes queued for one stream before it is cut */
#define AB_GW_STREAMS_DEFAULT   256        /* open event streams */
#define AB_GW_CONNS_DEFAULT     512        /* HTTP connections */
#define AB_GW_HEARTBEAT_DEFAULT 15000      /* ms of silence before a ": hb" comment */
#define AB_GW_SLOW_DEFAULT      5000       /* ms a stream's queue may stay full before a cut */
#define AB_GW_TIMEOUT_DEFAULT   5000       /* ms per broker request */
#define AB_GW_TOKENS_MAX        1024       /* entries of a token file */
#define AB_GW_TOKEN_MAX         256        /* bytes of a token */
#define AB_GW_THREADS_LIMIT_MAX 1000       /* threads of one GET /threads page (`limit`) */
#define AB_GW_PATH_SEGMENTS_MAX 6

/** Run exports (GET .../runs/{run}/events): one at most, all held at once at most by default. */
#define AB_GW_EXPORT_MAX            (64u << 20)
#define AB_GW_EXPORT_BUDGET_DEFAULT ((size_t)256 << 20)

/**
 * The idempotency key of a request that starts a run (gw_api.c):
 * "gw<TAG>-<16 hex digits of the thread id's FNV-1a hash>-<RUN>", TAG
 * AB_GW_KEY_TAG_RUN for POST /agents, AB_GW_KEY_TAG_RESUME for resume. A key
 * is an id of the bus (at most AB_ID_MAX_BYTES), which bounds RUN:
 * ab__gw_key_run_max().
 */
#define AB_GW_KEY_FMT        "gw%s-%016llx-%s"
#define AB_GW_KEY_TAG_RUN    ""
#define AB_GW_KEY_TAG_RESUME "r"

/** The longest run id whose key of @p tag fits (236 for POST /agents, 235 for resume). */
size_t ab__gw_key_run_max(const char *tag);

/** Gateway options (cli/gateway_cmd.c fills them). */
typedef struct ab__gw_opts {
    const char *broker;   /**< command endpoint of the broker */
    const char *host;     /**< listen address (numeric IPv4) */
    unsigned port;        /**< 0 = any free port (printed in the ready line) */
    const char *tokens;   /**< token file, or NULL: no tokens (loopback only) */
    const char *keys_dir; /**< with tokens: where NAME.key_secret of each identity lives */
    const char *cors;     /**< Access-Control-Allow-Origin value, or NULL */
    size_t body_max;      /**< request body bytes */
    size_t sse_buf;       /**< queued bytes per stream; a full queue holds the pump back */
    int slow_ms;          /**< a queue full for this long cuts the client */
    unsigned streams_max; /**< open event streams */
    unsigned conns_max;   /**< HTTP connections */
    int heartbeat_ms;     /**< idle time before a heartbeat comment */
    int timeout_ms;       /**< per broker request */
    size_t export_budget; /**< bytes all run exports may hold at once (0: the default) */
} ab__gw_opts_t;

/* ---- routes (gw_route.c) ------------------------------------------------ */

typedef enum ab__gw_route_kind {
    AB_GW_R_NONE = 0,      /**< no such path */
    AB_GW_R_HEALTH,        /**< GET /healthz */
    AB_GW_R_METRICS,       /**< GET /metrics */
    AB_GW_R_PAGE,          /**< GET / (the observer page) */
    AB_GW_R_THREAD_EVENTS, /**< GET /threads/{t}/events (SSE) */
    AB_GW_R_SNAPSHOT,      /**< GET /threads/{t}/snapshot */
    AB_GW_R_RUNS,          /**< GET /threads/{t}/runs */
    AB_GW_R_RUN_EVENTS,    /**< GET /threads/{t}/runs/{r}/events (JSON Lines) */
    AB_GW_R_CANCEL,        /**< POST /threads/{t}/runs/{r}/cancel */
    AB_GW_R_RESUME,        /**< POST /threads/{t}/runs/{r}/resume */
    AB_GW_R_AGENT_RUN,     /**< POST /agents/{a} */
    AB_GW_R_ACTION,        /**< POST /agents/{a}/actions/{action} */
    AB_GW_R_WORKERS,       /**< GET /workers */
    AB_GW_R_THREADS,       /**< GET /threads */
} ab__gw_route_kind_t;

/** A decoded route: ids percent-decoded, NUL-terminated, each checked. */
typedef struct ab__gw_route {
    ab__gw_route_kind_t kind;
    const char *method; /**< the method the route wants ("GET" / "POST") */
    char thread[AB_GW_TOKEN_MAX + 1];
    char run[AB_GW_TOKEN_MAX + 1];
    char agent[AB_GW_TOKEN_MAX + 1];
    char action[AB_GW_TOKEN_MAX + 1];
} ab__gw_route_t;

/**
 * Decode @p path (the request target before '?', still percent-encoded)
 * into @p out. Each segment is percent-decoded; ids must pass ab_id_check().
 * The run of a resume is at most ab__gw_key_run_max(AB_GW_KEY_TAG_RESUME)
 * bytes (its idempotency key is made of it), every other id AB_GW_TOKEN_MAX.
 * @return AB_OK (out->kind AB_GW_R_NONE when no route matches: a 404);
 *         AB_INVALID_ARGUMENT naming the segment ("path/thread" ...) for a
 *         bad escape or a bad id (detail "limit" for one too long). Never
 *         reads past @p len.
 */
ab_status_t ab__gw_route_parse(const char *path, size_t len, ab__gw_route_t *out, ab_error_t *err);

/**
 * Parse an event cursor: a decimal commit position (1..2^64-1 digits only,
 * no sign, no spaces, at most 20 digits) or "0". @p field names it in the
 * error ("Last-Event-ID" or "after").
 * @return AB_OK, or AB_INVALID_ARGUMENT with a message saying what is wrong.
 */
ab_status_t ab__gw_cursor_parse(const char *s, size_t len, const char *field, uint64_t *out,
                                ab_error_t *err);

/**
 * Decode one id query parameter as the request has it, still percent-encoded
 * (@p s NULL or empty: absent), into @p dst (AB_GW_TOKEN_MAX + 1 bytes): ""
 * or an id (ab_id_check, at most 256 bytes, no NUL).
 * @return AB_OK, or AB_INVALID_ARGUMENT naming @p field.
 */
/**
 * Parse a cursor given as a query parameter (?after=), still percent-encoded:
 * decoded, then read as ab__gw_cursor_parse() reads it ("%31" is "1").
 * @return AB_OK, or AB_INVALID_ARGUMENT naming @p field (a bad escape too).
 */
ab_status_t ab__gw_query_cursor(const char *s, size_t len, const char *field, uint64_t *out,
                                ab_error_t *err);
ab_status_t ab__gw_query_id(const char *s, size_t n, const char *field, char *dst, ab_error_t *err);

/** The query of GET /threads (ab__gw_threads_query). */
typedef struct ab__gw_threads_q {
    char after[AB_GW_TOKEN_MAX + 1];  /**< "" = from the first thread */
    char prefix[AB_GW_TOKEN_MAX + 1]; /**< "" = every thread */
    uint32_t limit; /**< 1..AB_GW_THREADS_LIMIT_MAX; 0 = absent (the broker's 100) */
} ab__gw_threads_q_t;

/**
 * Decode the query parameters of GET /threads, each as the request has it,
 * still percent-encoded (ptr NULL: absent; `+` is a plus): `after` and
 * `prefix` decode to empty or an id (ab_id_check, at most 256 bytes, no
 * NUL), `limit` is decimal digits 1..AB_GW_THREADS_LIMIT_MAX.
 * @return AB_OK, or AB_INVALID_ARGUMENT naming the parameter.
 */
ab_status_t ab__gw_threads_query(const char *after, size_t alen, const char *prefix, size_t plen,
                                 const char *limit, size_t llen, ab__gw_threads_q_t *out,
                                 ab_error_t *err);

/**
 * Append @p s (@p len bytes of anything: an error's message may quote a request's raw bytes) to
 * @p out as a JSON string of valid UTF-8: a byte that does not start a whole UTF-8 sequence
 * becomes U+FFFD, so an answer is JSON (RFC 8259 wants UTF-8) whatever the client sent.
 * @return AB_OK or AB_NOMEM.
 */
ab_status_t ab__gw_json_text(ab_buf_t *out, const char *s, size_t len);

/** One token file entry. */
typedef struct ab__gw_token {
    char token[AB_GW_TOKEN_MAX + 1];
    char identity[AB_GW_TOKEN_MAX + 1];
} ab__gw_token_t;

/**
 * Parse a token file's text: one "TOKEN IDENTITY" per line (blank lines and
 * lines starting with '#' ignored; TOKEN printable ASCII without spaces, 16..256
 * bytes; IDENTITY an id of at most 64 bytes). At most AB_GW_TOKENS_MAX entries,
 * tokens distinct.
 * @param out  receives a malloc'd array (free()) of *n entries on AB_OK.
 * @return AB_OK; AB_INVALID_CONFIG for a bad line, field "tokens" and the
 *         message starting "line N: " (1-based); AB_TOO_LARGE (more than
 *         AB_GW_TOKENS_MAX entries) or AB_NOMEM, field "tokens".
 */
ab_status_t ab__gw_tokens_parse(const char *text, size_t len, ab__gw_token_t **out, size_t *n,
                                ab_error_t *err);

/* ---- the server (gw_server.c) ------------------------------------------- */

typedef struct ab__gw ab__gw_t;

/** Counters of /metrics. */
typedef struct ab__gw_metrics {
    atomic_uint_fast64_t requests; /**< requests answered */
    atomic_uint_fast64_t errors;   /**< of which with a status >= 400 */
    atomic_uint_fast64_t unauthorized;
    atomic_uint_fast64_t streams; /**< event streams open now */
    atomic_uint_fast64_t streams_total;
    atomic_uint_fast64_t events_sent; /**< events written into streams */
    atomic_uint_fast64_t slow_cut;    /**< streams cut for a full queue */
    atomic_uint_fast64_t runs_started;
} ab__gw_metrics_t;

/**
 * Start the gateway: load the token file, bind, start the daemon. The
 * listening address is in ab__gw_url().
 * @return AB_OK; AB_INVALID_CONFIG (token file, a non-loopback bind without
 *         tokens), AB_IO (bind), AB_NOMEM.
 */
ab_status_t ab__gw_start(ab__gw_t **out, const ab__gw_opts_t *opts, ab_error_t *err);

/** Stop the daemon (closing every stream) and free. NULL-safe. */
void ab__gw_stop(ab__gw_t **gw);

/** "http://HOST:PORT" of a started gateway. */
const char *ab__gw_url(const ab__gw_t *gw);

/** The gateway's options (as started) and counters. */
const ab__gw_opts_t *ab__gw_options(const ab__gw_t *gw);
ab__gw_metrics_t *ab__gw_counters(ab__gw_t *gw);
/** True once ab__gw_stop() began: every stream ends at its next wake-up. */
bool ab__gw_stopping(ab__gw_t *gw);
/** The ZeroMQ context every broker connection shares. */
void *ab__gw_zmq(const ab__gw_t *gw);

/* ---- handlers (gw_api.c, gw_sse.c) -------------------------------------- */

struct MHD_Connection;
struct MHD_Response;

/** What a request handler was given: its route and what the server decoded. */
typedef struct ab__gw_req {
    ab__gw_t *gw;
    struct MHD_Connection *conn;
    const ab__gw_route_t *route;
    const char *body; /**< the body (NUL-terminated), NULL for none */
    size_t body_len;
    /** With tokens: the token's identity (its key pair) and the broker's public key
     *  (Z85), which every broker connection of the request uses; else NULL. */
    const struct ab_keypair *key;
    const char *server_key;
    const char *identity;
    /** Where a handler puts its answer; ab__gw_reply*() fill them. */
    unsigned status;
    struct MHD_Response *resp;
} ab__gw_req_t;

/** Answer JSON text (copied) with @p status. @return AB_OK or AB_NOMEM. */
ab_status_t ab__gw_reply_json(ab__gw_req_t *r, unsigned status, const char *json, size_t len,
                              const char *content_type);
/**
 * Take @p n bytes of the gateway-wide budget of run exports (opts.export_budget), to be given
 * back with ab__gw_export_give() or by the response of ab__gw_reply_export().
 * @return AB_OK, or AB_OVERLOADED (field "exports", detail "limit": the budget).
 */
ab_status_t ab__gw_export_take(ab__gw_t *gw, size_t n, ab_error_t *err);
void ab__gw_export_give(ab__gw_t *gw, size_t n);
/**
 * Answer 200 with @p buf (taken over: emptied here, whatever the outcome) as the body, not
 * copied; the @p held bytes of the export budget it holds are given back when the response is
 * freed (sent, or its client gone). @return AB_OK or AB_NOMEM (then they are given back now).
 */
ab_status_t ab__gw_reply_export(ab__gw_req_t *r, ab_buf_t *buf, size_t held,
                                const char *content_type);
/** Answer the bus's typed error as JSON ({"error": {...}}), the status chosen by its code. */
void ab__gw_reply_error(ab__gw_req_t *r, const ab_error_t *err);
/** The HTTP status of an error code (400, 404, 409, 413, 503 ...). */
unsigned ab__gw_http_status(ab_status_t code);
/** Append the error as a JSON object {"code", "message", "field", "retryable", "details"}. */
ab_status_t ab__gw_error_json(ab_buf_t *out, const ab_error_t *err);

/**
 * Open a broker connection for this request (the identity's key when the
 * gateway has tokens). @return as ab_conn_new().
 */
struct ab_conn;
ab_status_t ab__gw_connect(ab__gw_req_t *r, struct ab_conn **out, ab_error_t *err);

/** GET /threads/{t}/events (gw_sse.c). */
void ab__gw_thread_events(ab__gw_req_t *r);
/**
 * Take one of the opts.streams_max stream slots for a stream about to open
 * (gw_sse.c); the stream gives it back when it is freed, a caller that opens
 * none gives it back with ab__gw_stream_release().
 * @return AB_OK, or AB_OVERLOADED (field "streams", detail "limit").
 */
ab_status_t ab__gw_stream_reserve(ab__gw_t *gw, ab_error_t *err);
void ab__gw_stream_release(ab__gw_t *gw);
/**
 * Stream run (@p thread, @p run) from its start to its terminal event
 * (POST /agents, gw_sse.c) on a slot the caller reserved
 * (ab__gw_stream_reserve(), taken over here, given back on failure);
 * @p request: its run request, watched for a cancel before the run starts
 * (0: none).
 */
void ab__gw_run_stream(ab__gw_req_t *r, const char *thread, const char *run, uint64_t request);

/** JSON endpoints (gw_api.c). */
void ab__gw_snapshot(ab__gw_req_t *r);
void ab__gw_runs(ab__gw_req_t *r);
void ab__gw_run_events(ab__gw_req_t *r);
void ab__gw_cancel(ab__gw_req_t *r);
void ab__gw_resume(ab__gw_req_t *r);
void ab__gw_action(ab__gw_req_t *r);
void ab__gw_workers(ab__gw_req_t *r);
void ab__gw_agent_run(ab__gw_req_t *r);
/** GET /threads (gw_threads.c). */
void ab__gw_threads(ab__gw_req_t *r);

/** The observer page (gw_page.c): its bytes. */
const char *ab__gw_page(size_t *len);

#endif

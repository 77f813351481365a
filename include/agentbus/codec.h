/*
 * agentbus/codec.h - the wire codec: event envelopes, broker stamps, topics
 * and command messages. docs/PROTOCOL.md is the normative description; this
 * header is its C face.
 *
 * Every payload is one msgpack map with string keys, parsed by the strict
 * reader (ab_doc_parse), so everything value.h calls "JSON-safe" holds. On
 * top of that, decoding is strict per message: a missing required field, a
 * wrong type, an unknown field, a value out of range or an unsupported
 * protocol version is a typed error whose err->field names the value as a
 * path from the message root without a leading slash ("seq",
 * "results/3/status", "event/content/0"). Codes:
 *   AB_INVALID_ENVELOPE     - malformed frame, envelope or command;
 *   AB_TOO_LARGE            - a byte, depth, count or length limit exceeded;
 *   AB_INCOMPATIBLE_VERSION - `v` is not a version this build speaks
 *                             (non-retryable; details "ours" and "theirs");
 *   AB_UNSUPPORTED          - unknown `op` (field "op");
 *   AB_NOMEM                - out of memory.
 * When a command fails to decode but carried a valid `cid`, err->cid is set
 * to it so the error reply can echo it.
 *
 * Encoding checks the same static rules (ids, ranges, enum values, list
 * lengths) and fails with AB_INVALID_ARGUMENT naming the field, so this
 * library never writes a message its own decoder would refuse. Limits that
 * depend on the peer (max_batch, max_replay_window, ...) are checked by the
 * decoder only. Encoders append to @p out; on failure out->len is restored.
 *
 * Ownership: decoded strings (ab_str_t) point into the caller's input
 * buffer; decoded trees, arrays and errors live in the ab_doc_t arena. Both
 * must outlive the decoded struct, which is valid until the next parse or
 * reset of that doc. Out-params are written only on AB_OK.
 *
 * Thread-safety: all functions are reentrant; an ab_doc_t is used by one
 * thread at a time.
 */
#ifndef AGENTBUS_CODEC_H
#define AGENTBUS_CODEC_H

#include "agentbus/agui.h"
#include "agentbus/buf.h"
#include "agentbus/model.h"
#include "agentbus/nego.h"
#include "agentbus/status.h"
#include "agentbus/value.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- event envelope ---------------------------------------------------- */

/**
 * One event envelope (one ZeroMQ frame). The encoded bytes are what the
 * broker stores and fans out unchanged.
 *
 *  v       protocol version the producer negotiated (1).
 *  thread  thread id, run: run id (ids.h rules).
 *  seq     position of the event in its run, >= 1.
 *  epoch   the writer's claim epoch, >= 1.
 *  ts      producer timestamp, ms since the Unix epoch (any int64).
 *  body    the AG-UI event map; not validated here (see agui.h).
 */
typedef struct ab_event {
    uint32_t v;
    ab_str_t thread;
    ab_str_t run;
    uint64_t seq;
    uint64_t epoch;
    int64_t ts;
    const ab_val_t *body;
} ab_event_t;

/**
 * Append the envelope of @p ev to @p out, keys in the order v, thread, run,
 * seq, epoch, ts, event. The body is written as ab_val_encode() writes it
 * and must be a JSON-safe map (it is not re-validated).
 * @return AB_OK, AB_INVALID_ARGUMENT (err->field names the bad field) or
 *         AB_NOMEM. On failure out->len is unchanged.
 */
AB_API AB_NODISCARD ab_status_t ab_event_encode(const ab_event_t *ev, ab_buf_t *out,
                                                ab_error_t *err);

/**
 * Decode one envelope frame. The whole frame must be at most
 * limits->max_event_bytes and at most limits->max_depth deep (the envelope
 * map is depth 1, so the body map is depth 2), else AB_TOO_LARGE.
 * @param limits  NULL for ab_limits_default().
 * @param out     written only on AB_OK; views into @p buf and @p doc.
 * @return AB_OK, AB_INVALID_ENVELOPE, AB_TOO_LARGE, AB_INCOMPATIBLE_VERSION
 *         or AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_event_decode(ab_doc_t *doc, const uint8_t *buf, size_t len,
                                                const ab_limits_t *limits, ab_event_t *out,
                                                ab_error_t *err);

/**
 * Decode the header of one envelope frame and leave the body unread: the
 * result is what ab_event_decode() gives, except out->body is NULL. For
 * readers of envelopes the broker has already checked (a subscriber that
 * forwards or counts them): the canonical shape (the 7 keys in the
 * documented order) is read straight from the bytes, checking every header
 * value and that the body starts a map, but neither the body's contents nor
 * trailing bytes; any other shape takes ab_event_decode() (then the body is
 * checked too, and still not returned).
 * @return as ab_event_decode().
 */
AB_API AB_NODISCARD ab_status_t ab_event_decode_head(ab_doc_t *doc, const uint8_t *buf, size_t len,
                                                     const ab_limits_t *limits, ab_event_t *out,
                                                     ab_error_t *err);

/** True when every field of @p a and @p b is equal (bodies by ab_val_equal). */
AB_API bool ab_event_equal(const ab_event_t *a, const ab_event_t *b);

/* ---- broker stamp ------------------------------------------------------ */

/** Who wrote an event, as the stamp says (docs/PROTOCOL.md section 5). */
typedef enum ab_author {
    AB_AUTHOR_PRODUCER = 0, /**< a producer (the stamp has no `by`) */
    AB_AUTHOR_BROKER,       /**< "broker": the broker itself (abandon_run's RUN_ERROR) */
} ab_author_t;

/** Broker facts sent beside an event: {pos, time[, tprev][, by]}. */
typedef struct ab_stamp {
    uint64_t pos;       /**< global commit position, >= 1 */
    int64_t time_us;    /**< commit time, microseconds since the Unix epoch */
    ab_author_t author; /**< AB_AUTHOR_BROKER: written by the broker, not a producer */
    /** Live events only (PROTOCOL.md section 5): has_tprev says the stamp carries
     *  tprev, a position below pos such that the event's thread has no event
     *  strictly between the two: its previous event's when the broker knows it
     *  (0: the thread's first event), else a position between that one and pos. false: absent (an
     *  older broker, --tprev false, every replay record). */
    bool has_tprev;
    uint64_t tprev;
} ab_stamp_t;

/** The RUN_ERROR code prefix only the broker may write (PROTOCOL.md 7.17). */
#define AB_BROKER_CODE_PREFIX "agentbus."

/**
 * Whether an event body is one only the broker writes: a RUN_ERROR whose
 * `code` starts with AB_BROKER_CODE_PREFIX (the broker refuses such an event
 * from a producer, so this is how the stamp's `by` is known again on replay).
 */
AB_API bool ab_event_by_broker(const ab_val_t *body);

/** Largest valid stamp frame; longer frames are AB_TOO_LARGE. */
#define AB_STAMP_MAX_BYTES 64

/** Append the stamp map {pos, time} (and `tprev` when has_tprev, `by` for a
 * broker-authored event). pos 0, or a tprev not below pos, is AB_INVALID_ARGUMENT.
 * @return AB_OK, AB_INVALID_ARGUMENT, AB_NOMEM. */
AB_API AB_NODISCARD ab_status_t ab_stamp_encode(const ab_stamp_t *st, ab_buf_t *out,
                                                ab_error_t *err);

/**
 * Decode a stamp frame. @p out is written only on AB_OK; has_tprev is false
 * when the frame has no `tprev` (an older broker, a replay record), and a
 * `tprev` not below `pos` is AB_INVALID_ENVELOPE naming it.
 * @return AB_OK, AB_INVALID_ENVELOPE, AB_TOO_LARGE or AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_stamp_decode(ab_doc_t *doc, const uint8_t *buf, size_t len,
                                                ab_stamp_t *out, ab_error_t *err);

/* ---- packed envelopes: a packed publish's one frame ----------------------- */

/**
 * Append one envelope to a packed publish frame: `u32 BE length | envelope`.
 * @return AB_OK, AB_TOO_LARGE (over 4 GiB) or AB_NOMEM; on failure out->len
 *         is unchanged.
 */
AB_API AB_NODISCARD ab_status_t ab_packed_append(ab_buf_t *out, const void *ev, size_t len,
                                                 ab_error_t *err);

/**
 * Cut the next envelope out of [*p, end): point @p ev at it, advance *p and
 * return true; false (nothing changed) when it does not fit.
 */
AB_API bool ab_packed_next(const uint8_t **p, const uint8_t *end, const uint8_t **ev, size_t *len);

/* ---- records: (stamp, envelope) pairs in one frame ---------------------- */

/*
 * A records frame carries one or more events with their stamps, back to
 * back: `u32 BE stamp length | stamp | u32 BE envelope length | envelope`.
 * It is frame 2 of a live event message and the frame after a
 * replay_chunk header (docs/PROTOCOL.md 6.2 and 7.6).
 */

/** Most records in one live message (a replay chunk has its own bound). */
#define AB_LIVE_EVENTS_MAX 256u
/** A live message holds records up to about this many bytes; a larger event goes alone. */
#define AB_LIVE_BYTES_MAX (32u * 1024u)

/**
 * Append one record (the stamp encoded here, the envelope copied).
 * @return AB_OK, AB_TOO_LARGE (envelope over 4 GiB) or AB_NOMEM; on failure
 *         out->len is unchanged.
 */
AB_API AB_NODISCARD ab_status_t ab_record_append(ab_buf_t *out, const ab_stamp_t *st,
                                                 const void *ev, size_t len, ab_error_t *err);

/**
 * Cut the next record out of [*p, end): on success point @p stamp / @p ev
 * at its parts (inside the frame), advance *p past it and return true.
 * Hostile lengths cannot overflow: only remaining sizes are compared.
 * @return false (nothing changed) when the record does not fit the frame.
 */
AB_API bool ab_record_next(const uint8_t **p, const uint8_t *end, const uint8_t **stamp,
                           size_t *slen, const uint8_t **ev, size_t *elen);

/* ---- topics ------------------------------------------------------------ */

/*
 * Topic frames of the XPUB event endpoint. An event goes out under
 * "ev" NUL <thread> NUL <run> NUL; ids never contain NUL, so the prefix of
 * thread "a" never matches thread "ab". Subscribe with
 * ab_topic_thread_prefix() for one thread, or AB_TOPIC_EVENTS /
 * AB_TOPIC_EVENTS_LEN (the 3 bytes "ev" NUL, the literal's own terminator
 * included) for every event. Heartbeats go out under the 2 bytes "hb".
 */
#define AB_TOPIC_EVENTS        "ev"
#define AB_TOPIC_EVENTS_LEN    3
#define AB_TOPIC_HEARTBEAT     "hb"
#define AB_TOPIC_HEARTBEAT_LEN 2

/**
 * Append the topic of an event of run @p run in thread @p thread.
 * @return AB_OK, AB_INVALID_ARGUMENT (an id breaks ids.h; field "thread" or
 *         "run") or AB_NOMEM. On failure out->len is unchanged.
 */
AB_API AB_NODISCARD ab_status_t ab_topic_event(ab_buf_t *out, ab_str_t thread, ab_str_t run,
                                               ab_error_t *err);

/** Append the subscription prefix "ev" NUL <thread> NUL. Errors as ab_topic_event(). */
AB_API AB_NODISCARD ab_status_t ab_topic_thread_prefix(ab_buf_t *out, ab_str_t thread,
                                                       ab_error_t *err);

/* ---- commands ---------------------------------------------------------- */

/* X(ENUM, "wire name", sent by clients) - append only. */
#define AB_OP_MAP(X)                                                                               \
    X(HELLO, "hello", true)                                                                        \
    X(WELCOME, "welcome", false)                                                                   \
    X(CLAIM, "claim", true)                                                                        \
    X(CLAIMED, "claimed", false)                                                                   \
    X(PUBLISH, "publish", true)                                                                    \
    X(PUBLISHED, "published", false)                                                               \
    X(HEADS, "heads", true)                                                                        \
    X(HEADS_REPLY, "heads_reply", false)                                                           \
    X(REPLAY, "replay", true)                                                                      \
    X(CREDIT, "credit", true)                                                                      \
    X(REPLAY_CHUNK, "replay_chunk", false)                                                         \
    X(REPLAY_END, "replay_end", false)                                                             \
    X(CANCEL, "cancel", true)                                                                      \
    X(SNAPSHOT, "snapshot", true)                                                                  \
    X(SNAPSHOT_REPLY, "snapshot_reply", false)                                                     \
    X(PING, "ping", true)                                                                          \
    X(PONG, "pong", false)                                                                         \
    X(ERROR, "error", false)                                                                       \
    X(HEARTBEAT, "heartbeat", false)                                                               \
    X(SERVE, "serve", true)                                                                        \
    X(SERVED, "served", false)                                                                     \
    X(WORKERS, "workers", true)                                                                    \
    X(WORKERS_REPLY, "workers_reply", false)                                                       \
    X(INVOKE_ACTION, "invoke_action", true)                                                        \
    X(ACTION_REPLY, "action_reply", false)                                                         \
    X(ACTION_CALL, "action_call", false)                                                           \
    X(ACTION_RESULT, "action_result", true)                                                        \
    X(ACTION_ACK, "action_ack", false)                                                             \
    X(START_RUN, "start_run", true)                                                                \
    X(RUN_ACCEPTED, "run_accepted", false)                                                         \
    X(ASSIGN, "assign", false)                                                                     \
    X(DECLINE, "decline", true)                                                                    \
    X(DECLINED, "declined", false)                                                                 \
    X(CANCEL_RUN, "cancel_run", true)                                                              \
    X(CANCEL_REPLY, "cancel_reply", false)                                                         \
    X(RUN_CANCEL, "run_cancel", false)                                                             \
    X(RESUME_RUN, "resume_run", true)                                                              \
    X(ABANDON_RUN, "abandon_run", true)                                                            \
    X(ABANDONED, "abandoned", false)                                                               \
    X(REQUESTS, "requests", true)                                                                  \
    X(REQUESTS_REPLY, "requests_reply", false)                                                     \
    X(LEAVE, "leave", true)                                                                        \
    X(LEFT, "left", false)                                                                         \
    X(NOTICE, "notice", false)                                                                     \
    X(STATS, "stats", true)                                                                        \
    X(STATS_REPLY, "stats_reply", false)                                                           \
    X(THREADS, "threads", true)                                                                    \
    X(THREADS_REPLY, "threads_reply", false)

/** Message kinds. AB_OP_NONE_ is never on the wire. */
typedef enum ab_op {
    AB_OP_NONE_ = 0,
#define AB_OP_ENUM_(e, s, req) AB_OP_##e,
    AB_OP_MAP(AB_OP_ENUM_)
#undef AB_OP_ENUM_
        AB_OP_COUNT_
} ab_op_t;

/** Wire name of @p op ("claim"); "unknown" when out of range. */
AB_API const char *ab_op_name(ab_op_t op);

/** Op from its wire name. @return AB_OK and *out set, or AB_NOT_FOUND. */
AB_API AB_NODISCARD ab_status_t ab_op_from_name(const char *s, size_t len, ab_op_t *out);

/**
 * True for requests (sent by clients to the command endpoint); their header
 * frame is limited to max_header_bytes. Broker messages (replies, errors,
 * heartbeats) are limited to AB_MAX_REPLY_BYTES instead, since a reply to a
 * full batch can be larger than the request.
 */
AB_API bool ab_op_is_request(ab_op_t op);

/** Byte limit of a header frame sent by the broker (16 MiB). */
#define AB_MAX_REPLY_BYTES (16u << 20)
/** Replay chunk size: default and maximum events per chunk. */
#define AB_CHUNK_EVENTS_DEFAULT 256
#define AB_CHUNK_EVENTS_MAX     1024
/**
 * A replay_chunk's records frame: each record is `u32 BE stamp length |
 * stamp | u32 BE envelope length | envelope`, so a record adds at most
 * 4 + AB_STAMP_MAX_BYTES + 4 bytes to its envelope. `bytes` (the frame's
 * length) is at most AB_CHUNK_EVENTS_MAX records of max_event_bytes each:
 * ab_chunk_bytes_max(); with no limits known, of the largest
 * max_event_bytes a broker may set (2^30).
 */
#define AB_CHUNK_RECORD_OVERHEAD (8u + AB_STAMP_MAX_BYTES)
#define AB_CHUNK_BYTES_MAX                                                                         \
    ((uint64_t)AB_CHUNK_EVENTS_MAX * ((1ull << 30) + AB_CHUNK_RECORD_OVERHEAD))
/** Longest `client` text in HELLO, in bytes. */
#define AB_CLIENT_NAME_MAX 256
/** Longest capability name, in bytes. */
#define AB_CAP_NAME_MAX 64

/** Wire name of a run status; "?" when out of range. */
AB_API const char *ab_run_status_name(ab_run_status_t s);

/** What the broker did with one published event. */
typedef enum ab_result_status {
    AB_RESULT_ACCEPTED = 1, /**< "accepted": committed now */
    AB_RESULT_DUPLICATE,    /**< "duplicate": committed earlier, same bytes */
    AB_RESULT_REJECTED,     /**< "rejected": see the result's error */
} ab_result_status_t;

/** A (thread, run) pair. */
typedef struct ab_run_ref {
    ab_str_t thread;
    ab_str_t run;
} ab_run_ref_t;

/**
 * The head of one run on the wire: a view (the model's head is
 * ab_run_head_t, converted by ab_head_view()). outcome is AB_OUTCOME_NONE
 * when absent; on the wire only success, interrupt and cancelled exist.
 */
typedef struct ab_head {
    ab_str_t thread;
    ab_str_t run;
    uint64_t last_seq; /**< 0 = nothing committed */
    uint64_t epoch;
    ab_run_status_t status;
    ab_agui_outcome_t outcome;
    uint64_t last_pos; /**< commit position of the run's last event, 0 = none */
    bool orphaned;     /**< a dispatched run whose worker is gone (7.12); omitted when false */
} ab_head_t;

/**
 * The answer for one published event. pos (>= 1) is set iff the status is
 * accepted or duplicate; error is set iff it is rejected.
 */
typedef struct ab_result {
    uint64_t seq;
    ab_result_status_t status;
    uint64_t pos;
    const ab_error_t *error;
} ab_result_t;

typedef struct ab_hello {
    const uint32_t *versions; /**< 1..AB_MAX_VERSIONS entries, each >= 1 */
    size_t nversions;
    ab_str_t client;      /**< optional free text, <= AB_CLIENT_NAME_MAX bytes */
    const ab_cap_t *caps; /**< optional; ncaps == 0 means omitted */
    size_t ncaps;
} ab_hello_t;

typedef struct ab_welcome {
    ab_str_t instance;       /**< broker instance id, new at every start */
    ab_str_t event_endpoint; /**< ZeroMQ address of the XPUB endpoint */
    ab_limits_t limits;      /**< every field >= 1 */
    const ab_cap_t *caps;
    size_t ncaps;
    /**
     * What this connection's key may do, from a broker with keys (PROTOCOL.md
     * 1.2): {"name": NAME, "roles": {ROLE: true | [PREFIX...]}}; NULL = omit
     * (a broker without keys: everything).
     */
    const ab_val_t *access;
} ab_welcome_t;

typedef struct ab_claim {
    ab_str_t thread;
    ab_str_t run;
} ab_claim_t;

typedef struct ab_claimed {
    ab_str_t thread;
    ab_str_t run;
    uint64_t epoch;    /**< >= 1 */
    uint64_t last_seq; /**< 0 = nothing committed */
    ab_run_status_t status;
} ab_claimed_t;

typedef struct ab_publish {
    uint32_t count; /**< envelopes that follow, 1..max_batch */
    /**
     * false: `count` envelope frames follow; true: one frame follows, the
     * `count` envelopes packed in it (ab_packed_append; PROTOCOL.md 7.4).
     * Only to a broker that announces AB_CAP_PACKED_PUBLISH.
     */
    bool packed;
} ab_publish_t;

typedef struct ab_published {
    const ab_result_t *results; /**< one per event, in order; 1..max_batch */
    size_t nresults;
} ab_published_t;

/** HEADS: exactly one of runs (nruns >= 1) or thread (ptr != NULL). */
typedef struct ab_heads {
    const ab_run_ref_t *runs;
    size_t nruns;
    ab_str_t thread;
} ab_heads_t;

typedef struct ab_heads_reply {
    uint64_t head_pos; /**< the broker's latest commit position */
    const ab_head_t *heads;
    size_t nheads;
} ab_heads_reply_t;

/**
 * REPLAY. Which fields apply depends on scope; the encoder ignores (and
 * the decoder leaves zero) the fields of the other scopes.
 *  run:    thread, run, after_seq
 *  thread: thread, cursors (may be empty), after_pos (0 = absent: from the
 *          thread's first event; else only rows with pos > after_pos)
 *  all:    after_pos
 * chunk_events: 0 when encoding means "omit" (the peer uses the default);
 * a decoded request always holds the effective value (default 256).
 */
typedef struct ab_replay {
    ab_replay_scope_t scope;
    uint32_t window;       /**< chunks granted now, 1..max_replay_window */
    uint32_t chunk_events; /**< 1..AB_CHUNK_EVENTS_MAX */
    uint32_t window_bytes; /**< unread bytes granted, 1..max_replay_bytes; 0 = omit (the most) */
    ab_str_t thread;
    ab_str_t run;
    uint64_t after_seq;
    const ab_cursor_t *cursors;
    size_t ncursors;
    uint64_t after_pos;
} ab_replay_t;

/**
 * The wire view of a run head (heads_reply, replay_end): strings point into
 * @p h, which must outlive the view. Every finished run has an outcome, one
 * of the wire's: a RUN_FINISHED without one (or with another) is a success,
 * as AG-UI says and as the thread snapshot reports it; other runs have none
 * (an errored run's earlier outcome is the snapshot's).
 */
AB_API ab_head_t ab_head_view(const ab_run_head_t *h);

/**
 * The first read of replay request @p r: its scope and cursor (scope run:
 * thread, run, after_seq; thread: thread and after_pos (0 when absent: from
 * the thread's start), the per-run cursors being filters the reader applies
 * to rows; all: after_pos), at most @p limit rows. Strings point into @p r's.
 */
AB_API ab_read_t ab_replay_read(const ab_replay_t *r, uint32_t limit);

typedef struct ab_credit {
    uint32_t chunks; /**< more chunks granted, >= 1 */
} ab_credit_t;

typedef struct ab_replay_chunk {
    uint32_t count; /**< (stamp, envelope) records in the frame that follows, 1..1024 */
    uint64_t bytes; /**< length of that frame: 1..AB_CHUNK_BYTES_MAX, within the limits */
} ab_replay_chunk_t;

typedef struct ab_replay_end {
    uint64_t head_pos;
    uint64_t events; /**< total events sent by this replay */
    const ab_head_t *heads;
    size_t nheads;
} ab_replay_end_t;

typedef struct ab_snapshot_req {
    ab_str_t thread;
} ab_snapshot_req_t;

/** The snapshot document: docs/REDUCER.md section 7, docs/PROTOCOL.md 7.8. */
typedef struct ab_snapshot_reply {
    ab_str_t thread;
    const ab_val_t *snapshot; /**< any map (decoded; encoded when snapshot_mp is NULL) */
    /** Encode only: the document already encoded as one msgpack map, written
     *  verbatim instead of @p snapshot (the broker encodes it straight from
     *  its builder). Not checked beyond its first byte being a map header. */
    const uint8_t *snapshot_mp;
    size_t snapshot_mp_len;
} ab_snapshot_reply_t;

typedef struct ab_pong {
    ab_str_t instance;
    uint64_t head_pos;
} ab_pong_t;

/**
 * STATS_REPLY: what the broker is doing (docs/PROTOCOL.md 7.18). Counters
 * run from the broker's start; rates and latencies are over a recent window.
 */
typedef struct ab_stats_reply {
    ab_str_t instance;      /**< the broker instance */
    ab_str_t version;       /**< the broker's package version */
    uint64_t uptime_ms;     /**< since the broker started */
    uint64_t head_pos;      /**< the latest commit position */
    bool store_known;       /**< false: the plugin has no stats; the four below are 0 */
    uint64_t runs_total;    /**< runs the store ever recorded */
    uint64_t runs_active;   /**< runs started and not ended */
    uint64_t store_bytes;   /**< the stored data's size */
    uint64_t wal_bytes;     /**< the write-ahead log's size */
    uint64_t connections;   /**< command connections open */
    uint64_t subscribers;   /**< event endpoint connections open */
    uint64_t queue_events;  /**< events and writer jobs in the ingest queue now */
    uint64_t queue_bytes;   /**< publish bytes in the ingest queue now */
    uint64_t replays_open;  /**< replays open or with unread chunks */
    uint64_t commits;       /**< group commits */
    uint64_t events;        /**< events committed */
    uint64_t rejected;      /**< events rejected */
    uint64_t commits_per_s; /**< over the last 10 s */
    uint64_t events_per_s;  /**< over the last 10 s */
    uint64_t commit_p50_us; /**< commit (write + sync) latency over the last commits */
    uint64_t commit_p90_us;
    uint64_t commit_p99_us;
    uint64_t commit_max_us;
    uint64_t commit_window; /**< how many commits the percentiles are over (<= 1024) */
    /* the store's standbys (optional on the wire: absent = unknown, all 0) */
    bool replicas_known;        /**< false: no standby figures; the four below are 0 */
    uint64_t replicas;          /**< standbys streaming the store's changes now */
    uint64_t replicas_sync;     /**< of which a commit waits for */
    uint64_t replica_lag_bytes; /**< WAL the furthest-behind standby has not replayed yet */
    uint64_t replica_lag_us;    /**< the longest replay lag of a standby */
} ab_stats_reply_t;

/** ERROR; the decoded error's cid equals the header's. */
typedef struct ab_error_msg {
    const ab_error_t *error;
} ab_error_msg_t;

typedef struct ab_heartbeat {
    ab_str_t instance;
    uint64_t head_pos;
    int64_t time_us;
} ab_heartbeat_t;

/* ---- workers and actions (docs/PROTOCOL.md 7.10, 7.11) -------------------- */

/** Longest worker name and action id, in bytes. */
#define AB_WORKER_NAME_MAX 256
#define AB_ACTION_ID_MAX   256
/** Most agents one `serve` names, actions one agent handles, runs one agent takes at once. */
#define AB_SERVE_AGENTS_MAX   64
#define AB_SERVE_ACTIONS_MAX  64
#define AB_SERVE_CAPACITY_MAX 1024
/** Lease lengths a worker may ask for (ms); the broker grants within its own bounds. */
#define AB_LEASE_MS_MIN 1000
#define AB_LEASE_MS_MAX 600000
/** Longest action call a caller may allow (ms), and the timeout when it names none. */
#define AB_ACTION_TIMEOUT_MS_MAX     600000
#define AB_ACTION_TIMEOUT_MS_DEFAULT 30000
/** The lease a worker gets when its `serve` asks for none (ms). */
#define AB_LEASE_MS_DEFAULT 10000

/** One agent a worker serves: its name, its capacity and the action ids it handles. */
typedef struct ab_served_agent {
    ab_str_t name;           /**< an id (ids.h) */
    uint32_t capacity;       /**< runs at once, 1..AB_SERVE_CAPACITY_MAX */
    const ab_str_t *actions; /**< 0..AB_SERVE_ACTIONS_MAX ids, each 1..AB_ACTION_ID_MAX bytes */
    size_t nactions;
} ab_served_agent_t;

/** SERVE: register this connection as a worker (replacing an earlier registration). */
typedef struct ab_serve {
    ab_str_t worker;                 /**< the worker's name, 1..AB_WORKER_NAME_MAX bytes */
    const ab_served_agent_t *agents; /**< 1..AB_SERVE_AGENTS_MAX, names distinct */
    size_t nagents;
    uint32_t lease_ms; /**< asked for, AB_LEASE_MS_MIN..AB_LEASE_MS_MAX; 0 = omit (default) */
} ab_serve_t;

typedef struct ab_served {
    ab_str_t worker_id; /**< the broker's id of this registration, 1..64 bytes */
    uint32_t lease_ms;  /**< granted: renew by sending anything within it */
} ab_served_t;

/** One live worker, as WORKERS_REPLY lists it. */
typedef struct ab_worker_info {
    ab_str_t worker_id;
    ab_str_t worker;
    const ab_served_agent_t *agents;
    size_t nagents;
    uint32_t lease_ms;
    uint32_t idle_ms; /**< since the broker last heard from it */
    uint32_t calls;   /**< action calls it has not answered yet */
} ab_worker_info_t;

typedef struct ab_workers_reply {
    const ab_worker_info_t *workers; /**< 0..AB_WORKERS_MAX */
    size_t nworkers;
} ab_workers_reply_t;

/** Most workers a broker lists (and registers) at once. */
#define AB_WORKERS_MAX 1024

/** INVOKE_ACTION: call action @p action of agent @p agent on a live worker. */
typedef struct ab_invoke_action {
    ab_str_t agent;          /**< an id */
    ab_str_t action;         /**< 1..AB_ACTION_ID_MAX bytes */
    const ab_val_t *payload; /**< any value; NULL = omit (the worker sees null) */
    ab_str_t thread;         /**< optional id: the thread the call is about */
    uint32_t timeout_ms;     /**< 1..AB_ACTION_TIMEOUT_MS_MAX; 0 = omit (30 s) */
} ab_invoke_action_t;

/** ACTION_REPLY: the worker's result, to the caller of INVOKE_ACTION (same cid). */
typedef struct ab_action_reply {
    ab_str_t agent;
    ab_str_t action;
    ab_str_t worker_id;     /**< which worker answered */
    const ab_val_t *result; /**< any value; NULL = omit (null) */
} ab_action_reply_t;

/** ACTION_CALL: broker -> worker, unsolicited (cid 0); answer with ACTION_RESULT. */
typedef struct ab_action_call {
    uint64_t call; /**< the broker's id of this call, >= 1 */
    ab_str_t agent;
    ab_str_t action;
    const ab_val_t *payload; /**< NULL = omit */
    ab_str_t thread;         /**< ptr NULL = omit */
    uint32_t timeout_ms;     /**< what is left of the caller's timeout, >= 1 */
} ab_action_call_t;

/** ACTION_RESULT: worker -> broker: exactly one of result (may be NULL = null) or error. */
typedef struct ab_action_result {
    uint64_t call;
    const ab_val_t *result;  /**< NULL = omit */
    const ab_error_t *error; /**< set: the action failed; passed to the caller */
} ab_action_result_t;

typedef struct ab_action_ack {
    uint64_t call;
    bool delivered; /**< false: the caller had gone, aborted or timed out */
} ab_action_ack_t;

/* ---- dispatch (PROTOCOL.md 7.12 - 7.16) ------------------------------------ */

/** Longest `reason` of decline, cancel_run, run_cancel and abandon_run, in bytes. */
#define AB_REASON_MAX 1024
/** Most requests one `requests` answer lists, and how many when `limit` is omitted. */
#define AB_REQUESTS_LIMIT_MAX     1000
#define AB_REQUESTS_LIMIT_DEFAULT 100

/** start_run `if_busy`: what to do when the thread already has a dispatched run. */
typedef enum ab_if_busy {
    AB_IF_BUSY_OMIT = 0,  /**< not on the wire: enqueue */
    AB_IF_BUSY_ENQUEUE,   /**< "enqueue": wait behind it */
    AB_IF_BUSY_REJECT,    /**< "reject": answer `conflict` */
    AB_IF_BUSY_INTERRUPT, /**< "interrupt": cancel the active run, then run this one */
} ab_if_busy_t;

/** What cancel_run did. */
typedef enum ab_cancel_outcome {
    AB_CANCEL_DEQUEUED = 1, /**< "dequeued": the request was queued (or assigned, not started) */
    AB_CANCEL_DELIVERED,    /**< "delivered": the owner got run_cancel */
    AB_CANCEL_NO_OWNER,     /**< "no_owner": the run has started, its owner is not live */
    AB_CANCEL_ENDED,        /**< "ended": the run had already ended */
} ab_cancel_outcome_t;

/** Wire name of a request state ("queued"); "?" when out of range or AB_REQ_NONE. */
AB_API const char *ab_request_state_name(ab_request_state_t s);

/** START_RUN: ask the broker to run @p agent on @p thread. */
typedef struct ab_start_run {
    ab_str_t agent;        /**< an id */
    ab_str_t thread;       /**< an id */
    ab_str_t run;          /**< optional id (ptr NULL = the broker makes one) */
    const ab_val_t *input; /**< the RunAgentInput, a map (required) */
    ab_str_t key;          /**< idempotency key, an id */
    ab_if_busy_t if_busy;  /**< AB_IF_BUSY_OMIT = enqueue */
} ab_start_run_t;

/** RUN_ACCEPTED: the request a start_run or resume_run made (or its key named). */
typedef struct ab_run_accepted {
    uint64_t request; /**< >= 1 */
    ab_str_t agent;
    ab_str_t thread;
    ab_str_t run;
    ab_request_state_t state; /**< now */
    uint64_t position;        /**< queued: requests of the agent ahead of it; else 0 */
    bool existing;            /**< the key named an earlier request: this is its answer */
} ab_run_accepted_t;

/** ASSIGN: broker -> worker, unsolicited (cid 0): run this request. */
typedef struct ab_assign {
    uint64_t request;
    ab_str_t agent;
    ab_str_t thread;
    ab_str_t run;
    const ab_val_t *input; /**< the RunAgentInput (a map), threadId and runId set */
    uint64_t epoch;        /**< the claim epoch to publish the run with, >= 1 */
    uint32_t attempt;      /**< 1 for the first assignment of the request */
} ab_assign_t;

/** DECLINE: worker -> broker: give an assignment back before its RUN_STARTED. */
typedef struct ab_decline {
    uint64_t request;
    uint64_t epoch;  /**< the assignment's */
    ab_str_t reason; /**< optional, 0..AB_REASON_MAX bytes */
} ab_decline_t;

typedef struct ab_declined {
    uint64_t request;
    ab_request_state_t state; /**< after the decline (queued again, or what it had become) */
} ab_declined_t;

/** CANCEL_RUN: cancel run @p run of @p thread (queued, assigned or started). */
typedef struct ab_cancel_run {
    ab_str_t thread;
    ab_str_t run;
    ab_str_t reason; /**< optional */
} ab_cancel_run_t;

typedef struct ab_cancel_reply {
    ab_str_t thread;
    ab_str_t run;
    ab_cancel_outcome_t outcome;
    uint64_t request; /**< the run's request, 0 = omit (a run not dispatched) */
} ab_cancel_reply_t;

/** RUN_CANCEL: broker -> owner, unsolicited (cid 0): end this run with outcome cancelled. */
typedef struct ab_run_cancel {
    uint64_t request;
    ab_str_t thread;
    ab_str_t run;
    uint64_t epoch;
    ab_str_t reason; /**< optional */
} ab_run_cancel_t;

/** RESUME_RUN: answer every pending interrupt of @p run and queue the run that continues it. */
typedef struct ab_resume_run {
    ab_str_t thread;
    ab_str_t run;           /**< the interrupted run */
    const ab_val_t *resume; /**< ResumeEntry array, one per pending interrupt (required) */
    ab_str_t key;           /**< idempotency key of the new request */
    ab_str_t agent;         /**< optional: required when the interrupted run was not dispatched */
    ab_str_t new_run;       /**< optional id of the replacement run */
    const ab_val_t *input;  /**< optional map: more RunAgentInput members (messages ...) */
} ab_resume_run_t;

/** ABANDON_RUN: end a started run whose owner is gone with a broker-authored RUN_ERROR. */
typedef struct ab_abandon_run {
    ab_str_t thread;
    ab_str_t run;
    ab_str_t reason; /**< optional: the RUN_ERROR's message */
} ab_abandon_run_t;

typedef struct ab_abandoned {
    ab_str_t thread;
    ab_str_t run;
    uint64_t seq; /**< the RUN_ERROR's seq */
    uint64_t pos; /**< its commit position */
} ab_abandoned_t;

/** REQUESTS: list run requests. */
typedef struct ab_requests {
    ab_request_state_t state; /**< AB_REQ_NONE = every open one (queued, assigned, started) */
    ab_str_t agent;           /**< optional id */
    uint64_t after;           /**< list requests with a larger id (0 = from the start) */
    uint32_t limit;           /**< 1..AB_REQUESTS_LIMIT_MAX; 0 = omit (default) */
} ab_requests_t;

typedef struct ab_request_info {
    uint64_t request;
    ab_str_t agent;
    ab_str_t thread;
    ab_str_t run;
    ab_request_state_t state;
    ab_str_t worker; /**< the assignment's worker name; ptr NULL = none */
    uint64_t epoch;  /**< 0 = none */
    uint32_t attempts;
    bool orphaned;      /**< started, and no live worker of that name */
    int64_t created_us; /**< Unix microseconds */
} ab_request_info_t;

/** What a notice on the event endpoint tells (PROTOCOL.md 6.4). */
typedef enum ab_notice_kind {
    AB_NOTICE_ORPHANED = 1, /**< "orphaned": a started run's worker is gone (7.12) */
} ab_notice_kind_t;

/** NOTICE: broker -> subscribers of a thread, on the event endpoint (not a reply). */
typedef struct ab_notice {
    ab_notice_kind_t kind;
    ab_str_t thread;
    ab_str_t run;
    uint64_t request; /**< the run's request, 0 = omit */
    ab_str_t worker;  /**< the worker name that was its owner; ptr NULL = omit */
} ab_notice_t;

/**
 * Append the topic of a notice about thread @p thread: "ev" NUL thread NUL
 * NUL (an empty run: no event has it), so a subscription to the thread gets
 * it and one to a run does not. @return as ab_topic_event().
 */
AB_API AB_NODISCARD ab_status_t ab_topic_notice(ab_buf_t *out, ab_str_t thread, ab_error_t *err);

typedef struct ab_requests_reply {
    const ab_request_info_t *requests; /**< 0..AB_REQUESTS_LIMIT_MAX, in id order */
    size_t nrequests;
    bool more; /**< more match after the last one listed */
} ab_requests_reply_t;

/* ---- threads (PROTOCOL.md 7.19) ------------------------------------------ */

/** Most threads one `threads` answer lists, and how many when `limit` is omitted. */
#define AB_THREADS_LIMIT_MAX     1000
#define AB_THREADS_LIMIT_DEFAULT 100

/** THREADS: list the threads with stored events, in byte order of their ids. */
typedef struct ab_threads_req {
    ab_str_t after;  /**< list ids above this one; ptr NULL or len 0 = from the start */
    ab_str_t prefix; /**< only ids starting with it; ptr NULL or len 0 = every thread */
    uint32_t limit;  /**< 1..AB_THREADS_LIMIT_MAX; 0 = omit (default) */
} ab_threads_req_t;

/** One thread of a threads_reply. */
typedef struct ab_thread_entry {
    ab_str_t thread;
    uint64_t runs;     /**< runs the store has of it */
    bool active;       /**< one of them is active (started, not ended) */
    ab_str_t last_run; /**< the run of its newest event */
    uint64_t last_pos; /**< the commit position of its newest event, >= 1 */
} ab_thread_entry_t;

typedef struct ab_threads_reply {
    const ab_thread_entry_t *threads; /**< 0..AB_THREADS_LIMIT_MAX, in byte order of the ids */
    size_t nthreads;
    ab_str_t next; /**< more may follow: ask again with after = this; ptr NULL = done */
} ab_threads_reply_t;

/**
 * One command, reply or heartbeat header. `v` is required except in hello
 * and error, where 0 means absent. `cid` is the correlation id (0 = none);
 * heartbeats carry none, action calls carry 0. `u` holds the member named
 * after the op; cancel, ping, workers, leave, left and stats have no payload.
 */
typedef struct ab_msg {
    ab_op_t op;
    uint32_t v;
    uint64_t cid;
    union {
        ab_hello_t hello;
        ab_welcome_t welcome;
        ab_claim_t claim;
        ab_claimed_t claimed;
        ab_publish_t publish;
        ab_published_t published;
        ab_heads_t heads;
        ab_heads_reply_t heads_reply;
        ab_replay_t replay;
        ab_credit_t credit;
        ab_replay_chunk_t replay_chunk;
        ab_replay_end_t replay_end;
        ab_snapshot_req_t snapshot;
        ab_snapshot_reply_t snapshot_reply;
        ab_pong_t pong;
        ab_error_msg_t error;
        ab_heartbeat_t heartbeat;
        ab_serve_t serve;
        ab_served_t served;
        ab_workers_reply_t workers_reply;
        ab_invoke_action_t invoke_action;
        ab_action_reply_t action_reply;
        ab_action_call_t action_call;
        ab_action_result_t action_result;
        ab_action_ack_t action_ack;
        ab_start_run_t start_run;
        ab_run_accepted_t run_accepted;
        ab_assign_t assign;
        ab_decline_t decline;
        ab_declined_t declined;
        ab_cancel_run_t cancel_run;
        ab_cancel_reply_t cancel_reply;
        ab_run_cancel_t run_cancel;
        ab_resume_run_t resume_run;
        ab_abandon_run_t abandon_run;
        ab_abandoned_t abandoned;
        ab_requests_t requests;
        ab_requests_reply_t requests_reply;
        ab_notice_t notice;
        ab_stats_reply_t stats_reply;
        ab_threads_req_t threads;
        ab_threads_reply_t threads_reply;
    } u;
} ab_msg_t;

/**
 * Append the header map of @p m to @p out: op first, then v, cid and the
 * op's fields in the order of docs/PROTOCOL.md; optional fields are
 * written only when set.
 *
 * Error maps are written best-effort so that every error can be reported:
 * strings are cut back to their last complete UTF-8 character, and details
 * with an empty or repeated key are left out. Only a code of AB_OK or out of
 * range makes an error unencodable.
 * @return AB_OK, AB_INVALID_ARGUMENT (err->field names the field) or
 *         AB_NOMEM. On failure out->len is unchanged.
 */
AB_API AB_NODISCARD ab_status_t ab_msg_encode(const ab_msg_t *m, ab_buf_t *out, ab_error_t *err);

/**
 * The `cid` and `v` of a header that may not decode (docs/PROTOCOL.md 7.1):
 * a scan of the top-level map's keys that checks only bounds, so an answer
 * to a header refused for a deep value or trailing bytes can still echo them.
 * Nothing is allocated; any input is safe.
 * @param cid, v  out: the values of top-level keys `cid` and `v` when they are
 *                unsigned integers (v: up to 2^32 - 1), else 0. Always written.
 * @return true when @p buf starts with a msgpack map.
 * Thread-safety: reentrant.
 */
AB_API bool ab_msg_peek(const uint8_t *buf, size_t len, uint64_t *cid, uint32_t *v);

/**
 * Decode one header frame. The frame may be at most max_header_bytes for a
 * request op and AB_MAX_REPLY_BYTES for any other op, and at most
 * max_depth deep; else AB_TOO_LARGE.
 * @param limits  NULL for ab_limits_default(); bounds counts and ids.
 * @param out     written only on AB_OK.
 * @return AB_OK, AB_INVALID_ENVELOPE, AB_TOO_LARGE, AB_INCOMPATIBLE_VERSION,
 *         AB_UNSUPPORTED (unknown op) or AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_msg_decode(ab_doc_t *doc, const uint8_t *buf, size_t len,
                                              const ab_limits_t *limits, ab_msg_t *out,
                                              ab_error_t *err);

/**
 * True when two messages are equal field by field (what a decode of an
 * encode gives back). Meaningful for valid messages; strings, trees, lists
 * and errors are compared by content.
 */
AB_API bool ab_msg_equal(const ab_msg_t *a, const ab_msg_t *b);

/**
 * Append an ERROR reply carrying @p e, with cid = e->cid and version @p v
 * (0 = omit `v`, for answering an undecodable hello).
 * @return AB_OK, AB_INVALID_ARGUMENT (e->code is AB_OK or out of range or
 *         v is not supported) or AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_error_encode_reply(const ab_error_t *e, uint32_t v,
                                                      ab_buf_t *out);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_CODEC_H */

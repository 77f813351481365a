/*
 * agentbus/model.h - one type per concept: what the wire codec, the event
 * store, the persistence plugin ABI and the broker all speak about.
 *
 * Each concept has exactly one C type, defined here and nowhere else: a
 * string view, a run's status and outcome, a run head, an event to append,
 * a stored event, the durability of a commit, a replay scope, a cursor,
 * what to read, and a durable run request (dispatch: its state and record). The store and the
 * plugin ABI (agentbus/plugin.h) take and return these types unchanged, and so does the broker. The
 * wire has its own views where its shape differs (codec.h: ab_head_t, ab_replay_t) and converts
 * only at the codec's edge (ab_head_view(), ab_replay_read()).
 *
 * This header depends on status.h and ids.h only (no msgpack, jansson,
 * ZeroMQ or SQLite), so a plugin author's build needs nothing else.
 *
 * Ownership: ab_str_t and the pointers in ab_append_event_t, ab_row_t and
 * ab_request_new_t are borrowed (their owner says for how long);
 * ab_run_head_t, ab_thread_info_t and ab_request_t own copies.
 */
#ifndef AGENTBUS_MODEL_H
#define AGENTBUS_MODEL_H

#include "agentbus/ids.h"
#include "agentbus/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A borrowed string view (not NUL-terminated). ptr == NULL means absent. */
typedef struct ab_str {
    const char *ptr;
    size_t len;
} ab_str_t;

/** RUN_FINISHED / SUBAGENT_FINISHED outcome kinds (AG-UI). */
typedef enum ab_agui_outcome {
    AB_OUTCOME_NONE = 0, /**< absent (= success) */
    AB_OUTCOME_SUCCESS,
    AB_OUTCOME_INTERRUPT,
    AB_OUTCOME_CANCELLED,
    AB_OUTCOME_SUSPENDED, /**< SUBAGENT_FINISHED only */
    AB_OUTCOME_UNKNOWN,   /**< lenient mode: unrecognised outcome type */
} ab_agui_outcome_t;

/** A run's status as the broker reports it. */
typedef enum ab_run_status {
    AB_RUN_STATUS_UNKNOWN = 0, /**< "unknown": never seen */
    AB_RUN_STATUS_ACTIVE,      /**< "active" */
    AB_RUN_STATUS_FINISHED,    /**< "finished" (terminal) */
    AB_RUN_STATUS_ERRORED,     /**< "errored" (terminal) */
} ab_run_status_t;

/** What an acknowledged (committed) event survives. */
typedef enum ab_durability {
    AB_DURABILITY_FSYNC = 0, /**< power loss (SQLite synchronous=FULL); the default */
    AB_DURABILITY_PROCESS,   /**< a crash of the broker (synchronous=NORMAL) */
} ab_durability_t;

/**
 * The head of one run: a copy, owned by whoever holds it. Ids are
 * NUL-terminated (ids never contain NUL). A run never seen is all zero
 * except its ids (status UNKNOWN).
 */
typedef struct ab_run_head {
    char thread[AB_ID_MAX_BYTES + 1];
    char run[AB_ID_MAX_BYTES + 1];
    char parent_run[AB_ID_MAX_BYTES + 1]; /**< RUN_STARTED parentRunId; "" = none */
    uint64_t epoch;                       /**< current claim epoch; 0 = never claimed nor written */
    uint64_t last_seq;                    /**< 0 = nothing committed */
    uint64_t last_pos;                    /**< commit position of its last event, 0 = none */
    ab_run_status_t status;               /**< UNKNOWN: never seen, or claimed without events */
    ab_agui_outcome_t outcome;            /**< RUN_FINISHED's outcome as stored (NONE = absent) */
    int64_t started_us; /**< commit time of its first event or claim; 0 = unknown */
    int64_t ended_us;   /**< commit time of its terminal event; 0 = not ended */
} ab_run_head_t;

/**
 * One event to append, with the run-state change it causes (if any). Every
 * pointer is borrowed: bytes are the producer's exact envelope, pointing
 * into the frame it arrived in, which stays alive until the publish is
 * answered; the store writes them from there.
 */
typedef struct ab_append_event {
    ab_str_t thread;
    ab_str_t run;
    uint64_t seq;
    uint64_t epoch;            /**< the writer's epoch; the run's becomes max(this, stored) */
    const uint8_t *bytes;      /**< the producer's exact envelope bytes */
    size_t len;                /**< 0 allowed (bytes may then be NULL) */
    ab_run_status_t status;    /**< UNKNOWN = unchanged; ACTIVE (RUN_STARTED), FINISHED, ERRORED */
    ab_agui_outcome_t outcome; /**< RUN_FINISHED's, else NONE */
    ab_str_t parent_run;       /**< RUN_STARTED parentRunId; ptr NULL = none */
} ab_append_event_t;

/** One stored event handed to a read callback; everything borrowed for the call. */
typedef struct ab_row {
    uint64_t pos;         /**< global commit position, >= 1 */
    int64_t commit_us;    /**< the broker's commit time */
    uint64_t seq;         /**< position in its run, >= 1 */
    ab_str_t thread;      /**< NUL-terminated in the built-in store, not by contract */
    ab_str_t run;         /**< likewise */
    const uint8_t *bytes; /**< the producer's exact envelope bytes */
    size_t len;
} ab_row_t;

/** Scope of a replay and of a read. */
typedef enum ab_replay_scope {
    AB_REPLAY_RUN = 1, /**< "run": one run after a seq */
    AB_REPLAY_THREAD,  /**< "thread": every run of a thread, per-run cursors */
    AB_REPLAY_ALL,     /**< "all": everything after a commit position */
} ab_replay_scope_t;

/** A per-run replay cursor: replay the run from after_seq + 1. */
typedef struct ab_cursor {
    ab_str_t run;
    uint64_t after_seq;
} ab_cursor_t;

/**
 * What to read: one scope and where in it to start. Rows come in ascending
 * position order (a run's are also in seq order). A reader that pages
 * through a scope moves the cursor: after_seq to the last row's seq (scope
 * run), after_pos to its position (thread, all).
 */
typedef struct ab_read {
    ab_replay_scope_t scope;
    ab_str_t thread;    /**< RUN, THREAD */
    ab_str_t run;       /**< RUN */
    uint64_t after_seq; /**< RUN: rows with seq > after_seq */
    uint64_t after_pos; /**< THREAD, ALL: rows with pos > after_pos */
    uint32_t limit;     /**< at most this many rows (>= 1) */
} ab_read_t;

/** Read callback: return 0 to continue, non-zero to stop after this row (it still counts). */
typedef int (*ab_row_cb)(void *ud, const ab_row_t *row);

/** Callback for a list of heads (borrowed for the call); return non-zero to stop. */
typedef int (*ab_head_cb)(void *ud, const ab_run_head_t *head);

/**
 * One thread of the store's thread listing (plugin threads_list): a thread
 * with at least one committed event.
 */
typedef struct ab_thread_info {
    char thread[AB_ID_MAX_BYTES + 1];
    uint64_t runs;                      /**< runs of the thread (by events or a claim) */
    uint64_t runs_active;               /**< of which active: started, not ended */
    char last_run[AB_ID_MAX_BYTES + 1]; /**< the run of its newest committed event */
    uint64_t last_pos;                  /**< that event's position, >= 1 */
} ab_thread_info_t;

/** Callback for a list of threads (borrowed for the call); return non-zero to stop. */
typedef int (*ab_thread_cb)(void *ud, const ab_thread_info_t *t);

/** Bytes of a worker id in a request's assignment (the broker's registration id). */
#define AB_REQUEST_WORKER_MAX_BYTES 64
/** Bytes of a broker instance id in a request's assignment (16 hex chars today). */
#define AB_REQUEST_BROKER_MAX_BYTES 32
/**
 * Bytes of a request's input (the RunAgentInput as msgpack, opaque to the
 * store): at most 1 MiB. A start_run whose input is larger is refused.
 */
#define AB_REQUEST_INPUT_MAX_BYTES (1024u * 1024u)

/**
 * Where a durable run request is (docs/STORE.md "Run requests"). Legal moves:
 * queued -> assigned | cancelled; assigned -> queued (declined, lease lapsed)
 * | assigned (handed to another worker) | started | cancelled; started ->
 * started (another worker claimed the orphaned run) | ended. Cancelled and
 * ended are terminal.
 */
typedef enum ab_request_state {
    AB_REQ_NONE = 0,  /**< not a state: "any" where a filter takes one */
    AB_REQ_QUEUED,    /**< "queued": waiting for a worker */
    AB_REQ_ASSIGNED,  /**< "assigned": offered to a worker, its RUN_STARTED not committed */
    AB_REQ_STARTED,   /**< "started": its RUN_STARTED committed; never run again by itself */
    AB_REQ_CANCELLED, /**< "cancelled": removed before it started (terminal) */
    AB_REQ_ENDED,     /**< "ended": the run ended or was abandoned (terminal) */
} ab_request_state_t;

/**
 * A new run request as a client asked for it (start_run), for the store's
 * put. Every pointer is borrowed for the call.
 */
typedef struct ab_request_new {
    ab_str_t key;         /**< idempotency key, 1..AB_ID_MAX_BYTES (required) */
    ab_str_t agent;       /**< 1..AB_ID_MAX_BYTES */
    ab_str_t thread;      /**< 1..AB_ID_MAX_BYTES */
    ab_str_t run;         /**< 1..AB_ID_MAX_BYTES: the client's, or one the broker made */
    bool run_named;       /**< the client named the run (else a retry may bring another made id) */
    const uint8_t *input; /**< the RunAgentInput's msgpack, opaque; NULL only with len 0 */
    size_t input_len;     /**< 0..AB_REQUEST_INPUT_MAX_BYTES */
    /** The input's parentRunId (0..AB_ID_MAX_BYTES; ptr NULL = a top-level run), for
     *  the thread rule of a store that takes requests itself (request_take). */
    ab_str_t parent_run;
} ab_request_new_t;

/**
 * A stored run request: a copy, owned by whoever holds it. Ids are
 * NUL-terminated. Its input bytes are read separately (into an ab_buf_t).
 */
typedef struct ab_request {
    uint64_t id; /**< assigned by the store: 1, 2, 3 ... in commit order = queue order */
    char key[AB_ID_MAX_BYTES + 1];
    char agent[AB_ID_MAX_BYTES + 1];
    char thread[AB_ID_MAX_BYTES + 1];
    char run[AB_ID_MAX_BYTES + 1];
    bool run_named;                               /**< as put */
    ab_request_state_t state;                     /**< never AB_REQ_NONE */
    char worker[AB_REQUEST_WORKER_MAX_BYTES + 1]; /**< the assignment's worker; "" = none */
    uint64_t epoch;                               /**< the assignment's claim epoch; 0 = none */
    uint32_t attempts;                            /**< times it moved to assigned */
    int64_t created_us;
    int64_t updated_us; /**< the last change of state, worker or epoch */
    /** The instance of the broker whose worker holds it (assigned, started; kept when it
     *  ends); "" = none, or a store with one broker (SQLite keeps no column for it). */
    char broker[AB_REQUEST_BROKER_MAX_BYTES + 1];
    /** A shared store: the epoch at which a cancel_run through another broker than the
     *  holder asked the holder to cancel the run (plugin.h request_cancel_held); it applies
     *  while it equals epoch. 0 = none (always on SQLite). */
    uint64_t cancel_epoch;
} ab_request_t;

/**
 * A compare-and-set move of a request: applied only when the request is
 * still in expect_state with expect_epoch, so a stale writer cannot move it.
 */
typedef struct ab_request_move {
    ab_request_state_t expect_state;
    uint64_t expect_epoch;    /**< the epoch it must still have (0 = none) */
    ab_request_state_t state; /**< the new state (a legal move, see ab_request_state_t) */
    ab_str_t worker; /**< the new worker, 0..AB_REQUEST_WORKER_MAX_BYTES; ptr NULL = none */
    uint64_t epoch;  /**< the new epoch (0 = none) */
    /** The broker instance that holds it now, 0..AB_REQUEST_BROKER_MAX_BYTES; ptr NULL =
     *  none. A store shared by brokers records it; a store with one broker may ignore it. */
    ab_str_t broker;
} ab_request_move_t;

/** Callback for a list of requests (borrowed for the call); return non-zero to stop. */
typedef int (*ab_request_cb)(void *ud, const ab_request_t *req);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_MODEL_H */

/*
 * pg_int.h - internals of the PostgreSQL persistence plugin (plugin/postgres/,
 * docs/SCALING.md): the handle, the prepared statements and the helpers the
 * plugin's files share.
 *
 * The plugin implements agentbus/plugin.h over libpq. One handle is one
 * connection, used by one thread at a time (the ABI's threading contract).
 * Every statement is prepared on the connection when it is made, and made
 * again after a lost connection: a call that finds the connection broken
 * reconnects first (libpq's multi-host conninfo with
 * target_session_attrs=read-write then finds the promoted standby).
 */
#ifndef AB_PG_INT_H
#define AB_PG_INT_H

#include "agentbus/plugin.h"
#include "pg_chunk.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

/* Type oids of the parameters the plugin sends (pg_type.h, stable since 7.x). */
#define PG_BOOL   16
#define PG_BYTEA  17
#define PG_INT8   20
#define PG_INT4   23
#define PG_TEXT   25
#define PG_TEXTA  1009
#define PG_INT8A  1016
#define PG_BYTEAA 1001

/** The prepared statements (SQL in pg_conn.c's table). */
enum {
    PQ_APPEND = 0,
    PQ_APPEND_FENCED,
    PQ_CLAIM,
    PQ_HEAD,
    PQ_THREAD_HEADS,
    PQ_HEADS_OF,
    PQ_HEAD_POS,
    PQ_READ_RUN,
    PQ_READ_THREAD,
    PQ_READ_ALL,
    PQ_EVENT,
    PQ_SNAP_PUT,
    PQ_SNAP_GET,
    PQ_REQ_PUT,
    PQ_REQ_BY_ID,
    PQ_REQ_BY_KEY,
    PQ_REQ_BY_RUN,
    PQ_REQ_MOVE,
    PQ_REQ_LIST_STATE,
    PQ_REQ_LIST_AGENT,
    PQ_REQ_THREAD_OPEN,
    PQ_REQ_AHEAD,
    PQ_REQ_TAKE,
    PQ_REQ_CANCEL,
    PQ_REQ_CANCEL_HELD,
    PQ_LEASE,
    PQ_LOST,
    PQ_STATS,
    PQ_SETTLE,
    PQ_COUNT_
};

/** Most parameters of one statement. */
#define PG_MAX_PARAMS 16

/** The parameters of one call, every one sent in binary (format 1). */
typedef struct pg_params {
    int n;
    const char *val[PG_MAX_PARAMS];
    int len[PG_MAX_PARAMS];
    int fmt[PG_MAX_PARAMS];
    uint8_t num[PG_MAX_PARAMS][8]; /* int8 / int4 / bool values, big-endian */
} pg_params_t;

/** A growable byte buffer for encoded arrays. */
typedef struct pg_bytes {
    uint8_t *data;
    size_t len, cap;
} pg_bytes_t;

/** A read's result with its chunks unpacked (pg_chunk.h; pg_read.c "rows"). */
typedef struct pg_rows {
    PGresult *r;
    struct pg_view {
        const uint8_t *p; /**< the plain records of row i: in r, or in buf when packed */
        size_t len;
        bool bad; /**< a packed chunk that does not unpack: read as malformed */
    } * view;
    uint8_t *buf; /**< the unpacked chunks of the result, one allocation */
    size_t plain; /**< plain bytes of all its chunks (the bound of what a read keeps) */
} pg_rows_t;

/** One record of a read's result, placed by position (pg_read.c). */
typedef struct pg_slot {
    const PGresult *r; /**< the result holding it (NULL: an empty slot) */
    int row;
    pg_rec_t rec;
    uint64_t pos;
} pg_slot_t;

/**
 * What a read fetched past the page it delivered (pg_read.c invariant 7): the rest of its
 * chunks, settled, kept for the read that continues the page.
 */
typedef struct pg_ahead {
    pg_rows_t rows;  /**< rows.r NULL: nothing kept */
    pg_slot_t *recs; /**< the records not delivered, in the read's order */
    size_t next, n;  /**< recs[next..n) not delivered yet */
    int scope;       /**< the read's ab_replay_scope_t */
    char *thread;    /**< the thread read (a copy; then the run's; empty for scope all) */
    size_t thread_len, run_len;
    uint64_t last; /**< the position (thread, all) or seq (run) last delivered: a read after it
                        continues this one */
    uint64_t from; /**< the batch the pass would go on from (0: nothing followed it) */
} pg_ahead_t;

/** Most plain chunk bytes a kept pass may hold (one per handle; bigger ones are cleared). */
#define PG_AHEAD_MAX_BYTES (4u << 20)

struct ab_plugin_db {
    PGconn *conn;
    char *conninfo;
    bool readonly;
    ab_durability_t durability;
    bool listening; /**< LISTEN issued on this connection (writer) */
    /** Every position up to this one is known to be on the synchronous standby (or, without
     * one, flushed on the primary): shown by this handle's own acknowledged commit. */
    uint64_t safe_pos;
    pg_ahead_t ahead; /**< the rest of the last read (pg_read.c invariant 7) */
    /* append staging, reused across batches */
    pg_bytes_t arr[12];
    pg_bytes_t pack;  /**< a chunk being packed (pg_chunk.h) */
    pg_bytes_t fence; /**< a fenced append's thread array */
};

/* ---- pg_conn.c ---------------------------------------------------------- */

/** Make sure the connection is up (connect, schema check, prepare). */
ab_status_t ab__pg_ready(ab_plugin_db_t *db, ab_error_t *err);
/** Run prepared statement @p which with @p p; binary results. NULL on failure (err set). */
PGresult *ab__pg_exec(ab_plugin_db_t *db, int which, const pg_params_t *p, const char *what,
                      ab_error_t *err);
/**
 * Before rows holding positions up to @p pos are handed on: make sure they are
 * durable (pg_conn.c invariant 4). Free when @p pos <= db->safe_pos or on a
 * `process` handle; else one commit that waits for the synchronous standby.
 */
ab_status_t ab__pg_settle(ab_plugin_db_t *db, uint64_t pos, ab_error_t *err);
/** Clear what a read kept (pg_read.c invariant 7): on every dropped connection and at close. */
void ab__pg_ahead_clear(ab_plugin_db_t *db);
/** The status of a failed result, as the durability contract names them (and err). */
ab_status_t ab__pg_fail(ab_plugin_db_t *db, PGresult *r, const char *what, ab_error_t *err);

void ab__pg_p_text(pg_params_t *p, ab_str_t s);
void ab__pg_p_cstr(pg_params_t *p, const char *s);
void ab__pg_p_i64(pg_params_t *p, int64_t v);
void ab__pg_p_i32(pg_params_t *p, int32_t v);
void ab__pg_p_bool(pg_params_t *p, bool v);
void ab__pg_p_bytes(pg_params_t *p, const uint8_t *b, size_t len);
void ab__pg_p_null(pg_params_t *p);

int64_t ab__pg_i64(const PGresult *r, int row, int col);
ab_str_t ab__pg_str(const PGresult *r, int row, int col);
/** Copy a text column into a NUL-terminated array of @p cap bytes (cut to fit). */
void ab__pg_copy(char *dst, size_t cap, const PGresult *r, int row, int col);

/** Check an id (1..AB_ID_MAX_BYTES bytes). */
ab_status_t ab__pg_check_id(ab_str_t id, const char *field, ab_error_t *err);
/** Refuse a write on a read-only handle. */
ab_status_t ab__pg_check_writer(ab_plugin_db_t *db, const char *what, ab_error_t *err);

/* ---- pg_events.c -------------------------------------------------------- */
ab_status_t ab__pg_append_batch(ab_plugin_db_t *db, const ab_append_event_t *evs, size_t n,
                                int64_t commit_us, uint64_t *first_pos, ab_error_t *err);
ab_status_t ab__pg_append_fenced(ab_plugin_db_t *db, const ab_append_event_t *evs, size_t n,
                                 const ab_str_t *threads, size_t nthreads, uint64_t seen,
                                 int64_t commit_us, uint64_t *first_pos, ab_error_t *err);
ab_status_t ab__pg_claim(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, uint64_t *epoch,
                         uint64_t *last_seq, ab_error_t *err);
ab_status_t ab__pg_head(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, ab_run_head_t *out,
                        ab_error_t *err);
ab_status_t ab__pg_heads_of(ab_plugin_db_t *db, const ab_str_t *threads, const ab_str_t *runs,
                            size_t n, ab_head_cb cb, void *ud, ab_error_t *err);
ab_status_t ab__pg_thread_heads(ab_plugin_db_t *db, ab_str_t thread, ab_head_cb cb, void *ud,
                                ab_error_t *err);
ab_status_t ab__pg_head_pos(ab_plugin_db_t *db, uint64_t *pos, ab_error_t *err);
ab_status_t ab__pg_read(ab_plugin_db_t *db, const ab_read_t *req, ab_row_cb cb, void *ud,
                        uint32_t *count, ab_error_t *err);
ab_status_t ab__pg_event_bytes(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, uint64_t seq,
                               ab_buf_t *out, uint64_t *pos, ab_error_t *err);
ab_status_t ab__pg_snapshot_put(ab_plugin_db_t *db, ab_str_t thread, uint64_t pos,
                                const uint8_t *doc, size_t len, ab_error_t *err);
ab_status_t ab__pg_snapshot_get(ab_plugin_db_t *db, ab_str_t thread, ab_buf_t *doc, uint64_t *pos,
                                ab_error_t *err);
void ab__pg_stage_free(ab_plugin_db_t *db);

/* ---- pg_req.c ------------------------------------------------------------ */
ab_status_t ab__pg_request_put(ab_plugin_db_t *db, const ab_request_new_t *req, ab_request_t *out,
                               bool *existing, ab_error_t *err);
ab_status_t ab__pg_request_get(ab_plugin_db_t *db, uint64_t id, ab_request_t *out, ab_buf_t *input,
                               ab_error_t *err);
ab_status_t ab__pg_request_by_key(ab_plugin_db_t *db, ab_str_t key, ab_request_t *out,
                                  ab_buf_t *input, ab_error_t *err);
ab_status_t ab__pg_request_move(ab_plugin_db_t *db, uint64_t id, const ab_request_move_t *mv,
                                ab_request_t *out, ab_error_t *err);
ab_status_t ab__pg_request_list(ab_plugin_db_t *db, ab_request_state_t state, ab_str_t agent,
                                uint64_t after_id, uint32_t limit, ab_request_cb cb, void *ud,
                                uint32_t *count, ab_error_t *err);
ab_status_t ab__pg_request_thread_open(ab_plugin_db_t *db, ab_str_t thread, ab_request_cb cb,
                                       void *ud, ab_error_t *err);
ab_status_t ab__pg_request_position(ab_plugin_db_t *db, uint64_t id, uint64_t *ahead,
                                    ab_error_t *err);
ab_status_t ab__pg_request_by_run(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run,
                                  ab_request_t *out, ab_buf_t *input, ab_error_t *err);

ab_status_t ab__pg_request_take(ab_plugin_db_t *db, uint64_t id, ab_str_t worker, ab_str_t broker,
                                ab_request_t *out, ab_buf_t *input, ab_error_t *err);
ab_status_t ab__pg_request_cancel(ab_plugin_db_t *db, uint64_t id, uint64_t epoch,
                                  ab_request_t *out, ab_error_t *err);
ab_status_t ab__pg_request_cancel_held(ab_plugin_db_t *db, uint64_t id, uint64_t epoch,
                                       int64_t now_us, ab_request_t *out, bool *alive,
                                       ab_error_t *err);
ab_status_t ab__pg_broker_lease(ab_plugin_db_t *db, ab_str_t broker, int64_t now_us,
                                int64_t alive_until_us, uint32_t limit, ab_request_cb lost,
                                void *ud, ab_error_t *err);

/* ---- pg_threads.c --------------------------------------------------------- */
ab_status_t ab__pg_threads_list(ab_plugin_db_t *db, ab_str_t after, ab_str_t prefix, uint32_t limit,
                                ab_thread_cb cb, void *ud, uint32_t *count, ab_error_t *err);

/* ---- pg_stats.c ----------------------------------------------------------- */
ab_status_t ab__pg_stats(ab_plugin_db_t *db, ab_plugin_stats_t *out, ab_error_t *err);

#endif /* AB_PG_INT_H */

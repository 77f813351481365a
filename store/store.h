/*
 * store.h - the event store on SQLite (see docs/STORE.md); private to the build:
 * the SQLite plugin, `agentbus relayout` (cli/relayout_cmd.c), the store's tests
 * and benchmarks use it, nothing installs it.
 *
 * One database, <dir>/agentbus.db, in WAL mode. Events are stored as the
 * producer's exact bytes, each with a global commit position `pos` (1, 2, 3
 * ... in commit order), its run's `seq` and the broker's commit time. The
 * store does not parse events and does not check for gaps (the broker's
 * sequencer does); it guarantees that a run's seqs are stored strictly
 * increasing, so a (run, seq) pair is stored at most once.
 *
 * Writes are group commits: ab__store_append_batch(), or ab__store_begin(),
 * ab__store_append() per event (which only checks it and remembers where its
 * bytes are), ab__store_commit() (which writes the whole batch, one row per
 * run touched, straight from the caller's bytes, and commits; all or
 * nothing).
 *
 * Thread-safety: one thread per handle. For a concurrent reader open a second
 * handle (readonly is fine): WAL lets it read committed data while the writer
 * writes. Only one writer transaction exists per database at a time; a second
 * writer gets AB_UNAVAILABLE (retryable) rather than waiting.
 *
 * Errors: SQLite failures map to typed statuses. SQLITE_FULL, SQLITE_IOERR*,
 * SQLITE_BUSY/LOCKED, SQLITE_CANTOPEN -> AB_UNAVAILABLE (retryable);
 * SQLITE_CORRUPT/NOTADB -> AB_CORRUPT; constraint -> AB_CONFLICT;
 * SQLITE_NOMEM -> AB_NOMEM; anything else -> AB_INTERNAL. The message carries
 * SQLite's own text. Out-params are written only on AB_OK.
 */
#ifndef AB_STORE_H
#define AB_STORE_H

#include "agentbus/buf.h"
#include "agentbus/ids.h"
#include "agentbus/model.h"
#include "agentbus/plugin.h"
#include "agentbus/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Schema version this build creates and understands (PRAGMA user_version). */
#define AB_STORE_SCHEMA_VERSION 7
/** File name of the database inside the data directory. */
#define AB_STORE_DB_NAME "agentbus.db"
/**
 * File name of the pid file inside the data directory: an exclusive handle
 * locks it too and writes its pid there (the lock itself is on the database
 * file, see ab_store_opts_t.exclusive).
 */
#define AB_STORE_LOCK_NAME "LOCK"

/**
 * The checkpointer (the background thread of a writer handle) flushes the database
 * file to the disk after each this many bytes of a checkpoint it wrote, so that no
 * more than about two such slices are queued ahead of a commit's WAL fsync
 * (store_pace.c).
 */
#define AB_STORE_PACE_BYTES (1 << 20)

/**
 * Opaque store handle. It is the built-in SQLite plugin's handle
 * (ab_plugin_db_t of agentbus/plugin.h): that plugin's function table points
 * straight at the functions below that have its signatures, so those take
 * the ABI's (model.h) types and keep its contract.
 */
typedef struct ab_plugin_db ab_store_t;

/** Options of ab__store_open(). Zero-initialised = defaults. */
typedef struct ab_store_opts {
    ab_durability_t durability; /**< what a commit survives; default AB_DURABILITY_FSYNC */
    bool readonly;              /**< SQLITE_OPEN_READONLY, no migrations, no dir creation */
    int busy_timeout_ms;        /**< SQLite busy timeout; default 0 (fail fast, AB_UNAVAILABLE) */
    bool skip_quick_check;      /**< skip PRAGMA quick_check at open (not recommended) */
    /**
     * Writer handles: own the database. flock(LOCK_EX|LOCK_NB) on
     * <dir>/agentbus.db itself, taken before SQLite opens it and held until
     * ab__store_close() (after the handle's connections closed); also locks
     * <dir>/LOCK and writes the pid there. A second exclusive opener, in
     * this process or another, gets AB_UNAVAILABLE "data directory D is in
     * use by another broker (pid N)", also when LOCK was deleted.
     */
    bool exclusive;
    /**
     * Writer handles: WAL size in pages (8 KiB) at which a background thread
     * (own connection) checkpoints it; at 4x the writer does it inline, so
     * the WAL file stays within 4x this plus one commit; a file that grew
     * past 4x is cut back to 4x when the WAL restarts (journal_size_limit).
     * 0 = 8192 (64 MiB: the file stays within 256 MiB plus one commit).
     */
    int wal_pages;
    /**
     * Writer handles: tails one log of recent tails may reach before a
     * commit merges both logs into the main tables (docs/STORE.md "Tails in
     * two levels"). 0 = AB_STORE_TAILS_RECENT; the tests set a few to merge
     * often.
     */
    int tails_recent;
    /**
     * Writer handles: a commit's tails of runs (of threads) go straight to
     * the main table while its log is empty and they fall in at most
     * this many ranges of rowids (docs/STORE.md "Tails in two levels").
     * 0 = AB_STORE_TAILS_DIRECT; -1 = never (the tests, to use the logs
     * whatever the runs).
     */
    int tails_direct;
} ab_store_opts_t;

/**
 * Open (and for a writer create and migrate) the store in @p dir.
 * Writer: creates @p dir (mode 0700) if missing. Where no <dir>/agentbus.db
 * exists it builds a new store under a temporary name and links it into
 * place (a new store is made only where no database file exists). It then
 * (opts->exclusive) locks the file, refuses an empty (0-byte) file or one
 * it cannot write, checks it (quick_check), refuses a newer schema, then
 * switches to WAL, sets synchronous per opts->durability and migrates
 * forward in one transaction. Readonly: opens with SQLITE_OPEN_READONLY and
 * requires the current schema; it skips quick_check while an exclusive
 * writer of this process that checked the file at its open has it open.
 * Nothing in an existing file changes when open fails.
 * @param out  receives the handle (owned; release with ab__store_close()).
 * @param opts NULL = defaults.
 * @return AB_OK; AB_INVALID_ARGUMENT (NULL out/dir); AB_CORRUPT (empty,
 *         damaged or not a database: the message names the file and ends
 *         "to start afresh, move it and its -wal and -shm files
 *         away"); AB_UNSUPPORTED (schema newer than this build, or older
 *         for a readonly handle); AB_NOT_FOUND (readonly and no database /
 *         no schema); AB_UNAVAILABLE (locked by another owner, file not
 *         writable for a writer, cannot create dir / open file, busy, I/O,
 *         full); AB_NOMEM; AB_INTERNAL.
 */
ab_status_t ab__store_open(ab_store_t **out, const char *dir, const ab_store_opts_t *opts,
                           ab_error_t *err) AB_NODISCARD;

/**
 * Close the handle; an open transaction is rolled back. NULL-safe; sets
 * *st to NULL.
 */
void ab__store_close(ab_store_t **st);

/**
 * Append a batch as one transaction (the plugin's append_batch()): begin,
 * one ab__store_append() per event, commit. All or nothing: on any failure
 * the transaction is rolled back, nothing of the batch is stored and the
 * error names the event (detail "index"). Every event gets @p commit_us.
 * @param first_pos receives the position of evs[0]; evs[i] has first_pos + i.
 * @return AB_OK; AB_INVALID_ARGUMENT (NULL, empty batch, readonly handle, a
 *         transaction open, a bad event); AB_CONFLICT (see
 *         ab__store_append()); AB_TOO_LARGE; AB_UNAVAILABLE (retry the
 *         batch); AB_CORRUPT; AB_NOMEM.
 */
ab_status_t ab__store_append_batch(ab_store_t *st, const ab_append_event_t *evs, size_t n,
                                   int64_t commit_us, uint64_t *first_pos,
                                   ab_error_t *err) AB_NODISCARD;

/**
 * Start a write transaction (BEGIN IMMEDIATE: takes the write lock now);
 * every event appended in it is stored with commit time @p commit_us.
 * @return AB_OK; AB_UNAVAILABLE (another writer holds the lock, I/O);
 *         AB_INVALID_ARGUMENT (readonly handle or a transaction is open).
 */
ab_status_t ab__store_begin(ab_store_t *st, int64_t commit_us, ab_error_t *err) AB_NODISCARD;

/**
 * Add one event to the open transaction: checks it, assigns its position
 * and remembers where its bytes are; nothing is written before
 * ab__store_commit(), which creates the run's row if needed and updates
 * last_seq/last_pos and the optional state changes. The event's bytes are
 * BORROWED until the commit or rollback: the store writes them from the
 * caller's memory (the producer's frame), not from a copy. Ids and
 * parent_run are borrowed for the call only. Atomic per call: on failure
 * nothing of this event is kept and the transaction stays open (earlier
 * appends intact) for more appends, commit or rollback. Reads see the
 * events only after the commit.
 * @param pos_out optional; receives the assigned commit position.
 * @return AB_OK; AB_CONFLICT (seq not above the run's last committed or
 *         appended seq: the run already has it, field "seq", details "seq"
 *         and "last_seq"); AB_INVALID_ARGUMENT (no transaction, bad id
 *         length, NULL bytes with len > 0, len over 2^31 - 1); AB_TOO_LARGE
 *         (over 2^32 events in one batch); AB_UNAVAILABLE; AB_CORRUPT;
 *         AB_NOMEM.
 */
ab_status_t ab__store_append(ab_store_t *st, const ab_append_event_t *ev, uint64_t *pos_out,
                             ab_error_t *err) AB_NODISCARD;

/**
 * Write the batch and commit it (durable per the handle's durability). On
 * failure the transaction is rolled back whole: nothing is half-applied and
 * the transaction is closed.
 * @return AB_OK; AB_INVALID_ARGUMENT (no transaction); AB_UNAVAILABLE
 *         (full, I/O, busy: retry the batch); AB_CORRUPT; AB_NOMEM.
 */
ab_status_t ab__store_commit(ab_store_t *st, ab_error_t *err) AB_NODISCARD;

/** Roll back the open transaction, if any. NULL-safe. */
void ab__store_rollback(ab_store_t *st);

/**
 * Claim a run for a writer (the plugin's claim()): bump its epoch (create
 * the run with epoch 1 if absent) in its own transaction.
 * @param epoch_out    receives the new epoch.
 * @param last_seq_out receives the run's last committed seq (0 = none).
 * @return AB_OK; AB_INVALID_ARGUMENT (transaction open, readonly, bad ids);
 *         AB_UNAVAILABLE; AB_CORRUPT; AB_NOMEM; AB_INTERNAL.
 */
ab_status_t ab__store_claim(ab_store_t *st, ab_str_t thread, ab_str_t run, uint64_t *epoch_out,
                            uint64_t *last_seq_out, ab_error_t *err) AB_NODISCARD;

/**
 * Read the rows of one scope after its cursor, in position order, at most
 * req->limit (>= 1) of them (the plugin's read()): scope run by seq (rows
 * with seq > after_seq), thread and all by position (pos > after_pos). An
 * unknown run or thread delivers nothing (AB_OK, 0). Works on any handle;
 * sees committed events only.
 * @param count optional; receives the number of rows delivered.
 * @return AB_OK; AB_INVALID_ARGUMENT (NULL, bad id, unknown scope, limit 0);
 *         AB_UNAVAILABLE; AB_CORRUPT; AB_NOMEM.
 */
ab_status_t ab__store_read(ab_store_t *st, const ab_read_t *req, ab_row_cb cb, void *ud,
                           uint32_t *count, ab_error_t *err) AB_NODISCARD;

/**
 * The exact bytes of (run, seq) into @p out (reset first) and its position
 * (the plugin's event_bytes()).
 * @param pos_out optional.
 * @return AB_OK; AB_NOT_FOUND (no such run or seq, field "seq");
 *         AB_INVALID_ARGUMENT; AB_UNAVAILABLE; AB_CORRUPT; AB_NOMEM.
 */
ab_status_t ab__store_event_bytes(ab_store_t *st, ab_str_t thread, ab_str_t run, uint64_t seq,
                                  ab_buf_t *out, uint64_t *pos_out, ab_error_t *err) AB_NODISCARD;

/**
 * Copy the head of a run into @p out (the plugin's head()): a run never
 * seen (nor claimed) gets status UNKNOWN, its ids and zeros, with AB_OK.
 * A claimed run without events has status UNKNOWN and its epoch.
 * @return AB_OK; AB_INVALID_ARGUMENT (NULL, bad id); AB_UNAVAILABLE;
 *         AB_CORRUPT; AB_NOMEM.
 */
ab_status_t ab__store_head(ab_store_t *st, ab_str_t thread, ab_str_t run, ab_run_head_t *out,
                           ab_error_t *err) AB_NODISCARD;

/**
 * Call @p cb for each run of a thread, in creation order (the plugin's
 * thread_heads()); an unknown thread has none (AB_OK). A non-zero return of
 * @p cb stops the listing (AB_OK).
 * @return as ab__store_head().
 */
ab_status_t ab__store_thread_heads(ab_store_t *st, ab_str_t thread, ab_head_cb cb, void *ud,
                                   ab_error_t *err) AB_NODISCARD;

/**
 * The threads with at least one committed event whose id sorts after
 * @p after (bytes unsigned, a shorter id first; len 0: from the first) and
 * starts with @p prefix (len 0: every thread), in that order, at most
 * @p limit (>= 1), each given to @p cb (a non-zero return stops; the thread
 * it had counts); *count = delivered (the plugin's threads_list). One index
 * range scan (store_threads.c), any handle.
 * @return AB_OK; AB_INVALID_ARGUMENT (NULL, limit 0, an over-long cursor or
 *         prefix); AB_UNAVAILABLE; AB_CORRUPT; AB_NOMEM.
 */
ab_status_t ab__store_threads_list(ab_store_t *st, ab_str_t after, ab_str_t prefix, uint32_t limit,
                                   ab_thread_cb cb, void *ud, uint32_t *count,
                                   ab_error_t *err) AB_NODISCARD;

/**
 * The highest committed commit position (inside the handle's own open
 * transaction: the last one appended in it); 0 for an empty store (the
 * plugin's head_pos()).
 * @return AB_OK; AB_INVALID_ARGUMENT; AB_UNAVAILABLE; AB_CORRUPT; AB_NOMEM.
 */
ab_status_t ab__store_head_pos(ab_store_t *st, uint64_t *pos_out, ab_error_t *err) AB_NODISCARD;

/** What ab__store_relayout() found and did. */
typedef struct ab_store_relayout {
    bool needed;         /**< the links were after the data: the table was rewritten */
    uint64_t chunks;     /**< chunk rows rewritten (0 when not needed) */
    uint64_t last_pos;   /**< the highest chunk rowid (a position) when it began */
    uint64_t free_bytes; /**< free pages in the file after it (the old table's, which later
                              writes reuse), in bytes */
} ab_store_relayout_t;

/** Progress of ab__store_relayout(): @p chunks rewritten so far, up to position @p pos of
 * @p pos_max (chunks go in position order). */
typedef void (*ab_store_progress_fn)(void *ud, uint64_t chunks, uint64_t pos, uint64_t pos_max);

/**
 * Rewrite the chunks table of a store migrated from schema 4 with events in schema 5's
 * column order, its links before its data (store_relayout.c; docs/STORE.md "Opening, checks
 * and migrations"), so its runs replay as fast as a new store's. Meant for an exclusive
 * writer handle while no broker runs: it holds the write lock throughout. One transaction:
 * all or nothing; an error, a crash or a kill leaves the store as it was. Nothing is written
 * when the links already come first (out->needed false) or when the filesystem has less free
 * space than twice the database file. @p progress (may be NULL) is called every 4,096
 * chunks.
 * @return AB_OK; AB_INVALID_ARGUMENT (NULL, readonly handle, a transaction open);
 *         AB_UNAVAILABLE (too little free space: details need_bytes and free_bytes; busy,
 *         I/O, full); AB_CORRUPT; AB_NOMEM.
 */
ab_status_t ab__store_relayout(ab_store_t *st, ab_store_progress_fn progress, void *ud,
                               ab_store_relayout_t *out, ab_error_t *err) AB_NODISCARD;

/** The SQLite library the store runs on ("3.40.1"). */
const char *ab__store_sqlite_version(void);

/**
 * Turn SQLite's memory statistics off for the process (SQLITE_CONFIG_MEMSTATUS). With them on,
 * every allocation SQLite makes takes one process-wide mutex to count it, so the writer, the
 * snapshot worker and the readers contend for it on every statement. With them off,
 * sqlite3_memory_used(), sqlite3_status64() and SQLite's heap limits do nothing; agentbus
 * uses none of them. SQLite accepts the setting only before it is initialised, so a program
 * calls this first, before any thread uses SQLite (sqlite3_config() is not thread-safe);
 * `agentbus` does so in main().
 * @return 1 when this call turned them off; 0 when SQLite was already initialised (nothing
 *         changed, everything works as before).
 */
int ab__store_global_init(void);

/** What the store holds: runs ever recorded and active, the database and WAL sizes
 *  (store_stats.c); no scan. @return AB_OK or the store's error. */
ab_status_t ab__store_stats(ab_store_t *st, ab_plugin_stats_t *out, ab_error_t *err) AB_NODISCARD;

/** How long @p st's statements wait for a lock another connection holds: @p ms (0: not at
 *  all), or the busy timeout it was opened with when @p ms < 0 (the plugin's set_lock_wait). */
void ab__store_set_lock_wait(ab_store_t *st, int ms);

/** The checkpointer's VFS's name (registered on the first call), or NULL if it could not be. */
const char *ab__store_pace_vfs(void);
/** Slices of checkpoints the checkpointer's VFS flushed in this process so far; in
 * @p ranged (if not NULL) how many of them with sync_file_range (store_pace.c invariant 4). */
uint64_t ab__store_pace_slices(uint64_t *ranged);

/**
 * Store @p doc (@p len bytes, a snapshot document) as the snapshot of
 * @p thread at commit position @p pos, replacing an older one (one row per
 * thread in the `snapshots` table). A snapshot at a position not greater
 * than the stored one is ignored (AB_OK): stored snapshots never go back.
 * Its own statement (autocommit), or part of the handle's open transaction.
 * @return AB_OK; AB_INVALID_ARGUMENT (NULL, bad id, empty doc, readonly
 *         handle); AB_UNAVAILABLE; AB_IO.
 */
ab_status_t ab__store_snapshot_put(ab_store_t *st, ab_str_t thread, uint64_t pos,
                                   const uint8_t *doc, size_t len, ab_error_t *err) AB_NODISCARD;

/**
 * Store the snapshot of @p thread at @p pos in parts, one transaction per
 * call, so that no call writes more than one part: parts idx 0, 1, ... in
 * order, @p last on the final one, which makes the document of parts
 * 0 … idx the stored snapshot (if @p pos is above the stored one, as
 * ab__store_snapshot_put). Each call also deletes at most one part of this
 * thread that no stored snapshot uses (an older document's, or one of a
 * sequence never finished). Until @p last commits the stored snapshot is the
 * previous one.
 * @return AB_OK; AB_INVALID_ARGUMENT (NULL, bad id, empty part, readonly
 *         handle, @p last with an earlier part missing); AB_UNAVAILABLE; AB_IO.
 */
ab_status_t ab__store_snapshot_put_part(ab_store_t *st, ab_str_t thread, uint64_t pos, uint32_t idx,
                                        const uint8_t *part, size_t len, bool last,
                                        ab_error_t *err) AB_NODISCARD;

/**
 * The stored snapshot of @p thread: document into @p doc (reset first) and
 * its position into *pos_out.
 * @return AB_OK; AB_NOT_FOUND (none stored); AB_INVALID_ARGUMENT;
 *         AB_UNAVAILABLE; AB_NOMEM.
 */
ab_status_t ab__store_snapshot_get(ab_store_t *st, ab_str_t thread, ab_buf_t *doc,
                                   uint64_t *pos_out, ab_error_t *err) AB_NODISCARD;

/*
 * Durable run requests (store_req.c, docs/STORE.md "Run requests"): the
 * `requests` table. Each write is its own transaction, committed at the
 * handle's durability before the call returns, so a request is durable
 * before the broker answers it. Writes need a writer handle without an open
 * event batch (AB_INVALID_ARGUMENT otherwise). Reads work on any handle.
 */

/**
 * Store a new request (state queued, attempts 0), or find the one its key
 * already names (the plugin's request_put). The key names one request: the
 * same key with another agent, thread or input, or with a named run that
 * differs from the stored run, is refused (AB_CONFLICT, field "key", detail
 * "id" the stored one); the same content gets the stored record (whatever
 * its state now) and *existing = true. Ids grow in commit order.
 * @param out      receives the stored record (new or existing).
 * @param existing optional; receives whether the key was already stored.
 * @return AB_OK; AB_INVALID_ARGUMENT (NULL, readonly handle, an open
 *         batch, an id or key of 0 or over AB_ID_MAX_BYTES bytes, input NULL
 *         with a length); AB_TOO_LARGE (input over AB_REQUEST_INPUT_MAX_BYTES,
 *         field "input"); AB_CONFLICT (the key names another request; or
 *         another key's request has this thread and run, field "run");
 *         AB_UNAVAILABLE (full, I/O, busy: nothing stored, retry);
 *         AB_CORRUPT; AB_NOMEM.
 */
ab_status_t ab__store_request_put(ab_store_t *st, const ab_request_new_t *req, ab_request_t *out,
                                  bool *existing, ab_error_t *err) AB_NODISCARD;

/**
 * The request @p id (the plugin's request_get), its input into @p input
 * (reset first) unless NULL.
 * @return AB_OK; AB_NOT_FOUND (field "id"); AB_INVALID_ARGUMENT;
 *         AB_UNAVAILABLE; AB_CORRUPT; AB_NOMEM.
 */
ab_status_t ab__store_request_get(ab_store_t *st, uint64_t id, ab_request_t *out, ab_buf_t *input,
                                  ab_error_t *err) AB_NODISCARD;

/**
 * The request named by idempotency key @p key (the plugin's
 * request_by_key), its input into @p input unless NULL.
 * @return as ab__store_request_get() (AB_NOT_FOUND: field "key").
 */
ab_status_t ab__store_request_by_key(ab_store_t *st, ab_str_t key, ab_request_t *out,
                                     ab_buf_t *input, ab_error_t *err) AB_NODISCARD;

/**
 * The request of run @p run of @p thread (the plugin's request_by_run),
 * whatever its state; its input into @p input unless NULL.
 * @return as ab__store_request_get() (AB_NOT_FOUND: field "run").
 */
ab_status_t ab__store_request_by_run(ab_store_t *st, ab_str_t thread, ab_str_t run,
                                     ab_request_t *out, ab_buf_t *input,
                                     ab_error_t *err) AB_NODISCARD;

/**
 * Move request @p id (the plugin's request_move) if it is still in
 * mv->expect_state with epoch mv->expect_epoch: set state, worker and
 * epoch, updated_us to now, and attempts + 1 when the new state is
 * assigned. One statement, its own transaction.
 * @param out optional; receives the record after the move.
 * @return AB_OK; AB_CONFLICT (it is no longer in that state or epoch:
 *         nothing changed; field "state", details "state" and "epoch" as
 *         stored); AB_NOT_FOUND (no such id); AB_INVALID_ARGUMENT (NULL,
 *         readonly, an open batch, a move not allowed by ab_request_state_t,
 *         a worker id over AB_REQUEST_WORKER_MAX_BYTES); AB_UNAVAILABLE;
 *         AB_CORRUPT; AB_NOMEM.
 */
ab_status_t ab__store_request_move(ab_store_t *st, uint64_t id, const ab_request_move_t *mv,
                                   ab_request_t *out, ab_error_t *err) AB_NODISCARD;

/**
 * List requests in @p state (not AB_REQ_NONE), of @p agent only when
 * agent.ptr is not NULL, with id > @p after_id, in id order (= queue
 * order), at most @p limit (>= 1) of them (the plugin's request_list). A
 * pager moves after_id to the last id delivered. A non-zero return of @p cb
 * stops the listing after that request (it still counts).
 * @param count optional; receives the number delivered.
 * @return AB_OK; AB_INVALID_ARGUMENT (NULL, state NONE or unknown, limit 0,
 *         bad agent id); AB_UNAVAILABLE; AB_CORRUPT; AB_NOMEM.
 */
ab_status_t ab__store_request_list(ab_store_t *st, ab_request_state_t state, ab_str_t agent,
                                   uint64_t after_id, uint32_t limit, ab_request_cb cb, void *ud,
                                   uint32_t *count, ab_error_t *err) AB_NODISCARD;

/**
 * Every request of @p thread that is not cancelled nor ended (queued,
 * assigned, started), in id order (the plugin's request_thread_open): what
 * holds a thread busy. A non-zero return of @p cb stops the listing.
 * @return AB_OK; AB_INVALID_ARGUMENT (NULL, bad thread id); AB_UNAVAILABLE;
 *         AB_CORRUPT; AB_NOMEM.
 */
ab_status_t ab__store_request_thread_open(ab_store_t *st, ab_str_t thread, ab_request_cb cb,
                                          void *ud, ab_error_t *err) AB_NODISCARD;

/**
 * How many queued requests of the same agent come before request @p id in
 * the queue (the plugin's request_position): 0 = the next to assign. Counts
 * those with a smaller id whatever the state of @p id itself.
 * @return AB_OK; AB_NOT_FOUND (no such id); AB_INVALID_ARGUMENT;
 *         AB_UNAVAILABLE; AB_CORRUPT; AB_NOMEM.
 */
ab_status_t ab__store_request_position(ab_store_t *st, uint64_t id, uint64_t *ahead,
                                       ab_error_t *err) AB_NODISCARD;

#ifdef __cplusplus
}
#endif
#endif /* AB_STORE_H */

/*
 * store_int.h - internals shared by the store/ sources (not installed).
 *
 * Only store/ includes sqlite3.h; this header is where it enters.
 *
 * Layout (see docs/STORE.md): events are stored in "chunks", one row per
 * (run, commit) holding that run's consecutive events of the commit as
 * length-prefixed records. A record is CHUNK_HDR bytes of header, little
 * endian: u32 pos offset from the commit's first position, u32 length, u64
 * seq, i64 commit_us; then the event bytes. A chunk names the previous chunk
 * of its run and of its thread (two chains, newest first, each ending in its
 * tails table); every AB_STORE_ANCHOR_EVERY-th chunk of a chain is an
 * anchor, the only chunks the run and thread indexes hold.
 */
#ifndef AB_STORE_INT_H
#define AB_STORE_INT_H

#include "agentbus/buf.h"
#include "store.h"

#include <sqlite3.h>

/** Page size of a new store, bytes (store.c sets it). */
#define AB_STORE_PAGE_BYTES 8192
/** WAL pages (of page_size, 8 KiB) after which the checkpointer runs (store_ckpt.c). */
#define AB_STORE_WAL_PAGES 8192
/** The checkpointer is woken at this many WAL pages (4 MiB), or at wal_pages if fewer:
 * so that at light load the WAL restarts within a small file whose blocks it writes
 * again, where a WAL growing to wal_pages would lengthen its file at nearly every commit,
 * and an fdatasync that must also write the file's new size and blocks takes about 100 us
 * more (docs/STORE.md "WAL size"). A writer without the thread still checkpoints at
 * wal_pages. */
#define AB_STORE_WAL_EARLY_PAGES 512
/** At this many times wal_pages the writer checkpoints itself (store_ckpt.c). */
#define AB_STORE_WAL_INLINE_FACTOR 4
/** journal_size_limit = this many times wal_pages pages: a WAL file larger than
 * this is cut back to it when the WAL restarts (SQLite truncates it then, in
 * the commit that restarts it). The inline bound, so that a file within its
 * usual size is reused, never truncated (docs/STORE.md "WAL size"). */
#define AB_STORE_WAL_LIMIT_FACTOR AB_STORE_WAL_INLINE_FACTOR

typedef struct ab_store_ckpt ab_store_ckpt_t;
/* This process's entry for one open database file (store_file.c). */
typedef struct ab_store_file ab_store_file_t;

/** The end of every message refusing a database at open (the file was named before). */

/** Bytes of a record header inside a chunk. */
#define CHUNK_HDR 24
/** The writer's run cache is dropped at begin when it holds more runs: as many as the
 * broker's sequencer caches (AB_BROKER_CACHED_RUNS), so a run the sequencer holds is not
 * looked up again here. An entry is about 200 bytes plus its two ids (docs/STORE.md). */
#define RUN_CACHE_MAX 131072

/** Every this many chunks of a run (of a thread) one is an anchor: distance 0 from itself,
 * its entry in chunks_by_run (chunks_by_thread). A walk looks each chunk it delivers up
 * twice (links, then data) whatever this is; it bounds a seek (the chunks read below a
 * cursor before the first one delivered) and a walk's buffer (docs/STORE.md "Chains and
 * anchors"). */
#define AB_STORE_ANCHOR_EVERY 64

/** Tails the recent level of one tails table (its log: run_tails_log, thread_tails_log) may
 * reach before a commit merges both logs into run_tails and thread_tails (docs/STORE.md "Tails
 * in two levels"). A commit over runs in no order then appends its tails to the logs, a few
 * new pages at their ends, instead of rewriting nearly every page of the big tables; the
 * merge rewrites those once every this many new tails. Measured in docs/PERFORMANCE.md "The
 * recent tails as a log". */
#define AB_STORE_TAILS_RECENT 32768
/** Generations (commits that wrote to the logs) the logs may reach before that merge: it
 * bounds the commits between merges when each logs few tails. */
#define AB_STORE_TAILS_GENS 16
/** Tails in one block of a log (a row; store_tails.c invariant 2): 16 bytes each, so a
 * block is at most 1 KiB, about eight to a page, and a commit of a few thousand scattered
 * runs appends a few dozen rows, not a row per tail. */
#define AB_STORE_TAILS_BLOCK 64
/** A commit's tails of one table go straight to the main table, as with one level, when the
 * log of that table is empty and they fall in at most this many ranges of
 * 2^AB_STORE_TAILS_RANGE_BITS rowids (about a page and a half of a tails table each): runs
 * that speak in turn, or a store of a few thousand runs, would only pay for the copy. */
#define AB_STORE_TAILS_DIRECT     16
#define AB_STORE_TAILS_RANGE_BITS 10

/* Schema 5's chunks table under @p name, its links before its data: SQLite keeps a row's
 * columns in their declared order, so a walk reads a chunk's links without the overflow pages
 * of its data (store.c MIGRATE_4_5_EMPTY, store_relayout.c). */
#define AB__CHUNKS_TABLE(name)                                                                     \
    "CREATE TABLE " name "("                                                                       \
    " rowid INTEGER PRIMARY KEY,"                                                                  \
    " run_rowid INTEGER NOT NULL, thread_rowid INTEGER NOT NULL,"                                  \
    " first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, last_pos INTEGER NOT NULL,"           \
    " batch_first INTEGER NOT NULL, batch_last INTEGER NOT NULL, n INTEGER NOT NULL,"              \
    " prev_run INTEGER NOT NULL DEFAULT 0, run_dist INTEGER NOT NULL DEFAULT 0,"                   \
    " prev_thread INTEGER NOT NULL DEFAULT 0, thread_dist INTEGER NOT NULL DEFAULT 0,"             \
    " data BLOB NOT NULL);"
/* Schema 5's partial indexes of the anchors (store.c, store_relayout.c). */
#define AB__ANCHOR_INDEXES                                                                         \
    "CREATE UNIQUE INDEX chunks_by_run ON chunks(run_rowid, last_seq, last_pos)"                   \
    " WHERE run_dist = 0;"                                                                         \
    "CREATE INDEX chunks_by_thread ON chunks(thread_rowid) WHERE thread_dist = 0;"

/* 1 when every link column of chunks comes before its data (AB__CHUNKS_TABLE's order), 0 when
 * a migration with events added them behind it (store_relayout.c, the tests). */
#define AB__LINKS_BEFORE_DATA_SQL                                                                  \
    "SELECT max(cid) < (SELECT cid FROM pragma_table_info('chunks') WHERE name = 'data')"          \
    " FROM pragma_table_info('chunks') WHERE name IN ('prev_run', 'run_dist', 'prev_thread',"      \
    " 'thread_dist')"

/* A tails row written whether the run or thread has one yet or not. */
#define AB__TAIL_UPSERT " ON CONFLICT(rowid) DO UPDATE SET chunk = excluded.chunk"
/* Schema 7's logs of recent tails (docs/STORE.md "Tails in two levels"): a generation per
 * commit that wrote there, its tails appended in blocks keyed (gen, first id); store_tails.c
 * invariant 2. */
#define AB__TAILS_LOG_TABLES                                                                       \
    "CREATE TABLE tails_gens(gen INTEGER PRIMARY KEY, runs INTEGER NOT NULL,"                      \
    " threads INTEGER NOT NULL);"                                                                  \
    "CREATE TABLE run_tails_log(gen INTEGER NOT NULL, first INTEGER NOT NULL,"                     \
    " tails BLOB NOT NULL, PRIMARY KEY(gen, first)) WITHOUT ROWID;"                                \
    "CREATE TABLE thread_tails_log(gen INTEGER NOT NULL, first INTEGER NOT NULL,"                  \
    " tails BLOB NOT NULL, PRIMARY KEY(gen, first)) WITHOUT ROWID;"
/* The newest tail of run (thread) @p key in log @p log ("0": run_tails_log, "1":
 * thread_tails_log), NULL when the logs have none: from the connection's view of the logs,
 * brought to their newest generation (store_tails.c invariant 7). */
#define AB__LOGGED_TAIL(log, key)                                                                  \
    "ab_logged_tail(" log ", " key ", (SELECT max(gen) FROM tails_gens))"
/* The newest chunk of run (thread) @p key, NULL when it has none: its logged tail if it has
 * one, else its main table's (docs/STORE.md "Tails in two levels"). Every statement that needs
 * a tail reads it so (store_rw.c). */
#define AB__TAIL_OF(table, log, key)                                                               \
    "coalesce(" AB__LOGGED_TAIL(log, key) ", (SELECT chunk FROM " table " WHERE rowid = " key "))"
#define AB__RUN_TAIL(key)    AB__TAIL_OF("run_tails", "0", key)
#define AB__THREAD_TAIL(key) AB__TAIL_OF("thread_tails", "1", key)
/* Schema 6's merge of its recent tails tables into the main ones (store.c, 6 -> 7). */
#define AB__TAILS_MERGE_V6_SQL(table)                                                              \
    "INSERT INTO " table "(rowid, chunk) SELECT rowid, chunk FROM " table                          \
    "_recent WHERE true" AB__TAIL_UPSERT

/* SQL that turns a store of schema 7 whose logs are empty (the tests check it) back into one
 * of schema 6 (@p v 6: the recent tables made, empty) or of schema 5 (@p v 5), as a build of
 * that schema could have written it (for the migration tests). */
#define AB__V7_DOWN_SQL(v)                                                                         \
    "DROP TABLE run_tails_log; DROP TABLE thread_tails_log; DROP TABLE tails_gens;"                \
    "PRAGMA user_version = " #v ";"
#define AB__V6_RECENT_TABLES                                                                       \
    "CREATE TABLE run_tails_recent(rowid INTEGER PRIMARY KEY, chunk INTEGER NOT NULL);"            \
    "CREATE TABLE thread_tails_recent(rowid INTEGER PRIMARY KEY, chunk INTEGER NOT NULL);"

/* SQL that turns a store of schema 7 back into one of schema 4, as an older build wrote it:
 * no chains, no tails, every chunk in the run and thread indexes (store.c, migration 4 -> 5).
 * For the migration tests and the relayout measurement (bench/tools/store_bench.c); any chunk
 * a build of schema 5 to 7 wrote becomes one an older build could have written, since schema 4
 * only needs the index entries. Never run by the store itself. */
#define AB__TO_V4_SQL                                                                              \
    "DROP TABLE run_tails; DROP TABLE thread_tails;"                                               \
    "DROP TABLE run_tails_log; DROP TABLE thread_tails_log; DROP TABLE tails_gens;"                \
    "DROP INDEX chunks_by_run; DROP INDEX chunks_by_thread;"                                       \
    "ALTER TABLE chunks DROP COLUMN prev_run; ALTER TABLE chunks DROP COLUMN run_dist;"            \
    "ALTER TABLE chunks DROP COLUMN prev_thread; ALTER TABLE chunks DROP COLUMN thread_dist;"      \
    "CREATE UNIQUE INDEX chunks_by_run ON chunks(run_rowid, last_seq, last_pos);"                  \
    "CREATE INDEX chunks_by_thread ON chunks(thread_rowid);"                                       \
    "PRAGMA user_version = 4;"

/** Rows one INSERT of a commit writes at once (chunks, tails): SQLite's cost of a statement
 * (its cursors, its program's set-up) is paid once for them, not per row. */
#define AB_STORE_ROWS_PER_INSERT 32
/** Integer columns of a chunk row as Q_CHUNK_INSERT binds them (its data is an eighth). */
#define AB_STORE_CHUNK_INTS 13

/* The columns of a chunk's row as Q_READ_ALL, Q_THREAD_SEG_DATA and Q_CHUNK_DATA give it
 * (store_rw.c CHUNK_COLS; store_read.c decodes it); the last only in the two last. */
enum {
    AB__CK_BATCH_FIRST,
    AB__CK_DATA,
    AB__CK_THREAD,
    AB__CK_RUN,
    AB__CK_N,         /* the records data holds, as its row says */
    AB__CK_ROWID,     /* the chunk's rowid */
    AB__CK_RUN_ROWID, /* its run's rowid, NULL when the run's row is gone */
    AB__CK_FIRST_SEQ, /* its first record's seq, its last's, its last's position */
    AB__CK_LAST_SEQ,
    AB__CK_LAST_POS,
    AB__CK_SAME_THREAD
};

/* Prepared statements, kept for the life of the handle. */
enum {
    Q_BEGIN,
    Q_COMMIT,
    Q_ROLLBACK,
    Q_MAX_POS,
    Q_DATA_VERSION,
    Q_THREAD_PUT,
    Q_RUN_GET,
    Q_RUN_LAST,
    Q_RUN_NEW,
    Q_CHUNK_INSERT,
    Q_CHUNK_INSERT_N, /* AB_STORE_ROWS_PER_INSERT chunks at once (built at prepare) */
    /* four upserts of tails (built at prepare): Q_TAIL_PUT + AB_TAIL_Q(thread, many), into
     * run_tails or thread_tails, one row or AB_STORE_ROWS_PER_INSERT */
    Q_TAIL_PUT,
    Q_TAIL_PUT_LAST_ = Q_TAIL_PUT + 3,
    Q_THREAD_GET,
    Q_RUN_UPDATE,
    Q_CLAIM,
    Q_READ_ALL,
    Q_RUN_ROWID,        /* store_walk.c: a run's rowid */
    Q_THREAD_ROWID,     /* store_walk.c: a thread's rowid */
    Q_RUN_ANCHOR,       /* store_walk.c: a run's first anchor above a seq */
    Q_THREAD_ANCHOR,    /* store_walk.c: a thread's first anchor above a rowid */
    Q_RUN_TAIL,         /* store_walk.c: a run's newest chunk */
    Q_THREAD_TAIL,      /* store_walk.c: a thread's newest chunk */
    Q_CHUNK_LINK,       /* store_walk.c: a chunk's owners, links and distances */
    Q_RUN_ANCHOR_BELOW, /* store_walk.c: a run's last anchor at or below a seq */
    Q_RUN_RANGE,        /* store_walk.c: a run's chunks between two rowids, by scan */
    Q_THREAD_RANGE,     /* store_walk.c: a thread's chunks between two rowids, by scan */
    Q_THREAD_SEG,       /* store_walk.c: a dense segment of a thread, by scan */
    Q_THREAD_SEG_DATA,  /* store_read.c: that segment's records, by the same scan */
    Q_CHUNK_DATA,       /* store_read.c: a chunk's records, with its thread and run ids */
    Q_HEAD,
    Q_RUNS_OF_THREAD,
    Q_THREADS_LIST,   /* store_threads.c */
    Q_THREAD_FIGURES, /* store_threads.c */
    /* store_tails.c: the logs of recent tails; each Q_RUN_ one is followed by its Q_THREAD_ */
    Q_TAILS_RECENT, /* the tails in each log, and the generations */
    Q_TAILS_GEN_PUT,
    Q_RUN_TAILS_LOG, /* a block appended */
    Q_THREAD_TAILS_LOG,
    Q_RUN_TAILS_READ, /* every block, for the merge */
    Q_THREAD_TAILS_READ,
    Q_RUN_TAILS_CLEAR,
    Q_THREAD_TAILS_CLEAR,
    Q_TAILS_GENS_CLEAR,
    Q_COUNT_
};

/* The offset from Q_TAIL_PUT of the upsert of tails into run_tails (thread_tails when
 * @p thread), AB_STORE_ROWS_PER_INSERT rows when @p many. */
#define AB_TAIL_Q(thread, many) (2 * (thread) + (many))

/* Prepared statements of the run requests (store_req.c). */
enum {
    RQ_BY_ID,
    RQ_BY_KEY,
    RQ_BY_RUN,
    RQ_INSERT,
    RQ_MOVE,
    RQ_LIST_STATE,
    RQ_LIST_AGENT,
    RQ_LIST_THREAD,
    RQ_AHEAD,
    RQ_COUNT_
};

/* A run known to the writer, with what the open batch staged for it. */
typedef struct run_ent {
    char *thread; /* NUL-terminated copy; run follows it in the same block */
    char *run;
    size_t thread_len, run_len;
    uint64_t hash;
    sqlite3_int64 rowid; /* 0 = no row yet (created at commit) */
    sqlite3_int64 thread_rowid;
    uint64_t last_seq;   /* committed */
    uint64_t epoch;      /* committed, as far as this handle knows (a claim may raise it) */
    sqlite3_int64 tail;  /* committed: the run's newest chunk (0: none) */
    uint32_t dist;       /* committed: that chunk's run_dist */
    struct thr_ent *thr; /* its thread's entry, once a commit looked it up (store_cache.c) */
    /* staging, valid while batch == the handle's batch number */
    uint64_t batch;
    uint32_t p_dist; /* the run_dist of the chunk this batch writes */
    uint64_t p_last_seq, p_first_seq, p_first_pos, p_last_pos, p_epoch;
    uint32_t p_n;
    size_t p_bytes;         /* the chunk's size: its records' headers and bytes */
    int32_t p_head, p_tail; /* its events in the batch (indexes into recs) */
    int p_status, p_outcome;
    int64_t p_started_us, p_ended_us;
    bool p_has_parent;
    uint32_t p_parent_off, p_parent_len; /* the parent run id, in the store's parents buffer */
} run_ent_t;

/* A thread known to the writer: the tail of its chain, committed and staged. */
typedef struct thr_ent {
    sqlite3_int64 rowid; /* threads.rowid */
    sqlite3_int64 tail;  /* committed: the thread's newest chunk (0: none) */
    uint32_t dist;       /* committed: that chunk's thread_dist */
    uint64_t batch;      /* p_ fields valid while == the handle's batch number */
    sqlite3_int64 p_tail;
    uint32_t p_dist;
} thr_ent_t;

/* One event of the open batch: where its bytes are (the caller's, borrowed
 * until commit or rollback), what its record header holds, the next of its run. */
typedef struct stage_rec {
    const uint8_t *bytes;
    uint32_t len;
    uint32_t pos_off; /* its position minus the batch's first */
    uint64_t seq;
    int32_t next;
} stage_rec_t;

/* The handle; its name is the SQLite plugin's handle type (store.h). */
struct ab_plugin_db {
    sqlite3 *db;
    char *path; /* <dir>/agentbus.db, for messages */
    bool readonly;
    bool in_txn;
    uint64_t next_pos;    /* valid while in_txn */
    uint64_t batch_first; /* first position of the open batch */
    uint64_t batch;       /* batch number, bumped by begin and rollback */
    int64_t commit_us;    /* commit time of the open batch */
    int64_t data_version; /* PRAGMA data_version after our last write */
    sqlite3_stmt *q[Q_COUNT_];
    sqlite3_stmt *rq[RQ_COUNT_]; /* store_req.c */
    /* writer run cache: open addressing, no deletion (cleared whole) */
    run_ent_t **slots;
    size_t nslots, nruns;
    /* writer thread cache (store_cache.c): open addressing by rowid, cleared with the runs */
    thr_ent_t **tslots;
    size_t ntslots, nthreads;
    /* the open batch */
    run_ent_t **touched;
    size_t ntouched, touched_cap;
    thr_ent_t **ttouched; /* its threads, in the order their first chunk was written */
    size_t nttouched, ttouched_cap;
    stage_rec_t *recs;
    size_t nrecs, recs_cap;
    ab_buf_t scratch; /* the pending chunks' records at commit; group buffer for reads */
    /* the walk a paged read stopped in, to go on with when the next read starts at its
     * cursor (store_read.c invariant 6): NULL until a read keeps one */
    struct ab__walk *resume;
    bool resume_ok;        /* *resume is valid */
    uint64_t resume_after; /* the cursor (a run's seq, a thread's position) it goes on from */
    /* thread segments a walk took by a scan of their range, and by their links (store_walk.c
     * invariant 6; read by the tests) */
    uint64_t segs_scanned, segs_walked;
    /* rows of the commit not yet inserted (store_commit.c) */
    struct pending_chunk {
        sqlite3_int64 v[AB_STORE_CHUNK_INTS];
        size_t off, len; /* its records, in scratch */
    } pend[AB_STORE_ROWS_PER_INSERT];
    size_t npend;
    sqlite3_int64 *tails; /* the commit's new tails: (rowid, chunk) pairs */
    size_t tails_cap;     /* in pairs' halves */
    /* writer handles: the recent tails, logged (store_tails.c) */
    size_t tails_recent_max;  /* merged into the main ones at this many tails in one log */
    int tails_direct;         /* AB_STORE_TAILS_DIRECT, or -1: never straight to the main ones */
    size_t tails_recent[2];   /* committed: the tails in the run's log, the thread's */
    size_t p_tails_recent[2]; /* what tails_recent becomes when the open commit commits */
    size_t tails_gens;        /* committed: the logs' generations */
    size_t p_tails_gens;
    struct ab__tails_view *tails_view; /* this connection's view of the logs (store_tails.c) */
    ab_buf_t parents; /* the open batch's parent run ids (run_ent_t.p_parent_off) */
    /* writer handles: WAL checkpoints on their own thread (store_ckpt.c) */
    ab_store_ckpt_t *ckpt;
    int wal_pages;
    int busy_ms;  /* the busy timeout set at open (ab__store_set_lock_wait restores it) */
    int busy_now; /* the busy timeout in force (store_ckpt.c sets its own for a moment) */
    /* the database file (store_file.c) */
    ab_store_file_t *file; /* this process's entry for it; NULL until registered */
    int lock_fd;           /* exclusive handles: the descriptor holding flock; else -1 */
    int pid_fd;            /* exclusive handles: <dir>/LOCK, locked, holding the pid; else -1 */
    bool exclusive;
    bool marked_checked; /* this handle told the file entry it ran quick_check */
    bool opening;        /* inside ab__store_open() */
};

/* A writer's recent tails: merged at @p max tails in a log (0: AB_STORE_TAILS_RECENT) or
 * AB_STORE_TAILS_GENS generations, written straight to the main tables over at most @p direct
 * ranges (0: AB_STORE_TAILS_DIRECT; < 0: never). */
void ab__store_tails_init(ab_store_t *st, int max, int direct);
/* Count what the tails logs hold now (store_tails.c invariant 5): at a begin that finds
 * another connection wrote, the first one included. */
ab_status_t ab__store_tails_count(ab_store_t *st, ab_error_t *err);
/* Write the open commit's tails, and merge the logs when they reached their bound
 * (store_tails.c); inside the commit's transaction, before COMMIT. */
ab_status_t ab__store_tails_write(ab_store_t *st, ab_error_t *err);
/* After COMMIT: the commit's counts of the logs become the committed ones. */
void ab__store_tails_committed(ab_store_t *st);
/* A connection's view of the tails logs (store_tails.c invariant 7). */
typedef struct ab__tails_view ab__tails_view_t;
/* Register ab_logged_tail(log, id, max_gen) on @p db with a view of its own, freed when @p db
 * closes: what every statement reading a tail calls (AB__TAIL_OF). AB_OK (*out the view, when
 * @p out is not NULL) or AB_NOMEM. */
ab_status_t ab__store_tails_register(sqlite3 *db, ab__tails_view_t **out);
/* Make @p v (NULL: nothing) read the logs anew at its next use: after a commit of its
 * connection failed, or the logs were changed by hand (the fuzz target). */
void ab__store_tails_forget(ab__tails_view_t *v);

/* Start the checkpointer of a writer handle (falls back to inline checkpoints). */
void ab__store_ckpt_start(ab_store_t *st);
/* Stop it and close its connection (before st->db closes). */
void ab__store_ckpt_stop(ab_store_t *st);

/** The writer's checkpoint at the WAL's bound waits at most this long (its lock wait
 * then, in ms) for readers to leave the WAL, and a read at most this long at the gate. */
#define AB_STORE_GATE_MAX_MS 100

/** A checkpoint this long or longer counts as slow (the broker warns of it). */
#define AB_STORE_CKPT_SLOW_US 100000

/** The checkpoints' figures into @p out (nothing without a checkpointer). */
void ab__store_ckpt_figures(ab_store_t *st, ab_plugin_stats_t *out);

/* Prepare the file for SQLite (store_file.c): a writer creates the directory,
 * builds a new store where no database exists, takes the exclusive lock
 * (opts->exclusive) and refuses an empty file; every handle registers the
 * file. Undone by ab__store_file_close(), also after a failure. */
ab_status_t ab__store_file_open(ab_store_t *st, const char *dir, const ab_store_opts_t *o,
                                ab_error_t *err);
/* Release the file (after the handle's SQLite connections closed): the lock,
 * the pid file, the registration; parked descriptors close with the last
 * handle of the file. */
void ab__store_file_close(ab_store_t *st);
/* Whether an exclusive writer of this process that ran quick_check at its
 * open has the handle's file open (a reader then need not check it again). */
bool ab__store_file_checked(const ab_store_t *st);
/* Record that this exclusive writer ran quick_check at its open. */
void ab__store_file_mark_checked(ab_store_t *st);

/* The readers' gate of the handle's file (store_file.c invariant 5): the writer closes
 * it around its checkpoint at the WAL's bound (store_ckpt.c invariant 1); a read that
 * begins its own transaction passes it first, waiting at most AB_STORE_GATE_MAX_MS. */
void ab__store_gate_close(ab_store_t *st);
void ab__store_gate_open(ab_store_t *st);
void ab__store_gate_pass(const ab_store_t *st);

/* Build a new, empty store of the current schema in the existing empty file
 * @p path (store.c): page size, WAL mode, migrations; closes it again. */
ab_status_t ab__store_build(ab_store_t *st, const char *path, ab_durability_t d, ab_error_t *err);
/* The refusal of a database file a writer cannot write (@p why: the cause). */
ab_status_t ab__store_not_writable(ab_store_t *st, const char *why, ab_error_t *err);

/* Map an SQLite result code to a status and record it with the db message. */
ab_status_t ab__store_sqlerr(ab_store_t *st, int rc, const char *what, ab_error_t *err);

/* Prepare every statement of Q_*; called by ab__store_open(). */
ab_status_t ab__store_prepare(ab_store_t *st, ab_error_t *err);

/* Prepare every statement of RQ_* (store_req.c); called by ab__store_open(). */
ab_status_t ab__store_req_prepare(ab_store_t *st, ab_error_t *err);
/* Finalise them (ab__store_close()). */
void ab__store_req_finalize(ab_store_t *st);

/* Step statement @p which (no row wanted) and reset it; @p what names it in errors. */
ab_status_t ab__store_run_q(ab_store_t *st, int which, const char *what, ab_error_t *err);
/* A read's transaction: its own (*own), after the readers' gate (store_file.c invariant 5),
 * when the handle has none open; else the caller's. ab__store_read_end() ends its own. */
ab_status_t ab__store_read_begin(ab_store_t *st, bool *own, const char *what, ab_error_t *err);
void ab__store_read_end(ab_store_t *st, bool own);
/* Step a one-row statement whose column 0 is an integer into *out; reset it. */
ab_status_t ab__store_int_q(ab_store_t *st, int which, const char *what, sqlite3_int64 *out,
                            ab_error_t *err);
/* A writer handle, inside a transaction (@p want_txn) or outside one; else the error. */
ab_status_t ab__store_check_writer(ab_store_t *st, bool want_txn, ab_error_t *err);
/* The runs table's status and outcome texts by ab_run_status_t / ab_agui_outcome_t. */
extern const char *const ab__store_status_text[4];
extern const char *const ab__store_outcome_text[4];

/* Reset a statement and clear its bindings. */
void ab__store_done(sqlite3_stmt *q);

/* Validate an id (1..AB_ID_MAX_BYTES bytes). */
ab_status_t ab__store_check_id(ab_str_t id, const char *field, ab_error_t *err);

/* Clamp a u64 to SQLite's signed range. */
sqlite3_int64 ab__store_i64(uint64_t v);

/* The run cache's hash of a run's key. */
uint64_t ab__store_cache_hash(ab_str_t thread, ab_str_t run);

/* Find (or load from the runs table, or create unsaved) the cache entry of a
 * run; @p hash is ab__store_cache_hash(thread, run). *out is owned by the cache. */
ab_status_t ab__store_cache_get(ab_store_t *st, ab_str_t thread, ab_str_t run, uint64_t hash,
                                run_ent_t **out, ab_error_t *err);

/* How many events ahead of a batch's appends ab__store_cache_ahead() asks for slots. */
#define AB__STORE_AHEAD 16u

/* Called at step @p i (0, 1, ... in order) of a loop appending @p evs, with a ring of
 * AB__STORE_AHEAD hashes kept between steps: prefetches what the cache lookups of later
 * events will read (store_cache.c invariant 5) and returns event i's
 * ab__store_cache_hash(). */
uint64_t ab__store_cache_ahead(const ab_store_t *st, const ab_append_event_t *evs, size_t n,
                               size_t i, uint64_t *ring);

/* Find (or load from thread_tails) the cache entry of thread @p rowid. *out is owned by
 * the cache and lives until it is cleared. */
ab_status_t ab__store_thread_get(ab_store_t *st, sqlite3_int64 rowid, thr_ent_t **out,
                                 ab_error_t *err);

/** A thread's segment whose rowids span at most this many positions is found by a scan of
 * that range of the table (one step a row) instead of a lookup of every chunk's links
 * (store_walk.c invariant 6): the range holds at most this many rows, so the scan reads at
 * most 8 rows per chunk of a full segment. */
#define AB_STORE_SCAN_SPAN (8 * AB_STORE_ANCHOR_EVERY)

/* The distance of the chunk after one at distance @p d: an anchor (0) every
 * AB_STORE_ANCHOR_EVERY chunks. */
static inline uint32_t ab__store_next_dist(uint32_t d)
{
    return d + 1 >= AB_STORE_ANCHOR_EVERY ? 0 : d + 1;
}

/* A walk along one chain (store_walk.c): a run's chunks with last_seq above a seq, or a
 * thread's with rowid above a rowid, oldest first, one segment between two anchors at a
 * time. Inside one read transaction. */
typedef struct ab__walk {
    ab_store_t *st;
    bool thread;         /* the thread chain (else the run chain) */
    bool done;           /* the segment in seg is the chain's last */
    bool scanned;        /* the segment in seg was found by a scan of its range (invariant 6) */
    bool anchored;       /* the bound is an anchor's key (not the read's cursor) */
    sqlite3_int64 owner; /* the run's or thread's rowid */
    sqlite3_int64 lower; /* the bound: a seq (run) or a rowid (thread) */
    sqlite3_int64 seg[2 * AB_STORE_ANCHOR_EVERY]; /* twice: room for a recovered segment */
    size_t n, i;
    unsigned fills; /* segments filled so far: seg[] indexes of two reads compare within one */
} ab__walk_t;

void ab__walk_init(ab__walk_t *w, ab_store_t *st, bool thread, sqlite3_int64 owner,
                   sqlite3_int64 lower);
/* The next chunk's rowid into *chunk, 0 after the last; AB_CORRUPT on a broken chain. */
ab_status_t ab__walk_next(ab__walk_t *w, sqlite3_int64 *chunk, ab_error_t *err);

/* One integer of a one-row query (a pragma, a count) into *out; errors name @p what
 * (store_stats.c). */
ab_status_t ab__store_one_int(ab_store_t *st, const char *sql, const char *what, int64_t *out,
                              ab_error_t *err);

/* Drop every cache entry (after a failed commit or another writer's commit). */
void ab__store_cache_clear(ab_store_t *st);

/* Free the cache and the batch buffers (ab__store_close()). */
void ab__store_cache_free(ab_store_t *st);

/* Little-endian helpers for chunk records. */
void ab__store_put_u32(uint8_t *p, uint32_t v);
void ab__store_put_u64(uint8_t *p, uint64_t v);
uint32_t ab__store_get_u32(const uint8_t *p);
uint64_t ab__store_get_u64(const uint8_t *p);

#endif

/*
 * store.c - opening, checking and migrating the SQLite event store and the
 * error mapping (see agentbus/store.h and docs/STORE.md). The file around
 * SQLite (creation, lock, empty-file check) is store_file.c's.
 *
 * Invariants:
 *  1. Nothing in the database file changes before it has passed the checks:
 *     user_version and quick_check are read before journal_mode=WAL (which
 *     rewrites the header) and before any migration.
 *  2. Migrations run forward only, all steps in one IMMEDIATE transaction,
 *     ending with PRAGMA user_version = AB_STORE_SCHEMA_VERSION; a crash in
 *     the middle leaves the old version intact.
 *  3. A readonly handle never writes: SQLITE_OPEN_READONLY, no migrations.
 *  4. Every statement the handle runs after open is prepared once at open
 *     and finalised in ab__store_close().
 *  5. page_size is set only on a file without a schema (version 0), before
 *     WAL: it cannot change later in WAL mode.
 *  6. SQLite never creates the database file (no SQLITE_OPEN_CREATE): a
 *     writer opens only a file that store_file.c found or built, and a
 *     writer that SQLite could open only for reading is refused.
 *  7. One quick_check per owner: a readonly handle skips the check while an
 *     exclusive writer of this process that checked the file at its own
 *     open still has it open (that writer holds the lock, so nobody else
 *     wrote the file since); every other open checks.
 */
#include "store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Tuning (measured with bench/tools/store_bench.c, see docs/STORE.md). */
#define STORE_PAGE_SIZE "8192" /* = AB_STORE_PAGE_BYTES */
/* temp_store: the statement journal of a commit's statements of many rows (store_commit.c)
 * is kept in memory, a few pages a statement, instead of a temporary file */
#define WRITER_PRAGMAS "PRAGMA cache_size=-8192; PRAGMA temp_store=MEMORY;"
#define READER_PRAGMAS "PRAGMA cache_size=-16384;"

/* Schema 5's tails tables, made by both forms of 4 -> 5. */
#define TAILS_TABLES                                                                               \
    "CREATE TABLE run_tails(rowid INTEGER PRIMARY KEY, chunk INTEGER NOT NULL);"                   \
    "CREATE TABLE thread_tails(rowid INTEGER PRIMARY KEY, chunk INTEGER NOT NULL);"

/* Schema 6's recent tails merged into the main tables (a recent row wins), then the logs. */
#define MIGRATE_6_7                                                                                \
    AB__TAILS_MERGE_V6_SQL("run_tails")                                                            \
    ";" AB__TAILS_MERGE_V6_SQL("thread_tails") ";"                                                 \
                                               "DROP TABLE run_tails_recent; DROP TABLE "          \
                                               "thread_tails_recent;" AB__TAILS_LOG_TABLES

/* Migration steps: steps[i] takes the schema from version i to i + 1. */
static const char *const MIGRATIONS[AB_STORE_SCHEMA_VERSION] = {
    /* 0 -> 1: the initial schema */
    "CREATE TABLE threads(rowid INTEGER PRIMARY KEY, thread TEXT NOT NULL UNIQUE);"
    "CREATE TABLE runs("
    " rowid INTEGER PRIMARY KEY,"
    " thread_rowid INTEGER NOT NULL REFERENCES threads(rowid),"
    " thread TEXT NOT NULL, run TEXT NOT NULL,"
    " epoch INTEGER NOT NULL DEFAULT 0,"
    " status TEXT CHECK(status IN ('active','finished','errored')),"
    " outcome TEXT CHECK(outcome IN ('success','interrupt','cancelled')),"
    " parent_run TEXT, started_us INTEGER NOT NULL, ended_us INTEGER,"
    " UNIQUE(thread, run));"
    "CREATE TABLE chunks("
    " rowid INTEGER PRIMARY KEY," /* = the position of the chunk's first event */
    " run_rowid INTEGER NOT NULL, thread_rowid INTEGER NOT NULL,"
    " first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, last_pos INTEGER NOT NULL,"
    " batch_first INTEGER NOT NULL, batch_last INTEGER NOT NULL,"
    " n INTEGER NOT NULL, data BLOB NOT NULL);"
    "CREATE UNIQUE INDEX chunks_by_run ON chunks(run_rowid, last_seq, last_pos);"
    "CREATE INDEX chunks_by_thread ON chunks(thread_rowid);"
    "CREATE TABLE snapshots(thread TEXT PRIMARY KEY, pos INTEGER NOT NULL, doc BLOB NOT NULL);",
    /* 1 -> 2: durable run requests (store_req.c; docs/STORE.md "Run requests") */
    "CREATE TABLE requests("
    " id INTEGER PRIMARY KEY," /* queue order; rows are never deleted, so never reused */
    " key TEXT NOT NULL UNIQUE,"
    " agent TEXT NOT NULL, thread TEXT NOT NULL, run TEXT NOT NULL,"
    " run_named INTEGER NOT NULL,"
    " state TEXT NOT NULL"
    "  CHECK(state IN ('queued','assigned','started','cancelled','ended')),"
    " worker TEXT NOT NULL DEFAULT '', epoch INTEGER NOT NULL DEFAULT 0,"
    " attempts INTEGER NOT NULL DEFAULT 0,"
    " created_us INTEGER NOT NULL, updated_us INTEGER NOT NULL,"
    " input BLOB NOT NULL,"
    " UNIQUE(thread, run));"
    "CREATE INDEX requests_queue ON requests(agent, state, id);"
    "CREATE INDEX requests_by_state ON requests(state, id);"
    "CREATE INDEX requests_open ON requests(thread, id)"
    " WHERE state IN ('queued','assigned','started');",
    /* 2 -> 3: the active runs, counted without a scan (store_stats.c) */
    "CREATE INDEX runs_active ON runs(status) WHERE status = 'active';",
    /* 3 -> 4: snapshots stored in parts (store_snap.c; docs/STORE.md "Snapshots") */
    "ALTER TABLE snapshots ADD COLUMN parts INTEGER NOT NULL DEFAULT 0;"
    "CREATE TABLE snapshot_parts("
    " rowid INTEGER PRIMARY KEY, thread TEXT NOT NULL, pos INTEGER NOT NULL,"
    " idx INTEGER NOT NULL, data BLOB NOT NULL, UNIQUE(thread, pos, idx));",
    /* 4 -> 5: chains instead of an index entry per chunk (docs/STORE.md "Chains and
     * anchors"). Every chunk stored before is an anchor of both its chains (distance 0),
     * so the partial indexes hold exactly what the full ones held; each run and thread
     * with chunks gets its newest chunk in its tails table, found by the old indexes
     * before they go. */
    "ALTER TABLE chunks ADD COLUMN prev_run INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE chunks ADD COLUMN run_dist INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE chunks ADD COLUMN prev_thread INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE chunks ADD COLUMN thread_dist INTEGER NOT NULL DEFAULT 0;" TAILS_TABLES
    "INSERT INTO run_tails SELECT rowid, chunk FROM (SELECT r.rowid AS rowid, (SELECT c.rowid"
    " FROM chunks c WHERE c.run_rowid = r.rowid ORDER BY c.last_seq DESC LIMIT 1) AS chunk"
    " FROM runs r) WHERE chunk IS NOT NULL;"
    "INSERT INTO thread_tails SELECT rowid, chunk FROM (SELECT t.rowid AS rowid, (SELECT"
    " max(c.rowid) FROM chunks c WHERE c.thread_rowid = t.rowid) AS chunk FROM threads t)"
    " WHERE chunk IS NOT NULL;"
    "DROP INDEX chunks_by_run; DROP INDEX chunks_by_thread;" AB__ANCHOR_INDEXES,
    /* 5 -> 6: tails in two levels (docs/STORE.md "Tails in two levels"): the recent tables
     * start empty, so every tail is where schema 5 kept it */
    "CREATE TABLE run_tails_recent(rowid INTEGER PRIMARY KEY, chunk INTEGER NOT NULL);"
    "CREATE TABLE thread_tails_recent(rowid INTEGER PRIMARY KEY, chunk INTEGER NOT NULL);",
    /* 6 -> 7: the recent tails as a log (docs/STORE.md "Tails in two levels"): schema 6's
     * recent tables merged into the main ones, so the logs start empty */
    MIGRATE_6_7,
};

/* Migration 4 -> 5 when the chunks table is empty (a new store, or one that never stored an
 * event): the table is made anew with its links before its data. SQLite keeps a row's
 * columns in their declared order, so the links MIGRATIONS[4] adds sit behind the data, and
 * a walk then reads every overflow page of a big chunk to find its link (docs/STORE.md
 * "Chains and anchors"). A store with chunks keeps its rows: copying them would take about
 * 6.5 s and twice the database's size in WAL per million events at the first start; `agentbus
 * relayout` does it offline (store_relayout.c). */
#define MIGRATE_4_5_EMPTY                                                                          \
    "DROP TABLE chunks;" AB__CHUNKS_TABLE("chunks") TAILS_TABLES AB__ANCHOR_INDEXES

/* The SQL that takes the schema from @p v to v + 1 (MIGRATIONS, or MIGRATE_4_5_EMPTY). */
static ab_status_t migration_step(ab_store_t *st, int v, const char **sql, ab_error_t *err);

static ab_status_t rc_status(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE: return AB_OK;
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL:
    case SQLITE_READONLY: return AB_UNAVAILABLE;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return AB_CORRUPT;
    case SQLITE_CONSTRAINT: return AB_CONFLICT;
    case SQLITE_NOMEM: return AB_NOMEM;
    default: return AB_INTERNAL;
    }
}

ab_status_t ab__store_sqlerr(ab_store_t *st, int rc, const char *what, ab_error_t *err)
{
    ab_status_t s = rc_status(rc);
    if (s == AB_OK)
        s = AB_INTERNAL;
    const char *msg = st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc);
    if (s == AB_CORRUPT)
        ab_error_set(err, s, "store", "database %s is damaged: %s (%s)", st->path, msg, what);
    else
        ab_error_set(err, s, "store", "%s: %s (%s)", what, msg, st->path);
    ab_error_detail_int(err, "sqlite_rc", rc);
    return s;
}

static ab_status_t exec_sql(ab_store_t *st, const char *sql, const char *what, ab_error_t *err)
{
    int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? AB_OK : ab__store_sqlerr(st, rc, what, err);
}

/* Run a one-row, one-column pragma; copies the text (may be truncated). */
static ab_status_t pragma_text(ab_store_t *st, const char *sql, char *out, size_t size,
                               ab_error_t *err)
{
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &q, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) {
        ab_status_t s = ab__store_sqlerr(st, rc, sql, err);
        sqlite3_finalize(q);
        return s;
    }
    const unsigned char *t = sqlite3_column_text(q, 0);
    snprintf(out, size, "%s", t ? (const char *)t : "");
    sqlite3_finalize(q);
    return AB_OK;
}

static ab_status_t check_file(ab_store_t *st, bool quick_check, int *version, ab_error_t *err)
{
    char buf[AB_ERROR_MESSAGE_MAX];
    ab_status_t s = pragma_text(st, "PRAGMA user_version", buf, sizeof buf, err);
    if (s != AB_OK)
        return s;
    *version = atoi(buf);
    if (!quick_check)
        return AB_OK;
    s = pragma_text(st, "PRAGMA quick_check", buf, sizeof buf, err);
    if (s != AB_OK)
        return s;
    if (strcmp(buf, "ok") == 0)
        return AB_OK;
    /* one line for the log: SQLite's report starts with a banner and has a line per fault */
    const char *banner = "*** in database main ***\n", *report = buf;
    if (strncmp(report, banner, strlen(banner)) == 0)
        report += strlen(banner);
    for (char *c = buf; *c; c++)
        *c = *c == '\n' ? ' ' : *c;
    return ab_error_set(err, AB_CORRUPT, "store", "database %s is damaged: quick_check: %.80s",
                        st->path, report);
}

static ab_status_t migration_step(ab_store_t *st, int v, const char **sql, ab_error_t *err)
{
    char buf[8];
    *sql = MIGRATIONS[v];
    if (v != 4)
        return AB_OK;
    ab_status_t s = pragma_text(st, "SELECT EXISTS(SELECT 1 FROM chunks)", buf, sizeof buf, err);
    if (s == AB_OK && strcmp(buf, "0") == 0)
        *sql = MIGRATE_4_5_EMPTY;
    return s;
}

static ab_status_t migrate(ab_store_t *st, ab_error_t *err)
{
    char buf[32];
    ab_status_t s = exec_sql(st, "BEGIN IMMEDIATE", "migrate", err);
    if (s != AB_OK)
        return s;
    /* Re-read inside the transaction: another opener may have migrated. */
    s = pragma_text(st, "PRAGMA user_version", buf, sizeof buf, err);
    if (s != AB_OK)
        goto rollback;
    for (int v = atoi(buf); v < AB_STORE_SCHEMA_VERSION; v++) {
        const char *sql = NULL;
        s = migration_step(st, v, &sql, err);
        if (s == AB_OK)
            s = exec_sql(st, sql, "migrate", err);
        if (s != AB_OK)
            goto rollback;
    }
    snprintf(buf, sizeof buf, "PRAGMA user_version = %d", AB_STORE_SCHEMA_VERSION);
    s = exec_sql(st, buf, "migrate", err);
    if (s != AB_OK)
        goto rollback;
    s = exec_sql(st, "COMMIT", "migrate", err);
    if (s != AB_OK)
        goto rollback;
    return AB_OK;
rollback:
    sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    return s;
}

static ab_status_t check_version(ab_store_t *st, int version, ab_error_t *err)
{
    if (version > AB_STORE_SCHEMA_VERSION) {
        ab_error_set(err, AB_UNSUPPORTED, "store",
                     "database schema version %d is newer than this build (%d): %s", version,
                     AB_STORE_SCHEMA_VERSION, st->path);
        ab_error_detail_int(err, "theirs", version);
        ab_error_detail_int(err, "ours", AB_STORE_SCHEMA_VERSION);
        return AB_UNSUPPORTED;
    }
    if (st->readonly && version == 0)
        return ab_error_set(err, AB_NOT_FOUND, "store", "database %s has no agentbus schema",
                            st->path);
    if (st->readonly && version < AB_STORE_SCHEMA_VERSION)
        return ab_error_set(err, AB_UNSUPPORTED, "store",
                            "database schema version %d is older than this build (%d): %s; "
                            "open it read-write once to migrate",
                            version, AB_STORE_SCHEMA_VERSION, st->path);
    return AB_OK;
}

static ab_status_t configure_writer(ab_store_t *st, ab_durability_t d, int version, ab_error_t *err)
{
    char mode[16];
    ab_status_t s = AB_OK;
    if (version == 0)
        s = exec_sql(st, "PRAGMA page_size=" STORE_PAGE_SIZE, "page_size", err);
    if (s == AB_OK)
        s = exec_sql(st, WRITER_PRAGMAS, "pragmas", err);
    char limit[64]; /* the WAL file is cut back to this when the WAL restarts (store_ckpt.c) */
    snprintf(limit, sizeof limit, "PRAGMA journal_size_limit=%lld",
             (long long)AB_STORE_WAL_LIMIT_FACTOR * st->wal_pages * AB_STORE_PAGE_BYTES);
    if (s == AB_OK)
        s = exec_sql(st, limit, "journal_size_limit", err);
    if (s == AB_OK)
        s = pragma_text(st, "PRAGMA journal_mode=WAL", mode, sizeof mode, err);
    if (s != AB_OK)
        return s;
    if (strcmp(mode, "wal") != 0)
        return ab_error_set(err, AB_UNAVAILABLE, "store", "cannot switch %s to WAL (mode %s)",
                            st->path, mode);
    const char *sync =
        d == AB_DURABILITY_PROCESS ? "PRAGMA synchronous=NORMAL" : "PRAGMA synchronous=FULL";
    s = exec_sql(st, sync, "synchronous", err);
    if (s != AB_OK)
        return s;
    /* An up-to-date database needs no write lock: a second handle can open
     * while the first is inside a transaction. */
    return version < AB_STORE_SCHEMA_VERSION ? migrate(st, err) : AB_OK;
}

ab_status_t ab__store_not_writable(ab_store_t *st, const char *why, ab_error_t *err)
{
    return ab_error_set(err, AB_UNAVAILABLE, "store",
                        "database %s is not writable (%s): a writer needs it read-write; check "
                        "its mode, owner and attributes (lsattr) and the mount",
                        st->path, why);
}

ab_status_t ab__store_build(ab_store_t *st, const char *path, ab_durability_t d, ab_error_t *err)
{
    int rc = sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    ab_status_t s = rc == SQLITE_OK ? AB_OK : ab__store_sqlerr(st, rc, "create", err);
    if (s == AB_OK) {
        sqlite3_extended_result_codes(st->db, 1);
        s = configure_writer(st, d, 0, err);
    }
    sqlite3_close(st->db); /* the last connection: checkpoints and removes its WAL */
    st->db = NULL;
    return s;
}

static ab_status_t open_db(ab_store_t *st, const char *dir, const ab_store_opts_t *o,
                           ab_error_t *err)
{
    size_t n = strlen(dir) + sizeof "/" AB_STORE_DB_NAME;
    st->path = malloc(n);
    if (!st->path)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory");
    snprintf(st->path, n, "%s/%s", dir, AB_STORE_DB_NAME);
    ab_status_t s = ab__store_file_open(st, dir, o, err);
    if (s != AB_OK)
        return s;
    int flags = SQLITE_OPEN_NOMUTEX | (o->readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE);
    int rc = sqlite3_open_v2(st->path, &st->db, flags, NULL);
    if (rc != SQLITE_OK)
        return ab__store_sqlerr(st, rc, "open", err);
    /* SQLite opens a file it cannot write read-only without a word (invariant 6) */
    if (!o->readonly && sqlite3_db_readonly(st->db, "main") == 1)
        return ab__store_not_writable(st, "SQLite opened it read-only", err);
    sqlite3_extended_result_codes(st->db, 1);
    sqlite3_busy_timeout(st->db, o->busy_timeout_ms);
    st->busy_ms = st->busy_now = o->busy_timeout_ms;
    return AB_OK;
}

void ab__store_set_lock_wait(ab_store_t *st, int ms)
{
    if (st != NULL && st->db != NULL) {
        st->busy_now = ms < 0 ? st->busy_ms : ms;
        sqlite3_busy_timeout(st->db, st->busy_now);
    }
}

ab_status_t ab__store_open(ab_store_t **out, const char *dir, const ab_store_opts_t *opts,
                           ab_error_t *err)
{
    static const ab_store_opts_t defaults = {0};
    const ab_store_opts_t *o = opts ? opts : &defaults;
    if (!out || !dir || !*dir)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "dir", "store: NULL handle or directory");
    ab_store_t *st = calloc(1, sizeof *st);
    if (!st)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory");
    st->readonly = o->readonly;
    st->exclusive = o->exclusive && !o->readonly;
    st->lock_fd = st->pid_fd = -1;
    st->wal_pages = o->wal_pages > 0 ? o->wal_pages : AB_STORE_WAL_PAGES;
    st->opening = true;
    int version = 0;
    ab_status_t s = open_db(st, dir, o, err);
    bool check = !o->skip_quick_check && !(o->readonly && ab__store_file_checked(st));
    if (s == AB_OK)
        s = check_file(st, check, &version, err);
    if (s == AB_OK)
        s = check_version(st, version, err);
    if (s == AB_OK && !o->readonly)
        s = configure_writer(st, o->durability, version, err);
    if (s == AB_OK && o->readonly)
        s = exec_sql(st, READER_PRAGMAS, "pragmas", err);
    if (s == AB_OK)
        s = ab__store_prepare(st, err);
    if (s == AB_OK)
        s = ab__store_req_prepare(st, err);
    if (s == AB_OK && !o->readonly) {
        ab__store_tails_init(st, o->tails_recent, o->tails_direct);
        ab__store_ckpt_start(st); /* checkpoints off this thread (store_ckpt.c) */
    }
    if (s != AB_OK) {
        ab__store_close(&st);
        return s;
    }
    if (check)
        ab__store_file_mark_checked(st); /* invariant 7 */
    st->opening = false;
    *out = st;
    return AB_OK;
}

void ab__store_close(ab_store_t **pst)
{
    if (!pst || !*pst)
        return;
    ab_store_t *st = *pst;
    if (st->in_txn)
        ab__store_rollback(st);
    for (int i = 0; i < Q_COUNT_; i++)
        sqlite3_finalize(st->q[i]);
    ab__store_req_finalize(st);
    ab__store_cache_free(st);
    ab__store_ckpt_stop(st);
    sqlite3_close(st->db);
    ab__store_file_close(st); /* after every connection of the handle (store_file.c) */
    free(st->path);
    free(st);
    *pst = NULL;
}

/*
 * store_snap.c - durable thread snapshots (docs/STORE.md "Snapshots"): one
 * row per thread in `snapshots` (thread, pos, doc, parts); a document stored
 * in parts has an empty doc there and its bytes in `snapshot_parts` rows
 * (thread, pos, idx 0 … parts - 1, data).
 *
 * Invariants:
 *  1. A stored snapshot's position only grows: a put at a position not
 *     greater than the stored one changes nothing.
 *  2. The document is stored as given (bytes); the store does not parse it.
 *     Whoever writes it guarantees it covers only committed events (the
 *     broker computes it from committed events, strictly after their commit).
 *  3. A document in parts becomes the stored one only in the transaction of
 *     its last part, after checking that every earlier part is there; until
 *     then a reader sees the previous document, whole.
 *  4. Every put deletes at most one part row of its thread that neither the
 *     stored snapshot nor the sequence being written uses (after updating the
 *     row), so no call frees more than one part's pages; an older document's
 *     parts go one per later put of the thread.
 */
#include "store_int.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static ab_status_t check_put(ab_store_t *st, ab_str_t thread, const uint8_t *doc, size_t len,
                             ab_error_t *err)
{
    if (!st || !doc || len == 0 || len > INT32_MAX)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "snapshot",
                            "store: NULL handle or empty snapshot document");
    if (st->readonly)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: readonly handle");
    return ab__store_check_id(thread, "thread", err);
}

/* Run @p sql with ?1 = thread, ?2 = pos, ?3 = an int, ?4 = a blob (those it names). */
static ab_status_t exec_q(ab_store_t *st, const char *sql, ab_str_t thread, uint64_t pos, int64_t n,
                          const uint8_t *blob, size_t len, int64_t *out, ab_error_t *err)
{
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &q, NULL);
    if (rc != SQLITE_OK)
        return ab__store_sqlerr(st, rc, "snapshot", err);
    for (int i = 1; i <= sqlite3_bind_parameter_count(q); i++) {
        if (i == 1)
            sqlite3_bind_text(q, 1, thread.ptr, (int)thread.len, SQLITE_STATIC);
        else if (i == 2)
            sqlite3_bind_int64(q, 2, ab__store_i64(pos));
        else if (i == 3)
            sqlite3_bind_int64(q, 3, n);
        else if (i == 4)
            sqlite3_bind_blob(q, 4, blob, (int)len, SQLITE_STATIC);
    }
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW && out)
        *out = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? AB_OK
                                                 : ab__store_sqlerr(st, rc, "snapshot", err);
}

/* The row of the snapshot itself: @p parts 0 = the document is @p doc. */
static ab_status_t put_row(ab_store_t *st, ab_str_t thread, uint64_t pos, const uint8_t *doc,
                           size_t len, int64_t parts, ab_error_t *err)
{
    static const char sql[] =
        "INSERT INTO snapshots(thread, pos, doc, parts) VALUES(?1, ?2, ?4, ?3) "
        "ON CONFLICT(thread) DO UPDATE SET pos = excluded.pos, doc = excluded.doc, "
        "parts = excluded.parts WHERE excluded.pos > snapshots.pos";
    return exec_q(st, sql, thread, pos, parts, doc, len, NULL, err);
}

/* Invariant 4: one part of @p thread that neither the stored snapshot nor the sequence at
 * @p keep_pos (0 = none) uses. */
static ab_status_t drop_stale_part(ab_store_t *st, ab_str_t thread, uint64_t keep_pos,
                                   ab_error_t *err)
{
    static const char sql[] =
        "DELETE FROM snapshot_parts WHERE rowid = (SELECT p.rowid FROM snapshot_parts p "
        "WHERE p.thread = ?1 AND p.pos <> ?2 AND p.pos <> coalesce((SELECT s.pos FROM "
        "snapshots s WHERE s.thread = ?1 AND s.parts > 0), -1) LIMIT 1)";
    return exec_q(st, sql, thread, keep_pos, 0, NULL, 0, NULL, err);
}

/*
 * A savepoint: its own transaction when none is open (*own; a write one at the first
 * write), or inside the caller's; a reader's statements in it see one snapshot of the
 * database.
 */
static ab_status_t begin_savepoint(ab_store_t *st, bool *own, ab_error_t *err)
{
    *own = sqlite3_get_autocommit(st->db) != 0;
    int rc = sqlite3_exec(st->db, "SAVEPOINT ab_snap", NULL, NULL, NULL);
    return rc == SQLITE_OK ? AB_OK : ab__store_sqlerr(st, rc, "snapshot", err);
}

/*
 * End the savepoint: kept when @p s is AB_OK, else undone. A transaction of our own that
 * failed, or cannot commit (disk full), is rolled back whole, so the handle never stays
 * inside it (on SQLITE_FULL SQLite may have rolled it back already).
 */
static ab_status_t end_savepoint(ab_store_t *st, bool own, ab_status_t s, ab_error_t *err)
{
    if (s == AB_OK) {
        int rc = sqlite3_exec(st->db, "RELEASE ab_snap", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            return AB_OK;
        s = ab__store_sqlerr(st, rc, "snapshot", err);
    }
    if (own) {
        if (!sqlite3_get_autocommit(st->db))
            (void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    } else if (sqlite3_exec(st->db, "ROLLBACK TO ab_snap", NULL, NULL, NULL) == SQLITE_OK) {
        (void)sqlite3_exec(st->db, "RELEASE ab_snap", NULL, NULL, NULL);
    }
    return s;
}

ab_status_t ab__store_snapshot_put(ab_store_t *st, ab_str_t thread, uint64_t pos,
                                   const uint8_t *doc, size_t len, ab_error_t *err)
{
    bool own = false;
    ab_status_t s = check_put(st, thread, doc, len, err);
    if (s == AB_OK)
        s = begin_savepoint(st, &own, err);
    if (s != AB_OK)
        return s;
    s = put_row(st, thread, pos, doc, len, 0, err);
    if (s == AB_OK)
        s = drop_stale_part(st, thread, 0, err);
    return end_savepoint(st, own, s, err);
}

/* @p last: are parts 0 … idx of (thread, pos) all stored? */
static ab_status_t check_parts(ab_store_t *st, ab_str_t thread, uint64_t pos, uint32_t idx,
                               ab_error_t *err)
{
    int64_t n = 0;
    ab_status_t s = exec_q(st,
                           "SELECT count(*) FROM snapshot_parts WHERE thread = ?1 AND pos = ?2 "
                           "AND idx <= ?3",
                           thread, pos, idx, NULL, 0, &n, err);
    if (s == AB_OK && n != (int64_t)idx + 1)
        s = ab_error_set(err, AB_INVALID_ARGUMENT, "snapshot",
                         "store: last part %u of the snapshot of %.*s at %llu, but only %lld "
                         "of its parts are stored",
                         idx, (int)thread.len, thread.ptr, (unsigned long long)pos, (long long)n);
    return s;
}

ab_status_t ab__store_snapshot_put_part(ab_store_t *st, ab_str_t thread, uint64_t pos, uint32_t idx,
                                        const uint8_t *part, size_t len, bool last, ab_error_t *err)
{
    bool own = false;
    ab_status_t s = check_put(st, thread, part, len, err);
    if (s == AB_OK && (pos == 0 || idx >= INT32_MAX))
        s = ab_error_set(err, AB_INVALID_ARGUMENT, "snapshot", "store: position 0 or part %u", idx);
    if (s == AB_OK)
        s = begin_savepoint(st, &own, err);
    if (s != AB_OK)
        return s;
    s = exec_q(st,
               "INSERT OR REPLACE INTO snapshot_parts(thread, pos, idx, data) "
               "VALUES(?1, ?2, ?3, ?4)",
               thread, pos, idx, part, len, NULL, err);
    if (s == AB_OK && last)
        s = check_parts(st, thread, pos, idx, err);
    if (s == AB_OK && last)
        s = put_row(st, thread, pos, (const uint8_t *)"", 0, (int64_t)idx + 1, err);
    if (s == AB_OK) /* after the row: on the last part the old document's parts are stale */
        s = drop_stale_part(st, thread, pos, err);
    return end_savepoint(st, own, s, err);
}

/* AB_CORRUPT: the stored snapshot of @p thread at @p pos is damaged, as @p fmt says. */
static ab_status_t snap_damaged(ab_store_t *st, ab_str_t thread, uint64_t pos, ab_error_t *err,
                                const char *fmt, ...) AB_PRINTF(5, 6);
static ab_status_t snap_damaged(ab_store_t *st, ab_str_t thread, uint64_t pos, ab_error_t *err,
                                const char *fmt, ...)
{
    char what[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ab_error_set(err, AB_CORRUPT, "snapshot",
                        "database %s is damaged: the snapshot of %.*s at %llu %s", st->path,
                        (int)thread.len, thread.ptr, (unsigned long long)pos, what);
}

/* Append part @p idx of (thread, pos), the row @p q is on, to @p doc: a part is never empty
 * (a put refuses an empty one), so an empty part is damage. */
static ab_status_t add_part(ab_store_t *st, sqlite3_stmt *q, ab_str_t thread, uint64_t pos,
                            int64_t idx, ab_buf_t *doc, ab_error_t *err)
{
    const void *data = sqlite3_column_blob(q, 1);
    size_t n = data ? (size_t)sqlite3_column_bytes(q, 1) : 0;
    if (n == 0)
        return snap_damaged(st, thread, pos, err, "has an empty part %lld", (long long)idx);
    if (ab_buf_append(doc, data, n) != AB_OK)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory");
    return AB_OK;
}

/* The @p parts parts of (thread, pos), in order, appended to @p doc. */
static ab_status_t read_parts(ab_store_t *st, ab_str_t thread, uint64_t pos, int64_t parts,
                              ab_buf_t *doc, ab_error_t *err)
{
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(st->db,
                                "SELECT idx, data FROM snapshot_parts WHERE thread = ?1 AND "
                                "pos = ?2 ORDER BY idx",
                                -1, &q, NULL);
    if (rc != SQLITE_OK)
        return ab__store_sqlerr(st, rc, "snapshot", err);
    sqlite3_bind_text(q, 1, thread.ptr, (int)thread.len, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, ab__store_i64(pos));
    ab_status_t s = AB_OK;
    int64_t next = 0;
    while (s == AB_OK && next < parts && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (sqlite3_column_int64(q, 0) != next) {
            rc = SQLITE_DONE; /* a part is missing */
            break;
        }
        s = add_part(st, q, thread, pos, next++, doc, err);
    }
    sqlite3_finalize(q);
    if (s == AB_OK && (rc != SQLITE_ROW && rc != SQLITE_DONE))
        s = ab__store_sqlerr(st, rc, "snapshot", err);
    if (s == AB_OK && next != parts)
        s = snap_damaged(st, thread, pos, err, "has %lld parts, part %lld is missing",
                         (long long)parts, (long long)next);
    return s;
}

/* The snapshots row's document of @p len bytes and its count of @p parts agree: a document
 * whole (parts 0, never empty: a put refuses an empty one) or in parts (an empty doc). */
static ab_status_t row_sound(ab_store_t *st, ab_str_t thread, uint64_t pos, size_t len,
                             int64_t parts, ab_error_t *err)
{
    if (parts < 0)
        return snap_damaged(st, thread, pos, err, "counts %lld parts", (long long)parts);
    if (parts == 0 && len == 0)
        return snap_damaged(st, thread, pos, err, "is empty");
    if (parts > 0 && len > 0)
        return snap_damaged(st, thread, pos, err, "has both a document and %lld parts",
                            (long long)parts);
    return AB_OK;
}

/* The snapshots row of @p thread: its first bytes into @p doc, its position and parts. */
static ab_status_t get_row(ab_store_t *st, ab_str_t thread, ab_buf_t *doc, uint64_t *pos,
                           int64_t *parts, ab_error_t *err)
{
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(st->db, "SELECT pos, doc, parts FROM snapshots WHERE thread = ?1",
                                -1, &q, NULL);
    if (rc != SQLITE_OK)
        return ab__store_sqlerr(st, rc, "snapshot", err);
    sqlite3_bind_text(q, 1, thread.ptr, (int)thread.len, SQLITE_STATIC);
    rc = sqlite3_step(q);
    ab_status_t s = AB_OK;
    if (rc == SQLITE_ROW) {
        const void *data = sqlite3_column_blob(q, 1);
        size_t n = (size_t)sqlite3_column_bytes(q, 1);
        *pos = (uint64_t)sqlite3_column_int64(q, 0);
        *parts = sqlite3_column_int64(q, 2);
        s = row_sound(st, thread, *pos, data ? n : 0, *parts, err);
        if (s == AB_OK && data && n > 0 && ab_buf_append(doc, data, n) != AB_OK)
            s = ab_error_set(err, AB_NOMEM, "store", "out of memory");
    } else if (rc == SQLITE_DONE) {
        s = ab_error_set(err, AB_NOT_FOUND, "thread", "thread %.*s has no stored snapshot",
                         (int)thread.len, thread.ptr);
    } else {
        s = ab__store_sqlerr(st, rc, "snapshot", err);
    }
    sqlite3_finalize(q);
    return s;
}

ab_status_t ab__store_snapshot_get(ab_store_t *st, ab_str_t thread, ab_buf_t *doc,
                                   uint64_t *pos_out, ab_error_t *err)
{
    if (!st || !doc)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle or out");
    bool own = false;
    ab_status_t s = ab__store_check_id(thread, "thread", err);
    if (s == AB_OK) /* the row and its parts from one snapshot of the database */
        s = begin_savepoint(st, &own, err);
    if (s != AB_OK)
        return s;
    ab_buf_reset(doc);
    uint64_t pos = 0;
    int64_t parts = 0;
    s = get_row(st, thread, doc, &pos, &parts, err);
    if (s == AB_OK && parts > 0)
        s = read_parts(st, thread, pos, parts, doc, err);
    if (s == AB_OK && pos_out)
        *pos_out = pos;
    return end_savepoint(st, own, s, err);
}

/*
 * store_snap.c - durable thread snapshots in the `snapshots` table
 * (docs/STORE.md): one row per thread, (thread, pos, doc).
 *
 * Invariants:
 *  1. A stored snapshot's position only grows: a put at a position not
 *     greater than the stored one changes nothing.
 *  2. The document is stored as given (bytes); the store does not parse it.
 *     Whoever writes it guarantees it covers only committed events (the
 *     broker computes it from committed events, strictly after their commit).
 */
#include "store_int.h"

#include <stdint.h>
#include <string.h>

ab_status_t ab__store_snapshot_put(ab_store_t *st, ab_str_t thread, uint64_t pos,
                                   const uint8_t *doc, size_t len, ab_error_t *err)
{
    if (!st || !doc || len == 0 || len > INT32_MAX)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "snapshot",
                            "store: NULL handle or empty snapshot document");
    if (st->readonly)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: readonly handle");
    ab_status_t s = ab__store_check_id(thread, "thread", err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(st->db,
                                "INSERT INTO snapshots(thread, pos, doc) VALUES(?1, ?2, ?3) "
                                "ON CONFLICT(thread) DO UPDATE SET pos = excluded.pos, "
                                "doc = excluded.doc WHERE excluded.pos > snapshots.pos",
                                -1, &q, NULL);
    if (rc != SQLITE_OK)
        return ab__store_sqlerr(st, rc, "snapshot", err);
    sqlite3_bind_text(q, 1, thread.ptr, (int)thread.len, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, ab__store_i64(pos));
    sqlite3_bind_blob(q, 3, doc, (int)len, SQLITE_STATIC);
    rc = sqlite3_step(q);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE)
        return ab__store_sqlerr(st, rc, "snapshot", err);
    return AB_OK;
}

ab_status_t ab__store_snapshot_get(ab_store_t *st, ab_str_t thread, ab_buf_t *doc,
                                   uint64_t *pos_out, ab_error_t *err)
{
    if (!st || !doc)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle or out");
    ab_status_t s = ab__store_check_id(thread, "thread", err);
    if (s != AB_OK)
        return s;
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(st->db, "SELECT pos, doc FROM snapshots WHERE thread = ?1", -1, &q,
                                NULL);
    if (rc != SQLITE_OK)
        return ab__store_sqlerr(st, rc, "snapshot", err);
    sqlite3_bind_text(q, 1, thread.ptr, (int)thread.len, SQLITE_STATIC);
    rc = sqlite3_step(q);
    ab_buf_reset(doc);
    if (rc == SQLITE_ROW) {
        const void *data = sqlite3_column_blob(q, 1);
        size_t n = (size_t)sqlite3_column_bytes(q, 1);
        if (pos_out)
            *pos_out = (uint64_t)sqlite3_column_int64(q, 0);
        if (n > 0 && ab_buf_append(doc, data, n) != AB_OK)
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

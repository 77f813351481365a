/*
 * store_relayout.c - `agentbus relayout`: a store migrated from schema 4 with
 * events keeps the link columns the migration added after each chunk's data
 * (store.c, 4 -> 5), so a walk reads a chunk's data pages to find its links.
 * This rewrites the chunks table in schema 5's column order, offline
 * (docs/STORE.md "Opening, checks and migrations").
 *
 * Invariants:
 *  1. All or nothing: the copy, the old table's drop, the rename and the
 *     anchor indexes are one IMMEDIATE transaction; an error, a crash or a
 *     kill before its COMMIT leaves the store as it was.
 *  2. Nothing is written when the links already come before the data, nor
 *     when the filesystem has less free space than twice the database file
 *     (the copy goes to the WAL, then into the file).
 *  3. Every chunk keeps its rowid and every column its value, so the tails,
 *     the anchors and every link still name the same chunks; the writer's
 *     caches (which hold rowids) stay valid.
 *  4. Progress is reported after every RELAYOUT_BATCH chunks copied, in
 *     position order.
 */
#include "store_int.h"

#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#define RELAYOUT_BATCH 4096

#define CHUNK_COLUMNS                                                                              \
    "rowid, run_rowid, thread_rowid, first_seq, last_seq, last_pos, batch_first, batch_last, n,"   \
    " prev_run, run_dist, prev_thread, thread_dist, data"

#define COPY_BATCH                                                                                 \
    "INSERT INTO chunks_relayout(" CHUNK_COLUMNS ") SELECT " CHUNK_COLUMNS " FROM chunks"          \
    " WHERE rowid > ?1 ORDER BY rowid LIMIT ?2"

#define SWAP_TABLES                                                                                \
    "DROP TABLE chunks; ALTER TABLE chunks_relayout RENAME TO chunks;" AB__ANCHOR_INDEXES

/* Invariant 2: the filesystem of the database must have twice its size free. */
static ab_status_t room_for_copy(ab_store_t *st, ab_error_t *err)
{
    struct stat sb;
    struct statvfs vb;
    char *dir = strdup(st->path);
    if (dir == NULL)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory");
    int rc = stat(st->path, &sb) != 0 || statvfs(dirname(dir), &vb) != 0 ? errno : 0;
    free(dir);
    if (rc != 0)
        return ab_error_set(err, AB_UNAVAILABLE, "store", "relayout: cannot measure %s: %s",
                            st->path, strerror(rc));
    uint64_t need = 2 * (uint64_t)sb.st_size, have = (uint64_t)vb.f_bavail * vb.f_frsize;
    if (have >= need)
        return AB_OK;
    ab_error_set(err, AB_UNAVAILABLE, "store",
                 "relayout of %s needs about %llu MiB free on its filesystem (twice the file); "
                 "%llu MiB are",
                 st->path, (unsigned long long)(need >> 20), (unsigned long long)(have >> 20));
    ab_error_detail_int(err, "need_bytes", (int64_t)need);
    ab_error_detail_int(err, "free_bytes", (int64_t)have);
    return AB_UNAVAILABLE;
}

/* Copy every chunk into chunks_relayout, RELAYOUT_BATCH at a time (invariant 4). */
static ab_status_t copy_chunks(ab_store_t *st, sqlite3_int64 pos_max, ab_store_progress_fn progress,
                               void *ud, ab_store_relayout_t *out, ab_error_t *err)
{
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(st->db, COPY_BATCH, -1, &q, NULL);
    sqlite3_int64 cursor = 0;
    while (rc == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, cursor);
        sqlite3_bind_int(q, 2, RELAYOUT_BATCH);
        rc = sqlite3_step(q);
        if (rc != SQLITE_DONE)
            break;
        rc = SQLITE_OK;
        int n = sqlite3_changes(st->db);
        sqlite3_reset(q);
        if (n == 0)
            break;
        cursor = sqlite3_last_insert_rowid(st->db); /* the batch's highest: ORDER BY rowid */
        out->chunks += (uint64_t)n;
        if (progress)
            progress(ud, out->chunks, (uint64_t)cursor, (uint64_t)pos_max);
    }
    sqlite3_finalize(q);
    return rc == SQLITE_OK ? AB_OK : ab__store_sqlerr(st, rc, "relayout: copy", err);
}

/* The copy and the swap, inside the open transaction (invariant 1). */
static ab_status_t relayout_txn(ab_store_t *st, ab_store_progress_fn progress, void *ud,
                                ab_store_relayout_t *out, ab_error_t *err)
{
    int64_t pos_max = 0;
    ab_status_t s = ab__store_one_int(st, "SELECT coalesce(max(rowid), 0) FROM chunks", "relayout",
                                      &pos_max, err);
    int rc = s == AB_OK
                 ? sqlite3_exec(st->db, AB__CHUNKS_TABLE("chunks_relayout"), NULL, NULL, NULL)
                 : SQLITE_OK;
    if (rc != SQLITE_OK)
        s = ab__store_sqlerr(st, rc, "relayout: create", err);
    if (s == AB_OK)
        s = copy_chunks(st, pos_max, progress, ud, out, err);
    if (s == AB_OK && (rc = sqlite3_exec(st->db, SWAP_TABLES, NULL, NULL, NULL)) != SQLITE_OK)
        s = ab__store_sqlerr(st, rc, "relayout: swap", err);
    out->last_pos = (uint64_t)pos_max;
    return s;
}

ab_status_t ab__store_relayout(ab_store_t *st, ab_store_progress_fn progress, void *ud,
                               ab_store_relayout_t *out, ab_error_t *err)
{
    if (st == NULL || out == NULL)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "relayout: NULL argument");
    if (st->readonly || st->in_txn)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store",
                            "relayout needs a writer handle with no transaction open");
    ab_store_relayout_t r = {0};
    int64_t before = 0;
    ab_status_t s = ab__store_one_int(st, AB__LINKS_BEFORE_DATA_SQL, "relayout", &before, err);
    if (s != AB_OK || before) {
        if (s == AB_OK)
            *out = r; /* invariant 2: nothing to do */
        return s;
    }
    r.needed = true;
    if ((s = room_for_copy(st, err)) != AB_OK)
        return s;
    int rc = sqlite3_exec(st->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return ab__store_sqlerr(st, rc, "relayout: begin", err);
    s = relayout_txn(st, progress, ud, &r, err);
    if (s == AB_OK && (rc = sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL)) != SQLITE_OK)
        s = ab__store_sqlerr(st, rc, "relayout: commit", err);
    if (s != AB_OK) {
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        return s;
    }
    /* the copy is in the WAL: move it into the file and cut the WAL back (best effort; the
     * checkpointer does it later otherwise) */
    sqlite3_exec(st->db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
    int64_t free_pages = 0;
    ab_error_t ignored = AB_ERROR_INIT; /* a figure only: the relayout itself is done */
    if (ab__store_one_int(st, "PRAGMA freelist_count", "relayout", &free_pages, &ignored) == AB_OK)
        r.free_bytes = (uint64_t)free_pages * AB_STORE_PAGE_BYTES;
    *out = r;
    return AB_OK;
}

/*
 * store_stats.c - what the store holds, for `agentbus status` and the
 * broker's metrics (the plugin's stats entry); SQLite's version, and its
 * memory statistics turned off for the process.
 *
 * Invariants:
 *  1. Nothing scans the events or the runs: the runs ever recorded are the
 *     largest runs rowid (rows are never deleted, and a rolled-back insert
 *     leaves no gap: SQLite takes max(rowid) + 1 without AUTOINCREMENT), and
 *     the active ones are counted on the partial index runs_active, whose
 *     size is the number of active runs.
 *  2. Sizes are the files' own: the database as page_count x page_size, the
 *     write-ahead log as the size of <path>-wal (0 when it does not exist).
 */
#include "store_int.h"

#include <stdio.h>
#include <sys/stat.h>

ab_status_t ab__store_one_int(ab_store_t *st, const char *sql, const char *what, int64_t *out,
                              ab_error_t *err)
{
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &q, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return rc == SQLITE_ROW ? AB_OK : ab__store_sqlerr(st, rc, what, err);
}

static ab_status_t one_int(ab_store_t *st, const char *sql, uint64_t *out, ab_error_t *err)
{
    int64_t v = 0;
    ab_status_t s = ab__store_one_int(st, sql, "stats", &v, err);
    if (s == AB_OK)
        *out = (uint64_t)v;
    return s;
}

ab_status_t ab__store_stats(ab_store_t *st, ab_plugin_stats_t *out, ab_error_t *err)
{
    if (!st || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "store: NULL handle or out");
    ab_plugin_stats_t s = {0};
    uint64_t pages = 0, page_size = 0;
    ab_status_t rc = one_int(st, "SELECT coalesce(max(rowid), 0) FROM runs", &s.runs_total, err);
    if (rc == AB_OK)
        rc = one_int(st, "SELECT count(*) FROM runs INDEXED BY runs_active WHERE status = 'active'",
                     &s.runs_active, err);
    if (rc == AB_OK)
        rc = one_int(st, "PRAGMA page_count", &pages, err);
    if (rc == AB_OK)
        rc = one_int(st, "PRAGMA page_size", &page_size, err);
    if (rc != AB_OK)
        return rc;
    s.store_bytes = pages * page_size;
    char wal[4096];
    struct stat sb;
    snprintf(wal, sizeof(wal), "%s-wal", st->path);
    if (stat(wal, &sb) == 0)
        s.wal_bytes = (uint64_t)sb.st_size;
    ab__store_ckpt_figures(st, &s);
    *out = s;
    return AB_OK;
}

const char *ab__store_sqlite_version(void)
{
    return sqlite3_libversion();
}

int ab__store_global_init(void)
{
    /* SQLITE_MISUSE once SQLite is initialised: the setting stays as it was */
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) == SQLITE_OK;
}

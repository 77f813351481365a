/*
 * db_lock.h - hold the write lock of a broker's SQLite database from the test
 * (header-only): our own connection runs BEGIN IMMEDIATE, which blocks the
 * broker's writer (it waits up to its busy timeout, about 1 s, then fails the
 * group) but not its readers (WAL). Used to hold the writer up on purpose.
 */
#ifndef AB_TESTS_DB_LOCK_H
#define AB_TESTS_DB_LOCK_H

#include "broker_proc.h"

#include <sqlite3.h>

/* Open @p dir's agentbus.db and take the write lock; fails the test on error. */
static inline sqlite3 *dl_lock(const char *dir)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/agentbus.db", dir);
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        sqlite3_close(db);
        fail_msg("open %s: failed", path);
    }
    sqlite3_busy_timeout(db, 5000);
    char *msg = NULL;
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, &msg) != SQLITE_OK) {
        char why[256];
        snprintf(why, sizeof(why), "%s", msg ? msg : "?");
        sqlite3_free(msg);
        sqlite3_close(db);
        fail_msg("BEGIN IMMEDIATE on %s: %s", path, why);
    }
    return db;
}

/* Release the lock and close (NULL-safe; *db = NULL). */
static inline void dl_unlock(sqlite3 **db)
{
    if (*db == NULL)
        return;
    sqlite3_exec(*db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(*db);
    *db = NULL;
}

#endif /* AB_TESTS_DB_LOCK_H */

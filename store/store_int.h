/*
 * store_int.h - internals shared by the store/ sources (not installed).
 *
 * Only store/ includes sqlite3.h; this header is where it enters.
 */
#ifndef AB_STORE_INT_H
#define AB_STORE_INT_H

#include "agentbus/store.h"

#include <sqlite3.h>

/* Prepared statements, kept for the life of the handle. */
enum {
    Q_BEGIN,
    Q_COMMIT,
    Q_ROLLBACK,
    Q_SAVEPOINT,
    Q_RELEASE,
    Q_ROLLBACK_TO,
    Q_MAX_POS,
    Q_THREAD_PUT,
    Q_RUN_GET,
    Q_RUN_NEW,
    Q_EV_INSERT,
    Q_RUN_UPDATE,
    Q_CLAIM,
    Q_READ_RUN,
    Q_READ_THREAD,
    Q_READ_ALL,
    Q_HEAD,
    Q_RUNS_OF_THREAD,
    Q_COUNT_
};

struct ab_store {
    sqlite3 *db;
    char *path; /* <dir>/agentbus.db, for messages */
    bool readonly;
    bool in_txn;
    uint64_t next_pos; /* valid while in_txn */
    sqlite3_stmt *q[Q_COUNT_];
};

/* Map an SQLite result code to a status and record it with the db message. */
ab_status_t ab_store_sqlerr_(ab_store_t *st, int rc, const char *what, ab_error_t *err);

/* Map an SQLite result code to a status (no message). */
ab_status_t ab_store_rc_status_(int rc);

/* Prepare every statement of Q_*; called by ab_store_open(). */
ab_status_t ab_store_prepare_(ab_store_t *st, ab_error_t *err);

#endif

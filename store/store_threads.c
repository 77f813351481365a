/*
 * store_threads.c - the listing of the threads with stored events (the
 * plugin's threads_list; docs/STORE.md "Listing the threads").
 *
 * Invariants:
 *  1. One range scan of the threads table's unique index on `thread`
 *     (BINARY collation: bytes compared unsigned, a shorter id first) from
 *     the cursor to the end of the prefix's range, stopped by LIMIT: its
 *     lower bound is the larger of the cursor (excluded) and the prefix
 *     (included), its upper bound the prefix's successor (its last byte
 *     below 0xFF raised by one, what follows cut off; "\xFF" without a
 *     prefix, above every UTF-8 id), so no row outside the answer's range
 *     is read but those of threads that have no event (claimed only), each
 *     skipped by one lookup of its tail (AB__THREAD_TAIL).
 *  2. Each thread listed costs a count of its runs (the runs table's
 *     unique index on (thread, run)) and a walk of its newest chunks (from
 *     its tail, the newest chunk, back along prev_thread while in that
 *     chunk's commit: the highest last_pos of that commit's chunks of the
 *     thread).
 *  3. The listing and the figures are read in one read transaction when
 *     the handle has none open, so they are of one committed state.
 *  4. Every statement is reset (and its bindings cleared) before returning.
 */
#include "store_int.h"

#include <string.h>

/* The successor of @p prefix into @p out (AB_ID_MAX_BYTES + 2 bytes): the
 * smallest string above every string that starts with @p prefix. */
static size_t successor(ab_str_t prefix, char *out)
{
    size_t n = prefix.len;
    if (n > 0)
        memcpy(out, prefix.ptr, n);
    while (n > 0 && (unsigned char)out[n - 1] == 0xFF)
        n--;
    if (n == 0) { /* empty, or all 0xFF (never an id): above every id */
        out[0] = (char)0xFF;
        return 1;
    }
    out[n - 1] = (char)((unsigned char)out[n - 1] + 1);
    return n;
}

/* Whether a < b in byte order (a shorter string before its extensions). */
static bool bytes_less(ab_str_t a, ab_str_t b)
{
    size_t n = a.len < b.len ? a.len : b.len;
    int c = n > 0 ? memcmp(a.ptr, b.ptr, n) : 0;
    return c < 0 || (c == 0 && a.len < b.len);
}

static void copy_col(char *dst, sqlite3_stmt *q, int col)
{
    const unsigned char *t = sqlite3_column_text(q, col);
    size_t n = t ? (size_t)sqlite3_column_bytes(q, col) : 0;
    if (n > AB_ID_MAX_BYTES)
        n = AB_ID_MAX_BYTES;
    if (n > 0)
        memcpy(dst, t, n);
    dst[n] = '\0';
}

/* The figures of thread @p rowid (its text in @p out->thread) into @p out. */
static ab_status_t thread_figures(ab_store_t *st, sqlite3_int64 rowid, ab_thread_info_t *out,
                                  ab_error_t *err)
{
    sqlite3_stmt *q = st->q[Q_THREAD_FIGURES];
    sqlite3_bind_int64(q, 1, rowid);
    sqlite3_bind_text(q, 2, out->thread, (int)strlen(out->thread), SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        out->runs = (uint64_t)sqlite3_column_int64(q, 0);
        out->runs_active = (uint64_t)sqlite3_column_int64(q, 1);
        out->last_pos = (uint64_t)sqlite3_column_int64(q, 2);
        copy_col(out->last_run, q, 3);
    }
    ab__store_done(q);
    if (rc == SQLITE_ROW)
        return AB_OK;
    if (rc == SQLITE_DONE) /* its tail names a chunk that is gone, or whose run is */
        return ab_error_set(err, AB_CORRUPT, "store",
                            "database %s is damaged: the newest chunk of thread '%s' (its tail) "
                            "or that chunk's run is missing",
                            st->path, out->thread);
    return ab__store_sqlerr(st, rc, "threads", err);
}

/* The scan of invariant 1; @p cb gets each thread. */
static ab_status_t scan(ab_store_t *st, ab_str_t after, ab_str_t prefix, uint32_t limit,
                        ab_thread_cb cb, void *ud, uint32_t *count, ab_error_t *err)
{
    char hi[AB_ID_MAX_BYTES + 2];
    size_t hilen = successor(prefix, hi);
    ab_str_t lo = bytes_less(after, prefix) ? prefix : after;
    sqlite3_stmt *q = st->q[Q_THREADS_LIST];
    sqlite3_bind_text(q, 1, lo.len ? lo.ptr : "", (int)lo.len, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, hi, (int)hilen, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, after.len ? after.ptr : "", (int)after.len, SQLITE_STATIC);
    sqlite3_bind_int64(q, 4, limit);
    ab_thread_info_t t;
    ab_status_t s = AB_OK;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        memset(&t, 0, sizeof t);
        copy_col(t.thread, q, 1);
        s = thread_figures(st, sqlite3_column_int64(q, 0), &t, err);
        if (s != AB_OK)
            break;
        (*count)++;
        if (cb && cb(ud, &t) != 0)
            break;
    }
    ab__store_done(q);
    if (s == AB_OK && rc != SQLITE_ROW && rc != SQLITE_DONE)
        s = ab__store_sqlerr(st, rc, "threads", err);
    return s;
}

ab_status_t ab__store_threads_list(ab_store_t *st, ab_str_t after, ab_str_t prefix, uint32_t limit,
                                   ab_thread_cb cb, void *ud, uint32_t *count, ab_error_t *err)
{
    uint32_t n = 0;
    if (count)
        *count = 0;
    if (!st || limit == 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store",
                            "store: threads_list needs a handle and a limit of at least 1");
    if (after.len > AB_ID_MAX_BYTES || prefix.len > AB_ID_MAX_BYTES || (after.len && !after.ptr) ||
        (prefix.len && !prefix.ptr))
        return ab_error_set(err, AB_INVALID_ARGUMENT,
                            after.len > AB_ID_MAX_BYTES ? "after" : "prefix",
                            "store: threads_list cursor or prefix is not an id");
    bool own = false;
    ab_status_t s = ab__store_read_begin(st, &own, "threads", err); /* invariant 3 */
    if (s != AB_OK)
        return s;
    s = scan(st, after, prefix, limit, cb, ud, &n, err);
    ab__store_read_end(st, own);
    if (count)
        *count = n;
    return s;
}

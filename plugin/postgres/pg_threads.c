/*
 * pg_threads.c - the PostgreSQL plugin's thread listing (threads_list of
 * agentbus/plugin.h, ABI 7; docs/SCALING.md "Listing the threads").
 *
 * The threads are the distinct `thread` values of ab_runs, whose primary
 * key (thread, run) is the index walked: a recursive query takes the next
 * thread above the previous one with one index probe per step (min(thread)
 * WHERE thread > previous), so a page costs its threads' probes, never a
 * scan of the table; it stops at the first thread that no longer starts
 * with the prefix, or at LIMIT. Each thread's figures come from its own
 * runs (the same index): how many, how many active, and the run whose head
 * is the newest position. Threads whose runs have no event (claimed only)
 * are stepped over and not listed.
 *
 * Invariants:
 *  1. Order is byte order (the protocol's) only when the database's default
 *     collation compares bytes (locale C or POSIX); with any other the
 *     index order is that locale's, so the call is refused AB_UNSUPPORTED
 *     (checked on every call, one round trip, before the listing).
 *  2. One statement, so the listing and the figures are of one snapshot.
 *  3. No ORDER BY: it would make the server run the whole walk before the
 *     LIMIT. The walk yields the threads in order (each step's is above the
 *     previous one's), the nested loop keeps it, and the loop below checks
 *     it (AB_INTERNAL otherwise), so a change of plan cannot go unnoticed.
 *  4. Text parameters only (no byte-level successor of the prefix, which
 *     could be invalid UTF-8): the prefix bounds the walk by starts_with().
 */
#include "pg_int.h"

#include <stdlib.h>
#include <string.h>

/* $1 lower bound (included), $2 cursor (excluded), $3 prefix, $4 limit. */
static const char LIST_SQL[] =
    "WITH RECURSIVE t(thread) AS ("
    " SELECT min(thread) FROM ab_runs WHERE thread >= $1 AND thread <> $2"
    " UNION ALL"
    " SELECT (SELECT min(r.thread) FROM ab_runs r WHERE r.thread > t.thread)"
    " FROM t WHERE t.thread IS NOT NULL AND starts_with(t.thread, $3))"
    " SELECT t.thread, f.runs, f.active, f.last_run, f.last_pos FROM t CROSS JOIN LATERAL"
    " (SELECT count(*) AS runs, count(*) FILTER (WHERE coalesce(status, CASE WHEN last_seq > 0"
    " THEN 'active' END) = 'active') AS active,"
    " (array_agg(run ORDER BY last_pos DESC))[1] AS last_run, max(last_pos) AS last_pos"
    " FROM ab_runs WHERE thread = t.thread) f"
    " WHERE t.thread IS NOT NULL AND starts_with(t.thread, $3) AND f.last_pos > 0 LIMIT $4";

/* Byte order of the default collation (invariant 1): C orders 'B' before 'a', 'z'
 * before any non-ASCII character and a string before its extensions. */
static const char ORDER_SQL[] = "SELECT 'B' < 'a' AND 'z' < '\xc3\xa9' AND 'a' < 'a-'";

static bool bytes_less(ab_str_t a, ab_str_t b)
{
    size_t n = a.len < b.len ? a.len : b.len;
    int c = n > 0 ? memcmp(a.ptr, b.ptr, n) : 0;
    return c < 0 || (c == 0 && a.len < b.len);
}

static ab_status_t check_order(ab_plugin_db_t *db, ab_error_t *err)
{
    PGresult *r = PQexec(db->conn, ORDER_SQL);
    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK)
        return ab__pg_fail(db, r, "threads", err);
    bool bytes = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    PQclear(r);
    if (bytes)
        return AB_OK;
    return ab_error_set(err, AB_UNSUPPORTED, "threads",
                        "postgres: listing threads needs a database of locale C (byte order); "
                        "this one's default collation orders text otherwise");
}

static uint64_t num(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? 0 : strtoull(PQgetvalue(r, row, col), NULL, 10);
}

ab_status_t ab__pg_threads_list(ab_plugin_db_t *db, ab_str_t after, ab_str_t prefix, uint32_t limit,
                                ab_thread_cb cb, void *ud, uint32_t *count, ab_error_t *err)
{
    if (count)
        *count = 0;
    if (limit == 0 || after.len > AB_ID_MAX_BYTES || prefix.len > AB_ID_MAX_BYTES)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "threads",
                            "postgres: threads_list needs a limit of at least 1 and ids");
    ab_status_t s = ab__pg_ready(db, err);
    if (s == AB_OK)
        s = check_order(db, err);
    if (s != AB_OK)
        return s;
    ab_str_t none = {"", 0};
    after = after.len ? after : none;
    prefix = prefix.len ? prefix : none;
    pg_params_t p = {0};
    ab__pg_p_text(&p, bytes_less(after, prefix) ? prefix : after);
    ab__pg_p_text(&p, after);
    ab__pg_p_text(&p, prefix);
    ab__pg_p_i64(&p, limit);
    static const Oid types[] = {PG_TEXT, PG_TEXT, PG_TEXT, PG_INT8};
    PGresult *r = PQexecParams(db->conn, LIST_SQL, p.n, types, p.val, p.len, p.fmt, 0);
    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK)
        return ab__pg_fail(db, r, "threads", err);
    int n = PQntuples(r);
    uint32_t done = 0;
    for (int i = 0; i < n; i++) {
        ab_thread_info_t t = {0};
        ab__pg_copy(t.thread, sizeof t.thread, r, i, 0);
        if (i > 0 && !bytes_less(ab__pg_str(r, i - 1, 0), ab__pg_str(r, i, 0))) {
            s = ab_error_set(err, AB_INTERNAL, "threads", "postgres: threads out of order");
            break;
        }
        t.runs = num(r, i, 1);
        t.runs_active = num(r, i, 2);
        ab__pg_copy(t.last_run, sizeof t.last_run, r, i, 3);
        t.last_pos = num(r, i, 4);
        done++;
        if (cb && cb(ud, &t) != 0)
            break;
    }
    PQclear(r);
    if (count)
        *count = done;
    return s;
}

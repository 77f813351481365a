/*
 * store_tails.c - the tails of a commit: every run and thread it wrote to
 * gets its newest chunk named in two levels, the main tables (run_tails,
 * thread_tails) and a log of recent tails per table that a merge empties
 * into them (docs/STORE.md "Tails in two levels"); and ab_logged_tail(), the
 * SQL function through which every connection of the store reads the logs.
 *
 * Invariants:
 *  1. A commit writes one tail per run and per thread it wrote to, sorted by
 *     rowid: upserted into the main table AB_STORE_ROWS_PER_INSERT rows a
 *     statement, or appended to the log in blocks.
 *  2. A block is a row of a log: (gen, first, tails), tails being 1 to
 *     AB_STORE_TAILS_BLOCK pairs (id, chunk) of 16 bytes, two little-endian
 *     int64, ids (rowids, so 1 or more) strictly ascending, first its first
 *     id, chunks (rowids too) 1 or more. A commit's generation is its
 *     first position, so generations only ever rise and none is written
 *     twice (a rolled-back one is not written); tails_gens holds a row per
 *     generation with the tails it logged in each log.
 *  3. st->tails_recent[t] is the number of tails in log t (0: it is empty),
 *     st->tails_gens the number of generations, as tails_gens says.
 *     A commit's tails of a table go to its main table only while its log is
 *     empty (else an older logged tail would hide them) and they fall in at
 *     most tails_direct ranges of rowids; else to the log.
 *  4. A commit that takes either count to tails_recent_max or more, or the
 *     generations to AB_STORE_TAILS_GENS, also merges both logs into the
 *     main tables in its own transaction: every id's highest chunk (a
 *     chunk's rowid is its first position, so the newest tail names the
 *     highest), upserted in id order, so each page of a main table is
 *     written at most once; then the logs and tails_gens are emptied.
 *  5. The counts are read again at a begin that finds another connection
 *     wrote since this handle's last commit (store_rw.c), which may have
 *     filled or merged the logs; nothing reaches them before COMMIT.
 *  6. A block that breaks invariant 2 is damage: the view and the merge
 *     answer SQLITE_CORRUPT (AB_CORRUPT), never read past its bytes.
 *  7. A connection's view of the logs (tails_view_t) holds every logged
 *     tail, the highest chunk per id, as of generation max_gen, read since
 *     the merge whose first generation was min_gen. The logs' content is a
 *     function of their newest generation (invariant 2: generations are
 *     written once and only a merge, which empties the logs, removes them),
 *     so a view whose max_gen is the logs' newest is exact; one that is
 *     behind reads only the newer generations' blocks when the oldest
 *     generation is still min_gen (no merge since), else reads anew. The
 *     writer forgets its view when a commit fails: it may hold that
 *     commit's generation, whose number a later commit will take.
 */
#include "ab_common.h"
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

/* Bytes of one (id, chunk) pair in a block. */
#define PAIR_BYTES 16

/* ---- blocks and the view ------------------------------------------------------------ */

/* Field @p f (0 the id, 1 the chunk) of pair @p i of the block at @p p (invariant 2). */
static sqlite3_int64 pair_field(const uint8_t *p, size_t i, int f)
{
    return (sqlite3_int64)ab__store_get_u64(p + i * PAIR_BYTES + 8 * (size_t)f);
}

/* Whether @p len bytes at @p p are a block whose row says it starts at @p first (invariant 2). */
static bool block_ok(const uint8_t *p, size_t len, sqlite3_int64 first)
{
    if (!p || len == 0 || len % PAIR_BYTES || len / PAIR_BYTES > AB_STORE_TAILS_BLOCK)
        return false;
    sqlite3_int64 prev = 0;
    for (size_t i = 0; i < len / PAIR_BYTES; i++) {
        sqlite3_int64 k = pair_field(p, i, 0);
        if (k < 1 || (i == 0 ? k != first : k <= prev)) /* ids are rowids, from 1 */
            return false;
        if (pair_field(p, i, 1) < 1) /* so are chunks: a tail of 0 would read as no chunk */
            return false;
        prev = k;
    }
    return true;
}

/* An id -> chunk map of one log: open addressing, id 0 never stored (rowids start at 1). */
typedef struct tails_map {
    sqlite3_int64 *slot; /* pairs (id, chunk); id 0 = free */
    size_t cap, n;       /* cap a power of two, n <= cap / 2 */
} tails_map_t;

struct ab__tails_view {
    sqlite3 *db;
    bool valid;
    sqlite3_int64 min_gen, max_gen; /* invariant 7; 0 and 0: the logs were empty */
    tails_map_t map[2];             /* the run tails' log, the thread tails' */
};

static size_t map_home(const tails_map_t *m, sqlite3_int64 id)
{
    return (size_t)(((uint64_t)id * 0x9E3779B97F4A7C15ull) >> 32) & (m->cap - 1);
}

static bool map_put(tails_map_t *m, sqlite3_int64 id, sqlite3_int64 chunk);

static bool map_grow(tails_map_t *m)
{
    tails_map_t g = {.cap = m->cap ? 2 * m->cap : 1024};
    g.slot = calloc(2 * g.cap, sizeof *g.slot);
    if (!g.slot)
        return false;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slot[2 * i])
            map_put(&g, m->slot[2 * i], m->slot[2 * i + 1]);
    free(m->slot);
    *m = g;
    return true;
}

/* Record @p chunk for @p id, keeping the highest (the newest, invariant 4). */
static bool map_put(tails_map_t *m, sqlite3_int64 id, sqlite3_int64 chunk)
{
    if (2 * (m->n + 1) > m->cap && !map_grow(m))
        return false;
    size_t i = map_home(m, id);
    while (m->slot[2 * i] && m->slot[2 * i] != id)
        i = (i + 1) & (m->cap - 1);
    if (!m->slot[2 * i]) {
        m->slot[2 * i] = id;
        m->n++;
    } else if (m->slot[2 * i + 1] >= chunk) {
        return true;
    }
    m->slot[2 * i + 1] = chunk;
    return true;
}

static bool map_get(const tails_map_t *m, sqlite3_int64 id, sqlite3_int64 *chunk)
{
    if (m->n == 0)
        return false;
    for (size_t i = map_home(m, id); m->slot[2 * i]; i = (i + 1) & (m->cap - 1))
        if (m->slot[2 * i] == id) {
            *chunk = m->slot[2 * i + 1];
            return true;
        }
    return false;
}

static void map_clear(tails_map_t *m)
{
    if (m->n)
        memset(m->slot, 0, 2 * m->cap * sizeof *m->slot);
    m->n = 0;
}

/* Add the blocks of generations (after, upto] of log @p t to the view. The statements of a
 * refresh live only as long as it: a statement left prepared would keep its connection from
 * closing (sqlite3_close() answers SQLITE_BUSY), and the view is freed only at that close. */
static int view_load(ab__tails_view_t *v, int t, sqlite3_int64 after, sqlite3_int64 upto)
{
    static const char *const blocks[2] = {
        "SELECT first, tails FROM run_tails_log WHERE gen > ?1 AND gen <= ?2",
        "SELECT first, tails FROM thread_tails_log WHERE gen > ?1 AND gen <= ?2"};
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(v->db, blocks[t], -1, &q, NULL);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(q, 1, after);
    sqlite3_bind_int64(q, 2, upto);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const uint8_t *p = sqlite3_column_blob(q, 1);
        size_t len = (size_t)sqlite3_column_bytes(q, 1);
        if (!block_ok(p, len, sqlite3_column_int64(q, 0))) {
            rc = SQLITE_CORRUPT;
            break;
        }
        for (size_t i = 0; rc == SQLITE_ROW && i < len / PAIR_BYTES; i++)
            if (!map_put(&v->map[t], pair_field(p, i, 0), pair_field(p, i, 1)))
                rc = SQLITE_NOMEM;
        if (rc != SQLITE_ROW)
            break;
    }
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The logs' oldest generation (0: none) into *out. */
static int oldest_gen(sqlite3 *db, sqlite3_int64 *out)
{
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(db, "SELECT coalesce(min(gen), 0) FROM tails_gens", -1, &q, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        *out = sqlite3_column_int64(q, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(q);
    return rc;
}

/* Bring the view to the logs whose newest generation is @p max_gen (invariant 7). */
static int view_refresh(ab__tails_view_t *v, sqlite3_int64 max_gen)
{
    sqlite3_int64 min_gen = 0;
    int rc = max_gen > 0 ? oldest_gen(v->db, &min_gen) : SQLITE_OK;
    sqlite3_int64 after = v->max_gen;
    if (!v->valid || max_gen == 0 || min_gen != v->min_gen || max_gen < v->max_gen) {
        map_clear(&v->map[0]);
        map_clear(&v->map[1]);
        after = 0;
    }
    v->valid = false;
    for (int t = 0; rc == SQLITE_OK && max_gen > 0 && t < 2; t++)
        rc = view_load(v, t, after, max_gen);
    if (rc == SQLITE_OK) {
        v->valid = true;
        v->min_gen = min_gen;
        v->max_gen = max_gen;
    }
    return rc;
}

/* ab_logged_tail(log, id, max_gen): the newest logged tail of @p id in log 0 (runs) or 1
 * (threads), NULL when the logs have none; max_gen the logs' newest generation (NULL: none). */
static void sql_logged_tail(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    ab__tails_view_t *v = sqlite3_user_data(ctx);
    sqlite3_int64 max_gen = sqlite3_value_int64(argv[2]), chunk = 0; /* NULL reads as 0 */
    int t = sqlite3_value_int(argv[0]) != 0;
    if (!v->valid || v->max_gen != max_gen) {
        int rc = view_refresh(v, max_gen);
        if (rc != SQLITE_OK) {
            sqlite3_result_error(ctx,
                                 rc == SQLITE_CORRUPT ? "damaged block of a tails log"
                                                      : "reading the tails logs",
                                 -1);
            sqlite3_result_error_code(ctx, rc);
            return;
        }
    }
    if (map_get(&v->map[t], sqlite3_value_int64(argv[1]), &chunk))
        sqlite3_result_int64(ctx, chunk);
}

static void view_free(void *p)
{
    ab__tails_view_t *v = p;
    free(v->map[0].slot);
    free(v->map[1].slot);
    free(v);
}

ab_status_t ab__store_tails_register(sqlite3 *db, ab__tails_view_t **out)
{
    ab__tails_view_t *v = calloc(1, sizeof *v);
    if (!v)
        return AB_NOMEM;
    v->db = db;
    /* not deterministic: its answer depends on the database (invariant 7); the xDestroy
     * frees the view when the connection closes, or at once when registering fails */
    int rc = sqlite3_create_function_v2(db, "ab_logged_tail", 3, SQLITE_UTF8 | SQLITE_INNOCUOUS, v,
                                        sql_logged_tail, NULL, NULL, view_free);
    if (rc != SQLITE_OK)
        return AB_NOMEM;
    if (out)
        *out = v;
    return AB_OK;
}

void ab__store_tails_forget(ab__tails_view_t *v)
{
    if (v)
        v->valid = false;
}

/* ---- a commit's tails ------------------------------------------------------------- */

static int cmp_pair(const void *a, const void *b)
{
    const sqlite3_int64 *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* Whether @p n tails, sorted by rowid, go to the log of @p thread (invariant 3). */
static bool to_log(const ab_store_t *st, bool thread, const sqlite3_int64 *pairs, size_t n)
{
    if (st->tails_recent[thread] > 0)
        return true;
    int ranges = 0; /* with tails_direct -1, the first range is already one too many */
    for (size_t i = 0; i < n; i++)
        if (i == 0 || pairs[2 * i] >> AB_STORE_TAILS_RANGE_BITS !=
                          pairs[2 * i - 2] >> AB_STORE_TAILS_RANGE_BITS)
            if (++ranges > st->tails_direct)
                return true;
    return false;
}

/* Upsert @p n sorted pairs into the main table of runs (of threads when @p thread). */
static ab_status_t put_main(ab_store_t *st, bool thread, const sqlite3_int64 *pairs, size_t n,
                            ab_error_t *err)
{
    ab_status_t s = AB_OK;
    for (size_t i = 0; s == AB_OK && i < n;) {
        bool block = n - i >= AB_STORE_ROWS_PER_INSERT;
        int which = Q_TAIL_PUT + AB_TAIL_Q(thread, block);
        size_t k = block ? AB_STORE_ROWS_PER_INSERT : 1;
        for (size_t j = 0; j < k; j++, i++) {
            sqlite3_bind_int64(st->q[which], 2 * (int)j + 1, pairs[2 * i]);
            sqlite3_bind_int64(st->q[which], 2 * (int)j + 2, pairs[2 * i + 1]);
        }
        s = ab__store_run_q(st, which, thread ? "thread tail" : "run tail", err);
    }
    return s;
}

/* Append @p n sorted pairs to the log of @p thread as the commit's generation (its first
 * position), in blocks (invariant 2): each a row at the end of the log's b-tree. */
static ab_status_t put_log(ab_store_t *st, bool thread, const sqlite3_int64 *pairs, size_t n,
                           ab_error_t *err)
{
    uint8_t buf[AB_STORE_TAILS_BLOCK * PAIR_BYTES];
    sqlite3_stmt *q = st->q[Q_RUN_TAILS_LOG + thread];
    ab_status_t s = AB_OK;
    for (size_t i = 0; s == AB_OK && i < n;) {
        size_t k = n - i < AB_STORE_TAILS_BLOCK ? n - i : AB_STORE_TAILS_BLOCK;
        for (size_t j = 0; j < k; j++) {
            ab__store_put_u64(buf + j * PAIR_BYTES, (uint64_t)pairs[2 * (i + j)]);
            ab__store_put_u64(buf + j * PAIR_BYTES + 8, (uint64_t)pairs[2 * (i + j) + 1]);
        }
        sqlite3_bind_int64(q, 1, ab__store_i64(st->batch_first));
        sqlite3_bind_int64(q, 2, pairs[2 * i]);
        sqlite3_bind_blob(q, 3, buf, (int)(k * PAIR_BYTES), SQLITE_STATIC);
        s = ab__store_run_q(st, Q_RUN_TAILS_LOG + thread, "log tails", err);
        i += k;
    }
    return s;
}

/* Write @p n (rowid, chunk) pairs, one per rowid, as the tails of runs (of threads when
 * @p thread): to the main table or to the log (invariant 3). */
static ab_status_t put_tails(ab_store_t *st, bool thread, sqlite3_int64 *pairs, size_t n,
                             ab_error_t *err)
{
    if (n == 0)
        return AB_OK;
    qsort(pairs, n, 2 * sizeof *pairs, cmp_pair);
    if (!to_log(st, thread, pairs, n))
        return put_main(st, thread, pairs, n, err);
    st->p_tails_recent[thread] = st->tails_recent[thread] + n;
    st->p_tails_gens = st->tails_gens + 1; /* this commit's generation, once */
    return put_log(st, thread, pairs, n, err);
}

/* The row of the commit's generation in tails_gens, when it appended to either log. */
static ab_status_t put_gen(ab_store_t *st, ab_error_t *err)
{
    if (st->p_tails_gens == st->tails_gens)
        return AB_OK;
    sqlite3_stmt *q = st->q[Q_TAILS_GEN_PUT];
    sqlite3_bind_int64(q, 1, ab__store_i64(st->batch_first));
    for (int t = 0; t < 2; t++)
        sqlite3_bind_int64(q, 2 + t, ab__store_i64(st->p_tails_recent[t] - st->tails_recent[t]));
    return ab__store_run_q(st, Q_TAILS_GEN_PUT, "tails generation", err);
}

/* ---- the merge -------------------------------------------------------------------- */

/* Read every block of the log of @p thread into st->tails as pairs; *n their number. */
static ab_status_t read_log(ab_store_t *st, bool thread, size_t *n, ab_error_t *err)
{
    sqlite3_stmt *q = st->q[Q_RUN_TAILS_READ + thread];
    ab_status_t s = AB_OK;
    int rc;
    *n = 0;
    while (s == AB_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        const uint8_t *p = sqlite3_column_blob(q, 1);
        size_t len = (size_t)sqlite3_column_bytes(q, 1), k = len / PAIR_BYTES;
        if (!block_ok(p, len, sqlite3_column_int64(q, 0))) {
            s = ab_error_set(err, AB_CORRUPT, "store",
                             "database %s is damaged: a block of a tails log is not %d to %d"
                             " sorted pairs of rowids (merge tails)",
                             st->path, 1, AB_STORE_TAILS_BLOCK);
            break;
        }
        sqlite3_int64 *pairs =
            ab__grow(st->tails, &st->tails_cap, 2 * (*n + k), sizeof *pairs, 256);
        if (!pairs) {
            s = ab_error_set(err, AB_NOMEM, "store", "out of memory (merge tails)");
            break;
        }
        st->tails = pairs;
        for (size_t j = 0; j < k; j++, (*n)++) {
            pairs[2 * *n] = pair_field(p, j, 0);
            pairs[2 * *n + 1] = pair_field(p, j, 1);
        }
    }
    if (s == AB_OK && rc != SQLITE_DONE)
        s = ab__store_sqlerr(st, rc, "merge tails", err);
    ab__store_done(q);
    return s;
}

/* Merge the log of @p thread into its main table (invariant 4) and empty it. */
static ab_status_t merge_one(ab_store_t *st, bool thread, ab_error_t *err)
{
    size_t n = 0, k = 0;
    ab_status_t s = read_log(st, thread, &n, err);
    if (s != AB_OK)
        return s;
    sqlite3_int64 *a = st->tails;
    qsort(a, n, 2 * sizeof *a, cmp_pair);
    for (size_t i = 0; i < n; i++) /* the last of each id has its highest chunk */
        if (i + 1 == n || a[2 * i + 2] != a[2 * i]) {
            a[2 * k] = a[2 * i];
            a[2 * k++ + 1] = a[2 * i + 1];
        }
    s = put_main(st, thread, a, k, err);
    return s == AB_OK ? ab__store_run_q(st, Q_RUN_TAILS_CLEAR + thread, "merge tails", err) : s;
}

/* Merge both logs when either may have reached its bound (invariant 4). */
static ab_status_t merge_tails(ab_store_t *st, ab_error_t *err)
{
    if (st->p_tails_recent[0] < st->tails_recent_max &&
        st->p_tails_recent[1] < st->tails_recent_max && st->p_tails_gens < AB_STORE_TAILS_GENS)
        return AB_OK;
    ab_status_t s = merge_one(st, false, err);
    if (s == AB_OK)
        s = merge_one(st, true, err);
    if (s == AB_OK)
        s = ab__store_run_q(st, Q_TAILS_GENS_CLEAR, "merge tails", err);
    st->p_tails_recent[0] = st->p_tails_recent[1] = 0;
    st->p_tails_gens = 0;
    return s;
}

ab_status_t ab__store_tails_write(ab_store_t *st, ab_error_t *err)
{
    size_t n = st->ntouched > st->nttouched ? st->ntouched : st->nttouched;
    sqlite3_int64 *pairs = ab__grow(st->tails, &st->tails_cap, 2 * n, sizeof *pairs, 256);
    if (!pairs)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory (tails)");
    st->tails = pairs;
    st->p_tails_recent[0] = st->tails_recent[0];
    st->p_tails_recent[1] = st->tails_recent[1];
    st->p_tails_gens = st->tails_gens;
    size_t k = 0;
    for (size_t i = 0; i < st->ntouched; i++)
        if (st->touched[i]->p_n > 0) {
            pairs[2 * k] = st->touched[i]->rowid;
            pairs[2 * k++ + 1] = ab__store_i64(st->touched[i]->p_first_pos);
        }
    ab_status_t s = put_tails(st, false, pairs, k, err);
    for (size_t i = 0; i < st->nttouched; i++) {
        pairs[2 * i] = st->ttouched[i]->rowid;
        pairs[2 * i + 1] = st->ttouched[i]->p_tail;
    }
    if (s == AB_OK)
        s = put_tails(st, true, pairs, st->nttouched, err);
    if (s == AB_OK)
        s = put_gen(st, err);
    return s == AB_OK ? merge_tails(st, err) : s;
}

void ab__store_tails_committed(ab_store_t *st)
{
    st->tails_recent[0] = st->p_tails_recent[0];
    st->tails_recent[1] = st->p_tails_recent[1];
    st->tails_gens = st->p_tails_gens;
}

void ab__store_tails_init(ab_store_t *st, int max, int direct)
{
    st->tails_recent_max = max > 0 ? (size_t)max : AB_STORE_TAILS_RECENT;
    st->tails_direct = direct == 0 ? AB_STORE_TAILS_DIRECT : direct < 0 ? -1 : direct;
}

ab_status_t ab__store_tails_count(ab_store_t *st, ab_error_t *err)
{
    sqlite3_stmt *q = st->q[Q_TAILS_RECENT];
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        for (int t = 0; t < 2; t++)
            st->tails_recent[t] = (size_t)sqlite3_column_int64(q, t);
        st->tails_gens = (size_t)sqlite3_column_int64(q, 2);
    }
    ab__store_done(q);
    return rc == SQLITE_ROW ? AB_OK : ab__store_sqlerr(st, rc, "count logged tails", err);
}

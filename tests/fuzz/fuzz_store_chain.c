/*
 * fuzz_store_chain.c - the SQLite store's readers over chains damaged any way a stored row
 * can be (store/store_walk.c, docs/STORE.md "Chains and anchors"): whatever the links,
 * distances, seqs, owners, tails and blocks of the tails logs say, a read of a run, a thread or
 * everything and a run's head end with AB_OK or AB_CORRUPT, never a crash or a loop; what an AB_OK
 * read delivered is in order (a run's seqs rise above its cursor, a thread's positions rise above
 * its own) and every row is of the run or thread asked for.
 *
 * A store is built once per process: RUNS runs in THREADS threads, committed a few events
 * at a time so that every run has more than AB_STORE_ANCHOR_EVERY chunks. Each input is a
 * list of 12-byte edits: byte 0 picks what to change (a chunk's column, a tail, a chunk
 * deleted, a block of a tails log cut, overwritten or misnamed, a generation dropped), bytes
 * 2-3 which chunk (an index into the chunks by rowid) or block, bytes 4-11 the new value (for
 * a link, taken modulo the highest rowid + 2, so it names real chunks; for a block, also as
 * 8 raw bytes written into it). The edits
 * run inside a transaction on the store's own connection, the reads see them, and the
 * transaction is rolled back: every input starts from the same store.
 */
#include "ab_common.h"
#include "store.h"
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RUNS    6
#define THREADS 2
#define COMMITS 180
#define EDITS   32

#define STORE_FUZZ_NAME "fuzz_store_chain"
#include "store_fuzz.h"

static void build(void)
{
    /* tails always to the logs, merged every few commits: both levels hold tails
     * (docs/STORE.md "Tails in two levels"), some of the main ones older than the logged
     * ones of the same run */
    ab_store_opts_t o = {
        .durability = AB_DURABILITY_PROCESS, .tails_recent = 9, .tails_direct = -1};
    open_store("/tmp/ab_fuzzchain_XXXXXX", &o);
    ab_error_t err = AB_ERROR_INIT;
    uint64_t seq[RUNS] = {0};
    uint32_t rng = 7;
    for (int c = 0; c < COMMITS; c++) {
        ab_append_event_t evs[4];
        char t[4][8], r[4][8];
        int n = 1 + c % 4;
        for (int i = 0; i < n; i++) {
            rng = rng * 1103515245u + 12345u;
            int k = (int)((rng >> 8) % RUNS);
            names(k, t[i], r[i]);
            evs[i] = (ab_append_event_t){.thread = {t[i], strlen(t[i])},
                                         .run = {r[i], strlen(r[i])},
                                         .seq = ++seq[k],
                                         .epoch = 1,
                                         .bytes = (const uint8_t *)"e",
                                         .len = 1};
        }
        uint64_t first = 0;
        if (ab__store_append_batch(g_st, evs, (size_t)n, 1000, &first, &err) != AB_OK)
            die("append", &err);
    }
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(g_st->db, /* a logged tail shadows an older one of the main table */
                           "SELECT count(*) FROM run_tails m WHERE coalesce(" AB__LOGGED_TAIL(
                               "0", "m.rowid") ", 0) > m.chunk",
                           -1, &q, NULL) ||
        sqlite3_step(q) != SQLITE_ROW || sqlite3_column_int64(q, 0) == 0)
        die("the tails are not in two levels", NULL);
    sqlite3_finalize(q);
    load_chunks();
}

/* One block of the log of @p kind: the (?2 % 4)-th by its key (gen, first). */
#define LOG_BLOCK(kind)                                                                            \
    "(gen, first) = (SELECT gen, first FROM " kind "_tails_log ORDER BY gen, first"                \
    " LIMIT 1 OFFSET ?2 % 4)"

/* One edit (header): a statement with ?1 the value, ?2 the chunk's rowid (or an index) and
 * ?3 the value's 8 bytes as a blob. */
static const char *const EDIT_SQL[] = {
    "UPDATE chunks SET prev_run = ?1 WHERE rowid = ?2",
    "UPDATE chunks SET prev_thread = ?1 WHERE rowid = ?2",
    "UPDATE chunks SET run_dist = ?1 % 70 WHERE rowid = ?2",
    "UPDATE chunks SET thread_dist = ?1 % 70 WHERE rowid = ?2",
    "UPDATE chunks SET last_seq = ?1 % 200 WHERE rowid = ?2",
    "UPDATE chunks SET run_rowid = 1 + ?1 % 8 WHERE rowid = ?2",
    "UPDATE chunks SET thread_rowid = 1 + ?1 % 3 WHERE rowid = ?2",
    "DELETE FROM chunks WHERE rowid = ?2 AND ?1 = ?1",
    "UPDATE run_tails SET chunk = ?1 WHERE rowid = 1 + ?2 % 7",
    "UPDATE thread_tails SET chunk = ?1 WHERE rowid = 1 + ?2 % 3",
    "UPDATE chunks SET first_seq = ?1 % 200 WHERE rowid = ?2",
    /* a block of a log (its pairs: store_tails.c invariant 2), picked by ?2 among them */
    "UPDATE run_tails_log SET tails = substr(tails, 1, ?1 % 80) WHERE " LOG_BLOCK("run"),
    "UPDATE run_tails_log SET tails = substr(tails, 1, 16 * (?1 % 5) + 8) || ?3"
    " || substr(tails, 16 * (?1 % 5) + 17) WHERE " LOG_BLOCK("run"),
    "UPDATE run_tails_log SET tails = substr(tails, 1, 16 * (?1 % 5)) || ?3"
    " || substr(tails, 16 * (?1 % 5) + 9) WHERE " LOG_BLOCK("run"),
    "UPDATE run_tails_log SET first = ?1 % 9 WHERE " LOG_BLOCK("run"),
    "UPDATE thread_tails_log SET tails = substr(tails, 1, 8) || ?3 WHERE " LOG_BLOCK("thread"),
    "DELETE FROM tails_gens WHERE gen = (SELECT gen FROM tails_gens ORDER BY gen DESC"
    " LIMIT 1 OFFSET ?2 % 3) AND ?1 = ?1",
};

static void edit(const uint8_t *e)
{
    size_t which = e[0] % (sizeof EDIT_SQL / sizeof *EDIT_SQL);
    size_t idx = (size_t)(e[2] | e[3] << 8) % g_nchunks;
    uint64_t v = 0;
    memcpy(&v, e + 4, 8);
    sqlite3_int64 link = (sqlite3_int64)(v % (uint64_t)(g_chunks[g_nchunks - 1] + 2));
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(g_st->db, EDIT_SQL[which], -1, &q, NULL) != SQLITE_OK)
        die("prepare edit", NULL);
    sqlite3_bind_int64(q, 1, which <= 1 || which >= 7 ? link : (sqlite3_int64)(v >> 1));
    sqlite3_bind_int64(q, 2, which >= 8 ? (sqlite3_int64)idx : g_chunks[idx]);
    sqlite3_bind_blob(q, 3, e + 4, 8, SQLITE_TRANSIENT); /* SQLITE_RANGE where unused */
    (void)sqlite3_step(q); /* a unique anchor clash is refused: the edit is then not made */
    sqlite3_finalize(q);
}

typedef struct seen {
    ab_replay_scope_t scope;
    const char *thread, *run;
    uint64_t after, last;
} seen_t;

static int on_row(void *ud, const ab_row_t *row)
{
    seen_t *s = ud;
    uint64_t key = s->scope == AB_REPLAY_RUN ? row->seq : row->pos;
    if (key <= s->last)
        abort(); /* out of order, or at or below the cursor */
    s->last = key;
    if (s->scope != AB_REPLAY_ALL &&
        (row->thread.len != strlen(s->thread) || memcmp(row->thread.ptr, s->thread, 2) != 0))
        abort(); /* another thread's row */
    if (s->scope == AB_REPLAY_RUN &&
        (row->run.len != strlen(s->run) || memcmp(row->run.ptr, s->run, row->run.len) != 0))
        abort(); /* another run's row */
    return 0;
}

static void read_one(ab_replay_scope_t scope, const char *thread, const char *run, uint64_t after,
                     uint32_t limit)
{
    ab_read_t req = read_req(scope, thread, run, after, limit);
    seen_t s = {.scope = scope, .thread = thread, .run = run, .after = after, .last = after};
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab__store_read(g_st, &req, on_row, &s, NULL, &err);
    if (st != AB_OK && st != AB_CORRUPT)
        die("read", &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (g_st == NULL)
        build();
    if (sqlite3_exec(g_st->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        die("begin", NULL);
    ab__store_tails_forget(g_st->tails_view); /* the reads below see the edits' blocks */
    for (size_t i = 0; i + 12 <= size && i / 12 < EDITS; i += 12)
        edit(data + i);
    for (int r = 0; r < RUNS; r++) {
        char t[8], rn[8];
        names(r, t, rn);
        read_one(AB_REPLAY_RUN, t, rn, 0, UINT32_MAX);
        read_one(AB_REPLAY_RUN, t, rn, 20, 5);
        ab_buf_t b = {0};
        ab_error_t err = AB_ERROR_INIT;
        ab_status_t st = ab__store_event_bytes(g_st, (ab_str_t){t, strlen(t)},
                                               (ab_str_t){rn, strlen(rn)}, 10, &b, NULL, &err);
        if (st != AB_OK && st != AB_CORRUPT && st != AB_NOT_FOUND)
            die("event", &err);
        ab_buf_free(&b);
        ab_run_head_t h; /* its tail read as every head reads it */
        st = ab__store_head(g_st, (ab_str_t){t, strlen(t)}, (ab_str_t){rn, strlen(rn)}, &h, &err);
        if (st != AB_OK && st != AB_CORRUPT && st != AB_NOT_FOUND)
            die("head", &err);
    }
    for (int t = 0; t < THREADS; t++) {
        char tn[8], rn[8];
        names(t, tn, rn);
        read_one(AB_REPLAY_THREAD, tn, NULL, 0, UINT32_MAX);
        read_one(AB_REPLAY_THREAD, tn, NULL, 100, 30);
    }
    read_one(AB_REPLAY_ALL, NULL, NULL, 0, UINT32_MAX);
    sqlite3_exec(g_st->db, "ROLLBACK", NULL, NULL, NULL);
    ab__store_tails_forget(g_st->tails_view); /* its view may hold the edited blocks */
    return 0;
}

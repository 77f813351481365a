/*
 * fuzz_store_rows.c - the SQLite store's decoders of stored rows beside its chains
 * (fuzz_store_chain has those): a chunk's records (store/store_read.c invariant 2,
 * docs/STORE.md "Schema": n records of a 24-byte header and the event's bytes) and a
 * thread's snapshot row and parts (store/store_snap.c). Whatever bytes a chunk's data, its
 * n and its batch_first hold, whatever a snapshot's row and parts and a run's row say, a read
 * of a run, a thread or everything, an event's bytes, a run's head, a thread's heads and a
 * snapshot's get end with AB_OK, AB_NOT_FOUND
 * or AB_CORRUPT (whose message names the damaged database), never a crash, an out-of-bounds
 * read (ASan in the sanitized build) or rows out of order; and an all read that answers AB_OK
 * delivered every record the chunks' rows count (none left out silently).
 *
 * A store is built once per process: runs r0..r2 of threads t0 and t1, committed a few events
 * at a time (so chunks of one or two records), and a snapshot of t0 in three parts and one of
 * t1 whole. An input is a 4-byte header and a blob:
 *   byte 0  which chunk (an index into the chunks by rowid) gets the blob as its data;
 *   byte 1  flags: 1 its n becomes byte 2 % 8, 2 its batch_first moves by byte 3 % 5 - 2,
 *           4 the blob goes to the snapshots instead: t0's row gets parts = (int8) byte 2
 *           and the blob as its doc when byte 3 is odd, part byte 3 % 4 of t0 gets the blob
 *           as its data (8: deleted instead);
 *           16 the blob goes to a runs row instead (run byte 2 % 3, its CHECK constraints
 *           off): its status, outcome or parent run id by byte 3 % 3;
 *   bytes 4.. the blob (at most 4 KiB are used).
 * The edits run inside a transaction on the store's own connection, the reads see them, and
 * the transaction is rolled back: every input starts from the same store.
 */
#include "ab_common.h"
#include "store.h"
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RUNS     3
#define THREADS  2
#define COMMITS  24
#define BLOB_MAX 4096

#define STORE_FUZZ_NAME "fuzz_store_rows"
#include "store_fuzz.h"

static void append_some(int c, uint64_t *seq)
{
    ab_append_event_t evs[4];
    char t[4][8], r[4][8], b[4][16];
    int n = 1 + c % 4;
    for (int i = 0; i < n; i++) {
        int k = (c + i / 2) % RUNS; /* pairs of one run: chunks of several records */
        names(k, t[i], r[i]);
        snprintf(b[i], sizeof b[i], "ev-%d-%d", c, i);
        evs[i] = (ab_append_event_t){.thread = {t[i], strlen(t[i])},
                                     .run = {r[i], strlen(r[i])},
                                     .seq = ++seq[k],
                                     .epoch = 1,
                                     .bytes = (const uint8_t *)b[i],
                                     .len = strlen(b[i])};
    }
    uint64_t first = 0;
    ab_error_t err = AB_ERROR_INIT;
    if (ab__store_append_batch(g_st, evs, (size_t)n, 1000 + c, &first, &err) != AB_OK)
        die("append", &err);
}

static void put_snapshots(void)
{
    static const char *const parts[] = {"part-0", "part-1", "part-2"};
    ab_error_t err = AB_ERROR_INIT;
    for (uint32_t i = 0; i < 3; i++)
        if (ab__store_snapshot_put_part(g_st, (ab_str_t){"t0", 2}, 5, i, (const uint8_t *)parts[i],
                                        6, i == 2, &err) != AB_OK)
            die("snapshot part", &err);
    if (ab__store_snapshot_put(g_st, (ab_str_t){"t1", 2}, 6, (const uint8_t *)"whole", 5, &err) !=
        AB_OK)
        die("snapshot", &err);
}

static void build(void)
{
    ab_store_opts_t o = {.durability = AB_DURABILITY_PROCESS};
    open_store("/tmp/ab_fuzzrows_XXXXXX", &o);
    uint64_t seq[RUNS] = {0};
    for (int c = 0; c < COMMITS; c++)
        append_some(c, seq);
    put_snapshots();
    load_chunks();
}

/* The edits of byte 1's flags (see the head of the file): ?1 the chunk, ?2 an integer, ?3
 * the blob. */
static const char *const EDIT_SQL[] = {
    "UPDATE chunks SET data = ?3 WHERE rowid = ?1 AND ?2 = ?2",
    "UPDATE chunks SET n = ?2 % 8 WHERE rowid = ?1 AND ?3 = ?3",
    "UPDATE chunks SET batch_first = batch_first + ?2 % 5 - 2 WHERE rowid = ?1 AND ?3 = ?3",
    "UPDATE snapshots SET parts = ((?2 + 128) % 256) - 128, doc = CASE WHEN ?2 % 2 = 1"
    " THEN ?3 ELSE doc END WHERE thread = 't0' AND ?1 = ?1",
    "UPDATE snapshot_parts SET data = ?3 WHERE thread = 't0' AND idx = ?2 % 4 AND ?1 = ?1",
    "DELETE FROM snapshot_parts WHERE thread = 't0' AND idx = ?2 % 4 AND ?1 = ?1 AND ?3 = ?3",
    /* a runs row (store/store_runs.c), its CHECK constraints off */
    "UPDATE runs SET status = CAST(?3 AS TEXT) WHERE rowid = 1 + ?2 % 3 AND ?1 = ?1",
    "UPDATE runs SET outcome = CAST(?3 AS TEXT) WHERE rowid = 1 + ?2 % 3 AND ?1 = ?1",
    "UPDATE runs SET parent_run = CAST(?3 AS TEXT) WHERE rowid = 1 + ?2 % 3 AND ?1 = ?1",
};

static void edit(int which, sqlite3_int64 chunk, sqlite3_int64 v, const uint8_t *blob, size_t len)
{
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(g_st->db, EDIT_SQL[which], -1, &q, NULL) != SQLITE_OK)
        die("prepare edit", NULL);
    sqlite3_bind_int64(q, 1, chunk);
    sqlite3_bind_int64(q, 2, v);
    sqlite3_bind_blob(q, 3, len ? blob : (const void *)"", (int)len, SQLITE_TRANSIENT);
    (void)sqlite3_step(q); /* a NOT NULL or unique clash is refused: the edit is then not made */
    sqlite3_finalize(q);
}

static void edits(const uint8_t *data, size_t size)
{
    sqlite3_int64 chunk = g_chunks[data[0] % g_nchunks];
    const uint8_t *blob = data + 4;
    size_t len = size - 4 < BLOB_MAX ? size - 4 : BLOB_MAX;
    uint8_t f = data[1];
    if (f & 16) {
        sqlite3_exec(g_st->db, "PRAGMA ignore_check_constraints = ON", NULL, NULL, NULL);
        edit(6 + data[3] % 3, chunk, data[2], blob, len);
        sqlite3_exec(g_st->db, "PRAGMA ignore_check_constraints = OFF", NULL, NULL, NULL);
        return;
    }
    if (f & 4) {
        if (f & 8)
            edit(5, chunk, data[3], blob, len);
        else if (data[3] & 1)
            edit(3, chunk, data[2], blob, len);
        else
            edit(4, chunk, data[3], blob, len);
        return;
    }
    edit(0, chunk, 0, blob, len);
    if (f & 1)
        edit(1, chunk, data[2], blob, len);
    if (f & 2)
        edit(2, chunk, data[3], blob, len);
}

/* A read's refusal must be AB_CORRUPT naming the damaged database; anything else dies. */
static void check(ab_status_t st, const ab_error_t *err, const char *what)
{
    if (st == AB_OK || st == AB_NOT_FOUND)
        return;
    if (st != AB_CORRUPT || strstr(err->message, "is damaged") == NULL)
        die(what, err);
}

typedef struct seen {
    bool by_seq;
    uint64_t last;
} seen_t;

static int on_row(void *ud, const ab_row_t *row)
{
    seen_t *s = ud;
    uint64_t key = s->by_seq ? row->seq : row->pos;
    if (key <= s->last || (row->len && row->bytes == NULL))
        abort(); /* out of order, at or below the cursor, or no bytes */
    s->last = key;
    return 0;
}

/* Read; AB_OK or a refusal check() accepts; the rows delivered when AB_OK, else -1. */
static int64_t read_one(ab_replay_scope_t scope, const char *thread, const char *run,
                        uint64_t after, uint32_t limit)
{
    ab_read_t req = read_req(scope, thread, run, after, limit);
    seen_t s = {.by_seq = scope == AB_REPLAY_RUN, .last = after};
    ab_error_t err = AB_ERROR_INIT;
    uint32_t n = 0;
    ab_status_t st = ab__store_read(g_st, &req, on_row, &s, &n, &err);
    check(st, &err, "read");
    return st == AB_OK ? (int64_t)n : -1;
}

/* The records the chunks' rows count. */
static int64_t counted(void)
{
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(g_st->db, "SELECT total(n) FROM chunks", -1, &q, NULL) != SQLITE_OK ||
        sqlite3_step(q) != SQLITE_ROW)
        die("count", NULL);
    int64_t n = (int64_t)sqlite3_column_double(q, 0);
    sqlite3_finalize(q);
    return n;
}

/* @p whole: whatever the chunks hold, an all read from the start that answers AB_OK delivered
 * every record their rows count (when no batch_first moved: a record's position must be 1 or
 * more to be above the cursor 0). */
static void reads(bool whole)
{
    for (int r = 0; r < RUNS; r++) {
        char t[8], rn[8];
        names(r, t, rn);
        read_one(AB_REPLAY_RUN, t, rn, 0, UINT32_MAX);
        read_one(AB_REPLAY_RUN, t, rn, 3, 2);
        ab_buf_t b = {0};
        ab_error_t err = AB_ERROR_INIT;
        check(ab__store_event_bytes(g_st, (ab_str_t){t, strlen(t)}, (ab_str_t){rn, strlen(rn)}, 4,
                                    &b, NULL, &err),
              &err, "event");
        ab_buf_free(&b);
        ab_run_head_t h;
        check(ab__store_head(g_st, (ab_str_t){t, strlen(t)}, (ab_str_t){rn, strlen(rn)}, &h, &err),
              &err, "head");
    }
    for (int t = 0; t < THREADS; t++) {
        char tn[8], rn[8];
        names(t, tn, rn);
        read_one(AB_REPLAY_THREAD, tn, NULL, 0, UINT32_MAX);
        read_one(AB_REPLAY_THREAD, tn, NULL, 10, 3);
        ab_buf_t doc = {0};
        uint64_t pos = 0;
        ab_error_t err = AB_ERROR_INIT;
        check(ab__store_snapshot_get(g_st, (ab_str_t){tn, 2}, &doc, &pos, &err), &err, "snapshot");
        ab_buf_free(&doc);
        check(ab__store_thread_heads(g_st, (ab_str_t){tn, 2}, NULL, NULL, &err), &err, "heads");
    }
    int64_t n = read_one(AB_REPLAY_ALL, NULL, NULL, 0, UINT32_MAX);
    if (whole && n >= 0 && n != counted())
        abort(); /* an AB_OK read left records out */
    read_one(AB_REPLAY_ALL, NULL, NULL, 7, 5);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    if (g_st == NULL)
        build();
    if (sqlite3_exec(g_st->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        die("begin", NULL);
    edits(data, size);
    reads((data[1] & 2) == 0);
    sqlite3_exec(g_st->db, "ROLLBACK", NULL, NULL, NULL);
    return 0;
}

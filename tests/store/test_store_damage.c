/*
 * test_store_damage.c - a store damaged by hand (docs/STORE.md "Chains and anchors"):
 * broken chains of a run are refused AB_CORRUPT, naming the run, the chunk and what is
 * wrong, while the run beside them still reads; a chunk that is gone is read around; rows
 * out of order end a read; a thread's dense segment, found by a scan of its range
 * (store/store_walk.c invariant 6, store/store_read.c invariant 7), needs none of its links,
 * still names a damaged distance or a segment too long, and refuses a chunk whose run is
 * gone. Each store is two runs of thread t0 written in a few commits, then changed in SQL.
 *
 * sqlite3.h comes in (by store_int.h) for the statements that damage the store.
 */
#include "store.h"
#include "store_fixture.h"
#include "store_int.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The store's fixture (first, so sf_fx_teardown() frees the whole) and where the intact
 * file is kept while a test damages copies of it. */
typedef struct fx {
    sf_fx_t sf;
    char path[128], keep[160]; /* keep[0] == 0: nothing kept */
} fx_t;

static int setup(void **state)
{
    return sf_fx_setup_sized(state, "damage", true, sizeof(fx_t));
}

static int teardown(void **state)
{
    fx_t *f = *state;
    if (f && f->keep[0])
        unlink(f->keep);
    return sf_fx_teardown(state);
}

static void copy_file(const char *from, const char *to)
{
    size_t n = 0;
    char *data = tu_read_file(from, &n);
    assert_non_null(data);
    FILE *out = fopen(to, "wb");
    assert_non_null(out);
    assert_int_equal(fwrite(data, 1, n, out), n);
    assert_int_equal(fclose(out), 0);
    free(data);
}

/* Keep a copy of the (closed) intact store, to damage it anew with damage(). */
static void keep_intact(fx_t *f)
{
    snprintf(f->path, sizeof f->path, "%s/%s", f->sf.dir, AB_STORE_DB_NAME);
    snprintf(f->keep, sizeof f->keep, "%s.keep", f->path);
    copy_file(f->path, f->keep);
}

/* The store put back as it was kept (when keep_intact() kept it; else as it is), damaged
 * by @p sql and opened to read. */
static void damage(fx_t *f, const char *sql)
{
    if (f->keep[0])
        copy_file(f->keep, f->path);
    sf_exec(f->sf.dir, sql);
    f->sf.st = open_ok(f->sf.dir, true);
}

/* Run r0 of thread t0 in @p n commits of one event each, with run q0 of t0 beside it. */
static void two_runs(fx_t *f, int n)
{
    for (int i = 0; i < n; i++) {
        static const char *const ids[2] = {"r0", "q0"};
        char b[2][32];
        ab_append_event_t evs[2];
        for (int k = 0; k < 2; k++) {
            snprintf(b[k], sizeof b[k], "%s#%d", ids[k], i + 1);
            evs[k] = (ab_append_event_t){.thread = {"t0", 2},
                                         .run = {ids[k], 2},
                                         .seq = (uint64_t)i + 1,
                                         .epoch = 1,
                                         .bytes = (const uint8_t *)b[k],
                                         .len = strlen(b[k])};
        }
        uint64_t first = 0;
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab__store_append_batch(f->sf.st, evs, 2, 1000, &first, &err), AB_OK);
    }
    ab__store_close(&f->sf.st);
}

/* The seqs a read of run @p run delivers, as "1,2,3,"; its status. */
static int seqs_cb(void *ud, const ab_row_t *row)
{
    char *out = ud;
    size_t l = strlen(out);
    snprintf(out + l, 256 - l, "%llu,", (unsigned long long)row->seq);
    return 0;
}

static ab_status_t read_seqs(ab_store_t *st, const char *run, char out[256], ab_error_t *err)
{
    out[0] = '\0';
    ab_read_t req = {.scope = AB_REPLAY_RUN,
                     .thread = {"t0", 2},
                     .run = {run, strlen(run)},
                     .limit = UINT32_MAX};
    return ab__store_read(st, &req, seqs_cb, out, NULL, err);
}

static ab_status_t read_thread_n(ab_store_t *st, uint32_t *n, ab_error_t *err)
{
    ab_read_t req = {.scope = AB_REPLAY_THREAD, .thread = {"t0", 2}, .limit = UINT32_MAX};
    return ab__store_read(st, &req, NULL, NULL, n, err);
}

/* A read of thread t0 is refused AB_CORRUPT saying @p says (and @p also, unless NULL),
 * after the walk took @p walked of its segments by their links; the store is closed. */
static void thread_refused(fx_t *f, const char *says, const char *also, uint64_t walked)
{
    uint32_t n = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(read_thread_n(f->sf.st, &n, &err), AB_CORRUPT);
    if (strstr(err.message, says) == NULL || (also && strstr(err.message, also) == NULL))
        fail_msg("'%s' does not say '%s'%s%s", err.message, says, also ? " and " : "",
                 also ? also : "");
    assert_int_equal(f->sf.st->segs_walked, walked);
    ab__store_close(&f->sf.st);
}

#define R0_CHUNK(seq)                                                                              \
    "(SELECT c.rowid FROM chunks c JOIN runs r ON r.rowid = c.run_rowid WHERE r.run = 'r0'"        \
    " AND c.first_seq = " #seq ")"

/* A chunk deleted by hand from the middle of both its chains: reads go around it (the
 * range scan of store_walk.c invariant 5) and deliver everything else, in order. */
static void test_gone_chunk_is_read_around(void **state)
{
    fx_t *f = *state;
    two_runs(f, 5);
    damage(f, "DELETE FROM chunks WHERE rowid = " R0_CHUNK(3));
    char out[256];
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(read_seqs(f->sf.st, "r0", out, &err), AB_OK);
    assert_string_equal(out, "1,2,4,5,");
    assert_int_equal(read_seqs(f->sf.st, "q0", out, &err), AB_OK);
    assert_string_equal(out, "1,2,3,4,5,");
    uint32_t n = 0;
    assert_int_equal(read_thread_n(f->sf.st, &n, &err), AB_OK);
    assert_int_equal(n, 9);
    ab__store_close(&f->sf.st); /* the run's newest chunk gone: the tail names a missing row */
    damage(f, "DELETE FROM chunks WHERE rowid = " R0_CHUNK(5));
    assert_int_equal(read_seqs(f->sf.st, "r0", out, &err), AB_OK);
    assert_string_equal(out, "1,2,4,");
}

/* Links that no writer makes are AB_CORRUPT, naming the run and the chunk; the run beside it
 * still reads. */
static void damaged(fx_t *f, const char *sql, const char *why)
{
    damage(f, sql);
    char out[256];
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(read_seqs(f->sf.st, "r0", out, &err), AB_CORRUPT);
    if (strstr(err.message, "is damaged: the chain of run ") == NULL ||
        strstr(err.message, why) == NULL)
        fail_msg("'%s' does not say '%s'", err.message, why);
    ab_error_t e2 = AB_ERROR_INIT;
    assert_int_equal(read_seqs(f->sf.st, "q0", out, &e2), AB_OK);
    assert_string_equal(out, "1,2,3,4,5,");
    ab__store_close(&f->sf.st);
}

/* Run r0 of thread t0: seqs 1 to 3 in one commit (one chunk of three records of 28 bytes,
 * "r0#1" and so on), then 4 and 5 in commits of their own. */
static void three_in_one(fx_t *f)
{
    static const char *const bytes[5] = {"r0#1", "r0#2", "r0#3", "r0#4", "r0#5"};
    ab_append_event_t evs[5];
    for (int i = 0; i < 5; i++)
        evs[i] = (ab_append_event_t){.thread = {"t0", 2},
                                     .run = {"r0", 2},
                                     .seq = (uint64_t)i + 1,
                                     .epoch = 1,
                                     .bytes = (const uint8_t *)bytes[i],
                                     .len = 4};
    static const size_t from[3] = {0, 3, 4}, count[3] = {3, 1, 1};
    for (int c = 0; c < 3; c++) {
        uint64_t first = 0;
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(
            ab__store_append_batch(f->sf.st, &evs[from[c]], count[c], 1000, &first, &err), AB_OK);
    }
    ab__store_close(&f->sf.st);
}

/* A chunk whose stored records are another chunk's (a blob copied over it), its chain intact:
 * the walk cannot see it, the read does - the records disagree with the row's first_seq
 * (store_read.c invariant 2), so the run is refused after what came before, never delivered
 * out of order, and a read from a cursor past the copied seq no longer leaves seq 3 out
 * unsaid (it delivered 4 and 5, AB_OK); the thread is refused too (it delivered the copied
 * record as seq 3's); the run beside it still reads. */
static void test_records_of_another_chunk_are_refused(void **state)
{
    fx_t *f = *state;
    two_runs(f, 5);
    damage(f, "UPDATE chunks SET data = (SELECT data FROM chunks WHERE rowid = " R0_CHUNK(
                  1) ") WHERE rowid = " R0_CHUNK(3));
    char out[256];
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(read_seqs(f->sf.st, "r0", out, &err), AB_CORRUPT);
    assert_string_equal(out, "1,2,");
    assert_non_null(strstr(err.message, "record 1 (position 5, seq 1) is not its row's first"
                                        " (position 5, seq 3)"));
    ab_read_t req = {.scope = AB_REPLAY_RUN,
                     .thread = {"t0", 2},
                     .run = {"r0", 2},
                     .after_seq = 2,
                     .limit = UINT32_MAX};
    ab_error_t e1 = AB_ERROR_INIT;
    out[0] = '\0';
    assert_int_equal(ab__store_read(f->sf.st, &req, seqs_cb, out, NULL, &e1), AB_CORRUPT);
    assert_string_equal(out, "");
    ab_error_t e2 = AB_ERROR_INIT;
    assert_int_equal(read_seqs(f->sf.st, "q0", out, &e2), AB_OK);
    assert_string_equal(out, "1,2,3,4,5,");
    uint32_t n = 0;
    ab_error_t e3 = AB_ERROR_INIT;
    assert_int_equal(read_thread_n(f->sf.st, &n, &e3), AB_CORRUPT);
    assert_non_null(strstr(e3.message, "is not its row's first"));
}

/* Records of one chunk out of order, its first and last agreeing with its row: a run's seqs
 * must rise (store_read.c invariant 5), so the run is refused after what came before. */
static void test_rows_out_of_order_are_refused(void **state)
{
    fx_t *f = *state;
    three_in_one(f); /* chunk 1: seqs 1, 2, 3; record 2's seq at byte 36 */
    damage(f, "UPDATE chunks SET data = substr(data, 1, 36) || x'0500000000000000' ||"
              " substr(data, 45) WHERE rowid = 1");
    char out[256];
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(read_seqs(f->sf.st, "r0", out, &err), AB_CORRUPT);
    assert_string_equal(out, "1,5,");
    assert_non_null(strstr(err.message, "is damaged: its rows are out of order after seq 5"));
}

static void test_damaged_chains_are_refused(void **state)
{
    fx_t *f = *state;
    two_runs(f, 5);
    keep_intact(f);
    const char *cases[][2] = {
        {"UPDATE chunks SET prev_run = (SELECT c.rowid FROM chunks c JOIN runs r ON"
         " r.rowid = c.run_rowid WHERE r.run = 'q0' AND c.first_seq = 2) WHERE rowid = " R0_CHUNK(
             4),
         "chunk of another owner"},
        {"UPDATE chunks SET prev_run = " R0_CHUNK(5) " WHERE rowid = " R0_CHUNK(3), "link upwards"},
        {"UPDATE chunks SET run_dist = 7 WHERE rowid = " R0_CHUNK(3), "distance"},
        {"UPDATE chunks SET last_seq = 9 WHERE rowid = " R0_CHUNK(3), "order"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        damaged(f, cases[i][0], cases[i][1]);
}

/* A thread's dense segment is found by a scan of its range (store_walk.c invariant 6): a link
 * of its chain damaged by hand is not needed there, and every stored row is read (the walk
 * would have ended the chain at it); a distance that does not count up makes the read walk
 * the links instead, which name the damage; a chunk whose run is gone is refused. */
static void test_thread_segments_by_scan(void **state)
{
    fx_t *f = *state;
    two_runs(f, 5);
    keep_intact(f);
    damage(f, "UPDATE chunks SET prev_thread = 0 WHERE rowid = " R0_CHUNK(4));
    uint32_t n = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(read_thread_n(f->sf.st, &n, &err), AB_OK);
    assert_int_equal(n, 10);
    assert_int_equal(f->sf.st->segs_scanned, 2); /* the first anchor, then up to the tail */
    assert_int_equal(f->sf.st->segs_walked, 0);
    ab__store_close(&f->sf.st);
    damage(f, "UPDATE chunks SET thread_dist = 7 WHERE rowid = " R0_CHUNK(3));
    thread_refused(f, "the chain of thread ", "distance", 1);
    /* a scanned segment's records come from a scan joined with the runs (store_read.c
     * invariant 7): a chunk whose run is gone is not skipped by the join but refused */
    damage(f, "DELETE FROM runs WHERE run = 'r0'");
    thread_refused(f, "or its run is missing", NULL, 0);
}

/* A scan that finds more chunks than a segment may hold is not used, however well their
 * distances count (store_walk.c invariant 6): the walk names the segment too long. */
static void test_thread_segment_too_long(void **state)
{
    fx_t *f = *state;
    two_runs(f, 33); /* 66 chunks of thread t0, rowids 1 to 66, distances 0..63, 0, 1 */
    damage(f, "UPDATE chunks SET thread_dist = thread_dist + 64 WHERE rowid > 64");
    thread_refused(f, "segment too long", NULL, 1);
}

/* Every scope's read of the damaged store is AB_CORRUPT saying @p says; the store is closed. */
static void records_refused(fx_t *f, const char *says)
{
    char out[256];
    ab_read_t all = {.scope = AB_REPLAY_ALL, .limit = UINT32_MAX};
    ab_error_t e[3] = {AB_ERROR_INIT, AB_ERROR_INIT, AB_ERROR_INIT};
    uint32_t n = 0;
    ab_status_t s[3] = {read_seqs(f->sf.st, "r0", out, &e[0]), read_thread_n(f->sf.st, &n, &e[1]),
                        ab__store_read(f->sf.st, &all, NULL, NULL, &n, &e[2])};
    for (int i = 0; i < 3; i++) {
        if (s[i] != AB_CORRUPT)
            fail_msg("scope %d: %s, not AB_CORRUPT (%s)", i, ab_status_name(s[i]), out);
        if (strstr(e[i].message, "is damaged: chunk 1 ") == NULL ||
            strstr(e[i].message, says) == NULL)
            fail_msg("'%s' does not say 'chunk 1' and '%s'", e[i].message, says);
    }
    ab__store_close(&f->sf.st);
}

/* A chunk's data must be the n records its row counts (store_read.c invariant 2): data cut at
 * a record's end (before, the read left those events out and said nothing), cut inside a
 * header, a length past the end, more records than n: every scope refuses the read,
 * naming the chunk and what is wrong with it. */
static void test_chunk_records_damaged(void **state)
{
    fx_t *f = *state;
    three_in_one(f);
    keep_intact(f);
    damage(f, "UPDATE chunks SET data = substr(data, 1, 56) WHERE rowid = 1");
    records_refused(f, "holds fewer records than the 3 its row counts (56 bytes)");
    damage(f, "UPDATE chunks SET data = x'' WHERE rowid = 1");
    records_refused(f, "holds fewer records than the 3 its row counts (0 bytes)");
    damage(f, "UPDATE chunks SET data = substr(data, 1, 40) WHERE rowid = 1");
    records_refused(f, "record 2 at byte 28: its 24-byte header runs past the end");
    damage(f, "UPDATE chunks SET data = substr(data, 1, 60) || x'ffffff7f' || substr(data, 65)"
              " WHERE rowid = 1");
    records_refused(f, "record 3 at byte 56: its 2147483647 bytes run past the end");
    damage(f, "UPDATE chunks SET n = 2 WHERE rowid = 1");
    records_refused(f, "record 2 (position 2, seq 2) is not its row's last (position 3, seq 3)");
    damage(f, "UPDATE chunks SET n = 2, last_seq = 2, last_pos = 2 WHERE rowid = 1");
    records_refused(f, "holds more records than the 2 its row counts");
    damage(f, "UPDATE chunks SET n = 3 WHERE rowid = 1"); /* intact again: it reads whole */
    char out[256];
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(read_seqs(f->sf.st, "r0", out, &err), AB_OK);
    assert_string_equal(out, "1,2,3,4,5,");
}

/* A chunk whose run's row is gone is refused by an all read too (its join skipped it: the
 * read answered AB_OK without those events), as by a thread read. */
static void test_all_read_refuses_a_chunk_without_run(void **state)
{
    fx_t *f = *state;
    two_runs(f, 3);
    damage(f, "DELETE FROM runs WHERE run = 'r0'");
    ab_read_t all = {.scope = AB_REPLAY_ALL, .limit = UINT32_MAX};
    ab_error_t err = AB_ERROR_INIT;
    uint32_t n = 0;
    assert_int_equal(ab__store_read(f->sf.st, &all, NULL, NULL, &n, &err), AB_CORRUPT);
    assert_non_null(strstr(err.message, "is damaged: chunk 1 or its run is missing"));
}

/* A head of run r0 and the heads of thread t0 are AB_CORRUPT saying @p says; the head of q0
 * still reads; the store is closed. */
static void head_refused(fx_t *f, const char *says)
{
    ab_run_head_t h;
    ab_error_t err = AB_ERROR_INIT, e2 = AB_ERROR_INIT;
    ab_status_t s = ab__store_head(f->sf.st, (ab_str_t){"t0", 2}, (ab_str_t){"r0", 2}, &h, &err);
    if (s != AB_CORRUPT)
        fail_msg("%s, not AB_CORRUPT (status %d)", ab_status_name(s), (int)h.status);
    if (strstr(err.message, "is damaged: run r0 of thread t0 has the ") == NULL ||
        strstr(err.message, says) == NULL)
        fail_msg("'%s' does not say '%s'", err.message, says);
    assert_int_equal(ab__store_thread_heads(f->sf.st, (ab_str_t){"t0", 2}, NULL, NULL, &e2),
                     AB_CORRUPT);
    assert_non_null(strstr(e2.message, says));
    assert_int_equal(ab__store_head(f->sf.st, (ab_str_t){"t0", 2}, (ab_str_t){"q0", 2}, &h, &e2),
                     AB_OK);
    assert_int_equal(h.status, AB_RUN_STATUS_ACTIVE);
    ab__store_close(&f->sf.st);
}

/* A runs row whose status or outcome is a text no writer stores (its CHECK constraints keep
 * SQL out; a damaged page or a hand edit with them off does not) is refused where it read as
 * a run never started (status unknown: a finished run open to events again). */
static void test_run_row_damaged(void **state)
{
    fx_t *f = *state;
    two_runs(f, 2);
    keep_intact(f);
    damage(f, "PRAGMA ignore_check_constraints = ON;"
              "UPDATE runs SET status = 'finishd' WHERE run = 'r0'");
    head_refused(f, "status 'finishd'");
    damage(f, "PRAGMA ignore_check_constraints = ON;"
              "UPDATE runs SET status = 'finished', outcome = 'sucess' WHERE run = 'r0'");
    head_refused(f, "outcome 'sucess'");
    damage(f, "UPDATE runs SET status = 'finished', outcome = 'success' WHERE run = 'r0'");
    ab_run_head_t h;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_head(f->sf.st, (ab_str_t){"t0", 2}, (ab_str_t){"r0", 2}, &h, &err),
                     AB_OK);
    assert_int_equal(h.status, AB_RUN_STATUS_FINISHED);
    assert_int_equal(h.outcome, AB_OUTCOME_SUCCESS);
}

/* A thread whose tail names a chunk that is gone is refused by the listing, which names the
 * database and the thread (it said only "thread 't0' has no newest chunk"). */
static void test_threads_list_names_the_damage(void **state)
{
    fx_t *f = *state;
    two_runs(f, 2);
    damage(f, "DELETE FROM chunks WHERE rowid = (SELECT chunk FROM thread_tails)");
    uint32_t n = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_threads_list(f->sf.st, (ab_str_t){"", 0}, (ab_str_t){"", 0}, 10,
                                            NULL, NULL, &n, &err),
                     AB_CORRUPT);
    if (strstr(err.message, "is damaged: the newest chunk of thread 't0' (its tail)") == NULL ||
        strstr(err.message, f->sf.dir) == NULL)
        fail_msg("'%s' does not name the database and the thread's tail", err.message);
}

/* The seqs of run r0 read; AB_CORRUPT naming "the chain of run 1" and @p says. */
static void tail_refused(fx_t *f, const char *says)
{
    char out[256];
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = read_seqs(f->sf.st, "r0", out, &err);
    if (s != AB_CORRUPT)
        fail_msg("%s, not AB_CORRUPT: %s", ab_status_name(s), out);
    if (strstr(err.message, "is damaged: the chain of run 1 breaks at chunk ") == NULL ||
        strstr(err.message, says) == NULL)
        fail_msg("'%s' does not say '%s'", err.message, says);
    ab__store_close(&f->sf.st);
}

/* A tail below its chain's newest anchor, one of chunk 0, or none beside anchors is refused
 * (store_walk.c invariant 7): the read ended at the anchor (or found nothing past it) and
 * answered AB_OK without the run's newer events. A tail that is the newest anchor itself is
 * the chain's end. */
static void test_tail_below_the_last_anchor(void **state)
{
    fx_t *f = *state;
    two_runs(f, 70); /* r0: 70 chunks, anchors at seqs 1 and 65, tail at 70 */
    keep_intact(f);
    damage(f, "UPDATE run_tails SET chunk = " R0_CHUNK(60) " WHERE rowid = 1");
    tail_refused(f, "tail below the last anchor");
    damage(f, "UPDATE run_tails SET chunk = 0 WHERE rowid = 1");
    tail_refused(f, "a tail that names no chunk");
    damage(f, "DELETE FROM run_tails WHERE rowid = 1");
    tail_refused(f, "no tail above the last anchor");
    damage(f, "DELETE FROM run_tails WHERE rowid = 1"); /* read from past the last anchor */
    char past[256] = "";
    ab_read_t req = {.scope = AB_REPLAY_RUN,
                     .thread = {"t0", 2},
                     .run = {"r0", 2},
                     .after_seq = 66,
                     .limit = UINT32_MAX};
    ab_error_t e2 = AB_ERROR_INIT;
    assert_int_equal(ab__store_read(f->sf.st, &req, seqs_cb, past, NULL, &e2), AB_CORRUPT);
    assert_non_null(strstr(e2.message, "(an anchor but no tail)"));
    ab__store_close(&f->sf.st);
    damage(f, "UPDATE run_tails SET chunk = " R0_CHUNK(
                  65) " WHERE rowid = 1;"
                      "DELETE FROM chunks WHERE rowid > " R0_CHUNK(65) " AND run_rowid = 1");
    char out[256];
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(read_seqs(f->sf.st, "r0", out, &err), AB_OK);
    assert_int_equal(strlen(out), 9 * 2 + 56 * 3); /* "1," .. "65," */
}

/* A block of the tails log whose chunk is 0 (or below) is damage (store_tails.c invariant 2),
 * as one whose id is: a read of run r0 from past its only anchor took an older generation's
 * tail of r0 instead and answered AB_OK without seq 4. */
static void test_logged_tail_of_no_chunk(void **state)
{
    fx_t *f = *state;
    ab__store_close(&f->sf.st);
    ab_store_opts_t o = {.tails_direct = -1}; /* every tail to the logs */
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_open(&f->sf.st, f->sf.dir, &o, &err), AB_OK);
    two_runs(f, 4);
    damage(f, "UPDATE run_tails_log SET tails = substr(tails, 1, 8) || zeroblob(8) ||"
              " substr(tails, 17) WHERE gen = (SELECT max(gen) FROM run_tails_log) AND first = 1");
    char out[256] = "";
    ab_read_t req = {.scope = AB_REPLAY_RUN,
                     .thread = {"t0", 2},
                     .run = {"r0", 2},
                     .after_seq = 1,
                     .limit = UINT32_MAX};
    ab_status_t s = ab__store_read(f->sf.st, &req, seqs_cb, out, NULL, &err);
    if (s != AB_CORRUPT)
        fail_msg("%s, not AB_CORRUPT: '%s'", ab_status_name(s), out);
    assert_non_null(strstr(err.message, "damaged block of a tails log"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gone_chunk_is_read_around, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_chains_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_records_of_another_chunk_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rows_out_of_order_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_thread_segments_by_scan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_thread_segment_too_long, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunk_records_damaged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_all_read_refuses_a_chunk_without_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_row_damaged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_list_names_the_damage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tail_below_the_last_anchor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_logged_tail_of_no_chunk, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

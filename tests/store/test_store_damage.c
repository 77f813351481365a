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

/* A chunk whose stored records are another chunk's (a blob copied over it), its chain intact:
 * the walk cannot see it, the read does - a run's seqs must rise (store_read.c invariant
 * 5), so the run is refused after what came before, never delivered out of order; the run
 * beside it still reads. fuzz_store_chain found the same
 * gap with a chunk moved to another run (input regress-run-rowid-moved). */
static void test_rows_out_of_order_are_refused(void **state)
{
    fx_t *f = *state;
    two_runs(f, 5);
    damage(f, "UPDATE chunks SET data = (SELECT data FROM chunks WHERE rowid = " R0_CHUNK(
                  1) ") WHERE rowid = " R0_CHUNK(3));
    char out[256];
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(read_seqs(f->sf.st, "r0", out, &err), AB_CORRUPT);
    assert_string_equal(out, "1,2,");
    assert_non_null(strstr(err.message, "is damaged: its rows are out of order after seq 2"));
    ab_error_t e2 = AB_ERROR_INIT;
    assert_int_equal(read_seqs(f->sf.st, "q0", out, &e2), AB_OK);
    assert_string_equal(out, "1,2,3,4,5,");
    uint32_t n = 0;
    ab_error_t e3 = AB_ERROR_INIT;
    /* a thread's rows rise by position, which a record keeps relative to its commit: the
     * copied record is at the place of the one it replaced, so the thread reads whole */
    assert_int_equal(read_thread_n(f->sf.st, &n, &e3), AB_OK);
    assert_int_equal(n, 10);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gone_chunk_is_read_around, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_chains_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rows_out_of_order_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_thread_segments_by_scan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_thread_segment_too_long, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

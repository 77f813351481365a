/*
 * test_store_snap.c - snapshots stored whole and in parts (store/store_snap.c):
 * the parts of a finished sequence read back as one document; a sequence not
 * finished, or finished with a part missing, leaves the stored snapshot as it
 * was (also for a reader beside the writer); positions never go back; and
 * each put deletes at most one part no stored snapshot uses, so an older
 * document's parts go one per later put.
 *
 * Like test_store_req.c this file includes sqlite3.h, for one thing only: to
 * count the part rows left in the database.
 */
#include "store.h"
#include "store_fixture.h"
#include "testutil.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

typedef sf_fx_t fx_t;

static int setup(void **state)
{
    return sf_fx_setup(state, "snap", true);
}

static int teardown(void **state)
{
    return sf_fx_teardown(state);
}

static const ab_str_t T = {"thread-1", 8};

static void put_whole(fx_t *f, uint64_t pos, const char *doc)
{
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_snapshot_put(f->st, T, pos, (const uint8_t *)doc, strlen(doc), &err),
                     AB_OK);
}

static ab_status_t put_part(fx_t *f, uint64_t pos, uint32_t idx, const char *part, bool last)
{
    ab_error_t err = AB_ERROR_INIT;
    return ab__store_snapshot_put_part(f->st, T, pos, idx, (const uint8_t *)part, strlen(part),
                                       last, &err);
}

/* The document @p parts, stored one part per call at @p pos. */
static void put_parts(fx_t *f, uint64_t pos, const char *const *parts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_int_equal(put_part(f, pos, (uint32_t)i, parts[i], i + 1 == n), AB_OK);
}

/* The stored document of T on @p st is @p want at @p want_pos. */
static void expect_doc(ab_store_t *st, uint64_t want_pos, const char *want)
{
    ab_buf_t doc = AB_BUF_INIT;
    uint64_t pos = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_snapshot_get(st, T, &doc, &pos, &err), AB_OK);
    assert_int_equal(pos, want_pos);
    assert_int_equal(doc.len, strlen(want));
    assert_memory_equal(doc.data, want, doc.len);
    ab_buf_free(&doc);
}

static int64_t part_rows(fx_t *f)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", f->dir, AB_STORE_DB_NAME);
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM snapshot_parts", -1, &q, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    int64_t n = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return n;
}

static void test_parts_read_back_whole(void **state)
{
    fx_t *f = *state;
    static const char *const parts[] = {"{\"a\":", "[1,2,", "3]}"};
    put_parts(f, 10, parts, 3);
    expect_doc(f->st, 10, "{\"a\":[1,2,3]}");
    ab_store_t *r = open_ok(f->dir, true); /* a reader sees it too */
    expect_doc(r, 10, "{\"a\":[1,2,3]}");
    ab__store_close(&r);
    /* a one-part sequence is a document too */
    assert_int_equal(put_part(f, 11, 0, "one", true), AB_OK);
    expect_doc(f->st, 11, "one");
}

static void test_unfinished_sequence_changes_nothing(void **state)
{
    fx_t *f = *state;
    put_whole(f, 5, "old");
    ab_store_t *r = open_ok(f->dir, true);
    assert_int_equal(put_part(f, 9, 0, "new-", false), AB_OK);
    assert_int_equal(put_part(f, 9, 1, "doc-", false), AB_OK);
    expect_doc(f->st, 5, "old"); /* the writer and a reader beside it: still the old one */
    expect_doc(r, 5, "old");
    assert_int_equal(put_part(f, 9, 2, "end", true), AB_OK);
    expect_doc(r, 9, "new-doc-end");
    ab__store_close(&r);
    /* a sequence abandoned half-way, then another one of the thread: only the new one counts */
    assert_int_equal(put_part(f, 12, 0, "lost", false), AB_OK);
    assert_int_equal(put_part(f, 14, 0, "kept", true), AB_OK);
    expect_doc(f->st, 14, "kept");
}

static void test_missing_part_refused(void **state)
{
    fx_t *f = *state;
    put_whole(f, 5, "old");
    assert_int_equal(put_part(f, 9, 0, "a", false), AB_OK);
    ab_error_t err = AB_ERROR_INIT; /* part 1 never stored */
    assert_int_equal(
        ab__store_snapshot_put_part(f->st, T, 9, 2, (const uint8_t *)"c", 1, true, &err),
        AB_INVALID_ARGUMENT);
    assert_non_null(
        strstr(err.message, "last part 2 of the snapshot of thread-1 at 9, but only 2"));
    expect_doc(f->st, 5, "old");
    /* bad arguments */
    assert_int_equal(
        ab__store_snapshot_put_part(f->st, T, 9, 0, (const uint8_t *)"", 0, true, &err),
        AB_INVALID_ARGUMENT);
    assert_int_equal(
        ab__store_snapshot_put_part(f->st, T, 0, 0, (const uint8_t *)"x", 1, true, &err),
        AB_INVALID_ARGUMENT);
    ab_store_t *r = open_ok(f->dir, true);
    assert_int_equal(ab__store_snapshot_put_part(r, T, 20, 0, (const uint8_t *)"x", 1, true, &err),
                     AB_INVALID_ARGUMENT); /* readonly */
    ab__store_close(&r);
}

/* A get of T is AB_CORRUPT naming the database and saying @p says. */
static void get_refused(fx_t *f, const char *says)
{
    ab_buf_t doc = AB_BUF_INIT;
    uint64_t pos = 0;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = ab__store_snapshot_get(f->st, T, &doc, &pos, &err);
    if (s != AB_CORRUPT)
        fail_msg("%s, not AB_CORRUPT (%zu bytes)", ab_status_name(s), doc.len);
    if (strstr(err.message, "is damaged: the snapshot of thread-1 at ") == NULL ||
        strstr(err.message, says) == NULL)
        fail_msg("'%s' does not say '%s'", err.message, says);
    ab_buf_free(&doc);
}

/* A snapshot row or part no put writes (damage by hand) is refused AB_CORRUPT, saying what is
 * wrong, where the get answered AB_OK with an empty or a wrong document. */
static void test_damaged_rows_refused(void **state)
{
    fx_t *f = *state;
    static const char *const parts[] = {"ab", "cd"};
    put_parts(f, 10, parts, 2);
    sf_exec(f->dir, "UPDATE snapshots SET parts = -1");
    get_refused(f, "at 10 counts -1 parts");
    sf_exec(f->dir, "UPDATE snapshots SET parts = 2, doc = x'00'");
    get_refused(f, "has both a document and 2 parts");
    sf_exec(f->dir, "UPDATE snapshots SET parts = 2, doc = x''; UPDATE snapshot_parts"
                    " SET data = x'' WHERE idx = 1");
    get_refused(f, "has an empty part 1");
    sf_exec(f->dir, "DELETE FROM snapshot_parts WHERE idx = 1");
    get_refused(f, "has 2 parts, part 1 is missing");
    put_whole(f, 11, "whole");
    sf_exec(f->dir, "UPDATE snapshots SET doc = x''");
    get_refused(f, "at 11 is empty");
    sf_exec(f->dir, "UPDATE snapshots SET doc = CAST('whole' AS BLOB)");
    expect_doc(f->st, 11, "whole");
}

static void test_positions_never_go_back(void **state)
{
    fx_t *f = *state;
    static const char *const parts[] = {"ten-", "parts"};
    put_parts(f, 10, parts, 2);
    assert_int_equal(put_part(f, 8, 0, "eight", true), AB_OK); /* ignored */
    expect_doc(f->st, 10, "ten-parts");
    put_whole(f, 9, "nine"); /* ignored too */
    expect_doc(f->st, 10, "ten-parts");
    put_whole(f, 11, "eleven"); /* a whole document after one in parts */
    expect_doc(f->st, 11, "eleven");
    static const char *const again[] = {"twelve-", "in-", "parts"};
    put_parts(f, 12, again, 3); /* and parts after a whole one */
    expect_doc(f->st, 12, "twelve-in-parts");
}

static void test_old_parts_deleted_one_per_put(void **state)
{
    fx_t *f = *state;
    static const char *const a[] = {"a0", "a1", "a2", "a3"};
    static const char *const b[] = {"b0", "b1"};
    put_parts(f, 10, a, 4);
    assert_int_equal(part_rows(f), 4);
    put_parts(f, 20, b, 2); /* its last call makes a's parts stale, and deletes one */
    expect_doc(f->st, 20, "b0b1");
    assert_int_equal(part_rows(f), 2 + 3);
    static const char *const whole[] = {"w30", "w31", "w32", "w33", "w34", "w35"};
    for (int i = 0; i < 6; i++) { /* each whole put deletes one more: a's, then b's */
        put_whole(f, 30 + (uint64_t)i, whole[i]);
        assert_int_equal(part_rows(f), i < 5 ? 4 - i : 0);
    }
    expect_doc(f->st, 35, "w35");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_parts_read_back_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unfinished_sequence_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_part_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_rows_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_positions_never_go_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_old_parts_deleted_one_per_put, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

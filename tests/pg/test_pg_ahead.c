/*
 * test_pg_ahead.c - a thread read page by page gives exactly the rows of one
 * read, whatever the page size and whatever else the handle reads between
 * pages, and the same for a run and for everything; what a read fetched past
 * its page is served to the page that continues it (plugin/postgres/pg_read.c
 * invariant 7).
 *
 * The events: thread "t" with five runs, thread "u" with two, written in
 * batches that interleave the runs and the threads (so a batch holds several
 * chunks of "t" whose positions interleave, and page boundaries fall inside
 * batches).
 */
#define PGMOD_FILE_SERVER
#include "pg_module.h"

#include "agentbus/plugin.h"
#include "loader.h"
#include "testutil.h"

#define RUNS_T  5
#define RUNS_U  2
#define BATCHES 24
#define PER_RUN 3 /* events of each run in each batch */
#define ROWS_T  (RUNS_T * BATCHES * PER_RUN)

static ab_plugin_db_t *open_db(bool readonly)
{
    return pgmod_open(P, &g_pg, readonly, AB_DURABILITY_FSYNC);
}

/* ---- writing ---------------------------------------------------------------------------- */

#define EV_MAX ((RUNS_T + RUNS_U) * PER_RUN)

typedef struct batch {
    ab_append_event_t ev[EV_MAX];
    char body[EV_MAX][48];
    char run[RUNS_T + RUNS_U][8];
    size_t n;
} batch_t;

/* Batch @p b (0-based): PER_RUN events of every run, the runs round robin. */
static void append_batch(ab_plugin_db_t *w, int b)
{
    batch_t *x = calloc(1, sizeof *x);
    assert_non_null(x);
    for (int k = 0; k < PER_RUN; k++) {
        for (int r = 0; r < RUNS_T + RUNS_U; r++) {
            bool in_t = r < RUNS_T;
            snprintf(x->run[r], sizeof x->run[r], "r%d", in_t ? r : r - RUNS_T);
            uint64_t seq = (uint64_t)b * PER_RUN + (uint64_t)k + 1;
            int len = snprintf(x->body[x->n], sizeof x->body[x->n], "%s/%s/%llu", in_t ? "t" : "u",
                               x->run[r], (unsigned long long)seq);
            x->ev[x->n] = (ab_append_event_t){.thread = S(in_t ? "t" : "u"),
                                              .run = S(x->run[r]),
                                              .seq = seq,
                                              .bytes = (const uint8_t *)x->body[x->n],
                                              .len = (size_t)len};
            x->n++;
        }
    }
    uint64_t first = 0;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = P->append_batch(w, x->ev, x->n, 1, &first, &err);
    free(x);
    if (s != AB_OK)
        fail_msg("append: %s: %s", ab_status_name(s), err.message);
}

/* Seqs [from, to] of run r of thread v in one batch (one chunk). */
static void append_v(ab_plugin_db_t *w, uint64_t from, uint64_t to)
{
    ab_append_event_t e[16];
    char body[16][16];
    size_t n = 0;
    for (uint64_t s = from; s <= to && n < 16; s++, n++) {
        int len = snprintf(body[n], sizeof body[n], "v/r/%llu", (unsigned long long)s);
        e[n] = (ab_append_event_t){.thread = S("v"),
                                   .run = S("r"),
                                   .seq = s,
                                   .bytes = (const uint8_t *)body[n],
                                   .len = (size_t)len};
    }
    uint64_t first = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(P->append_batch(w, e, n, 1, &first, &err), AB_OK);
}

/* ---- reading ---------------------------------------------------------------------------- */

typedef struct got {
    uint64_t pos;
    char text[48]; /* the event's bytes: names its thread, run and seq */
} got_t;

typedef struct rows {
    got_t *v;
    size_t n, cap;
} rows_t;

static int collect(void *ud, const ab_row_t *row)
{
    rows_t *rs = ud;
    if (rs->n == rs->cap)
        return 1; /* full: the test sized it */
    got_t *g = &rs->v[rs->n++];
    g->pos = row->pos;
    snprintf(g->text, sizeof g->text, "%.*s", (int)row->len, (const char *)row->bytes);
    return 0;
}

/* Read scope thread @p thread after @p after, at most @p limit rows, appended to @p rs. */
static uint32_t read_thread(ab_plugin_db_t *db, const char *thread, uint64_t after, uint32_t limit,
                            rows_t *rs)
{
    ab_read_t q = {
        .scope = AB_REPLAY_THREAD, .thread = S(thread), .after_pos = after, .limit = limit};
    uint32_t got = 0;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = P->read(db, &q, collect, rs, &got, &err);
    if (s != AB_OK)
        fail_msg("read %s: %s: %s", thread, ab_status_name(s), err.message);
    return got;
}

/* Read run @p run of thread t after seq @p after, at most @p limit rows, appended to @p rs. */
static uint32_t read_run(ab_plugin_db_t *db, const char *run, uint64_t after, uint32_t limit,
                         rows_t *rs)
{
    ab_read_t q = {.scope = AB_REPLAY_RUN,
                   .thread = S("t"),
                   .run = S(run),
                   .after_seq = after,
                   .limit = limit};
    uint32_t got = 0;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = P->read(db, &q, collect, rs, &got, &err);
    if (s != AB_OK)
        fail_msg("read run %s: %s: %s", run, ab_status_name(s), err.message);
    return got;
}

/* Read scope all after @p after, at most @p limit rows, appended to @p rs. */
static uint32_t read_all(ab_plugin_db_t *db, uint64_t after, uint32_t limit, rows_t *rs)
{
    ab_read_t q = {.scope = AB_REPLAY_ALL, .after_pos = after, .limit = limit};
    uint32_t got = 0;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = P->read(db, &q, collect, rs, &got, &err);
    if (s != AB_OK)
        fail_msg("read all: %s: %s", ab_status_name(s), err.message);
    return got;
}

static rows_t rows_new(size_t cap)
{
    rows_t rs = {.v = calloc(cap, sizeof(got_t)), .cap = cap};
    assert_non_null(rs.v);
    return rs;
}

static void assert_same(const rows_t *a, const rows_t *b)
{
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        if (a->v[i].pos != b->v[i].pos || strcmp(a->v[i].text, b->v[i].text) != 0)
            fail_msg("row %zu: pos %llu %s, one read gave pos %llu %s", i,
                     (unsigned long long)a->v[i].pos, a->v[i].text, (unsigned long long)b->v[i].pos,
                     b->v[i].text);
    }
}

/* The rows of @p rs are one run's seqs 1, 2, ... in order (each event's bytes: @p run_prefix
 * and its seq). */
static void assert_seqs(const rows_t *rs, const char *run_prefix)
{
    for (size_t i = 0; i < rs->n; i++) {
        char want[48];
        snprintf(want, sizeof want, "%s%zu", run_prefix, i + 1);
        assert_string_equal(rs->v[i].text, want);
    }
}

static ab_plugin_db_t *g_w, *g_r;
static rows_t g_all; /* thread t read at once */

static void test_write_and_read_at_once(void **state)
{
    (void)state;
    g_w = open_db(false);
    g_r = open_db(true);
    for (int b = 0; b < BATCHES; b++)
        append_batch(g_w, b);
    g_all = rows_new(ROWS_T + 1);
    assert_int_equal(read_thread(g_r, "t", 0, ROWS_T + 1, &g_all), ROWS_T);
    for (size_t i = 1; i < g_all.n; i++)
        assert_true(g_all.v[i].pos > g_all.v[i - 1].pos);
    for (size_t i = 0; i < g_all.n; i++)
        assert_int_equal(strncmp(g_all.v[i].text, "t/", 2), 0);
}

/* Pages of @p limit, each continuing the last; every @p other pages, reads between them. */
static void page_through(ab_plugin_db_t *db, uint32_t limit, int other)
{
    rows_t rs = rows_new(ROWS_T + 1), u = rows_new(RUNS_U * BATCHES * PER_RUN);
    uint64_t after = 0;
    int page = 0;
    for (;;) {
        size_t before = rs.n;
        uint32_t got = read_thread(db, "t", after, limit, &rs);
        assert_int_equal(got, rs.n - before);
        if (got < limit)
            break; /* a short page: nothing more committed */
        after = rs.v[rs.n - 1].pos;
        if (other && ++page % other == 0) {
            u.n = 0; /* another thread, then a page of t from elsewhere, on the same handle */
            assert_int_equal(read_thread(db, "u", 0, (uint32_t)u.cap, &u), u.cap);
            rows_t one = rows_new(1);
            assert_int_equal(read_thread(db, "t", 0, 1, &one), 1);
            assert_int_equal(one.v[0].pos, g_all.v[0].pos);
            free(one.v);
        }
    }
    assert_same(&rs, &g_all);
    free(rs.v);
    free(u.v);
}

static void test_pages_give_the_rows_of_one_read(void **state)
{
    (void)state;
    const uint32_t limits[] = {1, 2, 3, 5, 7, 16, 50, 101, ROWS_T - 1, ROWS_T};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        page_through(g_r, limits[i], 0);
        page_through(g_r, limits[i], 1);
        page_through(g_r, limits[i], 3);
    }
}

#define ROWS_RUN (BATCHES * PER_RUN)

/* Run r2 page by page (seq = row number), reads of run r0 and of thread u between pages
 * every @p other pages. */
static void run_pages(uint32_t limit, int other)
{
    rows_t all = rows_new(ROWS_RUN + 1), rs = rows_new(ROWS_RUN + 1), x = rows_new(ROWS_T);
    assert_int_equal(read_run(g_r, "r2", 0, ROWS_RUN + 1, &all), ROWS_RUN);
    uint64_t after = 0;
    int page = 0;
    for (;;) {
        uint32_t got = read_run(g_r, "r2", after, limit, &rs);
        after = rs.n; /* seqs are 1..n */
        if (got < limit)
            break;
        if (other && ++page % other == 0) {
            x.n = 0;
            assert_int_equal(read_run(g_r, "r0", 0, 5, &x), 5);
            assert_true(read_thread(g_r, "u", 0, 3, &x) == 3);
        }
    }
    assert_same(&rs, &all);
    assert_seqs(&rs, "t/r2/");
    free(all.v);
    free(rs.v);
    free(x.v);
}

static void test_run_pages_give_the_rows_of_one_read(void **state)
{
    (void)state;
    const uint32_t limits[] = {1, 2, 4, 5, 7, 13, ROWS_RUN - 1, ROWS_RUN};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        run_pages(limits[i], 0);
        run_pages(limits[i], 2);
    }
}

/* A callback that stops after @p stop_after rows: the next page continues after the last. */
typedef struct stopper {
    rows_t *rs;
    uint32_t left;
} stopper_t;

static int stop_early(void *ud, const ab_row_t *row)
{
    stopper_t *st = ud;
    collect(st->rs, row);
    return --st->left == 0;
}

static void test_a_callback_stop_is_continued(void **state)
{
    (void)state;
    rows_t rs = rows_new(ROWS_T + 1);
    uint64_t after = 0;
    while (rs.n < ROWS_T) {
        stopper_t st = {.rs = &rs, .left = 4};
        ab_read_t q = {
            .scope = AB_REPLAY_THREAD, .thread = S("t"), .after_pos = after, .limit = 1000};
        uint32_t got = 0;
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(P->read(g_r, &q, stop_early, &st, &got, &err), AB_OK);
        assert_true(got >= 1 && got <= 4);
        after = rs.v[rs.n - 1].pos;
    }
    assert_same(&rs, &g_all);
    free(rs.v);
}

#define ROWS_ALL ((RUNS_T + RUNS_U) * BATCHES * PER_RUN)

/* Scope all page by page (limit @p limit), a read of thread u and a one-row read of
 * everything between pages every @p other pages: the rows of one read, positions 1..n. */
static void all_pages(const rows_t *all, uint32_t limit, int other)
{
    rows_t rs = rows_new(ROWS_ALL + 1), x = rows_new(ROWS_T);
    uint64_t after = 0;
    int page = 0;
    for (;;) {
        size_t before = rs.n;
        uint32_t got = read_all(g_r, after, limit, &rs);
        assert_int_equal(got, rs.n - before);
        if (got < limit)
            break;
        after = rs.v[rs.n - 1].pos;
        if (other && ++page % other == 0) {
            x.n = 0;
            assert_int_equal(read_thread(g_r, "u", 0, 3, &x), 3);
            assert_int_equal(read_all(g_r, 0, 1, &x), 1);
            assert_int_equal(x.v[3].pos, 1);
        }
    }
    assert_same(&rs, all);
    free(rs.v);
    free(x.v);
}

static void test_all_pages_give_the_rows_of_one_read(void **state)
{
    (void)state;
    rows_t all = rows_new(ROWS_ALL + 1);
    assert_int_equal(read_all(g_r, 0, ROWS_ALL + 1, &all), ROWS_ALL);
    for (size_t i = 0; i < all.n; i++)
        assert_int_equal(all.v[i].pos, i + 1); /* positions are dense */
    const uint32_t limits[] = {1, 2, 3, 5, 7, 16, 50, 101, 1000, ROWS_ALL - 1, ROWS_ALL};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        all_pages(&all, limits[i], 0);
        all_pages(&all, limits[i], 1);
        all_pages(&all, limits[i], 4);
    }
    /* a callback that stops: the next page continues after its last row */
    rows_t rs = rows_new(ROWS_ALL + 1);
    while (rs.n < ROWS_ALL) {
        stopper_t st = {.rs = &rs, .left = 3};
        ab_read_t q = {
            .scope = AB_REPLAY_ALL, .after_pos = rs.n ? rs.v[rs.n - 1].pos : 0, .limit = 500};
        uint32_t got = 0;
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(P->read(g_r, &q, stop_early, &st, &got, &err), AB_OK);
        assert_true(got >= 1 && got <= 3);
    }
    assert_same(&rs, &all);
    free(rs.v);
    free(all.v);
}

/* White box: a page of scope all fetches up to four times its limit; the page that continues
 * it is served from what was kept, not the table. */
static void test_the_next_all_page_comes_from_the_kept_window(void **state)
{
    (void)state;
    rows_t first = rows_new(5), next = rows_new(ROWS_ALL);
    assert_int_equal(read_all(g_r, 0, 5, &first), 5);
    PGconn *c = pgfx_connect(&g_pg);
    assert_non_null(c);
    PQclear(PQexec(c, "BEGIN; CREATE TABLE ab_keep AS SELECT * FROM ab_chunks;"
                      " DELETE FROM ab_chunks; COMMIT"));
    assert_int_equal(pgfx_scalar(c, "SELECT count(*) FROM ab_chunks"), 0);
    assert_int_equal(read_all(g_r, 5, 100, &next), 15); /* positions 6..20 of the window */
    for (size_t i = 0; i < next.n; i++)
        assert_int_equal(next.v[i].pos, 6 + i);
    next.n = 0;
    assert_int_equal(read_all(g_r, 20, 100, &next), 0); /* past it: the table as it is */
    PQclear(PQexec(c, "BEGIN; INSERT INTO ab_chunks SELECT * FROM ab_keep; DROP TABLE ab_keep;"
                      " COMMIT"));
    assert_int_equal(pgfx_scalar(c, "SELECT (to_regclass('ab_keep') IS NULL)::int"), 1);
    PQfinish(c);
    next.n = 0;
    assert_int_equal(read_all(g_r, 20, 100, &next), 100);
    assert_int_equal(next.v[0].pos, 21);
    free(first.v);
    free(next.v);
}

/* White box: the continuing page is served from the kept pass, not the table. */
static void test_the_next_page_comes_from_the_kept_pass(void **state)
{
    (void)state;
    rows_t first = rows_new(2), next = rows_new(ROWS_T);
    assert_int_equal(read_thread(g_r, "t", 0, 2, &first), 2);
    PGconn *c = pgfx_connect(&g_pg);
    assert_non_null(c);
    /* the table's copy goes (as no broker ever does: chunks are never rewritten) */
    PQclear(PQexec(c, "BEGIN; CREATE TABLE ab_keep AS SELECT * FROM ab_chunks WHERE thread = 't';"
                      " DELETE FROM ab_chunks WHERE thread = 't'; COMMIT"));
    assert_int_equal(pgfx_scalar(c, "SELECT count(*) FROM ab_chunks WHERE thread = 't'"), 0);
    uint32_t got = read_thread(g_r, "t", first.v[1].pos, ROWS_T, &next);
    assert_true(got >= 1); /* the rest of the first pass's batches, nothing past them */
    assert_true(got < ROWS_T - 2);
    for (uint32_t i = 0; i < got; i++)
        assert_int_equal(next.v[i].pos, g_all.v[2 + i].pos);
    /* a read that does not continue it finds the table as it is */
    next.n = 0;
    assert_int_equal(read_thread(g_r, "t", 0, ROWS_T, &next), 0);
    free(first.v);
    free(next.v);
    PQclear(PQexec(c, "BEGIN; INSERT INTO ab_chunks SELECT * FROM ab_keep; COMMIT"));

    /* the same for a run: a page ending inside a chunk (seqs of a run: PER_RUN per chunk) */
    first = rows_new(1);
    next = rows_new(ROWS_RUN);
    assert_int_equal(read_run(g_r, "r1", 0, 1, &first), 1);
    PQclear(PQexec(c, "DELETE FROM ab_chunks WHERE thread = 't'"));
    got = read_run(g_r, "r1", 1, ROWS_RUN, &next);
    assert_int_equal(got, PER_RUN - 1); /* the rest of its chunk, nothing past it */
    assert_string_equal(next.v[0].text, "t/r1/2");
    next.n = 0;
    assert_int_equal(read_run(g_r, "r1", 0, ROWS_RUN, &next), 0);
    PQclear(PQexec(c, "BEGIN; INSERT INTO ab_chunks SELECT * FROM ab_keep; DROP TABLE ab_keep;"
                      " COMMIT"));
    assert_int_equal(pgfx_scalar(c, "SELECT (to_regclass('ab_keep') IS NULL)::int"), 1);
    PQfinish(c);
    next.n = 0;
    assert_int_equal(read_run(g_r, "r1", 0, ROWS_RUN + 1, &next), ROWS_RUN);
    free(next.v);
    next = rows_new(ROWS_T + 1);
    assert_int_equal(read_thread(g_r, "t", 0, ROWS_T + 1, &next), ROWS_T);
    free(first.v);
    free(next.v);
}

/* A kept pass that had read everything committed: the page goes on to what came after. */
static void test_commits_after_the_kept_pass_are_read(void **state)
{
    (void)state;
    append_v(g_w, 1, 10); /* one chunk: the first pass reads it all, 6 kept, nothing after */
    rows_t rs = rows_new(32);
    assert_int_equal(read_thread(g_r, "v", 0, 4, &rs), 4);
    append_v(g_w, 11, 15);
    assert_int_equal(read_thread(g_r, "v", rs.v[3].pos, 32, &rs), 11);
    assert_seqs(&rs, "v/r/");
    free(rs.v);
    free(g_all.v);
    P->close(g_r);
    P->close(g_w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_and_read_at_once),
        cmocka_unit_test(test_pages_give_the_rows_of_one_read),
        cmocka_unit_test(test_run_pages_give_the_rows_of_one_read),
        cmocka_unit_test(test_a_callback_stop_is_continued),
        cmocka_unit_test(test_the_next_page_comes_from_the_kept_pass),
        cmocka_unit_test(test_all_pages_give_the_rows_of_one_read),
        cmocka_unit_test(test_the_next_all_page_comes_from_the_kept_window),
        cmocka_unit_test(test_commits_after_the_kept_pass_are_read),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

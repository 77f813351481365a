/*
 * test_pg_scans.c - what a read costs the server does not grow with what is
 * stored after it: a page of a thread, of a run and of everything touches about
 * as many buffers in a long thread or run as in a short one (counted by
 * pg_stat_statements, which the test's server loads: a count of buffers, not a
 * time). A bound that is only a filter (the scan running on to the end of the
 * thread or run) makes the long one's pages touch many times more.
 *
 * The events: threads "short" and "long" with two runs each, a batch per
 * three events of each run, and a run of another thread in every batch (so
 * positions interleave); "long" has LONG_BATCHES batches, "short" SHORT_BATCHES.
 */
#define PGMOD_FILE_SERVER
#define PGMOD_CONF "shared_preload_libraries=pg_stat_statements"
#include "pg_module.h"

#include "agentbus/plugin.h"
#include "testutil.h"

#define SHORT_BATCHES 40
#define LONG_BATCHES  400
#define PER_RUN       3 /* events of each run in each batch */

static ab_plugin_db_t *g_w;

static void append_batch(const char *thread, int b)
{
    ab_append_event_t e[3 * PER_RUN];
    const char *runs[3] = {"a", "b", "x"};
    size_t n = 0;
    for (int k = 0; k < PER_RUN; k++)
        for (int r = 0; r < 3; r++)
            e[n++] = (ab_append_event_t){.thread = S(r < 2 ? thread : "other"),
                                         .run = S(r < 2 ? runs[r] : thread),
                                         .seq = (uint64_t)b * PER_RUN + (uint64_t)k + 1,
                                         .bytes = (const uint8_t *)"0123456789",
                                         .len = 10};
    uint64_t first = 0;
    ab_error_t err = AB_ERROR_INIT;
    if (P->append_batch(g_w, e, n, 1, &first, &err) != AB_OK)
        fail_msg("append: %s", err.message);
}

static int group_setup_all(void **state)
{
    if (group_setup(state) != 0)
        return -1;
    g_w = pgmod_open(P, &g_pg, false, AB_DURABILITY_PROCESS);
    for (int b = 0; b < SHORT_BATCHES; b++)
        append_batch("short", b);
    for (int b = 0; b < LONG_BATCHES; b++)
        append_batch("long", b);
    pgmod_exec(&g_pg, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    return 0;
}

static int group_teardown_all(void **state)
{
    P->close(g_w);
    return group_teardown(state);
}

/* Buffers touched per call by the statements whose text starts with @p prefix, since the
 * last reset. */
static double buffers_per_call(const char *prefix)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT (sum(shared_blks_hit + shared_blks_read) * 1000 / sum(calls))::bigint"
             " FROM pg_stat_statements WHERE query LIKE '%s%%'",
             prefix);
    long long v = pgfx_scalar1(&g_pg, sql);
    if (v < 0)
        fail_msg("no calls of %s", prefix);
    return (double)v / 1000;
}

static void reset_counts(void)
{
    assert_true(pgfx_scalar1(&g_pg, "SELECT count(*) FROM (SELECT pg_stat_statements_reset()) r") ==
                1);
}

typedef struct last {
    uint64_t pos, seq;
} last_t;

static int note_last(void *ud, const ab_row_t *row)
{
    last_t *l = ud;
    l->pos = row->pos;
    l->seq = row->seq;
    return 0;
}

/* Pages of @p q (limit: PER_RUN rows, so pages end inside batches and chunks), each
 * continuing the last, on a handle of its own; @return the rows read. */
static uint64_t page_through(ab_read_t q)
{
    ab_plugin_db_t *rd = pgmod_open(P, &g_pg, true, AB_DURABILITY_PROCESS);
    uint64_t rows = 0;
    q.limit = PER_RUN + 1;
    for (;;) {
        last_t l = {0, 0};
        uint32_t got = 0;
        ab_error_t err = AB_ERROR_INIT;
        if (P->read(rd, &q, note_last, &l, &got, &err) != AB_OK)
            fail_msg("read: %s", err.message);
        rows += got;
        if (got < q.limit)
            break;
        q.after_pos = l.pos;
        q.after_seq = l.seq;
    }
    P->close(rd);
    return rows;
}

/* Buffers per page of a thread: about the same in the long thread as in the short one. */
static void test_thread_pages(void **state)
{
    (void)state;
    ab_read_t q = {.scope = AB_REPLAY_THREAD, .thread = S("short")};
    reset_counts();
    assert_int_equal(page_through(q), SHORT_BATCHES * 2 * PER_RUN);
    double per_short = buffers_per_call("WITH s AS");
    q.thread = S("long");
    reset_counts();
    assert_int_equal(page_through(q), LONG_BATCHES * 2 * PER_RUN);
    double per_long = buffers_per_call("WITH s AS");
    print_message("thread pass: %.1f buffers (%d batches), %.1f (%d batches)\n", per_short,
                  SHORT_BATCHES, per_long, LONG_BATCHES);
    assert_true(per_long < 1.5 * per_short + 4);
}

/* Buffers per page of a run: the same. */
static void test_run_pages(void **state)
{
    (void)state;
    ab_read_t q = {.scope = AB_REPLAY_RUN, .thread = S("other"), .run = S("short")};
    reset_counts();
    assert_int_equal(page_through(q), SHORT_BATCHES * PER_RUN);
    double per_short = buffers_per_call("SELECT batch_first, commit_us, data FROM");
    q.run = S("long");
    reset_counts();
    assert_int_equal(page_through(q), LONG_BATCHES * PER_RUN);
    double per_long = buffers_per_call("SELECT batch_first, commit_us, data FROM");
    print_message("run page: %.1f buffers (%d chunks), %.1f (%d chunks)\n", per_short,
                  SHORT_BATCHES, per_long, LONG_BATCHES);
    assert_true(per_long < 1.5 * per_short + 4);
}

/* Buffers per window of everything: the same from the start of the store as near its end. */
static void test_all_pages(void **state)
{
    (void)state;
    uint64_t total = (SHORT_BATCHES + LONG_BATCHES) * 3 * PER_RUN;
    ab_read_t q = {.scope = AB_REPLAY_ALL};
    reset_counts();
    assert_int_equal(page_through(q), total);
    double per_all = buffers_per_call("SELECT batch_first, commit_us, thread, run, data");
    q.after_pos = total - 40 * PER_RUN;
    reset_counts();
    assert_int_equal(page_through(q), 40 * PER_RUN);
    double per_end = buffers_per_call("SELECT batch_first, commit_us, thread, run, data");
    print_message("window: %.1f buffers (from the start), %.1f (near the end)\n", per_all, per_end);
    assert_true(per_all < 1.5 * per_end + 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thread_pages),
        cmocka_unit_test(test_run_pages),
        cmocka_unit_test(test_all_pages),
    };
    return cmocka_run_group_tests(tests, group_setup_all, group_teardown_all);
}

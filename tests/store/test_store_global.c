/*
 * test_store_global.c - SQLite's memory statistics turned off for the process
 * (ab__store_global_init, store/store_stats.c), as `agentbus` does first in main().
 *
 * main() calls it before anything in the process initialises SQLite, as a program must.
 * With the statistics off SQLite counts no allocation, so sqlite3_memory_used() stays 0
 * while a store is open and written; the second test turns them on again (SQLite shut down
 * in between) to show that the same check sees a store's allocations when they are counted.
 */
#include "store_fixture.h"

#include <sqlite3.h>

static int first_call; /* what ab__store_global_init() answered before SQLite was initialised */

static ab_str_t S(const char *s)
{
    return (ab_str_t){s, strlen(s)};
}

/* Open the store of @p dir, commit @p n events of a new run @p run of thread t, check the
 * run's head and @return sqlite3_memory_used() while the store is still open. */
static int64_t write_and_measure(const char *dir, const char *run, uint64_t n)
{
    ab_store_t *st = open_ok(dir, false);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_begin(st, 1000, &err), AB_OK);
    for (uint64_t seq = 1; seq <= n; seq++) {
        ab_append_event_t ev = {.thread = S("t"),
                                .run = S(run),
                                .seq = seq,
                                .epoch = 1,
                                .bytes = (const uint8_t *)"{}",
                                .len = 2};
        uint64_t pos = 0;
        assert_int_equal(ab__store_append(st, &ev, &pos, &err), AB_OK);
    }
    assert_int_equal(ab__store_commit(st, &err), AB_OK);
    ab_run_head_t h;
    assert_int_equal(ab__store_head(st, S("t"), S(run), &h, &err), AB_OK);
    assert_int_equal(h.last_seq, n);
    int64_t used = sqlite3_memory_used();
    ab__store_close(&st);
    return used;
}

static void test_statistics_off_from_the_start(void **state)
{
    sf_fx_t *f = *state;
    assert_int_equal(first_call, 1);
    assert_int_equal(write_and_measure(f->dir, "r", 100), 0);
}

/* The check can fail: with the statistics on, the same store's allocations are counted. */
static void test_counted_when_on(void **state)
{
    sf_fx_t *f = *state;
    assert_int_equal(sqlite3_shutdown(), SQLITE_OK);
    assert_int_equal(sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 1), SQLITE_OK);
    assert_true(write_and_measure(f->dir, "r", 100) > 0);
    assert_int_equal(sqlite3_shutdown(), SQLITE_OK);
    assert_int_equal(ab__store_global_init(), 1); /* off again, before the next initialise */
    assert_int_equal(write_and_measure(f->dir, "r2", 200), 0);
}

/* Once SQLite is initialised the call changes nothing, says so, and the store still works. */
static void test_too_late_changes_nothing(void **state)
{
    sf_fx_t *f = *state;
    assert_int_equal(sqlite3_shutdown(), SQLITE_OK);
    assert_int_equal(sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 1), SQLITE_OK);
    assert_int_equal(sqlite3_initialize(), SQLITE_OK);
    assert_int_equal(ab__store_global_init(), 0);
    assert_true(write_and_measure(f->dir, "r", 100) > 0); /* still counted: the setting stayed */
}

static int setup(void **state)
{
    return sf_fx_setup(state, "global", false);
}

int main(void)
{
    first_call = ab__store_global_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_statistics_off_from_the_start, setup, sf_fx_teardown),
        cmocka_unit_test_setup_teardown(test_counted_when_on, setup, sf_fx_teardown),
        cmocka_unit_test_setup_teardown(test_too_late_changes_nothing, setup, sf_fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

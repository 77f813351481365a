/*
 * test_cli_relayout.c - `agentbus relayout` as a process (cli/relayout_cmd.c):
 * usage errors exit 2; a directory without a store is exit 1 and gets none;
 * a store of schema 4 with events, migrated by a broker that serves it, is
 * refused while that broker runs (its pid named, nothing written), then
 * rewritten once it stopped (--json: the chunk count), its links before its
 * data; a broker started on it again has every run's head, and a reader gets
 * every event back; run again, it has nothing to do.
 */
#include "testutil.h"

#include "../store/store_fixture.h"
#include "broker_proc.h"
#include "cli_run.h"

#include <sys/stat.h>

#define RUNS    6
#define COMMITS 40
#define SEQS    (2 * COMMITS)

/* @p commits commits, each with one event of every run, from seq @p from on. */
static void write_events(const char *dir, int commits, uint64_t from)
{
    ab_store_t *st = open_ok(dir, false);
    char runs[RUNS][8];
    for (int c = 0; c < commits; c++) {
        ab_buf_t b[RUNS];
        ab_append_event_t evs[RUNS];
        for (int r = 0; r < RUNS; r++) {
            snprintf(runs[r], sizeof runs[r], "r%d", r);
            memset(&b[r], 0, sizeof b[r]);
            it_event(&b[r], "t", runs[r], from + (uint64_t)c, 0, 1);
            evs[r] = (ab_append_event_t){.thread = {"t", 1},
                                         .run = {runs[r], strlen(runs[r])},
                                         .seq = from + (uint64_t)c,
                                         .epoch = 1,
                                         .bytes = b[r].data,
                                         .len = b[r].len};
        }
        uint64_t first = 0;
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab__store_append_batch(st, evs, RUNS, 1000, &first, &err), AB_OK);
        for (int r = 0; r < RUNS; r++)
            ab_buf_free(&b[r]);
    }
    ab__store_close(&st);
}

/* Every event, read back by a reader of the store. */
static uint32_t events_in(const char *dir)
{
    ab_store_t *st = open_ok(dir, true);
    ab_read_t req = {.scope = AB_REPLAY_ALL, .limit = UINT32_MAX};
    uint32_t n = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_read(st, &req, NULL, NULL, &n, &err), AB_OK);
    ab__store_close(&st);
    return n;
}

static void test_usage(void **state)
{
    (void)state;
    char out[OUT_MAX];
    assert_int_equal(it_run_cli(out, "relayout --bogus"), 2);
    assert_non_null(strstr(out, "unknown option"));
    assert_int_equal(it_run_cli(out, "relayout extra"), 2);
    assert_non_null(strstr(out, "unexpected argument 'extra'"));
    assert_int_equal(it_run_cli(out, "relayout --data ''"), 2);
    assert_non_null(strstr(out, "--data wants a directory"));
    assert_int_equal(it_run_cli(out, "relayout --help"), 0);
    assert_non_null(strstr(out, "usage: agentbus relayout"));
}

static void test_no_store(void **state)
{
    (void)state;
    char dir[] = "/tmp/ab_relayout_none_XXXXXX", out[OUT_MAX], db[128];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(it_run_cli(out, "relayout --data %s", dir), 1);
    assert_non_null(strstr(out, "no store in"));
    snprintf(db, sizeof db, "%s/%s", dir, AB_STORE_DB_NAME);
    struct stat sb;
    assert_int_not_equal(stat(db, &sb), 0); /* invariant 1: none made */
    sf_rm_dir(dir);
}

static void test_migrated_store(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char dir[sizeof t->bp.dir], out[OUT_MAX], want[160];
    memcpy(dir, t->bp.dir, sizeof dir);
    assert_int_equal(bp_stop(&t->bp), 0);
    write_events(dir, COMMITS, 1);
    sf_exec(dir, SF_TO_V4_SQL);
    assert_int_equal(bp_restart(&t->bp), 0); /* migrates: the links after the data */
    assert_int_equal(bp_stop(&t->bp), 0);
    write_events(dir, COMMITS, COMMITS + 1); /* chained chunks after the migration */
    assert_int_equal(sf_int(dir, AB__LINKS_BEFORE_DATA_SQL), 0);
    int64_t chunks = sf_int(dir, "SELECT count(*) FROM chunks");
    assert_int_equal(bp_restart(&t->bp), 0);
    assert_int_equal(it_run_cli(out, "relayout --data %s", dir), 1); /* invariant 2 */
    snprintf(want, sizeof want, "in use by another broker (pid %ld)", (long)t->bp.pid);
    assert_non_null(strstr(out, want));
    assert_int_equal(sf_int(dir, AB__LINKS_BEFORE_DATA_SQL), 0);
    assert_int_equal(bp_stop(&t->bp), 0);
    assert_int_equal(it_run_cli(out, "relayout --data %s --json", dir), 0);
    snprintf(want, sizeof want, "\"needed\":true,\"chunks\":%lld,", (long long)chunks);
    assert_non_null(strstr(out, want));
    assert_int_equal(sf_int(dir, AB__LINKS_BEFORE_DATA_SQL), 1);
    assert_int_equal(events_in(dir), RUNS * SEQS);
    assert_int_equal(bp_restart(&t->bp), 0);
    ab_conn_t *c = it_connect(&t->bp);
    for (int r = 0; r < RUNS; r++) {
        char run[8];
        snprintf(run, sizeof run, "r%d", r);
        assert_int_equal(it_head(c, t->doc, "t", run).last_seq, SEQS);
    }
    ab_conn_destroy(&c);
    assert_int_equal(bp_stop(&t->bp), 0);
    assert_int_equal(it_run_cli(out, "relayout --data %s", dir), 0);
    assert_non_null(strstr(out, "nothing to do"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_no_store),
        cmocka_unit_test_setup_teardown(test_migrated_store, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

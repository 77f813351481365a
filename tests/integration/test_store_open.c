/*
 * test_store_open.c - single ownership of a data directory with real broker
 * processes: the lock is on agentbus.db itself, so deleting <dir>/LOCK (as a
 * cleanup job might) does not let a second broker serve the same database.
 * Broker A runs and has stored events; LOCK is deleted; broker B on the same
 * directory exits 1 saying the directory is in use by A (pid from the lock
 * table) and leaves no LOCK behind; A still accepts and serves events; once
 * A stopped, B starts on the directory and sees all of them.
 */
#include "testutil.h"

#include "broker_proc.h"

#include <sys/stat.h>

#define NEV 6

static void publish_range(ab_conn_t *c, ab_doc_t *doc, uint64_t from, uint64_t to)
{
    ab_buf_t evs[NEV];
    memset(evs, 0, sizeof(evs));
    for (uint64_t s = from; s <= to; s++)
        it_event(&evs[s - from], "tl", "r1", s, NEV, 1);
    const ab_result_t *res = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_publish(c, evs, (size_t)(to - from + 1), doc, &res, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("publish %llu..%llu: %s: %s", (unsigned long long)from, (unsigned long long)to,
                 ab_status_name(err.code), err.message);
    for (uint64_t s = from; s <= to; s++) {
        if (res[s - from].status != AB_RESULT_ACCEPTED)
            fail_msg("seq %llu not accepted: %s", (unsigned long long)s,
                     res[s - from].error ? res[s - from].error->message : "?");
        ab_buf_free(&evs[s - from]);
    }
}

static void test_lock_file_deleted(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    publish_range(c, t->doc, 1, 2);
    char lock[512];
    snprintf(lock, sizeof(lock), "%s/LOCK", t->bp.dir);
    assert_int_equal(unlink(lock), 0);
    char out[2048], want[400];
    int rc = bp_run_second(t->bp.dir, out, sizeof(out));
    if (rc != 1)
        fail_msg("second broker exited %d (want 1): %s", rc, out);
    snprintf(want, sizeof(want), "data directory %s is in use by another broker (pid %ld)",
             t->bp.dir, (long)t->bp.pid);
    if (strstr(out, want) == NULL)
        fail_msg("second broker said '%s', want '%s'", out, want);
    struct stat sb;
    assert_int_not_equal(stat(lock, &sb), 0); /* the refused broker made no new LOCK */
    /* A is unharmed: it accepts more and serves all of it */
    publish_range(c, t->doc, 3, NEV);
    assert_int_equal(it_head(c, t->doc, "tl", "r1").last_seq, NEV);
    ab_conn_destroy(&c);
    assert_int_equal(bp_stop(&t->bp), 0);
    /* with A gone, the directory is free again */
    assert_int_equal(bp_restart(&t->bp), 0);
    c = it_connect(&t->bp);
    assert_int_equal(it_head(c, t->doc, "tl", "r1").last_seq, NEV);
    ab_conn_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lock_file_deleted, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

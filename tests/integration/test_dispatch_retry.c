/*
 * test_dispatch_retry.c - the moves committed events ask of their requests (to started at a
 * RUN_STARTED, to ended at the run's end) survive a store that refuses them for a while
 * (docs/PROTOCOL.md 7.12 "At least once until RUN_STARTED, never after", 7.16), through a
 * real broker process on the SQLite plugin as a module whose request_move refuses those moves
 * with `unavailable` while a flag file exists (tests/plugin/failmove_sqlite_module.c):
 *  - the run's events are acknowledged meanwhile; the moves are kept and tried again on a
 *    back-off (not a hot loop), and once the store takes them the request is started, then
 *    ended (in that order), and the worker's capacity is free for the next request;
 *  - meanwhile the request counts as started: a decline changes nothing (answered started);
 *    a worker that leaves does not get it put back in the queue and handed to another worker,
 *    cancel_run answers no_owner instead of dequeuing it, and abandon_run is refused
 *    `unavailable` (retry: its start is not stored yet), not as a run that has not started;
 *  - a broker killed with moves kept settles them from the runs' heads when it starts again:
 *    the started request is started (not queued), the ended one ended.
 */
#include "testutil.h"

#include "broker_proc.h"
#include "dispatch_side.h"

#include <fcntl.h>
#include <limits.h>
#include <string.h>

static char g_log[128], g_flag[128];

/* A broker on the failing module, its log in g_log; the flag file g_flag absent. */
static int setup(void **state)
{
    snprintf(g_log, sizeof g_log, "/tmp/ab-dispatch-retry-%d.log", (int)getpid());
    snprintf(g_flag, sizeof g_flag, "/tmp/ab-dispatch-retry-%d.flag", (int)getpid());
    unlink(g_flag);
    setenv("AB_FAILMOVE_FILE", g_flag, 1); /* the broker child inherits it */
    static const char *extra[] = {"--plugin", AB_FAILMOVE_SQLITE_MODULE, NULL};
    return it_setup_log(state, extra, g_log);
}

static int teardown(void **state)
{
    unlink(g_flag);
    int rc = it_teardown(state);
    unlink(g_log);
    return rc;
}

/* The store refuses the moves to started and ended from now on. */
static void moves_fail(void)
{
    int fd = open(g_flag, O_WRONLY | O_CREAT, 0644);
    assert_true(fd >= 0);
    close(fd);
}

/* The store takes them again. */
static void moves_pass(void)
{
    assert_int_equal(unlink(g_flag), 0);
}

/* Lines of the broker's log holding @p needle now. */
static int log_count(const bp_t *b, const char *needle)
{
    return bp_wait_log(b, needle, INT_MAX, 0);
}

/* The offset of the first line of the broker's log holding @p needle, or -1. */
static long log_find(const char *needle)
{
    FILE *f = fopen(g_log, "r");
    char line[2048];
    long at = -1;
    while (f && at < 0 && fgets(line, sizeof line, f))
        if (strstr(line, needle) != NULL)
            at = ftell(f);
    if (f)
        fclose(f);
    return at;
}

/* Register @p s as worker @p name serving agent "coder", @p cap runs at once. */
static void serve(side_t *s, const char *name, uint32_t cap)
{
    serve_agent(s, name, "coder", cap, 0);
}

static ab_run_accepted_t start_ok(side_t *s, const char *thread, const char *key)
{
    ab_start_run_t r = {SV("coder"), SV(thread),     {0}, tu_json(&s->tu, "{\"messages\":[]}"),
                        SV(key),     AB_IF_BUSY_OMIT};
    ab_run_accepted_t a;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_start_run(s->c, &r, s->doc, &a, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("start_run: %s: %s", ab_status_name(err.code), err.message);
    return a;
}

/* Wait at most @p ms until request @p id is in @p state (the kept moves' next try is at
 * most 2 s away). */
static ab_request_info_t wait_for(side_t *s, uint64_t id, ab_request_state_t state, long ms)
{
    ab_request_info_t info = {0};
    for (int64_t end = ab__mono_ms() + ms; ab__mono_ms() < end; ab_conn_wait(s->c, 10))
        if (find_req(s, id, state, &info))
            return info;
    fail_msg("request %llu never reached %s", (unsigned long long)id, ab_request_state_name(state));
    return info;
}

/* The moves are kept while the store refuses them and stored, in order, once it takes them. */
static void test_failed_moves_kept_and_retried(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w, "w1", 1);
    moves_fail();
    int64_t t0 = ab__mono_ms();
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1");
    asg_t g = next_assign(&w);
    assert_int_equal(g.request, a.request);
    publish_ok(&w, &g, 1, "RUN_STARTED"); /* acknowledged while its move fails */
    assert_true(bp_wait_log(&t->bp, "to started refused", 3, 10000) >= 3); /* tried again */
    ab_request_info_t info;
    assert_true(find_req(&c, a.request, AB_REQ_ASSIGNED, &info)); /* the store has not got it */
    ab_msg_t m = {.op = AB_OP_DECLINE}, r;                        /* too late: its run started */
    m.u.decline = (ab_decline_t){g.request, g.epoch, {0}};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_request(w.c, &m, NULL, 0, w.doc, &r, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(r.op, AB_OP_DECLINED);
    assert_int_equal(r.u.declined.state, AB_REQ_STARTED);
    publish_ok(&w, &g, 2, "RUN_FINISHED"); /* not fenced: the decline changed nothing */
    ab_run_accepted_t b = start_ok(&c, "t-2", "k-2");
    assert_int_equal(b.state, AB_REQ_QUEUED); /* w1's one place is still a's */
    assert_true(bp_wait_log(&t->bp, "refused", 4, 10000) >= 4);
    int tries = log_count(&t->bp, "refused");
    int64_t elapsed = ab__mono_ms() - t0;
    /* not a hot loop: 100 ms doubling to 2 s between tries */
    if (tries > 4 + elapsed / 100)
        fail_msg("%d tries in %lld ms", tries, (long long)elapsed);
    assert_int_equal(log_count(&t->bp, "kept and tried again (try 1)"), 1); /* warned once */
    moves_pass();
    wait_for(&c, a.request, AB_REQ_ENDED, 10000);
    asg_t g2 = next_assign(&w); /* w1's place is free again */
    assert_int_equal(g2.request, b.request);
    char started[96], ended[96];
    snprintf(started, sizeof started, "failmove: request %llu to started stored",
             (unsigned long long)a.request);
    snprintf(ended, sizeof ended, "failmove: request %llu to ended stored",
             (unsigned long long)a.request);
    assert_true(log_find(started) >= 0);
    assert_true(log_find(ended) > log_find(started)); /* started first */
    assert_true(log_count(&t->bp, "moved to ended after") >= 1);
    side_free(&w);
    side_free(&c);
}

/* A worker that leaves while its run's start is kept: the request is not queued again. */
static void test_leave_keeps_started(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w1 = side_new(&t->bp), w2 = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w1, "w1", 1);
    serve(&w2, "w2", 1);
    moves_fail();
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1");
    asg_t g = next_assign(&w1); /* ties go to the older registration */
    assert_int_equal(g.request, a.request);
    publish_ok(&w1, &g, 1, "RUN_STARTED");
    assert_true(bp_wait_log(&t->bp, "to started refused", 1, 10000) >= 1);
    ab_msg_t m = {.op = AB_OP_LEAVE}, r;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_request(w1.c, &m, NULL, 0, w1.doc, &r, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(r.op, AB_OP_LEFT);
    ab_request_info_t info; /* the writer had w1's leave before this */
    assert_true(find_req(&c, a.request, AB_REQ_ASSIGNED, &info));
    assert_int_equal(info.attempts, 1);
    assert_int_equal(info.worker.len, 2);
    assert_memory_equal(info.worker.ptr, "w1", 2);
    ab_cancel_run_t cr = {SV("t-1"), SV(g.run), SV("stop")}; /* started, its owner gone */
    ab_cancel_reply_t rep;
    assert_int_equal(ab_conn_cancel_run(c.c, &cr, c.doc, &rep, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(rep.outcome, AB_CANCEL_NO_OWNER);
    ab_abandon_run_t ar = {SV("t-1"), SV(g.run), {0}};
    ab_abandoned_t ab;
    assert_int_equal(ab_conn_abandon_run(c.c, &ar, c.doc, &ab, IT_TIMEOUT, &err), AB_UNAVAILABLE);
    assert_true(err.retryable);
    moves_pass();
    info = wait_for(&c, a.request, AB_REQ_STARTED, 10000);
    assert_int_equal(info.epoch, g.epoch);
    assert_true(info.orphaned); /* w1 is gone */
    ab_run_accepted_t b = start_ok(&c, "t-2", "k-2");
    asg_t g2 = next_assign(&w2); /* w2's first assignment: not a */
    assert_int_equal(g2.request, b.request);
    publish_ok(&c, &g, 2, "RUN_FINISHED"); /* w1's epoch was never fenced */
    wait_for(&c, a.request, AB_REQ_ENDED, 10000);
    side_free(&w1);
    side_free(&w2);
    side_free(&c);
}

/* A broker killed with moves kept: the next one settles them from the runs' heads. */
static void test_restart_settles_kept_moves(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w, "w1", 2);
    moves_fail();
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1");
    asg_t ga = next_assign(&w);
    ab_run_accepted_t b = start_ok(&c, "t-2", "k-2");
    asg_t gb = next_assign(&w);
    assert_int_equal(ga.request, a.request);
    assert_int_equal(gb.request, b.request);
    publish_ok(&w, &ga, 1, "RUN_STARTED");
    publish_ok(&w, &gb, 1, "RUN_STARTED");
    publish_ok(&w, &gb, 2, "RUN_FINISHED");
    assert_true(bp_wait_log(&t->bp, "refused", 1, 10000) >= 1);
    ab_request_info_t info;
    assert_true(find_req(&c, a.request, AB_REQ_ASSIGNED, &info));
    assert_true(find_req(&c, b.request, AB_REQ_ASSIGNED, &info));
    side_free(&w);
    side_free(&c);
    bp_kill(&t->bp); /* with both moves kept, none stored */
    moves_pass();
    assert_int_equal(bp_restart(&t->bp), 0);
    c = side_new(&t->bp);
    assert_true(find_req(&c, a.request, AB_REQ_STARTED, &info)); /* not queued */
    assert_int_equal(info.epoch, ga.epoch);
    assert_int_equal(info.attempts, 1);
    assert_true(find_req(&c, b.request, AB_REQ_ENDED, &info));
    w = side_new(&t->bp);
    serve(&w, "w1", 2);
    ab_run_accepted_t n = start_ok(&c, "t-3", "k-3");
    asg_t gn = next_assign(&w); /* the next assignment is the new request, not a */
    assert_int_equal(gn.request, n.request);
    publish_ok(&w, &ga, 2, "RUN_FINISHED"); /* a's epoch was never fenced */
    wait_for(&c, a.request, AB_REQ_ENDED, 10000);
    side_free(&w);
    side_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_failed_moves_kept_and_retried, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leave_keeps_started, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_settles_kept_moves, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

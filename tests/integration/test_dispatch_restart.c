/*
 * test_dispatch_restart.c - dispatch across a broker restart (docs/PROTOCOL.md 7.12, 7.17,
 * broker/dispatch_load.c) through a real broker process on SQLite, each case a defect that
 * was found and fixed:
 *  - a broker that starts while another process holds the store's write lock does not turn
 *    dispatch off for its whole run: while its load of the requests is refused, dispatch
 *    requests are answered `unavailable` (retryable, saying why) and the capability is
 *    announced so, and once the store is writable again it serves normally: the request
 *    assigned before the stop goes back to the queue and is handed out once more (its old
 *    assignee fenced), the request refused meanwhile is accepted when retried;
 *  - a request still assigned at the stop whose run has committed events of an earlier writer
 *    (an older epoch than the assignment's) is not recorded as started by its assignee: it
 *    goes back to the queue and its assignee is fenced;
 *  - during the restart grace, abandon_run of a started run whose owner is not back yet is
 *    refused with the truth (the broker waits some seconds more for the owner), not "a live
 *    owner".
 */
#include "testutil.h"

#include "broker_proc.h"
#include "db_lock.h"
#include "dispatch_side.h"

#include <string.h>

static char g_log[128];

/* A broker logging at debug (the load's later tries) into g_log. */
static int setup(void **state)
{
    static const char *extra[] = {"--log-level", "debug", NULL};
    snprintf(g_log, sizeof g_log, "/tmp/ab-dispatch-restart-%d.log", (int)getpid());
    return it_setup_log(state, extra, g_log);
}

static int teardown(void **state)
{
    int rc = it_teardown(state);
    unlink(g_log);
    return rc;
}

/* Register @p s as worker @p name serving agent "coder", @p cap runs at once. */
static void serve(side_t *s, const char *name, uint32_t cap)
{
    serve_agent(s, name, "coder", cap, 0);
}

/* start_run of agent "coder" on @p thread (run @p run, NULL: the broker's) with key @p key. */
static ab_status_t start(side_t *s, const char *thread, const char *run, const char *key,
                         ab_run_accepted_t *out, ab_error_t *err)
{
    ab_start_run_t r = {SV("coder"),
                        SV(thread),
                        run ? SV(run) : (ab_str_t){0},
                        tu_json(&s->tu, "{\"messages\":[]}"),
                        SV(key),
                        AB_IF_BUSY_OMIT};
    ab_error_clear(err);
    return ab_conn_start_run(s->c, &r, s->doc, out, IT_TIMEOUT, err);
}

static ab_run_accepted_t start_ok(side_t *s, const char *thread, const char *run, const char *key)
{
    ab_run_accepted_t a;
    ab_error_t err = AB_ERROR_INIT;
    if (start(s, thread, run, key, &a, &err) != AB_OK)
        fail_msg("start_run: %s: %s", ab_status_name(err.code), err.message);
    return a;
}

/* The state of capability @p name in @p s's welcome. */
static ab_cap_state_t cap_state(const side_t *s, const char *name)
{
    size_t n = 0;
    const ab_cap_t *caps = ab_conn_caps(s->c, &n);
    for (size_t i = 0; i < n; i++)
        if (caps[i].name_len == strlen(name) && memcmp(caps[i].name, name, caps[i].name_len) == 0)
            return caps[i].state;
    fail_msg("no capability %s in the welcome", name);
    return AB_CAP_UNSUPPORTED;
}

/* The broker starts while the store is write-locked: dispatch waits for it, then serves. */
static void test_load_waits_for_store(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w, "w1", 1);
    ab_run_accepted_t a = start_ok(&c, "t-1", NULL, "k-1");
    asg_t g = next_assign(&w);
    side_free(&w);
    side_free(&c);
    bp_kill(&t->bp); /* a is stored assigned to w1 */
    sqlite3 *lock = dl_lock(t->bp.dir);
    assert_int_equal(bp_restart(&t->bp), 0);
    assert_true(bp_wait_log(&t->bp, "cannot load the store's run requests", 1, 10000) >= 1);
    int64_t t0 = ab__mono_ms();
    c = side_new(&t->bp);
    assert_int_equal(cap_state(&c, AB_CAP_DISPATCH), AB_CAP_UNAVAILABLE);
    w = side_new(&t->bp);
    serve(&w, "w1", 1); /* taken in meanwhile: registrations are not stored */
    ab_run_accepted_t b;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(start(&c, "t-2", NULL, "k-2", &b, &err), AB_UNAVAILABLE);
    assert_true(err.retryable);
    assert_non_null(strstr(err.message, "not ready"));
    assert_non_null(strstr(err.message, "locked")); /* the store's reason */
    ab_requests_t rq = {AB_REQ_NONE, {0}, 0, 10};
    ab_requests_reply_t rr;
    assert_int_equal(ab_conn_requests(c.c, &rq, c.doc, &rr, IT_TIMEOUT, &err), AB_UNAVAILABLE);
    ab_claimed_t cl; /* a dispatched run is not claimed before dispatch can judge the claim */
    ab_error_clear(&err);
    assert_int_equal(ab_conn_claim(c.c, "t-1", g.run, c.doc, &cl, IT_TIMEOUT, &err),
                     AB_UNAVAILABLE);
    assert_string_equal(err.field, "run");
    assert_non_null(strstr(err.message, "not ready"));
    /* tried again on a back-off (100 ms doubling), each try waiting about 1 s for the lock */
    assert_true(bp_wait_log(&t->bp, "(try 3, the next in 400 ms)", 1, 15000) >= 1);
    assert_true(ab__mono_ms() - t0 >= 300);
    assert_int_equal(start(&c, "t-2", NULL, "k-2", &b, &err), AB_UNAVAILABLE);
    dl_unlock(&lock);
    ab_status_t rc = AB_UNAVAILABLE; /* retried as a client does: accepted once loaded */
    for (int64_t end = ab__mono_ms() + 10000; rc == AB_UNAVAILABLE && ab__mono_ms() < end;)
        if ((rc = start(&c, "t-2", NULL, "k-2", &b, &err)) == AB_UNAVAILABLE)
            ab_conn_wait(c.c, 50);
    if (rc != AB_OK)
        fail_msg("start_run after the lock: %s: %s", ab_status_name(err.code), err.message);
    assert_false(b.existing);
    assert_true(bp_wait_log(&t->bp, "run requests are served again", 1, 0) >= 1);
    asg_t g2 = next_assign(&w); /* a first (its id is lower): back in the queue, once */
    assert_int_equal(g2.request, a.request);
    assert_int_equal(g2.attempt, 2);
    assert_true(g2.epoch > g.epoch);
    assert_int_equal(publish(&w, &g, 1, "RUN_STARTED", &err), AB_RESULT_REJECTED);
    assert_int_equal(err.code, AB_FENCED); /* the first assignee cannot start it any more */
    run_through(&w, &g2);
    asg_t g3 = next_assign(&w);
    assert_int_equal(g3.request, b.request);
    assert_int_equal(g3.attempt, 1);
    run_through(&w, &g3);
    wait_state(&c, a.request, AB_REQ_ENDED);
    wait_state(&c, b.request, AB_REQ_ENDED);
    side_t c2 = side_new(&t->bp);
    assert_int_equal(cap_state(&c2, AB_CAP_DISPATCH), AB_CAP_AVAILABLE);
    side_free(&c2);
    side_free(&w);
    side_free(&c);
}

/* Run @p sql on the stopped broker's database; fails the test on error. */
static void sql_on_store(const char *dir, const char *sql)
{
    char path[512], *msg = NULL;
    snprintf(path, sizeof(path), "%s/agentbus.db", dir);
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        char why[256];
        snprintf(why, sizeof(why), "%s", msg ? msg : sqlite3_errmsg(db));
        sqlite3_free(msg);
        sqlite3_close(db);
        fail_msg("%s on %s: %s", sql, path, why);
    }
    sqlite3_close(db);
}

/*
 * Settled at a restart, an assigned request whose run an earlier writer started is not
 * recorded as started by its assignee. The broker no longer lets such a request be made (a
 * start_run naming a run with events or a claim is refused, a publish into a queued run
 * without a claim too: test_dispatch_contract), but a store written before it may hold one,
 * which the test makes by hand: a producer's run, and a request moved onto it, assigned.
 */
static void test_recover_earlier_writer_not_started(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t p = side_new(&t->bp), c = side_new(&t->bp);
    ab_claimed_t cl;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_claim(p.c, "t-x", "r-x", p.doc, &cl, IT_TIMEOUT, &err), AB_OK);
    asg_t pa = {0,     cl.epoch, 1,
                "t-x", "r-x",    "{\"threadId\":\"t-x\",\"runId\":\"r-x\",\"messages\":[]}"};
    publish_ok(&p, &pa, 1, "RUN_STARTED"); /* the run's first event: the producer's */
    ab_run_accepted_t a = start_ok(&c, "t-x", "r-y", "k-x"); /* queued: nobody serves */
    side_free(&p);
    side_free(&c);
    bp_kill(&t->bp);
    char sql[512]; /* assigned to w1 at a claim above the producer's, as an old broker left it */
    snprintf(sql, sizeof sql,
             "UPDATE requests SET run='r-x', state='assigned', worker='w1', epoch=%llu, "
             "attempts=1 WHERE id=%llu; UPDATE runs SET epoch=%llu WHERE thread='t-x' AND "
             "run='r-x';",
             (unsigned long long)cl.epoch + 1, (unsigned long long)a.request,
             (unsigned long long)cl.epoch + 1);
    sql_on_store(t->bp.dir, sql);
    assert_int_equal(bp_restart(&t->bp), 0);
    c = side_new(&t->bp);
    ab_request_info_t info;
    if (!find_req(&c, a.request, AB_REQ_QUEUED, &info)) {
        assert_true(find_req(&c, a.request, AB_REQ_NONE, &info));
        fail_msg("request %llu is %s at epoch %llu after the restart, not queued",
                 (unsigned long long)a.request, ab_request_state_name(info.state),
                 (unsigned long long)info.epoch);
    }
    assert_int_equal(info.attempts, 1);
    assert_true(bp_wait_log(&t->bp, "by an earlier writer", 1, 0) >= 1);
    /* its assignee never started it, and is fenced now */
    asg_t g = {a.request, cl.epoch + 1, 1, "t-x", "r-x", "{}"};
    assert_int_equal(publish(&c, &g, 2, "RUN_FINISHED", &err), AB_RESULT_REJECTED);
    assert_int_equal(err.code, AB_FENCED);
    side_free(&c);
}

/* abandon_run during the restart grace: refused, saying the broker waits for the owner. */
static void test_abandon_in_grace_says_why(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w, "w1", 1);
    ab_run_accepted_t a = start_ok(&c, "t-1", NULL, "k-1");
    asg_t g = next_assign(&w);
    publish_ok(&w, &g, 1, "RUN_STARTED");
    wait_state(&c, a.request, AB_REQ_STARTED);
    side_free(&w);
    side_free(&c);
    bp_kill(&t->bp);
    assert_int_equal(bp_restart(&t->bp), 0);
    c = side_new(&t->bp);
    ab_abandon_run_t ar = {SV("t-1"), SV(g.run), {0}};
    ab_abandoned_t out;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_abandon_run(c.c, &ar, c.doc, &out, IT_TIMEOUT, &err), AB_CONFLICT);
    assert_string_equal(err.field, "run");
    if (strstr(err.message, "live owner") != NULL || strstr(err.message, "restart") == NULL ||
        strstr(err.message, "w1") == NULL)
        fail_msg("abandon_run in the grace: %s", err.message);
    const ab_error_detail_t *dt = ab_error_detail(&err, "wait_ms");
    assert_non_null(dt);
    assert_true(dt->i > 0 && dt->i <= AB_LEASE_MS_DEFAULT);
    assert_true(err.retryable); /* the same request goes through once the grace is over */
    ab_request_info_t info;
    assert_true(find_req(&c, a.request, AB_REQ_STARTED, &info));
    assert_false(info.orphaned);
    side_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_load_waits_for_store, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recover_earlier_writer_not_started, setup, teardown),
        cmocka_unit_test_setup_teardown(test_abandon_in_grace_says_why, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

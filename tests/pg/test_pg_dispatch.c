/*
 * test_pg_dispatch.c - run dispatch across two broker processes on one
 * PostgreSQL database (docs/SCALING.md "Dispatch across brokers"): a request
 * put through one broker is assigned to a worker of the other and its run's
 * events move it there; requests queued with no worker anywhere are each
 * served once by a worker that joins later; a request a leaving worker held
 * is requeued once and taken through the other broker at a higher epoch, the
 * first worker fenced; two brokers that both hold one queued request and
 * both have a worker assign it once, and the loser fences nobody (its claim
 * never happened); cancel_run through one broker of a run assigned through
 * the other reaches its worker; cancel_run through one broker of a run started by the
 * other's worker is delivered to that worker (also in the moment before the request is
 * stored started), once however often it is asked, and answered no_owner once that
 * broker's lease has ended; a SIGKILLed broker's assignment is settled
 * by the other once the lost broker's lease has ended, and its started run
 * announced orphaned (continued by a claim through the other broker). The workers speak the wire
 * themselves (ab_conn), so each assignment is seen as it arrives.
 *
 * One server and two brokers for the file; a fresh agent per test, so no
 * worker of another test is offered its requests.
 */
#define PG2_OWN_GROUP /* its brokers keep logs (group_setup below) */
#include "pg_brokers.h"
#include "testutil.h"

#include "broker_proc.h"
#include "dispatch_side.h"

static unsigned g_serial;

static int group_setup(void **state)
{
    (void)state;
    /* the brokers' logs, for test_moves_without_warnings */
    snprintf(g_a.log, sizeof g_a.log, "/tmp/ab-pgdisp-a-%d.log", (int)getpid());
    snprintf(g_b.log, sizeof g_b.log, "/tmp/ab-pgdisp-b-%d.log", (int)getpid());
    return pg2_start(&g_pg, &g_a, &g_b, g_extra);
}

static int group_teardown(void **state)
{
    (void)state;
    char a[sizeof g_a.log], b[sizeof g_b.log];
    memcpy(a, g_a.log, sizeof a);
    memcpy(b, g_b.log, sizeof b);
    pg2_stop(&g_pg, &g_a, &g_b);
    unlink(a);
    unlink(b);
    return 0;
}

static void fresh(char *out, size_t cap, const char *what)
{
    snprintf(out, cap, "%s-%d-%u", what, (int)getpid(), ++g_serial);
}

/* ---- a client or worker connection ---------------------------------------------------------- */

/* Register @p s as worker @p name serving @p agent with @p cap runs at once. */
static void serve(side_t *s, const char *name, const char *agent, uint32_t cap)
{
    serve_agent(s, name, agent, cap, 0);
}

static uint64_t start(side_t *s, const char *agent, const char *thread)
{
    char key[96];
    fresh(key, sizeof key, "key");
    ab_start_run_t r = {SV(agent), SV(thread),     {0}, tu_json(&s->tu, "{\"messages\":[]}"),
                        SV(key),   AB_IF_BUSY_OMIT};
    ab_run_accepted_t a;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_start_run(s->c, &r, s->doc, &a, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("start_run: %s: %s", ab_status_name(err.code), err.message);
    return a.request;
}

/* The stored state of request @p id, straight from the database. */
static long long stored(const char *what, uint64_t id)
{
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT %s FROM ab_requests WHERE id = %llu", what,
             (unsigned long long)id);
    return pgfx_scalar1(&g_pg, sql);
}

static long long state_is(uint64_t id, const char *state)
{
    char what[96];
    snprintf(what, sizeof what, "(state = '%s')::int", state);
    return stored(what, id);
}

/* Wait until request @p id is stored in @p state (moves follow commits between groups). */
static void wait_stored(uint64_t id, const char *state)
{
    long end = pgfx_now_ms() + 10000;
    while (state_is(id, state) != 1 && pgfx_now_ms() < end)
        pgfx_sleep_ms(20);
    if (state_is(id, state) != 1)
        fail_msg("request %llu is not %s", (unsigned long long)id, state);
}

static long long run_epoch(const asg_t *a)
{
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT epoch FROM ab_runs WHERE thread = '%s' AND run = '%s'",
             a->thread, a->run);
    return pgfx_scalar1(&g_pg, sql);
}

/* A `requests` answer from @p s's broker (its dispatcher has loaded the store by then). */
static void answered_requests(side_t *s)
{
    ab_requests_t q = {AB_REQ_QUEUED, {0}, 0, 1};
    ab_requests_reply_t r;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_requests(s->c, &q, s->doc, &r, IT_TIMEOUT, &err), AB_OK);
}

/* ---- the tests ------------------------------------------------------------------------------ */

/* start_run sent to B reaches the worker on A; the run's events (through A) end it. */
static void test_put_on_b_assigned_on_a(void **state)
{
    (void)state;
    char agent[64], th[64];
    fresh(agent, sizeof agent, "ag");
    fresh(th, sizeof th, "t");
    side_t wa = side_new(&g_a), cb = side_new(&g_b);
    serve(&wa, "wa", agent, 1);
    uint64_t id = start(&cb, agent, th);
    asg_t g = next_assign(&wa);
    assert_int_equal(g.request, id);
    assert_string_equal(g.thread, th);
    assert_int_equal(g.attempt, 1);
    assert_int_equal(run_epoch(&g), (long long)g.epoch);
    run_through(&wa, &g);
    wait_stored(id, "ended");
    side_free(&wa);
    side_free(&cb);
}

/* Requests queued on B with no worker anywhere: a worker joining A serves each once. */
static void test_queued_served_once_by_late_worker(void **state)
{
    (void)state;
    enum { N = 3 };
    char agent[64], th[N][64];
    fresh(agent, sizeof agent, "ag");
    side_t cb = side_new(&g_b);
    uint64_t ids[N];
    for (int i = 0; i < N; i++) {
        fresh(th[i], sizeof th[i], "t");
        ids[i] = start(&cb, agent, th[i]);
    }
    side_t wa = side_new(&g_a);
    serve(&wa, "wa", agent, N);
    bool got[N] = {false};
    asg_t g[N];
    for (int k = 0; k < N; k++) {
        g[k] = next_assign(&wa);
        int hit = -1;
        for (int i = 0; i < N; i++)
            if (ids[i] == g[k].request)
                hit = i;
        assert_true(hit >= 0);
        assert_false(got[hit]); /* each once */
        got[hit] = true;
        assert_int_equal(g[k].attempt, 1);
    }
    assert_true(quiet(&wa, 1500)); /* and nothing again, after the brokers' next refresh */
    for (int k = 0; k < N; k++)
        run_through(&wa, &g[k]);
    for (int i = 0; i < N; i++)
        wait_stored(ids[i], "ended");
    side_free(&wa);
    side_free(&cb);
}

/* A worker on A leaves holding an assignment: requeued once, taken through B at a higher
 * epoch; the first worker's events are refused (fenced). */
static void test_leave_requeued_taken_on_b(void **state)
{
    (void)state;
    char agent[64], th[64];
    fresh(agent, sizeof agent, "ag");
    fresh(th, sizeof th, "t");
    side_t wa = side_new(&g_a), ca = side_new(&g_a);
    serve(&wa, "wa", agent, 1);
    uint64_t id = start(&ca, agent, th);
    asg_t g1 = next_assign(&wa);
    assert_int_equal(g1.request, id);
    /* B restarted loads it as assigned through A: neither its recovery at start (bug 4) nor
     * a worker registering on B (bug 2) may send it back to the queue */
    assert_int_equal(bp_stop(&g_b), 0);
    assert_int_equal(bp_restart(&g_b), 0);
    side_t wb = side_new(&g_b);
    answered_requests(&wb);
    serve(&wb, "wb", agent, 1);
    assert_true(quiet(&wb, 300)); /* held through A: B leaves it alone */
    assert_int_equal(state_is(id, "assigned"), 1);
    assert_int_equal(stored("epoch", id), (long long)g1.epoch);
    ab_msg_t m = {.op = AB_OP_LEAVE}, r;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_request(wa.c, &m, NULL, 0, wa.doc, &r, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(r.op, AB_OP_LEFT);
    asg_t g2 = next_assign(&wb);
    assert_int_equal(g2.request, id);
    assert_int_equal(g2.attempt, 2);
    assert_true(g2.epoch > g1.epoch);
    assert_int_equal(publish(&wa, &g1, 1, "RUN_STARTED", &err), AB_RESULT_REJECTED);
    assert_int_equal(err.code, AB_FENCED);
    run_through(&wb, &g2);
    wait_stored(id, "ended");
    assert_int_equal(stored("attempts", id), 2); /* requeued once */
    assert_true(quiet(&wb, 300));
    side_free(&wa);
    side_free(&ca);
    side_free(&wb);
}

/* Both brokers hold one queued request and get a worker each at once: one assignment, and
 * the run's epoch is that assignment's (the other broker never claimed it). */
static void test_two_brokers_one_request(void **state)
{
    (void)state;
    char agent[64], th[64];
    fresh(agent, sizeof agent, "ag");
    fresh(th, sizeof th, "t");
    side_t ca = side_new(&g_a);
    uint64_t id = start(&ca, agent, th);
    side_free(&ca);
    /* both brokers load it at start: each table holds it queued (bug 3's race) */
    assert_int_equal(bp_stop(&g_a), 0);
    assert_int_equal(bp_stop(&g_b), 0);
    assert_int_equal(bp_restart(&g_a), 0);
    assert_int_equal(bp_restart(&g_b), 0);
    side_t wa = side_new(&g_a), wb = side_new(&g_b);
    answered_requests(&wa); /* a dispatch op is answered after the load: both hold it now */
    answered_requests(&wb);
    serve(&wa, "wa", agent, 1);
    serve(&wb, "wb", agent, 1);
    ab_msg_t m;
    side_t *win = NULL, *lose = NULL;
    long end = pgfx_now_ms() + IT_TIMEOUT;
    while (win == NULL && pgfx_now_ms() < end) {
        if (ab_conn_recv(wa.c, 0, wa.doc, &m, 20, NULL) == AB_OK && m.op == AB_OP_ASSIGN)
            win = &wa, lose = &wb;
        else if (ab_conn_recv(wb.c, 0, wb.doc, &m, 20, NULL) == AB_OK && m.op == AB_OP_ASSIGN)
            win = &wb, lose = &wa;
    }
    assert_non_null(win);
    asg_t g = asg_of(&m);
    assert_int_equal(g.request, id);
    assert_true(quiet(lose, 1500));
    assert_int_equal(run_epoch(&g), (long long)g.epoch); /* no lost claim bumped it */
    assert_int_equal(stored("attempts", id), 1);
    run_through(win, &g);
    wait_stored(id, "ended");
    side_free(&wa);
    side_free(&wb);
}

/* cancel_run through B of a run assigned to A's worker: dequeued (B's claim fences the
 * worker), and A, learning of it, sends its worker run_cancel. */
static void test_cancel_through_b(void **state)
{
    (void)state;
    char agent[64], th[64];
    fresh(agent, sizeof agent, "ag");
    fresh(th, sizeof th, "t");
    side_t wa = side_new(&g_a), cb = side_new(&g_b);
    serve(&wa, "wa", agent, 1);
    uint64_t id = start(&cb, agent, th);
    asg_t g = next_assign(&wa);
    assert_int_equal(g.request, id);
    ab_cancel_run_t c = {SV(g.thread), SV(g.run), SV("stop")};
    ab_cancel_reply_t rep;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_cancel_run(cb.c, &c, cb.doc, &rep, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(rep.outcome, AB_CANCEL_DEQUEUED);
    assert_int_equal(rep.request, id);
    assert_int_equal(state_is(id, "cancelled"), 1);
    ab_msg_t m;
    assert_int_equal(ab_conn_recv(wa.c, 0, wa.doc, &m, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(m.op, AB_OP_RUN_CANCEL);
    assert_int_equal(m.u.run_cancel.request, id);
    assert_int_equal(m.u.run_cancel.epoch, g.epoch);
    assert_int_equal(publish(&wa, &g, 1, "RUN_STARTED", &err), AB_RESULT_REJECTED);
    assert_int_equal(err.code, AB_FENCED);
    side_free(&wa);
    side_free(&cb);
}

/* RUN_FINISHED with outcome cancelled, as PROTOCOL.md 7.13 asks of a cancelled run's owner. */
static void finish_cancelled(side_t *w, const asg_t *a, uint64_t seq)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\","
             "\"outcome\":{\"type\":\"cancelled\"}}",
             a->thread, a->run);
    ab_buf_t ev = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_envelope_json(&ev, 1, a->thread, a->run, seq, a->epoch, body, NULL), AB_OK);
    assert_int_equal(it_publish1(w->c, w->doc, &ev, &err).status, AB_RESULT_ACCEPTED);
    ab_buf_free(&ev);
}

static ab_cancel_outcome_t cancel_via(side_t *s, const asg_t *a)
{
    ab_cancel_run_t c = {SV(a->thread), SV(a->run), SV("stop")};
    ab_cancel_reply_t rep;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_cancel_run(s->c, &c, s->doc, &rep, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("cancel_run: %s: %s", ab_status_name(err.code), err.message);
    assert_int_equal(rep.request, a->request);
    return rep.outcome;
}

/* The next unsolicited message on @p w is run_cancel of @p a's request at its epoch. */
static void expect_run_cancel(side_t *w, const asg_t *a)
{
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_recv(w->c, 0, w->doc, &m, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(m.op, AB_OP_RUN_CANCEL);
    assert_int_equal(m.u.run_cancel.request, a->request);
    assert_int_equal(m.u.run_cancel.epoch, a->epoch);
}

static long long run_outcome_cancelled(const asg_t *a)
{
    char sql[400];
    snprintf(sql, sizeof sql,
             "SELECT (outcome = 'cancelled')::int FROM ab_runs WHERE thread = '%s' AND run = '%s'",
             a->thread, a->run);
    return pgfx_scalar1(&g_pg, sql);
}

/* A run started by A's worker, cancelled through B: delivered (A's lease is alive), A sends
 * its worker run_cancel at the assignment's epoch, and the worker ends the run cancelled.
 * Cancelling again changes nothing: the same answer, no second run_cancel. */
static void test_cancel_started_through_b(void **state)
{
    (void)state;
    char agent[64], th[64];
    fresh(agent, sizeof agent, "ag");
    fresh(th, sizeof th, "t");
    side_t wa = side_new(&g_a), cb = side_new(&g_b);
    serve(&wa, "wa", agent, 1);
    uint64_t id = start(&cb, agent, th);
    asg_t g = next_assign(&wa);
    assert_int_equal(g.request, id);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(publish(&wa, &g, 1, "RUN_STARTED", &err), AB_RESULT_ACCEPTED);
    wait_stored(id, "started");
    assert_int_equal(cancel_via(&cb, &g), AB_CANCEL_DELIVERED);
    assert_int_equal(stored("cancel_epoch", id), (long long)g.epoch);
    expect_run_cancel(&wa, &g);
    assert_int_equal(cancel_via(&cb, &g), AB_CANCEL_DELIVERED); /* again: nothing new */
    assert_true(quiet(&wa, 1500));                              /* past A's next refresh */
    assert_int_equal(run_epoch(&g), (long long)g.epoch);        /* nobody fenced the worker */
    finish_cancelled(&wa, &g, 2);
    wait_stored(id, "ended");
    assert_int_equal(run_outcome_cancelled(&g), 1);
    assert_int_equal(cancel_via(&cb, &g), AB_CANCEL_ENDED);
    side_free(&wa);
    side_free(&cb);
}

/* start_run through B with if_busy interrupt on a thread whose run A's worker started: the
 * worker on A is sent run_cancel; once it ends the run, the new request is assigned. */
static void test_interrupt_through_b(void **state)
{
    (void)state;
    char agent[64], th[64], key[96];
    fresh(agent, sizeof agent, "ag");
    fresh(th, sizeof th, "t");
    fresh(key, sizeof key, "key");
    side_t wa = side_new(&g_a), cb = side_new(&g_b);
    serve(&wa, "wa", agent, 1);
    uint64_t id = start(&cb, agent, th);
    asg_t g = next_assign(&wa);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(publish(&wa, &g, 1, "RUN_STARTED", &err), AB_RESULT_ACCEPTED);
    wait_stored(id, "started");
    ab_start_run_t r = {SV(agent), SV(th),
                        {0},       tu_json(&cb.tu, "{\"messages\":[]}"),
                        SV(key),   AB_IF_BUSY_INTERRUPT};
    ab_run_accepted_t a;
    assert_int_equal(ab_conn_start_run(cb.c, &r, cb.doc, &a, IT_TIMEOUT, &err), AB_OK);
    expect_run_cancel(&wa, &g);
    finish_cancelled(&wa, &g, 2);
    asg_t g2 = next_assign(&wa);
    assert_int_equal(g2.request, a.request);
    run_through(&wa, &g2);
    wait_stored(a.request, "ended");
    side_free(&wa);
    side_free(&cb);
}

/* The moment between the commit of the RUN_STARTED and A's move of the request to started:
 * made here by giving the run its status in the database (what the RUN_STARTED's commit
 * does) while the request stays assigned. A cancel through B is then the started case:
 * delivered, the worker not fenced, its RUN_STARTED still accepted. */
static void test_cancel_in_the_start_window(void **state)
{
    (void)state;
    char agent[64], th[64], sql[400];
    fresh(agent, sizeof agent, "ag");
    fresh(th, sizeof th, "t");
    side_t wa = side_new(&g_a), cb = side_new(&g_b);
    serve(&wa, "wa", agent, 1);
    uint64_t id = start(&cb, agent, th);
    asg_t g = next_assign(&wa);
    snprintf(sql, sizeof sql,
             "UPDATE ab_runs SET status = 'active' WHERE thread = '%s' AND run = '%s' RETURNING 1",
             g.thread, g.run);
    assert_int_equal(pgfx_scalar1(&g_pg, sql), 1);
    assert_int_equal(state_is(id, "assigned"), 1);
    assert_int_equal(cancel_via(&cb, &g), AB_CANCEL_DELIVERED);
    assert_int_equal(state_is(id, "assigned"), 1);
    assert_int_equal(run_epoch(&g), (long long)g.epoch);
    expect_run_cancel(&wa, &g);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(publish(&wa, &g, 1, "RUN_STARTED", &err), AB_RESULT_ACCEPTED);
    finish_cancelled(&wa, &g, 2);
    wait_stored(id, "ended");
    assert_int_equal(run_outcome_cancelled(&g), 1);
    side_free(&wa);
    side_free(&cb);
}

/* A started run of a broker that died: once its lease has ended, a cancel through B answers
 * no_owner and marks nothing (nobody would send it on). */
static void test_cancel_started_of_dead_broker(void **state)
{
    (void)state;
    char agent[64], th[64], sql[256];
    fresh(agent, sizeof agent, "ag");
    fresh(th, sizeof th, "t");
    side_t wa = side_new(&g_a), cb = side_new(&g_b);
    serve(&wa, "wa", agent, 1);
    uint64_t id = start(&cb, agent, th);
    asg_t g = next_assign(&wa);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(publish(&wa, &g, 1, "RUN_STARTED", &err), AB_RESULT_ACCEPTED);
    wait_stored(id, "started");
    bp_kill(&g_a);
    /* its lease ends now rather than in AB_LEASE_MS_DEFAULT */
    snprintf(sql, sizeof sql,
             "UPDATE ab_brokers SET alive_until_us = 0 WHERE instance ="
             " (SELECT broker FROM ab_requests WHERE id = %llu) RETURNING 1",
             (unsigned long long)id);
    assert_int_equal(pgfx_scalar1(&g_pg, sql), 1);
    assert_int_equal(cancel_via(&cb, &g), AB_CANCEL_NO_OWNER);
    assert_int_equal(cancel_via(&cb, &g), AB_CANCEL_NO_OWNER);
    assert_int_equal(stored("cancel_epoch", id), 0);
    assert_int_equal(state_is(id, "started"), 1);
    side_free(&wa);
    side_free(&cb);
    assert_int_equal(bp_restart(&g_a), 0);
}

/* Lines of broker @p b's log holding both @p x and @p y. */
static int log_lines(const bp_t *b, const char *x, const char *y)
{
    FILE *f = fopen(b->log, "r");
    char line[2048];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, x) != NULL && strstr(line, y) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* Runs put through B and run at once by A's worker: both brokers move each request on its
 * events (B following A's commits, its copy often a refresh behind), and neither logs a move
 * refused as a warning (a move another broker made first, or one its copy was too old for, is
 * read back from the store and is no warning). */
static void test_moves_without_warnings(void **state)
{
    (void)state;
    enum { N = 16 };
    char agent[64];
    fresh(agent, sizeof agent, "ag");
    side_t wa = side_new(&g_a), cb = side_new(&g_b);
    serve(&wa, "wa", agent, N);
    uint64_t ids[N];
    for (int i = 0; i < N; i++) {
        char th[64];
        fresh(th, sizeof th, "t");
        ids[i] = start(&cb, agent, th);
        asg_t g = next_assign(&wa);
        run_through(&wa, &g);
    }
    for (int i = 0; i < N; i++)
        wait_stored(ids[i], "ended");
    assert_true(quiet(&wa, 300)); /* the brokers' pumps after the last commits */
    assert_int_equal(log_lines(&g_a, " warn ", "not moved to"), 0);
    assert_int_equal(log_lines(&g_b, " warn ", "not moved to"), 0);
    /* every request kept A, which assigned it, as its holder: B, following A's RUN_STARTED
     * with a copy a refresh had already shown started, once moved it again as its own */
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT count(DISTINCT broker) FROM ab_requests WHERE id BETWEEN %llu AND %llu",
             (unsigned long long)ids[0], (unsigned long long)ids[N - 1]);
    assert_int_equal(pgfx_scalar1(&g_pg, sql), 1);
    side_free(&wa);
    side_free(&cb);
}

/* The request @p id as B's `requests` lists it (its table's orphan flag); false when not. */
static bool listed_as(side_t *s, uint64_t id, ab_request_info_t *out)
{
    ab_requests_t q = {AB_REQ_NONE, {0}, id - 1, 1};
    ab_requests_reply_t r;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_requests(s->c, &q, s->doc, &r, IT_TIMEOUT, &err), AB_OK);
    if (r.nrequests == 0 || r.requests[0].request != id)
        return false;
    *out = r.requests[0];
    return true;
}

/* Broker A SIGKILLed while its worker holds an assignment and a started run: once A's lease
 * has ended, B moves the assignment back to the queue (B's worker runs it) and announces the
 * started run orphaned (never run again by itself; B's worker continues it by a claim). */
static void test_lost_broker_settled(void **state)
{
    (void)state;
    char agent[64], th1[64], th2[64];
    fresh(agent, sizeof agent, "ag");
    fresh(th1, sizeof th1, "t");
    fresh(th2, sizeof th2, "t");
    side_t wa = side_new(&g_a), ca = side_new(&g_a);
    serve(&wa, "wa", agent, 2);
    uint64_t id1 = start(&ca, agent, th1), id2 = start(&ca, agent, th2);
    asg_t x = next_assign(&wa), y = next_assign(&wa);
    asg_t g1 = x.request == id1 ? x : y, g2 = x.request == id1 ? y : x;
    assert_int_equal(g1.request, id1);
    assert_int_equal(g2.request, id2);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(publish(&wa, &g2, 1, "RUN_STARTED", &err), AB_RESULT_ACCEPTED);
    wait_stored(id2, "started");
    side_t wb = side_new(&g_b);
    serve_agent(&wb, "wb", agent, 2, AB_LEASE_MS_MAX); /* it stays silent past A's lease */
    bp_kill(&g_a);
    asg_t g3 = next_assign_within(&wb, AB_LEASE_MS_DEFAULT + 2 * IT_TIMEOUT);
    assert_int_equal(g3.request, id1);
    assert_int_equal(g3.attempt, 2);
    assert_true(g3.epoch > g1.epoch);
    run_through(&wb, &g3);
    wait_stored(id1, "ended");
    ab_request_info_t info = {0};
    long end = pgfx_now_ms() + 2 * IT_TIMEOUT;
    while (!(listed_as(&wb, id2, &info) && info.orphaned) && pgfx_now_ms() < end)
        pgfx_sleep_ms(20);
    assert_true(info.orphaned);
    assert_int_equal(info.state, AB_REQ_STARTED);
    assert_true(quiet(&wb, 300)); /* a started run is never assigned again */
    ab_claimed_t cl;
    assert_int_equal(ab_conn_claim(wb.c, g2.thread, g2.run, wb.doc, &cl, IT_TIMEOUT, &err), AB_OK);
    assert_true(cl.epoch > g2.epoch);
    assert_true(listed_as(&wb, id2, &info));
    assert_false(info.orphaned);
    assert_int_equal(info.worker.len, 2);
    assert_memory_equal(info.worker.ptr, "wb", 2);
    g2.epoch = cl.epoch;
    assert_int_equal(publish(&wb, &g2, 2, "RUN_FINISHED", &err), AB_RESULT_ACCEPTED);
    wait_stored(id2, "ended");
    side_free(&wa);
    side_free(&ca);
    side_free(&wb);
    assert_int_equal(bp_restart(&g_a), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_on_b_assigned_on_a),
        cmocka_unit_test(test_queued_served_once_by_late_worker),
        cmocka_unit_test(test_leave_requeued_taken_on_b),
        cmocka_unit_test(test_two_brokers_one_request),
        cmocka_unit_test(test_cancel_through_b),
        cmocka_unit_test(test_cancel_started_through_b),
        cmocka_unit_test(test_cancel_in_the_start_window),
        cmocka_unit_test(test_interrupt_through_b),
        cmocka_unit_test(test_cancel_started_of_dead_broker),
        cmocka_unit_test(test_lost_broker_settled),
        cmocka_unit_test(test_moves_without_warnings),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

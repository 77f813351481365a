/*
 * test_dispatch.c - run dispatch through a real broker process
 * (docs/PROTOCOL.md 7.12 - 7.15): start_run is durable and idempotent, is
 * assigned with a claim epoch to the live worker with the most free
 * capacity, one run per thread; RUN_STARTED commits move it to started,
 * its end to ended; a decline or a lapsed lease before RUN_STARTED gives it
 * back to the queue (the old epoch fenced), after RUN_STARTED it is
 * orphaned and never run again; cancel_run's four answers; if_busy; the
 * store keeps requests across a SIGKILL of the broker. The workers here
 * speak the wire themselves, so each step is seen as it happens.
 */
#include "testutil.h"

#include "agentbus/subscriber.h"
#include "broker_proc.h"
#include "dispatch_side.h"

#include <string.h>

/* Register @p s as worker @p name serving agent "coder" with @p cap runs at once. */
static void serve(side_t *s, const char *name, uint32_t cap, uint32_t lease_ms)
{
    serve_agent(s, name, "coder", cap, lease_ms);
}

/* start_run of agent "coder" on @p thread with key @p key; the answer's status. */
static ab_status_t start(side_t *s, const char *thread, const char *run, const char *key,
                         const char *input, ab_if_busy_t busy, ab_run_accepted_t *out,
                         ab_error_t *err)
{
    ab_start_run_t r = {SV("coder"),
                        SV(thread),
                        run ? SV(run) : (ab_str_t){0},
                        tu_json(&s->tu, input ? input : "{\"messages\":[]}"),
                        SV(key),
                        busy};
    return ab_conn_start_run(s->c, &r, s->doc, out, IT_TIMEOUT, err);
}

static ab_run_accepted_t start_ok(side_t *s, const char *thread, const char *key)
{
    ab_run_accepted_t a;
    ab_error_t err = AB_ERROR_INIT;
    if (start(s, thread, NULL, key, NULL, AB_IF_BUSY_OMIT, &a, &err) != AB_OK)
        fail_msg("start_run: %s: %s (field %s)", ab_status_name(err.code), err.message, err.field);
    return a;
}

static void test_start_assign_finish(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w, "w1", 1, 0);
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1");
    assert_int_equal(a.state, AB_REQ_ASSIGNED);
    assert_false(a.existing);
    char run[128];
    snprintf(run, sizeof run, "%.*s", (int)a.run.len, a.run.ptr);
    asg_t g = next_assign(&w);
    assert_int_equal(g.request, a.request);
    assert_string_equal(g.run, run);
    assert_int_equal(g.attempt, 1);
    assert_true(g.epoch >= 1);
    /* an assigned run cannot be claimed by anyone else: it would fence the assignee */
    ab_claimed_t cl;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_claim(c.c, "t-1", run, c.doc, &cl, IT_TIMEOUT, &err), AB_CONFLICT);
    assert_non_null(strstr(err.message, "w1"));
    run_through(&w, &g);
    ab_request_info_t info = wait_state(&c, a.request, AB_REQ_ENDED);
    assert_int_equal(info.worker.len, 2);
    assert_memory_equal(info.worker.ptr, "w1", 2);
    /* the same key: the same request, also once it ended */
    ab_run_accepted_t b = start_ok(&c, "t-1", "k-1");
    assert_true(b.existing);
    assert_int_equal(b.request, a.request);
    assert_int_equal(b.state, AB_REQ_ENDED);
    assert_int_equal(b.run.len, strlen(run));
    side_free(&w);
    side_free(&c);
}

static void test_one_run_per_thread(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w, "w1", 2, 0);
    ab_run_accepted_t a1 = start_ok(&c, "t-1", "k-1");
    ab_run_accepted_t a2 = start_ok(&c, "t-1", "k-2");
    ab_run_accepted_t a3 = start_ok(&c, "t-2", "k-3");
    assert_int_equal(a1.state, AB_REQ_ASSIGNED);
    assert_int_equal(a2.state, AB_REQ_QUEUED); /* behind a1: one run per thread */
    assert_int_equal(a2.position, 0);
    assert_int_equal(a3.state, AB_REQ_ASSIGNED); /* another thread: the second slot */
    asg_t g1 = next_assign(&w), g3 = next_assign(&w);
    assert_int_equal(g1.request, a1.request);
    assert_int_equal(g3.request, a3.request);
    /* a child run of the active run is not held back */
    ab_run_accepted_t ch;
    ab_error_t err = AB_ERROR_INIT;
    char in[300];
    snprintf(in, sizeof in, "{\"messages\":[],\"parentRunId\":\"%s\"}", g1.run);
    run_through(&w, &g3); /* frees a slot */
    assert_int_equal(start(&c, "t-1", "child-1", "k-4", in, AB_IF_BUSY_REJECT, &ch, &err), AB_OK);
    asg_t gc = next_assign(&w);
    assert_int_equal(gc.request, ch.request);
    run_through(&w, &gc);
    run_through(&w, &g1);
    asg_t g2 = next_assign(&w);
    assert_int_equal(g2.request, a2.request);
    side_free(&w);
    side_free(&c);
}

static void test_decline_and_lapse_requeue(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w1 = side_new(&t->bp), w2 = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w1, "w1", 1, 0);
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1");
    asg_t g = next_assign(&w1);
    ab_msg_t m = {.op = AB_OP_DECLINE}, r;
    m.u.decline = (ab_decline_t){g.request, g.epoch, SV("busy")};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_request(w1.c, &m, NULL, 0, w1.doc, &r, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(r.op, AB_OP_DECLINED);
    assert_int_equal(r.u.declined.state, AB_REQ_QUEUED);
    serve(&w2, "w2", 1, AB_LEASE_MS_MIN); /* w1 declined: w2 gets it */
    asg_t g2 = next_assign(&w2);
    assert_int_equal(g2.request, a.request);
    assert_int_equal(g2.attempt, 2);
    assert_true(g2.epoch > g.epoch);
    /* w1's old epoch is fenced */
    assert_int_equal(publish(&w1, &g, 1, "RUN_STARTED", &err), AB_RESULT_REJECTED);
    assert_int_equal(err.code, AB_FENCED);
    /* w2 goes silent before RUN_STARTED: its lease lapses and the request returns to w1 */
    ab_request_info_t info = {0};
    for (int i = 0; i < 400 && !(find_req(&c, a.request, AB_REQ_NONE, &info) && info.attempts == 3);
         i++)
        ab_conn_wait(c.c, 20);
    asg_t g3 = next_assign(&w1);
    assert_int_equal(g3.request, a.request);
    assert_int_equal(g3.attempt, 3);
    run_through(&w1, &g3);
    wait_state(&c, a.request, AB_REQ_ENDED);
    side_free(&w1);
    side_free(&w2);
    side_free(&c);
}

typedef struct seen {
    int notices;
    ab_notice_kind_t kind;
    char run[128], worker[64];
    uint64_t request;
} seen_t;

static void on_notice(void *ud, const ab_notice_t *n)
{
    seen_t *s = ud;
    s->notices++;
    s->kind = n->kind;
    s->request = n->request;
    snprintf(s->run, sizeof s->run, "%.*s", (int)n->run.len, n->run.ptr);
    snprintf(s->worker, sizeof s->worker, "%.*s", (int)n->worker.len,
             n->worker.ptr ? n->worker.ptr : "");
}

static int on_event(void *ud, const ab_sub_event_t *e)
{
    (void)ud;
    (void)e;
    return 0;
}

static void test_orphaned_never_rerun(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w1 = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w1, "w1", 1, AB_LEASE_MS_MIN);
    /* an observer of the thread is told when the run is orphaned (PROTOCOL.md 6.4) */
    seen_t seen = {0};
    ab_sub_opts_t so = {.scope = AB_SUB_THREAD,
                        .thread = "t-1",
                        .on_event = on_event,
                        .on_notice = on_notice,
                        .ud = &seen};
    ab_sub_t *sub = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_sub_new(&sub, t->bp.cmd, &so, &err), AB_OK);
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1");
    asg_t g = next_assign(&w1);
    assert_int_equal(publish(&w1, &g, 1, "RUN_STARTED", &err), AB_RESULT_ACCEPTED);
    wait_state(&c, a.request, AB_REQ_STARTED);
    assert_int_equal(ab_sub_poll(sub, 100, &err), AB_OK); /* live before the owner goes */
    side_free(&w1);                                       /* the owner goes after RUN_STARTED */
    side_t w2 = side_new(&t->bp);
    serve(&w2, "w2", 1, 0);
    ab_request_info_t info = {0};
    for (int i = 0; i < 400 && !(find_req(&c, a.request, AB_REQ_STARTED, &info) && info.orphaned);
         i++)
        ab_conn_wait(c.c, 20);
    assert_true(info.orphaned);
    for (int i = 0; i < 100 && seen.notices == 0; i++)
        assert_int_equal(ab_sub_poll(sub, 20, &err), AB_OK);
    assert_int_equal(seen.notices, 1);
    assert_int_equal(seen.kind, AB_NOTICE_ORPHANED);
    assert_int_equal(seen.request, a.request);
    assert_string_equal(seen.run, g.run);
    assert_string_equal(seen.worker, "w1");
    ab_sub_destroy(&sub);
    assert_true(it_head(c.c, c.doc, "t-1", g.run).orphaned); /* heads say so too */
    assert_true(quiet(&w2, 300));                            /* never run again by itself */
    ab_cancel_run_t cr = {SV("t-1"), SV(g.run), {0}};
    ab_cancel_reply_t rep;
    assert_int_equal(ab_conn_cancel_run(c.c, &cr, c.doc, &rep, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(rep.outcome, AB_CANCEL_NO_OWNER);
    /* continue-by-claim: w2 claims the orphan and owns it */
    ab_claimed_t cl;
    assert_int_equal(ab_conn_claim(w2.c, "t-1", g.run, w2.doc, &cl, IT_TIMEOUT, &err), AB_OK);
    assert_true(find_req(&c, a.request, AB_REQ_STARTED, &info));
    assert_false(info.orphaned);
    assert_int_equal(info.worker.len, 2);
    assert_memory_equal(info.worker.ptr, "w2", 2);
    asg_t g2 = g;
    g2.epoch = cl.epoch;
    assert_int_equal(publish(&w2, &g2, 2, "RUN_FINISHED", &err), AB_RESULT_ACCEPTED);
    wait_state(&c, a.request, AB_REQ_ENDED);
    side_free(&w2);
    side_free(&c);
}

static void test_cancel_cases(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    ab_error_t err = AB_ERROR_INIT;
    ab_cancel_reply_t rep;
    /* queued (no worker yet): dequeued */
    ab_run_accepted_t q = start_ok(&c, "t-q", "k-q");
    assert_int_equal(q.state, AB_REQ_QUEUED);
    char qrun[128];
    snprintf(qrun, sizeof qrun, "%.*s", (int)q.run.len, q.run.ptr);
    ab_cancel_run_t cr = {SV("t-q"), SV(qrun), SV("not needed")};
    assert_int_equal(ab_conn_cancel_run(c.c, &cr, c.doc, &rep, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(rep.outcome, AB_CANCEL_DEQUEUED);
    assert_int_equal(rep.request, q.request);
    serve(&w, "w1", 1, 0);
    assert_true(quiet(&w, 200)); /* the cancelled request is never assigned */
    /* started: delivered to the owner, which ends it with outcome cancelled */
    ab_run_accepted_t s = start_ok(&c, "t-s", "k-s");
    asg_t g = next_assign(&w);
    assert_int_equal(publish(&w, &g, 1, "RUN_STARTED", &err), AB_RESULT_ACCEPTED);
    wait_state(&c, s.request, AB_REQ_STARTED);
    cr = (ab_cancel_run_t){SV("t-s"), SV(g.run), SV("user")};
    assert_int_equal(ab_conn_cancel_run(c.c, &cr, c.doc, &rep, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(rep.outcome, AB_CANCEL_DELIVERED);
    ab_msg_t m = next_msg(&w, AB_OP_RUN_CANCEL);
    assert_int_equal(m.u.run_cancel.request, s.request);
    assert_int_equal(m.u.run_cancel.epoch, g.epoch);
    assert_memory_equal(m.u.run_cancel.reason.ptr, "user", 4);
    assert_int_equal(publish(&w, &g, 2, "RUN_FINISHED", &err), AB_RESULT_ACCEPTED);
    wait_state(&c, s.request, AB_REQ_ENDED);
    /* ended: already ended; unknown: not found */
    assert_int_equal(ab_conn_cancel_run(c.c, &cr, c.doc, &rep, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(rep.outcome, AB_CANCEL_ENDED);
    cr.run = SV("no-such-run");
    assert_int_equal(ab_conn_cancel_run(c.c, &cr, c.doc, &rep, IT_TIMEOUT, &err), AB_NOT_FOUND);
    /* assigned, not started: dequeued, the assignee told and fenced */
    ab_run_accepted_t a = start_ok(&c, "t-a", "k-a");
    asg_t ga = next_assign(&w);
    cr = (ab_cancel_run_t){SV("t-a"), SV(ga.run), {0}};
    assert_int_equal(ab_conn_cancel_run(c.c, &cr, c.doc, &rep, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(rep.outcome, AB_CANCEL_DEQUEUED);
    (void)next_msg(&w, AB_OP_RUN_CANCEL);
    assert_int_equal(publish(&w, &ga, 1, "RUN_STARTED", &err), AB_RESULT_REJECTED);
    assert_int_equal(err.code, AB_FENCED);
    ab_request_info_t info;
    assert_true(find_req(&c, a.request, AB_REQ_CANCELLED, &info));
    side_free(&w);
    side_free(&c);
}

static void test_if_busy_and_input(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w, "w1", 2, 0);
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1");
    asg_t g = next_assign(&w);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(publish(&w, &g, 1, "RUN_STARTED", &err), AB_RESULT_ACCEPTED);
    ab_run_accepted_t b;
    assert_int_equal(start(&c, "t-1", NULL, "k-2", NULL, AB_IF_BUSY_REJECT, &b, &err), AB_CONFLICT);
    assert_string_equal(err.field, "thread");
    /* interrupt: the active run's owner is asked to cancel; the new one waits for its end */
    assert_int_equal(start(&c, "t-1", "r-new", "k-3", NULL, AB_IF_BUSY_INTERRUPT, &b, &err), AB_OK);
    assert_int_equal(b.state, AB_REQ_QUEUED);
    ab_msg_t m = next_msg(&w, AB_OP_RUN_CANCEL);
    assert_int_equal(m.u.run_cancel.request, a.request);
    assert_int_equal(publish(&w, &g, 2, "RUN_FINISHED", &err), AB_RESULT_ACCEPTED);
    asg_t g2 = next_assign(&w);
    assert_string_equal(g2.run, "r-new");
    /* the input is a RunAgentInput: typed errors with its path */
    assert_int_equal(start(&c, "t-9", NULL, "k-9", "{\"messages\":{}}", 0, &b, &err),
                     AB_INVALID_EVENT);
    assert_non_null(strstr(err.field, "input/messages"));
    ab_error_clear(&err);
    assert_int_equal(
        start(&c, "t-9", NULL, "k-9", "{\"messages\":[],\"threadId\":\"other\"}", 0, &b, &err),
        AB_INVALID_EVENT);
    assert_string_equal(err.field, "input/threadId");
    /* a key names one request: another thread with it is refused */
    assert_int_equal(start(&c, "t-other", NULL, "k-1", NULL, 0, &b, &err), AB_OK);
    assert_true(b.existing); /* the key's answer, whatever else the retry says */
    side_free(&w);
    side_free(&c);
}

static void test_broker_sigkill_keeps_requests(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w, "w1", 1, 0);
    ab_run_accepted_t s = start_ok(&c, "t-s", "k-s"); /* will have started */
    asg_t gs = next_assign(&w);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(publish(&w, &gs, 1, "RUN_STARTED", &err), AB_RESULT_ACCEPTED);
    wait_state(&c, s.request, AB_REQ_STARTED);
    side_t w2 = side_new(&t->bp);
    serve(&w2, "w2", 1, 0);
    ab_run_accepted_t as = start_ok(&c, "t-a", "k-a"); /* assigned to w2, never started */
    asg_t ga = next_assign(&w2);
    assert_int_equal(ga.request, as.request);
    ab_run_accepted_t q = start_ok(&c, "t-q", "k-q"); /* queued: both workers are full */
    assert_int_equal(q.state, AB_REQ_QUEUED);
    side_free(&w);
    side_free(&w2);
    side_free(&c);
    bp_kill(&t->bp); /* SIGKILL, then the same directory */
    assert_int_equal(bp_restart(&t->bp), 0);
    c = side_new(&t->bp);
    ab_run_accepted_t q2 = start_ok(&c, "t-q", "k-q");
    assert_true(q2.existing);
    assert_int_equal(q2.request, q.request);
    assert_int_equal(q2.state, AB_REQ_QUEUED);
    w = side_new(&t->bp);
    serve(&w, "w1", 1, 0); /* the same worker name owns the started run again */
    ab_request_info_t info;
    assert_true(find_req(&c, s.request, AB_REQ_STARTED, &info));
    assert_false(info.orphaned);
    assert_true(quiet(&w, 300)); /* its one slot is the started run's: nothing else is assigned */
    assert_int_equal(publish(&w, &gs, 2, "RUN_FINISHED", &err), AB_RESULT_ACCEPTED);
    /* the assigned one went back to the queue at the restart, ahead of the queued one: w1's
     * freed slot takes it (attempt 2), its old epoch fenced; then the queued one, once */
    asg_t g2 = next_assign(&w);
    assert_int_equal(g2.request, as.request);
    assert_int_equal(g2.attempt, 2);
    assert_true(g2.epoch > ga.epoch);
    assert_int_equal(publish(&w, &ga, 1, "RUN_STARTED", &err), AB_RESULT_REJECTED);
    assert_int_equal(err.code, AB_FENCED);
    run_through(&w, &g2);
    asg_t gq = next_assign(&w);
    assert_int_equal(gq.request, q.request);
    assert_int_equal(gq.attempt, 1);
    side_free(&w);
    side_free(&c);
}

/* resume_run of run @p run on "t-r" with entries @p json; the status, error in *err. */
static ab_status_t resume(side_t *c, const char *run, const char *key, const char *json,
                          ab_run_accepted_t *out, ab_error_t *err)
{
    ab_error_clear(err);
    ab_resume_run_t r = {SV("t-r"), SV(run), tu_json(&c->tu, json), SV(key), {0}, {0}, NULL};
    return ab_conn_resume_run(c->c, &r, c->doc, out, IT_TIMEOUT, err);
}

static void assert_names(const ab_error_t *e, const char *field, const char *id)
{
    assert_string_equal(e->field, field);
    const ab_error_detail_t *d = ab_error_detail(e, "interruptId");
    assert_non_null(d);
    assert_string_equal(d->s, id);
}

#define E1 "{\"interruptId\":\"i1\",\"status\":\"resolved\",\"payload\":{\"approved\":true}}"
#define E2 "{\"interruptId\":\"i2\",\"status\":\"cancelled\"}"

static void test_resume_run(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w, "w1", 1, 0);
    ab_run_accepted_t a = start_ok(&c, "t-r", "k-1");
    asg_t g = next_assign(&w);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(publish(&w, &g, 1, "RUN_STARTED", &err), AB_RESULT_ACCEPTED);
    assert_int_equal(publish(&w, &g, 2, "INTERRUPT", &err), AB_RESULT_ACCEPTED);
    wait_state(&c, a.request, AB_REQ_ENDED);
    ab_run_accepted_t b;
    assert_int_equal(resume(&c, g.run, "k-2", "[" E1 "]", &b, &err), AB_CONFLICT);
    assert_names(&err, "resume", "i2"); /* omission is not abandonment */
    assert_int_equal(resume(&c, g.run, "k-2",
                            "[" E1 "," E2 ",{\"interruptId\":\"zz\",\"status\":"
                            "\"cancelled\"}]",
                            &b, &err),
                     AB_CONFLICT);
    assert_names(&err, "resume/2/interruptId", "zz");
    assert_int_equal(resume(&c, g.run, "k-2", "[" E1 "," E1 "," E2 "]", &b, &err), AB_CONFLICT);
    assert_names(&err, "resume/1/interruptId", "i1");
    assert_int_equal(resume(&c, g.run, "k-2",
                            "[" E1 ",{\"interruptId\":\"i2\",\"status\":\"resolved\"}]", &b, &err),
                     AB_CONFLICT);
    assert_names(&err, "resume/1/status", "i2"); /* expired: it can only be cancelled */
    assert_int_equal(resume(&c, "other-run", "k-2", "[" E1 "," E2 "]", &b, &err), AB_CONFLICT);
    assert_string_equal(err.field, "run");
    assert_int_equal(resume(&c, g.run, "k-2", "[{\"interruptId\":\"i1\"}]", &b, &err),
                     AB_INVALID_EVENT);
    assert_non_null(strstr(err.field, "resume/0"));
    /* answered exactly: the replacement run is dispatched to the same agent with input.resume */
    assert_int_equal(resume(&c, g.run, "k-2", "[" E1 "," E2 "]", &b, &err), AB_OK);
    assert_int_equal(b.agent.len, 5);
    asg_t g2 = next_assign(&w);
    assert_int_equal(g2.request, b.request);
    assert_non_null(strstr(g2.input, "\"resume\""));
    assert_non_null(strstr(g2.input, "\"approved\":true"));
    assert_int_equal(publish(&w, &g2, 1, "RUN_STARTED", &err), AB_RESULT_ACCEPTED);
    assert_int_equal(publish(&w, &g2, 2, "RUN_FINISHED", &err), AB_RESULT_ACCEPTED);
    /* the same key again: the same request; answered interrupts are not pending any more */
    assert_int_equal(resume(&c, g.run, "k-2", "[" E1 "," E2 "]", &b, &err), AB_OK);
    assert_true(b.existing);
    assert_int_equal(resume(&c, g.run, "k-3", "[" E1 "," E2 "]", &b, &err), AB_CONFLICT);
    side_free(&w);
    side_free(&c);
}

static ab_status_t last_stamp(void *ud, const ab_stamp_t *st, const uint8_t *ev, size_t len,
                              ab_error_t *err)
{
    (void)ev;
    (void)len;
    (void)err;
    *(ab_stamp_t *)ud = *st;
    return AB_OK;
}

static ab_status_t abandon(side_t *c, const char *run, ab_msg_t *out, ab_error_t *err)
{
    ab_error_clear(err);
    ab_msg_t m = {.op = AB_OP_ABANDON_RUN};
    m.u.abandon_run = (ab_abandon_run_t){SV("t-1"), SV(run), {0}};
    return ab_conn_request(c->c, &m, NULL, 0, c->doc, out, IT_TIMEOUT, err);
}

/* abandon_run ends an orphan with a RUN_ERROR the broker writes, marked so in its stamp. */
static void test_abandon_orphan(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w1 = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w1, "w1", 1, AB_LEASE_MS_MIN);
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1");
    asg_t g = next_assign(&w1);
    ab_error_t err = AB_ERROR_INIT;
    ab_msg_t r;
    assert_int_equal(publish(&w1, &g, 1, "RUN_STARTED", &err), AB_RESULT_ACCEPTED);
    wait_state(&c, a.request, AB_REQ_STARTED);
    assert_int_equal(abandon(&c, g.run, &r, &err), AB_CONFLICT); /* its owner is live */
    assert_non_null(strstr(err.message, "live owner"));
    assert_int_equal(abandon(&c, "never-dispatched", &r, &err), AB_NOT_FOUND);
    /* a producer may not write the broker's own RUN_ERROR code */
    asg_t fake = g;
    snprintf(fake.run, sizeof fake.run, "fake-run");
    ab_buf_t ev = AB_BUF_INIT;
    assert_int_equal(ab_envelope_json(&ev, 1, "t-1", "fake-run", 1, 1,
                                      "{\"type\":\"RUN_ERROR\",\"message\":\"x\",\"code\":"
                                      "\"agentbus.abandoned\"}",
                                      NULL),
                     AB_OK);
    ab_result_t res = it_publish1(c.c, c.doc, &ev, &err);
    ab_buf_free(&ev);
    assert_int_equal(res.status, AB_RESULT_REJECTED);
    tu_assert_error(&err, AB_INVALID_EVENT, "event/code");
    side_free(&w1); /* the owner goes */
    ab_request_info_t info = {0};
    for (int i = 0; i < 400 && !(find_req(&c, a.request, AB_REQ_STARTED, &info) && info.orphaned);
         i++)
        ab_conn_wait(c.c, 20);
    assert_true(info.orphaned);
    assert_int_equal(abandon(&c, g.run, &r, &err), AB_OK);
    assert_int_equal(r.op, AB_OP_ABANDONED);
    assert_int_equal(r.u.abandoned.seq, 2);
    uint64_t pos = r.u.abandoned.pos;
    assert_true(pos >= 1);
    info = wait_state(&c, a.request, AB_REQ_ENDED);
    ab_head_t h = it_head(c.c, c.doc, "t-1", g.run);
    assert_int_equal(h.status, AB_RUN_STATUS_ERRORED);
    /* replayed, the RUN_ERROR's stamp says the broker wrote it; the producer's does not */
    ab_msg_t rq = {.op = AB_OP_REPLAY};
    rq.u.replay.scope = AB_REPLAY_RUN;
    rq.u.replay.thread = SV("t-1");
    rq.u.replay.run = SV(g.run);
    ab_stamp_t st = {0};
    ab_replay_end_t end;
    assert_int_equal(ab_conn_replay(c.c, &rq, last_stamp, &st, c.doc, &end, IT_TIMEOUT, &err),
                     AB_OK);
    assert_int_equal(st.pos, pos);
    assert_int_equal(st.author, AB_AUTHOR_BROKER);
    rq.u.replay.run = SV("never-dispatched");
    side_free(&c);
}

/* A worker that leaves gives back what it holds before RUN_STARTED at once, not at its lease's
 * end: the other worker gets it (attempt 2) well inside the first one's 10 s lease. */
static void test_leave_requeues_at_once(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w1 = side_new(&t->bp), w2 = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w1, "w1", 1, AB_LEASE_MS_MAX);
    serve(&w2, "w2", 1, 0);
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1");
    asg_t g = next_assign(&w1); /* ties go to the older registration */
    assert_int_equal(g.request, a.request);
    ab_msg_t m = {.op = AB_OP_LEAVE}, r;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_request(w1.c, &m, NULL, 0, w1.doc, &r, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(r.op, AB_OP_LEFT);
    asg_t g2 = next_assign(&w2);
    assert_int_equal(g2.request, a.request);
    assert_int_equal(g2.attempt, 2);
    ab_workers_reply_t wr;
    assert_int_equal(ab_conn_workers(c.c, c.doc, &wr, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(wr.nworkers, 1); /* w1 is gone from the listing too */
    side_free(&w1);
    side_free(&w2);
    side_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_start_assign_finish, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_one_run_per_thread, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_decline_and_lapse_requeue, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_orphaned_never_rerun, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_cases, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_if_busy_and_input, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_broker_sigkill_keeps_requests, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_resume_run, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_abandon_orphan, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_leave_requeues_at_once, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

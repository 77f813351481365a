/*
 * test_dispatch_contract.c - corners of the dispatch contract (docs/PROTOCOL.md
 * 7.12 - 7.15) through a real broker process, each one a defect that was
 * found and fixed:
 *  - a start_run whose key names a stored request is answered with it
 *    (existing: true) whatever else the retry says, also an input naming
 *    another thread or run (7.12 "Idempotency");
 *  - if_busy judges only open top-level requests: a thread with only a child
 *    run open is not busy for `reject` (7.12);
 *  - the owner of a started run is a worker *name*: when it registers again
 *    without the run's agent it is still live, so cancel_run delivers
 *    run_cancel to it instead of answering no_owner (7.12 "Orphans", 7.13);
 *  - a worker name longer than 64 bytes is cut before a character, never
 *    inside one, so `requests` can still list its requests (7.15);
 *  - a run whose first event is RUN_ERROR (an error before start) ends its
 *    request, which no longer holds the worker's capacity or its thread (7.12);
 *  - a request put back in the queue (decline, worker gone, restart) fences its
 *    old assignee at once, so its late RUN_STARTED cannot commit while the
 *    request waits to be handed out again (7.12 "never after");
 *  - a second `serve` replaces a registration but keeps its place: ties of
 *    free capacity still go to the worker that registered first (7.10, 7.12);
 *  - a worker that registers again under another name leaves its started
 *    runs orphaned, and the broker says so (log, notice) as when it goes;
 *  - resume_run of a dispatched run naming another agent than its request's is
 *    refused `conflict`, field `agent`, the message naming both agents and
 *    what to do (7.14); another agent takes over by a start_run whose input
 *    answers the interrupts.
 */
#include "testutil.h"

#include "agentbus/subscriber.h"
#include "broker_proc.h"
#include "dispatch_side.h"

#include <string.h>

/* Register @p s as worker @p name serving agent @p agent (4 runs at once). */
static void serve(side_t *s, const char *name, const char *agent)
{
    serve_agent(s, name, agent, 4, 0);
}

static ab_status_t start(side_t *s, const char *thread, const char *key, const char *input,
                         ab_if_busy_t busy, ab_run_accepted_t *out, ab_error_t *err)
{
    ab_start_run_t r = {SV("coder"), SV(thread), {0}, tu_json(&s->tu, input), SV(key), busy};
    return ab_conn_start_run(s->c, &r, s->doc, out, IT_TIMEOUT, err);
}

static ab_run_accepted_t start_ok(side_t *s, const char *thread, const char *key, const char *input)
{
    ab_run_accepted_t a;
    ab_error_t err = AB_ERROR_INIT;
    if (start(s, thread, key, input, AB_IF_BUSY_OMIT, &a, &err) != AB_OK)
        fail_msg("start_run: %s: %s (field %s)", ab_status_name(err.code), err.message, err.field);
    return a;
}

/* The key names the request, whatever the retry's input says (7.12 "Idempotency"). */
static void test_key_answers_before_input(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t c = side_new(&t->bp);
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1", "{\"messages\":[]}");
    ab_run_accepted_t b;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(
        start(&c, "t-1", "k-1", "{\"messages\":[],\"threadId\":\"other\"}", 0, &b, &err), AB_OK);
    assert_true(b.existing);
    assert_int_equal(b.request, a.request);
    assert_int_equal(
        start(&c, "t-1", "k-1", "{\"messages\":[],\"runId\":\"another-run\"}", 0, &b, &err), AB_OK);
    assert_true(b.existing);
    assert_int_equal(b.request, a.request);
    /* a new key with such an input is still refused */
    assert_int_equal(
        start(&c, "t-1", "k-2", "{\"messages\":[],\"threadId\":\"other\"}", 0, &b, &err),
        AB_INVALID_EVENT);
    assert_string_equal(err.field, "input/threadId");
    side_free(&c);
}

/* A start_run naming a run that has events is refused (7.12): its assignee's RUN_STARTED at
 * seq 1 could never commit, so the request would never start. Nothing is stored: a new run
 * goes through, and a retry of a stored key is still answered by its request. */
static void test_run_with_events_refused(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t p = side_new(&t->bp), c = side_new(&t->bp);
    ab_claimed_t cl;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_claim(p.c, "t-9", "r-9", p.doc, &cl, IT_TIMEOUT, &err), AB_OK);
    asg_t pa = {0,     cl.epoch, 1,
                "t-9", "r-9",    "{\"threadId\":\"t-9\",\"runId\":\"r-9\",\"messages\":[]}"};
    publish_ok(&p, &pa, 1, "RUN_STARTED");
    ab_run_accepted_t a;
    const char *named = "{\"messages\":[],\"runId\":\"r-9\"}";
    assert_int_equal(start(&c, "t-9", "k-9", named, 0, &a, &err), AB_CONFLICT);
    assert_string_equal(err.field, "run");
    assert_non_null(strstr(err.message, "has events already"));
    ab_request_info_t info;
    assert_false(find_req(&c, 1, AB_REQ_NONE, &info)); /* nothing stored */
    a = start_ok(&c, "t-9", "k-10", "{\"messages\":[],\"runId\":\"r-10\"}");
    assert_false(a.existing);
    ab_run_accepted_t b;
    assert_int_equal(start(&c, "t-9", "k-10", named, 0, &b, &err), AB_OK); /* the key first */
    assert_true(b.existing);
    assert_int_equal(b.request, a.request);
    /* a run claimed without events: its claimer could write it while it is queued */
    assert_int_equal(ab_conn_claim(p.c, "t-9", "r-11", p.doc, &cl, IT_TIMEOUT, &err), AB_OK);
    ab_error_clear(&err);
    assert_int_equal(start(&c, "t-9", "k-11", "{\"messages\":[],\"runId\":\"r-11\"}", 0, &b, &err),
                     AB_CONFLICT);
    assert_string_equal(err.field, "run");
    if (strstr(err.message, "claimed already") == NULL)
        fail_msg("refused: %s", err.message);
    side_free(&p);
    side_free(&c);
}

/* Nobody but its assignee writes a queued run: a publish into it without a claim (an implicit
 * claim of epoch 1) is refused, as a claim of it is; once assigned, the assignment's epoch is
 * not the implicit 1, so the same publish is fenced, and its worker starts it. */
static void test_queued_run_not_written(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t p = side_new(&t->bp), w = side_new(&t->bp), c = side_new(&t->bp);
    ab_run_accepted_t a = start_ok(&c, "t-q", "k-q", "{\"messages\":[],\"runId\":\"r-q\"}");
    asg_t pa = {0, 1, 1, "t-q", "r-q", "{\"threadId\":\"t-q\",\"runId\":\"r-q\",\"messages\":[]}"};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(publish(&p, &pa, 1, "RUN_STARTED", &err), AB_RESULT_REJECTED);
    assert_int_equal(err.code, AB_CONFLICT);
    assert_string_equal(err.field, "run");
    assert_non_null(strstr(err.message, "queued for dispatch"));
    ab_claimed_t cl;
    assert_int_equal(ab_conn_claim(p.c, "t-q", "r-q", p.doc, &cl, IT_TIMEOUT, &err), AB_CONFLICT);
    serve(&w, "w1", "coder");
    asg_t g = next_assign(&w);
    assert_int_equal(g.request, a.request);
    assert_true(g.epoch >= 2);
    ab_error_clear(&err);
    assert_int_equal(publish(&p, &pa, 1, "RUN_STARTED", &err), AB_RESULT_REJECTED);
    assert_int_equal(err.code, AB_FENCED); /* it was accepted: the assignment was epoch 1 */
    publish_ok(&w, &g, 1, "RUN_STARTED");  /* seq 1 is free: the assignee starts it */
    wait_state(&c, a.request, AB_REQ_STARTED);
    publish_ok(&w, &g, 2, "RUN_FINISHED");
    wait_state(&c, a.request, AB_REQ_ENDED);
    side_free(&p);
    side_free(&w);
    side_free(&c);
}

/* if_busy reject: only an open top-level request makes the thread busy. */
static void test_if_busy_counts_top_level_only(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w, "w1", "coder");
    ab_run_accepted_t p = start_ok(&c, "t-1", "k-p", "{\"messages\":[]}");
    asg_t gp = next_assign(&w);
    publish_ok(&w, &gp, 1, "RUN_STARTED");
    char child[256];
    snprintf(child, sizeof child, "{\"messages\":[],\"parentRunId\":\"%s\"}", gp.run);
    ab_run_accepted_t ch = start_ok(&c, "t-1", "k-c", child);
    asg_t gc = next_assign(&w); /* a child run is not held back */
    assert_int_equal(gc.request, ch.request);
    publish_ok(&w, &gc, 1, "RUN_STARTED");
    ab_run_accepted_t b;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(start(&c, "t-1", "k-r1", "{\"messages\":[]}", AB_IF_BUSY_REJECT, &b, &err),
                     AB_CONFLICT); /* the parent is open */
    assert_string_equal(err.field, "thread");
    publish_ok(&w, &gp, 2, "RUN_FINISHED");
    wait_state(&c, p.request, AB_REQ_ENDED);
    /* only the child is open: not busy; the new run waits behind it (rule 1) */
    assert_int_equal(start(&c, "t-1", "k-r2", "{\"messages\":[]}", AB_IF_BUSY_REJECT, &b, &err),
                     AB_OK);
    assert_int_equal(b.state, AB_REQ_QUEUED);
    side_free(&w);
    side_free(&c);
}

/* The owner is a name: registered again without the agent, it is live and gets run_cancel. */
static void test_cancel_reaches_owner_by_name(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w, "w1", "coder");
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1", "{\"messages\":[]}");
    asg_t g = next_assign(&w);
    publish_ok(&w, &g, 1, "RUN_STARTED");
    wait_state(&c, a.request, AB_REQ_STARTED);
    serve(&w, "w1", "other"); /* same name, other agent */
    ab_request_info_t info;
    assert_true(find_req(&c, a.request, AB_REQ_STARTED, &info));
    assert_false(info.orphaned);
    ab_cancel_run_t cr = {SV("t-1"), SV(g.run), SV("stop")};
    ab_cancel_reply_t rep;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_cancel_run(c.c, &cr, c.doc, &rep, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(rep.outcome, AB_CANCEL_DELIVERED);
    ab_msg_t m;
    assert_int_equal(ab_conn_recv(w.c, 0, w.doc, &m, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(m.op, AB_OP_RUN_CANCEL);
    assert_int_equal(m.u.run_cancel.request, a.request);
    side_free(&w);
    side_free(&c);
}

/* A long worker name is cut to 64 bytes before a character: `requests` still answers. */
static void test_long_worker_name_cut_whole(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    char name[80];
    memset(name, 'a', 63);
    memcpy(name + 63, "\xc3\xa9z", 4); /* e-acute across byte 64 */
    serve(&w, name, "coder");
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1", "{\"messages\":[]}");
    asg_t g = next_assign(&w);
    assert_int_equal(g.request, a.request);
    ab_request_info_t info;
    assert_true(find_req(&c, a.request, AB_REQ_ASSIGNED, &info));
    assert_int_equal(info.worker.len, 63);
    assert_memory_equal(info.worker.ptr, name, 63);
    side_free(&w);
    side_free(&c);
}

/* A run that errors before it starts (RUN_ERROR first) ends its request and frees the worker. */
static void test_error_before_start_ends(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w, "w1", "coder");
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1", "{\"messages\":[]}");
    asg_t g = next_assign(&w);
    ab_buf_t ev = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_envelope_json(&ev, 1, g.thread, g.run, 1, g.epoch,
                                      "{\"type\":\"RUN_ERROR\",\"message\":\"no model\"}", NULL),
                     AB_OK);
    ab_result_t r = it_publish1(w.c, w.doc, &ev, &err);
    ab_buf_free(&ev);
    assert_int_equal(r.status, AB_RESULT_ACCEPTED);
    wait_state(&c, a.request, AB_REQ_ENDED);
    /* the thread is free again: its next request is assigned */
    ab_run_accepted_t b = start_ok(&c, "t-1", "k-2", "{\"messages\":[]}");
    asg_t g2 = next_assign(&w);
    assert_int_equal(g2.request, b.request);
    side_free(&w);
    side_free(&c);
}

/* Back in the queue, a request's old assignee is fenced at once: its late RUN_STARTED cannot
 * commit while the request waits (it would be handed out again after its start). */
static void test_requeue_fences_assignee(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w, "w1", "coder");
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1", "{\"messages\":[]}");
    asg_t g = next_assign(&w);
    ab_msg_t m = {.op = AB_OP_DECLINE}, r;
    m.u.decline = (ab_decline_t){g.request, g.epoch, {0}};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_request(w.c, &m, NULL, 0, w.doc, &r, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(r.u.declined.state, AB_REQ_QUEUED);
    assert_int_equal(publish(&w, &g, 1, "RUN_STARTED", &err), AB_RESULT_REJECTED);
    assert_int_equal(err.code, AB_FENCED);
    asg_t g2 = next_assign(&w); /* after the decline's back-off: attempt 2, which can start */
    assert_int_equal(g2.request, a.request);
    publish_ok(&w, &g2, 1, "RUN_STARTED");
    wait_state(&c, a.request, AB_REQ_STARTED);
    /* a restart puts an assigned request back as well: its assignee is fenced then too */
    ab_run_accepted_t b = start_ok(&c, "t-2", "k-2", "{\"messages\":[]}");
    asg_t gb = next_assign(&w);
    assert_int_equal(gb.request, b.request);
    side_free(&w);
    side_free(&c);
    bp_kill(&t->bp);
    assert_int_equal(bp_restart(&t->bp), 0);
    c = side_new(&t->bp);
    assert_int_equal(publish(&c, &gb, 1, "RUN_STARTED", &err), AB_RESULT_REJECTED);
    assert_int_equal(err.code, AB_FENCED);
    ab_request_info_t info;
    assert_true(find_req(&c, b.request, AB_REQ_QUEUED, &info));
    side_free(&c);
}

/* A second serve replaces a registration but keeps its place: ties still go to it. */
static void test_reserve_keeps_first_place(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w1 = side_new(&t->bp), w2 = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w1, "w1", "coder");
    serve(&w2, "w2", "coder");
    serve(&w1, "w1", "coder"); /* the same registration, its worker_id kept */
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1", "{\"messages\":[]}");
    asg_t g = next_assign(&w1); /* equal free capacity: the one that registered first */
    assert_int_equal(g.request, a.request);
    side_free(&w1);
    side_free(&w2);
    side_free(&c);
}

static void count_notice(void *ud, const ab_notice_t *n)
{
    if (n->kind == AB_NOTICE_ORPHANED)
        ++*(int *)ud;
}

static int any_event(void *ud, const ab_sub_event_t *e)
{
    (void)ud;
    (void)e;
    return 0;
}

/* A worker that registers again under another name leaves its started runs orphaned: the
 * thread's observers are told, as when it goes (7.12 "Orphans", 6.4). */
static void test_rename_orphans_noticed(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), c = side_new(&t->bp);
    int notices = 0;
    ab_sub_opts_t so = {.scope = AB_SUB_THREAD,
                        .thread = "t-1",
                        .on_event = any_event,
                        .on_notice = count_notice,
                        .ud = &notices};
    ab_sub_t *sub = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_sub_new(&sub, t->bp.cmd, &so, &err), AB_OK);
    serve(&w, "w1", "coder");
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1", "{\"messages\":[]}");
    asg_t g = next_assign(&w);
    publish_ok(&w, &g, 1, "RUN_STARTED");
    wait_state(&c, a.request, AB_REQ_STARTED);
    assert_int_equal(ab_sub_poll(sub, 100, &err), AB_OK); /* live before the rename */
    serve(&w, "w1-renamed", "coder");
    ab_request_info_t info;
    assert_true(find_req(&c, a.request, AB_REQ_STARTED, &info));
    assert_true(info.orphaned);
    for (int i = 0; i < 100 && notices == 0; i++)
        assert_int_equal(ab_sub_poll(sub, 20, &err), AB_OK);
    assert_int_equal(notices, 1);
    ab_sub_destroy(&sub);
    side_free(&w);
    side_free(&c);
}

/* resume_run naming another agent than the interrupted run's request: refused, naming both;
 * the other agent takes over by a start_run whose input answers the interrupts. */
static void test_resume_other_agent_refused(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    side_t w = side_new(&t->bp), w2 = side_new(&t->bp), c = side_new(&t->bp);
    serve(&w, "w1", "coder");
    serve(&w2, "w2", "planner");
    ab_run_accepted_t a = start_ok(&c, "t-1", "k-1", "{\"messages\":[]}");
    asg_t g = next_assign(&w);
    publish_ok(&w, &g, 1, "RUN_STARTED");
    publish_ok(&w, &g, 2, "INTERRUPT");
    wait_state(&c, a.request, AB_REQ_ENDED);
#define ANSWERS                                                                                    \
    "[{\"interruptId\":\"i1\",\"status\":\"resolved\"},"                                           \
    "{\"interruptId\":\"i2\",\"status\":\"cancelled\"}]"
    ab_resume_run_t r = {SV("t-1"), SV(g.run), tu_json(&c.tu, ANSWERS), SV("k-2"), SV("planner"),
                         {0},       NULL};
    ab_run_accepted_t b;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_resume_run(c.c, &r, c.doc, &b, IT_TIMEOUT, &err), AB_CONFLICT);
    assert_string_equal(err.field, "agent");
    if (!strstr(err.message, "planner") || !strstr(err.message, "coder") ||
        !strstr(err.message, "omit agent"))
        fail_msg("resume_run with another agent: %s", err.message);
    /* the documented way for another agent to take over: its start_run answers them */
    ab_start_run_t s = {SV("planner"), SV("t-1"),
                        {0},           tu_json(&c.tu, "{\"messages\":[],\"resume\":" ANSWERS "}"),
                        SV("k-3"),     AB_IF_BUSY_OMIT};
    ab_error_clear(&err);
    assert_int_equal(ab_conn_start_run(c.c, &s, c.doc, &b, IT_TIMEOUT, &err), AB_OK);
    asg_t g2 = next_assign(&w2);
    assert_int_equal(g2.request, b.request);
    publish_ok(&w2, &g2, 1, "RUN_STARTED"); /* its input answers the interrupts: rule 7 */
    wait_state(&c, b.request, AB_REQ_STARTED);
#undef ANSWERS
    side_free(&w);
    side_free(&w2);
    side_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_key_answers_before_input, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_run_with_events_refused, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_queued_run_not_written, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_if_busy_counts_top_level_only, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_reaches_owner_by_name, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_long_worker_name_cut_whole, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_error_before_start_ends, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_requeue_fences_assignee, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_reserve_keeps_first_place, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_rename_orphans_noticed, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_resume_other_agent_refused, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

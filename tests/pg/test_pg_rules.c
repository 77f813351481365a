/*
 * test_pg_rules.c - the thread rules (docs/SEQUENCER.md 2a, rule 7 of
 * docs/PROTOCOL.md 6.2) with two broker processes on one PostgreSQL database
 * (pg_fixture.h): a broker that holds a thread's state in its cache learns
 * what another broker committed to the thread once it has followed it
 * (broker/follow.c drops the cached state), not only at the next eviction.
 *
 * Both directions, on one thread: B has the thread's state cached (nothing
 * pending); A commits a run that finishes with an interrupt; once B has
 * followed it, a top-level RUN_STARTED with input but no resume is refused
 * on B (conflict, event/input/resume) as on A. B now holds "i1 pending"; A
 * commits a run whose input answers i1; once B has followed it, a RUN_STARTED
 * with an empty resume is accepted on B (nothing pending any more).
 *
 * One server and two brokers for the file; processes stopped by pid.
 */
#include "pg_brokers.h"
#include "testutil.h"

#include "agentbus/subscriber.h"
#include "broker_proc.h"

typedef struct side {
    ab_conn_t *c;
    ab_doc_t *doc;
} side_t;

static side_t side(const bp_t *b)
{
    side_t s = {it_connect(b), NULL};
    assert_int_equal(ab_doc_new(&s.doc), AB_OK);
    return s;
}

static void side_free(side_t *s)
{
    ab_conn_destroy(&s->c);
    ab_doc_destroy(&s->doc);
}

/* Publish one event (epoch 1: the implicit claim); its result status, @p rej its error. */
static ab_result_status_t put(side_t *s, const char *thread, const char *run, uint64_t seq,
                              const char *body, ab_error_t *rej)
{
    ab_buf_t ev = AB_BUF_INIT;
    it_event_json(&ev, thread, run, seq, 1, body);
    ab_result_t r = it_publish1(s->c, s->doc, &ev, rej);
    ab_buf_free(&ev);
    return r.status;
}

/* RUN_STARTED of @p run with an input whose resume is @p resume (NULL: no resume). */
static ab_result_status_t start(side_t *s, const char *thread, const char *run, const char *resume,
                                ab_error_t *rej)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
             "\"protocolVersion\":\"1.0\",\"input\":{\"threadId\":\"%s\",\"runId\":\"%s\","
             "\"messages\":[]%s%s}}",
             thread, run, thread, run, resume ? ",\"resume\":" : "", resume ? resume : "");
    return put(s, thread, run, 1, body, rej);
}

static ab_result_status_t finish(side_t *s, const char *thread, const char *run, uint64_t seq,
                                 bool interrupt)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\"%s}", thread, run,
             interrupt ? ",\"outcome\":{\"type\":\"interrupt\",\"interrupts\":[{\"id\":\"i1\","
                         "\"reason\":\"confirmation\"}]}"
                       : "");
    return put(s, thread, run, seq, body, NULL);
}

/* Counts the events of one run a subscriber delivered. */
typedef struct seen {
    const char *run;
    uint64_t n;
} seen_t;

static int on_event(void *ud, const ab_sub_event_t *e)
{
    seen_t *s = ud;
    if (e->ev.run.len == strlen(s->run) && memcmp(e->ev.run.ptr, s->run, e->ev.run.len) == 0)
        s->n++;
    return 0;
}

/* Wait (bounded) until broker @p b delivers @p n events of @p run of @p thread: it has
 * followed them (the follower drops its cached state before it fans them out). */
static void wait_followed(const bp_t *b, const char *thread, const char *run, uint64_t n)
{
    seen_t s = {run, 0};
    ab_sub_opts_t o = {.scope = AB_SUB_THREAD,
                       .thread = thread,
                       .on_event = on_event,
                       .ud = &s,
                       .timeout_ms = IT_TIMEOUT};
    ab_sub_t *sub = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_sub_new(&sub, b->cmd, &o, &err), AB_OK);
    long end = pgfx_now_ms() + 10000;
    while (s.n < n && pgfx_now_ms() < end)
        assert_int_equal(ab_sub_poll(sub, 50, &err), AB_OK);
    ab_sub_destroy(&sub);
    assert_int_equal(s.n, n);
}

static void test_resume_rule_sees_the_other_brokers_runs(void **state)
{
    (void)state;
    char th[64];
    snprintf(th, sizeof th, "rules-%d", (int)getpid());
    side_t a = side(&g_a), b = side(&g_b);
    ab_error_t rej = AB_ERROR_INIT;
    /* B derives the thread's state (nothing pending) and keeps it cached */
    assert_int_equal(start(&b, th, "r0", NULL, &rej), AB_RESULT_ACCEPTED);
    assert_int_equal(finish(&b, th, "r0", 2, false), AB_RESULT_ACCEPTED);
    /* A: a run that ends with interrupt i1 */
    char body[256];
    snprintf(body, sizeof body,
             "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"r1\",\"protocolVersion\":"
             "\"1.0\"}",
             th);
    assert_int_equal(put(&a, th, "r1", 1, body, &rej), AB_RESULT_ACCEPTED);
    assert_int_equal(finish(&a, th, "r1", 2, true), AB_RESULT_ACCEPTED);
    wait_followed(&g_b, th, "r1", 2);
    /* on B, as on A: i1 is pending, an input without resume is refused */
    assert_int_equal(start(&b, th, "r2", NULL, &rej), AB_RESULT_REJECTED);
    assert_int_equal(rej.code, AB_CONFLICT);
    assert_string_equal(rej.field, "event/input/resume");
    assert_int_equal(start(&a, th, "r2", NULL, &rej), AB_RESULT_REJECTED);
    assert_int_equal(rej.code, AB_CONFLICT);
    /* A answers i1; once B has followed that, nothing is pending on B either */
    assert_int_equal(
        start(&a, th, "r3", "[{\"interruptId\":\"i1\",\"status\":\"resolved\"}]", &rej),
        AB_RESULT_ACCEPTED);
    wait_followed(&g_b, th, "r3", 1);
    assert_int_equal(start(&b, th, "r4", "[]", &rej), AB_RESULT_ACCEPTED);
    side_free(&a);
    side_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_rule_sees_the_other_brokers_runs),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

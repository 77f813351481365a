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

#include <pthread.h>

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

/* ---- within the follow lag: the database serialises the thread rules ---------------- */

/* One publish run on a thread of its own (it waits on a lock the test holds). */
typedef struct async_put {
    side_t *s;
    ab_buf_t ev;
    pthread_t tid;
    ab_status_t rc;        /* the request's status */
    ab_result_status_t st; /* the event's */
    uint64_t pos;          /* its position when accepted */
    ab_status_t code;      /* its error's code, AB_OK without one */
    char field[AB_ERROR_FIELD_MAX];
} async_put_t;

static void *async_main(void *arg)
{
    async_put_t *p = arg;
    const ab_result_t *res = NULL;
    ab_error_t err = AB_ERROR_INIT;
    p->rc = ab_conn_publish(p->s->c, &p->ev, 1, p->s->doc, &res, 20000, &err);
    if (p->rc == AB_OK) {
        p->st = res[0].status;
        p->pos = res[0].pos;
        p->code = res[0].error ? res[0].error->code : AB_OK;
        if (res[0].error)
            snprintf(p->field, sizeof p->field, "%s", res[0].error->field);
    }
    return NULL;
}

static void async_start(async_put_t *p, side_t *s, const char *thread, const char *run,
                        uint64_t seq, const char *body)
{
    memset(p, 0, sizeof *p);
    p->s = s;
    it_event_json(&p->ev, thread, run, seq, 1, body);
    assert_int_equal(pthread_create(&p->tid, NULL, async_main, p), 0);
}

static void async_join(async_put_t *p)
{
    assert_int_equal(pthread_join(p->tid, NULL), 0);
    ab_buf_free(&p->ev);
    assert_int_equal(p->rc, AB_OK);
}

/* Wait (bounded) until @p n statements of the server wait on a lock. */
static void wait_lock_waiters(PGconn *probe, long long n)
{
    long long got = -1;
    for (long end = pgfx_now_ms() + 10000; pgfx_now_ms() < end; pgfx_sleep_ms(5))
        if ((got = pgfx_scalar(probe, "SELECT count(*) FROM pg_stat_activity"
                                      " WHERE wait_event_type = 'Lock'")) >= n)
            break;
    assert_int_equal(got, n);
}

static char *start_body(char *out, size_t cap, const char *thread, const char *run,
                        const char *resume)
{
    snprintf(out, cap,
             "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
             "\"protocolVersion\":\"1.0\",\"input\":{\"threadId\":\"%s\",\"runId\":\"%s\","
             "\"messages\":[]%s%s}}",
             thread, run, thread, run, resume ? ",\"resume\":" : "", resume ? resume : "");
    return out;
}

/* Two publishes in the same moment (test_rules_within_the_follow_lag): A's (@p ra, seq @p sa, @p
 * ba) held inside its transaction on the position row that @p hold locks, then B's (@p rb, seq 1,
 * @p bb); both answered once the row is released. */
typedef struct race {
    side_t *a, *b;
    PGconn *hold, *probe;
    const char *th;
} race_t;

static void race(const race_t *x, const char *ra, uint64_t sa, const char *ba, const char *rb,
                 const char *bb, async_put_t *pa, async_put_t *pb)
{
    PQclear(PQexec(x->hold, "BEGIN; SELECT v FROM ab_head WHERE id = 1 FOR UPDATE"));
    async_start(pa, x->a, x->th, ra, sa, ba);
    wait_lock_waiters(x->probe, 1);
    async_start(pb, x->b, x->th, rb, 1, bb);
    wait_lock_waiters(x->probe, 2);
    PQclear(PQexec(x->hold, "COMMIT"));
    async_join(pa);
    async_join(pb);
    assert_int_equal(pa->st, AB_RESULT_ACCEPTED);
}

/*
 * Publishes through A and B decided in the same moment: the test holds the position
 * counter's row (ab_head), so A's batch waits inside its transaction after its checks
 * and B decides on a state that lacks A's event (its follower cannot read an event not
 * yet committed). Once released, B's fenced append finds A's batch fenced past what B
 * had seen and is refused; B follows A's event and decides again: as if in order.
 *  1. A: RUN_FINISHED with interrupt i1; B: a RUN_STARTED with input and no resume.
 *     Decided apart, both would be accepted; B's is refused (event/input/resume).
 *  2. A and B: a RUN_STARTED each whose resume answers i1. Only A's is accepted.
 *  3. A and B: a RUN_STARTED each without input. B's, refused by the fence, is decided
 *     again after following A's and committed after it.
 */
static void test_rules_within_the_follow_lag(void **state)
{
    (void)state;
    char th[64], body[1024], body2[1024];
    snprintf(th, sizeof th, "lag-%d", (int)getpid());
    side_t a = side(&g_a), b = side(&g_b), a2 = side(&g_a), b2 = side(&g_b);
    ab_error_t rej = AB_ERROR_INIT;
    race_t x = {&a2, &b2, pgfx_connect(&g_pg), pgfx_connect(&g_pg), th};
    assert_non_null(x.hold);
    assert_non_null(x.probe);
    const char *plain = "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                        "\"protocolVersion\":\"1.0\"}";
    /* B has the thread (nothing pending); A starts r1, which B follows */
    assert_int_equal(start(&b, th, "r0", NULL, &rej), AB_RESULT_ACCEPTED);
    assert_int_equal(finish(&b, th, "r0", 2, false), AB_RESULT_ACCEPTED);
    snprintf(body, sizeof body, plain, th, "r1");
    assert_int_equal(put(&a, th, "r1", 1, body, &rej), AB_RESULT_ACCEPTED);
    wait_followed(&g_b, th, "r1", 1);
    async_put_t pa, pb;

    /* 1 */
    snprintf(body, sizeof body,
             "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"r1\","
             "\"outcome\":{\"type\":\"interrupt\",\"interrupts\":[{\"id\":\"i1\","
             "\"reason\":\"confirmation\"}]}}",
             th);
    race(&x, "r1", 2, body, "r2", start_body(body2, sizeof body2, th, "r2", NULL), &pa, &pb);
    assert_int_equal(pb.st, AB_RESULT_REJECTED);
    assert_int_equal(pb.code, AB_CONFLICT);
    assert_string_equal(pb.field, "event/input/resume");

    /* 2 */
    const char *answer = "[{\"interruptId\":\"i1\",\"status\":\"resolved\"}]";
    race(&x, "r3", 1, start_body(body, sizeof body, th, "r3", answer), "r4",
         start_body(body2, sizeof body2, th, "r4", answer), &pa, &pb);
    assert_int_equal(pb.st, AB_RESULT_REJECTED);
    assert_int_equal(pb.code, AB_CONFLICT);
    assert_string_equal(pb.field, "event/input/resume/0/interruptId" /* i1 is answered */);

    /* 3: refused by the fence, B's event is still valid once it has followed A's: the
     * batch is decided again and committed, after A's */
    snprintf(body, sizeof body, plain, th, "r5");
    snprintf(body2, sizeof body2, plain, th, "r6");
    race(&x, "r5", 1, body, "r6", body2, &pa, &pb);
    assert_int_equal(pb.st, AB_RESULT_ACCEPTED);
    assert_true(pb.pos > pa.pos);
    PQfinish(x.hold);
    PQfinish(x.probe);
    side_free(&a);
    side_free(&b);
    side_free(&a2);
    side_free(&b2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_rule_sees_the_other_brokers_runs),
        cmocka_unit_test(test_rules_within_the_follow_lag),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

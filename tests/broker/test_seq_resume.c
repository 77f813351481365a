/*
 * test_seq_resume.c - the sequencer's resume rule (docs/SEQUENCER.md rule 7)
 * against the in-memory fake plugin: a top-level RUN_STARTED carrying input
 * must answer exactly the pending interrupts of its thread's latest run,
 * within one group, across groups, after an abort, and with a fresh
 * sequencer over the same store (a restart); child runs are neither checked
 * nor the thread's latest run.
 */
#include "testutil.h"

#include "agentbus/codec.h"
#include "fake_plugin.h"
#include "seq_fixture.h"
#include "sequencer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fx {
    ab_plugin_db_t db;
    ab_seq_t *s;
    uint32_t max_threads;
    tev_pool_t pool;
} fx_t;

static void fx_open(fx_t *f)
{
    ab_seq_opts_t o = {0};
    o.max_threads = f->max_threads;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__seq_new(&f->s, fp_plugin(), &f->db, &o, &err), AB_OK);
    ab__seq_set_now(f->s, 1767225600000000); /* 2026-01-01T00:00:00Z */
}

static fx_t *fx_new(uint32_t max_threads)
{
    fx_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->max_threads = max_threads;
    fx_open(f);
    return f;
}

/* A broker restart: a new sequencer over the same store, nothing kept in memory. */
static void fx_restart(fx_t *f)
{
    ab__seq_destroy(&f->s);
    fx_open(f);
}

static void fx_free(fx_t *f)
{
    ab__seq_destroy(&f->s);
    tev_pool_free(&f->pool);
    fp_free(&f->db);
    free(f);
}

static ab_seq_item_t mk(fx_t *f, const char *thread, const char *run, uint64_t seq,
                        const char *json)
{
    return tev_item(&f->pool, thread, run, seq, 1, json);
}

/* RUN_STARTED at seq 1; @p parent may be NULL; @p input 0 = none, 1 = input, 2 = input with
 * resume @p resume (a JSON array). */
static ab_seq_item_t start(fx_t *f, const char *th, const char *run, const char *parent, int input,
                           const char *resume)
{
    char json[2048], par[300] = "", in[1500] = "";
    if (parent)
        snprintf(par, sizeof(par), ",\"parentRunId\":\"%s\"", parent);
    if (input)
        snprintf(in, sizeof(in),
                 ",\"input\":{\"threadId\":\"%s\",\"runId\":\"%s\",\"messages\":[]%s%s}", th, run,
                 input == 2 ? ",\"resume\":" : "", input == 2 ? resume : "");
    snprintf(json, sizeof(json),
             "{\"type\":\"RUN_STARTED\",\"protocolVersion\":\"1.0\",\"threadId\":\"%s\","
             "\"runId\":\"%s\"%s%s}",
             th, run, par, in);
    return mk(f, th, run, 1, json);
}

static ab_seq_item_t resume(fx_t *f, const char *th, const char *run, const char *entries)
{
    return start(f, th, run, NULL, 2, entries);
}

/* RUN_FINISHED at @p seq; @p ints NULL = success, else the interrupts array. */
static ab_seq_item_t finish(fx_t *f, const char *th, const char *run, uint64_t seq,
                            const char *ints)
{
    char json[2048];
    if (ints)
        snprintf(json, sizeof(json),
                 "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\",\"outcome\":{"
                 "\"type\":\"interrupt\",\"interrupts\":%s}}",
                 th, run, ints);
    else
        snprintf(json, sizeof(json),
                 "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\"}", th, run);
    return mk(f, th, run, seq, json);
}

#define TWO       "[{\"id\":\"i1\",\"reason\":\"confirmation\"},{\"id\":\"i2\",\"reason\":\"tool_call\"}]"
#define R(id, st) "{\"interruptId\":\"" id "\",\"status\":\"" st "\"}"

static ab_status_t group_n(fx_t *f, ab_seq_item_t *items, size_t n)
{
    ab__seq_stage(f->s, items, n);
    size_t np = 0;
    const ab_append_event_t *p = ab__seq_pending(f->s, &np);
    uint64_t first = 0;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t rc = np ? fp_append_batch(&f->db, p, np, 0, &first, &err) : AB_OK;
    if (rc == AB_OK)
        ab__seq_commit(f->s, first);
    else
        ab__seq_abort(f->s);
    return rc;
}

static ab_seq_item_t pub(fx_t *f, ab_seq_item_t it)
{
    assert_int_equal(group_n(f, &it, 1), AB_OK);
    return it;
}

static void ok(const ab_seq_item_t *it)
{
    if (it->status != AB_RESULT_ACCEPTED)
        fail_msg("expected accepted, got %d: %s: %s (at %s)", (int)it->status,
                 ab_status_name(it->err.code), it->err.message, it->err.field);
}

/* Rejected with conflict at @p field, naming interrupt @p id (detail and message). */
static void refused(const ab_seq_item_t *it, const char *field, const char *id)
{
    if (it->status != AB_RESULT_REJECTED)
        fail_msg("expected rejected at %s, got %d", field, (int)it->status);
    tu_assert_error(&it->err, AB_CONFLICT, field);
    const ab_error_detail_t *d = ab_error_detail(&it->err, "interruptId");
    if (!d || strcmp(d->s, id) != 0 || !strstr(it->err.message, id))
        fail_msg("expected interrupt %s named: %s", id, it->err.message);
}

/* @p run of @p th started and interrupted with @p ints, committed. */
static void interrupted(fx_t *f, const char *th, const char *run, const char *ints)
{
    ab_seq_item_t a = pub(f, start(f, th, run, NULL, 0, NULL));
    ok(&a);
    ab_seq_item_t b = pub(f, finish(f, th, run, 2, ints));
    ok(&b);
}

/* ---- coverage ----------------------------------------------------------------------- */

static void test_valid_resume(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    interrupted(f, "t1", "r1", TWO);
    ab_seq_item_t a =
        pub(f, resume(f, "t1", "r2", "[" R("i2", "cancelled") "," R("i1", "resolved") "]"));
    ok(&a);
    /* the interrupts are answered: r2 is the latest run, and it is active */
    ab_seq_item_t b =
        pub(f, resume(f, "t1", "r3", "[" R("i1", "resolved") "," R("i2", "resolved") "]"));
    refused(&b, "event/input/resume/0/interruptId", "i1");
    assert_non_null(strstr(b.err.message, "continues nothing"));
    fx_free(f);
}

static void test_missing_unknown_duplicate(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    interrupted(f, "t1", "r1", TWO);
    ab_seq_item_t a = pub(f, resume(f, "t1", "r2", "[" R("i1", "resolved") "]"));
    refused(&a, "event/input/resume", "i2");
    ab_seq_item_t b = pub(f, resume(f, "t1", "r3", "[" R("i2", "resolved") "]"));
    refused(&b, "event/input/resume", "i1");
    ab_seq_item_t c =
        pub(f, resume(f, "t1", "r4",
                      "[" R("i1", "resolved") "," R("i2", "resolved") "," R("i9", "resolved") "]"));
    refused(&c, "event/input/resume/2/interruptId", "i9");
    ab_seq_item_t d = pub(
        f, resume(f, "t1", "r5",
                  "[" R("i1", "resolved") "," R("i2", "cancelled") "," R("i1", "cancelled") "]"));
    refused(&d, "event/input/resume/2/interruptId", "i1");
    assert_non_null(strstr(d.err.message, "twice"));
    ab_seq_item_t e = pub(f, resume(f, "t1", "r6", "[]"));
    refused(&e, "event/input/resume", "i1");
    /* input without resume: refused; no input at all: not checked */
    ab_seq_item_t g = pub(f, start(f, "t1", "r7", NULL, 1, NULL));
    refused(&g, "event/input/resume", "i1");
    assert_non_null(strstr(g.err.message, "no resume"));
    assert_int_equal(f->db.nev, 2); /* nothing of the refused runs was stored */
    ab_seq_item_t h = pub(f, start(f, "t1", "r8", NULL, 0, NULL));
    ok(&h);
    fx_free(f);
}

static void test_nothing_pending(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    ab_seq_item_t a = pub(f, resume(f, "t0", "r1", "[" R("i1", "resolved") "]"));
    refused(&a, "event/input/resume/0/interruptId", "i1"); /* a thread with no run */
    ab_seq_item_t b = pub(f, start(f, "t1", "r1", NULL, 0, NULL));
    ok(&b);
    ab_seq_item_t c = pub(f, finish(f, "t1", "r1", 2, NULL));
    ok(&c);
    ab_seq_item_t d = pub(f, resume(f, "t1", "r2", "[" R("i1", "cancelled") "]"));
    refused(&d, "event/input/resume/0/interruptId", "i1");
    assert_non_null(strstr(d.err.message, "has no interrupted run"));
    ab_seq_item_t e = pub(f, resume(f, "t1", "r3", "[]")); /* answers nothing: fine */
    ok(&e);
    ab_seq_item_t g = pub(f, start(f, "t1", "r4", NULL, 1, NULL));
    ok(&g);
    fx_free(f);
}

static void test_expired(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    /* now = 2026-01-01T00:00:00Z */
    interrupted(f, "t1", "r1",
                "[{\"id\":\"old\",\"reason\":\"r\",\"expiresAt\":\"2025-12-31T23:59:59.5Z\"},"
                "{\"id\":\"late\",\"reason\":\"r\",\"expiresAt\":\"2026-01-01T01:30:00+02:00\"},"
                "{\"id\":\"new\",\"reason\":\"r\",\"expiresAt\":\"2026-01-01T00:00:01Z\"},"
                "{\"id\":\"odd\",\"reason\":\"r\",\"expiresAt\":\"next tuesday\"}]");
    ab_seq_item_t a = pub(f, resume(f, "t1", "r2",
                                    "[" R("old", "resolved") "," R("late", "cancelled") "," R(
                                        "new", "resolved") "," R("odd", "resolved") "]"));
    refused(&a, "event/input/resume/0/status", "old");
    assert_non_null(strstr(a.err.message, "can only be cancelled"));
    ab_seq_item_t b = pub(f, resume(f, "t1", "r3",
                                    "[" R("old", "cancelled") "," R("late", "resolved") "," R(
                                        "new", "resolved") "," R("odd", "resolved") "]"));
    refused(&b, "event/input/resume/1/status", "late"); /* 23:30Z: expired */
    ab_seq_item_t c = pub(f, resume(f, "t1", "r4",
                                    "[" R("old", "cancelled") "," R("late", "cancelled") "," R(
                                        "new", "resolved") "," R("odd", "resolved") "]"));
    ok(&c);
    fx_free(f);
}

/* ---- groups, aborts, restarts ------------------------------------------------------ */

static void test_same_group(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    /* one stage call: the interrupted run, then a resume that misses i2 and one that covers */
    ab_seq_item_t it[5] = {
        start(f, "t1", "r1", NULL, 0, NULL), finish(f, "t1", "r1", 2, TWO),
        resume(f, "t1", "r2", "[" R("i1", "resolved") "]"),
        resume(f, "t1", "r3", "[" R("i1", "resolved") "," R("i2", "cancelled") "]"),
        resume(f, "t1", "r4", "[" R("i1", "resolved") "," R("i2", "cancelled") "]")};
    assert_int_equal(group_n(f, it, 5), AB_OK);
    ok(&it[0]);
    ok(&it[1]);
    refused(&it[2], "event/input/resume", "i2");
    ok(&it[3]);
    refused(&it[4], "event/input/resume/0/interruptId", "i1"); /* r3 consumed them */
    /* two stage calls of one group, the thread state not cached before the second */
    fx_restart(f);
    ab_seq_item_t x[2] = {start(f, "t2", "r1", NULL, 0, NULL), finish(f, "t2", "r1", 2, TWO)};
    ab_seq_item_t y = resume(f, "t2", "r2", "[" R("i2", "resolved") "]");
    ab__seq_stage(f->s, x, 2);
    ab__seq_stage(f->s, &y, 1);
    assert_int_equal(y.status, AB_RESULT_REJECTED);
    refused(&y, "event/input/resume", "i1");
    ab__seq_abort(f->s);
    fx_free(f);
}

static void test_abort_forgets(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    ab_seq_item_t a = pub(f, start(f, "t1", "r1", NULL, 0, NULL));
    ok(&a);
    ab_seq_item_t x = pub(f, resume(f, "t1", "r0", "[]")); /* caches t1: r1 active */
    ok(&x);
    f->db.fail_append = 1;
    ab_seq_item_t b = finish(f, "t1", "r0", 2, TWO);
    assert_int_equal(group_n(f, &b, 1), AB_UNAVAILABLE); /* r0 is now the latest run */
    ab_seq_item_t c =
        pub(f, resume(f, "t1", "r2", "[" R("i1", "resolved") "," R("i2", "resolved") "]"));
    refused(&c, "event/input/resume/0/interruptId", "i1"); /* the interrupt was never stored */
    ab_seq_item_t d = pub(f, finish(f, "t1", "r0", 2, TWO));
    ok(&d);
    ab_seq_item_t e =
        pub(f, resume(f, "t1", "r3", "[" R("i1", "resolved") "," R("i2", "resolved") "]"));
    ok(&e);
    fx_free(f);
}

static void test_restart_and_eviction(void **state)
{
    (void)state;
    fx_t *f = fx_new(1); /* one thread state cached: every other thread is a miss */
    interrupted(f, "t1", "r1", TWO);
    interrupted(f, "t2", "r1", "[{\"id\":\"j1\",\"reason\":\"r\"}]");
    fx_restart(f);
    ab_seq_item_t a = pub(f, resume(f, "t1", "r2", "[" R("i1", "resolved") "]"));
    refused(&a, "event/input/resume", "i2"); /* read back from the store */
    ab_seq_item_t b = pub(f, resume(f, "t2", "r2", "[" R("i1", "resolved") "]"));
    refused(&b, "event/input/resume/0/interruptId", "i1");
    assert_int_equal(ab__seq_cached_threads(f->s), 1);
    ab_seq_item_t c =
        pub(f, resume(f, "t1", "r3", "[" R("i1", "resolved") "," R("i2", "resolved") "]"));
    ok(&c);
    fx_restart(f);
    ab_seq_item_t d =
        pub(f, resume(f, "t1", "r4", "[" R("i1", "resolved") "," R("i2", "resolved") "]"));
    refused(&d, "event/input/resume/0/interruptId", "i1"); /* r3 is the latest, active */
    ab_seq_item_t e = pub(f, resume(f, "t2", "r3", "[" R("j1", "cancelled") "]"));
    ok(&e);
    fx_free(f);
}

static void test_late_error(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    interrupted(f, "t1", "r1", TWO);
    ab_seq_item_t a = pub(f, mk(f, "t1", "r1", 3, "{\"type\":\"RUN_ERROR\",\"message\":\"late\"}"));
    ok(&a);
    ab_seq_item_t b =
        pub(f, resume(f, "t1", "r2", "[" R("i1", "resolved") "," R("i2", "resolved") "]"));
    refused(&b, "event/input/resume/0/interruptId", "i1"); /* a failed run asks nothing */
    fx_restart(f);
    ab_seq_item_t c =
        pub(f, resume(f, "t1", "r3", "[" R("i1", "resolved") "," R("i2", "resolved") "]"));
    refused(&c, "event/input/resume/0/interruptId", "i1");
    ab_seq_item_t d = pub(f, start(f, "t1", "r4", NULL, 1, NULL));
    ok(&d);
    fx_free(f);
}

/* ---- child runs ------------------------------------------------------------------------ */

static void test_child_runs(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    ab_seq_item_t a = pub(f, start(f, "t1", "p", NULL, 0, NULL));
    ok(&a);
    /* a child of the active run p: not checked, and not the thread's latest run */
    ab_seq_item_t b = pub(f, start(f, "t1", "c1", "p", 2, "[" R("x", "resolved") "]"));
    ok(&b);
    ab_seq_item_t c = pub(f, finish(f, "t1", "p", 2, TWO));
    ok(&c);
    fx_restart(f); /* c1 started after p, but as its child: p stays the latest run */
    ab_seq_item_t d = pub(f, resume(f, "t1", "r2", "[" R("i1", "resolved") "]"));
    refused(&d, "event/input/resume", "i2");
    /* parentRunId naming a run that has ended: a top-level run, checked */
    ab_seq_item_t e = pub(f, start(f, "t1", "c2", "p", 1, NULL));
    refused(&e, "event/input/resume", "i1");
    ab_seq_item_t g =
        pub(f, start(f, "t1", "c3", "p", 2, "[" R("i1", "resolved") "," R("i2", "resolved") "]"));
    ok(&g);
    fx_restart(f);
    ab_seq_item_t h =
        pub(f, resume(f, "t1", "r4", "[" R("i1", "resolved") "," R("i2", "resolved") "]"));
    refused(&h, "event/input/resume/0/interruptId", "i1"); /* c3 continued p */
    fx_free(f);
}

/* Many runs on one thread: the store is searched in passes of 32 heads. */
static void test_many_children(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    char names[40][8];
    ab_seq_item_t a = pub(f, start(f, "t1", "p", NULL, 0, NULL));
    ok(&a);
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof(names[i]), "c%d", i);
        ab_seq_item_t c = pub(f, start(f, "t1", names[i], "p", 0, NULL));
        ok(&c);
    }
    ab_seq_item_t b = pub(f, finish(f, "t1", "p", 2, TWO));
    ok(&b);
    for (int i = 0; i < 40; i++) { /* the children end after p: every one's last_pos is above p's */
        ab_seq_item_t c = pub(f, finish(f, "t1", names[i], 2, NULL));
        ok(&c);
    }
    fx_restart(f);
    unsigned reads = f->db.event_bytes;
    ab_seq_item_t d = pub(f, resume(f, "t1", "r2", "[" R("i2", "resolved") "]"));
    refused(&d, "event/input/resume", "i1");
    assert_true(f->db.event_bytes > reads + 40); /* every child's RUN_STARTED was looked at */
    fx_restart(f);
    ab_seq_item_t e =
        pub(f, resume(f, "t1", "r3", "[" R("i2", "resolved") "," R("i1", "resolved") "]"));
    ok(&e);
    fx_free(f);
}

/* Other top-level runs on the thread: only an input-carrying start after the interrupt counts. */
static void test_concurrent_runs(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    ab_seq_item_t a = pub(f, start(f, "t1", "r1", NULL, 0, NULL));
    ok(&a);
    ab_seq_item_t b =
        pub(f, start(f, "t1", "o1", NULL, 1, NULL)); /* started before the interrupt */
    ok(&b);
    ab_seq_item_t c = pub(f, finish(f, "t1", "r1", 2, TWO));
    ok(&c);
    ab_seq_item_t d = pub(f, start(f, "t1", "o2", NULL, 0, NULL)); /* no input: not checked */
    ok(&d);
    ab_seq_item_t e = pub(f, finish(f, "t1", "o1", 2, NULL));
    ok(&e);
    ab_seq_item_t g = pub(f, start(f, "t1", "o3", NULL, 1, NULL)); /* input, no resume */
    refused(&g, "event/input/resume", "i1");
    fx_restart(f);
    ab_seq_item_t h = pub(f, start(f, "t1", "o4", NULL, 1, NULL));
    refused(&h, "event/input/resume", "i1");
    ab_seq_item_t k =
        pub(f, resume(f, "t1", "r2", "[" R("i1", "resolved") "," R("i2", "resolved") "]"));
    ok(&k);
    ab_seq_item_t m = pub(f, start(f, "t1", "o5", NULL, 1, NULL)); /* answered: free again */
    ok(&m);
    fx_free(f);
}

static void test_memory_counted(void **state)
{
    (void)state;
    fx_t *f = fx_new(2);
    size_t before = ab__seq_memory(f->s);
    char th[4][8];
    for (int i = 0; i < 4; i++) {
        snprintf(th[i], sizeof(th[i]), "t%d", i);
        ab_seq_item_t a = pub(f, resume(f, th[i], "r1", "[]"));
        ok(&a);
        assert_true(ab__seq_cached_threads(f->s) <= 2);
    }
    assert_int_equal(ab__seq_cached_threads(f->s), 2);
    assert_true(ab__seq_memory(f->s) > before);
    fx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_resume),
        cmocka_unit_test(test_missing_unknown_duplicate),
        cmocka_unit_test(test_nothing_pending),
        cmocka_unit_test(test_expired),
        cmocka_unit_test(test_same_group),
        cmocka_unit_test(test_abort_forgets),
        cmocka_unit_test(test_restart_and_eviction),
        cmocka_unit_test(test_late_error),
        cmocka_unit_test(test_child_runs),
        cmocka_unit_test(test_many_children),
        cmocka_unit_test(test_concurrent_runs),
        cmocka_unit_test(test_memory_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

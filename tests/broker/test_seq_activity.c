/*
 * test_seq_activity.c - rule R20 across the runs of a thread in the
 * sequencer (docs/SEQUENCER.md section 2b) against the in-memory fake
 * plugin: an ACTIVITY_DELTA's baseline may be an activity message an earlier
 * run of the same thread created and no later MESSAGES_SNAPSHOT dropped;
 * never one of another thread; within a group, after an abort, after a
 * restart on the same store (derived from the stored events), after the
 * thread state was evicted, past the bound of remembered ids (then the store
 * is read), and when the store fails.
 */
#include "testutil.h"

#include "agentbus/codec.h"
#include "fake_plugin.h"
#include "seq_fixture.h"
#include "seq_internal.h"
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

static ab_seq_item_t mk(fx_t *f, const char *th, const char *run, uint64_t seq, const char *json)
{
    return tev_item(&f->pool, th, run, seq, 1, json);
}

static ab_seq_item_t run_started(fx_t *f, const char *th, const char *run)
{
    char json[256];
    snprintf(json, sizeof(json),
             "{\"type\":\"RUN_STARTED\",\"protocolVersion\":\"1.0\",\"threadId\":\"%s\","
             "\"runId\":\"%s\"}",
             th, run);
    return mk(f, th, run, 1, json);
}

static ab_seq_item_t run_finished(fx_t *f, const char *th, const char *run, uint64_t seq)
{
    char json[256];
    snprintf(json, sizeof(json), "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\"}",
             th, run);
    return mk(f, th, run, seq, json);
}

/* ACTIVITY_SNAPSHOT of @p id, with @p extra fields (",\"replace\":false"). */
static ab_seq_item_t act_snap(fx_t *f, const char *th, const char *run, uint64_t seq,
                              const char *id, const char *extra)
{
    char json[1024];
    int n =
        snprintf(json, sizeof(json),
                 "{\"type\":\"ACTIVITY_SNAPSHOT\",\"messageId\":\"%s\",\"activityType\":\"plan\","
                 "\"content\":{\"step\":1}%s}",
                 id, extra);
    assert_true(n > 0 && (size_t)n < sizeof(json));
    return mk(f, th, run, seq, json);
}

static ab_seq_item_t act_delta(fx_t *f, const char *th, const char *run, uint64_t seq,
                               const char *id, const char *extra)
{
    char json[1024];
    int n = snprintf(json, sizeof(json),
                     "{\"type\":\"ACTIVITY_DELTA\",\"messageId\":\"%s\",\"activityType\":\"plan\","
                     "\"patch\":[{\"op\":\"replace\",\"path\":\"/step\",\"value\":2}]%s}",
                     id, extra);
    assert_true(n > 0 && (size_t)n < sizeof(json));
    return mk(f, th, run, seq, json);
}

#define AMSG(id)                                                                                   \
    "{\"id\":\"" id "\",\"role\":\"activity\",\"activityType\":\"plan\",\"content\":{}}"
#define UMSG(id) "{\"id\":\"" id "\",\"role\":\"user\",\"content\":\"hi\"}"

/* MESSAGES_SNAPSHOT with @p msgs (the JSON inside the array). */
static ab_seq_item_t msgs_snap(fx_t *f, const char *th, const char *run, uint64_t seq,
                               const char *msgs)
{
    char json[2048];
    int n =
        snprintf(json, sizeof(json), "{\"type\":\"MESSAGES_SNAPSHOT\",\"messages\":[%s]}", msgs);
    assert_true(n > 0 && (size_t)n < sizeof(json));
    return mk(f, th, run, seq, json);
}

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

static void ok_(const ab_seq_item_t *it, int line)
{
    if (it->status != AB_RESULT_ACCEPTED)
        fail_msg("line %d: expected accepted, got %d: %s: %s (at %s)", line, (int)it->status,
                 ab_status_name(it->err.code), it->err.message, it->err.field);
}
#define OK(f, it)                                                                                  \
    do {                                                                                           \
        ab_seq_item_t it_ = pub(f, it);                                                            \
        ok_(&it_, __LINE__);                                                                       \
    } while (0)

/* Refused by R20: invalid_event at event/messageId, the message naming @p id. */
static void no_baseline_(const ab_seq_item_t *it, const char *id, int line)
{
    if (it->status != AB_RESULT_REJECTED)
        fail_msg("line %d: expected a refused delta for %s, got %d", line, id, (int)it->status);
    tu_assert_error(&it->err, AB_INVALID_EVENT, "event/messageId");
    if (!strstr(it->err.message, id) || !strstr(it->err.message, "of this thread holds"))
        fail_msg("line %d: message does not name %s: %s", line, id, it->err.message);
}
#define NO_BASELINE(f, it, id)                                                                     \
    do {                                                                                           \
        ab_seq_item_t it_ = pub(f, it);                                                            \
        no_baseline_(&it_, id, __LINE__);                                                          \
    } while (0)

/* r1 of @p th: started, snapshot of @p id, finished (3 events). */
static void earlier_run(fx_t *f, const char *th, const char *run, const char *id)
{
    OK(f, run_started(f, th, run));
    OK(f, act_snap(f, th, run, 2, id, ""));
    OK(f, run_finished(f, th, run, 3));
}

/* ---- the rule ---------------------------------------------------------------- */

static void test_later_run(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    earlier_run(f, "t1", "r1", "a1");
    OK(f, run_started(f, "t1", "r2"));
    OK(f, act_delta(f, "t1", "r2", 2, "a1", ""));
    OK(f, act_delta(f, "t1", "r2", 3, "a1", "")); /* again: the cached thread answers */
    NO_BASELINE(f, act_delta(f, "t1", "r2", 4, "nope", ""), "nope");
    OK(f, run_finished(f, "t1", "r2", 4));
    assert_int_equal(f->db.nev, 7); /* the refused delta was not stored */
    /* a run two runs later still has the baseline: it accumulates */
    OK(f, run_started(f, "t1", "r3"));
    OK(f, act_delta(f, "t1", "r3", 2, "a1", ""));
    /* the owner is not carried across runs: a tag is no mismatch (docs/SEQUENCER.md 2b) */
    OK(f, act_delta(f, "t1", "r3", 3, "a1", ",\"subagentRunId\":\"s9\""));
    fx_free(f);
}

static void test_no_snapshot_on_thread(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    OK(f, run_started(f, "t1", "r1"));
    NO_BASELINE(f, act_delta(f, "t1", "r1", 2, "a1", ""), "a1");
    OK(f, run_finished(f, "t1", "r1", 2));
    OK(f, run_started(f, "t1", "r2"));
    NO_BASELINE(f, act_delta(f, "t1", "r2", 2, "a1", ""), "a1");
    /* a user message of that id is no baseline */
    OK(f, msgs_snap(f, "t1", "r2", 2, UMSG("u1")));
    OK(f, run_finished(f, "t1", "r2", 3));
    OK(f, run_started(f, "t1", "r3"));
    NO_BASELINE(f, act_delta(f, "t1", "r3", 2, "u1", ""), "u1");
    fx_free(f);
}

static void test_other_thread(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    earlier_run(f, "t2", "r1", "a1");
    OK(f, run_started(f, "t1", "r1"));
    NO_BASELINE(f, act_delta(f, "t1", "r1", 2, "a1", ""), "a1");
    OK(f, run_started(f, "t2", "r2"));
    OK(f, act_delta(f, "t2", "r2", 2, "a1", ""));
    fx_restart(f);
    NO_BASELINE(f, act_delta(f, "t1", "r1", 2, "a1", ""), "a1");
    OK(f, act_delta(f, "t2", "r2", 3, "a1", ""));
    fx_free(f);
}

static void test_dropped_by_messages_snapshot(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    earlier_run(f, "t1", "r1", "a1");
    OK(f, run_started(f, "t1", "r2"));
    OK(f, msgs_snap(f, "t1", "r2", 2, UMSG("u1"))); /* no activity messages: a1 is kept */
    OK(f, act_delta(f, "t1", "r2", 3, "a1", ""));
    OK(f, msgs_snap(f, "t1", "r2", 4, UMSG("u1") "," AMSG("a2"))); /* the complete set: a2 */
    NO_BASELINE(f, act_delta(f, "t1", "r2", 5, "a1", ""), "a1");
    OK(f, act_delta(f, "t1", "r2", 5, "a2", ""));
    OK(f, run_finished(f, "t1", "r2", 6));
    OK(f, run_started(f, "t1", "r3"));
    NO_BASELINE(f, act_delta(f, "t1", "r3", 2, "a1", ""), "a1");
    OK(f, act_delta(f, "t1", "r3", 2, "a2", ""));
    /* an ACTIVITY_SNAPSHOT with replace:false creates a missing one again */
    OK(f, act_snap(f, "t1", "r3", 3, "a1", ",\"replace\":false"));
    OK(f, run_finished(f, "t1", "r3", 4));
    OK(f, run_started(f, "t1", "r4"));
    OK(f, act_delta(f, "t1", "r4", 2, "a1", ""));
    fx_free(f);
}

/* The cached answers agree with what a fresh sequencer derives from the store. */
static void test_restart(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    earlier_run(f, "t1", "r1", "a1");
    OK(f, run_started(f, "t1", "r2"));
    OK(f, act_snap(f, "t1", "r2", 2, "a3", ""));
    OK(f, run_finished(f, "t1", "r2", 3));
    fx_restart(f);
    unsigned reads = f->db.reads;
    OK(f, run_started(f, "t1", "r3"));
    OK(f, act_delta(f, "t1", "r3", 2, "a1", ""));
    assert_true(f->db.reads > reads); /* derived from the stored events */
    OK(f, act_delta(f, "t1", "r3", 3, "a3", ""));
    NO_BASELINE(f, act_delta(f, "t1", "r3", 4, "a2", ""), "a2");
    OK(f, msgs_snap(f, "t1", "r3", 4, AMSG("a2")));
    OK(f, run_finished(f, "t1", "r3", 5));
    fx_restart(f); /* the drop is derived too */
    OK(f, run_started(f, "t1", "r4"));
    NO_BASELINE(f, act_delta(f, "t1", "r4", 2, "a1", ""), "a1");
    NO_BASELINE(f, act_delta(f, "t1", "r4", 2, "a3", ""), "a3");
    OK(f, act_delta(f, "t1", "r4", 2, "a2", ""));
    fx_free(f);
}

/* An active run whose stored events hold a delta accepted by the thread is rebuilt intact. */
static void test_rebuild_keeps_cross_run_delta(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    earlier_run(f, "t1", "r1", "a1");
    OK(f, run_started(f, "t1", "r2"));
    OK(f, act_delta(f, "t1", "r2", 2, "a1", ""));
    fx_restart(f); /* r2 is rebuilt from the store on its next event */
    OK(f, act_delta(f, "t1", "r2", 3, "a1", ""));
    NO_BASELINE(f, act_delta(f, "t1", "r2", 4, "zz", ""), "zz");
    OK(f, run_finished(f, "t1", "r2", 4));
    fx_free(f);
}

static void test_eviction(void **state)
{
    (void)state;
    fx_t *f = fx_new(1); /* one thread state: every switch evicts the other */
    earlier_run(f, "t1", "r1", "a1");
    earlier_run(f, "t2", "r1", "b1");
    OK(f, run_started(f, "t1", "r2"));
    OK(f, run_started(f, "t2", "r2"));
    for (uint64_t i = 0; i < 3; i++) {
        OK(f, act_delta(f, "t1", "r2", 2 + i, "a1", ""));
        assert_true(ab__seq_cached_threads(f->s) <= 1);
        OK(f, act_delta(f, "t2", "r2", 2 + i, "b1", ""));
        assert_true(ab__seq_cached_threads(f->s) <= 1);
    }
    NO_BASELINE(f, act_delta(f, "t1", "r2", 5, "b1", ""), "b1");
    NO_BASELINE(f, act_delta(f, "t2", "r2", 5, "a1", ""), "a1");
    fx_free(f);
}

/* ---- groups ------------------------------------------------------------------- */

static void test_same_group(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    OK(f, run_started(f, "t1", "r1"));
    OK(f, run_started(f, "t1", "r2"));
    /* staged in one group: r1's snapshot is the baseline of r2's delta that follows it */
    ab_seq_item_t a[4] = {
        act_delta(f, "t1", "r2", 2, "a1", ""), act_snap(f, "t1", "r1", 2, "a1", ""),
        act_delta(f, "t1", "r2", 2, "a1", ""), msgs_snap(f, "t1", "r1", 3, AMSG("a2"))};
    ab__seq_stage(f->s, &a[0], 1);
    no_baseline_(&a[0], "a1", __LINE__);
    ab__seq_stage(f->s, &a[1], 3);
    ok_(&a[1], __LINE__);
    ok_(&a[2], __LINE__);
    ok_(&a[3], __LINE__);
    ab_seq_item_t b = act_delta(f, "t1", "r2", 3, "a1", ""); /* dropped by the staged snapshot */
    ab__seq_stage(f->s, &b, 1);
    no_baseline_(&b, "a1", __LINE__);
    size_t np = 0;
    const ab_append_event_t *p = ab__seq_pending(f->s, &np);
    uint64_t first = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(fp_append_batch(&f->db, p, np, 0, &first, &err), AB_OK);
    ab__seq_commit(f->s, first);
    OK(f, act_delta(f, "t1", "r2", 3, "a2", ""));
    fx_free(f);
}

static void test_abort_forgets(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    earlier_run(f, "t1", "r1", "a1");
    OK(f, run_started(f, "t1", "r2"));
    OK(f, run_started(f, "t1", "r3"));
    OK(f, act_delta(f, "t1", "r3", 2, "a1", "")); /* the thread's facet is cached now */
    f->db.fail_append = 1;
    ab_seq_item_t a[2] = {act_snap(f, "t1", "r2", 2, "a9", ""),
                          msgs_snap(f, "t1", "r2", 3, AMSG("a8"))};
    assert_int_equal(group_n(f, a, 2), AB_UNAVAILABLE); /* never stored */
    NO_BASELINE(f, act_delta(f, "t1", "r3", 3, "a9", ""), "a9");
    NO_BASELINE(f, act_delta(f, "t1", "r3", 3, "a8", ""), "a8");
    OK(f, act_delta(f, "t1", "r3", 3, "a1", "")); /* the drop was never stored either */
    fx_free(f);
}

static void test_store_error(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    earlier_run(f, "t1", "r1", "a1");
    fx_restart(f);
    OK(f, run_started(f, "t1", "r2"));
    f->db.fail_read = 1;
    ab_seq_item_t a = pub(f, act_delta(f, "t1", "r2", 2, "a1", ""));
    assert_int_equal(a.status, AB_RESULT_REJECTED);
    tu_assert_error(&a.err, AB_UNAVAILABLE, "");  /* the store's error, not invalid_event */
    OK(f, act_delta(f, "t1", "r2", 2, "a1", "")); /* a retry succeeds */
    fx_free(f);
}

/* A stored activity event that does not decode is `corrupt`, and its message, which names
 * the thread cut to 64 bytes, stays valid UTF-8 when the cut falls inside a character (an
 * encoder cuts a message at its first invalid byte: the reason would be lost). */
static void test_corrupt_message_utf8(void **state)
{
    (void)state;
    char th[80];
    memset(th, 'x', 63);
    strcpy(th + 63, "\xc3\xa9\xc3\xa9"); /* byte 64 is inside the first e-acute */
    fx_t *f = fx_new(0);
    earlier_run(f, th, "r1", "a1");
    assert_int_equal(f->db.nev, 3);
    f->db.ev[1].len--; /* the ACTIVITY_SNAPSHOT, cut short: its type is still there */
    fx_restart(f);
    OK(f, run_started(f, th, "r2"));
    ab_seq_item_t a = pub(f, act_delta(f, th, "r2", 2, "a1", ""));
    assert_int_equal(a.status, AB_RESULT_REJECTED);
    tu_assert_error(&a.err, AB_CORRUPT, "seq");
    if (!ab_utf8_valid(a.err.message, strlen(a.err.message)))
        fail_msg("not UTF-8: %s", a.err.message);
    assert_non_null(strstr(a.err.message, "' does not decode: "));
    fx_free(f);
}

/* ---- the bound ------------------------------------------------------------------- */

static ab__seq_act_t *facet(fx_t *f, const char *th)
{
    ab__seq_thr_t *t = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__seq_thr_entry(f->s, (ab_str_t){th, strlen(th)}, &t, &err), AB_OK);
    return t->act;
}

/* More live activity messages than a thread state remembers: the store answers the rest. */
static void test_bound(void **state)
{
    (void)state;
    enum { N = AB__SEQ_MAX_ACTS + 6 };
    fx_t *f = fx_new(0);
    char id[N][300];
    OK(f, run_started(f, "t1", "r1"));
    for (int i = 0; i < N; i++) {
        memset(id[i], 'x', 250); /* long ids: the bound is on bytes too */
        snprintf(id[i] + 250, sizeof(id[i]) - 250, "%03d", i);
        OK(f, act_snap(f, "t1", "r1", 2 + (uint64_t)i, id[i], ""));
    }
    OK(f, run_finished(f, "t1", "r1", 2 + N));
    fx_restart(f);
    OK(f, run_started(f, "t1", "r2"));
    uint64_t seq = 2;
    OK(f, act_delta(f, "t1", "r2", seq++, id[0], ""));
    const ab__seq_act_t *a = facet(f, "t1");
    assert_non_null(a);
    assert_int_equal(a->n, AB__SEQ_MAX_ACTS);
    assert_false(a->complete);
    size_t max = sizeof(*a) + AB__SEQ_MAX_ACTS * (256 + 1);
    assert_true(ab__seq_act_memory(a) <= max);
    assert_true(ab__seq_act_memory(a) > max / 2);
    /* every one is a baseline, also those not remembered (the store is read for them) */
    for (int i = 0; i < N; i++) {
        unsigned reads = f->db.reads;
        OK(f, act_delta(f, "t1", "r2", seq++, id[i], ""));
        if (i >= (int)AB__SEQ_MAX_ACTS)
            assert_true(f->db.reads > reads);
        assert_true(facet(f, "t1")->n <= AB__SEQ_MAX_ACTS);
    }
    /* an unknown id costs a read too while the list is incomplete, and is refused */
    unsigned reads = f->db.reads;
    NO_BASELINE(f, act_delta(f, "t1", "r2", seq, "nope", ""), "nope");
    assert_true(f->db.reads > reads);
    /* a MESSAGES_SNAPSHOT with two activity messages makes the list complete again */
    OK(f, msgs_snap(f, "t1", "r2", seq++, AMSG("m1") "," AMSG("m2")));
    a = facet(f, "t1");
    assert_true(a->complete);
    assert_int_equal(a->n, 2);
    reads = f->db.reads;
    NO_BASELINE(f, act_delta(f, "t1", "r2", seq, id[0], ""), "xxx");
    OK(f, act_delta(f, "t1", "r2", seq++, "m2", ""));
    assert_int_equal(f->db.reads, reads); /* answered from memory */
    fx_free(f);
}

static void test_memory_counted(void **state)
{
    (void)state;
    fx_t *f = fx_new(2);
    char th[4][8];
    for (int i = 0; i < 4; i++) {
        snprintf(th[i], sizeof(th[i]), "t%d", i);
        earlier_run(f, th[i], "r1", "a1");
        OK(f, run_started(f, th[i], "r2"));
    }
    size_t before = ab__seq_memory(f->s);
    for (int i = 0; i < 4; i++) {
        OK(f, act_delta(f, th[i], "r2", 2, "a1", ""));
        assert_true(ab__seq_cached_threads(f->s) <= 2);
    }
    assert_true(ab__seq_memory(f->s) >= before + sizeof(ab__seq_act_t));
    fx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_later_run),
        cmocka_unit_test(test_no_snapshot_on_thread),
        cmocka_unit_test(test_other_thread),
        cmocka_unit_test(test_dropped_by_messages_snapshot),
        cmocka_unit_test(test_restart),
        cmocka_unit_test(test_rebuild_keeps_cross_run_delta),
        cmocka_unit_test(test_eviction),
        cmocka_unit_test(test_same_group),
        cmocka_unit_test(test_abort_forgets),
        cmocka_unit_test(test_store_error),
        cmocka_unit_test(test_corrupt_message_utf8),
        cmocka_unit_test(test_bound),
        cmocka_unit_test(test_memory_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

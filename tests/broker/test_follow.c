/*
 * test_follow.c - the writer's follower of a shared store (broker/follow.c)
 * against the in-memory fake plugin, invariant 6: every committed event up to
 * `fanned` is applied to the sequencer's caches. An own commit right after
 * `fanned` keeps the cached runs and thread states; a followed event of
 * another broker evicts its run only; an own commit past positions a failed
 * read left unread drops every cached run and thread state, so the next event
 * of a cached run is checked against the stored head (and a thread's resume
 * state is derived from the store) again.
 *
 * "Another broker" is a second sequencer over the same fake store.
 */
#include "testutil.h"

#include "agentbus/codec.h"
#include "fake_plugin.h"
#include "follow.h"
#include "seq_fixture.h"
#include "sequencer.h"
#include "writer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fx {
    ab_plugin_db_t db; /**< the shared store */
    ab_broker_config_t cfg;
    ab__shared_t b;
    void *zctx, *xpub;
    ab_seq_t *s;     /**< this broker's sequencer */
    ab_seq_t *other; /**< another broker's, over the same store */
    ab__fanout_t fan;
    ab__follow_t fol;
    tev_pool_t pool;
} fx_t;

static ab_seq_t *seq_new(fx_t *f)
{
    ab_seq_t *s = NULL;
    ab_seq_opts_t o = {0};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__seq_new(&s, fp_plugin_shared(), &f->db, &o, &err), AB_OK);
    return s;
}

static fx_t *fx_new(void)
{
    fx_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    ab__log_set_level(AB_LOG_ERROR); /* the failed read's warning is expected */
    ab_broker_config_defaults(&f->cfg);
    f->zctx = zmq_ctx_new();
    f->xpub = zmq_socket(f->zctx, ZMQ_XPUB); /* unbound: live messages go nowhere */
    assert_non_null(f->xpub);
    f->b.cfg = &f->cfg;
    f->b.plugin = fp_plugin_shared();
    f->b.wdb = &f->db;
    f->b.xpub = f->xpub;
    f->s = seq_new(f);
    f->other = seq_new(f);
    ab__fanout_init(&f->fan, &f->b);
    ab__follow_init(&f->fol, &f->b, f->s);
    assert_true(f->fol.on);
    return f;
}

static void fx_free(fx_t *f)
{
    ab__follow_free(&f->fol);
    ab__fanout_free(&f->fan);
    ab__seq_destroy(&f->s);
    ab__seq_destroy(&f->other);
    zmq_close(f->xpub);
    zmq_ctx_term(f->zctx);
    tev_pool_free(&f->pool);
    fp_free(&f->db);
    free(f);
}

static void ok(const ab_seq_item_t *it)
{
    if (it->status != AB_RESULT_ACCEPTED)
        fail_msg("expected accepted, got %d: %s: %s (at %s)", (int)it->status,
                 ab_status_name(it->err.code), it->err.message, it->err.field);
}

/* Stage @p it on @p s, append it to the store, commit: its first position. */
static uint64_t commit_on(fx_t *f, ab_seq_t *s, ab_seq_item_t *it)
{
    ab__seq_stage(s, it, 1);
    ok(it);
    size_t np = 0;
    const ab_append_event_t *p = ab__seq_pending(s, &np);
    uint64_t first = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(fp_append_batch(&f->db, p, np, 0, &first, &err), AB_OK);
    ab__seq_commit(s, first);
    return first;
}

/* This broker publishes @p it: committed, then fanned out as the writer does (writer.c). */
static void own(fx_t *f, ab_seq_item_t it)
{
    uint64_t first = commit_on(f, f->s, &it);
    atomic_store(&f->b.head_pos, first);
    ab__follow_before(&f->fol, &f->fan, first);
    ab__fanout_event(&f->fan, &it, 0);
    ab__fanout_flush(&f->fan);
    ab__follow_after(&f->fol, &f->fan, first, first);
    assert_int_equal(ab__follow_seen(&f->fol), first);
}

/* Another broker commits @p it to the store; this one has not read it yet. */
static void remote(fx_t *f, ab_seq_item_t it)
{
    commit_on(f, f->other, &it);
}

/* A top-level RUN_STARTED of (thread, run) carrying input, with @p resume (a JSON array of
 * ResumeEntry) or without (NULL): checked against its thread's state, which gets cached. */
static ab_seq_item_t started_with(fx_t *f, const char *thread, const char *run, const char *resume)
{
    char json[1024];
    snprintf(json, sizeof(json),
             "{\"type\":\"RUN_STARTED\",\"protocolVersion\":\"1.0\",\"threadId\":\"%s\","
             "\"runId\":\"%s\",\"input\":{\"threadId\":\"%s\",\"runId\":\"%s\","
             "\"messages\":[]%s%s}}",
             thread, run, thread, run, resume ? ",\"resume\":" : "", resume ? resume : "");
    return tev_item(&f->pool, thread, run, 1, 1, json);
}

static ab_seq_item_t started(fx_t *f, const char *thread, const char *run)
{
    return started_with(f, thread, run, NULL);
}

static ab_seq_item_t msg(fx_t *f, const char *thread, const char *run, uint64_t seq,
                         const char *json)
{
    return tev_item(&f->pool, thread, run, seq, 1, json);
}

#define MSG_START   "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m1\"}"
#define MSG_CONTENT "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"hi\"}"
#define MSG_END     "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m1\"}"
#define ONE         "[{\"id\":\"i1\",\"reason\":\"confirmation\"}]"
#define ANSWER_I1   "[{\"interruptId\":\"i1\",\"status\":\"resolved\"}]"

/* This broker's run a (thread t1, positions 1-2) and run c (thread t3, position 3),
 * both cached with their threads' states. */
static void two_cached_runs(fx_t *f)
{
    own(f, started(f, "t1", "a"));
    own(f, msg(f, "t1", "a", 2, MSG_START));
    own(f, started(f, "t3", "c"));
    assert_int_equal(ab__seq_cached_runs(f->s), 2);
    assert_int_equal(ab__seq_cached_threads(f->s), 2);
}

/* Stage @p it alone (the group is then aborted): its verdict, and whether the
 * run's head was read from the store for it. */
static bool stage_reads_head(fx_t *f, ab_seq_item_t *it)
{
    unsigned heads = f->db.heads;
    ab__seq_stage(f->s, it, 1);
    ab__seq_abort(f->s);
    return f->db.heads != heads;
}

/* ---- the normal paths ----------------------------------------------------------- */

/* fanned + 1 == first: nothing is dropped; the next events are checked against the caches. */
static void test_own_commit_keeps_caches(void **state)
{
    (void)state;
    fx_t *f = fx_new();
    two_cached_runs(f);
    own(f, msg(f, "t1", "a", 3, MSG_CONTENT)); /* fanned 3, first 4 */
    assert_int_equal(ab__seq_cached_runs(f->s), 2);
    assert_int_equal(ab__seq_cached_threads(f->s), 2);
    ab_seq_item_t a = msg(f, "t1", "a", 4, MSG_END);
    assert_false(stage_reads_head(f, &a));
    ok(&a);
    ab_seq_item_t c = msg(f, "t3", "c", 2, MSG_START);
    assert_false(stage_reads_head(f, &c));
    ok(&c);
    assert_int_equal(f->fol.remote, 0);
    fx_free(f);
}

/* Another broker's event read before the own commit (fanned + 1 == first again): only its
 * run is evicted (invariant 2), and its next event here is checked against the store. */
static void test_followed_event_evicts_its_run(void **state)
{
    (void)state;
    fx_t *f = fx_new();
    two_cached_runs(f);
    remote(f, msg(f, "t1", "a", 3, MSG_CONTENT)); /* position 4 */
    own(f, started(f, "t2", "b"));                /* position 5: reads 4 first */
    assert_int_equal(f->fol.remote, 1);
    assert_int_equal(ab__seq_cached_runs(f->s), 2); /* b and c */
    ab_seq_item_t dup = msg(f, "t1", "a", 3, MSG_CONTENT);
    bool reread = stage_reads_head(f, &dup);
    assert_int_equal(dup.status, AB_RESULT_DUPLICATE);
    assert_int_equal(dup.pos, 4);
    assert_true(reread);
    ab_seq_item_t c = msg(f, "t3", "c", 2, MSG_START);
    assert_false(stage_reads_head(f, &c)); /* c is still cached */
    ok(&c);
    fx_free(f);
}

/* ---- invariant 6: an own commit over positions a failed read left unread ---------- */

/* The same, but the read below the own commit fails: fanned + 1 < first, so every cached
 * run is dropped, the unrelated c too, and a's next event sees the other broker's seq 3. */
static void test_failed_read_forgets_runs(void **state)
{
    (void)state;
    fx_t *f = fx_new();
    two_cached_runs(f);
    remote(f, msg(f, "t1", "a", 3, MSG_CONTENT)); /* position 4, never read */
    f->db.fail_read = 1;
    own(f, started(f, "t2", "b")); /* position 5: the read of 4 fails */
    assert_int_equal(f->db.fail_read, 0);
    assert_int_equal(f->fol.remote, 0);
    assert_int_equal(ab__seq_cached_runs(f->s), 0);
    assert_int_equal(ab__seq_cached_threads(f->s), 0);
    /* with a's cache kept, seq 3 would be staged again (a conflict in the store) */
    ab_seq_item_t dup = msg(f, "t1", "a", 3, MSG_CONTENT);
    bool reread = stage_reads_head(f, &dup);
    assert_int_equal(dup.status, AB_RESULT_DUPLICATE);
    assert_int_equal(dup.pos, 4);
    assert_true(reread);
    ab_seq_item_t end = msg(f, "t1", "a", 4, MSG_END); /* after the store's seq 3 */
    stage_reads_head(f, &end);
    ok(&end);
    ab_seq_item_t c = msg(f, "t3", "c", 2, MSG_START);
    assert_true(stage_reads_head(f, &c));
    ok(&c);
    fx_free(f);
}

/* The thread states go too: another broker's resume of t1's interrupt, at a position the
 * failed read left unread, is seen here once t1's state is derived from the store again. */
static void test_failed_read_forgets_thread_states(void **state)
{
    (void)state;
    fx_t *f = fx_new();
    own(f, started(f, "t1", "r1"));
    own(f, msg(f, "t1", "r1", 2,
               "{\"type\":\"RUN_FINISHED\",\"threadId\":\"t1\",\"runId\":\"r1\",\"outcome\":{"
               "\"type\":\"interrupt\",\"interrupts\":" ONE "}}"));
    assert_int_equal(ab__seq_cached_threads(f->s), 1); /* t1: i1 pending */
    remote(f, started_with(f, "t1", "r2", ANSWER_I1)); /* position 3, never read */
    f->db.fail_read = 1;
    own(f, started(f, "t9", "x")); /* position 4 */
    assert_int_equal(ab__seq_cached_threads(f->s), 0);
    /* with t1's state kept, i1 would still be pending and r3 would answer it again */
    ab_seq_item_t again = started_with(f, "t1", "r3", ANSWER_I1);
    ab__seq_stage(f->s, &again, 1);
    ab__seq_abort(f->s);
    assert_int_equal(again.status, AB_RESULT_REJECTED);
    tu_assert_error(&again.err, AB_CONFLICT, "event/input/resume/0/interruptId");
    assert_non_null(strstr(again.err.message, "continues nothing")); /* r2 is the latest run */
    fx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_own_commit_keeps_caches),
        cmocka_unit_test(test_followed_event_evicts_its_run),
        cmocka_unit_test(test_failed_read_forgets_runs),
        cmocka_unit_test(test_failed_read_forgets_thread_states),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_sequencer.c - the broker sequencer (broker/sequencer.h) against an
 * in-memory fake plugin: every rule one by one, batches with several runs,
 * pre-rejected items, abort and reload, eviction and checker rebuild, claim,
 * the cache bound, and a group over more runs than its lookups look ahead.
 */
#include "testutil.h"

#include "agentbus/codec.h"
#include "fake_plugin.h"
#include "loader.h"
#include "seq_fixture.h"
#include "sequencer.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One test event: its tree, envelope, validation info and encoded bytes. */
typedef struct fx {
    ab_plugin_db_t db;         /**< the fake store */
    const ab_plugin_t *plugin; /**< fake, or the real SQLite plugin */
    ab_plugin_db_t *dbp;       /**< &db, or the SQLite handle */
    ab_seq_t *s;
    tev_pool_t pool;
} fx_t;

static fx_t *fx_new_on(uint32_t max_runs, const ab_plugin_t *plugin, ab_plugin_db_t *db)
{
    fx_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->plugin = plugin ? plugin : fp_plugin();
    f->dbp = db ? db : &f->db;
    ab_seq_opts_t o = {0};
    o.max_runs = max_runs;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__seq_new(&f->s, f->plugin, f->dbp, &o, &err), AB_OK);
    return f;
}

static fx_t *fx_new(uint32_t max_runs)
{
    return fx_new_on(max_runs, NULL, NULL);
}

static void fx_free(fx_t *f)
{
    ab__seq_destroy(&f->s);
    assert_null(f->s);
    tev_pool_free(&f->pool);
    fp_free(&f->db);
    free(f);
}

/* An item for an event of (thread, run) at seq/epoch with the AG-UI body @p json. */
static ab_seq_item_t mk(fx_t *f, const char *thread, const char *run, uint64_t seq, uint64_t epoch,
                        const char *json)
{
    return tev_item(&f->pool, thread, run, seq, epoch, json);
}

/* RUN_STARTED whose boundary ids are the envelope's. */
static ab_seq_item_t started(fx_t *f, const char *thread, const char *run, uint64_t seq,
                             uint64_t epoch)
{
    char json[256];
    snprintf(json, sizeof(json),
             "{\"type\":\"RUN_STARTED\",\"protocolVersion\":\"1.0\",\"threadId\":\"%s\",\"runId\":"
             "\"%s\"}",
             thread, run);
    return mk(f, thread, run, seq, epoch, json);
}

static ab_seq_item_t finished(fx_t *f, const char *thread, const char *run, uint64_t seq,
                              uint64_t epoch)
{
    char json[256];
    snprintf(json, sizeof(json), "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\"}",
             thread, run);
    return mk(f, thread, run, seq, epoch, json);
}

#define MSG_START   "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m1\"}"
#define MSG_CONTENT "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"hi\"}"
#define MSG_END     "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m1\"}"
#define RUN_ERR     "{\"type\":\"RUN_ERROR\",\"message\":\"boom\"}"

/* Stage a group, append it to the fake store, commit (or abort on failure). */
static ab_status_t group(fx_t *f, ab_seq_item_t *items, size_t n)
{
    ab__seq_stage(f->s, items, n);
    size_t np = 0;
    const ab_append_event_t *p = ab__seq_pending(f->s, &np);
    uint64_t first = 0;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t rc = np ? f->plugin->append_batch(f->dbp, p, np, 0, &first, &err) : AB_OK;
    if (rc == AB_OK)
        ab__seq_commit(f->s, first);
    else
        ab__seq_abort(f->s);
    return rc;
}

static ab_seq_item_t pub(fx_t *f, ab_seq_item_t it)
{
    assert_int_equal(group(f, &it, 1), AB_OK);
    return it;
}

static void expect_accepted(const ab_seq_item_t *it, uint64_t pos)
{
    if (it->status != AB_RESULT_ACCEPTED)
        fail_msg("expected accepted, got %d: %s: %s (at %s)", (int)it->status,
                 ab_status_name(it->err.code), it->err.message, it->err.field);
    assert_int_equal(it->pos, pos);
}

static void expect_dup(const ab_seq_item_t *it, uint64_t pos)
{
    if (it->status != AB_RESULT_DUPLICATE)
        fail_msg("expected duplicate, got %d: %s: %s", (int)it->status,
                 ab_status_name(it->err.code), it->err.message);
    assert_int_equal(it->pos, pos);
}

static void expect_rejected(const ab_seq_item_t *it, ab_status_t code, const char *field)
{
    assert_int_equal(it->status, AB_RESULT_REJECTED);
    tu_assert_error(&it->err, code, field);
    assert_int_equal(it->pos, 0);
}

static int64_t detail(const ab_seq_item_t *it, const char *key)
{
    const ab_error_detail_t *d = ab_error_detail(&it->err, key);
    if (!d)
        fail_msg("no detail '%s' in %s", key, it->err.message);
    return d->i;
}

/* ---- the rules ------------------------------------------------------------ */

static void test_next_seq_accepted(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    ab_seq_item_t a = pub(f, started(f, "t1", "r1", 1, 1));
    expect_accepted(&a, 1);
    ab_seq_item_t b = pub(f, mk(f, "t1", "r1", 2, 1, MSG_START));
    expect_accepted(&b, 2);
    ab_seq_item_t c = pub(f, mk(f, "t1", "r1", 3, 1, MSG_CONTENT));
    expect_accepted(&c, 3);
    assert_int_equal(f->db.nev, 3);
    assert_int_equal(ab__seq_cached_runs(f->s), 1);
    fx_free(f);
}

static void test_pending_fields(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    ab_seq_item_t it[2] = {mk(f, "t1", "r1", 1, 1,
                              "{\"type\":\"RUN_STARTED\",\"protocolVersion\":\"1.0\",\"threadId\":"
                              "\"t1\",\"runId\":\"r1\","
                              "\"parentRunId\":\"p0\"}"),
                           mk(f, "t1", "r1", 2, 1,
                              "{\"type\":\"RUN_FINISHED\",\"threadId\":\"t1\",\"runId\":\"r1\","
                              "\"outcome\":{\"type\":\"cancelled\"}}")};
    ab__seq_stage(f->s, it, 2);
    size_t np = 0;
    const ab_append_event_t *p = ab__seq_pending(f->s, &np);
    assert_int_equal(np, 2);
    assert_int_equal(p[0].status, AB_RUN_STATUS_ACTIVE);
    assert_int_equal(p[0].parent_run.len, 2);
    assert_memory_equal(p[0].parent_run.ptr, "p0", 2);
    assert_int_equal(p[0].epoch, 1);
    assert_int_equal(p[0].seq, 1);
    assert_ptr_equal(p[0].bytes, it[0].bytes);
    assert_int_equal(p[1].status, AB_RUN_STATUS_FINISHED);
    assert_int_equal(p[1].outcome, AB_OUTCOME_CANCELLED);
    assert_null(p[1].parent_run.ptr);
    ab__seq_commit(f->s, 41);
    expect_accepted(&it[0], 41);
    expect_accepted(&it[1], 42);
    assert_int_equal(ab__seq_cached_runs(f->s), 0); /* finished: dropped */
    ab__seq_pending(f->s, &np);
    assert_int_equal(np, 0);
    fx_free(f);
}

/* The threads a shared store's fenced append is given (ab__seq_fence_threads): one per staged
 * event whose checks read or change its thread's state, in stage order; content events none. */
static void test_fence_threads(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    ab_seq_item_t it[7] = {
        started(f, "t1", "r1", 1, 1),
        mk(f, "t1", "r1", 2, 1, MSG_START),
        mk(f, "t1", "r1", 3, 1, MSG_CONTENT),
        started(f, "t2", "r2", 1, 1),
        mk(f, "t2", "r2", 2, 1,
           "{\"type\":\"ACTIVITY_SNAPSHOT\",\"messageId\":\"a1\",\"activityType\":\"plan\","
           "\"content\":{\"step\":1}}"),
        mk(f, "t2", "r2", 3, 1,
           "{\"type\":\"ACTIVITY_DELTA\",\"messageId\":\"a1\",\"activityType\":\"plan\","
           "\"patch\":[{\"op\":\"replace\",\"path\":\"/step\",\"value\":2}]}"),
        mk(f, "t1", "r1", 4, 1, MSG_END),
    };
    ab__seq_stage(f->s, it, 7);
    size_t n = 0;
    bool nomem = true;
    const ab_str_t *th = ab__seq_fence_threads(f->s, &n, &nomem);
    assert_false(nomem);
    assert_int_equal(n, 4);
    const char *want[] = {"t1", "t2", "t2", "t2"};
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(th[i].len, 2);
        assert_memory_equal(th[i].ptr, want[i], 2);
    }
    ab__seq_commit(f->s, 1);
    for (int i = 0; i < 7; i++)
        expect_accepted(&it[i], (uint64_t)i + 1);
    /* a group of content events alone is fenced by nothing */
    ab_seq_item_t c =
        mk(f, "t1", "r1", 5, 1, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m2\"}");
    ab__seq_stage(f->s, &c, 1);
    assert_null(ab__seq_fence_threads(f->s, &n, &nomem));
    assert_int_equal(n, 0);
    ab__seq_commit(f->s, 8);
    expect_accepted(&c, 8);
    fx_free(f);
}

/* ab__seq_prefetch with a plugin that has heads_of: one call reads the heads of a job's
 * uncached runs (stored and new), staging then reads none, and the answers are those of the
 * per-run reads (a stored run continues at its next seq, a new one starts at 1). */
static void test_prefetch(void **state)
{
    (void)state;
    fx_t *f = fx_new_on(0, fp_plugin_heads_of(), NULL);
    ab_seq_item_t a = pub(f, started(f, "t1", "r1", 1, 1));
    expect_accepted(&a, 1);
    ab__seq_destroy(&f->s); /* a restarted broker: nothing cached */
    ab_seq_opts_t o = {0};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__seq_new(&f->s, f->plugin, f->dbp, &o, &err), AB_OK);
    unsigned heads = f->db.heads;
    ab_seq_item_t it[4] = {mk(f, "t1", "r1", 2, 1, MSG_START), mk(f, "t1", "r1", 3, 1, MSG_CONTENT),
                           started(f, "t2", "r2", 1, 1), mk(f, "t1", "r1", 2, 1, MSG_START)};
    ab__seq_prefetch(f->s, it, 4);
    assert_int_equal(f->db.heads_of, 1);
    assert_int_equal(ab__seq_cached_runs(f->s), 2);
    ab__seq_prefetch(f->s, it, 4); /* all cached now: no call */
    assert_int_equal(f->db.heads_of, 1);
    ab__seq_stage(f->s, it, 4);
    assert_int_equal(f->db.heads, heads); /* no head read while staging */
    ab__seq_commit(f->s, 2);
    expect_accepted(&it[0], 2);
    expect_accepted(&it[1], 3);
    expect_accepted(&it[2], 4);
    expect_dup(&it[3], 2);
    /* without heads_of: nothing read ahead, a head per run when staged */
    fx_t *g = fx_new(0);
    ab_seq_item_t b = started(g, "t3", "r3", 1, 1);
    ab__seq_prefetch(g->s, &b, 1);
    assert_int_equal(ab__seq_cached_runs(g->s), 0);
    fx_free(g);
    fx_free(f);
}

static void test_duplicate_committed(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    pub(f, started(f, "t1", "r1", 1, 1));
    pub(f, mk(f, "t1", "r1", 2, 1, MSG_START));
    ab_seq_item_t d = pub(f, started(f, "t1", "r1", 1, 1));
    expect_dup(&d, 1);
    ab_seq_item_t d2 = pub(f, mk(f, "t1", "r1", 2, 1, MSG_START));
    expect_dup(&d2, 2);
    assert_int_equal(f->db.nev, 2);
    /* the run goes on at 3 */
    ab_seq_item_t c = pub(f, mk(f, "t1", "r1", 3, 1, MSG_CONTENT));
    expect_accepted(&c, 3);
    fx_free(f);
}

static void test_duplicate_same_group(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    ab_seq_item_t it[4] = {started(f, "t1", "r1", 1, 1), mk(f, "t1", "r1", 2, 1, MSG_START),
                           mk(f, "t1", "r1", 2, 1, MSG_START), started(f, "t1", "r1", 1, 1)};
    assert_int_equal(group(f, it, 4), AB_OK);
    expect_accepted(&it[0], 1);
    expect_accepted(&it[1], 2);
    expect_dup(&it[2], 2);
    expect_dup(&it[3], 1);
    assert_int_equal(f->db.nev, 2);
    fx_free(f);
}

static void test_conflict(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    pub(f, started(f, "t1", "r1", 1, 1));
    /* committed copy differs */
    ab_seq_item_t c = pub(f, mk(f, "t1", "r1", 1, 1,
                                "{\"type\":\"RUN_STARTED\",\"protocolVersion\":\"1.0\","
                                "\"threadId\":\"t1\",\"runId\":\"r1\","
                                "\"parentRunId\":\"x\"}"));
    expect_rejected(&c, AB_CONFLICT, "seq");
    assert_non_null(strstr(c.err.message, "seq 1"));
    /* staged copy differs */
    ab_seq_item_t it[2] = {
        mk(f, "t1", "r1", 2, 1, MSG_START),
        mk(f, "t1", "r1", 2, 1, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m2\"}")};
    assert_int_equal(group(f, it, 2), AB_OK);
    expect_accepted(&it[0], 2);
    expect_rejected(&it[1], AB_CONFLICT, "seq");
    assert_non_null(strstr(it[1].err.message, "seq 2"));
    assert_int_equal(f->db.nev, 2);
    fx_free(f);
}

static void test_gap(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    pub(f, started(f, "t1", "r1", 1, 1));
    ab_seq_item_t g = pub(f, mk(f, "t1", "r1", 3, 1, MSG_START));
    expect_rejected(&g, AB_GAP, "seq");
    assert_int_equal(detail(&g, "expected_seq"), 2);
    /* a new run: the first seq is 1 */
    ab_seq_item_t n = pub(f, started(f, "t1", "r2", 2, 1));
    expect_rejected(&n, AB_GAP, "seq");
    assert_int_equal(detail(&n, "expected_seq"), 1);
    fx_free(f);
}

static void test_fenced_after_claim(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    pub(f, started(f, "t1", "r1", 1, 1));
    uint64_t epoch = 0, last = 0;
    ab_run_status_t st = AB_RUN_STATUS_UNKNOWN;
    ab_error_t err = AB_ERROR_INIT;
    ab_str_t t1 = {"t1", 2}, r1 = {"r1", 2};
    assert_int_equal(ab__seq_claim(f->s, t1, r1, &epoch, &last, &st, &err), AB_OK);
    assert_int_equal(epoch, 2);
    assert_int_equal(last, 1);
    assert_int_equal(st, AB_RUN_STATUS_ACTIVE);
    ab_seq_item_t old = pub(f, mk(f, "t1", "r1", 2, 1, MSG_START));
    expect_rejected(&old, AB_FENCED, "epoch");
    assert_int_equal(detail(&old, "epoch"), 2);
    assert_int_equal(detail(&old, "got"), 1);
    /* a stale writer re-sending old bytes is fenced too, not a duplicate */
    ab_seq_item_t resend = pub(f, started(f, "t1", "r1", 1, 1));
    expect_rejected(&resend, AB_FENCED, "epoch");
    ab_seq_item_t now = pub(f, mk(f, "t1", "r1", 2, 2, MSG_START));
    expect_accepted(&now, 2);
    fx_free(f);
}

static void test_fenced_never_granted(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    ab_seq_item_t a = pub(f, started(f, "t1", "r1", 1, 2));
    expect_rejected(&a, AB_FENCED, "epoch");
    assert_int_equal(detail(&a, "epoch"), 1); /* never claimed: current epoch 1 (implicit) */
    assert_non_null(strstr(a.err.message, "current epoch 1"));
    assert_int_equal(detail(&a, "got"), 2);
    pub(f, started(f, "t1", "r1", 1, 1));
    ab_seq_item_t b = pub(f, mk(f, "t1", "r1", 2, 5, MSG_START));
    expect_rejected(&b, AB_FENCED, "epoch");
    assert_int_equal(detail(&b, "epoch"), 1);
    assert_int_equal(detail(&b, "got"), 5);
    fx_free(f);
}

static void test_run_terminal(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    pub(f, started(f, "t1", "r1", 1, 1));
    pub(f, finished(f, "t1", "r1", 2, 1));
    assert_int_equal(ab__seq_cached_runs(f->s), 0);
    ab_seq_item_t a = pub(f, mk(f, "t1", "r1", 3, 1, MSG_START));
    expect_rejected(&a, AB_RUN_TERMINAL, NULL);
    /* the same inside one group, decided by the checker */
    ab_seq_item_t it[3] = {started(f, "t1", "r2", 1, 1), finished(f, "t1", "r2", 2, 1),
                           mk(f, "t1", "r2", 3, 1, MSG_START)};
    assert_int_equal(group(f, it, 3), AB_OK);
    expect_accepted(&it[1], 4);
    expect_rejected(&it[2], AB_RUN_TERMINAL, NULL);
    assert_int_equal(strncmp(it[2].err.field, "event/", 6), 0);
    fx_free(f);
}

static void test_late_run_error(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    pub(f, started(f, "t1", "r1", 1, 1));
    pub(f, finished(f, "t1", "r1", 2, 1));
    ab_seq_item_t e1 = pub(f, mk(f, "t1", "r1", 3, 1, RUN_ERR));
    expect_accepted(&e1, 3);
    assert_int_equal(f->db.runs[0].head.status, AB_RUN_STATUS_ERRORED);
    ab_seq_item_t e2 = pub(f, mk(f, "t1", "r1", 4, 1, RUN_ERR));
    expect_rejected(&e2, AB_RUN_TERMINAL, NULL);
    /* in one group */
    ab_seq_item_t it[4] = {started(f, "t1", "r2", 1, 1), finished(f, "t1", "r2", 2, 1),
                           mk(f, "t1", "r2", 3, 1, RUN_ERR), mk(f, "t1", "r2", 4, 1, RUN_ERR)};
    assert_int_equal(group(f, it, 4), AB_OK);
    expect_accepted(&it[2], 6);
    expect_rejected(&it[3], AB_RUN_TERMINAL, NULL);
    fx_free(f);
}

static void test_first_event_must_be_run_started(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    ab_seq_item_t a = pub(f, mk(f, "t1", "r1", 1, 1, MSG_START));
    expect_rejected(&a, AB_INVALID_EVENT, NULL);
    assert_int_equal(strncmp(a.err.field, "event/", 6), 0);
    assert_int_equal(f->db.nev, 0);
    ab_seq_item_t b = pub(f, started(f, "t1", "r1", 1, 1));
    expect_accepted(&b, 1);
    fx_free(f);
}

static void test_lifecycle_violation(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    pub(f, started(f, "t1", "r1", 1, 1));
    ab_seq_item_t a = pub(f, mk(f, "t1", "r1", 2, 1, MSG_CONTENT));
    expect_rejected(&a, AB_INVALID_EVENT, "event/messageId");
    /* the checker did not move: the same seq is free for a good event */
    ab_seq_item_t b = pub(f, mk(f, "t1", "r1", 2, 1, MSG_START));
    expect_accepted(&b, 2);
    fx_free(f);
}

static void test_boundary_id_mismatch(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    ab_seq_item_t a = pub(f, mk(f, "t1", "r1", 1, 1,
                                "{\"type\":\"RUN_STARTED\",\"protocolVersion\":\"1.0\","
                                "\"threadId\":\"other\",\"runId\":\"r1\"}"));
    expect_rejected(&a, AB_INVALID_EVENT, "event/threadId");
    ab_seq_item_t b = pub(f, mk(f, "t1", "r1", 1, 1,
                                "{\"type\":\"RUN_STARTED\",\"protocolVersion\":\"1.0\","
                                "\"threadId\":\"t1\",\"runId\":\"x\"}"));
    expect_rejected(&b, AB_INVALID_EVENT, "event/runId");
    fx_free(f);
}

/* ---- batches -------------------------------------------------------------- */

static void test_batch_two_runs(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    ab_seq_item_t it[6] = {
        started(f, "t1", "a", 1, 1),         started(f, "t1", "b", 1, 1),
        mk(f, "t1", "a", 2, 1, MSG_CONTENT), mk(f, "t1", "b", 2, 1, MSG_START),
        mk(f, "t1", "a", 2, 1, MSG_START),   mk(f, "t1", "b", 3, 1, MSG_CONTENT)};
    assert_int_equal(group(f, it, 6), AB_OK);
    expect_accepted(&it[0], 1);
    expect_accepted(&it[1], 2);
    expect_rejected(&it[2], AB_INVALID_EVENT, "event/messageId");
    expect_accepted(&it[3], 3);
    expect_rejected(&it[4], AB_INVALID_EVENT, "");
    assert_non_null(strstr(it[4].err.message, "earlier event of this run"));
    expect_accepted(&it[5], 4);
    /* the rejection lasts one call only */
    ab_seq_item_t next = pub(f, mk(f, "t1", "a", 2, 1, MSG_START));
    expect_accepted(&next, 5);
    fx_free(f);
}

static void test_prerejected_items(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    ab_seq_item_t it[4] = {started(f, "t1", "a", 1, 1), started(f, "t1", "a", 1, 1),
                           started(f, "t1", "b", 1, 1), started(f, "t1", "c", 1, 1)};
    it[0].status = AB_RESULT_REJECTED;
    ab_error_set(&it[0].err, AB_INVALID_EVENT, "/event/foo", "unknown field");
    it[3].status = AB_RESULT_REJECTED;
    it[3].ev = NULL; /* undecodable */
    ab_error_set(&it[3].err, AB_INVALID_ENVELOPE, "seq", "bad envelope");
    assert_int_equal(group(f, it, 4), AB_OK);
    expect_rejected(&it[0], AB_INVALID_EVENT, "/event/foo");
    assert_string_equal(it[0].err.message, "unknown field");
    expect_rejected(&it[1], AB_INVALID_EVENT, "");
    assert_non_null(strstr(it[1].err.message, "earlier event"));
    expect_accepted(&it[2], 1);
    expect_rejected(&it[3], AB_INVALID_ENVELOPE, "seq");
    assert_int_equal(f->db.nev, 1);
    fx_free(f);
}

/* ---- abort, eviction and rebuild ------------------------------------------ */

static void test_abort_reloads(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    pub(f, started(f, "t1", "r1", 1, 1));
    f->db.fail_append = 1;
    ab_seq_item_t it[3] = {mk(f, "t1", "r1", 2, 1, MSG_START), mk(f, "t1", "r1", 2, 1, MSG_START),
                           started(f, "t1", "r2", 1, 1)};
    assert_int_equal(group(f, it, 3), AB_UNAVAILABLE);
    assert_int_equal(it[0].status, AB_RESULT_ACCEPTED);
    assert_int_equal(it[1].status, AB_RESULT_DUPLICATE); /* of a staged event: no position */
    assert_int_equal(it[1].pos, 0);
    assert_int_equal(ab__seq_cached_runs(f->s), 0);
    unsigned reads = f->db.reads;
    /* same seqs again: the speculative state is gone */
    ab_seq_item_t again[2] = {mk(f, "t1", "r1", 2, 1, MSG_START), started(f, "t1", "r2", 1, 1)};
    assert_int_equal(group(f, again, 2), AB_OK);
    expect_accepted(&again[0], 2);
    expect_accepted(&again[1], 3);
    assert_true(f->db.reads > reads); /* r1 was rebuilt from the store */
    /* r1's message is open: content is fine */
    ab_seq_item_t c = pub(f, mk(f, "t1", "r1", 3, 1, MSG_CONTENT));
    expect_accepted(&c, 4);
    fx_free(f);
}

static void test_rebuild_after_eviction(void **state)
{
    (void)state;
    fx_t *f = fx_new(1);
    pub(f, started(f, "t1", "a", 1, 1));
    pub(f, mk(f, "t1", "a", 2, 1, MSG_START));
    pub(f, started(f, "t1", "b", 1, 1)); /* evicts a */
    assert_int_equal(ab__seq_cached_runs(f->s), 1);
    unsigned reads = f->db.reads;
    ab_seq_item_t again = pub(f, mk(f, "t1", "a", 3, 1, MSG_START));
    expect_rejected(&again, AB_INVALID_EVENT, NULL); /* m1 is still open */
    assert_int_equal(strncmp(again.err.field, "event/", 6), 0);
    assert_true(f->db.reads > reads);
    ab_seq_item_t end = pub(f, mk(f, "t1", "a", 3, 1, MSG_END));
    expect_accepted(&end, 4);
    assert_int_equal(ab__seq_cached_runs(f->s), 1);
    fx_free(f);
}

static void test_rebuild_many_pages(void **state)
{
    (void)state;
    fx_t *f = fx_new(1);
    pub(f, started(f, "t1", "a", 1, 1));
    pub(f, mk(f, "t1", "a", 2, 1, MSG_START));
    /* 300 content events: more than one read page (256 rows) */
    ab_seq_item_t it[100];
    for (uint64_t g = 0; g < 3; g++) {
        for (uint64_t k = 0; k < 100; k++)
            it[k] = mk(f, "t1", "a", 3 + g * 100 + k, 1, MSG_CONTENT);
        assert_int_equal(group(f, it, 100), AB_OK);
        expect_accepted(&it[99], 102 + g * 100);
    }
    pub(f, started(f, "t1", "b", 1, 1)); /* evicts a (302 events) */
    unsigned reads = f->db.reads;
    ab_seq_item_t dup = pub(f, mk(f, "t1", "a", 2, 1, MSG_START));
    expect_dup(&dup, 2);
    assert_true(f->db.reads >= reads + 2); /* two pages */
    ab_seq_item_t again = pub(f, mk(f, "t1", "a", 303, 1, MSG_START));
    expect_rejected(&again, AB_INVALID_EVENT, NULL);
    ab_seq_item_t end = pub(f, mk(f, "t1", "a", 303, 1, MSG_END));
    expect_accepted(&end, 304);
    fx_free(f);
}

/* ---- claim, cache bound, memory ------------------------------------------- */

static void test_claim(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    uint64_t epoch = 0, last = 9;
    ab_run_status_t st = AB_RUN_STATUS_ACTIVE;
    ab_error_t err = AB_ERROR_INIT;
    ab_str_t t1 = {"t1", 2}, r1 = {"r1", 2};
    /* a never-seen run's first claim is epoch 2: 1 is the implicit epoch of a writer that
     * never claimed, which the claim must fence (PROTOCOL.md 7.3) */
    assert_int_equal(ab__seq_claim(f->s, t1, r1, &epoch, &last, &st, &err), AB_OK);
    assert_int_equal(epoch, 2);
    assert_int_equal(last, 0);
    assert_int_equal(st, AB_RUN_STATUS_UNKNOWN);
    ab_seq_item_t implicit = pub(f, started(f, "t1", "r1", 1, 1));
    expect_rejected(&implicit, AB_FENCED, "epoch");
    assert_int_equal(detail(&implicit, "epoch"), 2);
    ab_seq_item_t a = pub(f, started(f, "t1", "r1", 1, 2));
    expect_accepted(&a, 1);
    assert_int_equal(ab__seq_claim(f->s, t1, r1, &epoch, &last, &st, &err), AB_OK);
    assert_int_equal(epoch, 3);
    assert_int_equal(last, 1);
    assert_int_equal(st, AB_RUN_STATUS_ACTIVE);
    /* finished runs are not cached: status from the store */
    ab_seq_item_t b = pub(f, mk(f, "t1", "r1", 2, 3, MSG_START));
    expect_accepted(&b, 2);
    pub(f, mk(f, "t1", "r1", 3, 3, MSG_END));
    expect_accepted(&b, 2);
    ab_seq_item_t fin = pub(f, finished(f, "t1", "r1", 4, 3));
    expect_accepted(&fin, 4);
    assert_int_equal(ab__seq_cached_runs(f->s), 0);
    assert_int_equal(ab__seq_claim(f->s, t1, r1, &epoch, &last, &st, &err), AB_OK);
    assert_int_equal(epoch, 4);
    assert_int_equal(last, 4);
    assert_int_equal(st, AB_RUN_STATUS_FINISHED);
    /* claiming while a group is staged is refused */
    ab_seq_item_t c = started(f, "t1", "r9", 1, 1);
    ab__seq_stage(f->s, &c, 1);
    ab_error_clear(&err);
    assert_int_not_equal(ab__seq_claim(f->s, t1, r1, &epoch, &last, &st, &err), AB_OK);
    ab__seq_abort(f->s);
    fx_free(f);
}

/* A plugin of the old contract (a new run claimed at epoch 1) is claimed twice: the epoch a
 * claim answers is never the implicit 1, so a writer that never claimed is fenced. */
static void test_claim_old_plugin(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    f->db.claim_v1 = true;
    uint64_t epoch = 0, last = 9;
    ab_run_status_t st = AB_RUN_STATUS_ACTIVE;
    ab_error_t err = AB_ERROR_INIT;
    ab_str_t t1 = {"t1", 2}, r1 = {"r1", 2};
    unsigned claims = f->db.claims;
    assert_int_equal(ab__seq_claim(f->s, t1, r1, &epoch, &last, &st, &err), AB_OK);
    assert_int_equal(epoch, 2);
    assert_int_equal(f->db.claims, claims + 2);
    ab_seq_item_t implicit = pub(f, started(f, "t1", "r1", 1, 1));
    expect_rejected(&implicit, AB_FENCED, "epoch");
    claims = f->db.claims; /* a run past epoch 1: one claim */
    assert_int_equal(ab__seq_claim(f->s, t1, r1, &epoch, &last, &st, &err), AB_OK);
    assert_int_equal(epoch, 3);
    assert_int_equal(f->db.claims, claims + 1);
    fx_free(f);
}

/*
 * The cache is bounded by bytes as well as by count: with room for 1000 runs but only
 * about three runs' worth of bytes, the cached runs' memory never passes the byte bound
 * after a commit, and an evicted run, reloaded from the store, goes on at its next seq.
 */
static void test_cache_byte_bound(void **state)
{
    (void)state;
    /* one run's memory: what a second cached run adds (the group arrays exist by then) */
    fx_t *probe = fx_new(1000);
    ab_seq_item_t a = pub(probe, started(probe, "t1", "pa", 1, 1));
    expect_accepted(&a, 1);
    size_t m1 = ab__seq_memory(probe->s);
    ab_seq_item_t b = pub(probe, started(probe, "t1", "pb", 1, 1));
    expect_accepted(&b, 2);
    size_t per_run = ab__seq_memory(probe->s) - m1;
    fx_free(probe);
    assert_true(per_run > 0);
    size_t bound = 3 * per_run + per_run / 2; /* room for three runs, not four */

    fx_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->plugin = fp_plugin();
    f->dbp = &f->db;
    ab_seq_opts_t o = {.max_runs = 1000, .max_run_bytes = bound};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__seq_new(&f->s, f->plugin, f->dbp, &o, &err), AB_OK);
    static const char *const runs[] = {"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"};
    for (int i = 0; i < 8; i++) {
        ab_seq_item_t it = pub(f, started(f, "t1", runs[i], 1, 1));
        expect_accepted(&it, (uint64_t)i + 1);
        assert_int_equal(ab__seq_cached_runs(f->s), i < 3 ? i + 1 : 3);
    }
    /* r0 was evicted long ago: its next event is checked against the store's head */
    ab_seq_item_t next = pub(f, mk(f, "t1", "r0", 2, 1,
                                   "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\","
                                   "\"role\":\"assistant\"}"));
    expect_accepted(&next, 9);
    ab_seq_item_t gap = pub(f, mk(f, "t1", "r1", 3, 1,
                                  "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\","
                                  "\"role\":\"assistant\"}"));
    assert_int_equal(gap.status, AB_RESULT_REJECTED);
    assert_int_equal(gap.err.code, AB_GAP);
    fx_free(f);
}

static void test_cache_bound_and_memory(void **state)
{
    (void)state;
    fx_t *f = fx_new(4);
    size_t m0 = ab__seq_memory(f->s);
    assert_true(m0 > 0);
    char run[16];
    for (int i = 0; i < 20; i++) {
        snprintf(run, sizeof(run), "r%d", i);
        char *id = strdup(run); /* ids must outlive the item; freed below */
        ab_seq_item_t a = pub(f, started(f, "t1", id, 1, 1));
        expect_accepted(&a, (uint64_t)i + 1);
        assert_true(ab__seq_cached_runs(f->s) <= 4);
        free(id);
    }
    assert_int_equal(ab__seq_cached_runs(f->s), 4);
    size_t m4 = ab__seq_memory(f->s);
    assert_true(m4 > m0);
    /* a batch touching more runs than max_runs keeps them all until commit */
    ab_seq_item_t it[6] = {started(f, "t2", "a", 1, 1), started(f, "t2", "b", 1, 1),
                           started(f, "t2", "c", 1, 1), started(f, "t2", "d", 1, 1),
                           started(f, "t2", "e", 1, 1), started(f, "t2", "f", 1, 1)};
    ab__seq_stage(f->s, it, 6);
    assert_int_equal(ab__seq_cached_runs(f->s), 6);
    size_t np = 0;
    ab__seq_pending(f->s, &np);
    assert_int_equal(np, 6);
    ab__seq_commit(f->s, 100);
    expect_accepted(&it[5], 105);
    assert_int_equal(ab__seq_cached_runs(f->s), 4);
    fx_free(f);
}

static void test_memory_grows_with_open_items(void **state)
{
    (void)state;
    fx_t *f = fx_new(0);
    pub(f, started(f, "t1", "r1", 1, 1));
    size_t m1 = ab__seq_memory(f->s);
    pub(f, mk(f, "t1", "r1", 2, 1, MSG_START));
    size_t m2 = ab__seq_memory(f->s);
    assert_true(m2 > m1);
    pub(f, mk(f, "t1", "r1", 3, 1, MSG_END));
    ab_seq_item_t fin = pub(f, finished(f, "t1", "r1", 4, 1));
    expect_accepted(&fin, 4);
    assert_int_equal(ab__seq_cached_runs(f->s), 0);
    assert_true(ab__seq_memory(f->s) < m1);
    fx_free(f);
}

/* ---- the same rules on the real SQLite plugin ----------------------------- */

static void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char path[512];
    for (struct dirent *e = readdir(d); e; e = readdir(d)) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* ---- a group over more runs than the lookups look ahead ------------------- */

#define MANY_RUNS  40
#define MANY_ITEMS 201 /* 200 events of the 40 runs in no order, one undecodable item */

typedef struct many {
    char run[MANY_RUNS][8];
    char thread[3][4];
    uint64_t next[MANY_RUNS]; /**< the seq each run's next event takes */
} many_t;

/*
 * One group over 40 runs whose events come in no order (run 7 k mod 40 at step k, so a
 * run's events are 40 items apart, beyond AB__SEQ_AHEAD), with a gap in run 3 at item 110
 * and an undecodable item at 50: every lookup must find its own run, through the hashes
 * the stage loop computes ahead (seq_cache.c invariant 6) and, on the SQLite plugin, the
 * store's (store_cache.c invariant 5).
 */
/* Counts a run's rows, each of which must carry the seq after the one before. */
static int seq_row(void *ud, const ab_row_t *row)
{
    uint64_t *n = ud;
    assert_int_equal(row->seq, *n + 1);
    (*n)++;
    return 0;
}

static void many_runs(fx_t *f)
{
    static many_t m;
    memset(&m, 0, sizeof m);
    for (int t = 0; t < 3; t++)
        snprintf(m.thread[t], sizeof m.thread[t], "t%d", t);
    ab_seq_item_t start[MANY_RUNS];
    for (int r = 0; r < MANY_RUNS; r++) {
        snprintf(m.run[r], sizeof m.run[r], "r%02d", r);
        start[r] = started(f, m.thread[r % 3], m.run[r], 1, 1);
        m.next[r] = 2;
    }
    assert_int_equal(group(f, start, MANY_RUNS), AB_OK);
    for (int r = 0; r < MANY_RUNS; r++)
        expect_accepted(&start[r], (uint64_t)r + 1);
    ab_seq_item_t it[MANY_ITEMS];
    int run_of[MANY_ITEMS];
    for (int i = 0, k = 0; i < MANY_ITEMS; i++) {
        if (i == 50) {
            it[i] = started(f, "t0", "r00", 1, 1);
            it[i].status = AB_RESULT_REJECTED;
            it[i].ev = NULL; /* undecodable: no run */
            ab_error_set(&it[i].err, AB_INVALID_ENVELOPE, "seq", "bad envelope");
            run_of[i] = -1;
            continue;
        }
        int r = (7 * k++) % MANY_RUNS;
        uint64_t seq = m.next[r]++;
        if (i == 110) {
            assert_int_equal(r, 3);
            seq++; /* a gap: this and run 3's later events of the group are refused */
        }
        it[i] = mk(f, m.thread[r % 3], m.run[r], seq, 1, seq == 2 ? MSG_START : MSG_CONTENT);
        run_of[i] = r;
    }
    assert_int_equal(group(f, it, MANY_ITEMS), AB_OK);
    uint64_t pos = MANY_RUNS, last[MANY_RUNS];
    for (int r = 0; r < MANY_RUNS; r++)
        last[r] = 1;
    for (int i = 0; i < MANY_ITEMS; i++) {
        int r = run_of[i];
        if (r < 0) {
            expect_rejected(&it[i], AB_INVALID_ENVELOPE, "seq");
        } else if (r == 3 && i >= 110) {
            assert_int_equal(it[i].status, AB_RESULT_REJECTED);
            assert_int_equal(it[i].err.code, AB_GAP); /* the later ones: as the first */
            if (i > 110)
                assert_non_null(strstr(it[i].err.message, "earlier event of this run"));
        } else {
            expect_accepted(&it[i], ++pos);
            last[r] = it[i].ev->seq;
        }
    }
    for (int r = 0; r < MANY_RUNS; r++) { /* every run's state is its own */
        ab_run_head_t h;
        ab_error_t err = AB_ERROR_INIT;
        ab_str_t t = {m.thread[r % 3], strlen(m.thread[r % 3])}, run = {m.run[r], strlen(m.run[r])};
        assert_int_equal(f->plugin->head(f->dbp, t, run, &h, &err), AB_OK);
        assert_int_equal(h.last_seq, last[r]);
        ab_read_t req = {.scope = AB_REPLAY_RUN, .thread = t, .run = run, .limit = UINT32_MAX};
        uint64_t rows = 0;
        uint32_t n = 0;
        assert_int_equal(f->plugin->read(f->dbp, &req, seq_row, &rows, &n, &err), AB_OK);
        assert_int_equal(rows, last[r]); /* stored whole: 1 .. last, in order */
        ab_seq_item_t next = pub(f, mk(f, m.thread[r % 3], m.run[r], last[r] + 1, 1, MSG_CONTENT));
        expect_accepted(&next, ++pos);
    }
}

static void test_group_over_many_runs(void **state)
{
    (void)state;
    fx_t *f = fx_new(8); /* fewer than the group's runs: none of them is evicted while staged */
    many_runs(f);
    fx_free(f);
    char dir[] = "/tmp/ab-seq-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const ab_plugin_t *pl = ab__plugin_sqlite();
    ab_plugin_open_opts_t oo = {.data_dir = dir, .durability = AB_DURABILITY_PROCESS};
    ab_plugin_db_t *db = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (pl->open(&oo, &db, &err) != AB_OK)
        fail_msg("sqlite open: %s", err.message);
    f = fx_new_on(0, pl, db);
    many_runs(f);
    fx_free(f);
    pl->close(db);
    rm_dir(dir);
}

static void test_sqlite_plugin(void **state)
{
    (void)state;
    char dir[] = "/tmp/ab-seq-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const ab_plugin_t *pl = ab__plugin_sqlite();
    assert_non_null(pl);
    ab_plugin_open_opts_t oo = {.data_dir = dir, .durability = AB_DURABILITY_PROCESS};
    ab_plugin_db_t *db = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (pl->open(&oo, &db, &err) != AB_OK)
        fail_msg("sqlite open: %s", err.message);
    fx_t *f = fx_new_on(1, pl, db);
    ab_seq_item_t it[3] = {started(f, "t1", "a", 1, 1), mk(f, "t1", "a", 2, 1, MSG_START),
                           mk(f, "t1", "a", 2, 1, MSG_START)};
    assert_int_equal(group(f, it, 3), AB_OK);
    expect_accepted(&it[1], 2);
    expect_dup(&it[2], 2);
    ab_seq_item_t d = pub(f, started(f, "t1", "a", 1, 1));
    expect_dup(&d, 1);
    ab_seq_item_t g = pub(f, mk(f, "t1", "a", 4, 1, MSG_END));
    expect_rejected(&g, AB_GAP, "seq");
    assert_int_equal(detail(&g, "expected_seq"), 3);
    pub(f, started(f, "t1", "b", 1, 1)); /* evicts a */
    ab_seq_item_t again = pub(f, mk(f, "t1", "a", 3, 1, MSG_START));
    expect_rejected(&again, AB_INVALID_EVENT, NULL); /* rebuilt: m1 still open */
    uint64_t epoch = 0, last = 0;
    ab_run_status_t st = AB_RUN_STATUS_UNKNOWN;
    ab_str_t t1 = {"t1", 2}, a = {"a", 1};
    assert_int_equal(ab__seq_claim(f->s, t1, a, &epoch, &last, &st, &err), AB_OK);
    assert_int_equal(epoch, 2);
    assert_int_equal(last, 2);
    assert_int_equal(st, AB_RUN_STATUS_ACTIVE);
    ab_seq_item_t old = pub(f, mk(f, "t1", "a", 3, 1, MSG_END));
    expect_rejected(&old, AB_FENCED, "epoch");
    ab_seq_item_t end = pub(f, mk(f, "t1", "a", 3, 2, MSG_END));
    expect_accepted(&end, 4);
    fx_free(f);
    pl->close(db);
    rm_dir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_next_seq_accepted),
        cmocka_unit_test(test_cache_byte_bound),
        cmocka_unit_test(test_pending_fields),
        cmocka_unit_test(test_fence_threads),
        cmocka_unit_test(test_prefetch),
        cmocka_unit_test(test_duplicate_committed),
        cmocka_unit_test(test_duplicate_same_group),
        cmocka_unit_test(test_conflict),
        cmocka_unit_test(test_gap),
        cmocka_unit_test(test_fenced_after_claim),
        cmocka_unit_test(test_fenced_never_granted),
        cmocka_unit_test(test_run_terminal),
        cmocka_unit_test(test_late_run_error),
        cmocka_unit_test(test_first_event_must_be_run_started),
        cmocka_unit_test(test_lifecycle_violation),
        cmocka_unit_test(test_boundary_id_mismatch),
        cmocka_unit_test(test_batch_two_runs),
        cmocka_unit_test(test_prerejected_items),
        cmocka_unit_test(test_abort_reloads),
        cmocka_unit_test(test_rebuild_after_eviction),
        cmocka_unit_test(test_rebuild_many_pages),
        cmocka_unit_test(test_claim),
        cmocka_unit_test(test_claim_old_plugin),
        cmocka_unit_test(test_cache_bound_and_memory),
        cmocka_unit_test(test_memory_grows_with_open_items),
        cmocka_unit_test(test_sqlite_plugin),
        cmocka_unit_test(test_group_over_many_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

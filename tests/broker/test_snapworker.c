/*
 * test_snapworker.c - the snapshot worker's results (broker/snapshot_worker.c
 * invariants 7 and 8), on a real SQLite store:
 *  - the documents waiting to be collected stay within AB_SNAP_PENDING_BYTES
 *    plus one document: past it the worker computes nothing more, with
 *    requests still queued, until a collect makes room; a collect takes
 *    documents up to its budget (at least one), oldest first, and the rest
 *    come with later ones, each thread's once;
 *  - a thread found too large for --snapshot-memory is reported so even
 *    while an earlier document of it waits to be collected (before, the
 *    report was dropped and the writer kept asking).
 */
#include "append_fixture.h"
#include "loader.h"
#include "snap_internal.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BIG     (900u << 10) /* bytes of text in each thread's one large event (< 1 MiB) */
#define THREADS 100          /* 100 documents of about 0.9 MiB: past the 64 MiB bound */

typedef struct fx {
    char dir[64];
    ab_broker_config_t cfg;
    ab__shared_t b;
    ab_plugin_db_t *wdb;
    tu_ctx_t tu;
    uint64_t pos;
} fx_t;

/* Commit @p body as event @p seq of run "r" of @p thread. */
static void commit(fx_t *x, const char *thread, uint64_t seq, const char *body)
{
    ab_buf_t env = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    ab_append_event_t a = tb_append_of(&x->tu, &env, thread, "r", seq, body);
    uint64_t epoch = 0, last = 0, first = 0;
    if (seq == 1)
        assert_int_equal(x->b.plugin->claim(x->wdb, a.thread, a.run, &epoch, &last, &err), AB_OK);
    if (x->b.plugin->append_batch(x->wdb, &a, 1, 0, &first, &err) != AB_OK)
        fail_msg("append: %s", err.message);
    x->pos = first;
    ab_buf_free(&env);
    tu_ctx_free(&x->tu);
    tu_ctx_init(&x->tu);
}

/* Thread @p thread: a run whose second event carries BIG bytes of text; ended or not. */
static void big_thread(fx_t *x, const char *thread, bool ended)
{
    static char body[BIG + 256];
    snprintf(body, 256, "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"r\"}", thread);
    commit(x, thread, 1, body);
    int k = snprintf(body, 256, "{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":{\"text\":\"");
    memset(body + k, 'x', BIG);
    strcpy(body + k + BIG, "\"}}");
    commit(x, thread, 2, body);
    if (ended) {
        snprintf(body, 256, "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"r\"}",
                 thread);
        commit(x, thread, 3, body);
    }
}

static int setup(void **state)
{
    fx_t *x = calloc(1, sizeof(*x));
    assert_non_null(x);
    snprintf(x->dir, sizeof x->dir, "/tmp/ab-snapworker-XXXXXX");
    assert_non_null(mkdtemp(x->dir));
    ab_broker_config_defaults(&x->cfg);
    snprintf(x->cfg.data_dir, sizeof x->cfg.data_dir, "%s", x->dir);
    x->cfg.durability = AB_DURABILITY_PROCESS;
    x->b.cfg = &x->cfg;
    x->b.plugin = ab__plugin_sqlite();
    x->b.snaps = ab__snapcache_new();
    assert_non_null(x->b.snaps);
    ab_plugin_open_opts_t o = {.data_dir = x->dir, .durability = AB_DURABILITY_PROCESS};
    ab_error_t err = AB_ERROR_INIT;
    if (x->b.plugin->open(&o, &x->wdb, &err) != AB_OK)
        fail_msg("open: %s", err.message);
    tu_ctx_init(&x->tu);
    *state = x;
    return 0;
}

static int teardown(void **state)
{
    fx_t *x = *state;
    x->b.plugin->close(x->wdb);
    ab__snapcache_destroy(&x->b.snaps);
    tu_ctx_free(&x->tu);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", x->dir);
    assert_int_equal(system(cmd), 0);
    free(x);
    return 0;
}

/* ---- what a collect hands on ---- */

typedef struct got {
    int n, large;
    size_t bytes, max_doc;
    bool seen[THREADS];
} got_t;

static void on_doc(void *ud, ab_str_t thread, uint64_t pos, ab_buf_t *doc, size_t size, bool large)
{
    got_t *g = ud;
    (void)pos;
    (void)size;
    g->n++;
    g->large += large;
    g->bytes += doc->len;
    if (doc->len > g->max_doc)
        g->max_doc = doc->len;
    int i = -1;
    if (thread.len > 2 && sscanf(thread.ptr, "t-%d", &i) == 1 && i >= 0 && i < THREADS) {
        assert_false(g->seen[i]); /* each thread's document once */
        g->seen[i] = true;
    }
}

/* Until the worker computes nothing (or 60 s); its pending bytes. */
static size_t settle(ab_snapworker_t *w)
{
    bool waiting = false;
    size_t bytes = 0;
    for (int i = 0; i < 60000 && !waiting; i++) {
        bytes = ab__snapworker_pending(w, &waiting);
        if (!waiting) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    assert_true(waiting);
    return bytes;
}

static void test_results_bounded(void **state)
{
    fx_t *x = *state;
    char t[32];
    for (int i = 0; i < THREADS; i++) {
        snprintf(t, sizeof t, "t-%03d", i);
        big_thread(x, t, true);
    }
    atomic_store(&x->b.head_pos, x->pos);
    ab_snapworker_t *w = ab__snapworker_start(&x->b);
    assert_non_null(w);
    for (int i = 0; i < THREADS; i++) {
        snprintf(t, sizeof t, "t-%03d", i);
        ab__snapworker_request(w, (ab_str_t){t, strlen(t)}, true, NULL);
    }
    /* nobody collects: the worker stops at the bound with requests left */
    size_t pending = settle(w);
    assert_true(pending >= AB_SNAP_PENDING_BYTES);
    assert_true(pending < AB_SNAP_PENDING_BYTES + 2 * BIG + (1u << 20)); /* the bound + one */
    assert_true(ab__snapworker_busy(w));
    got_t g;
    memset(&g, 0, sizeof g);
    /* a budget of 8 MiB takes about eight documents, oldest first, and frees room */
    assert_true(ab__snapworker_collect(w, 8u << 20, on_doc, &g) >= 1);
    assert_true(g.n >= 1 && g.bytes <= (8u << 20) + g.max_doc);
    assert_true(g.seen[0]); /* the oldest */
    int first = g.n;
    /* the rest, collected as they come: every thread's document once */
    for (int k = 0; k < 1000 && g.n < THREADS; k++) {
        settle(w);
        ab__snapworker_collect(w, AB_SNAP_PENDING_BYTES, on_doc, &g);
    }
    assert_int_equal(g.n, THREADS);
    assert_true(first < THREADS);
    assert_int_equal(g.large, 0);
    ab__snapworker_stop(&w, on_doc, &g);
    assert_int_equal(g.n, THREADS);
}

static void test_too_large_kept_with_a_waiting_document(void **state)
{
    fx_t *x = *state;
    x->cfg.snapshot_memory = 1; /* MiB: the open run's BIG event is over it */
    big_thread(x, "t-big", false);
    atomic_store(&x->b.head_pos, x->pos);
    ab_snapworker_t *w = ab__snapworker_start(&x->b);
    assert_non_null(w);
    ab_str_t t = {"t-big", 5};
    ab__snapworker_request(w, t, true, NULL); /* a run end: no cap, a document */
    settle(w);
    commit(x, "t-big", 3, "{\"type\":\"CUSTOM\",\"name\":\"n\",\"value\":1}");
    atomic_store(&x->b.head_pos, x->pos);
    ab__snapworker_request(w, t, false, NULL); /* every-N: its fold is over --snapshot-memory */
    settle(w);
    got_t g;
    memset(&g, 0, sizeof g);
    assert_int_equal(ab__snapworker_collect(w, AB_SNAP_PENDING_BYTES, on_doc, &g), 1);
    assert_int_equal(g.large, 1); /* reported, with */
    assert_true(g.bytes > BIG);   /* the run end's document, still to be stored */
    ab__snapworker_stop(&w, on_doc, &g);
    assert_int_equal(g.n, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_results_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_too_large_kept_with_a_waiting_document, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_snapfeed.c - committed events handed to the snapshot worker in
 * memory (broker/snapfeed.c) and folded from there (snapshot_cmd.c
 * invariant 6):
 *  - a feed gives back every record as added, across blocks and with a
 *    record larger than a block; it refuses a position not above its last;
 *  - the bytes of all feeds stay within AB__SNAPFEED_BYTES: the add that
 *    does not fit frees its feed, and the counter returns to 0;
 *  - the scheduler's map frees the feed of a thread it evicts;
 *  - ab__snapshot_current() on a fake store gives the same document with
 *    feeds as without, and reads the store only where no feed holds the
 *    events: a whole feed, segments with a gap between them, a feed that
 *    starts after the builder, folds in chunks, and a builder dropped half
 *    way (as an eviction does) that starts again from nothing.
 */
#include "agentbus/snapshot.h"
#include "snap_internal.h"
#include "snapcount.h"
#include "testutil.h"

#include "append_fixture.h"
#include "fake_plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREAD "t-fed"
#define OTHER  "t-other"

/* ---- the feed itself ---- */

static void add_ok(ab__snapfeed_t **f, _Atomic size_t *acct, uint64_t cover, uint64_t pos,
                   const char *run, uint64_t seq, const uint8_t *bytes, size_t len)
{
    assert_true(
        ab__snapfeed_add(f, acct, cover, pos, (ab_str_t){run, strlen(run)}, seq, bytes, len));
}

static void test_records_round_trip(void **state)
{
    (void)state;
    _Atomic size_t acct = 0;
    ab__snapfeed_t *f = NULL;
    static uint8_t big[AB__SNAPFEED_BLOCK + 100]; /* a block of its own */
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 7);
    uint8_t small[300];
    memset(small, 'x', sizeof(small));
    /* 1,000 records of 300 bytes span several blocks; the big one and an empty one among them */
    for (uint64_t i = 1; i <= 1000; i++) {
        char run[16];
        snprintf(run, sizeof(run), "r%llu", (unsigned long long)(i % 7));
        if (i == 500)
            add_ok(&f, &acct, 40, 40 + 2 * i, run, i, big, sizeof(big));
        else if (i == 600)
            add_ok(&f, &acct, 40, 40 + 2 * i, run, i, NULL, 0);
        else
            add_ok(&f, &acct, 40, 40 + 2 * i, run, i, small, 1 + i % 299);
    }
    assert_int_equal(f->cover, 40);
    assert_int_equal(f->last, 2040);
    assert_int_equal(f->n, 1000);
    assert_int_equal(atomic_load(&acct), f->bytes);
    assert_true(f->bytes > sizeof(big) + 3 * AB__SNAPFEED_BLOCK);
    ab__feedcur_t c = {0};
    ab__snaprec_t r;
    for (uint64_t i = 1; i <= 1000; i++) {
        assert_true(ab__snapfeed_next(f, &c, &r));
        char run[16];
        snprintf(run, sizeof(run), "r%llu", (unsigned long long)(i % 7));
        assert_int_equal(r.pos, 40 + 2 * i);
        assert_int_equal(r.seq, i);
        assert_int_equal(r.run.len, strlen(run));
        assert_memory_equal(r.run.ptr, run, r.run.len);
        size_t want = i == 500 ? sizeof(big) : i == 600 ? 0 : 1 + i % 299;
        assert_int_equal(r.len, want);
        if (i == 500)
            assert_memory_equal(r.bytes, big, sizeof(big));
        else if (want > 0)
            assert_memory_equal(r.bytes, small, want);
    }
    assert_false(ab__snapfeed_next(f, &c, &r));
    assert_false(ab__snapfeed_next(f, &c, &r)); /* stays at the end */
    /* a position not above the last ends the feed */
    assert_false(ab__snapfeed_add(&f, &acct, 0, 2040, (ab_str_t){"r", 1}, 1, small, 1));
    assert_null(f);
    assert_int_equal(atomic_load(&acct), 0);
    ab__snapfeed_free(&f); /* NULL-safe */
}

static void test_bound_of_all_feeds(void **state)
{
    (void)state;
    _Atomic size_t acct = 0;
    static uint8_t ev[8192];
    memset(ev, 'e', sizeof(ev));
    ab__snapfeed_t *a = NULL, *b = NULL;
    uint64_t pos = 0;
    /* a takes three quarters of the bound */
    while (atomic_load(&acct) < AB__SNAPFEED_BYTES / 4 * 3) {
        pos++;
        add_ok(&a, &acct, 0, pos, "ra", pos, ev, sizeof(ev));
    }
    size_t held_a = a->bytes;
    /* b grows until the bound refuses it: b is freed, a is untouched */
    bool in = true;
    uint64_t n = 0;
    while (in) {
        pos++;
        in = ab__snapfeed_add(&b, &acct, 0, pos, (ab_str_t){"rb", 2}, pos, ev, sizeof(ev));
        assert_true(atomic_load(&acct) <= AB__SNAPFEED_BYTES);
        n += in;
    }
    assert_true(n > 0);
    assert_null(b);
    assert_non_null(a);
    assert_int_equal(atomic_load(&acct), held_a);
    /* a chained segment is freed with its head */
    ab__snapfeed_t *c = NULL;
    add_ok(&c, &acct, pos, pos + 1, "rc", 1, ev, 10);
    a->next = c;
    ab__snapfeed_free(&a);
    assert_int_equal(atomic_load(&acct), 0);
    /* room again */
    add_ok(&b, &acct, 0, 1, "rb", 1, ev, sizeof(ev));
    ab__snapfeed_free(&b);
    assert_int_equal(atomic_load(&acct), 0);
}

static void test_evicted_thread_frees_its_feed(void **state)
{
    (void)state;
    _Atomic size_t acct = 0;
    ab__snapcounts_t m = {0};
    uint8_t ev[64] = {0};
    char id[32];
    /* twice as many threads as the map holds, each with a feed: the evictions free theirs */
    for (uint64_t i = 0; i < 2 * AB__SNAPCOUNT_THREADS; i++) {
        int k = snprintf(id, sizeof(id), "thread-%llu", (unsigned long long)i);
        ab__snapcount_t *c = ab__snapcount_slot(&m, (ab_str_t){id, (size_t)k});
        assert_non_null(c);
        assert_null(c->feed);
        add_ok(&c->feed, &acct, 0, i + 1, "r", 1, ev, sizeof(ev));
    }
    assert_int_equal(m.n, AB__SNAPCOUNT_THREADS);
    size_t held = 0;
    for (size_t i = 0; i < AB__SNAPCOUNT_SLOTS; i++)
        if (m.hash[i] != 0)
            held += m.slot[i].feed->bytes;
    assert_int_equal(atomic_load(&acct), held);
    ab__snapcount_free(&m);
    assert_int_equal(atomic_load(&acct), 0);
}

/* ---- folding from feeds ---- */

typedef struct fold_fx {
    ab_broker_config_t cfg;
    ab__shared_t b;
    ab_plugin_db_t db;
    tu_ctx_t tu;
    uint64_t thread_events; /* THREAD's events in the store */
    ab_buf_t want;          /* THREAD's document, folded from the store alone */
    uint64_t want_pos;
} fold_fx_t;

/* The JSON body of event @p seq of a run of @p n events (0: never ends). */
static void body_of(char *buf, size_t size, const char *thread, const char *run, uint64_t seq,
                    uint64_t n)
{
    if (seq == 1)
        snprintf(buf, size, "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\"}",
                 thread, run);
    else if (seq == 2)
        snprintf(buf, size, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m-%s\"}", run);
    else if (n > 0 && seq == n - 1)
        snprintf(buf, size, "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m-%s\"}", run);
    else if (n > 0 && seq == n)
        snprintf(buf, size, "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\"}",
                 thread, run);
    else
        snprintf(buf, size,
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-%s\",\"delta\":\"%llu;\"}",
                 run, (unsigned long long)seq);
}

/* Commit event @p seq of @p run (of @p n events) of @p thread to the fake store. */
static void commit(fold_fx_t *x, const char *thread, const char *run, uint64_t seq, uint64_t n)
{
    char body[256];
    body_of(body, sizeof(body), thread, run, seq, n);
    ab_buf_t env = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    ab_append_event_t a = tb_append_of(&x->tu, &env, thread, run, seq, body);
    uint64_t first = 0;
    assert_int_equal(fp_append_batch(&x->db, &a, 1, 0, &first, &err), AB_OK);
    x->thread_events += strcmp(thread, THREAD) == 0;
    ab_buf_free(&env);
}

/* Fold THREAD with @p feed and a budget of @p chunk events a call (0 = all), putting the entry
 * back between calls; @p drop_at: drop the entry once after this many calls (an eviction).
 * Its document goes to @p out. */
static void fold(fold_fx_t *x, ab__feedread_t *feed, uint64_t chunk, int drop_at, ab_buf_t *out,
                 uint64_t *pos)
{
    ab_str_t t = {THREAD, strlen(THREAD)};
    ab_snapent_t *ent = NULL;
    ab_error_t err = AB_ERROR_INIT;
    for (int call = 1;; call++) {
        uint64_t folded = 0;
        ab_status_t st =
            ab__snapshot_current(&x->b, &x->db, t, chunk, 0, feed, &ent, &folded, &err);
        if (st != AB_OK)
            fail_msg("fold: %s", err.message);
        if (chunk == 0 || folded < chunk)
            break;
        if (call == drop_at) {
            ab__snapcache_discard(x->b.snaps, ent);
            ent = NULL;
        }
    }
    assert_int_equal(ab_snapshot_builder_msgpack(ent->sb, UINT32_MAX, SIZE_MAX, out, &err), AB_OK);
    *pos = ab_snapshot_builder_position(ent->sb);
    ab__snapcache_discard(x->b.snaps, ent); /* the next fold starts from nothing */
}

static int fold_setup(void **state)
{
    fold_fx_t *x = calloc(1, sizeof(*x));
    assert_non_null(x);
    ab_broker_config_defaults(&x->cfg);
    x->b.cfg = &x->cfg;
    x->b.plugin = fp_plugin();
    x->b.snaps = ab__snapcache_new();
    assert_non_null(x->b.snaps);
    tu_ctx_init(&x->tu);
    /* THREAD: runs of 9 events that end, and one that never does, interleaved with OTHER */
    for (uint64_t seq = 1; seq <= 9; seq++)
        for (int r = 0; r < 40; r++) {
            char run[16];
            snprintf(run, sizeof(run), "run-%d", r);
            commit(x, r % 3 == 0 ? OTHER : THREAD, run, seq, r == 7 ? 0 : 9);
        }
    for (uint64_t seq = 10; seq <= 30; seq++)
        commit(x, THREAD, "run-7", seq, 0);
    fold(x, NULL, 0, 0, &x->want, &x->want_pos);
    assert_int_equal(x->want_pos, x->db.nev);
    *state = x;
    return 0;
}

static int fold_teardown(void **state)
{
    fold_fx_t *x = *state;
    ab_buf_free(&x->want);
    ab__snapcache_destroy(&x->b.snaps);
    fp_free(&x->db);
    tu_ctx_free(&x->tu);
    assert_int_equal(atomic_load(&x->b.snapfeed_bytes), 0);
    free(x);
    return 0;
}

/* A feed of THREAD's stored events with positions in (from, to], covering from @p cover. */
static ab__snapfeed_t *feed_of(fold_fx_t *x, uint64_t cover, uint64_t from, uint64_t to)
{
    ab__snapfeed_t *f = NULL;
    for (size_t i = 0; i < x->db.nev; i++) {
        const fp_event_t *e = &x->db.ev[i];
        if (e->pos <= from || e->pos > to || strcmp(e->thread, THREAD) != 0)
            continue;
        add_ok(&f, &x->b.snapfeed_bytes, cover, e->pos, e->run, e->seq, e->bytes, e->len);
    }
    return f;
}

/* Fold with @p feed (freed after), check the document is the store's, and return the events
 * folded from the feed and the store reads made. */
static void fold_check(fold_fx_t *x, ab__snapfeed_t *feed, uint64_t chunk, int drop_at,
                       uint64_t *fed, unsigned *reads)
{
    ab__feedread_t r = {.seg = feed};
    ab_buf_t got = AB_BUF_INIT;
    uint64_t pos = 0;
    unsigned before = x->db.reads;
    fold(x, &r, chunk, drop_at, &got, &pos);
    *reads = x->db.reads - before;
    *fed = r.events;
    assert_int_equal(pos, x->want_pos);
    assert_int_equal(got.len, x->want.len);
    assert_memory_equal(got.data, x->want.data, got.len);
    ab_buf_free(&got);
    ab__snapfeed_free(&feed);
}

static void test_whole_feed_reads_only_the_tail(void **state)
{
    fold_fx_t *x = *state;
    uint64_t fed = 0;
    unsigned reads = 0;
    fold_check(x, feed_of(x, 0, 0, x->db.nev), 0, 0, &fed, &reads);
    assert_int_equal(fed, x->thread_events);
    assert_int_equal(reads, 1); /* the read after the feed, which finds nothing */
}

static void test_segments_with_a_gap(void **state)
{
    fold_fx_t *x = *state;
    uint64_t a = x->db.nev / 4, b = x->db.nev / 2, fed = 0;
    unsigned reads = 0;
    ab__snapfeed_t *s1 = feed_of(x, 0, 0, a), *s2 = feed_of(x, b, b, x->db.nev);
    uint64_t n1 = s1->n, n2 = s2->n;
    s1->next = s2; /* (a, b] is in no feed: read from the store */
    fold_check(x, s1, 0, 0, &fed, &reads);
    assert_int_equal(fed, n1 + n2);
    assert_true(fed < x->thread_events);
    assert_true(reads >= 2);
}

static void test_feed_after_the_builder(void **state)
{
    fold_fx_t *x = *state;
    uint64_t from = x->db.nev / 3, fed = 0;
    unsigned reads = 0;
    ab__snapfeed_t *f = feed_of(x, from, from, x->db.nev);
    uint64_t n = f->n;
    fold_check(x, f, 0, 0, &fed, &reads);
    assert_int_equal(fed, n);
}

static void test_chunks_and_a_dropped_builder(void **state)
{
    fold_fx_t *x = *state;
    uint64_t fed = 0;
    unsigned reads = 0;
    for (uint64_t chunk = 1; chunk <= 13; chunk += 4) {
        fold_check(x, feed_of(x, 0, 0, x->db.nev), chunk, 0, &fed, &reads);
        assert_int_equal(fed, x->thread_events);
        /* dropped after the third call: the builder starts again from nothing, the feed too */
        fold_check(x, feed_of(x, 0, 0, x->db.nev), chunk, 3, &fed, &reads);
        assert_int_equal(fed, x->thread_events + 3 * chunk);
        uint64_t a = x->db.nev / 5, b = x->db.nev / 3;
        ab__snapfeed_t *s1 = feed_of(x, 0, 0, a), *s2 = feed_of(x, b, b, x->db.nev);
        s1->next = s2;
        fold_check(x, s1, chunk, 2, &fed, &reads);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records_round_trip),
        cmocka_unit_test(test_bound_of_all_feeds),
        cmocka_unit_test(test_evicted_thread_frees_its_feed),
        cmocka_unit_test_setup_teardown(test_whole_feed_reads_only_the_tail, fold_setup,
                                        fold_teardown),
        cmocka_unit_test_setup_teardown(test_segments_with_a_gap, fold_setup, fold_teardown),
        cmocka_unit_test_setup_teardown(test_feed_after_the_builder, fold_setup, fold_teardown),
        cmocka_unit_test_setup_teardown(test_chunks_and_a_dropped_builder, fold_setup,
                                        fold_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

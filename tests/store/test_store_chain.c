/*
 * test_store_chain.c - schema 5's chains and anchors (docs/STORE.md "Chains and anchors"):
 * reads of runs, threads and everything from every kind of cursor give exactly what a model
 * of the appends says, across many anchors of each chain; a store of schema 4 migrates and
 * its chunks chain on, and `agentbus relayout` puts its links before its data (damaged stores:
 * test_store_damage.c). Tails in two levels
 * (schema 6, the recent level a log since schema 7, docs/STORE.md "Tails in two levels"): the
 * same reads with the logs merged every few commits, their bounds kept across a restart, logs
 * of many blocks, a damaged block refused, and stores of schemas 5 and 6 migrating.
 *
 * The workload is pseudo-random from a fixed seed: commits that touch a few of RUNS runs in
 * THREADS threads with one to three events each, so every run gets hundreds of chunks (more
 * than AB_STORE_ANCHOR_EVERY) and every thread more. The model holds every event's thread,
 * run, seq and position; a read is compared with the model row by row.
 *
 * sqlite3.h comes in (by store_int.h) to forge a schema-4 file and to damage chains.
 */
#include "store.h"
#include "store_fixture.h"
#include "store_int.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUNS    12
#define THREADS 3
#define COMMITS 420
#define EV_MAX  (COMMITS * RUNS * 3)

typedef struct mev {
    int run; /* its thread is run % THREADS */
    uint64_t seq, pos;
} mev_t;

typedef struct model {
    mev_t ev[EV_MAX];
    size_t n;
    uint64_t seq[RUNS]; /* each run's last */
    uint32_t rng;
} model_t;

/* The store's fixture (first, so sf_fx_teardown() frees the whole) and the model. */
typedef struct fx {
    sf_fx_t sf;
    model_t m;
} fx_t;

static int setup(void **state)
{
    int rc = sf_fx_setup_sized(state, "chain", true, sizeof(fx_t));
    if (rc == 0)
        ((fx_t *)*state)->m.rng = 12345;
    return rc;
}

static int teardown(void **state)
{
    return sf_fx_teardown(state);
}

/* The tails logs merge at this many tails in one: every few commits of the workload. */
#define MERGE_AT 8

/* Open the store of @p dir with its tails merged at @p merge_at tails in a log, written to the
 * logs whatever the runs (@p direct -1), or straight to the main tables over at most
 * @p direct ranges of rowids. */
static ab_store_t *open_merging_at(const char *dir, int merge_at, int direct)
{
    ab_store_opts_t o = {.tails_recent = merge_at, .tails_direct = direct};
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *st = NULL;
    if (ab__store_open(&st, dir, &o, &err) != AB_OK)
        fail_msg("open: %s", err.message);
    return st;
}

static ab_store_t *open_tails(const char *dir, int direct)
{
    return open_merging_at(dir, MERGE_AT, direct);
}

/* setup(), the store reopened to merge its tails every few commits. */
static int setup_merging(void **state)
{
    int rc = setup(state);
    if (rc == 0) {
        fx_t *f = *state;
        ab__store_close(&f->sf.st);
        f->sf.st = open_tails(f->sf.dir, -1);
    }
    return rc;
}

static uint32_t rnd(model_t *m, uint32_t n)
{
    m->rng = m->rng * 1103515245u + 12345u;
    return (m->rng >> 8) % n;
}

static void names(int run, char *thread, char *runid)
{
    snprintf(thread, 16, "t%d", run % THREADS);
    snprintf(runid, 16, "r%d", run);
}

/* The bytes of an event: its run and seq, so a misplaced row shows. */
static void body_of(int run, uint64_t seq, char *out)
{
    snprintf(out, 32, "r%d#%llu", run, (unsigned long long)seq);
}

/* @p commits commits of the workload (header), appended to the store and the model. */
static void write_commits(ab_store_t *st, model_t *m, int commits)
{
    static char bodies[RUNS * 3][32];
    char thread[RUNS * 3][16], run[RUNS * 3][16];
    for (int c = 0; c < commits; c++) {
        ab_append_event_t evs[RUNS * 3];
        size_t n = 0;
        int touched = 1 + (int)rnd(m, 5);
        for (int k = 0; k < touched; k++) {
            int r = (int)rnd(m, RUNS), per = 1 + (int)rnd(m, 3);
            for (int j = 0; j < per; j++) {
                uint64_t seq = ++m->seq[r];
                names(r, thread[n], run[n]);
                body_of(r, seq, bodies[n]);
                evs[n] = (ab_append_event_t){.thread = {thread[n], strlen(thread[n])},
                                             .run = {run[n], strlen(run[n])},
                                             .seq = seq,
                                             .epoch = 1,
                                             .bytes = (const uint8_t *)bodies[n],
                                             .len = strlen(bodies[n]),
                                             .status = seq == 1 ? AB_RUN_STATUS_ACTIVE
                                                                : AB_RUN_STATUS_UNKNOWN};
                n++;
            }
        }
        uint64_t first = 0;
        ab_error_t err = AB_ERROR_INIT;
        if (ab__store_append_batch(st, evs, n, 1000 + c, &first, &err) != AB_OK)
            fail_msg("commit %d: %s", c, err.message);
        for (size_t i = 0; i < n; i++) {
            assert_true(m->n < EV_MAX);
            int r = atoi(evs[i].run.ptr + 1);
            m->ev[m->n++] = (mev_t){.run = r, .seq = evs[i].seq, .pos = first + i};
        }
    }
}

/* A read's rows, checked one by one against the model's rows that @p want picks. */
typedef struct check {
    const model_t *m;
    size_t at;          /* the next model row to look at */
    int run, thread;    /* -1: any */
    uint64_t after;     /* seq (run scope) or position */
    uint64_t last_pos;  /* the last row delivered */
    uint32_t delivered; /* rows this read call gave */
} check_t;

static bool wanted(const check_t *k, const mev_t *e)
{
    if (k->run >= 0)
        return e->run == k->run && e->seq > k->after;
    return (k->thread < 0 || e->run % THREADS == k->thread) && e->pos > k->after;
}

static int on_row(void *ud, const ab_row_t *row)
{
    check_t *k = ud;
    while (k->at < k->m->n && !wanted(k, &k->m->ev[k->at]))
        k->at++;
    if (k->at == k->m->n)
        fail_msg("a row the model does not have: seq %llu pos %llu", (unsigned long long)row->seq,
                 (unsigned long long)row->pos);
    const mev_t *e = &k->m->ev[k->at++];
    char thread[16], run[16], body[32];
    names(e->run, thread, run);
    body_of(e->run, e->seq, body);
    if (row->pos != e->pos || row->seq != e->seq || row->len != strlen(body) ||
        memcmp(row->bytes, body, row->len) != 0 || row->thread.len != strlen(thread) ||
        memcmp(row->thread.ptr, thread, row->thread.len) != 0 || row->run.len != strlen(run) ||
        memcmp(row->run.ptr, run, row->run.len) != 0)
        fail_msg("row pos %llu seq %llu, the model has %s/%s#%llu at %llu",
                 (unsigned long long)row->pos, (unsigned long long)row->seq, thread, run,
                 (unsigned long long)e->seq, (unsigned long long)e->pos);
    k->last_pos = row->pos;
    k->delivered++;
    return 0;
}

static void check_caught_up(check_t *k);

/* One page of at most @p page rows of @p scope from k->after, checked against the model; a
 * short page must mean caught up, as a replay takes it; k->after moves to its last row.
 * @return the rows delivered. */
static uint32_t read_page(ab_store_t *st, check_t *k, ab_replay_scope_t scope, uint32_t page)
{
    char tname[16], rname[16];
    names(k->run >= 0 ? k->run : k->thread, tname, rname);
    ab_read_t req = {.scope = scope, .limit = page};
    if (scope != AB_REPLAY_ALL)
        req.thread = (ab_str_t){tname, strlen(tname)};
    if (scope == AB_REPLAY_RUN) {
        req.run = (ab_str_t){rname, strlen(rname)};
        req.after_seq = k->after;
    } else {
        req.after_pos = k->after;
    }
    ab_error_t err = AB_ERROR_INIT;
    uint32_t n = 0;
    k->delivered = 0;
    if (ab__store_read(st, &req, on_row, k, &n, &err) != AB_OK)
        fail_msg("read: %s", err.message);
    assert_int_equal(n, k->delivered);
    if (n > 0)
        k->after = scope == AB_REPLAY_RUN ? k->m->ev[k->at - 1].seq : k->last_pos;
    if (n < page) {
        check_t end = *k;
        check_caught_up(&end);
    }
    return n;
}

/* Nothing the model has for @p k is left after k->at. */
static void check_caught_up(check_t *k)
{
    while (k->at < k->m->n && !wanted(k, &k->m->ev[k->at]))
        k->at++;
    if (k->at != k->m->n)
        fail_msg("the read ended before the model's row at pos %llu",
                 (unsigned long long)k->m->ev[k->at].pos);
}

/* Read scope @p scope from @p after in pages of @p page rows to the end; every row is the
 * model's next, and nothing the model has is left out. */
static void read_all_pages(ab_store_t *st, const model_t *m, ab_replay_scope_t scope, int run,
                           int thread, uint64_t after, uint32_t page)
{
    check_t k = {.m = m, .run = run, .thread = thread, .after = after};
    char tname[16], rname[16];
    names(run >= 0 ? run : thread, tname, rname);
    for (;;) {
        ab_read_t req = {.scope = scope, .limit = page};
        if (scope != AB_REPLAY_ALL)
            req.thread = (ab_str_t){tname, strlen(tname)};
        if (scope == AB_REPLAY_RUN) {
            req.run = (ab_str_t){rname, strlen(rname)};
            req.after_seq = k.after;
        } else {
            req.after_pos = k.after;
        }
        ab_error_t err = AB_ERROR_INIT;
        uint32_t n = 0;
        k.delivered = 0;
        if (ab__store_read(st, &req, on_row, &k, &n, &err) != AB_OK)
            fail_msg("read: %s", err.message);
        assert_int_equal(n, k.delivered);
        if (n < page)
            break;
        k.after = scope == AB_REPLAY_RUN ? m->ev[k.at - 1].seq : k.last_pos; /* the next page */
    }
    while (k.at < m->n && !wanted(&k, &m->ev[k.at]))
        k.at++;
    if (k.at != m->n)
        fail_msg("the read ended before the model's row at pos %llu",
                 (unsigned long long)m->ev[k.at].pos);
}

static void check_heads(ab_store_t *st, const model_t *m);

/* Every scope from cursors at its start, inside, on anchors' neighbourhoods, at its end. */
static void check_reads(ab_store_t *st, model_t *m)
{
    for (int r = 0; r < RUNS; r++) {
        uint64_t cursors[] = {0,        1, 62, 63, 64, 65, 127, 128, m->seq[r] / 2, m->seq[r] - 1,
                              m->seq[r]};
        for (size_t i = 0; i < sizeof cursors / sizeof *cursors; i++)
            read_all_pages(st, m, AB_REPLAY_RUN, r, -1, cursors[i], UINT32_MAX);
        read_all_pages(st, m, AB_REPLAY_RUN, r, -1, 0, 7); /* pages that end anywhere */
    }
    uint64_t last = m->ev[m->n - 1].pos;
    for (int t = 0; t < THREADS; t++) {
        for (uint64_t p = 0; p <= last; p += last / 9 + 1)
            read_all_pages(st, m, AB_REPLAY_THREAD, -1, t, p, UINT32_MAX);
        read_all_pages(st, m, AB_REPLAY_THREAD, -1, t, 0, 50);
        read_all_pages(st, m, AB_REPLAY_THREAD, -1, t, last, UINT32_MAX);
    }
    read_all_pages(st, m, AB_REPLAY_ALL, -1, -1, 0, 333);
    for (size_t i = 0; i < m->n; i += 97) { /* single events by seq */
        char t[16], r[16], want[32];
        names(m->ev[i].run, t, r);
        body_of(m->ev[i].run, m->ev[i].seq, want);
        ab_buf_t b = {0};
        uint64_t pos = 0;
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab__store_event_bytes(st, (ab_str_t){t, strlen(t)},
                                               (ab_str_t){r, strlen(r)}, m->ev[i].seq, &b, &pos,
                                               &err),
                         AB_OK);
        assert_int_equal(pos, m->ev[i].pos);
        assert_int_equal(b.len, strlen(want));
        assert_memory_equal(b.data, want, b.len);
        ab_buf_free(&b);
    }
    check_heads(st, m);
}

/* Every run's head: the last seq of its tail's chunk. */
static void check_heads(ab_store_t *st, const model_t *m)
{
    for (int r = 0; r < RUNS; r++) {
        char t[16], rn[16];
        names(r, t, rn);
        ab_run_head_t h;
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(
            ab__store_head(st, (ab_str_t){t, strlen(t)}, (ab_str_t){rn, strlen(rn)}, &h, &err),
            AB_OK);
        assert_int_equal(h.last_seq, m->seq[r]);
    }
}

/* Every run and thread has many anchors and reads back whole, from any cursor. */
static void test_reads_across_anchors(void **state)
{
    fx_t *f = *state;
    write_commits(f->sf.st, &f->m, COMMITS);
    for (int r = 0; r < RUNS; r++)
        assert_true(f->m.seq[r] > 2 * AB_STORE_ANCHOR_EVERY);
    check_reads(f->sf.st, &f->m);
    ab__store_close(&f->sf.st); /* and again from a reader of the closed file */
    f->sf.st = open_ok(f->sf.dir, true);
    check_reads(f->sf.st, &f->m);
    /* both ways of taking a thread's segment gave the model's rows (store_walk.c invariant 6) */
    assert_true(f->sf.st->segs_scanned > 0);
    assert_true(f->sf.st->segs_walked > 0);
}

/* Paged reads go on from where the last page stopped (store_read.c invariant 6) while
 * commits land between the pages, on the handle that reads: the pages of one run, of one
 * thread, and of two runs and a thread taking turns give exactly the model's rows, the ones
 * committed after the read began included. */
static void test_paged_reads_across_commits(void **state)
{
    fx_t *f = *state;
    model_t *m = &f->m;
    write_commits(f->sf.st, m, COMMITS);
    check_t one = {.m = m, .run = 0, .thread = -1};
    check_t thr = {.m = m, .run = -1, .thread = 1};
    check_t turn[3] = {{.m = m, .run = 1, .thread = -1},
                       {.m = m, .run = 2, .thread = -1},
                       {.m = m, .run = -1, .thread = 2}};
    for (int i = 0; i < 400; i++) { /* two pages in a row: the second goes on, commits between */
        bool commit = i % 3 == 0 && i < 300;
        read_page(f->sf.st, &one, AB_REPLAY_RUN, 5);
        if (commit)
            write_commits(f->sf.st, m, 2);
        read_page(f->sf.st, &one, AB_REPLAY_RUN, 5);
        read_page(f->sf.st, &thr, AB_REPLAY_THREAD, 11);
        if (commit)
            write_commits(f->sf.st, m, 2);
        read_page(f->sf.st, &thr, AB_REPLAY_THREAD, 11);
        check_t *k = &turn[i % 3];
        read_page(f->sf.st, k, i % 3 == 2 ? AB_REPLAY_THREAD : AB_REPLAY_RUN, 9);
    }
    while (read_page(f->sf.st, &one, AB_REPLAY_RUN, 5) > 0)
        ;
    while (read_page(f->sf.st, &thr, AB_REPLAY_THREAD, 11) > 0)
        ;
    check_caught_up(&one);
    check_caught_up(&thr);
    for (int t = 0; t < 3; t++) {
        while (read_page(f->sf.st, &turn[t], t == 2 ? AB_REPLAY_THREAD : AB_REPLAY_RUN, 9) > 0)
            ;
        check_caught_up(&turn[t]);
    }
    assert_true(m->seq[0] > 2 * AB_STORE_ANCHOR_EVERY); /* pages crossed anchors */
}

/* A schema-4 store (a full index entry per chunk, no chains) migrates: its events read back
 * whole, and new chunks chain on from its runs' and threads' newest chunks. */
static void test_migrates_from_v4(void **state)
{
    fx_t *f = *state;
    assert_int_equal(sf_int(f->sf.dir, AB__LINKS_BEFORE_DATA_SQL), 1); /* a new store's layout */
    write_commits(f->sf.st, &f->m, COMMITS / 2);
    ab__store_close(&f->sf.st);
    sf_exec(f->sf.dir, SF_TO_V4_SQL);
    assert_int_equal(sf_int(f->sf.dir, "PRAGMA user_version"), 4);
    f->sf.st = open_ok(f->sf.dir, false); /* migrates 4 -> 5 */
    assert_int_equal(sf_int(f->sf.dir, "PRAGMA user_version"), AB_STORE_SCHEMA_VERSION);
    /* every old chunk is an anchor of both chains, every run and thread has its tail */
    assert_int_equal(sf_int(f->sf.dir, "SELECT count(*) FROM chunks WHERE run_dist <> 0"
                                       " OR thread_dist <> 0 OR prev_run <> 0"),
                     0);
    assert_int_equal(sf_int(f->sf.dir, "SELECT count(*) FROM run_tails"), RUNS);
    assert_int_equal(sf_int(f->sf.dir, "SELECT count(*) FROM thread_tails"), THREADS);
    /* its rows are kept where they are (no copy at the first start): the links come last */
    assert_int_equal(sf_int(f->sf.dir, AB__LINKS_BEFORE_DATA_SQL), 0);
    check_reads(f->sf.st, &f->m);
    write_commits(f->sf.st, &f->m, COMMITS);
    assert_true(sf_int(f->sf.dir, "SELECT count(*) FROM chunks WHERE run_dist > 0") > 0);
    check_reads(f->sf.st, &f->m);
}

/* Tails in the run tails' log; with @p shadowing, the runs whose logged tail is newer than
 * their tail in the main table (the logged one must win). */
static int64_t recent_tails(const char *dir, bool shadowing)
{
    return sf_int(dir, shadowing
                           ? "SELECT count(*) FROM run_tails m WHERE coalesce(" AB__LOGGED_TAIL(
                                 "0", "m.rowid") ", 0) > m.chunk"
                           : "SELECT coalesce(sum(runs), 0) FROM tails_gens");
}

/* Every run's and thread's tail, read as the store reads it (logged, else main), names its
 * newest chunk. */
#define TAILS_WRONG(owner, tail_of)                                                                \
    "WITH m AS (SELECT " owner " AS k, max(rowid) AS newest FROM chunks GROUP BY " owner ")"       \
    " SELECT count(*) FROM m WHERE newest IS NOT " tail_of("m.k")

static void check_tails(const char *dir)
{
    assert_int_equal(sf_int(dir, TAILS_WRONG("run_rowid", AB__RUN_TAIL)), 0);
    assert_int_equal(sf_int(dir, TAILS_WRONG("thread_rowid", AB__THREAD_TAIL)), 0);
}

/* Tails in two levels: merged every few commits, the logs never reach their bound after a
 * commit, a logged tail wins over the older one of the main table in every read and head,
 * and a restarted writer counts what the logs hold (else they would outgrow the bound) and
 * chains on from both levels. */
static void test_tails_in_two_levels(void **state)
{
    fx_t *f = *state;
    bool shadowed = false;
    for (int step = 0; step < 60; step++) {
        write_commits(f->sf.st, &f->m, 7);
        assert_true(recent_tails(f->sf.dir, false) < MERGE_AT);
        assert_true(sf_int(f->sf.dir, "SELECT count(*) FROM tails_gens") < AB_STORE_TAILS_GENS);
        shadowed = shadowed || recent_tails(f->sf.dir, true) > 0;
        check_heads(f->sf.st, &f->m);
        check_tails(f->sf.dir);
    }
    assert_true(shadowed);
    assert_int_equal(sf_int(f->sf.dir, "SELECT count(*) FROM run_tails"), RUNS);
    check_reads(f->sf.st, &f->m);
    while (recent_tails(f->sf.dir, false) == 0) /* restart with tails in the logs */
        write_commits(f->sf.st, &f->m, 1);
    ab__store_close(&f->sf.st);
    f->sf.st = open_tails(f->sf.dir, -1);
    for (int step = 0; step < 20; step++) {
        write_commits(f->sf.st, &f->m, 1);
        assert_true(recent_tails(f->sf.dir, false) < MERGE_AT);
    }
    check_reads(f->sf.st, &f->m);
    ab__store_close(&f->sf.st);
    f->sf.st = open_ok(f->sf.dir, true);
    check_reads(f->sf.st, &f->m);
}

/* Event @p seq of each of @p n runs f0, f1, ... of thread tf, in commits of up to 256. */
static void filler_runs(ab_store_t *st, int n, uint64_t seq)
{
    static char ids[256][16];
    for (int first = 0; first < n; first += 256) {
        ab_append_event_t evs[256];
        size_t k = 0;
        for (int i = first; i < n && k < 256; i++, k++) {
            snprintf(ids[k], sizeof ids[k], "f%d", i);
            evs[k] = (ab_append_event_t){.thread = {"tf", 2},
                                         .run = {ids[k], strlen(ids[k])},
                                         .seq = seq,
                                         .epoch = 1,
                                         .bytes = (const uint8_t *)"f",
                                         .len = 1,
                                         .status = AB_RUN_STATUS_ACTIVE};
        }
        uint64_t pos = 0;
        ab_error_t err = AB_ERROR_INIT;
        if (ab__store_append_batch(st, evs, k, 1, &pos, &err) != AB_OK)
            fail_msg("filler: %s", err.message);
    }
}

/* Every run and thread of the model read whole, and every head (the filler runs of
 * test_tails_go_straight are in no thread of the model, so "all" is not read). */
static void check_model_runs(ab_store_t *st, const model_t *m)
{
    for (int r = 0; r < RUNS; r++)
        read_all_pages(st, m, AB_REPLAY_RUN, r, -1, 0, 7);
    for (int t = 0; t < THREADS; t++)
        read_all_pages(st, m, AB_REPLAY_THREAD, -1, t, 0, 50);
    check_heads(st, m);
}

/* A commit's tails that fall in few ranges of rowids go straight to the main table while
 * its log is empty; once a commit over more ranges logged its tails, every commit's tails
 * go to the log (a newer tail in the main table would be hidden by an older logged one)
 * until the merge. The model's runs get rowids past 1,024 filler runs, so a commit over
 * them and a filler run spans two ranges of 1,024 rowids. */
static void test_tails_go_straight(void **state)
{
    fx_t *f = *state;
    ab__store_close(&f->sf.st);
    f->sf.st = open_tails(f->sf.dir, 1);
    filler_runs(f->sf.st, 1024, 1); /* rowids 1..1024: the first range and one of the second */
    write_commits(f->sf.st, &f->m, 40);
    assert_int_equal(sf_int(f->sf.dir, "SELECT min(rowid) FROM runs WHERE run = 'r0'") >> 10, 1);
    assert_int_equal(recent_tails(f->sf.dir, false), 0); /* one range: straight */
    check_model_runs(f->sf.st, &f->m);
    int mixed = 0;
    for (int step = 0; step < 30; step++) { /* r0 beside f5: two ranges, to the log */
        uint64_t seq = ++f->m.seq[0], pos = 0;
        char body[32];
        body_of(0, seq, body);
        ab_append_event_t evs[2] = {
            {.thread = {"tf", 2},
             .run = {"f5", 2},
             .seq = 2 + (uint64_t)step,
             .epoch = 1,
             .bytes = (const uint8_t *)"g",
             .len = 1},
            {.thread = {"t0", 2},
             .run = {"r0", 2},
             .seq = seq,
             .epoch = 1,
             .bytes = (const uint8_t *)body,
             .len = strlen(body)},
        };
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab__store_append_batch(f->sf.st, evs, 2, 1, &pos, &err), AB_OK);
        f->m.ev[f->m.n++] = (mev_t){.run = 0, .seq = seq, .pos = pos + 1};
        mixed += recent_tails(f->sf.dir, false) > 0;
        write_commits(f->sf.st, &f->m, 3); /* to the log while it has tails */
        check_heads(f->sf.st, &f->m);
        check_tails(f->sf.dir);
    }
    assert_true(mixed > 0);
    check_model_runs(f->sf.st, &f->m);
}

/* Two writer handles of one store take turns: one sends its tails straight to the main
 * tables whenever it may, the other always to the logs. After the other's commits the
 * first finds the logs filled (it reads their counts again at a begin after another
 * connection wrote) and sends its tails there too, so no newer tail of its is hidden by an
 * older logged one; and the merges of either keep the other's counts right. */
static void test_two_writers_share_the_tails(void **state)
{
    fx_t *f = *state;
    ab_store_t *other = open_tails(f->sf.dir, -1);
    int after_other = 0; /* turns of the first handle that found tails the other logged */
    for (int turn = 0; turn < 40; turn++) {
        after_other += turn % 2 == 0 && recent_tails(f->sf.dir, false) > 0;
        write_commits(turn % 2 ? other : f->sf.st, &f->m, 1 + turn % 3);
        check_heads(f->sf.st, &f->m);
        check_tails(f->sf.dir);
    }
    assert_true(after_other > 0);
    check_reads(other, &f->m);
    ab__store_close(&other);
    check_reads(f->sf.st, &f->m);
}

/* The last seq of filler run f<i>, or the status of the head's read. */
static ab_status_t filler_head(ab_store_t *st, int i, uint64_t *last_seq)
{
    char id[16];
    snprintf(id, sizeof id, "f%d", i);
    ab_run_head_t h;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = ab__store_head(st, (ab_str_t){"tf", 2}, (ab_str_t){id, strlen(id)}, &h, &err);
    *last_seq = s == AB_OK ? h.last_seq : 0;
    return s;
}

/* Logs of many blocks: rounds of commits over 300 runs (a generation of five blocks, then one
 * of one), never merged by count. The generations never reach AB_STORE_TAILS_GENS after a
 * commit (their merge), and every tail, the runs' heads at the edges of blocks among them, is
 * read from its block. Then a block damaged by hand is refused (AB_CORRUPT) by a head on a new
 * connection (one that read it before keeps what it read: store_tails.c invariant 7) and by the
 * commit that would merge it, and that commit keeps nothing. */
static void test_tails_log_blocks(void **state)
{
    fx_t *f = *state;
    const char *dir = f->sf.dir;
    ab__store_close(&f->sf.st);
    f->sf.st = open_merging_at(dir, 1 << 20, -1);
    int64_t gens = 0, merges = 0, full_blocks = 0;
    for (int round = 1; round <= 12; round++) {
        filler_runs(f->sf.st, 300, (uint64_t)round);
        int64_t now = sf_int(dir, "SELECT count(*) FROM tails_gens");
        assert_true(now < AB_STORE_TAILS_GENS);
        merges += now < gens;
        gens = now;
        _Static_assert(AB_STORE_TAILS_BLOCK * 16 == 1024, "a full block's bytes, below");
        full_blocks += sf_int(dir, "SELECT count(*) FROM run_tails_log WHERE length(tails) = 1024");
        check_tails(dir);
        static const int edges[] = {0, 62, 63, 64, 127, 128, 255, 256, 299};
        for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) {
            uint64_t last = 0;
            assert_int_equal(filler_head(f->sf.st, edges[i], &last), AB_OK);
            assert_int_equal(last, (uint64_t)round);
        }
    }
    assert_int_equal(merges, 1);
    assert_true(full_blocks > 0);
    assert_true(gens > 0); /* the damage below lands in a log */
    /* the newest block holding f0, the first run: cut inside its second pair */
    sf_exec(dir, "WITH b AS (SELECT min(first) AS f FROM run_tails_log)"
                 " UPDATE run_tails_log SET tails = substr(tails, 1, 24) WHERE first = (SELECT f"
                 " FROM b) AND gen = (SELECT max(gen) FROM run_tails_log, b WHERE first = b.f)");
    uint64_t last = 0;
    assert_int_equal(filler_head(f->sf.st, 0, &last), AB_OK); /* its view read the block whole */
    assert_int_equal(last, 12);
    ab_store_t *fresh = open_ok(dir, true); /* a new connection reads the damaged block */
    assert_int_equal(filler_head(fresh, 0, &last), AB_CORRUPT);
    ab__store_close(&fresh);
    ab_status_t s = AB_OK;
    for (int i = 0; s == AB_OK && i < AB_STORE_TAILS_GENS; i++) { /* until one merges */
        int64_t before = sf_int(dir, "SELECT max(rowid) FROM chunks");
        ab_append_event_t ev = {.thread = {"tf", 2},
                                .run = {"f200", 4},
                                .seq = 13 + (uint64_t)i,
                                .epoch = 1,
                                .bytes = (const uint8_t *)"f",
                                .len = 1};
        uint64_t pos = 0;
        ab_error_t err = AB_ERROR_INIT;
        s = ab__store_append_batch(f->sf.st, &ev, 1, 1, &pos, &err);
        if (s != AB_OK)
            assert_int_equal(sf_int(dir, "SELECT max(rowid) FROM chunks"), before);
    }
    assert_int_equal(s, AB_CORRUPT);
}

/* Commits of the default writer (its direct path over few ranges) until the logs are empty:
 * the merge at AB_STORE_TAILS_GENS generations comes within that many commits. */
static void empty_the_logs(fx_t *f)
{
    ab__store_close(&f->sf.st);
    f->sf.st = open_ok(f->sf.dir, false);
    for (int i = 0;
         i <= AB_STORE_TAILS_GENS && sf_int(f->sf.dir, "SELECT count(*) FROM tails_gens"); i++)
        write_commits(f->sf.st, &f->m, 1);
    assert_int_equal(sf_int(f->sf.dir, "SELECT count(*) FROM tails_gens"), 0);
    ab__store_close(&f->sf.st);
}

/* A store of schema 5 (one level of tails) migrates: the logs start empty, its events read
 * back whole and its chains go on. */
static void test_migrates_from_v5(void **state)
{
    fx_t *f = *state;
    write_commits(f->sf.st, &f->m, COMMITS / 2);
    empty_the_logs(f);
    sf_exec(f->sf.dir, AB__V7_DOWN_SQL(5));
    assert_int_equal(sf_int(f->sf.dir, "PRAGMA user_version"), 5);
    assert_int_equal(sf_int(f->sf.dir, "SELECT count(*) FROM run_tails"), RUNS);
    f->sf.st = open_tails(f->sf.dir, -1);
    assert_int_equal(sf_int(f->sf.dir, "PRAGMA user_version"), AB_STORE_SCHEMA_VERSION);
    assert_int_equal(recent_tails(f->sf.dir, false), 0);
    check_reads(f->sf.st, &f->m);
    write_commits(f->sf.st, &f->m, COMMITS / 2);
    assert_true(recent_tails(f->sf.dir, true) > 0);
    check_reads(f->sf.st, &f->m);
}

/* A store of schema 6 with tails in its recent tables migrates: every recent tail wins over
 * the main table's in the merge, so every tail names its newest chunk, the logs start empty,
 * its events read back whole and its chains go on. Its recent tables are forged as schema 6
 * left them mid-way: every newest tail there, the main tables naming the oldest chunks. */
static void test_migrates_from_v6(void **state)
{
    fx_t *f = *state;
    write_commits(f->sf.st, &f->m, COMMITS / 2);
    empty_the_logs(f);
    sf_exec(f->sf.dir, AB__V7_DOWN_SQL(6) AB__V6_RECENT_TABLES
            "INSERT INTO run_tails_recent SELECT rowid, chunk FROM run_tails;"
            "INSERT INTO thread_tails_recent SELECT rowid, chunk FROM thread_tails;"
            "UPDATE run_tails SET chunk = (SELECT min(c.rowid) FROM chunks c"
            " WHERE c.run_rowid = run_tails.rowid);"
            "UPDATE thread_tails SET chunk = (SELECT min(c.rowid) FROM chunks c"
            " WHERE c.thread_rowid = thread_tails.rowid);");
    assert_int_equal(sf_int(f->sf.dir, "PRAGMA user_version"), 6);
    assert_int_equal(sf_int(f->sf.dir, "SELECT count(*) FROM run_tails_recent r JOIN run_tails m"
                                       " ON m.rowid = r.rowid WHERE r.chunk > m.chunk"),
                     RUNS);
    f->sf.st = open_tails(f->sf.dir, -1);
    assert_int_equal(sf_int(f->sf.dir, "PRAGMA user_version"), AB_STORE_SCHEMA_VERSION);
    assert_int_equal(sf_int(f->sf.dir, "SELECT count(*) FROM sqlite_master"
                                       " WHERE name LIKE '%tails_recent'"),
                     0);
    assert_int_equal(recent_tails(f->sf.dir, false), 0);
    check_tails(f->sf.dir);
    check_reads(f->sf.st, &f->m);
    write_commits(f->sf.st, &f->m, COMMITS / 2);
    check_tails(f->sf.dir);
    check_reads(f->sf.st, &f->m);
}

/* Every column of every chunk but data, folded into one number (its order and values). */
#define CHUNKS_SUM                                                                                 \
    "SELECT sum((rowid * 1000003 + run_rowid * 10007 + thread_rowid * 101 + first_seq * 13"        \
    " + last_seq * 7 + last_pos * 3 + batch_first * 5 + batch_last * 11 + n * 17 + prev_run * 19"  \
    " + run_dist * 23 + prev_thread * 29 + thread_dist * 31 + length(data) * 37) % 1000000007)"    \
    " FROM chunks"

typedef struct progress {
    int calls;
    uint64_t chunks, pos, pos_max;
} progress_t;

static void on_progress(void *ud, uint64_t chunks, uint64_t pos, uint64_t pos_max)
{
    progress_t *p = ud;
    assert_true(chunks > p->chunks && pos > p->pos && pos <= pos_max); /* forward, in order */
    *p = (progress_t){p->calls + 1, chunks, pos, pos_max};
}

/* `agentbus relayout` (store_relayout.c): a store migrated from schema 4 with events gets its
 * links before its data, every chunk and column kept, reads whole before and after on the
 * same handle, chains going on; a new store, or one done, is left alone; a failure changes
 * nothing; a readonly handle is refused. */
static void test_relayout(void **state)
{
    fx_t *f = *state;
    ab_store_relayout_t r;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_relayout(f->sf.st, NULL, NULL, &r, &err), AB_OK);
    assert_false(r.needed); /* a new store's layout */
    write_commits(f->sf.st, &f->m, COMMITS / 2);
    ab__store_close(&f->sf.st);
    sf_exec(f->sf.dir, SF_TO_V4_SQL);
    f->sf.st = open_ok(f->sf.dir, false);        /* migrates: the links after the data */
    write_commits(f->sf.st, &f->m, COMMITS / 2); /* chained chunks after the migration */
    assert_int_equal(sf_int(f->sf.dir, AB__LINKS_BEFORE_DATA_SQL), 0);
    int64_t n = sf_int(f->sf.dir, "SELECT count(*) FROM chunks"),
            sum = sf_int(f->sf.dir, CHUNKS_SUM);
    /* a failure (here the copy's table is in the way) leaves it as it was */
    sf_exec(f->sf.dir, "CREATE TABLE chunks_relayout(x)");
    assert_int_not_equal(ab__store_relayout(f->sf.st, NULL, NULL, &r, &err), AB_OK);
    sf_exec(f->sf.dir, "DROP TABLE chunks_relayout");
    assert_int_equal(sf_int(f->sf.dir, AB__LINKS_BEFORE_DATA_SQL), 0);
    assert_int_equal(sf_int(f->sf.dir, CHUNKS_SUM), sum);
    progress_t p = {0};
    assert_int_equal(ab__store_relayout(f->sf.st, on_progress, &p, &r, &err), AB_OK);
    assert_true(r.needed);
    assert_int_equal(r.chunks, (uint64_t)n);
    assert_int_equal(p.calls, (n + 4095) / 4096);
    assert_int_equal(p.chunks, (uint64_t)n);
    assert_int_equal(p.pos, r.last_pos);
    assert_int_equal(r.last_pos, (uint64_t)sf_int(f->sf.dir, "SELECT max(rowid) FROM chunks"));
    assert_int_equal(sf_int(f->sf.dir, AB__LINKS_BEFORE_DATA_SQL), 1);
    assert_int_equal(sf_int(f->sf.dir, CHUNKS_SUM), sum);
    assert_int_equal(sf_int(f->sf.dir, "SELECT count(*) FROM sqlite_master WHERE name IN"
                                       " ('chunks_by_run', 'chunks_by_thread', 'chunks_relayout')"),
                     2);
    check_reads(f->sf.st, &f->m);
    write_commits(f->sf.st, &f->m, COMMITS / 4);
    check_reads(f->sf.st, &f->m);
    assert_int_equal(ab__store_relayout(f->sf.st, NULL, NULL, &r, &err), AB_OK);
    assert_false(r.needed); /* done once */
    ab_store_t *ro = open_ok(f->sf.dir, true);
    assert_int_equal(ab__store_relayout(ro, NULL, NULL, &r, &err), AB_INVALID_ARGUMENT);
    ab__store_close(&ro);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reads_across_anchors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migrates_from_v4, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relayout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paged_reads_across_commits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reads_across_anchors, setup_merging, teardown),
        cmocka_unit_test_setup_teardown(test_paged_reads_across_commits, setup_merging, teardown),
        cmocka_unit_test_setup_teardown(test_tails_in_two_levels, setup_merging, teardown),
        cmocka_unit_test_setup_teardown(test_migrates_from_v5, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migrates_from_v6, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tails_log_blocks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tails_go_straight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_writers_share_the_tails, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

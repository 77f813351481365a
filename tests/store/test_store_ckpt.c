/*
 * test_store_ckpt.c - WAL checkpoints off the writer's thread
 * (store/store_ckpt.c): a WAL past wal_pages (but short of 4x, where the
 * writer would checkpoint inline) is checkpointed into the database file by
 * the background thread while the writer stays open; a long stream of
 * commits keeps the WAL file bounded (a few times wal_pages); a WAL file
 * grown past journal_size_limit (the inline bound) is cut back to it when
 * the WAL restarts, and one within it is reused, not cut back; the bound
 * holds while a reader keeps reading;
 * everything committed reads back after a reopen; a checkpoint of several
 * slices flushes the database file after each (store/store_pace.c).
 */
#include "store.h"
#include "store_int.h"
#include "testutil.h"

#include "broker_proc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WAL_PAGES 16 /* pages of 8 KiB: the checkpointer wakes at 128 KiB of WAL */

typedef struct fx {
    char dir[64];
    char db[96];
    char wal[100];
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/ab_ckpt_XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->db, sizeof f->db, "%s/%s", f->dir, AB_STORE_DB_NAME);
    snprintf(f->wal, sizeof f->wal, "%s-wal", f->db);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    bp_rm_tree(f->dir);
    free(f);
    return 0;
}

static long file_size(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0 ? (long)s.st_size : 0;
}

/* A writer with a lock wait, as the broker's (1 s): the checkpointer's connection may hold
 * SQLite's write lock for a moment (it takes it to read a WAL header a commit is changing),
 * and a BEGIN without a wait then fails with SQLITE_BUSY (once in some hundred runs here). */
static ab_store_t *open_writer(const fx_t *f)
{
    ab_store_opts_t o = {
        .durability = AB_DURABILITY_PROCESS, .wal_pages = WAL_PAGES, .busy_timeout_ms = 1000};
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *st = NULL;
    if (ab__store_open(&st, f->dir, &o, &err) != AB_OK)
        fail_msg("open: %s", err.message);
    return st;
}

/* One commit of @p n events of run r, seq from @p seq, @p size bytes each. */
static void commit_events(ab_store_t *st, uint64_t seq, int n, size_t size)
{
    static char body[4096];
    memset(body, 'e', sizeof body);
    ab_error_t err = AB_ERROR_INIT;
    if (ab__store_begin(st, 1, &err) != AB_OK)
        fail_msg("begin: %s", err.message);
    for (int i = 0; i < n; i++) {
        ab_append_event_t ev = {.thread = {"t", 1},
                                .run = {"r", 1},
                                .seq = seq + (uint64_t)i,
                                .epoch = 1,
                                .bytes = (const uint8_t *)body,
                                .len = size};
        if (ab__store_append(st, &ev, NULL, &err) != AB_OK)
            fail_msg("append: %s", err.message);
    }
    if (ab__store_commit(st, &err) != AB_OK)
        fail_msg("commit: %s", err.message);
}

static int count_rows(void *ud, const ab_row_t *r)
{
    uint64_t *n = ud;
    (*n)++;
    return r->seq != *n; /* stop (and fail) on the first seq out of order */
}

/* The store's figures once it counted @p n checkpoints (bounded: 10 s). */
static ab_plugin_stats_t await_checkpoints(ab_store_t *st, uint64_t n)
{
    struct timespec ms = {0, 10 * 1000 * 1000};
    ab_plugin_stats_t ps = {0};
    ab_error_t err = AB_ERROR_INIT;
    for (int i = 0; i < 1000 && ps.checkpoints < n; i++) {
        assert_int_equal(ab__store_stats(st, &ps, &err), AB_OK);
        if (ps.checkpoints < n)
            nanosleep(&ms, NULL);
    }
    assert_true(ps.checkpoints >= n);
    return ps;
}

/* The store's figures once it counted a checkpoint. */
static ab_plugin_stats_t await_checkpoint(ab_store_t *st)
{
    return await_checkpoints(st, 1);
}

/* Every event of run r, read in order on a fresh read-only handle: their count. */
static uint64_t rows_of_run(const fx_t *f)
{
    ab_store_opts_t ro = {.readonly = true};
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *st = NULL;
    assert_int_equal(ab__store_open(&st, f->dir, &ro, &err), AB_OK);
    uint64_t n = 0;
    uint32_t got = 0;
    ab_read_t req = {.scope = AB_REPLAY_RUN, .thread = {"t", 1}, .run = {"r", 1}, .limit = 5000};
    assert_int_equal(ab__store_read(st, &req, count_rows, &n, &got, &err), AB_OK);
    assert_int_equal(got, n);
    ab__store_close(&st);
    return n;
}

/* 40 pages of WAL (16 < 40 < 64): only the checkpointer moves them into the file. */
static void test_background_checkpoint(void **state)
{
    fx_t *f = *state;
    ab_store_t *st = open_writer(f);
    long before = file_size(f->db);
    commit_events(st, 1, 80, 4000); /* ~320 KB in one commit */
    struct timespec ms = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 1000 && file_size(f->db) <= before; i++)
        nanosleep(&ms, NULL); /* bounded: 10 s */
    if (file_size(f->db) <= before)
        fail_msg("no checkpoint within 10 s: db %ld bytes, wal %ld", file_size(f->db),
                 file_size(f->wal));
    /* counted, with its duration, for `stats` (the count follows the copy) */
    ab_plugin_stats_t ps = await_checkpoint(st);
    assert_true(ps.checkpoints_slow <= ps.checkpoints);
    assert_true(ps.checkpoint_max_us >= ps.checkpoint_last_slow_us);
    ab__store_close(&st);
}

/* Many commits: the WAL file never grows past the inline bound, and all reads back. */
static void test_wal_bounded_and_complete(void **state)
{
    fx_t *f = *state;
    ab_store_t *st = open_writer(f);
    long most = 0;
    for (int c = 0; c < 200; c++) {
        commit_events(st, (uint64_t)c * 10 + 1, 10, 2000); /* 20 KB per commit */
        long w = file_size(f->wal);
        most = w > most ? w : most;
    }
    /* 4 x 16 pages before the writer checkpoints itself, plus the commits made while a
     * checkpoint still read the WAL (a restart waits for it): well under the ~4 MB that
     * 200 commits write, which is where the WAL would end without checkpoints */
    long bound = (6 * WAL_PAGES + 16) * 8192L;
    if (most > bound)
        fail_msg("WAL reached %ld bytes (bound %ld)", most, bound);
    ab__store_close(&st);
    assert_int_equal(rows_of_run(f), 2000); /* read and delivered, in order */
}

/* The WAL file's header: its checkpoint sequence (+1 at every restart) and salts. */
static bool wal_header(const char *wal, uint32_t *seq, uint8_t salts[8])
{
    uint8_t h[32];
    FILE *fp = fopen(wal, "rb"); /* SQLite holds no lock on the WAL file itself */
    bool ok = fp && fread(h, 1, sizeof h, fp) == sizeof h;
    if (fp)
        fclose(fp);
    if (ok) {
        *seq = (uint32_t)h[12] << 24 | (uint32_t)h[13] << 16 | (uint32_t)h[14] << 8 | h[15];
        memcpy(salts, h + 16, 8);
    }
    return ok;
}

/* The frames of the WAL's current generation: those from its start whose salts are the
 * header's (the frames after them are of an earlier generation, in a file reused). */
static long wal_frames(const char *wal)
{
    uint32_t seq;
    uint8_t salts[8], fh[24];
    if (!wal_header(wal, &seq, salts))
        return 0;
    FILE *fp = fopen(wal, "rb");
    long n = 0;
    while (fp && fseek(fp, 32 + n * (24L + AB_STORE_PAGE_BYTES), SEEK_SET) == 0 &&
           fread(fh, 1, sizeof fh, fp) == sizeof fh && memcmp(fh + 8, salts, 8) == 0)
        n++;
    if (fp)
        fclose(fp);
    return n;
}

/*
 * Light load with the default wal_pages (64 MiB): the checkpointer is woken at
 * AB_STORE_WAL_EARLY_PAGES (4 MiB of frames) instead, so a WAL written slowly
 * (each checkpoint done before the next commit, as at 1,000 small commits a
 * second) restarts there, and its file stays at that size while many times as
 * much is committed. Woken at wal_pages, no checkpoint comes at the early size
 * (the wait below fails) and the file grows to 64 MiB: longer at nearly every
 * commit, whose fdatasync then costs more (docs/STORE.md "WAL size").
 */
static void test_wal_restarts_early(void **state)
{
    fx_t *f = *state;
    ab_store_opts_t o = {.durability = AB_DURABILITY_PROCESS, .busy_timeout_ms = 1000};
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *st = NULL;
    if (ab__store_open(&st, f->dir, &o, &err) != AB_OK)
        fail_msg("open: %s", err.message);
    long most = 0, frames_seen = 0;
    uint64_t seq = 1, ckpts = 0;
    uint32_t first = 0, now = 0;
    uint8_t salts[8];
    for (int c = 0; c < 20000 && (c == 0 || now - first < 4); c++) {
        commit_events(st, seq, 4, 2000);
        seq += 4;
        assert_true(wal_header(f->wal, c == 0 ? &first : &now, salts));
        long w = file_size(f->wal), frames = wal_frames(f->wal);
        most = w > most ? w : most;
        frames_seen += frames;
        if (frames >= AB_STORE_WAL_EARLY_PAGES) /* woken by this commit; done before the next */
            ckpts = await_checkpoints(st, ckpts + 1).checkpoints;
    }
    ab__store_close(&st);
    assert_true(now - first >= 4); /* four restarts, each after AB_STORE_WAL_EARLY_PAGES */
    long bound = 32 + (AB_STORE_WAL_EARLY_PAGES + 16L) * (24 + AB_STORE_PAGE_BYTES);
    if (most > bound) /* the early size, plus the commit that crossed it */
        fail_msg("the WAL file reached %ld bytes (want at most %ld)", most, bound);
    assert_true(frames_seen > 0);
    assert_int_equal(rows_of_run(f), seq - 1);
}

/*
 * journal_size_limit: a WAL file grown past 4 x wal_pages pages (here by one
 * commit larger than that) is cut back to that once the WAL restarts, i.e.
 * at the first commit after a checkpoint copied all of it (without the limit
 * it would keep its size). The limit is the inline bound, not less: a WAL
 * within its usual size is reused, never truncated (docs/STORE.md "WAL size").
 */
static void test_wal_file_cut_back(void **state)
{
    fx_t *f = *state;
    ab_store_t *st = open_writer(f);
    commit_events(st, 1, 200, 4000); /* ~100 pages in one commit: over the inline 4 x 16 */
    long limit = 4L * WAL_PAGES * 8192;
    long big = file_size(f->wal);
    if (big <= limit)
        fail_msg("the WAL is only %ld bytes (want over %ld)", big, limit);
    struct timespec ms = {0, 10 * 1000 * 1000};
    uint64_t seq = 201;
    for (int i = 0; i < 1000 && file_size(f->wal) > limit; i++) { /* bounded: 10 s */
        nanosleep(&ms, NULL);
        commit_events(st, seq++, 1, 100);
    }
    if (file_size(f->wal) > limit)
        fail_msg("WAL file still %ld bytes after %llu commits (limit %ld)", file_size(f->wal),
                 (unsigned long long)(seq - 201), limit);
    ab__store_close(&st);
}

/*
 * A WAL file within the inline bound (here ~40 pages, over 2 x 16 and under 4 x 16) keeps
 * its size when the WAL restarts and is written again from its start: truncating it there
 * cost the commit that restarted it 28-150 ms under load (docs/PERFORMANCE.md "The WAL file
 * kept at its size").
 */
static void test_wal_file_reused(void **state)
{
    fx_t *f = *state;
    ab_store_t *st = open_writer(f);
    long before = file_size(f->db);
    commit_events(st, 1, 80, 4000); /* ~40 pages in one commit */
    /* until a checkpoint copied it (one may copy nothing: test_checkpoint_paced) */
    uint64_t seen = await_checkpoint(st).checkpoints, seq = 81;
    for (int i = 0; i < 100 && file_size(f->db) == before; i++) {
        commit_events(st, seq++, 1, 100);
        seen = await_checkpoints(st, seen + 1).checkpoints;
    }
    long big = file_size(f->wal), frame = 8192 + 24;
    if (big <= 2L * WAL_PAGES * 8192)
        fail_msg("the WAL is only %ld bytes (want over %ld)", big, 2L * WAL_PAGES * 8192);
    /* The next commit restarts the WAL. Ten small ones (a few frames each, fewer than the
     * file holds) then write it again from its start: the file is never cut (SQLite would
     * cut it in the commit that restarts it) and does not grow, as it would by each
     * commit's frames if they were appended. One or two commits may still append, if the
     * checkpoint's end raced them. */
    long least = big, after = big;
    for (int i = 0; i < 10; i++) {
        commit_events(st, seq++, 1, 100);
        after = file_size(f->wal);
        least = after < least ? after : least;
    }
    if (least < big)
        fail_msg("WAL file cut to %ld bytes from %ld", least, big);
    if (after > big + 2 * 3 * frame)
        fail_msg("WAL file grew from %ld to %ld bytes in 10 small commits", big, after);
    ab__store_close(&st);
    assert_int_equal(rows_of_run(f), (int)seq - 1);
}

/* A reader that keeps one read transaction open after another, as the broker's snapshot
 * worker does under load: its own read-only handle, each read holding its transaction
 * 1 ms (in its first row's callback). */
typedef struct reader_loop {
    const fx_t *f;
    atomic_bool stop;
    atomic_long txns;
} reader_loop_t;

static int linger(void *ud, const ab_row_t *r)
{
    (void)r;
    bool *first = ud;
    struct timespec ms = {0, 1000 * 1000};
    if (*first)
        nanosleep(&ms, NULL);
    *first = false;
    return 0;
}

static void *keep_reading(void *arg)
{
    reader_loop_t *r = arg;
    ab_store_opts_t ro = {.readonly = true};
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *st = NULL;
    if (ab__store_open(&st, r->f->dir, &ro, &err) != AB_OK)
        return NULL;
    ab_read_t req = {.scope = AB_REPLAY_RUN, .thread = {"t", 1}, .run = {"r", 1}, .limit = 100};
    while (!atomic_load(&r->stop)) {
        bool first = true;
        uint32_t got = 0;
        if (ab__store_read(st, &req, linger, &first, &got, &err) == AB_OK && got > 0)
            atomic_fetch_add(&r->txns, 1);
    }
    ab__store_close(&st);
    return NULL;
}

/*
 * The bound holds while a reader keeps reading: the writer's own checkpoint at 4 x
 * wal_pages waits for the reader's transaction to end (RESTART), so the next commit
 * restarts the WAL. With a PASSIVE one the WAL restarted only if a commit began between two
 * of the reader's transactions, and grew past the bound (to 413 MiB in the broker under
 * load, docs/PERFORMANCE.md "A reader held the WAL's restart off").
 */
static void test_wal_bound_with_a_reader(void **state)
{
    fx_t *f = *state;
    ab_store_opts_t o = {
        .durability = AB_DURABILITY_PROCESS, .wal_pages = WAL_PAGES, .busy_timeout_ms = 5000};
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *st = NULL;
    assert_int_equal(ab__store_open(&st, f->dir, &o, &err), AB_OK);
    commit_events(st, 1, 1, 100);
    reader_loop_t r = {.f = f};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, keep_reading, &r), 0);
    struct timespec ms = {0, 1000 * 1000};
    for (int i = 0; i < 10000 && atomic_load(&r.txns) == 0; i++)
        nanosleep(&ms, NULL); /* bounded: 10 s */
    long most = 0;
    for (int c = 0; c < 300; c++) { /* 20 KB a commit, 6 MB in all */
        commit_events(st, (uint64_t)c * 10 + 2, 10, 2000);
        long w = file_size(f->wal);
        most = w > most ? w : most;
    }
    atomic_store(&r.stop, true);
    pthread_join(th, NULL);
    ab__store_close(&st);
    long txns = atomic_load(&r.txns);
    if (txns < 10)
        fail_msg("the reader read only %ld times", txns);
    /* 4 x 16 pages, then one commit (3-4 frames) and the header; no restart held off */
    long bound = (4 * WAL_PAGES + 8) * (8192L + 24) + 32;
    if (most > bound)
        fail_msg("WAL reached %ld bytes (bound %ld) beside a reader of %ld transactions", most,
                 bound, txns);
    assert_int_equal(rows_of_run(f), 3001);
}

/*
 * store_pace.c: a checkpoint of several AB_STORE_PACE_BYTES flushes the database file
 * after each slice it wrote (the checkpointer's connection opens it through the paced
 * VFS), on Linux with sync_file_range on SQLite's own descriptor (invariant 4), and
 * what it copied is the store's as before.
 */
static void test_checkpoint_paced(void **state)
{
    fx_t *f = *state;
    /* 1 MiB of WAL wakes the checkpointer; the writer would do it inline only at 4 MiB */
    int pages = AB_STORE_PACE_BYTES / 8192;
    ab_store_opts_t o = {.durability = AB_DURABILITY_PROCESS, .wal_pages = pages};
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *st = NULL;
    assert_non_null(ab__store_pace_vfs());
    assert_int_equal(ab__store_open(&st, f->dir, &o, &err), AB_OK);
    uint64_t ranged0 = 0, ranged = 0;
    uint64_t slices0 = ab__store_pace_slices(&ranged0);
    long before = file_size(f->db);
    commit_events(st, 1, 750, 4000); /* ~3 MB in one commit: about 3 slices */
    /* A PASSIVE checkpoint may copy nothing and still end well (SQLITE_OK with a reader it
     * may not overtake), and it is counted all the same: seen as 378 frames in the WAL and 0
     * copied, in a few runs of sixty with a faster commit. Until one has copied, each small
     * commit wakes the checkpointer again (bounded). */
    uint64_t seen = await_checkpoint(st).checkpoints, seq = 751;
    for (int i = 0; i < 100 && file_size(f->db) == before; i++) {
        commit_events(st, seq++, 1, 100);
        seen = await_checkpoints(st, seen + 1).checkpoints;
    }
    long after = file_size(f->db);
    uint64_t slices = ab__store_pace_slices(&ranged) - slices0;
    /* one flush per whole slice the checkpoint wrote into the database file */
    if (slices < 2 || slices > (uint64_t)((after - before) / AB_STORE_PACE_BYTES) + 1)
        fail_msg("%llu slices flushed for %ld bytes checkpointed", (unsigned long long)slices,
                 after - before);
#ifdef __linux__
    assert_int_equal(ranged - ranged0, slices); /* SQLite's descriptor was found */
#endif
    ab__store_close(&st);
    assert_int_equal(rows_of_run(f), seq - 1); /* 750, and any commit made to wake it */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_background_checkpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wal_bounded_and_complete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wal_restarts_early, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wal_file_cut_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wal_file_reused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wal_bound_with_a_reader, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkpoint_paced, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

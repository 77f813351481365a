/*
 * store_ckpt.c - WAL checkpoints off the writer's thread.
 *
 * SQLite's automatic checkpoint runs inside the COMMIT that crosses the
 * threshold, on the writer's thread: every committed page is read back from
 * the WAL and written to the database file there (and fsynced in fsync
 * durability). Measured in the broker, that made the checkpoints a large
 * share of the one serial thread of ingest (docs/PERFORMANCE.md). A writer
 * handle here gets a checkpointer: a thread with its own connection that
 * runs PASSIVE checkpoints, woken by the writer connection's WAL hook.
 *
 * Invariants:
 *  1. The WAL stays bounded: at AB_STORE_WAL_EARLY_PAGES pages after a
 *     commit (or st->wal_pages if fewer) the checkpointer is woken, so that a
 *     WAL written slowly restarts early, within a file whose blocks it then
 *     writes again instead of lengthening the file; at
 *     AB_STORE_WAL_INLINE_FACTOR (4) times st->wal_pages
 *     (it fell behind, or it could not start) the writer waits for the
 *     thread's checkpoint in progress, if any, and checkpoints itself. The
 *     WAL restarts (is written from its start again) only at the first
 *     commit after a checkpoint copied all of it while no reader used it, so
 *     the writer's checkpoint at 4x is a RESTART one: it copies everything,
 *     then waits until no reader still reads the WAL (readers that start
 *     once it has copied read the database file only). Meanwhile it closes
 *     the readers' gate of the file (store_file.c invariant 5), so reads of
 *     this process begin no new transaction, and waits at most
 *     AB_STORE_GATE_MAX_MS, or the handle's lock wait if shorter (0 on the
 *     broker's lone path: then it does not wait): with a
 *     PASSIVE checkpoint, or with a RESTART one and no gate, a reader that
 *     keeps reading (the broker's snapshot worker) held the restart off
 *     and the WAL grew past the bound. Then SQLite cuts a file larger than
 *     journal_size_limit (AB_STORE_WAL_LIMIT_FACTOR x wal_pages pages, set
 *     in store.c: also 4x) back to it. So the WAL file stays within 4x
 *     wal_pages pages plus one commit, and after each restart within 4x;
 *     only a reader of another process, or one whose transaction outlasts
 *     the wait, can hold a restart off, until a later commit's checkpoint.
 *  2. A checkpoint never changes what is committed or durable; a failed or
 *     busy one only leaves more pages for the next.
 *  3. The checkpointer is stopped and its connection closed before the
 *     writer connection closes, so the last close still checkpoints and
 *     removes the WAL as before.
 *  4. The thread blocks every signal: the process's signals (a broker's
 *     SIGTERM) go to the embedding program's own threads, never to a
 *     thread of the store's.
 *  5. On Linux the thread is named "ab-checkpoint", so that `top -H`, `ps -L`
 *     and `perf` tell it from the embedding program's main thread, whose
 *     name it would otherwise inherit.
 */
#include "store_int.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

struct ab_store_ckpt {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sqlite3 *db; /* the checkpointer's own connection */
    bool due, stop;
    bool busy; /* a checkpoint is running on the thread */
    bool hold; /* the writer checkpoints itself: the thread waits */
    pthread_cond_t idle;
    /* figures (under mu) for the stats entry: every checkpoint, by either thread */
    uint64_t n, slow; /* checkpoints run; those of AB_STORE_CKPT_SLOW_US or more */
    uint64_t last_slow_us, max_us;
};

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Count one checkpoint of @p us (with c->mu held). */
static void note_ckpt(ab_store_ckpt_t *c, int64_t us)
{
    c->n++;
    if ((uint64_t)us > c->max_us)
        c->max_us = (uint64_t)us;
    if (us >= AB_STORE_CKPT_SLOW_US) {
        c->slow++;
        c->last_slow_us = (uint64_t)us;
    }
}

void ab__store_ckpt_figures(ab_store_t *st, ab_plugin_stats_t *out)
{
    ab_store_ckpt_t *c = st->ckpt;
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    out->checkpoints = c->n;
    out->checkpoints_slow = c->slow;
    out->checkpoint_last_slow_us = c->last_slow_us;
    out->checkpoint_max_us = c->max_us;
    pthread_mutex_unlock(&c->mu);
}

static void *ckpt_main(void *arg)
{
    ab_store_ckpt_t *c = arg;
#ifdef __linux__
    (void)prctl(PR_SET_NAME, "ab-checkpoint", 0, 0, 0); /* invariant 5 */
#endif
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while ((!c->due || c->hold) && !c->stop)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->stop)
            break;
        c->due = false;
        c->busy = true;
        pthread_mutex_unlock(&c->mu);
        /* PASSIVE: never waits for the writer or readers (invariant 2) */
        int64_t t0 = mono_us();
        (void)sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        int64_t dt = mono_us() - t0;
        pthread_mutex_lock(&c->mu);
        note_ckpt(c, dt);
        c->busy = false;
        pthread_cond_broadcast(&c->idle);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* The writer's checkpoint at the WAL's bound: everything copied, and no reader left in
 * the WAL, with the readers' gate closed and a short lock wait (invariant 1). */
static void checkpoint_at_bound(ab_store_t *st, sqlite3 *db, const char *name)
{
    ab__store_gate_close(st);
    sqlite3_busy_timeout(db,
                         st->busy_now < AB_STORE_GATE_MAX_MS ? st->busy_now : AB_STORE_GATE_MAX_MS);
    (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_RESTART, NULL, NULL);
    sqlite3_busy_timeout(db, st->busy_now);
    ab__store_gate_open(st);
}

/* The writer connection's WAL hook: after each commit, with the WAL's size in pages. */
static int on_wal(void *arg, sqlite3 *db, const char *name, int pages)
{
    ab_store_t *st = arg;
    ab_store_ckpt_t *c = st->ckpt;
    int wake = st->wal_pages < AB_STORE_WAL_EARLY_PAGES ? st->wal_pages : AB_STORE_WAL_EARLY_PAGES;
    if (pages < (c != NULL ? wake : st->wal_pages))
        return SQLITE_OK;
    if (c != NULL && pages < AB_STORE_WAL_INLINE_FACTOR * st->wal_pages) {
        pthread_mutex_lock(&c->mu);
        c->due = true;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
        return SQLITE_OK;
    }
    /* no checkpointer, or it is far behind: the writer does it (invariant 1),
     * after the thread's checkpoint in progress (only one runs at a time, and
     * the WAL restarts only when no checkpoint reads it); at the bound it also
     * waits for the readers, so that the next commit restarts the WAL */
    bool bound = pages >= AB_STORE_WAL_INLINE_FACTOR * st->wal_pages;
    if (c != NULL) {
        pthread_mutex_lock(&c->mu);
        c->hold = true;
        while (c->busy)
            pthread_cond_wait(&c->idle, &c->mu);
        pthread_mutex_unlock(&c->mu);
    }
    int64_t t0 = mono_us();
    if (bound)
        checkpoint_at_bound(st, db, name);
    else
        (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    int64_t dt = mono_us() - t0;
    if (c != NULL) {
        pthread_mutex_lock(&c->mu);
        note_ckpt(c, dt);
        c->hold = false;
        pthread_mutex_unlock(&c->mu);
    }
    return SQLITE_OK;
}

/* Start the thread with every blockable signal blocked (invariant 4). */
static int start_thread(ab_store_ckpt_t *c)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&c->th, NULL, ckpt_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

void ab__store_ckpt_start(ab_store_t *st)
{
    st->wal_pages = st->wal_pages > 0 ? st->wal_pages : AB_STORE_WAL_PAGES;
    sqlite3_wal_hook(st->db, on_wal, st); /* replaces SQLite's automatic checkpoint */
    ab_store_ckpt_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return; /* the writer checkpoints at 4x (invariant 1) */
    /* the paced VFS: the database file is written to the disk in slices (store_pace.c) */
    int rc = sqlite3_open_v2(st->path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                             ab__store_pace_vfs());
    /* a connection checkpoints only once it has read the file and so opened the WAL */
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(c->db, "PRAGMA schema_version", NULL, NULL, NULL);
    if (rc == SQLITE_OK && pthread_mutex_init(&c->mu, NULL) == 0) {
        if (pthread_cond_init(&c->cv, NULL) == 0) {
            if (pthread_cond_init(&c->idle, NULL) == 0) {
                if (start_thread(c) == 0) {
                    st->ckpt = c;
                    return;
                }
                pthread_cond_destroy(&c->idle);
            }
            pthread_cond_destroy(&c->cv);
        }
        pthread_mutex_destroy(&c->mu);
    }
    sqlite3_close(c->db);
    free(c);
}

void ab__store_ckpt_stop(ab_store_t *st)
{
    ab_store_ckpt_t *c = st->ckpt;
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->th, NULL);
    pthread_cond_destroy(&c->idle);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    sqlite3_close(c->db); /* before the writer's (invariant 3) */
    free(c);
    st->ckpt = NULL;
}

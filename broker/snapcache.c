/*
 * snapcache.c - a broker's cache of thread snapshot builders, shared by its
 * replay readers (SNAPSHOT) and its snapshot worker, so that a repeated
 * SNAPSHOT or the next stored snapshot of a thread folds only the events
 * after the cached position instead of restoring the stored document.
 *
 * Invariants:
 *  1. A taken entry is owned by exactly one user until it is put back: a
 *     builder is never used by two threads. It stays listed, marked busy
 *     (unless invariant 4 unlists it), and a second take of the thread waits
 *     for the put (cheaper than rebuilding the thread from its stored
 *     snapshot).
 *  2. Bounded: at most AB_SNAPCACHE_ENTRIES entries and AB_SNAPCACHE_BYTES
 *     estimated bytes (builder estimate plus the cached reply); put evicts
 *     least recently used entries, and frees an entry larger than the bound.
 *  3. One cache per broker, owned by its handle (ab__shared_t.snaps, made at
 *     start, freed after every thread joined): no state is shared between
 *     brokers of one process, and keys are thread ids alone.
 *  4. When two users built entries of one thread, put keeps the one at the
 *     higher position. A put that finds the thread's listed entry taken by
 *     another user (busy: its builder may not be read) unlists that one and
 *     lists its own; the other user's put then compares the two.
 */
#include "snap_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct ab__snapcache {
    pthread_mutex_t mu;
    pthread_cond_t returned;
    ab_snapent_t *head, *tail; /* most recently used first */
    size_t total_bytes, nentries;
};

static bool same(const ab_snapent_t *e, ab_str_t thread)
{
    return e->tlen == thread.len && memcmp(e->thread, thread.ptr, thread.len) == 0;
}

static void unlink_entry(ab__snapcache_t *c, ab_snapent_t *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
    e->listed = false;
    c->total_bytes -= e->bytes;
    c->nentries--;
}

static void snapent_free(ab_snapent_t *e)
{
    if (e == NULL)
        return;
    ab_snapshot_builder_destroy(&e->sb);
    ab_buf_free(&e->reply);
    free(e);
}

static ab_snapent_t *find(const ab__snapcache_t *c, ab_str_t thread)
{
    ab_snapent_t *e = c->head;
    while (e && !same(e, thread))
        e = e->next;
    return e;
}

ab__snapcache_t *ab__snapcache_new(void)
{
    ab__snapcache_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return NULL;
    }
    if (pthread_cond_init(&c->returned, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        return NULL;
    }
    return c;
}

void ab__snapcache_destroy(ab__snapcache_t **cp)
{
    ab__snapcache_t *c = cp != NULL ? *cp : NULL;
    if (c == NULL)
        return;
    while (c->head != NULL) {
        ab_snapent_t *e = c->head;
        unlink_entry(c, e);
        snapent_free(e);
    }
    pthread_cond_destroy(&c->returned);
    pthread_mutex_destroy(&c->mu);
    free(c);
    *cp = NULL;
}

static size_t entry_bytes(const ab_snapent_t *e)
{
    return sizeof(*e) + ab_snapshot_builder_memory(e->sb) + e->reply.cap + 4 * e->unmeasured;
}

bool ab__snapcache_fits(const ab_snapent_t *e)
{
    return e != NULL && e->sb != NULL && entry_bytes(e) <= AB_SNAPCACHE_BYTES;
}

void ab__snapcache_discard(ab__snapcache_t *c, ab_snapent_t *e)
{
    if (e == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    if (e->listed)
        unlink_entry(c, e);
    pthread_cond_broadcast(&c->returned);
    pthread_mutex_unlock(&c->mu);
    snapent_free(e);
}

ab_snapent_t *ab__snapcache_take(ab__snapcache_t *c, ab_str_t thread)
{
    pthread_mutex_lock(&c->mu);
    ab_snapent_t *e = find(c, thread);
    while (e && e->busy) {
        pthread_cond_wait(&c->returned, &c->mu);
        e = find(c, thread); /* it may have been replaced or dropped meanwhile */
    }
    if (e)
        e->busy = true;
    pthread_mutex_unlock(&c->mu);
    return e;
}

/* Keep @p e (not listed) unless an idle entry of its thread at least as far
 * along is listed (invariant 4); @return the entry to free (e, the one it
 * replaces, or NULL: a busy one it unlists stays its user's). */
static ab_snapent_t *insert_locked(ab__snapcache_t *c, ab_snapent_t *e)
{
    ab_snapent_t *old = find(c, (ab_str_t){e->thread, e->tlen});
    if (e->bytes > AB_SNAPCACHE_BYTES)
        return e;
    if (old && !old->busy &&
        ab_snapshot_builder_position(old->sb) >= ab_snapshot_builder_position(e->sb))
        return e; /* a newer one came back first */
    if (old)
        unlink_entry(c, old);
    if (old && old->busy)
        old = NULL; /* its user puts or discards it, and is then compared with e */
    e->listed = true;
    e->next = c->head;
    e->prev = NULL;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (!c->tail)
        c->tail = e;
    c->total_bytes += e->bytes;
    c->nentries++;
    return old;
}

/* Unlink least recently used idle entries over the bounds; @return them, a list through next. */
static ab_snapent_t *evict_locked(ab__snapcache_t *c)
{
    ab_snapent_t *evicted = NULL;
    while (c->tail && c->tail != c->head &&
           (c->total_bytes > AB_SNAPCACHE_BYTES || c->nentries > AB_SNAPCACHE_ENTRIES)) {
        ab_snapent_t *v = c->tail;
        while (v != c->head && v->busy)
            v = v->prev;
        if (v == c->head)
            break;
        unlink_entry(c, v);
        v->next = evicted;
        evicted = v;
    }
    return evicted;
}

void ab__snapcache_put(ab__snapcache_t *c, ab_snapent_t *e)
{
    if (e == NULL || e->sb == NULL) {
        ab__snapcache_discard(c, e);
        return;
    }
    size_t bytes = entry_bytes(e);
    pthread_mutex_lock(&c->mu);
    if (e->listed)
        unlink_entry(c, e); /* taken from the cache: re-inserted below */
    e->busy = false;
    e->bytes = bytes;
    ab_snapent_t *gone = insert_locked(c, e);
    ab_snapent_t *evicted = evict_locked(c); /* freed unlocked */
    pthread_cond_broadcast(&c->returned);
    pthread_mutex_unlock(&c->mu);
    snapent_free(gone);
    while (evicted) {
        ab_snapent_t *n = evicted->next;
        snapent_free(evicted);
        evicted = n;
    }
}

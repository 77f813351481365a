/*
 * snapcache.c - the broker-wide cache of thread snapshot builders, shared by
 * the replay readers (SNAPSHOT) and the snapshot worker, so that a repeated
 * SNAPSHOT or the next stored snapshot of a thread folds only the events
 * after the cached position instead of restoring the stored document.
 *
 * Invariants:
 *  1. A taken entry is owned by exactly one user until it is put back: a
 *     builder is never used by two threads. It stays listed, marked busy,
 *     and a second take of the thread waits for the put (cheaper than
 *     rebuilding the thread from its stored snapshot).
 *  2. Bounded: at most AB_SNAPCACHE_ENTRIES entries and AB_SNAPCACHE_BYTES
 *     estimated bytes (builder estimate plus the cached reply); put evicts
 *     least recently used entries, and frees an entry larger than the bound.
 *  3. Keys are (broker instance, thread): the instance is random per start,
 *     so brokers of one process (tests) never see each other's entries.
 *  4. When two users built entries of one thread, put keeps the one at the
 *     higher position.
 */
#include "snap_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t returned = PTHREAD_COND_INITIALIZER;
static ab_snapent_t *head, *tail; /* most recently used first */
static size_t total_bytes, nentries;

static bool same(const ab_snapent_t *e, const char *instance, ab_str_t thread)
{
    return e->tlen == thread.len && memcmp(e->thread, thread.ptr, thread.len) == 0 &&
           strcmp(e->instance, instance) == 0;
}

static void unlink_entry(ab_snapent_t *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        tail = e->prev;
    e->prev = e->next = NULL;
    e->listed = false;
    total_bytes -= e->bytes;
    nentries--;
}

static void snapent_free(ab_snapent_t *e)
{
    if (e == NULL)
        return;
    ab_snapshot_builder_destroy(&e->sb);
    ab_buf_free(&e->reply);
    free(e);
}

static ab_snapent_t *find(const char *instance, ab_str_t thread)
{
    ab_snapent_t *e = head;
    while (e && !same(e, instance, thread))
        e = e->next;
    return e;
}

static size_t entry_bytes(const ab_snapent_t *e)
{
    return sizeof(*e) + ab_snapshot_builder_memory(e->sb) + e->reply.cap + 4 * e->unmeasured;
}

bool ab__snapcache_fits(const ab_snapent_t *e)
{
    return e != NULL && e->sb != NULL && entry_bytes(e) <= AB_SNAPCACHE_BYTES;
}

void ab__snapcache_discard(ab_snapent_t *e)
{
    if (e == NULL)
        return;
    pthread_mutex_lock(&mu);
    if (e->listed)
        unlink_entry(e);
    pthread_cond_broadcast(&returned);
    pthread_mutex_unlock(&mu);
    snapent_free(e);
}

ab_snapent_t *ab__snapcache_take(const char *instance, ab_str_t thread)
{
    pthread_mutex_lock(&mu);
    ab_snapent_t *e = find(instance, thread);
    while (e && e->busy) {
        pthread_cond_wait(&returned, &mu);
        e = find(instance, thread); /* it may have been replaced or dropped meanwhile */
    }
    if (e)
        e->busy = true;
    pthread_mutex_unlock(&mu);
    return e;
}

void ab__snapcache_put(ab_snapent_t *e)
{
    if (e == NULL || e->sb == NULL) {
        ab__snapcache_discard(e);
        return;
    }
    size_t bytes = entry_bytes(e);
    ab_snapent_t *gone = NULL;
    pthread_mutex_lock(&mu);
    if (e->listed)
        unlink_entry(e); /* taken from the cache: re-inserted below */
    e->busy = false;
    e->bytes = bytes;
    ab_snapent_t *old = find(e->instance, (ab_str_t){e->thread, e->tlen});
    if (bytes > AB_SNAPCACHE_BYTES) {
        gone = e;
    } else if (old && (old->busy || ab_snapshot_builder_position(old->sb) >=
                                        ab_snapshot_builder_position(e->sb))) {
        gone = e; /* a newer one came back first */
    } else {
        if (old)
            unlink_entry(old);
        gone = old;
        e->listed = true;
        e->next = head;
        e->prev = NULL;
        if (head)
            head->prev = e;
        head = e;
        if (!tail)
            tail = e;
        total_bytes += e->bytes;
        nentries++;
    }
    ab_snapent_t *evicted = NULL; /* a list through next, freed unlocked */
    while (tail && tail != head &&
           (total_bytes > AB_SNAPCACHE_BYTES || nentries > AB_SNAPCACHE_ENTRIES)) {
        ab_snapent_t *v = tail;
        while (v != head && v->busy)
            v = v->prev;
        if (v == head)
            break;
        unlink_entry(v);
        v->next = evicted;
        evicted = v;
    }
    pthread_cond_broadcast(&returned);
    pthread_mutex_unlock(&mu);
    snapent_free(gone);
    while (evicted) {
        ab_snapent_t *n = evicted->next;
        snapent_free(evicted);
        evicted = n;
    }
}

void ab__snapcache_drop_instance(const char *instance)
{
    ab_snapent_t *dropped = NULL;
    pthread_mutex_lock(&mu);
    for (ab_snapent_t *e = head, *n; e; e = n) {
        n = e->next;
        if (strcmp(e->instance, instance) == 0 && !e->busy) {
            unlink_entry(e);
            e->next = dropped;
            dropped = e;
        }
    }
    pthread_mutex_unlock(&mu);
    while (dropped) {
        ab_snapent_t *n = dropped->next;
        snapent_free(dropped);
        dropped = n;
    }
}

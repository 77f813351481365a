/*
 * snapcount.c - the snapshot scheduler's bounded map of per-thread counts
 * (snapcount.h).
 *
 * Invariants:
 *  1. A slot is free exactly when its hash is 0 (and its len then 0); a held
 *     thread's hash is its FNV-1a hash, 1 when that is 0.
 *  2. Every held thread is found by probing from its home slot (hash mod
 *     AB__SNAPCOUNT_SLOTS) without meeting a free slot: a removal shifts the
 *     later entries of its cluster back instead of leaving a tombstone.
 *  3. At most AB__SNAPCOUNT_THREADS threads are held, so a probe always ends.
 */
#include "snapcount.h"
#include "snapfeed.h"

#include "ab_common.h"

#include <stdlib.h>
#include <string.h>

#define MASK (AB__SNAPCOUNT_SLOTS - 1)

static uint64_t hash_of(ab_str_t thread)
{
    uint64_t h = ab__fnv64(thread.ptr, thread.len);
    return h + (h == 0); /* invariant 1 */
}

static bool usable(ab_str_t thread)
{
    return thread.len > 0 && thread.len <= AB_ID_MAX_BYTES;
}

static ab__snapcount_t *find_h(ab__snapcounts_t *m, ab_str_t thread, uint64_t h)
{
    if (m->slot == NULL)
        return NULL;
    for (size_t i = h & MASK; m->hash[i] != 0; i = (i + 1) & MASK)
        if (m->hash[i] == h && m->slot[i].len == thread.len &&
            memcmp(m->slot[i].id, thread.ptr, thread.len) == 0)
            return &m->slot[i];
    return NULL;
}

ab__snapcount_t *ab__snapcount_find(ab__snapcounts_t *m, ab_str_t thread)
{
    return usable(thread) ? find_h(m, thread, hash_of(thread)) : NULL;
}

/* Free slot @p i, shifting later entries of its cluster back (invariant 2). */
static void remove_at(ab__snapcounts_t *m, size_t i)
{
    size_t j = i;
    for (;;) {
        m->slot[i].len = 0;
        m->slot[i].feed = NULL; /* moved on, or freed by the caller */
        m->hash[i] = 0;
        for (;;) {
            j = (j + 1) & MASK;
            if (m->hash[j] == 0) {
                m->n--;
                return;
            }
            size_t k = m->hash[j] & MASK;
            /* the entry at j may move to i when its home k is not cyclically in (i, j] */
            if (i <= j ? (i >= k || k > j) : (i >= k && k > j))
                break;
        }
        m->slot[i] = m->slot[j];
        m->hash[i] = m->hash[j];
        i = j;
    }
}

static bool alloc_once(ab__snapcounts_t *m)
{
    if (m->slot != NULL)
        return true;
    m->slot = calloc(AB__SNAPCOUNT_SLOTS, sizeof(*m->slot));
    m->hash = calloc(AB__SNAPCOUNT_SLOTS, sizeof(*m->hash));
    if (m->slot != NULL && m->hash != NULL)
        return true;
    ab__snapcount_free(m);
    return false;
}

ab__snapcount_t *ab__snapcount_slot(ab__snapcounts_t *m, ab_str_t thread)
{
    if (!usable(thread))
        return NULL;
    uint64_t h = hash_of(thread);
    ab__snapcount_t *found = find_h(m, thread, h);
    if (found != NULL || !alloc_once(m))
        return found;
    if (m->n >= AB__SNAPCOUNT_THREADS) { /* invariant 3: evict the one nearest home */
        size_t v = h & MASK;
        while (m->hash[v] == 0)
            v = (v + 1) & MASK;
        ab__snapfeed_free(&m->slot[v].feed);
        remove_at(m, v);
        m->evictions++;
    }
    size_t i = h & MASK;
    while (m->hash[i] != 0)
        i = (i + 1) & MASK;
    ab__snapcount_t *c = &m->slot[i];
    memset(c, 0, offsetof(ab__snapcount_t, id));
    c->len = (uint32_t)thread.len;
    memcpy(c->id, thread.ptr, thread.len);
    m->hash[i] = h;
    m->n++;
    return c;
}

void ab__snapcount_free(ab__snapcounts_t *m)
{
    for (size_t i = 0; m->slot != NULL && i < AB__SNAPCOUNT_SLOTS; i++)
        if (m->hash[i] != 0)
            ab__snapfeed_free(&m->slot[i].feed);
    free(m->slot);
    free(m->hash);
    memset(m, 0, sizeof(*m));
}

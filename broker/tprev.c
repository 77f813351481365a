/*
 * tprev.c - each thread's last committed position, bounded (tprev.h).
 *
 * Invariants:
 *  1. Every position in (floor, last] was noted, in ascending order, each
 *     once; a position that is not last + 1 raises floor to pos - 1 (and one
 *     not above last raises it to last), so the claim holds again.
 *  2. An entry holds the thread's highest noted position. For a thread with
 *     no entry, its set's `evicted` is at least every position any evicted
 *     thread of the set was noted at, so the thread has no noted event above
 *     it (a thread never held has none at all above floor).
 *  3. Hence the answer max(entry or evicted, floor) is below pos and the
 *     thread has no committed event strictly between it and pos.
 *  4. Memory is allocated once (init); noting never allocates.
 */
#include "tprev.h"

#include "ab_common.h"

#include <stdlib.h>
#include <string.h>

ab_status_t ab__tprev_init(ab__tprev_t *t, size_t nsets, uint64_t head)
{
    memset(t, 0, sizeof(*t));
    size_t n = 1;
    while (n < (nsets ? nsets : AB__TPREV_SETS))
        n <<= 1;
    t->floor = t->last = head;
    size_t tags = n * AB__TPREV_WAYS * sizeof(*t->tag); /* a multiple of 64 */
    t->tag = aligned_alloc(64, tags);
    if (t->tag != NULL)
        memset(t->tag, 0, tags);
    t->ids = calloc(n * AB__TPREV_WAYS, sizeof(*t->ids));
    t->evicted = calloc(n, sizeof(*t->evicted));
    if (t->tag == NULL || t->ids == NULL || t->evicted == NULL) {
        ab__tprev_free(t);
        return AB_NOMEM;
    }
    t->nsets = n;
    return AB_OK;
}

void ab__tprev_free(ab__tprev_t *t)
{
    free(t->tag);
    free(t->ids);
    free(t->evicted);
    t->tag = NULL;
    t->ids = NULL;
    t->evicted = NULL;
    t->nsets = 0;
}

static bool ent_is(const ab__tprev_t *t, size_t i, uint64_t h, ab_str_t thread)
{
    const ab__tprev_tag_t *g = &t->tag[i];
    return g->pos != 0 && g->hash == h && t->ids[i].len == thread.len &&
           memcmp(t->ids[i].id, thread.ptr, thread.len) == 0;
}

/* The tag of @p thread's entry in its set, taking the lowest one (counted as
 * evicted, invariant 2) when it has none; @p held says which. */
static ab__tprev_tag_t *slot(ab__tprev_t *t, ab_str_t thread, size_t *set, bool *held)
{
    uint64_t h = ab__fnv64(thread.ptr, thread.len);
    *set = (size_t)(h & (t->nsets - 1));
    size_t first = *set * AB__TPREV_WAYS, low = first;
    for (size_t i = first; i < first + AB__TPREV_WAYS; i++) {
        if (ent_is(t, i, h, thread)) {
            *held = true;
            return &t->tag[i];
        }
        if (t->tag[i].pos < t->tag[low].pos)
            low = i;
    }
    *held = false;
    ab__tprev_tag_t *g = &t->tag[low];
    if (g->pos != 0) {
        if (g->pos > t->evicted[*set])
            t->evicted[*set] = g->pos;
        t->evictions++;
    }
    g->hash = h;
    g->pos = 0;
    t->ids[low].len = (uint16_t)thread.len;
    memcpy(t->ids[low].id, thread.ptr, thread.len);
    return g;
}

bool ab__tprev_note(ab__tprev_t *t, ab_str_t thread, uint64_t pos, uint64_t *prev)
{
    if (t->tag == NULL || thread.len > AB_ID_MAX_BYTES || thread.len == 0)
        return false;
    if (pos <= t->last) { /* not growing: claim nothing at or below the last one (invariant 1) */
        t->gaps++;
        t->floor = t->last;
        return false;
    }
    if (pos != t->last + 1) {
        t->gaps++;
        t->floor = pos - 1;
    }
    t->last = pos;
    size_t set = 0;
    bool held = false;
    ab__tprev_tag_t *e = slot(t, thread, &set, &held);
    uint64_t known = held ? e->pos : t->evicted[set];
    if (held)
        t->hits++;
    else
        t->misses++;
    *prev = known > t->floor ? known : t->floor;
    e->pos = pos;
    return true;
}

size_t ab__tprev_count(const ab__tprev_t *t)
{
    size_t n = 0;
    for (size_t i = 0; i < t->nsets * AB__TPREV_WAYS; i++)
        n += t->tag[i].pos != 0;
    return n;
}

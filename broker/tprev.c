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
    t->ent = calloc(n * AB__TPREV_WAYS, sizeof(*t->ent));
    t->evicted = calloc(n, sizeof(*t->evicted));
    if (t->ent == NULL || t->evicted == NULL) {
        ab__tprev_free(t);
        return AB_NOMEM;
    }
    t->nsets = n;
    return AB_OK;
}

void ab__tprev_free(ab__tprev_t *t)
{
    free(t->ent);
    free(t->evicted);
    t->ent = NULL;
    t->evicted = NULL;
    t->nsets = 0;
}

static bool ent_is(const ab__tprev_ent_t *e, uint64_t h, ab_str_t thread)
{
    return e->pos != 0 && e->hash == h && e->len == thread.len &&
           memcmp(e->id, thread.ptr, thread.len) == 0;
}

/* The entry of @p thread in its set, taking the lowest one (counted as
 * evicted, invariant 2) when it has none; @p held says which. */
static ab__tprev_ent_t *slot(ab__tprev_t *t, ab_str_t thread, size_t *set, bool *held)
{
    uint64_t h = ab__fnv64(thread.ptr, thread.len);
    *set = (size_t)(h & (t->nsets - 1));
    ab__tprev_ent_t *row = &t->ent[*set * AB__TPREV_WAYS], *low = row;
    for (size_t i = 0; i < AB__TPREV_WAYS; i++) {
        if (ent_is(&row[i], h, thread)) {
            *held = true;
            return &row[i];
        }
        if (row[i].pos < low->pos)
            low = &row[i];
    }
    *held = false;
    if (low->pos != 0) {
        if (low->pos > t->evicted[*set])
            t->evicted[*set] = low->pos;
        t->evictions++;
    }
    low->hash = h;
    low->len = (uint16_t)thread.len;
    memcpy(low->id, thread.ptr, thread.len);
    low->pos = 0;
    return low;
}

bool ab__tprev_note(ab__tprev_t *t, ab_str_t thread, uint64_t pos, uint64_t *prev)
{
    if (t->ent == NULL || thread.len > AB_ID_MAX_BYTES || thread.len == 0)
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
    ab__tprev_ent_t *e = slot(t, thread, &set, &held);
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
        n += t->ent[i].pos != 0;
    return n;
}

/*
 * snapshot_runs.c - the snapshot builder's index of its runs.
 *
 * Folding one event looked its run up four times in tables as large as the
 * thread's runs: the checkpoint's last seq, the projection's run item (in the
 * reducer and again in the builder) and the set of runs with events kept.
 * With thousands of runs taking turns each lookup missed the cache two or
 * three times. The index finds all of them with one probe. It also numbers
 * the runs, so a kept event names its run's record, and a run that ends drops
 * its events by bumping the record's generation instead of a pass over every
 * kept event (which made a thread of many runs ending in turn quadratic).
 *
 * Invariants:
 *  1. A record, once made, keeps its number for the builder's life; its
 *     pointers are borrowed from the builder: @c last is the run's node in
 *     the checkpoint's runs (NULL until the run has one), @c item the
 *     projection's run item (NULL until known; the reducer never removes a
 *     run item from its collection).
 *  2. The slots are open addressing with linear probing, at most half full;
 *     slot 0 is empty (a slot holds record number + 1). A slot also holds
 *     the high half of the run's hash, so a probe reads a record only when
 *     that half matches. Keys live in one growable buffer, named by offset.
 *  3. Nothing changes when an allocation fails.
 */
#include "alloc_internal.h"
#include "snapshot_internal.h"

#include <string.h>

uint64_t ab__sn_run_hash(const char *run, size_t n)
{
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)run[i]) * 1099511628211ull;
    return h;
}

static bool rec_is(const sn_runs_t *x, const sn_run_t *r, const char *run, size_t n, uint64_t h)
{
    return r->hash == h && r->len == n && memcmp(x->keys.data + r->off, run, n) == 0;
}

sn_run_t *ab__sn_runs_get(const sn_runs_t *x, const char *run, size_t n, uint64_t h)
{
    if (x->cap == 0)
        return NULL;
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t i = (size_t)h & (x->cap - 1);; i = (i + 1) & (x->cap - 1)) {
        const sn_slot_t *s = &x->slot[i];
        if (s->rec == 0)
            return NULL;
        if (s->tag == tag && rec_is(x, &x->rec[s->rec - 1], run, n, h))
            return &x->rec[s->rec - 1];
    }
}

static void slot_set(sn_slot_t *slot, size_t cap, uint64_t h, uint32_t rec)
{
    size_t i = (size_t)h & (cap - 1);
    while (slot[i].rec != 0)
        i = (i + 1) & (cap - 1);
    slot[i] = (sn_slot_t){.tag = (uint32_t)(h >> 32), .rec = rec};
}

/* Room for one more run; @return 0, or -1 with nothing changed. */
static int room(sn_runs_t *x)
{
    if (x->n + 1 > x->reccap) {
        size_t cap = x->reccap ? 2 * x->reccap : 32;
        sn_run_t *rec = ab__realloc(x->rec, cap * sizeof *rec);
        if (!rec)
            return -1;
        x->rec = rec;
        x->reccap = cap;
    }
    if ((x->n + 1) * 2 <= x->cap)
        return 0;
    size_t cap = x->cap ? 2 * x->cap : 64;
    sn_slot_t *slot = ab__calloc(cap, sizeof *slot);
    if (!slot)
        return -1;
    for (size_t i = 0; i < x->n; i++)
        slot_set(slot, cap, x->rec[i].hash, (uint32_t)i + 1);
    ab__free(x->slot);
    x->slot = slot;
    x->cap = cap;
    return 0;
}

sn_run_t *ab__sn_runs_put(sn_runs_t *x, const char *run, size_t n, uint64_t h)
{
    if (n > UINT32_MAX || x->keys.len > UINT32_MAX - n || x->n >= SN_NO_RUN - 1 || room(x) != 0)
        return NULL;
    size_t off = x->keys.len;
    if (ab_buf_append(&x->keys, run, n) != AB_OK)
        return NULL;
    sn_run_t *r = &x->rec[x->n];
    *r = (sn_run_t){.hash = h, .off = (uint32_t)off, .len = (uint32_t)n};
    slot_set(x->slot, x->cap, h, (uint32_t)++x->n);
    return r;
}

size_t ab__sn_runs_bytes(const sn_runs_t *x)
{
    return x->cap * sizeof(sn_slot_t) + x->reccap * sizeof(sn_run_t) + x->keys.cap;
}

void ab__sn_runs_free(sn_runs_t *x)
{
    ab__free(x->slot);
    ab__free(x->rec);
    ab_buf_free(&x->keys);
    memset(x, 0, sizeof *x);
}

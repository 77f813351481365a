/*
 * store_cache.c - the writer's in-memory run cache: (thread, run) -> the
 * run's rowid, last committed seq and newest chunk, so an append needs no
 * SQL at all; and its thread cache: a thread's rowid -> its newest chunk,
 * the tail its next chunk links to.
 *
 * Invariants:
 *  1. An entry's rowid and last_seq are the committed state: they change
 *     only after a successful COMMIT (store_rw.c). A failed commit clears
 *     the whole cache, so no entry ever names a rolled-back row.
 *  2. The cache is cleared whenever another connection committed to the
 *     database (PRAGMA data_version changed at begin): it is never stale.
 *  3. Entries are only added or cleared whole (no deletion), so linear
 *     probing needs no tombstones; the table stays at most half full.
 *  4. The two caches are cleared together: a run entry's pointer to its
 *     thread's entry never outlives it.
 *  5. ab__store_cache_ahead() only asks the CPU to load what a later lookup
 *     will read (prefetch hints, which never fault): no state, no answer.
 */
#include "ab_common.h"
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

void ab__store_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void ab__store_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint32_t ab__store_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

uint64_t ab__store_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t hash_ids(const char *t, size_t tl, const char *r, size_t rl)
{
    static const uint8_t sep = 0xff; /* separator: ("ab","c") != ("a","bc") */
    uint64_t h = ab__fnv64(t, tl);
    h = ab__fnv64_more(h, &sep, 1);
    return ab__fnv64_more(h, r, rl);
}

void ab__store_cache_clear(ab_store_t *st)
{
    for (size_t i = 0; i < st->nslots; i++) {
        free(st->slots[i]);
        st->slots[i] = NULL;
    }
    for (size_t i = 0; i < st->ntslots; i++) { /* invariant 4 */
        free(st->tslots[i]);
        st->tslots[i] = NULL;
    }
    st->nruns = 0;
    st->nthreads = 0;
    st->ntouched = 0;
    st->nttouched = 0;
    st->nrecs = 0;
}

void ab__store_cache_free(ab_store_t *st)
{
    ab__store_cache_clear(st);
    free(st->slots);
    free(st->tslots);
    free(st->touched);
    free(st->ttouched);
    free(st->tails);
    free(st->recs);
    ab_buf_free(&st->scratch);
    free(st->resume);
    st->resume = NULL;
    st->resume_ok = false;
    ab_buf_free(&st->parents);
    st->slots = NULL;
    st->tslots = NULL;
    st->touched = NULL;
    st->ttouched = NULL;
    st->tails = NULL;
    st->recs = NULL;
    st->nslots = st->ntslots = st->touched_cap = st->ttouched_cap = st->recs_cap = 0;
    st->tails_cap = 0;
}

static size_t slot_of(const ab_store_t *st, uint64_t h, const char *t, size_t tl, const char *r,
                      size_t rl)
{
    size_t mask = st->nslots - 1;
    size_t i = (size_t)h & mask;
    for (;;) {
        const run_ent_t *e = st->slots[i];
        if (!e || (e->hash == h && e->thread_len == tl && e->run_len == rl &&
                   memcmp(e->thread, t, tl) == 0 && memcmp(e->run, r, rl) == 0))
            return i;
        i = (i + 1) & mask;
    }
}

uint64_t ab__store_cache_hash(ab_str_t thread, ab_str_t run)
{
    /* asked before the ids are checked: a NULL id hashes as empty, and is refused later */
    return hash_ids(thread.ptr, thread.ptr ? thread.len : 0, run.ptr, run.ptr ? run.len : 0);
}

/*
 * Lookups ahead of a batch's appends (invariant 5). With 100,000 runs cached a lookup
 * misses the CPU's caches twice in a row (the slot, then the entry it points to) and
 * its thread's entry once more; at step @p i the slot of event i + AB__STORE_AHEAD is
 * asked for, the entry of event i + AB__STORE_AHEAD / 2 (its slot asked for half the
 * distance ago: most lookups end at their first slot) and the thread entry of event
 * i + AB__STORE_AHEAD / 4, so the misses of several events overlap. The ring keeps
 * the hashes of events i .. i + AB__STORE_AHEAD - 1 (index mod AB__STORE_AHEAD), each
 * computed once: the lookup of event i takes it from there.
 */
static void ahead_slot(const ab_store_t *st, const ab_append_event_t *ev, uint64_t *ring, size_t k)
{
    uint64_t h = ab__store_cache_hash(ev->thread, ev->run);
    ring[k % AB__STORE_AHEAD] = h;
    if (st->nslots) /* none before the first lookup grows the table */
        __builtin_prefetch(&st->slots[h & (st->nslots - 1)]);
}

static const run_ent_t *ahead_ent(const ab_store_t *st, const uint64_t *ring, size_t k)
{
    return st->nslots ? st->slots[ring[k % AB__STORE_AHEAD] & (st->nslots - 1)] : NULL;
}

uint64_t ab__store_cache_ahead(const ab_store_t *st, const ab_append_event_t *evs, size_t n,
                               size_t i, uint64_t *ring)
{
    if (i == 0)
        for (size_t k = 0; k < AB__STORE_AHEAD && k < n; k++)
            ahead_slot(st, &evs[k], ring, k);
    uint64_t mine = ring[i % AB__STORE_AHEAD];
    const run_ent_t *e =
        i + AB__STORE_AHEAD / 4 < n ? ahead_ent(st, ring, i + AB__STORE_AHEAD / 4) : NULL;
    if (e && e->thr)
        __builtin_prefetch(e->thr);
    e = i + AB__STORE_AHEAD / 2 < n ? ahead_ent(st, ring, i + AB__STORE_AHEAD / 2) : NULL;
    if (e) {
        const char *p = (const char *)e;
        for (size_t off = 0; off < sizeof *e + 64; off += 64) /* the entry and its key */
            __builtin_prefetch(p + off);
    }
    if (i + AB__STORE_AHEAD < n) /* its ring slot is event i's, no longer needed */
        ahead_slot(st, &evs[i + AB__STORE_AHEAD], ring, i + AB__STORE_AHEAD);
    return mine;
}

static ab_status_t grow(ab_store_t *st, ab_error_t *err)
{
    size_t n = st->nslots ? st->nslots * 2 : 256;
    run_ent_t **old = st->slots;
    size_t oldn = st->nslots;
    run_ent_t **slots = calloc(n, sizeof *slots);
    if (!slots)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory (run cache)");
    st->slots = slots;
    st->nslots = n;
    for (size_t i = 0; i < oldn; i++) {
        run_ent_t *e = old[i];
        if (e)
            st->slots[slot_of(st, e->hash, e->thread, e->thread_len, e->run, e->run_len)] = e;
    }
    free(old);
    return AB_OK;
}

/* Load the committed state of a run from the runs table (rowid 0 = none). */
static ab_status_t load_run(ab_store_t *st, run_ent_t *e, ab_error_t *err)
{
    sqlite3_stmt *q = st->q[Q_RUN_GET];
    sqlite3_bind_text(q, 1, e->thread, (int)e->thread_len, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, e->run, (int)e->run_len, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        e->rowid = sqlite3_column_int64(q, 0);
        e->thread_rowid = sqlite3_column_int64(q, 1);
        e->epoch = (uint64_t)sqlite3_column_int64(q, 2);
        e->last_seq = (uint64_t)sqlite3_column_int64(q, 3);
        e->tail = sqlite3_column_int64(q, 4);
        e->dist = (uint32_t)sqlite3_column_int64(q, 5);
    }
    ab__store_done(q);
    if (rc == SQLITE_ROW || rc == SQLITE_DONE)
        return AB_OK;
    return ab__store_sqlerr(st, rc, "run lookup", err);
}

static run_ent_t *new_ent(const char *t, size_t tl, const char *r, size_t rl, uint64_t h)
{
    run_ent_t *e = calloc(1, sizeof *e + tl + rl + 2);
    if (!e)
        return NULL;
    e->thread = (char *)(e + 1);
    e->run = e->thread + tl + 1;
    memcpy(e->thread, t, tl);
    memcpy(e->run, r, rl);
    e->thread_len = tl;
    e->run_len = rl;
    e->hash = h;
    e->p_head = e->p_tail = -1;
    return e;
}

ab_status_t ab__store_cache_get(ab_store_t *st, ab_str_t t, ab_str_t r, uint64_t h, run_ent_t **out,
                                ab_error_t *err)
{
    const char *thread = t.ptr, *run = r.ptr;
    size_t tl = t.len, rl = r.len;
    if (st->nslots) {
        run_ent_t *e = st->slots[slot_of(st, h, thread, tl, run, rl)];
        if (e) {
            *out = e;
            return AB_OK;
        }
    }
    if ((st->nruns + 1) * 2 > st->nslots) {
        ab_status_t s = grow(st, err);
        if (s != AB_OK)
            return s;
    }
    run_ent_t *e = new_ent(thread, tl, run, rl, h);
    if (!e)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory (run cache)");
    ab_status_t s = load_run(st, e, err);
    if (s != AB_OK) {
        free(e);
        return s;
    }
    st->slots[slot_of(st, h, thread, tl, run, rl)] = e;
    st->nruns++;
    *out = e;
    return AB_OK;
}

/* ---- threads ------------------------------------------------------------------ */

static size_t tslot_of(const ab_store_t *st, sqlite3_int64 rowid)
{
    size_t mask = st->ntslots - 1;
    size_t i = (size_t)((uint64_t)rowid * 0x9E3779B97F4A7C15ull >> 32) & mask;
    while (st->tslots[i] && st->tslots[i]->rowid != rowid)
        i = (i + 1) & mask;
    return i;
}

static ab_status_t tgrow(ab_store_t *st, ab_error_t *err)
{
    size_t n = st->ntslots ? st->ntslots * 2 : 64, oldn = st->ntslots;
    thr_ent_t **old = st->tslots, **slots = calloc(n, sizeof *slots);
    if (!slots)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory (thread cache)");
    st->tslots = slots;
    st->ntslots = n;
    for (size_t i = 0; i < oldn; i++)
        if (old[i])
            st->tslots[tslot_of(st, old[i]->rowid)] = old[i];
    free(old);
    return AB_OK;
}

/* Load a thread's newest chunk and its distance (none: 0, 0). */
static ab_status_t load_thread(ab_store_t *st, thr_ent_t *t, ab_error_t *err)
{
    sqlite3_stmt *q = st->q[Q_THREAD_GET];
    sqlite3_bind_int64(q, 1, t->rowid);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        t->tail = sqlite3_column_int64(q, 0);
        t->dist = (uint32_t)sqlite3_column_int64(q, 1);
    }
    ab__store_done(q);
    if (rc == SQLITE_ROW || rc == SQLITE_DONE)
        return AB_OK;
    return ab__store_sqlerr(st, rc, "thread lookup", err);
}

ab_status_t ab__store_thread_get(ab_store_t *st, sqlite3_int64 rowid, thr_ent_t **out,
                                 ab_error_t *err)
{
    if (st->ntslots) {
        thr_ent_t *t = st->tslots[tslot_of(st, rowid)];
        if (t) {
            *out = t;
            return AB_OK;
        }
    }
    if ((st->nthreads + 1) * 2 > st->ntslots) {
        ab_status_t s = tgrow(st, err);
        if (s != AB_OK)
            return s;
    }
    thr_ent_t *t = calloc(1, sizeof *t);
    if (!t)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory (thread cache)");
    t->rowid = rowid;
    ab_status_t s = load_thread(st, t, err);
    if (s != AB_OK) {
        free(t);
        return s;
    }
    st->tslots[tslot_of(st, rowid)] = t;
    st->nthreads++;
    *out = t;
    return AB_OK;
}

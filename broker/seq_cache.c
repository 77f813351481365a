/*
 * seq_cache.c - the sequencer's run state cache: a hash table keyed by the
 * (thread, run) bytes, an LRU list, and loading a run from the store on a
 * miss (head + rebuilding the lifecycle checker from the stored events).
 *
 * Invariants:
 *  1. Every cached run is in exactly one bucket chain and in the LRU list;
 *     count is the number of cached runs.
 *  2. A run in the current group (group_gen == s->gen) is never evicted by
 *     ab__seq_trim(): its state holds staged, uncommitted events.
 *  3. A run is inserted only when fully loaded: a store error or a stored
 *     event that fails the re-check leaves nothing cached.
 *  4. An active run's checker has seen exactly the run's committed events
 *     1..last_seq plus the staged ones; a terminal run loaded from the
 *     store has no checker (status and last_seq suffice).
 *  5. Every checker asks the thread for an ACTIVITY_DELTA's baseline outside
 *     its run (ab__seq_act_baseline); while it is rebuilt, s->cur is NULL and
 *     the answer is yes, since its stored events were accepted once.
 *  6. ab__seq_ahead() only asks the CPU to load what a later lookup will read
 *     (prefetch hints, which never fault): it changes no state and no answer.
 */
#include "ab_common.h"
#include "seq_internal.h"

#include <stdlib.h>
#include <string.h>

ab_status_t ab__seq_reserve(void **arr, size_t *cap, size_t need, size_t size)
{
    void *p = ab__grow(*arr, cap, need, size, 8);
    if (!p)
        return AB_NOMEM;
    *arr = p;
    return AB_OK;
}

uint64_t ab__seq_key_hash(ab_str_t thread, ab_str_t run)
{
    static const unsigned char sep = 0; /* ids never hold NUL */
    uint64_t h = ab__fnv64(thread.ptr, thread.len);
    h = ab__fnv64_more(h, &sep, 1);
    return ab__fnv64_more(h, run.ptr, run.len);
}

static bool key_eq(const ab__seq_run_t *r, uint64_t h, ab_str_t thread, ab_str_t run)
{
    return r->hash == h && r->thread_len == thread.len && r->run_len == run.len &&
           memcmp(r->thread, thread.ptr, thread.len) == 0 && memcmp(r->run, run.ptr, run.len) == 0;
}

static void lru_unlink(ab__seq_run_t *r)
{
    r->lru_prev->lru_next = r->lru_next;
    r->lru_next->lru_prev = r->lru_prev;
}

static void lru_push_front(ab_seq_t *s, ab__seq_run_t *r)
{
    r->lru_next = s->lru.lru_next;
    r->lru_prev = &s->lru;
    s->lru.lru_next->lru_prev = r;
    s->lru.lru_next = r;
}

ab_status_t ab__seq_cache_init(ab_seq_t *s)
{
    s->nbuckets = 64;
    s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
    if (!s->buckets)
        return AB_NOMEM;
    s->lru.lru_next = s->lru.lru_prev = &s->lru;
    return AB_OK;
}

static void run_free(ab__seq_run_t *r)
{
    if (!r)
        return;
    ab_lifecycle_destroy(&r->lc);
    free(r->staged);
    free(r); /* the key lives in the same block (run_new) */
}

void ab__seq_cache_free(ab_seq_t *s)
{
    while (s->buckets && s->lru.lru_next != &s->lru)
        ab__seq_evict(s, s->lru.lru_next);
    free(s->buckets);
    s->buckets = NULL;
}

static ab__seq_run_t *find_h(ab_seq_t *s, ab_str_t thread, ab_str_t run, uint64_t h)
{
    for (ab__seq_run_t *r = s->buckets[h & (s->nbuckets - 1)]; r; r = r->hnext) {
        if (key_eq(r, h, thread, run)) {
            lru_unlink(r);
            lru_push_front(s, r);
            return r;
        }
    }
    return NULL;
}

ab__seq_run_t *ab__seq_find(ab_seq_t *s, ab_str_t thread, ab_str_t run)
{
    return find_h(s, thread, run, ab__seq_key_hash(thread, run));
}

/*
 * Lookups ahead of the stage loop (invariant 6). With 100,000 runs cached each lookup
 * misses the CPU's caches in a row, every load waiting for the one before it: the
 * bucket, then the entry with its key. At step @p i the loop asks for the bucket of item
 * i + AB__SEQ_AHEAD and for the entry and key that the bucket of item
 * i + AB__SEQ_AHEAD / 2 names (its bucket asked for half the distance ago), so that the
 * misses of several items overlap. Only hints: nothing is read that a lookup would not
 * read. (Asking for the LRU neighbours an entry is relinked between as well made no
 * difference that `bench scale` could show, in order or scattered.)
 */
static void ahead_bucket(const ab_seq_t *s, const ab_seq_item_t *it, ab__seq_ahead_t *a, size_t k)
{
    uint64_t h = it->ev ? ab__seq_key_hash(it->ev->thread, it->ev->run) : 0;
    a->h[k % AB__SEQ_AHEAD] = h;
    __builtin_prefetch(&s->buckets[h & (s->nbuckets - 1)]);
}

uint64_t ab__seq_ahead(const ab_seq_t *s, const ab_seq_item_t *items, size_t n, size_t i,
                       ab__seq_ahead_t *a)
{
    if (i == 0)
        for (size_t k = 0; k < AB__SEQ_AHEAD && k < n; k++)
            ahead_bucket(s, &items[k], a, k);
    uint64_t mine = a->h[i % AB__SEQ_AHEAD];
    size_t k = i + AB__SEQ_AHEAD / 2;
    if (k < n) {
        const ab__seq_run_t *r = s->buckets[a->h[k % AB__SEQ_AHEAD] & (s->nbuckets - 1)];
        if (r) {
            __builtin_prefetch(r);
            __builtin_prefetch(r + 1);
        }
    }
    k = i + AB__SEQ_AHEAD; /* its ring slot is item i's, whose hash is no longer needed */
    if (k < n)
        ahead_bucket(s, &items[k], a, k);
    return mine;
}

static void grow_buckets(ab_seq_t *s)
{
    size_t nb = s->nbuckets * 2;
    ab__seq_run_t **b = calloc(nb, sizeof(*b));
    if (!b)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < s->nbuckets; i++) {
        ab__seq_run_t *r = s->buckets[i];
        while (r) {
            ab__seq_run_t *next = r->hnext;
            r->hnext = b[r->hash & (nb - 1)];
            b[r->hash & (nb - 1)] = r;
            r = next;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
}

static void insert(ab_seq_t *s, ab__seq_run_t *r)
{
    if (s->count >= s->nbuckets)
        grow_buckets(s);
    ab__seq_run_t **b = &s->buckets[r->hash & (s->nbuckets - 1)];
    r->hnext = *b;
    *b = r;
    lru_push_front(s, r);
    s->count++;
    r->mem = 0;
    ab__seq_count(s, r);
}

void ab__seq_count(ab_seq_t *s, ab__seq_run_t *r)
{
    size_t m = ab__seq_run_memory(r);
    s->run_bytes = s->run_bytes - r->mem + m;
    r->mem = m;
}

void ab__seq_evict(ab_seq_t *s, ab__seq_run_t *r)
{
    ab__seq_run_t **p = &s->buckets[r->hash & (s->nbuckets - 1)];
    while (*p && *p != r)
        p = &(*p)->hnext;
    if (*p)
        *p = r->hnext;
    lru_unlink(r);
    s->count--;
    s->run_bytes -= r->mem;
    run_free(r);
}

void ab__seq_forget_all(ab_seq_t *s)
{
    while (s->lru.lru_next != &s->lru)
        ab__seq_evict(s, s->lru.lru_next);
    ab__seq_thr_forget_all(s);
}

void ab__seq_trim(ab_seq_t *s, const ab__seq_run_t *keep)
{
    ab__seq_run_t *r = s->lru.lru_prev;
    while ((s->count > s->max_runs || s->run_bytes > s->max_run_bytes) && r != &s->lru) {
        ab__seq_run_t *prev = r->lru_prev;
        if (r != keep && r->group_gen != s->gen)
            ab__seq_evict(s, r);
        r = prev;
    }
}

size_t ab__seq_run_memory(const ab__seq_run_t *r)
{
    return sizeof(*r) + r->thread_len + r->run_len + 2 + r->staged_cap * sizeof(uint32_t) +
           (r->lc ? ab_lifecycle_memory(r->lc) : 0);
}

/* A run entry with its key right behind it, in one block: a lookup's key compare then reads
 * the line after the entry's, which ab__seq_ahead() can name before the entry is read. */
static ab__seq_run_t *run_new(ab_str_t thread, ab_str_t run)
{
    ab__seq_run_t *r = calloc(1, sizeof(*r) + thread.len + run.len + 2);
    if (!r)
        return NULL;
    char *key = (char *)(r + 1);
    memcpy(key, thread.ptr, thread.len);
    key[thread.len] = '\0';
    memcpy(key + thread.len + 1, run.ptr, run.len);
    key[thread.len + 1 + run.len] = '\0';
    r->thread = key;
    r->thread_len = thread.len;
    r->run = key + thread.len + 1;
    r->run_len = run.len;
    r->hash = ab__seq_key_hash(thread, run);
    return r;
}

/* ---- rebuild an active run's checker from the store ---------------------- */

typedef struct rebuild_ctx {
    ab_seq_t *s;
    ab__seq_run_t *r;
    uint64_t next; /**< seq the next row must carry */
    ab_status_t rc;
    ab_error_t *err;
} rebuild_ctx_t;

static int rebuild_row(void *ud, const ab_row_t *row)
{
    rebuild_ctx_t *c = ud;
    ab_limits_t lim = ab__limits_stored();
    ab_event_t ev;
    ab_agui_info_t info;
    ab_error_t e = AB_ERROR_INIT;
    if (row->seq != c->next) {
        ab_error_set(&e, AB_CORRUPT, "seq", "stored seq %llu where %llu was expected",
                     (unsigned long long)row->seq, (unsigned long long)c->next);
        goto fail;
    }
    if (ab_event_decode(c->s->doc, row->bytes, row->len, &lim, &ev, &e) != AB_OK ||
        ab_agui_validate(ev.body, AB_AGUI_STRICT, NULL, NULL, &info, &e) != AB_OK ||
        ab_lifecycle_check(c->r->lc, &info, &e) != AB_OK)
        goto fail;
    c->next++;
    return 0;
fail:
    c->rc = ab_error_set(c->err, e.code == AB_NOMEM ? AB_NOMEM : AB_CORRUPT, "seq",
                         "stored event seq %llu of run '%s' fails the re-check: %s",
                         (unsigned long long)row->seq, c->r->run, e.message);
    return 1;
}

static ab_status_t rebuild(ab_seq_t *s, ab__seq_run_t *r, ab_error_t *err)
{
    rebuild_ctx_t c = {s, r, 1, AB_OK, err};
    ab_read_t req = {0};
    req.scope = AB_REPLAY_RUN;
    req.thread = (ab_str_t){r->thread, r->thread_len};
    req.run = (ab_str_t){r->run, r->run_len};
    req.limit = AB__SEQ_PAGE;
    for (;;) {
        uint32_t count = 0;
        req.after_seq = c.next - 1;
        ab_status_t rc = s->plugin->read(s->db, &req, rebuild_row, &c, &count, err);
        if (rc != AB_OK)
            return rc;
        if (c.rc != AB_OK)
            return c.rc;
        if (count < req.limit || c.next > r->last_seq)
            break;
    }
    ab_doc_reset(s->doc);
    if (c.next != r->last_seq + 1)
        return ab_error_set(err, AB_CORRUPT, "seq",
                            "run '%s' has %llu stored events, head says %llu", r->run,
                            (unsigned long long)(c.next - 1), (unsigned long long)r->last_seq);
    return AB_OK;
}

/* The state of run (thread, run) from its stored head @p head (its checker rebuilt from the
 * stored events when it is active). */
static ab_status_t load_head(ab_seq_t *s, ab_str_t thread, ab_str_t run, const ab_run_head_t *head,
                             ab__seq_run_t **out, ab_error_t *err)
{
    ab_status_t rc = AB_OK;
    ab__seq_run_t *r = run_new(thread, run);
    if (!r)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory caching a run");
    r->epoch = head->epoch;
    r->last_seq = r->staged_seq = head->last_seq;
    r->status = head->status;
    if (r->epoch == 0 && r->last_seq > 0)
        r->epoch = 1; /* started without a claim: the implicit epoch 1 */
    if (r->status == AB_RUN_STATUS_FINISHED || r->status == AB_RUN_STATUS_ERRORED)
        goto done;
    rc = ab_lifecycle_new(&r->lc, thread.ptr, thread.len, run.ptr, run.len, &s->limits);
    if (rc != AB_OK) {
        ab_error_set(err, rc, NULL, "cannot create the lifecycle checker of run '%s'", r->run);
        goto free_run;
    }
    ab_lifecycle_set_baseline(r->lc, ab__seq_act_baseline, s); /* R20 across runs */
    const ab_seq_item_t *cur = s->cur;
    s->cur = NULL; /* a rebuild re-checks events accepted once: no baseline to ask for */
    if (r->last_seq > 0)
        rc = rebuild(s, r, err);
    s->cur = cur;
    if (rc != AB_OK)
        goto free_run;
done:
    *out = r;
    return AB_OK;
free_run:
    run_free(r);
    return rc;
}

static ab_status_t load(ab_seq_t *s, ab_str_t thread, ab_str_t run, ab__seq_run_t **out,
                        ab_error_t *err)
{
    ab_run_head_t head;
    ab_status_t rc = s->plugin->head(s->db, thread, run, &head, err);
    return rc == AB_OK ? load_head(s, thread, run, &head, out, err) : rc;
}

/* Cache run @p thread / @p run from @p head unless it is cached already. */
static void prefetched(ab_seq_t *s, ab_str_t thread, ab_str_t run, const ab_run_head_t *head)
{
    ab__seq_run_t *r = NULL;
    ab_error_t e = AB_ERROR_INIT;
    if (ab__seq_find(s, thread, run) || load_head(s, thread, run, head, &r, &e) != AB_OK)
        return; /* a failed load is done again, and answered, when the run's event is staged */
    insert(s, r);
    ab__seq_trim(s, r);
}

static int prefetch_head(void *ud, const ab_run_head_t *h)
{
    ab_seq_t *s = ud;
    prefetched(s, (ab_str_t){h->thread, strlen(h->thread)}, (ab_str_t){h->run, strlen(h->run)}, h);
    return 0;
}

void ab__seq_prefetch(ab_seq_t *s, const ab_seq_item_t *items, size_t n)
{
    if (!ab_plugin_has(s->plugin, heads_of))
        return;
    size_t k = 0;
    const ab_event_t *prev = NULL; /* a job's events come run by run: one lookup per run */
    for (size_t i = 0; i < n && k < AB__SEQ_PREFETCH; i++) {
        const ab_seq_item_t *it = &items[i];
        if (it->status == AB_RESULT_REJECTED || !it->ev)
            continue;
        const ab_event_t *ev = it->ev;
        bool same =
            prev && ab__seq_str_eq(prev->run, ev->run) && ab__seq_str_eq(prev->thread, ev->thread);
        prev = ev;
        if (same || ab__seq_find(s, ev->thread, ev->run))
            continue;
        if (ab__seq_reserve((void **)&s->pf_threads, &s->cap_pf, k + 1, sizeof(ab_str_t)) ||
            ab__seq_reserve((void **)&s->pf_runs, &s->cap_pf_runs, k + 1, sizeof(ab_str_t)))
            break;
        s->pf_threads[k] = it->ev->thread;
        s->pf_runs[k++] = it->ev->run;
    }
    ab_error_t e = AB_ERROR_INIT;
    if (k > 0) /* on failure each run's head is read when its event is staged */
        (void)s->plugin->heads_of(s->db, s->pf_threads, s->pf_runs, k, prefetch_head, s, &e);
}

ab_status_t ab__seq_get(ab_seq_t *s, ab_str_t thread, ab_str_t run, uint64_t hash,
                        ab__seq_run_t **out, ab_error_t *err)
{
    ab__seq_run_t *r = find_h(s, thread, run, hash);
    if (r) {
        *out = r;
        return AB_OK;
    }
    ab_status_t rc = load(s, thread, run, &r, err);
    if (rc != AB_OK)
        return rc;
    insert(s, r);
    ab__seq_trim(s, r);
    *out = r;
    return AB_OK;
}

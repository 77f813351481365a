/*
 * seq_thread.c - the sequencer's thread states: for each thread, its latest
 * interrupted run and whether its interrupts are still pending, which is
 * what the resume rules (seq_resume.c, docs/SEQUENCER.md rule 7) check.
 *
 * A run is a child run when its RUN_STARTED names a parentRunId that is an
 * active run of the same thread at that moment (started, no terminal event
 * yet); every other run that starts is top-level. The thread's latest
 * interrupted run is the top-level run whose RUN_FINISHED with outcome
 * interrupt has the highest position. Its interrupts are pending until a
 * top-level RUN_STARTED carrying input is accepted after that RUN_FINISHED
 * (it answered them: rule 7 let it through) or the run gets a late
 * RUN_ERROR. Child runs and RUN_STARTED without input change nothing.
 *
 * Invariants:
 *  1. A thread state is the store's committed state plus the group's staged
 *     thread events (s->tev), applied in stage order. A state loaded in the
 *     middle of a group replays the group's events of its thread, so a state
 *     may be evicted at any time and rebuilt equal.
 *  2. Loading from the store needs only run heads and single events, in
 *     passes of at most AB__SEQ_SCAN heads (memory bounded whatever the
 *     thread's length). The child test compares positions (the child's
 *     RUN_STARTED against the parent's RUN_STARTED and first terminal
 *     event), which says what the live test "the parent is active now" said
 *     when the child was staged.
 *  3. An abort drops every state the group changed; a commit keeps them.
 *  4. At most max_threads states are cached, least recently used evicted.
 *  5. A state has two facets, each derived when first needed: the resume
 *     facet (resume_loaded, the fields above) and the activity facet (act,
 *     seq_activity.c). A staged event is applied to the facet it concerns
 *     when that facet is loaded; a facet loaded later replays the group's
 *     events of its own kind only.
 */
#include "ab_common.h"
#include "seq_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- cache ------------------------------------------------------------------ */

static uint64_t thr_hash(ab_str_t thread)
{
    return ab__fnv64(thread.ptr, thread.len);
}

static bool id_is(const char *id, size_t len, ab_str_t v)
{
    return len == v.len && (len == 0 || memcmp(id, v.ptr, len) == 0);
}

static void tlru_unlink(ab__seq_thr_t *t)
{
    t->lru_prev->lru_next = t->lru_next;
    t->lru_next->lru_prev = t->lru_prev;
}

static void tlru_front(ab_seq_t *s, ab__seq_thr_t *t)
{
    t->lru_next = s->tlru.lru_next;
    t->lru_prev = &s->tlru;
    s->tlru.lru_next->lru_prev = t;
    s->tlru.lru_next = t;
}

ab_status_t ab__seq_thr_init(ab_seq_t *s)
{
    s->ntbuckets = 64;
    s->tbuckets = calloc(s->ntbuckets, sizeof(*s->tbuckets));
    if (!s->tbuckets)
        return AB_NOMEM;
    s->tlru.lru_next = s->tlru.lru_prev = &s->tlru;
    if (!s->max_threads)
        s->max_threads = AB__SEQ_MAX_THREADS;
    return AB_OK;
}

static void thr_evict(ab_seq_t *s, ab__seq_thr_t *t)
{
    ab__seq_thr_t **p = &s->tbuckets[t->hash & (s->ntbuckets - 1)];
    while (*p && *p != t)
        p = &(*p)->hnext;
    if (*p)
        *p = t->hnext;
    tlru_unlink(t);
    s->tcount--;
    ab__seq_act_free(t->act);
    free(t->thread);
    free(t);
}

void ab__seq_thr_free(ab_seq_t *s)
{
    while (s->tbuckets && s->tlru.lru_next != &s->tlru)
        thr_evict(s, s->tlru.lru_next);
    free(s->tbuckets);
    s->tbuckets = NULL;
    free(s->tev);
    s->tev = NULL;
}

static ab__seq_thr_t *thr_find(ab_seq_t *s, ab_str_t thread)
{
    uint64_t h = thr_hash(thread);
    for (ab__seq_thr_t *t = s->tbuckets[h & (s->ntbuckets - 1)]; t; t = t->hnext) {
        if (t->hash == h && id_is(t->thread, t->thread_len, thread)) {
            tlru_unlink(t);
            tlru_front(s, t);
            return t;
        }
    }
    return NULL;
}

static void thr_insert(ab_seq_t *s, ab__seq_thr_t *t)
{
    if (s->tcount >= s->ntbuckets) {
        size_t nb = s->ntbuckets * 2;
        ab__seq_thr_t **b = calloc(nb, sizeof(*b));
        if (b) { /* else longer chains, still correct */
            for (size_t i = 0; i < s->ntbuckets; i++)
                for (ab__seq_thr_t *x = s->tbuckets[i], *next; x; x = next) {
                    next = x->hnext;
                    x->hnext = b[x->hash & (nb - 1)];
                    b[x->hash & (nb - 1)] = x;
                }
            free(s->tbuckets);
            s->tbuckets = b;
            s->ntbuckets = nb;
        }
    }
    ab__seq_thr_t **b = &s->tbuckets[t->hash & (s->ntbuckets - 1)];
    t->hnext = *b;
    *b = t;
    tlru_front(s, t);
    s->tcount++;
    while (s->tcount > s->max_threads && s->tlru.lru_prev != t)
        thr_evict(s, s->tlru.lru_prev);
}

void ab__seq_thr_forget(ab_seq_t *s, ab_str_t thread)
{
    ab__seq_thr_t *t = thr_find(s, thread);
    if (t)
        thr_evict(s, t);
}

void ab__seq_thr_forget_all(ab_seq_t *s)
{
    while (s->tlru.lru_next != &s->tlru)
        thr_evict(s, s->tlru.lru_next);
}

size_t ab__seq_thr_memory(const ab_seq_t *s)
{
    size_t m = s->ntbuckets * sizeof(*s->tbuckets) + s->cap_tev * sizeof(*s->tev);
    for (const ab__seq_thr_t *t = s->tlru.lru_next; t != &s->tlru; t = t->lru_next)
        m += sizeof(*t) + t->thread_len + 1 + ab__seq_act_memory(t->act);
    return m;
}

/* ---- the group's thread events ---------------------------------------------------- */

/* Apply the staged boundary event at pending index @p idx to the resume facet of @p t. */
static void apply_resume(ab_seq_t *s, ab__seq_thr_t *t, uint32_t idx)
{
    const ab_seq_item_t *it = s->pend_items[idx];
    ab_str_t run = it->ev->run;
    if (it->info->type == AB_AGUI_RUN_STARTED) {
        t->pending = false; /* rule 7 let it through: it answered them, or none were pending */
    } else if (it->info->type == AB_AGUI_RUN_FINISHED) {
        memcpy(t->run, run.ptr, run.len);
        t->run[run.len] = '\0';
        t->run_len = run.len;
        t->pending = true;
        t->errored = false;
        t->fin_seq = it->ev->seq;
        t->fin_gen = s->gen;
        t->fin_idx = idx;
    } else if (t->run_len && id_is(t->run, t->run_len, run) && t->pending) {
        t->pending = false; /* a late RUN_ERROR: the run failed, it asks nothing */
        t->errored = true;
    }
    t->group_gen = s->gen;
}

/* Apply the staged thread event at pending index @p idx to the loaded facets of @p t. */
static void apply(ab_seq_t *s, ab__seq_thr_t *t, uint32_t idx)
{
    const ab_seq_item_t *it = s->pend_items[idx];
    t->group_gen = s->gen;
    if (ab__seq_act_event(it->info->type)) {
        if (t->act)
            ab__seq_act_apply(t->act, it);
    } else if (t->resume_loaded) {
        apply_resume(s, t, idx);
    }
}

ab_status_t ab__seq_thr_reserve(ab_seq_t *s)
{
    return ab__seq_reserve((void **)&s->tev, &s->cap_tev, s->ntev + 1, sizeof(*s->tev));
}

void ab__seq_thr_staged(ab_seq_t *s, uint32_t idx)
{
    s->tev[s->ntev++] = (ab__seq_tev_t){idx};
    ab__seq_thr_t *t = thr_find(s, s->pend_items[idx]->ev->thread);
    if (t)
        apply(s, t, idx);
}

void ab__seq_thr_end(ab_seq_t *s, bool committed)
{
    if (!committed) {
        ab__seq_thr_t *t = s->tlru.lru_next;
        while (t != &s->tlru) {
            ab__seq_thr_t *next = t->lru_next;
            if (t->group_gen == s->gen)
                thr_evict(s, t);
            t = next;
        }
    }
    s->ntev = 0;
}

/* ---- what the store says ---------------------------------------------------------- */

/* A run head kept by one pass. */
typedef struct cand {
    char run[AB_ID_MAX_BYTES + 1];
    char parent[AB_ID_MAX_BYTES + 1];
    ab_run_status_t status;
    uint64_t last_seq, last_pos;
} cand_t;

typedef struct scan {
    cand_t *c;
    size_t n;
    bool interrupted; /**< only runs that finished with outcome interrupt */
    uint64_t above;   /**< only heads with last_pos above this ... */
    uint64_t below;   /**< ... and below this */
    bool more;        /**< an eligible head was not kept */
} scan_t;

/* A run that has a RUN_STARTED: a RUN_ERROR at seq 1 (error before start) ends a run at once. */
static bool started(ab_run_status_t st, uint64_t last_seq)
{
    return st == AB_RUN_STATUS_ACTIVE || st == AB_RUN_STATUS_FINISHED ||
           (st == AB_RUN_STATUS_ERRORED && last_seq >= 2);
}

static bool eligible(const scan_t *sc, const ab_run_head_t *h)
{
    if (!started(h->status, h->last_seq) || h->last_pos >= sc->below || h->last_pos <= sc->above)
        return false;
    return !sc->interrupted || (h->outcome == AB_OUTCOME_INTERRUPT &&
                                (h->status == AB_RUN_STATUS_FINISHED || h->last_seq >= 3));
}

static int scan_head(void *ud, const ab_run_head_t *h)
{
    scan_t *sc = ud;
    if (!eligible(sc, h))
        return 0;
    size_t at = sc->n;
    if (sc->n == AB__SEQ_SCAN) { /* keep the highest last_pos: replace the lowest */
        sc->more = true;
        at = 0;
        for (size_t i = 1; i < sc->n; i++)
            if (sc->c[i].last_pos < sc->c[at].last_pos)
                at = i;
        if (sc->c[at].last_pos > h->last_pos)
            return 0;
    } else {
        sc->n++;
    }
    cand_t *c = &sc->c[at];
    memcpy(c->run, h->run, sizeof(c->run));
    memcpy(c->parent, h->parent_run, sizeof(c->parent));
    c->status = h->status;
    c->last_seq = h->last_seq;
    c->last_pos = h->last_pos;
    return 0;
}

static int by_pos_desc(const void *a, const void *b)
{
    uint64_t x = ((const cand_t *)a)->last_pos, y = ((const cand_t *)b)->last_pos;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* One pass over the thread's heads; the kept ones sorted, highest last_pos first. */
static ab_status_t scan_pass(ab_seq_t *s, ab_str_t th, scan_t *sc, ab_error_t *err)
{
    sc->n = 0;
    sc->more = false;
    ab_status_t rc = s->plugin->thread_heads(s->db, th, scan_head, sc, err);
    if (rc == AB_OK)
        qsort(sc->c, sc->n, sizeof(*sc->c), by_pos_desc);
    return rc;
}

static ab_str_t sv(const char *id)
{
    return (ab_str_t){id, strlen(id)};
}

/* Position of a started run's RUN_STARTED (seq 1). */
static ab_status_t start_pos(ab_seq_t *s, ab_str_t th, const char *run, uint64_t last_seq,
                             uint64_t last_pos, uint64_t *pos, ab_error_t *err)
{
    if (last_seq == 1) {
        *pos = last_pos;
        return AB_OK;
    }
    return ab__seq_stored(s, th, sv(run), 1, pos, NULL, NULL, err);
}

/* Position of a run's first terminal event (UINT64_MAX while active). */
static ab_status_t end_pos(ab_seq_t *s, ab_str_t th, const ab_run_head_t *p, uint64_t *end,
                           ab_error_t *err)
{
    *end = p->status == AB_RUN_STATUS_ACTIVE ? UINT64_MAX : p->last_pos;
    if (p->status != AB_RUN_STATUS_ERRORED || p->last_seq < 3)
        return AB_OK;
    uint64_t pos = 0; /* a late RUN_ERROR after RUN_FINISHED: the run ended at the latter */
    ab_agui_type_t type = AB_AGUI_UNKNOWN;
    ab_status_t rc = ab__seq_stored(s, th, sv(p->run), p->last_seq - 1, &pos, &type, NULL, err);
    if (rc == AB_OK && type == AB_AGUI_RUN_FINISHED)
        *end = pos;
    return rc;
}

/* Whether a run with parent @p parent whose RUN_STARTED is at @p start began as a child run. */
static ab_status_t is_child(ab_seq_t *s, ab_str_t th, const char *parent, uint64_t start,
                            bool *child, ab_error_t *err)
{
    *child = false;
    if (!parent[0])
        return AB_OK;
    ab_run_head_t p;
    uint64_t pstart = 0, end = 0;
    ab_status_t rc = s->plugin->head(s->db, th, sv(parent), &p, err);
    if (rc != AB_OK || !started(p.status, p.last_seq))
        return rc;
    if ((rc = start_pos(s, th, p.run, p.last_seq, p.last_pos, &pstart, err)) != AB_OK ||
        pstart >= start || (rc = end_pos(s, th, &p, &end, err)) != AB_OK)
        return rc;
    *child = start < end;
    return AB_OK;
}

/* Step 1: the top-level run whose RUN_FINISHED (interrupt) is the latest; its position. */
static ab_status_t find_interrupted(ab_seq_t *s, ab__seq_thr_t *t, scan_t *sc, uint64_t *fin,
                                    ab_error_t *err)
{
    ab_str_t th = {t->thread, t->thread_len};
    ab_status_t rc = AB_OK;
    *fin = 0;
    for (sc->below = UINT64_MAX;; sc->below = sc->c[sc->n - 1].last_pos) {
        if ((rc = scan_pass(s, th, sc, err)) != AB_OK || sc->n == 0)
            return rc;
        for (size_t i = 0; i < sc->n; i++) {
            const cand_t *c = &sc->c[i];
            ab_run_head_t h = {0};
            uint64_t f = 0, start = 0;
            bool child = false;
            if (c->last_pos <= *fin) /* its RUN_FINISHED is no later than its last event */
                return AB_OK;
            memcpy(h.run, c->run, sizeof(h.run));
            h.status = c->status;
            h.last_seq = c->last_seq;
            h.last_pos = c->last_pos;
            if ((rc = end_pos(s, th, &h, &f, err)) != AB_OK)
                return rc;
            if (f <= *fin)
                continue;
            if ((rc = start_pos(s, th, c->run, c->last_seq, c->last_pos, &start, err)) != AB_OK ||
                (rc = is_child(s, th, c->parent, start, &child, err)) != AB_OK)
                return rc;
            if (child)
                continue;
            *fin = f;
            t->run_len = strlen(c->run);
            memcpy(t->run, c->run, t->run_len + 1);
            t->fin_seq = c->status == AB_RUN_STATUS_FINISHED ? c->last_seq : c->last_seq - 1;
            t->errored = c->status == AB_RUN_STATUS_ERRORED;
            t->pending = !t->errored;
        }
        if (!sc->more)
            return AB_OK;
    }
}

/* Step 2: whether a top-level run carrying input started after position @p fin. */
static ab_status_t find_answer(ab_seq_t *s, ab__seq_thr_t *t, scan_t *sc, uint64_t fin,
                               bool *answered, ab_error_t *err)
{
    ab_str_t th = {t->thread, t->thread_len};
    ab_status_t rc = AB_OK;
    *answered = false;
    sc->interrupted = false;
    sc->above = fin;
    for (sc->below = UINT64_MAX;; sc->below = sc->c[sc->n - 1].last_pos) {
        if ((rc = scan_pass(s, th, sc, err)) != AB_OK || sc->n == 0)
            return rc;
        for (size_t i = 0; i < sc->n; i++) {
            const cand_t *c = &sc->c[i];
            uint64_t start = 0;
            ab_agui_type_t type = AB_AGUI_UNKNOWN;
            bool input = false, child = false;
            if ((rc = ab__seq_stored(s, th, sv(c->run), 1, &start, &type, &input, err)) != AB_OK)
                return rc;
            if (start <= fin || !input)
                continue;
            if ((rc = is_child(s, th, c->parent, start, &child, err)) != AB_OK)
                return rc;
            if (!child) {
                *answered = true;
                return AB_OK;
            }
        }
        if (!sc->more)
            return AB_OK;
    }
}

static ab_status_t load_state(ab_seq_t *s, ab__seq_thr_t *t, ab_error_t *err)
{
    scan_t sc = {calloc(AB__SEQ_SCAN, sizeof(cand_t)), 0, true, 0, UINT64_MAX, false};
    if (!sc.c)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory loading thread '%s'", t->thread);
    uint64_t fin = 0;
    bool answered = false;
    ab_status_t rc = find_interrupted(s, t, &sc, &fin, err);
    if (rc == AB_OK && t->pending && (rc = find_answer(s, t, &sc, fin, &answered, err)) == AB_OK)
        t->pending = !answered;
    free(sc.c);
    return rc;
}

ab_status_t ab__seq_thr_entry(ab_seq_t *s, ab_str_t thread, ab__seq_thr_t **out, ab_error_t *err)
{
    ab__seq_thr_t *t = thr_find(s, thread);
    if (t) {
        *out = t;
        return AB_OK;
    }
    t = calloc(1, sizeof(*t));
    char *id = malloc(thread.len + 1);
    if (!t || !id) {
        free(t);
        free(id);
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory caching a thread");
    }
    memcpy(id, thread.ptr, thread.len);
    id[thread.len] = '\0';
    t->thread = id;
    t->thread_len = thread.len;
    t->hash = thr_hash(thread);
    thr_insert(s, t);
    *out = t;
    return AB_OK;
}

/* The state of @p thread with its resume facet derived (invariants 1 and 5). */
ab_status_t ab__seq_thr_get(ab_seq_t *s, ab_str_t thread, ab__seq_thr_t **out, ab_error_t *err)
{
    ab__seq_thr_t *t = NULL;
    ab_status_t rc = ab__seq_thr_entry(s, thread, &t, err);
    if (rc != AB_OK)
        return rc;
    if (!t->resume_loaded) {
        t->run_len = 0;
        t->run[0] = '\0';
        t->pending = t->errored = false;
        t->fin_seq = t->fin_gen = 0;
        if ((rc = load_state(s, t, err)) != AB_OK)
            return rc;
        t->resume_loaded = true;
        for (size_t i = 0; i < s->ntev; i++) {
            uint32_t idx = s->tev[i].idx;
            const ab_seq_item_t *it = s->pend_items[idx];
            if (!ab__seq_act_event(it->info->type) && id_is(thread.ptr, thread.len, it->ev->thread))
                apply_resume(s, t, idx);
        }
    }
    *out = t;
    return AB_OK;
}

/* ---- the check ----------------------------------------------------------------------- */

/* Whether @p parent is an active run of @p thread now (staged events included). */
static ab_status_t parent_active(ab_seq_t *s, ab_str_t thread, ab_str_t parent, bool *active,
                                 ab_error_t *err)
{
    const ab__seq_run_t *p = ab__seq_find(s, thread, parent);
    if (p) {
        *active = p->status == AB_RUN_STATUS_ACTIVE;
        return AB_OK;
    }
    ab_run_head_t h;
    ab_status_t rc = s->plugin->head(s->db, thread, parent, &h, err);
    if (rc == AB_OK)
        *active = h.status == AB_RUN_STATUS_ACTIVE;
    return rc;
}

/* r->level of a run loaded from the store (it has started: its RUN_FINISHED is next). */
static ab_status_t learn_level(ab_seq_t *s, ab__seq_run_t *r, ab_error_t *err)
{
    ab_str_t th = {r->thread, r->thread_len}, run = {r->run, r->run_len};
    ab_run_head_t h;
    uint64_t start = 0;
    bool child = false;
    ab_status_t rc = s->plugin->head(s->db, th, run, &h, err);
    if (rc == AB_OK && h.parent_run[0] &&
        (rc = start_pos(s, th, r->run, h.last_seq, h.last_pos, &start, err)) == AB_OK)
        rc = is_child(s, th, h.parent_run, start, &child, err);
    if (rc == AB_OK)
        r->level = child ? AB__SEQ_LEVEL_CHILD : AB__SEQ_LEVEL_TOP;
    return rc;
}

static ab_status_t check_start(ab_seq_t *s, ab__seq_run_t *r, const ab_seq_item_t *it,
                               bool *changes, ab_error_t *err)
{
    const ab_agui_info_t *in = it->info;
    bool child = false;
    ab_status_t rc = AB_OK;
    if (in->parent_run_id.ptr &&
        (rc = parent_active(s, it->ev->thread, in->parent_run_id, &child, err)) != AB_OK)
        return rc;
    r->level = child ? AB__SEQ_LEVEL_CHILD : AB__SEQ_LEVEL_TOP;
    if (child || !in->input)
        return AB_OK; /* a child run answers to its parent; no input, nothing to check */
    ab__seq_thr_t *t = NULL;
    if ((rc = ab__seq_thr_get(s, it->ev->thread, &t, err)) != AB_OK ||
        (rc = ab__seq_resume_check(s, t, it, err)) != AB_OK)
        return rc;
    *changes = true;
    return AB_OK;
}

ab_status_t ab__seq_thr_check(ab_seq_t *s, ab__seq_run_t *r, const ab_seq_item_t *it, bool *changes,
                              ab_error_t *err)
{
    const ab_agui_info_t *in = it->info;
    *changes = false;
    if (in->type == AB_AGUI_RUN_STARTED)
        return check_start(s, r, it, changes, err);
    if (in->type == AB_AGUI_RUN_ERROR) {
        *changes = true;
        return AB_OK;
    }
    if (in->type != AB_AGUI_RUN_FINISHED || in->outcome != AB_OUTCOME_INTERRUPT)
        return AB_OK;
    ab_status_t rc = AB_OK;
    if (r->level == AB__SEQ_LEVEL_UNKNOWN && (rc = learn_level(s, r, err)) != AB_OK)
        return rc;
    *changes = r->level == AB__SEQ_LEVEL_TOP;
    return AB_OK;
}

/*
 * replay_verify.c - the audit of `agentbus replay --verify`: every run's
 * seqs are contiguous from 1, every event passes the strict AG-UI check and
 * a lifecycle checker created with the run's ids, and the run ends with a
 * terminal event (or is reported as still active, which is not a failure).
 *
 * Invariants:
 *  1. Runs are found through a hash table (FNV-1a of thread, 0xff, run;
 *     chained; the buckets double when the runs held reach their number),
 *     so an event costs O(1) expected and the audit is linear in the events.
 *  2. A run is held only while it is in progress, or after it failed. The
 *     event that ends it (RUN_FINISHED or RUN_ERROR, accepted) prints its
 *     line and frees it, so memory is bounded by the runs in progress at
 *     once plus the failed ones, never by the history.
 *  3. An event of a run that is not held, at seq k > 1, is judged against
 *     the store's event k - 1 (the lookup). After RUN_FINISHED, one valid
 *     RUN_ERROR is the late error AG-UI allows. Anything else after a
 *     terminal event is an event after the end: the run, counted ok when it
 *     ended, becomes failed. Without a terminal event at k - 1, the run's
 *     first events are missing from the store; a lookup the store refuses
 *     as damaged (`corrupt`: a chunk of the run's chain is gone) is such a
 *     run too, its failure naming the store's words, and the audit goes on.
 *  4. The first failure of a run is kept; the run's later events are only
 *     counted (they would repeat it). Other runs go on being checked.
 *  5. Rule R20 holds across the runs of a thread, as the broker applies it:
 *     the activity messages each thread holds are noted from its accepted
 *     events in position order (activity_set.h), and each run's checker asks
 *     them for a delta's baseline from an earlier run.
 */
#include "replay_verify.h"
#include "ab_common.h"
#include "activity_set.h"

#include <stdlib.h>
#include <string.h>

struct vrun {
    struct vrun *hnext;       /* bucket chain */
    struct vrun *prev, *next; /* runs held, in the order they first appeared */
    uint64_t hash, events, next_seq;
    ab_lifecycle_t *lc; /* NULL once failed */
    act_ctx_t act;      /* its thread's activity messages (invariant 5) */
    char *why;          /* the first failure; NULL while the run is good */
    ab_agui_outcome_t outcome;
    size_t tlen, rlen;
    char ids[]; /* the thread id, then the run id (no terminators) */
};

struct verify {
    FILE *out;
    verify_lookup_fn lookup;
    void *ud;
    struct vrun **b; /* buckets; nb is a power of two */
    size_t nb;
    struct vrun *first, *last;
    size_t active; /* runs in progress */
    act_set_t *acts;
    verify_counts_t c;
};

enum { MIN_BUCKETS = 64 };

static uint64_t hash_ids(ab_str_t t, ab_str_t r)
{
    static const unsigned char sep = 0xff; /* ("ab","c") != ("a","bc") */
    uint64_t h = ab__fnv64(t.ptr, t.len);
    h = ab__fnv64_more(h, &sep, 1);
    return ab__fnv64_more(h, r.ptr, r.len);
}

/* The link that points at the run (thread, run), or the empty one ending its chain. */
static struct vrun **link_of(verify_t *v, uint64_t h, ab_str_t t, ab_str_t r)
{
    struct vrun **p = &v->b[h & (v->nb - 1)];
    for (; *p; p = &(*p)->hnext) {
        const struct vrun *e = *p;
        if (e->hash == h && e->tlen == t.len && e->rlen == r.len &&
            memcmp(e->ids, t.ptr, t.len) == 0 && memcmp(e->ids + t.len, r.ptr, r.len) == 0)
            break;
    }
    return p;
}

static ab_str_t thread_of(const struct vrun *e)
{
    return (ab_str_t){e->ids, e->tlen};
}

static ab_str_t run_of(const struct vrun *e)
{
    return (ab_str_t){e->ids + e->tlen, e->rlen};
}

static ab_status_t grow(verify_t *v)
{
    size_t nb = v->nb * 2;
    struct vrun **b = calloc(nb, sizeof(*b));
    if (!b)
        return AB_NOMEM;
    for (size_t i = 0; i < v->nb; i++) {
        for (struct vrun *e = v->b[i], *nx; e; e = nx) {
            nx = e->hnext;
            e->hnext = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
        }
    }
    free(v->b);
    v->b = b;
    v->nb = nb;
    return AB_OK;
}

/* Hold a new run (invariant 1); NULL when out of memory. */
static struct vrun *add_run(verify_t *v, uint64_t h, ab_str_t t, ab_str_t r)
{
    if (v->c.held >= v->nb && grow(v) != AB_OK)
        return NULL;
    struct vrun *e = calloc(1, sizeof(*e) + t.len + r.len);
    if (!e)
        return NULL;
    e->hash = h;
    e->tlen = t.len;
    e->rlen = r.len;
    memcpy(e->ids, t.ptr, t.len);
    memcpy(e->ids + t.len, r.ptr, r.len);
    *link_of(v, h, t, r) = e;
    e->prev = v->last;
    if (v->last)
        v->last->next = e;
    else
        v->first = e;
    v->last = e;
    if (++v->c.held > v->c.held_max)
        v->c.held_max = v->c.held;
    return e;
}

/* Forget a run (invariant 2). */
static void drop_run(verify_t *v, struct vrun *e)
{
    *link_of(v, e->hash, thread_of(e), run_of(e)) = e->hnext;
    if (e->prev)
        e->prev->next = e->next;
    else
        v->first = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        v->last = e->prev;
    ab_lifecycle_destroy(&e->lc);
    free(e->why);
    free(e);
    v->c.held--;
}

static void line_head(const verify_t *v, const struct vrun *e)
{
    fprintf(v->out, "run %.*s/%.*s: ", (int)e->tlen, e->ids, (int)e->rlen, e->ids + e->tlen);
}

static const char *outcome_name(ab_agui_outcome_t o)
{
    return o == AB_OUTCOME_INTERRUPT   ? "interrupt"
           : o == AB_OUTCOME_CANCELLED ? "cancelled"
                                       : "success";
}

/* Record the run's first failure (invariant 4). */
static ab_status_t fail_run(verify_t *v, struct vrun *e, const char *what, const ab_error_t *err,
                            uint64_t seq)
{
    char why[512];
    int n = snprintf(why, sizeof(why), "%s at seq %llu: %s%s%s", what, (unsigned long long)seq,
                     err->message, err->field[0] ? " at " : "", err->field);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof(why) ? (size_t)n : sizeof(why) - 1;
    e->why = malloc(len + 1);
    if (!e->why)
        return AB_NOMEM;
    memcpy(e->why, why, len);
    e->why[len] = '\0';
    if (e->lc) {
        ab_lifecycle_destroy(&e->lc);
        v->active--;
    }
    v->c.failed++;
    return AB_OK;
}

/* The run ended and verified: its line, then it is forgotten (invariant 2). */
static void end_run(verify_t *v, struct vrun *e, ab_run_state_t st)
{
    line_head(v, e);
    fprintf(v->out, "%llu events, seq 1..%llu, ", (unsigned long long)e->events,
            (unsigned long long)(e->next_seq - 1));
    if (st == AB_RUN_FINISHED)
        fprintf(v->out, "finished (%s)\n", outcome_name(e->outcome));
    else
        fprintf(v->out, "errored (RUN_ERROR)\n");
    v->c.ok++;
    v->active--;
    drop_run(v, e);
}

/* Judge one event of a held run. */
static ab_status_t judge(verify_t *v, struct vrun *e, const ab_event_t *ev)
{
    e->events++;
    if (e->why)
        return AB_OK;
    ab_error_t err = AB_ERROR_INIT;
    if (ev->seq != e->next_seq) {
        ab_error_set(&err, AB_GAP, NULL, "expected seq %llu", (unsigned long long)e->next_seq);
        return fail_run(v, e, "not contiguous", &err, ev->seq);
    }
    e->next_seq++;
    ab_agui_info_t in;
    if (ab_agui_validate(ev->body, AB_AGUI_STRICT, NULL, NULL, &in, &err) != AB_OK)
        return fail_run(v, e, "invalid event", &err, ev->seq);
    ab_status_t rc = ab_lifecycle_check(e->lc, &in, &err);
    if (rc == AB_NOMEM)
        return rc;
    if (rc != AB_OK)
        return fail_run(v, e, "lifecycle", &err, ev->seq);
    if (act_set_note(v->acts, ev->thread, &in) != AB_OK)
        return AB_NOMEM;
    if (in.type == AB_AGUI_RUN_FINISHED)
        e->outcome = in.outcome;
    ab_run_state_t st = ab_lifecycle_state(e->lc);
    if (st == AB_RUN_FINISHED || st == AB_RUN_ERRORED)
        end_run(v, e, st);
    return AB_OK;
}

/* The first event of a run: seq 1 starts it. */
static ab_status_t start_run(verify_t *v, uint64_t h, const ab_event_t *ev)
{
    struct vrun *e = add_run(v, h, ev->thread, ev->run);
    if (!e)
        return AB_NOMEM;
    v->c.runs++;
    e->next_seq = 1;
    if (ab_lifecycle_new(&e->lc, ev->thread.ptr, ev->thread.len, ev->run.ptr, ev->run.len, NULL) !=
        AB_OK) {
        drop_run(v, e);
        return AB_NOMEM;
    }
    e->act = (act_ctx_t){v->acts, thread_of(e)};
    ab_lifecycle_set_baseline(e->lc, act_set_baseline, &e->act);
    v->active++;
    if (v->active > v->c.active_max)
        v->c.active_max = v->active;
    return judge(v, e, ev);
}

/* An event at seq k > 1 of a run not held (invariant 3). */
static ab_status_t orphan(verify_t *v, uint64_t h, const ab_event_t *ev, ab_error_t *err)
{
    verify_prev_t prev = {.found = false};
    v->c.lookups++;
    ab_error_t lerr = AB_ERROR_INIT;
    ab_status_t rc = v->lookup(v->ud, ev->thread, ev->run, ev->seq - 1, &prev, &lerr);
    if (rc != AB_OK && rc != AB_CORRUPT) {
        *err = lerr;
        return rc;
    }
    bool ended =
        prev.found && (prev.type == AB_AGUI_RUN_FINISHED || prev.type == AB_AGUI_RUN_ERROR);
    ab_agui_info_t in;
    ab_error_t verr = AB_ERROR_INIT;
    bool valid = ab_agui_validate(ev->body, AB_AGUI_STRICT, NULL, NULL, &in, &verr) == AB_OK;
    if (ended && prev.type == AB_AGUI_RUN_FINISHED && valid && in.type == AB_AGUI_RUN_ERROR) {
        fprintf(v->out, "run %.*s/%.*s: late RUN_ERROR at seq %llu, errored (after RUN_FINISHED)\n",
                (int)ev->thread.len, ev->thread.ptr, (int)ev->run.len, ev->run.ptr,
                (unsigned long long)ev->seq);
        v->c.late++;
        return AB_OK;
    }
    struct vrun *e = add_run(v, h, ev->thread, ev->run);
    if (!e)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    e->next_seq = ev->seq + 1;
    e->events = 1;
    if (!ended) {
        v->c.runs++;
        if (rc == AB_CORRUPT) /* invariant 3 */
            ab_error_set(&verr, AB_GAP, NULL, "expected seq 1; the store: %s", lerr.message);
        else
            ab_error_set(&verr, AB_GAP, NULL, "expected seq 1");
        rc = fail_run(v, e, "not contiguous", &verr, ev->seq);
    } else {
        e->events = ev->seq; /* seq 1..k-1 verified when the run ended */
        if (v->c.ok > 0)
            v->c.ok--; /* it was counted ok then */
        if (valid)
            ab_error_set(&verr, AB_RUN_TERMINAL, "/type", "event after the end of the run");
        rc = fail_run(v, e, valid ? "lifecycle" : "invalid event", &verr, ev->seq);
    }
    return rc == AB_OK ? AB_OK : ab_error_set(err, rc, NULL, "out of memory");
}

ab_status_t verify_event(verify_t *v, const ab_event_t *ev, ab_error_t *err)
{
    v->c.events++;
    uint64_t h = hash_ids(ev->thread, ev->run);
    struct vrun *e = *link_of(v, h, ev->thread, ev->run);
    ab_status_t rc;
    if (e)
        rc = judge(v, e, ev);
    else if (ev->seq <= 1)
        rc = start_run(v, h, ev);
    else
        return orphan(v, h, ev, err);
    return rc == AB_OK ? AB_OK : ab_error_set(err, rc, NULL, "out of memory");
}

ab_status_t verify_new(verify_t **out, FILE *report, verify_lookup_fn lookup, void *ud)
{
    verify_t *v = calloc(1, sizeof(*v));
    if (!v)
        return AB_NOMEM;
    v->b = calloc(MIN_BUCKETS, sizeof(*v->b));
    v->acts = act_set_new();
    if (!v->b || !v->acts) {
        free(v->b);
        act_set_free(v->acts);
        free(v);
        return AB_NOMEM;
    }
    v->nb = MIN_BUCKETS;
    v->out = report;
    v->lookup = lookup;
    v->ud = ud;
    *out = v;
    return AB_OK;
}

uint64_t verify_finish(verify_t *v)
{
    size_t active = 0;
    for (const struct vrun *e = v->first; e; e = e->next) {
        line_head(v, e);
        fprintf(v->out, "%llu events, ", (unsigned long long)e->events);
        if (e->why) {
            fprintf(v->out, "FAILED: %s\n", e->why);
            continue;
        }
        fprintf(v->out, "seq 1..%llu, still active\n", (unsigned long long)(e->next_seq - 1));
        active++;
    }
    fprintf(v->out, "verified: %llu runs ok, %llu failed, %zu still active\n",
            (unsigned long long)v->c.ok, (unsigned long long)v->c.failed, active);
    return v->c.failed;
}

verify_counts_t verify_counts(const verify_t *v)
{
    return v->c;
}

void verify_destroy(verify_t **vp)
{
    if (!vp || !*vp)
        return;
    verify_t *v = *vp;
    while (v->first)
        drop_run(v, v->first);
    free(v->b);
    act_set_free(v->acts);
    free(v);
    *vp = NULL;
}

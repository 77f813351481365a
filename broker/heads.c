/*
 * heads.c - run heads read from the plugin, for heads_reply (writer) and
 * replay_end (readers).
 *
 * Invariants:
 *  1. Heads are copies (ab_run_head_t owns its ids), so a list outlives
 *     the plugin call that produced it; the wire views (ab_head_view(), the
 *     codec's conversion) point into the list.
 *  2. A head always names its run: ids a plugin left empty are filled in
 *     from the request.
 *  3. ab__heads_add_newest() keeps the heads of a thread's newest `max`
 *     runs (in the order the runs were recorded), reading the others past:
 *     its memory and the reply carrying them are bounded whatever the
 *     thread's number of runs. A head the list cannot take is an error
 *     (out of memory), never a shorter list.
 */
#include "ab_common.h"
#include "internal.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

static ab_status_t push(ab_headlist_t *hl, const ab_run_head_t *h)
{
    ab_run_head_t *v = ab__grow(hl->v, &hl->cap, hl->n + 1, sizeof(*v), 8);
    if (v == NULL)
        return AB_NOMEM;
    hl->v = v;
    hl->v[hl->n++] = *h;
    return AB_OK;
}

ab_status_t ab__heads_add_run(const ab_plugin_t *p, ab_plugin_db_t *db, ab_headlist_t *hl,
                              ab_str_t thread, ab_str_t run, ab_error_t *err)
{
    ab_run_head_t h;
    memset(&h, 0, sizeof(h));
    ab_status_t st = p->head(db, thread, run, &h, err);
    if (st != AB_OK)
        return st;
    if (h.thread[0] == '\0' && thread.len <= AB_ID_MAX_BYTES) {
        memcpy(h.thread, thread.ptr, thread.len);
        h.thread[thread.len] = '\0';
    }
    if (h.run[0] == '\0' && run.len <= AB_ID_MAX_BYTES) {
        memcpy(h.run, run.ptr, run.len);
        h.run[run.len] = '\0';
    }
    if (push(hl, &h) != AB_OK)
        return ab_error_set(err, AB_NOMEM, "", "out of memory");
    return AB_OK;
}

/* The heads of a thread's runs being read: the newest @p max of them (invariant 3). */
typedef struct newest {
    ab_headlist_t *hl;
    size_t base; /**< the list's length before the thread's heads */
    size_t max;
    size_t next; /**< once full: the slot of the oldest kept head, replaced next */
    uint64_t runs;
    bool nomem;
} newest_t;

static int thread_cb(void *ud, const ab_run_head_t *h)
{
    newest_t *w = ud;
    w->runs++;
    if (w->hl->n - w->base < w->max) {
        w->nomem = push(w->hl, h) != AB_OK;
        return w->nomem ? 1 : 0;
    }
    w->hl->v[w->base + w->next] = *h;
    w->next = (w->next + 1) % w->max;
    return 0;
}

static void reverse(ab_run_head_t *v, size_t n)
{
    for (size_t i = 0; i < n / 2; i++) {
        ab_run_head_t t = v[i];
        v[i] = v[n - 1 - i];
        v[n - 1 - i] = t;
    }
}

ab_status_t ab__heads_add_newest(const ab_plugin_t *p, ab_plugin_db_t *db, ab_headlist_t *hl,
                                 ab_str_t thread, size_t max, ab_error_t *err)
{
    newest_t w = {.hl = hl, .base = hl->n, .max = max > 0 ? max : 1};
    ab_status_t st = p->thread_heads(db, thread, thread_cb, &w, err);
    if (st == AB_OK && w.nomem)
        st = ab_error_set(err, AB_NOMEM, "", "out of memory reading the heads of a thread");
    if (st != AB_OK || w.next == 0)
        return st;
    ab_run_head_t *v = hl->v + w.base; /* oldest kept first again: rotate left by next */
    reverse(v, w.next);
    reverse(v + w.next, w.max - w.next);
    reverse(v, w.max);
    ab__log(AB_LOG_DEBUG, "heads of thread %.*s: the newest %zu of its %llu runs", (int)thread.len,
            thread.ptr, w.max, (unsigned long long)w.runs);
    return AB_OK;
}

ab_status_t ab__heads_add_thread(const ab_plugin_t *p, ab_plugin_db_t *db, ab_headlist_t *hl,
                                 ab_str_t thread, ab_error_t *err)
{
    return ab__heads_add_newest(p, db, hl, thread, SIZE_MAX, err);
}

ab_head_t *ab__heads_view(const ab_headlist_t *hl)
{
    if (hl->n == 0)
        return NULL;
    ab_head_t *v = calloc(hl->n, sizeof(*v));
    if (v == NULL)
        return NULL;
    for (size_t i = 0; i < hl->n; i++)
        v[i] = ab_head_view(&hl->v[i]); /* the wire's outcome rule is the codec's */
    return v;
}

void ab__headlist_free(ab_headlist_t *hl)
{
    free(hl->v);
    memset(hl, 0, sizeof(*hl));
}

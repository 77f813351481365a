/*
 * heads.c - run heads read from the plugin, for heads_reply (writer) and
 * replay_end (readers).
 *
 * Invariants:
 *  1. Heads are copies (ab_plugin_head_t owns its ids), so a list outlives
 *     the plugin call that produced it; views point into the list.
 *  2. Every finished run has an outcome in the view, one of the wire's
 *     (success, interrupt, cancelled): a RUN_FINISHED without `outcome` is a
 *     success, as AG-UI says and as the thread snapshot reports it. Other
 *     runs have none (an errored run's earlier outcome is the snapshot's).
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static ab_status_t push(ab_headlist_t *hl, const ab_plugin_head_t *h)
{
    if (hl->n == hl->cap) {
        size_t cap = hl->cap ? hl->cap * 2 : 8;
        ab_plugin_head_t *v = realloc(hl->v, cap * sizeof(*v));
        if (v == NULL)
            return AB_NOMEM;
        hl->v = v;
        hl->cap = cap;
    }
    hl->v[hl->n++] = *h;
    return AB_OK;
}

ab_status_t ab__heads_add_run(const ab_plugin_t *p, ab_plugin_db_t *db, ab_headlist_t *hl,
                              ab_str_t thread, ab_str_t run, ab_error_t *err)
{
    ab_plugin_head_t h;
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

static int thread_cb(void *ud, const ab_plugin_head_t *h)
{
    return push(ud, h) == AB_OK ? 0 : 1;
}

ab_status_t ab__heads_add_thread(const ab_plugin_t *p, ab_plugin_db_t *db, ab_headlist_t *hl,
                                 ab_str_t thread, ab_error_t *err)
{
    return p->thread_heads(db, thread, thread_cb, hl, err);
}

ab_head_t *ab__heads_view(const ab_headlist_t *hl)
{
    if (hl->n == 0)
        return NULL;
    ab_head_t *v = calloc(hl->n, sizeof(*v));
    if (v == NULL)
        return NULL;
    for (size_t i = 0; i < hl->n; i++) {
        const ab_plugin_head_t *h = &hl->v[i];
        v[i].thread = (ab_str_t){h->thread, strlen(h->thread)};
        v[i].run = (ab_str_t){h->run, strlen(h->run)};
        v[i].last_seq = h->last_seq;
        v[i].epoch = h->epoch;
        v[i].status = h->status;
        v[i].last_pos = h->last_pos;
        bool wire = h->outcome == AB_OUTCOME_SUCCESS || h->outcome == AB_OUTCOME_INTERRUPT ||
                    h->outcome == AB_OUTCOME_CANCELLED;
        /* invariant 2: a RUN_FINISHED without outcome is a success (AG-UI) */
        if (h->status == AB_RUN_STATUS_FINISHED)
            v[i].outcome = wire ? h->outcome : AB_OUTCOME_SUCCESS;
        else
            v[i].outcome = AB_OUTCOME_NONE;
    }
    return v;
}

void ab__headlist_free(ab_headlist_t *hl)
{
    free(hl->v);
    memset(hl, 0, sizeof(*hl));
}

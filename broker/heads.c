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
 */
#include "ab_common.h"
#include "internal.h"

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

static int thread_cb(void *ud, const ab_run_head_t *h)
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
    for (size_t i = 0; i < hl->n; i++)
        v[i] = ab_head_view(&hl->v[i]); /* the wire's outcome rule is the codec's */
    return v;
}

void ab__headlist_free(ab_headlist_t *hl)
{
    free(hl->v);
    memset(hl, 0, sizeof(*hl));
}

/*
 * activity_set.c - per-thread sets of activity message ids (activity_set.h).
 *
 * Invariants:
 *  1. Threads are found by a 64-bit FNV-1a hash of their id in a chained
 *     table that doubles at load 1; ids within a thread by the hash of the
 *     message id in an unsorted array (a thread holds few activity messages).
 *     Two ids with the same 64-bit hash count as one: a cross-run delta for
 *     the second would be accepted, with odds of about n^2 / 2^65.
 *  2. The rules are the sequencer's: ACTIVITY_SNAPSHOT adds its messageId; a
 *     MESSAGES_SNAPSHOT that carries activity messages makes them the whole
 *     set; one that carries none keeps it.
 */
#include "activity_set.h"
#include "ab_common.h"

#include <stdlib.h>
#include <string.h>

typedef struct athr {
    struct athr *next;
    uint64_t h;
    uint64_t *ids;
    size_t n, cap;
} athr_t;

struct act_set {
    athr_t **b;
    size_t nb, count;
};

act_set_t *act_set_new(void)
{
    act_set_t *s = calloc(1, sizeof(*s));
    if (s && !(s->b = calloc(64, sizeof(*s->b)))) {
        free(s);
        return NULL;
    }
    if (s)
        s->nb = 64;
    return s;
}

void act_set_free(act_set_t *s)
{
    for (size_t i = 0; s && i < s->nb; i++)
        for (athr_t *t = s->b[i], *nx; t; t = nx) {
            nx = t->next;
            free(t->ids);
            free(t);
        }
    if (s)
        free(s->b);
    free(s);
}

static athr_t *find(const act_set_t *s, uint64_t h)
{
    for (athr_t *t = s->b[h & (s->nb - 1)]; t; t = t->next)
        if (t->h == h)
            return t;
    return NULL;
}

static bool grow(act_set_t *s)
{
    size_t nb = s->nb * 2;
    athr_t **b = calloc(nb, sizeof(*b));
    if (!b)
        return false;
    for (size_t i = 0; i < s->nb; i++)
        for (athr_t *t = s->b[i], *nx; t; t = nx) {
            nx = t->next;
            t->next = b[t->h & (nb - 1)];
            b[t->h & (nb - 1)] = t;
        }
    free(s->b);
    s->b = b;
    s->nb = nb;
    return true;
}

static athr_t *get(act_set_t *s, uint64_t h)
{
    athr_t *t = find(s, h);
    if (t || (s->count >= s->nb && !grow(s)))
        return t;
    if (!(t = calloc(1, sizeof(*t))))
        return NULL;
    t->h = h;
    t->next = s->b[h & (s->nb - 1)];
    s->b[h & (s->nb - 1)] = t;
    s->count++;
    return t;
}

static bool has(const athr_t *t, uint64_t id)
{
    for (size_t i = 0; t && i < t->n; i++)
        if (t->ids[i] == id)
            return true;
    return false;
}

static ab_status_t add(athr_t *t, uint64_t id)
{
    if (has(t, id))
        return AB_OK;
    uint64_t *v = ab__grow(t->ids, &t->cap, t->n + 1, sizeof(*v), 4);
    if (!v)
        return AB_NOMEM;
    t->ids = v;
    t->ids[t->n++] = id;
    return AB_OK;
}

static uint64_t id_hash(const char *p, size_t n)
{
    return ab__fnv64(p, n);
}

/* A MESSAGES_SNAPSHOT: its activity messages, when it has any, are the whole set. */
static ab_status_t snapshot(act_set_t *s, uint64_t th, const ab_val_t *msgs)
{
    size_t acts = 0;
    for (uint32_t i = 0; msgs && msgs->type == AB_VAL_ARRAY && i < msgs->len; i++)
        acts += ab_val_str_eq(ab_val_get(&msgs->u.items[i], "role"), "activity");
    athr_t *t = acts ? get(s, th) : NULL;
    if (acts && !t)
        return AB_NOMEM;
    if (!acts)
        return AB_OK;
    t->n = 0;
    for (uint32_t i = 0; i < msgs->len; i++) {
        const ab_val_t *m = &msgs->u.items[i], *id = ab_val_get(m, "id");
        if (ab_val_str_eq(ab_val_get(m, "role"), "activity") && id && id->type == AB_VAL_STR &&
            add(t, id_hash(id->u.s, id->len)) != AB_OK)
            return AB_NOMEM;
    }
    return AB_OK;
}

ab_status_t act_set_note(act_set_t *s, ab_str_t thread, const ab_agui_info_t *info)
{
    uint64_t th = ab__fnv64(thread.ptr, thread.len);
    if (info->type == AB_AGUI_MESSAGES_SNAPSHOT)
        return snapshot(s, th, ab_val_get(info->event, "messages"));
    if (info->type != AB_AGUI_ACTIVITY_SNAPSHOT || !info->message_id.ptr)
        return AB_OK;
    athr_t *t = get(s, th);
    return t ? add(t, id_hash(info->message_id.ptr, info->message_id.len)) : AB_NOMEM;
}

ab_status_t act_set_baseline(void *ud, ab_str_t message_id, ab_error_t *err)
{
    (void)err;
    const act_ctx_t *c = ud;
    const athr_t *t = find(c->set, ab__fnv64(c->thread.ptr, c->thread.len));
    return has(t, id_hash(message_id.ptr, message_id.len)) ? AB_OK : AB_NOT_FOUND;
}

/*
 * sub_state.c - the subscriber's state containers: the per-run cursor map
 * and the bounded FIFO of live events buffered during a replay.
 *
 * Invariants:
 *  1. The map's index always has a free slot (icap > 2 * n), so a lookup of
 *     an absent run terminates.
 *  2. The FIFO never holds more than `max` items: a push beyond it is
 *     refused (AB_TOO_LARGE) and the caller drops the buffer and replays.
 */
#include "ab_common.h"
#include "sub_int.h"

#include <stdlib.h>
#include <string.h>

static size_t find_slot(const sub_map_t *m, const char *run, size_t len)
{
    size_t mask = m->icap - 1;
    for (size_t i = ab__fnv32_more(AB__FNV32_BASIS, run, len) & mask;; i = (i + 1) & mask) {
        uint32_t e = m->idx[i];
        if (e == 0)
            return i;
        if (m->lens[e - 1] == len && memcmp(m->ent[e - 1].run, run, len) == 0)
            return i;
    }
}

uint64_t ab__sub_map_get(const sub_map_t *m, const char *run, size_t len)
{
    if (m->icap == 0)
        return 0;
    uint32_t e = m->idx[find_slot(m, run, len)];
    return e ? m->ent[e - 1].after_seq : 0;
}

static ab_status_t rehash(sub_map_t *m)
{
    size_t icap = m->icap ? m->icap * 2 : 16;
    uint32_t *idx = calloc(icap, sizeof(*idx));
    if (!idx)
        return AB_NOMEM;
    free(m->idx);
    m->idx = idx;
    m->icap = icap;
    for (size_t i = 0; i < m->n; i++)
        m->idx[find_slot(m, m->ent[i].run, m->lens[i])] = (uint32_t)(i + 1);
    return AB_OK;
}

static ab_status_t add_entry(sub_map_t *m, const char *run, size_t len, uint64_t seq)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        ab_sub_cursor_t *ent = realloc(m->ent, cap * sizeof(*ent));
        if (!ent)
            return AB_NOMEM;
        m->ent = ent;
        size_t *lens = realloc(m->lens, cap * sizeof(*lens));
        if (!lens)
            return AB_NOMEM;
        m->lens = lens;
        m->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return AB_NOMEM;
    memcpy(copy, run, len);
    copy[len] = '\0';
    m->ent[m->n] = (ab_sub_cursor_t){copy, seq};
    m->lens[m->n] = len;
    m->n++;
    return AB_OK;
}

ab_status_t ab__sub_map_set(sub_map_t *m, const char *run, size_t len, uint64_t seq)
{
    if (m->icap <= 2 * (m->n + 1) && rehash(m) != AB_OK)
        return AB_NOMEM;
    size_t slot = find_slot(m, run, len);
    if (m->idx[slot]) {
        m->ent[m->idx[slot] - 1].after_seq = seq;
        return AB_OK;
    }
    if (add_entry(m, run, len, seq) != AB_OK)
        return AB_NOMEM;
    m->idx[slot] = (uint32_t)m->n;
    return AB_OK;
}

void ab__sub_map_free(sub_map_t *m)
{
    for (size_t i = 0; i < m->n; i++)
        free((void *)(uintptr_t)m->ent[i].run);
    free(m->ent);
    free(m->lens);
    free(m->idx);
    memset(m, 0, sizeof(*m));
}

ab_status_t ab__sub_fifo_push(sub_fifo_t *f, const ab_stamp_t *st, const uint8_t *b, size_t len)
{
    if (f->n >= f->max)
        return AB_TOO_LARGE;
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 64;
        sub_item_t **items = malloc(cap * sizeof(*items));
        if (!items)
            return AB_NOMEM;
        for (size_t i = 0; i < f->n; i++)
            items[i] = f->items[(f->head + i) % f->cap];
        free(f->items);
        f->items = items;
        f->cap = cap;
        f->head = 0;
    }
    sub_item_t *it = malloc(sizeof(*it) + len);
    if (!it)
        return AB_NOMEM;
    it->stamp = *st;
    it->len = len;
    memcpy(it->bytes, b, len);
    f->items[(f->head + f->n) % f->cap] = it;
    f->n++;
    return AB_OK;
}

const sub_item_t *ab__sub_fifo_front(const sub_fifo_t *f)
{
    return f->n ? f->items[f->head] : NULL;
}

void ab__sub_fifo_pop(sub_fifo_t *f)
{
    if (!f->n)
        return;
    free(f->items[f->head]);
    f->head = (f->head + 1) % f->cap;
    f->n--;
}

void ab__sub_fifo_clear(sub_fifo_t *f)
{
    while (f->n)
        ab__sub_fifo_pop(f);
    f->head = 0;
}

void ab__sub_fifo_free(sub_fifo_t *f)
{
    ab__sub_fifo_clear(f);
    free(f->items);
    f->items = NULL;
    f->cap = 0;
}

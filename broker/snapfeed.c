/*
 * snapfeed.c - committed events handed from the writer to the snapshot
 * worker in memory (snapfeed.h).
 *
 * Invariants:
 *  1. A record is [pos u64][seq u64][len u32][run length u16][run][bytes],
 *     native byte order, unaligned (read with memcpy); it never spans blocks.
 *  2. f->bytes is what the feed's blocks and struct take, and is in *acct
 *     from the moment it is allocated until ab__snapfeed_free(); *acct never
 *     passes AB__SNAPFEED_BYTES because of an add.
 */
#include "snapfeed.h"

#include <stdlib.h>
#include <string.h>

#define REC_HEAD (8u + 8u + 4u + 2u)

struct ab__feedblk {
    struct ab__feedblk *next;
    size_t len, cap;
    uint8_t data[];
};

/* Count @p n more bytes in @p acct when they fit the bound (invariant 2). */
static bool reserve(_Atomic size_t *acct, size_t n)
{
    size_t cur = atomic_load(acct);
    do {
        if (n > AB__SNAPFEED_BYTES || cur > AB__SNAPFEED_BYTES - n)
            return false;
    } while (!atomic_compare_exchange_weak(acct, &cur, cur + n));
    return true;
}

static ab__snapfeed_t *feed_new(_Atomic size_t *acct, uint64_t cover)
{
    if (!reserve(acct, sizeof(ab__snapfeed_t)))
        return NULL;
    ab__snapfeed_t *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        atomic_fetch_sub(acct, sizeof(ab__snapfeed_t));
        return NULL;
    }
    f->cover = f->last = cover;
    f->bytes = sizeof(*f);
    f->acct = acct;
    return f;
}

/* A block with room for @p need bytes at the feed's tail (a new one when the tail is full). */
static ab__feedblk_t *room(ab__snapfeed_t *f, size_t need)
{
    if (f->tail != NULL && f->tail->cap - f->tail->len >= need)
        return f->tail;
    /* blocks double from AB__SNAPFEED_BLOCK_MIN, so a quiet thread's feed stays small */
    size_t cap = f->tail == NULL ? AB__SNAPFEED_BLOCK_MIN : 2 * f->tail->cap;
    if (cap > AB__SNAPFEED_BLOCK)
        cap = AB__SNAPFEED_BLOCK;
    if (cap < need)
        cap = need;
    size_t size = sizeof(ab__feedblk_t) + cap;
    if (!reserve(f->acct, size))
        return NULL;
    ab__feedblk_t *k = malloc(size);
    if (k == NULL) {
        atomic_fetch_sub(f->acct, size);
        return NULL;
    }
    k->next = NULL;
    k->len = 0;
    k->cap = cap;
    f->bytes += size;
    if (f->tail != NULL)
        f->tail->next = k;
    else
        f->head = k;
    f->tail = k;
    return k;
}

bool ab__snapfeed_add(ab__snapfeed_t **fp, _Atomic size_t *acct, uint64_t cover, uint64_t pos,
                      ab_str_t run, uint64_t seq, const uint8_t *bytes, size_t len)
{
    if (*fp == NULL && (*fp = feed_new(acct, cover)) == NULL)
        return false;
    ab__snapfeed_t *f = *fp;
    ab__feedblk_t *k = NULL;
    if (run.len <= AB_ID_MAX_BYTES && len <= UINT32_MAX && pos > f->last)
        k = room(f, REC_HEAD + run.len + len);
    if (k == NULL) {
        ab__snapfeed_free(fp);
        return false;
    }
    uint8_t *p = k->data + k->len;
    uint32_t l32 = (uint32_t)len;
    uint16_t r16 = (uint16_t)run.len;
    memcpy(p, &pos, 8);
    memcpy(p + 8, &seq, 8);
    memcpy(p + 16, &l32, 4);
    memcpy(p + 20, &r16, 2);
    memcpy(p + REC_HEAD, run.ptr, run.len);
    if (len > 0)
        memcpy(p + REC_HEAD + run.len, bytes, len);
    k->len += REC_HEAD + run.len + len;
    f->last = pos;
    f->n++;
    return true;
}

bool ab__snapfeed_next(const ab__snapfeed_t *f, ab__feedcur_t *c, ab__snaprec_t *out)
{
    if (c->blk == NULL) {
        c->blk = f->head;
        c->off = 0;
    }
    while (c->blk != NULL && c->off >= c->blk->len) {
        if (c->blk->next == NULL)
            return false; /* stays at the end */
        c->blk = c->blk->next;
        c->off = 0;
    }
    if (c->blk == NULL)
        return false;
    const uint8_t *p = c->blk->data + c->off;
    uint32_t l32;
    uint16_t r16;
    memcpy(&out->pos, p, 8);
    memcpy(&out->seq, p + 8, 8);
    memcpy(&l32, p + 16, 4);
    memcpy(&r16, p + 20, 2);
    out->run = (ab_str_t){(const char *)p + REC_HEAD, r16};
    out->bytes = p + REC_HEAD + r16;
    out->len = l32;
    c->off += REC_HEAD + r16 + l32;
    return true;
}

void ab__snapfeed_free(ab__snapfeed_t **fp)
{
    ab__snapfeed_t *f = *fp;
    *fp = NULL;
    while (f != NULL) {
        ab__snapfeed_t *next = f->next;
        for (ab__feedblk_t *k = f->head; k != NULL;) {
            ab__feedblk_t *kn = k->next;
            free(k);
            k = kn;
        }
        atomic_fetch_sub(f->acct, f->bytes);
        free(f);
        f = next;
    }
}

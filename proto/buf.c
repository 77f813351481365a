/*
 * buf.c - growable byte buffer (see agentbus/buf.h).
 * Invariant: len <= cap; data is NULL iff cap == 0.
 */
#include "agentbus/buf.h"
#include "alloc_internal.h"

#include <stdlib.h>
#include <string.h>

ab_status_t ab_buf_reserve(ab_buf_t *b, size_t n)
{
    if (b->cap - b->len >= n)
        return AB_OK;
    if (n > SIZE_MAX / 2 - b->len)
        return AB_NOMEM;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n)
        cap *= 2;
    uint8_t *p = ab__realloc(b->data, cap);
    if (!p)
        return AB_NOMEM;
    b->data = p;
    b->cap = cap;
    return AB_OK;
}

ab_status_t ab_buf_append(ab_buf_t *b, const void *p, size_t n)
{
    if (n == 0)
        return AB_OK;
    if (b->cap - b->len < n) {
        ab_status_t rc = ab_buf_reserve(b, n);
        if (rc != AB_OK)
            return rc;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return AB_OK;
}

void ab_buf_reset(ab_buf_t *b)
{
    b->len = 0;
}

void ab_buf_free(ab_buf_t *b)
{
    if (!b)
        return;
    ab__free(b->data);
    memset(b, 0, sizeof(*b));
}

/* Called for every piece a msgpack packer writes (a type byte, a length, a body): the
 * common case, room left, without a call. */
int ab_buf_msgpack_write(void *buf, const char *p, size_t n)
{
    ab_buf_t *b = buf;
    if (n > 0 && b->cap - b->len >= n) {
        memcpy(b->data + b->len, p, n);
        b->len += n;
        return 0;
    }
    return ab_buf_append(b, p, n) == AB_OK ? 0 : -1;
}

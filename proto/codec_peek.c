/*
 * codec_peek.c - the `cid` and `v` of a header that does not decode.
 *
 * A header can be refused for what lies deep inside it (a value one level
 * too deep, bytes after the map, a bad string far down), yet carry a good
 * `cid` at its top level. ab_msg_peek() finds it with a scan that checks
 * nothing but bounds, so the `error` answer can echo the cid the client waits
 * for (docs/PROTOCOL.md 7.1, 8.1).
 *
 * Invariants:
 *  1. Every read is checked against the end of the buffer; nothing is
 *     allocated; the scan stops at the end of the top-level map (trailing
 *     bytes are not looked at).
 *  2. Nested values are skipped iteratively with a count of values still to
 *     skip, so depth costs no stack; a count larger than the bytes left is
 *     refused before it is used (every value takes at least one byte).
 *  3. Only a top-level key spelled exactly `cid` or `v` whose value is an
 *     unsigned integer (positive fixint, uint8 … uint64) is taken; the last
 *     such key wins, as a client cannot rely on duplicates anyway.
 */
#include "agentbus/codec.h"
#include "value_internal.h"

#include <string.h>

typedef struct cur {
    const uint8_t *p, *end;
} cur_t;

static bool take(cur_t *c, size_t n, const uint8_t **out)
{
    if ((size_t)(c->end - c->p) < n)
        return false;
    if (out)
        *out = c->p;
    c->p += n;
    return true;
}

static uint64_t be(const uint8_t *p, size_t n)
{
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++)
        x = (x << 8) | p[i];
    return x;
}

/* Read a length of @p n bytes (big-endian) into *len. */
static bool take_len(cur_t *c, size_t n, uint64_t *len)
{
    const uint8_t *b;
    if (!take(c, n, &b))
        return false;
    *len = be(b, n);
    return true;
}

/*
 * Step over the head of one value: consume its fixed part and its payload,
 * and add the values it contains to *pending. @return false when malformed
 * or cut short.
 */
static bool step(cur_t *c, uint64_t *pending)
{
    const uint8_t *t;
    uint64_t n = 0;
    if (!take(c, 1, &t))
        return false;
    uint8_t b = *t;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return true;
    if (b >= 0xa0 && b <= 0xbf)
        return take(c, b & 0x1f, NULL);
    if (b >= 0x80 && b <= 0x9f) {
        n = b <= 0x8f ? 2u * (b & 0x0f) : (b & 0x0f);
        goto contains;
    }
    switch (b) {
    case 0xcc:
    case 0xd0: return take(c, 1, NULL);
    case 0xcd:
    case 0xd1: return take(c, 2, NULL);
    case 0xca:
    case 0xce:
    case 0xd2: return take(c, 4, NULL);
    case 0xcb:
    case 0xcf:
    case 0xd3: return take(c, 8, NULL);
    case 0xd4: return take(c, 2, NULL);
    case 0xd5: return take(c, 3, NULL);
    case 0xd6: return take(c, 5, NULL);
    case 0xd7: return take(c, 9, NULL);
    case 0xd8: return take(c, 17, NULL);
    case 0xc4:
    case 0xd9: return take_len(c, 1, &n) && take(c, n, NULL);
    case 0xc5:
    case 0xda: return take_len(c, 2, &n) && take(c, n, NULL);
    case 0xc6:
    case 0xdb: return take_len(c, 4, &n) && take(c, n, NULL);
    case 0xc7: return take_len(c, 1, &n) && take(c, n + 1, NULL);
    case 0xc8: return take_len(c, 2, &n) && take(c, n + 1, NULL);
    case 0xc9: return take_len(c, 4, &n) && take(c, n + 1, NULL);
    case 0xdc:
        if (!take_len(c, 2, &n))
            return false;
        goto contains;
    case 0xdd:
        if (!take_len(c, 4, &n))
            return false;
        goto contains;
    case 0xde:
        if (!take_len(c, 2, &n))
            return false;
        n *= 2;
        goto contains;
    case 0xdf:
        if (!take_len(c, 4, &n))
            return false;
        n *= 2;
        goto contains;
    default: return false; /* 0xc1, never used */
    }
contains:
    if (n > (uint64_t)(c->end - c->p)) /* invariant 2 */
        return false;
    *pending += n;
    return true;
}

/* Skip one whole value (with everything inside it). */
static bool skip(cur_t *c)
{
    uint64_t pending = 1;
    while (pending > 0) {
        pending--;
        if (!step(c, &pending))
            return false;
    }
    return true;
}

bool ab__mp_skip(const uint8_t **p, const uint8_t *end)
{
    cur_t c = {*p, end};
    if (!skip(&c))
        return false;
    *p = c.p;
    return true;
}

/* One value: 1 when it is an unsigned integer (in *out, invariant 3), 0 when
 * it is something else (skipped), -1 when it is malformed. */
static int read_uint(cur_t *c, uint64_t *out)
{
    cur_t probe = *c;
    const uint8_t *t, *b;
    if (!take(&probe, 1, &t))
        return -1;
    size_t n = *t == 0xcc ? 1 : *t == 0xcd ? 2 : *t == 0xce ? 4 : *t == 0xcf ? 8 : 0;
    if (*t <= 0x7f) {
        *out = *t;
    } else if (n > 0 && take(&probe, n, &b)) {
        *out = be(b, n);
    } else {
        return skip(c) ? 0 : -1;
    }
    *c = probe;
    return 1;
}

/* A top-level key: its bytes in *key / *klen (str only). */
static bool read_key(cur_t *c, const uint8_t **key, uint64_t *klen)
{
    const uint8_t *t;
    if (!take(c, 1, &t))
        return false;
    if (*t >= 0xa0 && *t <= 0xbf)
        *klen = *t & 0x1f;
    else if (*t == 0xd9 || *t == 0xda || *t == 0xdb) {
        if (!take_len(c, *t == 0xd9 ? 1 : *t == 0xda ? 2 : 4, klen))
            return false;
    } else {
        c->p--; /* not a string: skip it like any value */
        *key = NULL;
        return skip(c);
    }
    return take(c, *klen, key);
}

bool ab_msg_peek(const uint8_t *buf, size_t len, uint64_t *cid, uint32_t *v)
{
    cur_t c = {buf, buf + len};
    uint64_t pairs = 0, x = 0;
    *cid = 0;
    *v = 0;
    if (buf == NULL || len == 0)
        return false;
    if (buf[0] >= 0x80 && buf[0] <= 0x8f) {
        pairs = buf[0] & 0x0f;
        c.p++;
    } else if (buf[0] == 0xde || buf[0] == 0xdf) {
        c.p++;
        if (!take_len(&c, buf[0] == 0xde ? 2 : 4, &pairs))
            return true;
    } else {
        return false;
    }
    for (uint64_t i = 0; i < pairs; i++) {
        const uint8_t *key = NULL;
        uint64_t klen = 0;
        if (!read_key(&c, &key, &klen))
            return true;
        bool is_cid = key && klen == 3 && memcmp(key, "cid", 3) == 0;
        bool is_v = key && klen == 1 && key[0] == 'v';
        int got = is_cid || is_v ? read_uint(&c, &x) : (skip(&c) ? 0 : -1);
        if (got < 0)
            return true;
        if (got == 1 && is_cid)
            *cid = x;
        else if (got == 1 && x <= UINT32_MAX)
            *v = (uint32_t)x;
    }
    return true;
}

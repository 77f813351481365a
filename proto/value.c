/*
 * value.c - the strict msgpack reader and JSON-safe value helpers.
 *
 * Invariants:
 *  1. The reader never reads past `end`: every length is checked against the
 *     bytes remaining before it is used, and a count of items is bounded by
 *     the bytes left (each item takes at least one byte, each pair two), so a
 *     hostile header cannot make us allocate more nodes than input bytes.
 *  2. A tree only holds JSON-safe values (see value.h); anything else is an
 *     error naming the JSON pointer of the value. An integer is AB_VAL_INT
 *     whenever it fits int64 (any format), AB_VAL_UINT only above INT64_MAX.
 *  3. Nodes come from the doc arena; the first block is kept across resets so
 *     the hot path (small events) allocates nothing.
 *  4. The reader tracks the deepest level it reached (the root is level 1), so
 *     the tree's depth needs no second walk; ab__doc_parse_spans() also records
 *     where the values at root.outer[i].inner are in the input, with their
 *     depths (value_internal.h). Recording never changes what a parse accepts.
 */
#include "agentbus/value.h"
#include "ab_common.h"
#include "alloc_internal.h"
#include "value_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ab_limits_t ab_limits_default(void)
{
    ab_limits_t l = {
        .max_event_bytes = 1u << 20,
        .max_depth = 64,
        .max_id_bytes = 256,
        .max_batch = 1024,
        .max_header_bytes = 64u << 10,
        .max_inflight = 8192,
        .max_replay_window = 64,
        .max_publish_bytes = 16u << 20,
        .max_replay_bytes = 2u << 20,
    };
    return l;
}

/* ---- arena ------------------------------------------------------------ */

/* The first block is kept across resets; 2 KiB holds the tree of a typical
 * event (a 256-byte event needs ~25 nodes of 16-24 bytes), so a broker that
 * keeps one doc per in-flight event pays little per event. Larger trees take
 * extra blocks of at least GROW_BLOCK_BYTES, freed at the next reset. */
#define FIRST_BLOCK_BYTES (2u << 10)
#define GROW_BLOCK_BYTES  (64u << 10)

struct block {
    struct block *next;
    size_t cap;
    size_t used;
    max_align_t data[];
};

struct ab_doc {
    struct block *first;
    struct block *cur;
    bool keep; /* ab_doc_parse() does not reset (ab_doc_keep) */
};

static struct block *block_new(size_t cap)
{
    struct block *b = ab__malloc(sizeof(*b) + cap);
    if (!b)
        return NULL;
    b->next = NULL;
    b->cap = cap;
    b->used = 0;
    return b;
}

ab_status_t ab_doc_new(ab_doc_t **out)
{
    ab_doc_t *d = ab__calloc(1, sizeof(*d));
    if (!d)
        return AB_NOMEM;
    d->first = block_new(FIRST_BLOCK_BYTES);
    if (!d->first) {
        ab__free(d);
        return AB_NOMEM;
    }
    d->cur = d->first;
    *out = d;
    return AB_OK;
}

void ab_doc_reset(ab_doc_t *doc)
{
    struct block *b = doc->first->next;
    while (b) {
        struct block *n = b->next;
        ab__free(b);
        b = n;
    }
    doc->first->next = NULL;
    doc->first->used = 0;
    doc->cur = doc->first;
}

void ab_doc_keep(ab_doc_t *doc, bool keep)
{
    doc->keep = keep;
}

void ab_doc_destroy(ab_doc_t **doc)
{
    if (!doc || !*doc)
        return;
    ab_doc_reset(*doc);
    ab__free((*doc)->first);
    ab__free(*doc);
    *doc = NULL;
}

static void *doc_alloc(ab_doc_t *doc, size_t bytes)
{
    bytes = (bytes + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    struct block *b = doc->cur;
    if (b->cap - b->used < bytes) {
        size_t cap = bytes > GROW_BLOCK_BYTES ? bytes : GROW_BLOCK_BYTES;
        struct block *nb = block_new(cap);
        if (!nb)
            return NULL;
        b->next = nb;
        doc->cur = b = nb;
    }
    void *p = (char *)b->data + b->used;
    b->used += bytes;
    return p;
}

void *ab_doc_alloc(ab_doc_t *doc, size_t bytes)
{
    return doc_alloc(doc, bytes);
}

/* ---- paths ------------------------------------------------------------ */

void ab_path_push_key(char *buf, size_t size, const char *key, size_t klen)
{
    size_t n = strlen(buf);
    if (n + 1 >= size)
        return;
    buf[n++] = '/';
    for (size_t i = 0; i < klen && n + 2 < size; i++) {
        char c = key[i];
        if (c == '~' || c == '/') {
            buf[n++] = '~';
            buf[n++] = c == '~' ? '0' : '1';
        } else {
            buf[n++] = c;
        }
    }
    buf[n] = '\0';
}

/* Same text and truncation as snprintf("/%zu"), without it: the codec pushes
 * an index for every array element it encodes (one per published result). */
void ab_path_push_index(char *buf, size_t size, size_t index)
{
    size_t n = strlen(buf);
    if (n >= size)
        return;
    char tmp[24];
    size_t k = sizeof(tmp);
    do {
        tmp[--k] = (char)('0' + index % 10);
        index /= 10;
    } while (index > 0);
    tmp[--k] = '/';
    size_t len = sizeof(tmp) - k, room = size - n - 1;
    if (len > room)
        len = room;
    memcpy(buf + n, tmp + k, len);
    buf[n + len] = '\0';
}

/* A parse position: the chain of keys/indexes from the root, for errors. */
struct pathf {
    const struct pathf *up;
    const char *key; /* NULL: array index */
    uint32_t klen;
    size_t idx;
};

static void path_render(const struct pathf *pf, char *buf, size_t size)
{
    if (!pf) {
        buf[0] = '\0';
        return;
    }
    path_render(pf->up, buf, size);
    if (pf->key)
        ab_path_push_key(buf, size, pf->key, pf->klen);
    else
        ab_path_push_index(buf, size, pf->idx);
}

/* ---- UTF-8 ------------------------------------------------------------ */

bool ab_utf8_valid(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str, *e = s + len;
    while (s < e) {
        /* ASCII fast path: 32, then 8 bytes per step */
        while (e - s >= 32) {
            uint64_t w[4];
            memcpy(w, s, 32);
            if (((w[0] | w[1] | w[2] | w[3]) & 0x8080808080808080ull) != 0)
                break;
            s += 32;
        }
        while (e - s >= 8) {
            uint64_t w;
            memcpy(&w, s, 8);
            if ((w & 0x8080808080808080ull) != 0)
                break;
            s += 8;
        }
        if (s >= e)
            break;
        unsigned c = *s;
        if (c < 0x80) {
            s++;
            continue;
        }
        size_t n;
        unsigned min, cp;
        if (c >= 0xc2 && c <= 0xdf) {
            n = 1, min = 0x80, cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2, min = 0x800, cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3, min = 0x10000, cp = c & 0x07;
        } else {
            return false;
        }
        if ((size_t)(e - s) <= n)
            return false;
        for (size_t i = 1; i <= n; i++) {
            if ((s[i] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        s += n + 1;
    }
    return true;
}

/* ---- reader ----------------------------------------------------------- */

struct rd {
    const uint8_t *p;
    const uint8_t *end;
    ab_doc_t *doc;
    uint32_t max_depth;
    ab_status_t bad;
    ab_error_t *err;
    uint32_t deepest;       /* the deepest level read so far (invariant 4) */
    ab__val_spans_t *spans; /* NULL: nothing recorded */
};

static ab_status_t rd_fail(struct rd *r, const struct pathf *pf, ab_status_t code, const char *fmt,
                           const char *arg)
{
    if (r->err && r->err->code == AB_OK) {
        char path[AB_ERROR_FIELD_MAX];
        path_render(pf, path, sizeof(path));
        ab_error_set(r->err, code, path, fmt, arg);
    }
    return code;
}

static bool rd_need(struct rd *r, size_t n)
{
    return (size_t)(r->end - r->p) >= n;
}

static uint64_t rd_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Read a length/integer of n big-endian bytes after the type byte. */
static ab_status_t rd_uint(struct rd *r, const struct pathf *pf, int n, uint64_t *out)
{
    if (!rd_need(r, (size_t)n))
        return rd_fail(r, pf, r->bad, "truncated %s", "value");
    *out = rd_be(r->p, n);
    r->p += n;
    return AB_OK;
}

/* True when a string of up to 32 bytes is plain ASCII (most keys and ids):
 * word-at-a-time with an overlapping last word, no call, no loop setup. */
static inline bool ascii_short(const uint8_t *p, uint64_t n)
{
    const uint64_t hi = 0x8080808080808080ull;
    uint64_t a, b;
    if (n > 32)
        return false;
    if (n >= 8) {
        uint64_t acc = 0;
        for (uint64_t i = 0; i + 8 <= n; i += 8) {
            memcpy(&a, p + i, 8);
            acc |= a;
        }
        memcpy(&b, p + n - 8, 8);
        return ((acc | b) & hi) == 0;
    }
    unsigned acc = 0;
    for (uint64_t i = 0; i < n; i++)
        acc |= p[i];
    return acc < 0x80;
}

static ab_status_t ab__rd_str(struct rd *r, const struct pathf *pf, uint64_t n, ab_val_t *out)
{
    if (!rd_need(r, n))
        return rd_fail(r, pf, r->bad, "truncated %s", "string");
    if (!ascii_short(r->p, n) && !ab_utf8_valid((const char *)r->p, n))
        return rd_fail(r, pf, r->bad, "string is not valid UTF-8%s", "");
    out->type = AB_VAL_STR;
    out->len = (uint32_t)n;
    out->u.s = (const char *)r->p;
    r->p += n;
    return AB_OK;
}

static ab_status_t rd_value(struct rd *r, ab_val_t *out, uint32_t depth, const struct pathf *pf);

static ab_status_t rd_array(struct rd *r, uint64_t n, ab_val_t *out, uint32_t depth,
                            const struct pathf *pf)
{
    if (n > (uint64_t)(r->end - r->p))
        return rd_fail(r, pf, r->bad, "array count exceeds the %s", "input");
    ab_val_t *items = NULL;
    if (n) {
        items = doc_alloc(r->doc, sizeof(ab_val_t) * n);
        if (!items)
            return rd_fail(r, pf, AB_NOMEM, "out of memory %s", "parsing");
    }
    struct pathf me = {.up = pf};
    for (uint64_t i = 0; i < n; i++) {
        me.idx = i;
        ab_status_t rc = rd_value(r, &items[i], depth + 1, &me);
        if (rc != AB_OK)
            return rc;
    }
    out->type = AB_VAL_ARRAY;
    out->len = (uint32_t)n;
    out->u.items = items;
    return AB_OK;
}

static int kv_cmp(const void *a, const void *b)
{
    const ab_kv_t *x = *(const ab_kv_t *const *)a, *y = *(const ab_kv_t *const *)b;
    uint32_t n = x->klen < y->klen ? x->klen : y->klen;
    int c = memcmp(x->key, y->key, n);
    return c ? c : (x->klen > y->klen) - (x->klen < y->klen);
}

/* Returns the index of a duplicated key, or -1. */
static long dup_key(struct rd *r, const ab_kv_t *pairs, uint32_t n)
{
    if (n <= 16) {
        for (uint32_t i = 1; i < n; i++)
            for (uint32_t j = 0; j < i; j++)
                if (pairs[i].klen == pairs[j].klen &&
                    (pairs[i].klen == 0 ||
                     (pairs[i].key[0] == pairs[j].key[0] &&
                      memcmp(pairs[i].key, pairs[j].key, pairs[i].klen) == 0)))
                    return (long)i;
        return -1;
    }
    const ab_kv_t **sorted = doc_alloc(r->doc, sizeof(*sorted) * n);
    if (!sorted)
        return -2;
    for (uint32_t i = 0; i < n; i++)
        sorted[i] = &pairs[i];
    qsort(sorted, n, sizeof(*sorted), kv_cmp);
    for (uint32_t i = 1; i < n; i++)
        if (kv_cmp(&sorted[i - 1], &sorted[i]) == 0)
            return sorted[i] - pairs;
    return -1;
}

static ab_status_t rd_key(struct rd *r, ab_kv_t *kv, const struct pathf *pf)
{
    if (!rd_need(r, 1))
        return rd_fail(r, pf, r->bad, "truncated %s", "map");
    uint8_t t = *r->p++;
    uint64_t n = 0;
    ab_status_t rc = AB_OK;
    if (t >= 0xa0 && t <= 0xbf)
        n = t & 0x1f;
    else if (t == 0xd9)
        rc = rd_uint(r, pf, 1, &n);
    else if (t == 0xda)
        rc = rd_uint(r, pf, 2, &n);
    else if (t == 0xdb)
        rc = rd_uint(r, pf, 4, &n);
    else
        return rd_fail(r, pf, r->bad, "map key is not a string%s", "");
    if (rc != AB_OK)
        return rc;
    ab_val_t k;
    if ((rc = ab__rd_str(r, pf, n, &k)) != AB_OK)
        return rc;
    kv->key = k.u.s;
    kv->klen = k.len;
    return AB_OK;
}

static bool key_is(const char *key, uint32_t klen, const char *name)
{
    return klen == strlen(name) && memcmp(key, name, klen) == 0;
}

/* Whether pair @p kv of a map at level 3 whose path is @p pf is root.outer[i].inner. At level
 * 3 @p pf is never NULL: it is an index (the map an item of an array, which is then a value
 * of the root map, pf->up its key) or a key (the map a value of a map: not an item). */
static bool span_wanted(const ab__val_spans_t *sp, const struct pathf *pf, const ab_kv_t *kv)
{
    return pf->key == NULL && key_is(pf->up->key, pf->up->klen, sp->outer) &&
           key_is(kv->key, kv->klen, sp->inner);
}

static void span_add(ab__val_spans_t *sp, const uint8_t *p, size_t len, uint32_t depth)
{
    ab__val_span_t *v =
        sp->lost ? NULL : ab__grow_with(ab__realloc, sp->v, &sp->cap, sp->n + 1, sizeof *v, 64);
    if (v == NULL) {
        sp->lost = true;
        return;
    }
    sp->v = v;
    sp->v[sp->n++] = (ab__val_span_t){p, len, depth};
}

/* rd_value() of pair @p kv's value, recorded when r->spans names it (invariant 4). */
static ab_status_t rd_pair_value(struct rd *r, ab_kv_t *kv, uint32_t depth, const struct pathf *pf,
                                 const struct pathf *me)
{
    if (r->spans == NULL || depth != 3 || !span_wanted(r->spans, pf, kv))
        return rd_value(r, &kv->val, depth + 1, me);
    const uint8_t *p = r->p;
    uint32_t deepest = r->deepest;
    r->deepest = 0;
    ab_status_t rc = rd_value(r, &kv->val, depth + 1, me);
    if (rc == AB_OK)
        span_add(r->spans, p, (size_t)(r->p - p), r->deepest - depth);
    r->deepest = r->deepest > deepest ? r->deepest : deepest;
    return rc;
}

static ab_status_t rd_map(struct rd *r, uint64_t n, ab_val_t *out, uint32_t depth,
                          const struct pathf *pf)
{
    if (n > (uint64_t)(r->end - r->p) / 2)
        return rd_fail(r, pf, r->bad, "map count exceeds the %s", "input");
    ab_kv_t *pairs = NULL;
    if (n) {
        pairs = doc_alloc(r->doc, sizeof(ab_kv_t) * n);
        if (!pairs)
            return rd_fail(r, pf, AB_NOMEM, "out of memory %s", "parsing");
    }
    struct pathf me = {.up = pf};
    for (uint64_t i = 0; i < n; i++) {
        ab_status_t rc = rd_key(r, &pairs[i], pf);
        if (rc != AB_OK)
            return rc;
        me.key = pairs[i].key;
        me.klen = pairs[i].klen;
        if ((rc = rd_pair_value(r, &pairs[i], depth, pf, &me)) != AB_OK)
            return rc;
    }
    long d = dup_key(r, pairs, (uint32_t)n);
    if (d == -2)
        return rd_fail(r, pf, AB_NOMEM, "out of memory %s", "parsing");
    if (d >= 0) {
        me.key = pairs[d].key;
        me.klen = pairs[d].klen;
        return rd_fail(r, &me, r->bad, "duplicate map key%s", "");
    }
    out->type = AB_VAL_MAP;
    out->len = (uint32_t)n;
    out->u.pairs = pairs;
    return AB_OK;
}

static ab_status_t rd_float(struct rd *r, const struct pathf *pf, int bytes, ab_val_t *out)
{
    uint64_t bits = 0;
    ab_status_t rc = rd_uint(r, pf, bytes, &bits);
    if (rc != AB_OK)
        return rc;
    double d;
    if (bytes == 4) {
        uint32_t b32 = (uint32_t)bits;
        float f;
        memcpy(&f, &b32, 4);
        d = f;
    } else {
        memcpy(&d, &bits, 8);
    }
    if (!isfinite(d))
        return rd_fail(r, pf, r->bad, "NaN and infinities are not JSON-safe%s", "");
    out->type = AB_VAL_FLOAT;
    out->u.f = d;
    return AB_OK;
}

static ab_status_t rd_int(struct rd *r, const struct pathf *pf, uint8_t t, ab_val_t *out)
{
    static const int widths[8] = {1, 2, 4, 8, 1, 2, 4, 8}; /* 0xcc..0xd3 */
    int w = widths[t - 0xcc];
    uint64_t u = 0;
    ab_status_t rc = rd_uint(r, pf, w, &u);
    if (rc != AB_OK)
        return rc;
    out->type = AB_VAL_INT;
    if (t <= 0xcf) { /* unsigned: above INT64_MAX only from uint 64 */
        if (u > (uint64_t)INT64_MAX) {
            out->type = AB_VAL_UINT;
            out->u.u = u;
        } else {
            out->u.i = (int64_t)u;
        }
    } else if (w == 8) {
        out->u.i = (int64_t)u;
    } else {
        int bits = w * 8;
        uint64_t sign = 1ull << (bits - 1);
        out->u.i = (int64_t)((u ^ sign) - sign); /* sign-extend */
    }
    return AB_OK;
}

/* Container and string types whose length follows the type byte. */
static ab_status_t rd_sized(struct rd *r, uint8_t t, ab_val_t *out, uint32_t depth,
                            const struct pathf *pf)
{
    uint64_t n = 0;
    int w = (t == 0xd9) ? 1 : (t == 0xda || t == 0xdc || t == 0xde) ? 2 : 4;
    ab_status_t rc = rd_uint(r, pf, w, &n);
    if (rc != AB_OK)
        return rc;
    if (t >= 0xd9 && t <= 0xdb)
        return ab__rd_str(r, pf, n, out);
    if (t == 0xdc || t == 0xdd)
        return rd_array(r, n, out, depth, pf);
    return rd_map(r, n, out, depth, pf);
}

static ab_status_t rd_value(struct rd *r, ab_val_t *out, uint32_t depth, const struct pathf *pf)
{
    if (depth > r->max_depth)
        return rd_fail(r, pf, AB_TOO_LARGE, "nesting deeper than the limit%s", "");
    if (depth > r->deepest)
        r->deepest = depth;
    if (!rd_need(r, 1))
        return rd_fail(r, pf, r->bad, "truncated %s", "value");
    uint8_t t = *r->p++;
    if (t <= 0x7f || t >= 0xe0) {
        out->type = AB_VAL_INT;
        out->u.i = (int8_t)t;
        return AB_OK;
    }
    if (t <= 0x8f)
        return rd_map(r, t & 0x0f, out, depth, pf);
    if (t <= 0x9f)
        return rd_array(r, t & 0x0f, out, depth, pf);
    if (t <= 0xbf)
        return ab__rd_str(r, pf, t & 0x1f, out);
    switch (t) {
    case 0xc0: out->type = AB_VAL_NULL; return AB_OK;
    case 0xc2:
    case 0xc3:
        out->type = AB_VAL_BOOL;
        out->u.b = t == 0xc3;
        return AB_OK;
    case 0xca: return rd_float(r, pf, 4, out);
    case 0xcb: return rd_float(r, pf, 8, out);
    default: break;
    }
    if (t >= 0xcc && t <= 0xd3)
        return rd_int(r, pf, t, out);
    if (t >= 0xd9)
        return rd_sized(r, t, out, depth, pf);
    if (t >= 0xc4 && t <= 0xc6)
        return rd_fail(r, pf, r->bad, "msgpack bin is not JSON-safe%s", "");
    if ((t >= 0xc7 && t <= 0xc9) || (t >= 0xd4 && t <= 0xd8))
        return rd_fail(r, pf, r->bad, "msgpack ext is not JSON-safe%s", "");
    return rd_fail(r, pf, r->bad, "invalid msgpack type byte 0xc1%s", "");
}

ab_status_t ab_doc_parse(ab_doc_t *doc, const uint8_t *buf, size_t len, uint32_t max_bytes,
                         uint32_t max_depth, ab_status_t bad_code, const ab_val_t **root,
                         ab_error_t *err)
{
    return ab__doc_parse_spans(doc, buf, len, max_bytes, max_depth, bad_code, root, NULL, err);
}

ab_status_t ab__doc_parse_spans(ab_doc_t *doc, const uint8_t *buf, size_t len, uint32_t max_bytes,
                                uint32_t max_depth, ab_status_t bad_code, const ab_val_t **root,
                                ab__val_spans_t *spans, ab_error_t *err)
{
    if (!doc->keep)
        ab_doc_reset(doc);
    if (len > max_bytes) {
        ab_error_set(err, AB_TOO_LARGE, "", "message of %zu bytes exceeds the limit of %u", len,
                     max_bytes);
        ab_error_detail_int(err, "limit", max_bytes);
        ab_error_detail_int(err, "actual", (int64_t)len);
        return AB_TOO_LARGE;
    }
    if (len == 0)
        return ab_error_set(err, bad_code, "", "empty message");
    struct rd r = {buf, buf + len, doc, max_depth, bad_code, err, 0, spans};
    ab_val_t *top = doc_alloc(doc, sizeof(*top));
    if (!top)
        return ab_error_set(err, AB_NOMEM, "", "out of memory parsing");
    ab_status_t rc = rd_value(&r, top, 1, NULL);
    if (rc != AB_OK)
        return rc;
    if (spans)
        spans->depth = r.deepest;
    if (r.p != r.end)
        return ab_error_set(err, bad_code, "", "%zu trailing bytes after the value",
                            (size_t)(r.end - r.p));
    *root = top;
    return AB_OK;
}

/* ---- helpers ---------------------------------------------------------- */

const ab_val_t *ab_val_get(const ab_val_t *map, const char *key)
{
    if (!map || map->type != AB_VAL_MAP)
        return NULL;
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < map->len; i++) {
        const ab_kv_t *kv = &map->u.pairs[i];
        if (kv->klen == kl && memcmp(kv->key, key, kl) == 0)
            return &kv->val;
    }
    return NULL;
}

bool ab_val_str_eq(const ab_val_t *v, const char *lit)
{
    if (!v || v->type != AB_VAL_STR)
        return false;
    size_t n = strlen(lit);
    return v->len == n && memcmp(v->u.s, lit, n) == 0;
}

bool ab_val_equal(const ab_val_t *a, const ab_val_t *b)
{
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case AB_VAL_NULL: return true;
    case AB_VAL_BOOL: return a->u.b == b->u.b;
    case AB_VAL_INT: return a->u.i == b->u.i;
    case AB_VAL_UINT: return a->u.u == b->u.u;
    case AB_VAL_FLOAT: return memcmp(&a->u.f, &b->u.f, sizeof(double)) == 0;
    case AB_VAL_STR: return a->len == b->len && memcmp(a->u.s, b->u.s, a->len) == 0;
    case AB_VAL_ARRAY:
        if (a->len != b->len)
            return false;
        for (uint32_t i = 0; i < a->len; i++)
            if (!ab_val_equal(&a->u.items[i], &b->u.items[i]))
                return false;
        return true;
    case AB_VAL_MAP:
        if (a->len != b->len)
            return false;
        for (uint32_t i = 0; i < a->len; i++) {
            const ab_kv_t *x = &a->u.pairs[i], *y = &b->u.pairs[i];
            if (x->klen != y->klen || memcmp(x->key, y->key, x->klen) != 0 ||
                !ab_val_equal(&x->val, &y->val))
                return false;
        }
        return true;
    }
    return false;
}

const char *ab_val_type_name(ab_val_type_t t)
{
    static const char *const names[] = {"null",   "boolean", "integer", "number",
                                        "string", "array",   "object",  "integer"};
    return (unsigned)t < sizeof(names) / sizeof(names[0]) ? names[t] : "unknown";
}

ab_status_t ab_val_encode(const ab_val_t *v, ab_buf_t *out)
{
    if (v == NULL || out == NULL)
        return AB_INVALID_ARGUMENT;
    size_t mark = out->len;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, ab_buf_msgpack_write);
    ab_status_t rc = ab__val_pack(&pk, v);
    if (rc != AB_OK)
        out->len = mark;
    return rc;
}

ab_status_t ab__val_pack(msgpack_packer *pk, const ab_val_t *v)
{
    int rc = 0;
    switch (v->type) {
    case AB_VAL_NULL: rc = msgpack_pack_nil(pk); break;
    case AB_VAL_BOOL: rc = v->u.b ? msgpack_pack_true(pk) : msgpack_pack_false(pk); break;
    case AB_VAL_INT: rc = msgpack_pack_int64(pk, v->u.i); break;
    case AB_VAL_UINT: rc = msgpack_pack_uint64(pk, v->u.u); break;
    case AB_VAL_FLOAT: rc = msgpack_pack_double(pk, v->u.f); break;
    case AB_VAL_STR: rc = msgpack_pack_str_with_body(pk, v->u.s, v->len); break;
    case AB_VAL_ARRAY:
        rc = msgpack_pack_array(pk, v->len);
        for (uint32_t i = 0; rc == 0 && i < v->len; i++)
            rc = ab__val_pack(pk, &v->u.items[i]) == AB_OK ? 0 : -1;
        break;
    case AB_VAL_MAP:
        rc = msgpack_pack_map(pk, v->len);
        for (uint32_t i = 0; rc == 0 && i < v->len; i++) {
            const ab_kv_t *kv = &v->u.pairs[i];
            rc = msgpack_pack_str_with_body(pk, kv->key, kv->klen);
            if (rc == 0)
                rc = ab__val_pack(pk, &kv->val) == AB_OK ? 0 : -1;
        }
        break;
    }
    return rc == 0 ? AB_OK : AB_NOMEM;
}

/*
 * json_parse.c - JSON text -> msgpack, the input half of the JSON bridge
 * (agentbus/json.h).
 *
 * Our own parser rather than jansson's: jansson refuses an integer beyond
 * int64 ("too big integer") and its only way around that, decoding every
 * integer as a real, rounds every integer above 2^53. Here each number is
 * mapped by its text (docs/PROTOCOL.md section 2): an integer in int64 to a
 * msgpack int, one in (INT64_MAX, UINT64_MAX] to uint 64, any other number
 * (fraction, exponent, or an integer beyond those ranges) to the float64
 * strtod() gives, which is the nearest double.
 *
 * One pass over the text writes msgpack straight into the output buffer; no
 * tree is built. The grammar is RFC 8259's: one value with optional
 * whitespace (space, tab, CR, LF) around it, no comments, no trailing
 * commas, no leading zeros, no NaN/Infinity, strings with only the escapes
 * \" \\ \/ \b \f \n \r \t \uXXXX (surrogate pairs joined, a lone surrogate
 * refused, \u0000 allowed) and no raw control characters, valid UTF-8.
 *
 * Invariants:
 *  1. The text is never read at or past `end` (it need not be
 *     NUL-terminated); strtod() only sees a NUL-terminated copy of a token.
 *  2. The output is JSON-safe msgpack the strict reader accepts (unique
 *     string keys, valid UTF-8, finite floats) in the shortest encodings
 *     msgpack-c writes, byte for byte what jansson + msgpack-c produced for
 *     every text jansson accepted (tests/fuzz/fuzz_json.c compares them).
 *  3. A container's header is written as one byte when it opens (its count
 *     is not known yet, and most containers hold fewer than 16 items: fixmap
 *     or fixarray); one that closes with more items moves its content up by
 *     2 or 4 bytes for a map/array 16 or 32 header. So the output is final
 *     but for the open containers' headers, and a byte moves at most once
 *     per enclosing container of 16 or more items (at most max_depth times).
 *  4. Memory: the output buffer (abandoned as soon as it exceeds max_bytes,
 *     which the open containers' headers can only grow), the open containers
 *     (at most max_depth, 32 bytes each) and the keys of the open objects
 *     (24 bytes each, and as much again while a big object is checked for
 *     duplicates); a small event fits the inline room and allocates nothing
 *     but output.
 *  5. On failure out->len is back at its value on entry; err says what and
 *     where: line and column (1-based, counted in characters) of the first
 *     offending character, and in err->field the JSON pointer of the value
 *     being read.
 */
#include "agentbus/json.h"
#include "alloc_internal.h"

#include <locale.h>
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INLINE_FRAMES 16 /* open containers held without allocating */
#define INLINE_KEYS   32 /* keys of open objects held without allocating */
#define SMALL_OBJECT  16 /* up to this many keys, each new key is compared with the earlier ones */
#define PLACEHOLDER   5  /* bytes reserved for a string header before its length is known */

struct jframe {  /* an open container */
    size_t off;  /* output offset of its header byte */
    size_t key0; /* its first key in keys (maps) */
    uint32_t n;  /* items (pairs) begun so far */
    bool map;
};

struct jkey {   /* a key of an open object */
    size_t off; /* output offset of its decoded bytes */
    uint32_t len;
    size_t at; /* text offset of its opening quote */
};

struct vec { /* a growable array that starts in inline storage */
    void *p;
    size_t n, cap, elem;
    void *inl;
};

struct jp {
    const char *text, *p, *end;
    ab_buf_t *out;
    size_t start; /* out->len on entry */
    uint32_t max_depth, max_bytes;
    ab_status_t bad;
    ab_error_t *err;
    bool in_item; /* the innermost open container is inside one of its items */
    msgpack_packer pk;
    struct vec fr, keys;
    struct jframe fr_in[INLINE_FRAMES];
    struct jkey keys_in[INLINE_KEYS];
};

/* ---- small helpers ------------------------------------------------------ */

static void *vec_push(struct vec *v)
{
    if (v->n == v->cap) {
        size_t cap = v->cap * 2;
        void *p = v->p == v->inl ? ab__malloc(cap * v->elem) : ab__realloc(v->p, cap * v->elem);
        if (!p)
            return NULL;
        if (v->p == v->inl)
            memcpy(p, v->inl, v->n * v->elem);
        v->p = p;
        v->cap = cap;
    }
    return (char *)v->p + v->n++ * v->elem;
}

static void vec_init(struct vec *v, void *inl, size_t cap, size_t elem)
{
    *v = (struct vec){.p = inl, .n = 0, .cap = cap, .elem = elem, .inl = inl};
}

static void vec_free(struct vec *v)
{
    if (v->p != v->inl)
        ab__free(v->p);
}

static struct jframe *top(const struct jp *j)
{
    return (struct jframe *)j->fr.p + (j->fr.n - 1);
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static void skip_ws(struct jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
        j->p++;
}

/* ---- errors ------------------------------------------------------------- */

/* The JSON pointer of the value being read; @p key replaces the innermost key. */
static void render_path(const struct jp *j, const struct jkey *key, char *buf, size_t size)
{
    const struct jframe *fr = j->fr.p;
    const struct jkey *keys = j->keys.p;
    buf[0] = '\0';
    for (size_t i = 0; i < j->fr.n; i++) {
        bool innermost = i + 1 == j->fr.n;
        if (innermost && !j->in_item && !key)
            break;
        if (!fr[i].map) {
            ab_path_push_index(buf, size, fr[i].n - 1);
            continue;
        }
        size_t kend = innermost ? j->keys.n : fr[i + 1].key0;
        const struct jkey *k = innermost && key ? key : kend > fr[i].key0 ? &keys[kend - 1] : NULL;
        if (k)
            ab_path_push_key(buf, size, (const char *)j->out->data + k->off, k->len);
    }
}

/* Record an error at text position @p at; @p key as for render_path(). */
AB_PRINTF(5, 6)
static ab_status_t fail_key(struct jp *j, ab_status_t code, const char *at, const struct jkey *key,
                            const char *fmt, ...)
{
    if (!j->err || j->err->code != AB_OK)
        return code;
    char msg[AB_ERROR_MESSAGE_MAX], path[AB_ERROR_FIELD_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    unsigned long line = 1, col = 1;
    for (const char *q = j->text; q < at; q++) {
        if (*q == '\n')
            line++, col = 1;
        else if (((unsigned char)*q & 0xc0) != 0x80)
            col++;
    }
    render_path(j, key, path, sizeof(path));
    char where[64]; /* a one-line text (an event of JSON Lines) has only columns */
    if (memchr(j->text, '\n', (size_t)(j->end - j->text)))
        snprintf(where, sizeof(where), "line %lu column %lu", line, col);
    else
        snprintf(where, sizeof(where), "column %lu", col);
    if (code == j->bad)
        ab_error_set(j->err, code, path, "invalid JSON at %s: %s", where, msg);
    else
        ab_error_set(j->err, code, path, "%s (%s)", msg, where);
    ab_error_detail_int(j->err, "line", (int64_t)line);
    ab_error_detail_int(j->err, "column", (int64_t)col);
    return code;
}

#define FAIL(j, at, ...) fail_key((j), (j)->bad, (at), NULL, __VA_ARGS__)

static ab_status_t nomem(struct jp *j)
{
    return ab_error_set(j->err, AB_NOMEM, "", "out of memory parsing JSON");
}

static ab_status_t too_large(struct jp *j)
{
    ab_error_set(j->err, AB_TOO_LARGE, "", "encoded value exceeds the limit of %u bytes",
                 j->max_bytes);
    ab_error_detail_int(j->err, "limit", j->max_bytes);
    return AB_TOO_LARGE;
}

/* "expected <what>, found 'x'" / "..., found byte 0xc3" / "..., found the end of the input" */
static ab_status_t unexpected(struct jp *j, const char *what)
{
    if (j->p >= j->end)
        return FAIL(j, j->p, "expected %s, found the end of the input", what);
    unsigned char c = (unsigned char)*j->p;
    if (c > 0x20 && c < 0x7f)
        return FAIL(j, j->p, "expected %s, found '%c'", what, c);
    return FAIL(j, j->p, "expected %s, found byte 0x%02x", what, c);
}

/* ---- strings ------------------------------------------------------------ */

#define ONES  0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/* First byte at or after @p q that is '"', '\\', a control character or non-ASCII. */
static const char *scan_plain(const char *q, const char *end)
{
    while (end - q >= 8) {
        uint64_t w, hq, hb;
        memcpy(&w, q, 8);
        hq = w ^ (ONES * '"');
        hb = w ^ (ONES * '\\');
        if ((w & HIGHS) | ((hq - ONES) & ~hq & HIGHS) | ((hb - ONES) & ~hb & HIGHS) |
            ((w - ONES * 0x20) & ~w & HIGHS))
            break;
        q += 8;
    }
    for (; q < end; q++) {
        unsigned char c = (unsigned char)*q;
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80)
            break;
    }
    return q;
}

/* At a byte that stopped scan_plain() other than '"' and '\\': check it, return what follows. */
static ab_status_t check_special(struct jp *j, const char **qp)
{
    const char *q = *qp, *r = q;
    unsigned char c = (unsigned char)*q;
    if (c < 0x20)
        return FAIL(j, q, "control character 0x%02x in a string (it must be escaped)", c);
    while (r < j->end && (unsigned char)*r >= 0x80)
        r++;
    if (!ab_utf8_valid(q, (size_t)(r - q)))
        return FAIL(j, q, "invalid UTF-8 in a string");
    *qp = r;
    return AB_OK;
}

static size_t str_hdr(uint8_t *d, size_t n)
{
    if (n < 32) {
        d[0] = (uint8_t)(0xa0 | n);
        return 1;
    }
    if (n < 256) {
        d[0] = 0xd9, d[1] = (uint8_t)n;
        return 2;
    }
    if (n < 65536) {
        d[0] = 0xda, d[1] = (uint8_t)(n >> 8), d[2] = (uint8_t)n;
        return 3;
    }
    d[0] = 0xdb, d[1] = (uint8_t)(n >> 24), d[2] = (uint8_t)(n >> 16), d[3] = (uint8_t)(n >> 8);
    d[4] = (uint8_t)n;
    return 5;
}

static int hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int c = p[i], lc = c | 0x20, d = -1;
        if (is_digit((char)c))
            d = c - '0';
        else if (lc >= 'a' && lc <= 'f')
            d = lc - 'a' + 10;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* \uXXXX at *qp (a surrogate pair: both halves), appended as UTF-8. */
static ab_status_t unicode_escape(struct jp *j, const char **qp)
{
    const char *q = *qp;
    long cp = j->end - q >= 6 ? hex4(q + 2) : -1;
    size_t used = 6;
    if (cp < 0)
        return FAIL(j, q, "invalid \\u escape (4 hex digits expected)");
    if (cp >= 0xdc00 && cp <= 0xdfff)
        return FAIL(j, q, "lone low surrogate \\u%04lx", cp);
    if (cp >= 0xd800 && cp <= 0xdbff) {
        long lo = j->end - q >= 12 && q[6] == '\\' && q[7] == 'u' ? hex4(q + 8) : -1;
        if (lo < 0xdc00 || lo > 0xdfff)
            return FAIL(j, q, "high surrogate \\u%04lx is not followed by a low one", cp);
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        used = 12;
    }
    uint8_t u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (uint8_t)cp, n = 1;
    } else if (cp < 0x800) {
        u[0] = (uint8_t)(0xc0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 0x3f)), n = 2;
    } else if (cp < 0x10000) {
        u[0] = (uint8_t)(0xe0 | cp >> 12), u[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (uint8_t)(0x80 | (cp & 0x3f)), n = 3;
    } else {
        u[0] = (uint8_t)(0xf0 | cp >> 18), u[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f)), u[3] = (uint8_t)(0x80 | (cp & 0x3f)), n = 4;
    }
    *qp = q + used;
    return ab_buf_append(j->out, u, n) == AB_OK ? AB_OK : nomem(j);
}

/* The escape at *qp (a backslash), appended decoded. */
static ab_status_t escape(struct jp *j, const char **qp)
{
    const char *q = *qp;
    char c = j->end - q >= 2 ? q[1] : '\0';
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *k = c ? strchr(from, c) : NULL;
    if (c == 'u')
        return unicode_escape(j, qp);
    if (!k) {
        if (q + 1 >= j->end)
            return FAIL(j, q + 1, "unterminated string");
        return FAIL(j, q, "invalid escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX only)");
    }
    *qp = q + 2;
    return ab_buf_append(j->out, &to[k - from], 1) == AB_OK ? AB_OK : nomem(j);
}

/* The rest of a string that holds an escape: [s, q) is plain, *q is '\\'. */
static ab_status_t string_escaped(struct jp *j, const char *s, const char *q, size_t *len)
{
    ab_buf_t *out = j->out;
    size_t hdr = out->len;
    if (ab_buf_reserve(out, PLACEHOLDER + (size_t)(q - s)) != AB_OK)
        return nomem(j);
    out->len += PLACEHOLDER;
    memcpy(out->data + out->len, s, (size_t)(q - s));
    out->len += (size_t)(q - s);
    for (;;) {
        ab_status_t rc = AB_OK;
        const char *r = scan_plain(q, j->end);
        if (ab_buf_append(out, q, (size_t)(r - q)) != AB_OK)
            return nomem(j);
        q = r;
        if (q >= j->end)
            return FAIL(j, q, "unterminated string");
        if (*q == '"')
            break;
        if (*q == '\\') {
            rc = escape(j, &q);
        } else {
            rc = check_special(j, &q);
            if (rc == AB_OK && ab_buf_append(out, r, (size_t)(q - r)) != AB_OK)
                rc = nomem(j);
        }
        if (rc != AB_OK)
            return rc;
        if (out->len - hdr > (size_t)j->max_bytes + PLACEHOLDER)
            return too_large(j);
    }
    size_t n = out->len - hdr - PLACEHOLDER;
    uint8_t h[PLACEHOLDER];
    size_t hn = str_hdr(h, n);
    memmove(out->data + hdr + hn, out->data + hdr + PLACEHOLDER, n);
    memcpy(out->data + hdr, h, hn);
    out->len = hdr + hn + n;
    j->p = q + 1;
    *len = n;
    return AB_OK;
}

/* A string at j->p (the opening quote); @p len gets its decoded length, which ends the output. */
static ab_status_t string(struct jp *j, size_t *len)
{
    const char *s = j->p + 1, *q = s;
    for (;;) {
        q = scan_plain(q, j->end);
        if (q >= j->end)
            return FAIL(j, q, "unterminated string");
        if (*q == '"')
            break;
        if (*q == '\\')
            return string_escaped(j, s, q, len);
        ab_status_t rc = check_special(j, &q);
        if (rc != AB_OK)
            return rc;
    }
    size_t n = (size_t)(q - s);
    if (n > j->max_bytes)
        return too_large(j);
    if (ab_buf_reserve(j->out, n + PLACEHOLDER) != AB_OK)
        return nomem(j);
    ab_buf_t *out = j->out;
    out->len += str_hdr(out->data + out->len, n);
    memcpy(out->data + out->len, s, n);
    out->len += n;
    j->p = q + 1;
    *len = n;
    return AB_OK;
}

/* ---- numbers and literals ----------------------------------------------- */

/* [s, e) is a valid JSON number: write it as the nearest double. */
static ab_status_t real(struct jp *j, const char *s, const char *e)
{
    char small[64], *end = NULL;
    size_t n = (size_t)(e - s);
    char *buf = n < sizeof(small) ? small : ab__malloc(n + 1);
    if (!buf)
        return nomem(j);
    memcpy(buf, s, n);
    buf[n] = '\0';
    double d = strtod(buf, &end);
    if (*end != '\0') { /* an LC_NUMERIC whose decimal point is not '.' */
        char *dot = strchr(buf, '.');
        const char *dp = localeconv()->decimal_point;
        if (dot && dp[0] && !dp[1]) {
            *dot = dp[0];
            d = strtod(buf, &end);
        }
    }
    bool read = *end == '\0';
    if (buf != small)
        ab__free(buf);
    if (!read)
        return FAIL(j, s, "number not readable with the decimal point of the current locale");
    if (!isfinite(d))
        return FAIL(j, s, "number beyond the range of a double (the bus carries no infinities)");
    return msgpack_pack_double(&j->pk, d) == 0 ? AB_OK : nomem(j);
}

/* Past a run of digits at @p q. */
static const char *digits(const char *q, const char *end)
{
    while (q < end && is_digit(*q))
        q++;
    return q;
}

static ab_status_t number(struct jp *j)
{
    const char *s = j->p, *q = s + (*s == '-'), *d0 = q, *end = j->end;
    bool neg = *s == '-', frac = false;
    if (q >= end || !is_digit(*q))
        return FAIL(j, q, "expected a digit after '-'");
    q = *q == '0' ? q + 1 : digits(q, end);
    if (q < end && is_digit(*q))
        return FAIL(j, d0, "a number must not have leading zeros");
    size_t ndig = (size_t)(q - d0);
    if (q < end && *q == '.') {
        if (++q >= end || !is_digit(*q))
            return FAIL(j, q, "expected a digit after '.'");
        q = digits(q, end), frac = true;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        q += q + 1 < end && (q[1] == '+' || q[1] == '-') ? 2 : 1;
        if (q >= end || !is_digit(*q))
            return FAIL(j, q, "expected a digit in the exponent");
        q = digits(q, end), frac = true;
    }
    j->p = q;
    uint64_t u = 0;
    bool fits = !frac && ndig <= 20;
    for (size_t i = 0; fits && i < ndig; i++) {
        unsigned dg = (unsigned)(d0[i] - '0');
        fits = u <= (UINT64_MAX - dg) / 10;
        u = u * 10 + dg;
    }
    int rc = 0;
    if (fits && !neg)
        rc = u <= (uint64_t)INT64_MAX ? msgpack_pack_int64(&j->pk, (int64_t)u)
                                      : msgpack_pack_uint64(&j->pk, u);
    else if (fits && u <= (uint64_t)INT64_MAX + 1)
        rc = msgpack_pack_int64(&j->pk, u == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)u);
    else
        return real(j, s, q);
    return rc == 0 ? AB_OK : nomem(j);
}

static ab_status_t literal(struct jp *j, const char *word, uint8_t byte)
{
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0)
        return FAIL(j, j->p, "invalid literal (expected %s)", word);
    if (ab_buf_append(j->out, &byte, 1) != AB_OK)
        return nomem(j);
    j->p += n;
    return AB_OK;
}

/* ---- containers --------------------------------------------------------- */

static ab_status_t open_container(struct jp *j, bool map)
{
    struct jframe *f = vec_push(&j->fr);
    if (!f || ab_buf_reserve(j->out, 1) != AB_OK)
        return nomem(j);
    *f = (struct jframe){.off = j->out->len, .key0 = j->keys.n, .n = 0, .map = map};
    j->out->data[j->out->len++] = 0; /* the header, written at the close */
    j->in_item = false;
    j->p++;
    return AB_OK;
}

/* Sort helper: a key with its bytes and its index in the object. */
struct skey {
    const uint8_t *p;
    uint32_t len;
    size_t at;
};

static int skey_cmp(const void *a, const void *b)
{
    const struct skey *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c == 0)
        c = (x->len > y->len) - (x->len < y->len);
    return c ? c : (x->at > y->at) - (x->at < y->at);
}

/* An object of more than SMALL_OBJECT keys, closing: find its first repeated key. */
static ab_status_t dup_sorted(struct jp *j)
{
    const struct jkey *keys = (const struct jkey *)j->keys.p + top(j)->key0;
    size_t n = j->keys.n - top(j)->key0, best = SIZE_MAX;
    struct skey *s = ab__malloc(n * sizeof(*s));
    if (!s)
        return nomem(j);
    for (size_t i = 0; i < n; i++)
        s[i] = (struct skey){j->out->data + keys[i].off, keys[i].len, i};
    qsort(s, n, sizeof(*s), skey_cmp);
    for (size_t i = 1; i < n; i++)
        if (s[i].len == s[i - 1].len && memcmp(s[i].p, s[i - 1].p, s[i].len) == 0 && s[i].at < best)
            best = s[i].at; /* the earliest key that repeats an earlier one */
    ab__free(s);
    if (best == SIZE_MAX)
        return AB_OK;
    return fail_key(j, j->bad, j->text + keys[best].at, &keys[best], "duplicate object key");
}

/* The key at j->p (a quote) of the innermost object, then ':'. */
static ab_status_t key(struct jp *j)
{
    const char *at = j->p;
    size_t len = 0;
    ab_status_t rc = string(j, &len);
    if (rc != AB_OK)
        return rc;
    struct jkey *k = vec_push(&j->keys);
    if (!k)
        return nomem(j);
    *k =
        (struct jkey){.off = j->out->len - len, .len = (uint32_t)len, .at = (size_t)(at - j->text)};
    j->in_item = true;
    const struct jkey *first = (const struct jkey *)j->keys.p + top(j)->key0;
    if (k - first < SMALL_OBJECT) {
        for (const struct jkey *o = first; o < k; o++)
            if (o->len == k->len &&
                memcmp(j->out->data + o->off, j->out->data + k->off, k->len) == 0)
                return FAIL(j, at, "duplicate object key");
    }
    skip_ws(j);
    if (j->p >= j->end || *j->p != ':')
        return unexpected(j, "':' after the key");
    j->p++;
    return AB_OK;
}

/* Begin the next item of the innermost container (its key first, in an object). */
static ab_status_t item(struct jp *j)
{
    struct jframe *c = top(j);
    c->n++;
    if (!c->map) {
        j->in_item = true;
        return AB_OK;
    }
    j->in_item = false;
    skip_ws(j);
    if (j->p >= j->end || *j->p != '"')
        return unexpected(j, "a string key");
    return key(j);
}

/* Write the shortest header of @p f at @p d; returns its size. */
static size_t cont_hdr(uint8_t *d, const struct jframe *f)
{
    uint32_t n = f->n;
    if (n < 16) {
        d[0] = (uint8_t)((f->map ? 0x80 : 0x90) | n);
        return 1;
    }
    if (n < 65536) {
        d[0] = f->map ? 0xde : 0xdc, d[1] = (uint8_t)(n >> 8), d[2] = (uint8_t)n;
        return 3;
    }
    d[0] = f->map ? 0xdf : 0xdd, d[1] = (uint8_t)(n >> 24), d[2] = (uint8_t)(n >> 16);
    d[3] = (uint8_t)(n >> 8), d[4] = (uint8_t)n;
    return 5;
}

/* At the closing bracket: the header in place (content moved up for a longer one), keys popped. */
static ab_status_t close_container(struct jp *j)
{
    struct jframe *f = top(j);
    ab_buf_t *out = j->out;
    if (f->map && f->n > SMALL_OBJECT) {
        ab_status_t rc = dup_sorted(j);
        if (rc != AB_OK)
            return rc;
    }
    uint8_t h[5];
    size_t hn = cont_hdr(h, f);
    if (hn > 1) {
        if (ab_buf_reserve(out, hn - 1) != AB_OK)
            return nomem(j);
        memmove(out->data + f->off + hn, out->data + f->off + 1, out->len - f->off - 1);
        out->len += hn - 1;
    }
    memcpy(out->data + f->off, h, hn);
    j->keys.n = f->key0;
    j->fr.n--;
    j->p++;
    return AB_OK;
}

/* ---- the value loop ----------------------------------------------------- */

/* One value at j->p (whitespace skipped); a container is only opened. */
static ab_status_t value(struct jp *j, bool *opened)
{
    if (j->fr.n >= j->max_depth)
        return fail_key(j, AB_TOO_LARGE, j->p, NULL, "nesting deeper than the limit of %u",
                        j->max_depth);
    if (j->p >= j->end)
        return unexpected(j, "a value");
    size_t len = 0;
    switch (*j->p) {
    case '{':
    case '[': *opened = true; return open_container(j, *j->p == '{');
    case '"': return string(j, &len);
    case 't': return literal(j, "true", 0xc3);
    case 'f': return literal(j, "false", 0xc2);
    case 'n': return literal(j, "null", 0xc0);
    default: break;
    }
    if (*j->p == '-' || is_digit(*j->p))
        return number(j);
    return unexpected(j, "a value");
}

/* After a complete value: close containers until one has a next item (*more) or none is open. */
static ab_status_t after_value(struct jp *j, bool *more)
{
    for (;;) {
        *more = false;
        if (j->out->len - j->start > j->max_bytes)
            return too_large(j);
        if (j->fr.n == 0)
            return AB_OK;
        j->in_item = false;
        skip_ws(j);
        bool map = top(j)->map;
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            *more = true;
            return item(j);
        }
        if (j->p >= j->end || *j->p != (map ? '}' : ']'))
            return unexpected(j, map ? "',' or '}'" : "',' or ']'");
        ab_status_t rc = close_container(j);
        if (rc != AB_OK)
            return rc;
    }
}

static ab_status_t run(struct jp *j)
{
    for (;;) {
        bool opened = false, more = false;
        skip_ws(j);
        ab_status_t rc = value(j, &opened);
        if (rc == AB_OK && opened) {
            skip_ws(j);
            char close = top(j)->map ? '}' : ']';
            if (j->p >= j->end || *j->p != close) {
                if ((rc = item(j)) != AB_OK)
                    return rc;
                continue;
            }
            rc = close_container(j);
        }
        if (rc == AB_OK)
            rc = after_value(j, &more);
        if (rc != AB_OK || !more)
            return rc;
    }
}

ab_status_t ab_json_to_msgpack(const char *text, size_t len, uint32_t max_depth, uint32_t max_bytes,
                               ab_status_t bad_code, ab_buf_t *out, ab_error_t *err)
{
    struct jp j = {.text = text, .p = text, .end = text + len, .out = out, .start = out->len};
    j.max_depth = max_depth, j.max_bytes = max_bytes, j.bad = bad_code, j.err = err;
    vec_init(&j.fr, j.fr_in, INLINE_FRAMES, sizeof(struct jframe));
    vec_init(&j.keys, j.keys_in, INLINE_KEYS, sizeof(struct jkey));
    msgpack_packer_init(&j.pk, out, ab_buf_msgpack_write);
    ab_status_t rc = run(&j);
    if (rc == AB_OK) {
        skip_ws(&j);
        if (j.p < j.end)
            rc = unexpected(&j, "the end of the input after the value");
    }
    if (rc == AB_OK && out->len - j.start > max_bytes) {
        ab_error_set(err, AB_TOO_LARGE, "", "encoded value of %zu bytes exceeds the limit of %u",
                     out->len - j.start, max_bytes);
        ab_error_detail_int(err, "limit", max_bytes);
        rc = AB_TOO_LARGE;
    }
    vec_free(&j.fr);
    vec_free(&j.keys);
    if (rc != AB_OK)
        out->len = j.start;
    return rc;
}

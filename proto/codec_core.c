/*
 * codec_core.c - the generic spec walker and the scalar field types of the
 * wire codec (see codec_internal.h for the model, agentbus/codec.h for the
 * contract).
 *
 * Invariants:
 *  1. Decoders fill a scratch struct; the public functions copy it out only
 *     on success, so out-params stay untouched on every error.
 *  2. Every error names the path of the offending value (c->path, a JSON
 *     pointer while walking, reported without its leading slash).
 *  3. Each field type's encoder checks the same rule as its decoder (peer
 *     limits aside), so the codec never writes what it would refuse.
 *  4. Required fields are always written; optional ones only when has()
 *     says they are set, and a decoded optional field is set exactly when it
 *     was present, so decode(encode(x)) == x for every decoded x.
 */
#include "codec_internal.h"

#include "ab_common.h"
#include "agentbus/ids.h"
#include "value_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- context ------------------------------------------------------------ */

void ab__cc_init_decode(ab_cctx_t *c, ab_doc_t *doc, const ab_limits_t *lim, ab_error_t *err)
{
    memset(c, 0, sizeof(*c));
    c->err = err;
    c->bad = AB_INVALID_ENVELOPE;
    c->decoding = true;
    c->lim = lim;
    c->doc = doc;
}

void ab__cc_init_encode(ab_cctx_t *c, ab_buf_t *out, ab_error_t *err)
{
    memset(c, 0, sizeof(*c));
    c->err = err;
    c->bad = AB_INVALID_ARGUMENT;
    msgpack_packer_init(&c->pk, out, ab_buf_msgpack_write);
}

const char *ab__cc_field(const ab_cctx_t *c)
{
    return c->path[0] == '/' ? c->path + 1 : c->path;
}

/* The current field for messages: its path, or "message" at the root. */
static const char *what(const ab_cctx_t *c)
{
    return c->path[0] ? ab__cc_field(c) : "message";
}

ab_status_t ab__cc_fail(ab_cctx_t *c, ab_status_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ab_error_vset(c->err, code, ab__cc_field(c), fmt, ap);
    va_end(ap);
    return code;
}

size_t ab__cc_push_key(ab_cctx_t *c, const char *key, size_t len)
{
    size_t mark = c->plen, n = mark;
    if (n + 1 + 2 * len >= sizeof(c->path)) { /* rare: may truncate */
        ab_path_push_key(c->path, sizeof(c->path), key, len);
        c->plen = strlen(c->path);
        return mark;
    }
    c->path[n++] = '/';
    for (size_t i = 0; i < len; i++) { /* JSON-pointer escaping in one pass */
        char ch = key[i];
        if (ch == '~' || ch == '/') {
            c->path[n++] = '~';
            ch = ch == '~' ? '0' : '1';
        }
        c->path[n++] = ch;
    }
    c->path[n] = '\0';
    c->plen = n;
    return mark;
}

size_t ab__cc_push_index(ab_cctx_t *c, size_t i)
{
    size_t mark = c->plen;
    ab_path_push_index(c->path, sizeof(c->path), i);
    c->plen = strlen(c->path);
    return mark;
}

void ab__cc_pop(ab_cctx_t *c, size_t mark)
{
    c->path[mark] = '\0';
    c->plen = mark;
}

void ab__cc_fix_field(ab_error_t *err)
{
    if (err && err->field[0] == '/')
        memmove(err->field, err->field + 1, strlen(err->field));
}

ab_status_t ab__cc_pk(ab_cctx_t *c, int rc)
{
    return rc == 0 ? AB_OK : ab__cc_fail(c, AB_NOMEM, "out of memory encoding %s", what(c));
}

void *ab__cc_alloc(ab_cctx_t *c, size_t n, size_t size)
{
    if (n == 0)
        n = 1;
    void *p = NULL;
    if (n <= SIZE_MAX / 2 / size)
        p = ab_doc_alloc(c->doc, n * size);
    if (!p) {
        ab__cc_fail(c, AB_NOMEM, "out of memory decoding %s", what(c));
        return NULL;
    }
    memset(p, 0, n * size);
    return p;
}

ab_status_t ab__cc_pack_str(ab_cctx_t *c, const char *s, size_t len)
{
    if (len > UINT32_MAX)
        return ab__cc_fail(c, c->bad, "%s is longer than a msgpack string", what(c));
    return ab__cc_pk(c, msgpack_pack_str_with_body(&c->pk, s, len));
}

/* ---- shared checks ------------------------------------------------------ */

static uint64_t field_max(const ab_cctx_t *c, const ab_fspec_t *f, uint64_t implicit)
{
    uint64_t m = implicit;
    if (f->max && f->max < m)
        m = f->max;
    if (c->decoding && c->lim) {
        uint64_t l = UINT64_MAX;
        if (f->lim == AB_LIM_BATCH)
            l = c->lim->max_batch;
        else if (f->lim == AB_LIM_REPLAY_WINDOW)
            l = c->lim->max_replay_window;
        else if (f->lim == AB_LIM_REPLAY_BYTES)
            l = c->lim->max_replay_bytes;
        else if (f->lim == AB_LIM_CHUNK_BYTES)
            l = (uint64_t)AB_CHUNK_EVENTS_MAX *
                ((uint64_t)c->lim->max_event_bytes + AB_CHUNK_RECORD_OVERHEAD);
        if (l < m)
            m = l;
    }
    return m;
}

/* A value or count above its maximum: too_large when decoding. */
static ab_status_t over(ab_cctx_t *c, const char *fmt, uint64_t x, uint64_t max)
{
    ab_status_t code = c->decoding ? AB_TOO_LARGE : c->bad;
    if (!c->err || c->err->code != AB_OK) /* first error wins, details included */
        return code;
    ab__cc_fail(c, code, fmt, what(c), x, max);
    ab_error_detail_int(c->err, "limit", max > INT64_MAX ? INT64_MAX : (int64_t)max);
    ab_error_detail_int(c->err, "actual", x > INT64_MAX ? INT64_MAX : (int64_t)x);
    return code;
}

ab_status_t ab__cc_check_uint(ab_cctx_t *c, const ab_fspec_t *f, uint64_t x, uint64_t implicit,
                              enum ab_unit unit)
{
    if ((f->flags & AB_F_MIN1) && x == 0)
        return ab__cc_fail(c, c->bad,
                           unit == AB_UNIT_VALUE ? "%s must be at least 1" : "%s must not be empty",
                           what(c));
    uint64_t max = field_max(c, f, implicit);
    if (x <= max)
        return AB_OK;
    if (unit == AB_UNIT_ENTRIES)
        return over(c, "%s has %" PRIu64 " entries, the limit is %" PRIu64, x, max);
    if (unit == AB_UNIT_BYTES)
        return over(c, "%s is %" PRIu64 " bytes, the limit is %" PRIu64, x, max);
    return over(c, "%s is %" PRIu64 ", the limit is %" PRIu64, x, max);
}

ab_status_t ab__cc_get_uint(ab_cctx_t *c, const ab_val_t *v, uint64_t *out)
{
    if (v->type == AB_VAL_UINT) /* every uint field of the protocol stops at 2^63 - 1 */
        return ab__cc_fail(c, c->bad, "%s must be at most 2^63-1, not %" PRIu64, what(c), v->u.u);
    if (v->type != AB_VAL_INT)
        return ab__cc_fail(c, c->bad, "%s must be a non-negative integer, not %s", what(c),
                           ab_val_type_name(v->type));
    if (v->u.i < 0)
        return ab__cc_fail(c, c->bad, "%s must be a non-negative integer, not %" PRId64, what(c),
                           v->u.i);
    *out = (uint64_t)v->u.i;
    return AB_OK;
}

ab_status_t ab__cc_check_utf8(ab_cctx_t *c, const char *s, size_t len)
{
    if (!ab_utf8_valid(s, len))
        return ab__cc_fail(c, c->bad, "%s is not valid UTF-8", what(c));
    return AB_OK;
}

ab_status_t ab__cc_check_id(ab_cctx_t *c, const char *s, size_t len)
{
    if (c->decoding)
        return ab_id_check(s, len, c->lim ? c->lim->max_id_bytes : 0, ab__cc_field(c), c->err);
    if (!s)
        return ab__cc_fail(c, c->bad, "%s is missing", what(c));
    ab_error_t tmp = AB_ERROR_INIT;
    if (ab_id_check(s, len, 0, ab__cc_field(c), &tmp) == AB_OK)
        return AB_OK;
    return ab__cc_fail(c, c->bad, "%s", tmp.message);
}

static ab_status_t want(ab_cctx_t *c, const ab_val_t *v, ab_val_type_t t, const char *name)
{
    if (v->type == t)
        return AB_OK;
    return ab__cc_fail(c, c->bad, "%s must be %s, not %s", what(c), name,
                       ab_val_type_name(v->type));
}

/* ---- object walker ------------------------------------------------------ */

/* spec (NUL-terminated) equals key[0..len)? Never reads past spec's NUL. */
static bool key_is(const char *spec, const char *key, size_t len)
{
    for (size_t j = 0; j < len; j++)
        if (spec[j] == '\0' || spec[j] != key[j])
            return false;
    return spec[len] == '\0';
}

static int spec_find(const ab_ospec_t *s, const char *key, size_t len)
{
    for (int i = 0; i < s->n; i++)
        if (key_is(s->fields[i].key, key, len))
            return i;
    return -1;
}

ab_status_t ab__cc_dec_object(ab_cctx_t *c, const ab_ospec_t *s, const ab_val_t *v, char *base)
{
    ab_status_t rc = want(c, v, AB_VAL_MAP, "a map");
    uint64_t seen = 0;
    for (uint32_t i = 0; rc == AB_OK && i < v->len; i++) {
        const ab_kv_t *kv = &v->u.pairs[i];
        size_t mark = ab__cc_push_key(c, kv->key, kv->klen);
        int k = spec_find(s, kv->key, kv->klen);
        if (k < 0)
            return ab__cc_fail(c, c->bad, "unknown field %s", ab__cc_field(c));
        rc = s->fields[k].type->dec(c, &s->fields[k], &kv->val, base);
        ab__cc_pop(c, mark);
        seen |= 1ull << k;
    }
    for (int i = 0; rc == AB_OK && i < s->n; i++) {
        const ab_fspec_t *f = &s->fields[i];
        if ((f->flags & AB_F_REQ) && !(seen >> i & 1)) {
            ab__cc_push_key(c, f->key, strlen(f->key));
            return ab__cc_fail(c, c->bad, "missing required field %s", ab__cc_field(c));
        }
    }
    if (rc == AB_OK && s->check)
        rc = s->check(c, base);
    return rc;
}

static bool present(const ab_fspec_t *f, const char *base)
{
    return (f->flags & AB_F_REQ) || f->type->has(f, base);
}

ab_status_t ab__cc_enc_object(ab_cctx_t *c, const ab_ospec_t *s, const char *base)
{
    int fast = s->fast_enc ? s->fast_enc(c, base) : -1;
    if (fast >= 0)
        return (ab_status_t)fast;
    ab_status_t rc = s->check ? s->check(c, base) : AB_OK;
    if (rc != AB_OK)
        return rc;
    uint32_t n = 0;
    for (int i = 0; i < s->n; i++)
        n += present(&s->fields[i], base);
    rc = ab__cc_pk(c, msgpack_pack_map(&c->pk, n));
    for (int i = 0; rc == AB_OK && i < s->n; i++) {
        const ab_fspec_t *f = &s->fields[i];
        if (!present(f, base))
            continue;
        size_t mark = ab__cc_push_key(c, f->key, strlen(f->key));
        rc = ab__cc_pack_str(c, f->key, strlen(f->key));
        if (rc == AB_OK)
            rc = f->type->enc(c, f, base);
        if (rc == AB_OK)
            ab__cc_pop(c, mark);
    }
    return rc;
}

bool ab__cc_eq_object(const ab_ospec_t *s, const char *a, const char *b)
{
    for (int i = 0; i < s->n; i++)
        if (!s->fields[i].type->eq(&s->fields[i], a, b))
            return false;
    return true;
}

ab_status_t ab__cc_check_root(ab_cctx_t *c, const ab_val_t *root)
{
    ab_status_t rc = want(c, root, AB_VAL_MAP, "a map");
    const ab_val_t *v = ab_val_get(root, "v");
    if (rc != AB_OK || !v)
        return rc;
    static const ab_fspec_t vf = {.key = "v", .type = &ab__ft_ver};
    uint32_t tmp = 0;
    size_t mark = ab__cc_push_key(c, "v", 1);
    rc = ab__ft_ver.dec(c, &vf, v, (char *)&tmp);
    ab__cc_pop(c, mark);
    return rc;
}

ab_status_t ab__cc_encode(const ab_ospec_t *s, const void *obj, ab_buf_t *out, ab_error_t *err)
{
    size_t len0 = out->len;
    ab_cctx_t c;
    ab__cc_init_encode(&c, out, err);
    ab_status_t rc = ab__cc_enc_object(&c, s, obj);
    if (rc != AB_OK)
        out->len = len0;
    return rc;
}

/* ---- numbers ------------------------------------------------------------ */

static ab_status_t u64_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    uint64_t x = 0;
    ab_status_t rc = ab__cc_get_uint(c, v, &x);
    if (rc == AB_OK)
        rc = ab__cc_check_uint(c, f, x, INT64_MAX, AB_UNIT_VALUE);
    if (rc == AB_OK)
        *AB_FLD(uint64_t, base, f->off) = x;
    return rc;
}

static ab_status_t u64_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    uint64_t x = *AB_CFLD(uint64_t, base, f->off);
    ab_status_t rc = ab__cc_check_uint(c, f, x, INT64_MAX, AB_UNIT_VALUE);
    return rc != AB_OK ? rc : ab__cc_pk(c, msgpack_pack_uint64(&c->pk, x));
}

static bool u64_has(const ab_fspec_t *f, const char *base)
{
    return *AB_CFLD(uint64_t, base, f->off) != 0;
}

static bool u64_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    return *AB_CFLD(uint64_t, a, f->off) == *AB_CFLD(uint64_t, b, f->off);
}

const ab_ftype_t ab__ft_u64 = {u64_dec, u64_enc, u64_has, u64_eq};

static ab_status_t u32_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    uint64_t x = 0;
    ab_status_t rc = ab__cc_get_uint(c, v, &x);
    if (rc == AB_OK)
        rc = ab__cc_check_uint(c, f, x, UINT32_MAX, AB_UNIT_VALUE);
    if (rc == AB_OK)
        *AB_FLD(uint32_t, base, f->off) = (uint32_t)x;
    return rc;
}

static ab_status_t u32_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    uint32_t x = *AB_CFLD(uint32_t, base, f->off);
    ab_status_t rc = ab__cc_check_uint(c, f, x, UINT32_MAX, AB_UNIT_VALUE);
    return rc != AB_OK ? rc : ab__cc_pk(c, msgpack_pack_uint64(&c->pk, x));
}

static bool u32_has(const ab_fspec_t *f, const char *base)
{
    return *AB_CFLD(uint32_t, base, f->off) != 0;
}

static bool u32_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    return *AB_CFLD(uint32_t, a, f->off) == *AB_CFLD(uint32_t, b, f->off);
}

const ab_ftype_t ab__ft_u32 = {u32_dec, u32_enc, u32_has, u32_eq};

static ab_status_t i64_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    if (v->type == AB_VAL_UINT)
        return ab__cc_fail(c, c->bad, "%s must be an integer from -2^63 to 2^63-1, not %" PRIu64,
                           what(c), v->u.u);
    ab_status_t rc = want(c, v, AB_VAL_INT, "an integer");
    if (rc == AB_OK)
        *AB_FLD(int64_t, base, f->off) = v->u.i;
    return rc;
}

static ab_status_t i64_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    return ab__cc_pk(c, msgpack_pack_int64(&c->pk, *AB_CFLD(int64_t, base, f->off)));
}

static bool i64_has(const ab_fspec_t *f, const char *base)
{
    return *AB_CFLD(int64_t, base, f->off) != 0;
}

static bool i64_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    return *AB_CFLD(int64_t, a, f->off) == *AB_CFLD(int64_t, b, f->off);
}

const ab_ftype_t ab__ft_i64 = {i64_dec, i64_enc, i64_has, i64_eq};

static ab_status_t bool_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    ab_status_t rc = want(c, v, AB_VAL_BOOL, "a boolean");
    if (rc == AB_OK)
        *AB_FLD(bool, base, f->off) = v->u.b;
    return rc;
}

static ab_status_t bool_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    bool b = *AB_CFLD(bool, base, f->off);
    return ab__cc_pk(c, b ? msgpack_pack_true(&c->pk) : msgpack_pack_false(&c->pk));
}

static bool bool_has(const ab_fspec_t *f, const char *base)
{
    return *AB_CFLD(bool, base, f->off);
}

static bool bool_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    return *AB_CFLD(bool, a, f->off) == *AB_CFLD(bool, b, f->off);
}

const ab_ftype_t ab__ft_bool = {bool_dec, bool_enc, bool_has, bool_eq};

/* ---- protocol version --------------------------------------------------- */

static ab_status_t ver_unsupported(ab_cctx_t *c, uint64_t x)
{
    if (!c->err || c->err->code != AB_OK)
        return AB_INCOMPATIBLE_VERSION;
    size_t n;
    const uint32_t *vs = ab_versions_supported(&n);
    char ours[96] = "", theirs[24];
    for (size_t i = 0, used = 0; i < n && used < sizeof(ours); i++) {
        int w = snprintf(ours + used, sizeof(ours) - used, "%s%" PRIu32, i ? "," : "", vs[i]);
        used += w > 0 ? (size_t)w : 0;
    }
    snprintf(theirs, sizeof(theirs), "%" PRIu64, x);
    ab__cc_fail(c, AB_INCOMPATIBLE_VERSION,
                "protocol version %s is not supported; this side speaks [%s]", theirs, ours);
    ab_error_detail_str(c->err, "ours", ours);
    ab_error_detail_str(c->err, "theirs", theirs);
    return AB_INCOMPATIBLE_VERSION;
}

static ab_status_t ver_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    uint64_t x = 0;
    ab_status_t rc = ab__cc_get_uint(c, v, &x);
    if (rc != AB_OK)
        return rc;
    if (x > UINT32_MAX || !ab_version_supported((uint32_t)x))
        return ver_unsupported(c, x);
    *AB_FLD(uint32_t, base, f->off) = (uint32_t)x;
    return AB_OK;
}

static ab_status_t ver_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    uint32_t x = *AB_CFLD(uint32_t, base, f->off);
    if (!ab_version_supported(x))
        return ab__cc_fail(c, c->bad, "v %" PRIu32 " is not a supported protocol version", x);
    return ab__cc_pk(c, msgpack_pack_uint64(&c->pk, x));
}

const ab_ftype_t ab__ft_ver = {ver_dec, ver_enc, u32_has, u32_eq};

/* ---- strings ------------------------------------------------------------ */

static ab_status_t str_check(ab_cctx_t *c, const ab_fspec_t *f, const char *s, size_t len)
{
    if (!s)
        return ab__cc_fail(c, c->bad, "%s is missing", what(c));
    ab_status_t rc = ab__cc_check_uint(c, f, len, UINT32_MAX, AB_UNIT_BYTES);
    if (rc == AB_OK && !c->decoding)
        rc = ab__cc_check_utf8(c, s, len);
    return rc;
}

static ab_status_t str_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    ab_status_t rc = want(c, v, AB_VAL_STR, "a string");
    if (rc == AB_OK)
        rc = str_check(c, f, v->u.s, v->len);
    if (rc == AB_OK)
        *AB_FLD(ab_str_t, base, f->off) = (ab_str_t){v->u.s, v->len};
    return rc;
}

static ab_status_t str_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    const ab_str_t *s = AB_CFLD(ab_str_t, base, f->off);
    ab_status_t rc = str_check(c, f, s->ptr, s->len);
    return rc != AB_OK ? rc : ab__cc_pack_str(c, s->ptr, s->len);
}

static bool str_has(const ab_fspec_t *f, const char *base)
{
    return AB_CFLD(ab_str_t, base, f->off)->ptr != NULL;
}

static bool str_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    const ab_str_t *x = AB_CFLD(ab_str_t, a, f->off), *y = AB_CFLD(ab_str_t, b, f->off);
    if (!x->ptr || !y->ptr)
        return x->ptr == y->ptr;
    return x->len == y->len && memcmp(x->ptr, y->ptr, x->len) == 0;
}

const ab_ftype_t ab__ft_str = {str_dec, str_enc, str_has, str_eq};

static ab_status_t id_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    ab_status_t rc = want(c, v, AB_VAL_STR, "a string");
    if (rc == AB_OK)
        rc = ab__cc_check_id(c, v->u.s, v->len);
    if (rc == AB_OK)
        *AB_FLD(ab_str_t, base, f->off) = (ab_str_t){v->u.s, v->len};
    return rc;
}

static ab_status_t id_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    const ab_str_t *s = AB_CFLD(ab_str_t, base, f->off);
    ab_status_t rc = ab__cc_check_id(c, s->ptr, s->len);
    return rc != AB_OK ? rc : ab__cc_pack_str(c, s->ptr, s->len);
}

const ab_ftype_t ab__ft_id = {id_dec, id_enc, str_has, str_eq};

/* An id or the empty string (a cursor or prefix whose "" means none). */
static ab_status_t id0_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    if (v->type == AB_VAL_STR && v->len == 0) {
        *AB_FLD(ab_str_t, base, f->off) = (ab_str_t){"", 0};
        return AB_OK;
    }
    return id_dec(c, f, v, base);
}

static ab_status_t id0_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    const ab_str_t *s = AB_CFLD(ab_str_t, base, f->off);
    return s->len == 0 ? ab__cc_pack_str(c, "", 0) : id_enc(c, f, base);
}

const ab_ftype_t ab__ft_id0 = {id0_dec, id0_enc, str_has, str_eq};

static ab_status_t cstr_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    ab_status_t rc = want(c, v, AB_VAL_STR, "a string");
    if (rc != AB_OK)
        return rc;
    if (v->len >= f->max)
        return over(c, "%s is %" PRIu64 " bytes, the limit is %" PRIu64, v->len, f->max - 1);
    if (memchr(v->u.s, '\0', v->len))
        return ab__cc_fail(c, c->bad, "%s must not contain NUL", what(c));
    char *dst = AB_FLD(char, base, f->off);
    memcpy(dst, v->u.s, v->len);
    dst[v->len] = '\0';
    return AB_OK;
}

static ab_status_t cstr_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    const char *s = AB_CFLD(char, base, f->off);
    size_t n = strnlen(s, f->max);
    return ab__cc_pack_str(c, s, ab__utf8_cut(s, n, n)); /* valid UTF-8, never split */
}

static bool cstr_has(const ab_fspec_t *f, const char *base)
{
    return AB_CFLD(char, base, f->off)[0] != '\0';
}

static bool cstr_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    return strncmp(AB_CFLD(char, a, f->off), AB_CFLD(char, b, f->off), f->max) == 0;
}

const ab_ftype_t ab__ft_cstr = {cstr_dec, cstr_enc, cstr_has, cstr_eq};

/* ---- enums and maps ----------------------------------------------------- */

static int enum_get(const ab_fspec_t *f, const char *base)
{
    int x;
    memcpy(&x, base + f->off, sizeof(x));
    return x;
}

static ab_status_t enum_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    ab_status_t rc = want(c, v, AB_VAL_STR, "a string");
    if (rc != AB_OK)
        return rc;
    for (int i = 0; i < f->nnames; i++) {
        if (f->names[i] && ab_val_str_eq(v, f->names[i])) {
            memcpy(base + f->off, &i, sizeof(i));
            return AB_OK;
        }
    }
    char list[128] = "";
    for (int i = 0; i < f->nnames; i++)
        if (f->names[i])
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", list[0] ? ", " : "",
                     f->names[i]);
    return ab__cc_fail(c, c->bad, "%s must be one of %s", what(c), list);
}

static ab_status_t enum_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    int x = enum_get(f, base);
    if (x < 0 || x >= f->nnames || !f->names[x])
        return ab__cc_fail(c, c->bad, "%s has no wire name for value %d", what(c), x);
    return ab__cc_pack_str(c, f->names[x], strlen(f->names[x]));
}

static bool enum_has(const ab_fspec_t *f, const char *base)
{
    return enum_get(f, base) != 0;
}

static bool enum_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    return enum_get(f, a) == enum_get(f, b);
}

const ab_ftype_t ab__ft_enum = {enum_dec, enum_enc, enum_has, enum_eq};

static ab_status_t anymap_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    ab_status_t rc = want(c, v, AB_VAL_MAP, "a map");
    if (rc == AB_OK)
        *AB_FLD(const ab_val_t *, base, f->off) = v;
    return rc;
}

static ab_status_t anymap_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    const ab_val_t *v = *AB_CFLD(const ab_val_t *, base, f->off);
    if (!v)
        return ab__cc_fail(c, c->bad, "%s is missing", what(c));
    ab_status_t rc = want(c, v, AB_VAL_MAP, "a map");
    if (rc == AB_OK && ab__val_pack(&c->pk, v) != AB_OK)
        rc = ab__cc_fail(c, AB_NOMEM, "out of memory encoding %s", what(c));
    return rc;
}

static bool anymap_has(const ab_fspec_t *f, const char *base)
{
    return *AB_CFLD(const ab_val_t *, base, f->off) != NULL;
}

static bool anymap_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    const ab_val_t *x = *AB_CFLD(const ab_val_t *, a, f->off);
    const ab_val_t *y = *AB_CFLD(const ab_val_t *, b, f->off);
    return (!x || !y) ? x == y : ab_val_equal(x, y);
}

const ab_ftype_t ab__ft_anymap = {anymap_dec, anymap_enc, anymap_has, anymap_eq};

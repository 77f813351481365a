/*
 * codec_error.c - the error map of the wire: {code, message, retryable,
 * field?, details?} <-> ab_error_t (docs/PROTOCOL.md, "Errors").
 *
 * Invariants:
 *  1. A decoded error round-trips unchanged: code, retryable, message, field
 *     and details (in wire order) are copied into the fixed buffers of
 *     ab_error_t, and anything that would not fit or not survive (too long,
 *     NUL inside, more than AB_ERROR_DETAILS_MAX details) is refused rather
 *     than truncated. The cid comes from the enclosing header.
 *  2. Encoding is best-effort so every real error can be reported: strings
 *     are cut back to valid UTF-8 and details with an empty or repeated key
 *     or an unknown kind are left out. Only AB_OK or an out-of-range code
 *     cannot be encoded.
 */
#include "codec_internal.h"

#include "ab_common.h"

#include <inttypes.h>
#include <string.h>

#define ERR(m) offsetof(ab_error_t, m)

/* ---- code --------------------------------------------------------------- */

static ab_status_t code_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    ab_status_t code = AB_OK;
    if (v->type != AB_VAL_STR)
        return ab__cc_fail(c, c->bad, "%s must be a string, not %s", ab__cc_field(c),
                           ab_val_type_name(v->type));
    if (ab_status_from_name(v->u.s, v->len, &code) != AB_OK || code == AB_OK)
        return ab__cc_fail(c, c->bad, "unknown error code \"%.*s\"",
                           (int)(v->len > 64 ? 64 : v->len), v->u.s);
    *AB_FLD(ab_status_t, base, f->off) = code;
    return AB_OK;
}

static ab_status_t code_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    ab_status_t code = *AB_CFLD(ab_status_t, base, f->off);
    if (code <= AB_OK || code >= AB_STATUS_COUNT_)
        return ab__cc_fail(c, c->bad, "%s %d is not an error code", ab__cc_field(c), (int)code);
    const char *name = ab_status_name(code);
    return ab__cc_pack_str(c, name, strlen(name));
}

static bool code_has(const ab_fspec_t *f, const char *base)
{
    return *AB_CFLD(ab_status_t, base, f->off) != AB_OK;
}

static bool code_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    return *AB_CFLD(ab_status_t, a, f->off) == *AB_CFLD(ab_status_t, b, f->off);
}

static const ab_ftype_t ft_code = {code_dec, code_enc, code_has, code_eq};

/* ---- details ------------------------------------------------------------ */

/* A wire string into a fixed buffer: fits (< size), no NUL. */
static ab_status_t copy_str(ab_cctx_t *c, const ab_val_t *v, char *dst, size_t size)
{
    if (v->len >= size) {
        if (!c->err || c->err->code != AB_OK)
            return AB_TOO_LARGE;
        ab__cc_fail(c, AB_TOO_LARGE, "%s is %" PRIu32 " bytes, the limit is %zu", ab__cc_field(c),
                    v->len, size - 1);
        ab_error_detail_int(c->err, "limit", (int64_t)size - 1);
        return AB_TOO_LARGE;
    }
    if (memchr(v->u.s, '\0', v->len))
        return ab__cc_fail(c, c->bad, "%s must not contain NUL", ab__cc_field(c));
    memcpy(dst, v->u.s, v->len);
    dst[v->len] = '\0';
    return AB_OK;
}

static ab_status_t detail_dec(ab_cctx_t *c, const ab_kv_t *kv, ab_error_detail_t *d)
{
    ab_val_t key = {.type = AB_VAL_STR, .len = kv->klen, .u.s = kv->key};
    if (kv->klen == 0)
        return ab__cc_fail(c, c->bad, "a detail key must not be empty");
    ab_status_t rc = copy_str(c, &key, d->key, sizeof(d->key));
    if (rc != AB_OK)
        return rc;
    if (kv->val.type == AB_VAL_INT) {
        d->kind = AB_DETAIL_INT;
        d->i = kv->val.u.i;
        return AB_OK;
    }
    if (kv->val.type == AB_VAL_UINT)
        return ab__cc_fail(c, c->bad, "%s must be an integer from -2^63 to 2^63-1 or a string",
                           ab__cc_field(c));
    if (kv->val.type != AB_VAL_STR)
        return ab__cc_fail(c, c->bad, "%s must be an integer or a string, not %s", ab__cc_field(c),
                           ab_val_type_name(kv->val.type));
    d->kind = AB_DETAIL_STR;
    return copy_str(c, &kv->val, d->s, sizeof(d->s));
}

static ab_status_t details_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    ab_error_t *e = (ab_error_t *)(void *)base;
    (void)f;
    if (v->type != AB_VAL_MAP)
        return ab__cc_fail(c, c->bad, "%s must be a map, not %s", ab__cc_field(c),
                           ab_val_type_name(v->type));
    static const ab_fspec_t count = {.key = "", .max = AB_ERROR_DETAILS_MAX};
    ab_status_t rc = ab__cc_check_uint(c, &count, v->len, UINT32_MAX, AB_UNIT_ENTRIES);
    for (uint32_t i = 0; rc == AB_OK && i < v->len; i++) {
        size_t mark = ab__cc_push_key(c, v->u.pairs[i].key, v->u.pairs[i].klen);
        rc = detail_dec(c, &v->u.pairs[i], &e->details[i]);
        ab__cc_pop(c, mark);
    }
    if (rc == AB_OK)
        e->ndetails = (uint8_t)v->len;
    return rc;
}

/* Length of the longest valid UTF-8 prefix of the C string s (a char[max]). */
static size_t utf8_len(const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    return ab__utf8_cut(s, n, n);
}

static bool detail_ok(const ab_error_detail_t *d)
{
    return (d->kind == AB_DETAIL_INT || d->kind == AB_DETAIL_STR) &&
           utf8_len(d->key, sizeof(d->key)) > 0;
}

/* Whether detail i is written: well-formed and its key not used before. */
static bool detail_kept(const ab_error_t *e, int i)
{
    const ab_error_detail_t *d = &e->details[i];
    if (!detail_ok(d))
        return false;
    size_t kl = utf8_len(d->key, sizeof(d->key));
    for (int j = 0; j < i; j++) {
        const ab_error_detail_t *p = &e->details[j];
        if (detail_ok(p) && utf8_len(p->key, sizeof(p->key)) == kl && !memcmp(p->key, d->key, kl))
            return false;
    }
    return true;
}

static int ndetails(const ab_error_t *e)
{
    return e->ndetails > AB_ERROR_DETAILS_MAX ? AB_ERROR_DETAILS_MAX : e->ndetails;
}

static ab_status_t details_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    const ab_error_t *e = (const ab_error_t *)(const void *)base;
    (void)f;
    uint32_t n = 0;
    for (int i = 0; i < ndetails(e); i++)
        n += detail_kept(e, i);
    ab_status_t rc = ab__cc_pk(c, msgpack_pack_map(&c->pk, n));
    for (int i = 0; rc == AB_OK && i < ndetails(e); i++) {
        const ab_error_detail_t *d = &e->details[i];
        if (!detail_kept(e, i))
            continue;
        rc = ab__cc_pack_str(c, d->key, utf8_len(d->key, sizeof(d->key)));
        if (rc == AB_OK && d->kind == AB_DETAIL_INT)
            rc = ab__cc_pk(c, msgpack_pack_int64(&c->pk, d->i));
        else if (rc == AB_OK)
            rc = ab__cc_pack_str(c, d->s, utf8_len(d->s, sizeof(d->s)));
    }
    return rc;
}

static bool details_has(const ab_fspec_t *f, const char *base)
{
    (void)f;
    return ndetails((const ab_error_t *)(const void *)base) > 0;
}

static bool details_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    const ab_error_t *x = (const ab_error_t *)(const void *)a;
    const ab_error_t *y = (const ab_error_t *)(const void *)b;
    (void)f;
    if (ndetails(x) != ndetails(y))
        return false;
    for (int i = 0; i < ndetails(x); i++) {
        const ab_error_detail_t *p = &x->details[i], *q = &y->details[i];
        if (p->kind != q->kind || strcmp(p->key, q->key) != 0)
            return false;
        if (p->kind == AB_DETAIL_INT ? p->i != q->i : strcmp(p->s, q->s) != 0)
            return false;
    }
    return true;
}

static const ab_ftype_t ft_details = {details_dec, details_enc, details_has, details_eq};

/* ---- the map ------------------------------------------------------------ */

static const ab_fspec_t error_fields[] = {
    {.key = "code", .type = &ft_code, .off = ERR(code), .flags = AB_F_REQ},
    {.key = "message",
     .type = &ab__ft_cstr,
     .off = ERR(message),
     .flags = AB_F_REQ,
     .max = AB_ERROR_MESSAGE_MAX},
    {.key = "retryable", .type = &ab__ft_bool, .off = ERR(retryable), .flags = AB_F_REQ},
    {.key = "field", .type = &ab__ft_cstr, .off = ERR(field), .max = AB_ERROR_FIELD_MAX},
    {.key = "details", .type = &ft_details},
};

static const ab_ospec_t error_spec = {
    .fields = error_fields,
    .n = sizeof(error_fields) / sizeof(error_fields[0]),
    .size = sizeof(ab_error_t),
};

/* ---- the field type holding a const ab_error_t * ----------------------- */

static ab_status_t error_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    ab_error_t *e = ab__cc_alloc(c, 1, sizeof(ab_error_t));
    if (!e)
        return AB_NOMEM;
    ab_status_t rc = ab__cc_dec_object(c, &error_spec, v, (char *)e);
    if (rc != AB_OK)
        return rc;
    e->cid = c->cid;
    *AB_FLD(const ab_error_t *, base, f->off) = e;
    return AB_OK;
}

static ab_status_t error_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    const ab_error_t *e = *AB_CFLD(const ab_error_t *, base, f->off);
    if (!e)
        return ab__cc_fail(c, c->bad, "%s is missing", ab__cc_field(c));
    return ab__cc_enc_object(c, &error_spec, (const char *)e);
}

static bool error_has(const ab_fspec_t *f, const char *base)
{
    return *AB_CFLD(const ab_error_t *, base, f->off) != NULL;
}

static bool error_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    const ab_error_t *x = *AB_CFLD(const ab_error_t *, a, f->off);
    const ab_error_t *y = *AB_CFLD(const ab_error_t *, b, f->off);
    if (!x || !y)
        return x == y;
    return x->cid == y->cid && ab__cc_eq_object(&error_spec, (const char *)x, (const char *)y);
}

const ab_ftype_t ab__ft_error = {error_dec, error_enc, error_has, error_eq};

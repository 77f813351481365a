/*
 * codec_types.c - the composite field types of the wire codec: nested
 * objects, lists of objects, version lists, capability maps, replay cursors
 * and the error map (see codec_internal.h).
 *
 * Invariants:
 *  1. Decoded lists live in the doc arena; a list of n entries is stored as a
 *     typed pointer plus a size_t count, and an empty list as (NULL, 0).
 *  2. Map-shaped lists (caps, cursors, error details) keep the wire order,
 *     so re-encoding writes the keys in the order they were read.
 *  3. The error map is the only best-effort encoder: it cuts strings back to
 *     valid UTF-8 and leaves out details it cannot write, so any error with
 *     a real code can be reported. Everything it writes decodes back to the
 *     same ab_error_t.
 */
#include "alloc_internal.h"
#include "codec_internal.h"
#include "value_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- duplicate keys ----------------------------------------------------- */

static int str_cmp(const void *a, const void *b)
{
    const ab_str_t *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int r = n ? memcmp(x->ptr, y->ptr, n) : 0;
    return r ? r : (x->len > y->len) - (x->len < y->len);
}

static int find_dup(const ab_str_t *keys, size_t n, ab_str_t *dup)
{
    if (n < 2)
        return 0;
    ab_str_t *s = ab__malloc(n * sizeof(*s));
    if (!s)
        return -1;
    memcpy(s, keys, n * sizeof(*s));
    qsort(s, n, sizeof(*s), str_cmp);
    int found = 0;
    for (size_t i = 1; i < n && !found; i++) {
        if (str_cmp(&s[i - 1], &s[i]) == 0) {
            *dup = s[i];
            found = 1;
        }
    }
    ab__free(s);
    return found;
}

/* Fail when keys repeat (encoding only: the reader rejects repeats). */
static ab_status_t no_dups(ab_cctx_t *c, const ab_str_t *keys, size_t n)
{
    ab_str_t d = {0};
    int r = find_dup(keys, n, &d);
    if (r < 0)
        return ab__cc_fail(c, AB_NOMEM, "out of memory checking keys");
    if (r > 0)
        return ab__cc_fail(c, c->bad, "key \"%.*s\" appears twice", (int)(d.len > 64 ? 64 : d.len),
                           d.ptr);
    return AB_OK;
}

static size_t *count_at(char *base, const ab_fspec_t *f)
{
    return AB_FLD(size_t, base, f->off_n);
}

static size_t count_of(const char *base, const ab_fspec_t *f)
{
    return *AB_CFLD(size_t, base, f->off_n);
}

static bool count_has(const ab_fspec_t *f, const char *base)
{
    return count_of(base, f) > 0;
}

static ab_status_t want_type(ab_cctx_t *c, const ab_val_t *v, ab_val_type_t t)
{
    if (v->type == t)
        return AB_OK;
    return ab__cc_fail(c, c->bad, "%s must be %s, not %s", ab__cc_field(c),
                       t == AB_VAL_MAP ? "a map" : "an array", ab_val_type_name(v->type));
}

/* ---- nested object ------------------------------------------------------ */

static ab_status_t obj_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    return ab__cc_dec_object(c, f->sub, v, base + f->off);
}

static ab_status_t obj_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    return ab__cc_enc_object(c, f->sub, base + f->off);
}

static bool obj_has(const ab_fspec_t *f, const char *base)
{
    (void)f;
    (void)base;
    return true;
}

static bool obj_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    return ab__cc_eq_object(f->sub, a + f->off, b + f->off);
}

const ab_ftype_t ab__ft_obj = {obj_dec, obj_enc, obj_has, obj_eq};

/* ---- list of objects ---------------------------------------------------- */

static ab_status_t list_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    ab_status_t rc = want_type(c, v, AB_VAL_ARRAY);
    if (rc == AB_OK)
        rc = ab__cc_check_uint(c, f, v->len, UINT32_MAX, AB_UNIT_ENTRIES);
    char *items = rc == AB_OK ? ab__cc_alloc(c, v->len, f->sub->size) : NULL;
    if (!items)
        return rc != AB_OK ? rc : AB_NOMEM;
    for (uint32_t i = 0; i < v->len; i++) {
        size_t mark = ab__cc_push_index(c, i);
        rc = ab__cc_dec_object(c, f->sub, &v->u.items[i], items + i * f->sub->size);
        if (rc != AB_OK)
            return rc;
        ab__cc_pop(c, mark);
    }
    f->sub->store(base + f->off, v->len ? items : NULL);
    *count_at(base, f) = v->len;
    return AB_OK;
}

static ab_status_t list_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    const char *items = f->sub->load(base + f->off);
    size_t n = count_of(base, f);
    ab_status_t rc = ab__cc_check_uint(c, f, n, UINT32_MAX, AB_UNIT_ENTRIES);
    if (rc == AB_OK && n && !items)
        rc = ab__cc_fail(c, c->bad, "%s has entries but no array", ab__cc_field(c));
    if (rc == AB_OK)
        rc = ab__cc_pk(c, msgpack_pack_array(&c->pk, n));
    for (size_t i = 0; rc == AB_OK && i < n; i++) {
        size_t mark = ab__cc_push_index(c, i);
        rc = ab__cc_enc_object(c, f->sub, items + i * f->sub->size);
        if (rc == AB_OK)
            ab__cc_pop(c, mark);
    }
    return rc;
}

static bool list_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    size_t n = count_of(a, f);
    if (n != count_of(b, f))
        return false;
    const char *x = f->sub->load(a + f->off), *y = f->sub->load(b + f->off);
    for (size_t i = 0; i < n; i++)
        if (!ab__cc_eq_object(f->sub, x + i * f->sub->size, y + i * f->sub->size))
            return false;
    return true;
}

const ab_ftype_t ab__ft_list = {list_dec, list_enc, count_has, list_eq};

/* ---- versions ----------------------------------------------------------- */

static const ab_fspec_t version_item = {.key = "", .flags = AB_F_MIN1};

static ab_status_t versions_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    ab_status_t rc = want_type(c, v, AB_VAL_ARRAY);
    if (rc == AB_OK)
        rc = ab__cc_check_uint(c, f, v->len, UINT32_MAX, AB_UNIT_ENTRIES);
    uint32_t *vs = rc == AB_OK ? ab__cc_alloc(c, v->len, sizeof(uint32_t)) : NULL;
    if (!vs)
        return rc != AB_OK ? rc : AB_NOMEM;
    for (uint32_t i = 0; i < v->len; i++) {
        uint64_t x = 0;
        size_t mark = ab__cc_push_index(c, i);
        rc = ab__cc_get_uint(c, &v->u.items[i], &x);
        if (rc == AB_OK)
            rc = ab__cc_check_uint(c, &version_item, x, UINT32_MAX, AB_UNIT_VALUE);
        if (rc != AB_OK)
            return rc;
        ab__cc_pop(c, mark);
        vs[i] = (uint32_t)x;
    }
    *AB_FLD(const uint32_t *, base, f->off) = v->len ? vs : NULL;
    *count_at(base, f) = v->len;
    return AB_OK;
}

static ab_status_t versions_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    const uint32_t *vs = *AB_CFLD(const uint32_t *, base, f->off);
    size_t n = count_of(base, f);
    ab_status_t rc = ab__cc_check_uint(c, f, n, UINT32_MAX, AB_UNIT_ENTRIES);
    if (rc == AB_OK && n && !vs)
        rc = ab__cc_fail(c, c->bad, "%s has entries but no array", ab__cc_field(c));
    if (rc == AB_OK)
        rc = ab__cc_pk(c, msgpack_pack_array(&c->pk, n));
    for (size_t i = 0; rc == AB_OK && i < n; i++) {
        size_t mark = ab__cc_push_index(c, i);
        rc = ab__cc_check_uint(c, &version_item, vs[i], UINT32_MAX, AB_UNIT_VALUE);
        if (rc == AB_OK)
            rc = ab__cc_pk(c, msgpack_pack_uint64(&c->pk, vs[i]));
        if (rc == AB_OK)
            ab__cc_pop(c, mark);
    }
    return rc;
}

static bool versions_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    size_t n = count_of(a, f);
    const uint32_t *x = *AB_CFLD(const uint32_t *, a, f->off);
    const uint32_t *y = *AB_CFLD(const uint32_t *, b, f->off);
    return n == count_of(b, f) && (n == 0 || memcmp(x, y, n * sizeof(*x)) == 0);
}

const ab_ftype_t ab__ft_versions = {versions_dec, versions_enc, count_has, versions_eq};

/* ---- capabilities ------------------------------------------------------- */

static ab_status_t cap_name_check(ab_cctx_t *c, const char *s, size_t len)
{
    static const ab_fspec_t name = {.key = "", .flags = AB_F_MIN1, .max = AB_CAP_NAME_MAX};
    ab_status_t rc = ab__cc_check_uint(c, &name, len, UINT32_MAX, AB_UNIT_BYTES);
    if (rc == AB_OK && !c->decoding)
        rc = ab__cc_check_utf8(c, s, len);
    return rc;
}

static ab_status_t caps_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    ab_status_t rc = want_type(c, v, AB_VAL_MAP);
    ab_cap_t *caps = rc == AB_OK ? ab__cc_alloc(c, v->len, sizeof(ab_cap_t)) : NULL;
    if (!caps)
        return rc != AB_OK ? rc : AB_NOMEM;
    for (uint32_t i = 0; i < v->len; i++) {
        const ab_kv_t *kv = &v->u.pairs[i];
        size_t mark = ab__cc_push_key(c, kv->key, kv->klen);
        rc = cap_name_check(c, kv->key, kv->klen);
        if (rc == AB_OK && (kv->val.type != AB_VAL_STR ||
                            ab_cap_state_from(kv->val.u.s, kv->val.len, &caps[i].state) != AB_OK))
            rc = ab__cc_fail(c, c->bad,
                             "%s must be one of available, degraded, unavailable, "
                             "unsupported",
                             ab__cc_field(c));
        if (rc != AB_OK)
            return rc;
        ab__cc_pop(c, mark);
        caps[i].name = kv->key;
        caps[i].name_len = kv->klen;
    }
    *AB_FLD(const ab_cap_t *, base, f->off) = v->len ? caps : NULL;
    *count_at(base, f) = v->len;
    return AB_OK;
}

static ab_status_t caps_check(ab_cctx_t *c, const ab_cap_t *caps, size_t n)
{
    ab_str_t *names = n ? ab__malloc(n * sizeof(*names)) : NULL;
    if (n && !names)
        return ab__cc_fail(c, AB_NOMEM, "out of memory checking caps");
    ab_status_t rc = AB_OK;
    for (size_t i = 0; rc == AB_OK && i < n; i++) {
        size_t mark = ab__cc_push_key(c, caps[i].name ? caps[i].name : "", caps[i].name_len);
        rc = caps[i].name ? cap_name_check(c, caps[i].name, caps[i].name_len)
                          : ab__cc_fail(c, c->bad, "capability %zu has no name", i);
        if (rc == AB_OK && (caps[i].state < AB_CAP_AVAILABLE || caps[i].state > AB_CAP_UNSUPPORTED))
            rc = ab__cc_fail(c, c->bad, "%s has no wire state", ab__cc_field(c));
        ab__cc_pop(c, mark);
        names[i] = (ab_str_t){caps[i].name, caps[i].name_len};
    }
    if (rc == AB_OK)
        rc = no_dups(c, names, n);
    ab__free(names);
    return rc;
}

static ab_status_t caps_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    const ab_cap_t *caps = *AB_CFLD(const ab_cap_t *, base, f->off);
    size_t n = count_of(base, f);
    if (n && !caps)
        return ab__cc_fail(c, c->bad, "%s has entries but no array", ab__cc_field(c));
    ab_status_t rc = caps_check(c, caps, n);
    if (rc == AB_OK)
        rc = ab__cc_pk(c, msgpack_pack_map(&c->pk, n));
    for (size_t i = 0; rc == AB_OK && i < n; i++) {
        const char *state = ab_cap_state_name(caps[i].state);
        rc = ab__cc_pack_str(c, caps[i].name, caps[i].name_len);
        if (rc == AB_OK)
            rc = ab__cc_pack_str(c, state, strlen(state));
    }
    return rc;
}

static bool caps_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    size_t n = count_of(a, f);
    if (n != count_of(b, f))
        return false;
    const ab_cap_t *x = *AB_CFLD(const ab_cap_t *, a, f->off);
    const ab_cap_t *y = *AB_CFLD(const ab_cap_t *, b, f->off);
    for (size_t i = 0; i < n; i++)
        if (x[i].state != y[i].state || x[i].name_len != y[i].name_len ||
            memcmp(x[i].name, y[i].name, x[i].name_len) != 0)
            return false;
    return true;
}

const ab_ftype_t ab__ft_caps = {caps_dec, caps_enc, count_has, caps_eq};

/* ---- replay cursors ----------------------------------------------------- */

static const ab_fspec_t cursor_seq = {.key = ""};

static ab_status_t cursors_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    ab_status_t rc = want_type(c, v, AB_VAL_MAP);
    if (rc == AB_OK)
        rc = ab__cc_check_uint(c, f, v->len, UINT32_MAX, AB_UNIT_ENTRIES);
    ab_cursor_t *cur = rc == AB_OK ? ab__cc_alloc(c, v->len, sizeof(ab_cursor_t)) : NULL;
    if (!cur)
        return rc != AB_OK ? rc : AB_NOMEM;
    for (uint32_t i = 0; i < v->len; i++) {
        const ab_kv_t *kv = &v->u.pairs[i];
        size_t mark = ab__cc_push_key(c, kv->key, kv->klen);
        rc = ab__cc_check_id(c, kv->key, kv->klen);
        if (rc == AB_OK)
            rc = ab__cc_get_uint(c, &kv->val, &cur[i].after_seq);
        if (rc != AB_OK)
            return rc;
        ab__cc_pop(c, mark);
        cur[i].run = (ab_str_t){kv->key, kv->klen};
    }
    *AB_FLD(const ab_cursor_t *, base, f->off) = v->len ? cur : NULL;
    *count_at(base, f) = v->len;
    return AB_OK;
}

static ab_status_t cursors_check(ab_cctx_t *c, const ab_fspec_t *f, const ab_cursor_t *cur,
                                 size_t n)
{
    ab_status_t rc = ab__cc_check_uint(c, f, n, UINT32_MAX, AB_UNIT_ENTRIES);
    if (rc == AB_OK && n && !cur)
        rc = ab__cc_fail(c, c->bad, "%s has entries but no array", ab__cc_field(c));
    ab_str_t *runs = rc == AB_OK && n ? ab__malloc(n * sizeof(*runs)) : NULL;
    if (rc == AB_OK && n && !runs)
        rc = ab__cc_fail(c, AB_NOMEM, "out of memory checking cursors");
    for (size_t i = 0; rc == AB_OK && i < n; i++) {
        size_t mark = ab__cc_push_key(c, cur[i].run.ptr ? cur[i].run.ptr : "", cur[i].run.len);
        rc = ab__cc_check_id(c, cur[i].run.ptr, cur[i].run.len);
        if (rc == AB_OK)
            rc = ab__cc_check_uint(c, &cursor_seq, cur[i].after_seq, INT64_MAX, AB_UNIT_VALUE);
        ab__cc_pop(c, mark);
        runs[i] = cur[i].run;
    }
    if (rc == AB_OK)
        rc = no_dups(c, runs, n);
    ab__free(runs);
    return rc;
}

static ab_status_t cursors_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    const ab_cursor_t *cur = *AB_CFLD(const ab_cursor_t *, base, f->off);
    size_t n = count_of(base, f);
    ab_status_t rc = cursors_check(c, f, cur, n);
    if (rc == AB_OK)
        rc = ab__cc_pk(c, msgpack_pack_map(&c->pk, n));
    for (size_t i = 0; rc == AB_OK && i < n; i++) {
        rc = ab__cc_pack_str(c, cur[i].run.ptr, cur[i].run.len);
        if (rc == AB_OK)
            rc = ab__cc_pk(c, msgpack_pack_uint64(&c->pk, cur[i].after_seq));
    }
    return rc;
}

static bool cursors_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    size_t n = count_of(a, f);
    if (n != count_of(b, f))
        return false;
    const ab_cursor_t *x = *AB_CFLD(const ab_cursor_t *, a, f->off);
    const ab_cursor_t *y = *AB_CFLD(const ab_cursor_t *, b, f->off);
    for (size_t i = 0; i < n; i++)
        if (x[i].after_seq != y[i].after_seq || x[i].run.len != y[i].run.len ||
            memcmp(x[i].run.ptr, y[i].run.ptr, x[i].run.len) != 0)
            return false;
    return true;
}

const ab_ftype_t ab__ft_cursors = {cursors_dec, cursors_enc, count_has, cursors_eq};

/* ---- list of action ids: array of distinct non-empty strings --------------- */

static const ab_fspec_t action_item = {
    .key = "", .type = &ab__ft_str, .flags = AB_F_MIN1, .max = AB_ACTION_ID_MAX};

static ab_status_t no_dup_items(ab_cctx_t *c, const ab_str_t *s, size_t n)
{
    ab_str_t d = {0};
    int r = find_dup(s, n, &d);
    if (r < 0)
        return ab__cc_fail(c, AB_NOMEM, "out of memory checking %s", ab__cc_field(c));
    if (r > 0)
        return ab__cc_fail(c, c->bad, "%s names \"%.*s\" twice", ab__cc_field(c),
                           (int)(d.len > 64 ? 64 : d.len), d.ptr);
    return AB_OK;
}

static ab_status_t strlist_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    ab_status_t rc = want_type(c, v, AB_VAL_ARRAY);
    if (rc == AB_OK)
        rc = ab__cc_check_uint(c, f, v->len, UINT32_MAX, AB_UNIT_ENTRIES);
    ab_str_t *items = rc == AB_OK && v->len ? ab__cc_alloc(c, v->len, sizeof(*items)) : NULL;
    if (rc != AB_OK || (v->len && !items))
        return rc != AB_OK ? rc : AB_NOMEM;
    for (uint32_t i = 0; i < v->len; i++) {
        size_t mark = ab__cc_push_index(c, i);
        rc = action_item.type->dec(c, &action_item, &v->u.items[i], (char *)&items[i]);
        if (rc != AB_OK)
            return rc;
        ab__cc_pop(c, mark);
    }
    if ((rc = no_dup_items(c, items, v->len)) != AB_OK)
        return rc;
    *AB_FLD(const ab_str_t *, base, f->off) = items;
    *count_at(base, f) = v->len;
    return AB_OK;
}

static ab_status_t strlist_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    const ab_str_t *items = *AB_CFLD(const ab_str_t *, base, f->off);
    size_t n = count_of(base, f);
    ab_status_t rc = ab__cc_check_uint(c, f, n, UINT32_MAX, AB_UNIT_ENTRIES);
    if (rc == AB_OK && n && !items)
        rc = ab__cc_fail(c, c->bad, "%s has entries but no array", ab__cc_field(c));
    if (rc == AB_OK)
        rc = no_dup_items(c, items, n);
    if (rc == AB_OK)
        rc = ab__cc_pk(c, msgpack_pack_array(&c->pk, n));
    for (size_t i = 0; rc == AB_OK && i < n; i++) {
        size_t mark = ab__cc_push_index(c, i);
        rc = action_item.type->enc(c, &action_item, (const char *)&items[i]);
        if (rc == AB_OK)
            ab__cc_pop(c, mark);
    }
    return rc;
}

static bool strlist_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    size_t n = count_of(a, f);
    if (n != count_of(b, f))
        return false;
    const ab_str_t *x = *AB_CFLD(const ab_str_t *, a, f->off);
    const ab_str_t *y = *AB_CFLD(const ab_str_t *, b, f->off);
    for (size_t i = 0; i < n; i++)
        if (x[i].len != y[i].len || (x[i].len && memcmp(x[i].ptr, y[i].ptr, x[i].len) != 0))
            return false;
    return true;
}

const ab_ftype_t ab__ft_strlist = {strlist_dec, strlist_enc, count_has, strlist_eq};

/* ---- any value (optional: NULL = absent) ----------------------------------- */

static ab_status_t any_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    (void)c;
    *AB_FLD(const ab_val_t *, base, f->off) = v; /* the reader checked it is JSON-safe */
    return AB_OK;
}

static ab_status_t any_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    const ab_val_t *v = *AB_CFLD(const ab_val_t *, base, f->off);
    if (!v)
        return ab__cc_fail(c, c->bad, "%s is missing", ab__cc_field(c));
    if (ab__val_pack(&c->pk, v) != AB_OK)
        return ab__cc_fail(c, AB_NOMEM, "out of memory encoding %s", ab__cc_field(c));
    return AB_OK;
}

static bool any_has(const ab_fspec_t *f, const char *base)
{
    return *AB_CFLD(const ab_val_t *, base, f->off) != NULL;
}

static bool any_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    const ab_val_t *x = *AB_CFLD(const ab_val_t *, a, f->off);
    const ab_val_t *y = *AB_CFLD(const ab_val_t *, b, f->off);
    return (!x || !y) ? x == y : ab_val_equal(x, y);
}

const ab_ftype_t ab__ft_any = {any_dec, any_enc, any_has, any_eq};

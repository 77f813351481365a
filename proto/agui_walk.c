/*
 * agui_walk.c - the generic schema walker behind ab_agui_validate().
 *
 * Checks one map against an ab__schema_t (agui_internal.h) in a single pass
 * over its pairs: each key is looked up in the schema's field table (length
 * first, then memcmp; lengths are precomputed), its value is checked by kind,
 * and a bitmask of the fields seen finds missing required ones at the end.
 *
 * Invariants:
 *  1. No allocation and no strlen on the success path. JSON pointers are
 *     rendered from the chain of ab__path_t stack frames only when an error
 *     or a warning is reported.
 *  2. Recursion follows the schema, never the data: opaque JSON (state,
 *     rawEvent, metadata, payloads) is not descended into, so the depth is
 *     bounded by the schema (event > input > messages > part > source).
 *  3. Within one object the first problem found wins; "missing required
 *     field" is reported after the pass over the pairs.
 *  4. Unknown material (a member a closed schema does not describe, an
 *     unknown union member) goes through ab__agui_unknown(): an error in
 *     strict mode, a warning in lenient mode. Malformed known values are
 *     errors in both modes.
 *  5. Info slots are written into the caller's scratch copy (c->info); the
 *     entry point hands it out only on AB_OK.
 */
#include "agui_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define SAFE_INT_MAX 9007199254740991LL /* 2^53 - 1 */

/* ---- reporting ---------------------------------------------------------- */

static void path_render(const ab__path_t *at, char *buf, size_t size)
{
    if (!at) {
        buf[0] = '\0';
        return;
    }
    path_render(at->up, buf, size);
    if (at->key)
        ab_path_push_key(buf, size, at->key, at->klen);
    else
        ab_path_push_index(buf, size, at->idx);
}

ab_status_t ab__agui_fail(ab__ctx_t *c, const ab__path_t *at, const char *fmt, ...)
{
    if (c->err && c->err->code == AB_OK) {
        char path[AB_ERROR_FIELD_MAX];
        path_render(at, path, sizeof(path));
        va_list ap;
        va_start(ap, fmt);
        ab_error_vset(c->err, AB_INVALID_EVENT, path, fmt, ap);
        va_end(ap);
    }
    return AB_INVALID_EVENT;
}

ab_status_t ab__agui_unknown(ab__ctx_t *c, const ab__path_t *at, const char *fmt, ...)
{
    char msg[AB_ERROR_MESSAGE_MAX];
    char path[AB_ERROR_FIELD_MAX];
    bool report = c->strict ? (c->err && c->err->code == AB_OK) : c->warn != NULL;
    if (!report)
        return c->strict ? AB_INVALID_EVENT : AB_OK;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    path_render(at, path, sizeof(path));
    if (c->strict)
        return ab_error_set(c->err, AB_INVALID_EVENT, path, "%s", msg);
    c->warn(c->ud, path, msg);
    return AB_OK;
}

/* "expected string, got integer" */
static ab_status_t fail_type(ab__ctx_t *c, const ab__path_t *at, const char *want,
                             const ab_val_t *v)
{
    return ab__agui_fail(c, at, "expected %s, got %s", want, ab_val_type_name(v->type));
}

/* Copy a string view or a value pointer into the info slot of a field. */
static void fill_slot(ab__ctx_t *c, const ab__field_t *f, const ab_val_t *v)
{
    char *base = (char *)c->info + f->slot;
    if (f->flags & AB__F_VAL_SLOT) {
        const ab_val_t *p = v;
        memcpy(base, &p, sizeof(p));
    } else {
        ab_str_t s = {v->u.s, v->len};
        memcpy(base, &s, sizeof(s));
    }
}

/* ---- leaves ------------------------------------------------------------- */

static bool is_pointer(const char *s, size_t len)
{
    if (len == 0)
        return true;
    if (s[0] != '/')
        return false;
    for (size_t i = 1; i < len; i++) {
        if (s[i] != '~')
            continue;
        if (i + 1 >= len || (s[i + 1] != '0' && s[i + 1] != '1'))
            return false;
        i++;
    }
    return true;
}

/* Index of the string @p v in @p set, or -1. */
static int enum_find(const ab__enum_t *set, const ab_val_t *v)
{
    for (int i = 0; i < set->n; i++)
        if (set->names[i].len == v->len && memcmp(set->names[i].s, v->u.s, v->len) == 0)
            return i;
    return -1;
}

/* Quote at most 64 bytes of a string value for a message. */
#define QUOTE_MAX 64
#define QLEN(v)   ((int)((v)->len < QUOTE_MAX ? (v)->len : QUOTE_MAX))

static ab_status_t check_enum(ab__ctx_t *c, const ab__field_t *f, const ab_val_t *v,
                              const ab__path_t *at)
{
    const ab__enum_t *set = f->aux;
    if (v->type != AB_VAL_STR)
        return fail_type(c, at, "string", v);
    if (enum_find(set, v) >= 0)
        return AB_OK;
    if (f->kind == AB__K_OPEN_ENUM)
        return ab__agui_unknown(c, at, "unknown %s \"%.*s\" (known: %s)", f->name, QLEN(v), v->u.s,
                                set->list);
    if (set->n == 1)
        return ab__agui_fail(c, at, "%s must be \"%s\"", f->name, set->list);
    return ab__agui_fail(c, at, "%s must be one of %s", f->name, set->list);
}

/*
 * An integer field: JSON Schema's "integer" is any number whose fraction is
 * zero, so a float such as 1767225600000.0 counts (docs/VALIDATION.md D1);
 * 1.5 does not. The range check is on the value, whatever its type.
 */
static ab_status_t check_int(ab__ctx_t *c, const ab__field_t *f, const ab_val_t *v,
                             const ab__path_t *at)
{
    bool low = false, high = false; /* below the minimum, above the maximum */
    int64_t min = f->kind == AB__K_COUNT ? 0 : -SAFE_INT_MAX;
    if (v->type == AB_VAL_INT) {
        low = v->u.i < min;
        high = v->u.i > SAFE_INT_MAX;
    } else if (v->type == AB_VAL_UINT) {
        high = true;
    } else if (v->type == AB_VAL_FLOAT && v->u.f == trunc(v->u.f)) {
        low = v->u.f < (double)min;
        high = v->u.f > (double)SAFE_INT_MAX;
    } else {
        return fail_type(c, at, "integer", v);
    }
    if (!low && !high)
        return AB_OK;
    if (f->kind == AB__K_COUNT)
        return ab__agui_fail(c, at, "%s must be an integer from 0 to 2^53-1", f->name);
    return ab__agui_fail(c, at, "%s must be an integer within +-(2^53-1)", f->name);
}

static ab_status_t check_str_list(ab__ctx_t *c, const ab_val_t *v, const ab__path_t *at)
{
    if (v->type != AB_VAL_ARRAY)
        return fail_type(c, at, "array", v);
    for (uint32_t i = 0; i < v->len; i++) {
        if (v->u.items[i].type != AB_VAL_STR) {
            ab__path_t here = {at, NULL, 0, i};
            return fail_type(c, &here, "string", &v->u.items[i]);
        }
    }
    return AB_OK;
}

/* ---- composites --------------------------------------------------------- */

/* Find the discriminator of @p u in @p m and check the matching variant. */
static ab_status_t check_union(ab__ctx_t *c, const ab_val_t *m, const ab__union_t *u,
                               const ab__path_t *at)
{
    if (m->type != AB_VAL_MAP)
        return fail_type(c, at, "object", m);
    const ab_val_t *d = NULL;
    ab__path_t dpath = {at, u->key.s, u->key.len, 0};
    for (uint32_t i = 0; i < m->len && !d; i++)
        if (m->u.pairs[i].klen == u->key.len &&
            memcmp(m->u.pairs[i].key, u->key.s, u->key.len) == 0)
            d = &m->u.pairs[i].val;
    if (!d)
        return ab__agui_fail(c, &dpath, "missing required field");
    if (d->type != AB_VAL_STR)
        return fail_type(c, &dpath, "string", d);
    int k = enum_find(u->set, d);
    if (u->outcomes)
        c->info->outcome = k >= 0 ? u->outcomes[k] : AB_OUTCOME_UNKNOWN;
    if (k >= 0)
        return ab__agui_check_object(c, m, u->variants[k], at);
    if (u->closed)
        return ab__agui_fail(c, &dpath, "%s must be one of %s", u->key.s, u->set->list);
    return ab__agui_unknown(c, &dpath, "unknown %s \"%.*s\" (known: %s)", u->what, QLEN(d), d->u.s,
                            u->set->list);
}

/* An array whose items are objects of one schema or one union. */
static ab_status_t check_list(ab__ctx_t *c, const ab__field_t *f, const ab_val_t *v,
                              const ab__path_t *at)
{
    if (v->type != AB_VAL_ARRAY)
        return fail_type(c, at, f->kind == AB__K_CONTENT ? "string or array" : "array", v);
    if ((f->flags & AB__F_NONEMPTY) && v->len == 0)
        return ab__agui_fail(c, at, "%s must have at least one item", f->name);
    ab__path_t here = {at, NULL, 0, 0};
    for (uint32_t i = 0; i < v->len; i++) {
        here.idx = i;
        ab_status_t rc = f->kind == AB__K_LIST
                             ? ab__agui_check_object(c, &v->u.items[i], f->aux, &here)
                             : check_union(c, &v->u.items[i], f->aux, &here);
        if (rc != AB_OK)
            return rc;
    }
    return AB_OK;
}

static ab_status_t check_value(ab__ctx_t *c, const ab__field_t *f, const ab_val_t *v,
                               const ab__path_t *at)
{
    switch ((ab__kind_t)f->kind) {
    case AB__K_SKIP:
    case AB__K_ANY:
    case AB__K_ANY_NN: return AB_OK; /* null was handled by the caller */
    case AB__K_STR: return v->type == AB_VAL_STR ? AB_OK : fail_type(c, at, "string", v);
    case AB__K_BOOL: return v->type == AB_VAL_BOOL ? AB_OK : fail_type(c, at, "boolean", v);
    case AB__K_MAP: return v->type == AB_VAL_MAP ? AB_OK : fail_type(c, at, "object", v);
    case AB__K_INT53:
    case AB__K_COUNT: return check_int(c, f, v, at);
    case AB__K_PTR:
        if (v->type != AB_VAL_STR)
            return fail_type(c, at, "string", v);
        if (!is_pointer(v->u.s, v->len))
            return ab__agui_fail(c, at,
                                 "%s is not a JSON pointer (empty, or '/'-prefixed tokens with "
                                 "'~' escaped as ~0 or ~1)",
                                 f->name);
        return AB_OK;
    case AB__K_ENUM:
    case AB__K_OPEN_ENUM: return check_enum(c, f, v, at);
    case AB__K_STR_LIST: return check_str_list(c, v, at);
    case AB__K_OBJ: return ab__agui_check_object(c, v, f->aux, at);
    case AB__K_UNION: return check_union(c, v, f->aux, at);
    case AB__K_CONTENT:
        if (v->type == AB_VAL_STR)
            return AB_OK;
        return check_list(c, f, v, at);
    case AB__K_LIST:
    case AB__K_UNION_LIST: return check_list(c, f, v, at);
    }
    return ab__agui_fail(c, at, "internal: unknown field kind");
}

/* Check one described member: "absent, never null", then its kind. */
static ab_status_t check_field(ab__ctx_t *c, const ab__field_t *f, const ab_val_t *v,
                               const ab__path_t *at)
{
    if (v->type == AB_VAL_NULL && f->kind != AB__K_ANY) {
        if (!(f->flags & AB__F_REQ))
            return ab__agui_fail(c, at, "null is not allowed for an absent optional field");
        if (f->kind == AB__K_ANY_NN)
            return ab__agui_fail(c, at, "null is not allowed for %s", f->name);
    }
    ab_status_t rc = check_value(c, f, v, at);
    if (rc == AB_OK && f->slot)
        fill_slot(c, f, v);
    return rc;
}

static int field_find(const ab__schema_t *s, const char *key, uint32_t klen)
{
    for (int i = 0; i < s->n; i++) {
        const ab__field_t *f = &s->fields[i];
        if (f->len == klen && memcmp(f->name, key, klen) == 0)
            return i;
    }
    return -1;
}

ab_status_t ab__agui_check_object(ab__ctx_t *c, const ab_val_t *m, const ab__schema_t *s,
                                  const ab__path_t *at)
{
    if (m->type != AB_VAL_MAP)
        return fail_type(c, at, "object", m);
    uint64_t seen = 0;
    ab__path_t here = {at, NULL, 0, 0};
    for (uint32_t i = 0; i < m->len; i++) {
        const ab_kv_t *kv = &m->u.pairs[i];
        here.key = kv->key;
        here.klen = kv->klen;
        int k = field_find(s, kv->key, kv->klen);
        ab_status_t rc = AB_OK;
        if (k >= 0) {
            seen |= 1ull << k;
            rc = check_field(c, &s->fields[k], &kv->val, &here);
        } else if (!s->open) {
            rc = ab__agui_unknown(c, &here, "unknown field");
        }
        if (rc != AB_OK)
            return rc;
    }
    unsigned need = AB__F_REQ | (c->strict ? AB__F_REQ_STRICT : 0u);
    for (int k = 0; k < s->n; k++) {
        const ab__field_t *f = &s->fields[k];
        if ((f->flags & need) && !(seen & (1ull << k))) {
            here.key = f->name;
            here.klen = f->len;
            if (f->flags & AB__F_REQ)
                return ab__agui_fail(c, &here, "missing required field");
            return ab__agui_fail(
                c, &here, "missing %s: a 1.0 producer must declare it (strict mode)", f->name);
        }
    }
    return AB_OK;
}

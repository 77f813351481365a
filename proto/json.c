/*
 * json.c - JSON bridge (see agentbus/json.h).
 *
 * Invariants:
 *  1. JSON -> msgpack never produces a value the strict reader would refuse
 *     (except for the size limit, checked here too): keys are unique strings,
 *     integers fit int64, reals are finite.
 *  2. msgpack -> JSON is lossless: integers (AB_VAL_INT and AB_VAL_UINT) are
 *     printed exactly, a float with the fewest digits (15, 16 or 17) that
 *     read back to the identical double.
 */
#include "agentbus/json.h"
#include "alloc_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- JSON -> msgpack ---------------------------------------------------- */

struct j2m {
    msgpack_packer pk;
    uint32_t max_depth;
    ab_status_t bad;
    ab_error_t *err;
    char path[AB_ERROR_FIELD_MAX];
};

static ab_status_t j2m_value(struct j2m *c, json_t *j, uint32_t depth);

static ab_status_t j2m_object(struct j2m *c, json_t *j, uint32_t depth)
{
    if (msgpack_pack_map(&c->pk, json_object_size(j)) != 0)
        return AB_NOMEM;
    const char *key;
    json_t *v;
    size_t plen = strlen(c->path);
    void *iter = json_object_iter(j);
    for (; iter; iter = json_object_iter_next(j, iter)) {
        key = json_object_iter_key(iter);
        v = json_object_iter_value(iter);
        size_t klen = json_object_iter_key_len(iter);
        if (msgpack_pack_str_with_body(&c->pk, key, klen) != 0)
            return AB_NOMEM;
        ab_path_push_key(c->path, sizeof(c->path), key, klen);
        ab_status_t rc = j2m_value(c, v, depth + 1);
        if (rc != AB_OK)
            return rc;
        c->path[plen] = '\0';
    }
    return AB_OK;
}

static ab_status_t j2m_array(struct j2m *c, json_t *j, uint32_t depth)
{
    size_t n = json_array_size(j);
    if (msgpack_pack_array(&c->pk, n) != 0)
        return AB_NOMEM;
    size_t plen = strlen(c->path);
    for (size_t i = 0; i < n; i++) {
        ab_path_push_index(c->path, sizeof(c->path), i);
        ab_status_t rc = j2m_value(c, json_array_get(j, i), depth + 1);
        if (rc != AB_OK)
            return rc;
        c->path[plen] = '\0';
    }
    return AB_OK;
}

static ab_status_t j2m_value(struct j2m *c, json_t *j, uint32_t depth)
{
    if (depth > c->max_depth)
        return ab_error_set(c->err, AB_TOO_LARGE, c->path, "nesting deeper than the limit of %u",
                            c->max_depth);
    int rc = 0;
    switch (json_typeof(j)) {
    case JSON_OBJECT: return j2m_object(c, j, depth);
    case JSON_ARRAY: return j2m_array(c, j, depth);
    case JSON_STRING:
        rc = msgpack_pack_str_with_body(&c->pk, json_string_value(j), json_string_length(j));
        break;
    case JSON_INTEGER: rc = msgpack_pack_int64(&c->pk, (int64_t)json_integer_value(j)); break;
    case JSON_REAL: rc = msgpack_pack_double(&c->pk, json_real_value(j)); break;
    case JSON_TRUE: rc = msgpack_pack_true(&c->pk); break;
    case JSON_FALSE: rc = msgpack_pack_false(&c->pk); break;
    case JSON_NULL: rc = msgpack_pack_nil(&c->pk); break;
    }
    return rc == 0 ? AB_OK : ab_error_set(c->err, AB_NOMEM, c->path, "out of memory");
}

ab_status_t ab_json_to_msgpack(const char *text, size_t len, uint32_t max_depth, uint32_t max_bytes,
                               ab_status_t bad_code, ab_buf_t *out, ab_error_t *err)
{
    json_error_t jerr;
    unsigned long failures = ab_alloc_failures();
    json_t *root =
        json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (ab_alloc_failures() != failures) {
        json_decref(root);
        return ab_error_set(err, AB_NOMEM, "", "out of memory parsing JSON");
    }
    if (!root)
        return ab_error_set(err, bad_code, "", "invalid JSON at line %d column %d: %s", jerr.line,
                            jerr.column, jerr.text);
    size_t start = out->len;
    struct j2m c = {.max_depth = max_depth, .bad = bad_code, .err = err};
    msgpack_packer_init(&c.pk, out, ab_buf_msgpack_write);
    ab_status_t rc = j2m_value(&c, root, 1);
    json_decref(root);
    if (rc == AB_NOMEM)
        ab_error_set(err, AB_NOMEM, "", "out of memory encoding JSON");
    if (rc == AB_OK && out->len - start > max_bytes) {
        ab_error_set(err, AB_TOO_LARGE, "", "encoded value of %zu bytes exceeds the limit of %u",
                     out->len - start, max_bytes);
        ab_error_detail_int(err, "limit", max_bytes);
        rc = AB_TOO_LARGE;
    }
    if (rc != AB_OK)
        out->len = start;
    return rc;
}

/* ---- msgpack -> JSON ---------------------------------------------------- */

ab_status_t ab_json_quote(ab_buf_t *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    if (ab_buf_reserve(out, len + 2) != AB_OK)
        return AB_NOMEM;
    out->data[out->len++] = '"';
    size_t run = 0; /* start of the pending unescaped run */
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\')
            continue;
        if (ab_buf_append(out, s + run, i - run) != AB_OK)
            return AB_NOMEM;
        char esc[6] = {'\\', 0};
        size_t n = 2;
        switch (ch) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[ch >> 4];
            esc[5] = hex[ch & 15];
            n = 6;
        }
        if (ab_buf_append(out, esc, n) != AB_OK)
            return AB_NOMEM;
        run = i + 1;
    }
    if (ab_buf_append(out, s + run, len - run) != AB_OK)
        return AB_NOMEM;
    return ab_buf_append(out, "\"", 1);
}

static ab_status_t emit_double(ab_buf_t *out, double d)
{
    char tmp[40];
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(tmp, sizeof(tmp) - 2, "%.*g", prec, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    if (!strpbrk(tmp, ".eEn")) { /* keep it a float when read back */
        tmp[n++] = '.';
        tmp[n++] = '0';
        tmp[n] = '\0';
    }
    return ab_buf_append(out, tmp, (size_t)n);
}

ab_status_t ab_val_to_json(const ab_val_t *v, ab_buf_t *out)
{
    char tmp[32];
    switch (v->type) {
    case AB_VAL_NULL: return ab_buf_append(out, "null", 4);
    case AB_VAL_BOOL:
        return v->u.b ? ab_buf_append(out, "true", 4) : ab_buf_append(out, "false", 5);
    case AB_VAL_INT: {
        int n = snprintf(tmp, sizeof(tmp), "%lld", (long long)v->u.i);
        return ab_buf_append(out, tmp, (size_t)n);
    }
    case AB_VAL_UINT: {
        int n = snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)v->u.u);
        return ab_buf_append(out, tmp, (size_t)n);
    }
    case AB_VAL_FLOAT: return emit_double(out, v->u.f);
    case AB_VAL_STR: return ab_json_quote(out, v->u.s, v->len);
    case AB_VAL_ARRAY:
        if (ab_buf_append(out, "[", 1) != AB_OK)
            return AB_NOMEM;
        for (uint32_t i = 0; i < v->len; i++) {
            if ((i && ab_buf_append(out, ",", 1) != AB_OK) ||
                ab_val_to_json(&v->u.items[i], out) != AB_OK)
                return AB_NOMEM;
        }
        return ab_buf_append(out, "]", 1);
    case AB_VAL_MAP:
        if (ab_buf_append(out, "{", 1) != AB_OK)
            return AB_NOMEM;
        for (uint32_t i = 0; i < v->len; i++) {
            const ab_kv_t *kv = &v->u.pairs[i];
            if ((i && ab_buf_append(out, ",", 1) != AB_OK) ||
                ab_json_quote(out, kv->key, kv->klen) != AB_OK ||
                ab_buf_append(out, ":", 1) != AB_OK || ab_val_to_json(&kv->val, out) != AB_OK)
                return AB_NOMEM;
        }
        return ab_buf_append(out, "}", 1);
    }
    return AB_INTERNAL;
}

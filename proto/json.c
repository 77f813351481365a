/*
 * json.c - the output half of the JSON bridge (see agentbus/json.h): a value
 * tree to compact JSON text. The input half, JSON text to msgpack, is
 * json_parse.c.
 *
 * Invariants:
 *  1. msgpack -> JSON is lossless: integers (AB_VAL_INT and AB_VAL_UINT) are
 *     printed exactly, and a float with the fewest digits (15, 16 or 17)
 *     that read back to the identical double, always with a '.' or an
 *     exponent so that it reads back as a float.
 *  2. Keys keep their stored order; only '"', '\' and control characters
 *     are escaped in strings.
 */
#include "agentbus/json.h"

#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* JSON's decimal point is '.', whatever LC_NUMERIC an embedding program set:
 * put it back in place of the locale's (which may be several bytes). */
static int c_decimal_point(char *s, int n)
{
    const char *dp = localeconv()->decimal_point;
    size_t dl = strlen(dp);
    char *at = dl && strcmp(dp, ".") != 0 ? strstr(s, dp) : NULL;
    if (!at)
        return n;
    *at = '.';
    memmove(at + 1, at + dl, strlen(at + dl) + 1);
    return n - (int)(dl - 1);
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
    n = c_decimal_point(tmp, n);
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

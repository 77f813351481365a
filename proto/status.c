/*
 * status.c - the status table and the caller-owned error struct.
 *
 * Invariants:
 *  1. ab_status_name() and the AB_STATUS_MAP are the only source of wire
 *     names; nothing else spells them.
 *  2. An error keeps its first code: later ab_error_set() calls do nothing,
 *     so the innermost cause (the precise field) is what the caller sees.
 *  3. No allocation: every string is truncated into fixed buffers.
 */
#include "agentbus/status.h"

#include "ab_common.h"

#include <stdio.h>
#include <string.h>

struct status_row {
    const char *name;
    const char *desc;
    bool retryable;
};

static const struct status_row status_rows[AB_STATUS_COUNT_] = {
#define AB_STATUS_ROW_(name, wire, retry, desc) {wire, desc, retry},
    AB_STATUS_MAP(AB_STATUS_ROW_)
#undef AB_STATUS_ROW_
};

const char *ab_status_name(ab_status_t s)
{
    if ((unsigned)s >= AB_STATUS_COUNT_)
        return "unknown";
    return status_rows[s].name;
}

const char *ab_status_str(ab_status_t s)
{
    if ((unsigned)s >= AB_STATUS_COUNT_)
        return "unknown status";
    return status_rows[s].desc;
}

bool ab_status_retryable(ab_status_t s)
{
    if ((unsigned)s >= AB_STATUS_COUNT_)
        return false;
    return status_rows[s].retryable;
}

ab_status_t ab_status_from_name(const char *name, size_t len, ab_status_t *out)
{
    for (int i = 0; i < AB_STATUS_COUNT_; i++) {
        const char *n = status_rows[i].name;
        if (strlen(n) == len && memcmp(n, name, len) == 0) {
            *out = (ab_status_t)i;
            return AB_OK;
        }
    }
    return AB_NOT_FOUND;
}

void ab_error_clear(ab_error_t *err)
{
    if (err)
        memset(err, 0, sizeof(*err));
}

_Static_assert(sizeof(ab_error_t) <= 360, "ab_error_t stays small (status.h)");

/* Cut @p s (NUL-terminated, @p n bytes, what a truncation kept) back to valid UTF-8. */
static void utf8_cut(char *s, size_t n)
{
    s[ab__utf8_cut(s, n, n)] = '\0';
}

static void copy_trunc(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);
    bool cut = n >= size;
    if (cut)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
    if (cut)
        utf8_cut(dst, n);
}

/* A field path that does not fit is cut at its last whole segment: what is
 * left still names a value, an ancestor of the one meant. */
static void copy_field(char *dst, const char *src)
{
    size_t n = strlen(src);
    if (n < AB_ERROR_FIELD_MAX) {
        memcpy(dst, src, n + 1);
        return;
    }
    n = AB_ERROR_FIELD_MAX - 1;
    while (n > 0 && src[n] != '/')
        n--;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

ab_status_t ab_error_vset(ab_error_t *err, ab_status_t code, const char *field, const char *fmt,
                          va_list ap)
{
    if (!err || err->code != AB_OK || code == AB_OK)
        return code;
    err->code = code;
    err->retryable = ab_status_retryable(code);
    copy_field(err->field, field ? field : "");
    if (fmt) {
        int n = vsnprintf(err->message, sizeof(err->message), fmt, ap);
        if (n >= (int)sizeof(err->message))
            utf8_cut(err->message, sizeof(err->message) - 1);
    } else
        copy_trunc(err->message, sizeof(err->message), ab_status_str(code));
    return code;
}

ab_status_t ab_error_set(ab_error_t *err, ab_status_t code, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ab_status_t rc = ab_error_vset(err, code, field, fmt, ap);
    va_end(ap);
    return rc;
}

static ab_error_detail_t *detail_slot(ab_error_t *err, const char *key)
{
    if (!err || err->ndetails >= AB_ERROR_DETAILS_MAX)
        return NULL;
    ab_error_detail_t *d = &err->details[err->ndetails++];
    memset(d, 0, sizeof(*d));
    copy_trunc(d->key, sizeof(d->key), key);
    return d;
}

void ab_error_detail_int(ab_error_t *err, const char *key, int64_t value)
{
    ab_error_detail_t *d = detail_slot(err, key);
    if (d) {
        d->kind = AB_DETAIL_INT;
        d->i = value;
    }
}

void ab_error_detail_str(ab_error_t *err, const char *key, const char *value)
{
    ab_error_detail_t *d = detail_slot(err, key);
    if (d) {
        d->kind = AB_DETAIL_STR;
        copy_trunc(d->s, sizeof(d->s), value);
    }
}

const ab_error_detail_t *ab_error_detail(const ab_error_t *err, const char *key)
{
    if (!err)
        return NULL;
    for (int i = 0; i < err->ndetails; i++)
        if (strcmp(err->details[i].key, key) == 0)
            return &err->details[i];
    return NULL;
}

void ab_error_prefix_field(ab_error_t *err, const char *prefix)
{
    if (!err || !prefix || !*prefix)
        return;
    char tmp[2 * AB_ERROR_FIELD_MAX];
    snprintf(tmp, sizeof(tmp), "%s%s", prefix, err->field);
    copy_field(err->field, tmp);
}

const char *ab_error_format(const ab_error_t *err, char *buf, size_t size)
{
    if (!err || err->code == AB_OK) {
        snprintf(buf, size, "ok");
        return buf;
    }
    if (err->field[0])
        snprintf(buf, size, "%s: %s (at %s)", ab_status_name(err->code), err->message, err->field);
    else
        snprintf(buf, size, "%s: %s", ab_status_name(err->code), err->message);
    return buf;
}

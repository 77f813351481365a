/*
 * seq_resume.c - the resume rules: a top-level RUN_STARTED carrying `input`
 * against its thread's latest interrupted run (seq_thread.c). docs/SEQUENCER.md section
 * 2, rule 7, and docs/PROTOCOL.md section 7.4.2 give the rules and errors.
 *
 * The thread has pending interrupts while those of its latest interrupted
 * run are not answered (seq_thread.c): the ids of that RUN_FINISHED's
 * outcome.interrupts, each with its expiresAt. Then input.resume must name each pending id
 * exactly once, no other id, and resolve an expired one only as cancelled;
 * an input without resume is refused. With nothing pending, a resume entry
 * names an id that is not pending (an empty resume list names none).
 *
 * Invariants:
 *  1. The interrupts are read from the RUN_FINISHED itself: from the group
 *     when it is staged there, else from the store (one event_bytes and one
 *     decode into s->doc, which is reset afterwards). Nothing about them is
 *     cached.
 *  2. Matching sorts the interrupt ids once (a transient 32 bytes per
 *     interrupt) and looks each entry up by binary search, so a resume costs
 *     O((n + m) log n) for n interrupts and m entries, whatever their sizes.
 *  3. The first entry that breaks a rule, in list order, decides the error;
 *     a missing interrupt is reported only when every entry is fine, and it
 *     is the missing one that comes first in outcome.interrupts.
 *  4. An expiresAt that is not an RFC 3339 date-time is no deadline the
 *     broker can read: that interrupt does not expire here.
 */
#include "ab_common.h"
#include "seq_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- stored events ------------------------------------------------------------ */

/* Bytes of @p s (length @p len) that fit in @p max without cutting a UTF-8 character. */
static int utf8_len(const char *s, size_t len, size_t max)
{
    if (len <= max)
        return (int)len;
    size_t n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--; /* s[n] continues a character: cut before it starts */
    return (int)n;
}

static ab_status_t decode(ab_seq_t *s, ab_event_t *ev, ab_error_t *e)
{
    ab_limits_t lim = ab__limits_stored();
    return ab_event_decode(s->doc, s->bytes.data, s->bytes.len, &lim, ev, e);
}

static ab_status_t stored_bytes(ab_seq_t *s, ab_str_t thread, ab_str_t run, uint64_t seq,
                                uint64_t *pos, ab_error_t *err)
{
    ab_status_t rc = s->plugin->event_bytes(s->db, thread, run, seq, &s->bytes, pos, err);
    if (rc != AB_NOT_FOUND)
        return rc;
    ab_error_clear(err);
    return ab_error_set(err, AB_CORRUPT, "seq",
                        "seq %llu of run '%.*s' is committed but not stored",
                        (unsigned long long)seq, utf8_len(run.ptr, run.len, 64), run.ptr);
}

static ab_status_t not_readable(ab_error_t *err, const ab_error_t *e, ab_str_t run, uint64_t seq)
{
    return ab_error_set(err, e->code == AB_NOMEM ? AB_NOMEM : AB_CORRUPT, "seq",
                        "stored event seq %llu of run '%.*s' fails the re-check: %s",
                        (unsigned long long)seq, utf8_len(run.ptr, run.len, 64), run.ptr,
                        e->message);
}

ab_status_t ab__seq_stored(ab_seq_t *s, ab_str_t thread, ab_str_t run, uint64_t seq, uint64_t *pos,
                           ab_agui_type_t *type, bool *input, ab_error_t *err)
{
    ab_status_t rc = stored_bytes(s, thread, run, seq, pos, err);
    if (rc != AB_OK || !type)
        return rc;
    ab_event_t ev;
    ab_error_t e = AB_ERROR_INIT;
    rc = decode(s, &ev, &e);
    if (rc == AB_OK) {
        const ab_val_t *tv = ab_val_get(ev.body, "type");
        *type =
            tv && tv->type == AB_VAL_STR ? ab_agui_type_from(tv->u.s, tv->len) : AB_AGUI_UNKNOWN;
        if (input)
            *input = ab_val_get(ev.body, "input") != NULL;
    }
    ab_doc_reset(s->doc);
    return rc == AB_OK ? AB_OK : not_readable(err, &e, run, seq);
}

/* The interrupts of the latest interrupted run's RUN_FINISHED (invariant 1); the doc holds them if
 * read. */
static ab_status_t interrupts_of(ab_seq_t *s, const ab__seq_thr_t *t, const ab_val_t **out,
                                 ab_error_t *err)
{
    if (t->fin_gen == s->gen) {
        *out = s->pend_items[t->fin_idx]->info->interrupts;
        return AB_OK;
    }
    ab_str_t th = {t->thread, t->thread_len}, run = {t->run, t->run_len};
    uint64_t pos = 0;
    ab_event_t ev;
    ab_agui_info_t info;
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t rc = stored_bytes(s, th, run, t->fin_seq, &pos, err);
    if (rc != AB_OK)
        return rc;
    if (decode(s, &ev, &e) != AB_OK ||
        ab_agui_validate(ev.body, AB_AGUI_STRICT, NULL, NULL, &info, &e) != AB_OK)
        return not_readable(err, &e, run, t->fin_seq);
    if (info.type != AB_AGUI_RUN_FINISHED || !info.interrupts) {
        ab_error_set(&e, AB_CORRUPT, NULL, "not a RUN_FINISHED with interrupts");
        return not_readable(err, &e, run, t->fin_seq);
    }
    *out = info.interrupts;
    return AB_OK;
}

/* ---- expiresAt ---------------------------------------------------------------- */

static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* @p n digits at @p p as a number, or -1. */
static int digits(const char *p, size_t n)
{
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

/* RFC 3339 date-time (YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)) as microseconds since 1970. */
static bool rfc3339_us(const char *p, size_t n, int64_t *us)
{
    if (n < 20 || p[4] != '-' || p[7] != '-' || (p[10] != 'T' && p[10] != 't' && p[10] != ' ') ||
        p[13] != ':' || p[16] != ':')
        return false;
    int y = digits(p, 4), mo = digits(p + 5, 2), d = digits(p + 8, 2), h = digits(p + 11, 2),
        mi = digits(p + 14, 2), sec = digits(p + 17, 2);
    if (y < 0 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 ||
        sec < 0 || sec > 60)
        return false;
    size_t i = 19;
    int64_t frac = 0, scale = 1000000;
    if (p[i] == '.') {
        size_t start = ++i;
        for (; i < n && p[i] >= '0' && p[i] <= '9'; i++)
            if (scale > 1) {
                scale /= 10;
                frac += (p[i] - '0') * scale;
            }
        if (i == start)
            return false;
    }
    int64_t off = 0;
    if (i + 1 == n && (p[i] == 'Z' || p[i] == 'z')) {
        off = 0;
    } else if (i + 6 == n && (p[i] == '+' || p[i] == '-') && p[i + 3] == ':') {
        int oh = digits(p + i + 1, 2), om = digits(p + i + 4, 2);
        if (oh < 0 || oh > 23 || om < 0 || om > 59)
            return false;
        off = (p[i] == '-' ? -1 : 1) * (int64_t)(oh * 60 + om) * 60;
    } else {
        return false;
    }
    int64_t t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - off;
    *us = t * 1000000 + frac;
    return true;
}

static bool expired(const ab_val_t *at, int64_t now_us)
{
    int64_t us = 0;
    return at && at->type == AB_VAL_STR && rfc3339_us(at->u.s, at->len, &us) && us <= now_us;
}

/* ---- matching ------------------------------------------------------------------ */

typedef struct pint {
    const char *id;
    uint32_t len;
    uint32_t idx;            /**< position in outcome.interrupts */
    int64_t seen;            /**< resume entry that answered it, -1 = none */
    const ab_val_t *expires; /**< expiresAt or NULL */
} pint_t;

static int id_cmp(const char *a, size_t al, const char *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c ? c : (al > bl) - (al < bl);
}

static int pint_cmp(const void *x, const void *y)
{
    const pint_t *a = x, *b = y;
    int c = id_cmp(a->id, a->len, b->id, b->len);
    return c ? c : (a->idx > b->idx) - (a->idx < b->idx);
}

static pint_t *lookup(pint_t *p, size_t n, const ab_val_t *id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = id_cmp(p[mid].id, p[mid].len, id->u.s, id->len);
        if (c == 0)
            return &p[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Set the conflict error, with detail interruptId. */
static ab_status_t refuse(ab_error_t *err, const char *field, const char *id, size_t len,
                          const char *fmt, ...) AB_PRINTF(5, 6);
static ab_status_t refuse(ab_error_t *err, const char *field, const char *id, size_t len,
                          const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ab_error_vset(err, AB_CONFLICT, field, fmt, ap);
    va_end(ap);
    char d[AB_ERROR_DETAIL_STR_MAX];
    int n = utf8_len(id, len, sizeof(d) - 1);
    memcpy(d, id, (size_t)n);
    d[n] = '\0';
    ab_error_detail_str(err, "interruptId", d);
    return AB_CONFLICT;
}

#define ID(p, l) utf8_len(p, l, 40), p

static ab_status_t unknown_id(const ab__seq_thr_t *t, const ab_val_t *id, size_t j, bool pending,
                              const char *pre, ab_error_t *err)
{
    char field[AB_ERROR_FIELD_MAX];
    snprintf(field, sizeof(field), "%s/%zu/interruptId", pre, j);
    if (pending)
        return refuse(err, field, id->u.s, id->len,
                      "interrupt %.*s is not pending: run %.*s of thread %.*s did not raise it",
                      ID(id->u.s, id->len), ID(t->run, t->run_len), ID(t->thread, t->thread_len));
    if (!t->run_len)
        return refuse(err, field, id->u.s, id->len,
                      "resume on a run that continues nothing: interrupt %.*s is not pending "
                      "(thread %.*s has no interrupted run)",
                      ID(id->u.s, id->len), ID(t->thread, t->thread_len));
    return refuse(err, field, id->u.s, id->len,
                  "resume on a run that continues nothing: interrupt %.*s is not pending (the "
                  "interrupts of run %.*s were %s)",
                  ID(id->u.s, id->len), ID(t->run, t->run_len),
                  t->errored ? "ended by its RUN_ERROR" : "already answered");
}

/* Match each resume entry; AB_OK when all are fine (the missing ones are left unseen). */
static ab_status_t entries(ab_seq_t *s, const ab__seq_thr_t *t, pint_t *p, size_t n,
                           const ab_val_t *resume, const char *pre, ab_error_t *err)
{
    char field[AB_ERROR_FIELD_MAX];
    for (uint32_t j = 0; resume && j < resume->len; j++) {
        const ab_val_t *e = &resume->u.items[j];
        const ab_val_t *id = ab_val_get(e, "interruptId");
        pint_t *f = lookup(p, n, id);
        if (!f)
            return unknown_id(t, id, j, true, pre, err);
        if (f->seen >= 0) {
            snprintf(field, sizeof(field), "%s/%u/interruptId", pre, j);
            return refuse(err, field, f->id, f->len,
                          "interrupt %.*s is answered twice (first by input.resume/%lld)",
                          ID(f->id, f->len), (long long)f->seen);
        }
        f->seen = j;
        if (ab_val_str_eq(ab_val_get(e, "status"), "resolved") && expired(f->expires, s->now_us)) {
            snprintf(field, sizeof(field), "%s/%u/status", pre, j);
            return refuse(err, field, f->id, f->len,
                          "interrupt %.*s expired at %.*s: it can only be cancelled",
                          ID(f->id, f->len), ID(f->expires->u.s, f->expires->len));
        }
    }
    return AB_OK;
}

static ab_status_t cover(ab_seq_t *s, const ab__seq_thr_t *t, const ab_val_t *ints,
                         const ab_val_t *resume, const char *pre, ab_error_t *err)
{
    size_t n = ints->len;
    pint_t *p = malloc(n * sizeof(*p));
    if (!p)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory checking input.resume");
    for (uint32_t i = 0; i < n; i++) {
        const ab_val_t *id = ab_val_get(&ints->u.items[i], "id");
        p[i] = (pint_t){id->u.s, id->len, i, -1, ab_val_get(&ints->u.items[i], "expiresAt")};
    }
    qsort(p, n, sizeof(*p), pint_cmp);
    ab_status_t rc = entries(s, t, p, n, resume, pre, err);
    const pint_t *miss = NULL;
    for (size_t i = 0; rc == AB_OK && i < n; i++)
        if (p[i].seen < 0 && (!miss || p[i].idx < miss->idx))
            miss = &p[i];
    if (miss && !resume)
        rc = refuse(err, pre, miss->id, miss->len,
                    "input has no resume, but run %.*s ended with %zu pending interrupts (first "
                    "%.*s): answer each, resolved or cancelled",
                    ID(t->run, t->run_len), n, ID(miss->id, miss->len));
    else if (miss)
        rc = refuse(err, pre, miss->id, miss->len,
                    "input.resume does not answer interrupt %.*s of run %.*s (omission is not "
                    "abandonment: cancel it)",
                    ID(miss->id, miss->len), ID(t->run, t->run_len));
    free(p);
    return rc;
}

ab_status_t ab__seq_resume_check(ab_seq_t *s, const ab__seq_thr_t *t, const ab_seq_item_t *it,
                                 ab_error_t *err)
{
    const ab_val_t *resume = it->info->resume;
    if (!t->pending) {
        if (!resume || resume->len == 0)
            return AB_OK;
        return unknown_id(t, ab_val_get(&resume->u.items[0], "interruptId"), 0, false,
                          "event/input/resume", err);
    }
    const ab_val_t *ints = NULL;
    ab_status_t rc = interrupts_of(s, t, &ints, err);
    if (rc == AB_OK)
        rc = cover(s, t, ints, resume, "event/input/resume", err);
    ab_doc_reset(s->doc);
    return rc;
}

ab_status_t ab__seq_resume_probe(ab_seq_t *s, ab_str_t thread, ab_str_t run, const ab_val_t *resume,
                                 ab_error_t *err)
{
    ab__seq_thr_t *t = NULL;
    ab_status_t rc = ab__seq_thr_get(s, thread, &t, err);
    if (rc != AB_OK)
        return rc;
    if (!t->pending || t->run_len != run.len || memcmp(t->run, run.ptr, run.len) != 0) {
        if (t->pending)
            return ab_error_set(err, AB_CONFLICT, "run",
                                "run %.*s is not the thread's pending interrupted run (that is "
                                "run %.*s)",
                                ID(run.ptr, run.len), ID(t->run, t->run_len));
        return ab_error_set(err, AB_CONFLICT, "run",
                            "run %.*s has no pending interrupts: thread %.*s has nothing to resume",
                            ID(run.ptr, run.len), ID(t->thread, t->thread_len));
    }
    const ab_val_t *ints = NULL;
    rc = interrupts_of(s, t, &ints, err);
    if (rc == AB_OK)
        rc = cover(s, t, ints, resume, "resume", err);
    ab_doc_reset(s->doc);
    return rc;
}

/*
 * threads_cmd.c - the `threads` request (docs/PROTOCOL.md 7.19): the
 * command thread turns it into a job naming the prefixes the key may list
 * (ab__threads_job), and a replay reader answers it from its read-only
 * handle with the plugin's threads_list (ab__reader_threads).
 *
 * Invariants:
 *  1. Only threads the key may observe are read, so none other is ever
 *     named: the job's prefixes are the request's prefix intersected with
 *     each observe prefix of the key (an intersection of two prefixes is
 *     the longer one when one extends the other, else empty), or the
 *     request's prefix alone for a key that observes every thread (and
 *     without keys). The key's prefixes never extend one another
 *     (access.c), so these ranges are disjoint; sorted by bytes they list
 *     the threads in byte order one after the other.
 *  2. Pages are full: the reader asks the plugin for limit + 1 threads
 *     after the cursor, prefix by prefix in order, until it has them or the
 *     prefixes run out. `next` (the last listed id) is sent exactly when
 *     the extra one was found, so a walk ends on the first short page and
 *     never sends a page that is empty but for its cursor.
 *  3. Bounded work: at most AB__ACCESS_PREFIXES_MAX plugin calls, and
 *     limit + 1 threads (AB_THREADS_LIMIT_MAX + 1 at most, about 530 bytes
 *     each) held at once.
 *  4. Every job gets exactly one answer: threads_reply, `unsupported` (field
 *     op) when the plugin has no threads_list, or the plugin's error.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static bool starts_with(ab_str_t s, ab_str_t p)
{
    return s.len >= p.len && (p.len == 0 || memcmp(s.ptr, p.ptr, p.len) == 0);
}

static int by_bytes(const void *x, const void *y)
{
    const ab_str_t *a = x, *b = y;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n > 0 ? memcmp(a->ptr, b->ptr, n) : 0;
    return c != 0 ? c : (a->len > b->len) - (a->len < b->len);
}

/* The ranges of invariant 1 into @p out (room for AB__ACCESS_PREFIXES_MAX); @return how many. */
static size_t ranges(const ab__principal_t *who, ab_str_t q, ab_str_t *out)
{
    if (who == NULL || ab__access_may_all(who, AB__ROLE_OBSERVE)) {
        out[0] = q;
        return 1;
    }
    bool all;
    const char *const *pfx;
    const uint16_t *lens;
    size_t n, k = 0;
    ab__access_grant(who, AB__ROLE_OBSERVE, &all, &pfx, &lens, &n);
    for (size_t i = 0; i < n && k < AB__ACCESS_PREFIXES_MAX; i++) {
        ab_str_t p = {pfx[i], lens[i]};
        if (p.len > AB_ID_MAX_BYTES)
            continue; /* no id starts with it */
        if (starts_with(p, q)) {
            out[k++] = p;
        } else if (starts_with(q, p)) {
            out[0] = q; /* no other prefix can meet q (they do not extend p) */
            return 1;
        }
    }
    qsort(out, k, sizeof *out, by_bytes);
    return k;
}

bool ab__threads_job(ab_job_t *job, const ab__principal_t *who, const ab_threads_req_t *r)
{
    ab_str_t q = r->prefix.ptr ? r->prefix : (ab_str_t){"", 0};
    ab_str_t after = r->after.ptr ? r->after : (ab_str_t){"", 0};
    ab_str_t pf[AB__ACCESS_PREFIXES_MAX];
    size_t n = ranges(who, q, pf);
    size_t total = after.len + 1;
    for (size_t i = 0; i < n; i++)
        total += pf[i].len + 1;
    job->strings = malloc(total);
    job->pfx = calloc(n ? n : 1, sizeof *job->pfx);
    if (job->strings == NULL || job->pfx == NULL)
        return false;
    char *s = job->strings;
    memcpy(s, after.ptr, after.len);
    s[after.len] = '\0';
    job->thread = (ab_str_t){s, after.len};
    s += after.len + 1;
    for (size_t i = 0; i < n; i++) {
        memcpy(s, pf[i].ptr, pf[i].len);
        s[pf[i].len] = '\0';
        job->pfx[i] = (ab_str_t){s, pf[i].len};
        s += pf[i].len + 1;
    }
    job->npfx = (uint32_t)n;
    job->limit = r->limit ? r->limit : AB_THREADS_LIMIT_DEFAULT;
    return true;
}

typedef struct page {
    ab_thread_info_t *v;
    uint32_t n, cap;
} page_t;

static int keep(void *ud, const ab_thread_info_t *t)
{
    page_t *pg = ud;
    if (pg->n < pg->cap)
        pg->v[pg->n++] = *t;
    return pg->n >= pg->cap;
}

static ab_status_t answer(void *sock, ab_job_t *job, const page_t *pg, ab_error_t *e)
{
    uint32_t n = pg->n > job->limit ? job->limit : pg->n;
    ab_thread_entry_t *ents = calloc(n ? n : 1, sizeof *ents);
    if (ents == NULL)
        return ab_error_set(e, AB_NOMEM, "", "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        const ab_thread_info_t *t = &pg->v[i];
        ents[i] = (ab_thread_entry_t){.thread = {t->thread, strlen(t->thread)},
                                      .runs = t->runs,
                                      .active = t->runs_active > 0,
                                      .last_run = {t->last_run, strlen(t->last_run)},
                                      .last_pos = t->last_pos};
    }
    ab_msg_t m = {.op = AB_OP_THREADS_REPLY, .v = job->v, .cid = job->cid};
    m.u.threads_reply.threads = ents;
    m.u.threads_reply.nthreads = n;
    if (pg->n > job->limit) /* invariant 2 */
        m.u.threads_reply.next = ents[n - 1].thread;
    ab_status_t st = AB_OK;
    if (ab__reply_msg(sock, &job->identity, &m) != 0)
        st = ab_error_set(e, AB_INTERNAL, "", "cannot send the threads reply");
    free(ents);
    return st;
}

void ab__reader_threads(ab__shared_t *b, ab_plugin_db_t *db, void *sock, ab_job_t *job)
{
    const ab_plugin_t *p = b->plugin;
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t st = AB_OK;
    page_t pg = {NULL, 0, job->limit + 1};
    if (!ab_plugin_has(p, threads_list)) {
        st = ab_error_set(&e, AB_UNSUPPORTED, "op",
                          "the broker's persistence plugin (%s) cannot list threads", p->name);
        goto done;
    }
    pg.v = malloc(pg.cap * sizeof *pg.v);
    if (pg.v == NULL) {
        st = ab_error_set(&e, AB_NOMEM, "", "out of memory");
        goto done;
    }
    for (uint32_t i = 0; st == AB_OK && i < job->npfx && pg.n < pg.cap; i++) {
        uint32_t got = 0;
        st = p->threads_list(db, job->thread, job->pfx[i], pg.cap - pg.n, keep, &pg, &got, &e);
    }
    if (st == AB_OK)
        st = answer(sock, job, &pg, &e);
done:
    free(pg.v);
    if (st != AB_OK)
        ab__reply_error(sock, &job->identity, job->v, job->cid, &e);
}

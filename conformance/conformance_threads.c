/*
 * conformance_threads.c - the conformance check of the thread listing
 * (`threads`, PROTOCOL.md 7.19): where announced, three fresh threads under
 * a fresh prefix are listed in byte order a page at a time, with their
 * figures, and `next` exactly while more follow; where not, the request must
 * answer a typed error.
 *
 * Invariants:
 *  1. Only threads under the check's own fresh prefix are asked for, so the
 *     check holds on a broker other clients use (or other brokers of the
 *     same store write to).
 *  2. Every thread it makes is noted for the cleanup (its run is left active).
 */
#include "conformance.h"

#include <stdio.h>
#include <string.h>

#define SV(s) ((ab_str_t){(s), strlen(s)})

static bool announced(conf_t *cf)
{
    size_t n = 0;
    const ab_cap_t *caps = ab_conn_caps(cf->c, &n);
    ab_cap_state_t s = ab_caps_lookup(caps, n, AB_CAP_THREADS);
    return s == AB_CAP_AVAILABLE || s == AB_CAP_DEGRADED;
}

/* One page; the ids joined by ',' into @p ids. @return the status (reason set on failure). */
static ab_status_t page(conf_t *cf, const char *after, const char *prefix, uint32_t limit,
                        ab_threads_reply_t *r, char *ids, size_t cap)
{
    ab_threads_req_t q = {SV(after), SV(prefix), limit};
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_threads(cf->c, &q, cf->doc, r, cf->timeout_ms, &err);
    ids[0] = '\0';
    if (st != AB_OK) {
        conf_fail(cf, "threads answered %s: %s", ab_status_name(st), err.message);
        return st;
    }
    for (size_t i = 0; i < r->nthreads; i++) {
        size_t used = strlen(ids);
        snprintf(ids + used, cap - used, "%s%.*s", i ? "," : "", (int)r->threads[i].thread.len,
                 r->threads[i].thread.ptr);
    }
    return AB_OK;
}

static bool is(ab_str_t s, const char *want)
{
    return s.ptr != NULL && s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

conf_result_t conf_check_threads(conf_t *cf)
{
    char pfx[96], t[3][128], ids[512], want[512];
    conf_id(cf, pfx, sizeof pfx, "threads");
    if (!announced(cf)) {
        ab_threads_req_t q = {SV(pfx), SV(pfx), 1};
        ab_threads_reply_t r;
        ab_error_t err = AB_ERROR_INIT;
        ab_status_t st = ab_conn_threads(cf->c, &q, cf->doc, &r, cf->timeout_ms, &err);
        if (st == AB_OK || st == AB_TIMEOUT || st == AB_IO)
            return conf_fail(cf, "threads is not announced but the request answered %s",
                             ab_status_name(st));
        return CONF_PASS;
    }
    static const char *const tail[3] = {"/c", "/a", "/\xc3\xa9"}; /* é sorts after c */
    uint64_t pos[3] = {0};
    for (int i = 0; i < 3; i++) {
        snprintf(t[i], sizeof t[i], "%s%s", pfx, tail[i]);
        conf_note_id(cf, t[i]);
        uint64_t epoch = 0;
        conf_recs_t sent = {0};
        int rc = conf_claim(cf, cf->c, t[i], "r", &epoch) == 0 &&
                         conf_publish_range(cf, t[i], "r", epoch, 1, 1, &sent) == 0
                     ? 0
                     : -1;
        pos[i] = sent.n == 1 ? sent.pos[0] : 0;
        conf_recs_free(&sent);
        if (rc != 0)
            return CONF_FAIL;
    }
    char sub[160];
    snprintf(sub, sizeof sub, "%s/", pfx);
    ab_threads_reply_t r;
    if (page(cf, "", sub, 2, &r, ids, sizeof ids) != AB_OK)
        return CONF_FAIL;
    snprintf(want, sizeof want, "%s,%s", t[1], t[0]);
    if (strcmp(ids, want) != 0)
        return conf_fail(cf, "the first page of two is [%s], not [%s] (byte order)", ids, want);
    if (!is(r.next, t[0]))
        return conf_fail(cf, "a full page with more to come has no next of its last thread");
    const ab_thread_entry_t *a = &r.threads[0];
    if (a->runs != 1 || !a->active || !is(a->last_run, "r") || a->last_pos != pos[1])
        return conf_fail(cf, "thread %s: runs %llu, active %d, last_pos %llu; want 1, 1, %llu",
                         t[1], (unsigned long long)a->runs, a->active,
                         (unsigned long long)a->last_pos, (unsigned long long)pos[1]);
    char next[128];
    snprintf(next, sizeof next, "%s", t[0]);
    if (page(cf, next, sub, 2, &r, ids, sizeof ids) != AB_OK)
        return CONF_FAIL;
    if (strcmp(ids, t[2]) != 0 || r.next.ptr != NULL)
        return conf_fail(cf, "the page after %s is [%s]%s, not [%s] and done", next, ids,
                         r.next.ptr ? " with a next" : "", t[2]);
    snprintf(sub, sizeof sub, "%s/none", pfx);
    if (page(cf, "", sub, 100, &r, ids, sizeof ids) != AB_OK)
        return CONF_FAIL;
    if (r.nthreads != 0 || r.next.ptr != NULL)
        return conf_fail(cf, "a prefix no thread has listed [%s]", ids);
    return CONF_PASS;
}

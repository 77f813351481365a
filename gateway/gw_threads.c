/*
 * gw_threads.c - GET /threads?after=&prefix=&limit=: one page of the
 * threads with stored events, in byte order of their ids, from the
 * broker's `threads` listing (docs/PROTOCOL.md 7.19; docs/GATEWAY.md).
 *
 * The answer is the broker's page as JSON: {"threads": [{"thread", "runs",
 * "active", "last_run", "last_pos"}...], "next": ID} (next absent at the
 * end). It replaced a listing built from the run requests (which read up to
 * 60,000 requests per call, needed `control` and missed every thread whose
 * runs were not dispatched): a thread's newest request is not merged in,
 * since the protocol has no request of one thread's requests and the
 * listing's `active` and `last_run` say what the observer page shows.
 *
 * Invariants:
 *  1. One broker request per HTTP request: the work is the broker's bounded
 *     page (at most 1,000 threads), and the gateway holds one page.
 *  2. The query is decoded before anything is sent (gw_route.c): a bad
 *     `after`, `prefix` or `limit` is 400 naming it; with tokens the broker
 *     lists only the threads the token's identity may observe.
 */
#include "gateway.h"

#include "agentbus/client.h"
#include "agentbus/json.h"

#include <microhttpd.h>
#include <stdio.h>
#include <string.h>

static ab_status_t put_str(ab_buf_t *out, const char *key, ab_str_t s)
{
    ab_status_t rc = ab_buf_append(out, key, strlen(key));
    return rc == AB_OK ? ab_json_quote(out, s.ptr, s.len) : rc;
}

static ab_status_t put_page(ab_buf_t *out, const ab_threads_reply_t *p)
{
    ab_status_t rc = ab_buf_append(out, "{\"threads\":[", 12);
    for (size_t i = 0; rc == AB_OK && i < p->nthreads; i++) {
        const ab_thread_entry_t *t = &p->threads[i];
        char mid[96], tail[48];
        int m = snprintf(mid, sizeof mid, ",\"runs\":%llu,\"active\":%s",
                         (unsigned long long)t->runs, t->active ? "true" : "false");
        int n = snprintf(tail, sizeof tail, ",\"last_pos\":%llu}", (unsigned long long)t->last_pos);
        rc = put_str(out, i ? ",{\"thread\":" : "{\"thread\":", t->thread);
        if (rc == AB_OK)
            rc = ab_buf_append(out, mid, (size_t)m);
        if (rc == AB_OK)
            rc = put_str(out, ",\"last_run\":", t->last_run);
        if (rc == AB_OK)
            rc = ab_buf_append(out, tail, (size_t)n);
    }
    if (rc == AB_OK)
        rc = ab_buf_append(out, "]", 1);
    if (rc == AB_OK && p->next.ptr)
        rc = put_str(out, ",\"next\":", p->next);
    return rc == AB_OK ? ab_buf_append(out, "}\n", 2) : rc;
}

/* A query parameter as the request has it (the daemon keeps escapes: gw_server.c) and its length,
 * NULL when absent; a bare "?limit" (no '=': no value) is empty, as "?limit=" is. */
static const char *param(ab__gw_req_t *r, const char *key, size_t *len)
{
    const char *v = NULL;
    *len = 0;
    if (MHD_lookup_connection_value_n(r->conn, MHD_GET_ARGUMENT_KIND, key, strlen(key), &v, len) !=
        MHD_YES)
        return NULL;
    if (v == NULL)
        *len = 0;
    return v ? v : "";
}

void ab__gw_threads(ab__gw_req_t *r)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_buf_t out = AB_BUF_INIT;
    ab__gw_threads_q_t q;
    size_t al, pl, ll;
    const char *a = param(r, "after", &al), *p = param(r, "prefix", &pl),
               *l = param(r, "limit", &ll);
    ab_status_t rc = ab__gw_threads_query(a, al, p, pl, l, ll, &q, &err);
    if (rc == AB_OK)
        rc = ab_doc_new(&doc) == AB_OK ? ab__gw_connect(r, &c, &err)
                                       : ab_error_set(&err, AB_NOMEM, NULL, "out of memory");
    ab_threads_reply_t page;
    if (rc == AB_OK) {
        ab_threads_req_t req = {.after = {q.after, strlen(q.after)},
                                .prefix = {q.prefix, strlen(q.prefix)},
                                .limit = q.limit};
        rc = ab_conn_threads(c, &req, doc, &page, 0, &err);
    }
    if (rc == AB_OK)
        rc = put_page(&out, &page);
    if (rc == AB_OK)
        rc = ab__gw_reply_json(r, 200, (const char *)out.data, out.len, NULL);
    if (rc != AB_OK) {
        if (err.code == AB_OK)
            ab_error_set(&err, rc, NULL, "%s", ab_status_str(rc));
        ab__gw_reply_error(r, &err);
    }
    ab_buf_free(&out);
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
}

/*
 * gw_threads.c - GET /threads: the threads the bus knows of through its run
 * requests (dispatch), newest first, for the observer page's list.
 *
 * The protocol has no request that lists threads; what the broker lists is
 * its run requests (`requests`, docs/PROTOCOL.md 7.15). This pages through
 * the open ones and the ended and cancelled ones and keeps, per thread, its
 * newest request. So a thread whose runs were all claimed by producers
 * (never dispatched) is not listed; it is still watched by its id.
 *
 * Invariants:
 *  1. Bounded: at most GW_THREADS_PAGES pages of AB_REQUESTS_LIMIT_MAX
 *     requests are read per state, and at most GW_THREADS_MAX threads kept.
 *  2. Each thread appears once, with the newest request seen for it.
 */
#include "gateway.h"

#include "agentbus/client.h"
#include "agentbus/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GW_THREADS_PAGES 20
#define GW_THREADS_MAX   500

typedef struct trow {
    char *thread, *agent, *run;
    uint64_t request;
    ab_request_state_t state;
    int64_t created_us;
} trow_t;

typedef struct tlist {
    trow_t v[GW_THREADS_MAX];
    size_t n;
} tlist_t;

static void row_free(trow_t *r)
{
    free(r->thread);
    free(r->agent);
    free(r->run);
}

/* Keep @p q as its thread's row when it is newer (invariant 2). */
static ab_status_t keep(tlist_t *l, const ab_request_info_t *q)
{
    trow_t *r = NULL;
    for (size_t i = 0; i < l->n && r == NULL; i++)
        if (strlen(l->v[i].thread) == q->thread.len &&
            memcmp(l->v[i].thread, q->thread.ptr, q->thread.len) == 0)
            r = &l->v[i];
    if (r != NULL && r->request > q->request)
        return AB_OK;
    if (r == NULL) {
        if (l->n == GW_THREADS_MAX)
            return AB_OK; /* invariant 1: the list is full */
        r = &l->v[l->n++];
        memset(r, 0, sizeof *r);
    } else {
        row_free(r);
    }
    r->thread = strndup(q->thread.ptr, q->thread.len);
    r->agent = strndup(q->agent.ptr, q->agent.len);
    r->run = strndup(q->run.ptr, q->run.len);
    r->request = q->request;
    r->state = q->state;
    r->created_us = q->created_us;
    return r->thread && r->agent && r->run ? AB_OK : AB_NOMEM;
}

static ab_status_t read_state(ab_conn_t *c, ab_doc_t *doc, ab_request_state_t st, tlist_t *l,
                              ab_error_t *err)
{
    uint64_t after = 0;
    for (int page = 0; page < GW_THREADS_PAGES; page++) {
        ab_requests_t q = {.state = st, .after = after, .limit = AB_REQUESTS_LIMIT_MAX};
        ab_requests_reply_t r;
        ab_status_t rc = ab_conn_requests(c, &q, doc, &r, 0, err);
        for (size_t i = 0; rc == AB_OK && i < r.nrequests; i++) {
            rc = keep(l, &r.requests[i]);
            after = r.requests[i].request;
        }
        if (rc != AB_OK || !r.more || r.nrequests == 0)
            return rc;
    }
    return AB_OK;
}

static int newest_first(const void *a, const void *b)
{
    const trow_t *x = a, *y = b;
    return x->request < y->request ? 1 : x->request > y->request ? -1 : 0;
}

static ab_status_t put_rows(ab_buf_t *out, tlist_t *l)
{
    qsort(l->v, l->n, sizeof l->v[0], newest_first);
    ab_status_t rc = ab_buf_append(out, "{\"threads\":[", 12);
    for (size_t i = 0; rc == AB_OK && i < l->n; i++) {
        const trow_t *r = &l->v[i];
        char tail[160];
        int n =
            snprintf(tail, sizeof tail, ",\"request\":%llu,\"state\":\"%s\",\"created_us\":%lld}",
                     (unsigned long long)r->request, ab_request_state_name(r->state),
                     (long long)r->created_us);
        rc = ab_buf_append(out, i ? ",{\"thread\":" : "{\"thread\":", i ? 11 : 10);
        if (rc == AB_OK)
            rc = ab_json_quote(out, r->thread, strlen(r->thread));
        if (rc == AB_OK)
            rc = ab_buf_append(out, ",\"agent\":", 9);
        if (rc == AB_OK)
            rc = ab_json_quote(out, r->agent, strlen(r->agent));
        if (rc == AB_OK)
            rc = ab_buf_append(out, ",\"run\":", 7);
        if (rc == AB_OK)
            rc = ab_json_quote(out, r->run, strlen(r->run));
        if (rc == AB_OK)
            rc = ab_buf_append(out, tail, (size_t)n);
    }
    return rc == AB_OK ? ab_buf_append(out, "]}\n", 3) : rc;
}

void ab__gw_threads(ab__gw_req_t *r)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_buf_t out = AB_BUF_INIT;
    tlist_t *l = calloc(1, sizeof *l);
    ab_status_t rc = l ? ab_doc_new(&doc) : ab_error_set(&err, AB_NOMEM, NULL, "out of memory");
    if (rc == AB_OK)
        rc = ab__gw_connect(r, &c, &err);
    const ab_request_state_t states[] = {AB_REQ_NONE, AB_REQ_ENDED, AB_REQ_CANCELLED};
    for (size_t i = 0; rc == AB_OK && i < 3; i++)
        rc = read_state(c, doc, states[i], l, &err);
    if (rc == AB_OK)
        rc = put_rows(&out, l);
    if (rc == AB_OK)
        rc = ab__gw_reply_json(r, 200, (const char *)out.data, out.len, NULL);
    if (rc != AB_OK) {
        if (err.code == AB_OK)
            ab_error_set(&err, rc, NULL, "%s", ab_status_str(rc));
        ab__gw_reply_error(r, &err);
    }
    for (size_t i = 0; l && i < l->n; i++)
        row_free(&l->v[i]);
    free(l);
    ab_buf_free(&out);
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
}

/*
 * requests_cmd.c - `agentbus runs --requests`: the broker's run requests
 * (docs/PROTOCOL.md 7.16, `requests`): by default the open ones (queued,
 * assigned, started), or those of one state or agent, with the worker they
 * are assigned to, their attempts and their age; started requests whose
 * worker is gone are marked ORPHANED.
 *
 * Invariants:
 *  1. Pages of AB_REQUESTS_LIMIT_MAX are asked for in id order (`after` the
 *     last id listed) until the broker says there are no more, each printed
 *     as it comes: memory is one page whatever the queue holds.
 *  2. Every request is bounded by the timeout.
 */
#include "agentbus/client.h"
#include "agentbus/json.h"
#include "agentbus/nego.h"
#include "cli.h"

#include <string.h>
#include <time.h>

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* "850ms", "12.3s", "4m05s", "3h02m", "2d04h" */
static const char *fmt_age(int64_t us, char *buf, size_t size)
{
    int64_t ms = us < 0 ? 0 : us / 1000;
    if (ms < 1000)
        snprintf(buf, size, "%lldms", (long long)ms);
    else if (ms < 60000)
        snprintf(buf, size, "%lld.%llds", (long long)(ms / 1000), (long long)(ms % 1000 / 100));
    else if (ms < 3600000)
        snprintf(buf, size, "%lldm%02llds", (long long)(ms / 60000), (long long)(ms / 1000 % 60));
    else if (ms < 86400000)
        snprintf(buf, size, "%lldh%02lldm", (long long)(ms / 3600000),
                 (long long)(ms / 60000 % 60));
    else
        snprintf(buf, size, "%lldd%02lldh", (long long)(ms / 86400000),
                 (long long)(ms / 3600000 % 24));
    return buf;
}

static void put(ab_buf_t *b, const void *p, size_t n)
{
    if (ab_buf_append(b, p, n) != AB_OK)
        fputs("agentbus: out of memory building a line\n", stderr);
}

static void put_str(ab_buf_t *b, const char *key, ab_str_t s)
{
    put(b, key, strlen(key));
    if (!s.ptr)
        put(b, "null", 4);
    else if (ab_json_quote(b, s.ptr, s.len) != AB_OK)
        fputs("agentbus: out of memory building a line\n", stderr);
}

static void print_json(const ab_request_info_t *r, int64_t now, ab_buf_t *b)
{
    char num[200];
    ab_buf_reset(b);
    snprintf(num, sizeof(num), "{\"request\":%llu", (unsigned long long)r->request);
    put(b, num, strlen(num));
    put_str(b, ",\"agent\":", r->agent);
    put_str(b, ",\"thread\":", r->thread);
    put_str(b, ",\"run\":", r->run);
    snprintf(num, sizeof(num), ",\"state\":\"%s\"", ab_request_state_name(r->state));
    put(b, num, strlen(num));
    put_str(b, ",\"worker\":", r->worker);
    snprintf(num, sizeof(num),
             ",\"epoch\":%llu,\"attempts\":%u,\"orphaned\":%s,\"created_us\":%lld,\"age_ms\":%lld}"
             "\n",
             (unsigned long long)r->epoch, r->attempts, r->orphaned ? "true" : "false",
             (long long)r->created_us, (long long)((now - r->created_us) / 1000));
    put(b, num, strlen(num));
    fwrite(b->data, 1, b->len, stdout);
}

static void print_row(const ab_request_info_t *r, int64_t now)
{
    char id[24], att[16], age[32];
    snprintf(id, sizeof(id), "%llu", (unsigned long long)r->request);
    snprintf(att, sizeof(att), "%u", r->attempts);
    printf("%8s %-12.*s %-24.*s %-24.*s %-9s %-14.*s %8s %8s", id, (int)r->agent.len, r->agent.ptr,
           (int)r->thread.len, r->thread.ptr, (int)r->run.len, r->run.ptr,
           ab_request_state_name(r->state), r->worker.ptr ? (int)r->worker.len : 1,
           r->worker.ptr ? r->worker.ptr : "-", att,
           fmt_age(now - r->created_us, age, sizeof(age)));
    printf(r->orphaned ? "  ORPHANED: its worker is gone, nothing runs it\n" : "\n");
}

int cli_parse_request_state(const char *s, ab_request_state_t *out)
{
    for (int st = AB_REQ_QUEUED; st <= AB_REQ_ENDED; st++)
        if (strcmp(s, ab_request_state_name((ab_request_state_t)st)) == 0) {
            *out = (ab_request_state_t)st;
            return 0;
        }
    return -1;
}

/* One page after @p *after; prints it and advances *after. */
static ab_status_t page(ab_conn_t *c, ab_doc_t *doc, const cli_requests_opts_t *o, uint64_t *after,
                        bool *more, size_t *count, ab_buf_t *line, ab_error_t *err)
{
    ab_requests_t q = {.state = o->state,
                       .agent = {o->agent, o->agent ? strlen(o->agent) : 0},
                       .after = *after,
                       .limit = AB_REQUESTS_LIMIT_MAX};
    ab_requests_reply_t r;
    ab_status_t rc = ab_conn_requests(c, &q, doc, &r, (int)o->timeout_ms, err);
    if (rc != AB_OK)
        return rc;
    int64_t now = now_us();
    for (size_t i = 0; i < r.nrequests; i++) {
        o->json ? print_json(&r.requests[i], now, line) : print_row(&r.requests[i], now);
        *after = r.requests[i].request;
    }
    *count += r.nrequests;
    *more = r.more && r.nrequests > 0;
    return AB_OK;
}

int cli_list_requests(const cli_requests_opts_t *o)
{
    ab_conn_opts_t co = {.client_name = "agentbus-runs", .timeout_ms = (int)o->timeout_ms};
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_buf_t line = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    size_t n = 0, ncaps = 0;
    ab_status_t rc = ab_doc_new(&doc) == AB_OK ? ab_conn_new(&c, o->broker, &co, &err)
                                               : ab_error_set(&err, AB_NOMEM, "", "out of memory");
    const ab_cap_t *caps = rc == AB_OK ? ab_conn_caps(c, &ncaps) : NULL;
    if (rc == AB_OK)
        rc = ab_caps_require(caps, ncaps, AB_CAP_DISPATCH, &err);
    if (rc == AB_OK && !o->json)
        printf("%8s %-12s %-24s %-24s %-9s %-14s %8s %8s\n", "REQUEST", "AGENT", "THREAD", "RUN",
               "STATE", "WORKER", "ATTEMPTS", "AGE");
    for (uint64_t after = 0; rc == AB_OK;) {
        bool more = false;
        rc = page(c, doc, o, &after, &more, &n, &line, &err);
        if (!more)
            break;
    }
    if (rc == AB_OK && !o->json)
        printf("%zu request%s\n", n, n == 1 ? "" : "s");
    if (rc != AB_OK) {
        char buf[900];
        fprintf(stderr, "agentbus runs: %s\n", cli_error_text(&err, buf, sizeof(buf)));
    }
    ab_buf_free(&line);
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    return rc == AB_OK ? AB_EXIT_OK : AB_EXIT_FAIL;
}

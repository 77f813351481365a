/*
 * gw_server.c - the HTTP daemon of `agentbus gateway` (libmicrohttpd, one
 * thread per connection): request contexts and bodies, bearer tokens, CORS,
 * typed JSON errors, /healthz, /metrics and dispatch to the handlers of
 * gw_api.c and gw_sse.c.
 *
 * Invariants:
 *  1. A request body is held up to opts.body_max bytes; past it the rest is
 *     read and dropped and the answer is 413 too_large (memory per request is
 *     bounded by body_max).
 *  2. With a token file every request but the CORS preflight (OPTIONS) needs
 *     "Authorization: Bearer TOKEN" naming a listed token; anything else is
 *     401 unauthorized before the route is looked at (docs/GATEWAY.md
 *     "Access"). The token picks the identity whose key the gateway opens
 *     its broker connections with, so the broker's own access rules decide.
 *  3. Without tokens the gateway binds only a loopback address (127.0.0.0/8),
 *     like the broker without keys.
 *  4. Every error answer is {"error": {...}} with the bus's typed error.
 *  5. The run exports held at once (their buffers, from the first byte until
 *     the response that carries one is freed) take at most
 *     opts.export_budget bytes in all; an export that would pass it is 429
 *     overloaded (ab__gw_export_take).
 */
#include "gateway.h"

#include "agentbus/client.h"
#include "agentbus/json.h"
#include "agentbus/keys.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <zmq.h>

typedef struct gw_ident {
    ab__gw_token_t t;
    ab_keypair_t kp; /* IDENTITY.key_secret of --keys */
} gw_ident_t;

struct ab__gw {
    ab__gw_opts_t o;
    struct MHD_Daemon *d;
    void *zmq;
    char url[80];
    gw_ident_t *idents;
    size_t nidents;
    char server_key[AB_KEY_Z85_SIZE]; /* the broker's public key, with tokens */
    ab__gw_metrics_t m;
    atomic_bool stopping;
    atomic_size_t export_held; /* bytes of run exports held now (invariant 5) */
};

/* Per request, kept by MHD between the calls of the handler. */
typedef struct req_ctx {
    ab__gw_route_t route;
    ab_error_t err; /* a refusal decided before the body was read */
    bool refused;
    const gw_ident_t *ident;
    ab_buf_t body;
    bool too_large;
} req_ctx_t;

const ab__gw_opts_t *ab__gw_options(const ab__gw_t *gw)
{
    return &gw->o;
}

ab__gw_metrics_t *ab__gw_counters(ab__gw_t *gw)
{
    return &gw->m;
}

bool ab__gw_stopping(ab__gw_t *gw)
{
    return atomic_load(&gw->stopping);
}

void *ab__gw_zmq(const ab__gw_t *gw)
{
    return gw->zmq;
}

const char *ab__gw_url(const ab__gw_t *gw)
{
    return gw->url;
}

/* ---- answers ---------------------------------------------------------------- */

unsigned ab__gw_http_status(ab_status_t code)
{
    switch (code) {
    case AB_OK: return 200;
    case AB_NOT_FOUND: return 404;
    case AB_UNAUTHORIZED: return 403; /* the broker's refusal; a bad token is 401 */
    case AB_CONFLICT:
    case AB_RUN_TERMINAL:
    case AB_FENCED: return 409;
    case AB_TOO_LARGE: return 413;
    case AB_UNSUPPORTED: return 501;
    case AB_OVERLOADED: return 429;
    case AB_UNAVAILABLE:
    case AB_CLOSED: return 503;
    case AB_TIMEOUT:
    case AB_REQUEST_ABORTED: return 504;
    case AB_NOMEM:
    case AB_IO:
    case AB_CORRUPT:
    case AB_INTERNAL: return 500;
    default: return 400;
    }
}

static ab_status_t put_details(ab_buf_t *out, const ab_error_t *e)
{
    ab_status_t rc = ab_buf_append(out, ",\"details\":{", 12);
    for (size_t i = 0; i < e->ndetails && rc == AB_OK; i++) {
        const ab_error_detail_t *d = &e->details[i];
        if (i > 0)
            rc = ab_buf_append(out, ",", 1);
        if (rc == AB_OK)
            rc = ab__gw_json_text(out, d->key, strnlen(d->key, sizeof d->key));
        if (rc == AB_OK)
            rc = ab_buf_append(out, ":", 1);
        char num[32];
        if (rc == AB_OK && d->kind == AB_DETAIL_INT) {
            int n = snprintf(num, sizeof num, "%lld", (long long)d->i);
            rc = ab_buf_append(out, num, (size_t)n);
        } else if (rc == AB_OK) {
            rc = ab__gw_json_text(out, d->s, strnlen(d->s, sizeof d->s));
        }
    }
    return rc == AB_OK ? ab_buf_append(out, "}", 1) : rc;
}

ab_status_t ab__gw_error_json(ab_buf_t *out, const ab_error_t *e)
{
    const char *code = ab_status_name(e->code);
    const char *msg = e->message[0] ? e->message : ab_status_str(e->code);
    ab_status_t rc = ab_buf_append(out, "{\"code\":", 8);
    if (rc == AB_OK)
        rc = ab_json_quote(out, code, strlen(code));
    if (rc == AB_OK)
        rc = ab_buf_append(out, ",\"message\":", 11);
    if (rc == AB_OK)
        rc = ab__gw_json_text(out, msg, strlen(msg));
    if (rc == AB_OK)
        rc = ab_buf_append(out, ",\"field\":", 9);
    if (rc == AB_OK)
        rc = ab__gw_json_text(out, e->field, strlen(e->field));
    if (rc == AB_OK)
        rc = ab_buf_append(out, e->retryable ? ",\"retryable\":true" : ",\"retryable\":false",
                           e->retryable ? 17 : 18);
    if (rc == AB_OK)
        rc = put_details(out, e);
    return rc == AB_OK ? ab_buf_append(out, "}", 1) : rc;
}

ab_status_t ab__gw_reply_json(ab__gw_req_t *r, unsigned status, const char *json, size_t len,
                              const char *content_type)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)(uintptr_t)json, MHD_RESPMEM_MUST_COPY);
    if (resp == NULL)
        return AB_NOMEM;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            content_type ? content_type : "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    r->status = status;
    r->resp = resp;
    return AB_OK;
}

static size_t export_budget(const ab__gw_t *gw)
{
    return gw->o.export_budget ? gw->o.export_budget : AB_GW_EXPORT_BUDGET_DEFAULT;
}

ab_status_t ab__gw_export_take(ab__gw_t *gw, size_t n, ab_error_t *err)
{
    size_t max = export_budget(gw), held = atomic_load(&gw->export_held);
    do {
        if (n > max - held) {
            ab_error_set(err, AB_OVERLOADED, "exports",
                         "run exports hold %zu of their %zu bytes (--export-budget) already; "
                         "this one needs %zu more",
                         held, max, n);
            ab_error_detail_int(err, "limit", (int64_t)max);
            return AB_OVERLOADED;
        }
    } while (!atomic_compare_exchange_weak(&gw->export_held, &held, held + n));
    return AB_OK;
}

void ab__gw_export_give(ab__gw_t *gw, size_t n)
{
    atomic_fetch_sub(&gw->export_held, n);
}

/* What a response of ab__gw_reply_export() gives back when MHD frees it. */
typedef struct export_body {
    ab__gw_t *gw;
    void *data;
    size_t held;
} export_body_t;

static void export_body_free(void *cls)
{
    export_body_t *b = cls;
    free(b->data);
    ab__gw_export_give(b->gw, b->held);
    free(b);
}

ab_status_t ab__gw_reply_export(ab__gw_req_t *r, ab_buf_t *buf, size_t held,
                                const char *content_type)
{
    export_body_t *b = malloc(sizeof *b);
    struct MHD_Response *resp = NULL;
    size_t len = buf->len;
    void *data = buf->data;
    *buf = (ab_buf_t)AB_BUF_INIT;
    if (b == NULL) {
        free(data);
        ab__gw_export_give(r->gw, held);
        return AB_NOMEM;
    }
    *b = (export_body_t){r->gw, data, held};
    resp = MHD_create_response_from_buffer_with_free_callback_cls(len, data, export_body_free, b);
    if (resp == NULL) {
        export_body_free(b);
        return AB_NOMEM;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    r->status = 200;
    r->resp = resp;
    return AB_OK;
}

void ab__gw_reply_error(ab__gw_req_t *r, const ab_error_t *err)
{
    ab_error_t e = *err;
    if (e.code == AB_OK)
        e.code = AB_INTERNAL;
    if (e.message[0] == '\0')
        e.retryable = ab_status_retryable(e.code);
    ab_buf_t b = AB_BUF_INIT;
    ab_status_t rc = ab_buf_append(&b, "{\"error\":", 9);
    if (rc == AB_OK)
        rc = ab__gw_error_json(&b, &e);
    if (rc == AB_OK)
        rc = ab_buf_append(&b, "}\n", 2);
    if (rc == AB_OK)
        rc = ab__gw_reply_json(r, ab__gw_http_status(e.code), (const char *)b.data, b.len, NULL);
    ab_buf_free(&b);
}

ab_status_t ab__gw_connect(ab__gw_req_t *r, ab_conn_t **out, ab_error_t *err)
{
    ab_conn_opts_t co = {.zmq_ctx = r->gw->zmq,
                         .client_name = "agentbus-gateway",
                         .timeout_ms = r->gw->o.timeout_ms,
                         .key = r->key,
                         .server_key = r->server_key};
    return ab_conn_new(out, r->gw->o.broker, &co, err);
}

static void put_cors(const ab__gw_t *gw, struct MHD_Response *resp)
{
    if (gw->o.cors == NULL)
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", gw->o.cors);
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            "Authorization, Content-Type, Last-Event-ID, Accept");
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(resp, "Access-Control-Expose-Headers", "Content-Type");
}

/* Queue the handler's answer (or a 500 when it made none). */
static enum MHD_Result send_reply(ab__gw_t *gw, ab__gw_req_t *r)
{
    if (r->resp == NULL) {
        ab_error_t e = AB_ERROR_INIT;
        ab_error_set(&e, AB_NOMEM, NULL, "out of memory making the answer");
        ab__gw_reply_error(r, &e);
        if (r->resp == NULL)
            return MHD_NO;
    }
    put_cors(gw, r->resp);
    atomic_fetch_add(&gw->m.requests, 1);
    if (r->status >= 400)
        atomic_fetch_add(&gw->m.errors, 1);
    if (r->status == 401 || r->status == 403)
        atomic_fetch_add(&gw->m.unauthorized, 1);
    enum MHD_Result ok = MHD_queue_response(r->conn, r->status, r->resp);
    MHD_destroy_response(r->resp);
    return ok;
}

/* ---- /healthz and /metrics ---------------------------------------------------- */

/* Whether @p s is 1 to 64 hex digits. */
static bool hex_digits(ab_str_t s)
{
    bool ok = s.len > 0 && s.len <= 64;
    for (size_t i = 0; ok && i < s.len; i++)
        ok = isxdigit((unsigned char)s.ptr[i]) != 0;
    return ok;
}

static void health(ab__gw_req_t *r)
{
    ab_conn_t *c = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_doc_t *doc = NULL;
    ab_pong_t pong;
    ab_status_t rc = ab_doc_new(&doc);
    if (rc == AB_OK)
        rc = ab__gw_connect(r, &c, &err);
    if (rc == AB_OK)
        rc = ab_conn_ping(c, doc, &pong, 0, &err);
    if (rc != AB_OK) {
        if (err.code == AB_OK)
            ab_error_set(&err, rc, NULL, "%s", ab_status_str(rc));
        ab_conn_destroy(&c);
        ab_doc_destroy(&doc);
        ab_error_t e = AB_ERROR_INIT; /* not a copy of err: the first error set wins */
        ab_error_set(&e, AB_UNAVAILABLE, "broker", "broker unreachable: %s", err.message);
        ab__gw_reply_error(r, &e);
        return;
    }
    ab_str_t inst = pong.instance;
    if (!hex_digits(inst)) /* a broker's is 16 (PROTOCOL.md 7.2); anything else is not echoed */
        inst.len = 0;
    char buf[256];
    int n = snprintf(buf, sizeof buf, "{\"ok\":true,\"instance\":\"%.*s\",\"head_pos\":%llu}\n",
                     (int)inst.len, inst.ptr, (unsigned long long)pong.head_pos);
    ab__gw_reply_json(r, 200, buf, n > 0 && (size_t)n < sizeof buf ? (size_t)n : 0, NULL);
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
}

static void metrics(ab__gw_req_t *r)
{
    ab__gw_metrics_t *m = &r->gw->m;
    char buf[3072];
    int n = snprintf(
        buf, sizeof buf,
        "# HELP agentbus_gateway_requests_total HTTP requests answered.\n"
        "# TYPE agentbus_gateway_requests_total counter\n"
        "agentbus_gateway_requests_total %llu\n"
        "# HELP agentbus_gateway_errors_total Requests answered with a status of 400 or more.\n"
        "# TYPE agentbus_gateway_errors_total counter\n"
        "agentbus_gateway_errors_total %llu\n"
        "# HELP agentbus_gateway_unauthorized_total Requests refused for their token.\n"
        "# TYPE agentbus_gateway_unauthorized_total counter\n"
        "agentbus_gateway_unauthorized_total %llu\n"
        "# HELP agentbus_gateway_streams_open Event streams open now.\n"
        "# TYPE agentbus_gateway_streams_open gauge\n"
        "agentbus_gateway_streams_open %llu\n"
        "# HELP agentbus_gateway_streams_total Event streams opened.\n"
        "# TYPE agentbus_gateway_streams_total counter\n"
        "agentbus_gateway_streams_total %llu\n"
        "# HELP agentbus_gateway_events_sent_total Events written into event streams.\n"
        "# TYPE agentbus_gateway_events_sent_total counter\n"
        "agentbus_gateway_events_sent_total %llu\n"
        "# HELP agentbus_gateway_slow_clients_cut_total Streams cut for a full queue.\n"
        "# TYPE agentbus_gateway_slow_clients_cut_total counter\n"
        "agentbus_gateway_slow_clients_cut_total %llu\n"
        "# HELP agentbus_gateway_runs_started_total Runs started by POST /agents.\n"
        "# TYPE agentbus_gateway_runs_started_total counter\n"
        "agentbus_gateway_runs_started_total %llu\n",
        (unsigned long long)atomic_load(&m->requests), (unsigned long long)atomic_load(&m->errors),
        (unsigned long long)atomic_load(&m->unauthorized),
        (unsigned long long)atomic_load(&m->streams),
        (unsigned long long)atomic_load(&m->streams_total),
        (unsigned long long)atomic_load(&m->events_sent),
        (unsigned long long)atomic_load(&m->slow_cut),
        (unsigned long long)atomic_load(&m->runs_started));
    ab__gw_reply_json(r, 200, buf, (size_t)n, "text/plain; version=0.0.4");
}

static void page(ab__gw_req_t *r)
{
    size_t len = 0;
    const char *p = ab__gw_page(&len);
    ab__gw_reply_json(r, 200, p, len, "text/html; charset=utf-8");
}

/* ---- dispatch ------------------------------------------------------------------ */

static void dispatch(ab__gw_req_t *r)
{
    switch (r->route->kind) {
    case AB_GW_R_HEALTH: health(r); break;
    case AB_GW_R_METRICS: metrics(r); break;
    case AB_GW_R_PAGE: page(r); break;
    case AB_GW_R_THREAD_EVENTS: ab__gw_thread_events(r); break;
    case AB_GW_R_SNAPSHOT: ab__gw_snapshot(r); break;
    case AB_GW_R_RUNS: ab__gw_runs(r); break;
    case AB_GW_R_RUN_EVENTS: ab__gw_run_events(r); break;
    case AB_GW_R_CANCEL: ab__gw_cancel(r); break;
    case AB_GW_R_RESUME: ab__gw_resume(r); break;
    case AB_GW_R_AGENT_RUN: ab__gw_agent_run(r); break;
    case AB_GW_R_ACTION: ab__gw_action(r); break;
    case AB_GW_R_WORKERS: ab__gw_workers(r); break;
    case AB_GW_R_THREADS: ab__gw_threads(r); break;
    case AB_GW_R_NONE: break;
    }
}

/* Constant-time comparison of two NUL-terminated strings' first bytes. */
static bool same_token(const char *a, const char *b, size_t blen)
{
    size_t al = strlen(a);
    unsigned char d = al != blen;
    for (size_t i = 0; i < blen && i < al; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

/* The identity of the request's bearer token; NULL when refused (ctx->err set). */
static const gw_ident_t *authenticate(ab__gw_t *gw, struct MHD_Connection *conn, req_ctx_t *ctx)
{
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    /* the scheme is case-insensitive and followed by one or more spaces (RFC 7235 2.1) */
    const char *tok = h && strncasecmp(h, "Bearer ", 7) == 0 ? h + 7 : NULL;
    while (tok != NULL && *tok == ' ')
        tok++;
    if (tok == NULL || *tok == '\0') {
        ab_error_set(&ctx->err, AB_UNAUTHORIZED, "Authorization",
                     "this gateway needs \"Authorization: Bearer TOKEN\"");
        return NULL;
    }
    size_t tl = strlen(tok);
    const gw_ident_t *found = NULL;
    for (size_t i = 0; i < gw->nidents; i++)
        if (same_token(gw->idents[i].t.token, tok, tl))
            found = &gw->idents[i];
    if (found == NULL)
        ab_error_set(&ctx->err, AB_UNAUTHORIZED, "Authorization", "unknown bearer token");
    return found;
}

/* First call of a request: route, method, access. */
static void begin(ab__gw_t *gw, struct MHD_Connection *conn, const char *url, const char *method,
                  req_ctx_t *ctx)
{
    if (gw->nidents > 0 && (ctx->ident = authenticate(gw, conn, ctx)) == NULL) {
        ctx->refused = true;
        return;
    }
    if (ab__gw_route_parse(url, strlen(url), &ctx->route, &ctx->err) != AB_OK) {
        ctx->refused = true;
        return;
    }
    if (ctx->route.kind == AB_GW_R_NONE) {
        ab_error_set(&ctx->err, AB_NOT_FOUND, "path", "no endpoint %s %s (docs/GATEWAY.md)", method,
                     url);
        ctx->refused = true;
    } else if (strcmp(method, ctx->route.method) != 0 &&
               !(strcmp(method, "HEAD") == 0 && strcmp(ctx->route.method, "GET") == 0)) {
        ab_error_set(&ctx->err, AB_UNSUPPORTED, "method", "%s wants %s, not %s", url,
                     ctx->route.method, method);
        ctx->refused = true;
    }
}

/* Take a piece of the body; past body_max it is dropped and the request is too large. */
static void take_body(ab__gw_t *gw, req_ctx_t *ctx, const char *data, size_t n)
{
    if (ctx->too_large || ctx->refused)
        return;
    if (ctx->body.len + n > gw->o.body_max) {
        ctx->too_large = true;
        ab_buf_free(&ctx->body);
        ab_error_set(&ctx->err, AB_TOO_LARGE, "body", "request body above %zu bytes",
                     gw->o.body_max);
        ab_error_detail_int(&ctx->err, "limit", (int64_t)gw->o.body_max);
        return;
    }
    if (ab_buf_append(&ctx->body, data, n) != AB_OK) {
        ctx->refused = true;
        ab_error_set(&ctx->err, AB_NOMEM, "body", "out of memory");
    }
}

static enum MHD_Result preflight(ab__gw_t *gw, struct MHD_Connection *conn)
{
    ab__gw_req_t r = {.gw = gw, .conn = conn};
    ab__gw_reply_json(&r, 204, "", 0, "text/plain");
    return send_reply(gw, &r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    ab__gw_t *gw = cls;
    req_ctx_t *ctx = *con_cls;
    if (ctx == NULL) {
        if (strcmp(method, "OPTIONS") == 0)
            return preflight(gw, conn);
        if ((ctx = calloc(1, sizeof *ctx)) == NULL)
            return MHD_NO;
        ctx->body = (ab_buf_t)AB_BUF_INIT;
        begin(gw, conn, url, method, ctx);
        *con_cls = ctx;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        take_body(gw, ctx, upload_data, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    ab__gw_req_t r = {.gw = gw, .conn = conn, .route = &ctx->route};
    if (ctx->refused || ctx->too_large) {
        ab__gw_reply_error(&r, &ctx->err);
        if (ctx->err.code == AB_UNAUTHORIZED && r.resp) { /* the gateway's own refusal */
            r.status = 401;
            MHD_add_response_header(r.resp, "WWW-Authenticate", "Bearer realm=\"agentbus\"");
        }
        return send_reply(gw, &r);
    }
    if (ctx->body.len > 0 && ab_buf_append(&ctx->body, "", 1) == AB_OK) {
        r.body = (const char *)ctx->body.data;
        r.body_len = ctx->body.len - 1;
    }
    if (ctx->ident) {
        r.key = &ctx->ident->kp;
        r.server_key = gw->server_key;
        r.identity = ctx->ident->t.identity;
    }
    dispatch(&r);
    return send_reply(gw, &r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    req_ctx_t *ctx = *con_cls;
    if (ctx) {
        ab_buf_free(&ctx->body);
        free(ctx);
        *con_cls = NULL;
    }
}

/* MHD would percent-decode the path before we split it; we decode each segment ourselves. */
static size_t keep_escapes(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    return strlen(s);
}

/* ---- start and stop ------------------------------------------------------------ */

/* The broker's public key for the token identities' connections: AGENTBUS_SERVER_KEY (the
 * global --server-key), a key file or the broker's keys directory. */
static ab_status_t load_server_key(ab__gw_t *gw, ab_error_t *err)
{
    const char *sf = getenv("AGENTBUS_SERVER_KEY");
    char dirkey[4200];
    struct stat st;
    if (sf == NULL || *sf == '\0')
        return ab_error_set(err, AB_INVALID_CONFIG, "server-key",
                            "--tokens needs the broker's public key: agentbus --server-key FILE "
                            "gateway ...");
    if (stat(sf, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(dirkey, sizeof dirkey, "%s/broker.key", sf);
        sf = dirkey;
    }
    ab_keypair_t srv;
    ab_status_t rc = ab_keypair_read(&srv, sf, err);
    if (rc == AB_OK)
        memcpy(gw->server_key, srv.public_key, sizeof gw->server_key);
    return rc;
}

/* The token file, and the secret key of each identity it names (--keys DIR). */
static ab_status_t load_tokens(ab__gw_t *gw, ab_error_t *err)
{
    FILE *f = fopen(gw->o.tokens, "rb");
    if (f == NULL)
        return ab_error_set(err, AB_INVALID_CONFIG, "tokens", "cannot open %s", gw->o.tokens);
    size_t cap = AB_GW_TOKENS_MAX * 600;
    char *text = malloc(cap + 1);
    size_t n = text ? fread(text, 1, cap + 1, f) : 0;
    fclose(f);
    ab__gw_token_t *t = NULL;
    size_t nt = 0;
    ab_status_t rc =
        text == NULL ? ab_error_set(err, AB_NOMEM, NULL, "out of memory")
        : n > cap    ? ab_error_set(err, AB_TOO_LARGE, "tokens", "%s is too large", gw->o.tokens)
                     : ab__gw_tokens_parse(text, n, &t, &nt, err);
    free(text);
    if (rc == AB_OK && nt == 0)
        rc = ab_error_set(err, AB_INVALID_CONFIG, "tokens", "%s lists no token", gw->o.tokens);
    if (rc == AB_OK && (gw->idents = calloc(nt, sizeof *gw->idents)) == NULL)
        rc = ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    for (size_t i = 0; rc == AB_OK && i < nt; i++) {
        char path[4400];
        gw->idents[i].t = t[i];
        snprintf(path, sizeof path, "%s/%s.key_secret", gw->o.keys_dir ? gw->o.keys_dir : ".",
                 t[i].identity);
        rc = ab_keypair_read(&gw->idents[i].kp, path, err);
        if (rc == AB_OK && gw->idents[i].kp.secret_key[0] == '\0')
            rc = ab_error_set(err, AB_INVALID_CONFIG, "keys", "%s holds no secret key", path);
        gw->nidents = i + 1;
    }
    free(t);
    return rc == AB_OK ? load_server_key(gw, err) : rc;
}

static ab_status_t bind_addr(const ab__gw_t *gw, struct sockaddr_in *sa, ab_error_t *err)
{
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)gw->o.port);
    if (inet_pton(AF_INET, gw->o.host, &sa->sin_addr) != 1)
        return ab_error_set(err, AB_INVALID_CONFIG, "listen", "'%s' is not a numeric IPv4 address",
                            gw->o.host);
    if (gw->nidents == 0 && (ntohl(sa->sin_addr.s_addr) >> 24) != 127)
        return ab_error_set(err, AB_INVALID_CONFIG, "listen",
                            "without --tokens the gateway binds loopback only (127.x.x.x), "
                            "not %s",
                            gw->o.host);
    return AB_OK;
}

ab_status_t ab__gw_start(ab__gw_t **out, const ab__gw_opts_t *opts, ab_error_t *err)
{
    ab__gw_t *gw = calloc(1, sizeof *gw);
    if (gw == NULL)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    gw->o = *opts;
    struct sockaddr_in sa;
    ab_status_t rc = gw->o.tokens ? load_tokens(gw, err) : AB_OK;
    if (rc == AB_OK)
        rc = bind_addr(gw, &sa, err);
    if (rc == AB_OK && (gw->zmq = zmq_ctx_new()) == NULL)
        rc = ab_error_set(err, AB_IO, NULL, "zmq_ctx_new failed");
    if (rc == AB_OK) {
        gw->d = MHD_start_daemon(
            MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                MHD_USE_POLL, /* no MHD log: a client gone is no error */
            0, NULL, NULL, on_request, gw, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
            MHD_OPTION_NOTIFY_COMPLETED, on_completed, gw, MHD_OPTION_UNESCAPE_CALLBACK,
            keep_escapes, gw, MHD_OPTION_CONNECTION_LIMIT, (unsigned)gw->o.conns_max,
            MHD_OPTION_CONNECTION_TIMEOUT,
            (unsigned)(((int64_t)gw->o.heartbeat_ms * 4 + 999) / 1000 + 30), MHD_OPTION_END);
        if (gw->d == NULL)
            rc = ab_error_set(err, AB_IO, "listen", "cannot listen on %s:%u", gw->o.host,
                              gw->o.port);
    }
    if (rc != AB_OK) {
        ab__gw_stop(&gw);
        return rc;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(gw->d, MHD_DAEMON_INFO_BIND_PORT);
    snprintf(gw->url, sizeof gw->url, "http://%s:%u", gw->o.host,
             di ? (unsigned)di->port : gw->o.port);
    *out = gw;
    return AB_OK;
}

void ab__gw_stop(ab__gw_t **gwp)
{
    ab__gw_t *gw = gwp ? *gwp : NULL;
    if (gw == NULL)
        return;
    atomic_store(&gw->stopping, true); /* streams end at their next wake-up (WAIT_MS) */
    if (gw->d)
        MHD_stop_daemon(gw->d);
    if (gw->zmq)
        zmq_ctx_term(gw->zmq);
    free(gw->idents);
    free(gw);
    *gwp = NULL;
}

/*
 * gw_api.c - the JSON endpoints of the gateway and POST /agents/{agent}
 * (docs/GATEWAY.md): each opens one broker connection for the request (with
 * the token's identity), makes its call(s) and answers JSON, or the bus's
 * typed error as {"error": {...}} with the matching HTTP status.
 *
 * Invariants:
 *  1. A JSON body is parsed by the bus's own JSON parser (RFC 8259 exactly,
 *     duplicate keys refused) with the gateway's body limit; a bad one is
 *     invalid_argument naming the JSON pointer under "body".
 *  2. Requests that start something carry an idempotency key derived from
 *     what names them (thread and run), so a client that repeats a POST gets
 *     the first answer again, not a second run. A run too long for its key is
 *     refused naming where it came from (body/runId, path/run) and its limit.
 *  3. A run's export (JSON Lines) is held whole before it is sent, and not
 *     copied: at most AB_GW_EXPORT_MAX bytes, else too_large. Its buffer's
 *     every byte is taken from the gateway-wide export budget before the
 *     buffer grows (429 overloaded past it) and given back when the
 *     response is freed.
 *  4. A start_run or resume_run request is at most the broker's
 *     max_header_bytes (64 KiB, whatever --max-body is): a larger one is
 *     refused here as too_large naming where its bulk came from (body,
 *     body/decisions, body/resume) and that limit, never sent. A bad
 *     decision names its JSON pointer, body/decisions/ID.
 *  5. POST /agents that answers with the run's stream takes its stream slot
 *     before it starts the run: 429 (--max-streams) means nothing started.
 *  6. The broker's answer to a keyed request must name what was asked for:
 *     a key names a thread by a 64-bit hash, so two threads can share one,
 *     and then the broker answers the other thread's request. That answer
 *     is refused 409 conflict (naming neither its thread nor its run), and
 *     no stream follows it.
 */
#include "gateway.h"

#include "ab_common.h"
#include "agentbus/client.h"
#include "agentbus/codec.h"
#include "agentbus/ids.h"
#include "agentbus/json.h"
#include "agentbus/subscriber.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SV(s) ((ab_str_t){(s), strlen(s)})

/* Everything one JSON endpoint holds; freed by call_end(). */
typedef struct call {
    ab__gw_req_t *r;
    ab_conn_t *c;
    ab_doc_t *doc;  /* replies */
    ab_doc_t *bdoc; /* the body */
    ab_buf_t bmp;   /* the body as msgpack */
    ab_buf_t out;
    const ab_val_t *body;
    ab_error_t err;
} call_t;

static ab_status_t call_begin(call_t *k, ab__gw_req_t *r)
{
    memset(k, 0, sizeof *k);
    k->r = r;
    k->bmp = (ab_buf_t)AB_BUF_INIT;
    k->out = (ab_buf_t)AB_BUF_INIT;
    if (ab_doc_new(&k->doc) != AB_OK || ab_doc_new(&k->bdoc) != AB_OK)
        return ab_error_set(&k->err, AB_NOMEM, NULL, "out of memory");
    return ab__gw_connect(r, &k->c, &k->err);
}

static void call_free(call_t *k)
{
    ab_conn_destroy(&k->c);
    ab_doc_destroy(&k->doc);
    ab_doc_destroy(&k->bdoc);
    ab_buf_free(&k->bmp);
    ab_buf_free(&k->out);
}

/* Answer k->out (on AB_OK) or the error, and free. */
static void call_end(call_t *k, ab_status_t rc, const char *ctype)
{
    if (rc == AB_OK)
        rc = ab__gw_reply_json(k->r, 200, (const char *)k->out.data, k->out.len, ctype);
    if (rc != AB_OK) {
        if (k->err.code == AB_OK)
            ab_error_set(&k->err, rc, NULL, "%s", ab_status_str(rc));
        ab__gw_reply_error(k->r, &k->err);
    }
    call_free(k);
}

/* The msgpack bytes a JSON body of at most @p body_max bytes may take, so that every body
 * --max-body lets in encodes (a 413 names --max-body only). The most a JSON text grows by is a
 * 3-character number and its comma ("1e9,", 4 bytes) becoming a float64 of 9 bytes; 3 times
 * leaves room for the headers of long strings and containers. body_max is at most 1 GiB. */
static uint32_t body_mp_max(size_t body_max)
{
    uint64_t max = (uint64_t)body_max * 3 + 64;
    return max > UINT32_MAX ? UINT32_MAX : (uint32_t)max;
}

/* Parse the body as JSON (invariant 1); @p need: an empty body is refused. */
static ab_status_t parse_body(call_t *k, bool need)
{
    const ab__gw_req_t *r = k->r;
    if (r->body == NULL) {
        if (!need)
            return AB_OK;
        return ab_error_set(&k->err, AB_INVALID_ARGUMENT, "body",
                            "this endpoint wants a JSON body");
    }
    ab_limits_t lim = ab_limits_default();
    uint32_t max = body_mp_max(ab__gw_options(r->gw)->body_max);
    ab_status_t rc = ab_json_to_msgpack(r->body, r->body_len, lim.max_depth, max,
                                        AB_INVALID_ARGUMENT, &k->bmp, &k->err);
    if (rc == AB_OK)
        rc = ab_doc_parse(k->bdoc, k->bmp.data, k->bmp.len, max, lim.max_depth, AB_INVALID_ARGUMENT,
                          &k->body, &k->err);
    if (rc != AB_OK)
        ab_error_prefix_field(&k->err, "body");
    return rc;
}

/* A body parsed by parse_body(), when there is one, must be a JSON object: anything else (an
 * array, a string, null) is refused naming "body" rather than read as an empty one. */
static ab_status_t body_object(call_t *k)
{
    if (k->body == NULL || k->body->type == AB_VAL_MAP)
        return AB_OK;
    return ab_error_set(&k->err, AB_INVALID_ARGUMENT, "body", "want a JSON object, got %s",
                        ab_val_type_name(k->body->type));
}

static ab_status_t out_str(call_t *k, const char *s)
{
    return ab_buf_append(&k->out, s, strlen(s));
}

static ab_status_t out_q(call_t *k, ab_str_t s)
{
    return ab_json_quote(&k->out, s.ptr ? s.ptr : "", s.ptr ? s.len : 0);
}

static ab_status_t out_u(call_t *k, uint64_t v)
{
    char b[24];
    int n = snprintf(b, sizeof b, "%llu", (unsigned long long)v);
    return ab_buf_append(&k->out, b, (size_t)n);
}

/* A string member of the body map, "" when absent; refused when not a string id of at most
 * @p max bytes (0: AB_ID_MAX_BYTES), naming "body/KEY" and the limit. */
static ab_status_t body_id(call_t *k, const char *key, bool need, size_t max, char *dst, size_t cap)
{
    const ab_val_t *v = ab_val_get(k->body, key);
    char field[48];
    snprintf(field, sizeof field, "body/%s", key);
    if (v == NULL && !need) {
        dst[0] = '\0';
        return AB_OK;
    }
    if (v == NULL || v->type != AB_VAL_STR)
        return ab_error_set(&k->err, AB_INVALID_ARGUMENT, field, "want a string id");
    if (ab_id_check(v->u.s, v->len, (uint32_t)max, field, &k->err) != AB_OK || v->len >= cap) {
        k->err.code = AB_INVALID_ARGUMENT;
        return AB_INVALID_ARGUMENT;
    }
    memcpy(dst, v->u.s, v->len);
    dst[v->len] = '\0';
    return AB_OK;
}

/* The idempotency key of (thread, run) (AB_GW_KEY_FMT): unique per (thread, run). A run too
 * long for it is refused naming @p field, where the run came from, and the limit. */
static ab_status_t make_key(call_t *k, const char *tag, const char *thread, const char *run,
                            const char *field, char *key, size_t cap)
{
    size_t max = ab__gw_key_run_max(tag), len = strlen(run);
    int n = len > max ? -1
                      : snprintf(key, cap, AB_GW_KEY_FMT, tag,
                                 (unsigned long long)ab__fnv64(thread, strlen(thread)), run);
    if (n < 0 || (size_t)n >= cap || n > AB_ID_MAX_BYTES) {
        ab_error_set(&k->err, AB_INVALID_ARGUMENT, field,
                     "%s is %zu bytes, the limit is %zu (the idempotency key made of it is at "
                     "most %d bytes)",
                     field, len, max, AB_ID_MAX_BYTES);
        ab_error_detail_int(&k->err, "limit", (int64_t)max);
        return AB_INVALID_ARGUMENT;
    }
    return AB_OK;
}

static bool str_is(ab_str_t s, const char *want)
{
    size_t n = strlen(want);
    return s.len == n && (n == 0 || memcmp(s.ptr, want, n) == 0);
}

/* The broker's answer @p a to a request keyed by (@p thread, @p run) names that thread and, with
 * @p run (NULL: any), that run (invariant 6); else 409 conflict naming @p field. */
static ab_status_t accepted_is(call_t *k, const ab_run_accepted_t *a, const char *thread,
                               const char *run, const char *field)
{
    if (str_is(a->thread, thread) && (run == NULL || str_is(a->run, run)))
        return AB_OK;
    return ab_error_set(
        &k->err, AB_CONFLICT, field,
        "the idempotency key of thread %s names a request of another thread "
        "(the 64-bit hash of the thread ids in the key collides): %s",
        thread, run ? "nothing was started; post again with another runId" : "nothing was resumed");
}

/* ---- snapshot, runs, workers ------------------------------------------------------ */

void ab__gw_snapshot(ab__gw_req_t *r)
{
    call_t k;
    ab_msg_t m;
    ab_status_t rc = call_begin(&k, r);
    ab_msg_t q = {.op = AB_OP_SNAPSHOT, .u.snapshot = {.thread = SV(r->route->thread)}};
    if (rc == AB_OK)
        rc = ab_conn_request(k.c, &q, NULL, 0, k.doc, &m, 0, &k.err);
    if (rc == AB_OK && (m.op != AB_OP_SNAPSHOT_REPLY || m.u.snapshot_reply.snapshot == NULL))
        rc = ab_error_set(&k.err, AB_INVALID_ENVELOPE, "op", "not a snapshot_reply");
    if (rc == AB_OK)
        rc = ab_val_to_json(m.u.snapshot_reply.snapshot, &k.out);
    if (rc == AB_OK)
        rc = out_str(&k, "\n");
    call_end(&k, rc, NULL);
}

static const char *outcome_name(ab_agui_outcome_t o)
{
    return o == AB_OUTCOME_INTERRUPT   ? "interrupt"
           : o == AB_OUTCOME_CANCELLED ? "cancelled"
                                       : "success";
}

static ab_status_t put_head(call_t *k, const ab_head_t *h)
{
    ab_status_t rc = out_str(k, "{\"run\":");
    if (rc == AB_OK)
        rc = out_q(k, h->run);
    if (rc == AB_OK)
        rc = out_str(k, ",\"status\":\"");
    if (rc == AB_OK)
        rc = out_str(k, ab_run_status_name(h->status));
    if (rc == AB_OK && h->status == AB_RUN_STATUS_FINISHED) {
        rc = out_str(k, "\",\"outcome\":\"");
        if (rc == AB_OK)
            rc = out_str(k, outcome_name(h->outcome));
    }
    if (rc == AB_OK)
        rc = out_str(k, "\",\"last_seq\":");
    if (rc == AB_OK)
        rc = out_u(k, h->last_seq);
    if (rc == AB_OK)
        rc = out_str(k, ",\"last_pos\":");
    if (rc == AB_OK)
        rc = out_u(k, h->last_pos);
    if (rc == AB_OK)
        rc = out_str(k, ",\"epoch\":");
    if (rc == AB_OK)
        rc = out_u(k, h->epoch);
    if (rc == AB_OK)
        rc = out_str(k, h->orphaned ? ",\"orphaned\":true}" : "}");
    return rc;
}

void ab__gw_runs(ab__gw_req_t *r)
{
    call_t k;
    ab_heads_reply_t h;
    ab_heads_t q = {.thread = SV(r->route->thread)};
    ab_status_t rc = call_begin(&k, r);
    if (rc == AB_OK)
        rc = ab_conn_heads(k.c, &q, k.doc, &h, 0, &k.err);
    if (rc == AB_OK)
        rc = out_str(&k, "{\"thread\":");
    if (rc == AB_OK)
        rc = out_q(&k, q.thread);
    if (rc == AB_OK)
        rc = out_str(&k, ",\"head_pos\":");
    if (rc == AB_OK)
        rc = out_u(&k, h.head_pos);
    if (rc == AB_OK)
        rc = out_str(&k, ",\"runs\":[");
    for (size_t i = 0; rc == AB_OK && i < h.nheads; i++) {
        if (i > 0)
            rc = out_str(&k, ",");
        if (rc == AB_OK)
            rc = put_head(&k, &h.heads[i]);
    }
    if (rc == AB_OK)
        rc = out_str(&k, "]}\n");
    call_end(&k, rc, NULL);
}

static ab_status_t put_agent(call_t *k, const ab_served_agent_t *a)
{
    ab_status_t rc = out_str(k, "{\"name\":");
    if (rc == AB_OK)
        rc = out_q(k, a->name);
    if (rc == AB_OK)
        rc = out_str(k, ",\"capacity\":");
    if (rc == AB_OK)
        rc = out_u(k, a->capacity);
    if (rc == AB_OK)
        rc = out_str(k, ",\"actions\":[");
    for (size_t i = 0; rc == AB_OK && i < a->nactions; i++) {
        rc = i ? out_str(k, ",") : AB_OK;
        if (rc == AB_OK)
            rc = out_q(k, a->actions[i]);
    }
    return rc == AB_OK ? out_str(k, "]}") : rc;
}

static ab_status_t put_worker(call_t *k, const ab_worker_info_t *w)
{
    ab_status_t rc = out_str(k, "{\"id\":");
    if (rc == AB_OK)
        rc = out_q(k, w->worker_id);
    if (rc == AB_OK)
        rc = out_str(k, ",\"name\":");
    if (rc == AB_OK)
        rc = out_q(k, w->worker);
    if (rc == AB_OK)
        rc = out_str(k, ",\"lease_ms\":");
    if (rc == AB_OK)
        rc = out_u(k, w->lease_ms);
    if (rc == AB_OK)
        rc = out_str(k, ",\"idle_ms\":");
    if (rc == AB_OK)
        rc = out_u(k, w->idle_ms);
    if (rc == AB_OK)
        rc = out_str(k, ",\"calls\":");
    if (rc == AB_OK)
        rc = out_u(k, w->calls);
    if (rc == AB_OK)
        rc = out_str(k, ",\"agents\":[");
    for (size_t i = 0; rc == AB_OK && i < w->nagents; i++) {
        rc = i ? out_str(k, ",") : AB_OK;
        if (rc == AB_OK)
            rc = put_agent(k, &w->agents[i]);
    }
    return rc == AB_OK ? out_str(k, "]}") : rc;
}

void ab__gw_workers(ab__gw_req_t *r)
{
    call_t k;
    ab_workers_reply_t w;
    ab_status_t rc = call_begin(&k, r);
    if (rc == AB_OK)
        rc = ab_conn_workers(k.c, k.doc, &w, 0, &k.err);
    if (rc == AB_OK)
        rc = out_str(&k, "{\"workers\":[");
    for (size_t i = 0; rc == AB_OK && i < w.nworkers; i++) {
        rc = i ? out_str(&k, ",") : AB_OK;
        if (rc == AB_OK)
            rc = put_worker(&k, &w.workers[i]);
    }
    if (rc == AB_OK)
        rc = out_str(&k, "]}\n");
    call_end(&k, rc, NULL);
}

/* ---- a run's events as JSON Lines ------------------------------------------------- */

typedef struct export
{
    call_t *k;
    ab_doc_t *edoc;
    ab_buf_t row; /* one line, before it joins k->out */
    size_t held;  /* bytes of the export budget taken: k->out.cap */
}
export_t;

/* One JSON line of a stored event into x->row. */
static ab_status_t export_line(export_t *x, const ab_stamp_t *st, const uint8_t *ev, size_t len,
                               ab_error_t *err)
{
    ab_event_t e;
    ab_limits_t lim = ab__limits_stored(); /* events the broker stored */
    ab_status_t rc = ab_event_decode(x->edoc, ev, len, &lim, &e, err);
    char head[96];
    int n =
        snprintf(head, sizeof head,
                 "{\"pos\":%llu,\"time\":%lld,\"seq\":%llu,\"event\":", (unsigned long long)st->pos,
                 (long long)st->time_us, (unsigned long long)e.seq);
    x->row.len = 0;
    if (rc == AB_OK)
        rc = ab_buf_append(&x->row, head, (size_t)n);
    if (rc == AB_OK)
        rc = ab_val_to_json(e.body, &x->row);
    return rc == AB_OK ? ab_buf_append(&x->row, "}\n", 2) : rc;
}

/* Room in k->out for @p n more bytes, each byte of its buffer taken from the export budget
 * before it is allocated (invariant 3). The buffer grows as ab_buf does, doubling from 256. */
static ab_status_t export_room(export_t *x, size_t n, ab_error_t *err)
{
    ab_buf_t *out = &x->k->out;
    size_t need = out->len + n, cap = out->cap ? out->cap : 256;
    if (need > AB_GW_EXPORT_MAX)
        return ab_error_set(err, AB_TOO_LARGE, NULL, "the export is above %u bytes",
                            AB_GW_EXPORT_MAX);
    if (need <= out->cap)
        return AB_OK;
    while (cap < need)
        cap *= 2;
    ab_status_t rc = ab__gw_export_take(x->k->r->gw, cap - x->held, err);
    if (rc != AB_OK)
        return rc;
    x->held = cap;
    rc = ab_buf_reserve(out, n);
    if (rc == AB_OK && out->cap > x->held) /* grown past what was taken: take the rest */
        rc = ab__gw_export_take(x->k->r->gw, out->cap - x->held, err);
    if (rc == AB_OK)
        x->held = out->cap > x->held ? out->cap : x->held;
    return rc;
}

static ab_status_t export_row(void *ud, const ab_stamp_t *st, const uint8_t *ev, size_t len,
                              ab_error_t *err)
{
    export_t *x = ud;
    ab_status_t rc = export_line(x, st, ev, len, err);
    if (rc == AB_OK)
        rc = export_room(x, x->row.len, err);
    return rc == AB_OK ? ab_buf_append(&x->k->out, x->row.data, x->row.len) : rc;
}

void ab__gw_run_events(ab__gw_req_t *r)
{
    call_t k;
    export_t x = {.k = &k, .row = AB_BUF_INIT};
    ab_status_t rc = call_begin(&k, r);
    ab_replay_end_t end;
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay = (ab_replay_t){
        .scope = AB_REPLAY_RUN, .thread = SV(r->route->thread), .run = SV(r->route->run)};
    if (rc == AB_OK)
        rc = ab_doc_new(&x.edoc);
    if (rc == AB_OK)
        rc = ab_conn_replay(k.c, &q, export_row, &x, k.doc, &end, 0, &k.err);
    if (rc == AB_OK && end.events == 0 &&
        (end.nheads == 0 || end.heads[0].status == AB_RUN_STATUS_UNKNOWN))
        rc = ab_error_set(&k.err, AB_NOT_FOUND, "path/run", "run %s of thread %s has no event",
                          r->route->run, r->route->thread);
    ab_doc_destroy(&x.edoc);
    ab_buf_free(&x.row);
    if (rc == AB_OK) { /* the buffer and its budget go to the response, freed once it is sent */
        rc = ab__gw_reply_export(r, &k.out, x.held, "application/jsonl");
        x.held = 0; /* given back by the response, or by a failed reply_export */
    }
    if (rc == AB_OK)
        call_free(&k);
    else
        call_end(&k, rc, NULL);
    ab__gw_export_give(r->gw, x.held); /* after the buffer is freed */
}

/* ---- cancel, resume, actions ---------------------------------------------------- */

static const char *cancel_name(ab_cancel_outcome_t o)
{
    return o == AB_CANCEL_DEQUEUED    ? "dequeued"
           : o == AB_CANCEL_DELIVERED ? "delivered"
           : o == AB_CANCEL_NO_OWNER  ? "no_owner"
                                      : "ended";
}

void ab__gw_cancel(ab__gw_req_t *r)
{
    call_t k;
    ab_cancel_reply_t a;
    ab_status_t rc = call_begin(&k, r);
    if (rc == AB_OK)
        rc = parse_body(&k, false);
    if (rc == AB_OK)
        rc = body_object(&k);
    const ab_val_t *why = ab_val_get(k.body, "reason");
    if (rc == AB_OK && why && why->type != AB_VAL_STR)
        rc = ab_error_set(&k.err, AB_INVALID_ARGUMENT, "body/reason", "want a string");
    ab_cancel_run_t q = {.thread = SV(r->route->thread), .run = SV(r->route->run)};
    if (why && why->type == AB_VAL_STR)
        q.reason = (ab_str_t){why->u.s, why->len};
    if (rc == AB_OK)
        rc = ab_conn_cancel_run(k.c, &q, k.doc, &a, 0, &k.err);
    if (rc == AB_OK)
        rc = out_str(&k, "{\"outcome\":\"");
    if (rc == AB_OK)
        rc = out_str(&k, cancel_name(a.outcome));
    if (rc == AB_OK)
        rc = out_str(&k, "\",\"request\":");
    if (rc == AB_OK)
        rc = out_u(&k, a.request);
    if (rc == AB_OK)
        rc = out_str(&k, "}\n");
    call_end(&k, rc, NULL);
}

static ab_status_t put_accepted(call_t *k, const ab_run_accepted_t *a)
{
    ab_status_t rc = out_str(k, "{\"request\":");
    if (rc == AB_OK)
        rc = out_u(k, a->request);
    if (rc == AB_OK)
        rc = out_str(k, ",\"agent\":");
    if (rc == AB_OK)
        rc = out_q(k, a->agent);
    if (rc == AB_OK)
        rc = out_str(k, ",\"thread\":");
    if (rc == AB_OK)
        rc = out_q(k, a->thread);
    if (rc == AB_OK)
        rc = out_str(k, ",\"run\":");
    if (rc == AB_OK)
        rc = out_q(k, a->run);
    if (rc == AB_OK)
        rc = out_str(k, ",\"state\":\"");
    if (rc == AB_OK)
        rc = out_str(k, ab_request_state_name(a->state));
    if (rc == AB_OK)
        rc = out_str(k, a->existing ? "\",\"existing\":true}\n" : "\",\"existing\":false}\n");
    return rc;
}

/* "body/decisions/ID" (ID escaped as RFC 6901 says) into @p out; ab_error_set() cuts a pointer
 * longer than a field holds back to "body/decisions". */
static const char *decision_field(char *out, size_t cap, const ab_kv_t *kv)
{
    snprintf(out, cap, "body/decisions");
    ab_path_push_key(out, cap, kv->key, kv->klen);
    return out;
}

/* A request made of @p field (@p what) above the broker's max_header_bytes (@p actual 0: not
 * known), refused naming @p field (invariant 4). */
static ab_status_t header_too_large(call_t *k, const char *what, const char *field, size_t actual)
{
    uint32_t max = ab_conn_limits(k->c)->max_header_bytes;
    ab_error_clear(&k->err);
    ab_status_t rc = ab_error_set(&k->err, AB_TOO_LARGE, field,
                                  "the %s request made of %s is over the broker's "
                                  "max_header_bytes %u",
                                  what, field, max);
    ab_error_detail_int(&k->err, "limit", max);
    if (actual)
        ab_error_detail_int(&k->err, "actual", (int64_t)actual);
    return rc;
}

/* Request @p m as the connection sends it fits the broker's max_header_bytes, else it is
 * refused here naming @p field, where its bulk came from (invariant 4): the broker would answer
 * too_large naming no field. Measured with the longest cid a request may carry (INT64_MAX), so
 * never under what is sent. */
static ab_status_t header_fits(call_t *k, ab_msg_t *m, const char *what, const char *field)
{
    ab_buf_t b = AB_BUF_INIT;
    m->v = ab_conn_version(k->c);
    m->cid = INT64_MAX;
    ab_status_t rc = ab_msg_encode(m, &b, &k->err);
    size_t len = b.len;
    ab_buf_free(&b);
    if (rc != AB_OK || len <= ab_conn_limits(k->c)->max_header_bytes)
        return rc;
    return header_too_large(k, what, field, len);
}

/* {"decisions": {ID: "approve"|"deny"|"cancel"}} as a ResumeEntry array (msgpack JSON). */
static ab_status_t decisions_json(call_t *k, const ab_val_t *d, ab_buf_t *json)
{
    if (d == NULL || d->type != AB_VAL_MAP || d->len == 0)
        return ab_error_set(&k->err, AB_INVALID_ARGUMENT, "body/decisions",
                            "want an object of interrupt id -> \"approve\", \"deny\" or "
                            "\"cancel\"");
    ab_status_t rc = ab_buf_append(json, "[", 1);
    for (size_t i = 0; rc == AB_OK && i < d->len; i++) {
        const ab_kv_t *kv = &d->u.pairs[i];
        const ab_val_t *v = &kv->val;
        const char *tail = ab_val_str_eq(v, "approve")  ? ",\"status\":\"resolved\",\"payload\":"
                                                          "{\"approved\":true}}"
                           : ab_val_str_eq(v, "deny")   ? ",\"status\":\"resolved\",\"payload\":"
                                                          "{\"approved\":false}}"
                           : ab_val_str_eq(v, "cancel") ? ",\"status\":\"cancelled\"}"
                                                        : NULL;
        char field[AB_ERROR_FIELD_MAX + 4];
        if (tail == NULL)
            return ab_error_set(
                &k->err, AB_INVALID_ARGUMENT, decision_field(field, sizeof field, kv),
                "interrupt %.*s: want \"approve\", \"deny\" or \"cancel\"", (int)kv->klen, kv->key);
        rc = ab_buf_append(json, i ? ",{\"interruptId\":" : "{\"interruptId\":", i ? 16 : 15);
        if (rc == AB_OK)
            rc = ab_json_quote(json, kv->key, kv->klen);
        if (rc == AB_OK)
            rc = ab_buf_append(json, tail, strlen(tail));
    }
    return rc == AB_OK ? ab_buf_append(json, "]", 1) : rc;
}

/* The resume array: body.resume as given, or body.decisions turned into one, whose msgpack is at
 * most what a request header may hold (invariant 4). */
static ab_status_t resume_array(call_t *k, ab_doc_t *doc, ab_buf_t *mp, const ab_val_t **out)
{
    const ab_val_t *raw = ab_val_get(k->body, "resume");
    if (raw != NULL) {
        *out = raw;
        return AB_OK;
    }
    ab_buf_t json = AB_BUF_INIT;
    ab_limits_t lim = ab_limits_default();
    uint32_t max = ab_conn_limits(k->c)->max_header_bytes;
    ab_status_t rc = decisions_json(k, ab_val_get(k->body, "decisions"), &json);
    if (rc == AB_OK)
        rc = ab_json_to_msgpack((const char *)json.data, json.len, lim.max_depth, max,
                                AB_INVALID_ARGUMENT, mp, &k->err);
    if (rc == AB_TOO_LARGE)
        rc = header_too_large(k, "resume_run", "body/decisions", 0);
    if (rc == AB_OK)
        rc = ab_doc_parse(doc, mp->data, mp->len, max, lim.max_depth, AB_INVALID_ARGUMENT, out,
                          &k->err);
    ab_buf_free(&json);
    return rc;
}

void ab__gw_resume(ab__gw_req_t *r)
{
    call_t k;
    ab_run_accepted_t a;
    ab_doc_t *rdoc = NULL;
    ab_buf_t rmp = AB_BUF_INIT;
    const ab_val_t *arr = NULL;
    /* empty until filled: the request below reads them whether or not an earlier step failed */
    char key[AB_ID_MAX_BYTES + 64] = "";
    char agent[AB_ID_MAX_BYTES + 1] = "";
    char nrun[AB_ID_MAX_BYTES + 1] = "";
    ab_status_t rc = call_begin(&k, r);
    if (rc == AB_OK)
        rc = parse_body(&k, true);
    if (rc == AB_OK)
        rc = body_object(&k);
    if (rc == AB_OK)
        rc = body_id(&k, "agent", false, 0, agent, sizeof agent);
    if (rc == AB_OK)
        rc = body_id(&k, "newRunId", false, 0, nrun, sizeof nrun);
    if (rc == AB_OK && (rc = ab_doc_new(&rdoc)) == AB_OK)
        rc = resume_array(&k, rdoc, &rmp, &arr);
    if (rc == AB_OK)
        rc = make_key(&k, AB_GW_KEY_TAG_RESUME, r->route->thread, r->route->run, "path/run", key,
                      sizeof key);
    ab_resume_run_t q = {
        .thread = SV(r->route->thread), .run = SV(r->route->run), .resume = arr, .key = SV(key)};
    if (agent[0] && rc == AB_OK)
        q.agent = SV(agent);
    if (nrun[0] && rc == AB_OK)
        q.new_run = SV(nrun);
    ab_msg_t m = {.op = AB_OP_RESUME_RUN, .u.resume_run = q};
    if (rc == AB_OK)
        rc = header_fits(&k, &m, "resume_run",
                         ab_val_get(k.body, "resume") ? "body/resume" : "body/decisions");
    if (rc == AB_OK)
        rc = ab_conn_resume_run(k.c, &q, k.doc, &a, 0, &k.err);
    if (rc == AB_OK)
        rc = accepted_is(&k, &a, r->route->thread, nrun[0] ? nrun : NULL, "path/thread");
    if (rc == AB_OK)
        rc = put_accepted(&k, &a);
    call_end(&k, rc, NULL);
    ab_doc_destroy(&rdoc);
    ab_buf_free(&rmp);
}

void ab__gw_action(ab__gw_req_t *r)
{
    call_t k;
    ab_action_reply_t a;
    const char *raw = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "thread");
    char tid[AB_GW_TOKEN_MAX + 1] = "";
    ab_status_t rc = call_begin(&k, r);
    if (rc == AB_OK && raw) /* percent-decoded, as the path's ids and GET /threads' are */
        rc = ab__gw_query_id(raw, strlen(raw), "thread", tid, &k.err);
    const char *thread = tid[0] ? tid : NULL;
    if (rc == AB_OK)
        rc = parse_body(&k, false); /* checked here: the payload is JSON, errors name "body" */
    if (rc == AB_OK)
        rc = ab_conn_invoke_action(k.c, r->route->agent, r->route->action, r->body, thread, 0,
                                   k.doc, &a, &k.err);
    if (rc == AB_OK)
        rc = out_str(&k, "{\"worker\":");
    if (rc == AB_OK)
        rc = out_q(&k, a.worker_id);
    if (rc == AB_OK)
        rc = out_str(&k, ",\"result\":");
    if (rc == AB_OK)
        rc = a.result ? ab_val_to_json(a.result, &k.out) : out_str(&k, "null");
    if (rc == AB_OK)
        rc = out_str(&k, "}\n");
    call_end(&k, rc, NULL);
}

/* ---- POST /agents/{agent} -------------------------------------------------------- */

static bool wants_json_only(ab__gw_req_t *r)
{
    const char *a = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Accept");
    return a && strstr(a, "text/event-stream") == NULL && strstr(a, "application/json") != NULL;
}

void ab__gw_agent_run(ab__gw_req_t *r)
{
    call_t k;
    ab_run_accepted_t a;
    char thread[AB_ID_MAX_BYTES + 1], run[AB_ID_MAX_BYTES + 1], key[AB_ID_MAX_BYTES + 64];
    ab_status_t rc = call_begin(&k, r);
    if (rc == AB_OK)
        rc = parse_body(&k, true);
    if (rc == AB_OK && k.body->type != AB_VAL_MAP)
        rc = ab_error_set(&k.err, AB_INVALID_ARGUMENT, "body",
                          "want a RunAgentInput object, got %s", ab_val_type_name(k.body->type));
    if (rc == AB_OK)
        rc = body_id(&k, "threadId", true, 0, thread, sizeof thread);
    if (rc == AB_OK) /* at most what its idempotency key holds */
        rc = body_id(&k, "runId", true, ab__gw_key_run_max(AB_GW_KEY_TAG_RUN), run, sizeof run);
    if (rc == AB_OK)
        rc = make_key(&k, AB_GW_KEY_TAG_RUN, thread, run, "body/runId", key, sizeof key);
    ab_start_run_t q = {.agent = SV(r->route->agent), .input = k.body};
    if (rc == AB_OK) {
        q.thread = SV(thread);
        q.run = SV(run);
        q.key = SV(key);
        ab_msg_t m = {.op = AB_OP_START_RUN, .u.start_run = q};
        rc = header_fits(&k, &m, "start_run", "body");
    }
    bool stream = !wants_json_only(r); /* its slot first: a 429 starts nothing (invariant 5) */
    if (rc == AB_OK && stream)
        rc = ab__gw_stream_reserve(r->gw, &k.err);
    if (rc == AB_OK) {
        rc = ab_conn_start_run(k.c, &q, k.doc, &a, 0, &k.err);
        if (rc == AB_OK)
            rc = accepted_is(&k, &a, thread, run, "body/runId");
        if (rc != AB_OK && stream)
            ab__gw_stream_release(r->gw);
    }
    if (rc == AB_OK)
        atomic_fetch_add(&ab__gw_counters(r->gw)->runs_started, 1);
    if (rc != AB_OK || !stream) {
        if (rc == AB_OK)
            rc = put_accepted(&k, &a);
        call_end(&k, rc, NULL);
        return;
    }
    uint64_t request = a.request;
    call_free(&k);
    ab__gw_run_stream(r, thread, run, request);
}

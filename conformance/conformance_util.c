/*
 * conformance_util.c - helpers of the conformance suite (see conformance.h):
 * unique ids, envelopes, one-event publishes, claims, raw header frames and
 * the SUB socket on the event endpoint.
 *
 * Invariants:
 *  1. Every receive is bounded (zmq_poll with a timeout, or the client
 *     library's per-call timeout).
 *  2. On failure a helper returns -1 (or NULL) with cf->reason set, so a
 *     check can return CONF_FAIL at once.
 */
#include "ab_common.h"
#include "conformance.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

conf_result_t conf_fail(conf_t *cf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cf->reason, sizeof(cf->reason), fmt, ap);
    va_end(ap);
    return CONF_FAIL;
}

conf_result_t conf_need(conf_t *cf, const char *cap)
{
    size_t n = 0;
    const ab_cap_t *caps = ab_conn_caps(cf->c, &n);
    ab_cap_state_t s = ab_caps_lookup(caps, n, cap);
    if (s == AB_CAP_AVAILABLE || s == AB_CAP_DEGRADED)
        return CONF_PASS;
    snprintf(cf->reason, sizeof(cf->reason), "capability %s not announced (%s)", cap,
             ab_cap_state_name(s));
    return CONF_SKIP;
}

void conf_id(conf_t *cf, char *out, size_t size, const char *tag)
{
    snprintf(out, size, "%s-%s-%u", cf->prefix, tag, ++cf->serial);
    conf_note_id(cf, out);
}

ab_conn_t *conf_connect(conf_t *cf, const uint32_t *versions, size_t n, ab_error_t *err)
{
    ab_conn_opts_t o = {.client_name = "agentbus-conformance",
                        .timeout_ms = cf->timeout_ms,
                        .versions = versions,
                        .nversions = n};
    ab_conn_t *c = NULL;
    ab_status_t st = ab_conn_new(&c, cf->endpoint, &o, err);
    if (st != AB_OK) {
        conf_fail(cf, "hello to %s: %s: %s", cf->endpoint, ab_status_name(st), err->message);
        return NULL;
    }
    return c;
}

static void body_json(char *b, size_t size, const char *thread, const char *run, uint64_t seq,
                      conf_body_t kind)
{
    if (kind == CONF_BODY_FINISH)
        snprintf(b, size, "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\"}",
                 thread, run);
    else if (kind == CONF_BODY_ALT)
        snprintf(b, size,
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"other %llu\"}",
                 (unsigned long long)seq);
    else if (seq == 1)
        snprintf(b, size,
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                 "\"protocolVersion\":\"1.0\"}",
                 thread, run);
    else if (seq == 2)
        snprintf(b, size,
                 "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\",\"role\":"
                 "\"assistant\"}");
    else
        snprintf(b, size,
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"part %llu\"}",
                 (unsigned long long)seq);
}

int conf_envelope(conf_t *cf, ab_buf_t *out, const char *thread, const char *run, uint64_t seq,
                  uint64_t epoch, conf_body_t body)
{
    char json[1024];
    body_json(json, sizeof(json), thread, run, seq, body);
    ab_error_t err = AB_ERROR_INIT;
    if (ab_envelope_json(out, ab_conn_version(cf->c), thread, run, seq, epoch, json, &err) !=
        AB_OK) {
        conf_fail(cf, "cannot build envelope: %s", err.message);
        return -1;
    }
    return 0;
}

int conf_publish1(conf_t *cf, ab_conn_t *c, const ab_buf_t *env, ab_result_t *res, ab_error_t *rej)
{
    const ab_result_t *r = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_publish(c, env, 1, cf->doc, &r, cf->timeout_ms, &err);
    if (st != AB_OK) {
        conf_fail(cf, "publish refused as a whole: %s: %s", ab_status_name(st), err.message);
        return -1;
    }
    *res = r[0];
    if (rej) {
        ab_error_clear(rej);
        if (r[0].error)
            *rej = *r[0].error;
    }
    res->error = NULL;
    return 0;
}

int conf_claim(conf_t *cf, ab_conn_t *c, const char *thread, const char *run, uint64_t *epoch)
{
    ab_claimed_t cl;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_claim(c, thread, run, cf->doc, &cl, cf->timeout_ms, &err);
    if (st != AB_OK) {
        conf_fail(cf, "claim %s/%s: %s: %s", thread, run, ab_status_name(st), err.message);
        return -1;
    }
    if (cl.epoch < 1 || cl.last_seq != 0) {
        conf_fail(cf, "claim of a new run answered epoch %llu last_seq %llu",
                  (unsigned long long)cl.epoch, (unsigned long long)cl.last_seq);
        return -1;
    }
    *epoch = cl.epoch;
    return 0;
}

int conf_send_raw(conf_t *cf, const ab_buf_t *header)
{
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_send_raw(cf->c, header, 1, &err) != AB_OK) {
        conf_fail(cf, "send: %s", err.message);
        return -1;
    }
    return 0;
}

int conf_sub_open(conf_t *cf, const void *topic, size_t len)
{
    cf->sub = zmq_socket(ab_conn_zmq_ctx(cf->c), ZMQ_SUB);
    int zero = 0;
    if (!cf->sub || zmq_setsockopt(cf->sub, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        zmq_setsockopt(cf->sub, ZMQ_SUBSCRIBE, topic, len) != 0 ||
        zmq_setsockopt(cf->sub, ZMQ_SUBSCRIBE, AB_TOPIC_HEARTBEAT, AB_TOPIC_HEARTBEAT_LEN) != 0 ||
        zmq_connect(cf->sub, ab_conn_event_endpoint(cf->c)) != 0) {
        conf_fail(cf, "SUB on %s: %s", ab_conn_event_endpoint(cf->c), zmq_strerror(zmq_errno()));
        return -1;
    }
    /* PROTOCOL.md 6.2 step 1: once a heartbeat arrives the subscription is active. */
    ab_buf_t t = {0}, s = {0}, e = {0};
    long end = ab__mono_ms() + CONF_HEARTBEAT_MS;
    int rc = 0, nf = 0;
    while (rc == 0 && ab__mono_ms() < end) {
        rc = conf_sub_recv(cf, (int)(end - ab__mono_ms()), &t, &s, &e, &nf);
        if (rc == 1 && !conf_is_heartbeat(&t))
            rc = 0; /* an event before the first heartbeat: ignore */
    }
    ab_buf_free(&t);
    ab_buf_free(&s);
    ab_buf_free(&e);
    if (rc != 1) {
        conf_fail(cf, "no heartbeat on %s within %d ms", ab_conn_event_endpoint(cf->c),
                  CONF_HEARTBEAT_MS);
        return -1;
    }
    return 0;
}

bool conf_is_heartbeat(const ab_buf_t *topic)
{
    return topic->len == AB_TOPIC_HEARTBEAT_LEN &&
           memcmp(topic->data, AB_TOPIC_HEARTBEAT, AB_TOPIC_HEARTBEAT_LEN) == 0;
}

static int copy_part(zmq_msg_t *m, ab_buf_t *out)
{
    ab_buf_reset(out);
    return ab_buf_append(out, zmq_msg_data(m), zmq_msg_size(m)) == AB_OK ? 0 : -1;
}

int conf_sub_recv(conf_t *cf, int ms, ab_buf_t *topic, ab_buf_t *body, ab_buf_t *extra,
                  int *nframes)
{
    zmq_pollitem_t it = {.socket = cf->sub, .events = ZMQ_POLLIN};
    int rc = zmq_poll(&it, 1, ms < 0 ? 0 : ms);
    if (rc == 0)
        return 0;
    if (rc < 0) {
        conf_fail(cf, "zmq_poll: %s", zmq_strerror(zmq_errno()));
        return -1;
    }
    ab_buf_t *outs[3] = {topic, body, extra};
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, cf->sub, 0) < 0) {
            zmq_msg_close(&m);
            conf_fail(cf, "zmq_msg_recv: %s", zmq_strerror(zmq_errno()));
            return -1;
        }
        if (n < 3 && copy_part(&m, outs[n]) != 0) {
            zmq_msg_close(&m);
            conf_fail(cf, "out of memory");
            return -1;
        }
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        n++;
    }
    *nframes = n;
    return 1;
}
bool conf_contains(const uint8_t *hay, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; n && i + n <= len; i++)
        if (memcmp(hay + i, needle, n) == 0)
            return true;
    return false;
}

int conf_recs_add(conf_recs_t *r, uint64_t pos, const uint8_t *env, size_t len)
{
    if (r->only && !conf_contains(env, len, r->only))
        return 0;
    if (r->n == CONF_MAX_RECS) {
        r->overflow = true;
        return 0;
    }
    r->pos[r->n] = pos;
    r->off[r->n] = r->bytes.len;
    r->len[r->n] = len;
    if (ab_buf_append(&r->bytes, env, len) != AB_OK)
        return -1;
    r->n++;
    return 0;
}

long conf_recs_find(const conf_recs_t *r, const uint8_t *env, size_t len)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->len[i] == len && memcmp(r->bytes.data + r->off[i], env, len) == 0)
            return (long)i;
    return -1;
}

void conf_recs_free(conf_recs_t *r)
{
    ab_buf_free(&r->bytes);
    r->n = 0;
}

static ab_status_t recs_row(void *ud, const ab_stamp_t *stamp, const uint8_t *event, size_t len,
                            ab_error_t *err)
{
    if (conf_recs_add(ud, stamp->pos, event, len) != 0)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    return AB_OK;
}

int conf_replay(conf_t *cf, const ab_msg_t *req, conf_recs_t *out, ab_replay_end_t *end)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_replay(cf->c, req, recs_row, out, cf->doc, end, cf->timeout_ms, &err);
    if (st != AB_OK) {
        conf_fail(cf, "replay: %s: %s%s%s", ab_status_name(st), err.message,
                  err.field[0] ? " field " : "", err.field);
        return -1;
    }
    return 0;
}

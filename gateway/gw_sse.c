/*
 * gw_sse.c - event streams as Server-Sent Events: GET /threads/{t}/events
 * (a thread from a cursor, then live) and the run stream of POST /agents
 * (one run from its start to its terminal event).
 *
 * A stream is a subscriber of the client library (agentbus/subscriber.h,
 * which does the replay-then-live seam) polled by a pump thread of its own;
 * every event becomes one frame "id: POS\ndata: JSON\n\n" appended to the
 * stream's queue, which the connection's thread (libmicrohttpd's content
 * reader) drains onto the socket.
 *
 * Invariants:
 *  1. The SSE id of an event is its commit position `pos`. A thread stream
 *     with cursor P sends exactly the events of the thread with pos > P, in
 *     strictly increasing pos, each once: its subscriber is an ordered
 *     thread subscription from P (agentbus/subscriber.h `ordered`), which
 *     delivers a live event only when nothing of the thread can lie between
 *     it and the last one delivered, and otherwise replays the thread from
 *     that position (scope thread, after_pos) before live delivery goes on.
 *     So after every frame sent, "every event of the thread up to this id
 *     was sent" holds, and a client resuming from any id it read loses
 *     nothing. A run stream is its run in seq order (commit order too).
 *  2. Bounded: a stream's queue holds at most opts.sse_buf bytes (or one
 *     event when a single one is larger). An event that does not fit makes
 *     the pump wait for the reader to make room (so a replay runs at the
 *     client's pace, and live events wait in the subscriber's bounded
 *     buffers or are dropped there and replayed); a queue that stays full for
 *     opts.slow_ms cuts the stream: the queue is freed, the pump stops, the
 *     subscriber is closed and the connection's socket is shut down (the
 *     reader is not called while libmicrohttpd holds unsent bytes, so without
 *     it a client that reads nothing would keep its connection, thread and
 *     stream slot until the idle timeout); the client sees the end of the
 *     stream, reconnects with its last id and loses nothing.
 *  3. Heartbeat: a ": hb" comment after opts.heartbeat_ms without output.
 *  4. The pump owns the subscriber; the reader touches only the queue and
 *     the flags, under the stream's mutex. The free callback stops and joins
 *     the pump before anything is freed.
 *  5. A run stream whose run has not sent its first event asks the broker
 *     every CHECK_MS whether the run's request was cancelled before it
 *     started (then no event will ever come): the stream then ends with an
 *     error frame of code request_aborted instead of waiting forever.
 *  6. A stream counts against opts.streams_max from ab__gw_stream_reserve()
 *     until it is freed: POST /agents reserves its slot before it starts the
 *     run, so a 429 means nothing was started.
 */
#include "gateway.h"

#include "ab_common.h"
#include "agentbus/client.h"
#include "agentbus/json.h"
#include "agentbus/subscriber.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define POLL_MS  200  /* pump's poll slice: how soon it sees a stop */
#define WAIT_MS  250  /* reader's wait slice: how soon it sees a stop or a heartbeat */
#define CHECK_MS 1000 /* a run stream's request check before the run's first event */
/* A stream's SUB keeps at most this many live messages (each at most 32 KiB of records,
 * docs/PROTOCOL.md 6.2) while the pump waits for its client; past it they are dropped
 * and the subscriber fills the hole by replay. */
#define AB_GW_SUB_HWM 64
/* ... and its kernel receive buffer at most this many bytes: without a bound TCP's
 * autotuning lets one stream's socket hold tens of MiB (net.ipv4.tcp_rmem) while the pump
 * waits for a slow client. */
#define AB_GW_SUB_RCVBUF (256 * 1024)

typedef struct gw_stream {
    ab__gw_t *gw;
    ab_sub_t *sub;
    pthread_t pump;
    bool pump_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* data or an end for the reader */
    pthread_cond_t room; /* room in the queue for the pump */
    ab_buf_t q;          /* frames not yet handed to the socket, from q_off */
    size_t q_off;
    bool done, cut, stop; /* under mu */
    int fd;               /* the connection's socket, shut down by a cut (invariant 2) */
    bool end_at_terminal;
    uint64_t after_pos; /* the request's cursor: events at or below it are not sent */
    int64_t last_out_ms;
    ab_buf_t frame; /* pump's scratch */
    ab_error_t err; /* a fatal subscriber error, sent as an error event */
    /* A run stream of POST /agents: its request, asked about until the run's first event
     * (invariant 5); the connection's keys are the request's (they live with the gateway). */
    uint64_t request;
    bool seen_event;
    int64_t next_check_ms;
    const ab_keypair_t *key;
    const char *server_key;
} gw_stream_t;

/* ---- the pump ----------------------------------------------------------------- */

static bool terminal(const ab_val_t *body)
{
    const ab_val_t *t = ab_val_get(body, "type");
    return ab_val_str_eq(t, "RUN_FINISHED") || ab_val_str_eq(t, "RUN_ERROR");
}

static bool fits(const gw_stream_t *s, size_t n)
{
    return s->q.len - s->q_off + n <= ab__gw_options(s->gw)->sse_buf || s->q.len == s->q_off;
}

/* Wait (under mu) until the frame fits, the stream stops, or slow_ms passes. */
static bool wait_room(gw_stream_t *s, size_t n)
{
    int64_t until = ab__mono_ms() + ab__gw_options(s->gw)->slow_ms;
    while (!fits(s, n) && !s->stop) {
        int64_t left = until - ab__mono_ms();
        if (left <= 0)
            return false;
        struct timespec ts;
        ab__deadline_in(&ts, (int)(left < WAIT_MS ? left : WAIT_MS));
        pthread_cond_timedwait(&s->room, &s->mu, &ts);
    }
    return !s->stop;
}

/* Cut the client off (under mu, invariant 2): the queue is freed and the socket shut down, so
 * libmicrohttpd's next send fails and it closes the connection, whatever it still holds. The
 * socket stays open (only libmicrohttpd closes it, after the stream is freed). */
static void cut_off(gw_stream_t *s)
{
    s->cut = true;
    ab_buf_free(&s->q);
    s->q_off = 0;
    if (s->fd >= 0)
        shutdown(s->fd, SHUT_RDWR);
}

/* Append the frame to the queue (waiting for room, invariant 2); false: cut or stopped. */
static bool enqueue(gw_stream_t *s, const ab_buf_t *f, bool last)
{
    pthread_mutex_lock(&s->mu);
    bool ok = wait_room(s, f->len);
    if (ok && s->q_off > 0 && s->q_off > s->q.len / 2) { /* compact: keep it near its content */
        memmove(s->q.data, s->q.data + s->q_off, s->q.len - s->q_off);
        s->q.len -= s->q_off;
        s->q_off = 0;
    }
    if (ok && ab_buf_append(&s->q, f->data, f->len) != AB_OK)
        ok = false;
    if (!ok && !s->stop)
        cut_off(s);
    if (last)
        s->done = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static int on_event(void *ud, const ab_sub_event_t *e)
{
    gw_stream_t *s = ud;
    if (e->stamp.pos <= s->after_pos)
        return 0;
    char head[40];
    int n = snprintf(head, sizeof head, "id: %llu\ndata: ", (unsigned long long)e->stamp.pos);
    s->frame.len = 0;
    ab_status_t rc = ab_buf_append(&s->frame, head, (size_t)n);
    if (rc == AB_OK)
        rc = ab_val_to_json(e->ev.body, &s->frame);
    if (rc == AB_OK)
        rc = ab_buf_append(&s->frame, "\n\n", 2);
    bool last = s->end_at_terminal && terminal(e->ev.body);
    if (rc != AB_OK || !enqueue(s, &s->frame, last)) {
        pthread_mutex_lock(&s->mu);
        if (rc != AB_OK && !s->cut && !s->stop)
            cut_off(s);
        bool cut = s->cut;
        pthread_mutex_unlock(&s->mu);
        if (cut)
            atomic_fetch_add(&ab__gw_counters(s->gw)->slow_cut, 1);
        return 1;
    }
    s->seen_event = true;
    atomic_fetch_add(&ab__gw_counters(s->gw)->events_sent, 1);
    return last ? 1 : 0;
}

/* A fatal error of the subscriber: one "event: error" frame, then the end. */
static void fail(gw_stream_t *s, const ab_error_t *err)
{
    ab_buf_t f = AB_BUF_INIT;
    if (ab_buf_append(&f, "event: error\ndata: ", 19) == AB_OK &&
        ab__gw_error_json(&f, err) == AB_OK && ab_buf_append(&f, "\n\n", 2) == AB_OK)
        enqueue(s, &f, true);
    pthread_mutex_lock(&s->mu);
    s->done = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    ab_buf_free(&f);
}

static bool pump_goes_on(gw_stream_t *s)
{
    pthread_mutex_lock(&s->mu);
    bool on = !s->stop && !s->done && !s->cut;
    pthread_mutex_unlock(&s->mu);
    return on;
}

/* Whether the stream's request is cancelled (invariant 5); false when unknown. */
static bool request_cancelled(gw_stream_t *s)
{
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_requests_reply_t r;
    ab_conn_opts_t co = {.zmq_ctx = ab__gw_zmq(s->gw),
                         .client_name = "agentbus-gateway",
                         .timeout_ms = ab__gw_options(s->gw)->timeout_ms,
                         .key = s->key,
                         .server_key = s->server_key};
    ab_requests_t q = {.state = AB_REQ_CANCELLED, .after = s->request - 1, .limit = 1};
    bool cancelled = ab_doc_new(&doc) == AB_OK &&
                     ab_conn_new(&c, ab__gw_options(s->gw)->broker, &co, NULL) == AB_OK &&
                     ab_conn_requests(c, &q, doc, &r, 0, NULL) == AB_OK && r.nrequests == 1 &&
                     r.requests[0].request == s->request;
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    return cancelled;
}

static void check_request(gw_stream_t *s)
{
    if (s->request == 0 || s->seen_event || ab__mono_ms() < s->next_check_ms)
        return;
    s->next_check_ms = ab__mono_ms() + CHECK_MS;
    if (!request_cancelled(s))
        return;
    ab_error_t err = AB_ERROR_INIT;
    ab_error_set(&err, AB_REQUEST_ABORTED, "run",
                 "the run's request %llu was cancelled before the run started",
                 (unsigned long long)s->request);
    fail(s, &err);
}

static void *pump_main(void *arg)
{
    gw_stream_t *s = arg;
    while (pump_goes_on(s)) {
        check_request(s);
        ab_error_t err = AB_ERROR_INIT;
        ab_status_t rc = ab_sub_poll(s->sub, POLL_MS, &err);
        if (rc == AB_OK || rc == AB_REQUEST_ABORTED || ab_status_retryable(rc) || rc == AB_IO)
            continue; /* retryable: the subscriber reconnects by itself */
        s->err = err;
        fail(s, &err);
    }
    ab_sub_destroy(&s->sub); /* the pump's own: close it as soon as the stream ends */
    return NULL;
}

/* ---- the reader (the connection's thread) --------------------------------------- */

static ssize_t take(gw_stream_t *s, char *buf, size_t max)
{
    size_t n = s->q.len - s->q_off;
    if (n > max)
        n = max;
    memcpy(buf, s->q.data + s->q_off, n);
    s->q_off += n;
    if (s->q_off == s->q.len)
        s->q.len = s->q_off = 0;
    pthread_cond_signal(&s->room);
    s->last_out_ms = ab__mono_ms();
    return (ssize_t)n;
}

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    gw_stream_t *s = cls;
    int hb = ab__gw_options(s->gw)->heartbeat_ms;
    ssize_t out = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->q.len > s->q_off) {
            out = take(s, buf, max);
            break;
        }
        if (s->cut) {
            out = MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
        if (s->done || s->stop || ab__gw_stopping(s->gw)) {
            out = MHD_CONTENT_READER_END_OF_STREAM;
            break;
        }
        int64_t idle = ab__mono_ms() - s->last_out_ms;
        if (idle >= hb && max >= 6) {
            memcpy(buf, ": hb\n\n", 6);
            s->last_out_ms = ab__mono_ms();
            out = 6;
            break;
        }
        struct timespec ts;
        ab__deadline_in(&ts, (int)(hb - idle < WAIT_MS ? hb - idle : WAIT_MS));
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return out;
}

static void stream_free(void *cls)
{
    gw_stream_t *s = cls;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->room);
    pthread_mutex_unlock(&s->mu);
    if (s->pump_started)
        pthread_join(s->pump, NULL);
    ab_sub_destroy(&s->sub);
    atomic_fetch_sub(&ab__gw_counters(s->gw)->streams, 1);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->room);
    ab_buf_free(&s->q);
    ab_buf_free(&s->frame);
    free(s);
}

/* ---- opening a stream ---------------------------------------------------------- */

/* A stream whose subscriber is made; the response is its reader. Takes sub. */
static void stream_open(ab__gw_req_t *r, ab_sub_t **sub, gw_stream_t *s)
{
    ab_error_t err = AB_ERROR_INIT;
    s->sub = *sub;
    *sub = NULL;
    s->last_out_ms = ab__mono_ms();
    if (ab_buf_append(&s->q, ": agentbus\n\n", 12) != AB_OK ||
        pthread_create(&s->pump, NULL, pump_main, s) != 0) {
        ab_sub_destroy(&s->sub);
        ab_error_set(&err, AB_NOMEM, NULL, "cannot start the stream");
        ab__gw_reply_error(r, &err);
        stream_free(s);
        return;
    }
    s->pump_started = true;
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, reader, s, stream_free);
    if (resp == NULL) {
        stream_free(s);
        return;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    r->status = 200;
    r->resp = resp;
}

ab_status_t ab__gw_stream_reserve(ab__gw_t *gw, ab_error_t *err)
{
    ab__gw_metrics_t *m = ab__gw_counters(gw);
    unsigned max = ab__gw_options(gw)->streams_max;
    if (atomic_fetch_add(&m->streams, 1) < max)
        return AB_OK;
    atomic_fetch_sub(&m->streams, 1);
    ab_error_set(err, AB_OVERLOADED, "streams", "%u event streams are open already", max);
    ab_error_detail_int(err, "limit", max);
    return AB_OVERLOADED;
}

void ab__gw_stream_release(ab__gw_t *gw)
{
    atomic_fetch_sub(&ab__gw_counters(gw)->streams, 1);
}

/* A new stream object on the slot reserved for it (invariant 6), or NULL with the slot given
 * back and the refusal answered. */
static gw_stream_t *stream_new(ab__gw_req_t *r)
{
    ab_error_t err = AB_ERROR_INIT;
    gw_stream_t *s = calloc(1, sizeof *s);
    if (s == NULL) {
        ab__gw_stream_release(r->gw);
        ab_error_set(&err, AB_NOMEM, NULL, "out of memory");
        ab__gw_reply_error(r, &err);
        return NULL;
    }
    atomic_fetch_add(&ab__gw_counters(r->gw)->streams_total, 1);
    s->gw = r->gw;
    s->fd = -1;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci != NULL)
        s->fd = ci->connect_fd;
    s->q = (ab_buf_t)AB_BUF_INIT;
    s->frame = (ab_buf_t)AB_BUF_INIT;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->room, NULL);
    return s;
}

/* The cursor of a request: Last-Event-ID, else ?after= (percent-decoded, as every query
 * parameter is), else 0. A bare "?after" (no '=', which
 * libmicrohttpd keeps with no value) is an empty cursor, refused as "?after=" is. */
static ab_status_t request_cursor(ab__gw_req_t *r, uint64_t *out, ab_error_t *err)
{
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Last-Event-ID");
    if (h != NULL)
        return ab__gw_cursor_parse(h, strlen(h), "Last-Event-ID", out, err);
    const char *q = NULL;
    size_t ql = 0;
    if (MHD_lookup_connection_value_n(r->conn, MHD_GET_ARGUMENT_KIND, "after", 5, &q, &ql) ==
        MHD_YES)
        return ab__gw_query_cursor(q ? q : "", q ? ql : 0, "after", out, err);
    *out = 0;
    return AB_OK;
}

/* Whether the broker serves thread @p t to this request (access, a broker at all): asked
 * before the response starts, so a refusal is an HTTP error, not an error frame. */
static ab_status_t thread_check(ab__gw_req_t *r, const char *t, ab_error_t *err)
{
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_heads_reply_t h;
    ab_heads_t q = {.thread = {t, strlen(t)}};
    ab_status_t rc = ab_doc_new(&doc);
    if (rc == AB_OK)
        rc = ab__gw_connect(r, &c, err);
    if (rc == AB_OK)
        rc = ab_conn_heads(c, &q, doc, &h, 0, err);
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    return rc;
}

static ab_status_t sub_open(ab__gw_req_t *r, ab_sub_opts_t *so, gw_stream_t *s, ab_sub_t **out,
                            ab_error_t *err)
{
    so->on_event = on_event;
    so->ud = s;
    so->zmq_ctx = ab__gw_zmq(r->gw);
    so->timeout_ms = ab__gw_options(r->gw)->timeout_ms;
    so->rcvhwm = AB_GW_SUB_HWM;
    so->rcvbuf = AB_GW_SUB_RCVBUF;
    so->key = r->key;
    so->server_key = r->server_key;
    return ab_sub_new(out, ab__gw_options(r->gw)->broker, so, err);
}

void ab__gw_thread_events(ab__gw_req_t *r)
{
    ab_error_t err = AB_ERROR_INIT;
    uint64_t after = 0;
    ab_sub_t *sub = NULL;
    gw_stream_t *s = NULL;
    ab_status_t rc = request_cursor(r, &after, &err);
    if (rc == AB_OK)
        rc = thread_check(r, r->route->thread, &err);
    if (rc == AB_OK)
        rc = ab__gw_stream_reserve(r->gw, &err);
    if (rc == AB_OK && (s = stream_new(r)) == NULL)
        return;
    /* invariant 1: the thread in commit order from the cursor, a position */
    ab_sub_opts_t so = {
        .scope = AB_SUB_THREAD, .thread = r->route->thread, .ordered = true, .after_pos = after};
    if (rc == AB_OK) {
        s->after_pos = after;
        rc = sub_open(r, &so, s, &sub, &err);
    }
    if (rc != AB_OK) {
        if (s)
            stream_free(s);
        ab__gw_reply_error(r, &err);
        return;
    }
    stream_open(r, &sub, s);
}

void ab__gw_run_stream(ab__gw_req_t *r, const char *thread, const char *run, uint64_t request)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_sub_t *sub = NULL;
    gw_stream_t *s = stream_new(r);
    if (s == NULL)
        return;
    s->end_at_terminal = true;
    s->request = request;
    s->next_check_ms = ab__mono_ms() + CHECK_MS;
    s->key = r->key;
    s->server_key = r->server_key;
    ab_sub_opts_t so = {.scope = AB_SUB_RUN, .thread = thread, .run = run};
    if (sub_open(r, &so, s, &sub, &err) != AB_OK) {
        stream_free(s);
        ab__gw_reply_error(r, &err);
        return;
    }
    stream_open(r, &sub, s);
}

/*
 * conn.c - one DEALER connection to the broker's command endpoint: hello /
 * welcome, cid-matched requests and replies (see agentbus/client.h).
 *
 * Invariants:
 *  1. After ab_conn_new() returns AB_OK the welcome facts (version,
 *     instance, event endpoint, limits, caps) are heap copies owned by the
 *     connection; nothing points into a ZeroMQ message.
 *  2. c->msgs[0..c->nmsgs) hold the frames of the last received message
 *     (header first) and stay open until the next receive or destroy, so
 *     decoded views into them stay valid that long.
 *  3. c->next_cid only grows and is never 0 (0 means "none" on the wire).
 *  4. Every wait is bounded by a deadline on the monotonic clock; ZeroMQ is
 *     polled, never blocked on. A send goes ZMQ_DONTWAIT and waits for
 *     ZMQ_POLLOUT until the call's deadline (a passed one still tries once);
 *     requests are queued only for a connected broker (ZMQ_IMMEDIATE), so a
 *     call that gave up is not delivered later to a broker that comes back.
 *  5. A message goes whole or not at all: only its first frame may wait;
 *     once it went, the other frames are given at once (a frame ZeroMQ
 *     refuses then means it dropped the whole message: the frames left are
 *     still given, so that the next message starts clean).
 *  6. c->curve is true only with c->me (its secret key set) and c->server.
 *  7. c->ending holds the streams this connection cancelled (ab__conn_cancelled()) whose
 *     end (replay_end or error of that cid) was not read yet, the AB_CONN_ENDING_MAX latest.
 *     ab_conn_destroy() reads until they ended, for AB_CONN_DRAIN_MS at most, so that the
 *     socket is not closed while one of their chunks (two frames) is half received:
 *     libzmq 4.3.4 then never frees that message, nor the 18 KB receive buffer its header
 *     frame lies in (docs/CLIENT.md "A connection closed while replies still arrive").
 */
#include "ab_common.h"
#include "agentbus/client.h"
#include "agentbus/json.h"

#include "conn_int.h"

#include "agentbus/nego.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <zmq.h>

/* A packed-publish buffer grown beyond this is freed after its send. */
#define AB_CONN_PACK_KEEP  (4u << 20)
#define AB_CONN_ENDING_MAX 16  /* cancelled streams whose end is awaited (invariant 7) */
#define AB_CONN_DRAIN_MS   250 /* how long destroy reads for their ends */

struct ab_conn {
    void *ctx;
    bool own_ctx;
    void *sock;
    ab_conn_opts_t opts;
    uint64_t next_cid;
    uint32_t v;
    char *instance;
    char *event_endpoint;
    ab_limits_t limits;
    ab_cap_t *caps;
    size_t ncaps;
    zmq_msg_t *msgs; /* frames of the last received message (invariant 2) */
    size_t nmsgs;
    size_t msgs_cap;
    ab_buf_t hdr;  /* encode buffer for headers */
    bool packed;   /* publish envelopes go packed in one frame (PROTOCOL.md 7.4) */
    ab_buf_t pack; /* the packed frame being built */
    bool curve;    /* CURVE client: me and server are set (invariant 6) */
    ab_keypair_t me;
    char server[AB_KEY_Z85_SIZE];
    char *access;         /* the welcome's access, as JSON; NULL = none */
    void *mon;            /* until welcome: the DEALER's socket monitor (a refused connect) */
    bool connected;       /* until welcome: the monitor saw a TCP connection made */
    const char *endpoint; /* until welcome: the address connected, for messages */
    uint64_t ending[AB_CONN_ENDING_MAX]; /* invariant 7 */
    size_t nending;
};

static int timeout_of(const ab_conn_t *c, int timeout_ms)
{
    return timeout_ms > 0 ? timeout_ms : c->opts.timeout_ms;
}

static ab_status_t zmq_fail(ab_error_t *err, const char *what)
{
    return ab_error_set(err, AB_IO, NULL, "%s: %s", what, zmq_strerror(zmq_errno()));
}

static char *dup_str(ab_str_t s)
{
    char *p = malloc(s.len + 1);
    if (p) {
        memcpy(p, s.ptr, s.len);
        p[s.len] = '\0';
    }
    return p;
}

static void close_msgs(ab_conn_t *c)
{
    for (size_t i = 0; i < c->nmsgs; i++)
        zmq_msg_close(&c->msgs[i]);
    c->nmsgs = 0;
}

/* Receive every frame of one message into c->msgs (the socket is readable). */
static ab_status_t recv_frames(ab_conn_t *c, ab_error_t *err)
{
    close_msgs(c);
    int more = 1;
    while (more) {
        zmq_msg_t *grown = ab__grow(c->msgs, &c->msgs_cap, c->nmsgs + 1, sizeof(*grown), 16);
        if (!grown)
            return ab_error_set(err, AB_NOMEM, NULL, "out of memory receiving frames");
        c->msgs = grown;
        zmq_msg_t *m = &c->msgs[c->nmsgs];
        zmq_msg_init(m);
        if (zmq_msg_recv(m, c->sock, 0) < 0) {
            zmq_msg_close(m);
            return zmq_fail(err, "receive");
        }
        c->nmsgs++;
        more = zmq_msg_more(m);
    }
    return AB_OK;
}

/* Before welcome: whether the monitor reports a refused connection (nothing listens): a
 * retry before any connection was made. A retry after one (the peer closed it, e.g. a
 * CURVE handshake that failed) is not a refusal: the wait goes on to its timeout. */
static bool refused(ab_conn_t *c)
{
    zmq_msg_t ev, addr;
    zmq_msg_init(&ev);
    zmq_msg_init(&addr);
    bool got = zmq_msg_recv(&ev, c->mon, ZMQ_DONTWAIT) >= 0 && zmq_msg_size(&ev) >= 2 &&
               zmq_msg_more(&ev) && zmq_msg_recv(&addr, c->mon, ZMQ_DONTWAIT) >= 0;
    uint16_t event = 0;
    if (got)
        memcpy(&event, zmq_msg_data(&ev), sizeof event);
    zmq_msg_close(&ev);
    zmq_msg_close(&addr);
    if (got && event == ZMQ_EVENT_CONNECTED)
        c->connected = true;
    return got && event == ZMQ_EVENT_CONNECT_RETRIED && !c->connected;
}

static ab_status_t timed_out(ab_error_t *err, short events)
{
    if (events == ZMQ_POLLIN)
        ab_error_set(err, AB_TIMEOUT, NULL, "no reply from the broker in time");
    else
        ab_error_set(err, AB_TIMEOUT, NULL,
                     "could not send to the broker in time: it is not connected (is it "
                     "running?) or does not keep up");
    if (err)
        err->retryable = true;
    return AB_TIMEOUT;
}

/* Wait until the socket is readable (@p events ZMQ_POLLIN) or can take a message
 * (ZMQ_POLLOUT), or the deadline passes (invariant 4). */
static ab_status_t wait_for(ab_conn_t *c, short events, int64_t deadline, ab_error_t *err)
{
    for (;;) {
        int64_t left = deadline - ab__mono_ms();
        if (left < 0)
            left = 0;
        zmq_pollitem_t it[2] = {{.socket = c->sock, .events = events},
                                {.socket = c->mon, .events = ZMQ_POLLIN}};
        int rc = zmq_poll(it, c->mon ? 2 : 1, (long)left);
        if (rc > 0 && (it[0].revents & events))
            return AB_OK;
        if (rc > 0 && refused(c)) {
            ab_error_set(err, AB_UNAVAILABLE, "endpoint",
                         "nothing answers at %s (connection refused): is 'agentbus broker' "
                         "running there?",
                         c->endpoint);
            return AB_UNAVAILABLE;
        }
        if (rc > 0)
            continue;
        if (rc < 0 && zmq_errno() != EINTR)
            return zmq_fail(err, "poll");
        if (rc == 0 && ab__mono_ms() >= deadline)
            return timed_out(err, events);
    }
}

static void copy_error(ab_error_t *err, const ab_error_t *e)
{
    if (err && err->code == AB_OK)
        *err = *e;
}

/* Credit one chunk of replay @p cid that is dropped unread (best effort). */
static void credit_dropped(ab_conn_t *c, uint64_t cid)
{
    ab_msg_t m = {.op = AB_OP_CREDIT, .cid = cid};
    m.u.credit.chunks = 1;
    ab_status_t st = ab__conn_send_by(c, &m, NULL, 0, NULL, ab__mono_ms(), NULL);
    (void)st; /* a lost credit only delays the broker's release of the bytes */
}

void ab__conn_cancelled(ab_conn_t *c, uint64_t cid)
{
    if (c->nending == AB_CONN_ENDING_MAX) { /* the oldest is forgotten (invariant 7) */
        memmove(c->ending, c->ending + 1, (AB_CONN_ENDING_MAX - 1) * sizeof(c->ending[0]));
        c->nending--;
    }
    c->ending[c->nending++] = cid;
}

/* A message read: when it ends a cancelled stream, that one is no longer awaited. */
static void stream_seen(ab_conn_t *c, const ab_msg_t *m)
{
    if (m->op != AB_OP_REPLAY_END && m->op != AB_OP_ERROR)
        return;
    for (size_t i = 0; i < c->nending; i++)
        if (c->ending[i] == m->cid) {
            c->ending[i] = c->ending[--c->nending];
            return;
        }
}

/* ab_conn_recv() until @p deadline (monotonic ms). */
static ab_status_t recv_by(ab_conn_t *c, uint64_t cid, ab_doc_t *doc, ab_msg_t *reply,
                           int64_t deadline, ab_error_t *err)
{
    for (;;) {
        ab_status_t st = wait_for(c, ZMQ_POLLIN, deadline, err);
        if (st == AB_OK)
            st = recv_frames(c, err);
        if (st != AB_OK)
            return st;
        ab_error_t derr = AB_ERROR_INIT;
        ab_msg_t m;
        const uint8_t *h = zmq_msg_data(&c->msgs[0]);
        st = ab_msg_decode(doc, h, zmq_msg_size(&c->msgs[0]), &c->limits, &m, &derr);
        if (st != AB_OK) {
            if (cid != 0 && derr.cid != 0 && derr.cid != cid)
                continue; /* undecodable stale reply */
            ab_error_set(err, AB_INVALID_ENVELOPE, derr.field, "bad reply from the broker: %s",
                         derr.message);
            return AB_INVALID_ENVELOPE;
        }
        stream_seen(c, &m);
        if (cid != 0 && m.cid != cid) {
            /* A reply nobody waits for any more. A chunk of a replay we gave up
             * is still credited: the broker counts its bytes as unread until
             * then (docs/PROTOCOL.md 7.6.1). */
            if (m.op == AB_OP_REPLAY_CHUNK)
                credit_dropped(c, m.cid);
            continue;
        }
        *reply = m;
        if (m.op == AB_OP_ERROR) {
            copy_error(err, m.u.error.error);
            return m.u.error.error->code;
        }
        return AB_OK;
    }
}

ab_status_t ab_conn_recv(ab_conn_t *c, uint64_t cid, ab_doc_t *doc, ab_msg_t *reply, int timeout_ms,
                         ab_error_t *err)
{
    return recv_by(c, cid, doc, reply, ab__mono_ms() + timeout_of(c, timeout_ms), err);
}

/* Send the first frame of a message, waiting until @p deadline for room (invariant 4). */
static ab_status_t send_first(ab_conn_t *c, const ab_buf_t *b, bool more, int64_t deadline,
                              ab_error_t *err)
{
    for (;;) {
        if (zmq_send(c->sock, b->data, b->len, ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0)) >= 0)
            return AB_OK;
        if (zmq_errno() != EAGAIN && zmq_errno() != EINTR)
            return zmq_fail(err, "send");
        ab_status_t st = wait_for(c, ZMQ_POLLOUT, deadline, err);
        if (st != AB_OK)
            return st;
    }
}

/* Send @p first then the @p n frames of @p rest as one message (invariant 5). */
static ab_status_t send_msg(ab_conn_t *c, const ab_buf_t *first, const ab_buf_t *rest, size_t n,
                            int64_t deadline, ab_error_t *err)
{
    ab_status_t st = send_first(c, first, n > 0, deadline, err);
    bool lost = false;
    for (size_t i = 0; st == AB_OK && i < n; i++) {
        int flags = ZMQ_DONTWAIT | (i + 1 < n ? ZMQ_SNDMORE : 0);
        int rc;
        while ((rc = zmq_send(c->sock, rest[i].data, rest[i].len, flags)) < 0 &&
               zmq_errno() == EINTR) {
        }
        lost = lost || rc < 0; /* ZeroMQ dropped the message; the frames left finish it */
    }
    if (st == AB_OK && lost) {
        ab_error_set(err, AB_IO, NULL,
                     "send: the connection to the broker closed while a message was sent");
        st = AB_IO;
    }
    return st;
}

/* A packed publish: the envelopes copied into c->pack (PROTOCOL.md 7.4). */
static ab_status_t pack_frames(ab_conn_t *c, const ab_buf_t *frames, size_t n, ab_error_t *err)
{
    ab_buf_reset(&c->pack);
    for (size_t i = 0; i < n; i++) {
        ab_status_t st = ab_packed_append(&c->pack, frames[i].data, frames[i].len, err);
        if (st != AB_OK)
            return st; /* not err->code: err may be NULL, or hold an earlier error */
    }
    return AB_OK;
}

/* A publish over the broker's max_publish_bytes is refused before it is sent. */
static ab_status_t check_size(const ab_conn_t *c, const ab_buf_t *frames, size_t n, bool pack,
                              ab_error_t *err)
{
    if (c->limits.max_publish_bytes == 0)
        return AB_OK;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += frames[i].len + (pack ? 4 : 0);
    if (bytes <= c->limits.max_publish_bytes)
        return AB_OK;
    ab_status_t st = ab_error_set(err, AB_TOO_LARGE, "",
                                  "publish of %llu bytes of envelopes exceeds the"
                                  " broker's max_publish_bytes %u: send fewer events",
                                  (unsigned long long)bytes, c->limits.max_publish_bytes);
    ab_error_detail_int(err, "limit", c->limits.max_publish_bytes);
    return st;
}

ab_status_t ab__conn_send_by(ab_conn_t *c, const ab_msg_t *req, const ab_buf_t *frames,
                             size_t nframes, uint64_t *cid, int64_t deadline, ab_error_t *err)
{
    ab_msg_t m = *req;
    if (m.op != AB_OP_HELLO)
        m.v = c->v;
    if (m.op != AB_OP_CREDIT && m.op != AB_OP_CANCEL)
        m.cid = c->next_cid++;
    bool pack = m.op == AB_OP_PUBLISH && c->packed && nframes > 0;
    if (pack)
        m.u.publish.packed = true;
    ab_status_t st = pack ? pack_frames(c, frames, nframes, err) : AB_OK;
    if (st == AB_OK && m.op == AB_OP_PUBLISH)
        st = check_size(c, frames, nframes, pack, err);
    if (st == AB_OK) {
        ab_buf_reset(&c->hdr);
        st = ab_msg_encode(&m, &c->hdr, err);
    }
    if (st == AB_OK)
        st = pack ? send_msg(c, &c->hdr, &c->pack, 1, deadline, err)
                  : send_msg(c, &c->hdr, frames, nframes, deadline, err);
    if (c->pack.cap > AB_CONN_PACK_KEEP)
        ab_buf_free(&c->pack); /* sent or refused: keep only a usual-size buffer */
    if (st == AB_OK && cid)
        *cid = m.cid;
    return st;
}

ab_status_t ab_conn_send(ab_conn_t *c, const ab_msg_t *req, const ab_buf_t *frames, size_t nframes,
                         uint64_t *cid, ab_error_t *err)
{
    return ab__conn_send_by(c, req, frames, nframes, cid, ab__mono_ms() + c->opts.timeout_ms, err);
}

ab_status_t ab_conn_request(ab_conn_t *c, const ab_msg_t *req, const ab_buf_t *frames,
                            size_t nframes, ab_doc_t *doc, ab_msg_t *reply, int timeout_ms,
                            ab_error_t *err)
{
    int64_t deadline = ab__mono_ms() + timeout_of(c, timeout_ms);
    uint64_t cid = 0;
    ab_status_t st = ab__conn_send_by(c, req, frames, nframes, &cid, deadline, err);
    if (st != AB_OK)
        return st;
    return recv_by(c, cid, doc, reply, deadline, err);
}

const uint8_t *ab_conn_frame(const ab_conn_t *c, size_t i, size_t *len)
{
    if (i + 1 >= c->nmsgs) {
        *len = 0;
        return NULL;
    }
    zmq_msg_t *m = (zmq_msg_t *)&c->msgs[i + 1];
    *len = zmq_msg_size(m);
    return zmq_msg_data(m);
}

size_t ab_conn_nframes(const ab_conn_t *c)
{
    return c->nmsgs ? c->nmsgs - 1 : 0;
}

/* Copy the welcome facts (invariant 1). */
static ab_status_t keep_welcome(ab_conn_t *c, const ab_msg_t *m, ab_error_t *err)
{
    const ab_welcome_t *w = &m->u.welcome;
    c->v = m->v;
    c->limits = w->limits;
    if (c->limits.max_publish_bytes == 0) /* a broker older than the limit (PROTOCOL.md 7.2) */
        c->limits.max_publish_bytes = 2 * c->limits.max_event_bytes;
    c->instance = dup_str(w->instance);
    c->event_endpoint = dup_str(w->event_endpoint);
    c->caps = calloc(w->ncaps ? w->ncaps : 1, sizeof(*c->caps));
    if (!c->instance || !c->event_endpoint || !c->caps)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    for (size_t i = 0; i < w->ncaps; i++) {
        ab_str_t s = {w->caps[i].name, w->caps[i].name_len};
        char *name = dup_str(s);
        if (!name)
            return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
        c->caps[i] = (ab_cap_t){name, s.len, w->caps[i].state};
        c->ncaps++;
    }
    if (w->access != NULL) {
        ab_buf_t j = AB_BUF_INIT;
        ab_status_t st = ab_val_to_json(w->access, &j);
        if (st == AB_OK)
            st = ab_buf_append(&j, "", 1);
        c->access = st == AB_OK ? strdup((const char *)j.data) : NULL;
        ab_buf_free(&j);
        if (c->access == NULL)
            return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    }
    ab_cap_state_t packed = ab_caps_lookup(c->caps, c->ncaps, AB_CAP_PACKED_PUBLISH);
    c->packed =
        !c->opts.frame_per_event && (packed == AB_CAP_AVAILABLE || packed == AB_CAP_DEGRADED);
    return AB_OK;
}

static ab_status_t handshake(ab_conn_t *c, ab_error_t *err)
{
    size_t nv = c->opts.nversions;
    const uint32_t *vers = c->opts.versions ? c->opts.versions : ab_versions_supported(&nv);
    const char *name = c->opts.client_name ? c->opts.client_name : "agentbus-c";
    ab_msg_t hello = {.op = AB_OP_HELLO};
    hello.u.hello.versions = vers;
    hello.u.hello.nversions = nv;
    hello.u.hello.client = (ab_str_t){name, strlen(name)};
    ab_doc_t *doc = NULL;
    if (ab_doc_new(&doc) != AB_OK)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    ab_msg_t m;
    ab_status_t st = ab_conn_request(c, &hello, NULL, 0, doc, &m, 0, err);
    if (st == AB_OK && m.op != AB_OP_WELCOME)
        st = ab_error_set(err, AB_INVALID_ENVELOPE, "op", "expected welcome, got %s",
                          ab_op_name(m.op));
    if (st == AB_OK)
        st = keep_welcome(c, &m, err);
    ab_doc_destroy(&doc);
    return st;
}

/* The CURVE keys: the options', else the files the environment names, else none. */
static ab_status_t resolve_curve(ab_conn_t *c, ab_error_t *err)
{
    const ab_conn_opts_t *o = &c->opts;
    if ((o->key == NULL) != (o->server_key == NULL))
        return ab_error_set(err, AB_INVALID_ARGUMENT, o->key ? "server_key" : "key",
                            "CURVE needs both this client's key pair and the broker's public key");
    if (o->key != NULL) {
        if (o->key->secret_key[0] == '\0' || strlen(o->server_key) != AB_KEY_Z85_LEN)
            return ab_error_set(err, AB_INVALID_ARGUMENT, "key",
                                "CURVE needs this client's secret key and a 40-character broker "
                                "key");
        c->me = *o->key;
        snprintf(c->server, sizeof(c->server), "%s", o->server_key);
        c->curve = true;
        return AB_OK;
    }
    const char *kf = getenv("AGENTBUS_KEY"), *sf = getenv("AGENTBUS_SERVER_KEY");
    if ((!kf || !*kf) && (!sf || !*sf))
        return AB_OK;
    if (!kf || !*kf || !sf || !*sf)
        return ab_error_set(err, AB_INVALID_ARGUMENT,
                            kf && *kf ? "AGENTBUS_SERVER_KEY" : "AGENTBUS_KEY",
                            "AGENTBUS_KEY and AGENTBUS_SERVER_KEY go together (this client's "
                            "secret key file and the broker's public key file)");
    ab_keypair_t srv;
    ab_status_t rc = ab_keypair_read(&c->me, kf, err);
    if (rc == AB_OK && c->me.secret_key[0] == '\0')
        rc = ab_error_set(err, AB_INVALID_ARGUMENT, "AGENTBUS_KEY",
                          "%s holds no secret key (give the .key_secret file)", kf);
    char dirkey[4096];
    struct stat st;
    if (stat(sf, &st) == 0 && S_ISDIR(st.st_mode)) { /* the broker's keys directory */
        snprintf(dirkey, sizeof dirkey, "%s/broker.key", sf);
        sf = dirkey;
    }
    if (rc == AB_OK)
        rc = ab_keypair_read(&srv, sf, err);
    if (rc == AB_OK) {
        memcpy(c->server, srv.public_key, sizeof(c->server));
        c->curve = true;
    }
    return rc;
}

int ab__conn_curve_apply(const ab_conn_t *c, void *sock)
{
    if (!c->curve)
        return 0;
    return zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, c->server, AB_KEY_Z85_LEN) == 0 &&
                   zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, c->me.public_key, AB_KEY_Z85_LEN) ==
                       0 &&
                   zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, c->me.secret_key, AB_KEY_Z85_LEN) == 0
               ? 0
               : -1;
}

static ab_status_t open_socket(ab_conn_t *c, const char *endpoint, ab_error_t *err)
{
    if (!c->ctx) {
        c->ctx = zmq_ctx_new();
        if (!c->ctx)
            return zmq_fail(err, "zmq_ctx_new");
        c->own_ctx = true;
    }
    c->sock = zmq_socket(c->ctx, ZMQ_DEALER);
    if (!c->sock)
        return zmq_fail(err, "zmq_socket");
    int zero = 0, one = 1;
    zmq_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(c->sock, ZMQ_IMMEDIATE, &one, sizeof(one)); /* invariant 4 */
    ab_status_t rc = resolve_curve(c, err);
    if (rc != AB_OK)
        return rc;
    if (ab__conn_curve_apply(c, c->sock) != 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "key", "cannot use the CURVE keys: %s",
                            zmq_strerror(zmq_errno()));
    /* a refused connection is told at once, not after the timeout (wait_for) */
    char mon[64];
    snprintf(mon, sizeof mon, "inproc://ab-conn-monitor-%p", (void *)c);
    if (zmq_socket_monitor(c->sock, mon, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_CONNECT_RETRIED) == 0 &&
        (c->mon = zmq_socket(c->ctx, ZMQ_PAIR)) != NULL) {
        zmq_setsockopt(c->mon, ZMQ_LINGER, &zero, sizeof(zero));
        if (zmq_connect(c->mon, mon) != 0) {
            zmq_close(c->mon);
            c->mon = NULL;
        }
    }
    c->endpoint = endpoint;
    if (zmq_connect(c->sock, endpoint) != 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "endpoint", "cannot connect to %s: %s",
                            endpoint, zmq_strerror(zmq_errno()));
    return AB_OK;
}

/* After welcome: no more monitoring (a reconnect later is ZeroMQ's to make). */
static void stop_monitor(ab_conn_t *c)
{
    if (c->mon == NULL)
        return;
    zmq_socket_monitor(c->sock, NULL, 0);
    zmq_close(c->mon);
    c->mon = NULL;
    c->endpoint = NULL;
}

ab_status_t ab_conn_new(ab_conn_t **out, const char *endpoint, const ab_conn_opts_t *opts,
                        ab_error_t *err)
{
    if (!out || !endpoint)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "out and endpoint are required");
    ab_conn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    if (opts)
        c->opts = *opts;
    if (c->opts.timeout_ms <= 0)
        c->opts.timeout_ms = AB_CONN_TIMEOUT_DEFAULT;
    if (c->opts.replay_window == 0)
        c->opts.replay_window = AB_CONN_WINDOW_DEFAULT;
    c->ctx = c->opts.zmq_ctx;
    c->next_cid = 1;
    c->limits = ab_limits_default();
    ab_status_t st = open_socket(c, endpoint, err);
    if (st == AB_OK)
        st = handshake(c, err);
    if (st == AB_TIMEOUT) {
        ab_error_clear(err);
        ab_error_set(err, AB_TIMEOUT, NULL,
                     "no welcome from %s in %d ms: is 'agentbus broker' running there (a broker "
                     "with keys never answers a key it does not list)?",
                     endpoint, c->opts.timeout_ms);
        if (err)
            err->retryable = true;
    }
    stop_monitor(c);
    if (st != AB_OK) {
        ab_conn_destroy(&c);
        return st;
    }
    *out = c;
    return AB_OK;
}

/* Read until the cancelled streams ended, for AB_CONN_DRAIN_MS at most (invariant 7). */
static void drain_streams(ab_conn_t *c)
{
    ab_doc_t *doc = NULL;
    if (c->nending == 0 || c->sock == NULL || ab_doc_new(&doc) != AB_OK)
        return;
    int64_t deadline = ab__mono_ms() + AB_CONN_DRAIN_MS;
    while (c->nending > 0) {
        ab_msg_t m = {.op = AB_OP_NONE_};
        ab_status_t st = recv_by(c, 0, doc, &m, deadline, NULL);
        if (st != AB_OK && m.op != AB_OP_ERROR && st != AB_INVALID_ENVELOPE)
            break; /* the time is up, or the socket fails; an answer that is an error (the
                      end of a cancelled replay) or does not decode was read: go on */
    }
    ab_doc_destroy(&doc);
}

void ab_conn_destroy(ab_conn_t **cp)
{
    if (!cp || !*cp)
        return;
    ab_conn_t *c = *cp;
    drain_streams(c);
    close_msgs(c);
    free(c->msgs);
    if (c->mon)
        zmq_close(c->mon);
    if (c->sock)
        zmq_close(c->sock);
    if (c->own_ctx)
        zmq_ctx_term(c->ctx);
    for (size_t i = 0; i < c->ncaps; i++)
        free((char *)(uintptr_t)c->caps[i].name);
    free(c->caps);
    free(c->instance);
    free(c->event_endpoint);
    free(c->access);
    ab_buf_free(&c->hdr);
    ab_buf_free(&c->pack);
    free(c);
    *cp = NULL;
}

uint32_t ab_conn_version(const ab_conn_t *c)
{
    return c->v;
}

const char *ab_conn_access(const ab_conn_t *c)
{
    return c->access;
}

const char *ab_conn_instance(const ab_conn_t *c)
{
    return c->instance;
}

const char *ab_conn_event_endpoint(const ab_conn_t *c)
{
    return c->event_endpoint;
}

const ab_limits_t *ab_conn_limits(const ab_conn_t *c)
{
    return &c->limits;
}

const ab_cap_t *ab_conn_caps(const ab_conn_t *c, size_t *n)
{
    *n = c->ncaps;
    return c->caps;
}

void *ab_conn_zmq_ctx(const ab_conn_t *c)
{
    return c->ctx;
}

int ab_conn_wait(ab_conn_t *c, int timeout_ms)
{
    zmq_pollitem_t it = {.socket = c->sock, .events = ZMQ_POLLIN};
    int rc = zmq_poll(&it, 1, timeout_ms < 0 ? 0 : timeout_ms);
    return rc < 0 ? -1 : rc > 0 ? 1 : 0;
}

ab_status_t ab_conn_send_raw(ab_conn_t *c, const ab_buf_t *frames, size_t n, ab_error_t *err)
{
    if (c == NULL || frames == NULL || n == 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "send_raw needs at least one frame");
    return send_msg(c, &frames[0], frames + 1, n - 1, ab__mono_ms() + c->opts.timeout_ms, err);
}

const ab_conn_opts_t *ab__conn_opts(const ab_conn_t *c)
{
    return &c->opts;
}

/*
 * test_conn.c - the client connection against a scripted in-process broker
 * (a ROUTER in a thread speaking the real codec): handshake, version
 * refusal, timeouts, cid matching, error replies, publish results, the
 * credit accounting of a replay stream and malformed replay chunks (a typed
 * error naming the record, no read past the frame: run under ASan); calls
 * that stay bounded while the broker is gone (over tcp) and the packed
 * publish buffer given back after a refusal.
 */
#include "agentbus/alloc.h"
#include "agentbus/client.h"
#include "agentbus/nego.h"
#include "agentbus/producer.h"
#include "fake_router.h"
#include "testutil.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EP           "inproc://fake-broker"
#define REPLAY_TOTAL 7 /* events the fake replays, 2 per chunk */

typedef struct fake {
    fr_t fr;             /* the ROUTER, its thread and the client's identity */
    atomic_int credits;  /* credit chunks received */
    atomic_int pings;    /* pings received */
    int grant;           /* chunks the client may still receive */
    int sent;            /* events sent so far */
    uint64_t replay_cid; /* cid of the running replay */
    atomic_int
        mangle; /* how the next chunk is broken (mangle_t), 0 = not; set by the test thread */
} fake_t;

static void send_reply(fake_t *f, const ab_msg_t *m, const ab_buf_t *extra, size_t n)
{
    fr_reply(&f->fr, m, extra, n);
}

static void send_error(fake_t *f, uint64_t cid, ab_status_t code, const char *field)
{
    ab_error_t e = AB_ERROR_INIT;
    ab_error_set(&e, code, field, "scripted %s", ab_status_name(code));
    ab_error_detail_int(&e, "expected_seq", 3);
    e.cid = cid;
    ab_buf_t b = AB_BUF_INIT;
    assert_int_equal(ab_error_encode_reply(&e, 1, &b), AB_OK);
    fr_send(&f->fr, &b, NULL, 0);
    ab_buf_free(&b);
}

/* Ways the fake breaks a chunk (test_replay_malformed). */
typedef enum mangle {
    M_NONE,
    M_COUNT_HIGH,   /* count says 3, the frame holds 2 records */
    M_COUNT_LOW,    /* count says 1: bytes left after the last record */
    M_EVENT_PAST,   /* record 1's event length runs past the end */
    M_STAMP_PAST,   /* record 1's stamp length is huge (0xffffffff) */
    M_BYTES,        /* the header's bytes is one more than the frame */
    M_TWO_FRAMES,   /* the records frame followed by a stray frame */
    M_TRUNC_LENGTH, /* the frame ends inside record 1's event length */
    M_BAD_STAMP,    /* record 1's stamp is not a stamp map */
} mangle_t;

static void put_u32(ab_buf_t *b, size_t len)
{
    uint8_t p[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
    assert_int_equal(ab_buf_append(b, p, 4), AB_OK);
}

/* Append one record (stamp length, stamp, event length, event) for event f->sent. */
static void add_record(fake_t *f, ab_buf_t *fr, bool bad_stamp)
{
    ab_buf_t st = AB_BUF_INIT, ev = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    ab_stamp_t stamp = {.pos = (uint64_t)f->sent * 10, .time_us = 1};
    assert_int_equal(ab_stamp_encode(&stamp, &st, &err), AB_OK);
    if (bad_stamp)
        st.data[0] = 0x91; /* an array, not a map */
    assert_int_equal(ab_envelope_json(&ev, 1, "t", "r", (uint64_t)f->sent, 1,
                                      "{\"type\":\"RAW\",\"event\":1}", &err),
                     AB_OK);
    put_u32(fr, st.len);
    assert_int_equal(ab_buf_append(fr, st.data, st.len), AB_OK);
    put_u32(fr, ev.len);
    assert_int_equal(ab_buf_append(fr, ev.data, ev.len), AB_OK);
    ab_buf_free(&st);
    ab_buf_free(&ev);
}

/* Break the 2-record chunk @p fr as @p how (mangle_t) says; @return the count to announce. */
static uint32_t mangle_chunk(int how, ab_buf_t *fr, size_t rec1)
{
    uint8_t *r1 = fr->data + rec1;
    size_t slen = (size_t)r1[3];
    switch ((mangle_t)how) {
    case M_COUNT_HIGH: return 3;
    case M_COUNT_LOW: return 1;
    case M_EVENT_PAST: r1[4 + slen + 3] += 1; return 2;
    case M_STAMP_PAST: memset(r1, 0xff, 4); return 2;
    case M_TRUNC_LENGTH: fr->len = rec1 + 4 + slen + 2; return 2;
    default: return 2;
    }
}

/* Send chunks of 2 events while the client has grant left. */
static void pump_replay(fake_t *f)
{
    while (f->replay_cid && f->grant > 0 && f->sent < REPLAY_TOTAL) {
        ab_buf_t fr[2] = {AB_BUF_INIT, AB_BUF_INIT};
        uint32_t n = REPLAY_TOTAL - f->sent >= 2 ? 2 : 1;
        size_t rec1 = 0;
        int how = atomic_load(&f->mangle); /* one case per chunk */
        for (uint32_t i = 0; i < n; i++) {
            f->sent++;
            rec1 = i == 1 ? fr[0].len : rec1;
            add_record(f, &fr[0], i == 1 && how == M_BAD_STAMP);
        }
        ab_msg_t m = {.op = AB_OP_REPLAY_CHUNK, .v = 1, .cid = f->replay_cid};
        m.u.replay_chunk.count = how ? mangle_chunk(how, &fr[0], rec1) : n;
        m.u.replay_chunk.bytes = fr[0].len + (how == M_BYTES);
        assert_int_equal(ab_buf_append(&fr[1], "x", 1), AB_OK);
        send_reply(f, &m, fr, how == M_TWO_FRAMES ? 2 : 1);
        f->grant--;
        ab_buf_free(&fr[0]);
        ab_buf_free(&fr[1]);
    }
    if (f->replay_cid && f->sent == REPLAY_TOTAL) {
        ab_msg_t m = {.op = AB_OP_REPLAY_END, .v = 1, .cid = f->replay_cid};
        m.u.replay_end.head_pos = 70;
        m.u.replay_end.events = REPLAY_TOTAL;
        send_reply(f, &m, NULL, 0);
        f->replay_cid = 0;
    }
}

static void answer_hello(fake_t *f, const ab_msg_t *q)
{
    if (q->u.hello.nversions != 1 || q->u.hello.versions[0] != 1) {
        ab_error_t e = AB_ERROR_INIT;
        ab_error_set(&e, AB_INCOMPATIBLE_VERSION, "versions", "no mutual version");
        ab_error_detail_str(&e, "ours", "1");
        ab_error_detail_str(&e, "theirs", "99");
        e.cid = q->cid;
        ab_buf_t b = AB_BUF_INIT;
        assert_int_equal(ab_error_encode_reply(&e, 0, &b), AB_OK);
        fr_send(&f->fr, &b, NULL, 0);
        ab_buf_free(&b);
        return;
    }
    static const ab_cap_t caps[] = {{"publish", 7, AB_CAP_AVAILABLE},
                                    {"replay", 6, AB_CAP_DEGRADED},
                                    {AB_CAP_PACKED_PUBLISH, 13, AB_CAP_AVAILABLE}};
    bool packed = q->u.hello.client.len == 6 && memcmp(q->u.hello.client.ptr, "packed", 6) == 0;
    ab_msg_t m = {.op = AB_OP_WELCOME, .v = 1, .cid = q->cid};
    m.u.welcome.instance = (ab_str_t){"inst-1", 6};
    m.u.welcome.event_endpoint = (ab_str_t){"inproc://events", 15};
    m.u.welcome.limits = ab_limits_default();
    m.u.welcome.limits.max_batch = 77;
    if (packed) /* client "packed": packedPublish, and a publish limit of 1 MiB */
        m.u.welcome.limits.max_publish_bytes = 1u << 20;
    m.u.welcome.caps = caps;
    m.u.welcome.ncaps = packed ? 3 : 2;
    send_reply(f, &m, NULL, 0);
}

static void answer_publish(fake_t *f, const ab_msg_t *q)
{
    ab_result_t res[8];
    uint32_t n = q->u.publish.count;
    assert_true(n <= 8);
    for (uint32_t i = 0; i < n; i++)
        res[i] = (ab_result_t){.seq = i + 1, .status = AB_RESULT_ACCEPTED, .pos = 100 + i};
    ab_msg_t m = {.op = AB_OP_PUBLISHED, .v = 1, .cid = q->cid};
    m.u.published.results = res;
    m.u.published.nresults = n;
    send_reply(f, &m, NULL, 0);
}

static void handle(fake_t *f, const ab_msg_t *q)
{
    ab_msg_t m = {.v = 1, .cid = q->cid};
    switch (q->op) {
    case AB_OP_HELLO: answer_hello(f, q); break;
    case AB_OP_PING:
        atomic_fetch_add(&f->pings, 1);
        /* a stale reply of another cid first: the client must skip it */
        m.op = AB_OP_PONG;
        m.cid = q->cid + 1000;
        m.u.pong = (ab_pong_t){{"stale", 5}, 1};
        send_reply(f, &m, NULL, 0);
        m.cid = q->cid;
        m.u.pong = (ab_pong_t){{"inst-1", 6}, 42};
        send_reply(f, &m, NULL, 0);
        break;
    case AB_OP_PUBLISH: answer_publish(f, q); break;
    case AB_OP_CLAIM: send_error(f, q->cid, AB_GAP, "seq"); break;
    case AB_OP_REPLAY:
        f->replay_cid = q->cid;
        f->grant = (int)q->u.replay.window;
        f->sent = 0;
        break;
    case AB_OP_CREDIT:
        atomic_fetch_add(&f->credits, (int)q->u.credit.chunks);
        f->grant += (int)q->u.credit.chunks;
        break;
    default: break; /* heads: never answered (timeout test) */
    }
    pump_replay(f);
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    while (!atomic_load(&f->fr.stop)) {
        ab_msg_t q;
        if (fr_recv(&f->fr, &q, 20)) /* publish frames dropped */
            handle(f, &q);
    }
    return NULL;
}

/* A fake broker on @p ep (its own ZeroMQ context); *@p ep receives the address bound. */
static fake_t *fake_start(char *ep, size_t size)
{
    fake_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    fr_start(&f->fr, ep, fake_main, f);
    assert_true(strlen(f->fr.ep) < size);
    snprintf(ep, size, "%s", f->fr.ep);
    return f;
}

/* Stop and close the fake broker: its endpoint is gone. */
static void fake_stop(fake_t *f)
{
    fr_stop(&f->fr);
    free(f);
}

static int setup(void **state)
{
    char ep[] = EP;
    *state = fake_start(ep, sizeof(ep));
    return 0;
}

static int teardown(void **state)
{
    fake_stop(*state);
    return 0;
}

static ab_conn_t *connect_ok(fake_t *f)
{
    ab_conn_opts_t o = {.zmq_ctx = f->fr.ctx, .timeout_ms = 2000, .replay_window = 2};
    if (f == NULL) /* a connection of its own context (the fake may go away before it) */
        o.zmq_ctx = NULL;
    ab_conn_t *c = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_new(&c, EP, &o, &err) != AB_OK)
        fail_msg("connect: %s", err.message);
    return c;
}

static void test_welcome(void **state)
{
    ab_conn_t *c = connect_ok(*state);
    assert_int_equal(ab_conn_version(c), 1);
    assert_string_equal(ab_conn_instance(c), "inst-1");
    assert_string_equal(ab_conn_event_endpoint(c), "inproc://events");
    assert_int_equal(ab_conn_limits(c)->max_batch, 77);
    size_t n;
    const ab_cap_t *caps = ab_conn_caps(c, &n);
    assert_int_equal(n, 2);
    assert_string_equal(caps[1].name, "replay");
    assert_int_equal(caps[1].state, AB_CAP_DEGRADED);
    ab_conn_destroy(&c);
    assert_null(c);
}

static void test_incompatible(void **state)
{
    fake_t *f = *state;
    static const uint32_t v99[] = {99};
    ab_conn_opts_t o = {.zmq_ctx = f->fr.ctx, .versions = v99, .nversions = 1};
    ab_conn_t *c = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_new(&c, EP, &o, &err), AB_INCOMPATIBLE_VERSION);
    assert_null(c);
    assert_false(err.retryable);
    assert_string_equal(err.field, "versions");
    assert_string_equal(ab_error_detail(&err, "theirs")->s, "99");
    assert_string_equal(ab_error_detail(&err, "ours")->s, "1");
}

static void test_ping_skips_stale(void **state)
{
    ab_conn_t *c = connect_ok(*state);
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    ab_error_t err = AB_ERROR_INIT;
    for (int i = 0; i < 3; i++) {
        ab_pong_t p;
        assert_int_equal(ab_conn_ping(c, doc, &p, 0, &err), AB_OK);
        assert_int_equal(p.head_pos, 42);
        assert_memory_equal(p.instance.ptr, "inst-1", 6);
    }
    ab_doc_destroy(&doc);
    ab_conn_destroy(&c);
}

static void test_error_reply_and_timeout(void **state)
{
    ab_conn_t *c = connect_ok(*state);
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    ab_error_t err = AB_ERROR_INIT;
    ab_claimed_t cl;
    assert_int_equal(ab_conn_claim(c, "t", "r", doc, &cl, 0, &err), AB_GAP);
    assert_string_equal(err.field, "seq");
    assert_int_equal(ab_error_detail(&err, "expected_seq")->i, 3);
    assert_true(err.cid != 0);
    ab_error_clear(&err);
    ab_run_ref_t ref = {{"t", 1}, {"r", 1}};
    ab_heads_t q = {.runs = &ref, .nruns = 1};
    ab_heads_reply_t hr;
    assert_int_equal(ab_conn_heads(c, &q, doc, &hr, 150, &err), AB_TIMEOUT);
    assert_true(err.retryable);
    ab_doc_destroy(&doc);
    ab_conn_destroy(&c);
}

static void test_publish(void **state)
{
    ab_conn_t *c = connect_ok(*state);
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_t ev[3] = {AB_BUF_INIT, AB_BUF_INIT, AB_BUF_INIT};
    for (int i = 0; i < 3; i++)
        assert_int_equal(ab_envelope_json(&ev[i], 1, "t", "r", (uint64_t)i + 1, 1,
                                          "{\"type\":\"RAW\",\"event\":{}}", &err),
                         AB_OK);
    const ab_result_t *res = NULL;
    assert_int_equal(ab_conn_publish(c, ev, 3, doc, &res, 0, &err), AB_OK);
    assert_int_equal(res[2].pos, 102);
    assert_int_equal(res[2].status, AB_RESULT_ACCEPTED);
    for (int i = 0; i < 3; i++)
        ab_buf_free(&ev[i]);
    ab_doc_destroy(&doc);
    ab_conn_destroy(&c);
}

typedef struct rows {
    uint64_t last_pos;
    int n;
} rows_t;

static ab_status_t on_row(void *ud, const ab_stamp_t *st, const uint8_t *ev, size_t len,
                          ab_error_t *err)
{
    rows_t *r = ud;
    (void)err;
    assert_true(st->pos > r->last_pos);
    assert_true(len > 0 && ev != NULL);
    r->last_pos = st->pos;
    r->n++;
    return AB_OK;
}

static void test_replay_credit(void **state)
{
    fake_t *f = *state;
    ab_conn_t *c = connect_ok(f);
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    ab_error_t err = AB_ERROR_INIT;
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay.scope = AB_REPLAY_ALL;
    rows_t r = {0};
    ab_replay_end_t end;
    assert_int_equal(ab_conn_replay(c, &q, on_row, &r, doc, &end, 0, &err), AB_OK);
    assert_int_equal(r.n, REPLAY_TOTAL);
    assert_int_equal(end.events, REPLAY_TOTAL);
    assert_int_equal(end.head_pos, 70);
    /* 4 chunks with a window of 2: one credit per chunk consumed (the ping
     * after it is handled by the fake after every credit, same socket) */
    ab_pong_t p;
    assert_int_equal(ab_conn_ping(c, doc, &p, 0, &err), AB_OK);
    assert_int_equal(atomic_load(&f->credits), 4);
    ab_doc_destroy(&doc);
    ab_conn_destroy(&c);
}

/* Every malformed chunk ends the replay with a typed error naming the record. */
static void test_replay_malformed(void **state)
{
    fake_t *f = *state;
    static const struct {
        mangle_t how;
        ab_status_t code;
        const char *field;
        int record; /* -1: the error names no record */
    } cases[] = {
        {M_COUNT_HIGH, AB_INVALID_ENVELOPE, "bytes", 2},
        {M_COUNT_LOW, AB_INVALID_ENVELOPE, "count", 1},
        {M_EVENT_PAST, AB_INVALID_ENVELOPE, "bytes", 1},
        {M_STAMP_PAST, AB_INVALID_ENVELOPE, "bytes", 1},
        {M_BYTES, AB_INVALID_ENVELOPE, "bytes", -1},
        {M_TWO_FRAMES, AB_INVALID_ENVELOPE, "count", -1},
        {M_TRUNC_LENGTH, AB_INVALID_ENVELOPE, "bytes", 1},
        {M_BAD_STAMP, AB_INVALID_ENVELOPE, NULL, 1},
    };
    ab_conn_t *c = connect_ok(f);
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        atomic_store(&f->mangle, (int)cases[i].how);
        ab_error_t err = AB_ERROR_INIT;
        ab_msg_t q = {.op = AB_OP_REPLAY};
        q.u.replay.scope = AB_REPLAY_ALL;
        rows_t r = {0};
        assert_int_equal(ab_conn_replay(c, &q, on_row, &r, doc, NULL, 0, &err), cases[i].code);
        if (cases[i].field)
            assert_string_equal(err.field, cases[i].field);
        const ab_error_detail_t *d = ab_error_detail(&err, "record");
        if (cases[i].record < 0) {
            assert_null(d);
        } else {
            assert_non_null(d);
            assert_int_equal(d->i, cases[i].record);
        }
        /* a bad stamp is found while delivering; anything else before */
        assert_int_equal(r.n, cases[i].how == M_BAD_STAMP ? 1 : 0);
    }
    /* the connection is still usable */
    ab_pong_t p;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_ping(c, doc, &p, 0, &err), AB_OK);
    ab_doc_destroy(&doc);
    ab_conn_destroy(&c);
}

#define GONE_CALLS 2000 /* more than the DEALER's send high-water mark (1000) */

/* While the broker is gone, every call with a timeout of 1 ms fails with AB_TIMEOUT: none
 * blocks in zmq_send once the send queue would be full (before: forever, from about the
 * 1000th). When a broker comes back there, none of the requests given up reaches it. */
static void test_broker_gone(void **state)
{
    (void)state;
    char ep[64] = "tcp://127.0.0.1:*";
    fake_t *f = fake_start(ep, sizeof(ep));
    ab_conn_opts_t o = {.timeout_ms = 2000};
    ab_conn_t *c = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_new(&c, ep, &o, &err), AB_OK);
    ab_producer_opts_t po = {.timeout_ms = 2000, .max_retries = -1};
    ab_producer_t *p = NULL;
    assert_int_equal(ab_producer_new(&p, ep, &po, &err), AB_OK);
    assert_int_equal(ab_producer_assigned(p, "t", "r", 1, &err), AB_OK);
    static const char ev[] =
        "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\",\"protocolVersion\":\"1.0\"}";
    assert_int_equal(ab_producer_publish_json(p, ev, strlen(ev), &err), AB_OK);
    fake_stop(f); /* the broker is gone */
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    for (int i = 0; i < GONE_CALLS; i++) {
        ab_pong_t pong;
        ab_error_clear(&err);
        assert_int_equal(ab_conn_ping(c, doc, &pong, 1, &err), AB_TIMEOUT);
        assert_true(err.retryable);
    }
    for (int i = 0; i < GONE_CALLS; i++) {
        ab_error_clear(&err);
        assert_int_equal(ab_producer_flush(p, 1, &err), AB_TIMEOUT);
    }
    assert_int_equal(ab_producer_stats(p).outbox, 1); /* kept for a later flush */
    f = fake_start(ep, sizeof(ep));                   /* a broker again, at the same address */
    int calls = 0;
    ab_status_t st = AB_TIMEOUT;
    for (; st != AB_OK && calls < 100; calls++) {
        ab_pong_t pong;
        ab_error_clear(&err);
        st = ab_conn_ping(c, doc, &pong, 200, &err);
    }
    assert_int_equal(st, AB_OK);
    assert_true(atomic_load(&f->pings) <= calls); /* only the pings sent since */
    ab_doc_destroy(&doc);
    ab_producer_destroy(&p);
    ab_conn_destroy(&c);
    fake_stop(f);
}

/* Live blocks of 4 MiB or more allocated through the proto allocator (test_pack_freed). */
#define BIG_MAX 8
static void *big[BIG_MAX];
static pthread_mutex_t big_mu = PTHREAD_MUTEX_INITIALIZER;

static void big_note(uintptr_t old, void *p, size_t size)
{
    pthread_mutex_lock(&big_mu);
    for (int i = 0; old && i < BIG_MAX; i++)
        if ((uintptr_t)big[i] == old)
            big[i] = NULL;
    for (int i = 0; p && size >= (4u << 20) && i < BIG_MAX; i++)
        if (big[i] == NULL) {
            big[i] = p;
            break;
        }
    pthread_mutex_unlock(&big_mu);
}

static void *big_malloc(size_t size)
{
    void *p = malloc(size);
    big_note(0, p, size);
    return p;
}

static void *big_realloc(void *ptr, size_t size)
{
    uintptr_t old = (uintptr_t)ptr; /* only compared: ptr is gone once moved */
    void *p = realloc(ptr, size);
    if (p)
        big_note(old, p, size);
    return p;
}

static void big_free(void *ptr)
{
    big_note((uintptr_t)ptr, NULL, 0);
    free(ptr);
}

static int big_live(void)
{
    int n = 0;
    pthread_mutex_lock(&big_mu);
    for (int i = 0; i < BIG_MAX; i++)
        n += big[i] != NULL;
    pthread_mutex_unlock(&big_mu);
    return n;
}

/* The counting allocator from before the fake's thread starts to after it ended (it is set
 * while no other thread uses the library: proto/alloc.c). */
static int setup_big(void **state)
{
    ab_set_allocator(big_malloc, big_realloc, big_free);
    return setup(state);
}

static int teardown_big(void **state)
{
    int rc = teardown(state);
    ab_set_allocator(NULL, NULL, NULL);
    return rc;
}

/* A packed publish refused as too large (6 MiB over a limit of 1 MiB) gives its copy
 * buffer back like one that was sent: none is kept past 4 MiB. */
static void test_pack_freed(void **state)
{
    fake_t *f = *state;
    ab_conn_opts_t o = {.zmq_ctx = f->fr.ctx, .client_name = "packed", .timeout_ms = 2000};
    ab_conn_t *c = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_new(&c, EP, &o, &err), AB_OK);
    ab_buf_t ev[2];
    for (int i = 0; i < 2; i++) {
        ev[i] = (ab_buf_t){.data = calloc(1, 3u << 20), .len = 3u << 20, .cap = 3u << 20};
        assert_non_null(ev[i].data);
    }
    ab_msg_t req = {.op = AB_OP_PUBLISH};
    req.u.publish.count = 2;
    ab_status_t st = ab_conn_send(c, &req, ev, 2, NULL, &err);
    int live = big_live();
    for (int i = 0; i < 2; i++)
        free(ev[i].data);
    ab_conn_destroy(&c); /* before any assert: the teardown waits for the context's sockets */
    assert_int_equal(st, AB_TOO_LARGE);
    assert_int_equal(live, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_welcome, setup, teardown),
        cmocka_unit_test_setup_teardown(test_incompatible, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ping_skips_stale, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_reply_and_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_publish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_credit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_malformed, setup, teardown),
        cmocka_unit_test(test_broker_gone),
        cmocka_unit_test_setup_teardown(test_pack_freed, setup_big, teardown_big),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

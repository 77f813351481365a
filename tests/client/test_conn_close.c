/*
 * test_conn_close.c - destroying a connection whose replay was stopped, against a
 * scripted broker over tcp (a ROUTER in a thread speaking the real codec): on `replay`
 * it sends CHUNKS two-frame chunks at once; on `cancel` it ends the stream with `error`
 * request_aborted, as the broker does (or, told to, never answers).
 *
 * libzmq 4.3.4 loses the memory of a socket closed while messages of two frames still
 * arrive (apparently one half received, with the 18 KB receive buffer its header lies
 * in: docs/CLIENT.md "A connection closed while replies still arrive"), so
 * ab_conn_destroy() reads the cancelled stream to its end first: test_stopped_replay
 * closes ROUNDS such connections and fails under LeakSanitizer without that (21 to 35
 * blocks of 18,160 bytes per run; without ASan, its count of cancels the fake received
 * may fall short). That read is bounded: a broker that never answers the cancel holds
 * destroy for AB_CONN_DRAIN_MS (250 ms), not for the timeout.
 */
#include "agentbus/client.h"
#include "fake_router.h"
#include "testutil.h"

#include "ab_common.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNKS  40  /* chunks sent for each replay */
#define RECORDS 10  /* events per chunk, ~2 KB each: a records frame of ~20 KB */
#define ROUNDS  100 /* stopped replays, each on a connection of its own */

typedef struct fake {
    fr_t fr;            /* the ROUTER (tcp), its thread and the last client's identity */
    ab_buf_t records;   /* the records frame of every chunk */
    atomic_bool mute;   /* cancels are not answered */
    atomic_int replays; /* replays started */
    atomic_int cancels; /* cancels received */
} fake_t;

static void put_u32(ab_buf_t *b, size_t len)
{
    uint8_t p[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
    assert_int_equal(ab_buf_append(b, p, 4), AB_OK);
}

/* RECORDS records (stamp length, stamp, event length, event) of padded events. */
static void make_records(ab_buf_t *out)
{
    char body[2100];
    int k = snprintf(body, sizeof(body), "{\"type\":\"RAW\",\"event\":\"");
    memset(body + k, 'x', 2000);
    snprintf(body + k + 2000, sizeof(body) - (size_t)k - 2000, "\"}");
    for (int i = 0; i < RECORDS; i++) {
        ab_buf_t st = AB_BUF_INIT, ev = AB_BUF_INIT;
        ab_error_t err = AB_ERROR_INIT;
        ab_stamp_t stamp = {.pos = (uint64_t)i + 1, .time_us = 1};
        assert_int_equal(ab_stamp_encode(&stamp, &st, &err), AB_OK);
        assert_int_equal(ab_envelope_json(&ev, 1, "t", "r", (uint64_t)i + 1, 1, body, &err), AB_OK);
        put_u32(out, st.len);
        assert_int_equal(ab_buf_append(out, st.data, st.len), AB_OK);
        put_u32(out, ev.len);
        assert_int_equal(ab_buf_append(out, ev.data, ev.len), AB_OK);
        ab_buf_free(&st);
        ab_buf_free(&ev);
    }
}

static void answer_hello(fake_t *f, const ab_msg_t *q)
{
    ab_msg_t m = {.op = AB_OP_WELCOME, .v = 1, .cid = q->cid};
    m.u.welcome.instance = (ab_str_t){"inst-1", 6};
    m.u.welcome.event_endpoint = (ab_str_t){"inproc://none", 13};
    m.u.welcome.limits = ab_limits_default();
    fr_reply(&f->fr, &m, NULL, 0);
}

/* The whole stream at once, window or not: CHUNKS chunks of RECORDS events. */
static void answer_replay(fake_t *f, const ab_msg_t *q)
{
    atomic_fetch_add(&f->replays, 1);
    ab_msg_t m = {.op = AB_OP_REPLAY_CHUNK, .v = 1, .cid = q->cid};
    m.u.replay_chunk.count = RECORDS;
    m.u.replay_chunk.bytes = f->records.len;
    for (int i = 0; i < CHUNKS; i++)
        fr_reply(&f->fr, &m, &f->records, 1);
}

/* The stream ends as the broker ends a cancelled one (docs/PROTOCOL.md 7.6). */
static void answer_cancel(fake_t *f, const ab_msg_t *q)
{
    atomic_fetch_add(&f->cancels, 1);
    if (atomic_load(&f->mute))
        return;
    ab_error_t e = AB_ERROR_INIT;
    ab_error_set(&e, AB_REQUEST_ABORTED, "", "replay cancelled by the client");
    e.cid = q->cid;
    ab_buf_t b = AB_BUF_INIT;
    assert_int_equal(ab_error_encode_reply(&e, 1, &b), AB_OK);
    fr_send(&f->fr, &b, NULL, 0);
    ab_buf_free(&b);
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    while (!atomic_load(&f->fr.stop)) {
        ab_msg_t q;
        if (!fr_recv(&f->fr, &q, 20))
            continue;
        switch (q.op) {
        case AB_OP_HELLO: answer_hello(f, &q); break;
        case AB_OP_REPLAY: answer_replay(f, &q); break;
        case AB_OP_CANCEL: answer_cancel(f, &q); break;
        default: break; /* credits */
        }
    }
    return NULL;
}

static fake_t *fake_start(void)
{
    fake_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    make_records(&f->records);
    fr_start(&f->fr, "tcp://127.0.0.1:*", fake_main, f);
    return f;
}

static void fake_stop(fake_t *f)
{
    fr_stop(&f->fr);
    ab_buf_free(&f->records);
    free(f);
}

static ab_status_t stop_at_first(void *ud, const ab_stamp_t *st, const uint8_t *ev, size_t len,
                                 ab_error_t *err)
{
    (void)ud, (void)st, (void)ev, (void)len;
    return ab_error_set(err, AB_REQUEST_ABORTED, "", "stopped by the test");
}

/* A connection of its own context whose replay the callback stopped at the first event. */
static ab_conn_t *stopped_replay(fake_t *f)
{
    ab_conn_opts_t o = {.timeout_ms = 5000};
    ab_conn_t *c = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_new(&c, f->fr.ep, &o, &err), AB_OK);
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay = (ab_replay_t){.scope = AB_REPLAY_RUN, .thread = {"t", 1}, .run = {"r", 1}};
    assert_int_equal(ab_conn_replay(c, &q, stop_at_first, NULL, doc, NULL, 5000, &err),
                     AB_REQUEST_ABORTED);
    ab_doc_destroy(&doc);
    return c;
}

/* ROUNDS connections destroyed right after their replay was stopped lose nothing (before:
 * LeakSanitizer found 18 KB blocks of libzmq's receive buffers, several per run). */
static void test_stopped_replay(void **state)
{
    (void)state;
    fake_t *f = fake_start();
    for (int i = 0; i < ROUNDS; i++) {
        ab_conn_t *c = stopped_replay(f);
        ab_conn_destroy(&c);
        assert_null(c);
    }
    assert_int_equal(atomic_load(&f->replays), ROUNDS);
    assert_int_equal(atomic_load(&f->cancels), ROUNDS);
    fake_stop(f);
}

/* A cancel never answered holds destroy for the drain's bound, not the connection's
 * timeout (5 s); a connection with no stopped stream does not wait at all. */
static void test_drain_bounded(void **state)
{
    (void)state;
    fake_t *f = fake_start();
    atomic_store(&f->mute, true);
    ab_conn_t *c = stopped_replay(f);
    int64_t t0 = ab__mono_ms();
    ab_conn_destroy(&c);
    int64_t took = ab__mono_ms() - t0;
    assert_true(took >= 200); /* it waited for the end ... */
    assert_true(took < 2000); /* ... a short while */
    ab_conn_opts_t o = {.timeout_ms = 5000};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_new(&c, f->fr.ep, &o, &err), AB_OK);
    t0 = ab__mono_ms();
    ab_conn_destroy(&c);
    assert_true(ab__mono_ms() - t0 < 200);
    fake_stop(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stopped_replay),
        cmocka_unit_test(test_drain_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

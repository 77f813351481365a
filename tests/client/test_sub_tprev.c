/*
 * test_sub_tprev.c - the ordered thread subscription's use of the stamp's
 * tprev (docs/CLIENT.md "Subscriber", docs/PROTOCOL.md section 5) against a
 * scripted in-process broker (a ROUTER and an XPUB in a thread, speaking the
 * real codec), which sends exactly the live events the test asks for, so a
 * lost one is a real hole, not a timing accident.
 *
 * Thread "t" has events at positions 2, 4, 7, 9, 12, 13 (the others belong
 * to other threads). Live, the broker sends 2 (tprev 0), 4 (tprev 2), then
 * loses 7 and sends 9 (tprev 7), then 12 and 13 without tprev (an older
 * broker). Checked: 2 and 4 are delivered live with no replay although their
 * positions are not consecutive; 9 is a real hole: one replay after 4
 * brings 7 and 9; 12 without tprev falls back to the old rule (a hole: 10
 * expected) and 13 is next by it; every event is delivered once, in order,
 * with exactly one replay per hole besides the first.
 */
#include "agentbus/client.h"
#include "agentbus/subscriber.h"
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define CMD_EP   "inproc://tprev-broker"
#define EV_EP    "inproc://tprev-events"
#define INSTANCE "inst-tprev"

/* The thread's stored events: position, seq, the tprev its live stamp carries (-1: none). */
static const struct {
    uint64_t pos, seq;
    int64_t tprev;
    bool live; /* sent live (else lost on the way) */
} EVS[] = {
    {2, 1, 0, true}, {4, 2, 2, true},   {7, 3, 4, false},
    {9, 4, 7, true}, {12, 5, -1, true}, {13, 6, -1, true},
};
#define NEVS (sizeof(EVS) / sizeof(EVS[0]))

typedef struct fake {
    void *ctx, *router, *xpub;
    pthread_t th;
    atomic_bool stop;
    atomic_bool subscribed;        /* the thread's topic subscription reached the XPUB */
    atomic_int committed;          /* EVS[0 .. committed) are in the store */
    atomic_int sent;               /* EVS[0 .. sent) were handled live (sent or lost) */
    atomic_int replays;            /* replays answered */
    atomic_uint_fast64_t after[8]; /* their after_pos */
    ab_doc_t *doc;
    ab_buf_t id;
} fake_t;

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void envelope(ab_buf_t *out, uint64_t seq)
{
    char body[256];
    if (seq == 1)
        snprintf(body, sizeof body,
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\","
                 "\"protocolVersion\":\"1.0\"}");
    else
        snprintf(body, sizeof body, "{\"type\":\"CUSTOM\",\"name\":\"n\",\"value\":%llu}",
                 (unsigned long long)seq);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_envelope_json(out, 1, "t", "r", seq, 1, body, &err), AB_OK);
}

/* The record of EVS[i] into @p out; @p live: with its live stamp's tprev. */
static void record(ab_buf_t *out, size_t i, bool live)
{
    ab_stamp_t st = {.pos = EVS[i].pos, .time_us = 1};
    if (live && EVS[i].tprev >= 0) {
        st.has_tprev = true;
        st.tprev = (uint64_t)EVS[i].tprev;
    }
    ab_buf_t env = AB_BUF_INIT;
    envelope(&env, EVS[i].seq);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_record_append(out, &st, env.data, env.len, &err), AB_OK);
    ab_buf_free(&env);
}

static void send_msg(fake_t *f, const ab_msg_t *m, const ab_buf_t *frame)
{
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_msg_encode(m, &b, &err), AB_OK);
    zmq_send(f->router, f->id.data, f->id.len, ZMQ_SNDMORE);
    zmq_send(f->router, b.data, b.len, frame ? ZMQ_SNDMORE : 0);
    if (frame)
        zmq_send(f->router, frame->data, frame->len, 0);
    ab_buf_free(&b);
}

/* The store's head: the last committed event of "t", or 1 (another thread's) before any. */
static uint64_t head(fake_t *f)
{
    int n = atomic_load(&f->committed);
    return n > 0 ? EVS[n - 1].pos : 1;
}

/* A thread replay after a position: every committed event above it, then the end. */
static void replay(fake_t *f, const ab_msg_t *q)
{
    int r = atomic_fetch_add(&f->replays, 1);
    if (r < 8)
        atomic_store(&f->after[r], q->u.replay.after_pos);
    assert_int_equal(q->u.replay.scope, AB_REPLAY_THREAD);
    ab_buf_t frame = AB_BUF_INIT;
    uint32_t count = 0;
    int n = atomic_load(&f->committed);
    for (int i = 0; i < n; i++)
        if (EVS[i].pos > q->u.replay.after_pos) {
            record(&frame, (size_t)i, false);
            count++;
        }
    if (count > 0) {
        ab_msg_t c = {.op = AB_OP_REPLAY_CHUNK, .v = 1, .cid = q->cid};
        c.u.replay_chunk.count = count;
        c.u.replay_chunk.bytes = frame.len;
        send_msg(f, &c, &frame);
    }
    ab_msg_t e = {.op = AB_OP_REPLAY_END, .v = 1, .cid = q->cid};
    e.u.replay_end.head_pos = head(f);
    e.u.replay_end.events = count;
    send_msg(f, &e, NULL);
    ab_buf_free(&frame);
}

static void handle(fake_t *f, const ab_msg_t *q)
{
    if (q->op == AB_OP_HELLO) {
        ab_msg_t m = {.op = AB_OP_WELCOME, .v = 1, .cid = q->cid};
        m.u.welcome.instance = (ab_str_t){INSTANCE, strlen(INSTANCE)};
        m.u.welcome.event_endpoint = (ab_str_t){EV_EP, strlen(EV_EP)};
        m.u.welcome.limits = ab_limits_default();
        send_msg(f, &m, NULL);
    } else if (q->op == AB_OP_REPLAY) {
        replay(f, q);
    } /* credit and the rest: nothing to answer */
}

static void serve_one(fake_t *f)
{
    zmq_msg_t id, hdr;
    zmq_msg_init(&id);
    zmq_msg_init(&hdr);
    zmq_msg_recv(&id, f->router, 0);
    zmq_msg_recv(&hdr, f->router, 0);
    int more = zmq_msg_more(&hdr);
    while (more) {
        zmq_msg_t x;
        zmq_msg_init(&x);
        zmq_msg_recv(&x, f->router, 0);
        more = zmq_msg_more(&x);
        zmq_msg_close(&x);
    }
    ab_buf_reset(&f->id);
    assert_int_equal(ab_buf_append(&f->id, zmq_msg_data(&id), zmq_msg_size(&id)), AB_OK);
    ab_msg_t q;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_msg_decode(f->doc, zmq_msg_data(&hdr), zmq_msg_size(&hdr), NULL, &q, &err) == AB_OK)
        handle(f, &q);
    zmq_msg_close(&id);
    zmq_msg_close(&hdr);
}

/* Heartbeats carry head_pos 0, so none asks the subscriber for a replay: every replay
 * here is the first one or a hole's. */
static void heartbeat(fake_t *f)
{
    ab_msg_t m = {.op = AB_OP_HEARTBEAT, .v = 1};
    m.u.heartbeat.instance = (ab_str_t){INSTANCE, strlen(INSTANCE)};
    m.u.heartbeat.time_us = 1;
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_msg_encode(&m, &b, &err), AB_OK);
    zmq_send(f->xpub, AB_TOPIC_HEARTBEAT, AB_TOPIC_HEARTBEAT_LEN, ZMQ_SNDMORE);
    zmq_send(f->xpub, b.data, b.len, 0);
    ab_buf_free(&b);
}

/* Commit EVS[i] and send it live unless it is the lost one. */
static void live(fake_t *f, size_t i)
{
    atomic_store(&f->committed, (int)i + 1);
    if (EVS[i].live) {
        ab_buf_t topic = AB_BUF_INIT, frame = AB_BUF_INIT;
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab_topic_event(&topic, (ab_str_t){"t", 1}, (ab_str_t){"r", 1}, &err),
                         AB_OK);
        record(&frame, i, true);
        zmq_send(f->xpub, topic.data, topic.len, ZMQ_SNDMORE);
        zmq_send(f->xpub, frame.data, frame.len, 0);
        ab_buf_free(&topic);
        ab_buf_free(&frame);
    }
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    long next_hb = 0;
    int done = 0;
    while (!atomic_load(&f->stop)) {
        if (now_ms() >= next_hb) {
            heartbeat(f);
            next_hb = now_ms() + 50;
        }
        for (int want = atomic_load(&f->sent); done < want; done++)
            live(f, (size_t)done);
        zmq_pollitem_t it[2] = {{.socket = f->router, .events = ZMQ_POLLIN},
                                {.socket = f->xpub, .events = ZMQ_POLLIN}};
        if (zmq_poll(it, 2, 5) <= 0)
            continue;
        if (it[0].revents & ZMQ_POLLIN)
            serve_one(f);
        if (it[1].revents & ZMQ_POLLIN) { /* a (un)subscription: 1 or 0, then the topic */
            uint8_t sub[64];
            int n = zmq_recv(f->xpub, sub, sizeof sub, 0);
            if (n == 1 + 5 && sub[0] == 1 && memcmp(sub + 1, "ev\0t\0", 5) == 0)
                atomic_store(&f->subscribed, true);
        }
    }
    return NULL;
}

static int setup(void **state)
{
    fake_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->ctx = zmq_ctx_new();
    f->router = zmq_socket(f->ctx, ZMQ_ROUTER);
    f->xpub = zmq_socket(f->ctx, ZMQ_XPUB);
    int zero = 0;
    zmq_setsockopt(f->router, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(f->xpub, ZMQ_LINGER, &zero, sizeof(zero));
    assert_int_equal(zmq_bind(f->router, CMD_EP), 0);
    assert_int_equal(zmq_bind(f->xpub, EV_EP), 0);
    assert_int_equal(ab_doc_new(&f->doc), AB_OK);
    assert_int_equal(pthread_create(&f->th, NULL, fake_main, f), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fake_t *f = *state;
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    zmq_close(f->router);
    zmq_close(f->xpub);
    zmq_ctx_term(f->ctx);
    ab_doc_destroy(&f->doc);
    ab_buf_free(&f->id);
    free(f);
    return 0;
}

typedef struct got {
    uint64_t seq[NEVS + 4], pos[NEVS + 4];
    bool replayed[NEVS + 4];
    size_t n;
} got_t;

static int on_event(void *ud, const ab_sub_event_t *e)
{
    got_t *g = ud;
    assert_true(g->n < NEVS);
    g->seq[g->n] = e->ev.seq;
    g->pos[g->n] = e->stamp.pos;
    g->replayed[g->n] = e->replayed;
    g->n++;
    return 0;
}

/* Let the broker send EVS up to @p upto and poll until @p n events were delivered. */
static void step(fake_t *f, ab_sub_t *s, got_t *g, int upto, size_t n)
{
    atomic_store(&f->sent, upto);
    long deadline = now_ms() + 10000;
    while (g->n < n && now_ms() < deadline) {
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab_sub_poll(s, 20, &err), AB_OK);
    }
    assert_int_equal(g->n, n);
}

static void test_tprev_no_replay_and_real_hole(void **state)
{
    fake_t *f = *state;
    got_t g = {.n = 0};
    ab_sub_opts_t o = {.scope = AB_SUB_THREAD,
                       .thread = "t",
                       .ordered = true,
                       .on_event = on_event,
                       .ud = &g,
                       .zmq_ctx = f->ctx,
                       .timeout_ms = 2000};
    ab_sub_t *s = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_sub_new(&s, CMD_EP, &o, &err), AB_OK);
    long deadline = now_ms() + 10000;
    while ((atomic_load(&f->replays) < 1 || !atomic_load(&f->subscribed)) && now_ms() < deadline)
        assert_int_equal(ab_sub_poll(s, 20, &err), AB_OK);
    assert_int_equal(atomic_load(&f->replays), 1); /* the first one, after position 0 */
    assert_true(atomic_load(&f->subscribed));
    ab_sub_stats_t st0 = ab_sub_stats(s);

    step(f, s, &g, 2, 2); /* 2 and 4: their tprev is what was delivered, no replay */
    assert_false(g.replayed[0]);
    assert_false(g.replayed[1]);
    assert_int_equal(ab_sub_stats(s).replays, st0.replays);
    assert_int_equal(ab_sub_stats(s).holes, 0);

    step(f, s, &g, 4, 4); /* 7 lost, 9 says tprev 7 > 4: a real hole, one replay after 4 */
    assert_int_equal(atomic_load(&f->replays), 2);
    assert_int_equal(atomic_load(&f->after[1]), 4);
    assert_true(g.replayed[2] && g.replayed[3]);
    assert_int_equal(ab_sub_stats(s).holes, 1);

    step(f, s, &g, 5, 5); /* 12 without tprev: the old rule (10 expected), a replay after 9 */
    assert_int_equal(atomic_load(&f->replays), 3);
    assert_int_equal(atomic_load(&f->after[2]), 9);
    step(f, s, &g, 6, 6); /* 13 without tprev is 12 + 1: next by the old rule */
    assert_false(g.replayed[5]);
    assert_int_equal(atomic_load(&f->replays), 3);
    assert_int_equal(ab_sub_stats(s).holes, 2);

    for (size_t i = 0; i < NEVS; i++) { /* each once, in order */
        assert_int_equal(g.seq[i], EVS[i].seq);
        assert_int_equal(g.pos[i], EVS[i].pos);
    }
    assert_int_equal(ab_sub_position(s), 13);
    assert_int_equal(ab_sub_poll(s, 100, &err), AB_OK);
    assert_int_equal(g.n, NEVS);
    ab_sub_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tprev_no_replay_and_real_hole, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

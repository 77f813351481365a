/*
 * test_sub_tprev.c - the thread subscriptions' use of the stamp's tprev and
 * of the heartbeat's head_pos (docs/CLIENT.md "Subscriber", docs/PROTOCOL.md
 * sections 5 and 6.3) against a scripted in-process broker (a ROUTER and an
 * XPUB in a thread, speaking the real codec), which sends exactly the live
 * events the test asks for, so a lost one is a real hole, not a timing
 * accident. Each test gives the broker its own table of the thread's events.
 *
 * Ordered: thread "t" has events at positions 2, 4, 7, 9, 12, 13 (the others
 * belong to other threads). Live, the broker sends 2 (tprev 0), 4 (tprev 2),
 * then loses 7 and sends 9 (tprev 7), then 12 and 13 without tprev (an older
 * broker). Checked: 2 and 4 are delivered live with no replay although their
 * positions are not consecutive; 9 is a real hole: one replay after 4
 * brings 7 and 9; 12 without tprev falls back to the old rule (a hole: 10
 * expected) and 13 is next by it; every event is delivered once, in order,
 * with exactly one replay per hole besides the first. Its heartbeats carry
 * head_pos 0, so every replay is the first one or a hole's.
 *
 * Unordered, a run's lost tail: runs A and B of thread "t" commit A1@1,
 * B1@2, B2@3, A2@4; B2 is lost on the way, so no later seq of B shows the
 * loss, and A2 is the next of its run. The heartbeats carry the real
 * head_pos. Checked, with and without tprev: A1, B1 and A2 are delivered
 * live, B2 by exactly one replay asking the cursors A:2 B:1 (with tprev at
 * once, A2's tprev 3 being above what the thread is known complete up to;
 * without it, from the next heartbeat's head_pos 4), each event once, in seq
 * order per run, and no replay more while heartbeats keep coming. The same
 * with a live duplicate after the loss (the subscriber starts with the
 * cursor A:1; B1@1, B2@2 lost, A1@3): the duplicate must not hide B2.
 */
#include "agentbus/client.h"
#include "agentbus/subscriber.h"
#include "fake_router.h"
#include "testutil.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define CMD_EP   "inproc://tprev-broker"
#define EV_EP    "inproc://tprev-events"
#define INSTANCE "inst-tprev"

/* One stored event of thread "t": its run, position, seq, the tprev its live stamp carries
 * (-1: none) and whether it is sent live (else lost on the way). */
typedef struct ev {
    const char *run;
    uint64_t pos, seq;
    int64_t tprev;
    bool live;
} ev_t;

static const ev_t ORDERED[] = {
    {"r", 2, 1, 0, true}, {"r", 4, 2, 2, true},   {"r", 7, 3, 4, false},
    {"r", 9, 4, 7, true}, {"r", 12, 5, -1, true}, {"r", 13, 6, -1, true},
};
static const ev_t TAIL_TPREV[] = {
    {"A", 1, 1, 0, true}, {"B", 2, 1, 1, true}, {"B", 3, 2, 2, false}, {"A", 4, 2, 3, true}};
static const ev_t TAIL_PLAIN[] = {
    {"A", 1, 1, -1, true}, {"B", 2, 1, -1, true}, {"B", 3, 2, -1, false}, {"A", 4, 2, -1, true}};
static const ev_t DUP_TPREV[] = {{"B", 1, 1, 0, true}, {"B", 2, 2, 1, false}, {"A", 3, 1, 2, true}};
static const ev_t DUP_PLAIN[] = {
    {"B", 1, 1, -1, true}, {"B", 2, 2, -1, false}, {"A", 3, 1, -1, true}};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define MAXEV    8

typedef struct fake {
    fr_t fr;         /* the ROUTER, its thread and the client's identity */
    void *xpub;      /* the event endpoint (fr.side) */
    const ev_t *evs; /* the thread's events, set before the thread starts */
    size_t nevs;
    bool hb_head;           /* heartbeats carry the store's head_pos (else 0) */
    atomic_bool subscribed; /* the thread's topic subscription reached the XPUB */
    atomic_int committed;   /* evs[0 .. committed) are in the store */
    atomic_int sent;        /* evs[0 .. sent) were handled live (sent or lost) */
    atomic_int replays;     /* replays answered; their requests below, written first */
    atomic_int heartbeats;  /* heartbeats sent */
    uint64_t after[8];      /* their after_pos */
    char cursors[8][64];    /* their cursors, "run:seq" separated by spaces */
    ab_sub_t *sub; /* the test's subscriber: destroyed by the teardown after a failure too */
} fake_t;

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void envelope(ab_buf_t *out, const ev_t *e)
{
    char body[256];
    if (e->seq == 1)
        snprintf(body, sizeof body,
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"%s\","
                 "\"protocolVersion\":\"1.0\"}",
                 e->run);
    else
        snprintf(body, sizeof body, "{\"type\":\"CUSTOM\",\"name\":\"n\",\"value\":%llu}",
                 (unsigned long long)e->seq);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_envelope_json(out, 1, "t", e->run, e->seq, 1, body, &err), AB_OK);
}

/* The record of @p e into @p out; @p live: with its live stamp's tprev. */
static void record(ab_buf_t *out, const ev_t *e, bool live)
{
    ab_stamp_t st = {.pos = e->pos, .time_us = 1};
    if (live && e->tprev >= 0) {
        st.has_tprev = true;
        st.tprev = (uint64_t)e->tprev;
    }
    ab_buf_t env = AB_BUF_INIT;
    envelope(&env, e);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_record_append(out, &st, env.data, env.len, &err), AB_OK);
    ab_buf_free(&env);
}

static void send_msg(fake_t *f, const ab_msg_t *m, const ab_buf_t *frame)
{
    fr_reply(&f->fr, m, frame, frame ? 1 : 0);
}

/* The store's head: the last committed event of "t", or the position before its first
 * (another thread's, or none) before any. */
static uint64_t head(fake_t *f)
{
    int n = atomic_load(&f->committed);
    return n > 0 ? f->evs[n - 1].pos : f->evs[0].pos - 1;
}

/* The cursor of @p run in a thread replay (0: none). */
static uint64_t cursor_of(const ab_replay_t *r, const char *run)
{
    for (size_t i = 0; i < r->ncursors; i++)
        if (r->cursors[i].run.len == strlen(run) &&
            memcmp(r->cursors[i].run.ptr, run, r->cursors[i].run.len) == 0)
            return r->cursors[i].after_seq;
    return 0;
}

/* Note a replay's request, then count it (the test reads the request after the count). */
static void note(fake_t *f, const ab_replay_t *r)
{
    int k = atomic_load(&f->replays);
    if (k < 8) {
        f->after[k] = r->after_pos;
        size_t o = 0;
        f->cursors[k][0] = '\0';
        for (size_t i = 0; i < r->ncursors && o < sizeof f->cursors[k]; i++)
            o += (size_t)snprintf(f->cursors[k] + o, sizeof f->cursors[k] - o, "%s%.*s:%llu",
                                  i ? " " : "", (int)r->cursors[i].run.len, r->cursors[i].run.ptr,
                                  (unsigned long long)r->cursors[i].after_seq);
    }
    atomic_fetch_add(&f->replays, 1);
}

/* A thread replay: every committed event after the position and its run's cursor, then
 * the end. */
static void replay(fake_t *f, const ab_msg_t *q)
{
    const ab_replay_t *r = &q->u.replay;
    assert_int_equal(r->scope, AB_REPLAY_THREAD);
    ab_buf_t frame = AB_BUF_INIT;
    uint32_t count = 0;
    int n = atomic_load(&f->committed);
    for (int i = 0; i < n; i++)
        if (f->evs[i].pos > r->after_pos && f->evs[i].seq > cursor_of(r, f->evs[i].run)) {
            record(&frame, &f->evs[i], false);
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
    note(f, r); /* before the end: once it is read, the test may look */
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

/* A heartbeat with the store's head_pos, or 0 (then none asks the subscriber for a replay:
 * every replay is the first one or a hole's). */
static void heartbeat(fake_t *f)
{
    ab_msg_t m = {.op = AB_OP_HEARTBEAT, .v = 1};
    m.u.heartbeat.instance = (ab_str_t){INSTANCE, strlen(INSTANCE)};
    m.u.heartbeat.time_us = 1;
    m.u.heartbeat.head_pos = f->hb_head ? head(f) : 0;
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_msg_encode(&m, &b, &err), AB_OK);
    zmq_send(f->xpub, AB_TOPIC_HEARTBEAT, AB_TOPIC_HEARTBEAT_LEN, ZMQ_SNDMORE);
    zmq_send(f->xpub, b.data, b.len, 0);
    ab_buf_free(&b);
    atomic_fetch_add(&f->heartbeats, 1);
}

/* Commit evs[i] and send it live unless it is lost. */
static void live(fake_t *f, size_t i)
{
    const ev_t *e = &f->evs[i];
    atomic_store(&f->committed, (int)i + 1);
    if (e->live) {
        ab_buf_t topic = AB_BUF_INIT, frame = AB_BUF_INIT;
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(
            ab_topic_event(&topic, (ab_str_t){"t", 1}, (ab_str_t){e->run, strlen(e->run)}, &err),
            AB_OK);
        record(&frame, e, true);
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
    while (!atomic_load(&f->fr.stop)) {
        if (now_ms() >= next_hb) {
            heartbeat(f);
            next_hb = now_ms() + 50;
        }
        for (int want = atomic_load(&f->sent); done < want; done++)
            live(f, (size_t)done);
        zmq_pollitem_t it[2] = {{.socket = f->fr.router, .events = ZMQ_POLLIN},
                                {.socket = f->xpub, .events = ZMQ_POLLIN}};
        if (zmq_poll(it, 2, 5) <= 0)
            continue;
        ab_msg_t q; /* identity, header, any further frames dropped */
        if ((it[0].revents & ZMQ_POLLIN) && fr_recv(&f->fr, &q, 0))
            handle(f, &q);
        if (it[1].revents & ZMQ_POLLIN) { /* a (un)subscription: 1 or 0, then the topic */
            uint8_t sub[64];
            int n = zmq_recv(f->xpub, sub, sizeof sub, 0);
            if (n == 1 + 5 && sub[0] == 1 && memcmp(sub + 1, "ev\0t\0", 5) == 0)
                atomic_store(&f->subscribed, true);
        }
    }
    return NULL;
}

static int start(void **state, const ev_t *evs, size_t nevs, bool hb_head)
{
    fake_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->evs = evs;
    f->nevs = nevs;
    f->hb_head = hb_head;
    fr_open(&f->fr, CMD_EP);
    f->xpub = fr_side(&f->fr, ZMQ_XPUB, EV_EP);
    fr_run(&f->fr, fake_main, f);
    *state = f;
    return 0;
}

static int setup_ordered(void **state)
{
    return start(state, ORDERED, COUNT(ORDERED), false);
}

static int setup_tail_tprev(void **state)
{
    return start(state, TAIL_TPREV, COUNT(TAIL_TPREV), true);
}

static int setup_tail_plain(void **state)
{
    return start(state, TAIL_PLAIN, COUNT(TAIL_PLAIN), true);
}

static int setup_dup_tprev(void **state)
{
    return start(state, DUP_TPREV, COUNT(DUP_TPREV), true);
}

static int setup_dup_plain(void **state)
{
    return start(state, DUP_PLAIN, COUNT(DUP_PLAIN), true);
}

static int teardown(void **state)
{
    fake_t *f = *state;
    ab_sub_destroy(&f->sub);
    fr_stop(&f->fr);
    free(f);
    return 0;
}

typedef struct got {
    char run[MAXEV][4];
    uint64_t seq[MAXEV], pos[MAXEV];
    bool replayed[MAXEV];
    size_t n;
} got_t;

static int on_event(void *ud, const ab_sub_event_t *e)
{
    got_t *g = ud;
    assert_true(g->n < MAXEV);
    assert_true(e->ev.run.len < sizeof g->run[0]);
    memcpy(g->run[g->n], e->ev.run.ptr, e->ev.run.len);
    g->run[g->n][e->ev.run.len] = '\0';
    g->seq[g->n] = e->ev.seq;
    g->pos[g->n] = e->stamp.pos;
    g->replayed[g->n] = e->replayed;
    g->n++;
    return 0;
}

/* A subscriber of thread "t" (@p o: its scope options), polled until its first replay was
 * answered and its subscription reached the broker. */
static ab_sub_t *open_sub(fake_t *f, ab_sub_opts_t *o, got_t *g)
{
    o->scope = AB_SUB_THREAD;
    o->thread = "t";
    o->on_event = on_event;
    o->ud = g;
    o->zmq_ctx = f->fr.ctx;
    o->timeout_ms = 2000;
    ab_sub_t *s = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_sub_new(&s, CMD_EP, o, &err), AB_OK);
    f->sub = s;
    long deadline = now_ms() + 10000;
    while ((atomic_load(&f->replays) < 1 || !atomic_load(&f->subscribed)) && now_ms() < deadline)
        assert_int_equal(ab_sub_poll(s, 20, &err), AB_OK);
    assert_int_equal(atomic_load(&f->replays), 1); /* the first one */
    assert_true(atomic_load(&f->subscribed));
    return s;
}

/* Let the broker send evs up to @p upto and poll until @p n events were delivered. */
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

/* Poll while the broker sends @p n more heartbeats (each read by a later poll, or not: the
 * checks after it only get weaker, never wrong). */
static void poll_heartbeats(fake_t *f, ab_sub_t *s, int n)
{
    int until = atomic_load(&f->heartbeats) + n;
    long deadline = now_ms() + 10000;
    while (atomic_load(&f->heartbeats) < until && now_ms() < deadline) {
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab_sub_poll(s, 20, &err), AB_OK);
    }
    assert_true(atomic_load(&f->heartbeats) >= until);
}

static void test_tprev_no_replay_and_real_hole(void **state)
{
    fake_t *f = *state;
    got_t g = {.n = 0};
    ab_sub_opts_t o = {.ordered = true};
    ab_sub_t *s = open_sub(f, &o, &g);
    assert_int_equal(f->after[0], 0); /* the first replay, after position 0 */
    ab_sub_stats_t st0 = ab_sub_stats(s);

    step(f, s, &g, 2, 2); /* 2 and 4: their tprev is what was delivered, no replay */
    assert_false(g.replayed[0]);
    assert_false(g.replayed[1]);
    assert_int_equal(ab_sub_stats(s).replays, st0.replays);
    assert_int_equal(ab_sub_stats(s).holes, 0);

    step(f, s, &g, 4, 4); /* 7 lost, 9 says tprev 7 > 4: a real hole, one replay after 4 */
    assert_int_equal(atomic_load(&f->replays), 2);
    assert_int_equal(f->after[1], 4);
    assert_true(g.replayed[2] && g.replayed[3]);
    assert_int_equal(ab_sub_stats(s).holes, 1);

    step(f, s, &g, 5, 5); /* 12 without tprev: the old rule (10 expected), a replay after 9 */
    assert_int_equal(atomic_load(&f->replays), 3);
    assert_int_equal(f->after[2], 9);
    step(f, s, &g, 6, 6); /* 13 without tprev is 12 + 1: next by the old rule */
    assert_false(g.replayed[5]);
    assert_int_equal(atomic_load(&f->replays), 3);
    assert_int_equal(ab_sub_stats(s).holes, 2);

    for (size_t i = 0; i < COUNT(ORDERED); i++) { /* each once, in order */
        assert_int_equal(g.seq[i], ORDERED[i].seq);
        assert_int_equal(g.pos[i], ORDERED[i].pos);
    }
    assert_int_equal(ab_sub_position(s), 13);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_sub_poll(s, 100, &err), AB_OK);
    assert_int_equal(g.n, COUNT(ORDERED));
    ab_sub_destroy(&f->sub);
}

/* The cursor of @p run in @p start (0: none). */
static uint64_t start_seq(const ab_sub_cursor_t *start, size_t nstart, const char *run)
{
    for (size_t k = 0; k < nstart; k++)
        if (strcmp(start[k].run, run) == 0)
            return start[k].after_seq;
    return 0;
}

/* The events of the table after @p start's cursors. */
static size_t wanted(const fake_t *f, const ab_sub_cursor_t *start, size_t nstart)
{
    size_t want = 0;
    for (size_t i = 0; i < f->nevs; i++)
        want += f->evs[i].seq > start_seq(start, nstart, f->evs[i].run);
    return want;
}

/* Every event of the table after @p start's cursors was delivered once, in seq order per
 * run, and the lost one from the store. */
static void check_all_once(const fake_t *f, const got_t *g, const ab_sub_cursor_t *start,
                           size_t nstart)
{
    for (size_t i = 0; i < f->nevs; i++) {
        if (f->evs[i].seq <= start_seq(start, nstart, f->evs[i].run))
            continue;
        size_t seen = 0, at = 0;
        for (size_t j = 0; j < g->n; j++)
            if (strcmp(g->run[j], f->evs[i].run) == 0 && g->seq[j] == f->evs[i].seq) {
                seen++;
                at = j;
            }
        assert_int_equal(seen, 1);
        assert_int_equal(g->pos[at], f->evs[i].pos);
        assert_int_equal(g->replayed[at], !f->evs[i].live);
        for (size_t j = 0; j < at; j++) /* the run's earlier seqs came first */
            if (strcmp(g->run[j], g->run[at]) == 0)
                assert_true(g->seq[j] < g->seq[at]);
    }
    assert_int_equal(g->n, wanted(f, start, nstart));
}

/* An unordered thread: the events before the loss (evs[0 .. @p upto), @p n of them
 * delivered) come live with no replay, also while heartbeats say head_pos is theirs;
 * then the loss and the rest: exactly one replay, asking @p cursors, fills it. */
static void lost_tail(fake_t *f, ab_sub_opts_t *o, int upto, size_t n, const char *cursors,
                      uint64_t holes)
{
    got_t g = {.n = 0};
    const ab_sub_cursor_t *start = o->cursors;
    size_t nstart = o->ncursors;
    ab_sub_t *s = open_sub(f, o, &g);
    step(f, s, &g, upto, n);
    poll_heartbeats(f, s, 3);
    assert_int_equal(atomic_load(&f->replays), 1);

    step(f, s, &g, (int)f->nevs, wanted(f, start, nstart)); /* the lost one from the store */
    assert_int_equal(atomic_load(&f->replays), 2);
    assert_string_equal(f->cursors[1], cursors);
    poll_heartbeats(f, s, 3); /* head_pos is now what was delivered: nothing more */
    assert_int_equal(atomic_load(&f->replays), 2);
    check_all_once(f, &g, start, nstart);
    ab_sub_stats_t st = ab_sub_stats(s);
    assert_int_equal(st.replays, 2);
    assert_int_equal(st.holes, holes);
    ab_sub_destroy(&f->sub);
}

/* B2 lost, A2's tprev 3 is above what the thread is known complete up to (2): A2 is
 * delivered (the next of A) and the thread replayed at once. */
static void test_lost_tail_tprev(void **state)
{
    ab_sub_opts_t o = {.ordered = false};
    lost_tail(*state, &o, 2, 2, "A:2 B:1", 1);
}

/* Without tprev, A2 at 4 is not 2 + 1: delivered, and the heartbeat's head_pos 4 above 2
 * replays the thread. */
static void test_lost_tail_plain(void **state)
{
    ab_sub_opts_t o = {.ordered = false};
    lost_tail(*state, &o, 2, 2, "A:2 B:1", 0);
}

/* The subscriber already has A1 (cursor A:1): B2 lost, then A1 live is a duplicate, which
 * must not count as the thread's progress past B2. */
static void test_dup_after_lost_tprev(void **state)
{
    static const ab_sub_cursor_t have[] = {{"A", 1}};
    ab_sub_opts_t o = {.cursors = have, .ncursors = 1};
    lost_tail(*state, &o, 1, 1, "A:1 B:1", 1);
}

static void test_dup_after_lost_plain(void **state)
{
    static const ab_sub_cursor_t have[] = {{"A", 1}};
    ab_sub_opts_t o = {.cursors = have, .ncursors = 1};
    lost_tail(*state, &o, 1, 1, "A:1 B:1", 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tprev_no_replay_and_real_hole, setup_ordered,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lost_tail_tprev, setup_tail_tprev, teardown),
        cmocka_unit_test_setup_teardown(test_lost_tail_plain, setup_tail_plain, teardown),
        cmocka_unit_test_setup_teardown(test_dup_after_lost_tprev, setup_dup_tprev, teardown),
        cmocka_unit_test_setup_teardown(test_dup_after_lost_plain, setup_dup_plain, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

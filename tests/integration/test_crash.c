/*
 * test_crash.c - a real broker process killed and restarted: SIGKILL in the
 * middle of a publishing load (every acknowledged event survives exactly
 * once, every run stays contiguous from seq 1 and its producer resumes after
 * a claim), and SIGTERM (drains, exits 0, acknowledged events readable after
 * a restart).
 */
#include "testutil.h"

#include "broker_proc.h"

#include <pthread.h>

#define CP     3     /* producers */
#define MAXEV  20000 /* most events a producer keeps */
#define CBATCH 20

typedef struct cprod {
    const bp_t *bp;
    int id;
    ab_buf_t *sent; /* [MAXEV], by seq - 1 */
    uint64_t acked; /* highest seq acknowledged (all before it acked too) */
    uint64_t built; /* envelopes built so far */
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    uint64_t *total;
} cprod_t;

static void *cproduce(void *arg)
{
    cprod_t *p = arg;
    ab_conn_opts_t o = {.timeout_ms = 1000};
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    char run[16];
    snprintf(run, sizeof(run), "k%d", p->id);
    if (ab_doc_new(&doc) != AB_OK || ab_conn_new(&c, p->bp->cmd, &o, &err) != AB_OK)
        goto out;
    while (p->built + CBATCH <= MAXEV) {
        for (int i = 0; i < CBATCH; i++) {
            char body[256];
            uint64_t seq = ++p->built;
            it_body(body, sizeof(body), "crash", run, seq, 0, 16);
            if (ab_envelope_json(&p->sent[seq - 1], 1, "crash", run, seq, 1, body, &err) != AB_OK)
                goto out;
        }
        const ab_result_t *res = NULL;
        if (ab_conn_publish(c, &p->sent[p->built - CBATCH], CBATCH, doc, &res, 1000, &err) != AB_OK)
            break; /* the broker is gone */
        for (int i = 0; i < CBATCH; i++)
            if (res[i].status != AB_RESULT_ACCEPTED)
                goto out;
        pthread_mutex_lock(p->mu);
        p->acked = p->built;
        *p->total += CBATCH;
        pthread_cond_signal(p->cv);
        pthread_mutex_unlock(p->mu);
    }
out:
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    return NULL;
}

typedef struct verify {
    cprod_t *p;
    ab_doc_t *edoc;
    uint64_t next;
} verify_t;

static ab_status_t verify_row(void *ud, const ab_stamp_t *st, const uint8_t *b, size_t len,
                              ab_error_t *err)
{
    verify_t *v = ud;
    (void)st;
    ab_event_t ev;
    assert_int_equal(ab_event_decode(v->edoc, b, len, NULL, &ev, err), AB_OK);
    assert_int_equal(ev.seq, v->next); /* contiguous from 1, each once */
    assert_true(ev.seq <= v->p->built);
    const ab_buf_t *want = &v->p->sent[ev.seq - 1];
    assert_int_equal(len, want->len);
    assert_memory_equal(b, want->data, len);
    v->next++;
    return AB_OK;
}

/* Replay run k<id>; returns the number of events found. */
static uint64_t verify_run(ab_conn_t *c, ab_doc_t *doc, cprod_t *p)
{
    char run[16];
    snprintf(run, sizeof(run), "k%d", p->id);
    verify_t v = {.p = p, .next = 1};
    assert_int_equal(ab_doc_new(&v.edoc), AB_OK);
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay.scope = AB_REPLAY_RUN;
    q.u.replay.thread = (ab_str_t){"crash", 5};
    q.u.replay.run = (ab_str_t){run, strlen(run)};
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_replay(c, &q, verify_row, &v, doc, NULL, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("replay %s: %s", run, err.message);
    ab_doc_destroy(&v.edoc);
    return v.next - 1;
}

/* After a restart the producer claims, learns last_seq and goes on. */
static void resume_run(ab_conn_t *c, ab_doc_t *doc, cprod_t *p, uint64_t found)
{
    char run[16];
    snprintf(run, sizeof(run), "k%d", p->id);
    ab_claimed_t cl;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_claim(c, "crash", run, doc, &cl, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(cl.last_seq, found);
    assert_true(cl.epoch >= 2);
    ab_buf_t ev = AB_BUF_INIT;
    char body[256];
    it_body(body, sizeof(body), "crash", run, found + 1, 0, 0);
    assert_int_equal(ab_envelope_json(&ev, 1, "crash", run, found + 1, cl.epoch, body, &err),
                     AB_OK);
    ab_error_t rej = AB_ERROR_INIT;
    ab_result_t r = it_publish1(c, doc, &ev, &rej);
    if (r.status != AB_RESULT_ACCEPTED)
        fail_msg("resume %s at %llu: %s", run, (unsigned long long)found + 1, rej.message);
    ab_buf_free(&ev);
}

static void test_kill9_under_load(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    uint64_t total = 0;
    cprod_t p[CP];
    pthread_t th[CP];
    for (int i = 0; i < CP; i++) {
        p[i] = (cprod_t){.bp = &t->bp, .id = i, .mu = &mu, .cv = &cv, .total = &total};
        p[i].sent = calloc(MAXEV, sizeof(ab_buf_t));
        assert_int_equal(pthread_create(&th[i], NULL, cproduce, &p[i]), 0);
    }
    /* kill once the load is well under way (bounded wait) */
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    pthread_mutex_lock(&mu);
    while (total < 600 && pthread_cond_timedwait(&cv, &mu, &dl) == 0)
        ;
    uint64_t seen = total;
    pthread_mutex_unlock(&mu);
    bp_kill(&t->bp);
    for (int i = 0; i < CP; i++)
        pthread_join(th[i], NULL);
    assert_true(seen >= 600);
    assert_int_equal(bp_restart(&t->bp), 0);
    ab_conn_t *c = it_connect(&t->bp);
    for (int i = 0; i < CP; i++) {
        uint64_t found = verify_run(c, t->doc, &p[i]);
        print_message("producer %d: acked %llu, found %llu\n", i, (unsigned long long)p[i].acked,
                      (unsigned long long)found);
        assert_true(found >= p[i].acked);
        resume_run(c, t->doc, &p[i], found);
    }
    for (int i = 0; i < CP; i++) {
        for (uint64_t s = 0; s < p[i].built; s++)
            ab_buf_free(&p[i].sent[s]);
        free(p[i].sent);
    }
    ab_conn_destroy(&c);
}

static void test_sigterm_drain(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    cprod_t p = {.id = 0, .sent = calloc(64, sizeof(ab_buf_t))};
    ab_conn_t *c = it_connect(&t->bp);
    for (uint64_t s = 1; s <= 50; s++) {
        char body[256];
        it_body(body, sizeof(body), "crash", "k0", s, 50, 8);
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab_envelope_json(&p.sent[s - 1], 1, "crash", "k0", s, 1, body, &err),
                         AB_OK);
    }
    p.built = 50;
    const ab_result_t *res = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_publish(c, p.sent, 50, t->doc, &res, IT_TIMEOUT, &err), AB_OK);
    for (int i = 0; i < 50; i++)
        assert_int_equal(res[i].status, AB_RESULT_ACCEPTED);
    ab_conn_destroy(&c);
    int rc = bp_stop(&t->bp);
    uint64_t found = 0;
    if (rc == 0 && bp_restart(&t->bp) == 0) {
        c = it_connect(&t->bp);
        found = verify_run(c, t->doc, &p);
        ab_conn_destroy(&c);
    }
    for (int i = 0; i < 50; i++)
        ab_buf_free(&p.sent[i]);
    free(p.sent);
    if (rc != 0)
        fail_msg("SIGTERM: exit status %d, want 0 within %d ms (-1: killed)", rc, BP_STOP_MS);
    assert_int_equal(found, 50);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_kill9_under_load, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_sigterm_drain, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

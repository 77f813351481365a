/*
 * test_worker.c - the worker against a scripted broker (a ROUTER on tcp in a
 * thread, speaking the real codec): serving again after a broker restart
 * when the new instance refuses the first `serve` (retryable: served at a
 * later pong; not retryable: ab_worker_run() says so), an instance longer
 * than 64 bytes (served once, not at every pong), a decline reason cut
 * at AB_REASON_MAX inside a UTF-8 character (cut before it, and sent), and
 * a refused decline (counted; not retryable: ab_worker_run() says so;
 * retryable: sent again until answered).
 */
#include "agentbus/client.h"
#include "agentbus/worker.h"
#include "fake_router.h"
#include "testutil.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS   400 /* ab_worker_run() calls of 20 ms at most before a test gives up */
#define QUIET_MS 250 /* a run that sees nothing more: longer than the decline retry delay */

typedef enum mode {
    M_RETRY,   /* a restarted instance refuses the first serve `overloaded`, then serves */
    M_FATAL,   /* a restarted instance refuses every serve `unsupported` */
    M_LONG,    /* one instance of 100 bytes; an action_call after the 3rd pong */
    M_DECLINE, /* declines are recorded and answered `declined` */
    M_REFUSE1, /* ... the first refused `overloaded` (retryable), the next answered */
    M_REFUSE,  /* ... each refused `not_found` */
} script_t;

typedef struct fake {
    fr_t fr; /* the ROUTER (tcp), its thread and the last client's identity */
    script_t mode;
    char instance[128]; /* the welcome's (and, in M_LONG, every pong's) */
    atomic_int serves, pongs, results, declines;
    atomic_size_t reason_len; /* the last decline's, written before declines grows */
    atomic_bool reason_valid;
    atomic_uint_fast64_t request, epoch; /* ... likewise */
} fake_t;

static void send_msg(fake_t *f, const ab_msg_t *m)
{
    fr_reply(&f->fr, m, NULL, 0);
}

static void send_error(fake_t *f, uint64_t cid, ab_status_t code)
{
    ab_error_t e = AB_ERROR_INIT;
    ab_error_set(&e, code, "", "scripted %s", ab_status_name(code));
    e.cid = cid;
    ab_buf_t b = AB_BUF_INIT;
    assert_int_equal(ab_error_encode_reply(&e, 1, &b), AB_OK);
    fr_send(&f->fr, &b, NULL, 0);
    ab_buf_free(&b);
}

static void on_serve(fake_t *f, const ab_msg_t *q)
{
    int n = atomic_load(&f->serves);
    if (n > 0 && (f->mode == M_FATAL || (f->mode == M_RETRY && n == 1)))
        send_error(f, q->cid, f->mode == M_FATAL ? AB_UNSUPPORTED : AB_OVERLOADED);
    else {
        ab_msg_t m = {.op = AB_OP_SERVED, .v = 1, .cid = q->cid};
        m.u.served.worker_id = (ab_str_t){n == 0 ? "w-1" : "w-9", 3};
        m.u.served.lease_ms = 300; /* a ping every 100 ms */
        send_msg(f, &m);
    }
    atomic_fetch_add(&f->serves, 1);
}

static void on_ping(fake_t *f, const ab_msg_t *q)
{
    bool restarted = f->mode != M_LONG && atomic_load(&f->serves) > 0;
    const char *inst = restarted ? "inst-2" : f->instance;
    ab_msg_t m = {.op = AB_OP_PONG, .v = 1, .cid = q->cid};
    m.u.pong = (ab_pong_t){{inst, strlen(inst)}, 0};
    send_msg(f, &m);
    if (atomic_fetch_add(&f->pongs, 1) + 1 == 3 && f->mode == M_LONG) {
        ab_msg_t c = {.op = AB_OP_ACTION_CALL, .v = 1};
        c.u.action_call = (ab_action_call_t){.call = 1, .timeout_ms = 1000};
        c.u.action_call.agent = (ab_str_t){"ag", 2};
        c.u.action_call.action = (ab_str_t){"a", 1};
        send_msg(f, &c);
    }
}

static void on_decline(fake_t *f, const ab_msg_t *q)
{
    const ab_decline_t *d = &q->u.decline;
    atomic_store(&f->reason_len, d->reason.len);
    atomic_store(&f->reason_valid, ab_utf8_valid(d->reason.ptr, d->reason.len));
    atomic_store(&f->request, d->request);
    atomic_store(&f->epoch, d->epoch);
    int n = atomic_load(&f->declines);
    if (f->mode == M_REFUSE || (f->mode == M_REFUSE1 && n == 0))
        send_error(f, q->cid, f->mode == M_REFUSE ? AB_NOT_FOUND : AB_OVERLOADED);
    else {
        ab_msg_t m = {.op = AB_OP_DECLINED, .v = 1, .cid = q->cid};
        m.u.declined = (ab_declined_t){d->request, AB_REQ_QUEUED};
        send_msg(f, &m);
    }
    atomic_fetch_add(&f->declines, 1);
}

static void handle(fake_t *f, const ab_msg_t *q)
{
    ab_msg_t m = {.op = AB_OP_WELCOME, .v = 1, .cid = q->cid};
    switch (q->op) {
    case AB_OP_HELLO:
        m.u.welcome.instance = (ab_str_t){f->instance, strlen(f->instance)};
        m.u.welcome.event_endpoint = (ab_str_t){"inproc://none", 13};
        m.u.welcome.limits = ab_limits_default();
        send_msg(f, &m);
        break;
    case AB_OP_SERVE: on_serve(f, q); break;
    case AB_OP_PING: on_ping(f, q); break;
    case AB_OP_ACTION_RESULT: atomic_fetch_add(&f->results, 1); break;
    case AB_OP_LEAVE:
        m.op = AB_OP_LEFT;
        send_msg(f, &m);
        break;
    case AB_OP_DECLINE: on_decline(f, q); break;
    default: break;
    }
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    while (!atomic_load(&f->fr.stop)) {
        ab_msg_t q;
        if (fr_recv(&f->fr, &q, 20))
            handle(f, &q);
    }
    return NULL;
}

static fake_t *fake_start(script_t mode, const char *instance)
{
    fake_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->mode = mode;
    snprintf(f->instance, sizeof(f->instance), "%s", instance);
    fr_start(&f->fr, "tcp://127.0.0.1:*", fake_main, f);
    return f;
}

static void fake_stop(fake_t *f)
{
    fr_stop(&f->fr);
    free(f);
}

/* A worker of agent "ag" (action "a"), connected to @p f; served when @p serve. */
static ab_worker_t *worker_new(fake_t *f, bool serve)
{
    ab_worker_opts_t o = {.name = "w", .timeout_ms = 2000};
    ab_worker_t *w = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_worker_new(&w, f->fr.ep, &o, &err), AB_OK);
    static const char *const acts[] = {"a"};
    assert_int_equal(ab_worker_add_agent(w, "ag", 1, acts, 1, &err), AB_OK);
    if (serve)
        assert_int_equal(ab_worker_serve(w, &err), AB_OK);
    return w;
}

/* The restarted broker refuses the first `serve` (overloaded, retryable): the worker
 * sends it again at a later pong and is served (before: never again, run said AB_OK). */
static void test_reserve_retried(void **state)
{
    (void)state;
    fake_t *f = fake_start(M_RETRY, "inst-1");
    ab_worker_t *w = worker_new(f, true);
    assert_string_equal(ab_worker_id(w), "w-1");
    ab_error_t err = AB_ERROR_INIT;
    for (int i = 0; i < ROUNDS && strcmp(ab_worker_id(w), "w-9") != 0; i++)
        assert_int_equal(ab_worker_run(w, 20, &err), AB_OK);
    assert_string_equal(ab_worker_id(w), "w-9");
    assert_int_equal(atomic_load(&f->serves), 3); /* served, refused, served */
    assert_int_equal(ab_worker_stats(w).reserved, 1);
    ab_worker_destroy(&w);
    fake_stop(f);
}

/* A refusal that is not retryable is returned by ab_worker_run() (before: dropped). */
static void test_reserve_refused(void **state)
{
    (void)state;
    fake_t *f = fake_start(M_FATAL, "inst-1");
    ab_worker_t *w = worker_new(f, true);
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = AB_OK;
    for (int i = 0; i < ROUNDS && st == AB_OK; i++)
        st = ab_worker_run(w, 20, &err);
    assert_int_equal(st, AB_UNSUPPORTED);
    assert_int_equal(err.code, AB_UNSUPPORTED);
    assert_int_equal(ab_worker_stats(w).reserved, 0);
    ab_worker_destroy(&w);
    fake_stop(f);
}

/* An instance of 100 bytes is one instance: pongs that name it send no `serve` (before:
 * kept in 64 bytes, it differed from every pong's and each sent `serve`). */
static void test_long_instance(void **state)
{
    (void)state;
    char inst[101];
    memset(inst, 'i', 100);
    inst[100] = '\0';
    fake_t *f = fake_start(M_LONG, inst);
    ab_worker_t *w = worker_new(f, true);
    ab_error_t err = AB_ERROR_INIT;
    /* the action_call follows the 3rd pong: once answered, those pongs were handled */
    for (int i = 0; i < ROUNDS && atomic_load(&f->results) == 0; i++)
        assert_int_equal(ab_worker_run(w, 20, &err), AB_OK);
    assert_int_equal(atomic_load(&f->results), 1);
    assert_int_equal(atomic_load(&f->serves), 1);
    assert_int_equal(ab_worker_stats(w).reserved, 0);
    ab_worker_destroy(&w);
    fake_stop(f);
}

/* Decline with @p tail placed so that its first character straddles byte AB_REASON_MAX:
 * the reason sent is cut before that character, and is sent. */
static void decline_cut(fake_t *f, ab_worker_t *w, const char *tail, size_t before)
{
    char reason[AB_REASON_MAX + 16];
    memset(reason, 'a', AB_REASON_MAX - before);
    snprintf(reason + AB_REASON_MAX - before, sizeof(reason) - (AB_REASON_MAX - before), "%s",
             tail);
    assert_true(ab_utf8_valid(reason, strlen(reason)));
    int n = atomic_load(&f->declines);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_worker_decline(w, 7, 1, reason, &err), AB_OK);
    for (int i = 0; i < ROUNDS && atomic_load(&f->declines) == n; i++)
        assert_int_equal(ab_worker_run(w, 20, &err), AB_OK);
    assert_int_equal(atomic_load(&f->declines), n + 1);
    assert_int_equal(atomic_load(&f->reason_len), AB_REASON_MAX - before);
    assert_true(atomic_load(&f->reason_valid));
}

static void test_decline_utf8(void **state)
{
    (void)state;
    fake_t *f = fake_start(M_DECLINE, "inst-1");
    ab_worker_t *w = worker_new(f, false);
    decline_cut(f, w, "\xc3\xa9 e-acute", 1);         /* 2 bytes, 1 before the cut */
    decline_cut(f, w, "\xf0\x9f\x98\x80 a smile", 3); /* 4 bytes, 3 before the cut */
    decline_cut(f, w, "\xe2\x82\xac euro", 2);        /* 3 bytes, 2 before the cut */
    decline_cut(f, w, "\xe2\x82\xac euro", 0);        /* just after the cut: whole */
    /* a reason that is not UTF-8 is cut before its first bad byte, and the decline sent
     * (before: it failed to encode, AB_INVALID_ARGUMENT, and nothing was sent) */
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_worker_decline(w, 7, 1, "ok \xff bad", &err), AB_OK);
    for (int i = 0; i < ROUNDS && atomic_load(&f->declines) == 4; i++)
        assert_int_equal(ab_worker_run(w, 20, &err), AB_OK);
    assert_int_equal(atomic_load(&f->declines), 5);
    assert_int_equal(atomic_load(&f->reason_len), 3);
    assert_true(atomic_load(&f->reason_valid));
    assert_int_equal(ab_worker_stats(w).declined, 5);
    ab_worker_destroy(&w);
    fake_stop(f);
}

/* The broker refuses a decline `not_found` (not retryable: the assignment is not this
 * worker's): stats.decline_refused counts it, it is not sent again, and ab_worker_run()
 * goes on (before: the refusal was read and dropped, and nothing counted it). */
static void test_decline_refused(void **state)
{
    (void)state;
    fake_t *f = fake_start(M_REFUSE, "inst-1");
    ab_worker_t *w = worker_new(f, false);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_worker_decline(w, 7, 3, "busy", &err), AB_OK);
    for (int i = 0; i < ROUNDS && ab_worker_stats(w).decline_refused == 0; i++)
        assert_int_equal(ab_worker_run(w, 20, &err), AB_OK); /* the loop goes on */
    assert_int_equal(err.code, AB_OK);
    ab_worker_stats_t s = ab_worker_stats(w);
    assert_int_equal(s.declined, 1);
    assert_int_equal(s.decline_refused, 1);
    /* not sent again: runs past the retry delay read nothing more and say AB_OK */
    for (int i = 0; i < 2; i++)
        assert_int_equal(ab_worker_run(w, QUIET_MS, &err), AB_OK);
    assert_int_equal(atomic_load(&f->declines), 1);
    ab_worker_destroy(&w);
    fake_stop(f);
}

/* A retryable refusal (`overloaded`) is counted and the decline sent again by
 * ab_worker_run() itself, with the same request, epoch and reason, until it is answered
 * `declined` (before: dropped, and the assignment stayed with the worker). */
static void test_decline_retried(void **state)
{
    (void)state;
    fake_t *f = fake_start(M_REFUSE1, "inst-1");
    ab_worker_t *w = worker_new(f, false);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_worker_decline(w, 9, 2, "full", &err), AB_OK);
    for (int i = 0; i < ROUNDS && atomic_load(&f->declines) < 2; i++)
        assert_int_equal(ab_worker_run(w, 20, &err), AB_OK);
    assert_int_equal(atomic_load(&f->declines), 2);
    assert_int_equal(atomic_load(&f->request), 9);
    assert_int_equal(atomic_load(&f->epoch), 2);
    assert_int_equal(atomic_load(&f->reason_len), 4);
    ab_worker_stats_t s = ab_worker_stats(w);
    assert_int_equal(s.declined, 1); /* one decline, sent twice */
    assert_int_equal(s.decline_refused, 1);
    /* answered: not sent a third time */
    for (int i = 0; i < 2; i++)
        assert_int_equal(ab_worker_run(w, QUIET_MS, &err), AB_OK);
    assert_int_equal(atomic_load(&f->declines), 2);
    ab_worker_destroy(&w);
    fake_stop(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_retried), cmocka_unit_test(test_reserve_refused),
        cmocka_unit_test(test_long_instance),   cmocka_unit_test(test_decline_utf8),
        cmocka_unit_test(test_decline_refused), cmocka_unit_test(test_decline_retried),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

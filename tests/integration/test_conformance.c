/*
 * test_conformance.c - `agentbus conformance` as a process against our own
 * broker: the whole suite passes (exit 0, "0 failed", every check named),
 * `--only gap` runs that one check alone, a second run against the same
 * broker passes too (fresh ids per run), and usage errors exit 2. A broker
 * that does not answer makes every check fail with exit 1, within bounds.
 * Our broker never announces a capability `unsupported`, so a small fake
 * broker in this process (a ROUTER thread answering hello and snapshot)
 * does: the `unsupported` check passes when `snapshot` is then refused with
 * a non-retryable `unsupported` error, and fails when it is answered
 * anything else.
 */
#include "testutil.h"

#include "agentbus/nego.h"
#include "broker_proc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <zmq.h>

#define OUT_MAX 16384

static const char *const check_names[] = {
    "version",    "ordering",  "gap",          "duplicate",   "conflict",
    "fencing",    "terminal",  "errors",       "replay_run",  "replay_thread",
    "replay_all", "heartbeat", "flow_control", "unsupported", "snapshots",
    "actions",    "dispatch",  "cancel_run",   "resume_run",  "threads",
};
#define NCHECKS (sizeof(check_names) / sizeof(check_names[0]))

#include "cli_run.h"

/* True when @p out has a line "<verdict> <name>" (then end of line or ':'). */
static bool has_line(const char *out, const char *verdict, const char *name)
{
    char want[128];
    snprintf(want, sizeof(want), "%s %s", verdict, name);
    for (const char *p = out; (p = strstr(p, want)) != NULL; p++)
        if ((p == out || p[-1] == '\n') && (p[strlen(want)] == '\n' || p[strlen(want)] == ':'))
            return true;
    return false;
}

static void assert_all_pass(const char *out)
{
    for (size_t i = 0; i < NCHECKS; i++) {
        bool pass = has_line(out, "PASS", check_names[i]);
        /* our broker announces durableThreadSnapshots (available): unsupported is skipped */
        bool skip =
            strcmp(check_names[i], "unsupported") == 0 && has_line(out, "SKIP", "unsupported");
        if (!pass && !skip)
            fail_msg("check %s did not pass", check_names[i]);
    }
    assert_non_null(strstr(out, "19 passed, 0 failed, 1 skipped\n"));
}

static void test_conformance_full_suite(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char out[OUT_MAX];
    assert_int_equal(it_run_cli(out, "conformance %s", t->bp.cmd), 0);
    assert_all_pass(out);
    assert_non_null(strstr(out, "cleanup: ended ")); /* the checks leave some runs open */
    assert_null(strstr(out, "stays active"));
    /* and the broker is left with none active (issue 16) */
    ab_conn_t *c = it_connect(&t->bp);
    ab_stats_reply_t st;
    ab_error_t err = AB_ERROR_INIT;
    for (int i = 0; i < 300; i++) { /* the store's figures are a second old at most */
        assert_int_equal(ab_conn_stats(c, t->doc, &st, IT_TIMEOUT, &err), AB_OK);
        if (st.runs_total > 0 && st.runs_active == 0)
            break;
        assert_int_equal(ab_conn_wait(c, 10), 0);
    }
    assert_true(st.runs_total > 0);
    assert_int_equal(st.runs_active, 0);
    ab_conn_destroy(&c);
    /* again on the same broker: every check uses fresh ids */
    assert_int_equal(it_run_cli(out, "conformance --timeout 5000 %s", t->bp.cmd), 0);
    assert_all_pass(out);
}

static void test_conformance_only_gap(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char out[OUT_MAX];
    assert_int_equal(it_run_cli(out, "conformance %s --only gap", t->bp.cmd), 0);
    assert_true(has_line(out, "PASS", "gap"));
    assert_non_null(strstr(out, "1 passed, 0 failed, 0 skipped\n"));
    for (size_t i = 0; i < NCHECKS; i++)
        if (strcmp(check_names[i], "gap") != 0)
            assert_null(strstr(out, check_names[i]));
    assert_int_equal(it_run_cli(out, "conformance %s --only gap --json", t->bp.cmd), 0);
    assert_non_null(strstr(out, "{\"check\":\"gap\",\"result\":\"pass\"}\n"));
    assert_non_null(strstr(out, "{\"cleanup\":{\"ended\":"));
    assert_non_null(strstr(out, "{\"passed\":1,\"failed\":0,\"skipped\":0}\n"));
}

static void test_conformance_usage_and_unreachable(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char out[OUT_MAX], ep[160];
    assert_int_equal(it_run_cli(out, "conformance"), 2);
    assert_int_equal(it_run_cli(out, "conformance %s --only nope", t->bp.cmd), 2);
    assert_int_equal(it_run_cli(out, "conformance --help"), 0);
    snprintf(ep, sizeof(ep), "%s", t->bp.cmd);
    assert_int_equal(bp_stop(&t->bp), 0);
    assert_int_equal(it_run_cli(out, "conformance %s --timeout 300 --only gap --only errors", ep),
                     1);
    assert_true(has_line(out, "FAIL", "gap"));
    assert_true(has_line(out, "FAIL", "errors"));
    assert_non_null(strstr(out, "0 passed, 2 failed, 0 skipped\n"));
    /* the refusal named (not a wait to the timeout; no clock is asserted) */
    assert_non_null(strstr(out, "connection refused"));
}

/* ---- a fake broker announcing durableThreadSnapshots unsupported ---------- */

typedef struct fakeb {
    void *ctx, *router;
    pthread_t th;
    atomic_bool stop;
    ab_status_t snapshot_answer; /* the error code `snapshot` gets */
    char ep[128];
} fakeb_t;

static void fakeb_reply(fakeb_t *f, zmq_msg_t *id, const ab_buf_t *b)
{
    zmq_send(f->router, zmq_msg_data(id), zmq_msg_size(id), ZMQ_SNDMORE);
    zmq_send(f->router, b->data, b->len, 0);
}

static void fakeb_answer(fakeb_t *f, zmq_msg_t *id, const ab_msg_t *q)
{
    static const ab_cap_t caps[] = {
        {AB_CAP_PUBLISH, sizeof(AB_CAP_PUBLISH) - 1, AB_CAP_AVAILABLE},
        {AB_CAP_DURABLE_SNAPSHOTS, sizeof(AB_CAP_DURABLE_SNAPSHOTS) - 1, AB_CAP_UNSUPPORTED}};
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    if (q->op == AB_OP_HELLO) {
        ab_msg_t m = {.op = AB_OP_WELCOME, .v = 1, .cid = q->cid};
        m.u.welcome.instance = (ab_str_t){"fake", 4};
        m.u.welcome.event_endpoint = (ab_str_t){"tcp://127.0.0.1:9", 17};
        m.u.welcome.limits = ab_limits_default();
        m.u.welcome.caps = caps;
        m.u.welcome.ncaps = 2;
        assert_int_equal(ab_msg_encode(&m, &b, &err), AB_OK);
    } else {
        ab_status_t code = q->op == AB_OP_SNAPSHOT ? f->snapshot_answer : AB_UNSUPPORTED;
        ab_error_set(&err, code, "", "fake broker: %s", ab_status_name(code));
        err.cid = q->cid;
        assert_int_equal(ab_error_encode_reply(&err, 1, &b), AB_OK);
    }
    fakeb_reply(f, id, &b);
    ab_buf_free(&b);
}

static void *fakeb_main(void *arg)
{
    fakeb_t *f = arg;
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    while (!atomic_load(&f->stop)) {
        zmq_pollitem_t it = {.socket = f->router, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 50) <= 0)
            continue;
        zmq_msg_t id, hdr;
        zmq_msg_init(&id);
        zmq_msg_init(&hdr);
        ab_msg_t q;
        ab_error_t err = AB_ERROR_INIT;
        if (zmq_msg_recv(&id, f->router, 0) >= 0 && zmq_msg_more(&id) &&
            zmq_msg_recv(&hdr, f->router, 0) >= 0 &&
            ab_msg_decode(doc, zmq_msg_data(&hdr), zmq_msg_size(&hdr), NULL, &q, &err) == AB_OK)
            fakeb_answer(f, &id, &q);
        zmq_msg_close(&id);
        zmq_msg_close(&hdr);
    }
    ab_doc_destroy(&doc);
    return NULL;
}

static void fakeb_start(fakeb_t *f, ab_status_t snapshot_answer)
{
    f->snapshot_answer = snapshot_answer;
    atomic_init(&f->stop, false);
    f->ctx = zmq_ctx_new();
    f->router = zmq_socket(f->ctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(f->router, ZMQ_LINGER, &zero, sizeof(zero));
    assert_int_equal(zmq_bind(f->router, "tcp://127.0.0.1:*"), 0);
    size_t len = sizeof(f->ep);
    assert_int_equal(zmq_getsockopt(f->router, ZMQ_LAST_ENDPOINT, f->ep, &len), 0);
    assert_int_equal(pthread_create(&f->th, NULL, fakeb_main, f), 0);
}

static void fakeb_stop(fakeb_t *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    zmq_close(f->router);
    zmq_ctx_term(f->ctx);
}

/* An unsupported capability that is refused as such passes; any other answer fails. */
static void test_conformance_unsupported(void **state)
{
    (void)state;
    char out[OUT_MAX];
    fakeb_t f;
    fakeb_start(&f, AB_UNSUPPORTED);
    assert_int_equal(it_run_cli(out, "conformance %s --only unsupported --timeout 3000", f.ep), 0);
    assert_true(has_line(out, "PASS", "unsupported"));
    assert_non_null(strstr(out, "1 passed, 0 failed, 0 skipped\n"));
    fakeb_stop(&f);

    fakeb_start(&f, AB_INTERNAL); /* refused, but not as unsupported */
    assert_int_equal(it_run_cli(out, "conformance %s --only unsupported --timeout 3000", f.ep), 1);
    assert_true(has_line(out, "FAIL", "unsupported"));
    assert_non_null(strstr(out, "expected error unsupported"));
    fakeb_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_conformance_full_suite, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_conformance_only_gap, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_conformance_usage_and_unreachable, it_setup,
                                        it_teardown),
        cmocka_unit_test(test_conformance_unsupported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

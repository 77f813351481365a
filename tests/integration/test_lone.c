/*
 * test_lone.c - the lone path (broker/writer.c invariant 7), against a real
 * broker process: a small publish that finds the writer idle is committed by
 * the command thread itself (agentbus_lone_commits_total counts them). Such a
 * commit never waits for a lock: with the database write-locked by another
 * process, the publish goes on to the writer, which waits for the lock, and
 * the command thread answers a ping sent behind it at once; that group is
 * counted slow, by its time in the store (agentbus_slow_groups_total). After
 * a failed commit every publish goes to the writer for a second: the count
 * stays. A publish that waited behind another group is logged with what the
 * writer did meanwhile.
 */
#include "testutil.h"

#include "db_lock.h"
#include "http_get.h"
#include "raw_client.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int metrics_port;

/* The broker's log file (debug: every slow group logged) and metrics port. */
static char log_path[64];

static int lone_setup(void **state)
{
    static char addr[32];
    metrics_port = bp_free_port();
    snprintf(addr, sizeof addr, "127.0.0.1:%d", metrics_port);
    snprintf(log_path, sizeof log_path, "/tmp/ab_it_lone_log_%d", (int)getpid());
    const char *const extra[] = {"--metrics", addr, "--log-level", "debug", NULL};
    return it_setup_log(state, extra, log_path);
}

static int lone_teardown(void **state)
{
    unlink(log_path);
    return it_teardown(state);
}

/* Whether the log has a slow-group line whose store's commit took @p ms or more. */
static bool commit_line_over(double ms)
{
    FILE *f = fopen(log_path, "r");
    char line[2048];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, " ms in the store's commit");
        const char *num = at;
        while (num && num > line && (num[-1] == '.' || (num[-1] >= '0' && num[-1] <= '9')))
            num--;
        found = at && strstr(line, "slow group") && atof(num) >= ms;
    }
    if (f)
        fclose(f);
    return found;
}

/* One reply's op, cid and, for `published`, its first result's status and error code. */
typedef struct reply {
    ab_op_t op;
    uint64_t cid;
    ab_result_status_t status;
    ab_status_t code;
} reply_t;

static void send_publish(void *s, uint64_t cid, const ab_buf_t *ev)
{
    ab_msg_t m = {.op = AB_OP_PUBLISH, .v = rc_version(), .cid = cid};
    m.u.publish.count = 1;
    ab_buf_t hdr = AB_BUF_INIT;
    rc_encode(&m, &hdr);
    assert_int_equal(zmq_send(s, hdr.data, hdr.len, ZMQ_SNDMORE), (int)hdr.len);
    assert_int_equal(zmq_send(s, ev->data, ev->len, 0), (int)ev->len);
    ab_buf_free(&hdr);
}

static void send_ping(void *s, uint64_t cid)
{
    ab_msg_t m = {.op = AB_OP_PING, .v = rc_version(), .cid = cid};
    ab_buf_t hdr = AB_BUF_INIT;
    rc_encode(&m, &hdr);
    assert_true(rc_send(s, &hdr, 5000));
    ab_buf_free(&hdr);
}

/* The next reply on @p s (fails the test when none comes within IT_TIMEOUT). */
static reply_t next_reply(void *s, ab_doc_t *doc)
{
    zmq_msg_t parts[4];
    size_t n = rc_recv(s, parts, 4, IT_TIMEOUT);
    assert_int_equal(n, 1);
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(
        ab_msg_decode(doc, zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]), NULL, &m, &err),
        AB_OK);
    reply_t r = {.op = m.op, .cid = m.cid};
    if (m.op == AB_OP_PUBLISHED && m.u.published.nresults > 0) {
        r.status = m.u.published.results[0].status;
        r.code = m.u.published.results[0].error ? m.u.published.results[0].error->code : AB_OK;
    }
    rc_close(parts, n);
    return r;
}

static void test_lone_commit_never_waits(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    void *ctx = zmq_ctx_new();
    void *s = rc_dealer(ctx, t->bp.cmd, 0);
    ab_buf_t buf = AB_BUF_INIT;
    rc_encode_hello(&buf, 1);
    assert_true(rc_send(s, &buf, 5000));
    assert_int_equal(next_reply(s, t->doc).op, AB_OP_WELCOME);
    ab_buf_t ev[3] = {AB_BUF_INIT, AB_BUF_INIT, AB_BUF_INIT};
    for (int i = 0; i < 3; i++) {
        char run[8];
        snprintf(run, sizeof run, "r%d", i);
        it_event(&ev[i], "lone", run, 1, 0, 1);
    }
    /* an idle writer: a publish is a lone commit, unless it meets the writer awake or a
     * slow commit (a busy machine's disk) turned the path off for a second: publish again
     * (duplicates) until one is, within IT_TIMEOUT */
    uint64_t lone0 = it_metric(metrics_port, "agentbus_lone_commits_total");
    reply_t r = {0};
    int64_t until = ab__mono_ms() + IT_TIMEOUT;
    for (uint64_t k = 0; it_metric(metrics_port, "agentbus_lone_commits_total") == lone0; k++) {
        assert_true(ab__mono_ms() < until);
        send_publish(s, 10 + k, &ev[0]);
        r = next_reply(s, t->doc);
        assert_int_equal(r.op, AB_OP_PUBLISHED);
    }

    const char *slow_commit = "agentbus_slow_groups_total{part=\"commit\"}";
    uint64_t slow0 = it_metric(metrics_port, slow_commit);
    sqlite3 *db = dl_lock(t->bp.dir);
    /* a publish that meets the lock: a lone commit does not wait for it but gives the
     * publish to the writer, so the command thread answers a ping sent behind it at once */
    send_publish(s, 2, &ev[1]);
    send_ping(s, 3);
    r = next_reply(s, t->doc);
    assert_int_equal(r.op, AB_OP_PONG);
    assert_int_equal(r.cid, 3);
    /* the writer waits for the lock (about 1 s), then answers unavailable */
    r = next_reply(s, t->doc);
    assert_int_equal(r.op, AB_OP_PUBLISHED);
    assert_int_equal(r.cid, 2);
    assert_int_equal(r.status, AB_RESULT_REJECTED);
    assert_int_equal(r.code, AB_UNAVAILABLE);
    uint64_t lone2 = it_metric(metrics_port, "agentbus_lone_commits_total");
    dl_unlock(&db);
    /* that group took the lock's wait in the store: a slow group of the commit's (not of the
     * answers', as a failed commit's time once was), counted and logged right after its
     * answer left (a loaded machine may add slow groups of its own to either count) */
    until = ab__mono_ms() + IT_TIMEOUT;
    while (it_metric(metrics_port, slow_commit) == slow0 || !commit_line_over(500))
        assert_true(ab__mono_ms() < until);
    /* for a second after a failed commit every publish goes to the writer */
    send_publish(s, 4, &ev[2]);
    r = next_reply(s, t->doc);
    assert_int_equal(r.cid, 4);
    assert_int_equal(r.status, AB_RESULT_ACCEPTED);
    assert_int_equal(it_metric(metrics_port, "agentbus_lone_commits_total"), lone2);

    for (int i = 0; i < 3; i++)
        ab_buf_free(&ev[i]);
    ab_buf_free(&buf);
    zmq_close(s);
    zmq_ctx_term(ctx);
}

/* A publish that waited behind another group is logged with what the writer did meanwhile
 * (writer.c busy_during): A meets a write lock and goes to the writer, which waits in the
 * store; B, sent while it waits, queues behind it; the lock is released 20 ms after B is
 * sent (the wait under test is a duration), A commits, then B, whose slow-group line (every
 * one at --log-level debug) names the earlier group. When B still joined A's group (it
 * arrived before the writer took A), there was no wait: tried again, at most 10 times. */
static void test_wait_is_named(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    void *ctx = zmq_ctx_new();
    void *s = rc_dealer(ctx, t->bp.cmd, 0);
    ab_buf_t buf = AB_BUF_INIT, ev[2] = {AB_BUF_INIT, AB_BUF_INIT};
    rc_encode_hello(&buf, 1);
    assert_true(rc_send(s, &buf, 5000));
    assert_int_equal(next_reply(s, t->doc).op, AB_OP_WELCOME);
    const char *needle = "of it: an earlier group";
    for (int k = 0; k < 10 && bp_wait_log(&t->bp, needle, 1, 0) < 1; k++) {
        for (int i = 0; i < 2; i++) {
            char run[16];
            snprintf(run, sizeof run, "w%d-%d", k, i);
            ab_buf_free(&ev[i]);
            it_event(&ev[i], "wait", run, 1, 0, 1);
        }
        sqlite3 *db = dl_lock(t->bp.dir);
        send_publish(s, 100 + 2 * (uint64_t)k, &ev[0]);
        /* a ping behind A: its pong means the command thread has handed A to the writer (a
         * lone attempt, refused by the lock, or straight) */
        send_ping(s, 99);
        reply_t pong = next_reply(s, t->doc);
        assert_int_equal(pong.op, AB_OP_PONG);
        send_publish(s, 101 + 2 * (uint64_t)k, &ev[1]);
        nanosleep(&(struct timespec){.tv_nsec = 20000000L}, NULL);
        dl_unlock(&db);
        for (int i = 0; i < 2; i++) {
            reply_t r = next_reply(s, t->doc);
            assert_int_equal(r.op, AB_OP_PUBLISHED);
            assert_int_equal(r.status, AB_RESULT_ACCEPTED);
        }
    }
    assert_true(bp_wait_log(&t->bp, needle, 1, IT_TIMEOUT) >= 1);
    for (int i = 0; i < 2; i++)
        ab_buf_free(&ev[i]);
    ab_buf_free(&buf);
    zmq_close(s);
    zmq_ctx_term(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lone_commit_never_waits, lone_setup, lone_teardown),
        cmocka_unit_test_setup_teardown(test_wait_is_named, lone_setup, lone_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

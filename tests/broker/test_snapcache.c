/*
 * test_snapcache.c - each broker has its own cache of snapshot builders
 * (broker/snapcache.c): two caches never see each other's entries, and two
 * brokers running in one process (ab_broker_new) answer SNAPSHOT of the
 * same thread id from their own events only, each after the other cached its
 * builder for that id; and a put beside a taken entry of its thread keeps the
 * one further along (snapcache.c invariant 4).
 *
 * The brokers bind 127.0.0.1 on ports the system picks and are stopped by
 * their handles; the test talks to them over bare DEALER sockets (broker
 * tests link the broker, not the client library); their data directories
 * come from mkdtemp() and are removed.
 */
#include "agentbus/broker.h"
#include "agentbus/json.h"
#include "embedded.h"
#include "snap_internal.h"
#include "testutil.h"

#include "raw_client.h"

#define THREAD "shared-thread"

static ab_str_t S(const char *s)
{
    return (ab_str_t){s, strlen(s)};
}

/* A cache entry for @p thread with an empty builder. */
static ab_snapent_t *entry_of(const char *thread)
{
    ab_snapent_t *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_snapshot_builder_new(&e->sb, thread, &err), AB_OK);
    e->tlen = strlen(thread);
    memcpy(e->thread, thread, e->tlen);
    return e;
}

static void test_two_caches_share_nothing(void **state)
{
    (void)state;
    ab__snapcache_t *a = ab__snapcache_new(), *b = ab__snapcache_new();
    assert_non_null(a);
    assert_non_null(b);
    ab_snapent_t *e = entry_of(THREAD);
    ab__snapcache_put(a, e);
    assert_null(ab__snapcache_take(b, S(THREAD)));
    ab_snapent_t *got = ab__snapcache_take(a, S(THREAD));
    assert_ptr_equal(got, e);
    ab__snapcache_put(a, got);
    ab_snapent_t *f = entry_of(THREAD);
    ab__snapcache_put(b, f);
    got = ab__snapcache_take(b, S(THREAD));
    assert_ptr_equal(got, f); /* b's own, not a's */
    ab__snapcache_discard(b, got);
    assert_null(ab__snapcache_take(b, S(THREAD)));
    ab__snapcache_destroy(&a); /* frees a's entry (ASan: no leak) */
    ab__snapcache_destroy(&b);
    assert_null(a);
    ab__snapcache_destroy(NULL);
}

typedef struct inproc {
    char dir[64];
    ab_broker_t *h;
    void *ctx;  /* the test's own ZeroMQ context */
    void *sock; /* a DEALER to the broker's command endpoint */
    ab_doc_t *doc;
    tu_ctx_t tu;
    uint64_t cid;
    zmq_msg_t answer; /* the last answer's frame: decoded views point into it */
    bool has_answer;
} inproc_t;

static void inproc_start(inproc_t *p)
{
    p->h = tu_broker_new(p->dir, sizeof(p->dir), "/tmp/ab_snapcache_XXXXXX", AB_LOG_ERROR);
    p->ctx = zmq_ctx_new();
    assert_non_null(p->ctx);
    p->sock = rc_dealer(p->ctx, ab_broker_cmd_endpoint(p->h), 0);
    assert_int_equal(ab_doc_new(&p->doc), AB_OK);
    tu_ctx_init(&p->tu);
}

static void inproc_stop(inproc_t *p)
{
    if (p->has_answer)
        zmq_msg_close(&p->answer);
    zmq_close(p->sock);
    zmq_ctx_term(p->ctx);
    ab_doc_destroy(&p->doc);
    tu_ctx_free(&p->tu);
    assert_int_equal(ab_broker_destroy(&p->h), 0);
    bp_rm_tree(p->dir);
}

/* Send @p q (header) and @p n envelope frames; decode the one-frame answer into
 * @p out, valid until the next request. */
static void request(inproc_t *p, ab_msg_t *q, const ab_buf_t *frames, size_t n, ab_msg_t *out)
{
    ab_buf_t hdr = AB_BUF_INIT;
    q->v = rc_version();
    q->cid = ++p->cid;
    rc_encode(q, &hdr);
    assert_true(zmq_send(p->sock, hdr.data, hdr.len, n > 0 ? ZMQ_SNDMORE : 0) >= 0);
    for (size_t i = 0; i < n; i++)
        assert_true(zmq_send(p->sock, frames[i].data, frames[i].len, i + 1 < n ? ZMQ_SNDMORE : 0) >=
                    0);
    ab_buf_free(&hdr);
    if (p->has_answer)
        zmq_msg_close(&p->answer);
    p->has_answer = rc_recv(p->sock, &p->answer, 1, 10000) == 1;
    assert_true(p->has_answer);
    ab_error_t err = AB_ERROR_INIT;
    if (ab_msg_decode(p->doc, zmq_msg_data(&p->answer), zmq_msg_size(&p->answer), NULL, out,
                      &err) != AB_OK)
        fail_msg("answer: %s", err.message);
}

/* Publish the first @p n events of run @p run (never finished) of THREAD. */
static void publish_run(inproc_t *p, const char *run, uint64_t n)
{
    ab_buf_t evs[8] = {AB_BUF_INIT};
    assert_true(n <= 8);
    for (uint64_t i = 0; i < n; i++) {
        char body[256];
        it_body(body, sizeof(body), THREAD, run, i + 1, 0, 0);
        ab_event_t ev = {.v = rc_version(),
                         .thread = S(THREAD),
                         .run = S(run),
                         .seq = i + 1,
                         .epoch = 1,
                         .body = tu_json(&p->tu, body)};
        ab_error_t err = AB_ERROR_INIT;
        if (ab_event_encode(&ev, &evs[i], &err) != AB_OK)
            fail_msg("envelope: %s", err.message);
    }
    ab_msg_t q = {.op = AB_OP_PUBLISH, .u.publish = {.count = (uint32_t)n}};
    ab_msg_t m;
    request(p, &q, evs, n, &m);
    assert_int_equal(m.op, AB_OP_PUBLISHED);
    assert_int_equal(m.u.published.nresults, n);
    for (uint64_t i = 0; i < n; i++) {
        assert_int_equal(m.u.published.results[i].status, AB_RESULT_ACCEPTED);
        ab_buf_free(&evs[i]);
    }
}

/* The broker's SNAPSHOT of THREAD as JSON text (owned by the caller). */
static char *snapshot_json(inproc_t *p)
{
    ab_msg_t q = {.op = AB_OP_SNAPSHOT, .u.snapshot = {.thread = S(THREAD)}};
    ab_msg_t m;
    request(p, &q, NULL, 0, &m);
    assert_int_equal(m.op, AB_OP_SNAPSHOT_REPLY);
    ab_buf_t text = AB_BUF_INIT;
    assert_int_equal(ab_val_to_json(m.u.snapshot_reply.snapshot, &text), AB_OK);
    assert_int_equal(ab_buf_append(&text, "", 1), AB_OK);
    return (char *)text.data;
}

/* The document names run @p mine and not @p theirs. */
static void assert_own(inproc_t *p, const char *mine, const char *theirs)
{
    char *doc = snapshot_json(p);
    if (strstr(doc, mine) == NULL || strstr(doc, theirs) != NULL)
        fail_msg("snapshot should name %s and not %s: %s", mine, theirs, doc);
    free(doc);
}

/* An entry of @p thread whose builder is at position @p pos. */
static ab_snapent_t *entry_at(const char *thread, uint64_t pos)
{
    ab_snapent_t *e = entry_of(thread);
    tu_ctx_t c;
    tu_ctx_init(&c);
    ab_error_t err = AB_ERROR_INIT;
    const ab_val_t *ev = tu_json(&c, "{\"type\":\"CUSTOM\",\"name\":\"n\",\"value\":1}");
    assert_int_equal(ab_snapshot_builder_feed(e->sb, "r", 1, pos, ev, &err), AB_OK);
    tu_ctx_free(&c);
    assert_int_equal(ab_snapshot_builder_position(e->sb), pos);
    return e;
}

/*
 * Invariant 4 while the listed entry is taken: a user that built its own
 * entry (at 20) puts it while another user holds the listed one (at 10). The
 * put lists the newer entry; the holder's put of the older one then loses
 * the comparison, so the next take gets position 20. Before, the put found
 * the listed entry busy and freed the newer one.
 */
static void test_put_beside_a_taken_entry_keeps_the_newer(void **state)
{
    (void)state;
    ab__snapcache_t *c = ab__snapcache_new();
    assert_non_null(c);
    ab__snapcache_put(c, entry_at(THREAD, 10));
    ab_snapent_t *held = ab__snapcache_take(c, S(THREAD));
    assert_non_null(held);
    assert_int_equal(ab_snapshot_builder_position(held->sb), 10);
    ab__snapcache_put(c, entry_at(THREAD, 20)); /* while held is busy */
    ab__snapcache_put(c, held);                 /* older: freed (ASan: no leak) */
    ab_snapent_t *got = ab__snapcache_take(c, S(THREAD));
    assert_non_null(got);
    assert_int_equal(ab_snapshot_builder_position(got->sb), 20);
    ab__snapcache_put(c, got);
    /* and the other way round: the holder's entry is the newer one */
    held = ab__snapcache_take(c, S(THREAD));
    ab__snapcache_put(c, entry_at(THREAD, 15));
    ab__snapcache_put(c, held);
    got = ab__snapcache_take(c, S(THREAD));
    assert_int_equal(ab_snapshot_builder_position(got->sb), 20);
    ab__snapcache_discard(c, got);
    assert_null(ab__snapcache_take(c, S(THREAD)));
    ab__snapcache_destroy(&c);
}

static void test_two_brokers_own_builders(void **state)
{
    (void)state;
    inproc_t a = {0}, b = {0};
    inproc_start(&a);
    inproc_start(&b);
    assert_string_not_equal(ab_broker_instance(a.h), ab_broker_instance(b.h));
    publish_run(&a, "run-of-broker-a", 3);
    assert_own(&a, "run-of-broker-a", "run-of-broker-b"); /* a caches THREAD's builder */
    publish_run(&b, "run-of-broker-b", 4);
    assert_own(&b, "run-of-broker-b", "run-of-broker-a"); /* b must not start from a's */
    publish_run(&a, "run-of-broker-a2", 2);
    assert_own(&a, "run-of-broker-a2", "run-of-broker-b"); /* nor a from b's */
    inproc_stop(&b);
    assert_own(&a, "run-of-broker-a", "run-of-broker-b"); /* b's stop freed only b's cache */
    inproc_stop(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_caches_share_nothing),
        cmocka_unit_test(test_put_beside_a_taken_entry_keeps_the_newer),
        cmocka_unit_test(test_two_brokers_own_builders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

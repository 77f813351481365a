/*
 * test_threads.c - the `threads` request through a real broker process
 * (docs/PROTOCOL.md 7.19): every page size walks every thread with events
 * once, in byte order (multibyte ids included), pages full but the last,
 * `next` absent exactly at the end; prefixes (none matching too); the
 * figures (runs, active, the newest event's run and position as `published`
 * said); a claimed-only thread left out; the broker's refusal of a limit
 * above 1000; `agentbus threads` (text, --json, --all); a broker over a
 * plugin without threads_list announces `threads` unsupported and answers the request
 * `unsupported`; and, with an access
 * file, a key sees only the threads of its observe prefixes (two of them,
 * pages crossing from one to the other still full), a key without observe
 * is refused.
 */
#include "testutil.h"

#include "agentbus/json.h"
#include "agentbus/keys.h"
#include "broker_proc.h"
#include "cli_run.h"
#include "raw_client.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define E_ACUTE "\xc3\xa9"
#define NIHON   "\xe6\x97\xa5\xe6\x9c\xac"

/* Start, and with @p finish end, run @p run of @p thread; @return its last event's position. */
static uint64_t run_of(ab_conn_t *c, ab_doc_t *doc, const char *thread, const char *run,
                       bool finish)
{
    ab_claimed_t cl;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_claim(c, thread, run, doc, &cl, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("claim %s: %s", thread, err.message);
    uint64_t epoch = cl.epoch, pos = 0;
    ab_buf_t ev = AB_BUF_INIT;
    for (uint64_t seq = 1; seq <= (finish ? 4u : 2u); seq++) {
        ab_buf_reset(&ev);
        it_event(&ev, thread, run, seq, finish ? 4 : 0, epoch);
        ab_result_t r = it_publish1(c, doc, &ev, NULL);
        assert_int_equal(r.status, AB_RESULT_ACCEPTED);
        pos = r.pos;
    }
    ab_buf_free(&ev);
    return pos;
}

/* One page as "id,id,"; *next gets its cursor ("" when done). @return the status. */
static ab_status_t page(ab_conn_t *c, ab_doc_t *doc, const char *after, const char *prefix,
                        uint32_t limit, char *out, size_t cap, char *next, size_t *n)
{
    ab_threads_req_t q = {.after = {after, after ? strlen(after) : 0},
                          .prefix = {prefix, prefix ? strlen(prefix) : 0},
                          .limit = limit};
    ab_threads_reply_t r;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_threads(c, &q, doc, &r, IT_TIMEOUT, &err);
    out[0] = next[0] = '\0';
    *n = 0;
    if (st != AB_OK)
        return st;
    for (size_t i = 0; i < r.nthreads; i++) {
        size_t used = strlen(out);
        snprintf(out + used, cap - used, "%.*s,", (int)r.threads[i].thread.len,
                 r.threads[i].thread.ptr);
    }
    if (r.next.ptr) {
        snprintf(next, AB_ID_MAX_BYTES + 1, "%.*s", (int)r.next.len, r.next.ptr);
        assert_true(r.nthreads > 0);
        assert_int_equal(r.next.len, r.threads[r.nthreads - 1].thread.len);
    }
    *n = r.nthreads;
    return AB_OK;
}

/* Every page from the start with @p limit: their ids one after the other; each page
 * full but the last, which has no `next`. */
static void walk(ab_conn_t *c, ab_doc_t *doc, const char *prefix, uint32_t limit, char *out,
                 size_t cap)
{
    char after[AB_ID_MAX_BYTES + 1] = "", next[AB_ID_MAX_BYTES + 1], buf[1024];
    out[0] = '\0';
    for (int pages = 0;; pages++) {
        assert_true(pages < 50);
        size_t n = 0;
        assert_int_equal(page(c, doc, after, prefix, limit, buf, sizeof buf, next, &n), AB_OK);
        strncat(out, buf, cap - strlen(out) - 1);
        if (!next[0])
            break;
        assert_int_equal(n, limit); /* full while more follow */
        snprintf(after, sizeof after, "%s", next);
    }
}

static void test_listing(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    size_t ncaps = 0;
    const ab_cap_t *caps = ab_conn_caps(c, &ncaps);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_caps_require(caps, ncaps, AB_CAP_THREADS, &err), AB_OK);
    char out[2048], next[AB_ID_MAX_BYTES + 1];
    size_t n = 0;
    assert_int_equal(page(c, t->doc, NULL, NULL, 0, out, sizeof out, next, &n), AB_OK);
    assert_string_equal(out, ""); /* an empty bus */
    assert_string_equal(next, "");

    const char *ids[] = {"u-1", "t-b", NIHON, "t-a", E_ACUTE "-1", "t-a-x", "v"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        run_of(c, t->doc, ids[i], "r1", i % 2 == 0);
    uint64_t last = run_of(c, t->doc, "t-a", "r2", false); /* t-a: two runs, r2 active */
    ab_claimed_t cl;
    assert_int_equal(ab_conn_claim(c, "claimed-only", "r", t->doc, &cl, IT_TIMEOUT, &err), AB_OK);

    const char *all = "t-a,t-a-x,t-b,u-1,v," E_ACUTE "-1," NIHON ",";
    for (uint32_t limit = 1; limit <= 8; limit++) {
        walk(c, t->doc, NULL, limit, out, sizeof out);
        assert_string_equal(out, all);
    }
    walk(c, t->doc, "t-", 2, out, sizeof out);
    assert_string_equal(out, "t-a,t-a-x,t-b,");
    walk(c, t->doc, "t-a", 100, out, sizeof out);
    assert_string_equal(out, "t-a,t-a-x,");
    walk(c, t->doc, E_ACUTE, 1, out, sizeof out);
    assert_string_equal(out, E_ACUTE "-1,");
    walk(c, t->doc, "nope", 5, out, sizeof out);
    assert_string_equal(out, "");
    walk(c, t->doc, "claimed", 5, out, sizeof out);
    assert_string_equal(out, "");
    assert_int_equal(page(c, t->doc, "t-b", "t-", 10, out, sizeof out, next, &n), AB_OK);
    assert_string_equal(out, "");
    assert_int_equal(page(c, t->doc, "", "", 7, out, sizeof out, next, &n), AB_OK);
    assert_string_equal(out, all); /* exactly a page: no next */
    assert_string_equal(next, "");

    /* the figures */
    ab_threads_req_t q = {.prefix = {"t-a", 3}, .limit = 1};
    ab_threads_reply_t r;
    assert_int_equal(ab_conn_threads(c, &q, t->doc, &r, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(r.nthreads, 1);
    assert_int_equal(r.threads[0].runs, 2);
    assert_true(r.threads[0].active);
    assert_int_equal(r.threads[0].last_pos, last);
    assert_int_equal(r.threads[0].last_run.len, 2);
    assert_memory_equal(r.threads[0].last_run.ptr, "r2", 2);
    assert_non_null(r.next.ptr);
    q = (ab_threads_req_t){.prefix = {"u-1", 3}};
    assert_int_equal(ab_conn_threads(c, &q, t->doc, &r, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(r.nthreads, 1);
    assert_false(r.threads[0].active); /* its one run finished */
    assert_int_equal(r.threads[0].runs, 1);
    assert_null(r.next.ptr);
    q.limit = AB_THREADS_LIMIT_MAX + 1; /* refused before it is sent */
    assert_int_equal(ab_conn_threads(c, &q, t->doc, &r, IT_TIMEOUT, &err), AB_INVALID_ARGUMENT);
    ab_conn_destroy(&c);
}

/* The broker refuses what the client library never sends: a limit above 1000. */
static void test_broker_refuses_bad_limit(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    void *ctx = zmq_ctx_new();
    void *s = rc_dealer(ctx, t->bp.cmd, 0);
    ab_buf_t hdr = AB_BUF_INIT;
    rc_encode_hello(&hdr, 1);
    assert_true(rc_send(s, &hdr, IT_TIMEOUT));
    zmq_msg_t parts[4];
    size_t np = rc_recv(s, parts, 4, IT_TIMEOUT);
    assert_true(np >= 1);
    rc_close(parts, np);
    char json[128];
    snprintf(json, sizeof json, "{\"op\":\"threads\",\"v\":%u,\"cid\":5,\"limit\":1001}",
             rc_version());
    ab_buf_reset(&hdr);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(
        ab_json_to_msgpack(json, strlen(json), 8, 1u << 16, AB_INVALID_ENVELOPE, &hdr, &err),
        AB_OK);
    assert_true(rc_send(s, &hdr, IT_TIMEOUT));
    np = rc_recv(s, parts, 4, IT_TIMEOUT);
    assert_true(np >= 1);
    ab_msg_t m;
    assert_int_equal(
        ab_msg_decode(t->doc, zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]), NULL, &m, &err),
        AB_OK);
    assert_int_equal(m.op, AB_OP_ERROR);
    assert_int_equal(m.cid, 5);
    assert_int_equal(m.u.error.error->code, AB_TOO_LARGE);
    assert_string_equal(m.u.error.error->field, "limit");
    rc_close(parts, np);
    ab_buf_free(&hdr);
    zmq_close(s);
    zmq_ctx_term(ctx);
}

static void test_cli(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    run_of(c, t->doc, "cli-1", "r", true);
    run_of(c, t->doc, "cli-2", "r", false);
    run_of(c, t->doc, "other", "r", false);
    ab_conn_destroy(&c);
    char out[OUT_MAX];
    assert_int_equal(it_run_cli(out, "threads --broker %s --prefix cli- --limit 1", t->bp.cmd), 0);
    assert_non_null(strstr(out, "cli-1"));
    assert_null(strstr(out, "cli-2"));
    assert_non_null(strstr(out, "more: agentbus threads --after 'cli-1' --prefix 'cli-'"));
    assert_int_equal(
        it_run_cli(out, "threads --broker %s --prefix cli- --limit 1 --all --json", t->bp.cmd), 0);
    assert_non_null(strstr(out, "{\"thread\":\"cli-1\",\"runs\":1,\"active\":false,"));
    assert_non_null(strstr(out, "{\"thread\":\"cli-2\",\"runs\":1,\"active\":true,"));
    assert_null(strstr(out, "other"));
    assert_null(strstr(out, "\"next\""));
    assert_int_equal(it_run_cli(out, "threads --broker %s --after cli-1 --json", t->bp.cmd), 0);
    assert_null(strstr(out, "cli-1"));
    assert_non_null(strstr(out, "cli-2"));
    assert_int_equal(it_run_cli(out, "threads --broker %s --limit 0", t->bp.cmd), 2);
}

/* A broker over a plugin without threads_list: it starts, says `threads` is
 * unsupported, and answers the request with a typed unsupported naming op. */
static int nolist_setup(void **state)
{
    const char *extra[] = {"--plugin", AB_NOLIST_SQLITE_MODULE, NULL};
    return it_setup_with(state, extra);
}

static void test_plugin_without_listing(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    run_of(c, t->doc, "t-1", "r", false); /* the store works */
    size_t ncaps = 0;
    const ab_cap_t *caps = ab_conn_caps(c, &ncaps);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_caps_require(caps, ncaps, AB_CAP_THREADS, &err), AB_UNSUPPORTED);
    ab_threads_req_t q = {0};
    ab_threads_reply_t r;
    ab_error_clear(&err);
    assert_int_equal(ab_conn_threads(c, &q, t->doc, &r, IT_TIMEOUT, &err), AB_UNSUPPORTED);
    assert_string_equal(err.field, "op");
    assert_non_null(strstr(err.message, "cannot list threads"));
    assert_false(err.retryable);
    ab_conn_destroy(&c);
}

/* ---- with keys --------------------------------------------------------------------------- */

enum { K_ADMIN, K_OBS, K_PUB, NK };
static const char *const kname[NK] = {"admin", "obs_ab", "pub_a"};
static const char *const krole[NK] = {"admin", "observe:a-,b-", "publish:a-"};

typedef struct kfx {
    char dir[64], mine[64];
    ab_keypair_t broker, k[NK];
    it_t it;
} kfx_t;

static int keys_setup(void **state)
{
    static kfx_t f;
    memset(&f, 0, sizeof f);
    snprintf(f.dir, sizeof f.dir, "/tmp/ab-threads-keys-XXXXXX");
    snprintf(f.mine, sizeof f.mine, "/tmp/ab-threads-mine-XXXXXX");
    assert_non_null(mkdtemp(f.dir));
    assert_non_null(mkdtemp(f.mine));
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_keypair_new(&f.broker, &err), AB_OK);
    assert_int_equal(ab_keypair_write(&f.broker, f.dir, "broker", &err), AB_OK);
    char path[160];
    snprintf(path, sizeof path, "%s/access", f.dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    for (int i = 0; i < NK; i++) {
        assert_int_equal(ab_keypair_new(&f.k[i], &err), AB_OK);
        fprintf(fp, "%s %s %s\n", kname[i], f.k[i].public_key, krole[i]);
    }
    fclose(fp);
    snprintf(f.it.bp.log, sizeof f.it.bp.log, "%s/broker.log", f.mine);
    f.it.available = bp_available();
    *state = &f;
    if (!f.it.available)
        return 0;
    assert_int_equal(ab_doc_new(&f.it.doc), AB_OK);
    const char *extra[] = {"--keys", f.dir, NULL};
    return bp_start(&f.it.bp, NULL, extra);
}

static int keys_teardown(void **state)
{
    kfx_t *f = *state;
    bp_cleanup(&f->it.bp);
    ab_doc_destroy(&f->it.doc);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", f->dir, f->mine);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static ab_conn_t *conn_as(kfx_t *f, int who)
{
    ab_conn_opts_t o = {
        .timeout_ms = IT_TIMEOUT, .key = &f->k[who], .server_key = f->broker.public_key};
    ab_conn_t *c = NULL;
    assert_int_equal(ab_conn_new(&c, f->it.bp.cmd, &o, NULL), AB_OK);
    return c;
}

static void test_access_filtering(void **state)
{
    kfx_t *f = *state;
    if (!f->it.available)
        skip();
    ab_conn_t *adm = conn_as(f, K_ADMIN), *obs = conn_as(f, K_OBS), *pub = conn_as(f, K_PUB);
    const char *ids[] = {"a-1", "a-2", "ab", "b-1", "b-2", "c-1", "a-3", "0"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        run_of(adm, f->it.doc, ids[i], "r", false);
    char out[1024], next[AB_ID_MAX_BYTES + 1];
    walk(adm, f->it.doc, NULL, 3, out, sizeof out);
    assert_string_equal(out, "0,a-1,a-2,a-3,ab,b-1,b-2,c-1,");
    for (uint32_t limit = 1; limit <= 6; limit++) { /* full pages across the two prefixes */
        walk(obs, f->it.doc, NULL, limit, out, sizeof out);
        assert_string_equal(out, "a-1,a-2,a-3,b-1,b-2,");
    }
    size_t n = 0;
    assert_int_equal(page(obs, f->it.doc, NULL, NULL, 3, out, sizeof out, next, &n), AB_OK);
    assert_string_equal(out, "a-1,a-2,a-3,");
    assert_string_equal(next, "a-3"); /* b-1 follows */
    assert_int_equal(page(obs, f->it.doc, "a-3", NULL, 3, out, sizeof out, next, &n), AB_OK);
    assert_string_equal(out, "b-1,b-2,");
    assert_string_equal(next, "");
    walk(obs, f->it.doc, "b", 1, out, sizeof out); /* the request's prefix meets b- */
    assert_string_equal(out, "b-1,b-2,");
    walk(obs, f->it.doc, "a-2", 1, out, sizeof out); /* inside a- */
    assert_string_equal(out, "a-2,");
    walk(obs, f->it.doc, "a", 10, out, sizeof out); /* "ab" starts with a, but not with a- */
    assert_string_equal(out, "a-1,a-2,a-3,");
    walk(obs, f->it.doc, "c", 10, out, sizeof out);
    assert_string_equal(out, "");
    assert_int_equal(page(obs, f->it.doc, "ab", NULL, 10, out, sizeof out, next, &n), AB_OK);
    assert_string_equal(out, "b-1,b-2,"); /* a cursor it may not read still places it */
    assert_int_equal(page(pub, f->it.doc, NULL, NULL, 10, out, sizeof out, next, &n),
                     AB_UNAUTHORIZED);
    ab_conn_destroy(&pub);
    ab_conn_destroy(&obs);
    ab_conn_destroy(&adm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_listing, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_broker_refuses_bad_limit, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_cli, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_plugin_without_listing, nolist_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_access_filtering, keys_setup, keys_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

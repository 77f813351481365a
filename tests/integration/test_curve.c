/*
 * test_curve.c - CURVE authentication through a real broker process
 * (docs/OPERATIONS.md "Securing a bus across machines"): with --keys DIR
 * a client whose public key is DIR/NAME.key connects, publishes and gets its
 * live events on the event endpoint; an unknown key and no key at all are
 * refused at the handshake (no welcome ever comes) and the refusal is logged
 * with the key's fingerprint (a listed key that names the wrong broker key
 * gets no answer either); the environment's AGENTBUS_KEY and
 * AGENTBUS_SERVER_KEY work like the options; a subscriber given the keys
 * in its options (no environment) gets live events, one given an unknown key
 * is refused; a keys directory without the
 * broker's own key pair keeps the broker from starting.
 */
#include "testutil.h"

#include "agentbus/keys.h"
#include "agentbus/subscriber.h"
#include "broker_proc.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct cfx {
    char dir[64];  /* the broker's keys */
    char mine[64]; /* the clients' key files */
    char keysarg[80];
    ab_keypair_t broker, alice, mallory;
    it_t it;
} cfx_t;

static void make_keys(cfx_t *f)
{
    snprintf(f->dir, sizeof f->dir, "/tmp/ab-curve-keys-XXXXXX");
    snprintf(f->mine, sizeof f->mine, "/tmp/ab-curve-mine-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    assert_non_null(mkdtemp(f->mine));
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_keypair_new(&f->broker, &err), AB_OK);
    assert_int_equal(ab_keypair_new(&f->alice, &err), AB_OK);
    assert_int_equal(ab_keypair_new(&f->mallory, &err), AB_OK);
    assert_int_equal(ab_keypair_write(&f->broker, f->dir, "broker", &err), AB_OK);
    assert_int_equal(ab_keypair_write(&f->alice, f->mine, "alice", &err), AB_OK);
    assert_int_equal(ab_keypair_write(&f->mallory, f->mine, "mallory", &err), AB_OK);
    ab_keypair_t pub = f->alice; /* the broker knows alice's public key only */
    pub.secret_key[0] = '\0';
    char path[160];
    snprintf(path, sizeof path, "%s/alice.key", f->dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fprintf(fp, "public-key %s\n", pub.public_key);
    fclose(fp);
}

static void rm_dir(const char *d)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    assert_int_equal(system(cmd), 0);
}

static int setup(void **state)
{
    static cfx_t f;
    memset(&f, 0, sizeof f);
    make_keys(&f);
    snprintf(f.keysarg, sizeof f.keysarg, "%s", f.dir);
    snprintf(f.it.bp.log, sizeof f.it.bp.log, "%s/broker.log", f.mine);
    f.it.available = bp_available();
    *state = &f;
    if (!f.it.available)
        return 0;
    assert_int_equal(ab_doc_new(&f.it.doc), AB_OK);
    const char *extra[] = {"--keys", f.keysarg, NULL};
    return bp_start(&f.it.bp, NULL, extra);
}

static int teardown(void **state)
{
    cfx_t *f = *state;
    bp_cleanup(&f->it.bp);
    ab_doc_destroy(&f->it.doc);
    rm_dir(f->dir);
    rm_dir(f->mine);
    return 0;
}

static ab_status_t connect_as(cfx_t *f, const ab_keypair_t *key, ab_conn_t **c, int ms)
{
    ab_conn_opts_t o = {.timeout_ms = ms};
    if (key) {
        o.key = key;
        o.server_key = f->broker.public_key;
    }
    return ab_conn_new(c, f->it.bp.cmd, &o, NULL);
}

static int on_event(void *ud, const ab_sub_event_t *e)
{
    (void)e;
    ++*(int *)ud;
    return 0;
}

static void test_known_key_works(void **state)
{
    cfx_t *f = *state;
    if (!f->it.available)
        skip();
    ab_conn_t *c = NULL;
    assert_int_equal(connect_as(f, &f->alice, &c, IT_TIMEOUT), AB_OK);
    /* live events reach a subscriber over CURVE too (its SUB uses the same keys) */
    int got = 0;
    char kf[160], sf[160];
    snprintf(kf, sizeof kf, "%s/alice.key_secret", f->mine);
    snprintf(sf, sizeof sf, "%s/broker.key", f->dir);
    setenv("AGENTBUS_KEY", kf, 1); /* the environment's files, as a CLI user sets them */
    setenv("AGENTBUS_SERVER_KEY", sf, 1);
    ab_sub_opts_t so = {.scope = AB_SUB_THREAD, .thread = "t-c", .on_event = on_event, .ud = &got};
    ab_sub_t *s = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_sub_new(&s, f->it.bp.cmd, &so, &err), AB_OK);
    assert_int_equal(ab_sub_poll(s, 200, &err), AB_OK);
    ab_claimed_t cl;
    assert_int_equal(ab_conn_claim(c, "t-c", "r-c", f->it.doc, &cl, IT_TIMEOUT, &err), AB_OK);
    ab_buf_t ev = AB_BUF_INIT;
    it_event(&ev, "t-c", "r-c", 1, 2, cl.epoch);
    ab_result_t r = it_publish1(c, f->it.doc, &ev, NULL);
    assert_int_equal(r.status, AB_RESULT_ACCEPTED);
    for (int i = 0; i < 100 && got == 0; i++)
        assert_int_equal(ab_sub_poll(s, 20, &err), AB_OK);
    assert_int_equal(got, 1);
    unsetenv("AGENTBUS_KEY");
    unsetenv("AGENTBUS_SERVER_KEY");
    ab_buf_free(&ev);
    ab_sub_destroy(&s);
    ab_conn_destroy(&c);
}

/* ab_sub_opts_t key / server_key: the subscriber's own keys, copied, no environment. */
static void test_subscriber_keys_in_options(void **state)
{
    cfx_t *f = *state;
    if (!f->it.available)
        skip();
    ab_conn_t *c = NULL;
    assert_int_equal(connect_as(f, &f->alice, &c, IT_TIMEOUT), AB_OK);
    int got = 0;
    ab_keypair_t alice = f->alice;
    char srv[AB_KEY_Z85_SIZE];
    snprintf(srv, sizeof srv, "%s", f->broker.public_key);
    ab_sub_opts_t so = {.scope = AB_SUB_THREAD, .thread = "t-o", .on_event = on_event, .ud = &got};
    so.key = &alice;
    so.server_key = srv;
    ab_sub_t *s = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_sub_new(&s, f->it.bp.cmd, &so, &err), AB_OK);
    memset(&alice, 0, sizeof alice); /* copied: reconnects do not read the caller's again */
    memset(srv, 0, sizeof srv);
    assert_int_equal(ab_sub_poll(s, 200, &err), AB_OK);
    ab_claimed_t cl;
    assert_int_equal(ab_conn_claim(c, "t-o", "r-o", f->it.doc, &cl, IT_TIMEOUT, &err), AB_OK);
    ab_buf_t ev = AB_BUF_INIT;
    it_event(&ev, "t-o", "r-o", 1, 2, cl.epoch);
    ab_result_t r = it_publish1(c, f->it.doc, &ev, NULL);
    assert_int_equal(r.status, AB_RESULT_ACCEPTED);
    for (int i = 0; i < 100 && got == 0; i++)
        assert_int_equal(ab_sub_poll(s, 20, &err), AB_OK);
    assert_int_equal(got, 1);
    ab_sub_destroy(&s);
    /* An unknown key in the options: no welcome, refused at once as a timeout. */
    so.key = &f->mallory;
    so.server_key = f->broker.public_key;
    so.timeout_ms = 300;
    assert_int_equal(ab_sub_new(&s, f->it.bp.cmd, &so, &err), AB_TIMEOUT);
    assert_null(s);
    ab_buf_free(&ev);
    ab_conn_destroy(&c);
}

static void test_unknown_and_no_key_refused(void **state)
{
    cfx_t *f = *state;
    if (!f->it.available)
        skip();
    ab_conn_t *c = NULL;
    assert_int_equal(connect_as(f, &f->mallory, &c, 1000), AB_TIMEOUT); /* no welcome */
    assert_int_equal(connect_as(f, NULL, &c, 1000), AB_TIMEOUT);
    /* a known client key with the wrong broker key: the broker cannot prove itself */
    ab_conn_opts_t wrong = {
        .timeout_ms = 1000, .key = &f->alice, .server_key = f->mallory.public_key};
    assert_int_equal(ab_conn_new(&c, f->it.bp.cmd, &wrong, NULL), AB_TIMEOUT);
    assert_true(bp_wait_log(&f->it.bp, "refused a connection from 127.0.0.1: unknown key", 1,
                            IT_TIMEOUT) >= 1);
    char fp[9];
    ab_key_fingerprint(f->mallory.public_key, fp);
    assert_true(bp_wait_log(&f->it.bp, fp, 1, IT_TIMEOUT) >= 1);
    /* half a key pair in the environment is an error, not a silent plain connection */
    setenv("AGENTBUS_KEY", "/nonexistent", 1);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_new(&c, f->it.bp.cmd, NULL, &err), AB_INVALID_ARGUMENT);
    assert_string_equal(err.field, "AGENTBUS_SERVER_KEY");
    unsetenv("AGENTBUS_KEY");
}

/* The command line's global --key / --server-key, before the command, as the environment. */
static void test_cli_global_key_options(void **state)
{
    cfx_t *f = *state;
    if (!f->it.available)
        skip();
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd,
             "env -u AGENTBUS_KEY -u AGENTBUS_SERVER_KEY %s --key %s/alice.key_secret "
             "--server-key=%s/broker.key runs --broker %s 2>&1",
             AB_AGENTBUS_BIN, f->mine, f->dir, f->it.bp.cmd);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("runs with alice's key: %s", out);
    assert_non_null(strstr(out, "THREAD"));
    snprintf(cmd, sizeof cmd, "%s --key 2>&1", AB_AGENTBUS_BIN);
    p = popen(cmd, "r");
    assert_non_null(p);
    n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    st = pclose(p);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    assert_non_null(strstr(out, "--key needs a key file"));
}

static void test_broker_without_its_key_refuses_to_start(void **state)
{
    cfx_t *f = *state;
    if (!f->it.available)
        skip();
    char path[160], out[2048];
    snprintf(path, sizeof path, "%s/broker.key_secret", f->dir);
    assert_int_equal(unlink(path), 0);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s broker --data %s/d2 --keys %s --cmd 'tcp://127.0.0.1:*' --events "
             "'tcp://127.0.0.1:*' 2>&1",
             AB_AGENTBUS_BIN, f->mine, f->dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    assert_non_null(strstr(out, "broker.key_secret is missing"));
    assert_non_null(strstr(out, "agentbus keygen broker"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_known_key_works, setup, teardown),
        cmocka_unit_test_setup_teardown(test_subscriber_keys_in_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_and_no_key_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cli_global_key_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_broker_without_its_key_refuses_to_start, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

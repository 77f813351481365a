/*
 * test_broker_bind.c - the broker's safe default as a process: without
 * --keys, `agentbus broker` refuses to bind a wildcard (host 0.0.0.0 or *)
 * (exit 2, the message naming the endpoint, --keys and --insecure; the data
 * directory not created), from a flag or from a config file; with
 * --insecure (flag or `insecure = true`) it starts, warns on stderr and
 * serves (a client pings it over 127.0.0.1), and is stopped by pid;
 * loopback and ipc:// need nothing; a --keys path that is not a directory
 * is a usage error.
 */
#include "testutil.h"

#include "broker_proc.h"
#include "cli_run.h"

#include <sys/stat.h>

/* Run `agentbus broker ARGS` in the foreground, bounded; stdout and stderr into @p out. */
static int run_broker(char *out, size_t size, const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "timeout -s KILL %d %s broker %s 2>&1", BP_STOP_MS / 1000,
             AB_AGENTBUS_BIN, args);
    char shown[1100];
    snprintf(shown, sizeof shown, "agentbus broker %s", args);
    return it_capture(cmd, out, size, shown);
}

static void tmpdir(char *dir, size_t size)
{
    snprintf(dir, size, "/tmp/ab_it_bind_XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_wildcards_refused(void **state)
{
    (void)state;
    char dir[64], args[512], out[4096], data[96];
    tmpdir(dir, sizeof dir);
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(args, sizeof args, "--data %s --cmd tcp://0.0.0.0:0 --events tcp://127.0.0.1:*", data);
    assert_int_equal(run_broker(out, sizeof out, args), 2);
    assert_non_null(strstr(out, "cmd: tcp://0.0.0.0:0 is not loopback"));
    assert_non_null(strstr(out, "--keys DIR (authenticated CURVE)"));
    assert_non_null(strstr(out, "--insecure (anyone who can reach the port"));
    snprintf(args, sizeof args, "--data %s --cmd tcp://127.0.0.1:* --events 'tcp://*:*'", data);
    assert_int_equal(run_broker(out, sizeof out, args), 2);
    assert_non_null(strstr(out, "events: tcp://*:* is not loopback"));
    assert_false(exists(data)); /* refused before the data directory was touched */
    /* the same from a config file */
    char conf[96];
    snprintf(conf, sizeof conf, "%s/broker.conf", dir);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fputs("cmd = tcp://*:0\nevents = tcp://127.0.0.1:*\n", f);
    fclose(f);
    snprintf(args, sizeof args, "--data %s --config %s", data, conf);
    assert_int_equal(run_broker(out, sizeof out, args), 2);
    assert_non_null(strstr(out, "cmd: tcp://*:0 is not loopback"));
    assert_false(exists(data));
    unlink(conf);
    assert_int_equal(rmdir(dir), 0);
}

static void test_bad_keys_path(void **state)
{
    (void)state;
    char dir[64], args[512], out[4096], data[96];
    tmpdir(dir, sizeof dir);
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(args, sizeof args, "--data %s --keys %s/no-such-dir", data, dir);
    assert_int_equal(run_broker(out, sizeof out, args), 2);
    assert_non_null(strstr(out, "keys: "));
    assert_non_null(strstr(out, "no-such-dir: No such file or directory"));
    assert_false(exists(data));
    assert_int_equal(rmdir(dir), 0);
}

/* Start with @p extra; the broker's cmd endpoint must start with @p bound; ping it over loopback.
 */
static void start_and_ping(const char *const *extra, const char *bound, bool warns)
{
    bp_t b;
    memset(&b, 0, sizeof b);
    snprintf(b.log, sizeof b.log, "/tmp/ab_it_bind_log_%d", (int)getpid());
    unlink(b.log);
    assert_int_equal(bp_start(&b, NULL, extra), 0);
    assert_non_null(strstr(b.cmd, bound));
    const char *port = strrchr(b.cmd, ':');
    char ep[160];
    if (strncmp(b.cmd, "tcp://", 6) == 0)
        snprintf(ep, sizeof ep, "tcp://127.0.0.1%s", port);
    else
        snprintf(ep, sizeof ep, "%s", b.cmd);
    ab_conn_opts_t o = {.client_name = "bind-it", .timeout_ms = IT_TIMEOUT};
    ab_conn_t *c = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    if (ab_conn_new(&c, ep, &o, &err) != AB_OK)
        fail_msg("connect %s: %s", ep, err.message);
    ab_pong_t pong;
    if (ab_conn_ping(c, doc, &pong, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("ping %s: %s", ep, err.message);
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    assert_int_equal(bp_stop(&b), 0);
    int found = bp_wait_log(&b, "is not loopback and the broker has no keys", 1, 0);
    assert_int_equal(found, warns ? 2 : 0); /* cmd and events */
    unlink(b.log);
    bp_cleanup(&b);
}

static void test_insecure_starts(void **state)
{
    (void)state;
    const char *flag[] = {"--cmd", "tcp://0.0.0.0:*", "--events", "tcp://*:*", "--insecure", NULL};
    start_and_ping(flag, "tcp://0.0.0.0:", true);
    /* insecure from a config file */
    char conf[64];
    snprintf(conf, sizeof conf, "/tmp/ab_it_bind_conf_%d", (int)getpid());
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fputs("insecure = true\n", f);
    fclose(f);
    const char *file[] = {"--config",        conf, "--cmd", "tcp://0.0.0.0:*", "--events",
                          "tcp://0.0.0.0:*", NULL};
    start_and_ping(file, "tcp://0.0.0.0:", true);
    unlink(conf);
}

static void test_local_needs_nothing(void **state)
{
    (void)state;
    start_and_ping(NULL, "tcp://127.0.0.1:", false);
    char cmd[80], ev[80];
    snprintf(cmd, sizeof cmd, "ipc:///tmp/ab_it_bind_cmd_%d", (int)getpid());
    snprintf(ev, sizeof ev, "ipc:///tmp/ab_it_bind_ev_%d", (int)getpid());
    const char *ipc[] = {"--cmd", cmd, "--events", ev, NULL};
    start_and_ping(ipc, "ipc:///tmp/ab_it_bind_cmd_", false);
    unlink(cmd + 6);
    unlink(ev + 6);
}

int main(void)
{
    if (!bp_available()) {
        print_message("agentbus has no broker command yet: skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wildcards_refused),
        cmocka_unit_test(test_bad_keys_path),
        cmocka_unit_test(test_insecure_starts),
        cmocka_unit_test(test_local_needs_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

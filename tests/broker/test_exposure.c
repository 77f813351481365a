/*
 * test_exposure.c - the broker's safe default (broker/exposure.c): which
 * endpoints count as local; without keys a non-loopback endpoint is refused
 * by the flag parser and by ab_broker_new() alike (typed, naming the
 * endpoint, --keys and --insecure; nothing bound, the data directory
 * untouched), and allowed with insecure; the `keys` and `insecure`
 * settings as flags and config-file lines; a keys path that is not a
 * directory.
 */
#include "agentbus/broker.h"
#include "exposure.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ARGV(...) ((char *[]){"broker", __VA_ARGS__, NULL})

static ab_status_t parse(ab_broker_config_t *cfg, char **argv, ab_error_t *err)
{
    int n = 0;
    while (argv[n] != NULL)
        n++;
    ab_error_clear(err);
    return ab_broker_config_parse(cfg, n, argv, err);
}

static void test_local_endpoints(void **state)
{
    (void)state;
    const char *local[] = {"tcp://127.0.0.1:7710",
                           "tcp://127.0.0.1:*",
                           "tcp://127.1.2.3:1",
                           "tcp://localhost:7710",
                           "tcp://LocalHost:1",
                           "tcp://[::1]:7710",
                           "tcp://::1:7710",
                           "tcp://[::1]:*",
                           "ipc:///tmp/ab.sock",
                           "inproc://agentbus-cmd",
                           "tcp://[::ffff:127.0.0.1]:9"};
    const char *remote[] = {"tcp://0.0.0.0:7710",
                            "tcp://*:7710",
                            "tcp://*:*",
                            "tcp://eth0:7710",
                            "tcp://lo:7710",
                            "tcp://10.0.0.5:7710",
                            "tcp://[::]:7710",
                            "tcp://192.168.1.1:1",
                            "tcp://128.0.0.1:1",
                            "tcp://example.com:1",
                            "tcp://127.0.0.1",
                            "tcp://[::1:7710",
                            "tcp://127.0.0.1;10.0.0.1:7710",
                            "ws://127.0.0.1:80",
                            "pgm://eth0;239.192.1.1:5555",
                            "tcp://127.1:7710",
                            "tcp://[]:1",
                            "tcp://:7710"};
    for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
        if (!ab__endpoint_is_local(local[i]))
            fail_msg("%s should be local", local[i]);
    for (size_t i = 0; i < sizeof remote / sizeof remote[0]; i++)
        if (ab__endpoint_is_local(remote[i]))
            fail_msg("%s should not be local", remote[i]);
}

/* Without keys, `agentbus broker` refuses 0.0.0.0 and *, for either endpoint. */
static void test_parse_refuses_wildcards(void **state)
{
    (void)state;
    ab_broker_config_t cfg;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(parse(&cfg, ARGV("--cmd", "tcp://0.0.0.0:7710"), &err), AB_INVALID_ARGUMENT);
    assert_string_equal(err.field, "cmd");
    assert_non_null(strstr(err.message, "tcp://0.0.0.0:7710 is not loopback"));
    assert_non_null(strstr(err.message, "--keys DIR"));
    assert_non_null(strstr(err.message, "--insecure"));
    assert_int_equal(parse(&cfg, ARGV("--events", "tcp://*:7711"), &err), AB_INVALID_ARGUMENT);
    assert_string_equal(err.field, "events");
    assert_non_null(strstr(err.message, "tcp://*:7711"));
    /* with --insecure (any of its forms) both are accepted */
    assert_int_equal(
        parse(&cfg, ARGV("--cmd", "tcp://0.0.0.0:7710", "--events", "tcp://*:7711", "--insecure"),
              &err),
        AB_OK);
    assert_true(cfg.insecure);
    assert_string_equal(cfg.cmd_endpoint, "tcp://0.0.0.0:7710");
    assert_int_equal(parse(&cfg, ARGV("--insecure=true", "--cmd=tcp://*:1"), &err), AB_OK);
    assert_int_equal(parse(&cfg, ARGV("--insecure=false", "--cmd=tcp://*:1"), &err),
                     AB_INVALID_ARGUMENT);
    assert_int_equal(parse(&cfg, ARGV("--insecure=maybe"), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "insecure");
    /* loopback and local transports need nothing */
    assert_int_equal(
        parse(&cfg, ARGV("--cmd", "tcp://[::1]:*", "--events", "ipc:///tmp/ab-ev"), &err), AB_OK);
    assert_false(cfg.insecure);
    assert_string_equal(cfg.keys_dir, "");
}

/* A config file sets keys (a path, kept as written) and insecure; flags override it. */
static void test_config_file_forms(void **state)
{
    (void)state;
    char path[64] = "/tmp/ab_test_exposure_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs("cmd = tcp://0.0.0.0:7710\ninsecure = yes\nkeys = /srv/agentbus/keys\n", f);
    fclose(f);
    ab_broker_config_t cfg;
    ab_error_t err = AB_ERROR_INIT;
    ab_broker_config_defaults(&cfg);
    assert_int_equal(ab_broker_config_load(&cfg, path, &err), AB_OK);
    assert_string_equal(cfg.keys_dir, "/srv/agentbus/keys");
    assert_true(cfg.insecure);
    /* parsed as the broker's settings: the keys directory is checked */
    assert_int_equal(parse(&cfg, ARGV("--config", path), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "keys");
    assert_non_null(strstr(err.message, "/srv/agentbus/keys"));
    ab_error_t e2 = AB_ERROR_INIT;
    ab_broker_config_defaults(&cfg);
    static const char text[] = "events = tcp://*:7711\ninsecure = 1\n";
    assert_int_equal(ab_broker_config_load_text(&cfg, "t.conf", text, sizeof text - 1, &e2), AB_OK);
    assert_true(cfg.insecure);
    static const char bad[] = "insecure = sure\n";
    assert_int_equal(ab_broker_config_load_text(&cfg, "t.conf", bad, sizeof bad - 1, &e2),
                     AB_INVALID_CONFIG);
    assert_non_null(strstr(e2.message, "t.conf:1: insecure: 'sure' is not true or false"));
    static const char empty[] = "keys =\n";
    ab_error_clear(&e2);
    assert_int_equal(ab_broker_config_load_text(&cfg, "t.conf", empty, sizeof empty - 1, &e2),
                     AB_INVALID_CONFIG);
    assert_string_equal(e2.field, "keys");
    unlink(path);
}

/* --keys must name a directory; one that exists is refused until CURVE is wired (fail closed). */
static void test_keys_dir(void **state)
{
    (void)state;
    ab_broker_config_t cfg;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(parse(&cfg, ARGV("--keys", "/nonexistent/agentbus-keys"), &err),
                     AB_INVALID_CONFIG);
    assert_string_equal(err.field, "keys");
    assert_non_null(strstr(err.message, "/nonexistent/agentbus-keys: No such file"));
    char file[64] = "/tmp/ab_test_keysfile_XXXXXX";
    int fd = mkstemp(file);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(parse(&cfg, ARGV("--keys", file), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "keys");
    assert_non_null(strstr(err.message, "is not a directory"));
    unlink(file);
    /* with keys (CURVE, broker/zap.c) any endpoint may be bound */
    assert_int_equal(parse(&cfg, ARGV("--keys", "/tmp", "--cmd", "tcp://*:1"), &err), AB_OK);
}

/* ab_broker_new() applies the same rule to a config that never went through the parser. */
static void test_embedded_refused(void **state)
{
    (void)state;
    char dir[64] = "/tmp/ab_test_exposure_dir_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char data[96];
    snprintf(data, sizeof data, "%s/data", dir);
    ab_broker_config_t cfg;
    ab_broker_config_defaults(&cfg);
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", data);
    snprintf(cfg.cmd_endpoint, sizeof cfg.cmd_endpoint, "tcp://127.0.0.1:*");
    snprintf(cfg.events_endpoint, sizeof cfg.events_endpoint, "tcp://0.0.0.0:*");
    cfg.log_level = AB_LOG_ERROR;
    ab_broker_t *b = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_broker_new(&cfg, &b, &err), AB_INVALID_ARGUMENT);
    assert_null(b);
    assert_string_equal(err.field, "events");
    assert_non_null(strstr(err.message, "tcp://0.0.0.0:* is not loopback"));
    struct stat st;
    assert_int_equal(stat(data, &st), -1); /* refused before the store was opened */
    snprintf(cfg.keys_dir, sizeof cfg.keys_dir, "%s/none", dir);
    ab_error_clear(&err);
    assert_int_equal(ab_broker_new(&cfg, &b, &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "keys");
    assert_null(b);
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_endpoints),   cmocka_unit_test(test_parse_refuses_wildcards),
        cmocka_unit_test(test_config_file_forms), cmocka_unit_test(test_keys_dir),
        cmocka_unit_test(test_embedded_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

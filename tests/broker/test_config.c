/*
 * test_config.c - `agentbus broker` settings: defaults, every flag, the
 * config file, flag-over-file precedence and typed errors (file:line, key),
 * the text parser's refusals (NUL bytes, long lines) and the file size bound.
 */
#include "agentbus/broker.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ARGV(...) ((char *[]){"broker", __VA_ARGS__, NULL})

static ab_status_t parse(ab_broker_config_t *cfg, int argc, char **argv, ab_error_t *err)
{
    int n = 0;
    while (argv[n] != NULL)
        n++;
    assert_int_equal(argc, n);
    ab_error_clear(err);
    return ab_broker_config_parse(cfg, argc, argv, err);
}

/* Write @p text to a fresh temporary file; the path is in @p path. */
static void write_tmp(char *path, size_t size, const char *text)
{
    snprintf(path, size, "/tmp/ab_test_config_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_defaults(void **state)
{
    (void)state;
    ab_broker_config_t cfg;
    ab_error_t err = AB_ERROR_INIT;
    char *argv[] = {"broker", NULL};
    assert_int_equal(parse(&cfg, 1, argv, &err), AB_OK);
    assert_string_equal(cfg.data_dir, "./agentbus-data");
    assert_string_equal(cfg.cmd_endpoint, "tcp://127.0.0.1:7710");
    assert_string_equal(cfg.events_endpoint, "tcp://127.0.0.1:7711");
    assert_string_equal(cfg.plugin, "sqlite");
    assert_int_equal(cfg.durability, AB_DURABILITY_FSYNC);
    assert_int_equal(cfg.readers, 2);
    assert_int_equal(cfg.queue, 16384);
    assert_int_equal(cfg.group_max, 4096);
    assert_int_equal(cfg.hwm, 1000);
    assert_int_equal(cfg.snapshot_every, AB_BROKER_DEFAULT_SNAP_EVERY);
    assert_int_equal(cfg.snapshot_memory, 64);
    assert_int_equal(cfg.limits.max_batch, ab_limits_default().max_batch);
    assert_int_equal(cfg.limits.max_event_bytes, ab_limits_default().max_event_bytes);
    assert_int_equal(cfg.log_level, AB_LOG_INFO);
    assert_false(cfg.help);
    assert_int_equal(cfg.queue_mib, 256);
    assert_int_equal(cfg.replays, 256);
    assert_int_equal(cfg.replays_per_conn, 8);
    assert_int_equal(cfg.replay_mib, 128);
    assert_int_equal(cfg.replay_idle_s, 60);
    assert_int_equal(cfg.limits.max_publish_bytes, 16u << 20);
    assert_int_equal(cfg.limits.max_replay_bytes, 2u << 20);
}

/* The byte bounds of the ingest queue and of replays (issue 11): values and cross-checks. */
static void test_byte_bounds(void **state)
{
    (void)state;
    ab_broker_config_t cfg;
    ab_error_t err = AB_ERROR_INIT;
    char **argv = ARGV("--queue-mib", "64", "--max-publish-bytes", "4194304", "--replays", "40",
                       "--replays-per-connection", "4", "--max-replay-bytes", "65536",
                       "--replay-mib", "32", "--replay-idle", "5");
    assert_int_equal(parse(&cfg, 15, argv, &err), AB_OK);
    assert_int_equal(cfg.queue_mib, 64);
    assert_int_equal(cfg.limits.max_publish_bytes, 4194304);
    assert_int_equal(cfg.replays, 40);
    assert_int_equal(cfg.replays_per_conn, 4);
    assert_int_equal(cfg.limits.max_replay_bytes, 65536);
    assert_int_equal(cfg.replay_mib, 32);
    assert_int_equal(cfg.replay_idle_s, 5);
    /* a publish must hold one largest event */
    assert_int_equal(parse(&cfg, 5,
                           ARGV("--max-event-bytes", "1048576", "--max-publish-bytes", "1048576"),
                           &err),
                     AB_INVALID_CONFIG);
    assert_string_equal(err.field, "max-publish-bytes");
    assert_non_null(strstr(err.message, "max-event-bytes"));
    /* the queue must hold one largest publish */
    assert_int_equal(parse(&cfg, 3, ARGV("--queue-mib", "8"), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "queue-mib");
    assert_int_equal(parse(&cfg, 5, ARGV("--replays", "4", "--replays-per-connection", "5"), &err),
                     AB_INVALID_CONFIG);
    assert_string_equal(err.field, "replays-per-connection");
    assert_int_equal(parse(&cfg, 3, ARGV("--max-replay-bytes", "100"), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "max-replay-bytes");
    assert_int_equal(parse(&cfg, 3, ARGV("--replay-idle", "0"), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "replay-idle");
}

static void test_every_flag(void **state)
{
    (void)state;
    ab_broker_config_t cfg;
    ab_error_t err = AB_ERROR_INIT;
    char **argv =
        ARGV("--data", "/tmp/d", "--cmd", "tcp://127.0.0.1:*", "--events=ipc:///tmp/e",
             "--durability", "process", "--plugin", "/x/libp.so", "--readers", "5", "--queue",
             "5000", "--group-max", "100", "--max-batch", "10", "--max-event-bytes", "4096",
             "--hwm", "7", "--log-level", "debug", "--snapshot-every", "0");
    assert_int_equal(parse(&cfg, 26, argv, &err), AB_OK);
    assert_int_equal(cfg.snapshot_every, 0);
    assert_string_equal(cfg.data_dir, "/tmp/d");
    assert_string_equal(cfg.cmd_endpoint, "tcp://127.0.0.1:*");
    assert_string_equal(cfg.events_endpoint, "ipc:///tmp/e");
    assert_int_equal(cfg.durability, AB_DURABILITY_PROCESS);
    assert_string_equal(cfg.plugin, "/x/libp.so");
    assert_int_equal(cfg.readers, 5);
    assert_int_equal(cfg.queue, 5000);
    assert_int_equal(cfg.group_max, 100);
    assert_int_equal(cfg.limits.max_batch, 10);
    assert_int_equal(cfg.limits.max_event_bytes, 4096);
    assert_int_equal(cfg.hwm, 7);
    assert_int_equal(cfg.log_level, AB_LOG_DEBUG);
}

/* --tprev: on by default, off with false (docs/OPERATIONS.md), nothing else. */
static void test_tprev_flag(void **state)
{
    (void)state;
    ab_broker_config_t cfg;
    ab_error_t err = AB_ERROR_INIT;
    ab_broker_config_defaults(&cfg);
    assert_false(cfg.no_tprev);
    assert_int_equal(parse(&cfg, 3, ARGV("--tprev", "false"), &err), AB_OK);
    assert_true(cfg.no_tprev);
    assert_int_equal(parse(&cfg, 2, ARGV("--tprev=true"), &err), AB_OK);
    assert_false(cfg.no_tprev);
    assert_int_equal(parse(&cfg, 3, ARGV("--tprev", "maybe"), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "tprev");
}

static void test_help(void **state)
{
    (void)state;
    ab_broker_config_t cfg;
    ab_error_t err = AB_ERROR_INIT;
    char **argv = ARGV("--help");
    assert_int_equal(parse(&cfg, 2, argv, &err), AB_OK);
    assert_true(cfg.help);
}

static void test_bad_flags(void **state)
{
    (void)state;
    ab_broker_config_t cfg;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(parse(&cfg, 3, ARGV("--readers", "0"), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "readers");
    assert_non_null(strstr(err.message, "readers"));
    assert_int_equal(parse(&cfg, 3, ARGV("--queue", "12x"), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "queue");
    assert_int_equal(parse(&cfg, 3, ARGV("--snapshot-memory", "0"), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "snapshot-memory");
    assert_int_equal(parse(&cfg, 3, ARGV("--snapshot-memory", "4097"), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "snapshot-memory");
    assert_int_equal(parse(&cfg, 3, ARGV("--snapshot-memory", "4096"), &err), AB_OK);
    assert_int_equal(cfg.snapshot_memory, 4096);
    assert_int_equal(parse(&cfg, 3, ARGV("--durability", "maybe"), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "durability");
    assert_int_equal(parse(&cfg, 3, ARGV("--log-level", "loud"), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "log-level");
    assert_int_equal(parse(&cfg, 3, ARGV("--cmd", "localhost"), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "cmd");
    assert_int_equal(parse(&cfg, 3, ARGV("--bogus", "1"), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "bogus");
    assert_non_null(strstr(err.message, "--bogus"));
    assert_int_equal(parse(&cfg, 2, ARGV("--data"), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "data");
    assert_int_equal(parse(&cfg, 2, ARGV("stray"), &err), AB_INVALID_CONFIG);
    assert_int_equal(parse(&cfg, 5, ARGV("--queue", "5", "--max-batch", "10"), &err),
                     AB_INVALID_CONFIG);
    assert_string_equal(err.field, "queue");
}

static void test_config_file(void **state)
{
    (void)state;
    char path[64];
    write_tmp(path, sizeof(path),
              "# broker settings\n"
              "data = /srv/bus   # trailing comment\n"
              "\n"
              "  readers=3\n"
              "durability = process\n"
              "hwm = 1234\n"
              "snapshot-every = 50\n");
    ab_broker_config_t cfg;
    ab_error_t err = AB_ERROR_INIT;
    char **argv = ARGV("--config", path);
    assert_int_equal(parse(&cfg, 3, argv, &err), AB_OK);
    assert_string_equal(cfg.data_dir, "/srv/bus");
    assert_int_equal(cfg.readers, 3);
    assert_int_equal(cfg.durability, AB_DURABILITY_PROCESS);
    assert_int_equal(cfg.hwm, 1234);
    assert_int_equal(cfg.snapshot_every, 50);
    /* a flag overrides the file, before or after --config */
    char **argv2 = ARGV("--readers", "7", "--config", path, "--data=/other");
    assert_int_equal(parse(&cfg, 6, argv2, &err), AB_OK);
    assert_int_equal(cfg.readers, 7);
    assert_string_equal(cfg.data_dir, "/other");
    assert_int_equal(cfg.hwm, 1234);
    unlink(path);
}

static void test_config_file_errors(void **state)
{
    (void)state;
    char path[64], want[128];
    ab_broker_config_t cfg;
    ab_error_t err = AB_ERROR_INIT;
    write_tmp(path, sizeof(path), "data = /x\n# ok\nfrobnicate = 3\n");
    assert_int_equal(parse(&cfg, 3, ARGV("--config", path), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "frobnicate");
    snprintf(want, sizeof(want), "%s:3:", path);
    assert_non_null(strstr(err.message, want));
    assert_non_null(strstr(err.message, "frobnicate"));
    unlink(path);

    write_tmp(path, sizeof(path), "readers = 1\nqueue = -4\n");
    assert_int_equal(parse(&cfg, 3, ARGV("--config", path), &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "queue");
    snprintf(want, sizeof(want), "%s:2:", path);
    assert_non_null(strstr(err.message, want));
    unlink(path);

    write_tmp(path, sizeof(path), "just words\n");
    assert_int_equal(parse(&cfg, 3, ARGV("--config", path), &err), AB_INVALID_CONFIG);
    snprintf(want, sizeof(want), "%s:1:", path);
    assert_non_null(strstr(err.message, want));
    unlink(path);

    assert_int_equal(parse(&cfg, 3, ARGV("--config", "/nonexistent/ab.conf"), &err),
                     AB_INVALID_CONFIG);
    assert_string_equal(err.field, "config");
    assert_non_null(strstr(err.message, "/nonexistent/ab.conf"));
}

/*
 * Regression (fuzz_config): the file was read with fgets() and each line
 * used up to its first NUL byte, so "queue = 5\0 = x" was read as queue = 5,
 * and a line longer than the buffer that held a NUL early was split, its tail
 * taken as the next line. Both are now refused, naming the line.
 */
static void test_config_text_nul_and_long_lines(void **state)
{
    (void)state;
    ab_broker_config_t cfg, orig;
    ab_error_t err = AB_ERROR_INIT;
    ab_broker_config_defaults(&cfg);
    orig = cfg;
    static const char nul[] = "readers = 2\nqueue = 5\0 = x\n";
    assert_int_equal(ab_broker_config_load_text(&cfg, "t.conf", nul, sizeof nul - 1, &err),
                     AB_INVALID_CONFIG);
    assert_non_null(strstr(err.message, "t.conf:2: NUL byte"));
    assert_memory_equal(&cfg, &orig, sizeof cfg);
    /* 8190 bytes are a line; 8191 are not, and a NUL early in a long line does not split it */
    static char text[20000];
    size_t n = 0;
    n += (size_t)snprintf(text, sizeof text, "data = /");
    memset(text + n, 'd', 8190 - n);
    n = 8190;
    text[n++] = '\n';
    ab_error_clear(&err);
    assert_int_equal(ab_broker_config_load_text(&cfg, "t.conf", text, n, &err), AB_INVALID_CONFIG);
    assert_non_null(strstr(err.message, "t.conf:1: data: value must be"));
    memcpy(text, "# ", 2);
    ab_error_clear(&err);
    assert_int_equal(ab_broker_config_load_text(&cfg, "t.conf", text, n, &err), AB_OK);
    memset(text, '#', 9000);
    text[3] = '\0';
    memcpy(text + 9000 - 12, "readers = 9\n", 12);
    ab_error_clear(&err);
    assert_int_equal(ab_broker_config_load_text(&cfg, "t.conf", text, 9000, &err),
                     AB_INVALID_CONFIG);
    assert_non_null(strstr(err.message, "t.conf:1: line longer than 8190 bytes"));
    assert_int_equal(cfg.readers, orig.readers);
    /* the text parser takes a buffer without a NUL terminator */
    static const char part[] = "readers = 3\nreaders = 4";
    ab_error_clear(&err);
    assert_int_equal(ab_broker_config_load_text(&cfg, "t.conf", part, 11, &err), AB_OK);
    assert_int_equal(cfg.readers, 3);
}

/* A config file is read whole, at most 1 MiB; a larger one is refused. */
static void test_config_file_size_bound(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof(path), "/tmp/ab_test_config_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    for (int i = 0; i < (1 << 20) / 16 + 1; i++)
        fputs("# .............\n", f); /* 16 bytes */
    fclose(f);
    ab_broker_config_t cfg;
    ab_error_t err = AB_ERROR_INIT;
    ab_broker_config_defaults(&cfg);
    assert_int_equal(ab_broker_config_load(&cfg, path, &err), AB_INVALID_CONFIG);
    assert_string_equal(err.field, "config");
    assert_non_null(strstr(err.message, "larger than 1024 KiB"));
    assert_int_equal(truncate(path, 1 << 20), 0);
    ab_error_clear(&err);
    if (ab_broker_config_load(&cfg, path, &err) != AB_OK)
        fail_msg("%s", err.message);
    unlink(path);
}

static void test_usage_lists_defaults(void **state)
{
    (void)state;
    char buf[8192] = {0};
    FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
    assert_non_null(f);
    ab_broker_usage(f);
    fclose(f);
    const char *want[] = {"--data",
                          "--cmd",
                          "--events",
                          "--durability",
                          "--plugin",
                          "--readers",
                          "--queue",
                          "--group-max",
                          "--max-batch",
                          "--max-event-bytes",
                          "--hwm",
                          "--log-level",
                          "--snapshot-every",
                          "--snapshot-memory",
                          "--keys",
                          "--insecure",
                          "--tprev",
                          "--config",
                          "--help",
                          "16384",
                          "4096",
                          "per subscriber (default 1000)",
                          "tcp://127.0.0.1:7710"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        assert_non_null(strstr(buf, want[i]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_flag),
        cmocka_unit_test(test_byte_bounds),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_bad_flags),
        cmocka_unit_test(test_config_file),
        cmocka_unit_test(test_config_file_errors),
        cmocka_unit_test(test_usage_lists_defaults),
        cmocka_unit_test(test_tprev_flag),
        cmocka_unit_test(test_config_text_nul_and_long_lines),
        cmocka_unit_test(test_config_file_size_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

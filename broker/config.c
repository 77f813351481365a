/*
 * config.c - the settings of `agentbus broker`: defaults, the config file
 * (`key = value` lines) and the command-line flags.
 *
 * Invariants:
 *  1. Precedence is defaults < config file < flags, whatever the position of
 *     --config among the flags.
 *  2. Every key of the file is a flag name without its dashes, and both go
 *     through ab_broker_config_set(), so they accept exactly the same values.
 *  3. Any unknown key, bad value or unreadable file is AB_INVALID_CONFIG whose
 *     field names the key and whose message names it (with FILE:LINE for the
 *     file); the caller's config is written only on success.
 *  4. A config file is read whole (at most FILE_MAX_BYTES) and parsed from
 *     memory by ab_broker_config_load_text(), which tests/fuzz/fuzz_config.c
 *     feeds directly. A line is at most LINE_BYTES - 2 bytes and holds no
 *     NUL byte: both are refused, never cut or split.
 *  5. A parsed config is checked as ab_broker_new() checks it before it binds
 *     (exposure.c: the keys directory, loopback-only binds without keys), so
 *     `agentbus broker` refuses it as a usage error before touching anything.
 */
#include "agentbus/broker.h"
#include "exposure.h"
#include "log.h"
#include "metrics.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_BYTES     8192
#define FILE_MAX_BYTES (1 << 20) /* a config file is read whole; larger is refused */

void ab_broker_config_defaults(ab_broker_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s", AB_BROKER_DEFAULT_DATA);
    snprintf(cfg->cmd_endpoint, sizeof(cfg->cmd_endpoint), "%s", AB_BROKER_DEFAULT_CMD);
    snprintf(cfg->events_endpoint, sizeof(cfg->events_endpoint), "%s", AB_BROKER_DEFAULT_EVENTS);
    snprintf(cfg->plugin, sizeof(cfg->plugin), "%s", AB_BROKER_DEFAULT_PLUGIN);
    cfg->durability = AB_DURABILITY_FSYNC;
    cfg->readers = AB_BROKER_DEFAULT_READERS;
    cfg->queue = AB_BROKER_DEFAULT_QUEUE;
    cfg->queue_mib = AB_BROKER_DEFAULT_QUEUE_MIB;
    cfg->replays = AB_BROKER_DEFAULT_REPLAYS;
    cfg->replays_per_conn = AB_BROKER_DEFAULT_REPLAYS_CONN;
    cfg->replay_mib = AB_BROKER_DEFAULT_REPLAY_MIB;
    cfg->replay_idle_s = AB_BROKER_DEFAULT_REPLAY_IDLE;
    cfg->group_max = AB_BROKER_DEFAULT_GROUP_MAX;
    cfg->hwm = AB_BROKER_DEFAULT_HWM;
    cfg->snapshot_every = AB_BROKER_DEFAULT_SNAP_EVERY;
    cfg->snapshot_memory = AB_BROKER_DEFAULT_SNAP_MEMORY;
    cfg->limits = ab_limits_default();
    cfg->log_level = AB_LOG_INFO;
}

void ab_broker_usage(FILE *out)
{
    ab_limits_t d = ab_limits_default();
    fprintf(out,
            "usage: agentbus broker [options]\n\n"
            "Run the agentbus broker: a ROUTER command endpoint, an XPUB event endpoint and\n"
            "a persistence plugin (SQLite by default) in a data directory.\n\n"
            "options (each is also a `key = value` line of --config, key without dashes):\n"
            "  --config FILE           read settings from FILE first (flags override it)\n"
            "  --data DIR              data directory (default %s)\n"
            "  --cmd ENDPOINT          command endpoint, ROUTER (default %s)\n"
            "  --events ENDPOINT       event endpoint, XPUB (default %s)\n"
            "                          a port of * binds any free port; the ready line\n"
            "                          and `welcome` name the real one\n"
            "  --durability MODE       fsync (survives power loss) or process (survives a\n"
            "                          broker crash) (default fsync)\n"
            "  --plugin NAME|PATH      persistence plugin: sqlite or a shared object path\n"
            "                          (default %s); postgres is the PostgreSQL module\n"
            "  --pg CONNINFO           the postgres plugin's libpq connection string, e.g.\n"
            "                          'host=a,b dbname=bus target_session_attrs=read-write'\n"
            "  --readers N             replay reader threads, 1..%d (default %d)\n"
            "  --queue N               events in flight in the ingest queue (default %d)\n"
            "  --queue-mib MIB         bytes of publishes in flight in the ingest queue, at\n"
            "                          least max-publish-bytes (default %d MiB)\n"
            "  --group-max N           most events per group commit (default %d)\n"
            "  --max-batch N           most events per publish (default %u)\n"
            "  --max-event-bytes N     largest event envelope in bytes (default %u)\n"
            "  --max-publish-bytes N   most bytes of envelopes in one publish, at least\n"
            "                          max-event-bytes + 4 (default %u)\n"
            "  --replays N             replays open at once, all connections; a replay\n"
            "                          counts until its chunks are read (default %d)\n"
            "  --replays-per-connection N  ... on one connection (default %d)\n"
            "  --max-replay-bytes N    unread bytes of one replay, at least 4096 (default %u)\n"
            "  --replay-mib MIB        unread replay bytes of all replays (default %d MiB)\n"
            "  --replay-idle S         seconds a connection may leave replay chunks unread\n"
            "                          before its replays are cancelled (default %d)\n"
            "  --hwm N                 event endpoint send high-water mark, live messages\n"
            "                          (of up to 256 events) per subscriber (default %d)\n"
            "  --tprev BOOL            put the thread's previous position (tprev) in live\n"
            "                          stamps; false for subscribers built before it, which\n"
            "                          refuse the field (default true)\n"
            "  --snapshot-every N      store a thread's snapshot after every N committed\n"
            "                          events of it (and at least as many envelope bytes\n"
            "                          as its last snapshot document), 0 = only when a run\n"
            "                          ends and at a clean stop (default %d)\n"
            "  --snapshot-memory MIB   most memory one thread's snapshot may take to build,\n"
            "                          1..4096; a larger one is answered too_large and not\n"
            "                          stored until a run of the thread ends (default %d)\n"
            "  --keys DIR              the broker's CURVE keys (made by `agentbus keygen`)\n"
            "  --access FILE           who may do what: NAME KEY ROLE[:PREFIX,...] lines\n"
            "                          (default DIR/access; without one every key in DIR\n"
            "                          has every role); reread at SIGHUP\n"
            "  --insecure              allow binding an endpoint that is not loopback without\n"
            "                          --keys: anyone who can reach the port can read and\n"
            "                          write every thread (logged as a warning at start)\n",
            AB_BROKER_DEFAULT_DATA, AB_BROKER_DEFAULT_CMD, AB_BROKER_DEFAULT_EVENTS,
            AB_BROKER_DEFAULT_PLUGIN, AB_BROKER_MAX_READERS, AB_BROKER_DEFAULT_READERS,
            AB_BROKER_DEFAULT_QUEUE, AB_BROKER_DEFAULT_QUEUE_MIB, AB_BROKER_DEFAULT_GROUP_MAX,
            d.max_batch, d.max_event_bytes, d.max_publish_bytes, AB_BROKER_DEFAULT_REPLAYS,
            AB_BROKER_DEFAULT_REPLAYS_CONN, d.max_replay_bytes, AB_BROKER_DEFAULT_REPLAY_MIB,
            AB_BROKER_DEFAULT_REPLAY_IDLE, AB_BROKER_DEFAULT_HWM, AB_BROKER_DEFAULT_SNAP_EVERY,
            AB_BROKER_DEFAULT_SNAP_MEMORY);
    fputs("  --log-level LEVEL       error, warn, info or debug (default info)\n"
          "  --metrics HOST:PORT     Prometheus metrics at http://HOST:PORT/metrics (:PORT is\n"
          "                          127.0.0.1:PORT; default off)\n"
          "  --log-format FORMAT     text, or json: one object {time, level, msg} a line\n"
          "                          (default text)\n"
          "  --help                  show this help\n\n"
          "At start the broker prints one line to stdout:\n"
          "  agentbus broker ready cmd=<endpoint> events=<endpoint> data=<dir> instance=<id>\n"
          "Without --keys, --cmd and --events must be loopback (127.x.x.x, localhost,\n"
          "[::1]) or ipc:// or inproc://; any other address (*, 0.0.0.0, an interface)\n"
          "is refused unless --insecure is given.\n"
          "SIGINT/SIGTERM stop it after acknowledging every queued request (exit 0).\n"
          "SIGHUP rereads the access file (a wrong one is logged and the old one kept).\n"
          "Exit status: 0 clean stop, 1 failed to start or failed, 2 usage error.\n",
          out);
}

static ab_status_t parse_u32(const char *key, const char *value, uint64_t lo, uint64_t hi,
                             uint32_t *out, ab_error_t *err)
{
    char *end = NULL;
    errno = 0;
    if (!isdigit((unsigned char)value[0]))
        goto bad;
    unsigned long long v = strtoull(value, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        goto bad;
    *out = (uint32_t)v;
    return AB_OK;
bad:
    return ab_error_set(err, AB_INVALID_CONFIG, key, "%s: '%s' is not an integer in %llu..%llu",
                        key, value, (unsigned long long)lo, (unsigned long long)hi);
}

static ab_status_t set_str(char *dst, size_t size, const char *key, const char *value,
                           ab_error_t *err)
{
    size_t n = strlen(value);
    if (n == 0 || n >= size)
        return ab_error_set(err, AB_INVALID_CONFIG, key, "%s: value must be 1..%zu bytes", key,
                            size - 1);
    memcpy(dst, value, n + 1);
    return AB_OK;
}

static ab_status_t set_endpoint(char *dst, const char *key, const char *value, ab_error_t *err)
{
    if (strstr(value, "://") == NULL)
        return ab_error_set(err, AB_INVALID_CONFIG, key,
                            "%s: '%s' is not a ZeroMQ endpoint (e.g. tcp://127.0.0.1:7710)", key,
                            value);
    return set_str(dst, AB_BROKER_ENDPOINT_MAX, key, value, err);
}

static ab_status_t set_bool(bool *dst, const char *key, const char *value, ab_error_t *err)
{
    if (strcmp(value, "true") == 0 || strcmp(value, "yes") == 0 || strcmp(value, "1") == 0)
        *dst = true;
    else if (strcmp(value, "false") == 0 || strcmp(value, "no") == 0 || strcmp(value, "0") == 0)
        *dst = false;
    else
        return ab_error_set(err, AB_INVALID_CONFIG, key, "%s: '%s' is not true or false", key,
                            value);
    return AB_OK;
}

static ab_status_t set_enum(ab_broker_config_t *cfg, const char *key, const char *value,
                            ab_error_t *err)
{
    if (strcmp(key, "durability") == 0) {
        if (strcmp(value, "fsync") == 0)
            cfg->durability = AB_DURABILITY_FSYNC;
        else if (strcmp(value, "process") == 0)
            cfg->durability = AB_DURABILITY_PROCESS;
        else
            return ab_error_set(err, AB_INVALID_CONFIG, key,
                                "durability: '%s' is not fsync or process", value);
        return AB_OK;
    }
    if (ab__log_level_from(value, &cfg->log_level) != AB_OK)
        return ab_error_set(err, AB_INVALID_CONFIG, key,
                            "log-level: '%s' is not error, warn, info or debug", value);
    return AB_OK;
}

ab_status_t ab_broker_config_set(ab_broker_config_t *cfg, const char *key, const char *value,
                                 ab_error_t *err)
{
    const uint64_t u32max = UINT32_MAX, i31max = INT32_MAX;
    if (strcmp(key, "data") == 0)
        return set_str(cfg->data_dir, sizeof(cfg->data_dir), key, value, err);
    if (strcmp(key, "cmd") == 0)
        return set_endpoint(cfg->cmd_endpoint, key, value, err);
    if (strcmp(key, "events") == 0)
        return set_endpoint(cfg->events_endpoint, key, value, err);
    if (strcmp(key, "plugin") == 0)
        return set_str(cfg->plugin, sizeof(cfg->plugin), key, value, err);
    if (strcmp(key, "pg") == 0)
        return set_str(cfg->pg_conninfo, sizeof(cfg->pg_conninfo), key, value, err);
    if (strcmp(key, "keys") == 0)
        return set_str(cfg->keys_dir, sizeof(cfg->keys_dir), key, value, err);
    if (strcmp(key, "insecure") == 0)
        return set_bool(&cfg->insecure, key, value, err);
    if (strcmp(key, "access") == 0)
        return set_str(cfg->access_file, sizeof(cfg->access_file), key, value, err);
    if (strcmp(key, "metrics") == 0)
        return set_str(cfg->metrics, sizeof(cfg->metrics), key, value, err);
    if (strcmp(key, "log-format") == 0) {
        if (strcmp(value, "text") != 0 && strcmp(value, "json") != 0)
            return ab_error_set(err, AB_INVALID_CONFIG, key, "log-format: '%s' is not text or json",
                                value);
        cfg->log_json = strcmp(value, "json") == 0;
        return AB_OK;
    }
    if (strcmp(key, "durability") == 0 || strcmp(key, "log-level") == 0)
        return set_enum(cfg, key, value, err);
    if (strcmp(key, "readers") == 0)
        return parse_u32(key, value, 1, AB_BROKER_MAX_READERS, &cfg->readers, err);
    if (strcmp(key, "queue") == 0)
        return parse_u32(key, value, 1, i31max, &cfg->queue, err);
    if (strcmp(key, "group-max") == 0)
        return parse_u32(key, value, 1, 1u << 20, &cfg->group_max, err);
    if (strcmp(key, "max-batch") == 0)
        return parse_u32(key, value, 1, 65536, &cfg->limits.max_batch, err);
    if (strcmp(key, "max-event-bytes") == 0)
        return parse_u32(key, value, 64, 1u << 30, &cfg->limits.max_event_bytes, err);
    if (strcmp(key, "queue-mib") == 0)
        return parse_u32(key, value, 1, 1u << 20, &cfg->queue_mib, err);
    if (strcmp(key, "max-publish-bytes") == 0)
        return parse_u32(key, value, 68, 1u << 30, &cfg->limits.max_publish_bytes, err);
    if (strcmp(key, "replays") == 0)
        return parse_u32(key, value, 1, 1u << 20, &cfg->replays, err);
    if (strcmp(key, "replays-per-connection") == 0)
        return parse_u32(key, value, 1, 1u << 20, &cfg->replays_per_conn, err);
    if (strcmp(key, "max-replay-bytes") == 0)
        return parse_u32(key, value, 4096, 1u << 30, &cfg->limits.max_replay_bytes, err);
    if (strcmp(key, "replay-mib") == 0)
        return parse_u32(key, value, 1, 1u << 20, &cfg->replay_mib, err);
    if (strcmp(key, "replay-idle") == 0)
        return parse_u32(key, value, 1, 86400, &cfg->replay_idle_s, err);
    if (strcmp(key, "tprev") == 0) {
        bool on = !cfg->no_tprev;
        ab_status_t rc = set_bool(&on, key, value, err);
        cfg->no_tprev = !on;
        return rc;
    }
    if (strcmp(key, "hwm") == 0)
        return parse_u32(key, value, 1, i31max, &cfg->hwm, err);
    if (strcmp(key, "snapshot-every") == 0)
        return parse_u32(key, value, 0, u32max, &cfg->snapshot_every, err);
    if (strcmp(key, "snapshot-memory") == 0)
        return parse_u32(key, value, 1, 4096, &cfg->snapshot_memory, err);
    return ab_error_set(err, AB_INVALID_CONFIG, key, "unknown setting '%s'", key);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* One line of a config file; @p line is modified. */
static ab_status_t load_line(ab_broker_config_t *cfg, const char *path, unsigned lineno, char *line,
                             ab_error_t *err)
{
    char *hash = strchr(line, '#');
    if (hash != NULL)
        *hash = '\0';
    char *s = trim(line);
    if (*s == '\0')
        return AB_OK;
    char *eq = strchr(s, '=');
    if (eq == NULL)
        return ab_error_set(err, AB_INVALID_CONFIG, "", "%s:%u: expected 'key = value', got '%s'",
                            path, lineno, s);
    *eq = '\0';
    char *key = trim(s), *value = trim(eq + 1);
    ab_error_t e = AB_ERROR_INIT;
    if (*key == '\0')
        return ab_error_set(err, AB_INVALID_CONFIG, "", "%s:%u: missing key before '='", path,
                            lineno);
    if (strcmp(key, "config") == 0)
        ab_error_set(&e, AB_INVALID_CONFIG, key, "'config' cannot be set in a config file");
    else if (ab_broker_config_set(cfg, key, value, &e) == AB_OK)
        return AB_OK;
    return ab_error_set(err, AB_INVALID_CONFIG, e.field, "%s:%u: %s", path, lineno, e.message);
}

/* Line @p lineno, s[0..n) without its newline, of config text @p name. */
static ab_status_t text_line(ab_broker_config_t *cfg, const char *name, unsigned lineno,
                             const char *s, size_t n, ab_error_t *err)
{
    char line[LINE_BYTES];
    if (n > LINE_BYTES - 2)
        return ab_error_set(err, AB_INVALID_CONFIG, "", "%s:%u: line longer than %d bytes", name,
                            lineno, LINE_BYTES - 2);
    if (memchr(s, '\0', n) != NULL)
        return ab_error_set(err, AB_INVALID_CONFIG, "", "%s:%u: NUL byte in the line", name,
                            lineno);
    memcpy(line, s, n);
    line[n] = '\0';
    return load_line(cfg, name, lineno, line, err);
}

ab_status_t ab_broker_config_load_text(ab_broker_config_t *cfg, const char *name, const char *text,
                                       size_t len, ab_error_t *err)
{
    ab_broker_config_t tmp = *cfg;
    unsigned lineno = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl != NULL ? (size_t)(nl - (text + at)) : len - at;
        ab_status_t st = text_line(&tmp, name, ++lineno, text + at, n, err);
        if (st != AB_OK)
            return st;
        at += n + 1;
    }
    *cfg = tmp;
    return AB_OK;
}

ab_status_t ab_broker_config_load(ab_broker_config_t *cfg, const char *path, ab_error_t *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return ab_error_set(err, AB_INVALID_CONFIG, "config", "cannot open config file %s: %s",
                            path, strerror(errno));
    char *text = malloc(FILE_MAX_BYTES + 1);
    size_t len = text != NULL ? fread(text, 1, FILE_MAX_BYTES + 1, f) : 0;
    ab_status_t st;
    if (text == NULL)
        st = ab_error_set(err, AB_NOMEM, "config", "out of memory reading %s", path);
    else if (ferror(f))
        st = ab_error_set(err, AB_INVALID_CONFIG, "config", "cannot read config file %s", path);
    else if (len > FILE_MAX_BYTES)
        st = ab_error_set(err, AB_INVALID_CONFIG, "config", "config file %s is larger than %d KiB",
                          path, FILE_MAX_BYTES >> 10);
    else
        st = ab_broker_config_load_text(cfg, path, text, len, err);
    free(text);
    fclose(f);
    return st;
}

/* Whether @p name is a setting (a probe on a scratch copy of the defaults). */
static bool known_setting(const char *name)
{
    ab_broker_config_t probe;
    ab_broker_config_defaults(&probe);
    ab_error_t e = AB_ERROR_INIT;
    return strcmp(name, "config") == 0 || ab_broker_config_set(&probe, name, "", &e) == AB_OK ||
           strncmp(e.message, "unknown setting", 15) != 0;
}

/* Split argv[*i] into flag name and value ("--x=v" or "--x v"); advances *i. An unknown
 * flag, or one whose value is missing or would start with "--", is refused naming it. */
static ab_status_t next_flag(int argc, char **argv, int *i, const char **name, const char **value,
                             char *namebuf, size_t size, ab_error_t *err)
{
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
        return ab_error_set(err, AB_INVALID_CONFIG, "", "unexpected argument '%s'", a);
    a += 2;
    const char *eq = strchr(a, '=');
    size_t n = eq != NULL ? (size_t)(eq - a) : strlen(a);
    if (n >= size)
        return ab_error_set(err, AB_INVALID_CONFIG, "", "unknown option '%s'", argv[*i]);
    memcpy(namebuf, a, n);
    namebuf[n] = '\0';
    *name = namebuf;
    if (strcmp(namebuf, "help") == 0) {
        *value = NULL;
        return AB_OK;
    }
    if (strcmp(namebuf, "insecure") == 0 && eq == NULL) { /* a switch; --insecure=false too */
        *value = "true";
        return AB_OK;
    }
    /* named before a value is taken, so that a bad flag is not reported as the next one */
    if (!known_setting(namebuf))
        return ab_error_set(err, AB_INVALID_CONFIG, namebuf, "unknown option '--%s'", namebuf);
    if (eq != NULL) {
        *value = eq + 1;
        return AB_OK;
    }
    /* a value never starts with "--": `--data --insecure` lacks one (`--data=--x` gives it) */
    if (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) {
        *value = argv[++*i];
        return AB_OK;
    }
    return ab_error_set(err, AB_INVALID_CONFIG, namebuf, "option '--%s' needs a value", namebuf);
}

static ab_status_t check_config(const ab_broker_config_t *cfg, ab_error_t *err)
{
    if (cfg->queue < cfg->limits.max_batch)
        return ab_error_set(err, AB_INVALID_CONFIG, "queue",
                            "queue (%u) must be at least max-batch (%u)", cfg->queue,
                            cfg->limits.max_batch);
    if ((uint64_t)cfg->limits.max_publish_bytes < (uint64_t)cfg->limits.max_event_bytes + 4)
        return ab_error_set(err, AB_INVALID_CONFIG, "max-publish-bytes",
                            "max-publish-bytes (%u) must hold one event of max-event-bytes (%u)"
                            " plus its 4-byte length",
                            cfg->limits.max_publish_bytes, cfg->limits.max_event_bytes);
    if (((uint64_t)cfg->queue_mib << 20) < cfg->limits.max_publish_bytes)
        return ab_error_set(err, AB_INVALID_CONFIG, "queue-mib",
                            "queue-mib (%u MiB) must be at least max-publish-bytes (%u bytes)",
                            cfg->queue_mib, cfg->limits.max_publish_bytes);
    struct sockaddr_in sa;
    if (cfg->metrics[0] != '\0' && ab__metrics_parse(cfg->metrics, &sa, err) != AB_OK)
        return AB_INVALID_CONFIG;
    if (cfg->replays_per_conn > cfg->replays)
        return ab_error_set(err, AB_INVALID_CONFIG, "replays-per-connection",
                            "replays-per-connection (%u) must be at most replays (%u)",
                            cfg->replays_per_conn, cfg->replays);
    return ab__broker_check_exposure(cfg, false, err);
}

/* Pass over the flags: with @p config_only only --config is applied, else all but it. */
static ab_status_t apply_flags(ab_broker_config_t *cfg, int argc, char **argv, bool config_only,
                               ab_error_t *err)
{
    char namebuf[64];
    for (int i = 1; i < argc; i++) {
        const char *name = NULL, *value = NULL;
        ab_status_t st = next_flag(argc, argv, &i, &name, &value, namebuf, sizeof(namebuf), err);
        if (st != AB_OK)
            return st;
        bool is_config = strcmp(name, "config") == 0;
        if (strcmp(name, "help") == 0) {
            cfg->help = true;
            continue;
        }
        if (config_only != is_config)
            continue;
        ab_error_t e = AB_ERROR_INIT;
        st = is_config ? ab_broker_config_load(cfg, value, &e)
                       : ab_broker_config_set(cfg, name, value, &e);
        if (st != AB_OK) { /* an unknown flag was refused by next_flag() */
            *err = e;
            return st;
        }
    }
    return AB_OK;
}

ab_status_t ab_broker_config_parse(ab_broker_config_t *cfg, int argc, char **argv, ab_error_t *err)
{
    ab_broker_config_t tmp;
    ab_error_t e = AB_ERROR_INIT;
    ab_broker_config_defaults(&tmp);
    ab_status_t st = apply_flags(&tmp, argc, argv, true, &e);
    if (st == AB_OK)
        st = apply_flags(&tmp, argc, argv, false, &e);
    if (st == AB_OK && !tmp.help)
        st = check_config(&tmp, &e);
    if (st != AB_OK) {
        if (err != NULL)
            *err = e;
        return st;
    }
    *cfg = tmp;
    return AB_OK;
}

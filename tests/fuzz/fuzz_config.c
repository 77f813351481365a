/*
 * fuzz_config.c - libFuzzer target for the broker's config file parser
 * (ab_broker_config_load_text and ab_broker_config_load, broker/config.c).
 *
 * Input: the text of a config file, any bytes. Each input is parsed from
 * memory onto the defaults, and also written to one temporary file (created
 * under /tmp at the first input, removed at exit) and read back with
 * ab_broker_config_load.
 *
 * A model of the documented syntax runs beside it: lines end at '\n'; a
 * line is at most 8190 bytes and has no NUL byte; '#' starts a comment;
 * blank lines are skipped; otherwise `key = value` split at the first '='
 * and trimmed, the key not empty and not `config`, the value given to
 * ab_broker_config_set().
 *
 * Checks, for any input; a violation calls abort():
 *  1. the answer is AB_OK or AB_INVALID_CONFIG; an error's message starts
 *     with "NAME:LINE: " and LINE is the first line the model refuses; its
 *     field is the key of that line (a key too long for the field cut as
 *     ab_error_set() cuts paths) or "" when the line has none; the config is
 *     unchanged;
 *  2. on AB_OK the model accepts every line and ends with the same
 *     settings; every setting written back as `key = value` lines parses
 *     to the same settings again;
 *  3. the same lines given as flags (`--key=value`) to ab_broker_config_parse
 *     give the same settings, or fail only on a rule between settings
 *     (queue, max-publish-bytes, queue-mib, replays-per-connection) or on
 *     what the settings expose (a cmd or events endpoint that is not
 *     loopback without keys: invalid_argument; the keys directory): a key
 *     accepts exactly the same values in a file and as a flag;
 *  4. the file reader answers exactly what the text parser answers.
 * ASan/UBSan watch the rest.
 */
#include "agentbus/broker.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LINE_MAX_BYTES 8190
#define TEXT_MAX       (64 * 1024)

static const char *const str_keys[] = {"data", "cmd", "events", "plugin"};
static const char *const num_keys[] = {"readers",
                                       "queue",
                                       "group-max",
                                       "max-batch",
                                       "max-event-bytes",
                                       "queue-mib",
                                       "max-publish-bytes",
                                       "replays",
                                       "replays-per-connection",
                                       "max-replay-bytes",
                                       "replay-mib",
                                       "replay-idle",
                                       "hwm",
                                       "snapshot-every",
                                       "snapshot-memory"};
static const char *const levels[] = {"error", "warn", "info", "debug"};

static char g_path[64];

static void die(const char *what)
{
    fprintf(stderr, "fuzz_config: %s\n", what);
    abort();
}

static void remove_file(void)
{
    if (g_path[0] != '\0')
        unlink(g_path);
}

static uint32_t num_of(const ab_broker_config_t *c, size_t i)
{
    const uint32_t v[] = {c->readers,
                          c->queue,
                          c->group_max,
                          c->limits.max_batch,
                          c->limits.max_event_bytes,
                          c->queue_mib,
                          c->limits.max_publish_bytes,
                          c->replays,
                          c->replays_per_conn,
                          c->limits.max_replay_bytes,
                          c->replay_mib,
                          c->replay_idle_s,
                          c->hwm,
                          c->snapshot_every,
                          c->snapshot_memory};
    return v[i];
}

/* Every setting of @p c as `key = value` lines into @p out (static, reused). */
static const char *settings(const ab_broker_config_t *c, char *out, size_t size)
{
    const char *strs[] = {c->data_dir, c->cmd_endpoint, c->events_endpoint, c->plugin};
    size_t w = 0;
    for (size_t i = 0; i < 4; i++)
        w += (size_t)snprintf(out + w, size - w, "%s = %s\n", str_keys[i], strs[i]);
    for (size_t i = 0; i < sizeof num_keys / sizeof num_keys[0]; i++)
        w += (size_t)snprintf(out + w, size - w, "%s = %u\n", num_keys[i], num_of(c, i));
    w += (size_t)snprintf(out + w, size - w, "durability = %s\nlog-level = %s\ninsecure = %s\n",
                          c->durability == AB_DURABILITY_FSYNC ? "fsync" : "process",
                          levels[c->log_level], c->insecure ? "true" : "false");
    if (c->keys_dir[0] != '\0')
        w += (size_t)snprintf(out + w, size - w, "keys = %s\n", c->keys_dir);
    if (c->access_file[0] != '\0')
        w += (size_t)snprintf(out + w, size - w, "access = %s\n", c->access_file);
    if (w >= size)
        die("settings do not fit");
    return out;
}

static bool same(const ab_broker_config_t *a, const ab_broker_config_t *b)
{
    static char sa[20000], sb[20000];
    return strcmp(settings(a, sa, sizeof sa), settings(b, sb, sizeof sb)) == 0 &&
           a->help == b->help;
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

/* The model's settings: defaults, then each line; lines become flags in @p argv. */
typedef struct model {
    ab_broker_config_t cfg;
    unsigned bad_line; /* first refused line, 0 = none */
    char *field;       /* the key of a refused line that had one */
    char **argv;
    int argc;
} model_t;

/* One line of the model; @return false when it refuses it. */
static bool model_line(model_t *m, char *line, size_t n)
{
    if (n > LINE_MAX_BYTES || memchr(line, '\0', n) != NULL)
        return false;
    line[n] = '\0';
    char *hash = strchr(line, '#');
    if (hash)
        *hash = '\0';
    char *s = trim(line), *eq = strchr(s, '=');
    if (*s == '\0')
        return true;
    if (eq == NULL)
        return false;
    *eq = '\0';
    char *key = trim(s), *value = trim(eq + 1);
    ab_error_t e = AB_ERROR_INIT;
    if (*key != '\0')
        m->field = key;
    if (*key == '\0' || strcmp(key, "config") == 0 ||
        ab_broker_config_set(&m->cfg, key, value, &e) != AB_OK)
        return false;
    size_t len = strlen(key) + strlen(value) + 4;
    char *flag = malloc(len);
    snprintf(flag, len, "--%s=%s", key, value);
    m->argv[m->argc++] = flag;
    return true;
}

/* Run the model over @p text (a writable copy, NUL-terminated after @p len). */
static void model_run(model_t *m, char *text, size_t len)
{
    ab_broker_config_defaults(&m->cfg);
    m->argv = calloc(len + 2, sizeof(char *));
    m->argv[m->argc++] = strdup("broker");
    unsigned lineno = 0;
    for (size_t at = 0; at < len && m->bad_line == 0;) {
        char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        lineno++;
        m->field = NULL;
        if (!model_line(m, text + at, n))
            m->bad_line = lineno;
        at += n + 1;
    }
}

static void model_free(model_t *m)
{
    for (int i = 0; i < m->argc; i++)
        free(m->argv[i]);
    free(m->argv);
}

/* Invariant 1: the error names the model's first bad line and its key. */
static void check_error(const ab_error_t *err, const model_t *m, const char *name)
{
    char want[128];
    snprintf(want, sizeof want, "%s:%u: ", name, m->bad_line);
    if (err->code != AB_INVALID_CONFIG || m->bad_line == 0 ||
        strncmp(err->message, want, strlen(want)) != 0)
        die("the error does not name the first bad line");
    const char *key = m->field != NULL ? m->field : "";
    size_t n = strlen(err->field); /* a key too long for the field is cut at a '/' (or to "") */
    bool whole = strcmp(err->field, key) == 0;
    bool cut = strlen(key) >= AB_ERROR_FIELD_MAX && strncmp(err->field, key, n) == 0 &&
               (n == 0 || key[n] == '/');
    if (!whole && !cut)
        die("the error's field is not the line's key");
}

/* Invariant 3: the lines as flags. */
static void check_flags(const model_t *m, const ab_broker_config_t *cfg)
{
    ab_broker_config_t f;
    ab_error_t err = AB_ERROR_INIT;
    static const char *const cross[] = {"queue", "max-publish-bytes", "queue-mib",
                                        "replays-per-connection"};
    if (ab_broker_config_parse(&f, m->argc, m->argv, &err) == AB_OK) {
        if (!same(&f, cfg))
            die("the lines as flags give other settings");
        return;
    }
    for (size_t i = 0; i < sizeof cross / sizeof cross[0]; i++)
        if (strcmp(err.field, cross[i]) == 0)
            return;
    bool exposed = err.code == AB_INVALID_ARGUMENT &&
                   (strcmp(err.field, "cmd") == 0 || strcmp(err.field, "events") == 0);
    if (exposed || strcmp(err.field, "keys") == 0 || strcmp(err.field, "access") == 0)
        return;
    fprintf(stderr, "%s\n", err.message);
    die("a line accepted in a file is refused as a flag");
}

/* Invariant 2: the settings written back read the same. */
static void check_round_trip(const ab_broker_config_t *cfg)
{
    static char text[20000];
    settings(cfg, text, sizeof text);
    ab_broker_config_t again;
    ab_error_t err = AB_ERROR_INIT;
    ab_broker_config_defaults(&again);
    if (ab_broker_config_load_text(&again, "again", text, strlen(text), &err) != AB_OK ||
        !same(&again, cfg))
        die("the settings written back do not read the same");
}

/* The temporary file, created at the first input. */
static void init_file(void)
{
    if (g_path[0] != '\0')
        return;
    snprintf(g_path, sizeof g_path, "/tmp/ab-fuzz-config-XXXXXX");
    int fd = mkstemp(g_path);
    if (fd < 0)
        die("mkstemp failed");
    close(fd);
    atexit(remove_file);
}

/* Invariant 4: the file reader gives what the text parser gave. */
static void check_file(const uint8_t *data, size_t size, ab_status_t st,
                       const ab_broker_config_t *cfg, const ab_error_t *err)
{
    FILE *f = fopen(g_path, "wb");
    if (f == NULL || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        die("cannot write the temporary file");
    ab_broker_config_t c;
    ab_error_t e = AB_ERROR_INIT;
    ab_broker_config_defaults(&c);
    ab_status_t fs = ab_broker_config_load(&c, g_path, &e);
    if (fs != st || strcmp(e.message, err->message) != 0 || strcmp(e.field, err->field) != 0 ||
        (st == AB_OK && !same(&c, cfg)))
        die("the file reader and the text parser disagree");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > TEXT_MAX)
        return 0;
    init_file();
    ab_broker_config_t cfg, orig;
    ab_broker_config_defaults(&cfg);
    orig = cfg;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_broker_config_load_text(&cfg, g_path, (const char *)data, size, &err);
    char *copy = malloc(size + 1);
    memcpy(copy, data, size);
    copy[size] = '\0';
    model_t m = {0};
    model_run(&m, copy, size);
    if (st != AB_OK) {
        check_error(&err, &m, g_path);
        if (memcmp(&cfg, &orig, sizeof cfg) != 0)
            die("a refused text changed the config");
    } else {
        if (m.bad_line != 0 || !same(&m.cfg, &cfg))
            die("the model refuses or reads otherwise what the parser accepted");
        check_round_trip(&cfg);
        check_flags(&m, &cfg);
    }
    check_file(data, size, st, &cfg, &err);
    model_free(&m);
    free(copy);
    return 0;
}

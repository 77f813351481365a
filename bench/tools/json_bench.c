/*
 * json_bench.c - throughput of the JSON bridge's input half,
 * ab_json_to_msgpack() (proto/json_parse.c), next to what it replaced
 * (jansson's parser + msgpack-c packing the tree, rebuilt here) and to
 * jansson's parser alone (a peer that does less: no msgpack, no limits).
 *
 * Usage: json_bench [seconds per row, default 1]
 *
 * Inputs, 1024 distinct texts per row, cycled: the event mix of `agentbus
 * bench proto` (TEXT_MESSAGE_CONTENT, TOOL_CALL_ARGS with escaped quotes,
 * STATE_DELTA, CUSTOM) padded to about 256 B and 2 KiB, and a STATE_SNAPSHOT
 * of about 2 KiB made of numbers (integers, floats, exponents). Figures are
 * CPU time of this thread (one core), in docs/PERFORMANCE.md.
 *
 * Invariant: every text converts without error in every row, else the
 * program stops with the message; no number is printed for a failing row.
 */
#include "agentbus/json.h"

#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NTEXTS 1024

struct set {
    char *text[NTEXTS];
    size_t len[NTEXTS];
    size_t bytes;
};

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *event_text(int i, size_t target)
{
    char *out = malloc(target + 256), *pad = malloc(target + 1);
    if (!out || !pad)
        abort();
    size_t n = target > 100 ? target - 100 : 1;
    memset(pad, 'a' + i % 26, n);
    pad[n] = '\0';
    static const char *const fmt[] = {
        "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"msg-%d\",\"delta\":\"%s\"}",
        "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"call-%d\",\"delta\":\"{\\\"q\\\":\\\"%s\\\"}"
        "\"}",
        "{\"type\":\"STATE_DELTA\",\"delta\":[{\"op\":\"replace\",\"path\":\"/tasks/%d/note\","
        "\"value\":\"%s\"}]}",
        "{\"type\":\"CUSTOM\",\"name\":\"acme:progress\",\"value\":{\"step\":%d,\"done\":false,"
        "\"label\":\"%s\"}}",
    };
    snprintf(out, target + 256, fmt[i % 4], i, pad);
    free(pad);
    return out;
}

static char *numbers_text(int i)
{
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    if (!out)
        abort();
    len += (size_t)snprintf(out, cap, "{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":{\"v\":[");
    for (int k = 0; len < 2000; k++) {
        long long x = (long long)(i + 1) * 7919 * (k + 1);
        const char *sep = k ? "," : "";
        if (k % 3 == 0)
            len += (size_t)snprintf(out + len, cap - len, "%s%lld", sep, x);
        else if (k % 3 == 1)
            len += (size_t)snprintf(out + len, cap - len, "%s%.6f", sep, (double)x / 1000.0);
        else
            len += (size_t)snprintf(out + len, cap - len, "%s%lld.5e-3", sep, -x);
    }
    snprintf(out + len, cap - len, "],\"at\":1767225600000}}");
    return out;
}

static void make_set(struct set *s, size_t target)
{
    s->bytes = 0;
    for (int i = 0; i < NTEXTS; i++) {
        s->text[i] = target ? event_text(i, target) : numbers_text(i);
        s->len[i] = strlen(s->text[i]);
        s->bytes += s->len[i];
    }
}

/* The old bridge: jansson's tree packed with msgpack-c. */
static int pack_tree(msgpack_packer *pk, json_t *j)
{
    int rc = 0;
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        rc = msgpack_pack_map(pk, json_object_size(j));
        for (void *it = json_object_iter(j); rc == 0 && it; it = json_object_iter_next(j, it)) {
            rc = msgpack_pack_str_with_body(pk, json_object_iter_key(it),
                                            json_object_iter_key_len(it));
            if (rc == 0)
                rc = pack_tree(pk, json_object_iter_value(it));
        }
        return rc;
    case JSON_ARRAY:
        rc = msgpack_pack_array(pk, json_array_size(j));
        for (size_t i = 0; rc == 0 && i < json_array_size(j); i++)
            rc = pack_tree(pk, json_array_get(j, i));
        return rc;
    case JSON_STRING:
        return msgpack_pack_str_with_body(pk, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return msgpack_pack_int64(pk, (int64_t)json_integer_value(j));
    case JSON_REAL: return msgpack_pack_double(pk, json_real_value(j));
    case JSON_TRUE: return msgpack_pack_true(pk);
    case JSON_FALSE: return msgpack_pack_false(pk);
    case JSON_NULL: return msgpack_pack_nil(pk);
    }
    return -1;
}

enum how { OURS, OLD_BRIDGE, JANSSON_ONLY };

static void convert(const struct set *s, int i, enum how how, ab_buf_t *out)
{
    const size_t flags = JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL;
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_reset(out);
    if (how == OURS) {
        if (ab_json_to_msgpack(s->text[i], s->len[i], 64, 1u << 20, AB_INVALID_EVENT, out, &err)) {
            fprintf(stderr, "json_bench: %s\n", err.message);
            exit(1);
        }
        return;
    }
    json_error_t je;
    json_t *j = json_loadb(s->text[i], s->len[i], flags, &je);
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, ab_buf_msgpack_write);
    if (!j || (how == OLD_BRIDGE && pack_tree(&pk, j) != 0)) {
        fprintf(stderr, "json_bench: %s\n", j ? "out of memory" : je.text);
        exit(1);
    }
    json_decref(j);
}

static void row(const char *name, const struct set *s, enum how how, double seconds)
{
    ab_buf_t out = AB_BUF_INIT;
    long n = 0;
    double t0 = cpu_now(), t = t0;
    while (t - t0 < seconds) {
        for (int i = 0; i < NTEXTS; i++)
            convert(s, i, how, &out);
        n += NTEXTS;
        t = cpu_now();
    }
    double per = (t - t0) / (double)n, avg = (double)s->bytes / NTEXTS;
    printf("%-44s %6.0f B  %8.0f texts/s  %7.0f ns/text  %7.1f MB/s\n", name, avg, 1.0 / per,
           per * 1e9, avg / per / 1e6);
    ab_buf_free(&out);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    static const struct {
        const char *name;
        size_t target;
    } sets[] = {{"event mix", 256}, {"event mix", 2048}, {"numbers", 0}};
    for (size_t k = 0; k < sizeof(sets) / sizeof(sets[0]); k++) {
        struct set s;
        char name[64];
        make_set(&s, sets[k].target);
        snprintf(name, sizeof(name), "%s: ab_json_to_msgpack", sets[k].name);
        row(name, &s, OURS, seconds);
        snprintf(name, sizeof(name), "%s: jansson + msgpack-c (old bridge)", sets[k].name);
        row(name, &s, OLD_BRIDGE, seconds);
        snprintf(name, sizeof(name), "%s: jansson parse only (peer)", sets[k].name);
        row(name, &s, JANSSON_ONLY, seconds);
        for (int i = 0; i < NTEXTS; i++)
            free(s.text[i]);
    }
    return 0;
}

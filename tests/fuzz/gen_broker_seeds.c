/*
 * gen_broker_seeds.c - writes the seed corpus of tests/fuzz/fuzz_broker.c
 * (tests/fuzz/corpus/broker/seed-*), so the seeds are reproducible:
 *
 *   gen_broker_seeds DIR           write every seed into DIR
 *   gen_broker_seeds --check DIR   exit 1 unless DIR holds every seed as generated
 *
 * Each seed is a list of messages (and barriers) in the framing documented
 * at the top of fuzz_broker.c; headers and envelopes are written here as JSON and turned
 * into msgpack by the JSON bridge. Thread and run ids contain "$$$$$$$$",
 * which the harness replaces by the input's number: a seed works on a fresh
 * run each time it runs.
 *
 * Invariants:
 *  1. Output is a pure function of this file: same bytes on every run.
 *  2. Every seed starts with a control byte and is a valid framing.
 */
#include "agentbus/codec.h"
#include "agentbus/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSG     "\x01" /* starts a new message; the strings up to the next one are its frames */
#define BARRIER "\x02" /* the harness waits for its probes here (nframes 0) */
#define PACK    "\x03" /* a frame starting so packs the JSON envelopes after it, split by SEP */
#define SEP     "\x1e"

#define T  "t-$$$$$$$$"
#define R  "r-$$$$$$$$"
#define R2 "q-$$$$$$$$"

#define H(op, cid, rest) "{\"op\":\"" op "\",\"v\":1,\"cid\":" #cid rest "}"
#define ENVR(run, seq, epoch, body)                                                                \
    "{\"v\":1,\"thread\":\"" T "\",\"run\":\"" run "\",\"seq\":" #seq ",\"epoch\":" #epoch         \
    ",\"ts\":1700000000000,\"event\":" body "}"
#define ENV(seq, epoch, body) ENVR(R, seq, epoch, body)

#define RUN_STARTED                                                                                \
    "{\"type\":\"RUN_STARTED\",\"threadId\":\"" T "\",\"runId\":\"" R                              \
    "\",\"protocolVersion\":\"1.0\"}"
#define RUN_STARTED2                                                                               \
    "{\"type\":\"RUN_STARTED\",\"threadId\":\"" T "\",\"runId\":\"" R2                             \
    "\",\"protocolVersion\":\"1.0\"}"
#define RUN_FINISHED "{\"type\":\"RUN_FINISHED\",\"threadId\":\"" T "\",\"runId\":\"" R "\"}"
#define RUN_ERROR    "{\"type\":\"RUN_ERROR\",\"message\":\"boom\"}"
#define MSG_START    "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m1\",\"role\":\"assistant\"}"
#define MSG_CONTENT  "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"hi\"}"
#define MSG_CONTENT2 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"ho\"}"
#define MSG_END      "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m1\"}"
#define TOOL_START                                                                                 \
    "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c1\",\"toolCallName\":\"search\"}"
#define TOOL_ARGS "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"c1\",\"delta\":\"{}\"}"
#define TOOL_END  "{\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"c1\"}"

#define CLAIM(cid)      MSG, H("claim", cid, ",\"thread\":\"" T "\",\"run\":\"" R "\"")
#define PUBLISH(cid, n) MSG, H("publish", cid, ",\"count\":" #n)
#define PACKED(cid, n)  MSG, H("publish", cid, ",\"count\":" #n ",\"packed\":true")
#define FULL_RUN                                                                                   \
    PUBLISH(2, 5), ENV(1, 1, RUN_STARTED), ENV(2, 1, MSG_START), ENV(3, 1, MSG_CONTENT),           \
        ENV(4, 1, MSG_END), ENV(5, 1, RUN_FINISHED)

typedef struct seed {
    const char *name;
    unsigned char control;
    const char *const *parts; /* MSG, frame, frame, MSG, ... NULL */
} seed_t;

static const char *const s_hello[] = {
    MSG, "{\"op\":\"hello\",\"cid\":1,\"versions\":[1],\"client\":\"seed\"}", NULL};
static const char *const s_ping[] = {MSG, H("ping", 1, ""), NULL};
static const char *const s_claim[] = {CLAIM(1), NULL};
static const char *const s_run[] = {CLAIM(1), FULL_RUN, NULL};
static const char *const s_unclaimed[] = {FULL_RUN, NULL};
static const char *const s_gap[] = {
    CLAIM(1),           PUBLISH(2, 2), ENV(1, 1, RUN_STARTED), ENV(2, 1, MSG_START), PUBLISH(3, 1),
    ENV(4, 1, MSG_END), NULL};
static const char *const s_duplicate[] = {CLAIM(1),
                                          PUBLISH(2, 3),
                                          ENV(1, 1, RUN_STARTED),
                                          ENV(2, 1, MSG_START),
                                          ENV(3, 1, MSG_CONTENT),
                                          PUBLISH(3, 2),
                                          ENV(2, 1, MSG_START),
                                          ENV(3, 1, MSG_CONTENT2),
                                          NULL};
static const char *const s_stale[] = {CLAIM(1),      CLAIM(2),
                                      PUBLISH(3, 1), ENV(1, 1, RUN_STARTED),
                                      PUBLISH(4, 1), ENV(1, 2, RUN_STARTED),
                                      NULL};
static const char *const s_tools[] = {CLAIM(1),
                                      PUBLISH(2, 6),
                                      ENV(1, 1, RUN_STARTED),
                                      ENV(2, 1, TOOL_START),
                                      ENV(3, 1, TOOL_ARGS),
                                      ENV(4, 1, TOOL_END),
                                      ENV(5, 1, RUN_FINISHED),
                                      ENV(6, 1, RUN_ERROR),
                                      NULL};
static const char *const s_lifecycle[] = {PUBLISH(1, 3), ENV(1, 1, MSG_CONTENT),
                                          ENV(1, 1, RUN_STARTED), ENV(2, 1, MSG_END), NULL};
static const char *const s_two_runs[] = {PUBLISH(1, 2), ENV(1, 1, RUN_STARTED),
                                         ENVR(R2, 1, 1, RUN_STARTED2), NULL};
static const char *const s_replay_run[] = {
    FULL_RUN,
    BARRIER,
    MSG,
    H("replay", 10,
      ",\"scope\":\"run\",\"window\":1,\"chunk_events\":2,\"thread\":\"" T "\",\"run\":\"" R
      "\",\"after_seq\":0"),
    MSG,
    H("credit", 10, ",\"chunks\":4"),
    NULL};
static const char *const s_replay_thread[] = {FULL_RUN, BARRIER, MSG,
                                              H("replay", 11,
                                                ",\"scope\":\"thread\",\"window\":2,\"thread\":\"" T
                                                "\",\"cursors\":{\"" R "\":1}"),
                                              NULL};
static const char *const s_replay_thread_pos[] = {
    FULL_RUN, BARRIER, MSG,
    H("replay", 13,
      ",\"scope\":\"thread\",\"window\":2,\"thread\":\"" T "\",\"cursors\":{},\"after_pos\":2"),
    NULL};
static const char *const s_replay_all[] = {
    MSG, H("replay", 12, ",\"scope\":\"all\",\"window\":1,\"chunk_events\":1,\"after_pos\":0"), MSG,
    H("cancel", 12, ""), NULL};
static const char *const s_heads[] = {
    FULL_RUN, BARRIER,
    MSG,      H("heads", 7, ",\"runs\":[{\"thread\":\"" T "\",\"run\":\"" R "\"}]"),
    MSG,      H("heads", 8, ",\"thread\":\"" T "\""),
    NULL};
static const char *const s_snapshot[] = {FULL_RUN, BARRIER, MSG,
                                         H("snapshot", 9, ",\"thread\":\"" T "\""), NULL};
static const char *const s_threads[] = {
    FULL_RUN, BARRIER,
    MSG,      H("threads", 14, ""),
    MSG,      H("threads", 15, ",\"prefix\":\"t-\",\"after\":\"\",\"limit\":1"),
    MSG,      H("threads", 16, ",\"after\":\"" T "\",\"limit\":1000"),
    MSG,      H("threads", 17, ",\"limit\":0"),             /* refused: limit */
    MSG,      H("threads", 18, ",\"prefix\":\"a\\u0001\""), /* refused: prefix */
    NULL};
static const char *const s_packed[] = {CLAIM(1),
                                       PACKED(2, 3),
                                       PACK ENV(1, 1, RUN_STARTED) SEP ENV(2, 1, MSG_START)
                                           SEP ENV(3, 1, MSG_CONTENT),
                                       PACKED(3, 2),
                                       PACK ENV(4, 1, MSG_END) SEP ENV(5, 1, RUN_FINISHED),
                                       PACKED(4, 2),
                                       PACK ENV(6, 1, MSG_END), /* one envelope short */
                                       PACKED(5, 1),
                                       PACK ENV(6, 1, MSG_END),
                                       "extra", /* a frame too many */
                                       NULL};
static const char *const s_bad[] = {
    PUBLISH(1, 2), ENV(1, 1, RUN_STARTED), /* one frame short */
    MSG,           H("ping", 2, ""),
    "extra",                                              /* a frame too many */
    MSG,           H("frobnicate", 3, ""),                /* unknown op */
    MSG,           "{\"op\":\"ping\",\"v\":9,\"cid\":4}", /* unsupported version */
    MSG,           "\xc1",                                /* not msgpack */
    MSG,           H("credit", 99, ",\"chunks\":1"),      /* no such replay */
    NULL};

static const seed_t SEEDS[] = {
    {"hello", 0x03, s_hello},
    {"ping", 0x00, s_ping},
    {"claim", 0x00, s_claim},
    {"run", 0x00, s_run},
    {"unclaimed", 0x00, s_unclaimed},
    {"gap", 0x00, s_gap},
    {"duplicate", 0x00, s_duplicate},
    {"stale-epoch", 0x00, s_stale},
    {"tools-late-error", 0x00, s_tools},
    {"lifecycle", 0x00, s_lifecycle},
    {"two-runs", 0x00, s_two_runs},
    {"replay-run", 0x00, s_replay_run},
    {"replay-thread", 0x01, s_replay_thread},
    {"replay-thread-pos", 0x01, s_replay_thread_pos},
    {"replay-all", 0x00, s_replay_all},
    {"heads", 0x00, s_heads},
    {"snapshot", 0x00, s_snapshot},
    {"bad-frames", 0x01, s_bad},
    {"packed", 0x00, s_packed},
    {"threads", 0x00, s_threads},
};

/* The packed publish frame of the SEP-separated JSON envelopes in @p list. */
static int pack_frame(ab_buf_t *f, const char *list)
{
    ab_error_t err = AB_ERROR_INIT;
    for (const char *p = list; *p;) {
        const char *e = strstr(p, SEP);
        size_t n = e ? (size_t)(e - p) : strlen(p);
        ab_buf_t one = AB_BUF_INIT;
        int ok = ab_json_to_msgpack(p, n, 64, 1u << 20, AB_INVALID_EVENT, &one, &err) == AB_OK &&
                 ab_packed_append(f, one.data, one.len, &err) == AB_OK;
        ab_buf_free(&one);
        if (!ok) {
            fprintf(stderr, "gen_broker_seeds: %.*s: %s\n", (int)n, p, err.message);
            return -1;
        }
        p += n + (e ? 1 : 0);
    }
    return 0;
}

static int put_frame(ab_buf_t *out, const char *part)
{
    ab_buf_t f = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    int rc = -1;
    if (part[0] == PACK[0]) {
        if (pack_frame(&f, part + 1) != 0)
            goto out;
    } else if (part[0] == '{') {
        if (ab_json_to_msgpack(part, strlen(part), 64, 1u << 20, AB_INVALID_EVENT, &f, &err) !=
            AB_OK) {
            fprintf(stderr, "gen_broker_seeds: %s: %s\n", part, err.message);
            goto out;
        }
    } else if (ab_buf_append(&f, part, strlen(part)) != AB_OK) {
        goto out;
    }
    uint8_t len[2] = {(uint8_t)(f.len & 0xff), (uint8_t)(f.len >> 8)};
    if (f.len <= 0xffff && ab_buf_append(out, len, 2) == AB_OK &&
        (f.len == 0 || ab_buf_append(out, f.data, f.len) == AB_OK))
        rc = 0;
out:
    ab_buf_free(&f);
    return rc;
}

/* Frame the seed's messages into @p out. @return 0 or -1. */
static int build(const seed_t *s, ab_buf_t *out)
{
    if (ab_buf_append(out, &s->control, 1) != AB_OK)
        return -1;
    for (size_t i = 0; s->parts[i] != NULL;) {
        uint8_t n = 0;
        if (strcmp(s->parts[i], BARRIER) == 0) {
            if (ab_buf_append(out, &n, 1) != AB_OK)
                return -1;
            i++;
            continue;
        }
        if (strcmp(s->parts[i], MSG) != 0)
            return -1;
        size_t j = i + 1;
        while (s->parts[j] != NULL && strcmp(s->parts[j], MSG) != 0 &&
               strcmp(s->parts[j], BARRIER) != 0)
            j++, n++;
        if (ab_buf_append(out, &n, 1) != AB_OK)
            return -1;
        for (size_t k = i + 1; k < j; k++)
            if (put_frame(out, s->parts[k]) != 0)
                return -1;
        i = j;
    }
    return 0;
}

/* Write or compare one file. @return 0 or -1. */
static int emit(const char *path, const ab_buf_t *b, int check)
{
    FILE *f = fopen(path, check ? "rb" : "wb");
    if (f == NULL) {
        fprintf(stderr, "gen_broker_seeds: cannot open %s\n", path);
        return -1;
    }
    int rc = 0;
    if (check) {
        uint8_t *got = malloc(b->len + 1);
        size_t n = got != NULL ? fread(got, 1, b->len + 1, f) : 0;
        rc = got != NULL && n == b->len && memcmp(got, b->data, b->len) == 0 ? 0 : -1;
        if (rc != 0)
            fprintf(stderr, "gen_broker_seeds: %s differs from the generated seed\n", path);
        free(got);
    } else if (fwrite(b->data, 1, b->len, f) != b->len) {
        rc = -1;
    }
    if (fclose(f) != 0)
        rc = -1;
    return rc;
}

int main(int argc, char **argv)
{
    int check = argc == 3 && strcmp(argv[1], "--check") == 0;
    if (argc != 2 && !check) {
        fprintf(stderr, "usage: gen_broker_seeds [--check] DIR\n");
        return 2;
    }
    const char *dir = argv[argc - 1];
    int failed = 0;
    for (size_t i = 0; i < sizeof(SEEDS) / sizeof(SEEDS[0]); i++) {
        ab_buf_t b = AB_BUF_INIT;
        char path[4096];
        snprintf(path, sizeof(path), "%s/seed-%s", dir, SEEDS[i].name);
        if (build(&SEEDS[i], &b) != 0 || emit(path, &b, check) != 0) {
            fprintf(stderr, "gen_broker_seeds: seed %s failed\n", SEEDS[i].name);
            failed = 1;
        }
        ab_buf_free(&b);
    }
    if (!failed)
        printf("gen_broker_seeds: %zu seeds %s\n", sizeof(SEEDS) / sizeof(SEEDS[0]),
               check ? "match" : "written");
    return failed;
}

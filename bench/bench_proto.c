/*
 * bench_proto.c - `agentbus bench proto`: measure what the protocol library
 * spends per event.
 *
 * It measures, on one core, the protocol library's work
 * on the broker's ingest path for each event: strict msgpack parse of the
 * envelope, envelope checks (ids, seq, epoch) and AG-UI 1.0 validation of the
 * body. Events are a realistic mix (text deltas, tool-call argument deltas,
 * state patches, custom events) padded to the target envelope size. A parse-
 * only pass gives the ceiling of the reader itself. Results: events/s and
 * MB/s; docs/PERFORMANCE.md records them with the machine and command.
 */
#include "agentbus/agui.h"
#include "agentbus/codec.h"
#include "agentbus/json.h"
#include "agentbus/value.h"
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NEVENTS 1024

struct corpus {
    ab_buf_t frames[NEVENTS];
    size_t bytes;
};

/* CPU time of this thread: "events per second of one core", unaffected by
 * other processes competing for the machine's cores. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* JSON body of the i-th event with a padding string of pad bytes. */
static void body_json(char *out, size_t size, int i, size_t pad)
{
    char *p = malloc(pad + 1);
    memset(p, 'a' + i % 26, pad);
    p[pad] = '\0';
    switch (i % 4) {
    case 0:
        snprintf(out, size,
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"msg-%d\","
                 "\"delta\":\"%s\"}",
                 i, p);
        break;
    case 1:
        snprintf(out, size,
                 "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"call-%d\","
                 "\"delta\":\"{\\\"q\\\":\\\"%s\\\"}\"}",
                 i, p);
        break;
    case 2:
        snprintf(out, size,
                 "{\"type\":\"STATE_DELTA\",\"delta\":[{\"op\":\"replace\","
                 "\"path\":\"/tasks/%d/note\",\"value\":\"%s\"}]}",
                 i, p);
        break;
    default:
        snprintf(out, size,
                 "{\"type\":\"CUSTOM\",\"name\":\"acme:progress\",\"value\":"
                 "{\"step\":%d,\"done\":false,\"label\":\"%s\"}}",
                 i, p);
    }
    free(p);
}

/* Encode the i-th envelope of about `target` bytes into b. */
static int make_event(ab_buf_t *b, int i, size_t target, ab_doc_t *doc)
{
    char json[8192];
    size_t pad = 1;
    for (int attempt = 0; attempt < 2; attempt++) {
        body_json(json, sizeof(json), i, pad);
        ab_buf_t mp = AB_BUF_INIT;
        ab_error_t err = AB_ERROR_INIT;
        const ab_val_t *body;
        if (ab_json_to_msgpack(json, strlen(json), 64, 1u << 20, AB_INVALID_EVENT, &mp, &err) ||
            ab_doc_parse(doc, mp.data, mp.len, 1u << 20, 64, AB_INVALID_EVENT, &body, &err))
            return -1;
        char run[32];
        snprintf(run, sizeof(run), "run-%03d", i % 100);
        ab_event_t ev = {.v = 1,
                         .thread = {"thread-bench", 12},
                         .run = {run, strlen(run)},
                         .seq = (uint64_t)i + 1,
                         .epoch = 1,
                         .ts = 1764450000000 + i,
                         .body = body};
        ab_buf_reset(b);
        ab_status_t rc = ab_event_encode(&ev, b, &err);
        ab_buf_free(&mp);
        if (rc != AB_OK)
            return -1;
        if (b->len >= target)
            break;
        pad += target - b->len;
    }
    return 0;
}

static int build_corpus(struct corpus *c, size_t target)
{
    ab_doc_t *doc;
    if (ab_doc_new(&doc) != AB_OK)
        return -1;
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < NEVENTS; i++) {
        if (make_event(&c->frames[i], i, target, doc) != 0) {
            ab_doc_destroy(&doc);
            return -1;
        }
        c->bytes += c->frames[i].len;
    }
    ab_doc_destroy(&doc);
    return 0;
}

static void free_corpus(struct corpus *c)
{
    for (int i = 0; i < NEVENTS; i++)
        ab_buf_free(&c->frames[i]);
}

/* One pass over the corpus; returns events that failed (must be 0). */
static long pass(const struct corpus *c, ab_doc_t *doc, const ab_limits_t *lim, bool validate)
{
    long bad = 0;
    for (int i = 0; i < NEVENTS; i++) {
        ab_error_t err = AB_ERROR_INIT;
        const ab_buf_t *f = &c->frames[i];
        if (!validate) {
            const ab_val_t *root;
            bad += ab_doc_parse(doc, f->data, f->len, lim->max_event_bytes, lim->max_depth,
                                AB_INVALID_ENVELOPE, &root, &err) != AB_OK;
            continue;
        }
        ab_event_t ev;
        ab_agui_info_t info;
        bad += ab_event_decode(doc, f->data, f->len, lim, &ev, &err) != AB_OK ||
               ab_agui_validate(ev.body, AB_AGUI_STRICT, NULL, NULL, &info, &err) != AB_OK;
    }
    return bad;
}

static int measure(const char *label, size_t target, double seconds, bool validate)
{
    struct corpus c;
    ab_doc_t *doc;
    ab_limits_t lim = ab_limits_default();
    if (build_corpus(&c, target) != 0 || ab_doc_new(&doc) != AB_OK) {
        fprintf(stderr, "agentbus bench: cannot build the event corpus\n");
        return AB_BENCH_FAIL;
    }
    long events = 0, bad = 0;
    bad += pass(&c, doc, &lim, validate); /* warm-up */
    double t0 = now_s(), t1;
    do {
        for (int k = 0; k < 16; k++)
            bad += pass(&c, doc, &lim, validate);
        events += 16L * NEVENTS;
        t1 = now_s();
    } while (t1 - t0 < seconds);
    double eps = (double)events / (t1 - t0);
    double mbps = eps * ((double)c.bytes / NEVENTS) / 1e6;
    bench_emit("proto", label, "bytes", (double)(c.bytes / NEVENTS), "events_per_s", eps,
               "mb_per_s", mbps, NULL);
    printf("%-28s %6zu B  %12.0f events/s  %8.1f MB/s  %7.1f ns/event\n", label, c.bytes / NEVENTS,
           eps, mbps, 1e9 / eps);
    ab_doc_destroy(&doc);
    free_corpus(&c);
    if (bad) {
        fprintf(stderr, "agentbus bench: %ld events failed validation\n", bad);
        return AB_BENCH_FAIL;
    }
    return AB_BENCH_OK;
}

int bench_proto(double seconds, size_t only_size)
{
    printf("agentbus bench proto: one core (thread CPU time), %d distinct events, %.1f s per row\n",
           NEVENTS, seconds);
    size_t sizes[] = {256, 2048};
    size_t nsizes = 2;
    if (only_size) {
        sizes[0] = only_size;
        nsizes = 1;
    }
    int rc = AB_BENCH_OK;
    for (size_t i = 0; i < nsizes; i++) {
        rc |= measure("parse only (ceiling)", sizes[i], seconds, false);
        rc |= measure("decode + validate", sizes[i], seconds, true);
    }
    return rc;
}

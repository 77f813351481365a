/*
 * bench_reducer.c - `agentbus bench reducer` and `agentbus bench snapshot`
 * (docs/PERFORMANCE.md, "Reducer and SNAPSHOT").
 *
 * `reducer` folds a realistic stream on one core (thread CPU time): runs of
 * streamed text deltas, tool calls with argument deltas, state snapshots and
 * deltas and agentkit CUSTOM events, cycling over a thread of about 100,000
 * events. Rows: parse only (the msgpack reader, the floor), parse + reducer
 * apply (the projection) and parse + snapshot builder feed (what SNAPSHOT
 * does per stored event, plus keeping the events of active runs).
 *
 * `snapshot` starts a broker (demo/spawn.h, process durability), publishes a
 * thread of about 100,000 events in one of several shapes and times the
 * SNAPSHOT answer from the client (p50 and max of 10).
 */
#include "ab_common.h"
#include "agentbus/codec.h"
#include "agentbus/json.h"
#include "agentbus/reducer.h"
#include "agentbus/snapshot.h"
#include "agentbus/value.h"
#include "bench.h"
#include "targets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agentbus/client.h"
#include "spawn.h"

#define CYCLE     98 /* events of one message/tool/state/custom cycle */
#define BENCH_TID "thread-bench"

/*
 * Body of event @p k (0-based) of run @p run, whose length is @p len events
 * (a multiple of CYCLE plus 2); the last one is RUN_FINISHED unless @p active.
 * Ids are unique per run and cycle.
 */
static void stream_body(char *out, size_t size, const char *thread, int run, uint64_t k,
                        uint64_t len, bool active)
{
    if (k == 0) {
        snprintf(out, size,
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"run-%d\","
                 "\"protocolVersion\":\"1.0\"}",
                 thread, run);
        return;
    }
    if (k == len - 1 && !active) {
        snprintf(out, size, "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"run-%d\"}",
                 thread, run);
        return;
    }
    uint64_t c = (k - 1) / CYCLE, j = (k - 1) % CYCLE;
    char id[64];
    snprintf(id, sizeof(id), "%d-%llu", run, (unsigned long long)c);
    if (j == 0)
        snprintf(
            out, size,
            "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m-%s-a\",\"role\":\"assistant\"}",
            id);
    else if (j <= 40)
        snprintf(out, size,
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-%s-a\",\"delta\":"
                 "\"token %llu of the answer \"}",
                 id, (unsigned long long)j);
    else if (j == 41)
        snprintf(out, size, "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m-%s-a\"}", id);
    else if (j == 42)
        snprintf(out, size,
                 "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"tc-%s\",\"toolCallName\":"
                 "\"search\",\"parentMessageId\":\"m-%s-a\"}",
                 id, id);
    else if (j <= 62)
        snprintf(out, size,
                 "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"tc-%s\",\"delta\":\"%s\"}", id,
                 j == 43   ? "{\\\"query\\\": \\\""
                 : j == 62 ? "\\\"}"
                           : "word ");
    else if (j == 63)
        snprintf(out, size, "{\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"tc-%s\"}", id);
    else if (j == 64)
        snprintf(out, size,
                 "{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":{\"step\":0,\"notes\":[],"
                 "\"cycle\":\"%s\"}}",
                 id);
    else if (j <= 78)
        snprintf(out, size,
                 "{\"type\":\"STATE_DELTA\",\"delta\":[{\"op\":\"replace\",\"path\":\"/step\","
                 "\"value\":%llu},{\"op\":\"add\",\"path\":\"/notes/-\",\"value\":\"note %llu\"}]}",
                 (unsigned long long)j, (unsigned long long)j);
    else if (j <= 86)
        snprintf(
            out, size,
            "{\"type\":\"CUSTOM\",\"name\":\"agentkit.task\",\"value\":{\"id\":\"task-%s-%llu\","
            "\"title\":\"step %llu\",\"status\":\"%s\"}}",
            id, (unsigned long long)(j % 3), (unsigned long long)j,
            j < 84 ? "in_progress" : "done");
    else if (j == 87)
        snprintf(
            out, size,
            "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m-%s-b\",\"role\":\"assistant\"}",
            id);
    else if (j <= 96)
        snprintf(out, size,
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-%s-b\",\"delta\":"
                 "\"summary part %llu \"}",
                 id, (unsigned long long)j);
    else
        snprintf(out, size, "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m-%s-b\"}", id);
}

/* ---- reducer ------------------------------------------------------------- */

#define RED_RUNS    102
#define RED_CYCLES  10 /* run length 10 * CYCLE + 2 = 982; 102 runs = 100,164 events */
#define RED_RUN_LEN (RED_CYCLES * CYCLE + 2)

typedef struct stream {
    ab_buf_t mp;   /* every body, msgpack, back to back */
    size_t *off;   /* n + 1 offsets into mp */
    uint16_t *run; /* run index of each event */
    uint32_t *seq; /* seq of each event in its run */
    char (*runs)[16];
    size_t n;
} stream_t;

static void stream_free(stream_t *s)
{
    ab_buf_free(&s->mp);
    free(s->off);
    free(s->run);
    free(s->seq);
    free(s->runs);
}

static int stream_alloc(stream_t *s, size_t n, int runs)
{
    memset(s, 0, sizeof(*s));
    s->off = calloc(n + 1, sizeof(*s->off));
    s->run = calloc(n, sizeof(*s->run));
    s->seq = calloc(n, sizeof(*s->seq));
    s->runs = calloc((size_t)runs, sizeof(*s->runs));
    if (!s->off || !s->run || !s->seq || !s->runs)
        return -1;
    for (int r = 0; r < runs; r++)
        snprintf(s->runs[r], sizeof(s->runs[r]), "run-%d", r);
    return 0;
}

/* Append event @p json as seq @p seq of run @p r. */
static int stream_add(stream_t *s, const char *json, int r, uint64_t seq)
{
    ab_error_t err = AB_ERROR_INIT;
    if (ab_json_to_msgpack(json, strlen(json), 64, 1u << 20, AB_INVALID_EVENT, &s->mp, &err) !=
        AB_OK) {
        fprintf(stderr, "agentbus bench: %s: %s\n", json, err.message);
        return -1;
    }
    s->run[s->n] = (uint16_t)r;
    s->seq[s->n] = (uint32_t)seq;
    s->off[++s->n] = s->mp.len;
    return 0;
}

static int stream_build(stream_t *s)
{
    if (stream_alloc(s, (size_t)RED_RUNS * RED_RUN_LEN, RED_RUNS) != 0)
        return -1;
    char json[512];
    for (int r = 0; r < RED_RUNS; r++)
        for (uint64_t k = 0; k < RED_RUN_LEN; k++) {
            stream_body(json, sizeof(json), BENCH_TID, r, k, RED_RUN_LEN, r == RED_RUNS - 1);
            if (stream_add(s, json, r, k + 1) != 0)
                return -1;
        }
    return 0;
}

/*
 * The many-runs stream: MANY_RUNS runs of one thread, all active, each starting a message
 * of its own, then MANY_DELTAS text deltas each, the runs taking turns event by event (as
 * in `bench scale`'s 100,000-run row, whose four threads hold 25,000 active runs each).
 */
#define MANY_RUNS   25000
#define MANY_DELTAS 6

static int stream_build_many(stream_t *s, bool end)
{
    int len = 2 + MANY_DELTAS + (end ? 1 : 0);
    if (stream_alloc(s, (size_t)MANY_RUNS * (size_t)len, MANY_RUNS) != 0)
        return -1;
    char json[512];
    for (int k = 0; k < len; k++)
        for (int r = 0; r < MANY_RUNS; r++) {
            if (k == 0)
                snprintf(json, sizeof json,
                         "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"run-%d\","
                         "\"protocolVersion\":\"1.0\"}",
                         BENCH_TID, r);
            else if (k == 1)
                snprintf(json, sizeof json,
                         "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m-%d\","
                         "\"role\":\"assistant\"}",
                         r);
            else if (k < 2 + MANY_DELTAS)
                snprintf(json, sizeof json,
                         "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-%d\","
                         "\"delta\":\"token %d \"}",
                         r, k);
            else
                snprintf(json, sizeof json,
                         "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"run-%d\"}",
                         BENCH_TID, r);
            if (stream_add(s, json, r, (uint64_t)k + 1) != 0)
                return -1;
        }
    return 0;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

enum { ROW_PARSE, ROW_REDUCER, ROW_BUILDER };

/* Parse every event of the stream, folding it into @p r or @p sb when not NULL; @return failed
 * events. */
static long feed_all(const stream_t *s, ab_doc_t *doc, ab_reducer_t *r, ab_snapshot_builder_t *sb)
{
    ab_error_t err = AB_ERROR_INIT;
    long bad = 0;
    for (size_t i = 0; i < s->n; i++) {
        const ab_val_t *body = NULL;
        ab_status_t st = ab_doc_parse(doc, s->mp.data + s->off[i], s->off[i + 1] - s->off[i],
                                      1u << 20, 64, AB_INVALID_EVENT, &body, &err);
        if (st == AB_OK && r != NULL)
            st = ab_reducer_apply(r, body, s->runs[s->run[i]], s->seq[i], &err);
        else if (st == AB_OK && sb != NULL)
            st = ab_snapshot_builder_feed(sb, s->runs[s->run[i]], s->seq[i], i + 1, body, &err);
        bad += st != AB_OK;
    }
    return bad;
}

/* One pass over the stream into a fresh reducer/builder; @return failed events. */
static long fold_pass(const stream_t *s, ab_doc_t *doc, int row)
{
    ab_reducer_t *r = NULL;
    ab_snapshot_builder_t *sb = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if ((row == ROW_REDUCER && ab_reducer_new(&r, BENCH_TID, &err) != AB_OK) ||
        (row == ROW_BUILDER && ab_snapshot_builder_new(&sb, BENCH_TID, &err) != AB_OK))
        return (long)s->n;
    long bad = feed_all(s, doc, r, sb);
    ab_reducer_destroy(&r);
    ab_snapshot_builder_destroy(&sb);
    return bad;
}

static int reducer_row(const stream_t *s, const char *label, int row, double seconds)
{
    ab_doc_t *doc = NULL;
    if (ab_doc_new(&doc) != AB_OK)
        return AB_BENCH_FAIL;
    long bad = fold_pass(s, doc, row); /* warm-up */
    uint64_t events = 0;
    double t0 = cpu_s(), t1;
    do {
        bad += fold_pass(s, doc, row);
        events += s->n;
        t1 = cpu_s();
    } while (t1 - t0 < seconds);
    double eps = (double)events / (t1 - t0);
    bench_emit("reducer", label, "events_per_s", eps, NULL);
    printf("%-34s %12.0f events/s  %7.1f ns/event\n", label, eps, 1e9 / eps);
    ab_doc_destroy(&doc);
    if (bad) {
        fprintf(stderr, "agentbus bench: %ld events failed to fold\n", bad);
        return AB_BENCH_FAIL;
    }
    return AB_BENCH_OK;
}

/*
 * The stored document @p mp loaded and checked again and again (ab_snapshot_load, as a
 * broker does for the first SNAPSHOT of a thread after a restart): documents/s on one core.
 */
static int load_row(const ab_buf_t *mp, const char *label, double seconds, ab_error_t *err)
{
    uint64_t docs = 0;
    double t0 = cpu_s(), t1;
    do {
        ab_snapshot_t *snap = NULL;
        ab_status_t st = ab_snapshot_load(mp->data, mp->len, &snap, err);
        ab_snapshot_destroy(&snap);
        if (st != AB_OK)
            return AB_BENCH_FAIL;
        docs++;
        t1 = cpu_s();
    } while (t1 - t0 < seconds);
    double dps = (double)docs / (t1 - t0);
    bench_emit("reducer", label, "documents_per_s", dps, "document_bytes", (double)mp->len, NULL);
    printf("%-34s %12.1f documents/s %7.2f ms each (%zu KiB, %.0f MB/s)\n", label, dps, 1e3 / dps,
           mp->len >> 10, dps * (double)mp->len / 1e6);
    return AB_BENCH_OK;
}

/*
 * The document of the whole stream's thread, written again and again into a new buffer each
 * time (as the snapshot worker does): documents/s on one core and the document's size; then
 * that document loaded (load_row, labelled @p load_label).
 */
static int encode_row(const stream_t *s, const char *label, const char *load_label, double seconds)
{
    ab_doc_t *doc = NULL;
    ab_snapshot_builder_t *sb = NULL;
    ab_error_t err = AB_ERROR_INIT;
    int rc = AB_BENCH_FAIL;
    if (ab_doc_new(&doc) != AB_OK || ab_snapshot_builder_new(&sb, BENCH_TID, &err) != AB_OK ||
        feed_all(s, doc, NULL, sb) != 0)
        goto done;
    uint64_t docs = 0;
    ab_buf_t out = AB_BUF_INIT;
    double t0 = cpu_s(), t1;
    do {
        ab_buf_free(&out);
        if (ab_snapshot_builder_msgpack(sb, UINT32_MAX, SIZE_MAX, &out, &err) != AB_OK)
            goto done;
        docs++;
        t1 = cpu_s();
    } while (t1 - t0 < seconds);
    double dps = (double)docs / (t1 - t0);
    bench_emit("reducer", label, "documents_per_s", dps, "document_bytes", (double)out.len, NULL);
    printf("%-34s %12.1f documents/s %7.2f ms each (%zu KiB, %.0f MB/s)\n", label, dps, 1e3 / dps,
           out.len >> 10, dps * (double)out.len / 1e6);
    label = load_label;
    rc = load_row(&out, load_label, seconds, &err);
done:
    if (rc != AB_BENCH_OK)
        fprintf(stderr, "agentbus bench: %s: %s\n", label, err.message);
    ab_buf_free(&out);
    ab_snapshot_builder_destroy(&sb);
    ab_doc_destroy(&doc);
    return rc;
}

int bench_reducer(double seconds)
{
    stream_t s;
    if (stream_build(&s) != 0) {
        stream_free(&s);
        fprintf(stderr, "agentbus bench: cannot build the stream\n");
        return AB_BENCH_FAIL;
    }
    printf("agentbus bench reducer: one core (thread CPU time), a thread of %zu events "
           "(%d runs of %d, the last active; %zu B msgpack bodies on average), "
           "fresh reducer per pass, %.1f s per row\n",
           s.n, RED_RUNS, RED_RUN_LEN, s.mp.len / s.n, seconds);
    int rc = reducer_row(&s, "parse only (floor)", ROW_PARSE, seconds);
    rc |= reducer_row(&s, "parse + reducer apply", ROW_REDUCER, seconds);
    rc |= reducer_row(&s, "parse + snapshot builder feed", ROW_BUILDER, seconds);
    rc |= encode_row(&s, "its document (builder msgpack)", "its document loaded", seconds);
    stream_free(&s);
    for (int end = 0; end <= 1; end++) {
        if (stream_build_many(&s, end) != 0) {
            stream_free(&s);
            fprintf(stderr, "agentbus bench: cannot build the many-runs stream\n");
            return AB_BENCH_FAIL;
        }
        printf("then %zu events of %d runs taking turns (a message each, %d deltas%s)\n", s.n,
               MANY_RUNS, MANY_DELTAS, end ? ", then RUN_FINISHED each" : ", all left active");
        rc |= reducer_row(
            &s, end ? "25k runs ending: reducer apply" : "25k runs: parse + reducer apply",
            ROW_REDUCER, seconds);
        rc |= reducer_row(&s,
                          end ? "25k runs ending: builder feed" : "25k runs: parse + builder feed",
                          ROW_BUILDER, seconds);
        rc |=
            encode_row(&s, end ? "25k runs ending: its document" : "25k runs: its document",
                       end ? "25k runs ending: loaded" : "25k runs: its document loaded", seconds);
        stream_free(&s);
    }
    return rc;
}

/* ---- snapshot ---------------------------------------------------------------- */

#define SNAP_TRIES 10
#define SNAP_BATCH 1000

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Publish @p runs runs of @p len events to BENCH_TID (the last active when @p last_active). */
static int publish_thread(ab_conn_t *c, ab_doc_t *doc, int runs, uint64_t len, bool last_active,
                          uint64_t *total)
{
    ab_buf_t *evs = calloc(SNAP_BATCH, sizeof(ab_buf_t));
    if (evs == NULL)
        return -1;
    int rc = 0;
    size_t n = 0;
    char json[512], run[32];
    for (int r = 0; r < runs && rc == 0; r++) {
        snprintf(run, sizeof(run), "run-%d", r);
        bool active = last_active && r == runs - 1;
        for (uint64_t k = 0; k < len && rc == 0; k++) {
            stream_body(json, sizeof(json), BENCH_TID, r, k, len, active);
            ab_error_t err = AB_ERROR_INIT;
            evs[n].len = 0;
            if (ab_envelope_json(&evs[n], 1, BENCH_TID, run, k + 1, 1, json, &err) != AB_OK) {
                fprintf(stderr, "agentbus bench: envelope: %s\n", err.message);
                rc = -1;
                break;
            }
            if (++n < SNAP_BATCH && !(r == runs - 1 && k == len - 1))
                continue;
            const ab_result_t *res = NULL;
            if (ab_conn_publish(c, evs, n, doc, &res, 60000, &err) != AB_OK) {
                fprintf(stderr, "agentbus bench: publish: %s\n", err.message);
                rc = -1;
                break;
            }
            for (size_t i = 0; i < n; i++)
                if (res[i].status != AB_RESULT_ACCEPTED) {
                    fprintf(stderr, "agentbus bench: event rejected: %s\n",
                            res[i].error ? res[i].error->message : "?");
                    rc = -1;
                    break;
                }
            *total += n;
            n = 0;
        }
    }
    for (size_t i = 0; i < SNAP_BATCH; i++)
        ab_buf_free(&evs[i]);
    free(evs);
    return rc;
}

/* One SNAPSHOT round trip of BENCH_TID in seconds (< 0 on failure); @p bytes: its JSON size. */
static double time_snapshot(ab_conn_t *c, ab_doc_t *doc, size_t *bytes)
{
    ab_msg_t q = {.op = AB_OP_SNAPSHOT, .u.snapshot = {.thread = {BENCH_TID, strlen(BENCH_TID)}}};
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    double t0 = ab__mono_s();
    if (ab_conn_request(c, &q, NULL, 0, doc, &m, 60000, &err) != AB_OK ||
        m.op != AB_OP_SNAPSHOT_REPLY) {
        fprintf(stderr, "agentbus bench: snapshot: %s\n", err.message);
        return -1;
    }
    double t = ab__mono_s() - t0;
    if (bytes != NULL) {
        ab_buf_t text = AB_BUF_INIT;
        if (ab_val_to_json(m.u.snapshot_reply.snapshot, &text) == AB_OK)
            *bytes = text.len;
        ab_buf_free(&text);
    }
    return t;
}

/* Restart the broker on its data directory and time the first SNAPSHOT (nothing cached). */
static double restarted_snapshot(spawn_broker_t *ch, const spawn_opts_t *so, ab_conn_t **c,
                                 ab_doc_t *doc)
{
    ab_conn_destroy(c);
    spawn_stop(ch, false);
    spawn_opts_t o = *so;
    char dir[sizeof(ch->dir)];
    memcpy(dir, ch->dir, sizeof(dir));
    o.dir = dir;
    bool own = ch->own_dir;
    ab_conn_opts_t co = {.client_name = "agentbus-bench", .timeout_ms = 60000};
    ab_error_t err = AB_ERROR_INIT;
    if (spawn_broker(ch, &o) != 0 || ab_conn_new(c, ch->cmd, &co, &err) != AB_OK)
        return -1;
    ch->own_dir = own;
    return time_snapshot(*c, doc, NULL);
}

/* One row of bench snapshot; @p target: judge its first answer after a restart against
 * issue 15's target (under 50 ms for a typical thread and for one with a 25k-event active
 * run). */
static int snapshot_row(const char *label, int runs, uint64_t len, bool last_active,
                        const char *every, bool target)
{
    spawn_broker_t ch;
    memset(&ch, 0, sizeof(ch));
    spawn_opts_t so = {.tmp_prefix = "agentbus-bench",
                       .quiet = true,
                       .extra = {"--durability", "process", "--snapshot-every", every}};
    if (spawn_broker(&ch, &so) != 0) {
        fprintf(stderr, "agentbus bench: the broker did not start\n");
        return AB_BENCH_FAIL;
    }
    ab_conn_opts_t o = {.client_name = "agentbus-bench", .timeout_ms = 60000};
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    int rc = AB_BENCH_FAIL;
    uint64_t total = 0;
    double times[SNAP_TRIES];
    size_t reply_bytes = 0;
    if (ab_conn_new(&c, ch.cmd, &o, &err) != AB_OK || ab_doc_new(&doc) != AB_OK) {
        fprintf(stderr, "agentbus bench: connect: %s\n", err.message);
        goto out;
    }
    double p0 = ab__mono_s();
    if (publish_thread(c, doc, runs, len, last_active, &total) != 0)
        goto out;
    double pub_s = ab__mono_s() - p0;
    for (int i = 0; i < SNAP_TRIES; i++)
        if ((times[i] = time_snapshot(c, doc, i == 0 ? &reply_bytes : NULL)) < 0)
            goto out;
    double restart = restarted_snapshot(&ch, &so, &c, doc);
    if (restart < 0)
        goto out;
    /* the first answer after the publish is the cold one; the others find the thread cached */
    qsort(times + 1, SNAP_TRIES - 1, sizeof(times[0]), cmp_double);
    bench_emit("snapshot", label, "events", (double)total, "first_ms", times[0] * 1e3, "p50_ms",
               times[1 + (SNAP_TRIES - 1) / 2] * 1e3, "max_ms", times[SNAP_TRIES - 1] * 1e3,
               "after_restart_ms", restart * 1e3, "kib", (double)(reply_bytes / 1024), NULL);
    printf("%-44s %7llu events  SNAPSHOT first %6.1f ms, then p50 %5.1f ms max %5.1f ms; "
           "after a restart %6.1f ms  (%zu KiB as JSON; published in %.1f s)\n",
           label, (unsigned long long)total, times[0] * 1e3, times[1 + (SNAP_TRIES - 1) / 2] * 1e3,
           times[SNAP_TRIES - 1] * 1e3, restart * 1e3, reply_bytes / 1024, pub_s);
    if (target)
        bench_target_add(bench_targets(), restart * 1e3, BENCH_UNDER, 50, "ms",
                         "first SNAPSHOT after a restart under 50 ms, %s", label);
    rc = AB_BENCH_OK;
out:
    ab_doc_destroy(&doc);
    ab_conn_destroy(&c);
    spawn_stop(&ch, true);
    return rc;
}

int bench_snapshot(void)
{
    printf("agentbus bench snapshot: one broker per row (process durability), SNAPSHOT answer "
           "time at the client, %d tries\n",
           SNAP_TRIES);
    /* the target's two cases: the typical thread, and the one with a 25k-event active run */
    int rc =
        snapshot_row("102 runs x 982, last active (every 10000)", 102, 982, true, "10000", true);
    rc |=
        snapshot_row("102 runs x 982, all finished (every 10000)", 102, 982, false, "10000", false);
    rc |= snapshot_row("4 runs x 25,482, last active (every 10000)", 4, 260 * CYCLE + 2, true,
                       "10000", true);
    rc |= snapshot_row("4 runs x 25,482, last active (every 0)", 4, 260 * CYCLE + 2, true, "0",
                       false);
    bench_targets_report(bench_targets(), "snapshot", stdout);
    return rc;
}

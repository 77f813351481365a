/*
 * seq_bench.c - what the broker's writer spends per event on keeping its runs and threads,
 * alone: the sequencer (its run cache, each run's lifecycle checker, the thread states),
 * then the snapshot counters and the tprev table as a committed group meets them, with
 * no store write, no socket and no other thread. For changes to how the writer keeps
 * runs and threads, whose effect on `agentbus bench scale` is below that benchmark's
 * noise (docs/PERFORMANCE.md "Which thread bounds a row").
 *
 * Usage: seq_bench RUNS EVENTS [scatter] [shared] [rounds N]
 *   RUNS runs, each started before the clock (RUN_STARTED, TEXT_MESSAGE_START), then
 *   EVENTS TEXT_MESSAGE_CONTENT events timed, in publishes of 256 and groups of 2,048:
 *   event i to run i mod RUNS, or with `scatter` to run 7919 i mod RUNS; each run in a
 *   thread of its own, or with `shared` in one of 4 threads. `rounds N` repeats the timed
 *   part N times (the events continue the runs) and prints each round.
 *
 * Invariants:
 *  1. The sequencer is the broker's (ab__seq_new with the broker's run cache size) over the
 *     SQLite plugin on an empty store in a fresh temporary directory; nothing is appended,
 *     so every run must stay cached: more RUNS than AB_BROKER_CACHED_RUNS is refused.
 *  2. Building and decoding the events (JSON, envelope, AG-UI validation) is outside the
 *     clock; the clock covers ab__seq_prefetch, ab__seq_stage, ab__seq_pending,
 *     ab__seq_commit, and per committed event ab__snapcount_slot and ab__tprev_note.
 *  3. Every timed event must be accepted: a rejection aborts the program (a number is
 *     printed only for a run of the rules the broker applies).
 */
#include "ab_common.h"
#include "agentbus/agui.h"
#include "agentbus/broker.h"
#include "agentbus/client.h"
#include "agentbus/codec.h"
#include "agentbus/value.h"
#include "loader.h"
#include "sequencer.h"
#include "snapcount.h"
#include "tprev.h"
#define TOOL_NAME "seq_bench"
#include "tool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PUB    256 /* events a publish */
#define GROUP  8   /* publishes a group commit (2,048 events) */
#define SHARED 4   /* threads with `shared` */

typedef struct pub {
    ab_doc_t *doc;
    ab_buf_t frames[PUB];
    ab_event_t ev[PUB];
    ab_agui_info_t info[PUB];
    ab_seq_item_t items[PUB];
} pub_t;

typedef struct bench {
    size_t runs;
    bool scatter, shared;
    uint64_t *seq; /* per run: its last seq */
    uint64_t pos;  /* the last position committed */
    uint64_t next; /* the next timed event's number */
    const ab_plugin_t *pl;
    ab_plugin_db_t *db;
    ab_seq_t *s;
    ab__snapcounts_t counts;
    ab__tprev_t tprev;
    pub_t pubs[GROUP];
} bench_t;

static void nomem(void)
{
    die("alloc", &(ab_error_t){.code = AB_NOMEM, .message = "out of memory"});
}

static void names(const bench_t *b, size_t r, char *thread, char *run)
{
    snprintf(run, 32, "r%zu", r);
    snprintf(thread, 32, "t%zu", b->shared ? r % SHARED : r);
}

/* Item @p i of @p p: the event of run @p r at its next seq, built and decoded (untimed). */
static void build(bench_t *b, pub_t *p, size_t i, size_t r)
{
    char thread[32], run[32], json[160];
    names(b, r, thread, run);
    uint64_t seq = ++b->seq[r];
    if (seq == 1)
        snprintf(json, sizeof json,
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                 "\"protocolVersion\":\"1.0\"}",
                 thread, run);
    else if (seq == 2)
        snprintf(json, sizeof json, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\"}");
    else
        snprintf(json, sizeof json,
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"x\"}");
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_reset(&p->frames[i]);
    if (ab_envelope_json(&p->frames[i], 1, thread, run, seq, 1, json, &err) != AB_OK)
        die("envelope", &err);
    if (ab_event_decode(p->doc, p->frames[i].data, p->frames[i].len, NULL, &p->ev[i], &err) !=
        AB_OK)
        die("decode", &err);
    if (ab_agui_validate(p->ev[i].body, AB_AGUI_STRICT, NULL, NULL, &p->info[i], &err) != AB_OK)
        die("validate", &err);
    p->items[i] = (ab_seq_item_t){
        .ev = &p->ev[i], .info = &p->info[i], .bytes = p->frames[i].data, .len = p->frames[i].len};
}

/* Fill the group's publishes with @p n events (at most PUB * GROUP); @p warm: every run in
 * turn from run @p first, else the timed order. Returns the publishes filled. */
static size_t fill(bench_t *b, size_t n, bool warm, size_t first)
{
    size_t np = 0;
    for (size_t k = 0; k < n; np++) {
        pub_t *p = &b->pubs[np];
        ab_doc_reset(p->doc);
        for (size_t i = 0; i < PUB && k < n; i++, k++) {
            size_t r = warm ? (first + k) % b->runs
                            : (size_t)((b->scatter ? b->next * 7919u : b->next) % b->runs);
            if (!warm)
                b->next++;
            build(b, p, i, r);
        }
    }
    return np;
}

/* One group commit of the publishes filled (timed by the caller): stage, commit, then the
 * counters and tprev for every committed event. */
static void group(bench_t *b, size_t np, size_t n)
{
    for (size_t j = 0; j < np; j++) {
        size_t cnt = j + 1 < np || n % PUB == 0 ? PUB : n % PUB;
        ab__seq_prefetch(b->s, b->pubs[j].items, cnt);
        ab__seq_stage(b->s, b->pubs[j].items, cnt);
        for (size_t i = 0; i < cnt; i++)
            if (b->pubs[j].items[i].status != AB_RESULT_ACCEPTED)
                die("stage", &b->pubs[j].items[i].err); /* invariant 3 */
    }
    size_t npend = 0;
    const ab_append_event_t *evs = ab__seq_pending(b->s, &npend);
    uint64_t first = b->pos + 1;
    for (size_t i = 0; i < npend; i++) {
        ab__snapcount_t *c = ab__snapcount_slot(&b->counts, evs[i].thread);
        if (c != NULL)
            c->count++, c->bytes += evs[i].len;
    }
    ab__seq_commit(b->s, first);
    uint64_t prev = 0;
    for (size_t i = 0; i < npend; i++)
        (void)ab__tprev_note(&b->tprev, evs[i].thread, first + i, &prev);
    b->pos += npend;
}

static void run_all(bench_t *b, size_t total, bool warm, double *secs)
{
    size_t done = 0;
    while (done < total) {
        size_t n = total - done < PUB * GROUP ? total - done : PUB * GROUP;
        size_t np = fill(b, n, warm, done);
        double t0 = ab__mono_s();
        group(b, np, n);
        *secs += ab__mono_s() - t0;
        done += n;
    }
}

static void setup(bench_t *b, const char *dir)
{
    empty_dir(dir);
    b->pl = ab__plugin_sqlite();
    ab_plugin_open_opts_t o = {.data_dir = dir, .durability = AB_DURABILITY_PROCESS};
    ab_error_t err = AB_ERROR_INIT;
    if (b->pl->open(&o, &b->db, &err) != AB_OK)
        die("open", &err);
    ab_seq_opts_t so = {.max_runs = AB_BROKER_CACHED_RUNS};
    if (ab__seq_new(&b->s, b->pl, b->db, &so, &err) != AB_OK)
        die("sequencer", &err);
    if (ab__tprev_init(&b->tprev, 0, 0) != AB_OK)
        nomem();
    b->seq = calloc(b->runs, sizeof *b->seq);
    if (b->seq == NULL)
        nomem();
    for (size_t j = 0; j < GROUP; j++)
        if (ab_doc_new(&b->pubs[j].doc) != AB_OK)
            nomem();
}

static void teardown(bench_t *b)
{
    ab__seq_destroy(&b->s);
    b->pl->close(b->db);
    ab__tprev_free(&b->tprev);
    ab__snapcount_free(&b->counts);
    free(b->seq);
    for (size_t j = 0; j < GROUP; j++) {
        ab_doc_destroy(&b->pubs[j].doc);
        for (size_t i = 0; i < PUB; i++)
            ab_buf_free(&b->pubs[j].frames[i]);
    }
}

int main(int argc, char **argv)
{
    static bench_t b;
    if (argc < 3) {
        fprintf(stderr, "usage: seq_bench RUNS EVENTS [scatter] [shared] [rounds N]\n");
        return 2;
    }
    b.runs = strtoul(argv[1], NULL, 10);
    size_t events = strtoul(argv[2], NULL, 10), rounds = 1;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "scatter") == 0)
            b.scatter = true;
        else if (strcmp(argv[i], "shared") == 0)
            b.shared = true;
        else if (strcmp(argv[i], "rounds") == 0 && i + 1 < argc)
            rounds = strtoul(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "seq_bench: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (b.runs == 0 || b.runs > AB_BROKER_CACHED_RUNS || events == 0 || rounds == 0) {
        fprintf(stderr, "seq_bench: RUNS 1..%u, EVENTS and rounds at least 1\n",
                (unsigned)AB_BROKER_CACHED_RUNS);
        return 2;
    }
    char dir[] = "/tmp/seq_bench-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("seq_bench: mkdtemp");
        return 1;
    }
    setup(&b, dir);
    double warm = 0;
    run_all(&b, 2 * b.runs, true, &warm); /* RUN_STARTED, then TEXT_MESSAGE_START, each run */
    for (size_t r = 0; r < rounds; r++) {
        double secs = 0;
        run_all(&b, events, false, &secs);
        printf("seq_bench: %zu runs (%s, %s), %zu events: %.0f ns an event, %.0f events/s "
               "(sequencer, snapshot counters, tprev; warm-up %.2f s)\n",
               b.runs, b.scatter ? "scattered" : "in turn",
               b.shared ? "4 threads" : "a thread each", events, secs * 1e9 / (double)events,
               (double)events / secs, warm);
    }
    teardown(&b);
    empty_dir(dir);
    rmdir(dir);
    return 0;
}

/*
 * bench_bus.c - `agentbus bench ingest|latency|replay|zmq|fanout|actions`:
 * benchmarks of the whole bus through the client library (docs/PERFORMANCE.md,
 * "Bus benchmarks"); the fanout rows live in bench_fanout.c, the action-call
 * rows in bench_actions.c.
 *
 *   ingest   4 producer threads, 100 runs, 256-byte envelopes (padded
 *            TEXT_MESSAGE_CONTENT), 256 events per publish, up to PIPE
 *            publishes in flight per producer; acknowledged events/s at
 *            --durability fsync and process, and the broker's peak RSS.
 *   latency  bench_latency.c: the floor, publish-to-ack and publish-to-
 *            delivery percentiles.
 *   replay   one run of 100k events, a thread of 10 runs x 10k events and
 *            everything the two loads stored (scope all), each replayed
 *            5 times in a row; the median's events/s delivered to the callback.
 *   zmq      ceilings: raw DEALER/ROUTER round trips/s and one-way 256-byte
 *            message throughput on loopback TCP.
 *   fanout   raw ZeroMQ PUB -> 1 / 4 SUB sockets (256 B), then the ingest
 *            load with 1 / 4 ab_sub_t subscribers (scope all, from now; 4
 *            also with skip_body, and with tiny high-water marks): events/s
 *            delivered per subscriber and events recovered by catch-up
 *            (replayed after a hole).
 *
 * Without --broker each row starts its own broker child (the binary itself,
 * a temporary data directory, loopback ports) and stops it with SIGTERM.
 *
 * Invariants:
 *  1. Every wait is bounded (child ready line, replies, child exit).
 *  2. A broker child started here is always stopped and its directory
 *     removed before the row returns.
 */
#include "ab_common.h"
#include "agentbus/client.h"
#include "agentbus/json.h"
#include "bench.h"
#include "bench_int.h"
#include "spawn.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

bool g_frame_per_event;
bool g_text;
const char *g_snapshot_every;

/* ---- broker child (demo/spawn.c) ------------------------------------------ */

void child_stop(child_t *ch)
{
    if (ch->pid > 0)
        spawn_stop(ch, true);
}

static int child_start(child_t *ch, const char *durability)
{
    spawn_opts_t so = {.tmp_prefix = "agentbus-bench",
                       .quiet = true,
                       .extra = {"--durability", durability,
                                 g_snapshot_every ? "--snapshot-every" : NULL, g_snapshot_every}};
    if (spawn_broker(ch, &so) != 0) {
        fprintf(stderr, "agentbus bench: the broker did not start\n");
        return -1;
    }
    return 0;
}

/* CPU seconds (user + system) a process has used, from /proc/PID/stat; 0 if unknown. */
double proc_cpu_s(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    double s = 0;
    return stat_cpu_s(path, NULL, 0, &s) ? s : 0;
}

/* This process's CPU seconds (all threads). */
double self_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Peak RSS of a process in KiB (VmHWM), or 0. */
static long peak_rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

/* ---- event building ---------------------------------------------------- */

static int bodies_init(bodies_t *b)
{
    char json[EVENT_SIZE + 128];
    int k = snprintf(json, sizeof(json),
                     "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"");
    memset(json + k, 'x', EVENT_SIZE - 110);
    snprintf(json + k + EVENT_SIZE - 110, sizeof(json) - (size_t)k - (EVENT_SIZE - 110), "\"}");
    ab_error_t err = AB_ERROR_INIT;
    memset(b, 0, sizeof(*b));
    if (ab_doc_new(&b->doc) != AB_OK ||
        ab_json_to_msgpack(json, strlen(json), 64, 1u << 20, AB_INVALID_EVENT, &b->content_mp,
                           &err) != AB_OK ||
        ab_doc_parse(b->doc, b->content_mp.data, b->content_mp.len, 1u << 20, 64, AB_INVALID_EVENT,
                     &b->content, &err) != AB_OK)
        return -1;
    return 0;
}

static void bodies_free(bodies_t *b)
{
    ab_doc_destroy(&b->doc);
    ab_buf_free(&b->content_mp);
}

/* --text: a delta of 1-4 words picked by @p seq from a list of 64, as streamed text is: a
 * store packs these about as it packs real streams (docs/PERFORMANCE.md "Packed chunks"),
 * where the repeated body packs about 19:1. */
static int text_event(ab_buf_t *out, const char *thread, const char *run, uint64_t seq,
                      ab_error_t *err)
{
    static const char *const W[64] = {
        "the ",      "broker ",  "numbers ",  "each ",    "event ",   "per ",       "run, ",
        "gaps ",     "are ",     "refused; ", "stale ",   "writers ", "fenced. ",   "It ",
        "commits ",  "durably ", "through ",  "a ",       "plugin ",  "and ",       "fans ",
        "out ",      "over ",    "pub/sub. ", "Agents ",  "stream ",  "tokens ",    "to ",
        "people ",   "who ",     "watch; ",   "workers ", "wait ",    "for ",       "acks. ",
        "Replay ",   "gives ",   "what ",     "was ",     "missed, ", "exactly ",   "once. ",
        "Tools ",    "call ",    "state ",    "moves ",   "by ",      "deltas ",    "in ",
        "order; ",   "threads ", "hold ",     "runs ",    "that ",    "start ",     "finish ",
        "or ",       "fail, ",   "resume ",   "after ",   "an ",      "interrupt ", "is ",
        "answered. "};
    char json[256], d[160] = "";
    uint64_t x = seq * 0x9e3779b97f4a7c15ull;
    for (int i = 0, n = 1 + (int)(x >> 60) % 4; i < n; i++)
        strcat(d, W[(x >> (6 * i)) & 63]);
    snprintf(json, sizeof json,
             "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"%s\"}", d);
    return ab_envelope_json(out, 1, thread, run, seq, 1, json, err) == AB_OK ? 0 : -1;
}

/* Envelope of event @p seq of an open-ended run into @p out (reset first). */
static int build_event(const bodies_t *b, ab_buf_t *out, const char *thread, const char *run,
                       uint64_t seq)
{
    ab_buf_reset(out);
    ab_error_t err = AB_ERROR_INIT;
    if (seq <= 2) {
        char json[512];
        if (seq == 1)
            snprintf(json, sizeof(json),
                     "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                     "\"protocolVersion\":\"1.0\"}",
                     thread, run);
        else
            snprintf(json, sizeof(json), "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\"}");
        return ab_envelope_json(out, 1, thread, run, seq, 1, json, &err) == AB_OK ? 0 : -1;
    }
    if (g_text)
        return text_event(out, thread, run, seq, &err);
    ab_event_t ev = {.v = 1, .seq = seq, .epoch = 1, .ts = 1700000000000, .body = b->content};
    ev.thread = (ab_str_t){thread, strlen(thread)};
    ev.run = (ab_str_t){run, strlen(run)};
    return ab_event_encode(&ev, out, &err) == AB_OK ? 0 : -1;
}

/* ---- producers ----------------------------------------------------------- */

typedef struct flight {
    uint64_t cid;
    double t0;
} flight_t;

static int send_batch(prod_t *p, ab_conn_t *c, ab_buf_t *frames, uint64_t *seqs, uint64_t k,
                      flight_t *f)
{
    int r = (int)(k % (uint64_t)p->nruns);
    char base[32], thread[48], run[48];
    snprintf(base, sizeof(base), p->thread_fmt, p->id);
    for (int i = 0; i < p->batch; i++) {
        uint64_t ev = k * (uint64_t)p->batch + (uint64_t)i, R = (uint64_t)p->nruns;
        bool warm = ev < 2 * R; /* the warm-up starts every run in turn */
        if (p->spread != SPREAD_NONE)
            r = (int)((p->spread == SPREAD_SCATTER && !warm ? ev * 7919 : ev) % R);
        if (i == 0 || p->spread) {
            snprintf(run, sizeof(run), "p%d-r%d%s", p->id, r, p->run_tag);
            if (p->runs_per_thread > 0)
                snprintf(thread, sizeof(thread), "%s-%d", base, r / p->runs_per_thread);
            else
                snprintf(thread, sizeof(thread), "%s", base);
        }
        if (build_event(p->bodies, &frames[i], thread, run, ++seqs[r]) != 0)
            return -1;
    }
    ab_msg_t req = {.op = AB_OP_PUBLISH};
    req.u.publish.count = (uint32_t)p->batch;
    ab_error_t err = AB_ERROR_INIT;
    f->t0 = ab__mono_s();
    if (p->sent && k < p->nsent) /* before the send: a subscriber may see the event at once */
        atomic_store(&p->sent[k], f->t0);
    return ab_conn_send(c, &req, frames, (size_t)p->batch, &f->cid, &err) == AB_OK ? 0 : -1;
}

/*
 * AB_BENCH_SLOW_US=N: print every publish acknowledged after more than N us, with the
 * wall-clock time its answer came (to line it up with a trace of the broker, e.g.
 * strace -ttt), on stderr. For finding stalls; no effect on the figures otherwise.
 */
static double slow_limit; /* seconds; 0 = off; set once, before any producer thread */
static pthread_once_t slow_once = PTHREAD_ONCE_INIT;

static void slow_limit_read(void)
{
    const char *s = getenv("AB_BENCH_SLOW_US");
    slow_limit = s && *s ? atof(s) / 1e6 : 0;
}

static void note_slow(double dt)
{
    pthread_once(&slow_once, slow_limit_read);
    if (slow_limit <= 0 || dt < slow_limit)
        return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    fprintf(stderr, "slow ack %.3f ms, answered at %lld.%06ld\n", dt * 1e3, (long long)now.tv_sec,
            now.tv_nsec / 1000);
}

static int take_reply(prod_t *p, ab_conn_t *c, ab_doc_t *doc, flight_t *fl, int *nfl)
{
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_recv(c, 0, doc, &m, 10000, &err) != AB_OK || m.op != AB_OP_PUBLISHED) {
        fprintf(stderr, "agentbus bench: publish failed: %s\n", err.message);
        return -1;
    }
    for (size_t i = 0; i < m.u.published.nresults; i++) {
        if (m.u.published.results[i].status == AB_RESULT_REJECTED)
            p->rejected++;
        else
            p->acked++;
        p->duplicates += m.u.published.results[i].status == AB_RESULT_DUPLICATE;
    }
    for (int i = 0; i < *nfl; i++)
        if (fl[i].cid == m.cid) {
            double dt = ab__mono_s() - fl[i].t0;
            if (p->lat && p->nlat < LAT_MAX)
                p->lat[p->nlat++] = dt;
            note_slow(dt);
            if (p->slow)
                bench_spans_note(p->slow, fl[i].t0, dt, BENCH_SLOW_S);
            fl[i] = fl[--*nfl];
            break;
        }
    return 0;
}

/* One producer's connection and in-flight state. */
typedef struct pump {
    prod_t *p;
    ab_conn_t *c;
    ab_doc_t *doc;
    ab_buf_t *frames;
    uint64_t *seqs;
    flight_t fl[64];
    int nfl;
    uint64_t k; /* batches sent */
} pump_t;

/*
 * Send batches until @p end (ab__mono_s()) or until @p max_k batches were sent, paced from
 * @p start by p->rate, with up to p->pipe in flight; then wait for every answer. 0 or -1.
 */
static int pump_until(pump_t *u, double start, double end, uint64_t max_k)
{
    prod_t *p = u->p;
    uint64_t k0 = u->k; /* pacing counts this phase's batches */
    for (;;) {
        double now = ab__mono_s();
        double due =
            p->rate > 0 ? start + (double)((u->k - k0) * (uint64_t)p->batch) / p->rate : now;
        bool more = now < end && u->k < max_k;
        if (more && u->nfl < p->pipe && due <= now) {
            if (send_batch(p, u->c, u->frames, u->seqs, u->k++, &u->fl[u->nfl]) != 0)
                return -1;
            u->nfl++;
            continue;
        }
        if (u->nfl == 0 && !more)
            return 0;
        /* wait for an ack, or until the next send is due */
        int wait = u->nfl ? 10000 : (int)((due - now) * 1000) + 1;
        if (u->nfl < p->pipe && p->rate > 0 && more)
            wait = (int)((due - now) * 1000) + 1;
        int rc = ab_conn_wait(u->c, wait);
        if (rc > 0 && take_reply(p, u->c, u->doc, u->fl, &u->nfl) != 0)
            return -1;
        if (rc == 0 && wait >= 10000) {
            fprintf(stderr, "agentbus bench: no reply within 10 s\n");
            return -1;
        }
    }
}

/*
 * bench scale's warm-up: every run gets its first two events (RUN_STARTED, then
 * TEXT_MESSAGE_START) and their answers before the clock starts, so that the row measures
 * runs in flight, not runs being started; then all producers start together (the last one
 * to arrive takes the start time and the CPU readings).
 */
static int warm_up(pump_t *u)
{
    prod_t *p = u->p;
    uint64_t batches = (2 * (uint64_t)p->nruns + (uint64_t)p->batch - 1) / (uint64_t)p->batch;
    int rc = pump_until(u, ab__mono_s(), INFINITY, batches);
    p->acked = p->rejected = p->duplicates = 0;
    p->nlat = 0;
    if (pthread_barrier_wait(&p->gate->barrier) == PTHREAD_BARRIER_SERIAL_THREAD) {
        commit_figs_of(p->gate->ep, p->gate->ctx, &p->gate->figs);
        p->gate->cpu_self = self_cpu_s();
        p->gate->cpu_broker = p->gate->broker ? proc_cpu_s(p->gate->broker) : 0;
        bench_threads_read(p->gate->broker, &p->gate->threads);
        p->gate->t0 = ab__mono_s();
    }
    pthread_barrier_wait(&p->gate->barrier); /* t0 is set before anyone measures */
    return rc;
}

static void *produce(void *arg)
{
    prod_t *p = arg;
    ab_conn_opts_t o = {.zmq_ctx = p->ctx,
                        .client_name = "agentbus-bench",
                        .timeout_ms = 10000,
                        .frame_per_event = g_frame_per_event};
    ab_error_t err = AB_ERROR_INIT;
    pump_t u = {.p = p};
    u.frames = calloc((size_t)p->batch, sizeof(ab_buf_t));
    u.seqs = calloc((size_t)p->nruns, sizeof(uint64_t));
    if (!u.frames || !u.seqs || ab_doc_new(&u.doc) != AB_OK ||
        ab_conn_new(&u.c, p->endpoint, &o, &err) != AB_OK) {
        fprintf(stderr, "agentbus bench: connect: %s\n", err.message);
        p->failed = 1;
        if (p->gate) { /* the others wait for this one at the gate */
            pthread_barrier_wait(&p->gate->barrier);
            pthread_barrier_wait(&p->gate->barrier);
        }
        goto out;
    }
    if (p->gate && warm_up(&u) != 0) {
        p->failed = 1;
        goto out;
    }
    double start = ab__mono_s();
    uint64_t max_k = UINT64_MAX; /* batches in all, warm-up included */
    if (p->max_events)
        max_k = u.k + (p->max_events + (uint64_t)p->batch - 1) / (uint64_t)p->batch;
    if (pump_until(&u, start, start + p->seconds, max_k) != 0)
        p->failed = 1;
out:
    for (int i = 0; u.frames && i < p->batch; i++)
        ab_buf_free(&u.frames[i]);
    free(u.frames);
    free(u.seqs);
    ab_conn_destroy(&u.c);
    ab_doc_destroy(&u.doc);
    return NULL;
}

void bench_run_tag(char out[24])
{
    static atomic_uint rows;
    unsigned nonce = (unsigned)getpid() ^ (unsigned)(ab__mono_ms() & 0xffffff);
    snprintf(out, 24, "-%x-%u", nonce, atomic_fetch_add(&rows, 1) + 1);
}

prod_t load_producer(const char *ep, void *ctx, const bodies_t *b, double seconds,
                     const char *thread_fmt)
{
    prod_t p = {.endpoint = ep,
                .ctx = ctx,
                .bodies = b,
                .nruns = RUNS / PRODUCERS,
                .batch = BATCH,
                .pipe = PIPE,
                .seconds = seconds,
                .thread_fmt = thread_fmt};
    bench_run_tag(p.run_tag);
    return p;
}

/* Run @p n producers like @p tmpl; returns acked events/s (or -1). */
double run_producers(const prod_t *tmpl, int n, prod_t *out)
{
    for (int i = 0; i < n; i++)
        out[i] = *tmpl;
    return run_producers_into(out, n);
}

double run_producers_into(prod_t *out, int n)
{
    pthread_t th[PRODUCERS];
    double t0 = ab__mono_s();
    for (int i = 0; i < n; i++) {
        out[i].id = i;
        if (out[i].want_lat)
            out[i].lat = calloc(LAT_MAX, sizeof(double));
        pthread_create(&th[i], NULL, produce, &out[i]);
    }
    uint64_t acked = 0;
    int failed = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        acked += out[i].acked;
        failed |= out[i].failed;
    }
    double dt = ab__mono_s() - (out[0].gate ? out[0].gate->t0 : t0);
    return failed ? -1 : (double)acked / dt;
}

/* ---- rows ---------------------------------------------------------------- */

void commit_figs_of(const char *ep, void *ctx, commit_figs_t *out)
{
    ab_conn_opts_t co = {.zmq_ctx = ctx, .client_name = "agentbus-bench", .timeout_ms = 5000};
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_stats_reply_t r;
    ab_error_t err = AB_ERROR_INIT;
    memset(out, 0, sizeof(*out));
    if (ab_doc_new(&doc) == AB_OK && ab_conn_new(&c, ep, &co, &err) == AB_OK &&
        ab_conn_stats(c, doc, &r, 5000, &err) == AB_OK)
        *out = (commit_figs_t){.known = true,
                               .commits = r.commits,
                               .events = r.events,
                               .p50_us = r.commit_p50_us,
                               .p90_us = r.commit_p90_us,
                               .p99_us = r.commit_p99_us,
                               .max_us = r.commit_max_us,
                               .window = r.commit_window};
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
}

/* The row's group commits, between @p a (its start) and @p b (its end): how many, how big,
 * and the commit times over the broker's last ones (docs/PERFORMANCE.md "Reading `agentbus
 * bench --json`"). */
static void commit_line(const char *durability, const commit_figs_t *a, const commit_figs_t *b)
{
    char row[48];
    snprintf(row, sizeof(row), "group commits, %s", durability);
    if (!a->known || !b->known || b->commits <= a->commits) {
        printf("commits durability=%-7s n/a (the broker did not tell)\n", durability);
        return;
    }
    double groups = (double)(b->commits - a->commits);
    double per = (double)(b->events - a->events) / groups;
    bench_emit("ingest", row, "groups", groups, "events_per_group", per, "commit_p50_us",
               (double)b->p50_us, "commit_p90_us", (double)b->p90_us, "commit_p99_us",
               (double)b->p99_us, "commit_max_us", (double)b->max_us, "commit_window",
               (double)b->window, NULL);
    char before[96] = ""; /* a short row's window also holds what came before it */
    if (groups < (double)b->window)
        snprintf(before, sizeof(before), ", %.0f of them before the row (a warm-up's, a start's)",
                 (double)b->window - groups);
    printf("commits durability=%-7s %10.0f group commits in the row, %.0f events each on "
           "average; commit (write + sync) p50 %llu, p90 %llu, p99 %llu, max %llu us over the "
           "broker's last %llu%s\n",
           durability, groups, per, (unsigned long long)b->p50_us, (unsigned long long)b->p90_us,
           (unsigned long long)b->p99_us, (unsigned long long)b->max_us,
           (unsigned long long)b->window, before);
}

int row_begin(const bench_opts_t *o, child_t *ch, const char *durability, const char **ep)
{
    memset(ch, 0, sizeof(*ch));
    if (o->broker) {
        *ep = o->broker;
        return 0;
    }
    if (child_start(ch, durability) != 0)
        return -1;
    *ep = ch->cmd;
    return 0;
}

double ingest_row(const bench_opts_t *o, void *ctx, const bodies_t *b, const char *durability)
{
    return ingest_row_runs(o, ctx, b, durability, RUNS, SPREAD_NONE, 0);
}

double ingest_row_runs(const bench_opts_t *o, void *ctx, const bodies_t *b, const char *durability,
                       int runs, spread_t spread, int runs_per_thread)
{
    child_t ch;
    const char *ep;
    if (row_begin(o, &ch, durability, &ep) != 0)
        return -1;
    const char *label = row_durability(o, durability);
    prod_t tmpl = load_producer(ep, ctx, b, o->seconds, "ingest-%d");
    tmpl.nruns = runs / PRODUCERS > 0 ? runs / PRODUCERS : 1;
    tmpl.spread = spread; /* bench scale: every run gets events all the time */
    tmpl.runs_per_thread = runs_per_thread;
    tmpl.rate = o->rate / PRODUCERS; /* --rate: shared by the producers (0 = flat out) */
    prod_t ps[PRODUCERS];
    warm_gate_t gate = {.broker = ch.pid, .ep = ep, .ctx = ctx};
    commit_figs_t figs; /* the broker's, as the clock starts (at the gate for runs in flight) */
    if (spread) {       /* runs in flight: started before the clock */
        pthread_barrier_init(&gate.barrier, NULL, PRODUCERS);
        tmpl.gate = &gate;
        gate.t_begin = ab__mono_s();
    } else {
        commit_figs_of(ep, ctx, &figs);
    }
    double c0 = self_cpu_s(), b0 = ch.pid ? proc_cpu_s(ch.pid) : 0;
    bench_threads_t th0, th1;
    bench_threads_read(ch.pid, &th0);
    double rate = run_producers(&tmpl, PRODUCERS, ps);
    bench_threads_read(ch.pid, &th1);
    if (spread) {
        c0 = gate.cpu_self;
        b0 = gate.cpu_broker;
        th0 = gate.threads;
        figs = gate.figs;
        pthread_barrier_destroy(&gate.barrier);
        double warm = 2.0 * tmpl.nruns * PRODUCERS / (gate.t0 - gate.t_begin);
        bench_emit("scale", "warm-up", "runs", (double)tmpl.nruns * PRODUCERS, "events_per_s", warm,
                   NULL);
        printf("warm-up %d runs started before the clock (RUN_STARTED and one more event "
               "each): %.2f s, %.0f events/s\n",
               tmpl.nruns * PRODUCERS, gate.t0 - gate.t_begin, warm);
    }
    double pcpu = self_cpu_s() - c0, bcpu = ch.pid ? proc_cpu_s(ch.pid) - b0 : 0;
    uint64_t rej = 0, dup = 0, acked = 0;
    for (int i = 0; i < PRODUCERS; i++) {
        rej += ps[i].rejected;
        dup += ps[i].duplicates;
        acked += ps[i].acked;
    }
    long rss = ch.pid ? peak_rss_kib(ch.pid) : 0;
    double per = acked ? 1e6 / (double)acked : 0;
    bench_emit("ingest", label, "events_per_s", rate, "rejected", (double)rej, "duplicates",
               (double)dup, "broker_peak_rss_mib", rss ? (double)rss / 1024 : NAN,
               "cpu_producers_us_per_event", pcpu * per, "cpu_broker_us_per_event", bcpu * per,
               NULL);
    printf("ingest  durability=%-7s %10.0f events/s acked  (%d producers, %d runs, %d B events, "
           "batch %d, %d in flight%s; rejected %llu, duplicate %llu; broker peak RSS %s%ld MiB; "
           "CPU per event: producers %.2f us, broker %.2f us)\n",
           label, rate, PRODUCERS, tmpl.nruns * PRODUCERS, EVENT_SIZE, BATCH, PIPE,
           g_frame_per_event ? ", a frame per event" : ", packed", (unsigned long long)rej,
           (unsigned long long)dup, rss ? "" : "n/a ", rss / 1024, pcpu * per, bcpu * per);
    commit_figs_t end;
    commit_figs_of(ep, ctx, &end);
    commit_line(label, &figs, &end);
    bench_threads_line(label, &th0, &th1);
    child_stop(&ch);
    return rate;
}

static int bench_ingest(const bench_opts_t *o, void *ctx, const bodies_t *b)
{
    double f = ingest_row(o, ctx, b, "fsync");
    double p = o->broker ? 0 : ingest_row(o, ctx, b, "process"); /* one broker: one row */
    return f < 0 || p < 0 ? AB_BENCH_FAIL : AB_BENCH_OK;
}

typedef struct counter {
    uint64_t events;
    uint64_t bytes;
} counter_t;

static ab_status_t count_row(void *ud, const ab_stamp_t *st, const uint8_t *ev, size_t len,
                             ab_error_t *err)
{
    counter_t *k = ud;
    (void)st;
    (void)ev;
    (void)err;
    k->events++;
    k->bytes += len;
    return AB_OK;
}

#define REPLAY_REPS 5 /* each replay lasts 0.05-0.2 s: one scheduling hiccup moves a single one */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One replay of @p q on connection @p c: its duration into *dt, what it delivered into *k. */
static ab_status_t replay_once(ab_conn_t *c, ab_doc_t *doc, const ab_msg_t *q, counter_t *k,
                               double *dt, ab_error_t *err)
{
    *k = (counter_t){0, 0};
    double t0 = ab__mono_s();
    ab_status_t s = ab_conn_replay(c, q, count_row, k, doc, NULL, 10000, err);
    *dt = ab__mono_s() - t0;
    return s;
}

/* REPLAY_REPS replays of @p q in a row: the median's events/s, and the spread. */
static int replay_one(const char *ep, void *ctx, const char *label, const ab_msg_t *q)
{
    ab_conn_opts_t o = {
        .zmq_ctx = ctx, .timeout_ms = 10000, .replay_window = 64, .replay_chunk_max = 1024};
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    counter_t k = {0, 0};
    double dt[REPLAY_REPS];
    int rc = -1;
    if (ab_doc_new(&doc) != AB_OK || ab_conn_new(&c, ep, &o, &err) != AB_OK)
        goto out;
    uint64_t events = 0;
    for (int i = 0; i < REPLAY_REPS; i++) {
        if (replay_once(c, doc, q, &k, &dt[i], &err) != AB_OK)
            goto out;
        if (i > 0 && k.events != events) {
            ab_error_set(&err, AB_INTERNAL, "", "replay %d delivered %llu events, the first %llu",
                         i + 1, (unsigned long long)k.events, (unsigned long long)events);
            goto out;
        }
        events = k.events;
    }
    qsort(dt, REPLAY_REPS, sizeof dt[0], cmp_double);
    double med = dt[REPLAY_REPS / 2], ev = (double)k.events;
    bench_emit("replay", label, "events", ev, "seconds", med, "events_per_s", ev / med,
               "events_per_s_min", ev / dt[REPLAY_REPS - 1], "events_per_s_max", ev / dt[0],
               "mb_per_s", (double)k.bytes / med / 1e6, NULL);
    printf("replay  %-24s %9llu events in %6.3f s: %10.0f events/s  %7.1f MB/s  (median of %d:"
           " %.0f..%.0f events/s; window 64, chunks of 1024)\n",
           label, (unsigned long long)k.events, med, ev / med, (double)k.bytes / med / 1e6,
           REPLAY_REPS, ev / dt[REPLAY_REPS - 1], ev / dt[0]);
    rc = 0;
out:
    if (rc != 0)
        fprintf(stderr, "agentbus bench: replay %s: %s\n", label, err.message);
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    return rc;
}

/* The broker's head position (the stats reply's), so that "everything" is what this row
 * loaded even on a store shared with earlier rows (bench pg). */
static int head_pos(const char *ep, void *ctx, uint64_t *pos)
{
    ab_conn_opts_t o = {.zmq_ctx = ctx, .timeout_ms = 10000};
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_stats_reply_t st;
    ab_error_t err = AB_ERROR_INIT;
    int rc = -1;
    if (ab_doc_new(&doc) == AB_OK && ab_conn_new(&c, ep, &o, &err) == AB_OK &&
        ab_conn_stats(c, doc, &st, 10000, &err) == AB_OK) {
        *pos = st.head_pos;
        rc = 0;
    } else {
        fprintf(stderr, "agentbus bench: replay: stats: %s\n", err.message);
    }
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    return rc;
}

/* @p n events as a row's label says it: 100k, 1M, 2500. */
static void count_label(char *out, size_t cap, uint64_t n)
{
    if (n % 1000000 == 0)
        snprintf(out, cap, "%lluM", (unsigned long long)(n / 1000000));
    else if (n % 1000 == 0)
        snprintf(out, cap, "%lluk", (unsigned long long)(n / 1000));
    else
        snprintf(out, cap, "%llu", (unsigned long long)n);
}

int bench_replay(const bench_opts_t *o, void *ctx, const bodies_t *b)
{
    uint64_t events = o->replay_events ? o->replay_events : 100000;
    char c_run[24], c_thread[24], c_all[24], l_run[64], l_thread[64], l_all[64];
    count_label(c_run, sizeof c_run, events);
    count_label(c_thread, sizeof c_thread, events / 10);
    count_label(c_all, sizeof c_all, 2 * events);
    g_text = o->text; /* only while loading this row's store: bench pg's other rows keep the body */
    const char *kind = g_text ? ", text" : ""; /* --text: the rows say so */
    snprintf(l_run, sizeof l_run, "one run (%s events%s)", c_run, kind);
    snprintf(l_thread, sizeof l_thread, "thread (10 x %s runs%s)", c_thread, kind);
    snprintf(l_all, sizeof l_all, "everything (%s events%s)", c_all, kind);
    child_t ch;
    const char *ep;
    if (row_begin(o, &ch, "process", &ep) != 0)
        return AB_BENCH_FAIL;
    prod_t ps[2];
    prod_t one = {.endpoint = ep,
                  .ctx = ctx,
                  .bodies = b,
                  .nruns = 1,
                  .batch = BATCH,
                  .pipe = PIPE,
                  .seconds = 600,
                  .thread_fmt = "replay-run-%d",
                  .max_events = events};
    prod_t ten = one;
    ten.nruns = 10;
    ten.thread_fmt = "replay-thread-%d";
    int rc = AB_BENCH_FAIL;
    uint64_t before = 0;
    if (head_pos(ep, ctx, &before) != 0 || run_producers(&one, 1, &ps[0]) < 0 ||
        run_producers(&ten, 1, &ps[1]) < 0)
        goto out;
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay.scope = AB_REPLAY_RUN;
    q.u.replay.thread = (ab_str_t){"replay-run-0", 12};
    q.u.replay.run = (ab_str_t){"p0-r0", 5};
    ab_msg_t qt = {.op = AB_OP_REPLAY};
    qt.u.replay.scope = AB_REPLAY_THREAD;
    qt.u.replay.thread = (ab_str_t){"replay-thread-0", 15};
    ab_msg_t qa = {.op = AB_OP_REPLAY}; /* everything: both loads above, in commit order */
    qa.u.replay.scope = AB_REPLAY_ALL;
    qa.u.replay.after_pos = before;
    if (replay_one(ep, ctx, l_run, &q) == 0 && replay_one(ep, ctx, l_thread, &qt) == 0 &&
        replay_one(ep, ctx, l_all, &qa) == 0)
        rc = AB_BENCH_OK;
out:
    g_text = false;
    child_stop(&ch);
    return rc;
}

/* ---- raw ZeroMQ ceilings --------------------------------------------------- */

typedef struct echo {
    void *sock;
    int mode; /* 0: echo (ROUTER), 1: count (PULL) */
    uint64_t count;
} echo_t;

static void *echo_main(void *arg)
{
    echo_t *e = arg;
    zmq_msg_t m;
    zmq_msg_init(&m);
    for (;;) {
        if (zmq_msg_recv(&m, e->sock, 0) < 0)
            break; /* context terminated */
        if (e->mode == 1) {
            if (zmq_msg_size(&m) == 0)
                break; /* end marker */
            e->count++;
            continue;
        }
        int more = zmq_msg_more(&m);
        if (zmq_msg_size(&m) == 0 && !more)
            break;
        zmq_msg_send(&m, e->sock, more ? ZMQ_SNDMORE : 0);
    }
    zmq_msg_close(&m);
    return NULL;
}

void *zsock(void *ctx, int type, const char *bind_ep, char *ep, size_t size)
{
    void *s = zmq_socket(ctx, type);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    if (bind_ep) {
        zmq_bind(s, bind_ep);
        zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &size);
    } else {
        zmq_connect(s, ep);
    }
    return s;
}

static int bench_zmq(const bench_opts_t *o)
{
    void *ctx = zmq_ctx_new();
    char ep[128];
    echo_t e = {.sock = zsock(ctx, ZMQ_ROUTER, "tcp://127.0.0.1:*", ep, sizeof(ep))};
    void *d = zsock(ctx, ZMQ_DEALER, NULL, ep, sizeof(ep));
    pthread_t th;
    pthread_create(&th, NULL, echo_main, &e);
    char payload[EVENT_SIZE];
    memset(payload, 'x', sizeof(payload));
    uint64_t n = 0;
    double t0 = ab__mono_s(), end = t0 + o->seconds;
    while (ab__mono_s() < end) {
        zmq_send(d, payload, 64, 0);
        zmq_recv(d, payload, sizeof(payload), 0);
        n++;
    }
    double rt = (double)n / (ab__mono_s() - t0);
    zmq_send(d, "", 0, 0); /* ROUTER echo thread: empty frame after identity ends it */
    pthread_join(th, NULL);
    echo_t pull = {.sock = zsock(ctx, ZMQ_PULL, "tcp://127.0.0.1:*", ep, sizeof(ep)), .mode = 1};
    void *push = zsock(ctx, ZMQ_PUSH, NULL, ep, sizeof(ep));
    pthread_create(&th, NULL, echo_main, &pull);
    t0 = ab__mono_s();
    end = t0 + o->seconds;
    for (n = 0; (n & 1023) || ab__mono_s() < end; n++)
        zmq_send(push, payload, sizeof(payload), 0);
    zmq_send(push, "", 0, 0);
    pthread_join(th, NULL);
    double tp = (double)pull.count / (ab__mono_s() - t0);
    bench_emit("zmq", "DEALER/ROUTER round trips", "per_s", rt, NULL);
    bench_emit("zmq", "PUSH/PULL one-way", "per_s", tp, "bytes", (double)EVENT_SIZE, NULL);
    printf("zmq     DEALER/ROUTER round trips (64 B, 1 in flight): %10.0f /s\n", rt);
    printf("zmq     PUSH/PULL one-way %d B messages:              %10.0f /s\n", EVENT_SIZE, tp);
    zmq_close(d);
    zmq_close(e.sock);
    zmq_close(push);
    zmq_close(pull.sock);
    zmq_ctx_term(ctx);
    return AB_BENCH_OK;
}

/* ---- entry ----------------------------------------------------------------- */

bool bench_is_bus(const char *name)
{
    static const char *const names[] = {"ingest",  "latency",  "replay", "zmq",     "fanout",
                                        "actions", "dispatch", "scale",  "gateway", "pg"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (name != NULL && strcmp(name, names[i]) == 0)
            return true;
    return false;
}

int bench_bus(const char *name, const bench_opts_t *o)
{
    if (strcmp(name, "zmq") == 0)
        return bench_zmq(o);
    if (strcmp(name, "gateway") == 0)
        return bench_gateway(o);
    if (strcmp(name, "actions") == 0 || strcmp(name, "dispatch") == 0) {
        g_snapshot_every = o->snapshot_every;
        return strcmp(name, "actions") == 0 ? bench_actions(o) : bench_dispatch(o);
    }
    g_frame_per_event = o->frame_per_event;
    g_snapshot_every = o->snapshot_every;
    bodies_t b;
    void *ctx = zmq_ctx_new();
    if (!ctx || bodies_init(&b) != 0) {
        fprintf(stderr, "agentbus bench: setup failed\n");
        return AB_BENCH_FAIL;
    }
    int rc;
    if (strcmp(name, "ingest") == 0)
        rc = bench_ingest(o, ctx, &b);
    else if (strcmp(name, "latency") == 0)
        rc = bench_latency(o, ctx, &b);
    else if (strcmp(name, "scale") == 0)
        rc = bench_scale(o, ctx, &b);
    else if (strcmp(name, "fanout") == 0)
        rc = bench_fanout(o, ctx, &b);
    else if (strcmp(name, "pg") == 0)
        rc = bench_pg(o, ctx, &b);
    else
        rc = bench_replay(o, ctx, &b);
    bodies_free(&b);
    zmq_ctx_term(ctx);
    return rc;
}

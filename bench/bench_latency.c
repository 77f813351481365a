/*
 * bench_latency.c - `agentbus bench latency`: what one event costs in time,
 * beside the floor of the same machine measured in the same run
 * (docs/PERFORMANCE.md "Latency").
 *
 *   floor    a write + fdatasync loop of a commit-sized append (one WAL
 *            frame: 24 + 4096 bytes) on the disk the bench's brokers use
 *            ($TMPDIR, else /tmp), and a ZeroMQ DEALER/ROUTER round trip of
 *            a 256-byte message on loopback, both at 1,000 a second: once with
 *            both sockets in one context (one ZeroMQ I/O thread serves both
 *            ends) and once in two, as a client and a broker are (two I/O
 *            threads, each woken in turn: the hops every request makes);
 *            a sample that had to wait for the one before it counts from
 *            when it was due (bench_paced_start), as the ack rows' do;
 *   ack      publish -> `published`, one event per publish at 1,000 events/s
 *            (fsync and process durability), and batches of 256 from 4
 *            producers at 80 % of the fsync ingest maximum measured just
 *            before;
 *   delivery publish -> a live subscriber's callback (scope all), at light
 *            load, at 80 % of max and at 80 % of its max (the fastest ingest
 *            with those subscribers taking every event, measured just before),
 *            with 1 and 4 subscribers.
 *
 * Every row prints p50, p90, p99, p99.9 and max, and the light rows their
 * ratio to the floor and the broker's own store commit time over its last
 * 1,024 commits (`stats`, asked before the row's broker stops): the ack less
 * the commit is the path around it (sockets, thread hand-offs, staging).
 * With --stalls every floor and ack row is followed by a `stalls` line: its
 * samples over 5 ms, and how many of them overlapped a stall of the bench
 * process's own 1 ms timer thread (bench/stalls.h).
 * After the last row, issue 15's targets the rows judged (bench/targets.h):
 * the light rows' against the floors, the 80 % row's p99, each delivery row's
 * p50 against its acknowledgements' (`bench scale`: each 100,000-run row's
 * share of the 100-run figure).
 * Figures only: nothing here asserts a time.
 */
#include "ab_common.h"
#include "agentbus/subscriber.h"
#include "bench_int.h"
#include "targets.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define PACE_HZ     1000.0
#define FRAME_BYTES (24 + 4096)
#define SUBS_MAX    4

typedef struct dist {
    double p50, p90, p99, p999, max;
    size_t n;
    size_t over_10ms; /* samples over 10 ms (a target of the light fsync row) */
} dist_t;

/* The floors of one run: the fdatasync loop and the round trips of one and two contexts. */
typedef struct floors {
    dist_t fs, rt1, rt2;
} floors_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Percentiles in microseconds of @p n samples in seconds (sorted in place). */
static dist_t dist_of(double *v, size_t n)
{
    dist_t d = {.n = n};
    if (n == 0)
        return d;
    qsort(v, n, sizeof(double), cmp_double);
    d.p50 = v[n / 2] * 1e6;
    d.p90 = v[(size_t)((double)n * 0.90)] * 1e6;
    d.p99 = v[(size_t)((double)n * 0.99)] * 1e6;
    d.p999 = v[(size_t)((double)n * 0.999)] * 1e6;
    d.max = v[n - 1] * 1e6;
    while (d.over_10ms < n && v[n - 1 - d.over_10ms] > 0.010)
        d.over_10ms++;
    return d;
}

/* A row's distribution; @p rate >= 0 adds the events/s its producers had acked (a delivery
 * row's). */
static void print_rate(const char *label, const dist_t *d, const char *extra, double rate)
{
    bench_emit("latency", label, "p50_us", d->p50, "p90_us", d->p90, "p99_us", d->p99, "p999_us",
               d->p999, "max_us", d->max, "samples", (double)d->n,
               rate >= 0 ? "events_per_s" : NULL, rate, NULL);
    printf("latency %-44s p50 %7.0f  p90 %7.0f  p99 %7.0f  p99.9 %7.0f  max %8.0f us  (%zu)%s\n",
           label, d->p50, d->p90, d->p99, d->p999, d->max, d->n, extra ? extra : "");
}

static void print_dist(const char *label, const dist_t *d, const char *extra)
{
    print_rate(label, d, extra, -1);
}

/* A figure of @p d for a target: NaN (not judged) when the row has no sample. */
static double fig(const dist_t *d, double v)
{
    return d->n > 0 ? v : NAN;
}

/* Sleep until @p t (ab__mono_s() seconds). */
static void sleep_until(double t)
{
    double now = ab__mono_s();
    if (t <= now)
        return;
    double s = t - now;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- --stalls: slow samples beside the process's timer stalls (stalls.h) -------- */

typedef struct watch {
    bench_meter_t *meter; /* NULL: --stalls is off (or the thread could not start) */
    bench_spans_t slow;
} watch_t;

/* Start watching a row: its slow samples go to w->slow (NULL from watch_log() when off). */
static void watch_begin(const bench_opts_t *o, watch_t *w)
{
    memset(w, 0, sizeof(*w));
    if (!o->stalls)
        return;
    if (bench_spans_init(&w->slow) != 0 || (w->meter = bench_meter_start()) == NULL) {
        fprintf(stderr, "agentbus bench: --stalls: cannot start the timer thread\n");
        bench_spans_free(&w->slow);
    }
}

static bench_spans_t *watch_log(watch_t *w)
{
    return w->meter ? &w->slow : NULL;
}

/* The stalls line of a row (@p label) from its slow samples and the timer's stalls. */
static void watch_report(const watch_t *w, const bench_spans_t *late, const char *label)
{
    size_t over10 = 0, during = bench_spans_overlap(&w->slow, late);
    for (size_t i = 0; i < w->slow.n; i++)
        over10 += w->slow.v[i].dt >= 0.010;
    double slow = (double)bench_spans_count(&w->slow), stalls = (double)bench_spans_count(late);
    char row[96];
    snprintf(row, sizeof row, "stalls: %s", label);
    bench_emit("latency", row, "over_5ms", slow, "over_10ms", (double)over10, "max_us",
               w->slow.max * 1e6, "during_a_stall", (double)during, "timer_stalls", stalls,
               "timer_max_us", late->max * 1e6, NULL);
    printf("stalls  %-44s %.0f over 5 ms (%zu over 10 ms), %zu of them during a stall of this "
           "process's timer; timer stalls over 2 ms %.0f, longest %.1f ms\n",
           label, slow, over10, during, stalls, late->max * 1e3);
    if (w->slow.over > 0 || late->over > 0)
        printf("stalls  (more than %d spans: the overlap counts the first %d only)\n", BENCH_SPANS,
               BENCH_SPANS);
}

/* Stop watching; print what the row's slow samples overlapped, under the row @p label
 * (NULL: the row failed, print nothing). */
static void watch_end(watch_t *w, const char *label)
{
    if (w->meter == NULL)
        return;
    bench_spans_t late;
    bench_meter_stop(w->meter, &late);
    w->meter = NULL;
    if (label != NULL)
        watch_report(w, &late, label);
    bench_spans_free(&late);
    bench_spans_free(&w->slow);
}

/* ---- the floor -------------------------------------------------------------- */

static int floor_fsync(double seconds, bench_spans_t *slow, dist_t *out)
{
    const char *t = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/agentbus-bench-floor-XXXXXX", t && *t ? t : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "agentbus bench: floor: cannot create %s: %s\n", path, strerror(errno));
        return -1;
    }
    unlink(path);
    static char frame[FRAME_BYTES];
    memset(frame, 'w', sizeof frame);
    size_t max = (size_t)(seconds * PACE_HZ) + 1;
    double *v = calloc(max, sizeof(double));
    size_t n = 0;
    double start = ab__mono_s(), end = start;
    int rc = v ? 0 : -1;
    for (off_t off = 0; rc == 0 && n < max && ab__mono_s() < start + seconds; off += FRAME_BYTES) {
        double due = start + (double)n / PACE_HZ;
        sleep_until(due);
        double t0 = bench_paced_start(due, ab__mono_s(), end);
        if (pwrite(fd, frame, sizeof frame, off) != (ssize_t)sizeof frame || fdatasync(fd) != 0)
            rc = -1;
        end = ab__mono_s();
        v[n] = end - t0;
        if (slow)
            bench_spans_note(slow, t0, v[n], BENCH_SLOW_S);
        n++;
    }
    close(fd);
    if (rc == 0)
        *out = dist_of(v, n);
    free(v);
    return rc;
}

static void *echo_main(void *arg)
{
    void *s = arg;
    for (;;) {
        zmq_msg_t id, body;
        zmq_msg_init(&id);
        zmq_msg_init(&body);
        if (zmq_msg_recv(&id, s, 0) < 0 || zmq_msg_recv(&body, s, 0) < 0) {
            zmq_msg_close(&id);
            zmq_msg_close(&body);
            return NULL; /* the context is ending */
        }
        zmq_msg_send(&id, s, ZMQ_SNDMORE);
        zmq_msg_send(&body, s, 0);
    }
}

/* The round trip floor; @p two: the DEALER in a context of its own (its own I/O thread). */
static int floor_zmq(double seconds, bool two, bench_spans_t *slow, dist_t *out)
{
    void *ctx = zmq_ctx_new(), *dctx = two ? zmq_ctx_new() : ctx;
    void *r = zmq_socket(ctx, ZMQ_ROUTER), *d = zmq_socket(dctx, ZMQ_DEALER);
    char ep[128];
    size_t len = sizeof ep;
    int zero = 0;
    zmq_setsockopt(r, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(r, "tcp://127.0.0.1:*") != 0 || zmq_getsockopt(r, ZMQ_LAST_ENDPOINT, ep, &len) ||
        zmq_connect(d, ep) != 0) {
        zmq_close(r);
        zmq_close(d);
        zmq_ctx_term(ctx);
        if (two)
            zmq_ctx_term(dctx);
        return -1;
    }
    pthread_t th;
    pthread_create(&th, NULL, echo_main, r);
    char msg[EVENT_SIZE], back[EVENT_SIZE];
    memset(msg, 'm', sizeof msg);
    size_t max = (size_t)(seconds * PACE_HZ) + 1;
    double *v = calloc(max, sizeof(double));
    size_t n = 0;
    double start = ab__mono_s(), end = start;
    for (; v && n < max && ab__mono_s() < start + seconds;) {
        double due = start + (double)n / PACE_HZ;
        sleep_until(due);
        double t0 = bench_paced_start(due, ab__mono_s(), end);
        if (zmq_send(d, msg, sizeof msg, 0) < 0 || zmq_recv(d, back, sizeof back, 0) < 0)
            break;
        end = ab__mono_s();
        v[n] = end - t0;
        if (slow)
            bench_spans_note(slow, t0, v[n], BENCH_SLOW_S);
        n++;
    }
    zmq_close(d);
    if (two)
        zmq_ctx_term(dctx);
    zmq_ctx_shutdown(ctx); /* unblocks the echo thread, which then closes its socket */
    pthread_join(th, NULL);
    zmq_close(r);
    zmq_ctx_term(ctx);
    if (v)
        *out = dist_of(v, n);
    free(v);
    return v && n > 0 ? 0 : -1;
}

/* ---- publish -> ack --------------------------------------------------------- */

/* The latency rows' producer: 4 runs of thread lat-ID, @p rate events/s over @p nprod. */
static prod_t lat_producer(const char *ep, void *ctx, const bodies_t *b, double seconds,
                           double rate, int batch, int nprod)
{
    prod_t p = {.endpoint = ep,
                .ctx = ctx,
                .bodies = b,
                .nruns = 4,
                .batch = batch,
                .pipe = batch == 1 ? 64 : PIPE,
                .seconds = seconds,
                .rate = rate / nprod,
                .thread_fmt = "lat-%d"};
    bench_run_tag(p.run_tag);
    return p;
}

/* The broker's store commit p50 and p99 (us) over its last commits, in @p cm; 0 if unknown. */
static void commit_times(const char *ep, void *ctx, double cm[2])
{
    commit_figs_t f;
    commit_figs_of(ep, ctx, &f);
    cm[0] = (double)f.p50_us;
    cm[1] = (double)f.p99_us;
}

/* Every producer's publish-to-ack times together in @p out; frees them. */
static int acks_of(prod_t *ps, int nprod, dist_t *out)
{
    size_t total = 0;
    for (int i = 0; i < nprod; i++)
        total += ps[i].nlat;
    double *all = malloc((total ? total : 1) * sizeof(double));
    size_t k = 0;
    for (int i = 0; i < nprod; i++) {
        if (all)
            memcpy(all + k, ps[i].lat, ps[i].nlat * sizeof(double));
        k += ps[i].nlat;
        free(ps[i].lat);
        ps[i].lat = NULL;
    }
    if (all)
        *out = dist_of(all, total);
    free(all);
    return all ? 0 : -1;
}

/* Every producer's slow publishes into @p all, the row's log; frees theirs. */
static void merge_slow(bench_spans_t *all, bench_spans_t *slow, int nprod)
{
    for (int i = 0; all && i < nprod; i++) {
        for (size_t k = 0; k < slow[i].n; k++)
            bench_spans_note(all, slow[i].v[k].t0, slow[i].v[k].dt, BENCH_SLOW_S);
        all->over += slow[i].over;
        all->max = slow[i].max > all->max ? slow[i].max : all->max;
        bench_spans_free(&slow[i]);
    }
}

/* An ack row; it starts @p w (watching with --stalls), which the caller ends after printing
 * the row (a failed row ends it here, or never started it). */
static int ack_row(const bench_opts_t *o, void *ctx, const bodies_t *b, const char *durability,
                   double rate, int batch, int nprod, dist_t *out, double *got, double cm[2],
                   watch_t *w)
{
    child_t ch;
    const char *ep;
    if (row_begin(o, &ch, durability, &ep) != 0)
        return -1;
    watch_begin(o, w);
    prod_t tmpl = lat_producer(ep, ctx, b, o->seconds, rate, batch, nprod);
    tmpl.want_lat = true;
    prod_t ps[PRODUCERS];
    bench_spans_t slow[PRODUCERS]; /* each producer's own; merged into the watch's after */
    bench_spans_t *all = watch_log(w);
    for (int i = 0; i < nprod; i++) {
        ps[i] = tmpl;
        if (all && bench_spans_init(&slow[i]) == 0) /* else it only counts */
            ps[i].slow = &slow[i];
    }
    *got = run_producers_into(ps, nprod);
    merge_slow(all, slow, nprod);
    commit_times(ep, ctx, cm);
    child_stop(&ch);
    int rc = acks_of(ps, nprod, out);
    if (*got >= 0 && rc == 0)
        return 0;
    watch_end(w, NULL);
    return -1;
}

/* ---- publish -> a live subscriber ------------------------------------------- */

typedef struct dsub {
    ab_sub_t *sub;
    prod_t *ps; /* the producers, whose send times the callback reads */
    int nprod;
    double *lat;
    size_t nlat;
    uint64_t stride; /* a sample of every stride-th seq of a run: the whole row fits LAT_MAX */
    uint64_t got;
    _Atomic uint64_t *target;
    atomic_int *done;
    int failed;
} dsub_t;

/* The send time of event (producer p, run r, seq) from the producer's batch log. */
static double sent_at(const dsub_t *s, int p, int r, uint64_t seq)
{
    const prod_t *pr = &s->ps[p];
    uint64_t k = ((seq - 1) / (uint64_t)pr->batch) * (uint64_t)pr->nruns + (uint64_t)r;
    return pr->sent && k < pr->nsent ? atomic_load(&pr->sent[k]) : 0;
}

static int dsub_event(void *ud, const ab_sub_event_t *e)
{
    dsub_t *s = ud;
    double now = ab__mono_s();
    s->got++;
    int p = -1, r = -1;
    if (e->ev.thread.len > 4 && memcmp(e->ev.thread.ptr, "lat-", 4) == 0)
        p = atoi(e->ev.thread.ptr + 4);
    const char *dash = memchr(e->ev.run.ptr, '-', e->ev.run.len);
    if (dash && dash[1] == 'r')
        r = atoi(dash + 2);
    if (e->replayed || p < 0 || p >= s->nprod || r < 0)
        return 0; /* recovered from the store: not a live delivery */
    if ((e->ev.seq - 1) % s->stride != 0)
        return 0; /* samples spread over the whole row, as its acks are */
    double t0 = sent_at(s, p, r, e->ev.seq);
    if (t0 > 0 && s->nlat < LAT_MAX)
        s->lat[s->nlat++] = now - t0;
    return 0;
}

static void *dsub_main(void *arg)
{
    dsub_t *s = arg;
    double deadline = 0;
    while (!s->failed) {
        ab_error_t err = AB_ERROR_INIT;
        ab_status_t rc = ab_sub_poll(s->sub, 20, &err);
        if (rc != AB_OK && !ab_status_retryable(rc)) {
            fprintf(stderr, "agentbus bench: subscriber: %s\n", err.message);
            s->failed = 1;
        }
        if (atomic_load(s->done)) {
            if (s->got >= atomic_load(s->target))
                break;
            if (deadline == 0)
                deadline = ab__mono_s() + 30;
            if (ab__mono_s() > deadline)
                s->failed = 1;
        }
    }
    return NULL;
}

static int open_subs(const char *ep, dsub_t *s, int nsub)
{
    for (int i = 0; i < nsub; i++) {
        ab_sub_opts_t so = {.scope = AB_SUB_ALL,
                            .start = AB_SUB_FROM_NOW,
                            .on_event = dsub_event,
                            .ud = &s[i],
                            .timeout_ms = 10000};
        ab_error_t err = AB_ERROR_INIT;
        s[i].lat = calloc(LAT_MAX, sizeof(double));
        if (s[i].lat == NULL || ab_sub_new(&s[i].sub, ep, &so, &err) != AB_OK ||
            ab_sub_poll(s[i].sub, 200, &err) != AB_OK) {
            fprintf(stderr, "agentbus bench: subscriber: %s\n", err.message);
            return -1;
        }
    }
    return 0;
}

/* Publish -> live callback of @p nsub subscribers in @p out, and in @p acks the
 * publish -> `published` times of the same publishes (the target compares the two). */
static int delivery_row(const bench_opts_t *o, void *ctx, const bodies_t *b, double rate, int batch,
                        int nprod, int nsub, dist_t *out, dist_t *acks, double *got)
{
    child_t ch;
    const char *ep;
    if (row_begin(o, &ch, "fsync", &ep) != 0)
        return -1;
    atomic_int done;
    _Atomic uint64_t target;
    atomic_init(&done, 0);
    atomic_init(&target, 0);
    prod_t ps[PRODUCERS];
    dsub_t s[SUBS_MAX];
    memset(s, 0, sizeof s);
    pthread_t th[SUBS_MAX];
    prod_t tmpl = lat_producer(ep, ctx, b, o->seconds, rate, batch, nprod);
    tmpl.nsent = (size_t)(o->seconds * rate / batch / nprod) + 1024;
    tmpl.want_lat = true;
    for (int i = 0; i < nsub; i++)
        s[i] = (dsub_t){.ps = ps,
                        .nprod = nprod,
                        .stride = (uint64_t)(o->seconds * rate / LAT_MAX) + 1,
                        .target = &target,
                        .done = &done};
    int rc = open_subs(ep, s, nsub);
    /* the producers' send logs exist before any event can reach a subscriber */
    for (int i = 0; rc == 0 && i < nprod; i++) {
        ps[i] = tmpl;
        ps[i].sent = calloc(tmpl.nsent, sizeof(*ps[i].sent));
        rc = ps[i].sent ? 0 : -1;
    }
    for (int i = 0; rc == 0 && i < nsub; i++)
        pthread_create(&th[i], NULL, dsub_main, &s[i]);
    if (rc == 0) {
        *got = run_producers_into(ps, nprod);
        rc = *got < 0 ? -1 : 0;
        uint64_t acked = 0;
        for (int i = 0; i < nprod; i++)
            acked += ps[i].acked - ps[i].duplicates;
        atomic_store(&target, acked);
        atomic_store(&done, 1);
        for (int i = 0; i < nsub; i++) {
            pthread_join(th[i], NULL);
            rc |= s[i].failed ? -1 : 0;
        }
        rc |= acks_of(ps, nprod, acks);
    }
    /* every subscriber's samples together */
    size_t total = 0;
    for (int i = 0; i < nsub; i++)
        total += s[i].nlat;
    double *all = malloc((total ? total : 1) * sizeof(double));
    for (size_t k = 0, i = 0; all && i < (size_t)nsub; k += s[i].nlat, i++)
        memcpy(all + k, s[i].lat, s[i].nlat * sizeof(double));
    if (all)
        *out = dist_of(all, total);
    free(all);
    for (int i = 0; i < nsub; i++) {
        ab_sub_destroy(&s[i].sub);
        free(s[i].lat);
    }
    for (int i = 0; i < nprod; i++)
        free(ps[i].sent);
    child_stop(&ch);
    return rc;
}

/* ---- the whole bench ---------------------------------------------------------- */

/* The light fsync row against the floors: its excess over the fdatasync, and the targets
 * (issue 15: p50 <= fdatasync p50 + a round trip + 50 us, p99 <= 2 x fdatasync p99 + 200 us)
 * with the two-context round trip, the one a client and a broker make. */
static void vs_floor(char *out, size_t size, const dist_t *d, const floors_t *f, const double cm[2])
{
    snprintf(out, size,
             "  [p50 = floor fdatasync p50 + %.0f us, target <= %.0f us; p99 = %.1f x floor p99, "
             "target <= %.0f us; store commit p50 %.0f, p99 %.0f us]",
             d->p50 - f->fs.p50, f->fs.p50 + f->rt2.p50 + 50,
             f->fs.p99 > 0 ? d->p99 / f->fs.p99 : 0, 2 * f->fs.p99 + 200, cm[0], cm[1]);
}

/* A delivery row and, under it, the acknowledgements of the same publishes. */
static int delivery_pair(const bench_opts_t *o, void *ctx, const bodies_t *b, double rate,
                         int batch, int nprod, int nsub, const char *pace)
{
    dist_t d, a;
    double got = 0;
    char label[96], extra[96];
    memset(&a, 0, sizeof a);
    memset(&d, 0, sizeof d);
    if (delivery_row(o, ctx, b, rate, batch, nprod, nsub, &d, &a, &got) != 0)
        return -1;
    snprintf(label, sizeof label, "delivery, %s, %s, %d subscriber%s", pace,
             row_durability(o, "fsync"), nsub, nsub > 1 ? "s" : "");
    snprintf(extra, sizeof extra, "  [p50 = its acks' p50 %+.0f us; %.0f ev/s acked]",
             d.p50 - a.p50, got);
    print_rate(label, &d, extra, got);
    bench_target_add(bench_targets(), fig(&d, d.p50), BENCH_AT_MOST, fig(&a, a.p50 + 50), "us",
                     "delivery p50 <= its acks' p50 + 50 us, %s, %d subscriber%s", pace, nsub,
                     nsub > 1 ? "s" : "");
    snprintf(label, sizeof label, "  its acks (the same publishes)");
    print_dist(label, &a, NULL);
    return 0;
}

/*
 * The most @p nsub live subscribers let the bus ingest: the delivery row's producers
 * unpaced, every subscriber taking every event. Printed beside @p max, the maximum without
 * subscribers of the same run. @return events/s acked, or -1.
 */
static double delivery_max(const bench_opts_t *o, void *ctx, const bodies_t *b, int nsub,
                           double max)
{
    dist_t d, a;
    double got = 0;
    char label[96];
    if (delivery_row(o, ctx, b, 0, BATCH, PRODUCERS, nsub, &d, &a, &got) != 0 || got <= 0)
        return -1;
    snprintf(label, sizeof label, "max with %d subscriber%s, %s", nsub, nsub > 1 ? "s" : "",
             row_durability(o, "fsync"));
    bench_emit("latency", label, "events_per_s", got, "share_of_max", max > 0 ? got / max : 0,
               NULL);
    printf("latency %-44s %8.0f events/s acked, %3.0f%% of the maximum without subscribers\n",
           label, got, max > 0 ? 100 * got / max : 0);
    fflush(stdout);
    return got;
}

/* The delivery rows of 1 and 4 subscribers: at 1,000/s, at 80 % of @p max (without
 * subscribers), and at 80 % of the maximum with them, measured just before. */
static int delivery_rows(const bench_opts_t *o, void *ctx, const bodies_t *b, double max)
{
    for (int nsub = 1; nsub <= SUBS_MAX; nsub += 3) {
        if (delivery_pair(o, ctx, b, PACE_HZ, 1, 1, nsub, "1,000/s") != 0 ||
            delivery_pair(o, ctx, b, 0.8 * max, BATCH, PRODUCERS, nsub, "80% of max") != 0)
            return -1;
        double with = delivery_max(o, ctx, b, nsub, max);
        if (with <= 0 ||
            delivery_pair(o, ctx, b, 0.8 * with, BATCH, PRODUCERS, nsub, "80% of its max") != 0)
            return -1;
    }
    return 0;
}

/* The floor rows: the fdatasync loop and the round trips of one and two contexts. */
static int floors(const bench_opts_t *o, floors_t *f)
{
    static const char *const label[3] = {"floor: write+fdatasync of 4120 B, 1,000/s",
                                         "floor: ZeroMQ DEALER/ROUTER round trip",
                                         "floor: ZeroMQ round trip, two contexts"};
    dist_t *d[3] = {&f->fs, &f->rt1, &f->rt2};
    for (int i = 0; i < 3; i++) {
        watch_t w;
        watch_begin(o, &w);
        int rc = i == 0 ? floor_fsync(o->seconds, watch_log(&w), d[i])
                        : floor_zmq(o->seconds, i == 2, watch_log(&w), d[i]);
        if (rc != 0) {
            watch_end(&w, NULL);
            return -1;
        }
        print_dist(label[i], d[i], NULL);
        watch_end(&w, label[i]);
    }
    return 0;
}

/* The light fsync ack row, beside the floors @p f. */
static int light_row(const bench_opts_t *o, void *ctx, const bodies_t *b, const floors_t *f)
{
    dist_t d;
    double got = 0, cm[2];
    char extra[240], label[64];
    snprintf(label, sizeof label, "ack, 1 event/publish, 1,000/s, %s", row_durability(o, "fsync"));
    watch_t w;
    if (ack_row(o, ctx, b, "fsync", PACE_HZ, 1, 1, &d, &got, cm, &w) != 0)
        return -1;
    vs_floor(extra, sizeof extra, &d, f, cm);
    print_dist(label, &d, extra);
    watch_end(&w, label);
    const char *dur = row_durability(o, "fsync");
    bench_targets_t *ts = bench_targets();
    bench_target_add(ts, fig(&d, d.p50), BENCH_AT_MOST,
                     fig(&f->fs, f->fs.p50) + fig(&f->rt2, f->rt2.p50) + 50, "us",
                     "%s light, ack p50 <= fdatasync p50 + round trip + 50 us", dur);
    bench_target_add(ts, fig(&d, d.p99), BENCH_AT_MOST, fig(&f->fs, 2 * f->fs.p99 + 200), "us",
                     "%s light, ack p99 <= 2 x fdatasync p99 + 200 us", dur);
    bench_target_add(ts, fig(&d, (double)d.over_10ms), BENCH_AT_MOST, 0, "publishes",
                     "%s light, publishes over 10 ms in %g s (the issue's run: 300 s)", dur,
                     o->seconds);
    return 0;
}

/* The ack row at 80% of @p max. */
static int loaded_row(const bench_opts_t *o, void *ctx, const bodies_t *b, double max)
{
    dist_t d;
    double got = 0, cm[2];
    char label[96];
    watch_t w;
    if (ack_row(o, ctx, b, "fsync", 0.8 * max, BATCH, PRODUCERS, &d, &got, cm, &w) != 0)
        return -1;
    snprintf(label, sizeof label, "ack, 80%% of max (%.0f ev/s, batches), %s", got,
             row_durability(o, "fsync"));
    print_dist(label, &d, NULL);
    snprintf(label, sizeof label, "ack, 80%% of max, %s", row_durability(o, "fsync"));
    watch_end(&w, label);
    bench_target_add(bench_targets(), fig(&d, d.p99 / 1e3), BENCH_AT_MOST, 20, "ms",
                     "%s at 80%% of max, ack p99 <= 20 ms", row_durability(o, "fsync"));
    return 0;
}

/* --row: the floor and the light row, or the maximum and the 80% row or the delivery rows;
 * rounds times. */
static int one_row(const bench_opts_t *o, void *ctx, const bodies_t *b)
{
    floors_t f;
    bool light = strcmp(o->row, "light") == 0;
    double max = 0;
    if (light ? floors(o, &f) != 0 : (max = ingest_row(o, ctx, b, "fsync")) <= 0)
        return AB_BENCH_FAIL;
    for (int k = 0; k < o->rounds; k++)
        if (light                           ? light_row(o, ctx, b, &f) != 0
            : strcmp(o->row, "loaded") == 0 ? loaded_row(o, ctx, b, max) != 0
                                            : delivery_rows(o, ctx, b, max) != 0)
            return AB_BENCH_FAIL;
    return AB_BENCH_OK;
}

/* The light process ack row, in round trips of the floors @p f. */
static int process_row(const bench_opts_t *o, void *ctx, const bodies_t *b, const floors_t *f)
{
    dist_t d;
    double got = 0, cm[2];
    char extra[200];
    const char *label = "ack, 1 event/publish, 1,000/s, process";
    watch_t w;
    if (ack_row(o, ctx, b, "process", PACE_HZ, 1, 1, &d, &got, cm, &w) != 0)
        return -1;
    snprintf(extra, sizeof extra,
             "  [p50 = %.1f ZeroMQ round trips of two contexts (%.1f of one); store commit "
             "p50 %.0f, p99 %.0f us]",
             f->rt2.p50 > 0 ? d.p50 / f->rt2.p50 : 0, f->rt1.p50 > 0 ? d.p50 / f->rt1.p50 : 0,
             cm[0], cm[1]);
    print_dist(label, &d, extra);
    watch_end(&w, label);
    bench_targets_t *ts = bench_targets();
    bench_target_add(ts, fig(&d, d.p50), BENCH_AT_MOST, fig(&f->rt2, 2 * f->rt2.p50), "us",
                     "process light, ack p50 <= 2 round trips (two contexts)");
    bench_target_add(ts, fig(&d, d.p99), BENCH_AT_MOST, 1000, "us",
                     "process light, ack p99 <= 1 ms");
    return 0;
}

static int all_rows(const bench_opts_t *o, void *ctx, const bodies_t *b)
{
    floors_t f;
    if (floors(o, &f) != 0 || light_row(o, ctx, b, &f) != 0 ||
        (!o->broker && process_row(o, ctx, b, &f) != 0)) /* one broker: no second durability */
        return AB_BENCH_FAIL;
    double max = ingest_row(o, ctx, b, "fsync");
    if (max <= 0 || loaded_row(o, ctx, b, max) != 0)
        return AB_BENCH_FAIL;
    return delivery_rows(o, ctx, b, max) == 0 ? AB_BENCH_OK : AB_BENCH_FAIL;
}

/* Every row (or --row's), then the targets those rows judged, even when a later row failed. */
int bench_latency(const bench_opts_t *o, void *ctx, const bodies_t *b)
{
    int rc = o->row != NULL ? one_row(o, ctx, b) : all_rows(o, ctx, b);
    bench_targets_report(bench_targets(), "latency", stdout);
    return rc;
}

/* ---- how cost grows with the runs in flight ------------------------------------ */

/* A row of bench scale: runs in flight, runs per thread (0 = the 4 producers' 4 threads hold
 * them all), how a batch's events go to them, its --row name. */
typedef struct scale_row {
    int runs, per;
    spread_t spread;
    const char *name;
} scale_row_t;

static const scale_row_t SCALE_ROWS[] = {
    {100, 0, SPREAD_TURN, "100"}, /* the base of every other row's share */
    {10000, 0, SPREAD_TURN, "10000"},
    {100000, 0, SPREAD_TURN, "100000"},
    {100000, 1, SPREAD_TURN, "100000-each"},
    {10000, 0, SPREAD_SCATTER, "10000-scatter"},
    {100000, 0, SPREAD_SCATTER, "100000-scatter"},
    {100000, 1, SPREAD_SCATTER, "100000-each-scatter"},
};

/* One scale row; its share of @p base (0: it is the base). @return its events/s, or -1. */
static double scale_row(const bench_opts_t *o, void *ctx, const bodies_t *b, const scale_row_t *row,
                        double base)
{
    const char *d = o->durability ? o->durability : "fsync";
    double r = ingest_row_runs(o, ctx, b, d, row->runs, row->spread, row->per);
    if (r <= 0)
        return -1;
    bool scatter = row->spread == SPREAD_SCATTER;
    char label[80];
    snprintf(label, sizeof label, "%d runs in flight%s%s", row->runs,
             row->per ? ", a thread each" : "", scatter ? ", scattered" : "");
    bench_emit("scale", label, "events_per_s", r, "share_of_base", base > 0 ? r / base : 1.0, NULL);
    if (row->runs == 100000 && base > 0)
        bench_target_add(bench_targets(), 100 * r / base, BENCH_AT_LEAST, 70, "%",
                         "%s, %s, ingest >= 70%% of the 100-run figure", label,
                         row_durability(o, d));
    printf("scale   ingest, %6d runs in flight, %s, %s: %8.0f events/s acked, %3.0f%% of the "
           "100-run figure of this run\n",
           row->runs, row->per ? "a thread each" : "in 4 threads ",
           scatter ? "batches scattered over them" : "batches over them in turn ", r,
           base > 0 ? 100 * r / base : 100.0);
    fflush(stdout);
    return r;
}

bool bench_scale_row_known(const char *name)
{
    for (size_t i = 1; i < sizeof SCALE_ROWS / sizeof SCALE_ROWS[0]; i++)
        if (strcmp(name, SCALE_ROWS[i].name) == 0)
            return true;
    return false;
}

int bench_scale(const bench_opts_t *o, void *ctx, const bodies_t *b)
{
    size_t n = sizeof SCALE_ROWS / sizeof SCALE_ROWS[0];
    int rounds = o->row != NULL ? o->rounds : 1, rc = AB_BENCH_OK;
    for (int k = 0; k < rounds && rc == AB_BENCH_OK; k++) { /* --row: the base, then that row */
        double base = scale_row(o, ctx, b, &SCALE_ROWS[0], 0);
        rc = base > 0 ? AB_BENCH_OK : AB_BENCH_FAIL;
        for (size_t i = 1; i < n && rc == AB_BENCH_OK; i++)
            if ((o->row == NULL || strcmp(o->row, SCALE_ROWS[i].name) == 0) &&
                scale_row(o, ctx, b, &SCALE_ROWS[i], base) < 0)
                rc = AB_BENCH_FAIL;
    }
    bench_targets_report(bench_targets(), "scale", stdout);
    return rc;
}

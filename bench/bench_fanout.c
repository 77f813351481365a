/*
 * bench_fanout.c - `agentbus bench fanout`: live delivery to 1 and 4
 * subscribers while the bus ingests, each row beside raw ZeroMQ PUB/SUB
 * fan-out measured just before it (docs/PERFORMANCE.md, "Fan-out").
 *
 * Invariants:
 *  1. Every wait is bounded (subscriber connect, catch-up after the load).
 *  2. A row fails unless every subscriber delivered exactly the events the
 *     producers got acknowledged, each once, in commit order.
 */
#include "ab_common.h"
#include "agentbus/subscriber.h"
#include "bench.h"
#include "bench_int.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

/* ---- fanout: live delivery to 1 and 4 subscribers while ingesting ---------- */

#define FAN_MAX_SUBS 4

/* Raw ZeroMQ PUB/SUB: one SUB socket per thread, counting 256-byte messages
 * tagged 'm' (measured) after the 'w' warm-up ones that beat the slow joiner. */
typedef struct rawsub {
    void *sock;
    atomic_int *stop;
    atomic_int got_warm;
    _Atomic uint64_t n; /* measured messages received; read by the publisher */
} rawsub_t;

static void *rawsub_main(void *arg)
{
    rawsub_t *r = arg;
    char buf[EVENT_SIZE];
    int tmo = 100;
    zmq_setsockopt(r->sock, ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
    for (;;) {
        int rc = zmq_recv(r->sock, buf, sizeof(buf), 0);
        if (rc < 0) {
            if (atomic_load(r->stop))
                break;
            continue;
        }
        if (rc > 0 && buf[0] == 'w')
            atomic_store(&r->got_warm, 1);
        else
            atomic_fetch_add_explicit(&r->n, 1, memory_order_relaxed);
    }
    return NULL;
}

/* Messages/s received by each of @p nsub raw SUB sockets during the
 * publishing window, lossless (ZMQ_XPUB_NODROP: the PUB waits for the slowest
 * SUB instead of dropping, as the bus must deliver everything); min and mean. */
static int fan_raw(const bench_opts_t *o, int nsub, double *min, double *mean)
{
    void *ctx = zmq_ctx_new();
    char ep[128];
    void *pub = zsock(ctx, ZMQ_PUB, "tcp://127.0.0.1:*", ep, sizeof(ep));
    int one = 1; /* lossless: at the HWM the send fails (EAGAIN) instead of dropping */
    zmq_setsockopt(pub, ZMQ_XPUB_NODROP, &one, sizeof(one));
    atomic_int stop;
    atomic_init(&stop, 0);
    rawsub_t r[FAN_MAX_SUBS];
    pthread_t th[FAN_MAX_SUBS];
    for (int i = 0; i < nsub; i++) {
        r[i].sock = zsock(ctx, ZMQ_SUB, NULL, ep, sizeof(ep));
        r[i].stop = &stop;
        atomic_init(&r[i].got_warm, 0);
        atomic_init(&r[i].n, 0);
        zmq_setsockopt(r[i].sock, ZMQ_SUBSCRIBE, "", 0);
        pthread_create(&th[i], NULL, rawsub_main, &r[i]);
    }
    char payload[EVENT_SIZE];
    memset(payload, 'w', sizeof(payload));
    int rc = 0;
    double dl = ab__mono_s() + 5;
    for (int ready = 0; ready < nsub;) { /* bounded warm-up: every SUB connected */
        zmq_send(pub, payload, sizeof(payload), ZMQ_DONTWAIT);
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
        ready = 0;
        for (int i = 0; i < nsub; i++)
            ready += atomic_load(&r[i].got_warm);
        if (ab__mono_s() > dl) {
            rc = -1;
            break;
        }
    }
    payload[0] = 'm';
    double t0 = ab__mono_s(), end = t0 + o->seconds;
    for (uint64_t n = 0; rc == 0 && ((n & 1023) || ab__mono_s() < end);) {
        if (zmq_send(pub, payload, sizeof(payload), 0) >= 0)
            n++;
        else
            sched_yield(); /* ZMQ_XPUB_NODROP: EAGAIN at the HWM of the slowest SUB */
    }
    double dt = ab__mono_s() - t0;
    uint64_t got[FAN_MAX_SUBS];
    for (int i = 0; i < nsub; i++)
        got[i] = atomic_load(&r[i].n);
    atomic_store(&stop, 1);
    *min = 0;
    *mean = 0;
    for (int i = 0; i < nsub; i++) {
        pthread_join(th[i], NULL);
        double rate = (double)got[i] / dt;
        *min = i == 0 || rate < *min ? rate : *min;
        *mean += rate / nsub;
        zmq_close(r[i].sock);
    }
    zmq_close(pub);
    zmq_ctx_term(ctx);
    return rc;
}

/* A bus subscriber (ab_sub_t, scope "all", from now) in its own thread. */
typedef struct fansub {
    ab_sub_t *sub;
    atomic_int *done;         /* producers finished; *target is set */
    _Atomic uint64_t *target; /* events acknowledged in all */
    uint64_t delivered, replayed;
    uint64_t last_pos; /* commit position of the last event delivered */
    double t_last;
    double cpu_s; /* the subscriber thread's CPU time (decode, checks, callback) */
    int failed;
    ab_sub_stats_t st;
} fansub_t;

static int fansub_event(void *ud, const ab_sub_event_t *e)
{
    fansub_t *f = ud;
    if (e->stamp.pos <= f->last_pos)
        f->failed = 1; /* scope all delivers in commit order, each event once */
    f->last_pos = e->stamp.pos;
    f->delivered++;
    f->replayed += e->replayed; /* came from the store after a hole: recovered loss */
    return 0;
}

static void *fansub_main(void *arg)
{
    fansub_t *f = arg;
    double dl = 0;
#ifdef __linux__
    (void)prctl(PR_SET_NAME, "bench-sub", 0, 0, 0); /* per-thread figures in top -H, perf */
#endif
    for (;;) {
        ab_error_t err = AB_ERROR_INIT;
        uint64_t before = f->delivered;
        ab_status_t rc = ab_sub_poll(f->sub, 50, &err);
        if (f->delivered != before)
            f->t_last = ab__mono_s();
        if (rc != AB_OK && !ab_status_retryable(rc)) {
            fprintf(stderr, "agentbus bench: subscriber: %s\n", err.message);
            f->failed = 1;
            break;
        }
        if (atomic_load(f->done)) {
            if (f->delivered >= atomic_load(f->target))
                break;
            if (dl == 0)
                dl = ab__mono_s() + 30; /* bounded catch-up after the load */
            if (ab__mono_s() > dl) {
                f->failed = 1;
                break;
            }
        }
    }
    f->st = ab_sub_stats(f->sub);
    struct timespec cpu;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    f->cpu_s = (double)cpu.tv_sec + (double)cpu.tv_nsec / 1e9;
    return NULL;
}

/* One bus row; nsub 0 = ingest alone (the row's figure goes to *solo); skip_body: the
 * subscribers do not decode event bodies (ab_sub_opts_t.skip_body). raw_min is the
 * raw figure measured just before the row; *pct gets the row's share of it. */
static int fan_bus(const bench_opts_t *o, void *ctx, const bodies_t *b, int nsub, int rcvhwm,
                   bool skip_body, double raw_min, double *solo, double *pct)
{
    child_t ch;
    const char *ep;
    if (rcvhwm > 0 && !o->broker) { /* the broker's PUB gets the same tiny high-water mark */
        memset(&ch, 0, sizeof(ch));
        spawn_opts_t so = {.tmp_prefix = "agentbus-bench",
                           .quiet = true,
                           .extra = {"--durability", "process", "--hwm", "16",
                                     g_snapshot_every ? "--snapshot-every" : NULL,
                                     g_snapshot_every}};
        if (spawn_broker(&ch, &so) != 0) {
            fprintf(stderr, "agentbus bench: the broker did not start\n");
            return -1;
        }
        ep = ch.cmd;
    } else if (row_begin(o, &ch, "process", &ep) != 0) {
        return -1;
    }
    atomic_int done;
    atomic_init(&done, 0);
    _Atomic uint64_t target;
    atomic_init(&target, 0);
    fansub_t f[FAN_MAX_SUBS];
    pthread_t th[FAN_MAX_SUBS];
    int nok = 0, rc = -1;
    for (; nok < nsub; nok++) {
        f[nok] = (fansub_t){.done = &done, .target = &target};
        ab_sub_opts_t so = {.scope = AB_SUB_ALL,
                            .start = AB_SUB_FROM_NOW,
                            .on_event = fansub_event,
                            .ud = &f[nok],
                            .rcvhwm = rcvhwm,
                            .timeout_ms = 10000,
                            .skip_body = skip_body};
        ab_error_t err = AB_ERROR_INIT;
        if (ab_sub_new(&f[nok].sub, ep, &so, &err) != AB_OK ||
            ab_sub_poll(f[nok].sub, 200, &err) != AB_OK) { /* connected, first replay done */
            fprintf(stderr, "agentbus bench: subscriber: %s\n", err.message);
            ab_sub_destroy(&f[nok].sub);
            break;
        }
    }
    if (nok < nsub)
        goto out;
    for (int i = 0; i < nsub; i++)
        pthread_create(&th[i], NULL, fansub_main, &f[i]);
    prod_t tmpl = load_producer(ep, ctx, b, o->seconds, "fanout-%d");
    prod_t ps[PRODUCERS];
    double t0 = ab__mono_s();
    double ingest = run_producers(&tmpl, PRODUCERS, ps);
    uint64_t acked = 0;
    for (int i = 0; i < PRODUCERS; i++)
        acked += ps[i].acked - ps[i].duplicates;
    atomic_store(&target, acked);
    atomic_store(&done, 1);
    double min = 0, mean = 0;
    uint64_t rec = 0, holes = 0, replays = 0, delivered = 0;
    double cpu = 0;
    int failed = ingest < 0;
    if (acked == 0) { /* nothing fresh: a row measured nothing (runs already stored?) */
        fprintf(stderr, "agentbus bench: no fresh event was acknowledged in this row\n");
        failed = 1;
    }
    for (int i = 0; i < nsub; i++) {
        pthread_join(th[i], NULL);
        double rate = f[i].t_last > t0 ? (double)f[i].delivered / (f[i].t_last - t0) : 0;
        min = i == 0 || rate < min ? rate : min;
        mean += rate / nsub;
        rec += f[i].replayed;
        delivered += f[i].delivered;
        cpu += f[i].cpu_s;
        holes += f[i].st.holes;
        replays += f[i].st.replays > 0 ? f[i].st.replays - 1 : 0; /* minus the first one */
        failed |= f[i].failed || f[i].delivered != acked;
    }
    if (nsub == 0) {
        *solo = ingest;
        bench_emit("fanout", "bus, no subscriber", "ingest_per_s", ingest, NULL);
        printf("fanout  bus, no subscriber: ingest %8.0f ev/s acked (the ceiling of every row "
               "below)\n",
               ingest);
        rc = failed ? -1 : 0;
        goto out;
    }
    char hwm[48] = "";
    if (rcvhwm > 0)
        snprintf(hwm, sizeof(hwm), ", hwm %d", rcvhwm);
    else if (skip_body)
        snprintf(hwm, sizeof(hwm), ", bodies not decoded");
    *pct = raw_min > 0 ? 100 * min / raw_min : 0;
    char row[80];
    snprintf(row, sizeof row, "bus %d subscriber%s%s", nsub, nsub > 1 ? "s" : "", hwm);
    bench_emit("fanout", row, "ingest_per_s", ingest, "delivered_min_per_s", min,
               "delivered_mean_per_s", mean, "share_of_raw", *pct / 100, "recovered", (double)rec,
               "all_delivered", failed ? 0.0 : 1.0, NULL);
    printf("fanout  bus %d subscriber%s%s: ingest %8.0f ev/s acked; delivered per subscriber min "
           "%8.0f mean %8.0f ev/s (%3.0f%% of raw %.0f msg/s measured just before, %3.0f%% of "
           "ingest); recovered by catch-up %llu "
           "events (all subscribers; %llu holes, %llu replays); every event delivered to every "
           "subscriber: %s; subscriber thread CPU %.2f us/event; %3.0f%% of ingest alone\n",
           nsub, nsub > 1 ? "s" : " ", hwm, ingest, min, mean, *pct, raw_min,
           ingest > 0 ? 100 * min / ingest : 0, (unsigned long long)rec, (unsigned long long)holes,
           (unsigned long long)replays, failed ? "NO" : "yes",
           delivered ? cpu * 1e6 / (double)delivered : 0, *solo > 0 ? 100 * min / *solo : 0);
    rc = failed ? -1 : 0;
out:
    for (int i = 0; i < nok; i++)
        ab_sub_destroy(&f[i].sub);
    child_stop(&ch);
    return rc;
}

/*
 * A bus row beside the raw figure measured just before it (same subscriber
 * count, half the row's time, at least 1 s): the machine's speed drifts over
 * a whole run (raw rows of one run differ by up to 1.6x here), so each row is
 * compared with the raw fan-out of the same moment.
 */
static int fan_row(const bench_opts_t *o, void *ctx, const bodies_t *b, int nsub, int rcvhwm,
                   bool skip_body, double *solo, double *pct)
{
    double rmin = 0, rmean = 0;
    bench_opts_t ro = *o;
    ro.seconds = o->seconds / 2 < 1 ? (o->seconds < 1 ? o->seconds : 1) : o->seconds / 2;
    if (nsub > 0 && fan_raw(&ro, nsub, &rmin, &rmean) != 0) {
        fprintf(stderr, "agentbus bench: raw PUB/SUB: a subscriber never connected\n");
        return -1;
    }
    return fan_bus(o, ctx, b, nsub, rcvhwm, skip_body, rmin, solo, pct);
}

static int cmp_pct(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The 4-subscriber row (full decode, or bodies not decoded) over o->rounds rounds. */
static int fan_rounds(const bench_opts_t *o, void *ctx, const bodies_t *b, bool skip_body,
                      double *solo)
{
    double pct[64];
    int n = 0, rc = 0;
    for (; n < o->rounds; n++)
        if (fan_row(o, ctx, b, FAN_MAX_SUBS, 0, skip_body, solo, &pct[n]) != 0)
            rc = -1;
    if (o->rounds > 1) {
        qsort(pct, (size_t)n, sizeof(pct[0]), cmp_pct);
        printf("fanout  bus %d subscribers%s over %d rounds: of raw measured just before, median "
               "%.0f%% (min %.0f%%, max %.0f%%)\n",
               FAN_MAX_SUBS, skip_body ? ", bodies not decoded" : "", n, pct[n / 2], pct[0],
               pct[n - 1]);
    }
    return rc;
}

int bench_fanout(const bench_opts_t *o, void *ctx, const bodies_t *b)
{
    static const int counts[] = {1, FAN_MAX_SUBS};
    double raw[2][2];
    for (int k = 0; k < 2; k++) {
        if (fan_raw(o, counts[k], &raw[k][0], &raw[k][1]) != 0) {
            fprintf(stderr, "agentbus bench: raw PUB/SUB: a subscriber never connected\n");
            return AB_BENCH_FAIL;
        }
        char row[48];
        snprintf(row, sizeof row, "raw zmq PUB/SUB, %d subscriber%s", counts[k],
                 counts[k] > 1 ? "s" : "");
        bench_emit("fanout", row, "min_per_s", raw[k][0], "mean_per_s", raw[k][1], NULL);
        printf("fanout  raw zmq PUB/SUB %d B, %d subscriber%s: per subscriber min %9.0f mean "
               "%9.0f msg/s\n",
               EVENT_SIZE, counts[k], counts[k] > 1 ? "s" : " ", raw[k][0], raw[k][1]);
    }
    int rc = AB_BENCH_OK;
    double solo = 0, pct = 0; /* solo: ingest with no subscriber, the most a subscriber gets */
    if (fan_row(o, ctx, b, 0, 0, false, &solo, &pct) != 0 ||
        fan_row(o, ctx, b, 1, 0, false, &solo, &pct) != 0 ||
        fan_rounds(o, ctx, b, false, &solo) != 0 ||
        fan_rounds(o, ctx, b, true, &solo) != 0) /* true: forwarders, bodies not decoded */
        rc = AB_BENCH_FAIL;
    /* tiny high-water marks (broker PUB and SUB): live events are lost, the
     * subscribers fill the holes from the store */
    if (fan_row(o, ctx, b, FAN_MAX_SUBS, 16, false, &solo, &pct) != 0)
        rc = AB_BENCH_FAIL;
    return rc;
}

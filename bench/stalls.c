/*
 * stalls.c - the slow-sample log and the timer thread of `bench latency
 * --stalls` (stalls.h).
 *
 * Invariants:
 *  1. A log never holds more than BENCH_SPANS spans; every span noted is
 *     counted (kept or in `over`) and its length is in `max`.
 *  2. The meter's spans are in time order and disjoint: each runs from a
 *     due time to the wake-up that served it, and the next due time is after
 *     that wake-up.
 *  3. bench_meter_stop() joins the thread before it hands the log over, so
 *     the log is never read while the thread writes it.
 */
#include "stalls.h"

#include "ab_common.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

int bench_spans_init(bench_spans_t *s)
{
    *s = (bench_spans_t){0};
    s->v = malloc(BENCH_SPANS * sizeof(*s->v));
    return s->v ? 0 : -1;
}

void bench_spans_free(bench_spans_t *s)
{
    free(s->v);
    *s = (bench_spans_t){0};
}

void bench_spans_note(bench_spans_t *s, double t0, double dt, double min)
{
    if (dt < min)
        return;
    if (dt > s->max)
        s->max = dt;
    if (s->v != NULL && s->n < BENCH_SPANS)
        s->v[s->n++] = (bench_span_t){t0, dt};
    else
        s->over++;
}

uint64_t bench_spans_count(const bench_spans_t *s)
{
    return (uint64_t)s->n + s->over;
}

/* Whether [t0, t1] meets a span of @p b (in order, disjoint): the first span ending at or
 * after t0, found by bisection, must begin at or before t1. */
static int meets(const bench_spans_t *b, double t0, double t1)
{
    size_t lo = 0, hi = b->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b->v[mid].t0 + b->v[mid].dt < t0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < b->n && b->v[lo].t0 <= t1;
}

size_t bench_spans_overlap(const bench_spans_t *a, const bench_spans_t *b)
{
    size_t k = 0;
    for (size_t i = 0; i < a->n; i++)
        k += meets(b, a->v[i].t0, a->v[i].t0 + a->v[i].dt) ? 1 : 0;
    return k;
}

double bench_meter_woke(bench_spans_t *late, double due, double woke)
{
    double lag = woke - due;
    bench_spans_note(late, due, lag, BENCH_LATE_S);
    double next = due + BENCH_TICK_S;
    if (next <= woke) /* ticks were missed: the next one after the wake-up */
        next += BENCH_TICK_S * (double)(long)((woke - next) / BENCH_TICK_S + 1);
    return next;
}

struct bench_meter {
    pthread_t th;
    atomic_bool stop;
    _Atomic uint64_t ticks;
    bench_spans_t late;
};

static void *meter_main(void *arg)
{
    bench_meter_t *m = arg;
    double due = ab__mono_s() + BENCH_TICK_S;
    while (!atomic_load(&m->stop)) {
        struct timespec ts = {(time_t)due, (long)((due - (double)(time_t)due) * 1e9)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
        }
        due = bench_meter_woke(&m->late, due, ab__mono_s());
        atomic_fetch_add(&m->ticks, 1);
    }
    return NULL;
}

bench_meter_t *bench_meter_start(void)
{
    bench_meter_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    atomic_init(&m->stop, false);
    atomic_init(&m->ticks, 0);
    if (bench_spans_init(&m->late) != 0 || pthread_create(&m->th, NULL, meter_main, m) != 0) {
        bench_spans_free(&m->late);
        free(m);
        return NULL;
    }
    return m;
}

uint64_t bench_meter_ticks(bench_meter_t *m)
{
    return atomic_load(&m->ticks);
}

void bench_meter_stop(bench_meter_t *m, bench_spans_t *late)
{
    atomic_store(&m->stop, true);
    pthread_join(m->th, NULL);
    *late = m->late;
    free(m);
}

double bench_paced_start(double due, double began, double prev_end)
{
    return prev_end > due ? due : began;
}

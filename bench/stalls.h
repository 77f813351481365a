/*
 * stalls.h - `agentbus bench latency --stalls`: what a slow sample overlapped
 * (bench/stalls.c, docs/PERFORMANCE.md "Stalls: the machine's, named").
 *
 * A row keeps the samples over BENCH_SLOW_S (when each began, how long it
 * took) in a bounded log; beside it, a thread of the bench process wakes
 * every millisecond on an absolute timer and logs every wake-up late by
 * BENCH_LATE_S or more: a span of time in which this process could not run
 * a thread that was due. A slow sample that overlaps such a span was slowed
 * by the machine (a CPU taken from every thread at once: the hypervisor,
 * the other core busy, an interrupt storm), not by the path it measured.
 * Not installed; figures only, nothing here asserts a time.
 */
#ifndef AB_BENCH_STALLS_H
#define AB_BENCH_STALLS_H

#include <stddef.h>
#include <stdint.h>

#define BENCH_SLOW_S 0.005 /* a sample this long or longer is logged */
#define BENCH_LATE_S 0.002 /* the timer thread woke this late or later: a stall */
#define BENCH_SPANS  16384 /* spans a log keeps; later ones are only counted */
#define BENCH_TICK_S 0.001 /* the timer thread's period */

/* A span of time: it began at t0 (ab__mono_s() seconds) and lasted dt seconds. */
typedef struct bench_span {
    double t0, dt;
} bench_span_t;

/* A bounded log of spans, in the order they were noted. */
typedef struct bench_spans {
    bench_span_t *v; /* BENCH_SPANS entries, or NULL: nothing kept, only counted */
    size_t n;        /* kept */
    uint64_t over;   /* noted beyond BENCH_SPANS, not kept */
    double max;      /* the longest noted, kept or not */
} bench_spans_t;

/** A log with room for BENCH_SPANS spans; 0, or -1 out of memory (then @p s counts only). */
int bench_spans_init(bench_spans_t *s);
void bench_spans_free(bench_spans_t *s);
/** Note a span when @p dt >= @p min (kept while there is room, always counted). */
void bench_spans_note(bench_spans_t *s, double t0, double dt, double min);
/** Every span noted, kept or not. */
uint64_t bench_spans_count(const bench_spans_t *s);

/**
 * How many of @p a's spans overlap at least one of @p b's. @p b must be in time order and
 * its spans disjoint (the timer thread's are: each ends when it woke, before the next is
 * due). An end touching a start counts as an overlap.
 */
size_t bench_spans_overlap(const bench_spans_t *a, const bench_spans_t *b);

/** The timer thread: logs its wake-ups late by BENCH_LATE_S or more. */
typedef struct bench_meter bench_meter_t;

/** Start the thread; NULL when it cannot (out of memory, no thread). */
bench_meter_t *bench_meter_start(void);
/** Its ticks so far (each wake-up; for a test that it runs). */
uint64_t bench_meter_ticks(bench_meter_t *m);
/** Stop and free it; its stalls are moved to @p late (freed by the caller). */
void bench_meter_stop(bench_meter_t *m, bench_spans_t *late);

/**
 * One wake-up of the meter, due at @p due and woken at @p woke: notes the span [due, woke]
 * in @p late when it is BENCH_LATE_S or longer; returns the next due time (due + a tick,
 * or, after a stall, the first tick after @p woke: missed ticks are not caught up).
 */
double bench_meter_woke(bench_spans_t *late, double due, double woke);

/**
 * Where a paced floor sample's clock starts (no coordinated omission). A floor loop is
 * due to begin sample n at @p due; it began at @p began, after the previous sample ended
 * at @p prev_end. When that was after @p due, the sample waited in line behind it, as a
 * request sent on time waits behind a slow one, and its clock starts at @p due; else at
 * @p began, so that the bench's own late wake-up from its sleep is not counted. An
 * acknowledgement row keeps sending on time while the broker is stalled (up to 64 in
 * flight), so a stall of X ms there makes about X slow samples; with this rule a floor's
 * stall makes as many.
 */
double bench_paced_start(double due, double began, double prev_end);

#endif

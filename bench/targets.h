/*
 * targets.h - the targets issue 15 set for `agentbus bench latency`, `scale`
 * and `snapshot`, judged on the figures of the run that measured them
 * (bench/targets.c, docs/PERFORMANCE.md "The targets, judged by the bench").
 *
 * A row that has a target adds it here as it is measured (its figure, the
 * bound and the limit, the limit itself made of figures of the same run where
 * the issue says so: a floor, the row's own acknowledgements); the bench then
 * reports them all together after its last row: one `target` line each with
 * its verdict, and a count. A list holds BENCH_TARGETS_MAX; more are counted
 * and said to be left out. Not installed; a verdict states what this run
 * measured, and no test asserts one.
 */
#ifndef AB_BENCH_TARGETS_H
#define AB_BENCH_TARGETS_H

#include "agentbus/status.h" /* AB_PRINTF */

#include <stdio.h>

#define BENCH_TARGETS_MAX 64 /* targets a list holds; later ones are counted, not kept */

/** How a figure must stand against its limit. */
typedef enum bench_bound {
    BENCH_AT_MOST,  /**< value <= limit */
    BENCH_UNDER,    /**< value < limit */
    BENCH_AT_LEAST, /**< value >= limit */
} bench_bound_t;

typedef struct bench_target {
    char what[160]; /**< the target in words, with the row it judges */
    double value;   /**< the row's figure; NaN: the row gave none (not judged) */
    double limit;   /**< what the figure must be at most, under or at least */
    bench_bound_t bound;
    const char *unit; /**< a static string: "us", "ms", "%", "publishes" */
} bench_target_t;

typedef struct bench_targets {
    bench_target_t t[BENCH_TARGETS_MAX];
    int n;       /**< kept, in the order added */
    int dropped; /**< added beyond BENCH_TARGETS_MAX */
} bench_targets_t;

/** The list the benchmarks of this process add to (one bench runs at a time). */
bench_targets_t *bench_targets(void);

/** Add a target; @p what is printf-style. */
void bench_target_add(bench_targets_t *ts, double value, bench_bound_t bound, double limit,
                      const char *unit, const char *what, ...) AB_PRINTF(6, 7);

/** 1 met, 0 not met, -1 not judged (the value or the limit is not a number). */
int bench_target_verdict(const bench_target_t *t);

/**
 * Write every target of @p ts to @p out (a `target` line each, then a `targets` line
 * counting those met and judged), emit them as `--json` rows of @p bench (`target: WHAT`:
 * `value`, `limit`, `met` 1 or 0, null when not judged; `targets`: `met`, `judged`,
 * `left_out`), and empty the list. Nothing is written when the list is empty.
 * @return the number met.
 */
int bench_targets_report(bench_targets_t *ts, const char *bench, FILE *out);

#endif

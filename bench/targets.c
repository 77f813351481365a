/*
 * targets.c - issue 15's targets judged on the figures of one bench run
 * (targets.h).
 *
 * Invariants:
 *  1. A list never holds more than BENCH_TARGETS_MAX; a target added past
 *     that is counted in `dropped`, and the report says how many were left
 *     out, so a count of targets met is never read as all of them.
 *  2. A target whose value or limit is not a number (a row with no sample)
 *     is reported "not judged" and counted neither met nor judged.
 *  3. The report empties the list: a bench that reports twice (rounds)
 *     reports each target once.
 */
#include "targets.h"

#include "bench.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

static bench_targets_t g_targets;

bench_targets_t *bench_targets(void)
{
    return &g_targets;
}

void bench_target_add(bench_targets_t *ts, double value, bench_bound_t bound, double limit,
                      const char *unit, const char *what, ...)
{
    if (ts->n >= BENCH_TARGETS_MAX) {
        ts->dropped++;
        return;
    }
    bench_target_t *t = &ts->t[ts->n++];
    va_list ap;
    va_start(ap, what);
    vsnprintf(t->what, sizeof t->what, what, ap);
    va_end(ap);
    t->value = value;
    t->limit = limit;
    t->bound = bound;
    t->unit = unit;
}

int bench_target_verdict(const bench_target_t *t)
{
    if (isnan(t->value) || isnan(t->limit))
        return -1;
    switch (t->bound) {
    case BENCH_AT_MOST: return t->value <= t->limit;
    case BENCH_UNDER: return t->value < t->limit;
    case BENCH_AT_LEAST: return t->value >= t->limit;
    }
    return -1;
}

static const char *bound_word(bench_bound_t b)
{
    return b == BENCH_AT_MOST ? "at most" : b == BENCH_UNDER ? "under" : "at least";
}

/* A figure as the human line shows it: whole numbers, but tenths below 100 of a unit. */
static void put_figure(FILE *out, double v)
{
    if (fabs(v) < 100 && v != floor(v))
        fprintf(out, "%.1f", v);
    else
        fprintf(out, "%.0f", v);
}

static void report_one(const bench_target_t *t, const char *bench, FILE *out)
{
    int v = bench_target_verdict(t);
    char row[sizeof t->what + 8];
    snprintf(row, sizeof row, "target: %s", t->what);
    bench_emit(bench, row, "value", t->value, "limit", t->limit, "met", v < 0 ? NAN : (double)v,
               NULL);
    fprintf(out, "target  %s: ", t->what);
    if (isnan(t->value)) {
        fprintf(out, "no figure: not judged\n");
        return;
    }
    put_figure(out, t->value);
    fprintf(out, " %s, %s ", t->unit, bound_word(t->bound));
    put_figure(out, t->limit);
    fprintf(out, " %s: %s\n", t->unit, v < 0 ? "not judged" : v ? "met" : "not met");
}

int bench_targets_report(bench_targets_t *ts, const char *bench, FILE *out)
{
    if (ts->n == 0 && ts->dropped == 0)
        return 0;
    int met = 0, judged = 0;
    for (int i = 0; i < ts->n; i++) {
        report_one(&ts->t[i], bench, out);
        int v = bench_target_verdict(&ts->t[i]);
        judged += v >= 0;
        met += v > 0;
    }
    bench_emit(bench, "targets", "met", (double)met, "judged", (double)judged, "left_out",
               (double)ts->dropped, NULL);
    fprintf(out, "targets %d of %d met in this run (issue 15's targets, docs/PERFORMANCE.md)", met,
            judged);
    if (ts->dropped > 0)
        fprintf(out, "; %d more left out (a list holds %d)", ts->dropped, BENCH_TARGETS_MAX);
    fputc('\n', out);
    fflush(out);
    memset(ts, 0, sizeof *ts);
    return met;
}

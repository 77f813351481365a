/*
 * bench_json.c - `agentbus bench --json`: each result row also as one JSON
 * object on the real standard output, {"bench","row", figure: number...};
 * the human lines then go to standard error (cli/bench_cmd.c points fd 1
 * there and hands the real standard output to bench_json_open()).
 *
 * Invariants:
 *  1. One object per row, one line each, flushed as it is made, so a
 *     consumer sees a row as soon as its figure is known.
 *  2. Figure names are fixed per benchmark (docs/PERFORMANCE.md "Reading
 *     bench --json"); a number that is not finite is written as null.
 */
#include "ab_json_out.h"
#include "agentbus/json.h"
#include "bench.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static FILE *json_out;

bool bench_json_on(void)
{
    return json_out != NULL;
}

void bench_json_open(FILE *out)
{
    json_out = out;
}

static void put_str(const char *s)
{
    ab__json_str_out(json_out, s);
}

static void put_head(const char *bench, const char *row)
{
    fputs("{\"bench\":", json_out);
    put_str(bench);
    fputs(",\"row\":", json_out);
    put_str(row);
}

static void put_figure(const char *key, double v)
{
    fputc(',', json_out);
    put_str(key);
    if (isfinite(v))
        fprintf(json_out, ":%.10g", v);
    else
        fputs(":null", json_out);
}

static void put_end(void)
{
    fputs("}\n", json_out);
    fflush(json_out);
}

void bench_emit(const char *bench, const char *row, ...)
{
    if (json_out == NULL)
        return;
    put_head(bench, row);
    va_list ap;
    va_start(ap, row);
    const char *key;
    while ((key = va_arg(ap, const char *)) != NULL)
        put_figure(key, va_arg(ap, double));
    va_end(ap);
    put_end();
}

void bench_emit_pairs(const char *bench, const char *row, int n, const char *const *keys,
                      const double *vals)
{
    if (json_out == NULL)
        return;
    put_head(bench, row);
    for (int i = 0; i < n; i++)
        put_figure(keys[i], vals[i]);
    put_end();
}

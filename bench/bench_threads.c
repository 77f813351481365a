/*
 * bench_threads.c - a child broker's CPU by thread over a row of `bench ingest` and
 * `bench scale`: which thread bounds the row (one near 1.00 is the row's ceiling; a row
 * whose threads are all well below it waits on something else, such as the disk).
 *
 * Invariants:
 *  1. A thread is known by its name (/proc/PID/task/TID/comm); threads of one name are
 *     summed, so a name's figure may pass 1.00 only when several threads share it.
 *  2. A figure is the thread's CPU seconds (user + system) between the two readings over
 *     the wall seconds between them: 1.00 is one core busy all the row. A thread that
 *     ended between the readings is not counted; one that began counts from 0.
 *  3. Reading never fails the row: an unreadable entry is skipped, and at most
 *     BENCH_THREADS_MAX names are kept.
 */
#include "bench_int.h"

#include "ab_common.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool stat_cpu_s(const char *path, char *name, size_t size, double *cpu)
{
    char line[1024];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    bool ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    /* "pid (name) state ...": the name may hold spaces and parentheses, so the last ')' */
    const char *open = ok ? strchr(line, '(') : NULL, *close = ok ? strrchr(line, ')') : NULL;
    unsigned long ut = 0, st = 0;
    if (open == NULL || close == NULL || close < open ||
        sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return false;
    if (name != NULL && size > 0) {
        size_t n = (size_t)(close - open - 1);
        n = n < size - 1 ? n : size - 1;
        memcpy(name, open + 1, n);
        name[n] = '\0';
    }
    *cpu = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    return true;
}

static bench_thread_t *slot_of(bench_threads_t *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->th[i].name, name) == 0)
            return &t->th[i];
    if (t->n == BENCH_THREADS_MAX)
        return NULL; /* invariant 3 */
    bench_thread_t *s = &t->th[t->n++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->cpu_s = 0;
    return s;
}

void bench_threads_read(pid_t pid, bench_threads_t *t)
{
    memset(t, 0, sizeof *t);
    t->at = ab__mono_s();
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = pid > 0 ? opendir(dir) : NULL;
    if (d == NULL)
        return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char name[sizeof t->th[0].name], path[300];
        double cpu = 0;
        snprintf(path, sizeof path, "/proc/%d/task/%s/stat", (int)pid, e->d_name);
        if (e->d_name[0] == '.' || !stat_cpu_s(path, name, sizeof name, &cpu))
            continue;
        bench_thread_t *s = slot_of(t, name);
        if (s != NULL)
            s->cpu_s += cpu;
    }
    closedir(d);
    t->ok = t->n > 0;
}

static int busier(const void *a, const void *b)
{
    double x = ((const bench_thread_t *)a)->cpu_s, y = ((const bench_thread_t *)b)->cpu_s;
    return x < y   ? 1
           : x > y ? -1
                   : strcmp(((const bench_thread_t *)a)->name, ((const bench_thread_t *)b)->name);
}

/* The share of one core each thread of @p end used since @p begin, busiest first, into @p out. */
static void shares(const bench_threads_t *begin, const bench_threads_t *end, bench_threads_t *out)
{
    *out = *end;
    double dt = end->at - begin->at;
    for (int i = 0; i < out->n; i++) {
        double before = 0;
        for (int j = 0; j < begin->n; j++)
            if (strcmp(begin->th[j].name, out->th[i].name) == 0)
                before = begin->th[j].cpu_s;
        double used = out->th[i].cpu_s - before;
        out->th[i].cpu_s = dt > 0 && used > 0 ? used / dt : 0;
    }
    qsort(out->th, (size_t)out->n, sizeof out->th[0], busier);
}

void bench_threads_line(const char *label, const bench_threads_t *begin, const bench_threads_t *end)
{
    if (!begin->ok || !end->ok)
        return;
    bench_threads_t s;
    shares(begin, end, &s);
    const char *keys[BENCH_THREADS_MAX];
    double vals[BENCH_THREADS_MAX];
    char row[64];
    snprintf(row, sizeof row, "threads, %s", label);
    printf("threads durability=%-7s", label);
    int shown = 0;
    for (int i = 0; i < s.n; i++) {
        keys[i] = s.th[i].name;
        vals[i] = s.th[i].cpu_s;
        if (s.th[i].cpu_s >= 0.005) /* the idle ones are in the JSON row only */
            printf("%s %s %.2f", shown++ ? "," : "", s.th[i].name, s.th[i].cpu_s);
    }
    printf("  (the broker's CPU seconds per second of the row, by thread)\n");
    bench_emit_pairs("ingest", row, s.n, keys, vals);
}

/*
 * stats.c - the writer's figures (stats.h).
 *
 * Invariants:
 *  1. Memory is fixed: a ring of AB__STATS_WINDOW commit durations and
 *     AB__STATS_SECONDS + 1 one-second buckets; nothing grows with traffic.
 *  2. A rate counts the buckets of the last AB__STATS_SECONDS seconds before
 *     the current one (whole seconds), divided by their number; a bucket is
 *     reused when its second comes round again.
 *  3. Percentiles are nearest-rank over a sorted copy of the ring, made only
 *     when asked (a stats request, a metrics scrape), never on the commit path.
 *  4. The box (ab__statbox_t) is the only shared part: the writer copies its
 *     figures in after each group and the store's about once a second; the
 *     readers copy them out. A reader never waits for the writer's work,
 *     only for a copy of a few KiB.
 */
#include "stats.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBUCKETS (AB__STATS_SECONDS + 1)

void ab__wstats_commit(ab__wstats_t *s, size_t events, int64_t dur_us, int64_t now_us)
{
    s->commits++;
    s->events += events;
    s->lat_us[s->next] = dur_us < 0 ? 0 : dur_us > UINT32_MAX ? UINT32_MAX : (uint32_t)dur_us;
    s->next = (s->next + 1) % AB__STATS_WINDOW;
    if (s->nlat < AB__STATS_WINDOW)
        s->nlat++;
    int64_t sec = now_us / 1000000;
    size_t b = (size_t)(sec % NBUCKETS);
    if (s->per_s[b].sec != sec) /* invariant 2 */
        s->per_s[b].sec = sec, s->per_s[b].commits = 0, s->per_s[b].events = 0;
    s->per_s[b].commits++;
    s->per_s[b].events += events;
}

void ab__wstats_rejected(ab__wstats_t *s, ab_status_t code)
{
    s->rejected++;
    if (code > AB_OK && code < AB_STATUS_COUNT_)
        s->by_code[code]++;
    s->unlogged++;
}

void ab__wstats_tick(ab__wstats_t *s, int64_t now_us)
{
    if (s->unlogged == 0 || now_us - s->logged_us < AB__STATS_LOG_US)
        return;
    char line[512];
    size_t n = 0;
    for (int c = AB_OK + 1; c < AB_STATUS_COUNT_ && n < sizeof line; c++)
        if (s->by_code[c])
            n +=
                (size_t)snprintf(line + n, sizeof line - n, "%s%s %llu", n ? ", " : "",
                                 ab_status_name((ab_status_t)c), (unsigned long long)s->by_code[c]);
    ab__log(AB_LOG_INFO, "rejected %llu event(s) since the last such line: %s",
            (unsigned long long)s->unlogged, line);
    memset(s->by_code, 0, sizeof s->by_code);
    s->unlogged = 0;
    s->logged_us = now_us;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Nearest rank of @p pct (0..100) in the sorted @p v of @p n values. */
static uint64_t rank(const uint32_t *v, size_t n, unsigned pct)
{
    if (n == 0)
        return 0;
    size_t r = (n * pct + 99) / 100;
    return v[r == 0 ? 0 : r - 1];
}

void ab__wstats_fill(const ab__wstats_t *s, int64_t now_us, ab_stats_reply_t *out)
{
    out->commits = s->commits;
    out->events = s->events;
    out->rejected = s->rejected;
    int64_t sec = now_us / 1000000;
    uint64_t commits = 0, events = 0;
    for (size_t b = 0; b < NBUCKETS; b++)
        if (s->per_s[b].sec < sec && s->per_s[b].sec >= sec - AB__STATS_SECONDS) {
            commits += s->per_s[b].commits;
            events += s->per_s[b].events;
        }
    out->commits_per_s = commits / AB__STATS_SECONDS;
    out->events_per_s = events / AB__STATS_SECONDS;
    uint32_t sorted[AB__STATS_WINDOW];
    memcpy(sorted, s->lat_us, s->nlat * sizeof sorted[0]);
    qsort(sorted, s->nlat, sizeof sorted[0], cmp_u32);
    out->commit_p50_us = rank(sorted, s->nlat, 50);
    out->commit_p90_us = rank(sorted, s->nlat, 90);
    out->commit_p99_us = rank(sorted, s->nlat, 99);
    out->commit_max_us = s->nlat ? sorted[s->nlat - 1] : 0;
    out->commit_window = s->nlat;
}

void ab__statbox_init(ab__statbox_t *b)
{
    memset(b, 0, sizeof(*b));
    pthread_mutex_init(&b->mu, NULL);
}

void ab__statbox_destroy(ab__statbox_t *b)
{
    pthread_mutex_destroy(&b->mu);
}

void ab__statbox_publish(ab__statbox_t *b, const ab__wstats_t *w)
{
    pthread_mutex_lock(&b->mu);
    memcpy(&b->w, w, sizeof(*w));
    pthread_mutex_unlock(&b->mu);
}

void ab__statbox_store(ab__statbox_t *b, const ab_plugin_stats_t *s, bool known, int64_t now_us)
{
    pthread_mutex_lock(&b->mu);
    b->store = *s;
    b->store_known = known;
    b->store_us = now_us;
    pthread_mutex_unlock(&b->mu);
}

void ab__statbox_read(ab__statbox_t *b, ab__wstats_t *w, ab_plugin_stats_t *s, bool *known)
{
    pthread_mutex_lock(&b->mu);
    memcpy(w, &b->w, sizeof(*w));
    *s = b->store;
    *known = b->store_known;
    pthread_mutex_unlock(&b->mu);
}

/*
 * stats.h - the writer's own figures for `stats` and the metrics: group
 * commits, events, rejections, commit latency over the last commits and
 * rates over the last seconds (broker/stats.c). Owned by the writer thread.
 */
#ifndef AB_BROKER_STATS_H
#define AB_BROKER_STATS_H

#include "agentbus/codec.h"
#include "agentbus/plugin.h"
#include "agentbus/status.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Commits the latency percentiles are over. */
#define AB__STATS_WINDOW 1024
/** Seconds the rates are over. */
#define AB__STATS_SECONDS 10
/** Least interval between two log lines of rejection counts. */
#define AB__STATS_LOG_US (10 * 1000000LL)

typedef struct ab__wstats {
    uint64_t commits, events, rejected;
    uint32_t lat_us[AB__STATS_WINDOW]; /**< ring of commit durations */
    size_t nlat, next;
    struct {
        int64_t sec;
        uint64_t commits, events;
    } per_s[AB__STATS_SECONDS + 1];     /**< bucket sec % (SECONDS + 1) */
    uint64_t by_code[AB_STATUS_COUNT_]; /**< rejections not logged yet, by code */
    uint64_t unlogged;
    int64_t logged_us; /**< when the last rejection line was written */
} ab__wstats_t;

/** How often the writer asks the store for its figures (runs, sizes). */
#define AB__STATS_STORE_US 1000000LL

/**
 * What `stats` and the metrics read, without asking the writer: the
 * writer's figures as of its last group, and the store's as of its last
 * refresh (at most AB__STATS_STORE_US old). Guarded by mu; the writer
 * publishes into it, the command and metrics threads copy out of it.
 */
typedef struct ab__statbox {
    pthread_mutex_t mu;
    ab__wstats_t w;
    ab_plugin_stats_t store;
    bool store_known;
    int64_t store_us; /**< when the store's figures were read; 0 = never */
} ab__statbox_t;

void ab__statbox_init(ab__statbox_t *b);
void ab__statbox_destroy(ab__statbox_t *b);

/** The writer's figures after a group (a copy, under the lock). */
void ab__statbox_publish(ab__statbox_t *b, const ab__wstats_t *w);

/** The store's figures (@p known false: the plugin has none). */
void ab__statbox_store(ab__statbox_t *b, const ab_plugin_stats_t *s, bool known, int64_t now_us);

/** A consistent copy of everything. */
void ab__statbox_read(ab__statbox_t *b, ab__wstats_t *w, ab_plugin_stats_t *s, bool *known);

/** A group of @p events committed in @p dur_us, at monotonic time @p now_us. */
void ab__wstats_commit(ab__wstats_t *s, size_t events, int64_t dur_us, int64_t now_us);

/** An event rejected with @p code. */
void ab__wstats_rejected(ab__wstats_t *s, ab_status_t code);

/** Log the rejections by code (info), at most once per AB__STATS_LOG_US. */
void ab__wstats_tick(ab__wstats_t *s, int64_t now_us);

/** The writer's part of a stats_reply: counters, rates, latency percentiles. */
void ab__wstats_fill(const ab__wstats_t *s, int64_t now_us, ab_stats_reply_t *out);

#endif /* AB_BROKER_STATS_H */

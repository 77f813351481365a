/*
 * stats_reply.c - a `stats_reply` (PROTOCOL.md 7.18) from what the broker's
 * threads share: the stats box (the writer's and the store's figures) and
 * the shared counters. Read by the command thread (`stats`) and the metrics
 * listener (metrics.c); neither waits for the writer.
 */
#include "internal.h"

#include <string.h>

static uint64_t nonneg(int64_t v)
{
    return v > 0 ? (uint64_t)v : 0;
}

void ab__stats_fill(ab__shared_t *b, ab_stats_reply_t *r)
{
    ab__wstats_t w;
    ab_plugin_stats_t ps;
    bool known = false;
    ab__statbox_read(&b->stats, &w, &ps, &known);
    int64_t now = ab__mono_us();
    memset(r, 0, sizeof(*r));
    ab__wstats_fill(&w, now, r);
    r->instance = (ab_str_t){b->instance, strlen(b->instance)};
    r->version = (ab_str_t){AB_VERSION_STRING, strlen(AB_VERSION_STRING)};
    r->uptime_ms = (uint64_t)(now - b->started_us) / 1000;
    r->head_pos = atomic_load(&b->head_pos);
    r->queue_events = nonneg(atomic_load(&b->in_flight));
    r->queue_bytes = nonneg(atomic_load(&b->in_flight_bytes));
    r->replays_open = nonneg(atomic_load(&b->replay_slots));
    r->connections = nonneg(atomic_load(&b->connections));
    r->subscribers = nonneg(atomic_load(&b->subscribers));
    r->store_known = known;
    if (known) {
        r->runs_total = ps.runs_total;
        r->runs_active = ps.runs_active;
        r->store_bytes = ps.store_bytes;
        r->wal_bytes = ps.wal_bytes;
        r->replicas_known = ps.replicas_known;
    }
    if (r->replicas_known) {
        r->replicas = ps.replicas;
        r->replicas_sync = ps.replicas_sync;
        r->replica_lag_bytes = ps.replica_lag_bytes;
        r->replica_lag_us = ps.replica_lag_us;
    }
}

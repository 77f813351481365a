/*
 * pg_stats.c - the PostgreSQL plugin's stats entry: what the database holds,
 * for `agentbus status` and the broker's metrics (the writer thread asks
 * about once a second, between group commits).
 *
 * Invariants:
 *  1. One prepared statement, one round trip, no scan of the events or the
 *     runs: the runs ever recorded are the counter row ab_head(id 3), which
 *     every insert into ab_runs moves in its own transaction (ab_append,
 *     ab_claim); the active runs are counted on the partial index
 *     ab_runs_active, whose size is the number of active runs; the store's
 *     size is the plugin's tables with their indexes and TOAST
 *     (pg_total_relation_size: a stat() of each file, no read).
 *  2. wal_bytes is the WAL written since the redo point of the latest
 *     checkpoint (what a crash would replay), 0 when the role may not read
 *     the control file. PostgreSQL spreads its checkpoints over time and a
 *     commit never waits for one, so the checkpoint figures stay 0 (n/a).
 *  3. The standbys are the primary's WAL senders (pg_stat_replication): those
 *     streaming, those a commit waits for (sync or quorum), and the largest
 *     replay lag in WAL bytes and in time (replay_lag: NULL, so 0, once a
 *     standby has caught up and nothing is written). Known only when the role
 *     may see every sender's details (a superuser, or pg_monitor /
 *     pg_read_all_stats): otherwise replicas_known is false, not 0 standbys.
 *  4. The figures never connect: with the connection lost they are
 *     AB_UNAVAILABLE (the broker shows them as unknown) until the next write
 *     reconnects, so an outage does not add a connection attempt a second
 *     to the writer thread's work.
 */
#include "pg_int.h"

ab_status_t ab__pg_stats(ab_plugin_db_t *db, ab_plugin_stats_t *out, ab_error_t *err)
{
    if (!db || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "postgres: NULL handle or out");
    if (!db->conn || PQstatus(db->conn) != CONNECTION_OK) {
        ab_error_set(err, AB_UNAVAILABLE, "pg", "postgres: stats: not connected");
        if (err)
            err->retryable = true;
        return AB_UNAVAILABLE;
    }
    PGresult *r = ab__pg_exec(db, PQ_STATS, NULL, "stats", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    ab_plugin_stats_t s = {0};
    int64_t v[9] = {0};
    bool row = PQntuples(r) == 1 && PQnfields(r) == 9;
    for (int i = 0; i < 9 && row; i++)
        v[i] = PQgetisnull(r, 0, i) ? 0 : ab__pg_i64(r, 0, i);
    PQclear(r);
    s.replicas_known = row && v[4] == 0;
    if (s.replicas_known) {
        s.replicas = v[5] > 0 ? (uint64_t)v[5] : 0;
        s.replicas_sync = v[6] > 0 ? (uint64_t)v[6] : 0;
        s.replica_lag_bytes = v[7] > 0 ? (uint64_t)v[7] : 0;
        s.replica_lag_us = v[8] > 0 ? (uint64_t)v[8] : 0;
    }
    s.runs_total = v[0] > 0 ? (uint64_t)v[0] : 0;
    s.runs_active = v[1] > 0 ? (uint64_t)v[1] : 0;
    s.store_bytes = v[2] > 0 ? (uint64_t)v[2] : 0;
    s.wal_bytes = v[3] > 0 ? (uint64_t)v[3] : 0;
    *out = s;
    return AB_OK;
}

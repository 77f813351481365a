/*
 * pg_conn.c - the PostgreSQL plugin's connection: connecting (and again after
 * a lost connection), the schema, the prepared statements, binary parameters
 * and results, and the mapping of PostgreSQL errors to ab_status_t.
 *
 * Invariants:
 *  1. A handle's connection is either NULL or fully set up: schema checked
 *     (writer: created if missing, under an advisory lock so that two brokers
 *     starting together create it once), every statement prepared, the
 *     session's synchronous_commit and planner settings set and, for a
 *     writer, LISTEN issued.
 *  2. A failure that leaves the connection broken (PQstatus not OK, SQLSTATE
 *     class 08, admin shutdown, read-only transaction after a failover)
 *     closes it and is AB_UNAVAILABLE (retryable); the next call connects
 *     again. Nothing is retried inside a call: a batch whose answer was lost
 *     is in doubt and the broker settles it by re-sending (docs/SCALING.md).
 *  3. Every parameter is sent in binary with its type given; every result is
 *     asked for in binary.
 *  4. Rows holding positions are handed on only once every position up to the
 *     highest one read is shown to be durable (ab__pg_settle): this handle's own
 *     acknowledged commit at or after it - an append, or a settle, a commit of
 *     its own that writes a WAL record and so waits for the synchronous standby.
 *     A commit made visible by the primary's death before its standby had it is
 *     therefore never read as stored (docs/SCALING.md "Failover"). The other
 *     reads (requests, leases; run heads also for their epoch) are handed on once
 *     the server has answered one more round trip after them (still_alive()),
 *     which narrows that window but does not close it. Neither on a
 *     `process`-durability handle, whose commits are not waited for anyway.
 */
#include "pg_int.h"
#include "req_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCHEMA_VERSION 10
#define AB_PG_STR_(x)  #x
#define AB_PG_STR(x)   AB_PG_STR_(x)
#define SCHEMA_LOCK    "7301975019" /* pg_advisory_xact_lock key of the schema setup */

#define RUN_COLS                                                                                   \
    "thread, run, coalesce(parent_run, ''), epoch, last_seq, last_pos,"                            \
    " coalesce(status, CASE WHEN last_seq > 0 THEN 'active' ELSE '' END), coalesce(outcome, ''),"  \
    " started_us, coalesce(ended_us, 0)"
/* the global batch holding position $N + 1 starts at this chunk (0: none yet) */
#define BATCH_OF(n)                                                                                \
    "coalesce((SELECT batch_first FROM ab_chunks WHERE first_pos <= $" n " + 1"                    \
    " ORDER BY first_pos DESC LIMIT 1), 0)"
#define REQ_COLS                                                                                   \
    "id, key, agent, thread, run, run_named, state, worker, epoch, attempts, created_us,"          \
    " updated_us, broker, cancel_epoch"

/* A thread's chunks from the batch holding $2 + 1 (and from batch $4) on,
 * whole batches but for the chunks holding nothing past $2, up to the batch of
 * its $3-th such chunk (e); the last column: that batch (0: not cut, nothing
 * follows). The batch's end is the thread's first chunk of a later batch (n):
 * every bound is a value the scans use as an index condition (a CTE read
 * through a scalar subquery), so a pass reads only the rows it returns, not
 * the rest of the thread or of the table. (A chunk without a last position,
 * stored before schema 6, is always taken.) */
#define READ_THREAD_SQL                                                                            \
    "WITH s AS (SELECT " BATCH_OF(                                                                 \
        "2") " AS b),"                                                                             \
             " e AS (SELECT (SELECT x.batch_first FROM ab_chunks x WHERE x.thread = $1"            \
             " AND x.first_pos >= (SELECT b FROM s) AND x.batch_first >= $4"                       \
             " AND (x.last_pos IS NULL OR x.last_pos > $2) ORDER BY x.first_pos"                   \
             " OFFSET $3 - 1 LIMIT 1) AS b),"                                                      \
             " n AS (SELECT (SELECT y.first_pos FROM ab_chunks y WHERE y.thread = $1"              \
             " AND y.first_pos > (SELECT b FROM e) AND y.batch_first > (SELECT b FROM e)"          \
             " ORDER BY y.first_pos LIMIT 1) AS f)"                                                \
             " SELECT c.batch_first, c.commit_us, c.run, c.data, coalesce((SELECT b FROM e), 0)"   \
             " FROM ab_chunks c WHERE c.thread = $1 AND c.first_pos >= (SELECT b FROM s)"          \
             " AND c.first_pos < coalesce((SELECT f FROM n), 9223372036854775807)"                 \
             " AND c.batch_first >= $4"                                                            \
             " AND (c.last_pos IS NULL OR c.last_pos > $2) ORDER BY c.first_pos"

/* The schema, in parts (each under C's 4095-byte string bound), run in order. */
static const char *const SCHEMA[] = {
    "CREATE TABLE IF NOT EXISTS ab_head(id int PRIMARY KEY, v bigint NOT NULL);"
    "INSERT INTO ab_head VALUES (1, 0), (2, 0) ON CONFLICT DO NOTHING;"
    "CREATE TABLE IF NOT EXISTS ab_runs(thread text NOT NULL, run text NOT NULL,"
    " ord bigserial, epoch bigint NOT NULL, last_seq bigint NOT NULL, last_pos bigint NOT NULL,"
    " status text, outcome text, parent_run text, started_us bigint NOT NULL, ended_us bigint,"
    " PRIMARY KEY(thread, run));"
    "CREATE INDEX IF NOT EXISTS ab_runs_by_thread ON ab_runs(thread, ord);"
    /* schema 2, for the stats entry (pg_stats.c): the active runs on a partial
     * index, and ab_head(id 3) = the runs ever recorded, counted by every
     * insert into ab_runs (ab_append, ab_claim); counted once when a schema 1
     * database is upgraded */
    "CREATE INDEX IF NOT EXISTS ab_runs_active ON ab_runs(thread) WHERE status = 'active';"
    "INSERT INTO ab_head SELECT 3, count(*) FROM ab_runs ON CONFLICT DO NOTHING;"
    /* one chunk per run per batch: first_pos = the position of its first event */
    "CREATE TABLE IF NOT EXISTS ab_chunks(first_pos bigint PRIMARY KEY, thread text NOT NULL,"
    " run text NOT NULL, first_seq bigint NOT NULL, last_seq bigint NOT NULL,"
    " batch_first bigint NOT NULL, commit_us bigint NOT NULL, data bytea NOT NULL,"
    " UNIQUE(thread, run, last_seq));"
    "CREATE INDEX IF NOT EXISTS ab_chunks_by_thread ON ab_chunks(thread, first_pos);"
    /* schema 6: a chunk's last position (set by ab_append; NULL in a chunk stored before), so
     * that a read after P skips, before their data is sent, the chunks holding nothing past P
     * (pg_read.c invariants 2 and 3) */
    "ALTER TABLE ab_chunks ADD COLUMN IF NOT EXISTS last_pos bigint;"
    "CREATE TABLE IF NOT EXISTS ab_snapshots(thread text PRIMARY KEY, pos bigint NOT NULL,"
    " doc bytea NOT NULL);"
    "CREATE TABLE IF NOT EXISTS ab_requests(id bigint PRIMARY KEY, key text NOT NULL UNIQUE,"
    " agent text NOT NULL, thread text NOT NULL, run text NOT NULL, run_named bool NOT NULL,"
    " state text NOT NULL, worker text NOT NULL DEFAULT '', epoch bigint NOT NULL DEFAULT 0,"
    " attempts int NOT NULL DEFAULT 0, created_us bigint NOT NULL, updated_us bigint NOT NULL,"
    " input bytea NOT NULL, UNIQUE(thread, run));"
    "CREATE INDEX IF NOT EXISTS ab_requests_queue ON ab_requests(agent, state, id);"
    "CREATE INDEX IF NOT EXISTS ab_requests_by_state ON ab_requests(state, id);"
    "CREATE INDEX IF NOT EXISTS ab_requests_open ON ab_requests(thread, id)"
    " WHERE state IN ('queued', 'assigned', 'started');",
    /* The conditional append (docs/SCALING.md "Appends"): lock the batch's runs
     * in (thread, run) order, refuse a stale epoch or a seq that does not
     * follow the stored last seq, then take the positions from the counter
     * row (held to commit: positions grow in commit order), insert the
     * events and move the runs' heads. A fenced append (f_thread not NULL,
     * schema 9: docs/SCALING.md "Thread rules within the follow lag") then,
     * holding the counter row, records the batch as the latest fenced by each
     * of f_thread, unless one was fenced past p_seen: one upsert, no row of
     * ab_threads waited for (only the counter row's holder writes them).
     * Before schema 9 the function had no f_thread and p_seen: that one is
     * dropped, or a call of 13 arguments would name two functions. */
    "DROP FUNCTION IF EXISTS ab_append(bigint, text[], text[], bigint[], bigint[], bigint[],"
    " bigint[], text[], text[], text[], bigint[], bytea[], bigint);"
    "CREATE OR REPLACE FUNCTION ab_append(p_commit bigint, r_thread text[], r_run text[],"
    " r_first bigint[], r_last bigint[], r_epoch bigint[], r_lastoff bigint[], r_status text[],"
    " r_outcome text[], r_parent text[], r_firstoff bigint[], r_data bytea[], v_n bigint,"
    " f_thread text[] DEFAULT NULL, p_seen bigint DEFAULT 0)"
    " RETURNS bigint LANGUAGE plpgsql AS $f$"
    " DECLARE v_first bigint; v_new bigint; v_set bigint; bad record;"
    " BEGIN"
    "  INSERT INTO ab_runs(thread, run, epoch, last_seq, last_pos, started_us)"
    "   SELECT t, r, 0, 0, 0, p_commit FROM unnest(r_thread, r_run) AS u(t, r)"
    "   ORDER BY t, r ON CONFLICT (thread, run) DO NOTHING;"
    "  GET DIAGNOSTICS v_new = ROW_COUNT;"
    "  IF v_new > 0 THEN UPDATE ab_head SET v = v + v_new WHERE id = 3; END IF;"
    "  PERFORM 1 FROM ab_runs x WHERE (x.thread, x.run) IN"
    "   (SELECT * FROM unnest(r_thread, r_run)) ORDER BY x.thread, x.run FOR UPDATE;"
    "  SELECT u.r, u.e, u.f, x.epoch AS se, x.last_seq AS sl INTO bad"
    "   FROM unnest(r_thread, r_run, r_epoch, r_first) AS u(t, r, e, f)"
    "   JOIN ab_runs x ON x.thread = u.t AND x.run = u.r"
    "   WHERE u.e < x.epoch OR u.f <> x.last_seq + 1 LIMIT 1;"
    "  IF FOUND THEN"
    "   IF bad.e < bad.se THEN"
    "    RAISE EXCEPTION USING ERRCODE = 'AB001', DETAIL = bad.se::text, MESSAGE ="
    "     format('run %s: epoch %s is stale: the store holds epoch %s', bad.r, bad.e, bad.se);"
    "   END IF;"
    "   RAISE EXCEPTION USING ERRCODE = 'AB002', DETAIL = bad.sl::text, MESSAGE ="
    "    format('run %s: seq %s does not follow the stored last seq %s', bad.r, bad.f, bad.sl);"
    "  END IF;"
    "  UPDATE ab_head SET v = v + v_n WHERE id = 1 RETURNING v - v_n + 1 INTO v_first;"
    "  IF f_thread IS NOT NULL THEN"
    "   WITH l AS (INSERT INTO ab_threads AS x(thread, fence_pos)"
    "    SELECT DISTINCT t, v_first + v_n - 1 FROM unnest(f_thread) AS u(t) ORDER BY 1"
    "    ON CONFLICT (thread) DO UPDATE SET fence_pos = excluded.fence_pos"
    "    WHERE x.fence_pos <= p_seen RETURNING 1) SELECT count(*) INTO v_set FROM l;"
    "   IF v_set < (SELECT count(DISTINCT t) FROM unnest(f_thread) AS u(t)) THEN"
    "    SELECT x.thread, x.fence_pos INTO bad FROM ab_threads x WHERE x.thread = ANY(f_thread)"
    "     AND x.fence_pos > p_seen AND x.fence_pos < v_first LIMIT 1;"
    "    RAISE EXCEPTION USING ERRCODE = 'AB003', DETAIL = bad.fence_pos::text, MESSAGE ="
    "     format('thread %s: a batch fenced by it committed at position %s, after position"
    " %s up to which this broker applied the store''s events', bad.thread, bad.fence_pos,"
    "      p_seen);"
    "   END IF;"
    "  END IF;"
    "  INSERT INTO ab_chunks(first_pos, thread, run, first_seq, last_seq, batch_first,"
    "   commit_us, data, last_pos) SELECT v_first + u.fo, u.t, u.r, u.f, u.l, v_first,"
    "   p_commit, u.d, v_first + u.lo"
    "   FROM unnest(r_thread, r_run, r_first, r_last, r_firstoff, r_data, r_lastoff)"
    "    AS u(t, r, f, l, fo, d, lo);"
    "  UPDATE ab_runs x SET epoch = greatest(x.epoch, u.e), last_seq = u.l,"
    "   last_pos = v_first + u.lo, status = coalesce(u.st, x.status),"
    "   outcome = coalesce(u.oc, x.outcome), parent_run = coalesce(u.pr, x.parent_run),"
    "   ended_us = CASE WHEN u.st IN ('finished', 'errored') THEN p_commit ELSE x.ended_us END"
    "   FROM unnest(r_thread, r_run, r_epoch, r_last, r_lastoff, r_status, r_outcome, r_parent)"
    "    AS u(t, r, e, l, lo, st, oc, pr)"
    "   WHERE x.thread = u.t AND x.run = u.r;"
    "  PERFORM pg_notify('ab_events', (v_first + v_n - 1)::text);"
    "  RETURN v_first;"
    " END $f$;",
    /* A claim: bump the run's epoch, or create the run at epoch 2 (and count
     * it): epoch 1 is the implicit epoch of a run written without a claim,
     * which every claim fences (schema 10; it was 1 before). Each statement
     * sees what committed before it (READ COMMITTED), so the update finds a
     * run another broker created while the insert waited. */
    "CREATE OR REPLACE FUNCTION ab_claim(p_thread text, p_run text, p_now bigint,"
    " OUT epoch bigint, OUT last_seq bigint) LANGUAGE plpgsql AS $f$"
    " BEGIN"
    "  INSERT INTO ab_runs(thread, run, epoch, last_seq, last_pos, started_us)"
    "   VALUES (p_thread, p_run, 2, 0, 0, p_now) ON CONFLICT (thread, run) DO NOTHING;"
    "  IF FOUND THEN"
    "   UPDATE ab_head SET v = v + 1 WHERE id = 3;"
    "   epoch := 2; last_seq := 0; RETURN;"
    "  END IF;"
    "  UPDATE ab_runs x SET epoch = greatest(x.epoch, 1) + 1"
    "   WHERE x.thread = p_thread AND x.run = p_run"
    "   RETURNING x.epoch, x.last_seq INTO epoch, last_seq;"
    " END $f$;",
    /* schema 3, dispatch across brokers (docs/SCALING.md): which broker's worker
     * holds a request, its parent run (the thread rule of ab_take), the brokers'
     * leases, and a notification on every put and move of a request */
    "ALTER TABLE ab_requests ADD COLUMN IF NOT EXISTS broker text NOT NULL DEFAULT '',"
    " ADD COLUMN IF NOT EXISTS parent_run text NOT NULL DEFAULT '';"
    "CREATE INDEX IF NOT EXISTS ab_requests_held ON ab_requests(broker)"
    " WHERE state IN ('assigned', 'started');"
    "CREATE TABLE IF NOT EXISTS ab_brokers(instance text PRIMARY KEY,"
    " alive_until_us bigint NOT NULL);"
    "CREATE OR REPLACE FUNCTION ab_requests_notify() RETURNS trigger LANGUAGE plpgsql AS $f$"
    " BEGIN PERFORM pg_notify('ab_requests', NEW.agent); RETURN NULL; END $f$;"
    "DROP TRIGGER IF EXISTS ab_requests_notify ON ab_requests;"
    "CREATE TRIGGER ab_requests_notify AFTER INSERT OR UPDATE ON ab_requests"
    " FOR EACH ROW EXECUTE FUNCTION ab_requests_notify();",
    /* Take one queued request (plugin.h request_take): lock it unless another
     * taker holds it (SKIP LOCKED), check the thread rule on the stored rows (a
     * plain read: a row another taker has locked still counts), claim its run
     * and move it to assigned at the claim's epoch, all in one transaction: no
     * claim without the assignment. */
    "CREATE OR REPLACE FUNCTION ab_take(p_id bigint, p_worker text, p_broker text, p_now bigint)"
    " RETURNS SETOF ab_requests LANGUAGE plpgsql AS $f$"
    " DECLARE q ab_requests; v_epoch bigint; v_last bigint;"
    " BEGIN"
    "  SELECT * INTO q FROM ab_requests WHERE id = p_id AND state = 'queued'"
    "   FOR UPDATE SKIP LOCKED;"
    "  IF NOT FOUND THEN RETURN; END IF;"
    "  IF NOT EXISTS (SELECT 1 FROM ab_requests o WHERE o.thread = q.thread"
    "    AND q.parent_run <> '' AND o.run = q.parent_run AND o.state IN ('assigned', 'started'))"
    "   AND EXISTS (SELECT 1 FROM ab_requests o WHERE o.thread = q.thread AND o.id <> q.id"
    "    AND (o.state IN ('assigned', 'started') OR (o.state = 'queued' AND o.id < q.id)))"
    "  THEN RETURN; END IF;"
    "  SELECT c.epoch, c.last_seq INTO v_epoch, v_last FROM ab_claim(q.thread, q.run, p_now) c;"
    "  RETURN QUERY UPDATE ab_requests SET state = 'assigned', worker = p_worker,"
    "   broker = p_broker, epoch = v_epoch, attempts = attempts + 1, updated_us = p_now"
    "   WHERE id = p_id RETURNING *;"
    " END $f$;",
    /* Cancel an assigned request (plugin.h request_cancel): the run's row is locked as
     * ab_append locks it (waiting for an append in flight, then reading what it committed),
     * so either its RUN_STARTED committed first (the run has a status: refused, nothing
     * claimed) or the claim here fences it. */
    "CREATE OR REPLACE FUNCTION ab_cancel(p_id bigint, p_epoch bigint, p_now bigint)"
    " RETURNS SETOF ab_requests LANGUAGE plpgsql AS $f$"
    " DECLARE q ab_requests; v_epoch bigint; v_last bigint; v_status text;"
    " BEGIN"
    "  SELECT * INTO q FROM ab_requests WHERE id = p_id AND state = 'assigned'"
    "   AND epoch = p_epoch FOR UPDATE;"
    "  IF NOT FOUND THEN RETURN; END IF;"
    "  SELECT x.status INTO v_status FROM ab_runs x WHERE x.thread = q.thread AND x.run = q.run"
    "   FOR UPDATE;"
    "  IF v_status IS NOT NULL THEN RETURN; END IF;"
    "  SELECT c.epoch, c.last_seq INTO v_epoch, v_last FROM ab_claim(q.thread, q.run, p_now) c;"
    "  RETURN QUERY UPDATE ab_requests SET state = 'cancelled', epoch = v_epoch,"
    "   updated_us = p_now WHERE id = p_id RETURNING *;"
    " END $f$;",
    /* schema 4, cancelling a started run across brokers (plugin.h request_cancel_held):
     * the epoch at which another broker asked the holder to cancel the run */
    "ALTER TABLE ab_requests ADD COLUMN IF NOT EXISTS cancel_epoch bigint NOT NULL DEFAULT 0;",
    /* schema 5 (docs/SCALING.md "Compression"): chunks and snapshot documents compressed with
     * lz4 instead of pglz, whose compression was the server's largest cost of an append; rows
     * already stored keep their form (both are read). A server built without lz4 (or older
     * than PostgreSQL 14, which has no per-column method) keeps pglz: EXECUTE defers the
     * statements' parse so that either refusal is caught here. */
    "DO $d$ BEGIN"
    " EXECUTE 'ALTER TABLE ab_chunks ALTER COLUMN data SET COMPRESSION lz4';"
    " EXECUTE 'ALTER TABLE ab_snapshots ALTER COLUMN doc SET COMPRESSION lz4';"
    " EXCEPTION WHEN feature_not_supported OR syntax_error THEN NULL;"
    " END $d$;",
    /* schema 7 (docs/SCALING.md "Compression"): the plugin packs each chunk itself (pg_chunk.h),
     * so that the server, its standby and every read get fewer bytes; the server no longer tries
     * to compress what is packed already. A chunk stored before is read as it was stored. */
    "ALTER TABLE ab_chunks ALTER COLUMN data SET STORAGE EXTERNAL;",
    /* schema 8 (docs/SCALING.md "Thread rules within the follow lag"): per thread, the last
     * position of the latest batch fenced by it (set by ab_append). Schema 8 had the fence in a
     * function of its own, which locked the threads before the runs; schema 9 moved it into
     * ab_append, under the counter row. */
    "CREATE TABLE IF NOT EXISTS ab_threads(thread text PRIMARY KEY, fence_pos bigint NOT NULL);"
    "DROP FUNCTION IF EXISTS ab_append_fenced(bigint, text[], text[], bigint[], bigint[],"
    " bigint[], bigint[], text[], text[], text[], bigint[], bytea[], bigint, text[], bigint);",
    /* Mark a held request's cancel (plugin.h request_cancel_held): locked at its epoch while
     * started, or assigned with its run's RUN_STARTED committed; marked only while the
     * holding broker's lease is alive (the update's trigger wakes that broker). */
    "CREATE OR REPLACE FUNCTION ab_cancel_held(p_id bigint, p_epoch bigint, p_now bigint)"
    " RETURNS TABLE(req ab_requests, alive bool) LANGUAGE plpgsql AS $f$"
    " DECLARE q ab_requests; v_status text;"
    " BEGIN"
    "  SELECT * INTO q FROM ab_requests r WHERE r.id = p_id AND r.epoch = p_epoch"
    "   AND r.state IN ('assigned', 'started') FOR UPDATE;"
    "  IF NOT FOUND THEN RETURN; END IF;"
    "  IF q.state = 'assigned' THEN"
    "   SELECT x.status INTO v_status FROM ab_runs x WHERE x.thread = q.thread AND x.run = q.run;"
    "   IF v_status IS NULL THEN RETURN; END IF;"
    "  END IF;"
    "  alive := EXISTS (SELECT 1 FROM ab_brokers b WHERE b.instance = q.broker"
    "   AND b.alive_until_us >= p_now);"
    "  IF alive AND q.cancel_epoch <> p_epoch THEN"
    "   UPDATE ab_requests r SET cancel_epoch = p_epoch WHERE r.id = p_id RETURNING * INTO q;"
    "  END IF;"
    "  req := q;"
    "  RETURN NEXT;"
    " END $f$;",
};

static const struct {
    const char *sql;
    int n;
    Oid types[PG_MAX_PARAMS];
} Q[PQ_COUNT_] = {
    [PQ_APPEND] = {"SELECT ab_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                   13,
                   {PG_INT8, PG_TEXTA, PG_TEXTA, PG_INT8A, PG_INT8A, PG_INT8A, PG_INT8A, PG_TEXTA,
                    PG_TEXTA, PG_TEXTA, PG_INT8A, PG_BYTEAA, PG_INT8}},
    [PQ_APPEND_FENCED] = {"SELECT ab_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,"
                          " $12, $13, $14, $15)",
                          15,
                          {PG_INT8, PG_TEXTA, PG_TEXTA, PG_INT8A, PG_INT8A, PG_INT8A, PG_INT8A,
                           PG_TEXTA, PG_TEXTA, PG_TEXTA, PG_INT8A, PG_BYTEAA, PG_INT8, PG_TEXTA,
                           PG_INT8}},
    [PQ_CLAIM] = {"SELECT epoch, last_seq FROM ab_claim($1, $2, $3)",
                  3,
                  {PG_TEXT, PG_TEXT, PG_INT8}},
    [PQ_HEAD] = {"SELECT " RUN_COLS " FROM ab_runs WHERE thread = $1 AND run = $2",
                 2,
                 {PG_TEXT, PG_TEXT}},
    /* heads_of: the stored heads among the runs asked for, with their place in the list */
    [PQ_HEADS_OF] = {"SELECT " RUN_COLS ", u.i FROM unnest($1::text[], $2::text[])"
                     " WITH ORDINALITY AS u(t, r, i) JOIN ab_runs x ON x.thread = u.t"
                     " AND x.run = u.r ORDER BY u.i",
                     2,
                     {PG_TEXTA, PG_TEXTA}},
    [PQ_THREAD_HEADS] = {"SELECT " RUN_COLS " FROM ab_runs WHERE thread = $1 ORDER BY ord",
                         1,
                         {PG_TEXT}},
    [PQ_HEAD_POS] = {"SELECT v FROM ab_head WHERE id = 1", 0, {0}},
    /* a run's chunks holding seqs in ($3, $3 + $4] (a run's seqs are dense): up to the one
     * holding $3 + $4, found first, so that both ends are index conditions (a filter on
     * first_seq would have the scan run to the end of the run) */
    [PQ_READ_RUN] = {"SELECT batch_first, commit_us, data FROM ab_chunks WHERE thread = $1"
                     " AND run = $2 AND last_seq > $3 AND last_seq <= coalesce((SELECT"
                     " e.last_seq FROM ab_chunks e WHERE e.thread = $1 AND e.run = $2"
                     " AND e.last_seq >= $3 + $4 ORDER BY e.last_seq LIMIT 1),"
                     " 9223372036854775807) ORDER BY last_seq",
                     4,
                     {PG_TEXT, PG_TEXT, PG_INT8, PG_INT8}},
    [PQ_READ_THREAD] = {READ_THREAD_SQL, 4, {PG_TEXT, PG_INT8, PG_INT8, PG_INT8}},
    /* every chunk holding a position in ($1, $1 + $2] (positions are dense; a chunk stored
     * before schema 6 has no last position) */
    [PQ_READ_ALL] = {"SELECT batch_first, commit_us, thread, run, data FROM ab_chunks"
                     " WHERE first_pos >= " BATCH_OF(
                         "1") " AND first_pos <= $1 + $2"
                              " AND (last_pos IS NULL OR last_pos > $1) ORDER BY first_pos",
                     2,
                     {PG_INT8, PG_INT8}},
    [PQ_EVENT] = {"SELECT batch_first, data FROM ab_chunks WHERE thread = $1 AND run = $2"
                  " AND last_seq >= $3 AND first_seq <= $3 ORDER BY last_seq LIMIT 1",
                  3,
                  {PG_TEXT, PG_TEXT, PG_INT8}},
    [PQ_SNAP_PUT] = {"INSERT INTO ab_snapshots(thread, pos, doc) VALUES($1, $2, $3)"
                     " ON CONFLICT (thread) DO UPDATE SET pos = excluded.pos, doc = excluded.doc"
                     " WHERE excluded.pos > ab_snapshots.pos",
                     3,
                     {PG_TEXT, PG_INT8, PG_BYTEA}},
    [PQ_SNAP_GET] = {"SELECT doc, pos FROM ab_snapshots WHERE thread = $1", 1, {PG_TEXT}},
    /* a put: the key's row if it exists (existing = true), else a new queued
     * one with the next id from the counter row (ids grow in commit order) */
    [PQ_REQ_PUT] = {"WITH old AS (SELECT " REQ_COLS ", input FROM ab_requests WHERE key = $1),"
                    " nid AS (UPDATE ab_head SET v = v + 1 WHERE id = 2"
                    "  AND NOT EXISTS (SELECT 1 FROM old) RETURNING v),"
                    " ins AS (INSERT INTO ab_requests(id, key, agent, thread, run, run_named,"
                    "  state, created_us, updated_us, input, parent_run) SELECT v, $1, $2, $3, $4,"
                    "  $5, 'queued', $6, $6, $7, $8 FROM nid RETURNING " REQ_COLS ", input)"
                    " SELECT *, true FROM old UNION ALL SELECT *, false FROM ins",
                    8,
                    {PG_TEXT, PG_TEXT, PG_TEXT, PG_TEXT, PG_BOOL, PG_INT8, PG_BYTEA, PG_TEXT}},
    [PQ_REQ_BY_ID] = {"SELECT " REQ_COLS ", input FROM ab_requests WHERE id = $1", 1, {PG_INT8}},
    [PQ_REQ_BY_KEY] = {"SELECT " REQ_COLS ", input FROM ab_requests WHERE key = $1", 1, {PG_TEXT}},
    [PQ_REQ_BY_RUN] = {"SELECT " REQ_COLS ", input FROM ab_requests WHERE thread = $1"
                       " AND run = $2",
                       2,
                       {PG_TEXT, PG_TEXT}},
    [PQ_REQ_MOVE] = {"UPDATE ab_requests SET state = $3, worker = $4, epoch = $5,"
                     " attempts = attempts + CASE WHEN $3 = 'assigned' THEN 1 ELSE 0 END,"
                     " updated_us = $6, broker = $8 WHERE id = $1 AND state = $2 AND epoch = $7"
                     " RETURNING " REQ_COLS,
                     8,
                     {PG_INT8, PG_TEXT, PG_TEXT, PG_TEXT, PG_INT8, PG_INT8, PG_INT8, PG_TEXT}},
    [PQ_REQ_LIST_STATE] = {"SELECT " REQ_COLS " FROM ab_requests WHERE state = $1 AND id > $2"
                           " ORDER BY id LIMIT $3",
                           3,
                           {PG_TEXT, PG_INT8, PG_INT8}},
    [PQ_REQ_LIST_AGENT] = {"SELECT " REQ_COLS " FROM ab_requests WHERE agent = $1"
                           " AND state = $2 AND id > $3 ORDER BY id LIMIT $4",
                           4,
                           {PG_TEXT, PG_TEXT, PG_INT8, PG_INT8}},
    [PQ_REQ_THREAD_OPEN] = {"SELECT " REQ_COLS " FROM ab_requests WHERE thread = $1"
                            " AND state IN ('queued', 'assigned', 'started') ORDER BY id",
                            1,
                            {PG_TEXT}},
    [PQ_REQ_AHEAD] = {"SELECT count(*) FROM ab_requests WHERE agent ="
                      " (SELECT agent FROM ab_requests WHERE id = $1)"
                      " AND state = 'queued' AND id < $1",
                      1,
                      {PG_INT8}},
    [PQ_REQ_CANCEL] = {"SELECT " REQ_COLS ", input FROM ab_cancel($1, $2, $3)",
                       3,
                       {PG_INT8, PG_INT8, PG_INT8}},
    [PQ_REQ_CANCEL_HELD] = {"SELECT " REQ_COLS ", input, alive FROM (SELECT (h.req).*, h.alive"
                            " FROM ab_cancel_held($1, $2, $3) h) s",
                            3,
                            {PG_INT8, PG_INT8, PG_INT8}},
    [PQ_REQ_TAKE] = {"SELECT " REQ_COLS ", input FROM ab_take($1, $2, $3, $4)",
                     4,
                     {PG_INT8, PG_TEXT, PG_TEXT, PG_INT8}},
    /* a broker's lease; a lease ended a day ago whose broker holds nothing goes */
    [PQ_LEASE] =
        {"WITH gone AS (DELETE FROM ab_brokers b WHERE b.alive_until_us < $2 - 86400000000"
         "  AND NOT EXISTS (SELECT 1 FROM ab_requests r WHERE r.broker = b.instance"
         "  AND r.state IN ('assigned', 'started')))"
         " INSERT INTO ab_brokers VALUES ($1, $3) ON CONFLICT (instance) DO UPDATE"
         " SET alive_until_us = greatest(ab_brokers.alive_until_us, excluded.alive_until_us)",
         3,
         {PG_TEXT, PG_INT8, PG_INT8}},
    /* the requests held through a lost broker (no lease row, or one ended before $2) */
    [PQ_LOST] = {"SELECT " REQ_COLS " FROM ab_requests r WHERE state IN ('assigned', 'started')"
                 " AND broker <> '' AND broker <> $1 AND NOT EXISTS (SELECT 1 FROM ab_brokers b"
                 " WHERE b.instance = r.broker AND b.alive_until_us >= $2) ORDER BY id LIMIT $3",
                 3,
                 {PG_TEXT, PG_INT8, PG_INT8}},
    /* the stats entry (pg_stats.c): a counter row, a count over the partial
     * index of the active runs, the tables' sizes (a stat of each file) and
     * the WAL written since the last checkpoint's redo point (0 when the role
     * may not read the control file), then the standbys (pg_stat_replication, a
     * row per WAL sender in shared memory): rows whose details the role may not
     * see (state NULL: it lacks pg_read_all_stats), streaming ones, synchronous
     * ones, the largest replay lag in bytes and in microseconds */
    [PQ_STATS] = {"SELECT (SELECT v FROM ab_head WHERE id = 3),"
                  " (SELECT count(*) FROM ab_runs WHERE status = 'active'),"
                  " (SELECT sum(pg_total_relation_size(t))::bigint FROM unnest(ARRAY['ab_meta',"
                  " 'ab_head', 'ab_runs', 'ab_chunks', 'ab_snapshots', 'ab_requests',"
                  " 'ab_threads']::regclass[])"
                  " AS t),"
                  " CASE WHEN has_function_privilege('pg_control_checkpoint()', 'execute')"
                  " THEN greatest(pg_wal_lsn_diff(pg_current_wal_lsn(),"
                  " (SELECT redo_lsn FROM pg_control_checkpoint())), 0)::bigint ELSE 0 END,"
                  " (SELECT count(*) FROM pg_stat_replication WHERE state IS NULL),"
                  " (SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'),"
                  " (SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
                  " AND sync_state IN ('sync', 'quorum')),"
                  " (SELECT coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)), 0)"
                  "::bigint FROM pg_stat_replication),"
                  " (SELECT coalesce(max(extract(epoch FROM replay_lag) * 1000000), 0)::bigint"
                  " FROM pg_stat_replication)",
                  0,
                  {0}},
    /* ab__pg_settle: the head, in a commit that waits for the synchronous standby (a WAL
     * record of its own: a commit that wrote none would not wait) */
    [PQ_SETTLE] = {"SELECT (SELECT v FROM ab_head WHERE id = 1),"
                   " pg_logical_emit_message(true, 'agentbus', '')",
                   0,
                   {0}},
};

/* ---- errors --------------------------------------------------------------- */

static bool conn_lost(const ab_plugin_db_t *db, const char *state)
{
    if (!db->conn || PQstatus(db->conn) != CONNECTION_OK)
        return true;
    if (!state)
        return false;
    /* 08: connection exception; 57P0x: shutdown; 25006: read-only (a standby now) */
    return strncmp(state, "08", 2) == 0 || strncmp(state, "57P0", 4) == 0 ||
           strcmp(state, "25006") == 0;
}

static void drop_conn(ab_plugin_db_t *db)
{
    ab__pg_ahead_clear(db); /* nothing read on one connection outlives it */
    if (db->conn)
        PQfinish(db->conn);
    db->conn = NULL;
    db->listening = false;
}

ab_status_t ab__pg_fail(ab_plugin_db_t *db, PGresult *r, const char *what, ab_error_t *err)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (!msg)
        msg = db->conn ? PQerrorMessage(db->conn) : "no connection";
    ab_status_t code = AB_INTERNAL;
    const char *field = "postgres";
    if (state && (strcmp(state, "AB001") == 0 || strcmp(state, "AB002") == 0 ||
                  strcmp(state, "AB003") == 0)) {
        code = AB_CONFLICT;
        field = state[4] == '1' ? "epoch" : state[4] == '2' ? "seq" : "thread";
    } else if (state && strcmp(state, "23505") == 0) {
        code = AB_CONFLICT;
        field = "seq";
    } else if (conn_lost(db, state) ||
               (state && (strncmp(state, "40", 2) == 0 || strncmp(state, "53", 2) == 0 ||
                          strcmp(state, "55P03") == 0))) {
        code = AB_UNAVAILABLE;
    }
    ab_error_set(err, code, field, "postgres: %s: %s", what, msg);
    if (state)
        ab_error_detail_str(err, "sqlstate", state);
    if (code == AB_CONFLICT && state && state[0] == 'A') {
        const char *d = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL);
        if (d)
            ab_error_detail_int(err,
                                field[0] == 'e'   ? "epoch"
                                : field[0] == 's' ? "last_seq"
                                                  : "thread_pos",
                                strtoll(d, NULL, 10));
    }
    if (err && code == AB_UNAVAILABLE)
        err->retryable = true;
    if (code == AB_UNAVAILABLE && conn_lost(db, state))
        drop_conn(db);
    if (r)
        PQclear(r);
    return code;
}

/* ---- connecting ------------------------------------------------------------ */

/* Run a command (no result rows wanted); @return AB_OK or the failure. */
static ab_status_t run_cmd(ab_plugin_db_t *db, const char *sql, const char *what, ab_error_t *err)
{
    PGresult *r = PQexec(db->conn, sql);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        PQclear(r);
        return AB_OK;
    }
    return ab__pg_fail(db, r, what, err);
}

/* The stored schema version (0 = none yet), inside the setup transaction. */
static ab_status_t schema_version(ab_plugin_db_t *db, long *v, ab_error_t *err)
{
    PGresult *r = PQexec(db->conn, "SELECT v FROM ab_meta WHERE k = 'schema'");
    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK)
        return ab__pg_fail(db, r, "schema version", err);
    *v = PQntuples(r) ? strtol(PQgetvalue(r, 0, 0), NULL, 10) : 0;
    PQclear(r);
    return AB_OK;
}

/* Create what is missing (invariant 1); a newer schema is refused unchanged. */
static ab_status_t setup_schema(ab_plugin_db_t *db, ab_error_t *err)
{
    ab_status_t s = run_cmd(db,
                            "BEGIN; SELECT pg_advisory_xact_lock(" SCHEMA_LOCK ");"
                            " CREATE TABLE IF NOT EXISTS ab_meta(k text PRIMARY KEY, v bigint)",
                            "schema", err);
    long v = 0;
    if (s == AB_OK)
        s = schema_version(db, &v, err);
    if (s == AB_OK && v > SCHEMA_VERSION) {
        s = ab_error_set(err, AB_UNSUPPORTED, "schema",
                         "postgres: database schema version %ld is newer than this build (%d)", v,
                         SCHEMA_VERSION);
        ab_error_detail_int(err, "theirs", v);
        ab_error_detail_int(err, "ours", SCHEMA_VERSION);
    }
    for (size_t i = 0; s == AB_OK && v < SCHEMA_VERSION && i < sizeof SCHEMA / sizeof *SCHEMA; i++)
        s = run_cmd(db, SCHEMA[i], "schema", err);
    if (s == AB_OK && v < SCHEMA_VERSION)
        s = run_cmd(db,
                    "INSERT INTO ab_meta VALUES ('schema', " AB_PG_STR(
                        SCHEMA_VERSION) ") ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                    "schema", err);
    if (s == AB_OK)
        return run_cmd(db, "COMMIT", "schema", err);
    if (db->conn)
        PQclear(PQexec(db->conn, "ROLLBACK"));
    return s;
}

static ab_status_t prepare_all(ab_plugin_db_t *db, ab_error_t *err)
{
    for (int i = 0; i < PQ_COUNT_; i++) {
        char name[16];
        snprintf(name, sizeof name, "q%d", i);
        PGresult *r = PQprepare(db->conn, name, Q[i].sql, Q[i].n, Q[i].types);
        if (!r || PQresultStatus(r) != PGRES_COMMAND_OK)
            return ab__pg_fail(db, r, "prepare", err);
        PQclear(r);
    }
    return AB_OK;
}

/* Server notices (CREATE ... IF NOT EXISTS skipping) are not the broker's output. */
static void quiet(void *arg, const char *message)
{
    (void)arg, (void)message;
}

static ab_status_t connect_db(ab_plugin_db_t *db, ab_error_t *err)
{
    db->conn = PQconnectdb(db->conninfo);
    if (db->conn)
        PQsetNoticeProcessor(db->conn, quiet, NULL);
    if (!db->conn || PQstatus(db->conn) != CONNECTION_OK) {
        ab_error_set(err, AB_UNAVAILABLE, "pg", "postgres: cannot connect: %s",
                     db->conn ? PQerrorMessage(db->conn) : "out of memory");
        if (err)
            err->retryable = true;
        drop_conn(db);
        return AB_UNAVAILABLE;
    }
    ab_status_t s = AB_OK;
    if (!db->readonly)
        s = setup_schema(db, err);
    if (s == AB_OK) /* every handle: a read-only one commits its settles (invariant 4) */
        s = run_cmd(db,
                    db->durability == AB_DURABILITY_PROCESS
                        ? "SET synchronous_commit = off"
                        /* fsync: at least `on`; a stronger remote_apply set for the role or
                         * in the conninfo's options is kept */
                        : "SELECT set_config('synchronous_commit', 'on', false) WHERE"
                          " current_setting('synchronous_commit') <> 'remote_apply'",
                    "synchronous_commit", err);
    /* Every statement here reads a short range in index order (a bound or a LIMIT); a bitmap
     * scan reads every row the index condition matches before it sorts them, and the planner
     * picks one for a small table (and, with a parameter of unknown selectivity, a large one):
     * tests/pg/test_pg_scans.c counts the buffers. */
    if (s == AB_OK)
        s = run_cmd(db, "SET enable_bitmapscan = off", "planner settings", err);
    if (s == AB_OK && !db->readonly)
        s = run_cmd(db, "LISTEN ab_events; LISTEN ab_requests", "listen", err);
    if (s == AB_OK)
        s = prepare_all(db, err);
    if (s != AB_OK) {
        drop_conn(db);
        return s;
    }
    db->listening = !db->readonly;
    return AB_OK;
}

ab_status_t ab__pg_ready(ab_plugin_db_t *db, ab_error_t *err)
{
    if (!db)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "postgres: NULL handle");
    if (db->conn && PQstatus(db->conn) == CONNECTION_OK)
        return AB_OK;
    drop_conn(db);
    return connect_db(db, err);
}

static ab_status_t pg_open(const ab_plugin_open_opts_t *opts, ab_plugin_db_t **out, ab_error_t *err)
{
    if (!opts || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "pg", "postgres plugin: NULL options");
    if (!opts->conninfo || !*opts->conninfo)
        return ab_error_set(err, AB_INVALID_CONFIG, "pg",
                            "postgres plugin: no connection string (give --pg CONNINFO, e.g. "
                            "'host=127.0.0.1 port=5432 dbname=agentbus')");
    ab_plugin_db_t *db = calloc(1, sizeof *db);
    if (!db || !(db->conninfo = strdup(opts->conninfo))) {
        free(db);
        return ab_error_set(err, AB_NOMEM, "pg", "out of memory");
    }
    db->readonly = opts->readonly;
    db->durability = opts->durability;
    ab_status_t s = connect_db(db, err);
    if (s != AB_OK) {
        free(db->conninfo);
        free(db);
        return s;
    }
    *out = db;
    return AB_OK;
}

static void pg_close(ab_plugin_db_t *db)
{
    if (!db)
        return;
    drop_conn(db);
    ab__pg_stage_free(db);
    free(db->conninfo);
    free(db);
}

/* ---- running statements ------------------------------------------------------- */

/* The reads checked by still_alive() (invariant 4): those whose rows carry no
 * position, and the run heads (their epoch moves without one). The reads of
 * events, snapshots and the head position are settled by position instead. */
static bool checked_alive(int which)
{
    switch (which) {
    case PQ_HEAD:
    case PQ_THREAD_HEADS:
    case PQ_HEADS_OF:
    case PQ_REQ_BY_ID:
    case PQ_REQ_BY_KEY:
    case PQ_REQ_BY_RUN:
    case PQ_REQ_LIST_STATE:
    case PQ_REQ_LIST_AGENT:
    case PQ_REQ_THREAD_OPEN:
    case PQ_REQ_AHEAD:
    case PQ_LOST: return true;
    default: return false;
    }
}

/*
 * After a read, whether the server that answered it is still alive (invariant 4): an
 * empty query, one round trip. When the postmaster dies, a backend waiting for the
 * synchronous standby's answer stops waiting and its transaction, committed locally but
 * perhaps never replicated, becomes visible to the other backends still running until
 * each one notices the death, which a backend does when it next waits for its client:
 * sent after the read's whole answer arrived, the empty query normally meets that wait and
 * fails (not when the backend was descheduled before reading its socket again).
 */
static bool still_alive(ab_plugin_db_t *db, PGresult **fail)
{
    PGresult *z = PQexec(db->conn, "");
    if (z && PQresultStatus(z) == PGRES_EMPTY_QUERY) {
        PQclear(z);
        return true;
    }
    *fail = z;
    return false;
}

/*
 * Invariant 4 for positions. The settle's snapshot is taken after the read's, so it sees
 * every commit the read saw, and its commit record follows theirs in the WAL; its commit
 * returns only once the synchronous standby has flushed past that record (a dying primary
 * never answers it: unavailable). Every position up to the head it read is then on the
 * standby. Positions are taken in commit order (the counter row is held to commit), so an
 * acknowledged append shows the same for every position up to its last (pg_events.c).
 */
ab_status_t ab__pg_settle(ab_plugin_db_t *db, uint64_t pos, ab_error_t *err)
{
    if (db->durability == AB_DURABILITY_PROCESS || pos <= db->safe_pos)
        return AB_OK;
    PGresult *r = ab__pg_exec(db, PQ_SETTLE, NULL, "settle", err);
    if (!r)
        return err ? err->code : AB_UNAVAILABLE;
    uint64_t head = PQntuples(r) ? (uint64_t)ab__pg_i64(r, 0, 0) : 0;
    PQclear(r);
    if (head < pos) { /* a read saw past the head: not the server it read from */
        ab_error_set(err, AB_UNAVAILABLE, "pg",
                     "postgres: position %llu read but the head is %llu (a failover between"
                     " the read and its settle)",
                     (unsigned long long)pos, (unsigned long long)head);
        if (err)
            err->retryable = true;
        return AB_UNAVAILABLE;
    }
    db->safe_pos = head;
    return AB_OK;
}

PGresult *ab__pg_exec(ab_plugin_db_t *db, int which, const pg_params_t *p, const char *what,
                      ab_error_t *err)
{
    if (ab__pg_ready(db, err) != AB_OK)
        return NULL;
    char name[16];
    snprintf(name, sizeof name, "q%d", which);
    PGresult *r = PQexecPrepared(db->conn, name, p ? p->n : 0, p ? p->val : NULL, p ? p->len : NULL,
                                 p ? p->fmt : NULL, 1);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    PGresult *z = NULL;
    if ((st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) &&
        (db->durability == AB_DURABILITY_PROCESS || !checked_alive(which) || still_alive(db, &z)))
        return r;
    if (z) { /* the read's rows are not trusted: the failure is the check's */
        PQclear(r);
        r = z;
    }
    ab__pg_fail(db, r, what, err);
    return NULL;
}

static void put_be(uint8_t *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static void p_add(pg_params_t *p, const void *v, size_t len)
{
    p->val[p->n] = v;
    p->len[p->n] = (int)len;
    p->fmt[p->n] = 1;
    p->n++;
}

void ab__pg_p_text(pg_params_t *p, ab_str_t s)
{
    p_add(p, s.ptr ? s.ptr : "", s.ptr ? s.len : 0);
}

void ab__pg_p_cstr(pg_params_t *p, const char *s)
{
    p_add(p, s, strlen(s));
}

void ab__pg_p_i64(pg_params_t *p, int64_t v)
{
    put_be(p->num[p->n], (uint64_t)v, 8);
    p_add(p, p->num[p->n], 8);
}

void ab__pg_p_i32(pg_params_t *p, int32_t v)
{
    put_be(p->num[p->n], (uint32_t)v, 4);
    p_add(p, p->num[p->n], 4);
}

void ab__pg_p_bool(pg_params_t *p, bool v)
{
    p->num[p->n][0] = v ? 1 : 0;
    p_add(p, p->num[p->n], 1);
}

void ab__pg_p_bytes(pg_params_t *p, const uint8_t *b, size_t len)
{
    static const uint8_t none[1] = {0};
    p_add(p, len ? (const void *)b : none, len);
}

void ab__pg_p_null(pg_params_t *p)
{
    p->val[p->n] = NULL;
    p->len[p->n] = 0;
    p->fmt[p->n] = 1;
    p->n++;
}

int64_t ab__pg_i64(const PGresult *r, int row, int col)
{
    const uint8_t *v = (const uint8_t *)PQgetvalue(r, row, col);
    int n = PQgetlength(r, row, col);
    uint64_t x = 0;
    for (int i = 0; i < n; i++)
        x = (x << 8) | v[i];
    if (n == 4)
        return (int32_t)(uint32_t)x;
    return (int64_t)x;
}

ab_str_t ab__pg_str(const PGresult *r, int row, int col)
{
    return (ab_str_t){.ptr = PQgetvalue(r, row, col), .len = (size_t)PQgetlength(r, row, col)};
}

void ab__pg_copy(char *dst, size_t cap, const PGresult *r, int row, int col)
{
    ab_str_t s = ab__pg_str(r, row, col);
    size_t n = s.len < cap - 1 ? s.len : cap - 1;
    if (n)
        memcpy(dst, s.ptr, n);
    dst[n] = '\0';
}

ab_status_t ab__pg_check_id(ab_str_t id, const char *field, ab_error_t *err)
{
    return ab__req_check_id("postgres", id, field, err);
}

ab_status_t ab__pg_check_writer(ab_plugin_db_t *db, const char *what, ab_error_t *err)
{
    if (!db)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "postgres: NULL handle");
    if (db->readonly)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store",
                            "postgres: %s needs a writer handle (this one is read-only)", what);
    return AB_OK;
}

/* ---- waking a broker when another writer committed ------------------------------ */

static int pg_wake_fd(ab_plugin_db_t *db)
{
    if (!db || !db->conn || !db->listening || PQstatus(db->conn) != CONNECTION_OK)
        return -1;
    return PQsocket(db->conn);
}

static ab_status_t pg_wake_drain(ab_plugin_db_t *db, uint32_t *woken, ab_error_t *err)
{
    if (woken)
        *woken = 0;
    if (!db)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "store", "postgres: NULL handle");
    if (!db->conn || PQstatus(db->conn) != CONNECTION_OK)
        return ab__pg_ready(db, err);
    if (!PQconsumeInput(db->conn))
        return ab__pg_fail(db, NULL, "notifications", err);
    PGnotify *n;
    int self = PQbackendPID(db->conn);
    while ((n = PQnotifies(db->conn)) != NULL) {
        uint32_t bit = strcmp(n->relname, "ab_requests") == 0 ? AB_WAKE_REQUESTS : AB_WAKE_EVENTS;
        if (woken && (bit == AB_WAKE_EVENTS || n->be_pid != self)) /* not our own moves */
            *woken |= bit;
        PQfreemem(n);
    }
    return AB_OK;
}

static const ab_plugin_t PG_PLUGIN = {
    .abi_version = AB_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(ab_plugin_t),
    .name = "postgres",
    .open = pg_open,
    .close = pg_close,
    .append_batch = ab__pg_append_batch,
    .append_fenced = ab__pg_append_fenced,
    .claim = ab__pg_claim,
    .head = ab__pg_head,
    .thread_heads = ab__pg_thread_heads,
    .heads_of = ab__pg_heads_of,
    .head_pos = ab__pg_head_pos,
    .read = ab__pg_read,
    .event_bytes = ab__pg_event_bytes,
    .snapshot_put = ab__pg_snapshot_put,
    .snapshot_get = ab__pg_snapshot_get,
    .request_put = ab__pg_request_put,
    .request_get = ab__pg_request_get,
    .request_by_key = ab__pg_request_by_key,
    .request_move = ab__pg_request_move,
    .request_list = ab__pg_request_list,
    .request_thread_open = ab__pg_request_thread_open,
    .request_position = ab__pg_request_position,
    .request_by_run = ab__pg_request_by_run,
    .stats = ab__pg_stats,
    .wake_fd = pg_wake_fd,
    .wake_drain = pg_wake_drain,
    .request_take = ab__pg_request_take,
    .broker_lease = ab__pg_broker_lease,
    .request_cancel = ab__pg_request_cancel,
    .request_cancel_held = ab__pg_request_cancel_held,
    .threads_list = ab__pg_threads_list,
};

/** The plugin entry point (AB_PLUGIN_ENTRY_SYMBOL). */
__attribute__((visibility("default"))) const ab_plugin_t *ab_plugin_entry(void);

const ab_plugin_t *ab_plugin_entry(void)
{
    return &PG_PLUGIN;
}

/*
 * snapshot.c - durable thread snapshots: the builder (events in commit order
 * -> reducer + events of the active runs), the document it writes, parsing
 * and restoring. The rules a document must satisfy are checked in
 * snapshot_check.c; the document is specified in docs/REDUCER.md section 6.
 *
 * Invariants:
 *  1. runs (checkpoint) holds, for every run fed, its last seq; every run of
 *     the reducer's projection is in it with that seq as lastSeq.
 *  2. events holds, in commit order, exactly the events of the runs whose
 *     projection status is "active"; a run's events are dropped when it ends,
 *     so memory follows the state plus the active runs, not the event count.
 *  3. feed() checks its arguments before folding: a refused event changes
 *     nothing. pos only grows.
 *  4. A document is built from deep copies: it never aliases the builder.
 */
#include "alloc_internal.h"
#include "reducer_internal.h"

#include "agentbus/ids.h"
#include "agentbus/snapshot.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct ab_snapshot_builder {
    ab_reducer_t *r;
    json_t *runs;   /* run id -> last seq */
    json_t *kept;   /* run id -> true, for runs with events in @events */
    json_t *events; /* [{run, seq, pos, event}] of the active runs */
    uint64_t pos;   /* commit position of the last event */
};

struct ab_snapshot {
    json_t *doc;
};

static ab_status_t nomem(ab_error_t *err)
{
    return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
}

static ab_status_t builder_alloc(ab_snapshot_builder_t **out, ab_error_t *err)
{
    ab_snapshot_builder_t *b = ab_calloc(1, sizeof *b);
    if (!b)
        return nomem(err);
    b->kept = json_object();
    if (!b->kept) {
        ab_snapshot_builder_destroy(&b);
        return nomem(err);
    }
    *out = b;
    return AB_OK;
}

ab_status_t ab_snapshot_builder_new(ab_snapshot_builder_t **out, const char *thread_id,
                                    ab_error_t *err)
{
    if (!out || !thread_id)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "builder needs a thread id");
    ab_error_t e = AB_ERROR_INIT;
    if (ab_id_check(thread_id, strlen(thread_id), 0, "thread", &e) != AB_OK)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "thread", "%s", e.message);
    ab_snapshot_builder_t *b;
    ab_status_t st = builder_alloc(&b, err);
    if (st != AB_OK)
        return st;
    b->runs = json_object();
    b->events = json_array();
    if (!b->runs || !b->events) {
        ab_snapshot_builder_destroy(&b);
        return nomem(err);
    }
    if ((st = ab_reducer_new(&b->r, thread_id, err)) != AB_OK) {
        ab_snapshot_builder_destroy(&b);
        return st;
    }
    *out = b;
    return AB_OK;
}

ab_status_t ab_snapshot_builder_from(ab_snapshot_builder_t **out, const ab_snapshot_t *s,
                                     ab_error_t *err)
{
    if (!out || !s)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "builder needs a snapshot");
    ab_snapshot_builder_t *b;
    ab_status_t st = builder_alloc(&b, err);
    if (st != AB_OK)
        return st;
    const json_t *cp = json_object_get(s->doc, "checkpoint");
    b->runs = json_deep_copy(json_object_get(cp, "runs"));
    b->events = json_deep_copy(json_object_get(s->doc, "activeEvents"));
    b->pos = (uint64_t)json_integer_value(json_object_get(cp, "position"));
    size_t i;
    json_t *id;
    json_array_foreach(json_object_get(s->doc, "activeRuns"), i, id)
    {
        if (json_object_set_new(b->kept, json_string_value(id), json_true()) != 0)
            st = nomem(err);
    }
    if (st == AB_OK && (!b->runs || !b->events))
        st = nomem(err);
    if (st == AB_OK)
        st = ab_snapshot_restore(s, &b->r, err);
    if (st != AB_OK) {
        ab_snapshot_builder_destroy(&b);
        return st;
    }
    *out = b;
    return AB_OK;
}

void ab_snapshot_builder_destroy(ab_snapshot_builder_t **bp)
{
    if (!bp || !*bp)
        return;
    ab_snapshot_builder_t *b = *bp;
    ab_reducer_destroy(&b->r);
    json_decref(b->runs);
    json_decref(b->kept);
    json_decref(b->events);
    ab_free(b);
    *bp = NULL;
}

const ab_reducer_t *ab_snapshot_builder_reducer(const ab_snapshot_builder_t *b)
{
    return b ? b->r : NULL;
}

/* Check feed()'s arguments against the checkpoint; nothing is changed. */
static ab_status_t feed_check(const ab_snapshot_builder_t *b, const char *run, uint64_t seq,
                              uint64_t pos, ab_error_t *err)
{
    ab_error_t e = AB_ERROR_INIT;
    if (!b || !run || ab_id_check(run, strlen(run), 0, "run", &e) != AB_OK)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "run", "bad run id: %s", e.message);
    json_t *last = json_object_get(b->runs, run);
    uint64_t want = last ? (uint64_t)json_integer_value(last) + 1 : 1;
    if (seq != want)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "seq",
                            "seq %llu of run '%s' is not the next one (%llu)",
                            (unsigned long long)seq, run, (unsigned long long)want);
    if (json_object_size(b->runs) > 0 && pos <= b->pos)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "pos", "position %llu does not follow %llu",
                            (unsigned long long)pos, (unsigned long long)b->pos);
    return AB_OK;
}

/* Remove the kept events of @p run (it ended). */
static void drop_run(ab_snapshot_builder_t *b, const char *run)
{
    size_t w = 0, n = json_array_size(b->events);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(b->events, i);
        if (strcmp(json_string_value(json_object_get(e, "run")), run) != 0)
            json_array_set(b->events, w++, e);
    }
    while (json_array_size(b->events) > w)
        json_array_remove(b->events, json_array_size(b->events) - 1);
    json_object_del(b->kept, run);
}

ab_status_t ab_snapshot_builder_feed(ab_snapshot_builder_t *b, const char *run, uint64_t seq,
                                     uint64_t pos, const ab_val_t *event, ab_error_t *err)
{
    ab_status_t st = feed_check(b, run, seq, pos, err);
    if (st != AB_OK || (st = ab_reducer_apply(b->r, event, run, seq, err)) != AB_OK)
        return st;
    b->pos = pos;
    if (json_object_set_new(b->runs, run, json_integer((json_int_t)seq)) != 0)
        return nomem(err);
    json_t *item = rd_find(&b->r->coll[RD_RUNS], run, strlen(run));
    const char *status = json_string_value(json_object_get(item, "status"));
    if (!status || strcmp(status, "active") != 0) {
        if (json_object_get(b->kept, run))
            drop_run(b, run);
        return AB_OK;
    }
    json_t *e = json_pack("{s:s,s:I,s:I,s:o}", "run", run, "seq", (json_int_t)seq, "pos",
                          (json_int_t)pos, "event", ab_val_to_jansson(event));
    if (!e || json_array_append_new(b->events, e) != 0 ||
        json_object_set_new(b->kept, run, json_true()) != 0)
        return nomem(err);
    return AB_OK;
}

/* Ids of the projection's runs whose status is "active", in run order. */
static json_t *active_runs(const json_t *projection)
{
    json_t *ids = json_array();
    size_t i;
    json_t *run;
    json_array_foreach(json_object_get(projection, "runs"), i, run)
    {
        const char *st = json_string_value(json_object_get(run, "status"));
        if (ids && st && strcmp(st, "active") == 0 &&
            json_array_append(ids, json_object_get(run, "id")) != 0)
            json_decref(ids), ids = NULL;
    }
    return ids;
}

ab_status_t ab_snapshot_builder_document(const ab_snapshot_builder_t *b, json_t **out,
                                         ab_error_t *err)
{
    if (!b || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "NULL builder or out");
    const json_t *p = ab_reducer_state(b->r);
    json_t *doc =
        json_pack("{s:i,s:O,s:o,s:o,s:{s:o,s:I},s:o,s:o}", "formatVersion",
                  AB_SNAPSHOT_FORMAT_VERSION, "threadId", json_object_get(p, "threadId"),
                  "projection", json_deep_copy(p), "lanes", json_deep_copy(ab_reducer_lanes(b->r)),
                  "checkpoint", "runs", json_deep_copy(b->runs), "position", (json_int_t)b->pos,
                  "activeRuns", active_runs(p), "activeEvents", json_deep_copy(b->events));
    if (!doc)
        return nomem(err);
    *out = doc;
    return AB_OK;
}

/* ---- parsed snapshots ---- */

ab_status_t ab_snapshot_from_json(const json_t *doc, ab_snapshot_t **out, ab_error_t *err)
{
    if (!out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "NULL out");
    ab_status_t st = ab_snapshot_validate(doc, err);
    if (st != AB_OK)
        return st;
    ab_snapshot_t *s = ab_malloc(sizeof *s);
    if (!s)
        return nomem(err);
    s->doc = json_incref((json_t *)(uintptr_t)doc);
    *out = s;
    return AB_OK;
}

ab_status_t ab_snapshot_parse(const char *text, size_t len, ab_snapshot_t **out, ab_error_t *err)
{
    if (!text || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "NULL text or out");
    json_error_t je;
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!doc) {
        ab_status_t st =
            ab_error_set(err, AB_CORRUPT, "",
                         "snapshot rule 'json': not a JSON object: %s (line %d)", je.text, je.line);
        ab_error_detail_str(err, "rule", "json");
        return st;
    }
    ab_status_t st = ab_snapshot_from_json(doc, out, err);
    json_decref(doc);
    return st;
}

void ab_snapshot_destroy(ab_snapshot_t **sp)
{
    if (!sp || !*sp)
        return;
    json_decref((*sp)->doc);
    ab_free(*sp);
    *sp = NULL;
}

const json_t *ab_snapshot_document(const ab_snapshot_t *s)
{
    return s ? s->doc : NULL;
}

uint64_t ab_snapshot_position(const ab_snapshot_t *s)
{
    const json_t *cp = json_object_get(s ? s->doc : NULL, "checkpoint");
    return (uint64_t)json_integer_value(json_object_get(cp, "position"));
}

ab_status_t ab_snapshot_restore(const ab_snapshot_t *s, ab_reducer_t **out, ab_error_t *err)
{
    if (!s || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "NULL snapshot or out");
    return ab_reducer_from_state(out, json_object_get(s->doc, "projection"),
                                 json_object_get(s->doc, "lanes"), err);
}

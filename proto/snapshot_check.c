/*
 * snapshot_check.c - ab__snapshot_validate(): every rule a snapshot document
 * must satisfy (docs/REDUCER.md section 6). Each failure is AB_CORRUPT with
 * the rule's stable name in the message and in the detail "rule", and the
 * JSON pointer of the offending value in err->field.
 *
 * Invariants:
 *  1. Rules are checked in document order (top level, projection, lanes,
 *     checkpoint, activeRuns, activeEvents); the first broken one is
 *     reported.
 *  2. The document is only read, never changed.
 *  3. A document that passes can be restored (ab__reducer_from_state() finds
 *     every key it needs with the right type).
 *  4. Time is linear in the document's size: run ids are looked up in two
 *     hash indexes built on the way (runs_by_id, active_set), never by a
 *     scan, so a thread of 25,000 runs costs 25,000 lookups, not 25,000^2.
 */
#include "agentbus/ids.h"
#include "agentbus/snapshot.h"
#include "jansson_internal.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The rule context: the document's parts, found by check_top(). */
typedef struct chk {
    const json_t *doc, *proj, *cp_runs, *active;
    json_t *runs_by_id; /**< projection run id -> its run object (check_runs) */
    json_t *active_set; /**< activeRuns id -> true (check_active_runs) */
    json_int_t position;
    ab_error_t *err;
} chk_t;

static ab_status_t rule(chk_t *c, const char *name, const char *field, const char *fmt, ...)
    AB_PRINTF(4, 5);

static ab_status_t rule(chk_t *c, const char *name, const char *field, const char *fmt, ...)
{
    char msg[AB_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bool fresh = c->err && c->err->code == AB_OK;
    ab_error_set(c->err, AB_CORRUPT, field, "snapshot rule '%s': %s", name, msg);
    if (fresh)
        ab_error_detail_str(c->err, "rule", name);
    return AB_CORRUPT;
}

/* "/a/b" + escaped key (RFC 6901) into @p out. */
static const char *ptr(char *out, size_t n, const char *base, const char *key)
{
    size_t w = (size_t)snprintf(out, n, "%s/", base);
    for (; key && *key && w + 3 < n; key++) {
        if (*key == '~' || *key == '/') {
            out[w++] = '~';
            out[w++] = *key == '~' ? '0' : '1';
        } else {
            out[w++] = *key;
        }
    }
    out[w < n ? w : n - 1] = '\0';
    return out;
}

static bool is_count(const json_t *v, json_int_t min)
{
    return json_is_integer(v) && json_integer_value(v) >= min;
}

static bool id_ok(const char *s)
{
    return s && ab_id_check(s, strlen(s), 0, "id", NULL) == AB_OK;
}

static ab_status_t check_top(chk_t *c)
{
    const json_t *v = json_object_get(c->doc, "formatVersion");
    if (!json_is_integer(v) || json_integer_value(v) != AB_SNAPSHOT_FORMAT_VERSION)
        return rule(c, "format-version", "/formatVersion", "formatVersion is missing or not %d",
                    AB_SNAPSHOT_FORMAT_VERSION);
    if (!id_ok(json_string_value(json_object_get(c->doc, "threadId"))))
        return rule(c, "thread-id", "/threadId", "threadId is missing or not a valid id");
    c->proj = json_object_get(c->doc, "projection");
    if (!json_is_object(c->proj))
        return rule(c, "projection", "/projection", "projection is missing or not an object");
    return AB_OK;
}

static const char *const array_keys[] = {
    "runs",  "messages", "toolCalls",    "reasoning", "reasoningSpans", "activities", "approvals",
    "tasks", "roster",   "interactions", "artifacts", "suggestions",    "widgets",    "warnings"};

static ab_status_t check_projection(chk_t *c)
{
    char f[AB_ERROR_FIELD_MAX];
    const json_t *v = json_object_get(c->proj, "formatVersion");
    if (!json_is_integer(v))
        return rule(c, "projection-key", "/projection/formatVersion",
                    "projection formatVersion is missing or not an integer");
    if (json_integer_value(v) != AB_REDUCER_FORMAT_VERSION) /* e.g. stored by an older build */
        return rule(c, "projection-key", "/projection/formatVersion",
                    "projection formatVersion is %lld, this build reads only %d (a snapshot "
                    "of another format is rebuilt from the events)",
                    (long long)json_integer_value(v), AB_REDUCER_FORMAT_VERSION);
    if (!json_object_get(c->proj, "state"))
        return rule(c, "projection-key", "/projection/state", "projection key 'state' missing");
    for (size_t i = 0; i < sizeof array_keys / sizeof array_keys[0]; i++)
        if (!json_is_array(json_object_get(c->proj, array_keys[i])))
            return rule(c, "projection-key", ptr(f, sizeof f, "/projection", array_keys[i]),
                        "projection key '%s' missing or not an array", array_keys[i]);
    if (!json_equal(json_object_get(c->proj, "threadId"), json_object_get(c->doc, "threadId")))
        return rule(c, "projection-thread", "/projection/threadId",
                    "projection threadId differs from the snapshot's threadId");
    return AB_OK;
}

static const char *const statuses[] = {"active", "finished", "error", "interrupted", "cancelled"};

/* Each projection run: {id, status (known), lastSeq >= 1}, ids unique (indexed by id). */
static ab_status_t check_runs(chk_t *c)
{
    char f[64];
    size_t i;
    json_t *run;
    c->runs_by_id = json_object();
    if (!c->runs_by_id)
        return ab_error_set(c->err, AB_NOMEM, NULL, "out of memory");
    json_array_foreach(json_object_get(c->proj, "runs"), i, run)
    {
        const char *id = json_string_value(json_object_get(run, "id"));
        const char *st = json_string_value(json_object_get(run, "status"));
        bool known = false;
        for (size_t k = 0; st && k < sizeof statuses / sizeof statuses[0]; k++)
            known = known || strcmp(st, statuses[k]) == 0;
        snprintf(f, sizeof f, "/projection/runs/%zu", i);
        if (!id_ok(id) || !known || !is_count(json_object_get(run, "lastSeq"), 1))
            return rule(c, "projection-run", f,
                        "run needs a valid id, a known status and lastSeq >= 1");
        if (json_object_get(c->runs_by_id, id))
            return rule(c, "projection-run", f, "run '%s' appears twice", id);
        if (json_object_set(c->runs_by_id, id, run) != 0)
            return ab_error_set(c->err, AB_NOMEM, NULL, "out of memory");
    }
    return AB_OK;
}

/* lanes: {"text|tool|reasoning\x1f<subagent>": id}. */
static ab_status_t check_lanes(chk_t *c)
{
    char f[AB_ERROR_FIELD_MAX];
    const json_t *lanes = json_object_get(c->doc, "lanes");
    if (!json_is_object(lanes))
        return rule(c, "lanes", "/lanes", "lanes is missing or not an object");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)(uintptr_t)lanes, k, v)
    {
        bool kind = strncmp(k, "text\x1f", 5) == 0 || strncmp(k, "tool\x1f", 5) == 0 ||
                    strncmp(k, "reasoning\x1f", 10) == 0;
        if (!kind || !json_is_string(v))
            return rule(c, "lanes", ptr(f, sizeof f, "/lanes", k),
                        "lane key is not <kind>\\u001f<subagent> or its id not a string");
    }
    return AB_OK;
}

/* The projection run with id @p id, or NULL (check_runs indexed them). */
static const json_t *proj_run(const chk_t *c, const char *id)
{
    return json_object_get(c->runs_by_id, id);
}

/* Whether @p id is in activeRuns (check_active_runs indexed them). */
static bool is_active(const chk_t *c, const char *id)
{
    return json_object_get(c->active_set, id) != NULL;
}

static ab_status_t check_checkpoint(chk_t *c)
{
    char f[AB_ERROR_FIELD_MAX];
    const json_t *cp = json_object_get(c->doc, "checkpoint");
    c->cp_runs = json_object_get(cp, "runs");
    if (!json_is_object(cp) || !json_is_object(c->cp_runs) ||
        !is_count(json_object_get(cp, "position"), 0))
        return rule(c, "checkpoint", "/checkpoint",
                    "checkpoint is missing or lacks runs {} or position >= 0");
    c->position = json_integer_value(json_object_get(cp, "position"));
    const char *id;
    json_t *seq;
    json_object_foreach((json_t *)(uintptr_t)c->cp_runs, id, seq)
    {
        ptr(f, sizeof f, "/checkpoint/runs", id);
        if (!id_ok(id) || !is_count(seq, 1))
            return rule(c, "checkpoint-seq", f, "run '%s' needs a valid id and a seq >= 1", id);
        const json_t *run = proj_run(c, id);
        if (!run || !json_equal(json_object_get(run, "lastSeq"), seq))
            return rule(c, "checkpoint-runs", f,
                        "run '%s' is not in the projection with lastSeq %lld", id,
                        (long long)json_integer_value(seq));
    }
    if (json_array_size(json_object_get(c->proj, "runs")) != json_object_size(c->cp_runs))
        return rule(c, "checkpoint-runs", "/checkpoint/runs",
                    "the projection has runs the checkpoint does not name");
    return AB_OK;
}

static ab_status_t check_active_runs(chk_t *c)
{
    char f[64];
    c->active = json_object_get(c->doc, "activeRuns");
    if (!json_is_array(c->active))
        return rule(c, "active-runs", "/activeRuns", "activeRuns is missing or not an array");
    c->active_set = json_object();
    if (!c->active_set)
        return ab_error_set(c->err, AB_NOMEM, NULL, "out of memory");
    size_t i;
    json_t *v;
    json_array_foreach(c->active, i, v)
    {
        const char *id = json_string_value(v);
        snprintf(f, sizeof f, "/activeRuns/%zu", i);
        if (!id || is_active(c, id))
            return rule(c, "active-runs", f, "not a string, or listed twice");
        if (json_object_set_new(c->active_set, id, json_true()) != 0)
            return ab_error_set(c->err, AB_NOMEM, NULL, "out of memory");
        if (!json_object_get(c->cp_runs, id))
            return rule(c, "active-run-unknown", f, "run '%s' is not in the checkpoint", id);
        const char *st = json_string_value(json_object_get(proj_run(c, id), "status"));
        if (strcmp(st, "active") != 0)
            return rule(c, "active-run-terminal", f, "run '%s' is %s, not active", id, st);
    }
    json_array_foreach(json_object_get(c->proj, "runs"), i, v)
    {
        const char *id = json_string_value(json_object_get(v, "id"));
        const char *st = json_string_value(json_object_get(v, "status"));
        snprintf(f, sizeof f, "/projection/runs/%zu", i);
        if (strcmp(st, "active") == 0 && !is_active(c, id))
            return rule(c, "active-run-missing", f, "active run '%s' not in activeRuns", id);
    }
    return AB_OK;
}

/* "/activeEvents/<i>" into @p f (only when a rule breaks: the loop is hot). */
static const char *item_ptr(char *f, size_t n, size_t i)
{
    snprintf(f, n, "/activeEvents/%zu", i);
    return f;
}

/* One activeEvents item against the run's previous seq (tracked in @p last). */
static ab_status_t check_event(chk_t *c, size_t i, const sn_item_t *it, json_t *last,
                               json_int_t *prev_pos)
{
    char f[64];
    const char *run = it->run;
    if (!it->shape_ok || !run || it->seq < 1 || it->pos < 1)
        return rule(c, "active-events", item_ptr(f, sizeof f, i),
                    "an active event is {run, seq >= 1, pos >= 1, event with a type}");
    if (!is_active(c, run))
        return rule(c, "active-event-run", item_ptr(f, sizeof f, i),
                    "event of run '%s', which is not active", run);
    json_int_t s = it->seq, p = it->pos;
    json_t *prev = json_object_get(last, run);
    if (!prev) {
        const json_t *started = json_object_get(proj_run(c, run), "startedSeq");
        json_int_t start = json_is_integer(started) ? json_integer_value(started) : 1;
        if (s > start)
            return rule(c, "active-event-start", item_ptr(f, sizeof f, i),
                        "the events of run '%s' start at seq %lld, after its start %lld", run,
                        (long long)s, (long long)start);
    } else if (s != json_integer_value(prev) + 1) {
        return rule(c, "active-event-order", item_ptr(f, sizeof f, i),
                    "seq %lld of run '%s' does not follow %lld", (long long)s, run,
                    (long long)json_integer_value(prev));
    }
    if (p <= *prev_pos || p > c->position)
        return rule(c, "active-event-position", item_ptr(f, sizeof f, i),
                    "pos %lld is not after the previous event's or beyond checkpoint %lld",
                    (long long)p, (long long)c->position);
    *prev_pos = p;
    if (prev != NULL ? json_integer_set(prev, s) != 0
                     : json_object_set_new(last, run, json_integer(s)) != 0)
        return ab_error_set(c->err, AB_NOMEM, NULL, "out of memory");
    return AB_OK;
}

/* The @p n active events given by @p fn: each valid, and every active run's ending at its
 * checkpoint seq. */
static ab_status_t check_active_events(chk_t *c, size_t n, sn_item_fn fn, const void *ud)
{
    json_t *last = json_object();
    if (!last)
        return ab_error_set(c->err, AB_NOMEM, NULL, "out of memory");
    json_int_t prev_pos = 0;
    ab_status_t st = AB_OK;
    char run[AB_ID_MAX_BYTES + 1];
    for (size_t i = 0; st == AB_OK && i < n; i++) {
        sn_item_t it = {0};
        fn(ud, i, &it, run);
        st = check_event(c, i, &it, last, &prev_pos);
    }
    size_t i;
    json_t *v;
    json_array_foreach(c->active, i, v)
    {
        const char *id = json_string_value(v);
        if (st == AB_OK && !json_equal(json_object_get(last, id), json_object_get(c->cp_runs, id)))
            st = rule(c, "active-event-tail", "/activeEvents",
                      "the events of active run '%s' do not end at its checkpoint seq %lld", id,
                      (long long)json_integer_value(json_object_get(c->cp_runs, id)));
    }
    json_decref(last);
    return st;
}

/* sn_item_fn over the JSON array activeEvents. */
static void json_item(const void *ud, size_t i, sn_item_t *it, char *run)
{
    (void)run;
    const json_t *e = json_array_get(ud, i);
    const json_t *seq = json_object_get(e, "seq"), *pos = json_object_get(e, "pos");
    const json_t *ev = json_object_get(e, "event");
    it->run = json_string_value(json_object_get(e, "run"));
    it->seq = json_is_integer(seq) ? json_integer_value(seq) : 0;
    it->pos = json_is_integer(pos) ? json_integer_value(pos) : 0;
    it->shape_ok = json_is_object(ev) && json_is_string(json_object_get(ev, "type"));
}

/* Every rule up to activeRuns (invariant 1). */
static ab_status_t check_head(chk_t *c)
{
    if (!c->doc)
        return ab_error_set(c->err, AB_INVALID_ARGUMENT, NULL, "NULL snapshot document");
    if (!json_is_object(c->doc))
        return rule(c, "json", "", "the snapshot is not a JSON object");
    ab_status_t st;
    if ((st = check_top(c)) != AB_OK || (st = check_projection(c)) != AB_OK ||
        (st = check_runs(c)) != AB_OK || (st = check_lanes(c)) != AB_OK ||
        (st = check_checkpoint(c)) != AB_OK || (st = check_active_runs(c)) != AB_OK)
        return st;
    return AB_OK;
}

static void chk_free(chk_t *c)
{
    json_decref(c->runs_by_id);
    json_decref(c->active_set);
}

ab_status_t ab__snapshot_validate_items(const json_t *doc, size_t n, sn_item_fn fn, const void *ud,
                                        ab_error_t *err)
{
    chk_t c = {.doc = doc, .err = err};
    ab_status_t st = check_head(&c);
    if (st == AB_OK)
        st = check_active_events(&c, n, fn, ud);
    chk_free(&c);
    return st;
}

ab_status_t ab__snapshot_validate(const json_t *doc, ab_error_t *err)
{
    chk_t c = {.doc = doc, .err = err};
    ab_status_t st = check_head(&c);
    const json_t *events = json_object_get(doc, "activeEvents");
    if (st == AB_OK && !json_is_array(events))
        st = rule(&c, "active-events", "/activeEvents", "activeEvents is missing or not an array");
    if (st == AB_OK)
        st = check_active_events(&c, json_array_size(events), json_item, events);
    chk_free(&c);
    return st;
}

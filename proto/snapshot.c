/*
 * snapshot.c - durable thread snapshots: the builder (events in commit order
 * -> reducer + events of the active runs), the document it writes, parsing
 * and restoring. The rules a document must satisfy are checked in
 * snapshot_check.c; the document is specified in docs/REDUCER.md section 6.
 *
 * Invariants:
 *  1. runs (checkpoint) holds, for every run fed, its last seq; every run of
 *     the reducer's projection is in it with that seq as lastSeq.
 *  2. The live events of ev/bytes (ab__sn_live) are, in commit order, exactly
 *     the events of the runs whose projection status is "active" (msgpack
 *     bodies). A run's events die when it ends (its record's generation moves,
 *     snapshot_runs.c) and go when the dead reach half of ev, so memory
 *     follows the state plus at most twice the active runs' events, not the
 *     event count, and an end costs O(1) amortized.
 *  3. feed() checks its arguments before folding: a refused event changes
 *     nothing (but may leave its run a record in idx). pos only grows.
 *  4. A document is built from deep copies: it never aliases the builder.
 *  5. Every run fed or with kept events has a record in idx; a kept event names
 *     its own, whose nkept counts its live ones. A run is active exactly when it
 *     has live kept events (its last event was kept; a document's active runs each
 *     have events: snapshot_check.c "active-event-tail"), so nactive, the records
 *     with nkept > 0, is the number of active runs.
 */
#include "ab_common.h"
#include "alloc_internal.h"
#include "reducer_internal.h"
#include "snapshot_internal.h"

#include "agentbus/ids.h"
#include "agentbus/snapshot.h"
#include "value_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct ab_snapshot {
    json_t *doc;
    /** binary stored form only: the active events, packed (a builder with no reducer);
     *  doc's activeEvents is then an empty array. NULL for a document read as JSON. */
    ab_snapshot_builder_t *kept;
    /** binary stored form only: the document's nesting depth (root = 1); else 0 */
    uint32_t depth;
};

static ab_status_t nomem(ab_error_t *err)
{
    return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
}

static ab_status_t builder_alloc(ab_snapshot_builder_t **out, ab_error_t *err)
{
    ab_snapshot_builder_t *b = ab__calloc(1, sizeof *b);
    if (!b)
        return nomem(err);
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
    if (!b->runs) {
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

/* Append one kept event (run id and body bytes); nothing changes on failure. */
static ab_status_t keep_event(ab_snapshot_builder_t *b, const char *run, uint64_t seq, uint64_t pos,
                              const void *body, size_t len, uint32_t depth)
{
    sn_event_t *v = ab__grow_with(ab__realloc, b->ev, &b->evcap, b->nev + 1, sizeof(*v), 64);
    if (!v)
        return AB_NOMEM;
    b->ev = v;
    size_t off = b->bytes.len, rl = strlen(run);
    if (ab_buf_append(&b->bytes, run, rl) != AB_OK ||
        (body && ab_buf_append(&b->bytes, body, len) != AB_OK)) {
        b->bytes.len = off;
        return AB_NOMEM;
    }
    b->ev[b->nev++] = (sn_event_t){.seq = seq,
                                   .pos = pos,
                                   .off = off,
                                   .run_len = (uint32_t)rl,
                                   .ev_len = (uint32_t)(b->bytes.len - off - rl),
                                   .depth = depth,
                                   .rid = SN_NO_RUN};
    return AB_OK;
}

static uint32_t json_depth(const json_t *v)
{
    uint32_t d = 0;
    size_t i;
    const char *k;
    json_t *c;
    if (json_is_array(v))
        json_array_foreach(v, i, c) d = SN_MAX(d, json_depth(c));
    else if (json_is_object(v))
        json_object_foreach((json_t *)(uintptr_t)v, k, c) d = SN_MAX(d, json_depth(c));
    return d + 1;
}

/* The activeEvents of a validated document, packed into the builder. */
static ab_status_t restore_events(ab_snapshot_builder_t *b, const json_t *events)
{
    ab_buf_t tmp = AB_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &tmp, ab_buf_msgpack_write);
    ab_status_t st = AB_OK;
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e)
    {
        const json_t *body = json_object_get(e, "event");
        ab_buf_reset(&tmp);
        st = ab__sn_pack_json(&pk, body, 1, UINT32_MAX);
        if (st == AB_OK)
            st = keep_event(b, json_string_value(json_object_get(e, "run")),
                            (uint64_t)json_integer_value(json_object_get(e, "seq")),
                            (uint64_t)json_integer_value(json_object_get(e, "pos")), tmp.data,
                            tmp.len, json_depth(body));
        if (st != AB_OK)
            break;
    }
    ab_buf_free(&tmp);
    return st;
}

/* The packed events of a binary snapshot, copied as bytes into the builder. */
static ab_status_t copy_kept(ab_snapshot_builder_t *b, const ab_snapshot_builder_t *k)
{
    if (k->nev == 0)
        return AB_OK;
    b->ev = ab__malloc(k->nev * sizeof(*b->ev));
    if (!b->ev || ab_buf_append(&b->bytes, k->bytes.data, k->bytes.len) != AB_OK)
        return AB_NOMEM;
    memcpy(b->ev, k->ev, k->nev * sizeof(*b->ev));
    b->nev = b->evcap = k->nev;
    return AB_OK;
}

/* The record of run [run, run+n), made when missing with its node in runs; NULL = no memory. */
static sn_run_t *run_rec(ab_snapshot_builder_t *b, const char *run, size_t n)
{
    uint64_t h = ab__sn_run_hash(run, n);
    sn_run_t *r = ab__sn_runs_get(&b->idx, run, n, h);
    if (!r && (r = ab__sn_runs_put(&b->idx, run, n, h)) != NULL)
        r->last = json_object_getn(b->runs, run, n);
    return r;
}

/* Number the runs of the kept events (a restored builder's: those of the active runs). */
static ab_status_t index_kept(ab_snapshot_builder_t *b)
{
    for (size_t i = 0; i < b->nev; i++) {
        sn_event_t *e = &b->ev[i];
        sn_run_t *r = run_rec(b, (const char *)b->bytes.data + e->off, e->run_len);
        if (!r)
            return AB_NOMEM;
        e->rid = (uint32_t)(r - b->idx.rec);
        e->gen = r->gen;
        b->nactive += r->nkept++ == 0;
    }
    return AB_OK;
}

/* The builder of @p s; with @p take it moves the snapshot's trees and events instead of
 * copying them (ab_snapshot_builder_take: the snapshot is destroyed right after). */
static ab_status_t builder_of(ab_snapshot_builder_t **out, ab_snapshot_t *s, bool take,
                              ab_error_t *err)
{
    ab_snapshot_builder_t *b;
    ab_status_t st = builder_alloc(&b, err);
    if (st != AB_OK)
        return st;
    const json_t *cp = json_object_get(s->doc, "checkpoint");
    json_t *runs = json_object_get(cp, "runs");
    b->runs = take ? json_incref(runs) : json_deep_copy(runs);
    b->pos = (uint64_t)json_integer_value(json_object_get(cp, "position"));
    if (!b->runs)
        st = nomem(err);
    if (st == AB_OK && s->kept != NULL && take) {
        b->ev = s->kept->ev; /* moved: the snapshot's kept builder gives them up */
        b->nev = s->kept->nev;
        b->evcap = s->kept->evcap;
        b->bytes = s->kept->bytes;
        s->kept->ev = NULL;
        s->kept->nev = s->kept->evcap = 0;
        s->kept->bytes = (ab_buf_t)AB_BUF_INIT;
    } else if (st == AB_OK && s->kept != NULL && copy_kept(b, s->kept) != AB_OK) {
        st = nomem(err);
    } else if (st == AB_OK && s->kept == NULL &&
               restore_events(b, json_object_get(s->doc, "activeEvents")) != AB_OK) {
        st = nomem(err);
    }
    if (st == AB_OK && index_kept(b) != AB_OK)
        st = nomem(err);
    if (st == AB_OK)
        st = ab__reducer_from_state_ex(&b->r, json_object_get(s->doc, "projection"),
                                       json_object_get(s->doc, "lanes"), take, err);
    if (st != AB_OK) {
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
    return builder_of(out, (ab_snapshot_t *)(uintptr_t)s, false, err);
}

ab_status_t ab_snapshot_builder_take(ab_snapshot_builder_t **out, ab_snapshot_t **sp,
                                     ab_error_t *err)
{
    if (!out || !sp || !*sp)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "builder needs a snapshot");
    ab_snapshot_t *s = *sp;
    /* only a document nothing else holds may give its trees up */
    ab_status_t st = builder_of(out, s, s->doc->refcount == 1, err);
    ab_snapshot_destroy(sp);
    return st;
}

void ab_snapshot_builder_destroy(ab_snapshot_builder_t **bp)
{
    if (!bp || !*bp)
        return;
    ab_snapshot_builder_t *b = *bp;
    ab_reducer_destroy(&b->r);
    json_decref(b->runs);
    ab__sn_runs_free(&b->idx);
    ab__free(b->ev);
    ab_buf_free(&b->bytes);
    ab__free(b);
    *bp = NULL;
}

const ab_reducer_t *ab_snapshot_builder_reducer(const ab_snapshot_builder_t *b)
{
    return b ? b->r : NULL;
}

/* Check feed()'s arguments against the checkpoint; nothing is changed but the run's record
 * in the index, made when missing (@p *r; NULL = out of memory). */
static ab_status_t feed_check(ab_snapshot_builder_t *b, const char *run, uint64_t seq, uint64_t pos,
                              sn_run_t **r_out, ab_error_t *err)
{
    ab_error_t e = AB_ERROR_INIT;
    size_t n = run ? strlen(run) : 0;
    if (!b || !run || ab_id_check(run, n, 0, "run", &e) != AB_OK)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "run", "bad run id: %s", e.message);
    sn_run_t *r = run_rec(b, run, n);
    if ((*r_out = r) == NULL)
        return nomem(err);
    uint64_t want = r->last ? (uint64_t)json_integer_value(r->last) + 1 : 1;
    if (seq != want)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "seq",
                            "seq %llu of run '%s' is not the next one (%llu)",
                            (unsigned long long)seq, run, (unsigned long long)want);
    if (json_object_size(b->runs) > 0 && pos <= b->pos)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "pos", "position %llu does not follow %llu",
                            (unsigned long long)pos, (unsigned long long)b->pos);
    return AB_OK;
}

/* Keep only the live events, in order (ev and bytes shrink). */
static void compact(ab_snapshot_builder_t *b)
{
    size_t w = 0, wb = 0;
    for (size_t i = 0; i < b->nev; i++) {
        sn_event_t e = b->ev[i];
        if (!ab__sn_live(b, &e))
            continue;
        size_t n = e.run_len + (size_t)e.ev_len;
        memmove(b->bytes.data + wb, b->bytes.data + e.off, n);
        e.off = wb;
        wb += n;
        b->ev[w++] = e;
    }
    b->nev = w;
    b->bytes.len = wb;
    b->dead = 0;
}

/* Run @p r ended: its kept events die (a generation bumped), and once the dead are over
 * half of the events they go in one pass, so each costs O(1) however the runs end. */
static void drop_run(ab_snapshot_builder_t *b, sn_run_t *r)
{
    b->dead += r->nkept;
    b->nactive--;
    r->nkept = 0;
    r->gen++;
    if (b->dead > 0 && 2 * b->dead >= b->nev)
        compact(b);
}

static uint32_t val_depth(const ab_val_t *v)
{
    uint32_t d = 0;
    if (v->type == AB_VAL_ARRAY)
        for (uint32_t i = 0; i < v->len; i++)
            d = SN_MAX(d, val_depth(&v->u.items[i]));
    else if (v->type == AB_VAL_MAP)
        for (uint32_t i = 0; i < v->len; i++)
            d = SN_MAX(d, val_depth(&v->u.pairs[i].val));
    return d + 1;
}

/* Keep @p event (packed) as an event of the active run @p run. */
static ab_status_t keep_val(ab_snapshot_builder_t *b, const char *run, uint64_t seq, uint64_t pos,
                            const ab_val_t *event)
{
    size_t mark = b->bytes.len;
    if (keep_event(b, run, seq, pos, NULL, 0, val_depth(event)) != AB_OK)
        return AB_NOMEM;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b->bytes, ab_buf_msgpack_write);
    if (ab__val_pack(&pk, event) != AB_OK) {
        b->nev--;
        b->bytes.len = mark;
        return AB_NOMEM;
    }
    sn_event_t *e = &b->ev[b->nev - 1];
    e->ev_len = (uint32_t)(b->bytes.len - e->off - e->run_len);
    return AB_OK;
}

ab_status_t ab_snapshot_builder_feed(ab_snapshot_builder_t *b, const char *run, uint64_t seq,
                                     uint64_t pos, const ab_val_t *event, ab_error_t *err)
{
    sn_run_t *r = NULL;
    ab_status_t st = feed_check(b, run, seq, pos, &r, err);
    if (st != AB_OK || (st = ab__reducer_apply_run(b->r, event, run, seq, &r->item, err)) != AB_OK)
        return st;
    b->pos = pos;
    if (r->last != NULL && r->last->refcount == 1) /* the run's counter, changed in place */
        json_integer_set(r->last, (json_int_t)seq);
    else if ((r->last = json_integer((json_int_t)seq)) == NULL ||
             json_object_set_new(b->runs, run, r->last) != 0) {
        r->last = json_object_get(b->runs, run);
        return nomem(err);
    }
    if (!ab__rd_is(r->item, "status", "active")) {
        if (r->nkept > 0)
            drop_run(b, r);
        return AB_OK;
    }
    if (keep_val(b, run, seq, pos, event) != AB_OK)
        return nomem(err);
    b->ev[b->nev - 1].rid = (uint32_t)(r - b->idx.rec);
    b->ev[b->nev - 1].gen = r->gen;
    b->nactive += r->nkept++ == 0;
    return AB_OK;
}

ab_status_t ab__snapshot_builder_document(const ab_snapshot_builder_t *b, json_t **out,
                                          ab_error_t *err)
{
    if (!b || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "NULL builder or out");
    const json_t *p = ab__reducer_state(b->r);
    json_t *doc = json_pack(
        "{s:i,s:O,s:o,s:o,s:{s:o,s:I},s:o,s:o}", "formatVersion", AB_SNAPSHOT_FORMAT_VERSION,
        "threadId", json_object_get(p, "threadId"), "projection", json_deep_copy(p), "lanes",
        json_deep_copy(ab__reducer_lanes(b->r)), "checkpoint", "runs", json_deep_copy(b->runs),
        "position", (json_int_t)b->pos, "activeRuns", ab__sn_active_runs(p, b->nactive),
        "activeEvents", ab__sn_events_json(b));
    if (!doc)
        return nomem(err);
    *out = doc;
    return AB_OK;
}

/* ---- parsed snapshots ---- */

ab_status_t ab__snapshot_from_json(const json_t *doc, ab_snapshot_t **out, ab_error_t *err)
{
    if (!out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "NULL out");
    ab_status_t st = ab__snapshot_validate(doc, err);
    if (st != AB_OK)
        return st;
    ab_snapshot_t *s = ab__calloc(1, sizeof *s); /* kept NULL, depth 0: read as JSON */
    if (!s)
        return nomem(err);
    s->doc = json_incref((json_t *)(uintptr_t)doc);
    *out = s;
    return AB_OK;
}

/* The fields of activeEvents item @p e in one pass (absent ones stay NULL). */
static void item_fields(const ab_val_t *e, const ab_val_t **f /* run, seq, pos, event */)
{
    static const char *const names[4] = {"run", "seq", "pos", "event"};
    f[0] = f[1] = f[2] = f[3] = NULL;
    if (e->type != AB_VAL_MAP)
        return;
    for (uint32_t i = 0; i < e->len; i++) {
        const ab_kv_t *kv = &e->u.pairs[i];
        for (int k = 0; k < 4; k++)
            if (kv->klen == strlen(names[k]) && memcmp(kv->key, names[k], kv->klen) == 0)
                f[k] = &kv->val;
    }
}

/* The activeEvents item @p e as the rules read it (@p run: its id's buffer), in one pass;
 * @p event: its "event" value (NULL when absent). */
static void val_fields(const ab_val_t *e, sn_item_t *it, char *run, const ab_val_t **event)
{
    const ab_val_t *f[4];
    item_fields(e, f);
    const ab_val_t *r = f[0], *type = ab_val_get(f[3], "type");
    if (r && r->type == AB_VAL_STR && r->len <= AB_ID_MAX_BYTES && !memchr(r->u.s, 0, r->len)) {
        memcpy(run, r->u.s, r->len);
        run[r->len] = '\0';
        it->run = run;
    }
    it->seq = f[1] && f[1]->type == AB_VAL_INT ? f[1]->u.i : 0;
    it->pos = f[2] && f[2]->type == AB_VAL_INT ? f[2]->u.i : 0;
    it->shape_ok = f[3] && f[3]->type == AB_VAL_MAP && type && type->type == AB_VAL_STR;
    *event = f[3];
}

/* sn_item_fn over the msgpack array activeEvents of a binary document. */
static void val_item(const void *ud, size_t i, sn_item_t *it, char *run)
{
    const ab_val_t *event;
    val_fields(&((const ab_val_t *)ud)->u.items[i], it, run, &event);
}

/* @p root (a map) as jansson, its activeEvents an empty array; NULL = no memory. */
static json_t *doc_without_events(const ab_val_t *root)
{
    ab_kv_t *pairs = ab__malloc((root->len ? root->len : 1) * sizeof(*pairs));
    if (!pairs)
        return NULL;
    static const ab_val_t empty = {.type = AB_VAL_ARRAY};
    for (uint32_t i = 0; i < root->len; i++) {
        pairs[i] = root->u.pairs[i];
        if (pairs[i].klen == 12 && memcmp(pairs[i].key, "activeEvents", 12) == 0)
            pairs[i].val = empty;
    }
    ab_val_t copy = {.type = AB_VAL_MAP, .len = root->len, .u.pairs = pairs};
    json_t *j = ab__val_to_jansson(&copy);
    ab__free(pairs);
    return j;
}

/* The validated active events of @p events kept in a bare builder: their bytes in the stored
 * document when the parse recorded them all (@p spans: one per item, in item order, since
 * every item has exactly one "event", the rules checked), else packed from the tree. */
static ab_status_t pack_events(const ab_val_t *events, const ab__val_spans_t *spans, size_t len,
                               ab_snapshot_builder_t **out)
{
    ab_snapshot_builder_t *k;
    if (builder_alloc(&k, NULL) != AB_OK)
        return AB_NOMEM;
    bool copy = spans && !spans->lost && spans->n == events->len;
    ab_status_t st = AB_OK;
    if (copy) { /* the events and their run ids fit in what the document took */
        k->ev = ab__malloc(events->len * sizeof(*k->ev));
        k->evcap = k->ev ? events->len : 0;
        if (!k->ev || ab_buf_reserve(&k->bytes, len) != AB_OK)
            st = AB_NOMEM;
    }
    char run[AB_ID_MAX_BYTES + 1];
    for (uint32_t i = 0; st == AB_OK && i < events->len; i++) {
        sn_item_t it = {0};
        const ab_val_t *event;
        val_fields(&events->u.items[i], &it, run, &event);
        if (copy)
            st = keep_event(k, it.run, (uint64_t)it.seq, (uint64_t)it.pos, spans->v[i].p,
                            spans->v[i].len, spans->v[i].depth);
        else
            st = keep_val(k, it.run, (uint64_t)it.seq, (uint64_t)it.pos, event);
    }
    if (st != AB_OK) {
        ab_snapshot_builder_destroy(&k);
        return AB_NOMEM;
    }
    *out = k;
    return AB_OK;
}

/* A binary document without an activeEvents array: refused as its JSON text would be. */
static ab_status_t refuse_whole(const ab_val_t *root, ab_error_t *err)
{
    json_t *all = ab__val_to_jansson(root);
    if (!all)
        return nomem(err);
    ab_status_t st = ab__snapshot_validate(all, err);
    json_decref(all);
    if (st == AB_OK) /* cannot pass without activeEvents; kept as a guard */
        st = ab_error_set(err, AB_CORRUPT, "/activeEvents",
                          "snapshot rule 'active-events': activeEvents is missing or not an array");
    return st;
}

ab_status_t ab__snapshot_from_binary(const ab_val_t *root, const ab__val_spans_t *spans, size_t len,
                                     ab_snapshot_t **out, ab_error_t *err)
{
    if (!root || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "NULL argument");
    const ab_val_t *events = ab_val_get(root, "activeEvents");
    if (root->type != AB_VAL_MAP || !events || events->type != AB_VAL_ARRAY)
        return refuse_whole(root, err);
    json_t *doc = doc_without_events(root);
    if (!doc)
        return nomem(err);
    ab_status_t st = ab__snapshot_validate_items(doc, events->len, val_item, events, err);
    ab_snapshot_t *s = NULL;
    if (st == AB_OK && !(s = ab__calloc(1, sizeof *s)))
        st = nomem(err);
    if (st == AB_OK && pack_events(events, spans, len, &s->kept) != AB_OK)
        st = nomem(err);
    if (st != AB_OK) {
        ab_snapshot_destroy(&s);
        json_decref(doc);
        return st;
    }
    s->doc = doc;
    s->depth = spans ? spans->depth : val_depth(root);
    *out = s;
    return AB_OK;
}

uint32_t ab_snapshot_binary_depth(const ab_snapshot_t *s)
{
    return s ? s->depth : 0;
}

json_t *ab__snapshot_full_document(const ab_snapshot_t *s)
{
    if (!s)
        return NULL;
    if (!s->kept)
        return json_incref(s->doc);
    json_t *copy = json_copy(s->doc), *events = ab__sn_events_json(s->kept);
    if (!copy || !events) {
        json_decref(copy);
        json_decref(events);
        return NULL;
    }
    if (json_object_set_new(copy, "activeEvents", events) != 0) { /* events taken either way */
        json_decref(copy);
        return NULL;
    }
    return copy;
}

ab_status_t ab_snapshot_parse(const char *text, size_t len, ab_snapshot_t **out, ab_error_t *err)
{
    if (!text || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "NULL text or out");
    json_error_t je;
    /* JSON_ALLOW_NUL: a string the bus accepted may hold U+0000 (escaped in the text) */
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!doc) {
        ab_status_t st =
            ab_error_set(err, AB_CORRUPT, "",
                         "snapshot rule 'json': not a JSON object: %s (line %d)", je.text, je.line);
        ab_error_detail_str(err, "rule", "json");
        return st;
    }
    ab_status_t st = ab__snapshot_from_json(doc, out, err);
    json_decref(doc);
    return st;
}

void ab_snapshot_destroy(ab_snapshot_t **sp)
{
    if (!sp || !*sp)
        return;
    json_decref((*sp)->doc);
    ab_snapshot_builder_destroy(&(*sp)->kept);
    ab__free(*sp);
    *sp = NULL;
}

const json_t *ab__snapshot_document(const ab_snapshot_t *s)
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
    return ab__reducer_from_state(out, json_object_get(s->doc, "projection"),
                                  json_object_get(s->doc, "lanes"), err);
}

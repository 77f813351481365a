/*
 * snapshot_enc.c - writing a builder's snapshot document without building it
 * as a jansson tree first: as msgpack (the SNAPSHOT reply, docs/PROTOCOL.md
 * 7.8) and as compact JSON text (what the persistence plugin stores), plus
 * the jansson activeEvents array for ab__snapshot_builder_document().
 *
 * Invariants:
 *  1. Both encoders write the same document as ab__snapshot_builder_document()
 *     (same keys in the same order, same values): the msgpack one as
 *     ab_json_to_msgpack() would encode its JSON text, the JSON one as text
 *     that ab_snapshot_parse() accepts.
 *  2. The builder is only read. On failure @p out is left at its previous
 *     length.
 *  3. A kept event body is written as it was committed, except one holding
 *     an integer above INT64_MAX: that one as the projection holds it, the
 *     integer as its nearest double (has_uint()).
 */
#include "alloc_internal.h"
#include "reducer_internal.h"
#include "snapshot_internal.h"

#include "agentbus/json.h"

#include <msgpack.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define PACK(x) ((x) == 0 ? AB_OK : AB_NOMEM)

ab_status_t ab__sn_pack_json(msgpack_packer *pk, const json_t *v, uint32_t depth,
                             uint32_t max_depth)
{
    if (depth > max_depth)
        return AB_TOO_LARGE;
    ab_status_t st = AB_OK;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        st = PACK(msgpack_pack_map(pk, json_object_size(v)));
        for (void *it = json_object_iter((json_t *)(uintptr_t)v); st == AB_OK && it;
             it = json_object_iter_next((json_t *)(uintptr_t)v, it)) {
            st = PACK(msgpack_pack_str_with_body(pk, json_object_iter_key(it),
                                                 json_object_iter_key_len(it)));
            if (st == AB_OK)
                st = ab__sn_pack_json(pk, json_object_iter_value(it), depth + 1, max_depth);
        }
        return st;
    }
    case JSON_ARRAY:
        st = PACK(msgpack_pack_array(pk, json_array_size(v)));
        for (size_t i = 0; st == AB_OK && i < json_array_size(v); i++)
            st = ab__sn_pack_json(pk, json_array_get(v, i), depth + 1, max_depth);
        return st;
    case JSON_STRING:
        return PACK(msgpack_pack_str_with_body(pk, json_string_value(v), json_string_length(v)));
    case JSON_INTEGER: return PACK(msgpack_pack_int64(pk, json_integer_value(v)));
    case JSON_REAL: return PACK(msgpack_pack_double(pk, json_real_value(v)));
    case JSON_TRUE: return PACK(msgpack_pack_true(pk));
    case JSON_FALSE: return PACK(msgpack_pack_false(pk));
    default: return PACK(msgpack_pack_nil(pk));
    }
}

/* The ids of every active run, in the projection's order. */
static json_t *active_all(const json_t *runs)
{
    json_t *ids = json_array();
    size_t i;
    json_t *run;
    json_array_foreach(runs, i, run)
    {
        if (ids && ab__rd_is(run, "status", "active") &&
            json_array_append(ids, json_object_get(run, "id")) != 0)
            json_decref(ids), ids = NULL;
    }
    return ids;
}

json_t *ab__sn_active_runs(const json_t *projection, size_t count)
{
    const json_t *runs = json_object_get(projection, "runs");
    size_t n = json_array_size(runs);
    if (count > n)
        return active_all(runs);
    /* the newest runs are the likeliest active: from the end, until all are found */
    const json_t **found = count ? ab__malloc(count * sizeof *found) : NULL;
    if (count && !found)
        return NULL;
    size_t k = 0;
    for (size_t i = n; i > 0 && k < count; i--) {
        const json_t *run = json_array_get(runs, i - 1);
        if (ab__rd_is(run, "status", "active"))
            found[k++] = json_object_get(run, "id");
    }
    json_t *ids = k == count ? json_array() : NULL;
    for (size_t i = k; ids && i > 0; i--)
        if (json_array_append(ids, (json_t *)(uintptr_t)found[i - 1]) != 0)
            json_decref(ids), ids = NULL;
    ab__free(found);
    return k == count ? ids : active_all(runs); /* a count that was wrong: list them all */
}

/* A kept event's body, parsed into @p doc. */
static const ab_val_t *event_val(const ab_snapshot_builder_t *b, const sn_event_t *e, ab_doc_t *doc)
{
    const ab_val_t *root = NULL;
    const uint8_t *p = b->bytes.data + e->off + e->run_len;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_doc_parse(doc, p, e->ev_len, UINT32_MAX, UINT32_MAX, AB_CORRUPT, &root, &err) != AB_OK)
        return NULL;
    return root;
}

/*
 * True when @p v holds an integer above INT64_MAX. The document holds such an
 * event body as the projection does (docs/REDUCER.md, "Numbers"): with that
 * integer as its nearest double, which jansson can hold (and so
 * ab_snapshot_parse() can read the JSON text). Both encoders write those
 * bodies through ab__val_to_jansson(); every other body as it is.
 */
static bool has_uint(const ab_val_t *v)
{
    if (v->type == AB_VAL_UINT)
        return true;
    for (uint32_t i = 0; v->type == AB_VAL_ARRAY && i < v->len; i++)
        if (has_uint(&v->u.items[i]))
            return true;
    for (uint32_t i = 0; v->type == AB_VAL_MAP && i < v->len; i++)
        if (has_uint(&v->u.pairs[i].val))
            return true;
    return false;
}

json_t *ab__sn_events_json(const ab_snapshot_builder_t *b)
{
    ab_doc_t *doc = NULL;
    json_t *arr = json_array();
    if (!arr || ab_doc_new(&doc) != AB_OK)
        goto fail;
    for (size_t i = 0; i < b->nev; i++) {
        const sn_event_t *e = &b->ev[i];
        if (!ab__sn_live(b, e))
            continue;
        const ab_val_t *v = event_val(b, e, doc);
        json_t *body = v ? ab__val_to_jansson(v) : NULL;
        json_t *item =
            body ? json_pack("{s:s%,s:I,s:I,s:o}", "run", (const char *)b->bytes.data + e->off,
                             (size_t)e->run_len, "seq", (json_int_t)e->seq, "pos",
                             (json_int_t)e->pos, "event", body)
                 : NULL;
        if (!item || json_array_append_new(arr, item) != 0)
            goto fail;
    }
    ab_doc_destroy(&doc);
    return arr;
fail:
    ab_doc_destroy(&doc);
    json_decref(arr);
    return NULL;
}

/* ---- msgpack ---- */

static ab_status_t pack_key(msgpack_packer *pk, const char *k)
{
    return PACK(msgpack_pack_str_with_body(pk, k, strlen(k)));
}

/* The body of @p e (at depth 4 of the document): copied as packed unless has_uint(). */
static ab_status_t pack_body(const ab_snapshot_builder_t *b, const sn_event_t *e,
                             msgpack_packer *pk, ab_doc_t **doc)
{
    const uint8_t *body = b->bytes.data + e->off + e->run_len;
    /* such an integer is always uint 64, tag 0xcf: without that byte, nothing to convert */
    if (!memchr(body, 0xcf, e->ev_len))
        return PACK(pk->callback(pk->data, (const char *)body, e->ev_len));
    if (!*doc && ab_doc_new(doc) != AB_OK)
        return AB_NOMEM;
    const ab_val_t *v = event_val(b, e, *doc);
    if (!v)
        return AB_NOMEM;
    if (!has_uint(v))
        return PACK(pk->callback(pk->data, (const char *)body, e->ev_len));
    json_t *j = ab__val_to_jansson(v);
    ab_status_t st = j ? ab__sn_pack_json(pk, j, 4, UINT32_MAX) : AB_NOMEM;
    json_decref(j);
    return st;
}

/* activeEvents (at depth 2 of the document): [{run, seq, pos, event}], bodies as pack_body(). */
static ab_status_t pack_events(const ab_snapshot_builder_t *b, msgpack_packer *pk,
                               uint32_t max_depth)
{
    ab_doc_t *doc = NULL;
    ab_status_t st = PACK(msgpack_pack_array(pk, b->nev - b->dead));
    for (size_t i = 0; st == AB_OK && i < b->nev; i++) {
        const sn_event_t *e = &b->ev[i];
        if (!ab__sn_live(b, e))
            continue;
        const char *at = (const char *)b->bytes.data + e->off;
        if (3 + (uint64_t)e->depth > max_depth) {
            st = AB_TOO_LARGE;
            break;
        }
        st = PACK(msgpack_pack_map(pk, 4));
        if (st == AB_OK && (st = pack_key(pk, "run")) == AB_OK)
            st = PACK(msgpack_pack_str_with_body(pk, at, e->run_len));
        if (st == AB_OK && (st = pack_key(pk, "seq")) == AB_OK)
            st = PACK(msgpack_pack_int64(pk, (int64_t)e->seq));
        if (st == AB_OK && (st = pack_key(pk, "pos")) == AB_OK)
            st = PACK(msgpack_pack_int64(pk, (int64_t)e->pos));
        if (st == AB_OK && (st = pack_key(pk, "event")) == AB_OK)
            st = pack_body(b, e, pk, &doc);
    }
    ab_doc_destroy(&doc);
    return st;
}

static ab_status_t pack_doc(ab_snapshot_builder_t *b, msgpack_packer *pk, const json_t *active,
                            uint32_t max)
{
    const json_t *p = ab__reducer_state(b->r);
    ab_status_t st = PACK(msgpack_pack_map(pk, 7));
    if (st == AB_OK && (st = pack_key(pk, "formatVersion")) == AB_OK)
        st = PACK(msgpack_pack_int64(pk, AB_SNAPSHOT_FORMAT_VERSION));
    if (st == AB_OK && (st = pack_key(pk, "threadId")) == AB_OK)
        st = ab__sn_pack_json(pk, json_object_get(p, "threadId"), 2, max);
    size_t mark = ((ab_buf_t *)pk->data)->len;
    if (st == AB_OK && (st = pack_key(pk, "projection")) == AB_OK)
        st = ab__sn_pack_json(pk, p, 2, max);
    b->proj_bytes = ((ab_buf_t *)pk->data)->len - mark;
    if (st == AB_OK && (st = pack_key(pk, "lanes")) == AB_OK)
        st = ab__sn_pack_json(pk, ab__reducer_lanes(b->r), 2, max);
    if (st == AB_OK && (st = pack_key(pk, "checkpoint")) == AB_OK &&
        (st = PACK(msgpack_pack_map(pk, 2))) == AB_OK && (st = pack_key(pk, "runs")) == AB_OK &&
        (st = ab__sn_pack_json(pk, b->runs, 3, max)) == AB_OK &&
        (st = pack_key(pk, "position")) == AB_OK)
        st = PACK(msgpack_pack_int64(pk, (int64_t)b->pos));
    if (st == AB_OK && (st = pack_key(pk, "activeRuns")) == AB_OK)
        st = ab__sn_pack_json(pk, active, 2, max);
    if (st == AB_OK && (st = pack_key(pk, "activeEvents")) == AB_OK)
        st = pack_events(b, pk, max);
    return st;
}

ab_status_t ab_snapshot_builder_msgpack(ab_snapshot_builder_t *b, uint32_t max_depth,
                                        size_t max_bytes, ab_buf_t *out, ab_error_t *err)
{
    if (!b || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "NULL builder or out");
    size_t mark = out->len;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, ab_buf_msgpack_write);
    json_t *active = ab__sn_active_runs(ab__reducer_state(b->r), b->nactive);
    ab_status_t st = active ? pack_doc(b, &pk, active, max_depth) : AB_NOMEM;
    json_decref(active);
    if (st == AB_OK && out->len - mark > max_bytes)
        st = AB_TOO_LARGE;
    if (st == AB_OK)
        return AB_OK;
    out->len = mark;
    if (st == AB_TOO_LARGE)
        return ab_error_set(err, st, "", "the snapshot is larger than %zu bytes or deeper than %u",
                            max_bytes, max_depth);
    return ab_error_set(err, AB_NOMEM, NULL, "out of memory encoding the snapshot");
}

/* ---- JSON text ---- */

static int dump_cb(const char *buf, size_t size, void *data)
{
    return ab_buf_append(data, buf, size) == AB_OK ? 0 : -1;
}

static ab_status_t dump(ab_buf_t *out, const char *lit, const json_t *v)
{
    if (ab_buf_append(out, lit, strlen(lit)) != AB_OK)
        return AB_NOMEM;
    if (v && json_dump_callback(v, dump_cb, out, JSON_COMPACT | JSON_ENCODE_ANY) != 0)
        return AB_NOMEM;
    return AB_OK;
}

static ab_status_t json_events(const ab_snapshot_builder_t *b, ab_buf_t *out)
{
    ab_doc_t *doc = NULL;
    ab_status_t st = ab_doc_new(&doc);
    char num[64];
    bool first = true;
    for (size_t i = 0; st == AB_OK && i < b->nev; i++) {
        const sn_event_t *e = &b->ev[i];
        if (!ab__sn_live(b, e))
            continue;
        const ab_val_t *v = event_val(b, e, doc);
        st = dump(out, first ? "{\"run\":" : ",{\"run\":", NULL);
        first = false;
        if (st == AB_OK)
            st = ab_json_quote(out, (const char *)b->bytes.data + e->off, e->run_len);
        snprintf(num, sizeof num,
                 ",\"seq\":%llu,\"pos\":%llu,\"event\":", (unsigned long long)e->seq,
                 (unsigned long long)e->pos);
        if (st == AB_OK)
            st = dump(out, num, NULL);
        if (st == AB_OK && v && has_uint(v)) {
            json_t *j = ab__val_to_jansson(v);
            st = j ? dump(out, "", j) : AB_NOMEM;
            json_decref(j);
        } else if (st == AB_OK) {
            st = v ? ab_val_to_json(v, out) : AB_NOMEM;
        }
        if (st == AB_OK)
            st = dump(out, "}", NULL);
    }
    ab_doc_destroy(&doc);
    return st;
}

ab_status_t ab_snapshot_builder_json(ab_snapshot_builder_t *b, ab_buf_t *out, ab_error_t *err)
{
    if (!b || !out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "NULL builder or out");
    size_t mark = out->len;
    const json_t *p = ab__reducer_state(b->r);
    json_t *active = ab__sn_active_runs(p, b->nactive);
    char num[64], head[64];
    snprintf(num, sizeof num, ",\"position\":%llu},\"activeRuns\":", (unsigned long long)b->pos);
    snprintf(head, sizeof head, "{\"formatVersion\":%d,\"threadId\":", AB_SNAPSHOT_FORMAT_VERSION);
    ab_status_t st = active ? dump(out, head, json_object_get(p, "threadId")) : AB_NOMEM;
    if (st == AB_OK)
        st = dump(out, ",\"projection\":", p);
    if (st == AB_OK)
        st = dump(out, ",\"lanes\":", ab__reducer_lanes(b->r));
    if (st == AB_OK)
        st = dump(out, ",\"checkpoint\":{\"runs\":", b->runs);
    if (st == AB_OK)
        st = dump(out, num, active);
    if (st == AB_OK)
        st = dump(out, ",\"activeEvents\":[", NULL);
    if (st == AB_OK)
        st = json_events(b, out);
    if (st == AB_OK)
        st = dump(out, "]}", NULL);
    json_decref(active);
    if (st == AB_OK)
        return AB_OK;
    out->len = mark;
    return ab_error_set(err, AB_NOMEM, NULL, "out of memory encoding the snapshot");
}

uint64_t ab_snapshot_builder_position(const ab_snapshot_builder_t *b)
{
    return b ? b->pos : 0;
}

size_t ab_snapshot_builder_memory(const ab_snapshot_builder_t *b)
{
    if (!b)
        return 0;
    /* jansson trees take about 4x their msgpack size (nodes, hashtables, copies) */
    return sizeof(*b) + b->bytes.cap + b->evcap * sizeof(sn_event_t) + ab__sn_runs_bytes(&b->idx) +
           4 * b->proj_bytes + ab__reducer_pending_bytes(b->r);
}

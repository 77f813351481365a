/*
 * jansson_text.c - the public, jansson-free forms of the reducer, snapshot
 * and JSON Patch operations (agentbus/reducer.h, snapshot.h, jsonpatch.h):
 * JSON text or value trees in, JSON text out, over the jansson side of
 * jansson_internal.h.
 *
 * Invariants:
 *  1. Text is read with the JSON bridge (ab_json_to_msgpack, then the strict
 *     value reader), never with jansson's parser, so every JSON number is
 *     read as the bus reads it (docs/PROTOCOL.md section 2) and U+0000 in a
 *     string is kept; the tree then becomes a jansson value by
 *     ab__val_to_jansson().
 *  2. Text is written compact, keys in the document's order; on any failure
 *     the output buffer keeps its length.
 */
#include "alloc_internal.h"
#include "jansson_internal.h"
#include "value_internal.h"

#include "agentbus/json.h"
#include "agentbus/snapshot.h"

#include <string.h>

#define TEXT_DEPTH 512 /* nesting accepted in documents given as text */

/* A jansson value from JSON text (invariant 1); NULL and *err set on failure. */
static json_t *from_text(const char *text, size_t len, ab_status_t bad, ab_error_t *err)
{
    ab_buf_t mp = AB_BUF_INIT;
    ab_doc_t *doc = NULL;
    const ab_val_t *root = NULL;
    json_t *j = NULL;
    if (ab_doc_new(&doc) != AB_OK) {
        ab_error_set(err, AB_NOMEM, NULL, "out of memory");
        return NULL;
    }
    if (ab_json_to_msgpack(text, len, TEXT_DEPTH, UINT32_MAX, bad, &mp, err) == AB_OK &&
        ab_doc_parse(doc, mp.data, mp.len, UINT32_MAX, TEXT_DEPTH, bad, &root, err) == AB_OK &&
        (j = ab__val_to_jansson(root)) == NULL)
        ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    ab_doc_destroy(&doc);
    ab_buf_free(&mp);
    return j;
}

static int dump_cb(const char *p, size_t n, void *ud)
{
    return ab_buf_append(ud, p, n) == AB_OK ? 0 : -1;
}

/* Append @p j as compact JSON text (invariant 2). */
static ab_status_t to_text(const json_t *j, ab_buf_t *out, ab_error_t *err)
{
    if (j == NULL || out == NULL)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "NULL argument");
    size_t mark = out->len;
    if (json_dump_callback(j, dump_cb, out, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY) ==
        0)
        return AB_OK;
    out->len = mark;
    return ab_error_set(err, AB_NOMEM, NULL, "out of memory writing JSON");
}

/* ---- reducer ------------------------------------------------------------- */

ab_status_t ab_reducer_projection_json(const ab_reducer_t *r, ab_buf_t *out, ab_error_t *err)
{
    return to_text(r ? ab__reducer_state(r) : NULL, out, err);
}

ab_status_t ab_reducer_lanes_json(const ab_reducer_t *r, ab_buf_t *out, ab_error_t *err)
{
    return to_text(r ? ab__reducer_lanes(r) : NULL, out, err);
}

ab_status_t ab_reducer_from_json(ab_reducer_t **out, const char *projection, size_t projection_len,
                                 const char *lanes, size_t lanes_len, ab_error_t *err)
{
    if (out == NULL || projection == NULL)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "NULL argument");
    json_t *p = from_text(projection, projection_len, AB_INVALID_ARGUMENT, err);
    json_t *l = p && lanes ? from_text(lanes, lanes_len, AB_INVALID_ARGUMENT, err) : NULL;
    ab_status_t st = AB_INVALID_ARGUMENT;
    if (p != NULL && (lanes == NULL || l != NULL))
        st = ab__reducer_from_state(out, p, l, err);
    else if (err)
        st = err->code;
    json_decref(p);
    json_decref(l);
    return st;
}

/* ---- snapshots ----------------------------------------------------------- */

ab_status_t ab_snapshot_from_value(const ab_val_t *doc, ab_snapshot_t **out, ab_error_t *err)
{
    if (doc == NULL || out == NULL)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "NULL argument");
    json_t *j = ab__val_to_jansson(doc);
    if (j == NULL)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    ab_status_t st = ab__snapshot_from_json(j, out, err);
    json_decref(j);
    return st;
}

/* Whether @p b starts a msgpack map: fixmap, map 16 or map 32 (no JSON text starts so). */
static bool msgpack_map_start(uint8_t b)
{
    return (b & 0xf0) == 0x80 || b == 0xde || b == 0xdf;
}

ab_status_t ab_snapshot_load(const uint8_t *data, size_t len, ab_snapshot_t **out, ab_error_t *err)
{
    if (data == NULL || out == NULL)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "NULL argument");
    if (len == 0 || !msgpack_map_start(data[0]))
        return ab_snapshot_parse((const char *)data, len, out, err);
    if (len > UINT32_MAX)
        return ab_error_set(err, AB_TOO_LARGE, "", "stored snapshot larger than 4 GiB");
    ab_doc_t *doc = NULL;
    const ab_val_t *root = NULL;
    if (ab_doc_new(&doc) != AB_OK)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    ab_error_t pe = AB_ERROR_INIT;
    ab__val_spans_t spans = {.outer = "activeEvents", .inner = "event"};
    ab_status_t st =
        ab__doc_parse_spans(doc, data, len, UINT32_MAX, TEXT_DEPTH, AB_CORRUPT, &root, &spans, &pe);
    if (st == AB_CORRUPT || st == AB_TOO_LARGE) {
        st = ab_error_set(err, AB_CORRUPT, pe.field, "snapshot rule 'msgpack': %s", pe.message);
        ab_error_detail_str(err, "rule", "msgpack");
    } else if (st != AB_OK) {
        st = ab_error_set(err, st, NULL, "%s", pe.message);
    } else {
        st = ab__snapshot_from_binary(root, &spans, len, out, err);
    }
    ab__free(spans.v);
    ab_error_clear(&pe);
    ab_doc_destroy(&doc);
    return st;
}

ab_status_t ab_snapshot_json(const ab_snapshot_t *s, ab_buf_t *out, ab_error_t *err)
{
    if (s == NULL)
        return to_text(NULL, out, err);
    json_t *doc = ab__snapshot_full_document(s);
    if (doc == NULL)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    ab_status_t st = to_text(doc, out, err);
    json_decref(doc);
    return st;
}

const char *ab_snapshot_thread_id(const ab_snapshot_t *s)
{
    return json_string_value(json_object_get(ab__snapshot_document(s), "threadId"));
}

uint64_t ab_snapshot_checkpoint_seq(const ab_snapshot_t *s, const char *run)
{
    const json_t *cp = json_object_get(ab__snapshot_document(s), "checkpoint");
    const json_t *seq = json_object_get(json_object_get(cp, "runs"), run);
    return json_is_integer(seq) ? (uint64_t)json_integer_value(seq) : 0;
}

size_t ab_snapshot_active_count(const ab_snapshot_t *s)
{
    return json_array_size(json_object_get(ab__snapshot_document(s), "activeRuns"));
}

const char *ab_snapshot_active_run(const ab_snapshot_t *s, size_t i)
{
    return json_string_value(
        json_array_get(json_object_get(ab__snapshot_document(s), "activeRuns"), i));
}

/* ---- JSON Patch ---------------------------------------------------------- */

ab_status_t ab_jsonpatch_apply_json(const char *doc, size_t doc_len, const char *patch,
                                    size_t patch_len, ab_buf_t *out, ab_error_t *err)
{
    if (doc == NULL || patch == NULL || out == NULL)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "NULL argument");
    json_t *d = from_text(doc, doc_len, AB_INVALID_EVENT, err);
    json_t *p = d ? from_text(patch, patch_len, AB_INVALID_EVENT, err) : NULL;
    ab_status_t st = err && err->code != AB_OK ? err->code : AB_INVALID_EVENT;
    if (d != NULL && p != NULL && (st = ab__jsonpatch_apply(&d, p, err)) == AB_OK)
        st = to_text(d, out, err);
    json_decref(d);
    json_decref(p);
    return st;
}

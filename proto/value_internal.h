/*
 * value_internal.h - the msgpack-c side of the value tree (proto/ and the
 * tests only): public headers include no third-party header, so what takes a
 * msgpack_packer lives here.
 */
#ifndef AB_PROTO_VALUE_INTERNAL_H
#define AB_PROTO_VALUE_INTERNAL_H

#include "agentbus/value.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/**
 * Encode @p v with msgpack-c. Integers use the smallest encoding (AB_VAL_UINT
 * is uint 64), floats are written as float64. @return AB_OK or AB_NOMEM.
 */
AB_NODISCARD ab_status_t ab__val_pack(msgpack_packer *pk, const ab_val_t *v);

/**
 * Step over one whole msgpack value at *@p p (everything inside it), checking
 * only bounds (codec_peek.c). On success *@p p is just past it. @return false
 * when the value is malformed or runs past @p end (*@p p is then unspecified).
 */
bool ab__mp_skip(const uint8_t **p, const uint8_t *end);

/** The bytes of one value in the input ab__doc_parse_spans() read, and its nesting depth
 *  (as the tree's: 1 for a scalar or an empty container). */
typedef struct ab__val_span {
    const uint8_t *p;
    size_t len;
    uint32_t depth;
} ab__val_span_t;

/**
 * What ab__doc_parse_spans() records: the value of key @p inner of every map that is an item
 * of the array under key @p outer of the root map (root.outer[i].inner), in input order,
 * and the depth of the whole tree. A value it could not record for want of memory sets
 * @p lost (the record is then incomplete; the parse is not affected).
 */
typedef struct ab__val_spans {
    const char *outer, *inner; /* set by the caller */
    ab__val_span_t *v;         /* free() when done */
    size_t n, cap;
    uint32_t depth;
    bool lost;
} ab__val_spans_t;

/**
 * ab_doc_parse(), recording in @p spans (NULL: nothing) where the values it names are in
 * @p buf and the tree's depth, from the same single read.
 */
AB_NODISCARD ab_status_t ab__doc_parse_spans(ab_doc_t *doc, const uint8_t *buf, size_t len,
                                             uint32_t max_bytes, uint32_t max_depth,
                                             ab_status_t bad_code, const ab_val_t **root,
                                             ab__val_spans_t *spans, ab_error_t *err);

#endif /* AB_PROTO_VALUE_INTERNAL_H */

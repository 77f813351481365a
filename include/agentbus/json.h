/*
 * agentbus/json.h - the JSON bridge: AG-UI events between JSON text and their
 * msgpack body, losslessly for every JSON-safe value.
 *
 * JSON -> msgpack (jansson parses): objects keep their key order, duplicate
 * keys are rejected, integers must fit a signed 64-bit integer, reals become
 * float64, "\u" escapes (surrogate pairs included, "\u0000" too) become
 * UTF-8, {} and [] stay distinct.
 * msgpack -> JSON (our emitter): compact, keys in stored order, integers
 * exact, floats in the shortest form that reads back to the same double and
 * always with a '.' or exponent so they stay floats, strings as UTF-8 with
 * only '"', '\' and control characters escaped.
 *
 * Round trip: json_to_msgpack(val_to_json(v)) gives bytes that parse to a
 * tree equal to v (ab_val_equal).
 *
 * Thread-safety: reentrant.
 */
#ifndef AGENTBUS_JSON_H
#define AGENTBUS_JSON_H

#include "agentbus/buf.h"
#include "agentbus/value.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Parse one JSON value from @p text and append its msgpack encoding to @p out.
 * @param max_depth  nesting limit (top level = 1), as for msgpack input.
 * @param max_bytes  limit on the encoded size.
 * @param bad_code   status for malformed JSON (e.g. AB_INVALID_EVENT).
 * @return AB_OK, bad_code (message says line/column), AB_TOO_LARGE, AB_NOMEM.
 *         On failure @p out is left at its previous length.
 */
AB_NODISCARD ab_status_t ab_json_to_msgpack(const char *text, size_t len, uint32_t max_depth,
                                            uint32_t max_bytes, ab_status_t bad_code, ab_buf_t *out,
                                            ab_error_t *err);

/**
 * Append the compact JSON text of @p v to @p out (no NUL terminator).
 * @return AB_OK or AB_NOMEM.
 */
AB_NODISCARD ab_status_t ab_val_to_json(const ab_val_t *v, ab_buf_t *out);

/** Append a JSON string literal (quoted, escaped) of [s, s+len) to @p out. */
AB_NODISCARD ab_status_t ab_json_quote(ab_buf_t *out, const char *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_JSON_H */

/*
 * agentbus/json.h - the JSON bridge: AG-UI events between JSON text and their
 * msgpack body, losslessly for every JSON-safe value.
 *
 * JSON -> msgpack (our parser, proto/json_parse.c): RFC 8259 exactly (one
 * value, no comments, no trailing commas, valid UTF-8); objects keep their
 * key order, duplicate keys are rejected, "\u" escapes (surrogate pairs
 * included, "\u0000" too) become UTF-8, {} and [] stay distinct. Every
 * valid JSON number is accepted (docs/PROTOCOL.md section 2):
 *   - an integer (no fraction, no exponent) in -2^63 .. 2^63-1 becomes a
 *     msgpack int, one in 2^63 .. 2^64-1 a msgpack uint 64, both exact;
 *   - any other number - with a fraction or an exponent ("1.0", "1e3"), or
 *     an integer beyond those ranges - becomes the float64 nearest to it
 *     (what strtod() gives), so "1767225600000.0" is a float on the wire;
 *   - a number beyond the double range ("1e400") is an error: the bus
 *     carries no infinities. One below the smallest double becomes 0.0 or a
 *     subnormal, its nearest double.
 * Memory: besides the output (abandoned once it exceeds max_bytes), the
 * parser holds the open containers (at most max_depth) and the keys of the
 * open objects: at most 72 bytes a key (24, doubled by the array's growth,
 * and 24 more while an object of more than 16 keys is checked for
 * duplicates). A closed container costs nothing; an event of up to 16 open
 * containers and 32 open keys allocates nothing but its output.
 * msgpack -> JSON (our emitter, proto/json.c): compact, keys in stored order,
 * integers exact, floats in the shortest form that reads back to the same
 * double and always with a '.' or exponent so they stay floats, strings as
 * UTF-8 with only '"', '\' and control characters escaped.
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
 * Parse one JSON value from @p text (@p len bytes, need not be
 * NUL-terminated) and append its msgpack encoding to @p out.
 * @param max_depth  nesting limit (top level = 1), as for msgpack input.
 * @param max_bytes  limit on the encoded size.
 * @param bad_code   status for malformed JSON (e.g. AB_INVALID_EVENT).
 * @return AB_OK; bad_code for malformed JSON, its message
 *         "invalid JSON at line L column C: ..." (1-based, the column counted
 *         in characters, at the first offending character) and err->field
 *         the JSON pointer of the value being read ("/a/0", "" at the top);
 *         AB_TOO_LARGE for nesting (field: the value too deep) or size
 *         (field ""); AB_NOMEM. On failure @p out is left at its previous
 *         length.
 */
AB_API AB_NODISCARD ab_status_t ab_json_to_msgpack(const char *text, size_t len, uint32_t max_depth,
                                                   uint32_t max_bytes, ab_status_t bad_code,
                                                   ab_buf_t *out, ab_error_t *err);

/**
 * Append the compact JSON text of @p v to @p out (no NUL terminator).
 * @return AB_OK or AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_val_to_json(const ab_val_t *v, ab_buf_t *out);

/** Append a JSON string literal (quoted, escaped) of [s, s+len) to @p out. */
AB_API AB_NODISCARD ab_status_t ab_json_quote(ab_buf_t *out, const char *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_JSON_H */

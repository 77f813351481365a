/*
 * agentbus/jsonpatch.h - RFC 6902 JSON Patch over jansson documents.
 *
 * All six operations (add, remove, replace, move, copy, test), RFC 6901 JSON
 * Pointers with "~0"/"~1" escaping, array index "-" (append) for add and the
 * destination of move/copy, and "" naming the whole document. Array indexes
 * with leading zeros ("01") are rejected.
 *
 * Atomicity: the patch is applied to a deep copy of the document; the copy is
 * swapped in only when every operation succeeded, so a failing patch leaves
 * *doc exactly as it was (same pointer, same content).
 *
 * Errors (err->field is "/N/<member>" of the failing operation N, e.g.
 * "/2/path" or "/0/from"):
 *  - AB_INVALID_EVENT  malformed patch: not an array, an operation that is not
 *                      an object, missing or non-string "op"/"path"/"from",
 *                      missing "value", a pointer that breaks RFC 6901
 *                      syntax, an array index with leading zeros or not a
 *                      number, "remove" of the whole document.
 *  - AB_NOT_FOUND      the pointer is well formed but names nothing in the
 *                      document: missing member, index out of range, "-"
 *                      where an existing element is needed, a path through a
 *                      scalar.
 *  - AB_CONFLICT       a "test" that failed, or a "move" whose "from" is a
 *                      proper prefix of its "path" (into its own child).
 *  - AB_NOMEM          out of memory.
 *
 * Unknown "op" values: AG-UI's lenient rule (agui-1.0 section 5) - the
 * operation is skipped and the warning callback (if any) is called with its
 * index and op name; the rest of the patch applies.
 *
 * "test" compares numbers by value (1 equals 1.0), objects regardless of key
 * order, arrays element by element.
 *
 * Thread-safety: reentrant; a document must not be patched by two threads at
 * once.
 */
#ifndef AGENTBUS_JSONPATCH_H
#define AGENTBUS_JSONPATCH_H

#include "agentbus/buf.h"
#include "agentbus/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Apply @p patch (JSON text of an array of operations, @p patch_len bytes) to
 * the document @p doc (JSON text, @p doc_len bytes) and append the patched
 * document to @p out as compact JSON text. Atomic: on any error nothing is
 * appended.
 * @return AB_OK, AB_INVALID_EVENT (a malformed patch, or text that is not
 *         JSON), AB_NOT_FOUND, AB_CONFLICT or AB_NOMEM (see the file
 *         comment); AB_INVALID_ARGUMENT (NULL argument).
 */
AB_API AB_NODISCARD ab_status_t ab_jsonpatch_apply_json(const char *doc, size_t doc_len,
                                                        const char *patch, size_t patch_len,
                                                        ab_buf_t *out, ab_error_t *err);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_JSONPATCH_H */

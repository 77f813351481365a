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
 *  - AB_TOO_LARGE      a bound below was passed (err->field "/N/path", or
 *                      "/N/from" for what copy and move take).
 *  - AB_NOMEM          out of memory.
 *
 * Bounds. A patch is small, but "copy" can duplicate what the document
 * holds: copying the whole document into two members in turn doubles it,
 * so forty operations of a one-kilobyte patch would ask for 2^40 values.
 * Measuring a value's "size" as AB_JSONPATCH_VALUE_SIZE per value plus the
 * bytes of its strings and keys (about the least jansson allocates for
 * it), a patch fails with AB_TOO_LARGE, the document unchanged, when
 *  - the values its "copy" and "move" operations take total more than
 *    AB_JSONPATCH_MAX_SIZE (this bounds its work: a value is measured before
 *    it is taken, the walk stopping at the bound), or
 *  - the document's size before it plus the size of every value it puts in
 *    ("add", "replace", "copy"; what it removes is not subtracted) passes
 *    AB_JSONPATCH_MAX_SIZE, or
 *  - an operation would place a value deeper than AB_JSONPATCH_MAX_DEPTH
 *    (the path's tokens plus the value's depth).
 * Applying a patch costs O(document size) for the copy that makes it atomic,
 * plus O(patch size + AB_JSONPATCH_MAX_SIZE) at most.
 *
 * Unknown "op" values: AG-UI's lenient rule (topic §5 in docs/ARCHITECTURE.md,
 * "AG-UI 1.0: where the event rules come from") - the operation is skipped
 * and the warning callback (if any) is called with its index and op name;
 * the rest of the patch applies.
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

/** What one value counts in a size (see "Bounds"), besides its string bytes. */
#define AB_JSONPATCH_VALUE_SIZE 32

/**
 * Most a patch may make its document hold, and most its copy and move
 * operations may take, in size units (see "Bounds"): 32 MiB, about a
 * million values, the order of what one largest event (1 MiB, a value every
 * two bytes) can set as a whole state, so a patch can no longer make a state
 * that no event could have sent. The libFuzzer build (AB_FUZZ) compiles the
 * library with a smaller bound, so that inputs near it stay fast to run.
 */
#ifndef AB_JSONPATCH_MAX_SIZE
#define AB_JSONPATCH_MAX_SIZE ((size_t)32 << 20)
#endif

/**
 * Deepest nesting a patch may create (the root is depth 1): far beyond what
 * one event may carry (ab_limits_t.max_depth, 64), and shallow enough for
 * the recursive walks of a document (copying, encoding) to stay small.
 */
#define AB_JSONPATCH_MAX_DEPTH 512

/**
 * Apply @p patch (JSON text of an array of operations, @p patch_len bytes) to
 * the document @p doc (JSON text, @p doc_len bytes) and append the patched
 * document to @p out as compact JSON text. Atomic: on any error nothing is
 * appended.
 * @return AB_OK, AB_INVALID_EVENT (a malformed patch, or text that is not
 *         JSON), AB_NOT_FOUND, AB_CONFLICT, AB_TOO_LARGE or AB_NOMEM (see
 *         the file comment); AB_INVALID_ARGUMENT (NULL argument).
 */
AB_API AB_NODISCARD ab_status_t ab_jsonpatch_apply_json(const char *doc, size_t doc_len,
                                                        const char *patch, size_t patch_len,
                                                        ab_buf_t *out, ab_error_t *err);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_JSONPATCH_H */

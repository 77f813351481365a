/*
 * agentbus/value.h - JSON-safe values and the strict msgpack reader.
 *
 * Every msgpack payload the bus receives is parsed by one strict reader into a
 * read-only tree of ab_val_t nodes. The reader enforces what docs/PROTOCOL.md
 * calls "JSON-safe": maps with unique UTF-8 string keys, arrays, valid UTF-8
 * strings, integers from -2^63 to 2^64-1 (every msgpack integer), finite
 * floats, booleans and nil. It rejects bin and ext types, non-string keys,
 * duplicate keys, invalid UTF-8, NaN and infinities, nesting deeper than the
 * limit, inputs over the size limit and trailing bytes - each with a typed
 * error naming the JSON path of the offending value.
 *
 * Integers: a value that fits int64 is always AB_VAL_INT (whatever msgpack
 * format carried it); only 2^63 .. 2^64-1 is AB_VAL_UINT. So one number has
 * one representation and ab_val_equal() can compare types first.
 *
 * Why our own reader rather than msgpack_unpack(): msgpack-c's unpacker has a
 * compile-time nesting limit of 32, accepts trailing data and does none of
 * the checks above; msgpack-c encodes (ab_val_encode()), inside the library.
 *
 * Ownership: strings in the tree point into the caller's input buffer (no
 * copy); nodes live in the ab_doc_t arena. Both must outlive the tree. A tree
 * is valid until the next ab_doc_parse()/ab_doc_reset() on the same doc.
 *
 * Thread-safety: an ab_doc_t is used by one thread at a time; trees are
 * read-only and may be read from several threads.
 */
#ifndef AGENTBUS_VALUE_H
#define AGENTBUS_VALUE_H

#include "agentbus/buf.h"
#include "agentbus/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Bus limits (docs/PROTOCOL.md section 11). Defaults from ab_limits_default(). */
typedef struct ab_limits {
    uint32_t max_event_bytes;   /**< encoded event envelope, default 1 MiB */
    uint32_t max_depth;         /**< nesting depth of any value, default 64 */
    uint32_t max_id_bytes;      /**< thread/run id length, default 256 */
    uint32_t max_batch;         /**< events per PUBLISH, default 1024 */
    uint32_t max_header_bytes;  /**< command header frame, default 64 KiB */
    uint32_t max_inflight;      /**< unacknowledged events per producer, default 8192 */
    uint32_t max_replay_window; /**< replay chunks granted at once, default 64 */
    uint32_t max_publish_bytes; /**< frames after a PUBLISH header, in bytes, default 16 MiB */
    uint32_t max_replay_bytes;  /**< unread replay bytes per replay session, default 2 MiB */
} ab_limits_t;

/** The documented defaults. */
AB_API ab_limits_t ab_limits_default(void);

/** Type of a value node. */
typedef enum ab_val_type {
    AB_VAL_NULL = 0,
    AB_VAL_BOOL,
    AB_VAL_INT,   /**< signed 64-bit, u.i */
    AB_VAL_FLOAT, /**< finite double (msgpack float32 widened), u.f */
    AB_VAL_STR,   /**< valid UTF-8, not NUL-terminated */
    AB_VAL_ARRAY,
    AB_VAL_MAP,
    AB_VAL_UINT, /**< an integer above INT64_MAX (2^63 .. 2^64-1), u.u */
} ab_val_type_t;

typedef struct ab_val ab_val_t;
typedef struct ab_kv ab_kv_t;

/** A read-only value node. `len` is the string length, item or pair count. */
struct ab_val {
    ab_val_type_t type;
    uint32_t len;
    union {
        bool b;
        int64_t i;
        uint64_t u;
        double f;
        const char *s;
        const ab_val_t *items;
        const ab_kv_t *pairs;
    } u;
};

/** A map entry; keys are unique within a map. */
struct ab_kv {
    const char *key;
    uint32_t klen;
    ab_val_t val;
};

/** Arena that holds parsed trees; reused across parses. */
typedef struct ab_doc ab_doc_t;

/** Create an empty doc. @return AB_OK or AB_NOMEM. */
AB_API AB_NODISCARD ab_status_t ab_doc_new(ab_doc_t **out);

/** Free a doc and every tree parsed into it. NULL-safe; sets *doc = NULL. */
AB_API void ab_doc_destroy(ab_doc_t **doc);

/** Forget all trees; keeps the first 2 KiB block for reuse and frees the rest. */
AB_API void ab_doc_reset(ab_doc_t *doc);

/**
 * With @p keep, ab_doc_parse() adds each tree to the arena instead of
 * resetting it first: every tree parsed since the last ab_doc_reset() stays
 * valid (one arena, grown in 64 KiB blocks, for messages that live and die
 * together, e.g. the events of one publish; a failed parse leaves its
 * partial nodes until the reset). Off by default.
 */
AB_API void ab_doc_keep(ab_doc_t *doc, bool keep);

/**
 * Allocate @p bytes in the doc arena (aligned for any type), for decoders
 * that build arrays beside a parsed tree. The memory is uninitialised and
 * lives until the next ab_doc_parse()/ab_doc_reset()/ab_doc_destroy().
 * @return the memory, or NULL when out of memory.
 */
AB_API void *ab_doc_alloc(ab_doc_t *doc, size_t bytes);

/**
 * Parse exactly one msgpack value from @p buf into @p doc (which is reset).
 *
 * @param max_bytes  inputs longer than this fail with AB_TOO_LARGE.
 * @param max_depth  a value nested deeper fails (top level is depth 1).
 * @param bad_code   status used for malformed input (AB_INVALID_ENVELOPE or
 *                   AB_INVALID_EVENT); size/depth limits use AB_TOO_LARGE.
 * @param root       out: the root node, valid until the next parse/reset.
 * @return AB_OK, bad_code, AB_TOO_LARGE or AB_NOMEM; err->field holds the
 *         JSON pointer of the bad value ("" = root).
 */
AB_API AB_NODISCARD ab_status_t ab_doc_parse(ab_doc_t *doc, const uint8_t *buf, size_t len,
                                             uint32_t max_bytes, uint32_t max_depth,
                                             ab_status_t bad_code, const ab_val_t **root,
                                             ab_error_t *err);

/** Map lookup by key; NULL when absent or @p map is not a map. O(pairs). */
AB_API const ab_val_t *ab_val_get(const ab_val_t *map, const char *key);

/** True when @p v is a string equal to the NUL-terminated @p lit. */
AB_API bool ab_val_str_eq(const ab_val_t *v, const char *lit);

/** True when two trees are equal (maps compared as ordered pair lists). */
AB_API bool ab_val_equal(const ab_val_t *a, const ab_val_t *b);

/**
 * Short name of a type for messages, in JSON Schema terms: "null",
 * "boolean", "integer" (AB_VAL_INT and AB_VAL_UINT), "number" (a float),
 * "string", "array", "object".
 */
AB_API const char *ab_val_type_name(ab_val_type_t t);

/**
 * Append the msgpack encoding of @p v to @p out: integers in their smallest
 * encoding (AB_VAL_UINT as uint 64), floats as float64, strings and maps as
 * held. What ab_doc_parse() reads back as an equal tree.
 * @return AB_OK or AB_NOMEM (@p out keeps its length).
 */
AB_API AB_NODISCARD ab_status_t ab_val_encode(const ab_val_t *v, ab_buf_t *out);

/** True when [s, s+len) is valid UTF-8 (no overlongs, no surrogates). */
AB_API bool ab_utf8_valid(const char *s, size_t len);

/**
 * Append the JSON-pointer escape of a key ("~" -> "~0", "/" -> "~1") to the
 * path in @p buf (NUL-terminated, @p size bytes); truncates safely.
 */
AB_API void ab_path_push_key(char *buf, size_t size, const char *key, size_t klen);

/** Append "/<index>" to the path in @p buf. */
AB_API void ab_path_push_index(char *buf, size_t size, size_t index);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_VALUE_H */

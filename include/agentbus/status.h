/*
 * agentbus/status.h - the one status enum and the one error struct of the bus.
 *
 * Every fallible function in agentbus returns an ab_status_t and, when the
 * caller passes one, fills an ab_error_t with the details. The same error
 * travels on the wire (see proto codec and docs/PROTOCOL.md section "Errors"):
 * its stable code name, message, retryability, correlation id, the field it
 * names and a few typed details survive an encode/decode round trip unchanged.
 *
 * Rules (see docs/ARCHITECTURE.md):
 *  - The error struct is owned by the caller, usually on the stack; no heap.
 *  - The first error recorded wins: ab_error_set() on an error that already
 *    holds a code is a no-op, so the innermost, most precise cause survives.
 *  - Out-params are written only when a function returns AB_OK.
 *
 * Thread-safety: all functions here are reentrant; an ab_error_t must not be
 * shared between threads without external locking.
 */
#ifndef AGENTBUS_STATUS_H
#define AGENTBUS_STATUS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define AB_NODISCARD    __attribute__((warn_unused_result))
#define AB_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define AB_NODISCARD
#define AB_PRINTF(a, b)
#endif

/*
 * AB_API marks every function of the public API. The libraries are built
 * with hidden visibility (-fvisibility=hidden), so only what carries AB_API
 * is exported from the shared libraries; everything else, the internal
 * ab__* functions included, stays inside (tests/exports/ lists what each
 * library exports, and a test compares).
 */
#if defined(__GNUC__)
#define AB_API __attribute__((visibility("default")))
#else
#define AB_API
#endif

/*
 * X(ENUM, "wire_name", retryable_by_default, "description")
 *
 * The wire name is stable forever: clients in other languages match on it.
 * Values 0..N are also stable (append only), but only the name is on the wire.
 */
#define AB_STATUS_MAP(X)                                                                           \
    X(OK, "ok", false, "success")                                                                  \
    X(INVALID_ENVELOPE, "invalid_envelope", false, "malformed frame or envelope")                  \
    X(INVALID_EVENT, "invalid_event", false, "event breaks the AG-UI 1.0 rules")                   \
    X(GAP, "gap", false, "seq is beyond the next expected one")                                    \
    X(DUPLICATE, "duplicate", false, "event was already accepted")                                 \
    X(CONFLICT, "conflict", false, "same seq already accepted with different bytes")               \
    X(FENCED, "fenced", false, "writer epoch is stale; a newer claim exists")                      \
    X(RUN_TERMINAL, "run_terminal", false, "run already ended")                                    \
    X(INCOMPATIBLE_VERSION, "incompatible_version", false, "no mutual protocol version")           \
    X(UNSUPPORTED, "unsupported", false, "operation or capability not supported")                  \
    X(TOO_LARGE, "too_large", false, "a size or count limit was exceeded")                         \
    X(OVERLOADED, "overloaded", true, "broker queue full; retry later")                            \
    X(UNAVAILABLE, "unavailable", true, "service or store temporarily unavailable")                \
    X(NOT_FOUND, "not_found", false, "no such thread, run or item")                                \
    X(REQUEST_ABORTED, "request_aborted", false, "request was cancelled")                          \
    X(UNAUTHORIZED, "unauthorized", false, "not allowed")                                          \
    X(TIMEOUT, "timeout", true, "timed out")                                                       \
    X(INVALID_ARGUMENT, "invalid_argument", false, "invalid argument")                             \
    X(INVALID_CONFIG, "invalid_config", false, "invalid configuration")                            \
    X(NOMEM, "out_of_memory", true, "out of memory")                                               \
    X(IO, "io_error", true, "input/output error")                                                  \
    X(CORRUPT, "corrupt", false, "stored data is damaged")                                         \
    X(CLOSED, "closed", false, "handle or connection closed")                                      \
    X(INTERNAL, "internal", false, "internal error")

/** The single status enum of agentbus. AB_OK is 0. */
typedef enum ab_status {
#define AB_STATUS_ENUM_(name, wire, retry, desc) AB_##name,
    AB_STATUS_MAP(AB_STATUS_ENUM_)
#undef AB_STATUS_ENUM_
        AB_STATUS_COUNT_
} ab_status_t;

/*
 * ab_error_t is small - 360 bytes, in the class of jansson's json_error_t
 * (252 bytes, whose text[160] is our message) - so it lives on the stack and
 * inside results without cost. Its limits are the wire's (docs/PROTOCOL.md
 * 8.1): a longer message is cut back at a UTF-8 character boundary (and
 * before the first byte that is not UTF-8, if any), a longer
 * field at its last whole path segment (still a pointer, to an ancestor), and
 * a detail beyond the last slot is dropped.
 */
/** Maximum bytes (including NUL) of ab_error_t.message. */
#define AB_ERROR_MESSAGE_MAX 160
/** Maximum bytes (including NUL) of ab_error_t.field. */
#define AB_ERROR_FIELD_MAX 64
/** Maximum number of typed details an error carries. */
#define AB_ERROR_DETAILS_MAX 3
/** Maximum bytes (including NUL) of a detail key, and of a string detail. */
#define AB_ERROR_DETAIL_KEY_MAX 15
#define AB_ERROR_DETAIL_STR_MAX 24

/** Kind of one error detail value. */
typedef enum ab_detail_kind {
    AB_DETAIL_INT = 1, /**< signed 64-bit integer */
    AB_DETAIL_STR = 2, /**< UTF-8 string up to AB_ERROR_DETAIL_STR_MAX - 1 bytes */
} ab_detail_kind_t;

/** One typed detail, e.g. {"expected_seq", 7}: 40 bytes. */
typedef struct ab_error_detail {
    char key[AB_ERROR_DETAIL_KEY_MAX];
    uint8_t kind; /**< an ab_detail_kind_t */
    union {
        int64_t i;                       /**< AB_DETAIL_INT */
        char s[AB_ERROR_DETAIL_STR_MAX]; /**< AB_DETAIL_STR */
    };
} ab_error_detail_t;

/**
 * The error of the whole bus. Zero-initialise it (AB_ERROR_INIT) before use.
 *
 *  code       - the status; AB_OK means "no error recorded".
 *  retryable  - whether repeating the same request may succeed.
 *  cid        - correlation id of the request this answers; 0 = none.
 *  message    - human-readable, one line, NUL-terminated.
 *  field      - the field or JSON path the error names ("" if none), e.g.
 *               "/event/messageId" or "seq".
 *  details    - up to AB_ERROR_DETAILS_MAX typed key/value pairs.
 */
typedef struct ab_error {
    ab_status_t code;
    bool retryable;
    uint8_t ndetails;
    uint64_t cid;
    char message[AB_ERROR_MESSAGE_MAX];
    char field[AB_ERROR_FIELD_MAX];
    ab_error_detail_t details[AB_ERROR_DETAILS_MAX];
} ab_error_t;

#define AB_ERROR_INIT                                                                              \
    {                                                                                              \
        0                                                                                          \
    }

/** Stable wire name of @p s ("gap", "too_large" ...); "unknown" if out of range. */
AB_API const char *ab_status_name(ab_status_t s);

/** One-line description of @p s. */
AB_API const char *ab_status_str(ab_status_t s);

/** Whether errors of code @p s are retryable unless said otherwise. */
AB_API bool ab_status_retryable(ab_status_t s);

/**
 * Look up a status by wire name.
 * @return AB_OK and *out set, or AB_NOT_FOUND for an unknown name.
 */
AB_API ab_status_t ab_status_from_name(const char *name, size_t len, ab_status_t *out);

/** Reset @p err to "no error". NULL-safe. */
AB_API void ab_error_clear(ab_error_t *err);

/**
 * Record an error: code, default retryability, optional field and a printf
 * message. First error wins: a no-op when err is NULL or already holds a code.
 * @return @p code, so callers can write `return ab_error_set(err, ...);`.
 */
AB_API ab_status_t ab_error_set(ab_error_t *err, ab_status_t code, const char *field,
                                const char *fmt, ...) AB_PRINTF(4, 5);

/** va_list form of ab_error_set(). */
AB_API ab_status_t ab_error_vset(ab_error_t *err, ab_status_t code, const char *field,
                                 const char *fmt, va_list ap) AB_PRINTF(4, 0);

/**
 * Add an integer detail. Silently ignored when @p err is NULL or full.
 * A key longer than AB_ERROR_DETAIL_KEY_MAX - 1 bytes is truncated.
 */
AB_API void ab_error_detail_int(ab_error_t *err, const char *key, int64_t value);

/** Add a string detail (truncated to AB_ERROR_DETAIL_STR_MAX - 1 bytes). */
AB_API void ab_error_detail_str(ab_error_t *err, const char *key, const char *value);

/**
 * Find a detail by key.
 * @return the detail, or NULL when absent. Borrowed from @p err.
 */
AB_API const ab_error_detail_t *ab_error_detail(const ab_error_t *err, const char *key);

/**
 * Prefix @p err->field with @p prefix (e.g. "/event" + "/messageId").
 * Used when a nested decoder reports a path relative to its own root.
 */
AB_API void ab_error_prefix_field(ab_error_t *err, const char *prefix);

/**
 * Format "code: message (at field)" into @p buf for logs and CLIs.
 * @return @p buf.
 */
AB_API const char *ab_error_format(const ab_error_t *err, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_STATUS_H */

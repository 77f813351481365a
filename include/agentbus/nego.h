/*
 * agentbus/nego.h - protocol version and capability negotiation.
 *
 * Versions are small positive integers. The client offers the versions it
 * speaks in HELLO; the broker answers with the highest version both sides
 * speak, or a typed, non-retryable AB_INCOMPATIBLE_VERSION error whose
 * details list both sides' versions ("ours", "theirs", comma-separated).
 *
 * Capabilities are reported by name with a state. A name left out of a
 * report means "unknown" (AB_CAP_UNKNOWN) - never "available".
 *
 * Thread-safety: reentrant; the tables are constant.
 */
#ifndef AGENTBUS_NEGO_H
#define AGENTBUS_NEGO_H

#include "agentbus/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Highest protocol version this build speaks. */
#define AB_PROTOCOL_VERSION 1
/** Most versions a HELLO may offer. */
#define AB_MAX_VERSIONS 16

/** The versions this build speaks, ascending. *n receives the count. */
AB_API const uint32_t *ab_versions_supported(size_t *n);

/** True when this build speaks version @p v. */
AB_API bool ab_version_supported(uint32_t v);

/**
 * Choose the highest version in both @p ours and @p theirs.
 * @param chosen  out; written only on AB_OK.
 * @return AB_OK, or AB_INCOMPATIBLE_VERSION (retryable = false) with details
 *         "ours" and "theirs", or AB_INVALID_ARGUMENT when @p ntheirs is 0 or
 *         above AB_MAX_VERSIONS.
 */
AB_API AB_NODISCARD ab_status_t ab_version_negotiate(const uint32_t *ours, size_t nours,
                                                     const uint32_t *theirs, size_t ntheirs,
                                                     uint32_t *chosen, ab_error_t *err);

/** Capability states. AB_CAP_UNKNOWN is what an omitted name means. */
typedef enum ab_cap_state {
    AB_CAP_UNKNOWN = 0,
    AB_CAP_AVAILABLE,
    AB_CAP_DEGRADED,
    AB_CAP_UNAVAILABLE,
    AB_CAP_UNSUPPORTED,
} ab_cap_state_t;

/** Wire name: "available", "degraded", "unavailable", "unsupported", "unknown". */
AB_API const char *ab_cap_state_name(ab_cap_state_t s);

/**
 * Parse a wire state name. "unknown" is not a wire value (omit the name).
 * @return AB_OK, or AB_INVALID_ENVELOPE for any other string.
 */
AB_API AB_NODISCARD ab_status_t ab_cap_state_from(const char *s, size_t len, ab_cap_state_t *out);

/** One capability in a report. `name` is borrowed (not NUL-terminated). */
typedef struct ab_cap {
    const char *name;
    size_t name_len;
    ab_cap_state_t state;
} ab_cap_t;

/** State of @p name in a report; AB_CAP_UNKNOWN when omitted. */
AB_API ab_cap_state_t ab_caps_lookup(const ab_cap_t *caps, size_t n, const char *name);

/**
 * Require a capability before using it.
 * @return AB_OK when available or degraded; AB_UNSUPPORTED when the peer
 *         said unsupported or omitted it (unknown); AB_UNAVAILABLE
 *         (retryable) when it said unavailable.
 */
AB_API AB_NODISCARD ab_status_t ab_caps_require(const ab_cap_t *caps, size_t n, const char *name,
                                                ab_error_t *err);

/* Capability names this protocol defines (docs/PROTOCOL.md, "Capabilities"). */
#define AB_CAP_PUBLISH           "publish"
#define AB_CAP_REPLAY            "replay"
#define AB_CAP_HEADS             "heads"
#define AB_CAP_DURABLE_SNAPSHOTS "durableThreadSnapshots"
#define AB_CAP_HEARTBEAT         "heartbeat"
#define AB_CAP_PACKED_PUBLISH    "packedPublish"
#define AB_CAP_ACTIONS           "actions"   /**< serve with actions, invoke_action, workers */
#define AB_CAP_DISPATCH          "dispatch"  /**< start_run, assign, decline, requests */
#define AB_CAP_CANCEL_RUN        "cancelRun" /**< cancel_run, run_cancel */
#define AB_CAP_RESUME_RUN        "resumeRun" /**< resume_run */
#define AB_CAP_THREADS           "threads"   /**< threads (listing the threads) */

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_NEGO_H */

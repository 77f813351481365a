/*
 * nego.c - version choice and capability states (see agentbus/nego.h).
 *
 * Invariant: a failed negotiation is never retryable - the same offer will
 * fail the same way - and names both version lists so a person can see why.
 */
#include "agentbus/nego.h"

#include <stdio.h>
#include <string.h>

static const uint32_t supported_versions[] = {AB_PROTOCOL_VERSION};

const uint32_t *ab_versions_supported(size_t *n)
{
    *n = sizeof(supported_versions) / sizeof(supported_versions[0]);
    return supported_versions;
}

bool ab_version_supported(uint32_t v)
{
    size_t n;
    const uint32_t *vs = ab_versions_supported(&n);
    for (size_t i = 0; i < n; i++)
        if (vs[i] == v)
            return true;
    return false;
}

static void list_versions(char *buf, size_t size, const uint32_t *v, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && used < size; i++) {
        int w = snprintf(buf + used, size - used, "%s%u", i ? "," : "", v[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

ab_status_t ab_version_negotiate(const uint32_t *ours, size_t nours, const uint32_t *theirs,
                                 size_t ntheirs, uint32_t *chosen, ab_error_t *err)
{
    if (ntheirs == 0 || ntheirs > AB_MAX_VERSIONS)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "versions",
                            "offer 1 to %d protocol versions, got %zu", AB_MAX_VERSIONS, ntheirs);
    uint32_t best = 0;
    for (size_t i = 0; i < nours; i++)
        for (size_t j = 0; j < ntheirs; j++)
            if (ours[i] == theirs[j] && ours[i] > best)
                best = ours[i];
    if (best == 0) {
        char a[96], b[96];
        list_versions(a, sizeof(a), ours, nours);
        list_versions(b, sizeof(b), theirs, ntheirs);
        ab_error_set(err, AB_INCOMPATIBLE_VERSION, "versions",
                     "no mutual protocol version: broker speaks [%s], client offers [%s]", a, b);
        ab_error_detail_str(err, "ours", a);
        ab_error_detail_str(err, "theirs", b);
        return AB_INCOMPATIBLE_VERSION;
    }
    *chosen = best;
    return AB_OK;
}

static const char *const cap_names[] = {"unknown", "available", "degraded", "unavailable",
                                        "unsupported"};

const char *ab_cap_state_name(ab_cap_state_t s)
{
    return (unsigned)s <= AB_CAP_UNSUPPORTED ? cap_names[s] : "unknown";
}

ab_status_t ab_cap_state_from(const char *s, size_t len, ab_cap_state_t *out)
{
    for (int i = AB_CAP_AVAILABLE; i <= AB_CAP_UNSUPPORTED; i++) {
        if (strlen(cap_names[i]) == len && memcmp(cap_names[i], s, len) == 0) {
            *out = (ab_cap_state_t)i;
            return AB_OK;
        }
    }
    return AB_INVALID_ENVELOPE;
}

ab_cap_state_t ab_caps_lookup(const ab_cap_t *caps, size_t n, const char *name)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i < n; i++)
        if (caps[i].name_len == nl && memcmp(caps[i].name, name, nl) == 0)
            return caps[i].state;
    return AB_CAP_UNKNOWN;
}

ab_status_t ab_caps_require(const ab_cap_t *caps, size_t n, const char *name, ab_error_t *err)
{
    ab_cap_state_t s = ab_caps_lookup(caps, n, name);
    switch (s) {
    case AB_CAP_AVAILABLE:
    case AB_CAP_DEGRADED: return AB_OK;
    case AB_CAP_UNAVAILABLE:
        return ab_error_set(err, AB_UNAVAILABLE, name, "capability %s is unavailable now", name);
    case AB_CAP_UNSUPPORTED:
        return ab_error_set(err, AB_UNSUPPORTED, name, "capability %s is unsupported", name);
    case AB_CAP_UNKNOWN: break;
    }
    return ab_error_set(err, AB_UNSUPPORTED, name,
                        "capability %s was not announced (unknown); refusing to use it", name);
}

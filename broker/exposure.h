/*
 * exposure.h - who may reach the broker (broker/ only): the rule that a
 * broker without keys binds loopback only (docs/OPERATIONS.md "Securing a
 * bus across machines"), and the check of the `keys` directory.
 */
#ifndef AB_BROKER_EXPOSURE_H
#define AB_BROKER_EXPOSURE_H

#include "agentbus/broker.h"

/**
 * Whether @p endpoint only local processes can reach: ipc:// and inproc://,
 * and tcp:// on a loopback host (127.x.x.x, localhost, [::1] or ::1). A
 * wildcard (`*`, 0.0.0.0), an interface name, any other address and any
 * other transport are not local.
 */
bool ab__endpoint_is_local(const char *endpoint);

/**
 * Check what @p cfg exposes, before anything is bound: the `keys` directory
 * (when set) exists and is a directory; without keys, both endpoints are
 * local unless `insecure` is set. With @p at_start, a non-local endpoint
 * allowed by `insecure` is logged as a warning.
 * @return AB_OK; AB_INVALID_CONFIG (field "keys": not a directory);
 *         AB_INVALID_ARGUMENT (field "cmd" or "events": a non-local endpoint
 *         without keys, the message naming it, --keys and --insecure);
 *         AB_UNSUPPORTED (keys given: authentication is not built yet).
 */
AB_NODISCARD ab_status_t ab__broker_check_exposure(const ab_broker_config_t *cfg, bool at_start,
                                                   ab_error_t *err);

#endif /* AB_BROKER_EXPOSURE_H */

/*
 * agentbus/ids.h - thread and run identifiers.
 *
 * An id is 1 to max_id_bytes (default 256) bytes of valid UTF-8 with no
 * control characters: no C0 (U+0000-U+001F), no DEL (U+007F), no C1
 * (U+0080-U+009F). Topics put ids behind a NUL separator, which an id can
 * therefore never contain (docs/PROTOCOL.md, "Topics").
 *
 * Thread-safety: reentrant.
 */
#ifndef AGENTBUS_IDS_H
#define AGENTBUS_IDS_H

#include "agentbus/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Default and hard maximum id length in bytes. */
#define AB_ID_MAX_BYTES 256

/**
 * Check an id.
 * @param field  named in the error ("thread", "run", ...).
 * @param max    maximum length in bytes (0 = AB_ID_MAX_BYTES).
 * @return AB_OK or AB_INVALID_ENVELOPE with a message saying what is wrong
 *         (empty, too long, invalid UTF-8, control character at byte N).
 */
AB_API AB_NODISCARD ab_status_t ab_id_check(const char *id, size_t len, uint32_t max,
                                            const char *field, ab_error_t *err);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_IDS_H */

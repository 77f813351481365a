/*
 * ids.c - thread/run id rules (see agentbus/ids.h).
 *
 * Invariant: an id that passes contains no byte below 0x20, no 0x7f and no
 * encoded C1 control (0xc2 0x80-0x9f), so the NUL topic separator and
 * terminal escapes can never appear inside one.
 */
#include "agentbus/ids.h"
#include "agentbus/value.h"

ab_status_t ab_id_check(const char *id, size_t len, uint32_t max, const char *field,
                        ab_error_t *err)
{
    if (max == 0 || max > AB_ID_MAX_BYTES)
        max = AB_ID_MAX_BYTES;
    if (len == 0)
        return ab_error_set(err, AB_INVALID_ENVELOPE, field, "%s id is empty", field);
    if (len > max) {
        ab_error_set(err, AB_INVALID_ENVELOPE, field, "%s id is %zu bytes, the limit is %u", field,
                     len, max);
        ab_error_detail_int(err, "limit", max);
        return AB_INVALID_ENVELOPE;
    }
    if (!ab_utf8_valid(id, len))
        return ab_error_set(err, AB_INVALID_ENVELOPE, field, "%s id is not valid UTF-8", field);
    const unsigned char *s = (const unsigned char *)id;
    for (size_t i = 0; i < len; i++) {
        bool c1 = s[i] == 0xc2 && i + 1 < len && s[i + 1] >= 0x80 && s[i + 1] <= 0x9f;
        if (s[i] < 0x20 || s[i] == 0x7f || c1)
            return ab_error_set(err, AB_INVALID_ENVELOPE, field,
                                "%s id contains a control character at byte %zu", field, i);
    }
    return AB_OK;
}

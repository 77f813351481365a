/*
 * ids.c - thread/run id rules (see agentbus/ids.h).
 *
 * Invariant: an id that passes contains no byte below 0x20, no 0x7f and no
 * encoded C1 control (0xc2 0x80-0x9f), so the NUL topic separator and
 * terminal escapes can never appear inside one.
 */
#include "agentbus/ids.h"
#include "agentbus/value.h"

#include <stdint.h>
#include <string.h>

/* True when each of the 8 bytes at @p p is printable ASCII (0x20 .. 0x7e): no high bit, no
 * byte below 0x20 (a borrow of w - 0x20.. reaches a high bit that w lacks only from such a
 * byte) and none equal to 0x7f (a zero byte of w ^ 0x7f..). Exact as a test of "any". */
static bool printable8(const char *p)
{
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    uint64_t w, del;
    memcpy(&w, p, 8);
    del = w ^ (ones * 0x7f);
    return ((w | ((w - ones * 0x20) & ~w) | ((del - ones) & ~del)) & high) == 0;
}

/* The common id: 8 bytes or more, all printable ASCII, which is valid UTF-8 and holds no
 * control character. False sends the id to the byte-wise checks. */
static bool printable_ascii(const char *id, size_t len)
{
    if (len < 8)
        return false;
    for (size_t i = 0; i + 8 <= len; i += 8)
        if (!printable8(id + i))
            return false;
    return printable8(id + len - 8); /* the tail, overlapping */
}

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
    if (printable_ascii(id, len))
        return AB_OK;
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

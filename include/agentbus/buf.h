/*
 * agentbus/buf.h - a growable byte buffer, the output of every encoder.
 *
 * Zero-initialise (AB_BUF_INIT), append, read data/len, then ab_buf_free().
 * Growth is geometric; a failed growth leaves the contents unchanged and
 * returns AB_NOMEM. Thread-safety: one thread per buffer.
 */
#ifndef AGENTBUS_BUF_H
#define AGENTBUS_BUF_H

#include "agentbus/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ab_buf {
    uint8_t *data; /**< owned; NULL until the first append */
    size_t len;
    size_t cap;
} ab_buf_t;

#define AB_BUF_INIT                                                                                \
    {                                                                                              \
        0                                                                                          \
    }

/** Append @p n bytes. @return AB_OK or AB_NOMEM. */
AB_API AB_NODISCARD ab_status_t ab_buf_append(ab_buf_t *b, const void *p, size_t n);

/** Make room for @p n more bytes. @return AB_OK or AB_NOMEM. */
AB_API AB_NODISCARD ab_status_t ab_buf_reserve(ab_buf_t *b, size_t n);

/** Set len to 0, keeping the memory. */
AB_API void ab_buf_reset(ab_buf_t *b);

/** Free the memory and zero the struct. NULL-safe. */
AB_API void ab_buf_free(ab_buf_t *b);

/** msgpack_packer write callback: `msgpack_packer_init(&pk, buf, ab_buf_msgpack_write)`. */
AB_API int ab_buf_msgpack_write(void *buf, const char *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_BUF_H */

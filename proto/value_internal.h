/*
 * value_internal.h - the msgpack-c side of the value tree (proto/ and the
 * tests only): public headers include no third-party header, so what takes a
 * msgpack_packer lives here.
 */
#ifndef AB_PROTO_VALUE_INTERNAL_H
#define AB_PROTO_VALUE_INTERNAL_H

#include "agentbus/value.h"

#include <msgpack.h>

/**
 * Encode @p v with msgpack-c. Integers use the smallest encoding (AB_VAL_UINT
 * is uint 64), floats are written as float64. @return AB_OK or AB_NOMEM.
 */
AB_NODISCARD ab_status_t ab__val_pack(msgpack_packer *pk, const ab_val_t *v);

/**
 * Step over one whole msgpack value at *@p p (everything inside it), checking
 * only bounds (codec_peek.c). On success *@p p is just past it. @return false
 * when the value is malformed or runs past @p end (*@p p is then unspecified).
 */
bool ab__mp_skip(const uint8_t **p, const uint8_t *end);

#endif /* AB_PROTO_VALUE_INTERNAL_H */

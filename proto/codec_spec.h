/*
 * codec_spec.h - the macros that write command field tables (proto/ only):
 * codec_cmd.c has the tables of the core ops, codec_dispatch.c those of
 * dispatch (docs/PROTOCOL.md 7.12 - 7.16).
 */
#ifndef AB_PROTO_CODEC_SPEC_H
#define AB_PROTO_CODEC_SPEC_H

#include "codec_internal.h"

#include <stddef.h>

/** The `op` field (codec_cmd.c). */
extern const ab_ftype_t ab__ft_op;

/** The table of a dispatch op (START_RUN and later); NULL for any other op. */
const ab_ospec_t *ab__dispatch_spec(ab_op_t op);

#define NAMES(a) .names = a, .nnames = sizeof(a) / sizeof(a[0])
/* ---- field table helpers ------------------------------------------------ */

#define REQ  AB_F_REQ
#define MIN1 AB_F_MIN1
#define M(x) offsetof(ab_msg_t, x)
#define SPEC(a, sz)                                                                                \
    {                                                                                              \
        .fields = a, .n = sizeof(a) / sizeof(a[0]), .size = sz                                     \
    }
#define SPECX(a, sz, ...)                                                                          \
    {                                                                                              \
        .fields = a, .n = sizeof(a) / sizeof(a[0]), .size = sz, __VA_ARGS__                        \
    }
#define F_OP                                                                                       \
    {                                                                                              \
        .key = "op", .type = &ab__ft_op, .flags = REQ                                              \
    }
#define F_V                                                                                        \
    {                                                                                              \
        .key = "v", .type = &ab__ft_ver, .off = M(v), .flags = REQ                                 \
    }
#define F_VOPT                                                                                     \
    {                                                                                              \
        .key = "v", .type = &ab__ft_ver, .off = M(v)                                               \
    }
#define F_CID                                                                                      \
    {                                                                                              \
        .key = "cid", .type = &ab__ft_u64, .off = M(cid), .flags = REQ                             \
    }
#define HDR F_OP, F_V, F_CID
#define ID(k, o)                                                                                   \
    {                                                                                              \
        .key = k, .type = &ab__ft_id, .off = (o), .flags = REQ                                     \
    }
#define U64(k, o, fl)                                                                              \
    {                                                                                              \
        .key = k, .type = &ab__ft_u64, .off = (o), .flags = (fl)                                   \
    }
#define STR(k, o, fl, mx)                                                                          \
    {                                                                                              \
        .key = k, .type = &ab__ft_str, .off = (o), .flags = (fl), .max = (mx)                      \
    }

/* Typed pointer store/load for lists of structs. */
#define LIST_IO(T, name)                                                                           \
    static void name##_store(char *slot, void *p)                                                  \
    {                                                                                              \
        *(const T **)(void *)slot = p;                                                             \
    }                                                                                              \
    static const void *name##_load(const char *slot)                                               \
    {                                                                                              \
        return *(const T *const *)(const void *)slot;                                              \
    }
#define ACTION_ID(k, o) STR(k, o, REQ | MIN1, AB_ACTION_ID_MAX)
#define ANY(k, o)                                                                                  \
    {                                                                                              \
        .key = k, .type = &ab__ft_any, .off = (o)                                                  \
    }
#define TIMEOUT(o, fl)                                                                             \
    {                                                                                              \
        .key = "timeout_ms", .type = &ab__ft_u32, .off = (o), .flags = (fl),                       \
        .max = AB_ACTION_TIMEOUT_MS_MAX                                                            \
    }
#define OPT_ID(k, o)                                                                               \
    {                                                                                              \
        .key = k, .type = &ab__ft_id, .off = (o)                                                   \
    }

#endif /* AB_PROTO_CODEC_SPEC_H */

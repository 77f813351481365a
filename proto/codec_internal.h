/*
 * codec_internal.h - the table-driven machinery behind agentbus/codec.h.
 *
 * Each message is described by an ab_ospec_t: a list of fields (key, type,
 * offset in the C struct, flags, bounds). One generic walker decodes a map
 * into a struct (rejecting unknown and missing fields), encodes a struct in
 * spec order and compares two structs, so the rules of a message are written
 * once and the three directions cannot drift apart.
 *
 * A field type (ab_ftype_t) knows how to decode, encode, test presence and
 * compare its C representation. The context (ab_cctx_t) carries the error,
 * the path of the value being worked on and, when decoding, the doc and the
 * limits.
 */
#ifndef AB_CODEC_INTERNAL_H
#define AB_CODEC_INTERNAL_H

#include "agentbus/codec.h"

#include <msgpack.h>
#include <stddef.h>

#define AB_F_REQ  0x01 /* required */
#define AB_F_MIN1 0x02 /* numbers: >= 1; strings and lists: non-empty */

/* Peer limits a field may be bounded by (decoding only). */
enum ab_lim {
    AB_LIM_NONE = 0,
    AB_LIM_BATCH,         /* ab_limits_t.max_batch */
    AB_LIM_REPLAY_WINDOW, /* ab_limits_t.max_replay_window */
    AB_LIM_REPLAY_BYTES,  /* ab_limits_t.max_replay_bytes */
    AB_LIM_CHUNK_BYTES,   /* AB_CHUNK_EVENTS_MAX records of ab_limits_t.max_event_bytes */
};

typedef struct ab_cctx {
    ab_error_t *err;
    ab_status_t bad;               /* shape errors: INVALID_ENVELOPE or INVALID_ARGUMENT */
    bool decoding;                 /* limits and doc are set only when decoding */
    const ab_limits_t *lim;        /* decoding */
    ab_doc_t *doc;                 /* decoding */
    uint64_t cid;                  /* decoding: the header's cid, copied into errors */
    msgpack_packer pk;             /* encoding */
    char path[AB_ERROR_FIELD_MAX]; /* JSON pointer of the current value */
    size_t plen;                   /* strlen(path), kept so pushes cost no strlen */
} ab_cctx_t;

typedef struct ab_fspec ab_fspec_t;
typedef struct ab_ospec ab_ospec_t;

typedef struct ab_ftype {
    ab_status_t (*dec)(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base);
    ab_status_t (*enc)(ab_cctx_t *c, const ab_fspec_t *f, const char *base);
    bool (*has)(const ab_fspec_t *f, const char *base); /* optional field present? */
    bool (*eq)(const ab_fspec_t *f, const char *a, const char *b);
} ab_ftype_t;

struct ab_fspec {
    const char *key;
    const ab_ftype_t *type;
    uint16_t off;             /* the value, or a list's pointer */
    uint16_t off_n;           /* a list's count (size_t) */
    uint8_t flags;            /* AB_F_* */
    uint8_t lim;              /* enum ab_lim */
    uint64_t max;             /* static maximum: value, bytes or entries; 0 = none */
    const ab_ospec_t *sub;    /* nested object or list element */
    const char *const *names; /* enums: wire name by value; NULL = not a wire value */
    uint8_t nnames;
};

struct ab_ospec {
    const ab_fspec_t *fields;
    uint8_t n;   /* at most 64: the walker tracks seen fields in a uint64_t */
    size_t size; /* C size of one element when used in a list */
    /* cross-field rule, run after decoding and before encoding */
    ab_status_t (*check)(ab_cctx_t *c, const char *base);
    /* lists: store/load the typed element pointer at base + off */
    void (*store)(char *slot, void *items);
    const void *(*load)(const char *slot);
    /* optional encoder for the common case of a hot object, making the same
     * msgpack calls as the generic walk minus its path bookkeeping: returns
     * a status when it encoded the object, -1 to fall back to the walk */
    int (*fast_enc)(ab_cctx_t *c, const char *base);
};

/* typed access to a field at base + off */
#define AB_FLD(T, base, off)  ((T *)(void *)((base) + (off)))
#define AB_CFLD(T, base, off) ((T const *)(const void *)((base) + (off)))

/* ---- context (codec_core.c) -------------------------------------------- */

void ab__cc_init_decode(ab_cctx_t *c, ab_doc_t *doc, const ab_limits_t *lim, ab_error_t *err);
void ab__cc_init_encode(ab_cctx_t *c, ab_buf_t *out, ab_error_t *err);

/* Record an error naming the current path. @return code. */
ab_status_t ab__cc_fail(ab_cctx_t *c, ab_status_t code, const char *fmt, ...) AB_PRINTF(3, 4);
/* The current path without its leading slash ("" at the root). */
const char *ab__cc_field(const ab_cctx_t *c);
/* Push a key / an index; return the mark to pass to ab__cc_pop(). */
size_t ab__cc_push_key(ab_cctx_t *c, const char *key, size_t len);
size_t ab__cc_push_index(ab_cctx_t *c, size_t i);
void ab__cc_pop(ab_cctx_t *c, size_t mark);
/* Drop the leading '/' of a JSON pointer in err->field (reader errors). */
void ab__cc_fix_field(ab_error_t *err);
/* msgpack write result to status. */
ab_status_t ab__cc_pk(ab_cctx_t *c, int rc);
/* Arena array of n elements of size bytes, zeroed; NULL after an error. */
void *ab__cc_alloc(ab_cctx_t *c, size_t n, size_t size);
/* What a checked number measures (for messages). */
enum ab_unit {
    AB_UNIT_VALUE,   /* "must be at least 1", "is N, the limit is M" */
    AB_UNIT_ENTRIES, /* "must not be empty", "has N entries, ..." */
    AB_UNIT_BYTES,   /* "must not be empty", "is N bytes, ..." */
};
/* Check a value, count or length against f's flags and bounds. */
ab_status_t ab__cc_check_uint(ab_cctx_t *c, const ab_fspec_t *f, uint64_t x, uint64_t implicit,
                              enum ab_unit unit);
/* Decode a non-negative integer (any msgpack integer encoding). */
ab_status_t ab__cc_get_uint(ab_cctx_t *c, const ab_val_t *v, uint64_t *out);
/* Check a string for encoding: valid UTF-8. */
ab_status_t ab__cc_check_utf8(ab_cctx_t *c, const char *s, size_t len);
/* Check an id (ids.h) with the current path as its name. */
ab_status_t ab__cc_check_id(ab_cctx_t *c, const char *s, size_t len);
/* Write a string. */
ab_status_t ab__cc_pack_str(ab_cctx_t *c, const char *s, size_t len);

/* Generic object walker. */
ab_status_t ab__cc_dec_object(ab_cctx_t *c, const ab_ospec_t *s, const ab_val_t *v, char *base);
ab_status_t ab__cc_enc_object(ab_cctx_t *c, const ab_ospec_t *s, const char *base);
bool ab__cc_eq_object(const ab_ospec_t *s, const char *a, const char *b);
/* The root must be a map; a `v` in it is checked first, so a message of
 * another version fails as incompatible_version, not on its fields. */
ab_status_t ab__cc_check_root(ab_cctx_t *c, const ab_val_t *root);
/* Encode obj with spec s, appending to out; out->len is restored on error. */
ab_status_t ab__cc_encode(const ab_ospec_t *s, const void *obj, ab_buf_t *out, ab_error_t *err);

/* ---- field types -------------------------------------------------------- */

/* codec_core.c: scalars */
extern const ab_ftype_t ab__ft_u64;    /* uint64_t, 0..INT64_MAX */
extern const ab_ftype_t ab__ft_u32;    /* uint32_t */
extern const ab_ftype_t ab__ft_i64;    /* int64_t */
extern const ab_ftype_t ab__ft_bool;   /* bool */
extern const ab_ftype_t ab__ft_ver;    /* uint32_t protocol version; 0 = absent */
extern const ab_ftype_t ab__ft_str;    /* ab_str_t, max bytes */
extern const ab_ftype_t ab__ft_id;     /* ab_str_t, ids.h rules */
extern const ab_ftype_t ab__ft_id0;    /* ab_str_t, an id or "" */
extern const ab_ftype_t ab__ft_cstr;   /* char[max], NUL-terminated, no NUL inside */
extern const ab_ftype_t ab__ft_enum;   /* int-sized enum named by f->names */
extern const ab_ftype_t ab__ft_anymap; /* const ab_val_t *, a map */

/* codec_types.c: composites */
extern const ab_ftype_t ab__ft_obj;      /* nested struct described by f->sub */
extern const ab_ftype_t ab__ft_list;     /* array of f->sub structs: pointer + count */
extern const ab_ftype_t ab__ft_versions; /* array of uint32_t >= 1: pointer + count */
extern const ab_ftype_t ab__ft_caps;     /* map name -> state: ab_cap_t pointer + count */
extern const ab_ftype_t ab__ft_cursors;  /* map run id -> seq: ab_cursor_t pointer + count */
extern const ab_ftype_t ab__ft_error;    /* error map: const ab_error_t * */
extern const ab_ftype_t ab__ft_strlist; /* array of distinct action ids: ab_str_t pointer + count */
extern const ab_ftype_t ab__ft_any;     /* any value: const ab_val_t *, NULL = absent */

#endif /* AB_CODEC_INTERNAL_H */

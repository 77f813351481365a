/*
 * codec.c - event envelopes, broker stamps and topics (agentbus/codec.h,
 * docs/PROTOCOL.md "Event envelope", "Broker stamp", "Topics").
 *
 * Invariants:
 *  1. The envelope decoder never copies or rewrites the event bytes: the
 *     broker stores and fans out the producer's frame as received, and the
 *     decoded ab_event_t only points into it.
 *  2. The whole envelope frame, body included, is held to max_event_bytes
 *     and max_depth by the strict reader before any field is looked at; the
 *     body is otherwise opaque here (AG-UI validation is agui.c's job).
 *  3. Topics are built only from ids that pass ab_id_check(), so the NUL
 *     separator can never appear inside an id.
 */
#include "codec_internal.h"

#include "agentbus/ids.h"
#include "agentbus/nego.h"

#include <string.h>

/* ---- event envelope ----------------------------------------------------- */

#define EV(m) offsetof(ab_event_t, m)

static const ab_fspec_t event_fields[] = {
    {.key = "v", .type = &ab__ft_ver, .off = EV(v), .flags = AB_F_REQ},
    {.key = "thread", .type = &ab__ft_id, .off = EV(thread), .flags = AB_F_REQ},
    {.key = "run", .type = &ab__ft_id, .off = EV(run), .flags = AB_F_REQ},
    {.key = "seq", .type = &ab__ft_u64, .off = EV(seq), .flags = AB_F_REQ | AB_F_MIN1},
    {.key = "epoch", .type = &ab__ft_u64, .off = EV(epoch), .flags = AB_F_REQ | AB_F_MIN1},
    {.key = "ts", .type = &ab__ft_i64, .off = EV(ts), .flags = AB_F_REQ},
    {.key = "event", .type = &ab__ft_anymap, .off = EV(body), .flags = AB_F_REQ},
};

static const ab_ospec_t event_spec = {
    .fields = event_fields,
    .n = sizeof(event_fields) / sizeof(event_fields[0]),
    .size = sizeof(ab_event_t),
};

ab_status_t ab_event_encode(const ab_event_t *ev, ab_buf_t *out, ab_error_t *err)
{
    return ab__cc_encode(&event_spec, ev, out, err);
}

static bool head_fast(const uint8_t *buf, size_t len, const ab_limits_t *lim, ab_event_t *ev,
                      size_t *body_off);

/*
 * The ingest hot path: an envelope in the canonical shape (the 7 keys in the
 * documented order) has its header read straight from the bytes (head_fast)
 * and only its body parsed into a tree, at one depth less (the envelope map
 * is depth 1). Anything that does not pass - another key order, another
 * encoding of the map header, and every error - takes the generic
 * table-driven decoder below, which accepts the same set and names the
 * errors. No error is recorded here (NULL sink: nothing to zero per event).
 */
static bool event_direct(ab_doc_t *doc, const uint8_t *buf, size_t len, const ab_limits_t *lim,
                         ab_event_t *ev)
{
    size_t off = 0;
    const ab_val_t *body = NULL;
    if (lim->max_depth < 2 || !head_fast(buf, len, lim, ev, &off) ||
        ab_doc_parse(doc, buf + off, len - off, lim->max_event_bytes, lim->max_depth - 1,
                     AB_INVALID_ENVELOPE, &body, NULL) != AB_OK ||
        body->type != AB_VAL_MAP)
        return false;
    ev->body = body;
    return true;
}

ab_status_t ab_event_decode(ab_doc_t *doc, const uint8_t *buf, size_t len,
                            const ab_limits_t *limits, ab_event_t *out, ab_error_t *err)
{
    ab_limits_t lim = limits ? *limits : ab_limits_default();
    if (buf != NULL && out != NULL) {
        ab_event_t ev;
        memset(&ev, 0, sizeof(ev));
        if (event_direct(doc, buf, len, &lim, &ev)) {
            *out = ev;
            return AB_OK;
        }
    }
    const ab_val_t *root = NULL;
    ab_status_t rc = ab_doc_parse(doc, buf, len, lim.max_event_bytes, lim.max_depth,
                                  AB_INVALID_ENVELOPE, &root, err);
    if (rc != AB_OK) {
        ab__cc_fix_field(err);
        return rc;
    }
    ab_event_t ev;
    memset(&ev, 0, sizeof(ev));
    ab_cctx_t c;
    ab__cc_init_decode(&c, doc, &lim, err);
    rc = ab__cc_check_root(&c, root);
    if (rc == AB_OK)
        rc = ab__cc_dec_object(&c, &event_spec, root, (char *)&ev);
    if (rc == AB_OK)
        *out = ev;
    return rc;
}

bool ab_event_equal(const ab_event_t *a, const ab_event_t *b)
{
    return ab__cc_eq_object(&event_spec, (const char *)a, (const char *)b);
}

/* ---- broker stamp ------------------------------------------------------- */

_Static_assert(sizeof(ab_author_t) == sizeof(int), "enum size");
static const char *const author_names[] = {NULL, "broker"};

/* `tprev`: a uint whose 0 is a value (the thread's first event), so its
 * presence is has_tprev, not a non-zero value as for the other optional uints. */
static ab_status_t tprev_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    uint64_t x = 0;
    ab_status_t rc = ab__cc_get_uint(c, v, &x);
    if (rc == AB_OK)
        rc = ab__cc_check_uint(c, f, x, INT64_MAX, AB_UNIT_VALUE);
    if (rc != AB_OK)
        return rc;
    ab_stamp_t *st = (ab_stamp_t *)(void *)base;
    st->tprev = x;
    st->has_tprev = true;
    return AB_OK;
}

static ab_status_t tprev_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    (void)f;
    const ab_stamp_t *st = (const ab_stamp_t *)(const void *)base;
    return ab__cc_pk(c, msgpack_pack_uint64(&c->pk, st->tprev));
}

static bool tprev_has(const ab_fspec_t *f, const char *base)
{
    (void)f;
    return ((const ab_stamp_t *)(const void *)base)->has_tprev;
}

static bool tprev_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    (void)f;
    const ab_stamp_t *x = (const ab_stamp_t *)(const void *)a;
    const ab_stamp_t *y = (const ab_stamp_t *)(const void *)b;
    return x->has_tprev == y->has_tprev && (!x->has_tprev || x->tprev == y->tprev);
}

static const ab_ftype_t ft_tprev = {tprev_dec, tprev_enc, tprev_has, tprev_eq};

static const ab_fspec_t stamp_fields[] = {
    {.key = "pos",
     .type = &ab__ft_u64,
     .off = offsetof(ab_stamp_t, pos),
     .flags = AB_F_REQ | AB_F_MIN1},
    {.key = "time", .type = &ab__ft_i64, .off = offsetof(ab_stamp_t, time_us), .flags = AB_F_REQ},
    {.key = "tprev", .type = &ft_tprev, .off = offsetof(ab_stamp_t, tprev)},
    {.key = "by",
     .type = &ab__ft_enum,
     .off = offsetof(ab_stamp_t, author),
     .names = author_names,
     .nnames = 2},
};

static const ab_ospec_t stamp_spec = {
    .fields = stamp_fields,
    .n = sizeof(stamp_fields) / sizeof(stamp_fields[0]),
    .size = sizeof(ab_stamp_t),
};

/*
 * Stamps are encoded and decoded once per event on every live and replayed
 * event, so they have a hand-written fast path for the canonical form
 * {"pos": uint, "time": int} with the smallest msgpack integer encodings,
 * which is byte for byte what the spec-driven encoder (msgpack-c) writes.
 * Anything else (pos out of range, other layouts) takes the generic path,
 * so errors and accepted inputs are unchanged.
 */
static uint8_t *put_be(uint8_t *p, uint8_t tag, uint64_t v, int bytes)
{
    *p++ = tag;
    for (int i = bytes - 1; i >= 0; i--)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static uint8_t *put_uint(uint8_t *p, uint64_t v)
{
    if (v < 128)
        return *p = (uint8_t)v, p + 1;
    if (v <= UINT8_MAX)
        return put_be(p, 0xcc, v, 1);
    if (v <= UINT16_MAX)
        return put_be(p, 0xcd, v, 2);
    if (v <= UINT32_MAX)
        return put_be(p, 0xce, v, 4);
    return put_be(p, 0xcf, v, 8);
}

static uint8_t *put_int(uint8_t *p, int64_t v)
{
    if (v >= 0)
        return put_uint(p, (uint64_t)v);
    if (v >= -32)
        return *p = (uint8_t)(int8_t)v, p + 1;
    if (v >= INT8_MIN)
        return put_be(p, 0xd0, (uint64_t)v, 1);
    if (v >= INT16_MIN)
        return put_be(p, 0xd1, (uint64_t)v, 2);
    if (v >= INT32_MIN)
        return put_be(p, 0xd2, (uint64_t)v, 4);
    return put_be(p, 0xd3, (uint64_t)v, 8);
}

ab_status_t ab_stamp_encode(const ab_stamp_t *st, ab_buf_t *out, ab_error_t *err)
{
    if (st != NULL && st->has_tprev && st->tprev >= st->pos)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "tprev",
                            "a stamp's tprev %llu is not below its pos %llu",
                            (unsigned long long)st->tprev, (unsigned long long)st->pos);
    if (st == NULL || out == NULL || st->pos == 0 || st->pos > (uint64_t)INT64_MAX ||
        st->author != AB_AUTHOR_PRODUCER || ab_buf_reserve(out, 48) != AB_OK)
        return ab__cc_encode(&stamp_spec, st, out, err);
    uint8_t *p0 = out->data + out->len, *p = p0;
    memcpy(p, st->has_tprev ? "\x83\xa3pos" : "\x82\xa3pos", 5);
    p = put_uint(p + 5, st->pos);
    memcpy(p, "\xa4time", 5);
    p = put_int(p + 5, st->time_us);
    if (st->has_tprev) {
        memcpy(p, "\xa5tprev", 6);
        p = put_uint(p + 6, st->tprev);
    }
    out->len += (size_t)(p - p0);
    return AB_OK;
}

static void put_be32(uint8_t *p, uint32_t x)
{
    p[0] = (uint8_t)(x >> 24);
    p[1] = (uint8_t)(x >> 16);
    p[2] = (uint8_t)(x >> 8);
    p[3] = (uint8_t)x;
}

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

ab_status_t ab_record_append(ab_buf_t *out, const ab_stamp_t *st, const void *ev, size_t len,
                             ab_error_t *err)
{
    size_t mark = out->len;
    if (len > UINT32_MAX)
        return ab_error_set(err, AB_TOO_LARGE, "event", "a record's envelope is over 4 GiB");
    if (ab_buf_reserve(out, AB_CHUNK_RECORD_OVERHEAD + len) != AB_OK)
        return ab_error_set(err, AB_NOMEM, "", "out of memory building a record");
    out->len += 4; /* the stamp's length, known once it is encoded */
    ab_status_t st_rc = ab_stamp_encode(st, out, err);
    if (st_rc != AB_OK) {
        out->len = mark;
        return st_rc;
    }
    put_be32(out->data + mark, (uint32_t)(out->len - mark - 4));
    put_be32(out->data + out->len, (uint32_t)len);
    if (len > 0)
        memcpy(out->data + out->len + 4, ev, len);
    out->len += 4 + len;
    return AB_OK;
}

/* Cut one u32 BE length-prefixed part out of [*p, end). */
static bool take_part(const uint8_t **p, const uint8_t *end, const uint8_t **part, size_t *len)
{
    if ((size_t)(end - *p) < 4)
        return false;
    uint32_t n = get_be32(*p);
    if ((size_t)(end - *p) - 4 < n)
        return false;
    *part = *p + 4;
    *len = n;
    *p += 4 + (size_t)n;
    return true;
}

ab_status_t ab_packed_append(ab_buf_t *out, const void *ev, size_t len, ab_error_t *err)
{
    if (len > UINT32_MAX)
        return ab_error_set(err, AB_TOO_LARGE, "event", "an envelope is over 4 GiB");
    if (ab_buf_reserve(out, 4 + len) != AB_OK)
        return ab_error_set(err, AB_NOMEM, "", "out of memory packing a publish");
    put_be32(out->data + out->len, (uint32_t)len);
    if (len > 0)
        memcpy(out->data + out->len + 4, ev, len);
    out->len += 4 + len;
    return AB_OK;
}

bool ab_packed_next(const uint8_t **p, const uint8_t *end, const uint8_t **ev, size_t *len)
{
    return take_part(p, end, ev, len);
}

bool ab_record_next(const uint8_t **p, const uint8_t *end, const uint8_t **stamp, size_t *slen,
                    const uint8_t **ev, size_t *elen)
{
    const uint8_t *q = *p;
    if (!take_part(&q, end, stamp, slen) || !take_part(&q, end, ev, elen))
        return false;
    *p = q;
    return true;
}

/* Read a msgpack integer at *p (any width); false when it is not one or runs past @p end. */
static bool get_int(const uint8_t **p, const uint8_t *end, bool *neg, uint64_t *v)
{
    const uint8_t *q = *p;
    if (q >= end)
        return false;
    uint8_t tag = *q++;
    int bytes = 0;
    *neg = false;
    if (tag < 0x80 || tag >= 0xe0) {
        *neg = tag >= 0xe0;
        *v = *neg ? (uint64_t)(int64_t)(int8_t)tag : tag;
        *p = q;
        return true;
    }
    if (tag >= 0xcc && tag <= 0xcf)
        bytes = 1 << (tag - 0xcc);
    else if (tag >= 0xd0 && tag <= 0xd3)
        bytes = 1 << (tag - 0xd0);
    else
        return false;
    if (end - q < bytes)
        return false;
    uint64_t x = 0;
    for (int i = 0; i < bytes; i++)
        x = x << 8 | q[i];
    if (tag >= 0xd0) { /* sign-extend */
        int shift = 64 - 8 * bytes;
        int64_t sx = shift ? (int64_t)(x << shift) >> shift : (int64_t)x;
        *neg = sx < 0;
        x = (uint64_t)sx;
    }
    *v = x;
    *p = q + bytes;
    return true;
}

/* The canonical stamp; false sends the frame down the generic path. */
static bool stamp_fast(const uint8_t *buf, size_t len, ab_stamp_t *out)
{
    const uint8_t *p = buf, *end = buf + len;
    bool neg = false, three = len >= 1 && p[0] == 0x83;
    uint64_t pos = 0, t = 0, tp = 0;
    if (len < 12 || memcmp(p + 1, "\xa3pos", 4) != 0 || (p[0] != 0x82 && !three))
        return false;
    p += 5;
    if (!get_int(&p, end, &neg, &pos) || neg || pos == 0 || pos > (uint64_t)INT64_MAX)
        return false;
    if (end - p < 5 || memcmp(p, "\xa4time", 5) != 0)
        return false;
    p += 5;
    if (!get_int(&p, end, &neg, &t) || (!neg && t > (uint64_t)INT64_MAX))
        return false;
    if (three) { /* {pos, time, tprev}: the live stamp of a broker that knows tprev */
        if (end - p < 6 || memcmp(p, "\xa5tprev", 6) != 0)
            return false;
        p += 6;
        bool tneg = false;
        if (!get_int(&p, end, &tneg, &tp) || tneg || tp >= pos)
            return false;
    }
    if (p != end)
        return false;
    out->pos = pos;
    out->time_us = (int64_t)t;
    out->author = AB_AUTHOR_PRODUCER;
    out->has_tprev = three;
    out->tprev = tp;
    return true;
}

ab_status_t ab_stamp_decode(ab_doc_t *doc, const uint8_t *buf, size_t len, ab_stamp_t *out,
                            ab_error_t *err)
{
    if (buf != NULL && out != NULL && stamp_fast(buf, len, out))
        return AB_OK;
    const ab_val_t *root = NULL;
    ab_status_t rc =
        ab_doc_parse(doc, buf, len, AB_STAMP_MAX_BYTES, 2, AB_INVALID_ENVELOPE, &root, err);
    if (rc != AB_OK) {
        ab__cc_fix_field(err);
        return rc;
    }
    ab_cctx_t c;
    ab__cc_init_decode(&c, doc, NULL, err);
    ab_stamp_t st = {0, 0, AB_AUTHOR_PRODUCER, false, 0};
    rc = ab__cc_dec_object(&c, &stamp_spec, root, (char *)&st);
    if (rc == AB_OK && st.has_tprev && st.tprev >= st.pos)
        rc = ab_error_set(err, AB_INVALID_ENVELOPE, "tprev",
                          "a stamp's tprev %llu is not below its pos %llu",
                          (unsigned long long)st.tprev, (unsigned long long)st.pos);
    if (rc == AB_OK)
        *out = st;
    return rc;
}

bool ab_event_by_broker(const ab_val_t *body)
{
    const ab_val_t *code = ab_val_get(body, "code");
    size_t n = sizeof(AB_BROKER_CODE_PREFIX) - 1;
    return ab_val_str_eq(ab_val_get(body, "type"), "RUN_ERROR") && code &&
           code->type == AB_VAL_STR && code->len >= n &&
           memcmp(code->u.s, AB_BROKER_CODE_PREFIX, n) == 0;
}

/* ---- envelope header only ------------------------------------------------ */

/* A msgpack string at *p (fixstr, str 8/16/32); false when it is not one or runs past @p end. */
static bool get_str(const uint8_t **p, const uint8_t *end, ab_str_t *out)
{
    const uint8_t *q = *p;
    if (q >= end)
        return false;
    uint8_t tag = *q++;
    uint64_t n = 0;
    int bytes = tag == 0xd9 ? 1 : tag == 0xda ? 2 : tag == 0xdb ? 4 : 0;
    if (tag >= 0xa0 && tag <= 0xbf)
        n = tag & 0x1f;
    else if (bytes == 0 || end - q < bytes)
        return false;
    for (int i = 0; i < bytes; i++)
        n = n << 8 | *q++;
    if ((uint64_t)(end - q) < n)
        return false;
    *out = (ab_str_t){(const char *)q, (size_t)n};
    *p = q + n;
    return true;
}

/* The fixstr key @p k (with its tag byte) at *p. */
static bool get_key(const uint8_t **p, const uint8_t *end, const char *k, size_t klen)
{
    if ((size_t)(end - *p) < klen || memcmp(*p, k, klen) != 0)
        return false;
    *p += klen;
    return true;
}

/* A non-negative integer in [min, INT64_MAX] at *p. */
static bool get_count(const uint8_t **p, const uint8_t *end, uint64_t min, uint64_t *v)
{
    bool neg = false;
    return get_int(p, end, &neg, v) && !neg && *v >= min && *v <= (uint64_t)INT64_MAX;
}

static bool head_fast(const uint8_t *buf, size_t len, const ab_limits_t *lim, ab_event_t *ev,
                      size_t *body_off)
{
    const uint8_t *p = buf, *end = buf + len;
    uint64_t v = 0, ts = 0;
    bool neg = false;
    if (len > lim->max_event_bytes ||
        !get_key(&p, end,
                 "\x87\xa1"
                 "v",
                 3) ||
        !get_count(&p, end, 1, &v) || v > UINT32_MAX || !ab_version_supported((uint32_t)v) ||
        !get_key(&p, end,
                 "\xa6"
                 "thread",
                 7) ||
        !get_str(&p, end, &ev->thread) ||
        ab_id_check(ev->thread.ptr, ev->thread.len, lim->max_id_bytes, "thread", NULL) != AB_OK ||
        !get_key(&p, end, "\xa3run", 4) || !get_str(&p, end, &ev->run) ||
        ab_id_check(ev->run.ptr, ev->run.len, lim->max_id_bytes, "run", NULL) != AB_OK ||
        !get_key(&p, end, "\xa3seq", 4) || !get_count(&p, end, 1, &ev->seq) ||
        !get_key(&p, end,
                 "\xa5"
                 "epoch",
                 6) ||
        !get_count(&p, end, 1, &ev->epoch) || !get_key(&p, end, "\xa2ts", 3) ||
        !get_int(&p, end, &neg, &ts) || (!neg && ts > (uint64_t)INT64_MAX) ||
        !get_key(&p, end,
                 "\xa5"
                 "event",
                 6) ||
        p >= end || !((*p >= 0x80 && *p <= 0x8f) || *p == 0xde || *p == 0xdf))
        return false;
    ev->v = (uint32_t)v;
    ev->ts = (int64_t)ts;
    ev->body = NULL;
    *body_off = (size_t)(p - buf);
    return true;
}

ab_status_t ab_event_decode_head(ab_doc_t *doc, const uint8_t *buf, size_t len,
                                 const ab_limits_t *limits, ab_event_t *out, ab_error_t *err)
{
    ab_limits_t lim = limits ? *limits : ab_limits_default();
    ab_event_t ev;
    memset(&ev, 0, sizeof(ev));
    size_t off = 0;
    if (buf != NULL && out != NULL && head_fast(buf, len, &lim, &ev, &off)) {
        *out = ev;
        return AB_OK;
    }
    ab_status_t rc = ab_event_decode(doc, buf, len, &lim, &ev, err);
    if (rc == AB_OK) {
        ev.body = NULL;
        *out = ev;
    }
    return rc;
}

/* ---- topics ------------------------------------------------------------- */

static ab_status_t topic_id(ab_str_t id, const char *field, ab_error_t *err)
{
    ab_error_t tmp = AB_ERROR_INIT;
    if (id.ptr && ab_id_check(id.ptr, id.len, 0, field, &tmp) == AB_OK)
        return AB_OK;
    return ab_error_set(err, AB_INVALID_ARGUMENT, field, "%s",
                        id.ptr ? tmp.message : "topic id is missing");
}

/* "ev" NUL thread NUL [run NUL] */
static ab_status_t topic(ab_buf_t *out, ab_str_t thread, const ab_str_t *run, ab_error_t *err)
{
    static const char nul = '\0';
    ab_status_t rc = topic_id(thread, "thread", err);
    if (rc == AB_OK && run)
        rc = topic_id(*run, "run", err);
    if (rc != AB_OK)
        return rc;
    size_t len0 = out->len;
    rc = ab_buf_append(out, AB_TOPIC_EVENTS, AB_TOPIC_EVENTS_LEN);
    if (rc == AB_OK)
        rc = ab_buf_append(out, thread.ptr, thread.len);
    if (rc == AB_OK)
        rc = ab_buf_append(out, &nul, 1);
    if (rc == AB_OK && run)
        rc = ab_buf_append(out, run->ptr, run->len);
    if (rc == AB_OK && run)
        rc = ab_buf_append(out, &nul, 1);
    if (rc != AB_OK) {
        out->len = len0;
        return ab_error_set(err, AB_NOMEM, "", "out of memory building a topic");
    }
    return AB_OK;
}

ab_status_t ab_topic_event(ab_buf_t *out, ab_str_t thread, ab_str_t run, ab_error_t *err)
{
    return topic(out, thread, &run, err);
}

ab_status_t ab_topic_thread_prefix(ab_buf_t *out, ab_str_t thread, ab_error_t *err)
{
    return topic(out, thread, NULL, err);
}

ab_status_t ab_topic_notice(ab_buf_t *out, ab_str_t thread, ab_error_t *err)
{
    size_t len0 = out->len;
    ab_status_t rc = topic(out, thread, NULL, err);
    if (rc == AB_OK && ab_buf_append(out, "", 1) != AB_OK) {
        out->len = len0;
        rc = ab_error_set(err, AB_NOMEM, "", "out of memory building a topic");
    }
    return rc;
}

/* ---- names -------------------------------------------------------------- */

const char *ab_run_status_name(ab_run_status_t s)
{
    static const char *const names[] = {"unknown", "active", "finished", "errored"};
    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

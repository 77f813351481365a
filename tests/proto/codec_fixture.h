/*
 * codec_fixture.h - the fixture and small helpers shared by the codec tests
 * (test_codec.c: envelopes, stamps, topics, golden bytes; test_codec_cmd.c:
 * command headers; test_codec_coord.c: workers and actions). Everything is static inline so each
 * test file uses only what it needs.
 */
#ifndef AB_CODEC_FIXTURE_H
#define AB_CODEC_FIXTURE_H

#include "agentbus/codec.h"
#include "testutil.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S(lit) ((ab_str_t){lit, sizeof(lit) - 1})

#define assert_str(s, lit)                                                                         \
    do {                                                                                           \
        assert_non_null((s).ptr);                                                                  \
        assert_int_equal((s).len, strlen(lit));                                                    \
        assert_memory_equal((s).ptr, lit, strlen(lit));                                            \
    } while (0)

typedef struct fx {
    ab_doc_t *doc;
    ab_buf_t in;  /* packed test input */
    ab_buf_t out; /* encoder output */
    tu_ctx_t tu;  /* JSON trees for bodies */
} fx_t;

static inline int codec_setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(ab_doc_new(&f->doc), AB_OK);
    tu_ctx_init(&f->tu);
    *state = f;
    return 0;
}

static inline int codec_teardown(void **state)
{
    fx_t *f = *state;
    ab_doc_destroy(&f->doc);
    ab_buf_free(&f->in);
    ab_buf_free(&f->out);
    tu_ctx_free(&f->tu);
    free(f);
    return 0;
}

/* JSON text -> msgpack bytes in f->in (keys keep their order). */
static inline void pack_json(fx_t *f, const char *json)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_reset(&f->in);
    if (ab_json_to_msgpack(json, strlen(json), 200, 8u << 20, AB_INVALID_ENVELOPE, &f->in, &err) !=
        AB_OK)
        fail_msg("bad test JSON: %s: %s", err.message, json);
}

static inline void pk_begin(fx_t *f, msgpack_packer *pk)
{
    ab_buf_reset(&f->in);
    msgpack_packer_init(pk, &f->in, ab_buf_msgpack_write);
}

static inline void pk_str(msgpack_packer *pk, const char *s)
{
    assert_int_equal(msgpack_pack_str_with_body(pk, s, strlen(s)), 0);
}

static inline ab_msg_t mk(ab_op_t op, uint64_t cid)
{
    ab_msg_t m;
    memset(&m, 0, sizeof(m));
    m.op = op;
    m.v = 1;
    m.cid = cid;
    return m;
}

/* ---- headers (test_codec_cmd.c, test_codec_coord.c) ----------------------- */

/* Decode @p json (or f->in when NULL) expecting @p code naming @p field; out stays untouched. */
static inline ab_error_t msg_err_lim(fx_t *f, const char *json, const ab_limits_t *lim,
                                     ab_status_t code, const char *field)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_msg_t m;
    memset(&m, 0x5a, sizeof(m));
    ab_msg_t before = m;
    if (json)
        pack_json(f, json);
    assert_int_equal(ab_msg_decode(f->doc, f->in.data, f->in.len, lim, &m, &err), code);
    tu_assert_error(&err, code, field);
    assert_memory_equal(&m, &before, sizeof(m)); /* out untouched on error */
    return err;
}

static inline ab_error_t msg_err(fx_t *f, const char *json, ab_status_t code, const char *field)
{
    return msg_err_lim(f, json, NULL, code, field);
}

static inline void msg_ok(fx_t *f, const char *json, ab_msg_t *m)
{
    ab_error_t err = AB_ERROR_INIT;
    pack_json(f, json);
    if (ab_msg_decode(f->doc, f->in.data, f->in.len, NULL, m, &err) != AB_OK)
        fail_msg("decode failed: %s (at %s): %s", err.message, err.field, json);
}

static inline void msg_rt(fx_t *f, const ab_msg_t *m, ab_msg_t *out)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_reset(&f->out);
    if (ab_msg_encode(m, &f->out, &err) != AB_OK)
        fail_msg("encode failed: %s (at %s)", err.message, err.field);
    if (ab_msg_decode(f->doc, f->out.data, f->out.len, NULL, out, &err) != AB_OK)
        fail_msg("decode failed: %s (at %s)", err.message, err.field);
    assert_int_equal(out->op, m->op);
    assert_int_equal(out->v, m->v);
    assert_int_equal(out->cid, m->cid);
    assert_true(ab_msg_equal(m, out));
}

#endif

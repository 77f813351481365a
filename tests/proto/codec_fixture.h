/*
 * codec_fixture.h - the fixture and small helpers shared by the codec tests
 * (test_codec.c: envelopes, stamps, topics, golden bytes; test_codec_cmd.c:
 * command headers). Everything is static inline so each test file uses only
 * what it needs.
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

#endif

/*
 * test_codec.c - the wire codec's event envelope, broker stamp and topics,
 * and the two golden encodings printed in docs/PROTOCOL.md. Round trips
 * compare every field; each rejection is checked for its code and the field
 * it names. Command headers are in test_codec_cmd.c.
 */
#include "codec_fixture.h"

#include "agentbus/agui.h"

#include <msgpack.h>

static ab_error_t ev_err_lim(fx_t *f, const char *json, const ab_limits_t *lim, ab_status_t code,
                             const char *field)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_event_t ev;
    memset(&ev, 0x5a, sizeof(ev));
    ab_event_t before = ev;
    if (json)
        pack_json(f, json);
    assert_int_equal(ab_event_decode(f->doc, f->in.data, f->in.len, lim, &ev, &err), code);
    tu_assert_error(&err, code, field);
    assert_memory_equal(&ev, &before, sizeof(ev));
    return err;
}

static ab_error_t ev_err(fx_t *f, const char *json, ab_status_t code, const char *field)
{
    return ev_err_lim(f, json, NULL, code, field);
}

/* Encode m, decode it back into out, and check the generic equality. */

static const char *const EV_OK = "{\"v\":1,\"thread\":\"t1\",\"run\":\"r1\",\"seq\":1,\"epoch\":1,"
                                 "\"ts\":1700000000000,\"event\":{\"type\":\"RUN_STARTED\","
                                 "\"threadId\":\"t1\",\"runId\":\"r1\","
                                 "\"protocolVersion\":\"1.0\"}}";

/* ---- golden bytes (printed in docs/PROTOCOL.md) -------------------------- */

static const char GOLDEN_EVENT[] =
    "87a17601a6746872656164a27431a372756ea27231a373657101a565706f636801a27473cf0000018bcfe56800"
    "a56576656e7484a474797065ab52554e5f53544152544544a87468726561644964a27431a572756e4964a27231"
    "af70726f746f636f6c56657273696f6ea3312e30";
static const char GOLDEN_HELLO[] =
    "84a26f70a568656c6c6fa363696401a876657273696f6e739101a6636c69656e74a464656d6f";
/* replay_chunk of one record: the header, then the records frame (stamp
 * {pos 42, time 1700000000000123} and GOLDEN_EVENT, each after its u32 BE length) */
static const char GOLDEN_CHUNK_HDR[] =
    "85a26f70ac7265706c61795f6368756e6ba17601a363696407a5636f756e7401a56279746573cc8a";
static const char GOLDEN_CHUNK_REC[] = "0000001482a3706f732aa474696d65cf00060a24181e407b0000006e";
/* packed publish of GOLDEN_EVENT: the header; the frame is its u32 BE length, then it */
static const char GOLDEN_PACKED_HDR[] =
    "85a26f70a77075626c697368a17601a363696408a5636f756e7401a67061636b6564c3";

static void assert_hex(const ab_buf_t *b, const char *hex)
{
    char *got = malloc(b->len * 2 + 1);
    assert_non_null(got);
    for (size_t i = 0; i < b->len; i++)
        snprintf(got + 2 * i, 3, "%02x", b->data[i]);
    got[b->len * 2] = '\0';
    if (strcmp(got, hex) != 0)
        fail_msg("bytes differ\n got  %s\n want %s", got, hex);
    free(got);
}

static void test_golden_event(void **state)
{
    fx_t *f = *state;
    ab_event_t ev = {.v = 1,
                     .thread = S("t1"),
                     .run = S("r1"),
                     .seq = 1,
                     .epoch = 1,
                     .ts = 1700000000000,
                     .body = tu_json(&f->tu, "{\"type\":\"RUN_STARTED\",\"threadId\":\"t1\","
                                             "\"runId\":\"r1\",\"protocolVersion\":\"1.0\"}")};
    ab_error_t err = AB_ERROR_INIT;
    /* the example is an event the broker accepts: strict AG-UI (PROTOCOL.md 4) */
    ab_agui_info_t info;
    assert_int_equal(ab_agui_validate(ev.body, AB_AGUI_STRICT, NULL, NULL, &info, &err), AB_OK);
    assert_int_equal(ab_event_encode(&ev, &f->out, &err), AB_OK);
    assert_int_equal(f->out.len, 110);
    assert_hex(&f->out, GOLDEN_EVENT);
    pack_json(f, EV_OK); /* the same message written as JSON */
    assert_int_equal(f->in.len, f->out.len);
    assert_memory_equal(f->in.data, f->out.data, f->out.len);
}

static void test_golden_hello(void **state)
{
    fx_t *f = *state;
    static const uint32_t versions[] = {1};
    ab_msg_t m = mk(AB_OP_HELLO, 1);
    m.v = 0;
    m.u.hello.versions = versions;
    m.u.hello.nversions = 1;
    m.u.hello.client = S("demo");
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_msg_encode(&m, &f->out, &err), AB_OK);
    assert_hex(&f->out, GOLDEN_HELLO);
    ab_msg_t back;
    assert_int_equal(ab_msg_decode(f->doc, f->out.data, f->out.len, NULL, &back, &err), AB_OK);
    assert_int_equal(back.op, AB_OP_HELLO);
    assert_int_equal(back.v, 0);
    assert_int_equal(back.cid, 1);
    assert_int_equal(back.u.hello.nversions, 1);
    assert_int_equal(back.u.hello.versions[0], 1);
    assert_str(back.u.hello.client, "demo");
    assert_int_equal(back.u.hello.ncaps, 0);
}

static void put_be32(ab_buf_t *b, size_t n)
{
    uint8_t p[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    assert_int_equal(ab_buf_append(b, p, 4), AB_OK);
}

/* The one-record replay_chunk of docs/PROTOCOL.md 13.3, as the broker lays it out. */
static void test_golden_chunk(void **state)
{
    fx_t *f = *state;
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_t st = AB_BUF_INIT, frame = AB_BUF_INIT;
    ab_stamp_t stamp = {.pos = 42, .time_us = 1700000000000123};
    assert_int_equal(ab_stamp_encode(&stamp, &st, &err), AB_OK);
    put_be32(&frame, st.len);
    assert_int_equal(ab_buf_append(&frame, st.data, st.len), AB_OK);
    put_be32(&frame, (sizeof(GOLDEN_EVENT) - 1) / 2);
    assert_hex(&frame, GOLDEN_CHUNK_REC); /* the envelope follows, byte for byte */
    assert_int_equal(frame.len + 110, 138);
    ab_msg_t m = mk(AB_OP_REPLAY_CHUNK, 7);
    m.u.replay_chunk.count = 1;
    m.u.replay_chunk.bytes = 138;
    assert_int_equal(ab_msg_encode(&m, &f->out, &err), AB_OK);
    assert_hex(&f->out, GOLDEN_CHUNK_HDR);
    ab_buf_free(&st);
    ab_buf_free(&frame);
}

/* The packed publish of docs/PROTOCOL.md 13.4. */
static void test_golden_packed(void **state)
{
    fx_t *f = *state;
    ab_error_t err = AB_ERROR_INIT;
    ab_msg_t m = mk(AB_OP_PUBLISH, 8);
    m.u.publish.count = 1;
    m.u.publish.packed = true;
    assert_int_equal(ab_msg_encode(&m, &f->out, &err), AB_OK);
    assert_hex(&f->out, GOLDEN_PACKED_HDR);
    ab_buf_t frame = AB_BUF_INIT;
    uint8_t ev[110];
    memset(ev, 0x87, sizeof(ev));
    assert_int_equal(ab_packed_append(&frame, ev, sizeof(ev), &err), AB_OK);
    assert_int_equal(frame.len, 114);
    assert_memory_equal(frame.data, "\0\0\0\x6e", 4);
    ab_buf_free(&frame);
}

/* docs/PROTOCOL.md prints the golden encodings; keep the page honest. */
static void test_golden_in_doc(void **state)
{
    (void)state;
    char *doc = tu_read_file(AB_SOURCE_DIR "/docs/PROTOCOL.md", NULL);
    if (!strstr(doc, GOLDEN_EVENT))
        fail_msg("docs/PROTOCOL.md lacks the event envelope bytes %s", GOLDEN_EVENT);
    if (!strstr(doc, GOLDEN_HELLO))
        fail_msg("docs/PROTOCOL.md lacks the hello bytes %s", GOLDEN_HELLO);
    if (!strstr(doc, GOLDEN_CHUNK_HDR) || !strstr(doc, GOLDEN_CHUNK_REC))
        fail_msg("docs/PROTOCOL.md lacks the replay_chunk bytes %s / %s", GOLDEN_CHUNK_HDR,
                 GOLDEN_CHUNK_REC);
    if (!strstr(doc, GOLDEN_PACKED_HDR))
        fail_msg("docs/PROTOCOL.md lacks the packed publish bytes %s", GOLDEN_PACKED_HDR);
    free(doc);
}

/* ---- event envelope ------------------------------------------------------ */

static void test_event_roundtrip(void **state)
{
    fx_t *f = *state;
    ab_event_t ev = {.v = 1,
                     .thread = S("thread-\xc3\xa9"),
                     .run = S("run-7"),
                     .seq = 42,
                     .epoch = 3,
                     .ts = -5,
                     .body = tu_json(&f->tu, "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":"
                                             "\"m\",\"delta\":\"hi\",\"x\":[1.5,null,true,{}]}")};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_event_encode(&ev, &f->out, &err), AB_OK);
    ab_event_t back;
    assert_int_equal(ab_event_decode(f->doc, f->out.data, f->out.len, NULL, &back, &err), AB_OK);
    assert_int_equal(back.v, 1);
    assert_str(back.thread, "thread-\xc3\xa9");
    assert_str(back.run, "run-7");
    assert_int_equal(back.seq, 42);
    assert_int_equal(back.epoch, 3);
    assert_int_equal(back.ts, -5);
    assert_true(ab_val_equal(back.body, ev.body));
    assert_true(ab_event_equal(&ev, &back));
    back.seq = 43; /* the comparison can fail */
    assert_false(ab_event_equal(&ev, &back));
    /* keys in any order decode */
    pack_json(f, "{\"event\":{},\"ts\":0,\"epoch\":9,\"seq\":8,\"run\":\"r\",\"thread\":\"t\","
                 "\"v\":1}");
    assert_int_equal(ab_event_decode(f->doc, f->in.data, f->in.len, NULL, &back, &err), AB_OK);
    assert_int_equal(back.seq, 8);
    assert_int_equal(back.epoch, 9);
}

static void test_event_field_errors(void **state)
{
    fx_t *f = *state;
    ev_err(f, "{\"v\":1,\"thread\":\"t\",\"run\":\"r\",\"epoch\":1,\"ts\":0,\"event\":{}}",
           AB_INVALID_ENVELOPE, "seq");
    ev_err(f,
           "{\"v\":1,\"thread\":\"t\",\"run\":\"r\",\"seq\":\"1\",\"epoch\":1,\"ts\":0,"
           "\"event\":{}}",
           AB_INVALID_ENVELOPE, "seq");
    ev_err(f,
           "{\"v\":1,\"thread\":\"t\",\"run\":\"r\",\"seq\":-1,\"epoch\":1,\"ts\":0,\"event\":{}}",
           AB_INVALID_ENVELOPE, "seq");
    ev_err(f,
           "{\"v\":1,\"thread\":\"t\",\"run\":\"r\",\"seq\":1,\"epoch\":1,\"ts\":0.5,"
           "\"event\":{}}",
           AB_INVALID_ENVELOPE, "ts");
    ev_err(f,
           "{\"v\":1,\"thread\":\"t\",\"run\":\"r\",\"seq\":1,\"epoch\":1,\"ts\":0,"
           "\"event\":[]}",
           AB_INVALID_ENVELOPE, "event");
    ev_err(f,
           "{\"v\":1,\"thread\":\"t\",\"run\":\"r\",\"seq\":1,\"epoch\":1,\"ts\":0,\"event\":{},"
           "\"extra\":1}",
           AB_INVALID_ENVELOPE, "extra");
    ev_err(f,
           "{\"v\":1,\"thread\":\"t\",\"run\":\"r\",\"seq\":0,\"epoch\":1,\"ts\":0,\"event\":{}}",
           AB_INVALID_ENVELOPE, "seq");
    ev_err(f,
           "{\"v\":1,\"thread\":\"t\",\"run\":\"r\",\"seq\":1,\"epoch\":0,\"ts\":0,\"event\":{}}",
           AB_INVALID_ENVELOPE, "epoch");
    ev_err(f, "[1]", AB_INVALID_ENVELOPE, "");
    ev_err(f, "{\"thread\":\"t\",\"run\":\"r\",\"seq\":1,\"epoch\":1,\"ts\":0,\"event\":{}}",
           AB_INVALID_ENVELOPE, "v");
}

static void test_event_version(void **state)
{
    fx_t *f = *state;
    /* v is checked first: the unknown field of a future version does not matter */
    ab_error_t e = ev_err(f,
                          "{\"v\":2,\"thread\":\"t\",\"run\":\"r\",\"seq\":1,\"epoch\":1,"
                          "\"ts\":0,\"event\":{},\"future\":true}",
                          AB_INCOMPATIBLE_VERSION, "v");
    assert_false(e.retryable);
    assert_string_equal(ab_error_detail(&e, "ours")->s, "1");
    assert_string_equal(ab_error_detail(&e, "theirs")->s, "2");
    ev_err(f,
           "{\"v\":0,\"thread\":\"t\",\"run\":\"r\",\"seq\":1,\"epoch\":1,\"ts\":0,\"event\":{}}",
           AB_INCOMPATIBLE_VERSION, "v");
    ev_err(f,
           "{\"v\":\"1\",\"thread\":\"t\",\"run\":\"r\",\"seq\":1,\"epoch\":1,\"ts\":0,"
           "\"event\":{}}",
           AB_INVALID_ENVELOPE, "v");
}

static void test_event_ids(void **state)
{
    fx_t *f = *state;
    char json[1024];
    const char *fmt =
        "{\"v\":1,\"thread\":\"%s\",\"run\":\"r\",\"seq\":1,\"epoch\":1,\"ts\":0,\"event\":{}}";
    snprintf(json, sizeof(json), fmt, "");
    ev_err(f, json, AB_INVALID_ENVELOPE, "thread");
    snprintf(json, sizeof(json), fmt, "a\\u0001b");
    ev_err(f, json, AB_INVALID_ENVELOPE, "thread");
    snprintf(json, sizeof(json), fmt, "a\\u0085b"); /* C1 control */
    ev_err(f, json, AB_INVALID_ENVELOPE, "thread");
    char id[258];
    memset(id, 'x', 257);
    id[257] = '\0';
    snprintf(json, sizeof(json), fmt, id);
    ev_err(f, json, AB_INVALID_ENVELOPE, "thread");
    id[256] = '\0'; /* 256 bytes is fine */
    snprintf(json, sizeof(json), fmt, id);
    ab_event_t ev;
    ab_error_t err = AB_ERROR_INIT;
    pack_json(f, json);
    assert_int_equal(ab_event_decode(f->doc, f->in.data, f->in.len, NULL, &ev, &err), AB_OK);
    assert_int_equal(ev.thread.len, 256);
    /* a smaller max_id_bytes applies */
    ab_limits_t lim = ab_limits_default();
    lim.max_id_bytes = 8;
    ev_err_lim(f, json, &lim, AB_INVALID_ENVELOPE, "thread");
    /* invalid UTF-8: the strict reader rejects it at the id's path */
    msgpack_packer pk;
    pk_begin(f, &pk);
    msgpack_pack_map(&pk, 7);
    pk_str(&pk, "v");
    msgpack_pack_uint64(&pk, 1);
    pk_str(&pk, "thread");
    msgpack_pack_str_with_body(&pk, "a\xff", 2);
    pk_str(&pk, "run");
    pk_str(&pk, "r");
    pk_str(&pk, "seq");
    msgpack_pack_uint64(&pk, 1);
    pk_str(&pk, "epoch");
    msgpack_pack_uint64(&pk, 1);
    pk_str(&pk, "ts");
    msgpack_pack_int64(&pk, 0);
    pk_str(&pk, "event");
    msgpack_pack_map(&pk, 0);
    ev_err(f, NULL, AB_INVALID_ENVELOPE, "thread");
    /* a number where a string id belongs */
    ev_err(f, "{\"v\":1,\"thread\":7,\"run\":\"r\",\"seq\":1,\"epoch\":1,\"ts\":0,\"event\":{}}",
           AB_INVALID_ENVELOPE, "thread");
}

/* An envelope whose body holds one raw msgpack value under "x". */
static void pack_event_with(fx_t *f, msgpack_packer *pk)
{
    pk_begin(f, pk);
    msgpack_pack_map(pk, 7);
    pk_str(pk, "v");
    msgpack_pack_uint64(pk, 1);
    pk_str(pk, "thread");
    pk_str(pk, "t");
    pk_str(pk, "run");
    pk_str(pk, "r");
    pk_str(pk, "seq");
    msgpack_pack_uint64(pk, 1);
    pk_str(pk, "epoch");
    msgpack_pack_uint64(pk, 1);
    pk_str(pk, "ts");
    msgpack_pack_int64(pk, 0);
    pk_str(pk, "event");
    msgpack_pack_map(pk, 1);
    pk_str(pk, "x");
}

static void test_event_not_json_safe(void **state)
{
    fx_t *f = *state;
    msgpack_packer pk;
    pack_event_with(f, &pk);
    msgpack_pack_bin_with_body(&pk, "ab", 2);
    ev_err(f, NULL, AB_INVALID_ENVELOPE, "event/x");
    pack_event_with(f, &pk);
    msgpack_pack_ext_with_body(&pk, "abcd", 4, 1);
    ev_err(f, NULL, AB_INVALID_ENVELOPE, "event/x");
    pack_event_with(f, &pk); /* non-string key inside the body */
    msgpack_pack_map(&pk, 1);
    msgpack_pack_uint64(&pk, 1);
    msgpack_pack_uint64(&pk, 2);
    ev_err(f, NULL, AB_INVALID_ENVELOPE, "event/x");
    pack_event_with(f, &pk); /* uint 64 above INT64_MAX in the body: JSON-safe */
    msgpack_pack_uint64(&pk, UINT64_MAX);
    ab_event_t ev;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_event_decode(f->doc, f->in.data, f->in.len, NULL, &ev, &err), AB_OK);
    assert_int_equal(ab_val_get(ev.body, "x")->type, AB_VAL_UINT);
    assert_true(ab_val_get(ev.body, "x")->u.u == UINT64_MAX);
    /* seq above INT64_MAX: JSON-safe, but out of the field's range */
    pk_begin(f, &pk);
    msgpack_pack_map(&pk, 1);
    pk_str(&pk, "seq");
    msgpack_pack_uint64(&pk, (uint64_t)INT64_MAX + 1);
    ev_err(f, NULL, AB_INVALID_ENVELOPE, "seq");
}

/* A body may hold any msgpack integer; the envelope's own fields keep their ranges. */
static void test_event_uint64(void **state)
{
    fx_t *f = *state;
    ab_event_t ev;
    ab_error_t err = AB_ERROR_INIT;
    pack_json(f, "{\"v\":1,\"thread\":\"t\",\"run\":\"r\",\"seq\":1,\"epoch\":1,\"ts\":0,"
                 "\"event\":{\"x\":18446744073709551615,\"y\":-9223372036854775808}}");
    assert_int_equal(ab_event_decode(f->doc, f->in.data, f->in.len, NULL, &ev, &err), AB_OK);
    const ab_val_t *x = ab_val_get(ev.body, "x"), *y = ab_val_get(ev.body, "y");
    assert_true(x && x->type == AB_VAL_UINT && x->u.u == UINT64_MAX);
    assert_true(y && y->type == AB_VAL_INT && y->u.i == INT64_MIN);
    ab_error_t e = ev_err(f,
                          "{\"v\":1,\"thread\":\"t\",\"run\":\"r\",\"seq\":18446744073709551615,"
                          "\"epoch\":1,\"ts\":0,\"event\":{}}",
                          AB_INVALID_ENVELOPE, "seq");
    assert_non_null(strstr(e.message, "at most 2^63-1"));
    ev_err(f,
           "{\"v\":1,\"thread\":\"t\",\"run\":\"r\",\"seq\":1,\"epoch\":9223372036854775808,"
           "\"ts\":0,\"event\":{}}",
           AB_INVALID_ENVELOPE, "epoch");
    ev_err(f,
           "{\"v\":1,\"thread\":\"t\",\"run\":\"r\",\"seq\":1,\"epoch\":1,"
           "\"ts\":9223372036854775808,\"event\":{}}",
           AB_INVALID_ENVELOPE, "ts");
    ev_err(f,
           "{\"v\":18446744073709551615,\"thread\":\"t\",\"run\":\"r\",\"seq\":1,\"epoch\":1,"
           "\"ts\":0,\"event\":{}}",
           AB_INVALID_ENVELOPE, "v");
    /* an integral float is not an integer to the envelope: the wire keeps the type */
    ev_err(f,
           "{\"v\":1,\"thread\":\"t\",\"run\":\"r\",\"seq\":1.0,\"epoch\":1,\"ts\":0,"
           "\"event\":{}}",
           AB_INVALID_ENVELOPE, "seq");
}

static void test_event_bytes(void **state)
{
    fx_t *f = *state;
    pack_json(f, EV_OK);
    assert_int_equal(ab_buf_append(&f->in, "\x01", 1), AB_OK); /* trailing byte */
    ev_err(f, NULL, AB_INVALID_ENVELOPE, "");
    pack_json(f, EV_OK);
    f->in.len--; /* truncated */
    ev_err(f, NULL, AB_INVALID_ENVELOPE, NULL);
    f->in.len = 0;
    ev_err(f, NULL, AB_INVALID_ENVELOPE, "");
    /* duplicate key */
    msgpack_packer pk;
    pk_begin(f, &pk);
    msgpack_pack_map(&pk, 2);
    pk_str(&pk, "seq");
    msgpack_pack_uint64(&pk, 1);
    pk_str(&pk, "seq");
    msgpack_pack_uint64(&pk, 2);
    ev_err(f, NULL, AB_INVALID_ENVELOPE, "seq");
    /* non-string key at the root */
    pk_begin(f, &pk);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_uint64(&pk, 1);
    msgpack_pack_uint64(&pk, 1);
    ev_err(f, NULL, AB_INVALID_ENVELOPE, "");
}

static void test_event_limits(void **state)
{
    fx_t *f = *state;
    /* over max_event_bytes (default 1 MiB) */
    size_t n = (1u << 20) + 16;
    char *json = malloc(n + 200);
    assert_non_null(json);
    int h = sprintf(json, "{\"v\":1,\"thread\":\"t\",\"run\":\"r\",\"seq\":1,\"epoch\":1,\"ts\":0,"
                          "\"event\":{\"s\":\"");
    memset(json + h, 'a', n);
    strcpy(json + h + n, "\"}}");
    ab_error_t e = ev_err(f, json, AB_TOO_LARGE, "");
    assert_int_equal(ab_error_detail(&e, "limit")->i, 1 << 20);
    free(json);
    ab_limits_t lim = ab_limits_default();
    lim.max_event_bytes = 60;
    ev_err_lim(f, EV_OK, &lim, AB_TOO_LARGE, "");
    /* depth: the envelope is depth 1, its values depth 2, ... scalars count */
    char deep[1024];
    for (int depth = 64; depth <= 65; depth++) {
        int k = sprintf(deep, "{\"v\":1,\"thread\":\"t\",\"run\":\"r\",\"seq\":1,\"epoch\":1,"
                              "\"ts\":0,\"event\":");
        for (int i = 2; i < depth; i++) /* body maps at depths 2 .. depth-1 */
            k += sprintf(deep + k, "{\"a\":");
        k += sprintf(deep + k, "1"); /* the deepest value, at depth */
        for (int i = 2; i < depth; i++)
            k += sprintf(deep + k, "}");
        sprintf(deep + k, "}");
        if (depth == 64) {
            ab_event_t ev;
            ab_error_t err = AB_ERROR_INIT;
            pack_json(f, deep);
            assert_int_equal(ab_event_decode(f->doc, f->in.data, f->in.len, NULL, &ev, &err),
                             AB_OK);
        } else {
            ev_err(f, deep, AB_TOO_LARGE, NULL);
        }
    }
}

static void test_event_encode_errors(void **state)
{
    fx_t *f = *state;
    ab_event_t ev = {.v = 1,
                     .thread = S("t"),
                     .run = S("r"),
                     .seq = 0,
                     .epoch = 1,
                     .body = tu_json(&f->tu, "{}")};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_buf_append(&f->out, "xy", 2), AB_OK);
    assert_int_equal(ab_event_encode(&ev, &f->out, &err), AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "seq");
    assert_int_equal(f->out.len, 2); /* left as it was */
    const struct {
        ab_event_t ev;
        const char *field;
    } bad[] = {
        {{.v = 2, .thread = S("t"), .run = S("r"), .seq = 1, .epoch = 1, .body = ev.body}, "v"},
        {{.v = 1, .thread = S(""), .run = S("r"), .seq = 1, .epoch = 1, .body = ev.body}, "thread"},
        {{.v = 1, .thread = S("t"), .run = {NULL, 0}, .seq = 1, .epoch = 1, .body = ev.body},
         "run"},
        {{.v = 1, .thread = S("t"), .run = S("r\n"), .seq = 1, .epoch = 1, .body = ev.body}, "run"},
        {{.v = 1, .thread = S("t"), .run = S("r"), .seq = 1, .epoch = 0, .body = ev.body}, "epoch"},
        {{.v = 1, .thread = S("t"), .run = S("r"), .seq = UINT64_MAX, .epoch = 1, .body = ev.body},
         "seq"},
        {{.v = 1, .thread = S("t"), .run = S("r"), .seq = 1, .epoch = 1, .body = NULL}, "event"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ab_error_clear(&err);
        assert_int_equal(ab_event_encode(&bad[i].ev, &f->out, &err), AB_INVALID_ARGUMENT);
        tu_assert_error(&err, AB_INVALID_ARGUMENT, bad[i].field);
        assert_int_equal(f->out.len, 2);
    }
}

/* ---- stamp and topics ---------------------------------------------------- */

static void test_stamp(void **state)
{
    fx_t *f = *state;
    ab_stamp_t st = {.pos = 123456789012ull, .time_us = -1}, back = {.pos = 0};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_stamp_encode(&st, &f->out, &err), AB_OK);
    assert_true(f->out.len <= AB_STAMP_MAX_BYTES);
    assert_int_equal(ab_stamp_decode(f->doc, f->out.data, f->out.len, &back, &err), AB_OK);
    assert_int_equal(back.pos, st.pos);
    assert_int_equal(back.time_us, st.time_us);
    assert_int_equal(back.author, AB_AUTHOR_PRODUCER);
    /* a broker-authored event's stamp says so, and only "broker" is a value of `by` */
    st.author = AB_AUTHOR_BROKER;
    ab_buf_reset(&f->out);
    assert_int_equal(ab_stamp_encode(&st, &f->out, &err), AB_OK);
    assert_true(f->out.len <= AB_STAMP_MAX_BYTES);
    assert_int_equal(ab_stamp_decode(f->doc, f->out.data, f->out.len, &back, &err), AB_OK);
    assert_int_equal(back.author, AB_AUTHOR_BROKER);
    st.author = AB_AUTHOR_PRODUCER;
    pack_json(f, "{\"pos\":1,\"time\":1,\"by\":\"producer\"}");
    assert_int_equal(ab_stamp_decode(f->doc, f->in.data, f->in.len, &back, &err),
                     AB_INVALID_ENVELOPE);
    tu_assert_error(&err, AB_INVALID_ENVELOPE, "by");
    ab_error_clear(&err);
    const struct {
        const char *json;
        ab_status_t code;
        const char *field;
    } bad[] = {
        {"{\"pos\":0,\"time\":1}", AB_INVALID_ENVELOPE, "pos"},
        {"{\"pos\":1}", AB_INVALID_ENVELOPE, "time"},
        {"{\"pos\":1,\"time\":1,\"x\":1}", AB_INVALID_ENVELOPE, "x"},
        {"{\"pos\":1,\"time\":\"now\"}", AB_INVALID_ENVELOPE, "time"},
        {"{\"pos\":1,\"time\":1,\"pad\":"
         "\"0123456789012345678901234567890123456789012345678901234\"}",
         AB_TOO_LARGE, ""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ab_error_clear(&err);
        pack_json(f, bad[i].json);
        assert_int_equal(ab_stamp_decode(f->doc, f->in.data, f->in.len, &back, &err), bad[i].code);
        tu_assert_error(&err, bad[i].code, bad[i].field);
    }
    st.pos = 0;
    assert_int_equal(ab_stamp_encode(&st, &f->out, &err), AB_INVALID_ARGUMENT);
    /* the fast path round-trips every integer width at its boundaries */
    const uint64_t ps[] = {1,     127,   128,           255,           256,
                           65535, 65536, 4294967295ull, 4294967296ull, (uint64_t)INT64_MAX};
    const int64_t ts[] = {0,     -1,           -32,       -33,
                          -128,  -129,         -32769,    (int64_t)INT32_MIN - 1,
                          65536, 4294967296ll, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
        for (size_t j = 0; j < sizeof(ts) / sizeof(ts[0]); j++) {
            ab_stamp_t in = {.pos = ps[i], .time_us = ts[j]}, out = {.pos = 0};
            ab_buf_reset(&f->out);
            assert_int_equal(ab_stamp_encode(&in, &f->out, &err), AB_OK);
            assert_true(f->out.len <= AB_STAMP_MAX_BYTES);
            assert_int_equal(ab_stamp_decode(f->doc, f->out.data, f->out.len, &out, &err), AB_OK);
            assert_int_equal(out.pos, in.pos);
            assert_true(out.time_us == in.time_us);
        }
    }
}

/* tprev (PROTOCOL.md section 5): optional, 0 is a value, below pos; absent on older stamps */
static void test_stamp_tprev(void **state)
{
    fx_t *f = *state;
    ab_error_t err = AB_ERROR_INIT;
    const uint64_t tps[] = {0, 1, 127, 128, 65536, 4294967296ull};
    for (size_t i = 0; i < sizeof(tps) / sizeof(tps[0]); i++) {
        for (int by = 0; by < 2; by++) {
            ab_stamp_t in = {.pos = tps[i] + 1, .time_us = -5, .has_tprev = true, .tprev = tps[i]};
            in.author = by ? AB_AUTHOR_BROKER : AB_AUTHOR_PRODUCER;
            ab_stamp_t out = {.pos = 0};
            ab_buf_reset(&f->out);
            assert_int_equal(ab_stamp_encode(&in, &f->out, &err), AB_OK);
            assert_true(f->out.len <= AB_STAMP_MAX_BYTES);
            assert_int_equal(ab_stamp_decode(f->doc, f->out.data, f->out.len, &out, &err), AB_OK);
            assert_true(out.has_tprev);
            assert_int_equal(out.tprev, tps[i]);
            assert_int_equal(out.pos, in.pos);
            assert_true(out.time_us == -5);
            assert_int_equal(out.author, in.author);
        }
    }
    /* the largest stamp this broker writes fits AB_STAMP_MAX_BYTES */
    ab_stamp_t big = {.pos = (uint64_t)INT64_MAX,
                      .time_us = INT64_MIN,
                      .has_tprev = true,
                      .tprev = (uint64_t)INT64_MAX - 1,
                      .author = AB_AUTHOR_BROKER};
    ab_buf_reset(&f->out);
    assert_int_equal(ab_stamp_encode(&big, &f->out, &err), AB_OK);
    assert_true(f->out.len <= AB_STAMP_MAX_BYTES);
    /* absent: an older broker's stamp, a replay record */
    ab_stamp_t back = {.has_tprev = true, .tprev = 9};
    pack_json(f, "{\"time\":3,\"pos\":4}");
    assert_int_equal(ab_stamp_decode(f->doc, f->in.data, f->in.len, &back, &err), AB_OK);
    assert_false(back.has_tprev);
    /* any key order and encoding goes the generic way to the same answer */
    pack_json(f, "{\"tprev\":0,\"time\":3,\"pos\":4}");
    assert_int_equal(ab_stamp_decode(f->doc, f->in.data, f->in.len, &back, &err), AB_OK);
    assert_true(back.has_tprev);
    assert_int_equal(back.tprev, 0);
    const char *bad[] = {"{\"pos\":4,\"time\":3,\"tprev\":4}", "{\"pos\":4,\"time\":3,\"tprev\":9}",
                         "{\"pos\":4,\"time\":3,\"tprev\":-1}",
                         "{\"pos\":4,\"time\":3,\"tprev\":\"2\"}",
                         "{\"pos\":4,\"time\":3,\"tprev\":1.5}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ab_error_clear(&err);
        pack_json(f, bad[i]);
        assert_int_equal(ab_stamp_decode(f->doc, f->in.data, f->in.len, &back, &err),
                         AB_INVALID_ENVELOPE);
        tu_assert_error(&err, AB_INVALID_ENVELOPE, "tprev");
    }
    ab_error_clear(&err);
    ab_stamp_t same = {.pos = 4, .time_us = 1, .has_tprev = true, .tprev = 4};
    assert_int_equal(ab_stamp_encode(&same, &f->out, &err), AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "tprev");
}

static void test_topics(void **state)
{
    fx_t *f = *state;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_topic_event(&f->out, S("a"), S("r1"), &err), AB_OK);
    assert_int_equal(f->out.len, 8);
    assert_memory_equal(f->out.data, "ev\0a\0r1\0", 8);
    ab_buf_t p = AB_BUF_INIT;
    assert_int_equal(ab_topic_thread_prefix(&p, S("a"), &err), AB_OK);
    assert_int_equal(p.len, 5);
    assert_memory_equal(f->out.data, p.data, p.len); /* the prefix matches its thread */
    ab_buf_reset(&f->out);
    assert_int_equal(ab_topic_event(&f->out, S("ab"), S("r1"), &err), AB_OK);
    assert_true(memcmp(f->out.data, p.data, p.len) != 0); /* ... and not thread "ab" */
    assert_memory_equal(f->out.data, AB_TOPIC_EVENTS, AB_TOPIC_EVENTS_LEN);
    assert_memory_equal("hb", AB_TOPIC_HEARTBEAT, AB_TOPIC_HEARTBEAT_LEN);
    size_t len = f->out.len;
    assert_int_equal(ab_topic_event(&f->out, S("a\0b"), S("r"), &err), AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "thread");
    ab_error_clear(&err);
    assert_int_equal(ab_topic_event(&f->out, S("a"), S(""), &err), AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "run");
    assert_int_equal(f->out.len, len);
    ab_buf_free(&p);
}

/* ---- command round trips ------------------------------------------------- */

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, codec_setup, codec_teardown)
    const struct CMUnitTest tests[] = {
        T(test_golden_event),        T(test_golden_hello),
        T(test_golden_chunk),        T(test_golden_packed),
        T(test_golden_in_doc),       T(test_event_roundtrip),
        T(test_event_field_errors),  T(test_event_version),
        T(test_event_ids),           T(test_event_not_json_safe),
        T(test_event_bytes),         T(test_event_limits),
        T(test_event_encode_errors), T(test_stamp),
        T(test_stamp_tprev),         T(test_topics),
        T(test_event_uint64),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}

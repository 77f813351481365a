/*
 * test_codec_cmd.c - the wire codec's command, reply, error and heartbeat
 * headers: a round trip of every message kind comparing every field, and
 * every rejection path with its code and the field it names, when decoding
 * and when encoding.
 */
#include "codec_fixture.h"

#include <msgpack.h>

static void test_op_names(void **state)
{
    (void)state;
    for (int i = AB_OP_NONE_ + 1; i < AB_OP_COUNT_; i++) {
        const char *n = ab_op_name((ab_op_t)i);
        ab_op_t back;
        assert_int_equal(ab_op_from_name(n, strlen(n), &back), AB_OK);
        assert_int_equal(back, i);
    }
    ab_op_t op;
    assert_int_equal(ab_op_from_name("nope", 4, &op), AB_NOT_FOUND);
    assert_string_equal(ab_op_name(AB_OP_REPLAY_CHUNK), "replay_chunk");
    assert_true(ab_op_is_request(AB_OP_PUBLISH));
    assert_false(ab_op_is_request(AB_OP_PUBLISHED));
    assert_false(ab_op_is_request(AB_OP_HEARTBEAT));
    assert_string_equal(ab_run_status_name(AB_RUN_STATUS_ERRORED), "errored");
}

static void test_rt_hello_welcome(void **state)
{
    fx_t *f = *state;
    static const uint32_t versions[] = {1, 3};
    static const ab_cap_t caps[] = {{"publish", 7, AB_CAP_AVAILABLE},
                                    {"replay", 6, AB_CAP_DEGRADED}};
    ab_msg_t m = mk(AB_OP_HELLO, 0), b;
    m.v = 0;
    m.u.hello = (ab_hello_t){versions, 2, S("cli 0.1"), caps, 2};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.hello.nversions, 2);
    assert_int_equal(b.u.hello.versions[1], 3);
    assert_str(b.u.hello.client, "cli 0.1");
    assert_int_equal(b.u.hello.ncaps, 2);
    assert_int_equal(b.u.hello.caps[1].state, AB_CAP_DEGRADED);
    assert_int_equal(ab_caps_lookup(b.u.hello.caps, b.u.hello.ncaps, "publish"), AB_CAP_AVAILABLE);

    m = mk(AB_OP_WELCOME, 9);
    m.u.welcome =
        (ab_welcome_t){S("inst-1"), S("tcp://127.0.0.1:5556"), ab_limits_default(), caps, 1, NULL};
    m.u.welcome.limits.max_batch = 77;
    msg_rt(f, &m, &b);
    assert_null(b.u.welcome.access); /* omitted: a broker without keys */
    /* with keys: what the connection's key may do, any value, carried as it is */
    ab_kv_t who[1] = {
        {.key = "name", .klen = 4, .val = {.type = AB_VAL_STR, .len = 5, .u.s = "alice"}}};
    ab_val_t access = {.type = AB_VAL_MAP, .len = 1, .u.pairs = who};
    m.u.welcome.access = &access;
    msg_rt(f, &m, &b);
    assert_non_null(b.u.welcome.access);
    assert_true(ab_val_equal(b.u.welcome.access, &access));
    assert_str(b.u.welcome.instance, "inst-1");
    assert_str(b.u.welcome.event_endpoint, "tcp://127.0.0.1:5556");
    assert_memory_equal(&b.u.welcome.limits, &m.u.welcome.limits, sizeof(ab_limits_t));
    assert_int_equal(b.u.welcome.ncaps, 1);
    assert_str(((ab_str_t){b.u.welcome.caps[0].name, b.u.welcome.caps[0].name_len}), "publish");
    b.u.welcome.limits.max_depth++;
    assert_false(ab_msg_equal(&m, &b));
}

static void test_rt_claim_publish(void **state)
{
    fx_t *f = *state;
    ab_msg_t m = mk(AB_OP_CLAIM, 5), b;
    m.u.claim = (ab_claim_t){S("t"), S("r")};
    msg_rt(f, &m, &b);
    assert_str(b.u.claim.thread, "t");
    assert_str(b.u.claim.run, "r");

    m = mk(AB_OP_CLAIMED, 5);
    m.u.claimed = (ab_claimed_t){S("t"), S("r"), 2, 0, AB_RUN_STATUS_UNKNOWN};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.claimed.epoch, 2);
    assert_int_equal(b.u.claimed.last_seq, 0);
    assert_int_equal(b.u.claimed.status, AB_RUN_STATUS_UNKNOWN);

    m = mk(AB_OP_PUBLISH, 6);
    m.u.publish.count = 1024;
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.publish.count, 1024);
    assert_false(b.u.publish.packed);
    m.u.publish.packed = true;
    msg_rt(f, &m, &b);
    assert_true(b.u.publish.packed);
}

/* The packed publish frame: u32 BE length | envelope, cut back exactly; a torn one stops. */
static void test_packed_frame(void **state)
{
    (void)state;
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_packed_append(&b, "abc", 3, &err), AB_OK);
    assert_int_equal(ab_packed_append(&b, "", 0, &err), AB_OK);
    assert_int_equal(ab_packed_append(&b, "hello", 5, &err), AB_OK);
    assert_int_equal(b.len, 4 + 3 + 4 + 4 + 5);
    assert_memory_equal(b.data, "\0\0\0\3abc\0\0\0\0\0\0\0\5hello", b.len);
    const uint8_t *p = b.data, *end = b.data + b.len, *ev;
    size_t len;
    assert_true(ab_packed_next(&p, end, &ev, &len) && len == 3 && memcmp(ev, "abc", 3) == 0);
    assert_true(ab_packed_next(&p, end, &ev, &len) && len == 0);
    const uint8_t *before = p;
    assert_false(ab_packed_next(&p, end - 1, &ev, &len)); /* torn: nothing changes */
    assert_ptr_equal(p, before);
    assert_true(ab_packed_next(&p, end, &ev, &len) && len == 5 && memcmp(ev, "hello", 5) == 0);
    assert_ptr_equal(p, end);
    assert_false(ab_packed_next(&p, end, &ev, &len));
    ab_buf_free(&b);
}

static void test_rt_published(void **state)
{
    fx_t *f = *state;
    ab_error_t rej = AB_ERROR_INIT;
    ab_error_set(&rej, AB_GAP, "seq", "seq 9 is beyond the next expected seq 3");
    ab_error_detail_int(&rej, "expected_seq", 3);
    ab_error_detail_str(&rej, "run", "r");
    rej.cid = 11; /* the header's cid */
    ab_result_t res[] = {
        {1, AB_RESULT_ACCEPTED, 100, NULL},
        {2, AB_RESULT_DUPLICATE, 90, NULL},
        {9, AB_RESULT_REJECTED, 0, &rej},
    };
    ab_msg_t m = mk(AB_OP_PUBLISHED, 11), b;
    m.u.published = (ab_published_t){res, 3};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.published.nresults, 3);
    assert_int_equal(b.u.published.results[0].pos, 100);
    assert_int_equal(b.u.published.results[1].status, AB_RESULT_DUPLICATE);
    const ab_result_t *r = &b.u.published.results[2];
    assert_int_equal(r->seq, 9);
    assert_int_equal(r->status, AB_RESULT_REJECTED);
    assert_int_equal(r->pos, 0);
    assert_non_null(r->error);
    assert_int_equal(r->error->code, AB_GAP);
    assert_int_equal(r->error->cid, 11);
    assert_string_equal(r->error->field, "seq");
    assert_string_equal(r->error->message, rej.message);
    assert_int_equal(r->error->ndetails, 2);
    assert_int_equal(ab_error_detail(r->error, "expected_seq")->i, 3);
    assert_string_equal(r->error->details[1].s, "r");
    assert_null(b.u.published.results[0].error);
}

static void test_rt_heads(void **state)
{
    fx_t *f = *state;
    ab_run_ref_t runs[] = {{S("t"), S("r1")}, {S("t"), S("r2")}};
    ab_msg_t m = mk(AB_OP_HEADS, 3), b;
    m.u.heads.runs = runs;
    m.u.heads.nruns = 2;
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.heads.nruns, 2);
    assert_str(b.u.heads.runs[1].run, "r2");
    assert_null(b.u.heads.thread.ptr);

    m = mk(AB_OP_HEADS, 4);
    m.u.heads.thread = S("t");
    msg_rt(f, &m, &b);
    assert_str(b.u.heads.thread, "t");
    assert_int_equal(b.u.heads.nruns, 0);

    ab_head_t heads[] = {
        {S("t"), S("r1"), 7, 2, AB_RUN_STATUS_FINISHED, AB_OUTCOME_INTERRUPT, 1234, false},
        {S("t"), S("r2"), 5, 3, AB_RUN_STATUS_ACTIVE, AB_OUTCOME_NONE, 9, true},
    };
    m = mk(AB_OP_HEADS_REPLY, 4);
    m.u.heads_reply = (ab_heads_reply_t){5000, heads, 2};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.heads_reply.head_pos, 5000);
    assert_int_equal(b.u.heads_reply.nheads, 2);
    const ab_head_t *h = &b.u.heads_reply.heads[0];
    assert_str(h->run, "r1");
    assert_int_equal(h->last_seq, 7);
    assert_int_equal(h->epoch, 2);
    assert_int_equal(h->status, AB_RUN_STATUS_FINISHED);
    assert_int_equal(h->outcome, AB_OUTCOME_INTERRUPT);
    assert_int_equal(h->last_pos, 1234);
    assert_int_equal(b.u.heads_reply.heads[1].outcome, AB_OUTCOME_NONE);
    assert_false(h->orphaned); /* omitted on the wire when false */
    assert_true(b.u.heads_reply.heads[1].orphaned);

    m.u.heads_reply.nheads = 0; /* an empty list is fine */
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.heads_reply.nheads, 0);
}

static void test_rt_replay(void **state)
{
    fx_t *f = *state;
    ab_msg_t m = mk(AB_OP_REPLAY, 20), b;
    m.u.replay = (ab_replay_t){.scope = AB_REPLAY_RUN,
                               .window = 4,
                               .chunk_events = 100,
                               .thread = S("t"),
                               .run = S("r"),
                               .after_seq = 17};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.replay.scope, AB_REPLAY_RUN);
    assert_int_equal(b.u.replay.window, 4);
    assert_int_equal(b.u.replay.chunk_events, 100);
    assert_str(b.u.replay.run, "r");
    assert_int_equal(b.u.replay.after_seq, 17);

    ab_cursor_t cur[] = {{S("r1"), 5}, {S("r2"), 0}};
    m.u.replay = (ab_replay_t){.scope = AB_REPLAY_THREAD,
                               .window = 1,
                               .chunk_events = 256,
                               .thread = S("t"),
                               .cursors = cur,
                               .ncursors = 2};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.replay.ncursors, 2);
    assert_str(b.u.replay.cursors[0].run, "r1");
    assert_int_equal(b.u.replay.cursors[0].after_seq, 5);
    assert_null(b.u.replay.run.ptr);
    assert_int_equal(b.u.replay.after_pos, 0); /* absent */
    assert_int_equal(ab_replay_read(&b.u.replay, 10).after_pos, 0);

    /* thread scope with a position lower bound (optional after_pos), no cursors */
    m.u.replay = (ab_replay_t){.scope = AB_REPLAY_THREAD,
                               .window = 2,
                               .chunk_events = 8,
                               .thread = S("t"),
                               .after_pos = 123456789012ull};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.replay.scope, AB_REPLAY_THREAD);
    assert_int_equal(b.u.replay.ncursors, 0);
    assert_int_equal(b.u.replay.after_pos, 123456789012ull);
    ab_read_t rd = ab_replay_read(&b.u.replay, 10);
    assert_int_equal(rd.scope, AB_REPLAY_THREAD);
    assert_int_equal(rd.after_pos, 123456789012ull);
    assert_str(rd.thread, "t");

    m.u.replay =
        (ab_replay_t){.scope = AB_REPLAY_ALL, .window = 64, .chunk_events = 1024, .after_pos = 99};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.replay.after_pos, 99);
    assert_null(b.u.replay.thread.ptr);

    /* chunk_events omitted: the decoded request holds the default */
    m.u.replay.chunk_events = 0;
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_reset(&f->out);
    assert_int_equal(ab_msg_encode(&m, &f->out, &err), AB_OK);
    assert_int_equal(ab_msg_decode(f->doc, f->out.data, f->out.len, NULL, &b, &err), AB_OK);
    assert_int_equal(b.u.replay.chunk_events, AB_CHUNK_EVENTS_DEFAULT);
}

static void test_rt_streaming(void **state)
{
    fx_t *f = *state;
    ab_msg_t m = mk(AB_OP_CREDIT, 20), b;
    m.u.credit.chunks = 3;
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.credit.chunks, 3);

    m = mk(AB_OP_REPLAY_CHUNK, 20);
    m.u.replay_chunk.count = 256;
    m.u.replay_chunk.bytes = 256u * 120;
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.replay_chunk.count, 256);
    assert_int_equal(b.u.replay_chunk.bytes, 256u * 120);
    m.u.replay_chunk.bytes = 1024u * (1048576u + 72); /* the limit with the default limits */
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.replay_chunk.bytes, 1024u * (1048576u + 72));

    ab_head_t heads[] = {{S("t"), S("r"), 3, 1, AB_RUN_STATUS_ERRORED, AB_OUTCOME_NONE, 8, false}};
    m = mk(AB_OP_REPLAY_END, 20);
    m.u.replay_end = (ab_replay_end_t){8, 3, heads, 1};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.replay_end.head_pos, 8);
    assert_int_equal(b.u.replay_end.events, 3);
    assert_int_equal(b.u.replay_end.heads[0].status, AB_RUN_STATUS_ERRORED);

    m = mk(AB_OP_CANCEL, 20);
    msg_rt(f, &m, &b);
    m = mk(AB_OP_PING, 0);
    msg_rt(f, &m, &b);
    assert_int_equal(b.cid, 0);
}

static void test_rt_misc(void **state)
{
    fx_t *f = *state;
    ab_msg_t m = mk(AB_OP_SNAPSHOT, 2), b;
    m.u.snapshot.thread = S("t");
    msg_rt(f, &m, &b);
    assert_str(b.u.snapshot.thread, "t");

    m = mk(AB_OP_SNAPSHOT_REPLY, 2);
    m.u.snapshot_reply.thread = S("t");
    m.u.snapshot_reply.snapshot = tu_json(&f->tu, "{\"messages\":[],\"state\":{\"k\":1}}");
    msg_rt(f, &m, &b);
    assert_true(ab_val_equal(b.u.snapshot_reply.snapshot, m.u.snapshot_reply.snapshot));

    m = mk(AB_OP_PONG, 3);
    m.u.pong = (ab_pong_t){S("inst"), 77};
    msg_rt(f, &m, &b);
    assert_str(b.u.pong.instance, "inst");
    assert_int_equal(b.u.pong.head_pos, 77);

    m = mk(AB_OP_HEARTBEAT, 0);
    m.u.heartbeat = (ab_heartbeat_t){S("inst"), 78, 1700000000000000};
    msg_rt(f, &m, &b);
    assert_int_equal(b.u.heartbeat.head_pos, 78);
    assert_int_equal(b.u.heartbeat.time_us, 1700000000000000);
}

static void test_rt_error(void **state)
{
    fx_t *f = *state;
    ab_error_t e = AB_ERROR_INIT;
    ab_error_set(&e, AB_OVERLOADED, "", "queue full \xe2\x9c\x93");
    e.cid = 77;
    ab_error_detail_int(&e, "retry_after_ms", -250);
    ab_error_detail_str(&e, "queue", "ingest");
    for (uint32_t v = 0; v <= 1; v++) {
        assert_int_equal(ab_error_encode_reply(&e, v, &f->out), AB_OK);
        ab_msg_t b;
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab_msg_decode(f->doc, f->out.data, f->out.len, NULL, &b, &err), AB_OK);
        ab_buf_reset(&f->out);
        assert_int_equal(b.op, AB_OP_ERROR);
        assert_int_equal(b.v, v);
        assert_int_equal(b.cid, 77);
        const ab_error_t *d = b.u.error.error;
        assert_int_equal(d->code, AB_OVERLOADED);
        assert_true(d->retryable);
        assert_int_equal(d->cid, 77);
        assert_string_equal(d->message, e.message);
        assert_string_equal(d->field, "");
        assert_int_equal(d->ndetails, 2);
        assert_string_equal(d->details[0].key, "retry_after_ms");
        assert_int_equal(d->details[0].kind, AB_DETAIL_INT);
        assert_int_equal(d->details[0].i, -250);
        assert_string_equal(d->details[1].key, "queue");
        assert_int_equal(d->details[1].kind, AB_DETAIL_STR);
        assert_string_equal(d->details[1].s, "ingest");
        assert_memory_equal(d, &e, sizeof(e)); /* unchanged, byte for byte */
    }
    e.retryable = false; /* retryability is carried as set, not by code */
    ab_msg_t m = mk(AB_OP_ERROR, 77), b;
    m.u.error.error = &e;
    msg_rt(f, &m, &b);
    assert_false(b.u.error.error->retryable);
}

static void test_error_encode_best_effort(void **state)
{
    fx_t *f = *state;
    ab_error_t e = AB_ERROR_INIT;
    ab_error_set(&e, AB_INVALID_ARGUMENT, "x", "abc\xe2\x9c"); /* split character */
    ab_error_detail_int(&e, "k", 1);
    ab_error_detail_int(&e, "k", 2); /* repeated key: left out */
    ab_error_detail_int(&e, "", 3);  /* empty key: left out */
    assert_int_equal(ab_error_encode_reply(&e, 1, &f->out), AB_OK);
    ab_msg_t b;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_msg_decode(f->doc, f->out.data, f->out.len, NULL, &b, &err), AB_OK);
    assert_string_equal(b.u.error.error->message, "abc");
    assert_int_equal(b.u.error.error->ndetails, 1);
    assert_int_equal(b.u.error.error->details[0].i, 1);
    ab_error_t ok = AB_ERROR_INIT;
    ab_buf_reset(&f->out);
    assert_int_equal(ab_error_encode_reply(&ok, 1, &f->out), AB_INVALID_ARGUMENT);
    assert_int_equal(f->out.len, 0);
    assert_int_equal(ab_error_encode_reply(&e, 2, &f->out), AB_INVALID_ARGUMENT);
}

/* ---- command rejections -------------------------------------------------- */

static void test_cmd_header_errors(void **state)
{
    fx_t *f = *state;
    msg_err(f, "{\"op\":\"claim\",\"cid\":1,\"thread\":\"t\",\"run\":\"r\"}", AB_INVALID_ENVELOPE,
            "v");
    msg_err(f, "{\"op\":\"claim\",\"v\":1,\"cid\":1,\"thread\":\"t\"}", AB_INVALID_ENVELOPE, "run");
    msg_err(f, "{\"op\":\"claim\",\"v\":1,\"thread\":\"t\",\"run\":\"r\"}", AB_INVALID_ENVELOPE,
            "cid");
    msg_err(f, "{\"op\":\"claim\",\"v\":1,\"cid\":1,\"thread\":\"t\",\"run\":\"r\",\"x\":0}",
            AB_INVALID_ENVELOPE, "x");
    msg_err(f, "{\"op\":\"claim\",\"v\":1,\"cid\":\"1\",\"thread\":\"t\",\"run\":\"r\"}",
            AB_INVALID_ENVELOPE, "cid");
    msg_err(f, "{\"op\":\"claim\",\"v\":1,\"cid\":1,\"thread\":\"t\",\"run\":[]}",
            AB_INVALID_ENVELOPE, "run");
    ab_error_t e =
        msg_err(f, "{\"op\":\"claim\",\"v\":7,\"cid\":42,\"new\":1}", AB_INCOMPATIBLE_VERSION, "v");
    assert_false(e.retryable);
    assert_int_equal(e.cid, 42); /* echoed although decoding failed */
    e = msg_err(f, "{\"op\":\"frobnicate\",\"v\":1,\"cid\":43}", AB_UNSUPPORTED, "op");
    assert_int_equal(e.cid, 43);
    msg_err(f, "{\"v\":1,\"cid\":1}", AB_INVALID_ENVELOPE, "op");
    msg_err(f, "{\"op\":1,\"v\":1,\"cid\":1}", AB_INVALID_ENVELOPE, "op");
    msg_err(f, "\"ping\"", AB_INVALID_ENVELOPE, "");
    msg_err(f,
            "{\"op\":\"heartbeat\",\"v\":1,\"cid\":1,\"instance\":\"i\",\"head_pos\":0,"
            "\"time\":0}",
            AB_INVALID_ENVELOPE, "cid");
    msg_err(f, "{\"op\":\"pong\",\"v\":1,\"cid\":1,\"instance\":\"\",\"head_pos\":0}",
            AB_INVALID_ENVELOPE, "instance");
    /* v may be absent only in hello and error */
    ab_msg_t m;
    msg_ok(f,
           "{\"op\":\"error\",\"cid\":0,\"error\":{\"code\":\"invalid_envelope\","
           "\"message\":\"bad hello\",\"retryable\":false}}",
           &m);
    assert_int_equal(m.v, 0);
    msg_ok(f, "{\"op\":\"hello\",\"v\":1,\"cid\":0,\"versions\":[1]}", &m);
    assert_int_equal(m.v, 1);
}

static void test_cmd_bytes(void **state)
{
    fx_t *f = *state;
    const char *ping = "{\"op\":\"ping\",\"v\":1,\"cid\":3}";
    pack_json(f, ping);
    assert_int_equal(ab_buf_append(&f->in, "\xc0", 1), AB_OK);
    msg_err(f, NULL, AB_INVALID_ENVELOPE, "");
    pack_json(f, ping);
    f->in.len -= 1;
    msg_err(f, NULL, AB_INVALID_ENVELOPE, NULL);
    msgpack_packer pk;
    pk_begin(f, &pk);
    msgpack_pack_map(&pk, 3);
    pk_str(&pk, "op");
    pk_str(&pk, "ping");
    pk_str(&pk, "op");
    pk_str(&pk, "ping");
    pk_str(&pk, "v");
    msgpack_pack_uint64(&pk, 1);
    msg_err(f, NULL, AB_INVALID_ENVELOPE, "op");
    /* request headers are bounded by max_header_bytes, replies are not */
    ab_limits_t lim = ab_limits_default();
    lim.max_header_bytes = 40;
    msg_err_lim(f,
                "{\"op\":\"claim\",\"v\":1,\"cid\":1,\"thread\":\"0123456789\",\"run\":"
                "\"0123456789\"}",
                &lim, AB_TOO_LARGE, "");
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    pack_json(f, "{\"op\":\"claimed\",\"v\":1,\"cid\":1,\"thread\":\"0123456789\",\"run\":"
                 "\"0123456789\",\"epoch\":1,\"last_seq\":0,\"status\":\"active\"}");
    assert_int_equal(ab_msg_decode(f->doc, f->in.data, f->in.len, &lim, &m, &err), AB_OK);
    assert_int_equal(m.u.claimed.status, AB_RUN_STATUS_ACTIVE);
}

static void test_cmd_counts(void **state)
{
    fx_t *f = *state;
    msg_err(f, "{\"op\":\"publish\",\"v\":1,\"cid\":1,\"count\":0}", AB_INVALID_ENVELOPE, "count");
    ab_error_t e =
        msg_err(f, "{\"op\":\"publish\",\"v\":1,\"cid\":1,\"count\":1025}", AB_TOO_LARGE, "count");
    assert_int_equal(ab_error_detail(&e, "limit")->i, 1024);
    ab_limits_t lim = ab_limits_default();
    lim.max_batch = 10;
    msg_err_lim(f, "{\"op\":\"publish\",\"v\":1,\"cid\":1,\"count\":11}", &lim, AB_TOO_LARGE,
                "count");
    /* replay_chunk.bytes: at most 1024 records of max_event_bytes + 72 */
    lim.max_event_bytes = 1000;
    e = msg_err_lim(f, "{\"op\":\"replay_chunk\",\"v\":1,\"cid\":1,\"count\":1,\"bytes\":1097729}",
                    &lim, AB_TOO_LARGE, "bytes");
    assert_int_equal(ab_error_detail(&e, "limit")->i, 1024 * (1000 + 72));
    pack_json(f, "{\"op\":\"replay_chunk\",\"v\":1,\"cid\":1,\"count\":1,\"bytes\":1097728}");
    ab_msg_t ok;
    ab_error_clear(&e);
    assert_int_equal(ab_msg_decode(f->doc, f->in.data, f->in.len, &lim, &ok, &e), AB_OK);
    assert_int_equal(ok.u.replay_chunk.bytes, 1097728);
    msg_err(f, "{\"op\":\"publish\",\"v\":1,\"cid\":1,\"count\":-1}", AB_INVALID_ENVELOPE, "count");
    msg_err(f, "{\"op\":\"hello\",\"cid\":1,\"versions\":[]}", AB_INVALID_ENVELOPE, "versions");
    msg_err(f, "{\"op\":\"hello\",\"cid\":1,\"versions\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}",
            AB_TOO_LARGE, "versions");
    msg_err(f, "{\"op\":\"hello\",\"cid\":1,\"versions\":[1,0]}", AB_INVALID_ENVELOPE,
            "versions/1");
    msg_err(f, "{\"op\":\"hello\",\"cid\":1,\"versions\":[4294967296]}", AB_TOO_LARGE,
            "versions/0");
    msg_err(f, "{\"op\":\"hello\",\"cid\":1,\"versions\":1}", AB_INVALID_ENVELOPE, "versions");
    msg_err(f, "{\"op\":\"hello\",\"cid\":1,\"versions\":[1],\"caps\":{\"publish\":\"unknown\"}}",
            AB_INVALID_ENVELOPE, "caps/publish");
    msg_err(f, "{\"op\":\"hello\",\"cid\":1,\"versions\":[1],\"caps\":{\"\":\"available\"}}",
            AB_INVALID_ENVELOPE, "caps/");
    char json[512];
    char name[258];
    memset(name, 'n', 257);
    name[257] = '\0';
    snprintf(json, sizeof(json), "{\"op\":\"hello\",\"cid\":1,\"versions\":[1],\"client\":\"%s\"}",
             name);
    msg_err(f, json, AB_TOO_LARGE, "client");
    msg_err(f, "{\"op\":\"credit\",\"v\":1,\"cid\":1,\"chunks\":0}", AB_INVALID_ENVELOPE, "chunks");
    msg_err(f, "{\"op\":\"replay_chunk\",\"v\":1,\"cid\":1,\"count\":1025,\"bytes\":9}",
            AB_TOO_LARGE, "count");
    msg_err(f, "{\"op\":\"replay_chunk\",\"v\":1,\"cid\":1,\"count\":1}", AB_INVALID_ENVELOPE,
            "bytes");
    msg_err(f, "{\"op\":\"replay_chunk\",\"v\":1,\"cid\":1,\"count\":1,\"bytes\":0}",
            AB_INVALID_ENVELOPE, "bytes");
    msg_err(f, "{\"op\":\"replay_chunk\",\"v\":1,\"cid\":1,\"count\":1,\"bytes\":1073815553}",
            AB_TOO_LARGE, "bytes"); /* the default limit + 1 */
    msg_err(f, "{\"op\":\"heads\",\"v\":1,\"cid\":1,\"runs\":[]}", AB_INVALID_ENVELOPE, "runs");
    msg_err(f, "{\"op\":\"heads\",\"v\":1,\"cid\":1,\"runs\":[{\"thread\":\"t\"}]}",
            AB_INVALID_ENVELOPE, "runs/0/run");
    msg_err(f,
            "{\"op\":\"heads\",\"v\":1,\"cid\":1,\"runs\":[{\"thread\":\"t\",\"run\":\"r\"}],"
            "\"thread\":\"t\"}",
            AB_INVALID_ENVELOPE, "thread");
    msg_err(f, "{\"op\":\"heads\",\"v\":1,\"cid\":1}", AB_INVALID_ENVELOPE, "runs");
    msg_err(f,
            "{\"op\":\"welcome\",\"v\":1,\"cid\":1,\"instance\":\"i\",\"event_endpoint\":\"e\","
            "\"limits\":{\"max_event_bytes\":1},\"caps\":{}}",
            AB_INVALID_ENVELOPE, "limits/max_depth");
}

static void test_cmd_replay_errors(void **state)
{
    fx_t *f = *state;
    const char *base = "{\"op\":\"replay\",\"v\":1,\"cid\":1,\"window\":2,";
    char json[512];
    snprintf(json, sizeof(json),
             "%s\"scope\":\"run\",\"thread\":\"t\",\"run\":\"r\","
             "\"after_seq\":0,\"after_pos\":5}",
             base);
    msg_err(f, json, AB_INVALID_ENVELOPE, "after_pos"); /* fields of two scopes */
    snprintf(json, sizeof(json), "%s\"scope\":\"all\",\"after_pos\":5,\"cursors\":{}}", base);
    msg_err(f, json, AB_INVALID_ENVELOPE, "cursors");
    snprintf(json, sizeof(json), "%s\"scope\":\"thread\",\"thread\":\"t\"}", base);
    msg_err(f, json, AB_INVALID_ENVELOPE, "cursors");
    /* thread scope's optional after_pos: a uint, never without the cursors */
    snprintf(json, sizeof(json),
             "%s\"scope\":\"thread\",\"thread\":\"t\",\"cursors\":{},\"after_pos\":-1}", base);
    msg_err(f, json, AB_INVALID_ENVELOPE, "after_pos");
    snprintf(json, sizeof(json),
             "%s\"scope\":\"thread\",\"thread\":\"t\",\"cursors\":{},\"after_pos\":\"5\"}", base);
    msg_err(f, json, AB_INVALID_ENVELOPE, "after_pos");
    snprintf(json, sizeof(json), "%s\"scope\":\"thread\",\"thread\":\"t\",\"after_pos\":5}", base);
    msg_err(f, json, AB_INVALID_ENVELOPE, "cursors");
    snprintf(json, sizeof(json), "%s\"after_pos\":5}", base);
    msg_err(f, json, AB_INVALID_ENVELOPE, "scope");
    snprintf(json, sizeof(json), "%s\"scope\":\"everything\",\"after_pos\":5}", base);
    msg_err(f, json, AB_INVALID_ENVELOPE, "scope");
    snprintf(json, sizeof(json),
             "%s\"scope\":\"thread\",\"thread\":\"t\",\"cursors\":{\"r\\n\":1}}", base);
    msg_err(f, json, AB_INVALID_ENVELOPE, "cursors/r\n");
    snprintf(json, sizeof(json), "%s\"scope\":\"thread\",\"thread\":\"t\",\"cursors\":{\"r\":-1}}",
             base);
    msg_err(f, json, AB_INVALID_ENVELOPE, "cursors/r");
    msg_err(f,
            "{\"op\":\"replay\",\"v\":1,\"cid\":1,\"scope\":\"all\",\"after_pos\":0,"
            "\"window\":65}",
            AB_TOO_LARGE, "window");
    msg_err(f,
            "{\"op\":\"replay\",\"v\":1,\"cid\":1,\"scope\":\"all\",\"after_pos\":0,"
            "\"window\":0}",
            AB_INVALID_ENVELOPE, "window");
    msg_err(f,
            "{\"op\":\"replay\",\"v\":1,\"cid\":1,\"scope\":\"all\",\"after_pos\":0,"
            "\"window\":1,\"chunk_events\":0}",
            AB_INVALID_ENVELOPE, "chunk_events");
    msg_err(f,
            "{\"op\":\"replay\",\"v\":1,\"cid\":1,\"scope\":\"all\",\"after_pos\":0,"
            "\"window\":1,\"chunk_events\":1025}",
            AB_TOO_LARGE, "chunk_events");
}

static void test_cmd_result_errors(void **state)
{
    fx_t *f = *state;
    const char *pre = "{\"op\":\"published\",\"v\":1,\"cid\":1,\"results\":[{\"seq\":1,\"status\":"
                      "\"accepted\",\"pos\":1},";
    char json[1024];
    snprintf(json, sizeof(json), "%s{\"seq\":2,\"status\":\"maybe\",\"pos\":2}]}", pre);
    msg_err(f, json, AB_INVALID_ENVELOPE, "results/1/status");
    snprintf(json, sizeof(json), "%s{\"seq\":2,\"status\":\"accepted\"}]}", pre);
    msg_err(f, json, AB_INVALID_ENVELOPE, "results/1/pos");
    snprintf(json, sizeof(json), "%s{\"seq\":2,\"status\":\"rejected\"}]}", pre);
    msg_err(f, json, AB_INVALID_ENVELOPE, "results/1/error");
    const char *err_ok = "{\"code\":\"gap\",\"message\":\"m\",\"retryable\":false}";
    snprintf(json, sizeof(json), "%s{\"seq\":2,\"status\":\"rejected\",\"pos\":3,\"error\":%s}]}",
             pre, err_ok);
    msg_err(f, json, AB_INVALID_ENVELOPE, "results/1/pos");
    snprintf(json, sizeof(json), "%s{\"seq\":2,\"status\":\"duplicate\",\"pos\":3,\"error\":%s}]}",
             pre, err_ok);
    msg_err(f, json, AB_INVALID_ENVELOPE, "results/1/error");
    snprintf(json, sizeof(json), "%s{\"seq\":2,\"status\":\"accepted\",\"pos\":0}]}", pre);
    msg_err(f, json, AB_INVALID_ENVELOPE, "results/1/pos");
    msg_err(f, "{\"op\":\"published\",\"v\":1,\"cid\":1,\"results\":[]}", AB_INVALID_ENVELOPE,
            "results");
}

static void test_cmd_error_map_errors(void **state)
{
    fx_t *f = *state;
    const char *pre = "{\"op\":\"error\",\"v\":1,\"cid\":5,\"error\":";
    const struct {
        const char *map;
        ab_status_t code;
        const char *field;
    } bad[] = {
        {"{\"code\":\"no_such_code\",\"message\":\"m\",\"retryable\":false}", AB_INVALID_ENVELOPE,
         "error/code"},
        {"{\"code\":\"ok\",\"message\":\"m\",\"retryable\":false}", AB_INVALID_ENVELOPE,
         "error/code"},
        {"{\"code\":\"gap\",\"retryable\":false}", AB_INVALID_ENVELOPE, "error/message"},
        {"{\"code\":\"gap\",\"message\":\"m\",\"retryable\":0}", AB_INVALID_ENVELOPE,
         "error/retryable"},
        {"{\"code\":\"gap\",\"message\":\"m\",\"retryable\":false,\"hint\":\"x\"}",
         AB_INVALID_ENVELOPE, "error/hint"},
        {"{\"code\":\"gap\",\"message\":\"a\\u0000b\",\"retryable\":false}", AB_INVALID_ENVELOPE,
         "error/message"},
        {"{\"code\":\"gap\",\"message\":\"m\",\"retryable\":false,\"details\":{\"k\":1.5}}",
         AB_INVALID_ENVELOPE, "error/details/k"},
        {"{\"code\":\"gap\",\"message\":\"m\",\"retryable\":false,\"details\":{\"a\":1,\"b\":1,"
         "\"c\":1,\"d\":1,\"e\":1,\"f\":1,\"g\":1}}",
         AB_TOO_LARGE, "error/details"},
        {"{\"code\":\"gap\",\"message\":\"m\",\"retryable\":false,\"details\":{\"0123456789012345"
         "6789012345678901\":1}}",
         AB_TOO_LARGE, "error/details/01234567890123456789012345678901"},
        {"{\"code\":\"gap\",\"message\":\"m\",\"retryable\":false,\"field\":5}",
         AB_INVALID_ENVELOPE, "error/field"},
        {"\"gap\"", AB_INVALID_ENVELOPE, "error"},
    };
    char json[1024];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(json, sizeof(json), "%s%s}", pre, bad[i].map);
        ab_error_t e = msg_err(f, json, bad[i].code, bad[i].field);
        assert_int_equal(e.cid, 5);
    }
    char msg[300];
    memset(msg, 'm', 256);
    msg[256] = '\0';
    snprintf(json, sizeof(json), "%s{\"code\":\"gap\",\"message\":\"%s\",\"retryable\":false}}",
             pre, msg);
    msg_err(f, json, AB_TOO_LARGE, "error/message");
}

static const ab_run_ref_t one_run = {{"t", 1}, {"r", 1}};

static void test_cmd_encode_errors(void **state)
{
    fx_t *f = *state;
    ab_error_t err = AB_ERROR_INIT;
    ab_msg_t m = mk(AB_OP_CLAIM, 1);
    m.u.claim = (ab_claim_t){S("t"), S("")};
    assert_int_equal(ab_msg_encode(&m, &f->out, &err), AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "run");
    assert_int_equal(f->out.len, 0);
    const struct {
        ab_msg_t m;
        const char *field;
    } bad[] = {
        {{.op = AB_OP_PING, .v = 0}, "v"},
        {{.op = AB_OP_PING, .v = 1, .cid = (uint64_t)INT64_MAX + 1}, "cid"},
        {{.op = (ab_op_t)99, .v = 1}, "op"},
        {{.op = AB_OP_PUBLISH, .v = 1}, "count"},
        {{.op = AB_OP_HEADS, .v = 1, .u.heads = {&one_run, 1, {"t", 1}}}, "thread"},
        {{.op = AB_OP_HEADS, .v = 1}, "runs"},
        {{.op = AB_OP_REPLAY, .v = 1, .u.replay = {.scope = 0, .window = 1}}, "scope"},
        {{.op = AB_OP_REPLAY, .v = 1, .u.replay = {.scope = AB_REPLAY_ALL}}, "window"},
        {{.op = AB_OP_REPLAY,
          .v = 1,
          .u.replay = {.scope = AB_REPLAY_ALL, .window = 1, .chunk_events = 1025}},
         "chunk_events"},
        {{.op = AB_OP_HELLO, .u.hello = {NULL, 0, {NULL, 0}, NULL, 0}}, "versions"},
        {{.op = AB_OP_ERROR, .v = 1}, "error"},
        {{.op = AB_OP_WELCOME, .v = 1, .u.welcome = {.instance = {"i", 1}}}, "event_endpoint"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ab_error_clear(&err);
        if (ab_msg_encode(&bad[i].m, &f->out, &err) != AB_INVALID_ARGUMENT)
            fail_msg("case %zu encoded", i);
        tu_assert_error(&err, AB_INVALID_ARGUMENT, bad[i].field);
        assert_int_equal(f->out.len, 0);
    }
    /* list-level rules */
    ab_result_t res = {1, AB_RESULT_REJECTED, 0, NULL};
    m = mk(AB_OP_PUBLISHED, 1);
    m.u.published = (ab_published_t){&res, 1};
    ab_error_clear(&err);
    assert_int_equal(ab_msg_encode(&m, &f->out, &err), AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "results/0/error");
    ab_cursor_t cur[] = {{S("r"), 1}, {S("r"), 2}};
    m = mk(AB_OP_REPLAY, 1);
    m.u.replay = (ab_replay_t){
        .scope = AB_REPLAY_THREAD, .window = 1, .thread = S("t"), .cursors = cur, .ncursors = 2};
    ab_error_clear(&err);
    assert_int_equal(ab_msg_encode(&m, &f->out, &err), AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "cursors");
    ab_head_t h = {S("t"), S("r"), 1, 1, AB_RUN_STATUS_ACTIVE, AB_OUTCOME_SUSPENDED, 1, false};
    m = mk(AB_OP_HEADS_REPLY, 1);
    m.u.heads_reply = (ab_heads_reply_t){1, &h, 1};
    ab_error_clear(&err);
    assert_int_equal(ab_msg_encode(&m, &f->out, &err), AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "heads/0/outcome");
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, codec_setup, codec_teardown)
    const struct CMUnitTest tests[] = {
        T(test_packed_frame),
        T(test_op_names),
        T(test_rt_hello_welcome),
        T(test_rt_claim_publish),
        T(test_rt_published),
        T(test_rt_heads),
        T(test_rt_replay),
        T(test_rt_streaming),
        T(test_rt_misc),
        T(test_rt_error),
        T(test_error_encode_best_effort),
        T(test_cmd_header_errors),
        T(test_cmd_bytes),
        T(test_cmd_counts),
        T(test_cmd_replay_errors),
        T(test_cmd_result_errors),
        T(test_cmd_error_map_errors),
        T(test_cmd_encode_errors),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}

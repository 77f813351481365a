/*
 * calls.c - the typed requests of a connection: publish, claim, heads,
 * ping, stats, threads, the credit-driven replay stream, and an envelope builder
 * (see agentbus/client.h).
 *
 * Invariants:
 *  1. A call returns AB_OK only when the reply has the op it expects; any
 *     other op is AB_INVALID_ENVELOPE naming "op".
 *  2. ab_conn_replay() keeps the broker's grant at the window: exactly one
 *     `credit` {chunks: 1} per chunk received, delivered or not, none after
 *     the stream ended. Chunks that arrive after the call gave up on the
 *     stream are credited by ab_conn_recv() as it discards them, so the
 *     broker's count of unread replay bytes (PROTOCOL.md 7.6.1) returns to 0.
 *  3. A replay that stops early (timeout, callback refusal, bad chunk)
 *     sends `cancel` for its cid; later messages of that cid are discarded
 *     by ab_conn_recv() cid matching. Unless it timed out, the connection
 *     is told (ab__conn_cancelled()), so that its destroy reads to the
 *     stream's end first (conn.c invariant 7).
 */
#include "agentbus/client.h"

#include "agentbus/json.h"
#include "conn_int.h"

#include <string.h>
#include <sys/time.h>

static ab_status_t expect_op(const ab_msg_t *m, ab_op_t op, ab_error_t *err)
{
    if (m->op == op)
        return AB_OK;
    return ab_error_set(err, AB_INVALID_ENVELOPE, "op", "expected %s, got %s", ab_op_name(op),
                        ab_op_name(m->op));
}

ab_status_t ab_conn_publish(ab_conn_t *c, const ab_buf_t *events, size_t n, ab_doc_t *doc,
                            const ab_result_t **results, int timeout_ms, ab_error_t *err)
{
    if (n == 0 || n > UINT32_MAX)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "count", "publish needs 1.. events");
    ab_msg_t req = {.op = AB_OP_PUBLISH};
    req.u.publish.count = (uint32_t)n;
    ab_msg_t m;
    ab_status_t st = ab_conn_request(c, &req, events, n, doc, &m, timeout_ms, err);
    if (st == AB_OK)
        st = expect_op(&m, AB_OP_PUBLISHED, err);
    if (st == AB_OK && m.u.published.nresults != n)
        st = ab_error_set(err, AB_INVALID_ENVELOPE, "results", "%zu results for %zu events",
                          m.u.published.nresults, n);
    if (st == AB_OK)
        *results = m.u.published.results;
    return st;
}

ab_status_t ab_conn_claim(ab_conn_t *c, const char *thread, const char *run, ab_doc_t *doc,
                          ab_claimed_t *out, int timeout_ms, ab_error_t *err)
{
    ab_msg_t req = {.op = AB_OP_CLAIM};
    req.u.claim.thread = (ab_str_t){thread, strlen(thread)};
    req.u.claim.run = (ab_str_t){run, strlen(run)};
    ab_msg_t m;
    ab_status_t st = ab_conn_request(c, &req, NULL, 0, doc, &m, timeout_ms, err);
    if (st == AB_OK)
        st = expect_op(&m, AB_OP_CLAIMED, err);
    if (st == AB_OK)
        *out = m.u.claimed;
    return st;
}

ab_status_t ab_conn_heads(ab_conn_t *c, const ab_heads_t *q, ab_doc_t *doc, ab_heads_reply_t *out,
                          int timeout_ms, ab_error_t *err)
{
    ab_msg_t req = {.op = AB_OP_HEADS};
    req.u.heads = *q;
    ab_msg_t m;
    ab_status_t st = ab_conn_request(c, &req, NULL, 0, doc, &m, timeout_ms, err);
    if (st == AB_OK)
        st = expect_op(&m, AB_OP_HEADS_REPLY, err);
    if (st == AB_OK)
        *out = m.u.heads_reply;
    return st;
}

ab_status_t ab_conn_ping(ab_conn_t *c, ab_doc_t *doc, ab_pong_t *out, int timeout_ms,
                         ab_error_t *err)
{
    ab_msg_t req = {.op = AB_OP_PING};
    ab_msg_t m;
    ab_status_t st = ab_conn_request(c, &req, NULL, 0, doc, &m, timeout_ms, err);
    if (st == AB_OK)
        st = expect_op(&m, AB_OP_PONG, err);
    if (st == AB_OK)
        *out = m.u.pong;
    return st;
}

ab_status_t ab_conn_stats(ab_conn_t *c, ab_doc_t *doc, ab_stats_reply_t *out, int timeout_ms,
                          ab_error_t *err)
{
    ab_msg_t req = {.op = AB_OP_STATS};
    ab_msg_t m;
    ab_status_t st = ab_conn_request(c, &req, NULL, 0, doc, &m, timeout_ms, err);
    if (st == AB_OK)
        st = expect_op(&m, AB_OP_STATS_REPLY, err);
    if (st == AB_OK)
        *out = m.u.stats_reply;
    return st;
}

ab_status_t ab_conn_threads(ab_conn_t *c, const ab_threads_req_t *q, ab_doc_t *doc,
                            ab_threads_reply_t *out, int timeout_ms, ab_error_t *err)
{
    ab_msg_t req = {.op = AB_OP_THREADS};
    if (q != NULL)
        req.u.threads = *q;
    if (req.u.threads.limit > AB_THREADS_LIMIT_MAX)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "limit", "limit %u is above %d",
                            req.u.threads.limit, AB_THREADS_LIMIT_MAX);
    ab_msg_t m;
    ab_status_t st = ab_conn_request(c, &req, NULL, 0, doc, &m, timeout_ms, err);
    if (st == AB_OK)
        st = expect_op(&m, AB_OP_THREADS_REPLY, err);
    if (st == AB_OK)
        *out = m.u.threads_reply;
    return st;
}

/* Send a header-only control message (credit/cancel) for stream @p cid. */
static ab_status_t send_control(ab_conn_t *c, ab_op_t op, uint64_t cid, ab_error_t *err)
{
    ab_msg_t m = {.op = op, .cid = cid};
    if (op == AB_OP_CREDIT)
        m.u.credit.chunks = 1;
    return ab_conn_send(c, &m, NULL, 0, NULL, err);
}

static ab_status_t bad_chunk(ab_error_t *err, const char *field, uint32_t rec, const char *why)
{
    ab_status_t st = ab_error_set(err, AB_INVALID_ENVELOPE, field,
                                  "malformed replay_chunk: record %u: %s", rec, why);
    ab_error_detail_int(err, "record", rec);
    return st;
}

/*
 * Check the records frame of a chunk (docs/PROTOCOL.md 7.6) before anything
 * is delivered, so a malformed chunk delivers nothing: exactly @p count
 * records, every length within the frame.
 */
static ab_status_t check_records(const uint8_t *p, const uint8_t *end, uint32_t count,
                                 ab_error_t *err)
{
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *s, *e;
        size_t slen, elen;
        if (!ab_record_next(&p, end, &s, &slen, &e, &elen))
            return bad_chunk(err, "bytes", i, "record length past the end of the frame");
    }
    if (p != end)
        return bad_chunk(err, "count", count, "bytes left after the last record");
    return AB_OK;
}

/* Deliver the (stamp, envelope) records of the chunk just received. */
static ab_status_t deliver_chunk(ab_conn_t *c, const ab_msg_t *m, ab_doc_t *sdoc, ab_conn_row_cb cb,
                                 void *ud, ab_error_t *err)
{
    const ab_replay_chunk_t *ch = &m->u.replay_chunk;
    size_t nf = ab_conn_nframes(c), flen = 0;
    if (nf != 1)
        return ab_error_set(err, AB_INVALID_ENVELOPE, "count",
                            "malformed replay_chunk: %zu frames after the header, expected 1", nf);
    const uint8_t *p = ab_conn_frame(c, 0, &flen);
    if (flen != ch->bytes)
        return ab_error_set(err, AB_INVALID_ENVELOPE, "bytes",
                            "malformed replay_chunk: bytes %llu, frame of %zu bytes",
                            (unsigned long long)ch->bytes, flen);
    const uint8_t *end = p + flen;
    ab_status_t st = check_records(p, end, ch->count, err);
    for (uint32_t i = 0; st == AB_OK && i < ch->count; i++) {
        const uint8_t *s = NULL, *e = NULL;
        size_t slen = 0, elen = 0;
        (void)ab_record_next(&p, end, &s, &slen, &e, &elen); /* checked above */
        ab_stamp_t stamp;
        st = ab_stamp_decode(sdoc, s, slen, &stamp, err);
        if (st != AB_OK)
            ab_error_detail_int(err, "record", i);
        else
            st = cb(ud, &stamp, e, elen, err);
    }
    return st;
}

/* Read stream @p cid to its end; *@p ended tells whether the broker ended it (replay_end,
 * or its error) rather than we or the connection. */
static ab_status_t replay_loop(ab_conn_t *c, uint64_t cid, ab_conn_row_cb cb, void *ud,
                               ab_doc_t *doc, ab_doc_t *sdoc, ab_replay_end_t *end, int timeout_ms,
                               bool *ended, ab_error_t *err)
{
    for (;;) {
        ab_msg_t m = {.op = AB_OP_NONE_};
        ab_status_t st = ab_conn_recv(c, cid, doc, &m, timeout_ms, err);
        *ended = m.op == AB_OP_ERROR || m.op == AB_OP_REPLAY_END;
        if (st != AB_OK)
            return st;
        if (m.op == AB_OP_REPLAY_END) {
            if (end)
                *end = m.u.replay_end;
            return AB_OK;
        }
        st = expect_op(&m, AB_OP_REPLAY_CHUNK, err);
        if (st != AB_OK)
            return st;
        st = deliver_chunk(c, &m, sdoc, cb, ud, err);
        /* Every chunk received is credited, delivered or not (invariant 2). */
        ab_error_t cerr = AB_ERROR_INIT;
        ab_status_t cst = send_control(c, AB_OP_CREDIT, cid, st == AB_OK ? err : &cerr);
        if (st == AB_OK)
            st = cst;
        if (st != AB_OK)
            return st;
    }
}

ab_status_t ab_conn_replay(ab_conn_t *c, const ab_msg_t *replay_req, ab_conn_row_cb cb, void *ud,
                           ab_doc_t *doc, ab_replay_end_t *end, int timeout_ms, ab_error_t *err)
{
    const ab_conn_opts_t *o = ab__conn_opts(c);
    ab_msg_t req = *replay_req;
    req.op = AB_OP_REPLAY;
    if (req.u.replay.window == 0)
        req.u.replay.window = o->replay_window;
    if (req.u.replay.chunk_events == 0)
        req.u.replay.chunk_events = o->replay_chunk_max;
    ab_doc_t *sdoc = NULL;
    if (ab_doc_new(&sdoc) != AB_OK)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    uint64_t cid = 0;
    bool ended = false;
    ab_status_t st = ab_conn_send(c, &req, NULL, 0, &cid, err);
    if (st == AB_OK) {
        st = replay_loop(c, cid, cb, ud, doc, sdoc, end, timeout_ms, &ended, err);
        if (st != AB_OK && !ended) { /* stopped by us, not by the broker: abort it (inv. 3) */
            ab_error_t cerr = AB_ERROR_INIT;
            /* destroy waits a little for its end (conn.c invariant 7); not after a
             * timeout: a broker that does not answer would only make it wait */
            if (send_control(c, AB_OP_CANCEL, cid, &cerr) == AB_OK && st != AB_TIMEOUT)
                ab__conn_cancelled(c, cid);
        }
    }
    ab_doc_destroy(&sdoc);
    return st;
}

ab_status_t ab_envelope_json(ab_buf_t *out, uint32_t v, const char *thread, const char *run,
                             uint64_t seq, uint64_t epoch, const char *json, ab_error_t *err)
{
    ab_buf_t body = AB_BUF_INIT;
    ab_doc_t *doc = NULL;
    ab_status_t st = ab_doc_new(&doc);
    if (st != AB_OK) {
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    }
    ab_error_t jerr = AB_ERROR_INIT;
    const ab_val_t *root = NULL;
    st = ab_json_to_msgpack(json, strlen(json), 64, 1u << 24, AB_INVALID_ARGUMENT, &body, &jerr);
    if (st == AB_OK)
        st =
            ab_doc_parse(doc, body.data, body.len, 1u << 24, 64, AB_INVALID_ARGUMENT, &root, &jerr);
    if (st != AB_OK) {
        st = ab_error_set(err, st == AB_NOMEM ? AB_NOMEM : AB_INVALID_ARGUMENT, "event",
                          "bad event JSON: %s", jerr.message);
        goto free_doc;
    }
    struct timeval tv;
    gettimeofday(&tv, NULL);
    ab_event_t ev = {.v = v, .seq = seq, .epoch = epoch, .body = root};
    ev.thread = (ab_str_t){thread, strlen(thread)};
    ev.run = (ab_str_t){run, strlen(run)};
    ev.ts = (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
    st = ab_event_encode(&ev, out, err);
free_doc:
    ab_doc_destroy(&doc);
    ab_buf_free(&body);
    return st;
}

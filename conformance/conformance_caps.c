/*
 * conformance_caps.c - conformance checks of heartbeats (PROTOCOL.md 6.3),
 * replay flow control and cancel (7.6.1, 7.6.2) and capabilities (10, 7.8):
 * one answered `unsupported` fails with a typed error when used, and durable
 * snapshots are exercised only where announced.
 *
 * Invariants:
 *  1. "Nothing more arrives" is watched for CONF_SILENCE_MS, never longer.
 *  2. Raw requests use the client library's send with cid matching, so the
 *     cid of every answer is checked.
 */
#include "ab_common.h"
#include "conformance.h"

#include "agentbus/json.h"
#include "agentbus/snapshot.h"

#include <stdio.h>
#include <string.h>

conf_result_t conf_check_heartbeat(conf_t *cf)
{
    conf_result_t r = conf_need(cf, AB_CAP_HEARTBEAT);
    if (r != CONF_PASS)
        return r;
    if (conf_sub_open(cf, "hb", 2) != 0) /* waits up to CONF_HEARTBEAT_MS for one */
        return CONF_FAIL;
    ab_buf_t t = {0}, hb = {0}, e = {0};
    long end = ab__mono_ms() + CONF_HEARTBEAT_MS;
    int got = 0, nf = 0;
    while (got == 0 && ab__mono_ms() < end)
        if ((got = conf_sub_recv(cf, (int)(end - ab__mono_ms()), &t, &hb, &e, &nf)) == 1 &&
            !conf_is_heartbeat(&t))
            got = 0;
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    r = CONF_FAIL;
    if (got != 1)
        conf_fail(cf, "only one heartbeat within %d ms", 2 * CONF_HEARTBEAT_MS);
    else if (t.len != 2 || memcmp(t.data, "hb", 2) != 0)
        conf_fail(cf, "heartbeat topic is not \"hb\"");
    else if (ab_msg_decode(cf->tmp, hb.data, hb.len, NULL, &m, &err) != AB_OK ||
             m.op != AB_OP_HEARTBEAT)
        conf_fail(cf, "heartbeat does not decode: %s (field %s)", err.message, err.field);
    else if (m.u.heartbeat.instance.len != strlen(ab_conn_instance(cf->c)) ||
             memcmp(m.u.heartbeat.instance.ptr, ab_conn_instance(cf->c),
                    m.u.heartbeat.instance.len) != 0)
        conf_fail(cf, "heartbeat instance differs from welcome's");
    else
        r = CONF_PASS;
    ab_buf_free(&t);
    ab_buf_free(&hb);
    ab_buf_free(&e);
    return r;
}

/* Replay with window 1 of one-event chunks: one chunk, then silence. */
static int one_chunk_then_silence(conf_t *cf, uint64_t cid)
{
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_recv(cf->c, cid, cf->doc, &m, cf->timeout_ms, &err);
    if (st != AB_OK || m.op != AB_OP_REPLAY_CHUNK || m.u.replay_chunk.count != 1)
        return conf_fail(cf, "first answer to replay (window 1): %s op %s", ab_status_name(st),
                         ab_op_name(m.op)),
               -1;
    st = ab_conn_recv(cf->c, cid, cf->doc, &m, CONF_SILENCE_MS, &err);
    if (st != AB_TIMEOUT)
        return conf_fail(cf, "without credit the broker sent more: %s op %s", ab_status_name(st),
                         ab_op_name(m.op)),
               -1;
    return 0;
}

conf_result_t conf_check_flow_control(conf_t *cf)
{
    conf_result_t r = conf_need(cf, AB_CAP_PUBLISH);
    if (r == CONF_PASS)
        r = conf_need(cf, AB_CAP_REPLAY);
    if (r != CONF_PASS)
        return r;
    char th[96], run[96];
    conf_id(cf, th, sizeof(th), "flow-t");
    conf_id(cf, run, sizeof(run), "flow-r");
    uint64_t e = 0, cid = 0;
    ab_msg_t q = {.op = AB_OP_REPLAY,
                  .u.replay = {.scope = AB_REPLAY_RUN,
                               .window = 1,
                               .chunk_events = 1,
                               .thread = {th, strlen(th)},
                               .run = {run, strlen(run)}}};
    ab_error_t err = AB_ERROR_INIT;
    if (conf_claim(cf, cf->c, th, run, &e) != 0 ||
        conf_publish_range(cf, th, run, e, 1, 6, NULL) != 0)
        return CONF_FAIL;
    if (ab_conn_send(cf->c, &q, NULL, 0, &cid, &err) != AB_OK)
        return conf_fail(cf, "send replay: %s", err.message);
    if (one_chunk_then_silence(cf, cid) != 0)
        return CONF_FAIL;
    ab_msg_t cancel = {.op = AB_OP_CANCEL, .cid = cid};
    if (ab_conn_send(cf->c, &cancel, NULL, 0, NULL, &err) != AB_OK)
        return conf_fail(cf, "send cancel: %s", err.message);
    ab_msg_t m;
    ab_status_t st = ab_conn_recv(cf->c, cid, cf->doc, &m, cf->timeout_ms, &err);
    if (st != AB_REQUEST_ABORTED || m.cid != cid || err.retryable)
        return conf_fail(cf,
                         "cancel ended the replay with %s (cid %llu), expected "
                         "request_aborted, not retryable, cid %llu",
                         ab_status_name(st), (unsigned long long)m.cid, (unsigned long long)cid);
    return CONF_PASS;
}

/* Ask for a snapshot of thread @p th; the answer status (reply in *m). */
static ab_status_t ask_snapshot_of(conf_t *cf, const char *th, ab_msg_t *m, ab_error_t *err)
{
    ab_msg_t q = {.op = AB_OP_SNAPSHOT, .u.snapshot = {.thread = {th, strlen(th)}}};
    return ab_conn_request(cf->c, &q, NULL, 0, cf->doc, m, cf->timeout_ms, err);
}

/* Ask for a snapshot of a fresh thread; the answer status (reply in *m). */
static ab_status_t ask_snapshot(conf_t *cf, ab_msg_t *m, ab_error_t *err)
{
    char th[96];
    conf_id(cf, th, sizeof(th), "snap-t");
    return ask_snapshot_of(cf, th, m, err);
}

conf_result_t conf_check_unsupported(conf_t *cf)
{
    size_t n = 0;
    const ab_cap_t *caps = ab_conn_caps(cf->c, &n);
    ab_cap_state_t s = ab_caps_lookup(caps, n, AB_CAP_DURABLE_SNAPSHOTS);
    if (s == AB_CAP_AVAILABLE || s == AB_CAP_DEGRADED) {
        snprintf(cf->reason, sizeof(cf->reason), "capability %s is announced %s, not unsupported",
                 AB_CAP_DURABLE_SNAPSHOTS, ab_cap_state_name(s));
        return CONF_SKIP;
    }
    ab_status_t want = s == AB_CAP_UNAVAILABLE ? AB_UNAVAILABLE : AB_UNSUPPORTED;
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ask_snapshot(cf, &m, &err);
    if (st != want || m.op != AB_OP_ERROR)
        return conf_fail(cf, "%s is %s but snapshot answered %s, expected error %s",
                         AB_CAP_DURABLE_SNAPSHOTS, ab_cap_state_name(s), ab_status_name(st),
                         ab_status_name(want));
    if (err.retryable != (want == AB_UNAVAILABLE))
        return conf_fail(cf, "%s error has retryable %d", ab_status_name(want), (int)err.retryable);
    return CONF_PASS;
}

/*
 * Continue a snapshot as PROTOCOL.md 7.8 says: events 3..4 of @p run are
 * published after it; a thread replay whose cursors are the checkpoint's
 * runs returns exactly those.
 */
static conf_result_t continue_snapshot(conf_t *cf, const char *th, const char *run, uint64_t epoch,
                                       uint64_t cp_seq)
{
    if (cp_seq != 2)
        return conf_fail(cf, "snapshot checkpoint names seq %llu of run %s, expected 2",
                         (unsigned long long)cp_seq, run);
    conf_recs_t sent = {0}, got = {0};
    ab_cursor_t cur = {.run = {run, strlen(run)}, .after_seq = cp_seq};
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay = (ab_replay_t){.scope = AB_REPLAY_THREAD, .window = 4, .thread = {th, strlen(th)}};
    q.u.replay.cursors = &cur;
    q.u.replay.ncursors = 1;
    ab_replay_end_t end;
    conf_result_t res = CONF_FAIL;
    if (conf_publish_range(cf, th, run, epoch, 3, 4, &sent) != 0 ||
        conf_replay(cf, &q, &got, &end) != 0)
        goto out;
    if (got.n != sent.n)
        conf_fail(cf,
                  "continuing the snapshot from its checkpoint replayed %zu events, expected %zu",
                  got.n, sent.n);
    else if (conf_recs_find(&got, sent.bytes.data + sent.off[0], sent.len[0]) != 0 ||
             conf_recs_find(&got, sent.bytes.data + sent.off[1], sent.len[1]) != 1)
        conf_fail(cf,
                  "continuing the snapshot replayed other events than the two published after it");
    else
        res = CONF_PASS;
out:
    conf_recs_free(&sent);
    conf_recs_free(&got);
    return res;
}

conf_result_t conf_check_snapshots(conf_t *cf)
{
    conf_result_t r = conf_need(cf, AB_CAP_DURABLE_SNAPSHOTS);
    if (r != CONF_PASS)
        return r;
    char th[96], run[96];
    conf_id(cf, th, sizeof(th), "snap-t");
    conf_id(cf, run, sizeof(run), "snap-r");
    uint64_t epoch = 0;
    if (conf_claim(cf, cf->c, th, run, &epoch) != 0 ||
        conf_publish_range(cf, th, run, epoch, 1, 2, NULL) != 0)
        return CONF_FAIL;
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ask_snapshot_of(cf, th, &m, &err);
    if (st != AB_OK || m.op != AB_OP_SNAPSHOT_REPLY)
        return conf_fail(cf, "%s announced but snapshot answered %s: %s", AB_CAP_DURABLE_SNAPSHOTS,
                         ab_status_name(st), err.message);
    if (!m.u.snapshot_reply.snapshot)
        return conf_fail(cf, "snapshot_reply without a snapshot map");
    ab_buf_t text = {0};
    ab_snapshot_t *snap = NULL;
    if (ab_val_to_json(m.u.snapshot_reply.snapshot, &text) != AB_OK)
        st = ab_error_set(&err, AB_NOMEM, "", "out of memory");
    else
        st = ab_snapshot_parse((const char *)text.data, text.len, &snap, &err);
    bool active = false;
    uint64_t cp_seq = 0;
    if (st == AB_OK) {
        active = ab_snapshot_active_count(snap) == 1 &&
                 strcmp(ab_snapshot_active_run(snap, 0), run) == 0;
        cp_seq = ab_snapshot_checkpoint_seq(snap, run);
    }
    ab_snapshot_destroy(&snap);
    ab_buf_free(&text);
    if (st != AB_OK)
        return conf_fail(cf, "snapshot document rejected: %s", err.message);
    if (!active)
        return conf_fail(cf, "snapshot does not name run %s as its one active run", run);
    if (continue_snapshot(cf, th, run, epoch, cp_seq) != CONF_PASS)
        return CONF_FAIL;
    /* a thread with no events */
    ab_error_t e2 = AB_ERROR_INIT;
    st = ask_snapshot(cf, &m, &e2);
    if (st != AB_NOT_FOUND || m.op != AB_OP_ERROR || e2.retryable)
        return conf_fail(cf, "snapshot of an unknown thread answered %s, expected not_found",
                         ab_status_name(st));
    return CONF_PASS;
}

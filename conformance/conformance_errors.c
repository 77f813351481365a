/*
 * conformance_errors.c - conformance checks of fencing (PROTOCOL.md 7.3),
 * terminal runs (7.4.2 rule 5) and typed errors on bad requests (7.1, 8):
 * code, field, retryable and the echoed correlation id.
 *
 * Invariants:
 *  1. Bad requests are raw header frames put on the DEALER with a cid the
 *     suite chose (never one the client library would use: those start at 1
 *     and a check sends only a handful of requests).
 *  2. Every reply is awaited with --timeout.
 */
#include "conformance.h"

#include <msgpack.h>
#include <stdio.h>
#include <string.h>

#define CID_BASE 7770000u

static int fenced_ok(conf_t *cf, const ab_result_t *r, const ab_error_t *e, uint64_t cur,
                     uint64_t got)
{
    if (r->status != AB_RESULT_REJECTED || e->code != AB_FENCED)
        return conf_fail(cf, "stale epoch %llu not fenced (status %d, %s)", (unsigned long long)got,
                         (int)r->status, ab_status_name(e->code)),
               -1;
    const ab_error_detail_t *de = ab_error_detail(e, "epoch"), *dg = ab_error_detail(e, "got");
    if (strcmp(e->field, "epoch") != 0 || e->retryable)
        return conf_fail(cf, "fenced: field '%s' (expected 'epoch'), retryable %d", e->field,
                         (int)e->retryable),
               -1;
    if (!de || de->i != (int64_t)cur || !dg || dg->i != (int64_t)got)
        return conf_fail(cf, "fenced: details epoch/got are not %llu/%llu", (unsigned long long)cur,
                         (unsigned long long)got),
               -1;
    return 0;
}

/* The second writer claims: epoch + 1, last_seq 2, status active. */
static int second_claim(conf_t *cf, ab_conn_t *b, const char *th, const char *run, uint64_t e1,
                        uint64_t *e2)
{
    ab_claimed_t cl;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_claim(b, th, run, cf->doc, &cl, cf->timeout_ms, &err);
    if (st != AB_OK)
        return conf_fail(cf, "second claim: %s: %s", ab_status_name(st), err.message), -1;
    if (cl.epoch != e1 + 1 || cl.last_seq != 2 || cl.status != AB_RUN_STATUS_ACTIVE)
        return conf_fail(cf,
                         "second claim answered epoch %llu last_seq %llu status %s "
                         "(expected %llu, 2, active)",
                         (unsigned long long)cl.epoch, (unsigned long long)cl.last_seq,
                         ab_run_status_name(cl.status), (unsigned long long)(e1 + 1)),
               -1;
    *e2 = cl.epoch;
    return 0;
}

conf_result_t conf_check_fencing(conf_t *cf)
{
    conf_result_t need = conf_need(cf, AB_CAP_PUBLISH);
    if (need != CONF_PASS)
        return need;
    char th[96], run[96];
    conf_id(cf, th, sizeof(th), "fence-t");
    conf_id(cf, run, sizeof(run), "fence-r");
    uint64_t e1 = 0, e2 = 0;
    ab_error_t err = AB_ERROR_INIT, rej;
    ab_conn_t *b = NULL;
    ab_buf_t env = {0};
    ab_result_t r;
    conf_result_t res = CONF_FAIL;
    if (conf_claim(cf, cf->c, th, run, &e1) != 0 ||
        conf_publish_range(cf, th, run, e1, 1, 2, NULL) != 0 ||
        !(b = conf_connect(cf, NULL, 0, &err)) || second_claim(cf, b, th, run, e1, &e2) != 0 ||
        conf_envelope(cf, &env, th, run, 3, e1, CONF_BODY_AUTO) != 0 ||
        conf_publish1(cf, cf->c, &env, &r, &rej) != 0 || fenced_ok(cf, &r, &rej, e2, e1) != 0)
        goto out;
    ab_buf_reset(&env);
    if (conf_envelope(cf, &env, th, run, 3, e2, CONF_BODY_AUTO) != 0 ||
        conf_publish1(cf, b, &env, &r, &rej) != 0)
        goto out;
    if (r.status != AB_RESULT_ACCEPTED)
        conf_fail(cf, "new writer's seq 3 not accepted: %s", ab_status_name(rej.code));
    else
        res = CONF_PASS;
out:
    ab_conn_destroy(&b);
    ab_buf_free(&env);
    return res;
}

static int head_status(conf_t *cf, const char *th, const char *run, ab_run_status_t *st)
{
    ab_run_ref_t ref = {{th, strlen(th)}, {run, strlen(run)}};
    ab_heads_t q = {.runs = &ref, .nruns = 1};
    ab_heads_reply_t hr;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = ab_conn_heads(cf->c, &q, cf->doc, &hr, cf->timeout_ms, &err);
    if (s != AB_OK || hr.nheads != 1)
        return conf_fail(cf, "heads: %s: %s", ab_status_name(s), err.message), -1;
    *st = hr.heads[0].status;
    return 0;
}

conf_result_t conf_check_terminal(conf_t *cf)
{
    conf_result_t need = conf_need(cf, AB_CAP_PUBLISH);
    if (need != CONF_PASS)
        return need;
    char th[96], run[96];
    conf_id(cf, th, sizeof(th), "term-t");
    conf_id(cf, run, sizeof(run), "term-r");
    uint64_t e = 0;
    ab_buf_t env = {0};
    ab_result_t r;
    ab_error_t rej;
    ab_run_status_t st = AB_RUN_STATUS_UNKNOWN;
    conf_result_t res = CONF_FAIL;
    if (conf_claim(cf, cf->c, th, run, &e) != 0 ||
        conf_publish_range(cf, th, run, e, 1, 1, NULL) != 0 ||
        conf_envelope(cf, &env, th, run, 2, e, CONF_BODY_FINISH) != 0 ||
        conf_publish1(cf, cf->c, &env, &r, &rej) != 0)
        goto out;
    if (r.status != AB_RESULT_ACCEPTED) {
        conf_fail(cf, "RUN_FINISHED not accepted: %s: %s", ab_status_name(rej.code), rej.message);
        goto out;
    }
    ab_buf_reset(&env);
    if (conf_envelope(cf, &env, th, run, 3, e, CONF_BODY_AUTO) != 0 ||
        conf_publish1(cf, cf->c, &env, &r, &rej) != 0)
        goto out;
    if (r.status != AB_RESULT_REJECTED || rej.code != AB_RUN_TERMINAL || rej.retryable)
        conf_fail(cf, "event after RUN_FINISHED: status %d %s (expected run_terminal)",
                  (int)r.status, ab_status_name(rej.code));
    else if (head_status(cf, th, run, &st) == 0 && st != AB_RUN_STATUS_FINISHED)
        conf_fail(cf, "heads reports %s after RUN_FINISHED", ab_run_status_name(st));
    else if (st == AB_RUN_STATUS_FINISHED)
        res = CONF_PASS;
out:
    ab_buf_free(&env);
    return res;
}

static void pack_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

/* Header {op, v, cid[, key: 1]} (with_run: thread only, run missing). */
static int bad_request(conf_t *cf, const char *op, uint64_t cid, const char *extra)
{
    ab_buf_t h = {0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &h, ab_buf_msgpack_write);
    msgpack_pack_map(&pk, extra ? 4 : 3);
    pack_str(&pk, "op");
    pack_str(&pk, op);
    pack_str(&pk, "v");
    msgpack_pack_uint32(&pk, ab_conn_version(cf->c));
    pack_str(&pk, "cid");
    msgpack_pack_uint64(&pk, cid);
    if (extra) {
        pack_str(&pk, extra);
        pack_str(&pk, "x");
    }
    int rc = conf_send_raw(cf, &h);
    ab_buf_free(&h);
    return rc;
}

/* Send one bad request and expect error @p code naming @p field, echoing the cid. */
static int expect_error(conf_t *cf, const char *op, uint64_t cid, const char *extra,
                        ab_status_t code, const char *field)
{
    if (bad_request(cf, op, cid, extra) != 0)
        return -1;
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_recv(cf->c, cid, cf->doc, &m, cf->timeout_ms, &err);
    const char *what = extra ? extra : op;
    if (st == AB_TIMEOUT && err.cid != cid)
        return conf_fail(cf, "no reply with cid %llu to a bad '%s' (%s) within %d ms",
                         (unsigned long long)cid, op, what, cf->timeout_ms),
               -1;
    if (st != code || m.op != AB_OP_ERROR)
        return conf_fail(cf, "bad '%s' (%s): expected error %s, got %s", op, what,
                         ab_status_name(code), ab_status_name(st)),
               -1;
    if (m.cid != cid || err.cid != cid)
        return conf_fail(cf, "error does not echo cid %llu (got %llu)", (unsigned long long)cid,
                         (unsigned long long)m.cid),
               -1;
    if (err.retryable || strcmp(err.field, field) != 0)
        return conf_fail(cf, "%s: retryable %d field '%s' (expected false, '%s')",
                         ab_status_name(code), (int)err.retryable, err.field, field),
               -1;
    return 0;
}

/*
 * A `ping` header that is refused as a whole frame: @p deep nests an
 * unknown key 64 arrays deep (depth 66, beyond max_depth), else the map is
 * followed by a stray nil byte. Either way the broker could read cid and v
 * at the top level: the error must echo both (PROTOCOL.md 7.1, 8.1).
 */
static int expect_frame_error(conf_t *cf, bool deep, uint64_t cid, ab_status_t code)
{
    ab_buf_t h = {0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &h, ab_buf_msgpack_write);
    msgpack_pack_map(&pk, deep ? 4 : 3);
    pack_str(&pk, "op");
    pack_str(&pk, "ping");
    pack_str(&pk, "v");
    msgpack_pack_uint32(&pk, ab_conn_version(cf->c));
    pack_str(&pk, "cid");
    msgpack_pack_uint64(&pk, cid);
    if (deep) {
        pack_str(&pk, "x");
        for (int i = 0; i < 64; i++)
            msgpack_pack_array(&pk, 1);
    }
    msgpack_pack_nil(&pk);
    int rc = conf_send_raw(cf, &h);
    ab_buf_free(&h);
    if (rc != 0)
        return -1;
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    const char *what = deep ? "a header nested too deep" : "a header with trailing bytes";
    ab_status_t st = ab_conn_recv(cf->c, cid, cf->doc, &m, cf->timeout_ms, &err);
    if (st == AB_TIMEOUT)
        return conf_fail(cf, "no reply with cid %llu to %s within %d ms", (unsigned long long)cid,
                         what, cf->timeout_ms),
               -1;
    if (st != code || m.op != AB_OP_ERROR || m.cid != cid)
        return conf_fail(cf, "%s: expected error %s with cid %llu, got %s", what,
                         ab_status_name(code), (unsigned long long)cid, ab_status_name(st)),
               -1;
    if (m.v != ab_conn_version(cf->c))
        return conf_fail(cf, "%s: the error carries v %u, the header's was %u", what, m.v,
                         ab_conn_version(cf->c)),
               -1;
    return 0;
}

conf_result_t conf_check_errors(conf_t *cf)
{
    if (expect_frame_error(cf, true, CID_BASE + 4, AB_TOO_LARGE) != 0 ||
        expect_frame_error(cf, false, CID_BASE + 5, AB_INVALID_ENVELOPE) != 0)
        return CONF_FAIL;
    /* claim without its run; an unknown op; an unknown field; ping still works after. */
    if (expect_error(cf, "claim", CID_BASE + 1, "thread", AB_INVALID_ENVELOPE, "run") != 0 ||
        expect_error(cf, "frobnicate", CID_BASE + 2, NULL, AB_UNSUPPORTED, "op") != 0 ||
        expect_error(cf, "ping", CID_BASE + 3, "bogus", AB_INVALID_ENVELOPE, "bogus") != 0)
        return CONF_FAIL;
    ab_pong_t p;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_ping(cf->c, cf->doc, &p, cf->timeout_ms, &err);
    if (st != AB_OK)
        return conf_fail(cf, "ping after the bad requests: %s", ab_status_name(st));
    return CONF_PASS;
}

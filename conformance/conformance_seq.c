/*
 * conformance_seq.c - conformance checks of version negotiation, per-run
 * ordering and the sequencing rules of `publish` (PROTOCOL.md 7.4.2).
 *
 * Invariants:
 *  1. Every check works on runs of its own (fresh ids), claimed first.
 *  2. A rejection is checked by code, field, retryable and the details the
 *     protocol names, not by message text.
 */
#include "conformance.h"

#include <stdio.h>
#include <string.h>

/* A rejected result must carry @p code, @p field and retryable false. */
static conf_result_t expect_rejected(conf_t *cf, const ab_result_t *r, const ab_error_t *e,
                                     ab_status_t code, const char *field)
{
    if (r->status != AB_RESULT_REJECTED)
        return conf_fail(cf, "seq %llu: expected rejected %s, got status %d",
                         (unsigned long long)r->seq, ab_status_name(code), (int)r->status);
    if (e->code != code)
        return conf_fail(cf, "expected %s, got %s (%s)", ab_status_name(code),
                         ab_status_name(e->code), e->message);
    if (strcmp(e->field, field) != 0)
        return conf_fail(cf, "%s: expected field '%s', got '%s'", ab_status_name(code), field,
                         e->field);
    if (e->retryable)
        return conf_fail(cf, "%s marked retryable", ab_status_name(code));
    return CONF_PASS;
}

int conf_publish_range(conf_t *cf, const char *thread, const char *run, uint64_t epoch,
                       uint64_t from, uint64_t to, conf_recs_t *sent)
{
    ab_buf_t env = {0};
    uint64_t last_pos = 0;
    int rc = 0;
    for (uint64_t s = from; s <= to && rc == 0; s++) {
        ab_buf_reset(&env);
        ab_result_t r;
        ab_error_t rej;
        rc = conf_envelope(cf, &env, thread, run, s, epoch, CONF_BODY_AUTO);
        if (rc == 0)
            rc = conf_publish1(cf, cf->c, &env, &r, &rej);
        if (rc == 0 && r.status != AB_RESULT_ACCEPTED)
            rc = -1, conf_fail(cf, "seq %llu not accepted: %s: %s", (unsigned long long)s,
                               ab_status_name(rej.code), rej.message);
        if (rc == 0 && r.pos <= last_pos)
            rc = -1, conf_fail(cf, "seq %llu: pos %llu not above %llu", (unsigned long long)s,
                               (unsigned long long)r.pos, (unsigned long long)last_pos);
        if (rc == 0 && sent && conf_recs_add(sent, r.pos, env.data, env.len) != 0)
            rc = -1, conf_fail(cf, "out of memory");
        last_pos = r.pos;
    }
    ab_buf_free(&env);
    return rc;
}

static conf_result_t refused_99(conf_t *cf)
{
    uint32_t only99[] = {99};
    ab_error_t err = AB_ERROR_INIT;
    ab_conn_t *c = conf_connect(cf, only99, 1, &err);
    if (c) {
        ab_conn_destroy(&c);
        return conf_fail(cf, "offer [99] was welcomed");
    }
    if (err.code != AB_INCOMPATIBLE_VERSION)
        return conf_fail(cf, "offer [99]: expected incompatible_version, got %s (%s)",
                         ab_status_name(err.code), err.message);
    if (err.retryable)
        return conf_fail(cf, "incompatible_version marked retryable");
    if (strcmp(err.field, "versions") != 0)
        return conf_fail(cf, "incompatible_version: field '%s', expected 'versions'", err.field);
    const ab_error_detail_t *ours = ab_error_detail(&err, "ours"),
                            *theirs = ab_error_detail(&err, "theirs");
    if (!ours || ours->kind != AB_DETAIL_STR || !ours->s[0])
        return conf_fail(cf, "incompatible_version without detail 'ours'");
    if (!theirs || theirs->kind != AB_DETAIL_STR || strcmp(theirs->s, "99") != 0)
        return conf_fail(cf, "incompatible_version: detail 'theirs' is not \"99\"");
    return CONF_PASS;
}

conf_result_t conf_check_version(conf_t *cf)
{
    uint32_t offer[] = {1, 99};
    ab_error_t err = AB_ERROR_INIT;
    ab_conn_t *c = conf_connect(cf, offer, 2, &err);
    if (!c)
        return CONF_FAIL;
    uint32_t v = ab_conn_version(c);
    ab_conn_destroy(&c);
    if (v != 1)
        return conf_fail(cf, "offer [1, 99] negotiated v%u, the highest mutual is 1", v);
    return refused_99(cf);
}

conf_result_t conf_check_ordering(conf_t *cf)
{
    conf_result_t need = conf_need(cf, AB_CAP_PUBLISH);
    if (need == CONF_PASS)
        need = conf_need(cf, AB_CAP_REPLAY);
    if (need != CONF_PASS)
        return need;
    char th[96], run[96];
    conf_id(cf, th, sizeof(th), "order-t");
    conf_id(cf, run, sizeof(run), "order-r");
    uint64_t epoch = 0;
    conf_recs_t sent = {0}, got = {0};
    conf_result_t res = CONF_FAIL;
    ab_replay_end_t end;
    ab_msg_t q = {.op = AB_OP_REPLAY,
                  .u.replay = {.scope = AB_REPLAY_RUN,
                               .window = 1,
                               .chunk_events = 3,
                               .thread = {th, strlen(th)},
                               .run = {run, strlen(run)}}};
    if (conf_claim(cf, cf->c, th, run, &epoch) != 0 ||
        conf_publish_range(cf, th, run, epoch, 1, 20, &sent) != 0 ||
        conf_replay(cf, &q, &got, &end) != 0)
        goto out;
    if (got.n != sent.n || end.events != sent.n) {
        conf_fail(cf, "replay gave %zu events (replay_end.events %llu), published %zu", got.n,
                  (unsigned long long)end.events, sent.n);
        goto out;
    }
    for (size_t i = 0; i < sent.n; i++)
        if (got.len[i] != sent.len[i] || got.pos[i] != sent.pos[i] ||
            memcmp(got.bytes.data + got.off[i], sent.bytes.data + sent.off[i], sent.len[i])) {
            conf_fail(cf, "replayed event %zu differs from seq %zu as published (bytes or pos)", i,
                      i + 1);
            goto out;
        }
    res = CONF_PASS;
out:
    conf_recs_free(&sent);
    conf_recs_free(&got);
    return res;
}

/* Claim a fresh run and publish seq 1..n; ids into th/run. */
static int fresh_run(conf_t *cf, char *th, char *run, size_t size, uint64_t n, uint64_t *epoch,
                     conf_recs_t *sent)
{
    conf_id(cf, th, size, "t");
    conf_id(cf, run, size, "r");
    if (conf_claim(cf, cf->c, th, run, epoch) != 0)
        return -1;
    return conf_publish_range(cf, th, run, *epoch, 1, n, sent);
}

conf_result_t conf_check_gap(conf_t *cf)
{
    conf_result_t need = conf_need(cf, AB_CAP_PUBLISH);
    if (need != CONF_PASS)
        return need;
    char th[96], run[96];
    uint64_t epoch = 0;
    ab_buf_t env = {0};
    ab_result_t r;
    ab_error_t e;
    conf_result_t res = CONF_FAIL;
    if (fresh_run(cf, th, run, sizeof(th), 2, &epoch, NULL) != 0 ||
        conf_envelope(cf, &env, th, run, 5, epoch, CONF_BODY_AUTO) != 0 ||
        conf_publish1(cf, cf->c, &env, &r, &e) != 0)
        goto out;
    res = expect_rejected(cf, &r, &e, AB_GAP, "seq");
    const ab_error_detail_t *d = ab_error_detail(&e, "expected_seq");
    if (res == CONF_PASS && (!d || d->kind != AB_DETAIL_INT || d->i != 3))
        res = conf_fail(cf, "gap after seq 2 without details expected_seq = 3");
out:
    ab_buf_free(&env);
    return res;
}

conf_result_t conf_check_duplicate(conf_t *cf)
{
    conf_result_t need = conf_need(cf, AB_CAP_PUBLISH);
    if (need != CONF_PASS)
        return need;
    char th[96], run[96];
    uint64_t epoch = 0;
    conf_recs_t sent = {0};
    ab_buf_t env = {0};
    ab_result_t r;
    conf_result_t res = CONF_FAIL;
    if (fresh_run(cf, th, run, sizeof(th), 3, &epoch, &sent) != 0 ||
        ab_buf_append(&env, sent.bytes.data + sent.off[1], sent.len[1]) != AB_OK ||
        conf_publish1(cf, cf->c, &env, &r, NULL) != 0)
        goto out;
    if (r.status != AB_RESULT_DUPLICATE)
        conf_fail(cf, "re-sent seq 2 (same bytes) answered status %d, not duplicate",
                  (int)r.status);
    else if (r.pos != sent.pos[1])
        conf_fail(cf, "duplicate of seq 2 reports pos %llu, original %llu",
                  (unsigned long long)r.pos, (unsigned long long)sent.pos[1]);
    else
        res = CONF_PASS;
out:
    conf_recs_free(&sent);
    ab_buf_free(&env);
    return res;
}

conf_result_t conf_check_conflict(conf_t *cf)
{
    conf_result_t need = conf_need(cf, AB_CAP_PUBLISH);
    if (need != CONF_PASS)
        return need;
    char th[96], run[96];
    uint64_t epoch = 0;
    ab_buf_t env = {0};
    ab_result_t r;
    ab_error_t e;
    conf_result_t res = CONF_FAIL;
    if (fresh_run(cf, th, run, sizeof(th), 3, &epoch, NULL) != 0 ||
        conf_envelope(cf, &env, th, run, 3, epoch, CONF_BODY_ALT) != 0 ||
        conf_publish1(cf, cf->c, &env, &r, &e) != 0)
        goto out;
    res = expect_rejected(cf, &r, &e, AB_CONFLICT, "seq");
out:
    ab_buf_free(&env);
    return res;
}

/*
 * conformance_replay.c - conformance checks of replay with an exact seam to
 * live delivery from a run cursor, a thread cursor map and a global position
 * (PROTOCOL.md 6.2 "Subscribe, replay, hand over", 7.6).
 *
 * Each seam check: publish some events; subscribe on the event endpoint and
 * wait for a heartbeat (the subscription is then active); publish more;
 * replay from the cursor; publish more; read live until every expected event
 * was delivered. Delivery follows the Clone pattern: replayed records first,
 * then live events, dropping those whose pos is at or below the last
 * delivered one. The check fails on a replayed event at or below the cursor,
 * out of order or repeated, on bytes or positions that differ from what the
 * producer sent and was told, and on any expected event not delivered
 * exactly once (a hole).
 *
 * Invariants:
 *  1. Only events carrying this check's unique thread id are considered, so
 *     other traffic on a shared broker never disturbs the check.
 *  2. Live reading stops at --timeout.
 */
#include "ab_common.h"
#include "conformance.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

typedef struct seam {
    conf_recs_t sent;
    bool below[CONF_MAX_RECS]; /* at or below the cursor: must not be replayed */
    int count[CONF_MAX_RECS];  /* times delivered */
    uint64_t last_pos;         /* last delivered position */
} seam_t;

/* Deliver sent event @p i (from replay when @p replayed). */
static int deliver(conf_t *cf, seam_t *s, long i, uint64_t pos, bool replayed)
{
    if (i < 0)
        return conf_fail(cf, "%s event of this check with bytes nobody published",
                         replayed ? "replayed" : "live"),
               -1;
    if (pos != s->sent.pos[i])
        return conf_fail(cf, "event %ld delivered with pos %llu, publish said %llu", i,
                         (unsigned long long)pos, (unsigned long long)s->sent.pos[i]),
               -1;
    if (replayed && s->below[i]) {
        conf_fail(cf, "replay sent event %ld at or below its cursor", i);
        return -1;
    }
    if (replayed && pos <= s->last_pos) {
        conf_fail(cf, "replay repeated or reordered pos %llu", (unsigned long long)pos);
        return -1;
    }
    if (pos <= s->last_pos)
        return 0; /* already delivered by replay: the seam's dedupe */
    s->count[i]++;
    s->last_pos = pos;
    return 0;
}

static bool complete(const seam_t *s)
{
    for (size_t i = 0; i < s->sent.n; i++)
        if (!s->below[i] && s->count[i] == 0)
            return false;
    return true;
}

/* Deliver the records of one live message (PROTOCOL.md 6.2); a malformed one fails the check. */
static int live_records(conf_t *cf, seam_t *s, const ab_buf_t *records, int nframes)
{
    if (nframes != 2) {
        conf_fail(cf, "a live message has %d frames, expected 2", nframes);
        return -1;
    }
    if (records->len == 0) {
        conf_fail(cf, "a live message without records");
        return -1;
    }
    const uint8_t *p = records->data, *end = p + records->len;
    while (p < end) {
        const uint8_t *sb, *eb;
        size_t slen, elen;
        ab_stamp_t stamp;
        ab_error_t err = AB_ERROR_INIT;
        if (!ab_record_next(&p, end, &sb, &slen, &eb, &elen)) {
            conf_fail(cf, "a live records frame has a record past its end");
            return -1;
        }
        if (ab_stamp_decode(cf->tmp, sb, slen, &stamp, &err) != AB_OK) {
            conf_fail(cf, "live stamp does not decode: %s", err.message);
            return -1;
        }
        if (!conf_contains(eb, elen, s->sent.only))
            continue;
        if (deliver(cf, s, conf_recs_find(&s->sent, eb, elen), stamp.pos, false) != 0)
            return -1;
    }
    return 0;
}

static int read_live(conf_t *cf, seam_t *s)
{
    ab_buf_t t = {0}, body = {0}, x = {0};
    long end = ab__mono_ms() + cf->timeout_ms;
    int rc = 0, nf = 0;
    while (rc == 0 && !complete(s) && ab__mono_ms() < end) {
        int got = conf_sub_recv(cf, (int)(end - ab__mono_ms()), &t, &body, &x, &nf);
        if (got < 0)
            rc = -1;
        if (got == 1 && !conf_is_heartbeat(&t))
            rc = live_records(cf, s, &body, nf);
    }
    ab_buf_free(&t);
    ab_buf_free(&body);
    ab_buf_free(&x);
    return rc;
}

static conf_result_t verdict(conf_t *cf, seam_t *s)
{
    for (size_t i = 0; i < s->sent.n; i++) {
        if (!s->below[i] && s->count[i] != 1)
            return conf_fail(cf, "event %zu (pos %llu) delivered %d times: hole at the seam", i,
                             (unsigned long long)s->sent.pos[i], s->count[i]);
        if (s->below[i] && s->count[i] != 0)
            return conf_fail(cf, "event %zu at or below the cursor was delivered", i);
    }
    return s->sent.overflow ? conf_fail(cf, "too many events") : CONF_PASS;
}

/* Steps after phase A: subscribe, B, replay, C, live, verdict. */
typedef int (*phase_fn)(conf_t *cf, seam_t *s, int phase);

static conf_result_t seam_run(conf_t *cf, seam_t *s, const void *topic, size_t tlen,
                              const ab_msg_t *req, phase_fn publish)
{
    conf_recs_t got = {.only = s->sent.only};
    ab_replay_end_t end;
    conf_result_t res = CONF_FAIL;
    if (conf_sub_open(cf, topic, tlen) != 0 || publish(cf, s, 1) != 0 ||
        conf_replay(cf, req, &got, &end) != 0)
        goto out;
    for (size_t i = 0; i < got.n; i++)
        if (deliver(cf, s, conf_recs_find(&s->sent, got.bytes.data + got.off[i], got.len[i]),
                    got.pos[i], true) != 0)
            goto out;
    if (publish(cf, s, 2) == 0 && read_live(cf, s) == 0)
        res = verdict(cf, s);
out:
    conf_recs_free(&got);
    return res;
}

static conf_result_t need_replay(conf_t *cf)
{
    conf_result_t r = conf_need(cf, AB_CAP_PUBLISH);
    if (r == CONF_PASS)
        r = conf_need(cf, AB_CAP_REPLAY);
    if (r == CONF_PASS)
        r = conf_need(cf, AB_CAP_HEARTBEAT);
    return r;
}

/* ---- scope run: run cursor after seq 2 --------------------------------- */
static char g_th[96], g_r1[96], g_r2[96];
static uint64_t g_e1, g_e2;

/* A seam check's state with fresh ids "seam-<name>-t" / "-r" in g_th / g_r1; NULL (and
 * *r set) when replay or heartbeats are not announced or memory runs out. */
static seam_t *seam_new(conf_t *cf, const char *name, conf_result_t *r)
{
    char prefix[32];
    if ((*r = need_replay(cf)) != CONF_PASS)
        return NULL;
    seam_t *s = calloc(1, sizeof(*s));
    if (!s) {
        *r = conf_fail(cf, "out of memory");
        return NULL;
    }
    snprintf(prefix, sizeof(prefix), "seam-%s-t", name);
    conf_id(cf, g_th, sizeof(g_th), prefix);
    snprintf(prefix, sizeof(prefix), "seam-%s-r", name);
    conf_id(cf, g_r1, sizeof(g_r1), prefix);
    s->sent.only = g_th;
    return s;
}

static void seam_free(seam_t *s)
{
    conf_recs_free(&s->sent);
    free(s);
}

static int run_phases(conf_t *cf, seam_t *s, int phase)
{
    static const uint64_t lo[] = {1, 5, 7}, hi[] = {4, 6, 9};
    return conf_publish_range(cf, g_th, g_r1, g_e1, lo[phase], hi[phase], &s->sent);
}

conf_result_t conf_check_replay_run(conf_t *cf)
{
    conf_result_t r;
    seam_t *s = seam_new(cf, "run", &r);
    if (!s)
        return r;
    ab_buf_t topic = {0};
    ab_error_t err = AB_ERROR_INIT;
    ab_msg_t q = {.op = AB_OP_REPLAY,
                  .u.replay = {.scope = AB_REPLAY_RUN,
                               .thread = {g_th, strlen(g_th)},
                               .run = {g_r1, strlen(g_r1)},
                               .after_seq = 2}};
    r = CONF_FAIL;
    if (conf_claim(cf, cf->c, g_th, g_r1, &g_e1) == 0 && run_phases(cf, s, 0) == 0 &&
        ab_topic_event(&topic, q.u.replay.thread, q.u.replay.run, &err) == AB_OK) {
        s->below[0] = s->below[1] = true;
        r = seam_run(cf, s, topic.data, topic.len, &q, run_phases);
    }
    ab_buf_free(&topic);
    seam_free(s);
    return r;
}

/* ---- scope thread: cursors {r1: 1}, r2 from its start -------------------- */
static int thread_phases(conf_t *cf, seam_t *s, int phase)
{
    static const uint64_t lo1[] = {1, 4, 5}, hi1[] = {3, 4, 6};
    static const uint64_t lo2[] = {1, 3, 4}, hi2[] = {2, 3, 4};
    if (conf_publish_range(cf, g_th, g_r1, g_e1, lo1[phase], hi1[phase], &s->sent) != 0)
        return -1;
    return conf_publish_range(cf, g_th, g_r2, g_e2, lo2[phase], hi2[phase], &s->sent);
}

conf_result_t conf_check_replay_thread(conf_t *cf)
{
    conf_result_t r;
    seam_t *s = seam_new(cf, "thread", &r);
    if (!s)
        return r;
    conf_id(cf, g_r2, sizeof(g_r2), "seam-thread-r");
    ab_buf_t topic = {0};
    ab_error_t err = AB_ERROR_INIT;
    ab_cursor_t cur = {{g_r1, strlen(g_r1)}, 1};
    ab_msg_t q = {.op = AB_OP_REPLAY,
                  .u.replay = {.scope = AB_REPLAY_THREAD,
                               .thread = {g_th, strlen(g_th)},
                               .cursors = &cur,
                               .ncursors = 1}};
    r = CONF_FAIL;
    if (conf_claim(cf, cf->c, g_th, g_r1, &g_e1) == 0 &&
        conf_claim(cf, cf->c, g_th, g_r2, &g_e2) == 0 && thread_phases(cf, s, 0) == 0 &&
        ab_topic_thread_prefix(&topic, q.u.replay.thread, &err) == AB_OK) {
        s->below[0] = true; /* r1 seq 1 */
        r = seam_run(cf, s, topic.data, topic.len, &q, thread_phases);
    }
    ab_buf_free(&topic);
    seam_free(s);
    return r;
}

/* ---- scope all: after the position of seq 2 ------------------------------ */
static int all_phases(conf_t *cf, seam_t *s, int phase)
{
    static const uint64_t lo[] = {1, 4, 5}, hi[] = {3, 4, 6};
    return conf_publish_range(cf, g_th, g_r1, g_e1, lo[phase], hi[phase], &s->sent);
}

conf_result_t conf_check_replay_all(conf_t *cf)
{
    conf_result_t r;
    seam_t *s = seam_new(cf, "all", &r);
    if (!s)
        return r;
    ab_msg_t q = {.op = AB_OP_REPLAY, .u.replay = {.scope = AB_REPLAY_ALL}};
    r = CONF_FAIL;
    if (conf_claim(cf, cf->c, g_th, g_r1, &g_e1) == 0 && all_phases(cf, s, 0) == 0) {
        q.u.replay.after_pos = s->sent.pos[1];
        s->below[0] = s->below[1] = true;
        r = seam_run(cf, s, AB_TOPIC_EVENTS, AB_TOPIC_EVENTS_LEN, &q, all_phases);
    }
    seam_free(s);
    return r;
}

/*
 * producer.c - one writer of one run: claim, local validation, seq
 * assignment, a bounded outbox kept until acknowledged, batching, retries
 * with backoff and the failed state, which a gap answer enters too (see
 * agentbus/producer.h).
 *
 * Invariants:
 *  1. The outbox is a ring of ob_cap encoded envelopes; entry i (from
 *     ob_head) holds seq acked_seq + 1 + i, so next_seq == acked_seq + 1 +
 *     ob_n whenever the producer is claimed.
 *  2. ob_n <= batch (<= outbox_max): a publish that finds batch events
 *     pending sends them (one request in flight, waited for) before it
 *     appends, so memory is bounded by outbox_max envelopes. One request
 *     carries at most max_batch envelopes and, past its first, at most
 *     max_publish_bytes of them (with their packed lengths), the limits of
 *     the broker's welcome: a batch of large events goes in several.
 *  3. An event leaves the outbox only when the broker answered accepted or
 *     duplicate for it, or a gap answer proved it committed.
 *  4. Once failed, the producer keeps its first fatal error and every
 *     publish, claim and flush returns it; nothing more is sent.
 *  5. Every wait is bounded: requests by min(opts timeout, time left),
 *     backoff sleeps by the caller's deadline. A backoff delay is drawn
 *     from [d/2, d] of its exponential step d (jitter).
 */
#include "agentbus/producer.h"
#include "ab_common.h"

#include "agentbus/agui.h"
#include "agentbus/json.h"

#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

/* Returned by send_once() when a gap answer moved the outbox: send again now. */
#define RESEND_NOW AB_STATUS_COUNT_

struct ab_producer {
    ab_conn_t *conn;
    ab_producer_opts_t o;
    ab_limits_t lim;
    uint32_t batch; /* effective batch: min(batch_max, outbox_max, max_batch) */
    ab_doc_t *doc;  /* replies */
    ab_doc_t *vdoc; /* events being validated */
    ab_buf_t mp;    /* JSON -> msgpack scratch */
    char *thread;
    char *run;
    uint64_t epoch;
    uint64_t next_seq;
    uint64_t acked_seq;
    ab_buf_t *ob; /* ring of encoded envelopes (invariant 1) */
    ab_buf_t *view;
    uint32_t ob_cap, ob_head, ob_n;
    bool failed;
    ab_error_t fail;
    ab_producer_stats_t stats;
    uint64_t rng; /* the retry jitter's state */
};

static void sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Copy a whole error into the caller's (first error wins). */
static ab_status_t give(ab_error_t *err, const ab_error_t *e)
{
    if (err && err->code == AB_OK)
        *err = *e;
    return e->code;
}

static ab_status_t failed_code(const ab_producer_t *p, ab_error_t *err)
{
    return give(err, &p->fail);
}

static void fill_defaults(ab_producer_opts_t *o)
{
    if (!o->client_name)
        o->client_name = "agentbus-producer";
    if (o->outbox_max == 0)
        o->outbox_max = AB_PRODUCER_OUTBOX_DEFAULT;
    if (o->batch_max == 0)
        o->batch_max = AB_PRODUCER_BATCH_DEFAULT;
    if (o->timeout_ms <= 0)
        o->timeout_ms = AB_CONN_TIMEOUT_DEFAULT;
    if (o->backoff_base_ms <= 0)
        o->backoff_base_ms = AB_PRODUCER_BACKOFF_BASE_DEFAULT;
    if (o->backoff_max_ms <= 0)
        o->backoff_max_ms = AB_PRODUCER_BACKOFF_MAX_DEFAULT;
    if (o->max_retries == 0)
        o->max_retries = AB_PRODUCER_RETRIES_DEFAULT;
    if (o->max_retries < 0)
        o->max_retries = 0;
}

static uint32_t min_u32(uint32_t a, uint32_t b)
{
    return a < b ? a : b;
}

ab_status_t ab_producer_new(ab_producer_t **out, const char *endpoint,
                            const ab_producer_opts_t *opts, ab_error_t *err)
{
    if (!out || !endpoint)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "producer needs an endpoint");
    ab_producer_t *p = calloc(1, sizeof(*p));
    if (!p)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    if (opts)
        p->o = *opts;
    fill_defaults(&p->o);
    p->rng = ab__mono_seed((uint64_t)(uintptr_t)p);
    ab_conn_opts_t co = {
        .zmq_ctx = p->o.zmq_ctx, .client_name = p->o.client_name, .timeout_ms = p->o.timeout_ms};
    ab_status_t st = ab_conn_new(&p->conn, endpoint, &co, err);
    if (st != AB_OK) {
        ab_producer_destroy(&p);
        return st;
    }
    p->lim = *ab_conn_limits(p->conn);
    p->batch = min_u32(min_u32(p->o.batch_max, p->o.outbox_max), p->lim.max_batch);
    p->ob_cap = p->batch;
    p->ob = calloc(p->ob_cap, sizeof(*p->ob));
    p->view = calloc(p->ob_cap, sizeof(*p->view));
    if (!p->ob || !p->view || ab_doc_new(&p->doc) != AB_OK || ab_doc_new(&p->vdoc) != AB_OK) {
        ab_producer_destroy(&p);
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    }
    *out = p;
    return AB_OK;
}

void ab_producer_destroy(ab_producer_t **pp)
{
    if (!pp || !*pp)
        return;
    ab_producer_t *p = *pp;
    for (uint32_t i = 0; p->ob && i < p->ob_cap; i++)
        ab_buf_free(&p->ob[i]);
    free(p->ob);
    free(p->view);
    ab_buf_free(&p->mp);
    ab_doc_destroy(&p->doc);
    ab_doc_destroy(&p->vdoc);
    ab_conn_destroy(&p->conn);
    free(p->thread);
    free(p->run);
    free(p);
    *pp = NULL;
}

/* Enter the failed state with the broker's error @p e about event @p seq. */
static ab_status_t enter_failed(ab_producer_t *p, const ab_error_t *e, uint64_t seq,
                                ab_error_t *err)
{
    p->failed = true;
    p->fail = *e;
    if (p->fail.code == AB_OK)
        p->fail.code = AB_INTERNAL;
    if (seq && !ab_error_detail(&p->fail, "seq"))
        ab_error_detail_int(&p->fail, "seq", (int64_t)seq);
    return failed_code(p, err);
}

static void pop_acked(ab_producer_t *p, bool duplicate)
{
    p->ob_head = (p->ob_head + 1) % p->ob_cap;
    p->ob_n--;
    p->acked_seq++;
    p->stats.acked++;
    if (duplicate)
        p->stats.duplicates++;
}

/* A gap answer: the broker expects expected_seq. Under PROTOCOL.md 7.4.2
 * rule 4 that is below the rejected seq, which is acked_seq + 1 (results come
 * in outbox order): the broker lacks events it acknowledged, so the producer
 * fails with AB_GAP. The resend branch below (an expected_seq inside the
 * outbox: events before it committed, invariant 3) is unreachable with such
 * a broker; it is kept as the safe reading of a broker that answers so. */
static ab_status_t on_gap(ab_producer_t *p, const ab_error_t *e, uint64_t seq,
                          ab_error_t *retry_err, ab_error_t *err)
{
    const ab_error_detail_t *d = ab_error_detail(e, "expected_seq");
    if (!d || d->kind != AB_DETAIL_INT || d->i < 1 || (uint64_t)d->i <= p->acked_seq ||
        (uint64_t)d->i > p->acked_seq + 1 + p->ob_n)
        return enter_failed(p, e, seq, err); /* not recoverable from the outbox */
    while (p->acked_seq + 1 < (uint64_t)d->i)
        pop_acked(p, false);
    p->stats.gaps++;
    *retry_err = *e; /* reported if gaps keep coming until the retries run out */
    return RESEND_NOW;
}

/* Apply the results of a batch of @p n events sent from the outbox head. */
static ab_status_t apply_results(ab_producer_t *p, const ab_result_t *res, size_t n,
                                 ab_error_t *retry_err, ab_error_t *err)
{
    for (size_t i = 0; i < n; i++) {
        const ab_result_t *r = &res[i];
        if (r->seq != p->acked_seq + 1) {
            ab_error_t e = AB_ERROR_INIT;
            ab_error_set(&e, AB_INVALID_ENVELOPE, "results", "result for seq %llu, expected %llu",
                         (unsigned long long)r->seq, (unsigned long long)(p->acked_seq + 1));
            return enter_failed(p, &e, p->acked_seq + 1, err);
        }
        if (r->status != AB_RESULT_REJECTED) {
            pop_acked(p, r->status == AB_RESULT_DUPLICATE);
            continue;
        }
        ab_error_t e = AB_ERROR_INIT;
        if (r->error)
            e = *r->error;
        else
            ab_error_set(&e, AB_INTERNAL, NULL, "rejected without an error");
        if (e.code == AB_GAP)
            return on_gap(p, &e, r->seq, retry_err, err);
        if (e.retryable || ab_status_retryable(e.code)) {
            *retry_err = e;
            return e.code;
        }
        return enter_failed(p, &e, r->seq, err);
    }
    return AB_OK;
}

/* Send one batch from the outbox head and apply its answer. A retryable
 * failure is returned with its error in @p retry_err; fatal ones fail. */
static ab_status_t send_once(ab_producer_t *p, int timeout_ms, ab_error_t *retry_err,
                             ab_error_t *err)
{
    /* As many as fit the broker's limits: max_batch events and
     * max_publish_bytes of envelopes with their 4-byte packed lengths. */
    uint32_t n = 0;
    uint64_t bytes = 0;
    for (uint32_t max = min_u32(p->ob_n, p->batch); n < max; n++) {
        const ab_buf_t *b = &p->ob[(p->ob_head + n) % p->ob_cap];
        if (n > 0 && bytes + b->len + 4 > p->lim.max_publish_bytes)
            break;
        bytes += b->len + 4;
        p->view[n] = *b;
    }
    const ab_result_t *res = NULL;
    ab_error_t e = AB_ERROR_INIT;
    p->stats.batches++;
    ab_status_t st = ab_conn_publish(p->conn, p->view, n, p->doc, &res, timeout_ms, &e);
    if (st == AB_OK)
        return apply_results(p, res, n, retry_err, err);
    if (e.code == AB_OK)
        ab_error_set(&e, st, NULL, "%s", ab_status_str(st));
    if (e.retryable || ab_status_retryable(st)) {
        *retry_err = e;
        return st;
    }
    return enter_failed(p, &e, p->acked_seq + 1, err);
}

/* A delay drawn from [d - d/2, d] (splitmix64), so producers that failed
 * together do not retry in step (PROTOCOL.md 14.3). */
static int64_t jitter(ab_producer_t *p, int64_t d)
{
    uint64_t z = (p->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    int64_t half = d / 2;
    return d - half + (int64_t)(z % (uint64_t)(half + 1));
}

/* Send batches until the outbox holds fewer than @p keep events, retrying
 * retryable failures with backoff, all before @p deadline (monotonic ms). */
static ab_status_t drain(ab_producer_t *p, uint32_t keep, int64_t deadline, ab_error_t *err)
{
    int tries = 0;
    ab_error_t last = AB_ERROR_INIT;
    while (p->ob_n > 0 && p->ob_n >= keep) {
        int64_t left = deadline - ab__mono_ms();
        if (left <= 0) {
            if (last.code != AB_OK)
                return give(err, &last);
            return ab_error_set(err, AB_TIMEOUT, NULL, "%u events not acknowledged in time",
                                p->ob_n);
        }
        int tmo = left < p->o.timeout_ms ? (int)left : p->o.timeout_ms;
        ab_error_clear(&last);
        ab_status_t st = send_once(p, tmo, &last, err);
        if (st == AB_OK)
            tries = 0;
        else if (p->failed)
            return st;
        else if (tries >= p->o.max_retries)
            return give(err, &last);
        else {
            tries++;
            if (st == RESEND_NOW)
                continue;
            p->stats.retries++;
            int64_t delay = (int64_t)p->o.backoff_base_ms << (tries < 20 ? tries - 1 : 20);
            if (delay > p->o.backoff_max_ms)
                delay = p->o.backoff_max_ms;
            delay = jitter(p, delay);
            int64_t rest = deadline - ab__mono_ms();
            sleep_ms(delay < rest ? delay : rest);
        }
    }
    return AB_OK;
}

ab_status_t ab_producer_flush(ab_producer_t *p, int timeout_ms, ab_error_t *err)
{
    if (p->failed)
        return failed_code(p, err);
    int64_t deadline = ab__mono_ms() + (timeout_ms > 0 ? timeout_ms : p->o.timeout_ms);
    return drain(p, 1, deadline, err);
}

static char *dup_cstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Write run (@p thread, @p run) at @p epoch from here on, after @p last committed seqs. */
static ab_status_t take_run(ab_producer_t *p, const char *thread, const char *run, uint64_t epoch,
                            uint64_t last, ab_error_t *err)
{
    char *t = dup_cstr(thread), *r = dup_cstr(run);
    if (!t || !r) {
        free(t);
        free(r);
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    }
    free(p->thread);
    free(p->run);
    p->thread = t;
    p->run = r;
    p->epoch = epoch;
    p->acked_seq = last;
    p->next_seq = last + 1;
    return AB_OK;
}

ab_status_t ab_producer_claim(ab_producer_t *p, const char *thread, const char *run,
                              uint64_t *last_seq, ab_error_t *err)
{
    if (p->failed)
        return failed_code(p, err);
    if (!thread || !run)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "claim needs a thread and a run");
    if (p->ob_n > 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL,
                            "claim with %u unacknowledged events: flush first", p->ob_n);
    ab_claimed_t cl;
    ab_status_t st = ab_conn_claim(p->conn, thread, run, p->doc, &cl, p->o.timeout_ms, err);
    if (st != AB_OK)
        return st;
    st = take_run(p, thread, run, cl.epoch, cl.last_seq, err);
    if (st == AB_OK && last_seq)
        *last_seq = cl.last_seq;
    return st;
}

ab_status_t ab_producer_assigned(ab_producer_t *p, const char *thread, const char *run,
                                 uint64_t epoch, ab_error_t *err)
{
    if (p->failed)
        return failed_code(p, err);
    if (!thread || !run || epoch == 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL,
                            "an assignment names a thread, a run and an epoch >= 1");
    if (p->ob_n > 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL,
                            "assignment with %u unacknowledged events: flush first", p->ob_n);
    return take_run(p, thread, run, epoch, 0, err); /* assigned: nothing of it committed */
}

static bool str_is(ab_str_t s, const char *c)
{
    return s.ptr && s.len == strlen(c) && memcmp(s.ptr, c, s.len) == 0;
}

/* RUN_STARTED / RUN_FINISHED must name the claimed run. */
static ab_status_t check_ids(const ab_producer_t *p, const ab_agui_info_t *info, ab_error_t *err)
{
    if (info->thread_id.ptr && !str_is(info->thread_id, p->thread))
        return ab_error_set(err, AB_INVALID_EVENT, "/threadId",
                            "threadId differs from the claimed thread '%s'", p->thread);
    if (info->run_id.ptr && !str_is(info->run_id, p->run))
        return ab_error_set(err, AB_INVALID_EVENT, "/runId",
                            "runId differs from the claimed run '%s'", p->run);
    return AB_OK;
}

ab_status_t ab_producer_publish_val(ab_producer_t *p, const ab_val_t *body, ab_error_t *err)
{
    if (p->failed)
        return failed_code(p, err);
    if (!p->thread)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "publish before claim");
    if (!body || body->type != AB_VAL_MAP)
        return ab_error_set(err, AB_INVALID_EVENT, "", "an event is a map");
    ab_agui_info_t info;
    ab_status_t st = ab_agui_validate(body, AB_AGUI_STRICT, NULL, NULL, &info, err);
    if (st == AB_OK)
        st = check_ids(p, &info, err);
    if (st == AB_OK && p->ob_n >= p->batch) /* invariant 2: make room first */
        st = drain(p, p->batch, ab__mono_ms() + p->o.timeout_ms, err);
    if (st != AB_OK)
        return st;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    ab_event_t ev = {
        .v = ab_conn_version(p->conn), .seq = p->next_seq, .epoch = p->epoch, .body = body};
    ev.thread = (ab_str_t){p->thread, strlen(p->thread)};
    ev.run = (ab_str_t){p->run, strlen(p->run)};
    ev.ts = (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
    ab_buf_t *slot = &p->ob[(p->ob_head + p->ob_n) % p->ob_cap];
    ab_buf_reset(slot);
    if ((st = ab_event_encode(&ev, slot, err)) != AB_OK)
        return st;
    if (slot->len > p->lim.max_event_bytes)
        return ab_error_set(err, AB_TOO_LARGE, "",
                            "envelope of %zu bytes exceeds max_event_bytes %u", slot->len,
                            p->lim.max_event_bytes);
    p->ob_n++;
    p->next_seq++;
    p->stats.published++;
    if (p->ob_n > p->stats.outbox_peak)
        p->stats.outbox_peak = p->ob_n;
    return AB_OK;
}

ab_status_t ab_producer_publish_json(ab_producer_t *p, const char *json, size_t len,
                                     ab_error_t *err)
{
    if (p->failed)
        return failed_code(p, err);
    const ab_val_t *root = NULL;
    uint32_t depth = p->lim.max_depth > 1 ? p->lim.max_depth - 1 : 1; /* envelope is depth 1 */
    ab_buf_reset(&p->mp);
    ab_status_t st =
        ab_json_to_msgpack(json, len, depth, p->lim.max_event_bytes, AB_INVALID_EVENT, &p->mp, err);
    if (st == AB_OK)
        st = ab_doc_parse(p->vdoc, p->mp.data, p->mp.len, p->lim.max_event_bytes, depth,
                          AB_INVALID_EVENT, &root, err);
    if (st != AB_OK)
        return st;
    return ab_producer_publish_val(p, root, err);
}

ab_producer_stats_t ab_producer_stats(const ab_producer_t *p)
{
    ab_producer_stats_t s = p->stats;
    s.outbox = p->ob_n;
    return s;
}

uint64_t ab_producer_next_seq(const ab_producer_t *p)
{
    return p->thread ? p->next_seq : 0;
}

uint64_t ab_producer_epoch(const ab_producer_t *p)
{
    return p->epoch;
}

uint64_t ab_producer_acked_seq(const ab_producer_t *p)
{
    return p->acked_seq;
}

ab_conn_t *ab_producer_conn(ab_producer_t *p)
{
    return p->conn;
}

/*
 * subscriber.c - ab_sub_t: an exact, resumable subscription (see
 * agentbus/subscriber.h). This file holds the lifecycle (new, destroy,
 * reconnect) and the caller-driven loop; sub_sync.c holds the exactness
 * rules, sub_live.c the SUB socket, sub_state.c the containers.
 *
 * Invariants:
 *  1. Order of a (re)connection: hello, SUB subscribed, then a replay from
 *     the cursor before any live event is delivered (Clone pattern).
 *  2. The loop's priorities: reconnect, replay, drain the FIFO, then the
 *     heartbeat checks (behind, silent), then wait on the SUB. So a live
 *     event is never delivered while a replay is owed.
 *  3. Destroying sends nothing to the broker (a closed subscription never
 *     changes a run); sockets close with linger 0.
 *  4. Backoff: every failed reconnect attempt and every failed replay arms
 *     a delay before the next attempt or replay (ab__sub_backoff_arm: drawn
 *     from [c - c/2, c], c doubling per arm from reconnect_base_ms up to
 *     reconnect_max_ms). Proof that the connection works (a heartbeat of its
 *     broker instance, or a completed replay) disarms it and restarts the
 *     doubling (ab__sub_backoff_reset). So the first attempt after a working
 *     connection is immediate, and a stalled broker gets at most one hello
 *     per delay from each subscriber.
 */
#include "ab_common.h"
#include "sub_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static char *dup_str(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static ab_status_t check_opts(const ab_sub_opts_t *o, ab_error_t *err)
{
    if (!o || !o->on_event)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "on_event", "a callback is required");
    if (o->scope != AB_SUB_RUN && o->scope != AB_SUB_THREAD && o->scope != AB_SUB_ALL)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "scope", "scope must be run, thread or all");
    if (o->scope != AB_SUB_ALL && (!o->thread || !*o->thread))
        return ab_error_set(err, AB_INVALID_ARGUMENT, "thread", "a thread id is required");
    if (o->ordered && o->scope != AB_SUB_THREAD)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "ordered", "ordered is for scope thread");
    if (o->ordered && o->ncursors > 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "cursors",
                            "an ordered thread subscription's cursor is after_pos, not cursors");
    if (o->scope == AB_SUB_RUN && (!o->run || !*o->run))
        return ab_error_set(err, AB_INVALID_ARGUMENT, "run", "a run id is required");
    if (o->reconnect_base_ms < 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "reconnect_base_ms",
                            "reconnect_base_ms must be >= 0 (0 = the default)");
    if (o->reconnect_max_ms < 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "reconnect_max_ms",
                            "reconnect_max_ms must be >= 0 (0 = the default)");
    return AB_OK;
}

/* splitmix64: the jitter of the backoff (invariant 4). */
static uint64_t next_rand(ab_sub_t *s)
{
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void ab__sub_backoff_arm(ab_sub_t *s)
{
    uint32_t n = s->fails < 30 ? s->fails : 30;
    s->fails++;
    uint64_t c = (uint64_t)s->o.reconnect_base_ms << n;
    if (c > (uint64_t)s->o.reconnect_max_ms)
        c = (uint64_t)s->o.reconnect_max_ms;
    uint64_t half = c / 2;
    uint64_t delay = c - half + next_rand(s) % (half + 1); /* [c - c/2, c] */
    s->stats.backoff_ms = delay;
    s->retry_at_ms = ab__mono_ms() + (long)delay;
}

void ab__sub_backoff_reset(ab_sub_t *s)
{
    s->fails = 0;
    s->retry_at_ms = 0;
    s->stats.backoff_ms = 0;
}

/* Subscription prefix and the given cursor. */
static ab_status_t init_cursor(ab_sub_t *s, const ab_sub_opts_t *o, ab_error_t *err)
{
    ab_status_t rc;
    if (o->scope == AB_SUB_ALL) {
        s->last_pos = s->synced_pos = o->after_pos;
        rc = ab_buf_append(&s->topic, AB_TOPIC_EVENTS, AB_TOPIC_EVENTS_LEN);
    } else if (o->scope == AB_SUB_THREAD) {
        if (o->ordered)
            s->last_pos = s->synced_pos = o->after_pos;
        rc = ab_topic_thread_prefix(&s->topic, (ab_str_t){s->thread, strlen(s->thread)}, err);
        for (size_t i = 0; rc == AB_OK && i < o->ncursors; i++)
            rc = ab__sub_map_set(&s->map, o->cursors[i].run, strlen(o->cursors[i].run),
                                 o->cursors[i].after_seq);
    } else {
        rc = ab_topic_event(&s->topic, (ab_str_t){s->thread, strlen(s->thread)},
                            (ab_str_t){s->run, strlen(s->run)}, err);
        if (rc == AB_OK)
            rc = ab__sub_map_set(&s->map, s->run, strlen(s->run), o->after_seq);
    }
    if (rc == AB_NOMEM)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    return rc;
}

/* AB_SUB_FROM_NOW: the cursor is the broker's current heads. */
static ab_status_t start_now(ab_sub_t *s, ab_error_t *err)
{
    ab_status_t rc;
    if (s->o.scope == AB_SUB_ALL || s->o.ordered) {
        ab_pong_t p;
        rc = ab_conn_ping(s->conn, s->doc, &p, s->o.timeout_ms, err);
        if (rc == AB_OK)
            s->last_pos = s->synced_pos = p.head_pos;
        return rc;
    }
    ab_run_ref_t ref = {{s->thread, strlen(s->thread)}, {s->run, s->run ? strlen(s->run) : 0}};
    ab_heads_t q = {.thread = ref.thread};
    if (s->o.scope == AB_SUB_RUN)
        q = (ab_heads_t){.runs = &ref, .nruns = 1};
    ab_heads_reply_t h;
    rc = ab_conn_heads(s->conn, &q, s->doc, &h, s->o.timeout_ms, err);
    for (size_t i = 0; rc == AB_OK && i < h.nheads; i++)
        if (ab__sub_map_set(&s->map, h.heads[i].run.ptr, h.heads[i].run.len, h.heads[i].last_seq) !=
            AB_OK)
            rc = ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    if (rc == AB_OK)
        s->synced_pos = h.head_pos;
    return rc;
}

/* Drop the connection and make a new one (invariant 1). */
static ab_status_t reconnect(ab_sub_t *s, int wait_ms, ab_error_t *err)
{
    ab__sub_live_close(s);
    ab_conn_destroy(&s->conn);
    ab__sub_fifo_clear(&s->fifo);
    s->last_hb_ms = ab__mono_ms(); /* next attempt after another silence */
    ab_conn_opts_t co = {.zmq_ctx = s->ctx,
                         .client_name = "agentbus-sub",
                         .timeout_ms = wait_ms,
                         .key = s->o.key,
                         .server_key = s->o.server_key};
    ab_status_t rc = ab_conn_new(&s->conn, s->endpoint, &co, err);
    if (rc == AB_OK)
        rc = ab__sub_live_open(s, err);
    if (rc != AB_OK) {
        ab_conn_destroy(&s->conn);
        s->reconnect = true;
        return rc;
    }
    s->lim = *ab_conn_limits(s->conn);
    s->reconnect = false;
    s->need_replay = true;
    s->hb_head = 0;
    return AB_OK;
}

ab_status_t ab_sub_new(ab_sub_t **out, const char *endpoint, const ab_sub_opts_t *opts,
                       ab_error_t *err)
{
    ab_status_t rc = check_opts(opts, err);
    if (rc != AB_OK)
        return rc;
    ab_sub_t *s = calloc(1, sizeof(*s));
    if (!s)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    s->o = *opts;
    s->endpoint = dup_str(endpoint);
    s->thread = dup_str(opts->thread);
    s->run = dup_str(opts->run);
    s->o.thread = s->thread;
    s->o.run = s->run;
    s->o.cursors = NULL;
    s->o.ncursors = 0;
    if (opts->key) { /* both or neither: ab_conn_new() refuses one alone */
        s->key = *opts->key;
        s->o.key = &s->key;
    }
    if (opts->server_key) {
        snprintf(s->server_key, sizeof s->server_key, "%s", opts->server_key);
        s->o.server_key = s->server_key;
    }
    s->o.timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : 5000;
    s->o.silence_ms = opts->silence_ms > 0 ? opts->silence_ms : AB_SUB_SILENCE_DEFAULT_MS;
    s->o.reconnect_max_ms =
        opts->reconnect_max_ms > 0 ? opts->reconnect_max_ms : AB_SUB_RECONNECT_MAX_DEFAULT_MS;
    s->o.reconnect_base_ms =
        opts->reconnect_base_ms > 0 ? opts->reconnect_base_ms : AB_SUB_RECONNECT_BASE_DEFAULT_MS;
    if (s->o.reconnect_base_ms > s->o.reconnect_max_ms)
        s->o.reconnect_base_ms = s->o.reconnect_max_ms;
    s->rng = ab__mono_seed((uint64_t)getpid() << 16 ^ (uint64_t)(uintptr_t)s);
    s->fifo.max = opts->max_pending ? opts->max_pending : AB_SUB_MAX_PENDING_DEFAULT;
    s->ctx = opts->zmq_ctx;
    if (!s->ctx) {
        s->ctx = zmq_ctx_new();
        s->own_ctx = true;
    }
    if (!s->endpoint || (opts->thread && !s->thread) || (opts->run && !s->run) || !s->ctx ||
        ab_doc_new(&s->doc) != AB_OK || ab_doc_new(&s->edoc) != AB_OK ||
        ab_doc_new(&s->ldoc) != AB_OK)
        rc = ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    if (rc == AB_OK)
        rc = init_cursor(s, opts, err);
    if (rc == AB_OK)
        rc = reconnect(s, s->o.timeout_ms, err);
    if (rc == AB_OK && opts->start == AB_SUB_FROM_NOW)
        rc = start_now(s, err);
    if (rc != AB_OK) {
        ab_sub_destroy(&s);
        return rc;
    }
    *out = s;
    return AB_OK;
}

void ab_sub_destroy(ab_sub_t **sp)
{
    if (!sp || !*sp)
        return;
    ab_sub_t *s = *sp;
    ab__sub_live_close(s);
    ab_conn_destroy(&s->conn);
    if (s->own_ctx && s->ctx)
        zmq_ctx_term(s->ctx);
    ab__sub_fifo_free(&s->fifo);
    ab__sub_map_free(&s->map);
    ab_buf_free(&s->topic);
    ab_doc_destroy(&s->doc);
    ab_doc_destroy(&s->edoc);
    ab_doc_destroy(&s->ldoc);
    free(s->req_cursors);
    free(s->endpoint);
    free(s->thread);
    free(s->run);
    free(s);
    *sp = NULL;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* A reconnect or replay is owed but its backoff delay runs (invariant 4):
 * sleep until it ends or the poll's deadline, whichever is first. */
static ab_status_t backoff_wait(ab_sub_t *s, long now, long deadline, bool *waited, ab_error_t *err)
{
    long until = s->retry_at_ms < deadline ? s->retry_at_ms : deadline;
    if (until > now)
        sleep_ms(until - now);
    *waited = true; /* the poll's wait is spent here */
    if (ab__mono_ms() >= s->retry_at_ms)
        return AB_OK; /* due: the next step tries */
    if (!s->conn || s->reconnect)
        return ab_error_set(err, AB_UNAVAILABLE, NULL,
                            "broker %s unreachable; next reconnect attempt in %ld ms", s->endpoint,
                            s->retry_at_ms - ab__mono_ms());
    return AB_OK; /* connected, a replay owed: the poll may end quietly */
}

/* One reconnect attempt of the loop; a failed one arms the backoff (invariant 4). */
static ab_status_t attempt(ab_sub_t *s, long now, long deadline, ab_error_t *err)
{
    long left = deadline - now;
    s->stats.reconnects++;
    ab_status_t rc = reconnect(s,
                               left < 200               ? 200
                               : left > s->o.timeout_ms ? s->o.timeout_ms
                                                        : (int)left,
                               err);
    if (rc != AB_OK)
        ab__sub_backoff_arm(s);
    return rc;
}

/* One step of the loop (invariant 2). *waited is set when it waited on the SUB. */
static ab_status_t step(ab_sub_t *s, long deadline, bool *waited, ab_error_t *err)
{
    long now = ab__mono_ms();
    bool down = s->reconnect || !s->conn;
    if ((down || s->need_replay) && now < s->retry_at_ms) {
        if (down && s->conn) { /* abandoned: do not keep it while waiting */
            ab__sub_live_close(s);
            ab_conn_destroy(&s->conn);
        }
        return backoff_wait(s, now, deadline, waited, err);
    }
    if (down)
        return attempt(s, now, deadline, err);
    if (s->need_replay) {
        ab__sub_fifo_clear(&s->fifo); /* the replay covers them; live resumes after */
        ab_status_t rc = ab__sub_resync(s, err);
        *waited = *waited || ab__mono_ms() >= deadline;
        return rc;
    }
    if (s->fifo.n)
        return ab__sub_fifo_run(s, err);
    uint64_t known = s->o.scope == AB_SUB_ALL ? s->last_pos : s->synced_pos;
    if (s->hb_head > known) {
        s->need_replay = true; /* behind: a dropped tail */
        return AB_OK;
    }
    long silent_left = s->last_hb_ms + s->o.silence_ms - now;
    if (silent_left <= 0) {
        s->reconnect = true;
        return AB_OK;
    }
    long wait = deadline - now;
    if (*waited && wait <= 0)
        return AB_OK;
    wait = wait < 0 ? 0 : wait < silent_left ? wait : silent_left;
    *waited = true;
    s->live_err = err; /* steady state: deliver straight from the messages */
    s->live_rc = AB_OK;
    int n = ab__sub_live_drain(s, (int)wait);
    s->live_err = NULL;
    if (n < 0)
        s->reconnect = true;
    return s->live_rc;
}

ab_status_t ab_sub_poll(ab_sub_t *s, int timeout_ms, ab_error_t *err)
{
    long deadline = ab__mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    bool waited = false;
    s->stop = false;
    for (;;) {
        ab_status_t rc = step(s, deadline, &waited, err);
        if (s->stop)
            return ab_error_set(err, AB_REQUEST_ABORTED, NULL, "stopped by the callback");
        if (rc != AB_OK)
            return rc;
        if (waited && ab__mono_ms() >= deadline && !s->reconnect && !s->fifo.n)
            return AB_OK;
    }
}

size_t ab_sub_cursors(const ab_sub_t *s, const ab_sub_cursor_t **out)
{
    *out = s->map.ent;
    return s->map.n;
}

uint64_t ab_sub_position(const ab_sub_t *s)
{
    return s->last_pos;
}

ab_sub_stats_t ab_sub_stats(const ab_sub_t *s)
{
    return s->stats;
}

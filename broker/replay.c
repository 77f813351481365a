/*
 * replay.c - replay reader threads: stream committed events from a cursor
 * under credit-based flow control, each thread on its own read-only plugin
 * handle, so replays never block ingest.
 *
 * A session is one `replay` request (keyed by client identity + cid): its
 * cursor, its unused credit (chunks the client granted) and the events sent.
 *
 * Invariants:
 *  1. A `replay_chunk` is sent only while the session has credit; each chunk
 *     uses one. Credit never exceeds max_replay_window.
 *  2. Order: scope run by seq; scopes thread and all by commit position. The
 *     cursor advances past every row read, so no event is sent twice and
 *     none is skipped (thread scope skips exactly the rows at or below the
 *     request's per-run cursor).
 *  3. `replay_end` is sent when a read returns fewer rows than asked (caught
 *     up); its head_pos was read before that read, so every event up to
 *     head_pos has been sent (or was at or below the request's cursor).
 *  4. Bounds: at most AB_BROKER_SESSIONS_PER_READER sessions per thread
 *     (else `overloaded`); a session without credit for
 *     AB_BROKER_IDLE_REPLAY_MS ends with `timeout`; at most one chunk
 *     (chunk_events events) is built at a time, in one reused buffer.
 *  5. Every session ends with exactly one of replay_end or error
 *     (request_aborted on cancel, timeout, the store's error, or unavailable
 *     at shutdown). A credit or cancel arriving after that for one of the
 *     last RECENT_ENDED sessions is ignored; any other naming no running
 *     replay is answered not_found.
 *  6. A chunk is one frame of `count` records (stamp length, stamp, event
 *     length, event; lengths u32 big-endian): one ZeroMQ message per chunk
 *     instead of two per event, since the per-message cost of the inproc hop
 *     and the ROUTER bounded replay at ~0.85M events/s (docs/PROTOCOL.md 7.6).
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define IDLE_CHECK_MS 1000
#define RECENT_ENDED  256 /* ended sessions remembered to ignore late credit/cancel */

typedef struct session {
    ab_job_t *job; /**< the replay request: identity, cid, v, copied ids */
    uint64_t cursor_pos;
    uint64_t cursor_seq;
    uint32_t credits;
    uint64_t events;
    int64_t idle_since;
} session_t;

typedef struct reader {
    ab_broker_t *b;
    ab_plugin_db_t *db;
    void *sock;
    session_t *sessions[AB_BROKER_SESSIONS_PER_READER];
    size_t nsessions;
    bool stop;
    uint64_t recent[RECENT_ENDED]; /**< keys of recently ended sessions (0 = empty) */
    size_t recent_next;
    /* chunk being built */
    session_t *cur;
    ab_buf_t chunk;     /**< the records frame (invariant 6), reused */
    uint32_t nrec;      /**< records in chunk */
    ab_buf_t buf;       /**< header encoding */
    ab_error_t scratch; /**< row_cb's encode error: reset per row, never zeroed whole */
    ab_status_t cb_status;
} reader_t;

static void end_error(reader_t *r, session_t *s, ab_status_t code, const char *msg)
{
    ab_error_t e = AB_ERROR_INIT;
    ab_error_set(&e, code, "", "%s", msg);
    ab_reply_error(r->sock, &s->job->identity, s->job->v, s->job->cid, &e);
}

/* A session's key: FNV-1a of the client identity and the cid (never 0). */
static uint64_t session_key(ab_job_t *job)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = zmq_msg_data(&job->identity);
    for (size_t i = 0; i < zmq_msg_size(&job->identity); i++)
        h = (h ^ p[i]) * 1099511628211ull;
    for (int i = 0; i < 8; i++)
        h = (h ^ ((job->cid >> (8 * i)) & 0xff)) * 1099511628211ull;
    return h != 0 ? h : 1;
}

static bool recently_ended(const reader_t *r, uint64_t key)
{
    for (size_t i = 0; i < RECENT_ENDED; i++)
        if (r->recent[i] == key)
            return true;
    return false;
}

static void drop(reader_t *r, size_t i)
{
    r->recent[r->recent_next] = session_key(r->sessions[i]->job);
    r->recent_next = (r->recent_next + 1) % RECENT_ENDED;
    ab_job_free(r->sessions[i]->job);
    free(r->sessions[i]);
    r->sessions[i] = r->sessions[--r->nsessions];
}

static long find(reader_t *r, ab_job_t *job)
{
    size_t idlen = zmq_msg_size(&job->identity);
    for (size_t i = 0; i < r->nsessions; i++) {
        ab_job_t *s = r->sessions[i]->job;
        if (s->cid == job->cid && zmq_msg_size(&s->identity) == idlen &&
            memcmp(zmq_msg_data(&s->identity), zmq_msg_data(&job->identity), idlen) == 0)
            return (long)i;
    }
    return -1;
}

static uint32_t cap_credit(const reader_t *r, uint64_t c)
{
    uint64_t max = r->b->cfg->limits.max_replay_window;
    return (uint32_t)(c > max ? max : c);
}

static void start(reader_t *r, ab_job_t *job)
{
    session_t *s = NULL;
    if (find(r, job) >= 0) {
        ab_error_t e = AB_ERROR_INIT;
        ab_error_set(&e, AB_INVALID_ARGUMENT, "cid", "a replay with this cid is already running");
        ab_reply_error(r->sock, &job->identity, job->v, job->cid, &e);
    } else if (r->nsessions == AB_BROKER_SESSIONS_PER_READER) {
        ab_error_t e = AB_ERROR_INIT;
        ab_error_set(&e, AB_OVERLOADED, "", "too many replays running; retry later");
        ab_error_detail_int(&e, "limit", AB_BROKER_SESSIONS_PER_READER);
        ab_reply_error(r->sock, &job->identity, job->v, job->cid, &e);
    } else if ((s = calloc(1, sizeof(*s))) == NULL) {
        ab_error_t e = AB_ERROR_INIT;
        ab_error_set(&e, AB_NOMEM, "", "out of memory");
        ab_reply_error(r->sock, &job->identity, job->v, job->cid, &e);
    } else {
        s->job = job;
        s->cursor_pos = job->replay.scope == AB_REPLAY_ALL ? job->replay.after_pos : 0;
        s->cursor_seq = job->replay.after_seq;
        s->credits = cap_credit(r, job->replay.window);
        s->idle_since = ab_mono_ms();
        r->sessions[r->nsessions++] = s;
        return;
    }
    ab_job_free(job);
}

/*
 * credit or cancel for a running session. One for a session that just ended
 * (its replay_end or error is already on its way) is dropped silently: the
 * stream is over and an extra error would only confuse the client.
 */
static void steer(reader_t *r, ab_job_t *job)
{
    long i = find(r, job);
    if (i < 0 && recently_ended(r, session_key(job))) {
        ab_log(AB_LOG_DEBUG, "replay: %s for an ended replay (cid %llu) ignored",
               job->kind == AB_JOB_CREDIT ? "credit" : "cancel", (unsigned long long)job->cid);
    } else if (i < 0) {
        ab_error_t e = AB_ERROR_INIT;
        ab_error_set(&e, AB_NOT_FOUND, "cid", "no running replay with cid %llu",
                     (unsigned long long)job->cid);
        ab_reply_error(r->sock, &job->identity, job->v, job->cid, &e);
    } else if (job->kind == AB_JOB_CREDIT) {
        session_t *s = r->sessions[i];
        s->credits = cap_credit(r, (uint64_t)s->credits + job->chunks);
    } else {
        end_error(r, r->sessions[i], AB_REQUEST_ABORTED, "replay cancelled by the client");
        drop(r, (size_t)i);
    }
    ab_job_free(job);
}

static void on_job(reader_t *r, ab_job_t *job)
{
    switch (job->kind) {
    case AB_JOB_REPLAY: start(r, job); return;
    case AB_JOB_CREDIT:
    case AB_JOB_CANCEL: steer(r, job); return;
    case AB_JOB_SNAPSHOT: ab_reader_snapshot(r->b, r->db, r->sock, job); break;
    case AB_JOB_STOP: r->stop = true; break;
    default: break;
    }
    ab_job_free(job);
}

/* Cursor of @p run in a thread-scope request (0 = from the start). */
static uint64_t run_cursor(const ab_replay_t *rq, ab_str_t run)
{
    for (size_t i = 0; i < rq->ncursors; i++)
        if (rq->cursors[i].run.len == run.len &&
            memcmp(rq->cursors[i].run.ptr, run.ptr, run.len) == 0)
            return rq->cursors[i].after_seq;
    return 0;
}

/* Append one record (invariant 6) to the chunk; on failure the chunk is unchanged. */
static int add_record(reader_t *r, const ab_stamp_t *st, const void *ev, size_t len)
{
    ab_seq_error_reset(&r->scratch);
    if (ab_record_append(&r->chunk, st, ev, len, &r->scratch) != AB_OK)
        return -1;
    r->nrec++;
    return 0;
}

static int row_cb(void *ud, const ab_plugin_row_t *row)
{
    reader_t *r = ud;
    session_t *s = r->cur;
    s->cursor_pos = row->pos;
    s->cursor_seq = row->seq;
    const ab_replay_t *rq = &s->job->replay;
    if (rq->scope == AB_REPLAY_THREAD && row->seq <= run_cursor(rq, row->run))
        return 0;
    ab_stamp_t st = {.pos = row->pos, .time_us = row->commit_us};
    if (add_record(r, &st, row->bytes, row->len) != 0) {
        r->cb_status = AB_NOMEM;
        return 1;
    }
    return 0;
}

/* Buffer kept between chunks; a larger one (big events) is given back so an
 * idle reader does not hold up to 1 GiB after one replay of huge events. */
#define CHUNK_KEEP_BYTES (8u << 20)

static void clear_chunk(reader_t *r)
{
    if (r->chunk.cap > CHUNK_KEEP_BYTES)
        ab_buf_free(&r->chunk);
    ab_buf_reset(&r->chunk);
    r->nrec = 0;
}

static int send_chunk(reader_t *r, session_t *s)
{
    ab_msg_t m = {.op = AB_OP_REPLAY_CHUNK, .v = s->job->v, .cid = s->job->cid};
    ab_error_t e = AB_ERROR_INIT;
    uint32_t count = r->nrec;
    m.u.replay_chunk.count = count;
    m.u.replay_chunk.bytes = r->chunk.len;
    ab_buf_reset(&r->buf);
    zmq_msg_t frame;
    if (ab_msg_encode(&m, &r->buf, &e) != AB_OK || zmq_msg_init_size(&frame, r->chunk.len) != 0) {
        clear_chunk(r);
        return -1;
    }
    /* A copy, so the chunk buffer is reused: measured no slower than handing
     * ZeroMQ a fresh buffer per chunk (docs/PERFORMANCE.md). */
    memcpy(zmq_msg_data(&frame), r->chunk.data, r->chunk.len);
    clear_chunk(r);
    int rc = ab_reply_send(r->sock, &s->job->identity, &r->buf, &frame, 1);
    s->credits--;
    s->events += count;
    if (s->credits == 0)
        s->idle_since = ab_mono_ms();
    return rc;
}

static ab_status_t send_end(reader_t *r, session_t *s, uint64_t head_pos, ab_error_t *err)
{
    const ab_replay_t *rq = &s->job->replay;
    ab_headlist_t hl = {0};
    ab_status_t st = AB_OK;
    if (rq->scope == AB_REPLAY_RUN)
        st = ab_heads_add_run(r->b->plugin, r->db, &hl, rq->thread, rq->run, err);
    else if (rq->scope == AB_REPLAY_THREAD)
        st = ab_heads_add_thread(r->b->plugin, r->db, &hl, rq->thread, err);
    ab_head_t *view = st == AB_OK ? ab_heads_view(&hl) : NULL;
    if (st == AB_OK && hl.n > 0 && view == NULL)
        st = ab_error_set(err, AB_NOMEM, "", "out of memory");
    if (st == AB_OK) {
        ab_msg_t m = {.op = AB_OP_REPLAY_END, .v = s->job->v, .cid = s->job->cid};
        m.u.replay_end.head_pos = head_pos;
        m.u.replay_end.events = s->events;
        m.u.replay_end.heads = view;
        m.u.replay_end.nheads = hl.n;
        if (ab_reply_msg(r->sock, &s->job->identity, &m) != 0)
            st = ab_error_set(err, AB_INTERNAL, "", "cannot encode replay_end");
    }
    free(view);
    ab_headlist_free(&hl);
    return st;
}

/* Build and send one chunk (or the end). @return true when the session is over. */
static bool pump(reader_t *r, session_t *s)
{
    const ab_replay_t *rq = &s->job->replay;
    const ab_plugin_t *p = r->b->plugin;
    ab_error_t e = AB_ERROR_INIT;
    uint32_t want = rq->chunk_events ? rq->chunk_events : AB_CHUNK_EVENTS_DEFAULT;
    uint64_t head_pos = 0;
    bool caught_up = false;
    r->cur = s;
    r->cb_status = AB_OK;
    while (!caught_up && r->nrec < want) {
        ab_plugin_read_t req = {.scope = rq->scope, .thread = rq->thread, .run = rq->run};
        req.after_seq = s->cursor_seq;
        req.after_pos = s->cursor_pos;
        req.limit = want - r->nrec;
        uint32_t got = 0;
        if (p->head_pos(r->db, &head_pos, &e) != AB_OK ||
            p->read(r->db, &req, row_cb, r, &got, &e) != AB_OK)
            goto failed;
        if (r->cb_status != AB_OK) {
            ab_error_set(&e, r->cb_status, "", "out of memory building a replay chunk");
            goto failed;
        }
        caught_up = got < req.limit;
    }
    if (r->nrec > 0 && send_chunk(r, s) != 0)
        ab_log(AB_LOG_DEBUG, "replay: cannot hand a chunk to the command thread");
    if (!caught_up)
        return false;
    if (send_end(r, s, head_pos, &e) == AB_OK)
        return true;
failed:
    clear_chunk(r);
    ab_reply_error(r->sock, &s->job->identity, s->job->v, s->job->cid, &e);
    return true;
}

static void expire_idle(reader_t *r)
{
    int64_t now = ab_mono_ms();
    for (size_t i = 0; i < r->nsessions;) {
        session_t *s = r->sessions[i];
        if (s->credits == 0 && now - s->idle_since >= AB_BROKER_IDLE_REPLAY_MS) {
            end_error(r, s, AB_TIMEOUT, "replay dropped: no credit for 60 s");
            drop(r, i);
        } else {
            i++;
        }
    }
}

/* One chunk for every session with credit (round robin). @return sessions still with credit. */
static size_t pump_all(reader_t *r)
{
    size_t ready = 0;
    for (size_t i = 0; i < r->nsessions;) {
        session_t *s = r->sessions[i];
        if (s->credits > 0 && pump(r, s)) {
            drop(r, i);
            continue;
        }
        ready += s->credits > 0;
        i++;
    }
    return ready;
}

void *ab_reader_main(void *arg)
{
    ab_reader_args_t *a = arg;
    reader_t r = {.b = a->b, .db = a->db, .sock = a->sock};
    char name[16];
    snprintf(name, sizeof(name), "ab-reader-%u", a->index);
    ab_thread_name(name);
    size_t ready = 0;
    while (!r.stop) {
        zmq_pollitem_t it = {.socket = r.sock, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, ready > 0 ? 0 : IDLE_CHECK_MS) < 0)
            continue;
        ab_job_t *job;
        while (!r.stop && (job = ab_job_recv(r.sock, ZMQ_DONTWAIT)) != NULL)
            on_job(&r, job);
        if (r.stop)
            break;
        ready = pump_all(&r);
        expire_idle(&r);
    }
    while (r.nsessions > 0) {
        end_error(&r, r.sessions[0], AB_UNAVAILABLE, "broker is shutting down");
        drop(&r, 0);
    }
    zmq_send(r.sock, "", 0, 0); /* "stopped" */
    zmq_close(r.sock);
    ab_buf_free(&r.chunk);
    ab_buf_free(&r.buf);
    return NULL;
}

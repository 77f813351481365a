/*
 * replay.c - replay reader threads: stream committed events from a cursor
 * under credit-based flow control, each thread on its own read-only plugin
 * handle, so replays never block ingest. The sessions, the connections they
 * belong to and the memory bounds live in the reader's book
 * (replay_book.c, replay_int.h).
 *
 * Invariants:
 *  1. A `replay_chunk` is sent only while the session has room
 *     (ab__rb_room): credit, unread bytes below its byte window, and unread
 *     bytes of the whole broker below --replay-mib. A chunk holds at most
 *     chunk_events events and, after its first event, no more bytes than
 *     that room (and CHUNK_MAX_BYTES).
 *  2. Order: scope run by seq; scopes thread and all by commit position. The
 *     cursor advances past every row read, so no event is sent twice and
 *     none is skipped (thread scope skips exactly the rows at or below the
 *     request's per-run cursor; its optional after_pos is where the first
 *     read starts, ab_replay_read).
 *  3. `replay_end` is sent when a read returns fewer rows than asked and the
 *     chunk was not cut short by its byte room (caught up); its head_pos
 *     was read before that read, so every event up to head_pos has been sent
 *     (or was at or below the request's cursor).
 *  4. At most one chunk is built at a time, in one reused buffer that is
 *     given back when it grew past CHUNK_KEEP_BYTES.
 *  5. A chunk is one frame of `count` records (stamp length, stamp, event
 *     length, event; lengths u32 big-endian): one ZeroMQ message per chunk
 *     instead of two per event, since the per-message cost of the inproc hop
 *     and the ROUTER bounded replay at ~0.85M events/s (docs/PROTOCOL.md 7.6).
 *  6. One turn of a session (pump) reads at most PUMP_ROWS_MAX rows, the rows
 *     a thread replay's cursors skip included: then it sends what it has (or
 *     nothing) and the reader takes its jobs and serves its other sessions
 *     before the next turn, so a replay that skips most of a long thread does
 *     not hold the reader (round robin, docs/PROTOCOL.md 7.6.1 step 5). A
 *     turn that read rows counts as progress for end_starved (sent_ms).
 */
#include "ab_common.h"
#include "replay_int.h"

#include <stdlib.h>
#include <string.h>

#define IDLE_CHECK_MS    1000
#define CHUNK_MAX_BYTES  (1u << 20) /* a chunk closes past this (after its first event) */
#define CHUNK_KEEP_BYTES (8u << 20) /* a chunk buffer grown past this is given back */
#define PUMP_ROWS_MAX    4096u      /* rows one turn of a session may read (invariant 6) */

typedef struct reader {
    ab__shared_t *b;
    ab_plugin_db_t *db;
    ab__rbook_t book;
    bool stop;
    int64_t next_tick;
    /* chunk being built */
    ab__rsession_t *cur;
    uint64_t room;      /**< bytes the chunk may reach (invariant 1) */
    bool full;          /**< the chunk reached its room: not caught up */
    ab_buf_t chunk;     /**< the records frame (invariant 5), reused */
    uint32_t nrec;      /**< records in chunk */
    ab_buf_t buf;       /**< header encoding */
    ab_error_t scratch; /**< row_cb's encode error: clear, set only by a failure, then cleared */
    ab_status_t cb_status;
    ab_doc_t *doc; /**< decodes an envelope that may be broker-authored (made when first needed) */
} reader_t;

static void on_job(reader_t *r, ab_job_t *job)
{
    switch (job->kind) {
    case AB_JOB_REPLAY: ab__rb_start(&r->book, job); return;
    case AB_JOB_CREDIT:
    case AB_JOB_CANCEL: ab__rb_steer(&r->book, job); return;
    case AB_JOB_GONE:
    case AB_JOB_UNDELIVERED: ab__rb_refused(&r->book, job); return;
    case AB_JOB_SNAPSHOT: ab__reader_snapshot(r->b, r->db, r->book.sock, job); break;
    case AB_JOB_THREADS: ab__reader_threads(r->b, r->db, r->book.sock, job); break;
    case AB_JOB_STOP: r->stop = true; break;
    default: break;
    }
    ab__job_free(job);
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

/* Append one record (invariant 5) to the chunk; on failure the chunk is unchanged. */
static int add_record(reader_t *r, const ab_stamp_t *st, const void *ev, size_t len)
{
    if (ab_record_append(&r->chunk, st, ev, len, &r->scratch) != AB_OK) {
        ab_error_clear(&r->scratch); /* clear again for the next row */
        return -1;
    }
    r->nrec++;
    return 0;
}

/* Whether the @p n bytes at @p b hold the @p kn bytes of @p k. */
static bool has_bytes(const uint8_t *b, size_t n, const char *k, size_t kn)
{
    for (size_t i = 0; i + kn <= n; i++) {
        const uint8_t *p = memchr(b + i, k[0], n - kn + 1 - i);
        if (p == NULL)
            return false;
        i = (size_t)(p - b);
        if (memcmp(p, k, kn) == 0)
            return true;
    }
    return false;
}

/* The stamp's author of a stored envelope: only the broker writes RUN_ERROR codes of
 * AB_BROKER_CODE_PREFIX (PROTOCOL.md section 5), so events without the bytes RUN_ERROR
 * are skipped by a byte scan (its first byte, 'R', is rare in event text) and the rest
 * are decoded to be sure. */
static ab_author_t author_of(reader_t *r, const uint8_t *b, size_t n)
{
    static const char k[] = "RUN_ERROR";
    if (!has_bytes(b, n, k, sizeof(k) - 1) || (!r->doc && ab_doc_new(&r->doc) != AB_OK))
        return AB_AUTHOR_PRODUCER;
    ab_limits_t lim = ab__limits_stored(); /* events the broker stored */
    ab_event_t ev;
    if (ab_event_decode(r->doc, b, n, &lim, &ev, NULL) != AB_OK)
        return AB_AUTHOR_PRODUCER;
    ab_author_t a = ab_event_by_broker(ev.body) ? AB_AUTHOR_BROKER : AB_AUTHOR_PRODUCER;
    ab_doc_reset(r->doc);
    return a;
}

static int row_cb(void *ud, const ab_row_t *row)
{
    reader_t *r = ud;
    ab__rsession_t *s = r->cur;
    s->from.after_pos = row->pos;
    s->from.after_seq = row->seq;
    const ab_replay_t *rq = &s->job->replay;
    if (rq->scope == AB_REPLAY_THREAD && row->seq <= run_cursor(rq, row->run))
        return 0;
    ab_stamp_t st = {
        .pos = row->pos, .time_us = row->commit_us, .author = author_of(r, row->bytes, row->len)};
    if (add_record(r, &st, row->bytes, row->len) != 0) {
        r->cb_status = AB_NOMEM;
        return 1;
    }
    if (r->chunk.len >= r->room) {
        r->full = true; /* invariant 1: this row is the chunk's last */
        return 1;
    }
    return 0;
}

static void clear_chunk(reader_t *r)
{
    if (r->chunk.cap > CHUNK_KEEP_BYTES)
        ab_buf_free(&r->chunk);
    ab_buf_reset(&r->chunk);
    r->nrec = 0;
}

static int send_chunk(reader_t *r, ab__rsession_t *s)
{
    ab_msg_t m = {.op = AB_OP_REPLAY_CHUNK, .v = s->job->v, .cid = s->job->cid};
    ab_error_t e = AB_ERROR_INIT;
    uint32_t count = r->nrec, bytes = (uint32_t)r->chunk.len;
    m.u.replay_chunk.count = count;
    m.u.replay_chunk.bytes = bytes;
    ab_buf_reset(&r->buf);
    zmq_msg_t frame;
    if (ab_msg_encode(&m, &r->buf, &e) != AB_OK || zmq_msg_init_size(&frame, bytes) != 0) {
        clear_chunk(r);
        return -1;
    }
    /* A copy, so the chunk buffer is reused: measured no slower than handing
     * ZeroMQ a fresh buffer per chunk (docs/PERFORMANCE.md). */
    memcpy(zmq_msg_data(&frame), r->chunk.data, bytes);
    clear_chunk(r);
    if (ab__reply_send(r->book.sock, &s->job->identity, &r->buf, &frame, 1) != 0)
        return -1;
    ab__rb_sent(&r->book, s, bytes);
    s->events += count;
    return 0;
}

static ab_status_t send_end(reader_t *r, ab__rsession_t *s, uint64_t head_pos, ab_error_t *err)
{
    const ab_replay_t *rq = &s->job->replay;
    ab_headlist_t hl = {0};
    ab_status_t st = AB_OK;
    if (rq->scope == AB_REPLAY_RUN)
        st = ab__heads_add_run(r->b->plugin, r->db, &hl, rq->thread, rq->run, err);
    else if (rq->scope == AB_REPLAY_THREAD)
        st = ab__heads_add_newest(r->b->plugin, r->db, &hl, rq->thread, AB__REPLAY_END_HEADS, err);
    ab_head_t *view = st == AB_OK ? ab__heads_view(&hl) : NULL;
    if (st == AB_OK && hl.n > 0 && view == NULL)
        st = ab_error_set(err, AB_NOMEM, "", "out of memory");
    if (st == AB_OK) {
        ab_msg_t m = {.op = AB_OP_REPLAY_END, .v = s->job->v, .cid = s->job->cid};
        m.u.replay_end.head_pos = head_pos;
        m.u.replay_end.events = s->events;
        m.u.replay_end.heads = view;
        m.u.replay_end.nheads = hl.n;
        if (ab__reply_msg(r->book.sock, &s->job->identity, &m) != 0)
            st = ab_error_set(err, AB_INTERNAL, "", "cannot encode replay_end");
    }
    free(view);
    ab__headlist_free(&hl);
    return st;
}

/* Build and send one chunk (or the end) within @p room bytes. A chunk that cannot be handed
 * on ends the session with an error: its rows are read, so going on would skip them. */
static void pump(reader_t *r, ab__rsession_t *s, uint64_t room)
{
    const ab_replay_t *rq = &s->job->replay;
    const ab_plugin_t *p = r->b->plugin;
    ab_error_t e = AB_ERROR_INIT;
    uint32_t want = rq->chunk_events ? rq->chunk_events : AB_CHUNK_EVENTS_DEFAULT;
    uint64_t head_pos = 0, rows = 0;
    bool caught_up = false;
    r->cur = s;
    r->room = room < CHUNK_MAX_BYTES ? room : CHUNK_MAX_BYTES;
    r->full = false;
    r->cb_status = AB_OK;
    while (!caught_up && !r->full && r->nrec < want && rows < PUMP_ROWS_MAX) {
        ab_read_t req = s->from;
        req.limit = want - r->nrec;
        uint32_t got = 0;
        if (p->head_pos(r->db, &head_pos, &e) != AB_OK ||
            p->read(r->db, &req, row_cb, r, &got, &e) != AB_OK)
            goto failed;
        if (r->cb_status != AB_OK) {
            ab_error_set(&e, r->cb_status, "", "out of memory building a replay chunk");
            goto failed;
        }
        caught_up = !r->full && got < req.limit;
        rows += got;
    }
    if (r->nrec > 0 && send_chunk(r, s) != 0) { /* its rows are read: the session cannot go on */
        ab_error_set(&e, AB_NOMEM, "", "out of memory handing on a replay chunk");
        goto failed;
    }
    s->sent_ms = ab__mono_ms(); /* a chunk, or rows skipped: progress (invariant 6) */
    if (!caught_up)
        return;
    if (send_end(r, s, head_pos, &e) == AB_OK) {
        ab__rb_ended(&r->book, s);
        return;
    }
failed:
    clear_chunk(r);
    ab__reply_error(r->book.sock, &s->job->identity, s->job->v, s->job->cid, &e);
    ab__rb_ended(&r->book, s);
}

/* One chunk for every session with room (round robin). @return sessions that had room. */
static size_t pump_all(reader_t *r)
{
    size_t ready = 0;
    ab__rbook_t *bk = &r->book;
    for (size_t i = 0; i < bk->ns; i++) {
        ab__rsession_t *s = bk->s[i];
        uint64_t room = ab__rb_room(bk, s);
        if (room == 0)
            continue;
        ready++;
        pump(r, s, room);
        if (i < bk->ns && bk->s[i] != s)
            i--; /* s was freed and the last session moved into its place */
    }
    return ready;
}

void *ab__reader_main(void *arg)
{
    ab_reader_args_t *a = arg;
    reader_t r = {.b = a->b, .db = a->db, .book = {.b = a->b, .sock = a->sock}};
    char name[16];
    snprintf(name, sizeof(name), "ab-reader-%u", a->index);
    ab__thread_start(name, a->b->cfg->log_level, a->b->cfg->log_json);
    size_t ready = 0;
    while (!r.stop) {
        zmq_pollitem_t it = {.socket = r.book.sock, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, ready > 0 ? 0 : IDLE_CHECK_MS) < 0)
            continue;
        ab_job_t *job;
        while (!r.stop && (job = ab__job_recv(r.book.sock, ZMQ_DONTWAIT)) != NULL)
            on_job(&r, job);
        if (r.stop)
            break;
        ready = pump_all(&r);
        int64_t now = ab__mono_ms();
        if (now >= r.next_tick) {
            ab__rb_tick(&r.book, now);
            r.next_tick = now + IDLE_CHECK_MS;
        }
    }
    ab__rb_close(&r.book);
    zmq_send(r.book.sock, "", 0, 0); /* "stopped" */
    zmq_close(r.book.sock);
    ab_buf_free(&r.chunk);
    ab_buf_free(&r.buf);
    ab_doc_destroy(&r.doc);
    return NULL;
}

/*
 * replay_book.c - the replay sessions of one reader thread, the connections
 * they belong to, and the bounds on what they may leave unread
 * (replay_int.h describes the model; docs/OPERATIONS.md states the bounds).
 *
 * Invariants:
 *  1. A session's unread bytes are the sum of its ring: the sizes of the
 *     chunks sent and not yet credited, oldest first. A peer's unread bytes
 *     are the sum over its sessions; ab__shared_t.replay_unread is the sum
 *     over every reader's peers. All three move together, in rb_count().
 *  2. ring_n + credits <= max_replay_window: a chunk is sent only with
 *     credit, and a credit first releases a ring entry (so the ring never
 *     overflows).
 *  3. Slots: a session holds one of its peer's and one of the broker's
 *     (ab__shared_t.replay_slots) from start until it is freed, which is when
 *     it has ended and its ring is empty, or when its connection is gone.
 *  4. A peer exists while it has a slot; freeing its last session frees it.
 *  5. Every running session ends with exactly one replay_end or error
 *     (docs/PROTOCOL.md 7.6.2), except when its connection is gone, where
 *     nothing can be sent.
 *  6. A chunk the ROUTER dropped at the connection's full queue (UNDELIVERED)
 *     ends its running session with `overloaded` (AB__RB_DROPPED): the client
 *     never receives that chunk nor credits it, so continuing would deliver
 *     the events after it past a hole, and its credit would be lost for good.
 *     The command thread drops the session's later chunks and turns an end
 *     already on its way into that error (cmd_drops.c).
 */
#include "ab_common.h"
#include "cmd_drops.h"
#include "replay_int.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#define PROBE_MS      5000      /* between liveness probes of a stalled connection */
#define TRIM_BYTES    (8 << 20) /* give the heap back to the system after this much ... */
#define TRIM_EVERY_MS 1000      /* ... at most this often */

/* ---- keys and lookups --------------------------------------------------- */

/* zmq_msg_size/zmq_msg_data take non-const messages, so these do too. */
static bool same_id(zmq_msg_t *a, zmq_msg_t *b)
{
    size_t n = zmq_msg_size(a);
    return n == zmq_msg_size(b) && memcmp(zmq_msg_data(a), zmq_msg_data(b), n) == 0;
}

/* A session's key: FNV-1a of the client identity and the cid (never 0). */
static uint64_t session_key(ab_job_t *job)
{
    uint64_t h = ab__fnv64(zmq_msg_data(&job->identity), zmq_msg_size(&job->identity));
    h = ab__fnv64_more(h, &job->cid, sizeof job->cid);
    return h != 0 ? h : 1;
}

static bool recently_ended(const ab__rbook_t *bk, uint64_t key)
{
    for (size_t i = 0; i < AB__RB_RECENT; i++)
        if (bk->recent[i] == key)
            return true;
    return false;
}

static ab__rpeer_t *find_peer(ab__rbook_t *bk, ab_job_t *job)
{
    for (size_t i = 0; i < bk->np; i++)
        if (same_id(&bk->p[i]->id, &job->identity))
            return bk->p[i];
    return NULL;
}

/* The session of (connection, cid): a running one first, else a tail. */
static ab__rsession_t *find_session(ab__rbook_t *bk, ab_job_t *job)
{
    ab__rsession_t *tail = NULL;
    for (size_t i = 0; i < bk->ns; i++) {
        ab__rsession_t *s = bk->s[i];
        if (s->job->cid != job->cid || !same_id(&s->job->identity, &job->identity))
            continue;
        if (!s->ended)
            return s;
        tail = s;
    }
    return tail;
}

/* ---- counting (invariant 1) ----------------------------------------------- */

static void rb_count(ab__rbook_t *bk, ab__rsession_t *s, int64_t delta)
{
    ab__rpeer_t *p = s->peer;
    if (delta > 0 && p->unread == 0)
        p->owing_since_ms = ab__mono_ms();
    s->unread = (uint64_t)((int64_t)s->unread + delta);
    p->unread = (uint64_t)((int64_t)p->unread + delta);
    atomic_fetch_add(&bk->b->replay_unread, delta);
    if (delta < 0)
        bk->released -= delta;
}

/* Release the @p k oldest unread chunks of @p s. */
static void release_oldest(ab__rbook_t *bk, ab__rsession_t *s, uint32_t k)
{
    for (; k > 0 && s->ring_n > 0; k--) {
        rb_count(bk, s, -(int64_t)s->ring[s->ring_head]);
        s->ring_head = (s->ring_head + 1) % s->ring_cap;
        s->ring_n--;
    }
}

/* Release the newest unread chunk of @p s of @p bytes (or the newest one). */
static void release_one(ab__rbook_t *bk, ab__rsession_t *s, uint32_t bytes)
{
    if (s->ring_n == 0)
        return;
    uint32_t at = s->ring_n - 1;
    for (uint32_t i = s->ring_n; i-- > 0;)
        if (s->ring[(s->ring_head + i) % s->ring_cap] == bytes) {
            at = i;
            break;
        }
    rb_count(bk, s, -(int64_t)s->ring[(s->ring_head + at) % s->ring_cap]);
    for (uint32_t i = at; i + 1 < s->ring_n; i++)
        s->ring[(s->ring_head + i) % s->ring_cap] = s->ring[(s->ring_head + i + 1) % s->ring_cap];
    s->ring_n--;
}

/* ---- freeing (invariants 3, 4) -------------------------------------------- */

static void free_peer(ab__rbook_t *bk, ab__rpeer_t *p)
{
    for (size_t i = 0; i < bk->np; i++)
        if (bk->p[i] == p) {
            bk->p[i] = bk->p[--bk->np];
            break;
        }
    zmq_msg_close(&p->id);
    free(p);
}

static void free_session(ab__rbook_t *bk, size_t i)
{
    ab__rsession_t *s = bk->s[i];
    ab__rpeer_t *p = s->peer;
    rb_count(bk, s, -(int64_t)s->unread);
    bk->recent[bk->recent_next] = session_key(s->job);
    bk->recent_next = (bk->recent_next + 1) % AB__RB_RECENT;
    bk->s[i] = bk->s[--bk->ns];
    atomic_fetch_sub(&bk->b->replay_slots, 1);
    if (--p->slots == 0)
        free_peer(bk, p);
    ab__job_free(s->job);
    free(s->ring);
    free(s);
}

static size_t index_of(const ab__rbook_t *bk, const ab__rsession_t *s)
{
    for (size_t i = 0; i < bk->ns; i++)
        if (bk->s[i] == s)
            return i;
    return bk->ns;
}

void ab__rb_ended(ab__rbook_t *bk, ab__rsession_t *s)
{
    s->ended = true;
    if (s->ring_n == 0)
        free_session(bk, index_of(bk, s));
}

/* Send `error` @p code (message @p fmt/@p ap, detail limit when > 0) for @p job. */
static void send_error(ab__rbook_t *bk, ab_job_t *job, ab_status_t code, const char *field,
                       int64_t limit, const char *fmt, va_list ap)
{
    ab_error_t e = AB_ERROR_INIT;
    char msg[AB_ERROR_MESSAGE_MAX];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    ab_error_set(&e, code, field, "%s", msg);
    if (limit > 0)
        ab_error_detail_int(&e, "limit", limit);
    ab__reply_error(bk->sock, &job->identity, job->v, job->cid, &e);
}

static void fail_session(ab__rbook_t *bk, ab__rsession_t *s, ab_status_t code, const char *fmt, ...)
    AB_PRINTF(4, 5);
static void fail_session(ab__rbook_t *bk, ab__rsession_t *s, ab_status_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    send_error(bk, s->job, code, "", 0, fmt, ap);
    va_end(ap);
    ab__rb_ended(bk, s);
}

/* ---- starting --------------------------------------------------------------- */

static void refuse(ab__rbook_t *bk, ab_job_t *job, ab_status_t code, const char *field,
                   int64_t limit, const char *fmt, ...) AB_PRINTF(6, 7);
static void refuse(ab__rbook_t *bk, ab_job_t *job, ab_status_t code, const char *field,
                   int64_t limit, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    send_error(bk, job, code, field, limit, fmt, ap);
    va_end(ap);
    ab__job_free(job);
}

/* Why @p job may not start now (an answer was sent), or false. */
static bool refused_start(ab__rbook_t *bk, ab_job_t *job, const ab__rpeer_t *p)
{
    const ab_broker_config_t *cfg = bk->b->cfg;
    ab__rsession_t *same = find_session(bk, job);
    if (same != NULL && !same->ended) {
        refuse(bk, job, AB_INVALID_ARGUMENT, "cid", 0, "a replay with this cid is already running");
    } else if (p != NULL && p->stalled) {
        refuse(bk, job, AB_OVERLOADED, "", 0,
               "this connection has left %llu bytes of replay chunks unread for over %u s:"
               " read (and credit) them first",
               (unsigned long long)p->unread, cfg->replay_idle_s);
    } else if (p != NULL && p->slots >= cfg->replays_per_conn) {
        refuse(bk, job, AB_OVERLOADED, "", cfg->replays_per_conn,
               "this connection has %u replays open or unread (the limit); retry when one has"
               " ended and its chunks are read",
               p->slots);
    } else if (atomic_load(&bk->b->replay_slots) >= (int64_t)cfg->replays) {
        refuse(bk, job, AB_OVERLOADED, "", cfg->replays,
               "the broker has %u replays open or unread (the limit); retry later", cfg->replays);
    } else {
        return false;
    }
    return true;
}

/* Room for one more element (of @p size bytes) in the array @p v of @p n,
 * capacity *@p cap: @return the array (maybe moved), NULL when out of memory. */
static void *room_for_one(void *v, size_t n, size_t *cap, size_t size)
{
    return ab__grow(v, cap, n + 1, size, 16);
}

static ab__rpeer_t *new_peer(ab__rbook_t *bk, ab_job_t *job)
{
    ab__rpeer_t **grown = room_for_one(bk->p, bk->np, &bk->cap_p, sizeof(*bk->p));
    if (grown == NULL)
        return NULL;
    bk->p = grown;
    ab__rpeer_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    zmq_msg_init(&p->id);
    zmq_msg_copy(&p->id, &job->identity);
    bk->p[bk->np++] = p;
    return p;
}

static ab__rsession_t *new_session(ab__rbook_t *bk, ab_job_t *job)
{
    ab__rsession_t **grown = room_for_one(bk->s, bk->ns, &bk->cap_s, sizeof(*bk->s));
    if (grown == NULL)
        return NULL;
    bk->s = grown;
    ab__rsession_t *s = calloc(1, sizeof(*s));
    uint32_t window = bk->b->cfg->limits.max_replay_window;
    if (s != NULL && (s->ring = calloc(window, sizeof(*s->ring))) == NULL) {
        free(s);
        s = NULL;
    }
    if (s == NULL)
        return NULL;
    s->ring_cap = window;
    s->job = job;
    return s;
}

void ab__rb_start(ab__rbook_t *bk, ab_job_t *job)
{
    ab__rpeer_t *p = find_peer(bk, job);
    if (refused_start(bk, job, p))
        return;
    ab__rpeer_t *fresh = p == NULL ? new_peer(bk, job) : NULL;
    ab__rsession_t *s = (p != NULL || fresh != NULL) ? new_session(bk, job) : NULL;
    if (s == NULL) {
        if (fresh != NULL)
            free_peer(bk, fresh);
        refuse(bk, job, AB_NOMEM, "", 0, "out of memory");
        return;
    }
    const ab_limits_t *lim = &bk->b->cfg->limits;
    const ab_replay_t *rq = &job->replay;
    s->peer = p != NULL ? p : fresh;
    s->from = ab_replay_read(rq, 1); /* the limit is set per read */
    s->credits = rq->window < lim->max_replay_window ? rq->window : lim->max_replay_window;
    s->window_bytes = rq->window_bytes > 0 && rq->window_bytes < lim->max_replay_bytes
                          ? rq->window_bytes
                          : lim->max_replay_bytes;
    s->peer->slots++;
    s->peer->active_ms = s->sent_ms = ab__mono_ms();
    atomic_fetch_add(&bk->b->replay_slots, 1);
    bk->s[bk->ns++] = s;
    static const char *const scopes[] = {"?", "run", "thread", "all"};
    ab__log(AB_LOG_DEBUG, "replay opened (cid %llu): scope %s%s%.*s, window %u chunks",
            (unsigned long long)job->cid,
            scopes[rq->scope >= AB_REPLAY_RUN && rq->scope <= AB_REPLAY_ALL ? rq->scope : 0],
            rq->thread.len ? " thread " : "", (int)rq->thread.len,
            rq->thread.ptr ? rq->thread.ptr : "", s->credits);
}

/* ---- credit, cancel, refusals ----------------------------------------------- */

static void credit(ab__rbook_t *bk, ab__rsession_t *s, uint32_t chunks)
{
    uint32_t max = bk->b->cfg->limits.max_replay_window;
    uint32_t released = chunks < s->ring_n ? chunks : s->ring_n;
    release_oldest(bk, s, chunks);
    ab__rpeer_t *p = s->peer;
    p->owing_since_ms = p->active_ms = ab__mono_ms();
    if (p->stalled && released > 0) {
        p->stalled = false;
        ab__log(AB_LOG_INFO, "replay: a stalled connection reads again");
    }
    if (!s->ended) {
        uint64_t c = (uint64_t)s->credits + chunks;
        s->credits = (uint32_t)(c > max ? max : c);
    } else if (s->ring_n == 0) {
        free_session(bk, index_of(bk, s));
    }
}

void ab__rb_steer(ab__rbook_t *bk, ab_job_t *job)
{
    ab__rsession_t *s = find_session(bk, job);
    if (s != NULL && job->kind == AB_JOB_CREDIT) {
        credit(bk, s, job->chunks);
    } else if (s != NULL && !s->ended) {
        ab__log(AB_LOG_DEBUG, "replay cancelled by the client (cid %llu)",
                (unsigned long long)job->cid);
        fail_session(bk, s, AB_REQUEST_ABORTED, "replay cancelled by the client");
    } else if (s != NULL || recently_ended(bk, session_key(job))) {
        ab__log(AB_LOG_DEBUG, "replay: %s for an ended replay (cid %llu) ignored",
                job->kind == AB_JOB_CREDIT ? "credit" : "cancel", (unsigned long long)job->cid);
    } else {
        ab_error_t e = AB_ERROR_INIT;
        ab_error_set(&e, AB_NOT_FOUND, "cid", "no running replay with cid %llu",
                     (unsigned long long)job->cid);
        ab__reply_error(bk->sock, &job->identity, job->v, job->cid, &e);
    }
    ab__job_free(job);
}

/* Free every session of @p p, answering none (its connection is gone). */
static void drop_peer(ab__rbook_t *bk, ab__rpeer_t *p)
{
    uint32_t slots = p->slots;
    for (size_t i = bk->ns; slots > 0 && i-- > 0;)
        if (bk->s[i]->peer == p) {
            slots--;
            free_session(bk, i); /* frees p with its last session */
        }
}

void ab__rb_refused(ab__rbook_t *bk, ab_job_t *job)
{
    ab__rpeer_t *p = find_peer(bk, job);
    if (p != NULL && job->kind == AB_JOB_GONE) {
        ab__log(AB_LOG_DEBUG, "replay: a connection with %u replays and %llu unread bytes is gone",
                p->slots, (unsigned long long)p->unread);
        drop_peer(bk, p);
    } else if (p != NULL) {
        ab__rsession_t *s = find_session(bk, job);
        if (s != NULL)
            release_one(bk, s, (uint32_t)job->bytes);
        if (s != NULL && !s->ended) /* invariant 6: nothing may follow the hole */
            fail_session(bk, s, AB_OVERLOADED, "%s", AB__RB_DROPPED);
        else if (s != NULL && s->ring_n == 0)
            free_session(bk, index_of(bk, s));
    }
    ab__job_free(job);
}

/* ---- sending -------------------------------------------------------------------- */

uint64_t ab__rb_room(const ab__rbook_t *bk, const ab__rsession_t *s)
{
    int64_t budget = (int64_t)bk->b->cfg->replay_mib << 20;
    int64_t total = atomic_load(&bk->b->replay_unread);
    if (s->ended || s->credits == 0 || s->unread >= s->window_bytes || total >= budget)
        return 0;
    uint64_t room = s->window_bytes - s->unread;
    return room < (uint64_t)(budget - total) ? room : (uint64_t)(budget - total);
}

void ab__rb_sent(ab__rbook_t *bk, ab__rsession_t *s, uint32_t bytes)
{
    s->ring[(s->ring_head + s->ring_n) % s->ring_cap] = bytes;
    s->ring_n++;
    s->credits--;
    rb_count(bk, s, bytes);
    s->peer->active_ms = s->sent_ms = ab__mono_ms();
}

/* ---- once a second ------------------------------------------------------------------ */

static void stall(ab__rbook_t *bk, ab__rpeer_t *p)
{
    uint32_t idle = bk->b->cfg->replay_idle_s;
    p->stalled = true;
    ab__log(AB_LOG_INFO,
            "replay: a connection left %llu bytes of replay chunks unread for %u s: its %u"
            " replays are cancelled until it reads",
            (unsigned long long)p->unread, idle, p->slots);
    for (size_t i = bk->ns; i-- > 0;) {
        ab__rsession_t *s = bk->s[i];
        if (s->peer == p && !s->ended)
            fail_session(bk, s, AB_TIMEOUT,
                         "replay dropped: this connection left %llu bytes of chunks unread (no"
                         " credit) for %u s",
                         (unsigned long long)p->unread, idle);
    }
}

/* An unsolicited pong with cid 0 (docs/PROTOCOL.md 7.6.2): if the connection
 * is gone the ROUTER refuses it and the command thread says so (GONE). */
static void probe(ab__rbook_t *bk, ab__rpeer_t *p, int64_t now)
{
    ab_msg_t m = {.op = AB_OP_PONG, .v = AB_PROTOCOL_VERSION, .cid = 0};
    m.u.pong.instance = (ab_str_t){bk->b->instance, strlen(bk->b->instance)};
    m.u.pong.head_pos = atomic_load(&bk->b->head_pos);
    ab__reply_msg(bk->sock, &p->id, &m);
    p->next_probe_ms = now + PROBE_MS;
}

static void trim_heap(ab__rbook_t *bk, int64_t now)
{
    if (bk->released < TRIM_BYTES || now - bk->last_trim_ms < TRIM_EVERY_MS)
        return;
#ifdef __GLIBC__
    malloc_trim(0); /* chunks are freed by ZeroMQ's I/O thread; give the pages back */
#endif
    bk->released = 0;
    bk->last_trim_ms = now;
}

/* End the running sessions that had credit and room of their own but could
 * send nothing for @p idle_ms: the broker's replay bytes were at the limit. */
static void end_starved(ab__rbook_t *bk, int64_t now, int64_t idle_ms)
{
    uint32_t mib = bk->b->cfg->replay_mib;
    for (size_t i = bk->ns; i-- > 0;) {
        ab__rsession_t *s = bk->s[i];
        if (s->ended || s->credits == 0 || s->unread >= s->window_bytes ||
            now - s->sent_ms < idle_ms)
            continue;
        ab__log(AB_LOG_WARN, "replay: a replay waited %lld s for replay memory (%u MiB in use)",
                (long long)(idle_ms / 1000), mib);
        fail_session(bk, s, AB_OVERLOADED,
                     "the broker's replay memory (%u MiB) is held by clients that do not read;"
                     " retry later",
                     mib);
    }
}

void ab__rb_tick(ab__rbook_t *bk, int64_t now)
{
    int64_t idle_ms = (int64_t)bk->b->cfg->replay_idle_s * 1000;
    end_starved(bk, now, idle_ms);
    for (size_t i = bk->np; i-- > 0;) {
        ab__rpeer_t *p = bk->p[i];
        if (i >= bk->np || bk->p[i] != p)
            continue; /* freed by an earlier step */
        if (!p->stalled && p->unread > 0 && now - p->owing_since_ms >= idle_ms) {
            stall(bk, p);
            if (i >= bk->np || bk->p[i] != p)
                continue; /* every session ended and was read */
        }
        if ((p->stalled || now - p->active_ms >= idle_ms) && now >= p->next_probe_ms)
            probe(bk, p, now);
    }
    trim_heap(bk, now);
}

void ab__rb_close(ab__rbook_t *bk)
{
    while (bk->ns > 0) {
        ab__rsession_t *s = bk->s[bk->ns - 1];
        if (!s->ended) {
            ab_error_t e = AB_ERROR_INIT;
            ab_error_set(&e, AB_UNAVAILABLE, "", "broker is shutting down");
            ab__reply_error(bk->sock, &s->job->identity, s->job->v, s->job->cid, &e);
        }
        free_session(bk, bk->ns - 1);
    }
    free(bk->s);
    free(bk->p);
    bk->s = NULL;
    bk->p = NULL;
}

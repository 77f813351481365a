/*
 * cmd.c - the command thread: owns the ROUTER command endpoint, decodes every
 * request, answers the ones it can (hello, ping, errors), hands the rest to
 * the writer (publish, claim, heads) or to a replay reader (replay, credit,
 * cancel, snapshot, threads) and forwards their answers to the clients.
 *
 * Invariants:
 *  1. Every request gets an answer or a typed `error` echoing its cid (when
 *     it could be read): undecodable headers, wrong frame counts, a full
 *     queue, unsupported ops and requests during shutdown alike.
 *  2. Sends on the ROUTER never block (ZMQ_SNDTIMEO 0, ROUTER_MANDATORY): a
 *     reply to a slow or vanished client is dropped and logged at debug.
 *  3. Events in flight (publish events plus writer jobs) never exceed
 *     cfg->queue: only this thread adds to ab__shared_t.in_flight, and it
 *     checks the bound before adding; the writer subtracts when it answers.
 *  4. A replay's credit and cancel reach the reader that owns it: the reader
 *     is chosen by a hash of the connection's identity, so every replay of
 *     one connection lives on one reader (which enforces the per-connection
 *     replay bounds). A reader's message that the ROUTER refuses is reported
 *     back to that reader: the connection is gone (EHOSTUNREACH), or its
 *     queue is full and a replay_chunk was dropped (EAGAIN), so the reader's
 *     count of unread replay bytes stays exact. Nothing of a stream that lost
 *     a chunk reaches its client after the hole but its end, as an error
 *     (cmd_drops.c).
 *  5. Envelope frames are moved into the publish job, never copied.
 *  6. With keys, every request is authorized (authz.c) against the
 *     principal of the key that authenticated its connection (ZeroMQ's
 *     User-Id, set by zap.c), looked up in this thread's table before the
 *     request goes anywhere; each event of a publish is checked on its own
 *     thread id. A reload (SIGHUP) replaces the table between two requests.
 *  7. The lone path (writer.c invariant 7): a publish of at most
 *     AB__LONE_EVENTS_MAX events is committed on this thread when the writer
 *     waits for work, has received every job this thread sent it (wsent
 *     against b->wjobs_taken) and no other request waits on the ROUTER; the
 *     writer's answers already queued are forwarded first, so the answers of
 *     one connection never overtake each other.
 *  8. The loop waits with zpoll.h, which asks a socket for input only when
 *     it may have some: after each pass the sockets this thread used are
 *     marked (touch_used); a socket used without being marked could hold
 *     input that no wake-up announces.
 */
#include "ab_common.h"
#include "authz.h"
#include "cmd_int.h"
#include "internal.h"
#include "loader.h"
#include "workers.h"
#include "zpoll.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void ab__cmd_reply_error(cmd_t *c, zmq_msg_t *id, uint32_t v, uint64_t cid, const ab_error_t *e)
{
    if (ab__reply_error(c->router, id, v, cid, e) != 0)
        ab__log(AB_LOG_DEBUG, "dropped an error reply (cid %llu): %s", (unsigned long long)cid,
                zmq_strerror(zmq_errno()));
}

static void reply_code(cmd_t *c, zmq_msg_t *id, uint32_t v, uint64_t cid, ab_status_t code,
                       const char *field, const char *msg)
{
    ab_error_t e = AB_ERROR_INIT;
    ab_error_set(&e, code, field, "%s", msg);
    ab__cmd_reply_error(c, id, v, cid, &e);
}

static void reply(cmd_t *c, zmq_msg_t *id, const ab_msg_t *m)
{
    if (ab__reply_msg(c->router, id, m) != 0)
        ab__log(AB_LOG_DEBUG, "dropped a %s reply (cid %llu): %s", ab_op_name(m->op),
                (unsigned long long)m->cid, zmq_strerror(zmq_errno()));
}

ab_job_t *ab__cmd_job_new(ab_job_kind_t kind, zmq_msg_t *id, const ab_msg_t *m)
{
    ab_job_t *job = calloc(1, sizeof(*job));
    if (job == NULL)
        return NULL;
    job->kind = kind;
    zmq_msg_init(&job->identity);
    if (id != NULL)
        zmq_msg_copy(&job->identity, id);
    job->v = m != NULL ? m->v : 0;
    job->cid = m != NULL ? m->cid : 0;
    return job;
}

static void welcome(cmd_t *c, zmq_msg_t *id, const ab_msg_t *m)
{
    size_t nours = 0;
    const uint32_t *ours = ab_versions_supported(&nours);
    uint32_t chosen = 0;
    ab_error_t e = AB_ERROR_INIT;
    if (ab_version_negotiate(ours, nours, m->u.hello.versions, m->u.hello.nversions, &chosen, &e) !=
        AB_OK) {
        if (e.code != AB_INCOMPATIBLE_VERSION)
            e.code = AB_INVALID_ENVELOPE;
        if (e.field[0] == '\0')
            snprintf(e.field, sizeof(e.field), "versions");
        ab__cmd_reply_error(c, id, 0, m->cid, &e);
        return;
    }
    /* durableThreadSnapshots (PROTOCOL.md 7.8): "available" only when the
     * plugin stores snapshots (snapshot_put/get), the snapshot worker runs,
     * and they are stored at run ends AND every
     * --snapshot-every N events (N > 0); otherwise an answer may fold many
     * events: "degraded". The SNAPSHOT answer itself is always current. */
    const ab_plugin_t *pl = c->b->plugin;
    bool stored =
        pl->snapshot_put != NULL && pl->snapshot_get != NULL && !atomic_load(&c->b->snap_failed);
    ab_cap_state_t snaps =
        stored && c->b->cfg->snapshot_every > 0 ? AB_CAP_AVAILABLE : AB_CAP_DEGRADED;
    /* dispatch (PROTOCOL.md 7.12): requests are stored by the plugin; a request is
     * accepted (queued) with no worker live, so "available" needs no worker */
    ab_cap_state_t disp = !ab__plugin_dispatches(pl)            ? AB_CAP_UNSUPPORTED
                          : atomic_load(&c->b->dispatch_failed) ? AB_CAP_UNAVAILABLE
                                                                : AB_CAP_AVAILABLE;
    const ab_cap_t caps[] = {
        {AB_CAP_PUBLISH, sizeof(AB_CAP_PUBLISH) - 1, AB_CAP_AVAILABLE},
        {AB_CAP_REPLAY, sizeof(AB_CAP_REPLAY) - 1, AB_CAP_AVAILABLE},
        {AB_CAP_HEADS, sizeof(AB_CAP_HEADS) - 1, AB_CAP_AVAILABLE},
        {AB_CAP_HEARTBEAT, sizeof(AB_CAP_HEARTBEAT) - 1, AB_CAP_AVAILABLE},
        {AB_CAP_DURABLE_SNAPSHOTS, sizeof(AB_CAP_DURABLE_SNAPSHOTS) - 1, snaps},
        {AB_CAP_PACKED_PUBLISH, sizeof(AB_CAP_PACKED_PUBLISH) - 1, AB_CAP_AVAILABLE},
        {AB_CAP_ACTIONS, sizeof(AB_CAP_ACTIONS) - 1,
         ab__workers_any_actions(c->wk) ? AB_CAP_AVAILABLE : AB_CAP_UNAVAILABLE},
        {AB_CAP_DISPATCH, sizeof(AB_CAP_DISPATCH) - 1, disp},
        {AB_CAP_CANCEL_RUN, sizeof(AB_CAP_CANCEL_RUN) - 1, disp},
        {AB_CAP_RESUME_RUN, sizeof(AB_CAP_RESUME_RUN) - 1, disp},
        {AB_CAP_THREADS, sizeof(AB_CAP_THREADS) - 1,
         ab_plugin_has(pl, threads_list) ? AB_CAP_AVAILABLE : AB_CAP_UNSUPPORTED},
    };
    ab_msg_t w = {.op = AB_OP_WELCOME, .v = chosen, .cid = m->cid};
    w.u.welcome.instance = (ab_str_t){c->b->instance, strlen(c->b->instance)};
    w.u.welcome.event_endpoint = (ab_str_t){c->b->events_ep, strlen(c->b->events_ep)};
    w.u.welcome.limits = c->b->cfg->limits;
    w.u.welcome.caps = caps;
    w.u.welcome.ncaps = sizeof(caps) / sizeof(caps[0]);
    ab__access_view_t view;
    if (c->who != NULL) {
        ab__access_describe(c->who, &view);
        w.u.welcome.access = &view.v;
    }
    reply(c, id, &w);
}

static void pong(cmd_t *c, zmq_msg_t *id, const ab_msg_t *m)
{
    ab_msg_t p = {.op = AB_OP_PONG, .v = m->v, .cid = m->cid};
    p.u.pong.instance = (ab_str_t){c->b->instance, strlen(c->b->instance)};
    p.u.pong.head_pos = atomic_load(&c->b->head_pos);
    reply(c, id, &p);
}

/* Reserve @p weight events and @p bytes in the ingest queue; false (and
 * `overloaded` sent) when either bound would be passed. */
static bool queue_reserve(cmd_t *c, zmq_msg_t *id, const ab_msg_t *m, int64_t weight, int64_t bytes)
{
    int64_t now = atomic_load(&c->b->in_flight);
    int64_t now_bytes = atomic_load(&c->b->in_flight_bytes);
    int64_t max_bytes = (int64_t)c->b->cfg->queue_mib << 20;
    ab_error_t e = AB_ERROR_INIT;
    if (now + weight > (int64_t)c->b->cfg->queue) {
        ab_error_set(&e, AB_OVERLOADED, "",
                     "ingest queue is full (%lld of %u events in flight); retry later",
                     (long long)now, c->b->cfg->queue);
        ab_error_detail_int(&e, "limit", c->b->cfg->queue);
    } else if (bytes > 0 && now_bytes + bytes > max_bytes) {
        ab_error_set(&e, AB_OVERLOADED, "",
                     "ingest queue is full (%lld of %lld bytes in flight); retry later",
                     (long long)now_bytes, (long long)max_bytes);
        ab_error_detail_int(&e, "limit_bytes", max_bytes);
    } else {
        atomic_fetch_add(&c->b->in_flight, weight);
        atomic_fetch_add(&c->b->in_flight_bytes, bytes);
        return true;
    }
    ab__cmd_reply_error(c, id, m->v, m->cid, &e);
    return false;
}

/* Send @p job to the writer and count it (invariant 7). @return 0 or -1 (still owned). */
static int send_writer(cmd_t *c, ab_job_t *job)
{
    if (ab__job_send(c->wsock, job) != 0)
        return -1;
    c->wsent++;
    return 0;
}

/* Send @p job to the reader at @p sock. @return 0 or -1 (still owned). */
int ab__cmd_send_reader(cmd_t *c, void *sock, ab_job_t *job)
{
    c->rsent = true;
    return ab__job_send(sock, job);
}

/* Hand @p job to the writer (queue already reserved); frees it on failure. */
static void to_writer(cmd_t *c, zmq_msg_t *id, ab_job_t *job)
{
    if (send_writer(c, job) == 0)
        return;
    atomic_fetch_sub(&c->b->in_flight, job->weight);
    atomic_fetch_sub(&c->b->in_flight_bytes, job->bytes);
    reply_code(c, id, job->v, job->cid, AB_INTERNAL, "", "cannot reach the writer thread");
    ab__job_free(job);
}

/* Copy @p n strings into one block owned by @p job; dst[i] point into it. */
static bool copy_strings(ab_job_t *job, const ab_str_t *src, ab_str_t **dst, size_t n)
{
    size_t total = 1;
    for (size_t i = 0; i < n; i++)
        total += src[i].len + 1;
    job->strings = malloc(total);
    if (job->strings == NULL)
        return false;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(job->strings + off, src[i].ptr, src[i].len);
        job->strings[off + src[i].len] = '\0';
        *dst[i] = (ab_str_t){job->strings + off, src[i].len};
        off += src[i].len + 1;
    }
    return true;
}

static void claim_or_heads(cmd_t *c, zmq_msg_t *id, const ab_msg_t *m)
{
    ab_job_t *job = ab__cmd_job_new(m->op == AB_OP_CLAIM ? AB_JOB_CLAIM : AB_JOB_HEADS, id, m);
    bool ok = job != NULL;
    if (ok && m->op == AB_OP_CLAIM) {
        ab_str_t src[2] = {m->u.claim.thread, m->u.claim.run};
        ab_str_t *dst[2] = {&job->thread, &job->run};
        ok = copy_strings(job, src, dst, 2);
    } else if (ok && m->u.heads.thread.ptr != NULL) {
        ab_str_t *dst[1] = {&job->thread};
        ok = copy_strings(job, &m->u.heads.thread, dst, 1);
    } else if (ok) {
        size_t n = m->u.heads.nruns;
        job->refs = calloc(n, sizeof(*job->refs));
        ab_str_t *src = calloc(2 * n, sizeof(*src));
        ab_str_t **dst = calloc(2 * n, sizeof(*dst));
        ok = job->refs != NULL && src != NULL && dst != NULL;
        for (size_t i = 0; ok && i < n; i++) {
            src[2 * i] = m->u.heads.runs[i].thread;
            src[2 * i + 1] = m->u.heads.runs[i].run;
            dst[2 * i] = &job->refs[i].thread;
            dst[2 * i + 1] = &job->refs[i].run;
        }
        ok = ok && copy_strings(job, src, dst, 2 * n);
        job->nrefs = n;
        free(src);
        free(dst);
    }
    if (!ok) {
        ab__job_free(job);
        reply_code(c, id, m->v, m->cid, AB_NOMEM, "", "out of memory");
        return;
    }
    job->weight = 1;
    if (!queue_reserve(c, id, m, job->weight, 0)) {
        ab__job_free(job);
        return;
    }
    to_writer(c, id, job);
}

/* The reader of a request: by connection alone for replay, credit and cancel
 * (invariant 4: a connection's replays live on one reader, which keeps its
 * per-connection bounds), by connection and cid for snapshot (spread). */
static uint32_t reader_for(cmd_t *c, zmq_msg_t *id, const ab_msg_t *m)
{
    uint64_t h = ab__fnv64(zmq_msg_data(id), zmq_msg_size(id));
    if (m->op == AB_OP_SNAPSHOT || m->op == AB_OP_THREADS)
        h = ab__fnv64_more(h, &m->cid, sizeof m->cid);
    return (uint32_t)(h % c->nreaders);
}

static bool copy_replay(ab_job_t *job, const ab_replay_t *r)
{
    job->replay = *r;
    job->replay.cursors = NULL;
    size_t n = r->ncursors;
    ab_str_t *src = calloc(n + 2, sizeof(*src));
    ab_str_t **dst = calloc(n + 2, sizeof(*dst));
    job->cursors = calloc(n + 1, sizeof(*job->cursors));
    bool ok = src != NULL && dst != NULL && job->cursors != NULL;
    if (ok) {
        src[0] = r->thread.ptr != NULL ? r->thread : (ab_str_t){"", 0};
        src[1] = r->run.ptr != NULL ? r->run : (ab_str_t){"", 0};
        dst[0] = &job->replay.thread;
        dst[1] = &job->replay.run;
        for (size_t i = 0; i < n; i++) {
            job->cursors[i] = r->cursors[i];
            src[i + 2] = r->cursors[i].run;
            dst[i + 2] = &job->cursors[i].run;
        }
        ok = copy_strings(job, src, dst, n + 2);
        job->replay.cursors = job->cursors;
    }
    free(src);
    free(dst);
    return ok;
}

static void to_reader(cmd_t *c, zmq_msg_t *id, const ab_msg_t *m)
{
    ab_job_kind_t kind = m->op == AB_OP_REPLAY     ? AB_JOB_REPLAY
                         : m->op == AB_OP_CREDIT   ? AB_JOB_CREDIT
                         : m->op == AB_OP_SNAPSHOT ? AB_JOB_SNAPSHOT
                                                   : AB_JOB_CANCEL;
    ab_job_t *job = ab__cmd_job_new(kind, id, m);
    bool ok = job != NULL;
    if (ok && kind == AB_JOB_REPLAY)
        ok = copy_replay(job, &m->u.replay);
    if (ok && kind == AB_JOB_SNAPSHOT) {
        ab_str_t src = m->u.snapshot.thread;
        ab_str_t *dst = &job->thread;
        ok = copy_strings(job, &src, &dst, 1);
    }
    if (ok && kind == AB_JOB_CREDIT)
        job->chunks = m->u.credit.chunks;
    if (!ok) {
        ab__job_free(job);
        reply_code(c, id, m->v, m->cid, AB_NOMEM, "", "out of memory");
        return;
    }
    if (ab__cmd_send_reader(c, c->rsocks[reader_for(c, id, m)], job) != 0) {
        reply_code(c, id, m->v, m->cid, AB_INTERNAL, "", "cannot reach the replay reader");
        ab__job_free(job);
    }
}

/* `threads`: to a reader (spread by connection and cid, as snapshot), with the prefixes
 * this key may list (threads_cmd.c). */
static void threads_request(cmd_t *c, zmq_msg_t *id, const ab_msg_t *m)
{
    ab_job_t *job = ab__cmd_job_new(AB_JOB_THREADS, id, m);
    if (job == NULL || !ab__threads_job(job, c->acc != NULL ? c->who : NULL, &m->u.threads)) {
        ab__job_free(job);
        reply_code(c, id, m->v, m->cid, AB_NOMEM, "", "out of memory");
        return;
    }
    if (ab__cmd_send_reader(c, c->rsocks[reader_for(c, id, m)], job) != 0) {
        reply_code(c, id, m->v, m->cid, AB_INTERNAL, "", "cannot reach the replay reader");
        ab__job_free(job);
    }
}

/* Decode and validate envelope @p i of a publish job into its item. */
static void decode_item(cmd_t *c, ab_job_t *job, uint32_t i)
{
    ab_seq_item_t *it = &job->items[i];
    ab_error_t *e = &it->err;        /* written in place: the result's error on the wire */
    const uint8_t *data = it->bytes; /* set by recv_frames / recv_packed */
    size_t len = it->len;
    it->ev = NULL;
    it->info = NULL;
    it->status = (ab_result_status_t)0;
    it->pos = 0;
    ab_error_clear(e);
    if (ab_event_decode(job->doc, data, len, &c->b->cfg->limits, &job->evs[i], e) == AB_OK) {
        it->ev = &job->evs[i];
        if (c->acc != NULL && !ab__authorize_event(c->who, job->evs[i].thread, e)) {
            it->status = AB_RESULT_REJECTED; /* invariant 6 */
            e->cid = job->cid;
            return;
        }
        if (job->evs[i].v != job->v) {
            ab_error_set(e, AB_INCOMPATIBLE_VERSION, "v",
                         "envelope v %u differs from the publish header's v %u", job->evs[i].v,
                         job->v);
            ab_error_detail_int(e, "expected", job->v);
        } else if (ab_agui_validate(job->evs[i].body, AB_AGUI_STRICT, NULL, NULL, &job->infos[i],
                                    e) == AB_OK) {
            if (job->infos[i].type != AB_AGUI_RUN_ERROR || /* the rare case only */
                !ab_event_by_broker(job->evs[i].body)) {
                it->info = &job->infos[i];
                return;
            }
            ab_error_set(e, AB_INVALID_EVENT, "/code",
                         "RUN_ERROR codes starting %s are the broker's own (abandon_run)",
                         AB_BROKER_CODE_PREFIX);
        }
        if (e->code == AB_INVALID_EVENT)
            ab_error_prefix_field(e, "event");
    }
    it->status = AB_RESULT_REJECTED;
    e->cid = job->cid;
}

/* Receive the envelope frames of a publish into @p job; false (*e set) on a count mismatch. */
static bool recv_frames(cmd_t *c, ab_job_t *job, bool more, ab_error_t *e)
{
    uint32_t want = job->count;
    size_t extra = 0;
    while (more) {
        zmq_msg_t *f = &job->frames[job->nframes];
        zmq_msg_t spare;
        if (job->nframes == want)
            f = &spare;
        zmq_msg_init(f);
        if (zmq_msg_recv(f, c->router, 0) < 0) {
            zmq_msg_close(f);
            break;
        }
        more = zmq_msg_more(f);
        if (f == &spare) {
            zmq_msg_close(f);
            extra++;
        } else {
            job->items[job->nframes].bytes = zmq_msg_data(f);
            job->items[job->nframes].len = zmq_msg_size(f);
            job->nframes++;
        }
    }
    if (job->nframes == want && extra == 0)
        return true;
    size_t got = job->nframes + extra;
    ab_error_set(e, AB_INVALID_ENVELOPE, "count",
                 "publish count is %u but %zu envelope frames follow", want, got);
    ab_error_detail_int(e, "frames", (int64_t)got);
    return false;
}

/* Receive the one frame of a packed publish and cut it into job->count envelopes
 * (PROTOCOL.md 7.4); false (*e set) when it is not exactly that. */
static bool recv_packed(cmd_t *c, ab_job_t *job, bool more, ab_error_t *e)
{
    zmq_msg_t *f = &job->frames[0];
    zmq_msg_init(f);
    if (!more || zmq_msg_recv(f, c->router, 0) < 0) {
        zmq_msg_close(f);
        ab_error_set(e, AB_INVALID_ENVELOPE, "packed", "a packed publish needs its one frame");
        ab_error_detail_int(e, "frames", 0);
        return false;
    }
    job->nframes = 1;
    if (zmq_msg_more(f)) {
        size_t n = 1 + ab__discard_rest(c->router, true);
        ab_error_set(e, AB_INVALID_ENVELOPE, "packed",
                     "a packed publish carries one frame, not %zu", n);
        ab_error_detail_int(e, "frames", (int64_t)n);
        return false;
    }
    const uint8_t *p = zmq_msg_data(f), *end = p + zmq_msg_size(f);
    uint32_t n = 0;
    while (n < job->count && ab_packed_next(&p, end, &job->items[n].bytes, &job->items[n].len))
        n++;
    if (n == job->count && p == end)
        return true;
    if (n == job->count)
        ab_error_set(e, AB_INVALID_ENVELOPE, "packed",
                     "the packed frame has %zu bytes after its %u envelopes", (size_t)(end - p), n);
    else
        ab_error_set(e, AB_INVALID_ENVELOPE, "count",
                     "publish count is %u but the packed frame holds %u whole envelopes",
                     job->count, n);
    ab_error_detail_int(e, "envelopes", n);
    return false;
}

/* Bytes of the frames after a publish header (the packed frame, or every envelope frame). */
static int64_t publish_bytes(const ab_job_t *job)
{
    int64_t n = 0;
    for (uint32_t i = 0; i < job->nframes; i++)
        n += (int64_t)zmq_msg_size(&job->frames[i]);
    return n;
}

/* Whether another request already waits on the ROUTER. */
static bool router_busy(cmd_t *c)
{
    int ev = 0;
    size_t len = sizeof(ev);
    return zmq_getsockopt(c->router, ZMQ_EVENTS, &ev, &len) != 0 || (ev & ZMQ_POLLIN);
}

/*
 * The lone path (invariant 7): a small publish, with nothing queued for the writer and no
 * other request waiting, is committed here while the writer waits, its answer sent straight
 * to the client. Anything busier goes to the writer, whose groups are what make throughput,
 * and so does a publish whose lone commit the store refused (it never waits for a lock).
 * @return true when @p job was taken (answered and freed).
 */
static bool commit_lone(cmd_t *c, ab_job_t *job)
{
    if (job->count > AB__LONE_EVENTS_MAX || job->bytes > AB__LONE_BYTES_MAX ||
        c->wsent != atomic_load(&c->b->wjobs_taken) || router_busy(c))
        return false;
    ab__writer_t *w = ab__writer_borrow(c->b);
    if (w == NULL)
        return false;
    while (ab__cmd_forward(c, c->wsock, false) ==
           1) /* the writer's answers already sent go first */
        ;
    ab__lone_end_t end = ab__writer_commit_lone(w, job, c->router);
    ab__writer_return(w);
    if (end == AB__LONE_NUDGE) { /* snapshot documents to collect or dispatch moves */
        ab_job_t *nudge = ab__cmd_job_new(AB_JOB_NUDGE, NULL, NULL);
        if (nudge == NULL || send_writer(c, nudge) != 0)
            ab__job_free(nudge); /* the writer's next wake-up does it */
    }
    return end != AB__LONE_GIVEN_BACK; /* given back: to the writer, still unanswered */
}

static void publish(cmd_t *c, zmq_msg_t *id, const ab_msg_t *m, bool more)
{
    uint32_t count = m->u.publish.count;
    bool packed = m->u.publish.packed;
    ab_job_t *job = ab__cmd_job_new(AB_JOB_PUBLISH, id, m);
    if (job != NULL) {
        job->frames = calloc(packed ? 1 : count, sizeof(*job->frames));
        if (ab_doc_new(&job->doc) == AB_OK)
            ab_doc_keep(job->doc, true); /* every envelope's tree lives until the answer */
        job->evs = calloc(count, sizeof(*job->evs));
        job->infos = calloc(count, sizeof(*job->infos));
        /* not calloc: decode_item() sets each item up (its 360-byte error included) */
        job->items = malloc((count ? count : 1) * sizeof(*job->items));
    }
    if (job == NULL || !job->frames || !job->doc || !job->evs || !job->infos || !job->items) {
        ab__discard_rest(c->router, more);
        reply_code(c, id, m->v, m->cid, AB_NOMEM, "", "out of memory");
        goto free_job;
    }
    job->count = count;
    job->recv_us = ab__mono_us(); /* the writer's slow-group log measures from here */
    ab_error_t e = AB_ERROR_INIT;
    if (!(packed ? recv_packed(c, job, more, &e) : recv_frames(c, job, more, &e))) {
        ab__cmd_reply_error(c, id, m->v, m->cid, &e);
        goto free_job;
    }
    job->weight = count;
    job->bytes = publish_bytes(job);
    if (job->bytes > (int64_t)c->b->cfg->limits.max_publish_bytes) {
        ab_error_set(&e, AB_TOO_LARGE, "",
                     "publish of %lld bytes of envelopes exceeds max_publish_bytes %u: send"
                     " fewer events per publish",
                     (long long)job->bytes, c->b->cfg->limits.max_publish_bytes);
        ab_error_detail_int(&e, "limit", c->b->cfg->limits.max_publish_bytes);
        ab_error_detail_int(&e, "actual", job->bytes);
        ab__cmd_reply_error(c, id, m->v, m->cid, &e);
        goto free_job;
    }
    if (!queue_reserve(c, id, m, job->weight, job->bytes))
        goto free_job;
    for (uint32_t i = 0; i < count; i++)
        decode_item(c, job, i);
    if (!commit_lone(c, job))
        to_writer(c, id, job);
    return;
free_job:
    ab__job_free(job);
}

/* A job whose request travels as its re-encoded header (dispatch.h). */
static ab_job_t *raw_job(cmd_t *c, ab_job_kind_t kind, zmq_msg_t *id, const ab_msg_t *m)
{
    ab_job_t *job = ab__cmd_job_new(kind, id, kind == AB_JOB_DISPATCH ? m : NULL);
    ab_buf_t buf = AB_BUF_INIT;
    if (job != NULL && m != NULL && ab_msg_encode(m, &buf, NULL) != AB_OK) {
        ab__job_free(job);
        job = NULL;
    }
    if (job != NULL) {
        job->raw = buf.data;
        job->raw_len = buf.len;
    } else {
        ab_buf_free(&buf);
    }
    (void)c;
    return job;
}

static void to_dispatch(cmd_t *c, zmq_msg_t *id, const ab_msg_t *m)
{
    if (!queue_reserve(c, id, m, 1, 0))
        return;
    ab_job_t *job = raw_job(c, AB_JOB_DISPATCH, id, m);
    if (job == NULL) {
        atomic_fetch_sub(&c->b->in_flight, 1);
        reply_code(c, id, m->v, m->cid, AB_NOMEM, "", "out of memory");
        return;
    }
    if (c->who != NULL) /* `requests` lists what this key may control (dispatch_ops.c) */
        snprintf(job->key, sizeof(job->key), "%s", ab__principal_key(c->who));
    job->weight = 1;
    to_writer(c, id, job);
}

/* The workers hook: dispatch on the writer learns who is live (workers.h). */
static void worker_news(void *ud, const char *wid, const uint8_t *ident, size_t len,
                        const ab_msg_t *serve)
{
    cmd_t *c = ud;
    zmq_msg_t id;
    zmq_msg_init_size(&id, len);
    memcpy(zmq_msg_data(&id), ident, len);
    ab_job_t *job = raw_job(c, serve ? AB_JOB_WORKER_UP : AB_JOB_WORKER_DOWN, &id, serve);
    zmq_msg_close(&id);
    if (job == NULL) {
        ab__log(AB_LOG_WARN, "dispatch: out of memory telling the writer about worker %s", wid);
        return;
    }
    snprintf(job->wid, sizeof(job->wid), "%s", wid);
    if (serve != NULL && c->who != NULL) /* called while its serve is handled */
        snprintf(job->key, sizeof(job->key), "%s", ab__principal_key(c->who));
    if (send_writer(c, job) != 0)
        ab__job_free(job);
}

/* `stats`: answered here from the shared figures (stats_reply.c), never queued. */
static void stats_request(cmd_t *c, zmq_msg_t *id, const ab_msg_t *m)
{
    ab_msg_t r = {.op = AB_OP_STATS_REPLY, .v = m->v, .cid = m->cid};
    ab__stats_fill(c->b, &r.u.stats_reply);
    reply(c, id, &r);
}

static void dispatch(cmd_t *c, zmq_msg_t *id, const ab_msg_t *m)
{
    switch (m->op) {
    case AB_OP_HELLO: welcome(c, id, m); return;
    case AB_OP_PING: pong(c, id, m); return;
    case AB_OP_STATS: stats_request(c, id, m); return;
    case AB_OP_CLAIM:
    case AB_OP_HEADS: claim_or_heads(c, id, m); return;
    case AB_OP_SERVE:
    case AB_OP_WORKERS:
    case AB_OP_INVOKE_ACTION:
    case AB_OP_ACTION_RESULT:
    case AB_OP_LEAVE: ab__workers_request(c->wk, id, m, ab__mono_ms()); return;
    case AB_OP_CANCEL:
        if (ab__workers_request(c->wk, id, m, ab__mono_ms()))
            return; /* it aborted an action call; else it is a replay's */
        to_reader(c, id, m);
        return;
    case AB_OP_REPLAY:
    case AB_OP_CREDIT:
    case AB_OP_SNAPSHOT: to_reader(c, id, m); return;
    case AB_OP_THREADS: threads_request(c, id, m); return;
    case AB_OP_START_RUN:
    case AB_OP_DECLINE:
    case AB_OP_CANCEL_RUN:
    case AB_OP_RESUME_RUN:
    case AB_OP_ABANDON_RUN:
    case AB_OP_REQUESTS: to_dispatch(c, id, m); return;
    default: break;
    }
    ab_error_t e = AB_ERROR_INIT;
    ab_error_set(&e, AB_UNSUPPORTED, "op", "'%s' is not a request the broker serves",
                 ab_op_name(m->op));
    ab__cmd_reply_error(c, id, m->v, m->cid, &e);
}

/* Invariant 6: whether the key of @p hdr's connection may make request @p m. */
static bool authorized(cmd_t *c, zmq_msg_t *hdr, const ab_msg_t *m, ab_error_t *e)
{
    const char *uid = zmq_msg_gets(hdr, "User-Id");
    c->who = uid ? ab__access_find_z85(c->acc, uid, strlen(uid)) : NULL;
    return ab__authorize(c->who, m, e);
}

/* One request from the ROUTER; @return false when none was waiting. */
static bool on_request(cmd_t *c)
{
    zmq_msg_t id, hdr;
    zmq_msg_init(&id);
    zmq_msg_init(&hdr);
    bool got = zmq_msg_recv(&id, c->router, ZMQ_DONTWAIT) >= 0;
    if (!got)
        goto close_msgs;
    if (!zmq_msg_more(&id) || zmq_msg_recv(&hdr, c->router, 0) < 0) {
        reply_code(c, &id, 0, 0, AB_INVALID_ENVELOPE, "", "message has no header frame");
        goto close_msgs;
    }
    bool more = zmq_msg_more(&hdr);
    ab_msg_t m;
    ab_error_t e = AB_ERROR_INIT;
    bool decoded = ab_msg_decode(c->doc, zmq_msg_data(&hdr), zmq_msg_size(&hdr), &c->b->cfg->limits,
                                 &m, &e) == AB_OK;
    if (decoded)
        ab__workers_touch(c->wk, &id, ab__mono_ms()); /* any message renews a worker's lease */
    if (!decoded) {
        /* answer with the header's own v when it is one we speak (PROTOCOL.md 8.1) */
        uint64_t cid = 0;
        uint32_t v = 0;
        ab_msg_peek(zmq_msg_data(&hdr), zmq_msg_size(&hdr), &cid, &v);
        ab__discard_rest(c->router, more);
        ab__cmd_reply_error(c, &id, e.code == AB_INCOMPATIBLE_VERSION ? 0 : v, e.cid, &e);
    } else if (c->stopping) {
        ab__discard_rest(c->router, more);
        reply_code(c, &id, m.v, m.cid, AB_UNAVAILABLE, "", "broker is shutting down");
    } else if (c->acc != NULL && !authorized(c, &hdr, &m, &e)) {
        ab__discard_rest(c->router, more);
        ab__cmd_reply_error(c, &id, m.v, m.cid, &e);
    } else if (m.op == AB_OP_PUBLISH) {
        publish(c, &id, &m, more);
    } else if (ab__discard_rest(c->router, more) > 0) {
        reply_code(c, &id, m.v, m.cid, AB_INVALID_ENVELOPE, "count",
                   "this request takes no frames after the header");
    } else {
        dispatch(c, &id, &m);
    }
close_msgs:
    zmq_msg_close(&id);
    zmq_msg_close(&hdr);
    return got;
}

static void begin_stop(cmd_t *c)
{
    c->stopping = true;
    ab__log(AB_LOG_INFO, "shutting down: finishing queued requests");
    if (c->wk != NULL)
        ab__workers_set_hook(c->wk, NULL, NULL); /* the writer gets nothing after its stop job */
    ab__workers_stop(c->wk);
    ab_job_t *stop = ab__cmd_job_new(AB_JOB_STOP, NULL, NULL);
    if (stop == NULL || send_writer(c, stop) != 0) {
        ab__job_free(stop);
        c->writer_done = true;
    }
    for (uint32_t i = 0; i < c->nreaders; i++) {
        stop = ab__cmd_job_new(AB_JOB_STOP, NULL, NULL);
        if (stop == NULL || ab__cmd_send_reader(c, c->rsocks[i], stop) != 0) {
            ab__job_free(stop);
            c->readers_done++;
        }
    }
}

/* SIGHUP: read the access file again; a wrong one changes nothing (invariant 6). */
static void reload(cmd_t *c)
{
    const ab_broker_config_t *cfg = c->b->cfg;
    if (c->acc == NULL) {
        ab__log(AB_LOG_INFO, "reload: the broker has no keys: nothing to read");
        return;
    }
    ab__access_t *a = NULL;
    ab_error_t e = AB_ERROR_INIT;
    if (ab__access_load(&a, cfg->keys_dir, cfg->access_file, &e) != AB_OK) {
        char line[512];
        ab__log(AB_LOG_ERROR, "access: reload refused, the table from %s stays: %s",
                ab__access_source(c->acc), ab_error_format(&e, line, sizeof(line)));
        return;
    }
    bool narrowed = ab__access_narrowed(c->acc, a);
    ab__access_box_set(&c->b->access, ab__access_ref(a));
    ab__access_unref(&c->acc);
    c->acc = a;
    ab__log(AB_LOG_INFO, "access: reloaded %zu key(s) from %s%s", ab__access_count(a),
            ab__access_source(a),
            narrowed ? "; some keys may read less: every live subscription is made again" : "");
    ab_job_t *job = ab__cmd_job_new(AB_JOB_ACCESS, NULL, NULL); /* dispatch looks again; rebind */
    if (job != NULL) {
        job->narrowed = narrowed;
        if (send_writer(c, job) != 0)
            ab__job_free(job);
    }
}

static bool on_signal(cmd_t *c, int sigfd)
{
    char buf[16];
    ssize_t n = read(sigfd, buf, sizeof(buf));
    bool stop = false;
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] == (char)SIGHUP || buf[i] == 'h')
            reload(c);
        else
            stop = true;
    }
    if (!stop)
        return true;
    if (c->stopping) {
        ab__log(AB_LOG_WARN, "second signal: stopping without waiting");
        return false;
    }
    begin_stop(c);
    return true;
}

/* Mark what was used since the last wait (invariant 8): the ROUTER always (every module
 * answers on it), the writer's socket when a job went to it, the readers' when one went to
 * any. */
static void touch_used(cmd_t *c, ab__zpoll_t *zp)
{
    ab__zpoll_touch(zp, 1);
    if (c->wsent != c->wsent_marked)
        ab__zpoll_touch(zp, 2);
    c->wsent_marked = c->wsent;
    for (uint32_t i = 0; c->rsent && i < c->nreaders; i++)
        ab__zpoll_touch(zp, 3 + i);
    c->rsent = false;
}

/* One pass over what @p it found ready; @return false to leave the loop. */
static bool serve_ready(cmd_t *c, const ab__zpoll_item_t *it, size_t n, int sigfd)
{
    if (it[0].ready && !on_signal(c, sigfd))
        return false;
    for (int i = 0; it[1].ready && i < FORWARD_BURST; i++)
        if (!on_request(c))
            break;
    if (it[2].ready)
        ab__cmd_drain_worker(c, c->wsock, true);
    for (uint32_t i = 0; i < c->nreaders; i++)
        if (it[3 + i].ready)
            ab__cmd_drain_worker(c, c->rsocks[i], false);
    if (n == 4 + c->nreaders && it[n - 1].ready)
        ab__monitor_drain(&c->b->cmd_mon);
    return true;
}

int ab__cmd_loop(ab__shared_t *b, void *router, void *wsock, void **rsocks, int sigfd)
{
    cmd_t c = {.b = b, .router = router, .wsock = wsock, .rsocks = rsocks};
    ab__thread_start("ab-command", b->cfg->log_level, b->cfg->log_json);
    ab__drops_init(&c.drops, b->cfg->replays);
    c.nreaders = b->cfg->readers;
    size_t n = 3 + c.nreaders + (b->cmd_mon.pair != NULL); /* the monitor last, if on */
    ab__zpoll_item_t *items = calloc(n, sizeof(*items));
    ab__zpoll_t *zp = NULL;
    c.wk = ab__workers_new(router, b->instance);
    if (items != NULL) {
        items[0] = (ab__zpoll_item_t){.fd = sigfd};
        items[1] = (ab__zpoll_item_t){.socket = router};
        items[2] = (ab__zpoll_item_t){.socket = wsock};
        for (uint32_t i = 0; i < c.nreaders; i++)
            items[3 + i] = (ab__zpoll_item_t){.socket = rsocks[i]};
        if (b->cmd_mon.pair != NULL)
            items[n - 1] = (ab__zpoll_item_t){.socket = b->cmd_mon.pair};
        zp = ab__zpoll_new(items, n);
    }
    int rc = 1;
    if (zp == NULL || c.wk == NULL || ab_doc_new(&c.doc) != AB_OK) {
        begin_stop(&c);
        goto done;
    }
    ab__workers_set_hook(c.wk, worker_news, &c);
    c.acc = ab__access_box_get(&b->access);
    rc = 0;
    while (!(c.stopping && c.writer_done && c.readers_done >= c.nreaders)) {
        long wait = ab__workers_tick(c.wk, ab__mono_ms()); /* leases and call deadlines */
        touch_used(&c, zp);
        if (ab__zpoll_wait(zp, wait) < 0) {
            if (errno == EINTR)
                continue;
            ab__log(AB_LOG_ERROR, "poll failed: %s", zmq_strerror(errno));
            rc = 1;
            break;
        }
        if (!serve_ready(&c, items, n, sigfd))
            break;
    }
    if (!c.stopping)
        begin_stop(&c);
done:
    ab__zpoll_destroy(&zp);
    free(items);
    ab_doc_destroy(&c.doc);
    ab__workers_destroy(&c.wk);
    ab__access_unref(&c.acc);
    ab__drops_free(&c.drops);
    return rc;
}

/*
 * fanout.c - the writer's XPUB event endpoint: live messages of committed
 * events and heartbeats (writer_int.h; docs/ARCHITECTURE.md "Live fan-out").
 *
 * Invariants:
 *  1. Only committed events are added (the writer calls ab__fanout_event()
 *     after append_batch() returned AB_OK for their group), in
 *     commit-position order.
 *  2. A live message is [topic][records]: consecutive committed events of
 *     one run, at most AB_LIVE_EVENTS_MAX records and about
 *     AB_LIVE_BYTES_MAX bytes (a larger event goes alone); each record is
 *     the stamp and the producer's envelope, copied once into the records
 *     frame, which ZeroMQ then owns (PROTOCOL.md 6.2).
 *  3. Sends never block (ZMQ_DONTWAIT): past the high-water mark a message
 *     is dropped, and subscribers fill the hole from the store.
 *  4. A heartbeat goes out about every AB__HEARTBEAT_MS, when the writer's
 *     loop asks (ab__fanout_tick()).
 *  5. With keys the XPUB is in manual mode and no subscription takes effect
 *     unless made here: each is cut to what the subscriber's key may read
 *     (ab__access_topics(), by the table current when it arrives), so an
 *     observer never receives a thread outside its prefixes.
 *  6. Every event given to ab__fanout_event() is noted in the tprev table
 *     before anything can fail, so the table sees every committed position
 *     that comes here, in order; a position that never comes (a follower's
 *     read that failed) is a gap the table answers around (tprev.h).
 */
#include "writer_int.h"

#include <string.h>

void ab__fanout_init(ab__fanout_t *f, ab__shared_t *b)
{
    memset(f, 0, sizeof(*f));
    f->b = b;
    f->xpub = b->xpub;
    f->next_hb = ab__mono_ms();
    f->no_tprev = b->cfg->no_tprev;
    if (ab__tprev_init(&f->tprev, 0, atomic_load(&b->head_pos)) != AB_OK)
        ab__log(AB_LOG_WARN, "events: no memory for the tprev table: live stamps leave it out");
}

void ab__fanout_free(ab__fanout_t *f)
{
    ab__tprev_free(&f->tprev);
    ab_buf_free(&f->topic);
    ab_buf_free(&f->live);
    ab_buf_free(&f->hb);
}

/*
 * Whether @p t is already the topic of (thread, run): "ev" NUL thread NUL run
 * NUL. Ids never hold NUL, so equal lengths and bytes mean the same ids; the
 * events of a publish usually share one run, and building (and re-checking)
 * the topic per event was a visible share of the writer's time.
 */
static bool topic_is(const ab_buf_t *t, ab_str_t thread, ab_str_t run)
{
    size_t p = AB_TOPIC_EVENTS_LEN;
    return t->len == p + thread.len + 1 + run.len + 1 &&
           memcmp(t->data + p, thread.ptr, thread.len) == 0 &&
           memcmp(t->data + p + thread.len + 1, run.ptr, run.len) == 0;
}

/* The tprev table's counts where a metrics scrape reads them (relaxed: figures only). */
static void publish_counts(ab__fanout_t *f)
{
    atomic_store_explicit(&f->b->tprev_hits, f->tprev.hits, memory_order_relaxed);
    atomic_store_explicit(&f->b->tprev_misses, f->tprev.misses, memory_order_relaxed);
    atomic_store_explicit(&f->b->tprev_evictions, f->tprev.evictions, memory_order_relaxed);
    atomic_store_explicit(&f->b->tprev_gaps, f->tprev.gaps, memory_order_relaxed);
}

void ab__fanout_flush(ab__fanout_t *f)
{
    publish_counts(f); /* once per flush: every caller flushes after its events, before answers */
    if (f->live_n == 0)
        return;
    zmq_send(f->xpub, f->topic.data, f->topic.len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(f->xpub, f->live.data, f->live.len, ZMQ_DONTWAIT);
    ab_buf_reset(&f->live);
    f->live_n = 0;
}

void ab__fanout_event(ab__fanout_t *f, const ab_seq_item_t *it, int64_t time_us)
{
    ab_stamp_t stamp = {.pos = it->pos, .time_us = time_us};
    /* noted first, whatever becomes of the message (invariant 6) */
    if (ab__tprev_note(&f->tprev, it->ev->thread, it->pos, &stamp.tprev))
        stamp.has_tprev = !f->no_tprev;
    if (it->info && it->info->type == AB_AGUI_RUN_ERROR && ab_event_by_broker(it->ev->body))
        stamp.author = AB_AUTHOR_BROKER; /* abandon_run's RUN_ERROR (PROTOCOL.md section 5) */
    ab_error_t *e = &f->scratch;         /* clear between calls: cleared again after each failure */
    if (!topic_is(&f->topic, it->ev->thread, it->ev->run)) {
        ab__fanout_flush(f);
        ab_buf_reset(&f->topic);
        if (ab_topic_event(&f->topic, it->ev->thread, it->ev->run, e) != AB_OK) {
            ab_buf_reset(&f->topic);
            ab_error_clear(e);
            return;
        }
    }
    if (f->live_n > 0 && f->live.len + it->len + AB_CHUNK_RECORD_OVERHEAD > AB_LIVE_BYTES_MAX)
        ab__fanout_flush(f);
    /* the one copy of the event on its way to subscribers (invariant 2) */
    if (ab_record_append(&f->live, &stamp, it->bytes, it->len, e) != AB_OK) {
        ab_error_clear(e);
        return; /* out of memory: a live loss, which subscribers fill from the store */
    }
    if (++f->live_n >= AB_LIVE_EVENTS_MAX || f->live.len >= AB_LIVE_BYTES_MAX)
        ab__fanout_flush(f);
}

static void heartbeat(ab__fanout_t *f)
{
    ab_msg_t m = {.op = AB_OP_HEARTBEAT, .v = AB_PROTOCOL_VERSION};
    ab_error_t e = AB_ERROR_INIT;
    m.u.heartbeat.instance = (ab_str_t){f->b->instance, strlen(f->b->instance)};
    m.u.heartbeat.head_pos = atomic_load(&f->b->head_pos);
    m.u.heartbeat.time_us = ab__now_us();
    ab_buf_reset(&f->hb);
    if (ab_msg_encode(&m, &f->hb, &e) == AB_OK) {
        zmq_send(f->xpub, AB_TOPIC_HEARTBEAT, AB_TOPIC_HEARTBEAT_LEN, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(f->xpub, f->hb.data, f->hb.len, ZMQ_DONTWAIT);
    }
    f->next_hb = ab__mono_ms() + AB__HEARTBEAT_MS;
}

int64_t ab__fanout_tick(ab__fanout_t *f)
{
    int64_t now = ab__mono_ms();
    if (now >= f->next_hb) {
        heartbeat(f);
        now = ab__mono_ms();
    }
    return f->next_hb > now ? f->next_hb - now : 0;
}

static void apply_topic(void *ud, const uint8_t *t, size_t len)
{
    ab__fanout_t *f = ud;
    zmq_setsockopt(f->xpub, f->sub_opt, t, len);
}

/* One (un)subscription @p m of a CURVE subscriber (invariant 5). */
static void manual_sub(ab__fanout_t *f, const ab__access_t *a, zmq_msg_t *m)
{
    const uint8_t *d = zmq_msg_data(m);
    size_t n = zmq_msg_size(m);
    if (n < 1 || d[0] > 1)
        return;
    const char *uid = zmq_msg_gets(m, "User-Id");
    const ab__principal_t *p = uid ? ab__access_find_z85(a, uid, strlen(uid)) : NULL;
    f->sub_opt = d[0] == 1 ? ZMQ_SUBSCRIBE : ZMQ_UNSUBSCRIBE;
    if (ab__access_topics(p, d + 1, n - 1, apply_topic, f) == 0 && d[0] == 1)
        ab__log(AB_LOG_DEBUG, "events: a subscription of %s outside what it may read: none made",
                p ? ab__principal_name(p) : "a key no longer admitted");
}

void ab__fanout_drain(ab__fanout_t *f)
{
    if (f->b->curve_secret[0] == '\0') {
        char sub[512];
        while (zmq_recv(f->xpub, sub, sizeof(sub), ZMQ_DONTWAIT) >= 0)
            ;
        return;
    }
    ab__access_t *a = ab__access_box_get(&f->b->access);
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, f->xpub, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            break;
        }
        manual_sub(f, a, &m);
        zmq_msg_close(&m);
    }
    ab__access_unref(&a);
}

bool ab__fanout_settle(ab__fanout_t *f)
{
    for (int i = 0; i < 64; i++) { /* bounded: a flood of subscriptions is left for the caller */
        int ev = 0;
        size_t len = sizeof(ev);
        /* ZMQ_EVENTS processes every pending command (a receive may defer them) */
        if (zmq_getsockopt(f->xpub, ZMQ_EVENTS, &ev, &len) != 0 || !(ev & ZMQ_POLLIN))
            return true;
        ab__fanout_drain(f);
    }
    return false;
}

int ab__fanout_fd(ab__fanout_t *f)
{
    int fd = -1;
    size_t len = sizeof(fd);
    return zmq_getsockopt(f->xpub, ZMQ_FD, &fd, &len) == 0 ? fd : -1;
}

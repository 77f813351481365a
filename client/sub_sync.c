/*
 * sub_sync.c - the subscriber's exactness: classifying each event against
 * the cursor (duplicate / next / hole), delivering, replaying from the
 * cursor, and draining the live FIFO after a replay (the Clone pattern's
 * seam).
 *
 * Invariants:
 *  1. An event is delivered only when it is the next one: seq == cursor + 1
 *     of its run (scopes run, thread), or, for scope all, pos == last pos + 1
 *     live or any pos > last pos from a replay (positions are commit order
 *     and the replay is authoritative). An ordered thread (opts.ordered)
 *     follows the rule of scope all with synced_pos, the position up to
 *     which every event of the thread was delivered: live only when its
 *     stamp's tprev (the thread has nothing between tprev and pos) is at or
 *     below synced_pos, or, from a broker that sent no tprev, pos ==
 *     synced_pos + 1; from its replay (scope thread, after_pos = synced_pos)
 *     any pos above it. The cursor advances before the callback runs, so a
 *     stop never re-delivers.
 *  2. A live event past the cursor + 1 is a hole: the FIFO is dropped and a
 *     replay from the cursor is asked for; nothing past a hole is delivered.
 *  3. A replay that skips a seq is AB_CORRUPT, never delivered through.
 *  4. While a replay streams, the SUB keeps being drained into the FIFO
 *     (every 64 rows) so the live side does not overflow silently.
 *  5. A failed replay (not one the callback stopped) arms the reconnect
 *     backoff, so it is not retried at once; a completed one proves the
 *     connection, resets the backoff and counts as a sign of life for the
 *     silence check (subscriber.c invariant 4).
 *  6. synced_pos is a position up to which every event of the scope was
 *     delivered; a heartbeat's head_pos above it asks for a replay (a
 *     dropped tail, subscriber.c step()). It rises with a delivered replay
 *     row (a replay sends the scope after the cursor in position order),
 *     with a completed replay's head_pos, and with a live event that is not
 *     a hole only when nothing of the scope can lie between synced_pos and
 *     it (live_syncs): always for scope run (its seq is next or below the
 *     cursor, so every event of the run below its pos was delivered), by
 *     classify's rule for scope all and an ordered thread, and for an
 *     unordered thread when the stamp's tprev is at or below synced_pos or,
 *     without tprev, pos == synced_pos + 1. Otherwise an unordered thread's
 *     event is still delivered if it is the next of its run, but synced_pos
 *     stays (another run's last events may have been lost before it, which
 *     no seq jump shows): with a tprev a replay is asked for at once (a
 *     hole of the thread); without one, the next heartbeat whose head_pos
 *     is above synced_pos asks for it.
 */
#include "ab_common.h"
#include "sub_int.h"

#include <stdlib.h>
#include <string.h>

enum { K_DUP, K_NEXT, K_HOLE };

/* The envelope, with or without its body (opts.skip_body). */
static ab_status_t sub_decode(ab_sub_t *s, const uint8_t *b, size_t len, ab_event_t *ev,
                              ab_error_t *err)
{
    if (s->o.skip_body)
        return ab_event_decode_head(s->edoc, b, len, &s->lim, ev, err);
    return ab_event_decode(s->edoc, b, len, &s->lim, ev, err);
}

static int classify(const ab_sub_t *s, const ab_event_t *ev, const ab_stamp_t *st)
{
    if (s->o.scope == AB_SUB_ALL) {
        if (st->pos <= s->last_pos)
            return K_DUP;
        return st->pos == s->last_pos + 1 ? K_NEXT : K_HOLE;
    }
    if (s->o.ordered) { /* everything of the thread up to synced_pos was delivered */
        if (st->pos <= s->synced_pos)
            return K_DUP;
        if (st->has_tprev) /* nothing of the thread lies between tprev and pos */
            return st->tprev <= s->synced_pos ? K_NEXT : K_HOLE;
        return st->pos == s->synced_pos + 1 ? K_NEXT : K_HOLE;
    }
    uint64_t cur = ab__sub_map_get(&s->map, ev->run.ptr, ev->run.len);
    if (ev->seq <= cur)
        return K_DUP;
    return ev->seq == cur + 1 ? K_NEXT : K_HOLE;
}

/* Whether a live event that is not a hole shows that the scope has nothing
 * undelivered up to its pos (invariant 6). */
static bool live_syncs(const ab_sub_t *s, const ab_stamp_t *st)
{
    if (s->o.scope != AB_SUB_THREAD || s->o.ordered)
        return true;   /* run: seq order is pos order; all, ordered: classify's rule */
    if (st->has_tprev) /* the thread has nothing between tprev and pos */
        return st->tprev <= s->synced_pos;
    return st->pos == s->synced_pos + 1;
}

/* Advance the cursor, then call back (invariant 1); with @p syncs also synced_pos (invariant
 * 6: every replayed row, a live event that live_syncs()). */
static ab_status_t deliver(ab_sub_t *s, const ab_event_t *ev, const ab_stamp_t *st,
                           const uint8_t *b, size_t len, bool replayed, bool syncs, ab_error_t *err)
{
    if (s->o.scope != AB_SUB_ALL && !s->o.ordered &&
        ab__sub_map_set(&s->map, ev->run.ptr, ev->run.len, ev->seq) != AB_OK)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    if (st->pos > s->last_pos)
        s->last_pos = st->pos;
    if (syncs && st->pos > s->synced_pos)
        s->synced_pos = st->pos;
    s->stats.delivered++;
    ab_sub_event_t e = {.ev = *ev, .bytes = b, .len = len, .stamp = *st, .replayed = replayed};
    if (s->o.on_event(s->o.ud, &e) != 0)
        s->stop = true;
    return AB_OK;
}

static ab_status_t on_row(void *ud, const ab_stamp_t *st, const uint8_t *b, size_t len,
                          ab_error_t *err)
{
    ab_sub_t *s = ud;
    if ((++s->rows & 63) == 0)
        (void)ab__sub_live_drain(s, 0); /* invariant 4 */
    ab_event_t ev;
    ab_status_t rc = sub_decode(s, b, len, &ev, err);
    if (rc != AB_OK)
        return rc;
    int k = classify(s, &ev, st);
    if (k == K_DUP)
        return AB_OK;
    if (k == K_HOLE && s->o.scope != AB_SUB_ALL && !s->o.ordered)
        return ab_error_set(err, AB_CORRUPT, "seq", "replay of run '%.*s' skipped to seq %llu",
                            (int)ev.run.len, ev.run.ptr, (unsigned long long)ev.seq);
    rc = deliver(s, &ev, st, b, len, true, true, err);
    if (rc == AB_OK && s->stop)
        return ab_error_set(err, AB_REQUEST_ABORTED, NULL, "stopped by the callback");
    return rc;
}

/* Fill @p q with the replay request of the current cursor. */
static ab_status_t build_request(ab_sub_t *s, ab_msg_t *q, ab_error_t *err)
{
    *q = (ab_msg_t){.op = AB_OP_REPLAY};
    ab_replay_t *r = &q->u.replay;
    if (s->o.scope == AB_SUB_ALL) {
        r->scope = AB_REPLAY_ALL;
        r->after_pos = s->last_pos;
        return AB_OK;
    }
    r->thread = (ab_str_t){s->thread, strlen(s->thread)};
    if (s->o.scope == AB_SUB_RUN) {
        r->scope = AB_REPLAY_RUN;
        r->run = (ab_str_t){s->run, strlen(s->run)};
        r->after_seq = ab__sub_map_get(&s->map, s->run, strlen(s->run));
        return AB_OK;
    }
    r->scope = AB_REPLAY_THREAD;
    if (s->o.ordered)
        r->after_pos = s->synced_pos; /* the map is empty: no cursors */
    if (s->map.n > s->lim.max_batch)
        return ab_error_set(err, AB_TOO_LARGE, "cursors",
                            "%zu run cursors exceed the broker's max_batch %u", s->map.n,
                            s->lim.max_batch);
    free(s->req_cursors);
    s->req_cursors = calloc(s->map.n ? s->map.n : 1, sizeof(*s->req_cursors));
    if (!s->req_cursors)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    for (size_t i = 0; i < s->map.n; i++)
        s->req_cursors[i] =
            (ab_cursor_t){{s->map.ent[i].run, s->map.lens[i]}, s->map.ent[i].after_seq};
    r->cursors = s->req_cursors;
    r->ncursors = s->map.n;
    return AB_OK;
}

ab_status_t ab__sub_resync(ab_sub_t *s, ab_error_t *err)
{
    ab_msg_t q;
    ab_status_t rc = build_request(s, &q, err);
    if (rc != AB_OK)
        return rc;
    s->need_replay = false;
    s->stats.replays++;
    ab_replay_end_t end;
    rc = ab_conn_replay(s->conn, &q, on_row, s, s->doc, &end, s->o.timeout_ms, err);
    if (rc != AB_OK) {
        s->need_replay = true; /* resume from the (advanced) cursor next time */
        if (rc == AB_TIMEOUT || rc == AB_IO)
            s->reconnect = true;
        if (!s->stop)
            ab__sub_backoff_arm(s); /* invariant 5 */
        return rc;
    }
    ab__sub_backoff_reset(s); /* the broker answered in full: the connection works */
    s->last_hb_ms = ab__mono_ms();
    if (s->o.scope == AB_SUB_ALL && end.head_pos > s->last_pos)
        s->last_pos = end.head_pos; /* everything up to it was sent */
    if (end.head_pos > s->synced_pos)
        s->synced_pos = end.head_pos;
    return AB_OK;
}

ab_status_t ab__sub_live_event(ab_sub_t *s, const ab_stamp_t *st, const uint8_t *b, size_t len,
                               ab_error_t *err)
{
    ab_event_t ev;
    ab_error_t derr = AB_ERROR_INIT;
    if (sub_decode(s, b, len, &ev, &derr) != AB_OK)
        return AB_OK; /* the broker only fans out valid envelopes; a hole check refills */
    int k = classify(s, &ev, st);
    if (k == K_HOLE) { /* invariant 2 */
        s->stats.holes++;
        ab__sub_fifo_clear(&s->fifo);
        s->need_replay = true;
        return AB_OK;
    }
    bool gap = st->pos > s->synced_pos && !live_syncs(s, st); /* invariant 6 */
    ab_status_t rc = AB_OK;
    if (k == K_DUP) {
        s->stats.dups++;
        if (!gap && st->pos > s->synced_pos)
            s->synced_pos = st->pos;
    } else {
        rc = deliver(s, &ev, st, b, len, false, !gap, err);
    }
    if (gap && st->has_tprev) { /* an unordered thread: one of its events may be missing */
        s->stats.holes++;
        s->need_replay = true; /* the FIFO is dropped before the replay (subscriber.c) */
    }
    return rc;
}

ab_status_t ab__sub_fifo_run(ab_sub_t *s, ab_error_t *err)
{
    const sub_item_t *it;
    while (!s->stop && !s->need_replay && (it = ab__sub_fifo_front(&s->fifo)) != NULL) {
        ab_status_t rc = ab__sub_live_event(s, &it->stamp, it->bytes, it->len, err);
        ab__sub_fifo_pop(&s->fifo); /* no-op after a hole: the FIFO was cleared */
        if (rc != AB_OK)
            return rc;
    }
    return AB_OK;
}

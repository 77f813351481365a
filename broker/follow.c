/*
 * follow.c - the writer's follower of a shared store: the other brokers'
 * committed events, read back by position and fanned out in position order
 * among this broker's own (follow.h; docs/SCALING.md "Several brokers").
 *
 * Invariants:
 *  1. Positions are fanned out in ascending order, each once: `fanned` only
 *     grows, an own commit [first, last] is fanned out only after every
 *     position below first (they are committed and visible once the own
 *     commit returned: the store's positions grow in commit order), and
 *     reads start after `fanned`.
 *  2. A run with an event of another broker is evicted from the sequencer's
 *     cache (never while a group is staged: the follower runs between
 *     groups), so its next event here is checked against the stored head;
 *     so is the thread's state (seq_thread.c) when the event is one that
 *     changes it (a run boundary, ACTIVITY_SNAPSHOT, MESSAGES_SNAPSHOT), so
 *     the resume rule and the activity rule here see the other broker's
 *     interrupts, answers and activity messages from then on.
 *  3. A read that fails (the store is unreachable) leaves `fanned` where it
 *     was; the next wake or own commit reads from there again. A live
 *     message lost that way is what subscribers already recover from the
 *     store by position (PROTOCOL.md: live is best effort, replay is exact).
 *  4. Nothing here runs unless the plugin is shared (f->on).
 *  5. A notification is acted on before the writer next sleeps, also when the
 *     store's client library read it off the descriptor while the writer ran
 *     its own statements on that connection (ab__follow_pending).
 *  6. Every committed event up to `fanned` is applied to the sequencer's caches:
 *     its own by the commit, the others' by the evictions of invariant 2. When an
 *     own commit moves `fanned` over positions a failed read left unread, every
 *     cached run and thread state is dropped first: what is loaded again from the
 *     store holds them. So `fanned` is the `seen` of a fenced append (ab__follow_seen).
 */
#include "follow.h"
#include "dispatch.h"
#include "loader.h"
#include "seq_internal.h"
#include "writer_int.h"

#include <string.h>

#define FOLLOW_PAGE 1024 /* rows per read */

void ab__follow_init(ab__follow_t *f, ab__shared_t *b, ab_seq_t *seq)
{
    memset(f, 0, sizeof *f);
    f->b = b;
    f->seq = seq;
    f->on = ab__plugin_shared(b->plugin) && ab_doc_new(&f->doc) == AB_OK;
    f->fanned = atomic_load(&b->head_pos);
}

void ab__follow_free(ab__follow_t *f)
{
    ab_doc_destroy(&f->doc);
    f->on = false;
}

typedef struct page {
    ab__follow_t *f;
    ab__fanout_t *fan;
    bool broken; /* a row out of order: stop (invariant 1) */
} page_t;

/* A followed RUN_STARTED / RUN_FINISHED / RUN_ERROR moves its request as an own commit's
 * would (ab__dispatch_committed): the other broker may have a worker whose request this
 * broker's table holds. */
static void note_run(ab__follow_t *f, const ab_event_t *ev, const ab_agui_info_t *info)
{
    const ab_val_t *t = ab_val_get(ev->body, "type");
    ab_append_event_t a = {.thread = ev->thread, .run = ev->run, .epoch = ev->epoch};
    if (f->disp == NULL || t == NULL || t->type != AB_VAL_STR)
        return;
    if (info->type == AB_AGUI_RUN_ERROR || ab_val_str_eq(t, "RUN_ERROR"))
        a.status = AB_RUN_STATUS_ERRORED;
    else if (ab_val_str_eq(t, "RUN_STARTED"))
        a.status = AB_RUN_STATUS_ACTIVE;
    else if (ab_val_str_eq(t, "RUN_FINISHED"))
        a.status = AB_RUN_STATUS_FINISHED;
    if (a.status != AB_RUN_STATUS_UNKNOWN)
        ab__dispatch_committed(f->disp, &a, 1);
}

/* Whether a followed event changes its thread's state (ab__seq_thread_type()). */
static bool thread_event(const ab_event_t *ev, const ab_agui_info_t *info)
{
    const ab_val_t *t = ab_val_get(ev->body, "type");
    ab_agui_type_t type = info->type;
    if (type == AB_AGUI_UNKNOWN && t != NULL && t->type == AB_VAL_STR)
        type = ab_agui_type_from(t->u.s, t->len);
    return ab__seq_thread_type(type);
}

/* Fan out one row of another broker. */
static int fan_row(void *ud, const ab_row_t *row)
{
    page_t *pg = ud;
    ab__follow_t *f = pg->f;
    if (row->pos != f->fanned + 1) {
        pg->broken = true;
        return 1;
    }
    f->fanned = row->pos;
    ab_event_t ev;
    ab_error_t e = AB_ERROR_INIT;
    ab_doc_reset(f->doc);
    if (ab_event_decode(f->doc, row->bytes, row->len, &f->b->cfg->limits, &ev, &e) != AB_OK)
        return 0; /* stored by a broker that accepted it: cannot happen; a live loss */
    ab_agui_info_t info;
    memset(&info, 0, sizeof info);
    if (ab_event_by_broker(ev.body))
        info.type = AB_AGUI_RUN_ERROR; /* the stamp's author (fanout.c) */
    ab_seq_item_t it = {
        .ev = &ev, .info = &info, .bytes = row->bytes, .len = row->len, .pos = row->pos};
    ab__fanout_event(pg->fan, &it, row->commit_us);
    ab__seq_run_t *r = ab__seq_find(f->seq, row->thread, row->run);
    if (r)
        ab__seq_evict(f->seq, r);
    if (thread_event(&ev, &info))
        ab__seq_thr_forget(f->seq, row->thread);
    f->remote++;
    note_run(f, &ev, &info);
    return 0;
}

/* Fan out the rows after `fanned` up to @p upto (0 = as far as there are). */
static void catch_up(ab__follow_t *f, ab__fanout_t *fan, uint64_t upto)
{
    ab_plugin_db_t *db = f->b->wdb;
    for (;;) {
        uint64_t want = FOLLOW_PAGE;
        if (upto) {
            if (f->fanned >= upto)
                break;
            if (upto - f->fanned < want)
                want = upto - f->fanned;
        }
        ab_read_t q = {.scope = AB_REPLAY_ALL, .after_pos = f->fanned, .limit = (uint32_t)want};
        page_t pg = {.f = f, .fan = fan};
        uint32_t n = 0;
        ab_error_t e = AB_ERROR_INIT;
        if (f->b->plugin->read(db, &q, fan_row, &pg, &n, &e) != AB_OK) {
            char line[512];
            ab__log(AB_LOG_WARN, "reading other brokers' events after %llu: %s",
                    (unsigned long long)f->fanned, ab_error_format(&e, line, sizeof line));
            break;
        }
        if (pg.broken || n < want)
            break;
    }
    ab__fanout_flush(fan);
    uint64_t head = atomic_load(&f->b->head_pos);
    if (f->fanned > head)
        atomic_store(&f->b->head_pos, f->fanned);
}

void ab__follow_before(ab__follow_t *f, ab__fanout_t *fan, uint64_t first)
{
    if (f->on && first > f->fanned + 1)
        catch_up(f, fan, first - 1);
}

void ab__follow_after(ab__follow_t *f, ab__fanout_t *fan, uint64_t first, uint64_t last)
{
    if (!f->on)
        return;
    if (f->fanned + 1 < first) /* the read below first failed: those events are unapplied */
        ab__seq_forget_all(f->seq);
    if (last > f->fanned)
        f->fanned = last;
    catch_up(f, fan, 0);
}

int ab__follow_fd(const ab__follow_t *f)
{
    return f->on ? f->b->plugin->wake_fd(f->b->wdb) : -1;
}

/* Drain the notifications and act on them; with @p always, also read when there were none.
 * @return whether there were any. */
static bool drain(ab__follow_t *f, ab__fanout_t *fan, bool always)
{
    if (!f->on)
        return false;
    ab_error_t e = AB_ERROR_INIT;
    uint32_t woken = 0;
    if (f->b->plugin->wake_drain(f->b->wdb, &woken, &e) != AB_OK)
        return false; /* reconnects at the next call; the poll timeout brings us back */
    bool any = woken != 0;
    if (!any && !always)
        return false;
    /* a notification may arrive while reading: read again until none came */
    for (int i = 0; i < 64; i++) {
        if (woken & AB_WAKE_REQUESTS)
            ab__dispatch_stale(f->disp); /* another broker put or moved a request */
        catch_up(f, fan, 0);
        if (f->b->plugin->wake_drain(f->b->wdb, &woken, &e) != AB_OK || woken == 0)
            break;
    }
    return any;
}

void ab__follow_poll(ab__follow_t *f, ab__fanout_t *fan)
{
    drain(f, fan, true);
}

bool ab__follow_pending(ab__follow_t *f, ab__fanout_t *fan)
{
    return drain(f, fan, false);
}

/*
 * seq_activity.c - the activity messages a thread holds, for rule R20
 * across runs (docs/SEQUENCER.md section 2b, docs/LIFECYCLE.md decision 1).
 *
 * AG-UI messages accumulate across the runs of a thread, so an
 * ACTIVITY_DELTA may patch an activity message an earlier run created. The
 * run's lifecycle checker decides R20 for the activity messages of its own
 * run; for any other id it calls ab__seq_act_baseline(), which answers from
 * the thread: the thread holds an activity message from its ACTIVITY_SNAPSHOT
 * (replacing or not) or a MESSAGES_SNAPSHOT that carries it, until a later
 * MESSAGES_SNAPSHOT that carries activity messages leaves it out (one that
 * carries none keeps them), the same rule the checker applies within a run,
 * over every event of the thread in position order.
 *
 * Invariants:
 *  1. Every id a facet lists is held by the thread (committed events, then
 *     the group's staged ones in stage order). When the facet is complete it
 *     lists all of them; past AB__SEQ_MAX_ACTS (or when a copy cannot be
 *     allocated) it is incomplete, and an id it does not list is looked up
 *     in the store (a probe) instead of being refused.
 *  2. A facet is derived from the store: the thread's events read in
 *     position order, in pages of AB__SEQ_PAGE, each decoded alone into the
 *     sequencer's doc (reset after each), then the group's staged activity
 *     events of the thread. Nothing is trusted from memory alone: a facet is
 *     dropped with its thread state (LRU, abort) and derived again.
 *  3. A facet that a staged event changed, or that was derived or probed
 *     while the group holds staged events, has group_gen == gen, so an abort
 *     drops it (seq_thread.c invariant 3).
 *  4. Only events that are not the run's own baseline reach this file: an
 *     ACTIVITY_DELTA for an id its run did not snapshot. Every other event
 *     costs at most a type test, and an ACTIVITY_SNAPSHOT or
 *     MESSAGES_SNAPSHOT one thread-state lookup when it is staged.
 */
#include "ab_common.h"
#include "seq_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- the facet ---------------------------------------------------------------- */

static bool same(const ab__seq_aid_t *a, ab_str_t id)
{
    return a->len == id.len && (id.len == 0 || memcmp(a->id, id.ptr, id.len) == 0);
}

static bool holds(const ab__seq_act_t *a, ab_str_t id)
{
    for (uint32_t i = 0; i < a->n; i++)
        if (same(&a->ids[i], id))
            return true;
    return false;
}

static char *copy(ab_str_t id)
{
    char *p = malloc(id.len + 1);
    if (p) {
        if (id.len)
            memcpy(p, id.ptr, id.len);
        p[id.len] = '\0';
    }
    return p;
}

/* The thread holds @p id: list it, or when there is no room, say the list is incomplete. */
static void add(ab__seq_act_t *a, ab_str_t id)
{
    if (holds(a, id))
        return;
    char *p = a->n < AB__SEQ_MAX_ACTS ? copy(id) : NULL;
    if (!p) {
        a->complete = false; /* invariant 1: still only held ids */
        return;
    }
    a->ids[a->n++] = (ab__seq_aid_t){p, id.len};
}

static void clear(ab__seq_act_t *a)
{
    for (uint32_t i = 0; i < a->n; i++)
        free(a->ids[i].id);
    a->n = a->next = 0;
}

/* An id a probe found held: listed, in place of an older one when all slots are used. */
static void remember(ab__seq_act_t *a, ab_str_t id)
{
    char *p = copy(id);
    if (!p)
        return;
    if (a->n < AB__SEQ_MAX_ACTS) {
        a->ids[a->n++] = (ab__seq_aid_t){p, id.len};
        return;
    }
    free(a->ids[a->next].id);
    a->ids[a->next] = (ab__seq_aid_t){p, id.len};
    a->next = (a->next + 1) % AB__SEQ_MAX_ACTS;
}

void ab__seq_act_free(ab__seq_act_t *a)
{
    if (!a)
        return;
    clear(a);
    free(a);
}

size_t ab__seq_act_memory(const ab__seq_act_t *a)
{
    if (!a)
        return 0;
    size_t m = sizeof(*a);
    for (uint32_t i = 0; i < a->n; i++)
        m += a->ids[i].len + 1;
    return m;
}

/* ---- one event ---------------------------------------------------------------- */

/* What a pass over the thread's events follows: the whole facet, or one id (a probe). */
typedef struct follow {
    ab__seq_act_t *set; /**< the facet being derived, or NULL for a probe */
    ab_str_t id;        /**< probe: the id */
    bool held;          /**< probe: whether the thread holds it so far */
} follow_t;

static bool str_of(const ab_val_t *v, ab_str_t *out)
{
    if (!v || v->type != AB_VAL_STR)
        return false;
    *out = (ab_str_t){v->u.s ? v->u.s : "", v->len};
    return true;
}

/* Message @p m of a MESSAGES_SNAPSHOT is an activity message: its id. */
static bool activity_id(const ab_val_t *m, ab_str_t *id)
{
    return ab_val_str_eq(ab_val_get(m, "role"), "activity") && str_of(ab_val_get(m, "id"), id);
}

static void messages_snapshot(follow_t *f, const ab_val_t *msgs)
{
    ab_str_t id;
    uint32_t n = 0;
    for (uint32_t i = 0; msgs && msgs->type == AB_VAL_ARRAY && i < msgs->len; i++)
        n += activity_id(&msgs->u.items[i], &id);
    if (n == 0)
        return; /* no activity messages: the thread keeps its own */
    if (f->set) {
        clear(f->set);
        f->set->complete = true;
    } else {
        f->held = false;
    }
    for (uint32_t i = 0; i < msgs->len; i++) {
        if (!activity_id(&msgs->u.items[i], &id))
            continue;
        if (f->set)
            add(f->set, id);
        else if (id.len == f->id.len && memcmp(id.ptr, f->id.ptr, id.len) == 0)
            f->held = true;
    }
}

/* One event of the thread, of type @p type with body @p body, in position order. */
static void visit(follow_t *f, ab_agui_type_t type, const ab_val_t *body)
{
    ab_str_t id;
    if (type == AB_AGUI_MESSAGES_SNAPSHOT) {
        messages_snapshot(f, ab_val_get(body, "messages"));
    } else if (type == AB_AGUI_ACTIVITY_SNAPSHOT && str_of(ab_val_get(body, "messageId"), &id)) {
        if (f->set)
            add(f->set, id);
        else if (id.len == f->id.len && memcmp(id.ptr, f->id.ptr, id.len) == 0)
            f->held = true;
    }
}

void ab__seq_act_apply(ab__seq_act_t *a, const ab_seq_item_t *it)
{
    follow_t f = {a, {NULL, 0}, false};
    visit(&f, it->info->type, it->info->event);
}

/* ---- the store ----------------------------------------------------------------- */

typedef struct pass {
    ab_seq_t *s;
    follow_t *f;
    uint64_t after; /**< position of the last row read */
    ab_status_t rc;
    ab_error_t *err;
} pass_t;

/* Whether @p len bytes at @p p contain @p w: the type's name is stored verbatim. */
static bool contains(const uint8_t *p, size_t len, const char *w)
{
    size_t n = strlen(w);
    for (size_t i = 0; i + n <= len; i++) {
        const uint8_t *q = memchr(p + i, w[0], len - n + 1 - i);
        if (!q)
            return false;
        i = (size_t)(q - p);
        if (memcmp(q, w, n) == 0)
            return true;
    }
    return false;
}

static int pass_row(void *ud, const ab_row_t *row)
{
    pass_t *c = ud;
    c->after = row->pos;
    if (!contains(row->bytes, row->len, "ACTIVITY_SNAPSHOT") &&
        !contains(row->bytes, row->len, "MESSAGES_SNAPSHOT"))
        return 0; /* neither type: nothing to decode */
    ab_limits_t lim = ab__limits_stored();
    ab_event_t ev;
    ab_error_t e = AB_ERROR_INIT;
    if (ab_event_decode(c->s->doc, row->bytes, row->len, &lim, &ev, &e) != AB_OK) {
        c->rc = ab_error_set(c->err, e.code == AB_NOMEM ? AB_NOMEM : AB_CORRUPT, "seq",
                             "stored event at position %llu of thread '%.*s' does not decode: %s",
                             (unsigned long long)row->pos,
                             (int)ab__utf8_cut(row->thread.ptr, row->thread.len, 64),
                             row->thread.ptr, e.message); /* never a character split */
        ab_doc_reset(c->s->doc);
        return 1;
    }
    const ab_val_t *tv = ab_val_get(ev.body, "type");
    ab_str_t ts;
    if (str_of(tv, &ts))
        visit(c->f, ab_agui_type_from(ts.ptr, ts.len), ev.body);
    ab_doc_reset(c->s->doc);
    return 0;
}

/* Follow @p f over the thread's stored events, then its staged ones (invariant 2). */
static ab_status_t follow_thread(ab_seq_t *s, ab_str_t thread, follow_t *f, bool *staged,
                                 ab_error_t *err)
{
    pass_t c = {s, f, 0, AB_OK, err};
    ab_read_t req = {0};
    req.scope = AB_REPLAY_THREAD;
    req.thread = thread;
    req.limit = AB__SEQ_PAGE;
    for (;;) {
        uint32_t count = 0;
        req.after_pos = c.after;
        ab_status_t rc = s->plugin->read(s->db, &req, pass_row, &c, &count, err);
        if (rc != AB_OK)
            return rc;
        if (c.rc != AB_OK)
            return c.rc;
        if (count < req.limit)
            break;
    }
    *staged = s->npend > 0;
    for (size_t i = 0; i < s->ntev; i++) {
        const ab_seq_item_t *it = s->pend_items[s->tev[i].idx];
        if (ab__seq_act_event(it->info->type) && it->ev->thread.len == thread.len &&
            memcmp(it->ev->thread.ptr, thread.ptr, thread.len) == 0)
            visit(f, it->info->type, it->info->event);
    }
    return AB_OK;
}

/* Derive the activity facet of @p t. */
static ab_status_t load(ab_seq_t *s, ab__seq_thr_t *t, ab_error_t *err)
{
    ab__seq_act_t *a = calloc(1, sizeof(*a));
    if (!a)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory loading thread '%s'", t->thread);
    a->complete = true; /* a thread starts with no activity messages */
    follow_t f = {a, {NULL, 0}, false};
    bool staged = false;
    ab_status_t rc = follow_thread(s, (ab_str_t){t->thread, t->thread_len}, &f, &staged, err);
    if (rc != AB_OK) {
        ab__seq_act_free(a);
        return rc;
    }
    if (staged)
        t->group_gen = s->gen; /* invariant 3 */
    t->act = a;
    return AB_OK;
}

ab_status_t ab__seq_act_baseline(void *ud, ab_str_t id, ab_error_t *err)
{
    ab_seq_t *s = ud;
    if (!s->cur)
        return AB_OK; /* a run rebuilt from the store: its events were accepted once */
    ab__seq_thr_t *t = NULL;
    ab_status_t rc = ab__seq_thr_entry(s, s->cur->ev->thread, &t, err);
    if (rc != AB_OK || (!t->act && (rc = load(s, t, err)) != AB_OK))
        return rc;
    if (holds(t->act, id))
        return AB_OK;
    if (t->act->complete)
        return AB_NOT_FOUND;
    follow_t f = {NULL, id, false}; /* invariant 1: ask the store */
    bool staged = false;
    if ((rc = follow_thread(s, (ab_str_t){t->thread, t->thread_len}, &f, &staged, err)) != AB_OK)
        return rc;
    if (!f.held)
        return AB_NOT_FOUND;
    remember(t->act, id);
    if (staged)
        t->group_gen = s->gen;
    return AB_OK;
}

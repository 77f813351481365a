/*
 * lifecycle_table.c - the item table of the lifecycle checker: lookup, the
 * limits, and applying a plan (see lifecycle_internal.h).
 *
 * Items live in one chained hash table keyed by (kind, key), plus the owner
 * for steps. Every item is one malloc block holding its strings.
 *
 * Invariants:
 *  1. nitems <= nbuckets once the table exists; nbuckets is a power of two,
 *     at least AB__LC_MIN_BUCKETS, and never shrinks while the run is open.
 *  2. n_open, n_calls, n_ids always equal the counts of the items in the
 *     table (open items / tool calls / text, reasoning, subagent and activity
 *     items) and never exceed max_open, max_tool_calls, max_ids.
 *  3. Every open item of chunk form is on the `chunks` list, and no two of
 *     them share a lane (owner); nothing else is on it.
 *  4. Every tool call is on the calls list, in the order of its first start.
 *  5. mem == sizeof(ab_lifecycle_t) + thread_len + run_len
 *            + nbuckets * sizeof(pointer) + sum of item->size.
 *  6. ab__lc_apply() changes nothing unless it returns AB_OK: limits are
 *     checked and memory is obtained before the first write (commit).
 *
 * Item transitions and where they happen (commit):
 *
 *   (none)  -> OPEN     insert   text/tool/reasoning START or first chunk,
 *                                REASONING_START, STEP_STARTED, SUBAGENT_STARTED
 *   (none)  -> SEEN     insert   first event attributed to an unannounced subagent
 *   (none)  -> CLOSED   insert   ACTIVITY_SNAPSHOT of a new activity message
 *   OPEN    -> CLOSED   act      *_END, or chunk_end (lane closes its stream)
 *   CLOSED  -> OPEN     act      reopening START or chunk
 *   OPEN    -> (none)   act      REASONING_END, STEP_FINISHED (REMOVE)
 *   CLOSED  -> (none)   act      replacing ACTIVITY_SNAPSHOT (re-mint, REMOVE)
 *   OPEN    -> DONE     act      SUBAGENT_FINISHED, SUBAGENT_ERROR
 *   (none)  -> CLOSED   ab__lc_messages_snapshot   activity message of a MESSAGES_SNAPSHOT
 *   CLOSED  -> (none)   ab__lc_messages_snapshot   activity message it leaves out
 *   any     -> (none)   ab__lc_clear   RUN_FINISHED, RUN_ERROR
 */
#include "ab_common.h"
#include "alloc_internal.h"
#include "lifecycle_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- strings ------------------------------------------------------------ */

bool ab__lc_str_eq(ab_str_t a, ab_str_t b)
{
    if (!a.ptr || !b.ptr)
        return !a.ptr && !b.ptr;
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

int ab__lc_show(ab_str_t s)
{
    return (int)(s.len < AB__LC_SHOW ? s.len : AB__LC_SHOW);
}

const char *ab__lc_owner_name(ab_str_t owner, char *buf, size_t size)
{
    if (!owner.ptr)
        snprintf(buf, size, "the parent agent");
    else
        snprintf(buf, size, "subagent %.*s", ab__lc_show(owner), owner.ptr);
    return buf;
}

/* ---- lookup ------------------------------------------------------------- */

static uint32_t item_hash(int kind, ab_str_t key, ab_str_t owner)
{
    unsigned char k = (unsigned char)kind;
    uint32_t h = ab__fnv32_more(AB__FNV32_BASIS, &k, 1);
    h = ab__fnv32_more(h, key.ptr, key.len);
    if (kind == AB__LC_STEP) {
        unsigned char tagged = owner.ptr != NULL;
        h = ab__fnv32_more(h, &tagged, 1);
        h = ab__fnv32_more(h, owner.ptr, owner.len);
    }
    return h;
}

ab__lc_item_t *ab__lc_find(const ab_lifecycle_t *lc, int kind, ab_str_t key, ab_str_t owner)
{
    if (!lc->buckets || !key.ptr || key.len > AB__LC_STR_MAX)
        return NULL;
    uint32_t h = item_hash(kind, key, owner);
    for (ab__lc_item_t *it = lc->buckets[h & (lc->nbuckets - 1)]; it; it = it->hnext) {
        if (it->hash != h || it->kind != kind || !ab__lc_str_eq(it->key, key))
            continue;
        if (kind != AB__LC_STEP || ab__lc_str_eq(it->owner, owner))
            return it;
    }
    return NULL;
}

ab__lc_item_t *ab__lc_lane(const ab_lifecycle_t *lc, ab_str_t owner)
{
    for (ab__lc_item_t *it = lc->chunks; it; it = it->chunk_next)
        if (ab__lc_str_eq(it->owner, owner))
            return it;
    return NULL;
}

/* ---- limits ------------------------------------------------------------- */

static bool counts_as_id(int kind)
{
    return kind == AB__LC_TEXT || kind == AB__LC_RMSG || kind == AB__LC_SUB || kind == AB__LC_ACT;
}

static ab_status_t check_lengths(const ab__lc_spec_t *s, ab_error_t *err)
{
    const ab__lc_kind_info_t *k = &ab__lc_kinds[s->kind];
    const ab_str_t v[4] = {s->key, s->owner, s->a1, s->a2};
    const char *f[4] = {k->key_field, "/subagentRunId", k->a1_field, k->a2_field};
    for (int i = 0; i < 4; i++)
        if (v[i].ptr && v[i].len > AB__LC_STR_MAX)
            return ab_error_set(err, AB_TOO_LARGE, f[i],
                                "%s is %zu bytes; the lifecycle checker keeps strings of at most "
                                "%u bytes",
                                f[i] + 1, v[i].len, AB__LC_STR_MAX);
    return AB_OK;
}

/* Change of n_open, n_calls and n_ids that committing @p op would make. */
static void count_delta(const ab__lc_op_t *op, long d[3])
{
    d[0] = d[1] = d[2] = 0;
    for (int i = 0; i < op->nspec; i++) {
        d[0] += op->spec[i].status == AB__LC_OPEN;
        d[1] += op->spec[i].kind == AB__LC_TOOL;
        d[2] += counts_as_id(op->spec[i].kind);
    }
    if (op->target) {
        int a = op->action;
        if (a == AB__LC_DO_OPEN)
            d[0]++;
        else if (a == AB__LC_DO_CLOSE || a == AB__LC_DO_DONE)
            d[0]--;
        else if (a == AB__LC_DO_REMOVE) {
            d[0] -= op->target->status == AB__LC_OPEN;
            d[2] -= counts_as_id(op->target->kind);
        }
    }
    if (op->lane_close)
        d[0]--;
}

static ab_status_t check_limits(const ab_lifecycle_t *lc, const ab__lc_op_t *op, ab_error_t *err)
{
    for (int i = 0; i < op->nspec; i++) {
        ab_status_t st = check_lengths(&op->spec[i], err);
        if (st != AB_OK)
            return st;
    }
    static const char *const what[3] = {"open items", "tool calls", "remembered ids"};
    static const char *const limit[3] = {"max_open", "max_tool_calls", "max_ids"};
    const uint32_t have[3] = {lc->n_open, lc->n_calls, lc->n_ids};
    const uint32_t max[3] = {lc->lim.max_open, lc->lim.max_tool_calls, lc->lim.max_ids};
    const char *field = op->nspec    ? ab__lc_kinds[op->spec[0].kind].key_field
                        : op->target ? ab__lc_kinds[op->target->kind].key_field
                                     : NULL;
    long d[3];
    count_delta(op, d);
    for (int i = 0; i < 3; i++)
        if (d[i] > 0 && (uint64_t)have[i] + (uint64_t)d[i] > max[i])
            return ab_error_set(err, AB_TOO_LARGE, field,
                                "too many %s in one run: the lifecycle checker's %s is %u", what[i],
                                limit[i], max[i]);
    return AB_OK;
}

/* ---- allocation --------------------------------------------------------- */

static ab_str_t put(char **p, ab_str_t s)
{
    if (!s.ptr)
        return s;
    if (s.len)
        memcpy(*p, s.ptr, s.len);
    ab_str_t r = {*p, s.len};
    *p += s.len;
    return r;
}

static ab__lc_item_t *item_new(const ab__lc_spec_t *s)
{
    size_t n = s->key.len + s->owner.len + s->a1.len + s->a2.len;
    ab__lc_item_t *it = ab__calloc(1, sizeof(*it) + n);
    if (!it)
        return NULL;
    char *p = it->data;
    it->key = put(&p, s->key);
    it->owner = put(&p, s->owner);
    it->a1 = put(&p, s->a1);
    it->a2 = put(&p, s->a2);
    it->kind = s->kind;
    it->status = s->status;
    it->form = s->form;
    it->size = sizeof(*it) + n;
    it->hash = item_hash(it->kind, it->key, it->owner);
    return it;
}

/* Make room for @p need items; rehashes into a larger bucket array. */
static ab_status_t reserve(ab_lifecycle_t *lc, size_t need, ab_error_t *err)
{
    if (need <= lc->nbuckets)
        return AB_OK;
    size_t cap = lc->nbuckets ? lc->nbuckets : AB__LC_MIN_BUCKETS;
    while (cap < need)
        cap *= 2;
    ab__lc_item_t **b = ab__calloc(cap, sizeof(*b));
    if (!b)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory growing the lifecycle table");
    for (size_t i = 0; i < lc->nbuckets; i++) {
        ab__lc_item_t *it = lc->buckets[i];
        while (it) {
            ab__lc_item_t *next = it->hnext;
            it->hnext = b[it->hash & (cap - 1)];
            b[it->hash & (cap - 1)] = it;
            it = next;
        }
    }
    ab__free(lc->buckets);
    lc->mem += (cap - lc->nbuckets) * sizeof(*b);
    lc->buckets = b;
    lc->nbuckets = cap;
    return AB_OK;
}

static ab_status_t alloc_op(ab_lifecycle_t *lc, ab__lc_op_t *op, ab_error_t *err)
{
    for (int i = 0; i < op->nspec; i++) {
        op->made[i] = item_new(&op->spec[i]);
        if (!op->made[i])
            goto out_free_items;
    }
    size_t need = lc->nitems + (size_t)op->nspec;
    if (op->target && op->action == AB__LC_DO_REMOVE)
        need--;
    if (reserve(lc, need, err) == AB_OK)
        return AB_OK;
out_free_items:
    for (int i = 0; i < op->nspec; i++) {
        ab__free(op->made[i]);
        op->made[i] = NULL;
    }
    return ab_error_set(err, AB_NOMEM, NULL, "out of memory in the lifecycle checker");
}

/* ---- commit (cannot fail) ----------------------------------------------- */

static void chunk_link(ab_lifecycle_t *lc, ab__lc_item_t *it)
{
    it->chunk_prev = NULL;
    it->chunk_next = lc->chunks;
    if (lc->chunks)
        lc->chunks->chunk_prev = it;
    lc->chunks = it;
}

static void chunk_unlink(ab_lifecycle_t *lc, ab__lc_item_t *it)
{
    if (it->chunk_prev)
        it->chunk_prev->chunk_next = it->chunk_next;
    else
        lc->chunks = it->chunk_next;
    if (it->chunk_next)
        it->chunk_next->chunk_prev = it->chunk_prev;
    it->chunk_prev = it->chunk_next = NULL;
}

/* The lane can no longer continue: the stream's *_END is implied. */
static void chunk_end(ab_lifecycle_t *lc, ab__lc_item_t *it)
{
    chunk_unlink(lc, it);
    it->status = AB__LC_CLOSED;
    lc->n_open--;
}

static void set_open(ab_lifecycle_t *lc, ab__lc_item_t *it)
{
    it->status = AB__LC_OPEN;
    it->opened = ++lc->seq;
    lc->n_open++;
    if (it->form == AB__LC_CHUNK)
        chunk_link(lc, it);
}

static void insert(ab_lifecycle_t *lc, ab__lc_item_t *it)
{
    size_t b = it->hash & (lc->nbuckets - 1);
    it->hnext = lc->buckets[b];
    lc->buckets[b] = it;
    lc->nitems++;
    lc->mem += it->size;
    if (it->kind == AB__LC_TOOL) {
        if (lc->calls_tail)
            lc->calls_tail->call_next = it;
        else
            lc->calls_head = it;
        lc->calls_tail = it;
        lc->n_calls++;
    }
    if (counts_as_id(it->kind))
        lc->n_ids++;
    if (it->status == AB__LC_OPEN)
        set_open(lc, it);
}

/* Only spans, steps and activity messages are removed; none is a tool call. */
static void remove_item(ab_lifecycle_t *lc, ab__lc_item_t *it)
{
    ab__lc_item_t **pp = &lc->buckets[it->hash & (lc->nbuckets - 1)];
    while (*pp != it)
        pp = &(*pp)->hnext;
    *pp = it->hnext;
    lc->nitems--;
    lc->mem -= it->size;
    if (it->status == AB__LC_OPEN)
        lc->n_open--;
    if (counts_as_id(it->kind))
        lc->n_ids--;
    ab__free(it);
}

static void act(ab_lifecycle_t *lc, ab__lc_item_t *it, int action)
{
    switch (action) {
    case AB__LC_DO_OPEN: set_open(lc, it); break;
    case AB__LC_DO_CLOSE:
        it->status = AB__LC_CLOSED;
        lc->n_open--;
        break;
    case AB__LC_DO_REMOVE: remove_item(lc, it); break;
    case AB__LC_DO_RESULT: it->answered = true; break;
    case AB__LC_DO_DONE:
        it->status = AB__LC_DONE;
        lc->n_open--;
        break;
    default: break;
    }
}

static void commit(ab_lifecycle_t *lc, ab__lc_op_t *op)
{
    if (op->lane_close)
        chunk_end(lc, op->lane_close);
    if (op->target)
        act(lc, op->target, op->action);
    for (int i = 0; i < op->nspec; i++) {
        insert(lc, op->made[i]);
        op->made[i] = NULL;
    }
}

ab_status_t ab__lc_apply(ab_lifecycle_t *lc, ab__lc_op_t *op, ab_error_t *err)
{
    ab_status_t st = check_limits(lc, op, err);
    if (st == AB_OK)
        st = alloc_op(lc, op, err);
    if (st == AB_OK)
        commit(lc, op);
    return st;
}

/* ---- MESSAGES_SNAPSHOT (its own two phases) ----------------------------- */

/* Message @p m of a snapshot is an activity message: its id and owner. */
static bool activity_message(const ab_val_t *m, ab_str_t *id, ab_str_t *owner)
{
    const ab_val_t *v = ab_val_get(m, "id"), *sub = ab_val_get(m, "subagentRunId");
    if (!ab_val_str_eq(ab_val_get(m, "role"), "activity") || !v || v->type != AB_VAL_STR)
        return false;
    *id = (ab_str_t){v->u.s ? v->u.s : "", v->len};
    *owner = (ab_str_t){NULL, 0};
    if (sub && sub->type == AB_VAL_STR)
        *owner = (ab_str_t){sub->u.s ? sub->u.s : "", sub->len};
    return true;
}

/* Phase 1: the activity messages of @p msgs as new items (@p made, *n of them); nothing changes. */
static ab_status_t snapshot_items(const ab_val_t *msgs, ab__lc_item_t **made, uint32_t *n,
                                  ab_error_t *err)
{
    char field[48];
    ab_str_t id, owner;
    for (uint32_t i = 0; i < msgs->len; i++) {
        if (!activity_message(&msgs->u.items[i], &id, &owner))
            continue;
        if (id.len > AB__LC_STR_MAX || owner.len > AB__LC_STR_MAX) {
            snprintf(field, sizeof(field), "/messages/%u/%s", i,
                     id.len > AB__LC_STR_MAX ? "id" : "subagentRunId");
            return ab_error_set(err, AB_TOO_LARGE, field,
                                "%s is longer than the %u bytes the lifecycle checker keeps",
                                field + 1, AB__LC_STR_MAX);
        }
        ab__lc_spec_t spec = {
            .kind = AB__LC_ACT, .status = AB__LC_CLOSED, .key = id, .owner = owner};
        if (!(made[*n] = item_new(&spec)))
            return ab_error_set(err, AB_NOMEM, NULL, "out of memory in the lifecycle checker");
        (*n)++;
    }
    return AB_OK;
}

/* Phase 2 (cannot fail): drop every activity item, insert @p made (duplicates freed). */
static void snapshot_commit(ab_lifecycle_t *lc, ab__lc_item_t **made, uint32_t n)
{
    for (size_t b = 0; b < lc->nbuckets; b++) {
        for (ab__lc_item_t **pp = &lc->buckets[b]; *pp;) {
            ab__lc_item_t *it = *pp;
            if (it->kind != AB__LC_ACT) {
                pp = &it->hnext;
                continue;
            }
            *pp = it->hnext; /* activity items are never open */
            lc->nitems--;
            lc->n_ids--;
            lc->mem -= it->size;
            ab__free(it);
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        if (ab__lc_find(lc, AB__LC_ACT, made[i]->key, (ab_str_t){NULL, 0}))
            ab__free(made[i]); /* the same id twice in one snapshot */
        else
            insert(lc, made[i]);
    }
}

ab_status_t ab__lc_messages_snapshot(ab_lifecycle_t *lc, const ab_val_t *msgs, ab_error_t *err)
{
    uint32_t want = 0, n = 0, old = 0;
    ab_str_t id, owner;
    for (uint32_t i = 0; msgs && msgs->type == AB_VAL_ARRAY && i < msgs->len; i++)
        want += activity_message(&msgs->u.items[i], &id, &owner);
    if (want == 0) { /* activities are kept: only the chunk streams end */
        while (lc->chunks)
            chunk_end(lc, lc->chunks);
        return AB_OK;
    }
    for (size_t b = 0; b < lc->nbuckets; b++)
        for (const ab__lc_item_t *it = lc->buckets[b]; it; it = it->hnext)
            old += it->kind == AB__LC_ACT;
    if ((uint64_t)lc->n_ids - old + want > lc->lim.max_ids)
        return ab_error_set(err, AB_TOO_LARGE, "/messages",
                            "too many remembered ids in one run: the lifecycle checker's max_ids "
                            "is %u",
                            lc->lim.max_ids);
    ab__lc_item_t **made = ab__calloc(want, sizeof(*made));
    if (!made)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory in the lifecycle checker");
    ab_status_t st = snapshot_items(msgs, made, &n, err);
    if (st == AB_OK)
        st = reserve(lc, lc->nitems - old + n, err);
    if (st == AB_OK) {
        while (lc->chunks)
            chunk_end(lc, lc->chunks);
        snapshot_commit(lc, made, n);
    } else {
        for (uint32_t i = 0; i < n; i++)
            ab__free(made[i]);
    }
    ab__free(made);
    return st;
}

void ab__lc_clear(ab_lifecycle_t *lc)
{
    for (size_t i = 0; i < lc->nbuckets; i++) {
        ab__lc_item_t *it = lc->buckets[i];
        while (it) {
            ab__lc_item_t *next = it->hnext;
            ab__free(it);
            it = next;
        }
    }
    ab__free(lc->buckets);
    lc->buckets = NULL;
    lc->nbuckets = lc->nitems = 0;
    lc->n_open = lc->n_calls = lc->n_ids = 0;
    lc->calls_head = lc->calls_tail = lc->chunks = NULL;
    lc->mem = sizeof(*lc) + lc->thread_len + lc->run_len;
}

/*
 * lifecycle.c - the AG-UI 1.0 run lifecycle checker: public API, run
 * boundaries (RUN_STARTED, RUN_FINISHED, RUN_ERROR) and outcomes.
 *
 * One checker guards one run of a producer. It is fed the ab_agui_info_t of
 * each validated event, in order, and rejects the first event that breaks
 * the ordering rules of the AG-UI 1.0 reference (docs/LIFECYCLE.md lists
 * them with their sources). The in-run rules are planned in
 * lifecycle_plan.c and applied by lifecycle_table.c.
 *
 * Invariants:
 *  1. A rejected event leaves the checker exactly as it was (state, items,
 *     counters, memory), whatever the error code: every check and every
 *     allocation happens before the first write.
 *  2. thread_id/run_id are either given at creation (ids_given) or copied
 *     from RUN_STARTED; once known they never change.
 *  3. In every state but ACTIVE the checker holds no items: RUN_FINISHED and
 *     RUN_ERROR drop them all, so a finished run costs only the struct and
 *     its two ids.
 *  4. Fields absent from the info but present in info->event (when given)
 *     are read from the event map, so a checker never misses a field the
 *     validator did not copy out.
 *  5. AB_AGUI_UNKNOWN events (dropped by the lenient pipeline) are accepted
 *     and change nothing.
 *
 * Run states and the event that moves between them:
 *
 *   NEW      -> ACTIVE    RUN_STARTED                      [run_started]
 *   NEW      -> ERRORED   RUN_ERROR (error before start)   [ab_lifecycle_check]
 *   ACTIVE   -> ACTIVE    any in-run event                 [ab__lc_plan + ab__lc_apply]
 *   ACTIVE   -> FINISHED  RUN_FINISHED, all closed         [run_finished]
 *   ACTIVE   -> ERRORED   RUN_ERROR (open items abandoned) [ab_lifecycle_check]
 *   FINISHED -> ERRORED   one late RUN_ERROR               [ab_lifecycle_check]
 *   NEW      -> error     anything else first: AB_INVALID_EVENT
 *   ACTIVE   -> error     RUN_STARTED (nested): AB_INVALID_EVENT
 *   FINISHED -> error     anything but RUN_ERROR: AB_RUN_TERMINAL
 *   ERRORED  -> error     anything: AB_RUN_TERMINAL (a new run needs a new checker)
 */
#include "alloc_internal.h"
#include "lifecycle_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const ab__lc_kind_info_t ab__lc_kinds[AB__LC_KIND_COUNT] = {
    [AB__LC_TEXT] = {"text message", "/messageId", "/name", "/role"},
    [AB__LC_TOOL] = {"tool call", "/toolCallId", "/toolCallName", "/parentMessageId"},
    [AB__LC_RMSG] = {"reasoning message", "/messageId", NULL, NULL},
    [AB__LC_SPAN] = {"reasoning span", "/messageId", NULL, NULL},
    [AB__LC_STEP] = {"step", "/stepName", NULL, NULL},
    [AB__LC_SUB] = {"subagent", "/subagentRunId", NULL, NULL},
    [AB__LC_ACT] = {"activity message", "/messageId", NULL, NULL},
};

/* ---- API ---------------------------------------------------------------- */

ab_lifecycle_limits_t ab_lifecycle_limits_default(void)
{
    ab_lifecycle_limits_t l = {1024, 4096, 4096};
    return l;
}

static bool id_ok(const char *id, size_t len)
{
    return id && len > 0 && len <= AB__LC_STR_MAX;
}

static char *dup_bytes(const char *p, size_t n)
{
    char *d = ab__malloc(n ? n : 1);
    if (d && n)
        memcpy(d, p, n);
    return d;
}

ab_status_t ab_lifecycle_new(ab_lifecycle_t **out, const char *thread_id, size_t thread_len,
                             const char *run_id, size_t run_len,
                             const ab_lifecycle_limits_t *limits)
{
    ab_lifecycle_limits_t lim = limits ? *limits : ab_lifecycle_limits_default();
    bool given = thread_id || run_id;
    if (!out || (given && (!id_ok(thread_id, thread_len) || !id_ok(run_id, run_len))) ||
        (!given && (thread_len || run_len)))
        return AB_INVALID_ARGUMENT;
    if (lim.max_open == 0 || lim.max_tool_calls == 0 || lim.max_ids == 0)
        return AB_INVALID_ARGUMENT;
    ab_lifecycle_t *lc = ab__calloc(1, sizeof(*lc));
    if (!lc)
        return AB_NOMEM;
    lc->lim = lim;
    lc->ids_given = given;
    if (given) {
        lc->thread_id = dup_bytes(thread_id, thread_len);
        lc->run_id = dup_bytes(run_id, run_len);
        lc->thread_len = thread_len;
        lc->run_len = run_len;
        if (!lc->thread_id || !lc->run_id) {
            ab_lifecycle_destroy(&lc);
            return AB_NOMEM;
        }
    }
    lc->mem = sizeof(*lc) + lc->thread_len + lc->run_len;
    *out = lc;
    return AB_OK;
}

void ab_lifecycle_destroy(ab_lifecycle_t **lcp)
{
    if (!lcp || !*lcp)
        return;
    ab_lifecycle_t *lc = *lcp;
    ab__lc_clear(lc);
    ab__free(lc->thread_id);
    ab__free(lc->run_id);
    ab__free(lc);
    *lcp = NULL;
}

void ab_lifecycle_set_baseline(ab_lifecycle_t *lc, ab_lifecycle_baseline_fn fn, void *ud)
{
    if (!lc)
        return;
    lc->baseline = fn;
    lc->baseline_ud = fn ? ud : NULL;
}

ab_run_state_t ab_lifecycle_state(const ab_lifecycle_t *lc)
{
    return lc ? lc->state : AB_RUN_NEW;
}

size_t ab_lifecycle_memory(const ab_lifecycle_t *lc)
{
    return lc ? lc->mem : 0;
}

/* ---- helpers ------------------------------------------------------------ */

/* The string fields normalize() may fill, by key. */
#define NF(key, member)                                                                            \
    {                                                                                              \
        key, sizeof(key) - 1, offsetof(ab_agui_info_t, member)                                     \
    }
static const struct {
    const char *key;
    size_t klen;
    size_t off;
} norm_fields[] = {
    NF("threadId", thread_id),
    NF("runId", run_id),
    NF("messageId", message_id),
    NF("toolCallId", tool_call_id),
    NF("toolCallName", tool_call_name),
    NF("parentMessageId", parent_message_id),
    NF("role", role),
    NF("name", name),
    NF("stepName", step_name),
    NF("subagentRunId", subagent_run_id),
    NF("parentSubagentRunId", parent_subagent_run_id),
};
#undef NF

/*
 * Invariant 4: fill what the validator left out from the event map: each
 * member still unset takes the value of the first pair with its key, when
 * that is a string (as ab_val_get() would find it). One pass over the map
 * (it ran 11 lookups per event, 12% of the broker's writer thread).
 */
static void normalize(const ab_agui_info_t *in, ab_agui_info_t *e)
{
    *e = *in;
    const ab_val_t *m = in->event;
    if (!m || m->type != AB_VAL_MAP)
        return;
    unsigned seen = 0; /* bit k: the first pair with norm_fields[k].key was met */
    for (uint32_t i = 0; i < m->len; i++) {
        const ab_kv_t *kv = &m->u.pairs[i];
        for (size_t k = 0; k < sizeof(norm_fields) / sizeof(norm_fields[0]); k++) {
            if (kv->klen != norm_fields[k].klen ||
                memcmp(kv->key, norm_fields[k].key, kv->klen) != 0)
                continue;
            ab_str_t *dst = (ab_str_t *)(void *)((char *)e + norm_fields[k].off);
            if (!(seen & (1u << k)) && dst->ptr == NULL && kv->val.type == AB_VAL_STR)
                *dst = (ab_str_t){kv->val.u.s ? kv->val.u.s : "", kv->val.len};
            seen |= 1u << k;
            break;
        }
    }
}

static const char *run_name(const ab_lifecycle_t *lc, char *buf, size_t size)
{
    if (!lc->run_id)
        snprintf(buf, size, "the run");
    else
        snprintf(buf, size, "run %.*s",
                 (int)(lc->run_len < AB__LC_SHOW ? lc->run_len : AB__LC_SHOW), lc->run_id);
    return buf;
}

static ab_status_t terminal(const ab_lifecycle_t *lc, const ab_agui_info_t *e, ab_error_t *err)
{
    char rn[96];
    const char *tn = ab_agui_type_name(e->type);
    run_name(lc, rn, sizeof(rn));
    if (lc->state == AB_RUN_FINISHED)
        return ab_error_set(err, AB_RUN_TERMINAL, "/type",
                            "%s already finished: only one late RUN_ERROR may follow, not %s", rn,
                            tn);
    return ab_error_set(err, AB_RUN_TERMINAL, "/type",
                        "%s already ended with RUN_ERROR: %s is not allowed (a new RUN_STARTED "
                        "starts a new run and needs a new checker)",
                        rn, tn);
}

/* The event's threadId/runId must be the run's. */
static ab_status_t match_ids(const ab_lifecycle_t *lc, const ab_agui_info_t *e, ab_error_t *err)
{
    const char *tn = ab_agui_type_name(e->type);
    const ab_str_t have[2] = {e->thread_id, e->run_id};
    const ab_str_t want[2] = {{lc->thread_id, lc->thread_len}, {lc->run_id, lc->run_len}};
    static const char *const field[2] = {"/threadId", "/runId"};
    for (int i = 0; i < 2; i++) {
        if (!have[i].ptr)
            return ab_error_set(err, AB_INVALID_EVENT, field[i], "%s must carry %s", tn,
                                field[i] + 1);
        if (want[i].ptr && !ab__lc_str_eq(have[i], want[i]))
            return ab_error_set(err, AB_INVALID_EVENT, field[i],
                                "%s %s %.*s does not match the run's %s %.*s", tn, field[i] + 1,
                                ab__lc_show(have[i]), have[i].ptr, field[i] + 1,
                                ab__lc_show(want[i]), want[i].ptr);
    }
    return AB_OK;
}

/* ---- RUN_STARTED -------------------------------------------------------- */

static ab_status_t learn_ids(ab_lifecycle_t *lc, const ab_agui_info_t *e, ab_error_t *err)
{
    if (e->thread_id.len > AB__LC_STR_MAX || e->run_id.len > AB__LC_STR_MAX)
        return ab_error_set(err, AB_TOO_LARGE,
                            e->thread_id.len > AB__LC_STR_MAX ? "/threadId" : "/runId",
                            "RUN_STARTED ids are limited to %u bytes", AB__LC_STR_MAX);
    char *th = dup_bytes(e->thread_id.ptr, e->thread_id.len);
    char *rn = dup_bytes(e->run_id.ptr, e->run_id.len);
    if (!th || !rn) {
        ab__free(th);
        ab__free(rn);
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory copying the run's ids");
    }
    lc->thread_id = th;
    lc->run_id = rn;
    lc->thread_len = e->thread_id.len;
    lc->run_len = e->run_id.len;
    lc->mem += lc->thread_len + lc->run_len;
    return AB_OK;
}

static ab_status_t run_started(ab_lifecycle_t *lc, const ab_agui_info_t *e, ab_error_t *err)
{
    ab_status_t st = match_ids(lc, e, err);
    if (st == AB_OK && !lc->ids_given)
        st = learn_ids(lc, e, err);
    if (st == AB_OK)
        lc->state = AB_RUN_ACTIVE;
    return st;
}

/* ---- RUN_FINISHED ------------------------------------------------------- */

/* The open item opened first, ignoring chunk streams (RUN_FINISHED ends them). */
static const ab__lc_item_t *first_open(const ab_lifecycle_t *lc)
{
    const ab__lc_item_t *best = NULL;
    for (size_t i = 0; i < lc->nbuckets; i++)
        for (const ab__lc_item_t *it = lc->buckets[i]; it; it = it->hnext)
            if (it->status == AB__LC_OPEN && it->form != AB__LC_CHUNK &&
                (!best || it->opened < best->opened))
                best = it;
    return best;
}

static ab_status_t check_all_closed(const ab_lifecycle_t *lc, ab_error_t *err)
{
    const ab__lc_item_t *it = first_open(lc);
    if (!it)
        return AB_OK;
    char owner[96] = "";
    if (it->kind == AB__LC_STEP) {
        char who[80];
        snprintf(owner, sizeof(owner), " of %s", ab__lc_owner_name(it->owner, who, sizeof(who)));
    }
    return ab_error_set(err, AB_INVALID_EVENT, "/type", "%s %.*s%s is still open at RUN_FINISHED",
                        ab__lc_kinds[it->kind].name, ab__lc_show(it->key), it->key.ptr, owner);
}

typedef struct idref {
    const char *p;
    size_t len;
    size_t idx;
} idref_t;

static int idref_cmp(const void *a, const void *b)
{
    const idref_t *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->p, y->p, n) : 0;
    if (c == 0 && x->len != y->len)
        c = x->len < y->len ? -1 : 1;
    if (c == 0 && x->idx != y->idx)
        c = x->idx < y->idx ? -1 : 1;
    return c;
}

static bool same_id(const idref_t *a, const idref_t *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0);
}

/*
 * Interrupt ids must be unique within the run. Sorting by (id, index) keeps
 * this O(n log n); the reported duplicate is the one with the lowest index.
 */
static ab_status_t unique_interrupts(const ab_val_t *arr, ab_error_t *err)
{
    idref_t *refs = ab__malloc(arr->len * sizeof(*refs));
    if (!refs)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory checking interrupt ids");
    size_t m = 0;
    for (uint32_t i = 0; i < arr->len; i++) {
        const ab_val_t *id = ab_val_get(&arr->u.items[i], "id");
        if (id && id->type == AB_VAL_STR)
            refs[m++] = (idref_t){id->u.s ? id->u.s : "", id->len, i};
    }
    qsort(refs, m, sizeof(*refs), idref_cmp);
    const idref_t *dup = NULL, *first = NULL;
    for (size_t g = 0, i = 1; i <= m; i++) {
        if (i < m && same_id(&refs[i], &refs[g]))
            continue;
        if (i - g >= 2 && (!dup || refs[g + 1].idx < dup->idx)) {
            dup = &refs[g + 1];
            first = &refs[g];
        }
        g = i;
    }
    ab_status_t st = AB_OK;
    if (dup) {
        char field[64];
        snprintf(field, sizeof(field), "/outcome/interrupts/%zu/id", dup->idx);
        int n = (int)(dup->len < AB__LC_SHOW ? dup->len : AB__LC_SHOW);
        st = ab_error_set(err, AB_INVALID_EVENT, field,
                          "interrupt id %.*s is not unique within the run (first used by "
                          "/outcome/interrupts/%zu)",
                          n, dup->p, first->idx);
    }
    ab__free(refs);
    return st;
}

static bool val_is(const ab_val_t *v, ab_str_t s)
{
    if (v->type != AB_VAL_STR)
        return false;
    ab_str_t t = {v->u.s ? v->u.s : "", v->len};
    return ab__lc_str_eq(t, s);
}

/* pendingToolCallIds must be exactly the unanswered calls, in call order. */
static ab_status_t exact_pending(const ab_lifecycle_t *lc, const ab_val_t *arr, ab_error_t *err)
{
    static const char f[] = "/outcome/pendingToolCallIds";
    if (arr->type != AB_VAL_ARRAY)
        return ab_error_set(err, AB_INVALID_EVENT, f, "pendingToolCallIds must be an array");
    uint32_t i = 0;
    for (const ab__lc_item_t *c = lc->calls_head; c; c = c->call_next) {
        if (c->answered)
            continue;
        if (i >= arr->len)
            return ab_error_set(err, AB_INVALID_EVENT, f,
                                "pendingToolCallIds must list exactly the unanswered tool calls "
                                "in call order: tool call %.*s is missing",
                                ab__lc_show(c->key), c->key.ptr);
        if (!val_is(&arr->u.items[i], c->key))
            return ab_error_set(err, AB_INVALID_EVENT, f,
                                "pendingToolCallIds must list exactly the unanswered tool calls "
                                "in call order: item %u should be tool call %.*s",
                                i, ab__lc_show(c->key), c->key.ptr);
        i++;
    }
    if (i < arr->len)
        return ab_error_set(err, AB_INVALID_EVENT, f,
                            "pendingToolCallIds must list exactly the unanswered tool calls in "
                            "call order: item %u is not an unanswered tool call of this run",
                            i);
    return AB_OK;
}

static ab_agui_outcome_t outcome_of(const ab_agui_info_t *e, const ab_val_t **out)
{
    *out = e->event ? ab_val_get(e->event, "outcome") : NULL;
    if (e->outcome != AB_OUTCOME_NONE || !*out)
        return e->outcome;
    const ab_val_t *t = ab_val_get(*out, "type");
    if (ab_val_str_eq(t, "success"))
        return AB_OUTCOME_SUCCESS;
    if (ab_val_str_eq(t, "interrupt"))
        return AB_OUTCOME_INTERRUPT;
    if (ab_val_str_eq(t, "cancelled"))
        return AB_OUTCOME_CANCELLED;
    return AB_OUTCOME_NONE;
}

static ab_status_t check_outcome(const ab_lifecycle_t *lc, const ab_agui_info_t *e, ab_error_t *err)
{
    const ab_val_t *oc;
    ab_agui_outcome_t kind = outcome_of(e, &oc);
    if (kind == AB_OUTCOME_INTERRUPT) {
        const ab_val_t *arr = e->interrupts ? e->interrupts : ab_val_get(oc, "interrupts");
        if (!arr || arr->type != AB_VAL_ARRAY || arr->len == 0)
            return ab_error_set(err, AB_INVALID_EVENT, "/outcome/interrupts",
                                "an interrupt outcome needs at least one interrupt");
        return unique_interrupts(arr, err);
    }
    if (kind == AB_OUTCOME_SUCCESS) {
        const ab_val_t *arr = e->pending_tool_call_ids ? e->pending_tool_call_ids
                                                       : ab_val_get(oc, "pendingToolCallIds");
        if (arr)
            return exact_pending(lc, arr, err);
    }
    return AB_OK;
}

static ab_status_t run_finished(ab_lifecycle_t *lc, const ab_agui_info_t *e, ab_error_t *err)
{
    ab_status_t st = match_ids(lc, e, err);
    if (st == AB_OK)
        st = check_all_closed(lc, err);
    if (st == AB_OK)
        st = check_outcome(lc, e, err);
    if (st != AB_OK)
        return st;
    ab__lc_clear(lc);
    lc->state = AB_RUN_FINISHED;
    return AB_OK;
}

/* ---- dispatch ----------------------------------------------------------- */

static ab_status_t check_first(ab_lifecycle_t *lc, const ab_agui_info_t *e, ab_error_t *err)
{
    if (e->type == AB_AGUI_RUN_STARTED)
        return run_started(lc, e, err);
    if (e->type == AB_AGUI_RUN_ERROR) {
        lc->state = AB_RUN_ERRORED;
        return AB_OK;
    }
    return ab_error_set(err, AB_INVALID_EVENT, "/type",
                        "run must start with RUN_STARTED (or RUN_ERROR), not %s",
                        ab_agui_type_name(e->type));
}

ab_status_t ab_lifecycle_check(ab_lifecycle_t *lc, const ab_agui_info_t *ev, ab_error_t *err)
{
    if (!lc || !ev || (unsigned)ev->type >= AB_AGUI_TYPE_COUNT_)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "ab_lifecycle_check: bad argument");
    if (ev->type == AB_AGUI_UNKNOWN)
        return AB_OK;
    ab_agui_info_t e;
    normalize(ev, &e);
    if (lc->state == AB_RUN_NEW)
        return check_first(lc, &e, err);
    if (lc->state == AB_RUN_FINISHED && e.type == AB_AGUI_RUN_ERROR) {
        lc->state = AB_RUN_ERRORED;
        return AB_OK;
    }
    if (lc->state != AB_RUN_ACTIVE)
        return terminal(lc, &e, err);
    char rn[96];
    switch (e.type) {
    case AB_AGUI_RUN_STARTED:
        return ab_error_set(err, AB_INVALID_EVENT, "/type",
                            "nested RUN_STARTED: %s is still active", run_name(lc, rn, sizeof(rn)));
    case AB_AGUI_RUN_FINISHED: return run_finished(lc, &e, err);
    case AB_AGUI_RUN_ERROR:
        ab__lc_clear(lc);
        lc->state = AB_RUN_ERRORED;
        return AB_OK;
    case AB_AGUI_MESSAGES_SNAPSHOT:
        return ab__lc_messages_snapshot(lc, e.event ? ab_val_get(e.event, "messages") : NULL, err);
    default: break;
    }
    ab__lc_op_t op;
    memset(&op, 0, sizeof(op));
    ab_status_t st = ab__lc_plan(lc, &e, &op, err);
    return st != AB_OK ? st : ab__lc_apply(lc, &op, err);
}

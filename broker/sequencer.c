/*
 * sequencer.c - per-run sequencing, fencing and lifecycle for the writer
 * thread (see sequencer.h for the contract, docs/SEQUENCER.md for the rules
 * and the memory bound). The run state cache lives in seq_cache.c.
 *
 * Invariants:
 *  1. Rules are checked in the order of sequencer.h: fenced, duplicate,
 *     conflict, gap, run_terminal, invalid_event. A rejected event changes
 *     no run state (the lifecycle checker leaves itself unchanged on error).
 *  2. Every allocation a staged event needs is made before its checker is
 *     advanced, so an event is either fully staged or fully rejected.
 *  3. The pending list holds the staged events in stage order; for each run
 *     in the group, staged[i] is the pending index of seq last_seq + 1 + i,
 *     and the run is listed once in grp (group_gen == gen).
 *  4. Commit and abort both end the group (gen++): after commit the staged
 *     state is the committed state; after abort every run of the group is
 *     evicted, so its speculative checker is never used again.
 *  5. Within one stage call, a run with a rejected event has every later
 *     event of that call rejected with the first rejection's code.
 *  6. Every staged RUN_STARTED / RUN_FINISHED / RUN_ERROR is handed to the
 *     thread states (seq_thread.c) in stage order, so a thread's latest run
 *     always includes what is staged; the resume rule (rule 7) of a run's
 *     first RUN_STARTED reads them before the event is staged. So is every
 *     staged ACTIVITY_SNAPSHOT / MESSAGES_SNAPSHOT (seq_activity.c), which
 *     an ACTIVITY_DELTA of another run reads through the lifecycle checker's
 *     baseline callback while s->cur names it.
 */
#include "seq_internal.h"

#include <stdlib.h>
#include <string.h>

ab_status_t ab__seq_new(ab_seq_t **out, const ab_plugin_t *plugin, ab_plugin_db_t *db,
                        const ab_seq_opts_t *opts, ab_error_t *err)
{
    if (!out || !plugin || !db || !plugin->head || !plugin->read || !plugin->claim ||
        !plugin->event_bytes)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "sequencer needs a plugin and a db");
    ab_seq_t *s = calloc(1, sizeof(*s));
    if (!s)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory creating the sequencer");
    s->plugin = plugin;
    s->db = db;
    s->gen = 1;
    s->max_runs = opts && opts->max_runs ? opts->max_runs : AB__SEQ_MAX_RUNS;
    s->max_run_bytes = opts && opts->max_run_bytes ? opts->max_run_bytes : AB__SEQ_MAX_RUN_BYTES;
    ab_lifecycle_limits_t def = {AB__SEQ_MAX_OPEN, AB__SEQ_MAX_TOOL_CALLS, AB__SEQ_MAX_IDS};
    s->limits = def;
    if (opts &&
        (opts->lifecycle.max_open || opts->lifecycle.max_tool_calls || opts->lifecycle.max_ids))
        s->limits = opts->lifecycle;
    s->max_threads = opts && opts->max_threads ? opts->max_threads : AB__SEQ_MAX_THREADS;
    if (ab__seq_cache_init(s) != AB_OK || ab__seq_thr_init(s) != AB_OK ||
        ab_doc_new(&s->doc) != AB_OK) {
        ab__seq_destroy(&s);
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory creating the sequencer");
    }
    *out = s;
    return AB_OK;
}

void ab__seq_destroy(ab_seq_t **sp)
{
    if (!sp || !*sp)
        return;
    ab_seq_t *s = *sp;
    ab__seq_cache_free(s);
    ab__seq_thr_free(s);
    free(s->pend);
    free(s->fence);
    free(s->pf_threads);
    free(s->pf_runs);
    free(s->pend_items);
    free(s->dups);
    free(s->grp);
    free(s->rej);
    ab_doc_destroy(&s->doc);
    ab_buf_free(&s->bytes);
    free(s);
    *sp = NULL;
}

/* ---- per-call rejections -------------------------------------------------- */

static const ab__seq_rej_t *rej_find(const ab_seq_t *s, const ab_event_t *ev)
{
    for (size_t i = 0; i < s->nrej; i++)
        if (ab__seq_str_eq(s->rej[i].thread, ev->thread) && ab__seq_str_eq(s->rej[i].run, ev->run))
            return &s->rej[i];
    return NULL;
}

static void rej_add(ab_seq_t *s, const ab_event_t *ev, ab_status_t code)
{
    if (rej_find(s, ev))
        return;
    if (ab__seq_reserve((void **)&s->rej, &s->cap_rej, s->nrej + 1, sizeof(*s->rej)) != AB_OK)
        return; /* out of memory: later events get their own verdict */
    s->rej[s->nrej++] = (ab__seq_rej_t){ev->thread, ev->run, code};
}

/* ---- the rules ------------------------------------------------------------ */

static ab_status_t check_fence(const ab__seq_run_t *r, const ab_event_t *ev, ab_error_t *err)
{
    uint64_t cur = r->epoch ? r->epoch : 1; /* never claimed: implicit epoch 1 */
    if (ev->epoch == cur)
        return AB_OK;
    if (ev->epoch > cur)
        ab_error_set(err, AB_FENCED, "epoch", "epoch %llu was never granted (current epoch %llu)",
                     (unsigned long long)ev->epoch, (unsigned long long)cur);
    else
        ab_error_set(err, AB_FENCED, "epoch", "epoch %llu is stale: a newer claim holds epoch %llu",
                     (unsigned long long)ev->epoch, (unsigned long long)cur);
    ab_error_detail_int(err, "epoch", (int64_t)cur);
    ab_error_detail_int(err, "got", (int64_t)ev->epoch);
    return AB_FENCED;
}

static ab_status_t conflict(uint64_t seq, ab_error_t *err)
{
    return ab_error_set(err, AB_CONFLICT, "seq",
                        "seq %llu was already accepted with different bytes",
                        (unsigned long long)seq);
}

/* seq <= staged_seq: a duplicate (item answered, AB_OK) or a conflict. */
static ab_status_t check_dup(ab_seq_t *s, const ab__seq_run_t *r, ab_seq_item_t *it)
{
    uint64_t seq = it->ev->seq;
    if (seq > r->last_seq) {
        uint32_t idx = r->staged[seq - r->last_seq - 1];
        const ab_append_event_t *p = &s->pend[idx];
        if (p->len != it->len || memcmp(p->bytes, it->bytes, it->len) != 0)
            return conflict(seq, &it->err);
        if (ab__seq_reserve((void **)&s->dups, &s->cap_dups, s->ndups + 1, sizeof(*s->dups)) !=
            AB_OK)
            return ab_error_set(&it->err, AB_NOMEM, NULL, "out of memory staging a duplicate");
        s->dups[s->ndups++] = (ab__seq_dup_t){it, idx};
        it->status = AB_RESULT_DUPLICATE;
        return AB_OK;
    }
    uint64_t pos = 0;
    ab_str_t th = {r->thread, r->thread_len}, rn = {r->run, r->run_len};
    ab_status_t rc = s->plugin->event_bytes(s->db, th, rn, seq, &s->bytes, &pos, &it->err);
    if (rc == AB_NOT_FOUND) {
        ab_error_clear(&it->err);
        return ab_error_set(&it->err, AB_CORRUPT, "seq", "seq %llu is committed but not stored",
                            (unsigned long long)seq);
    }
    if (rc != AB_OK)
        return rc;
    if (s->bytes.len != it->len || memcmp(s->bytes.data, it->bytes, it->len) != 0)
        return conflict(seq, &it->err);
    it->status = AB_RESULT_DUPLICATE;
    it->pos = pos;
    return AB_OK;
}

/* seq == next: run_terminal, then the lifecycle checker. */
static ab_status_t check_lifecycle(const ab__seq_run_t *r, const ab_seq_item_t *it, ab_error_t *err)
{
    if (!r->lc) { /* loaded as terminal */
        if (r->status == AB_RUN_STATUS_FINISHED && it->info->type == AB_AGUI_RUN_ERROR)
            return AB_OK; /* the one late RUN_ERROR */
        return ab_error_set(err, AB_RUN_TERMINAL, "event/type",
                            "run '%s' already ended (%s); seq %llu refused", r->run,
                            ab_run_status_name(r->status), (unsigned long long)it->ev->seq);
    }
    ab_status_t rc = ab_lifecycle_check(r->lc, it->info, err);
    if (rc == AB_INVALID_EVENT || rc == AB_RUN_TERMINAL || rc == AB_TOO_LARGE)
        ab_error_prefix_field(err, "event"); /* not a store error of the baseline callback */
    return rc;
}

/* Make room for one more staged event of r, so staging itself cannot fail. */
static ab_status_t reserve_stage(ab_seq_t *s, ab__seq_run_t *r, const ab_seq_item_t *it,
                                 ab_error_t *err)
{
    size_t nst = (size_t)(r->staged_seq - r->last_seq) + 1;
    if ((ab__seq_thread_type(it->info->type) && ab__seq_thr_reserve(s) != AB_OK) ||
        ab__seq_reserve((void **)&s->pend, &s->cap_pend, s->npend + 1, sizeof(*s->pend)) ||
        ab__seq_reserve((void **)&s->pend_items, &s->cap_pend_items, s->npend + 1,
                        sizeof(*s->pend_items)) ||
        ab__seq_reserve((void **)&r->staged, &r->staged_cap, nst, sizeof(*r->staged)) ||
        ab__seq_reserve((void **)&s->grp, &s->cap_grp, s->ngrp + 1, sizeof(*s->grp)))
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory staging an event");
    return AB_OK;
}

static void stage(ab_seq_t *s, ab__seq_run_t *r, ab_seq_item_t *it, bool thread_event)
{
    const ab_agui_info_t *info = it->info;
    ab_append_event_t *p = &s->pend[s->npend];
    memset(p, 0, sizeof(*p));
    p->thread = it->ev->thread;
    p->run = it->ev->run;
    p->seq = it->ev->seq;
    p->epoch = it->ev->epoch;
    p->bytes = it->bytes;
    p->len = it->len;
    if (info->type == AB_AGUI_RUN_STARTED) {
        p->status = AB_RUN_STATUS_ACTIVE;
        p->parent_run = info->parent_run_id;
    } else if (info->type == AB_AGUI_RUN_FINISHED) {
        p->status = AB_RUN_STATUS_FINISHED; /* AG-UI: an absent outcome is success */
        p->outcome = info->outcome == AB_OUTCOME_NONE ? AB_OUTCOME_SUCCESS : info->outcome;
    } else if (info->type == AB_AGUI_RUN_ERROR) {
        p->status = AB_RUN_STATUS_ERRORED;
    }
    if (p->status != AB_RUN_STATUS_UNKNOWN)
        r->status = p->status;
    if (r->epoch == 0)
        r->epoch = it->ev->epoch; /* implicit claim of epoch 1 */
    r->staged[r->staged_seq - r->last_seq] = (uint32_t)s->npend;
    r->staged_seq++;
    if (r->group_gen != s->gen) {
        r->group_gen = s->gen;
        s->grp[s->ngrp++] = r;
    }
    s->pend_items[s->npend++] = it;
    it->status = AB_RESULT_ACCEPTED;
    if (thread_event)
        ab__seq_thr_staged(s, (uint32_t)(s->npend - 1));
}

/* The run's first RUN_STARTED, with the envelope's ids (else the checker refuses it). */
static bool first_start(const ab__seq_run_t *r, const ab_seq_item_t *it)
{
    const ab_agui_info_t *in = it->info;
    return in->type == AB_AGUI_RUN_STARTED && r->lc && ab_lifecycle_state(r->lc) == AB_RUN_NEW &&
           ab__seq_str_eq(in->thread_id, it->ev->thread) && ab__seq_str_eq(in->run_id, it->ev->run);
}

static ab_status_t decide(ab_seq_t *s, ab__seq_run_t *r, ab_seq_item_t *it)
{
    const ab_event_t *ev = it->ev;
    ab_status_t rc = check_fence(r, ev, &it->err);
    if (rc == AB_OK && r->epoch == 0 && s->unclaimed) /* the run's implicit claim */
        rc = s->unclaimed(s->unclaimed_ud, ev->thread, ev->run, &it->err);
    if (rc != AB_OK)
        return rc;
    if (ev->seq == 0)
        return ab_error_set(&it->err, AB_INVALID_ENVELOPE, "seq", "seq must be >= 1");
    if (ev->seq <= r->staged_seq)
        return check_dup(s, r, it);
    if (ev->seq > r->staged_seq + 1) {
        ab_error_set(&it->err, AB_GAP, "seq", "seq %llu leaves a gap: expected seq %llu",
                     (unsigned long long)ev->seq, (unsigned long long)(r->staged_seq + 1));
        ab_error_detail_int(&it->err, "expected_seq", (int64_t)(r->staged_seq + 1));
        return AB_GAP;
    }
    if ((rc = reserve_stage(s, r, it, &it->err)) != AB_OK)
        return rc;
    /* rule 7 (resume) is checked before rule 6 only where rule 6 cannot refuse (a run's
     * first RUN_STARTED with the envelope's ids), so rule 6 keeps its precedence */
    bool thread_event = false;
    if ((first_start(r, it) || it->info->type != AB_AGUI_RUN_STARTED) &&
        ab__seq_boundary(it->info->type) &&
        (rc = ab__seq_thr_check(s, r, it, &thread_event, &it->err)) != AB_OK)
        return rc;
    s->cur = it; /* the thread an ACTIVITY_DELTA's baseline callback asks about */
    rc = check_lifecycle(r, it, &it->err);
    s->cur = NULL;
    if (rc != AB_OK)
        return rc;
    stage(s, r, it, thread_event || ab__seq_act_event(it->info->type));
    return AB_OK;
}

static void reject_earlier(ab_seq_item_t *it, ab_status_t code)
{
    ab_error_set(&it->err, code, NULL, "an earlier event of this run in the batch was rejected");
    it->status = AB_RESULT_REJECTED;
}

/* Stage one item; @p hash is its run's ab__seq_key_hash(). */
static void stage_one(ab_seq_t *s, ab_seq_item_t *it, uint64_t hash)
{
    if (it->status == AB_RESULT_REJECTED) {
        if (it->ev)
            rej_add(s, it->ev, it->err.code ? it->err.code : AB_INVALID_EVENT);
        return;
    }
    if (it->err.code != AB_OK) /* the command thread hands items over clear (sequencer.h) */
        ab_error_clear(&it->err);
    it->pos = 0;
    const ab__seq_rej_t *prior = rej_find(s, it->ev);
    if (prior) {
        reject_earlier(it, prior->code);
        return;
    }
    ab__seq_run_t *r = NULL;
    ab_status_t rc = ab__seq_get(s, it->ev->thread, it->ev->run, hash, &r, &it->err);
    if (rc == AB_OK)
        rc = decide(s, r, it);
    if (rc != AB_OK) {
        if (it->err.code == AB_OK)
            ab_error_set(&it->err, rc, NULL, "%s", ab_status_str(rc));
        it->status = AB_RESULT_REJECTED;
        it->pos = 0;
        rej_add(s, it->ev, it->err.code);
    }
}

void ab__seq_stage(ab_seq_t *s, ab_seq_item_t *items, size_t n)
{
    s->nrej = 0;
    ab__seq_ahead_t a;
    for (size_t i = 0; i < n; i++) {
        uint64_t h = ab__seq_ahead(s, items, n, i, &a);
        stage_one(s, &items[i], h);
    }
    s->nrej = 0; /* the views belong to this call's items */
}

const ab_append_event_t *ab__seq_pending(const ab_seq_t *s, size_t *n)
{
    *n = s->npend;
    return s->pend;
}

const ab_str_t *ab__seq_fence_threads(ab_seq_t *s, size_t *n, bool *nomem)
{
    *n = 0;
    *nomem = false;
    for (size_t i = 0; i < s->npend; i++) {
        ab_agui_type_t t = s->pend_items[i]->info->type;
        if (!ab__seq_thread_type(t) && t != AB_AGUI_ACTIVITY_DELTA)
            continue;
        if (ab__seq_reserve((void **)&s->fence, &s->cap_fence, *n + 1, sizeof(*s->fence))) {
            *nomem = true;
            *n = 0;
            return NULL;
        }
        s->fence[(*n)++] = s->pend[i].thread;
    }
    return *n ? s->fence : NULL;
}

static void end_group(ab_seq_t *s, bool committed)
{
    ab__seq_thr_end(s, committed);
    s->npend = 0;
    s->ndups = 0;
    s->ngrp = 0;
    s->gen++;
}

void ab__seq_commit(ab_seq_t *s, uint64_t first_pos)
{
    for (size_t i = 0; i < s->npend; i++)
        s->pend_items[i]->pos = first_pos + i;
    for (size_t i = 0; i < s->ndups; i++)
        s->dups[i].item->pos = first_pos + s->dups[i].idx;
    for (size_t i = 0; i < s->ngrp; i++) {
        ab__seq_run_t *r = s->grp[i];
        r->last_seq = r->staged_seq;
        if (r->status == AB_RUN_STATUS_FINISHED || r->status == AB_RUN_STATUS_ERRORED)
            ab__seq_evict(s, r);
        else
            ab__seq_count(s, r); /* its checker grew or shrank with the group */
    }
    end_group(s, true);
    ab__seq_trim(s, NULL);
}

void ab__seq_abort(ab_seq_t *s)
{
    /* Duplicates of staged events keep DUPLICATE with pos 0: the caller
     * answers them like the staged events they repeat. */
    for (size_t i = 0; i < s->ngrp; i++)
        ab__seq_evict(s, s->grp[i]);
    end_group(s, false);
}

static ab_status_t claim_status(ab_seq_t *s, ab_str_t thread, ab_str_t run, ab_run_status_t *status,
                                ab_error_t *err)
{
    ab_run_head_t head;
    ab_status_t rc = s->plugin->head(s->db, thread, run, &head, err);
    if (rc == AB_OK)
        *status = head.status;
    return rc;
}

ab_status_t ab__seq_claim(ab_seq_t *s, ab_str_t thread, ab_str_t run, uint64_t *epoch,
                          uint64_t *last_seq, ab_run_status_t *status, ab_error_t *err)
{
    if (s->npend || s->ngrp)
        return ab_error_set(err, AB_INTERNAL, NULL, "claim while a group is staged");
    uint64_t e = 0, last = 0;
    ab_run_status_t st = AB_RUN_STATUS_UNKNOWN;
    ab_status_t rc = s->plugin->claim(s->db, thread, run, &e, &last, err);
    if (rc == AB_OK && e < 2) /* a plugin of the old contract: 1 cannot fence an unclaimed writer */
        rc = s->plugin->claim(s->db, thread, run, &e, &last, err);
    if (rc != AB_OK)
        return rc;
    ab__seq_run_t *r = ab__seq_find(s, thread, run);
    if (r && r->last_seq == last) {
        r->epoch = e;
        st = r->status;
    } else {
        if (r)
            ab__seq_evict(s, r); /* out of step with the store: reload later */
        if ((rc = claim_status(s, thread, run, &st, err)) != AB_OK)
            return rc;
    }
    *epoch = e;
    *last_seq = last;
    *status = st;
    return AB_OK;
}

size_t ab__seq_cached_runs(const ab_seq_t *s)
{
    return s->count;
}

size_t ab__seq_cached_threads(const ab_seq_t *s)
{
    return s->tcount;
}

void ab__seq_set_now(ab_seq_t *s, int64_t now_us)
{
    s->now_us = now_us;
}

void ab__seq_set_unclaimed(ab_seq_t *s, ab__seq_unclaimed_fn fn, void *ud)
{
    s->unclaimed = fn;
    s->unclaimed_ud = ud;
}

size_t ab__seq_memory(const ab_seq_t *s)
{
    size_t m = sizeof(*s) + s->nbuckets * sizeof(*s->buckets) + s->cap_pend * sizeof(*s->pend) +
               s->cap_pend_items * sizeof(*s->pend_items) + s->cap_dups * sizeof(*s->dups) +
               s->cap_grp * sizeof(*s->grp) + s->cap_rej * sizeof(*s->rej) + s->bytes.cap +
               ab__seq_thr_memory(s);
    for (const ab__seq_run_t *r = s->lru.lru_next; r != &s->lru; r = r->lru_next)
        m += ab__seq_run_memory(r);
    return m;
}

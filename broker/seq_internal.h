/*
 * seq_internal.h - the sequencer's private structures, shared by
 * sequencer.c (rules, group, commit/abort), seq_cache.c (run state
 * cache: hash table, LRU, load and rebuild from the store), seq_thread.c
 * (thread states: each thread's latest run, cached and derived from the
 * store), seq_resume.c (the resume rules against that run's interrupts) and
 * seq_activity.c (the activity messages a thread holds, for rule R20 across
 * runs).
 */
#ifndef AB_BROKER_SEQ_INTERNAL_H
#define AB_BROKER_SEQ_INTERNAL_H

#include "sequencer.h"

#include <string.h>

/** Broker defaults for the per-run lifecycle limits (docs/SEQUENCER.md). */
#define AB__SEQ_MAX_OPEN       256u
#define AB__SEQ_MAX_TOOL_CALLS 1024u
#define AB__SEQ_MAX_IDS        1024u
#define AB__SEQ_MAX_RUNS       4096u
/** Bytes of cached run states (ab__seq_run_memory()) kept at most, default. */
#define AB__SEQ_MAX_RUN_BYTES (64u << 20)
/** Rows per plugin read while rebuilding a run's checker. */
#define AB__SEQ_PAGE 256u
/** Thread states cached (docs/SEQUENCER.md "Memory bound"). */
#define AB__SEQ_MAX_THREADS 4096u
/** Run heads kept per pass while finding a thread's latest run in the store. */
#define AB__SEQ_SCAN 32u
/** Runs whose heads one ab__seq_prefetch() reads at most (the rest: a read each). */
#define AB__SEQ_PREFETCH 1024u
/** Activity message ids a thread state remembers (docs/SEQUENCER.md section 2b). */
#define AB__SEQ_MAX_ACTS 64u

/** The cached state of one run. */
typedef struct ab__seq_run {
    char *thread; /**< owned copy of the id (key part 1) */
    size_t thread_len;
    char *run; /**< owned copy of the id (key part 2) */
    size_t run_len;
    uint64_t hash;
    struct ab__seq_run *hnext;               /**< bucket chain */
    struct ab__seq_run *lru_prev, *lru_next; /**< LRU list, head = most recent */
    uint64_t epoch;                          /**< 0 = never claimed */
    uint64_t last_seq;                       /**< committed */
    uint64_t staged_seq;                     /**< >= last_seq; staged in the group */
    ab_run_status_t status;                  /**< including staged events */
    ab_lifecycle_t *lc;                      /**< NULL for a run loaded as terminal */
    uint32_t *staged;                        /**< stage index of seq last_seq+1+i */
    size_t staged_cap;
    uint64_t group_gen; /**< == seq->gen: in the current group */
    uint8_t level;      /**< AB__SEQ_LEVEL_*: top-level or child run (resume rule) */
    size_t mem;         /**< its ab__seq_run_memory() as last counted in run_bytes */
} ab__seq_run_t;

/** ab__seq_run_t.level: not known yet (loaded from the store), top-level, child run. */
enum { AB__SEQ_LEVEL_UNKNOWN = 0, AB__SEQ_LEVEL_TOP, AB__SEQ_LEVEL_CHILD };

/** One remembered activity message id (owned bytes, NUL-terminated). */
typedef struct ab__seq_aid {
    char *id;
    size_t len;
} ab__seq_aid_t;

/**
 * The activity facet of a thread state (seq_activity.c): activity message
 * ids the thread holds after its committed and staged events. Every id
 * listed is held; when complete, no other is, so a delta for an id not
 * listed is refused without reading the store. More than AB__SEQ_MAX_ACTS
 * ids make it incomplete: then an id not listed is looked up in the store.
 */
typedef struct ab__seq_act {
    uint32_t n;
    uint32_t next; /**< the slot an id confirmed from the store takes when all are used */
    bool complete;
    ab__seq_aid_t ids[AB__SEQ_MAX_ACTS];
} ab__seq_act_t;

/**
 * The resume state of one thread: its latest interrupted run (the top-level
 * run whose RUN_FINISHED with outcome interrupt was staged last) and whether
 * its interrupts are still pending: not once a later top-level RUN_STARTED
 * carrying input was accepted (it answered them), nor after a late
 * RUN_ERROR of that run. The interrupts themselves are read from its
 * RUN_FINISHED when needed (from the group when it is staged there, else
 * from the store), never kept here.
 */
typedef struct ab__seq_thr {
    char *thread; /**< owned copy of the id (the key) */
    size_t thread_len;
    uint64_t hash;
    struct ab__seq_thr *hnext;
    struct ab__seq_thr *lru_prev, *lru_next;
    char run[AB_ID_MAX_BYTES + 1]; /**< latest interrupted run; run_len 0 = none */
    size_t run_len;
    bool pending;     /**< its interrupts are pending */
    bool errored;     /**< not pending because the run failed afterwards */
    uint64_t fin_seq; /**< seq of its RUN_FINISHED */
    uint64_t fin_gen; /**< == seq->gen: that RUN_FINISHED is pending index fin_idx */
    uint32_t fin_idx;
    uint64_t group_gen; /**< == seq->gen: changed by an event staged in this group */
    bool resume_loaded; /**< the fields above are derived (else only the key is set) */
    ab__seq_act_t *act; /**< the activity facet, NULL until a delta needs it */
} ab__seq_thr_t;

/**
 * A staged event that changes a thread's state (pending index), for
 * threads loaded later in the group: a top-level RUN_STARTED with input, a
 * top-level RUN_FINISHED with outcome interrupt, a RUN_ERROR (resume); an
 * ACTIVITY_SNAPSHOT, a MESSAGES_SNAPSHOT (activity).
 */
typedef struct ab__seq_tev {
    uint32_t idx;
} ab__seq_tev_t;

/** A DUPLICATE item that names an event staged in the same group. */
typedef struct ab__seq_dup {
    ab_seq_item_t *item;
    uint32_t idx;
} ab__seq_dup_t;

/** A run rejected earlier in the current ab__seq_stage() call. */
typedef struct ab__seq_rej {
    ab_str_t thread;
    ab_str_t run;
    ab_status_t code;
} ab__seq_rej_t;

struct ab_seq {
    const ab_plugin_t *plugin;
    ab_plugin_db_t *db;
    ab__seq_unclaimed_fn unclaimed; /**< asked before an implicit claim (NULL: none) */
    void *unclaimed_ud;
    uint32_t max_runs;
    size_t max_run_bytes; /**< bound on run_bytes (trim evicts past it too) */
    size_t run_bytes;     /**< sum of the cached runs' counted memory */
    ab_lifecycle_limits_t limits;
    /* cache */
    ab__seq_run_t **buckets;
    size_t nbuckets; /**< power of two */
    size_t count;
    ab__seq_run_t lru; /**< sentinel */
    uint64_t gen;      /**< current group generation, >= 1 */
    /* current group */
    ab_append_event_t *pend;
    ab_seq_item_t **pend_items;
    size_t npend, cap_pend, cap_pend_items;
    ab__seq_dup_t *dups;
    size_t ndups, cap_dups;
    ab__seq_run_t **grp;
    size_t ngrp, cap_grp;
    /* current stage call */
    ab__seq_rej_t *rej;
    size_t nrej, cap_rej;
    /* thread states (seq_thread.c) */
    ab__seq_thr_t **tbuckets;
    size_t ntbuckets; /**< power of two */
    size_t tcount;
    ab__seq_thr_t tlru; /**< sentinel */
    uint32_t max_threads;
    ab__seq_tev_t *tev; /**< the group's staged boundary events, in stage order */
    size_t ntev, cap_tev;
    int64_t now_us; /**< the group's commit time (ab__seq_set_now) */
    /** The item whose lifecycle check runs (the baseline callback's thread);
     *  NULL otherwise, in particular while a run is rebuilt from the store. */
    const ab_seq_item_t *cur;
    /* scratch */
    ab_str_t *fence; /**< ab__seq_fence_threads()'s answer */
    size_t cap_fence;
    ab_str_t *pf_threads, *pf_runs; /**< the runs one ab__seq_prefetch() asks for */
    size_t cap_pf, cap_pf_runs;
    ab_doc_t *doc;
    ab_buf_t bytes;
};

/** Whether two ids are the same bytes. */
static inline bool ab__seq_str_eq(ab_str_t a, ab_str_t b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

/** Grow *arr (elements of @p size) to hold at least @p need. AB_OK or AB_NOMEM. */
ab_status_t ab__seq_reserve(void **arr, size_t *cap, size_t need, size_t size);

/** Set up / tear down the cache part of @p s. */
ab_status_t ab__seq_cache_init(ab_seq_t *s);
void ab__seq_cache_free(ab_seq_t *s);

/** A cached run or NULL; a hit becomes most recently used. */
ab__seq_run_t *ab__seq_find(ab_seq_t *s, ab_str_t thread, ab_str_t run);

/** The cache's hash of a run's key. */
uint64_t ab__seq_key_hash(ab_str_t thread, ab_str_t run);

/** How many items ahead of the stage loop ab__seq_ahead() asks for buckets (a power of 2). */
#define AB__SEQ_AHEAD 16u

/** The hashes of the items whose buckets were asked for, by item index mod AB__SEQ_AHEAD. */
typedef struct ab__seq_ahead {
    uint64_t h[AB__SEQ_AHEAD];
} ab__seq_ahead_t;

/**
 * Called at step @p i (0, 1, ... in order) of a loop that looks up the runs of @p items:
 * prefetches what the lookups of later items will read (seq_cache.c invariant 6) and
 * returns item i's ab__seq_key_hash() (0 for an item without an event).
 */
uint64_t ab__seq_ahead(const ab_seq_t *s, const ab_seq_item_t *items, size_t n, size_t i,
                       ab__seq_ahead_t *a);

/** The run's state, loaded from the store on a miss (may evict others); @p hash is
 *  ab__seq_key_hash(thread, run). */
ab_status_t ab__seq_get(ab_seq_t *s, ab_str_t thread, ab_str_t run, uint64_t hash,
                        ab__seq_run_t **out, ab_error_t *err);

/** Drop one run from the cache and free it. */
void ab__seq_evict(ab_seq_t *s, ab__seq_run_t *r);
/** Count @p r's memory (now) in s->run_bytes, replacing what was counted for it. */
void ab__seq_count(ab_seq_t *s, ab__seq_run_t *r);

/** Evict least recently used runs outside the group until count <= max_runs. */
void ab__seq_trim(ab_seq_t *s, const ab__seq_run_t *keep);

/** Bytes one cached run holds. */
size_t ab__seq_run_memory(const ab__seq_run_t *r);

/* ---- seq_thread.c / seq_resume.c ------------------------------------------ */

/** The cached state of @p thread, created (nothing derived yet) on a miss. */
ab_status_t ab__seq_thr_entry(ab_seq_t *s, ab_str_t thread, ab__seq_thr_t **out, ab_error_t *err);

/** Set up / tear down the thread states of @p s. */
ab_status_t ab__seq_thr_init(ab_seq_t *s);
void ab__seq_thr_free(ab_seq_t *s);

/**
 * Before run @p r's next event @p it is staged: for its first RUN_STARTED
 * (ids the envelope's), set r->level (a child run names an active run of the
 * thread as parentRunId) and, for a top-level one carrying `input`, check
 * the resume rules (seq_resume.c); for a RUN_FINISHED with outcome
 * interrupt, learn r->level if unknown. *changes = whether staging @p it
 * changes the thread's resume state. AB_OK, AB_CONFLICT (err names the
 * interrupt) or a store error.
 */
ab_status_t ab__seq_thr_check(ab_seq_t *s, ab__seq_run_t *r, const ab_seq_item_t *it, bool *changes,
                              ab_error_t *err);

/** Room for one more staged thread event (called before the checker advances). */
ab_status_t ab__seq_thr_reserve(ab_seq_t *s);

/** The event at pending index @p idx, which changes its thread, was staged: record and apply. */
void ab__seq_thr_staged(ab_seq_t *s, uint32_t idx);

/** The group ended (commit: keep the states; abort: drop the ones it changed). */
void ab__seq_thr_end(ab_seq_t *s, bool committed);

/** Bytes the thread states hold, and their number. */
size_t ab__seq_thr_memory(const ab_seq_t *s);

/** Drop the cached state of @p thread (both facets), if any: the store holds a thread
 *  event this sequencer did not stage (another broker's, follow.c). Never while a group
 *  is staged. */
void ab__seq_thr_forget(ab_seq_t *s, ab_str_t thread);

/** Drop every cached thread state / every cached run and thread state: the store holds
 *  events this sequencer has not applied (follow.c invariant 6). Never while a group is
 *  staged. */
void ab__seq_thr_forget_all(ab_seq_t *s);
void ab__seq_forget_all(ab_seq_t *s);

/** The resume state of @p thread: cached, else loaded from the store (LRU-bounded). */
ab_status_t ab__seq_thr_get(ab_seq_t *s, ab_str_t thread, ab__seq_thr_t **out, ab_error_t *err);

/** Resume rules of @p it (top-level, with input) against the state @p t (seq_resume.c). */
ab_status_t ab__seq_resume_check(ab_seq_t *s, const ab__seq_thr_t *t, const ab_seq_item_t *it,
                                 ab_error_t *err);

/**
 * The stored event (thread, run, seq): its position and, when @p type is
 * set, its type and (when @p input is set) whether it carries `input`.
 */
ab_status_t ab__seq_stored(ab_seq_t *s, ab_str_t thread, ab_str_t run, uint64_t seq, uint64_t *pos,
                           ab_agui_type_t *type, bool *input, ab_error_t *err);

/* ---- seq_activity.c ---------------------------------------------------------- */

/** Whether events of type @p t change the activity messages a thread holds. */
static inline bool ab__seq_act_event(ab_agui_type_t t)
{
    return t == AB_AGUI_ACTIVITY_SNAPSHOT || t == AB_AGUI_MESSAGES_SNAPSHOT;
}

/** Whether events of type @p t are run boundaries (the resume state's events). */
static inline bool ab__seq_boundary(ab_agui_type_t t)
{
    return t == AB_AGUI_RUN_STARTED || t == AB_AGUI_RUN_FINISHED || t == AB_AGUI_RUN_ERROR;
}

/** Whether events of type @p t change their thread's state: resume (boundaries) or activity
 *  (sequencer.c stages them with the thread; follow.c drops the cached state for them). */
static inline bool ab__seq_thread_type(ab_agui_type_t t)
{
    return ab__seq_boundary(t) || ab__seq_act_event(t);
}

/**
 * The lifecycle checkers' baseline callback (ud = the sequencer): whether
 * the thread of s->cur holds activity message @p id (AB_OK, AB_NOT_FOUND, or
 * a store error). With s->cur NULL (a run rebuilt from the store) AB_OK:
 * its stored events were accepted once.
 */
ab_status_t ab__seq_act_baseline(void *ud, ab_str_t id, ab_error_t *err);

/** Apply the staged event @p it (ab__seq_act_event) to the facet @p a. */
void ab__seq_act_apply(ab__seq_act_t *a, const ab_seq_item_t *it);

/** Free a facet (NULL-safe) / the bytes it holds (0 for NULL). */
void ab__seq_act_free(ab__seq_act_t *a);
size_t ab__seq_act_memory(const ab__seq_act_t *a);

#endif /* AB_BROKER_SEQ_INTERNAL_H */

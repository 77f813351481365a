/*
 * seq_internal.h - the sequencer's private structures, shared by
 * sequencer.c (rules, group, commit/abort) and seq_cache.c (run state
 * cache: hash table, LRU, load and rebuild from the store).
 */
#ifndef AB_BROKER_SEQ_INTERNAL_H
#define AB_BROKER_SEQ_INTERNAL_H

#include "sequencer.h"

/** Broker defaults for the per-run lifecycle limits (docs/SEQUENCER.md). */
#define AB__SEQ_MAX_OPEN       256u
#define AB__SEQ_MAX_TOOL_CALLS 1024u
#define AB__SEQ_MAX_IDS        1024u
#define AB__SEQ_MAX_RUNS       4096u
/** Rows per plugin read while rebuilding a run's checker. */
#define AB__SEQ_PAGE 256u

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
} ab__seq_run_t;

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
    uint32_t max_runs;
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
    /* scratch */
    ab_doc_t *doc;
    ab_buf_t bytes;
};

/** Grow *arr (elements of @p size) to hold at least @p need. AB_OK or AB_NOMEM. */
ab_status_t ab__seq_reserve(void **arr, size_t *cap, size_t need, size_t size);

/** Set up / tear down the cache part of @p s. */
ab_status_t ab__seq_cache_init(ab_seq_t *s);
void ab__seq_cache_free(ab_seq_t *s);

/** A cached run or NULL; a hit becomes most recently used. */
ab__seq_run_t *ab__seq_find(ab_seq_t *s, ab_str_t thread, ab_str_t run);

/** The run's state, loaded from the store on a miss (may evict others). */
ab_status_t ab__seq_get(ab_seq_t *s, ab_str_t thread, ab_str_t run, ab__seq_run_t **out,
                        ab_error_t *err);

/** Drop one run from the cache and free it. */
void ab__seq_evict(ab_seq_t *s, ab__seq_run_t *r);

/** Evict least recently used runs outside the group until count <= max_runs. */
void ab__seq_trim(ab_seq_t *s, const ab__seq_run_t *keep);

/** Bytes one cached run holds. */
size_t ab__seq_run_memory(const ab__seq_run_t *r);

#endif /* AB_BROKER_SEQ_INTERNAL_H */

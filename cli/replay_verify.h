/*
 * replay_verify.h - the per-run audit behind `agentbus replay --verify`
 * (cli/replay_verify.c): events in commit order in, one line per run and a
 * verdict out, in time linear in the events and memory bounded by the runs
 * in progress at once (docs/CLIENT.md "agentbus replay").
 */
#ifndef AB_CLI_REPLAY_VERIFY_H
#define AB_CLI_REPLAY_VERIFY_H

#include "agentbus/agui.h"
#include "agentbus/codec.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct verify verify_t;

/** What the store holds at one seq of a run (see verify_lookup_fn). */
typedef struct verify_prev {
    bool found;          /**< the store has an event at that seq */
    ab_agui_type_t type; /**< its AG-UI type; AB_AGUI_UNKNOWN when it does not validate */
} verify_prev_t;

/**
 * Read event @p seq of run (@p thread, @p run) from the store into *out.
 * Called only for an event of a run the audit no longer holds (it ended
 * and was reported) or never saw begin: a late RUN_ERROR, an event after
 * the end, or a run whose first events are missing.
 * @return AB_OK, or an error (set in @p err) that ends the audit.
 */
typedef ab_status_t (*verify_lookup_fn)(void *ud, ab_str_t thread, ab_str_t run, uint64_t seq,
                                        verify_prev_t *out, ab_error_t *err);

/** Counters of an audit. */
typedef struct verify_counts {
    uint64_t events;   /**< events judged */
    uint64_t runs;     /**< distinct runs seen */
    uint64_t ok;       /**< runs that ended and verified */
    uint64_t failed;   /**< runs that failed */
    uint64_t late;     /**< late RUN_ERRORs accepted after RUN_FINISHED */
    uint64_t lookups;  /**< verify_lookup_fn calls */
    size_t held;       /**< runs held now: in progress, plus failed ones */
    size_t held_max;   /**< the most runs held at once */
    size_t active_max; /**< the most runs in progress at once */
} verify_counts_t;

/**
 * Start an audit that writes its lines to @p report.
 * @return AB_OK or AB_NOMEM.
 */
ab_status_t verify_new(verify_t **out, FILE *report, verify_lookup_fn lookup, void *ud);

/**
 * Judge one event (events must come in commit order). A run that ends is
 * reported and forgotten at once.
 * @return AB_OK (a failed run is a finding, not an error), AB_NOMEM, or
 *         the lookup's error.
 */
ab_status_t verify_event(verify_t *v, const ab_event_t *ev, ab_error_t *err);

/**
 * Report the failed runs and those still in progress, in the order they
 * first appeared, then the verdict line.
 * @return the number of failed runs.
 */
uint64_t verify_finish(verify_t *v);

/** The counters so far. */
verify_counts_t verify_counts(const verify_t *v);

/** Free everything; NULL-safe; *v = NULL. */
void verify_destroy(verify_t **v);

#endif

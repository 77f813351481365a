/*
 * sequencer.h - per-run sequencing, fencing and lifecycle for the broker's
 * writer thread (internal to broker/).
 *
 * The writer thread owns one sequencer and the plugin's writer handle. For
 * each group commit it:
 *   1. calls ab__seq_stage() once per PUBLISH request (items in request order);
 *      each item gets a decision: staged (to be committed), duplicate,
 *      or rejected (with a typed error);
 *   2. takes the staged events with ab__seq_pending() and hands them to the
 *      plugin's append_batch() as one transaction;
 *   3. on success calls ab__seq_commit(first_pos): staged items get their
 *      positions and the run states advance for good; on failure calls
 *      ab__seq_abort(): every run touched since the last commit is evicted,
 *      so its state is reloaded from the store on next use, and staged items
 *      are answered with the plugin's (retryable) error by the caller.
 *
 * Rules, checked in this order for an event of run R with seq S, epoch E:
 *   fenced        E differs from R's current epoch (a newer CLAIM exists, or E
 *                 was never granted). A run never seen accepts epoch 1 for
 *                 its RUN_STARTED at seq 1 (an implicit claim of epoch 1).
 *   duplicate     S <= last staged/committed seq and the stored (or staged)
 *                 bytes are identical: answered with the original position.
 *   conflict      S <= last seq but the bytes differ.
 *   gap           S > next seq: rejected, detail "expected_seq" = next.
 *   run_terminal  S == next but the run has ended (the one late RUN_ERROR
 *                 after RUN_FINISHED that AG-UI admits aside).
 *   invalid_event the lifecycle checker refuses the event (first event must be
 *                 RUN_STARTED with seq 1; boundary ids must match the
 *                 envelope; pairing, steps, subagents, outcomes ...).
 *   conflict      (resume) a top-level RUN_STARTED carrying `input` does not
 *                 answer exactly the pending interrupts of its thread's
 *                 latest interrupted run: one missing, unknown or answered twice, an
 *                 expired one resolved, an input without resume while some
 *                 are pending (docs/SEQUENCER.md rule 7).
 * Within one ab__seq_stage() call, once an event of run R is rejected, later
 * events of R in that call are rejected too (code of the first rejection,
 * message "an earlier event of this run in the batch was rejected").
 * Other runs in the same call are unaffected.
 *
 * Memory: at most max_runs run states, holding at most max_run_bytes in all
 * (each bounded by the lifecycle limits), are cached; finished runs are
 * dropped after commit, idle active runs are evicted least-recently-used
 * first when either bound is passed. An evicted active run is rebuilt by
 * reading its events back through the plugin and re-feeding a fresh
 * lifecycle checker (cost proportional to the run's length). At most
 * max_threads thread states (each a few hundred bytes: the thread's latest
 * interrupted run) are cached; a miss derives one from the run heads and
 * single events in the store.
 *
 * Thread-safety: one thread (the writer).
 */
#ifndef AB_BROKER_SEQUENCER_H
#define AB_BROKER_SEQUENCER_H

#include "agentbus/agui.h"
#include "agentbus/codec.h"
#include "agentbus/plugin.h"

typedef struct ab_seq ab_seq_t;

typedef struct ab_seq_opts {
    uint32_t max_runs;    /**< cached run states, default 4096 */
    size_t max_run_bytes; /**< their memory (ab__seq_memory's run part), default 64 MiB */
    uint32_t max_threads; /**< cached thread states (resume rule), default 4096 */
    ab_lifecycle_limits_t lifecycle; /**< per-run checker limits; zero = broker defaults */
} ab_seq_opts_t;

/** One event of a PUBLISH request, as the command thread decoded it. */
typedef struct ab_seq_item {
    /* in: views valid until the item is answered */
    const ab_event_t *ev;       /**< decoded envelope */
    const ab_agui_info_t *info; /**< strict AG-UI validation result of ev->body */
    const uint8_t *bytes;       /**< the exact envelope bytes */
    size_t len;
    /* out, set by ab__seq_stage() and completed by ab__seq_commit() */
    ab_result_status_t status; /**< ACCEPTED (staged), DUPLICATE or REJECTED */
    uint64_t pos;              /**< position (accepted: after commit; duplicate: original) */
    ab_error_t err;            /**< when REJECTED */
} ab_seq_item_t;

/** Create a sequencer over the writer handle of a plugin (both borrowed). */
AB_NODISCARD ab_status_t ab__seq_new(ab_seq_t **out, const ab_plugin_t *plugin, ab_plugin_db_t *db,
                                     const ab_seq_opts_t *opts, ab_error_t *err);

/** Free a sequencer (NULL-safe; *s = NULL). */
void ab__seq_destroy(ab_seq_t **s);

/**
 * Items that arrive with status AB_RESULT_REJECTED were refused before the
 * sequencer (undecodable envelope: ev == NULL; AG-UI validation failure:
 * ev set) and keep their error; one with ev set still counts as a rejection
 * of its run for the later items of the same call. Every other item arrives
 * with its error clear (the command thread cleared it when it decoded the
 * event), so the writer does not clear 360 bytes per event again; one that
 * is not is cleared.
 *
 * Decide the items of one PUBLISH request, in order, against the committed
 * state plus what is already staged in the current group. Never fails as a
 * whole: every item gets a status. Items must stay valid until commit/abort.
 * A store error while reloading a run rejects that run's items with the
 * store's (retryable) error.
 */
void ab__seq_stage(ab_seq_t *s, ab_seq_item_t *items, size_t n);

/**
 * Before ab__seq_stage() of @p items: read the stored heads of their runs that are not
 * cached (at most AB__SEQ_PREFETCH of them) in one plugin call, when the plugin has
 * heads_of, and cache them, so that staging reads no head per run (a round trip each on a
 * database server). Changes no answer: a run whose head it did not cache is loaded when
 * its event is staged, as without it. It may run while a group is staged: the runs it
 * caches join the group only when their events are staged.
 */
void ab__seq_prefetch(ab_seq_t *s, const ab_seq_item_t *items, size_t n);

/**
 * The staged events of the current group, in stage order, ready for
 * append_batch(). Valid until ab__seq_commit()/ab__seq_abort().
 */
const ab_append_event_t *ab__seq_pending(const ab_seq_t *s, size_t *n);

/**
 * The threads whose state the checks of the group's staged events read or that
 * they change (a run boundary, ACTIVITY_SNAPSHOT, MESSAGES_SNAPSHOT, ACTIVITY_DELTA),
 * one entry per such event (repeats), for a shared store's append_fenced; views into
 * the staged events, valid as ab__seq_pending()'s. NULL with *n 0 when there are none;
 * also NULL (*n 0) when out of memory (with @p nomem set: the caller fails the group).
 */
const ab_str_t *ab__seq_fence_threads(ab_seq_t *s, size_t *n, bool *nomem);

/**
 * The group committed: the i-th pending event has position first_pos + i.
 * Fills pos of every ACCEPTED item (and of DUPLICATE items that duplicated
 * an event staged in the same group), advances run states, drops finished
 * runs from the cache.
 */
void ab__seq_commit(ab_seq_t *s, uint64_t first_pos);

/**
 * The group's commit failed: forget it; touched runs reload from the store.
 * A DUPLICATE item left with pos 0 repeated an event staged in this group;
 * answer it like the staged (ACCEPTED) items, with the plugin's error.
 */
void ab__seq_abort(ab_seq_t *s);

/**
 * CLAIM: bump the run's epoch in the store (plugin claim) and in the cache.
 * Must not be called while a group is staged (commit or abort first).
 * @return AB_OK with epoch, last committed seq and status; or the plugin's error.
 */
AB_NODISCARD ab_status_t ab__seq_claim(ab_seq_t *s, ab_str_t thread, ab_str_t run, uint64_t *epoch,
                                       uint64_t *last_seq, ab_run_status_t *status,
                                       ab_error_t *err);

/**
 * Check a resume_run against the thread's resume state (the rule a
 * RUN_STARTED with input.resume meets): @p run must be the thread's pending
 * interrupted run and @p resume (an array of ResumeEntry, shapes checked)
 * must answer each of its interrupts exactly once, an expired one only
 * cancelled. Call between groups. Field paths start at "resume".
 * @return AB_OK, AB_CONFLICT (detail interruptId names the interrupt) or
 *         the plugin's error.
 */
AB_NODISCARD ab_status_t ab__seq_resume_probe(ab_seq_t *s, ab_str_t thread, ab_str_t run,
                                              const ab_val_t *resume, ab_error_t *err);

/**
 * The commit time of the group about to be staged (microseconds since 1970,
 * the time handed to append_batch()): an interrupt whose expiresAt is not
 * later than this is expired. Call before the group's first ab__seq_stage();
 * 0 (never set) makes nothing expire.
 */
void ab__seq_set_now(ab_seq_t *s, int64_t now_us);

/**
 * Asked before the first event of a run no one claimed (its implicit claim of epoch 1):
 * AB_OK lets it through; another status (with @p err set) refuses it. Dispatch answers for
 * the runs it has queued, which only their assignee may write (docs/PROTOCOL.md 7.12).
 */
typedef ab_status_t (*ab__seq_unclaimed_fn)(void *ud, ab_str_t thread, ab_str_t run,
                                            ab_error_t *err);
/** Set (or clear, @p fn NULL) the check of a run's implicit claim. */
void ab__seq_set_unclaimed(ab_seq_t *s, ab__seq_unclaimed_fn fn, void *ud);

/** Number of run states cached now, and bytes they hold (for logs and tests). */
size_t ab__seq_cached_runs(const ab_seq_t *s);
/** Number of thread states cached now (for tests). */
size_t ab__seq_cached_threads(const ab_seq_t *s);
size_t ab__seq_memory(const ab_seq_t *s);

#endif /* AB_BROKER_SEQUENCER_H */

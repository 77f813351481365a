/*
 * activity_set.h - the activity messages each thread holds, for the CLI's
 * checkers (`replay --verify`, `validate --lifecycle`): rule R20 across the
 * runs of a thread (docs/LIFECYCLE.md), as the broker's sequencer applies
 * it. A checker notes each accepted event and installs
 * act_set_baseline() on its lifecycle checkers.
 *
 * Memory: 8 bytes per activity message a thread holds (a 64-bit hash of its
 * id) plus about 48 bytes per thread that ever held one; the history of the
 * store or file bounds it, and a thread's MESSAGES_SNAPSHOT that drops its
 * activity messages frees theirs.
 */
#ifndef AB_CLI_ACTIVITY_SET_H
#define AB_CLI_ACTIVITY_SET_H

#include "agentbus/agui.h"

typedef struct act_set act_set_t;

/** A new empty set; NULL when out of memory. */
act_set_t *act_set_new(void);
void act_set_free(act_set_t *s);

/** Event @p info of @p thread was accepted: note the activity messages it creates or drops.
 * @return AB_OK or AB_NOMEM. */
ab_status_t act_set_note(act_set_t *s, ab_str_t thread, const ab_agui_info_t *info);

/** The baseline callback's context: the set and one thread (both borrowed). */
typedef struct act_ctx {
    act_set_t *set;
    ab_str_t thread;
} act_ctx_t;

/** An ab_lifecycle_baseline_fn over an act_ctx_t. */
ab_status_t act_set_baseline(void *ud, ab_str_t message_id, ab_error_t *err);

#endif /* AB_CLI_ACTIVITY_SET_H */

/*
 * evcheck.h - the checks of one stream of AG-UI events given as JSON Lines,
 * shared by `agentbus validate` and `agentbus publish` (cli/evcheck.c):
 * JSON within the bus limits, the AG-UI 1.0 event rules (strict or lenient)
 * and, when asked, the run lifecycle across the stream.
 *
 * Memory: one decoded event at a time, the lifecycle checker of the current
 * run (its own bound, docs/LIFECYCLE.md) and the activity set
 * (cli/activity_set.h).
 */
#ifndef AB_CLI_EVCHECK_H
#define AB_CLI_EVCHECK_H

#include "agentbus/agui.h"
#include "agentbus/buf.h"

#include <stdbool.h>

typedef struct evcheck evcheck_t;

/** What a checker checks. */
typedef struct evcheck_opts {
    bool lenient;       /**< the consumer's view (unknown types and fields warn) */
    bool lifecycle;     /**< the order of events across the stream */
    bool one_run;       /**< the stream is one run: a RUN_STARTED after its end is an error
                             (validate starts a new run there) */
    const char *thread; /**< the run's ids when known (boundary events must match), or NULL */
    const char *run;
    bool trust_thread;          /**< an ACTIVITY_DELTA whose baseline the stream does not hold may
                                     have it in an earlier run of the thread: leave it to the broker */
    ab_agui_warn_cb on_warning; /**< may be NULL */
    void *ud;                   /**< for on_warning */
} evcheck_opts_t;

/** A new checker. @return AB_OK or AB_NOMEM. */
ab_status_t evcheck_new(evcheck_t **out, const evcheck_opts_t *o);

/** Free; NULL-safe; *c = NULL. */
void evcheck_destroy(evcheck_t **c);

/**
 * Check the JSON text of one event (one line). A failing event never changes
 * the lifecycle state. *info is the event's AG-UI view on success (type
 * AB_AGUI_UNKNOWN: a lenient stream's unknown type, dropped).
 * @return AB_OK, or the error (AB_INVALID_EVENT, AB_TOO_LARGE, AB_RUN_TERMINAL,
 *         AB_NOMEM) with its JSON Pointer in err->field.
 */
ab_status_t evcheck_line(evcheck_t *c, const char *text, size_t len, ab_agui_info_t *info,
                         ab_error_t *err);

/** Check an event already decoded (a stored one, replayed to continue its run). */
ab_status_t evcheck_val(evcheck_t *c, const ab_val_t *ev, ab_agui_info_t *info, ab_error_t *err);

/** Whether the current run is still active (started, no terminal event). */
bool evcheck_run_active(const evcheck_t *c);

/** Whether the current run has ended (RUN_FINISHED or RUN_ERROR accepted). */
bool evcheck_run_ended(const evcheck_t *c);

/**
 * When @p text (a line that failed to parse) shows the input is not JSON
 * Lines - a lone "{" or "[", or a JSON array - write why into @p err and
 * return true.
 */
bool evcheck_not_jsonl(const char *text, size_t len, ab_error_t *err);

/**
 * Parse the JSON text in @p line into a value tree in @p doc (the msgpack
 * form in @p mp), within the default limits.
 * @return AB_OK, AB_INVALID_EVENT, AB_TOO_LARGE or AB_NOMEM.
 */
ab_status_t cli_parse_event(ab_doc_t *doc, ab_buf_t *mp, const ab_buf_t *line, const ab_val_t **out,
                            ab_error_t *err);

#endif /* AB_CLI_EVCHECK_H */

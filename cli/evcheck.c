/*
 * evcheck.c - one stream of AG-UI events as JSON Lines checked line by line
 * (cli/evcheck.h): decode within the bus limits, validate, and feed the run
 * lifecycle.
 *
 * Invariants:
 *  1. A failing event never changes the lifecycle state, so later lines are
 *     judged against the accepted prefix of the stream.
 *  2. Without one_run, a RUN_STARTED after a terminal event starts a new
 *     checker (several runs may follow each other); with it, the ended run's
 *     checker answers it (run_terminal).
 */
#include "evcheck.h"
#include "activity_set.h"
#include "agentbus/json.h"
#include "agentbus/value.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct evcheck {
    evcheck_opts_t o;
    ab_limits_t lim;
    ab_doc_t *doc;
    ab_buf_t mp;
    ab_lifecycle_t *run; /* the current run's checker, or NULL */
    act_set_t *acts;
    act_ctx_t act;
    char thread[AB_ID_MAX_BYTES + 1]; /* the current run's thread */
};

ab_status_t evcheck_new(evcheck_t **out, const evcheck_opts_t *o)
{
    evcheck_t *c = calloc(1, sizeof(*c));
    if (!c)
        return AB_NOMEM;
    c->o = *o;
    c->lim = ab_limits_default();
    if (ab_doc_new(&c->doc) != AB_OK || !(c->acts = act_set_new())) {
        evcheck_destroy(&c);
        return AB_NOMEM;
    }
    if (o->thread)
        snprintf(c->thread, sizeof(c->thread), "%s", o->thread);
    *out = c;
    return AB_OK;
}

void evcheck_destroy(evcheck_t **c)
{
    if (!c || !*c)
        return;
    ab_lifecycle_destroy(&(*c)->run);
    act_set_free((*c)->acts);
    ab_doc_destroy(&(*c)->doc);
    ab_buf_free(&(*c)->mp);
    free(*c);
    *c = NULL;
}

/* The thread's earlier runs may hold the baseline: the broker judges it. */
static ab_status_t baseline_or_trust(void *ud, ab_str_t message_id, ab_error_t *err)
{
    ab_error_t mine = AB_ERROR_INIT;
    (void)err;
    return act_set_baseline(ud, message_id, &mine) == AB_NOMEM ? AB_NOMEM : AB_OK;
}

static bool ended(const ab_lifecycle_t *lc)
{
    ab_run_state_t rs = ab_lifecycle_state(lc);
    return rs == AB_RUN_FINISHED || rs == AB_RUN_ERRORED;
}

static ab_status_t open_run(evcheck_t *c, ab_error_t *err)
{
    const char *t = c->o.thread, *r = c->o.run;
    ab_status_t rc = ab_lifecycle_new(&c->run, t, t ? strlen(t) : 0, r, r ? strlen(r) : 0, NULL);
    if (rc != AB_OK)
        return ab_error_set(err, rc, "", "cannot create a lifecycle checker");
    c->act = (act_ctx_t){c->acts, {c->thread, strlen(c->thread)}};
    ab_lifecycle_set_baseline(c->run, c->o.trust_thread ? baseline_or_trust : act_set_baseline,
                              &c->act);
    return AB_OK;
}

static ab_status_t lifecycle_step(evcheck_t *c, const ab_agui_info_t *info, ab_error_t *err)
{
    if (c->run && !c->o.one_run && ended(c->run) && info->type == AB_AGUI_RUN_STARTED)
        ab_lifecycle_destroy(&c->run); /* invariant 2 */
    ab_status_t rc = c->run ? AB_OK : open_run(c, err);
    if (rc != AB_OK)
        return rc;
    if (info->type == AB_AGUI_RUN_STARTED && info->thread_id.ptr &&
        info->thread_id.len < sizeof(c->thread)) {
        memcpy(c->thread, info->thread_id.ptr, info->thread_id.len);
        c->thread[info->thread_id.len] = '\0';
        c->act.thread = (ab_str_t){c->thread, info->thread_id.len};
    }
    rc = ab_lifecycle_check(c->run, info, err);
    if (rc == AB_OK && act_set_note(c->acts, c->act.thread, info) != AB_OK)
        rc = ab_error_set(err, AB_NOMEM, "", "out of memory");
    return rc;
}

ab_status_t evcheck_val(evcheck_t *c, const ab_val_t *ev, ab_agui_info_t *info, ab_error_t *err)
{
    ab_agui_mode_t mode = c->o.lenient ? AB_AGUI_LENIENT : AB_AGUI_STRICT;
    ab_status_t rc = ab_agui_validate(ev, mode, c->o.on_warning, c->o.ud, info, err);
    if (rc != AB_OK || info->type == AB_AGUI_UNKNOWN || !c->o.lifecycle)
        return rc;
    return lifecycle_step(c, info, err);
}

ab_status_t cli_parse_event(ab_doc_t *doc, ab_buf_t *mp, const ab_buf_t *line, const ab_val_t **out,
                            ab_error_t *err)
{
    ab_limits_t lim = ab_limits_default();
    ab_buf_reset(mp);
    ab_status_t rc = ab_json_to_msgpack((const char *)line->data, line->len, lim.max_depth,
                                        lim.max_event_bytes, AB_INVALID_EVENT, mp, err);
    if (rc != AB_OK)
        return rc;
    return ab_doc_parse(doc, mp->data, mp->len, lim.max_event_bytes, lim.max_depth,
                        AB_INVALID_EVENT, out, err);
}

ab_status_t evcheck_line(evcheck_t *c, const char *text, size_t len, ab_agui_info_t *info,
                         ab_error_t *err)
{
    const ab_val_t *ev;
    ab_buf_reset(&c->mp);
    ab_status_t rc = ab_json_to_msgpack(text, len, c->lim.max_depth, c->lim.max_event_bytes,
                                        AB_INVALID_EVENT, &c->mp, err);
    if (rc == AB_OK)
        rc = ab_doc_parse(c->doc, c->mp.data, c->mp.len, c->lim.max_event_bytes, c->lim.max_depth,
                          AB_INVALID_EVENT, &ev, err);
    return rc == AB_OK ? evcheck_val(c, ev, info, err) : rc;
}

bool evcheck_run_active(const evcheck_t *c)
{
    return c->run && ab_lifecycle_state(c->run) == AB_RUN_ACTIVE;
}

bool evcheck_run_ended(const evcheck_t *c)
{
    return c->run && ended(c->run);
}

bool evcheck_not_jsonl(const char *text, size_t len, ab_error_t *err)
{
    while (len && (text[len - 1] == ' ' || text[len - 1] == '\t'))
        len--;
    while (len && (*text == ' ' || *text == '\t'))
        text++, len--;
    bool lone = len == 1 && (*text == '{' || *text == '[');
    if (!lone && !(len && *text == '['))
        return false;
    if (lone)
        ab_error_set(err, AB_INVALID_EVENT, "",
                     "not JSON Lines: a line holds only '%c' (pretty-printed JSON?); give one "
                     "whole event object per line",
                     *text);
    else
        ab_error_set(err, AB_INVALID_EVENT, "",
                     "not JSON Lines: a line is a JSON array; give one whole event object per "
                     "line");
    return true;
}

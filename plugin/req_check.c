/*
 * req_check.c - the request_* entries' input checks and conflict messages,
 * shared by the SQLite store and the PostgreSQL plugin (req_check.h).
 *
 * Invariants:
 *  1. Nothing here touches a database: each function looks at its arguments
 *     only, so a check refuses before anything is sent or stored.
 *  2. The legal moves are those listed at ab_request_state_t (model.h):
 *     queued -> assigned | cancelled; assigned -> queued | assigned (a new
 *     lease) | started | cancelled; started -> started (a new lease) | ended.
 *     Cancelled and ended are final.
 */
#include "req_check.h"

#include <string.h>

/* Indexed by ab_request_state_t. */
static const char *const STATE_TEXT[AB__REQ_N_STATES] = {NULL,      "queued",    "assigned",
                                                         "started", "cancelled", "ended"};

const char *ab__req_state_name(ab_request_state_t s)
{
    return (unsigned)s < AB__REQ_N_STATES ? STATE_TEXT[s] : NULL;
}

ab_request_state_t ab__req_state_of(const char *t, size_t len)
{
    for (int i = 1; i < AB__REQ_N_STATES; i++)
        if (t && len == strlen(STATE_TEXT[i]) && memcmp(t, STATE_TEXT[i], len) == 0)
            return (ab_request_state_t)i;
    return AB_REQ_NONE;
}

ab_status_t ab__req_check_id(const char *who, ab_str_t id, const char *field, ab_error_t *err)
{
    if (!id.ptr || id.len == 0 || id.len > AB_ID_MAX_BYTES)
        return ab_error_set(err, AB_INVALID_ARGUMENT, field, "%s: %s id must be 1..%d bytes", who,
                            field, AB_ID_MAX_BYTES);
    return AB_OK;
}

ab_status_t ab__req_check_new(const char *who, const ab_request_new_t *r, ab_error_t *err)
{
    ab_status_t s = ab__req_check_id(who, r->key, "key", err);
    if (s == AB_OK)
        s = ab__req_check_id(who, r->agent, "agent", err);
    if (s == AB_OK)
        s = ab__req_check_id(who, r->thread, "thread", err);
    if (s == AB_OK)
        s = ab__req_check_id(who, r->run, "run", err);
    if (s != AB_OK)
        return s;
    if (!r->input && r->input_len > 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "input", "%s: NULL input with a length", who);
    if (r->input_len > AB_REQUEST_INPUT_MAX_BYTES) {
        ab_error_set(err, AB_TOO_LARGE, "input", "%s: request input of %zu bytes is over %u", who,
                     r->input_len, AB_REQUEST_INPUT_MAX_BYTES);
        ab_error_detail_int(err, "max", AB_REQUEST_INPUT_MAX_BYTES);
        return AB_TOO_LARGE;
    }
    return AB_OK;
}

static bool legal_move(ab_request_state_t from, ab_request_state_t to)
{
    switch (from) {
    case AB_REQ_QUEUED: return to == AB_REQ_ASSIGNED || to == AB_REQ_CANCELLED;
    case AB_REQ_ASSIGNED:
        return to == AB_REQ_QUEUED || to == AB_REQ_ASSIGNED || to == AB_REQ_STARTED ||
               to == AB_REQ_CANCELLED;
    case AB_REQ_STARTED: return to == AB_REQ_STARTED || to == AB_REQ_ENDED;
    default: return false;
    }
}

ab_status_t ab__req_check_move(const char *who, const ab_request_move_t *mv, ab_error_t *err)
{
    const char *from = ab__req_state_name(mv->expect_state), *to = ab__req_state_name(mv->state);
    if (!from || !to || !legal_move(mv->expect_state, mv->state))
        return ab_error_set(err, AB_INVALID_ARGUMENT, "state", "%s: a request cannot move %s -> %s",
                            who, from ? from : "?", to ? to : "?");
    if ((!mv->worker.ptr && mv->worker.len) || mv->worker.len > AB_REQUEST_WORKER_MAX_BYTES)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "worker", "%s: worker id must be 0..%d bytes",
                            who, AB_REQUEST_WORKER_MAX_BYTES);
    return AB_OK;
}

ab_status_t ab__req_check_list(const char *who, bool have_db, ab_request_state_t state,
                               ab_str_t agent, uint32_t limit, ab_error_t *err)
{
    if (!have_db || limit == 0 || !ab__req_state_name(state))
        return ab_error_set(err, AB_INVALID_ARGUMENT, "state",
                            "%s: request list needs a handle, a state and a limit >= 1", who);
    return agent.ptr ? ab__req_check_id(who, agent, "agent", err) : AB_OK;
}

ab_status_t ab__req_refused(uint64_t id, const ab_request_t *cur, ab_error_t *err)
{
    const char *now = ab__req_state_name(cur->state);
    if (!now)
        now = "?";
    ab_error_set(err, AB_CONFLICT, "state",
                 "request %llu moved on: it is %s at epoch %llu now (nothing changed)",
                 (unsigned long long)id, now, (unsigned long long)cur->epoch);
    ab_error_detail_str(err, "state", now);
    ab_error_detail_int(err, "epoch", (int64_t)cur->epoch);
    return AB_CONFLICT;
}

ab_status_t ab__req_key_differs(ab_str_t key, uint64_t id, const char *field, ab_error_t *err)
{
    ab_error_set(err, AB_CONFLICT, "key",
                 "idempotency key %.*s names request %llu, whose %s differs", (int)key.len, key.ptr,
                 (unsigned long long)id, field);
    ab_error_detail_int(err, "id", (int64_t)id);
    ab_error_detail_str(err, "differs", field);
    return AB_CONFLICT;
}

ab_status_t ab__req_run_taken(ab_str_t thread, ab_str_t run, ab_error_t *err)
{
    return ab_error_set(err, AB_CONFLICT, "run",
                        "run %.*s of thread %.*s belongs to another request", (int)run.len, run.ptr,
                        (int)thread.len, thread.ptr);
}

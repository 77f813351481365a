/*
 * req_check.h - the checks of the request_* entries' inputs and their
 * refusals, one copy for both persistence plugins (store/store_req.c for
 * SQLite, plugin/postgres/pg_req.c): the state names, the legal moves of
 * ab_request_state_t, the checks of a new request and of a move, and the
 * messages of a conflict. Internal to the build (ab__ prefix), compiled into
 * agentbus-store and into the PostgreSQL module.
 *
 * @p who names the plugin in a message ("store", "postgres"): each message
 * reads "<who>: ..." exactly as each plugin wrote it before the checks were
 * shared.
 */
#ifndef AB_PLUGIN_REQ_CHECK_H
#define AB_PLUGIN_REQ_CHECK_H

#include "agentbus/model.h"
#include "agentbus/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** How many ab_request_state_t values there are (AB_REQ_NONE included). */
#define AB__REQ_N_STATES 6

/** The stored name of @p s ("queued", ...); NULL for AB_REQ_NONE or out of range. */
const char *ab__req_state_name(ab_request_state_t s);
/** The state named by the @p len bytes at @p t; AB_REQ_NONE for any other text. */
ab_request_state_t ab__req_state_of(const char *t, size_t len);

/** An id of 1..AB_ID_MAX_BYTES bytes, else AB_INVALID_ARGUMENT on @p field. */
ab_status_t ab__req_check_id(const char *who, ab_str_t id, const char *field, ab_error_t *err);
/** The inputs of request_put: the four ids, the input's pointer and size. */
ab_status_t ab__req_check_new(const char *who, const ab_request_new_t *r, ab_error_t *err);
/** A move of request_move: legal from its expected state, a worker id that fits. */
ab_status_t ab__req_check_move(const char *who, const ab_request_move_t *mv, ab_error_t *err);
/** The arguments of request_list (@p have_db: a handle was given). */
ab_status_t ab__req_check_list(const char *who, bool have_db, ab_request_state_t state,
                               ab_str_t agent, uint32_t limit, ab_error_t *err);

/** AB_CONFLICT: a move changed nothing, @p cur being the request as stored now. */
ab_status_t ab__req_refused(uint64_t id, const ab_request_t *cur, ab_error_t *err);
/** AB_CONFLICT: the idempotency key @p key names request @p id, whose @p field differs. */
ab_status_t ab__req_key_differs(ab_str_t key, uint64_t id, const char *field, ab_error_t *err);
/** AB_CONFLICT: run @p run of @p thread is named by another request. */
ab_status_t ab__req_run_taken(ab_str_t thread, ab_str_t run, ab_error_t *err);

#endif /* AB_PLUGIN_REQ_CHECK_H */

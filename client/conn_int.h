/*
 * conn_int.h - what the files of client/ share about a connection
 * (internal; not installed).
 */
#ifndef AB_CLIENT_CONN_INT_H
#define AB_CLIENT_CONN_INT_H

#include "agentbus/client.h"

/** The connection's options, defaults filled in. Borrowed. */
const ab_conn_opts_t *ab__conn_opts(const ab_conn_t *c);

/** Make @p sock a CURVE client with the connection's keys (no-op without CURVE). @return 0/-1. */
int ab__conn_curve_apply(const ab_conn_t *c, void *sock);

/**
 * ab_conn_send() bounded by @p deadline (monotonic ms, ab__mono_ms()) instead of the
 * connection's timeout: waits that long at most for the broker to take the message
 * (one try when it has passed). @return as ab_conn_send(); AB_TIMEOUT (retryable) when
 * the broker did not take it in time (not connected, or its queue is full): nothing sent.
 */
ab_status_t ab__conn_send_by(ab_conn_t *c, const ab_msg_t *req, const ab_buf_t *frames,
                             size_t nframes, uint64_t *cid, int64_t deadline, ab_error_t *err);

/**
 * Stream @p cid (a replay) was cancelled and its end (replay_end or error) not read yet:
 * ab_conn_destroy() reads until it comes, for a short while (conn.c invariant 7).
 */
void ab__conn_cancelled(ab_conn_t *c, uint64_t cid);

#endif

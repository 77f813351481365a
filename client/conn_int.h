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

#endif

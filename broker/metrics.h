/*
 * metrics.h - the broker's optional Prometheus listener (`--metrics
 * HOST:PORT`; broker/metrics.c, docs/OPERATIONS.md "Metrics").
 */
#ifndef AB_BROKER_METRICS_H
#define AB_BROKER_METRICS_H

#include "agentbus/status.h"

#include <netinet/in.h>

typedef struct ab__metrics ab__metrics_t;
struct ab__shared;

/** "HOST:PORT" (":PORT" and "localhost:PORT" mean 127.0.0.1) as an IPv4 address.
 * @return AB_OK or AB_INVALID_CONFIG (field "metrics"). */
ab_status_t ab__metrics_parse(const char *addr, struct sockaddr_in *out, ab_error_t *err);

/** Listen on @p addr and answer GET /metrics from broker @p b's figures.
 * @return AB_OK, AB_INVALID_CONFIG, AB_IO (cannot listen) or AB_NOMEM. */
ab_status_t ab__metrics_start(ab__metrics_t **out, struct ab__shared *b, const char *addr,
                              ab_error_t *err);

/** Stop listening (its thread ends before this returns) and free; NULL-safe. */
void ab__metrics_stop(ab__metrics_t **m);

#endif /* AB_BROKER_METRICS_H */

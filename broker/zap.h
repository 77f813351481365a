/*
 * zap.h - the broker's CURVE authentication (zap.c; broker/ only).
 */
#ifndef AB_BROKER_ZAP_H
#define AB_BROKER_ZAP_H

#include "access.h"
#include "agentbus/broker.h"
#include "agentbus/keys.h"

#include <zmq.h>

typedef struct ab__zap ab__zap_t;

/**
 * Read the broker's key pair DIR/broker.key_secret into @p server and start
 * the ZAP handler on @p zctx, admitting the keys of the table in @p box
 * (which must outlive the handler). Call before binding any CURVE socket.
 * @return AB_OK; AB_INVALID_CONFIG (field "keys": a missing
 * broker.key_secret), a key file's error (PATH:LINE), AB_INTERNAL (the
 * handler cannot be started).
 */
AB_NODISCARD ab_status_t ab__zap_start(ab__zap_t **out, void *zctx, const char *dir,
                                       ab_keypair_t *server, ab__access_box_t *box,
                                       ab_error_t *err);

/** Stop the handler and free it (NULL-safe; *z = NULL); before zmq_ctx_term(). */
void ab__zap_stop(ab__zap_t **z);

#endif /* AB_BROKER_ZAP_H */

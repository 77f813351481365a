/*
 * zap.h - the broker's CURVE authentication (zap.c; broker/ only).
 */
#ifndef AB_BROKER_ZAP_H
#define AB_BROKER_ZAP_H

#include "agentbus/broker.h"
#include "agentbus/keys.h"

#include <zmq.h>

typedef struct ab__zap ab__zap_t;

/**
 * Read the keys of @p dir (the broker's pair into @p server, the clients'
 * public keys) and start the ZAP handler on @p zctx. Call before binding any
 * CURVE socket. @return AB_OK; AB_INVALID_CONFIG (field "keys": a missing
 * broker.key_secret, an unreadable directory), a key file's error
 * (PATH:LINE), AB_INTERNAL (the handler cannot be started).
 */
AB_NODISCARD ab_status_t ab__zap_start(ab__zap_t **out, void *zctx, const char *dir,
                                       ab_keypair_t *server, ab_error_t *err);

/** Stop the handler and free it (NULL-safe; *z = NULL); before zmq_ctx_term(). */
void ab__zap_stop(ab__zap_t **z);

#endif /* AB_BROKER_ZAP_H */

/*
 * authz.h - the role each request needs (authz.c; broker/ only).
 */
#ifndef AB_BROKER_AUTHZ_H
#define AB_BROKER_AUTHZ_H

#include "access.h"
#include "agentbus/codec.h"

/**
 * Whether principal @p p (NULL: a key no longer admitted) may make request
 * @p m. On false, *e is a typed `unauthorized` naming the key and the role,
 * never whether what the request names exists.
 */
bool ab__authorize(const ab__principal_t *p, const ab_msg_t *m, ab_error_t *e);

/** Whether @p p may publish an event of thread @p thread; false: *e as above. */
bool ab__authorize_event(const ab__principal_t *p, ab_str_t thread, ab_error_t *e);

/** What welcome tells a key it may do: {"name": ..., "roles": {ROLE: true | [prefix...]}}. */
typedef struct ab__access_view {
    ab_kv_t top[2];
    ab_kv_t roles[AB__ROLES];
    ab_val_t items[AB__ROLES][AB__ACCESS_PREFIXES_MAX];
    ab_val_t v; /**< the map */
} ab__access_view_t;

/** Fill @p w with @p p's name and roles; w->v points into @p w and @p p's table. */
void ab__access_describe(const ab__principal_t *p, ab__access_view_t *w);

#endif /* AB_BROKER_AUTHZ_H */

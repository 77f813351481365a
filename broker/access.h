/*
 * access.h - who may do what (access.c; broker/ only): the table of the
 * keys a broker with `--keys DIR` admits, each with a name and its roles,
 * each role limited to thread id prefixes (docs/OPERATIONS.md "The access
 * file").
 */
#ifndef AB_BROKER_ACCESS_H
#define AB_BROKER_ACCESS_H

#include "agentbus/keys.h"
#include "agentbus/status.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** The roles of the access file; admin covers the others on every thread, and more. */
typedef enum ab__role {
    AB__ROLE_PUBLISH = 0, /**< claim and publish */
    AB__ROLE_OBSERVE,     /**< subscribe, replay a run or thread, heads, snapshot */
    AB__ROLE_SERVE,       /**< be a worker: serve, decline, leave, action results */
    AB__ROLE_CONTROL,     /**< start, cancel, resume, abandon runs; invoke actions; list */
    AB__ROLE_ADMIN,       /**< everything, the firehose (replay of the whole bus) too */
    AB__ROLES
} ab__role_t;

/** Most principals (lines) of one table, prefixes of one role, bytes of a line. */
#define AB__ACCESS_MAX          4096
#define AB__ACCESS_PREFIXES_MAX 32
#define AB__ACCESS_LINE_MAX     4096

typedef struct ab__principal ab__principal_t;
typedef struct ab__access ab__access_t;

/** The role's wire and file name ("publish"), or "?". */
const char *ab__role_name(ab__role_t r);

/**
 * Parse access file text @p text (@p len bytes) named @p name in messages;
 * key files the lines name (NAME.key) are read from @p dir.
 * @return AB_OK; AB_INVALID_CONFIG "NAME:LINE: what" (field "access") for the
 *         first line that is wrong; AB_NOMEM.
 */
AB_NODISCARD ab_status_t ab__access_parse(ab__access_t **out, const char *name, const char *text,
                                          size_t len, const char *dir, ab_error_t *err);

/**
 * The table of a broker's keys directory @p dir: the access file @p file
 * when it is not "" (relative names resolved from the working directory),
 * else DIR/access when it exists, else every DIR/NAME.key but broker.key
 * with the role admin (a directory of trusted keys).
 * @return as ab__access_parse(); AB_INVALID_CONFIG for an unreadable file or
 *         directory, a key file's error.
 */
AB_NODISCARD ab_status_t ab__access_load(ab__access_t **out, const char *dir, const char *file,
                                         ab_error_t *err);

/** Where the table came from ("DIR/access", "DIR (every key: admin)"). */
const char *ab__access_source(const ab__access_t *a);
/** Principals in the table. */
size_t ab__access_count(const ab__access_t *a);
/** Principal @p i (0..count-1), in key order. */
const ab__principal_t *ab__access_at(const ab__access_t *a, size_t i);

/** Take one more reference; @return @p a. */
ab__access_t *ab__access_ref(ab__access_t *a);
/** Drop a reference (NULL-safe; *a = NULL); the last frees the table. */
void ab__access_unref(ab__access_t **a);

/** The principal of public key @p key (32 bytes), or NULL. */
const ab__principal_t *ab__access_find(const ab__access_t *a, const uint8_t *key);
/** The principal of Z85 public key @p z85 (@p len bytes), or NULL. */
const ab__principal_t *ab__access_find_z85(const ab__access_t *a, const char *z85, size_t len);

const char *ab__principal_name(const ab__principal_t *p);
/** The principal's key in Z85 (40 characters, NUL-terminated). */
const char *ab__principal_key(const ab__principal_t *p);

/** Whether @p p may act in @p role on thread @p thread (@p len bytes). NULL p: no. */
bool ab__access_may(const ab__principal_t *p, ab__role_t role, const char *thread, size_t len);
/** Whether @p p holds @p role on every thread (admin does). NULL p: no. */
bool ab__access_may_all(const ab__principal_t *p, ab__role_t role);
/** Whether @p p holds @p role on any thread at all. */
bool ab__access_has(const ab__principal_t *p, ab__role_t role);

/**
 * The role's prefixes: *all true when it covers every thread (then
 * *n is 0), else @p n prefixes in @p pfx / @p lens (pointers valid as long
 * as the table).
 */
void ab__access_grant(const ab__principal_t *p, ab__role_t role, bool *all, const char *const **pfx,
                      const uint16_t **lens, size_t *n);

/**
 * The live subscriptions that a subscription to topic @p t (@p tl bytes)
 * becomes for @p p: its intersection with what @p p may read - the
 * heartbeat topic and, with observe, "ev" NUL PREFIX for each prefix (all
 * of @p t for admin or observe on every thread). @p fn is called for each
 * topic to subscribe; @return how many (0: nothing @p p may read).
 */
size_t ab__access_topics(const ab__principal_t *p, const uint8_t *t, size_t tl,
                         void (*fn)(void *ud, const uint8_t *topic, size_t len), void *ud);

/**
 * Whether a key that could read a thread under @p old can no longer under
 * @p now (removed, lost observe, narrower prefixes): live subscriptions
 * made under @p old must be made again.
 */
bool ab__access_narrowed(const ab__access_t *old, const ab__access_t *now);

/* ---- the broker's current table, shared by its threads ------------------- */

typedef struct ab__access_box {
    pthread_mutex_t mu;
    ab__access_t *cur; /**< NULL: no keys, no checks */
} ab__access_box_t;

void ab__access_box_init(ab__access_box_t *box);
/** Free the table (the box itself is the caller's). */
void ab__access_box_free(ab__access_box_t *box);
/** A reference to the current table (ab__access_unref() it), or NULL. */
ab__access_t *ab__access_box_get(ab__access_box_t *box);
/** Make @p a (its reference moved in) the current table. */
void ab__access_box_set(ab__access_box_t *box, ab__access_t *a);

#endif /* AB_BROKER_ACCESS_H */

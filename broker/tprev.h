/*
 * tprev.h - the writer's table of each thread's last committed position,
 * for the `tprev` of a live event's stamp (broker/ only; docs/PROTOCOL.md
 * section 5, docs/ARCHITECTURE.md "Live fan-out").
 *
 * The fan-out notes every committed event here, in position order, its own
 * and (with a shared store) the other brokers' (follow.c). For each event the
 * table answers a position T below it such that the event's thread has no
 * committed event with a position strictly between T and the event's: the
 * position of the thread's previous event when the table holds the thread,
 * else a higher position below the event's that it can prove (the positions
 * it has not watched, or an evicted thread's last known one): at or above the
 * thread's previous event, so a subscriber replays at worst once more. An
 * ordered thread subscriber that has every event of the thread up to T
 * delivers the event without a replay.
 *
 * Bounded: AB__TPREV_SETS x AB__TPREV_WAYS threads (16384), fixed-size
 * entries allocated once at start (about 4.3 MiB), no allocation per event.
 * A thread that does not fit evicts the entry of its set with the lowest
 * position; the set keeps the highest position it evicted, which is what a
 * thread of that set not in the table is answered. Wrong answers are
 * impossible by construction, only loose ones.
 */
#ifndef AB_BROKER_TPREV_H
#define AB_BROKER_TPREV_H

#include "agentbus/ids.h"
#include "agentbus/model.h"
#include "agentbus/status.h"

#include <stdbool.h>
#include <stdint.h>

/** Entries per set (a thread lives in one set, chosen by its hash). */
#define AB__TPREV_WAYS 4u
/** Sets: a power of two. Threads held at most: AB__TPREV_SETS * AB__TPREV_WAYS. */
#define AB__TPREV_SETS 4096u

/**
 * One entry's hash and last noted position (pos 0: an empty entry). A set's
 * AB__TPREV_WAYS tags fill one 64-byte cache line, apart from the ids: a note
 * reads that line, and an id only when its hash matches.
 */
typedef struct ab__tprev_tag {
    uint64_t hash;
    uint64_t pos;
} ab__tprev_tag_t;

/** One entry's thread id. */
typedef struct ab__tprev_id {
    uint16_t len;
    char id[AB_ID_MAX_BYTES];
} ab__tprev_id_t;

/** The table; a member of the writer's fan-out, used by the writer thread only. */
typedef struct ab__tprev {
    ab__tprev_tag_t *tag; /**< nsets * AB__TPREV_WAYS tags, 64-byte aligned; NULL: no memory */
    ab__tprev_id_t *ids;  /**< the ids of the same entries */
    uint64_t *evicted;    /**< per set: the highest position of an entry it evicted */
    size_t nsets;         /**< a power of two */
    uint64_t floor;       /**< every position above it was noted (the gap rule) */
    uint64_t last;        /**< the last position noted */
    /* counts, for the tests and the debug log */
    uint64_t hits;      /**< the thread had an entry */
    uint64_t misses;    /**< it had none: answered by floor or its set's evicted bound */
    uint64_t evictions; /**< entries replaced by another thread */
    uint64_t gaps;      /**< positions that did not follow the last noted one */
} ab__tprev_t;

/**
 * Set up @p t for @p nsets sets (0: AB__TPREV_SETS; rounded up to a power of
 * two) when every position up to @p head is committed and none above it was
 * seen yet (the store's head at start). AB_NOMEM leaves a table that
 * answers nothing (ab__tprev_note() returns false) but is safe to use.
 */
ab_status_t ab__tprev_init(ab__tprev_t *t, size_t nsets, uint64_t head);

/**
 * Note the committed event at @p pos of @p thread and set *prev to the
 * position T < pos above which, below pos, the thread has no event. A
 * position that does not follow the last noted one (a live loss of the
 * follower, a store that skipped numbers) raises the floor to pos - 1:
 * nothing below is claimed any more. @return false when the table answers
 * nothing (it could not be allocated, or pos does not grow): leave tprev out.
 */
bool ab__tprev_note(ab__tprev_t *t, ab_str_t thread, uint64_t pos, uint64_t *prev);

/** Threads held now (entries in use). */
size_t ab__tprev_count(const ab__tprev_t *t);

/** Free the entries. */
void ab__tprev_free(ab__tprev_t *t);

#endif /* AB_BROKER_TPREV_H */

/*
 * snapcount.h - the snapshot scheduler's bounded map of per-thread counts
 * (broker/ only; snapsched.c invariant 2, docs/OPERATIONS.md "Snapshots"):
 * for each thread, the committed events and bytes since its last snapshot
 * request and the size of its last document.
 *
 * At most AB__SNAPCOUNT_THREADS threads in AB__SNAPCOUNT_SLOTS slots (load at
 * most 1/2), open addressing with linear probing and no tombstones, allocated
 * whole at the first thread (about 2.3 MiB of slots and 64 KiB of hashes). A
 * new thread that finds the map full evicts the one nearest its home slot,
 * whose counts restart. A lookup probes the hashes, which sit apart from the
 * slots, and reads a slot only when its hash matches: with thousands of
 * threads in turn, the slots are not in the CPU's caches.
 */
#ifndef AB_BROKER_SNAPCOUNT_H
#define AB_BROKER_SNAPCOUNT_H

#include "agentbus/ids.h"
#include "agentbus/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Threads whose counts are kept. */
#define AB__SNAPCOUNT_THREADS 4096u
/** Slots: a power of two, twice the threads. */
#define AB__SNAPCOUNT_SLOTS (2u * AB__SNAPCOUNT_THREADS)

/** One thread's counts. */
typedef struct ab__snapcount {
    uint32_t len;      /**< 0 = free (thread ids are never empty) */
    uint32_t count;    /**< committed events since the last snapshot request */
    uint64_t bytes;    /**< their envelope bytes */
    uint64_t last_doc; /**< size of the last stored document (0 = unknown) */
    bool too_large;    /**< its last document could not be stored (snapsched.c invariant 3) */
    uint64_t last_pos; /**< position of its last committed event, 0 = not seen since counted */
    struct ab__snapfeed *feed; /**< its events since the last request (snapsched.c invariant 5) */
    bool feed_off;             /**< its feed ended on the bound: none until the next request */
    char id[AB_ID_MAX_BYTES];
} ab__snapcount_t;

/** The map; zeroed is empty. Used by the writer thread only. */
typedef struct ab__snapcounts {
    ab__snapcount_t *slot; /**< AB__SNAPCOUNT_SLOTS, or NULL before the first thread */
    uint64_t *hash;        /**< per slot: its thread's hash, never 0; 0 = free */
    size_t n;              /**< threads held */
    uint64_t evictions;    /**< threads evicted to make room */
} ab__snapcounts_t;

/** The counts of @p thread, or NULL when it has none (or its id is empty or too long). */
ab__snapcount_t *ab__snapcount_find(ab__snapcounts_t *m, ab_str_t thread);

/**
 * The counts of @p thread: found, or new and zeroed (evicting the thread nearest its home
 * slot when the map is full). NULL when the id is empty or too long, or out of memory.
 */
ab__snapcount_t *ab__snapcount_slot(ab__snapcounts_t *m, ab_str_t thread);

/** Free the map and the feeds its threads hold (NULL-safe members); it is empty again. */
void ab__snapcount_free(ab__snapcounts_t *m);

#endif /* AB_BROKER_SNAPCOUNT_H */

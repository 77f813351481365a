/*
 * snapfeed.h - committed events handed from the writer to the snapshot
 * worker in memory (broker/ only; snapsched.c invariant 5, snapshot_cmd.c
 * invariant 6, docs/OPERATIONS.md "Snapshots").
 *
 * A feed is one thread's events as the writer committed them, copied at
 * commit: position, run, seq and the stored envelope bytes. It holds every
 * event of its thread with a position in (cover, last], in position order,
 * so a builder at a position L with cover <= L folds exactly the feed's
 * events after L, without reading them back from the store. Feeds are made
 * only when this broker is the store's only writer (no other broker's event
 * can fall between two of them).
 *
 * Memory: records live in blocks of 1 KiB doubling up to AB__SNAPFEED_BLOCK
 * (a record larger than its block gets a block of its size), never moved
 * once written. The
 * bytes of every feed of a broker (the writer's and those queued for the
 * worker) are counted in one counter and bounded by AB__SNAPFEED_BYTES: an
 * event that does not fit ends its feed (ab__snapfeed_add() frees it), and
 * the worker reads those events from the store instead.
 */
#ifndef AB_BROKER_SNAPFEED_H
#define AB_BROKER_SNAPFEED_H

#include "agentbus/ids.h"
#include "agentbus/model.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Bound of the bytes held in all feeds of one broker. */
#define AB__SNAPFEED_BYTES (32u << 20)
/** Size of a feed's first block; each next one is twice the last, up to AB__SNAPFEED_BLOCK. */
#define AB__SNAPFEED_BLOCK_MIN 1024u
/** Largest size of a feed's blocks (a larger record gets a block of its size). */
#define AB__SNAPFEED_BLOCK (64u << 10)

typedef struct ab__feedblk ab__feedblk_t;

/** One thread's committed events (see above); segments of a thread chain by next. */
typedef struct ab__snapfeed {
    struct ab__snapfeed *next; /**< a later segment of the same thread, or NULL */
    uint64_t cover;            /**< every event of the thread after cover up to last is here */
    uint64_t last;             /**< position of the last event */
    uint64_t n;                /**< events */
    size_t bytes;              /**< counted in *acct */
    _Atomic size_t *acct;      /**< the broker's counter of feed bytes */
    ab__feedblk_t *head, *tail;
} ab__snapfeed_t;

/** One event of a feed; its pointers are valid while the feed is. */
typedef struct ab__snaprec {
    uint64_t pos;
    uint64_t seq;
    ab_str_t run;
    const uint8_t *bytes;
    size_t len;
} ab__snaprec_t;

/** A place in a feed; zeroed is its start. */
typedef struct ab__feedcur {
    const ab__feedblk_t *blk;
    size_t off;
} ab__feedcur_t;

/**
 * Append an event committed at @p pos to *@p fp, making the feed (with
 * @p cover) when *fp is NULL. When the event does not fit in the bound
 * (counted in @p acct), or on out of memory, the feed is freed (*fp = NULL).
 * @p pos must be above the feed's last; @p run at most AB_ID_MAX_BYTES.
 * @return whether the event is in the feed.
 */
bool ab__snapfeed_add(ab__snapfeed_t **fp, _Atomic size_t *acct, uint64_t cover, uint64_t pos,
                      ab_str_t run, uint64_t seq, const uint8_t *bytes, size_t len);

/** The event at @p c (moving it on), or false at the feed's end. */
bool ab__snapfeed_next(const ab__snapfeed_t *f, ab__feedcur_t *c, ab__snaprec_t *out);

/** Free *@p fp and every later segment chained to it, uncounting their bytes (NULL-safe). */
void ab__snapfeed_free(ab__snapfeed_t **fp);

#endif /* AB_BROKER_SNAPFEED_H */

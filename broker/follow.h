/*
 * follow.h - fanning out what other brokers committed to a shared store
 * (broker/ only; docs/SCALING.md "Several brokers").
 *
 * A store is shared when its plugin has the wake_fd/wake_drain entries
 * (plugin ABI 4: PostgreSQL); then other brokers commit to it too. The
 * writer thread keeps `fanned`, the highest position it has fanned out, and
 * fans out every position in order, its own and the others': before its own
 * commit's events it reads the positions in between from the store, after
 * them it reads what followed, and when the plugin's descriptor wakes it (or
 * its poll times out) it reads what is new. A run another broker wrote to is
 * dropped from this broker's sequencer cache, so its next event here is
 * checked against the stored head. Nothing here runs for an SQLite store.
 */
#ifndef AB_BROKER_FOLLOW_H
#define AB_BROKER_FOLLOW_H

#include "internal.h"
#include "sequencer.h"

struct ab__fanout;

/** The writer's follower of a shared store (a member of the writer). */
typedef struct ab__follow {
    bool on;         /**< the store is shared (ab__plugin_shared) */
    uint64_t fanned; /**< every position up to this one was fanned out */
    ab__shared_t *b;
    ab_seq_t *seq;
    ab_doc_t *doc;             /**< decoding the envelopes read back */
    uint64_t remote;           /**< events of other brokers fanned out (for the logs and tests) */
    struct ab__dispatch *disp; /**< told of the followed commits and request wakes (or NULL) */
} ab__follow_t;

/** Set @p f up at start (fanned = the store's head position). */
void ab__follow_init(ab__follow_t *f, ab__shared_t *b, ab_seq_t *seq);
void ab__follow_free(ab__follow_t *f);

/** Before fanning out an own commit at @p first: the other brokers' events below it. */
void ab__follow_before(ab__follow_t *f, struct ab__fanout *fan, uint64_t first);

/** After fanning out an own commit [@p first, @p last]: what followed it. */
void ab__follow_after(ab__follow_t *f, struct ab__fanout *fan, uint64_t first, uint64_t last);

/** The position up to which this broker has applied every committed event, its own and the
 *  other brokers' (a fenced append's `seen`: invariant 6 of follow.c). */
static inline uint64_t ab__follow_seen(const ab__follow_t *f)
{
    return f->fanned;
}

/** The descriptor to poll beside the writer's sockets, or -1. */
int ab__follow_fd(const ab__follow_t *f);

/** The descriptor woke or the poll timed out: fan out what is new. */
void ab__follow_poll(ab__follow_t *f, struct ab__fanout *fan);

/**
 * Before the writer sleeps on the descriptor: act on notifications the store's client
 * library already read off it during the writer's own statements (the descriptor is then
 * not readable, and they would wait for the poll's timeout, up to a second); nothing is
 * read from the store when there are none (invariant 5). @return whether there were any
 * (the writer then looks for work again before it sleeps).
 */
bool ab__follow_pending(ab__follow_t *f, struct ab__fanout *fan);

#endif /* AB_BROKER_FOLLOW_H */

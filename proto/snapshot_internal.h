/*
 * snapshot_internal.h - the snapshot builder's representation, shared by
 * snapshot.c (build, feed, restore) and snapshot_enc.c (encoders).
 *
 * The events of the active runs are kept as msgpack bytes (the event body
 * packed once when fed), not as jansson trees: feeding is a pack and a copy,
 * and the msgpack document copies them verbatim.
 */
#ifndef AGENTBUS_SNAPSHOT_INTERNAL_H
#define AGENTBUS_SNAPSHOT_INTERNAL_H

#include "agentbus/buf.h"
#include "agentbus/snapshot.h"
#include "jansson_internal.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

/** A kept event's run record when it has none (the events of a loaded document, before a
 *  builder takes them): always live. */
#define SN_NO_RUN UINT32_MAX

/** One kept event: its run id then its msgpack body, at @p off in bytes. */
typedef struct sn_event {
    uint64_t seq, pos;
    size_t off;
    uint32_t run_len, ev_len;
    uint32_t depth; /**< nesting depth of the body (a scalar is 1) */
    uint32_t rid;   /**< its run's record in the builder's index, or SN_NO_RUN */
    uint32_t gen;   /**< that record's generation when the event was kept */
} sn_event_t;

/** A run in the builder's index (snapshot_runs.c): what feed() would look up for it. */
typedef struct sn_run {
    uint64_t hash;
    uint32_t off, len; /**< the run id in sn_runs_t.keys */
    json_t *last;      /**< the run's node in the builder's runs, or NULL (borrowed) */
    json_t *item;      /**< the projection's run item, or NULL (borrowed) */
    uint32_t gen;      /**< bumped when the run ends: its kept events are dead */
    uint32_t nkept;    /**< its live kept events (an active run has at least one) */
} sn_run_t;

typedef struct sn_slot {
    uint32_t tag; /**< the high half of the run's hash */
    uint32_t rec; /**< record number + 1; 0 = empty */
} sn_slot_t;

/** The index: records in the order made, found through open-addressed slots. */
typedef struct sn_runs {
    sn_slot_t *slot;
    size_t cap;
    sn_run_t *rec;
    size_t n, reccap;
    ab_buf_t keys;
} sn_runs_t;

/** A run id's hash for the index. */
uint64_t ab__sn_run_hash(const char *run, size_t n);

/** The record of @p run (hash @p h), or NULL. */
sn_run_t *ab__sn_runs_get(const sn_runs_t *x, const char *run, size_t n, uint64_t h);

/** A new record for @p run, which has none (all zero but its key); valid until the next
 *  put. NULL when out of memory: the index is unchanged. */
sn_run_t *ab__sn_runs_put(sn_runs_t *x, const char *run, size_t n, uint64_t h);

/** Bytes the index holds. */
size_t ab__sn_runs_bytes(const sn_runs_t *x);

void ab__sn_runs_free(sn_runs_t *x);

struct ab_snapshot_builder {
    ab_reducer_t *r;
    json_t *runs;   /* run id -> last seq */
    sn_runs_t idx;  /* every run fed or kept, numbered */
    sn_event_t *ev; /* the events of the active runs, in commit order, and dead ones */
    size_t nev, evcap;
    size_t dead;       /* events of @ev whose run ended (compacted past half) */
    size_t nactive;    /* records with live kept events: the active runs (snapshot.c inv. 5) */
    ab_buf_t bytes;    /* run ids and bodies of @ev */
    uint64_t pos;      /* commit position of the last event */
    size_t proj_bytes; /* msgpack size of the projection when last measured */
};

/** Whether kept event @p e of @p b is live (its run has not ended since it was kept). */
static inline bool ab__sn_live(const ab_snapshot_builder_t *b, const sn_event_t *e)
{
    return e->rid == SN_NO_RUN || b->idx.rec[e->rid].gen == e->gen;
}

#define SN_MAX(a, b) ((a) > (b) ? (a) : (b))

/** Ids of the projection's runs whose status is "active", in its order (new array; NULL = no
 *  memory). @p count: how many there are (the builder's nactive), so that the listing, from
 *  the newest run back, stops once it found them (a count that does not match: all are read). */
json_t *ab__sn_active_runs(const json_t *projection, size_t count);

/** The kept events as the document's activeEvents array (new; NULL = no memory). */
json_t *ab__sn_events_json(const ab_snapshot_builder_t *b);

/** Pack jansson value @p v (depth of @p v = @p depth, limit @p max_depth). */
ab_status_t ab__sn_pack_json(msgpack_packer *pk, const json_t *v, uint32_t depth,
                             uint32_t max_depth);

#endif

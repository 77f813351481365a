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

/** One kept event: its run id then its msgpack body, at @p off in bytes. */
typedef struct sn_event {
    uint64_t seq, pos;
    size_t off;
    uint32_t run_len, ev_len;
    uint32_t depth; /**< nesting depth of the body (a scalar is 1) */
} sn_event_t;

struct ab_snapshot_builder {
    ab_reducer_t *r;
    json_t *runs;   /* run id -> last seq */
    json_t *kept;   /* run id -> true, for runs with events kept */
    sn_event_t *ev; /* the events of the active runs, in commit order */
    size_t nev, evcap;
    ab_buf_t bytes;    /* run ids and bodies of @ev */
    uint64_t pos;      /* commit position of the last event */
    size_t proj_bytes; /* msgpack size of the projection when last measured */
};

#define SN_MAX(a, b) ((a) > (b) ? (a) : (b))

/** Ids of the projection's runs whose status is "active" (new array; NULL = no memory). */
json_t *ab__sn_active_runs(const json_t *projection);

/** The kept events as the document's activeEvents array (new; NULL = no memory). */
json_t *ab__sn_events_json(const ab_snapshot_builder_t *b);

/** Pack jansson value @p v (depth of @p v = @p depth, limit @p max_depth). */
ab_status_t ab__sn_pack_json(msgpack_packer *pk, const json_t *v, uint32_t depth,
                             uint32_t max_depth);

#endif

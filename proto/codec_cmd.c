/*
 * codec_cmd.c - command, reply and heartbeat headers (agentbus/codec.h,
 * docs/PROTOCOL.md "Commands").
 *
 * One field table per op says everything about its header: keys, types,
 * required or optional, bounds and encoding order (op, v, cid, then the
 * op's own fields). REPLAY has one table per scope and HEADS one per form,
 * so a field of another scope is simply an unknown field.
 *
 * Invariants:
 *  1. Decoding looks at `v` before anything else, then at `op`, so a
 *     message of a version we do not speak fails as incompatible_version and
 *     an unknown op as unsupported, not on their fields.
 *  2. Requests are held to max_header_bytes; broker messages to
 *     AB_MAX_REPLY_BYTES (a reply to a full batch may outgrow the request).
 *  3. When decoding fails after a valid cid was seen, err->cid is that cid.
 *  4. The model's types (agentbus/model.h) meet the wire only here, at the
 *     end of this file: a run head becomes an ab_head_t view, a replay
 *     request the ab_read_t that starts it.
 */
#include "codec_spec.h"

#include <inttypes.h>
#include <stddef.h>
#include <string.h>

/* Enum fields are stored and compared as int. */
_Static_assert(sizeof(ab_run_status_t) == sizeof(int), "enum size");
_Static_assert(sizeof(ab_result_status_t) == sizeof(int), "enum size");
_Static_assert(sizeof(ab_replay_scope_t) == sizeof(int), "enum size");
_Static_assert(sizeof(ab_agui_outcome_t) == sizeof(int), "enum size");

/* ---- op names ----------------------------------------------------------- */

static const struct {
    const char *name;
    bool request;
} op_rows[AB_OP_COUNT_] = {[AB_OP_NONE_] = {"unknown", false},
#define AB_OP_ROW_(e, s, req) [AB_OP_##e] = {s, req},
                           AB_OP_MAP(AB_OP_ROW_)
#undef AB_OP_ROW_
};

const char *ab_op_name(ab_op_t op)
{
    return (unsigned)op < AB_OP_COUNT_ ? op_rows[op].name : "unknown";
}

ab_status_t ab_op_from_name(const char *s, size_t len, ab_op_t *out)
{
    for (int i = AB_OP_NONE_ + 1; i < AB_OP_COUNT_; i++) {
        if (strlen(op_rows[i].name) == len && memcmp(op_rows[i].name, s, len) == 0) {
            *out = (ab_op_t)i;
            return AB_OK;
        }
    }
    return AB_NOT_FOUND;
}

bool ab_op_is_request(ab_op_t op)
{
    return (unsigned)op < AB_OP_COUNT_ && op_rows[op].request;
}

/* ---- the op field ------------------------------------------------------- */

/* Checked and set by decode_header() before the field walk. */
static ab_status_t op_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    (void)c, (void)f, (void)v, (void)base;
    return AB_OK;
}

static ab_status_t op_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    const char *name = ab_op_name(((const ab_msg_t *)(const void *)base)->op);
    (void)f;
    return ab__cc_pack_str(c, name, strlen(name));
}

static bool op_true(const ab_fspec_t *f, const char *base)
{
    (void)f, (void)base;
    return true;
}

static bool op_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    (void)f, (void)a, (void)b;
    return true; /* compared by ab_msg_equal() */
}

const ab_ftype_t ab__ft_op = {op_dec, op_enc, op_true, op_eq};

/* ---- enum names --------------------------------------------------------- */

static const char *const run_status_names[] = {"unknown", "active", "finished", "errored"};
static const char *const result_names[] = {NULL, "accepted", "duplicate", "rejected"};
static const char *const scope_names[] = {NULL, "run", "thread", "all"};
static const char *const outcome_names[] = {
    [AB_OUTCOME_SUCCESS] = "success",
    [AB_OUTCOME_INTERRUPT] = "interrupt",
    [AB_OUTCOME_CANCELLED] = "cancelled",
};

LIST_IO(ab_run_ref_t, runref)
LIST_IO(ab_head_t, head)
LIST_IO(ab_result_t, result)

/* ---- nested objects ----------------------------------------------------- */

static const ab_fspec_t runref_fields[] = {
    ID("thread", offsetof(ab_run_ref_t, thread)),
    ID("run", offsetof(ab_run_ref_t, run)),
};
static const ab_ospec_t runref_spec =
    SPECX(runref_fields, sizeof(ab_run_ref_t), .store = runref_store, .load = runref_load);

#define HD(m) offsetof(ab_head_t, m)
static const ab_fspec_t head_fields[] = {
    ID("thread", HD(thread)),
    ID("run", HD(run)),
    U64("last_seq", HD(last_seq), REQ),
    U64("epoch", HD(epoch), REQ),
    {.key = "status",
     .type = &ab__ft_enum,
     .off = HD(status),
     .flags = REQ,
     NAMES(run_status_names)},
    {.key = "outcome", .type = &ab__ft_enum, .off = HD(outcome), NAMES(outcome_names)},
    U64("last_pos", HD(last_pos), REQ),
    {.key = "orphaned", .type = &ab__ft_bool, .off = HD(orphaned)},
};
static const ab_ospec_t head_spec =
    SPECX(head_fields, sizeof(ab_head_t), .store = head_store, .load = head_load);

/* pos iff accepted/duplicate; error iff rejected. */
static ab_status_t result_check(ab_cctx_t *c, const char *base)
{
    const ab_result_t *r = (const ab_result_t *)(const void *)base;
    bool rejected = r->status == AB_RESULT_REJECTED;
    const char *key = NULL, *msg = NULL;
    if (!rejected && r->pos == 0)
        key = "pos", msg = "is required unless the status is rejected";
    else if (!rejected && r->error)
        key = "error", msg = "is only allowed when the status is rejected";
    else if (rejected && !r->error)
        key = "error", msg = "is required when the status is rejected";
    else if (rejected && r->pos)
        key = "pos", msg = "is not allowed when the status is rejected";
    if (!key)
        return AB_OK;
    ab__cc_push_key(c, key, strlen(key));
    return ab__cc_fail(c, c->bad, "%s %s", ab__cc_field(c), msg);
}

#define RS(m) offsetof(ab_result_t, m)
static const ab_fspec_t result_fields[] = {
    U64("seq", RS(seq), REQ),
    {.key = "status", .type = &ab__ft_enum, .off = RS(status), .flags = REQ, NAMES(result_names)},
    U64("pos", RS(pos), MIN1),
    {.key = "error", .type = &ab__ft_error, .off = RS(error)},
};
/*
 * A `published` reply carries one result per event, so the common result
 * (accepted or duplicate, with a position, no error) skips the generic walk:
 * the same map {seq, status, pos} from the same msgpack calls, so the same
 * bytes, without the path bookkeeping kept for error messages. Anything the
 * walk could reject or encode differently (seq 0, values above INT64_MAX,
 * rejections) still takes the walk.
 */
static int result_fast(ab_cctx_t *c, const char *base)
{
    const ab_result_t *r = (const ab_result_t *)(const void *)base;
    if ((r->status != AB_RESULT_ACCEPTED && r->status != AB_RESULT_DUPLICATE) || r->error ||
        r->seq == 0 || r->seq > (uint64_t)INT64_MAX || r->pos == 0 || r->pos > (uint64_t)INT64_MAX)
        return -1;
    const char *name = result_names[r->status];
    ab_status_t rc = ab__cc_pk(c, msgpack_pack_map(&c->pk, 3));
    if (rc == AB_OK)
        rc = ab__cc_pack_str(c, "seq", 3);
    if (rc == AB_OK)
        rc = ab__cc_pk(c, msgpack_pack_uint64(&c->pk, r->seq));
    if (rc == AB_OK)
        rc = ab__cc_pack_str(c, "status", 6);
    if (rc == AB_OK)
        rc = ab__cc_pack_str(c, name, strlen(name));
    if (rc == AB_OK)
        rc = ab__cc_pack_str(c, "pos", 3);
    if (rc == AB_OK)
        rc = ab__cc_pk(c, msgpack_pack_uint64(&c->pk, r->pos));
    return (int)rc;
}

static const ab_ospec_t result_spec =
    SPECX(result_fields, sizeof(ab_result_t), .check = result_check, .store = result_store,
          .load = result_load, .fast_enc = result_fast);

#define LM(m)                                                                                      \
    {                                                                                              \
        .key = #m, .type = &ab__ft_u32, .off = offsetof(ab_limits_t, m), .flags = REQ | MIN1       \
    }
/* Added after the first seven: optional when decoding, so a client still
 * talks to a broker that predates them (PROTOCOL.md 7.2); always sent. */
#define LMO(m)                                                                                     \
    {                                                                                              \
        .key = #m, .type = &ab__ft_u32, .off = offsetof(ab_limits_t, m), .flags = MIN1             \
    }
static const ab_fspec_t limits_fields[] = {
    LM(max_event_bytes),   LM(max_depth),          LM(max_id_bytes),
    LM(max_batch),         LM(max_header_bytes),   LM(max_inflight),
    LM(max_replay_window), LMO(max_publish_bytes), LMO(max_replay_bytes),
};
static const ab_ospec_t limits_spec = SPEC(limits_fields, sizeof(ab_limits_t));

/* ---- one table per op --------------------------------------------------- */

static const ab_fspec_t hello_f[] = {
    F_OP,
    F_VOPT,
    F_CID,
    {.key = "versions",
     .type = &ab__ft_versions,
     .off = M(u.hello.versions),
     .off_n = M(u.hello.nversions),
     .flags = REQ | MIN1,
     .max = AB_MAX_VERSIONS},
    STR("client", M(u.hello.client), 0, AB_CLIENT_NAME_MAX),
    {.key = "caps", .type = &ab__ft_caps, .off = M(u.hello.caps), .off_n = M(u.hello.ncaps)},
};
static const ab_fspec_t welcome_f[] = {
    HDR,
    STR("instance", M(u.welcome.instance), REQ | MIN1, 0),
    STR("event_endpoint", M(u.welcome.event_endpoint), REQ | MIN1, 0),
    {.key = "limits",
     .type = &ab__ft_obj,
     .off = M(u.welcome.limits),
     .flags = REQ,
     .sub = &limits_spec},
    {.key = "caps",
     .type = &ab__ft_caps,
     .off = M(u.welcome.caps),
     .off_n = M(u.welcome.ncaps),
     .flags = REQ},
    ANY("access", M(u.welcome.access)),
};
static const ab_fspec_t claim_f[] = {HDR, ID("thread", M(u.claim.thread)),
                                     ID("run", M(u.claim.run))};
static const ab_fspec_t claimed_f[] = {
    HDR,
    ID("thread", M(u.claimed.thread)),
    ID("run", M(u.claimed.run)),
    U64("epoch", M(u.claimed.epoch), REQ | MIN1),
    U64("last_seq", M(u.claimed.last_seq), REQ),
    {.key = "status",
     .type = &ab__ft_enum,
     .off = M(u.claimed.status),
     .flags = REQ,
     NAMES(run_status_names)},
};
static const ab_fspec_t publish_f[] = {
    HDR,
    {.key = "count",
     .type = &ab__ft_u32,
     .off = M(u.publish.count),
     .flags = REQ | MIN1,
     .lim = AB_LIM_BATCH},
    {.key = "packed", .type = &ab__ft_bool, .off = M(u.publish.packed)}};
static const ab_fspec_t published_f[] = {HDR,
                                         {.key = "results",
                                          .type = &ab__ft_list,
                                          .off = M(u.published.results),
                                          .off_n = M(u.published.nresults),
                                          .flags = REQ | MIN1,
                                          .lim = AB_LIM_BATCH,
                                          .sub = &result_spec}};
static const ab_fspec_t heads_runs_f[] = {HDR,
                                          {.key = "runs",
                                           .type = &ab__ft_list,
                                           .off = M(u.heads.runs),
                                           .off_n = M(u.heads.nruns),
                                           .flags = REQ | MIN1,
                                           .lim = AB_LIM_BATCH,
                                           .sub = &runref_spec}};
static const ab_fspec_t heads_thread_f[] = {HDR, ID("thread", M(u.heads.thread))};
#define HEADS_LIST(o, n)                                                                           \
    {                                                                                              \
        .key = "heads", .type = &ab__ft_list, .off = (o), .off_n = (n), .flags = REQ,              \
        .sub = &head_spec                                                                          \
    }
static const ab_fspec_t heads_reply_f[] = {
    HDR, U64("head_pos", M(u.heads_reply.head_pos), REQ),
    HEADS_LIST(M(u.heads_reply.heads), M(u.heads_reply.nheads))};
#define REPLAY_HDR                                                                                 \
    HDR,                                                                                           \
        {.key = "scope",                                                                           \
         .type = &ab__ft_enum,                                                                     \
         .off = M(u.replay.scope),                                                                 \
         .flags = REQ,                                                                             \
         NAMES(scope_names)},                                                                      \
        {.key = "window",                                                                          \
         .type = &ab__ft_u32,                                                                      \
         .off = M(u.replay.window),                                                                \
         .flags = REQ | MIN1,                                                                      \
         .lim = AB_LIM_REPLAY_WINDOW},                                                             \
        {.key = "chunk_events",                                                                    \
         .type = &ab__ft_u32,                                                                      \
         .off = M(u.replay.chunk_events),                                                          \
         .flags = MIN1,                                                                            \
         .max = AB_CHUNK_EVENTS_MAX},                                                              \
    {                                                                                              \
        .key = "window_bytes", .type = &ab__ft_u32, .off = M(u.replay.window_bytes),               \
        .flags = MIN1, .lim = AB_LIM_REPLAY_BYTES                                                  \
    }
static const ab_fspec_t replay_run_f[] = {REPLAY_HDR, ID("thread", M(u.replay.thread)),
                                          ID("run", M(u.replay.run)),
                                          U64("after_seq", M(u.replay.after_seq), REQ)};
static const ab_fspec_t replay_thread_f[] = {REPLAY_HDR,
                                             ID("thread", M(u.replay.thread)),
                                             {.key = "cursors",
                                              .type = &ab__ft_cursors,
                                              .off = M(u.replay.cursors),
                                              .off_n = M(u.replay.ncursors),
                                              .flags = REQ,
                                              .lim = AB_LIM_BATCH},
                                             /* optional (0 = absent): rows with pos > it */
                                             U64("after_pos", M(u.replay.after_pos), 0)};
static const ab_fspec_t replay_all_f[] = {REPLAY_HDR, U64("after_pos", M(u.replay.after_pos), REQ)};
static const ab_fspec_t credit_f[] = {
    HDR, {.key = "chunks", .type = &ab__ft_u32, .off = M(u.credit.chunks), .flags = REQ | MIN1}};
static const ab_fspec_t replay_chunk_f[] = {HDR,
                                            {.key = "count",
                                             .type = &ab__ft_u32,
                                             .off = M(u.replay_chunk.count),
                                             .flags = REQ | MIN1,
                                             .max = AB_CHUNK_EVENTS_MAX},
                                            {.key = "bytes",
                                             .type = &ab__ft_u64,
                                             .off = M(u.replay_chunk.bytes),
                                             .flags = REQ | MIN1,
                                             .max = AB_CHUNK_BYTES_MAX,
                                             .lim = AB_LIM_CHUNK_BYTES}};
static const ab_fspec_t replay_end_f[] = {
    HDR, U64("head_pos", M(u.replay_end.head_pos), REQ), U64("events", M(u.replay_end.events), REQ),
    HEADS_LIST(M(u.replay_end.heads), M(u.replay_end.nheads))};
static const ab_fspec_t bare_f[] = {HDR}; /* cancel, ping */
static const ab_fspec_t snapshot_f[] = {HDR, ID("thread", M(u.snapshot.thread))};

/* snapshot_reply.snapshot: any map; encoded from snapshot_mp (pre-encoded) when that is set. */
static const ab_snapshot_reply_t *snap_reply(const ab_fspec_t *f, const char *base)
{
    return (const void *)(base + f->off - offsetof(ab_snapshot_reply_t, snapshot));
}

static ab_status_t snapmap_enc(ab_cctx_t *c, const ab_fspec_t *f, const char *base)
{
    const ab_snapshot_reply_t *r = snap_reply(f, base);
    if (r->snapshot_mp == NULL)
        return ab__ft_anymap.enc(c, f, base);
    uint8_t t = r->snapshot_mp_len > 0 ? r->snapshot_mp[0] : 0;
    if ((t & 0xf0) != 0x80 && t != 0xde && t != 0xdf)
        return ab__cc_fail(c, c->bad, "snapshot_mp is not a msgpack map");
    if (c->pk.callback(c->pk.data, (const char *)r->snapshot_mp, r->snapshot_mp_len) != 0)
        return ab__cc_fail(c, AB_NOMEM, "out of memory encoding the snapshot");
    return AB_OK;
}

static bool snapmap_has(const ab_fspec_t *f, const char *base)
{
    return snap_reply(f, base)->snapshot_mp != NULL || ab__ft_anymap.has(f, base);
}

static ab_status_t snapmap_dec(ab_cctx_t *c, const ab_fspec_t *f, const ab_val_t *v, char *base)
{
    return ab__ft_anymap.dec(c, f, v, base);
}

static bool snapmap_eq(const ab_fspec_t *f, const char *a, const char *b)
{
    return ab__ft_anymap.eq(f, a, b);
}

static const ab_ftype_t ab__ft_snapmap = {snapmap_dec, snapmap_enc, snapmap_has, snapmap_eq};

static const ab_fspec_t snapshot_reply_f[] = {HDR,
                                              ID("thread", M(u.snapshot_reply.thread)),
                                              {.key = "snapshot",
                                               .type = &ab__ft_snapmap,
                                               .off = M(u.snapshot_reply.snapshot),
                                               .flags = REQ}};
static const ab_fspec_t pong_f[] = {HDR, STR("instance", M(u.pong.instance), REQ | MIN1, 0),
                                    U64("head_pos", M(u.pong.head_pos), REQ)};
static const ab_fspec_t error_f[] = {
    F_OP,
    F_VOPT,
    F_CID,
    {.key = "error", .type = &ab__ft_error, .off = M(u.error.error), .flags = REQ}};
static const ab_fspec_t heartbeat_f[] = {
    F_OP,
    F_V,
    STR("instance", M(u.heartbeat.instance), REQ | MIN1, 0),
    U64("head_pos", M(u.heartbeat.head_pos), REQ),
    {.key = "time", .type = &ab__ft_i64, .off = M(u.heartbeat.time_us), .flags = REQ}};

/* ---- workers and actions (PROTOCOL.md 7.10, 7.11) ------------------------- */

static ab_status_t agents_distinct(ab_cctx_t *c, const ab_served_agent_t *a, size_t n);

static const ab_fspec_t served_agent_fields[] = {
    ID("name", offsetof(ab_served_agent_t, name)),
    {.key = "capacity",
     .type = &ab__ft_u32,
     .off = offsetof(ab_served_agent_t, capacity),
     .flags = REQ | MIN1,
     .max = AB_SERVE_CAPACITY_MAX},
    {.key = "actions",
     .type = &ab__ft_strlist,
     .off = offsetof(ab_served_agent_t, actions),
     .off_n = offsetof(ab_served_agent_t, nactions),
     .max = AB_SERVE_ACTIONS_MAX},
};
LIST_IO(ab_served_agent_t, served_agent)
static const ab_ospec_t served_agent_spec =
    SPECX(served_agent_fields, sizeof(ab_served_agent_t), .store = served_agent_store,
          .load = served_agent_load);
#define AGENTS(o, on)                                                                              \
    {                                                                                              \
        .key = "agents", .type = &ab__ft_list, .off = (o), .off_n = (on), .flags = REQ | MIN1,     \
        .max = AB_SERVE_AGENTS_MAX, .sub = &served_agent_spec                                      \
    }

static ab_status_t serve_check(ab_cctx_t *c, const char *base)
{
    const ab_serve_t *s = &((const ab_msg_t *)(const void *)base)->u.serve;
    if (s->lease_ms != 0 && (s->lease_ms < AB_LEASE_MS_MIN || s->lease_ms > AB_LEASE_MS_MAX)) {
        ab__cc_push_key(c, "lease_ms", 8);
        return ab__cc_fail(c, c->bad, "lease_ms must be %u ... %u, not %" PRIu32,
                           (unsigned)AB_LEASE_MS_MIN, (unsigned)AB_LEASE_MS_MAX, s->lease_ms);
    }
    return agents_distinct(c, s->agents, s->nagents);
}

static ab_status_t agents_distinct(ab_cctx_t *c, const ab_served_agent_t *a, size_t n)
{
    for (size_t i = 1; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (a[i].name.len == a[j].name.len &&
                memcmp(a[i].name.ptr, a[j].name.ptr, a[i].name.len) == 0) {
                ab__cc_push_key(c, "agents", 6);
                ab__cc_push_index(c, i);
                ab__cc_push_key(c, "name", 4);
                return ab__cc_fail(c, c->bad, "agent \"%.*s\" is named twice",
                                   (int)(a[i].name.len > 64 ? 64 : a[i].name.len), a[i].name.ptr);
            }
    return AB_OK;
}

static const ab_fspec_t serve_f[] = {
    HDR,
    STR("worker", M(u.serve.worker), REQ | MIN1, AB_WORKER_NAME_MAX),
    AGENTS(M(u.serve.agents), M(u.serve.nagents)),
    {.key = "lease_ms", .type = &ab__ft_u32, .off = M(u.serve.lease_ms)}};
static const ab_fspec_t served_f[] = {
    HDR,
    STR("worker_id", M(u.served.worker_id), REQ | MIN1, 64),
    {.key = "lease_ms", .type = &ab__ft_u32, .off = M(u.served.lease_ms), .flags = REQ | MIN1}};

static const ab_fspec_t worker_info_fields[] = {
    STR("worker_id", offsetof(ab_worker_info_t, worker_id), REQ | MIN1, 64),
    STR("worker", offsetof(ab_worker_info_t, worker), REQ | MIN1, AB_WORKER_NAME_MAX),
    AGENTS(offsetof(ab_worker_info_t, agents), offsetof(ab_worker_info_t, nagents)),
    {.key = "lease_ms",
     .type = &ab__ft_u32,
     .off = offsetof(ab_worker_info_t, lease_ms),
     .flags = REQ | MIN1},
    {.key = "idle_ms",
     .type = &ab__ft_u32,
     .off = offsetof(ab_worker_info_t, idle_ms),
     .flags = REQ},
    {.key = "calls", .type = &ab__ft_u32, .off = offsetof(ab_worker_info_t, calls), .flags = REQ},
};
LIST_IO(ab_worker_info_t, worker_info)
static const ab_ospec_t worker_info_spec =
    SPECX(worker_info_fields, sizeof(ab_worker_info_t), .store = worker_info_store,
          .load = worker_info_load);
static const ab_fspec_t workers_reply_f[] = {HDR,
                                             {.key = "workers",
                                              .type = &ab__ft_list,
                                              .off = M(u.workers_reply.workers),
                                              .off_n = M(u.workers_reply.nworkers),
                                              .flags = REQ,
                                              .max = AB_WORKERS_MAX,
                                              .sub = &worker_info_spec}};

static const ab_fspec_t invoke_action_f[] = {HDR,
                                             ID("agent", M(u.invoke_action.agent)),
                                             ACTION_ID("action", M(u.invoke_action.action)),
                                             ANY("payload", M(u.invoke_action.payload)),
                                             OPT_ID("thread", M(u.invoke_action.thread)),
                                             TIMEOUT(M(u.invoke_action.timeout_ms), MIN1)};
static const ab_fspec_t action_reply_f[] = {
    HDR, ID("agent", M(u.action_reply.agent)), ACTION_ID("action", M(u.action_reply.action)),
    STR("worker_id", M(u.action_reply.worker_id), REQ | MIN1, 64),
    ANY("result", M(u.action_reply.result))};
static const ab_fspec_t action_call_f[] = {HDR,
                                           U64("call", M(u.action_call.call), REQ | MIN1),
                                           ID("agent", M(u.action_call.agent)),
                                           ACTION_ID("action", M(u.action_call.action)),
                                           ANY("payload", M(u.action_call.payload)),
                                           OPT_ID("thread", M(u.action_call.thread)),
                                           TIMEOUT(M(u.action_call.timeout_ms), REQ | MIN1)};

static ab_status_t action_result_check(ab_cctx_t *c, const char *base)
{
    const ab_action_result_t *r = &((const ab_msg_t *)(const void *)base)->u.action_result;
    if (r->result && r->error) {
        ab__cc_push_key(c, "error", 5);
        return ab__cc_fail(c, c->bad, "action_result carries result or error, not both");
    }
    return AB_OK;
}

static const ab_fspec_t action_result_f[] = {
    HDR,
    U64("call", M(u.action_result.call), REQ | MIN1),
    ANY("result", M(u.action_result.result)),
    {.key = "error", .type = &ab__ft_error, .off = M(u.action_result.error)}};
static const ab_fspec_t action_ack_f[] = {
    HDR,
    U64("call", M(u.action_ack.call), REQ | MIN1),
    {.key = "delivered", .type = &ab__ft_bool, .off = M(u.action_ack.delivered), .flags = REQ}};

static const ab_ospec_t op_specs[AB_OP_COUNT_] = {
    [AB_OP_HELLO] = SPEC(hello_f, 0),
    [AB_OP_WELCOME] = SPEC(welcome_f, 0),
    [AB_OP_CLAIM] = SPEC(claim_f, 0),
    [AB_OP_CLAIMED] = SPEC(claimed_f, 0),
    [AB_OP_PUBLISH] = SPEC(publish_f, 0),
    [AB_OP_PUBLISHED] = SPEC(published_f, 0),
    [AB_OP_HEADS] = SPEC(heads_runs_f, 0),
    [AB_OP_HEADS_REPLY] = SPEC(heads_reply_f, 0),
    [AB_OP_REPLAY] = SPEC(replay_run_f, 0),
    [AB_OP_CREDIT] = SPEC(credit_f, 0),
    [AB_OP_REPLAY_CHUNK] = SPEC(replay_chunk_f, 0),
    [AB_OP_REPLAY_END] = SPEC(replay_end_f, 0),
    [AB_OP_CANCEL] = SPEC(bare_f, 0),
    [AB_OP_SNAPSHOT] = SPEC(snapshot_f, 0),
    [AB_OP_SNAPSHOT_REPLY] = SPEC(snapshot_reply_f, 0),
    [AB_OP_PING] = SPEC(bare_f, 0),
    [AB_OP_PONG] = SPEC(pong_f, 0),
    [AB_OP_ERROR] = SPEC(error_f, 0),
    [AB_OP_HEARTBEAT] = SPEC(heartbeat_f, 0),
    [AB_OP_SERVE] = SPECX(serve_f, 0, .check = serve_check),
    [AB_OP_SERVED] = SPEC(served_f, 0),
    [AB_OP_WORKERS] = SPEC(bare_f, 0),
    [AB_OP_WORKERS_REPLY] = SPEC(workers_reply_f, 0),
    [AB_OP_INVOKE_ACTION] = SPEC(invoke_action_f, 0),
    [AB_OP_ACTION_REPLY] = SPEC(action_reply_f, 0),
    [AB_OP_ACTION_CALL] = SPEC(action_call_f, 0),
    [AB_OP_ACTION_RESULT] = SPECX(action_result_f, 0, .check = action_result_check),
    [AB_OP_ACTION_ACK] = SPEC(action_ack_f, 0),
};
static const ab_ospec_t heads_thread_spec = SPEC(heads_thread_f, 0);
static const ab_ospec_t replay_specs[] = {
    [AB_REPLAY_RUN] = SPEC(replay_run_f, 0),
    [AB_REPLAY_THREAD] = SPEC(replay_thread_f, 0),
    [AB_REPLAY_ALL] = SPEC(replay_all_f, 0),
};

/* ---- choosing the table ------------------------------------------------- */

/* The table of a message in C form; NULL when its form is ambiguous. */
static const ab_ospec_t *spec_of(const ab_msg_t *m)
{
    if (m->op <= AB_OP_NONE_ || m->op >= AB_OP_COUNT_)
        return NULL;
    if (m->op >= AB_OP_START_RUN)
        return ab__dispatch_spec(m->op);
    if (m->op == AB_OP_REPLAY) {
        ab_replay_scope_t s = m->u.replay.scope;
        return s >= AB_REPLAY_RUN && s <= AB_REPLAY_ALL ? &replay_specs[s] : NULL;
    }
    if (m->op == AB_OP_HEADS && m->u.heads.thread.ptr)
        return m->u.heads.nruns ? NULL : &heads_thread_spec;
    return &op_specs[m->op];
}

static const ab_ospec_t *spec_for_encode(ab_cctx_t *c, const ab_msg_t *m)
{
    const ab_ospec_t *s = spec_of(m);
    if (s)
        return s;
    const char *key = m->op == AB_OP_REPLAY ? "scope" : m->op == AB_OP_HEADS ? "thread" : "op";
    ab__cc_push_key(c, key, strlen(key));
    if (m->op == AB_OP_HEADS)
        ab__cc_fail(c, c->bad, "heads takes exactly one of runs and thread");
    else if (m->op == AB_OP_REPLAY)
        ab__cc_fail(c, c->bad, "scope must be run, thread or all");
    else
        ab__cc_fail(c, c->bad, "op %d is not a message kind", (int)m->op);
    return NULL;
}

/* The table for a received header; the op is already known. */
static const ab_ospec_t *spec_for_decode(ab_cctx_t *c, ab_op_t op, const ab_val_t *root)
{
    if (op == AB_OP_HEADS) {
        const ab_val_t *runs = ab_val_get(root, "runs"), *thread = ab_val_get(root, "thread");
        if (runs && thread) {
            ab__cc_push_key(c, "thread", 6);
            ab__cc_fail(c, c->bad, "heads takes runs or thread, not both");
            return NULL;
        }
        return thread ? &heads_thread_spec : &op_specs[op];
    }
    if (op >= AB_OP_START_RUN)
        return ab__dispatch_spec(op);
    if (op != AB_OP_REPLAY)
        return &op_specs[op];
    const ab_val_t *scope = ab_val_get(root, "scope");
    for (int s = AB_REPLAY_RUN; scope && s <= AB_REPLAY_ALL; s++)
        if (ab_val_str_eq(scope, scope_names[s]))
            return &replay_specs[s];
    ab__cc_push_key(c, "scope", 5);
    if (!scope)
        ab__cc_fail(c, c->bad, "missing required field scope");
    else
        ab__cc_fail(c, c->bad, "scope must be one of run, thread, all");
    return NULL;
}

/* ---- decoding ----------------------------------------------------------- */

static ab_status_t decode_op(ab_cctx_t *c, const ab_val_t *root, ab_op_t *op)
{
    const ab_val_t *v = ab_val_get(root, "op");
    size_t mark = ab__cc_push_key(c, "op", 2);
    ab_status_t rc = AB_OK;
    if (!v)
        rc = ab__cc_fail(c, c->bad, "missing required field op");
    else if (v->type != AB_VAL_STR)
        rc = ab__cc_fail(c, c->bad, "op must be a string, not %s", ab_val_type_name(v->type));
    else if (ab_op_from_name(v->u.s, v->len, op) != AB_OK)
        rc = ab__cc_fail(c, AB_UNSUPPORTED, "unknown op \"%.*s\"", (int)(v->len > 64 ? 64 : v->len),
                         v->u.s);
    ab__cc_pop(c, mark);
    return rc;
}

static ab_status_t decode_header(ab_cctx_t *c, const ab_val_t *root, size_t len, ab_msg_t *m)
{
    const ab_val_t *cid = ab_val_get(root, "cid");
    if (cid && cid->type == AB_VAL_INT && cid->u.i >= 0)
        c->cid = (uint64_t)cid->u.i;
    ab_status_t rc = ab__cc_check_root(c, root);
    if (rc == AB_OK)
        rc = decode_op(c, root, &m->op);
    if (rc != AB_OK)
        return rc;
    if (ab_op_is_request(m->op) && len > c->lim->max_header_bytes) {
        if (!c->err || c->err->code != AB_OK)
            return AB_TOO_LARGE;
        ab__cc_fail(c, AB_TOO_LARGE, "%s header of %zu bytes exceeds the limit of %" PRIu32,
                    ab_op_name(m->op), len, c->lim->max_header_bytes);
        ab_error_detail_int(c->err, "limit", c->lim->max_header_bytes);
        ab_error_detail_int(c->err, "actual", (int64_t)len);
        return AB_TOO_LARGE;
    }
    const ab_ospec_t *s = spec_for_decode(c, m->op, root);
    if (!s)
        return c->bad;
    rc = ab__cc_dec_object(c, s, root, (char *)m);
    if (rc == AB_OK && m->op == AB_OP_REPLAY && m->u.replay.chunk_events == 0)
        m->u.replay.chunk_events = AB_CHUNK_EVENTS_DEFAULT;
    return rc;
}

ab_status_t ab_msg_decode(ab_doc_t *doc, const uint8_t *buf, size_t len, const ab_limits_t *limits,
                          ab_msg_t *out, ab_error_t *err)
{
    ab_limits_t lim = limits ? *limits : ab_limits_default();
    uint32_t max_bytes =
        lim.max_header_bytes > AB_MAX_REPLY_BYTES ? lim.max_header_bytes : AB_MAX_REPLY_BYTES;
    const ab_val_t *root = NULL;
    bool fresh = err && err->code == AB_OK;
    ab_status_t rc =
        ab_doc_parse(doc, buf, len, max_bytes, lim.max_depth, AB_INVALID_ENVELOPE, &root, err);
    if (rc != AB_OK) {
        ab__cc_fix_field(err);
        uint32_t v = 0;
        if (fresh)
            ab_msg_peek(buf, len, &err->cid, &v); /* a deep or trailing fault: still echo the cid */
        return rc;
    }
    ab_cctx_t c;
    ab__cc_init_decode(&c, doc, &lim, err);
    ab_msg_t m;
    memset(&m, 0, sizeof(m));
    rc = decode_header(&c, root, len, &m);
    if (rc != AB_OK) {
        if (fresh)
            err->cid = c.cid; /* so the error reply can echo it */
        return rc;
    }
    *out = m;
    return AB_OK;
}

/* ---- encoding and comparing --------------------------------------------- */

ab_status_t ab_msg_encode(const ab_msg_t *m, ab_buf_t *out, ab_error_t *err)
{
    ab_cctx_t c;
    ab__cc_init_encode(&c, out, err);
    const ab_ospec_t *s = spec_for_encode(&c, m);
    return s ? ab__cc_encode(s, m, out, err) : AB_INVALID_ARGUMENT;
}

bool ab_msg_equal(const ab_msg_t *a, const ab_msg_t *b)
{
    const ab_ospec_t *s = spec_of(a);
    return a->op == b->op && s && s == spec_of(b) &&
           ab__cc_eq_object(s, (const char *)a, (const char *)b);
}

ab_status_t ab_error_encode_reply(const ab_error_t *e, uint32_t v, ab_buf_t *out)
{
    if (!e)
        return AB_INVALID_ARGUMENT;
    ab_msg_t m;
    memset(&m, 0, sizeof(m));
    m.op = AB_OP_ERROR;
    m.v = v;
    m.cid = e->cid;
    m.u.error.error = e;
    return ab_msg_encode(&m, out, NULL);
}

/* ---- the model at the codec's edge --------------------------------------- */

ab_head_t ab_head_view(const ab_run_head_t *h)
{
    ab_head_t v = {
        .thread = {h->thread, strlen(h->thread)},
        .run = {h->run, strlen(h->run)},
        .last_seq = h->last_seq,
        .epoch = h->epoch,
        .status = h->status,
        .outcome = AB_OUTCOME_NONE,
        .last_pos = h->last_pos,
    };
    bool wire = h->outcome == AB_OUTCOME_SUCCESS || h->outcome == AB_OUTCOME_INTERRUPT ||
                h->outcome == AB_OUTCOME_CANCELLED;
    if (h->status == AB_RUN_STATUS_FINISHED)
        v.outcome = wire ? h->outcome : AB_OUTCOME_SUCCESS;
    return v;
}

ab_read_t ab_replay_read(const ab_replay_t *r, uint32_t limit)
{
    ab_read_t q = {.scope = r->scope, .limit = limit};
    if (r->scope == AB_REPLAY_RUN || r->scope == AB_REPLAY_THREAD)
        q.thread = r->thread;
    if (r->scope == AB_REPLAY_RUN) {
        q.run = r->run;
        q.after_seq = r->after_seq;
    }
    if (r->scope == AB_REPLAY_ALL || r->scope == AB_REPLAY_THREAD)
        q.after_pos = r->after_pos;
    return q;
}

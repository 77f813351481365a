/*
 * codec_dispatch.c - the headers of dispatch (agentbus/codec.h,
 * docs/PROTOCOL.md 7.12 - 7.16): start_run, resume_run and their
 * run_accepted; the broker's unsolicited assign and run_cancel and the
 * worker's decline; cancel_run, abandon_run and requests; and the ops
 * added after them: stats_reply, threads and threads_reply (7.18, 7.19).
 *
 * Invariants:
 *  1. The tables here follow the same rules as codec_cmd.c's (one table per
 *     op, the encoding order is the table's order); codec_cmd.c asks
 *     ab__dispatch_spec() for every op from AB_OP_START_RUN on (the
 *     dispatch ops, then stats and stats_reply, which came after them).
 *  2. The codec checks shapes only (ids, bounds, a map or an array where
 *     one is due). What an input or a resume list means is the broker's to
 *     judge (agui.h), with the thread's state at hand.
 */
#include "codec_spec.h"

#include <string.h>

_Static_assert(sizeof(ab_request_state_t) == sizeof(int), "enum size");
_Static_assert(sizeof(ab_if_busy_t) == sizeof(int), "enum size");
_Static_assert(sizeof(ab_cancel_outcome_t) == sizeof(int), "enum size");
_Static_assert(sizeof(ab_notice_kind_t) == sizeof(int), "enum size");

static const char *const state_names[] = {
    [AB_REQ_QUEUED] = "queued",       [AB_REQ_ASSIGNED] = "assigned", [AB_REQ_STARTED] = "started",
    [AB_REQ_CANCELLED] = "cancelled", [AB_REQ_ENDED] = "ended",
};
static const char *const busy_names[] = {
    [AB_IF_BUSY_ENQUEUE] = "enqueue",
    [AB_IF_BUSY_REJECT] = "reject",
    [AB_IF_BUSY_INTERRUPT] = "interrupt",
};
static const char *const outcome_names[] = {
    [AB_CANCEL_DEQUEUED] = "dequeued",
    [AB_CANCEL_DELIVERED] = "delivered",
    [AB_CANCEL_NO_OWNER] = "no_owner",
    [AB_CANCEL_ENDED] = "ended",
};

const char *ab_request_state_name(ab_request_state_t s)
{
    return s > AB_REQ_NONE && s <= AB_REQ_ENDED ? state_names[s] : "?";
}

#define ENUM(k, o, fl, n)                                                                          \
    {                                                                                              \
        .key = k, .type = &ab__ft_enum, .off = (o), .flags = (fl), NAMES(n)                        \
    }
#define MAP(k, o, fl)                                                                              \
    {                                                                                              \
        .key = k, .type = &ab__ft_anymap, .off = (o), .flags = (fl)                                \
    }
#define REASON(o) STR("reason", o, 0, AB_REASON_MAX)
#define KEY(o)    ID("key", o)

static const ab_fspec_t start_run_f[] = {
    HDR,
    ID("agent", M(u.start_run.agent)),
    ID("thread", M(u.start_run.thread)),
    OPT_ID("run", M(u.start_run.run)),
    MAP("input", M(u.start_run.input), REQ),
    KEY(M(u.start_run.key)),
    ENUM("if_busy", M(u.start_run.if_busy), 0, busy_names),
};
static const ab_fspec_t run_accepted_f[] = {
    HDR,
    U64("request", M(u.run_accepted.request), REQ | MIN1),
    ID("agent", M(u.run_accepted.agent)),
    ID("thread", M(u.run_accepted.thread)),
    ID("run", M(u.run_accepted.run)),
    ENUM("state", M(u.run_accepted.state), REQ, state_names),
    U64("position", M(u.run_accepted.position), REQ),
    {.key = "existing", .type = &ab__ft_bool, .off = M(u.run_accepted.existing), .flags = REQ},
};
static const ab_fspec_t assign_f[] = {
    HDR,
    U64("request", M(u.assign.request), REQ | MIN1),
    ID("agent", M(u.assign.agent)),
    ID("thread", M(u.assign.thread)),
    ID("run", M(u.assign.run)),
    MAP("input", M(u.assign.input), REQ),
    U64("epoch", M(u.assign.epoch), REQ | MIN1),
    {.key = "attempt", .type = &ab__ft_u32, .off = M(u.assign.attempt), .flags = REQ | MIN1},
};
static const ab_fspec_t decline_f[] = {
    HDR,
    U64("request", M(u.decline.request), REQ | MIN1),
    U64("epoch", M(u.decline.epoch), REQ | MIN1),
    REASON(M(u.decline.reason)),
};
static const ab_fspec_t declined_f[] = {
    HDR,
    U64("request", M(u.declined.request), REQ | MIN1),
    ENUM("state", M(u.declined.state), REQ, state_names),
};
static const ab_fspec_t cancel_run_f[] = {
    HDR,
    ID("thread", M(u.cancel_run.thread)),
    ID("run", M(u.cancel_run.run)),
    REASON(M(u.cancel_run.reason)),
};
static const ab_fspec_t cancel_reply_f[] = {
    HDR,
    ID("thread", M(u.cancel_reply.thread)),
    ID("run", M(u.cancel_reply.run)),
    ENUM("outcome", M(u.cancel_reply.outcome), REQ, outcome_names),
    U64("request", M(u.cancel_reply.request), MIN1),
};
static const ab_fspec_t run_cancel_f[] = {
    HDR,
    U64("request", M(u.run_cancel.request), REQ | MIN1),
    ID("thread", M(u.run_cancel.thread)),
    ID("run", M(u.run_cancel.run)),
    U64("epoch", M(u.run_cancel.epoch), REQ | MIN1),
    REASON(M(u.run_cancel.reason)),
};

static ab_status_t resume_run_check(ab_cctx_t *c, const char *base)
{
    const ab_resume_run_t *r = &((const ab_msg_t *)(const void *)base)->u.resume_run;
    if (r->resume->type == AB_VAL_ARRAY && r->resume->len > 0)
        return AB_OK;
    ab__cc_push_key(c, "resume", 6);
    if (r->resume->type != AB_VAL_ARRAY)
        return ab__cc_fail(c, c->bad, "resume must be an array of resume entries, not %s",
                           ab_val_type_name(r->resume->type));
    return ab__cc_fail(c, c->bad, "resume must answer at least one interrupt");
}

static const ab_fspec_t resume_run_f[] = {
    HDR,
    ID("thread", M(u.resume_run.thread)),
    ID("run", M(u.resume_run.run)),
    {.key = "resume", .type = &ab__ft_any, .off = M(u.resume_run.resume), .flags = REQ},
    KEY(M(u.resume_run.key)),
    OPT_ID("agent", M(u.resume_run.agent)),
    OPT_ID("new_run", M(u.resume_run.new_run)),
    MAP("input", M(u.resume_run.input), 0),
};
static const ab_fspec_t abandon_run_f[] = {
    HDR,
    ID("thread", M(u.abandon_run.thread)),
    ID("run", M(u.abandon_run.run)),
    REASON(M(u.abandon_run.reason)),
};
static const ab_fspec_t abandoned_f[] = {
    HDR,
    ID("thread", M(u.abandoned.thread)),
    ID("run", M(u.abandoned.run)),
    U64("seq", M(u.abandoned.seq), REQ | MIN1),
    U64("pos", M(u.abandoned.pos), REQ | MIN1),
};
static const ab_fspec_t requests_f[] = {
    HDR,
    ENUM("state", M(u.requests.state), 0, state_names),
    OPT_ID("agent", M(u.requests.agent)),
    U64("after", M(u.requests.after), 0),
    {.key = "limit",
     .type = &ab__ft_u32,
     .off = M(u.requests.limit),
     .flags = MIN1,
     .max = AB_REQUESTS_LIMIT_MAX},
};

static const ab_fspec_t request_info_fields[] = {
    U64("request", offsetof(ab_request_info_t, request), REQ | MIN1),
    ID("agent", offsetof(ab_request_info_t, agent)),
    ID("thread", offsetof(ab_request_info_t, thread)),
    ID("run", offsetof(ab_request_info_t, run)),
    ENUM("state", offsetof(ab_request_info_t, state), REQ, state_names),
    STR("worker", offsetof(ab_request_info_t, worker), MIN1, AB_WORKER_NAME_MAX),
    U64("epoch", offsetof(ab_request_info_t, epoch), 0),
    {.key = "attempts",
     .type = &ab__ft_u32,
     .off = offsetof(ab_request_info_t, attempts),
     .flags = REQ},
    {.key = "orphaned",
     .type = &ab__ft_bool,
     .off = offsetof(ab_request_info_t, orphaned),
     .flags = REQ},
    {.key = "created_us",
     .type = &ab__ft_i64,
     .off = offsetof(ab_request_info_t, created_us),
     .flags = REQ},
};
LIST_IO(ab_request_info_t, request_info)
static const ab_ospec_t request_info_spec =
    SPECX(request_info_fields, sizeof(ab_request_info_t), .store = request_info_store,
          .load = request_info_load);
static const ab_fspec_t requests_reply_f[] = {
    HDR,
    {.key = "requests",
     .type = &ab__ft_list,
     .off = M(u.requests_reply.requests),
     .off_n = M(u.requests_reply.nrequests),
     .flags = REQ,
     .max = AB_REQUESTS_LIMIT_MAX,
     .sub = &request_info_spec},
    {.key = "more", .type = &ab__ft_bool, .off = M(u.requests_reply.more), .flags = REQ},
};

static const ab_fspec_t bare_f[] = {HDR}; /* leave, left */
static const char *const notice_names[] = {[AB_NOTICE_ORPHANED] = "orphaned"};
static const ab_fspec_t notice_f[] = {
    HDR,
    ENUM("kind", M(u.notice.kind), REQ, notice_names),
    ID("thread", M(u.notice.thread)),
    ID("run", M(u.notice.run)),
    U64("request", M(u.notice.request), MIN1),
    STR("worker", M(u.notice.worker), MIN1, AB_WORKER_NAME_MAX),
};

/* threads and threads_reply (not dispatch either: they came after stats) */
static const ab_fspec_t threads_f[] = {
    HDR,
    {.key = "after", .type = &ab__ft_id0, .off = M(u.threads.after)},
    {.key = "prefix", .type = &ab__ft_id0, .off = M(u.threads.prefix)},
    {.key = "limit",
     .type = &ab__ft_u32,
     .off = M(u.threads.limit),
     .flags = MIN1,
     .max = AB_THREADS_LIMIT_MAX},
};
static const ab_fspec_t thread_entry_fields[] = {
    ID("thread", offsetof(ab_thread_entry_t, thread)),
    U64("runs", offsetof(ab_thread_entry_t, runs), REQ),
    {.key = "active",
     .type = &ab__ft_bool,
     .off = offsetof(ab_thread_entry_t, active),
     .flags = REQ},
    ID("last_run", offsetof(ab_thread_entry_t, last_run)),
    U64("last_pos", offsetof(ab_thread_entry_t, last_pos), REQ | MIN1),
};
LIST_IO(ab_thread_entry_t, thread_entry)
static const ab_ospec_t thread_entry_spec =
    SPECX(thread_entry_fields, sizeof(ab_thread_entry_t), .store = thread_entry_store,
          .load = thread_entry_load);
static const ab_fspec_t threads_reply_f[] = {
    HDR,
    {.key = "threads",
     .type = &ab__ft_list,
     .off = M(u.threads_reply.threads),
     .off_n = M(u.threads_reply.nthreads),
     .flags = REQ,
     .max = AB_THREADS_LIMIT_MAX,
     .sub = &thread_entry_spec},
    OPT_ID("next", M(u.threads_reply.next)),
};

/* stats_reply (not dispatch, but after it in the op list: the table runs on) */
#define SU64(k) U64(#k, M(u.stats_reply.k), REQ)
#define OU64(k) U64(#k, M(u.stats_reply.k), 0) /* added later: optional */
static const ab_fspec_t stats_reply_f[] = {
    HDR,
    STR("instance", M(u.stats_reply.instance), REQ | MIN1, 0),
    STR("version", M(u.stats_reply.version), REQ | MIN1, 64),
    SU64(uptime_ms),
    SU64(head_pos),
    {.key = "store_known", .type = &ab__ft_bool, .off = M(u.stats_reply.store_known), .flags = REQ},
    SU64(runs_total),
    SU64(runs_active),
    SU64(store_bytes),
    SU64(wal_bytes),
    SU64(connections),
    SU64(subscribers),
    SU64(queue_events),
    SU64(queue_bytes),
    SU64(replays_open),
    SU64(commits),
    SU64(events),
    SU64(rejected),
    SU64(commits_per_s),
    SU64(events_per_s),
    SU64(commit_p50_us),
    SU64(commit_p90_us),
    SU64(commit_p99_us),
    SU64(commit_max_us),
    SU64(commit_window),
    {.key = "replicas_known", .type = &ab__ft_bool, .off = M(u.stats_reply.replicas_known)},
    OU64(replicas),
    OU64(replicas_sync),
    OU64(replica_lag_bytes),
    OU64(replica_lag_us),
};
#undef SU64
#undef OU64

static const ab_ospec_t specs[] = {
    [AB_OP_START_RUN - AB_OP_START_RUN] = SPEC(start_run_f, 0),
    [AB_OP_RUN_ACCEPTED - AB_OP_START_RUN] = SPEC(run_accepted_f, 0),
    [AB_OP_ASSIGN - AB_OP_START_RUN] = SPEC(assign_f, 0),
    [AB_OP_DECLINE - AB_OP_START_RUN] = SPEC(decline_f, 0),
    [AB_OP_DECLINED - AB_OP_START_RUN] = SPEC(declined_f, 0),
    [AB_OP_CANCEL_RUN - AB_OP_START_RUN] = SPEC(cancel_run_f, 0),
    [AB_OP_CANCEL_REPLY - AB_OP_START_RUN] = SPEC(cancel_reply_f, 0),
    [AB_OP_RUN_CANCEL - AB_OP_START_RUN] = SPEC(run_cancel_f, 0),
    [AB_OP_RESUME_RUN - AB_OP_START_RUN] = SPECX(resume_run_f, 0, .check = resume_run_check),
    [AB_OP_ABANDON_RUN - AB_OP_START_RUN] = SPEC(abandon_run_f, 0),
    [AB_OP_ABANDONED - AB_OP_START_RUN] = SPEC(abandoned_f, 0),
    [AB_OP_REQUESTS - AB_OP_START_RUN] = SPEC(requests_f, 0),
    [AB_OP_REQUESTS_REPLY - AB_OP_START_RUN] = SPEC(requests_reply_f, 0),
    [AB_OP_LEAVE - AB_OP_START_RUN] = SPEC(bare_f, 0),
    [AB_OP_LEFT - AB_OP_START_RUN] = SPEC(bare_f, 0),
    [AB_OP_NOTICE - AB_OP_START_RUN] = SPEC(notice_f, 0),
    [AB_OP_STATS - AB_OP_START_RUN] = SPEC(bare_f, 0),
    [AB_OP_STATS_REPLY - AB_OP_START_RUN] = SPEC(stats_reply_f, 0),
    [AB_OP_THREADS - AB_OP_START_RUN] = SPEC(threads_f, 0),
    [AB_OP_THREADS_REPLY - AB_OP_START_RUN] = SPEC(threads_reply_f, 0),
};
_Static_assert(sizeof(specs) / sizeof(specs[0]) == AB_OP_COUNT_ - AB_OP_START_RUN,
               "a table for every dispatch op");

const ab_ospec_t *ab__dispatch_spec(ab_op_t op)
{
    if (op < AB_OP_START_RUN || op >= AB_OP_COUNT_)
        return NULL;
    return &specs[op - AB_OP_START_RUN];
}

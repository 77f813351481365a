/*
 * conformance.h - `agentbus conformance ENDPOINT`: a suite of checks that a
 * broker implementing docs/PROTOCOL.md must pass, driven only through the
 * wire (the client library's DEALER connection, raw header frames on it, and
 * a SUB socket on the event endpoint the broker names in `welcome`).
 *
 * Layout: conformance.c (check table, runner, report; the command line is
 * cli/conformance_cmd.c),
 * conformance_util.c (ids, envelopes, publish, SUB socket, replay capture),
 * conformance_seq.c (negotiation, ordering, gap, duplicate, conflict),
 * conformance_errors.c (fencing, terminal runs, typed errors),
 * conformance_replay.c (replay seams), conformance_caps.c (heartbeats, flow
 * control, capabilities), conformance_cleanup.c (ending the runs left active).
 *
 * Invariants:
 *  1. Every check uses fresh thread/run ids (conf_id()), so the suite runs
 *     against a shared broker without disturbing it or being disturbed.
 *  2. Every wait is bounded: by --timeout per request, and by fixed bounds
 *     (heartbeat 3.5 s, silence checks 1 s) otherwise.
 *  3. The runner owns the per-check resources (connection, SUB socket) and
 *     frees them after each check, so a check may simply return conf_fail().
 *  4. A check runs only when the capabilities it needs were announced in
 *     `welcome` (available or degraded); otherwise it is SKIPped, naming one.
 */
#ifndef AB_CONFORMANCE_H
#define AB_CONFORMANCE_H

#include "agentbus/client.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Outcome of one check. */
typedef enum conf_result { CONF_PASS = 0, CONF_FAIL, CONF_SKIP } conf_result_t;

/** Bounds that do not come from --timeout. */
#define CONF_HEARTBEAT_MS 3500 /* a heartbeat must arrive within this (~3 s + slack) */
#define CONF_SILENCE_MS   1000 /* "nothing more arrives" is watched this long */

/** State of one suite run; the per-check fields are reset by the runner. */
typedef struct conf {
    const char *endpoint; /* command endpoint */
    bool json;            /* --json: one object per line */
    int timeout_ms;       /* bound of each request */
    char prefix[64];      /* unique per suite run: conf-<pid>-<time> */
    unsigned serial;      /* ids made so far */
    /* per check, owned by the runner */
    ab_conn_t *c;     /* the check's connection (hello done) */
    ab_doc_t *doc;    /* reply doc */
    ab_doc_t *tmp;    /* scratch doc (envelope decoding) */
    void *sub;        /* SUB socket, or NULL */
    char reason[512]; /* why the check failed or was skipped */
    /* every id conf_id() made, for the cleanup (conformance_cleanup.c) */
    char **ids;
    size_t nids, cap_ids;
} conf_t;

/* ---- the suite (conformance.c) ------------------------------------------- */

/** Number of checks, and the name of check @p i (NULL past the end). */
size_t conf_ncheck(void);
const char *conf_check_name(size_t i);
/** Whether @p name is a check. */
bool conf_check_known(const char *name);

/**
 * Run the checks named in @p only (all of them when @p nonly is 0) against
 * @p endpoint, each request bounded by @p timeout_ms; print a line per check
 * and the totals to stdout (with @p json, one JSON object per line:
 * {"check","result","reason"?}, then {"cleanup":{"ended","failed"}} and
 * {"passed","failed","skipped"}). @return 0 when none failed, else 1.
 */
int conf_run(const char *endpoint, int timeout_ms, char **only, int nonly, bool json);

/** A check: fills cf->reason on FAIL/SKIP. */
typedef conf_result_t (*conf_fn)(conf_t *cf);

/* ---- helpers (conformance_util.c) ---------------------------------------- */

/** Set cf->reason and return CONF_FAIL. */
conf_result_t conf_fail(conf_t *cf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** CONF_SKIP with "capability NAME not announced" unless NAME is available/degraded. */
conf_result_t conf_need(conf_t *cf, const char *cap);

/** Print @p s as a JSON string on stdout. */
void conf_json_str(const char *s);

/** Note an id the suite made (the cleanup asks for it as a thread). */
void conf_note_id(conf_t *cf, const char *id);

/** End every run the checks left active (a claim and a RUN_ERROR each); prints what it did. */
void conf_cleanup(conf_t *cf);

/** Write a fresh id "<prefix>-<tag>-<n>" into @p out (noted for the cleanup). */
void conf_id(conf_t *cf, char *out, size_t size, const char *tag);

/** Open another connection to the endpoint; NULL (reason set) on failure. */
ab_conn_t *conf_connect(conf_t *cf, const uint32_t *versions, size_t n, ab_error_t *err);

/** Body kinds of conf_envelope(). */
typedef enum conf_body {
    CONF_BODY_AUTO = 0, /* seq 1 RUN_STARTED, 2 TEXT_MESSAGE_START, then CONTENT */
    CONF_BODY_FINISH,   /* RUN_FINISHED */
    CONF_BODY_ALT,      /* a TEXT_MESSAGE_CONTENT differing from the AUTO one */
} conf_body_t;

/** Append the envelope of event @p seq of (thread, run) at @p epoch. -1 + reason on failure. */
int conf_envelope(conf_t *cf, ab_buf_t *out, const char *thread, const char *run, uint64_t seq,
                  uint64_t epoch, conf_body_t body);

/** Publish one envelope on @p c; *res receives its result (error copied to *rej). */
int conf_publish1(conf_t *cf, ab_conn_t *c, const ab_buf_t *env, ab_result_t *res, ab_error_t *rej);

/** Claim (thread, run) on @p c; *epoch receives the new epoch. */
int conf_claim(conf_t *cf, ab_conn_t *c, const char *thread, const char *run, uint64_t *epoch);

/** Send a raw header frame (a msgpack map already encoded) on cf->c's DEALER. */
int conf_send_raw(conf_t *cf, const ab_buf_t *header);

/** Open cf->sub on the event endpoint, subscribe to @p topic and "hb", wait for a heartbeat. */
int conf_sub_open(conf_t *cf, const void *topic, size_t len);

/**
 * Receive one message from cf->sub within @p ms. Returns 1 with its first
 * three frames copied into the buffers (@p body gets a live message's
 * records frame or the heartbeat map; @p extra a third frame, which neither
 * has), 0 on timeout, -1 on error. *nframes receives the frame count (2).
 */
int conf_sub_recv(conf_t *cf, int ms, ab_buf_t *topic, ab_buf_t *body, ab_buf_t *extra,
                  int *nframes);

/** Whether @p topic is the heartbeat topic "hb". */
bool conf_is_heartbeat(const ab_buf_t *topic);

/** A list of events (commit position + envelope bytes), sent or received. */
#define CONF_MAX_RECS 256
typedef struct conf_recs {
    size_t n;
    bool overflow;    /* more than CONF_MAX_RECS were offered */
    const char *only; /* when set, add() keeps only envelopes containing this id */
    uint64_t pos[CONF_MAX_RECS];
    size_t off[CONF_MAX_RECS], len[CONF_MAX_RECS];
    ab_buf_t bytes;
} conf_recs_t;

/** Append one event; -1 on allocation failure. */
int conf_recs_add(conf_recs_t *r, uint64_t pos, const uint8_t *env, size_t len);
/** True when @p needle occurs in the @p len bytes at @p hay. */
bool conf_contains(const uint8_t *hay, size_t len, const char *needle);
/** Index of the record with exactly these bytes, or -1. */
long conf_recs_find(const conf_recs_t *r, const uint8_t *env, size_t len);
void conf_recs_free(conf_recs_t *r);

/**
 * Replay @p req on cf->c to its end (the client grants credit chunk by
 * chunk), adding every record to @p out; *end receives `replay_end`.
 */
int conf_replay(conf_t *cf, const ab_msg_t *req, conf_recs_t *out, ab_replay_end_t *end);

/**
 * Publish events @p from..@p to (AUTO bodies) of (thread, run) at @p epoch,
 * one request each; each must be accepted with a position above the
 * previous one. Adds them to @p sent when not NULL.
 */
int conf_publish_range(conf_t *cf, const char *thread, const char *run, uint64_t epoch,
                       uint64_t from, uint64_t to, conf_recs_t *sent);

/* ---- checks ---------------------------------------------------------------- */
conf_result_t conf_check_version(conf_t *cf);
conf_result_t conf_check_ordering(conf_t *cf);
conf_result_t conf_check_gap(conf_t *cf);
conf_result_t conf_check_duplicate(conf_t *cf);
conf_result_t conf_check_conflict(conf_t *cf);
conf_result_t conf_check_fencing(conf_t *cf);
conf_result_t conf_check_terminal(conf_t *cf);
conf_result_t conf_check_errors(conf_t *cf);
conf_result_t conf_check_replay_run(conf_t *cf);
conf_result_t conf_check_replay_thread(conf_t *cf);
conf_result_t conf_check_replay_all(conf_t *cf);
conf_result_t conf_check_heartbeat(conf_t *cf);
conf_result_t conf_check_flow_control(conf_t *cf);
conf_result_t conf_check_unsupported(conf_t *cf);
conf_result_t conf_check_snapshots(conf_t *cf);
conf_result_t conf_check_actions(conf_t *cf);    /* conformance_actions.c */
conf_result_t conf_check_dispatch(conf_t *cf);   /* conformance_dispatch.c */
conf_result_t conf_check_cancel_run(conf_t *cf); /* conformance_dispatch.c */
conf_result_t conf_check_resume_run(conf_t *cf); /* conformance_dispatch.c */
conf_result_t conf_check_threads(conf_t *cf);    /* conformance_threads.c */

#endif

/*
 * runs.c - `agentbus runs`: the runs of a thread (--thread) or of the whole
 * bus, with status, outcome, head seq, epoch, commit position and the
 * commit times of the first and the terminal event, as a table or --json.
 *
 * Sources: `heads` gives status, outcome, last seq, epoch and last position.
 * The protocol has no "list every run" request and no run times, so:
 *  - without --thread the runs are found by a `replay` of scope `all` from
 *    position 0 (a scan of the whole store: meant for small buses and
 *    audits), then asked for with `heads` in batches of max_batch;
 *  - STARTED / ENDED are the broker's commit times (stamps) of seq 1 and of
 *    the terminal event, each read with a one-event `replay` of scope `run`.
 *
 * With --requests it lists the broker's run requests instead
 * (cli/requests_cmd.c).
 *
 * Invariants:
 *  1. Every request is bounded by --timeout.
 *  2. The run list holds each (thread, run) once, in order of first commit.
 */
#include "ab_common.h"
#include "agentbus/client.h"
#include "agentbus/json.h"
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ropts {
    const char *broker;
    const char *thread;
    bool json;
    long timeout_ms;
    bool requests; /* --requests: cli/requests_cmd.c lists them */
    const char *state, *agent;
};

struct run_row {
    char *thread;
    char *run;
    ab_head_t head;     /* strings replaced by thread/run above */
    int64_t started_us; /* 0 = unknown */
    int64_t ended_us;
};

struct rstate {
    struct ropts o;
    ab_conn_t *c;
    ab_doc_t *doc;
    ab_doc_t *edoc;
    struct run_row *rows;
    size_t nrows, cap;
    int64_t stamp_us; /* out of stamp_row() */
};

static void print_help(void)
{
    printf("usage: agentbus runs [--broker ENDPOINT] [--thread ID] [--json] [--timeout MS]\n"
           "       agentbus runs --requests [--state S] [--agent A] [--broker ENDPOINT] [--json]\n"
           "                     [--timeout MS]\n\n"
           "List runs with STATUS (active, finished, errored), OUTCOME (success, interrupt,\n"
           "cancelled, or -), SEQ (last committed seq), EPOCH (writer epoch), POS (commit\n"
           "position of the last event), STARTED and ENDED (broker commit times of the first\n"
           "and of the terminal event, UTC).\n\n"
           "options:\n"
           "  --broker ENDPOINT  the broker's command endpoint (default $AGENTBUS_BROKER, else\n"
           "                     " AB_DEFAULT_BROKER ")\n"
           "  --thread ID        the runs of this thread; without it, every run of the bus,\n"
           "                     found by scanning the whole store (for small buses and audits)\n"
           "  --json             one JSON object per run, one per line, instead of a table\n"
           "  --requests         list the broker's run requests instead (dispatch): the open ones\n"
           "                     (queued, assigned, started) with worker, attempts and age;\n"
           "                     started ones whose worker is gone are marked ORPHANED\n"
           "  --state S          with --requests: only state S (queued, assigned, started,\n"
           "                     cancelled, ended)\n"
           "  --agent A          with --requests: only the requests of agent A\n"
           "  --timeout MS       bound of each request (default 5000)\n"
           "  -h, --help         show this help\n");
}

static int parse_args(int argc, char **argv, struct ropts *o)
{
    static const struct option longopts[] = {
        {"broker", required_argument, NULL, 'b'},
        {"thread", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},
        {"timeout", required_argument, NULL, 'T'},
        {"requests", no_argument, NULL, 'R'},
        {"state", required_argument, NULL, 's'},
        {"agent", required_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = cli_getopt(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b': o->broker = optarg; break;
        case 't': o->thread = optarg; break;
        case 'j': o->json = true; break;
        case 'R': o->requests = true; break;
        case 's': o->state = optarg; break;
        case 'a': o->agent = optarg; break;
        case 'T':
            if (!cli_parse_long(optarg, 1, 3600000, &o->timeout_ms))
                return cli_usage_error("runs", "--timeout wants milliseconds, got '%s'", optarg);
            break;
        case 'h': print_help(); return -1;
        default: return cli_bad_option("runs", c);
        }
    }
    if (optind < argc)
        return cli_usage_error("runs", "unexpected argument '%s'", argv[optind]);
    if ((o->state || o->agent) && !o->requests)
        return cli_usage_error("runs", "--state and --agent go with --requests");
    if (o->requests && o->thread)
        return cli_usage_error("runs", "--requests lists requests of every thread (no --thread)");
    if (o->agent && cli_check_id("runs", "--agent", o->agent) != 0)
        return AB_EXIT_USAGE;
    if (o->thread && cli_check_id("runs", "--thread", o->thread) != 0)
        return AB_EXIT_USAGE;
    return cli_endpoint("runs", o->broker, &o->broker);
}

static int list_requests(const struct ropts *o)
{
    cli_requests_opts_t q = {o->broker, o->agent, AB_REQ_NONE, o->json, o->timeout_ms};
    if (o->state && cli_parse_request_state(o->state, &q.state) != 0)
        return cli_usage_error("runs",
                               "--state wants queued, assigned, started, cancelled or ended, got "
                               "'%s'",
                               o->state);
    return cli_list_requests(&q);
}

static char *dup_str(ab_str_t s)
{
    char *p = malloc(s.len + 1);
    if (p) {
        memcpy(p, s.ptr, s.len);
        p[s.len] = '\0';
    }
    return p;
}

static bool same(const char *a, ab_str_t b)
{
    return strlen(a) == b.len && memcmp(a, b.ptr, b.len) == 0;
}

/* Append (thread, run) unless listed (invariant 2). */
static ab_status_t add_run(struct rstate *st, ab_str_t thread, ab_str_t run, ab_error_t *err)
{
    for (size_t i = st->nrows; i-- > 0;)
        if (same(st->rows[i].run, run) && same(st->rows[i].thread, thread))
            return AB_OK;
    struct run_row *r = ab__grow(st->rows, &st->cap, st->nrows + 1, sizeof(*r), 16);
    if (!r)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    st->rows = r;
    struct run_row *row = &st->rows[st->nrows];
    memset(row, 0, sizeof(*row));
    row->thread = dup_str(thread);
    row->run = dup_str(run);
    if (!row->thread || !row->run) {
        free(row->thread);
        free(row->run);
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    }
    st->nrows++;
    return AB_OK;
}

static ab_status_t scan_row(void *ud, const ab_stamp_t *stamp, const uint8_t *ev, size_t len,
                            ab_error_t *err)
{
    (void)stamp;
    struct rstate *st = ud;
    ab_event_t e;
    ab_limits_t lim = ab__limits_stored(); /* events the broker stored */
    ab_status_t rc = ab_event_decode(st->edoc, ev, len, &lim, &e, err);
    return rc != AB_OK ? rc : add_run(st, e.thread, e.run, err);
}

/* Every run of the bus: replay scope all from position 0. */
static ab_status_t scan_bus(struct rstate *st, ab_error_t *err)
{
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay.scope = AB_REPLAY_ALL;
    return ab_conn_replay(st->c, &q, scan_row, st, st->doc, NULL, (int)st->o.timeout_ms, err);
}

static ab_status_t keep_heads(struct rstate *st, const ab_heads_reply_t *hr, size_t base,
                              ab_error_t *err)
{
    for (size_t i = 0; i < hr->nheads; i++) {
        if (base == SIZE_MAX) { /* thread mode: the reply is the list */
            ab_status_t rc = add_run(st, hr->heads[i].thread, hr->heads[i].run, err);
            if (rc != AB_OK)
                return rc;
            st->rows[st->nrows - 1].head = hr->heads[i];
        } else {
            st->rows[base + i].head = hr->heads[i];
        }
    }
    return AB_OK;
}

/* heads for the listed runs, max_batch at a time. */
static ab_status_t heads_of_rows(struct rstate *st, ab_error_t *err)
{
    size_t step = ab_conn_limits(st->c)->max_batch;
    ab_run_ref_t *refs = calloc(step ? step : 1, sizeof(*refs));
    if (!refs)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    ab_status_t rc = AB_OK;
    for (size_t i = 0; rc == AB_OK && i < st->nrows; i += step) {
        size_t n = st->nrows - i < step ? st->nrows - i : step;
        for (size_t k = 0; k < n; k++) {
            refs[k].thread = (ab_str_t){st->rows[i + k].thread, strlen(st->rows[i + k].thread)};
            refs[k].run = (ab_str_t){st->rows[i + k].run, strlen(st->rows[i + k].run)};
        }
        ab_heads_t q = {.runs = refs, .nruns = n};
        ab_heads_reply_t hr;
        rc = ab_conn_heads(st->c, &q, st->doc, &hr, (int)st->o.timeout_ms, err);
        if (rc == AB_OK && hr.nheads != n)
            rc = ab_error_set(err, AB_INVALID_ENVELOPE, "heads", "%zu heads for %zu runs",
                              hr.nheads, n);
        if (rc == AB_OK)
            rc = keep_heads(st, &hr, i, err);
    }
    free(refs);
    return rc;
}

static ab_status_t stamp_row(void *ud, const ab_stamp_t *stamp, const uint8_t *ev, size_t len,
                             ab_error_t *err)
{
    (void)ev;
    (void)len;
    (void)err;
    ((struct rstate *)ud)->stamp_us = stamp->time_us;
    return AB_REQUEST_ABORTED; /* one event is all we need: stop the stream */
}

/* Commit time of event @p seq of a run (0 when absent). */
static ab_status_t commit_time(struct rstate *st, const struct run_row *r, uint64_t seq,
                               int64_t *out, ab_error_t *err)
{
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay = (ab_replay_t){.scope = AB_REPLAY_RUN, .window = 1, .chunk_events = 1};
    q.u.replay.thread = (ab_str_t){r->thread, strlen(r->thread)};
    q.u.replay.run = (ab_str_t){r->run, strlen(r->run)};
    q.u.replay.after_seq = seq - 1;
    st->stamp_us = 0;
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t rc =
        ab_conn_replay(st->c, &q, stamp_row, st, st->doc, NULL, (int)st->o.timeout_ms, &e);
    if (rc != AB_OK && rc != AB_REQUEST_ABORTED) {
        if (err && err->code == AB_OK)
            *err = e;
        return rc;
    }
    *out = st->stamp_us;
    return AB_OK;
}

static ab_status_t fill_times(struct rstate *st, ab_error_t *err)
{
    for (size_t i = 0; i < st->nrows; i++) {
        struct run_row *r = &st->rows[i];
        if (r->head.last_seq == 0)
            continue;
        ab_status_t rc = commit_time(st, r, 1, &r->started_us, err);
        bool ended =
            r->head.status == AB_RUN_STATUS_FINISHED || r->head.status == AB_RUN_STATUS_ERRORED;
        if (rc == AB_OK && ended)
            rc = commit_time(st, r, r->head.last_seq, &r->ended_us, err);
        if (rc != AB_OK)
            return rc;
    }
    return AB_OK;
}

static const char *outcome_name(ab_agui_outcome_t o)
{
    switch (o) {
    case AB_OUTCOME_SUCCESS: return "success";
    case AB_OUTCOME_INTERRUPT: return "interrupt";
    case AB_OUTCOME_CANCELLED: return "cancelled";
    default: return NULL;
    }
}

/* ISO 8601 UTC with milliseconds, or "-" for 0. */
static const char *fmt_time(int64_t us, char *buf, size_t size)
{
    if (us == 0)
        return "-";
    time_t s = (time_t)(us / 1000000);
    struct tm tm;
    gmtime_r(&s, &tm);
    size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, size - n, ".%03dZ", (int)(us / 1000 % 1000));
    return buf;
}

static void print_row(const struct rstate *st, const struct run_row *r)
{
    char t1[40], t2[40];
    const char *oc = outcome_name(r->head.outcome);
    if (!oc && r->head.status == AB_RUN_STATUS_FINISHED)
        oc = "success"; /* stored before brokers filled it in: AG-UI reads an absent outcome as
                           success */
    const char *started = fmt_time(r->started_us, t1, sizeof(t1));
    const char *ended = fmt_time(r->ended_us, t2, sizeof(t2));
    if (!st->o.json) {
        printf("%-20s %-20s %-9s %-9s %8llu %6llu %8llu %-24s %s\n", r->thread, r->run,
               r->head.orphaned ? "ORPHANED" : ab_run_status_name(r->head.status), oc ? oc : "-",
               (unsigned long long)r->head.last_seq, (unsigned long long)r->head.epoch,
               (unsigned long long)r->head.last_pos, started, ended);
        return;
    }
    printf("{\"thread\":");
    cli_json_str(stdout, r->thread);
    printf(",\"run\":");
    cli_json_str(stdout, r->run);
    printf(",\"status\":\"%s\",%s\"outcome\":", ab_run_status_name(r->head.status),
           r->head.orphaned ? "\"orphaned\":true," : "");
    oc ? printf("\"%s\"", oc) : printf("null");
    printf(",\"seq\":%llu,\"epoch\":%llu,\"pos\":%llu,\"started\":",
           (unsigned long long)r->head.last_seq, (unsigned long long)r->head.epoch,
           (unsigned long long)r->head.last_pos);
    r->started_us ? printf("\"%s\"", started) : printf("null");
    printf(",\"ended\":");
    r->ended_us ? printf("\"%s\"", ended) : printf("null");
    printf("}\n");
}

static ab_status_t collect(struct rstate *st, ab_error_t *err)
{
    ab_conn_opts_t co = {.client_name = "agentbus-runs", .timeout_ms = (int)st->o.timeout_ms};
    ab_status_t rc = ab_conn_new(&st->c, st->o.broker, &co, err);
    if (rc != AB_OK)
        return rc;
    if (st->o.thread) {
        ab_heads_t q = {.thread = {st->o.thread, strlen(st->o.thread)}};
        ab_heads_reply_t hr;
        rc = ab_conn_heads(st->c, &q, st->doc, &hr, (int)st->o.timeout_ms, err);
        if (rc == AB_OK && hr.nheads == 0) /* as replay and snapshot answer it */
            rc = ab_error_set(err, AB_NOT_FOUND, "thread", "thread '%s' has no runs", st->o.thread);
        if (rc == AB_OK)
            rc = keep_heads(st, &hr, SIZE_MAX, err);
    } else {
        rc = scan_bus(st, err);
        if (rc == AB_OK)
            rc = heads_of_rows(st, err);
    }
    return rc == AB_OK ? fill_times(st, err) : rc;
}

int cmd_runs(int argc, char **argv)
{
    struct rstate st = {.o = {.timeout_ms = AB_CONN_TIMEOUT_DEFAULT}};
    int rc = parse_args(argc, argv, &st.o);
    if (rc != 0)
        return rc < 0 ? AB_EXIT_OK : rc;
    if (st.o.requests)
        return list_requests(&st.o);
    ab_error_t err = AB_ERROR_INIT;
    if (ab_doc_new(&st.doc) != AB_OK || ab_doc_new(&st.edoc) != AB_OK)
        ab_error_set(&err, AB_NOMEM, NULL, "out of memory");
    else
        (void)collect(&st, &err);
    if (err.code != AB_OK) {
        char buf[768];
        fprintf(stderr, "agentbus runs: %s\n", cli_error_text(&err, buf, sizeof(buf)));
        rc = AB_EXIT_FAIL;
    } else {
        if (!st.o.json)
            printf("%-20s %-20s %-9s %-9s %8s %6s %8s %-24s %s\n", "THREAD", "RUN", "STATUS",
                   "OUTCOME", "SEQ", "EPOCH", "POS", "STARTED", "ENDED");
        for (size_t i = 0; i < st.nrows; i++)
            print_row(&st, &st.rows[i]);
    }
    for (size_t i = 0; i < st.nrows; i++) {
        free(st.rows[i].thread);
        free(st.rows[i].run);
    }
    free(st.rows);
    ab_conn_destroy(&st.c);
    ab_doc_destroy(&st.doc);
    ab_doc_destroy(&st.edoc);
    return rc;
}

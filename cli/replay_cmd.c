/*
 * replay_cmd.c - `agentbus replay`: audit export of a run, a thread or the
 * whole bus from the store, as JSON Lines (the shape of `tail --json`),
 * through the credit-driven replay stream. --verify audits every run with
 * cli/replay_verify.c: its seqs are contiguous from 1, every event passes
 * the strict AG-UI check and the run lifecycle checker, and the run ends
 * with a terminal event (or is reported as still active). A verdict line
 * ends the report.
 *
 * Invariants:
 *  1. The audit is linear in the events and holds only the runs in
 *     progress (plus failed ones): see cli/replay_verify.c.
 *  2. The verifier's lookups (an event of a run it no longer holds) go over
 *     a second connection, opened on the first lookup, so the main stream's
 *     messages are never consumed by them.
 *  3. Exit status: 0 when every run verified (or the export succeeded, or
 *     standard output was closed at its other end: `replay --all | head -1`),
 *     1 on a failed run or a replay error, 2 on usage.
 *  4. Progress goes to stderr only (never into the export or the report on
 *     stdout), at most one line a second, when stderr is a terminal or with
 *     --progress; with progress on, a last line gives the totals.
 *  5. An export to FILE is written to a temporary file beside it, renamed
 *     over FILE only once the whole stream was read: a replay that fails
 *     (broker unreachable, thread not found, a replay error) leaves an
 *     earlier FILE as it was.
 */
#include "ab_common.h"
#include "agentbus/agui.h"
#include "agentbus/client.h"
#include "cli.h"
#include "render.h"
#include "replay_verify.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct ropts {
    const char *broker, *thread, *run, *path;
    bool all, verify, have_pos;
    int progress; /* -1 auto (stderr is a terminal), 0 off, 1 on */
    uint64_t after_pos;
};

struct rstate {
    struct ropts o;
    const char *endpoint;
    FILE *out; /* export, or NULL */
    char *tmp; /* FILE is written as this temporary, renamed to FILE on success (invariant 5) */
    bool done; /* the export is whole: the stream ended and found what was asked */
    bool gone; /* standard output was closed at its other end (EPIPE): stop, exit 0 */
    ab_doc_t *edoc;
    ab_buf_t line;
    verify_t *v;
    uint64_t rows;
    /* the lookups of the verifier: a second connection, opened when first needed */
    ab_conn_t *aux;
    ab_doc_t *adoc, *pdoc;
    /* progress (invariant 4) */
    bool progress;
    long t0_ms, last_ms;
    uint64_t last_rows;
};

static void print_help(void)
{
    printf("usage: agentbus replay [--broker E] (--thread T [--run R] | --all) [--after-pos P]\n"
           "                       [--verify] [--progress | --no-progress] [FILE|-]\n\n"
           "Export runs from the store as JSON Lines, one event per line:\n"
           "{thread,run,seq,epoch,ts,pos,time_us,event}, to FILE or standard output.\n\n"
           "options:\n"
           "  --broker E     command endpoint (default $AGENTBUS_BROKER or " AB_DEFAULT_BROKER ")\n"
           "  --thread T     the runs of thread T      --run R   only run R of thread T\n"
           "  --all          every run of the bus\n"
           "  --after-pos P  with --all: only events after commit position P\n"
           "  --verify       audit each run: contiguous from seq 1, valid AG-UI events, a legal\n"
           "                 lifecycle, ended by a terminal event (or reported still active);\n"
           "                 prints one line per run and a verdict, exit 1 on any failure.\n"
           "                 Without FILE nothing is exported.\n"
           "  --progress     a progress line on stderr every second, and a last one at the end\n"
           "                 (default when stderr is a terminal); --no-progress: never\n"
           "  -h, --help     show this help\n");
}

static int parse_args(int argc, char **argv, struct ropts *o)
{
    static const struct option lo[] = {
        {"broker", required_argument, NULL, 'b'},
        {"thread", required_argument, NULL, 't'},
        {"run", required_argument, NULL, 'r'},
        {"all", no_argument, NULL, 'a'},
        {"after-pos", required_argument, NULL, 'p'},
        {"verify", no_argument, NULL, 'v'},
        {"progress", no_argument, NULL, 'P'},
        {"no-progress", no_argument, NULL, 'N'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    o->progress = -1;
    while ((c = cli_getopt(argc, argv, ":h", lo, NULL)) != -1) {
        switch (c) {
        case 'b': o->broker = optarg; break;
        case 't': o->thread = optarg; break;
        case 'r': o->run = optarg; break;
        case 'a': o->all = true; break;
        case 'v': o->verify = true; break;
        case 'P': o->progress = 1; break;
        case 'N': o->progress = 0; break;
        case 'p':
            if (!cli_parse_u64(optarg, &o->after_pos))
                return cli_usage_error("replay", "--after-pos needs a number");
            o->have_pos = true;
            break;
        case 'h': print_help(); exit(AB_EXIT_OK);
        default: return cli_bad_option("replay", c);
        }
    }
    if (optind < argc)
        o->path = argv[optind++];
    if (optind < argc)
        return cli_usage_error("replay", "unexpected argument '%s'", argv[optind]);
    if (o->all == (o->thread != NULL))
        return cli_usage_error("replay", "give exactly one of --thread and --all");
    if (o->run && !o->thread)
        return cli_usage_error("replay", "--run needs --thread");
    if (o->have_pos && !o->all)
        return cli_usage_error("replay", "--after-pos goes with --all");
    if (o->have_pos && o->verify)
        return cli_usage_error("replay", "--verify checks whole runs: no --after-pos");
    if (o->thread && cli_check_id("replay", "--thread", o->thread) != 0)
        return AB_EXIT_USAGE;
    return o->run ? cli_check_id("replay", "--run", o->run) : AB_EXIT_OK;
}

/* One progress line on stderr (invariant 4). */
static void progress_line(struct rstate *rs, long now, bool last)
{
    long span = last ? now - rs->t0_ms : now - rs->last_ms;
    uint64_t n = last ? rs->rows : rs->rows - rs->last_rows;
    double rate = span > 0 ? (double)n * 1000.0 / (double)span : 0.0;
    fprintf(stderr, "agentbus replay: %s%llu events", last ? "done: " : "",
            (unsigned long long)rs->rows);
    if (rs->v) {
        verify_counts_t c = verify_counts(rs->v);
        fprintf(stderr, " verified, %llu runs (%zu held, at most %zu)", (unsigned long long)c.runs,
                c.held, c.held_max);
    }
    fprintf(stderr, ", %.0f events/s%s\n", rate, last ? " on average" : "");
    rs->last_ms = now;
    rs->last_rows = rs->rows;
}

static void progress_tick(struct rstate *rs)
{
    if (!rs->progress || (rs->rows & 1023) != 0)
        return;
    long now = ab__mono_ms();
    if (now - rs->last_ms >= 1000)
        progress_line(rs, now, false);
}

/* The lookup's row: the first event of the run from the wanted seq. */
struct prev_q {
    struct rstate *rs;
    uint64_t seq;
    verify_prev_t *out;
};

static ab_status_t prev_row(void *ud, const ab_stamp_t *st, const uint8_t *b, size_t len,
                            ab_error_t *err)
{
    (void)st;
    struct prev_q *q = ud;
    ab_event_t ev;
    ab_limits_t lim = ab__limits_stored(); /* events the broker stored */
    ab_status_t rc = ab_event_decode(q->rs->pdoc, b, len, &lim, &ev, err);
    if (rc != AB_OK)
        return rc;
    ab_agui_info_t in;
    ab_error_t verr = AB_ERROR_INIT;
    q->out->found = ev.seq == q->seq;
    q->out->type = ab_agui_validate(ev.body, AB_AGUI_STRICT, NULL, NULL, &in, &verr) == AB_OK
                       ? in.type
                       : AB_AGUI_UNKNOWN;
    return AB_REQUEST_ABORTED; /* one row is enough: the stream is cancelled */
}

/* verify_lookup_fn: event @p seq of a run, read on the second connection. */
static ab_status_t lookup(void *ud, ab_str_t thread, ab_str_t run, uint64_t seq, verify_prev_t *out,
                          ab_error_t *err)
{
    struct rstate *rs = ud;
    ab_status_t rc = AB_OK;
    if (!rs->aux) {
        ab_conn_opts_t co = {.client_name = "agentbus-replay"};
        rc = ab_conn_new(&rs->aux, rs->endpoint, &co, err);
        if (rc == AB_OK && !rs->adoc)
            rc = ab_doc_new(&rs->adoc);
        if (rc == AB_OK && !rs->pdoc)
            rc = ab_doc_new(&rs->pdoc);
        if (rc != AB_OK)
            return ab_error_set(err, rc, NULL, "out of memory");
    }
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay = (ab_replay_t){.scope = AB_REPLAY_RUN,
                               .window = 1,
                               .chunk_events = 1,
                               .thread = thread,
                               .run = run,
                               .after_seq = seq - 1};
    verify_prev_t got = {.found = false};
    struct prev_q pq = {rs, seq, &got};
    ab_error_t lerr = AB_ERROR_INIT;
    rc = ab_conn_replay(rs->aux, &q, prev_row, &pq, rs->adoc, NULL, 0, &lerr);
    if (rc != AB_OK && rc != AB_REQUEST_ABORTED) {
        *err = lerr;
        return rc;
    }
    *out = got;
    return AB_OK;
}

/* A failed write of the export: on standard output whose reader left, the end (invariant 3). */
static ab_status_t write_failed(struct rstate *rs, ab_error_t *err)
{
    if (rs->out == stdout && errno == EPIPE) {
        rs->gone = true;
        return AB_REQUEST_ABORTED; /* the stream is cancelled */
    }
    return ab_error_set(err, AB_IO, NULL, "write failed: %s", strerror(errno));
}

static ab_status_t on_row(void *ud, const ab_stamp_t *st, const uint8_t *b, size_t len,
                          ab_error_t *err)
{
    struct rstate *rs = ud;
    ab_event_t ev;
    ab_limits_t lim = ab__limits_stored(); /* events the broker stored */
    ab_status_t rc = ab_event_decode(rs->edoc, b, len, &lim, &ev, err);
    if (rc != AB_OK)
        return rc;
    rs->rows++;
    if (rs->out) {
        rs->line.len = 0;
        if (tail_json_line(&rs->line, &ev, st) != AB_OK)
            return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
        if (fwrite(rs->line.data, 1, rs->line.len, rs->out) != rs->line.len)
            return write_failed(rs, err);
    }
    if (rs->v && (rc = verify_event(rs->v, &ev, err)) != AB_OK)
        return rc;
    progress_tick(rs);
    return AB_OK;
}

static void build_request(const struct ropts *o, ab_msg_t *q)
{
    *q = (ab_msg_t){.op = AB_OP_REPLAY};
    ab_replay_t *r = &q->u.replay;
    if (o->all) {
        r->scope = AB_REPLAY_ALL;
        r->after_pos = o->after_pos;
        return;
    }
    r->thread = (ab_str_t){o->thread, strlen(o->thread)};
    r->scope = o->run ? AB_REPLAY_RUN : AB_REPLAY_THREAD;
    if (o->run)
        r->run = (ab_str_t){o->run, strlen(o->run)};
}

static int run_replay(struct rstate *rs, ab_conn_t *c)
{
    ab_msg_t q;
    build_request(&rs->o, &q);
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    FILE *to = rs->out == stdout ? stderr : stdout; /* the audit's lines */
    ab_status_t st = ab_doc_new(&doc);
    if (st == AB_OK)
        st = ab_doc_new(&rs->edoc);
    if (st == AB_OK && rs->o.verify)
        st = verify_new(&rs->v, to, lookup, rs);
    rs->t0_ms = rs->last_ms = ab__mono_ms();
    if (st == AB_OK)
        st = ab_conn_replay(c, &q, on_row, rs, doc, NULL, 0, &err);
    ab_doc_destroy(&doc);
    if (rs->gone || (rs->out == stdout && fflush(stdout) != 0 && errno == EPIPE))
        return AB_EXIT_OK;
    if (st != AB_OK) {
        fprintf(stderr, "agentbus replay: %s: %s\n", ab_status_name(st),
                err.code ? err.message : "out of memory");
        return AB_EXIT_FAIL;
    }
    if (rs->out && fflush(rs->out) != 0) {
        fprintf(stderr, "agentbus replay: write failed\n");
        return AB_EXIT_FAIL;
    }
    if (rs->progress)
        progress_line(rs, ab__mono_ms(), true);
    rs->done = rs->o.all || rs->rows > 0;
    if (!rs->done) { /* a thread or run read from its start: none such */
        if (rs->o.run)
            fprintf(stderr,
                    "agentbus replay: not_found: run '%s' of thread '%s' has no stored "
                    "events\n",
                    rs->o.run, rs->o.thread);
        else
            fprintf(stderr, "agentbus replay: not_found: thread '%s' has no stored events\n",
                    rs->o.thread);
        return AB_EXIT_FAIL;
    }
    if (!rs->v)
        return AB_EXIT_OK;
    return verify_finish(rs->v) ? AB_EXIT_FAIL : AB_EXIT_OK;
}

/* Open the export (invariant 5): standard output, or a temporary file beside FILE with
 * FILE's mode (a new one's: 0666 less the umask). @return 0, or -1 (printed). */
static int open_out(struct rstate *rs)
{
    const char *path = rs->o.path;
    if (path ? strcmp(path, "-") == 0 : !rs->o.verify) {
        rs->out = stdout;
        return 0;
    }
    if (!path)
        return 0;
    struct stat sb;
    mode_t mask = umask(0);
    umask(mask);
    mode_t mode = stat(path, &sb) == 0 ? (sb.st_mode & 07777) : (0666 & ~mask);
    size_t n = strlen(path) + sizeof ".tmp-XXXXXX";
    rs->tmp = malloc(n);
    int fd = -1;
    if (rs->tmp) {
        snprintf(rs->tmp, n, "%s.tmp-XXXXXX", path);
        fd = mkstemp(rs->tmp);
    }
    if (fd >= 0 && (fchmod(fd, mode) != 0 || (rs->out = fdopen(fd, "w")) == NULL)) {
        close(fd);
        unlink(rs->tmp);
    }
    if (rs->out)
        return 0;
    free(rs->tmp);
    rs->tmp = NULL;
    fprintf(stderr, "agentbus replay: cannot write %s\n", path);
    return -1;
}

/* Close the export: the temporary becomes FILE when the export is whole, else it goes.
 * @return @p rc, or AB_EXIT_FAIL when FILE could not be written. */
static int close_out(struct rstate *rs, int rc)
{
    if (!rs->out || rs->out == stdout)
        return rc;
    bool ok = fclose(rs->out) == 0 && rs->done;
    rs->out = NULL;
    if (rs->done && (!ok || rename(rs->tmp, rs->o.path) != 0)) {
        fprintf(stderr, "agentbus replay: cannot write %s\n", rs->o.path);
        ok = false;
        rc = AB_EXIT_FAIL;
    }
    if (!ok)
        unlink(rs->tmp);
    free(rs->tmp);
    rs->tmp = NULL;
    return rc;
}

static int free_state(struct rstate *rs, int rc)
{
    verify_destroy(&rs->v);
    ab_conn_destroy(&rs->aux);
    ab_doc_destroy(&rs->adoc);
    ab_doc_destroy(&rs->pdoc);
    ab_doc_destroy(&rs->edoc);
    ab_buf_free(&rs->line);
    return close_out(rs, rc);
}

int cmd_replay(int argc, char **argv)
{
    struct rstate rs = {.rows = 0};
    int rc = parse_args(argc, argv, &rs.o);
    if (rc != AB_EXIT_OK)
        return rc;
    rs.progress = rs.o.progress < 0 ? isatty(STDERR_FILENO) : rs.o.progress;
    if (open_out(&rs) != 0)
        return AB_EXIT_FAIL;
    rs.endpoint = cli_broker_endpoint(rs.o.broker);
    ab_conn_opts_t co = {.client_name = "agentbus-replay"};
    ab_conn_t *c = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_new(&c, rs.endpoint, &co, &err) != AB_OK) {
        fprintf(stderr, "agentbus replay: %s: %s: %s\n", rs.endpoint, ab_status_name(err.code),
                err.message);
        return free_state(&rs, AB_EXIT_FAIL);
    }
    rc = run_replay(&rs, c);
    ab_conn_destroy(&c);
    return free_state(&rs, rc);
}

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
 *  6. SIGINT/SIGTERM stop the export with exit 130: the handler removes the
 *     temporary (its path is stored before the handler can see it; unlink()
 *     is async-signal-safe) and sets a flag the stream checks at every event,
 *     so FILE is never left partial nor its temporary behind, and an earlier
 *     FILE stays as it was. The rename is made with both signals blocked.
 *     A second signal exits at once (130) without waiting for the next event,
 *     unless a handler was there before (the demo's audit calls cmd_replay):
 *     that one is put back at the end and given the signal that stopped us.
 */
#include "ab_common.h"
#include "agentbus/agui.h"
#include "agentbus/client.h"
#include "cli.h"
#include "follow.h" /* AB_EXIT_SIGNAL */
#include "render.h"
#include "replay_verify.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
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

/* Invariant 6: the first SIGINT/SIGTERM (its number); the temporary export while it may be
 * partial; whether a second signal may exit at once (no handler was there before us). */
static volatile sig_atomic_t replay_stop;
static const char *volatile replay_tmp;
static volatile sig_atomic_t replay_hard;
static struct sigaction was_int, was_term;

static void on_signal(int sig)
{
    if (replay_stop && replay_hard)
        _exit(AB_EXIT_SIGNAL);
    int saved = errno;
    replay_stop = sig;
    const char *tmp = replay_tmp;
    if (tmp)
        (void)unlink(tmp);
    errno = saved;
}

static bool plain(const struct sigaction *sa)
{
    return sa->sa_handler == SIG_DFL || sa->sa_handler == SIG_IGN;
}

static void catch_signals(void)
{
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    replay_stop = 0;
    sigaction(SIGINT, &sa, &was_int);
    sigaction(SIGTERM, &sa, &was_term);
    replay_hard = plain(&was_int) && plain(&was_term);
}

/* The handlers from before catch_signals() back; one of them gets the signal that stopped us.
 * Stopped with none before us, ours stay: the command ends with 130, and so does a second
 * signal that comes before it has. */
static void release_signals(void)
{
    if (replay_stop && replay_hard)
        return;
    sigaction(SIGINT, &was_int, NULL);
    sigaction(SIGTERM, &was_term, NULL);
    int sig = replay_stop;
    if (sig && !plain(sig == SIGINT ? &was_int : &was_term))
        raise(sig);
}

/* SIGINT and SIGTERM held back (@p block) or let through again, around the rename. */
static void hold_signals(bool block, sigset_t *old)
{
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    pthread_sigmask(block ? SIG_BLOCK : SIG_SETMASK, block ? &s : old, block ? old : NULL);
}

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
           "  -h, --help     show this help\n\n"
           "FILE is written as FILE.tmp-XXXXXX and renamed once whole. Exit status: 0, 1 on a\n"
           "failed run or a replay error, 2 on usage, 130 on SIGINT/SIGTERM (the temporary is\n"
           "removed; an earlier FILE stays as it was).\n");
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
    if (o->run && cli_check_id("replay", "--run", o->run) != 0)
        return AB_EXIT_USAGE;
    return cli_endpoint("replay", o->broker, &o->broker);
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
    if (replay_stop)
        return AB_REQUEST_ABORTED; /* invariant 6: the stream is cancelled */
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

/* Stopped by SIGINT/SIGTERM (invariant 6). @return AB_EXIT_SIGNAL. */
static int interrupted(const struct rstate *rs)
{
    fprintf(stderr, "agentbus replay: interrupted after %llu events%s%s\n",
            (unsigned long long)rs->rows, rs->tmp ? ": not written: " : "",
            rs->tmp ? rs->o.path : "");
    return AB_EXIT_SIGNAL;
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
    if (replay_stop)
        return interrupted(rs);
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
    if (rs->out) {
        replay_tmp = rs->tmp; /* invariant 6: the handler may remove it from now on */
        return 0;
    }
    free(rs->tmp);
    rs->tmp = NULL;
    fprintf(stderr, "agentbus replay: cannot write %s\n", path);
    return -1;
}

/* Close the export: the temporary becomes FILE when the export is whole and no signal
 * stopped it (invariant 6: decided and renamed with the signals held back), else it goes.
 * @return @p rc, AB_EXIT_FAIL when FILE could not be written, AB_EXIT_SIGNAL when stopped. */
static int close_out(struct rstate *rs, int rc)
{
    if (!rs->out || rs->out == stdout)
        return rc;
    sigset_t old;
    hold_signals(true, &old);
    bool stopped = replay_stop, whole = rs->done && !stopped;
    bool ok = fclose(rs->out) == 0 && whole;
    rs->out = NULL;
    if (whole && (!ok || rename(rs->tmp, rs->o.path) != 0)) {
        fprintf(stderr, "agentbus replay: cannot write %s\n", rs->o.path);
        ok = false;
        rc = AB_EXIT_FAIL;
    }
    if (!ok)
        unlink(rs->tmp);
    replay_tmp = NULL;
    hold_signals(false, &old);
    if (stopped && rc != AB_EXIT_SIGNAL)
        rc = interrupted(rs);
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

/* Open the export, connect, replay, close the export. @return the exit status. */
static int run_export(struct rstate *rs)
{
    if (open_out(rs) != 0)
        return AB_EXIT_FAIL;
    rs->endpoint = rs->o.broker;
    ab_conn_opts_t co = {.client_name = "agentbus-replay"};
    ab_conn_t *c = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_new(&c, rs->endpoint, &co, &err) != AB_OK) {
        fprintf(stderr, "agentbus replay: %s: %s: %s\n", rs->endpoint, ab_status_name(err.code),
                err.message);
        return free_state(rs, AB_EXIT_FAIL);
    }
    int rc = replay_stop ? interrupted(rs) : run_replay(rs, c);
    ab_conn_destroy(&c);
    return free_state(rs, rc);
}

int cmd_replay(int argc, char **argv)
{
    struct rstate rs = {.rows = 0};
    int rc = parse_args(argc, argv, &rs.o);
    if (rc != AB_EXIT_OK)
        return rc;
    rs.progress = rs.o.progress < 0 ? isatty(STDERR_FILENO) : rs.o.progress;
    catch_signals(); /* before the temporary exists (invariant 6) */
    rc = run_export(&rs);
    release_signals();
    return rc;
}

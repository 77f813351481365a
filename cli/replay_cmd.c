/*
 * replay_cmd.c - `agentbus replay`: audit export of a run, a thread or the
 * whole bus from the store, as JSON Lines (the shape of `tail --json`),
 * through the credit-driven replay stream. --verify audits every run: its
 * seqs are contiguous from 1, every event passes the strict AG-UI check and
 * the run lifecycle checker, and the run ends with a terminal event (or is
 * reported as still active). A verdict line ends the report.
 *
 * Invariants:
 *  1. The first failure of a run is kept and the run's later events are not
 *     judged (they would only repeat it); other runs go on being checked.
 *  2. A run's checker is freed when the run ends, so memory grows with the
 *     number of runs, not with their events.
 *  3. Exit status: 0 when every run verified (or the export succeeded),
 *     1 on a failed run or a replay error, 2 on usage.
 */
#ifdef AB_HAVE_CLIENT
#include "agentbus/agui.h"
#include "agentbus/client.h"
#include "cli.h"
#include "tail_render.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

struct ropts {
    const char *broker, *thread, *run, *path;
    bool all, verify, have_pos;
    uint64_t after_pos;
};

struct vrun {
    char *thread, *run;
    uint64_t events, next;
    ab_lifecycle_t *lc;
    ab_run_state_t state;
    ab_agui_outcome_t outcome;
    bool failed;
    char why[512];
};

struct rstate {
    struct ropts o;
    FILE *out; /* export, or NULL */
    ab_doc_t *edoc;
    ab_buf_t line;
    struct vrun *runs;
    size_t nruns, cap, last;
    uint64_t rows;
};

static void print_help(void)
{
    printf("usage: agentbus replay [--broker E] (--thread T [--run R] | --all) [--after-pos P]\n"
           "                       [--verify] [FILE|-]\n\n"
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
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'b': o->broker = optarg; break;
        case 't': o->thread = optarg; break;
        case 'r': o->run = optarg; break;
        case 'a': o->all = true; break;
        case 'v': o->verify = true; break;
        case 'p':
            if (!cli_parse_u64(optarg, &o->after_pos))
                return cli_usage_error("replay", "--after-pos needs a number");
            o->have_pos = true;
            break;
        case 'h': print_help(); exit(AB_EXIT_OK);
        default: return AB_EXIT_USAGE;
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
    return AB_EXIT_OK;
}

static struct vrun *find_run(struct rstate *rs, const ab_event_t *ev)
{
    for (size_t k = 0; k < rs->nruns; k++) {
        size_t i = (rs->last + k) % rs->nruns; /* runs interleave: start at the last hit */
        struct vrun *r = &rs->runs[i];
        if (strlen(r->thread) == ev->thread.len && strlen(r->run) == ev->run.len &&
            memcmp(r->thread, ev->thread.ptr, ev->thread.len) == 0 &&
            memcmp(r->run, ev->run.ptr, ev->run.len) == 0) {
            rs->last = i;
            return r;
        }
    }
    if (rs->nruns == rs->cap) {
        size_t cap = rs->cap ? rs->cap * 2 : 16;
        struct vrun *runs = realloc(rs->runs, cap * sizeof(*runs));
        if (!runs)
            return NULL;
        rs->runs = runs;
        rs->cap = cap;
    }
    struct vrun *r = &rs->runs[rs->nruns];
    memset(r, 0, sizeof(*r));
    r->thread = strndup(ev->thread.ptr, ev->thread.len);
    r->run = strndup(ev->run.ptr, ev->run.len);
    r->next = 1;
    if (!r->thread || !r->run ||
        ab_lifecycle_new(&r->lc, ev->thread.ptr, ev->thread.len, ev->run.ptr, ev->run.len, NULL) !=
            AB_OK) {
        free(r->thread);
        free(r->run);
        return NULL;
    }
    rs->last = rs->nruns++;
    return r;
}

static void fail_run(struct vrun *r, const char *what, const ab_error_t *err, uint64_t seq)
{
    r->failed = true;
    snprintf(r->why, sizeof(r->why), "%s at seq %llu: %s%s%s", what, (unsigned long long)seq,
             err->message, err->field[0] ? " at " : "", err->field);
    ab_lifecycle_destroy(&r->lc);
}

/* Judge one event of its run (invariants 1 and 2). */
static ab_status_t verify_event(struct rstate *rs, const ab_event_t *ev)
{
    struct vrun *r = find_run(rs, ev);
    if (!r)
        return AB_NOMEM;
    r->events++;
    if (r->failed)
        return AB_OK;
    ab_error_t err = AB_ERROR_INIT;
    if (ev->seq != r->next) {
        ab_error_set(&err, AB_GAP, NULL, "expected seq %llu", (unsigned long long)r->next);
        fail_run(r, "not contiguous", &err, ev->seq);
        return AB_OK;
    }
    r->next++;
    ab_agui_info_t in;
    if (ab_agui_validate(ev->body, AB_AGUI_STRICT, NULL, NULL, &in, &err) != AB_OK) {
        fail_run(r, "invalid event", &err, ev->seq);
        return AB_OK;
    }
    if (!r->lc || ab_lifecycle_check(r->lc, &in, &err) != AB_OK) {
        if (!r->lc)
            ab_error_set(&err, AB_RUN_TERMINAL, NULL, "event after the end of the run");
        fail_run(r, "lifecycle", &err, ev->seq);
        return AB_OK;
    }
    if (in.type == AB_AGUI_RUN_FINISHED)
        r->outcome = in.outcome;
    r->state = ab_lifecycle_state(r->lc);
    return AB_OK;
}

static ab_status_t on_row(void *ud, const ab_stamp_t *st, const uint8_t *b, size_t len,
                          ab_error_t *err)
{
    struct rstate *rs = ud;
    ab_event_t ev;
    ab_status_t rc = ab_event_decode(rs->edoc, b, len, NULL, &ev, err);
    if (rc != AB_OK)
        return rc;
    rs->rows++;
    if (rs->out) {
        rs->line.len = 0;
        if (tail_json_line(&rs->line, &ev, st) != AB_OK)
            return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
        if (fwrite(rs->line.data, 1, rs->line.len, rs->out) != rs->line.len)
            return ab_error_set(err, AB_IO, NULL, "write failed");
    }
    if (rs->o.verify && verify_event(rs, &ev) != AB_OK)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    return AB_OK;
}

static const char *outcome_name(ab_agui_outcome_t o)
{
    return o == AB_OUTCOME_INTERRUPT   ? "interrupt"
           : o == AB_OUTCOME_CANCELLED ? "cancelled"
                                       : "success";
}

/* One line per run and the verdict. @return the number of failed runs. */
static size_t report(struct rstate *rs, FILE *to)
{
    size_t ok = 0, failed = 0, active = 0;
    for (size_t i = 0; i < rs->nruns; i++) {
        struct vrun *r = &rs->runs[i];
        fprintf(to, "run %s/%s: %llu events, ", r->thread, r->run, (unsigned long long)r->events);
        if (r->failed) {
            fprintf(to, "FAILED: %s\n", r->why);
            failed++;
            continue;
        }
        fprintf(to, "seq 1..%llu, ", (unsigned long long)(r->next - 1));
        if (r->state == AB_RUN_FINISHED)
            fprintf(to, "finished (%s)\n", outcome_name(r->outcome));
        else if (r->state == AB_RUN_ERRORED)
            fprintf(to, "errored (RUN_ERROR)\n");
        else {
            fprintf(to, "still active\n");
            active++;
            continue;
        }
        ok++;
    }
    fprintf(to, "verified: %zu runs ok, %zu failed, %zu still active\n", ok, failed, active);
    return failed;
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
    ab_status_t st = ab_doc_new(&doc);
    if (st == AB_OK)
        st = ab_doc_new(&rs->edoc);
    if (st == AB_OK)
        st = ab_conn_replay(c, &q, on_row, rs, doc, NULL, 0, &err);
    ab_doc_destroy(&doc);
    if (st != AB_OK) {
        fprintf(stderr, "agentbus replay: %s: %s\n", ab_status_name(st), err.message);
        return AB_EXIT_FAIL;
    }
    if (rs->out && fflush(rs->out) != 0) {
        fprintf(stderr, "agentbus replay: write failed\n");
        return AB_EXIT_FAIL;
    }
    if (!rs->o.verify)
        return AB_EXIT_OK;
    FILE *to = rs->out == stdout ? stderr : stdout;
    return report(rs, to) ? AB_EXIT_FAIL : AB_EXIT_OK;
}

static void free_state(struct rstate *rs)
{
    for (size_t i = 0; i < rs->nruns; i++) {
        free(rs->runs[i].thread);
        free(rs->runs[i].run);
        ab_lifecycle_destroy(&rs->runs[i].lc);
    }
    free(rs->runs);
    ab_doc_destroy(&rs->edoc);
    ab_buf_free(&rs->line);
    if (rs->out && rs->out != stdout)
        fclose(rs->out);
}

int cmd_replay(int argc, char **argv)
{
    struct rstate rs = {.nruns = 0};
    int rc = parse_args(argc, argv, &rs.o);
    if (rc != AB_EXIT_OK)
        return rc;
    bool to_stdout = rs.o.path ? strcmp(rs.o.path, "-") == 0 : !rs.o.verify;
    rs.out = to_stdout ? stdout : rs.o.path ? fopen(rs.o.path, "w") : NULL;
    if (rs.o.path && !rs.out) {
        fprintf(stderr, "agentbus replay: cannot write %s\n", rs.o.path);
        return AB_EXIT_FAIL;
    }
    const char *ep = cli_broker_endpoint(rs.o.broker);
    ab_conn_opts_t co = {.client_name = "agentbus-replay"};
    ab_conn_t *c = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_new(&c, ep, &co, &err) != AB_OK) {
        fprintf(stderr, "agentbus replay: %s: %s: %s\n", ep, ab_status_name(err.code), err.message);
        free_state(&rs);
        return AB_EXIT_FAIL;
    }
    rc = run_replay(&rs, c);
    ab_conn_destroy(&c);
    free_state(&rs);
    return rc;
}
#else
typedef int ab_cli_replay_unused_t; /* built without the client library */
#endif

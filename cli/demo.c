/*
 * demo.c - `agentbus demo`: the whole fabric working with one command.
 * Starts a broker child (unless --broker names one), an observer (an
 * ab_sub_t on the demo's thread from its start, rendered by the observer
 * console's renderer), and N agent worker threads (cli/demo_agents.c) that
 * publish realistic AG-UI runs concurrently; then checks that the observer
 * delivered every acknowledged event exactly once, audits the thread with
 * `agentbus replay --verify` (the same code, cmd_replay()), prints a summary
 * and stops the broker.
 *
 * Invariants:
 *  1. Only the main thread writes to stdout (banner, observer, summary);
 *     with --json stdout carries the observer's JSON Lines only and the rest
 *     goes to stderr.
 *  2. Every wait is bounded: broker ready line and stop (cli/spawn.c),
 *     producer calls (their timeouts), the observer's catch-up (CATCHUP_MS).
 *  3. A broker child started here is stopped with SIGTERM before the
 *     command returns, also after SIGINT/SIGTERM; the process leaves nothing
 *     running behind.
 *  4. Exit status: 0 when every run completed with its intended outcome,
 *     every acknowledged event was observed exactly once and the audit
 *     passed; 1 with the reason otherwise (130 after SIGINT); 2 on usage.
 */
#ifdef AB_HAVE_CLIENT
#include "demo.h"
#include "agentbus/agui.h"
#include "agentbus/subscriber.h"
#include "cli.h"
#include "spawn.h"
#include "tail_render.h"

#include <getopt.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CATCHUP_MS 10000
#define MAX_AGENTS 32
#define MAX_RUNS   600

struct dopts {
    const char *broker, *data;
    int agents, runs, pace_ms;
    bool json, no_color;
};

struct demo {
    struct dopts o;
    char thread[80];
    demo_run_t *runs;
    int nruns;
    demo_agent_t agents[MAX_AGENTS];
    FILE *info; /* banner and summary: stdout, or stderr with --json */
    tail_view_t view;
    ab_buf_t line;
    uint64_t foreign; /* events of runs not in the plan */
    double t0, t1;
};

static volatile sig_atomic_t demo_stop;
static atomic_int agents_left;

static void on_signal(int sig)
{
    (void)sig;
    demo_stop = 1;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void print_help(void)
{
    printf("usage: agentbus demo [--broker E] [--data DIR] [--agents N] [--runs N] [--pace MS]\n"
           "                     [--json] [--no-color]\n\n"
           "Run a demo fabric: a broker, N agent workers publishing realistic AG-UI runs on one\n"
           "thread (text streaming, tool calls with results, state deltas, an interrupted run\n"
           "and its resumed run, a failed and a cancelled run) and an observer showing them\n"
           "live; then check exactly-once delivery, audit the thread (replay --verify) and\n"
           "print a summary. Exit 0 when everything checks out, 1 otherwise.\n\n"
           "options:\n"
           "  --broker E   use the broker at command endpoint E (default: start one; it gets\n"
           "               127.0.0.1 ephemeral ports and is stopped at the end)\n"
           "  --data DIR   data directory of the started broker (default ./agentbus-data)\n"
           "  --agents N   agent workers (default 3, at most %d)\n"
           "  --runs N     at least N runs, cycling planner, researcher, approval + resume,\n"
           "               failing, cancelled (default 6: one of each)\n"
           "  --pace MS    delay between an agent's events (default 40; 0 = flat out)\n"
           "  --json       observer events as JSON Lines on stdout (the rest on stderr)\n"
           "  --no-color   no colour (colour is used only on a terminal)\n"
           "  -h, --help   show this help\n",
           MAX_AGENTS);
}

static bool parse_int(const char *s, int lo, int hi, int *out)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (!*s || !end || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

static int parse_args(int argc, char **argv, struct dopts *o)
{
    static const struct option lo[] = {
        {"broker", required_argument, NULL, 'b'},
        {"data", required_argument, NULL, 'd'},
        {"agents", required_argument, NULL, 'a'},
        {"runs", required_argument, NULL, 'r'},
        {"pace", required_argument, NULL, 'p'},
        {"json", no_argument, NULL, 'j'},
        {"no-color", no_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'b': o->broker = optarg; break;
        case 'd': o->data = optarg; break;
        case 'a':
            if (!parse_int(optarg, 1, MAX_AGENTS, &o->agents))
                return cli_usage_error("demo", "--agents needs 1..%d", MAX_AGENTS);
            break;
        case 'r':
            if (!parse_int(optarg, 1, MAX_RUNS - 1, &o->runs))
                return cli_usage_error("demo", "--runs needs 1..%d", MAX_RUNS - 1);
            break;
        case 'p':
            if (!parse_int(optarg, 0, 10000, &o->pace_ms))
                return cli_usage_error("demo", "--pace needs 0..10000 milliseconds");
            break;
        case 'j': o->json = true; break;
        case 'n': o->no_color = true; break;
        case 'h': print_help(); exit(AB_EXIT_OK);
        default: return AB_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return cli_usage_error("demo", "unexpected argument '%s'", argv[optind]);
    if (o->broker && o->data)
        return cli_usage_error("demo", "--data is for the broker the demo starts (no --broker)");
    return AB_EXIT_OK;
}

/* The runs: kinds cycle; an approval is always followed by its resume, on
 * the same agent. Jobs (a run, or an approval + resume) go round-robin. */
static int make_plan(struct demo *d)
{
    d->runs = calloc(MAX_RUNS, sizeof(*d->runs));
    if (!d->runs)
        return -1;
    int job = 0;
    for (int k = 0; d->nruns < d->o.runs; k = (k + 1) % DEMO_NKINDS) {
        demo_run_t *r = &d->runs[d->nruns];
        r->kind = (demo_kind_t)k;
        r->agent = k == DEMO_RESUME ? d->runs[d->nruns - 1].agent : job++ % d->o.agents;
        snprintf(r->run, sizeof(r->run), "r%02d-%s", d->nruns + 1, demo_kind_name(r->kind));
        d->nruns++;
        if (k == DEMO_APPROVAL && d->nruns == d->o.runs)
            d->o.runs++; /* the approval's resume belongs to it */
    }
    return 0;
}

static int make_agents(struct demo *d, const char *ep)
{
    for (int a = 0; a < d->o.agents; a++) {
        demo_agent_t *ag = &d->agents[a];
        *ag = (demo_agent_t){.endpoint = ep,
                             .thread = d->thread,
                             .pace_ms = d->o.pace_ms,
                             .stop = &demo_stop,
                             .index = a};
        ag->runs = calloc((size_t)d->nruns, sizeof(*ag->runs));
        if (!ag->runs)
            return -1;
        for (int i = 0; i < d->nruns; i++)
            if (d->runs[i].agent == a)
                ag->runs[ag->nruns++] = &d->runs[i];
    }
    return 0;
}

static demo_run_t *find_run(struct demo *d, const ab_event_t *ev)
{
    for (int i = 0; i < d->nruns; i++)
        if (strlen(d->runs[i].run) == ev->run.len &&
            memcmp(d->runs[i].run, ev->run.ptr, ev->run.len) == 0)
            return &d->runs[i];
    return NULL;
}

/* Observer callback: count per run, check the order, render (invariant 1). */
static int on_event(void *ud, const ab_sub_event_t *e)
{
    struct demo *d = ud;
    demo_run_t *r = find_run(d, &e->ev);
    if (!r) {
        d->foreign++;
    } else {
        r->disorder |= e->ev.seq != r->last_seq + 1;
        r->last_seq = e->ev.seq;
        r->observed++;
        ab_agui_info_t in;
        if (ab_agui_validate(e->ev.body, AB_AGUI_LENIENT, NULL, NULL, &in, NULL) == AB_OK) {
            if (in.type == AB_AGUI_RUN_ERROR)
                r->outcome = "error";
            else if (in.type == AB_AGUI_RUN_FINISHED)
                r->outcome = in.outcome == AB_OUTCOME_INTERRUPT   ? "interrupt"
                             : in.outcome == AB_OUTCOME_CANCELLED ? "cancelled"
                                                                  : "success";
        }
    }
    if (d->o.json) {
        d->line.len = 0;
        if (tail_json_line(&d->line, &e->ev, &e->stamp) == AB_OK)
            fwrite(d->line.data, 1, d->line.len, stdout);
        fflush(stdout);
    } else {
        tail_view_event(&d->view, &e->ev, &e->stamp);
    }
    return 0;
}

static void *agent_thread(void *arg)
{
    demo_agent_main(arg);
    atomic_fetch_sub(&agents_left, 1);
    return NULL;
}

static bool caught_up(const struct demo *d)
{
    for (int i = 0; i < d->nruns; i++)
        if (d->runs[i].observed < d->runs[i].acked)
            return false;
    return true;
}

/* Poll the observer while the agents work, then until it has every
 * acknowledged event or CATCHUP_MS passes (invariant 2). */
static void observe(struct demo *d, ab_sub_t *s)
{
    double catchup_end = 0;
    bool away = false;
    for (;;) {
        bool working = atomic_load(&agents_left) > 0;
        if (!working && catchup_end == 0)
            catchup_end = mono_s() + CATCHUP_MS / 1000.0;
        if (!working && (caught_up(d) || mono_s() > catchup_end || demo_stop))
            return;
        ab_error_t err = AB_ERROR_INIT;
        ab_status_t rc = ab_sub_poll(s, working ? 100 : 20, &err);
        if (rc != AB_OK && !away)
            fprintf(stderr, "agentbus demo: observer: %s: %s (retrying)\n", ab_status_name(rc),
                    err.message);
        away = rc != AB_OK;
    }
}

static int start_observer(struct demo *d, const char *ep, ab_sub_t **s)
{
    ab_sub_opts_t so = {.scope = AB_SUB_THREAD,
                        .thread = d->thread,
                        .start = AB_SUB_FROM_CURSOR,
                        .on_event = on_event,
                        .ud = d};
    ab_error_t err = AB_ERROR_INIT;
    if (ab_sub_new(s, ep, &so, &err) != AB_OK) {
        fprintf(stderr, "agentbus demo: observer: %s: %s: %s\n", ep, ab_status_name(err.code),
                err.message);
        return -1;
    }
    return 0;
}

/* First problem of a run, or NULL when it is as intended. */
static const char *run_problem(const demo_run_t *r, char *buf, size_t size)
{
    if (r->why[0])
        snprintf(buf, size, "producer: %s", r->why);
    else if (!r->done)
        snprintf(buf, size, "did not complete");
    else if (r->acked != r->published)
        snprintf(buf, size, "%llu published but %llu acknowledged",
                 (unsigned long long)r->published, (unsigned long long)r->acked);
    else if (r->disorder)
        snprintf(buf, size, "observer saw a seq twice or out of order");
    else if (r->observed != r->acked)
        snprintf(buf, size, "%llu acknowledged but %llu observed", (unsigned long long)r->acked,
                 (unsigned long long)r->observed);
    else if (!r->outcome || strcmp(r->outcome, demo_kind_outcome(r->kind)) != 0)
        snprintf(buf, size, "outcome %s, expected %s", r->outcome ? r->outcome : "none",
                 demo_kind_outcome(r->kind));
    else
        return NULL;
    return buf;
}

/* One line per run and the totals. @return the number of runs with a problem. */
static int summary(struct demo *d, char *first, size_t size)
{
    uint64_t pub = 0, ack = 0, obs = 0;
    int bad = 0;
    FILE *f = d->info;
    fprintf(f, "\n== summary: thread %s\n", d->thread);
    for (int i = 0; i < d->nruns; i++) {
        demo_run_t *r = &d->runs[i];
        char why[320];
        const char *p = demo_stop ? NULL : run_problem(r, why, sizeof(why));
        fprintf(f,
                "  run %-16s agent %-2d %-10s %4llu published %4llu acked %4llu observed  %s%s\n",
                r->run, r->agent + 1, demo_kind_name(r->kind), (unsigned long long)r->published,
                (unsigned long long)r->acked, (unsigned long long)r->observed,
                r->outcome ? r->outcome : "-", p ? "  MISMATCH: " : "");
        if (p) {
            fprintf(f, "      %s\n", p);
            if (!bad++)
                snprintf(first, size, "run %s: %s", r->run, p);
        }
        pub += r->published, ack += r->acked, obs += r->observed;
    }
    double dt = d->t1 - d->t0 > 0 ? d->t1 - d->t0 : 1e-9;
    fprintf(f,
            "runs: %d by %d agents; events: %llu published, %llu acknowledged, %llu observed "
            "in %.2f s (%.0f events/s)\n",
            d->nruns, d->o.agents, (unsigned long long)pub, (unsigned long long)ack,
            (unsigned long long)obs, dt, (double)obs / dt);
    if (d->foreign && !bad++)
        snprintf(first, size, "%llu events of runs the demo did not start",
                 (unsigned long long)d->foreign);
    return bad;
}

/* The audit: `agentbus replay --verify --thread T`, the same code path. */
static int audit(struct demo *d, const char *ep)
{
    fprintf(d->info, "\n== audit: agentbus replay --verify --thread %s\n", d->thread);
    fflush(NULL);
#ifdef AB_HAVE_CLI_REPLAY_CMD
    int saved = -1;
    if (d->info != stdout) { /* invariant 1: the report goes where the summary goes */
        saved = dup(STDOUT_FILENO);
        dup2(STDERR_FILENO, STDOUT_FILENO);
    }
    char epbuf[256], a0[] = "replay", a1[] = "--broker", a3[] = "--thread", a5[] = "--verify";
    snprintf(epbuf, sizeof(epbuf), "%s", ep);
    char *argv[] = {a0, a1, epbuf, a3, d->thread, a5, NULL};
    int rc = cmd_replay(6, argv);
    fflush(stdout);
    if (saved >= 0) {
        dup2(saved, STDOUT_FILENO);
        close(saved);
    }
    return rc;
#else
    (void)ep;
    fprintf(d->info, "(replay is not built in: audit skipped)\n");
    return AB_EXIT_OK;
#endif
}

/* Observer, agents, catch-up, summary and audit against @p ep. */
static int run_fabric(struct demo *d, const char *ep)
{
    ab_sub_t *s = NULL;
    if (make_plan(d) != 0 || make_agents(d, ep) != 0 || start_observer(d, ep, &s) != 0)
        return AB_EXIT_FAIL;
    fprintf(d->info, "== thread %s: %d agents, %d runs, pace %d ms; the observer shows them live\n",
            d->thread, d->o.agents, d->nruns, d->o.pace_ms);
    fflush(d->info);
    d->t0 = mono_s();
    int started = 0;
    atomic_store(&agents_left, d->o.agents);
    for (; started < d->o.agents; started++)
        if (pthread_create(&d->agents[started].tid, NULL, agent_thread, &d->agents[started]))
            break;
    atomic_fetch_sub(&agents_left, d->o.agents - started);
    observe(d, s);
    for (int a = 0; a < started; a++)
        pthread_join(d->agents[a].tid, NULL);
    d->t1 = mono_s();
    if (!d->o.json)
        tail_view_finish(&d->view);
    ab_sub_destroy(&s);
    char first[400] = "";
    int bad = summary(d, first, sizeof(first));
    if (started < d->o.agents && !bad++)
        snprintf(first, sizeof(first), "could not start the agent threads");
    if (demo_stop) {
        fprintf(d->info, "agentbus demo: interrupted\n");
        return 130;
    }
    if (audit(d, ep) != AB_EXIT_OK && !bad++)
        snprintf(first, sizeof(first), "the audit (replay --verify) failed");
    if (bad) {
        fprintf(d->info, "agentbus demo: FAILED: %s\n", first);
        return AB_EXIT_FAIL;
    }
    fprintf(d->info, "agentbus demo: OK: every acknowledged event observed exactly once, "
                     "every run verified\n");
    return AB_EXIT_OK;
}

static int start_broker(struct demo *d, spawn_broker_t *b)
{
    const char *dir = d->o.data ? d->o.data : "./agentbus-data";
    char log[300];
    snprintf(log, sizeof(log), "%s/broker.log", dir);
    mkdir(dir, 0755); /* for the log; the broker makes the rest */
    spawn_opts_t so = {.dir = dir, .log_path = log};
    fprintf(d->info, "== starting a broker: agentbus broker --data %s (log %s)\n", dir, log);
    if (spawn_broker(b, &so) != 0) {
        fprintf(stderr, "agentbus demo: the broker did not start; see %s\n", log);
        return -1;
    }
    fprintf(d->info, "== broker ready: cmd=%s events=%s\n", b->cmd, b->events);
    return 0;
}

static void cleanup(struct demo *d)
{
    for (int a = 0; a < d->o.agents && a < MAX_AGENTS; a++)
        free(d->agents[a].runs);
    free(d->runs);
    ab_buf_free(&d->line);
}

int cmd_demo(int argc, char **argv)
{
    static struct demo d; /* large; one demo per process */
    memset(&d, 0, sizeof(d));
    d.o = (struct dopts){.agents = 3, .runs = DEMO_NKINDS, .pace_ms = 40};
    int rc = parse_args(argc, argv, &d.o);
    if (rc != AB_EXIT_OK)
        return rc;
    d.info = d.o.json ? stderr : stdout;
    tail_view_init(&d.view, stdout, !d.o.no_color && isatty(STDOUT_FILENO));
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof(stamp), "%H%M%S", &tm);
    snprintf(d.thread, sizeof(d.thread), "demo-%s-%ld", stamp, (long)getpid());
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    spawn_broker_t b = {.pid = 0, .fd = -1};
    const char *ep = d.o.broker ? cli_broker_endpoint(d.o.broker) : NULL;
    if (!ep && start_broker(&d, &b) != 0)
        rc = AB_EXIT_FAIL;
    else
        rc = run_fabric(&d, ep ? ep : b.cmd);
    if (b.pid > 0) {
        int st = spawn_stop(&b, false);
        fprintf(d.info, "== broker stopped (exit %d); the data stays in %s\n", st, b.dir);
    }
    if (rc == AB_EXIT_OK && !d.o.broker)
        fprintf(d.info,
                "look again: agentbus broker --data %s, then agentbus tail --from-start "
                "--thread %s\n",
                b.dir, d.thread);
    else if (rc == AB_EXIT_OK)
        fprintf(d.info, "look again: agentbus tail --broker %s --from-start --thread %s\n", ep,
                d.thread);
    cleanup(&d);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    return rc;
}
#else
typedef int ab_cli_demo_unused_t; /* built without the client library */
#endif

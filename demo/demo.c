/*
 * demo.c - `agentbus demo`: the whole fabric working with one command.
 * Starts a broker child (unless --broker names one) on a data directory
 * (--data, or a new temporary one that is kept), an observer (an ab_sub_t on
 * the demo's thread from its start, rendered by the observer console's
 * renderer), and N agent worker processes that publish realistic AG-UI runs
 * concurrently: the demo re-executes its own binary (/proc/self/exe) as the
 * internal `agentbus demo --agent-worker K ...` (demo/demo_agents.c), reads
 * one report line per run from each worker's stdout pipe and reaps it. Then
 * it checks that the observer delivered every acknowledged event exactly
 * once, audits the thread with `agentbus replay --verify` (the command's own
 * code, handed in as demo_opts_t.audit), prints a summary and stops the
 * broker. The command line is cli/demo_cmd.c.
 *
 * Invariants:
 *  1. Only the demo's main thread writes to its stdout (banner, observer,
 *     summary); with --json stdout carries the observer's JSON Lines only and
 *     the rest goes to stderr. A worker's stdout is its report pipe.
 *  2. Every wait is bounded: broker ready line and stop (demo/spawn.c),
 *     producer calls in the workers (their timeouts), the workers' stop
 *     (WORKER_STOP_MS), the observer's catch-up (CATCHUP_MS).
 *  3. Every child (the broker, the agent workers) is stopped and reaped
 *     before the command returns, also after SIGINT/SIGTERM or a failure:
 *     workers get SIGTERM (then SIGKILL after WORKER_STOP_MS), the broker
 *     SIGTERM (demo/spawn.c); each child also gets SIGTERM if the demo dies
 *     (Linux parent-death signal). Nothing is left running behind.
 *  4. Exit status: 0 when every run completed with its intended outcome,
 *     every acknowledged event was observed exactly once, every worker
 *     exited 0 and the audit passed; 1 with the reason otherwise (130 after
 *     SIGINT); 2 on usage.
 *  5. Worker pipes are close-on-exec in the demo, so a worker holds only
 *     its own pipe: EOF on a pipe means that worker has ended.
 */
#include "demo.h"
#include "ab_common.h"
#include "agentbus/agui.h"
#include "agentbus/client.h"
#include "agentbus/json.h"
#include "agentbus/subscriber.h"
#include "render.h"
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CATCHUP_MS     10000
#define WORKER_STOP_MS 5000
#define MAX_AGENTS     DEMO_MAX_AGENTS
#define MAX_RUNS       (DEMO_MAX_RUNS + 1)

/* One agent worker process, as the demo sees it. */
struct worker {
    pid_t pid;  /* its process id (kept after the reap, for the summary) */
    bool live;  /* started and not reaped yet */
    int fd;     /* read end of its stdout pipe, -1 at EOF */
    int status; /* exit status once reaped: the code, 128 + signal; -1 unknown */
    char buf[1024];
    size_t used;
};

struct demo {
    demo_opts_t o;
    char thread[80];
    demo_run_t *runs;
    int nruns;
    struct worker workers[MAX_AGENTS];
    int started;      /* workers forked */
    double kill_at;   /* SIGKILL the workers left after this (0: not stopping) */
    const char *dir;  /* data directory of the broker started here, or NULL */
    bool tmp_dir;     /* dir is a temporary directory made here (and kept) */
    char where[4096]; /* dir made absolute, for the summary */
    char tmp[256];    /* the temporary directory's path */
    FILE *info;       /* banner and summary: stdout, or stderr with --json */
    tail_view_t view;
    ab_buf_t line;
    uint64_t foreign; /* events of runs not in the plan */
    int answered;     /* agents that answered "status" through the bus */
    double t0, t1;
};

static volatile sig_atomic_t demo_stop;

static void on_signal(int sig)
{
    (void)sig;
    demo_stop = 1;
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

/* Internal `agentbus demo --agent-worker K ...`: the body of one agent
 * process. It computes the same plan as the demo, publishes the runs of
 * agent K and reports each on stdout (a pipe to the demo). */
static int agent_worker(struct demo *d)
{
    snprintf(d->thread, sizeof(d->thread), "%s", d->o.thread);
    if (make_plan(d) != 0)
        return DEMO_FAIL;
    static demo_run_t *mine[MAX_RUNS];
    demo_agent_t ag = {.endpoint = d->o.broker,
                       .thread = d->thread,
                       .pace_ms = d->o.pace_ms,
                       .stop = &demo_stop,
                       .index = d->o.worker,
                       .runs = mine,
                       .report = stdout};
    for (int i = 0; i < d->nruns; i++)
        if (d->runs[i].agent == d->o.worker)
            mine[ag.nruns++] = &d->runs[i];
    demo_agent_main(&ag);
    return ag.failed ? DEMO_FAIL : DEMO_OK;
}

/* Fork/exec agent worker @p a with its stdout on a close-on-exec pipe
 * (invariant 5); it gets SIGTERM if the demo dies (invariant 3). */
static int spawn_worker(struct demo *d, int a, const char *ep)
{
    struct worker *w = &d->workers[a];
    *w = (struct worker){.pid = 0, .fd = -1, .status = -1};
    char k[16], n[16], runs[16], pace[16];
    snprintf(k, sizeof(k), "%d", a + 1);
    snprintf(n, sizeof(n), "%d", d->o.agents);
    snprintf(runs, sizeof(runs), "%d", d->o.runs);
    snprintf(pace, sizeof(pace), "%d", d->o.pace_ms);
    const char *argv[24] = {"agentbus"};
    int i = 1 + demo_key_args(argv + 1); /* --secure: the agents' key */
    const char *rest[] = {"demo",   "--agent-worker", k,    "--agents", n,  "--runs",
                          runs,     "--pace",         pace, "--broker", ep, "--thread",
                          d->thread};
    for (size_t r = 0; r < sizeof rest / sizeof rest[0]; r++)
        argv[i++] = rest[r];
    if (d->dir) { /* a label only: ps (and the tests) see whose worker it is */
        argv[i++] = "--data";
        argv[i++] = d->dir;
    }
    argv[i] = NULL;
    char *args[24];
    memcpy(args, argv, sizeof(args)); /* execv's prototype is not const-correct */
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    pid_t pid = spawn_fork_child();
    if (pid == 0) {                  /* only async-signal-safe calls until the exec */
        dup2(fds[1], STDOUT_FILENO); /* the copy is not close-on-exec */
        execv("/proc/self/exe", args);
        _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return -1;
    }
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    w->pid = pid;
    w->live = true;
    w->fd = fds[0];
    return 0;
}

/* Read what worker @p a has written: report lines into the plan. */
static void worker_read(struct demo *d, int a)
{
    struct worker *w = &d->workers[a];
    for (;;) {
        if (w->used + 1 >= sizeof(w->buf))
            w->used = 0; /* an overlong line is not a report */
        ssize_t n = read(w->fd, w->buf + w->used, sizeof(w->buf) - 1 - w->used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) { /* EOF: the worker has ended (invariant 5) */
            close(w->fd);
            w->fd = -1;
            return;
        }
        w->used += (size_t)n;
        char *line = w->buf, *nl;
        while ((nl = memchr(line, '\n', w->used - (size_t)(line - w->buf))) != NULL) {
            *nl = '\0';
            if (demo_parse_report(line, d->runs, d->nruns, a) != 0)
                fprintf(stderr, "agentbus demo: agent %d: not a report line: %.200s\n", a + 1,
                        line);
            line = nl + 1;
        }
        size_t rest = w->used - (size_t)(line - w->buf);
        memmove(w->buf, line, rest);
        w->used = rest;
    }
}

/* Read the workers' reports and reap the ended ones.
 * @return true while a worker is still running. */
static bool pump_workers(struct demo *d)
{
    bool busy = false;
    for (int a = 0; a < d->started; a++) {
        struct worker *w = &d->workers[a];
        if (w->fd >= 0)
            worker_read(d, a);
        if (w->live) {
            int st = 0;
            pid_t r = waitpid(w->pid, &st, WNOHANG);
            if (r == w->pid) {
                w->live = false;
                w->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            } else if (r < 0 && errno == ECHILD) {
                w->live = false;
            }
        }
        busy |= w->live || w->fd >= 0;
    }
    return busy;
}

/* Stop the workers left: SIGTERM, and SIGKILL after WORKER_STOP_MS. */
static void signal_workers(struct demo *d)
{
    int sig = 0;
    if (d->kill_at == 0) {
        d->kill_at = ab__mono_s() + WORKER_STOP_MS / 1000.0;
        sig = SIGTERM;
    } else if (ab__mono_s() > d->kill_at) {
        sig = SIGKILL;
    }
    for (int a = 0; sig && a < d->started; a++)
        if (d->workers[a].live)
            kill(d->workers[a].pid, sig);
}

/* Stop and reap every worker (invariant 3); bounded by WORKER_STOP_MS. */
static void stop_workers(struct demo *d)
{
    while (pump_workers(d)) {
        signal_workers(d);
        poll(NULL, 0, 10);
    }
}

/* A run without a report: say why (its worker ended or never started). */
static void note_unreported(struct demo *d)
{
    for (int i = 0; i < d->nruns; i++) {
        demo_run_t *r = &d->runs[i];
        if (r->reported || r->why[0])
            continue;
        const struct worker *w = &d->workers[r->agent];
        if (r->agent >= d->started)
            snprintf(r->why, sizeof(r->why), "agent process %d was not started", r->agent + 1);
        else
            snprintf(r->why, sizeof(r->why),
                     "agent process %d (pid %ld) ended with status %d before reporting it",
                     r->agent + 1, (long)w->pid, w->status);
    }
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

static bool caught_up(const struct demo *d)
{
    for (int i = 0; i < d->nruns; i++)
        if (d->runs[i].observed < d->runs[i].acked)
            return false;
    return true;
}

/* Poll the observer (and the workers' reports) while the agents work, then until it has every
 * acknowledged event or CATCHUP_MS passes (invariant 2). */
static void observe(struct demo *d, ab_sub_t *s)
{
    double catchup_end = 0;
    bool away = false;
    for (;;) {
        bool working = pump_workers(d);
        if (working && demo_stop)
            signal_workers(d); /* invariant 3 */
        if (!working && catchup_end == 0)
            catchup_end = ab__mono_s() + CATCHUP_MS / 1000.0;
        if (!working && (caught_up(d) || ab__mono_s() > catchup_end || demo_stop))
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

/* The agent processes: their pids and exit statuses; a worker that did not
 * exit 0 is a problem (unless the demo was stopped). */
static int summary_agents(struct demo *d, char *first, size_t size)
{
    FILE *f = d->info;
    int bad = 0;
    fprintf(f, "agents: %d processes (pids", d->started);
    for (int a = 0; a < d->started; a++)
        fprintf(f, " %ld", (long)d->workers[a].pid);
    fprintf(f, "), exit status");
    for (int a = 0; a < d->started; a++)
        fprintf(f, " %d", d->workers[a].status);
    fprintf(f, "\n");
    for (int a = 0; a < d->started && !demo_stop; a++)
        if (d->workers[a].status != 0 && !bad++)
            snprintf(first, size, "agent process %d (pid %ld) exited with status %d", a + 1,
                     (long)d->workers[a].pid, d->workers[a].status);
    if (d->started < d->o.agents && !demo_stop && !bad++)
        snprintf(first, size, "could not start agent process %d", d->started + 1);
    return bad;
}

/* Where the data is: the data directory, or the external broker's. */
static void summary_data(struct demo *d, const char *ep)
{
    if (!d->dir)
        fprintf(d->info, "data: in the data directory of the broker at %s\n", ep);
    else if (d->tmp_dir)
        fprintf(d->info,
                "data: %s (a temporary directory, kept for you to inspect; "
                "rm -rf it when done)\n",
                d->where);
    else
        fprintf(d->info, "data: %s\n", d->where);
}

/* One line per run and the totals. @return the number of problems. */
static int summary(struct demo *d, const char *ep, char *first, size_t size)
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
            "in %.2f s (throughput %.0f events/s)\n",
            d->nruns, d->o.agents, (unsigned long long)pub, (unsigned long long)ack,
            (unsigned long long)obs, dt, (double)obs / dt);
    fprintf(f, "actions: %d of %d agents answered status through the bus\n", d->answered,
            d->started);
    char afirst[200] = "";
    if (summary_agents(d, afirst, sizeof(afirst)) && !bad++)
        snprintf(first, size, "%s", afirst);
    summary_data(d, ep);
    if (d->foreign && !bad++)
        snprintf(first, size, "%llu events of runs the demo did not start",
                 (unsigned long long)d->foreign);
    return bad;
}

/* The audit: `agentbus replay --verify --thread T`, the same code path. */
static int audit(struct demo *d, const char *ep, const char *thread)
{
    fprintf(d->info, "\n== audit: agentbus replay --verify --thread %s\n", thread);
    fflush(NULL);
    if (d->o.audit == NULL) {
        fprintf(d->info, "(no audit given: skipped)\n");
        return DEMO_OK;
    }
    int saved = -1;
    if (d->info != stdout) { /* invariant 1: the report goes where the summary goes */
        saved = dup(STDOUT_FILENO);
        dup2(STDERR_FILENO, STDOUT_FILENO);
    }
    char epbuf[256], a0[] = "replay", a1[] = "--broker", a3[] = "--thread", a5[] = "--verify";
    snprintf(epbuf, sizeof(epbuf), "%s", ep);
    char tbuf[sizeof(d->thread) + 16];
    snprintf(tbuf, sizeof(tbuf), "%s", thread);
    char *argv[] = {a0, a1, epbuf, a3, tbuf, a5, NULL};
    int rc = d->o.audit(6, argv);
    fflush(stdout);
    if (saved >= 0) {
        dup2(saved, STDOUT_FILENO);
        close(saved);
    }
    return rc == 0 ? DEMO_OK : DEMO_FAIL;
}

/* Observer, agent processes, catch-up, summary and audit against @p ep. */
/* Ask agent @p a its "status" through the bus (an action call routed to its process); it may
 * not have registered yet: `unsupported` / `unavailable` are asked again for up to 5 s. */
static void ask_one(struct demo *d, ab_conn_t *c, ab_doc_t *doc, int a)
{
    char agent[32];
    demo_agent_name(a, agent, sizeof(agent));
    ab_action_reply_t r;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = AB_UNAVAILABLE;
    double until = ab__mono_s() + 5.0;
    while ((st == AB_UNSUPPORTED || st == AB_UNAVAILABLE) && ab__mono_s() < until && !demo_stop) {
        ab_error_clear(&err);
        st = ab_conn_invoke_action(c, agent, "status", NULL, d->thread, 2000, doc, &r, &err);
        if (st == AB_UNSUPPORTED || st == AB_UNAVAILABLE)
            (void)ab_conn_wait(c, 50); /* its registration is under way */
    }
    ab_buf_t text = AB_BUF_INIT;
    if (st == AB_OK && (r.result == NULL || ab_val_to_json(r.result, &text) == AB_OK)) {
        fprintf(d->info, "== %s answers status through the bus (worker %.*s): %.*s\n", agent,
                (int)r.worker_id.len, r.worker_id.ptr, (int)text.len, (const char *)text.data);
        d->answered++;
    } else {
        fprintf(d->info, "== %s did not answer status: %s: %s\n", agent, ab_status_name(st),
                err.message);
    }
    ab_buf_free(&text);
}

/* Every agent is a worker too: ask each one's status by an action call (PROTOCOL.md 7.11). */
static void ask_status(struct demo *d, const char *ep)
{
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_conn_opts_t o = {.client_name = "agentbus-demo-console"};
    ab_error_t err = AB_ERROR_INIT;
    if (ab_doc_new(&doc) == AB_OK && ab_conn_new(&c, ep, &o, &err) == AB_OK) {
        size_t n = 0;
        const ab_cap_t *caps = ab_conn_caps(c, &n); /* before n is read */
        ab_cap_state_t s = ab_caps_lookup(caps, n, AB_CAP_ACTIONS);
        if (s == AB_CAP_UNKNOWN || s == AB_CAP_UNSUPPORTED) /* a broker without workers */
            fprintf(d->info, "== the broker does not announce actions: no status asked\n");
        for (int a = 0;
             a < d->started && !demo_stop && s != AB_CAP_UNKNOWN && s != AB_CAP_UNSUPPORTED; a++)
            ask_one(d, c, doc, a);
    }
    fflush(d->info);
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
}

/* Whether the broker at @p ep announces dispatch as available. */
static bool has_dispatch(const char *ep)
{
    ab_conn_t *c = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_cap_state_t s = AB_CAP_UNKNOWN;
    if (ab_conn_new(&c, ep, NULL, &err) == AB_OK) {
        size_t n = 0;
        const ab_cap_t *caps = ab_conn_caps(c, &n); /* before n is read */
        s = ab_caps_lookup(caps, n, AB_CAP_DISPATCH);
    }
    ab_conn_destroy(&c);
    return s == AB_CAP_AVAILABLE;
}

/* The third act (--python SCRIPT, demo_dispatch.c) on a thread of its own, then its audit;
 * skipped, like the second, on a broker without dispatch. */
static int python_act(struct demo *d, const char *ep, char *why, size_t size)
{
    if (!has_dispatch(ep))
        return DEMO_OK;
    char thread[sizeof(d->thread) + 16];
    snprintf(thread, sizeof(thread), "%s-python", d->thread);
    fprintf(d->info, "\n");
    if (demo_python_act(d->info, ep, thread, d->o.python, why, size) != 0) {
        if (!why[0])
            snprintf(why, size, "the python act failed");
        return DEMO_FAIL;
    }
    if (audit(d, ep, thread) != DEMO_OK) {
        snprintf(why, size, "the audit of the python thread (replay --verify) failed");
        return DEMO_FAIL;
    }
    return DEMO_OK;
}

/* The second act (demo_dispatch.c) on a thread of its own, then its audit; skipped on a
 * broker without dispatch. */
static int dispatch_act(struct demo *d, const char *ep, char *why, size_t size)
{
    if (!has_dispatch(ep)) {
        fprintf(d->info, "\n== the broker does not announce dispatch: no runs started through "
                         "the bus\n");
        return DEMO_OK;
    }
    char thread[sizeof(d->thread) + 16];
    snprintf(thread, sizeof(thread), "%s-dispatch", d->thread);
    fprintf(d->info, "\n");
    if (demo_dispatch_act(d->info, ep, thread, d->o.pace_ms, why, size) != 0) {
        if (!why[0])
            snprintf(why, size, "the dispatch act failed");
        return DEMO_FAIL;
    }
    if (audit(d, ep, thread) != DEMO_OK) {
        snprintf(why, size, "the audit of the dispatch thread (replay --verify) failed");
        return DEMO_FAIL;
    }
    return DEMO_OK;
}

static int run_fabric(struct demo *d, const char *ep)
{
    ab_sub_t *s = NULL;
    if (make_plan(d) != 0 || start_observer(d, ep, &s) != 0)
        return DEMO_FAIL;
    fprintf(d->info,
            "== thread %s: %d agent processes, %d runs, pace %d ms; the observer shows them "
            "live\n",
            d->thread, d->o.agents, d->nruns, d->o.pace_ms);
    fflush(d->info);
    d->t0 = ab__mono_s();
    for (; d->started < d->o.agents && !demo_stop; d->started++)
        if (spawn_worker(d, d->started, ep) != 0)
            break;
    if (d->started < d->o.agents && !demo_stop) {
        fprintf(stderr, "agentbus demo: could not start agent process %d: %s\n", d->started + 1,
                strerror(errno));
        stop_workers(d); /* invariant 3: a failure stops the others */
    } else {
        fprintf(d->info, "== agents: %d processes (pids", d->started);
        for (int a = 0; a < d->started; a++)
            fprintf(d->info, " %ld", (long)d->workers[a].pid);
        fprintf(d->info, ")\n");
        fflush(d->info);
        ask_status(d, ep);
    }
    observe(d, s);
    stop_workers(d); /* normally all ended already */
    note_unreported(d);
    d->t1 = ab__mono_s();
    if (!d->o.json)
        tail_view_finish(&d->view);
    ab_sub_destroy(&s);
    char first[400] = "";
    int bad = summary(d, ep, first, sizeof(first));
    if (demo_stop) {
        fprintf(d->info, "agentbus demo: interrupted\n");
        return 130;
    }
    if (audit(d, ep, d->thread) != DEMO_OK && !bad++)
        snprintf(first, sizeof(first), "the audit (replay --verify) failed");
    if (!bad && !demo_stop && dispatch_act(d, ep, first, sizeof(first)) != DEMO_OK)
        bad++;
    if (!bad && !demo_stop && d->o.python && python_act(d, ep, first, sizeof(first)) != DEMO_OK)
        bad++;
    if (!bad && !demo_stop && demo_secure_check(ep, d->thread, d->info) != DEMO_OK && !bad++)
        snprintf(first, sizeof(first), "--secure: the access file was not enforced");
    if (bad) {
        fprintf(d->info, "agentbus demo: FAILED: %s\n", first);
        return DEMO_FAIL;
    }
    fprintf(d->info, "agentbus demo: OK: every acknowledged event observed exactly once, "
                     "every run verified\n");
    return DEMO_OK;
}

/* The data directory: --data, or a new temporary one under $TMPDIR or
 * /tmp that is kept (the summary says where). */
static int data_dir(struct demo *d)
{
    if (d->o.data) {
        d->dir = d->o.data;
        mkdir(d->dir, 0755); /* for the log; the broker makes the rest */
    } else {
        const char *t = getenv("TMPDIR");
        if (!t || !*t)
            t = "/tmp";
        int tl = (int)strlen(t);
        while (tl > 1 && t[tl - 1] == '/')
            tl--; /* no "//" in the path */
        int n = snprintf(d->tmp, sizeof(d->tmp), "%.*s/agentbus-demo-XXXXXX", tl, t);
        if (n < 0 || (size_t)n >= sizeof(d->tmp) || !mkdtemp(d->tmp)) {
            fprintf(stderr, "agentbus demo: cannot make a temporary directory %s: %s\n", d->tmp,
                    strerror(errno));
            return -1;
        }
        d->dir = d->tmp;
        d->tmp_dir = true;
    }
    char abs[4096];
    snprintf(d->where, sizeof(d->where), "%s", realpath(d->dir, abs) ? abs : d->dir);
    return 0;
}

static int start_broker(struct demo *d, spawn_broker_t *b)
{
    if (data_dir(d) != 0)
        return -1;
    char log[600];
    snprintf(log, sizeof(log), "%s/broker.log", d->dir);
    spawn_opts_t so = {.dir = d->dir, .log_path = log};
    if (d->o.secure) { /* demo_secure.c invariant 1: keys before the broker */
        if (demo_secure_setup(d->dir, d->thread, d->info) != 0)
            return -1;
        so.extra[0] = "--keys";
        so.extra[1] = demo_secure_keys_dir();
    }
    fprintf(d->info, "== starting a broker: agentbus broker --data %s%s (log %s)\n", d->dir,
            d->tmp_dir ? " (a new temporary directory)" : "", log);
    if (spawn_broker(b, &so) != 0) {
        fprintf(stderr, "agentbus demo: the broker did not start; see %s\n", log);
        return -1;
    }
    fprintf(d->info, "== broker ready: cmd=%s events=%s\n", b->cmd, b->events);
    return 0;
}

static void cleanup(struct demo *d)
{
    stop_workers(d); /* invariant 3, whatever the path */
    free(d->runs);
    ab_buf_free(&d->line);
}

int demo_run(const demo_opts_t *o)
{
    static struct demo d; /* large; one demo per process */
    memset(&d, 0, sizeof(d));
    d.o = *o;
    int rc = DEMO_OK;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (d.o.dworker > 0) { /* internal: one dispatch worker process (demo_dispatch.c) */
        rc = demo_dispatch_worker(d.o.broker, d.o.dworker, d.o.pace_ms, &demo_stop);
        cleanup(&d);
        return rc;
    }
    if (d.o.worker >= 0) { /* internal: one agent process */
        rc = agent_worker(&d);
        cleanup(&d);
        return rc;
    }
    d.info = d.o.json ? stderr : stdout;
    tail_view_init(&d.view, stdout, !d.o.no_color && isatty(STDOUT_FILENO));
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof(stamp), "%H%M%S", &tm);
    snprintf(d.thread, sizeof(d.thread), "demo-%s-%ld", stamp, (long)getpid());
    spawn_broker_t b = {.pid = 0, .fd = -1};
    const char *ep = d.o.broker;
    if (!ep && start_broker(&d, &b) != 0)
        rc = DEMO_FAIL;
    else
        rc = run_fabric(&d, ep ? ep : b.cmd);
    stop_workers(&d); /* before the broker */
    if (b.pid > 0) {
        int st = spawn_stop(&b, false);
        fprintf(d.info, "== broker stopped (exit %d); the data stays in %s\n", st, b.dir);
    }
    if (rc == DEMO_OK && !d.o.broker)
        fprintf(d.info,
                "look again: agentbus broker --data %s, then agentbus tail --from-start "
                "--thread %s\n",
                d.where, d.thread);
    else if (rc == DEMO_OK)
        fprintf(d.info, "look again: agentbus tail --broker %s --from-start --thread %s\n", ep,
                d.thread);
    cleanup(&d);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    return rc;
}

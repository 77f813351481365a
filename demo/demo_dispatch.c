/*
 * demo_dispatch.c - the demo's second act: runs dispatched through the bus
 * (docs/PROTOCOL.md 7.12 - 7.14). Two worker processes (the demo binary
 * again, as the internal `agentbus demo --dispatch-worker K`) serve agent
 * "demo-coder"; the demo, as a controller, starts runs with start_run on a
 * thread of their own and follows each through `requests` and heads:
 *
 *   1. a run that stops to ask (outcome interrupt, one interrupt);
 *   2. `approve`: resume_run answers that interrupt by its id, and the
 *      replacement run is dispatched and succeeds;
 *   3. a long run, cancelled through the bus (cancel_run -> delivered), ends
 *      with outcome cancelled;
 *   4. a run assigned to worker 1, which is killed (SIGKILL) before its
 *      RUN_STARTED: its lease lapses and worker 2 runs it (attempt 2).
 *
 * With `--python SCRIPT`, a third act (demo_python_act()) does steps 1 and 2
 * with a Python worker (the package's python/examples/worker_agent.py) serving
 * agent "demo-py", on a thread of its own.
 *
 * Invariants:
 *  1. Every wait is bounded (ACT_MS per step); both worker processes are
 *     stopped and reaped before the act returns (SIGTERM, then SIGKILL).
 *  2. A worker runs one assignment at a time, stepping it between
 *     ab_worker_run() calls, so a cancel reaches it while the run goes on.
 *  3. The act passes only when each step ended as planned, checked on the
 *     broker's own records (the request's state, the run head's outcome).
 */
#include "ab_common.h"
#include "agentbus/client.h"
#include "agentbus/json.h"
#include "agentbus/producer.h"
#include "agentbus/worker.h"
#include "demo.h"
#include "spawn.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define ACT_MS 10000
#define AGENT  "demo-coder"
#define LEASE  1000 /* short: the killed worker's work comes back within about a second */
#define SV(s)  ((ab_str_t){(s), strlen(s)})

/* ---- the worker process --------------------------------------------------------- */

typedef struct dwork {
    ab_producer_t *p;
    bool busy, cancel;
    char thread[AB_ID_MAX_BYTES + 1], run[AB_ID_MAX_BYTES + 1], kind[16], answer[16];
    int step, steps, slow;
    ab_buf_t input; /* the assignment's input as JSON: RUN_STARTED echoes it */
    int64_t next_ms;
    int pace;
} dwork_t;

static void dw_assign(void *ud, ab_worker_t *w, const ab_assign_t *a)
{
    dwork_t *d = ud;
    ab_error_t e = AB_ERROR_INIT;
    const ab_val_t *fp = ab_val_get(a->input, "forwardedProps");
    const ab_val_t *kind = ab_val_get(fp, "kind");
    if (d->busy) {
        if (ab_worker_decline(w, a->request, a->epoch, "busy", &e) != AB_OK)
            fprintf(stderr, "agentbus demo: decline: %s\n", e.message);
        return;
    }
    snprintf(d->thread, sizeof d->thread, "%.*s", (int)a->thread.len, a->thread.ptr);
    snprintf(d->run, sizeof d->run, "%.*s", (int)a->run.len, a->run.ptr);
    snprintf(d->kind, sizeof d->kind, "%.*s", kind ? (int)kind->len : 4, kind ? kind->u.s : "work");
    const ab_val_t *res = ab_val_get(a->input, "resume");
    const ab_val_t *ok =
        res && res->len ? ab_val_get(ab_val_get(&res->u.items[0], "payload"), "approved") : NULL;
    snprintf(d->answer, sizeof d->answer, "%s", ok ? (ok->u.b ? "approved" : "denied") : "");
    ab_buf_reset(&d->input);
    if (ab_val_to_json(a->input, &d->input) != AB_OK ||
        ab_producer_assigned(d->p, d->thread, d->run, a->epoch, &e) != AB_OK)
        return; /* its lease keeps it assigned until it lapses */
    d->busy = true;
    d->cancel = false;
    d->step = 0;
    d->steps = strcmp(d->kind, "long") == 0 ? 1000 : 3;
    d->slow = strcmp(d->kind, "slow") == 0 && a->attempt == 1; /* a second try runs at once */
    d->next_ms = ab__mono_ms() + (d->slow ? 60000 : 0);        /* "slow": never starts by itself */
}

static void dw_cancel(void *ud, ab_worker_t *w, const ab_run_cancel_t *c)
{
    dwork_t *d = ud;
    (void)w;
    if (d->busy && c->run.len == strlen(d->run) && memcmp(c->run.ptr, d->run, c->run.len) == 0)
        d->cancel = true;
}

static int dw_publish(dwork_t *d, const char *json)
{
    ab_error_t e = AB_ERROR_INIT;
    return ab_producer_publish_json(d->p, json, strlen(json), &e) == AB_OK &&
                   ab_producer_flush(d->p, 5000, &e) == AB_OK
               ? 0
               : -1;
}

/* The next event of the run in hand (invariant 2). */
static void dw_step(dwork_t *d)
{
    char ev[4096];
    bool end = true;
    if (d->step == 0) { /* it echoes its input (a resume's answers included) */
        snprintf(ev, sizeof ev,
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                 "\"protocolVersion\":\"1.0\",\"input\":%.*s}",
                 d->thread, d->run, (int)d->input.len, (const char *)d->input.data);
        end = false;
    } else if (d->cancel) {
        snprintf(ev, sizeof ev,
                 "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\",\"outcome\":{"
                 "\"type\":\"cancelled\"}}",
                 d->thread, d->run);
    } else if (d->step <= d->steps) {
        snprintf(ev, sizeof ev,
                 "{\"type\":\"CUSTOM\",\"name\":\"agentkit.progress\",\"value\":{\"step\":%d,"
                 "\"of\":%d%s%s%s}}",
                 d->step, d->steps, d->answer[0] ? ",\"resumed\":\"" : "", d->answer,
                 d->answer[0] ? "\"" : "");
        end = false;
    } else if (strcmp(d->kind, "approval") == 0) {
        snprintf(ev, sizeof ev,
                 "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\",\"outcome\":{"
                 "\"type\":\"interrupt\",\"interrupts\":[{\"id\":\"approve-%s\",\"reason\":"
                 "\"confirmation\",\"message\":\"Ship it?\"}]}}",
                 d->thread, d->run, d->run);
    } else {
        snprintf(ev, sizeof ev,
                 "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\",\"outcome\":{"
                 "\"type\":\"success\"}}",
                 d->thread, d->run);
    }
    d->step++;
    bool long_run = strcmp(d->kind, "long") == 0; /* lasts 20 s at least: it is cancelled */
    d->next_ms = ab__mono_ms() + (long_run && d->pace < 20 ? 20 : d->pace);
    if (dw_publish(d, ev) != 0 || end)
        d->busy = false;
}

int demo_dispatch_worker(const char *ep, int k, int pace_ms, volatile sig_atomic_t *stop)
{
    char name[48];
    snprintf(name, sizeof name, "agentbus-demo-dispatch-%d-%ld", k, (long)getpid());
    dwork_t d = {.pace = pace_ms};
    ab_worker_t *w = NULL;
    ab_worker_opts_t o = {.name = name, .lease_ms = LEASE};
    ab_producer_opts_t po = {.client_name = name, .timeout_ms = 5000};
    ab_error_t e = AB_ERROR_INIT;
    int rc = DEMO_FAIL;
    if (ab_producer_new(&d.p, ep, &po, &e) != AB_OK || ab_worker_new(&w, ep, &o, &e) != AB_OK ||
        ab_worker_add_agent(w, AGENT, 1, NULL, 0, &e) != AB_OK)
        goto done;
    ab_worker_on_assign(w, dw_assign, &d);
    ab_worker_on_cancel(w, dw_cancel, &d);
    if (ab_worker_serve(w, &e) != AB_OK)
        goto done;
    while (!*stop) {
        int64_t wait = d.busy ? d.next_ms - ab__mono_ms() : 100;
        if (ab_worker_run(w, wait > 0 ? (int)(wait < 100 ? wait : 100) : 0, &e) != AB_OK)
            goto done;
        if (d.busy && (ab__mono_ms() >= d.next_ms || (d.cancel && d.step > 0)))
            dw_step(&d);
    }
    rc = DEMO_OK;
done:
    if (rc != DEMO_OK && !*stop)
        fprintf(stderr, "agentbus demo: dispatch worker %d: %s: %s\n", k, ab_status_name(e.code),
                e.message);
    ab_worker_destroy(&w);
    ab_producer_destroy(&d.p);
    ab_buf_free(&d.input);
    return rc;
}

/* ---- the controller --------------------------------------------------------------- */

typedef struct act {
    FILE *info;
    const char *ep, *thread, *agent; /* agent: AGENT, or the Python act's PY_AGENT */
    const char *tag;                 /* "dispatch" or "python": the act's lines */
    ab_conn_t *c;
    ab_doc_t *doc, *idoc;
    pid_t pid[2];
    char why[300];
} act_t;

static pid_t spawn_dworker(const char *ep, int k, int pace)
{
    char ks[8], ps[16];
    snprintf(ks, sizeof ks, "%d", k);
    snprintf(ps, sizeof ps, "%d", pace);
    const char *argv[14] = {"agentbus"};
    int n = 1 + demo_key_args(argv + 1); /* --secure: the agents' key */
    const char *rest[] = {"demo", "--dispatch-worker", ks, "--broker", ep, "--pace", ps};
    for (size_t r = 0; r < sizeof rest / sizeof rest[0]; r++)
        argv[n++] = rest[r];
    argv[n] = NULL;
    char *args[14];
    memcpy(args, argv, sizeof(args)); /* execv's prototype is not const-correct */
    pid_t pid = spawn_fork_child();
    if (pid == 0) { /* only async-signal-safe calls until the exec */
        execv("/proc/self/exe", args);
        _exit(127);
    }
    return pid;
}

static void reap(pid_t pid, int sig)
{
    if (pid <= 0)
        return;
    kill(pid, sig);
    for (int i = 0; i < 500; i++) { /* 5 s, then SIGKILL (invariant 1) */
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static int failed(act_t *a, const char *fmt, const char *x, const ab_error_t *e)
{
    snprintf(a->why, sizeof a->why, fmt, x, e ? e->message : "");
    return -1;
}

/* Until both workers serve the agent (bounded). */
static int wait_workers(act_t *a, int want)
{
    int64_t until = ab__mono_ms() + ACT_MS;
    while (ab__mono_ms() < until) {
        ab_workers_reply_t r;
        int n = 0;
        if (ab_conn_workers(a->c, a->doc, &r, 2000, NULL) == AB_OK)
            for (size_t i = 0; i < r.nworkers; i++)
                n += r.workers[i].nagents && r.workers[i].agents[0].name.len == strlen(a->agent) &&
                     memcmp(r.workers[i].agents[0].name.ptr, a->agent, strlen(a->agent)) == 0;
        if (n >= want)
            return 0;
        (void)ab_conn_wait(a->c, 20);
    }
    return failed(a, "the %s workers did not register", a->agent, NULL);
}

/* start_run of kind @p kind as run @p run; the request id in *id. */
static int start(act_t *a, const char *run, const char *kind, uint64_t *id)
{
    char json[128], key[128];
    snprintf(json, sizeof json, "{\"messages\":[],\"forwardedProps\":{\"kind\":\"%s\"}}", kind);
    snprintf(key, sizeof key, "%s-%s", a->thread, run);
    ab_buf_t mp = AB_BUF_INIT;
    const ab_val_t *in = NULL;
    ab_error_t e = AB_ERROR_INIT;
    ab_run_accepted_t r;
    int rc =
        ab_json_to_msgpack(json, strlen(json), 16, 4096, AB_INVALID_ARGUMENT, &mp, &e) == AB_OK &&
                ab_doc_parse(a->idoc, mp.data, mp.len, 4096, 16, AB_INVALID_ARGUMENT, &in, &e) ==
                    AB_OK
            ? 0
            : -1;
    ab_start_run_t s = {SV(a->agent), SV(a->thread), SV(run), in, SV(key), AB_IF_BUSY_OMIT};
    if (rc == 0 && ab_conn_start_run(a->c, &s, a->doc, &r, ACT_MS, &e) != AB_OK)
        rc = failed(a, "start_run %s: %s", run, &e);
    ab_buf_free(&mp);
    if (rc == 0) {
        *id = r.request;
        fprintf(a->info, "== %s: start_run %s (%s) -> request %llu, %s\n", a->tag, run, kind,
                (unsigned long long)r.request, ab_request_state_name(r.state));
    }
    return rc;
}

/* Wait until request @p id is in @p state; its listing in *out. */
static int wait_state(act_t *a, uint64_t id, ab_request_state_t state, ab_request_info_t *out)
{
    int64_t until = ab__mono_ms() + ACT_MS;
    while (ab__mono_ms() < until) {
        ab_requests_t q = {state, {0}, id - 1, 1};
        ab_requests_reply_t r;
        if (ab_conn_requests(a->c, &q, a->doc, &r, 2000, NULL) == AB_OK && r.nrequests == 1 &&
            r.requests[0].request == id) {
            *out = r.requests[0];
            return 0;
        }
        (void)ab_conn_wait(a->c, 10);
    }
    snprintf(a->why, sizeof a->why, "request %llu never became %s", (unsigned long long)id,
             ab_request_state_name(state));
    return -1;
}

/* The committed outcome of run @p run ("success", "interrupt", ...). */
static const char *outcome(act_t *a, const char *run)
{
    ab_run_ref_t ref = {SV(a->thread), SV(run)};
    ab_heads_t q = {&ref, 1, {0}};
    ab_heads_reply_t r;
    if (ab_conn_heads(a->c, &q, a->doc, &r, ACT_MS, NULL) != AB_OK || r.nheads != 1)
        return "unknown";
    const ab_head_t *h = &r.heads[0];
    if (h->status == AB_RUN_STATUS_ERRORED)
        return "error";
    if (h->status != AB_RUN_STATUS_FINISHED)
        return "not finished";
    switch (h->outcome) {
    case AB_OUTCOME_NONE:
    case AB_OUTCOME_SUCCESS: return "success";
    case AB_OUTCOME_INTERRUPT: return "interrupt";
    case AB_OUTCOME_CANCELLED: return "cancelled";
    default: return "?";
    }
}

static int ended_with(act_t *a, uint64_t id, const char *run, const char *want,
                      ab_request_info_t *info)
{
    if (wait_state(a, id, AB_REQ_ENDED, info) != 0)
        return -1;
    const char *got = outcome(a, run);
    fprintf(a->info, "== %s: run %s ended %s (worker %.*s, attempt %u)\n", a->tag, run, got,
            (int)info->worker.len, info->worker.ptr ? info->worker.ptr : "", info->attempts);
    if (strcmp(got, want) != 0) {
        snprintf(a->why, sizeof a->why, "run %s ended %s, not %s", run, got, want);
        return -1;
    }
    return 0;
}

/* resume_run of @p run answering @p entries (ResumeEntry maps as JSON) with the
 * replacement run @p new_run; its run_accepted in *r. */
static int resume(act_t *a, const char *run, const char *entries, const char *new_run,
                  ab_run_accepted_t *r)
{
    ab_buf_t mp = AB_BUF_INIT;
    const ab_val_t *res = NULL;
    ab_error_t e = AB_ERROR_INIT;
    char key[128];
    snprintf(key, sizeof key, "%s-approve-%s", a->thread, run);
    int rc = ab_json_to_msgpack(entries, strlen(entries), 16, 4096, AB_INVALID_ARGUMENT, &mp, &e) ==
                         AB_OK &&
                     ab_doc_parse(a->idoc, mp.data, mp.len, 4096, 16, AB_INVALID_ARGUMENT, &res,
                                  &e) == AB_OK
                 ? 0
                 : -1;
    ab_resume_run_t rr = {SV(a->thread), SV(run), res, SV(key), {0}, SV(new_run), NULL};
    if (rc == 0 && ab_conn_resume_run(a->c, &rr, a->doc, r, ACT_MS, &e) != AB_OK)
        rc = failed(a, "resume_run of %s: %s", run, &e);
    ab_buf_free(&mp);
    return rc;
}

/* Steps 1 and 2: an interrupted run, approved by its interrupt id; the replacement runs. */
static int approve(act_t *a)
{
    uint64_t id = 0;
    ab_request_info_t info;
    ab_run_accepted_t r;
    if (start(a, "d1-approval", "approval", &id) != 0 ||
        ended_with(a, id, "d1-approval", "interrupt", &info) != 0 ||
        resume(a, "d1-approval",
               "[{\"interruptId\":\"approve-d1-approval\",\"status\":\"resolved\","
               "\"payload\":{\"approved\":true}}]",
               "d2-resumed", &r) != 0)
        return -1;
    fprintf(a->info,
            "== dispatch: approve: interrupt approve-d1-approval resolved {approved: true} -> "
            "replacement run d2-resumed, request %llu\n",
            (unsigned long long)r.request);
    return ended_with(a, r.request, "d2-resumed", "success", &info);
}

/* Step 3: a long run cancelled through the bus. */
static int cancel(act_t *a)
{
    uint64_t id = 0;
    ab_request_info_t info;
    if (start(a, "d3-long", "long", &id) != 0 || wait_state(a, id, AB_REQ_STARTED, &info) != 0)
        return -1;
    ab_cancel_run_t c = {SV(a->thread), SV("d3-long"), SV("the demo cancels it")};
    ab_cancel_reply_t r;
    ab_error_t e = AB_ERROR_INIT;
    if (ab_conn_cancel_run(a->c, &c, a->doc, &r, ACT_MS, &e) != AB_OK)
        return failed(a, "cancel_run of %s: %s", "d3-long", &e);
    fprintf(a->info, "== dispatch: cancel_run d3-long -> %s\n",
            r.outcome == AB_CANCEL_DELIVERED ? "delivered to its worker" : "not delivered");
    if (r.outcome != AB_CANCEL_DELIVERED)
        return failed(a, "%s", "cancel_run of a started run was not delivered", NULL);
    return ended_with(a, id, "d3-long", "cancelled", &info);
}

/* Step 4: the worker holding an assignment is killed before RUN_STARTED; the other runs it. */
static int kill_one(act_t *a)
{
    uint64_t id = 0;
    ab_request_info_t info;
    if (start(a, "d4-reassigned", "slow", &id) != 0 ||
        wait_state(a, id, AB_REQ_ASSIGNED, &info) != 0)
        return -1;
    char holder[AB_WORKER_NAME_MAX + 1];
    snprintf(holder, sizeof holder, "%.*s", (int)info.worker.len, info.worker.ptr);
    int k = strstr(holder, "dispatch-1-") ? 0 : 1;
    fprintf(a->info, "== dispatch: d4-reassigned is assigned to %s; killing it (pid %ld)\n", holder,
            (long)a->pid[k]);
    fflush(a->info);
    reap(a->pid[k], SIGKILL);
    a->pid[k] = 0;
    /* the other worker gets it once the lease lapses, and plays it at once (attempt 2) */
    if (ended_with(a, id, "d4-reassigned", "success", &info) != 0)
        return -1;
    if (info.attempts != 2)
        return failed(a, "%s", "d4-reassigned was not run on its second attempt", NULL);
    return 0;
}

int demo_dispatch_act(FILE *info, const char *ep, const char *thread, int pace_ms, char *why,
                      size_t size)
{
    act_t a = {.info = info, .ep = ep, .thread = thread, .agent = AGENT, .tag = "dispatch"};
    ab_error_t e = AB_ERROR_INIT;
    ab_conn_opts_t o = {.client_name = "agentbus-demo-controller"};
    int rc = -1;
    fprintf(info, "== dispatch: thread %s: runs started through the bus on 2 worker processes\n",
            thread);
    if (ab_doc_new(&a.doc) != AB_OK || ab_doc_new(&a.idoc) != AB_OK ||
        ab_conn_new(&a.c, ep, &o, &e) != AB_OK) {
        snprintf(a.why, sizeof a.why, "cannot connect: %s", e.message);
        goto done;
    }
    for (int k = 0; k < 2; k++) {
        a.pid[k] = spawn_dworker(ep, k + 1, pace_ms);
        if (k == 0 && wait_workers(&a, 1) != 0)
            goto done; /* worker 1 registers first: ties of free capacity go to it */
    }
    if (wait_workers(&a, 2) == 0 && approve(&a) == 0 && cancel(&a) == 0 && kill_one(&a) == 0)
        rc = 0;
done:
    for (int k = 0; k < 2; k++)
        reap(a.pid[k], SIGTERM);
    ab_conn_destroy(&a.c);
    ab_doc_destroy(&a.doc);
    ab_doc_destroy(&a.idoc);
    snprintf(why, size, "%s", a.why);
    if (rc == 0)
        fprintf(info, "== dispatch: OK: approved, cancelled and reassigned through the bus\n");
    fflush(info);
    return rc;
}

/* ---- the third act: a Python worker ----------------------------------------------- */

#define PY_AGENT "demo-py"

/* $AGENTBUS_PYTHON (default /usr/bin/python3 when it exists, else python3) @p script --broker EP
 * --agent demo-py; its stdout goes to stderr, so the demo's own output (JSON Lines with --json)
 * stays clean. */
static pid_t spawn_python(const char *script, const char *ep)
{
    const char *py = getenv("AGENTBUS_PYTHON");
    if ((py == NULL || *py == '\0') && access("/usr/bin/python3", X_OK) == 0)
        py = "/usr/bin/python3"; /* Debian's, where python3-zmq and python3-msgpack install */
    char name[48];
    snprintf(name, sizeof name, "agentbus-demo-python-%ld", (long)getpid());
    const char *argv[] = {py && *py ? py : "python3",
                          script,
                          "--broker",
                          ep,
                          "--agent",
                          PY_AGENT,
                          "--name",
                          name,
                          NULL};
    char *args[9];
    memcpy(args, argv, sizeof(args)); /* execvp's prototype is not const-correct */
    demo_secure_child_env(true);      /* --secure: the worker gets the agents' key */
    pid_t pid = spawn_fork_child();
    if (pid == 0) { /* only async-signal-safe calls until the exec */
        dup2(STDERR_FILENO, STDOUT_FILENO);
        execvp(args[0], args);
        _exit(127);
    }
    demo_secure_child_env(false);
    return pid;
}

int demo_python_act(FILE *info, const char *ep, const char *thread, const char *script, char *why,
                    size_t size)
{
    act_t a = {.info = info, .ep = ep, .thread = thread, .agent = PY_AGENT, .tag = "python"};
    ab_error_t e = AB_ERROR_INIT;
    ab_conn_opts_t o = {.client_name = "agentbus-demo-controller"};
    uint64_t id = 0;
    ab_request_info_t ri;
    ab_run_accepted_t r;
    int rc = -1;
    fprintf(info, "== python: thread %s: a Python worker (%s) serves %s\n", thread, script,
            PY_AGENT);
    if (ab_doc_new(&a.doc) != AB_OK || ab_doc_new(&a.idoc) != AB_OK ||
        ab_conn_new(&a.c, ep, &o, &e) != AB_OK) {
        snprintf(a.why, sizeof a.why, "cannot connect: %s", e.message);
        goto done;
    }
    a.pid[0] = spawn_python(script, ep);
    /* the example streams text, calls a tool and asks to approve (interrupt
     * approve-<run>); the run that resumes it deploys and succeeds */
    if (a.pid[0] > 0 && wait_workers(&a, 1) == 0 && start(&a, "p1-deploy", "python", &id) == 0 &&
        ended_with(&a, id, "p1-deploy", "interrupt", &ri) == 0 &&
        resume(&a, "p1-deploy", "[{\"interruptId\":\"approve-p1-deploy\",\"status\":\"resolved\"}]",
               "p2-deploy", &r) == 0) {
        fprintf(info,
                "== python: approve: interrupt approve-p1-deploy resolved -> run p2-deploy, "
                "request %llu\n",
                (unsigned long long)r.request);
        rc = ended_with(&a, r.request, "p2-deploy", "success", &ri);
    }
done:
    reap(a.pid[0], SIGTERM);
    ab_conn_destroy(&a.c);
    ab_doc_destroy(&a.doc);
    ab_doc_destroy(&a.idoc);
    snprintf(why, size, "%s", a.why);
    if (rc == 0)
        fprintf(info, "== python: OK: a Python worker's run interrupted, approved and resumed\n");
    fflush(info);
    return rc;
}

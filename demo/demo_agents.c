/*
 * demo_agents.c - the agent workers of `agentbus demo`: each is a process
 * of its own (the demo re-executes itself as `agentbus demo --agent-worker
 * K ...`, demo/demo.c) with its own ab_producer_t that claims its runs one
 * after the other on the demo's thread and publishes realistic AG-UI 1.0
 * runs, paced so that an observer reads them like live work; after each run
 * it writes one report line (demo_report_run()) on its stdout, a pipe the
 * demo reads.
 *
 * Invariants:
 *  1. Every run is a legal AG-UI 1.0 run on its own (the strict check and
 *     the lifecycle checker accept it): RUN_STARTED with protocolVersion
 *     "1.0" first, every message/tool call/step/reasoning span closed before
 *     RUN_FINISHED, ids unique within the thread (prefixed by the run id).
 *  2. The first failure of a run is sticky (later events of the run are not
 *     sent); it is recorded in run->why and the agent goes on with its next
 *     run on a fresh producer.
 *  3. An agent touches only the producer side of its own runs (demo.h).
 *  4. A report line is one line: the failure text has no newline, and the
 *     line is flushed at once, so the demo sees each run as it ends.
 */
#include "agentbus/json.h"
#include "agentbus/producer.h"
#include "agentbus/worker.h"
#include "demo.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Publishing context of one run. */
struct actx {
    demo_agent_t *ag;
    demo_run_t *r;
    ab_producer_t *p;
    const char *ask; /* DEMO_RESUME: the approval run it answers */
    bool failed;
};

const char *demo_kind_name(demo_kind_t k)
{
    static const char *const names[DEMO_NKINDS] = {"planner", "researcher", "approval",
                                                   "resume",  "failing",    "cancelled"};
    return k < DEMO_NKINDS ? names[k] : "?";
}

const char *demo_kind_outcome(demo_kind_t k)
{
    static const char *const outcomes[DEMO_NKINDS] = {"success", "success", "interrupt",
                                                      "success", "error",   "cancelled"};
    return k < DEMO_NKINDS ? outcomes[k] : "?";
}

/* Wait @p ms (0: only look), answering the agent's action calls meanwhile. */
static void serve_for(demo_agent_t *ag, int ms)
{
    ab_error_t err = AB_ERROR_INIT;
    if (ag->worker != NULL && ab_worker_run(ag->worker, ms > 0 ? ms : 1, &err) == AB_OK)
        return;
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL); /* pacing so it reads like live work (intended) */
}

static void pace(const struct actx *a)
{
    serve_for(a->ag, a->ag->pace_ms);
}

void demo_agent_name(int index, char *out, size_t size)
{
    snprintf(out, size, "agent-%d", index + 1);
}

/* Action "status": which run the agent plays and how much it has published. */
static ab_status_t on_action(void *ud, const ab_action_call_t *call, ab_buf_t *result,
                             ab_error_t *err)
{
    const demo_agent_t *ag = ud;
    (void)call;
    char text[256];
    int n = snprintf(text, sizeof(text),
                     "{\"agent\":%d,\"pid\":%ld,\"run\":\"%s\",\"runs\":%d,"
                     "\"published\":%llu}",
                     ag->index + 1, (long)getpid(), ag->current ? ag->current->run : "", ag->nruns,
                     (unsigned long long)ag->published);
    if (ab_buf_append(result, text, (size_t)n) != AB_OK)
        return ab_error_set(err, AB_NOMEM, "", "out of memory");
    return AB_OK;
}

/* Serve agent-K with action "status"; a broker without workers leaves ag->worker NULL. */
static void start_worker(demo_agent_t *ag)
{
    char name[48], agent[32];
    snprintf(name, sizeof(name), "agentbus-demo-agent-%d", ag->index + 1);
    demo_agent_name(ag->index, agent, sizeof(agent));
    static const char *const actions[] = {"status"};
    ab_worker_opts_t o = {.name = name};
    ab_error_t err = AB_ERROR_INIT;
    if (ab_worker_new(&ag->worker, ag->endpoint, &o, &err) != AB_OK)
        return;
    ab_worker_on_action(ag->worker, on_action, ag);
    if (ab_worker_add_agent(ag->worker, agent, 1, actions, 1, &err) != AB_OK ||
        ab_worker_serve(ag->worker, &err) != AB_OK)
        ab_worker_destroy(&ag->worker);
}

/* After the last run: keep answering until the demo's one status call came (or 3 s). */
static void linger(demo_agent_t *ag)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (ag->worker != NULL && ab_worker_stats(ag->worker).calls == 0 && !*ag->stop) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec >= 3)
            break;
        serve_for(ag, 100);
    }
}

static void fail(struct actx *a, const char *what, const ab_error_t *err)
{
    a->failed = true;
    snprintf(a->r->why, sizeof(a->r->why), "%s: %s: %.180s", what, ab_status_name(err->code),
             err->message);
}

/* Publish one event (printf-style JSON); sticky failure (invariant 2). */
__attribute__((format(printf, 2, 3))) static void emit(struct actx *a, const char *fmt, ...)
{
    if (a->failed)
        return;
    if (*a->ag->stop) {
        a->failed = true;
        snprintf(a->r->why, sizeof(a->r->why), "interrupted");
        return;
    }
    char json[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(json, sizeof(json), fmt, ap);
    va_end(ap);
    ab_error_t err = AB_ERROR_INIT;
    if (n < 0 || (size_t)n >= sizeof(json)) {
        ab_error_set(&err, AB_TOO_LARGE, NULL, "demo event too long");
        fail(a, "build", &err);
        return;
    }
    if (ab_producer_publish_json(a->p, json, (size_t)n, &err) != AB_OK) {
        fail(a, "publish", &err);
        return;
    }
    a->r->published++;
    a->ag->published++;
    if (a->ag->pace_ms > 0 && ab_producer_flush(a->p, 0, &err) != AB_OK)
        fail(a, "flush", &err); /* paced: each event goes out as it happens */
    pace(a);
}

/* RUN_STARTED (protocolVersion "1.0") of an ordinary or approval run; @p ask,
 * the user's request, is not sent. It echoes no input: the demo's
 * agents share one thread and run at once, and a RUN_STARTED with input
 * while the thread's approval is pending is refused (docs/SEQUENCER.md rule
 * 7), so only the resume run, which answers it, carries one. */
static void run_started(struct actx *a, const char *ask)
{
    (void)ask;
    emit(a,
         "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\",\"protocolVersion\":"
         "\"1.0\"}",
         a->ag->thread, a->r->run);
}

static void run_finished(struct actx *a, const char *tail)
{
    emit(a, "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\"%s}", a->ag->thread,
         a->r->run, tail);
}

/* A text message (or, with @p reasoning, a reasoning message) streamed a
 * word at a time. @p text has no quote or backslash. */
static void stream_text(struct actx *a, const char *id, const char *text, bool reasoning)
{
    const char *kind = reasoning ? "REASONING_MESSAGE" : "TEXT_MESSAGE";
    const char *role = reasoning ? "reasoning" : "assistant";
    emit(a, "{\"type\":\"%s_START\",\"messageId\":\"%s-%s\",\"role\":\"%s\"}", kind, a->r->run, id,
         role);
    for (const char *s = text; *s;) {
        const char *e = strchr(s, ' ');
        int len = e ? (int)(e - s) + 1 : (int)strlen(s);
        emit(a, "{\"type\":\"%s_CONTENT\",\"messageId\":\"%s-%s\",\"delta\":\"%.*s\"}", kind,
             a->r->run, id, len, s);
        s += len;
    }
    emit(a, "{\"type\":\"%s_END\",\"messageId\":\"%s-%s\"}", kind, a->r->run, id);
}

/* A tool call with its arguments streamed in pieces (JSON-escaped text). */
static void tool_call(struct actx *a, const char *id, const char *name, const char *parent,
                      const char *const *args, int nargs)
{
    const char *r = a->r->run;
    emit(a,
         "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"%s-%s\",\"toolCallName\":\"%s\","
         "\"parentMessageId\":\"%s-%s\"}",
         r, id, name, r, parent);
    for (int i = 0; i < nargs; i++)
        emit(a, "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"%s-%s\",\"delta\":\"%s\"}", r, id,
             args[i]);
    emit(a, "{\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"%s-%s\"}", r, id);
}

static void task(struct actx *a, int i, const char *title, const char *who, const char *status)
{
    emit(a,
         "{\"type\":\"CUSTOM\",\"name\":\"agentkit.task\",\"value\":{\"taskId\":\"%s-t%d\","
         "\"title\":\"%s\",\"assignee\":\"%s\",\"status\":\"%s\"}}",
         a->r->run, i + 1, title, who, status);
    emit(a,
         "{\"type\":\"STATE_DELTA\",\"delta\":[{\"op\":\"replace\",\"path\":\"/tasks/%d/status\","
         "\"value\":\"%s\"}]}",
         i, status);
}

static void play_planner(struct actx *a)
{
    run_started(a, "Plan the launch of the v2 API");
    emit(a, "{\"type\":\"STEP_STARTED\",\"stepName\":\"plan\"}");
    stream_text(a, "m1", "I will split the launch into three tasks and hand them to the team.",
                false);
    emit(a, "{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":{\"goal\":\"launch the v2 API\",\"tasks\":["
            "{\"title\":\"research rate limits\",\"status\":\"todo\"},"
            "{\"title\":\"update the docs\",\"status\":\"todo\"},"
            "{\"title\":\"deploy to production\",\"status\":\"todo\"}]}}");
    task(a, 0, "research rate limits", "researcher", "assigned");
    task(a, 1, "update the docs", "writer", "assigned");
    task(a, 2, "deploy to production", "approver", "needs_approval");
    emit(a, "{\"type\":\"STEP_FINISHED\",\"stepName\":\"plan\"}");
    run_finished(a, ",\"outcome\":{\"type\":\"success\"},\"result\":{\"tasks\":3}");
}

static void play_researcher(struct actx *a)
{
    const char *r = a->r->run;
    run_started(a, "What rate limits do similar APIs use?");
    emit(a, "{\"type\":\"REASONING_START\",\"messageId\":\"%s-think\"}", r);
    stream_text(a, "think", "Compare the published limits of three public APIs first.", true);
    emit(a, "{\"type\":\"REASONING_END\",\"messageId\":\"%s-think\"}", r);
    stream_text(a, "m1", "Let me search for published rate limits.", false);
    static const char *const args[] = {"{\\\"query\\\":", "\\\"API rate limits\\\",",
                                       "\\\"top\\\":3}"};
    tool_call(a, "c1", "web_search", "m1", args, 3);
    emit(a,
         "{\"type\":\"TOOL_CALL_RESULT\",\"messageId\":\"%s-tr\",\"toolCallId\":\"%s-c1\","
         "\"content\":\"3 results: 100 req/s, 50 req/s, 1000 req/min\",\"role\":\"tool\"}",
         r, r);
    stream_text(a, "m2", "Most APIs allow 50 to 100 requests per second; I suggest 80.", false);
    run_finished(a, ",\"outcome\":{\"type\":\"success\"},\"result\":{\"suggestedLimit\":80}");
}

static void play_approval(struct actx *a)
{
    const char *r = a->r->run;
    run_started(a, "Deploy v2 to production");
    stream_text(a, "m1", "The release is ready; deploying needs a human approval.", false);
    static const char *const args[] = {"{\\\"service\\\":\\\"api\\\",",
                                       "\\\"version\\\":\\\"2.0.0\\\"}"};
    tool_call(a, "c1", "deploy", "m1", args, 2);
    char tail[512];
    snprintf(tail, sizeof(tail),
             ",\"outcome\":{\"type\":\"interrupt\",\"interrupts\":[{\"id\":\"int-%s\",\"reason\":"
             "\"tool_call\",\"toolCallId\":\"%s-c1\",\"message\":\"Deploy api 2.0.0 to "
             "production?\"}]}",
             r, r);
    run_finished(a, tail);
}

static void play_resume(struct actx *a)
{
    const char *t = a->ag->thread, *r = a->r->run, *ask = a->ask ? a->ask : "none";
    emit(a,
         "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\",\"protocolVersion\":"
         "\"1.0\",\"input\":{\"threadId\":\"%s\",\"runId\":\"%s\",\"messages\":[],\"resume\":[{"
         "\"interruptId\":\"int-%s\",\"status\":\"resolved\",\"payload\":{\"approved\":true,"
         "\"by\":\"demo-user\"}}]}}",
         t, r, t, r, ask);
    emit(a,
         "{\"type\":\"TOOL_CALL_RESULT\",\"messageId\":\"%s-tr\",\"toolCallId\":\"%s-c1\","
         "\"content\":\"deployed api 2.0.0\",\"role\":\"tool\"}",
         r, ask);
    stream_text(a, "m1", "Approved and deployed: api 2.0.0 is live.", false);
    run_finished(a, ",\"outcome\":{\"type\":\"success\"}");
}

static void play_failing(struct actx *a)
{
    run_started(a, "Sync the changelog from the tracker");
    emit(a, "{\"type\":\"STEP_STARTED\",\"stepName\":\"fetch\"}");
    stream_text(a, "m1", "Fetching the changelog from the tracker.", false);
    static const char *const args[] = {"{\\\"url\\\":", "\\\"https://tracker.example/log\\\"}"};
    tool_call(a, "c1", "http_get", "m1", args, 2);
    emit(a, "{\"type\":\"RUN_ERROR\",\"message\":\"tracker returned 503 Service Unavailable\","
            "\"code\":\"upstream_unavailable\"}");
}

static void play_cancelled(struct actx *a)
{
    run_started(a, "Re-index the whole knowledge base");
    emit(a, "{\"type\":\"STEP_STARTED\",\"stepName\":\"index\"}");
    stream_text(a, "m1", "Re-indexing 12000 documents; this will take a while.", false);
    for (int pct = 10; pct <= 30; pct += 10)
        emit(a, "{\"type\":\"CUSTOM\",\"name\":\"agentkit.progress\",\"value\":{\"percent\":%d}}",
             pct);
    emit(a, "{\"type\":\"STEP_FINISHED\",\"stepName\":\"index\"}");
    run_finished(a, ",\"outcome\":{\"type\":\"cancelled\"}");
}

static void play(struct actx *a)
{
    switch (a->r->kind) {
    case DEMO_PLANNER: play_planner(a); break;
    case DEMO_RESEARCHER: play_researcher(a); break;
    case DEMO_APPROVAL: play_approval(a); break;
    case DEMO_RESUME: play_resume(a); break;
    case DEMO_FAILING: play_failing(a); break;
    default: play_cancelled(a); break;
    }
}

/* Claim, play and flush one run on @p p (invariant 2). */
static void one_run(demo_agent_t *ag, ab_producer_t *p, demo_run_t *r, const char *ask)
{
    struct actx a = {.ag = ag, .r = r, .p = p, .ask = ask};
    ab_error_t err = AB_ERROR_INIT;
    uint64_t acked0 = ab_producer_stats(p).acked;
    if (ab_producer_claim(p, ag->thread, r->run, NULL, &err) != AB_OK)
        fail(&a, "claim", &err);
    else
        play(&a);
    ab_error_t ferr = AB_ERROR_INIT;
    if (ab_producer_flush(p, 10000, &ferr) != AB_OK && !a.failed)
        fail(&a, "flush", &ferr);
    r->acked = ab_producer_stats(p).acked - acked0;
    r->done = !a.failed;
}

int demo_report_run(FILE *f, const demo_run_t *r)
{
    char why[sizeof(r->why)];
    snprintf(why, sizeof(why), "%s", r->why);
    for (char *c = why; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' '; /* invariant 4 */
    if (fprintf(f, "run %s %llu %llu %d %s\n", r->run, (unsigned long long)r->published,
                (unsigned long long)r->acked, r->done ? 1 : 0, why) < 0)
        return -1;
    return fflush(f) == 0 ? 0 : -1;
}

int demo_parse_report(const char *line, demo_run_t *runs, int nruns, int agent)
{
    char id[64];
    unsigned long long pub, ack;
    int done, off = 0;
    if (sscanf(line, "run %63s %llu %llu %d%n", id, &pub, &ack, &done, &off) != 4)
        return -1;
    for (int i = 0; i < nruns; i++) {
        demo_run_t *r = &runs[i];
        if (strcmp(r->run, id) != 0 || r->agent != agent)
            continue;
        r->published = pub;
        r->acked = ack;
        r->done = done == 1;
        const char *why = line + off;
        while (*why == ' ')
            why++;
        snprintf(r->why, sizeof(r->why), "%s", why);
        r->reported = true;
        return 0;
    }
    return -1;
}

/* Report a run (invariant 4); a demo that went away stops the agent. */
static void report(demo_agent_t *ag, const demo_run_t *r)
{
    if (ag->report && demo_report_run(ag->report, r) != 0)
        *ag->stop = 1;
}

/* One producer per agent for all its runs; a new one after a failed run. */
void demo_agent_main(demo_agent_t *ag)
{
    const char *ask = NULL;
    char name[48];
    snprintf(name, sizeof(name), "agentbus-demo-agent-%d", ag->index + 1);
    ab_producer_opts_t po = {.client_name = name, .timeout_ms = 5000};
    ab_producer_t *p = NULL;
    start_worker(ag);
    for (int i = 0; i < ag->nruns; i++) {
        demo_run_t *r = ag->runs[i];
        ag->current = r;
        ab_error_t err = AB_ERROR_INIT;
        if (*ag->stop) {
            snprintf(r->why, sizeof(r->why), "interrupted");
            ag->failed++;
            report(ag, r);
            continue;
        }
        if (!p && ab_producer_new(&p, ag->endpoint, &po, &err) != AB_OK) {
            snprintf(r->why, sizeof(r->why), "connect: %s: %.180s", ab_status_name(err.code),
                     err.message);
            ag->failed++;
            report(ag, r);
            continue;
        }
        one_run(ag, p, r, ask);
        ask = r->kind == DEMO_APPROVAL ? r->run : NULL;
        if (!r->done) {
            ag->failed++;
            ab_producer_destroy(&p);
        }
        report(ag, r);
    }
    ag->current = NULL;
    ab_producer_destroy(&p);
    linger(ag);
    ab_worker_destroy(&ag->worker);
}

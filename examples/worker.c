/*
 * worker.c - a worker on the client library (agentbus/worker.h): it serves
 * one agent with the actions named on the command line and answers them
 * until SIGINT/SIGTERM:
 *
 *   worker ENDPOINT NAME AGENT [ACTION...]
 *
 * Action `echo` answers its payload; `fail` answers an invalid_argument
 * error; `sleep` takes the payload's milliseconds (at most 5 s) before it
 * answers; any other action answers {"agent": ..., "action": ..., "thread": ...}.
 * Prints "worker ready id=ID lease=MS" once registered, and its counters
 * when it stops.
 *
 * It also runs the agent (capacity 4): an assigned run publishes
 * RUN_STARTED (echoing its input), one text message of `steps` deltas, one
 * every `step_ms`, and RUN_FINISHED; the input's forwardedProps choose
 * {"steps": N (3), "step_ms": MS (0), "interrupt": true (finish with one
 * interrupt, id "approve-1"), "decline": true (decline the assignment)}.
 * A cancel ends the run with outcome cancelled at its next step (closing its
 * text message first when it is open). A resumed run (input.resume) says
 * what it was told. Each run line is printed
 * ("run THREAD/RUN started|finished|cancelled|interrupted").
 */
#include <agentbus/agentbus.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOTS 4

static volatile sig_atomic_t stop;

/* One run in progress, stepped by the main loop so cancels arrive between steps. */
typedef struct slot {
    ab_producer_t *p; /* kept for the next run once made */
    bool busy, cancel;
    char thread[AB_ID_MAX_BYTES + 1], run[AB_ID_MAX_BYTES + 1];
    long steps, step, step_ms, next_ms;
    bool interrupt;
    char resumed[256]; /* the first resume entry's status, "" = not a resume */
} slot_t;

typedef struct app {
    const char *endpoint;
    slot_t slots[SLOTS];
} app_t;

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static long prop(const ab_val_t *input, const char *key, long dflt)
{
    const ab_val_t *v = ab_val_get(ab_val_get(input, "forwardedProps"), key);
    if (v && v->type == AB_VAL_INT)
        return (long)v->u.i;
    if (v && v->type == AB_VAL_BOOL)
        return v->u.b;
    return dflt;
}

static void on_assign(void *ud, ab_worker_t *w, const ab_assign_t *a)
{
    app_t *app = ud;
    ab_error_t e = AB_ERROR_INIT;
    slot_t *s = NULL;
    for (int i = 0; i < SLOTS && !s; i++)
        s = app->slots[i].busy ? NULL : &app->slots[i];
    if (s == NULL || prop(a->input, "decline", 0)) {
        if (ab_worker_decline(w, a->request, a->epoch, s ? "asked to" : "full", &e) != AB_OK)
            fprintf(stderr, "worker: decline: %s\n", e.message);
        return;
    }
    ab_producer_opts_t po = {.timeout_ms = 5000};
    if (s->p == NULL && ab_producer_new(&s->p, app->endpoint, &po, &e) != AB_OK) {
        fprintf(stderr, "worker: producer: %s\n", e.message);
        return; /* the lease keeps it assigned; another worker gets it if this one goes */
    }
    snprintf(s->thread, sizeof(s->thread), "%.*s", (int)a->thread.len, a->thread.ptr);
    snprintf(s->run, sizeof(s->run), "%.*s", (int)a->run.len, a->run.ptr);
    if (ab_producer_assigned(s->p, s->thread, s->run, a->epoch, &e) != AB_OK) {
        fprintf(stderr, "worker: assigned: %s\n", e.message);
        return;
    }
    s->busy = true;
    s->cancel = false;
    s->step = 0;
    s->steps = prop(a->input, "steps", 3);
    s->step_ms = prop(a->input, "step_ms", 0);
    s->interrupt = prop(a->input, "interrupt", 0);
    s->next_ms = now_ms();
    s->resumed[0] = '\0';
    const ab_val_t *res = ab_val_get(a->input, "resume");
    if (res && res->type == AB_VAL_ARRAY && res->len > 0) {
        const ab_val_t *st = ab_val_get(&res->u.items[0], "status");
        snprintf(s->resumed, sizeof(s->resumed), "%.*s", st ? (int)st->len : 0, st ? st->u.s : "");
    }
    ab_buf_t in = AB_BUF_INIT, ev = AB_BUF_INIT;
    if (ab_val_to_json(a->input, &in) == AB_OK) {
        char head[1200];
        int n = snprintf(head, sizeof(head),
                         "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                         "\"protocolVersion\":\"1.0\",\"input\":",
                         s->thread, s->run);
        if (ab_buf_append(&ev, head, (size_t)n) == AB_OK &&
            ab_buf_append(&ev, in.data, in.len) == AB_OK && ab_buf_append(&ev, "}", 1) == AB_OK &&
            ab_producer_publish_json(s->p, (const char *)ev.data, ev.len, &e) == AB_OK &&
            ab_producer_flush(s->p, 5000, &e) == AB_OK)
            printf("run %s/%s started\n", s->thread, s->run);
        else
            fprintf(stderr, "worker: RUN_STARTED: %s\n", e.message);
    }
    ab_buf_free(&in);
    ab_buf_free(&ev);
    fflush(stdout);
}

static void on_cancel(void *ud, ab_worker_t *w, const ab_run_cancel_t *c)
{
    app_t *app = ud;
    (void)w;
    for (int i = 0; i < SLOTS; i++) {
        slot_t *s = &app->slots[i];
        if (s->busy && strlen(s->run) == c->run.len && memcmp(s->run, c->run.ptr, c->run.len) == 0)
            s->cancel = true;
    }
}

static void publish(slot_t *s, const char *json, ab_error_t *e)
{
    if (ab_producer_publish_json(s->p, json, strlen(json), e) == AB_OK &&
        ab_producer_flush(s->p, 5000, e) != AB_OK)
        return; /* e says why */
}

/* One step of a busy slot: the next event of its run. */
static void step(slot_t *s)
{
    ab_error_t e = AB_ERROR_INIT;
    char ev[1024];
    const char *end = NULL;
    if (s->cancel && s->step > 0 && s->step <= s->steps + 1) {
        /* the text message is open: close it first (a run may not end with it open) */
        snprintf(ev, sizeof(ev), "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m-%s\"}", s->run);
        s->step = s->steps + 1;
    } else if (s->cancel) {
        end = "cancelled";
        snprintf(ev, sizeof(ev),
                 "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                 "\"outcome\":{\"type\":\"cancelled\"}}",
                 s->thread, s->run);
    } else if (s->step == 0) {
        snprintf(ev, sizeof(ev),
                 "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m-%s\",\"role\":"
                 "\"assistant\"}",
                 s->run);
    } else if (s->step <= s->steps) {
        snprintf(ev, sizeof(ev),
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-%s\",\"delta\":"
                 "\"%s%ld \"}",
                 s->run, s->resumed[0] ? s->resumed : "step ", s->step);
    } else if (s->step == s->steps + 1) {
        snprintf(ev, sizeof(ev), "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m-%s\"}", s->run);
    } else if (s->interrupt && !s->resumed[0]) {
        end = "interrupted";
        snprintf(ev, sizeof(ev),
                 "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                 "\"outcome\":{\"type\":\"interrupt\",\"interrupts\":[{\"id\":"
                 "\"approve-1\",\"reason\":\"confirmation\",\"message\":\"go on?\"}]}}",
                 s->thread, s->run);
    } else {
        end = "finished";
        snprintf(ev, sizeof(ev), "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\"}",
                 s->thread, s->run);
    }
    publish(s, ev, &e);
    s->step++;
    s->next_ms = now_ms() + s->step_ms;
    if (e.code != AB_OK) {
        fprintf(stderr, "worker: run %s: %s\n", s->run, e.message);
        ab_producer_destroy(&s->p); /* a failed producer is not reused */
        s->busy = false;
    } else if (end) {
        printf("run %s/%s %s\n", s->thread, s->run, end);
        fflush(stdout);
        s->busy = false;
    }
}

/* Step every run that is due; @return ms until the next is due (100 when none). */
static int step_all(app_t *app)
{
    long wait = 100, now = now_ms();
    for (int i = 0; i < SLOTS; i++) {
        slot_t *s = &app->slots[i];
        if (s->busy && s->next_ms <= now)
            step(s);
        if (s->busy)
            wait = s->next_ms - now < wait ? (s->next_ms - now > 0 ? s->next_ms - now : 0) : wait;
    }
    return (int)wait;
}

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static ab_status_t on_action(void *ud, const ab_action_call_t *call, ab_buf_t *result,
                             ab_error_t *err)
{
    (void)ud;
    if (call->action.len == 4 && memcmp(call->action.ptr, "echo", 4) == 0)
        return call->payload ? ab_val_to_json(call->payload, result) : AB_OK;
    if (call->action.len == 4 && memcmp(call->action.ptr, "fail", 4) == 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "payload", "this action always fails");
    if (call->action.len == 5 && memcmp(call->action.ptr, "sleep", 5) == 0) {
        /* work that takes a while: the payload's milliseconds, at most 5 s */
        long ms = call->payload && call->payload->type == AB_VAL_INT ? (long)call->payload->u.i : 0;
        ms = ms < 0 ? 0 : ms > 5000 ? 5000 : ms;
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        return ab_buf_append(result, "\"slept\"", 7);
    }
    char text[1024];
    int n =
        snprintf(text, sizeof(text), "{\"agent\":\"%.*s\",\"action\":\"%.*s\",\"thread\":\"%.*s\"}",
                 (int)call->agent.len, call->agent.ptr, (int)call->action.len, call->action.ptr,
                 (int)call->thread.len, call->thread.ptr ? call->thread.ptr : "");
    return ab_buf_append(result, text, (size_t)n);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: worker ENDPOINT NAME AGENT [ACTION...]\n");
        return 2;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    ab_error_t err = AB_ERROR_INIT;
    ab_worker_t *w = NULL;
    ab_worker_opts_t o = {.name = argv[2]};
    app_t app = {.endpoint = argv[1]};
    int rc = 1;
    if (ab_worker_new(&w, argv[1], &o, &err) != AB_OK ||
        ab_worker_add_agent(w, argv[3], SLOTS, (const char *const *)argv + 4, (size_t)(argc - 4),
                            &err) != AB_OK)
        goto done;
    ab_worker_on_action(w, on_action, NULL);
    ab_worker_on_assign(w, on_assign, &app);
    ab_worker_on_cancel(w, on_cancel, &app);
    if (ab_worker_serve(w, &err) != AB_OK)
        goto done;
    printf("worker ready id=%s lease=%u\n", ab_worker_id(w), ab_worker_lease_ms(w));
    fflush(stdout);
    for (int wait = 100; !stop; wait = step_all(&app))
        if (ab_worker_run(w, wait, &err) != AB_OK)
            goto done;
    ab_worker_stats_t s = ab_worker_stats(w);
    printf("worker stopped: %llu calls, %llu failed, %llu undelivered, %llu assigned, %llu "
           "declined (%llu refused), %llu cancels\n",
           (unsigned long long)s.calls, (unsigned long long)s.failed,
           (unsigned long long)s.undelivered, (unsigned long long)s.assigned,
           (unsigned long long)s.declined, (unsigned long long)s.decline_refused,
           (unsigned long long)s.cancels);
    rc = 0;
done:
    for (int i = 0; i < SLOTS; i++)
        ab_producer_destroy(&app.slots[i].p);
    if (rc != 0)
        fprintf(stderr, "worker: %s: %s\n", ab_status_name(err.code), err.message);
    ab_worker_destroy(&w);
    return rc;
}

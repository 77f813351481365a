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
 */
#include <agentbus/agentbus.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t stop;

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
    int rc = 1;
    if (ab_worker_new(&w, argv[1], &o, &err) != AB_OK ||
        ab_worker_add_agent(w, argv[3], 4, (const char *const *)argv + 4, (size_t)(argc - 4),
                            &err) != AB_OK)
        goto done;
    ab_worker_on_action(w, on_action, NULL);
    if (ab_worker_serve(w, &err) != AB_OK)
        goto done;
    printf("worker ready id=%s lease=%u\n", ab_worker_id(w), ab_worker_lease_ms(w));
    fflush(stdout);
    while (!stop)
        if (ab_worker_run(w, 100, &err) != AB_OK)
            goto done;
    ab_worker_stats_t s = ab_worker_stats(w);
    printf("worker stopped: %llu calls, %llu failed, %llu undelivered\n",
           (unsigned long long)s.calls, (unsigned long long)s.failed,
           (unsigned long long)s.undelivered);
    rc = 0;
done:
    if (rc != 0)
        fprintf(stderr, "worker: %s: %s\n", ab_status_name(err.code), err.message);
    ab_worker_destroy(&w);
    return rc;
}

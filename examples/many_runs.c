/*
 * many_runs.c - publish many interleaved runs, as a fleet of agents would:
 * RUNS runs of EVENTS events each, OPEN of them in progress at any time, the
 * next event always taken from a random open run (seeded, so a store is
 * reproducible). Each run is RUN_STARTED, TEXT_MESSAGE_START, CONTENT...,
 * TEXT_MESSAGE_END, RUN_FINISHED on one of 64 threads. It fills a store for
 * `agentbus replay --all --verify` measurements (docs/PERFORMANCE.md).
 *
 *   examples/many_runs ENDPOINT RUNS EVENTS OPEN [SEED]
 *
 * Publishes go in requests of 256 envelopes (several runs per request) on
 * one connection; every event must be accepted, else it stops with exit 1.
 */
#include "agentbus/client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 256, THREADS = 64 };

typedef struct slot {
    unsigned long run; /* run number */
    unsigned long seq; /* last seq published */
} slot_t;

static unsigned long long rng = 88172645463325252ull;

static unsigned long next_rand(void)
{
    rng ^= rng << 13; /* xorshift64 */
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned long)(rng >> 11);
}

static void body_of(char *buf, size_t size, const char *th, const char *run, unsigned long seq,
                    unsigned long n)
{
    if (seq == 1)
        snprintf(buf, size,
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                 "\"protocolVersion\":\"1.0\"}",
                 th, run);
    else if (seq == 2)
        snprintf(buf, size, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\"}");
    else if (seq == n - 1)
        snprintf(buf, size, "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m\"}");
    else if (seq == n)
        snprintf(buf, size, "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\"}", th,
                 run);
    else
        snprintf(buf, size,
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"token %lu\"}",
                 seq);
}

static int publish(ab_conn_t *c, ab_doc_t *doc, ab_buf_t *batch, size_t n)
{
    const ab_result_t *res = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_publish(c, batch, n, doc, &res, 30000, &err) != AB_OK) {
        fprintf(stderr, "many_runs: publish: %s: %s\n", ab_status_name(err.code), err.message);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (res[i].status != AB_RESULT_ACCEPTED) {
            fprintf(stderr, "many_runs: event refused: %s\n",
                    res[i].error ? res[i].error->message : "?");
            return -1;
        }
        batch[i].len = 0;
    }
    return 0;
}

/* Append the next event of open run @p s to the batch; @return 1 when the run ended. */
static int next_event(slot_t *s, unsigned long events, ab_buf_t *out)
{
    char th[32], run[32], body[256];
    snprintf(th, sizeof(th), "fleet-%lu", s->run % THREADS);
    snprintf(run, sizeof(run), "r%lu", s->run);
    s->seq++;
    body_of(body, sizeof(body), th, run, s->seq, events);
    ab_error_t err = AB_ERROR_INIT;
    if (ab_envelope_json(out, 1, th, run, s->seq, 1, body, &err) != AB_OK) {
        fprintf(stderr, "many_runs: envelope: %s\n", err.message);
        exit(1);
    }
    return s->seq == events;
}

static int fill(ab_conn_t *c, ab_doc_t *doc, unsigned long runs, unsigned long events,
                unsigned long open)
{
    slot_t *slots = calloc(open, sizeof(*slots));
    ab_buf_t batch[BATCH];
    for (size_t i = 0; i < BATCH; i++)
        batch[i] = (ab_buf_t)AB_BUF_INIT;
    unsigned long started = 0, nopen = 0;
    for (; nopen < open && started < runs; nopen++)
        slots[nopen] = (slot_t){started++, 0};
    size_t n = 0;
    int rc = slots ? 0 : -1;
    while (rc == 0 && nopen > 0) {
        unsigned long k = next_rand() % nopen;
        if (next_event(&slots[k], events, &batch[n++])) {
            if (started < runs)
                slots[k] = (slot_t){started++, 0};
            else
                slots[k] = slots[--nopen];
        }
        if (n == BATCH || (nopen == 0 && n > 0)) {
            rc = publish(c, doc, batch, n);
            n = 0;
        }
    }
    for (size_t i = 0; i < BATCH; i++)
        ab_buf_free(&batch[i]);
    free(slots);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: many_runs ENDPOINT RUNS EVENTS OPEN [SEED]\n");
        return 2;
    }
    unsigned long runs = strtoul(argv[2], NULL, 10), events = strtoul(argv[3], NULL, 10);
    unsigned long open = strtoul(argv[4], NULL, 10);
    if (argc > 5)
        rng ^= strtoull(argv[5], NULL, 10) * 0x9e3779b97f4a7c15ull;
    if (runs == 0 || events < 4 || open == 0) {
        fprintf(stderr, "many_runs: RUNS and OPEN must be > 0, EVENTS >= 4\n");
        return 2;
    }
    ab_conn_opts_t co = {.client_name = "many-runs", .timeout_ms = 30000};
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_new(&c, argv[1], &co, &err) != AB_OK || ab_doc_new(&doc) != AB_OK) {
        fprintf(stderr, "many_runs: %s: %s\n", argv[1], err.message);
        ab_conn_destroy(&c);
        return 1;
    }
    int rc = fill(c, doc, runs, events, open);
    if (rc == 0)
        printf("published %lu runs of %lu events (%lu open at once)\n", runs, events, open);
    ab_doc_destroy(&doc);
    ab_conn_destroy(&c);
    return rc == 0 ? 0 : 1;
}

/*
 * producer.c - the smallest agentbus producer: connect to a broker, claim a
 * run, publish a tiny AG-UI run as JSON, flush, print a summary.
 *
 *   examples/producer [ENDPOINT] [THREAD] [RUN]
 *
 * ENDPOINT defaults to $AGENTBUS_BROKER, else tcp://127.0.0.1:7710. Run it
 * twice with the same ids: the second claim learns the run already ended and
 * the broker answers run_terminal, which the flush reports as a typed error.
 */
#include "agentbus/producer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int report(const char *what, const ab_error_t *err)
{
    char buf[768];
    fprintf(stderr, "producer: %s: %s\n", what, ab_error_format(err, buf, sizeof(buf)));
    return 1;
}

int main(int argc, char **argv)
{
    const char *env = getenv("AGENTBUS_BROKER");
    const char *endpoint = argc > 1 ? argv[1] : (env && *env ? env : "tcp://127.0.0.1:7710");
    const char *thread = argc > 2 ? argv[2] : "example-thread";
    const char *run = argc > 3 ? argv[3] : "example-run";
    ab_error_t err = AB_ERROR_INIT;
    ab_producer_opts_t opts = {.client_name = "example-producer", .timeout_ms = 3000};
    ab_producer_t *p = NULL;
    if (ab_producer_new(&p, endpoint, &opts, &err) != AB_OK)
        return report("connect", &err);
    uint64_t last_seq = 0;
    if (ab_producer_claim(p, thread, run, &last_seq, &err) != AB_OK) {
        ab_producer_destroy(&p);
        return report("claim", &err);
    }
    char events[5][256];
    snprintf(events[0], sizeof(events[0]),
             "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
             "\"protocolVersion\":\"1.0\"}",
             thread, run);
    snprintf(events[1], sizeof(events[1]),
             "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m1\",\"role\":\"assistant\"}");
    snprintf(events[2], sizeof(events[2]),
             "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"Hello, bus\"}");
    snprintf(events[3], sizeof(events[3]), "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m1\"}");
    snprintf(events[4], sizeof(events[4]),
             "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\"}", thread, run);
    int rc = 0;
    for (int i = 0; i < 5 && rc == 0; i++)
        if (ab_producer_publish_json(p, events[i], strlen(events[i]), &err) != AB_OK)
            rc = report("publish", &err);
    if (rc == 0 && ab_producer_flush(p, 3000, &err) != AB_OK)
        rc = report("flush", &err);
    if (rc == 0) {
        ab_producer_stats_t s = ab_producer_stats(p);
        printf("published %llu events to thread %s run %s (seq %llu..%llu, epoch %llu)\n",
               (unsigned long long)s.acked, thread, run, (unsigned long long)last_seq + 1,
               (unsigned long long)ab_producer_acked_seq(p),
               (unsigned long long)ab_producer_epoch(p));
    }
    ab_producer_destroy(&p);
    return rc;
}

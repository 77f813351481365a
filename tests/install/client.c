/*
 * client.c - a small program built against an installed agentbus, as a user
 * would build one (tests/install/run.sh builds it with pkg-config, with
 * -lagentbus alone and with find_package): it publishes run RUN of thread
 * "inst" to the broker at ENDPOINT with a producer and reads it back with a
 * replay. Each build publishes its own run. Prints "client ok: N events" and
 * exits 0, or says why not.
 */
#include <agentbus/agentbus.h>

#include <stdio.h>
#include <string.h>

static int failed(const char *what, const ab_error_t *err)
{
    fprintf(stderr, "client: %s: %s: %s\n", what, ab_status_name(err->code), err->message);
    return 1;
}

static ab_status_t count_row(void *ud, const ab_stamp_t *st, const uint8_t *ev, size_t len,
                             ab_error_t *err)
{
    (void)st;
    (void)ev;
    (void)len;
    (void)err;
    ++*(unsigned *)ud;
    return AB_OK;
}

/* Publish a three-event run: started, a message chunk, finished. */
static int publish(ab_producer_t *p, const char *run, ab_error_t *err)
{
    char ev[3][256];
    snprintf(ev[0], sizeof ev[0],
             "{\"type\":\"RUN_STARTED\",\"threadId\":\"inst\",\"runId\":\"%s\",\"protocolVersion\":"
             "\"1.0\"}",
             run);
    snprintf(ev[1], sizeof ev[1],
             "{\"type\":\"TEXT_MESSAGE_CHUNK\",\"messageId\":\"m-%s\",\"role\":\"assistant\","
             "\"delta\":\"installed\"}",
             run);
    snprintf(ev[2], sizeof ev[2],
             "{\"type\":\"RUN_FINISHED\",\"threadId\":\"inst\",\"runId\":\"%s\"}", run);
    if (ab_producer_claim(p, "inst", run, NULL, err) != AB_OK)
        return failed("claim", err);
    for (int i = 0; i < 3; i++)
        if (ab_producer_publish_json(p, ev[i], strlen(ev[i]), err) != AB_OK)
            return failed("publish", err);
    if (ab_producer_flush(p, 5000, err) != AB_OK)
        return failed("flush", err);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3 || AB_VERSION_MAJOR < 0) {
        fprintf(stderr, "usage: client ENDPOINT RUN\n");
        return 2;
    }
    const char *run = argv[2];
    ab_error_t err = AB_ERROR_INIT;
    ab_producer_t *p = NULL;
    ab_doc_t *doc = NULL;
    unsigned n = 0;
    int rc = 1;
    if (ab_producer_new(&p, argv[1], NULL, &err) != AB_OK) {
        failed("connect", &err);
        goto done;
    }
    if (publish(p, run, &err) != 0)
        goto done;
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay.scope = AB_REPLAY_RUN;
    q.u.replay.thread = (ab_str_t){"inst", 4};
    q.u.replay.run = (ab_str_t){run, strlen(run)};
    if (ab_doc_new(&doc) != AB_OK ||
        ab_conn_replay(ab_producer_conn(p), &q, count_row, &n, doc, NULL, 5000, &err) != AB_OK) {
        failed("replay", &err);
        goto done;
    }
    if (n != 3) {
        fprintf(stderr, "client: replayed %u events, expected 3\n", n);
        goto done;
    }
    printf("client ok: %u events\n", n);
    rc = 0;
done:
    ab_doc_destroy(&doc);
    ab_producer_destroy(&p);
    return rc;
}

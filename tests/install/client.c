/*
 * client.c - a small program built against an installed agentbus, as a user
 * would build one (tests/install/run.sh builds it with pkg-config and with
 * find_package): it checks an AG-UI event with the protocol library, then
 * publishes a run to the broker at argv[1] with a producer and reads it back
 * with a replay. Prints "client ok: N events" and exits 0, or says why not.
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

int main(int argc, char **argv)
{
    static const char *const events[] = {
        "{\"type\":\"RUN_STARTED\",\"threadId\":\"inst\",\"runId\":\"r1\","
        "\"protocolVersion\":\"1.0\"}",
        "{\"type\":\"TEXT_MESSAGE_CHUNK\",\"messageId\":\"m\",\"role\":\"assistant\","
        "\"delta\":\"installed\"}",
        "{\"type\":\"RUN_FINISHED\",\"threadId\":\"inst\",\"runId\":\"r1\"}",
    };
    if (argc != 2 || AB_VERSION_MAJOR < 0) {
        fprintf(stderr, "usage: client ENDPOINT\n");
        return 2;
    }
    ab_error_t err = AB_ERROR_INIT;
    ab_producer_t *p = NULL;
    if (ab_producer_new(&p, argv[1], NULL, &err) != AB_OK)
        return failed("connect", &err);
    if (ab_producer_claim(p, "inst", "r1", NULL, &err) != AB_OK)
        return failed("claim", &err);
    for (size_t i = 0; i < sizeof(events) / sizeof(events[0]); i++)
        if (ab_producer_publish_json(p, events[i], strlen(events[i]), &err) != AB_OK)
            return failed("publish", &err);
    if (ab_producer_flush(p, 5000, &err) != AB_OK)
        return failed("flush", &err);
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay.scope = AB_REPLAY_RUN;
    q.u.replay.thread = (ab_str_t){"inst", 4};
    q.u.replay.run = (ab_str_t){"r1", 2};
    ab_doc_t *doc = NULL;
    unsigned n = 0;
    if (ab_doc_new(&doc) != AB_OK ||
        ab_conn_replay(ab_producer_conn(p), &q, count_row, &n, doc, NULL, 5000, &err) != AB_OK)
        return failed("replay", &err);
    ab_doc_destroy(&doc);
    ab_producer_destroy(&p);
    if (n != 3) {
        fprintf(stderr, "client: replayed %u events, expected 3\n", n);
        return 1;
    }
    printf("client ok: %u events\n", n);
    return 0;
}

/*
 * embed.c - a program that embeds a broker, built against an installed
 * agentbus (tests/install/run.sh, with pkg-config agentbus-broker and with
 * find_package's agentbus::broker): it starts a broker in its own process on
 * loopback ports the system picks and a data directory given as argv[1],
 * publishes one run to it with a producer, checks that both were acknowledged, stops
 * the broker and checks that it stopped cleanly. Prints "embed ok: seq N"
 * and exits 0, or says why not.
 */
#include <agentbus/agentbus.h>
#include <agentbus/broker.h>

#include <stdio.h>
#include <string.h>

static int failed(const char *what, const ab_error_t *err)
{
    fprintf(stderr, "embed: %s: %s: %s\n", what, ab_status_name(err->code), err->message);
    return 1;
}

static int publish_run(const char *endpoint, uint64_t *last_seq, ab_error_t *err)
{
    static const char *const events[] = {
        "{\"type\":\"RUN_STARTED\",\"threadId\":\"emb\",\"runId\":\"r1\",\"protocolVersion\":\"1."
        "0\"}",
        "{\"type\":\"RUN_FINISHED\",\"threadId\":\"emb\",\"runId\":\"r1\"}",
    };
    ab_producer_t *p = NULL;
    int rc = 1;
    if (ab_producer_new(&p, endpoint, NULL, err) != AB_OK ||
        ab_producer_claim(p, "emb", "r1", NULL, err) != AB_OK)
        goto done;
    for (size_t i = 0; i < sizeof(events) / sizeof(events[0]); i++)
        if (ab_producer_publish_json(p, events[i], strlen(events[i]), err) != AB_OK)
            goto done;
    if (ab_producer_flush(p, 5000, err) != AB_OK)
        goto done;
    *last_seq = ab_producer_acked_seq(p);
    rc = 0;
done:
    ab_producer_destroy(&p);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: embed DATA_DIR\n");
        return 2;
    }
    ab_broker_config_t cfg;
    ab_broker_config_defaults(&cfg);
    ab_error_t err = AB_ERROR_INIT;
    if (ab_broker_config_set(&cfg, "data", argv[1], &err) != AB_OK ||
        ab_broker_config_set(&cfg, "cmd", "tcp://127.0.0.1:*", &err) != AB_OK ||
        ab_broker_config_set(&cfg, "events", "tcp://127.0.0.1:*", &err) != AB_OK ||
        ab_broker_config_set(&cfg, "log-level", "warn", &err) != AB_OK)
        return failed("config", &err);
    ab_broker_t *b = NULL;
    if (ab_broker_new(&cfg, &b, &err) != AB_OK)
        return failed("start the broker", &err);
    uint64_t seq = 0;
    int rc = publish_run(ab_broker_cmd_endpoint(b), &seq, &err);
    if (rc != 0)
        failed("publish", &err);
    if (ab_broker_destroy(&b) != 0) {
        fprintf(stderr, "embed: the broker did not stop cleanly\n");
        return 1;
    }
    if (rc == 0 && seq != 2) {
        fprintf(stderr, "embed: the run's last seq is %llu, expected 2\n", (unsigned long long)seq);
        return 1;
    }
    if (rc == 0)
        printf("embed ok: seq %llu\n", (unsigned long long)seq);
    return rc;
}

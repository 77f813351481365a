/*
 * snapshot.c - `agentbus snapshot THREAD`: ask the broker for the current
 * snapshot of a thread (docs/PROTOCOL.md 7.8, docs/REDUCER.md section 7) and
 * print a summary for people, or the whole document as one JSON line
 * (--json).
 *
 * Invariants:
 *  1. One request, bounded by --timeout.
 *  2. The document printed is checked with ab_snapshot_validate() first; a
 *     document breaking a rule is reported (exit 1), never printed as valid.
 *  3. The reply's value tree is converted to the jansson document directly
 *     (ab_val_to_jansson: strings and keys by length), never re-read from
 *     JSON text, so anything the bus accepted - U+0000 in a string or a key
 *     included - is checked and printed (escaped) as it is.
 */
#include "agentbus/snapshot.h"
#include "agentbus/client.h"
#include "agentbus/json.h"
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

struct sopts {
    const char *broker;
    const char *thread;
    bool json;
    long timeout_ms;
};

static void print_help(void)
{
    printf("usage: agentbus snapshot THREAD [--broker ENDPOINT] [--json] [--timeout MS]\n\n"
           "Print the current state of a thread, folded from its stored events by the broker:\n"
           "runs with their status, messages, tool calls, shared state keys and pending\n"
           "approvals (docs/REDUCER.md).\n\n"
           "options:\n"
           "  --broker ENDPOINT  the broker's command endpoint (default $AGENTBUS_BROKER, else\n"
           "                     " AB_DEFAULT_BROKER ")\n"
           "  --json             the whole snapshot document as one JSON line\n"
           "  --timeout MS       bound of the request (default 5000)\n"
           "  -h, --help         show this help\n");
}

static int parse_args(int argc, char **argv, struct sopts *o)
{
    static const struct option longopts[] = {
        {"broker", required_argument, NULL, 'b'},
        {"json", no_argument, NULL, 'j'},
        {"timeout", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b': o->broker = optarg; break;
        case 'j': o->json = true; break;
        case 'T':
            if (!cli_parse_long(optarg, 1, 3600000, &o->timeout_ms))
                return cli_usage_error("snapshot", "--timeout wants milliseconds, got '%s'",
                                       optarg);
            break;
        case 'h': print_help(); return -1;
        default: return cli_usage_error("snapshot", "unknown option");
        }
    }
    if (optind >= argc)
        return cli_usage_error("snapshot", "no thread id (usage: agentbus snapshot THREAD)");
    o->thread = argv[optind++];
    if (optind < argc)
        return cli_usage_error("snapshot", "unexpected argument '%s'", argv[optind]);
    return 0;
}

static const char *str_of(const json_t *o, const char *key, const char *dflt)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : dflt;
}

static void print_summary(json_t *doc)
{
    json_t *p = json_object_get(doc, "projection");
    const json_t *cp = json_object_get(doc, "checkpoint");
    printf("thread %s (position %lld)\n", str_of(doc, "threadId", "?"),
           (long long)json_integer_value(json_object_get(cp, "position")));
    const json_t *runs = json_object_get(p, "runs");
    printf("runs: %zu\n", json_array_size(runs));
    size_t i;
    const json_t *v;
    json_array_foreach(runs, i, v)
    {
        printf("  %-24s %-12s", str_of(v, "id", "?"), str_of(v, "status", "?"));
        if (json_object_get(v, "outcome"))
            printf(" outcome %s", str_of(v, "outcome", "?"));
        if (json_object_get(v, "parentRunId"))
            printf(" parent %s", str_of(v, "parentRunId", "?"));
        printf("\n");
    }
    printf("messages: %zu\n", json_array_size(json_object_get(p, "messages")));
    const json_t *tcs = json_object_get(p, "toolCalls");
    printf("tool calls: %zu\n", json_array_size(tcs));
    json_array_foreach(tcs, i, v)
    {
        printf("  %-24s %s%s\n", str_of(v, "id", "?"), str_of(v, "name", "-"),
               json_object_get(v, "result") ? " (result)" : "");
    }
    json_t *state = json_object_get(p, "state");
    printf("state keys: %zu", json_is_object(state) ? json_object_size(state) : 0);
    if (json_is_object(state)) {
        const char *k;
        const json_t *sv;
        const char *sep = " (";
        json_object_foreach(state, k, sv)
        {
            (void)sv;
            printf("%s%s", sep, k);
            sep = ", ";
        }
        if (json_object_size(state) > 0)
            printf(")");
    }
    printf("\n");
    const json_t *aps = json_object_get(p, "approvals");
    size_t pending = 0;
    json_array_foreach(aps, i, v) pending += strcmp(str_of(v, "status", ""), "pending") == 0;
    printf("pending approvals: %zu\n", pending);
    json_array_foreach(aps, i, v)
    {
        if (strcmp(str_of(v, "status", ""), "pending") == 0)
            printf("  %-24s run %s%s%s\n", str_of(v, "interruptId", "?"), str_of(v, "runId", "?"),
                   json_object_get(v, "reason") ? " reason " : "", str_of(v, "reason", ""));
    }
    printf("active runs: %zu\n", json_array_size(json_object_get(doc, "activeRuns")));
    size_t nw = json_array_size(json_object_get(p, "warnings"));
    if (nw > 0)
        printf("warnings: %zu\n", nw);
}

/* Send SNAPSHOT; on AB_OK *doc is the reply as a jansson tree and @p text its JSON text. */
static ab_status_t fetch(const struct sopts *o, json_t **doc, ab_buf_t *text, ab_error_t *err)
{
    ab_conn_opts_t co = {.client_name = "agentbus-snapshot", .timeout_ms = (int)o->timeout_ms};
    ab_conn_t *c = NULL;
    ab_doc_t *vals = NULL;
    ab_status_t rc = ab_conn_new(&c, cli_broker_endpoint(o->broker), &co, err);
    if (rc == AB_OK && ab_doc_new(&vals) != AB_OK)
        rc = ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    if (rc == AB_OK) {
        ab_msg_t q = {.op = AB_OP_SNAPSHOT,
                      .u.snapshot = {.thread = {o->thread, strlen(o->thread)}}};
        ab_msg_t m;
        rc = ab_conn_request(c, &q, NULL, 0, vals, &m, (int)o->timeout_ms, err);
        if (rc == AB_OK && (m.op != AB_OP_SNAPSHOT_REPLY || m.u.snapshot_reply.snapshot == NULL))
            rc = ab_error_set(err, AB_INVALID_ENVELOPE, "op", "the broker answered %s",
                              ab_op_name(m.op));
        if (rc == AB_OK && (ab_val_to_json(m.u.snapshot_reply.snapshot, text) != AB_OK ||
                            !(*doc = ab_val_to_jansson(m.u.snapshot_reply.snapshot))))
            rc = ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    }
    ab_doc_destroy(&vals);
    ab_conn_destroy(&c);
    return rc;
}

int cmd_snapshot(int argc, char **argv)
{
    struct sopts o = {.timeout_ms = AB_CONN_TIMEOUT_DEFAULT};
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? AB_EXIT_OK : rc;
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_t text = {0};
    json_t *doc = NULL;
    ab_status_t st = fetch(&o, &doc, &text, &err);
    if (st == AB_OK)
        st = ab_snapshot_validate(doc, &err);
    if (st != AB_OK) {
        char buf[768];
        fprintf(stderr, "agentbus snapshot: %s\n", ab_error_format(&err, buf, sizeof(buf)));
        rc = AB_EXIT_FAIL;
    } else if (o.json) {
        fwrite(text.data, 1, text.len, stdout);
        printf("\n");
    } else {
        print_summary(doc);
    }
    json_decref(doc);
    ab_buf_free(&text);
    return rc;
}

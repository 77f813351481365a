/*
 * snapshot.c - `agentbus snapshot THREAD`: ask the broker for the current
 * snapshot of a thread (docs/PROTOCOL.md 7.8, docs/REDUCER.md section 7) and
 * print a summary for people, or the whole document as one JSON line
 * (--json).
 *
 * Invariants:
 *  1. One request, bounded by --timeout.
 *  2. The document printed is checked with ab_snapshot_from_value() first; a
 *     document breaking a rule is reported (exit 1), never printed as valid.
 *  3. The reply's value tree is checked and printed as it came, never re-read
 *     from JSON text, so anything the bus accepted - U+0000 in a string or a
 *     key included - is checked and printed (escaped) as it is.
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
    while ((c = cli_getopt(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b': o->broker = optarg; break;
        case 'j': o->json = true; break;
        case 'T':
            if (!cli_parse_long(optarg, 1, 3600000, &o->timeout_ms))
                return cli_usage_error("snapshot", "--timeout wants milliseconds, got '%s'",
                                       optarg);
            break;
        case 'h': print_help(); return -1;
        default: return cli_bad_option("snapshot", c);
        }
    }
    if (optind >= argc)
        return cli_usage_error("snapshot", "no thread id (usage: agentbus snapshot THREAD)");
    o->thread = argv[optind++];
    if (optind < argc)
        return cli_usage_error("snapshot", "unexpected argument '%s'", argv[optind]);
    if (cli_check_id("snapshot", "THREAD", o->thread) != 0)
        return AB_EXIT_USAGE;
    return cli_endpoint("snapshot", o->broker, &o->broker);
}

/* A string member as "%.*s" arguments: its length and bytes, or @p dflt. */
#define STR_ARGS(m, key, dflt) str_len((m), (key), (dflt)), str_ptr((m), (key), (dflt))

static int str_len(const ab_val_t *m, const char *key, const char *dflt)
{
    const ab_val_t *v = ab_val_get(m, key);
    return v && v->type == AB_VAL_STR ? (int)v->len : (int)strlen(dflt);
}

static const char *str_ptr(const ab_val_t *m, const char *key, const char *dflt)
{
    const ab_val_t *v = ab_val_get(m, key);
    return v && v->type == AB_VAL_STR ? v->u.s : dflt;
}

static bool str_is(const ab_val_t *m, const char *key, const char *want)
{
    const ab_val_t *v = ab_val_get(m, key);
    return v && v->type == AB_VAL_STR && v->len == strlen(want) &&
           memcmp(v->u.s, want, v->len) == 0;
}

/* Items of an array member (0 when absent or not an array). */
static uint32_t count(const ab_val_t *m, const char *key)
{
    const ab_val_t *v = ab_val_get(m, key);
    return v && v->type == AB_VAL_ARRAY ? v->len : 0;
}

static const ab_val_t *item(const ab_val_t *m, const char *key, uint32_t i)
{
    return &ab_val_get(m, key)->u.items[i];
}

static void print_runs(const ab_val_t *p)
{
    printf("runs: %u\n", count(p, "runs"));
    for (uint32_t i = 0; i < count(p, "runs"); i++) {
        const ab_val_t *v = item(p, "runs", i);
        printf("  %-24.*s %-12.*s", STR_ARGS(v, "id", "?"), STR_ARGS(v, "status", "?"));
        if (ab_val_get(v, "outcome"))
            printf(" outcome %.*s", STR_ARGS(v, "outcome", "?"));
        if (ab_val_get(v, "parentRunId"))
            printf(" parent %.*s", STR_ARGS(v, "parentRunId", "?"));
        printf("\n");
    }
}

static void print_state_keys(const ab_val_t *p)
{
    const ab_val_t *state = ab_val_get(p, "state");
    bool obj = state && state->type == AB_VAL_MAP;
    printf("state keys: %u", obj ? state->len : 0);
    for (uint32_t i = 0; obj && i < state->len; i++)
        printf("%s%.*s", i == 0 ? " (" : ", ", (int)state->u.pairs[i].klen, state->u.pairs[i].key);
    printf("%s\n", obj && state->len > 0 ? ")" : "");
}

static void print_summary(const ab_val_t *doc)
{
    const ab_val_t *p = ab_val_get(doc, "projection");
    const ab_val_t *pos = ab_val_get(ab_val_get(doc, "checkpoint"), "position");
    printf("thread %.*s (position %lld)\n", STR_ARGS(doc, "threadId", "?"),
           pos && pos->type == AB_VAL_INT ? (long long)pos->u.i : 0LL);
    print_runs(p);
    printf("messages: %u\n", count(p, "messages"));
    printf("tool calls: %u\n", count(p, "toolCalls"));
    for (uint32_t i = 0; i < count(p, "toolCalls"); i++) {
        const ab_val_t *v = item(p, "toolCalls", i);
        printf("  %-24.*s %.*s%s\n", STR_ARGS(v, "id", "?"), STR_ARGS(v, "name", "-"),
               ab_val_get(v, "result") ? " (result)" : "");
    }
    print_state_keys(p);
    uint32_t pending = 0;
    for (uint32_t i = 0; i < count(p, "approvals"); i++)
        pending += str_is(item(p, "approvals", i), "status", "pending");
    printf("pending approvals: %u\n", pending);
    for (uint32_t i = 0; i < count(p, "approvals"); i++) {
        const ab_val_t *v = item(p, "approvals", i);
        if (str_is(v, "status", "pending"))
            printf("  %-24.*s run %.*s%s%.*s\n", STR_ARGS(v, "interruptId", "?"),
                   STR_ARGS(v, "runId", "?"), ab_val_get(v, "reason") ? " reason " : "",
                   STR_ARGS(v, "reason", ""));
    }
    printf("active runs: %u\n", count(doc, "activeRuns"));
    if (count(p, "warnings") > 0)
        printf("warnings: %u\n", count(p, "warnings"));
}

/* Send SNAPSHOT on @p c; on AB_OK *doc is the reply's document (views into
 * @p vals and the connection's last message: keep both until done) and
 * @p text its JSON text. */
static ab_status_t fetch(const struct sopts *o, ab_conn_t *c, ab_doc_t *vals, const ab_val_t **doc,
                         ab_buf_t *text, ab_error_t *err)
{
    ab_msg_t q = {.op = AB_OP_SNAPSHOT, .u.snapshot = {.thread = {o->thread, strlen(o->thread)}}};
    ab_msg_t m;
    ab_status_t rc = ab_conn_request(c, &q, NULL, 0, vals, &m, (int)o->timeout_ms, err);
    if (rc == AB_OK && (m.op != AB_OP_SNAPSHOT_REPLY || m.u.snapshot_reply.snapshot == NULL))
        rc = ab_error_set(err, AB_INVALID_ENVELOPE, "op", "the broker answered %s",
                          ab_op_name(m.op));
    if (rc == AB_OK && ab_val_to_json(m.u.snapshot_reply.snapshot, text) != AB_OK)
        rc = ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    if (rc == AB_OK)
        *doc = m.u.snapshot_reply.snapshot;
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
    ab_doc_t *vals = NULL;
    const ab_val_t *doc = NULL;
    ab_snapshot_t *snap = NULL;
    ab_conn_t *c = NULL;
    ab_conn_opts_t co = {.client_name = "agentbus-snapshot", .timeout_ms = (int)o.timeout_ms};
    ab_status_t st = ab_doc_new(&vals) == AB_OK
                         ? ab_conn_new(&c, o.broker, &co, &err)
                         : ab_error_set(&err, AB_NOMEM, NULL, "out of memory");
    if (st == AB_OK)
        st = fetch(&o, c, vals, &doc, &text, &err);
    if (st == AB_OK)
        st = ab_snapshot_from_value(doc, &snap, &err);
    if (st != AB_OK) {
        char buf[768];
        fprintf(stderr, "agentbus snapshot: %s\n", cli_error_text(&err, buf, sizeof(buf)));
        rc = AB_EXIT_FAIL;
    } else if (o.json) {
        fwrite(text.data, 1, text.len, stdout);
        printf("\n");
    } else {
        print_summary(doc);
    }
    ab_snapshot_destroy(&snap);
    ab_conn_destroy(&c);
    ab_doc_destroy(&vals);
    ab_buf_free(&text);
    return rc;
}

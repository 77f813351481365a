/*
 * workers_cmd.c - `agentbus workers` (the live workers, their agents, load
 * and leases) and `agentbus invoke AGENT ACTION` (call an action through the
 * broker and print its answer); docs/CLIENT.md "agentbus workers, agentbus
 * invoke", docs/PROTOCOL.md 7.10 and 7.11.
 */
#include "agentbus/client.h"
#include "agentbus/json.h"
#include "cli.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wopts {
    const char *broker;
    bool json;
    long timeout_ms;
    const char *agent, *action, *payload, *thread;
};

/* Append to a line being built; a failure (out of memory) shows as a cut line. */
static void put(ab_buf_t *b, const void *p, size_t n)
{
    if (ab_buf_append(b, p, n) != AB_OK)
        fputs("agentbus: out of memory building a line\n", stderr);
}

static int fail(const char *cmd, const ab_error_t *err)
{
    char buf[768];
    fprintf(stderr, "agentbus %s: %s\n", cmd, cli_error_text(err, buf, sizeof(buf)));
    return AB_EXIT_FAIL;
}

static void print_quoted(ab_buf_t *b, ab_str_t s)
{
    if (ab_json_quote(b, s.ptr, s.len) != AB_OK)
        fputs("\"?\"", stdout);
}

/* ---- agentbus workers ------------------------------------------------------ */

static void workers_help(void)
{
    printf("usage: agentbus workers [--broker ENDPOINT] [--json] [--timeout MS]\n\n"
           "List the workers the broker has now: their ids and names, the agents they serve\n"
           "with capacity and actions, their lease, how long since they were heard from and\n"
           "the action calls they have not answered yet (docs/PROTOCOL.md 7.10).\n\n"
           "options:\n"
           "  --broker ENDPOINT  the broker's command endpoint (default $AGENTBUS_BROKER, else\n"
           "                     " AB_DEFAULT_BROKER ")\n"
           "  --json             one JSON object per worker, one per line\n"
           "  --timeout MS       bound of the request (default 5000)\n"
           "  -h, --help         show this help\n");
}

static void worker_json(const ab_worker_info_t *w, ab_buf_t *b)
{
    ab_buf_reset(b);
    put(b, "{\"worker_id\":", 13);
    print_quoted(b, w->worker_id);
    put(b, ",\"worker\":", 10);
    print_quoted(b, w->worker);
    put(b, ",\"agents\":[", 11);
    for (size_t i = 0; i < w->nagents; i++) {
        char num[48];
        put(b, i ? ",{\"name\":" : "{\"name\":", i ? 9 : 8);
        print_quoted(b, w->agents[i].name);
        int n = snprintf(num, sizeof(num), ",\"capacity\":%u,\"actions\":[", w->agents[i].capacity);
        put(b, num, (size_t)n);
        for (size_t j = 0; j < w->agents[i].nactions; j++) {
            if (j)
                put(b, ",", 1);
            print_quoted(b, w->agents[i].actions[j]);
        }
        put(b, "]}", 2);
    }
    char tail[96];
    int n = snprintf(tail, sizeof(tail), "],\"lease_ms\":%u,\"idle_ms\":%u,\"calls\":%u}",
                     w->lease_ms, w->idle_ms, w->calls);
    put(b, tail, (size_t)n);
    fwrite(b->data, 1, b->len, stdout);
    fputc('\n', stdout);
}

static void worker_line(const ab_worker_info_t *w)
{
    printf("%-10.*s %-20.*s lease %6u ms  idle %6u ms  calls %u\n", (int)w->worker_id.len,
           w->worker_id.ptr, (int)w->worker.len, w->worker.ptr, w->lease_ms, w->idle_ms, w->calls);
    for (size_t i = 0; i < w->nagents; i++) {
        printf("    agent %.*s  capacity %u  actions:", (int)w->agents[i].name.len,
               w->agents[i].name.ptr, w->agents[i].capacity);
        for (size_t j = 0; j < w->agents[i].nactions; j++)
            printf(" %.*s", (int)w->agents[i].actions[j].len, w->agents[i].actions[j].ptr);
        printf(w->agents[i].nactions ? "\n" : " (none)\n");
    }
}

static int parse_common(int argc, char **argv, const char *cmd, struct wopts *o, void (*help)(void))
{
    static const struct option longopts[] = {
        {"broker", required_argument, NULL, 'b'},
        {"json", no_argument, NULL, 'j'},
        {"timeout", required_argument, NULL, 'T'},
        {"payload", required_argument, NULL, 'p'},
        {"thread", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = cli_getopt(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b': o->broker = optarg; break;
        case 'j': o->json = true; break;
        case 'p': o->payload = optarg; break;
        case 't': o->thread = optarg; break;
        case 'T':
            if (!cli_parse_long(optarg, 1, 600000, &o->timeout_ms))
                return cli_usage_error(cmd, "--timeout wants milliseconds (1 ... 600000), got '%s'",
                                       optarg);
            break;
        case 'h': help(); return -1;
        default: return cli_bad_option(cmd, c);
        }
    }
    return cli_endpoint(cmd, o->broker, &o->broker);
}

int cmd_workers(int argc, char **argv)
{
    struct wopts o = {.timeout_ms = AB_CONN_TIMEOUT_DEFAULT};
    int rc = parse_common(argc, argv, "workers", &o, workers_help);
    if (rc != 0)
        return rc < 0 ? AB_EXIT_OK : rc;
    if (optind < argc)
        return cli_usage_error("workers", "unexpected argument '%s'", argv[optind]);
    if (o.payload || o.thread)
        return cli_usage_error("workers", "--payload and --thread go with invoke");
    ab_error_t err = AB_ERROR_INIT;
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_buf_t line = AB_BUF_INIT;
    ab_workers_reply_t r = {0};
    ab_conn_opts_t co = {.client_name = "agentbus-workers", .timeout_ms = (int)o.timeout_ms};
    ab_status_t st = ab_doc_new(&doc) == AB_OK
                         ? ab_conn_new(&c, o.broker, &co, &err)
                         : ab_error_set(&err, AB_NOMEM, NULL, "out of memory");
    if (st == AB_OK)
        st = ab_conn_workers(c, doc, &r, (int)o.timeout_ms, &err);
    rc = st == AB_OK ? AB_EXIT_OK : fail("workers", &err);
    for (size_t i = 0; st == AB_OK && i < r.nworkers; i++) {
        if (o.json)
            worker_json(&r.workers[i], &line);
        else
            worker_line(&r.workers[i]);
    }
    if (st == AB_OK && !o.json)
        printf("%zu worker%s\n", r.nworkers, r.nworkers == 1 ? "" : "s");
    ab_buf_free(&line);
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    return rc;
}

/* ---- agentbus invoke ------------------------------------------------------- */

static void invoke_help(void)
{
    printf("usage: agentbus invoke AGENT ACTION [--payload JSON] [--thread T] [--timeout MS]\n"
           "                       [--broker ENDPOINT] [--json]\n\n"
           "Call action ACTION of agent AGENT on a live worker that serves it and print the\n"
           "worker's answer as JSON (docs/PROTOCOL.md 7.11). Exit 1 with the error when the\n"
           "worker refuses, no worker serves it (unsupported, or unavailable: retry later),\n"
           "or no answer comes within the timeout. Ctrl-C cancels the call (only it; exit 130).\n\n"
           "options:\n"
           "  --payload JSON     the action's payload (default: none)\n"
           "  --thread T         the thread the call is about\n"
           "  --timeout MS       how long connecting and the call may take (default: 5000 to\n"
           "                     connect, 30000 for the call)\n"
           "  --broker ENDPOINT  the broker's command endpoint (default $AGENTBUS_BROKER, else\n"
           "                     " AB_DEFAULT_BROKER ")\n"
           "  --json             one JSON object: worker_id and result\n"
           "  -h, --help         show this help\n");
}

static void print_reply(const struct wopts *o, const ab_action_reply_t *r, ab_buf_t *b)
{
    ab_buf_reset(b);
    if (o->json) {
        put(b, "{\"worker_id\":", 13);
        print_quoted(b, r->worker_id);
        put(b, ",\"result\":", 10);
    }
    if (r->result == NULL || ab_val_to_json(r->result, b) != AB_OK)
        put(b, "null", 4);
    if (o->json)
        put(b, "}", 1);
    fwrite(b->data, 1, b->len, stdout);
    fputc('\n', stdout);
}

static volatile sig_atomic_t invoke_stop;

static void on_sigint(int sig)
{
    (void)sig;
    invoke_stop = 1;
}

/* Wait for the answer of @p cid; on SIGINT/SIGTERM cancel the call (only it) and take the
 * broker's request_aborted. */
static ab_status_t wait_answer(ab_conn_t *c, uint64_t cid, long timeout_ms, ab_doc_t *doc,
                               ab_msg_t *m, ab_error_t *err)
{
    /* the broker itself answers `timeout` when the call's time is up */
    long left = (timeout_ms ? timeout_ms : AB_ACTION_TIMEOUT_MS_DEFAULT) + 5000;
    for (; left > 0; left -= 200) {
        ab_error_clear(err);
        ab_status_t st = ab_conn_recv(c, cid, doc, m, 200, err);
        if (st != AB_TIMEOUT || m->op == AB_OP_ERROR)
            return st;
        if (invoke_stop) {
            ab_msg_t cancel = {.op = AB_OP_CANCEL, .cid = cid};
            ab_error_clear(err);
            if ((st = ab_conn_send(c, &cancel, NULL, 0, NULL, err)) != AB_OK)
                return st;
            ab_error_clear(err);
            return ab_conn_recv(c, cid, doc, m, 5000, err); /* request_aborted */
        }
    }
    return ab_error_set(err, AB_TIMEOUT, "", "no answer from the broker in time");
}

int cmd_invoke(int argc, char **argv)
{
    struct wopts o = {.timeout_ms = 0};
    int rc = parse_common(argc, argv, "invoke", &o, invoke_help);
    if (rc != 0)
        return rc < 0 ? AB_EXIT_OK : rc;
    if (argc - optind != 2)
        return cli_usage_error("invoke", "usage: agentbus invoke AGENT ACTION [options]");
    o.agent = argv[optind];
    o.action = argv[optind + 1];
    if ((rc = cli_check_id("invoke", "AGENT", o.agent)) != 0 ||
        (rc = cli_check_id("invoke", "ACTION", o.action)) != 0 ||
        (o.thread && (rc = cli_check_id("invoke", "--thread", o.thread)) != 0))
        return rc;
    ab_error_t err = AB_ERROR_INIT;
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_buf_t out = AB_BUF_INIT;
    ab_msg_t m = {.op = AB_OP_NONE_};
    uint64_t cid = 0;
    /* --timeout bounds connecting too (the call's default, 30 s, does not) */
    ab_conn_opts_t co = {.client_name = "agentbus-invoke", .timeout_ms = (int)o.timeout_ms};
    signal(SIGINT, on_sigint);
    signal(SIGTERM, on_sigint);
    ab_status_t st = ab_doc_new(&doc) == AB_OK
                         ? ab_conn_new(&c, o.broker, &co, &err)
                         : ab_error_set(&err, AB_NOMEM, NULL, "out of memory");
    if (st == AB_OK)
        st = ab_conn_invoke_send(c, o.agent, o.action, o.payload, o.thread, (uint32_t)o.timeout_ms,
                                 &cid, &err);
    if (st == AB_OK)
        st = wait_answer(c, cid, o.timeout_ms, doc, &m, &err);
    if (st == AB_OK && m.op != AB_OP_ACTION_REPLY)
        st = ab_error_set(&err, AB_INVALID_ENVELOPE, "op", "expected action_reply, got %s",
                          ab_op_name(m.op));
    if (st == AB_OK)
        print_reply(&o, &m.u.action_reply, &out);
    rc = st == AB_OK ? AB_EXIT_OK : st == AB_REQUEST_ABORTED ? 130 : fail("invoke", &err);
    if (st == AB_REQUEST_ABORTED)
        fprintf(stderr, "agentbus invoke: aborted: the call was cancelled (the worker may "
                        "still finish it; its answer reaches nobody)\n");
    ab_buf_free(&out);
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    return rc;
}

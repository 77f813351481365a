/*
 * threads_cmd.c - `agentbus threads`: the threads with stored events, in
 * byte order of their ids (docs/PROTOCOL.md 7.19, `threads`; docs/CLIENT.md
 * "agentbus threads"): one page, or with --all every page.
 *
 * Invariants:
 *  1. Each page is printed as it comes: memory is one page (at most
 *     AB_THREADS_LIMIT_MAX threads) whatever the bus holds.
 *  2. Without --all, a listing that stops before the end says where to go on
 *     (`--after ID`, or a last JSON line {"next": ID}); with --all it asks
 *     again from `next` until the broker sends none.
 *  3. Every request is bounded by the timeout.
 */
#include "agentbus/client.h"
#include "agentbus/json.h"
#include "agentbus/nego.h"
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

typedef struct opts {
    const char *broker, *prefix, *after;
    long limit, timeout_ms;
    bool json, all;
} opts_t;

static void help(void)
{
    printf(
        "usage: agentbus threads [--broker ENDPOINT] [--prefix P] [--after ID] [--limit N]\n"
        "                        [--all] [--json] [--timeout MS]\n\n"
        "List the threads with stored events, in byte order of their ids, with their number\n"
        "of runs, whether one is active, and the run and position of their newest event.\n"
        "With keys, only the threads this key may observe.\n\n"
        "options:\n"
        "  --broker ENDPOINT  the broker's command endpoint (default $AGENTBUS_BROKER, else\n"
        "                     " AB_DEFAULT_BROKER ")\n"
        "  --prefix P         only threads whose id starts with P\n"
        "  --after ID         only threads after ID (the `next` of an earlier listing)\n"
        "  --limit N          threads per page, 1 ... 1000 (default 100)\n"
        "  --all              every page, not only the first\n"
        "  --json             one JSON object per thread {\"thread\", \"runs\", \"active\",\n"
        "                     \"last_run\", \"last_pos\"}; a last {\"next\": ID} when more follow\n"
        "  --timeout MS       bound of each request (default 5000)\n"
        "  -h, --help         show this help\n");
}

/* One thread as a JSON line (ids are views into the reply: not NUL-terminated). */
static void print_json(const ab_thread_entry_t *t)
{
    ab_buf_t b = AB_BUF_INIT;
    char num[96];
    bool ok = ab_buf_append(&b, "{\"thread\":", 10) == AB_OK &&
              ab_json_quote(&b, t->thread.ptr, t->thread.len) == AB_OK;
    snprintf(num, sizeof num,
             ",\"runs\":%llu,\"active\":%s,\"last_run\":", (unsigned long long)t->runs,
             t->active ? "true" : "false");
    ok = ok && ab_buf_append(&b, num, strlen(num)) == AB_OK &&
         ab_json_quote(&b, t->last_run.ptr, t->last_run.len) == AB_OK;
    snprintf(num, sizeof num, ",\"last_pos\":%llu}\n", (unsigned long long)t->last_pos);
    ok = ok && ab_buf_append(&b, num, strlen(num)) == AB_OK;
    if (ok)
        fwrite(b.data, 1, b.len, stdout);
    else
        fputs("agentbus threads: out of memory building a line\n", stderr);
    ab_buf_free(&b);
}

static void print_row(const ab_thread_entry_t *t)
{
    printf("%-32.*s %6llu %-6s %-24.*s %10llu\n", (int)t->thread.len, t->thread.ptr,
           (unsigned long long)t->runs, t->active ? "yes" : "no", (int)t->last_run.len,
           t->last_run.ptr, (unsigned long long)t->last_pos);
}

static int parse(int argc, char **argv, opts_t *o)
{
    static const struct option longopts[] = {
        {"broker", required_argument, NULL, 'b'},
        {"prefix", required_argument, NULL, 'p'},
        {"after", required_argument, NULL, 'a'},
        {"limit", required_argument, NULL, 'n'},
        {"all", no_argument, NULL, 'A'},
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
        case 'p': o->prefix = optarg; break;
        case 'a': o->after = optarg; break;
        case 'n':
            if (!cli_parse_long(optarg, 1, AB_THREADS_LIMIT_MAX, &o->limit))
                return cli_usage_error("threads", "--limit wants 1 ... %d, got '%s'",
                                       AB_THREADS_LIMIT_MAX, optarg);
            break;
        case 'A': o->all = true; break;
        case 'j': o->json = true; break;
        case 'T':
            if (!cli_parse_long(optarg, 1, 600000, &o->timeout_ms))
                return cli_usage_error(
                    "threads", "--timeout wants milliseconds (1 ... 600000), got '%s'", optarg);
            break;
        case 'h': help(); return -1;
        default: return cli_bad_option("threads", c);
        }
    }
    if (optind < argc)
        return cli_usage_error("threads", "unexpected argument '%s'", argv[optind]);
    if (o->prefix && cli_check_id("threads", "--prefix", o->prefix) != 0)
        return AB_EXIT_USAGE;
    if (o->after && cli_check_id("threads", "--after", o->after) != 0)
        return AB_EXIT_USAGE;
    return cli_endpoint("threads", o->broker, &o->broker);
}

/* Every page asked for (invariant 2); @return the status, *n the threads printed. */
static ab_status_t list(ab_conn_t *c, ab_doc_t *doc, const opts_t *o, size_t *n, ab_error_t *err)
{
    char after[AB_ID_MAX_BYTES + 1];
    snprintf(after, sizeof after, "%s", o->after ? o->after : ""); /* an id (parse) */
    for (;;) {
        ab_threads_req_t q = {.after = {after, strlen(after)},
                              .prefix = {o->prefix, o->prefix ? strlen(o->prefix) : 0},
                              .limit = (uint32_t)o->limit};
        ab_threads_reply_t r;
        ab_status_t rc = ab_conn_threads(c, &q, doc, &r, (int)o->timeout_ms, err);
        if (rc != AB_OK)
            return rc;
        for (size_t i = 0; i < r.nthreads; i++)
            o->json ? print_json(&r.threads[i]) : print_row(&r.threads[i]);
        *n += r.nthreads;
        if (!r.next.ptr)
            return AB_OK;
        snprintf(after, sizeof after, "%.*s", (int)r.next.len, r.next.ptr);
        if (!o->all) {
            if (o->json) {
                printf("{\"next\":");
                cli_json_str(stdout, after);
                printf("}\n");
            } else {
                printf("more: agentbus threads --after '%s'%s%s%s\n", after,
                       o->prefix ? " --prefix '" : "", o->prefix ? o->prefix : "",
                       o->prefix ? "'" : "");
            }
            return AB_OK;
        }
        ab_doc_reset(doc); /* invariant 1 */
    }
}

int cmd_threads(int argc, char **argv)
{
    opts_t o = {.limit = AB_THREADS_LIMIT_DEFAULT, .timeout_ms = AB_CONN_TIMEOUT_DEFAULT};
    int rc = parse(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? AB_EXIT_OK : rc;
    ab_conn_opts_t co = {.client_name = "agentbus-threads", .timeout_ms = (int)o.timeout_ms};
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    size_t n = 0, ncaps = 0;
    ab_status_t st = ab_doc_new(&doc) == AB_OK ? ab_conn_new(&c, o.broker, &co, &err)
                                               : ab_error_set(&err, AB_NOMEM, "", "out of memory");
    const ab_cap_t *caps = st == AB_OK ? ab_conn_caps(c, &ncaps) : NULL;
    if (st == AB_OK)
        st = ab_caps_require(caps, ncaps, AB_CAP_THREADS, &err);
    if (st == AB_OK && !o.json)
        printf("%-32s %6s %-6s %-24s %10s\n", "THREAD", "RUNS", "ACTIVE", "LAST RUN", "LAST POS");
    if (st == AB_OK)
        st = list(c, doc, &o, &n, &err);
    if (st == AB_OK && !o.json)
        printf("%zu thread%s\n", n, n == 1 ? "" : "s");
    if (st != AB_OK) {
        char buf[900];
        fprintf(stderr, "agentbus threads: %s\n", cli_error_text(&err, buf, sizeof(buf)));
    }
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    return st == AB_OK ? AB_EXIT_OK : AB_EXIT_FAIL;
}

/*
 * dispatch_cmd.c - `agentbus run AGENT` (start_run, then follow the run to its
 * end) and `agentbus cancel THREAD RUN` (cancel_run, optionally waiting for
 * the run's end), with the pieces `approve`/`deny` share (dispatch.h);
 * docs/CLIENT.md "agentbus run, cancel, approve, deny", docs/PROTOCOL.md 7.12 -
 * 7.16.
 *
 * Invariants:
 *  1. Usage errors (bad flags, bad ids, an --input that is not a JSON object)
 *     exit 2 before anything is sent; broker refusals exit 1 with the code,
 *     message and field (and the interrupt id when the broker names one).
 *  2. Every request carries an idempotency key; the key is printed with the
 *     acceptance, so the same command with --key retries it without making
 *     a second request.
 *  3. Following starts from the run's first event (follow.h), so nothing the
 *     run published before the subscription existed is missed.
 */
#include "dispatch.h"

#include "agentbus/ids.h"
#include "agentbus/json.h"
#include "agentbus/nego.h"
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

/* ---- shared (dispatch.h) --------------------------------------------------- */

ab_status_t cli_json_value(const char *text, size_t len, ab_buf_t *mp, ab_doc_t *doc,
                           const ab_val_t **out, ab_error_t *err)
{
    ab_limits_t lim = ab_limits_default();
    ab_buf_reset(mp);
    ab_status_t rc = ab_json_to_msgpack(text, len, lim.max_depth, CLI_INPUT_MAX_BYTES,
                                        AB_INVALID_ARGUMENT, mp, err);
    if (rc == AB_OK)
        rc = ab_doc_parse(doc, mp->data, mp->len, CLI_INPUT_MAX_BYTES, lim.max_depth,
                          AB_INVALID_ARGUMENT, out, err);
    return rc;
}

static int read_all(FILE *f, ab_buf_t *text)
{
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (text->len + n > CLI_INPUT_MAX_BYTES)
            return -2;
        if (ab_buf_append(text, chunk, n) != AB_OK)
            return -3;
    }
    return ferror(f) ? -1 : 0;
}

int cli_read_input(const char *cmd, const char *path, ab_buf_t *text, ab_buf_t *mp, ab_doc_t *doc,
                   const ab_val_t **out)
{
    bool std_in = strcmp(path, "-") == 0;
    FILE *f = std_in ? stdin : fopen(path, "rb");
    if (f == NULL)
        return cli_usage_error(cmd, "--input %s: cannot open it", path);
    ab_buf_reset(text);
    int r = read_all(f, text);
    if (!std_in)
        fclose(f);
    if (r == -2)
        return cli_usage_error(cmd, "--input %s: larger than %u bytes", path, CLI_INPUT_MAX_BYTES);
    if (r != 0)
        return cli_usage_error(cmd, "--input %s: %s", path,
                               r == -3 ? "out of memory" : "read error");
    ab_error_t err = AB_ERROR_INIT;
    const ab_val_t *v = NULL;
    if (cli_json_value((const char *)text->data, text->len, mp, doc, &v, &err) != AB_OK)
        return cli_usage_error(cmd, "--input %s: %s%s%s", path, err.message,
                               err.field[0] ? " at " : "", err.field);
    if (v->type != AB_VAL_MAP)
        return cli_usage_error(cmd, "--input %s: a RunAgentInput is a JSON object, not %s", path,
                               ab_val_type_name(v->type));
    *out = v;
    return 0;
}

ab_status_t cli_dispatch_connect(const char *cmd, const cli_dopts_t *o, const char *cap,
                                 ab_conn_t **out, ab_error_t *err)
{
    char name[48];
    snprintf(name, sizeof(name), "agentbus-%s", cmd);
    ab_conn_opts_t co = {.client_name = name, .timeout_ms = (int)o->timeout_ms};
    ab_conn_t *c = NULL;
    ab_status_t rc = ab_conn_new(&c, o->broker, &co, err);
    size_t ncaps = 0;
    const ab_cap_t *caps = rc == AB_OK ? ab_conn_caps(c, &ncaps) : NULL;
    if (rc == AB_OK && (rc = ab_caps_require(caps, ncaps, cap, err)) != AB_OK) {
        ab_cap_state_t st = ab_caps_lookup(caps, ncaps, cap);
        ab_error_set(err, rc, "", "the broker at %s does not offer %s (capability %s: %s)",
                     o->broker, cap, cap, ab_cap_state_name(st));
        ab_conn_destroy(&c);
    }
    if (rc == AB_OK)
        *out = c;
    return rc;
}

int cli_refused(const char *cmd, const ab_error_t *err)
{
    char buf[900];
    const ab_error_detail_t *d = ab_error_detail(err, "interruptId");
    fprintf(stderr, "agentbus %s: %s", cmd, cli_error_text(err, buf, sizeof(buf)));
    if (d && d->kind == AB_DETAIL_STR)
        fprintf(stderr, " [interrupt %s]", d->s);
    fprintf(stderr, "%s\n", err->retryable ? " (retryable)" : "");
    return AB_EXIT_FAIL;
}

/* Append to a line being built; out of memory shows as a cut line. */
static void put(ab_buf_t *b, const void *p, size_t n)
{
    if (ab_buf_append(b, p, n) != AB_OK)
        fputs("agentbus: out of memory building a line\n", stderr);
}

static void put_quoted(ab_buf_t *b, const char *s, size_t n)
{
    if (ab_json_quote(b, s, n) != AB_OK)
        b->len = 0;
}

void cli_print_accepted(const cli_printer_t *pr, const ab_run_accepted_t *a, const char *key)
{
    const char *state = ab_request_state_name(a->state);
    if (pr->json) {
        ab_buf_t b = AB_BUF_INIT;
        char num[96];
        snprintf(num, sizeof(num), "{\"op\":\"run_accepted\",\"request\":%llu,\"agent\":",
                 (unsigned long long)a->request);
        put(&b, num, strlen(num));
        put_quoted(&b, a->agent.ptr, a->agent.len);
        put(&b, ",\"thread\":", 10);
        put_quoted(&b, a->thread.ptr, a->thread.len);
        put(&b, ",\"run\":", 7);
        put_quoted(&b, a->run.ptr, a->run.len);
        snprintf(num, sizeof(num),
                 ",\"state\":\"%s\",\"position\":%llu,\"existing\":%s,\"key\":", state,
                 (unsigned long long)a->position, a->existing ? "true" : "false");
        put(&b, num, strlen(num));
        put_quoted(&b, key, strlen(key));
        put(&b, "}\n", 2);
        fwrite(b.data, 1, b.len, stdout);
        fflush(stdout);
        ab_buf_free(&b);
        return;
    }
    printf("request %llu%s: run %.*s/%.*s of agent %.*s, %s", (unsigned long long)a->request,
           a->existing ? " (already made with this key)" : " accepted", (int)a->thread.len,
           a->thread.ptr, (int)a->run.len, a->run.ptr, (int)a->agent.len, a->agent.ptr, state);
    if (a->state == AB_REQ_QUEUED)
        printf(" (position %llu)", (unsigned long long)a->position);
    printf("\nkey %s (the same command with --key ", key);
    cli_print_shell_word(stdout, key, strlen(key));
    printf(" retries it)\n");
    fflush(stdout);
}

int cli_follow_accepted(const cli_dopts_t *o, ab_conn_t *c, const ab_run_accepted_t *a,
                        cli_printer_t *pr)
{
    if (o->no_follow)
        return AB_EXIT_OK;
    /* a's views die with the next request on c: keep copies */
    char thread[AB_ID_MAX_BYTES + 1], run[AB_ID_MAX_BYTES + 1];
    snprintf(thread, sizeof(thread), "%.*s", (int)a->thread.len, a->thread.ptr);
    snprintf(run, sizeof(run), "%.*s", (int)a->run.len, a->run.ptr);
    cli_follow_t f = {.broker = o->broker,
                      .thread = thread,
                      .run = run,
                      .request = a->request,
                      .conn = c,
                      .timeout_ms = (int)o->timeout_ms};
    cli_catch_signals();
    return cli_end_exit(cli_follow_run(&f, pr));
}

/* ---- agentbus run ---------------------------------------------------------- */

struct runopts {
    cli_dopts_t d;
    const char *agent, *thread, *run, *input, *key;
    ab_if_busy_t if_busy;
};

static void run_help(void)
{
    printf(
        "usage: agentbus run AGENT [--thread T] [--run R] [--input FILE|-] [--key K]\n"
        "                    [--if-busy enqueue|reject|interrupt] [--no-follow] [--json]\n"
        "                    [--no-color] [--broker ENDPOINT] [--timeout MS]\n\n"
        "Ask the broker to run agent AGENT (start_run): a worker serving it is given the run.\n"
        "Prints the broker's answer (request id, run id, state, queue position), then follows\n"
        "the run's events to its end, as `agentbus tail` shows them.\n\n"
        "options:\n"
        "  --thread T         the thread (default: the input's threadId, else a fresh id)\n"
        "  --run R            the run id (default: the input's runId, else the broker's)\n"
        "  --input FILE|-     the RunAgentInput, a JSON object (default {\"messages\":[]})\n"
        "  --key K            idempotency key (default: a fresh one, printed: retry with it)\n"
        "  --if-busy WHAT     the thread has a dispatched run already: enqueue (default),\n"
        "                     reject, or interrupt (cancel it, then run this one)\n"
        "  --no-follow        print the acceptance and exit\n"
        "  --json             JSON Lines: the acceptance, then each event as tail --json\n"
        "  --no-color         no colour (also $NO_COLOR; colour only on a terminal)\n"
        "  --broker ENDPOINT  command endpoint (default $AGENTBUS_BROKER, else " AB_DEFAULT_BROKER
        ")\n"
        "  --timeout MS       bound of each request (default 5000)\n"
        "  -h, --help         show this help\n\n"
        "exit status: 0 the run finished with outcome success, 3 interrupted (the interrupt\n"
        "ids and the `agentbus approve` command are printed), 4 cancelled, 1 RUN_ERROR or a\n"
        "refused request, 2 usage, 130 Ctrl-C (following stops; the run goes on).\n");
}

static int parse_if_busy(const char *s, ab_if_busy_t *out)
{
    static const char *names[] = {"enqueue", "reject", "interrupt"};
    for (int i = 0; i < 3; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (ab_if_busy_t)(AB_IF_BUSY_ENQUEUE + i);
            return 0;
        }
    return cli_usage_error("run", "--if-busy wants enqueue, reject or interrupt, got '%s'", s);
}

/* The options of run, cancel, approve and deny; @p ch is the command's own. */
int cli_dispatch_opt(const char *cmd, int c, cli_dopts_t *d)
{
    switch (c) {
    case 'b': d->broker = optarg; return 0;
    case 'j': d->json = true; return 0;
    case 'N': d->no_follow = true; return 0;
    case 'C': d->no_color = true; return 0;
    case 'T':
        if (!cli_parse_long(optarg, 1, 600000, &d->timeout_ms))
            return cli_usage_error(cmd, "--timeout wants milliseconds (1 ... 600000), got '%s'",
                                   optarg);
        return 0;
    default: return cli_bad_option(cmd, c);
    }
}

static int run_parse(int argc, char **argv, struct runopts *o)
{
    static const struct option lo[] = {
        {"thread", required_argument, NULL, 't'},  {"run", required_argument, NULL, 'r'},
        {"input", required_argument, NULL, 'i'},   {"key", required_argument, NULL, 'k'},
        {"if-busy", required_argument, NULL, 'B'}, {"no-follow", no_argument, NULL, 'N'},
        {"json", no_argument, NULL, 'j'},          {"no-color", no_argument, NULL, 'C'},
        {"broker", required_argument, NULL, 'b'},  {"timeout", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    int c, rc = 0;
    optind = 1;
    while (rc == 0 && (c = cli_getopt(argc, argv, ":h", lo, NULL)) != -1) {
        switch (c) {
        case 't': o->thread = optarg; break;
        case 'r': o->run = optarg; break;
        case 'i': o->input = optarg; break;
        case 'k': o->key = optarg; break;
        case 'B': rc = parse_if_busy(optarg, &o->if_busy); break;
        case 'h': run_help(); return -1;
        default: rc = cli_dispatch_opt("run", c, &o->d);
        }
    }
    if (rc != 0)
        return rc;
    if (argc - optind != 1)
        return cli_usage_error("run",
                               argc - optind ? "one AGENT, got %d arguments"
                                             : "no AGENT (usage: agentbus run AGENT)",
                               argc - optind);
    o->agent = argv[optind];
    return 0;
}

/* The input's string member @p key, or NULL. */
static const char *input_id(const ab_val_t *in, const char *key, char *buf, size_t size)
{
    const ab_val_t *v = ab_val_get(in, key);
    if (!v || v->type != AB_VAL_STR || v->len >= size || memchr(v->u.s, 0, v->len))
        return NULL;
    memcpy(buf, v->u.s, v->len);
    buf[v->len] = '\0';
    return buf;
}

struct runbufs {
    ab_buf_t text, mp;
    ab_doc_t *in, *reply;
    char thread[AB_ID_MAX_BYTES + 1], run[AB_ID_MAX_BYTES + 1], key[64];
};

/* Ids and input of the request (defaults filled); 0 or a usage status. */
static int run_prepare(struct runopts *o, struct runbufs *b, const ab_val_t **input)
{
    ab_error_t err = AB_ERROR_INIT;
    int rc = 0;
    if (o->input)
        rc = cli_read_input("run", o->input, &b->text, &b->mp, b->in, input);
    else if (cli_json_value("{\"messages\":[]}", 15, &b->mp, b->in, input, &err) != AB_OK)
        rc = cli_refused("run", &err);
    if (rc != 0)
        return rc;
    if (!o->thread)
        o->thread = input_id(*input, "threadId", b->thread, sizeof(b->thread));
    if (!o->thread) {
        cli_fresh_id(b->thread, sizeof(b->thread), "thread");
        o->thread = b->thread;
    }
    if (!o->run)
        o->run = input_id(*input, "runId", b->run, sizeof(b->run));
    if (!o->key) {
        cli_fresh_id(b->key, sizeof(b->key), "key");
        o->key = b->key;
    }
    rc = cli_check_id("run", "AGENT", o->agent);
    if (rc == 0)
        rc = cli_check_id("run", "--thread", o->thread);
    if (rc == 0 && o->run)
        rc = cli_check_id("run", "--run", o->run);
    if (rc == 0)
        rc = cli_check_id("run", "--key", o->key);
    return rc;
}

#define SV(s) ((ab_str_t){(s), (s) ? strlen(s) : 0})

/* Send start_run, print the answer, follow the run; the exit status. */
static int run_start(const struct runopts *o, const ab_val_t *input, ab_doc_t *reply,
                     cli_printer_t *pr, ab_conn_t **c)
{
    ab_start_run_t req = {SV(o->agent), SV(o->thread), o->run ? SV(o->run) : (ab_str_t){0},
                          input,        SV(o->key),    o->if_busy};
    ab_run_accepted_t a;
    ab_error_t err = AB_ERROR_INIT;
    if (cli_dispatch_connect("run", &o->d, AB_CAP_DISPATCH, c, &err) != AB_OK ||
        ab_conn_start_run(*c, &req, reply, &a, (int)o->d.timeout_ms, &err) != AB_OK)
        return cli_refused("run", &err);
    cli_print_accepted(pr, &a, o->key);
    return cli_follow_accepted(&o->d, *c, &a, pr);
}

int cmd_run(int argc, char **argv)
{
    struct runopts o = {.d = {.timeout_ms = AB_CONN_TIMEOUT_DEFAULT}};
    struct runbufs b = {.text = AB_BUF_INIT, .mp = AB_BUF_INIT};
    int rc = run_parse(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? AB_EXIT_OK : rc;
    if (cli_endpoint("run", o.d.broker, &o.d.broker) != 0)
        return AB_EXIT_USAGE;
    const ab_val_t *input = NULL;
    ab_conn_t *c = NULL;
    cli_printer_t pr;
    cli_printer_init(&pr, "run", o.d.json, !o.d.no_color);
    if (ab_doc_new(&b.in) != AB_OK || ab_doc_new(&b.reply) != AB_OK) {
        rc = cli_refused("run", &(ab_error_t){.code = AB_NOMEM, .message = "out of memory"});
        goto done;
    }
    if ((rc = run_prepare(&o, &b, &input)) != 0)
        goto done;
    rc = run_start(&o, input, b.reply, &pr, &c);
done:
    cli_printer_free(&pr);
    ab_conn_destroy(&c);
    ab_doc_destroy(&b.in);
    ab_doc_destroy(&b.reply);
    ab_buf_free(&b.text);
    ab_buf_free(&b.mp);
    return rc;
}

/* ---- agentbus cancel ------------------------------------------------------- */

static void cancel_help(void)
{
    printf(
        "usage: agentbus cancel THREAD RUN [--reason TEXT] [--wait] [--json] [--no-color]\n"
        "                       [--broker ENDPOINT] [--timeout MS]\n\n"
        "Cancel run RUN of thread THREAD (cancel_run) and print what the broker did:\n"
        "  dequeued   it had not started: its request is removed, it will not run\n"
        "  delivered  its worker was told to end it (with outcome cancelled)\n"
        "  no_owner   it has started but no live worker owns it (orphaned): nothing ends it\n"
        "  ended      it had already ended\n\n"
        "options:\n"
        "  --reason TEXT      why (passed to the worker)\n"
        "  --wait             then wait for the run's terminal event and print it\n"
        "  --json             the answer as one JSON object (and the terminal event)\n"
        "  --no-color         no colour (also $NO_COLOR; colour only on a terminal)\n"
        "  --broker ENDPOINT  command endpoint (default $AGENTBUS_BROKER, else " AB_DEFAULT_BROKER
        ")\n"
        "  --timeout MS       bound of each request (default 5000)\n"
        "  -h, --help         show this help\n\n"
        "exit status: 0 (dequeued, delivered, ended), 1 no_owner or a refused request, 2\n"
        "usage. With --wait, as `agentbus run` for the run's end: 0 success, 3 interrupted,\n"
        "4 cancelled (dequeued too), 1 RUN_ERROR, 130 Ctrl-C.\n");
}

static const char *outcome_name(ab_cancel_outcome_t o)
{
    switch (o) {
    case AB_CANCEL_DEQUEUED: return "dequeued";
    case AB_CANCEL_DELIVERED: return "delivered";
    case AB_CANCEL_NO_OWNER: return "no_owner";
    case AB_CANCEL_ENDED: return "ended";
    default: return "?";
    }
}

static const char *outcome_text(ab_cancel_outcome_t o)
{
    switch (o) {
    case AB_CANCEL_DEQUEUED: return "it had not started: its request is removed, it will not run";
    case AB_CANCEL_DELIVERED: return "its worker was told to end it with outcome cancelled";
    case AB_CANCEL_NO_OWNER:
        return "it has started but no live worker owns it (orphaned): nothing ends it until "
               "a worker claims it or it is abandoned";
    case AB_CANCEL_ENDED: return "it had already ended";
    default: return "?";
    }
}

static void print_cancel(const cli_printer_t *pr, const ab_cancel_reply_t *r, const char *thread,
                         const char *run)
{
    if (pr->json) {
        ab_buf_t b = AB_BUF_INIT;
        put(&b, "{\"op\":\"cancel_reply\",\"thread\":", 30);
        put_quoted(&b, thread, strlen(thread));
        put(&b, ",\"run\":", 7);
        put_quoted(&b, run, strlen(run));
        char tail[96];
        int n = snprintf(tail, sizeof(tail),
                         ",\"outcome\":\"%s\",\"request\":", outcome_name(r->outcome));
        put(&b, tail, (size_t)n);
        n = r->request ? snprintf(tail, sizeof(tail), "%llu}\n", (unsigned long long)r->request)
                       : snprintf(tail, sizeof(tail), "null}\n");
        put(&b, tail, (size_t)n);
        fwrite(b.data, 1, b.len, stdout);
        ab_buf_free(&b);
    } else {
        printf("run %s/%s: %s: %s", thread, run, outcome_name(r->outcome),
               outcome_text(r->outcome));
        if (r->request)
            printf(" (request %llu)", (unsigned long long)r->request);
        printf("\n");
    }
    fflush(stdout);
}

static int cancel_parse(int argc, char **argv, cli_dopts_t *d, const char **reason, bool *wait)
{
    static const struct option lo[] = {
        {"reason", required_argument, NULL, 'R'}, {"wait", no_argument, NULL, 'W'},
        {"json", no_argument, NULL, 'j'},         {"no-color", no_argument, NULL, 'C'},
        {"broker", required_argument, NULL, 'b'}, {"timeout", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    int c, rc = 0;
    optind = 1;
    while (rc == 0 && (c = cli_getopt(argc, argv, ":h", lo, NULL)) != -1) {
        switch (c) {
        case 'R': *reason = optarg; break;
        case 'W': *wait = true; break;
        case 'h': cancel_help(); return -1;
        default: rc = cli_dispatch_opt("cancel", c, d);
        }
    }
    if (rc != 0)
        return rc;
    if (argc - optind != 2)
        return cli_usage_error("cancel", "want THREAD RUN, got %d argument%s", argc - optind,
                               argc - optind == 1 ? "" : "s");
    if (*reason && strlen(*reason) > AB_REASON_MAX)
        return cli_usage_error("cancel", "--reason is longer than %d bytes", AB_REASON_MAX);
    rc = cli_check_id("cancel", "THREAD", argv[optind]);
    return rc ? rc : cli_check_id("cancel", "RUN", argv[optind + 1]);
}

/* --wait: follow the run quietly to its terminal event. */
static int cancel_wait(const cli_dopts_t *d, ab_conn_t *c, const ab_cancel_reply_t *r,
                       const char *thread, const char *run, cli_printer_t *pr)
{
    if (r->outcome == AB_CANCEL_DEQUEUED)
        return AB_EXIT_CANCELLED;
    cli_follow_t f = {.broker = d->broker,
                      .thread = thread,
                      .run = run,
                      .request = r->request,
                      .conn = c,
                      .quiet = true,
                      .timeout_ms = (int)d->timeout_ms};
    cli_catch_signals();
    return cli_end_exit(cli_follow_run(&f, pr));
}

int cmd_cancel(int argc, char **argv)
{
    cli_dopts_t d = {.timeout_ms = AB_CONN_TIMEOUT_DEFAULT};
    const char *reason = NULL;
    bool wait = false;
    int rc = cancel_parse(argc, argv, &d, &reason, &wait);
    if (rc != 0)
        return rc < 0 ? AB_EXIT_OK : rc;
    const char *thread = argv[optind], *run = argv[optind + 1];
    if (cli_endpoint("cancel", d.broker, &d.broker) != 0)
        return AB_EXIT_USAGE;
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    cli_printer_t pr;
    cli_printer_init(&pr, "cancel", d.json, !d.no_color);
    ab_cancel_run_t q = {SV(thread), SV(run), reason ? SV(reason) : (ab_str_t){0}};
    ab_cancel_reply_t r;
    ab_status_t st = ab_doc_new(&doc) == AB_OK
                         ? cli_dispatch_connect("cancel", &d, AB_CAP_CANCEL_RUN, &c, &err)
                         : ab_error_set(&err, AB_NOMEM, "", "out of memory");
    if (st == AB_OK)
        st = ab_conn_cancel_run(c, &q, doc, &r, (int)d.timeout_ms, &err);
    if (st != AB_OK) {
        rc = cli_refused("cancel", &err);
    } else {
        print_cancel(&pr, &r, thread, run);
        rc = r.outcome == AB_CANCEL_NO_OWNER ? AB_EXIT_FAIL
             : wait                          ? cancel_wait(&d, c, &r, thread, run, &pr)
                                             : AB_EXIT_OK;
    }
    cli_printer_free(&pr);
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    return rc;
}

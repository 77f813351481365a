/*
 * publish.c - `agentbus publish`: one run's AG-UI events as JSON Lines from
 * standard input or a file, through the producer (agentbus/producer.h).
 *
 * A file is a run from its first line: its k-th event is seq k of the run,
 * so publishing the same file again is answered as duplicates, and a file
 * that only repeats part of a stored run continues it where it differs. With
 * --append the file continues the stored run after its last committed seq.
 * The run is named by --thread/--run or, for what the flags leave out, by
 * the threadId/runId of a first RUN_STARTED line.
 *
 * Two passes: the whole input is checked first (JSON, strict AG-UI rules,
 * the run lifecycle from the run's start - with --append, from the stored
 * events replayed), and nothing is sent unless every line passes. Then the
 * run is taken (a run the bus never saw is written at its implicit epoch 1,
 * so a rejection leaves no claimed run without events; a known run is
 * claimed) and every line is published; the broker's first rejection stops
 * it, naming the line and seq.
 *
 * Invariants:
 *  1. Memory is bounded: one line at a time (at most CLI_LINE_MAX_BYTES), the
 *     producer's outbox and a ring of the line numbers of unacknowledged
 *     seqs. Standard input is spooled to a temporary file for the second
 *     pass; a regular file is read twice.
 *  2. Nothing is sent before the whole input passed; an empty input sends
 *     nothing.
 *  3. Exit 0 only when every line was acknowledged (accepted or duplicate).
 */
#include "ab_common.h"
#include "agentbus/json.h"
#include "agentbus/producer.h"
#include "cli.h"
#include "evcheck.h"
#include "lines.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define ID_MAX 512

struct popts {
    const char *broker;
    const char *thread;
    const char *run;
    const char *path;
    long batch;
    long timeout_ms;
    bool append;
    bool json;
};

struct pstate {
    struct popts o;
    FILE *in;
    FILE *spool; /* standard input kept for the second pass, or NULL */
    ab_producer_t *p;
    evcheck_t *chk;
    uint64_t events;    /* non-blank lines of the input */
    uint64_t stored;    /* the run's last committed seq when taken */
    ab_doc_t *edoc;     /* a stored event (--append) */
    ab_doc_t *rdoc;     /* replies read outside the producer */
    ab_doc_t *cdoc;     /* an input line compared with its stored event */
    ab_buf_t mp;        /* its msgpack */
    uint64_t same;      /* the input's first events the run already holds (duplicates) */
    uint64_t compared;  /* the last stored seq compared */
    bool input_done;    /* the input ended while being compared */
    ab_error_t differs; /* a stored event that differs from the input's */
    ab_buf_t line;
    long lineno;
    long *lines; /* ring: line number of seq s at lines[s % nlines] (invariant 1) */
    size_t nlines;
    uint64_t first_seq;
    char thread[ID_MAX];
    char run[ID_MAX];
};

static void print_help(void)
{
    printf("usage: agentbus publish [--broker ENDPOINT] [--thread ID] [--run ID] [--append]\n"
           "                        [--batch N] [--timeout MS] [--json] [FILE]\n\n"
           "Publish one run's AG-UI 1.0 events, one JSON object per line, from FILE or standard\n"
           "input. Blank lines are skipped. The whole input is checked first (strict event\n"
           "rules and the run's lifecycle) and nothing is sent unless every line passes. The\n"
           "k-th event is seq k of the run, so publishing the same file again is answered as\n"
           "duplicates; --append continues a stored run after its last event instead. Each\n"
           "event is acknowledged durably by the broker. Prints 'published N events to thread\n"
           "T run R (seq A..B, D duplicates) in X ms'. A rejection prints 'rejected at line N\n"
           "(seq S): code: message' and exits 1 (events before it stay published); usage\n"
           "errors exit 2.\n\n"
           "options:\n"
           "  --broker ENDPOINT  the broker's command endpoint (default $AGENTBUS_BROKER, else\n"
           "                     " AB_DEFAULT_BROKER ")\n"
           "  --thread ID        the run's thread (default: threadId of a first RUN_STARTED line)\n"
           "  --run ID           the run (default: runId of a first RUN_STARTED line)\n"
           "  --append           continue the stored run after its last committed event (needs\n"
           "                     --thread and --run; the run must have events)\n"
           "  --batch N          events per publish request, 1..1024 (default 256)\n"
           "  --timeout MS       bound of connecting, of each request and of the final flush\n"
           "                     (default 5000)\n"
           "  --json             print the outcome as one JSON object on standard output\n"
           "  -h, --help         show this help\n");
}

static int parse_args(int argc, char **argv, struct popts *o)
{
    static const struct option longopts[] = {
        {"broker", required_argument, NULL, 'b'},
        {"thread", required_argument, NULL, 't'},
        {"run", required_argument, NULL, 'r'},
        {"batch", required_argument, NULL, 'n'},
        {"timeout", required_argument, NULL, 'T'},
        {"append", no_argument, NULL, 'a'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = cli_getopt(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b': o->broker = optarg; break;
        case 't': o->thread = optarg; break;
        case 'r': o->run = optarg; break;
        case 'a': o->append = true; break;
        case 'j': o->json = true; break;
        case 'n':
            if (!cli_parse_long(optarg, 1, 1024, &o->batch))
                return cli_usage_error("publish", "--batch wants 1..1024, got '%s'", optarg);
            break;
        case 'T':
            if (!cli_parse_long(optarg, 1, 3600000, &o->timeout_ms))
                return cli_usage_error("publish", "--timeout wants milliseconds, got '%s'", optarg);
            break;
        case 'h': print_help(); return -1;
        default: return cli_bad_option("publish", c);
        }
    }
    if (argc - optind > 1)
        return cli_usage_error("publish", "expected at most one FILE, got %d", argc - optind);
    if (o->append && (!o->thread || !o->run))
        return cli_usage_error("publish", "--append needs --thread and --run");
    o->path = optind < argc ? argv[optind] : NULL;
    return cli_endpoint("publish", o->broker, &o->broker);
}

/* Next non-blank line into st->line; false at EOF. A too-long line is kept
 * as an error in @p err. When spooling, every line read is kept too. */
static bool next_line(struct pstate *st, FILE *spool, ab_error_t *err)
{
    long n;
    while ((n = cli_read_line(st->in, &st->line)) != -1) {
        st->lineno++;
        if (n == -2) {
            ab_error_set(err, AB_TOO_LARGE, "", "line longer than %u bytes", CLI_LINE_MAX_BYTES);
            return true;
        }
        if (spool && (fwrite(st->line.data, 1, st->line.len, spool) != st->line.len ||
                      fputc('\n', spool) == EOF)) {
            ab_error_set(err, AB_IO, "", "cannot keep standard input for sending: %s",
                         strerror(errno));
            return true;
        }
        if (!cli_blank(&st->line))
            return true;
    }
    return false;
}

static void copy_id(char *dst, const ab_val_t *v)
{
    dst[0] = '\0';
    if (v && v->type == AB_VAL_STR && v->len < ID_MAX) {
        memcpy(dst, v->u.s, v->len);
        dst[v->len] = '\0';
    }
}

static int report_line_error(struct pstate *st, const ab_error_t *err);

/* The first line's own error, when it has one: a pretty-printed or non-JSON input is
 * reported as such, before any word about the run's ids. @return AB_OK when it parses. */
static ab_status_t first_line_error(struct pstate *st, const ab_val_t **root,
                                    const ab_error_t *line_err, ab_error_t *err)
{
    if (line_err->code != AB_OK) {
        *err = *line_err;
        return err->code;
    }
    ab_error_t perr = AB_ERROR_INIT;
    if (cli_parse_event(st->cdoc, &st->mp, &st->line, root, &perr) == AB_OK)
        return AB_OK;
    if (!evcheck_not_jsonl((const char *)st->line.data, st->line.len, err))
        *err = perr;
    return err->code;
}

/* Fill the ids the flags left out from the first line, if it is RUN_STARTED. */
static int ids_from_first_line(struct pstate *st, const ab_error_t *line_err)
{
    snprintf(st->thread, sizeof(st->thread), "%s", st->o.thread ? st->o.thread : "");
    snprintf(st->run, sizeof(st->run), "%s", st->o.run ? st->o.run : "");
    if (st->thread[0] && st->run[0])
        return 0;
    const ab_val_t *root = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (first_line_error(st, &root, line_err, &err) != AB_OK)
        return report_line_error(st, &err);
    if (ab_val_str_eq(ab_val_get(root, "type"), "RUN_STARTED")) {
        if (!st->thread[0])
            copy_id(st->thread, ab_val_get(root, "threadId"));
        if (!st->run[0])
            copy_id(st->run, ab_val_get(root, "runId"));
    }
    if (st->thread[0] && st->run[0])
        return 0;
    return cli_usage_error("publish",
                           "no %s: give --thread and --run, or start the stream with a "
                           "RUN_STARTED line",
                           st->thread[0] ? "run id" : "thread id");
}

/* One JSON object on stdout (--json): the outcome, or the failure. */
static void print_json(const struct pstate *st, const ab_error_t *err, long line, uint64_t seq)
{
    ab_producer_stats_t s = st->p ? ab_producer_stats(st->p) : (ab_producer_stats_t){0};
    printf("{\"ok\":%s,\"thread\":", err ? "false" : "true");
    cli_json_str(stdout, st->thread);
    printf(",\"run\":");
    cli_json_str(stdout, st->run);
    printf(",\"events\":%llu,\"acked\":%llu,\"duplicates\":%llu,\"first_seq\":%llu",
           (unsigned long long)st->events, (unsigned long long)(s.acked + st->same),
           (unsigned long long)(s.duplicates + st->same), (unsigned long long)st->first_seq);
    if (err) {
        printf(",\"line\":%ld", line);
        if (seq)
            printf(",\"seq\":%llu", (unsigned long long)seq);
        printf(",\"error\":");
        cli_json_error(stdout, err);
    }
    printf("}\n");
}

static int fail_error(const struct pstate *st, const ab_error_t *err)
{
    char buf[768];
    fprintf(stderr, "agentbus publish: %s\n", cli_error_text(err, buf, sizeof(buf)));
    if (st->o.json)
        print_json(st, err, 0, 0);
    return AB_EXIT_FAIL;
}

/* Report a rejection: a broker answer names its seq in detail "seq". */
static int report_rejection(struct pstate *st, const ab_error_t *err, bool local)
{
    uint64_t seq = ab_producer_next_seq(st->p);
    long line = st->lineno;
    const ab_error_detail_t *d = ab_error_detail(err, "seq");
    if (!local && d && d->kind == AB_DETAIL_INT && d->i >= 1) {
        seq = (uint64_t)d->i;
        line = st->lines[seq % st->nlines];
    }
    char buf[768];
    fprintf(stderr, "agentbus publish: rejected at line %ld (seq %llu): %s\n", line,
            (unsigned long long)seq, cli_error_text(err, buf, sizeof(buf)));
    if (err->code == AB_CONFLICT && seq <= st->stored)
        fprintf(stderr,
                "agentbus publish: the run already holds a different event at seq %llu; "
                "--append continues a run after its last event\n",
                (unsigned long long)seq);
    if (st->o.json)
        print_json(st, err, line, seq);
    return AB_EXIT_FAIL;
}

/* ab_conn_row_cb of the stored run (--append): its events feed the checker. */
static ab_status_t preload_row(void *ud, const ab_stamp_t *stamp, const uint8_t *b, size_t len,
                               ab_error_t *err)
{
    (void)stamp;
    struct pstate *st = ud;
    ab_event_t ev;
    ab_limits_t lim = ab__limits_stored(); /* events the broker stored */
    ab_status_t rc = ab_event_decode(st->edoc, b, len, &lim, &ev, err);
    if (rc != AB_OK)
        return rc;
    ab_agui_info_t info;
    ab_error_t verr = AB_ERROR_INIT; /* the broker accepted it: only the state matters */
    (void)evcheck_val(st->chk, ev.body, &info, &verr);
    st->stored = ev.seq;
    return AB_OK;
}

static int connect_producer(struct pstate *st)
{
    ab_producer_opts_t po = {.client_name = "agentbus-publish",
                             .batch_max = (uint32_t)st->o.batch,
                             .timeout_ms = (int)st->o.timeout_ms};
    ab_error_t err = AB_ERROR_INIT;
    if (ab_producer_new(&st->p, st->o.broker, &po, &err) != AB_OK)
        return fail_error(st, &err);
    return AB_EXIT_OK;
}

/* --append: the stored run, replayed into the checker. */
static int preload_run(struct pstate *st)
{
    int rc = connect_producer(st);
    if (rc != AB_EXIT_OK)
        return rc;
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay = (ab_replay_t){.scope = AB_REPLAY_RUN,
                               .thread = {st->thread, strlen(st->thread)},
                               .run = {st->run, strlen(st->run)}};
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_replay(ab_producer_conn(st->p), &q, preload_row, st, st->rdoc, NULL,
                       (int)st->o.timeout_ms, &err) != AB_OK)
        return fail_error(st, &err);
    if (st->stored == 0) {
        ab_error_set(&err, AB_NOT_FOUND, "",
                     "run '%s' of thread '%s' has no stored events: nothing to append to "
                     "(publish without --append starts a run)",
                     st->run, st->thread);
        return fail_error(st, &err);
    }
    return AB_EXIT_OK;
}

static int report_line_error(struct pstate *st, const ab_error_t *err)
{
    char buf[768];
    fprintf(stderr, "agentbus publish: line %ld: %s; nothing was published\n", st->lineno,
            cli_error_text(err, buf, sizeof(buf)));
    if (st->o.json)
        print_json(st, err, st->lineno, 0);
    return AB_EXIT_FAIL;
}

/* First pass: every line is checked before anything is sent (invariant 2). */
static int check_input(struct pstate *st, ab_error_t *line_err)
{
    bool more = true;
    for (; more; more = next_line(st, st->spool, line_err)) {
        ab_agui_info_t info;
        ab_error_t err = *line_err;
        ab_error_t nj = AB_ERROR_INIT;
        if (err.code == AB_OK && evcheck_line(st->chk, (const char *)st->line.data, st->line.len,
                                              &info, &err) == AB_OK) {
            st->events++;
            continue;
        }
        if (st->events == 0 && evcheck_not_jsonl((const char *)st->line.data, st->line.len, &nj))
            return report_line_error(st, &nj);
        return report_line_error(st, &err);
    }
    if (ferror(st->in)) {
        fprintf(stderr, "agentbus publish: read error: %s\n", strerror(errno));
        return AB_EXIT_FAIL;
    }
    return AB_EXIT_OK;
}

/* The run's head: *known when the bus has seen it (events, a claim or a request). */
static int read_head(struct pstate *st, bool *known)
{
    ab_run_ref_t ref = {{st->thread, strlen(st->thread)}, {st->run, strlen(st->run)}};
    ab_heads_t q = {.runs = &ref, .nruns = 1};
    ab_heads_reply_t hr;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_heads(ab_producer_conn(st->p), &q, st->rdoc, &hr, (int)st->o.timeout_ms, &err) !=
        AB_OK)
        return fail_error(st, &err);
    const ab_head_t *h = hr.nheads == 1 ? &hr.heads[0] : NULL;
    *known = h && (h->status != AB_RUN_STATUS_UNKNOWN || h->epoch != 0 || h->last_seq != 0);
    st->stored = h ? h->last_seq : 0;
    return AB_EXIT_OK;
}

/* ab_conn_row_cb: stored event k against the input's k-th event. */
static ab_status_t compare_row(void *ud, const ab_stamp_t *stamp, const uint8_t *b, size_t len,
                               ab_error_t *err)
{
    (void)stamp;
    struct pstate *st = ud;
    ab_error_t lerr = AB_ERROR_INIT;
    if (!next_line(st, NULL, &lerr)) {
        st->input_done = true;
        return AB_REQUEST_ABORTED;
    }
    ab_event_t ev;
    const ab_val_t *mine = NULL;
    ab_limits_t lim = ab__limits_stored(); /* events the broker stored */
    ab_status_t rc = ab_event_decode(st->edoc, b, len, &lim, &ev, err);
    if (rc == AB_OK)
        rc = cli_parse_event(st->cdoc, &st->mp, &st->line, &mine, err);
    if (rc != AB_OK)
        return rc;
    st->compared = ev.seq;
    if (!ab_val_equal(ev.body, mine)) {
        ab_error_set(&st->differs, AB_CONFLICT, "seq",
                     "the run already holds a different event at seq %llu (--append continues "
                     "a run after its last event)",
                     (unsigned long long)ev.seq);
        return AB_REQUEST_ABORTED;
    }
    st->same++;
    return AB_OK;
}

/* A known run's stored events against the input's first ones (duplicates). */
static int compare_stored(struct pstate *st)
{
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay = (ab_replay_t){.scope = AB_REPLAY_RUN,
                               .thread = {st->thread, strlen(st->thread)},
                               .run = {st->run, strlen(st->run)}};
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t rc = ab_conn_replay(ab_producer_conn(st->p), &q, compare_row, st, st->rdoc, NULL,
                                    (int)st->o.timeout_ms, &err);
    if (st->differs.code != AB_OK) {
        char buf[768];
        fprintf(stderr, "agentbus publish: rejected at line %ld (seq %llu): %s\n", st->lineno,
                (unsigned long long)st->compared, cli_error_text(&st->differs, buf, sizeof(buf)));
        if (st->o.json)
            print_json(st, &st->differs, st->lineno, st->compared);
        return AB_EXIT_FAIL;
    }
    if (rc != AB_OK && !(rc == AB_REQUEST_ABORTED && st->input_done))
        return fail_error(st, &err);
    return AB_EXIT_OK;
}

/* Take the run: claim it when the bus knows it, else its implicit epoch 1,
 * so that a rejection leaves no claimed run without events. */
static int take_run(struct pstate *st, bool known)
{
    ab_error_t err = AB_ERROR_INIT;
    uint64_t last = 0;
    if (!known && !st->o.append) {
        if (ab_producer_assigned(st->p, st->thread, st->run, 1, &err) != AB_OK)
            return fail_error(st, &err);
        st->first_seq = 1;
        return AB_EXIT_OK;
    }
    if (ab_producer_claim(st->p, st->thread, st->run, &last, &err) != AB_OK)
        return fail_error(st, &err);
    if (!st->o.append && last != st->same) {
        ab_error_set(&err, AB_CONFLICT, "",
                     "run '%s' grew to seq %llu while it was compared (another writer?); "
                     "publish again to compare anew",
                     st->run, (unsigned long long)last);
        return fail_error(st, &err);
    }
    st->first_seq = last + 1;
    return AB_EXIT_OK;
}

/* Publish the current line; on failure report and return the exit status. */
static int publish_line(struct pstate *st)
{
    ab_error_t err = AB_ERROR_INIT;
    uint64_t seq = ab_producer_next_seq(st->p);
    st->lines[seq % st->nlines] = st->lineno;
    ab_status_t rc =
        ab_producer_publish_json(st->p, (const char *)st->line.data, st->line.len, &err);
    if (rc == AB_OK)
        return AB_EXIT_OK;
    bool local = ab_error_detail(&err, "seq") == NULL;
    if (local && (rc == AB_INVALID_EVENT || rc == AB_TOO_LARGE)) {
        ab_error_t ferr = AB_ERROR_INIT; /* keep what came before */
        if (ab_producer_flush(st->p, (int)st->o.timeout_ms, &ferr) != AB_OK)
            return report_rejection(st, &ferr, false);
        return report_rejection(st, &err, true);
    }
    return local ? fail_error(st, &err) : report_rejection(st, &err, false);
}

static int print_summary(struct pstate *st, int64_t t0)
{
    ab_producer_stats_t s = ab_producer_stats(st->p);
    uint64_t end = st->first_seq + s.published - 1;
    if (s.published == 0)
        end = st->same, st->first_seq = st->same ? 1 : 0;
    else if (st->same)
        st->first_seq = 1;
    if (st->o.json) {
        print_json(st, NULL, 0, 0);
        return AB_EXIT_OK;
    }
    printf("published %llu events to thread %s run %s (seq %llu..%llu, %llu duplicates) in %lld "
           "ms\n",
           (unsigned long long)(s.acked + st->same), st->thread, st->run,
           (unsigned long long)st->first_seq, (unsigned long long)end,
           (unsigned long long)(s.duplicates + st->same), (long long)(ab__mono_ms() - t0));
    return AB_EXIT_OK;
}

/* Second pass: the checked input again, from its start. */
static int send_input(struct pstate *st, int64_t t0)
{
    bool known = false;
    int rc = st->o.append ? AB_EXIT_OK : read_head(st, &known);
    if (rc != AB_EXIT_OK)
        return rc;
    if (st->spool)
        st->in = st->spool;
    if (fseek(st->in, 0, SEEK_SET) != 0) {
        fprintf(stderr, "agentbus publish: cannot read the input again: %s\n", strerror(errno));
        return AB_EXIT_FAIL;
    }
    st->lineno = 0;
    if (known && st->stored > 0 && (rc = compare_stored(st)) != AB_EXIT_OK)
        return rc;
    if (st->input_done || (known && st->same == st->events)) /* all stored already */
        return print_summary(st, t0);
    if ((rc = take_run(st, known)) != AB_EXIT_OK)
        return rc;
    ab_error_t err = AB_ERROR_INIT;
    while (next_line(st, NULL, &err)) {
        if (err.code != AB_OK)
            return fail_error(st, &err);
        if ((rc = publish_line(st)) != AB_EXIT_OK)
            return rc;
    }
    if (ab_producer_flush(st->p, (int)st->o.timeout_ms, &err) != AB_OK)
        return ab_error_detail(&err, "seq") ? report_rejection(st, &err, false)
                                            : fail_error(st, &err);
    return print_summary(st, t0);
}

/* An input with no event: nothing is sent (invariant 2); an input that cannot be read at
 * all (a directory, say) is a usage error like one that cannot be opened. */
static int no_events(struct pstate *st)
{
    if (ferror(st->in)) {
        fprintf(stderr, "agentbus publish: cannot read %s: %s\n",
                st->o.path ? st->o.path : "standard input", strerror(errno));
        return AB_EXIT_USAGE;
    }
    ab_error_t err = AB_ERROR_INIT;
    ab_error_set(&err, AB_INVALID_ARGUMENT, "", "no events in the input: nothing was published");
    fprintf(stderr, "agentbus publish: %s\n", err.message);
    if (st->o.json)
        print_json(st, &err, 0, 0);
    return AB_EXIT_FAIL;
}

static int run_publish(struct pstate *st)
{
    int64_t t0 = ab__mono_ms();
    ab_error_t line_err = AB_ERROR_INIT;
    if (!next_line(st, st->spool, &line_err))
        return no_events(st);
    if (ab_doc_new(&st->cdoc) != AB_OK) {
        fprintf(stderr, "agentbus publish: out of memory\n");
        return AB_EXIT_FAIL;
    }
    int rc = ids_from_first_line(st, &line_err);
    if (rc != 0)
        return rc;
    evcheck_opts_t eo = {.lifecycle = true,
                         .one_run = true,
                         .trust_thread = true,
                         .thread = st->thread,
                         .run = st->run};
    if (evcheck_new(&st->chk, &eo) != AB_OK || ab_doc_new(&st->edoc) != AB_OK ||
        ab_doc_new(&st->rdoc) != AB_OK) {
        fprintf(stderr, "agentbus publish: out of memory\n");
        return AB_EXIT_FAIL;
    }
    if (st->o.append && (rc = preload_run(st)) != AB_EXIT_OK)
        return rc;
    if ((rc = check_input(st, &line_err)) != AB_EXIT_OK)
        return rc;
    if (!st->p && (rc = connect_producer(st)) != AB_EXIT_OK)
        return rc;
    return send_input(st, t0);
}

/* Standard input (or any input that cannot be read twice) is spooled. */
static bool rereadable(FILE *in)
{
    struct stat sb;
    return fstat(fileno(in), &sb) == 0 && S_ISREG(sb.st_mode) && ftell(in) == 0;
}

int cmd_publish(int argc, char **argv)
{
    struct pstate st = {
        .o = {.batch = AB_PRODUCER_BATCH_DEFAULT, .timeout_ms = AB_CONN_TIMEOUT_DEFAULT}};
    int rc = parse_args(argc, argv, &st.o);
    if (rc != 0)
        return rc < 0 ? AB_EXIT_OK : rc;
    st.in = stdin;
    if (st.o.path && strcmp(st.o.path, "-") != 0 && !(st.in = fopen(st.o.path, "r"))) {
        fprintf(stderr, "agentbus publish: cannot open %s: %s\n", st.o.path, strerror(errno));
        return AB_EXIT_USAGE;
    }
    FILE *orig = st.in;
    st.nlines = (size_t)st.o.batch + 1;
    st.lines = calloc(st.nlines, sizeof(*st.lines));
    if (!st.lines || (!rereadable(st.in) && !(st.spool = tmpfile()))) {
        fprintf(stderr, "agentbus publish: %s\n",
                st.lines ? "cannot create a temporary file for standard input" : "out of memory");
        rc = AB_EXIT_FAIL;
    } else {
        rc = run_publish(&st);
    }
    ab_producer_destroy(&st.p);
    evcheck_destroy(&st.chk);
    ab_doc_destroy(&st.edoc);
    ab_doc_destroy(&st.rdoc);
    ab_doc_destroy(&st.cdoc);
    ab_buf_free(&st.mp);
    ab_buf_free(&st.line);
    free(st.lines);
    if (st.spool)
        fclose(st.spool);
    if (orig != stdin)
        fclose(orig);
    return rc;
}

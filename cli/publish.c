/*
 * publish.c - `agentbus publish`: AG-UI events as JSON Lines from standard
 * input or a file into one run, through the producer (agentbus/producer.h).
 *
 * The run is named by --thread/--run or, for what the flags leave out, by
 * the threadId/runId of the first line when it is a RUN_STARTED. The
 * command claims the run, publishes every non-blank line (seq continuing
 * after the run's last committed seq), flushes, and prints one summary line.
 * The first rejection - local validation or the broker's typed answer -
 * stops it: what was published before is flushed, the rejection is printed
 * with its line number and seq, and the exit status is 1.
 *
 * Invariants:
 *  1. Memory is bounded: one line at a time (at most CLI_LINE_MAX_BYTES), the
 *     producer's outbox, and a ring of line numbers of the unacknowledged
 *     seqs (the outbox never holds more than batch events).
 *  2. Exit 0 only when every line was acknowledged by the broker.
 */
#include "ab_common.h"
#include "agentbus/json.h"
#include "agentbus/producer.h"
#include "cli.h"
#include "lines.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ID_MAX 512

struct popts {
    const char *broker;
    const char *thread;
    const char *run;
    const char *path;
    long batch;
    long timeout_ms;
};

struct pstate {
    struct popts o;
    FILE *in;
    ab_producer_t *p;
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
    printf("usage: agentbus publish [--broker ENDPOINT] [--thread ID] [--run ID] [--batch N]\n"
           "                        [--timeout MS] [FILE]\n\n"
           "Publish AG-UI 1.0 events, one JSON object per line, from FILE or standard input\n"
           "into one run. Blank lines are skipped. Each event is validated (strict producer\n"
           "rules), numbered after the run's last committed seq and acknowledged durably by the\n"
           "broker. Prints 'published N events to thread T run R (seq A..B, D duplicates) in X\n"
           "ms'. On the first rejection prints 'rejected at line N (seq S): code: message' and\n"
           "exits 1; usage errors exit 2.\n\n"
           "options:\n"
           "  --broker ENDPOINT  the broker's command endpoint (default $AGENTBUS_BROKER, else\n"
           "                     " AB_DEFAULT_BROKER ")\n"
           "  --thread ID        the run's thread (default: threadId of a first RUN_STARTED line)\n"
           "  --run ID           the run (default: runId of a first RUN_STARTED line)\n"
           "  --batch N          events per publish request, 1..1024 (default 256)\n"
           "  --timeout MS       bound of connecting, of each request and of the final flush\n"
           "                     (default 5000)\n"
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
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b': o->broker = optarg; break;
        case 't': o->thread = optarg; break;
        case 'r': o->run = optarg; break;
        case 'n':
            if (!cli_parse_long(optarg, 1, 1024, &o->batch))
                return cli_usage_error("publish", "--batch wants 1..1024, got '%s'", optarg);
            break;
        case 'T':
            if (!cli_parse_long(optarg, 1, 3600000, &o->timeout_ms))
                return cli_usage_error("publish", "--timeout wants milliseconds, got '%s'", optarg);
            break;
        case 'h': print_help(); return -1;
        default: return cli_usage_error("publish", "unknown option");
        }
    }
    if (argc - optind > 1)
        return cli_usage_error("publish", "expected at most one FILE, got %d", argc - optind);
    o->path = optind < argc ? argv[optind] : NULL;
    return 0;
}

/* Next non-blank line into st->line; false at EOF. A too-long line is kept
 * as an error in @p err. */
static bool next_line(struct pstate *st, ab_error_t *err)
{
    long n;
    while ((n = cli_read_line(st->in, &st->line)) != -1) {
        st->lineno++;
        if (n == -2) {
            ab_error_set(err, AB_TOO_LARGE, "", "line longer than %u bytes", CLI_LINE_MAX_BYTES);
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

/* Fill the ids the flags left out from the first line, if it is RUN_STARTED. */
static int ids_from_first_line(struct pstate *st)
{
    snprintf(st->thread, sizeof(st->thread), "%s", st->o.thread ? st->o.thread : "");
    snprintf(st->run, sizeof(st->run), "%s", st->o.run ? st->o.run : "");
    if (st->thread[0] && st->run[0])
        return 0;
    ab_buf_t mp = AB_BUF_INIT;
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    const ab_val_t *root = NULL;
    if (st->line.len && ab_doc_new(&doc) == AB_OK &&
        ab_json_to_msgpack((const char *)st->line.data, st->line.len, 64, CLI_LINE_MAX_BYTES,
                           AB_INVALID_EVENT, &mp, &err) == AB_OK &&
        ab_doc_parse(doc, mp.data, mp.len, CLI_LINE_MAX_BYTES, 64, AB_INVALID_EVENT, &root, &err) ==
            AB_OK &&
        ab_val_str_eq(ab_val_get(root, "type"), "RUN_STARTED")) {
        if (!st->thread[0])
            copy_id(st->thread, ab_val_get(root, "threadId"));
        if (!st->run[0])
            copy_id(st->run, ab_val_get(root, "runId"));
    }
    ab_doc_destroy(&doc);
    ab_buf_free(&mp);
    if (st->thread[0] && st->run[0])
        return 0;
    return cli_usage_error("publish",
                           "no %s: give --thread and --run, or start the stream with a "
                           "RUN_STARTED line",
                           st->thread[0] ? "run id" : "thread id");
}

static int fail_error(const ab_error_t *err)
{
    char buf[768];
    fprintf(stderr, "agentbus publish: %s\n", ab_error_format(err, buf, sizeof(buf)));
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
            (unsigned long long)seq, ab_error_format(err, buf, sizeof(buf)));
    return AB_EXIT_FAIL;
}

/* Publish the current line; on failure report and return the exit status. */
static int publish_line(struct pstate *st, ab_error_t *line_err)
{
    ab_error_t err = AB_ERROR_INIT;
    uint64_t seq = ab_producer_next_seq(st->p);
    st->lines[seq % st->nlines] = st->lineno;
    ab_status_t rc = line_err->code;
    if (rc != AB_OK)
        err = *line_err;
    else
        rc = ab_producer_publish_json(st->p, (const char *)st->line.data, st->line.len, &err);
    if (rc == AB_OK)
        return AB_EXIT_OK;
    bool local = ab_error_detail(&err, "seq") == NULL;
    if (local && (rc == AB_INVALID_EVENT || rc == AB_TOO_LARGE)) {
        ab_error_t ferr = AB_ERROR_INIT; /* keep what came before */
        if (ab_producer_flush(st->p, (int)st->o.timeout_ms, &ferr) != AB_OK)
            return report_rejection(st, &ferr, false);
        return report_rejection(st, &err, true);
    }
    if (!local)
        return report_rejection(st, &err, false);
    return fail_error(&err);
}

static int run_publish(struct pstate *st, ab_error_t *line_err)
{
    int64_t t0 = ab__mono_ms();
    ab_producer_opts_t po = {.client_name = "agentbus-publish",
                             .batch_max = (uint32_t)st->o.batch,
                             .timeout_ms = (int)st->o.timeout_ms};
    ab_error_t err = AB_ERROR_INIT;
    uint64_t last = 0;
    if (ab_producer_new(&st->p, cli_broker_endpoint(st->o.broker), &po, &err) != AB_OK ||
        ab_producer_claim(st->p, st->thread, st->run, &last, &err) != AB_OK)
        return fail_error(&err);
    st->first_seq = last + 1;
    bool more = st->line.len > 0 || line_err->code != AB_OK;
    while (more) {
        int rc = publish_line(st, line_err);
        if (rc != AB_EXIT_OK)
            return rc;
        ab_error_clear(line_err);
        more = next_line(st, line_err);
    }
    if (ferror(st->in)) {
        fprintf(stderr, "agentbus publish: read error: %s\n", strerror(errno));
        return AB_EXIT_FAIL;
    }
    if (ab_producer_flush(st->p, (int)st->o.timeout_ms, &err) != AB_OK)
        return ab_error_detail(&err, "seq") ? report_rejection(st, &err, false) : fail_error(&err);
    ab_producer_stats_t s = ab_producer_stats(st->p);
    uint64_t end = ab_producer_next_seq(st->p) - 1;
    printf("published %llu events to thread %s run %s (seq %llu..%llu, %llu duplicates) in %lld "
           "ms\n",
           (unsigned long long)s.acked, st->thread, st->run, (unsigned long long)st->first_seq,
           (unsigned long long)end, (unsigned long long)s.duplicates,
           (long long)(ab__mono_ms() - t0));
    return AB_EXIT_OK;
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
    st.nlines = (size_t)st.o.batch + 1;
    st.lines = calloc(st.nlines, sizeof(*st.lines));
    ab_error_t line_err = AB_ERROR_INIT;
    if (!st.lines) {
        fprintf(stderr, "agentbus publish: out of memory\n");
        rc = AB_EXIT_FAIL;
    } else {
        if (!next_line(&st, &line_err))
            ab_buf_reset(&st.line); /* empty input: claim only */
        rc = ids_from_first_line(&st);
        if (rc == 0)
            rc = run_publish(&st, &line_err);
    }
    ab_producer_destroy(&st.p);
    ab_buf_free(&st.line);
    free(st.lines);
    if (st.in != stdin)
        fclose(st.in);
    return rc;
}

/*
 * validate.c - `agentbus validate`: check AG-UI 1.0 events given as JSON Lines.
 *
 * Each non-blank line is one event. A line passes when it is JSON, JSON-safe
 * within the bus limits, a valid AG-UI 1.0 event (strict producer rules, or
 * the consumer's view with --lenient) and, with --lifecycle, a legal next
 * event of its run. Several runs may follow each other: a RUN_STARTED after a
 * terminal run starts a new run; a RUN_ERROR after RUN_FINISHED is the one
 * late error the protocol admits. With --lifecycle, a stream that ends while
 * a run is still open counts as one more failure (a truncated run).
 *
 * Invariants:
 *  1. Memory is bounded: a line longer than the limit is skipped (reported as
 *     too_large) without being held; the lifecycle checker has its own bound.
 *  2. A failing line never changes the lifecycle state, so later lines are
 *     judged against the accepted prefix of the stream.
 */
#include "agentbus/agui.h"
#include "cli.h"
#include "evcheck.h"
#include "lines.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

struct vopts {
    bool lifecycle;
    bool lenient;
    bool quiet;
    bool json;
    const char *path;
};

struct vstate {
    struct vopts o;
    evcheck_t *chk;
    long line;
    long passed;
    long failed;
    bool jsonl_checked; /* the first line that failed to parse was looked at */
};

static void print_help(void)
{
    printf("usage: agentbus validate [--lifecycle] [--lenient] [--quiet] [--json] [FILE]\n\n"
           "Check AG-UI 1.0 events, one JSON object per line, from FILE or standard input.\n"
           "Prints one line per event (ok, or FAIL with the error code, JSON path and reason)\n"
           "and ends with 'N passed, M failed'. Exit status 0 only when every event passes.\n\n"
           "options:\n"
           "  --lifecycle  also check the order of events across the stream (run lifecycle:\n"
           "               start/end pairing, steps, subagents, outcomes, interrupts); several\n"
           "               runs may follow each other; a run left open at the end fails\n"
           "  --lenient    the consumer's view: unknown event types and fields are warnings\n"
           "               (default is the producer's strict view, where they are errors)\n"
           "  --quiet      print only failures, warnings and the summary\n"
           "  --json       one JSON object per line instead: {\"line\",\"ok\",\"type\"} or\n"
           "               {\"line\",\"ok\":false,\"error\":{\"code\",\"message\",\"pointer\"}},\n"
           "               {\"line\",\"warning\",\"pointer\"}, then {\"passed\",\"failed\"}\n"
           "  -h, --help   show this help\n");
}

static int parse_args(int argc, char **argv, struct vopts *o)
{
    static const struct option longopts[] = {
        {"lifecycle", no_argument, NULL, 'l'}, {"lenient", no_argument, NULL, 'L'},
        {"quiet", no_argument, NULL, 'q'},     {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},      {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = cli_getopt(argc, argv, ":hq", longopts, NULL)) != -1) {
        switch (c) {
        case 'l': o->lifecycle = true; break;
        case 'L': o->lenient = true; break;
        case 'q': o->quiet = true; break;
        case 'j': o->json = true; break;
        case 'h': print_help(); return -1;
        default: return cli_bad_option("validate", c);
        }
    }
    if (argc - optind > 1)
        return cli_usage_error("validate", "expected at most one FILE, got %d", argc - optind);
    o->path = optind < argc ? argv[optind] : NULL;
    return 0;
}

static void on_warning(void *ud, const char *path, const char *msg)
{
    struct vstate *st = ud;
    if (st->o.json) {
        printf("{\"line\":%ld,\"warning\":", st->line);
        cli_json_str(stdout, msg);
        printf(",\"pointer\":");
        cli_json_str(stdout, path);
        printf("}\n");
        return;
    }
    printf("%6ld  warn  %s: %s\n", st->line, path[0] ? path : "/", msg);
}

static void report_fail(struct vstate *st, const ab_error_t *err)
{
    st->failed++;
    if (st->o.json) {
        printf("{\"line\":%ld,\"ok\":false,\"error\":", st->line);
        cli_json_error(stdout, err);
        printf("}\n");
        return;
    }
    printf("%6ld  FAIL  %s %s: %s\n", st->line, ab_status_name(err->code),
           err->field[0] ? err->field : "/", err->message);
}

/* @return false when the input is not JSON Lines (reported): stop there. */
static bool check_line(struct vstate *st, const char *text, size_t len)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_agui_info_t info;
    if (evcheck_line(st->chk, text, len, &info, &err) != AB_OK) {
        bool first = !st->jsonl_checked && st->passed == 0;
        st->jsonl_checked = true;
        ab_error_t nj = AB_ERROR_INIT;
        if (first && evcheck_not_jsonl(text, len, &nj)) {
            report_fail(st, &nj);
            return false;
        }
        report_fail(st, &err);
        return true;
    }
    st->passed++;
    if (st->o.quiet)
        return true;
    if (st->o.json) {
        printf("{\"line\":%ld,\"ok\":true,\"type\":", st->line);
        cli_json_str(stdout, info.type == AB_AGUI_UNKNOWN ? "" : ab_agui_type_name(info.type));
        printf("}\n");
        return true;
    }
    if (info.type == AB_AGUI_UNKNOWN) /* lenient: dropped, as consumers must */
        printf("%6ld  ok    (unknown event type dropped)\n", st->line);
    else
        printf("%6ld  ok    %s\n", st->line, ab_agui_type_name(info.type));
    return true;
}

static void finish_stream(struct vstate *st)
{
    if (st->o.lifecycle && evcheck_run_active(st->chk)) {
        if (st->o.json) {
            ab_error_t e = AB_ERROR_INIT;
            ab_error_set(&e, AB_INVALID_EVENT, "",
                         "run_truncated: the stream ends while a run is still active");
            st->line = -1;
            report_fail(st, &e);
            return;
        }
        st->failed++;
        printf("   end  FAIL  run_truncated /: the stream ends while a run is still active "
               "(no RUN_FINISHED or RUN_ERROR)\n");
    }
}

static int run_validate(struct vstate *st, FILE *in)
{
    ab_buf_t line = AB_BUF_INIT;
    long n;
    while ((n = cli_read_line(in, &line)) != -1) {
        st->line++;
        if (n == -2) {
            ab_error_t err = AB_ERROR_INIT;
            ab_error_set(&err, AB_TOO_LARGE, "", "line longer than %u bytes", CLI_LINE_MAX_BYTES);
            report_fail(st, &err);
            cli_skip_line(in); /* invariant 1: reported once, the rest never held */
            continue;
        }
        if (cli_blank(&line))
            continue;
        if (!check_line(st, (const char *)line.data, line.len))
            break;
    }
    ab_buf_free(&line);
    if (ferror(in)) {
        fprintf(stderr, "agentbus validate: read error: %s\n", strerror(errno));
        return AB_EXIT_FAIL;
    }
    finish_stream(st);
    if (st->o.json)
        printf("{\"passed\":%ld,\"failed\":%ld}\n", st->passed, st->failed);
    else
        printf("%ld passed, %ld failed\n", st->passed, st->failed);
    return st->failed ? AB_EXIT_FAIL : AB_EXIT_OK;
}

int cmd_validate(int argc, char **argv)
{
    struct vstate st = {0};
    int rc = parse_args(argc, argv, &st.o);
    if (rc != 0)
        return rc < 0 ? AB_EXIT_OK : rc;
    FILE *in = stdin;
    if (st.o.path && strcmp(st.o.path, "-") != 0) {
        in = fopen(st.o.path, "r");
        if (!in) {
            fprintf(stderr, "agentbus validate: cannot open %s: %s\n", st.o.path, strerror(errno));
            return AB_EXIT_USAGE;
        }
    }
    evcheck_opts_t eo = {
        .lenient = st.o.lenient, .lifecycle = st.o.lifecycle, .on_warning = on_warning, .ud = &st};
    if (evcheck_new(&st.chk, &eo) != AB_OK) {
        fprintf(stderr, "agentbus validate: out of memory\n");
        rc = AB_EXIT_FAIL;
    } else {
        rc = run_validate(&st, in);
    }
    evcheck_destroy(&st.chk);
    if (in != stdin)
        fclose(in);
    return rc;
}

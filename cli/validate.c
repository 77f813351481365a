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
#include "activity_set.h"
#include "agentbus/agui.h"
#include "agentbus/json.h"
#include "agentbus/value.h"
#include "cli.h"
#include "lines.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct vopts {
    bool lifecycle;
    bool lenient;
    bool quiet;
    const char *path;
};

struct vstate {
    struct vopts o;
    ab_limits_t lim;
    ab_doc_t *doc;
    ab_buf_t mp;
    ab_lifecycle_t *run; /* current run's checker, or NULL */
    act_set_t *acts;     /* the activity messages the stream's threads hold (R20 across runs) */
    char thread[AB_ID_MAX_BYTES + 1]; /* the current run's thread (its RUN_STARTED's threadId) */
    act_ctx_t act;
    long line;
    long passed;
    long failed;
    int warnings; /* of the current line */
};

static void print_help(void)
{
    printf("usage: agentbus validate [--lifecycle] [--lenient] [--quiet] [FILE]\n\n"
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
           "  -h, --help   show this help\n");
}

static int parse_args(int argc, char **argv, struct vopts *o)
{
    static const struct option longopts[] = {
        {"lifecycle", no_argument, NULL, 'l'},
        {"lenient", no_argument, NULL, 'L'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "hq", longopts, NULL)) != -1) {
        switch (c) {
        case 'l': o->lifecycle = true; break;
        case 'L': o->lenient = true; break;
        case 'q': o->quiet = true; break;
        case 'h': print_help(); return -1;
        default: return cli_usage_error("validate", "unknown option");
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
    st->warnings++;
    printf("%6ld  warn  %s: %s\n", st->line, path[0] ? path : "/", msg);
}

static void report_fail(struct vstate *st, const ab_error_t *err)
{
    st->failed++;
    printf("%6ld  FAIL  %s %s: %s\n", st->line, ab_status_name(err->code),
           err->field[0] ? err->field : "/", err->message);
}

/* Feed the lifecycle: choose the run's checker, then check. */
static ab_status_t lifecycle_step(struct vstate *st, const ab_agui_info_t *info, ab_error_t *err)
{
    if (st->run) {
        ab_run_state_t rs = ab_lifecycle_state(st->run);
        bool terminal = rs == AB_RUN_FINISHED || rs == AB_RUN_ERRORED;
        if (terminal && info->type == AB_AGUI_RUN_STARTED)
            ab_lifecycle_destroy(&st->run);
    }
    if (!st->run) {
        ab_status_t rc = ab_lifecycle_new(&st->run, NULL, 0, NULL, 0, NULL);
        if (rc != AB_OK)
            return ab_error_set(err, rc, "", "cannot create a lifecycle checker");
        st->act = (act_ctx_t){st->acts, {st->thread, strlen(st->thread)}};
        ab_lifecycle_set_baseline(st->run, act_set_baseline, &st->act);
    }
    if (info->type == AB_AGUI_RUN_STARTED && info->thread_id.ptr &&
        info->thread_id.len < sizeof(st->thread)) {
        memcpy(st->thread, info->thread_id.ptr, info->thread_id.len);
        st->thread[info->thread_id.len] = '\0';
        st->act.thread = (ab_str_t){st->thread, info->thread_id.len};
    }
    ab_status_t rc = ab_lifecycle_check(st->run, info, err);
    if (rc == AB_OK && act_set_note(st->acts, st->act.thread, info) != AB_OK)
        rc = ab_error_set(err, AB_NOMEM, "", "out of memory");
    return rc;
}

static void check_line(struct vstate *st, const char *text, size_t len)
{
    ab_error_t err = AB_ERROR_INIT;
    const ab_val_t *ev;
    ab_agui_info_t info;
    st->warnings = 0;
    ab_buf_reset(&st->mp);
    ab_agui_mode_t mode = st->o.lenient ? AB_AGUI_LENIENT : AB_AGUI_STRICT;
    if (ab_json_to_msgpack(text, len, st->lim.max_depth, st->lim.max_event_bytes, AB_INVALID_EVENT,
                           &st->mp, &err) != AB_OK ||
        ab_doc_parse(st->doc, st->mp.data, st->mp.len, st->lim.max_event_bytes, st->lim.max_depth,
                     AB_INVALID_EVENT, &ev, &err) != AB_OK ||
        ab_agui_validate(ev, mode, on_warning, st, &info, &err) != AB_OK) {
        report_fail(st, &err);
        return;
    }
    if (info.type == AB_AGUI_UNKNOWN) { /* lenient: dropped, as consumers must */
        st->passed++;
        if (!st->o.quiet)
            printf("%6ld  ok    (unknown event type dropped)\n", st->line);
        return;
    }
    if (st->o.lifecycle && lifecycle_step(st, &info, &err) != AB_OK) {
        report_fail(st, &err);
        return;
    }
    st->passed++;
    if (!st->o.quiet)
        printf("%6ld  ok    %s\n", st->line, ab_agui_type_name(info.type));
}

static void finish_stream(struct vstate *st)
{
    if (!st->o.lifecycle || !st->run)
        return;
    if (ab_lifecycle_state(st->run) == AB_RUN_ACTIVE) {
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
            continue;
        }
        if (cli_blank(&line))
            continue;
        check_line(st, (const char *)line.data, line.len);
    }
    ab_buf_free(&line);
    if (ferror(in)) {
        fprintf(stderr, "agentbus validate: read error: %s\n", strerror(errno));
        return AB_EXIT_FAIL;
    }
    finish_stream(st);
    printf("%ld passed, %ld failed\n", st->passed, st->failed);
    return st->failed ? AB_EXIT_FAIL : AB_EXIT_OK;
}

int cmd_validate(int argc, char **argv)
{
    struct vstate st = {.lim = ab_limits_default()};
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
    if (ab_doc_new(&st.doc) != AB_OK || !(st.acts = act_set_new())) {
        fprintf(stderr, "agentbus validate: out of memory\n");
        rc = AB_EXIT_FAIL;
    } else {
        rc = run_validate(&st, in);
    }
    ab_lifecycle_destroy(&st.run);
    act_set_free(st.acts);
    ab_doc_destroy(&st.doc);
    ab_buf_free(&st.mp);
    if (in != stdin)
        fclose(in);
    return rc;
}

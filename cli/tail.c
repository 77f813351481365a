/*
 * tail.c - `agentbus tail`: the observer console. Attaches an ab_sub_t to a
 * run, a thread or everything (live by default, or from the start, or from
 * a cursor) and prints each event: the human view (demo/render.c) or
 * JSON Lines with --json. --for and --count bound the session.
 *
 * Invariants:
 *  1. The console never stops on one event: rendering failures are shown
 *     inline; a broker that goes away is reported once and the subscriber
 *     keeps reconnecting until --for ends (or forever).
 *  2. Exit status: 0 when the session ended as asked (time, count, or
 *     SIGINT/SIGTERM), 1 on a non-retryable subscriber error, 2 on usage.
 */
#include "ab_common.h"
#include "agentbus/subscriber.h"
#include "cli.h"
#include "follow.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAIL_FOR_MAX_S 2592000.0 /* --for: at most 30 days */

struct topts {
    const char *broker, *thread, *run;
    bool from_start, json, no_color;
    bool have_pos, have_seq;
    uint64_t after_pos, after_seq;
    double for_s;
    uint64_t count;
};

struct tstate {
    struct topts o;
    cli_printer_t pr;
    uint64_t seen;
};

static void print_help(void)
{
    printf(
        "usage: agentbus tail [--broker E] [--thread T [--run R]] [--from-start | --after-pos P |\n"
        "                     --after-seq S] [--json] [--no-color] [--for SECONDS] [--count N]\n\n"
        "Watch the events of a run (--thread and --run), a thread (--thread) or the whole bus,\n"
        "live. One line per event: time, thread/run, seq and a summary; message text and tool\n"
        "arguments stream inline; run outcomes are marked.\n\n"
        "options:\n"
        "  --broker E       command endpoint (default $AGENTBUS_BROKER or " AB_DEFAULT_BROKER ")\n"
        "  --thread T       only thread T      --run R   only run R of thread T\n"
        "  --from-start     replay the history first (default: from now on)\n"
        "  --after-pos P    the whole bus after commit position P (no --thread)\n"
        "  --after-seq S    run R after seq S (needs --run)\n"
        "  --json           JSON Lines: {thread,run,seq,epoch,ts,pos,time_us,event}\n"
        "  --no-color       no colour (also $NO_COLOR; colour only on a terminal)\n"
        "  --for SECONDS    stop after SECONDS, in (0, 2592000] (30 days; 0.5 is half a second)\n"
        "  --count N        stop after N events\n"
        "  -h, --help       show this help\n");
}

static int parse_args(int argc, char **argv, struct topts *o)
{
    static const struct option lo[] = {
        {"broker", required_argument, NULL, 'b'},
        {"thread", required_argument, NULL, 't'},
        {"run", required_argument, NULL, 'r'},
        {"from-start", no_argument, NULL, 's'},
        {"after-pos", required_argument, NULL, 'p'},
        {"after-seq", required_argument, NULL, 'q'},
        {"json", no_argument, NULL, 'j'},
        {"no-color", no_argument, NULL, 'n'},
        {"for", required_argument, NULL, 'f'},
        {"count", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = cli_getopt(argc, argv, ":h", lo, NULL)) != -1) {
        switch (c) {
        case 'b': o->broker = optarg; break;
        case 't': o->thread = optarg; break;
        case 'r': o->run = optarg; break;
        case 's': o->from_start = true; break;
        case 'j': o->json = true; break;
        case 'n': o->no_color = true; break;
        case 'p':
            if (!cli_parse_u64(optarg, &o->after_pos))
                return cli_usage_error("tail", "--after-pos needs a number");
            o->have_pos = true;
            break;
        case 'q':
            if (!cli_parse_u64(optarg, &o->after_seq))
                return cli_usage_error("tail", "--after-seq needs a number");
            o->have_seq = true;
            break;
        case 'f':
            if (!cli_parse_seconds(optarg, TAIL_FOR_MAX_S, &o->for_s))
                return cli_usage_error(
                    "tail", "--for takes seconds in (0, 2592000] (30 days), not '%s'", optarg);
            break;
        case 'c':
            if (!cli_parse_u64(optarg, &o->count) || o->count == 0)
                return cli_usage_error("tail", "--count needs a positive number");
            break;
        case 'h': print_help(); exit(AB_EXIT_OK);
        default: return cli_bad_option("tail", c);
        }
    }
    return AB_EXIT_OK;
}

static int check_args(int argc, char **argv, struct topts *o)
{
    if (optind < argc)
        return cli_usage_error("tail", "unexpected argument '%s'", argv[optind]);
    if (o->run && !o->thread)
        return cli_usage_error("tail", "--run needs --thread");
    if ((int)o->from_start + (int)o->have_pos + (int)o->have_seq > 1)
        return cli_usage_error("tail",
                               "--from-start, --after-pos and --after-seq exclude each other");
    if (o->have_pos && o->thread)
        return cli_usage_error("tail", "--after-pos is for the whole bus (no --thread)");
    if (o->have_seq && !o->run)
        return cli_usage_error("tail", "--after-seq needs --thread and --run");
    if (o->thread && cli_check_id("tail", "--thread", o->thread) != 0)
        return AB_EXIT_USAGE;
    if (o->run && cli_check_id("tail", "--run", o->run) != 0)
        return AB_EXIT_USAGE;
    return cli_endpoint("tail", o->broker, &o->broker);
}

static int on_event(void *ud, const ab_sub_event_t *e)
{
    struct tstate *ts = ud;
    cli_printer_event(&ts->pr, e);
    ts->seen++;
    return ferror(stdout) || (ts->o.count && ts->seen >= ts->o.count); /* the reader left */
}

static void on_notice(void *ud, const ab_notice_t *n)
{
    struct tstate *ts = ud;
    cli_printer_notice(&ts->pr, n);
}

static void fill_sub_opts(struct tstate *ts, ab_sub_opts_t *so)
{
    const struct topts *o = &ts->o;
    so->scope = o->run ? AB_SUB_RUN : o->thread ? AB_SUB_THREAD : AB_SUB_ALL;
    so->thread = o->thread;
    so->run = o->run;
    so->start = o->from_start || o->have_pos || o->have_seq ? AB_SUB_FROM_CURSOR : AB_SUB_FROM_NOW;
    so->after_pos = o->after_pos;
    so->after_seq = o->after_seq;
    so->on_event = on_event;
    so->on_notice = on_notice;
    so->ud = ts;
}

/* Poll until time, count or a signal ends the session (invariant 1). */
static int run_loop(struct tstate *ts, ab_sub_t *s)
{
    long end = ts->o.for_s > 0 ? ab__mono_ms() + (long)(ts->o.for_s * 1000) : 0;
    bool away = false;
    while (!cli_stop && !(ts->o.count && ts->seen >= ts->o.count)) {
        long left = end ? end - ab__mono_ms() : 250;
        if (left <= 0 || cli_stdout_gone()) /* `tail | head -3`: the reader left */
            break;
        if (cli_sub_step(s, left < 250 ? (int)left : 250, "tail", &away) != 0)
            return AB_EXIT_FAIL;
    }
    return AB_EXIT_OK;
}

/* A thread (or run) with no event yet is waited for, and said so on stderr (stdout stays the
 * events'). Any failure to ask is left to the subscriber to report. */
static void say_if_new(const struct topts *o, const char *ep)
{
    if (o->thread == NULL)
        return;
    ab_conn_opts_t co = {.client_name = "agentbus-tail"};
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_heads_reply_t hr = {0};
    ab_run_ref_t ref = {{o->thread, strlen(o->thread)},
                        {o->run ? o->run : "", o->run ? strlen(o->run) : 0}};
    ab_heads_t q = o->run ? (ab_heads_t){.runs = &ref, .nruns = 1}
                          : (ab_heads_t){.thread = {o->thread, strlen(o->thread)}};
    bool none = ab_doc_new(&doc) == AB_OK && ab_conn_new(&c, ep, &co, NULL) == AB_OK &&
                ab_conn_heads(c, &q, doc, &hr, 0, NULL) == AB_OK &&
                (hr.nheads == 0 || (o->run && hr.heads[0].last_seq == 0));
    if (none && o->run)
        fprintf(stderr,
                "agentbus tail: run '%s' of thread '%s' has no events yet: waiting for "
                "them (Ctrl-C stops)\n",
                o->run, o->thread);
    else if (none)
        fprintf(stderr,
                "agentbus tail: thread '%s' has no events yet: waiting for them (Ctrl-C "
                "stops)\n",
                o->thread);
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
}

/* The banner on stderr: what is watched, from where, and from which point. */
static void banner(const struct topts *o, const char *ep)
{
    char what[600], from[80];
    if (o->thread && o->run)
        snprintf(what, sizeof what, "run %s of thread %s", o->run, o->thread);
    else if (o->thread)
        snprintf(what, sizeof what, "thread %s", o->thread);
    else
        snprintf(what, sizeof what, "every thread");
    if (o->have_pos)
        snprintf(from, sizeof from, "after position %llu", (unsigned long long)o->after_pos);
    else if (o->have_seq)
        snprintf(from, sizeof from, "after seq %llu", (unsigned long long)o->after_seq);
    else
        snprintf(from, sizeof from, "%s", o->from_start ? "from the start" : "from now on");
    fprintf(stderr, "agentbus tail: watching %s at %s, %s (Ctrl-C stops)\n", what, ep, from);
}

int cmd_tail(int argc, char **argv)
{
    struct tstate ts = {.seen = 0};
    int rc = parse_args(argc, argv, &ts.o);
    if (rc == AB_EXIT_OK)
        rc = check_args(argc, argv, &ts.o);
    if (rc != AB_EXIT_OK)
        return rc;
    cli_printer_init(&ts.pr, "tail", ts.o.json, !ts.o.no_color);
    ab_sub_opts_t so = {.scope = AB_SUB_ALL};
    fill_sub_opts(&ts, &so);
    ab_sub_t *s = NULL;
    ab_error_t err = AB_ERROR_INIT;
    const char *ep = ts.o.broker;
    if (ab_sub_new(&s, ep, &so, &err) != AB_OK) {
        fprintf(stderr, "agentbus tail: %s: %s: %s\n", ep, ab_status_name(err.code), err.message);
        cli_printer_free(&ts.pr);
        return AB_EXIT_FAIL;
    }
    banner(&ts.o, ep);
    say_if_new(&ts.o, ep);
    cli_catch_signals();
    rc = run_loop(&ts, s);
    cli_printer_free(&ts.pr);
    ab_sub_destroy(&s);
    return rc;
}

/*
 * follow.c - the event printing of `agentbus tail` (its human view or its
 * JSON Lines) and following one run to its end, for the commands that start,
 * cancel or resume runs (see follow.h).
 *
 * Invariants:
 *  1. A followed run is subscribed from its first event (scope run, after
 *     seq 0): the history is replayed, then the live stream continues it, so
 *     no event between the broker's acceptance and the subscription is lost.
 *  2. Following ends at the first terminal event (RUN_FINISHED or RUN_ERROR),
 *     at Ctrl-C/SIGTERM (the run goes on), when the subscription fails for
 *     good, or when the run's request turns out cancelled before the run
 *     started (asked every CHECK_MS while no RUN_STARTED was seen).
 *  3. Memory: the printer's line buffer (one event) and the end note (the
 *     terminal event's interrupts, at most one event's size).
 */
#include "follow.h"

#include "ab_common.h"
#include "cli.h"

#include <stdarg.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define CHECK_MS 500 /* how often a run that has not started has its request asked about */

volatile sig_atomic_t cli_stop;

static void on_signal(int sig)
{
    (void)sig;
    cli_stop = 1;
}

void cli_catch_signals(void)
{
    cli_stop = 0;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
}

/* ---- printing -------------------------------------------------------------- */

void cli_printer_init(cli_printer_t *p, const char *cmd, bool json, bool color)
{
    memset(p, 0, sizeof(*p));
    p->cmd = cmd;
    p->json = json;
    tail_view_init(&p->view, stdout, color && isatty(STDOUT_FILENO));
}

void cli_printer_event(cli_printer_t *p, const ab_sub_event_t *e)
{
    if (!p->json) {
        tail_view_event(&p->view, &e->ev, &e->stamp);
        return;
    }
    p->line.len = 0;
    if (tail_json_line(&p->line, &e->ev, &e->stamp) == AB_OK) {
        fwrite(p->line.data, 1, p->line.len, stdout);
        fflush(stdout);
    } else {
        fprintf(stderr, "agentbus %s: out of memory at seq %llu\n", p->cmd,
                (unsigned long long)e->ev.seq);
    }
}

void cli_printer_notice(cli_printer_t *p, const ab_notice_t *n)
{
    const char *w = n->worker.ptr ? n->worker.ptr : "";
    int wl = (int)n->worker.len;
    if (p->json)
        printf("{\"op\":\"notice\",\"kind\":\"orphaned\",\"thread\":\"%.*s\",\"run\":\"%.*s\","
               "\"request\":%llu,\"worker\":\"%.*s\"}\n",
               (int)n->thread.len, n->thread.ptr, (int)n->run.len, n->run.ptr,
               (unsigned long long)n->request, wl, w);
    else
        printf("!! %.*s/%.*s orphaned: its worker %.*s is gone (request %llu); it ends by a "
               "claim or by agentbus abandon\n",
               (int)n->thread.len, n->thread.ptr, (int)n->run.len, n->run.ptr, wl, w,
               (unsigned long long)n->request);
    fflush(stdout);
}

void cli_printer_free(cli_printer_t *p)
{
    tail_view_finish(&p->view);
    ab_buf_free(&p->line);
}

FILE *cli_notes(const cli_printer_t *p)
{
    return p->json ? stderr : stdout;
}

int cli_sub_step(ab_sub_t *s, int ms, const char *cmd, bool *away)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t rc = ab_sub_poll(s, ms, &err);
    if (rc == AB_OK || rc == AB_REQUEST_ABORTED) {
        *away = false;
        return 0;
    }
    if (!ab_status_retryable(rc) && rc != AB_IO) {
        fprintf(stderr, "agentbus %s: %s: %s\n", cmd, ab_status_name(rc), err.message);
        return 1;
    }
    if (!*away)
        fprintf(stderr, "agentbus %s: broker unreachable (%s); retrying\n", cmd, err.message);
    *away = true;
    return 0;
}

void cli_print_shell_word(FILE *out, const char *s, size_t len)
{
    bool plain = len > 0;
    for (size_t i = 0; i < len && plain; i++)
        plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@=+,",
                       s[i]) != NULL &&
                s[i] != '\0';
    if (plain) {
        fwrite(s, 1, len, out);
        return;
    }
    fputc('\'', out);
    for (size_t i = 0; i < len; i++)
        s[i] == '\'' ? fputs("'\\''", out) : fputc(s[i], out);
    fputc('\'', out);
}

void cli_fresh_id(char *buf, size_t size, const char *prefix)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
        r = ab__mono_seed((uint64_t)getpid() * 0x9e3779b97f4a7c15ull);
    snprintf(buf, size, "%s-%016llx", prefix, (unsigned long long)r);
}

int cli_end_exit(cli_end_t e)
{
    switch (e) {
    case CLI_END_SUCCESS: return AB_EXIT_OK;
    case CLI_END_INTERRUPT: return AB_EXIT_INTERRUPTED;
    case CLI_END_CANCELLED:
    case CLI_END_DEQUEUED: return AB_EXIT_CANCELLED;
    case CLI_END_STOPPED: return AB_EXIT_SIGNAL;
    default: return AB_EXIT_FAIL;
    }
}

/* ---- following one run ----------------------------------------------------- */

struct fstate {
    const cli_follow_t *f;
    cli_printer_t *pr;
    bool started, done;
    cli_end_t end;
    uint64_t seq;  /* of the last event seen */
    ab_buf_t note; /* the end note, built while the terminal event is valid */
};

static void note(struct fstate *fs, const char *fmt, ...) AB_PRINTF(2, 3);
static void note(struct fstate *fs, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0 && ab_buf_append(&fs->note, tmp,
                               (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1) != AB_OK)
        fs->note.len = 0;
}

static int slen(const ab_val_t *v)
{
    return v && v->type == AB_VAL_STR ? (int)v->len : 0;
}

static const char *sptr(const ab_val_t *v)
{
    return v && v->type == AB_VAL_STR ? v->u.s : "";
}

/* The note of an interrupt outcome: each id with its reason and message. */
static void note_interrupts(struct fstate *fs, const ab_val_t *ints)
{
    uint32_t n = ints && ints->type == AB_VAL_ARRAY ? ints->len : 0;
    note(fs, "run %s/%s interrupted at seq %llu: %u pending interrupt%s\n", fs->f->thread,
         fs->f->run, (unsigned long long)fs->seq, n, n == 1 ? "" : "s");
    for (uint32_t i = 0; i < n; i++) {
        const ab_val_t *it = &ints->u.items[i];
        const ab_val_t *id = ab_val_get(it, "id"), *reason = ab_val_get(it, "reason");
        const ab_val_t *msg = ab_val_get(it, "message"), *exp = ab_val_get(it, "expiresAt");
        note(fs, "  interrupt %.*s", slen(id), sptr(id));
        if (reason)
            note(fs, "  reason %.*s", slen(reason), sptr(reason));
        if (msg)
            note(fs, "  \"%.*s\"", slen(msg) > 200 ? 200 : slen(msg), sptr(msg));
        if (exp)
            note(fs, "  expires %.*s", slen(exp), sptr(exp));
        note(fs, "\n");
    }
}

static void on_terminal(struct fstate *fs, const ab_val_t *body, const char *type)
{
    fs->done = true;
    if (strcmp(type, "RUN_ERROR") == 0) {
        const ab_val_t *msg = ab_val_get(body, "message"), *code = ab_val_get(body, "code");
        fs->end = CLI_END_ERROR;
        note(fs, "run %s/%s failed at seq %llu: RUN_ERROR%s%.*s: %.*s\n", fs->f->thread, fs->f->run,
             (unsigned long long)fs->seq, code ? " " : "", slen(code), sptr(code),
             slen(msg) > 400 ? 400 : slen(msg), sptr(msg));
        return;
    }
    const ab_val_t *oc = ab_val_get(body, "outcome");
    const ab_val_t *ot = ab_val_get(oc, "type");
    if (ab_val_str_eq(ot, "interrupt")) {
        fs->end = CLI_END_INTERRUPT;
        note_interrupts(fs, ab_val_get(oc, "interrupts"));
    } else if (ab_val_str_eq(ot, "cancelled")) {
        fs->end = CLI_END_CANCELLED;
        note(fs, "run %s/%s cancelled at seq %llu\n", fs->f->thread, fs->f->run,
             (unsigned long long)fs->seq);
    } else {
        fs->end = CLI_END_SUCCESS;
        note(fs, "run %s/%s finished at seq %llu: success\n", fs->f->thread, fs->f->run,
             (unsigned long long)fs->seq);
    }
}

static int on_event(void *ud, const ab_sub_event_t *e)
{
    struct fstate *fs = ud;
    const ab_val_t *t = ab_val_get(e->ev.body, "type");
    char type[32] = "";
    if (t && t->type == AB_VAL_STR && t->len < sizeof(type))
        memcpy(type, t->u.s, t->len), type[t->len] = '\0';
    bool terminal = strcmp(type, "RUN_FINISHED") == 0 || strcmp(type, "RUN_ERROR") == 0;
    fs->seq = e->ev.seq;
    fs->started = fs->started || strcmp(type, "RUN_STARTED") == 0;
    if (!fs->f->quiet || terminal)
        cli_printer_event(fs->pr, e);
    if (terminal)
        on_terminal(fs, e->ev.body, type);
    return terminal;
}

/* True when the run's request is known to be cancelled (it never started). */
static bool dequeued(const cli_follow_t *f, ab_doc_t *doc)
{
    ab_requests_t q = {.state = AB_REQ_CANCELLED, .after = f->request - 1, .limit = 1};
    ab_requests_reply_t r;
    ab_error_t e = AB_ERROR_INIT;
    if (ab_conn_requests(f->conn, &q, doc, &r, f->timeout_ms, &e) != AB_OK)
        return false; /* asked again later */
    return r.nrequests > 0 && r.requests[0].request == f->request;
}

static cli_end_t loop(struct fstate *fs, ab_sub_t *s, ab_doc_t *doc)
{
    const cli_follow_t *f = fs->f;
    bool away = false;
    int64_t next_check = ab__mono_ms();
    while (!fs->done && !cli_stop) {
        if (cli_sub_step(s, 250, fs->pr->cmd, &away) != 0)
            return CLI_END_FAILED;
        if (fs->done || fs->started || !f->request || !f->conn || ab__mono_ms() < next_check)
            continue;
        next_check = ab__mono_ms() + CHECK_MS;
        if (dequeued(f, doc)) {
            note(fs, "request %llu was cancelled before run %s/%s started: it will not run\n",
                 (unsigned long long)f->request, f->thread, f->run);
            return CLI_END_DEQUEUED;
        }
    }
    if (fs->done)
        return fs->end;
    note(fs, "stopped following run %s/%s at seq %llu: the run goes on (agentbus tail --thread ",
         f->thread, f->run, (unsigned long long)fs->seq);
    return CLI_END_STOPPED;
}

cli_end_t cli_follow_run(const cli_follow_t *f, cli_printer_t *pr)
{
    struct fstate fs = {.f = f, .pr = pr};
    ab_sub_opts_t so = {.scope = AB_SUB_RUN,
                        .thread = f->thread,
                        .run = f->run,
                        .start = AB_SUB_FROM_CURSOR,
                        .after_seq = 0,
                        .on_event = on_event,
                        .ud = &fs,
                        .timeout_ms = f->timeout_ms};
    ab_sub_t *s = NULL;
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    cli_end_t end = CLI_END_FAILED;
    if (ab_doc_new(&doc) != AB_OK) {
        fprintf(stderr, "agentbus %s: out of memory\n", pr->cmd);
    } else if (ab_sub_new(&s, f->broker, &so, &err) != AB_OK) {
        fprintf(stderr, "agentbus %s: subscribe to run %s/%s: %s: %s\n", pr->cmd, f->thread, f->run,
                ab_status_name(err.code), err.message);
    } else {
        end = loop(&fs, s, doc);
    }
    tail_view_finish(&pr->view);
    FILE *out = cli_notes(pr);
    fwrite(fs.note.data, 1, fs.note.len, out);
    if (end == CLI_END_STOPPED) {
        cli_print_shell_word(out, f->thread, strlen(f->thread));
        fputs(" --run ", out);
        cli_print_shell_word(out, f->run, strlen(f->run));
        fputs(" watches it)\n", out);
    } else if (end == CLI_END_INTERRUPT) {
        const char *cmds[] = {"approve", "deny"};
        fputs("answer every pending interrupt with:", out);
        for (int i = 0; i < 2; i++) {
            fprintf(out, "%s agentbus %s ", i ? " or" : "", cmds[i]);
            cli_print_shell_word(out, f->thread, strlen(f->thread));
            fputc(' ', out);
            cli_print_shell_word(out, f->run, strlen(f->run));
        }
        fputs(" (--interrupt ID=approve|deny|cancel answers one differently)\n", out);
    }
    fflush(out);
    ab_buf_free(&fs.note);
    ab_sub_destroy(&s);
    ab_doc_destroy(&doc);
    return end;
}

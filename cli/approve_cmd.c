/*
 * approve_cmd.c - `agentbus approve THREAD RUN` and `agentbus deny THREAD RUN`:
 * answer every pending interrupt of an interrupted run and queue the run that
 * continues it (resume_run, docs/PROTOCOL.md 7.14), then follow that run as
 * `agentbus run` does; docs/CLIENT.md "agentbus run, cancel, approve, deny".
 *
 * The pending interrupts are read from the run itself: `heads` says whether it
 * ended with outcome interrupt, and a one-event `replay` of its terminal event
 * (the RUN_FINISHED) gives the interrupts' ids.
 *
 * Invariants:
 *  1. Every interrupt of the run gets one explicit answer: resolved with a
 *     payload ({"approved":true} for approve, {"approved":false} for deny,
 *     --payload instead for the command's own kind) or cancelled. The
 *     decision is the `status`; nothing is inferred from a label.
 *  2. --interrupt ID=approve|deny|cancel answers one id differently; an id the
 *     run did not raise, or named twice, is a usage error (nothing is sent).
 *  3. Each id is printed with its answer before the request is sent; a
 *     refusal prints the broker's error with the interrupt id it names.
 *  4. Memory: the interrupts of one RUN_FINISHED (at most one event) and the
 *     resume array built from them.
 */
#include "ab_common.h"
#include "dispatch.h"

#include "agentbus/json.h"
#include "agentbus/nego.h"
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

typedef enum answer { ANS_APPROVE = 0, ANS_DENY, ANS_CANCEL } answer_t;

static const char *const answer_names[] = {"approve", "deny", "cancel"};

struct override {
    const char *id;
    size_t len;
    answer_t a;
    bool used;
};

struct aopts {
    cli_dopts_t d;
    const char *cmd;
    answer_t kind;       /* the command's: approve or deny */
    answer_t dflt;       /* the answer of interrupts without --interrupt */
    const char *payload; /* --payload: of the answers of the command's kind */
    const char *thread, *run, *key, *agent, *new_run, *input;
    struct override *ov;
    size_t nov;
};

/* The run's interrupt ids (copies). */
struct pending {
    char **ids;
    size_t *lens;
    size_t n;
    ab_doc_t *edoc;
    bool found; /* the terminal event was a RUN_FINISHED with outcome interrupt */
};

static void help(const char *cmd)
{
    printf(
        "usage: agentbus %s THREAD RUN [--payload JSON] [--interrupt ID=approve|deny|cancel]...\n"
        "                        [--cancel] [--key K] [--agent A] [--new-run R] [--input FILE|-]\n"
        "                        [--no-follow] [--json] [--no-color] [--broker ENDPOINT]\n"
        "                        [--timeout MS]\n\n"
        "Answer every pending interrupt of run RUN of thread THREAD (it ended with outcome\n"
        "interrupt) and queue the run that continues it (resume_run); then follow that run\n"
        "as `agentbus run` does. Each interrupt gets an explicit answer, printed with its id:\n"
        "  approve  status resolved, payload {\"approved\":true}\n"
        "  deny     status resolved, payload {\"approved\":false}\n"
        "  cancel   status cancelled (the only answer an expired interrupt takes)\n"
        "`agentbus %s` answers %s, unless told otherwise.\n\n"
        "options:\n"
        "  --payload JSON       the payload of the %s answers instead\n"
        "  --interrupt ID=WHAT  answer interrupt ID with approve, deny or cancel (repeatable)\n"
        "  --cancel             answer the interrupts not named by --interrupt with cancel\n"
        "  --key K              idempotency key (default: a fresh one, printed: retry with it)\n"
        "  --agent A            the agent, when RUN was not dispatched through the bus\n"
        "  --new-run R          the id of the run that continues it (default: the broker's)\n"
        "  --input FILE|-       more RunAgentInput members for that run (a JSON object)\n"
        "  --no-follow, --json, --no-color, --broker, --timeout   as for `agentbus run`\n"
        "  -h, --help           show this help\n\n"
        "exit status: as `agentbus run` (0 success, 3 interrupted again, 4 cancelled, 1 error\n"
        "or refused, 2 usage, 130 Ctrl-C).\n",
        cmd, cmd, cmd, cmd);
}

static int add_override(struct aopts *o, const char *arg)
{
    const char *eq = strrchr(arg, '=');
    int a = -1;
    for (int i = 0; eq && i < 3; i++)
        if (strcmp(eq + 1, answer_names[i]) == 0)
            a = i;
    if (!eq || eq == arg || a < 0)
        return cli_usage_error(o->cmd,
                               "--interrupt wants ID=approve, ID=deny or ID=cancel, got '%s'", arg);
    for (size_t i = 0; i < o->nov; i++)
        if (o->ov[i].len == (size_t)(eq - arg) && memcmp(o->ov[i].id, arg, o->ov[i].len) == 0)
            return cli_usage_error(o->cmd, "--interrupt names %.*s twice", (int)o->ov[i].len, arg);
    struct override *n = realloc(o->ov, (o->nov + 1) * sizeof(*n));
    if (!n)
        return cli_usage_error(o->cmd, "out of memory");
    o->ov = n;
    o->ov[o->nov++] = (struct override){arg, (size_t)(eq - arg), (answer_t)a, false};
    return 0;
}

static int opt(struct aopts *o, int c)
{
    switch (c) {
    case 'p': o->payload = optarg; return 0;
    case 'I': return add_override(o, optarg);
    case 'X': o->dflt = ANS_CANCEL; return 0;
    case 'k': o->key = optarg; return 0;
    case 'a': o->agent = optarg; return 0;
    case 'n': o->new_run = optarg; return 0;
    case 'i': o->input = optarg; return 0;
    default: return cli_dispatch_opt(o->cmd, c, &o->d);
    }
}

static int parse(int argc, char **argv, struct aopts *o)
{
    static const struct option lo[] = {
        {"payload", required_argument, NULL, 'p'}, {"interrupt", required_argument, NULL, 'I'},
        {"cancel", no_argument, NULL, 'X'},        {"key", required_argument, NULL, 'k'},
        {"agent", required_argument, NULL, 'a'},   {"new-run", required_argument, NULL, 'n'},
        {"input", required_argument, NULL, 'i'},   {"no-follow", no_argument, NULL, 'N'},
        {"json", no_argument, NULL, 'j'},          {"no-color", no_argument, NULL, 'C'},
        {"broker", required_argument, NULL, 'b'},  {"timeout", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    int c, rc = 0;
    optind = 1;
    while (rc == 0 && (c = cli_getopt(argc, argv, ":h", lo, NULL)) != -1) {
        if (c == 'h') {
            help(o->cmd);
            return -1;
        }
        rc = opt(o, c);
    }
    if (rc != 0)
        return rc;
    if (argc - optind != 2)
        return cli_usage_error(o->cmd, "want THREAD RUN, got %d argument%s", argc - optind,
                               argc - optind == 1 ? "" : "s");
    o->thread = argv[optind];
    o->run = argv[optind + 1];
    rc = cli_check_id(o->cmd, "THREAD", o->thread);
    if (rc == 0)
        rc = cli_check_id(o->cmd, "RUN", o->run);
    if (rc == 0 && o->key)
        rc = cli_check_id(o->cmd, "--key", o->key);
    if (rc == 0 && o->agent)
        rc = cli_check_id(o->cmd, "--agent", o->agent);
    if (rc == 0 && o->new_run)
        rc = cli_check_id(o->cmd, "--new-run", o->new_run);
    return rc;
}

/* ---- the run's pending interrupts ------------------------------------------ */

static ab_status_t keep_ids(struct pending *p, const ab_val_t *ints, ab_error_t *err)
{
    p->ids = calloc(ints->len ? ints->len : 1, sizeof(*p->ids));
    p->lens = calloc(ints->len ? ints->len : 1, sizeof(*p->lens));
    if (!p->ids || !p->lens)
        return ab_error_set(err, AB_NOMEM, "", "out of memory");
    for (uint32_t i = 0; i < ints->len; i++) {
        const ab_val_t *id = ab_val_get(&ints->u.items[i], "id");
        if (!id || id->type != AB_VAL_STR)
            return ab_error_set(err, AB_INVALID_EVENT, "event/outcome/interrupts",
                                "interrupt %u has no id", i);
        if (!(p->ids[i] = malloc(id->len + 1)))
            return ab_error_set(err, AB_NOMEM, "", "out of memory");
        memcpy(p->ids[i], id->u.s, id->len);
        p->ids[i][id->len] = '\0';
        p->lens[i] = id->len;
        p->n++;
    }
    return AB_OK;
}

static ab_status_t on_row(void *ud, const ab_stamp_t *stamp, const uint8_t *ev, size_t len,
                          ab_error_t *err)
{
    (void)stamp;
    struct pending *p = ud;
    ab_event_t e;
    ab_limits_t lim = ab__limits_stored(); /* events the broker stored */
    ab_status_t rc = ab_event_decode(p->edoc, ev, len, &lim, &e, err);
    if (rc != AB_OK)
        return rc;
    const ab_val_t *oc = ab_val_get(e.body, "outcome");
    const ab_val_t *ints = ab_val_get(oc, "interrupts");
    if (ab_val_str_eq(ab_val_get(e.body, "type"), "RUN_FINISHED") &&
        ab_val_str_eq(ab_val_get(oc, "type"), "interrupt") && ints && ints->type == AB_VAL_ARRAY) {
        p->found = true;
        rc = keep_ids(p, ints, err);
    }
    return rc != AB_OK ? rc : AB_REQUEST_ABORTED; /* one event is all we need */
}

static const char *outcome_name(ab_agui_outcome_t o)
{
    switch (o) {
    case AB_OUTCOME_SUCCESS: return "success";
    case AB_OUTCOME_INTERRUPT: return "interrupt";
    case AB_OUTCOME_CANCELLED: return "cancelled";
    default: return "none";
    }
}

/* heads, then the terminal event: the ids of the run's interrupts. */
static ab_status_t read_pending(const struct aopts *o, ab_conn_t *c, ab_doc_t *doc,
                                struct pending *p, ab_error_t *err)
{
    ab_run_ref_t ref = {{o->thread, strlen(o->thread)}, {o->run, strlen(o->run)}};
    ab_heads_t hq = {.runs = &ref, .nruns = 1};
    ab_heads_reply_t hr;
    ab_status_t rc = ab_conn_heads(c, &hq, doc, &hr, (int)o->d.timeout_ms, err);
    if (rc != AB_OK)
        return rc;
    if (hr.nheads != 1 || hr.heads[0].last_seq == 0)
        return ab_error_set(err, AB_NOT_FOUND, "run", "run %s of thread %s has no events", o->run,
                            o->thread);
    ab_head_t h = hr.heads[0];
    if (h.status != AB_RUN_STATUS_FINISHED || h.outcome != AB_OUTCOME_INTERRUPT)
        return ab_error_set(err, AB_CONFLICT, "run",
                            "run %s of thread %s did not end with an interrupt (status %s, "
                            "outcome %s): it has nothing to answer",
                            o->run, o->thread, ab_run_status_name(h.status),
                            outcome_name(h.outcome));
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay = (ab_replay_t){.scope = AB_REPLAY_RUN, .window = 1, .chunk_events = 1};
    q.u.replay.thread = ref.thread;
    q.u.replay.run = ref.run;
    q.u.replay.after_seq = h.last_seq - 1;
    rc = ab_conn_replay(c, &q, on_row, p, doc, NULL, (int)o->d.timeout_ms, err);
    if (rc == AB_REQUEST_ABORTED) {
        ab_error_clear(err);
        rc = AB_OK;
    }
    if (rc == AB_OK && !p->found)
        rc = ab_error_set(err, AB_CONFLICT, "run",
                          "the last event of run %s is not a RUN_FINISHED with interrupts", o->run);
    return rc;
}

static void pending_free(struct pending *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->ids[i]);
    free(p->ids);
    free(p->lens);
    ab_doc_destroy(&p->edoc);
}

/* ---- the answers ----------------------------------------------------------- */

static answer_t answer_of(struct aopts *o, const char *id, size_t len)
{
    for (size_t i = 0; i < o->nov; i++)
        if (o->ov[i].len == len && memcmp(o->ov[i].id, id, len) == 0) {
            o->ov[i].used = true;
            return o->ov[i].a;
        }
    return o->dflt;
}

static const char *payload_of(const struct aopts *o, answer_t a)
{
    if (a == ANS_CANCEL)
        return NULL;
    if (a == o->kind && o->payload)
        return o->payload;
    return a == ANS_APPROVE ? "{\"approved\":true}" : "{\"approved\":false}";
}

/* The resume array as JSON text, printing each id with its answer (invariants 1-3). */
static int build_resume(struct aopts *o, const struct pending *p, ab_buf_t *out, FILE *notes)
{
    answer_t *ans = calloc(p->n ? p->n : 1, sizeof(*ans));
    if (!ans)
        return cli_refused(o->cmd, &(ab_error_t){.code = AB_NOMEM, .message = "out of memory"});
    for (size_t i = 0; i < p->n; i++)
        ans[i] = answer_of(o, p->ids[i], p->lens[i]);
    for (size_t i = 0; i < o->nov; i++)
        if (!o->ov[i].used) {
            free(ans);
            return cli_usage_error(o->cmd,
                                   "--interrupt %.*s: run %s raised no interrupt with that id",
                                   (int)o->ov[i].len, o->ov[i].id, o->run);
        }
    bool ok = ab_buf_append(out, "[", 1) == AB_OK;
    for (size_t i = 0; ok && i < p->n; i++) {
        const char *pl = payload_of(o, ans[i]);
        const char *st = pl ? ",\"status\":\"resolved\",\"payload\":" : ",\"status\":\"cancelled\"";
        ok = ab_buf_append(out, i ? ",{\"interruptId\":" : "{\"interruptId\":", i ? 16 : 15) ==
                 AB_OK &&
             ab_json_quote(out, p->ids[i], p->lens[i]) == AB_OK &&
             ab_buf_append(out, st, strlen(st)) == AB_OK &&
             (!pl || ab_buf_append(out, pl, strlen(pl)) == AB_OK) &&
             ab_buf_append(out, "}", 1) == AB_OK;
        fprintf(notes, "interrupt %.*s: %s (%s%s)\n", (int)p->lens[i], p->ids[i],
                answer_names[ans[i]], pl ? "resolved, payload " : "cancelled", pl ? pl : "");
    }
    free(ans);
    if (!ok || ab_buf_append(out, "]", 1) != AB_OK)
        return cli_refused(o->cmd, &(ab_error_t){.code = AB_NOMEM, .message = "out of memory"});
    fflush(notes);
    return 0;
}

static void print_resume_json(const struct aopts *o, const ab_buf_t *resume)
{
    ab_buf_t b = AB_BUF_INIT;
    bool ok = ab_buf_append(&b, "{\"op\":\"resume\",\"thread\":", 24) == AB_OK &&
              ab_json_quote(&b, o->thread, strlen(o->thread)) == AB_OK &&
              ab_buf_append(&b, ",\"run\":", 7) == AB_OK &&
              ab_json_quote(&b, o->run, strlen(o->run)) == AB_OK &&
              ab_buf_append(&b, ",\"resume\":", 10) == AB_OK &&
              ab_buf_append(&b, resume->data, resume->len) == AB_OK &&
              ab_buf_append(&b, "}\n", 2) == AB_OK;
    if (ok)
        fwrite(b.data, 1, b.len, stdout);
    ab_buf_free(&b);
}

#define SV(s) ((ab_str_t){(s), (s) ? strlen(s) : 0})

struct abufs {
    ab_buf_t resume, mp, itext, imp;
    ab_doc_t *doc, *rdoc, *idoc;
    const ab_val_t *input; /* --input, read before anything is sent */
    char key[64];
};

/* Read the interrupts, answer them, send resume_run, follow. The exit status. */
static int resume(struct aopts *o, struct abufs *b, ab_conn_t *c, cli_printer_t *pr)
{
    struct pending p = {0};
    ab_error_t err = AB_ERROR_INIT;
    const ab_val_t *rv = NULL;
    int rc = 0;
    if (ab_doc_new(&p.edoc) != AB_OK)
        ab_error_set(&err, AB_NOMEM, "", "out of memory");
    else
        (void)read_pending(o, c, b->doc, &p, &err);
    if (err.code != AB_OK)
        rc = cli_refused(o->cmd, &err);
    if (rc == 0)
        rc = build_resume(o, &p, &b->resume, cli_notes(pr));
    if (rc == 0 && cli_json_value((const char *)b->resume.data, b->resume.len, &b->mp, b->rdoc, &rv,
                                  &err) != AB_OK)
        rc = cli_refused(o->cmd, &err);
    pending_free(&p);
    if (rc != 0)
        return rc;
    if (o->d.json)
        print_resume_json(o, &b->resume);
    ab_resume_run_t q = {SV(o->thread), SV(o->run),     rv,      SV(o->key),
                         SV(o->agent),  SV(o->new_run), b->input};
    ab_run_accepted_t a;
    if (ab_conn_resume_run(c, &q, b->doc, &a, (int)o->d.timeout_ms, &err) != AB_OK)
        return cli_refused(o->cmd, &err);
    cli_print_accepted(pr, &a, o->key);
    return cli_follow_accepted(&o->d, c, &a, pr);
}

/* The documents, and --input: a bad one is a usage error found before anything is sent.
 * @return 0 or the exit status. */
static int prepare(const struct aopts *o, struct abufs *b)
{
    if ((!b->rdoc && ab_doc_new(&b->rdoc) != AB_OK) || ab_doc_new(&b->doc) != AB_OK ||
        ab_doc_new(&b->idoc) != AB_OK)
        return cli_refused(o->cmd, &(ab_error_t){.code = AB_NOMEM, .message = "out of memory"});
    if (o->input)
        return cli_read_input(o->cmd, o->input, &b->itext, &b->imp, b->idoc, &b->input);
    return 0;
}

static int approve_or_deny(int argc, char **argv, const char *cmd, answer_t kind)
{
    struct aopts o = {
        .d = {.timeout_ms = AB_CONN_TIMEOUT_DEFAULT}, .cmd = cmd, .kind = kind, .dflt = kind};
    struct abufs b = {.resume = AB_BUF_INIT};
    int rc = parse(argc, argv, &o);
    ab_error_t err = AB_ERROR_INIT;
    const ab_val_t *pv = NULL;
    if (rc == 0 && o.payload &&
        (ab_doc_new(&b.rdoc) != AB_OK ||
         cli_json_value(o.payload, strlen(o.payload), &b.mp, b.rdoc, &pv, &err) != AB_OK))
        rc = cli_usage_error(cmd, "--payload: %s%s%s", err.message, err.field[0] ? " at " : "",
                             err.field);
    if (rc == 0)
        rc = cli_endpoint(cmd, o.d.broker, &o.d.broker);
    if (rc != 0) {
        free(o.ov);
        ab_doc_destroy(&b.rdoc);
        ab_buf_free(&b.mp);
        return rc < 0 ? AB_EXIT_OK : rc;
    }
    if (!o.key) {
        cli_fresh_id(b.key, sizeof(b.key), "key");
        o.key = b.key;
    }
    cli_printer_t pr;
    cli_printer_init(&pr, cmd, o.d.json, !o.d.no_color);
    ab_conn_t *c = NULL;
    if ((rc = prepare(&o, &b)) == 0 &&
        cli_dispatch_connect(cmd, &o.d, AB_CAP_RESUME_RUN, &c, &err) != AB_OK)
        rc = cli_refused(cmd, &err);
    else if (rc == 0)
        rc = resume(&o, &b, c, &pr);
    cli_printer_free(&pr);
    ab_conn_destroy(&c);
    ab_doc_destroy(&b.doc);
    ab_doc_destroy(&b.rdoc);
    ab_doc_destroy(&b.idoc);
    ab_buf_free(&b.resume);
    ab_buf_free(&b.mp);
    ab_buf_free(&b.itext);
    ab_buf_free(&b.imp);
    free(o.ov);
    return rc;
}

int cmd_approve(int argc, char **argv)
{
    return approve_or_deny(argc, argv, "approve", ANS_APPROVE);
}

int cmd_deny(int argc, char **argv)
{
    return approve_or_deny(argc, argv, "deny", ANS_DENY);
}

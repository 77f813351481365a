/*
 * dispatch_resume.c - resume_run (docs/PROTOCOL.md 7.14): answer every
 * pending interrupt of an interrupted run and queue the run that continues
 * it, for the same agent, with input.resume.
 *
 * Invariants:
 *  1. The check is the sequencer's own (ab__seq_resume_probe()): the run
 *     must be the thread's pending interrupted run, and each of its
 *     interrupts answered exactly once, explicitly resolved or cancelled
 *     (an expired one only cancelled); a refusal names the interrupt id.
 *     The RUN_STARTED the worker later publishes meets the same rule again.
 *  2. The entries' shapes are those of RunAgentInput.resume (agui.h), checked
 *     before their meaning.
 *  3. The same idempotency key gets the same request back (before any check,
 *     so a retry after the resume was dispatched is not refused as stale).
 *  4. A dispatched run is resumed with its own request's agent: the interrupts
 *     are that agent's (its tool calls, its approvals), so a resume_run naming
 *     another agent is refused `conflict`, field `agent`, naming both. (A
 *     controller that wants another agent to answer them starts that agent's
 *     run with input.resume itself: start_run, which the sequencer checks the
 *     same way.)
 */
#include "dispatch_int.h"

#include <string.h>

static ab_str_t sv(const char *s)
{
    return (ab_str_t){s, strlen(s)};
}

static void fail_err(ab__dispatch_t *d, ab_job_t *job, ab_error_t *e)
{
    e->cid = job->cid;
    ab__dq_answer(d, job, NULL, e);
}

/* The resume entries' shapes, as RunAgentInput.resume; paths "resume/...". */
static ab_status_t check_shapes(ab__dispatch_t *d, const ab_val_t *resume, ab_error_t *err)
{
    ab_kv_t *kv = ab_doc_alloc(d->doc, 4 * sizeof(*kv));
    if (kv == NULL)
        return ab_error_set(err, AB_NOMEM, "", "out of memory checking resume");
    kv[0] = (ab_kv_t){"threadId", 8, {AB_VAL_STR, 1, {.s = "t"}}};
    kv[1] = (ab_kv_t){"runId", 5, {AB_VAL_STR, 1, {.s = "r"}}};
    kv[2] = (ab_kv_t){"messages", 8, {AB_VAL_ARRAY, 0, {.items = NULL}}};
    kv[3] = (ab_kv_t){"resume", 6, *resume};
    ab_val_t in = {AB_VAL_MAP, 4, {.pairs = kv}};
    ab_status_t rc = ab_agui_validate_input(&in, AB_AGUI_STRICT, NULL, NULL, err);
    if (rc != AB_OK && strncmp(err->field, "input/", 6) == 0) /* the entries are ours: "resume/0" */
        memmove(err->field, err->field + 6, strlen(err->field + 6) + 1);
    return rc;
}

/* The agent of the interrupted run: its own request's (invariant 4), else the caller's. */
static ab_status_t agent_of(ab__dispatch_t *d, const ab_resume_run_t *r, ab_request_t *req,
                            ab_str_t *agent, ab_error_t *err)
{
    ab_status_t rc = d->p->request_by_run(d->db, r->thread, r->run, req, NULL, err);
    if (rc == AB_OK) {
        if (r->agent.ptr && (r->agent.len != strlen(req->agent) ||
                             memcmp(r->agent.ptr, req->agent, r->agent.len) != 0))
            return ab_error_set(err, AB_CONFLICT, "agent",
                                "resume_run names agent %.*s, but run %s was dispatched to agent "
                                "%s, whose interrupts these are: omit agent to resume it",
                                (int)r->agent.len, r->agent.ptr, req->run, req->agent);
        *agent = sv(req->agent);
        return AB_OK;
    }
    if (rc != AB_NOT_FOUND)
        return rc;
    ab_error_clear(err);
    if (r->agent.ptr) {
        *agent = r->agent;
        return AB_OK;
    }
    return ab_error_set(err, AB_INVALID_ARGUMENT, "agent",
                        "run %.*s was not dispatched through the bus: name the agent to resume it",
                        (int)(r->run.len > 64 ? 64 : r->run.len), r->run.ptr);
}

void ab__dispatch_resume(ab__dispatch_t *d, ab_job_t *job, const ab_resume_run_t *r)
{
    if (ab__dispatch_known(d, job, r->key))
        return;
    ab_error_t e = AB_ERROR_INIT;
    ab_request_t req;
    ab_str_t agent = {0};
    ab_val_t empty = {AB_VAL_MAP, 0, {.pairs = NULL}};
    ab_kv_t *kv = NULL;
    const ab_val_t *base = r->input ? r->input : &empty;
    ab_status_t rc = check_shapes(d, r->resume, &e);
    if (rc == AB_OK && !r->input) { /* no input: the replacement run's is {messages: []} */
        kv = ab_doc_alloc(d->doc, sizeof(*kv));
        if (kv == NULL)
            rc = ab_error_set(&e, AB_NOMEM, "", "out of memory");
        else
            kv[0] = (ab_kv_t){"messages", 8, {AB_VAL_ARRAY, 0, {.items = NULL}}};
        empty = (ab_val_t){AB_VAL_MAP, 1, {.pairs = kv}};
    }
    if (rc == AB_OK) {
        ab__seq_set_now(d->seq, ab__now_us());
        rc = ab__seq_resume_probe(d->seq, r->thread, r->run, r->resume, &e);
    }
    if (rc == AB_OK)
        rc = agent_of(d, r, &req, &agent, &e);
    char made[AB_ID_MAX_BYTES + 1];
    ab__newreq_t n = {
        .agent = agent, .thread = r->thread, .key = r->key, .input = base, .resume = r->resume};
    if (rc == AB_OK)
        rc = ab__dispatch_run_id(d, &n, r->new_run, made, sizeof(made), &e);
    if (rc != AB_OK) {
        fail_err(d, job, &e);
        return;
    }
    ab__dispatch_put(d, job, &n, AB_IF_BUSY_ENQUEUE);
}

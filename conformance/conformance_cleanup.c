/*
 * conformance_cleanup.c - after the checks: every run the suite left active
 * on the broker is ended, so a shared broker keeps no active conf-* runs.
 *
 * Invariants:
 *  1. Only ids the suite made are touched: conf_id() records each one, and
 *     each recorded id is asked for as a thread (an id that names no thread
 *     has no runs).
 *  2. A run is ended the way a writer ends one: a claim (fencing whatever
 *     wrote it), then a RUN_ERROR at its next seq with the code
 *     "conformance.cleanup" (codes starting "agentbus." are the broker's own). A refusal is
 * reported, never fatal.
 *  3. Memory: one copy of each id made (the suite makes a few hundred).
 */
#include "ab_json_out.h"
#include "conformance.h"

#include "agentbus/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLEANUP_BODY                                                                               \
    "{\"type\":\"RUN_ERROR\",\"message\":\"ended by agentbus conformance after its checks\","      \
    "\"code\":\"conformance.cleanup\"}"

void conf_json_str(const char *s)
{
    ab__json_str_out(stdout, s);
}

void conf_note_id(conf_t *cf, const char *id)
{
    if (cf->nids == cf->cap_ids) {
        size_t cap = cf->cap_ids ? 2 * cf->cap_ids : 64;
        char **p = realloc(cf->ids, cap * sizeof(*p));
        if (p == NULL)
            return; /* an id not noted is a run not cleaned: said by nothing, harmless */
        cf->ids = p;
        cf->cap_ids = cap;
    }
    size_t n = strlen(id) + 1;
    char *copy = malloc(n);
    if (copy != NULL) {
        memcpy(copy, id, n);
        cf->ids[cf->nids++] = copy;
    }
}

/* End run @p h of thread @p thread; @return 0, or -1 with the reason in @p why. */
static int end_run(conf_t *cf, ab_conn_t *c, ab_doc_t *doc, const char *thread, const char *run,
                   char *why, size_t size)
{
    ab_claimed_t cl;
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_t env = AB_BUF_INIT;
    const ab_result_t *res = NULL;
    int rc = -1;
    if (ab_conn_claim(c, thread, run, doc, &cl, cf->timeout_ms, &err) == AB_OK &&
        ab_envelope_json(&env, ab_conn_version(c), thread, run, cl.last_seq + 1, cl.epoch,
                         CLEANUP_BODY, &err) == AB_OK &&
        ab_conn_publish(c, &env, 1, doc, &res, cf->timeout_ms, &err) == AB_OK) {
        if (res[0].status != AB_RESULT_REJECTED)
            rc = 0;
        else
            snprintf(why, size, "%s", res[0].error ? res[0].error->message : "rejected");
    } else {
        snprintf(why, size, "%s: %s", ab_status_name(err.code), err.message);
    }
    ab_buf_free(&env);
    return rc;
}

/* The active runs of one thread, copied out of the reply before any other request. */
static int end_thread(conf_t *cf, ab_conn_t *c, ab_doc_t *doc, const char *thread, int *ended)
{
    ab_heads_t q = {.thread = {thread, strlen(thread)}};
    ab_heads_reply_t hr;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_heads(c, &q, doc, &hr, cf->timeout_ms, &err) != AB_OK)
        return 0; /* no such thread, or no answer: nothing to end */
    char runs[16][AB_ID_MAX_BYTES + 1];
    size_t n = 0;
    for (size_t i = 0; i < hr.nheads && n < 16; i++)
        if (hr.heads[i].status == AB_RUN_STATUS_ACTIVE && hr.heads[i].run.len <= AB_ID_MAX_BYTES) {
            memcpy(runs[n], hr.heads[i].run.ptr, hr.heads[i].run.len);
            runs[n++][hr.heads[i].run.len] = '\0';
        }
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        char why[300];
        if (end_run(cf, c, doc, thread, runs[i], why, sizeof why) == 0) {
            (*ended)++;
        } else {
            if (!cf->json)
                printf("cleanup: run %s/%s stays active: %s\n", thread, runs[i], why);
            failed++;
        }
    }
    return failed;
}

void conf_cleanup(conf_t *cf)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_conn_t *c = conf_connect(cf, NULL, 0, &err);
    ab_doc_t *doc = NULL;
    int ended = 0, failed = 0;
    if (c != NULL && ab_doc_new(&doc) == AB_OK)
        for (size_t i = 0; i < cf->nids; i++)
            failed += end_thread(cf, c, doc, cf->ids[i], &ended);
    else if (!cf->json)
        printf("cleanup: cannot connect to end the suite's runs: %s\n", err.message);
    if (cf->json)
        printf("{\"cleanup\":{\"ended\":%d,\"failed\":%d}}\n", ended, failed);
    else if (ended || failed)
        printf("cleanup: ended %d run(s) the checks left active%s\n", ended,
               failed ? " (some stay active, above)" : "");
    ab_doc_destroy(&doc);
    ab_conn_destroy(&c);
    for (size_t i = 0; i < cf->nids; i++)
        free(cf->ids[i]);
    free(cf->ids);
    cf->ids = NULL;
    cf->nids = cf->cap_ids = 0;
}

/*
 * test_resume.c - a real broker process enforces the thread-level rules of a
 * RUN_STARTED (docs/SEQUENCER.md rule 7, docs/VALIDATION.md D14): a resume
 * must answer exactly the pending interrupts of the thread's latest run
 * (missing, unknown, duplicated and expired-but-resolved entries are refused
 * with `conflict` naming the interrupt), an input must name its own run,
 * and the rule still holds after the broker is stopped (SIGTERM) and
 * started again on the same data directory. Likewise the thread-level
 * activity rule (docs/SEQUENCER.md section 2b): an ACTIVITY_DELTA in a
 * later run of the thread patches an activity message an earlier run
 * created, across a restart, and never one of another thread.
 */
#include "testutil.h"

#include "broker_proc.h"

#include <stdio.h>
#include <string.h>

#define TWO                                                                                        \
    "[{\"id\":\"i1\",\"reason\":\"confirmation\"},{\"id\":\"i2\",\"reason\":\"tool_call\","        \
    "\"expiresAt\":\"2001-01-01T00:00:00Z\"}]"
#define R(id, st) "{\"interruptId\":\"" id "\",\"status\":\"" st "\"}"

/* Publish one event of (thread, run) with body @p json; the result, its error in @p rej. */
static ab_result_t pub(ab_conn_t *c, ab_doc_t *doc, const char *th, const char *run, uint64_t seq,
                       const char *json, ab_error_t *rej)
{
    ab_buf_t ev = AB_BUF_INIT;
    it_event_json(&ev, th, run, seq, 1, json);
    ab_result_t r = it_publish1(c, doc, &ev, rej);
    ab_buf_free(&ev);
    return r;
}

static void accepted(ab_result_t r, const ab_error_t *rej)
{
    if (r.status != AB_RESULT_ACCEPTED)
        fail_msg("expected accepted, got %d: %s: %s (at %s)", (int)r.status,
                 ab_status_name(rej->code), rej->message, rej->field);
}

/* Rejected with @p code at @p field; @p id (if set) is the interruptId detail and in the message.
 */
static void refused(ab_result_t r, const ab_error_t *rej, ab_status_t code, const char *field,
                    const char *id)
{
    if (r.status != AB_RESULT_REJECTED)
        fail_msg("expected rejected %s at %s, got %d", ab_status_name(code), field, (int)r.status);
    tu_assert_error(rej, code, field);
    const ab_error_detail_t *d = id ? ab_error_detail(rej, "interruptId") : NULL;
    if (id && (!d || strcmp(d->s, id) != 0 || !strstr(rej->message, id)))
        fail_msg("expected interrupt %s named: %s", id, rej->message);
}

/* RUN_STARTED of (th, run) echoing its input; @p resume NULL = input without resume. */
static ab_result_t start(ab_conn_t *c, ab_doc_t *doc, const char *th, const char *run,
                         const char *resume, ab_error_t *rej)
{
    char json[1024];
    snprintf(json, sizeof(json),
             "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\",\"protocolVersion\":"
             "\"1.0\",\"input\":{\"threadId\":\"%s\",\"runId\":\"%s\",\"messages\":[]%s%s}}",
             th, run, th, run, resume ? ",\"resume\":" : "", resume ? resume : "");
    return pub(c, doc, th, run, 1, json, rej);
}

/* Run (th, run) starts and finishes with the interrupts @p ints. */
static void interrupted(ab_conn_t *c, ab_doc_t *doc, const char *th, const char *run,
                        const char *ints)
{
    char json[1024];
    ab_error_t rej = AB_ERROR_INIT;
    snprintf(json, sizeof(json),
             "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\",\"protocolVersion\":"
             "\"1.0\"}",
             th, run);
    accepted(pub(c, doc, th, run, 1, json, &rej), &rej);
    snprintf(
        json, sizeof(json),
        "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\",\"outcome\":{\"type\":"
        "\"interrupt\",\"interrupts\":%s}}",
        th, run, ints);
    accepted(pub(c, doc, th, run, 2, json, &rej), &rej);
}

static void test_resume_rules(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    ab_error_t rej = AB_ERROR_INIT;
    interrupted(c, t->doc, "th", "r1", TWO);
    ab_result_t r = start(c, t->doc, "th", "r2", "[" R("i1", "resolved") "]", &rej);
    refused(r, &rej, AB_CONFLICT, "event/input/resume", "i2");
    r = start(c, t->doc, "th", "r3",
              "[" R("i1", "resolved") "," R("i2", "cancelled") "," R("i7", "resolved") "]", &rej);
    refused(r, &rej, AB_CONFLICT, "event/input/resume/2/interruptId", "i7");
    r = start(c, t->doc, "th", "r4", "[" R("i2", "cancelled") "," R("i2", "cancelled") "]", &rej);
    refused(r, &rej, AB_CONFLICT, "event/input/resume/1/interruptId", "i2");
    r = start(c, t->doc, "th", "r5", NULL, &rej);
    refused(r, &rej, AB_CONFLICT, "event/input/resume", "i1");
    /* i2 expired in 2001: resolving it is refused, cancelling it is the valid resume */
    r = start(c, t->doc, "th", "r6", "[" R("i1", "resolved") "," R("i2", "resolved") "]", &rej);
    refused(r, &rej, AB_CONFLICT, "event/input/resume/1/status", "i2");
    /* an input that echoes another run (strict validation) */
    r = pub(
        c, t->doc, "th", "r7", 1,
        "{\"type\":\"RUN_STARTED\",\"threadId\":\"th\",\"runId\":\"r7\",\"protocolVersion\":"
        "\"1.0\",\"input\":{\"threadId\":\"th\",\"runId\":\"r1\",\"messages\":[],\"resume\":[" R(
            "i1", "resolved") "," R("i2", "cancelled") "]}}",
        &rej);
    refused(r, &rej, AB_INVALID_EVENT, "event/input/runId", NULL);
    if (!strstr(rej.message, "r1") || !strstr(rej.message, "r7"))
        fail_msg("the message names neither run: %s", rej.message);
    r = start(c, t->doc, "th", "r8", "[" R("i1", "resolved") "," R("i2", "cancelled") "]", &rej);
    accepted(r, &rej);
    /* answered: nothing is pending any more */
    r = start(c, t->doc, "th", "r9", "[" R("i1", "resolved") "," R("i2", "cancelled") "]", &rej);
    refused(r, &rej, AB_CONFLICT, "event/input/resume/0/interruptId", "i1");
    ab_head_t h = it_head(c, t->doc, "th", "r2");
    assert_int_equal(h.last_seq, 0); /* nothing of a refused run is stored */
    ab_conn_destroy(&c);
}

/* Within one publish: the interrupted RUN_FINISHED and the resumes after it. */
static void test_same_batch(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    ab_buf_t b[4] = {AB_BUF_INIT, AB_BUF_INIT, AB_BUF_INIT, AB_BUF_INIT};
    it_event_json(&b[0], "tb", "r1", 1, 1,
                  "{\"type\":\"RUN_STARTED\",\"threadId\":\"tb\",\"runId\":\"r1\","
                  "\"protocolVersion\":\"1.0\"}");
    it_event_json(&b[1], "tb", "r1", 2, 1,
                  "{\"type\":\"RUN_FINISHED\",\"threadId\":\"tb\",\"runId\":\"r1\",\"outcome\":{"
                  "\"type\":\"interrupt\",\"interrupts\":[{\"id\":\"k1\",\"reason\":\"r\"}]}}");
    it_event_json(&b[2], "tb", "r2", 1, 1,
                  "{\"type\":\"RUN_STARTED\",\"threadId\":\"tb\",\"runId\":\"r2\","
                  "\"protocolVersion\":\"1.0\",\"input\":{\"threadId\":\"tb\",\"runId\":\"r2\","
                  "\"messages\":[]}}");
    it_event_json(&b[3], "tb", "r3", 1, 1,
                  "{\"type\":\"RUN_STARTED\",\"threadId\":\"tb\",\"runId\":\"r3\","
                  "\"protocolVersion\":\"1.0\",\"input\":{\"threadId\":\"tb\",\"runId\":\"r3\","
                  "\"messages\":[],\"resume\":[" R("k1", "resolved") "]}}");
    const ab_result_t *res = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_publish(c, b, 4, t->doc, &res, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(res[0].status, AB_RESULT_ACCEPTED);
    assert_int_equal(res[1].status, AB_RESULT_ACCEPTED);
    assert_int_equal(res[2].status, AB_RESULT_REJECTED);
    refused(res[2], res[2].error, AB_CONFLICT, "event/input/resume", "k1");
    assert_int_equal(res[3].status, AB_RESULT_ACCEPTED);
    for (int i = 0; i < 4; i++)
        ab_buf_free(&b[i]);
    ab_conn_destroy(&c);
}

static void test_after_restart(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    ab_error_t rej = AB_ERROR_INIT;
    interrupted(c, t->doc, "tr", "r1", TWO);
    ab_conn_destroy(&c);
    assert_int_equal(bp_stop(&t->bp), 0);
    assert_int_equal(bp_restart(&t->bp), 0);
    c = it_connect(&t->bp);
    ab_result_t r = start(c, t->doc, "tr", "r2", "[" R("i2", "cancelled") "]", &rej);
    refused(r, &rej, AB_CONFLICT, "event/input/resume", "i1");
    r = start(c, t->doc, "tr", "r3", "[" R("i2", "cancelled") "," R("i1", "resolved") "]", &rej);
    accepted(r, &rej);
    ab_conn_destroy(&c);
    assert_int_equal(bp_stop(&t->bp), 0);
    assert_int_equal(bp_restart(&t->bp), 0);
    c = it_connect(&t->bp);
    r = start(c, t->doc, "tr", "r4", "[" R("i2", "cancelled") "," R("i1", "resolved") "]", &rej);
    refused(r, &rej, AB_CONFLICT, "event/input/resume/0/interruptId", "i2"); /* r3 answered */
    ab_conn_destroy(&c);
}

#define ACTS(id)                                                                                   \
    "{\"type\":\"ACTIVITY_SNAPSHOT\",\"messageId\":\"" id "\",\"activityType\":\"plan\","          \
    "\"content\":{\"step\":1}}"
#define ACTD(id)                                                                                   \
    "{\"type\":\"ACTIVITY_DELTA\",\"messageId\":\"" id "\",\"activityType\":\"plan\",\"patch\":[{" \
    "\"op\":\"replace\",\"path\":\"/step\",\"value\":2}]}"

static void run_boundary(ab_conn_t *c, ab_doc_t *doc, const char *th, const char *run, uint64_t seq)
{
    char json[256];
    ab_error_t rej = AB_ERROR_INIT;
    if (seq == 1)
        snprintf(json, sizeof(json),
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                 "\"protocolVersion\":\"1.0\"}",
                 th, run);
    else
        snprintf(json, sizeof(json),
                 "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\"}", th, run);
    accepted(pub(c, doc, th, run, seq, json, &rej), &rej);
}

static void no_baseline(ab_result_t r, const ab_error_t *rej, const char *id)
{
    refused(r, rej, AB_INVALID_EVENT, "event/messageId", NULL);
    if (!strstr(rej->message, id) || !strstr(rej->message, "of this thread holds"))
        fail_msg("expected a delta without a baseline for %s: %s", id, rej->message);
}

static void test_activity_across_runs(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    ab_error_t rej = AB_ERROR_INIT;
    run_boundary(c, t->doc, "ta", "r1", 1);
    accepted(pub(c, t->doc, "ta", "r1", 2, ACTS("a1"), &rej), &rej);
    run_boundary(c, t->doc, "ta", "r1", 3);
    run_boundary(c, t->doc, "ta", "r2", 1);
    accepted(pub(c, t->doc, "ta", "r2", 2, ACTD("a1"), &rej), &rej);
    no_baseline(pub(c, t->doc, "ta", "r2", 3, ACTD("zz"), &rej), &rej, "zz");
    run_boundary(c, t->doc, "tb", "r1", 1);
    no_baseline(pub(c, t->doc, "tb", "r1", 2, ACTD("a1"), &rej), &rej, "a1");
    ab_conn_destroy(&c);
    assert_int_equal(bp_stop(&t->bp), 0);
    assert_int_equal(bp_restart(&t->bp), 0);
    c = it_connect(&t->bp);
    /* r2 is rebuilt from the store, the thread's activity derived from its stored events */
    accepted(pub(c, t->doc, "ta", "r2", 3, ACTD("a1"), &rej), &rej);
    no_baseline(pub(c, t->doc, "ta", "r2", 4, ACTD("zz"), &rej), &rej, "zz");
    no_baseline(pub(c, t->doc, "tb", "r1", 2, ACTD("a1"), &rej), &rej, "a1");
    run_boundary(c, t->doc, "ta", "r2", 4);
    ab_conn_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_resume_rules, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_same_batch, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_after_restart, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_activity_across_runs, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_lifecycle.c - the AG-UI 1.0 run lifecycle checker (proto/lifecycle*.c).
 *
 * Events are written as JSON with single quotes (turned into double quotes),
 * validated strictly with ab_agui_validate() and fed to the checker. Every
 * rejected event is also checked to leave the checker unchanged (bad_()).
 * test_lifecycle_streams.c replays every stream under tests/fixtures/streams.
 */
#include "agentbus/agui.h"
#include "lifecycle_internal.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- harness ------------------------------------------------------------- */

typedef struct lt {
    tu_ctx_t tu;
    ab_lifecycle_t *lc;
    ab_error_t err;
} lt_t;

static lt_t *lt_new(const ab_lifecycle_limits_t *lim)
{
    lt_t *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    tu_ctx_init(&t->tu);
    assert_int_equal(ab_lifecycle_new(&t->lc, NULL, 0, NULL, 0, lim), AB_OK);
    return t;
}

static void lt_free(lt_t *t)
{
    ab_lifecycle_destroy(&t->lc);
    assert_null(t->lc);
    tu_ctx_free(&t->tu);
    free(t);
}

/* Validate one JSON event strictly and check it; the event must be schema-valid. */
static ab_status_t check_json_line(ab_lifecycle_t *lc, tu_ctx_t *tu, const char *json,
                                   ab_error_t *err)
{
    const ab_val_t *root = tu_json(tu, json);
    ab_agui_info_t info;
    ab_error_t verr = AB_ERROR_INIT;
    if (ab_agui_validate(root, AB_AGUI_STRICT, NULL, NULL, &info, &verr) != AB_OK)
        fail_msg("schema rejects test event %s: %s (at %s)", json, verr.message, verr.field);
    ab_error_clear(err);
    return ab_lifecycle_check(lc, &info, err);
}

static ab_status_t feed(lt_t *t, const char *sq)
{
    static char json[8192];
    size_t n = strlen(sq);
    assert_true(n < sizeof(json));
    for (size_t i = 0; i <= n; i++)
        json[i] = sq[i] == '\'' ? '"' : sq[i];
    return check_json_line(t->lc, &t->tu, json, &t->err);
}

/* What a rejected event must not change. */
typedef struct fp {
    ab_run_state_t state;
    uint32_t n_open, n_calls, n_ids;
    size_t nitems, nbuckets, mem;
    uint64_t seq;
    const void *chunks, *calls_tail;
} fp_t;

static fp_t fingerprint(const ab_lifecycle_t *lc)
{
    fp_t f;
    memset(&f, 0, sizeof(f));
    f.state = lc->state;
    f.n_open = lc->n_open;
    f.n_calls = lc->n_calls;
    f.n_ids = lc->n_ids;
    f.nitems = lc->nitems;
    f.nbuckets = lc->nbuckets;
    f.mem = lc->mem;
    f.seq = lc->seq;
    f.chunks = lc->chunks;
    f.calls_tail = lc->calls_tail;
    return f;
}

#define OK(t, j) ok_(t, j, __LINE__)
static void ok_(lt_t *t, const char *j, int line)
{
    ab_status_t st = feed(t, j);
    if (st != AB_OK)
        fail_msg("line %d: %s rejected: %s: %s (at %s)", line, j, ab_status_name(st),
                 t->err.message, t->err.field);
}

#define BAD(t, j, code, field, sub) bad_(t, j, code, field, sub, __LINE__)
static void bad_(lt_t *t, const char *j, ab_status_t code, const char *field, const char *sub,
                 int line)
{
    fp_t before = fingerprint(t->lc);
    ab_status_t st = feed(t, j);
    if (st != code)
        fail_msg("line %d: %s: expected %s, got %s: %s", line, j, ab_status_name(code),
                 ab_status_name(st), t->err.message);
    tu_assert_error(&t->err, code, field);
    if (sub && !strstr(t->err.message, sub))
        fail_msg("line %d: message '%s' lacks '%s'", line, t->err.message, sub);
    fp_t after = fingerprint(t->lc);
    if (memcmp(&before, &after, sizeof(before)) != 0)
        fail_msg("line %d: rejected event %s changed the checker", line, j);
}

#define RS     "{'type':'RUN_STARTED','threadId':'th','runId':'r1','protocolVersion':'1.0'}"
#define RF     "{'type':'RUN_FINISHED','threadId':'th','runId':'r1'}"
#define RE     "{'type':'RUN_ERROR','message':'boom'}"
#define TS(id) "{'type':'TEXT_MESSAGE_START','messageId':'" id "'}"
#define TC(id) "{'type':'TEXT_MESSAGE_CONTENT','messageId':'" id "','delta':'x'}"
#define TE(id) "{'type':'TEXT_MESSAGE_END','messageId':'" id "'}"
#define CS(id) "{'type':'TOOL_CALL_START','toolCallId':'" id "','toolCallName':'f'}"
#define CA(id) "{'type':'TOOL_CALL_ARGS','toolCallId':'" id "','delta':'{}'}"
#define CE(id) "{'type':'TOOL_CALL_END','toolCallId':'" id "'}"
#define CR(id)                                                                                     \
    "{'type':'TOOL_CALL_RESULT','messageId':'r-" id "','toolCallId':'" id "','content':'ok'}"
#define SS(n)    "{'type':'STEP_STARTED','stepName':'" n "'}"
#define SF(n)    "{'type':'STEP_FINISHED','stepName':'" n "'}"
#define SUBS(id) "{'type':'SUBAGENT_STARTED','subagentRunId':'" id "','name':'helper'}"
#define SUBF(id) "{'type':'SUBAGENT_FINISHED','subagentRunId':'" id "'}"
#define TXCH(x)  "{'type':'TEXT_MESSAGE_CHUNK'" x "}"
#define TLCH(x)  "{'type':'TOOL_CALL_CHUNK'" x "}"

static lt_t *started(void)
{
    lt_t *t = lt_new(NULL);
    OK(t, RS);
    return t;
}

/* ---- API and run boundaries --------------------------------------------- */

static void test_api(void **state)
{
    (void)state;
    ab_lifecycle_limits_t d = ab_lifecycle_limits_default();
    assert_int_equal(d.max_open, 1024);
    assert_int_equal(d.max_tool_calls, 4096);
    assert_int_equal(d.max_ids, 4096);
    ab_lifecycle_t *lc = NULL;
    char big[300];
    memset(big, 'a', sizeof(big));
    assert_int_equal(ab_lifecycle_new(NULL, NULL, 0, NULL, 0, NULL), AB_INVALID_ARGUMENT);
    assert_int_equal(ab_lifecycle_new(&lc, "t", 1, NULL, 0, NULL), AB_INVALID_ARGUMENT);
    assert_int_equal(ab_lifecycle_new(&lc, NULL, 3, NULL, 0, NULL), AB_INVALID_ARGUMENT);
    assert_int_equal(ab_lifecycle_new(&lc, big, 300, "r", 1, NULL), AB_INVALID_ARGUMENT);
    ab_lifecycle_limits_t zero = {0, 1, 1};
    assert_int_equal(ab_lifecycle_new(&lc, NULL, 0, NULL, 0, &zero), AB_INVALID_ARGUMENT);
    assert_null(lc);
    assert_int_equal(ab_lifecycle_state(NULL), AB_RUN_NEW);
    assert_int_equal(ab_lifecycle_memory(NULL), 0);
    ab_lifecycle_destroy(NULL);
    ab_lifecycle_destroy(&lc);
    assert_int_equal(ab_lifecycle_new(&lc, NULL, 0, NULL, 0, NULL), AB_OK);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_lifecycle_check(lc, NULL, &err), AB_INVALID_ARGUMENT);
    ab_agui_info_t unknown;
    memset(&unknown, 0, sizeof(unknown));
    assert_int_equal(ab_lifecycle_check(lc, &unknown, NULL), AB_OK); /* dropped, ignored */
    assert_int_equal(ab_lifecycle_state(lc), AB_RUN_NEW);
    ab_lifecycle_destroy(&lc);
}

static void test_run_states(void **state)
{
    (void)state;
    lt_t *t = lt_new(NULL);
    assert_int_equal(ab_lifecycle_state(t->lc), AB_RUN_NEW);
    BAD(t, TS("m1"), AB_INVALID_EVENT, "/type", "run must start with RUN_STARTED");
    OK(t, RS);
    assert_int_equal(ab_lifecycle_state(t->lc), AB_RUN_ACTIVE);
    BAD(t, RS, AB_INVALID_EVENT, "/type", "nested RUN_STARTED");
    OK(t, RF);
    assert_int_equal(ab_lifecycle_state(t->lc), AB_RUN_FINISHED);
    BAD(t, TS("m1"), AB_RUN_TERMINAL, "/type", "only one late RUN_ERROR");
    BAD(t, RS, AB_RUN_TERMINAL, "/type", NULL);
    BAD(t, RF, AB_RUN_TERMINAL, "/type", NULL);
    OK(t, RE); /* late failure */
    assert_int_equal(ab_lifecycle_state(t->lc), AB_RUN_ERRORED);
    BAD(t, RE, AB_RUN_TERMINAL, "/type", "already ended with RUN_ERROR");
    lt_free(t);

    t = lt_new(NULL); /* error before start */
    OK(t, RE);
    assert_int_equal(ab_lifecycle_state(t->lc), AB_RUN_ERRORED);
    BAD(t, RS, AB_RUN_TERMINAL, "/type", "new checker");
    lt_free(t);

    t = started(); /* RUN_ERROR abandons open items */
    OK(t, TS("m1"));
    OK(t, SS("s"));
    OK(t, RE);
    assert_int_equal(ab_lifecycle_state(t->lc), AB_RUN_ERRORED);
    BAD(t, TE("m1"), AB_RUN_TERMINAL, "/type", NULL);
    lt_free(t);
}

static void test_boundary_ids(void **state)
{
    (void)state;
    lt_t *t = started(); /* learned from RUN_STARTED */
    BAD(t, "{'type':'RUN_FINISHED','threadId':'th','runId':'r2'}", AB_INVALID_EVENT, "/runId",
        "does not match");
    BAD(t, "{'type':'RUN_FINISHED','threadId':'other','runId':'r1'}", AB_INVALID_EVENT, "/threadId",
        "does not match");
    OK(t, RF);
    lt_free(t);

    t = lt_new(NULL); /* given at creation */
    ab_lifecycle_destroy(&t->lc);
    assert_int_equal(ab_lifecycle_new(&t->lc, "th", 2, "r1", 2, NULL), AB_OK);
    BAD(t, "{'type':'RUN_STARTED','threadId':'th','runId':'r9','protocolVersion':'1.0'}",
        AB_INVALID_EVENT, "/runId", NULL);
    BAD(t, "{'type':'RUN_STARTED','threadId':'x','runId':'r1','protocolVersion':'1.0'}",
        AB_INVALID_EVENT, "/threadId", NULL);
    OK(t, RS);
    BAD(t, "{'type':'RUN_FINISHED','threadId':'th','runId':'r2'}", AB_INVALID_EVENT, "/runId",
        NULL);
    OK(t, RF);
    lt_free(t);
}

/* ---- triads --------------------------------------------------------------- */

static void test_text_triad(void **state)
{
    (void)state;
    lt_t *t = started();
    BAD(t, TC("m1"), AB_INVALID_EVENT, "/messageId", "text message m1 is not open");
    BAD(t, TE("m1"), AB_INVALID_EVENT, "/messageId", "is not open");
    OK(t, TS("m1"));
    BAD(t, TS("m1"), AB_INVALID_EVENT, "/messageId", "text message m1 is already open");
    OK(t, TC("m1"));
    OK(t, TS("m2")); /* interleaving */
    OK(t, TE("m1"));
    BAD(t, TC("m1"), AB_INVALID_EVENT, "/messageId", "is not open");
    BAD(t, RF, AB_INVALID_EVENT, "/type", "text message m2 is still open at RUN_FINISHED");
    OK(t, TE("m2"));
    assert_true(ab_lifecycle_memory(t->lc) > sizeof(ab_lifecycle_t) + 4);
    OK(t, RF);
    /* A finished run keeps only the struct and its ids ("th", "r1"). */
    assert_int_equal(ab_lifecycle_memory(t->lc), sizeof(ab_lifecycle_t) + 4);
    lt_free(t);
}

static void test_tool_triad(void **state)
{
    (void)state;
    lt_t *t = started();
    BAD(t, CA("t1"), AB_INVALID_EVENT, "/toolCallId", "tool call t1 is not open");
    OK(t, CS("t1"));
    BAD(t, CS("t1"), AB_INVALID_EVENT, "/toolCallId", "tool call t1 is already open");
    OK(t, CS("t2"));
    OK(t, CA("t1"));
    OK(t, CA("t2"));
    BAD(t, CR("t1"), AB_INVALID_EVENT, "/toolCallId", "TOOL_CALL_RESULT before TOOL_CALL_END");
    OK(t, CE("t2"));
    OK(t, CR("t2"));
    OK(t, CR("old")); /* a call from an earlier run: allowed */
    BAD(t, RF, AB_INVALID_EVENT, "/type", "tool call t1 is still open at RUN_FINISHED");
    OK(t, CE("t1"));
    BAD(t, CE("t1"), AB_INVALID_EVENT, "/toolCallId", "is not open");
    OK(t, RF);
    lt_free(t);
}

static void test_reasoning(void **state)
{
    (void)state;
    lt_t *t = started();
    BAD(t, "{'type':'REASONING_END','messageId':'r1'}", AB_INVALID_EVENT, "/messageId",
        "reasoning span r1 is not open");
    OK(t, "{'type':'REASONING_START','messageId':'r1'}");
    BAD(t, "{'type':'REASONING_START','messageId':'r1'}", AB_INVALID_EVENT, "/messageId",
        "reasoning span r1 is already open");
    /* Spans and messages are separate namespaces. */
    BAD(t, "{'type':'REASONING_MESSAGE_CONTENT','messageId':'r1','delta':'x'}", AB_INVALID_EVENT,
        "/messageId", "reasoning message r1 is not open");
    OK(t, "{'type':'REASONING_MESSAGE_START','messageId':'r1','role':'reasoning'}");
    BAD(t, "{'type':'REASONING_MESSAGE_START','messageId':'r1','role':'reasoning'}",
        AB_INVALID_EVENT, "/messageId", "already open");
    OK(t, "{'type':'REASONING_MESSAGE_CONTENT','messageId':'r1','delta':'hmm'}");
    OK(t, "{'type':'REASONING_ENCRYPTED_VALUE','subtype':'message','entityId':'r1',"
          "'encryptedValue':'zz'}");
    BAD(t, RF, AB_INVALID_EVENT, "/type", "reasoning span r1 is still open");
    OK(t, "{'type':'REASONING_END','messageId':'r1'}");
    BAD(t, RF, AB_INVALID_EVENT, "/type", "reasoning message r1 is still open");
    OK(t, "{'type':'REASONING_MESSAGE_END','messageId':'r1'}");
    OK(t, "{'type':'REASONING_START','messageId':'r1'}"); /* a closed span may open again */
    OK(t, "{'type':'REASONING_END','messageId':'r1'}");
    OK(t, RF);
    lt_free(t);
}

static void test_reopen(void **state)
{
    (void)state;
    lt_t *t = started();
    OK(t, "{'type':'TEXT_MESSAGE_START','messageId':'m1','role':'user','name':'ann'}");
    OK(t, TE("m1"));
    BAD(t, "{'type':'TEXT_MESSAGE_START','messageId':'m1','name':'ann'}", AB_INVALID_EVENT, "/role",
        "role is assistant");
    BAD(t, "{'type':'TEXT_MESSAGE_START','messageId':'m1','role':'user','name':'bob'}",
        AB_INVALID_EVENT, "/name", NULL);
    BAD(t, "{'type':'TEXT_MESSAGE_START','messageId':'m1','role':'user'}", AB_INVALID_EVENT,
        "/name", NULL);
    BAD(t,
        "{'type':'TEXT_MESSAGE_START','messageId':'m1','role':'user','name':'ann',"
        "'subagentRunId':'sa'}",
        AB_INVALID_EVENT, "/subagentRunId", "belongs to the parent agent");
    OK(t, "{'type':'TEXT_MESSAGE_START','messageId':'m1','role':'user','name':'ann'}");
    OK(t, TE("m1"));
    OK(t, "{'type':'TOOL_CALL_START','toolCallId':'t1','toolCallName':'f','parentMessageId':'m1'}");
    OK(t, CE("t1"));
    BAD(t, "{'type':'TOOL_CALL_START','toolCallId':'t1','toolCallName':'g','parentMessageId':'m1'}",
        AB_INVALID_EVENT, "/toolCallName", NULL);
    BAD(t, CS("t1"), AB_INVALID_EVENT, "/parentMessageId", NULL);
    OK(t, "{'type':'TOOL_CALL_START','toolCallId':'t1','toolCallName':'f','parentMessageId':'m1'}");
    OK(t, CA("t1"));
    OK(t, CE("t1"));
    OK(t, RF);
    lt_free(t);
}

/* ---- chunks --------------------------------------------------------------- */

static void test_text_chunks(void **state)
{
    (void)state;
    lt_t *t = started();
    BAD(t, TXCH(",'delta':'a'"), AB_INVALID_EVENT, "/messageId", "must carry messageId");
    OK(t, TXCH(",'messageId':'m1','role':'user','delta':'a'"));
    OK(t, TXCH(",'delta':'b'"));
    OK(t, TXCH(",'messageId':'m1','role':'user'"));
    BAD(t, TXCH(",'role':'assistant','delta':'c'"), AB_INVALID_EVENT, "/role", "conflicts");
    BAD(t, TXCH(",'messageId':'m1','name':'x'"), AB_INVALID_EVENT, "/name", NULL);
    BAD(t, TC("m1"), AB_INVALID_EVENT, "/messageId", "mixes triad and chunk forms");
    BAD(t, TS("m1"), AB_INVALID_EVENT, "/messageId", "mixes");
    OK(t, "{'type':'RAW','event':{}}"); /* RAW does not end the stream */
    OK(t, "{'type':'ACTIVITY_SNAPSHOT','messageId':'a1','activityType':'x','content':{}}");
    OK(t, TXCH(",'delta':'d'"));
    OK(t, TXCH(",'messageId':'m2','delta':'e'"));   /* another id ends m1 */
    OK(t, TXCH(",'messageId':'m1','role':'user'")); /* reopens m1, ends m2 */
    OK(t, SS("s"));                                 /* a step in the lane ends m1 */
    BAD(t, TXCH(",'delta':'f'"), AB_INVALID_EVENT, "/messageId", "no text message chunk stream");
    OK(t, TS("m3"));
    BAD(t, TXCH(",'messageId':'m3'"), AB_INVALID_EVENT, "/messageId", "mixes");
    OK(t, TE("m3"));
    OK(t, SF("s"));
    OK(t, TXCH(",'messageId':'m4'"));
    OK(t, RF); /* ends m4 */
    lt_free(t);
}

static void test_tool_chunks(void **state)
{
    (void)state;
    lt_t *t = started();
    BAD(t, TLCH(",'toolCallId':'t1','delta':'{'"), AB_INVALID_EVENT, "/toolCallName",
        "must carry toolCallName");
    BAD(t, TLCH(",'delta':'{'"), AB_INVALID_EVENT, "/toolCallId", "toolCallId and toolCallName");
    OK(t, TXCH(",'messageId':'m1'"));
    OK(t, TLCH(",'toolCallId':'t1','toolCallName':'f','parentMessageId':'m1','delta':'{'"));
    OK(t, TLCH(",'delta':'}'"));
    BAD(t, TLCH(",'toolCallName':'g'"), AB_INVALID_EVENT, "/toolCallName", "conflicts");
    BAD(t, TLCH(",'toolCallId':'t1','parentMessageId':'m9'"), AB_INVALID_EVENT, "/parentMessageId",
        NULL);
    BAD(t, CE("t1"), AB_INVALID_EVENT, "/toolCallId", "mixes");
    OK(t, TLCH(",'toolCallId':'t2','toolCallName':'g'")); /* ends t1 */
    OK(t, CR("t2"));                                      /* ends t2, answers it */
    OK(t, "{'type':'REASONING_MESSAGE_CHUNK','messageId':'rm','delta':'x'}");
    OK(t, "{'type':'REASONING_MESSAGE_CHUNK','delta':'y'}");
    OK(t, "{'type':'CUSTOM','name':'acme:x','value':null}"); /* ends rm */
    BAD(t, "{'type':'REASONING_MESSAGE_CHUNK','delta':'z'}", AB_INVALID_EVENT, "/messageId", NULL);
    OK(t, TLCH(",'toolCallId':'t3','toolCallName':'h'"));
    OK(t, "{'type':'MESSAGES_SNAPSHOT','messages':[]}"); /* ends every lane */
    BAD(t, TLCH(",'delta':'x'"), AB_INVALID_EVENT, "/toolCallId", NULL);
    OK(t, "{'type':'RUN_FINISHED','threadId':'th','runId':'r1','outcome':{'type':'success',"
          "'pendingToolCallIds':['t1','t3']}}");
    lt_free(t);
}

static void test_chunk_lanes(void **state)
{
    (void)state;
    lt_t *t = started();
    OK(t, SUBS("a"));
    OK(t, SUBS("b"));
    OK(t, TXCH(",'messageId':'ma','subagentRunId':'a'"));
    OK(t, TXCH(",'delta':'x'")); /* the only open text stream */
    OK(t, TXCH(",'messageId':'mb','subagentRunId':'b'"));
    BAD(t, TXCH(",'delta':'x'"), AB_INVALID_EVENT, "/subagentRunId", "ambiguous");
    OK(t, TXCH(",'delta':'x','subagentRunId':'a'"));
    BAD(t, TXCH(",'messageId':'ma','subagentRunId':'b'"), AB_INVALID_EVENT, "/subagentRunId",
        "belongs to subagent a");
    OK(t, TXCH(",'messageId':'mp'")); /* parent lane */
    OK(t, TXCH(",'delta':'x'"));      /* the parent's stream wins */
    OK(t, SS("s"));                   /* ends the parent's stream only */
    OK(t, TXCH(",'messageId':'mb','delta':'still open'"));
    OK(t, "{'type':'STEP_STARTED','stepName':'s','subagentRunId':'a'}"); /* ends ma */
    BAD(t, TXCH(",'delta':'x','subagentRunId':'a'"), AB_INVALID_EVENT, "/messageId", NULL);
    OK(t, TXCH(",'delta':'x'")); /* mb, the only one left */
    OK(t, SUBF("b"));            /* ends b's lane */
    BAD(t, TXCH(",'delta':'x'"), AB_INVALID_EVENT, "/messageId", NULL);
    OK(t, "{'type':'STEP_FINISHED','stepName':'s','subagentRunId':'a'}");
    OK(t, SF("s"));
    OK(t, "{'type':'SUBAGENT_ERROR','subagentRunId':'a','message':'failed'}");
    OK(t, RF);
    lt_free(t);
}

/* ---- steps, subagents, attribution ------------------------------------- */

static void test_steps(void **state)
{
    (void)state;
    lt_t *t = started();
    BAD(t, SF("s"), AB_INVALID_EVENT, "/stepName", "step s of the parent agent is not open");
    OK(t, SS("s"));
    BAD(t, SS("s"), AB_INVALID_EVENT, "/stepName", "already open");
    OK(t, "{'type':'STEP_STARTED','stepName':'s','subagentRunId':'x'}"); /* per owner */
    OK(t, SF("s"));
    BAD(t, SF("s"), AB_INVALID_EVENT, "/stepName", NULL);
    BAD(t, RF, AB_INVALID_EVENT, "/type", "step s of subagent x is still open");
    OK(t, "{'type':'STEP_FINISHED','stepName':'s','subagentRunId':'x'}");
    OK(t, RF);
    lt_free(t);
}

static void test_subagents(void **state)
{
    (void)state;
    lt_t *t = started();
    BAD(t, SUBF("a"), AB_INVALID_EVENT, "/subagentRunId", "never announced");
    BAD(t, "{'type':'SUBAGENT_ERROR','subagentRunId':'a','message':'x'}", AB_INVALID_EVENT,
        "/subagentRunId", "never announced");
    BAD(t, "{'type':'SUBAGENT_STARTED','subagentRunId':'b','name':'n','parentSubagentRunId':'a'}",
        AB_INVALID_EVENT, "/parentSubagentRunId", "not announced");
    OK(t, SUBS("a"));
    BAD(t, SUBS("a"), AB_INVALID_EVENT, "/subagentRunId", "already active");
    OK(t, "{'type':'SUBAGENT_STARTED','subagentRunId':'b','name':'n','parentSubagentRunId':'a'}");
    OK(t, "{'type':'STATE_DELTA','delta':[],'subagentRunId':'u'}"); /* unannounced: legal */
    BAD(t, SUBS("u"), AB_INVALID_EVENT, "/subagentRunId", "announced after events attributed");
    BAD(t, "{'type':'SUBAGENT_STARTED','subagentRunId':'c','name':'n','parentSubagentRunId':'u'}",
        AB_INVALID_EVENT, "/parentSubagentRunId", NULL);
    BAD(t, SUBF("u"), AB_INVALID_EVENT, "/subagentRunId", "never announced");
    OK(t, SUBF("a"));
    BAD(t, SUBF("a"), AB_INVALID_EVENT, "/subagentRunId", "already finished");
    BAD(t, SUBS("a"), AB_INVALID_EVENT, "/subagentRunId", "new id");
    OK(t, "{'type':'SUBAGENT_STARTED','subagentRunId':'c','name':'n','parentSubagentRunId':'a'}");
    OK(t, SUBF("c"));
    BAD(t, RF, AB_INVALID_EVENT, "/type", "subagent b is still open");
    OK(t, "{'type':'SUBAGENT_FINISHED','subagentRunId':'b','outcome':{'type':'suspended'}}");
    OK(t, RF);
    lt_free(t);
}

static void test_attribution(void **state)
{
    (void)state;
    lt_t *t = started();
    OK(t, SUBS("a"));
    OK(t, "{'type':'TEXT_MESSAGE_START','messageId':'m1','subagentRunId':'a'}");
    OK(t, TC("m1")); /* untagged continuation: fine */
    BAD(t, "{'type':'TEXT_MESSAGE_CONTENT','messageId':'m1','delta':'x','subagentRunId':'b'}",
        AB_INVALID_EVENT, "/subagentRunId", "m1 belongs to subagent a");
    BAD(t,
        "{'type':'TOOL_CALL_START','toolCallId':'t1','toolCallName':'f','parentMessageId':'m1',"
        "'subagentRunId':'b'}",
        AB_INVALID_EVENT, "/subagentRunId", "parent message m1 belongs to subagent a");
    /* Untagged, it inherits m1's owner: a tagged continuation from b is wrong. */
    OK(t, "{'type':'TOOL_CALL_START','toolCallId':'t1','toolCallName':'f','parentMessageId':'m1'}");
    BAD(t, "{'type':'TOOL_CALL_END','toolCallId':'t1','subagentRunId':'b'}", AB_INVALID_EVENT,
        "/subagentRunId", NULL);
    OK(t, "{'type':'TOOL_CALL_END','toolCallId':'t1','subagentRunId':'a'}");
    OK(t, "{'type':'REASONING_START','messageId':'s1','subagentRunId':'a'}");
    BAD(t, "{'type':'REASONING_END','messageId':'s1','subagentRunId':'b'}", AB_INVALID_EVENT,
        "/subagentRunId", NULL);
    OK(t, "{'type':'REASONING_END','messageId':'s1'}");
    OK(t, TE("m1"));
    OK(t, SUBF("a"));
    OK(t, RF);
    lt_free(t);
}

/* ---- activity, outcomes --------------------------------------------------- */

#define ACTS(id, x)                                                                                \
    "{'type':'ACTIVITY_SNAPSHOT','messageId':'" id "','activityType':'t','content':{}" x "}"
#define ACTD(id, x)                                                                                \
    "{'type':'ACTIVITY_DELTA','messageId':'" id "','activityType':'t','patch':[]" x "}"

static void test_activity(void **state)
{
    (void)state;
    lt_t *t = started();
    BAD(t, ACTD("a1", ""), AB_INVALID_EVENT, "/messageId", "needs a baseline");
    OK(t, ACTS("a1", ",'subagentRunId':'s'"));
    OK(t, ACTD("a1", ""));
    OK(t, ACTD("a1", ",'subagentRunId':'s'"));
    BAD(t, ACTD("a1", ",'subagentRunId':'z'"), AB_INVALID_EVENT, "/subagentRunId", NULL);
    BAD(t, ACTS("a1", ",'replace':false,'subagentRunId':'z'"), AB_INVALID_EVENT, "/subagentRunId",
        NULL);
    OK(t, ACTS("a1", ",'replace':false"));
    OK(t, ACTS("a1", ",'subagentRunId':'z'")); /* a replacing snapshot re-mints the owner */
    OK(t, ACTD("a1", ",'subagentRunId':'z'"));
    BAD(t, ACTD("a1", ",'subagentRunId':'s'"), AB_INVALID_EVENT, "/subagentRunId", NULL);
    OK(t, RF);
    lt_free(t);
}

#define MSNAP(msgs) "{'type':'MESSAGES_SNAPSHOT','messages':[" msgs "]}"
#define AMSG(id, x) "{'id':'" id "','role':'activity','activityType':'t','content':{}" x "}"
#define UMSG(id)    "{'id':'" id "','role':'user','content':'hi'}"

/* A baseline callback standing in for the thread: holds "old" only, fails for "io". */
typedef struct bl {
    unsigned calls;
    char last[16];
} bl_t;

static ab_status_t thread_holds(void *ud, ab_str_t id, ab_error_t *err)
{
    bl_t *b = ud;
    b->calls++;
    snprintf(b->last, sizeof(b->last), "%.*s", (int)id.len, id.ptr);
    if (id.len == 2 && memcmp(id.ptr, "io", 2) == 0)
        return ab_error_set(err, AB_IO, NULL, "store unreadable");
    return id.len == 3 && memcmp(id.ptr, "old", 3) == 0 ? AB_OK : AB_NOT_FOUND;
}

/* R20 across runs: the callback is asked only for ids the run does not hold. */
static void test_activity_thread_baseline(void **state)
{
    (void)state;
    lt_t *t = started();
    bl_t b = {0};
    ab_lifecycle_set_baseline(t->lc, thread_holds, &b);
    OK(t, ACTD("old", ",'subagentRunId':'s'")); /* the thread's: accepted, owner unknown */
    assert_int_equal(b.calls, 1);
    assert_string_equal(b.last, "old");
    OK(t, ACTD("old", ",'subagentRunId':'z'")); /* nothing was created for it in this run */
    assert_int_equal(b.calls, 2);
    BAD(t, ACTD("new", ""), AB_INVALID_EVENT, "/messageId", "of this thread holds");
    BAD(t, ACTD("io", ""), AB_IO, NULL, "store unreadable");
    OK(t, ACTS("a1", ""));
    OK(t, ACTD("a1", "")); /* the run's own baseline: not asked */
    assert_int_equal(b.calls, 4);
    OK(t, MSNAP(AMSG("a2", "")));
    BAD(t, ACTD("a1", ""), AB_INVALID_EVENT, "/messageId", "needs a baseline"); /* asked, no */
    assert_int_equal(b.calls, 5);
    ab_lifecycle_set_baseline(t->lc, NULL, &b); /* removed: per run again */
    BAD(t, ACTD("old", ""), AB_INVALID_EVENT, "/messageId", "of this run holds");
    assert_int_equal(b.calls, 5);
    OK(t, RF);
    lt_free(t);
}

/* R20 with MESSAGES_SNAPSHOT: an activity message it carries is a baseline;
 * one carrying activity messages is the complete set; one without keeps them. */
static void test_activity_messages_snapshot(void **state)
{
    (void)state;
    lt_t *t = started();
    OK(t, ACTS("a1", ""));
    OK(t, MSNAP(UMSG("u1"))); /* no activity messages: a1 stays known */
    OK(t, ACTD("a1", ""));
    OK(t, MSNAP(UMSG("u1") "," AMSG("a2", "") "," AMSG("a3", ",'subagentRunId':'s'")));
    OK(t, ACTD("a2", ""));                     /* the snapshot's a2 is a baseline */
    OK(t, ACTD("a3", ",'subagentRunId':'s'")); /* owned as the message says */
    BAD(t, ACTD("a3", ",'subagentRunId':'z'"), AB_INVALID_EVENT, "/subagentRunId", "belongs to");
    BAD(t, ACTD("a1", ""), AB_INVALID_EVENT, "/messageId", "needs a baseline"); /* dropped */
    BAD(t, ACTD("u1", ""), AB_INVALID_EVENT, "/messageId", "needs a baseline"); /* not activity */
    OK(t, MSNAP(AMSG("a2", "") "," AMSG("a2", ""))); /* the same id twice: one item */
    OK(t, ACTD("a2", ""));
    BAD(t, ACTD("a3", ""), AB_INVALID_EVENT, "/messageId", "needs a baseline");
    OK(t, TXCH(",'messageId':'m1','delta':'x'"));
    OK(t, MSNAP(AMSG("a4", ""))); /* ends the chunk stream of m1 */
    BAD(t, TXCH(",'delta':'y'"), AB_INVALID_EVENT, "/messageId", NULL);
    OK(t, RF);
    lt_free(t);

    /* limits: a rejected snapshot changes nothing (bad_ compares the checker) */
    ab_lifecycle_limits_t l = {4, 4, 2};
    t = lt_new(&l);
    OK(t, RS);
    OK(t, TS("m1"));
    OK(t, ACTS("a1", ""));
    BAD(t, MSNAP(AMSG("a2", "") "," AMSG("a3", "")), AB_TOO_LARGE, "/messages", "max_ids is 2");
    OK(t, MSNAP(AMSG("a2", ""))); /* replaces a1: still two ids */
    BAD(t, ACTD("a1", ""), AB_INVALID_EVENT, "/messageId", "needs a baseline");
    char json[1024], id[300];
    memset(id, 'k', sizeof(id) - 1);
    id[sizeof(id) - 1] = '\0';
    snprintf(json, sizeof(json),
             MSNAP("{'id':'%s','role':'activity','activityType':'t','content':{}}"), id);
    BAD(t, json, AB_TOO_LARGE, "/messages/0/id", NULL);
    OK(t, ACTD("a2", ""));
    OK(t, TE("m1"));
    OK(t, RF);
    lt_free(t);
}

#define RF_OUT(o) "{'type':'RUN_FINISHED','threadId':'th','runId':'r1','outcome':" o "}"
#define INTR(id)  "{'id':'" id "','reason':'confirm'}"

static void test_interrupts(void **state)
{
    (void)state;
    lt_t *t = started();
    BAD(t,
        RF_OUT("{'type':'interrupt','interrupts':[" INTR("i1") "," INTR("i2") "," INTR("i1") "]}"),
        AB_INVALID_EVENT, "/outcome/interrupts/2/id", "i1 is not unique");
    BAD(t,
        RF_OUT("{'type':'interrupt','interrupts':[" INTR("x") "," INTR("b") "," INTR("b") "," INTR(
            "x") "]}"),
        AB_INVALID_EVENT, "/outcome/interrupts/2/id", "first used by /outcome/interrupts/1");
    assert_int_equal(ab_lifecycle_state(t->lc), AB_RUN_ACTIVE);
    OK(t, RF_OUT("{'type':'interrupt','interrupts':[" INTR("i1") "," INTR("i2") "]}"));
    assert_int_equal(ab_lifecycle_state(t->lc), AB_RUN_FINISHED);
    lt_free(t);
}

static void test_pending_tool_calls(void **state)
{
    (void)state;
    lt_t *t = started();
    OK(t, CS("t1"));
    OK(t, CE("t1"));
    OK(t, CS("t2"));
    OK(t, CE("t2"));
    OK(t, CR("t2"));
    OK(t, CS("t3"));
    OK(t, CE("t3"));
    const char *f = "/outcome/pendingToolCallIds";
    BAD(t, RF_OUT("{'type':'success','pendingToolCallIds':[]}"), AB_INVALID_EVENT, f,
        "tool call t1 is missing");
    BAD(t, RF_OUT("{'type':'success','pendingToolCallIds':['t3','t1']}"), AB_INVALID_EVENT, f,
        "in call order");
    BAD(t, RF_OUT("{'type':'success','pendingToolCallIds':['t1','t2','t3']}"), AB_INVALID_EVENT, f,
        NULL);
    BAD(t, RF_OUT("{'type':'success','pendingToolCallIds':['t1','t3','t4']}"), AB_INVALID_EVENT, f,
        "item 2 is not an unanswered tool call");
    BAD(t, RF_OUT("{'type':'success','pendingToolCallIds':['t1']}"), AB_INVALID_EVENT, f, NULL);
    OK(t, RF_OUT("{'type':'success','pendingToolCallIds':['t1','t3']}"));
    lt_free(t);

    t = started(); /* absent list: nothing checked; cancelled: nothing checked */
    OK(t, CS("t1"));
    OK(t, CE("t1"));
    OK(t, RF_OUT("{'type':'cancelled'}"));
    lt_free(t);
}

/* ---- state unchanged, limits, memory ---------------------------------- */

/* Two checkers see the same stream; one also sees rejected events. */
static void test_rejected_event_changes_nothing(void **state)
{
    (void)state;
    static const char *const stream[] = {RS,
                                         SUBS("a"),
                                         TS("m1"),
                                         TXCH(",'messageId':'c1','subagentRunId':'a'"),
                                         CS("t1"),
                                         CE("t1"),
                                         SS("s"),
                                         ACTS("x", ""),
                                         CS("t2"),
                                         CE("t2"),
                                         CR("t2"),
                                         TE("m1"),
                                         SF("s"),
                                         SUBF("a"),
                                         RF_OUT("{'type':'success','pendingToolCallIds':['t1']}")};
    /* Each is wrong at every point from the fourth event on. */
    static const char *const bad[] = {
        RS,
        TC("zz"),
        TLCH(",'delta':'q'"),
        CA("zz"),
        SF("nope"),
        SUBS("a"),
        SUBF("q"),
        ACTD("nope", ""),
        "{'type':'RUN_FINISHED','threadId':'th','runId':'rX'}",
        RF_OUT("{'type':'success','pendingToolCallIds':['t9']}"),
        RF_OUT("{'type':'interrupt','interrupts':[" INTR("d") "," INTR("d") "]}"),
        "{'type':'TEXT_MESSAGE_START','messageId':'m1','role':'user'}",
        TLCH(",'toolCallId':'t1'")};
    lt_t *a = lt_new(NULL), *b = lt_new(NULL);
    size_t nbad = sizeof(bad) / sizeof(bad[0]);
    for (size_t i = 0; i < sizeof(stream) / sizeof(stream[0]); i++) {
        for (size_t k = 0; i >= 3 && k < nbad; k++) {
            fp_t before = fingerprint(a->lc);
            if (feed(a, bad[k]) == AB_OK)
                fail_msg("%s accepted before event %zu", bad[k], i);
            fp_t after = fingerprint(a->lc);
            if (memcmp(&before, &after, sizeof(before)) != 0)
                fail_msg("rejected %s before event %zu changed the checker", bad[k], i);
        }
        ab_status_t sa = feed(a, stream[i]), sb = feed(b, stream[i]);
        if (sa != AB_OK || sb != AB_OK)
            fail_msg("event %zu: a=%s b=%s: %s / %s", i, ab_status_name(sa), ab_status_name(sb),
                     a->err.message, b->err.message);
        assert_int_equal(ab_lifecycle_memory(a->lc), ab_lifecycle_memory(b->lc));
    }
    assert_int_equal(ab_lifecycle_state(a->lc), AB_RUN_FINISHED);
    lt_free(a);
    lt_free(b);
}

static void test_limits(void **state)
{
    (void)state;
    ab_lifecycle_limits_t l = {2, 2, 3};
    lt_t *t = lt_new(&l);
    OK(t, RS);
    OK(t, TS("m1"));
    OK(t, SS("s"));
    BAD(t, TS("m2"), AB_TOO_LARGE, "/messageId", "max_open is 2");
    BAD(t, "{'type':'REASONING_START','messageId':'x'}", AB_TOO_LARGE, "/messageId", NULL);
    OK(t, TE("m1"));
    OK(t, TS("m2")); /* room again */
    OK(t, TE("m2"));
    OK(t, SF("s"));
    OK(t, CS("t1"));
    OK(t, CE("t1"));
    OK(t, CS("t2"));
    OK(t, CE("t2"));
    BAD(t, CS("t3"), AB_TOO_LARGE, "/toolCallId", "max_tool_calls is 2");
    OK(t, CS("t1")); /* reopening is not a new call */
    OK(t, CE("t1"));
    OK(t, "{'type':'REASONING_MESSAGE_CHUNK','messageId':'rm'}"); /* third id */
    BAD(t, TS("m3"), AB_TOO_LARGE, "/messageId", "max_ids is 3");
    BAD(t, "{'type':'CUSTOM','name':'n','value':1,'subagentRunId':'s'}", AB_TOO_LARGE,
        "/subagentRunId", "max_ids");
    OK(t, "{'type':'CUSTOM','name':'n','value':1}"); /* ends rm's stream */
    char json[1024];
    char id[300];
    memset(id, 'k', sizeof(id) - 1);
    id[sizeof(id) - 1] = '\0';
    snprintf(json, sizeof(json), "{'type':'STEP_STARTED','stepName':'%s'}", id);
    BAD(t, json, AB_TOO_LARGE, "/stepName", "at most 256 bytes");
    OK(t, RF);
    lt_free(t);
}

/* The documented bound, docs/LIFECYCLE.md "Memory bound". */
static size_t memory_bound(const ab_lifecycle_limits_t *l)
{
    size_t n = (size_t)l->max_open + l->max_tool_calls + l->max_ids;
    size_t buckets = AB__LC_MIN_BUCKETS;
    while (buckets < n)
        buckets *= 2;
    return sizeof(ab_lifecycle_t) + 2 * AB__LC_STR_MAX + buckets * sizeof(void *) +
           n * (sizeof(ab__lc_item_t) + 4 * AB__LC_STR_MAX);
}

static const char *long_id(char *buf, char c, unsigned i)
{
    char head[16];
    int n = snprintf(head, sizeof(head), "%c%u", c, i);
    memset(buf, c, 256);
    memcpy(buf, head, (size_t)n);
    buf[256] = '\0';
    return buf;
}

static void test_memory_bound(void **state)
{
    (void)state;
    ab_lifecycle_limits_t l = {20, 30, 40};
    lt_t *t = lt_new(&l);
    size_t empty = ab_lifecycle_memory(t->lc);
    OK(t, RS);
    char json[2048], a[257], b[257], c[257], m0[257];
    long_id(c, 'o', 0); /* one owner: a subagent with a 256-byte id */
    snprintf(json, sizeof(json), "{'type':'SUBAGENT_STARTED','subagentRunId':'%s','name':'n'}", c);
    OK(t, json);
    size_t prev = ab_lifecycle_memory(t->lc);
    assert_true(prev > empty);
    for (unsigned i = 0; i < l.max_ids - 1; i++) { /* text messages: ids */
        snprintf(json, sizeof(json),
                 "{'type':'TEXT_MESSAGE_CHUNK','messageId':'%s','name':'%s','subagentRunId':'%s'}",
                 long_id(a, 'm', i), long_id(b, 'n', i), c);
        OK(t, json);
        assert_true(ab_lifecycle_memory(t->lc) > prev);
        prev = ab_lifecycle_memory(t->lc);
    }
    for (unsigned i = 0; i < l.max_tool_calls; i++) { /* tool calls */
        snprintf(json, sizeof(json),
                 "{'type':'TOOL_CALL_CHUNK','toolCallId':'%s','toolCallName':'%s',"
                 "'parentMessageId':'%s','subagentRunId':'%s'}",
                 long_id(a, 't', i), long_id(b, 'f', i), long_id(m0, 'm', 0), c);
        OK(t, json);
    }
    for (unsigned i = 0; i < l.max_open - 1; i++) { /* steps (the first ends the chunk) */
        snprintf(json, sizeof(json), "{'type':'STEP_STARTED','stepName':'%s','subagentRunId':'%s'}",
                 long_id(a, 's', i), c);
        OK(t, json);
    }
    assert_int_equal(t->lc->n_open, l.max_open);
    assert_int_equal(t->lc->n_calls, l.max_tool_calls);
    assert_int_equal(t->lc->n_ids, l.max_ids);
    size_t full = ab_lifecycle_memory(t->lc);
    print_message("memory: empty %zu, full %zu, bound %zu\n", empty, full, memory_bound(&l));
    assert_true(full <= memory_bound(&l));
    assert_true(full > memory_bound(&l) / 2); /* the bound is not wildly loose */
    snprintf(json, sizeof(json), "{'type':'STEP_STARTED','stepName':'x','subagentRunId':'%s'}", c);
    BAD(t, json, AB_TOO_LARGE, "/stepName", NULL);
    OK(t, RE);
    assert_int_equal(ab_lifecycle_memory(t->lc), empty + 4); /* struct + "th" + "r1" */
    lt_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api),
        cmocka_unit_test(test_run_states),
        cmocka_unit_test(test_boundary_ids),
        cmocka_unit_test(test_text_triad),
        cmocka_unit_test(test_tool_triad),
        cmocka_unit_test(test_reasoning),
        cmocka_unit_test(test_reopen),
        cmocka_unit_test(test_text_chunks),
        cmocka_unit_test(test_tool_chunks),
        cmocka_unit_test(test_chunk_lanes),
        cmocka_unit_test(test_steps),
        cmocka_unit_test(test_subagents),
        cmocka_unit_test(test_attribution),
        cmocka_unit_test(test_activity),
        cmocka_unit_test(test_activity_messages_snapshot),
        cmocka_unit_test(test_activity_thread_baseline),
        cmocka_unit_test(test_interrupts),
        cmocka_unit_test(test_pending_tool_calls),
        cmocka_unit_test(test_rejected_event_changes_nothing),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_memory_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

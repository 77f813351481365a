/*
 * test_agui.c - ab_agui_validate(): type names, the envelope and the fields
 * of each of the 31 event types, table driven.
 *
 * Each row is {mode, expected status, path, message part, event JSON}. JSON
 * is written with ' for " to stay readable. Modes: 'S' strict only, 'L'
 * lenient only, 'B' both, 'U' unknown material (strict: AB_INVALID_EVENT at
 * path; lenient: AB_OK with a warning at path). A row expecting AB_OK with
 * no path also asserts that no warning was emitted.
 *
 * Nested types (outcomes, input, messages, content, patches, usage) and the
 * info extraction are in test_agui_nested.c.
 */
#include "agentbus/agui.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agui_cases.h"

#define RUN(tbl) run_cases(tbl, sizeof(tbl) / sizeof(tbl[0]))

/* ---- type names ---------------------------------------------------------- */

static void test_type_names(void **state)
{
    (void)state;
    for (int t = 1; t < AB_AGUI_TYPE_COUNT_; t++) {
        const char *name = ab_agui_type_name((ab_agui_type_t)t);
        assert_int_equal(ab_agui_type_from(name, strlen(name)), t);
    }
    assert_int_equal(AB_AGUI_TYPE_COUNT_ - 1, 31);
    assert_string_equal(ab_agui_type_name(AB_AGUI_RUN_STARTED), "RUN_STARTED");
    assert_string_equal(ab_agui_type_name(AB_AGUI_SUBAGENT_ERROR), "SUBAGENT_ERROR");
    assert_string_equal(ab_agui_type_name(AB_AGUI_UNKNOWN), "UNKNOWN");
    assert_string_equal(ab_agui_type_name((ab_agui_type_t)999), "UNKNOWN");
    static const char *const bad[] = {"",
                                      "RUN",
                                      "run_started",
                                      "RUN_STARTEDX",
                                      "RUN_START",
                                      "THINKING_START",
                                      "UNKNOWN",
                                      "RAW ",
                                      "CUSTOM_",
                                      "REASONING_MESSAGE_CONTENTS"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(ab_agui_type_from(bad[i], strlen(bad[i])), AB_AGUI_UNKNOWN);
    assert_int_equal(ab_agui_type_from(NULL, 0), AB_AGUI_UNKNOWN);
    /* the length counts, not a NUL terminator */
    assert_int_equal(ab_agui_type_from("RAWX", 3), AB_AGUI_RAW);
    assert_int_equal(ab_agui_type_from("RUN_ERROR\0", 10), AB_AGUI_UNKNOWN);
}

/* ---- envelope and base fields --------------------------------------------- */

static const vcase_t envelope_cases[] = {
    {'B', BAD, "", "expected object, got array", "[]"},
    {'B', BAD, "", "expected object, got string", "'RAW'"},
    {'B', BAD, "/type", "missing required field", "{'event':1}"},
    {'B', BAD, "/type", "expected string, got integer", "{'type':5}"},
    {'B', BAD, "/type", "expected string, got null", "{'type':null}"},
    {'U', BAD, "/type", "unknown event type FROBNICATE", "{'type':'FROBNICATE','x':1}"},
    {'U', BAD, "/type", "unknown event type", "{'type':'THINKING_START'}"},
    {'U', BAD, "/foo", "unknown field", "{'type':'RAW','event':1,'foo':2}"},
    {'U', BAD, "/a~1b~0c", "unknown field", "{'type':'RAW','event':1,'a/b~c':2}"},
    /* timestamp: integer within +-(2^53-1); a float with a zero fraction is one (D1) */
    {'B', OK, NULL, NULL, "{'type':'RAW','event':1,'timestamp':1700000000000}"},
    {'B', OK, NULL, NULL, "{'type':'RAW','event':1,'timestamp':9007199254740991}"},
    {'B', OK, NULL, NULL, "{'type':'RAW','event':1,'timestamp':-9007199254740991}"},
    {'B', OK, NULL, NULL, "{'type':'RAW','event':1,'timestamp':0}"},
    {'B', OK, NULL, NULL, "{'type':'RAW','event':1,'timestamp':1767225600000.0}"},
    {'B', OK, NULL, NULL, "{'type':'RAW','event':1,'timestamp':1.0}"},
    {'B', OK, NULL, NULL, "{'type':'RAW','event':1,'timestamp':-0.0}"},
    {'B', OK, NULL, NULL, "{'type':'RAW','event':1,'timestamp':1.7672256e12}"},
    {'B', OK, NULL, NULL, "{'type':'RAW','event':1,'timestamp':-9007199254740991.0}"},
    {'B', BAD, "/timestamp", "expected integer, got number",
     "{'type':'RAW','event':1,'timestamp':1.5}"},
    {'B', BAD, "/timestamp", "expected integer, got number",
     "{'type':'RAW','event':1,'timestamp':1767225600000.5}"},
    {'B', BAD, "/timestamp", "expected integer, got number",
     "{'type':'RAW','event':1,'timestamp':1e-300}"},
    {'B', BAD, "/timestamp", "2^53", "{'type':'RAW','event':1,'timestamp':9007199254740992}"},
    {'B', BAD, "/timestamp", "2^53", "{'type':'RAW','event':1,'timestamp':-9007199254740992}"},
    {'B', BAD, "/timestamp", "2^53", "{'type':'RAW','event':1,'timestamp':9007199254740992.0}"},
    {'B', BAD, "/timestamp", "2^53", "{'type':'RAW','event':1,'timestamp':-1e300}"},
    {'B', BAD, "/timestamp", "2^53", "{'type':'RAW','event':1,'timestamp':18446744073709551615}"},
    {'B', BAD, "/timestamp", "2^53", "{'type':'RAW','event':1,'timestamp':-9223372036854775809}"},
    {'B', BAD, "/timestamp", "expected integer, got string",
     "{'type':'RAW','event':1,'timestamp':'now'}"},
    {'B', BAD, "/timestamp", "null is not allowed for an absent optional field",
     "{'type':'RAW','event':1,'timestamp':null}"},
    /* rawEvent: any JSON except null */
    {'B', OK, NULL, NULL, "{'type':'RAW','event':1,'rawEvent':{'a':[1,null]}}"},
    {'B', OK, NULL, NULL, "{'type':'RAW','event':1,'rawEvent':false}"},
    {'B', BAD, "/rawEvent", "null is not allowed", "{'type':'RAW','event':1,'rawEvent':null}"},
    /* metadata: object, open by key, null values are data */
    {'B', OK, NULL, NULL, "{'type':'RAW','event':1,'metadata':{'ag-ui':{'x':1},'k':null}}"},
    {'B', OK, NULL, NULL, "{'type':'RAW','event':1,'metadata':{}}"},
    {'B', BAD, "/metadata", "expected object, got array", "{'type':'RAW','event':1,'metadata':[]}"},
    {'B', BAD, "/metadata", "null is not allowed", "{'type':'RAW','event':1,'metadata':null}"},
    /* subagentRunId: string, attributable events only */
    {'B', OK, NULL, NULL, "{'type':'RAW','event':1,'subagentRunId':'sa'}"},
    {'B', BAD, "/subagentRunId", "expected string, got integer",
     "{'type':'RAW','event':1,'subagentRunId':7}"},
    {'B', BAD, "/subagentRunId", "null is not allowed",
     "{'type':'TEXT_MESSAGE_END','messageId':'m','subagentRunId':null}"},
    {'U', BAD, "/subagentRunId", "unknown field",
     "{'type':'RUN_STARTED','threadId':'t','runId':'r','protocolVersion':'1.0',"
     "'subagentRunId':'s'}"},
    {'U', BAD, "/subagentRunId", "unknown field",
     "{'type':'RUN_FINISHED','threadId':'t','runId':'r','subagentRunId':'s'}"},
    {'U', BAD, "/subagentRunId", "unknown field",
     "{'type':'RUN_ERROR','message':'m','subagentRunId':'s'}"},
    {'U', BAD, "/subagentRunId", "unknown field",
     "{'type':'MESSAGES_SNAPSHOT','messages':[],'subagentRunId':'s'}"},
    /* key order does not matter, "type" may come last */
    {'B', OK, NULL, NULL, "{'messageId':'m','delta':'x','type':'TEXT_MESSAGE_CONTENT'}"},
};

static void test_envelope(void **state)
{
    (void)state;
    RUN(envelope_cases);
}

/* ---- runs and steps -------------------------------------------------------- */

#define RS "{'type':'RUN_STARTED','threadId':'t1','runId':'r1'"
#define RF "{'type':'RUN_FINISHED','threadId':'t1','runId':'r1'"

static const vcase_t run_cases_tbl[] = {
    /* RUN_STARTED */
    {'B', OK, NULL, NULL, RS ",'protocolVersion':'1.0'}"},
    {'B', OK, NULL, NULL,
     RS ",'protocolVersion':'1.0','parentRunId':'r0','timestamp':1,'rawEvent':{'e':1},"
        "'metadata':{'k':'v'},'input':{'threadId':'t1','runId':'r1','messages':[]}}"},
    {'S', BAD, "/protocolVersion", "a 1.0 producer must declare it", RS "}"},
    {'L', OK, NULL, NULL, RS "}"},
    {'B', BAD, "/protocolVersion", "expected string, got number", RS ",'protocolVersion':1.0}"},
    {'B', BAD, "/protocolVersion", "null is not allowed", RS ",'protocolVersion':null}"},
    {'B', BAD, "/threadId", "missing required field",
     "{'type':'RUN_STARTED','runId':'r','protocolVersion':'1.0'}"},
    {'B', BAD, "/runId", "expected string, got integer",
     "{'type':'RUN_STARTED','threadId':'t','runId':5,'protocolVersion':'1.0'}"},
    {'B', BAD, "/parentRunId", "null is not allowed for an absent optional field",
     RS ",'protocolVersion':'1.0','parentRunId':null}"},
    {'B', BAD, "/input", "expected object, got array", RS ",'protocolVersion':'1.0','input':[]}"},
    /* RUN_FINISHED */
    {'B', OK, NULL, NULL, RF "}"},
    {'B', OK, NULL, NULL,
     RF ",'outcome':{'type':'success','pendingToolCallIds':['c1','c2']},'result':{'a':1},"
        "'usage':[{'provider':'openai','model':'m','inputTokens':10,'outputTokens':5,"
        "'totalTokens':15,'reasoningTokens':1,'cachedInputTokens':2,"
        "'cacheWriteInputTokens':3}],'timestamp':5,'rawEvent':'x','metadata':{}}"},
    {'B', OK, NULL, NULL, RF ",'result':0}"},
    {'B', BAD, "/threadId", "missing required field", "{'type':'RUN_FINISHED','runId':'r'}"},
    {'B', BAD, "/runId", "missing required field", "{'type':'RUN_FINISHED','threadId':'t'}"},
    {'B', BAD, "/result", "null is not allowed", RF ",'result':null}"},
    {'B', BAD, "/outcome", "expected object, got string", RF ",'outcome':'success'}"},
    {'B', BAD, "/outcome", "expected object, got array", RF ",'outcome':[]}"},
    {'B', BAD, "/outcome", "null is not allowed", RF ",'outcome':null}"},
    {'B', BAD, "/usage", "expected array, got object", RF ",'usage':{}}"},
    /* RUN_ERROR */
    {'B', OK, NULL, NULL, "{'type':'RUN_ERROR','message':'boom'}"},
    {'B', OK, NULL, NULL,
     "{'type':'RUN_ERROR','message':'boom','code':'rate_limit','usage':[],'timestamp':1,"
     "'rawEvent':[],'metadata':{}}"},
    {'B', BAD, "/message", "missing required field", "{'type':'RUN_ERROR','code':'x'}"},
    {'B', BAD, "/code", "expected string, got integer",
     "{'type':'RUN_ERROR','message':'m','code':500}"},
    /* STEP_STARTED / STEP_FINISHED */
    {'B', OK, NULL, NULL, "{'type':'STEP_STARTED','stepName':'plan'}"},
    {'B', OK, NULL, NULL,
     "{'type':'STEP_STARTED','stepName':'plan','subagentRunId':'s','timestamp':2,"
     "'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/stepName", "missing required field", "{'type':'STEP_STARTED'}"},
    {'B', BAD, "/stepName", "expected string, got null", "{'type':'STEP_STARTED','stepName':null}"},
    {'B', OK, NULL, NULL, "{'type':'STEP_FINISHED','stepName':'plan'}"},
    {'B', OK, NULL, NULL,
     "{'type':'STEP_FINISHED','stepName':'plan','subagentRunId':'s','metadata':{'a':1}}"},
    {'B', BAD, "/stepName", "expected string, got boolean",
     "{'type':'STEP_FINISHED','stepName':true}"},
};

static void test_runs_and_steps(void **state)
{
    (void)state;
    RUN(run_cases_tbl);
}

/* ---- text messages ---------------------------------------------------------- */

static const vcase_t text_cases[] = {
    /* TEXT_MESSAGE_START */
    {'B', OK, NULL, NULL, "{'type':'TEXT_MESSAGE_START','messageId':'m1'}"},
    {'B', OK, NULL, NULL,
     "{'type':'TEXT_MESSAGE_START','messageId':'m1','role':'user','name':'bob',"
     "'subagentRunId':'s','timestamp':1,'rawEvent':{},'metadata':{}}"},
    {'B', OK, NULL, NULL, "{'type':'TEXT_MESSAGE_START','messageId':'m1','role':'developer'}"},
    {'B', OK, NULL, NULL, "{'type':'TEXT_MESSAGE_START','messageId':'m1','role':'system'}"},
    {'B', OK, NULL, NULL, "{'type':'TEXT_MESSAGE_START','messageId':'m1','role':'assistant'}"},
    {'B', BAD, "/role", "role must be one of developer, system, assistant, user",
     "{'type':'TEXT_MESSAGE_START','messageId':'m1','role':'tool'}"},
    {'B', BAD, "/role", "role must be one of",
     "{'type':'TEXT_MESSAGE_START','messageId':'m1',"
     "'role':'Assistant'}"},
    {'B', BAD, "/role", "null is not allowed for an absent optional field",
     "{'type':'TEXT_MESSAGE_START','messageId':'m1','role':null}"},
    {'B', BAD, "/messageId", "missing required field", "{'type':'TEXT_MESSAGE_START'}"},
    {'B', BAD, "/messageId", "expected string, got integer",
     "{'type':'TEXT_MESSAGE_START','messageId':42}"},
    {'B', BAD, "/name", "expected string, got array",
     "{'type':'TEXT_MESSAGE_START','messageId':'m','name':[]}"},
    /* TEXT_MESSAGE_CONTENT */
    {'B', OK, NULL, NULL, "{'type':'TEXT_MESSAGE_CONTENT','messageId':'m1','delta':'Hi'}"},
    {'B', OK, NULL, NULL, "{'type':'TEXT_MESSAGE_CONTENT','messageId':'m1','delta':''}"},
    {'B', OK, NULL, NULL,
     "{'type':'TEXT_MESSAGE_CONTENT','messageId':'m1','delta':'x','subagentRunId':'s',"
     "'timestamp':3,'rawEvent':0,'metadata':{}}"},
    {'B', BAD, "/delta", "missing required field",
     "{'type':'TEXT_MESSAGE_CONTENT','messageId':'m1'}"},
    {'B', BAD, "/delta", "expected string, got integer",
     "{'type':'TEXT_MESSAGE_CONTENT','messageId':'m1','delta':5}"},
    /* TEXT_MESSAGE_END */
    {'B', OK, NULL, NULL, "{'type':'TEXT_MESSAGE_END','messageId':'m1'}"},
    {'B', OK, NULL, NULL,
     "{'type':'TEXT_MESSAGE_END','messageId':'m1','subagentRunId':'s','timestamp':1,"
     "'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/messageId", "missing required field", "{'type':'TEXT_MESSAGE_END'}"},
    {'U', BAD, "/delta", "unknown field", "{'type':'TEXT_MESSAGE_END','messageId':'m','delta':''}"},
    /* TEXT_MESSAGE_CHUNK: every field optional */
    {'B', OK, NULL, NULL, "{'type':'TEXT_MESSAGE_CHUNK'}"},
    {'B', OK, NULL, NULL,
     "{'type':'TEXT_MESSAGE_CHUNK','messageId':'m','role':'assistant','delta':'d','name':'n',"
     "'subagentRunId':'s','timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/role", "role must be one of", "{'type':'TEXT_MESSAGE_CHUNK','role':'robot'}"},
    {'B', BAD, "/delta", "null is not allowed", "{'type':'TEXT_MESSAGE_CHUNK','delta':null}"},
    {'B', BAD, "/messageId", "expected string, got object",
     "{'type':'TEXT_MESSAGE_CHUNK','messageId':{}}"},
};

static void test_text_messages(void **state)
{
    (void)state;
    RUN(text_cases);
}

/* ---- tool calls ------------------------------------------------------------- */

static const vcase_t tool_cases[] = {
    /* TOOL_CALL_START */
    {'B', OK, NULL, NULL, "{'type':'TOOL_CALL_START','toolCallId':'c1','toolCallName':'search'}"},
    {'B', OK, NULL, NULL,
     "{'type':'TOOL_CALL_START','toolCallId':'c1','toolCallName':'search',"
     "'parentMessageId':'m1','subagentRunId':'s','timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/toolCallName", "missing required field",
     "{'type':'TOOL_CALL_START','toolCallId':'c1'}"},
    {'B', BAD, "/toolCallId", "missing required field",
     "{'type':'TOOL_CALL_START','toolCallName':'x'}"},
    {'B', BAD, "/parentMessageId", "null is not allowed",
     "{'type':'TOOL_CALL_START','toolCallId':'c','toolCallName':'x','parentMessageId':null}"},
    /* TOOL_CALL_ARGS */
    {'B', OK, NULL, NULL, "{'type':'TOOL_CALL_ARGS','toolCallId':'c1','delta':'{\\'q\\':1}'}"},
    {'B', OK, NULL, NULL,
     "{'type':'TOOL_CALL_ARGS','toolCallId':'c1','delta':'','subagentRunId':'s',"
     "'timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/delta", "missing required field", "{'type':'TOOL_CALL_ARGS','toolCallId':'c1'}"},
    {'B', BAD, "/toolCallId", "expected string, got array",
     "{'type':'TOOL_CALL_ARGS','toolCallId':[],'delta':''}"},
    /* TOOL_CALL_END */
    {'B', OK, NULL, NULL, "{'type':'TOOL_CALL_END','toolCallId':'c1'}"},
    {'B', OK, NULL, NULL,
     "{'type':'TOOL_CALL_END','toolCallId':'c1','subagentRunId':'s','timestamp':1,"
     "'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/toolCallId", "missing required field", "{'type':'TOOL_CALL_END'}"},
    /* TOOL_CALL_CHUNK */
    {'B', OK, NULL, NULL, "{'type':'TOOL_CALL_CHUNK'}"},
    {'B', OK, NULL, NULL,
     "{'type':'TOOL_CALL_CHUNK','toolCallId':'c','toolCallName':'n','parentMessageId':'m',"
     "'delta':'d','subagentRunId':'s','timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/toolCallName", "expected string, got integer",
     "{'type':'TOOL_CALL_CHUNK','toolCallName':1}"},
    /* TOOL_CALL_RESULT */
    {'B', OK, NULL, NULL,
     "{'type':'TOOL_CALL_RESULT','messageId':'m2','toolCallId':'c1','content':'42'}"},
    {'B', OK, NULL, NULL,
     "{'type':'TOOL_CALL_RESULT','messageId':'m2','toolCallId':'c1','role':'tool',"
     "'content':[{'type':'text','text':'ok'},{'type':'image','source':{'type':'url',"
     "'value':'https://x/y.png'}}],'subagentRunId':'s','timestamp':1,'rawEvent':1,"
     "'metadata':{}}"},
    {'B', OK, NULL, NULL,
     "{'type':'TOOL_CALL_RESULT','messageId':'m2','toolCallId':'c1','content':[]}"},
    {'B', BAD, "/role", "role must be \"tool\"",
     "{'type':'TOOL_CALL_RESULT','messageId':'m','toolCallId':'c','content':'',"
     "'role':'assistant'}"},
    {'B', BAD, "/content", "missing required field",
     "{'type':'TOOL_CALL_RESULT','messageId':'m','toolCallId':'c'}"},
    {'B', BAD, "/content", "expected string or array, got integer",
     "{'type':'TOOL_CALL_RESULT','messageId':'m','toolCallId':'c','content':5}"},
    {'B', BAD, "/content", "expected string or array, got null",
     "{'type':'TOOL_CALL_RESULT','messageId':'m','toolCallId':'c','content':null}"},
    {'B', BAD, "/content/0/text", "missing required field",
     "{'type':'TOOL_CALL_RESULT','messageId':'m','toolCallId':'c','content':[{'type':'text'}]}"},
    {'B', BAD, "/messageId", "missing required field",
     "{'type':'TOOL_CALL_RESULT','toolCallId':'c','content':''}"},
};

static void test_tool_calls(void **state)
{
    (void)state;
    RUN(tool_cases);
}

/* ---- state, messages snapshot, activity ------------------------------------- */

static const vcase_t state_cases[] = {
    /* STATE_SNAPSHOT: snapshot required, may be any JSON including null */
    {'B', OK, NULL, NULL, "{'type':'STATE_SNAPSHOT','snapshot':{'count':1}}"},
    {'B', OK, NULL, NULL, "{'type':'STATE_SNAPSHOT','snapshot':null}"},
    {'B', OK, NULL, NULL, "{'type':'STATE_SNAPSHOT','snapshot':[1,2]}"},
    {'B', OK, NULL, NULL, "{'type':'STATE_SNAPSHOT','snapshot':'s'}"},
    {'B', OK, NULL, NULL,
     "{'type':'STATE_SNAPSHOT','snapshot':{'max':18446744073709551615,'min':-9223372036854775808,"
     "'past':-9223372036854775809,'big':123456789012345678901234567890,'at':1767225600000.0}}"},
    {'B', OK, NULL, NULL,
     "{'type':'STATE_SNAPSHOT','snapshot':{'unknown':{'deep':null}},'subagentRunId':'s',"
     "'timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/snapshot", "missing required field", "{'type':'STATE_SNAPSHOT'}"},
    /* STATE_DELTA */
    {'B', OK, NULL, NULL, "{'type':'STATE_DELTA','delta':[]}"},
    {'B', OK, NULL, NULL,
     "{'type':'STATE_DELTA','delta':[{'op':'add','path':'/a','value':1},{'op':'remove',"
     "'path':'/b'},{'op':'replace','path':'','value':null},{'op':'move','from':'/c','path':'/d'},"
     "{'op':'copy','from':'/e~0~1','path':'/f/0'},{'op':'test','path':'/g','value':'x'}],"
     "'subagentRunId':'s','timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/delta", "expected array, got object", "{'type':'STATE_DELTA','delta':{}}"},
    {'B', BAD, "/delta", "missing required field", "{'type':'STATE_DELTA'}"},
    {'B', BAD, "/delta", "expected array, got null", "{'type':'STATE_DELTA','delta':null}"},
    /* MESSAGES_SNAPSHOT */
    {'B', OK, NULL, NULL, "{'type':'MESSAGES_SNAPSHOT','messages':[]}"},
    {'B', OK, NULL, NULL,
     "{'type':'MESSAGES_SNAPSHOT','messages':[{'id':'1','role':'user','content':'hi'},"
     "{'id':'2','role':'assistant','content':'hello'}],'timestamp':1,'rawEvent':1,"
     "'metadata':{}}"},
    {'B', BAD, "/messages", "missing required field", "{'type':'MESSAGES_SNAPSHOT'}"},
    {'B', BAD, "/messages", "expected array, got string",
     "{'type':'MESSAGES_SNAPSHOT','messages':'x'}"},
    {'B', BAD, "/messages/1/id", "missing required field",
     "{'type':'MESSAGES_SNAPSHOT','messages':[{'id':'1','role':'user','content':'hi'},"
     "{'role':'user','content':'x'}]}"},
    /* ACTIVITY_SNAPSHOT */
    {'B', OK, NULL, NULL,
     "{'type':'ACTIVITY_SNAPSHOT','messageId':'a1','activityType':'PLAN','content':{}}"},
    {'B', OK, NULL, NULL,
     "{'type':'ACTIVITY_SNAPSHOT','messageId':'a1','activityType':'PLAN','content':{'s':[1]},"
     "'replace':false,'subagentRunId':'s','timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/content", "expected object, got string",
     "{'type':'ACTIVITY_SNAPSHOT','messageId':'a','activityType':'P','content':'x'}"},
    {'B', BAD, "/content", "expected object, got null",
     "{'type':'ACTIVITY_SNAPSHOT','messageId':'a','activityType':'P','content':null}"},
    {'B', BAD, "/replace", "expected boolean, got string",
     "{'type':'ACTIVITY_SNAPSHOT','messageId':'a','activityType':'P','content':{},"
     "'replace':'yes'}"},
    {'B', BAD, "/activityType", "missing required field",
     "{'type':'ACTIVITY_SNAPSHOT','messageId':'a','content':{}}"},
    /* ACTIVITY_DELTA */
    {'B', OK, NULL, NULL,
     "{'type':'ACTIVITY_DELTA','messageId':'a1','activityType':'PLAN','patch':[]}"},
    {'B', OK, NULL, NULL,
     "{'type':'ACTIVITY_DELTA','messageId':'a1','activityType':'PLAN','patch':[{'op':'add',"
     "'path':'/s/-','value':{}}],'subagentRunId':'s','timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/patch", "missing required field",
     "{'type':'ACTIVITY_DELTA','messageId':'a','activityType':'P'}"},
    {'B', BAD, "/patch/0/path", "not a JSON pointer",
     "{'type':'ACTIVITY_DELTA','messageId':'a','activityType':'P','patch':[{'op':'remove',"
     "'path':'s'}]}"},
};

static void test_state_and_activity(void **state)
{
    (void)state;
    RUN(state_cases);
}

/* ---- passthrough and reasoning ---------------------------------------------- */

static const vcase_t reasoning_cases[] = {
    /* RAW */
    {'B', OK, NULL, NULL, "{'type':'RAW','event':null}"},
    {'B', OK, NULL, NULL,
     "{'type':'RAW','event':{'id':'evt_1'},'source':'openai','subagentRunId':'s',"
     "'timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/event", "missing required field", "{'type':'RAW','source':'x'}"},
    {'B', BAD, "/source", "null is not allowed", "{'type':'RAW','event':1,'source':null}"},
    /* CUSTOM */
    {'B', OK, NULL, NULL, "{'type':'CUSTOM','name':'acme:ping','value':null}"},
    {'B', OK, NULL, NULL, "{'type':'CUSTOM','name':'acme:id','value':18446744073709551615}"},
    {'B', OK, NULL, NULL,
     "{'type':'CUSTOM','name':'acme:ids','value':[9223372036854775808,{'n':1e308}]}"},
    {'B', OK, NULL, NULL,
     "{'type':'CUSTOM','name':'acme:ping','value':{'n':[1,2,null]},'subagentRunId':'s',"
     "'timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/value", "missing required field", "{'type':'CUSTOM','name':'x'}"},
    {'B', BAD, "/name", "expected string, got integer", "{'type':'CUSTOM','name':1,'value':1}"},
    /* REASONING_START / END */
    {'B', OK, NULL, NULL, "{'type':'REASONING_START','messageId':'r1'}"},
    {'B', OK, NULL, NULL,
     "{'type':'REASONING_START','messageId':'r1','subagentRunId':'s','timestamp':1,"
     "'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/messageId", "missing required field", "{'type':'REASONING_START'}"},
    {'B', OK, NULL, NULL, "{'type':'REASONING_END','messageId':'r1'}"},
    {'B', OK, NULL, NULL,
     "{'type':'REASONING_END','messageId':'r1','subagentRunId':'s','metadata':{}}"},
    {'B', BAD, "/messageId", "expected string, got null",
     "{'type':'REASONING_END','messageId':null}"},
    /* REASONING_MESSAGE_START: role "reasoning" required */
    {'B', OK, NULL, NULL, "{'type':'REASONING_MESSAGE_START','messageId':'r1','role':'reasoning'}"},
    {'B', OK, NULL, NULL,
     "{'type':'REASONING_MESSAGE_START','messageId':'r1','role':'reasoning',"
     "'subagentRunId':'s','timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/role", "missing required field",
     "{'type':'REASONING_MESSAGE_START','messageId':'r1'}"},
    {'B', BAD, "/role", "role must be \"reasoning\"",
     "{'type':'REASONING_MESSAGE_START','messageId':'r1','role':'assistant'}"},
    /* REASONING_MESSAGE_CONTENT / END / CHUNK */
    {'B', OK, NULL, NULL, "{'type':'REASONING_MESSAGE_CONTENT','messageId':'r1','delta':'hm'}"},
    {'B', OK, NULL, NULL,
     "{'type':'REASONING_MESSAGE_CONTENT','messageId':'r1','delta':'','subagentRunId':'s',"
     "'timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/delta", "missing required field",
     "{'type':'REASONING_MESSAGE_CONTENT','messageId':'r1'}"},
    {'B', OK, NULL, NULL, "{'type':'REASONING_MESSAGE_END','messageId':'r1'}"},
    {'B', OK, NULL, NULL,
     "{'type':'REASONING_MESSAGE_END','messageId':'r1','subagentRunId':'s','metadata':{}}"},
    {'B', BAD, "/messageId", "missing required field", "{'type':'REASONING_MESSAGE_END'}"},
    {'B', OK, NULL, NULL, "{'type':'REASONING_MESSAGE_CHUNK'}"},
    {'B', OK, NULL, NULL,
     "{'type':'REASONING_MESSAGE_CHUNK','messageId':'r','delta':'d','subagentRunId':'s',"
     "'timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/delta", "expected string, got integer",
     "{'type':'REASONING_MESSAGE_CHUNK','delta':1}"},
    {'U', BAD, "/role", "unknown field",
     "{'type':'REASONING_MESSAGE_CHUNK','messageId':'r','role':'reasoning'}"},
    /* REASONING_ENCRYPTED_VALUE */
    {'B', OK, NULL, NULL,
     "{'type':'REASONING_ENCRYPTED_VALUE','subtype':'tool-call','entityId':'c1',"
     "'encryptedValue':'b64'}"},
    {'B', OK, NULL, NULL,
     "{'type':'REASONING_ENCRYPTED_VALUE','subtype':'message','entityId':'m1',"
     "'encryptedValue':'b64','subagentRunId':'s','timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'U', BAD, "/subtype", "unknown subtype \"blob\"",
     "{'type':'REASONING_ENCRYPTED_VALUE','subtype':'blob','entityId':'c1',"
     "'encryptedValue':'x'}"},
    {'B', BAD, "/subtype", "expected string, got integer",
     "{'type':'REASONING_ENCRYPTED_VALUE','subtype':1,'entityId':'c1','encryptedValue':'x'}"},
    {'B', BAD, "/entityId", "missing required field",
     "{'type':'REASONING_ENCRYPTED_VALUE','subtype':'message','encryptedValue':'x'}"},
    {'U', BAD, "/encryptedValueType", "unknown field",
     "{'type':'REASONING_ENCRYPTED_VALUE','subtype':'message','entityId':'m',"
     "'encryptedValue':'x','encryptedValueType':'sig'}"},
};

static void test_passthrough_and_reasoning(void **state)
{
    (void)state;
    RUN(reasoning_cases);
}

/* ---- subagents ---------------------------------------------------------------- */

static const vcase_t subagent_cases[] = {
    /* SUBAGENT_STARTED */
    {'B', OK, NULL, NULL, "{'type':'SUBAGENT_STARTED','subagentRunId':'s1','name':'researcher'}"},
    {'B', OK, NULL, NULL,
     "{'type':'SUBAGENT_STARTED','subagentRunId':'s2','name':'r','description':'d',"
     "'parentSubagentRunId':'s1','parentToolCallId':'c1','parentMessageId':'m1',"
     "'timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/subagentRunId", "missing required field",
     "{'type':'SUBAGENT_STARTED','name':'r'}"},
    {'B', BAD, "/name", "missing required field",
     "{'type':'SUBAGENT_STARTED','subagentRunId':'s1'}"},
    {'B', BAD, "/subagentRunId", "expected string, got null",
     "{'type':'SUBAGENT_STARTED','subagentRunId':null,'name':'r'}"},
    {'B', BAD, "/parentSubagentRunId", "null is not allowed",
     "{'type':'SUBAGENT_STARTED','subagentRunId':'s','name':'r','parentSubagentRunId':null}"},
    /* SUBAGENT_FINISHED */
    {'B', OK, NULL, NULL, "{'type':'SUBAGENT_FINISHED','subagentRunId':'s1'}"},
    {'B', OK, NULL, NULL,
     "{'type':'SUBAGENT_FINISHED','subagentRunId':'s1','result':{'r':1},"
     "'outcome':{'type':'suspended','interruptIds':['i1']},'timestamp':1,'rawEvent':1,"
     "'metadata':{}}"},
    {'B', OK, NULL, NULL,
     "{'type':'SUBAGENT_FINISHED','subagentRunId':'s1','outcome':{'type':'success'}}"},
    {'B', OK, NULL, NULL,
     "{'type':'SUBAGENT_FINISHED','subagentRunId':'s1','outcome':{'type':'suspended',"
     "'interruptIds':[]}}"},
    {'B', BAD, "/subagentRunId", "missing required field", "{'type':'SUBAGENT_FINISHED'}"},
    {'B', BAD, "/result", "null is not allowed",
     "{'type':'SUBAGENT_FINISHED','subagentRunId':'s','result':null}"},
    {'U', BAD, "/outcome/type", "unknown outcome type \"paused\"",
     "{'type':'SUBAGENT_FINISHED','subagentRunId':'s','outcome':{'type':'paused'}}"},
    {'U', BAD, "/outcome/type", "unknown outcome type \"interrupt\"",
     "{'type':'SUBAGENT_FINISHED','subagentRunId':'s','outcome':{'type':'interrupt',"
     "'interrupts':[{'id':'i','reason':'r'}]}}"},
    {'B', BAD, "/outcome/interruptIds/0", "expected string, got integer",
     "{'type':'SUBAGENT_FINISHED','subagentRunId':'s','outcome':{'type':'suspended',"
     "'interruptIds':[1]}}"},
    {'U', BAD, "/outcome/interruptIds", "unknown field",
     "{'type':'SUBAGENT_FINISHED','subagentRunId':'s','outcome':{'type':'success',"
     "'interruptIds':[]}}"},
    /* SUBAGENT_ERROR */
    {'B', OK, NULL, NULL, "{'type':'SUBAGENT_ERROR','subagentRunId':'s1','message':'failed'}"},
    {'B', OK, NULL, NULL,
     "{'type':'SUBAGENT_ERROR','subagentRunId':'s1','message':'failed','code':'E1',"
     "'timestamp':1,'rawEvent':1,'metadata':{}}"},
    {'B', BAD, "/message", "missing required field",
     "{'type':'SUBAGENT_ERROR','subagentRunId':'s1'}"},
    {'B', BAD, "/subagentRunId", "missing required field",
     "{'type':'SUBAGENT_ERROR','message':'m'}"},
};

static void test_subagents(void **state)
{
    (void)state;
    RUN(subagent_cases);
}

/* Every one of the 31 types has at least one valid row and one invalid row. */
static void mark(const vcase_t *cases, size_t n, int ok[], int bad[])
{
    tu_ctx_t ctx;
    tu_ctx_init(&ctx);
    for (size_t i = 0; i < n; i++) {
        const ab_val_t *ev = parse_quoted(&ctx, cases[i].json);
        const ab_val_t *t = ev->type == AB_VAL_MAP ? ab_val_get(ev, "type") : NULL;
        if (!t || t->type != AB_VAL_STR)
            continue;
        ab_agui_type_t ty = ab_agui_type_from(t->u.s, t->len);
        if (cases[i].want == AB_OK && cases[i].mode != 'U')
            ok[ty]++;
        else
            bad[ty]++;
    }
    tu_ctx_free(&ctx);
}

static void test_every_type_covered(void **state)
{
    (void)state;
    int ok[AB_AGUI_TYPE_COUNT_] = {0}, bad[AB_AGUI_TYPE_COUNT_] = {0};
#define MARK(tbl) mark(tbl, sizeof(tbl) / sizeof(tbl[0]), ok, bad)
    MARK(run_cases_tbl);
    MARK(text_cases);
    MARK(tool_cases);
    MARK(state_cases);
    MARK(reasoning_cases);
    MARK(subagent_cases);
    for (int t = 1; t < AB_AGUI_TYPE_COUNT_; t++) {
        if (ok[t] < 2 || bad[t] < 1)
            fail_msg("%s: %d valid and %d invalid rows", ab_agui_type_name((ab_agui_type_t)t),
                     ok[t], bad[t]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_names),
        cmocka_unit_test(test_envelope),
        cmocka_unit_test(test_runs_and_steps),
        cmocka_unit_test(test_text_messages),
        cmocka_unit_test(test_tool_calls),
        cmocka_unit_test(test_state_and_activity),
        cmocka_unit_test(test_passthrough_and_reasoning),
        cmocka_unit_test(test_subagents),
        cmocka_unit_test(test_every_type_covered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_agui_nested.c - ab_agui_validate() on the AG-UI 1.0 nested types
 * (outcomes, interrupts, token usage, RunAgentInput, resume entries, tools,
 * context, messages, tool calls, content parts, sources, JSON Patch) with
 * their full JSON pointer paths, plus the ab_agui_info_t extraction and the
 * API edge cases (NULL err/info/warn, first error wins, info untouched on
 * error).
 *
 * Rows are {mode, expected status, path, message part, event JSON} with '
 * for "; modes as in test_agui.c ('U' = strict error / lenient warning).
 */
#include "agentbus/agui.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agui_cases.h"

#define RUN(tbl) run_cases(tbl, sizeof(tbl) / sizeof(tbl[0]))

/* ---- RunFinishedOutcome and Interrupt ----------------------------------------- */

#define RF  "{'type':'RUN_FINISHED','threadId':'t','runId':'r'"
#define INT "{'type':'interrupt','interrupts':"

static const vcase_t outcome_cases[] = {
    {'B', OK, NULL, NULL, RF ",'outcome':" INT "[{'id':'i1','reason':'tool_call'}]}}"},
    {'B', OK, NULL, NULL,
     RF ",'outcome':" INT "[{'id':'i1','reason':'confirmation','message':'ok?','toolCallId':'c1',"
        "'responseSchema':{'type':'object'},'expiresAt':'2030-01-01T00:00:00Z',"
        "'metadata':{'k':null},'subagentRunId':'s1'},{'id':'i2','reason':'x'}]}}"},
    {'B', OK, NULL, NULL, RF ",'outcome':{'type':'cancelled'}}"},
    {'B', OK, NULL, NULL, RF ",'outcome':{'type':'success'}}"},
    {'B', OK, NULL, NULL, RF ",'outcome':{'type':'success','pendingToolCallIds':[]}}"},
    {'B', BAD, "/outcome/interrupts", "at least one", RF ",'outcome':" INT "[]}}"},
    {'B', BAD, "/outcome/interrupts", "missing required field",
     RF ",'outcome':{'type':'interrupt'}}"},
    {'B', BAD, "/outcome/interrupts/0/id", "missing required field",
     RF ",'outcome':" INT "[{'reason':'r'}]}}"},
    {'B', BAD, "/outcome/interrupts/1/reason", "expected string, got integer",
     RF ",'outcome':" INT "[{'id':'a','reason':'r'},{'id':'b','reason':5}]}}"},
    {'B', BAD, "/outcome/interrupts/0/responseSchema", "expected object, got boolean",
     RF ",'outcome':" INT "[{'id':'a','reason':'r','responseSchema':true}]}}"},
    {'B', BAD, "/outcome/interrupts/0/message", "null is not allowed",
     RF ",'outcome':" INT "[{'id':'a','reason':'r','message':null}]}}"},
    {'B', BAD, "/outcome/interrupts/0/metadata", "expected object, got array",
     RF ",'outcome':" INT "[{'id':'a','reason':'r','metadata':[]}]}}"},
    {'B', BAD, "/outcome/interrupts/0", "expected object, got string",
     RF ",'outcome':" INT "['i1']}}"},
    {'B', BAD, "/outcome/interrupts", "expected array, got object",
     RF ",'outcome':" INT "{'id':'a','reason':'r'}}}"},
    {'U', BAD, "/outcome/interrupts/0/extra", "unknown field",
     RF ",'outcome':" INT "[{'id':'a','reason':'r','extra':1}]}}"},
    {'U', BAD, "/outcome/interrupts", "unknown field",
     RF ",'outcome':{'type':'success','interrupts':[{'id':'a','reason':'r'}]}}"},
    {'U', BAD, "/outcome/result", "unknown field",
     RF ",'outcome':{'type':'cancelled','result':1}}"},
    {'B', BAD, "/outcome/type", "missing required field", RF ",'outcome':{}}"},
    {'B', BAD, "/outcome/type", "expected string, got integer", RF ",'outcome':{'type':1}}"},
    {'U', BAD, "/outcome/type", "unknown outcome type \"paused\"",
     RF ",'outcome':{'type':'paused'}}"},
    {'U', BAD, "/outcome/type", "unknown outcome type \"error\"",
     RF ",'outcome':{'type':'error','message':'x'}}"},
    {'B', BAD, "/outcome/pendingToolCallIds/1", "expected string, got integer",
     RF ",'outcome':{'type':'success','pendingToolCallIds':['a',2]}}"},
    {'B', BAD, "/outcome/pendingToolCallIds", "null is not allowed",
     RF ",'outcome':{'type':'success','pendingToolCallIds':null}}"},
    {'B', BAD, "/outcome/pendingToolCallIds", "expected array, got string",
     RF ",'outcome':{'type':'success','pendingToolCallIds':'a'}}"},
};

static void test_outcomes(void **state)
{
    (void)state;
    RUN(outcome_cases);
}

/* ---- TokenUsage --------------------------------------------------------------- */

static const vcase_t usage_cases[] = {
    {'B', OK, NULL, NULL, RF ",'usage':[{},{'model':'m','cachedInputTokens':9007199254740991}]}"},
    {'B', OK, NULL, NULL, RF ",'usage':[{'inputTokens':0,'outputTokens':0,'totalTokens':0}]}"},
    {'B', BAD, "/usage/0/inputTokens", "from 0 to 2^53-1", RF ",'usage':[{'inputTokens':-1}]}"},
    {'B', BAD, "/usage/1/outputTokens", "from 0 to 2^53-1",
     RF ",'usage':[{},{'outputTokens':-5}]}"},
    {'B', BAD, "/usage/0/totalTokens", "expected integer, got number",
     RF ",'usage':[{'totalTokens':1.5}]}"},
    {'B', OK, NULL, NULL, RF ",'usage':[{'totalTokens':15.0,'inputTokens':-0.0}]}"},
    {'B', BAD, "/usage/0/outputTokens", "from 0 to 2^53-1", RF ",'usage':[{'outputTokens':-1.0}]}"},
    {'B', BAD, "/usage/0/inputTokens", "from 0 to 2^53-1",
     RF ",'usage':[{'inputTokens':9223372036854775808}]}"},
    {'B', BAD, "/usage/0/reasoningTokens", "2^53",
     RF ",'usage':[{'reasoningTokens':9007199254740992}]}"},
    {'B', BAD, "/usage/0/provider", "expected string, got integer",
     RF ",'usage':[{'provider':1}]}"},
    {'B', BAD, "/usage/0/model", "null is not allowed", RF ",'usage':[{'model':null}]}"},
    {'B', BAD, "/usage/0", "expected object, got integer", RF ",'usage':[1]}"},
    {'U', BAD, "/usage/0/cost", "unknown field", RF ",'usage':[{'cost':0.1}]}"},
    {'B', BAD, "/usage/0/cacheWriteInputTokens", "from 0 to 2^53-1",
     "{'type':'RUN_ERROR','message':'m','usage':[{'cacheWriteInputTokens':-1}]}"},
};

static void test_token_usage(void **state)
{
    (void)state;
    RUN(usage_cases);
}

/* ---- RunAgentInput, ResumeEntry, Tool, Context -------------------------------- */

#define RSI "{'type':'RUN_STARTED','threadId':'t','runId':'r','protocolVersion':'1.0','input':"
#define IN  "{'threadId':'t','runId':'r','messages':[]"

static const vcase_t input_cases[] = {
    {'B', OK, NULL, NULL, RSI IN "}}"},
    {'B', OK, NULL, NULL,
     RSI "{'threadId':'t','runId':'r','messages':[{'id':'m1','role':'user','content':'hi'}],"
         "'protocolVersion':'1.0','parentRunId':'p0','state':{'a':1},'tools':[{'name':'search',"
         "'description':'d','parameters':{'type':'object'},'metadata':{}}],'context':[{"
         "'description':'d','value':'v'}],'forwardedProps':{'x':1},'resume':[{'interruptId':'i1',"
         "'status':'resolved','payload':{'approved':true},'metadata':{}}]}}"},
    {'B', OK, NULL, NULL, RSI IN ",'state':null}}"},
    {'B', OK, NULL, NULL, RSI IN ",'state':[1]}}"},
    {'B', OK, NULL, NULL, RSI IN ",'forwardedProps':0,'tools':[],'context':[],'resume':[]}}"},
    {'B', OK, NULL, NULL,
     RSI IN ",'resume':[{'interruptId':'i1','status':'cancelled'}],'tools':[{'name':'n',"
            "'description':'d','parameters':true}]}}"},
    {'B', BAD, "/input/messages", "missing required field", RSI "{'threadId':'t','runId':'r'}}"},
    {'B', BAD, "/input/threadId", "missing required field", RSI "{'runId':'r','messages':[]}}"},
    {'B', BAD, "/input/protocolVersion", "expected string, got integer",
     RSI IN ",'protocolVersion':1}}"},
    {'B', BAD, "/input/forwardedProps", "null is not allowed", RSI IN ",'forwardedProps':null}}"},
    {'B', BAD, "/input/resume/0/status", "status must be one of resolved, cancelled",
     RSI IN ",'resume':[{'interruptId':'i1','status':'approved'}]}}"},
    {'B', BAD, "/input/resume/0/status", "expected string, got null",
     RSI IN ",'resume':[{'interruptId':'i1','status':null}]}}"},
    {'B', BAD, "/input/resume/1/interruptId", "missing required field",
     RSI IN ",'resume':[{'interruptId':'i1','status':'resolved'},{'status':'resolved'}]}}"},
    {'B', BAD, "/input/resume/0/payload", "null is not allowed",
     RSI IN ",'resume':[{'interruptId':'i1','status':'resolved','payload':null}]}}"},
    {'B', BAD, "/input/resume", "expected array, got object",
     RSI IN ",'resume':{'interruptId':'i1','status':'resolved'}}}"},
    {'U', BAD, "/input/resume/0/note", "unknown field",
     RSI IN ",'resume':[{'interruptId':'i1','status':'resolved','note':'x'}]}}"},
    {'B', BAD, "/input/tools/0/description", "missing required field",
     RSI IN ",'tools':[{'name':'x'}]}}"},
    {'B', BAD, "/input/tools/0/parameters", "null is not allowed",
     RSI IN ",'tools':[{'name':'x','description':'d','parameters':null}]}}"},
    {'B', BAD, "/input/tools/0/metadata", "expected object, got string",
     RSI IN ",'tools':[{'name':'x','description':'d','metadata':'m'}]}}"},
    {'B', BAD, "/input/context/0/value", "missing required field",
     RSI IN ",'context':[{'description':'d'}]}}"},
    {'B', BAD, "/input/context/0/value", "expected string, got object",
     RSI IN ",'context':[{'description':'d','value':{}}]}}"},
    {'U', BAD, "/input/extra", "unknown field", RSI IN ",'extra':1}}"},
    {'B', BAD, "/input/messages/0/role", "role must be one of",
     RSI "{'threadId':'t','runId':'r','messages':[{'id':'1','role':'robot','content':''}]}}"},
    /* input identity (strict only): the input echoed is this run's own */
    {'S', BAD, "/input/runId", "input.runId r2 differs from the event's runId r",
     RSI "{'threadId':'t','runId':'r2','messages':[]}}"},
    {'L', OK, NULL, NULL, RSI "{'threadId':'t','runId':'r2','messages':[]}}"},
    {'S', BAD, "/input/threadId", "input.threadId t2 differs from the event's threadId t",
     RSI "{'threadId':'t2','runId':'r2','messages':[]}}"},
    {'S', BAD, "/input/parentRunId", "input.parentRunId p1 differs from the event's parentRunId p0",
     "{'type':'RUN_STARTED','threadId':'t','runId':'r','protocolVersion':'1.0',"
     "'parentRunId':'p0','input':" IN ",'parentRunId':'p1'}}"},
    {'B', OK, NULL, NULL,
     "{'type':'RUN_STARTED','threadId':'t','runId':'r','protocolVersion':'1.0',"
     "'parentRunId':'p0','input':" IN ",'parentRunId':'p0'}}"},
    {'B', OK, NULL, NULL,
     "{'type':'RUN_STARTED','threadId':'t','runId':'r','protocolVersion':'1.0',"
     "'parentRunId':'p0','input':" IN "}}"},
    {'S', BAD, "/input/runId", "differs",
     "{'type':'RUN_STARTED','input':{'threadId':'t','runId':'x','messages':[]},'threadId':'t',"
     "'runId':'r','protocolVersion':'1.0'}"},
};

static void test_run_input(void **state)
{
    (void)state;
    RUN(input_cases);
}

/* ---- Message, ToolCall, ContentPart, PartSource -------------------------------- */

#define MS "{'type':'MESSAGES_SNAPSHOT','messages':["
#define UC MS "{'id':'u','role':'user','content':["

static const vcase_t message_cases[] = {
    {'B', OK, NULL, NULL,
     MS "{'id':'1','role':'developer','content':'c','name':'n','encryptedValue':'e',"
        "'metadata':{},'subagentRunId':'s'},{'id':'2','role':'system','content':'c'},"
        "{'id':'3','role':'assistant','content':'c','toolCalls':[{'id':'tc','type':'function',"
        "'function':{'name':'f','arguments':'{}'},'encryptedValue':'e','metadata':{}}],"
        "'name':'n'},{'id':'4','role':'user','content':[{'type':'text','text':'t','id':'p1',"
        "'metadata':{'a':1}},{'type':'image','source':{'type':'url','value':'http://x',"
        "'mimeType':'image/png'}},{'type':'audio','source':{'type':'data','value':'AAAA',"
        "'mimeType':'audio/wav'}},{'type':'video','source':{'type':'file','value':'file-1',"
        "'provider':'openai','mimeType':'video/mp4'}},{'type':'document','source':{'type':'url',"
        "'value':'u'},'id':'d','metadata':'m'}]},{'id':'5','role':'tool','content':'r',"
        "'toolCallId':'tc','error':'e','encryptedValue':'x'},{'id':'6','role':'activity',"
        "'activityType':'plan','content':{'steps':[]}},{'id':'7','role':'reasoning',"
        "'content':'thinking','encryptedValue':'e'}]}"},
    {'B', OK, NULL, NULL, MS "{'id':'a','role':'assistant'}]}"},
    {'B', OK, NULL, NULL, MS "{'id':'a','role':'assistant','toolCalls':[]}]}"},
    {'B', OK, NULL, NULL, MS "{'id':'t','role':'tool','toolCallId':'c','content':[]}]}"},
    {'B', BAD, "/messages/0/role",
     "role must be one of developer, system, assistant, user, tool, activity, reasoning",
     MS "{'id':'1','role':'robot','content':'x'}]}"},
    {'B', BAD, "/messages/0/role", "missing required field", MS "{'id':'1','content':'x'}]}"},
    {'B', BAD, "/messages/0/role", "expected string, got integer",
     MS "{'id':'1','role':5,'content':'x'}]}"},
    {'B', BAD, "/messages/0/id", "missing required field", MS "{'role':'user','content':'x'}]}"},
    {'B', BAD, "/messages/0/id", "expected string, got null",
     MS "{'id':null,'role':'user','content':'x'}]}"},
    {'B', BAD, "/messages/0", "expected object, got integer", MS "1]}"},
    {'B', BAD, "/messages/0/content", "missing required field",
     MS "{'id':'1','role':'developer'}]}"},
    {'B', BAD, "/messages/0/content", "expected string, got array",
     MS "{'id':'1','role':'system','content':[]}]}"},
    {'B', BAD, "/messages/0/metadata", "expected object, got array",
     MS "{'id':'1','role':'user','content':'x','metadata':[]}]}"},
    {'B', BAD, "/messages/0/subagentRunId", "null is not allowed",
     MS "{'id':'1','role':'user','content':'x','subagentRunId':null}]}"},
    {'U', BAD, "/messages/0/encryptedValueType", "unknown field",
     MS "{'id':'1','role':'user','content':'x','encryptedValueType':'t'}]}"},
    /* tool calls */
    {'B', BAD, "/messages/0/toolCalls/0/type", "type must be \"function\"",
     MS "{'id':'a','role':'assistant','toolCalls':[{'id':'c','type':'other','function':{"
        "'name':'f','arguments':''}}]}]}"},
    {'B', BAD, "/messages/0/toolCalls/0/function/arguments", "missing required field",
     MS "{'id':'a','role':'assistant','toolCalls':[{'id':'c','type':'function','function':{"
        "'name':'f'}}]}]}"},
    {'B', BAD, "/messages/0/toolCalls/0/function", "expected object, got string",
     MS "{'id':'a','role':'assistant','toolCalls':[{'id':'c','type':'function',"
        "'function':'f'}]}]}"},
    {'U', BAD, "/messages/0/toolCalls/0/index", "unknown field",
     MS "{'id':'a','role':'assistant','toolCalls':[{'id':'c','type':'function','function':{"
        "'name':'f','arguments':''},'index':0}]}]}"},
    /* tool, activity, reasoning variants */
    {'B', BAD, "/messages/0/toolCallId", "missing required field",
     MS "{'id':'t','role':'tool','content':'r'}]}"},
    {'U', BAD, "/messages/0/name", "unknown field",
     MS "{'id':'t','role':'tool','content':'r','toolCallId':'c','name':'n'}]}"},
    {'B', BAD, "/messages/0/error", "expected string, got integer",
     MS "{'id':'t','role':'tool','content':'r','toolCallId':'c','error':1}]}"},
    {'B', BAD, "/messages/0/content", "expected object, got string",
     MS "{'id':'a','role':'activity','activityType':'p','content':'x'}]}"},
    {'B', BAD, "/messages/0/activityType", "missing required field",
     MS "{'id':'a','role':'activity','content':{}}]}"},
    {'B', BAD, "/messages/0/content", "missing required field",
     MS "{'id':'r','role':'reasoning'}]}"},
    {'U', BAD, "/messages/0/name", "unknown field",
     MS "{'id':'r','role':'reasoning','content':'c','name':'n'}]}"},
    /* content parts and sources */
    {'B', BAD, "/messages/0/content", "expected string or array, got null",
     MS "{'id':'u','role':'user','content':null}]}"},
    {'B', BAD, "/messages/0/content/0/source/mimeType", "missing required field",
     UC "{'type':'image','source':{'type':'data','value':'AAAA'}}]}]}"},
    {'U', BAD, "/messages/0/content/1/type", "unknown content part type \"hologram\"",
     UC "{'type':'text','text':'t'},{'type':'hologram','data':1}]}]}"},
    {'U', BAD, "/messages/0/content/0/source/type", "unknown source type \"ftp\"",
     UC "{'type':'image','source':{'type':'ftp','value':'x'}}]}]}"},
    {'B', BAD, "/messages/0/content/0/source", "missing required field", UC "{'type':'audio'}]}]}"},
    {'B', BAD, "/messages/0/content/0/source", "expected object, got string",
     UC "{'type':'video','source':'http://x'}]}]}"},
    {'B', BAD, "/messages/0/content/0/source/value", "missing required field",
     UC "{'type':'document','source':{'type':'file'}}]}]}"},
    {'U', BAD, "/messages/0/content/0/source/provider", "unknown field",
     UC "{'type':'image','source':{'type':'url','value':'u','provider':'p'}}]}]}"},
    {'B', BAD, "/messages/0/content/0/metadata", "null is not allowed",
     UC "{'type':'text','text':'t','metadata':null}]}]}"},
    {'B', OK, NULL, NULL, UC "{'type':'text','text':'t','metadata':'any non-null'}]}]}"},
    {'B', BAD, "/messages/0/content/0", "expected object, got string", UC "'text']}]}"},
    {'B', BAD, "/messages/0/content/0/type", "missing required field", UC "{'text':'t'}]}]}"},
    {'U', BAD, "/messages/0/content/0/source", "unknown field",
     UC "{'type':'text','text':'t','source':{}}]}]}"},
};

static void test_messages(void **state)
{
    (void)state;
    RUN(message_cases);
}

/* ---- JSON Patch ---------------------------------------------------------------- */

#define SD "{'type':'STATE_DELTA','delta':["

static const vcase_t patch_cases[] = {
    {'B', OK, NULL, NULL,
     SD "{'op':'remove','path':''},{'op':'remove','path':'/'},{'op':'remove','path':'/a~0b~1c'},"
        "{'op':'remove','path':'/a/0/-'},{'op':'remove','path':'/\u00fc'},"
        "{'op':'remove','path':'//'}]}"},
    {'B', OK, NULL, NULL, SD "{'op':'add','path':'/a','value':null}]}"},
    /* ops are open: extra members are ignored, no warning, not even a bad 'from' */
    {'B', OK, NULL, NULL, SD "{'op':'remove','path':'/a','value':1,'from':'bad'}]}"},
    {'B', OK, NULL, NULL, SD "{'op':'add','path':'/a','value':1,'x-note':'kept'}]}"},
    {'B', BAD, "/delta/0/path", "not a JSON pointer", SD "{'op':'remove','path':'a/b'}]}"},
    {'B', BAD, "/delta/0/path", "not a JSON pointer", SD "{'op':'remove','path':'/a~2'}]}"},
    {'B', BAD, "/delta/0/path", "not a JSON pointer", SD "{'op':'remove','path':'/a~'}]}"},
    {'B', BAD, "/delta/0/path", "not a JSON pointer", SD "{'op':'remove','path':'~0'}]}"},
    {'B', BAD, "/delta/1/path", "not a JSON pointer",
     SD "{'op':'remove','path':'/ok'},{'op':'add','path':'#/a','value':1}]}"},
    {'B', BAD, "/delta/0/from", "missing required field", SD "{'op':'move','path':'/a'}]}"},
    {'B', BAD, "/delta/0/from", "missing required field", SD "{'op':'copy','path':'/a'}]}"},
    {'B', BAD, "/delta/0/from", "not a JSON pointer", SD "{'op':'move','from':'a','path':'/b'}]}"},
    {'B', BAD, "/delta/0/value", "missing required field", SD "{'op':'add','path':'/a'}]}"},
    {'B', BAD, "/delta/0/value", "missing required field", SD "{'op':'replace','path':'/a'}]}"},
    {'B', BAD, "/delta/0/value", "missing required field", SD "{'op':'test','path':'/a'}]}"},
    {'B', BAD, "/delta/0/path", "missing required field", SD "{'op':'remove'}]}"},
    {'B', BAD, "/delta/0/path", "expected string, got integer", SD "{'op':'remove','path':5}]}"},
    {'B', BAD, "/delta/0/path", "expected string, got null", SD "{'op':'remove','path':null}]}"},
    {'U', BAD, "/delta/0/op", "unknown patch op \"frobnicate\"",
     SD "{'op':'frobnicate','path':'/a'}]}"},
    {'B', BAD, "/delta/0/op", "missing required field", SD "{'path':'/a','value':1}]}"},
    {'B', BAD, "/delta/0/op", "expected string, got integer", SD "{'op':5,'path':'/a'}]}"},
    {'B', BAD, "/delta/0", "expected object, got integer", SD "5]}"},
};

static void test_json_patch(void **state)
{
    (void)state;
    RUN(patch_cases);
}

/* ---- info extraction ---------------------------------------------------------- */

static void assert_view(ab_str_t s, const char *want)
{
    if (!want) {
        if (s.ptr)
            fail_msg("expected an absent view, got '%.*s'", (int)s.len, s.ptr);
        return;
    }
    if (!s.ptr)
        fail_msg("expected '%s', got an absent view", want);
    if (s.len != strlen(want) || memcmp(s.ptr, want, s.len) != 0)
        fail_msg("expected '%s', got '%.*s'", want, (int)s.len, s.ptr);
}

static ab_agui_info_t info_of(tu_ctx_t *ctx, const char *json, ab_agui_mode_t mode)
{
    const ab_val_t *ev = parse_quoted(ctx, json);
    ab_agui_info_t info;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_agui_validate(ev, mode, NULL, NULL, &info, &err) != AB_OK)
        fail_msg("%s: %s (at '%s')", json, err.message, err.field);
    assert_ptr_equal(info.event, ev);
    return info;
}

static void test_info_run_started(void **state)
{
    (void)state;
    tu_ctx_t ctx;
    tu_ctx_init(&ctx);
    ab_agui_info_t i =
        info_of(&ctx,
                RSI "{'threadId':'t','runId':'r','messages':[],'resume':[{'interruptId':'i1',"
                    "'status':'resolved'},{'interruptId':'i2','status':'cancelled'}]},"
                    "'parentRunId':'r0'}",
                AB_AGUI_STRICT);
    assert_int_equal(i.type, AB_AGUI_RUN_STARTED);
    assert_view(i.thread_id, "t");
    assert_view(i.run_id, "r");
    assert_view(i.parent_run_id, "r0");
    assert_non_null(i.protocol_version);
    assert_true(ab_val_str_eq(i.protocol_version, "1.0"));
    assert_non_null(i.resume);
    assert_int_equal(i.resume->type, AB_VAL_ARRAY);
    assert_int_equal(i.resume->len, 2);
    assert_int_equal(i.outcome, AB_OUTCOME_NONE);
    assert_null(i.interrupts);
    assert_view(i.subagent_run_id, NULL);

    i = info_of(&ctx, "{'type':'RUN_STARTED','threadId':'t','runId':'r'}", AB_AGUI_LENIENT);
    assert_null(i.protocol_version);
    assert_null(i.resume);
    assert_view(i.parent_run_id, NULL);
    tu_ctx_free(&ctx);
}

static void test_info_run_finished(void **state)
{
    (void)state;
    tu_ctx_t ctx;
    tu_ctx_init(&ctx);
    ab_agui_info_t i = info_of(&ctx, RF "}", AB_AGUI_STRICT);
    assert_int_equal(i.type, AB_AGUI_RUN_FINISHED);
    assert_view(i.thread_id, "t");
    assert_view(i.run_id, "r");
    assert_int_equal(i.outcome, AB_OUTCOME_NONE);
    assert_null(i.pending_tool_call_ids);

    i = info_of(&ctx, RF ",'outcome':" INT "[{'id':'a','reason':'r'},{'id':'b','reason':'r'}]}}",
                AB_AGUI_STRICT);
    assert_int_equal(i.outcome, AB_OUTCOME_INTERRUPT);
    assert_non_null(i.interrupts);
    assert_int_equal(i.interrupts->len, 2);
    assert_null(i.pending_tool_call_ids);

    i = info_of(&ctx, RF ",'outcome':{'type':'success','pendingToolCallIds':['c1','c2','c3']}}",
                AB_AGUI_STRICT);
    assert_int_equal(i.outcome, AB_OUTCOME_SUCCESS);
    assert_non_null(i.pending_tool_call_ids);
    assert_int_equal(i.pending_tool_call_ids->len, 3);
    assert_null(i.interrupts);

    i = info_of(&ctx, RF ",'outcome':{'type':'success'}}", AB_AGUI_STRICT);
    assert_int_equal(i.outcome, AB_OUTCOME_SUCCESS);
    assert_null(i.pending_tool_call_ids);

    i = info_of(&ctx, RF ",'outcome':{'type':'cancelled'}}", AB_AGUI_STRICT);
    assert_int_equal(i.outcome, AB_OUTCOME_CANCELLED);

    i = info_of(&ctx, RF ",'outcome':{'type':'paused','interrupts':[]}}", AB_AGUI_LENIENT);
    assert_int_equal(i.outcome, AB_OUTCOME_UNKNOWN);
    assert_null(i.interrupts);
    tu_ctx_free(&ctx);
}

static void test_info_subagents(void **state)
{
    (void)state;
    tu_ctx_t ctx;
    tu_ctx_init(&ctx);
    ab_agui_info_t i = info_of(&ctx,
                               "{'type':'SUBAGENT_STARTED','subagentRunId':'s2','name':'r',"
                               "'parentSubagentRunId':'s1','parentMessageId':'m1'}",
                               AB_AGUI_STRICT);
    assert_view(i.subagent_run_id, "s2");
    assert_view(i.name, "r");
    assert_view(i.parent_subagent_run_id, "s1");
    assert_view(i.parent_message_id, NULL); /* only TOOL_CALL_START/CHUNK fill it */

    i = info_of(&ctx,
                "{'type':'SUBAGENT_FINISHED','subagentRunId':'s2','outcome':{'type':'suspended'}}",
                AB_AGUI_STRICT);
    assert_int_equal(i.outcome, AB_OUTCOME_SUSPENDED);
    assert_view(i.subagent_run_id, "s2");

    i = info_of(&ctx, "{'type':'SUBAGENT_FINISHED','subagentRunId':'s2'}", AB_AGUI_STRICT);
    assert_int_equal(i.outcome, AB_OUTCOME_NONE);
    i = info_of(&ctx, "{'type':'SUBAGENT_FINISHED','subagentRunId':'s','outcome':{'type':'x'}}",
                AB_AGUI_LENIENT);
    assert_int_equal(i.outcome, AB_OUTCOME_UNKNOWN);
    i = info_of(&ctx, "{'type':'SUBAGENT_ERROR','subagentRunId':'s3','message':'m'}",
                AB_AGUI_STRICT);
    assert_view(i.subagent_run_id, "s3");
    tu_ctx_free(&ctx);
}

static void test_info_streams(void **state)
{
    (void)state;
    tu_ctx_t ctx;
    tu_ctx_init(&ctx);
    ab_agui_info_t i = info_of(&ctx,
                               "{'type':'TEXT_MESSAGE_START','messageId':'m1','role':'user',"
                               "'name':'bob','subagentRunId':'s'}",
                               AB_AGUI_STRICT);
    assert_int_equal(i.type, AB_AGUI_TEXT_MESSAGE_START);
    assert_view(i.message_id, "m1");
    assert_view(i.role, "user");
    assert_view(i.name, "bob");
    assert_view(i.subagent_run_id, "s");
    assert_view(i.thread_id, NULL);

    i = info_of(&ctx, "{'type':'TEXT_MESSAGE_CHUNK','delta':'x'}", AB_AGUI_STRICT);
    assert_view(i.message_id, NULL);
    assert_view(i.role, NULL);

    i = info_of(&ctx,
                "{'type':'TOOL_CALL_START','toolCallId':'c1','toolCallName':'f',"
                "'parentMessageId':'m1'}",
                AB_AGUI_STRICT);
    assert_view(i.tool_call_id, "c1");
    assert_view(i.tool_call_name, "f");
    assert_view(i.parent_message_id, "m1");

    i = info_of(&ctx, "{'type':'TOOL_CALL_RESULT','messageId':'m2','toolCallId':'c1','content':''}",
                AB_AGUI_STRICT);
    assert_view(i.message_id, "m2");
    assert_view(i.tool_call_id, "c1");

    i = info_of(&ctx, "{'type':'STEP_FINISHED','stepName':'plan'}", AB_AGUI_STRICT);
    assert_view(i.step_name, "plan");
    i = info_of(&ctx, "{'type':'REASONING_START','messageId':'span'}", AB_AGUI_STRICT);
    assert_view(i.message_id, "span");
    i = info_of(&ctx, "{'type':'ACTIVITY_DELTA','messageId':'a','activityType':'p','patch':[]}",
                AB_AGUI_STRICT);
    assert_view(i.message_id, "a");
    tu_ctx_free(&ctx);
}

/* ---- API edges ----------------------------------------------------------------- */

static void test_unknown_type_lenient(void **state)
{
    (void)state;
    tu_ctx_t ctx;
    tu_ctx_init(&ctx);
    /* the body of an unknown type is not checked: the consumer drops it */
    ab_agui_info_t i =
        info_of(&ctx, "{'type':'FUTURE_EVENT','messageId':5,'timestamp':1.5}", AB_AGUI_LENIENT);
    assert_int_equal(i.type, AB_AGUI_UNKNOWN);
    assert_view(i.message_id, NULL);
    tu_ctx_free(&ctx);
}

static void test_info_untouched_on_error(void **state)
{
    (void)state;
    tu_ctx_t ctx;
    tu_ctx_init(&ctx);
    const ab_val_t *ev = parse_quoted(&ctx, "{'type':'TEXT_MESSAGE_START','messageId':'m','x':1}");
    ab_agui_info_t info, before;
    memset(&info, 0xa5, sizeof(info));
    memcpy(&before, &info, sizeof(info));
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_agui_validate(ev, AB_AGUI_STRICT, NULL, NULL, &info, &err), BAD);
    assert_memory_equal(&info, &before, sizeof(info));
    tu_assert_error(&err, BAD, "/x");
    assert_false(err.retryable);
    tu_ctx_free(&ctx);
}

static void test_optional_outputs(void **state)
{
    (void)state;
    tu_ctx_t ctx;
    tu_ctx_init(&ctx);
    const ab_val_t *bad = parse_quoted(&ctx, "{'type':'RAW'}");
    assert_int_equal(ab_agui_validate(bad, AB_AGUI_STRICT, NULL, NULL, NULL, NULL), BAD);
    assert_int_equal(ab_agui_validate(bad, AB_AGUI_LENIENT, NULL, NULL, NULL, NULL), BAD);
    assert_int_equal(ab_agui_validate(NULL, AB_AGUI_STRICT, NULL, NULL, NULL, NULL), BAD);
    const ab_val_t *unk = parse_quoted(&ctx, "{'type':'RAW','event':1,'extra':1}");
    assert_int_equal(ab_agui_validate(unk, AB_AGUI_STRICT, NULL, NULL, NULL, NULL), BAD);
    /* lenient without a warning callback: accepted silently */
    assert_int_equal(ab_agui_validate(unk, AB_AGUI_LENIENT, NULL, NULL, NULL, NULL), OK);
    tu_ctx_free(&ctx);
}

static void test_first_error_wins(void **state)
{
    (void)state;
    tu_ctx_t ctx;
    tu_ctx_init(&ctx);
    ab_error_t err = AB_ERROR_INIT;
    ab_error_set(&err, AB_GAP, "seq", "earlier error");
    const ab_val_t *ev = parse_quoted(&ctx, "{'type':'RAW'}");
    assert_int_equal(ab_agui_validate(ev, AB_AGUI_STRICT, NULL, NULL, NULL, &err), BAD);
    tu_assert_error(&err, AB_GAP, "seq");
    /* within one event the first problem in pair order wins */
    ab_error_clear(&err);
    ev = parse_quoted(&ctx, "{'type':'TEXT_MESSAGE_CONTENT','delta':1,'messageId':2}");
    assert_int_equal(ab_agui_validate(ev, AB_AGUI_STRICT, NULL, NULL, NULL, &err), BAD);
    tu_assert_error(&err, BAD, "/delta");
    tu_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outcomes),
        cmocka_unit_test(test_token_usage),
        cmocka_unit_test(test_run_input),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_json_patch),
        cmocka_unit_test(test_info_run_started),
        cmocka_unit_test(test_info_run_finished),
        cmocka_unit_test(test_info_subagents),
        cmocka_unit_test(test_info_streams),
        cmocka_unit_test(test_unknown_type_lenient),
        cmocka_unit_test(test_info_untouched_on_error),
        cmocka_unit_test(test_optional_outputs),
        cmocka_unit_test(test_first_error_wins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_reducer.c - the thread reducer: golden projections of the fixture
 * threads in tests/fixtures/threads (<name>.jsonl folded, compared with
 * <name>.golden.json), and unit cases for message assembly, snapshots,
 * patch failures and approvals.
 *
 * Fixture line format: {"run": RUN_ID, "seq": SEQ, "event": AG-UI event}.
 */
#include "testutil.h"

#include "agentbus/reducer.h"
#include "jansson_internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *load(const char *text)
{
    json_error_t je;
    json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!v)
        fail_msg("bad JSON (%s): %s", je.text, text);
    return v;
}

static ab_reducer_t *reducer(const char *thread)
{
    ab_reducer_t *r = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_reducer_new(&r, thread, &err), AB_OK);
    return r;
}

/* Fold one event given as JSON text. */
static void fold(ab_reducer_t *r, const char *run, uint64_t seq, const char *event)
{
    tu_ctx_t c;
    tu_ctx_init(&c);
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_reducer_apply(r, tu_json(&c, event), run, seq, &err);
    if (st != AB_OK)
        fail_msg("fold %s: %s (at %s)", event, err.message, err.field);
    tu_ctx_free(&c);
}

/* Fold the first @p max lines (0 = all) of fixture thread @p name. */
static void fold_file(ab_reducer_t *r, const char *name, size_t max)
{
    char path[512];
    snprintf(path, sizeof path, "%s/threads/%s.jsonl", AB_FIXTURES_DIR, name);
    size_t len;
    char *text = tu_read_file(path, &len);
    size_t lines = 0;
    for (char *line = strtok(text, "\n"); line && (max == 0 || lines < max);
         line = strtok(NULL, "\n"), lines++) {
        json_t *env = load(line);
        char *ev = json_dumps(json_object_get(env, "event"), JSON_COMPACT);
        fold(r, json_string_value(json_object_get(env, "run")),
             (uint64_t)json_integer_value(json_object_get(env, "seq")), ev);
        free(ev);
        json_decref(env);
    }
    free(text);
}

/* Compare @p got with @p want; on a difference print both. */
static void expect_json(const json_t *got, const json_t *want, const char *what)
{
    if (json_equal(got, want))
        return;
    char *g = json_dumps(got, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    char *w = json_dumps(want, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    fprintf(stderr, "%s: got\n%s\nwant\n%s\n", what, g, w);
    free(g);
    free(w);
    fail_msg("%s differs", what);
}

static void expect_golden(const char *name, const char *thread)
{
    ab_reducer_t *r = reducer(thread);
    fold_file(r, name, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/threads/%s.golden.json", AB_FIXTURES_DIR, name);
    size_t len;
    char *text = tu_read_file(path, &len);
    json_t *want = load(text);
    expect_json(ab__reducer_state(r), want, name);
    json_decref(want);
    free(text);
    ab_reducer_destroy(&r);
    assert_null(r);
}

static void test_golden_full_run(void **state)
{
    (void)state;
    expect_golden("full-run", "thread-1");
}

static void test_golden_interrupt_resume(void **state)
{
    (void)state;
    expect_golden("interrupt-resume", "thread-2");
}

static void test_golden_parallel_tool_calls(void **state)
{
    (void)state;
    expect_golden("parallel-tool-calls", "thread-3");
}

static void test_golden_state_patches(void **state)
{
    (void)state;
    expect_golden("state-patches", "thread-4");
    /* the state at the end of the first run, before run-2's snapshot */
    ab_reducer_t *r = reducer("thread-4");
    fold_file(r, "state-patches", 13);
    json_t *want = load("{\"items\":[\"z\",\"b\"],\"count\":5,\"moved\":5,\"ok\":true,"
                        "\"a/b\":{\"m~n\":2},\"after\":null}");
    expect_json(json_object_get(ab__reducer_state(r), "state"), want, "state after run-1");
    json_decref(want);
    ab_reducer_destroy(&r);
}

static void test_golden_agentkit(void **state)
{
    (void)state;
    expect_golden("agentkit", "thread-5");
}

static const char *msg_content(ab_reducer_t *r, size_t i)
{
    json_t *m = json_array_get(json_object_get(ab__reducer_state(r), "messages"), i);
    return json_string_value(json_object_get(m, "content"));
}

/* User turns and a frontend tool's answer reach the thread only in RUN_STARTED.input.messages. */
static void test_golden_conversation(void **state)
{
    (void)state;
    expect_golden("conversation", "thread-6");
}

/* Tool calls without (or with an unusable) parentMessageId are held by assistant messages. */
static void test_golden_tool_calls_without_parent(void **state)
{
    (void)state;
    expect_golden("tool-calls-without-parent", "thread-7");
}

static void test_golden_metadata_attribution(void **state)
{
    (void)state;
    expect_golden("metadata-attribution", "thread-8");
}

/* Activity deltas on an activity message restated by MESSAGES_SNAPSHOT. */
static void test_golden_activity_after_messages_snapshot(void **state)
{
    (void)state;
    expect_golden("activity-after-messages-snapshot", "thread-10");
}

/* U+0000 in text, arguments, results, state, activity, metadata, CUSTOM values. */
static void test_golden_nul_bytes(void **state)
{
    (void)state;
    expect_golden("nul-bytes", "thread-9");
    ab_reducer_t *r = reducer("thread-9");
    fold_file(r, "nul-bytes", 0);
    const char *c = msg_content(r, 1);
    const json_t *m = json_array_get(json_object_get(ab__reducer_state(r), "messages"), 1);
    assert_int_equal(json_string_length(json_object_get(m, "content")), 7);
    assert_memory_equal(c, "a\0b\0end", 7);
    ab_reducer_destroy(&r);
}

static void test_empty_projection(void **state)
{
    (void)state;
    ab_reducer_t *r = reducer("t");
    json_t *want =
        load("{\"formatVersion\":2,\"threadId\":\"t\",\"runs\":[],\"messages\":[],"
             "\"toolCalls\":[],\"reasoning\":[],\"reasoningSpans\":[],\"activities\":[],"
             "\"state\":{},\"approvals\":[],\"tasks\":[],\"roster\":[],\"interactions\":[],"
             "\"artifacts\":[],\"suggestions\":[],\"widgets\":[],\"warnings\":[]}");
    expect_json(ab__reducer_state(r), want, "empty projection");
    json_decref(want);
    ab_reducer_destroy(&r);
    ab_reducer_destroy(&r); /* NULL-safe */
}

static void test_bad_arguments(void **state)
{
    (void)state;
    ab_reducer_t *r = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_reducer_new(&r, NULL, &err), AB_INVALID_ARGUMENT);
    assert_null(r);
    r = reducer("t");
    tu_ctx_t c;
    tu_ctx_init(&c);
    ab_error_clear(&err);
    assert_int_equal(ab_reducer_apply(r, tu_json(&c, "[1]"), "run", 1, &err), AB_INVALID_ARGUMENT);
    ab_error_clear(&err);
    assert_int_equal(ab_reducer_apply(r, tu_json(&c, "{\"type\":1}"), "run", 1, &err),
                     AB_INVALID_ARGUMENT);
    /* unknown types are ignored, but the run is recorded */
    assert_int_equal(ab_reducer_apply(r, tu_json(&c, "{\"type\":\"FUTURE_THING\"}"), NULL, 4, &err),
                     AB_OK);
    json_t *runs = json_object_get(ab__reducer_state(r), "runs");
    assert_int_equal(json_array_size(runs), 1);
    tu_ctx_free(&c);
    ab_reducer_destroy(&r);
}

static void test_message_assembly(void **state)
{
    (void)state;
    ab_reducer_t *r = reducer("t");
    fold(r, "r1", 1, "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r1\"}");
    fold(r, "r1", 2, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m1\",\"role\":\"user\"}");
    fold(r, "r1", 3, "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"he\"}");
    fold(r, "r1", 4, "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"\"}");
    fold(r, "r1", 5, "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"llo\"}");
    fold(r, "r1", 6, "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m1\"}");
    assert_string_equal(msg_content(r, 0), "hello");
    /* reopening appends */
    fold(r, "r1", 7, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m1\",\"role\":\"user\"}");
    fold(r, "r1", 8, "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"!\"}");
    assert_string_equal(msg_content(r, 0), "hello!");
    /* chunks: first names the id, later ones continue it; a new id switches */
    fold(r, "r1", 9, "{\"type\":\"TEXT_MESSAGE_CHUNK\",\"messageId\":\"m2\",\"delta\":\"a\"}");
    fold(r, "r1", 10, "{\"type\":\"TEXT_MESSAGE_CHUNK\",\"delta\":\"b\"}");
    fold(r, "r1", 11,
         "{\"type\":\"TEXT_MESSAGE_CHUNK\",\"messageId\":\"m3\",\"delta\":\"x\","
         "\"name\":\"bot\"}");
    fold(r, "r1", 12, "{\"type\":\"TEXT_MESSAGE_CHUNK\",\"delta\":\"y\"}");
    assert_string_equal(msg_content(r, 1), "ab");
    assert_string_equal(msg_content(r, 2), "xy");
    /* a run boundary ends every chunk lane: an id-less chunk is a warning */
    fold(r, "r1", 13, "{\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"r1\"}");
    fold(r, "r2", 1, "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r2\"}");
    fold(r, "r2", 2, "{\"type\":\"TEXT_MESSAGE_CHUNK\",\"delta\":\"lost\"}");
    json_t *want =
        load("[{\"id\":\"m1\",\"role\":\"user\",\"content\":\"hello!\"},"
             "{\"id\":\"m2\",\"role\":\"assistant\",\"content\":\"ab\"},"
             "{\"id\":\"m3\",\"role\":\"assistant\",\"content\":\"xy\",\"name\":\"bot\"}]");
    expect_json(json_object_get(ab__reducer_state(r), "messages"), want, "messages");
    json_decref(want);
    json_t *w = json_array_get(json_object_get(ab__reducer_state(r), "warnings"), 0);
    assert_int_equal(json_integer_value(json_object_get(w, "seq")), 2);
    assert_string_equal(json_string_value(json_object_get(w, "run")), "r2");
    ab_reducer_destroy(&r);
}

static void test_messages_snapshot_keeps_positions(void **state)
{
    (void)state;
    ab_reducer_t *r = reducer("t");
    fold(r, "r1", 1, "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r1\"}");
    for (int i = 1; i <= 3; i++) {
        char ev[128];
        snprintf(ev, sizeof ev,
                 "{\"type\":\"TEXT_MESSAGE_CHUNK\",\"messageId\":\"m%d\",\"delta\":\"v%d\"}", i, i);
        fold(r, "r1", (uint64_t)i + 1, ev);
    }
    fold(r, "r1", 5,
         "{\"type\":\"ACTIVITY_SNAPSHOT\",\"messageId\":\"act\",\"activityType\":\"P\","
         "\"content\":{}}");
    fold(r, "r1", 6,
         "{\"type\":\"REASONING_MESSAGE_CHUNK\",\"messageId\":\"rz\",\"delta\":\"think\"}");
    /* m3 and m1 replaced in place, m2 dropped, m4 appended; activities kept
     * (none in the snapshot), reasoning replaced (the snapshot has some) */
    fold(r, "r1", 7,
         "{\"type\":\"MESSAGES_SNAPSHOT\",\"messages\":["
         "{\"id\":\"m3\",\"role\":\"assistant\",\"content\":\"V3\"},"
         "{\"id\":\"m1\",\"role\":\"user\",\"content\":\"V1\"},"
         "{\"id\":\"m4\",\"role\":\"assistant\",\"toolCalls\":[{\"id\":\"c9\",\"type\":"
         "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
         "{\"id\":\"t9\",\"role\":\"tool\",\"toolCallId\":\"c9\",\"content\":\"ok\"},"
         "{\"id\":\"rq\",\"role\":\"reasoning\",\"content\":\"new\"}]}");
    json_t *st = (json_t *)(uintptr_t)ab__reducer_state(r);
    json_t *want =
        load("[{\"id\":\"m1\",\"role\":\"user\",\"content\":\"V1\"},"
             "{\"id\":\"m3\",\"role\":\"assistant\",\"content\":\"V3\"},"
             "{\"id\":\"m4\",\"role\":\"assistant\",\"toolCalls\":[{\"id\":\"c9\",\"type\":"
             "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
             "{\"id\":\"t9\",\"role\":\"tool\",\"toolCallId\":\"c9\",\"content\":\"ok\"}]");
    expect_json(json_object_get(st, "messages"), want, "messages after snapshot");
    json_decref(want);
    want = load("[{\"id\":\"c9\",\"name\":\"f\",\"arguments\":\"{}\",\"parentMessageId\":\"m4\","
                "\"result\":\"ok\"}]");
    expect_json(json_object_get(st, "toolCalls"), want, "tool calls from snapshot");
    json_decref(want);
    assert_int_equal(json_array_size(json_object_get(st, "activities")), 1);
    want = load("[{\"messageId\":\"rq\",\"content\":\"new\"}]");
    expect_json(json_object_get(st, "reasoning"), want, "reasoning after snapshot");
    json_decref(want);
    /* the index follows the new positions: content goes to the right message */
    fold(r, "r1", 8, "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m3\",\"delta\":\"+\"}");
    assert_string_equal(msg_content(r, 1), "V3+");
    ab_reducer_destroy(&r);
}

/* RUN_STARTED.input.messages: folded when not held (the thread's copy wins), in input order. */
static void test_input_messages(void **state)
{
    (void)state;
    ab_reducer_t *r = reducer("t");
    fold(r, "r1", 1,
         "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r1\",\"input\":{\"threadId\":"
         "\"t\",\"runId\":\"r1\",\"messages\":[{\"id\":\"u1\",\"role\":\"user\",\"content\":"
         "\"hi\"},{\"id\":\"m1\",\"role\":\"assistant\",\"content\":\"earlier\"}]}}");
    fold(r, "r1", 2, "{\"type\":\"TEXT_MESSAGE_CHUNK\",\"messageId\":\"m2\",\"delta\":\"ours\"}");
    fold(r, "r1", 3,
         "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c1\",\"toolCallName\":\"f\","
         "\"parentMessageId\":\"m2\"}");
    fold(r, "r1", 4, "{\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"c1\"}");
    fold(r, "r1", 5,
         "{\"type\":\"TOOL_CALL_RESULT\",\"messageId\":\"res-1\",\"toolCallId\":\"c1\","
         "\"content\":\"agent\"}");
    fold(r, "r1", 6, "{\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"r1\"}");
    /* held ids keep the thread's copy; a second answer to c1 does not replace its result; an
     * activity and a reasoning message go to their lists; an id given twice counts once */
    fold(r, "r2", 1,
         "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r2\",\"input\":{\"threadId\":"
         "\"t\",\"runId\":\"r2\",\"messages\":["
         "{\"id\":\"u1\",\"role\":\"user\",\"content\":\"edited\"},"
         "{\"id\":\"m2\",\"role\":\"assistant\",\"content\":\"theirs\"},"
         "{\"id\":\"t2\",\"role\":\"tool\",\"toolCallId\":\"c1\",\"content\":\"client\"},"
         "{\"id\":\"act-9\",\"role\":\"activity\",\"activityType\":\"x\",\"content\":{}},"
         "{\"id\":\"rz\",\"role\":\"reasoning\",\"content\":\"r\"},"
         "{\"id\":\"u3\",\"role\":\"user\",\"content\":\"first\"},"
         "{\"id\":\"u3\",\"role\":\"user\",\"content\":\"second\"},"
         "{\"id\":\"c2h\",\"role\":\"assistant\",\"toolCalls\":[{\"id\":\"c2\",\"type\":"
         "\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]}]}}");
    const json_t *st = ab__reducer_state(r);
    json_t *want = load(
        "[{\"id\":\"u1\",\"role\":\"user\",\"content\":\"hi\"},"
        "{\"id\":\"m1\",\"role\":\"assistant\",\"content\":\"earlier\"},"
        "{\"id\":\"m2\",\"role\":\"assistant\",\"content\":\"ours\",\"toolCalls\":[{\"id\":\"c1\","
        "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]},"
        "{\"id\":\"res-1\",\"role\":\"tool\",\"toolCallId\":\"c1\",\"content\":\"agent\"},"
        "{\"id\":\"t2\",\"role\":\"tool\",\"toolCallId\":\"c1\",\"content\":\"client\"},"
        "{\"id\":\"u3\",\"role\":\"user\",\"content\":\"first\"},"
        "{\"id\":\"c2h\",\"role\":\"assistant\",\"toolCalls\":[{\"id\":\"c2\",\"type\":"
        "\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]}]");
    expect_json(json_object_get(st, "messages"), want, "messages after input");
    json_decref(want);
    want = load("[{\"id\":\"c1\",\"name\":\"f\",\"arguments\":\"\",\"parentMessageId\":\"m2\","
                "\"result\":\"agent\"},{\"id\":\"c2\",\"name\":\"g\",\"arguments\":\"{}\","
                "\"parentMessageId\":\"c2h\"}]");
    expect_json(json_object_get(st, "toolCalls"), want, "tool calls after input");
    json_decref(want);
    want = load("[{\"messageId\":\"act-9\",\"activityType\":\"x\",\"content\":{}}]");
    expect_json(json_object_get(st, "activities"), want, "activities after input");
    json_decref(want);
    assert_int_equal(json_array_size(json_object_get(st, "reasoning")), 1);
    /* a result for the input's call goes after the message holding it */
    fold(r, "r2", 2,
         "{\"type\":\"TOOL_CALL_RESULT\",\"messageId\":\"res-2\",\"toolCallId\":\"c2\","
         "\"content\":\"ok\"}");
    fold(r, "r2", 3, "{\"type\":\"TEXT_MESSAGE_CHUNK\",\"messageId\":\"m4\",\"delta\":\"x\"}");
    fold(r, "r2", 4,
         "{\"type\":\"TOOL_CALL_RESULT\",\"messageId\":\"res-3\",\"toolCallId\":\"c1\","
         "\"content\":\"late\"}");
    json_t *msgs = json_object_get(ab__reducer_state(r), "messages");
    static const char *const order[] = {"u1",    "m1", "m2",  "res-1", "t2",
                                        "res-3", "u3", "c2h", "res-2", "m4"};
    assert_int_equal(json_array_size(msgs), 10);
    for (size_t i = 0; i < 10; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, i), "id")),
                            order[i]);
    ab_reducer_destroy(&r);
}

/* Streamed calls live in an assistant message's toolCalls; snapshots move them. */
static void test_tool_calls_in_messages(void **state)
{
    (void)state;
    ab_reducer_t *r = reducer("t");
    fold(r, "r1", 1, "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r1\"}");
    fold(r, "r1", 2, "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c1\",\"toolCallName\":\"f\"}");
    fold(r, "r1", 3, "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"c1\",\"delta\":\"{\"}");
    json_t *m = json_array_get(json_object_get(ab__reducer_state(r), "messages"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "id")), "c1");
    assert_null(json_object_get(m, "content"));
    /* the snapshot's a1 holds c1 now; c1's own holder is not in it: dropped */
    fold(r, "r1", 4,
         "{\"type\":\"MESSAGES_SNAPSHOT\",\"messages\":[{\"id\":\"a1\",\"role\":\"assistant\","
         "\"toolCalls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
         "\"arguments\":\"{\\\"x\\\"\"}}]}]}");
    fold(r, "r1", 5, "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"c1\",\"delta\":\":1}\"}");
    fold(r, "r1", 6,
         "{\"type\":\"REASONING_ENCRYPTED_VALUE\",\"subtype\":\"tool-call\",\"entityId\":\"c1\","
         "\"encryptedValue\":\"enc\"}");
    fold(r, "r1", 7, "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c1\",\"toolCallName\":\"g\"}");
    fold(r, "r1", 8, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m9\"}");
    fold(r, "r1", 9,
         "{\"type\":\"TOOL_CALL_RESULT\",\"messageId\":\"t1\",\"toolCallId\":\"c1\","
         "\"content\":\"done\"}");
    const json_t *st = ab__reducer_state(r);
    json_t *want =
        load("[{\"id\":\"a1\",\"role\":\"assistant\",\"toolCalls\":[{\"id\":\"c1\",\"type\":"
             "\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{\\\"x\\\":1}\"},"
             "\"encryptedValue\":\"enc\"}]},"
             "{\"id\":\"t1\",\"role\":\"tool\",\"toolCallId\":\"c1\",\"content\":\"done\"},"
             "{\"id\":\"m9\",\"role\":\"assistant\",\"content\":\"\"}]");
    expect_json(json_object_get(st, "messages"), want, "messages");
    json_decref(want);
    want = load("[{\"id\":\"c1\",\"name\":\"g\",\"arguments\":\"{\\\"x\\\":1}\","
                "\"parentMessageId\":\"a1\",\"encryptedValue\":\"enc\",\"result\":\"done\"}]");
    expect_json(json_object_get(st, "toolCalls"), want, "toolCalls");
    json_decref(want);
    /* a call a snapshot gave without arguments, its message dropped since: restarted, it gets
     * a holder with empty arguments (not an error) */
    fold(r, "r1", 10,
         "{\"type\":\"MESSAGES_SNAPSHOT\",\"messages\":[{\"id\":\"a2\",\"role\":\"assistant\","
         "\"toolCalls\":[{\"id\":\"c5\",\"type\":\"function\",\"function\":{\"name\":\"h\"}}]}]}");
    fold(r, "r1", 11, "{\"type\":\"MESSAGES_SNAPSHOT\",\"messages\":[]}");
    fold(r, "r1", 12,
         "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c5\",\"toolCallName\":\"h\"}");
    want = load("[{\"id\":\"c5\",\"role\":\"assistant\",\"toolCalls\":[{\"id\":\"c5\",\"type\":"
                "\"function\",\"function\":{\"name\":\"h\",\"arguments\":\"\"}}]}]");
    expect_json(json_object_get(ab__reducer_state(r), "messages"), want, "restarted call");
    json_decref(want);
    ab_reducer_destroy(&r);
}

/*
 * Streams in turn (proto/reducer.c: a pending value per string, RD_PENDING of them): 40
 * messages (more than the pending slots, so the least recently used is written back and
 * started again) and 3 tool calls whose arguments also stream into their holder message,
 * in a shuffled order, with events that are not appends among them. Every text, read in
 * the middle and at the end, is exactly its deltas in order.
 */
#define IL_MSGS  40 /* more than RD_PENDING: buffers are written back and reused */
#define IL_CALLS 3

static void il_fold(ab_reducer_t *r, uint64_t *seq, const char *fmt, int a, int b)
{
    char ev[256];
    snprintf(ev, sizeof ev, fmt, a, b);
    fold(r, "r1", ++*seq, ev);
}

static void il_expect(ab_reducer_t *r, char want[][512], char args[][512])
{
    const json_t *st = ab__reducer_state(r);
    json_t *msgs = json_object_get(st, "messages");
    for (int i = 0; i < IL_MSGS; i++)
        assert_string_equal(
            json_string_value(json_object_get(json_array_get(msgs, (size_t)i), "content")),
            want[i]);
    json_t *calls = json_object_get(st, "toolCalls");
    json_t *held = json_object_get(json_array_get(msgs, 0), "toolCalls");
    for (int c = 0; c < IL_CALLS; c++) {
        assert_string_equal(
            json_string_value(json_object_get(json_array_get(calls, (size_t)c), "arguments")),
            args[c]);
        json_t *fn = json_object_get(json_array_get(held, (size_t)c), "function");
        assert_string_equal(json_string_value(json_object_get(fn, "arguments")), args[c]);
    }
}

static void test_interleaved_streams(void **state)
{
    (void)state;
    static char want[IL_MSGS][512], args[IL_CALLS][512];
    memset(want, 0, sizeof want);
    memset(args, 0, sizeof args);
    ab_reducer_t *r = reducer("t");
    uint64_t seq = 0;
    il_fold(r, &seq, "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r1\"}", 0, 0);
    for (int i = 0; i < IL_MSGS; i++)
        il_fold(r, &seq, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m%d\"}", i, 0);
    for (int c = 0; c < IL_CALLS; c++)
        il_fold(r, &seq,
                "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c%d\",\"toolCallName\":\"f\","
                "\"parentMessageId\":\"m%d\"}",
                c, 0);
    for (int k = 0; k < 30; k++) {
        for (int j = 0; j < IL_MSGS; j++) {
            int i = (j * 7 + k) % IL_MSGS;
            il_fold(r, &seq,
                    "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m%d\",\"delta\":\"%d;\"}",
                    i, k);
            snprintf(want[i] + strlen(want[i]), sizeof want[i] - strlen(want[i]), "%d;", k);
            if (j % 4 == 1) {
                int c = (k + j) % IL_CALLS;
                il_fold(r, &seq,
                        "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"c%d\",\"delta\":\"a%d\"}", c,
                        k);
                snprintf(args[c] + strlen(args[c]), sizeof args[c] - strlen(args[c]), "a%d", k);
            }
        }
        if (k % 5 == 2)
            il_fold(r, &seq, "{\"type\":\"STEP_STARTED\",\"stepName\":\"s%d\"}", k, 0);
        if (k == 15)
            il_expect(r, want, args);
    }
    il_expect(r, want, args);
    ab_reducer_destroy(&r);
}

static void test_patch_failure_warns_and_keeps_state(void **state)
{
    (void)state;
    ab_reducer_t *r = reducer("t");
    fold(r, "r1", 1, "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r1\"}");
    fold(r, "r1", 2, "{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":{\"a\":[1]}}");
    const json_t *before = json_object_get(ab__reducer_state(r), "state");
    fold(r, "r1", 3,
         "{\"type\":\"STATE_DELTA\",\"delta\":[{\"op\":\"add\",\"path\":\"/a/-\",\"value\":2},"
         "{\"op\":\"remove\",\"path\":\"/a/5\"}]}");
    const json_t *after = json_object_get(ab__reducer_state(r), "state");
    assert_ptr_equal(before, after);
    json_t *want = load("{\"a\":[1]}");
    expect_json(after, want, "state unchanged");
    json_decref(want);
    json_t *w = json_array_get(json_object_get(ab__reducer_state(r), "warnings"), 0);
    assert_int_equal(json_integer_value(json_object_get(w, "seq")), 3);
    assert_string_equal(json_string_value(json_object_get(w, "run")), "r1");
    assert_non_null(strstr(json_string_value(json_object_get(w, "message")), "/1/path"));
    /* an activity delta for an unknown activity and one that breaks the object */
    fold(r, "r1", 4,
         "{\"type\":\"ACTIVITY_DELTA\",\"messageId\":\"nope\",\"activityType\":\"P\","
         "\"patch\":[]}");
    fold(r, "r1", 5,
         "{\"type\":\"ACTIVITY_SNAPSHOT\",\"messageId\":\"a1\",\"activityType\":\"P\","
         "\"content\":{\"x\":1}}");
    fold(r, "r1", 6,
         "{\"type\":\"ACTIVITY_DELTA\",\"messageId\":\"a1\",\"activityType\":\"Q\","
         "\"patch\":[{\"op\":\"replace\",\"path\":\"\",\"value\":[1]}]}");
    fold(r, "r1", 7,
         "{\"type\":\"ACTIVITY_SNAPSHOT\",\"messageId\":\"a1\",\"activityType\":\"Z\","
         "\"content\":{\"y\":1},\"replace\":false}");
    want = load("[{\"messageId\":\"a1\",\"activityType\":\"P\",\"content\":{\"x\":1}}]");
    expect_json(json_object_get(ab__reducer_state(r), "activities"), want, "activity unchanged");
    json_decref(want);
    assert_int_equal(json_array_size(json_object_get(ab__reducer_state(r), "warnings")), 3);
    ab_reducer_destroy(&r);
}

/*
 * Regression (fuzz_jsonpatch): a STATE_DELTA of 60 copies of the whole state
 * into "a" and "b" in turn would double the state 60 times; it is a warning
 * (too_large) and the state stays as it was.
 */
static void test_copying_state_delta_is_bounded(void **state)
{
    (void)state;
    ab_reducer_t *r = reducer("t");
    fold(r, "r1", 1, "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r1\"}");
    fold(r, "r1", 2, "{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":{\"a\":1,\"b\":2}}");
    char ev[4096] = "{\"type\":\"STATE_DELTA\",\"delta\":[";
    for (int i = 0; i < 60; i++)
        strcat(ev, i % 2 ? "{\"op\":\"copy\",\"from\":\"\",\"path\":\"/a\"},"
                         : "{\"op\":\"copy\",\"from\":\"\",\"path\":\"/b\"},");
    ev[strlen(ev) - 1] = '\0';
    strcat(ev, "]}");
    fold(r, "r1", 3, ev);
    json_t *want = load("{\"a\":1,\"b\":2}");
    expect_json(json_object_get(ab__reducer_state(r), "state"), want, "state unchanged");
    json_decref(want);
    json_t *w = json_array_get(json_object_get(ab__reducer_state(r), "warnings"), 0);
    assert_int_equal(json_integer_value(json_object_get(w, "seq")), 3);
    assert_non_null(strstr(json_string_value(json_object_get(w, "message")), "too_large"));
    ab_reducer_destroy(&r);
}

static void test_warnings_are_bounded(void **state)
{
    (void)state;
    ab_reducer_t *r = reducer("t");
    for (uint64_t i = 1; i <= AB_REDUCER_MAX_WARNINGS + 10; i++)
        fold(r, "r1", i,
             "{\"type\":\"STATE_DELTA\",\"delta\":[{\"op\":\"remove\",\"path\":\"/x\"}]}");
    json_t *ws = json_object_get(ab__reducer_state(r), "warnings");
    assert_int_equal(json_array_size(ws), AB_REDUCER_MAX_WARNINGS);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(ws, 0), "seq")), 11);
    ab_reducer_destroy(&r);
}

static const char *approval_status(ab_reducer_t *r, size_t i)
{
    json_t *a = json_array_get(json_object_get(ab__reducer_state(r), "approvals"), i);
    return json_string_value(json_object_get(a, "status"));
}

static void test_approvals_bound_to_exact_interrupt_id(void **state)
{
    (void)state;
    ab_reducer_t *r = reducer("t");
    fold(r, "r1", 1, "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r1\"}");
    fold(r, "r1", 2,
         "{\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"r1\",\"outcome\":{\"type\":"
         "\"interrupt\",\"interrupts\":[{\"id\":\"int-1\",\"reason\":\"confirmation\"},"
         "{\"id\":\"int-10\",\"reason\":\"confirmation\"}]}}");
    assert_string_equal(approval_status(r, 0), "pending");
    assert_string_equal(approval_status(r, 1), "pending");
    /* near misses do not bind; the label in the payload decides nothing */
    fold(r, "r2", 1,
         "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r2\",\"input\":{\"threadId\":"
         "\"t\",\"runId\":\"r2\",\"messages\":[],\"resume\":["
         "{\"interruptId\":\"INT-1\",\"status\":\"resolved\"},"
         "{\"interruptId\":\"int-1 \",\"status\":\"resolved\"},"
         "{\"interruptId\":\"int-10\",\"status\":\"cancelled\",\"payload\":{\"decision\":"
         "\"approved\"}}]}}");
    assert_string_equal(approval_status(r, 0), "pending");
    assert_string_equal(approval_status(r, 1), "cancelled");
    assert_int_equal(json_array_size(json_object_get(ab__reducer_state(r), "warnings")), 2);
    /* an answered interrupt cannot be answered again */
    fold(r, "r2", 2,
         "{\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"r2\",\"outcome\":{\"type\":"
         "\"interrupt\",\"interrupts\":[{\"id\":\"int-1\",\"reason\":\"again\"}]}}");
    fold(r, "r3", 1,
         "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r3\",\"input\":{\"threadId\":"
         "\"t\",\"runId\":\"r3\",\"messages\":[],\"resume\":["
         "{\"interruptId\":\"int-1\",\"status\":\"resolved\",\"payload\":{\"ok\":1}},"
         "{\"interruptId\":\"int-10\",\"status\":\"resolved\"}]}}");
    /* the latest pending int-1 (of r2) is resolved; r1's stays pending */
    assert_string_equal(approval_status(r, 0), "pending");
    assert_string_equal(approval_status(r, 1), "cancelled");
    assert_string_equal(approval_status(r, 2), "resolved");
    json_t *a = json_array_get(json_object_get(ab__reducer_state(r), "approvals"), 2);
    assert_string_equal(json_string_value(json_object_get(a, "runId")), "r2");
    assert_string_equal(json_string_value(json_object_get(a, "resumedByRunId")), "r3");
    ab_reducer_destroy(&r);
}

/* A warning message cut at its size limit stays valid UTF-8. */
static void test_long_warning_is_valid_utf8(void **state)
{
    (void)state;
    ab_reducer_t *r = reducer("t");
    char ev[2048] = "{\"type\":\"ACTIVITY_DELTA\",\"activityType\":\"P\",\"patch\":[],"
                    "\"messageId\":\"x";
    for (int i = 0; i < 300; i++)
        strcat(ev, "\xc3\xa9");
    strcat(ev, "\"}");
    fold(r, "r1", 1, ev);
    json_t *w = json_array_get(json_object_get(ab__reducer_state(r), "warnings"), 0);
    const char *msg = json_string_value(json_object_get(w, "message"));
    assert_non_null(msg);
    assert_true(strlen(msg) < AB_ERROR_MESSAGE_MAX);
    assert_true(ab_utf8_valid(msg, strlen(msg)));
    ab_reducer_destroy(&r);
}

static void test_run_error_and_late_error(void **state)
{
    (void)state;
    ab_reducer_t *r = reducer("t");
    fold(r, "r0", 1, "{\"type\":\"RUN_ERROR\",\"message\":\"no model\",\"code\":\"cfg\"}");
    fold(r, "r1", 1, "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r1\"}");
    fold(r, "r1", 2, "{\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"r1\"}");
    fold(r, "r1", 3, "{\"type\":\"RUN_ERROR\",\"message\":\"late\"}");
    json_t *want =
        load("[{\"id\":\"r0\",\"status\":\"error\",\"lastSeq\":1,\"endedSeq\":1,"
             "\"error\":{\"message\":\"no model\",\"code\":\"cfg\"}},"
             "{\"id\":\"r1\",\"status\":\"error\",\"startedSeq\":1,\"lastSeq\":3,"
             "\"endedSeq\":3,\"outcome\":\"success\",\"error\":{\"message\":\"late\"}}]");
    expect_json(json_object_get(ab__reducer_state(r), "runs"), want, "runs");
    json_decref(want);
    ab_reducer_destroy(&r);
}

/* Fold every line of a stream fixture (bare events): must never fail. */
static void fold_stream(const char *path)
{
    size_t len;
    char *text = tu_read_file(path, &len);
    ab_reducer_t *r = reducer("thread-1");
    uint64_t seq = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        tu_ctx_t c;
        tu_ctx_init(&c);
        ab_error_t err = AB_ERROR_INIT;
        const ab_val_t *ev = tu_json(&c, line);
        ab_status_t st = ab_reducer_apply(r, ev, NULL, ++seq, &err);
        if (st != AB_OK && st != AB_INVALID_ARGUMENT)
            fail_msg("%s line %llu: %s", path, (unsigned long long)seq, err.message);
        tu_ctx_free(&c);
    }
    assert_int_equal(json_integer_value(json_object_get(ab__reducer_state(r), "formatVersion")),
                     AB_REDUCER_FORMAT_VERSION);
    ab_reducer_destroy(&r);
    free(text);
}

/* Valid and invalid stream fixtures: the reducer is lenient, never fails. */
static void test_stream_fixtures_fold(void **state)
{
    (void)state;
    static const char *const dirs[] = {"valid", "invalid"};
    int n = 0;
    for (size_t d = 0; d < 2; d++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/streams/%s", AB_FIXTURES_DIR, dirs[d]);
        DIR *dp = opendir(dir);
        assert_non_null(dp);
        struct dirent *de;
        while ((de = readdir(dp)) != NULL) {
            size_t l = strlen(de->d_name);
            if (l < 6 || strcmp(de->d_name + l - 6, ".jsonl") != 0)
                continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            fold_stream(path);
            n++;
        }
        closedir(dp);
    }
    assert_true(n > 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_full_run),
        cmocka_unit_test(test_golden_interrupt_resume),
        cmocka_unit_test(test_golden_parallel_tool_calls),
        cmocka_unit_test(test_golden_state_patches),
        cmocka_unit_test(test_golden_agentkit),
        cmocka_unit_test(test_golden_conversation),
        cmocka_unit_test(test_golden_tool_calls_without_parent),
        cmocka_unit_test(test_golden_metadata_attribution),
        cmocka_unit_test(test_golden_nul_bytes),
        cmocka_unit_test(test_golden_activity_after_messages_snapshot),
        cmocka_unit_test(test_empty_projection),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_message_assembly),
        cmocka_unit_test(test_messages_snapshot_keeps_positions),
        cmocka_unit_test(test_input_messages),
        cmocka_unit_test(test_tool_calls_in_messages),
        cmocka_unit_test(test_interleaved_streams),
        cmocka_unit_test(test_patch_failure_warns_and_keeps_state),
        cmocka_unit_test(test_copying_state_delta_is_bounded),
        cmocka_unit_test(test_warnings_are_bounded),
        cmocka_unit_test(test_approvals_bound_to_exact_interrupt_id),
        cmocka_unit_test(test_long_warning_is_valid_utf8),
        cmocka_unit_test(test_run_error_and_late_error),
        cmocka_unit_test(test_stream_fixtures_fold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

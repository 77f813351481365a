/*
 * test_alloc_fail.c - allocation failure injection (issue 6). A counting
 * allocator, installed with ab_set_allocator() (so it covers jansson too),
 * fails the n-th allocation of a path for n = 0, 1, 2, ... until a run of
 * the path completes without reaching the failure. Every failing run must
 * answer with an error status (never AB_OK), and once it is cleaned up
 * every allocation must have been freed. ASan catches crashes on the way.
 * The same allocator can also fill each new block with garbage, so that a
 * field the library forgets to set reads as garbage instead of a lucky 0.
 */
#include "agentbus/agui.h"
#include "agentbus/alloc.h"
#include "agentbus/codec.h"
#include "agentbus/reducer.h"
#include "agentbus/snapshot.h"
#include "jansson_internal.h"
#include "testutil.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the counting allocator ----------------------------------------- */

static struct {
    bool armed;   /* count allocations (and fail the fail_at-th) */
    long fail_at; /* index of the allocation to fail while armed */
    long count;   /* allocations seen while armed */
    bool hit;     /* the failure was injected */
    long live;    /* blocks handed out and not yet freed */
    bool poison;  /* fill each new block with 0xA5 */
} g;

static bool should_fail(void)
{
    if (!g.armed)
        return false;
    if (g.count++ == g.fail_at) {
        g.hit = true;
        return true;
    }
    return false;
}

static void *cnt_malloc(size_t n)
{
    if (should_fail())
        return NULL;
    void *p = malloc(n);
    if (p)
        g.live++;
    if (p && g.poison)
        memset(p, 0xA5, n);
    return p;
}

static void *cnt_realloc(void *p, size_t n)
{
    if (should_fail())
        return NULL;
    return realloc(p, n);
}

static void cnt_free(void *p)
{
    if (p)
        g.live--;
    free(p);
}

static void arm(void)
{
    g.armed = true;
}

static void disarm(void)
{
    g.armed = false;
}

/* Fail allocation 0, 1, 2, ... of @p path until one run needs no failure;
 * returns the number of allocation points the path has. */
static long exhaust(const char *name, ab_status_t (*path)(void))
{
    for (long n = 0; n < 1000000; n++) {
        long base = g.live;
        g.fail_at = n;
        g.count = 0;
        g.hit = false;
        ab_status_t st = path();
        disarm();
        if (g.live != base)
            fail_msg("%s: failing allocation %ld leaked %ld blocks", name, n, g.live - base);
        if (!g.hit) {
            if (st != AB_OK)
                fail_msg("%s: clean run returned %s", name, ab_status_name(st));
            printf("%s: %ld allocation points\n", name, n);
            return n;
        }
        if (st == AB_OK)
            fail_msg("%s: allocation %ld failed but the path returned AB_OK", name, n);
    }
    fail_msg("%s: never completed", name);
    return -1;
}

/* ---- helpers ---------------------------------------------------------- */

/* JSON -> msgpack, unarmed (input preparation). */
static void pack(const char *json, ab_buf_t *out)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_reset(out);
    if (ab_json_to_msgpack(json, strlen(json), 64, 1u << 20, AB_INVALID_ARGUMENT, out, &err) !=
        AB_OK)
        fail_msg("pack: %s: %s", err.message, json);
}

static const char NESTED[] =
    "{\"a\":[1,2.5,-3,true,false,null,\"s\"],\"b\":{\"c\":{\"d\":[{\"e\":\"deep\"},[],{}]}},"
    "\"long\":\"0123456789012345678901234567890123456789012345678901234567890123456789\","
    "\"n\":{\"x\":[[[[1]]]],\"y\":\"\\u00e9\"}}";

static const char EVENT[] =
    "{\"v\":1,\"thread\":\"thread-1\",\"run\":\"run-1\",\"seq\":3,\"epoch\":1,\"ts\":1700000000,"
    "\"event\":{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"tc-1\",\"toolCallName\":\"search\","
    "\"parentMessageId\":\"msg-1\"}}";

static const char PUBLISHED[] =
    "{\"op\":\"published\",\"v\":1,\"cid\":7,\"results\":["
    "{\"seq\":1,\"status\":\"accepted\",\"pos\":10},"
    "{\"seq\":2,\"status\":\"duplicate\",\"pos\":9},"
    "{\"seq\":9,\"status\":\"rejected\",\"error\":{\"code\":\"gap\",\"message\":"
    "\"seq 9 is beyond 3\",\"retryable\":false}},"
    "{\"seq\":10,\"status\":\"rejected\",\"error\":{\"code\":\"invalid_argument\","
    "\"message\":\"bad\",\"retryable\":false}}]}";

/* ---- the paths -------------------------------------------------------- */

static ab_buf_t g_in;

/* Parse g_in into a fresh doc, armed; the doc is returned for more steps. */
static ab_status_t parse_into(ab_doc_t **doc, const ab_val_t **root)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_doc_new(doc);
    if (st != AB_OK)
        return st;
    return ab_doc_parse(*doc, g_in.data, g_in.len, 1u << 20, 64, AB_INVALID_ARGUMENT, root, &err);
}

static ab_buf_t g_big; /* a document that outgrows the arena's first block */

static ab_status_t path_doc_parse(void)
{
    ab_doc_t *doc = NULL;
    const ab_val_t *root = NULL;
    ab_error_t err = AB_ERROR_INIT;
    arm();
    ab_status_t st = parse_into(&doc, &root);
    if (st == AB_OK && ab_val_get(root, "b") == NULL)
        st = AB_INTERNAL;
    if (st == AB_OK)
        st = ab_doc_parse(doc, g_big.data, g_big.len, 1u << 24, 64, AB_INVALID_ARGUMENT, &root,
                          &err);
    if (st == AB_OK && (root->type != AB_VAL_ARRAY || root->len != 2000))
        st = AB_INTERNAL;
    ab_doc_destroy(&doc);
    return st;
}

/* [{"k":"value-0","n":[0,{"x":true}]}, ...] with 2000 elements. */
static void make_big(void)
{
    size_t cap = 2000 * 64 + 16, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    text[len++] = '[';
    for (int i = 0; i < 2000; i++)
        len +=
            (size_t)snprintf(text + len, cap - len,
                             "%s{\"k\":\"value-%d\",\"n\":[%d,{\"x\":true}]}", i ? "," : "", i, i);
    text[len++] = ']';
    text[len] = '\0';
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_json_to_msgpack(text, len, 64, 1u << 24, AB_INVALID_ARGUMENT, &g_big, &err),
                     AB_OK);
    free(text);
}

static ab_status_t path_event(void)
{
    ab_doc_t *doc = NULL;
    ab_event_t ev;
    ab_agui_info_t info;
    ab_error_t err = AB_ERROR_INIT;
    arm();
    ab_status_t st = ab_doc_new(&doc);
    if (st == AB_OK)
        st = ab_event_decode(doc, g_in.data, g_in.len, NULL, &ev, &err);
    if (st == AB_OK)
        st = ab_agui_validate(ev.body, AB_AGUI_STRICT, NULL, NULL, &info, &err);
    if (st == AB_OK && (info.type != AB_AGUI_TOOL_CALL_START || ev.seq != 3))
        st = AB_INTERNAL;
    ab_doc_destroy(&doc);
    return st;
}

static ab_status_t path_published(void)
{
    ab_doc_t *doc = NULL;
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    arm();
    ab_status_t st = ab_doc_new(&doc);
    if (st == AB_OK)
        st = ab_msg_decode(doc, g_in.data, g_in.len, NULL, &m, &err);
    if (st == AB_OK &&
        (m.op != AB_OP_PUBLISHED || m.u.published.nresults != 4 ||
         m.u.published.results[2].status != AB_RESULT_REJECTED ||
         m.u.published.results[2].error == NULL || m.u.published.results[2].error->code != AB_GAP))
        st = AB_INTERNAL;
    ab_doc_destroy(&doc);
    return st;
}

static ab_status_t path_json_to_msgpack(void)
{
    ab_buf_t out = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    arm();
    ab_status_t st =
        ab_json_to_msgpack(EVENT, strlen(EVENT), 64, 1u << 20, AB_INVALID_ARGUMENT, &out, &err);
    if (st == AB_OK && out.len == 0)
        st = AB_INTERNAL;
    ab_buf_free(&out);
    return st;
}

#define MAX_LINES 64

static struct {
    size_t n;
    char run[MAX_LINES][64];
    uint64_t seq[MAX_LINES];
    ab_buf_t ev[MAX_LINES];
} g_thread;

/* Load fixture thread full-run.jsonl: each line {"run","seq","event"}. */
static void load_thread(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/threads/full-run.jsonl", AB_FIXTURES_DIR);
    size_t len;
    char *text = tu_read_file(path, &len);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        assert_true(g_thread.n < MAX_LINES);
        json_error_t je;
        json_t *env = json_loads(line, 0, &je);
        assert_non_null(env);
        size_t i = g_thread.n++;
        snprintf(g_thread.run[i], sizeof g_thread.run[i], "%s",
                 json_string_value(json_object_get(env, "run")));
        g_thread.seq[i] = (uint64_t)json_integer_value(json_object_get(env, "seq"));
        char *ev = json_dumps(json_object_get(env, "event"), JSON_COMPACT);
        assert_non_null(ev);
        memset(&g_thread.ev[i], 0, sizeof g_thread.ev[i]);
        pack(ev, &g_thread.ev[i]);
        json_decref(env);
        cnt_free(ev);
    }
    free(text);
}

static void free_thread(void)
{
    for (size_t i = 0; i < g_thread.n; i++)
        ab_buf_free(&g_thread.ev[i]);
    g_thread.n = 0;
}

static ab_status_t fold_line(ab_reducer_t *r, ab_doc_t *doc, size_t i)
{
    ab_error_t err = AB_ERROR_INIT;
    const ab_val_t *root = NULL;
    const ab_buf_t *b = &g_thread.ev[i];
    ab_status_t st =
        ab_doc_parse(doc, b->data, b->len, 1u << 20, 64, AB_INVALID_ARGUMENT, &root, &err);
    if (st == AB_OK)
        st = ab_reducer_apply(r, root, g_thread.run[i], g_thread.seq[i], &err);
    return st;
}

static ab_status_t path_reducer(void)
{
    ab_reducer_t *r = NULL;
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    arm();
    ab_status_t st = ab_doc_new(&doc);
    if (st == AB_OK)
        st = ab_reducer_new(&r, "thread-1", &err);
    for (size_t i = 0; st == AB_OK && i < g_thread.n; i++)
        st = fold_line(r, doc, i);
    if (st == AB_OK && json_array_size(json_object_get(ab__reducer_state(r), "messages")) == 0)
        st = AB_INTERNAL;
    ab_reducer_destroy(&r);
    ab_doc_destroy(&doc);
    return st;
}

/*
 * The snapshot builder: the fixture thread, then MANY_RUNS more runs taking turns (its run
 * index grows), most of them finishing (their kept events die and are compacted), and its
 * document written; then a builder made from that document (parsed beforehand, unarmed:
 * jansson's parser survives some failed allocations, so a failure there may rightly end
 * in AB_OK) folds one more event of the run left active.
 */
#define MANY_RUNS 40

static struct {
    ab_buf_t ev[3 * MANY_RUNS];
    char run[3 * MANY_RUNS][16];
    uint64_t seq[3 * MANY_RUNS];
    size_t n;
    ab_snapshot_t *doc; /* the document after every event */
} g_many;

static void many_add(int r, uint64_t seq, const char *json)
{
    size_t i = g_many.n++;
    snprintf(g_many.run[i], sizeof g_many.run[i], "mr-%d", r);
    g_many.seq[i] = seq;
    memset(&g_many.ev[i], 0, sizeof g_many.ev[i]);
    pack(json, &g_many.ev[i]);
}

static void load_many(void)
{
    char json[256];
    for (int r = 0; r < MANY_RUNS; r++) {
        snprintf(json, sizeof json,
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"thread-1\",\"runId\":\"mr-%d\"}", r);
        many_add(r, 1, json);
    }
    for (int r = 0; r < MANY_RUNS; r++) {
        snprintf(json, sizeof json, "{\"type\":\"STEP_STARTED\",\"stepName\":\"s%d\"}", r);
        many_add(r, 2, json);
    }
    for (int r = 1; r < MANY_RUNS; r++) { /* mr-0 stays active */
        snprintf(json, sizeof json,
                 "{\"type\":\"RUN_FINISHED\",\"threadId\":\"thread-1\",\"runId\":\"mr-%d\"}", r);
        many_add(r, 3, json);
    }
}

static void free_many(void)
{
    for (size_t i = 0; i < g_many.n; i++)
        ab_buf_free(&g_many.ev[i]);
    g_many.n = 0;
    ab_snapshot_destroy(&g_many.doc);
}

static ab_status_t feed_one(ab_snapshot_builder_t *b, ab_doc_t *doc, const ab_buf_t *ev,
                            const char *run, uint64_t seq, uint64_t pos)
{
    ab_error_t err = AB_ERROR_INIT;
    const ab_val_t *root = NULL;
    ab_status_t st =
        ab_doc_parse(doc, ev->data, ev->len, 1u << 20, 64, AB_INVALID_ARGUMENT, &root, &err);
    return st == AB_OK ? ab_snapshot_builder_feed(b, run, seq, pos, root, &err) : st;
}

/* Every event of the thread and of the many runs into a new builder; its msgpack in @p out. */
static ab_status_t feed_all(ab_doc_t *doc, ab_buf_t *out)
{
    ab_snapshot_builder_t *b = NULL;
    ab_error_t err = AB_ERROR_INIT;
    uint64_t pos = 0;
    ab_status_t st = ab_snapshot_builder_new(&b, "thread-1", &err);
    for (size_t i = 0; st == AB_OK && i < g_thread.n; i++)
        st = feed_one(b, doc, &g_thread.ev[i], g_thread.run[i], g_thread.seq[i], ++pos);
    for (size_t i = 0; st == AB_OK && i < g_many.n; i++)
        st = feed_one(b, doc, &g_many.ev[i], g_many.run[i], g_many.seq[i], ++pos);
    if (st == AB_OK)
        st = ab_snapshot_builder_msgpack(b, 64, 1u << 24, out, &err);
    ab_snapshot_builder_destroy(&b);
    return st;
}

static ab_status_t path_builder(void)
{
    ab_snapshot_builder_t *b = NULL;
    ab_doc_t *doc = NULL;
    ab_buf_t out = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    arm();
    ab_status_t st = ab_doc_new(&doc);
    if (st == AB_OK)
        st = feed_all(doc, &out);
    if (st == AB_OK)
        st = ab_snapshot_builder_from(&b, g_many.doc, &err);
    uint64_t pos = ab_snapshot_position(g_many.doc) + 1;
    if (st == AB_OK) /* mr-0's third event: its kept events, from the document, stay */
        st = feed_one(b, doc, &g_many.ev[MANY_RUNS - 1 + MANY_RUNS + 1], "mr-0", 3, pos);
    if (st == AB_OK && (ab_snapshot_builder_position(b) != pos ||
                        ab_snapshot_builder_msgpack(b, 64, 1u << 24, &out, &err) != AB_OK))
        st = AB_INTERNAL;
    ab_snapshot_builder_destroy(&b);
    ab_buf_free(&out);
    ab_doc_destroy(&doc);
    return st;
}

/* The document path_builder() starts its second builder from (unarmed). */
static void many_doc(void)
{
    ab_doc_t *doc = NULL;
    ab_buf_t out = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    assert_int_equal(feed_all(doc, &out), AB_OK);
    assert_int_equal(ab_snapshot_load(out.data, out.len, &g_many.doc, &err), AB_OK);
    assert_int_equal(ab_snapshot_active_count(g_many.doc), 1); /* mr-0 alone */
    assert_string_equal(ab_snapshot_active_run(g_many.doc, 0), "mr-0");
    ab_buf_free(&out);
    ab_doc_destroy(&doc);
}

static const char *const LC_EVENTS[] = {
    "{\"type\":\"RUN_STARTED\",\"threadId\":\"thread-1\",\"runId\":\"run-1\",\"protocolVersion\":"
    "\"1.0\"}",
    "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"msg-1\",\"role\":\"assistant\"}",
    "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"msg-1\",\"delta\":\"hi\"}",
    "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"tc-1\",\"toolCallName\":\"search\"}",
    "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"tc-1\",\"delta\":\"{}\"}",
    "{\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"tc-1\"}",
    "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"msg-1\"}",
    "{\"type\":\"RUN_FINISHED\",\"threadId\":\"thread-1\",\"runId\":\"run-1\"}",
};
#define LC_N (sizeof(LC_EVENTS) / sizeof(LC_EVENTS[0]))

static tu_ctx_t g_lc_ctx[LC_N];
static ab_agui_info_t g_lc_info[LC_N];

static void load_lc_events(void)
{
    for (size_t i = 0; i < LC_N; i++) {
        ab_error_t err = AB_ERROR_INIT;
        tu_ctx_init(&g_lc_ctx[i]);
        const ab_val_t *root = tu_json(&g_lc_ctx[i], LC_EVENTS[i]);
        if (ab_agui_validate(root, AB_AGUI_STRICT, NULL, NULL, &g_lc_info[i], &err) != AB_OK)
            fail_msg("schema rejects %s: %s", LC_EVENTS[i], err.message);
    }
}

static void free_lc_events(void)
{
    for (size_t i = 0; i < LC_N; i++)
        tu_ctx_free(&g_lc_ctx[i]);
}

static ab_status_t path_lifecycle(void)
{
    ab_lifecycle_t *lc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    arm();
    ab_status_t st = ab_lifecycle_new(&lc, "thread-1", 8, "run-1", 5, NULL);
    for (size_t i = 0; st == AB_OK && i < LC_N; i++)
        st = ab_lifecycle_check(lc, &g_lc_info[i], &err);
    if (st == AB_OK && ab_lifecycle_state(lc) != AB_RUN_FINISHED)
        st = AB_INTERNAL;
    ab_lifecycle_destroy(&lc);
    return st;
}

/* ---- tests ------------------------------------------------------------ */

static void test_doc_parse(void **state)
{
    (void)state;
    pack(NESTED, &g_in);
    make_big();
    assert_true(exhaust("doc_parse", path_doc_parse) > 0);
    ab_buf_free(&g_big);
}

static void test_event_decode_validate(void **state)
{
    (void)state;
    pack(EVENT, &g_in);
    assert_true(exhaust("event_decode+validate", path_event) > 0);
}

static void test_msg_decode_published(void **state)
{
    (void)state;
    pack(PUBLISHED, &g_in);
    assert_true(exhaust("msg_decode(published)", path_published) > 0);
}

static void test_json_to_msgpack(void **state)
{
    (void)state;
    assert_true(exhaust("json_to_msgpack", path_json_to_msgpack) > 0);
}

static void test_reducer_fold(void **state)
{
    (void)state;
    load_thread();
    assert_true(g_thread.n > 0);
    assert_true(exhaust("reducer fold full-run", path_reducer) > 0);
    free_thread();
}

static void test_snapshot_builder(void **state)
{
    (void)state;
    load_thread();
    load_many();
    many_doc();
    assert_true(exhaust("snapshot builder", path_builder) > 0);
    free_many();
    free_thread();
}

/* A snapshot read as JSON text reports binary depth 0 (snapshot.h), whatever its memory
 * held before: each new block is garbage here. */
static void test_json_snapshot_depth(void **state)
{
    (void)state;
    ab_doc_t *doc = NULL;
    ab_buf_t bin = AB_BUF_INIT, text = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    ab_snapshot_t *s = NULL;
    load_thread();
    load_many();
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    assert_int_equal(feed_all(doc, &bin), AB_OK);
    assert_int_equal(ab_snapshot_load(bin.data, bin.len, &s, &err), AB_OK);
    assert_true(ab_snapshot_binary_depth(s) > 0); /* the binary form's own depth */
    assert_int_equal(ab_snapshot_json(s, &text, &err), AB_OK);
    ab_snapshot_destroy(&s);
    g.poison = true;
    assert_int_equal(ab_snapshot_parse((const char *)text.data, text.len, &s, &err), AB_OK);
    assert_int_equal(ab_snapshot_binary_depth(s), 0);
    ab_snapshot_destroy(&s);
    assert_int_equal(ab_snapshot_load(text.data, text.len, &s, &err), AB_OK); /* text, loaded */
    assert_int_equal(ab_snapshot_binary_depth(s), 0);
    g.poison = false;
    ab_snapshot_destroy(&s);
    ab_buf_free(&bin);
    ab_buf_free(&text);
    ab_doc_destroy(&doc);
    free_many();
    free_thread();
}

static void test_lifecycle(void **state)
{
    (void)state;
    load_lc_events();
    assert_true(exhaust("lifecycle_check", path_lifecycle) > 0);
    free_lc_events();
}

static int teardown(void **state)
{
    (void)state;
    ab_buf_free(&g_in);
    if (g.live != 0)
        fail_msg("%ld blocks still live", g.live);
    return 0;
}

int main(void)
{
    /* Before any other agentbus or jansson call: covers jansson too. */
    ab_set_allocator(cnt_malloc, cnt_realloc, cnt_free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_doc_parse, teardown),
        cmocka_unit_test_teardown(test_event_decode_validate, teardown),
        cmocka_unit_test_teardown(test_msg_decode_published, teardown),
        cmocka_unit_test_teardown(test_json_to_msgpack, teardown),
        cmocka_unit_test_teardown(test_reducer_fold, teardown),
        cmocka_unit_test_teardown(test_snapshot_builder, teardown),
        cmocka_unit_test_teardown(test_lifecycle, teardown),
        cmocka_unit_test_teardown(test_json_snapshot_depth, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_snapshot.c - durable thread snapshots: the split property over every
 * fixture thread (snapshot of the first k events, serialized, parsed,
 * restored and continued with the rest == the projection of all events),
 * the builder's active-run bookkeeping and argument checks, and one test per
 * validator rule (a valid document broken on purpose fails with that rule).
 */
#include "testutil.h"

#include "agentbus/json.h"
#include "agentbus/jsonpatch.h"
#include "agentbus/snapshot.h"
#include "jansson_internal.h"
#include "snapshot_internal.h"
#include "value_internal.h"

#include <dirent.h>
#include <msgpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fixtures ---- */

/* The envelopes of fixture thread file @p path: [{run, seq, event}]. */
static json_t *load_thread(const char *path)
{
    size_t len;
    char *text = tu_read_file(path, &len);
    json_t *lines = json_array();
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t je;
        json_t *env = json_loads(line, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
        if (!env)
            fail_msg("%s: bad line (%s)", path, je.text);
        json_array_append_new(lines, env);
    }
    free(text);
    return lines;
}

static const char *thread_of(const json_t *lines)
{
    const json_t *ev = json_object_get(json_array_get(lines, 0), "event");
    return json_string_value(json_object_get(ev, "threadId"));
}

/* Feed lines [from, to) to @p b; line i has commit position i + 1. */
static void feed_lines(ab_snapshot_builder_t *b, const json_t *lines, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        const json_t *env = json_array_get(lines, i);
        char *ev = json_dumps(json_object_get(env, "event"), JSON_COMPACT);
        tu_ctx_t c;
        tu_ctx_init(&c);
        ab_error_t err = AB_ERROR_INIT;
        ab_status_t st =
            ab_snapshot_builder_feed(b, json_string_value(json_object_get(env, "run")),
                                     (uint64_t)json_integer_value(json_object_get(env, "seq")),
                                     i + 1, tu_json(&c, ev), &err);
        if (st != AB_OK)
            fail_msg("feed line %zu: %s (at %s)", i + 1, err.message, err.field);
        tu_ctx_free(&c);
        free(ev);
    }
}

/* Fold lines [from, to) into a plain reducer. */
static void fold_lines(ab_reducer_t *r, const json_t *lines, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        const json_t *env = json_array_get(lines, i);
        char *ev = json_dumps(json_object_get(env, "event"), JSON_COMPACT);
        tu_ctx_t c;
        tu_ctx_init(&c);
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(
            ab_reducer_apply(r, tu_json(&c, ev), json_string_value(json_object_get(env, "run")),
                             (uint64_t)json_integer_value(json_object_get(env, "seq")), &err),
            AB_OK);
        tu_ctx_free(&c);
        free(ev);
    }
}

static ab_snapshot_builder_t *builder_after(const json_t *lines, size_t k)
{
    ab_snapshot_builder_t *b = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_snapshot_builder_new(&b, thread_of(lines), &err), AB_OK);
    feed_lines(b, lines, 0, k);
    return b;
}

static json_t *document(const ab_snapshot_builder_t *b)
{
    json_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__snapshot_builder_document(b, &doc, &err), AB_OK);
    return doc;
}

/* Serialize @p doc and parse it back; fails the test on any error. */
static ab_snapshot_t *reparse(const json_t *doc)
{
    char *text = json_dumps(doc, JSON_COMPACT);
    ab_snapshot_t *s = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_snapshot_parse(text, strlen(text), &s, &err);
    if (st != AB_OK)
        fail_msg("parse: %s (at %s)\n%s", err.message, err.field, text);
    free(text);
    return s;
}

static void expect_json(const json_t *got, const json_t *want, const char *what, size_t k)
{
    if (json_equal(got, want))
        return;
    char *g = json_dumps(got, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    char *w = json_dumps(want, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    fprintf(stderr, "%s (k=%zu): got\n%s\nwant\n%s\n", what, k, g, w);
    free(g);
    free(w);
    fail_msg("%s differs at k=%zu", what, k);
}

/* Split at k: both continuation paths must equal the fold of all n events. */
/*
 * The builder's direct encoders write its document: msgpack (read back as
 * JSON) and JSON text both equal ab__snapshot_builder_document(); a limit too
 * small is AB_TOO_LARGE with the output untouched.
 */
static void check_encoders(ab_snapshot_builder_t *b, const json_t *doc, const char *name, size_t k)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_t mp = AB_BUF_INIT, text = AB_BUF_INIT, back = AB_BUF_INIT;
    assert_int_equal(ab_buf_append(&mp, "x", 1), AB_OK);
    assert_int_equal(ab_snapshot_builder_msgpack(b, 64, SIZE_MAX, &mp, &err), AB_OK);
    ab_doc_t *d = NULL;
    const ab_val_t *root = NULL;
    assert_int_equal(ab_doc_new(&d), AB_OK);
    assert_int_equal(
        ab_doc_parse(d, mp.data + 1, mp.len - 1, UINT32_MAX, 64, AB_CORRUPT, &root, &err), AB_OK);
    assert_int_equal(ab_val_to_json(root, &back), AB_OK);
    json_t *got = json_loadb((const char *)back.data, back.len, JSON_ALLOW_NUL, NULL);
    expect_json(got, doc, name, k);
    json_decref(got);
    assert_int_equal(ab_snapshot_builder_json(b, &text, &err), AB_OK);
    got = json_loadb((const char *)text.data, text.len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
                     NULL);
    expect_json(got, doc, name, k);
    json_decref(got);
    size_t len = mp.len;
    assert_int_equal(ab_snapshot_builder_msgpack(b, 64, 16, &mp, &err), AB_TOO_LARGE);
    assert_int_equal(ab_snapshot_builder_msgpack(b, 2, SIZE_MAX, &mp, &err), AB_TOO_LARGE);
    assert_int_equal(mp.len, len);
    assert_true(ab_snapshot_builder_memory(b) > 0);
    ab_doc_destroy(&d);
    ab_buf_free(&mp);
    ab_buf_free(&text);
    ab_buf_free(&back);
}

/*
 * @p mp loaded (its active events copied from where the parse found them, its depth from the
 * parse) and made from its tree alone (no record: the events packed again, the depth walked)
 * give the same depth, the tree's, and builders that write @p mp again byte for byte.
 */
static void check_recorded_and_not(const ab_buf_t *mp, const char *name, size_t k)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_doc_t *doc = NULL;
    const ab_val_t *root = NULL;
    ab_snapshot_t *s[2] = {NULL, NULL};
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    assert_int_equal(ab_doc_parse(doc, mp->data, mp->len, UINT32_MAX, 512, AB_CORRUPT, &root, &err),
                     AB_OK);
    assert_int_equal(ab_snapshot_load(mp->data, mp->len, &s[0], &err), AB_OK);
    assert_int_equal(ab__snapshot_from_binary(root, NULL, mp->len, &s[1], &err), AB_OK);
    for (int i = 0; i < 2; i++) {
        if (ab_snapshot_binary_depth(s[i]) != tu_val_depth(root))
            fail_msg("%s k=%zu: depth %u, the tree's %u (%s)", name, k,
                     ab_snapshot_binary_depth(s[i]), tu_val_depth(root), i ? "walked" : "parse");
        ab_snapshot_builder_t *c = NULL;
        ab_buf_t again = AB_BUF_INIT;
        assert_int_equal(ab_snapshot_builder_take(&c, &s[i], &err), AB_OK);
        assert_int_equal(ab_snapshot_builder_msgpack(c, UINT32_MAX, SIZE_MAX, &again, &err), AB_OK);
        if (again.len != mp->len || memcmp(again.data, mp->data, mp->len) != 0)
            fail_msg("%s k=%zu: the document %s differs from the stored bytes", name, k,
                     i ? "packed from the tree" : "from the recorded bytes");
        ab_buf_free(&again);
        ab_snapshot_builder_destroy(&c);
    }
    ab_doc_destroy(&doc);
}

/*
 * The binary stored form of @p b (what the broker stores) loads back: the loaded snapshot's
 * document is @p doc (activeEvents included), and a builder continued from it with the
 * events after k ends at @p full_doc, as from the JSON text.
 */
static void check_binary(ab_snapshot_builder_t *b, const json_t *doc, const json_t *lines, size_t k,
                         const json_t *full_doc, const char *name)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_t mp = AB_BUF_INIT, text = AB_BUF_INIT;
    assert_int_equal(ab_snapshot_builder_msgpack(b, UINT32_MAX, SIZE_MAX, &mp, &err), AB_OK);
    ab_snapshot_t *s = NULL;
    if (ab_snapshot_load(mp.data, mp.len, &s, &err) != AB_OK)
        fail_msg("%s k=%zu: binary load: %s (at %s)", name, k, err.message, err.field);
    check_recorded_and_not(&mp, name, k);
    assert_int_equal(ab_snapshot_position(s), k);
    assert_int_equal(ab_snapshot_json(s, &text, &err), AB_OK);
    json_t *got = json_loadb((const char *)text.data, text.len, JSON_ALLOW_NUL, NULL);
    expect_json(got, doc, name, k);
    json_decref(got);
    ab_snapshot_builder_t *c = NULL;
    assert_int_equal(ab_snapshot_builder_from(&c, s, &err), AB_OK);
    feed_lines(c, lines, k, json_array_size(lines));
    json_t *cont = document(c);
    expect_json(cont, full_doc, name, k);
    json_decref(cont);
    ab_snapshot_builder_destroy(&c);
    ab_snapshot_destroy(&s);
    /* the same continuation from a consumed snapshot (its trees moved, not copied) */
    assert_int_equal(ab_snapshot_load(mp.data, mp.len, &s, &err), AB_OK);
    assert_int_equal(ab_snapshot_builder_take(&c, &s, &err), AB_OK);
    assert_null(s);
    assert_int_equal(ab_snapshot_builder_position(c), k);
    /* the restored builder writes the stored bytes again, byte for byte: a broker that
     * restarts sends them as the SNAPSHOT reply instead (broker/snapshot_cmd.c) */
    ab_buf_t again = AB_BUF_INIT;
    assert_int_equal(ab_snapshot_builder_msgpack(c, UINT32_MAX, SIZE_MAX, &again, &err), AB_OK);
    if (again.len != mp.len || memcmp(again.data, mp.data, mp.len) != 0)
        fail_msg("%s k=%zu: the restored builder's document differs from the stored bytes", name,
                 k);
    ab_buf_free(&again);
    feed_lines(c, lines, k, json_array_size(lines));
    cont = document(c);
    expect_json(cont, full_doc, name, k);
    json_decref(cont);
    ab_snapshot_builder_destroy(&c);
    ab_buf_free(&mp);
    ab_buf_free(&text);
}

static void check_split(const json_t *lines, size_t k, const json_t *full_doc, const char *name)
{
    size_t n = json_array_size(lines);
    ab_snapshot_builder_t *b = builder_after(lines, k);
    json_t *doc = document(b);
    check_encoders(b, doc, name, k);
    check_binary(b, doc, lines, k, full_doc, name);
    assert_int_equal(ab_snapshot_builder_position(b), k);
    ab_snapshot_builder_destroy(&b);
    ab_snapshot_t *s = reparse(doc);
    ab_error_t err = AB_ERROR_INIT;
    ab_reducer_t *r = NULL;
    assert_int_equal(ab_snapshot_restore(s, &r, &err), AB_OK);
    fold_lines(r, lines, k, n);
    expect_json(ab__reducer_state(r), json_object_get(full_doc, "projection"), name, k);
    ab_reducer_destroy(&r);
    assert_int_equal(ab_snapshot_builder_from(&b, s, &err), AB_OK);
    feed_lines(b, lines, k, n);
    json_t *cont = document(b);
    expect_json(cont, full_doc, name, k);
    json_decref(cont);
    ab_snapshot_builder_destroy(&b);
    /* taken from the text's snapshot: the same end */
    assert_int_equal(ab_snapshot_builder_take(&b, &s, &err), AB_OK);
    assert_null(s);
    feed_lines(b, lines, k, n);
    cont = document(b);
    expect_json(cont, full_doc, name, k);
    json_decref(cont);
    ab_snapshot_builder_destroy(&b);
    assert_int_equal(ab_snapshot_builder_take(&b, &s, &err), AB_INVALID_ARGUMENT);
    json_decref(doc);
}

static size_t split_fixture(const char *path)
{
    json_t *lines = load_thread(path);
    size_t n = json_array_size(lines);
    assert_true(n > 0);
    ab_snapshot_builder_t *b = builder_after(lines, n);
    json_t *full = document(b);
    ab_snapshot_builder_destroy(&b);
    /* the builder's projection is the reducer's: fold all n plainly */
    ab_reducer_t *r = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_reducer_new(&r, thread_of(lines), &err), AB_OK);
    fold_lines(r, lines, 0, n);
    expect_json(json_object_get(full, "projection"), ab__reducer_state(r), path, n);
    ab_reducer_destroy(&r);
    for (size_t k = 0; k <= n; k++)
        check_split(lines, k, full, path);
    json_decref(full);
    json_decref(lines);
    return n;
}

/* Call @p fn for the path of every fixture thread (tests/fixtures/threads/ *.jsonl); @return
 * how many there are. */
static size_t each_fixture(void (*fn)(const char *path, void *ud), void *ud)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/threads", AB_FIXTURES_DIR);
    DIR *dp = opendir(dir);
    assert_non_null(dp);
    struct dirent *de;
    size_t files = 0;
    while ((de = readdir(dp)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 6, ".jsonl") != 0)
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        fn(path, ud);
        files++;
    }
    closedir(dp);
    return files;
}

static void split_one(const char *path, void *ud)
{
    *(size_t *)ud += split_fixture(path) + 1;
}

static void test_split_every_fixture_every_k(void **state)
{
    (void)state;
    size_t splits = 0;
    assert_true(each_fixture(split_one, &splits) >= 10);
    assert_true(splits >= 185);
}

/* ---- the builder ---- */

static json_t *thread_lines(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/threads/%s.jsonl", AB_FIXTURES_DIR, name);
    return load_thread(path);
}

/* Check activeRuns and the (run, seq) list of activeEvents of @p b. */
static void expect_active(const ab_snapshot_builder_t *b, const char *runs, const char *events)
{
    json_t *doc = document(b);
    char *got = json_dumps(json_object_get(doc, "activeRuns"), JSON_COMPACT);
    assert_string_equal(got, runs);
    free(got);
    char list[512] = "";
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(doc, "activeEvents"), i, e)
    {
        char one[64];
        snprintf(one, sizeof one, "%s%s:%lld", i ? "," : "",
                 json_string_value(json_object_get(e, "run")),
                 (long long)json_integer_value(json_object_get(e, "seq")));
        strcat(list, one);
    }
    assert_string_equal(list, events);
    json_decref(doc);
}

static void test_builder_keeps_only_active_runs(void **state)
{
    (void)state;
    json_t *lines = thread_lines("interrupt-resume");
    ab_snapshot_builder_t *b = builder_after(lines, 0);
    expect_active(b, "[]", "");
    feed_lines(b, lines, 0, 4);
    expect_active(b, "[\"run-1\"]", "run-1:1,run-1:2,run-1:3,run-1:4");
    feed_lines(b, lines, 4, 5); /* run-1 ends interrupted: its events go */
    expect_active(b, "[]", "");
    feed_lines(b, lines, 5, 7);
    expect_active(b, "[\"run-2\"]", "run-2:1,run-2:2");
    feed_lines(b, lines, 7, 8);
    expect_active(b, "[]", "");
    json_t *doc = document(b);
    json_t *want = json_loads("{\"runs\":{\"run-1\":5,\"run-2\":3},\"position\":8}", 0, NULL);
    assert_true(json_equal(json_object_get(doc, "checkpoint"), want));
    assert_int_equal(json_integer_value(json_object_get(doc, "formatVersion")),
                     AB_SNAPSHOT_FORMAT_VERSION);
    assert_string_equal(json_string_value(json_object_get(doc, "threadId")), "thread-2");
    json_decref(want);
    json_decref(doc);
    ab_snapshot_builder_destroy(&b);
    ab_snapshot_builder_destroy(&b); /* NULL-safe */
    json_decref(lines);
}

/*
 * Many runs of one thread taking turns, two thirds of them finishing, then one of those
 * started again: more runs than the builder's index starts with, so it grows while runs
 * are fed, and enough ends that the dead events are compacted away while others are still
 * kept. Whatever the index gives must be what the lookups it replaces give: the document
 * equals a plain reducer's fold, keeps exactly the live runs' events in commit order (none
 * of the restarted run's first life), and a split anywhere continues to the same document.
 */
#define MANY_RUNS 300

static json_t *many_lines(void)
{
    json_t *lines = json_array();
    char ev[256];
    for (int k = 0; k < 6; k++)
        for (int r = 0; r < MANY_RUNS; r++) {
            if (k == 5 && r % 3 == 0)
                continue;
            if (k == 0)
                snprintf(ev, sizeof ev,
                         "{\"type\":\"RUN_STARTED\",\"threadId\":\"thread-many\","
                         "\"runId\":\"run-%d\"}",
                         r);
            else if (k == 1)
                snprintf(ev, sizeof ev,
                         "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m-%d\","
                         "\"role\":\"assistant\"}",
                         r);
            else if (k < 5)
                snprintf(ev, sizeof ev,
                         "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-%d\","
                         "\"delta\":\"part %d \"}",
                         r, k);
            else
                snprintf(ev, sizeof ev,
                         "{\"type\":\"RUN_FINISHED\",\"threadId\":\"thread-many\","
                         "\"runId\":\"run-%d\"}",
                         r);
            char run[32];
            snprintf(run, sizeof run, "run-%d", r);
            json_array_append_new(lines, json_pack("{s:s,s:i,s:o}", "run", run, "seq", k + 1,
                                                   "event", json_loads(ev, 0, NULL)));
        }
    json_array_append_new(lines, json_pack("{s:s,s:i,s:{s:s,s:s,s:s}}", "run", "run-1", "seq", 7,
                                           "event", "type", "RUN_STARTED", "threadId",
                                           "thread-many", "runId", "run-1"));
    json_array_append_new(lines, json_pack("{s:s,s:i,s:{s:s,s:s,s:s}}", "run", "run-1", "seq", 8,
                                           "event", "type", "TEXT_MESSAGE_START", "messageId",
                                           "m-1b", "role", "assistant"));
    return lines;
}

static void test_builder_many_runs(void **state)
{
    (void)state;
    json_t *lines = many_lines();
    size_t n = json_array_size(lines);
    ab_snapshot_builder_t *b = builder_after(lines, n);
    json_t *doc = document(b);
    ab_reducer_t *r = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_reducer_new(&r, "thread-many", &err), AB_OK);
    fold_lines(r, lines, 0, n);
    expect_json(json_object_get(doc, "projection"), ab__reducer_state(r), "many runs", n);
    json_t *events = json_object_get(doc, "activeEvents");
    size_t i, kept = 0;
    json_t *line;
    json_array_foreach(lines, i, line)
    {
        int run = atoi(json_string_value(json_object_get(line, "run")) + 4);
        if (run % 3 != 0 && (run != 1 || json_integer_value(json_object_get(line, "seq")) < 7))
            continue;
        json_t *e = json_array_get(events, kept++);
        assert_true(json_equal(json_object_get(e, "run"), json_object_get(line, "run")));
        assert_int_equal(json_integer_value(json_object_get(e, "pos")), i + 1);
    }
    assert_int_equal(json_array_size(events), kept);
    assert_int_equal(kept, (size_t)(MANY_RUNS / 3) * 5 + 2);
    assert_int_equal(json_array_size(json_object_get(doc, "activeRuns")), MANY_RUNS / 3 + 1);
    json_t *runs = json_object_get(json_object_get(doc, "checkpoint"), "runs");
    assert_int_equal(json_integer_value(json_object_get(runs, "run-3")), 5);
    assert_int_equal(json_integer_value(json_object_get(runs, "run-2")), 6);
    assert_int_equal(json_integer_value(json_object_get(runs, "run-1")), 8);
    for (size_t k = 1; k < n; k += n / 5)
        check_split(lines, k, doc, "many runs");
    ab_reducer_destroy(&r);
    ab_snapshot_builder_destroy(&b);
    json_decref(doc);
    json_decref(lines);
}

/* The active runs of projection @p p by a walk of all its runs, in its order. */
static json_t *active_walk(const json_t *p)
{
    json_t *ids = json_array();
    size_t i;
    json_t *run;
    json_array_foreach(json_object_get(p, "runs"), i, run)
    {
        if (strcmp(json_string_value(json_object_get(run, "status")), "active") == 0)
            json_array_append(ids, json_object_get(run, "id"));
    }
    return ids;
}

/* Feed @p lines one at a time: after each the builder's count of active runs (snapshot.c
 * invariant 5) is the walk's, also for a builder restored from its document; at the end the
 * document lists the runs the walk finds, in the projection's order. */
static void check_active_count(const json_t *lines, const char *thread)
{
    ab_snapshot_builder_t *b = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_snapshot_builder_new(&b, thread, &err), AB_OK);
    size_t n = json_array_size(lines);
    for (size_t i = 0; i < n; i++) {
        feed_lines(b, lines, i, i + 1);
        json_t *walk = active_walk(ab__reducer_state(ab_snapshot_builder_reducer(b)));
        assert_int_equal(b->nactive, json_array_size(walk));
        if (i % 97 == 0 || i + 1 == n) {
            json_t *doc = document(b);
            assert_true(json_equal(json_object_get(doc, "activeRuns"), walk));
            ab_snapshot_t *s = reparse(doc);
            ab_snapshot_builder_t *back = NULL;
            assert_int_equal(ab_snapshot_builder_from(&back, s, &err), AB_OK);
            assert_int_equal(back->nactive, json_array_size(walk));
            ab_snapshot_builder_destroy(&back);
            ab_snapshot_destroy(&s);
            json_decref(doc);
        }
        json_decref(walk);
    }
    ab_snapshot_builder_destroy(&b);
}

static void active_count_of(const char *path, void *ud)
{
    (void)ud;
    json_t *fx = load_thread(path);
    check_active_count(fx, thread_of(fx));
    json_decref(fx);
}

static void test_active_count_follows_statuses(void **state)
{
    (void)state;
    json_t *lines = many_lines(); /* runs end in turn; run-1 starts again among them */
    check_active_count(lines, "thread-many");
    json_decref(lines);
    assert_true(each_fixture(active_count_of, NULL) >= 10);
}

static void expect_refused(ab_snapshot_builder_t *b, const char *run, uint64_t seq, uint64_t pos,
                           const char *event, const char *field)
{
    json_t *before = document(b);
    tu_ctx_t c;
    tu_ctx_init(&c);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_snapshot_builder_feed(b, run, seq, pos, tu_json(&c, event), &err),
                     AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, field);
    tu_ctx_free(&c);
    json_t *after = document(b);
    assert_true(json_equal(before, after));
    json_decref(before);
    json_decref(after);
}

/* ---- the binary form written wide ---- */

static void put_be(ab_buf_t *out, uint8_t tag, uint64_t v, int n)
{
    uint8_t b[9] = {tag};
    for (int i = 0; i < n; i++)
        b[1 + i] = (uint8_t)(v >> (8 * (n - 1 - i)));
    assert_int_equal(ab_buf_append(out, b, (size_t)n + 1), AB_OK);
}

/* @p o as msgpack with the widest head of each kind (int 64, float 64, str 32, array 32,
 * map 32): the same values in other bytes than the builder writes. */
static void pack_wide(ab_buf_t *out, const msgpack_object *o)
{
    double f;
    uint64_t bits;
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: put_be(out, 0xc0, 0, 0); break;
    case MSGPACK_OBJECT_BOOLEAN: put_be(out, o->via.boolean ? 0xc3 : 0xc2, 0, 0); break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: put_be(out, 0xcf, o->via.u64, 8); break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: put_be(out, 0xd3, (uint64_t)o->via.i64, 8); break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        f = o->via.f64;
        memcpy(&bits, &f, sizeof bits);
        put_be(out, 0xcb, bits, 8);
        break;
    case MSGPACK_OBJECT_STR:
        put_be(out, 0xdb, o->via.str.size, 4);
        assert_int_equal(ab_buf_append(out, o->via.str.ptr, o->via.str.size), AB_OK);
        break;
    case MSGPACK_OBJECT_ARRAY:
        put_be(out, 0xdd, o->via.array.size, 4);
        for (uint32_t i = 0; i < o->via.array.size; i++)
            pack_wide(out, &o->via.array.ptr[i]);
        break;
    case MSGPACK_OBJECT_MAP:
        put_be(out, 0xdf, o->via.map.size, 4);
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            pack_wide(out, &o->via.map.ptr[i].key);
            pack_wide(out, &o->via.map.ptr[i].val);
        }
        break;
    default: fail_msg("pack_wide: msgpack type %d", (int)o->type);
    }
}

/* The stored document of @p b, written wide. */
static void wide_doc(ab_snapshot_builder_t *b, ab_buf_t *out)
{
    ab_buf_t mp = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_snapshot_builder_msgpack(b, UINT32_MAX, SIZE_MAX, &mp, &err), AB_OK);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, (const char *)mp.data, mp.len, NULL),
                     MSGPACK_UNPACK_SUCCESS);
    pack_wide(out, &u.data);
    msgpack_unpacked_destroy(&u);
    ab_buf_free(&mp);
}

/*
 * A stored document whose every value has another encoding than the builder's loads to the
 * same snapshot, and its active events are kept as the stored bytes (the builder continued
 * from it writes them as they were: a longer document), which a continuation then folds and
 * writes as from the builder's own bytes.
 */
static void test_binary_wide_encodings(void **state)
{
    (void)state;
    json_t *lines = thread_lines("full-run");
    size_t n = json_array_size(lines), k = n / 2;
    ab_snapshot_builder_t *b = builder_after(lines, k);
    json_t *doc = document(b);
    assert_true(json_array_size(json_object_get(doc, "activeEvents")) > 0);
    ab_buf_t wide = AB_BUF_INIT, text = AB_BUF_INIT, a = AB_BUF_INIT, w = AB_BUF_INIT;
    wide_doc(b, &wide);
    ab_error_t err = AB_ERROR_INIT;
    ab_snapshot_t *s = NULL;
    if (ab_snapshot_load(wide.data, wide.len, &s, &err) != AB_OK)
        fail_msg("wide load: %s (at %s)", err.message, err.field);
    assert_int_equal(ab_snapshot_json(s, &text, &err), AB_OK);
    json_t *got = json_loadb((const char *)text.data, text.len, JSON_ALLOW_NUL, NULL);
    expect_json(got, doc, "wide", k);
    ab_snapshot_builder_t *c = NULL;
    assert_int_equal(ab_snapshot_builder_take(&c, &s, &err), AB_OK);
    assert_int_equal(ab_snapshot_builder_msgpack(b, UINT32_MAX, SIZE_MAX, &a, &err), AB_OK);
    assert_int_equal(ab_snapshot_builder_msgpack(c, UINT32_MAX, SIZE_MAX, &w, &err), AB_OK);
    assert_true(w.len > a.len); /* the kept events are the wide bytes */
    feed_lines(b, lines, k, n);
    feed_lines(c, lines, k, n);
    json_t *want = document(b), *cont = document(c);
    expect_json(cont, want, "wide continued", k);
    json_decref(want);
    json_decref(cont);
    json_decref(got);
    json_decref(doc);
    json_decref(lines);
    ab_snapshot_builder_destroy(&b);
    ab_snapshot_builder_destroy(&c);
    ab_buf_free(&wide);
    ab_buf_free(&text);
    ab_buf_free(&a);
    ab_buf_free(&w);
}

static void test_builder_refuses_bad_feed(void **state)
{
    (void)state;
    json_t *lines = thread_lines("full-run");
    ab_snapshot_builder_t *b = builder_after(lines, 3);
    const char *ev = "{\"type\":\"STEP_STARTED\",\"stepName\":\"s\"}";
    expect_refused(b, "run-1", 5, 4, ev, "seq");      /* gap */
    expect_refused(b, "run-1", 3, 4, ev, "seq");      /* repeat */
    expect_refused(b, "run-9", 2, 4, ev, "seq");      /* a new run starts at 1 */
    expect_refused(b, "run-1", 4, 3, ev, "pos");      /* position does not grow */
    expect_refused(b, "", 1, 4, ev, "run");           /* invalid run id */
    expect_refused(b, "run-1", 4, 4, "[1]", "/type"); /* not an event */
    ab_error_t err = AB_ERROR_INIT;
    ab_snapshot_builder_t *x = NULL;
    assert_int_equal(ab_snapshot_builder_new(&x, "bad\x01id", &err), AB_INVALID_ARGUMENT);
    assert_int_equal(ab_snapshot_builder_new(&x, NULL, &err), AB_INVALID_ARGUMENT);
    assert_int_equal(ab_snapshot_builder_from(&x, NULL, &err), AB_INVALID_ARGUMENT);
    assert_int_equal(ab__snapshot_builder_document(NULL, NULL, &err), AB_INVALID_ARGUMENT);
    assert_null(x);
    ab_snapshot_builder_destroy(&b);
    json_decref(lines);
}

/* ---- the validator: one rule each ---- */

/* interrupt-resume after 7 events: run-1 interrupted, run-2 active (2 events). */
static json_t *base_doc(void)
{
    json_t *lines = thread_lines("interrupt-resume");
    ab_snapshot_builder_t *b = builder_after(lines, 7);
    json_t *doc = document(b);
    ab_snapshot_builder_destroy(&b);
    json_decref(lines);
    return doc;
}

/* The binary stored form of JSON @p text is refused by ab_snapshot_load() exactly as the
 * text was (@p want: the text's error): same code, rule, field and message. */
static void expect_rule_binary(const char *text, const ab_error_t *want)
{
    ab_buf_t mp = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(
        ab_json_to_msgpack(text, strlen(text), 512, UINT32_MAX, AB_INVALID_ARGUMENT, &mp, &err),
        AB_OK);
    ab_snapshot_t *s = NULL;
    assert_int_equal(ab_snapshot_load(mp.data, mp.len, &s, &err), want->code);
    assert_null(s);
    assert_string_equal(err.field, want->field);
    assert_string_equal(err.message, want->message);
    assert_string_equal(ab_error_detail(&err, "rule")->s, ab_error_detail(want, "rule")->s);
    ab_buf_free(&mp);
}

/* Apply JSON Patch @p patch to the base document; expect rule @p rule. */
static void expect_rule(const char *patch, const char *rule, const char *field)
{
    json_t *doc = base_doc();
    json_t *p = json_loads(patch, 0, NULL);
    assert_non_null(p);
    ab_error_t err = AB_ERROR_INIT;
    if (ab__jsonpatch_apply(&doc, p, &err) != AB_OK)
        fail_msg("patch %s: %s", patch, err.message);
    json_decref(p);
    char *text = json_dumps(doc, JSON_COMPACT | JSON_ENCODE_ANY);
    ab_snapshot_t *s = NULL;
    ab_error_clear(&err);
    assert_int_equal(ab_snapshot_parse(text, strlen(text), &s, &err), AB_CORRUPT);
    assert_null(s);
    tu_assert_error(&err, AB_CORRUPT, field);
    const ab_error_detail_t *d = ab_error_detail(&err, "rule");
    if (!d || strcmp(d->s, rule) != 0)
        fail_msg("%s: expected rule %s, got %s (%s)", patch, rule, d ? d->s : "none", err.message);
    char quoted[64];
    snprintf(quoted, sizeof quoted, "'%s'", rule);
    assert_non_null(strstr(err.message, quoted));
    expect_rule_binary(text, &err);
    free(text);
    json_decref(doc);
}

static void test_valid_documents_pass(void **state)
{
    (void)state;
    json_t *doc = base_doc();
    ab_snapshot_t *s = reparse(doc);
    assert_int_equal(ab_snapshot_position(s), 7);
    assert_true(json_equal(ab__snapshot_document(s), doc));
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__snapshot_validate(doc, &err), AB_OK);
    assert_int_equal(ab__snapshot_validate(NULL, &err), AB_INVALID_ARGUMENT);
    ab_reducer_t *r = NULL;
    assert_int_equal(ab_snapshot_restore(NULL, &r, &err), AB_INVALID_ARGUMENT);
    assert_int_equal(ab_snapshot_parse(NULL, 0, &s, &err), AB_INVALID_ARGUMENT);
    ab_snapshot_destroy(&s);
    ab_snapshot_destroy(&s);
    json_decref(doc);
}

static void test_rule_json(void **state)
{
    (void)state;
    static const char *const bad[] = {"{", "[]", "{\"a\":1,\"a\":2}", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ab_snapshot_t *s = NULL;
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab_snapshot_parse(bad[i], strlen(bad[i]), &s, &err), AB_CORRUPT);
        assert_string_equal(ab_error_detail(&err, "rule")->s, "json");
        assert_null(s);
    }
    /* the binary form: a map cut short, trailing bytes, a bad string inside */
    static const uint8_t *const bin[] = {(const uint8_t *)"\x81\xa3"
                                                          "abc",
                                         (const uint8_t *)"\x80\x01",
                                         (const uint8_t *)"\x81\xa1\xff\x01"};
    static const size_t binlen[] = {5, 2, 4};
    for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++) {
        ab_snapshot_t *s = NULL;
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab_snapshot_load(bin[i], binlen[i], &s, &err), AB_CORRUPT);
        assert_string_equal(ab_error_detail(&err, "rule")->s, "msgpack");
        assert_non_null(strstr(err.message, "snapshot rule 'msgpack'"));
        assert_null(s);
    }
    /* an empty map is a binary document that breaks the first rule, as "{}" does */
    ab_snapshot_t *s = NULL;
    ab_error_t e1 = AB_ERROR_INIT, e2 = AB_ERROR_INIT;
    assert_int_equal(ab_snapshot_load((const uint8_t *)"\x80", 1, &s, &e1), AB_CORRUPT);
    assert_int_equal(ab_snapshot_parse("{}", 2, &s, &e2), AB_CORRUPT);
    assert_string_equal(e1.message, e2.message);
    assert_int_equal(ab_snapshot_load(NULL, 0, &s, &e1), AB_INVALID_ARGUMENT);
}

#define RULE_TEST(fn, rule, ...)                                                                   \
    static void fn(void **state)                                                                   \
    {                                                                                              \
        (void)state;                                                                               \
        static const char *const cases[][2] = {__VA_ARGS__};                                       \
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)                                \
            expect_rule(cases[i][0], rule, cases[i][1]);                                           \
    }

RULE_TEST(test_rule_format_version, "format-version",
          {"[{\"op\":\"remove\",\"path\":\"/formatVersion\"}]", "/formatVersion"},
          {"[{\"op\":\"replace\",\"path\":\"/formatVersion\",\"value\":2}]", "/formatVersion"},
          {"[{\"op\":\"replace\",\"path\":\"/formatVersion\",\"value\":\"1\"}]", "/formatVersion"})
RULE_TEST(test_rule_thread_id, "thread-id",
          {"[{\"op\":\"remove\",\"path\":\"/threadId\"}]", "/threadId"},
          {"[{\"op\":\"replace\",\"path\":\"/threadId\",\"value\":\"\"}]", "/threadId"},
          {"[{\"op\":\"replace\",\"path\":\"/threadId\",\"value\":\"a\\u0001b\"}]", "/threadId"})
RULE_TEST(test_rule_projection, "projection",
          {"[{\"op\":\"remove\",\"path\":\"/projection\"}]", "/projection"},
          {"[{\"op\":\"replace\",\"path\":\"/projection\",\"value\":[]}]", "/projection"})
RULE_TEST(test_rule_projection_key, "projection-key",
          {"[{\"op\":\"remove\",\"path\":\"/projection/widgets\"}]", "/projection/widgets"},
          {"[{\"op\":\"remove\",\"path\":\"/projection/state\"}]", "/projection/state"},
          {"[{\"op\":\"replace\",\"path\":\"/projection/messages\",\"value\":{}}]",
           "/projection/messages"},
          {"[{\"op\":\"remove\",\"path\":\"/projection/formatVersion\"}]",
           "/projection/formatVersion"},
          /* a projection of the previous format (stored by an older build) */
          {"[{\"op\":\"replace\",\"path\":\"/projection/formatVersion\",\"value\":1}]",
           "/projection/formatVersion"})
RULE_TEST(test_rule_projection_thread, "projection-thread",
          {"[{\"op\":\"replace\",\"path\":\"/projection/threadId\",\"value\":\"other\"}]",
           "/projection/threadId"})
RULE_TEST(test_rule_projection_run, "projection-run",
          {"[{\"op\":\"replace\",\"path\":\"/projection/runs/0/status\",\"value\":\"weird\"}]",
           "/projection/runs/0"},
          {"[{\"op\":\"remove\",\"path\":\"/projection/runs/1/lastSeq\"}]", "/projection/runs/1"},
          {"[{\"op\":\"copy\",\"from\":\"/projection/runs/0\",\"path\":\"/projection/runs/-\"}]",
           "/projection/runs/2"})
RULE_TEST(test_rule_lanes, "lanes", {"[{\"op\":\"remove\",\"path\":\"/lanes\"}]", "/lanes"},
          {"[{\"op\":\"add\",\"path\":\"/lanes/bogus\",\"value\":\"x\"}]", "/lanes/bogus"},
          {"[{\"op\":\"add\",\"path\":\"/lanes/text\\u001f\",\"value\":5}]", NULL})
RULE_TEST(test_rule_checkpoint, "checkpoint",
          {"[{\"op\":\"remove\",\"path\":\"/checkpoint\"}]", "/checkpoint"},
          {"[{\"op\":\"remove\",\"path\":\"/checkpoint/position\"}]", "/checkpoint"},
          {"[{\"op\":\"replace\",\"path\":\"/checkpoint/position\",\"value\":-1}]", "/checkpoint"},
          {"[{\"op\":\"replace\",\"path\":\"/checkpoint/runs\",\"value\":[]}]", "/checkpoint"})
RULE_TEST(test_rule_checkpoint_seq, "checkpoint-seq",
          {"[{\"op\":\"replace\",\"path\":\"/checkpoint/runs/run-1\",\"value\":0}]",
           "/checkpoint/runs/run-1"},
          {"[{\"op\":\"replace\",\"path\":\"/checkpoint/runs/run-1\",\"value\":\"5\"}]",
           "/checkpoint/runs/run-1"})
RULE_TEST(test_rule_checkpoint_runs, "checkpoint-runs",
          {"[{\"op\":\"replace\",\"path\":\"/checkpoint/runs/run-1\",\"value\":4}]",
           "/checkpoint/runs/run-1"},
          {"[{\"op\":\"add\",\"path\":\"/checkpoint/runs/run-9\",\"value\":1}]",
           "/checkpoint/runs/run-9"},
          {"[{\"op\":\"remove\",\"path\":\"/checkpoint/runs/run-1\"}]", "/checkpoint/runs"})
RULE_TEST(test_rule_active_runs, "active-runs",
          {"[{\"op\":\"remove\",\"path\":\"/activeRuns\"}]", "/activeRuns"},
          {"[{\"op\":\"add\",\"path\":\"/activeRuns/-\",\"value\":\"run-2\"}]", "/activeRuns/1"},
          {"[{\"op\":\"add\",\"path\":\"/activeRuns/-\",\"value\":7}]", "/activeRuns/1"})
RULE_TEST(test_rule_active_run_unknown, "active-run-unknown",
          {"[{\"op\":\"add\",\"path\":\"/activeRuns/-\",\"value\":\"run-9\"}]", "/activeRuns/1"})
RULE_TEST(test_rule_active_run_terminal, "active-run-terminal",
          {"[{\"op\":\"add\",\"path\":\"/activeRuns/0\",\"value\":\"run-1\"}]", "/activeRuns/0"})
RULE_TEST(test_rule_active_run_missing, "active-run-missing",
          {"[{\"op\":\"replace\",\"path\":\"/activeRuns\",\"value\":[]}]", "/projection/runs/1"})
RULE_TEST(test_rule_active_events, "active-events",
          {"[{\"op\":\"remove\",\"path\":\"/activeEvents\"}]", "/activeEvents"},
          {"[{\"op\":\"remove\",\"path\":\"/activeEvents/0/event/type\"}]", "/activeEvents/0"},
          {"[{\"op\":\"replace\",\"path\":\"/activeEvents/0/seq\",\"value\":0}]",
           "/activeEvents/0"},
          {"[{\"op\":\"remove\",\"path\":\"/activeEvents/1/pos\"}]", "/activeEvents/1"})
RULE_TEST(test_rule_active_event_run, "active-event-run",
          {"[{\"op\":\"replace\",\"path\":\"/activeEvents/0/run\",\"value\":\"run-1\"}]",
           "/activeEvents/0"})
RULE_TEST(test_rule_active_event_start, "active-event-start",
          {"[{\"op\":\"remove\",\"path\":\"/activeEvents/0\"}]", "/activeEvents/0"})
RULE_TEST(test_rule_active_event_order, "active-event-order",
          {"[{\"op\":\"move\",\"from\":\"/activeEvents/1\",\"path\":\"/activeEvents/0\"},"
           "{\"op\":\"replace\",\"path\":\"/activeEvents/0/seq\",\"value\":1},"
           "{\"op\":\"replace\",\"path\":\"/activeEvents/1/seq\",\"value\":3}]",
           "/activeEvents/1"},
          {"[{\"op\":\"copy\",\"from\":\"/activeEvents/0\",\"path\":\"/activeEvents/1\"}]",
           "/activeEvents/1"})
RULE_TEST(test_rule_active_event_position, "active-event-position",
          {"[{\"op\":\"replace\",\"path\":\"/activeEvents/1/pos\",\"value\":6}]",
           "/activeEvents/1"},
          {"[{\"op\":\"replace\",\"path\":\"/activeEvents/1/pos\",\"value\":99}]",
           "/activeEvents/1"})
RULE_TEST(test_rule_active_event_tail, "active-event-tail",
          {"[{\"op\":\"remove\",\"path\":\"/activeEvents/1\"}]", "/activeEvents"},
          {"[{\"op\":\"replace\",\"path\":\"/activeEvents\",\"value\":[]}]", "/activeEvents"})

static void test_reducer_from_state_checks(void **state)
{
    (void)state;
    json_t *doc = base_doc();
    json_t *proj = json_object_get(doc, "projection");
    ab_reducer_t *r = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__reducer_from_state(&r, proj, json_object_get(doc, "lanes"), &err), AB_OK);
    assert_true(json_equal(ab__reducer_state(r), proj));
    ab_reducer_destroy(&r);
    assert_int_equal(ab__reducer_from_state(&r, NULL, NULL, &err), AB_INVALID_ARGUMENT);
    json_t *lanes = json_pack("{s:i}", "text\x1f", 1);
    ab_error_clear(&err);
    assert_int_equal(ab__reducer_from_state(&r, proj, lanes, &err), AB_INVALID_ARGUMENT);
    json_decref(lanes);
    json_object_del(proj, "widgets");
    ab_error_clear(&err);
    assert_int_equal(ab__reducer_from_state(&r, proj, NULL, &err), AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "/widgets");
    assert_null(r);
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_every_fixture_every_k),
        cmocka_unit_test(test_builder_keeps_only_active_runs),
        cmocka_unit_test(test_builder_many_runs),
        cmocka_unit_test(test_active_count_follows_statuses),
        cmocka_unit_test(test_builder_refuses_bad_feed),
        cmocka_unit_test(test_binary_wide_encodings),
        cmocka_unit_test(test_valid_documents_pass),
        cmocka_unit_test(test_reducer_from_state_checks),
        cmocka_unit_test(test_rule_json),
        cmocka_unit_test(test_rule_format_version),
        cmocka_unit_test(test_rule_thread_id),
        cmocka_unit_test(test_rule_projection),
        cmocka_unit_test(test_rule_projection_key),
        cmocka_unit_test(test_rule_projection_thread),
        cmocka_unit_test(test_rule_projection_run),
        cmocka_unit_test(test_rule_lanes),
        cmocka_unit_test(test_rule_checkpoint),
        cmocka_unit_test(test_rule_checkpoint_seq),
        cmocka_unit_test(test_rule_checkpoint_runs),
        cmocka_unit_test(test_rule_active_runs),
        cmocka_unit_test(test_rule_active_run_unknown),
        cmocka_unit_test(test_rule_active_run_terminal),
        cmocka_unit_test(test_rule_active_run_missing),
        cmocka_unit_test(test_rule_active_events),
        cmocka_unit_test(test_rule_active_event_run),
        cmocka_unit_test(test_rule_active_event_start),
        cmocka_unit_test(test_rule_active_event_order),
        cmocka_unit_test(test_rule_active_event_position),
        cmocka_unit_test(test_rule_active_event_tail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

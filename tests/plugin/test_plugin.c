/*
 * test_plugin.c - the plugin loader (built-in, by path, refused tables) and
 * the SQLite plugin through its function table: contiguous positions, all
 * or nothing batches, reads, claims, heads, exact bytes, the directory lock,
 * a reader beside an open write transaction and reopening.
 *
 * Each test gets a fresh directory from mkdtemp() and removes it afterwards.
 */
#include "agentbus/codec.h"
#include "agentbus/plugin.h"
#include "loader.h"
#include "store.h"
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fx {
    char dir[64];
    const ab_plugin_t *p;
    ab_plugin_db_t *db;
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/ab_plugin_XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    f->p = ab__plugin_sqlite();
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    if (f->db)
        f->p->close(f->db);
    DIR *d = opendir(f->dir);
    struct dirent *e;
    char path[512];
    while (d && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", f->dir, e->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(f->dir);
    free(f);
    return 0;
}

static ab_str_t S(const char *s)
{
    return (ab_str_t){.ptr = s, .len = strlen(s)};
}

static ab_plugin_db_t *open_db(const ab_plugin_t *p, const char *dir, bool readonly)
{
    ab_plugin_open_opts_t o = {.data_dir = dir, .readonly = readonly};
    ab_plugin_db_t *db = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = p->open(&o, &db, &err);
    if (s != AB_OK)
        fail_msg("open %s: %s: %s", dir, ab_status_name(s), err.message);
    return db;
}

static ab_append_event_t ev(const char *thread, const char *run, uint64_t seq, const char *body)
{
    return (ab_append_event_t){.thread = S(thread),
                               .run = S(run),
                               .seq = seq,
                               .epoch = 1,
                               .bytes = (const uint8_t *)body,
                               .len = strlen(body)};
}

static uint64_t append_ok(fx_t *f, const ab_append_event_t *evs, size_t n)
{
    ab_error_t err = AB_ERROR_INIT;
    uint64_t first = 0;
    ab_status_t s = f->p->append_batch(f->db, evs, n, 4242, &first, &err);
    if (s != AB_OK)
        fail_msg("append_batch: %s: %s", ab_status_name(s), err.message);
    return first;
}

static uint64_t head_pos(fx_t *f)
{
    ab_error_t err = AB_ERROR_INIT;
    uint64_t pos = 99;
    assert_int_equal(f->p->head_pos(f->db, &pos, &err), AB_OK);
    return pos;
}

/* Collects rows as "thread/run#seq@pos=body;" */
typedef struct acc {
    char text[4096];
} acc_t;

static int collect(void *ud, const ab_row_t *r)
{
    acc_t *a = ud;
    size_t used = strlen(a->text);
    snprintf(a->text + used, sizeof a->text - used, "%.*s/%.*s#%llu@%llu=%.*s;", (int)r->thread.len,
             r->thread.ptr, (int)r->run.len, r->run.ptr, (unsigned long long)r->seq,
             (unsigned long long)r->pos, (int)r->len, (const char *)r->bytes);
    return 0;
}

static const char *read_text(fx_t *f, ab_plugin_db_t *db, ab_read_t req, acc_t *a)
{
    memset(a, 0, sizeof *a);
    ab_error_t err = AB_ERROR_INIT;
    uint32_t n = 0;
    ab_status_t s = f->p->read(db, &req, collect, a, &n, &err);
    if (s != AB_OK)
        fail_msg("read: %s: %s", ab_status_name(s), err.message);
    return a->text;
}

/* ---- loader ------------------------------------------------------------ */

static void test_load_builtin(void **state)
{
    (void)state;
    ab_plugin_lib_t lib = {0};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__plugin_load(NULL, &lib, &err), AB_OK);
    assert_ptr_equal(lib.plugin, ab__plugin_sqlite());
    assert_null(lib.dl);
    assert_string_equal(lib.plugin->name, "sqlite");
    ab__plugin_unload(&lib);
    assert_int_equal(ab__plugin_load("sqlite", &lib, &err), AB_OK);
    assert_int_equal(lib.plugin->abi_version, AB_PLUGIN_ABI_VERSION);
    ab__plugin_unload(&lib);
    assert_int_equal(ab__plugin_load("rocksdb", &lib, &err), AB_NOT_FOUND);
    assert_non_null(strstr(err.message, "rocksdb"));
}

static void test_load_module_by_path(void **state)
{
    fx_t *f = *state;
    ab_plugin_lib_t lib = {0};
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = ab__plugin_load(AB_PLUGIN_MODULE, &lib, &err);
    if (s != AB_OK)
        fail_msg("load %s: %s", AB_PLUGIN_MODULE, err.message);
    assert_non_null(lib.dl);
    assert_ptr_not_equal(lib.plugin, ab__plugin_sqlite()); /* the module's own copy */
    assert_string_equal(lib.plugin->name, "sqlite");
    f->p = lib.plugin;
    f->db = open_db(f->p, f->dir, false);
    ab_append_event_t evs[] = {ev("t", "r", 1, "one"), ev("t", "r", 2, "two")};
    assert_int_equal(append_ok(f, evs, 2), 1);
    acc_t a;
    ab_read_t req = {.scope = AB_REPLAY_RUN, .thread = S("t"), .run = S("r"), .limit = 10};
    assert_string_equal(read_text(f, f->db, req, &a), "t/r#1@1=one;t/r#2@2=two;");
    f->p->close(f->db);
    f->db = NULL;
    f->p = ab__plugin_sqlite();
    ab__plugin_unload(&lib);
    assert_null(lib.dl);
}

static void test_load_missing_file(void **state)
{
    (void)state;
    ab_plugin_lib_t lib = {0};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__plugin_load("/nonexistent/libnope.so", &lib, &err), AB_NOT_FOUND);
    assert_non_null(strstr(err.message, "/nonexistent/libnope.so"));
    assert_non_null(strstr(err.message, "No such file")); /* dlerror() text */
    assert_null(lib.plugin);
}

/* A module whose table claims ABI @p theirs is refused, naming both versions. */
static void assert_abi_refused(const char *path, int theirs)
{
    ab_plugin_lib_t lib = {0};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__plugin_load(path, &lib, &err), AB_UNSUPPORTED);
    char want[96];
    snprintf(want, sizeof want, "was built for ABI %d, this broker speaks ABI %d (and loads %d)",
             theirs, AB_PLUGIN_ABI_VERSION, AB_PLUGIN_ABI_OLDEST);
    if (strstr(err.message, want) == NULL)
        fail_msg("message '%s' lacks '%s'", err.message, want);
    tu_assert_error(&err, AB_UNSUPPORTED, "abi_version");
    const ab_error_detail_t *d = ab_error_detail(&err, "expected");
    assert_non_null(d);
    assert_int_equal(d->i, AB_PLUGIN_ABI_VERSION);
    d = ab_error_detail(&err, "actual");
    assert_non_null(d);
    assert_int_equal(d->i, theirs);
    assert_null(lib.plugin);
    assert_null(lib.dl);
}

static void test_load_wrong_abi(void **state)
{
    (void)state;
    assert_abi_refused(AB_BAD_ABI_MODULE, AB_PLUGIN_ABI_VERSION + 1);
}

/* A module built for an ABI older than the oldest one loaded is refused too. */
static void test_load_previous_abi(void **state)
{
    (void)state;
    assert_abi_refused(AB_BAD_OLD_MODULE, AB_PLUGIN_ABI_OLDEST - 1);
}

static void test_load_null_function(void **state)
{
    (void)state;
    ab_plugin_lib_t lib = {0};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__plugin_load(AB_BAD_NULLFN_MODULE, &lib, &err), AB_INVALID_CONFIG);
    tu_assert_error(&err, AB_INVALID_CONFIG, "read");
    assert_null(lib.plugin);
}

/* A module with only some request_* entries is refused, naming the first. */
static void test_load_partial_requests(void **state)
{
    (void)state;
    ab_plugin_lib_t lib = {0};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__plugin_load(AB_BAD_PARTIAL_MODULE, &lib, &err), AB_INVALID_CONFIG);
    tu_assert_error(&err, AB_INVALID_CONFIG, "request_put");
    assert_non_null(strstr(err.message, "only some request_* functions"));
    assert_null(lib.plugin);
}

/* A module with request_take but without the entries it comes with is refused. */
static void test_load_take_alone(void **state)
{
    (void)state;
    ab_plugin_lib_t lib = {0};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__plugin_load(AB_BAD_TAKE_MODULE, &lib, &err), AB_INVALID_CONFIG);
    tu_assert_error(&err, AB_INVALID_CONFIG, "request_take");
    assert_non_null(strstr(err.message, "request_take, broker_lease and request_cancel come"));
    assert_null(lib.plugin);
}

/* A module with append_fenced but no wake_fd/wake_drain (a store no other broker writes) is
 * refused. */
static void test_load_fence_unshared(void **state)
{
    (void)state;
    ab_plugin_lib_t lib = {0};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__plugin_load(AB_BAD_FENCE_MODULE, &lib, &err), AB_INVALID_CONFIG);
    tu_assert_error(&err, AB_INVALID_CONFIG, "append_fenced");
    assert_non_null(strstr(err.message, "append_fenced comes only with wake_fd/wake_drain"));
    assert_null(lib.plugin);
}

/* A module without any request_* entry loads: it cannot dispatch, and says so. */
static void test_load_without_dispatch(void **state)
{
    (void)state;
    ab_plugin_lib_t lib = {0};
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = ab__plugin_load(AB_BAD_NODISPATCH_MODULE, &lib, &err);
    if (s != AB_OK)
        fail_msg("load: %s", err.message);
    assert_false(ab__plugin_dispatches(lib.plugin));
    assert_true(ab__plugin_dispatches(ab__plugin_sqlite()));
    ab__plugin_unload(&lib);
}

/* A table of ABI 7 loads: it ends before ABI 8's entries, which then read as absent
 * (plugin.h AB_PLUGIN_ABI_OLDEST). */
static void test_load_abi7_table(void **state)
{
    (void)state;
    ab_plugin_lib_t lib = {0};
    ab_error_t err = AB_ERROR_INIT;
    if (ab__plugin_load(AB_BAD_ABI7_MODULE, &lib, &err) != AB_OK)
        fail_msg("load: %s", err.message);
    assert_int_equal(lib.plugin->abi_version, 7);
    assert_false(ab_plugin_has(lib.plugin, append_fenced));
    assert_false(ab_plugin_has(lib.plugin, heads_of));
    assert_false(ab_plugin_has(lib.plugin, set_lock_wait));
    ab__plugin_unload(&lib);
}

/* A table shorter than its ABI's own is refused, naming struct_size and both sizes. */
static void test_load_short_table(void **state)
{
    (void)state;
    ab_plugin_lib_t lib = {0};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__plugin_load(AB_BAD_SHORT_MODULE, &lib, &err), AB_UNSUPPORTED);
    tu_assert_error(&err, AB_UNSUPPORTED, "struct_size");
    const ab_error_detail_t *d = ab_error_detail(&err, "expected");
    assert_non_null(d);
    assert_int_equal(d->i, (int64_t)offsetof(ab_plugin_t, append_fenced));
    assert_null(lib.plugin);
}

/* ---- the SQLite plugin ---------------------------------------------------- */

static void test_positions_contiguous(void **state)
{
    fx_t *f = *state;
    f->db = open_db(f->p, f->dir, false);
    assert_int_equal(head_pos(f), 0);
    ab_append_event_t b1[] = {ev("t", "a", 1, "a1"), ev("t", "b", 1, "b1"), ev("t", "a", 2, "a2")};
    ab_append_event_t b2[] = {ev("t", "b", 2, "b2"), ev("u", "x", 1, "x1")};
    assert_int_equal(append_ok(f, b1, 3), 1);
    assert_int_equal(head_pos(f), 3);
    assert_int_equal(append_ok(f, b2, 2), 4);
    assert_int_equal(head_pos(f), 5);
    acc_t a;
    ab_read_t req = {.scope = AB_REPLAY_ALL, .limit = 100};
    assert_string_equal(read_text(f, f->db, req, &a),
                        "t/a#1@1=a1;t/b#1@2=b1;t/a#2@3=a2;t/b#2@4=b2;u/x#1@5=x1;");
    ab_error_t err = AB_ERROR_INIT;
    uint64_t first = 0;
    assert_int_equal(f->p->append_batch(f->db, b1, 0, 1, &first, &err), AB_INVALID_ARGUMENT);
}

static void test_batch_all_or_nothing(void **state)
{
    fx_t *f = *state;
    f->db = open_db(f->p, f->dir, false);
    ab_append_event_t b1[] = {ev("t", "r", 1, "r1"), ev("t", "r", 2, "r2")};
    append_ok(f, b1, 2);
    ab_append_event_t bad[] = {ev("t", "s", 1, "s1"), ev("t", "r", 3, "r3"),
                               ev("t", "r", 2, "again")};
    bad[0].status = AB_RUN_STATUS_ACTIVE;
    ab_error_t err = AB_ERROR_INIT;
    uint64_t first = 77;
    assert_int_equal(f->p->append_batch(f->db, bad, 3, 1, &first, &err), AB_CONFLICT);
    tu_assert_error(&err, AB_CONFLICT, "seq");
    assert_int_equal(first, 77);
    assert_int_equal(head_pos(f), 2);
    acc_t a;
    ab_read_t req = {.scope = AB_REPLAY_ALL, .limit = 100};
    assert_string_equal(read_text(f, f->db, req, &a), "t/r#1@1=r1;t/r#2@2=r2;");
    ab_run_head_t h;
    assert_int_equal(f->p->head(f->db, S("t"), S("s"), &h, &err), AB_OK);
    assert_int_equal(h.status, AB_RUN_STATUS_UNKNOWN); /* the refused batch created nothing */
    assert_int_equal(f->p->head(f->db, S("t"), S("r"), &h, &err), AB_OK);
    assert_int_equal(h.last_seq, 2);
    /* the same events without the duplicate go in, at the next positions */
    assert_int_equal(append_ok(f, bad, 2), 3);
    assert_string_equal(read_text(f, f->db, req, &a),
                        "t/r#1@1=r1;t/r#2@2=r2;t/s#1@3=s1;t/r#3@4=r3;");
}

static void interleave(fx_t *f)
{
    ab_append_event_t b1[] = {ev("T", "a", 1, "a1"), ev("U", "x", 1, "x1"), ev("T", "b", 1, "b1")};
    ab_append_event_t b2[] = {ev("T", "a", 2, "a2"), ev("T", "b", 2, "b2"), ev("U", "x", 2, "x2"),
                              ev("T", "a", 3, "a3")};
    append_ok(f, b1, 3); /* positions 1..3 */
    append_ok(f, b2, 4); /* positions 4..7 */
}

static void test_read_scopes_and_limits(void **state)
{
    fx_t *f = *state;
    f->db = open_db(f->p, f->dir, false);
    interleave(f);
    acc_t a;
    ab_read_t run = {.scope = AB_REPLAY_RUN, .thread = S("T"), .run = S("a"), .limit = 10};
    assert_string_equal(read_text(f, f->db, run, &a), "T/a#1@1=a1;T/a#2@4=a2;T/a#3@7=a3;");
    run.after_seq = 1;
    run.limit = 1;
    assert_string_equal(read_text(f, f->db, run, &a), "T/a#2@4=a2;");
    ab_read_t th = {.scope = AB_REPLAY_THREAD, .thread = S("T"), .limit = 10};
    assert_string_equal(read_text(f, f->db, th, &a),
                        "T/a#1@1=a1;T/b#1@3=b1;T/a#2@4=a2;T/b#2@5=b2;T/a#3@7=a3;");
    th.after_pos = 3;
    th.limit = 2;
    assert_string_equal(read_text(f, f->db, th, &a), "T/a#2@4=a2;T/b#2@5=b2;");
    ab_read_t all = {.scope = AB_REPLAY_ALL, .after_pos = 4, .limit = 10};
    assert_string_equal(read_text(f, f->db, all, &a), "T/b#2@5=b2;U/x#2@6=x2;T/a#3@7=a3;");
    all.after_pos = 0;
    all.limit = 3;
    assert_string_equal(read_text(f, f->db, all, &a), "T/a#1@1=a1;U/x#1@2=x1;T/b#1@3=b1;");
    all.after_pos = 7;
    assert_string_equal(read_text(f, f->db, all, &a), "");
    ab_read_t none = {.scope = AB_REPLAY_RUN, .thread = S("T"), .run = S("z"), .limit = 5};
    assert_string_equal(read_text(f, f->db, none, &a), "");
    ab_error_t err = AB_ERROR_INIT;
    all.limit = 0;
    assert_int_equal(f->p->read(f->db, &all, collect, &a, NULL, &err), AB_INVALID_ARGUMENT);
}

/* Pages through a scope, checking that positions (and per run, seqs) grow. */
typedef struct pager {
    uint64_t last_pos, last_seq, rows;
    bool ok;
} pager_t;

static int page_row(void *ud, const ab_row_t *r)
{
    pager_t *pg = ud;
    char body[9] = {0};
    memcpy(body, r->bytes, r->len < 8 ? r->len : 8); /* bytes are not NUL-terminated */
    pg->ok =
        pg->ok && r->pos > pg->last_pos && r->len == 8 && strtoull(body + 1, NULL, 10) == r->pos;
    pg->last_pos = r->pos;
    pg->last_seq = r->seq;
    pg->rows++;
    return 0;
}

static uint64_t page_through(fx_t *f, ab_read_t req)
{
    pager_t pg = {.ok = true};
    ab_error_t err = AB_ERROR_INIT;
    for (;;) {
        uint32_t n = 0;
        assert_int_equal(f->p->read(f->db, &req, page_row, &pg, &n, &err), AB_OK);
        assert_true(pg.ok);
        if (n < req.limit)
            return pg.rows;
        req.after_pos = pg.last_pos;
        req.after_seq = pg.last_seq;
    }
}

static void test_paging_many_runs(void **state)
{
    fx_t *f = *state;
    f->db = open_db(f->p, f->dir, false);
    static const char *const runs[] = {"r0", "r1", "r2", "r3", "r4", "r5", "r6"};
    static char bodies[150][9];
    ab_append_event_t b[50];
    uint64_t seq[7] = {0};
    for (int k = 0, pos = 1; k < 3; k++) {
        for (int i = 0; i < 50; i++, pos++) {
            int r = (i * 3 + k) % 7;
            snprintf(bodies[pos - 1], sizeof bodies[0], "p%07d", pos); /* body names its pos */
            b[i] = ev(r < 4 ? "A" : "B", runs[r], ++seq[r], bodies[pos - 1]);
        }
        assert_int_equal(append_ok(f, b, 50), (uint64_t)(k * 50 + 1));
    }
    ab_read_t all = {.scope = AB_REPLAY_ALL, .limit = 7};
    assert_int_equal(page_through(f, all), 150);
    all.after_pos = 49;
    assert_int_equal(page_through(f, all), 101);
    uint64_t total = 0;
    for (uint32_t lim = 1; lim <= 13; lim += 6) {
        ab_read_t ta = {.scope = AB_REPLAY_THREAD, .thread = S("A"), .limit = lim};
        ab_read_t tb = {.scope = AB_REPLAY_THREAD, .thread = S("B"), .limit = lim};
        total = page_through(f, ta) + page_through(f, tb);
        assert_int_equal(total, 150);
    }
    total = 0;
    for (int r = 0; r < 7; r++) {
        ab_read_t rr = {
            .scope = AB_REPLAY_RUN, .thread = S(r < 4 ? "A" : "B"), .run = S(runs[r]), .limit = 4};
        total += page_through(f, rr);
    }
    assert_int_equal(total, 150);
}

static int copy_bytes(void *ud, const ab_row_t *r)
{
    memcpy(ud, r->bytes, r->len);
    return 1;
}

static void test_exact_bytes(void **state)
{
    fx_t *f = *state;
    f->db = open_db(f->p, f->dir, false);
    uint8_t raw[300];
    for (size_t i = 0; i < sizeof raw; i++)
        raw[i] = (uint8_t)(i * 7);
    ab_append_event_t e = ev("t", "r", 1, "");
    e.bytes = raw;
    e.len = sizeof raw;
    append_ok(f, &e, 1);
    uint8_t back[300] = {0};
    ab_error_t err = AB_ERROR_INIT;
    uint32_t n = 0;
    ab_read_t req = {.scope = AB_REPLAY_THREAD, .thread = S("t"), .limit = 1};
    assert_int_equal(f->p->read(f->db, &req, copy_bytes, back, &n, &err), AB_OK);
    assert_int_equal(n, 1);
    assert_memory_equal(raw, back, sizeof raw);
    ab_buf_t out = AB_BUF_INIT;
    uint64_t pos = 0;
    assert_int_equal(f->p->event_bytes(f->db, S("t"), S("r"), 1, &out, &pos, &err), AB_OK);
    assert_int_equal(out.len, sizeof raw);
    assert_memory_equal(out.data, raw, sizeof raw);
    assert_int_equal(pos, 1);
    ab_buf_free(&out);
}

static void test_event_bytes(void **state)
{
    fx_t *f = *state;
    f->db = open_db(f->p, f->dir, false);
    interleave(f);
    ab_buf_t out = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    uint64_t pos = 0;
    assert_int_equal(f->p->event_bytes(f->db, S("T"), S("b"), 2, &out, &pos, &err), AB_OK);
    assert_int_equal(out.len, 2);
    assert_memory_equal(out.data, "b2", 2);
    assert_int_equal(pos, 5);
    assert_int_equal(f->p->event_bytes(f->db, S("T"), S("a"), 3, &out, &pos, &err), AB_OK);
    assert_memory_equal(out.data, "a3", 2);
    assert_int_equal(pos, 7);
    assert_int_equal(f->p->event_bytes(f->db, S("T"), S("a"), 4, &out, &pos, &err), AB_NOT_FOUND);
    ab_error_clear(&err);
    assert_int_equal(f->p->event_bytes(f->db, S("T"), S("q"), 1, &out, &pos, &err), AB_NOT_FOUND);
    ab_buf_free(&out);
}

static void test_claim_epochs(void **state)
{
    fx_t *f = *state;
    f->db = open_db(f->p, f->dir, false);
    ab_error_t err = AB_ERROR_INIT;
    uint64_t epoch = 0, last = 99;
    assert_int_equal(f->p->claim(f->db, S("t"), S("r"), &epoch, &last, &err), AB_OK);
    assert_int_equal(epoch, 2); /* a first claim: 1 is the implicit epoch (PROTOCOL.md 7.3) */
    assert_int_equal(last, 0);
    ab_run_head_t h;
    assert_int_equal(f->p->head(f->db, S("t"), S("r"), &h, &err), AB_OK);
    assert_int_equal(h.status, AB_RUN_STATUS_UNKNOWN); /* claimed, not started */
    assert_int_equal(h.epoch, 2);
    ab_append_event_t b[] = {ev("t", "r", 1, "a"), ev("t", "r", 2, "b")};
    append_ok(f, b, 2);
    assert_int_equal(f->p->head(f->db, S("t"), S("r"), &h, &err), AB_OK);
    assert_int_equal(h.status, AB_RUN_STATUS_ACTIVE); /* it has events */
    assert_int_equal(f->p->claim(f->db, S("t"), S("r"), &epoch, &last, &err), AB_OK);
    assert_int_equal(epoch, 3);
    assert_int_equal(last, 2);
    assert_int_equal(f->p->claim(f->db, S("t"), S("r"), &epoch, &last, &err), AB_OK);
    assert_int_equal(epoch, 4);
    ab_append_event_t c = ev("t", "r", 3, "c");
    c.epoch = 4;
    append_ok(f, &c, 1);
    assert_int_equal(f->p->head(f->db, S("t"), S("r"), &h, &err), AB_OK);
    assert_int_equal(h.epoch, 4);
    assert_int_equal(h.last_seq, 3);
}

typedef struct heads {
    char text[512];
} heads_t;

static int collect_head(void *ud, const ab_run_head_t *h)
{
    heads_t *a = ud;
    size_t used = strlen(a->text);
    snprintf(a->text + used, sizeof a->text - used, "%s:%s#%llu@%llu;", h->run,
             ab_run_status_name(h->status), (unsigned long long)h->last_seq,
             (unsigned long long)h->last_pos);
    return 0;
}

static void test_heads(void **state)
{
    fx_t *f = *state;
    f->db = open_db(f->p, f->dir, false);
    ab_error_t err = AB_ERROR_INIT;
    ab_run_head_t h;
    assert_int_equal(f->p->head(f->db, S("t"), S("never"), &h, &err), AB_OK);
    assert_int_equal(h.status, AB_RUN_STATUS_UNKNOWN);
    assert_string_equal(h.run, "never");
    assert_int_equal(h.last_seq, 0);
    assert_int_equal(err.code, AB_OK);
    ab_append_event_t b[] = {ev("t", "b", 1, "b1"), ev("t", "a", 1, "a1"), ev("t", "b", 2, "b2"),
                             ev("t", "c", 1, "c1")};
    b[0].status = b[1].status = b[3].status = AB_RUN_STATUS_ACTIVE;
    b[2].status = AB_RUN_STATUS_FINISHED;
    b[2].outcome = AB_OUTCOME_SUCCESS;
    b[3].parent_run = S("b");
    append_ok(f, b, 4);
    heads_t a = {{0}};
    assert_int_equal(f->p->thread_heads(f->db, S("t"), collect_head, &a, &err), AB_OK);
    assert_string_equal(a.text, "b:finished#2@3;a:active#1@2;c:active#1@4;");
    assert_int_equal(f->p->head(f->db, S("t"), S("b"), &h, &err), AB_OK);
    assert_int_equal(h.outcome, AB_OUTCOME_SUCCESS);
    assert_string_equal(h.thread, "t");
    memset(&a, 0, sizeof a);
    assert_int_equal(f->p->thread_heads(f->db, S("nobody"), collect_head, &a, &err), AB_OK);
    assert_string_equal(a.text, "");
}

static void test_two_writers_refused(void **state)
{
    fx_t *f = *state;
    f->db = open_db(f->p, f->dir, false);
    ab_plugin_open_opts_t o = {.data_dir = f->dir};
    ab_plugin_db_t *db2 = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(f->p->open(&o, &db2, &err), AB_UNAVAILABLE);
    assert_null(db2);
    char want[64];
    snprintf(want, sizeof want, "in use by another broker (pid %ld)", (long)getpid());
    assert_non_null(strstr(err.message, want));
    assert_true(err.retryable);
    /* a reader does not lock */
    ab_plugin_db_t *rd = open_db(f->p, f->dir, true);
    f->p->close(rd);
    /* closing the writer releases the lock */
    f->p->close(f->db);
    f->db = open_db(f->p, f->dir, false);
}

static void test_reader_during_write_txn(void **state)
{
    fx_t *f = *state;
    f->db = open_db(f->p, f->dir, false);
    ab_append_event_t e = ev("t", "r", 1, "committed");
    append_ok(f, &e, 1);
    ab_plugin_db_t *rd = open_db(f->p, f->dir, true);
    /* hold a write transaction open with a raw store handle on the same file */
    ab_store_t *st = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_open(&st, f->dir, NULL, &err), AB_OK);
    assert_int_equal(ab__store_begin(st, 1, &err), AB_OK);
    ab_append_event_t se = ev("t", "r", 2, "pending");
    assert_int_equal(ab__store_append(st, &se, NULL, &err), AB_OK);
    acc_t a;
    ab_read_t req = {.scope = AB_REPLAY_ALL, .limit = 10};
    assert_string_equal(read_text(f, rd, req, &a), "t/r#1@1=committed;");
    assert_int_equal(ab__store_commit(st, &err), AB_OK);
    ab__store_close(&st);
    assert_string_equal(read_text(f, rd, req, &a), "t/r#1@1=committed;t/r#2@2=pending;");
    /* the reader cannot write */
    uint64_t first = 0;
    e = ev("t", "r", 3, "x");
    assert_int_not_equal(f->p->append_batch(rd, &e, 1, 1, &first, &err), AB_OK);
    f->p->close(rd);
    /* the writer's cache notices the other connection's commit */
    e = ev("t", "r", 2, "dup");
    ab_error_clear(&err);
    assert_int_equal(f->p->append_batch(f->db, &e, 1, 1, &first, &err), AB_CONFLICT);
    e = ev("t", "r", 3, "three");
    assert_int_equal(append_ok(f, &e, 1), 3);
}

static void test_reopen_continues(void **state)
{
    fx_t *f = *state;
    f->db = open_db(f->p, f->dir, false);
    interleave(f);
    f->p->close(f->db);
    f->db = open_db(f->p, f->dir, false);
    assert_int_equal(head_pos(f), 7);
    ab_append_event_t dup = ev("T", "a", 3, "again");
    ab_error_t err = AB_ERROR_INIT;
    uint64_t first = 0;
    assert_int_equal(f->p->append_batch(f->db, &dup, 1, 1, &first, &err), AB_CONFLICT);
    ab_append_event_t b[] = {ev("T", "a", 4, "a4"), ev("V", "v", 1, "v1")};
    assert_int_equal(append_ok(f, b, 2), 8);
    acc_t a;
    ab_read_t req = {.scope = AB_REPLAY_ALL, .after_pos = 5, .limit = 10};
    assert_string_equal(read_text(f, f->db, req, &a),
                        "U/x#2@6=x2;T/a#3@7=a3;T/a#4@8=a4;V/v#1@9=v1;");
}

static ab_request_new_t req_of(const char *key, const char *thread, const char *run,
                               const char *input)
{
    return (ab_request_new_t){.key = S(key),
                              .agent = S("planner"),
                              .thread = S(thread),
                              .run = S(run),
                              .run_named = true,
                              .input = (const uint8_t *)input,
                              .input_len = strlen(input)};
}

static uint64_t put_ok(fx_t *f, const ab_request_new_t *r, bool want_existing)
{
    ab_request_t out;
    bool existing = !want_existing;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = f->p->request_put(f->db, r, &out, &existing, &err);
    if (s != AB_OK)
        fail_msg("request_put: %s", err.message);
    assert_int_equal(existing, want_existing);
    assert_int_equal(out.state == AB_REQ_QUEUED || want_existing, true);
    return out.id;
}

static int count_req(void *ud, const ab_request_t *r)
{
    (void)r;
    (*(int *)ud)++;
    return 0;
}

/* The request entries of the built-in plugin, across a reopen (a broker restart). */
static void test_requests_through_table(void **state)
{
    fx_t *f = *state;
    f->db = open_db(f->p, f->dir, false);
    ab_request_new_t a = req_of("k1", "T", "r1", "in1"), b = req_of("k2", "U", "r2", "in2");
    uint64_t ida = put_ok(f, &a, false), idb = put_ok(f, &b, false);
    assert_true(idb > ida);
    ab_request_move_t mv = {
        .expect_state = AB_REQ_QUEUED, .state = AB_REQ_ASSIGNED, .worker = S("w1"), .epoch = 1};
    ab_error_t err = AB_ERROR_INIT;
    ab_request_t rec;
    assert_int_equal(f->p->request_move(f->db, ida, &mv, &rec, &err), AB_OK);
    f->p->close(f->db);
    f->db = open_db(f->p, f->dir, false);
    assert_int_equal(put_ok(f, &a, true), ida); /* same key, same request, after the restart */
    ab_buf_t in = {0};
    assert_int_equal(f->p->request_by_key(f->db, S("k1"), &rec, &in, &err), AB_OK);
    assert_int_equal(rec.state, AB_REQ_ASSIGNED);
    assert_string_equal(rec.worker, "w1");
    assert_int_equal(in.len, 3);
    assert_memory_equal(in.data, "in1", 3);
    ab_buf_free(&in);
    assert_int_equal(f->p->request_get(f->db, idb, &rec, NULL, &err), AB_OK);
    assert_string_equal(rec.key, "k2");
    uint64_t ahead = 9;
    assert_int_equal(f->p->request_position(f->db, idb, &ahead, &err), AB_OK);
    assert_int_equal(ahead, 0); /* the one before it is assigned, not queued */
    int n = 0;
    uint32_t count = 0;
    assert_int_equal(
        f->p->request_list(f->db, AB_REQ_QUEUED, S("planner"), 0, 10, count_req, &n, &count, &err),
        AB_OK);
    assert_int_equal(n, 1);
    n = 0;
    assert_int_equal(f->p->request_thread_open(f->db, S("T"), count_req, &n, &err), AB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(f->p->request_move(f->db, ida, &mv, NULL, &err), AB_CONFLICT); /* stale */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_builtin),
        cmocka_unit_test_setup_teardown(test_load_module_by_path, setup, teardown),
        cmocka_unit_test(test_load_missing_file),
        cmocka_unit_test(test_load_wrong_abi),
        cmocka_unit_test(test_load_previous_abi),
        cmocka_unit_test(test_load_null_function),
        cmocka_unit_test(test_load_partial_requests),
        cmocka_unit_test(test_load_take_alone),
        cmocka_unit_test(test_load_fence_unshared),
        cmocka_unit_test(test_load_without_dispatch),
        cmocka_unit_test(test_load_abi7_table),
        cmocka_unit_test(test_load_short_table),
        cmocka_unit_test_setup_teardown(test_requests_through_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_positions_contiguous, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_all_or_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_scopes_and_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paging_many_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exact_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_event_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_claim_epochs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_heads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_writers_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_during_write_txn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_continues, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_store.c - the SQLite event store: open/migrate/check, append, reads,
 * heads, claims and a WAL reader beside a writer (the file checks and the
 * lock at open: test_store_open.c).
 *
 * Each test gets a fresh directory from mkdtemp() and removes it afterwards.
 * The schema version is read and forged through the documented file header
 * (offset 60, big-endian user_version), not through SQLite; sqlite3.h comes in
 * (by store_int.h) for test_lock_wait alone: a second connection holding the
 * write lock, and the handle's own PRAGMA busy_timeout.
 */
#include "store.h"
#include "store_fixture.h"
#include "store_int.h" /* the handle's connection, for PRAGMA busy_timeout */
#include "testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct fx {
    char dir[64];
    char db[96];
    ab_store_t *st;
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/ab_store_XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->db, sizeof f->db, "%s/%s", f->dir, AB_STORE_DB_NAME);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    ab__store_close(&f->st);
    sf_rm_dir(f->dir);
    free(f);
    return 0;
}

static ab_str_t S(const char *s)
{
    return (ab_str_t){s, strlen(s)};
}

static ab_append_event_t ev_of(const char *thread, const char *run, uint64_t seq, const char *body)
{
    ab_append_event_t ev = {
        .thread = S(thread),
        .run = S(run),
        .seq = seq,
        .epoch = 1,
        .bytes = (const uint8_t *)body,
        .len = strlen(body),
    };
    return ev;
}

static uint64_t append_ok(ab_store_t *st, const char *thread, const char *run, uint64_t seq,
                          const char *body)
{
    ab_append_event_t ev = ev_of(thread, run, seq, body);
    ab_error_t err = AB_ERROR_INIT;
    uint64_t pos = 0;
    ab_status_t s = ab__store_append(st, &ev, &pos, &err);
    if (s != AB_OK)
        fail_msg("append %s/%s#%llu: %s", thread, run, (unsigned long long)seq, err.message);
    return pos;
}

/* Begin a batch committed at time @p commit_us. */
static void begin_at(ab_store_t *st, int64_t commit_us)
{
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_begin(st, commit_us, &err), AB_OK);
}

static void begin_ok(ab_store_t *st)
{
    begin_at(st, 1000);
}

static void commit_ok(ab_store_t *st)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = ab__store_commit(st, &err);
    if (s != AB_OK)
        fail_msg("commit: %s", err.message);
}

/* One read of any scope; @return its status, *n the rows delivered. */
static ab_status_t read_q(ab_store_t *st, ab_replay_scope_t scope, const char *thread,
                          const char *run, uint64_t after, uint32_t limit, ab_row_cb cb, void *ud,
                          uint32_t *n, ab_error_t *err)
{
    ab_read_t req = {.scope = scope, .limit = limit ? limit : UINT32_MAX};
    if (thread)
        req.thread = S(thread);
    if (run)
        req.run = S(run);
    if (scope == AB_REPLAY_RUN)
        req.after_seq = after;
    else
        req.after_pos = after;
    return ab__store_read(st, &req, cb, ud, n, err);
}

/* Collects rows as "thread/run#seq@pos=body;" */
typedef struct acc {
    char text[4096];
    int stop_after;
    int n;
} acc_t;

static int collect(void *ud, const ab_row_t *r)
{
    acc_t *a = ud;
    size_t used = strlen(a->text);
    snprintf(a->text + used, sizeof a->text - used, "%.*s/%.*s#%llu@%llu=%.*s;", (int)r->thread.len,
             r->thread.ptr, (int)r->run.len, r->run.ptr, (unsigned long long)r->seq,
             (unsigned long long)r->pos, (int)r->len, (const char *)r->bytes);
    a->n++;
    return a->stop_after && a->n >= a->stop_after;
}

static uint32_t file_user_version(const char *path)
{
    unsigned char h[64];
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    assert_int_equal(fread(h, 1, sizeof h, fp), sizeof h);
    fclose(fp);
    return (uint32_t)h[60] << 24 | (uint32_t)h[61] << 16 | (uint32_t)h[62] << 8 | h[63];
}

static void file_patch(const char *path, long off, const void *bytes, size_t n)
{
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, bytes, n, off), (ssize_t)n);
    close(fd);
}

static void test_open_reopen_keeps_data(void **state)
{
    fx_t *f = *state;
    char sub[128];
    snprintf(sub, sizeof sub, "%s/data", f->dir); /* created by open */
    ab_store_t *st = open_ok(sub, false);
    begin_ok(st);
    assert_int_equal(append_ok(st, "t1", "r1", 1, "{\"a\":1}"), 1);
    commit_ok(st);
    ab__store_close(&st);
    assert_null(st);
    ab__store_close(&st); /* NULL-safe */
    st = open_ok(sub, false);
    acc_t a = {.n = 0};
    uint32_t n = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(read_q(st, AB_REPLAY_ALL, NULL, NULL, 0, 0, collect, &a, &n, &err), AB_OK);
    assert_int_equal(n, 1);
    assert_string_equal(a.text, "t1/r1#1@1={\"a\":1};");
    ab__store_close(&st);
    char p[256];
    snprintf(p, sizeof p, "%s/%s", sub, AB_STORE_DB_NAME);
    unlink(p);
    rmdir(sub);
}

/* What SQLite writes for `PRAGMA page_size=4096; PRAGMA user_version=0` on an
 * empty database: a header and an empty schema page, no tables. */
static void write_schemaless_db(const char *path)
{
    unsigned char page[4096] = "SQLite format 3";
    static const unsigned char hdr[] = {0x10, 0x00, 0x01, 0x01, 0x00, 0x40, 0x20, 0x20,
                                        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01};
    memcpy(page + 16, hdr, sizeof hdr);                /* page size .. change counter, 1 page */
    page[95] = 0x01;                                   /* version-valid-for = change counter */
    memcpy(page + 96, "\x00\x2e\x63\x01", 4);          /* SQLite 3.40.1 wrote it */
    memcpy(page + 100, "\x0d\x00\x00\x00\x00\x10", 6); /* empty table leaf, content at 4096 */
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(page, 1, sizeof page, fp), sizeof page);
    assert_int_equal(fclose(fp), 0);
}

static void test_migrates_from_zero(void **state)
{
    fx_t *f = *state;
    write_schemaless_db(f->db); /* an SQLite file without our schema is version 0 */
    assert_int_equal(file_user_version(f->db), 0);
    f->st = open_ok(f->dir, false);
    ab__store_close(&f->st);
    assert_int_equal(file_user_version(f->db), AB_STORE_SCHEMA_VERSION);
    f->st = open_ok(f->dir, false); /* reopen at the current version: no-op */
    begin_ok(f->st);
    assert_int_equal(append_ok(f->st, "t", "r", 1, "x"), 1);
    commit_ok(f->st);
    ab__store_close(&f->st);
    assert_int_equal(file_user_version(f->db), AB_STORE_SCHEMA_VERSION);
}

static void test_newer_schema_refused_unchanged(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    ab__store_close(&f->st);
    unsigned char v[4] = {0, 0, 0, AB_STORE_SCHEMA_VERSION + 1};
    file_patch(f->db, 60, v, sizeof v);
    size_t len0 = 0, len1 = 0;
    char *before = tu_read_file(f->db, &len0);
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *st = NULL;
    assert_int_equal(ab__store_open(&st, f->dir, NULL, &err), AB_UNSUPPORTED);
    assert_null(st);
    assert_non_null(strstr(err.message, "is newer than this build"));
    char *after = tu_read_file(f->db, &len1);
    assert_int_equal(len0, len1);
    assert_memory_equal(before, after, len0);
    free(before);
    free(after);
}

static void test_damaged_file_refused(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    begin_ok(f->st);
    char body[300];
    memset(body, 'x', sizeof body - 1);
    body[sizeof body - 1] = '\0';
    for (uint64_t i = 1; i <= 200; i++)
        append_ok(f->st, "t", "r", i, body);
    commit_ok(f->st);
    ab__store_close(&f->st);
    struct stat sb;
    assert_int_equal(stat(f->db, &sb), 0);
    assert_true(sb.st_size > 8 * 4096);
    char junk[4096];
    memset(junk, 0xA5, sizeof junk);
    for (long off = 4096; off < sb.st_size; off += 4096) /* keep page 1 (header, schema) */
        file_patch(f->db, off, junk, sizeof junk);
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *st = NULL;
    assert_int_equal(ab__store_open(&st, f->dir, NULL, &err), AB_CORRUPT);
    assert_null(st);
    assert_non_null(strstr(err.message, f->db));
    assert_non_null(strstr(err.message, "is damaged"));
    assert_null(strchr(err.message, '\n')); /* one log line */
    /* garbage over the header: not a database at all */
    ab_error_clear(&err);
    file_patch(f->db, 0, junk, 100);
    assert_int_equal(ab__store_open(&st, f->dir, NULL, &err), AB_CORRUPT);
    assert_non_null(strstr(err.message, f->db));
    assert_non_null(strstr(err.message, "is damaged"));
}

static void test_append_commit_read_back(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    begin_ok(f->st);
    const unsigned char raw[] = {0x82, 0xa1, 't', 0x00, 0xff, 0x01}; /* opaque bytes incl. NUL */
    ab_append_event_t ev = ev_of("t", "r", 1, "");
    ev.bytes = (const uint8_t *)raw;
    ev.len = sizeof raw;
    ab_error_t err = AB_ERROR_INIT;
    uint64_t pos = 0;
    assert_int_equal(ab__store_append(f->st, &ev, &pos, &err), AB_OK);
    assert_int_equal(pos, 1);
    assert_int_equal(append_ok(f->st, "t", "r", 2, "two"), 2);
    commit_ok(f->st);
    begin_ok(f->st);
    assert_int_equal(append_ok(f->st, "t", "r", 3, "three"), 3);
    commit_ok(f->st);
    uint64_t head = 0;
    assert_int_equal(ab__store_head_pos(f->st, &head, &err), AB_OK);
    assert_int_equal(head, 3);
    acc_t a = {.n = 0};
    uint32_t n = 0;
    assert_int_equal(read_q(f->st, AB_REPLAY_RUN, "t", "r", 1, 0, collect, &a, &n, &err), AB_OK);
    assert_int_equal(n, 2);
    assert_string_equal(a.text, "t/r#2@2=two;t/r#3@3=three;");
    assert_int_equal(read_q(f->st, AB_REPLAY_ALL, NULL, NULL, 0, 1, NULL, NULL, &n, &err), AB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(read_q(f->st, AB_REPLAY_RUN, "t", "r", 0, 1, collect, &a, &n, &err), AB_OK);
    assert_non_null(strstr(a.text, "t/r#1@1="));
}

static int copy_first(void *ud, const ab_row_t *r)
{
    memcpy(ud, r->bytes, r->len);
    return 1;
}

static void test_exact_bytes(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    unsigned char raw[256];
    for (int i = 0; i < 256; i++)
        raw[i] = (unsigned char)i;
    ab_append_event_t ev = ev_of("t", "r", 1, "");
    ev.bytes = (const uint8_t *)raw;
    ev.len = sizeof raw;
    ab_error_t err = AB_ERROR_INIT;
    begin_ok(f->st);
    assert_int_equal(ab__store_append(f->st, &ev, NULL, &err), AB_OK);
    commit_ok(f->st);
    unsigned char back[256] = {0};
    uint32_t n = 0;
    assert_int_equal(read_q(f->st, AB_REPLAY_ALL, NULL, NULL, 0, 0, copy_first, back, &n, &err),
                     AB_OK);
    assert_int_equal(n, 1);
    assert_memory_equal(raw, back, sizeof raw);
}

/* Checks each row against the bytes it was appended with (seq s of run r: buf + off[r][s]). */
typedef struct exact {
    const uint8_t *buf;
    size_t off[3][9], len[3][9];
    int rows, bad;
} exact_t;

static int check_exact(void *ud, const ab_row_t *r)
{
    exact_t *x = ud;
    int run = r->run.ptr[0] - 'a';
    size_t seq = (size_t)r->seq;
    x->rows++;
    if (run < 0 || run > 2 || seq > 8 || r->len != x->len[run][seq] ||
        (r->len && memcmp(r->bytes, x->buf + x->off[run][seq], r->len) != 0))
        x->bad++;
    return 0;
}

/*
 * The append path writes the caller's exact bytes, from the caller's memory:
 * three runs interleaved in one batch, lengths 0 to 1000 with every byte
 * value, read back by every scope; and the bytes are taken at the commit
 * (borrowed, not copied at append), so a change made between the append and
 * the commit is what is stored.
 */
static void test_append_writes_callers_bytes(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    static uint8_t buf[24 * 1001];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)(i * 7 + i / 256);
    exact_t x = {.buf = buf};
    static const char *const runs[] = {"a", "b", "c"};
    ab_error_t err = AB_ERROR_INIT;
    begin_ok(f->st);
    size_t off = 0;
    for (uint64_t seq = 1; seq <= 8; seq++) {
        for (int r = 0; r < 3; r++) {
            size_t len = (seq * 131 + (size_t)r * 17) % 1001;
            if (seq == 2 && r == 1)
                len = 0;
            ab_append_event_t ev = ev_of("t", runs[r], seq, "");
            ev.bytes = buf + off;
            ev.len = len;
            x.off[r][seq] = off;
            x.len[r][seq] = len;
            assert_int_equal(ab__store_append(f->st, &ev, NULL, &err), AB_OK);
            off += len;
        }
    }
    memset(buf + x.off[2][8], 0x5a, x.len[2][8]); /* after its append, before the commit */
    commit_ok(f->st);
    uint32_t n = 0;
    static const ab_replay_scope_t scopes[] = {AB_REPLAY_ALL, AB_REPLAY_THREAD};
    for (int i = 0; i < 2; i++) {
        x.rows = x.bad = 0;
        assert_int_equal(read_q(f->st, scopes[i], "t", NULL, 0, 0, check_exact, &x, &n, &err),
                         AB_OK);
        assert_int_equal(x.rows, 24);
        assert_int_equal(x.bad, 0);
    }
    for (int r = 0; r < 3; r++) {
        x.rows = x.bad = 0;
        assert_int_equal(
            read_q(f->st, AB_REPLAY_RUN, "t", runs[r], 0, 0, check_exact, &x, &n, &err), AB_OK);
        assert_int_equal(x.rows, 8);
        assert_int_equal(x.bad, 0);
    }
    ab_buf_t one = AB_BUF_INIT;
    assert_int_equal(ab__store_event_bytes(f->st, S("t"), S("c"), 8, &one, NULL, &err), AB_OK);
    assert_int_equal(one.len, x.len[2][8]);
    for (size_t i = 0; i < one.len; i++)
        assert_int_equal(one.data[i], 0x5a);
    ab_buf_free(&one);
}

static void test_rollback_leaves_nothing(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    begin_ok(f->st);
    append_ok(f->st, "t", "r", 1, "a");
    append_ok(f->st, "t", "r", 2, "b");
    ab__store_rollback(f->st);
    ab_error_t err = AB_ERROR_INIT;
    uint32_t n = 99;
    assert_int_equal(read_q(f->st, AB_REPLAY_ALL, NULL, NULL, 0, 0, NULL, NULL, &n, &err), AB_OK);
    assert_int_equal(n, 0);
    ab_run_head_t run;
    assert_int_equal(ab__store_head(f->st, S("t"), S("r"), &run, &err), AB_OK);
    assert_int_equal(run.status, AB_RUN_STATUS_UNKNOWN); /* never seen: the run is not there */
    assert_int_equal(run.last_seq, 0);
    /* the positions are reused after a rollback: pos stays dense */
    begin_ok(f->st);
    assert_int_equal(append_ok(f->st, "t", "r", 1, "a"), 1);
    commit_ok(f->st);
    /* commit without a transaction is refused */
    ab_error_clear(&err);
    assert_int_equal(ab__store_commit(f->st, &err), AB_INVALID_ARGUMENT);
}

/* The busy timeout of @p st's connection, as SQLite reports it. */
static int busy_timeout_of(ab_store_t *st)
{
    sqlite3_stmt *q = NULL;
    int ms = -1;
    assert_int_equal(sqlite3_prepare_v2(st->db, "PRAGMA busy_timeout", -1, &q, NULL), SQLITE_OK);
    if (sqlite3_step(q) == SQLITE_ROW)
        ms = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    return ms;
}

/* set_lock_wait (plugin ABI 9): 0 makes a write against another process's lock fail at
 * once and leave nothing; a negative wait gives the handle its own busy timeout back. */
static void test_lock_wait(void **state)
{
    fx_t *f = *state;
    ab_store_opts_t o = {.busy_timeout_ms = 750};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_open(&f->st, f->dir, &o, &err), AB_OK);
    assert_int_equal(busy_timeout_of(f->st), 750);
    ab__store_set_lock_wait(f->st, 0);
    assert_int_equal(busy_timeout_of(f->st), 0);
    sqlite3 *other = NULL;
    assert_int_equal(sqlite3_open(f->db, &other), SQLITE_OK);
    assert_int_equal(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    ab_status_t s = ab__store_begin(f->st, 1000, &err);
    if (s == AB_OK) { /* the lock is taken by the first write */
        ab_append_event_t ev = ev_of("t", "r", 1, "a");
        uint64_t pos = 0;
        s = ab__store_append(f->st, &ev, &pos, &err);
        if (s == AB_OK)
            s = ab__store_commit(f->st, &err);
        ab__store_rollback(f->st);
    }
    assert_int_equal(s, AB_UNAVAILABLE);
    sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(other);
    ab__store_set_lock_wait(f->st, -1);
    assert_int_equal(busy_timeout_of(f->st), 750);
    begin_ok(f->st); /* nothing of the refused write: seq 1 is new */
    assert_int_equal(append_ok(f->st, "t", "r", 1, "a"), 1);
    commit_ok(f->st);
}

static void test_duplicate_seq_conflict(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    begin_ok(f->st);
    append_ok(f->st, "t", "r", 1, "a");
    append_ok(f->st, "t", "r", 2, "b");
    ab_append_event_t ev = ev_of("t", "r", 2, "other");
    ev.status = AB_RUN_STATUS_FINISHED;
    ab_error_t err = AB_ERROR_INIT;
    uint64_t pos = 77;
    assert_int_equal(ab__store_append(f->st, &ev, &pos, &err), AB_CONFLICT);
    assert_int_equal(pos, 77); /* out-param untouched */
    tu_assert_error(&err, AB_CONFLICT, "seq");
    /* the transaction continues: earlier appends intact, the failed one absent */
    assert_int_equal(append_ok(f->st, "t", "r", 3, "c"), 3);
    commit_ok(f->st);
    acc_t a = {.n = 0};
    uint32_t n = 0;
    assert_int_equal(read_q(f->st, AB_REPLAY_ALL, NULL, NULL, 0, 0, collect, &a, &n, &err), AB_OK);
    assert_string_equal(a.text, "t/r#1@1=a;t/r#2@2=b;t/r#3@3=c;");
    ab_run_head_t run;
    assert_int_equal(ab__store_head(f->st, S("t"), S("r"), &run, &err), AB_OK);
    assert_int_equal(run.status, AB_RUN_STATUS_ACTIVE); /* the refused event changed nothing */
    assert_int_equal(run.last_seq, 3);
    /* ... or it can be rolled back whole */
    begin_ok(f->st);
    append_ok(f->st, "t", "r", 4, "d");
    ab_error_clear(&err);
    ev = ev_of("t", "r", 1, "dup");
    assert_int_equal(ab__store_append(f->st, &ev, NULL, &err), AB_CONFLICT);
    ab__store_rollback(f->st);
    assert_int_equal(read_q(f->st, AB_REPLAY_ALL, NULL, NULL, 0, 0, NULL, NULL, &n, &err), AB_OK);
    assert_int_equal(n, 3);
}

static void interleave(ab_store_t *st)
{
    begin_ok(st);
    append_ok(st, "T", "a", 1, "a1"); /* pos 1 */
    append_ok(st, "U", "x", 1, "x1"); /* pos 2 */
    append_ok(st, "T", "b", 1, "b1"); /* pos 3 */
    commit_ok(st);
    begin_ok(st);
    append_ok(st, "T", "a", 2, "a2"); /* pos 4 */
    append_ok(st, "T", "b", 2, "b2"); /* pos 5 */
    append_ok(st, "U", "x", 2, "x2"); /* pos 6 */
    append_ok(st, "T", "a", 3, "a3"); /* pos 7 */
    commit_ok(st);
}

static void test_reads_and_limits(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    interleave(f->st);
    ab_error_t err = AB_ERROR_INIT;
    uint32_t n = 0;
    acc_t a = {.n = 0};
    assert_int_equal(read_q(f->st, AB_REPLAY_RUN, "T", "a", 1, 0, collect, &a, &n, &err), AB_OK);
    assert_string_equal(a.text, "T/a#2@4=a2;T/a#3@7=a3;");
    memset(&a, 0, sizeof a);
    assert_int_equal(read_q(f->st, AB_REPLAY_THREAD, "T", NULL, 0, 0, collect, &a, &n, &err),
                     AB_OK);
    assert_int_equal(n, 5);
    assert_string_equal(a.text, "T/a#1@1=a1;T/b#1@3=b1;T/a#2@4=a2;T/b#2@5=b2;T/a#3@7=a3;");
    memset(&a, 0, sizeof a);
    assert_int_equal(read_q(f->st, AB_REPLAY_THREAD, "T", NULL, 3, 2, collect, &a, &n, &err),
                     AB_OK);
    assert_int_equal(n, 2);
    assert_string_equal(a.text, "T/a#2@4=a2;T/b#2@5=b2;");
    memset(&a, 0, sizeof a);
    assert_int_equal(read_q(f->st, AB_REPLAY_ALL, NULL, NULL, 4, 0, collect, &a, &n, &err), AB_OK);
    assert_string_equal(a.text, "T/b#2@5=b2;U/x#2@6=x2;T/a#3@7=a3;");
    memset(&a, 0, sizeof a);
    assert_int_equal(read_q(f->st, AB_REPLAY_ALL, NULL, NULL, 0, 3, collect, &a, &n, &err), AB_OK);
    assert_int_equal(n, 3);
    assert_string_equal(a.text, "T/a#1@1=a1;U/x#1@2=x1;T/b#1@3=b1;");
    memset(&a, 0, sizeof a);
    a.stop_after = 2; /* callback stops early */
    assert_int_equal(read_q(f->st, AB_REPLAY_ALL, NULL, NULL, 0, 0, collect, &a, &n, &err), AB_OK);
    assert_int_equal(n, 2);
    /* unknown run / thread: nothing, not an error */
    assert_int_equal(read_q(f->st, AB_REPLAY_RUN, "T", "zz", 0, 0, NULL, NULL, &n, &err), AB_OK);
    assert_int_equal(n, 0);
    assert_int_equal(read_q(f->st, AB_REPLAY_THREAD, "V", NULL, 0, 0, NULL, NULL, &n, &err), AB_OK);
    assert_int_equal(n, 0);
}

static int count_runs(void *ud, const ab_run_head_t *r)
{
    acc_t *a = ud;
    size_t used = strlen(a->text);
    snprintf(a->text + used, sizeof a->text - used, "%s;", r->run);
    a->n++;
    return a->stop_after && a->n >= a->stop_after;
}

static void test_heads_and_state(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    interleave(f->st);
    ab_error_t err = AB_ERROR_INIT;
    ab_run_head_t run;
    assert_int_equal(ab__store_head(f->st, S("T"), S("a"), &run, &err), AB_OK);
    assert_string_equal(run.thread, "T");
    assert_string_equal(run.run, "a");
    assert_int_equal(run.last_seq, 3);
    assert_int_equal(run.last_pos, 7);
    assert_int_equal(run.status, AB_RUN_STATUS_ACTIVE);
    assert_int_equal(run.outcome, AB_OUTCOME_NONE);
    assert_int_equal(run.started_us, 1000);
    assert_int_equal(run.ended_us, 0);
    assert_string_equal(run.parent_run, "");
    begin_at(f->st, 2000);
    ab_append_event_t ev = ev_of("T", "c", 1, "started");
    ev.status = AB_RUN_STATUS_ACTIVE;
    ev.parent_run = S("a");
    ev.epoch = 4;
    assert_int_equal(ab__store_append(f->st, &ev, NULL, &err), AB_OK);
    ev = ev_of("T", "c", 2, "finished");
    ev.status = AB_RUN_STATUS_FINISHED;
    ev.outcome = AB_OUTCOME_INTERRUPT;
    assert_int_equal(ab__store_append(f->st, &ev, NULL, &err), AB_OK);
    ev = ev_of("T", "b", 3, "error");
    ev.status = AB_RUN_STATUS_ERRORED;
    assert_int_equal(ab__store_append(f->st, &ev, NULL, &err), AB_OK);
    commit_ok(f->st);
    assert_int_equal(ab__store_head(f->st, S("T"), S("c"), &run, &err), AB_OK);
    assert_int_equal(run.status, AB_RUN_STATUS_FINISHED);
    assert_int_equal(run.outcome, AB_OUTCOME_INTERRUPT);
    assert_string_equal(run.parent_run, "a");
    assert_int_equal(run.epoch, 4);
    assert_int_equal(run.last_seq, 2);
    assert_int_equal(run.last_pos, 9);
    assert_int_equal(run.started_us, 2000);
    assert_int_equal(run.ended_us, 2000);
    assert_int_equal(ab__store_head(f->st, S("T"), S("b"), &run, &err), AB_OK);
    assert_int_equal(run.status, AB_RUN_STATUS_ERRORED);
    assert_int_equal(run.started_us, 1000);
    assert_int_equal(run.ended_us, 2000);
    acc_t a = {.n = 0};
    assert_int_equal(ab__store_thread_heads(f->st, S("T"), count_runs, &a, &err), AB_OK);
    assert_int_equal(a.n, 3);
    assert_string_equal(a.text, "a;b;c;");
    memset(&a, 0, sizeof a);
    a.stop_after = 2; /* the callback stops the listing */
    assert_int_equal(ab__store_thread_heads(f->st, S("T"), count_runs, &a, &err), AB_OK);
    assert_string_equal(a.text, "a;b;");
    memset(&a, 0, sizeof a);
    assert_int_equal(ab__store_thread_heads(f->st, S("V"), count_runs, &a, &err), AB_OK);
    assert_int_equal(a.n, 0);
    /* a run never seen: UNKNOWN, named, AB_OK */
    assert_int_equal(ab__store_head(f->st, S("T"), S("nope"), &run, &err), AB_OK);
    assert_int_equal(run.status, AB_RUN_STATUS_UNKNOWN);
    assert_string_equal(run.thread, "T");
    assert_string_equal(run.run, "nope");
    assert_int_equal(run.epoch, 0);
    assert_int_equal(run.last_pos, 0);
    /* two runs of one batch, each with its own parent, then a parent in the next batch:
     * each parent is kept apart (the batch's parents buffer, reset at begin) */
    begin_at(f->st, 3000);
    static const char *const kids[][2] = {{"d", "parent-of-d"}, {"e", "b"}};
    for (size_t i = 0; i < 2; i++) {
        ev = ev_of("T", kids[i][0], 1, "started");
        ev.status = AB_RUN_STATUS_ACTIVE;
        ev.parent_run = (ab_str_t){kids[i][1], strlen(kids[i][1])};
        assert_int_equal(ab__store_append(f->st, &ev, NULL, &err), AB_OK);
    }
    commit_ok(f->st);
    begin_at(f->st, 4000);
    ev = ev_of("T", "f", 1, "started");
    ev.status = AB_RUN_STATUS_ACTIVE;
    ev.parent_run = S("c");
    assert_int_equal(ab__store_append(f->st, &ev, NULL, &err), AB_OK);
    commit_ok(f->st);
    static const char *const want[][2] = {{"d", "parent-of-d"}, {"e", "b"}, {"f", "c"}};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(ab__store_head(f->st, S("T"), (ab_str_t){want[i][0], 1}, &run, &err),
                         AB_OK);
        assert_string_equal(run.parent_run, want[i][1]);
    }
}

static void test_claim_bumps_epoch(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    ab_error_t err = AB_ERROR_INIT;
    uint64_t epoch = 0, last = 99;
    assert_int_equal(ab__store_claim(f->st, S("t"), S("r"), &epoch, &last, &err), AB_OK);
    assert_int_equal(epoch, 2); /* a first claim: 1 is the implicit epoch (PROTOCOL.md 7.3) */
    assert_int_equal(last, 0);
    begin_ok(f->st);
    append_ok(f->st, "t", "r", 1, "a");
    append_ok(f->st, "t", "r", 2, "b");
    /* no claim while a transaction is open */
    assert_int_equal(ab__store_claim(f->st, S("t"), S("r"), &epoch, &last, &err),
                     AB_INVALID_ARGUMENT);
    commit_ok(f->st);
    assert_int_equal(ab__store_claim(f->st, S("t"), S("r"), &epoch, &last, &err), AB_OK);
    assert_int_equal(epoch, 3);
    assert_int_equal(last, 2);
    assert_int_equal(ab__store_claim(f->st, S("t"), S("r"), &epoch, &last, &err), AB_OK);
    assert_int_equal(epoch, 4);
    ab_run_head_t run;
    assert_int_equal(ab__store_head(f->st, S("t"), S("r"), &run, &err), AB_OK);
    assert_int_equal(run.epoch, 4);
    /* an append with an older epoch does not lower it */
    begin_ok(f->st);
    append_ok(f->st, "t", "r", 3, "c");
    commit_ok(f->st);
    assert_int_equal(ab__store_head(f->st, S("t"), S("r"), &run, &err), AB_OK);
    assert_int_equal(run.epoch, 4);
}

static void test_reader_beside_writer(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    begin_ok(f->st);
    append_ok(f->st, "t", "r", 1, "committed");
    commit_ok(f->st);
    ab_store_t *rd = open_ok(f->dir, true);
    begin_ok(f->st);
    append_ok(f->st, "t", "r", 2, "pending");
    ab_error_t err = AB_ERROR_INIT;
    acc_t a = {.n = 0};
    uint32_t n = 0;
    /* the reader sees only committed data while the writer's transaction is open */
    assert_int_equal(read_q(rd, AB_REPLAY_ALL, NULL, NULL, 0, 0, collect, &a, &n, &err), AB_OK);
    assert_string_equal(a.text, "t/r#1@1=committed;");
    /* appends are staged: the writer too reads only committed rows, but
     * head_pos counts its staged positions */
    assert_int_equal(read_q(f->st, AB_REPLAY_RUN, "t", "r", 0, 0, NULL, NULL, &n, &err), AB_OK);
    assert_int_equal(n, 1);
    uint64_t head = 0;
    assert_int_equal(ab__store_head_pos(f->st, &head, &err), AB_OK);
    assert_int_equal(head, 2);
    /* the reader cannot write, and a second writer cannot begin */
    assert_int_equal(ab__store_begin(rd, 1, &err), AB_INVALID_ARGUMENT);
    ab_store_t *w2 = open_ok(f->dir, false);
    ab_error_clear(&err);
    assert_int_equal(ab__store_begin(w2, 1, &err), AB_UNAVAILABLE);
    assert_true(err.retryable);
    ab__store_close(&w2);
    commit_ok(f->st);
    memset(&a, 0, sizeof a);
    assert_int_equal(read_q(rd, AB_REPLAY_ALL, NULL, NULL, 1, 0, collect, &a, &n, &err), AB_OK);
    assert_string_equal(a.text, "t/r#2@2=pending;");
    ab__store_close(&rd);
}

static void test_readonly_needs_schema(void **state)
{
    fx_t *f = *state;
    ab_store_opts_t o = {.readonly = true};
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *st = NULL;
    assert_int_equal(ab__store_open(&st, f->dir, &o, &err), AB_NOT_FOUND);
    assert_null(st);
    ab_error_clear(&err);
    assert_int_equal(ab__store_open(NULL, f->dir, NULL, &err), AB_INVALID_ARGUMENT);
}

static void test_bad_arguments(void **state)
{
    fx_t *f = *state;
    f->st = open_ok(f->dir, false);
    ab_error_t err = AB_ERROR_INIT;
    ab_append_event_t ev = ev_of("t", "r", 1, "a");
    assert_int_equal(ab__store_append(f->st, &ev, NULL, &err), AB_INVALID_ARGUMENT); /* no txn */
    begin_ok(f->st);
    ev.thread.len = 0;
    ab_error_clear(&err);
    assert_int_equal(ab__store_append(f->st, &ev, NULL, &err), AB_INVALID_ARGUMENT);
    tu_assert_error(&err, AB_INVALID_ARGUMENT, "thread");
    ab_error_clear(&err);
    assert_int_equal(ab__store_begin(f->st, 1, &err), AB_INVALID_ARGUMENT); /* nested */
    ab__store_rollback(f->st);
    ab__store_rollback(f->st); /* idempotent */
    ab__store_rollback(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_reopen_keeps_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migrates_from_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer_schema_refused_unchanged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_file_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_commit_read_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exact_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_writes_callers_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rollback_leaves_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_seq_conflict, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reads_and_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_heads_and_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_claim_bumps_epoch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_beside_writer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readonly_needs_schema, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_faults.c - a real broker process against store failures and
 * backpressure:
 *  - a write-locked database (another connection holds BEGIN IMMEDIATE):
 *    every published event is answered `unavailable` (retryable) and not
 *    stored, a concurrent replay of committed data still works, and once the
 *    lock is gone the same events are accepted, each stored exactly once;
 *  - an overloaded ingest queue (tiny --queue, writer held up by the lock):
 *    `overloaded` (retryable) and nothing answered overloaded is stored;
 *  - a damaged, foreign (not SQLite), empty (0-byte) database or a newer
 *    schema at start: the broker exits non-zero naming the file (and, but
 *    for the newer schema, how to start afresh on purpose), and the file is
 *    byte-for-byte unchanged.
 *
 * The lock is taken with our own SQLite connection in the broker's WAL
 * database: BEGIN IMMEDIATE blocks writers, not readers. The broker's writer
 * waits up to its busy timeout (about 1 s) for the lock, then fails the
 * group; released within that wait, the group commits.
 */
#include "testutil.h"

#include "broker_proc.h"
#include "db_lock.h"

#include <sys/stat.h>

#define NLOCK 4 /* events of the run published while the database is locked */

/* Events seen by a replay, checked against what was sent. */
typedef struct seen {
    ab_doc_t *doc;
    const ab_buf_t *want; /* by seq - 1, for the run checked (NULL: count only) */
    const char *run;      /* count only events of this run (NULL: all) */
    size_t nwant;
    uint64_t next_seq; /* last seq seen of `run` */
    uint64_t last_pos;
    size_t n;     /* events of `run` (or all) */
    size_t total; /* every event */
} seen_t;

static ab_status_t seen_row(void *ud, const ab_stamp_t *st, const uint8_t *bytes, size_t len,
                            ab_error_t *err)
{
    seen_t *s = ud;
    ab_event_t ev;
    assert_int_equal(ab_event_decode(s->doc, bytes, len, NULL, &ev, err), AB_OK);
    assert_true(st->pos > s->last_pos);
    s->last_pos = st->pos;
    s->total++;
    if (s->run != NULL && (ev.run.len != strlen(s->run) || memcmp(ev.run.ptr, s->run, ev.run.len)))
        return AB_OK;
    s->n++;
    assert_int_equal(ev.seq, s->next_seq + 1); /* contiguous, each once */
    s->next_seq = ev.seq;
    if (s->want != NULL) {
        assert_true(ev.seq <= s->nwant);
        assert_int_equal(len, s->want[ev.seq - 1].len);
        assert_memory_equal(bytes, s->want[ev.seq - 1].data, len);
    }
    return AB_OK;
}

/* Replay run (thread, run) from the start into @p s; @return replay_end's head. */
static ab_head_t replay_run(ab_conn_t *c, ab_doc_t *doc, const char *thread, const char *run,
                            seen_t *s)
{
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay = (ab_replay_t){.scope = AB_REPLAY_RUN, .window = 2, .chunk_events = 2};
    q.u.replay.thread = (ab_str_t){thread, strlen(thread)};
    q.u.replay.run = (ab_str_t){run, strlen(run)};
    ab_replay_end_t end;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_replay(c, &q, seen_row, s, doc, &end, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("replay %s/%s: %s: %s", thread, run, ab_status_name(err.code), err.message);
    assert_int_equal(end.events, s->n);
    assert_int_equal(end.nheads, 1);
    return end.heads[0];
}

/* Replay everything into @p s. */
static void replay_all(ab_conn_t *c, ab_doc_t *doc, seen_t *s)
{
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay.scope = AB_REPLAY_ALL;
    ab_replay_end_t end;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_replay(c, &q, seen_row, s, doc, &end, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("replay all: %s: %s", ab_status_name(err.code), err.message);
    assert_int_equal(end.events, s->total);
}

static void expect_code(const ab_error_t *e, ab_status_t code)
{
    if (e->code != code)
        fail_msg("expected %s, got %s: %s", ab_status_name(code), ab_status_name(e->code),
                 e->message);
}

static void free_bufs(ab_buf_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ab_buf_free(&b[i]);
}

/* ---- locked database ------------------------------------------------------ */

typedef struct lock_state {
    it_t *t;
    sqlite3 *db;
    ab_conn_t *c, *c2;
    ab_doc_t *doc2, *edoc;
    ab_buf_t done[5];
    ab_buf_t evs[NLOCK];
} lock_state_t;

static int lock_setup(void **state)
{
    lock_state_t *ls = calloc(1, sizeof(*ls));
    if (ls == NULL || it_setup((void **)&ls->t) != 0) {
        *state = ls;
        return -1;
    }
    *state = ls;
    return 0;
}

/* Whatever happened, release the lock, close the clients and stop the broker. */
static int lock_teardown(void **state)
{
    lock_state_t *ls = *state;
    if (ls == NULL)
        return 0;
    dl_unlock(&ls->db);
    ab_conn_destroy(&ls->c);
    ab_conn_destroy(&ls->c2);
    ab_doc_destroy(&ls->doc2);
    ab_doc_destroy(&ls->edoc);
    free_bufs(ls->done, 5);
    free_bufs(ls->evs, NLOCK);
    it_teardown((void **)&ls->t);
    free(ls);
    return 0;
}

static void test_locked_database(void **state)
{
    lock_state_t *ls = *state;
    it_t *t = ls->t;
    IT_REQUIRE_BROKER(t);
    ab_error_t err = AB_ERROR_INIT;
    ls->c = it_connect(&t->bp);
    ls->c2 = it_connect(&t->bp);
    assert_int_equal(ab_doc_new(&ls->doc2), AB_OK);
    assert_int_equal(ab_doc_new(&ls->edoc), AB_OK);
    /* committed data: a whole run */
    for (uint64_t s = 1; s <= 5; s++)
        it_event(&ls->done[s - 1], "tc", "done", s, 5, 1);
    const ab_result_t *res = NULL;
    assert_int_equal(ab_conn_publish(ls->c, ls->done, 5, t->doc, &res, IT_TIMEOUT, &err), AB_OK);
    for (int i = 0; i < 5; i++)
        assert_int_equal(res[i].status, AB_RESULT_ACCEPTED);
    for (uint64_t s = 1; s <= NLOCK; s++)
        it_event(&ls->evs[s - 1], "tl", "r1", s, 0, 1);

    ls->db = dl_lock(t->bp.dir);

    /* publish while locked, and replay committed data while it is pending */
    uint64_t cid = it_send_publish(ls->c, ls->evs, NLOCK);
    seen_t s = {.doc = ls->edoc, .want = ls->done, .nwant = 5};
    ab_head_t h = replay_run(ls->c2, ls->doc2, "tc", "done", &s);
    assert_int_equal(s.n, 5);
    assert_int_equal(h.status, AB_RUN_STATUS_FINISHED);
    assert_int_equal(h.last_seq, 5);
    ab_msg_t reply;
    if (ab_conn_recv(ls->c, cid, t->doc, &reply, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("publish while locked: %s: %s", ab_status_name(err.code), err.message);
    assert_int_equal(reply.op, AB_OP_PUBLISHED);
    assert_int_equal(reply.u.published.nresults, NLOCK);
    for (size_t i = 0; i < NLOCK; i++) {
        const ab_result_t *r = &reply.u.published.results[i];
        assert_int_equal(r->seq, i + 1);
        assert_int_equal(r->status, AB_RESULT_REJECTED);
        assert_non_null(r->error);
        expect_code(r->error, AB_UNAVAILABLE);
        assert_true(r->error->retryable);
        assert_int_equal(r->pos, 0);
    }
    /* not acknowledged, not stored: the run is unknown; a claim cannot write either */
    h = it_head(ls->c2, ls->doc2, "tl", "r1");
    assert_int_equal(h.last_seq, 0);
    assert_int_equal(h.status, AB_RUN_STATUS_UNKNOWN);
    seen_t all = {.doc = ls->edoc};
    replay_all(ls->c2, ls->doc2, &all);
    assert_int_equal(all.total, 5);
    ab_claimed_t cl;
    ab_status_t st = ab_conn_claim(ls->c2, "tl", "r2", ls->doc2, &cl, IT_TIMEOUT, &err);
    expect_code(&err, AB_UNAVAILABLE);
    assert_int_equal(st, AB_UNAVAILABLE);
    assert_true(err.retryable);

    dl_unlock(&ls->db);

    /* the broker recovered by itself: the same events are accepted now */
    assert_int_equal(ab_conn_publish(ls->c, ls->evs, NLOCK, t->doc, &res, IT_TIMEOUT, &err), AB_OK);
    uint64_t first = 0;
    for (size_t i = 0; i < NLOCK; i++) {
        if (res[i].status != AB_RESULT_ACCEPTED)
            fail_msg("event %zu after the lock: %s", i + 1,
                     res[i].error ? res[i].error->message : "not accepted");
        if (i == 0)
            first = res[0].pos;
        assert_int_equal(res[i].pos, first + i);
    }
    /* again: duplicates of the same positions, nothing new */
    assert_int_equal(ab_conn_publish(ls->c, ls->evs, NLOCK, t->doc, &res, IT_TIMEOUT, &err), AB_OK);
    for (size_t i = 0; i < NLOCK; i++) {
        assert_int_equal(res[i].status, AB_RESULT_DUPLICATE);
        assert_int_equal(res[i].pos, first + i);
    }
    /* stored exactly once, contiguous */
    seen_t s2 = {.doc = ls->edoc, .want = ls->evs, .nwant = NLOCK};
    h = replay_run(ls->c2, ls->doc2, "tl", "r1", &s2);
    assert_int_equal(s2.n, NLOCK);
    assert_int_equal(h.last_seq, NLOCK);
    assert_int_equal(h.status, AB_RUN_STATUS_ACTIVE);
    seen_t all2 = {.doc = ls->edoc, .want = ls->evs, .nwant = NLOCK, .run = "r1"};
    replay_all(ls->c2, ls->doc2, &all2);
    assert_int_equal(all2.total, 5 + NLOCK);
    assert_int_equal(all2.n, NLOCK);
}

/* ---- overloaded ------------------------------------------------------------ */

#define QUEUE 8 /* --queue and --max-batch */
#define NOVER 3 /* publishes sent while the queue is full */

static int over_setup(void **state)
{
    lock_state_t *ls = calloc(1, sizeof(*ls));
    *state = ls;
    static const char *const extra[] = {"--queue", "8", "--max-batch", "8", NULL};
    if (ls == NULL || it_setup_with((void **)&ls->t, extra) != 0)
        return -1;
    return 0;
}

/*
 * The writer is held up in the lock's busy wait by publish A, which fills the
 * whole queue (QUEUE events in flight until A is answered); publishes sent
 * behind A on the same connection reach the command thread while A is still
 * in flight and are refused at once by the command thread. Their answers
 * arrive well inside the writer's ~1 s busy wait, so when the lock goes A
 * still commits (if it did not, A's results say so: the test fails, it does
 * not pass by accident).
 */
static void test_overloaded(void **state)
{
    lock_state_t *ls = *state;
    it_t *t = ls->t;
    IT_REQUIRE_BROKER(t);
    ab_error_t err = AB_ERROR_INIT;
    ls->c = it_connect(&t->bp);
    ls->c2 = it_connect(&t->bp);
    assert_int_equal(ab_doc_new(&ls->doc2), AB_OK);
    assert_int_equal(ab_doc_new(&ls->edoc), AB_OK);
    assert_int_equal(ab_conn_limits(ls->c)->max_batch, QUEUE);
    ab_buf_t a[QUEUE], b[NOVER];
    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
    for (uint64_t s = 1; s <= QUEUE; s++)
        it_event(&a[s - 1], "to", "a", s, 0, 1);
    for (int i = 0; i < NOVER; i++) {
        char run[8];
        snprintf(run, sizeof(run), "b%d", i);
        it_event(&b[i], "to", run, 1, 0, 1);
    }
    ls->db = dl_lock(t->bp.dir);
    uint64_t cid_a = it_send_publish(ls->c, a, QUEUE);
    uint64_t cid_b[NOVER];
    for (int i = 0; i < NOVER; i++)
        cid_b[i] = it_send_publish(ls->c, &b[i], 1);
    int overloaded = 0;
    for (int i = 0; i < NOVER; i++) {
        ab_msg_t reply;
        ab_status_t st = ab_conn_recv(ls->c, cid_b[i], t->doc, &reply, IT_TIMEOUT, &err);
        if (st == AB_OVERLOADED) {
            assert_int_equal(reply.op, AB_OP_ERROR);
            assert_true(err.retryable);
            overloaded++;
        } else if (st != AB_OK) {
            fail_msg("publish b%d: %s: %s", i, ab_status_name(err.code), err.message);
        }
    }
    dl_unlock(&ls->db);
    ab_msg_t reply;
    if (ab_conn_recv(ls->c, cid_a, t->doc, &reply, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("publish a: %s: %s", ab_status_name(err.code), err.message);
    assert_int_equal(reply.u.published.nresults, QUEUE);
    for (size_t i = 0; i < QUEUE; i++)
        if (reply.u.published.results[i].status != AB_RESULT_ACCEPTED)
            fail_msg("publish a, event %zu: %s (lock released too late?)", i + 1,
                     reply.u.published.results[i].error
                         ? reply.u.published.results[i].error->message
                         : "not accepted");
    if (overloaded == 0)
        fail_msg("no publish was answered overloaded while the queue was full");
    assert_int_equal(overloaded, NOVER);
    /* nothing answered overloaded was stored (replays do not use the ingest queue) */
    for (int i = 0; i < NOVER; i++) {
        char run[8];
        snprintf(run, sizeof(run), "b%d", i);
        seen_t none = {.doc = ls->edoc};
        ab_head_t h = replay_run(ls->c2, ls->doc2, "to", run, &none);
        assert_int_equal(none.n, 0);
        assert_int_equal(h.last_seq, 0);
        assert_int_equal(h.status, AB_RUN_STATUS_UNKNOWN);
    }
    seen_t all = {.doc = ls->edoc, .want = a, .nwant = QUEUE, .run = "a"};
    replay_all(ls->c2, ls->doc2, &all);
    assert_int_equal(all.total, QUEUE);
    assert_int_equal(all.n, QUEUE);
    /*
     * Retrying succeeds. The writer returns a publish's share of the queue
     * just after handing over its reply, so a request sent right after that
     * reply may still meet a full queue: retry `overloaded` with a backoff,
     * as the protocol advises (bounded).
     */
    for (int i = 0; i < NOVER; i++) {
        const ab_result_t *res = NULL;
        ab_status_t st = AB_OVERLOADED;
        for (int k = 0; k < 100 && st == AB_OVERLOADED; k++) {
            st = ab_conn_publish(ls->c, &b[i], 1, t->doc, &res, IT_TIMEOUT, &err);
            if (st == AB_OVERLOADED)
                nanosleep(&(struct timespec){.tv_nsec = 1000000L * (k + 1)}, NULL);
        }
        if (st != AB_OK)
            fail_msg("retry of b%d: %s: %s", i, ab_status_name(err.code), err.message);
        if (res[0].status != AB_RESULT_ACCEPTED)
            fail_msg("retry of b%d: %s", i, res[0].error ? res[0].error->message : "?");
    }
    free_bufs(a, QUEUE);
    free_bufs(b, NOVER);
}

/* ---- refused at start ------------------------------------------------------ */

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (nb == NULL) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    *len = n;
    return buf;
}

static void write_all(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* How every refusal of a damaged database ends (store.h). */
#define AFRESH "to start afresh on purpose, move"

/* Start a broker on @p dir; it must refuse, naming the database, and leave it unchanged. */
static void expect_refused(const char *dir, const char *word, const char *word2)
{
    char path[512], out[4096];
    snprintf(path, sizeof(path), "%s/agentbus.db", dir);
    size_t len0 = 0, len1 = 0;
    char *before = read_all(path, &len0);
    assert_non_null(before);
    int rc = bp_run_second(dir, out, sizeof(out));
    char *after = read_all(path, &len1);
    bool same = after != NULL && len0 == len1 && memcmp(before, after, len0) == 0;
    free(before);
    free(after);
    if (rc <= 0)
        fail_msg("broker on %s exited %d (want non-zero): %s", dir, rc, out);
    if (strstr(out, path) == NULL)
        fail_msg("the message does not name %s: %s", path, out);
    if (word != NULL && strstr(out, word) == NULL)
        fail_msg("the message does not say '%s': %s", word, out);
    if (word2 != NULL && strstr(out, word2) == NULL)
        fail_msg("the message does not say '%s': %s", word2, out);
    if (!same)
        fail_msg("%s changed although the broker refused it", path);
    char wal[600];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    struct stat sb;
    assert_int_not_equal(stat(wal, &sb), 0); /* no WAL was started on it */
}

typedef struct dir_state {
    char dir[64];
    bp_t bp;
} dir_state_t;

static int dir_setup(void **state)
{
    dir_state_t *d = calloc(1, sizeof(*d));
    *state = d;
    if (d == NULL)
        return -1;
    snprintf(d->dir, sizeof(d->dir), "/tmp/agentbus-faults-XXXXXX");
    return mkdtemp(d->dir) != NULL ? 0 : -1;
}

static int dir_teardown(void **state)
{
    dir_state_t *d = *state;
    if (d == NULL)
        return 0;
    bp_kill(&d->bp); /* the broker of test_damaged_database, if still running */
    if (d->dir[0])
        bp_rm_tree(d->dir);
    free(d);
    return 0;
}

static void test_garbage_database(void **state)
{
    dir_state_t *d = *state;
    if (!bp_available())
        skip();
    char path[512], junk[8192];
    snprintf(path, sizeof(path), "%s/agentbus.db", d->dir);
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (char)('a' + i % 23);
    write_all(path, junk, sizeof(junk));
    expect_refused(d->dir, "not a database", AFRESH);
}

/* A zero-length agentbus.db is not a new store: refused, left empty, no WAL. */
static void test_empty_database(void **state)
{
    dir_state_t *d = *state;
    if (!bp_available())
        skip();
    char path[512];
    snprintf(path, sizeof(path), "%s/agentbus.db", d->dir);
    write_all(path, "", 0);
    expect_refused(d->dir, "is empty (0 bytes)", AFRESH);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 0);
}

static void test_damaged_database(void **state)
{
    dir_state_t *d = *state;
    if (!bp_available())
        skip();
    /* a real store with some events, cleanly stopped */
    assert_int_equal(bp_start(&d->bp, d->dir, NULL), 0);
    ab_conn_t *c = it_connect(&d->bp);
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    ab_buf_t evs[20];
    memset(evs, 0, sizeof(evs));
    for (uint64_t s = 1; s <= 20; s++) {
        char body[1024];
        it_body(body, sizeof(body), "td", "r1", s, 20, 600);
        ab_error_t err = AB_ERROR_INIT;
        assert_int_equal(ab_envelope_json(&evs[s - 1], 1, "td", "r1", s, 1, body, &err), AB_OK);
    }
    const ab_result_t *res = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_publish(c, evs, 20, doc, &res, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(res[19].status, AB_RESULT_ACCEPTED);
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    free_bufs(evs, 20);
    assert_int_equal(bp_stop(&d->bp), 0);
    /* smash every page after the first (the schema page stays readable) */
    char path[512];
    snprintf(path, sizeof(path), "%s/agentbus.db", d->dir);
    size_t len = 0;
    char *data = read_all(path, &len);
    assert_non_null(data);
    assert_true(len > 8192);
    for (size_t i = 4096; i < len; i++)
        data[i] = (char)(0x5a ^ (i * 7));
    write_all(path, data, len);
    free(data);
    char wal[600];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    unlink(wal);
    expect_refused(d->dir, "damaged", AFRESH);
}

static void test_newer_schema(void **state)
{
    dir_state_t *d = *state;
    if (!bp_available())
        skip();
    char path[512];
    snprintf(path, sizeof(path), "%s/agentbus.db", d->dir);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE TABLE future(x INTEGER); INSERT INTO future VALUES(1);"
                                  "PRAGMA user_version = 99;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    expect_refused(d->dir, "newer", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_locked_database, lock_setup, lock_teardown),
        cmocka_unit_test_setup_teardown(test_overloaded, over_setup, lock_teardown),
        cmocka_unit_test_setup_teardown(test_garbage_database, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_empty_database, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_damaged_database, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_newer_schema, dir_setup, dir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_pg_plugin.c - the PostgreSQL plugin through its function table, on a
 * server of its own (pg_fixture.h): loading by name, dense positions and
 * reads of every scope, heads and claims, exact bytes, all-or-nothing
 * batches, the conditional append across two connections (a seq committed
 * by one is refused to the other; a writer fenced by a claim on one
 * connection is refused on the other), the fenced append of the thread
 * rules, a tailing reader that never skips
 * under concurrent commits from two connections, run requests shared by two
 * connections, two claims of one new run racing, snapshots, and a connection
 * killed under the handle (the schema's versions: test_pg_schema.c).
 *
 * One server for the file (group setup); each test uses fresh thread ids.
 */
#define PGMOD_FILE_SERVER
#include "pg_module.h"

#include "agentbus/plugin.h"
#include "loader.h"
#include "testutil.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

static ab_plugin_db_t *open_db(bool readonly)
{
    return pgmod_open(P, &g_pg, readonly, AB_DURABILITY_FSYNC); /* the default durability */
}

typedef struct acc {
    char text[4096];
    uint64_t last_pos;
    uint32_t n;
} acc_t;

static int acc_row(void *ud, const ab_row_t *row)
{
    acc_t *a = ud;
    size_t l = strlen(a->text);
    snprintf(a->text + l, sizeof a->text - l, "%s%.*s/%llu:%.*s", l ? " " : "", (int)row->run.len,
             row->run.ptr, (unsigned long long)row->seq, (int)row->len, (const char *)row->bytes);
    if (a->last_pos)
        assert_int_equal(row->pos, a->last_pos + 1);
    a->last_pos = row->pos;
    a->n++;
    return 0;
}

static void test_load_by_name(void **state)
{
    (void)state;
    assert_string_equal(P->name, "postgres");
    assert_int_equal(P->abi_version, AB_PLUGIN_ABI_VERSION);
    assert_true(ab__plugin_dispatches(P));
    assert_true(ab__plugin_shared(P));
    assert_false(ab__plugin_shared(ab__plugin_sqlite()));
    /* no conninfo: a typed refusal naming --pg */
    ab_plugin_open_opts_t o = {.data_dir = "/tmp"};
    ab_plugin_db_t *db = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(P->open(&o, &db, &err), AB_INVALID_CONFIG);
    assert_non_null(strstr(err.message, "--pg"));
    assert_null(db);
    /* a server that is not there: unavailable, retryable */
    ab_error_clear(&err);
    o.conninfo = "host=127.0.0.1 port=1 connect_timeout=2";
    assert_int_equal(P->open(&o, &db, &err), AB_UNAVAILABLE);
    assert_true(err.retryable);
}

static void test_append_read_heads(void **state)
{
    (void)state;
    ab_plugin_db_t *db = open_db(false), *rd = open_db(true);
    char th[64];
    pgmod_fresh(th, sizeof th, "th");
    ab_error_t err = AB_ERROR_INIT;
    uint64_t base = 0, first = 0, epoch = 0, last = 9;
    assert_int_equal(P->head_pos(db, &base, &err), AB_OK);
    assert_int_equal(P->claim(db, S(th), S("r1"), &epoch, &last, &err), AB_OK);
    assert_int_equal(epoch, 2); /* a first claim: 1 is the implicit epoch (PROTOCOL.md 7.3) */
    assert_int_equal(last, 0);
    ab_append_event_t b[5] = {pgmod_ev(th, "r1", 1, 2, "a1"), pgmod_ev(th, "r2", 1, 1, "b1"),
                              pgmod_ev(th, "r1", 2, 2, "a2"), pgmod_ev(th, "r2", 2, 1, "b2"),
                              pgmod_ev(th, "r1", 3, 2, "a3")};
    b[0].status = AB_RUN_STATUS_ACTIVE;
    b[4].status = AB_RUN_STATUS_FINISHED;
    b[4].outcome = AB_OUTCOME_SUCCESS;
    b[1].parent_run = S("r1");
    assert_int_equal(P->append_batch(db, b, 5, 1234, &first, &err), AB_OK);
    assert_int_equal(first, base + 1);
    uint64_t hp = 0;
    assert_int_equal(P->head_pos(rd, &hp, &err), AB_OK);
    assert_int_equal(hp, base + 5);
    acc_t a = {0};
    uint32_t n = 0;
    ab_read_t q = {.scope = AB_REPLAY_THREAD, .thread = S(th), .limit = 100};
    assert_int_equal(P->read(rd, &q, acc_row, &a, &n, &err), AB_OK);
    assert_string_equal(a.text, "r1/1:a1 r2/1:b1 r1/2:a2 r2/2:b2 r1/3:a3");
    assert_int_equal(n, 5);
    memset(&a, 0, sizeof a);
    q = (ab_read_t){
        .scope = AB_REPLAY_RUN, .thread = S(th), .run = S("r1"), .after_seq = 1, .limit = 1};
    assert_int_equal(P->read(rd, &q, acc_row, &a, &n, &err), AB_OK);
    assert_string_equal(a.text, "r1/2:a2");
    memset(&a, 0, sizeof a);
    q = (ab_read_t){.scope = AB_REPLAY_ALL, .after_pos = base + 3, .limit = 10};
    assert_int_equal(P->read(rd, &q, acc_row, &a, &n, &err), AB_OK);
    assert_string_equal(a.text, "r2/2:b2 r1/3:a3");
    ab_run_head_t h;
    assert_int_equal(P->head(rd, S(th), S("r1"), &h, &err), AB_OK);
    assert_int_equal(h.last_seq, 3);
    assert_int_equal(h.last_pos, base + 5);
    assert_int_equal(h.status, AB_RUN_STATUS_FINISHED);
    assert_int_equal(h.outcome, AB_OUTCOME_SUCCESS);
    assert_int_equal(h.ended_us, 1234);
    assert_int_equal(P->head(rd, S(th), S("r2"), &h, &err), AB_OK);
    assert_string_equal(h.parent_run, "r1");
    assert_int_equal(h.status, AB_RUN_STATUS_ACTIVE); /* has events, no status stored */
    assert_int_equal(P->head(rd, S(th), S("nope"), &h, &err), AB_OK);
    assert_int_equal(h.status, AB_RUN_STATUS_UNKNOWN);
    assert_string_equal(h.run, "nope");
    ab_buf_t bytes = {0};
    uint64_t pos = 0;
    assert_int_equal(P->event_bytes(rd, S(th), S("r2"), 2, &bytes, &pos, &err), AB_OK);
    assert_int_equal(bytes.len, 2);
    assert_memory_equal(bytes.data, "b2", 2);
    assert_int_equal(pos, base + 4);
    assert_int_equal(P->event_bytes(rd, S(th), S("r2"), 3, &bytes, &pos, &err), AB_NOT_FOUND);
    ab_buf_free(&bytes);
    P->close(rd);
    P->close(db);
}

static void test_conditional_append_two_connections(void **state)
{
    (void)state;
    ab_plugin_db_t *a = open_db(false), *b = open_db(false);
    char th[64];
    pgmod_fresh(th, sizeof th, "th");
    ab_error_t err = AB_ERROR_INIT;
    uint64_t first = 0, base = 0, epoch = 0, last = 0, hp = 0;
    assert_int_equal(P->head_pos(a, &base, &err), AB_OK);
    ab_append_event_t e1 = pgmod_ev(th, "r", 1, 1, "x");
    assert_int_equal(P->append_batch(a, &e1, 1, 1, &first, &err), AB_OK);
    /* b's view is stale: seq 1 again is refused, and so is a gap */
    ab_append_event_t e1b[2] = {pgmod_ev(th, "other", 1, 1, "o"), pgmod_ev(th, "r", 1, 1, "y")};
    assert_int_equal(P->append_batch(b, e1b, 2, 1, &first, &err), AB_CONFLICT);
    tu_assert_error(&err, AB_CONFLICT, "seq");
    assert_int_equal(ab_error_detail(&err, "last_seq")->i, 1);
    ab_error_clear(&err);
    ab_append_event_t e3 = pgmod_ev(th, "r", 3, 1, "z");
    assert_int_equal(P->append_batch(b, &e3, 1, 1, &first, &err), AB_CONFLICT);
    ab_error_clear(&err);
    /* nothing of a refused batch is stored, not even its other run */
    assert_int_equal(P->head_pos(a, &hp, &err), AB_OK);
    assert_int_equal(hp, base + 1);
    ab_run_head_t h;
    assert_int_equal(P->head(a, S(th), S("other"), &h, &err), AB_OK);
    assert_int_equal(h.last_seq, 0);
    /* fencing: b claims (epoch 2); a's writer at epoch 1 is refused */
    assert_int_equal(P->claim(b, S(th), S("r"), &epoch, &last, &err), AB_OK);
    assert_int_equal(epoch, 2);
    assert_int_equal(last, 1);
    ab_append_event_t e2 = pgmod_ev(th, "r", 2, 1, "late");
    assert_int_equal(P->append_batch(a, &e2, 1, 1, &first, &err), AB_CONFLICT);
    tu_assert_error(&err, AB_CONFLICT, "epoch");
    assert_int_equal(ab_error_detail(&err, "epoch")->i, 2);
    ab_error_clear(&err);
    e2.epoch = 2;
    assert_int_equal(P->append_batch(a, &e2, 1, 1, &first, &err), AB_OK);
    assert_int_equal(first, base + 2);
    /* inside one batch a run's seqs must follow each other */
    ab_append_event_t gap[2] = {pgmod_ev(th, "g", 1, 1, "1"), pgmod_ev(th, "g", 3, 1, "3")};
    assert_int_equal(P->append_batch(a, gap, 2, 1, &first, &err), AB_CONFLICT);
    P->close(a);
    P->close(b);
}

/*
 * The fenced append (plugin.h append_fenced): a batch fenced by thread T commits only if
 * no batch fenced by T committed past the `seen` it carries; a refused batch stores
 * nothing and moves no fence; an unfenced append and another thread's fence do not count.
 */
static void test_fenced_append(void **state)
{
    (void)state;
    ab_plugin_db_t *a = open_db(false), *b = open_db(false);
    char th[64], other[64];
    pgmod_fresh(th, sizeof th, "fence");
    pgmod_fresh(other, sizeof other, "fence-other");
    assert_true(ab_plugin_has(P, append_fenced));
    ab_error_t err = AB_ERROR_INIT;
    uint64_t seen = 0, first = 0, hp = 0;
    assert_int_equal(P->head_pos(a, &seen, &err), AB_OK);
    ab_str_t t = S(th), o = S(other), twice[2] = {S(th), S(th)};
    /* a: a batch fenced by T (named twice: repeats are one), seen = the head */
    ab_append_event_t a1[2] = {pgmod_ev(th, "ra", 1, 1, "a1"), pgmod_ev(th, "ra", 2, 1, "a2")};
    assert_int_equal(P->append_fenced(a, a1, 2, twice, 2, seen, 1, &first, &err), AB_OK);
    uint64_t a_last = first + 1;
    /* b has not seen it: a batch fenced by T is refused whole, its other run too */
    ab_append_event_t b1[2] = {pgmod_ev(other, "rx", 1, 1, "x"), pgmod_ev(th, "rb", 1, 1, "b1")};
    assert_int_equal(P->append_fenced(b, b1, 2, &t, 1, seen, 1, &first, &err), AB_CONFLICT);
    tu_assert_error(&err, AB_CONFLICT, "thread");
    assert_int_equal(ab_error_detail(&err, "thread_pos")->i, (int64_t)a_last);
    ab_error_clear(&err);
    assert_int_equal(P->head_pos(b, &hp, &err), AB_OK);
    assert_int_equal(hp, a_last);
    ab_run_head_t h;
    assert_int_equal(P->head(b, S(other), S("rx"), &h, &err), AB_OK);
    assert_int_equal(h.last_seq, 0);
    /* the same events fenced by another thread only, or not fenced, commit */
    assert_int_equal(P->append_fenced(b, b1, 1, &o, 1, seen, 1, &first, &err), AB_OK);
    assert_int_equal(P->append_batch(b, &b1[1], 1, 1, &first, &err), AB_OK);
    /* b once it has seen a's batch: fenced by T, it commits (the refused batch and the
     * unfenced one of T after a's did not move T's fence) */
    ab_append_event_t b2 = pgmod_ev(th, "rb", 2, 1, "b2");
    assert_int_equal(P->append_fenced(b, &b2, 1, &t, 1, a_last, 1, &first, &err), AB_OK);
    uint64_t b_last = first;
    /* now a is behind: fenced by T, seen just below b2, it is refused */
    ab_append_event_t a3 = pgmod_ev(th, "ra", 3, 1, "a3");
    assert_int_equal(P->append_fenced(a, &a3, 1, &t, 1, b_last - 1, 1, &first, &err), AB_CONFLICT);
    assert_int_equal(ab_error_detail(&err, "thread_pos")->i, (int64_t)b_last);
    ab_error_clear(&err);
    /* a batch that passes the fence but fails its run check leaves the fence where it was */
    ab_append_event_t stale = pgmod_ev(th, "ra", 1, 1, "again");
    assert_int_equal(P->append_fenced(a, &stale, 1, &t, 1, b_last, 1, &first, &err), AB_CONFLICT);
    tu_assert_error(&err, AB_CONFLICT, "seq");
    ab_error_clear(&err);
    assert_int_equal(P->append_fenced(a, &a3, 1, &t, 1, b_last, 1, &first, &err), AB_OK);
    /* a bad id in the list is refused before anything is sent */
    ab_str_t bad = {"", 0};
    assert_int_equal(P->append_fenced(a, &a3, 1, &bad, 1, first, 1, &first, &err),
                     AB_INVALID_ARGUMENT);
    ab_error_clear(&err);
    P->close(a);
    P->close(b);
}

/* heads_of: one head per run asked, in the order asked, stored ones as head gives them and an
 * unknown one UNKNOWN with its ids; repeats answered each time. */
typedef struct heads_acc {
    ab_run_head_t h[8];
    size_t n;
} heads_acc_t;

static int acc_head(void *ud, const ab_run_head_t *h)
{
    heads_acc_t *a = ud;
    if (a->n < 8)
        a->h[a->n] = *h;
    a->n++;
    return 0;
}

static void test_heads_of(void **state)
{
    (void)state;
    ab_plugin_db_t *a = open_db(false);
    char th[64], th2[64];
    pgmod_fresh(th, sizeof th, "hof");
    pgmod_fresh(th2, sizeof th2, "hof2");
    ab_error_t err = AB_ERROR_INIT;
    uint64_t first = 0;
    ab_append_event_t ev[3] = {pgmod_ev(th, "r", 1, 1, "a"), pgmod_ev(th, "r", 2, 1, "b"),
                               pgmod_ev(th2, "s", 1, 1, "c")};
    assert_int_equal(P->append_batch(a, ev, 3, 1, &first, &err), AB_OK);
    ab_str_t t[4] = {S(th), S(th), S(th2), S(th)}, r[4] = {S("r"), S("nope"), S("s"), S("r")};
    heads_acc_t acc = {0};
    assert_int_equal(P->heads_of(a, t, r, 4, acc_head, &acc, &err), AB_OK);
    assert_int_equal(acc.n, 4);
    ab_run_head_t one;
    assert_int_equal(P->head(a, S(th), S("r"), &one, &err), AB_OK);
    assert_memory_equal(&acc.h[0], &one, sizeof one);
    assert_memory_equal(&acc.h[3], &one, sizeof one);
    assert_int_equal(acc.h[0].last_seq, 2);
    assert_int_equal(acc.h[0].last_pos, first + 1);
    assert_int_equal(acc.h[1].status, AB_RUN_STATUS_UNKNOWN);
    assert_int_equal(acc.h[1].last_seq, 0);
    assert_string_equal(acc.h[1].run, "nope");
    assert_string_equal(acc.h[1].thread, th);
    assert_string_equal(acc.h[2].run, "s");
    assert_int_equal(acc.h[2].last_pos, first + 2);
    ab_str_t bad = {"", 0};
    assert_int_equal(P->heads_of(a, &bad, r, 1, acc_head, &acc, &err), AB_INVALID_ARGUMENT);
    P->close(a);
}

/* Batches interleave the runs of two threads; a thread read paged with a small
 * limit and the whole-bus read paged likewise both see every event once, in
 * position order (chunks of one batch interleave their positions). */
typedef struct pager {
    uint64_t last, n;
    bool unordered;
    char want_thread[64];
    bool foreign;
} pager_t;

static int page_row(void *ud, const ab_row_t *row)
{
    pager_t *pg = ud;
    if (row->pos <= pg->last)
        pg->unordered = true;
    if (pg->want_thread[0] && (row->thread.len != strlen(pg->want_thread) ||
                               memcmp(row->thread.ptr, pg->want_thread, row->thread.len) != 0))
        pg->foreign = true;
    pg->last = row->pos;
    pg->n++;
    return 0;
}

static void test_paging_interleaved_batches(void **state)
{
    (void)state;
    ab_plugin_db_t *db = open_db(false), *rd = open_db(true);
    char t1[64], t2[64];
    pgmod_fresh(t1, sizeof t1, "pa");
    pgmod_fresh(t2, sizeof t2, "pb");
    ab_error_t err = AB_ERROR_INIT;
    uint64_t base = 0, first = 0;
    assert_int_equal(P->head_pos(db, &base, &err), AB_OK);
    static const char *const runs[] = {"a", "b", "c"};
    ab_append_event_t evs[30];
    for (int b = 0; b < 4; b++) {
        for (int i = 0; i < 30; i++)
            evs[i] =
                pgmod_ev(i % 2 ? t2 : t1, runs[(i / 2) % 3], (uint64_t)(b * 5 + i / 6 + 1), 1, "e");
        assert_int_equal(P->append_batch(db, evs, 30, 1, &first, &err), AB_OK);
    }
    for (uint32_t limit = 1; limit <= 8; limit += 7) {
        pager_t pg = {.last = 0};
        snprintf(pg.want_thread, sizeof pg.want_thread, "%s", t1);
        ab_read_t q = {.scope = AB_REPLAY_THREAD, .thread = S(t1), .limit = limit};
        uint32_t n = limit;
        while (n == limit) {
            q.after_pos = pg.last;
            assert_int_equal(P->read(rd, &q, page_row, &pg, &n, &err), AB_OK);
        }
        assert_int_equal(pg.n, 60);
        assert_false(pg.unordered);
        assert_false(pg.foreign);
        pager_t all = {.last = base};
        q = (ab_read_t){.scope = AB_REPLAY_ALL, .limit = limit};
        n = limit;
        while (n == limit) {
            q.after_pos = all.last;
            assert_int_equal(P->read(rd, &q, page_row, &all, &n, &err), AB_OK);
        }
        assert_int_equal(all.n, 120);
        assert_false(all.unordered);
        assert_int_equal(all.last, base + 120);
    }
    ab_buf_t bytes = {0};
    uint64_t pos = 0;
    assert_int_equal(P->event_bytes(rd, S(t2), S("c"), 17, &bytes, &pos, &err), AB_OK);
    assert_true(pos > base);
    ab_buf_free(&bytes);
    P->close(rd);
    P->close(db);
}

/* ---- a tailing reader under concurrent commits ------------------------------------ */

#define TAIL_BATCHES 150
#define TAIL_BATCH   40

typedef struct tail_writer {
    int id;
    char thread[64];
    ab_status_t failed;
} tail_writer_t;

static atomic_int g_writers_done;

static void *tail_write(void *arg)
{
    tail_writer_t *w = arg;
    ab_plugin_db_t *db = open_db(false);
    ab_append_event_t evs[TAIL_BATCH];
    char runs[4][16];
    for (int r = 0; r < 4; r++)
        snprintf(runs[r], sizeof runs[r], "r%d", r);
    for (int b = 0; b < TAIL_BATCHES && !w->failed; b++) {
        for (int i = 0; i < TAIL_BATCH; i++)
            evs[i] = pgmod_ev(w->thread, runs[i % 4], (uint64_t)(b * (TAIL_BATCH / 4) + i / 4 + 1),
                              1, "payload-of-an-event");
        uint64_t first = 0;
        ab_error_t err = AB_ERROR_INIT;
        w->failed = P->append_batch(db, evs, TAIL_BATCH, b, &first, &err);
    }
    P->close(db);
    atomic_fetch_add(&g_writers_done, 1);
    return NULL;
}

typedef struct tail_state {
    uint64_t last;
    uint64_t seen;
    bool skipped;
} tail_state_t;

static int tail_row(void *ud, const ab_row_t *row)
{
    tail_state_t *t = ud;
    if (row->pos != t->last + 1)
        t->skipped = true;
    t->last = row->pos;
    t->seen++;
    return 0;
}

static void test_tailing_reader_never_skips(void **state)
{
    (void)state;
    ab_plugin_db_t *rd = open_db(true);
    ab_error_t err = AB_ERROR_INIT;
    tail_state_t t = {0};
    assert_int_equal(P->head_pos(rd, &t.last, &err), AB_OK);
    uint64_t start = t.last;
    tail_writer_t w[2] = {{.id = 0}, {.id = 1}};
    pthread_t th[2];
    atomic_store(&g_writers_done, 0);
    for (int i = 0; i < 2; i++) {
        pgmod_fresh(w[i].thread, sizeof w[i].thread, "tail");
        assert_int_equal(pthread_create(&th[i], NULL, tail_write, &w[i]), 0);
    }
    uint64_t want = 2u * TAIL_BATCHES * TAIL_BATCH;
    long end = pgfx_now_ms() + 60000;
    while (t.seen < want && pgfx_now_ms() < end) {
        bool done = atomic_load(&g_writers_done) == 2;
        ab_read_t q = {.scope = AB_REPLAY_ALL, .after_pos = t.last, .limit = 97};
        uint32_t n = 0;
        assert_int_equal(P->read(rd, &q, tail_row, &t, &n, &err), AB_OK);
        assert_false(t.skipped);
        if (n == 0 && done)
            break;
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].failed, AB_OK);
    }
    assert_int_equal(t.seen, want);
    assert_int_equal(t.last, start + want);
    P->close(rd);
}

/* ---- requests ------------------------------------------------------------------------ */

static int count_req(void *ud, const ab_request_t *r)
{
    (void)r;
    (*(int *)ud)++;
    return 0;
}

static void test_requests_shared(void **state)
{
    (void)state;
    ab_plugin_db_t *a = open_db(false), *b = open_db(false);
    char key[64], key2[64], th[64];
    pgmod_fresh(key, sizeof key, "key");
    pgmod_fresh(key2, sizeof key2, "key");
    pgmod_fresh(th, sizeof th, "th");
    ab_error_t err = AB_ERROR_INIT;
    ab_request_new_t nr = {.key = S(key),
                           .agent = S("agent-x"),
                           .thread = S(th),
                           .run = S("r1"),
                           .run_named = true,
                           .input = (const uint8_t *)"in",
                           .input_len = 2};
    ab_request_t r1, r2, r3;
    bool existing = true;
    assert_int_equal(P->request_put(a, &nr, &r1, &existing, &err), AB_OK);
    assert_false(existing);
    assert_int_equal(r1.state, AB_REQ_QUEUED);
    /* the same key through the other connection: the stored request */
    assert_int_equal(P->request_put(b, &nr, &r2, &existing, &err), AB_OK);
    assert_true(existing);
    assert_int_equal(r2.id, r1.id);
    nr.input_len = 1;
    assert_int_equal(P->request_put(b, &nr, &r2, &existing, &err), AB_CONFLICT);
    tu_assert_error(&err, AB_CONFLICT, "key");
    ab_error_clear(&err);
    /* another key for the same run */
    nr.key = S(key2);
    assert_int_equal(P->request_put(b, &nr, &r2, &existing, &err), AB_CONFLICT);
    tu_assert_error(&err, AB_CONFLICT, "run");
    ab_error_clear(&err);
    nr.run = S("r2");
    assert_int_equal(P->request_put(b, &nr, &r2, &existing, &err), AB_OK);
    assert_true(r2.id > r1.id);
    uint64_t ahead = 9;
    assert_int_equal(P->request_position(a, r2.id, &ahead, &err), AB_OK);
    assert_true(ahead >= 1);
    /* compare-and-set moves from both connections: one wins */
    ab_request_move_t mv = {
        .expect_state = AB_REQ_QUEUED, .state = AB_REQ_ASSIGNED, .worker = S("w1"), .epoch = 1};
    assert_int_equal(P->request_move(a, r1.id, &mv, &r3, &err), AB_OK);
    assert_int_equal(r3.attempts, 1);
    assert_string_equal(r3.worker, "w1");
    assert_int_equal(P->request_move(b, r1.id, &mv, &r3, &err), AB_CONFLICT);
    tu_assert_error(&err, AB_CONFLICT, "state");
    char want[128];
    snprintf(want, sizeof want,
             "request %llu moved on: it is assigned at epoch 1 now (nothing changed)",
             (unsigned long long)r1.id);
    assert_string_equal(err.message, want);
    ab_error_clear(&err);
    mv = (ab_request_move_t){.expect_state = AB_REQ_ASSIGNED, .state = AB_REQ_ENDED};
    assert_int_equal(P->request_move(b, r1.id, &mv, &r3, &err), AB_INVALID_ARGUMENT);
    assert_string_equal(err.message, "postgres: a request cannot move assigned -> ended");
    ab_error_clear(&err);
    nr.input_len = AB_REQUEST_INPUT_MAX_BYTES + 1; /* refused before anything is sent */
    assert_int_equal(P->request_put(b, &nr, &r3, &existing, &err), AB_TOO_LARGE);
    snprintf(want, sizeof want, "postgres: request input of %u bytes is over %u",
             AB_REQUEST_INPUT_MAX_BYTES + 1, AB_REQUEST_INPUT_MAX_BYTES);
    assert_string_equal(err.message, want);
    nr.input_len = 1;
    ab_error_clear(&err);
    int n = 0;
    assert_int_equal(P->request_thread_open(b, S(th), count_req, &n, &err), AB_OK);
    assert_int_equal(n, 2);
    ab_buf_t in = {0};
    assert_int_equal(P->request_by_run(b, S(th), S("r2"), &r3, &in, &err), AB_OK);
    assert_int_equal(r3.id, r2.id);
    assert_int_equal(in.len, 1);
    assert_int_equal(P->request_by_key(b, S(key), &r3, NULL, &err), AB_OK);
    assert_int_equal(r3.state, AB_REQ_ASSIGNED);
    uint32_t cnt = 0;
    n = 0;
    assert_int_equal(
        P->request_list(b, AB_REQ_QUEUED, S("agent-x"), 0, 100, count_req, &n, &cnt, &err), AB_OK);
    assert_true(cnt >= 1);
    ab_buf_free(&in);
    P->close(a);
    P->close(b);
}

static long long sql1(const char *sql)
{
    return pgfx_scalar1(&g_pg, sql);
}

typedef struct claimer {
    ab_plugin_db_t *db;
    const char *thread;
    uint64_t epoch;
    ab_status_t s;
} claimer_t;

static void *claim_thread(void *arg)
{
    claimer_t *c = arg;
    ab_error_t err = AB_ERROR_INIT;
    uint64_t last = 0;
    c->s = P->claim(c->db, S(c->thread), S("r"), &c->epoch, &last, &err);
    return NULL;
}

/* ---- dispatch across brokers: request_take, broker_lease, the request wake --------------------
 */

static ab_request_t put_req(ab_plugin_db_t *db, const char *thread, const char *run,
                            const char *parent)
{
    char key[64];
    pgmod_fresh(key, sizeof key, "key");
    ab_request_new_t nr = {.key = S(key),
                           .agent = S("agent-t"),
                           .thread = S(thread),
                           .run = S(run),
                           .run_named = true,
                           .input = (const uint8_t *)"in",
                           .input_len = 2,
                           .parent_run = parent ? S(parent) : (ab_str_t){0}};
    ab_request_t r;
    bool existing = true;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(P->request_put(db, &nr, &r, &existing, &err), AB_OK);
    assert_false(existing);
    return r;
}

static ab_status_t take(ab_plugin_db_t *db, uint64_t id, const char *broker, ab_request_t *out)
{
    ab_buf_t in = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t rc = P->request_take(db, id, S("w"), S(broker), out, &in, &err);
    if (rc == AB_OK)
        assert_true(in.len == 2 && memcmp(in.data, "in", 2) == 0);
    if (rc == AB_CONFLICT)
        tu_assert_error(&err, AB_CONFLICT, "id");
    ab_buf_free(&in);
    return rc;
}

static long long runs_of(const char *thread)
{
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM ab_runs WHERE thread = '%s'", thread);
    return sql1(sql);
}

/* The ids the lost-broker callback delivers, among the first 8. */
typedef struct ids {
    uint64_t v[64];
    int n;
} ids_t;

static int note_id(void *ud, const ab_request_t *r)
{
    ids_t *l = ud;
    if (l->n < 64)
        l->v[l->n++] = r->id;
    return 0;
}

static bool has_id(const ids_t *l, uint64_t id)
{
    for (int i = 0; i < l->n; i++)
        if (l->v[i] == id)
            return true;
    return false;
}

/* request_take: the thread rule on the stored rows, the claim only with the assignment, a
 * locked row skipped; broker_lease: a lost broker's held requests; wake_drain's mask. */
static void test_take_and_leases(void **state)
{
    (void)state;
    assert_true(ab__plugin_takes(P));
    ab_plugin_db_t *a = open_db(false), *b = open_db(false);
    char th[64], th2[64], ba[32], bb[32];
    pgmod_fresh(th, sizeof th, "th");
    pgmod_fresh(th2, sizeof th2, "th");
    pgmod_fresh(ba, sizeof ba, "ba");
    pgmod_fresh(bb, sizeof bb, "bb");
    ab_request_t r1 = put_req(a, th, "r1", NULL), r2 = put_req(a, th, "r2", NULL), r;
    /* r2 waits behind r1: refused, and its run was not claimed */
    assert_int_equal(take(b, r2.id, bb, &r), AB_CONFLICT);
    assert_int_equal(runs_of(th), 0);
    uint32_t woken = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(P->wake_drain(a, &woken, &err), AB_OK);
    assert_int_equal(P->wake_drain(b, &woken, &err), AB_OK);
    assert_int_equal(take(a, r1.id, ba, &r), AB_OK);
    assert_int_equal(r.state, AB_REQ_ASSIGNED);
    assert_int_equal(r.epoch, 2);
    assert_int_equal(r.attempts, 1);
    assert_string_equal(r.broker, ba);
    assert_string_equal(r.worker, "w");
    assert_int_equal(runs_of(th), 1);
    /* a's own move does not wake a; b is woken for requests */
    assert_int_equal(P->wake_drain(a, &woken, &err), AB_OK);
    assert_int_equal(woken & AB_WAKE_REQUESTS, 0);
    struct pollfd pfd = {.fd = P->wake_fd(b), .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 5000), 1);
    assert_int_equal(P->wake_drain(b, &woken, &err), AB_OK);
    assert_true(woken & AB_WAKE_REQUESTS);
    /* taken once; r2's thread is busy now; a child of r1 is not held back */
    assert_int_equal(take(b, r1.id, bb, &r), AB_CONFLICT);
    assert_int_equal(take(b, r2.id, bb, &r), AB_CONFLICT);
    ab_request_t r3 = put_req(b, th, "r3", "r1");
    assert_int_equal(take(b, r3.id, bb, &r), AB_OK);
    assert_int_equal(runs_of(th), 2);
    /* a row another taker holds locked is skipped, not waited for */
    ab_request_t r4 = put_req(a, th2, "r4", NULL);
    PGconn *c = pgfx_connect(&g_pg);
    char sql[160];
    snprintf(sql, sizeof sql, "BEGIN; SELECT 1 FROM ab_requests WHERE id = %llu FOR UPDATE",
             (unsigned long long)r4.id);
    PQclear(PQexec(c, sql));
    assert_int_equal(take(a, r4.id, ba, &r), AB_CONFLICT);
    PQclear(PQexec(c, "ROLLBACK"));
    PQfinish(c);
    assert_int_equal(take(a, r4.id, ba, &r), AB_OK);
    /* leases: with ba alive, b sees none of its requests as lost; once ba's lease ended, b
     * gets ba's two held requests (and not its own r3) */
    int64_t now = 1000000000000000;
    ids_t lost = {0};
    assert_int_equal(P->broker_lease(a, S(ba), now, now + 10000000, 64, NULL, NULL, &err), AB_OK);
    assert_int_equal(P->broker_lease(b, S(bb), now, now + 10000000, 64, note_id, &lost, &err),
                     AB_OK);
    assert_false(has_id(&lost, r1.id) || has_id(&lost, r4.id) || has_id(&lost, r3.id));
    lost.n = 0;
    assert_int_equal(
        P->broker_lease(b, S(bb), now + 10000001, now + 20000001, 64, note_id, &lost, &err), AB_OK);
    assert_true(has_id(&lost, r1.id) && has_id(&lost, r4.id));
    assert_false(has_id(&lost, r3.id) || has_id(&lost, r2.id));
    assert_int_equal(P->broker_lease(a, S(""), now, now, 64, NULL, NULL, &err),
                     AB_INVALID_ARGUMENT);
    P->close(a);
    P->close(b);
}

static long long run_epoch_of(const char *thread)
{
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT epoch FROM ab_runs WHERE thread = '%s'", thread);
    return sql1(sql);
}

/* request_cancel: an assigned request is claimed and cancelled in one transaction, unless its
 * run's RUN_STARTED of the assignment's epoch committed first (then nothing is claimed). */
static void test_cancel_assigned(void **state)
{
    (void)state;
    ab_plugin_db_t *a = open_db(false);
    char th[64], th2[64];
    pgmod_fresh(th, sizeof th, "th");
    pgmod_fresh(th2, sizeof th2, "th");
    ab_request_t r1 = put_req(a, th, "r1", NULL), r2 = put_req(a, th2, "r2", NULL), r;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(take(a, r1.id, "ba", &r), AB_OK); /* assigned at epoch 2 (a first claim) */
    assert_int_equal(P->request_cancel(a, r1.id, 3, &r, &err), AB_CONFLICT); /* not its epoch */
    tu_assert_error(&err, AB_CONFLICT, "state");
    ab_error_clear(&err);
    assert_int_equal(run_epoch_of(th), 2);
    assert_int_equal(P->request_cancel(a, r1.id, 2, &r, &err), AB_OK);
    assert_int_equal(r.state, AB_REQ_CANCELLED);
    assert_int_equal(r.epoch, 3);
    assert_int_equal(run_epoch_of(th), 3); /* the assignee is fenced */
    assert_int_equal(P->request_cancel(a, r1.id, 2, &r, &err), AB_CONFLICT);
    ab_error_clear(&err);
    /* r2's RUN_STARTED commits before the cancel: refused, its run not claimed */
    assert_int_equal(take(a, r2.id, "ba", &r), AB_OK);
    ab_append_event_t started = pgmod_ev(th2, "r2", 1, 2, "started");
    started.status = AB_RUN_STATUS_ACTIVE;
    uint64_t first = 0;
    assert_int_equal(P->append_batch(a, &started, 1, 1, &first, &err), AB_OK);
    assert_int_equal(P->request_cancel(a, r2.id, 2, &r, &err), AB_CONFLICT);
    ab_error_clear(&err);
    assert_int_equal(run_epoch_of(th2), 2);
    assert_int_equal(P->request_get(a, r2.id, &r, NULL, &err), AB_OK);
    assert_int_equal(r.state, AB_REQ_ASSIGNED);
    P->close(a);
}

/* request_cancel_held: only a held request whose RUN_STARTED committed (started, or assigned
 * in the moment before its move), at its epoch; marked only while its broker's lease is
 * alive; a second call changes nothing. */
static void test_cancel_held(void **state)
{
    (void)state;
    ab_plugin_db_t *a = open_db(false);
    char th[64], bh[64];
    pgmod_fresh(th, sizeof th, "th");
    pgmod_fresh(bh, sizeof bh, "bh");
    ab_request_t q = put_req(a, th, "h1", NULL), r;
    ab_error_t err = AB_ERROR_INIT;
    bool alive = false;
    int64_t now = (int64_t)time(NULL) * 1000000;
    assert_int_equal(take(a, q.id, bh, &r), AB_OK); /* at epoch 2, a first claim */
    assert_int_equal(r.cancel_epoch, 0);
    /* assigned, no RUN_STARTED yet: request_cancel's case, refused here */
    assert_int_equal(P->request_cancel_held(a, q.id, 2, now, &r, &alive, &err), AB_CONFLICT);
    tu_assert_error(&err, AB_CONFLICT, "state");
    ab_error_clear(&err);
    ab_append_event_t started = pgmod_ev(th, "h1", 1, 2, "started");
    started.status = AB_RUN_STATUS_ACTIVE;
    uint64_t first = 0;
    assert_int_equal(P->append_batch(a, &started, 1, 1, &first, &err), AB_OK);
    /* the RUN_STARTED committed, the request still assigned; no lease of bh: not marked */
    assert_int_equal(P->request_cancel_held(a, q.id, 2, now, &r, &alive, &err), AB_OK);
    assert_false(alive);
    assert_int_equal(r.cancel_epoch, 0);
    assert_int_equal(P->broker_lease(a, S(bh), now, now + 10000000, 1, NULL, NULL, &err), AB_OK);
    for (int i = 0; i < 2; i++) { /* marked once; the second call finds it marked */
        alive = false;
        assert_int_equal(P->request_cancel_held(a, q.id, 2, now, &r, &alive, &err), AB_OK);
        assert_true(alive);
        assert_int_equal(r.state, AB_REQ_ASSIGNED);
        assert_int_equal(r.cancel_epoch, 2);
        assert_int_equal(r.epoch, 2);
    }
    assert_int_equal(P->request_cancel_held(a, q.id, 3, now, &r, &alive, &err), AB_CONFLICT);
    ab_error_clear(&err);
    /* started: the same; once bh's lease has ended, not alive (the mark stays as it was) */
    ab_request_move_t mv = {AB_REQ_ASSIGNED, 2, AB_REQ_STARTED, S("w"), 2, S(bh)};
    assert_int_equal(P->request_move(a, q.id, &mv, &r, &err), AB_OK);
    assert_int_equal(r.cancel_epoch, 2);
    assert_int_equal(P->request_cancel_held(a, q.id, 2, now + 20000000, &r, &alive, &err), AB_OK);
    assert_false(alive);
    assert_int_equal(r.state, AB_REQ_STARTED);
    assert_int_equal(P->request_get(a, q.id, &r, NULL, &err), AB_OK);
    assert_int_equal(r.cancel_epoch, 2);
    P->close(a);
}

/* Two claims of one new run at once (two brokers): the second waits for the first's insert
 * and then bumps the epoch the first made; the run is counted once. */
static void test_claims_of_a_new_run_race(void **state)
{
    (void)state;
    ab_plugin_db_t *db = open_db(false);
    char th[64], sql[256];
    pgmod_fresh(th, sizeof th, "race");
    long long runs = sql1("SELECT v FROM ab_head WHERE id = 3");
    PGconn *other = pgfx_connect(&g_pg);
    assert_non_null(other);
    snprintf(sql, sizeof sql, "BEGIN; SELECT * FROM ab_claim('%s', 'r', 0)", th);
    PGresult *r = PQexec(other, sql);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(r, 0, 0), "2"); /* the first claim: epoch 2, not committed */
    PQclear(r);
    claimer_t c = {.db = db, .thread = th};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, claim_thread, &c), 0);
    /* the handshake: the plugin's claim is waiting for the first one's lock */
    long end = pgfx_now_ms() + 20000;
    while (sql1("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE '%ab_claim%'") == 0 &&
           pgfx_now_ms() < end)
        pgfx_sleep_ms(5);
    r = PQexec(other, "COMMIT");
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(c.s, AB_OK);
    assert_int_equal(c.epoch, 3);
    assert_int_equal(sql1("SELECT v FROM ab_head WHERE id = 3"), runs + 1);
    PQfinish(other);
    P->close(db);
}

static void test_snapshots(void **state)
{
    (void)state;
    ab_plugin_db_t *db = open_db(false);
    char th[64];
    pgmod_fresh(th, sizeof th, "snap");
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_t doc = {0};
    uint64_t pos = 0;
    assert_int_equal(P->snapshot_get(db, S(th), &doc, &pos, &err), AB_NOT_FOUND);
    ab_error_clear(&err);
    assert_int_equal(P->snapshot_put(db, S(th), 10, (const uint8_t *)"ten", 3, &err), AB_OK);
    assert_int_equal(P->snapshot_put(db, S(th), 5, (const uint8_t *)"five", 4, &err), AB_OK);
    assert_int_equal(P->snapshot_get(db, S(th), &doc, &pos, &err), AB_OK);
    assert_int_equal(pos, 10);
    assert_memory_equal(doc.data, "ten", 3);
    ab_buf_free(&doc);
    P->close(db);
}

/* A writer handle with a run of thread @p th at seq 1, whose connection the server has ended
 * (the handle does not know yet). */
static ab_plugin_db_t *lost_connection(const char *th)
{
    ab_plugin_db_t *db = open_db(false);
    ab_error_t err = AB_ERROR_INIT;
    uint64_t first = 0;
    ab_append_event_t e = pgmod_ev(th, "r", 1, 1, "x");
    assert_int_equal(P->append_batch(db, &e, 1, 1, &first, &err), AB_OK);
    assert_true(sql1("SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity"
                     " WHERE query LIKE 'SELECT ab_append%'") >= 1);
    return db;
}

/* The server ends the handle's connection: the call fails retryable, the next reconnects. */
static void test_reconnect_after_lost_connection(void **state)
{
    (void)state;
    char th[64];
    pgmod_fresh(th, sizeof th, "re");
    ab_plugin_db_t *db = lost_connection(th);
    ab_error_t err = AB_ERROR_INIT;
    uint64_t first = 0;
    ab_append_event_t e = pgmod_ev(th, "r", 2, 1, "y");
    assert_int_equal(P->append_batch(db, &e, 1, 1, &first, &err), AB_UNAVAILABLE);
    assert_true(err.retryable);
    ab_error_clear(&err);
    assert_int_equal(P->append_batch(db, &e, 1, 1, &first, &err), AB_OK);
    ab_run_head_t h;
    assert_int_equal(P->head(db, S(th), S("r"), &h, &err), AB_OK);
    assert_int_equal(h.last_seq, 2);
    P->close(db);
}

/* With the connection lost the figures are unavailable and do not reconnect; the next write
 * does, and the figures are back. */
static void test_stats_never_reconnect(void **state)
{
    (void)state;
    char th[64];
    pgmod_fresh(th, sizeof th, "st-re");
    ab_plugin_db_t *db = lost_connection(th);
    ab_error_t err = AB_ERROR_INIT;
    ab_plugin_stats_t ps;
    assert_int_equal(P->stats(db, &ps, &err), AB_UNAVAILABLE); /* finds it lost */
    ab_error_clear(&err);
    assert_int_equal(P->stats(db, &ps, &err), AB_UNAVAILABLE);
    assert_string_equal(err.message, "postgres: stats: not connected");
    assert_true(err.retryable);
    ab_error_clear(&err);
    uint64_t first = 0;
    ab_append_event_t e = pgmod_ev(th, "r", 2, 1, "y");
    assert_int_equal(P->append_batch(db, &e, 1, 1, &first, &err), AB_OK); /* reconnects */
    assert_int_equal(P->stats(db, &ps, &err), AB_OK);
    assert_true(ps.runs_total >= 1);
    P->close(db);
}

/* A cursor past any position or seq (up to UINT64_MAX) reads nothing, in every scope: not a
 * database error from an overflowing bound. */
static void test_reads_after_the_largest_cursor(void **state)
{
    (void)state;
    ab_plugin_db_t *db = open_db(false);
    char th[64];
    pgmod_fresh(th, sizeof th, "huge");
    ab_error_t err = AB_ERROR_INIT;
    uint64_t first = 0;
    ab_append_event_t e = pgmod_ev(th, "r", 1, 0, "x");
    assert_int_equal(P->append_batch(db, &e, 1, 1, &first, &err), AB_OK);
    const uint64_t cursors[] = {(uint64_t)INT64_MAX - 1, (uint64_t)INT64_MAX, UINT64_MAX};
    const ab_replay_scope_t scopes[] = {AB_REPLAY_RUN, AB_REPLAY_THREAD, AB_REPLAY_ALL};
    for (size_t i = 0; i < sizeof cursors / sizeof *cursors; i++) {
        for (size_t k = 0; k < sizeof scopes / sizeof *scopes; k++) {
            ab_read_t q = {.scope = scopes[k],
                           .thread = S(th),
                           .run = S("r"),
                           .after_pos = cursors[i],
                           .after_seq = cursors[i],
                           .limit = 1000};
            uint32_t n = 7;
            ab_status_t s = P->read(db, &q, NULL, NULL, &n, &err);
            if (s != AB_OK)
                fail_msg("scope %d after %llu: %s: %s", (int)scopes[k],
                         (unsigned long long)cursors[i], ab_status_name(s), err.message);
            assert_int_equal(n, 0);
        }
    }
    P->close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_by_name),
        cmocka_unit_test(test_append_read_heads),
        cmocka_unit_test(test_conditional_append_two_connections),
        cmocka_unit_test(test_fenced_append),
        cmocka_unit_test(test_heads_of),
        cmocka_unit_test(test_paging_interleaved_batches),
        cmocka_unit_test(test_tailing_reader_never_skips),
        cmocka_unit_test(test_requests_shared),
        cmocka_unit_test(test_take_and_leases),
        cmocka_unit_test(test_cancel_assigned),
        cmocka_unit_test(test_cancel_held),
        cmocka_unit_test(test_claims_of_a_new_run_race),
        cmocka_unit_test(test_snapshots),
        cmocka_unit_test(test_reconnect_after_lost_connection),
        cmocka_unit_test(test_stats_never_reconnect),
        cmocka_unit_test(test_reads_after_the_largest_cursor),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

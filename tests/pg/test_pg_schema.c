/*
 * test_pg_schema.c - the PostgreSQL plugin's schema and what each version
 * stores: the stats entry (and a schema 1 database upgraded), compression
 * (schema 5: lz4 on the server; schema 7: chunks packed by the plugin, plain
 * pglz chunks read beside them; a packed chunk that does not unpack is
 * damaged) and the chunks' last positions (schema 6): a read after P never
 * fetches a chunk holding nothing past P, and a chunk stored before schema 6
 * (no last position) is still read.
 *
 * One server for the file (group setup); each test uses fresh thread ids.
 */
#define PGMOD_FILE_SERVER
#include "pg_module.h"

#include "agentbus/plugin.h"
#include "testutil.h"

static ab_plugin_db_t *open_db(bool readonly)
{
    return pgmod_open(P, &g_pg, readonly, AB_DURABILITY_FSYNC); /* the default durability */
}

static long long sql1(const char *sql)
{
    return pgfx_scalar1(&g_pg, sql);
}

#define SCHEMA_SQL "SELECT v FROM ab_meta WHERE k = 'schema'"
#define SCHEMA_NOW 10 /* the schema this build makes (pg_conn.c SCHEMA_VERSION) */

/* ---- schema 1 to 5 ------------------------------------------------------------------- */

static ab_plugin_stats_t stats_of(ab_plugin_db_t *db)
{
    ab_plugin_stats_t ps;
    ab_error_t err = AB_ERROR_INIT;
    assert_non_null(P->stats);
    if (P->stats(db, &ps, &err) != AB_OK)
        fail_msg("stats: %s", err.message);
    return ps;
}

#define RUNS_SQL   "SELECT count(*) FROM ab_runs"
#define ACTIVE_SQL "SELECT count(*) FROM ab_runs WHERE status = 'active'"

/* The stats entry counts what the tables hold: runs made by a claim or by an append, each
 * once, and active ones; a schema 1 database (no counter row, no index) is upgraded at the
 * next writer's open and counted there. */
static void test_stats_and_schema_upgrade(void **state)
{
    (void)state;
    ab_plugin_db_t *db = open_db(false);
    char th[64];
    pgmod_fresh(th, sizeof th, "stats");
    ab_error_t err = AB_ERROR_INIT;
    uint64_t epoch = 0, last = 0, first = 0;
    ab_plugin_stats_t ps = stats_of(db);
    long long runs = sql1(RUNS_SQL), active = sql1(ACTIVE_SQL);
    assert_int_equal(ps.runs_total, runs);
    assert_int_equal(ps.runs_active, active);
    assert_true(ps.store_bytes > 0);
    assert_int_equal(P->claim(db, S(th), S("c"), &epoch, &last, &err), AB_OK);
    assert_int_equal(P->claim(db, S(th), S("c"), &epoch, &last, &err), AB_OK); /* not again */
    assert_int_equal(epoch, 3); /* a first claim is epoch 2 (PROTOCOL.md 7.3) */
    ab_append_event_t b[3] = {pgmod_ev(th, "a", 1, 0, "a1"), pgmod_ev(th, "f", 1, 0, "f1"),
                              pgmod_ev(th, "f", 2, 0, "f2")};
    b[0].status = AB_RUN_STATUS_ACTIVE;
    b[1].status = AB_RUN_STATUS_ACTIVE;
    b[2].status = AB_RUN_STATUS_FINISHED;
    assert_int_equal(P->append_batch(db, b, 3, 1, &first, &err), AB_OK);
    ab_append_event_t more = pgmod_ev(th, "a", 2, 0, "a2"); /* an existing run: not counted again */
    assert_int_equal(P->append_batch(db, &more, 1, 1, &first, &err), AB_OK);
    ps = stats_of(db);
    assert_int_equal(ps.runs_total, runs + 3);
    assert_int_equal(sql1(RUNS_SQL), runs + 3);
    assert_int_equal(ps.runs_active, active + 1);
    P->close(db);
    /* back to schema 1, as a database made by the previous build */
    pgmod_exec(&g_pg, "BEGIN; DROP INDEX ab_runs_active; DELETE FROM ab_head WHERE id = 3;"
                      " DROP TRIGGER ab_requests_notify ON ab_requests; DROP TABLE ab_brokers;"
                      " ALTER TABLE ab_requests DROP COLUMN broker, DROP COLUMN parent_run,"
                      " DROP COLUMN cancel_epoch;"
                      " UPDATE ab_meta SET v = 1 WHERE k = 'schema'; COMMIT");
    db = open_db(false);
    assert_int_equal(sql1(SCHEMA_SQL), SCHEMA_NOW);
    assert_int_equal(sql1("SELECT count(*) FROM information_schema.columns WHERE table_name ="
                          " 'ab_requests' AND column_name IN ('broker', 'parent_run',"
                          " 'cancel_epoch')"),
                     3);
    assert_int_equal(sql1("SELECT count(*) FROM pg_trigger WHERE tgname = 'ab_requests_notify'"),
                     1);
    assert_int_equal(sql1("SELECT count(*) FROM ab_brokers"), 0);
    assert_int_equal(sql1("SELECT count(*) FROM pg_indexes WHERE indexname = 'ab_runs_active'"), 1);
    ps = stats_of(db);
    assert_int_equal(ps.runs_total, runs + 3);
    assert_int_equal(ps.runs_active, active + 1);
    assert_int_equal(P->claim(db, S(th), S("c2"), &epoch, &last, &err), AB_OK);
    assert_int_equal(stats_of(db).runs_total, runs + 4);
    P->close(db);
}

/* A compressible body over the TOAST threshold: stored compressed. */
#define BIG_LEN 3000
static void big_body(char *out, char tag)
{
    for (size_t i = 0; i < BIG_LEN; i++)
        out[i] = i % 16 == 0 ? tag : (char)('a' + i % 8);
    out[BIG_LEN] = '\0';
}

/* Rows of thread @p th whose column is stored with compression method @p method. */
static long long compressed_with(const char *table, const char *column, const char *th,
                                 const char *method)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM %s WHERE thread = '%s' AND pg_column_compression(%s) = '%s'",
             table, th, column, method);
    return sql1(sql);
}

typedef struct big_acc {
    char tags[8];
    size_t n;
} big_acc_t;

static int big_row(void *ud, const ab_row_t *row)
{
    big_acc_t *a = ud;
    char want[BIG_LEN + 1];
    assert_int_equal(row->len, BIG_LEN);
    assert_true(a->n < sizeof a->tags);
    a->tags[a->n] = (char)row->bytes[0];
    big_body(want, a->tags[a->n]);
    assert_memory_equal(row->bytes, want, BIG_LEN);
    a->n++;
    return 0;
}

/* Rows of thread @p th whose chunk is stored packed by the plugin (pg_chunk.h, schema 7). */
static long long packed_chunks(const char *th)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM ab_chunks WHERE thread = '%s'"
             " AND substring(data FROM 1 FOR 4) = '\\xffffffff'::bytea",
             th);
    return sql1(sql);
}

/* The stored bytes of run @p run's chunk in thread @p th with last seq @p seq. */
static long long stored_len(const char *th, const char *run, int seq)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT octet_length(data) FROM ab_chunks WHERE thread = '%s' AND run = '%s'"
             " AND last_seq = %d",
             th, run, seq);
    return sql1(sql);
}

/* Replace the chunk of @p run with last seq @p seq by @p hex (bytea hex digits). */
static void set_chunk(const char *th, const char *run, int seq, const char *hex)
{
    size_t cap = strlen(hex) + 256;
    char *sql = malloc(cap);
    assert_non_null(sql);
    snprintf(sql, cap,
             "UPDATE ab_chunks SET data = '\\x%s'::bytea WHERE thread = '%s' AND run = '%s'"
             " AND last_seq = %d",
             hex, th, run, seq);
    pgmod_exec(&g_pg, sql);
    free(sql);
}

/* The plain chunk (pg_chunk.h) of one record, offset 0, of @p body at @p seq, as hex. */
static char *plain_chunk_hex(const char *body, int seq)
{
    size_t len = strlen(body);
    char *hex = malloc(2 * (16 + len) + 1);
    assert_non_null(hex);
    int n = sprintf(hex, "00000000%08x%016x", (unsigned)len, (unsigned)seq);
    for (size_t i = 0; i < len; i++)
        n += sprintf(hex + n, "%02x", (unsigned char)body[i]);
    return hex;
}

/* Schema 5 to 7: chunks are packed by the plugin (schema 7; the server does not compress them
 * again) and snapshot documents compressed by the server with lz4 (schema 5); a chunk stored
 * plain before, compressed by the server with pglz as a schema 4 database did, is read back
 * beside the packed ones, byte for byte. */
static void test_packed_chunks_upgrade(void **state)
{
    (void)state;
    ab_plugin_db_t *db = open_db(false);
    char th[64], a[BIG_LEN + 1], b[BIG_LEN + 1], c[BIG_LEN + 1];
    pgmod_fresh(th, sizeof th, "pack");
    big_body(a, 'A'), big_body(b, 'B'), big_body(c, 'C');
    ab_error_t err = AB_ERROR_INIT;
    uint64_t first = 0;
    ab_append_event_t e = pgmod_ev(th, "r", 1, 0, a);
    assert_int_equal(P->append_batch(db, &e, 1, 1, &first, &err), AB_OK);
    assert_int_equal(packed_chunks(th), 1);
    assert_true(stored_len(th, "r", 1) < BIG_LEN / 4); /* the body repeats: LZ4 shrinks it */
    assert_int_equal(compressed_with("ab_chunks", "data", th, "lz4"), 0); /* not again */
    assert_int_equal(P->snapshot_put(db, S(th), first, (const uint8_t *)a, BIG_LEN, &err), AB_OK);
    assert_int_equal(compressed_with("ab_snapshots", "doc", th, "lz4"), 1);
    /* as a schema 4 database: pglz, the server compressing; a chunk stored plain then */
    pgmod_exec(&g_pg, "BEGIN; ALTER TABLE ab_chunks ALTER COLUMN data SET COMPRESSION pglz;"
                      " ALTER TABLE ab_chunks ALTER COLUMN data SET STORAGE EXTENDED;"
                      " UPDATE ab_meta SET v = 4 WHERE k = 'schema'; COMMIT");
    e = pgmod_ev(th, "r", 2, 0, b);
    assert_int_equal(P->append_batch(db, &e, 1, 1, &first, &err), AB_OK);
    char *hex = plain_chunk_hex(b, 2);
    set_chunk(th, "r", 2, hex);
    free(hex);
    assert_int_equal(compressed_with("ab_chunks", "data", th, "pglz"), 1);
    assert_int_equal(packed_chunks(th), 1);
    P->close(db);
    db = open_db(false); /* upgrades to the current schema */
    assert_int_equal(sql1(SCHEMA_SQL), SCHEMA_NOW);
    e = pgmod_ev(th, "r", 3, 0, c);
    assert_int_equal(P->append_batch(db, &e, 1, 1, &first, &err), AB_OK);
    assert_int_equal(packed_chunks(th), 2);
    assert_int_equal(compressed_with("ab_chunks", "data", th, "pglz"), 1);
    big_acc_t acc = {0};
    uint32_t n = 0;
    ab_read_t q = {.scope = AB_REPLAY_RUN, .thread = S(th), .run = S("r"), .limit = 10};
    assert_int_equal(P->read(db, &q, big_row, &acc, &n, &err), AB_OK);
    assert_int_equal(acc.n, 3);
    assert_memory_equal(acc.tags, "ABC", 3);
    ab_buf_t doc = {0};
    uint64_t pos = 0;
    assert_int_equal(P->event_bytes(db, S(th), S("r"), 3, &doc, &pos, &err), AB_OK);
    assert_int_equal(doc.len, BIG_LEN);
    assert_memory_equal(doc.data, c, BIG_LEN);
    assert_int_equal(P->snapshot_get(db, S(th), &doc, &pos, &err), AB_OK);
    assert_int_equal(doc.len, BIG_LEN);
    assert_memory_equal(doc.data, a, BIG_LEN);
    ab_buf_free(&doc);
    P->close(db);
}

/* A chunk is stored plain when packing would not make it smaller: short, or bytes LZ4 cannot
 * shrink; both read back. */
static void test_plain_when_packing_does_not_pay(void **state)
{
    (void)state;
    ab_plugin_db_t *db = open_db(false);
    char th[64], noise[BIG_LEN + 1];
    pgmod_fresh(th, sizeof th, "plain");
    uint32_t x = 2463534242u; /* xorshift: bytes without repeats for LZ4 to find */
    for (size_t i = 0; i < BIG_LEN; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        noise[i] = (char)(' ' + x % 90);
    }
    noise[BIG_LEN] = '\0';
    ab_error_t err = AB_ERROR_INIT;
    uint64_t first = 0;
    ab_append_event_t e[2] = {pgmod_ev(th, "short", 1, 0, "a short one"),
                              pgmod_ev(th, "noise", 1, 0, noise)};
    assert_int_equal(P->append_batch(db, e, 2, 1, &first, &err), AB_OK);
    assert_int_equal(packed_chunks(th), 0);
    assert_int_equal(stored_len(th, "noise", 1), 16 + BIG_LEN);
    ab_buf_t out = {0};
    uint64_t pos = 0;
    assert_int_equal(P->event_bytes(db, S(th), S("noise"), 1, &out, &pos, &err), AB_OK);
    assert_int_equal(out.len, BIG_LEN);
    assert_memory_equal(out.data, noise, BIG_LEN);
    assert_int_equal(P->event_bytes(db, S(th), S("short"), 1, &out, &pos, &err), AB_OK);
    assert_int_equal(out.len, strlen("a short one"));
    ab_buf_free(&out);
    P->close(db);
}

/* ---- schema 6: the chunks' last positions ------------------------------------------------- */

typedef struct rows {
    char text[512];
    uint32_t n;
} rows_t;

static int note_row(void *ud, const ab_row_t *row)
{
    rows_t *a = ud;
    size_t l = strlen(a->text);
    snprintf(a->text + l, sizeof a->text - l, "%s%llu:%.*s", l ? " " : "",
             (unsigned long long)row->pos, (int)row->len, (const char *)row->bytes);
    a->n++;
    return 0;
}

/* Read scope @p scope (thread @p th) after @p after on a handle of its own (nothing kept from
 * an earlier read); the rows into @p out. */
static ab_status_t read_after(ab_replay_scope_t scope, const char *th, uint64_t after, rows_t *out)
{
    ab_plugin_db_t *rd = open_db(true);
    ab_read_t q = {.scope = scope, .thread = S(th), .after_pos = after, .limit = 100};
    ab_error_t err = AB_ERROR_INIT;
    uint32_t n = 0;
    *out = (rows_t){0};
    ab_status_t s = P->read(rd, &q, note_row, out, &n, &err);
    if (s == AB_OK)
        assert_int_equal(n, out->n);
    else
        assert_int_equal(err.code, s);
    P->close(rd);
    return s;
}

/* Run r of @p th read from its start on a fresh handle: what was delivered into *acc. */
static ab_status_t read_run_r(const char *th, big_acc_t *acc, ab_error_t *err)
{
    ab_plugin_db_t *rd = open_db(true);
    ab_read_t q = {.scope = AB_REPLAY_RUN, .thread = S(th), .run = S("r"), .limit = 10};
    uint32_t n = 0;
    *acc = (big_acc_t){0};
    ab_status_t s = P->read(rd, &q, big_row, acc, &n, err);
    P->close(rd);
    return s;
}

/* A packed chunk that does not unpack is damaged (AB_CORRUPT naming its run) in every read:
 * a plain length LZ4 cannot make of the bytes that follow (refused before anything is
 * allocated for it), or a block that does not decode; the chunk before it is delivered. */
static void test_damaged_packed_chunk(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "ffffffff3fffffff00112233",                         /* 1 GiB from 4 bytes */
        "ffffffff00000010f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0", /* literals past the end */
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        ab_plugin_db_t *db = open_db(false);
        char th[64], a[BIG_LEN + 1], b[BIG_LEN + 1];
        pgmod_fresh(th, sizeof th, "badpack");
        big_body(a, 'A'), big_body(b, 'B');
        ab_error_t err = AB_ERROR_INIT;
        uint64_t first = 0;
        ab_append_event_t e = pgmod_ev(th, "r", 1, 0, a);
        assert_int_equal(P->append_batch(db, &e, 1, 1, &first, &err), AB_OK);
        e = pgmod_ev(th, "r", 2, 0, b);
        assert_int_equal(P->append_batch(db, &e, 1, 1, &first, &err), AB_OK);
        assert_int_equal(packed_chunks(th), 2);
        P->close(db);
        big_acc_t acc;
        assert_int_equal(read_run_r(th, &acc, &err), AB_OK);
        assert_int_equal(acc.n, 2);
        set_chunk(th, "r", 2, bad[k]);
        assert_int_equal(read_run_r(th, &acc, &err), AB_CORRUPT);
        assert_non_null(strstr(err.message, "run r"));
        assert_int_equal(acc.n, 1);
        assert_int_equal(acc.tags[0], 'A');
        rows_t got;
        assert_int_equal(read_after(AB_REPLAY_THREAD, th, 0, &got), AB_CORRUPT);
        assert_int_equal(read_after(AB_REPLAY_ALL, NULL, first - 1, &got), AB_CORRUPT);
        db = open_db(true);
        ab_buf_t out = {0};
        uint64_t pos = 0;
        assert_int_equal(P->event_bytes(db, S(th), S("r"), 2, &out, &pos, &err), AB_CORRUPT);
        assert_int_equal(P->event_bytes(db, S(th), S("r"), 1, &out, &pos, &err), AB_OK);
        assert_int_equal(out.len, BIG_LEN);
        ab_buf_free(&out);
        P->close(db);
    }
}

/* The chunk of run @p run in the batch at @p first: damaged (a record whose bytes run past
 * its end) and given last position @p last ("NULL": as stored before schema 6). */
static void damage(const char *th, const char *run, uint64_t first, const char *last)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "UPDATE ab_chunks SET data = '\\x00000000000003e80000000000000001'::bytea,"
             " last_pos = %s WHERE thread = '%s' AND run = '%s' AND batch_first = %llu",
             last, th, run, (unsigned long long)first);
    pgmod_exec(&g_pg, sql);
}

/* Each chunk's last position is that of its run's last event in the batch; a read (scope all
 * or thread) after a position inside a batch does not fetch the chunks delivered whole, and a
 * chunk without a last position (stored before schema 6) is fetched as before. */
static void test_chunk_last_pos(void **state)
{
    (void)state;
    ab_plugin_db_t *db = open_db(false);
    char th[64];
    pgmod_fresh(th, sizeof th, "lastpos");
    ab_error_t err = AB_ERROR_INIT;
    uint64_t p = 0, q = 0;
    ab_append_event_t b1[5] = {pgmod_ev(th, "a", 1, 0, "a1"), pgmod_ev(th, "b", 1, 0, "b1"),
                               pgmod_ev(th, "a", 2, 0, "a2"), pgmod_ev(th, "b", 2, 0, "b2"),
                               pgmod_ev(th, "c", 1, 0, "c1")};
    assert_int_equal(P->append_batch(db, b1, 5, 1, &p, &err), AB_OK);
    ab_append_event_t b2 = pgmod_ev(th, "a", 3, 0, "a3");
    assert_int_equal(P->append_batch(db, &b2, 1, 1, &q, &err), AB_OK);
    assert_int_equal(q, p + 5);
    P->close(db);
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT string_agg(run || '=' || (last_pos - %llu)::text, ',' ORDER BY first_pos)"
             " FROM ab_chunks WHERE thread = '%s' AND batch_first = %llu",
             (unsigned long long)p, th, (unsigned long long)p);
    PGconn *c = pgfx_connect(&g_pg);
    assert_non_null(c);
    PGresult *r = PQexec(c, sql);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(r, 0, 0), "a=2,b=3,c=4");
    PQclear(r);
    PQfinish(c);
    /* after a2 (p + 2): run a's chunk of the first batch is delivered whole; damaged, it is
     * not read (a fetch of it would be AB_CORRUPT) */
    char last[32];
    snprintf(last, sizeof last, "%llu", (unsigned long long)p + 2);
    damage(th, "a", p, last);
    rows_t got;
    char want[128];
    snprintf(want, sizeof want, "%llu:b2 %llu:c1 %llu:a3", (unsigned long long)p + 3,
             (unsigned long long)p + 4, (unsigned long long)p + 5);
    assert_int_equal(read_after(AB_REPLAY_ALL, NULL, p + 2, &got), AB_OK);
    assert_string_equal(got.text, want);
    assert_int_equal(read_after(AB_REPLAY_THREAD, th, p + 2, &got), AB_OK);
    assert_string_equal(got.text, want);
    /* the same chunk as one stored before schema 6: fetched, so its damage is seen */
    damage(th, "a", p, "NULL");
    assert_int_equal(read_after(AB_REPLAY_ALL, NULL, p + 2, &got), AB_CORRUPT);
    assert_int_equal(read_after(AB_REPLAY_THREAD, th, p + 2, &got), AB_CORRUPT);
}

/* A schema 5 database (no last_pos column) is upgraded at the next writer's open: its chunks
 * (no last position) and the new ones (with one) are read together, in position order. */
static void test_last_pos_upgrade(void **state)
{
    (void)state;
    ab_plugin_db_t *db = open_db(false);
    char th[64];
    pgmod_fresh(th, sizeof th, "lastpos-up");
    ab_error_t err = AB_ERROR_INIT;
    uint64_t p = 0, q = 0;
    ab_append_event_t b1[2] = {pgmod_ev(th, "a", 1, 0, "a1"), pgmod_ev(th, "b", 1, 0, "b1")};
    assert_int_equal(P->append_batch(db, b1, 2, 1, &p, &err), AB_OK);
    P->close(db);
    pgmod_exec(&g_pg, "BEGIN; ALTER TABLE ab_chunks DROP COLUMN last_pos;"
                      " UPDATE ab_meta SET v = 5 WHERE k = 'schema'; COMMIT");
    db = open_db(false);
    assert_int_equal(sql1(SCHEMA_SQL), SCHEMA_NOW);
    char sql[192];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM ab_chunks WHERE thread = '%s' AND last_pos IS NULL", th);
    assert_int_equal(sql1(sql), 2);
    ab_append_event_t b2[2] = {pgmod_ev(th, "b", 2, 0, "b2"), pgmod_ev(th, "a", 2, 0, "a2")};
    assert_int_equal(P->append_batch(db, b2, 2, 1, &q, &err), AB_OK);
    assert_int_equal(sql1(sql), 2); /* the new chunks have one */
    P->close(db);
    rows_t got;
    char want[128];
    snprintf(want, sizeof want, "%llu:b1 %llu:b2 %llu:a2", (unsigned long long)p + 1,
             (unsigned long long)q, (unsigned long long)q + 1);
    assert_int_equal(read_after(AB_REPLAY_ALL, NULL, p, &got), AB_OK);
    assert_string_equal(got.text, want);
    assert_int_equal(read_after(AB_REPLAY_THREAD, th, p, &got), AB_OK);
    assert_string_equal(got.text, want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_and_schema_upgrade),
        cmocka_unit_test(test_packed_chunks_upgrade),
        cmocka_unit_test(test_plain_when_packing_does_not_pay),
        cmocka_unit_test(test_damaged_packed_chunk),
        cmocka_unit_test(test_chunk_last_pos),
        cmocka_unit_test(test_last_pos_upgrade),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

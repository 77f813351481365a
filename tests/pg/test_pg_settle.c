/*
 * test_pg_settle.c - a read of events the synchronous standby does not have is
 * held back until it has them (plugin/postgres/pg_conn.c invariant 4,
 * docs/SCALING.md "A read of a commit the standby never had").
 *
 * The server of this file names a synchronous standby ("sb") that is not
 * running, and its sessions default to synchronous_commit = local. A
 * `process`-durability writer then commits without waiting: its events are
 * on the primary only, as a commit of a dying primary is when its backends
 * stop waiting for the standby. An `fsync` reader must not hand them on while
 * no standby has them: its read waits (seen as a backend waiting on SyncRep
 * in pg_stat_activity), and returns the rows once a standby has caught up.
 * What it has settled it reads again without waiting, with the standby gone;
 * a newer event waits again, until a standby is back. The stats entry reports the
 * standby streaming and synchronous, and then none. A `process` reader
 * never waits.
 */
#define PGMOD_FILE_SERVER
#define PGMOD_CONF "synchronous_standby_names=sb", "synchronous_commit=local"
#include "pg_module.h"

#include "agentbus/plugin.h"
#include "loader.h"
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>

#define WAIT_MS 20000 /* bound of every handshake below */

static ab_plugin_db_t *open_db(bool readonly, ab_durability_t d)
{
    return pgmod_open(P, &g_pg, readonly, d);
}

static void append(ab_plugin_db_t *w, uint64_t seq)
{
    char body[32];
    snprintf(body, sizeof body, "e%llu", (unsigned long long)seq);
    ab_append_event_t e = {.thread = S("t"),
                           .run = S("r"),
                           .seq = seq,
                           .bytes = (const uint8_t *)body,
                           .len = strlen(body)};
    uint64_t first = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(P->append_batch(w, &e, 1, 1, &first, &err), AB_OK);
    assert_int_equal(first, seq); /* one run, one event per batch: position = seq */
}

/* A read of run r on a thread of its own: seqs (after, after + limit]. */
typedef struct reader {
    pthread_t th;
    ab_plugin_db_t *db;
    uint64_t after;
    uint32_t limit;
    atomic_uint delivered; /* rows handed to the callback so far */
    atomic_bool done;
    ab_status_t status;
    uint64_t last_seq;
    bool out_of_order;
} reader_t;

static int on_row(void *ud, const ab_row_t *row)
{
    reader_t *r = ud; /* no cmocka assert off the test's thread: checked after the join */
    if (row->seq != r->last_seq + 1)
        r->out_of_order = true;
    r->last_seq = row->seq;
    atomic_fetch_add(&r->delivered, 1);
    return 0;
}

static void *read_main(void *arg)
{
    reader_t *r = arg;
    ab_read_t q = {.scope = AB_REPLAY_RUN,
                   .thread = S("t"),
                   .run = S("r"),
                   .after_seq = r->after,
                   .limit = r->limit};
    ab_error_t err = AB_ERROR_INIT;
    r->last_seq = r->after;
    r->status = P->read(r->db, &q, on_row, r, NULL, &err);
    atomic_store(&r->done, true);
    return NULL;
}

static void start_read(reader_t *r, ab_plugin_db_t *db, uint64_t after, uint32_t limit)
{
    memset(r, 0, sizeof *r);
    r->db = db;
    r->after = after;
    r->limit = limit;
    assert_int_equal(pthread_create(&r->th, NULL, read_main, r), 0);
}

static long long sync_waiters(PGconn *c)
{
    return pgfx_scalar(c, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'");
}

/* Poll until a backend waits for the standby (true) or the read ends first (false). */
static bool waits_for_standby(PGconn *c, reader_t *r)
{
    long end = pgfx_now_ms() + WAIT_MS;
    while (pgfx_now_ms() < end) {
        if (sync_waiters(c) > 0)
            return true;
        if (atomic_load(&r->done))
            return sync_waiters(c) > 0;
        pgfx_sleep_ms(5);
    }
    fail_msg("the read neither ended nor waited within %d ms", WAIT_MS);
    return false;
}

static void join(reader_t *r)
{
    assert_int_equal(pthread_join(r->th, NULL), 0);
    assert_true(atomic_load(&r->done));
    assert_false(r->out_of_order);
}

/* Poll (bounded) the stats entry of @p w until it reports @p n streaming standbys, @p sync of
 * them synchronous (plugin.h ab_plugin_stats_t, the standby figures); fails otherwise. */
static void wait_replicas(ab_plugin_db_t *w, uint64_t n, uint64_t sync)
{
    ab_plugin_stats_t s = {0};
    for (long end = pgfx_now_ms() + 15000; pgfx_now_ms() < end; pgfx_sleep_ms(20)) {
        ab_error_t err = AB_ERROR_INIT;
        memset(&s, 0, sizeof s);
        assert_int_equal(P->stats(w, &s, &err), AB_OK);
        if (s.replicas == n && s.replicas_sync == sync)
            break;
    }
    assert_true(s.replicas_known);
    assert_int_equal(s.replicas, n);
    assert_int_equal(s.replicas_sync, sync);
}

static void test_read_waits_for_the_standby(void **state)
{
    (void)state;
    PGconn *c = pgfx_connect(&g_pg);
    assert_non_null(c);
    ab_plugin_db_t *w = open_db(false, AB_DURABILITY_PROCESS);
    ab_plugin_db_t *f = open_db(true, AB_DURABILITY_FSYNC);
    ab_plugin_db_t *pr = open_db(true, AB_DURABILITY_PROCESS);
    for (uint64_t s = 1; s <= 3; s++)
        append(w, s); /* on the primary only */

    /* the fsync reader holds the rows back while no standby has them */
    reader_t r;
    start_read(&r, f, 0, 10);
    assert_true(waits_for_standby(c, &r));
    assert_false(atomic_load(&r.done));
    assert_int_equal(atomic_load(&r.delivered), 0);

    /* a standby catches up: the read goes on and hands on every row */
    pgfx_t sb;
    const char *sb_conf[] = {"synchronous_standby_names=", NULL};
    assert_int_equal(pgfx_standby(&sb, &g_pg, "sb", sb_conf), 0);
    join(&r);
    assert_int_equal(r.status, AB_OK);
    assert_int_equal(atomic_load(&r.delivered), 3);
    wait_replicas(w, 1, 1); /* the stats entry sees it, synchronous */

    /* the standby gone: what the reader settled is read again without waiting */
    pgfx_cleanup(&sb);
    wait_replicas(w, 0, 0);
    append(w, 4);
    start_read(&r, f, 0, 3);
    assert_false(waits_for_standby(c, &r));
    join(&r);
    assert_int_equal(r.status, AB_OK);
    assert_int_equal(atomic_load(&r.delivered), 3);

    /* a process reader does not wait for seq 4 */
    start_read(&r, pr, 0, 10);
    assert_false(waits_for_standby(c, &r));
    join(&r);
    assert_int_equal(r.status, AB_OK);
    assert_int_equal(atomic_load(&r.delivered), 4);

    /* the fsync reader waits for seq 4; a standby back releases it */
    start_read(&r, f, 3, 10);
    assert_true(waits_for_standby(c, &r));
    assert_int_equal(atomic_load(&r.delivered), 0);
    assert_int_equal(pgfx_standby(&sb, &g_pg, "sb", sb_conf), 0);
    join(&r);
    pgfx_cleanup(&sb);
    assert_int_equal(r.status, AB_OK);
    assert_int_equal(atomic_load(&r.delivered), 1);
    assert_int_equal(r.last_seq, 4);

    P->close(pr);
    P->close(f);
    P->close(w);
    PQfinish(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_waits_for_the_standby),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

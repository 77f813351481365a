/*
 * pg_brokers.h - the fixture of the tests that run two brokers on one
 * PostgreSQL server of their own (test_pg_brokers.c, test_pg_dispatch.c,
 * test_pg_tprev.c, test_pg_rules.c; header-only): pg2_start() starts the
 * server (pg_fixture.h) and brokers A and B on it with the postgres plugin;
 * pg2_stop() stops both brokers and the server by pid and removes their
 * directories. Without PostgreSQL's server binaries the test exits 77
 * (skipped), saying why. The including file gets the fixture's state (g_pg,
 * g_a, g_b, g_extra) and, unless it defines PG2_OWN_GROUP first, the cmocka
 * group setup and teardown over it (group_setup, group_teardown).
 */
#ifndef AB_TESTS_PG_BROKERS_H
#define AB_TESTS_PG_BROKERS_H

#include "pg_fixture.h"
#include "testutil.h"

#include "broker_proc.h"

/* The server, then A and B on it; @p extra (8 slots) receives their plugin arguments,
 * which a test passes again to restart a broker. 0, or -1 (what failed is said). */
static inline int pg2_start(pgfx_t *pg, bp_t *a, bp_t *b, const char *extra[8])
{
    int rc = pgfx_init(pg);
    if (rc == 77) {
        fprintf(stderr, "no PostgreSQL server binaries here (pg_config --bindir): skipped\n");
        exit(77);
    }
    if (rc != 0 || pgfx_start(pg, NULL) != 0)
        return -1;
    const char *args[] = {"--plugin", "postgres", "--pg", pg->conninfo, NULL};
    memcpy(extra, args, sizeof args);
    if (bp_start(a, NULL, extra) != 0 || bp_start(b, NULL, extra) != 0)
        return -1;
    return 0;
}

/* Stop both brokers and the server, remove their directories (each may be stopped). */
static inline void pg2_stop(pgfx_t *pg, bp_t *a, bp_t *b)
{
    bp_cleanup(a);
    bp_cleanup(b);
    pgfx_cleanup(pg);
}

static pgfx_t g_pg;            /* the file's server */
static bp_t g_a, g_b;          /* brokers A and B on it */
static const char *g_extra[8]; /* their plugin arguments, to restart one */

#ifndef PG2_OWN_GROUP
static int group_setup(void **state)
{
    (void)state;
    return pg2_start(&g_pg, &g_a, &g_b, g_extra);
}

static int group_teardown(void **state)
{
    (void)state;
    pg2_stop(&g_pg, &g_a, &g_b);
    return 0;
}
#endif

#endif /* AB_TESTS_PG_BROKERS_H */

/*
 * pg_module.h - a PostgreSQL server of the test's own (pg_fixture.h) and the
 * postgres plugin loaded as the broker loads it (by name, from the directory
 * of the module the build made: AB_PG_MODULE), for the tests that drive the
 * plugin's table directly (test_pg_plugin.c, test_pg_threads.c, test_pg_settle.c,
 * test_pg_ahead.c, test_pg_schema.c), and the shorthand those tests share.
 *
 * Header-only, one copy per test.
 */
#ifndef AB_TEST_PG_MODULE_H
#define AB_TEST_PG_MODULE_H

#include "pg_fixture.h"

#include "agentbus/plugin.h"
#include "loader.h"
#include "testutil.h" /* cmocka's fail_msg */

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Start @p pg with the server settings @p conf (NULL-terminated "name=value",
 * or NULL) and load the plugin into @p lib. Exits 77 (ctest's skip) where no
 * PostgreSQL server binaries are installed. @return 0 or -1.
 */
static inline int pgmod_setup_conf(pgfx_t *pg, ab_plugin_lib_t *lib, const char *const *conf)
{
    int rc = pgfx_init(pg);
    if (rc == 77) {
        fprintf(stderr, "no PostgreSQL server binaries here (pg_config --bindir): skipped\n");
        exit(77);
    }
    if (rc != 0 || pgfx_start(pg, conf) != 0)
        return -1;
    char dir[512];
    snprintf(dir, sizeof dir, "%s", AB_PG_MODULE);
    setenv("AGENTBUS_PLUGIN_DIR", dirname(dir), 1);
    ab_error_t err = AB_ERROR_INIT;
    if (ab__plugin_load("postgres", lib, &err) != AB_OK) {
        fprintf(stderr, "load: %s\n", err.message);
        return -1;
    }
    return 0;
}

/* pgmod_setup_conf() with the fixture's settings alone. */
static inline int pgmod_setup(pgfx_t *pg, ab_plugin_lib_t *lib)
{
    return pgmod_setup_conf(pg, lib, NULL);
}

/* A handle of plugin @p P on @p pg's server (a cmocka failure if it cannot open). */
static inline ab_plugin_db_t *pgmod_open(const ab_plugin_t *P, const pgfx_t *pg, bool readonly,
                                         ab_durability_t d)
{
    ab_plugin_open_opts_t o = {.data_dir = "/nonexistent",
                               .durability = d,
                               .readonly = readonly,
                               .conninfo = pg->conninfo};
    ab_plugin_db_t *db = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = P->open(&o, &db, &err);
    if (s != AB_OK)
        fail_msg("open: %s: %s", ab_status_name(s), err.message);
    return db;
}

/* A view of @p s (NULL: the empty string). */
static inline ab_str_t S(const char *s)
{
    return (ab_str_t){.ptr = s, .len = s ? strlen(s) : 0};
}

/* A fresh id into @p out: "@p what-PID-N", N counting within the test binary. */
static inline void pgmod_fresh(char *out, size_t cap, const char *what)
{
    static unsigned serial;
    snprintf(out, cap, "%s-%d-%u", what, (int)getpid(), ++serial);
}

/* The event @p seq of @p thread / @p run at @p epoch, its bytes @p body (a C string). */
static inline ab_append_event_t pgmod_ev(const char *thread, const char *run, uint64_t seq,
                                         uint64_t epoch, const char *body)
{
    return (ab_append_event_t){.thread = S(thread),
                               .run = S(run),
                               .seq = seq,
                               .epoch = epoch,
                               .bytes = (const uint8_t *)body,
                               .len = strlen(body)};
}

/* Run @p sql (a command: no rows) on a connection of its own to @p pg's server (a cmocka
 * failure if it fails). */
static inline void pgmod_exec(const pgfx_t *pg, const char *sql)
{
    PGconn *c = pgfx_connect(pg);
    if (!c)
        fail_msg("connect to run: %s", sql);
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK)
        fail_msg("%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(c);
}

/* Unload the plugin and stop and remove the server. */
static inline void pgmod_teardown(pgfx_t *pg, ab_plugin_lib_t *lib)
{
    ab__plugin_unload(lib);
    pgfx_cleanup(pg);
}

#ifdef PGMOD_FILE_SERVER
/*
 * With PGMOD_FILE_SERVER defined before this header: one server and the plugin for the whole
 * test file, g_pg, g_lib and P, started by group_setup() (with the server settings PGMOD_CONF,
 * a NULL-terminated list, where the file defines it) and stopped by group_teardown(), the
 * cmocka group's setup and teardown.
 */
static pgfx_t g_pg;
static ab_plugin_lib_t g_lib;
static const ab_plugin_t *P;

static int group_setup(void **state)
{
    (void)state;
#ifdef PGMOD_CONF
    const char *conf[] = {PGMOD_CONF, NULL};
#else
    const char *const *conf = NULL;
#endif
    if (pgmod_setup_conf(&g_pg, &g_lib, conf) != 0)
        return -1;
    P = g_lib.plugin;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    pgmod_teardown(&g_pg, &g_lib);
    return 0;
}
#endif /* PGMOD_FILE_SERVER */

#endif /* AB_TEST_PG_MODULE_H */

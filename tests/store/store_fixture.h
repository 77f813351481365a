/*
 * store_fixture.h - what the store's tests share: opening a store that must
 * open, removing the temporary data directory a test made, and a cmocka
 * fixture of one such directory (with its store open or not).
 */
#ifndef AB_TEST_STORE_FIXTURE_H
#define AB_TEST_STORE_FIXTURE_H

#include "testutil.h"

#include "store.h"
#include "store_int.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Remove the files of @p dir, then @p dir itself. */
static inline void sf_rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

/* Run @p sql on the database of @p dir with a connection of its own; fails the test on an
 * error. */
static inline void sf_exec(const char *dir, const char *sql)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, AB_STORE_DB_NAME);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    assert_int_equal(ab__store_tails_register(db, NULL), AB_OK); /* SQL that reads tails calls it */
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_close(db);
}

/* The one integer @p sql answers on the database of @p dir (a reader of its own). */
static inline int64_t sf_int(const char *dir, const char *sql)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, AB_STORE_DB_NAME);
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(ab__store_tails_register(db, NULL), AB_OK);
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return v;
}

/* SQL that turns a store of this build's schema back into one of schema 4 (store_int.h). */
#define SF_TO_V4_SQL AB__TO_V4_SQL

/* Open the store of @p dir; fails the test when it does not open. */
static inline ab_store_t *open_ok(const char *dir, bool readonly)
{
    ab_store_opts_t o = {.readonly = readonly};
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *st = NULL;
    ab_status_t s = ab__store_open(&st, dir, &o, &err);
    if (s != AB_OK)
        fail_msg("open %s: %s: %s", dir, ab_status_name(s), err.message);
    return st;
}

/* A test's temporary data directory and its store (NULL until opened). */
typedef struct sf_fx {
    char dir[64];
    ab_store_t *st;
} sf_fx_t;

/* cmocka setup: a new directory /tmp/ab_<tag>_XXXXXX, its store opened when @p open, in a
 * zeroed block of @p size bytes that starts with the sf_fx_t (a test's own fixture around it;
 * sf_fx_teardown() frees it). */
static inline int sf_fx_setup_sized(void **state, const char *tag, bool open, size_t size)
{
    sf_fx_t *f = calloc(1, size);
    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/ab_%s_XXXXXX", tag);
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    if (open)
        f->st = open_ok(f->dir, false);
    *state = f;
    return 0;
}

/* cmocka setup: a new directory /tmp/ab_<tag>_XXXXXX, its store opened when @p open. */
static inline int sf_fx_setup(void **state, const char *tag, bool open)
{
    return sf_fx_setup_sized(state, tag, open, sizeof(sf_fx_t));
}

/* cmocka teardown of sf_fx_setup(): the store closed, the directory removed. */
static inline int sf_fx_teardown(void **state)
{
    sf_fx_t *f = *state;
    ab__store_close(&f->st);
    sf_rm_dir(f->dir);
    free(f);
    return 0;
}

#endif /* AB_TEST_STORE_FIXTURE_H */

/*
 * store_fuzz.h - what the SQLite store's fuzz targets (fuzz_store_chain,
 * fuzz_store_rows) share: the store built once per process in a temporary
 * directory, its chunks' rowids, its removal at exit, and a read's request. Include it once, after
 * defining STORE_FUZZ_NAME (the target's name, for its messages) and THREADS
 * (the threads the runs are spread over).
 */
#ifndef AB_TESTS_STORE_FUZZ_H
#define AB_TESTS_STORE_FUZZ_H

#include "ab_common.h"
#include "store.h"
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ab_store_t *g_st;
static sqlite3_int64 *g_chunks; /* rowids, ascending */
static size_t g_nchunks;
static char g_dir[64];

/* atexit: close the store and remove its files and directory. */
static inline void cleanup(void)
{
    ab__store_close(&g_st);
    char p[128];
    static const char *const files[] = {AB_STORE_DB_NAME, AB_STORE_DB_NAME "-wal",
                                        AB_STORE_DB_NAME "-shm", AB_STORE_LOCK_NAME};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, files[i]);
        unlink(p);
    }
    rmdir(g_dir);
    free(g_chunks);
}

/* The fixture itself failed (not the code under test): say what, and stop. */
static inline void die(const char *what, const ab_error_t *err)
{
    fprintf(stderr, STORE_FUZZ_NAME ": %s: %s\n", what, err ? err->message : "");
    abort();
}

/* The thread and run ids of run @p r (8 bytes each, NUL included). */
static inline void names(int r, char *thread, char *run)
{
    snprintf(thread, 8, "t%d", r % THREADS);
    snprintf(run, 8, "r%d", r);
}

/* Open the store, with @p o, in a new directory made from @p tmpl (…_XXXXXX), removed at exit. */
static inline void open_store(const char *tmpl, const ab_store_opts_t *o)
{
    snprintf(g_dir, sizeof g_dir, "%s", tmpl);
    if (!mkdtemp(g_dir))
        die("mkdtemp", NULL);
    ab_error_t err = AB_ERROR_INIT;
    if (ab__store_open(&g_st, g_dir, o, &err) != AB_OK)
        die("open", &err);
    atexit(cleanup);
}

/* g_chunks: the rowids of the chunks the store holds, ascending. */
static inline void load_chunks(void)
{
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(g_st->db, "SELECT rowid FROM chunks ORDER BY rowid", -1, &q, NULL))
        die("prepare", NULL);
    while (sqlite3_step(q) == SQLITE_ROW) {
        g_chunks = realloc(g_chunks, (g_nchunks + 1) * sizeof *g_chunks);
        if (!g_chunks)
            die("out of memory", NULL);
        g_chunks[g_nchunks++] = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
}

/* A read of @p scope (@p thread, @p run: NULL when the scope has none) after @p after, its seq
 * for a run, its position otherwise. */
static inline ab_read_t read_req(ab_replay_scope_t scope, const char *thread, const char *run,
                                 uint64_t after, uint32_t limit)
{
    ab_read_t req = {.scope = scope, .limit = limit};
    if (thread)
        req.thread = (ab_str_t){thread, strlen(thread)};
    if (run)
        req.run = (ab_str_t){run, strlen(run)};
    if (scope == AB_REPLAY_RUN)
        req.after_seq = after;
    else
        req.after_pos = after;
    return req;
}

#endif

/*
 * store_fuzz.h - what the SQLite store's fuzz targets (fuzz_store_chain,
 * fuzz_store_rows) share: the store built once per process in a temporary
 * directory, its chunks' rowids, and its removal at exit. Include it once, after
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

#endif

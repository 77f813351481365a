/*
 * store_pace.c - the checkpointer's VFS: its writes to the database file reach
 * the disk in slices.
 *
 * A checkpoint copies the WAL's pages into the database file as buffered
 * writes and syncs the file at its end, so up to wal_pages pages (64 MiB) go
 * to the device at once, and a commit's WAL fdatasync issued meanwhile waits
 * behind them in the device's queue: at 80% of the maximum ingest that was
 * about a third of the p99 of publish-to-ack (docs/PERFORMANCE.md). Through
 * this VFS the checkpointer flushes the database file after every
 * AB_STORE_PACE_BYTES it wrote, on its own thread, so no more than about two
 * such slices of a checkpoint are ever queued ahead of a commit's fsync.
 *
 * Invariants:
 *  1. Every call goes to the default VFS with the file it opened, so the
 *     locks, the WAL index and the files are SQLite's own: the same inode
 *     entries as the process's other connections to the store.
 *  2. An extra sync only makes written pages durable earlier; SQLite relies
 *     on nothing being unsynced. A sync that fails fails the write, so the
 *     checkpoint stops and its pages stay in the WAL (store_ckpt.c
 *     invariant 2).
 *  3. The VFS is registered once per copy of this code (not as the default)
 *     and is used only by the connections opened with its name. A copy in a
 *     plugin's shared object unregisters it when the object is unloaded
 *     (after its last connection closed): SQLite's list of VFSes outlives
 *     the object, and an entry left there would point into unmapped memory.
 *  4. On Linux a slice is flushed with sync_file_range on the default VFS's
 *     own descriptor (never one of ours: closing a second descriptor of the
 *     file would drop the process's POSIX locks on it): the slice's writeback
 *     is started and the previous slice's waited for, which bounds what is
 *     queued without a journal commit per slice; the checkpoint's own sync
 *     at its end still makes everything durable. The descriptor is used only
 *     after fstat shows it is the database file's; otherwise, and elsewhere,
 *     a slice is flushed with the file's sync.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sync_file_range */
#endif
#include "store_int.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>

#define PACE_VFS_NAME "agentbus-paced"

typedef struct pace_file {
    sqlite3_file base;      /* pMethods = &pace_io once the real file is open */
    sqlite3_file *real;     /* the default VFS's file, after this struct */
    sqlite3_int64 unsynced; /* bytes written since the last slice */
    sqlite3_int64 hi;       /* the end of the highest byte written since the last sync */
    sqlite3_int64 prev_hi;  /* hi at the last slice, whose writeback is in flight */
    int fd;                 /* the real file's descriptor (invariant 4), else -1 */
    bool main_db;           /* the database file: the only one paced */
} pace_file;

static sqlite3_vfs pace_vfs;
static sqlite3_vfs *real_vfs;
static pthread_once_t pace_once = PTHREAD_ONCE_INIT;
static int pace_rc = SQLITE_ERROR;
static atomic_uint_fast64_t pace_slices; /* slices flushed (for the tests) */
static atomic_uint_fast64_t pace_ranged; /* of which with sync_file_range */

#define REAL(f) (((pace_file *)(f))->real)
#define RM(f)   (REAL(f)->pMethods)

static int p_close(sqlite3_file *f)
{
    return RM(f)->xClose(REAL(f));
}

static int p_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off)
{
    return RM(f)->xRead(REAL(f), buf, n, off);
}

/*
 * The slice just written goes to the disk (invariant 4): the writeback of every dirty
 * page below hi is started, and that of the pages below the previous slice's end, started
 * a slice ago, waited for, so at most two slices are in flight (a checkpoint writes its
 * pages in ascending order, after page 1; clean pages cost nothing); without the
 * descriptor, the file is synced.
 */
static int flush_slice(pace_file *p)
{
#ifdef __linux__
    if (p->fd >= 0) {
        unsigned wait =
            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER;
        if (sync_file_range(p->fd, 0, p->hi, SYNC_FILE_RANGE_WRITE) != 0)
            return SQLITE_IOERR_FSYNC;
        if (p->prev_hi > 0 && sync_file_range(p->fd, 0, p->prev_hi, wait) != 0)
            return SQLITE_IOERR_FSYNC;
        p->prev_hi = p->hi;
        atomic_fetch_add(&pace_ranged, 1);
        return SQLITE_OK;
    }
#endif
    return p->real->pMethods->xSync(p->real, SQLITE_SYNC_NORMAL);
}

/* Pass the write on; after each slice of the database file, flush it (invariant 2). */
static int p_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off)
{
    pace_file *p = (pace_file *)f;
    int rc = RM(f)->xWrite(p->real, buf, n, off);
    if (rc != SQLITE_OK || !p->main_db)
        return rc;
    if (off + n > p->hi)
        p->hi = off + n;
    p->unsynced += n;
    if (p->unsynced < AB_STORE_PACE_BYTES)
        return SQLITE_OK;
    p->unsynced = 0;
    atomic_fetch_add(&pace_slices, 1);
    return flush_slice(p);
}

static int p_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    return RM(f)->xTruncate(REAL(f), size);
}

static int p_sync(sqlite3_file *f, int flags)
{
    pace_file *p = (pace_file *)f;
    p->unsynced = 0;
    p->hi = p->prev_hi = 0; /* the sync covers every slice */
    return RM(f)->xSync(p->real, flags);
}

static int p_size(sqlite3_file *f, sqlite3_int64 *size)
{
    return RM(f)->xFileSize(REAL(f), size);
}

static int p_lock(sqlite3_file *f, int level)
{
    return RM(f)->xLock(REAL(f), level);
}

static int p_unlock(sqlite3_file *f, int level)
{
    return RM(f)->xUnlock(REAL(f), level);
}

static int p_reserved(sqlite3_file *f, int *out)
{
    return RM(f)->xCheckReservedLock(REAL(f), out);
}

static int p_fcntl(sqlite3_file *f, int op, void *arg)
{
    return RM(f)->xFileControl(REAL(f), op, arg);
}

static int p_sector(sqlite3_file *f)
{
    return RM(f)->xSectorSize(REAL(f));
}

static int p_devchar(sqlite3_file *f)
{
    return RM(f)->xDeviceCharacteristics(REAL(f));
}

static int p_shm_map(sqlite3_file *f, int pg, int pgsz, int extend, void volatile **out)
{
    if (RM(f)->iVersion < 2)
        return SQLITE_IOERR_SHMMAP;
    return RM(f)->xShmMap(REAL(f), pg, pgsz, extend, out);
}

static int p_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
    if (RM(f)->iVersion < 2)
        return SQLITE_IOERR_SHMLOCK;
    return RM(f)->xShmLock(REAL(f), off, n, flags);
}

static void p_shm_barrier(sqlite3_file *f)
{
    if (RM(f)->iVersion >= 2)
        RM(f)->xShmBarrier(REAL(f));
}

static int p_shm_unmap(sqlite3_file *f, int del)
{
    if (RM(f)->iVersion < 2)
        return SQLITE_OK;
    return RM(f)->xShmUnmap(REAL(f), del);
}

static int p_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **out)
{
    if (RM(f)->iVersion < 3) {
        *out = NULL; /* no mapping: SQLite reads instead */
        return SQLITE_OK;
    }
    return RM(f)->xFetch(REAL(f), off, n, out);
}

static int p_unfetch(sqlite3_file *f, sqlite3_int64 off, void *page)
{
    if (RM(f)->iVersion < 3)
        return SQLITE_OK;
    return RM(f)->xUnfetch(REAL(f), off, page);
}

static const sqlite3_io_methods pace_io = {
    3,          p_close,       p_read,      p_write, p_truncate, p_sync,    p_size,
    p_lock,     p_unlock,      p_reserved,  p_fcntl, p_sector,   p_devchar, p_shm_map,
    p_shm_lock, p_shm_barrier, p_shm_unmap, p_fetch, p_unfetch,
};

/*
 * The descriptor of the default VFS's open file @p real of @p name (invariant 4), or -1.
 * os_unix.c's file begins with its methods, its VFS, its inode entry and the descriptor
 * (SQLite 3.40 here); the descriptor read there is used only if fstat shows it is the
 * named file's, so a changed layout only costs the slices their sync_file_range
 * (test_store_ckpt.c then fails on Linux, which says so).
 */
static int real_fd(const sqlite3_file *real, const char *name)
{
    struct unix_head {
        const sqlite3_io_methods *methods;
        sqlite3_vfs *vfs;
        void *inode;
        int h;
    };
    if (name == NULL || strcmp(real_vfs->zName, "unix") != 0 ||
        real_vfs->szOsFile < (int)sizeof(struct unix_head))
        return -1;
    int fd = -1;
    memcpy(&fd, (const char *)real + offsetof(struct unix_head, h), sizeof fd);
    struct stat a, b;
    if (fd < 0 || fstat(fd, &a) != 0 || stat(name, &b) != 0)
        return -1;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino ? fd : -1;
}

static int p_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out)
{
    (void)vfs;
    pace_file *p = (pace_file *)f;
    memset(p, 0, sizeof *p); /* no methods: SQLite calls none, not even xClose */
    p->real = (sqlite3_file *)(p + 1);
    p->fd = -1;
    p->main_db = (flags & SQLITE_OPEN_MAIN_DB) != 0;
    int rc = real_vfs->xOpen(real_vfs, name, p->real, flags, out);
    /* a real file with methods is closed through ours, also after a failed open */
    if (p->real->pMethods != NULL)
        p->base.pMethods = &pace_io;
    if (rc == SQLITE_OK && p->base.pMethods != NULL && p->main_db)
        p->fd = real_fd(p->real, name);
    return rc;
}

static void pace_register(void)
{
    real_vfs = sqlite3_vfs_find(NULL);
    if (real_vfs == NULL)
        return;
    pace_vfs = *real_vfs; /* every other entry is the default VFS's own */
    pace_vfs.szOsFile = (int)sizeof(pace_file) + real_vfs->szOsFile;
    pace_vfs.zName = PACE_VFS_NAME;
    pace_vfs.pNext = NULL;
    pace_vfs.xOpen = p_open;
    pace_rc = sqlite3_vfs_register(&pace_vfs, 0);
}

/* Invariant 3: at dlclose of a shared object holding this code, or at exit. */
__attribute__((destructor)) static void pace_unregister(void)
{
    if (pace_rc == SQLITE_OK)
        sqlite3_vfs_unregister(&pace_vfs);
    pace_rc = SQLITE_ERROR;
}

const char *ab__store_pace_vfs(void)
{
    pthread_once(&pace_once, pace_register);
    return pace_rc == SQLITE_OK ? PACE_VFS_NAME : NULL;
}

uint64_t ab__store_pace_slices(uint64_t *ranged)
{
    if (ranged != NULL)
        *ranged = atomic_load(&pace_ranged);
    return atomic_load(&pace_slices);
}

/*
 * store_file.c - the database file around SQLite (docs/STORE.md "The
 * database file"): creating a new store, the exclusive lock, the checks
 * SQLite does not make, and this process's table of open database files.
 *
 * Invariants:
 *  1. A descriptor of a database file is closed only when no store handle
 *     of this process has the file open. POSIX drops every fcntl lock a
 *     process holds on a file when it closes any descriptor of that file,
 *     and SQLite's unix VFS keeps its locks as fcntl locks; so a descriptor
 *     that cannot be closed yet is parked and closed after the last
 *     handle's SQLite connections closed.
 *  2. An exclusive handle holds flock(LOCK_EX) on agentbus.db itself, taken
 *     before SQLite opens the file and released (its descriptor closed)
 *     only after the handle's connections closed. It also locks <dir>/LOCK
 *     and writes its pid there (for messages, and for older builds, which
 *     lock only LOCK).
 *  3. A new store is built whole (schema, WAL mode) under a temporary name
 *     and linked into place: link() never replaces a file, so agentbus.db
 *     is created only where none exists (and no WAL of a vanished one
 *     waits to be replayed into it) and never appears empty or half made.
 *     An existing file is never re-created.
 *  4. Nothing here writes to an existing database file.
 *  5. The readers' gate (store_ckpt.c invariant 1): while a writer of this
 *     process closes it, a read of any handle of the file that would begin
 *     its own transaction waits before it, until the writer opens it again
 *     or AB_STORE_GATE_MAX_MS passed; a read inside a transaction its
 *     caller holds never waits. Closed and opened only by the writer's own
 *     thread, around one checkpoint, never while it holds a transaction.
 */
#include "ab_common.h"
#include "store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

struct ab_store_file {
    dev_t dev;
    ino_t ino;
    int handles;      /* open store handles on this file */
    bool checked;     /* an exclusive writer that ran quick_check at its open has it open */
    atomic_bool gate; /* closed: reads wait before their transaction (invariant 5) */
    int *parked;      /* descriptors to close with the last handle (invariant 1) */
    size_t nparked, cap;
    ab_store_file_t *next;
};

static pthread_mutex_t files_mu = PTHREAD_MUTEX_INITIALIZER;
static ab_store_file_t *files;                            /* guarded by files_mu */
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER; /* a gate opened; with files_mu */

static ab_store_file_t *find_locked(dev_t dev, ino_t ino)
{
    for (ab_store_file_t *f = files; f != NULL; f = f->next)
        if (f->dev == dev && f->ino == ino)
            return f;
    return NULL;
}

/* Close @p fd, or park it while handles still use @p f (invariant 1). */
static void release_locked(ab_store_file_t *f, int fd)
{
    if (fd < 0)
        return;
    if (f == NULL || f->handles == 0) {
        close(fd);
        return;
    }
    int *p = ab__grow(f->parked, &f->cap, f->nparked + 1, sizeof *p, 4);
    if (p == NULL)
        return; /* out of memory: keep it open for good rather than drop SQLite's locks */
    f->parked = p;
    f->parked[f->nparked++] = fd;
}

/* Release a descriptor of a database file that no handle owns (yet). */
static void release_fd(int fd)
{
    struct stat sb;
    if (fd < 0)
        return;
    pthread_mutex_lock(&files_mu);
    release_locked(fstat(fd, &sb) == 0 ? find_locked(sb.st_dev, sb.st_ino) : NULL, fd);
    pthread_mutex_unlock(&files_mu);
}

/* Count this handle as a user of the file @p sb describes. */
static ab_status_t file_ref(ab_store_t *st, const struct stat *sb, ab_error_t *err)
{
    pthread_mutex_lock(&files_mu);
    ab_store_file_t *f = find_locked(sb->st_dev, sb->st_ino);
    if (f == NULL && (f = calloc(1, sizeof *f)) != NULL) {
        f->dev = sb->st_dev;
        f->ino = sb->st_ino;
        f->next = files;
        files = f;
    }
    if (f != NULL)
        f->handles++;
    pthread_mutex_unlock(&files_mu);
    if (f == NULL)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory");
    st->file = f;
    return AB_OK;
}

void ab__store_file_close(ab_store_t *st)
{
    pthread_mutex_lock(&files_mu);
    ab_store_file_t *f = st->file;
    if (f == NULL) {
        pthread_mutex_unlock(&files_mu);
        release_fd(st->lock_fd); /* not registered: SQLite never opened it through us */
    } else {
        f->handles--;
        if (st->marked_checked)
            f->checked = false;
        release_locked(f, st->lock_fd);
        if (f->handles == 0) {
            for (size_t i = 0; i < f->nparked; i++)
                close(f->parked[i]);
            ab_store_file_t **pp = &files;
            while (*pp != f)
                pp = &(*pp)->next;
            *pp = f->next;
            free(f->parked);
            free(f);
        }
        pthread_mutex_unlock(&files_mu);
    }
    if (st->pid_fd >= 0)
        close(st->pid_fd);
    st->file = NULL;
    st->lock_fd = st->pid_fd = -1;
    st->marked_checked = false;
}

bool ab__store_file_checked(const ab_store_t *st)
{
    pthread_mutex_lock(&files_mu);
    bool c = st->file != NULL && st->file->checked;
    pthread_mutex_unlock(&files_mu);
    return c;
}

void ab__store_file_mark_checked(ab_store_t *st)
{
    if (st->file == NULL || !st->exclusive)
        return;
    pthread_mutex_lock(&files_mu);
    st->file->checked = true;
    st->marked_checked = true;
    pthread_mutex_unlock(&files_mu);
}

void ab__store_gate_close(ab_store_t *st)
{
    if (st->file != NULL)
        atomic_store(&st->file->gate, true);
}

void ab__store_gate_open(ab_store_t *st)
{
    if (st->file == NULL)
        return;
    pthread_mutex_lock(&files_mu);
    atomic_store(&st->file->gate, false);
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&files_mu);
}

void ab__store_gate_pass(const ab_store_t *st)
{
    ab_store_file_t *f = st->file;
    if (f == NULL || !atomic_load(&f->gate))
        return; /* the usual case: one atomic load */
    struct timespec until;
    ab__deadline_in(&until, AB_STORE_GATE_MAX_MS);
    pthread_mutex_lock(&files_mu);
    while (atomic_load(&f->gate) && pthread_cond_timedwait(&gate_cv, &files_mu, &until) == 0)
        ;
    pthread_mutex_unlock(&files_mu);
}

/* The pid holding flock on the file of @p fd, from /proc/locks (Linux); 0 if unknown. */
static long flock_holder(int fd)
{
    struct stat sb;
    FILE *p = fstat(fd, &sb) == 0 ? fopen("/proc/locks", "r") : NULL;
    if (p == NULL)
        return 0;
    char line[256], kind[16];
    long pid = 0, found = 0;
    unsigned maj, min;
    unsigned long ino;
    while (found == 0 && fgets(line, sizeof line, p) != NULL) {
        if (sscanf(line, "%*d: %15s %*s %*s %ld %x:%x:%lu", kind, &pid, &maj, &min, &ino) == 5 &&
            strcmp(kind, "FLOCK") == 0 && maj == major(sb.st_dev) && min == minor(sb.st_dev) &&
            ino == (unsigned long)sb.st_ino)
            found = pid;
    }
    fclose(p);
    return found;
}

static long read_pid(int fd)
{
    char buf[32] = {0};
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    return n > 0 ? strtol(buf, NULL, 10) : 0;
}

static ab_status_t in_use(const char *dir, long pid, ab_error_t *err)
{
    if (pid > 0) {
        ab_error_set(err, AB_UNAVAILABLE, "dir",
                     "data directory %s is in use by another broker (pid %ld)", dir, pid);
        ab_error_detail_int(err, "pid", pid);
        return AB_UNAVAILABLE;
    }
    return ab_error_set(err, AB_UNAVAILABLE, "dir",
                        "data directory %s is in use by another broker (pid unknown)", dir);
}

/* Lock <dir>/LOCK too and write our pid into it (invariant 2). */
static ab_status_t take_pid_file(ab_store_t *st, const char *dir, ab_error_t *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, AB_STORE_LOCK_NAME);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return ab_error_set(err, AB_UNAVAILABLE, "dir", "cannot open lock file %s: %s", path,
                            strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        long pid = read_pid(fd);
        close(fd);
        if (e == EWOULDBLOCK)
            return in_use(dir, pid, err);
        return ab_error_set(err, AB_UNAVAILABLE, "dir", "cannot lock %s: %s", path, strerror(e));
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return ab_error_set(err, AB_UNAVAILABLE, "dir", "cannot write lock file %s: %s", path,
                            strerror(e));
    }
    st->pid_fd = fd;
    return AB_OK;
}

/* Open the existing database for writing and take the exclusive lock on it. */
static ab_status_t lock_existing(ab_store_t *st, const char *dir, int *fd_out, ab_error_t *err)
{
    int fd = open(st->path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == EACCES || e == EPERM || e == EROFS)
            return ab__store_not_writable(st, strerror(e), err);
        return ab_error_set(err, AB_UNAVAILABLE, "store", "cannot open %s: %s", st->path,
                            strerror(e));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        long pid = e == EWOULDBLOCK ? flock_holder(fd) : 0;
        if (e == EWOULDBLOCK && pid == 0) { /* /proc/locks unreadable: the pid file's word */
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, AB_STORE_LOCK_NAME);
            int pfd = open(path, O_RDONLY | O_CLOEXEC);
            pid = pfd >= 0 ? read_pid(pfd) : 0;
            if (pfd >= 0)
                close(pfd);
        }
        release_fd(fd); /* this process may have the file open: invariant 1 */
        if (e == EWOULDBLOCK)
            return in_use(dir, pid, err);
        return ab_error_set(err, AB_UNAVAILABLE, "store", "cannot lock %s: %s", st->path,
                            strerror(e));
    }
    *fd_out = fd;
    return AB_OK;
}

static void unlink_db_files(const char *path)
{
    char side[4200];
    unlink(path);
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
}

static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/*
 * No database yet: build one under a temporary name and link it into place
 * (invariant 3). *fd_out: for an exclusive handle, the locked descriptor of
 * the new file; -1 when another opener linked its store first (then the
 * caller opens that one like any existing file).
 */
static ab_status_t create_store(ab_store_t *st, const char *dir, const ab_store_opts_t *o,
                                int *fd_out, ab_error_t *err)
{
    size_t n = strlen(st->path) + sizeof ".new-XXXXXX";
    char *tmp = malloc(n);
    if (tmp == NULL)
        return ab_error_set(err, AB_NOMEM, "store", "out of memory");
    snprintf(tmp, n, "%s.new-XXXXXX", st->path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        ab_status_t s = ab_error_set(err, AB_UNAVAILABLE, "store", "cannot create %s: %s", tmp,
                                     strerror(errno));
        free(tmp);
        return s;
    }
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    ab_status_t s = AB_OK;
    if (o->exclusive && flock(fd, LOCK_EX | LOCK_NB) != 0) /* before the file has its name */
        s = ab_error_set(err, AB_UNAVAILABLE, "store", "cannot lock %s: %s", tmp, strerror(errno));
    if (s == AB_OK)
        s = ab__store_build(st, tmp, o->durability, err);
    bool linked = false;
    if (s == AB_OK && link(tmp, st->path) == 0) {
        linked = true;
        sync_dir(dir);
    } else if (s == AB_OK && errno != EEXIST) {
        s = ab_error_set(err, AB_UNAVAILABLE, "store", "cannot create %s: %s", st->path,
                         strerror(errno));
    }
    unlink_db_files(tmp);
    free(tmp);
    if (s == AB_OK && linked && o->exclusive) {
        *fd_out = fd;
        return AB_OK;
    }
    release_fd(fd);
    *fd_out = -1;
    return s;
}

/* The checks of an existing file that SQLite would not refuse. */
static ab_status_t check_size(ab_store_t *st, const struct stat *sb, ab_error_t *err)
{
    if (sb->st_size != 0)
        return AB_OK;
    return ab_error_set(err, AB_CORRUPT, "store", "database %s is empty (0 bytes)", st->path);
}

/* No database but its WAL: those are committed events of a database that is gone. SQLite
 * would replay them into a new store (invariant 3: never start afresh by ourselves). */
static ab_status_t check_orphan_wal(ab_store_t *st, ab_error_t *err)
{
    char wal[4200];
    struct stat sb;
    snprintf(wal, sizeof wal, "%s-wal", st->path);
    if (stat(wal, &sb) != 0 || sb.st_size == 0)
        return AB_OK;
    return ab_error_set(err, AB_CORRUPT, "store",
                        "database %s is missing but its WAL %s-wal is there (%lld bytes)", st->path,
                        AB_STORE_DB_NAME, (long long)sb.st_size);
}

static ab_status_t open_writer_file(ab_store_t *st, const char *dir, const ab_store_opts_t *o,
                                    ab_error_t *err)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return ab_error_set(err, AB_UNAVAILABLE, "store", "cannot create data directory %s: %s",
                            dir, strerror(errno));
    int fd = -1;
    struct stat sb;
    ab_status_t s = AB_OK;
    if (stat(st->path, &sb) != 0) {
        if (errno != ENOENT)
            return ab_error_set(err, AB_UNAVAILABLE, "store", "cannot stat %s: %s", st->path,
                                strerror(errno));
        s = check_orphan_wal(st, err);
        if (s == AB_OK)
            s = create_store(st, dir, o, &fd, err);
    }
    if (s == AB_OK && fd < 0 && o->exclusive)
        s = lock_existing(st, dir, &fd, err);
    if (s == AB_OK && (fd >= 0 ? fstat(fd, &sb) : stat(st->path, &sb)) != 0)
        s = ab_error_set(err, AB_UNAVAILABLE, "store", "cannot stat %s: %s", st->path,
                         strerror(errno));
    if (s == AB_OK)
        s = check_size(st, &sb, err);
    if (s == AB_OK && o->exclusive)
        s = take_pid_file(st, dir, err);
    if (s == AB_OK)
        s = file_ref(st, &sb, err);
    st->lock_fd = fd; /* released by ab__store_file_close() */
    return s;
}

ab_status_t ab__store_file_open(ab_store_t *st, const char *dir, const ab_store_opts_t *o,
                                ab_error_t *err)
{
    if (!o->readonly)
        return open_writer_file(st, dir, o, err);
    struct stat sb;
    if (stat(st->path, &sb) != 0)
        return ab_error_set(err, AB_NOT_FOUND, "store", "no database at %s", st->path);
    ab_status_t s = check_size(st, &sb, err);
    return s == AB_OK ? file_ref(st, &sb, err) : s;
}

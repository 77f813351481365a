/*
 * test_store_open.c - the database file at open (store/store_file.c): a new
 * store only where no database (nor a WAL of one) exists, an empty or
 * foreign file refused and left as it was, a file the writer cannot write
 * refused, the exclusive lock on agentbus.db itself (a second owner refused,
 * also once LOCK is gone), a refused second owner leaving the first one's
 * SQLite locks alone, and quick_check once per owner.
 *
 * Each test gets a fresh directory from mkdtemp() and removes it afterwards.
 */
#include "store.h"
#include "testutil.h"

#include "broker_proc.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct fx {
    char dir[64];
    char db[96];
    char wal[100];
    char shm[100];
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/ab_open_XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->db, sizeof f->db, "%s/%s", f->dir, AB_STORE_DB_NAME);
    snprintf(f->wal, sizeof f->wal, "%s-wal", f->db);
    snprintf(f->shm, sizeof f->shm, "%s-shm", f->db);
    *state = f;
    return 0;
}

/* Clear the immutable flag a test may have set (also after a failed assert). */
static void set_immutable(const char *path, bool on, int *err_out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int flags = 0, rc = -1;
    if (fd >= 0 && ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
        flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
        rc = ioctl(fd, FS_IOC_SETFLAGS, &flags);
    }
    if (err_out)
        *err_out = rc == 0 ? 0 : errno;
    if (fd >= 0)
        close(fd);
}

static int teardown(void **state)
{
    fx_t *f = *state;
    set_immutable(f->db, false, NULL);
    chmod(f->db, 0600);
    bp_rm_tree(f->dir);
    free(f);
    return 0;
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static ab_store_t *open_as(const char *dir, bool readonly, bool exclusive)
{
    ab_store_opts_t o = {.readonly = readonly, .exclusive = exclusive};
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *st = NULL;
    ab_status_t s = ab__store_open(&st, dir, &o, &err);
    if (s != AB_OK)
        fail_msg("open %s: %s: %s", dir, ab_status_name(s), err.message);
    return st;
}

/* Open must fail with @p code and a message holding @p want1 and @p want2. */
static void open_refused(const char *dir, bool readonly, bool exclusive, ab_status_t code,
                         const char *want1, const char *want2)
{
    ab_store_opts_t o = {.readonly = readonly, .exclusive = exclusive};
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *st = NULL;
    ab_status_t s = ab__store_open(&st, dir, &o, &err);
    if (s != code)
        fail_msg("open %s (readonly %d, exclusive %d): got %s (%s), want %s", dir, readonly,
                 exclusive, ab_status_name(s), err.message, ab_status_name(code));
    assert_null(st);
    if (strstr(err.message, want1) == NULL || (want2 && strstr(err.message, want2) == NULL))
        fail_msg("message '%s' lacks '%s' / '%s'", err.message, want1, want2 ? want2 : "");
}

static void commit_one(ab_store_t *st, uint64_t seq)
{
    ab_append_event_t ev = {.thread = {"t", 1},
                            .run = {"r", 1},
                            .seq = seq,
                            .epoch = 1,
                            .bytes = (const uint8_t *)"event",
                            .len = 5};
    ab_error_t err = AB_ERROR_INIT;
    uint64_t pos = 0;
    if (ab__store_append_batch(st, &ev, 1, 1, &pos, &err) != AB_OK)
        fail_msg("commit seq %llu: %s", (unsigned long long)seq, err.message);
}

static uint64_t head_seq(ab_store_t *st)
{
    ab_run_head_t run;
    ab_error_t err = AB_ERROR_INIT;
    if (ab__store_head(st, (ab_str_t){"t", 1}, (ab_str_t){"r", 1}, &run, &err) != AB_OK)
        fail_msg("head: %s", err.message);
    return run.last_seq;
}

/* A new store appears complete where none was, and nothing else is left. */
static void test_new_store_where_none(void **state)
{
    fx_t *f = *state;
    ab_store_t *st = open_as(f->dir, false, true);
    commit_one(st, 1);
    ab__store_close(&st);
    DIR *d = opendir(f->dir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        n++;
        if (strcmp(e->d_name, AB_STORE_DB_NAME) != 0 && strcmp(e->d_name, AB_STORE_LOCK_NAME) != 0)
            fail_msg("left behind: %s", e->d_name); /* no temporary file, no WAL after close */
    }
    closedir(d);
    assert_int_equal(n, 2);
    st = open_as(f->dir, true, false);
    assert_int_equal(head_seq(st), 1);
    ab__store_close(&st);
}

/* A zero-length agentbus.db is refused by every kind of handle and stays 0 bytes. */
static void test_empty_file_refused(void **state)
{
    fx_t *f = *state;
    FILE *fp = fopen(f->db, "wb");
    assert_non_null(fp);
    fclose(fp);
    open_refused(f->dir, false, true, AB_CORRUPT, f->db, "is empty (0 bytes)");
    open_refused(f->dir, false, false, AB_CORRUPT, f->db, "empty");
    open_refused(f->dir, true, false, AB_CORRUPT, f->db, "empty");
    struct stat sb;
    assert_int_equal(stat(f->db, &sb), 0);
    assert_int_equal(sb.st_size, 0);
    assert_false(exists(f->wal));
    assert_false(exists(f->shm));
}

/* A WAL without its database is not a new store: refused, nothing created. */
static void test_orphan_wal_refused(void **state)
{
    fx_t *f = *state;
    ab_store_t *st = open_as(f->dir, false, false);
    commit_one(st, 1);
    ab__store_close(&st);
    FILE *fp = fopen(f->wal, "wb"); /* as if the database had been moved away alone */
    assert_non_null(fp);
    assert_int_equal(fwrite("not empty", 1, 9, fp), 9);
    fclose(fp);
    assert_int_equal(unlink(f->db), 0);
    open_refused(f->dir, false, true, AB_CORRUPT, f->db, "is missing but its WAL");
    open_refused(f->dir, false, false, AB_CORRUPT, "-wal is there", NULL);
    assert_false(exists(f->db));
    assert_int_equal(unlink(f->wal), 0); /* moved away: now a new store is made */
    st = open_as(f->dir, false, true);
    ab__store_close(&st);
    assert_true(exists(f->db));
}

/* A file that is not SQLite's is refused, byte for byte unchanged. */
static void test_foreign_file_refused(void **state)
{
    fx_t *f = *state;
    char text[3000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (char)('a' + i % 26);
    FILE *fp = fopen(f->db, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, sizeof text, fp), sizeof text);
    fclose(fp);
    open_refused(f->dir, false, true, AB_CORRUPT, f->db, "damaged");
    open_refused(f->dir, false, false, AB_CORRUPT, f->db, "not a database");
    size_t len = 0;
    char *after = tu_read_file(f->db, &len);
    assert_int_equal(len, sizeof text);
    assert_memory_equal(after, text, sizeof text);
    free(after);
    assert_false(exists(f->wal));
}

/*
 * Make f->db unwritable for this process: mode 0444 unless we are root (who
 * writes anyway), then the immutable attribute. Returns false (and says why)
 * when this machine cannot.
 */
static bool make_unwritable(const fx_t *f)
{
    if (geteuid() != 0)
        return chmod(f->db, 0444) == 0;
    int e = 0;
    set_immutable(f->db, true, &e);
    if (e != 0) {
        print_message("cannot set the immutable attribute on %s (%s): skipped\n", f->db,
                      strerror(e));
        return false;
    }
    return true;
}

/* An agentbus.db a writer cannot write, in a writable directory: refused at open. */
static void test_unwritable_file_refused(void **state)
{
    fx_t *f = *state;
    ab_store_t *st = open_as(f->dir, false, false);
    commit_one(st, 1);
    ab__store_close(&st);
    if (!make_unwritable(f))
        skip();
    size_t len0 = 0, len1 = 0;
    char *before = tu_read_file(f->db, &len0);
    open_refused(f->dir, false, true, AB_UNAVAILABLE, f->db, "is not writable");
    open_refused(f->dir, false, false, AB_UNAVAILABLE, f->db, "is not writable");
    st = open_as(f->dir, true, false); /* reading it is fine */
    assert_int_equal(head_seq(st), 1);
    ab__store_close(&st);
    char *after = tu_read_file(f->db, &len1);
    assert_int_equal(len0, len1);
    assert_memory_equal(before, after, len0);
    free(before);
    free(after);
    set_immutable(f->db, false, NULL);
}

/* The lock is on agentbus.db: a second owner is refused, also once LOCK is deleted. */
static void test_exclusive_lock(void **state)
{
    fx_t *f = *state;
    ab_store_t *a = open_as(f->dir, false, true);
    char want[160];
    snprintf(want, sizeof want, "data directory %s is in use by another broker (pid %ld)", f->dir,
             (long)getpid());
    open_refused(f->dir, false, true, AB_UNAVAILABLE, want, NULL);
    char lock[128];
    snprintf(lock, sizeof lock, "%s/%s", f->dir, AB_STORE_LOCK_NAME);
    size_t n = 0;
    char *pid = tu_read_file(lock, &n);
    assert_int_equal(strtol(pid, NULL, 10), (long)getpid());
    free(pid);
    assert_int_equal(unlink(lock), 0);
    /* /proc/locks names the holder; without it the message says "pid unknown" */
    snprintf(want, sizeof want, "data directory %s is in use by another broker (pid", f->dir);
    open_refused(f->dir, false, true, AB_UNAVAILABLE, want, NULL);
    assert_false(exists(lock));                   /* the refused opener did not make a new one */
    ab_store_t *r = open_as(f->dir, true, false); /* readers need no lock */
    commit_one(a, 1);
    assert_int_equal(head_seq(r), 1);
    ab__store_close(&r);
    ab__store_close(&a);
    a = open_as(f->dir, false, true); /* released with the first owner */
    commit_one(a, 2);
    ab__store_close(&a);
}

/*
 * A refused second owner must not drop the first one's SQLite (fcntl) locks,
 * which closing any descriptor of the file would do. Seen from another
 * process: with the owner's shared lock in place, a connection there that
 * closes is not the last one and leaves the WAL alone; without it, that
 * close would checkpoint and delete the WAL under the owner.
 */
static void test_refusal_keeps_sqlite_locks(void **state)
{
    fx_t *f = *state;
    ab_store_t *a = open_as(f->dir, false, true);
    commit_one(a, 1);
    assert_true(exists(f->wal));
    open_refused(f->dir, false, true, AB_UNAVAILABLE, "in use by another broker", NULL);
    ab_store_t *r = open_as(f->dir, true, false);
    open_refused(f->dir, false, true, AB_UNAVAILABLE, "in use by another broker", NULL);
    ab__store_close(&r); /* a reader closing while the owner stays open */
    pid_t pid = fork();  /* a fresh process (exec): a forked one shares SQLite's lock table */
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/proc/self/exe", "test_store_open", "--open-close", f->dir, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!exists(f->wal))
        fail_msg("another process's close removed the WAL of an open owner: its locks were lost");
    commit_one(a, 2);
    ab__store_close(&a);
    ab_store_t *rd = open_as(f->dir, true, false);
    assert_int_equal(head_seq(rd), 2);
    ab__store_close(&rd);
}

/* Overwrite every page after the first of @p path, from another process (a
 * descriptor of the file closed here would drop this process's SQLite locks). */
static void smash_pages(const char *path)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char junk[8192];
        memset(junk, 0xA5, sizeof junk);
        int fd = open(path, O_WRONLY);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0 || sb.st_size <= 2 * (off_t)sizeof junk)
            _exit(2);
        for (off_t off = sizeof junk; off < sb.st_size; off += (off_t)sizeof junk)
            if (pwrite(fd, junk, sizeof junk, off) != (ssize_t)sizeof junk)
                _exit(3);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/*
 * quick_check runs once per database per process: readers opened while the
 * exclusive owner that checked the file is open skip it; without that owner
 * every opener checks. Shown with damage made after the owner's check.
 */
static void test_quick_check_once(void **state)
{
    fx_t *f = *state;
    ab_store_t *st = open_as(f->dir, false, false);
    for (uint64_t s = 1; s <= 300; s++)
        commit_one(st, s);
    ab__store_close(&st); /* checkpointed into the file */
    ab_store_t *owner = open_as(f->dir, false, true);
    smash_pages(f->db);
    ab_store_t *r = open_as(f->dir, true, false); /* checked by the owner: no second check */
    ab__store_close(&r);
    open_refused(f->dir, false, false, AB_CORRUPT, f->db, "damaged"); /* a writer checks */
    ab__store_close(&owner);
    open_refused(f->dir, true, false, AB_CORRUPT, f->db, "damaged"); /* no owner: checked */
}

/* The child of test_refusal_keeps_sqlite_locks: open a writer (no lock) and close it. */
static int open_close(const char *dir)
{
    ab_store_opts_t o = {0};
    ab_error_t err = AB_ERROR_INIT;
    ab_store_t *w = NULL;
    if (ab__store_open(&w, dir, &o, &err) != AB_OK) {
        fprintf(stderr, "open-close %s: %s\n", dir, err.message);
        return 2;
    }
    ab__store_close(&w);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--open-close") == 0)
        return open_close(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_new_store_where_none, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_file_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_file_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_orphan_wal_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unwritable_file_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exclusive_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusal_keeps_sqlite_locks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quick_check_once, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * pg_fixture.h - a PostgreSQL server of its own for a test (header-only:
 * every function is static).
 *
 * pgfx_init() makes a temporary directory and runs initdb in it (trust
 * authentication, user "agentbus"); pgfx_start() starts `postgres` on it as a
 * child process, on a loopback port it picks, with fsync=on and no Unix
 * socket, and waits (bounded, polling PQping) until it accepts connections;
 * pgfx_stop() stops it by pid (SIGINT = fast shutdown, then SIGKILL past
 * PGFX_STOP_MS); pgfx_kill() SIGKILLs it; pgfx_cleanup() stops it and removes
 * the directory. pgfx_standby() makes a streaming standby of a running
 * primary with pg_basebackup.
 *
 * PostgreSQL refuses to run as root: when the test runs as root, the server,
 * initdb and pg_basebackup run as the user "postgres" (Debian's package makes
 * it), else "nobody", and the directory is handed to that user. The servers
 * get PR_SET_PDEATHSIG, so a test that dies does not leave one behind.
 *
 * The binaries: $AB_PG_BINDIR, else `pg_config --bindir` (libpq-dev). When
 * neither gives a directory with initdb, pgfx_init() returns 77 (skip).
 */
#ifndef AB_TESTS_PG_FIXTURE_H
#define AB_TESTS_PG_FIXTURE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nftw, prctl: before any system header of the including file */
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PGFX_READY_MS 30000
#define PGFX_STOP_MS  30000

typedef struct pgfx {
    pid_t pid;          /* the postmaster, 0 when not running */
    int port;           /* its loopback port */
    char dir[128];      /* the temporary directory (owned by the server's user) */
    char data[192];     /* dir/data: the cluster */
    char conninfo[256]; /* libpq conninfo of the server, database postgres */
    char bindir[512];
    uid_t uid; /* the server's user (getuid() unless root) */
    gid_t gid;
    bool own_dir;
} pgfx_t;

static inline void pgfx_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static inline long pgfx_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static inline bool pgfx_find_bindir(pgfx_t *f)
{
    const char *env = getenv("AB_PG_BINDIR");
    if (env && *env) {
        snprintf(f->bindir, sizeof f->bindir, "%s", env);
    } else {
        FILE *p = popen("pg_config --bindir 2>/dev/null", "r");
        if (!p)
            return false;
        if (!fgets(f->bindir, sizeof f->bindir, p))
            f->bindir[0] = '\0';
        pclose(p);
        f->bindir[strcspn(f->bindir, "\n")] = '\0';
    }
    char path[600];
    snprintf(path, sizeof path, "%s/initdb", f->bindir);
    return f->bindir[0] && access(path, X_OK) == 0;
}

/* Become the server's user (in a child); never returns on failure. */
static inline void pgfx_become(const pgfx_t *f)
{
    if (getuid() == 0 && f->uid != 0) {
        if (setgid(f->gid) != 0 || setuid(f->uid) != 0)
            _exit(126);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* after setuid, which clears it */
}

/* Fork and exec argv (argv[0] a name in bindir) with output to dir/<log>. */
static inline pid_t pgfx_spawn(const pgfx_t *f, const char *log, char *const argv[])
{
    char path[600], logp[300];
    snprintf(path, sizeof path, "%s/%s", f->bindir, argv[0]);
    snprintf(logp, sizeof logp, "%s/%s", f->dir, log);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    pgfx_become(f);
    int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    execv(path, argv);
    _exit(127);
}

/* Run argv to its end; @return its exit status (or -1). */
static inline int pgfx_run(const pgfx_t *f, const char *log, char *const argv[])
{
    pid_t pid = pgfx_spawn(f, log, argv);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static inline int pgfx_free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(s, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (s >= 0)
        close(s);
    return port;
}

/* Make the directory (handed to the server's user); @return 0 or -1. */
static inline int pgfx_mkdir(pgfx_t *f)
{
    snprintf(f->dir, sizeof f->dir, "/tmp/ab_pg_XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    f->own_dir = true;
    f->uid = getuid();
    f->gid = getgid();
    if (getuid() == 0) {
        struct passwd *pw = getpwnam("postgres");
        if (!pw)
            pw = getpwnam("nobody");
        if (!pw)
            return -1;
        f->uid = pw->pw_uid;
        f->gid = pw->pw_gid;
        if (chown(f->dir, f->uid, f->gid) != 0)
            return -1;
    }
    snprintf(f->data, sizeof f->data, "%s/data", f->dir);
    return 0;
}

/* Directory and initdb; @return 0, 77 (no PostgreSQL here: skip) or -1. */
static inline int pgfx_init(pgfx_t *f)
{
    memset(f, 0, sizeof *f);
    if (!pgfx_find_bindir(f))
        return 77;
    if (pgfx_mkdir(f) != 0)
        return -1;
    char *argv[] = {"initdb",   "-D",        f->data,      "-A", "trust", "-U",
                    "agentbus", "--no-sync", "--locale=C", "-E", "UTF8",  NULL};
    return pgfx_run(f, "initdb.log", argv) == 0 ? 0 : -1;
}

static inline void pgfx_set_conninfo(pgfx_t *f)
{
    snprintf(f->conninfo, sizeof f->conninfo,
             "host=127.0.0.1 port=%d user=agentbus dbname=postgres connect_timeout=5", f->port);
}

/* Wait until the server answers; @return 0, or -1 when it died or timed out. */
static inline int pgfx_wait_ready(pgfx_t *f)
{
    long end = pgfx_now_ms() + PGFX_READY_MS;
    while (pgfx_now_ms() < end) {
        if (PQping(f->conninfo) == PQPING_OK)
            return 0;
        int st;
        if (waitpid(f->pid, &st, WNOHANG) == f->pid) {
            f->pid = 0;
            return -1;
        }
        pgfx_sleep_ms(20);
    }
    return -1;
}

/*
 * Start the server with settings @p extra ("name=value", NULL-terminated, may
 * be NULL) on a fresh port (retried when another process took it first).
 * @return 0 or -1.
 */
static inline int pgfx_start(pgfx_t *f, const char *const *extra)
{
    for (int attempt = 0; attempt < 5; attempt++) {
        f->port = pgfx_free_port();
        if (f->port < 0)
            return -1;
        pgfx_set_conninfo(f);
        char port[16];
        snprintf(port, sizeof port, "%d", f->port);
        char *argv[48] = {"postgres",
                          "-D",
                          f->data,
                          "-p",
                          port,
                          "-c",
                          "listen_addresses=127.0.0.1",
                          "-c",
                          "unix_socket_directories=",
                          "-c",
                          "fsync=on",
                          "-c",
                          "max_connections=60",
                          "-c",
                          "log_min_messages=warning"};
        /* count first: a loop that both tests extra[i] and indexes it lets
         * gcc's -Warray-bounds (Release) reason past the array's end */
        size_t n_extra = 0;
        while (extra && extra[n_extra])
            n_extra++;
        if (n_extra > 15)
            return -1;
        int n = 15;
        for (size_t i = 0; i < n_extra; i++) {
            argv[n++] = "-c";
            argv[n++] = (char *)(uintptr_t)extra[i]; /* execv takes char *const[] */
        }
        argv[n] = NULL;
        f->pid = pgfx_spawn(f, "server.log", argv);
        if (f->pid < 0)
            return -1;
        if (pgfx_wait_ready(f) == 0)
            return 0;
        if (f->pid > 0) {
            kill(f->pid, SIGKILL);
            waitpid(f->pid, NULL, 0);
            f->pid = 0;
        }
    }
    return -1;
}

static inline void pgfx_reap(pgfx_t *f, int sig, int bound_ms)
{
    if (f->pid <= 0)
        return;
    kill(f->pid, sig);
    long end = pgfx_now_ms() + bound_ms;
    int st;
    while (waitpid(f->pid, &st, WNOHANG) == 0) {
        if (pgfx_now_ms() > end) {
            kill(f->pid, SIGKILL);
            waitpid(f->pid, &st, 0);
            break;
        }
        pgfx_sleep_ms(10);
    }
    f->pid = 0;
}

/** Fast shutdown (SIGINT), SIGKILL past PGFX_STOP_MS. */
static inline void pgfx_stop(pgfx_t *f)
{
    pgfx_reap(f, SIGINT, PGFX_STOP_MS);
}

/** SIGKILL the postmaster (its backends exit when they see it gone). */
static inline void pgfx_kill(pgfx_t *f)
{
    pgfx_reap(f, SIGKILL, PGFX_STOP_MS);
}

static inline int pgfx_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static inline void pgfx_cleanup(pgfx_t *f)
{
    pgfx_stop(f);
    if (f->own_dir && f->dir[0] && getenv("AB_PG_KEEP") == NULL)
        nftw(f->dir, pgfx_rm_one, 16, FTW_DEPTH | FTW_PHYS);
    f->own_dir = false;
}

/** One connection to the server (NULL on failure). */
static inline PGconn *pgfx_connect(const pgfx_t *f)
{
    PGconn *c = PQconnectdb(f->conninfo);
    if (c && PQstatus(c) != CONNECTION_OK) {
        PQfinish(c);
        return NULL;
    }
    return c;
}

/** Run @p sql; the first column of its first row as an integer (or -1). */
static inline long long pgfx_scalar(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    long long v = -1;
    if (r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
        v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

/* pgfx_scalar() on a connection of its own (-1 when it cannot connect). */
static inline long long pgfx_scalar1(const pgfx_t *f, const char *sql)
{
    PGconn *c = pgfx_connect(f);
    long long n = c ? pgfx_scalar(c, sql) : -1;
    if (c)
        PQfinish(c);
    return n;
}

/*
 * Make @p sb a streaming standby of the running @p primary (pg_basebackup
 * -R, so it connects back as application_name @p name) and start it.
 * @return 0 or -1.
 */
static inline int pgfx_standby(pgfx_t *sb, const pgfx_t *primary, const char *name,
                               const char *const *extra)
{
    memset(sb, 0, sizeof *sb);
    snprintf(sb->bindir, sizeof sb->bindir, "%s", primary->bindir);
    if (pgfx_mkdir(sb) != 0)
        return -1;
    char conn[300];
    snprintf(conn, sizeof conn, "host=127.0.0.1 port=%d user=agentbus application_name=%s",
             primary->port, name);
    /* -c fast: an immediate checkpoint (the default spreads it over minutes) */
    char *argv[] = {"pg_basebackup", "-D", sb->data, "-d",        conn, "-R", "-c",
                    "fast",          "-X", "stream", "--no-sync", NULL};
    if (pgfx_run(sb, "basebackup.log", argv) != 0)
        return -1;
    return pgfx_start(sb, extra);
}

#endif /* AB_TESTS_PG_FIXTURE_H */

/*
 * spawn.c - run `agentbus broker` as a child of the agentbus program
 * (see spawn.h): fork/exec, the bounded wait for the ready line, and the
 * bounded SIGTERM stop.
 *
 * Invariants:
 *  1. Every wait is bounded: the ready line (SPAWN_READY_MS), the stop
 *     (SPAWN_STOP_MS, then SIGKILL and a reap).
 *  2. A child that did not get ready is stopped and reaped before
 *     spawn_broker() returns; a temporary directory it made is removed.
 *  3. The child never outlives the parent (own process group + Linux
 *     parent-death signal), and a terminal's Ctrl-C reaches the parent only.
 */
#include "spawn.h"
#include "ab_common.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

pid_t spawn_fork_child(void)
{
    pid_t parent = getpid();
    fflush(NULL); /* the child must not repeat buffered output */
    pid_t pid = fork();
    if (pid == 0) {
#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
#endif
        (void)parent;
    }
    return pid;
}

void spawn_rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            size_t lp = strlen(path), ln = strlen(e->d_name);
            char *sub = malloc(lp + ln + 2);
            if (!sub)
                continue;
            memcpy(sub, path, lp);
            sub[lp] = '/';
            memcpy(sub + lp + 1, e->d_name, ln + 1);
            if (e->d_type == DT_DIR)
                spawn_rm_tree(sub);
            else
                unlink(sub);
            free(sub);
        }
        closedir(d);
    }
    rmdir(path);
}

/* Read lines until the ready line (invariant 1); 0 on success. */
static int read_ready(spawn_broker_t *b)
{
    char line[1024];
    size_t used = 0;
    long deadline = ab__mono_ms() + SPAWN_READY_MS;
    for (;;) {
        char *nl = memchr(line, '\n', used);
        if (nl) {
            *nl = '\0';
            char *s = strstr(line, "agentbus broker ready ");
            if (s &&
                sscanf(s, "agentbus broker ready cmd=%127s events=%127s", b->cmd, b->events) == 2)
                return 0;
            size_t rest = used - (size_t)(nl + 1 - line);
            memmove(line, nl + 1, rest);
            used = rest;
            continue;
        }
        long left = deadline - ab__mono_ms();
        struct pollfd p = {.fd = b->fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return -1;
        if (used + 1 >= sizeof(line))
            used = 0; /* an overlong line is not the ready line */
        ssize_t n = read(b->fd, line + used, sizeof(line) - 1 - used);
        if (n <= 0)
            return -1;
        used += (size_t)n;
    }
}

/* In the child: redirect, detach from the terminal's process group, exec. */
static void exec_child(const spawn_broker_t *b, const spawn_opts_t *o, int out_fd)
{
    setpgid(0, 0);
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
    dup2(out_fd, STDOUT_FILENO);
    if (o->quiet || o->log_path) {
        int fd = o->log_path ? open(o->log_path, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;
        if (fd < 0)
            fd = open("/dev/null", O_WRONLY);
        if (fd >= 0)
            dup2(fd, STDERR_FILENO);
    }
    const char *argv[12 + SPAWN_MAX_ARGS] = {
        "agentbus", "broker",
        "--data",   b->dir,
        "--cmd",    o->cmd_ep ? o->cmd_ep : "tcp://127.0.0.1:*",
        "--events", o->events_ep ? o->events_ep : "tcp://127.0.0.1:*"};
    int n = 8;
    for (int i = 0; i < SPAWN_MAX_ARGS && o->extra[i]; i++)
        argv[n++] = o->extra[i];
    argv[n] = NULL;
    char *args[12 + SPAWN_MAX_ARGS];
    memcpy(args, argv, sizeof(args)); /* execv's prototype is not const-correct */
    execv("/proc/self/exe", args);
    _exit(127);
}

int spawn_broker(spawn_broker_t *b, const spawn_opts_t *o)
{
    memset(b, 0, sizeof(*b));
    b->fd = -1;
    if (o->dir) {
        snprintf(b->dir, sizeof(b->dir), "%s", o->dir);
    } else {
        snprintf(b->dir, sizeof(b->dir), "/tmp/%s-XXXXXX",
                 o->tmp_prefix ? o->tmp_prefix : "agentbus");
        if (!mkdtemp(b->dir))
            return -1;
        b->own_dir = true;
    }
    int fds[2];
    if (pipe(fds) != 0) {
        spawn_stop(b, true);
        return -1;
    }
    fflush(NULL); /* the child must not repeat buffered output */
    b->pid = fork();
    if (b->pid == 0) {
        close(fds[0]);
        exec_child(b, o, fds[1]);
    }
    close(fds[1]);
    b->fd = fds[0];
    if (b->pid < 0) {
        b->pid = 0;
        spawn_stop(b, true);
        return -1;
    }
    setpgid(b->pid, b->pid); /* also here: no race with a signal to our group */
    if (read_ready(b) != 0) {
        spawn_stop(b, true);
        return -1;
    }
    return 0;
}

int spawn_stop(spawn_broker_t *b, bool remove_dir)
{
    int rc = -1;
    if (b->pid > 0) {
        kill(b->pid, SIGTERM);
        long deadline = ab__mono_ms() + SPAWN_STOP_MS;
        int st = 0;
        pid_t w;
        while ((w = waitpid(b->pid, &st, WNOHANG)) == 0 && ab__mono_ms() < deadline) {
            struct pollfd p = {.fd = b->fd, .events = POLLIN};
            char sink[256];
            if (b->fd < 0 || poll(&p, 1, 20) <= 0 || read(b->fd, sink, sizeof(sink)) <= 0)
                poll(NULL, 0, 5); /* drained or closed: wait for the exit */
        }
        if (w == 0) {
            kill(b->pid, SIGKILL);
            waitpid(b->pid, &st, 0);
        } else if (w > 0 && WIFEXITED(st)) {
            rc = WEXITSTATUS(st);
        }
        b->pid = 0;
    }
    if (b->fd >= 0)
        close(b->fd);
    b->fd = -1;
    if (remove_dir && b->own_dir && b->dir[0])
        spawn_rm_tree(b->dir);
    return rc;
}

/*
 * worker_proc.h - run examples/worker (next to the agentbus binary) as a
 * child process for the CLI integration tests, read what it prints and stop
 * it by pid (header-only: every function is static).
 */
#ifndef AB_TESTS_WORKER_PROC_H
#define AB_TESTS_WORKER_PROC_H

#include "testutil.h"

#include "broker_proc.h"

#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

typedef struct wproc {
    pid_t pid;
    int out; /* read end of its stdout */
    char line[512];
} wproc_t;

static pid_t running_worker; /* stopped by teardown_worker() when a test failed before it did */

/* Read from @p w until a line holding @p needle arrived (or @p ms passed); w->line keeps
 * the last bytes read (a window: older output slides out). */
static inline bool read_until(wproc_t *w, const char *needle, long ms)
{
    size_t used = 0, half = sizeof(w->line) / 2;
    long deadline = ab__mono_ms() + ms;
    while (ab__mono_ms() < deadline) {
        if (used >= sizeof(w->line) - 1) { /* keep the newer half */
            memmove(w->line, w->line + used - half, half);
            used = half;
        }
        struct pollfd p = {.fd = w->out, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = read(w->out, w->line + used, sizeof(w->line) - 1 - used);
        if (n <= 0)
            break;
        used += (size_t)n;
        w->line[used] = '\0';
        if (strstr(w->line, needle) != NULL)
            return true;
    }
    return false;
}

static inline int teardown_worker(void **state)
{
    if (running_worker > 0) {
        kill(running_worker, SIGKILL);
        waitpid(running_worker, NULL, 0);
        running_worker = 0;
    }
    return it_teardown(state);
}

/* Start examples/worker ENDPOINT NAME AGENT ACTIONS... (@p argv NULL-terminated) and wait
 * for its ready line. */
static inline void worker_start_args(wproc_t *w, const char *const *argv)
{
    char bin[1024], dir[1024];
    snprintf(dir, sizeof(dir), "%s", AB_AGENTBUS_BIN);
    snprintf(bin, sizeof(bin), "%s/examples/worker", dirname(dir));
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    w->pid = fork();
    assert_true(w->pid >= 0);
    if (w->pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        const char *args[16] = {bin};
        for (int i = 0; argv[i] && i < 14; i++)
            args[i + 1] = argv[i];
        execv(bin, (char *const *)(uintptr_t)args);
        _exit(127);
    }
    close(fds[1]);
    w->out = fds[0];
    running_worker = w->pid;
    if (!read_until(w, "worker ready id=", IT_TIMEOUT))
        fail_msg("the worker did not register: %s", w->line);
}

/* SIGTERM by pid, wait, and keep what it printed last in w->line. */
static inline void worker_stop(wproc_t *w)
{
    assert_int_equal(kill(w->pid, SIGTERM), 0);
    bool said = read_until(w, "worker stopped:", IT_TIMEOUT);
    int st = 0;
    assert_int_equal(waitpid(w->pid, &st, 0), w->pid);
    running_worker = 0;
    close(w->out);
    assert_true(said);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

#endif /* AB_TESTS_WORKER_PROC_H */

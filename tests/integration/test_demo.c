/*
 * test_demo.c - `agentbus demo` as a process: it starts its own broker,
 * runs the fabric flat out (--pace 0), exits 0 with the summary, the audit
 * verdict and every outcome marker, and leaves no broker behind; SIGINT in
 * the middle stops it (exit 130) and its broker too; against an external
 * broker (--broker) with --json, stdout is JSON Lines only.
 *
 * Every wait is bounded: the demo's output is read with poll() against a
 * deadline, and a demo that does not exit in time is killed (a failure).
 */
#include "testutil.h"

#include "broker_proc.h"

#define DEMO_MS 60000

typedef struct demo_proc {
    pid_t pid;
    int fd;
    char out[1 << 17]; /* stdout + stderr */
    size_t len;
    int status; /* exit status, -1 killed on timeout */
} demo_proc_t;

static void demo_spawn(demo_proc_t *d, const char *const *args, bool split_stderr)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    d->len = 0;
    d->pid = fork();
    assert_true(d->pid >= 0);
    if (d->pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        if (!split_stderr)
            dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        close(fds[1]);
        const char *argv[24] = {"agentbus", "demo"};
        for (int i = 0; args[i] && i < 20; i++)
            argv[i + 2] = args[i];
        char *a[24];
        memcpy(a, argv, sizeof(a));
        execv(AB_AGENTBUS_BIN, a);
        _exit(127);
    }
    close(fds[1]);
    d->fd = fds[0];
}

/* Read output until @p want appears (NULL: until EOF) or the deadline. */
static bool demo_read(demo_proc_t *d, const char *want, long deadline)
{
    for (;;) {
        d->out[d->len] = '\0';
        if (want && strstr(d->out, want))
            return true;
        long left = deadline - bp_now_ms();
        struct pollfd p = {.fd = d->fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return false;
        if (d->len + 1 >= sizeof(d->out))
            d->len = 0; /* keep the tail */
        ssize_t n = read(d->fd, d->out + d->len, sizeof(d->out) - 1 - d->len);
        if (n <= 0)
            return want == NULL;
        d->len += (size_t)n;
    }
}

/* Wait for the exit until @p deadline; kill on timeout (status -1). */
static void demo_wait(demo_proc_t *d, long deadline)
{
    bool eof = demo_read(d, NULL, deadline);
    int st = 0;
    while (waitpid(d->pid, &st, WNOHANG) == 0) {
        if (!eof || bp_now_ms() > deadline) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &st, 0);
            d->status = -1;
            close(d->fd);
            return;
        }
        poll(NULL, 0, 10);
    }
    close(d->fd);
    d->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* True when some process runs `agentbus broker ... --data @p dir`. */
static bool broker_running(const char *dir)
{
    DIR *proc = opendir("/proc");
    assert_non_null(proc);
    struct dirent *e;
    bool found = false;
    while (!found && (e = readdir(proc)) != NULL) {
        char path[300], cmd[4096];
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, cmd, sizeof(cmd) - 1);
        close(fd);
        if (n <= 0)
            continue;
        bool broker = false, data = false;
        for (ssize_t i = 0; i < n; i += (ssize_t)strlen(cmd + i) + 1) {
            cmd[n] = '\0';
            broker |= strcmp(cmd + i, "broker") == 0;
            data |= strcmp(cmd + i, dir) == 0;
        }
        found = broker && data;
    }
    closedir(proc);
    return found;
}

static void check_gone(const char *dir)
{
    long deadline = bp_now_ms() + 5000; /* a zombie is reaped by its parent, at once */
    while (broker_running(dir) && bp_now_ms() < deadline)
        poll(NULL, 0, 20);
    assert_false(broker_running(dir));
}

static void test_demo_own_broker(void **state)
{
    (void)state;
    if (!bp_available())
        skip();
    char dir[] = "/tmp/agentbus-demo-XXXXXX";
    assert_non_null(mkdtemp(dir));
    static demo_proc_t d;
    const char *args[] = {"--data", dir, "--pace", "0", "--runs", "6", "--no-color", NULL};
    demo_spawn(&d, args, false);
    demo_wait(&d, bp_now_ms() + DEMO_MS);
    if (d.status != 0)
        fail_msg("demo exit %d:\n%s", d.status, d.out);
    assert_non_null(strstr(d.out, "agentbus demo: OK:"));
    assert_non_null(strstr(d.out, "verified: 6 runs ok, 0 failed, 0 still active"));
    assert_non_null(strstr(d.out, "runs: 6 by 3 agents"));
    assert_non_null(strstr(d.out, "run finished (success)"));
    assert_non_null(strstr(d.out, "run interrupted: tool_call - Deploy"));
    assert_non_null(strstr(d.out, "run cancelled"));
    assert_non_null(strstr(d.out, "RUN_ERROR: tracker returned 503"));
    assert_non_null(strstr(d.out, "tool web_search("));
    assert_null(strstr(d.out, "MISMATCH"));
    assert_null(strstr(d.out, "\033[")); /* --no-color */
    check_gone(dir);
    bp_rm_tree(dir);
}

static void test_demo_sigint(void **state)
{
    (void)state;
    if (!bp_available())
        skip();
    char dir[] = "/tmp/agentbus-demo-XXXXXX";
    assert_non_null(mkdtemp(dir));
    static demo_proc_t d;
    const char *args[] = {"--data", dir, "--pace", "50", "--runs", "30", "--no-color", NULL};
    demo_spawn(&d, args, false);
    long deadline = bp_now_ms() + DEMO_MS;
    if (!demo_read(&d, "run started", deadline))
        fail_msg("no run started:\n%s", d.out);
    assert_true(broker_running(dir));
    kill(d.pid, SIGINT);
    demo_wait(&d, deadline);
    if (d.status != 130)
        fail_msg("demo exit %d after SIGINT:\n%s", d.status, d.out);
    assert_non_null(strstr(d.out, "agentbus demo: interrupted"));
    check_gone(dir);
    bp_rm_tree(dir);
}

static void test_demo_external_json(void **state)
{
    (void)state;
    if (!bp_available())
        skip();
    static bp_t b;
    assert_int_equal(bp_start(&b, NULL, NULL), 0);
    static demo_proc_t d;
    const char *args[] = {"--broker", b.cmd, "--pace", "0", "--agents", "2", "--json", NULL};
    demo_spawn(&d, args, true);
    demo_wait(&d, bp_now_ms() + DEMO_MS);
    int st = bp_stop(&b);
    bp_cleanup(&b);
    if (d.status != 0)
        fail_msg("demo exit %d:\n%s", d.status, d.out);
    assert_int_equal(st, 0);
    size_t lines = 0;
    for (char *s = d.out; *s; lines++) {
        if (strncmp(s, "{\"thread\":\"demo-", 16) != 0)
            fail_msg("not a JSON Lines record: %.200s", s);
        char *nl = strchr(s, '\n');
        assert_non_null(nl);
        s = nl + 1;
    }
    assert_true(lines > 60);
    assert_non_null(strstr(d.out, "\"type\":\"RUN_ERROR\""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_demo_own_broker),
        cmocka_unit_test(test_demo_sigint),
        cmocka_unit_test(test_demo_external_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

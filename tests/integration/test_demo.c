/*
 * test_demo.c - `agentbus demo` as a process: it starts its own broker and
 * one worker process per agent, runs the fabric flat out (--pace 0), exits
 * 0 with the summary (agent pids, throughput, where the data is), the audit
 * verdict and every outcome marker, keeps the data directory and leaves no
 * process behind (no broker, no agent worker); without --data it makes and
 * keeps a temporary directory under $TMPDIR; SIGINT in the middle stops it
 * (exit 130), its workers and its broker too; against an external broker
 * (--broker) with --json, stdout is JSON Lines only.
 *
 * Every wait is bounded: the demo's output is read with poll() against a
 * deadline, and a demo that does not exit in time is killed (a failure).
 */
#include "testutil.h"

#include "broker_proc.h"

#include <sys/stat.h>

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
        long left = deadline - ab__mono_ms();
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
        if (!eof || ab__mono_ms() > deadline) {
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

/* True when some process has @p dir and @p what among its arguments: the
 * broker (`broker ... --data DIR`) or an agent worker (`demo --agent-worker
 * K ... --data DIR`). */
static bool running_with(const char *dir, const char *what)
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
        cmd[n] = '\0';
        bool it = false, data = false;
        for (ssize_t i = 0; i < n; i += (ssize_t)strlen(cmd + i) + 1) {
            it |= strcmp(cmd + i, what) == 0;
            data |= strcmp(cmd + i, dir) == 0;
        }
        found = it && data;
    }
    closedir(proc);
    return found;
}

static bool broker_running(const char *dir)
{
    return running_with(dir, "broker");
}

/* True when process @p pid still runs an agent worker (not reused). */
static bool worker_alive(long pid)
{
    char path[64], cmd[4096];
    snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, cmd, sizeof(cmd) - 1);
    close(fd);
    for (ssize_t i = 0; i < n; i += (ssize_t)strlen(cmd + i) + 1)
        if (strcmp(cmd + i, "--agent-worker") == 0)
            return true;
    return false;
}

/* No broker and no agent worker of @p dir is left (nor a pid of @p pids). */
static void check_gone(const char *dir, const long *pids, int npids)
{
    long deadline = ab__mono_ms() + 5000; /* a zombie is reaped by its parent, at once */
    while ((broker_running(dir) || running_with(dir, "--agent-worker")) && ab__mono_ms() < deadline)
        poll(NULL, 0, 20);
    assert_false(broker_running(dir));
    assert_false(running_with(dir, "--agent-worker"));
    for (int i = 0; i < npids; i++)
        if (worker_alive(pids[i]))
            fail_msg("agent worker pid %ld is still running", pids[i]);
}

/* The pids of "agents: N processes (pids a b c)" in the summary; @return N. */
static int agent_pids(const demo_proc_t *d, long *pids, int max)
{
    const char *s = strstr(d->out, "\nagents: ");
    if (!s)
        fail_msg("no agents line in the summary:\n%s", d->out);
    int n = atoi(s + 9);
    s = strstr(s, "(pids");
    assert_non_null(s);
    s += 5;
    int got = 0;
    while (got < max && *s == ' ') {
        char *end;
        pids[got++] = strtol(s, &end, 10);
        s = end;
    }
    assert_int_equal(got, n);
    for (int i = 0; i < got; i++) {
        assert_true(pids[i] > 0 && pids[i] != (long)d->pid);
        for (int j = 0; j < i; j++)
            assert_true(pids[i] != pids[j]); /* one process per agent */
    }
    return n;
}

/* @p dir (and its broker log) exist after the demo. */
static void check_kept(const char *dir)
{
    struct stat st;
    char log[600];
    assert_int_equal(stat(dir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    snprintf(log, sizeof(log), "%s/broker.log", dir);
    assert_int_equal(stat(log, &st), 0);
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
    demo_wait(&d, ab__mono_ms() + DEMO_MS);
    if (d.status != 0)
        fail_msg("demo exit %d:\n%s", d.status, d.out);
    assert_non_null(strstr(d.out, "agentbus demo: OK:"));
    assert_non_null(strstr(d.out, "verified: 6 runs ok, 0 failed, 0 still active"));
    assert_non_null(strstr(d.out, "runs: 6 by 3 agents"));
    /* each agent process is also a worker: its status comes back through an action call */
    for (int a = 1; a <= 3; a++) {
        char line[64];
        snprintf(line, sizeof(line), "== agent-%d answers status through the bus (worker w-", a);
        assert_non_null(strstr(d.out, line));
    }
    assert_non_null(strstr(d.out, "actions: 3 of 3 agents answered status through the bus"));
    assert_non_null(strstr(d.out, "\"runs\":2,\"published\":"));
    assert_non_null(strstr(d.out, "run finished (success)"));
    assert_non_null(strstr(d.out, "run interrupted: tool_call - Deploy"));
    assert_non_null(strstr(d.out, "run cancelled"));
    assert_non_null(strstr(d.out, "RUN_ERROR: tracker returned 503"));
    assert_non_null(strstr(d.out, "tool web_search("));
    assert_null(strstr(d.out, "MISMATCH"));
    assert_null(strstr(d.out, "\033[")); /* --no-color */
    assert_non_null(strstr(d.out, "events/s)"));
    assert_non_null(strstr(d.out, "exit status 0 0 0\n"));
    /* the second act: runs dispatched through the bus, approved, cancelled, reassigned */
    assert_non_null(strstr(d.out, "run d1-approval ended interrupt"));
    assert_non_null(strstr(d.out, "approve: interrupt approve-d1-approval resolved"));
    assert_non_null(strstr(d.out, "run d2-resumed ended success"));
    assert_non_null(strstr(d.out, "cancel_run d3-long -> delivered to its worker"));
    assert_non_null(strstr(d.out, "run d3-long ended cancelled"));
    assert_non_null(strstr(d.out, "run d4-reassigned ended success (worker agentbus-demo-"));
    assert_non_null(strstr(d.out, ", attempt 2)"));
    assert_non_null(strstr(d.out, "verified: 4 runs ok, 0 failed, 0 still active"));
    const char *k = strstr(d.out, "killing it (pid ");
    assert_non_null(k);
    long killed = strtol(k + strlen("killing it (pid "), NULL, 10);
    assert_true(killed > 0);
    assert_int_equal(kill((pid_t)killed, 0), -1); /* reaped: no such process any more */
    char where[400];
    snprintf(where, sizeof(where), "\ndata: %s\n", dir);
    assert_non_null(strstr(d.out, where));
    long pids[8];
    assert_int_equal(agent_pids(&d, pids, 8), 3);
    check_gone(dir, pids, 3);
    check_kept(dir);
    bp_rm_tree(dir);
}

/* --secure: the whole demo with keys and an access file, and a refusal of each kind. */
static void test_demo_secure(void **state)
{
    (void)state;
    if (!bp_available())
        skip();
    char dir[] = "/tmp/agentbus-demosec-XXXXXX";
    assert_non_null(mkdtemp(dir));
    static demo_proc_t d;
    const char *args[] = {"--data", dir,          "--pace",   "0", "--runs",
                          "3",      "--no-color", "--secure", NULL};
    demo_spawn(&d, args, false);
    demo_wait(&d, ab__mono_ms() + DEMO_MS);
    if (d.status != 0)
        fail_msg("demo exit %d:\n%s", d.status, d.out);
    assert_non_null(strstr(d.out, "agentbus demo: OK:"));
    assert_non_null(strstr(d.out, "== secure: CURVE keys and an access file in "));
    assert_non_null(strstr(d.out, "== secure: the console's claim on demo-"));
    assert_non_null(strstr(d.out, "was refused: key 'console' may not claim runs"));
    assert_non_null(strstr(d.out, "== secure: a key the access file does not list got no answer"));
    assert_non_null(strstr(d.out, "== dispatch: OK:"));
    /* the broker ran with keys, and logged the stranger's refusal */
    char log[600], line[2048];
    snprintf(log, sizeof(log), "%s/broker.log", dir);
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    bool curve = false, refused = false;
    while (fgets(line, sizeof(line), f)) {
        curve |= strstr(line, "keys: CURVE on") != NULL;
        refused |= strstr(line, "refused a connection from 127.0.0.1: unknown key") != NULL;
    }
    fclose(f);
    assert_true(curve);
    assert_true(refused);
    long pids[8];
    assert_int_equal(agent_pids(&d, pids, 8), 3);
    check_gone(dir, pids, 3);
    bp_rm_tree(dir);
}

/* No --data: a new temporary directory under $TMPDIR, named and kept. */
static void test_demo_temp_dir(void **state)
{
    (void)state;
    if (!bp_available())
        skip();
    char tmp[] = "/tmp/agentbus-demotmp-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    static demo_proc_t d;
    const char *args[] = {"--pace", "0", "--agents", "2", "--no-color", NULL};
    const char *old = getenv("TMPDIR");
    char saved[512] = "";
    if (old)
        snprintf(saved, sizeof(saved), "%s", old);
    setenv("TMPDIR", tmp, 1);
    demo_spawn(&d, args, false);
    if (old)
        setenv("TMPDIR", saved, 1);
    else
        unsetenv("TMPDIR");
    demo_wait(&d, ab__mono_ms() + DEMO_MS);
    if (d.status != 0)
        fail_msg("demo exit %d:\n%s", d.status, d.out);
    char want[400], dir[400];
    snprintf(want, sizeof(want), "\ndata: %s/agentbus-demo-", tmp);
    const char *s = strstr(d.out, want);
    if (!s)
        fail_msg("no temporary data directory under %s in the summary:\n%s", tmp, d.out);
    s += 7;
    size_t n = strcspn(s, " \n");
    assert_true(n < sizeof(dir));
    memcpy(dir, s, n);
    dir[n] = '\0';
    assert_non_null(strstr(s, "(a temporary directory, kept"));
    long pids[8];
    assert_int_equal(agent_pids(&d, pids, 8), 2);
    check_gone(dir, pids, 2);
    check_kept(dir);
    bp_rm_tree(tmp);
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
    long deadline = ab__mono_ms() + DEMO_MS;
    if (!demo_read(&d, "run started", deadline))
        fail_msg("no run started:\n%s", d.out);
    assert_true(broker_running(dir));
    assert_true(running_with(dir, "--agent-worker"));
    kill(d.pid, SIGINT); /* the demo only: it stops its workers itself */
    demo_wait(&d, deadline);
    if (d.status != 130)
        fail_msg("demo exit %d after SIGINT:\n%s", d.status, d.out);
    assert_non_null(strstr(d.out, "agentbus demo: interrupted"));
    long pids[8];
    assert_int_equal(agent_pids(&d, pids, 8), 3);
    check_gone(dir, pids, 3);
    check_kept(dir);
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
    demo_wait(&d, ab__mono_ms() + DEMO_MS);
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
        cmocka_unit_test(test_demo_own_broker),    cmocka_unit_test(test_demo_temp_dir),
        cmocka_unit_test(test_demo_secure),        cmocka_unit_test(test_demo_sigint),
        cmocka_unit_test(test_demo_external_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

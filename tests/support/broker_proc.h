/*
 * broker_proc.h - run `agentbus broker` as a child process for integration
 * tests (header-only: every function is static).
 *
 * bp_start() makes (or reuses) a data directory, forks/execs
 *   AB_AGENTBUS_BIN broker --data D --cmd tcp://127.0.0.1:* --events tcp://127.0.0.1:* [extra]
 * with stdout on a pipe, and waits at most BP_READY_MS for the one ready line
 *   agentbus broker ready cmd=<ep> events=<ep> data=<dir> instance=<id>
 * whose endpoints it keeps. bp_stop() sends SIGTERM and reaps within
 * BP_STOP_MS (else SIGKILL and a failure); bp_kill() sends SIGKILL and reaps;
 * bp_restart() starts again on the same directory; bp_cleanup() stops what
 * still runs and removes a directory it created. Every wait is bounded.
 *
 * bp_available() tells whether the binary has a `broker` command at all, so
 * tests can skip (not pass) while the broker is not built in.
 *
 * AB_TEST_BROKER_BIN in the environment names another agentbus binary for
 * the broker children (for instance a Release build, to read the memory
 * figures of a test without the sanitizers' overhead).
 *
 * Thread-safety: one bp_t per thread.
 */
#ifndef AB_TESTS_BROKER_PROC_H
#define AB_TESTS_BROKER_PROC_H

#include "ab_common.h" /* ab__mono_ms() */

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BP_READY_MS 10000
#define BP_STOP_MS  10000
#define BP_MAX_ARGS 16

typedef struct bp {
    pid_t pid;     /* 0 when not running */
    int out_fd;    /* read end of the child's stdout */
    int status;    /* wait status of the last exit */
    bool own_dir;  /* the directory was made by bp_start() */
    char dir[256]; /* data directory */
    char cmd[128]; /* command endpoint */
    char events[128];
    char instance[128];
    char line[1024]; /* what the child printed before being ready (diagnostics) */
    const char *extra[BP_MAX_ARGS];
    int nextra;
    char log[300]; /* when set before bp_start(): the child's stderr is appended there */
} bp_t;

/* The binary the broker children run: AB_TEST_BROKER_BIN, else the build's. */
static inline const char *bp_bin(void)
{
    const char *b = getenv("AB_TEST_BROKER_BIN");
    return b && *b ? b : AB_AGENTBUS_BIN;
}

/* True when `agentbus --help` lists a broker command. */
static inline bool bp_available(void)
{
    FILE *p = popen(AB_AGENTBUS_BIN " --help 2>&1", "r");
    if (!p)
        return false;
    char buf[256];
    bool found = false;
    while (fgets(buf, sizeof(buf), p))
        if (strncmp(buf, "  broker ", 9) == 0)
            found = true;
    pclose(p);
    return found;
}

/* Remove @p path and everything under it (no symlinks followed). */
static inline void bp_rm_tree(const char *path)
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
                bp_rm_tree(sub);
            else
                unlink(sub);
            free(sub);
        }
        closedir(d);
    }
    rmdir(path);
}

/* Read the ready line; 0 on success, -1 on timeout/EOF. */
static inline int bp_read_ready(bp_t *b)
{
    size_t used = 0;
    long deadline = ab__mono_ms() + BP_READY_MS;
    b->line[0] = '\0';
    for (;;) {
        char *nl = memchr(b->line, '\n', used);
        if (nl) {
            *nl = '\0';
            char *s = strstr(b->line, "agentbus broker ready ");
            if (s &&
                sscanf(s, "agentbus broker ready cmd=%127s events=%127s", b->cmd, b->events) == 2) {
                char *in = strstr(s, "instance=");
                snprintf(b->instance, sizeof(b->instance), "%s", in ? in + 9 : "");
                return 0;
            }
            size_t rest = used - (size_t)(nl + 1 - b->line);
            memmove(b->line, nl + 1, rest);
            used = rest;
            continue;
        }
        long left = deadline - ab__mono_ms();
        struct pollfd pfd = {.fd = b->out_fd, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            return -1;
        if (used + 1 >= sizeof(b->line))
            used = 0;
        ssize_t n = read(b->out_fd, b->line + used, sizeof(b->line) - 1 - used);
        if (n <= 0)
            return -1;
        used += (size_t)n;
        b->line[used] = '\0';
    }
}

/* Fork/exec the broker on b->dir; returns 0 when ready, -1 otherwise (the
 * child is then killed and reaped). */
static inline int bp_spawn(bp_t *b)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        int lfd = b->log[0] ? open(b->log, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;
        if (lfd >= 0) {
            dup2(lfd, STDERR_FILENO);
            close(lfd);
        }
        close(fds[0]);
        close(fds[1]);
        const char *argv[8 + BP_MAX_ARGS + 1];
        int n = 0;
        argv[n++] = bp_bin();
        argv[n++] = "broker";
        argv[n++] = "--data";
        argv[n++] = b->dir;
        argv[n++] = "--cmd";
        argv[n++] = "tcp://127.0.0.1:*";
        argv[n++] = "--events";
        argv[n++] = "tcp://127.0.0.1:*";
        for (int i = 0; i < b->nextra; i++)
            argv[n++] = b->extra[i];
        argv[n] = NULL;
        execv(bp_bin(), (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    close(fds[1]);
    b->pid = pid;
    b->out_fd = fds[0];
    if (bp_read_ready(b) != 0) {
        fprintf(stderr, "broker_proc: no ready line within %d ms (last output: %s)\n", BP_READY_MS,
                b->line);
        kill(pid, SIGKILL);
        waitpid(pid, &b->status, 0);
        close(b->out_fd);
        b->pid = 0;
        return -1;
    }
    return 0;
}

/* Start a broker; @p dir NULL makes a temp dir. Extra args (NULL-terminated
 * array, may be NULL) are kept for restarts. Returns 0 when ready. */
static inline int bp_start(bp_t *b, const char *dir, const char *const *extra)
{
    char log[sizeof(b->log)];
    memcpy(log, b->log, sizeof(log));
    memset(b, 0, sizeof(*b));
    memcpy(b->log, log, sizeof(log));
    b->out_fd = -1;
    if (dir) {
        if (strlen(dir) >= sizeof(b->dir))
            return -1; /* a path we would have to cut */
        memcpy(b->dir, dir, strlen(dir) + 1);
    } else {
        snprintf(b->dir, sizeof(b->dir), "/tmp/agentbus-it-XXXXXX");
        if (!mkdtemp(b->dir))
            return -1;
        b->own_dir = true;
    }
    for (int i = 0; extra && extra[i] && i < BP_MAX_ARGS; i++)
        b->extra[b->nextra++] = extra[i];
    return bp_spawn(b);
}

/*
 * Wait until the broker's stderr log (b->log) holds @p count lines containing
 * @p needle, polling the file for at most @p ms. @return the count found
 * (>= count on success, less on timeout).
 */
static inline int bp_wait_log(const bp_t *b, const char *needle, int count, long ms)
{
    long deadline = ab__mono_ms() + ms;
    int found = 0;
    for (;;) {
        found = 0;
        FILE *f = fopen(b->log, "r");
        char line[2048];
        while (f && fgets(line, sizeof(line), f))
            found += strstr(line, needle) != NULL;
        if (f)
            fclose(f);
        if (found >= count || ab__mono_ms() >= deadline)
            return found;
        poll(NULL, 0, 20);
    }
}

/* Wait for the child with a bound; returns 0 when reaped. */
static inline int bp_reap(bp_t *b, long ms)
{
    long deadline = ab__mono_ms() + ms;
    for (;;) {
        pid_t r = waitpid(b->pid, &b->status, WNOHANG);
        if (r == b->pid || (r < 0 && errno == ECHILD)) {
            b->pid = 0;
            if (b->out_fd >= 0)
                close(b->out_fd);
            b->out_fd = -1;
            return 0;
        }
        if (ab__mono_ms() >= deadline)
            return -1;
        /* bounded wait on the pipe (EOF when the child exits), draining it */
        struct pollfd pfd = {.fd = b->out_fd, .events = POLLIN};
        char sink[256];
        if (poll(&pfd, b->out_fd >= 0 ? 1 : 0, 10) > 0 &&
            read(b->out_fd, sink, sizeof(sink)) <= 0) {
            close(b->out_fd);
            b->out_fd = -1;
        }
    }
}

/* SIGTERM and reap within BP_STOP_MS; returns the exit status, or -1 when it
 * had to be killed (or did not exit normally). */
static inline int bp_stop(bp_t *b)
{
    if (b->pid <= 0)
        return -1;
    kill(b->pid, SIGTERM);
    if (bp_reap(b, BP_STOP_MS) != 0) {
        kill(b->pid, SIGKILL);
        bp_reap(b, BP_STOP_MS);
        return -1;
    }
    return WIFEXITED(b->status) ? WEXITSTATUS(b->status) : -1;
}

/* SIGKILL and reap. */
static inline void bp_kill(bp_t *b)
{
    if (b->pid <= 0)
        return;
    kill(b->pid, SIGKILL);
    bp_reap(b, BP_STOP_MS);
}

/* Start again on the same directory with the same extra args. */
static inline int bp_restart(bp_t *b)
{
    b->cmd[0] = b->events[0] = b->instance[0] = '\0';
    return bp_spawn(b);
}

/* Stop anything still running (SIGKILL) and remove a directory we made. */
static inline void bp_cleanup(bp_t *b)
{
    bp_kill(b);
    if (b->own_dir && b->dir[0])
        bp_rm_tree(b->dir);
    b->dir[0] = '\0';
}

/* Run a second broker on @p dir in the foreground and capture its exit
 * status and stderr (into @p err, @p size bytes). Returns the exit status,
 * or -1 when it did not exit within BP_STOP_MS (it is then killed). */
static inline int bp_run_second(const char *dir, char *err, size_t size)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "timeout -s KILL %d %s broker --data '%s' --cmd 'tcp://127.0.0.1:*' "
             "--events 'tcp://127.0.0.1:*' 2>&1 >/dev/null",
             BP_STOP_MS / 1000, AB_AGENTBUS_BIN, dir);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(err, 1, size - 1, p);
    err[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- client-side helpers shared by tests/integration ------------------ */

/* Whether @p port can be bound on 127.0.0.1 now. */
static inline bool bp_port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/*
 * A free TCP port on 127.0.0.1 for a listener the test binds later (-1 on failure). Taken
 * from 20000-32767, below Linux's default range of ephemeral ports (32768-60999): a port
 * the kernel handed out and the test released could become the local port of another
 * test's outgoing connection before the broker binds it (seen in CI as "Address already
 * in use"); ports outside that range are only ever taken by another listener.
 */
static inline int bp_free_port(void)
{
    static _Thread_local unsigned seed;
    if (seed == 0)
        seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
    for (int i = 0; i < 200; i++) {
        seed = seed * 1103515245u + 12345u;
        int port = 20000 + (int)((seed >> 8) % 12768u);
        if (bp_port_free(port))
            return port;
    }
    return -1;
}

/*
 * Broker arguments for fixed loopback ports, so a restarted broker is where
 * clients reconnect (these --cmd/--events come after broker_proc's ephemeral
 * ones and win). Fills @p cmd and @p ev (64 bytes each, kept by the caller
 * for the test's life) and the NULL-terminated @p extra[5].
 */
static inline void bp_fixed_ports(char *cmd, char *ev, const char *extra[5])
{
    snprintf(cmd, 64, "tcp://127.0.0.1:%d", bp_free_port());
    snprintf(ev, 64, "tcp://127.0.0.1:%d", bp_free_port());
    extra[0] = "--cmd";
    extra[1] = cmd;
    extra[2] = "--events";
    extra[3] = ev;
    extra[4] = NULL;
}

#include "agentbus/client.h"

#define IT_TIMEOUT 5000

/* Per-test state: the broker and whether the binary has one at all. */
typedef struct it {
    bp_t bp;
    bool available;
    ab_doc_t *doc;
} it_t;

/* cmocka setup: start a broker with @p extra args, its log also written to the file @p log
 * when not NULL (for bp_wait_log; removed first), or note it is not built. */
static inline int it_setup_log(void **state, const char *const *extra, const char *log)
{
    it_t *t = calloc(1, sizeof(*t));
    *state = t;
    if (!t || ab_doc_new(&t->doc) != AB_OK)
        return -1;
    t->available = bp_available();
    if (!t->available)
        return 0;
    if (log != NULL) {
        snprintf(t->bp.log, sizeof t->bp.log, "%s", log);
        unlink(t->bp.log);
    }
    return bp_start(&t->bp, NULL, extra);
}

/* cmocka setup: start a broker with @p extra args, or note it is not built. */
static inline int it_setup_with(void **state, const char *const *extra)
{
    return it_setup_log(state, extra, NULL);
}

static inline int it_setup(void **state)
{
    return it_setup_with(state, NULL);
}

static inline int it_teardown(void **state)
{
    it_t *t = *state;
    if (!t)
        return 0;
    bp_cleanup(&t->bp);
    ab_doc_destroy(&t->doc);
    free(t);
    return 0;
}

/* Skip (not pass) while the agentbus binary has no broker command. */
#define IT_REQUIRE_BROKER(t)                                                                       \
    do {                                                                                           \
        if (!(t)->available) {                                                                     \
            print_message("agentbus has no broker command yet: skipped\n");                        \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* Connect to the broker's command endpoint; fails the test on error. */
static inline ab_conn_t *it_connect(const bp_t *b)
{
    ab_conn_opts_t o = {.client_name = "agentbus-it", .timeout_ms = IT_TIMEOUT};
    ab_conn_t *c = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_new(&c, b->cmd, &o, &err) != AB_OK)
        fail_msg("connect %s: %s: %s", b->cmd, ab_status_name(err.code), err.message);
    return c;
}

/* JSON body of event @p seq of a run of @p n events (n == 0: never ends), its one text
 * message @p msg: RUN_STARTED, TEXT_MESSAGE_START, CONTENT... (its delta the seq and @p pad
 * bytes), TEXT_MESSAGE_END, RUN_FINISHED. */
static inline void it_body_msg(char *buf, size_t size, const char *thread, const char *run,
                               const char *msg, uint64_t seq, uint64_t n, size_t pad)
{
    if (seq == 1)
        snprintf(buf, size,
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                 "\"protocolVersion\":\"1.0\"}",
                 thread, run);
    else if (seq == 2)
        snprintf(buf, size, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"%s\"}", msg);
    else if (n && seq == n - 1)
        snprintf(buf, size, "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"%s\"}", msg);
    else if (n && seq == n)
        snprintf(buf, size, "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\"}",
                 thread, run);
    else {
        int k = snprintf(
            buf, size, "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"%s\",\"delta\":\"%llu ",
            msg, (unsigned long long)seq);
        size_t i = (size_t)k;
        for (; i < (size_t)k + pad && i + 3 < size; i++)
            buf[i] = 'x';
        snprintf(buf + i, size - i, "\"}");
    }
}

/* it_body_msg() with the message "m". */
static inline void it_body(char *buf, size_t size, const char *thread, const char *run,
                           uint64_t seq, uint64_t n, size_t pad)
{
    it_body_msg(buf, size, thread, run, "m", seq, n, pad);
}

/* Envelope of event @p seq of run (thread, run) of @p n events. */
static inline void it_event(ab_buf_t *out, const char *thread, const char *run, uint64_t seq,
                            uint64_t n, uint64_t epoch)
{
    char body[1024];
    it_body(body, sizeof(body), thread, run, seq, n, 0);
    ab_error_t err = AB_ERROR_INIT;
    if (ab_envelope_json(out, 1, thread, run, seq, epoch, body, &err) != AB_OK)
        fail_msg("envelope: %s", err.message);
}

/* Envelope with a raw JSON body. */
static inline void it_event_json(ab_buf_t *out, const char *thread, const char *run, uint64_t seq,
                                 uint64_t epoch, const char *json)
{
    ab_error_t err = AB_ERROR_INIT;
    if (ab_envelope_json(out, 1, thread, run, seq, epoch, json, &err) != AB_OK)
        fail_msg("envelope: %s", err.message);
}

/* Send a publish of @p n envelopes without waiting for it; @return its cid. */
static inline uint64_t it_send_publish(ab_conn_t *c, const ab_buf_t *evs, size_t n)
{
    ab_msg_t m = {.op = AB_OP_PUBLISH};
    m.u.publish.count = (uint32_t)n;
    uint64_t cid = 0;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_send(c, &m, evs, n, &cid, &err) != AB_OK)
        fail_msg("send publish: %s", err.message);
    return cid;
}

/* The head of one run through `heads` (views into @p doc); fails the test on error. */
static inline ab_head_t it_head(ab_conn_t *c, ab_doc_t *doc, const char *thread, const char *run)
{
    ab_run_ref_t ref = {{thread, strlen(thread)}, {run, strlen(run)}};
    ab_heads_t q = {.runs = &ref, .nruns = 1};
    ab_heads_reply_t hr;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_heads(c, &q, doc, &hr, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("heads: %s: %s", ab_status_name(err.code), err.message);
    assert_int_equal(hr.nheads, 1);
    return hr.heads[0];
}

/* Publish one envelope; returns its result (copied) and fails the test on a
 * request-level error. */
static inline ab_result_t it_publish1(ab_conn_t *c, ab_doc_t *doc, const ab_buf_t *ev,
                                      ab_error_t *rej)
{
    const ab_result_t *res = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_publish(c, ev, 1, doc, &res, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("publish: %s: %s", ab_status_name(err.code), err.message);
    ab_result_t r = res[0];
    if (rej) {
        ab_error_clear(rej);
        if (r.error)
            *rej = *r.error;
    }
    r.error = NULL;
    return r;
}

#endif

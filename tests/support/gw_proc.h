/*
 * gw_proc.h - run `agentbus gateway` as a child process for integration
 * tests and talk HTTP to it (header-only: every function is static).
 *
 * gw_start() forks/execs AB_AGENTBUS_BIN gateway --broker EP --listen
 * 127.0.0.1:0 [extra] and waits (bounded) for its ready line
 *   agentbus gateway ready http=http://127.0.0.1:PORT broker=EP
 * whose port it keeps; gw_stop() sends SIGTERM and reaps (bounded, else
 * SIGKILL and a failure). The HTTP side speaks HTTP/1.0 (one request per
 * connection, the answer ends when the gateway closes), so no chunked
 * decoding is needed: gw_http() for whole answers, gw_sse_*() for streams.
 */
#ifndef AB_TESTS_GW_PROC_H
#define AB_TESTS_GW_PROC_H

#include "agentbus/producer.h"
#include "broker_proc.h"

#define GW_MAX_ARGS 16

typedef struct gwp {
    pid_t pid;
    int out_fd;
    unsigned port;
    char line[512];
} gwp_t;

/* Read the ready line; 0 when it came. */
static inline int gw_read_ready(gwp_t *g)
{
    size_t used = 0;
    long deadline = ab__mono_ms() + BP_READY_MS;
    while (ab__mono_ms() < deadline && used + 1 < sizeof g->line) {
        struct pollfd p = {.fd = g->out_fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = read(g->out_fd, g->line + used, sizeof g->line - 1 - used);
        if (n <= 0)
            return -1;
        used += (size_t)n;
        g->line[used] = '\0';
        const char *s = strstr(g->line, "ready http=http://127.0.0.1:");
        if (s && strchr(s, '\n') && sscanf(s, "ready http=http://127.0.0.1:%u", &g->port) == 1)
            return 0;
    }
    return -1;
}

/* Start a gateway on broker @p cmd with the extra arguments (NULL-terminated, may be NULL). */
static inline int gw_start(gwp_t *g, const char *cmd, const char *const *extra)
{
    int fds[2];
    memset(g, 0, sizeof *g);
    if (pipe(fds) != 0)
        return -1;
    g->pid = fork();
    if (g->pid < 0)
        return -1;
    if (g->pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        const char *argv[8 + GW_MAX_ARGS] = {AB_AGENTBUS_BIN, "gateway",    "--broker", cmd,
                                             "--listen",      "127.0.0.1:0"};
        int n = 6;
        for (int i = 0; extra && extra[i] && i < GW_MAX_ARGS; i++)
            argv[n++] = extra[i];
        argv[n] = NULL;
        execv(AB_AGENTBUS_BIN, (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    close(fds[1]);
    g->out_fd = fds[0];
    if (gw_read_ready(g) != 0) {
        fprintf(stderr, "gw_proc: no ready line (output: %s)\n", g->line);
        kill(g->pid, SIGKILL);
        waitpid(g->pid, NULL, 0);
        close(g->out_fd);
        g->pid = 0;
        return -1;
    }
    return 0;
}

/* SIGTERM (or SIGKILL when @p hard) and reap within BP_STOP_MS; 0 when it exited 0. */
static inline int gw_stop(gwp_t *g, bool hard)
{
    if (g->pid <= 0)
        return 0;
    kill(g->pid, hard ? SIGKILL : SIGTERM);
    int st = 0;
    long deadline = ab__mono_ms() + BP_STOP_MS;
    pid_t r = 0;
    while ((r = waitpid(g->pid, &st, WNOHANG)) == 0 && ab__mono_ms() < deadline)
        poll(NULL, 0, 10);
    if (r == 0) {
        kill(g->pid, SIGKILL);
        waitpid(g->pid, &st, 0);
    }
    close(g->out_fd);
    g->pid = 0;
    return r != 0 && (hard || (WIFEXITED(st) && WEXITSTATUS(st) == 0)) ? 0 : -1;
}

/* A connected socket to the gateway (@p rcvbuf > 0: SO_RCVBUF before connecting). */
static inline int gw_connect(const gwp_t *g, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static inline bool gw_write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Send "METHOD PATH HTTP/1.0" with @p headers (each "Name: value\r\n", may be "") and body. */
static inline int gw_send(const gwp_t *g, const char *method, const char *path, const char *headers,
                          const char *body, size_t blen, int rcvbuf)
{
    int fd = gw_connect(g, rcvbuf);
    if (fd < 0)
        return -1;
    char head[4096];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n%sContent-Length: %zu\r\n\r\n", method,
                     path, headers ? headers : "", body ? blen : 0);
    if (!gw_write_all(fd, head, (size_t)n) || (body && !gw_write_all(fd, body, blen))) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A whole answer within @p timeout_ms: its status (-1: none), its body (NUL-terminated, at most
 * cap-1 bytes kept). */
static inline int gw_http_within(const gwp_t *g, const char *method, const char *path,
                                 const char *headers, const char *body, char *out, size_t cap,
                                 long timeout_ms)
{
    int fd = gw_send(g, method, path, headers, body, body ? strlen(body) : 0, 0);
    if (fd < 0)
        return -1;
    size_t used = 0;
    long deadline = ab__mono_ms() + timeout_ms;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (ab__mono_ms() > deadline || poll(&p, 1, 100) < 0)
            break;
        if (!(p.revents & (POLLIN | POLLHUP)))
            continue;
        char tmp[8192];
        ssize_t r = read(fd, tmp, sizeof tmp);
        if (r <= 0)
            break;
        size_t take = (size_t)r < cap - 1 - used ? (size_t)r : cap - 1 - used;
        memcpy(out + used, tmp, take);
        used += take;
    }
    close(fd);
    out[used] = '\0';
    int status = -1;
    if (sscanf(out, "HTTP/1.%*d %d", &status) != 1)
        return -1;
    char *b = strstr(out, "\r\n\r\n");
    if (b)
        memmove(out, b + 4, strlen(b + 4) + 1);
    return status;
}

/* gw_http_within() IT_TIMEOUT. */
static inline int gw_http(const gwp_t *g, const char *method, const char *path, const char *headers,
                          const char *body, char *out, size_t cap)
{
    return gw_http_within(g, method, path, headers, body, out, cap, IT_TIMEOUT);
}

/* ---- SSE -------------------------------------------------------------------- */

typedef struct gw_sse {
    int fd;
    char buf[1 << 16];
    size_t used;
    bool headers_done;
    int status;
} gw_sse_t;

typedef struct gw_ev {
    uint64_t id; /* 0: none */
    char event[32];
    char data[16384];
} gw_ev_t;

/* Open a stream; 0 when the gateway answered 200 text/event-stream. */
static inline int gw_sse_open(gw_sse_t *s, const gwp_t *g, const char *method, const char *path,
                              const char *headers, const char *body, int rcvbuf)
{
    memset(s, 0, sizeof *s);
    s->fd = gw_send(g, method, path, headers, body, body ? strlen(body) : 0, rcvbuf);
    return s->fd < 0 ? -1 : 0;
}

static inline void gw_sse_close(gw_sse_t *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}

/* Take one frame "....\n\n" from the buffer into @p e; true when one was there. */
static inline bool gw_sse_take(gw_sse_t *s, gw_ev_t *e)
{
    for (;;) {
        s->buf[s->used] = '\0';
        if (!s->headers_done) {
            char *h = strstr(s->buf, "\r\n\r\n");
            if (!h)
                return false;
            sscanf(s->buf, "HTTP/1.%*d %d", &s->status);
            size_t skip = (size_t)(h + 4 - s->buf);
            memmove(s->buf, h + 4, s->used - skip);
            s->used -= skip;
            s->headers_done = true;
            continue;
        }
        char *end = strstr(s->buf, "\n\n");
        if (!end)
            return false;
        *end = '\0';
        memset(e, 0, sizeof *e);
        for (char *line = s->buf; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl)
                *nl = '\0';
            if (strncmp(line, "id: ", 4) == 0)
                e->id = strtoull(line + 4, NULL, 10);
            else if (strncmp(line, "event: ", 7) == 0)
                snprintf(e->event, sizeof e->event, "%s", line + 7);
            else if (strncmp(line, "data: ", 6) == 0)
                snprintf(e->data, sizeof e->data, "%s", line + 6);
            line = nl ? nl + 1 : NULL;
        }
        size_t skip = (size_t)(end + 2 - s->buf);
        memmove(s->buf, end + 2, s->used - skip);
        s->used -= skip;
        if (e->data[0] == '\0' && e->event[0] == '\0')
            continue; /* a comment (": hb") */
        return true;
    }
}

/*
 * The next event (comments skipped) within @p ms: 1 = one in @p e, 0 = the
 * stream ended (EOF), -1 = the time passed.
 */
static inline int gw_sse_next(gw_sse_t *s, gw_ev_t *e, long ms)
{
    long deadline = ab__mono_ms() + ms;
    for (;;) {
        if (gw_sse_take(s, e))
            return 1;
        long left = deadline - ab__mono_ms();
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        if (left <= 0)
            return -1;
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        if (s->used + 1 >= sizeof s->buf)
            return -1; /* one frame larger than the buffer: a test bug */
        ssize_t r = read(s->fd, s->buf + s->used, sizeof s->buf - 1 - s->used);
        if (r <= 0)
            return 0;
        s->used += (size_t)r;
    }
}

/* Wait (bounded) for the answer's status line and headers: the gateway has made the stream
 * (for POST /agents: the run is accepted). @return the HTTP status, or -1. */
static inline int gw_sse_status(gw_sse_t *s, long ms)
{
    long deadline = ab__mono_ms() + ms;
    while (!s->headers_done && ab__mono_ms() < deadline) {
        s->buf[s->used] = '\0';
        char *h = strstr(s->buf, "\r\n\r\n");
        if (h) {
            sscanf(s->buf, "HTTP/1.%*d %d", &s->status);
            size_t skip = (size_t)(h + 4 - s->buf);
            memmove(s->buf, h + 4, s->used - skip);
            s->used -= skip;
            s->headers_done = true;
            break;
        }
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        ssize_t r = read(s->fd, s->buf + s->used, sizeof s->buf - 1 - s->used);
        if (r <= 0)
            break;
        s->used += (size_t)r;
    }
    return s->headers_done ? s->status : -1;
}

/* Read on while each event is the one after *@p last (asserted: a bus of one run numbers its
 * events without gaps) and fewer than @p n were counted in *@p count. @return gw_sse_next()'s
 * last answer: 0 when the gateway ended the stream, 1 when @p n were read. */
static inline int gw_sse_read_on(gw_sse_t *s, uint64_t *last, uint64_t *count, uint64_t n)
{
    gw_ev_t e; /* 16 KiB on the stack: callable from any thread */
    int rc = 1;
    while (*count < n && (rc = gw_sse_next(s, &e, IT_TIMEOUT)) == 1) {
        assert_int_equal(e.id, *last + 1);
        *last = e.id;
        (*count)++;
    }
    return rc;
}

/* Open @p path again as a client resumes (Last-Event-ID: *@p last), read on towards @p n
 * (gw_sse_read_on), close. */
static inline void gw_sse_resume(const gwp_t *g, const char *path, uint64_t *last, uint64_t *count,
                                 uint64_t n)
{
    gw_sse_t s;
    char hdr[64];
    snprintf(hdr, sizeof hdr, "Last-Event-ID: %llu\r\n", (unsigned long long)*last);
    assert_int_equal(gw_sse_open(&s, g, "GET", path, hdr, NULL, 0), 0);
    gw_sse_read_on(&s, last, count, n);
    gw_sse_close(&s);
}

/* Publish @p n events of run (t, r) padded by @p pad bytes (it_body), with a producer of its
 * own on the broker at @p cmd. */
static inline void gw_publish_run(const char *cmd, const char *t, const char *r, uint64_t n,
                                  size_t pad)
{
    ab_producer_t *p = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_producer_opts_t po = {.timeout_ms = IT_TIMEOUT};
    assert_int_equal(ab_producer_new(&p, cmd, &po, &err), AB_OK);
    assert_int_equal(ab_producer_claim(p, t, r, NULL, &err), AB_OK);
    static char ev[12000];
    for (uint64_t seq = 1; seq <= n; seq++) {
        it_body(ev, sizeof ev, t, r, seq, n, pad);
        if (ab_producer_publish_json(p, ev, strlen(ev), &err) != AB_OK)
            fail_msg("publish %llu: %s", (unsigned long long)seq, err.message);
    }
    assert_int_equal(ab_producer_flush(p, 30000, &err), AB_OK);
    ab_producer_destroy(&p);
}

#endif /* AB_TESTS_GW_PROC_H */

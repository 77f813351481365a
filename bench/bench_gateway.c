/*
 * bench_gateway.c - `agentbus bench gateway`: the HTTP gateway's event
 * streams (docs/PERFORMANCE.md, "HTTP gateway"), each row beside the
 * ZeroMQ subscriber of the client library measured in the same run:
 *  - events/s delivered to 1 and to 100 SSE clients of one thread while one
 *    producer publishes N events as fast as it can (every client must get
 *    all N, in order), beside 1 and 100 ab_sub_t subscribers of that thread;
 *  - publish -> delivery latency p50/p99 at 500 events/s, an SSE client and
 *    a subscriber on the same events.
 * The broker and the gateway are child processes (the gateway is this
 * binary's `gateway` command); the clients are threads of this process that
 * read the HTTP stream from a plain socket.
 *
 * Invariants:
 *  1. Every wait is bounded (ready lines, deliveries, joins).
 *  2. A row fails unless each client counted exactly the events published.
 */
#include "ab_common.h"
#include "agentbus/producer.h"
#include "agentbus/subscriber.h"
#include "bench.h"
#include "bench_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define GW_CLIENTS_MAX 100
#define GW_EVENTS      20000 /* per throughput row */
#define GW_LAT_EVENTS  2500  /* per latency row, at GW_LAT_RATE */
#define GW_LAT_RATE    500.0
#define GW_WAIT_S      60.0

/* ---- the gateway child ----------------------------------------------------------- */

typedef struct gwchild {
    pid_t pid;
    unsigned port;
} gwchild_t;

static int gw_child_start(gwchild_t *g, const char *broker)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    g->pid = fork();
    if (g->pid < 0)
        return -1;
    if (g->pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execl("/proc/self/exe", "agentbus", "gateway", "--broker", broker, "--listen",
              "127.0.0.1:0", "--max-streams", "1000", "--max-conns", "1000", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char line[512] = "";
    size_t used = 0;
    long deadline = ab__mono_ms() + 10000;
    while (ab__mono_ms() < deadline && used + 1 < sizeof line) {
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = read(fds[0], line + used, sizeof line - 1 - used);
        if (n <= 0)
            break;
        used += (size_t)n;
        line[used] = '\0';
        const char *s = strstr(line, "http=http://127.0.0.1:");
        if (s && strchr(s, '\n') && sscanf(s, "http=http://127.0.0.1:%u", &g->port) == 1) {
            close(fds[0]);
            return 0;
        }
    }
    close(fds[0]);
    kill(g->pid, SIGKILL);
    waitpid(g->pid, NULL, 0);
    g->pid = 0;
    return -1;
}

static void gw_child_stop(gwchild_t *g)
{
    if (g->pid > 0) {
        kill(g->pid, SIGTERM);
        waitpid(g->pid, NULL, 0);
    }
    g->pid = 0;
}

/* ---- clients -------------------------------------------------------------------------- */

typedef struct client {
    pthread_t th;
    unsigned port;
    const char *thread;
    ab_sub_t *sub;      /* a ZeroMQ subscriber instead of an SSE client */
    atomic_int *stop;   /* set when the row is over */
    atomic_int ready;   /* the stream answered (SSE) / the subscriber made (sub) */
    _Atomic uint64_t n; /* events received */
    uint64_t want;
    bool bad_order;
    double *lat;         /* receive time of event k (ab__mono_s()), NULL = not kept */
    uint64_t last_delta; /* the k of the last event: order check */
} client_t;

static int sse_connect(unsigned port, const char *thread)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[512];
    int n = snprintf(req, sizeof req, "GET /threads/%s/events HTTP/1.0\r\nHost: x\r\n\r\n", thread);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One event's k ("delta":"kN") at @p p; counts and checks it. */
static void got_event(client_t *c, const char *p)
{
    uint64_t k = strtoull(p, NULL, 10);
    if (k != c->last_delta + 1)
        c->bad_order = true;
    c->last_delta = k;
    if (c->lat && k >= 1 && k <= c->want)
        c->lat[k - 1] = ab__mono_s();
    atomic_fetch_add_explicit(&c->n, 1, memory_order_relaxed);
}

/* Scan whole lines of [buf, buf+len) for "data: " frames; @return bytes consumed. */
static size_t scan(client_t *c, const char *buf, size_t len)
{
    size_t done = 0;
    for (;;) {
        const char *nl = memchr(buf + done, '\n', len - done);
        if (!nl)
            return done;
        const char *line = buf + done;
        size_t ll = (size_t)(nl - line);
        if (ll > 6 && memcmp(line, "data: ", 6) == 0) {
            static const char key[] = "\"delta\":\"k";
            for (size_t i = 6; i + sizeof key - 1 < ll; i++)
                if (memcmp(line + i, key, sizeof key - 1) == 0) {
                    got_event(c, line + i + sizeof key - 1);
                    break;
                }
        } else if (ll >= 9 && memcmp(line, "HTTP/1.", 7) == 0) {
            atomic_store(&c->ready, 1);
        }
        done += ll + 1;
    }
}

static void *sse_main(void *arg)
{
    client_t *c = arg;
    int fd = sse_connect(c->port, c->thread);
    static _Thread_local char buf[1 << 16];
    size_t used = 0;
    while (fd >= 0 && !atomic_load(c->stop) && atomic_load(&c->n) < c->want) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t r = read(fd, buf + used, sizeof buf - used);
        if (r <= 0)
            break;
        used += (size_t)r;
        size_t k = scan(c, buf, used);
        memmove(buf, buf + k, used - k);
        used -= k;
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

static int sub_event(void *ud, const ab_sub_event_t *e)
{
    client_t *c = ud;
    const ab_val_t *d = ab_val_get(e->ev.body, "delta");
    if (d && d->type == AB_VAL_STR && d->len > 1 && d->u.s[0] == 'k') {
        char num[24];
        snprintf(num, sizeof num, "%.*s", (int)(d->len - 1 < 20 ? d->len - 1 : 20), d->u.s + 1);
        got_event(c, num);
    }
    return 0;
}

static void *sub_main(void *arg)
{
    client_t *c = arg;
    while (!atomic_load(c->stop) && atomic_load(&c->n) < c->want)
        if (ab_sub_poll(c->sub, 50, NULL) != AB_OK && atomic_load(c->stop))
            break;
    return NULL;
}

static void *g_ctx; /* the subscribers' shared ZeroMQ context */

static int clients_start(client_t *cs, int n, bool sse, const char *ep, unsigned port,
                         const char *thread, uint64_t want, atomic_int *stop)
{
    for (int i = 0; i < n; i++) {
        client_t *c = &cs[i];
        memset(c, 0, sizeof *c);
        c->port = port;
        c->thread = thread;
        c->stop = stop;
        c->want = want;
        if (!sse) {
            ab_sub_opts_t so = {.scope = AB_SUB_THREAD, .thread = thread};
            so.on_event = sub_event;
            so.ud = c;
            so.start = AB_SUB_FROM_NOW;
            so.zmq_ctx = g_ctx;
            if (ab_sub_new(&c->sub, ep, &so, NULL) != AB_OK)
                return -1;
            atomic_store(&c->ready, 1);
        }
        if (pthread_create(&c->th, NULL, sse ? sse_main : sub_main, c) != 0)
            return -1;
    }
    long deadline = ab__mono_ms() + 10000;
    for (int i = 0; i < n; i++)
        while (!atomic_load(&cs[i].ready) && ab__mono_ms() < deadline)
            poll(NULL, 0, 5);
    /* the subscribers' first poll has to subscribe (and the SSE ones' pumps to start) */
    poll(NULL, 0, 300);
    return 0;
}

static void clients_join(client_t *cs, int n)
{
    for (int i = 0; i < n; i++) {
        pthread_join(cs[i].th, NULL);
        ab_sub_destroy(&cs[i].sub);
    }
}

/* ---- the producer ------------------------------------------------------------------- */

/* Publish N content events ("kN" deltas) into run (thread, "r"); at @p rate/s when > 0,
 * recording each send time in @p sent. @return seconds taken, or -1. */
static double produce(const char *ep, const char *thread, uint64_t n, double rate, double *sent)
{
    ab_producer_t *p = NULL;
    ab_producer_opts_t po = {.timeout_ms = 10000};
    ab_error_t err = AB_ERROR_INIT;
    if (ab_producer_new(&p, ep, &po, &err) != AB_OK ||
        ab_producer_claim(p, thread, "r", NULL, &err) != AB_OK)
        goto fail;
    char ev[512];
    snprintf(ev, sizeof ev,
             "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"r\",\"protocolVersion\":"
             "\"1.0\"}",
             thread);
    static const char start[] = "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\"}";
    if (ab_producer_publish_json(p, ev, strlen(ev), &err) != AB_OK ||
        ab_producer_publish_json(p, start, sizeof start - 1, &err) != AB_OK ||
        ab_producer_flush(p, 10000, &err) != AB_OK)
        goto fail;
    double t0 = ab__mono_s();
    for (uint64_t k = 1; k <= n; k++) {
        if (rate > 0)
            while (ab__mono_s() < t0 + (double)(k - 1) / rate)
                ;
        int len = snprintf(ev, sizeof ev,
                           "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":"
                           "\"k%llu %0180d\"}",
                           (unsigned long long)k, 0);
        if (sent)
            sent[k - 1] = ab__mono_s();
        if (ab_producer_publish_json(p, ev, (size_t)len, &err) != AB_OK ||
            (rate > 0 && ab_producer_flush(p, 10000, &err) != AB_OK))
            goto fail;
    }
    if (ab_producer_flush(p, 30000, &err) != AB_OK)
        goto fail;
    double dt = ab__mono_s() - t0;
    ab_producer_destroy(&p);
    return dt;
fail:
    fprintf(stderr, "agentbus bench gateway: publish: %s\n", err.message);
    ab_producer_destroy(&p);
    return -1;
}

/* Wait (bounded) until every client has @p want events; the time the last one got there. */
static double wait_all(client_t *cs, int n, uint64_t want)
{
    double deadline = ab__mono_s() + GW_WAIT_S;
    for (int i = 0; i < n; i++)
        while (atomic_load(&cs[i].n) < want && ab__mono_s() < deadline)
            poll(NULL, 0, 1);
    return ab__mono_s();
}

/* ---- rows ---------------------------------------------------------------------------- */

static client_t g_clients[GW_CLIENTS_MAX];

/* Throughput to @p n clients (SSE or subscribers): events/s per client, or -1. */
static double tput_row(const char *ep, unsigned port, int n, bool sse, const char *tag)
{
    char thread[64];
    snprintf(thread, sizeof thread, "gw-bench-%s-%d-%s", sse ? "sse" : "sub", n, tag);
    atomic_int stop = 0;
    if (clients_start(g_clients, n, sse, ep, port, thread, GW_EVENTS, &stop) != 0)
        return -1;
    double t0 = ab__mono_s();
    double pub = produce(ep, thread, GW_EVENTS, 0, NULL);
    double t1 = pub > 0 ? wait_all(g_clients, n, GW_EVENTS) : 0;
    atomic_store(&stop, 1);
    clients_join(g_clients, n);
    int ok = pub > 0;
    for (int i = 0; i < n; i++)
        ok &= atomic_load(&g_clients[i].n) == GW_EVENTS && !g_clients[i].bad_order;
    if (!ok)
        return -1;
    double rate = (double)GW_EVENTS / (t1 - t0);
    char row[64];
    snprintf(row, sizeof row, "%s, %d client(s)", sse ? "gateway SSE" : "ZeroMQ subscriber", n);
    bench_emit("gateway", row, "events_per_s_each", rate, "events_per_s_all", rate * n, NULL);
    printf("  %-26s %3d client(s)  %9.0f events/s each  %10.0f events/s in all  (publish "
           "%.0f events/s)\n",
           sse ? "gateway SSE" : "ZeroMQ subscriber", n, rate, rate * n, (double)GW_EVENTS / pub);
    return rate;
}

/* The other thread of the interleaved row: as many events, at the same time. */
typedef struct other {
    const char *ep;
    char thread[64];
    double dt;
} other_t;

static void *other_main(void *arg)
{
    other_t *o = arg;
    o->dt = produce(o->ep, o->thread, GW_EVENTS, 0, NULL);
    return NULL;
}

/*
 * One SSE client of a thread while a second producer writes another thread as fast: their
 * commits interleave, so the client's ordered stream sees positions that skip. With the
 * stamps' tprev (docs/PROTOCOL.md section 5) it knows nothing of its thread lies between;
 * against a broker run with --tprev false it replays to be sure. Events/s to the client.
 */
static double mixed_row(const char *ep, unsigned port, const char *tag)
{
    char thread[64];
    snprintf(thread, sizeof thread, "gw-bench-mix-%s", tag);
    other_t o = {.ep = ep, .dt = -1};
    snprintf(o.thread, sizeof o.thread, "gw-bench-mix-other-%s", tag);
    atomic_int stop = 0;
    if (clients_start(g_clients, 1, true, ep, port, thread, GW_EVENTS, &stop) != 0)
        return -1;
    pthread_t th;
    double t0 = ab__mono_s();
    bool other = pthread_create(&th, NULL, other_main, &o) == 0;
    double pub = other ? produce(ep, thread, GW_EVENTS, 0, NULL) : -1;
    double t1 = pub > 0 ? wait_all(g_clients, 1, GW_EVENTS) : 0;
    if (other)
        pthread_join(th, NULL);
    atomic_store(&stop, 1);
    clients_join(g_clients, 1);
    if (pub <= 0 || o.dt <= 0 || atomic_load(&g_clients[0].n) != GW_EVENTS ||
        g_clients[0].bad_order)
        return -1;
    double rate = (double)GW_EVENTS / (t1 - t0);
    bench_emit("gateway", "gateway SSE, 1 client, another thread interleaved", "events_per_s_each",
               rate, NULL);
    printf("  %-26s %3d client(s)  %9.0f events/s each  (another thread written as fast at the "
           "same time: %.0f events/s)\n",
           "gateway SSE, interleaved", 1, rate, (double)GW_EVENTS / o.dt);
    return rate;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void print_lat(const char *what, const double *sent, const double *got, size_t n)
{
    double *v = malloc(n * sizeof *v);
    size_t m = 0;
    for (size_t i = 0; v && i < n; i++)
        if (got[i] > 0)
            v[m++] = (got[i] - sent[i]) * 1e6;
    if (m == 0) {
        free(v);
        return;
    }
    qsort(v, m, sizeof *v, cmp_dbl);
    bench_emit("gateway", what, "p50_us", v[m / 2], "p99_us", v[(m * 99) / 100], "max_us", v[m - 1],
               "samples", (double)m, NULL);
    printf("  %-26s p50 %7.0f us  p99 %7.0f us  max %7.0f us  (%zu events at %.0f/s)\n", what,
           v[m / 2], v[(m * 99) / 100], v[m - 1], m, GW_LAT_RATE);
    free(v);
}

/* Latency: one SSE client and one subscriber on the same events. */
static int lat_row(const char *ep, unsigned port, const char *tag)
{
    char thread[64];
    snprintf(thread, sizeof thread, "gw-bench-lat-%s", tag);
    double *sent = calloc(GW_LAT_EVENTS, sizeof *sent);
    double *a = calloc(GW_LAT_EVENTS, sizeof *a), *b = calloc(GW_LAT_EVENTS, sizeof *b);
    atomic_int stop = 0;
    int rc = -1;
    if (!sent || !a || !b)
        goto done;
    if (clients_start(&g_clients[0], 1, true, ep, port, thread, GW_LAT_EVENTS, &stop) != 0 ||
        clients_start(&g_clients[1], 1, false, ep, port, thread, GW_LAT_EVENTS, &stop) != 0)
        goto done;
    g_clients[0].lat = a;
    g_clients[1].lat = b;
    if (produce(ep, thread, GW_LAT_EVENTS, GW_LAT_RATE, sent) < 0)
        goto done;
    wait_all(g_clients, 2, GW_LAT_EVENTS);
    rc = atomic_load(&g_clients[0].n) == GW_LAT_EVENTS &&
                 atomic_load(&g_clients[1].n) == GW_LAT_EVENTS
             ? 0
             : -1;
    print_lat("gateway SSE client", sent, a, GW_LAT_EVENTS);
    print_lat("ZeroMQ subscriber", sent, b, GW_LAT_EVENTS);
done:
    atomic_store(&stop, 1);
    clients_join(g_clients, 2);
    free(sent);
    free(a);
    free(b);
    return rc;
}

int bench_gateway(const bench_opts_t *o)
{
    child_t ch;
    const char *ep;
    gwchild_t g = {0};
    char tag[24];
    bench_run_tag(tag);
    signal(SIGPIPE, SIG_IGN);
    if (g_ctx == NULL && (g_ctx = zmq_ctx_new()) == NULL)
        return AB_BENCH_FAIL;
    if (row_begin(o, &ch, "process", &ep) != 0 || gw_child_start(&g, ep) != 0) {
        fprintf(stderr, "agentbus bench gateway: could not start the broker or the gateway\n");
        child_stop(&ch);
        return AB_BENCH_FAIL;
    }
    printf("gateway: %d events of ~256 bytes into one thread, as fast as one producer "
           "publishes\n",
           GW_EVENTS);
    int rc = AB_BENCH_OK;
    const int counts[] = {1, 100};
    for (size_t i = 0; i < 2 && rc == AB_BENCH_OK; i++) {
        if (tput_row(ep, g.port, counts[i], false, tag) < 0 ||
            tput_row(ep, g.port, counts[i], true, tag) < 0)
            rc = AB_BENCH_FAIL;
    }
    if (rc == AB_BENCH_OK && mixed_row(ep, g.port, tag) < 0)
        rc = AB_BENCH_FAIL;
    printf("publish -> delivery latency:\n");
    if (rc == AB_BENCH_OK && lat_row(ep, g.port, tag) != 0)
        rc = AB_BENCH_FAIL;
    if (rc != AB_BENCH_OK)
        fprintf(stderr, "agentbus bench gateway: a row failed (a client missed events)\n");
    gw_child_stop(&g);
    child_stop(&ch);
    return rc;
}

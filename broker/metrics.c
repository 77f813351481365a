/*
 * metrics.c - the broker's Prometheus metrics on an optional HTTP listener
 * (`--metrics HOST:PORT`, off by default): GET /metrics answers the figures
 * of `stats` (stats_reply.c) in the Prometheus text format 0.0.4.
 *
 * HTTP is libmicrohttpd's (Debian's libmicrohttpd, also the gateway's): it
 * parses every request, with its own thread; this file only routes and
 * writes the text.
 *
 * Invariants:
 *  1. Bounded: at most METRICS_CONNS connections at once, each closed after
 *     METRICS_TIMEOUT_S of silence; a request body is never read (GET/HEAD
 *     only); an answer is one buffer of a few KiB made per request.
 *  2. It reads only the shared figures (the stats box and atomics): a
 *     scrape never waits for the writer and never touches the store.
 *  3. Anything but GET or HEAD of /metrics is answered 404 or 405 with a
 *     one-line text reason; a failure to build the answer is a 500.
 */
#include "metrics.h"
#include "internal.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define METRICS_CONNS     16
#define METRICS_TIMEOUT_S 10

struct ab__metrics {
    struct MHD_Daemon *d;
    ab__shared_t *b;
};

static int put(char *buf, size_t size, size_t *n, const char *fmt, ...) AB_PRINTF(4, 5);
static int put(char *buf, size_t size, size_t *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = *n < size ? vsnprintf(buf + *n, size - *n, fmt, ap) : 0;
    va_end(ap);
    if (k < 0 || (size_t)k >= size - *n)
        return -1;
    *n += (size_t)k;
    return 0;
}

/* One metric: its help, its type and its value. */
static int metric(char *buf, size_t size, size_t *n, const char *name, const char *type,
                  const char *help, uint64_t v)
{
    return put(buf, size, n, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
               (unsigned long long)v);
}

/* The writer's tprev table (docs/PROTOCOL.md section 5): how often a live stamp's tprev was
 * exact (the thread known) or a bound (a miss: one more replay at most for an ordered
 * subscriber), entries evicted and positions that did not follow. */
static int tprev_metrics(ab__shared_t *b, char *buf, size_t size, size_t *n)
{
    int rc = metric(buf, size, n, "agentbus_tprev_hits_total", "counter",
                    "Live events whose thread the tprev table held (tprev exact).",
                    atomic_load_explicit(&b->tprev_hits, memory_order_relaxed));
    rc |= metric(buf, size, n, "agentbus_tprev_misses_total", "counter",
                 "Live events whose thread it did not hold (tprev a bound).",
                 atomic_load_explicit(&b->tprev_misses, memory_order_relaxed));
    rc |= metric(buf, size, n, "agentbus_tprev_evictions_total", "counter",
                 "Threads the tprev table gave up for others.",
                 atomic_load_explicit(&b->tprev_evictions, memory_order_relaxed));
    rc |= metric(buf, size, n, "agentbus_tprev_gaps_total", "counter",
                 "Positions that did not follow the last one the tprev table saw.",
                 atomic_load_explicit(&b->tprev_gaps, memory_order_relaxed));
    return rc;
}

/* Committed events the writer hands the snapshot worker in memory (broker/snapfeed.h). */
static int feed_metrics(ab__shared_t *b, char *buf, size_t size, size_t *n)
{
    int rc = metric(buf, size, n, "agentbus_snapshot_feed_bytes", "gauge",
                    "Bytes of committed events held for the snapshot worker.",
                    atomic_load_explicit(&b->snapfeed_bytes, memory_order_relaxed));
    rc |= metric(buf, size, n, "agentbus_snapshot_fed_events_total", "counter",
                 "Events the snapshot worker folded from memory instead of the store.",
                 atomic_load_explicit(&b->snapfeed_folded, memory_order_relaxed));
    return rc;
}

/* Groups answered 5 ms or more after receipt, by the part that took longest (writer.c
 * note_slow): waiting for the writer, the store's commit, fan-out and answers. */
static int slow_metrics(ab__shared_t *b, char *buf, size_t size, size_t *n)
{
    static const char *const part[3] = {"writer_wait", "commit", "answers"};
    int rc = put(buf, size, n,
                 "# HELP agentbus_slow_groups_total Group commits answered 5 ms or more after "
                 "their first publish arrived, by the part that took longest.\n"
                 "# TYPE agentbus_slow_groups_total counter\n");
    for (int i = 0; i < 3; i++)
        rc |=
            put(buf, size, n, "agentbus_slow_groups_total{part=\"%s\"} %llu\n", part[i],
                (unsigned long long)atomic_load_explicit(&b->slow_groups[i], memory_order_relaxed));
    return rc;
}

/* The whole answer into @p buf. @return its length, or 0 when it did not fit. */
static size_t render(ab__shared_t *b, char *buf, size_t size)
{
    ab_stats_reply_t r;
    ab__stats_fill(b, &r);
    size_t n = 0;
    int rc = put(buf, size, &n,
                 "# HELP agentbus_info The broker: its version and instance (always 1).\n"
                 "# TYPE agentbus_info gauge\n"
                 "agentbus_info{version=\"%.*s\",instance=\"%.*s\"} 1\n",
                 (int)r.version.len, r.version.ptr, (int)r.instance.len, r.instance.ptr);
    rc |= put(buf, size, &n,
              "# HELP agentbus_uptime_seconds Seconds since the broker started.\n"
              "# TYPE agentbus_uptime_seconds gauge\nagentbus_uptime_seconds %.3f\n",
              (double)r.uptime_ms / 1e3);
    rc |= metric(buf, size, &n, "agentbus_head_position", "gauge", "The latest commit position.",
                 r.head_pos);
    if (r.store_known) {
        rc |= metric(buf, size, &n, "agentbus_store_runs", "gauge", "Runs the store ever recorded.",
                     r.runs_total);
        rc |= metric(buf, size, &n, "agentbus_store_runs_active", "gauge",
                     "Runs started and not ended.", r.runs_active);
        rc |= metric(buf, size, &n, "agentbus_store_bytes", "gauge",
                     "Size of the stored data (SQLite: the database file).", r.store_bytes);
        rc |= metric(buf, size, &n, "agentbus_store_wal_bytes", "gauge",
                     "Size of the write-ahead log.", r.wal_bytes);
    }
    if (r.replicas_known) {
        rc |= metric(buf, size, &n, "agentbus_store_replicas", "gauge",
                     "Standbys streaming the store's changes.", r.replicas);
        rc |= metric(buf, size, &n, "agentbus_store_replicas_sync", "gauge",
                     "Standbys a commit waits for.", r.replicas_sync);
        rc |= metric(buf, size, &n, "agentbus_store_replica_lag_bytes", "gauge",
                     "WAL the furthest-behind standby has not replayed.", r.replica_lag_bytes);
        rc |= put(buf, size, &n,
                  "# HELP agentbus_store_replica_lag_seconds The longest replay lag of a "
                  "standby.\n# TYPE agentbus_store_replica_lag_seconds gauge\n"
                  "agentbus_store_replica_lag_seconds %.6f\n",
                  (double)r.replica_lag_us / 1e6);
    }
    rc |= metric(buf, size, &n, "agentbus_connections", "gauge",
                 "Connections open on the command endpoint.", r.connections);
    rc |= metric(buf, size, &n, "agentbus_subscribers", "gauge",
                 "Connections open on the event endpoint.", r.subscribers);
    rc |= metric(buf, size, &n, "agentbus_queue_events", "gauge",
                 "Events and writer jobs in the ingest queue.", r.queue_events);
    rc |= metric(buf, size, &n, "agentbus_queue_bytes", "gauge",
                 "Publish bytes in the ingest queue.", r.queue_bytes);
    rc |= metric(buf, size, &n, "agentbus_replays_open", "gauge",
                 "Replays running or with chunks not yet credited.", r.replays_open);
    rc |= metric(buf, size, &n, "agentbus_commits_total", "counter",
                 "Group commits that stored events.", r.commits);
    rc |= metric(buf, size, &n, "agentbus_events_committed_total", "counter", "Events committed.",
                 r.events);
    rc |= metric(buf, size, &n, "agentbus_lone_commits_total", "counter",
                 "Publishes the command thread took to commit itself while the writer was idle.",
                 atomic_load_explicit(&b->lone_commits, memory_order_relaxed));
    rc |= tprev_metrics(b, buf, size, &n);
    rc |= feed_metrics(b, buf, size, &n);
    rc |= slow_metrics(b, buf, size, &n);
    rc |= metric(buf, size, &n, "agentbus_events_rejected_total", "counter",
                 "Events answered rejected.", r.rejected);
    rc |= put(buf, size, &n,
              "# HELP agentbus_commit_seconds Group commit time (write and sync) over the last "
              "%llu commits.\n# TYPE agentbus_commit_seconds summary\n"
              "agentbus_commit_seconds{quantile=\"0.5\"} %.6f\n"
              "agentbus_commit_seconds{quantile=\"0.9\"} %.6f\n"
              "agentbus_commit_seconds{quantile=\"0.99\"} %.6f\n"
              "agentbus_commit_seconds{quantile=\"1\"} %.6f\n"
              "agentbus_commit_seconds_count %llu\n",
              (unsigned long long)r.commit_window, (double)r.commit_p50_us / 1e6,
              (double)r.commit_p90_us / 1e6, (double)r.commit_p99_us / 1e6,
              (double)r.commit_max_us / 1e6, (unsigned long long)r.commits);
    return rc == 0 ? n : 0;
}

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned code, const char *type,
                              const char *body, size_t len)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", type);
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(resp, "Allow", "GET, HEAD");
    enum MHD_Result r = MHD_queue_response(conn, code, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **state)
{
    (void)version;
    (void)data;
    ab__metrics_t *m = cls;
    if (*state == NULL) { /* first call: headers only (invariant 1) */
        *state = m;
        return MHD_YES;
    }
    if (*data_size != 0) { /* a body: not read */
        *data_size = 0;
        return MHD_YES;
    }
    static const char text[] = "text/plain; charset=utf-8";
    if (strcmp(url, "/metrics") != 0) {
        static const char nf[] = "not found: the metrics are at /metrics\n";
        return answer(conn, MHD_HTTP_NOT_FOUND, text, nf, sizeof nf - 1);
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        static const char na[] = "method not allowed: GET /metrics\n";
        return answer(conn, MHD_HTTP_METHOD_NOT_ALLOWED, text, na, sizeof na - 1);
    }
    char buf[8192];
    size_t n = render(m->b, buf, sizeof buf);
    if (n == 0) {
        static const char ie[] = "internal error: the metrics did not fit their buffer\n";
        return answer(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, text, ie, sizeof ie - 1);
    }
    return answer(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", buf, n);
}

ab_status_t ab__metrics_parse(const char *addr, struct sockaddr_in *out, ab_error_t *err)
{
    const char *colon = strrchr(addr, ':');
    char host[64];
    unsigned long port = 0;
    char *end = NULL;
    if (colon == NULL || (size_t)(colon - addr) >= sizeof host || colon[1] == '\0' ||
        (port = strtoul(colon + 1, &end, 10), *end != '\0') || port > 65535)
        return ab_error_set(err, AB_INVALID_CONFIG, "metrics",
                            "metrics: '%s' is not HOST:PORT (e.g. 127.0.0.1:9464 or :9464)", addr);
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    memset(out, 0, sizeof(*out));
    out->sin_family = AF_INET;
    out->sin_port = htons((uint16_t)port);
    const char *h = host[0] == '\0' || strcmp(host, "localhost") == 0 ? "127.0.0.1" : host;
    if (inet_pton(AF_INET, h, &out->sin_addr) != 1)
        return ab_error_set(err, AB_INVALID_CONFIG, "metrics",
                            "metrics: '%s' is not an IPv4 address (or localhost)", host);
    return AB_OK;
}

ab_status_t ab__metrics_start(ab__metrics_t **out, ab__shared_t *b, const char *addr,
                              ab_error_t *err)
{
    struct sockaddr_in sa;
    ab_status_t rc = ab__metrics_parse(addr, &sa, err);
    if (rc != AB_OK)
        return rc;
    ab__metrics_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return ab_error_set(err, AB_NOMEM, "", "out of memory");
    m->b = b;
    m->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL,
                            on_request, m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_CONNS,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_TIMEOUT_S,
                            MHD_OPTION_END);
    if (m->d == NULL) {
        free(m);
        return ab_error_set(err, AB_IO, "metrics", "metrics: cannot listen on %s", addr);
    }
    char host[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &sa.sin_addr, host, sizeof host);
    if (ntohl(sa.sin_addr.s_addr) >> 24 != 127)
        ab__log(AB_LOG_WARN, "metrics on %s: beyond loopback, and without authentication", host);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
    ab__log(AB_LOG_INFO, "metrics: http://%s:%u/metrics", host, /* the bound one (port 0) */
            di && di->port ? (unsigned)di->port : (unsigned)ntohs(sa.sin_port));
    *out = m;
    return AB_OK;
}

void ab__metrics_stop(ab__metrics_t **m)
{
    if (m == NULL || *m == NULL)
        return;
    MHD_stop_daemon((*m)->d);
    free(*m);
    *m = NULL;
}

/*
 * bench_actions.c - `agentbus bench actions`: the round trip of an action
 * call through the broker (docs/PROTOCOL.md 7.10, 7.11; docs/PERFORMANCE.md,
 * "Action calls"), beside the raw ZeroMQ two-hop round trip measured in the
 * same run.
 *
 *   raw   a caller DEALER -> a relay thread's ROUTER -> a worker DEALER that
 *         echoes -> the relay -> the caller: the two hops an action call
 *         takes, with no broker; messages of the size of the bus rows'
 *         invoke_action. 1 and 32 in flight.
 *   bus   a broker child (or --broker), 1 or 4 worker threads, each with its
 *         own connection and ZeroMQ context, serving one agent's action and
 *         answering every action_call at once with action_result (the
 *         payload echoed back); one caller sends invoke_action and waits for
 *         action_reply: 1 in flight (sequential), then 32 in flight.
 *
 * Every row reports round trips/s and the p50/p99/max of the time from
 * sending to the answer, in microseconds, and CPU per round trip.
 *
 * Invariants:
 *  1. Every wait is bounded: worker registration, relay handshake, each
 *     reply (10 s), thread ends.
 *  2. A worker keeps its lease: it asks for LEASE_MS and sends a ping when it
 *     has sent nothing for a third of the lease granted.
 *  3. A bus row fails unless every call got an action_reply, every
 *     action_result was acknowledged delivered, and the workers answered
 *     exactly the calls the caller made.
 *  4. Each row's workers serve an agent name no other row uses, so a
 *     --broker that still holds an earlier row's registrations routes
 *     nothing to them.
 */
#include "ab_common.h"
#include "agentbus/client.h"
#include "agentbus/json.h"
#include "bench.h"
#include "bench_int.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define ACT_WORKERS_MAX 4
#define ACT_INFLIGHT    32
#define ACT_WARMUP      64
#define ACT_WAIT_MS     10000
#define LEASE_MS        30000
#define ACT_PAYLOAD     "{\"toolCallId\":\"tc-1\",\"approved\":true}"

/* ---- shared pieces ----------------------------------------------------------- */

/* A handshake: threads report ready (or failed); the main thread waits, bounded. */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready, failed;
} gate_t;

static void gate_init(gate_t *g)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->ready = g->failed = 0;
}

static void gate_free(gate_t *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

static void gate_open(gate_t *g, bool ok)
{
    pthread_mutex_lock(&g->mu);
    if (ok)
        g->ready++;
    else
        g->failed++;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* Wait until @p n threads reported; @return 0 when all are ready, -1 otherwise. */
static int gate_wait(gate_t *g, int n)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += ACT_WAIT_MS / 1000;
    int rc = 0;
    pthread_mutex_lock(&g->mu);
    while (g->ready + g->failed < n && rc == 0)
        rc = pthread_cond_timedwait(&g->cv, &g->mu, &dl);
    int ok = g->ready == n;
    pthread_mutex_unlock(&g->mu);
    return ok ? 0 : -1;
}

/* Round-trip times of a row, seconds. */
typedef struct samples {
    double *v;
    size_t n;
} samples_t;

static void sample(samples_t *s, double dt)
{
    if (s != NULL && s->v != NULL && s->n < LAT_MAX)
        s->v[s->n++] = dt;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* What a row prints: round trips/s, p50/p99/max in µs, CPU per round trip. */
typedef struct row {
    double rate, p50, p99, max;
    uint64_t n;
    double cpu_broker, cpu_bench; /* µs per round trip; broker < 0: not measured */
} row_t;

static void row_finish(row_t *r, samples_t *s, uint64_t n, double dt, double cpu_self,
                       double cpu_broker)
{
    qsort(s->v, s->n, sizeof(double), cmp_dbl);
    r->n = n;
    r->rate = dt > 0 ? (double)n / dt : 0;
    r->p50 = s->n ? s->v[s->n / 2] * 1e6 : 0;
    r->p99 = s->n ? s->v[(size_t)((double)s->n * 0.99)] * 1e6 : 0;
    r->max = s->n ? s->v[s->n - 1] * 1e6 : 0;
    r->cpu_bench = n ? cpu_self * 1e6 / (double)n : 0;
    r->cpu_broker = cpu_broker < 0 ? -1 : n ? cpu_broker * 1e6 / (double)n : 0;
}

static void row_print(const char *label, const row_t *r)
{
    char broker[48] = "";
    if (r->cpu_broker >= 0)
        snprintf(broker, sizeof(broker), "broker %.1f us, ", r->cpu_broker);
    bench_emit("actions", label, "per_s", r->rate, "p50_us", r->p50, "p99_us", r->p99, "max_us",
               r->max, "round_trips", (double)r->n, "cpu_broker_us",
               r->cpu_broker >= 0 ? r->cpu_broker : NAN, "cpu_bench_us", r->cpu_bench, NULL);
    printf("actions %-38s %8.0f /s  p50 %6.0f us  p99 %6.0f us  max %7.0f us  (%llu round "
           "trips; CPU per round trip: %sbench process %.1f us)\n",
           label, r->rate, r->p50, r->p99, r->max, (unsigned long long)r->n, broker, r->cpu_bench);
}

/* ---- raw ZeroMQ: caller DEALER -> relay ROUTER -> worker DEALER and back ------ */

/* The relay's ROUTER knows the worker by this routing id; the caller's is ZeroMQ's. */
#define RAW_WORKER_ID "W"

typedef struct raw {
    void *ctx[3]; /* caller, relay, worker: a context each, as the bus rows have */
    void *caller, *relay, *worker;
    gate_t gate;
} raw_t;

/* Forward [from, payload] to the worker as [W, from, payload] and the worker's
 * [W, to, payload] to [to, payload]; ends after passing back an empty payload. */
static void *relay_main(void *arg)
{
    raw_t *r = arg;
    zmq_msg_t f[3];
    for (int i = 0; i < 3; i++)
        zmq_msg_init(&f[i]);
    bool ok = zmq_msg_recv(&f[0], r->relay, 0) >= 0 && zmq_msg_recv(&f[1], r->relay, 0) >= 0;
    gate_open(&r->gate, ok); /* the worker's hello: its route is known now */
    while (ok) {
        if (zmq_msg_recv(&f[0], r->relay, 0) < 0 || zmq_msg_recv(&f[1], r->relay, 0) < 0)
            break;
        bool from_worker = zmq_msg_size(&f[0]) == 1 && *(char *)zmq_msg_data(&f[0]) == 'W';
        if (from_worker) {
            if (zmq_msg_recv(&f[2], r->relay, 0) < 0)
                break;
            bool last = zmq_msg_size(&f[2]) == 0;
            zmq_msg_send(&f[1], r->relay, ZMQ_SNDMORE);
            zmq_msg_send(&f[2], r->relay, 0);
            if (last)
                break;
        } else {
            zmq_send(r->relay, RAW_WORKER_ID, 1, ZMQ_SNDMORE);
            zmq_msg_send(&f[0], r->relay, ZMQ_SNDMORE);
            zmq_msg_send(&f[1], r->relay, 0);
        }
    }
    for (int i = 0; i < 3; i++)
        zmq_msg_close(&f[i]);
    return NULL;
}

/* Echo [to, payload] back; ends after echoing an empty payload. */
static void *raw_worker_main(void *arg)
{
    raw_t *r = arg;
    zmq_msg_t to, m;
    zmq_msg_init(&to);
    zmq_msg_init(&m);
    for (;;) {
        if (zmq_msg_recv(&to, r->worker, 0) < 0 || zmq_msg_recv(&m, r->worker, 0) < 0)
            break;
        bool last = zmq_msg_size(&m) == 0;
        zmq_msg_send(&to, r->worker, ZMQ_SNDMORE);
        zmq_msg_send(&m, r->worker, 0);
        if (last)
            break;
    }
    zmq_msg_close(&to);
    zmq_msg_close(&m);
    return NULL;
}

static int raw_open(raw_t *r)
{
    char ep[128];
    int tmo = ACT_WAIT_MS;
    memset(r, 0, sizeof(*r));
    for (int i = 0; i < 3; i++)
        if ((r->ctx[i] = zmq_ctx_new()) == NULL)
            return -1;
    r->relay = zsock(r->ctx[1], ZMQ_ROUTER, "tcp://127.0.0.1:*", ep, sizeof(ep));
    r->worker = zmq_socket(r->ctx[2], ZMQ_DEALER);
    r->caller = zsock(r->ctx[0], ZMQ_DEALER, NULL, ep, sizeof(ep));
    if (!r->relay || !r->worker || !r->caller)
        return -1;
    int zero = 0;
    zmq_setsockopt(r->worker, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(r->worker, ZMQ_ROUTING_ID, RAW_WORKER_ID, 1);
    void *socks[3] = {r->caller, r->relay, r->worker}; /* invariant 1 */
    for (int i = 0; i < 3; i++)
        zmq_setsockopt(socks[i], ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
    if (zmq_connect(r->worker, ep) != 0)
        return -1;
    return zmq_send(r->worker, "hello", 5, 0) == 5 ? 0 : -1;
}

static void raw_close(raw_t *r)
{
    void **s[3] = {&r->caller, &r->relay, &r->worker};
    for (int i = 0; i < 3; i++)
        if (*s[i] != NULL)
            zmq_close(*s[i]);
    for (int i = 0; i < 3; i++)
        if (r->ctx[i] != NULL)
            zmq_ctx_term(r->ctx[i]);
}

/* Round trips of @p size-byte messages, @p inflight at once, for @p seconds. */
static int raw_calls(raw_t *r, size_t size, int inflight, double seconds, uint64_t warmup,
                     samples_t *s, uint64_t *done)
{
    double t0[2 * ACT_INFLIGHT]; /* by sequence number: one worker answers in order */
    char buf[512];
    uint64_t sent = 0, got = 0;
    memset(buf, 'x', sizeof(buf));
    double end = ab__mono_s() + seconds;
    while (got < sent || (warmup ? sent < warmup : ab__mono_s() < end)) {
        bool more = warmup ? sent < warmup : ab__mono_s() < end;
        if (more && sent - got < (uint64_t)inflight) {
            memcpy(buf, &sent, sizeof(sent));
            t0[sent % (2 * ACT_INFLIGHT)] = ab__mono_s();
            if (zmq_send(r->caller, buf, size, 0) != (int)size)
                return -1;
            sent++;
            continue;
        }
        uint64_t k = UINT64_MAX;
        if (zmq_recv(r->caller, buf, sizeof(buf), 0) == (int)size)
            memcpy(&k, buf, sizeof(k));
        if (k != got) /* lost, short, or out of order: not a round trip of this row */
            return -1;
        sample(s, ab__mono_s() - t0[k % (2 * ACT_INFLIGHT)]);
        got++;
    }
    *done = got;
    return 0;
}

/* The raw rows: 1 and 32 in flight. */
static int raw_rows(const bench_opts_t *o, size_t size, row_t *one, row_t *many)
{
    raw_t r;
    pthread_t th[2];
    int started = 0, rc = -1;
    samples_t s = {calloc(LAT_MAX, sizeof(double)), 0};
    gate_init(&r.gate);
    if (s.v == NULL || raw_open(&r) != 0)
        goto out;
    pthread_create(&th[0], NULL, relay_main, &r);
    pthread_create(&th[1], NULL, raw_worker_main, &r);
    started = 1;
    if (gate_wait(&r.gate, 1) != 0)
        goto out;
    int inflight[2] = {1, ACT_INFLIGHT};
    row_t *rows[2] = {one, many};
    for (int i = 0; i < 2; i++) {
        uint64_t n = 0;
        if (raw_calls(&r, size, inflight[i], 0, ACT_WARMUP, NULL, &n) != 0)
            goto out;
        s.n = 0;
        double c0 = self_cpu_s(), t0 = ab__mono_s();
        if (raw_calls(&r, size, inflight[i], o->seconds, 0, &s, &n) != 0)
            goto out;
        row_finish(rows[i], &s, n, ab__mono_s() - t0, self_cpu_s() - c0, -1);
    }
    rc = 0;
out:
    if (started) {
        char end[1];
        zmq_send(r.caller, "", 0, 0); /* the relay and the worker end on an empty payload */
        if (zmq_recv(r.caller, end, sizeof(end), 0) < 0)
            rc = -1;
        pthread_join(th[0], NULL);
        pthread_join(th[1], NULL);
    }
    if (rc != 0)
        fprintf(stderr, "agentbus bench: the raw relay rows failed\n");
    raw_close(&r);
    gate_free(&r.gate);
    free(s.v);
    return rc;
}

/* ---- bus: workers ---------------------------------------------------------------- */

typedef struct aworker {
    const char *ep;
    const char *agent;
    gate_t *gate;
    atomic_int *stop;
    /* results */
    uint64_t answered;
    uint64_t undelivered; /* action_ack delivered=false */
    int failed;
} aworker_t;

static int worker_serve(ab_conn_t *c, ab_doc_t *doc, const char *agent, uint32_t *lease_ms,
                        ab_error_t *err)
{
    static const ab_str_t actions[] = {{"approve", 7}};
    ab_served_agent_t agents[] = {{{agent, strlen(agent)}, 1, actions, 1}};
    ab_msg_t m = {.op = AB_OP_SERVE}, r;
    m.u.serve = (ab_serve_t){{"agentbus-bench", 14}, agents, 1, LEASE_MS};
    if (ab_conn_request(c, &m, NULL, 0, doc, &r, ACT_WAIT_MS, err) != AB_OK)
        return -1;
    *lease_ms = r.u.served.lease_ms;
    return 0;
}

/* One message for the worker: answer an action_call with its payload, count acks. */
static int worker_take(aworker_t *w, ab_conn_t *c, ab_doc_t *doc, ab_error_t *err)
{
    ab_msg_t m;
    if (ab_conn_recv(c, 0, doc, &m, ACT_WAIT_MS, err) != AB_OK)
        return -1;
    if (m.op == AB_OP_ACTION_CALL) {
        ab_msg_t res = {.op = AB_OP_ACTION_RESULT};
        res.u.action_result =
            (ab_action_result_t){m.u.action_call.call, m.u.action_call.payload, NULL};
        if (ab_conn_send(c, &res, NULL, 0, NULL, err) != AB_OK)
            return -1;
        w->answered++;
        return 1;
    }
    if (m.op == AB_OP_ACTION_ACK && !m.u.action_ack.delivered)
        w->undelivered++;
    return 0; /* an ack or a pong */
}

/* Answer calls until told to stop; keep the lease (invariant 2). */
static void worker_loop(aworker_t *w, ab_conn_t *c, ab_doc_t *doc, uint32_t lease_ms)
{
    ab_error_t err = AB_ERROR_INIT;
    double last = ab__mono_s(), renew = (double)lease_ms / 3000.0;
    while (!atomic_load(w->stop)) {
        if (ab__mono_s() - last > renew) {
            ab_msg_t ping = {.op = AB_OP_PING};
            if (ab_conn_send(c, &ping, NULL, 0, NULL, &err) != AB_OK)
                break;
            last = ab__mono_s();
        }
        int rc = ab_conn_wait(c, 100);
        if (rc < 0)
            break;
        if (rc == 0)
            continue;
        if ((rc = worker_take(w, c, doc, &err)) < 0)
            break;
        if (rc > 0)
            last = ab__mono_s();
    }
    if (!atomic_load(w->stop)) {
        fprintf(stderr, "agentbus bench: worker: %s\n", err.message);
        w->failed = 1;
    }
}

static void *worker_main(void *arg)
{
    aworker_t *w = arg;
    ab_conn_opts_t o = {.client_name = "agentbus-bench-worker", .timeout_ms = ACT_WAIT_MS};
    ab_conn_t *c = NULL; /* its own connection and ZeroMQ context (zmq_ctx NULL) */
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    uint32_t lease_ms = 0;
    bool ok = ab_doc_new(&doc) == AB_OK && ab_conn_new(&c, w->ep, &o, &err) == AB_OK &&
              worker_serve(c, doc, w->agent, &lease_ms, &err) == 0;
    gate_open(w->gate, ok);
    if (ok) {
        worker_loop(w, c, doc, lease_ms);
    } else {
        fprintf(stderr, "agentbus bench: worker: %s\n", err.message);
        w->failed = 1;
    }
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    return NULL;
}

/* ---- bus: the caller ---------------------------------------------------------- */

typedef struct caller {
    ab_conn_t *c;
    ab_doc_t *doc; /* replies */
    ab_doc_t *pdoc;
    ab_buf_t mp; /* the payload's msgpack: the parsed tree's strings point into it */
    const ab_val_t *payload;
    const char *agent;
    uint64_t calls; /* replies received, warm-up included */
} caller_t;

typedef struct flight {
    uint64_t cid;
    double t0;
} flight_t;

static void caller_close(caller_t *cl)
{
    ab_conn_destroy(&cl->c);
    ab_doc_destroy(&cl->doc);
    ab_doc_destroy(&cl->pdoc);
    ab_buf_free(&cl->mp);
}

static int caller_open(caller_t *cl, const char *ep, const char *agent)
{
    ab_conn_opts_t o = {.client_name = "agentbus-bench", .timeout_ms = ACT_WAIT_MS};
    ab_error_t err = AB_ERROR_INIT;
    memset(cl, 0, sizeof(*cl));
    cl->agent = agent;
    int rc = -1;
    if (ab_doc_new(&cl->doc) != AB_OK || ab_doc_new(&cl->pdoc) != AB_OK ||
        ab_json_to_msgpack(ACT_PAYLOAD, strlen(ACT_PAYLOAD), 16, 1024, AB_INVALID_ARGUMENT, &cl->mp,
                           &err) != AB_OK ||
        ab_doc_parse(cl->pdoc, cl->mp.data, cl->mp.len, 1024, 16, AB_INVALID_ARGUMENT, &cl->payload,
                     &err) != AB_OK ||
        ab_conn_new(&cl->c, ep, &o, &err) != AB_OK) {
        fprintf(stderr, "agentbus bench: caller: %s\n", err.message);
        caller_close(cl);
    } else {
        rc = 0;
    }
    return rc;
}

static ab_msg_t invoke_msg(const caller_t *cl)
{
    ab_msg_t m = {.op = AB_OP_INVOKE_ACTION};
    m.u.invoke_action = (ab_invoke_action_t){
        {cl->agent, strlen(cl->agent)}, {"approve", 7}, cl->payload, {"t-1", 3}, ACT_WAIT_MS};
    return m;
}

/* The next action_reply; its flight's time into @p s. */
static int caller_take(caller_t *cl, flight_t *fl, int *nfl, samples_t *s)
{
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_conn_recv(cl->c, 0, cl->doc, &m, ACT_WAIT_MS, &err);
    if (st != AB_OK || m.op != AB_OP_ACTION_REPLY || m.u.action_reply.result == NULL) {
        fprintf(stderr, "agentbus bench: invoke_action: %s\n",
                st != AB_OK ? err.message : "not an action_reply with a result");
        return -1;
    }
    for (int i = 0; i < *nfl; i++)
        if (fl[i].cid == m.cid) {
            sample(s, ab__mono_s() - fl[i].t0);
            fl[i] = fl[--*nfl];
            cl->calls++;
            return 0;
        }
    fprintf(stderr, "agentbus bench: an action_reply for no call (cid %llu)\n",
            (unsigned long long)m.cid);
    return -1;
}

/* Calls, @p inflight at once: @p warmup of them, or for @p seconds. */
static int caller_run(caller_t *cl, int inflight, double seconds, uint64_t warmup, samples_t *s,
                      uint64_t *done)
{
    flight_t fl[ACT_INFLIGHT];
    int nfl = 0;
    uint64_t sent = 0, got0 = cl->calls;
    ab_msg_t m = invoke_msg(cl);
    ab_error_t err = AB_ERROR_INIT;
    double end = ab__mono_s() + seconds;
    for (;;) {
        bool more = warmup ? sent < warmup : ab__mono_s() < end;
        if (more && nfl < inflight) {
            fl[nfl].t0 = ab__mono_s();
            if (ab_conn_send(cl->c, &m, NULL, 0, &fl[nfl].cid, &err) != AB_OK) {
                fprintf(stderr, "agentbus bench: invoke_action: %s\n", err.message);
                return -1;
            }
            nfl++;
            sent++;
            continue;
        }
        if (nfl == 0)
            break;
        if (caller_take(cl, fl, &nfl, s) != 0)
            return -1;
    }
    *done = cl->calls - got0;
    return 0;
}

/* ---- bus rows ---------------------------------------------------------------------- */

static int workers_start(aworker_t *w, pthread_t *th, int n, const char *ep, const char *agent,
                         gate_t *g, atomic_int *stop)
{
    for (int i = 0; i < n; i++) {
        w[i] = (aworker_t){.ep = ep, .agent = agent, .gate = g, .stop = stop};
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    return gate_wait(g, n);
}

/* Join the workers; invariant 3 against the caller's @p calls. */
static int workers_stop(aworker_t *w, pthread_t *th, int n, atomic_int *stop, uint64_t calls,
                        uint64_t *lo, uint64_t *hi)
{
    atomic_store(stop, 1);
    uint64_t answered = 0, undelivered = 0;
    int failed = 0;
    *lo = UINT64_MAX;
    *hi = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        answered += w[i].answered;
        undelivered += w[i].undelivered;
        failed |= w[i].failed;
        *lo = w[i].answered < *lo ? w[i].answered : *lo;
        *hi = w[i].answered > *hi ? w[i].answered : *hi;
    }
    if (failed || undelivered || answered != calls) {
        fprintf(stderr, "agentbus bench: workers answered %llu of %llu calls, %llu not delivered\n",
                (unsigned long long)answered, (unsigned long long)calls,
                (unsigned long long)undelivered);
        return -1;
    }
    return 0;
}

/* One bus row: @p nworkers workers, @p inflight calls at once. */
static int bus_row(const bench_opts_t *o, int nworkers, int inflight, row_t *out, uint64_t *lo,
                   uint64_t *hi)
{
    static int rows;
    char agent[64];
    snprintf(agent, sizeof(agent), "bench-%ld-%d", (long)getpid(), ++rows); /* invariant 4 */
    child_t ch;
    const char *ep;
    if (row_begin(o, &ch, "process", &ep) != 0)
        return -1;
    aworker_t w[ACT_WORKERS_MAX];
    pthread_t th[ACT_WORKERS_MAX];
    gate_t g;
    atomic_int stop;
    atomic_init(&stop, 0);
    gate_init(&g);
    caller_t cl;
    samples_t s = {calloc(LAT_MAX, sizeof(double)), 0};
    uint64_t n = 0;
    int rc = workers_start(w, th, nworkers, ep, agent, &g, &stop);
    if (rc == 0 && s.v != NULL && caller_open(&cl, ep, agent) == 0) {
        rc = caller_run(&cl, inflight, 0, ACT_WARMUP, NULL, &n);
        double c0 = self_cpu_s(), b0 = ch.pid ? proc_cpu_s(ch.pid) : 0, t0 = ab__mono_s();
        if (rc == 0)
            rc = caller_run(&cl, inflight, o->seconds, 0, &s, &n);
        double dt = ab__mono_s() - t0, bcpu = ch.pid ? proc_cpu_s(ch.pid) - b0 : -1;
        if (rc == 0)
            row_finish(out, &s, n, dt, self_cpu_s() - c0, bcpu);
        n = cl.calls;
        caller_close(&cl);
    } else {
        rc = -1;
    }
    if (workers_stop(w, th, nworkers, &stop, n, lo, hi) != 0)
        rc = -1;
    gate_free(&g);
    free(s.v);
    child_stop(&ch);
    return rc;
}

/* The size of the bus rows' invoke_action header: the raw rows' message size. */
static size_t invoke_size(void)
{
    caller_t cl = {.agent = "bench-00000-1"};
    ab_buf_t mp = {0}, out = {0};
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    size_t size = 64;
    if (ab_doc_new(&doc) == AB_OK &&
        ab_json_to_msgpack(ACT_PAYLOAD, strlen(ACT_PAYLOAD), 16, 1024, AB_INVALID_ARGUMENT, &mp,
                           &err) == AB_OK &&
        ab_doc_parse(doc, mp.data, mp.len, 1024, 16, AB_INVALID_ARGUMENT, &cl.payload, &err) ==
            AB_OK) {
        ab_msg_t m = invoke_msg(&cl);
        m.v = 1;
        m.cid = 1000;
        if (ab_msg_encode(&m, &out, &err) == AB_OK && out.len >= 16 && out.len <= 512)
            size = out.len;
    }
    ab_buf_free(&mp);
    ab_buf_free(&out);
    ab_doc_destroy(&doc);
    return size;
}

int bench_actions(const bench_opts_t *o)
{
    size_t size = invoke_size();
    row_t raw1, rawn, bus[3];
    static const int nw[3] = {1, 1, 4}, nin[3] = {1, ACT_INFLIGHT, ACT_INFLIGHT};
    char label[64];
    if (raw_rows(o, size, &raw1, &rawn) != 0)
        return AB_BENCH_FAIL;
    snprintf(label, sizeof(label), "raw two hops, %zu B, 1 in flight", size);
    row_print(label, &raw1);
    snprintf(label, sizeof(label), "raw two hops, %zu B, %d in flight", size, ACT_INFLIGHT);
    row_print(label, &rawn);
    for (int i = 0; i < 3; i++) {
        uint64_t lo, hi;
        if (bus_row(o, nw[i], nin[i], &bus[i], &lo, &hi) != 0)
            return AB_BENCH_FAIL;
        snprintf(label, sizeof(label), "invoke_action, %d in flight, %d worker%s", nin[i], nw[i],
                 nw[i] > 1 ? "s" : "");
        row_print(label, &bus[i]);
        if (nw[i] > 1)
            printf("actions %-38s calls answered per worker: %llu ... %llu\n", "",
                   (unsigned long long)lo, (unsigned long long)hi);
    }
    printf("actions share of raw: 1 in flight p50 %.0f%% (the broker adds %.0f us), "
           "%d in flight round trips/s %.0f%% with 1 worker, %.0f%% with 4\n",
           bus[0].p50 > 0 ? 100 * raw1.p50 / bus[0].p50 : 0, bus[0].p50 - raw1.p50, ACT_INFLIGHT,
           rawn.rate > 0 ? 100 * bus[1].rate / rawn.rate : 0,
           rawn.rate > 0 ? 100 * bus[2].rate / rawn.rate : 0);
    return AB_BENCH_OK;
}

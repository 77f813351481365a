/*
 * bench_dispatch.c - `agentbus bench dispatch`: run dispatch through a
 * broker (docs/PROTOCOL.md 7.12, 7.13; docs/PERFORMANCE.md "Dispatch"), with
 * the durable `claim` round trip measured in the same row as its peer (one
 * store write and its answer: a start_run that is assigned at once costs two
 * store writes, the request's put and its move to assigned).
 *
 *   latency  one controller connection, one worker connection serving the
 *            row's agent (capacity 1024) and one publishing connection, all
 *            in this thread. Each round: start_run on a fresh thread, time
 *            until the worker holds the `assign`; RUN_STARTED published with
 *            the assignment's epoch; cancel_run, time until the worker holds
 *            the `run_cancel`; RUN_FINISHED (cancelled) published; a claim
 *            of a fresh run, timed. Rows at --durability fsync and process.
 *   runs/s   4 worker threads (capacity 8 each, a connection to serve and one
 *            to publish), each answering an assignment at once with one
 *            publish of RUN_STARTED + RUN_FINISHED; the controller keeps 32
 *            start_runs outstanding on distinct threads. Runs ended per
 *            second, at process and fsync.
 *
 * With --workers-broker EP (and --broker) the workers serve and publish
 * through EP, the controller sends start_run, cancel_run and the claims to
 * --broker: every assignment, cancel and end then crosses brokers
 * (docs/SCALING.md "Dispatch across brokers"), and the rows say so.
 *
 * Invariants:
 *  1. Every wait is bounded (ACT_WAIT_MS), and a row fails unless every
 *     request it made was assigned, and (runs/s) every assigned run ended.
 *  2. Each row uses an agent and ids no other row uses, so a --broker that
 *     keeps earlier rows' requests assigns nothing of theirs to this row.
 */
#include "ab_common.h"
#include "agentbus/client.h"
#include "bench.h"
#include "bench_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define D_WAIT_MS   10000
#define D_WORKERS   4
#define D_CAPACITY  8
#define D_INFLIGHT  32
#define D_LAT_ROUND 20000 /* latency rounds at most */

#define SV(s) ((ab_str_t){(s), strlen(s)})

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct lat {
    double *v;
    size_t n;
} lat_t;

/* The workers' endpoint: --workers-broker, else the controller's @p ep. */
static const char *workers_ep(const bench_opts_t *o, const char *ep)
{
    return o->workers_broker ? o->workers_broker : ep;
}

/* The row's durability column, marked when the workers are on the other broker. */
static const char *dur_of(const bench_opts_t *o, const char *durability, char *out, size_t size)
{
    snprintf(out, size, "%s%s", durability, o->workers_broker ? " 2brk" : "");
    return out;
}

static void lat_print(const char *what, const char *dur, lat_t *l)
{
    qsort(l->v, l->n, sizeof(double), cmp_dbl);
    double p50 = l->n ? l->v[l->n / 2] * 1e6 : 0;
    double p99 = l->n ? l->v[(size_t)((double)l->n * 0.99)] * 1e6 : 0;
    double mx = l->n ? l->v[l->n - 1] * 1e6 : 0;
    char row[96];
    snprintf(row, sizeof row, "%s %s", what, dur);
    bench_emit("dispatch", row, "p50_us", p50, "p99_us", p99, "max_us", mx, "rounds", (double)l->n,
               NULL);
    printf("dispatch %-34s %-7s p50 %7.0f us  p99 %7.0f us  max %7.0f us  (%zu rounds)\n", what,
           dur, p50, p99, mx, l->n);
}

static ab_conn_t *connect_to(const char *ep)
{
    ab_conn_t *c = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_new(&c, ep, NULL, &err) != AB_OK) {
        fprintf(stderr, "agentbus bench: connect %s: %s\n", ep, err.message);
        return NULL;
    }
    return c;
}

static int serve(ab_conn_t *w, ab_doc_t *doc, const char *agent, uint32_t cap)
{
    ab_served_agent_t a = {SV(agent), cap, NULL, 0};
    ab_msg_t m = {.op = AB_OP_SERVE}, r;
    m.u.serve = (ab_serve_t){SV("bench-dispatch"), &a, 1, 60000};
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_request(w, &m, NULL, 0, doc, &r, D_WAIT_MS, &err) != AB_OK ||
        r.op != AB_OP_SERVED) {
        fprintf(stderr, "agentbus bench: serve: %s\n", err.message);
        return -1;
    }
    return 0;
}

/* Publish the run's RUN_STARTED (seq 1) and/or its RUN_FINISHED with @p outcome. */
static int publish(ab_conn_t *p, ab_doc_t *doc, const char *th, const char *run, uint64_t epoch,
                   bool start, const char *outcome)
{
    char body[512];
    ab_buf_t ev[2] = {AB_BUF_INIT, AB_BUF_INIT};
    ab_error_t err = AB_ERROR_INIT;
    size_t n = 0;
    int rc = 0;
    if (start) {
        snprintf(body, sizeof body,
                 "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                 "\"protocolVersion\":\"1.0\"}",
                 th, run);
        rc |= ab_envelope_json(&ev[n++], 1, th, run, 1, epoch, body, &err) != AB_OK;
    }
    if (outcome) {
        snprintf(body, sizeof body,
                 "{\"type\":\"RUN_FINISHED\",\"threadId\":\"%s\",\"runId\":\"%s\","
                 "\"outcome\":{\"type\":\"%s\"}}",
                 th, run, outcome);
        rc |= ab_envelope_json(&ev[n++], 1, th, run, 2, epoch, body, &err) != AB_OK;
    }
    const ab_result_t *res = NULL;
    if (rc == 0 && ab_conn_publish(p, ev, n, doc, &res, D_WAIT_MS, &err) != AB_OK)
        rc = -1;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = res[i].status == AB_RESULT_ACCEPTED ? 0 : -1;
    if (rc != 0)
        fprintf(stderr, "agentbus bench: publish of run %s failed: %s\n", run, err.message);
    ab_buf_free(&ev[0]);
    ab_buf_free(&ev[1]);
    return rc;
}

/* Wait for an unsolicited @p op on @p w. */
static int expect(ab_conn_t *w, ab_doc_t *doc, ab_op_t op, ab_msg_t *m)
{
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_recv(w, 0, doc, m, D_WAIT_MS, &err) != AB_OK || m->op != op) {
        fprintf(stderr, "agentbus bench: expected %s, got %s (%s)\n", ab_op_name(op),
                ab_op_name(m->op), err.message);
        return -1;
    }
    return 0;
}

/* ---- latency rows ---------------------------------------------------------------- */

typedef struct latfx {
    ab_conn_t *c, *w, *p;
    ab_doc_t *doc, *wdoc;
    ab_kv_t kv;
    ab_val_t input;
    char agent[64];
    lat_t assign, cancel, claim;
} latfx_t;

/* One round (see the file comment); samples only when @p keep. */
static int round_once(latfx_t *f, int i, bool keep)
{
    char th[96], run[96], key[96];
    snprintf(th, sizeof th, "%s-t%d", f->agent, i);
    snprintf(run, sizeof run, "%s-r%d", f->agent, i);
    snprintf(key, sizeof key, "%s-k%d", f->agent, i);
    ab_msg_t m = {.op = AB_OP_START_RUN}, got;
    m.u.start_run = (ab_start_run_t){SV(f->agent), SV(th), SV(run), &f->input, SV(key), 0};
    ab_error_t err = AB_ERROR_INIT;
    uint64_t cid = 0;
    double t0 = ab__mono_s();
    if (ab_conn_send(f->c, &m, NULL, 0, &cid, &err) != AB_OK ||
        expect(f->w, f->wdoc, AB_OP_ASSIGN, &got) != 0)
        return -1;
    double t1 = ab__mono_s();
    uint64_t epoch = got.u.assign.epoch;
    if (ab_conn_recv(f->c, cid, f->doc, &m, D_WAIT_MS, &err) != AB_OK ||
        publish(f->p, f->doc, th, run, epoch, true, NULL) != 0)
        return -1;
    ab_msg_t cr = {.op = AB_OP_CANCEL_RUN};
    cr.u.cancel_run = (ab_cancel_run_t){SV(th), SV(run), {0}};
    double t2 = ab__mono_s();
    if (ab_conn_send(f->c, &cr, NULL, 0, &cid, &err) != AB_OK ||
        expect(f->w, f->wdoc, AB_OP_RUN_CANCEL, &got) != 0)
        return -1;
    double t3 = ab__mono_s();
    if (ab_conn_recv(f->c, cid, f->doc, &m, D_WAIT_MS, &err) != AB_OK ||
        publish(f->p, f->doc, th, run, epoch, false, "cancelled") != 0)
        return -1;
    snprintf(run, sizeof run, "%s-c%d", f->agent, i);
    ab_claimed_t cl;
    double t4 = ab__mono_s();
    if (ab_conn_claim(f->c, th, run, f->doc, &cl, D_WAIT_MS, &err) != AB_OK)
        return -1;
    double t5 = ab__mono_s();
    if (keep) {
        f->assign.v[f->assign.n++] = t1 - t0;
        f->cancel.v[f->cancel.n++] = t3 - t2;
        f->claim.v[f->claim.n++] = t5 - t4;
    }
    return 0;
}

static int latency_row(const bench_opts_t *o, const char *durability, int row)
{
    child_t ch;
    const char *ep;
    if (row_begin(o, &ch, durability, &ep) != 0)
        return -1;
    latfx_t f = {0};
    snprintf(f.agent, sizeof f.agent, "bd-%ld-%d", (long)getpid(), row);
    f.kv = (ab_kv_t){"messages", 8, {.type = AB_VAL_ARRAY}};
    f.input = (ab_val_t){.type = AB_VAL_MAP, .len = 1, .u.pairs = &f.kv};
    f.assign.v = calloc(D_LAT_ROUND, sizeof(double));
    f.cancel.v = calloc(D_LAT_ROUND, sizeof(double));
    f.claim.v = calloc(D_LAT_ROUND, sizeof(double));
    int rc = -1;
    const char *wep = workers_ep(o, ep);
    char dbuf[32];
    if (f.assign.v && f.cancel.v && f.claim.v && ab_doc_new(&f.doc) == AB_OK &&
        ab_doc_new(&f.wdoc) == AB_OK && (f.c = connect_to(ep)) && (f.w = connect_to(wep)) &&
        (f.p = connect_to(wep)) && serve(f.w, f.wdoc, f.agent, 1024) == 0) {
        rc = 0;
        int i = 0;
        for (; rc == 0 && i < 20; i++) /* warm-up */
            rc = round_once(&f, i, false);
        double end = ab__mono_s() + o->seconds;
        for (; rc == 0 && ab__mono_s() < end && f.assign.n < D_LAT_ROUND; i++)
            rc = round_once(&f, i, true);
    }
    if (rc == 0) {
        const char *dur = dur_of(o, durability, dbuf, sizeof dbuf);
        lat_print("start_run -> worker holds assign", dur, &f.assign);
        lat_print("cancel_run -> owner holds run_cancel", dur, &f.cancel);
        lat_print("peer: claim round trip (1 write)", dur, &f.claim);
    }
    ab_conn_destroy(&f.c);
    ab_conn_destroy(&f.w);
    ab_conn_destroy(&f.p);
    ab_doc_destroy(&f.doc);
    ab_doc_destroy(&f.wdoc);
    free(f.assign.v);
    free(f.cancel.v);
    free(f.claim.v);
    child_stop(&ch);
    return rc;
}

/* ---- runs per second ------------------------------------------------------------- */

typedef struct dworker {
    const char *ep, *agent;
    atomic_int *stop;
    atomic_ullong *ended;
    int failed;
    pthread_t th;
} dworker_t;

static void *dworker_main(void *arg)
{
    dworker_t *d = arg;
    ab_doc_t *doc = NULL, *pdoc = NULL;
    ab_conn_t *w = connect_to(d->ep), *p = connect_to(d->ep);
    d->failed = !w || !p || ab_doc_new(&doc) != AB_OK || ab_doc_new(&pdoc) != AB_OK ||
                serve(w, doc, d->agent, D_CAPACITY) != 0;
    while (!d->failed && !atomic_load(d->stop)) {
        ab_msg_t m;
        ab_status_t st = ab_conn_recv(w, 0, doc, &m, 50, NULL);
        if (st == AB_TIMEOUT)
            continue;
        if (st != AB_OK || m.op != AB_OP_ASSIGN) {
            d->failed = st != AB_OK;
            continue;
        }
        char th[128], run[160];
        snprintf(th, sizeof th, "%.*s", (int)m.u.assign.thread.len, m.u.assign.thread.ptr);
        snprintf(run, sizeof run, "%.*s", (int)m.u.assign.run.len, m.u.assign.run.ptr);
        if (publish(p, pdoc, th, run, m.u.assign.epoch, true, "success") != 0)
            d->failed = 1;
        else
            atomic_fetch_add(d->ended, 1);
    }
    ab_conn_destroy(&w);
    ab_conn_destroy(&p);
    ab_doc_destroy(&doc);
    ab_doc_destroy(&pdoc);
    return NULL;
}

/* Keep D_INFLIGHT start_runs outstanding until @p seconds pass; @return runs sent. */
static long controller(ab_conn_t *c, ab_doc_t *doc, const char *agent, double seconds,
                       atomic_ullong *ended, long first)
{
    ab_kv_t kv = {"messages", 8, {.type = AB_VAL_ARRAY}};
    ab_val_t input = {.type = AB_VAL_MAP, .len = 1, .u.pairs = &kv};
    long sent = first;
    double end = ab__mono_s() + seconds;
    while (ab__mono_s() < end) {
        while (sent - first - (long)atomic_load(ended) < D_INFLIGHT) {
            char th[96], key[96];
            snprintf(th, sizeof th, "%s-t%ld", agent, sent);
            snprintf(key, sizeof key, "%s-k%ld", agent, sent);
            ab_msg_t m = {.op = AB_OP_START_RUN};
            m.u.start_run = (ab_start_run_t){SV(agent), SV(th), {0}, &input, SV(key), 0};
            if (ab_conn_send(c, &m, NULL, 0, NULL, NULL) != AB_OK)
                return -1;
            sent++;
        }
        ab_msg_t r;
        while (ab_conn_recv(c, 0, doc, &r, 1, NULL) == AB_OK) /* the run_accepted answers */
            ;
    }
    return sent - first;
}

static int runs_row(const bench_opts_t *o, const char *durability, int row)
{
    child_t ch;
    const char *ep;
    if (row_begin(o, &ch, durability, &ep) != 0)
        return -1;
    char agent[64];
    snprintf(agent, sizeof agent, "bd-%ld-%d", (long)getpid(), row);
    atomic_int stop;
    atomic_ullong ended;
    atomic_init(&stop, 0);
    atomic_init(&ended, 0);
    dworker_t w[D_WORKERS];
    for (int i = 0; i < D_WORKERS; i++) {
        w[i] = (dworker_t){.ep = workers_ep(o, ep), .agent = agent, .stop = &stop, .ended = &ended};
        pthread_create(&w[i].th, NULL, dworker_main, &w[i]);
    }
    ab_doc_t *doc = NULL;
    ab_conn_t *c = connect_to(ep);
    long sent = -1;
    double dt = 0, cpu0 = ch.pid ? proc_cpu_s(ch.pid) : 0;
    if (c && ab_doc_new(&doc) == AB_OK) {
        sent = controller(c, doc, agent, 1.0, &ended, 0); /* warm-up */
        unsigned long long e0 = atomic_load(&ended);
        double t0 = ab__mono_s();
        long more = sent >= 0 ? controller(c, doc, agent, o->seconds, &ended, sent) : -1;
        dt = ab__mono_s() - t0;
        double until = ab__mono_s() + D_WAIT_MS / 1000.0;
        while (more >= 0 && (long)atomic_load(&ended) < sent + more && ab__mono_s() < until)
            usleep(1000); /* the last runs end (bounded) */
        unsigned long long got = atomic_load(&ended);
        if (more < 0 || (long)got != sent + more) {
            fprintf(stderr, "agentbus bench: %llu of %ld runs ended\n", got, sent + more);
            sent = -1;
        } else {
            double cpu = ch.pid ? proc_cpu_s(ch.pid) - cpu0 : -1;
            char dbuf[32];
            durability = dur_of(o, durability, dbuf, sizeof dbuf);
            printf("dispatch %-34s %-7s %8.0f runs/s  (%ld runs, %d workers x capacity %d, %d "
                   "outstanding; broker CPU %s%.0f us per run)\n",
                   "runs started and ended", durability, dt > 0 ? (double)(got - e0) / dt : 0, more,
                   D_WORKERS, D_CAPACITY, D_INFLIGHT, cpu < 0 ? "n/a " : "",
                   cpu < 0 ? 0 : cpu * 1e6 / (double)got);
        }
    }
    atomic_store(&stop, 1);
    int failed = 0;
    for (int i = 0; i < D_WORKERS; i++) {
        pthread_join(w[i].th, NULL);
        failed |= w[i].failed;
    }
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    child_stop(&ch);
    return sent < 0 || failed ? -1 : 0;
}

int bench_dispatch(const bench_opts_t *o)
{
    static const char *const dur[] = {"fsync", "process"};
    int row = 0;
    for (int i = 0; i < 2; i++)
        if (latency_row(o, dur[i], ++row) != 0)
            return AB_BENCH_FAIL;
    for (int i = 0; i < 2; i++)
        if (runs_row(o, dur[i], ++row) != 0)
            return AB_BENCH_FAIL;
    return AB_BENCH_OK;
}

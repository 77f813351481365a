/*
 * bench_int.h - what the bus benchmarks share (bench/bench_bus.c: ingest,
 * latency, replay, zmq and the entry; bench/bench_fanout.c: fanout;
 * bench/bench_actions.c: actions). Not installed.
 */
#ifndef AB_BENCH_INT_H
#define AB_BENCH_INT_H

#include "agentbus/client.h"
#include "bench.h"
#include "spawn.h"
#include "stalls.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PRODUCERS  4
#define RUNS       100
#define BATCH      256
#define PIPE       4
#define EVENT_SIZE 256
#define LAT_MAX    (1u << 20)

/* Producers' connections: --frame-per-event (a process-wide knob of the rows). */
extern bool g_frame_per_event;
extern bool g_text; /* replay --text: content events carry varied text (build_event) */
/* Broker children: --snapshot-every N when given (NULL: the broker's default). */
extern const char *g_snapshot_every;

typedef spawn_broker_t child_t; /* a broker child (demo/spawn.c) */

/* A content body padded so the envelope is about EVENT_SIZE bytes. */
typedef struct bodies {
    ab_buf_t content_mp;
    ab_doc_t *doc;
    const ab_val_t *content;
} bodies_t;

/* How bench scale sends a batch's events to a producer's R runs (event k of the row, warm-up
 * included, is the producer's k-th): SPREAD_TURN to run k mod R, each run in turn;
 * SPREAD_SCATTER, after the warm-up, to run 7919 k mod R, neighbours in a batch 7919 runs apart
 * (7919 is prime and R is 2^i 5^j, so every run still gets one event in every R), as runs that
 * publish whenever their agent speaks arrive at a broker. */
typedef enum spread { SPREAD_NONE, SPREAD_TURN, SPREAD_SCATTER } spread_t;

/* A broker's group commits, from its stats answer: commits and events committed since it
 * started, and its commit (write + sync) times over its last `window` commits. */
typedef struct commit_figs {
    bool known; /* false: the broker did not answer */
    uint64_t commits, events;
    uint64_t p50_us, p90_us, p99_us, max_us, window;
} commit_figs_t;

/* Ask the broker at @p ep (a connection of its own on @p ctx) for its commit figures. */
void commit_figs_of(const char *ep, void *ctx, commit_figs_t *out);

/** Names of a broker's threads kept by one reading (bench_threads.c invariant 3). */
#define BENCH_THREADS_MAX 32

/** One thread name's CPU seconds (a reading), or its share of a core (a row's figure). */
typedef struct bench_thread {
    char name[16]; /* /proc/PID/task/TID/comm: at most 15 bytes */
    double cpu_s;
} bench_thread_t;

/** A reading of a process's CPU by thread name (bench_threads.c). */
typedef struct bench_threads {
    bool ok;   /* the process's threads were read */
    double at; /* ab__mono_s() of the reading */
    int n;
    bench_thread_t th[BENCH_THREADS_MAX];
} bench_threads_t;

/** The CPU seconds (user + system) in the /proc stat file at @p path (a process's or a
 *  thread's) and, when @p name is not NULL, its name into @p name (@p size bytes);
 *  false when the file cannot be read or parsed. */
bool stat_cpu_s(const char *path, char *name, size_t size, double *cpu);
/** Read the CPU seconds of each thread name of process @p pid (none when pid is 0). */
void bench_threads_read(pid_t pid, bench_threads_t *t);
/** Print, and emit as the JSON row "threads, LABEL" of bench ingest, each thread name's
 *  share of one core between the readings @p begin and @p end (nothing unless both read). */
void bench_threads_line(const char *label, const bench_threads_t *begin,
                        const bench_threads_t *end);

/* bench scale's start line: producers warm their runs up, then start together. */
typedef struct warm_gate {
    pthread_barrier_t barrier;   /* of every producer of the row */
    pid_t broker;                /* the row's broker child (0: --broker, CPU not read) */
    const char *ep;              /* the row's broker, asked for its commit figures ... */
    void *ctx;                   /* ... on this context */
    double t_begin;              /* ab__mono_s() when the producers were started */
    double t0;                   /* ab__mono_s() when the clock started */
    double cpu_self, cpu_broker; /* CPU seconds read then */
    bench_threads_t threads;     /* the broker's, by thread, read then */
    commit_figs_t figs;          /* the broker's commit figures then */
} warm_gate_t;

/* One producer thread of a row: its settings, then its results. */
typedef struct prod {
    const char *endpoint;
    void *ctx;
    const bodies_t *bodies;
    int id;
    int nruns;
    int batch;
    int pipe;
    double seconds;
    double rate; /* events/s for this producer, 0 = as fast as possible */
    const char *thread_fmt;
    bool want_lat;       /* record publish-to-ack times */
    uint64_t max_events; /* stop after this many events sent, 0 = no limit */
    /* appended to every run id ("" = none): fresh runs on a broker (--broker) that already
     * holds an earlier row's or run's, so the load is not answered as duplicates */
    char run_tag[24];
    spread_t spread; /* how a batch's events go to runs (bench scale), or one run a batch */
    /* runs per thread (0 = all of a producer's runs in its one thread): run r is in thread
     * "<thread_fmt>-<r / runs_per_thread>" */
    int runs_per_thread;
    /* non-NULL: warm up before the clock (every run's first two events), then start with
     * the row's other producers (bench scale) */
    warm_gate_t *gate;
    /* bench latency's delivery rows: the send time of batch k (ab__mono_s()), k < nsent;
     * NULL = not kept */
    _Atomic double *sent;
    size_t nsent;
    /* results */
    uint64_t acked;
    uint64_t rejected;
    uint64_t duplicates; /* counted in acked too: the broker found them already stored */
    double *lat;         /* publish-to-ack seconds, LAT_MAX entries, may be NULL */
    size_t nlat;
    bench_spans_t *slow; /* non-NULL: publishes acked after BENCH_SLOW_S or more (--stalls) */
    int failed;
} prod_t;

/** Stop a broker child started for a row (no-op when none). */
void child_stop(child_t *ch);
/** The row's endpoint: --broker, or a broker child started with @p durability. 0 or -1. */
int row_begin(const bench_opts_t *o, child_t *ch, const char *durability, const char **ep);
/** What a row of @p durability is named: "broker" against --broker, whose durability the
 *  bench cannot know, else @p durability. */
static inline const char *row_durability(const bench_opts_t *o, const char *durability)
{
    return o->broker ? "broker" : durability;
}
/** The ingest load's producer: RUNS / PRODUCERS runs, BATCH events per publish, PIPE in flight. */
prod_t load_producer(const char *ep, void *ctx, const bodies_t *b, double seconds,
                     const char *thread_fmt);
/** A run tag no earlier row of this process (nor, most likely, another process) used. */
void bench_run_tag(char out[24]);
/** Run the @p n producers set up in @p ps (their ids set here); acknowledged events/s, or -1. */
double run_producers_into(prod_t *ps, int n);
/** One ingest row (bench ingest): acknowledged events/s printed and returned, or -1. */
double ingest_row(const bench_opts_t *o, void *ctx, const bodies_t *b, const char *durability);
/** An ingest row with @p runs runs in flight (spread over the producers); @p spread: each
 * event of a batch to another run (so every run gets events all the time), SPREAD_NONE for
 * a batch to one run; @p runs_per_thread: prod_t.runs_per_thread. */
double ingest_row_runs(const bench_opts_t *o, void *ctx, const bodies_t *b, const char *durability,
                       int runs, spread_t spread, int runs_per_thread);
/** `agentbus bench scale` (bench_latency.c): ingest with 100, 10,000 and 100,000 runs in
 * 4 threads, and 100,000 runs in a thread each, each batch's events to the runs in turn and
 * scattered over them. */
int bench_scale(const bench_opts_t *o, void *ctx, const bodies_t *b);
/** `agentbus bench latency` (bench_latency.c). */
int bench_latency(const bench_opts_t *o, void *ctx, const bodies_t *b);
/** Run @p n producers like @p tmpl into @p out; acknowledged events/s, or -1. */
double run_producers(const prod_t *tmpl, int n, prod_t *out);
/** A ZeroMQ socket, linger 0, bound (@p bind_ep, its endpoint into @p ep) or connected to @p ep. */
void *zsock(void *ctx, int type, const char *bind_ep, char *ep, size_t size);
/** CPU seconds (user + system) process @p pid has used (/proc/PID/stat); 0 if unknown. */
double proc_cpu_s(pid_t pid);
/** CPU seconds this process has used, all threads. */
double self_cpu_s(void);
/** `agentbus bench actions` (bench/bench_actions.c). */
int bench_actions(const bench_opts_t *o);
/** `agentbus bench dispatch` (bench/bench_dispatch.c). */
int bench_dispatch(const bench_opts_t *o);
/** `agentbus bench gateway` (bench/bench_gateway.c). */
int bench_gateway(const bench_opts_t *o);
/** `agentbus bench replay` (bench_bus.c): its rows against o->broker or a child. */
int bench_replay(const bench_opts_t *o, void *ctx, const bodies_t *b);
/** `agentbus bench pg` (bench/bench_pg.c): the PostgreSQL plugin beside SQLite; fails
 *  at once in a build without libpq. */
int bench_pg(const bench_opts_t *o, void *ctx, const bodies_t *b);
/** `agentbus bench fanout` (bench/bench_fanout.c). */
int bench_fanout(const bench_opts_t *o, void *ctx, const bodies_t *b);

#endif

/*
 * bench.h - the `agentbus bench` suite (bench/, linked into the agentbus
 * command; cli/bench_cmd.c parses the command line and calls these).
 *
 * Each function runs its rows, prints one line per row to stdout (the
 * figures docs/PERFORMANCE.md records) and returns an exit status: 0, or 1
 * when a row could not run or its load failed. Not installed.
 */
#ifndef AB_BENCH_H
#define AB_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define AB_BENCH_OK   0
#define AB_BENCH_FAIL 1

/** Options of the bus benchmarks (ingest, latency, replay, zmq, fanout, actions). */
typedef struct bench_opts {
    const char *broker;         /**< a running broker's endpoint; NULL: start one per row */
    double seconds;             /**< measuring time per row */
    int rounds;                 /**< fanout: rounds of the 4-subscriber rows (1 ... 64) */
    bool frame_per_event;       /**< producers do not pack publishes */
    bool text;                  /**< replay (and pg's replay rows): varied text (--text) */
    const char *snapshot_every; /**< the broker children's --snapshot-every; NULL: theirs */
    double rate;                /**< ingest: events/s of all producers together; 0 = as fast as
                                     they can */
    const char *workers_broker; /**< dispatch: the workers' broker (another broker on the store
                                     of --broker); NULL: the workers use the controller's */
    uint64_t replay_events;     /**< replay (and pg's replay rows): the events of the run and of
                                     the thread replayed; 0 = 100,000 */
    const char *row;            /**< latency: only "light" (the floor, then the light fsync ack
                                     row) or "loaded" (the fsync maximum, then the 80% ack row),
                                     `rounds` times; scale: a row bench_scale_row_known()
                                     takes, after the 100-run row, `rounds` times; NULL =
                                     every row once */
    const char *durability;     /**< scale: the durability of the brokers it starts ("fsync" or
                                     "process"); NULL = fsync */
    bool stalls;                /**< latency: log every sample over 5 ms and the bench
                                     process's own timer stalls, and say how many of the one
                                     overlapped the other (bench/stalls.h) */
} bench_opts_t;

/** `bench proto`: decode + validate on one core; @p only_size 0 = 256 B and 2 KiB rows. */
int bench_proto(double seconds, size_t only_size);

/** `bench reducer`: events/s folded on one core. */
int bench_reducer(double seconds);

/** `bench snapshot`: SNAPSHOT answer times of a ~100,000-event thread. */
int bench_snapshot(void);

/** Whether @p name is a bus benchmark (ingest, latency, replay, zmq, fanout, actions). */
bool bench_is_bus(const char *name);

/** Whether @p name is a row `bench scale --row` takes ("10000", "100000", "100000-each", and
 * each with "-scatter"). */
bool bench_scale_row_known(const char *name);

/** Run the bus benchmark @p name with @p o (bench_is_bus(name) must hold). */
int bench_bus(const char *name, const bench_opts_t *o);

/* ---- --json (bench_json.c) ---------------------------------------------- */

/** Write the rows as JSON to @p out from now on (NULL: off). */
void bench_json_open(FILE *out);

/** Whether --json is on. */
bool bench_json_on(void);

/**
 * One result row as JSON (nothing without --json): @p bench, a @p row label,
 * then (const char *name, double value) pairs ending with NULL.
 */
void bench_emit(const char *bench, const char *row, ...);

/** One result row as JSON like bench_emit(), its @p n figures named by @p keys. */
void bench_emit_pairs(const char *bench, const char *row, int n, const char *const *keys,
                      const double *vals);

#endif /* AB_BENCH_H */

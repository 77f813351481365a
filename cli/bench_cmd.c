/*
 * bench_cmd.c - `agentbus bench NAME [options]`: the command line of the
 * benchmark suite (bench/, bench.h). Options may stand before or after the
 * benchmark's name; each benchmark takes the options listed in its help.
 *
 * Invariants:
 *  1. Every option is checked here, with the usage error format of the
 *     command (cli_usage_error); the benchmarks get parsed values only.
 *  2. An option a benchmark does not take is a usage error, not ignored.
 */
#include "bench.h"
#include "cli.h"

#include <ctype.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
    OPT_SIZE = 1,
    OPT_ROUNDS,
    OPT_FRAME,
    OPT_SNAP,
    OPT_JSON,
    OPT_RATE,
    OPT_WORKERS,
    OPT_EVENTS,
    OPT_TEXT,
    OPT_ROW,
    OPT_STALLS,
    OPT_DURABILITY
};

typedef struct bench_args {
    bench_opts_t bus;
    double seconds; /* 0: the benchmark's default */
    size_t size;
    bool seen_bus_only, seen_size;
    bool seen_rounds;               /* --rounds: fanout, and latency or scale with --row */
    bool seen_frame;                /* --frame-per-event: the benchmarks that publish */
    bool seen_rate;                 /* --rate: ingest only */
    bool seen_workers;              /* --workers-broker: dispatch only, with --broker */
    bool seen_events;               /* --events: replay and pg only */
    bool seen_row;                  /* --row: latency and scale only */
    bool json;                      /* --json: rows as JSON on stdout, the human lines on stderr */
    char broker[300], workers[300]; /* --broker, --workers-broker, expanded (HOST:PORT) */
} bench_args_t;

/* Endpoint @p arg of flag @p flag into @p out (HOST:PORT and :PORT expanded as every
 * command's, cli_broker_endpoint), checked. @return 0, or AB_EXIT_USAGE (printed). */
static int take_endpoint(const char *flag, const char *arg, char *out, size_t size)
{
    if (arg[0] == '\0')
        return cli_usage_error("bench", "%s needs an endpoint", flag);
    snprintf(out, size, "%s", cli_broker_endpoint(arg));
    return cli_check_endpoint("bench", flag, out);
}

static void help(void)
{
    printf("usage: agentbus bench NAME [options]\n\n"
           "  proto      decode + validate throughput of the protocol library, one core,\n"
           "             256-byte and 2 KiB events (and the parse-only ceiling)\n"
           "  reducer    events/s folded into a thread projection on one core, and its\n"
           "             whole snapshot document written and loaded (documents/s)\n"
           "  snapshot   SNAPSHOT answer time of a ~100,000-event thread (a broker it starts),\n"
           "             and whether the first after a restart met issue 15's target (< 50 ms)\n"
           "  ingest     acknowledged events/s (fsync and process durability), broker peak RSS,\n"
           "             and the group commits the broker made in each row (how many, their\n"
           "             mean size, commit p50/p90/p99/max), and the CPU each of the broker's\n"
           "             threads used (a core's share; one near 1.00 bounds the row); scale's\n"
           "             rows print them too (not against --broker)\n"
           "  scale      fsync ingest (--durability: process) with 100, 10,000 and 100,000\n"
           "             runs in flight at once in 4 threads, and 100,000 runs in a thread\n"
           "             each, beside the 100-run figure of the same run (the broker caches\n"
           "             131,072 runs); each batch's events go to the runs in turn, then\n"
           "             (-scatter rows) to runs 7919 apart; the runs are started before the\n"
           "             clock, at a rate it prints (warm-up); then whether each 100,000-run\n"
           "             row met issue 15's target (at least 70%% of the 100-run figure)\n"
           "  latency    the floor (write+fdatasync, ZeroMQ round trip), publish-to-ack and\n"
           "             publish-to-live-delivery (1 and 4 subscribers) at 1,000 events/s and\n"
           "             at 80%% of the maximum: p50, p90, p99, p99.9, max; then which of issue\n"
           "             15's targets the rows met (`target` lines: figure, limit, verdict)\n"
           "  replay     events/s delivered replaying one 100k-event run, a whole thread of\n"
           "             10 runs and everything both hold (--events: other sizes)\n"
           "  zmq        raw ZeroMQ ceilings on loopback (round trips/s, messages/s)\n"
           "  fanout     live delivery to 1 and 4 subscribers while ingesting, beside raw\n"
           "             ZeroMQ PUB/SUB fan-out measured in the same run\n"
           "  dispatch   start_run -> assign and cancel_run -> run_cancel p50/p99 beside a claim\n"
           "             round trip; runs started and ended per second with 4 workers\n"
           "  actions    invoke_action -> worker -> action_reply round trips: p50/p99/max one\n"
           "             at a time and calls/s with 32 in flight (1 and 4 worker threads),\n"
           "             beside a raw ZeroMQ two-hop relay measured in the same run\n"
           "  gateway    the HTTP gateway: events/s to 1 and 100 SSE clients of a thread, to\n"
           "             1 while another thread is written at once, and publish -> SSE\n"
           "             latency p50/p99, beside ZeroMQ subscribers\n"
           "  pg         the PostgreSQL plugin beside an SQLite broker in the same run: ingest\n"
           "             with 1 and 2 brokers, with and without a synchronous standby, replay,\n"
           "             publish-to-ack p50/p99 and the failover stall (servers it starts)\n\n");
    printf("options:\n"
           "  --seconds S         measuring time per row (default 2 for proto and reducer,\n"
           "                      5 for the bus benchmarks)\n"
           "  --size B            proto: only events of about B bytes (128 ... 65536)\n"
           "  --broker ENDPOINT   bus benchmarks: a running broker instead of one per row\n"
           "                      (durability is then the broker's: the rows say broker for\n"
           "                      it, and ingest and latency run no process row)\n"
           "  --workers-broker EP dispatch, with --broker: the workers connect to (and publish\n"
           "                      through) broker EP, another broker on the store of --broker,\n"
           "                      the controller to --broker: dispatch across brokers\n"
           "  --rounds N          fanout: repeat the 4-subscriber rows N times (1 ... 64);\n"
           "                      latency and scale, with --row: repeat that row N times\n"
           "  --row light|loaded|delivery\n"
           "                      latency: only the floor and the light fsync ack row; only\n"
           "                      the fsync maximum and the ack row at 80%% of it; or that\n"
           "                      maximum and the delivery rows (1 and 4 subscribers at\n"
           "                      1,000/s, at 80%% of it, their own maximum and 80%% of that)\n"
           "  --row 10000|100000|100000-each[-scatter]\n"
           "                      scale: only the 100-run row and that one, in turn\n"
           "  --durability fsync|process\n"
           "                      scale: the durability of the brokers it starts (default\n"
           "                      fsync): with process, how much of each row is the fsync\n"
           "  --stalls            latency: after each floor and ack row, its samples over\n"
           "                      5 ms and how many overlapped a stall (a wake-up 2 ms late\n"
           "                      or more) of a 1 ms timer thread in this process\n"
           "  --events N          replay, pg: N events in the run and N in the thread\n"
           "                      (1000 ... 10000000; default 100000): replay against size\n"
           "  --rate N            ingest: publish N events/s in all (the 4 producers share\n"
           "                      it) instead of as fast as the broker acknowledges\n"
           "                      and print the median share of raw\n"
           "  --frame-per-event   ingest, latency, replay, fanout: publish one frame per\n"
           "                      envelope, not packed\n"
           "  --text              replay, pg: the replayed stores' content events carry 1-4\n"
           "                      words of varied text instead of one repeated body (which\n"
           "                      stores compress far better than real streams)\n"
           "  --snapshot-every N  bus benchmarks: the broker children's --snapshot-every\n"
           "  --json              each result row also as one JSON object on stdout\n"
           "                      ({\"bench\",\"row\", figure: number ...}); the human lines\n"
           "                      go to stderr\n\n"
           "Figures and the machine they were measured on: docs/PERFORMANCE.md.\n");
}

/* One option (invariant 1). @return 0, or AB_EXIT_USAGE after the error message. */
static int take(int c, bench_args_t *a)
{
    char *end = NULL;
    if (c == 's') {
        if (!cli_parse_seconds(optarg, 600, &a->seconds))
            return cli_usage_error("bench", "--seconds takes a number in (0, 600]");
    } else if (c == OPT_SIZE) {
        unsigned long v = strtoul(optarg, &end, 10);
        if (!isdigit((unsigned char)optarg[0]) || *end || v < 128 || v > 65536)
            return cli_usage_error("bench", "--size takes bytes in [128, 65536]");
        a->size = v;
        a->seen_size = true;
    } else if (c == 'b') {
        if (take_endpoint("--broker", optarg, a->broker, sizeof a->broker) != 0)
            return AB_EXIT_USAGE;
        a->bus.broker = a->broker;
        a->seen_bus_only = true;
    } else if (c == OPT_ROUNDS) {
        long r = strtol(optarg, &end, 10);
        if (*end || r < 1 || r > 64)
            return cli_usage_error("bench", "--rounds takes a whole number from 1 to 64");
        a->bus.rounds = (int)r;
        a->seen_bus_only = a->seen_rounds = true;
    } else if (c == OPT_RATE) {
        double r = strtod(optarg, &end);
        if (*end || !isdigit((unsigned char)optarg[0]) || r < 1 || r > 1e8)
            return cli_usage_error("bench", "--rate takes events per second in [1, 100000000]");
        a->bus.rate = r;
        a->seen_bus_only = a->seen_rate = true;
    } else if (c == OPT_EVENTS) {
        unsigned long long n = strtoull(optarg, &end, 10);
        if (*end || !isdigit((unsigned char)optarg[0]) || n < 1000 || n > 10000000)
            return cli_usage_error("bench", "--events takes a whole number in [1000, 10000000]");
        a->bus.replay_events = n;
        a->seen_events = true;
    } else if (c == OPT_ROW) {
        if (strcmp(optarg, "light") != 0 && strcmp(optarg, "loaded") != 0 &&
            strcmp(optarg, "delivery") != 0 && !bench_scale_row_known(optarg))
            return cli_usage_error("bench", "--row takes light, loaded or delivery (latency), "
                                            "or 10000, "
                                            "100000 or 100000-each, each also with -scatter "
                                            "(scale)");
        a->bus.row = optarg;
        a->seen_row = true;
    } else if (c == OPT_WORKERS) {
        if (take_endpoint("--workers-broker", optarg, a->workers, sizeof a->workers) != 0)
            return AB_EXIT_USAGE;
        a->bus.workers_broker = a->workers;
        a->seen_bus_only = a->seen_workers = true;
    } else if (c == OPT_JSON) {
        a->json = true;
    } else if (c == OPT_TEXT) {
        a->bus.text = true;
    } else if (c == OPT_STALLS) {
        a->bus.stalls = true;
    } else if (c == OPT_DURABILITY) {
        if (strcmp(optarg, "fsync") != 0 && strcmp(optarg, "process") != 0)
            return cli_usage_error("bench", "--durability takes fsync or process");
        a->bus.durability = optarg;
    } else if (c == OPT_FRAME) {
        a->bus.frame_per_event = true;
        a->seen_bus_only = a->seen_frame = true;
    } else if (c == OPT_SNAP) {
        unsigned long n = strtoul(optarg, &end, 10);
        if (*end || !isdigit((unsigned char)optarg[0]) || n > UINT32_MAX)
            return cli_usage_error("bench", "--snapshot-every takes a whole number");
        a->bus.snapshot_every = optarg;
        a->seen_bus_only = true;
    } else {
        return cli_bad_option("bench", c);
    }
    return 0;
}

/* --json: the rows go to the real stdout as JSON; fd 1 (every human line, the
 * brokers the rows start) becomes stderr. @return 0 or -1 (said). */
static int json_stdout(void)
{
    fflush(stdout);
    int real = dup(STDOUT_FILENO);
    FILE *out = real >= 0 ? fdopen(real, "w") : NULL;
    if (out == NULL || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
        fprintf(stderr, "agentbus bench: --json: cannot keep standard output apart\n");
        if (out)
            fclose(out);
        return -1;
    }
    bench_json_open(out);
    return 0;
}

/* Options and the one benchmark name. @return 0, -1 after --help, or AB_EXIT_USAGE. */
static int parse(int argc, char **argv, bench_args_t *a, const char **name)
{
    static const struct option lo[] = {
        {"seconds", required_argument, NULL, 's'},
        {"size", required_argument, NULL, OPT_SIZE},
        {"broker", required_argument, NULL, 'b'},
        {"rounds", required_argument, NULL, OPT_ROUNDS},
        {"frame-per-event", no_argument, NULL, OPT_FRAME},
        {"text", no_argument, NULL, OPT_TEXT},
        {"snapshot-every", required_argument, NULL, OPT_SNAP},
        {"json", no_argument, NULL, OPT_JSON},
        {"rate", required_argument, NULL, OPT_RATE},
        {"workers-broker", required_argument, NULL, OPT_WORKERS},
        {"events", required_argument, NULL, OPT_EVENTS},
        {"row", required_argument, NULL, OPT_ROW},
        {"stalls", no_argument, NULL, OPT_STALLS},
        {"durability", required_argument, NULL, OPT_DURABILITY},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    *name = NULL;
    while (optind < argc) {
        if ((c = cli_getopt(argc, argv, "+:hs:b:", lo, NULL)) == -1) {
            if (*name != NULL)
                return cli_usage_error("bench", "unexpected argument '%s'", argv[optind]);
            *name = argv[optind++]; /* options may follow the name */
            continue;
        }
        if (c == 'h') {
            help();
            return -1;
        }
        int rc = take(c, a);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    bench_args_t a = {.bus = {.rounds = 1}};
    const char *name = NULL;
    int rc = parse(argc, argv, &a, &name);
    if (rc != 0)
        return rc < 0 ? AB_EXIT_OK : rc;
    if (name == NULL)
        return cli_usage_error("bench", "name a benchmark: proto, reducer, snapshot, ingest, "
                                        "scale, latency, replay, zmq, fanout, dispatch, "
                                        "actions, gateway, pg");
    bool bus = bench_is_bus(name);
    if (a.seen_bus_only && !bus)
        return cli_usage_error("bench", "--broker, --rounds, --frame-per-event, "
                                        "--snapshot-every, --rate and --workers-broker are for "
                                        "the bus benchmarks");
    if (a.seen_workers && strcmp(name, "dispatch") != 0)
        return cli_usage_error("bench", "--workers-broker is for bench dispatch");
    if (a.seen_workers && a.bus.broker == NULL)
        return cli_usage_error("bench", "--workers-broker needs --broker (two running brokers "
                                        "on one shared store)");
    bool latency_row =
        a.seen_row && (strcmp(a.bus.row, "light") == 0 || strcmp(a.bus.row, "loaded") == 0 ||
                       strcmp(a.bus.row, "delivery") == 0);
    if (a.seen_row && strcmp(name, latency_row ? "latency" : "scale") != 0)
        return cli_usage_error("bench", latency_row ? "--row light|loaded|delivery is for bench "
                                                      "latency"
                                                    : "--row RUNS is for bench scale");
    if (a.seen_rounds && strcmp(name, "fanout") != 0 && !a.seen_row)
        return cli_usage_error("bench", "--rounds is for bench fanout, and bench latency or "
                                        "scale with --row");
    if (a.seen_events && strcmp(name, "replay") != 0 && strcmp(name, "pg") != 0)
        return cli_usage_error("bench", "--events is for bench replay and bench pg");
    if (a.bus.stalls && strcmp(name, "latency") != 0)
        return cli_usage_error("bench", "--stalls is for bench latency");
    if (a.bus.durability && strcmp(name, "scale") != 0)
        return cli_usage_error("bench", "--durability is for bench scale");
    if (a.bus.durability && a.bus.broker)
        return cli_usage_error("bench", "--durability sets the brokers bench scale starts; a "
                                        "broker given with --broker keeps its own");
    if (a.bus.text && strcmp(name, "replay") != 0 && strcmp(name, "pg") != 0)
        return cli_usage_error("bench", "--text is for bench replay and bench pg");
    if (a.seen_rate && strcmp(name, "ingest") != 0)
        return cli_usage_error("bench", "--rate is for bench ingest");
    if (a.seen_frame &&
        (strcmp(name, "zmq") == 0 || strcmp(name, "actions") == 0 || strcmp(name, "dispatch") == 0))
        return cli_usage_error("bench", "--frame-per-event is for the benchmarks that publish "
                                        "(ingest, latency, replay, fanout)");
    if (a.seen_size && strcmp(name, "proto") != 0)
        return cli_usage_error("bench", "--size is for bench proto");
    if (a.json && json_stdout() != 0)
        return AB_EXIT_FAIL;
    if (strcmp(name, "proto") == 0)
        return bench_proto(a.seconds > 0 ? a.seconds : 2.0, a.size);
    if (strcmp(name, "reducer") == 0)
        return bench_reducer(a.seconds > 0 ? a.seconds : 2.0);
    if (strcmp(name, "snapshot") == 0)
        return a.seconds > 0 ? cli_usage_error("bench", "snapshot takes no --seconds")
                             : bench_snapshot();
    if (!bus)
        return cli_usage_error("bench", "unknown benchmark '%s'", name);
    a.bus.seconds = a.seconds > 0 ? a.seconds : 5.0;
    return bench_bus(name, &a.bus);
}

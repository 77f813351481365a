/*
 * demo_cmd.c - `agentbus demo [options]`: the command line of the demo
 * fabric (demo/, demo.h). The audit it hands the demo is the command's own
 * `agentbus replay --verify` (cmd_replay).
 */
#include "cli.h"
#include "demo.h"

#include <getopt.h>
#include <stdio.h>

static void print_help(void)
{
    printf("usage: agentbus demo [--broker E] [--data DIR] [--agents N] [--runs N] [--pace MS]\n"
           "                     [--python SCRIPT] [--json] [--no-color] [--secure]\n\n"
           "Run a demo fabric: a broker, N agent workers publishing realistic AG-UI runs on one\n"
           "thread (text streaming, tool calls with results, state deltas, an interrupted run\n"
           "and its resumed run, a failed and a cancelled run) and an observer showing them\n"
           "live; then check exactly-once delivery, audit the thread (replay --verify) and\n"
           "print a summary. Exit 0 when everything checks out, 1 otherwise.\n\n"
           "options:\n"
           "  --broker E   use the broker at command endpoint E (default: start one; it gets\n"
           "               127.0.0.1 ephemeral ports and is stopped at the end)\n"
           "  --data DIR   data directory of the started broker (default: a new temporary\n"
           "               directory under $TMPDIR or /tmp, kept for you to inspect)\n"
           "  --agents N   agent worker processes (default 3, at most %d)\n"
           "  --runs N     at least N runs, cycling planner, researcher, approval + resume,\n"
           "               failing, cancelled (default 6: one of each)\n"
           "  --pace MS    delay between an agent's events (default 40; 0 = flat out)\n"
           "  --python SCRIPT  then run SCRIPT (python/examples/worker_agent.py) as a Python\n"
           "               worker of agent demo-py with $AGENTBUS_PYTHON (default python3) and\n"
           "               dispatch a run to it: interrupted, approved, resumed\n"
           "  --json       observer events as JSON Lines on stdout (the rest on stderr)\n"
           "  --no-color   no colour (also $NO_COLOR; colour only on a terminal)\n"
           "  --secure     run with CURVE keys and an access file (made under DATA/keys):\n"
           "               the agents may publish and serve, this console observe and\n"
           "               control, each only the demo's threads; shows a refusal of each\n"
           "               kind at the end (not with --broker)\n"
           "  -h, --help   show this help\n"
           "(internal: --agent-worker K --thread T is how the demo runs each agent process,\n"
           " --dispatch-worker K each worker process of its dispatch act)\n",
           DEMO_MAX_AGENTS);
}

static bool parse_int(const char *s, int lo, int hi, int *out)
{
    long v;
    if (!cli_parse_long(s, lo, hi, &v))
        return false;
    *out = (int)v;
    return true;
}

/* @return AB_EXIT_OK, -1 after --help, or AB_EXIT_USAGE. */
static int take(int c, demo_opts_t *o)
{
    switch (c) {
    case 'b': o->broker = optarg; break;
    case 'd': o->data = optarg; break;
    case 'a':
        if (!parse_int(optarg, 1, DEMO_MAX_AGENTS, &o->agents))
            return cli_usage_error("demo", "--agents needs 1..%d", DEMO_MAX_AGENTS);
        break;
    case 'r':
        if (!parse_int(optarg, 1, DEMO_MAX_RUNS, &o->runs))
            return cli_usage_error("demo", "--runs needs 1..%d", DEMO_MAX_RUNS);
        break;
    case 'p':
        if (!parse_int(optarg, 0, 10000, &o->pace_ms))
            return cli_usage_error("demo", "--pace needs 0..10000 milliseconds");
        break;
    case 'j': o->json = true; break;
    case 'P': o->python = optarg; break;
    case 'n': o->no_color = true; break;
    case 'S': o->secure = true; break;
    case 'w':
        if (!parse_int(optarg, 1, DEMO_MAX_AGENTS, &o->worker))
            return cli_usage_error("demo", "--agent-worker needs 1..%d", DEMO_MAX_AGENTS);
        o->worker--;
        break;
    case 't': o->thread = optarg; break;
    case 'D':
        if (!parse_int(optarg, 1, 2, &o->dworker))
            return cli_usage_error("demo", "--dispatch-worker needs 1 or 2");
        break;
    case 'h': print_help(); return -1;
    default: return cli_bad_option("demo", c);
    }
    return AB_EXIT_OK;
}

static int check(const demo_opts_t *o)
{
    if (o->dworker > 0)
        return o->broker ? AB_EXIT_OK : cli_usage_error("demo", "--dispatch-worker needs --broker");
    if (o->worker >= 0) { /* --data only labels a worker (ps, the tests) */
        if (!o->broker || !o->thread || o->worker >= o->agents)
            return cli_usage_error("demo", "--agent-worker needs --broker, --thread and "
                                           "--agents above it");
        return AB_EXIT_OK;
    }
    if (o->thread)
        return cli_usage_error("demo", "--thread is internal (with --agent-worker)");
    if (o->secure && o->broker)
        return cli_usage_error("demo", "--secure makes the keys of the broker it starts: not "
                                       "with --broker");
    if (o->broker && o->data)
        return cli_usage_error("demo", "--data is for the broker the demo starts (no --broker)");
    return AB_EXIT_OK;
}

int cmd_demo(int argc, char **argv)
{
    static const struct option lo[] = {
        {"broker", required_argument, NULL, 'b'},
        {"data", required_argument, NULL, 'd'},
        {"agents", required_argument, NULL, 'a'},
        {"runs", required_argument, NULL, 'r'},
        {"pace", required_argument, NULL, 'p'},
        {"json", no_argument, NULL, 'j'},
        {"python", required_argument, NULL, 'P'},
        {"no-color", no_argument, NULL, 'n'},
        {"secure", no_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},
        {"agent-worker", required_argument, NULL, 'w'},
        {"thread", required_argument, NULL, 't'},
        {"dispatch-worker", required_argument, NULL, 'D'},
        {NULL, 0, NULL, 0},
    };
    demo_opts_t o = {.agents = 3, .runs = 6, .pace_ms = 40, .worker = -1, .audit = cmd_replay};
    int c, rc;
    optind = 1;
    while ((c = cli_getopt(argc, argv, ":h", lo, NULL)) != -1)
        if ((rc = take(c, &o)) != AB_EXIT_OK)
            return rc < 0 ? AB_EXIT_OK : rc;
    if (optind < argc)
        return cli_usage_error("demo", "unexpected argument '%s'", argv[optind]);
    if ((rc = check(&o)) != AB_EXIT_OK)
        return rc;
    if (o.broker && cli_endpoint("demo", o.broker, &o.broker) != 0)
        return AB_EXIT_USAGE;
    return demo_run(&o);
}

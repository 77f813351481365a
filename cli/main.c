/*
 * main.c - the `agentbus` command: dispatch to a subcommand.
 */
#include "agentbus/nego.h"
#include "cli.h"
#include "store.h"

#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

struct subcommand {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct subcommand subcommands[] = {
    {"broker", cmd_broker, "run the broker (SQLite in ./agentbus-data, loopback endpoints)"},
    {"publish", cmd_publish, "publish AG-UI events (JSON Lines) into a run"},
    {"tail", cmd_tail, "watch a thread, a run or everything, live (observer console)"},
    {"replay", cmd_replay, "export runs from the store as JSON Lines; --verify audits them"},
    {"runs", cmd_runs, "list the runs of a thread or of the bus; --requests: dispatched requests"},
    {"threads", cmd_threads, "list the threads with stored events, by id, a page at a time"},
    {"snapshot", cmd_snapshot, "print the current state of a thread (runs, messages, approvals)"},
    {"workers", cmd_workers, "list the live workers: agents, capacity, actions, leases, load"},
    {"invoke", cmd_invoke, "call an action of an agent on a live worker and print its answer"},
    {"run", cmd_run, "start a run of an agent on a worker (dispatch) and follow it to its end"},
    {"cancel", cmd_cancel, "cancel a run: dequeue it, or have its worker end it cancelled"},
    {"abandon", cmd_abandon, "end an orphaned run with a RUN_ERROR the broker writes itself"},
    {"approve", cmd_approve, "answer an interrupted run's interrupts (approve) and resume it"},
    {"deny", cmd_deny, "answer an interrupted run's interrupts (deny) and resume it"},
    {"keygen", cmd_keygen, "make a CURVE key pair: NAME.key and NAME.key_secret (0600)"},
    {"status", cmd_status,
     "what the broker is doing: runs, store, clients, ingest, commit latency"},
    {"relayout", cmd_relayout,
     "rewrite a store migrated from schema 4 in the current layout (no broker running)"},
    {"whoami", cmd_whoami, "what this client's key may do on the broker (roles, prefixes)"},
    {"gateway", cmd_gateway, "serve the bus over HTTP: AG-UI runs, resumable SSE, JSON, observer"},
    {"demo", cmd_demo, "run a broker with a demo fabric of agents and an observer"},
    {"conformance", cmd_conformance, "check a broker endpoint against docs/PROTOCOL.md"},
    {"validate", cmd_validate, "check AG-UI 1.0 events (JSON Lines) and their run lifecycle"},
    {"bench", cmd_bench,
     "measure the bus: protocol, reducer, snapshot, ingest, latency, scale, replay, fan-out, "
     "actions, dispatch, raw ZeroMQ, the HTTP gateway"},
};

#define NSUB (sizeof(subcommands) / sizeof(subcommands[0]))

static void usage(FILE *out)
{
    fprintf(out,
            "usage: agentbus [--key FILE --server-key FILE] <command> [options]\n\n"
            "agentbus is a message bus for multi-process AI-agent fabrics.\n\n"
            "  --key FILE         this client's CURVE secret key file (AGENTBUS_KEY)\n"
            "  --server-key FILE  the broker's CURVE public key file (AGENTBUS_SERVER_KEY), or\n"
            "                     the broker's keys directory (its broker.key)\n"
            "                     both for a broker started with --keys; before the command\n\n"
            "commands:\n");
    for (size_t i = 0; i < NSUB; i++)
        fprintf(out, "  %-10s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(out, "\nRun 'agentbus <command> --help' for the options of a command.\n");
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "agentbus %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nRun 'agentbus %s --help' for usage.\n", cmd);
    return AB_EXIT_USAGE;
}

/*
 * Global options before the command: --key FILE and --server-key FILE (or
 * --key=FILE) set AGENTBUS_KEY and AGENTBUS_SERVER_KEY, which every
 * connection the command makes reads (client.h ab_conn_opts_t). @return how
 * many arguments they took, or -1 after a usage error (printed).
 */
static int global_opts(int argc, char **argv)
{
    int i = 1;
    while (i < argc && strncmp(argv[i], "--", 2) == 0) {
        const char *env =
            strncmp(argv[i], "--key", 5) == 0 && (argv[i][5] == '\0' || argv[i][5] == '=')
                ? "AGENTBUS_KEY"
            : strncmp(argv[i], "--server-key", 12) == 0 &&
                    (argv[i][12] == '\0' || argv[i][12] == '=')
                ? "AGENTBUS_SERVER_KEY"
                : NULL;
        if (env == NULL)
            break;
        const char *eq = strchr(argv[i], '='),
                   *val = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
        if (val == NULL || *val == '\0') {
            fprintf(stderr, "agentbus: %.*s needs a key file\n",
                    (int)(eq ? (size_t)(eq - argv[i]) : strlen(argv[i])), argv[i]);
            return -1;
        }
        setenv(env, val, 1);
        i += eq ? 1 : 2;
    }
    return i - 1;
}

/* agentbus --version (and every command's --version): the package, the protocol versions
 * it speaks, the libzmq and the SQLite it runs on. */
static int print_version(void)
{
    size_t n = 0;
    const uint32_t *v = ab_versions_supported(&n);
    int major, minor, patch;
    zmq_version(&major, &minor, &patch);
    printf("agentbus %s (protocol", AB_VERSION_STRING);
    for (size_t i = 0; i < n; i++)
        printf("%s%u", i ? "," : " ", v[i]);
    printf("; libzmq %d.%d.%d%s; SQLite %s)\n", major, minor, patch,
           zmq_has("curve") ? " with CURVE" : "", ab__store_sqlite_version());
    return AB_EXIT_OK;
}

/* A command: `--version` anywhere among its arguments prints the version, `-h` is its --help. */
static int run_sub(const struct subcommand *sc, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0)
            return print_version();
        if (strcmp(argv[i], "-h") == 0)
            argv[i] = "--help";
    }
    cli_argv = argv;
    opterr = 0; /* every command reports its own bad options (cli_bad_option) */
    return sc->fn(argc, argv);
}

int main(int argc, char **argv)
{
    (void)ab__store_global_init(); /* before any thread: SQLite allocates without a global mutex */
    /* a reader that left (`agentbus tail | head -3`) is a write error (EPIPE) each command
     * handles, not a signal that kills it */
    signal(SIGPIPE, SIG_IGN);
    int g = global_opts(argc, argv);
    if (g < 0)
        return AB_EXIT_USAGE;
    argv[g] = argv[0]; /* the command name stays argv[1] after the global options */
    argc -= g;
    argv += g;
    if (argc < 2) {
        usage(stderr);
        return AB_EXIT_USAGE;
    }
    if (strcmp(argv[1], "help") == 0 && argc > 2) { /* agentbus help CMD: CMD --help */
        argv[1] = argv[2];
        argv[2] = "--help";
        argc = 3;
    } else if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
               strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return AB_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0)
        return print_version();
    for (size_t i = 0; i < NSUB; i++)
        if (strcmp(argv[1], subcommands[i].name) == 0)
            return run_sub(&subcommands[i], argc - 1, argv + 1);
    fprintf(stderr, "agentbus: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return AB_EXIT_USAGE;
}

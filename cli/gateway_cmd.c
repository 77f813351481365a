/*
 * gateway_cmd.c - `agentbus gateway`: parse the options, start the HTTP
 * gateway (gateway/, docs/GATEWAY.md), print one ready line and serve until
 * SIGINT or SIGTERM.
 *
 * Invariants:
 *  1. A usage error names the option and exits 2 before anything listens.
 *  2. The ready line "agentbus gateway ready http=URL broker=ENDPOINT" is
 *     printed (and flushed) once the socket listens: tests and scripts wait
 *     for it and read the port from it.
 */
#include "cli.h"
#include "gateway.h"

#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t gw_stop;

static void on_signal(int sig)
{
    (void)sig;
    gw_stop = 1;
}

static void help(void)
{
    printf("usage: agentbus gateway [--broker ENDPOINT] [--listen HOST:PORT] [--tokens FILE]\n"
           "                        [--keys DIR] [--cors ORIGIN] [limits]\n\n"
           "Serve the bus over HTTP: AG-UI runs (POST /agents/AGENT, Server-Sent Events),\n"
           "thread event streams resumable from any event id, JSON endpoints, /metrics and\n"
           "an observer page at /. Every endpoint is in docs/GATEWAY.md.\n\n"
           "options:\n"
           "  --broker ENDPOINT   the broker's command endpoint (AGENTBUS_BROKER, else %s)\n"
           "  --listen HOST:PORT  numeric IPv4 address and port (default 127.0.0.1:7780;\n"
           "                      port 0 = any free one, printed in the ready line)\n"
           "  --tokens FILE       bearer tokens: lines \"TOKEN IDENTITY\"; without it only a\n"
           "                      loopback address may be listened on\n"
           "  --keys DIR          where IDENTITY.key_secret of each token's identity is\n"
           "                      (default .); give the broker's key with --server-key\n"
           "  --cors ORIGIN       send Access-Control-Allow-Origin: ORIGIN (e.g. '*')\n"
           "limits:\n"
           "  --max-body BYTES    request body (default %u)\n"
           "  --sse-buffer BYTES  bytes queued for one stream (default %u); while it is full\n"
           "                      the stream waits for the client\n"
           "  --slow-ms MS        a client whose queue stays full this long is cut off\n"
           "                      (default %u); it reconnects with its last event id\n"
           "  --max-streams N     event streams open at once (default %u)\n"
           "  --max-conns N       HTTP connections (default %u)\n"
           "  --heartbeat MS      idle time before a heartbeat comment (default %u)\n"
           "  --timeout MS        per broker request (default %u)\n"
           "  --export-budget BYTES  bytes all run exports (GET .../runs/RUN/events) may\n"
           "                      hold at once (default %zu); past it an export is 429\n",
           AB_DEFAULT_BROKER, AB_GW_BODY_MAX_DEFAULT, AB_GW_SSE_BUF_DEFAULT, AB_GW_SLOW_DEFAULT,
           AB_GW_STREAMS_DEFAULT, AB_GW_CONNS_DEFAULT, AB_GW_HEARTBEAT_DEFAULT,
           AB_GW_TIMEOUT_DEFAULT, AB_GW_EXPORT_BUDGET_DEFAULT);
}

/* HOST:PORT into opts (the host copied into @p host). */
static int parse_listen(const char *s, char *host, size_t cap, ab__gw_opts_t *o)
{
    const char *colon = strrchr(s, ':');
    long port = 0;
    if (colon == NULL || colon == s || (size_t)(colon - s) >= cap ||
        !cli_parse_long(colon + 1, 0, 65535, &port))
        return cli_usage_error("gateway",
                               "--listen wants HOST:PORT (e.g. 127.0.0.1:7780), got '%s'", s);
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    o->host = host;
    o->port = (unsigned)port;
    return 0;
}

static int limit(const char *name, const char *v, long lo, long hi, long *out)
{
    if (!cli_parse_long(v, lo, hi, out))
        return cli_usage_error("gateway", "--%s wants a number in %ld..%ld, got '%s'", name, lo, hi,
                               v);
    return 0;
}

static int parse_limit(int c, const char *v, ab__gw_opts_t *o)
{
    long n = 0;
    int rc = 0;
    switch (c) {
    case 'b': rc = limit("max-body", v, 1, 1L << 30, &n), o->body_max = (size_t)n; break;
    case 's': rc = limit("sse-buffer", v, 1024, 1L << 30, &n), o->sse_buf = (size_t)n; break;
    case 'S': rc = limit("max-streams", v, 1, 100000, &n), o->streams_max = (unsigned)n; break;
    case 'C': rc = limit("max-conns", v, 1, 100000, &n), o->conns_max = (unsigned)n; break;
    case 'H': rc = limit("heartbeat", v, 100, 3600000, &n), o->heartbeat_ms = (int)n; break;
    case 'T': rc = limit("timeout", v, 100, 600000, &n), o->timeout_ms = (int)n; break;
    case 'W': rc = limit("slow-ms", v, 10, 3600000, &n), o->slow_ms = (int)n; break;
    case 'E':
        rc = limit("export-budget", v, 65536, 1L << 40, &n), o->export_budget = (size_t)n;
        break;
    default: rc = cli_usage_error("gateway", "unknown option");
    }
    return rc;
}

static int parse(int argc, char **argv, ab__gw_opts_t *o, char *host, size_t cap)
{
    static const struct option longs[] = {{"broker", required_argument, NULL, 'B'},
                                          {"listen", required_argument, NULL, 'l'},
                                          {"tokens", required_argument, NULL, 't'},
                                          {"keys", required_argument, NULL, 'k'},
                                          {"cors", required_argument, NULL, 'c'},
                                          {"max-body", required_argument, NULL, 'b'},
                                          {"sse-buffer", required_argument, NULL, 's'},
                                          {"max-streams", required_argument, NULL, 'S'},
                                          {"max-conns", required_argument, NULL, 'C'},
                                          {"heartbeat", required_argument, NULL, 'H'},
                                          {"timeout", required_argument, NULL, 'T'},
                                          {"slow-ms", required_argument, NULL, 'W'},
                                          {"export-budget", required_argument, NULL, 'E'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    int c, rc = 0;
    optind = 1;
    while (rc == 0 && (c = cli_getopt(argc, argv, ":h", longs, NULL)) != -1) {
        switch (c) {
        case 'h': help(); return -1;
        case 'B': o->broker = optarg; break;
        case 'l': rc = parse_listen(optarg, host, cap, o); break;
        case 't': o->tokens = optarg; break;
        case 'k': o->keys_dir = optarg; break;
        case 'c': o->cors = optarg; break;
        case '?':
        case ':': return cli_bad_option("gateway", c);
        default: rc = parse_limit(c, optarg, o);
        }
    }
    if (rc == 0 && optind < argc)
        rc = cli_usage_error("gateway", "unexpected argument '%s'", argv[optind]);
    return rc;
}

int cmd_gateway(int argc, char **argv)
{
    char host[64] = "127.0.0.1";
    ab__gw_opts_t o = {.host = host,
                       .port = 7780,
                       .body_max = AB_GW_BODY_MAX_DEFAULT,
                       .sse_buf = AB_GW_SSE_BUF_DEFAULT,
                       .streams_max = AB_GW_STREAMS_DEFAULT,
                       .conns_max = AB_GW_CONNS_DEFAULT,
                       .heartbeat_ms = AB_GW_HEARTBEAT_DEFAULT,
                       .slow_ms = AB_GW_SLOW_DEFAULT,
                       .timeout_ms = AB_GW_TIMEOUT_DEFAULT,
                       .export_budget = AB_GW_EXPORT_BUDGET_DEFAULT};
    int rc = parse(argc, argv, &o, host, sizeof host);
    if (rc != 0)
        return rc < 0 ? AB_EXIT_OK : rc;
    if (cli_endpoint("gateway", o.broker, &o.broker) != 0)
        return AB_EXIT_USAGE;
    char broker[300];
    snprintf(broker, sizeof broker, "%s", o.broker); /* the expanded one is in a static buffer */
    o.broker = broker;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    ab__gw_t *gw = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab__gw_start(&gw, &o, &err) != AB_OK) {
        fprintf(stderr, "agentbus gateway: %s%s%s\n", err.message, err.field[0] ? " at " : "",
                err.field);
        return err.code == AB_INVALID_CONFIG ? AB_EXIT_USAGE : AB_EXIT_FAIL;
    }
    printf("agentbus gateway ready http=%s broker=%s\n", ab__gw_url(gw), o.broker);
    fflush(stdout);
    while (!gw_stop)
        poll(NULL, 0, 200);
    ab__gw_stop(&gw);
    return AB_EXIT_OK;
}

/*
 * cli.h - the subcommands of the `agentbus` program.
 *
 * Each subcommand is `int cmd_<name>(int argc, char **argv)` where argv[0] is
 * the subcommand name; it returns the process exit status (0 success,
 * 1 the work found a failure, 2 usage error).
 */
#ifndef AB_CLI_H
#define AB_CLI_H

#include "agentbus/model.h"
#include "agentbus/status.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define AB_EXIT_OK    0
#define AB_EXIT_FAIL  1
#define AB_EXIT_USAGE 2

int cmd_validate(int argc, char **argv);
int cmd_bench(int argc, char **argv); /* cli/bench_cmd.c (bench/) */

/** Parse a decimal in [lo, hi] (whole string). @return false when it is not one. */
bool cli_parse_long(const char *s, long lo, long hi, long *out);

/** Parse a non-negative decimal uint64 (whole string, no sign). */
bool cli_parse_u64(const char *s, uint64_t *out);

/** Parse a number of seconds in (0, @p hi]: plain decimal digits with an optional fraction and
 * exponent ("0.5", "2e3"; the whole string, no sign, no nan/inf/hex). @return false when it is
 * not one. */
bool cli_parse_seconds(const char *s, double hi, double *out);

/** `agentbus broker` (cli/broker_cmd.c). */
int cmd_broker(int argc, char **argv);

/* Client subcommands, each in cli/<name>.c. */
int cmd_publish(int argc, char **argv);     /* cli/publish.c */
int cmd_runs(int argc, char **argv);        /* cli/runs.c */
int cmd_tail(int argc, char **argv);        /* cli/tail.c */
int cmd_replay(int argc, char **argv);      /* cli/replay_cmd.c */
int cmd_demo(int argc, char **argv);        /* cli/demo_cmd.c (demo/) */
int cmd_snapshot(int argc, char **argv);    /* cli/snapshot.c */
int cmd_conformance(int argc, char **argv); /* cli/conformance_cmd.c (conformance/) */
int cmd_workers(int argc, char **argv);     /* cli/workers_cmd.c */
int cmd_invoke(int argc, char **argv);      /* cli/workers_cmd.c */
int cmd_run(int argc, char **argv);         /* cli/dispatch_cmd.c */
int cmd_cancel(int argc, char **argv);      /* cli/dispatch_cmd.c */
int cmd_abandon(int argc, char **argv);     /* cli/abandon_cmd.c */
int cmd_approve(int argc, char **argv);     /* cli/approve_cmd.c */
int cmd_deny(int argc, char **argv);        /* cli/approve_cmd.c */
int cmd_keygen(int argc, char **argv);      /* cli/keygen_cmd.c */
int cmd_whoami(int argc, char **argv);      /* cli/whoami_cmd.c */
int cmd_threads(int argc, char **argv);     /* cli/threads_cmd.c */
int cmd_status(int argc, char **argv);      /* cli/status_cmd.c */
int cmd_gateway(int argc, char **argv);     /* cli/gateway_cmd.c (gateway/) */
int cmd_relayout(int argc, char **argv);    /* cli/relayout_cmd.c (store/) */

/** What `agentbus runs --requests` lists (cli/requests_cmd.c). */
typedef struct cli_requests_opts {
    const char *broker;       /* the endpoint, checked (cli_endpoint) */
    const char *agent;        /* --agent, or NULL: every agent */
    ab_request_state_t state; /* --state, or AB_REQ_NONE: the open ones */
    bool json;
    long timeout_ms;
} cli_requests_opts_t;

/** List the broker's run requests, page by page. @return the exit status (0 or 1). */
int cli_list_requests(const cli_requests_opts_t *o);

/** A request state from its wire name ("queued" ...). @return 0, or -1 when not one. */
int cli_parse_request_state(const char *s, ab_request_state_t *out);

/** Default command endpoint of the client subcommands. */
#define AB_DEFAULT_BROKER "tcp://127.0.0.1:7710"

/**
 * The broker endpoint a client subcommand talks to: @p flag (from --broker)
 * when given, else $AGENTBUS_BROKER when set and non-empty, else
 * AB_DEFAULT_BROKER; "HOST:PORT" and ":PORT" (no "://") mean tcp://HOST:PORT
 * and tcp://127.0.0.1:PORT. Never NULL; an expanded one lives in a static
 * buffer until the next call. (cli/common.c)
 */
const char *cli_broker_endpoint(const char *flag);

/**
 * Check @p ep as ZeroMQ parses an endpoint to connect to ("foo", "tcp://h:abc", "http://x:1"
 * are not), before anything connects: a malformed one is a usage error,
 * "agentbus <cmd>: bad <what> '<ep>': <why>". @return 0, or AB_EXIT_USAGE (printed).
 * (cli/common.c)
 */
int cli_check_endpoint(const char *cmd, const char *what, const char *ep);

/**
 * The broker endpoint of a client subcommand (cli_broker_endpoint(@p flag) into *@p out, the
 * same static buffer), checked by cli_check_endpoint() naming where it came from (--broker
 * or $AGENTBUS_BROKER). @return 0, or AB_EXIT_USAGE (printed). (cli/common.c)
 */
int cli_endpoint(const char *cmd, const char *flag, const char **out);

/** The arguments of the running command (set by main before it runs). */
extern char **cli_argv;

/**
 * The one report of a bad option, for a getopt_long() loop over cli_argv
 * whose optstring starts with ':' (so getopt prints nothing itself): @p c is
 * what it returned ('?' an unknown option, ':' a missing value). Prints
 * "agentbus <cmd>: unknown option '--x'" or "option '--x' needs a value" and
 * the hint. @return AB_EXIT_USAGE. (cli/common.c)
 */
int cli_bad_option(const char *cmd, int c);

struct option;

/**
 * getopt_long(), and one rule more: a value taken from the next argument that starts with
 * "--" (`--thread --json`) is no value - ':' is returned as when no argument follows, and
 * cli_bad_option() then reports "option '--thread' needs a value". Such a value is given as
 * `--thread=--x`. (cli/common.c)
 */
int cli_getopt(int argc, char **argv, const char *optstring, const struct option *lo, int *idx);

/** Whether standard output is closed at its other end (a pipe whose reader left: `tail |
 * head -3`) or failed: a follower then stops, exit 0. Never blocks. */
bool cli_stdout_gone(void);

/** Write @p s as a JSON string (quoted, escaped) to @p out. */
void cli_json_str(FILE *out, const char *s);

/** Write @p err as {"code","message","pointer"}: the field as a JSON Pointer. */
void cli_json_error(FILE *out, const ab_error_t *err);

/** "code: message (at /pointer)", the field as a JSON Pointer (an event's own
 * fields relative to the event). @return @p buf. */
const char *cli_error_text(const ab_error_t *err, char *buf, size_t size);

/** Check an id given on the command line (a thread, a run, an agent ...: ab_id_check, so 1 to
 * 256 bytes), before anything is sent. @return 0, or AB_EXIT_USAGE (printed). (cli/common.c) */
int cli_check_id(const char *cmd, const char *what, const char *id);

/** Print "agentbus <cmd>: <msg>" to stderr and return AB_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

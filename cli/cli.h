/*
 * cli.h - the subcommands of the `agentbus` program.
 *
 * Each subcommand is `int cmd_<name>(int argc, char **argv)` where argv[0] is
 * the subcommand name; it returns the process exit status (0 success,
 * 1 the work found a failure, 2 usage error).
 */
#ifndef AB_CLI_H
#define AB_CLI_H

#include <stdio.h>

#define AB_EXIT_OK    0
#define AB_EXIT_FAIL  1
#define AB_EXIT_USAGE 2

int cmd_validate(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#ifdef AB_HAVE_BROKER
/** `agentbus broker` (cli/broker_cmd.c). */
int cmd_broker(int argc, char **argv);
#endif

#ifdef AB_HAVE_CLIENT
/**
 * Benchmarks that need a running bus (cli/bench_bus.c): `agentbus bench
 * ingest|latency|replay ...`. argv[0] is the benchmark name.
 * @return an exit status, or -1 when @p argv[0] is not one of them.
 */
int bench_bus(int argc, char **argv);
#endif

/** Print "agentbus <cmd>: <msg>" to stderr and return AB_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

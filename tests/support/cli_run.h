/*
 * cli_run.h - run the `agentbus` command as a process from an integration
 * test and capture what it prints (stdout and stderr together).
 */
#ifndef AB_TESTS_CLI_RUN_H
#define AB_TESTS_CLI_RUN_H

#include "testutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <sys/wait.h>

#ifndef OUT_MAX /* a test may define a larger buffer first */
#define OUT_MAX 8192
#endif

/* Run `agentbus ARGS 2>&1` (without $AGENTBUS_BROKER) and return its exit
 * status; its output goes into @p out (OUT_MAX bytes; the log shows 4000). */
static inline int it_run_cli(char *out, const char *fmt, ...) AB_PRINTF(2, 3);
static inline int it_run_cli(char *out, const char *fmt, ...)
{
    char args[1024], cmd[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof(cmd), "env -u AGENTBUS_BROKER %s %s 2>&1", AB_AGENTBUS_BIN, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, OUT_MAX - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    print_message("$ agentbus %s\n%.4000s", args, out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif /* AB_TESTS_CLI_RUN_H */

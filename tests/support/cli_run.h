/*
 * cli_run.h - run the `agentbus` command as a process from an integration
 * test and capture what it prints (stdout and stderr together).
 */
#ifndef AB_TESTS_CLI_RUN_H
#define AB_TESTS_CLI_RUN_H

#include "testutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef OUT_MAX /* a test may define a larger buffer first */
#define OUT_MAX 8192
#endif

/* Run shell command @p cmd, its output into @p out (@p size bytes, NUL-terminated), shown in
 * the log after "$ @p shown" (4000 bytes of it). @return its exit status, -1 for a signal. */
static inline int it_capture(const char *cmd, char *out, size_t size, const char *shown)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    print_message("$ %s\n%.4000s", shown, out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

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
    char shown[1100];
    snprintf(shown, sizeof(shown), "agentbus %s", args);
    return it_capture(cmd, out, OUT_MAX, shown);
}

/* A temporary file under /tmp holding @p text; its path into @p path (the test removes it). */
static inline void it_temp_file(char *path, size_t size, const char *text)
{
    snprintf(path, size, "/tmp/ab-cli-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
}

#endif /* AB_TESTS_CLI_RUN_H */

/*
 * log.c - the broker's log: one line per message on stderr,
 * "<ISO 8601 UTC time> <level> <message>".
 *
 * Invariants:
 *  1. Each message is formatted into one buffer and written with one
 *     fputs(), so lines from different threads never interleave.
 *  2. The level is the writing thread's own (thread-local): no state is
 *     shared between threads or brokers.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

static _Thread_local int log_level = AB_LOG_INFO;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

ab_status_t ab__log_level_from(const char *s, ab_log_level_t *out)
{
    for (int i = 0; i <= AB_LOG_DEBUG; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *out = (ab_log_level_t)i;
            return AB_OK;
        }
    }
    return AB_INVALID_CONFIG;
}

void ab__thread_start(const char *name, ab_log_level_t level)
{
    log_level = (int)level;
#ifdef __linux__
    (void)prctl(PR_SET_NAME, name, 0, 0, 0); /* at most 15 characters are kept */
#else
    (void)name;
#endif
}

ab_log_level_t ab__log_set_level(ab_log_level_t level)
{
    ab_log_level_t old = (ab_log_level_t)log_level;
    log_level = (int)level;
    return old;
}

static bool log_enabled(ab_log_level_t level)
{
    return (int)level <= log_level;
}

void ab__log(ab_log_level_t level, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof(line) - n, ".%03ldZ %s ", ts.tv_nsec / 1000000L,
                          level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += (size_t)m;
    if (n > sizeof(line) - 2)
        n = sizeof(line) - 2;
    line[n] = '\n';
    line[n + 1] = '\0';
    fputs(line, stderr);
}

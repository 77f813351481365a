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
static _Thread_local bool log_json;

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

void ab__thread_start(const char *name, ab_log_level_t level, bool json)
{
    log_level = (int)level;
    log_json = json;
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

bool ab__log_set_json(bool json)
{
    bool old = log_json;
    log_json = json;
    return old;
}

/* @p msg as a JSON string's content (no quotes) into @p out; never more than @p size - 1. */
static size_t json_escape(char *out, size_t size, const char *msg) /* size >= 7 */
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p && n + 7 < size; p++) {
        if (*p == '"' || *p == '\\')
            out[n++] = '\\', out[n++] = (char)*p;
        else if (*p < 0x20)
            n += (size_t)snprintf(out + n, size - n, "\\u%04x", *p);
        else
            out[n++] = (char)*p;
    }
    out[n] = '\0';
    return n;
}

static bool log_enabled(ab_log_level_t level)
{
    return (int)level <= log_level;
}

void ab__log(ab_log_level_t level, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    char line[2200], msg[1024], when[40];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t w = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + w, sizeof(when) - w, ".%03ldZ", ts.tv_nsec / 1000000L);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (log_json) {
        char esc[2048];
        json_escape(esc, sizeof esc, msg);
        snprintf(line, sizeof line, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"}\n", when,
                 level_names[level], esc);
    } else {
        snprintf(line, sizeof line, "%s %s %s\n", when, level_names[level], msg);
    }
    fputs(line, stderr);
}

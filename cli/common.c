/*
 * common.c - helpers shared by the client subcommands.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* "host:port" and ":port" (no "://") as tcp:// endpoints, the host 127.0.0.1 when omitted. */
static const char *expand(const char *ep)
{
    static char buf[300];
    const char *colon = strrchr(ep, ':');
    if (strstr(ep, "://") != NULL || colon == NULL || colon[1] == '\0' ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1))
        return ep;
    snprintf(buf, sizeof buf, "tcp://%.*s%s", (int)(colon - ep), ep,
             colon == ep ? "127.0.0.1" : "");
    size_t n = strlen(buf);
    snprintf(buf + n, sizeof buf - n, "%s", colon);
    return buf;
}

const char *cli_broker_endpoint(const char *flag)
{
    if (flag && *flag)
        return expand(flag);
    const char *env = getenv("AGENTBUS_BROKER");
    if (env && *env)
        return expand(env);
    return AB_DEFAULT_BROKER;
}

bool cli_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !*s || !end || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool cli_parse_u64(const char *s, uint64_t *out)
{
    char *end = NULL;
    if (!s || !*s || *s == '-')
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || !end || *end)
        return false;
    *out = v;
    return true;
}

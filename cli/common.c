/*
 * common.c - helpers shared by the client subcommands.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>

const char *cli_broker_endpoint(const char *flag)
{
    if (flag && *flag)
        return flag;
    const char *env = getenv("AGENTBUS_BROKER");
    if (env && *env)
        return env;
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

/*
 * common.c - helpers shared by the client subcommands.
 */
#include "cli.h"

#include <stdlib.h>

#ifdef AB_HAVE_CLIENT
const char *cli_broker_endpoint(const char *flag)
{
    if (flag && *flag)
        return flag;
    const char *env = getenv("AGENTBUS_BROKER");
    if (env && *env)
        return env;
    return AB_DEFAULT_BROKER;
}
#endif

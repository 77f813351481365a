/*
 * broker_cmd.c - `agentbus broker`: parse the flags and the config file
 * (broker/config.c), then run the daemon (broker/broker.c).
 *
 * Invariants:
 *  1. A usage or configuration error prints one line naming the flag or
 *     FILE:LINE and key, and exits 2 without touching the data directory.
 *  2. --help prints every option with its default to stdout and exits 0.
 *  3. A flag's value never starts with "--": `--data --insecure` is a missing value
 *     (as in every command, cli_getopt; the rule is ab_broker_config_parse()'s), and
 *     `--data=--x` gives one.
 */
#include "agentbus/broker.h"
#include "cli.h"

int cmd_broker(int argc, char **argv)
{
    ab_broker_config_t cfg;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_broker_config_parse(&cfg, argc, argv, &err) != AB_OK)
        return cli_usage_error("broker", "%s", err.message);
    if (cfg.help) {
        ab_broker_usage(stdout);
        return AB_EXIT_OK;
    }
    return ab_broker_run(&cfg);
}

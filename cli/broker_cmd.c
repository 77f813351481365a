/*
 * broker_cmd.c - `agentbus broker`: parse the flags and the config file
 * (broker/config.c), then run the daemon (broker/broker.c).
 *
 * Invariants:
 *  1. A usage or configuration error prints one line naming the flag or
 *     FILE:LINE and key, and exits 2 without touching the data directory.
 *  2. --help prints every option with its default to stdout and exits 0.
 *  3. A flag's value never starts with "--": `--data --insecure` is a missing value
 *     (as in every command, cli_getopt), `--data=--x` gives one.
 */
#include "agentbus/broker.h"
#include "cli.h"

#include <string.h>

/* Whether --@p name is a flag that takes a value: "config", or a setting (a probe on a scratch
 * copy of the defaults; ab_broker_config_set() names an unknown key "unknown setting"). */
static bool takes_value(const char *name)
{
    ab_broker_config_t probe;
    ab_broker_config_defaults(&probe);
    ab_error_t e = AB_ERROR_INIT;
    return strcmp(name, "config") == 0 || ab_broker_config_set(&probe, name, "", &e) == AB_OK ||
           strncmp(e.message, "unknown setting", 15) != 0;
}

/*
 * The one form of a bad option in every command (cli_bad_option): an unknown flag, or a flag
 * whose value is missing - none follows, or the next argument is another flag (`--readers
 * --data D`, `--data --insecure`) - is named itself, before the config parser would take the
 * next flag for a value. "--x=V", stray words and the settings' values are left to it.
 */
static int check_flags(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
            return 0; /* a stray word: the parser names it */
        if (strchr(a, '=') != NULL || strcmp(a, "--help") == 0 || strcmp(a, "--insecure") == 0)
            continue;
        if (!takes_value(a + 2))
            return cli_usage_error("broker", "unknown option '%s'", a);
        if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)
            return cli_usage_error("broker", "option '%s' needs a value", a);
        i++; /* its value */
    }
    return 0;
}

int cmd_broker(int argc, char **argv)
{
    ab_broker_config_t cfg;
    ab_error_t err = AB_ERROR_INIT;
    int rc = check_flags(argc, argv);
    if (rc != 0)
        return rc;
    if (ab_broker_config_parse(&cfg, argc, argv, &err) != AB_OK)
        return cli_usage_error("broker", "%s", err.message);
    if (cfg.help) {
        ab_broker_usage(stdout);
        return AB_EXIT_OK;
    }
    return ab_broker_run(&cfg);
}

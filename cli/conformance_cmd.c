/*
 * conformance_cmd.c - `agentbus conformance ENDPOINT [--only NAME] [--timeout MS]`:
 * the command line of the conformance suite (conformance/). ENDPOINT is expanded as
 * every command's --broker (HOST:PORT, :PORT); a malformed one is a usage error. Exits 1
 * when any check failed, 2 on a usage error.
 */
#include "cli.h"
#include "conformance.h"

#include <getopt.h>
#include <stdio.h>

static void print_help(void)
{
    printf("usage: agentbus conformance ENDPOINT [--only NAME] [--timeout MS] [--json]\n\n"
           "Check a broker's command endpoint against docs/PROTOCOL.md, through the wire only.\n"
           "ENDPOINT: tcp://HOST:PORT, or HOST:PORT, or :PORT (tcp://127.0.0.1:PORT).\n"
           "Prints PASS/FAIL/SKIP per check and 'N passed, M failed, K skipped'; exits 1 when\n"
           "any check failed. See docs/CONFORMANCE.md.\n\n"
           "options:\n"
           "  --only NAME    run one check (repeatable)\n"
           "  --timeout MS   bound of each request (default 5000)\n"
           "  --json         one JSON object per line: {\"check\",\"result\",\"reason\"}, then\n"
           "                 {\"cleanup\":{\"ended\",\"failed\"}} and "
           "{\"passed\",\"failed\",\"skipped\"}\n\n"
           "checks:");
    for (size_t i = 0; i < conf_ncheck(); i++)
        printf(" %s", conf_check_name(i));
    printf("\n");
}

int cmd_conformance(int argc, char **argv)
{
    static const struct option lo[] = {{"only", required_argument, NULL, 'o'},
                                       {"timeout", required_argument, NULL, 't'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    char *only[64];
    int nonly = 0, ch, timeout_ms = 5000;
    bool json = false;
    optind = 1;
    while ((ch = cli_getopt(argc, argv, ":h", lo, NULL)) != -1) {
        if (ch == 'h') {
            print_help();
            return AB_EXIT_OK;
        } else if (ch == 'o') {
            if (!conf_check_known(optarg))
                return cli_usage_error("conformance", "unknown check '%s'", optarg);
            if (nonly < (int)(sizeof(only) / sizeof(only[0])))
                only[nonly++] = optarg;
        } else if (ch == 'j') {
            json = true;
        } else if (ch == 't') {
            long v;
            if (!cli_parse_long(optarg, 100, 600000, &v))
                return cli_usage_error("conformance", "--timeout: 100..600000 ms");
            timeout_ms = (int)v;
        } else
            return cli_bad_option("conformance", ch);
    }
    if (optind != argc - 1 || argv[optind][0] == '\0')
        return cli_usage_error("conformance", "expected one ENDPOINT");
    const char *ep = cli_broker_endpoint(argv[optind]); /* HOST:PORT and :PORT as everywhere */
    if (cli_check_endpoint("conformance", "ENDPOINT", ep) != 0) /* a usage error, not a check */
        return AB_EXIT_USAGE;
    return conf_run(ep, timeout_ms, only, nonly, json) == 0 ? AB_EXIT_OK : AB_EXIT_FAIL;
}

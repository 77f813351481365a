/*
 * whoami_cmd.c - `agentbus whoami`: connect and print what this client's key
 * may do on the broker, as its welcome says (docs/CLIENT.md "agentbus
 * whoami", docs/PROTOCOL.md 1 "Authorization" and 7.2 `access`).
 */
#include "agentbus/client.h"
#include "agentbus/json.h"
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static const char *const roles[] = {"publish", "observe", "serve", "control", "admin"};

static void help(void)
{
    printf("usage: agentbus whoami [--broker ENDPOINT] [--json] [--timeout MS]\n\n"
           "Connect to the broker and print what this client's key may do there: its name in\n"
           "the broker's access file and, for each role (publish, observe, serve, control,\n"
           "admin), every thread or the thread id prefixes it covers. A broker without keys\n"
           "lets every client do everything, and says so.\n"
           "Give the key with the global options: agentbus --key FILE --server-key FILE whoami\n\n"
           "options:\n"
           "  --broker ENDPOINT  the broker's command endpoint (default $AGENTBUS_BROKER, else\n"
           "                     " AB_DEFAULT_BROKER ")\n"
           "  --json             one JSON object: {\"broker\", \"instance\", \"access\"}\n"
           "                     (access null from a broker without keys)\n"
           "  --timeout MS       bound of the connection (default 5000)\n"
           "  -h, --help         show this help\n");
}

/* One role's line: "every thread", its prefixes, or "-". */
static void print_role(const char *name, const ab_val_t *v)
{
    printf("%-9s ", name);
    if (v == NULL) {
        printf("-\n");
        return;
    }
    if (v->type == AB_VAL_BOOL && v->u.b) {
        printf("every thread\n");
        return;
    }
    for (uint32_t i = 0; v->type == AB_VAL_ARRAY && i < v->len; i++) {
        const ab_val_t *p = &v->u.items[i];
        if (p->type == AB_VAL_STR)
            printf("%s%.*s*", i ? ", " : "", (int)p->len, p->u.s);
    }
    printf("\n");
}

static int print_text(const ab_conn_t *c, const char *endpoint)
{
    printf("broker    %s (instance %s)\n", endpoint, ab_conn_instance(c));
    const char *a = ab_conn_access(c);
    if (a == NULL) {
        printf("no keys: this broker lets every client do everything\n");
        return AB_EXIT_OK;
    }
    ab_buf_t mp = AB_BUF_INIT;
    ab_doc_t *doc = NULL;
    const ab_val_t *root = NULL;
    ab_error_t err = AB_ERROR_INIT;
    int rc = AB_EXIT_FAIL;
    if (ab_doc_new(&doc) == AB_OK &&
        ab_json_to_msgpack(a, strlen(a), 8, 1u << 20, AB_INVALID_ENVELOPE, &mp, &err) == AB_OK &&
        ab_doc_parse(doc, mp.data, mp.len, 1u << 20, 8, AB_INVALID_ENVELOPE, &root, &err) ==
            AB_OK) {
        const ab_val_t *name = ab_val_get(root, "name"), *r = ab_val_get(root, "roles");
        if (name && name->type == AB_VAL_STR)
            printf("key       %.*s\n", (int)name->len, name->u.s);
        for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
            print_role(roles[i], ab_val_get(r, roles[i]));
        rc = AB_EXIT_OK;
    } else {
        fprintf(stderr, "agentbus whoami: the broker's access answer is not readable: %s\n",
                err.message);
    }
    ab_buf_free(&mp);
    ab_doc_destroy(&doc);
    return rc;
}

static void print_json(const ab_conn_t *c, const char *endpoint)
{
    ab_buf_t b = AB_BUF_INIT;
    const char *a = ab_conn_access(c);
    bool ok = ab_buf_append(&b, "{\"broker\":", 10) == AB_OK &&
              ab_json_quote(&b, endpoint, strlen(endpoint)) == AB_OK &&
              ab_buf_append(&b, ",\"instance\":", 12) == AB_OK &&
              ab_json_quote(&b, ab_conn_instance(c), strlen(ab_conn_instance(c))) == AB_OK &&
              ab_buf_append(&b, ",\"access\":", 10) == AB_OK &&
              ab_buf_append(&b, a ? a : "null", a ? strlen(a) : 4) == AB_OK &&
              ab_buf_append(&b, "}", 1) == AB_OK;
    if (ok)
        printf("%.*s\n", (int)b.len, (const char *)b.data);
    else
        fputs("agentbus whoami: out of memory\n", stderr);
    ab_buf_free(&b);
}

int cmd_whoami(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"broker", required_argument, NULL, 'b'},
        {"json", no_argument, NULL, 'j'},
        {"timeout", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *broker = NULL;
    bool json = false;
    long timeout_ms = AB_CONN_TIMEOUT_DEFAULT;
    int c;
    optind = 1;
    while ((c = cli_getopt(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b': broker = optarg; break;
        case 'j': json = true; break;
        case 'T':
            if (!cli_parse_long(optarg, 1, 600000, &timeout_ms))
                return cli_usage_error(
                    "whoami", "--timeout wants milliseconds (1 ... 600000), got '%s'", optarg);
            break;
        case 'h': help(); return AB_EXIT_OK;
        default: return cli_bad_option("whoami", c);
        }
    }
    if (optind < argc)
        return cli_usage_error("whoami", "unexpected argument '%s'", argv[optind]);
    const char *ep = NULL;
    if (cli_endpoint("whoami", broker, &ep) != 0)
        return AB_EXIT_USAGE;
    ab_conn_opts_t co = {.client_name = "agentbus-whoami", .timeout_ms = (int)timeout_ms};
    ab_conn_t *conn = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_new(&conn, ep, &co, &err) != AB_OK) {
        char buf[768];
        /* the connection's own message says why (and that a broker with keys never answers
         * a key it does not list) */
        fprintf(stderr, "agentbus whoami: %s\n", cli_error_text(&err, buf, sizeof(buf)));
        return AB_EXIT_FAIL;
    }
    int rc = AB_EXIT_OK;
    if (json)
        print_json(conn, ep);
    else
        rc = print_text(conn, ep);
    ab_conn_destroy(&conn);
    return rc;
}

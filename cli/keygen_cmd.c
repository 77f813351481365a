/*
 * keygen_cmd.c - `agentbus keygen NAME [--dir DIR] [--json]`: make a CURVE
 * key pair and write it as DIR/NAME.key (public) and DIR/NAME.key_secret
 * (secret, mode 0600) in the format of agentbus/keys.h, then print both
 * paths, the public key and its fingerprint.
 *
 * Invariants:
 *  1. No file is ever overwritten (ab_keypair_write: O_EXCL); an existing
 *     file or an unwritable directory is exit 1 with the path named, and
 *     leaves nothing behind.
 *  2. The secret key is never printed: only the public key and paths.
 */
#include "agentbus/buf.h"
#include "agentbus/json.h"
#include "agentbus/keys.h"
#include "cli.h"

#include <getopt.h>
#include <string.h>

struct kopts {
    const char *name;
    const char *dir;
    bool json;
};

static void print_help(void)
{
    printf("usage: agentbus keygen NAME [--dir DIR] [--json]\n\n"
           "Make a CURVE key pair for a broker or a client and write it as two files:\n"
           "  DIR/NAME.key         the public key (give it to whoever must know this key)\n"
           "  DIR/NAME.key_secret  the public and the secret key, mode 0600 (keep it private)\n"
           "Existing files are never overwritten. Prints both paths, the public key and its\n"
           "fingerprint (the first 8 characters, as the broker's logs show it).\n\n"
           "options:\n"
           "  --dir DIR   where to write the files (default: the current directory)\n"
           "  --json      print one JSON object instead of text\n"
           "  -h, --help  show this help\n\n"
           "Exit status: 0 written, 1 failed (a file exists, the directory is not\n"
           "writable, libzmq without CURVE), 2 usage error.\n");
}

static int parse_args(int argc, char **argv, struct kopts *o)
{
    static const struct option longopts[] = {
        {"dir", required_argument, NULL, 'd'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = cli_getopt(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': o->dir = optarg; break;
        case 'j': o->json = true; break;
        case 'h': print_help(); return -1;
        default: return cli_bad_option("keygen", c);
        }
    }
    if (optind >= argc)
        return cli_usage_error("keygen", "no key name (usage: agentbus keygen NAME)");
    o->name = argv[optind++];
    if (optind < argc)
        return cli_usage_error("keygen", "unexpected argument '%s'", argv[optind]);
    if (o->name[0] == '\0' || strchr(o->name, '/') != NULL)
        return cli_usage_error("keygen", "a key name must be non-empty and without '/', got '%s'",
                               o->name);
    if (o->dir[0] == '\0')
        return cli_usage_error("keygen", "--dir wants a directory");
    return 0;
}

static void json_member(const char *key, const char *value, bool last)
{
    ab_buf_t b = AB_BUF_INIT;
    if (ab_json_quote(&b, value, strlen(value)) == AB_OK)
        printf("\"%s\":%.*s%s", key, (int)b.len, (const char *)b.data, last ? "" : ",");
    ab_buf_free(&b);
}

static void print_result(const struct kopts *o, const ab_keypair_t *kp)
{
    char pub[4200], sec[4200], fp[9];
    snprintf(pub, sizeof pub, "%s/%s.key", o->dir, o->name);
    snprintf(sec, sizeof sec, "%s/%s.key_secret", o->dir, o->name);
    ab_key_fingerprint(kp->public_key, fp);
    if (!o->json) {
        printf("wrote %s (the public key)\n"
               "wrote %s (the secret key, mode 0600: keep it private)\n"
               "public-key %s\nfingerprint %s\n",
               pub, sec, kp->public_key, fp);
        return;
    }
    printf("{");
    json_member("name", o->name, false);
    json_member("public_file", pub, false);
    json_member("secret_file", sec, false);
    json_member("public_key", kp->public_key, false);
    json_member("fingerprint", fp, true);
    printf("}\n");
}

int cmd_keygen(int argc, char **argv)
{
    struct kopts o = {.dir = "."};
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? AB_EXIT_OK : rc;
    ab_keypair_t kp;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_keypair_new(&kp, &err) != AB_OK || ab_keypair_write(&kp, o.dir, o.name, &err) != AB_OK) {
        fprintf(stderr, "agentbus keygen: %s\n", err.message);
        return AB_EXIT_FAIL;
    }
    print_result(&o, &kp);
    memset(&kp, 0, sizeof kp);
    return AB_EXIT_OK;
}

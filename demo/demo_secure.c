/*
 * demo_secure.c - `agentbus demo --secure`: the same fabric with CURVE keys
 * and an access file (docs/OPERATIONS.md "Securing a bus across machines").
 *
 * Under DATA/keys it makes three key pairs with the library's keygen - the
 * broker's, `agents` (the worker processes: publish and serve on the demo's
 * threads) and `console` (this process: observe and control them) - and an
 * access file naming them. The broker is started with `--keys DATA/keys`;
 * this process takes the console key through the environment
 * (AGENTBUS_KEY, AGENTBUS_SERVER_KEY) before its first connection, and every
 * child gets the agents key as the global options `--key F --server-key F`
 * before its command. At the end it shows the rules at work: the console's
 * claim (a publish right it lacks) is refused `unauthorized`, and a key the
 * access file does not list is refused at the handshake.
 *
 * Invariants:
 *  1. Keys and the access file are made before the broker starts; a
 *     failure to make them stops the demo (nothing runs open instead).
 *  2. Each role is limited to the demo's thread prefix (the thread id and
 *     the dispatch act's "<thread>-dispatch" share it).
 */
#include "agentbus/client.h"
#include "agentbus/keys.h"
#include "demo.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static struct {
    bool on;
    char dir[600];
    char agents[700];  /* the agents' secret key file */
    char console[700]; /* the console's (this process's) */
    char server[700];  /* the broker's public key file */
} K;

static int make_pair(const char *name, ab_keypair_t *kp)
{
    ab_error_t err = AB_ERROR_INIT;
    if (ab_keypair_new(kp, &err) != AB_OK || ab_keypair_write(kp, K.dir, name, &err) != AB_OK) {
        fprintf(stderr, "agentbus demo: --secure: %s\n", err.message);
        return -1;
    }
    return 0;
}

int demo_secure_setup(const char *data, const char *prefix, FILE *info)
{
    snprintf(K.dir, sizeof K.dir, "%s/keys", data);
    if (mkdir(K.dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "agentbus demo: --secure: cannot make %s: %s\n", K.dir, strerror(errno));
        return -1;
    }
    ab_keypair_t broker, agents, console;
    char path[700];
    snprintf(path, sizeof path, "%s/broker.key_secret", K.dir);
    ab_error_t err = AB_ERROR_INIT;
    bool have = ab_keypair_read(&broker, path, &err) == AB_OK; /* --data of an earlier run */
    if (!have && (make_pair("broker", &broker) != 0))
        return -1;
    snprintf(path, sizeof path, "%s/agents.key_secret", K.dir);
    if (ab_keypair_read(&agents, path, &err) != AB_OK && make_pair("agents", &agents) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/console.key_secret", K.dir);
    if (ab_keypair_read(&console, path, &err) != AB_OK && make_pair("console", &console) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/access", K.dir);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "agentbus demo: --secure: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f,
            "# agentbus demo --secure: who may do what on this bus\n"
            "agents  agents.key   publish:%s serve:%s\n"
            "console console.key  observe:%s control:%s\n",
            prefix, prefix, prefix, prefix);
    fclose(f);
    snprintf(K.agents, sizeof K.agents, "%s/agents.key_secret", K.dir);
    snprintf(K.server, sizeof K.server, "%s/broker.key", K.dir);
    snprintf(K.console, sizeof K.console, "%s/console.key_secret", K.dir);
    setenv("AGENTBUS_KEY", K.console, 1); /* this process: the console */
    setenv("AGENTBUS_SERVER_KEY", K.server, 1);
    K.on = true;
    fprintf(info,
            "== secure: CURVE keys and an access file in %s: agents may publish and serve,\n"
            "   console may observe and control, each only threads starting %s\n",
            K.dir, prefix);
    return 0;
}

const char *demo_secure_keys_dir(void)
{
    return K.on ? K.dir : NULL;
}

int demo_key_args(const char **argv)
{
    if (!K.on)
        return 0;
    argv[0] = "--key";
    argv[1] = K.agents;
    argv[2] = "--server-key";
    argv[3] = K.server;
    return 4;
}

void demo_secure_child_env(bool agents)
{
    if (K.on)
        setenv("AGENTBUS_KEY", agents ? K.agents : K.console, 1);
}

/* The rules at work: the console may not publish; an unlisted key gets no welcome. */
int demo_secure_check(const char *ep, const char *thread, FILE *info)
{
    if (!K.on)
        return DEMO_OK;
    ab_conn_t *c = NULL;
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_claimed_t cl;
    int rc = DEMO_FAIL;
    ab_status_t st = ab_doc_new(&doc) == AB_OK ? ab_conn_new(&c, ep, NULL, &err) : AB_NOMEM;
    if (st == AB_OK)
        st = ab_conn_claim(c, thread, "not-the-console-s", doc, &cl, 5000, &err);
    if (st == AB_UNAUTHORIZED) {
        fprintf(info, "== secure: the console's claim on %s was refused: %s\n", thread,
                err.message);
        rc = DEMO_OK;
    } else {
        fprintf(stderr, "agentbus demo: --secure: the console's claim was not refused (%s)\n",
                ab_status_name(st));
    }
    ab_conn_destroy(&c);
    ab_doc_destroy(&doc);
    ab_keypair_t stranger;
    ab_conn_opts_t o = {.timeout_ms = 1000, .key = &stranger};
    char server[AB_KEY_Z85_SIZE] = "";
    ab_keypair_t srv;
    if (rc == DEMO_OK && ab_keypair_new(&stranger, &err) == AB_OK &&
        ab_keypair_read(&srv, K.server, &err) == AB_OK) {
        memcpy(server, srv.public_key, sizeof server);
        o.server_key = server;
        st = ab_conn_new(&c, ep, &o, &err);
        ab_conn_destroy(&c);
        if (st == AB_TIMEOUT) {
            fprintf(info, "== secure: a key the access file does not list got no answer (refused "
                          "at the handshake; the broker log names its fingerprint)\n");
        } else {
            fprintf(stderr, "agentbus demo: --secure: an unlisted key was not refused (%s)\n",
                    ab_status_name(st));
            rc = DEMO_FAIL;
        }
    }
    return rc;
}

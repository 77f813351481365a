/*
 * zap.c - the broker's ZAP handler (ZeroMQ RFC 27) for CURVE authentication
 * (docs/OPERATIONS.md "Securing a bus across machines").
 *
 * With `--keys DIR` the broker's two endpoints are CURVE servers with the key
 * pair DIR/broker.key_secret, and every handshake is decided here: the
 * client's public key must be one of the NAME.key files in DIR (other than broker.key); the
 * file's name (without .key) is the client's name, given to ZeroMQ as its
 * user id.
 *
 * Invariants:
 *  1. Fail closed. The handler's socket is bound on the broker's context
 *     before any CURVE socket is bound (libzmq accepts every key when no
 *     handler answers), and the broker does not start when it cannot be.
 *  2. Only CURVE with a known key is accepted (status 200); anything else is
 *     refused (400), and the refusal is logged with the key's fingerprint
 *     and the peer address, at most once a second (the rest are counted in
 *     the next line).
 *  3. The keys are read once at start; the handler thread only reads them.
 *  4. The thread stops within POLL_MS of ab__zap_stop(), closing its socket
 *     before the context is terminated.
 */
#include "zap.h"
#include "ab_common.h"
#include "log.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define POLL_MS      100
#define KEYS_MAX     4096

typedef struct zkey {
    uint8_t key[32];
    char name[64];
} zkey_t;

struct ab__zap {
    void *sock;
    pthread_t th;
    atomic_bool stop;
    zkey_t *keys;
    size_t nkeys;
    int64_t last_log_ms;
    uint64_t unlogged;
};

static ab_status_t load_server(const char *dir, ab_keypair_t *server, ab_error_t *err)
{
    char path[AB_BROKER_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/broker.key_secret", dir);
    ab_status_t rc = ab_keypair_read(server, path, err);
    if (rc == AB_NOT_FOUND) {
        ab_error_clear(err);
        return ab_error_set(err, AB_INVALID_CONFIG, "keys",
                            "%s is missing: make the broker's key pair with `agentbus keygen "
                            "broker --dir %s`",
                            path, dir);
    }
    if (rc == AB_OK && server->secret_key[0] == '\0')
        return ab_error_set(err, AB_INVALID_CONFIG, "keys", "%s holds no secret key", path);
    return rc;
}

static bool is_client_key(const char *name)
{
    size_t n = strlen(name);
    return n > 4 && strcmp(name + n - 4, ".key") == 0 && strcmp(name, "broker.key") != 0 &&
           name[0] != '.';
}

static ab_status_t add_key(ab__zap_t *z, const char *dir, const char *file, ab_error_t *err)
{
    char path[AB_BROKER_PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    ab_keypair_t kp;
    ab_status_t rc = ab_keypair_read(&kp, path, err);
    if (rc != AB_OK)
        return rc;
    if (z->nkeys >= KEYS_MAX)
        return ab_error_set(err, AB_TOO_LARGE, "keys", "%s: more than %d client keys", dir,
                            KEYS_MAX);
    zkey_t *v = realloc(z->keys, (z->nkeys + 1) * sizeof(*v));
    if (v == NULL)
        return ab_error_set(err, AB_NOMEM, "", "out of memory reading keys");
    z->keys = v;
    zkey_t *k = &z->keys[z->nkeys++];
    zmq_z85_decode(k->key, kp.public_key);
    snprintf(k->name, sizeof k->name, "%.*s", (int)(strlen(file) - 4), file);
    return AB_OK;
}

static ab_status_t load_clients(ab__zap_t *z, const char *dir, ab_error_t *err)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return ab_error_set(err, AB_INVALID_CONFIG, "keys", "cannot read %s", dir);
    ab_status_t rc = AB_OK;
    for (struct dirent *e; rc == AB_OK && (e = readdir(d)) != NULL;)
        if (is_client_key(e->d_name))
            rc = add_key(z, dir, e->d_name, err);
    closedir(d);
    if (rc == AB_OK && z->nkeys == 0)
        ab__log(AB_LOG_WARN, "keys: %s holds no client key (NAME.key): nobody can connect", dir);
    return rc;
}

static const zkey_t *known(const ab__zap_t *z, const uint8_t *key)
{
    for (size_t i = 0; i < z->nkeys; i++)
        if (memcmp(z->keys[i].key, key, 32) == 0)
            return &z->keys[i];
    return NULL;
}

/* Log a refusal, at most once a second (invariant 2). */
static void note_refused(ab__zap_t *z, const uint8_t *key, size_t klen, const char *addr,
                         const char *why)
{
    int64_t now = ab__mono_ms();
    if (z->last_log_ms && now - z->last_log_ms < 1000) {
        z->unlogged++;
        return;
    }
    char z85[AB_KEY_Z85_SIZE] = "", fp[9] = "-";
    if (klen == 32 && zmq_z85_encode(z85, key, 32) != NULL)
        ab_key_fingerprint(z85, fp);
    ab__log(AB_LOG_WARN, "keys: refused a connection from %s: %s (key %s)%s", addr, why, fp,
            z->unlogged ? " (and more refusals since the last line)" : "");
    z->last_log_ms = now;
    z->unlogged = 0;
}

/* Answer one ZAP request (frames: version, request id, domain, address, identity,
 * mechanism, credentials...). */
static void answer(ab__zap_t *z, zmq_msg_t *f, int n)
{
    const zkey_t *k = NULL;
    char addr[128] = "?";
    if (n >= 4)
        snprintf(addr, sizeof addr, "%.*s", (int)zmq_msg_size(&f[3]), (char *)zmq_msg_data(&f[3]));
    bool curve = n >= 7 && zmq_msg_size(&f[5]) == 5 && memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0;
    if (curve && zmq_msg_size(&f[6]) == 32)
        k = known(z, zmq_msg_data(&f[6]));
    if (k == NULL)
        note_refused(z, n >= 7 ? zmq_msg_data(&f[6]) : NULL, n >= 7 ? zmq_msg_size(&f[6]) : 0, addr,
                     curve ? "unknown key" : "not CURVE");
    const char *code = k ? "200" : "400", *text = k ? "OK" : "unknown key";
    zmq_send(z->sock, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(z->sock, n >= 2 ? zmq_msg_data(&f[1]) : "", n >= 2 ? zmq_msg_size(&f[1]) : 0,
             ZMQ_SNDMORE);
    zmq_send(z->sock, code, 3, ZMQ_SNDMORE);
    zmq_send(z->sock, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(z->sock, k ? k->name : "", k ? strlen(k->name) : 0, ZMQ_SNDMORE);
    zmq_send(z->sock, "", 0, 0);
}

static void *zap_main(void *arg)
{
    ab__zap_t *z = arg;
    while (!atomic_load(&z->stop)) {
        zmq_pollitem_t it = {.socket = z->sock, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, POLL_MS) <= 0)
            continue;
        zmq_msg_t f[8];
        int n = 0, more = 1;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, z->sock, 0) < 0) {
                zmq_msg_close(&m);
                break;
            }
            more = zmq_msg_more(&m);
            if (n < 8)
                f[n++] = m;
            else
                zmq_msg_close(&m);
        }
        answer(z, f, n);
        for (int i = 0; i < n; i++)
            zmq_msg_close(&f[i]);
    }
    zmq_close(z->sock); /* invariant 4 */
    return NULL;
}

ab_status_t ab__zap_start(ab__zap_t **out, void *zctx, const char *dir, ab_keypair_t *server,
                          ab_error_t *err)
{
    *out = NULL;
    ab__zap_t *z = calloc(1, sizeof(*z));
    if (z == NULL)
        return ab_error_set(err, AB_NOMEM, "", "out of memory");
    ab_status_t rc = load_server(dir, server, err);
    if (rc == AB_OK)
        rc = load_clients(z, dir, err);
    if (rc == AB_OK &&
        ((z->sock = zmq_socket(zctx, ZMQ_REP)) == NULL || zmq_bind(z->sock, ZAP_ENDPOINT) != 0))
        rc = ab_error_set(err, AB_INTERNAL, "keys", "cannot start the ZAP handler: %s",
                          zmq_strerror(zmq_errno()));
    if (rc == AB_OK) {
        int zero = 0;
        zmq_setsockopt(z->sock, ZMQ_LINGER, &zero, sizeof zero);
        if (pthread_create(&z->th, NULL, zap_main, z) != 0)
            rc = ab_error_set(err, AB_INTERNAL, "keys", "cannot start the ZAP handler's thread");
    }
    if (rc != AB_OK) {
        if (z->sock)
            zmq_close(z->sock);
        free(z->keys);
        free(z);
        return rc;
    }
    ab__log(AB_LOG_INFO, "keys: CURVE on, %zu client key(s) from %s", z->nkeys, dir);
    *out = z;
    return AB_OK;
}

void ab__zap_stop(ab__zap_t **zp)
{
    ab__zap_t *z = zp ? *zp : NULL;
    if (z == NULL)
        return;
    atomic_store(&z->stop, true);
    pthread_join(z->th, NULL);
    free(z->keys);
    free(z);
    *zp = NULL;
}

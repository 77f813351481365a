/*
 * zap.c - the broker's ZAP handler (ZeroMQ RFC 27) for CURVE authentication
 * (docs/OPERATIONS.md "Securing a bus across machines").
 *
 * With `--keys DIR` the broker's two endpoints are CURVE servers with the key
 * pair DIR/broker.key_secret, and every handshake is decided here: the
 * client's public key must be in the broker's access table (access.h: the
 * access file, or every NAME.key of DIR). ZeroMQ is given the key itself
 * (Z85) as the connection's user id, so every later check looks the key up
 * in the table current at that moment: a key removed by a reload loses its
 * rights on connections it already has.
 *
 * Invariants:
 *  1. Fail closed. The handler's socket is bound on the broker's context
 *     before any CURVE socket is bound (libzmq accepts every key when no
 *     handler answers), and the broker does not start when it cannot be.
 *  2. Only CURVE with a key of the current table is accepted (status 200);
 *     anything else is refused (400), and the refusal is logged with the
 *     key's fingerprint and the peer address, at most once a second (the
 *     rest are counted in the next line).
 *  3. The table is read through the broker's box (one reference per
 *     request), so a reload applies to the next handshake.
 *  4. The thread stops within POLL_MS of ab__zap_stop(), closing its socket
 *     before the context is terminated.
 */
#include "zap.h"
#include "ab_common.h"
#include "log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define POLL_MS      100

struct ab__zap {
    void *sock;
    pthread_t th;
    atomic_bool stop;
    ab__access_box_t *box;
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
    ab__access_t *table = ab__access_box_get(z->box);
    const ab__principal_t *k = NULL;
    char addr[128] = "?";
    if (n >= 4)
        snprintf(addr, sizeof addr, "%.*s", (int)zmq_msg_size(&f[3]), (char *)zmq_msg_data(&f[3]));
    bool curve = n >= 7 && zmq_msg_size(&f[5]) == 5 && memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0;
    if (curve && zmq_msg_size(&f[6]) == 32)
        k = ab__access_find(table, zmq_msg_data(&f[6]));
    if (k == NULL)
        note_refused(z, n >= 7 ? zmq_msg_data(&f[6]) : NULL, n >= 7 ? zmq_msg_size(&f[6]) : 0, addr,
                     curve ? "unknown key" : "not CURVE");
    const char *code = k ? "200" : "400", *text = k ? "OK" : "unknown key";
    zmq_send(z->sock, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(z->sock, n >= 2 ? zmq_msg_data(&f[1]) : "", n >= 2 ? zmq_msg_size(&f[1]) : 0,
             ZMQ_SNDMORE);
    zmq_send(z->sock, code, 3, ZMQ_SNDMORE);
    zmq_send(z->sock, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(z->sock, k ? ab__principal_key(k) : "", k ? AB_KEY_Z85_LEN : 0, ZMQ_SNDMORE);
    zmq_send(z->sock, "", 0, 0);
    ab__access_unref(&table);
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
                          ab__access_box_t *box, ab_error_t *err)
{
    *out = NULL;
    ab__zap_t *z = calloc(1, sizeof(*z));
    if (z == NULL)
        return ab_error_set(err, AB_NOMEM, "", "out of memory");
    z->box = box;
    ab_status_t rc = load_server(dir, server, err);
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
        free(z);
        return rc;
    }
    ab__log(AB_LOG_INFO, "keys: CURVE on, the broker's key from %s", dir);
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
    free(z);
    *zp = NULL;
}

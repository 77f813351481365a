/*
 * raw_client.h - bare ZeroMQ clients for tests that must behave in ways the
 * client library never does (never read, flood, send odd frames), and the
 * broker's memory as /proc shows it (header-only: every function is static).
 *
 * Every wait is bounded; failures fail the cmocka test.
 */
#ifndef AB_TESTS_RAW_CLIENT_H
#define AB_TESTS_RAW_CLIENT_H

#include "agentbus/codec.h"
#include "agentbus/keys.h"
#include "agentbus/nego.h"
#include "broker_proc.h"

#include <zmq.h>

/* A field of /proc/<pid>/status in kB (VmRSS, VmHWM), -1 when unreadable. */
static inline long rc_proc_kb(pid_t pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            v = strtol(line + kl + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/*
 * Under AddressSanitizer freed memory sits in a quarantine of 256 MiB
 * (default) before it is reused, so a broker child's RSS climbs by up to that
 * much whatever it does; a small quarantine makes RSS show what it really
 * keeps. Appended to ASAN_OPTIONS (earlier options stay) for the children
 * started after this call; ignored by a build without ASan.
 */
static inline void rc_small_asan_quarantine(void)
{
    static char asan[1024];
    const char *prev = getenv("ASAN_OPTIONS");
    if (prev && strstr(prev, "quarantine_size_mb"))
        return;
    snprintf(asan, sizeof(asan), "%s%squarantine_size_mb=8:thread_local_quarantine_size_kb=256",
             prev ? prev : "", prev && *prev ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
}

/* A DEALER to @p ep with receive high-water mark @p rcvhwm (0 = ZeroMQ's default). */
/* With AGENTBUS_KEY and AGENTBUS_SERVER_KEY set (a CURVE run), make @p s a CURVE client
 * with those files' keys, as the client library does. */
static inline void rc_curve_from_env(void *s)
{
    const char *mine = getenv("AGENTBUS_KEY"), *server = getenv("AGENTBUS_SERVER_KEY");
    if (mine == NULL || server == NULL)
        return;
    ab_keypair_t me, srv;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_keypair_read(&me, mine, &err) != AB_OK || ab_keypair_read(&srv, server, &err) != AB_OK)
        fail_msg("keys from the environment: %s", err.message);
    assert_int_equal(zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, srv.public_key, AB_KEY_Z85_LEN), 0);
    assert_int_equal(zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, me.public_key, AB_KEY_Z85_LEN), 0);
    assert_int_equal(zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, me.secret_key, AB_KEY_Z85_LEN), 0);
}

static inline void *rc_dealer(void *ctx, const char *ep, int rcvhwm)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    assert_non_null(s);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    if (rcvhwm > 0)
        zmq_setsockopt(s, ZMQ_RCVHWM, &rcvhwm, sizeof(rcvhwm));
    rc_curve_from_env(s);
    assert_int_equal(zmq_connect(s, ep), 0);
    return s;
}

/* Send one encoded header without blocking for more than @p ms; true when sent. */
static inline bool rc_send(void *s, const ab_buf_t *hdr, int ms)
{
    long deadline = ab__mono_ms() + ms;
    for (;;) {
        if (zmq_send(s, hdr->data, hdr->len, ZMQ_DONTWAIT) >= 0)
            return true;
        if (errno != EAGAIN || ab__mono_ms() >= deadline)
            return false;
        zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLOUT};
        zmq_poll(&it, 1, 10);
    }
}

/* Encode @p m into @p out (reset first); fails the test on error. */
static inline void rc_encode(const ab_msg_t *m, ab_buf_t *out)
{
    ab_error_t err = AB_ERROR_INIT;
    out->len = 0;
    if (ab_msg_encode(m, out, &err) != AB_OK)
        fail_msg("encode %s: %s", ab_op_name(m->op), err.message);
}

/* The highest protocol version this build speaks. */
static inline uint32_t rc_version(void)
{
    size_t nv = 0;
    const uint32_t *vs = ab_versions_supported(&nv);
    uint32_t v = vs[0];
    for (size_t i = 0; i < nv; i++)
        if (vs[i] > v)
            v = vs[i];
    return v;
}

/* A `hello` with cid @p cid offering every version this build speaks. */
static inline void rc_encode_hello(ab_buf_t *out, uint64_t cid)
{
    size_t nv = 0;
    const uint32_t *vers = ab_versions_supported(&nv);
    ab_msg_t m = {.op = AB_OP_HELLO, .cid = cid};
    m.u.hello.versions = vers;
    m.u.hello.nversions = nv;
    m.u.hello.client = (ab_str_t){"raw-client", 10};
    rc_encode(&m, out);
}

/*
 * Receive one whole message into @p parts (at most @p max frames, the rest
 * dropped) within @p ms. @return the frame count, 0 on timeout. Close the
 * frames with rc_close().
 */
static inline size_t rc_recv(void *s, zmq_msg_t *parts, size_t max, long ms)
{
    zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, ms) <= 0)
        return 0;
    size_t n = 0;
    bool more = true;
    while (more) {
        zmq_msg_t f;
        zmq_msg_init(&f);
        if (zmq_msg_recv(&f, s, 0) < 0) {
            zmq_msg_close(&f);
            break;
        }
        more = zmq_msg_more(&f);
        if (n < max)
            parts[n++] = f;
        else
            zmq_msg_close(&f);
    }
    return n;
}

static inline void rc_close(zmq_msg_t *parts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        zmq_msg_close(&parts[i]);
}

#endif /* AB_TESTS_RAW_CLIENT_H */

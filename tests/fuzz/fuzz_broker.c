/*
 * fuzz_broker.c - libFuzzer target for the broker's command handling, in
 * process: one broker (real command loop, writer, sequencer, replay readers,
 * SQLite store in a fresh mkdtemp() directory under /tmp, durability
 * `process`) is started on the first input with ab_broker_new() and
 * serves every input over `inproc://` endpoints on its own ZeroMQ context
 * (faster than tcp; only the ROUTER's tcp-level ZMQ_MAXMSGSIZE is skipped);
 * atexit() stops it and removes the directory. The broker's state (runs,
 * epochs, replay sessions) carries over from one input to the next, so a
 * finding may need the inputs before it to reproduce (keep the corpus and
 * replay it in order, or with -runs over the whole folder).
 *
 * Input framing (tests/fuzz/gen_broker_seeds.c writes the seed corpus):
 *
 *   input   := control:u8 message*
 *   control := bit 0 (0x01) fresh DEALER connection before this input;
 *              bit 1 (0x02) on a fresh connection, skip the harness's own
 *              valid `hello` (the input drives the handshake itself);
 *              other bits ignored. Every 256 inputs the connection is
 *              recycled anyway (with the harness's hello).
 *   message := nframes:u8 frame{nframes}   one multipart message sent from
 *              the DEALER; nframes 0 is a barrier: the harness runs its
 *              probes (check 1 below) right there, so the writer has
 *              answered every earlier claim and publish before the next
 *              message goes out (at most 8 barriers per input; more are
 *              ignored)
 *   frame   := len:u16 little-endian, then len bytes. At the end of the
 *              input a frame takes what is left (a short length prefix or a
 *              length past the end is cut back).
 *
 * Inside every frame each occurrence of the 8 bytes "$$$$$$$$" is replaced by
 * the input's number in 8 lowercase hex digits, so a seed naming thread
 * "t-$$$$$$$$" and run "r-$$$$$$$$" works on a fresh run every time it runs
 * (accepted events, not only duplicates and fenced ones).
 *
 * Checks, for any input; a violation calls abort():
 *  1. liveness: after the input's messages a `ping` (command thread) and a
 *     `heads` of one run (a writer job, answered after every earlier claim
 *     and publish) are both answered within 10 s;
 *  2. every reply decodes with ab_msg_decode() under the broker's limits, is
 *     a broker message (never a request op, never a heartbeat), carries
 *     exactly one frame after the header for a `replay_chunk` (exactly
 *     `bytes` long, `count` well-formed records of stamp and envelope that
 *     decode) and none for every other op;
 *  3. ASan/UBSan (and LeakSanitizer under libFuzzer) find nothing in any of
 *     the broker's threads.
 * In the normal build tests/fuzz/replay_main.c runs the committed corpus
 * through the same checks (ctest fuzz.broker.corpus).
 *
 * With AB_FUZZ_BROKER_CURVE set (ctest fuzz.broker.corpus.curve), the broker
 * runs with keys and an access file instead, on tcp://127.0.0.1 ports of its
 * choosing, and the harness connects with CURVE as a key that may publish,
 * observe and control only threads starting with "t-" (and observe the
 * probe's thread) and serve: every input then also goes through
 * authorization (broker/authz.c), allowed and refused alike, and the checks
 * are the same.
 */
#include "agentbus/broker.h"
#include "agentbus/codec.h"
#include "agentbus/keys.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CTL_FRESH       0x01
#define CTL_NO_HELLO    0x02
#define RECYCLE_EVERY   256
#define PONG_TIMEOUT_MS 10000
#define ID_MARK         "$$$$$$$$"
#define ID_MARK_LEN     8
#define PING_CID_BASE   (1ull << 62)
#define PROBE_PING      1u
#define PROBE_HEADS     2u
#define MAX_BARRIERS    8

typedef struct harness {
    ab_broker_t *broker;
    void *dealer;
    char dir[64];
    ab_limits_t limits;
    ab_doc_t *doc;  /* reply headers */
    ab_doc_t *rdoc; /* records of a replay chunk */
    uint64_t inputs;
    uint64_t probes;
    uint32_t on_conn; /* inputs sent on this DEALER */
    bool curve;       /* AB_FUZZ_BROKER_CURVE: keys, an access file, tcp */
    ab_keypair_t server, client;
} harness_t;

static harness_t H;

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_broker: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

/* Remove @p path and everything under it (no symlinks followed). */
static void remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d != NULL && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char sub[4096];
            snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
            remove_tree(sub);
        }
        if (d != NULL)
            closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static void close_dealer(void)
{
    if (H.dealer != NULL) {
        int zero = 0;
        zmq_setsockopt(H.dealer, ZMQ_LINGER, &zero, sizeof(zero));
        zmq_close(H.dealer);
        H.dealer = NULL;
    }
}

static void cleanup(void)
{
    close_dealer();
    if (H.broker != NULL && ab_broker_destroy(&H.broker) != 0)
        fprintf(stderr, "fuzz_broker: the broker did not stop cleanly\n");
    ab_doc_destroy(&H.doc);
    ab_doc_destroy(&H.rdoc);
    if (H.dir[0] != '\0')
        remove_tree(H.dir);
    H.dir[0] = '\0';
}

/* The CURVE variant: the broker's keys and an access file for the harness's key. */
static void init_curve(ab_broker_config_t *cfg)
{
    ab_error_t err = AB_ERROR_INIT;
    snprintf(cfg->keys_dir, sizeof(cfg->keys_dir), "%s/keys", H.dir);
    if (mkdir(cfg->keys_dir, 0700) != 0 || ab_keypair_new(&H.server, &err) != AB_OK ||
        ab_keypair_new(&H.client, &err) != AB_OK ||
        ab_keypair_write(&H.server, cfg->keys_dir, "broker", &err) != AB_OK)
        die("cannot make keys", err.message);
    char path[4200];
    snprintf(path, sizeof(path), "%s/access", cfg->keys_dir);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        die("cannot write the access file", path);
    fprintf(f, "fuzz %s publish:t- observe:t-,fuzz-probe serve control:t-\n", H.client.public_key);
    fclose(f);
    snprintf(cfg->cmd_endpoint, sizeof(cfg->cmd_endpoint), "tcp://127.0.0.1:*");
    snprintf(cfg->events_endpoint, sizeof(cfg->events_endpoint), "tcp://127.0.0.1:*");
}

static void init(void)
{
    snprintf(H.dir, sizeof(H.dir), "/tmp/ab-fuzz-broker-XXXXXX");
    if (mkdtemp(H.dir) == NULL)
        die("mkdtemp failed", H.dir);
    atexit(cleanup);
    ab_broker_config_t cfg;
    ab_broker_config_defaults(&cfg);
    snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s/data", H.dir);
    snprintf(cfg.cmd_endpoint, sizeof(cfg.cmd_endpoint), "inproc://ab-fuzz-cmd");
    snprintf(cfg.events_endpoint, sizeof(cfg.events_endpoint), "inproc://ab-fuzz-events");
    H.curve = getenv("AB_FUZZ_BROKER_CURVE") != NULL;
    if (H.curve)
        init_curve(&cfg);
    cfg.durability = AB_DURABILITY_PROCESS;
    cfg.log_level = getenv("AB_FUZZ_BROKER_LOG") != NULL ? AB_LOG_DEBUG : AB_LOG_ERROR;
    H.limits = cfg.limits;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_broker_new(&cfg, &H.broker, &err) != AB_OK)
        die("cannot start the broker", err.message);
    if (ab_doc_new(&H.doc) != AB_OK || ab_doc_new(&H.rdoc) != AB_OK)
        die("out of memory", NULL);
}

/* Encode @p m and send it as a one-frame message. */
static void send_msg(const ab_msg_t *m)
{
    ab_buf_t b = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_msg_encode(m, &b, &err) != AB_OK)
        die("cannot encode a request", err.message);
    if (zmq_send(H.dealer, b.data, b.len, 0) < 0)
        die("cannot send a request", zmq_strerror(zmq_errno()));
    ab_buf_free(&b);
}

/* A new DEALER (unbounded queues: a reply is never dropped on our side). */
static void reconnect(bool hello)
{
    close_dealer();
    H.dealer = zmq_socket(ab_broker_zmq_context(H.broker), ZMQ_DEALER);
    if (H.dealer == NULL)
        die("cannot create a DEALER", zmq_strerror(zmq_errno()));
    int zero = 0;
    zmq_setsockopt(H.dealer, ZMQ_SNDHWM, &zero, sizeof(zero));
    zmq_setsockopt(H.dealer, ZMQ_RCVHWM, &zero, sizeof(zero));
    if (H.curve &&
        (zmq_setsockopt(H.dealer, ZMQ_CURVE_SERVERKEY, H.server.public_key, AB_KEY_Z85_LEN) != 0 ||
         zmq_setsockopt(H.dealer, ZMQ_CURVE_PUBLICKEY, H.client.public_key, AB_KEY_Z85_LEN) != 0 ||
         zmq_setsockopt(H.dealer, ZMQ_CURVE_SECRETKEY, H.client.secret_key, AB_KEY_Z85_LEN) != 0))
        die("cannot set the DEALER's keys", zmq_strerror(zmq_errno()));
    if (zmq_connect(H.dealer, ab_broker_cmd_endpoint(H.broker)) != 0)
        die("cannot connect", zmq_strerror(zmq_errno()));
    H.on_conn = 0;
    if (!hello)
        return;
    static const uint32_t versions[] = {1};
    ab_msg_t m = {.op = AB_OP_HELLO, .cid = PING_CID_BASE - 1};
    m.u.hello.versions = versions;
    m.u.hello.nversions = 1;
    m.u.hello.client = (ab_str_t){"fuzz_broker", 11};
    send_msg(&m);
}

/* Replace every ID_MARK in @p f by @p tok (ID_MARK_LEN bytes). */
static void mark_ids(uint8_t *f, size_t len, const char *tok)
{
    for (size_t i = 0; i + ID_MARK_LEN <= len; i++) {
        if (f[i] == '$' && memcmp(f + i, ID_MARK, ID_MARK_LEN) == 0) {
            memcpy(f + i, tok, ID_MARK_LEN);
            i += ID_MARK_LEN - 1;
        }
    }
}

/* Send one frame of @p len bytes at @p p (ids marked). */
static void send_frame(const uint8_t *p, size_t len, bool more, const char *tok)
{
    zmq_msg_t f;
    if (zmq_msg_init_size(&f, len) != 0)
        die("out of memory", NULL);
    if (len > 0) {
        memcpy(zmq_msg_data(&f), p, len);
        mark_ids(zmq_msg_data(&f), len, tok);
    }
    if (zmq_msg_send(&f, H.dealer, more ? ZMQ_SNDMORE : 0) < 0)
        die("cannot send a frame", zmq_strerror(zmq_errno()));
}

static void probe_and_wait(void);

/* Send every message of the input body (after the control byte). */
static void send_messages(const uint8_t *p, size_t n, const char *tok)
{
    size_t at = 0;
    unsigned barriers = 0;
    while (at < n) {
        unsigned frames = p[at++];
        if (frames == 0 && barriers++ < MAX_BARRIERS)
            probe_and_wait();
        for (unsigned i = 0; i < frames; i++) {
            size_t len = 0;
            if (n - at >= 2) {
                len = (size_t)p[at] | (size_t)p[at + 1] << 8;
                at += 2;
            } else {
                at = n;
            }
            if (len > n - at)
                len = n - at;
            send_frame(p + at, len, i + 1 < frames, tok);
            at += len;
        }
    }
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The records frame of a replay_chunk: @p count records that fill it exactly. */
static void check_records(const uint8_t *p, size_t len, uint32_t count)
{
    size_t at = 0;
    ab_error_t err = AB_ERROR_INIT;
    for (uint32_t i = 0; i < count; i++) {
        ab_stamp_t st;
        ab_event_t ev;
        if (len - at < 4 || be32(p + at) > len - at - 4)
            die("replay_chunk: a stamp runs past its frame", NULL);
        size_t s = be32(p + at);
        if (ab_stamp_decode(H.rdoc, p + at + 4, s, &st, &err) != AB_OK)
            die("replay_chunk: bad stamp", err.message);
        at += 4 + s;
        if (len - at < 4 || be32(p + at) > len - at - 4)
            die("replay_chunk: an envelope runs past its frame", NULL);
        size_t e = be32(p + at);
        if (ab_event_decode(H.rdoc, p + at + 4, e, &H.limits, &ev, &err) != AB_OK)
            die("replay_chunk: bad envelope", err.message);
        at += 4 + e;
    }
    if (at != len)
        die("replay_chunk: bytes left after the last record", NULL);
}

/* AB_FUZZ_BROKER_TRACE set: one line per reply (and per published result) on stderr. */
static void trace(const ab_msg_t *m)
{
    static int on = -1;
    if (on < 0)
        on = getenv("AB_FUZZ_BROKER_TRACE") != NULL;
    if (!on)
        return;
    const ab_error_t *e = m->op == AB_OP_ERROR ? m->u.error.error : NULL;
    fprintf(stderr, "reply %s cid %llu%s%s\n", ab_op_name(m->op), (unsigned long long)m->cid,
            e ? ": " : "", e ? e->message : "");
    for (size_t i = 0; m->op == AB_OP_PUBLISHED && i < m->u.published.nresults; i++) {
        const ab_result_t *r = &m->u.published.results[i];
        fprintf(stderr, "  seq %llu %s %s\n", (unsigned long long)r->seq,
                r->status == AB_RESULT_REJECTED ? "rejected" : "ok",
                r->error ? r->error->message : "");
    }
}

/* Check one reply; @return which probe it answers (PROBE_*), or 0. */
static unsigned check_reply(zmq_msg_t *hdr, zmq_msg_t *extra, size_t nextra, uint64_t cid)
{
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_msg_decode(H.doc, zmq_msg_data(hdr), zmq_msg_size(hdr), &H.limits, &m, &err) != AB_OK)
        die("a reply does not decode", err.message);
    trace(&m);
    if (ab_op_is_request(m.op) || m.op == AB_OP_HEARTBEAT)
        die("the broker sent a message that is not a reply", ab_op_name(m.op));
    if (m.op == AB_OP_REPLAY_CHUNK) {
        if (nextra != 1 || zmq_msg_size(extra) != m.u.replay_chunk.bytes)
            die("replay_chunk: wrong records frame", NULL);
        check_records(zmq_msg_data(extra), zmq_msg_size(extra), m.u.replay_chunk.count);
    } else if (nextra != 0) {
        die("a reply has frames after its header", ab_op_name(m.op));
    }
    if (m.op == AB_OP_PONG && m.cid == cid)
        return PROBE_PING;
    if ((m.op == AB_OP_HEADS_REPLY || m.op == AB_OP_ERROR) && m.cid == cid + 1)
        return PROBE_HEADS;
    return 0;
}

/* Receive one whole reply (poll said one is there); @return check_reply's answer. */
static unsigned recv_reply(uint64_t cid)
{
    zmq_msg_t hdr, extra, spare;
    zmq_msg_init(&hdr);
    zmq_msg_init(&extra);
    size_t nextra = 0;
    if (zmq_msg_recv(&hdr, H.dealer, 0) < 0)
        die("cannot receive a reply", zmq_strerror(zmq_errno()));
    bool more = zmq_msg_more(&hdr);
    while (more) {
        zmq_msg_t *f = nextra == 0 ? &extra : &spare;
        if (f == &spare)
            zmq_msg_init(&spare);
        if (zmq_msg_recv(f, H.dealer, 0) < 0)
            die("cannot receive a reply frame", zmq_strerror(zmq_errno()));
        more = zmq_msg_more(f);
        if (f == &spare)
            zmq_msg_close(&spare);
        nextra++;
    }
    unsigned got = check_reply(&hdr, &extra, nextra, cid);
    zmq_msg_close(&hdr);
    zmq_msg_close(&extra);
    return got;
}

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/*
 * The liveness probes: `ping` (answered by the command thread) and `heads`
 * of one run (a writer job: the writer answers in order, so its reply comes
 * after every earlier claim and publish of this connection). Read and check
 * every reply until both are answered; abort after 10 s.
 */
static void probe_and_wait(void)
{
    uint64_t cid = PING_CID_BASE + 2 * H.probes++;
    ab_msg_t m = {.op = AB_OP_PING, .v = 1, .cid = cid};
    send_msg(&m);
    static const ab_run_ref_t probe_run = {{"fuzz-probe", 10}, {"fuzz-probe", 10}};
    m = (ab_msg_t){.op = AB_OP_HEADS, .v = 1, .cid = cid + 1};
    m.u.heads.runs = &probe_run;
    m.u.heads.nruns = 1;
    send_msg(&m);
    unsigned got = 0;
    int64_t deadline = now_ms() + PONG_TIMEOUT_MS;
    zmq_pollitem_t it = {.socket = H.dealer, .events = ZMQ_POLLIN};
    for (int64_t left = PONG_TIMEOUT_MS; left > 0; left = deadline - now_ms()) {
        int n = zmq_poll(&it, 1, (long)left);
        if (n < 0 && zmq_errno() != EINTR)
            die("poll failed", zmq_strerror(zmq_errno()));
        if (n > 0)
            got |= recv_reply(cid);
        if (got == (PROBE_PING | PROBE_HEADS))
            return;
    }
    die("liveness: ping or heads not answered within 10 s", NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (H.broker == NULL)
        init();
    if (size == 0)
        return 0;
    uint8_t ctl = data[0];
    if (H.dealer == NULL || (ctl & CTL_FRESH))
        reconnect(!(ctl & CTL_NO_HELLO));
    else if (H.on_conn >= RECYCLE_EVERY)
        reconnect(true);
    H.inputs++;
    H.on_conn++;
    char tok[ID_MARK_LEN + 1];
    snprintf(tok, sizeof(tok), "%08x", (unsigned)(H.inputs & 0xffffffffu));
    send_messages(data + 1, size - 1, tok);
    probe_and_wait();
    return 0;
}

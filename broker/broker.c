/*
 * broker.c - start-up and shutdown of the broker: load the plugin, open the
 * store handles (the writer's takes the data-directory lock), bind the
 * endpoints, start the writer and replay reader threads and the command loop
 * (ab_broker_new), and stop in order (ab_broker_destroy). ab_broker_run() is
 * the daemon on top: signal handlers, the ready line, wait for SIGINT/SIGTERM.
 *
 * Invariants:
 *  1. Nothing is bound and no ready line is printed unless the plugin loaded
 *     and every store handle opened; a start-up failure exits 1 with the
 *     plugin's or store's message (a locked data directory, a damaged or
 *     newer database) and changes nothing.
 *  2. A stop request is one byte on the broker's self-pipe, which the
 *     command loop polls: signal handlers (daemon only) and ab_broker_destroy()
 *     write it alike; a reload request (SIGHUP, ab_broker_reload()) is the
 *     byte SIGHUP or 'h'. Every thread the broker starts blocks SIGINT,
 *     SIGTERM and SIGHUP.
 *  3. Shutdown order: the command loop returns only after the writer and the
 *     readers reported "stopped" (every queued job answered); threads are
 *     joined, the ROUTER gets a short bounded linger for the final replies,
 *     then the snapshot cache is freed and the store handles close
 *     (releasing the lock).
 *  4. The in-process API installs no signal handler and prints nothing.
 *  5. Everything a broker keeps lives in its handle (the snapshot cache
 *     too, and its log level, which its threads carry): brokers of one
 *     process share no state but the store's table of open database files
 *     (docs/ARCHITECTURE.md "Process-wide state") and, under ab_broker_run(),
 *     the signal handlers.
 */
#include "exposure.h"
#include "loader.h"
#include "metrics.h"
#include "snap_internal.h"
#include "zap.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FINAL_LINGER_MS 1000

typedef struct threads {
    pthread_t writer;
    bool writer_started;
    pthread_t *readers;
    uint32_t nstarted;
    ab_writer_args_t wargs;
    ab_reader_args_t *rargs;
    void *wsock;
    void **rsocks;
} threads_t;

struct ab_broker {
    ab_broker_config_t cfg; /* a copy; b.cfg points here */
    ab__shared_t b;
    ab_plugin_lib_t lib;
    threads_t t;
    ab_seq_t *seq; /* until the writer owns it */
    void *router;
    ab__zap_t *zap;      /* CURVE authentication (--keys), or NULL */
    ab_keypair_t server; /* the broker's CURVE key pair with --keys */
    int pipe[2];         /* the self-pipe: stop requests */
    bool daemon;         /* ab_broker_run: signal handlers, messages on stderr */
    bool signals_on;     /* handlers installed */
    pthread_t cmd;
    bool cmd_started, cmd_joined;
    int rc; /* the command loop's */
    ab_error_t *err;
    ab__metrics_t *metrics; /* --metrics, or NULL */
};

static int sig_wfd = -1; /* the daemon's self-pipe, written by the handlers */

static void on_signal(int sig)
{
    int saved = errno;
    char c = (char)sig;
    ssize_t n = write(sig_wfd, &c, 1);
    (void)n;
    errno = saved;
}

static int open_pipe(int fds[2])
{
    if (pipe(fds) != 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
        fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    }
    return 0;
}

/*
 * The daemon's signals are taken synchronously: SIGINT, SIGTERM and SIGHUP are blocked in
 * the main thread before it starts any other (every thread inherits the mask), and one
 * thread of their own waits for them (sigwaitinfo) and writes them to the self-pipe. The
 * handler stays installed for a thread that unblocks them. So no handler runs inside the
 * main thread's pthread_join; under ThreadSanitizer, which runs a handler there from its own
 * interceptor, a stop was seen to hang (rarely; not proven to be this).
 */
static sigset_t sig_set;
static pthread_t sig_thread;
static bool sig_thread_on;
static atomic_bool sig_quit; /* teardown: the next signal the thread takes ends it */

static void *sig_main(void *arg)
{
    (void)arg;
    ab__thread_start("ab-signals", AB_LOG_WARN, false); /* its name; it writes no log */
    for (;;) {
        int sig = sigwaitinfo(&sig_set, NULL);
        if (atomic_load(&sig_quit))
            return NULL;
        if (sig > 0)
            on_signal(sig);
        else if (errno != EINTR)
            return NULL;
    }
}

static void setup_signals(int wfd)
{
    sig_wfd = wfd;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&sig_set);
    sigaddset(&sig_set, SIGINT);
    sigaddset(&sig_set, SIGTERM);
    sigaddset(&sig_set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sig_set, NULL);
    sig_thread_on = pthread_create(&sig_thread, NULL, sig_main, NULL) == 0;
    if (!sig_thread_on) /* the handler in the main thread, as before */
        pthread_sigmask(SIG_UNBLOCK, &sig_set, NULL);
}

static void teardown_signals(void)
{
    if (sig_thread_on) { /* not pthread_cancel: ASan misreads a cancelled thread's stack */
        atomic_store(&sig_quit, true);
        pthread_kill(sig_thread, SIGTERM); /* blocked there: its sigwaitinfo takes it */
        pthread_join(sig_thread, NULL);
        sig_thread_on = false;
        atomic_store(&sig_quit, false);
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    sig_wfd = -1;
    pthread_sigmask(SIG_UNBLOCK, &sig_set, NULL); /* a signal left pending now acts */
}

/* Record a start-up failure in h->err (first wins); the daemon also prints it. */
static void fail_msg(ab_broker_t *h, ab_status_t code, const char *fmt, ...) AB_PRINTF(3, 4);
static void fail_msg(ab_broker_t *h, ab_status_t code, const char *fmt, ...)
{
    char line[2 * AB_ERROR_MESSAGE_MAX + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (h->daemon)
        fprintf(stderr, "agentbus broker: %s\n", line);
    ab_error_set(h->err, code, "", "%s", line);
}

static void fail(ab_broker_t *h, const char *what, const ab_error_t *e)
{
    fail_msg(h, e->code != AB_OK ? e->code : AB_INTERNAL, "%s: %s", what,
             e->message[0] ? e->message : ab_status_str(e->code));
}

static int make_instance(char out[17])
{
    unsigned char raw[8];
    FILE *f = fopen("/dev/urandom", "rb");
    if (f == NULL)
        return -1;
    size_t n = fread(raw, 1, sizeof(raw), f);
    fclose(f);
    if (n != sizeof(raw))
        return -1;
    for (int i = 0; i < 8; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

/* Load the plugin and open every handle. @return 0 or -1 (reported). */
static int open_store(ab_broker_t *h)
{
    ab__shared_t *b = &h->b;
    const ab_broker_config_t *cfg = b->cfg;
    ab_error_t e = AB_ERROR_INIT;
    if (ab__plugin_load(cfg->plugin, &h->lib, &e) != AB_OK) {
        fail(h, "cannot load the persistence plugin", &e);
        return -1;
    }
    b->plugin = h->lib.plugin;
    ab_plugin_open_opts_t o = {.data_dir = cfg->data_dir,
                               .durability = cfg->durability,
                               .conninfo = cfg->pg_conninfo[0] ? cfg->pg_conninfo : NULL};
    if (b->plugin->open(&o, &b->wdb, &e) != AB_OK) {
        fail(h, "cannot open the store", &e);
        if (h->daemon && e.code == AB_CORRUPT) /* never started afresh by itself */
            fprintf(stderr,
                    "agentbus broker: to start afresh on purpose, move %s/agentbus.db and its"
                    " -wal and -shm files away\n",
                    cfg->data_dir);
        return -1;
    }
    b->rdbs = calloc(cfg->readers, sizeof(*b->rdbs));
    if (b->rdbs == NULL) {
        fail_msg(h, AB_NOMEM, "out of memory");
        return -1;
    }
    o.readonly = true;
    for (uint32_t i = 0; i < cfg->readers; i++) {
        if (b->plugin->open(&o, &b->rdbs[i], &e) != AB_OK) {
            fail(h, "cannot open a replay reader's store handle", &e);
            return -1;
        }
    }
    uint64_t pos = 0;
    if (b->plugin->head_pos(b->wdb, &pos, &e) != AB_OK) {
        fail(h, "cannot read the store's head position", &e);
        return -1;
    }
    atomic_store(&b->head_pos, pos);
    return 0;
}

static void close_store(ab__shared_t *b, ab_plugin_lib_t *lib)
{
    if (b->plugin != NULL) {
        for (uint32_t i = 0; b->rdbs != NULL && i < b->cfg->readers; i++)
            if (b->rdbs[i] != NULL)
                b->plugin->close(b->rdbs[i]);
        if (b->wdb != NULL)
            b->plugin->close(b->wdb);
    }
    free(b->rdbs);
    b->rdbs = NULL;
    b->wdb = NULL;
    if (lib->plugin != NULL)
        ab__plugin_unload(lib);
}

/* Bind @p ep and copy the real endpoint into @p out. @return the socket or NULL (reported). */
ab_status_t ab__secure_socket(ab__shared_t *b, void *s, int type, const char *ep, ab_error_t *err)
{
    int one = 1;
    if (type == ZMQ_XPUB) {
        int hwm = (int)b->cfg->hwm;
        zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    }
    if (b->curve_secret[0] == '\0')
        return AB_OK;
    if (zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof(one)) != 0 ||
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, b->curve_secret, AB_KEY_Z85_LEN) != 0 ||
        zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, "agentbus", 8) != 0 ||
        (type == ZMQ_XPUB && zmq_setsockopt(s, ZMQ_XPUB_MANUAL, &one, sizeof(one)) != 0))
        return ab_error_set(err, AB_INTERNAL, "keys", "cannot make %s a CURVE server: %s", ep,
                            zmq_strerror(zmq_errno()));
    return AB_OK;
}

static void *bind_endpoint(ab_broker_t *h, int type, const char *ep, char *out)
{
    ab__shared_t *b = &h->b;
    void *s = zmq_socket(b->zctx, type);
    if (s == NULL) {
        fail_msg(h, AB_INTERNAL, "cannot create a socket: %s", zmq_strerror(zmq_errno()));
        return NULL;
    }
    int zero = 0, one = 1;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    if (type == ZMQ_ROUTER) {
        /* Twice the largest frame a client may send (docs/PROTOCOL.md 11): a
         * publish up to that is read and answered too_large; a larger frame
         * makes ZeroMQ close the connection, which it cannot answer. */
        const ab_limits_t *l = &b->cfg->limits;
        uint32_t biggest =
            l->max_publish_bytes > l->max_header_bytes ? l->max_publish_bytes : l->max_header_bytes;
        int64_t maxmsg = 2 * (int64_t)biggest + 65536;
        zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof(one));
        zmq_setsockopt(s, ZMQ_SNDTIMEO, &zero, sizeof(zero));
        zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    }
    ab_error_t e = AB_ERROR_INIT;
    if (ab__secure_socket(b, s, type, ep, &e) != AB_OK) {
        fail(h, "cannot set up an endpoint", &e);
        zmq_close(s);
        return NULL;
    }
    size_t len = AB_BROKER_ENDPOINT_MAX;
    if (zmq_bind(s, ep) != 0 || zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, out, &len) != 0) {
        fail_msg(h, AB_IO, "cannot bind %s: %s", ep, zmq_strerror(zmq_errno()));
        zmq_close(s);
        return NULL;
    }
    return s;
}

/* Block SIGINT/SIGTERM in the threads created until restore_mask(). */
static void block_signals(sigset_t *old)
{
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, old);
}

static void restore_mask(const sigset_t *old)
{
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* Create the inproc sockets and start the worker threads (signals blocked in them). */
static int start_threads(ab__shared_t *b, threads_t *t, ab_seq_t **seq)
{
    uint32_t n = b->cfg->readers;
    t->readers = calloc(n, sizeof(*t->readers));
    t->rargs = calloc(n, sizeof(*t->rargs));
    t->rsocks = calloc(n, sizeof(*t->rsocks));
    if (t->readers == NULL || t->rargs == NULL || t->rsocks == NULL)
        return -1;
    t->wargs = (ab_writer_args_t){.b = b, .seq = *seq};
    if ((t->wsock = ab__pair_socket(b->zctx, "inproc://ab-writer", true)) == NULL ||
        (t->wargs.sock = ab__pair_socket(b->zctx, "inproc://ab-writer", false)) == NULL)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        char ep[64];
        snprintf(ep, sizeof(ep), "inproc://ab-reader-%u", i);
        t->rargs[i] = (ab_reader_args_t){.b = b, .db = b->rdbs[i], .index = i};
        if ((t->rsocks[i] = ab__pair_socket(b->zctx, ep, true)) == NULL ||
            (t->rargs[i].sock = ab__pair_socket(b->zctx, ep, false)) == NULL)
            return -1;
    }
    sigset_t old;
    block_signals(&old);
    int rc = 0;
    if (pthread_create(&t->writer, NULL, ab__writer_main, &t->wargs) == 0) {
        t->writer_started = true;
        *seq = NULL; /* the writer owns it now */
    } else {
        rc = -1;
    }
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        if (pthread_create(&t->readers[i], NULL, ab__reader_main, &t->rargs[i]) != 0)
            rc = -1;
        else
            t->nstarted++;
    }
    restore_mask(&old);
    return rc;
}

/* Send a stop job to a worker that the command loop did not stop. */
static void send_stop(void *sock)
{
    ab_job_t *stop = calloc(1, sizeof(*stop));
    if (stop == NULL)
        return;
    stop->kind = AB_JOB_STOP;
    zmq_msg_init(&stop->identity);
    if (ab__job_send(sock, stop) != 0)
        ab__job_free(stop);
}

/* Stop (unless the command loop did) and join the workers, close the inproc sockets. */
static void stop_threads(ab__shared_t *b, threads_t *t, bool stopped)
{
    if (t->writer_started) {
        if (!stopped)
            send_stop(t->wsock);
        pthread_join(t->writer, NULL);
    }
    for (uint32_t i = 0; i < t->nstarted; i++) {
        if (!stopped)
            send_stop(t->rsocks[i]);
        pthread_join(t->readers[i], NULL);
    }
    int zero = 0;
    if (!t->writer_started && t->wargs.sock != NULL)
        zmq_close(t->wargs.sock);
    for (uint32_t i = t->nstarted; t->rargs != NULL && i < b->cfg->readers; i++)
        if (t->rargs[i].sock != NULL)
            zmq_close(t->rargs[i].sock);
    for (uint32_t i = 0; t->rsocks != NULL && i < b->cfg->readers; i++) {
        if (t->rsocks[i] != NULL) {
            zmq_setsockopt(t->rsocks[i], ZMQ_LINGER, &zero, sizeof(zero));
            zmq_close(t->rsocks[i]);
        }
    }
    if (t->wsock != NULL) {
        zmq_setsockopt(t->wsock, ZMQ_LINGER, &zero, sizeof(zero));
        zmq_close(t->wsock);
    }
    free(t->readers);
    free(t->rargs);
    free(t->rsocks);
    *t = (threads_t){0};
}

static void *cmd_main(void *arg)
{
    ab_broker_t *h = arg;
    h->rc = ab__cmd_loop(&h->b, h->router, h->t.wsock, h->t.rsocks, h->pipe[0]);
    return NULL;
}

/* Start the command loop on its own thread (signals blocked in it). */
static int start_cmd(ab_broker_t *h)
{
    sigset_t old;
    block_signals(&old);
    int rc = pthread_create(&h->cmd, NULL, cmd_main, h);
    restore_mask(&old);
    if (rc != 0)
        return -1;
    h->cmd_started = true;
    return 0;
}

/* Undo whatever start-up did, in reverse order, and free the handle. @return the exit status. */
static int teardown(ab_broker_t *h)
{
    int rc = h->cmd_started ? ab_broker_wait(h) : 1;
    ab__metrics_stop(&h->metrics); /* it reads the shared figures: before they go */
    stop_threads(&h->b, &h->t, h->cmd_started);
    if (h->router != NULL) {
        int linger = FINAL_LINGER_MS;
        zmq_setsockopt(h->router, ZMQ_LINGER, &linger, sizeof(linger));
        zmq_close(h->router);
    }
    if (h->b.xpub != NULL)
        zmq_close(h->b.xpub);
    ab__monitor_close(&h->b.cmd_mon); /* the threads that drained them have stopped */
    ab__monitor_close(&h->b.ev_mon);
    ab__zap_stop(&h->zap); /* its socket closes before the context ends */
    if (h->signals_on)
        teardown_signals();
    for (int i = 0; i < 2; i++)
        if (h->pipe[i] >= 0)
            close(h->pipe[i]);
    if (h->b.zctx != NULL)
        zmq_ctx_term(h->b.zctx);
    ab__seq_destroy(&h->seq);
    ab__snapcache_destroy(&h->b.snaps); /* every thread that used it has joined */
    close_store(&h->b, &h->lib);
    ab__access_box_free(&h->b.access);
    ab__statbox_destroy(&h->b.stats);
    pthread_mutex_destroy(&h->b.wlock);
    if (rc == 0)
        ab__log(AB_LOG_INFO, "stopped");
    free(h);
    return rc;
}

/* With --keys: the access table, then the ZAP handler (broker/zap.c invariant 1). */
static int start_keys(ab_broker_t *h)
{
    ab__shared_t *b = &h->b;
    ab_error_t e = AB_ERROR_INIT;
    ab__access_t *a = NULL;
    if (ab__access_load(&a, h->cfg.keys_dir, h->cfg.access_file, &e) != AB_OK) {
        fail(h, "cannot read the access file", &e);
        return -1;
    }
    ab__log(ab__access_count(a) ? AB_LOG_INFO : AB_LOG_WARN, "access: %zu key(s) from %s%s",
            ab__access_count(a), ab__access_source(a),
            ab__access_count(a) ? "" : ": nobody can connect");
    ab__access_box_set(&b->access, a);
    if (ab__zap_start(&h->zap, b->zctx, h->cfg.keys_dir, &h->server, &b->access, &e) != AB_OK) {
        fail(h, "cannot start CURVE authentication", &e);
        return -1;
    }
    memcpy(b->curve_secret, h->server.secret_key, sizeof b->curve_secret);
    return 0;
}

/* Everything after the store: sequencer, context, self-pipe, sockets, threads. */
static int start_running(ab_broker_t *h)
{
    ab__shared_t *b = &h->b;
    ab_error_t e = AB_ERROR_INIT;
    ab_seq_opts_t so = {.max_runs = AB_BROKER_CACHED_RUNS};
    if (ab__seq_new(&h->seq, b->plugin, b->wdb, &so, &e) != AB_OK) {
        fail(h, "cannot start the sequencer", &e);
        return -1;
    }
    if ((b->zctx = zmq_ctx_new()) == NULL || open_pipe(h->pipe) != 0) {
        fail_msg(h, AB_INTERNAL, "cannot create a ZeroMQ context or a pipe");
        return -1;
    }
    if (h->daemon) {
        setup_signals(h->pipe[1]);
        h->signals_on = true;
    }
    if (h->cfg.keys_dir[0] != '\0' && start_keys(h) != 0)
        return -1;
    h->router = bind_endpoint(h, ZMQ_ROUTER, h->cfg.cmd_endpoint, b->cmd_ep);
    if (h->router == NULL)
        return -1;
    b->xpub = bind_endpoint(h, ZMQ_XPUB, h->cfg.events_endpoint, b->events_ep);
    if (b->xpub == NULL)
        return -1;
    b->started_us = ab__mono_us();
    (void)ab__monitor_open(&b->cmd_mon, b->zctx, h->router, "command", &b->connections);
    (void)ab__monitor_open(&b->ev_mon, b->zctx, b->xpub, "event", &b->subscribers);
    if (h->cfg.metrics[0] != '\0' &&
        ab__metrics_start(&h->metrics, b, h->cfg.metrics, &e) != AB_OK) {
        fail(h, "cannot start the metrics listener", &e);
        return -1;
    }
    if (start_threads(b, &h->t, &h->seq) != 0 || start_cmd(h) != 0) {
        fail_msg(h, AB_INTERNAL, "cannot start the broker's threads");
        return -1;
    }
    return 0;
}

static ab_status_t broker_start(const ab_broker_config_t *cfg, bool daemon, ab_broker_t **out,
                                ab_error_t *err)
{
    ab_error_t spare = AB_ERROR_INIT;
    ab_broker_t *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return ab_error_set(err ? err : &spare, AB_NOMEM, "", "out of memory");
    h->cfg = *cfg;
    h->b.cfg = &h->cfg;
    h->pipe[0] = h->pipe[1] = -1;
    h->daemon = daemon;
    ab__access_box_init(&h->b.access);
    ab__statbox_init(&h->b.stats);
    pthread_mutex_init(&h->b.wlock, NULL);
    h->err = err ? err : &spare;
    ab_log_level_t caller_level = ab__log_set_level(cfg->log_level);
    bool caller_json = ab__log_set_json(cfg->log_json);
    if (cfg->readers < 1 || cfg->readers > AB_BROKER_MAX_READERS) {
        fail_msg(h, AB_INVALID_CONFIG, "readers must be 1..%d", AB_BROKER_MAX_READERS);
        goto undo;
    }
    if (ab__broker_check_exposure(cfg, true, h->err) != AB_OK) { /* before anything binds */
        if (daemon)
            fprintf(stderr, "agentbus broker: %s\n", h->err->message);
        goto undo;
    }
    if (make_instance(h->b.instance) != 0) {
        fail_msg(h, AB_IO, "cannot read /dev/urandom");
        goto undo;
    }
    if ((h->b.snaps = ab__snapcache_new()) == NULL) {
        fail_msg(h, AB_NOMEM, "out of memory");
        goto undo;
    }
    if (open_store(h) != 0 || start_running(h) != 0)
        goto undo;
    h->err = NULL;
    *out = h;
    if (!daemon) { /* the daemon's main thread logs at its level until it exits */
        ab__log_set_level(caller_level);
        ab__log_set_json(caller_json);
    }
    return AB_OK;
undo:;
    ab_status_t code = h->err->code != AB_OK ? h->err->code : AB_INTERNAL;
    teardown(h);
    ab__log_set_level(caller_level);
    ab__log_set_json(caller_json);
    return code;
}

ab_status_t ab_broker_new(const ab_broker_config_t *cfg, ab_broker_t **out, ab_error_t *err)
{
    return broker_start(cfg, false, out, err);
}

const char *ab_broker_cmd_endpoint(const ab_broker_t *h)
{
    return h->b.cmd_ep;
}

const char *ab_broker_events_endpoint(const ab_broker_t *h)
{
    return h->b.events_ep;
}

const char *ab_broker_instance(const ab_broker_t *h)
{
    return h->b.instance;
}

void *ab_broker_zmq_context(const ab_broker_t *h)
{
    return h->b.zctx;
}

int ab_broker_wait(ab_broker_t *h)
{
    if (h->cmd_started && !h->cmd_joined) {
        pthread_join(h->cmd, NULL);
        h->cmd_joined = true;
    }
    return h->rc;
}

int ab_broker_destroy(ab_broker_t **hp)
{
    if (hp == NULL || *hp == NULL)
        return 0;
    ab_broker_t *h = *hp;
    *hp = NULL;
    if (h->cmd_started && !h->cmd_joined)
        ab_broker_stop(h);
    ab_log_level_t caller_level = ab__log_set_level(h->cfg.log_level);
    bool caller_json = ab__log_set_json(h->cfg.log_json);
    int rc = teardown(h);
    ab__log_set_level(caller_level);
    ab__log_set_json(caller_json);
    return rc;
}

void ab_broker_stop(ab_broker_t *h)
{
    char c = 's';
    if (h != NULL && h->pipe[1] >= 0) {
        ssize_t n = write(h->pipe[1], &c, 1); /* a full pipe already holds a stop request */
        (void)n;
    }
}

void ab_broker_reload(ab_broker_t *h)
{
    char c = 'h';
    if (h != NULL && h->pipe[1] >= 0) {
        ssize_t n = write(h->pipe[1], &c, 1);
        (void)n;
    }
}

static void print_ready(const ab_broker_t *h)
{
    const ab__shared_t *b = &h->b;
    printf("agentbus broker ready cmd=%s events=%s data=%s instance=%s\n", b->cmd_ep, b->events_ep,
           b->cfg->data_dir, b->instance);
    fflush(stdout);
    ab__log(AB_LOG_INFO, "ready: cmd=%s events=%s data=%s instance=%s plugin=%s readers=%u",
            b->cmd_ep, b->events_ep, b->cfg->data_dir, b->instance, b->plugin->name,
            b->cfg->readers);
    char status[2 * AB_BROKER_ENDPOINT_MAX + 32];
    snprintf(status, sizeof status, "ready: cmd=%s events=%s", b->cmd_ep, b->events_ep);
    ab__notify_ready(status);
}

int ab_broker_run(const ab_broker_config_t *cfg)
{
    ab_broker_t *h = NULL;
    ab_error_t e = AB_ERROR_INIT;
    if (broker_start(cfg, true, &h, &e) != AB_OK)
        return 1;
    print_ready(h);
    ab_broker_wait(h); /* until SIGINT/SIGTERM */
    return ab_broker_destroy(&h);
}

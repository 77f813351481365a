/*
 * broker.c - start-up and shutdown of the broker daemon: load the plugin,
 * open the store handles (the writer's takes the data-directory lock), bind
 * the endpoints, start the writer and replay reader threads, print the ready
 * line, run the command loop on this thread, and on SIGINT/SIGTERM stop in
 * order.
 *
 * Invariants:
 *  1. Nothing is bound and no ready line is printed unless the plugin loaded
 *     and every store handle opened; a start-up failure exits 1 with the
 *     plugin's or store's message (a locked data directory, a damaged or
 *     newer database) and changes nothing.
 *  2. Signals only write a byte to a self-pipe that the command loop polls;
 *     worker threads block SIGINT/SIGTERM.
 *  3. Shutdown order: the command loop returns only after the writer and the
 *     readers reported "stopped" (every queued job answered); threads are
 *     joined, the ROUTER gets a short bounded linger for the final replies,
 *     then the store handles close (releasing the lock).
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FINAL_LINGER_MS 1000

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    char c = (char)sig;
    ssize_t n = write(sig_pipe[1], &c, 1);
    (void)n;
    errno = saved;
}

static int setup_signals(void)
{
    if (pipe(sig_pipe) != 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        fcntl(sig_pipe[i], F_SETFL, fcntl(sig_pipe[i], F_GETFL) | O_NONBLOCK);
        fcntl(sig_pipe[i], F_SETFD, FD_CLOEXEC);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static void teardown_signals(void)
{
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    for (int i = 0; i < 2; i++) {
        if (sig_pipe[i] >= 0)
            close(sig_pipe[i]);
        sig_pipe[i] = -1;
    }
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

static void fail(const char *what, const ab_error_t *e)
{
    fprintf(stderr, "agentbus broker: %s: %s\n", what,
            e->message[0] ? e->message : ab_status_str(e->code));
}

/* Load the plugin and open every handle. @return 0 or -1 (reported). */
static int open_store(ab_broker_t *b, ab_plugin_lib_t *lib)
{
    const ab_broker_config_t *cfg = b->cfg;
    ab_error_t e = AB_ERROR_INIT;
    if (ab_plugin_load(cfg->plugin, lib, &e) != AB_OK) {
        fail("cannot load the persistence plugin", &e);
        return -1;
    }
    b->plugin = lib->plugin;
    ab_plugin_open_opts_t o = {.data_dir = cfg->data_dir, .durability = cfg->durability};
    if (b->plugin->open(&o, &b->wdb, &e) != AB_OK) {
        fail("cannot open the store", &e);
        return -1;
    }
    b->rdbs = calloc(cfg->readers, sizeof(*b->rdbs));
    if (b->rdbs == NULL)
        return -1;
    o.readonly = true;
    for (uint32_t i = 0; i < cfg->readers; i++) {
        if (b->plugin->open(&o, &b->rdbs[i], &e) != AB_OK) {
            fail("cannot open a replay reader's store handle", &e);
            return -1;
        }
    }
    uint64_t pos = 0;
    if (b->plugin->head_pos(b->wdb, &pos, &e) != AB_OK) {
        fail("cannot read the store's head position", &e);
        return -1;
    }
    atomic_store(&b->head_pos, pos);
    return 0;
}

static void close_store(ab_broker_t *b, ab_plugin_lib_t *lib)
{
    if (b->plugin != NULL) {
        for (uint32_t i = 0; b->rdbs != NULL && i < b->cfg->readers; i++)
            b->plugin->close(b->rdbs[i]);
        b->plugin->close(b->wdb);
    }
    free(b->rdbs);
    b->rdbs = NULL;
    b->wdb = NULL;
    if (lib->plugin != NULL)
        ab_plugin_unload(lib);
}

/* Bind @p ep and copy the real endpoint into @p out. @return the socket or NULL. */
static void *bind_endpoint(ab_broker_t *b, int type, const char *ep, char *out)
{
    void *s = zmq_socket(b->zctx, type);
    if (s == NULL)
        return NULL;
    int zero = 0, one = 1;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    if (type == ZMQ_ROUTER) {
        int64_t maxmsg =
            2 * (int64_t)(b->cfg->limits.max_event_bytes > b->cfg->limits.max_header_bytes
                              ? b->cfg->limits.max_event_bytes
                              : b->cfg->limits.max_header_bytes) +
            65536;
        zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof(one));
        zmq_setsockopt(s, ZMQ_SNDTIMEO, &zero, sizeof(zero));
        zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    } else {
        int hwm = (int)b->cfg->hwm;
        zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    }
    size_t len = AB_BROKER_ENDPOINT_MAX;
    if (zmq_bind(s, ep) != 0 || zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, out, &len) != 0) {
        fprintf(stderr, "agentbus broker: cannot bind %s: %s\n", ep, zmq_strerror(zmq_errno()));
        zmq_close(s);
        return NULL;
    }
    return s;
}

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

/* Create the inproc sockets and start the worker threads (signals blocked in them). */
static int start_threads(ab_broker_t *b, threads_t *t, ab_seq_t **seq)
{
    uint32_t n = b->cfg->readers;
    t->readers = calloc(n, sizeof(*t->readers));
    t->rargs = calloc(n, sizeof(*t->rargs));
    t->rsocks = calloc(n, sizeof(*t->rsocks));
    if (t->readers == NULL || t->rargs == NULL || t->rsocks == NULL)
        return -1;
    t->wargs = (ab_writer_args_t){.b = b, .seq = *seq};
    if ((t->wsock = ab_pair_socket(b->zctx, "inproc://ab-writer", true)) == NULL ||
        (t->wargs.sock = ab_pair_socket(b->zctx, "inproc://ab-writer", false)) == NULL)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        char ep[64];
        snprintf(ep, sizeof(ep), "inproc://ab-reader-%u", i);
        t->rargs[i] = (ab_reader_args_t){.b = b, .db = b->rdbs[i], .index = i};
        if ((t->rsocks[i] = ab_pair_socket(b->zctx, ep, true)) == NULL ||
            (t->rargs[i].sock = ab_pair_socket(b->zctx, ep, false)) == NULL)
            return -1;
    }
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int rc = 0;
    if (pthread_create(&t->writer, NULL, ab_writer_main, &t->wargs) == 0) {
        t->writer_started = true;
        *seq = NULL; /* the writer owns it now */
    } else {
        rc = -1;
    }
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        if (pthread_create(&t->readers[i], NULL, ab_reader_main, &t->rargs[i]) != 0)
            rc = -1;
        else
            t->nstarted++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* Stop (unless the command loop did) and join the workers, close the inproc sockets. */
static void stop_threads(ab_broker_t *b, threads_t *t, bool stopped)
{
    if (t->writer_started && stopped) {
        pthread_join(t->writer, NULL);
    } else if (t->writer_started) {
        ab_job_t *stop = calloc(1, sizeof(*stop));
        if (stop != NULL) {
            stop->kind = AB_JOB_STOP;
            zmq_msg_init(&stop->identity);
        }
        if (stop != NULL && ab_job_send(t->wsock, stop) != 0)
            ab_job_free(stop);
        pthread_join(t->writer, NULL);
    }
    for (uint32_t i = 0; i < t->nstarted; i++) {
        if (stopped) {
            pthread_join(t->readers[i], NULL);
            continue;
        }
        ab_job_t *stop = calloc(1, sizeof(*stop));
        if (stop != NULL) {
            stop->kind = AB_JOB_STOP;
            zmq_msg_init(&stop->identity);
        }
        if (stop != NULL && ab_job_send(t->rsocks[i], stop) != 0)
            ab_job_free(stop);
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
}

static void print_ready(const ab_broker_t *b)
{
    printf("agentbus broker ready cmd=%s events=%s data=%s instance=%s\n", b->cmd_ep, b->events_ep,
           b->cfg->data_dir, b->instance);
    fflush(stdout);
    ab_log(AB_LOG_INFO, "ready: cmd=%s events=%s data=%s instance=%s plugin=%s readers=%u",
           b->cmd_ep, b->events_ep, b->cfg->data_dir, b->instance, b->plugin->name,
           b->cfg->readers);
}

int ab_broker_run(const ab_broker_config_t *cfg)
{
    ab_broker_t b = {.cfg = cfg};
    ab_plugin_lib_t lib = {0};
    threads_t t = {0};
    ab_seq_t *seq = NULL;
    void *router = NULL;
    int rc = 1;
    bool stopped = false; /* the command loop sent the stop jobs */
    ab_log_set_level(cfg->log_level);
    if (make_instance(b.instance) != 0) {
        fprintf(stderr, "agentbus broker: cannot read /dev/urandom\n");
        return 1;
    }
    if (open_store(&b, &lib) != 0)
        goto close_store;
    ab_error_t e = AB_ERROR_INIT;
    ab_seq_opts_t so = {.max_runs = AB_BROKER_CACHED_RUNS};
    if (ab_seq_new(&seq, b.plugin, b.wdb, &so, &e) != AB_OK) {
        fail("cannot start the sequencer", &e);
        goto close_store;
    }
    if ((b.zctx = zmq_ctx_new()) == NULL || setup_signals() != 0)
        goto close_ctx;
    router = bind_endpoint(&b, ZMQ_ROUTER, cfg->cmd_endpoint, b.cmd_ep);
    b.xpub = router ? bind_endpoint(&b, ZMQ_XPUB, cfg->events_endpoint, b.events_ep) : NULL;
    if (b.xpub == NULL || start_threads(&b, &t, &seq) != 0)
        goto stop;
    print_ready(&b);
    rc = ab_cmd_loop(&b, router, t.wsock, t.rsocks, sig_pipe[0]);
    stopped = true;
stop:
    stop_threads(&b, &t, stopped);
    if (router != NULL) {
        int linger = FINAL_LINGER_MS;
        zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof(linger));
        zmq_close(router);
    }
    if (b.xpub != NULL)
        zmq_close(b.xpub);
close_ctx:
    teardown_signals();
    if (b.zctx != NULL)
        zmq_ctx_term(b.zctx);
close_store:
    ab_seq_destroy(&seq);
    close_store(&b, &lib);
    if (rc == 0)
        ab_log(AB_LOG_INFO, "stopped");
    return rc;
}

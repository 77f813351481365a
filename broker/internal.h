/*
 * internal.h - what the broker's threads share (broker/ only).
 *
 * The command thread (cmd.c, the process's main thread after start-up) owns
 * the ROUTER. It hands work to the writer thread (writer.c, with fanout.c
 * and snapsched.c: writer_int.h) and to the replay reader threads
 * (replay.c) as pointers to heap jobs sent over inproc PAIR sockets;
 * ownership of a job moves with the message. Workers answer with
 * multipart messages [identity][header][frames...] on the same PAIR, which
 * the command thread forwards to the ROUTER as they are. A one-frame message
 * from a worker means "stopped" (after a stop job).
 */
#ifndef AB_BROKER_INTERNAL_H
#define AB_BROKER_INTERNAL_H

#include "ab_common.h"
#include "access.h"
#include "agentbus/broker.h"
#include "agentbus/codec.h"
#include "agentbus/plugin.h"
#include "log.h"
#include "monitor.h"
#include "sequencer.h"
#include "stats.h"

#include <pthread.h>
#include <stdatomic.h>
#include <zmq.h>

typedef struct ab__snapcache ab__snapcache_t; /* snap_internal.h */

/* The parts of a group's time from receipt to answers (writer.c note_slow, metrics.c). */
enum { AB__SLOW_WAIT, AB__SLOW_COMMIT, AB__SLOW_ANSWER };
#define AB__SLOW_GROUP_US 5000 /* a group answered this long after receipt is slow */

/** State shared by every thread; set up before the threads start. */
typedef struct ab__shared {
    const ab_broker_config_t *cfg;
    void *zctx;
    const ab_plugin_t *plugin;
    ab_plugin_db_t *wdb;                    /**< writer handle (writer thread) */
    ab_plugin_db_t **rdbs;                  /**< one read-only handle per reader */
    char instance[17];                      /**< 16 hex chars */
    char cmd_ep[AB_BROKER_ENDPOINT_MAX];    /**< as bound */
    char events_ep[AB_BROKER_ENDPOINT_MAX]; /**< as bound */
    void *xpub;                             /**< bound by start-up, used by the writer only */
    _Atomic uint64_t head_pos;              /**< latest commit position */
    _Atomic int64_t in_flight;       /**< events + writer jobs queued, bounded by cfg->queue */
    _Atomic int64_t in_flight_bytes; /**< publish frame bytes queued, bounded by cfg->queue_mib */
    _Atomic int64_t replay_unread;   /**< replay chunk bytes sent, not credited (all readers) */
    _Atomic int64_t replay_slots;    /**< replays open or unread (all readers), <= cfg->replays */
    _Atomic bool snap_failed;        /**< the snapshot worker could not start: nothing is stored */
    _Atomic bool dispatch_failed;    /**< dispatch could not load the store's requests */
    _Atomic int64_t connections;     /**< command connections open (cmd_mon) */
    _Atomic int64_t subscribers;     /**< event endpoint connections open (ev_mon) */
    /** The writer's tprev table (fanout.c): thread known, not known (a bound answered),
     *  entries given to another thread, positions that did not follow; for --metrics */
    _Atomic uint64_t tprev_hits, tprev_misses, tprev_evictions, tprev_gaps;
    /** Committed events handed to the snapshot worker in memory (snapfeed.h): the bytes
     *  held now (bounded by AB__SNAPFEED_BYTES), and the events it folded from them */
    _Atomic size_t snapfeed_bytes;
    _Atomic uint64_t snapfeed_folded;
    ab__monitor_t cmd_mon;   /**< the ROUTER's monitor, drained by the command thread */
    ab__monitor_t ev_mon;    /**< the XPUB's monitor, drained by the writer thread */
    int64_t started_us;      /**< ab__mono_us() at start-up */
    ab__statbox_t stats;     /**< the writer's and the store's figures (stats.h) */
    ab__snapcache_t *snaps;  /**< this broker's snapshot builders (readers, snapshot worker) */
    ab__access_box_t access; /**< who may do what (--keys; access.h); cur NULL = no keys */
    char curve_secret[AB_KEY_Z85_SIZE]; /**< the broker's CURVE secret key; "" = no CURVE */
    /** The lone path (writer.c invariant 7): held by the writer thread except while it waits
     *  for work; the command thread that takes it commits a lone publish itself. */
    pthread_mutex_t wlock;
    struct ab__writer *writer;     /**< under wlock: the running writer, NULL before and after */
    _Atomic uint64_t wjobs_taken;  /**< jobs the writer has received from the command thread */
    _Atomic uint64_t lone_commits; /**< publishes the command thread took to commit (--metrics) */
    /** groups answered AB__SLOW_GROUP_US or more after their first publish's receipt, by the
     * part that took longest: AB__SLOW_WAIT, AB__SLOW_COMMIT, AB__SLOW_ANSWER (--metrics) */
    _Atomic uint64_t slow_groups[3];
} ab__shared_t;

typedef enum ab_job_kind {
    AB_JOB_PUBLISH = 1,
    AB_JOB_CLAIM,
    AB_JOB_HEADS,
    AB_JOB_REPLAY,
    AB_JOB_CREDIT,
    AB_JOB_CANCEL,
    AB_JOB_SNAPSHOT,
    AB_JOB_STOP,
    AB_JOB_GONE,        /**< command -> reader: the connection `identity` is gone */
    AB_JOB_UNDELIVERED, /**< command -> reader: a replay_chunk (cid, bytes) was dropped */
    AB_JOB_DISPATCH,    /**< command -> writer: a dispatch request (raw: its header) */
    AB_JOB_WORKER_UP,   /**< command -> writer: worker wid registered (raw: its serve) */
    AB_JOB_WORKER_DOWN, /**< command -> writer: worker wid is gone (raw: NULL) */
    AB_JOB_ACCESS,      /**< command -> writer: the access table was reloaded (narrowed) */
    AB_JOB_THREADS,     /**< command -> reader: a `threads` request (threads_cmd.c) */
    AB_JOB_NUDGE,       /**< command -> writer: a lone commit left it work (writer.c inv. 7) */
} ab_job_kind_t;

/** One request handed from the command thread to a worker. */
typedef struct ab_job {
    ab_job_kind_t kind;
    zmq_msg_t identity; /**< the client's ROUTER identity (moved in) */
    uint32_t v;
    uint64_t cid;
    int64_t weight; /**< what it adds to ab__shared_t.in_flight */
    int64_t bytes;  /**< PUBLISH: adds to in_flight_bytes; UNDELIVERED: the records frame's size */
    /* PUBLISH */
    uint32_t count;
    zmq_msg_t *frames; /**< the envelope frames (count, or 1 when packed), kept until answered */
    uint32_t nframes;  /**< frames received into frames[] */
    ab_doc_t *doc;     /**< one arena (ab_doc_keep) for every decoded envelope */
    ab_event_t *evs;
    ab_agui_info_t *infos;
    ab_seq_item_t *items;
    /* CLAIM, HEADS (RUN refs), REPLAY: copied strings */
    ab_str_t thread;    /**< CLAIM, HEADS by thread, SNAPSHOT: copy (ptr NULL = absent) */
    ab_str_t run;       /**< CLAIM */
    ab_run_ref_t *refs; /**< HEADS runs (strings point into strings) */
    size_t nrefs;
    ab_replay_t replay; /**< REPLAY; strings point into this job's copies */
    ab_cursor_t *cursors;
    char *strings;   /**< backing store of the copied strings */
    uint32_t chunks; /**< CREDIT */
    /* DISPATCH, WORKER_UP: the request's header, re-encoded; WORKER_*: the worker */
    uint8_t *raw;
    size_t raw_len;
    char wid[24];
    char key[AB_KEY_Z85_SIZE]; /**< WORKER_UP: the worker's authenticated key; "" = none */
    int64_t recv_us;           /**< PUBLISH: ab__mono_us() when the command thread took it */
    bool narrowed;             /**< ACCESS: some key may read less than before */
    /* THREADS: the cursor is `thread`; the prefixes to list, in byte order (threads_cmd.c) */
    ab_str_t *pfx;  /**< strings point into `strings` */
    uint32_t npfx;  /**< 0: the key may read none of the request's prefix */
    uint32_t limit; /**< 1..AB_THREADS_LIMIT_MAX */
} ab_job_t;

/** A stats_reply from the shared figures; any thread (stats_reply.c). */
void ab__stats_fill(ab__shared_t *b, ab_stats_reply_t *r);

/** Tell a service manager the broker is ready ($NOTIFY_SOCKET; notify.c). */
void ab__notify_ready(const char *status);

/** Free a job and everything it owns (NULL-safe). */
void ab__job_free(ab_job_t *job);

/** Send a job pointer on @p sock (never blocks: inproc PAIRs have no HWM; fails when the peer is
 * gone). @return 0 or -1 (job not sent, still owned). */
int ab__job_send(void *sock, ab_job_t *job);

/** Receive a job pointer sent with ab__job_send(). @return the job or NULL. */
ab_job_t *ab__job_recv(void *sock, int flags);

/** Receive and drop the remaining parts of a message (@p more: one follows). @return how many. */
size_t ab__discard_rest(void *sock, bool more);

/**
 * Before reading the bytes of a reply header that a reader sent with
 * ab__reply_send(): the hand-over made visible to ThreadSanitizer, which
 * cannot see libzmq's (job.c invariant 4; nothing in other builds).
 */
void ab__reply_acquire(zmq_msg_t *hdr);

/**
 * Send [identity copy][header][extra frames] to the command thread on
 * @p sock. Extra frames are moved (closed on return either way).
 * @return 0 or -1.
 */
int ab__reply_send(void *sock, zmq_msg_t *identity, const ab_buf_t *header, zmq_msg_t *extra,
                   size_t nextra);

/** Encode @p m and send it as a reply (see ab__reply_send). @return 0 or -1. */
int ab__reply_msg(void *sock, zmq_msg_t *identity, const ab_msg_t *m);

/** Send an `error` reply carrying @p e with cid @p cid and version @p v. */
int ab__reply_error(void *sock, zmq_msg_t *identity, uint32_t v, uint64_t cid, const ab_error_t *e);

/** Microseconds since the Unix epoch (ab__mono_ms() is in ab_common.h). */
int64_t ab__now_us(void);

/** Create an inproc PAIR socket with unlimited HWM, bound or connected to @p ep. */
void *ab__pair_socket(void *zctx, const char *ep, bool bind);

/**
 * Set up endpoint socket @p s (ZMQ_ROUTER or ZMQ_XPUB) before its bind: the
 * XPUB's high-water mark and, with keys, CURVE server and ZAP domain (and
 * XPUB manual mode: the writer decides each subscription, fanout.c).
 * @return AB_OK or AB_INTERNAL.
 */
AB_NODISCARD ab_status_t ab__secure_socket(ab__shared_t *b, void *s, int type, const char *ep,
                                           ab_error_t *err);

/** A growable list of run heads copied out of the plugin. */
typedef struct ab_headlist {
    ab_run_head_t *v;
    size_t n, cap;
} ab_headlist_t;

/** Append the head of one run (status UNKNOWN when never seen). */
AB_NODISCARD ab_status_t ab__heads_add_run(const ab_plugin_t *p, ab_plugin_db_t *db,
                                           ab_headlist_t *hl, ab_str_t thread, ab_str_t run,
                                           ab_error_t *err);

/** Append the heads of every run of @p thread. */
AB_NODISCARD ab_status_t ab__heads_add_thread(const ab_plugin_t *p, ab_plugin_db_t *db,
                                              ab_headlist_t *hl, ab_str_t thread, ab_error_t *err);

/** The most heads a replay_end carries (docs/PROTOCOL.md 7.6): with ids of 256 bytes about
 *  10 MB encoded, within a reply's 16 MiB. */
#define AB__REPLAY_END_HEADS 16384

/** Append the heads of the newest @p max runs of @p thread, in the order they were recorded. */
AB_NODISCARD ab_status_t ab__heads_add_newest(const ab_plugin_t *p, ab_plugin_db_t *db,
                                              ab_headlist_t *hl, ab_str_t thread, size_t max,
                                              ab_error_t *err);

/** Wire views of the heads (strings point into @p hl); NULL when empty or out of memory. */
ab_head_t *ab__heads_view(const ab_headlist_t *hl);

/** Free the list's memory. */
void ab__headlist_free(ab_headlist_t *hl);

/* ---- the lone path (writer.c invariant 7) -------------------------------------------- */

/** A publish of at most this many events and bytes of envelopes may be committed by the
 *  command thread itself: a commit it waits for stays short. */
#define AB__LONE_EVENTS_MAX 16
#define AB__LONE_BYTES_MAX  (64 << 10)
/** A commit (lone or the writer's) that fails or takes longer than this turns the lone path
 *  off for AB__LONE_BACKOFF_US: the command thread waits for at most one slow commit a
 *  second, and for none while the store is in trouble. */
#define AB__LONE_SLOW_US    5000
#define AB__LONE_BACKOFF_US 1000000

typedef struct ab__writer ab__writer_t;

/**
 * Take the writer's state for one lone commit: the writer is running, waiting for work (it
 * holds wlock at every other time) and its store is this broker's alone (no followed shared
 * store). @return the writer, to be given back with ab__writer_return(); NULL: hand the job
 * to the writer instead. Command thread only.
 */
ab__writer_t *ab__writer_borrow(ab__shared_t *b);

/** How a lone commit ended. */
typedef enum ab__lone_end {
    AB__LONE_DONE,      /**< the job was answered and freed */
    AB__LONE_NUDGE,     /**< the same, and the writer has work left by it (snapshot documents
                             to collect, dispatch moves): send it an AB_JOB_NUDGE */
    AB__LONE_GIVEN_BACK /**< the store refused the commit (a lock, a failure): the job is not
                             answered; hand it to the writer, whose commit waits and answers */
} ab__lone_end_t;

/**
 * Commit publish @p job as a group of its own on the calling thread, send its live message
 * on the event socket and its answer on @p router, as the writer would have; the commit
 * does not wait for a lock. Send the nudge or the given-back job after ab__writer_return().
 */
ab__lone_end_t ab__writer_commit_lone(ab__writer_t *w, ab_job_t *job, void *router);

/** Give the writer's state back (unlocks wlock). */
void ab__writer_return(ab__writer_t *w);

/* Thread bodies. */
typedef struct ab_writer_args {
    ab__shared_t *b;
    ab_seq_t *seq; /**< created at start-up, owned by the writer from then on */
    void *sock;    /**< its end of the inproc PAIR, connected at start-up; the writer closes it */
} ab_writer_args_t;

typedef struct ab_reader_args {
    ab__shared_t *b;
    ab_plugin_db_t *db;
    void *sock; /**< its end of the inproc PAIR, connected at start-up; the reader closes it */
    uint32_t index;
} ab_reader_args_t;

/**
 * Answer a `snapshot` job on a replay reader (broker/snapshot_cmd.c): the
 * thread's cached builder, or its latest stored snapshot (if any), with the
 * thread's later stored events folded in, in commit order
 * (ab__snapshot_current(), broker/snap_internal.h); send `snapshot_reply`
 * (or a typed error) on @p sock. Runs to completion on the reader's thread;
 * frees nothing (the caller frees @p job).
 */
void ab__reader_snapshot(ab__shared_t *b, ab_plugin_db_t *db, void *sock, ab_job_t *job);

/**
 * Fill a THREADS job from request @p r for principal @p who (NULL: no keys,
 * every thread): the cursor, the prefixes @p who may list within the
 * request's (broker/threads_cmd.c), the limit. @return false when out of memory.
 */
bool ab__threads_job(ab_job_t *job, const ab__principal_t *who, const ab_threads_req_t *r);

/**
 * Answer a THREADS job on a replay reader: threads_reply from the plugin's
 * threads_list on @p db, or a typed error, sent on @p sock. Frees nothing.
 */
void ab__reader_threads(ab__shared_t *b, ab_plugin_db_t *db, void *sock, ab_job_t *job);

void *ab__writer_main(void *arg);
void *ab__reader_main(void *arg);

/**
 * Run the command loop on the main thread until a signal arrives on
 * @p sigfd and every worker has stopped. However it returns, it has sent
 * every worker its stop job (join them next). @return 0 or 1.
 */
int ab__cmd_loop(ab__shared_t *b, void *router, void *wsock, void **rsocks, int sigfd);

#endif /* AB_BROKER_INTERNAL_H */

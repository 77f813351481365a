/*
 * agentbus/broker.h - the embeddable broker (libagentbus-broker): its
 * settings, and a broker running inside the calling process.
 *
 * ab_broker_config_t holds every setting of `agentbus broker`; the config
 * functions fill it from the defaults, an optional `--config FILE` (key =
 * value lines) and the command-line flags (flags override the file).
 * ab_broker_new() starts a broker on threads of its own and returns at once;
 * ab_broker_wait() blocks until it stops; ab_broker_destroy() stops it the
 * way SIGINT does and frees it. ab_broker_run() is `agentbus broker` itself:
 * new, signal handlers, ready line, wait, destroy.
 *
 *   ab_broker_config_t cfg;
 *   ab_broker_config_defaults(&cfg);
 *   snprintf(cfg.cmd_endpoint, sizeof cfg.cmd_endpoint, "tcp://127.0.0.1:0");
 *   ab_broker_t *b = NULL;
 *   if (ab_broker_new(&cfg, &b, &err) == AB_OK) {
 *       connect clients to ab_broker_cmd_endpoint(b) ...
 *       ab_broker_destroy(&b);
 *   }
 *
 *   cc app.c $(pkg-config --cflags --libs agentbus-broker)
 *
 * Thread-safety: the config functions are reentrant. Any number of brokers
 * may run in one process, on different data directories and endpoints: each
 * has its own ZeroMQ context, store handles, snapshot cache and log level
 * (its threads' own). ab_broker_run() installs SIGINT/SIGTERM handlers, so
 * call it once per process; ab_broker_new() installs none and prints
 * nothing. docs/CLIENT.md "Embedding a broker" is the guide, and
 * docs/OPERATIONS.md documents every setting.
 */
#ifndef AGENTBUS_BROKER_H
#define AGENTBUS_BROKER_H

#include "agentbus/model.h"
#include "agentbus/status.h"
#include "agentbus/value.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Log levels, most severe first (`--log-level error|warn|info|debug`). */
typedef enum ab_log_level {
    AB_LOG_ERROR = 0,
    AB_LOG_WARN,
    AB_LOG_INFO,
    AB_LOG_DEBUG,
} ab_log_level_t;

#define AB_BROKER_PATH_MAX     4096
#define AB_BROKER_ENDPOINT_MAX 256

/* Defaults (documented in docs/OPERATIONS.md and `agentbus broker --help`). */
#define AB_BROKER_DEFAULT_DATA         "./agentbus-data"
#define AB_BROKER_DEFAULT_CMD          "tcp://127.0.0.1:7710"
#define AB_BROKER_DEFAULT_EVENTS       "tcp://127.0.0.1:7711"
#define AB_BROKER_DEFAULT_PLUGIN       "sqlite"
#define AB_BROKER_DEFAULT_READERS      2
#define AB_BROKER_DEFAULT_QUEUE        16384
#define AB_BROKER_DEFAULT_GROUP_MAX    4096
#define AB_BROKER_DEFAULT_HWM          1000 /* live messages of up to 256 events, ~32 KiB */
#define AB_BROKER_DEFAULT_SNAP_EVERY   1000 /* and the byte rule: see OPERATIONS.md */
#define AB_BROKER_DEFAULT_SNAP_MEMORY  64   /* MiB: largest snapshot builder of one thread */
#define AB_BROKER_DEFAULT_QUEUE_MIB    256  /* bytes of queued publishes */
#define AB_BROKER_DEFAULT_REPLAYS      256  /* replays open (or unread) at once, all connections */
#define AB_BROKER_DEFAULT_REPLAYS_CONN 8    /* ... on one connection */
#define AB_BROKER_DEFAULT_REPLAY_MIB   128  /* unread replay bytes, all connections */
#define AB_BROKER_DEFAULT_REPLAY_IDLE  60   /* s a connection may leave replay chunks unread */
#define AB_BROKER_CACHED_RUNS                                                                      \
    131072 /* the sequencer's cached run states (and at most 64 MiB of them) */
#define AB_BROKER_MAX_READERS 64

/** Every setting of the broker. */
typedef struct ab_broker_config {
    char data_dir[AB_BROKER_PATH_MAX];
    char cmd_endpoint[AB_BROKER_ENDPOINT_MAX];
    char events_endpoint[AB_BROKER_ENDPOINT_MAX];
    ab_durability_t durability;
    char plugin[AB_BROKER_PATH_MAX];
    uint32_t readers;          /**< replay reader threads, 1..AB_BROKER_MAX_READERS */
    uint32_t queue;            /**< events (and jobs) in flight in the ingest queue */
    uint32_t queue_mib;        /**< MiB of publish frames in flight in the ingest queue */
    uint32_t replays;          /**< replay sessions open or unread at once, all connections */
    uint32_t replays_per_conn; /**< ... of one connection */
    uint32_t replay_mib;       /**< MiB of replay chunks sent and not yet credited, in total */
    uint32_t replay_idle_s;    /**< s a connection may hold unread chunks without any credit */
    uint32_t group_max;        /**< most events per group commit */
    uint32_t hwm;              /**< XPUB send high-water mark (messages) */
    uint32_t snapshot_every;   /**< snapshot a thread every N committed events; 0 = at run ends */
    uint32_t snapshot_memory;  /**< MiB one thread's snapshot builder may take; beyond: too_large */
    ab_limits_t limits; /**< max_batch, max_event_bytes, max_publish_bytes, max_replay_bytes */
    ab_log_level_t log_level;
    bool help; /**< --help was given: print usage, do nothing else */
    /** Directory of the broker's keys (`--keys DIR`), "" = none. Without keys the broker
     *  binds loopback only (127.x.x.x, localhost, [::1]; ipc:// and inproc:// are local). */
    char keys_dir[AB_BROKER_PATH_MAX];
    /** `--insecure`: bind a non-loopback endpoint without keys (logged as a warning). */
    bool insecure;
    /** `--access FILE`: who may do what (docs/OPERATIONS.md "The access file"); "" =
     *  KEYS_DIR/access when it exists, else every key in keys_dir has every role. Needs
     *  keys_dir. Read at start and again at SIGHUP. */
    char access_file[AB_BROKER_PATH_MAX];
    /** `--log-format json`: each log line is one JSON object {"time","level","msg"}. */
    bool log_json;
    /** `--metrics HOST:PORT`: Prometheus text at http://HOST:PORT/metrics; "" = off. */
    char metrics[AB_BROKER_ENDPOINT_MAX];

    /** `--pg CONNINFO`: the PostgreSQL plugin's libpq connection string (docs/SCALING.md),
     *  handed to the plugin as ab_plugin_open_opts_t.conninfo; "" = none. */
    char pg_conninfo[AB_BROKER_PATH_MAX];
    /** `--tprev false`: live stamps carry no `tprev` (docs/PROTOCOL.md section 5), for
     *  subscribers built before the field, which refuse a stamp that has it. */
    bool no_tprev;
} ab_broker_config_t;

/** Fill @p cfg with the defaults. */
AB_API void ab_broker_config_defaults(ab_broker_config_t *cfg);

/**
 * Parse the arguments of `agentbus broker` (argv[0] is the subcommand name):
 * defaults, then `--config FILE` if given, then every other flag, so a flag
 * overrides the file. Flags take `--name VALUE` or `--name=VALUE`; a VALUE
 * that starts with "--" is given only in the second form (`--data --x` is
 * the flag --data with no value), and an unknown flag is refused before any
 * value is taken.
 * @param cfg  out; written only on AB_OK.
 * The result is checked as ab_broker_new() checks it (the keys directory,
 * loopback-only binds without keys).
 * @return AB_OK, or AB_INVALID_CONFIG with err->field = the flag or key and
 *         a message naming it (and "FILE:LINE" for config file errors), or
 *         AB_INVALID_ARGUMENT (field "cmd" or "events") for an endpoint that
 *         is not loopback without keys or --insecure.
 */
AB_API AB_NODISCARD ab_status_t ab_broker_config_parse(ab_broker_config_t *cfg, int argc,
                                                       char **argv, ab_error_t *err);

/**
 * Apply one `key = value` setting (key without the leading dashes).
 * @return AB_OK or AB_INVALID_CONFIG naming the key.
 */
AB_API AB_NODISCARD ab_status_t ab_broker_config_set(ab_broker_config_t *cfg, const char *key,
                                                     const char *value, ab_error_t *err);

/**
 * Read a config file: one `key = value` per line, `#` starts a comment,
 * blank lines are ignored. The file is read whole, at most 1 MiB, and parsed
 * by ab_broker_config_load_text().
 * @param cfg  in/out: settings the file does not name keep their value;
 *             written only on AB_OK.
 * @return AB_OK, AB_INVALID_CONFIG ("FILE:LINE: ..." / "cannot open FILE" /
 *         "cannot read" / larger than 1 MiB) or AB_NOMEM.
 */
AB_API AB_NODISCARD ab_status_t ab_broker_config_load(ab_broker_config_t *cfg, const char *path,
                                                      ab_error_t *err);

/**
 * Parse config text @p text (@p len bytes, no NUL terminator needed) as
 * ab_broker_config_load() parses a file: lines end at '\n' (a '\r' before it
 * is trimmed like other spaces), each at most 8190 bytes, no NUL byte.
 * @param name  what errors call the text ("FILE:LINE: ..."), e.g. its path.
 * @param cfg   in/out, written only on AB_OK.
 * @return AB_OK, or AB_INVALID_CONFIG naming the line, with err->field the
 *         key ("" for a line that is not `key = value`).
 */
AB_API AB_NODISCARD ab_status_t ab_broker_config_load_text(ab_broker_config_t *cfg,
                                                           const char *name, const char *text,
                                                           size_t len, ab_error_t *err);

/** Print the `agentbus broker --help` text to @p out. */
AB_API void ab_broker_usage(FILE *out);

/**
 * Run the broker until SIGINT/SIGTERM. Prints the ready line to stdout.
 * Built on ab_broker_new() + ab_broker_wait() + ab_broker_destroy(), with
 * SIGINT/SIGTERM handlers that write to the broker's self-pipe.
 * @return the process exit status: 0 after a clean shutdown, 1 when it could
 *         not start (plugin, store, lock, bind) or failed.
 */
AB_API int ab_broker_run(const ab_broker_config_t *cfg);

/* ---- a broker inside the calling process ----------------------------------- */

/** A broker running inside the calling process (opaque). */
typedef struct ab_broker ab_broker_t;

/**
 * Start a broker in this process: load the plugin, open the store (taking
 * the data-directory lock), bind both endpoints, start the writer, the
 * replay readers and the command loop, each on its own thread. Installs no
 * signal handler and prints nothing (no ready line). Its threads log to
 * stderr at cfg->log_level, and so does the calling thread while this
 * function runs (log levels are per thread, so brokers with different levels
 * can share a process). @p cfg is copied.
 * @param out  written only on AB_OK; release with ab_broker_destroy().
 * Without cfg->keys_dir, an endpoint that is not loopback (tcp:// on any
 * host but 127.x.x.x, localhost or [::1]) is refused unless cfg->insecure
 * is set, and then logged as a warning.
 * @return AB_OK; AB_INVALID_CONFIG (bad readers count, keys_dir not a
 *         directory); AB_INVALID_ARGUMENT (a non-loopback endpoint without
 *         keys or insecure: err->field "cmd" or "events"); with keys_dir, a
 *         missing or bad key file (field "keys") or a ZAP handler that cannot
 *         start (the broker never runs open instead); the plugin's or the
 *         store's code (err->message says what failed: "cannot open the
 *         store: ..."); AB_IO (a bind failed or /dev/urandom unreadable);
 *         AB_INTERNAL (a thread or a socket could not be created); AB_NOMEM.
 *         On failure nothing is left running and the lock is released.
 * Thread-safety: any number of brokers may run, on different data dirs and
 * endpoints (each has its own ZeroMQ context).
 */
AB_API AB_NODISCARD ab_status_t ab_broker_new(const ab_broker_config_t *cfg, ab_broker_t **out,
                                              ab_error_t *err);

/** The command endpoint as bound ("tcp://127.0.0.1:41234" for port 0). Borrowed. */
AB_API const char *ab_broker_cmd_endpoint(const ab_broker_t *h);

/** The event endpoint as bound. Borrowed. */
AB_API const char *ab_broker_events_endpoint(const ab_broker_t *h);

/** The broker's instance id (16 hex chars), as sent in `welcome` and `pong`. Borrowed. */
AB_API const char *ab_broker_instance(const ab_broker_t *h);

/**
 * The broker's ZeroMQ context, for in-process clients of `inproc://`
 * endpoints. Every socket made on it must be closed before ab_broker_destroy()
 * (which terminates the context).
 */
AB_API void *ab_broker_zmq_context(const ab_broker_t *h);

/**
 * Ask the broker to stop the way SIGINT does: one byte on its self-pipe;
 * queued requests are still answered, new ones get `unavailable`. Returns at
 * once. Async-signal-safe (one write(2)), so an embedding program may call
 * it from its own signal handler, or from any thread while another waits.
 */
AB_API void ab_broker_stop(ab_broker_t *h);

/**
 * Ask the broker to read its access file again, as SIGHUP does under
 * ab_broker_run(): one byte on its self-pipe; returns at once (async-signal-
 * safe). The new table applies to every request after it; a file that does
 * not parse is logged and the old table kept. A broker without keys ignores
 * it.
 */
AB_API void ab_broker_reload(ab_broker_t *h);

/**
 * Block until the command loop has ended: after ab_broker_stop(), a
 * SIGINT/SIGTERM under ab_broker_run(), or a fatal poll error. Call from one
 * thread at a time, never after ab_broker_destroy().
 * @return 0 after a clean stop, else 1.
 */
AB_API int ab_broker_wait(ab_broker_t *h);

/**
 * Stop the broker (ab_broker_stop()), join every thread, close the sockets
 * and the store (releasing the data-directory lock) and free the handle.
 * No other thread may be in ab_broker_wait() on it. NULL-safe; sets *h to
 * NULL. @return 0 after a clean shutdown, else 1.
 */
AB_API int ab_broker_destroy(ab_broker_t **h);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_BROKER_H */

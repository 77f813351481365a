/*
 * broker.h - the agentbus broker daemon's internal API (broker/ only, plus
 * cli/broker_cmd.c and tests/broker).
 *
 * ab_broker_config_t holds every setting of `agentbus broker`; config.c fills
 * it from the defaults, an optional `--config FILE` (key = value lines) and
 * the command-line flags (flags override the file). ab_broker_run() starts
 * the daemon and returns when it has stopped; ab_broker_start() and
 * ab_broker_stop() run one in-process (tests, tests/fuzz/fuzz_broker.c).
 *
 * Thread-safety: configuration functions are reentrant; ab_broker_run() is
 * called once per process (it installs SIGINT/SIGTERM handlers);
 * ab_broker_start()/ab_broker_stop() run a broker in-process without them.
 */
#ifndef AB_BROKER_BROKER_H
#define AB_BROKER_BROKER_H

#include "agentbus/plugin.h"
#include "agentbus/status.h"
#include "agentbus/value.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/** Log levels, most severe first. */
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
#define AB_BROKER_CACHED_RUNS          4096 /* the sequencer's cached run states */
#define AB_BROKER_MAX_READERS          64

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
} ab_broker_config_t;

/** Fill @p cfg with the defaults. */
void ab_broker_config_defaults(ab_broker_config_t *cfg);

/**
 * Parse the arguments of `agentbus broker` (argv[0] is the subcommand name):
 * defaults, then `--config FILE` if given, then every other flag, so a flag
 * overrides the file. Flags take `--name VALUE` or `--name=VALUE`.
 * @param cfg  out; written only on AB_OK.
 * @return AB_OK, or AB_INVALID_CONFIG with err->field = the flag or key and
 *         a message naming it (and "FILE:LINE" for config file errors).
 */
AB_NODISCARD ab_status_t ab_broker_config_parse(ab_broker_config_t *cfg, int argc, char **argv,
                                                ab_error_t *err);

/**
 * Apply one `key = value` setting (key without the leading dashes).
 * @return AB_OK or AB_INVALID_CONFIG naming the key.
 */
AB_NODISCARD ab_status_t ab_broker_config_set(ab_broker_config_t *cfg, const char *key,
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
AB_NODISCARD ab_status_t ab_broker_config_load(ab_broker_config_t *cfg, const char *path,
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
AB_NODISCARD ab_status_t ab_broker_config_load_text(ab_broker_config_t *cfg, const char *name,
                                                    const char *text, size_t len, ab_error_t *err);

/** Print the `agentbus broker --help` text to @p out. */
void ab_broker_usage(FILE *out);

/** Parse a level name ("error", "warn", "info", "debug"). */
AB_NODISCARD ab_status_t ab__log_level_from(const char *s, ab_log_level_t *out);

/** Set the process-wide log level (default info). */
void ab__log_set_level(ab_log_level_t level);

/** Name the calling thread (seen in `top -H`, `ps -L`, perf); Linux only, else a no-op. */
void ab__thread_name(const char *name);

/** Write "<ISO time> <level> message" to stderr (one write per line). */
void ab__log(ab_log_level_t level, const char *fmt, ...) AB_PRINTF(2, 3);

/**
 * Run the broker until SIGINT/SIGTERM. Prints the ready line to stdout.
 * Built on ab_broker_start() + ab_broker_wait() + ab_broker_stop(), with
 * SIGINT/SIGTERM handlers that write to the broker's self-pipe.
 * @return the process exit status: 0 after a clean shutdown, 1 when it could
 *         not start (plugin, store, lock, bind) or failed.
 */
int ab_broker_run(const ab_broker_config_t *cfg);

/* ---- in-process broker (tests, fuzzing) ---------------------------------- */

/** A broker running inside the calling process (opaque). */
typedef struct ab_broker_handle ab_broker_handle_t;

/**
 * Start a broker in this process: load the plugin, open the store (taking
 * the data-directory lock), bind both endpoints, start the writer, the
 * replay readers and the command loop, each on its own thread. Installs no
 * signal handler and prints nothing (no ready line); sets the process-wide
 * log level to cfg->log_level. @p cfg is copied.
 * @param out  written only on AB_OK; release with ab_broker_stop().
 * @return AB_OK; AB_INVALID_CONFIG (bad readers count); the plugin's or the
 *         store's code (err->message says what failed: "cannot open the
 *         store: ..."); AB_IO (a bind failed or /dev/urandom unreadable);
 *         AB_INTERNAL (a thread or a socket could not be created); AB_NOMEM.
 *         On failure nothing is left running and the lock is released.
 * Thread-safety: any number of brokers may run, on different data dirs and
 * endpoints (each has its own ZeroMQ context).
 */
AB_NODISCARD ab_status_t ab_broker_start(const ab_broker_config_t *cfg, ab_broker_handle_t **out,
                                         ab_error_t *err);

/** The command endpoint as bound ("tcp://127.0.0.1:41234" for port 0). Borrowed. */
const char *ab_broker_cmd_endpoint(const ab_broker_handle_t *h);

/** The event endpoint as bound. Borrowed. */
const char *ab_broker_events_endpoint(const ab_broker_handle_t *h);

/** The broker's instance id (16 hex chars), as sent in `welcome` and `pong`. Borrowed. */
const char *ab_broker_instance(const ab_broker_handle_t *h);

/**
 * The broker's ZeroMQ context, for in-process clients of `inproc://`
 * endpoints. Every socket made on it must be closed before ab_broker_stop()
 * (which terminates the context).
 */
void *ab_broker_zmq_context(const ab_broker_handle_t *h);

/**
 * Block until the command loop has ended (after a SIGINT/SIGTERM under
 * ab_broker_run(), after ab_broker_stop(), or a fatal poll error).
 * Call from one thread at a time. @return 0 after a clean stop, else 1.
 */
int ab_broker_wait(ab_broker_handle_t *h);

/**
 * Stop the broker the way SIGINT does (a byte on its self-pipe: queued
 * requests are answered, new ones get `unavailable`), join every thread,
 * close the sockets and the store (releasing the lock) and free the handle.
 * NULL-safe; sets *h to NULL. @return 0 after a clean shutdown, else 1.
 */
int ab_broker_stop(ab_broker_handle_t **h);

#endif /* AB_BROKER_BROKER_H */

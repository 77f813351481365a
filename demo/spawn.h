/*
 * spawn.h - run `agentbus broker` as a child process of the agentbus
 * program itself (demo/spawn.c), for the subcommands that bring their own
 * bus: `agentbus bench` and `agentbus demo`.
 *
 * spawn_broker() forks/execs /proc/self/exe broker --data DIR --cmd C
 * --events E [extra...] with its stdout on a pipe and waits, bounded, for the
 * one ready line
 *   agentbus broker ready cmd=<ep> events=<ep> data=<dir> instance=<id>
 * The child runs in its own process group (a terminal's Ctrl-C reaches the
 * parent only, which stops the child in order) and, on Linux, gets SIGTERM
 * when the parent dies, so it never outlives it.
 */
#ifndef AB_CLI_SPAWN_H
#define AB_CLI_SPAWN_H

#include <stdbool.h>
#include <sys/types.h>

#define SPAWN_READY_MS 10000
#define SPAWN_STOP_MS  10000
#define SPAWN_MAX_ARGS 8

typedef struct spawn_broker {
    pid_t pid;     /* 0 when not running */
    int fd;        /* read end of the child's stdout, -1 when closed */
    bool own_dir;  /* dir was made by spawn_broker() (a temporary directory) */
    char dir[256]; /* data directory */
    char cmd[128]; /* command endpoint, from the ready line */
    char events[128];
} spawn_broker_t;

/** Options of spawn_broker(); zero-initialise. */
typedef struct spawn_opts {
    const char *dir;                   /* data directory; NULL = a new mkdtemp() under /tmp */
    const char *tmp_prefix;            /* name prefix of that directory; NULL = "agentbus" */
    const char *cmd_ep;                /* NULL = tcp://127.0.0.1:* (an ephemeral port) */
    const char *events_ep;             /* NULL = tcp://127.0.0.1:* */
    const char *extra[SPAWN_MAX_ARGS]; /* more broker arguments, NULL-terminated */
    const char *log_path; /* the broker's stderr (its log) appended here; NULL = inherited */
    bool quiet;           /* send the broker's stderr (its log) to /dev/null */
} spawn_opts_t;

/**
 * Start the broker and wait at most SPAWN_READY_MS for its ready line.
 * @return 0 when ready (b->cmd/events/dir filled); -1 otherwise (the child
 *         is stopped and a temporary directory removed).
 */
int spawn_broker(spawn_broker_t *b, const spawn_opts_t *o);

/**
 * Stop the broker: SIGTERM, reap within SPAWN_STOP_MS (else SIGKILL), close
 * the pipe; remove the directory when it was temporary and @p remove_dir.
 * @return the child's exit status (0 clean), or -1 when it had to be killed
 *         or was not running.
 */
int spawn_stop(spawn_broker_t *b, bool remove_dir);

/**
 * fork() a child of the demo that gets SIGTERM when the demo dies (Linux
 * parent-death signal) and exits at once if the demo died before it could ask.
 * Buffered output is flushed first. @return as fork(): 0 in the child (only
 * async-signal-safe calls until its exec), the pid in the demo, -1.
 */
pid_t spawn_fork_child(void);

/** Remove @p path and everything under it (no symlinks followed). */
void spawn_rm_tree(const char *path);

#endif

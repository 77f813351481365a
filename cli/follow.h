/*
 * follow.h - printing bus events the way `agentbus tail` does, and following
 * one run to its end: shared by tail, run, cancel --wait, approve and deny
 * (cli/follow.c).
 */
#ifndef AB_CLI_FOLLOW_H
#define AB_CLI_FOLLOW_H

#include "agentbus/client.h"
#include "agentbus/subscriber.h"
#include "render.h"

#include <signal.h>
#include <stdbool.h>

/** Exit statuses of a followed run (docs/CLIENT.md "agentbus run"). */
#define AB_EXIT_INTERRUPTED 3
#define AB_EXIT_CANCELLED   4
#define AB_EXIT_SIGNAL      130

/** Set by SIGINT/SIGTERM once cli_catch_signals() installed the handler. */
extern volatile sig_atomic_t cli_stop;

/** Clear cli_stop and make SIGINT and SIGTERM set it. */
void cli_catch_signals(void);

/** How events are printed: tail's human view, or its JSON Lines (--json). */
typedef struct cli_printer {
    const char *cmd; /* for messages: "agentbus <cmd>: ..." */
    bool json;
    tail_view_t view;
    ab_buf_t line;
} cli_printer_t;

/** Start printing to stdout; colour only when @p color and stdout is a terminal. */
void cli_printer_init(cli_printer_t *p, const char *cmd, bool json, bool color);

/** Print one event (never fails: an event that cannot be printed is reported inline). */
void cli_printer_event(cli_printer_t *p, const ab_sub_event_t *e);

/** Print one notice (PROTOCOL.md 6.4): a line for people, or {"op":"notice",...} with --json. */
void cli_printer_notice(cli_printer_t *p, const ab_notice_t *n);

/** Close an open streamed line and free the printer's buffer. */
void cli_printer_free(cli_printer_t *p);

/**
 * Where notes for people go: stdout, except with --json, where stdout holds
 * only JSON Lines and notes go to stderr.
 */
FILE *cli_notes(const cli_printer_t *p);

/**
 * One ab_sub_poll() of up to @p ms for a console that keeps going while the
 * broker is away: a retryable failure is reported once (*@p away remembers
 * it) and polling goes on.
 * @return 0 to go on; 1 on a failure that will not pass (printed).
 */
int cli_sub_step(ab_sub_t *s, int ms, const char *cmd, bool *away);

/** How a followed run ended. */
typedef enum cli_end {
    CLI_END_SUCCESS = 0, /* RUN_FINISHED, outcome success (or none) */
    CLI_END_INTERRUPT,   /* RUN_FINISHED, outcome interrupt */
    CLI_END_CANCELLED,   /* RUN_FINISHED, outcome cancelled */
    CLI_END_ERROR,       /* RUN_ERROR */
    CLI_END_DEQUEUED,    /* its request was cancelled before the run started */
    CLI_END_STOPPED,     /* Ctrl-C: following stopped, the run goes on */
    CLI_END_FAILED,      /* the subscription failed for good */
} cli_end_t;

/** What to follow. */
typedef struct cli_follow {
    const char *broker; /* command endpoint */
    const char *thread, *run;
    uint64_t request; /* the run's request (0: not dispatched; no request checks) */
    ab_conn_t *conn;  /* asks about the request while the run has not started; may be NULL */
    bool quiet;       /* print only the terminal event */
    int timeout_ms;   /* per request */
} cli_follow_t;

/**
 * Follow run (thread, run) from its first event (a replay from seq 1, then
 * live: nothing is missed however late the subscription comes) to its
 * terminal event, printing each event with @p pr, then a note saying how it
 * ended (an interrupt lists its ids and the commands that answer them).
 * @return how it ended; the exit status is cli_end_exit().
 */
cli_end_t cli_follow_run(const cli_follow_t *f, cli_printer_t *pr);

/** Exit status of an end: 0, 3, 4, 1 (error, failed), 4 (dequeued), 130 (stopped). */
int cli_end_exit(cli_end_t e);

/** Print @p s to @p out as one shell word (quoted when it needs to be). */
void cli_print_shell_word(FILE *out, const char *s, size_t len);

/**
 * A fresh id "PREFIX-" + 16 hex digits from getrandom() (the clock and pid
 * when that fails) into @p buf (at least 64 bytes).
 */
void cli_fresh_id(char *buf, size_t size, const char *prefix);

#endif

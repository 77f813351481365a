/*
 * dispatch.h - what `agentbus run`, `cancel`, `approve` and `deny` share
 * (cli/dispatch_cmd.c): reading a RunAgentInput, connecting to a broker that
 * dispatches, printing the broker's acceptance and its refusals, and
 * following the accepted run.
 */
#ifndef AB_CLI_DISPATCH_H
#define AB_CLI_DISPATCH_H

#include "agentbus/client.h"
#include "follow.h"

/** Largest --input (JSON text) read, bytes. */
#define CLI_INPUT_MAX_BYTES (4u << 20)

/** Options every dispatch command has. */
typedef struct cli_dopts {
    const char *broker; /* resolved endpoint */
    bool json, no_follow, no_color;
    long timeout_ms;
} cli_dopts_t;

/**
 * Parse JSON text @p text into a value tree in @p doc (the msgpack form kept
 * in @p mp: both must outlive the value). A parse error names line, column
 * and JSON pointer.
 * @return AB_OK; AB_INVALID_ARGUMENT (err set); AB_TOO_LARGE; AB_NOMEM.
 */
ab_status_t cli_json_value(const char *text, size_t len, ab_buf_t *mp, ab_doc_t *doc,
                           const ab_val_t **out, ab_error_t *err);

/**
 * Read a RunAgentInput from @p path ("-" = standard input, at most
 * CLI_INPUT_MAX_BYTES) into a value in @p doc, which must be a JSON object.
 * @return 0, or AB_EXIT_USAGE after printing why (unreadable, too large, not
 *         JSON, not an object).
 */
int cli_read_input(const char *cmd, const char *path, ab_buf_t *text, ab_buf_t *mp, ab_doc_t *doc,
                   const ab_val_t **out);

/**
 * The options every dispatch command shares, as getopt_long returned them:
 * 'b' --broker, 'j' --json, 'N' --no-follow, 'C' --no-color, 'T' --timeout MS.
 * @return 0, or AB_EXIT_USAGE (printed) for a bad value or any other option.
 */
int cli_dispatch_opt(const char *cmd, int c, cli_dopts_t *d);

/**
 * Connect to o->broker and require capability @p cap (AB_CAP_DISPATCH ...).
 * @return AB_OK, or the error (printed by the caller with cli_refused()).
 */
ab_status_t cli_dispatch_connect(const char *cmd, const cli_dopts_t *o, const char *cap,
                                 ab_conn_t **out, ab_error_t *err);

/** Print a broker refusal (code, message, field, interrupt id). @return AB_EXIT_FAIL. */
int cli_refused(const char *cmd, const ab_error_t *err);

/**
 * Print the broker's acceptance (text, or one JSON object with --json) with
 * the idempotency key @p key that retries it.
 */
void cli_print_accepted(const cli_printer_t *pr, const ab_run_accepted_t *a, const char *key);

/**
 * After an acceptance: follow the run (unless o->no_follow) and return the
 * exit status: 0 success, 3 interrupted, 4 cancelled, 1 error, 130 Ctrl-C;
 * with no_follow 0.
 */
int cli_follow_accepted(const cli_dopts_t *o, ab_conn_t *c, const ab_run_accepted_t *a,
                        cli_printer_t *pr);

#endif

/*
 * lines.h - bounded JSON Lines input shared by the subcommands that read
 * events (validate, publish).
 */
#ifndef AB_CLI_LINES_H
#define AB_CLI_LINES_H

#include "agentbus/buf.h"

#include <stdbool.h>
#include <stdio.h>

/* JSON text of one event may be larger than its msgpack form (escapes). */
#define CLI_LINE_MAX_BYTES (4u << 20)

/**
 * Read one line (without its newline or a trailing CR) into @p buf.
 * @return its length; -1 at end of input; -2 as soon as the line is longer
 *         than CLI_LINE_MAX_BYTES: nothing more of it is read (an input with
 *         no newline ends the read too); cli_skip_line() goes on to the next.
 */
long cli_read_line(FILE *in, ab_buf_t *buf);

/** Drop the rest of the current line (after cli_read_line() answered -2). */
void cli_skip_line(FILE *in);

/** True when @p b holds only spaces and tabs (a line to skip). */
bool cli_blank(const ab_buf_t *b);

#endif

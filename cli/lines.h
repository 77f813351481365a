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
 * @return its length; -1 at end of input; -2 when the line was longer than
 *         CLI_LINE_MAX_BYTES (the rest of it is consumed and dropped, so
 *         memory stays bounded and the next call starts at the next line).
 */
long cli_read_line(FILE *in, ab_buf_t *buf);

/** True when @p b holds only spaces and tabs (a line to skip). */
bool cli_blank(const ab_buf_t *b);

#endif

/*
 * lines.c - bounded JSON Lines reader (see lines.h).
 *
 * Invariants:
 *  1. The buffer never grows past CLI_LINE_MAX_BYTES, whatever the input.
 *  2. An over-long line is reported as soon as it passes the limit: nothing
 *     more of it is read, so an input without newlines (`< /dev/zero`) ends
 *     the read instead of being consumed for ever. A reader that goes on to
 *     the next line skips the rest with cli_skip_line().
 */
#include "lines.h"

long cli_read_line(FILE *in, ab_buf_t *buf)
{
    ab_buf_reset(buf);
    int c;
    bool any = false;
    while ((c = getc(in)) != EOF) {
        any = true;
        if (c == '\n')
            break;
        char ch = (char)c;
        if (buf->len >= CLI_LINE_MAX_BYTES || ab_buf_append(buf, &ch, 1) != AB_OK)
            return -2; /* invariant 2 */
    }
    if (!any)
        return -1;
    if (buf->len && buf->data[buf->len - 1] == '\r')
        buf->len--;
    return (long)buf->len;
}

void cli_skip_line(FILE *in)
{
    int c;
    while ((c = getc(in)) != EOF && c != '\n') {
    }
}

bool cli_blank(const ab_buf_t *b)
{
    for (size_t i = 0; i < b->len; i++)
        if (b->data[i] != ' ' && b->data[i] != '\t')
            return false;
    return true;
}

/*
 * lines.c - bounded JSON Lines reader (see lines.h).
 *
 * Invariant: the buffer never grows past CLI_LINE_MAX_BYTES, whatever the
 * input; an over-long line is reported once and skipped.
 */
#include "lines.h"

long cli_read_line(FILE *in, ab_buf_t *buf)
{
    ab_buf_reset(buf);
    int c;
    bool any = false, over = false;
    while ((c = getc(in)) != EOF) {
        any = true;
        if (c == '\n')
            break;
        char ch = (char)c;
        if (buf->len >= CLI_LINE_MAX_BYTES || ab_buf_append(buf, &ch, 1) != AB_OK)
            over = true;
    }
    if (!any)
        return -1;
    if (over)
        return -2;
    if (buf->len && buf->data[buf->len - 1] == '\r')
        buf->len--;
    return (long)buf->len;
}

bool cli_blank(const ab_buf_t *b)
{
    for (size_t i = 0; i < b->len; i++)
        if (b->data[i] != ' ' && b->data[i] != '\t')
            return false;
    return true;
}

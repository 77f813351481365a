/*
 * ab_json_out.h - write one string to a stdio stream as a JSON string
 * literal, through the protocol library's ab_json_quote() (the one escaper),
 * for the programs that print JSON objects field by field (the CLI's --json
 * output, bench --json, conformance --json). Header-only, internal.
 */
#ifndef AB_JSON_OUT_H
#define AB_JSON_OUT_H

#include "agentbus/buf.h"
#include "agentbus/json.h"

#include <stdio.h>
#include <string.h>

/* @p s (NUL-terminated) quoted onto @p out; `null` when out of memory. */
static inline void ab__json_str_out(FILE *out, const char *s)
{
    ab_buf_t b = AB_BUF_INIT;
    if (ab_json_quote(&b, s, strlen(s)) == AB_OK)
        fwrite(b.data, 1, b.len, out);
    else
        fputs("null", out); /* out of memory */
    ab_buf_free(&b);
}

#endif /* AB_JSON_OUT_H */

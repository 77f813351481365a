/*
 * tail_render.h - rendering of bus events for `agentbus tail` and
 * `agentbus replay` (demo/render.c): the JSON Lines shape shared by
 * both, and the human view of the observer console.
 */
#ifndef AB_DEMO_RENDER_H
#define AB_DEMO_RENDER_H

#include "agentbus/buf.h"
#include "agentbus/codec.h"

#include <stdbool.h>
#include <stdio.h>

/**
 * Append one JSON Lines record (with the trailing newline):
 * {"thread","run","seq","epoch","ts","pos","time_us","event":{...}}.
 * @return AB_OK or AB_NOMEM; on failure out->len is unchanged.
 */
ab_status_t tail_json_line(ab_buf_t *out, const ab_event_t *ev, const ab_stamp_t *st);

/** State of the human view (an open streamed line: text or tool args). */
typedef struct tail_view {
    FILE *out;
    bool color;
    bool open;          /* a streamed line is open */
    char open_key[600]; /* thread NUL run NUL message/tool id of the open line */
    size_t open_len;
    unsigned long errors; /* render failures shown */
} tail_view_t;

/** Start a view on @p out; colour when @p color. */
void tail_view_init(tail_view_t *v, FILE *out, bool color);

/**
 * Render one event. Never fails: an event that cannot be rendered prints
 * "[render error at seq N: ...]" and the console goes on.
 */
void tail_view_event(tail_view_t *v, const ab_event_t *ev, const ab_stamp_t *st);

/** Close an open streamed line (at the end of the output). */
void tail_view_finish(tail_view_t *v);

#endif

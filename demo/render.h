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

/** Streams (messages, tool calls, reasoning) open at once that the view follows. */
#define TAIL_STREAMS_MAX 16
/** Text a stream gathers while another one has the growing line. */
#define TAIL_GATHER_MAX (64u << 10)

/** One open stream: its label, and its text while it is not the growing line. */
typedef struct tail_stream {
    char key[600]; /* thread NUL run NUL message/tool id */
    size_t klen;
    char head[200];  /* "HH:MM:SS.mmm thread/run #seq  " of its first event */
    char label[120]; /* "assistant: ", "tool search(" */
    bool tool;       /* closes with ')' */
    bool done;       /* its END came while it was gathered: printed when the line is free */
    bool shown;      /* it had the line before: taking it again marks a continuation */
    bool cut;        /* text beyond TAIL_GATHER_MAX was dropped */
    ab_buf_t text;   /* gathered text (not yet printed) */
} tail_stream_t;

/**
 * State of the human view. One stream at a time has the growing line (its
 * deltas are printed as they come); the others gather their text and are
 * printed whole, one line each, when the line is free. Memory: at most
 * TAIL_STREAMS_MAX streams of TAIL_GATHER_MAX bytes each.
 */
typedef struct tail_view {
    FILE *out;
    bool color;
    bool open;          /* a streamed line is open */
    char open_key[600]; /* thread NUL run NUL message/tool id of the open line */
    size_t open_len;
    unsigned long errors;   /* render failures shown */
    tail_stream_t *streams; /* open streams, nstreams of TAIL_STREAMS_MAX */
    size_t nstreams;
} tail_view_t;

/** Start a view on @p out; colour when @p color and $NO_COLOR is unset or empty. */
void tail_view_init(tail_view_t *v, FILE *out, bool color);

/**
 * Render one event. Never fails: an event that cannot be rendered prints
 * "[render error at seq N: ...]" and the console goes on.
 */
void tail_view_event(tail_view_t *v, const ab_event_t *ev, const ab_stamp_t *st);

/** At the end of the output: close the open line, print what streams gathered, free. */
void tail_view_finish(tail_view_t *v);

#endif

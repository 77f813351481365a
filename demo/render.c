/*
 * render.c - how `agentbus tail` and the demo's observer show events to people, and the JSON
 * Lines record shared by `tail --json` and `replay`.
 *
 * Human view: one line per event, "HH:MM:SS.mmm thread/run #seq  SUMMARY".
 * Text, reasoning and tool-call arguments are streamed: one stream at a
 * time has the growing line (START opens it, each delta is appended, END
 * closes it); a stream whose deltas come while another has the line gathers
 * its text and is printed whole, one line, once the line is free - so runs
 * streaming at once stay readable. Steps, reasoning, CUSTOM events (the
 * AgentKit projections) are one-liners. Run outcomes are marked (success,
 * interrupt with reasons, cancelled, error).
 *
 * Invariants:
 *  1. Rendering never stops the console: an event that fails the lenient
 *     AG-UI check prints "[render error at seq N: ...]" and returns.
 *  2. Text from events never reaches the terminal raw: control characters
 *     other than newline and tab (ESC above all) are shown as '?'.
 *  3. A streamed line is closed (newline) before anything else is printed,
 *     so lines of different runs never mix.
 *  4. Memory is bounded: at most TAIL_STREAMS_MAX open streams (a new one
 *     past that prints the oldest gathered one as it is) of at most
 *     TAIL_GATHER_MAX gathered bytes each (more is dropped, shown as "...").
 */
#include "render.h"

#include "agentbus/agui.h"
#include "agentbus/json.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define C_DIM    "\033[2m"
#define C_RESET  "\033[0m"
#define C_GREEN  "\033[32m"
#define C_YELLOW "\033[33m"
#define C_RED    "\033[31m"
#define C_CYAN   "\033[36m"
#define C_BOLD   "\033[1m"

static ab_status_t put_str(ab_buf_t *o, const char *s)
{
    return ab_buf_append(o, s, strlen(s));
}

static ab_status_t put_key_str(ab_buf_t *o, const char *key, ab_str_t s)
{
    ab_status_t rc = put_str(o, key);
    return rc == AB_OK ? ab_json_quote(o, s.ptr, s.len) : rc;
}

static ab_status_t put_key_int(ab_buf_t *o, const char *key, long long v)
{
    char num[32];
    snprintf(num, sizeof(num), "%lld", v);
    ab_status_t rc = put_str(o, key);
    return rc == AB_OK ? put_str(o, num) : rc;
}

ab_status_t tail_json_line(ab_buf_t *out, const ab_event_t *ev, const ab_stamp_t *st)
{
    size_t mark = out->len;
    ab_status_t rc = put_key_str(out, "{\"thread\":", ev->thread);
    if (rc == AB_OK)
        rc = put_key_str(out, ",\"run\":", ev->run);
    if (rc == AB_OK)
        rc = put_key_int(out, ",\"seq\":", (long long)ev->seq);
    if (rc == AB_OK)
        rc = put_key_int(out, ",\"epoch\":", (long long)ev->epoch);
    if (rc == AB_OK)
        rc = put_key_int(out, ",\"ts\":", (long long)ev->ts);
    if (rc == AB_OK)
        rc = put_key_int(out, ",\"pos\":", (long long)st->pos);
    if (rc == AB_OK)
        rc = put_key_int(out, ",\"time_us\":", (long long)st->time_us);
    if (rc == AB_OK && st->author == AB_AUTHOR_BROKER) /* abandon_run's RUN_ERROR */
        rc = put_str(out, ",\"by\":\"broker\"");
    if (rc == AB_OK)
        rc = put_str(out, ",\"event\":");
    if (rc == AB_OK)
        rc = ab_val_to_json(ev->body, out);
    if (rc == AB_OK)
        rc = put_str(out, "}\n");
    if (rc != AB_OK)
        out->len = mark;
    return rc;
}

void tail_view_init(tail_view_t *v, FILE *out, bool color)
{
    memset(v, 0, sizeof(*v));
    v->out = out;
    const char *nc = getenv("NO_COLOR"); /* set and not empty: no colour, whatever asked */
    v->color = color && !(nc && *nc);
}

static void paint(tail_view_t *v, const char *code)
{
    if (v->color)
        fputs(code, v->out);
}

/* Print text safely (invariant 2); at most @p max bytes, "..." beyond. */
static void put_text(tail_view_t *v, const char *s, size_t len, size_t max)
{
    size_t n = len < max ? len : max;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        fputc(c < 0x20 && c != '\n' && c != '\t' ? '?' : c == 0x7f ? '?' : c, v->out);
    }
    if (n < len)
        fputs("...", v->out);
}

static void put_val_str(tail_view_t *v, const ab_val_t *x, size_t max)
{
    if (x && x->type == AB_VAL_STR)
        put_text(v, x->u.s, x->len, max);
}

/* Compact JSON of @p x, shortened to @p max bytes. */
static void put_json(tail_view_t *v, const ab_val_t *x, size_t max)
{
    ab_buf_t b = AB_BUF_INIT;
    if (x && ab_val_to_json(x, &b) == AB_OK)
        put_text(v, (const char *)b.data, b.len, max);
    ab_buf_free(&b);
}

/* Text of @p s made safe (invariant 2) into @p out, at most @p max bytes of it. */
static size_t safe_into(char *out, size_t size, const char *s, size_t len, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < len && i < max && n + 1 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        out[n++] = (char)(c < 0x20 || c == 0x7f ? '?' : c);
    }
    out[n] = '\0';
    return n;
}

/* "HH:MM:SS.mmm thread/run #seq" of an event. */
static void format_head(char *buf, size_t size, const ab_event_t *ev, const ab_stamp_t *st)
{
    time_t secs = (time_t)(st->time_us / 1000000);
    struct tm tm;
    localtime_r(&secs, &tm);
    size_t n = (size_t)snprintf(buf, size, "%02d:%02d:%02d.%03d ", tm.tm_hour, tm.tm_min, tm.tm_sec,
                                (int)((st->time_us / 1000) % 1000));
    n += safe_into(buf + n, size - n, ev->thread.ptr, ev->thread.len, 64);
    n += (size_t)snprintf(buf + n, size - n, "/");
    n += safe_into(buf + n, size - n, ev->run.ptr, ev->run.len, 64);
    snprintf(buf + n, size - n, " #%llu", (unsigned long long)ev->seq);
}

static void print_head(tail_view_t *v, const char *head)
{
    paint(v, C_DIM);
    fputs(head, v->out);
    paint(v, C_RESET);
    fputs("  ", v->out);
}

static void drop_stream(tail_view_t *v, tail_stream_t *s)
{
    ab_buf_free(&s->text);
    size_t i = (size_t)(s - v->streams);
    memmove(s, s + 1, (v->nstreams - i - 1) * sizeof(*s));
    v->nstreams--;
}

/* One gathered stream as one whole line (partial: its END has not come). */
static void print_gathered(tail_view_t *v, tail_stream_t *s, bool partial)
{
    print_head(v, s->head);
    paint(v, C_CYAN);
    fputs(s->label, v->out);
    paint(v, C_RESET);
    if (s->shown)
        fputs("...", v->out);
    put_text(v, (const char *)s->text.data, s->text.len, TAIL_GATHER_MAX);
    if (s->cut || partial)
        fputs("...", v->out);
    if (s->tool && !partial)
        fputc(')', v->out);
    fputc('\n', v->out);
    s->text.len = 0;
}

/* Close the growing line; then print the gathered streams that have ended. */
static void close_line(tail_view_t *v)
{
    if (v->open)
        fputc('\n', v->out);
    v->open = false;
    for (size_t i = 0; i < v->nstreams;) {
        if (v->streams[i].done) {
            print_gathered(v, &v->streams[i], false);
            drop_stream(v, &v->streams[i]);
        } else {
            i++;
        }
    }
}

void tail_view_finish(tail_view_t *v)
{
    close_line(v);
    for (size_t i = 0; i < v->nstreams; i++)
        if (v->streams[i].text.len > 0)
            print_gathered(v, &v->streams[i], true);
    while (v->nstreams > 0)
        drop_stream(v, &v->streams[v->nstreams - 1]);
    free(v->streams);
    v->streams = NULL;
    fflush(v->out);
}

static void header(tail_view_t *v, const ab_event_t *ev, const ab_stamp_t *st)
{
    close_line(v); /* invariant 3 */
    char head[200];
    format_head(head, sizeof head, ev, st);
    print_head(v, head);
}

/* Key of a stream: thread NUL run NUL id. */
static size_t make_key(char *k, size_t size, const ab_event_t *ev, ab_str_t id)
{
    size_t need = ev->thread.len + ev->run.len + id.len + 2;
    if (need > size)
        return 0;
    memcpy(k, ev->thread.ptr, ev->thread.len);
    k[ev->thread.len] = '\0';
    memcpy(k + ev->thread.len + 1, ev->run.ptr, ev->run.len);
    k[ev->thread.len + 1 + ev->run.len] = '\0';
    memcpy(k + ev->thread.len + ev->run.len + 2, id.ptr, id.len);
    return need;
}

static tail_stream_t *find_stream(tail_view_t *v, const char *k, size_t n)
{
    for (size_t i = 0; i < v->nstreams; i++)
        if (v->streams[i].klen == n && memcmp(v->streams[i].key, k, n) == 0)
            return &v->streams[i];
    return NULL;
}

/* A new stream; past TAIL_STREAMS_MAX the oldest is printed as it is (invariant 4). */
static tail_stream_t *add_stream(tail_view_t *v, const char *k, size_t n)
{
    if (v->streams == NULL && !(v->streams = calloc(TAIL_STREAMS_MAX, sizeof(*v->streams))))
        return NULL;
    if (v->nstreams == TAIL_STREAMS_MAX) {
        close_line(v);
        if (v->nstreams == TAIL_STREAMS_MAX) {
            print_gathered(v, &v->streams[0], true);
            drop_stream(v, &v->streams[0]);
        }
    }
    tail_stream_t *s = &v->streams[v->nstreams++];
    memset(s, 0, sizeof(*s));
    memcpy(s->key, k, n);
    s->klen = n;
    return s;
}

/* The label a stream's line starts with: from its START, or a continuation's. */
static void set_label(tail_stream_t *s, const ab_agui_info_t *in, bool start)
{
    bool tool = in->type == AB_AGUI_TOOL_CALL_START || in->type == AB_AGUI_TOOL_CALL_ARGS ||
                in->type == AB_AGUI_TOOL_CALL_END;
    bool reasoning = in->type == AB_AGUI_REASONING_MESSAGE_START ||
                     in->type == AB_AGUI_REASONING_MESSAGE_CONTENT ||
                     in->type == AB_AGUI_REASONING_MESSAGE_END;
    char name[96];
    s->tool = tool && start;
    if (tool && start) {
        safe_into(name, sizeof name, in->tool_call_name.ptr, in->tool_call_name.len, 80);
        snprintf(s->label, sizeof s->label, "tool %s(", name);
    } else if (tool) {
        snprintf(s->label, sizeof s->label, "tool call args: ");
    } else if (reasoning) {
        snprintf(s->label, sizeof s->label, "reasoning: ");
    } else if (start && in->role.len) {
        safe_into(name, sizeof name, in->role.ptr, in->role.len, 32);
        snprintf(s->label, sizeof s->label, "%s: ", name);
    } else {
        snprintf(s->label, sizeof s->label, start ? "message: " : "... ");
    }
}

static void gather(tail_stream_t *s, const ab_val_t *delta)
{
    if (!delta || delta->type != AB_VAL_STR)
        return;
    size_t room = TAIL_GATHER_MAX - s->text.len;
    size_t n = delta->len < room ? delta->len : room;
    if (n < delta->len || ab_buf_append(&s->text, delta->u.s, n) != AB_OK)
        s->cut = true;
}

/* The stream takes the free line: its head and label, what it gathered, then live. */
static void take_line(tail_view_t *v, tail_stream_t *s, const ab_event_t *ev, const ab_stamp_t *st)
{
    char head[200];
    format_head(head, sizeof head, ev, st);
    print_head(v, s->text.len ? s->head : head);
    paint(v, C_CYAN);
    fputs(s->label, v->out);
    paint(v, C_RESET);
    if (s->shown)
        fputs("...", v->out); /* the rest of what an earlier line began */
    s->shown = true;
    put_text(v, (const char *)s->text.data, s->text.len, TAIL_GATHER_MAX);
    s->text.len = 0;
    memcpy(v->open_key, s->key, s->klen);
    v->open_len = s->klen;
    v->open = true;
    /* if it loses the line again, it goes on as a continuation */
    snprintf(s->head, sizeof s->head, "%s", head);
}

/* TEXT_MESSAGE_*, REASONING_MESSAGE_* and TOOL_CALL_START/ARGS/END: streamed (invariant 3). */
static void render_stream(tail_view_t *v, const ab_event_t *ev, const ab_stamp_t *st,
                          const ab_agui_info_t *in)
{
    bool toolev = in->type == AB_AGUI_TOOL_CALL_START || in->type == AB_AGUI_TOOL_CALL_ARGS ||
                  in->type == AB_AGUI_TOOL_CALL_END;
    bool start = in->type == AB_AGUI_TEXT_MESSAGE_START || in->type == AB_AGUI_TOOL_CALL_START ||
                 in->type == AB_AGUI_REASONING_MESSAGE_START;
    bool end = in->type == AB_AGUI_TEXT_MESSAGE_END || in->type == AB_AGUI_TOOL_CALL_END ||
               in->type == AB_AGUI_REASONING_MESSAGE_END;
    char k[sizeof(v->open_key)];
    size_t n = make_key(k, sizeof k, ev, toolev ? in->tool_call_id : in->message_id);
    tail_stream_t *s = n ? find_stream(v, k, n) : NULL;
    bool mine = v->open && n == v->open_len && memcmp(k, v->open_key, n) == 0;
    if (s == NULL || start) {
        if (s == NULL && (n == 0 || (s = add_stream(v, k, n)) == NULL))
            return; /* no room for an id this long: the event is not shown */
        set_label(s, in, start);
        format_head(s->head, sizeof s->head, ev, st);
        mine = v->open && n == v->open_len && memcmp(k, v->open_key, n) == 0;
    }
    const ab_val_t *delta = ab_val_get(ev->body, "delta");
    if (!mine && v->open) { /* another stream has the line: gather */
        gather(s, delta);
        s->done = end;
        return;
    }
    if (!mine)
        take_line(v, s, ev, st);
    put_val_str(v, delta, TAIL_GATHER_MAX);
    if (end) {
        if (s->tool)
            fputc(')', v->out);
        drop_stream(v, s);
        close_line(v);
    }
}

static void render_outcome(tail_view_t *v, const ab_agui_info_t *in)
{
    if (in->outcome == AB_OUTCOME_INTERRUPT) {
        paint(v, C_YELLOW);
        fputs("\u23f8 run interrupted", v->out);
        for (uint32_t i = 0; in->interrupts && i < in->interrupts->len; i++) {
            const ab_val_t *it = &in->interrupts->u.items[i];
            fputs(i ? "; " : ": ", v->out);
            put_val_str(v, ab_val_get(it, "reason"), 80);
            if (ab_val_get(it, "message")) {
                fputs(" - ", v->out);
                put_val_str(v, ab_val_get(it, "message"), 200);
            }
        }
    } else if (in->outcome == AB_OUTCOME_CANCELLED) {
        paint(v, C_RED);
        fputs("\u2717 run cancelled", v->out);
    } else {
        paint(v, C_GREEN);
        fputs("\u2713 run finished (success)", v->out);
    }
    paint(v, C_RESET);
}

/* STATE_DELTA (and ACTIVITY_DELTA's patch): the patch ops and paths. */
static void render_delta(tail_view_t *v, const ab_val_t *patch)
{
    fputs("delta:", v->out);
    uint32_t n = patch && patch->type == AB_VAL_ARRAY ? patch->len : 0;
    for (uint32_t i = 0; i < n && i < 8; i++) {
        fputs(i ? ", " : " ", v->out);
        put_val_str(v, ab_val_get(&patch->u.items[i], "op"), 16);
        fputc(' ', v->out);
        put_val_str(v, ab_val_get(&patch->u.items[i], "path"), 80);
    }
    if (n > 8)
        fprintf(v->out, ", ... (%u ops)", n);
    if (n == 0)
        fputs(" (empty)", v->out);
}

static void render_tool_result(tail_view_t *v, const ab_val_t *b)
{
    paint(v, C_CYAN);
    fputs("tool result: ", v->out);
    paint(v, C_RESET);
    const ab_val_t *c = ab_val_get(b, "content");
    if (c && c->type == AB_VAL_STR)
        put_text(v, c->u.s, c->len, 400);
    else
        put_json(v, c, 400);
}

/* CUSTOM (the AgentKit projections among them): its name and a short view of its value -
 * up to four of its plain fields, or its JSON cut to 80 bytes. */
static void render_custom(tail_view_t *v, const ab_val_t *b)
{
    paint(v, C_CYAN);
    put_val_str(v, ab_val_get(b, "name"), 64);
    paint(v, C_RESET);
    const ab_val_t *x = ab_val_get(b, "value");
    if (!x || x->type != AB_VAL_MAP) {
        fputs(x ? ": " : "", v->out);
        put_json(v, x, 80);
        return;
    }
    uint32_t shown = 0;
    for (uint32_t i = 0; i < x->len && shown < 4; i++) {
        const ab_val_t *val = &x->u.pairs[i].val;
        if (val->type == AB_VAL_MAP || val->type == AB_VAL_ARRAY)
            continue;
        fputs(shown++ ? ", " : ": ", v->out);
        put_text(v, x->u.pairs[i].key, x->u.pairs[i].klen, 32);
        fputc('=', v->out);
        if (val->type == AB_VAL_STR)
            put_text(v, val->u.s, val->len, 60);
        else
            put_json(v, val, 40);
    }
    if (x->len > shown)
        fprintf(v->out, "%s(%u more field%s)", shown ? " " : ": ", x->len - shown,
                x->len - shown == 1 ? "" : "s");
}

/* Every event that is one whole line. */
static void render_line(tail_view_t *v, const ab_event_t *ev, const ab_stamp_t *st,
                        const ab_agui_info_t *in)
{
    const ab_val_t *b = ev->body;
    header(v, ev, st);
    switch (in->type) {
    case AB_AGUI_RUN_STARTED:
        paint(v, C_BOLD);
        fputs("\u25b6 run started", v->out);
        paint(v, C_RESET);
        break;
    case AB_AGUI_RUN_FINISHED: render_outcome(v, in); break;
    case AB_AGUI_RUN_ERROR:
        paint(v, C_RED);
        fputs("\u2717 RUN_ERROR: ", v->out);
        put_val_str(v, ab_val_get(b, "message"), 400);
        if (ab_val_get(b, "code")) {
            fputs(" (", v->out);
            put_val_str(v, ab_val_get(b, "code"), 80);
            fputc(')', v->out);
        }
        paint(v, C_RESET);
        break;
    case AB_AGUI_TOOL_CALL_RESULT: render_tool_result(v, b); break;
    case AB_AGUI_STATE_SNAPSHOT: {
        const ab_val_t *s = ab_val_get(b, "snapshot");
        fprintf(v->out, "state snapshot (%u keys): ", s && s->type == AB_VAL_MAP ? s->len : 0);
        put_json(v, s, 120);
        break;
    }
    case AB_AGUI_STATE_DELTA:
        fputs("state ", v->out);
        render_delta(v, ab_val_get(b, "delta"));
        break;
    case AB_AGUI_STEP_STARTED:
    case AB_AGUI_STEP_FINISHED:
        fputs("step ", v->out);
        put_text(v, in->step_name.ptr, in->step_name.len, 80);
        fputs(in->type == AB_AGUI_STEP_STARTED ? " started" : " finished", v->out);
        break;
    case AB_AGUI_REASONING_START: fputs("reasoning started", v->out); break;
    case AB_AGUI_REASONING_END: fputs("reasoning ended", v->out); break;
    case AB_AGUI_REASONING_ENCRYPTED_VALUE: fputs("(encrypted reasoning)", v->out); break;
    case AB_AGUI_CUSTOM: render_custom(v, b); break;
    case AB_AGUI_MESSAGES_SNAPSHOT: {
        const ab_val_t *m = ab_val_get(b, "messages");
        fprintf(v->out, "messages snapshot (%u messages)",
                m && m->type == AB_VAL_ARRAY ? m->len : 0);
        break;
    }
    case AB_AGUI_ACTIVITY_SNAPSHOT:
    case AB_AGUI_ACTIVITY_DELTA:
        fputs("activity ", v->out);
        put_val_str(v, ab_val_get(b, "activityType"), 40);
        fputc(' ', v->out);
        put_val_str(v, ab_val_get(b, "messageId"), 64);
        if (in->type == AB_AGUI_ACTIVITY_DELTA) {
            fputs(" - ", v->out);
            render_delta(v, ab_val_get(b, "patch"));
        } else {
            fputs(": ", v->out);
            put_json(v, ab_val_get(b, "content"), 80);
        }
        break;
    case AB_AGUI_RAW:
        fputs("raw event", v->out);
        if (ab_val_get(b, "source")) {
            fputs(" from ", v->out);
            put_val_str(v, ab_val_get(b, "source"), 64);
        }
        fputs(": ", v->out);
        put_json(v, ab_val_get(b, "event"), 80);
        break;
    case AB_AGUI_UNKNOWN:
        fputs("(unknown event) ", v->out);
        put_json(v, b, 120);
        break;
    default:
        fputs(ab_agui_type_name(in->type), v->out);
        fputc(' ', v->out);
        put_json(v, b, 100);
        break;
    }
    fputc('\n', v->out);
}

void tail_view_event(tail_view_t *v, const ab_event_t *ev, const ab_stamp_t *st)
{
    ab_agui_info_t in;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_agui_validate(ev->body, AB_AGUI_LENIENT, NULL, NULL, &in, &err) != AB_OK) {
        close_line(v); /* invariant 1 */
        paint(v, C_RED);
        fprintf(v->out, "[render error at seq %llu: %s%s%s]", (unsigned long long)ev->seq,
                err.message, err.field[0] ? " at " : "", err.field);
        paint(v, C_RESET);
        fputc('\n', v->out);
        v->errors++;
        return;
    }
    switch (in.type) {
    case AB_AGUI_TEXT_MESSAGE_START:
    case AB_AGUI_TEXT_MESSAGE_CONTENT:
    case AB_AGUI_TEXT_MESSAGE_END:
    case AB_AGUI_TOOL_CALL_START:
    case AB_AGUI_TOOL_CALL_ARGS:
    case AB_AGUI_TOOL_CALL_END:
    case AB_AGUI_REASONING_MESSAGE_START:
    case AB_AGUI_REASONING_MESSAGE_CONTENT:
    case AB_AGUI_REASONING_MESSAGE_END: render_stream(v, ev, st, &in); break;
    default: render_line(v, ev, st, &in); break;
    }
    fflush(v->out);
}

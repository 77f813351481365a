/*
 * render.c - how `agentbus tail` and the demo's observer show events to people, and the JSON
 * Lines record shared by `tail --json` and `replay`.
 *
 * Human view: one line per event, "HH:MM:SS.mmm thread/run #seq  SUMMARY".
 * Text message content and tool-call arguments are streamed inline: the
 * START event opens a line, each delta is appended, END closes it. Run
 * outcomes are marked (success, interrupt with reasons, cancelled, error).
 *
 * Invariants:
 *  1. Rendering never stops the console: an event that fails the lenient
 *     AG-UI check prints "[render error at seq N: ...]" and returns.
 *  2. Text from events never reaches the terminal raw: control characters
 *     other than newline and tab (ESC above all) are shown as '?'.
 *  3. A streamed line is closed (newline) before anything else is printed,
 *     so lines of different runs never mix.
 */
#include "render.h"

#include "agentbus/agui.h"
#include "agentbus/json.h"

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
    v->color = color;
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

void tail_view_finish(tail_view_t *v)
{
    if (v->open)
        fputc('\n', v->out);
    v->open = false;
    fflush(v->out);
}

static void header(tail_view_t *v, const ab_event_t *ev, const ab_stamp_t *st)
{
    tail_view_finish(v); /* invariant 3 */
    time_t secs = (time_t)(st->time_us / 1000000);
    struct tm tm;
    localtime_r(&secs, &tm);
    paint(v, C_DIM);
    fprintf(v->out, "%02d:%02d:%02d.%03d ", tm.tm_hour, tm.tm_min, tm.tm_sec,
            (int)((st->time_us / 1000) % 1000));
    put_text(v, ev->thread.ptr, ev->thread.len, 64);
    fputc('/', v->out);
    put_text(v, ev->run.ptr, ev->run.len, 64);
    fprintf(v->out, " #%llu", (unsigned long long)ev->seq);
    paint(v, C_RESET);
    fputs("  ", v->out);
}

/* Key of a streamed line: thread NUL run NUL id. */
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

static bool is_open(const tail_view_t *v, const ab_event_t *ev, ab_str_t id)
{
    char k[sizeof(v->open_key)];
    size_t n = make_key(k, sizeof(k), ev, id);
    return v->open && n && n == v->open_len && memcmp(k, v->open_key, n) == 0;
}

static void open_line(tail_view_t *v, const ab_event_t *ev, ab_str_t id)
{
    v->open_len = make_key(v->open_key, sizeof(v->open_key), ev, id);
    v->open = v->open_len > 0;
}

/* TEXT_MESSAGE_* and TOOL_CALL_START/ARGS/END: streamed inline. */
static void render_stream(tail_view_t *v, const ab_event_t *ev, const ab_stamp_t *st,
                          const ab_agui_info_t *in)
{
    const ab_val_t *b = ev->body;
    bool text = in->type == AB_AGUI_TEXT_MESSAGE_START ||
                in->type == AB_AGUI_TEXT_MESSAGE_CONTENT || in->type == AB_AGUI_TEXT_MESSAGE_END;
    ab_str_t id = text ? in->message_id : in->tool_call_id;
    bool start = in->type == AB_AGUI_TEXT_MESSAGE_START || in->type == AB_AGUI_TOOL_CALL_START;
    bool end = in->type == AB_AGUI_TEXT_MESSAGE_END || in->type == AB_AGUI_TOOL_CALL_END;
    if (start || !is_open(v, ev, id)) {
        header(v, ev, st);
        paint(v, C_CYAN);
        if (in->type == AB_AGUI_TEXT_MESSAGE_START)
            fprintf(v->out, "%.*s: ", in->role.len ? (int)in->role.len : 7,
                    in->role.len ? in->role.ptr : "message");
        else if (in->type == AB_AGUI_TOOL_CALL_START)
            fprintf(v->out, "tool %.*s(", (int)in->tool_call_name.len, in->tool_call_name.ptr);
        else if (end)
            fputs(text ? "(end of message)" : "(end of tool call", v->out);
        else
            fputs(text ? "... " : "tool ...(", v->out);
        paint(v, C_RESET);
        open_line(v, ev, id);
    }
    put_val_str(v, ab_val_get(b, "delta"), (size_t)1 << 20);
    if (end) {
        if (!text)
            fputc(')', v->out);
        tail_view_finish(v);
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

/* STATE_DELTA: the patch ops and paths. */
static void render_delta(tail_view_t *v, const ab_val_t *patch)
{
    fputs("state delta:", v->out);
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
    case AB_AGUI_STATE_DELTA: render_delta(v, ab_val_get(b, "delta")); break;
    case AB_AGUI_UNKNOWN:
        fputs("(unknown event) ", v->out);
        put_json(v, b, 120);
        break;
    default:
        fputs(ab_agui_type_name(in->type), v->out);
        fputc(' ', v->out);
        put_json(v, b, 120);
        break;
    }
    fputc('\n', v->out);
}

void tail_view_event(tail_view_t *v, const ab_event_t *ev, const ab_stamp_t *st)
{
    ab_agui_info_t in;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_agui_validate(ev->body, AB_AGUI_LENIENT, NULL, NULL, &in, &err) != AB_OK) {
        tail_view_finish(v); /* invariant 1 */
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
    case AB_AGUI_TOOL_CALL_END: render_stream(v, ev, st, &in); break;
    default: render_line(v, ev, st, &in); break;
    }
    fflush(v->out);
}

/*
 * agui.c - AG-UI 1.0 event validation: type names and the entry point.
 *
 * ab_agui_validate() finds the event's "type", looks the type up, and hands
 * the event map to the schema walker (agui_walk.c) with the type's table
 * (agui_schema.c). Rules and error paths: docs/VALIDATION.md.
 *
 * Invariants:
 *  1. The caller's info is written only when the result is AB_OK; the walker
 *     fills a scratch copy on the stack.
 *  2. An unknown type is an error in strict mode and, in lenient mode, a
 *     warning plus AB_OK with info->type == AB_AGUI_UNKNOWN; the body of an
 *     unknown type is not checked (the consumer drops it).
 *  3. Type lookup is a binary search over by_len[], which is sorted by
 *     (length, bytes); no strlen, at most five comparisons.
 *  4. Strict mode adds one rule the tables cannot say: a RUN_STARTED's
 *     input (the RunAgentInput it echoes) names the event's own thread, run
 *     and, when both give one, parent run (input_identity()).
 */
#include "agui_internal.h"

#include <string.h>

static const char *const type_names[AB_AGUI_TYPE_COUNT_] = {[AB_AGUI_UNKNOWN] = "UNKNOWN",
#define AB_AGUI_NAME_(e, s) [AB_AGUI_##e] = s,
                                                            AB_AGUI_TYPE_MAP(AB_AGUI_NAME_)
#undef AB_AGUI_NAME_
};

const char *ab_agui_type_name(ab_agui_type_t t)
{
    return (unsigned)t < AB_AGUI_TYPE_COUNT_ ? type_names[t] : "UNKNOWN";
}

/* ---- lookup by name ----------------------------------------------------- */

struct type_entry {
    const char *name;
    uint8_t len;
    uint8_t type;
};

#define BY_LEN(e)                                                                                  \
    {                                                                                              \
#e, (uint8_t)(sizeof(#e) - 1), AB_AGUI_##e                                                 \
    }

/* Sorted by length, then by bytes (memcmp order). */
static const struct type_entry by_len[] = {
    BY_LEN(RAW),
    BY_LEN(CUSTOM),
    BY_LEN(RUN_ERROR),
    BY_LEN(RUN_STARTED),
    BY_LEN(STATE_DELTA),
    BY_LEN(RUN_FINISHED),
    BY_LEN(STEP_STARTED),
    BY_LEN(REASONING_END),
    BY_LEN(STEP_FINISHED),
    BY_LEN(TOOL_CALL_END),
    BY_LEN(ACTIVITY_DELTA),
    BY_LEN(STATE_SNAPSHOT),
    BY_LEN(SUBAGENT_ERROR),
    BY_LEN(TOOL_CALL_ARGS),
    BY_LEN(REASONING_START),
    BY_LEN(TOOL_CALL_CHUNK),
    BY_LEN(TOOL_CALL_START),
    BY_LEN(SUBAGENT_STARTED),
    BY_LEN(TEXT_MESSAGE_END),
    BY_LEN(TOOL_CALL_RESULT),
    BY_LEN(ACTIVITY_SNAPSHOT),
    BY_LEN(MESSAGES_SNAPSHOT),
    BY_LEN(SUBAGENT_FINISHED),
    BY_LEN(TEXT_MESSAGE_CHUNK),
    BY_LEN(TEXT_MESSAGE_START),
    BY_LEN(TEXT_MESSAGE_CONTENT),
    BY_LEN(REASONING_MESSAGE_END),
    BY_LEN(REASONING_MESSAGE_CHUNK),
    BY_LEN(REASONING_MESSAGE_START),
    BY_LEN(REASONING_ENCRYPTED_VALUE),
    BY_LEN(REASONING_MESSAGE_CONTENT),
};

ab_agui_type_t ab_agui_type_from(const char *s, size_t len)
{
    if (!s || len < 3 || len > 25)
        return AB_AGUI_UNKNOWN;
    size_t lo = 0, hi = sizeof(by_len) / sizeof(by_len[0]);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct type_entry *e = &by_len[mid];
        int c = e->len != len ? (e->len < len ? -1 : 1) : memcmp(e->name, s, len);
        if (c == 0)
            return (ab_agui_type_t)e->type;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return AB_AGUI_UNKNOWN;
}

/* ---- validation --------------------------------------------------------- */

static const ab_val_t *find_type(const ab_val_t *event)
{
    for (uint32_t i = 0; i < event->len; i++) {
        const ab_kv_t *kv = &event->u.pairs[i];
        if (kv->klen == 4 && memcmp(kv->key, "type", 4) == 0)
            return &kv->val;
    }
    return NULL;
}

/* Bytes of an id shown in a message: at most 48, never half a UTF-8 character. */
static int cut48(const char *s, size_t len)
{
    size_t n = len < 48 ? len : 48;
    while (n < len && n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return (int)n;
}

/* One id of RUN_STARTED.input against the event's own: absent in either = nothing to compare. */
static ab_status_t same_id(ab__ctx_t *c, const ab_val_t *input, const char *key, ab_str_t own,
                           bool need_own)
{
    const ab_val_t *v = ab_val_get(input, key);
    if (!v || v->type != AB_VAL_STR || (!own.ptr && !need_own))
        return AB_OK;
    if (own.ptr && v->len == own.len && memcmp(v->u.s, own.ptr, own.len) == 0)
        return AB_OK;
    ab__path_t up = {NULL, "input", 5, 0};
    ab__path_t at = {&up, key, (uint32_t)strlen(key), 0};
    int n = cut48(v->u.s, v->len), m = own.ptr ? cut48(own.ptr, own.len) : 0;
    return ab__agui_fail(c, &at, "input.%s %.*s differs from the event's %s %.*s", key, n, v->u.s,
                         key, m, own.ptr ? own.ptr : "");
}

/* The input a RUN_STARTED echoes is the input of this run (reference section 3). */
static ab_status_t input_identity(ab__ctx_t *c, const ab_agui_info_t *info)
{
    ab_status_t rc = same_id(c, info->input, "threadId", info->thread_id, true);
    if (rc == AB_OK)
        rc = same_id(c, info->input, "runId", info->run_id, true);
    if (rc == AB_OK)
        rc = same_id(c, info->input, "parentRunId", info->parent_run_id, false);
    return rc;
}

ab_status_t ab_agui_validate(const ab_val_t *event, ab_agui_mode_t mode, ab_agui_warn_cb warn,
                             void *ud, ab_agui_info_t *info, ab_error_t *err)
{
    ab_agui_info_t scratch;
    memset(&scratch, 0, sizeof(scratch));
    ab__ctx_t c = {mode != AB_AGUI_LENIENT, warn, ud, err, &scratch};
    ab__path_t type_path = {NULL, "type", 4, 0};

    if (!event)
        return ab__agui_fail(&c, NULL, "no event");
    if (event->type != AB_VAL_MAP)
        return ab__agui_fail(&c, NULL, "expected object, got %s", ab_val_type_name(event->type));
    const ab_val_t *tv = find_type(event);
    if (!tv)
        return ab__agui_fail(&c, &type_path, "missing required field");
    if (tv->type != AB_VAL_STR)
        return ab__agui_fail(&c, &type_path, "expected string, got %s", ab_val_type_name(tv->type));

    scratch.type = ab_agui_type_from(tv->u.s, tv->len);
    scratch.event = event;
    ab_status_t rc;
    if (scratch.type == AB_AGUI_UNKNOWN) {
        int n = (int)(tv->len < 64 ? tv->len : 64);
        rc = ab__agui_unknown(&c, &type_path, "unknown event type %.*s", n, tv->u.s);
    } else {
        rc = ab__agui_check_object(&c, event, ab__agui_event_schema(scratch.type), NULL);
        if (rc == AB_OK && c.strict && scratch.type == AB_AGUI_RUN_STARTED && scratch.input)
            rc = input_identity(&c, &scratch);
    }
    if (rc == AB_OK && info)
        *info = scratch;
    return rc;
}

ab_status_t ab_agui_validate_input(const ab_val_t *input, ab_agui_mode_t mode, ab_agui_warn_cb warn,
                                   void *ud, ab_error_t *err)
{
    ab_agui_info_t scratch;
    memset(&scratch, 0, sizeof(scratch));
    ab__ctx_t c = {mode != AB_AGUI_LENIENT, warn, ud, err, &scratch};
    ab__path_t root = {NULL, "input", 5, 0};
    if (!input)
        return ab__agui_fail(&c, &root, "no input");
    if (input->type != AB_VAL_MAP)
        return ab__agui_fail(&c, &root, "expected RunAgentInput object, got %s",
                             ab_val_type_name(input->type));
    ab_status_t rc = ab__agui_check_object(&c, input, &ab__agui_run_input, &root);
    if (rc != AB_OK && err && err->field[0] == '/') /* a command's field: no leading slash */
        memmove(err->field, err->field + 1, strlen(err->field));
    return rc;
}

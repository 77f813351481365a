/*
 * agui_cases.h - the table-driven runner shared by test_agui.c and
 * test_agui_nested.c: each case is {mode, expected status, path, message
 * substring, JSON with ' for "}; a case runs in strict and/or lenient mode
 * and checks the status, the error or warning path and the message.
 */
#ifndef AB_TEST_AGUI_CASES_H
#define AB_TEST_AGUI_CASES_H

#include "agentbus/agui.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK  AB_OK
#define BAD AB_INVALID_EVENT

typedef struct vcase {
    char mode;
    ab_status_t want;
    const char *path;
    const char *msg;
    const char *json;
} vcase_t;

/* ---- runner -------------------------------------------------------------- */

struct warns {
    int n;
    char path[AB_ERROR_FIELD_MAX];
    char msg[AB_ERROR_MESSAGE_MAX];
};

static void on_warn(void *ud, const char *path, const char *msg)
{
    struct warns *w = ud;
    if (w->n++ == 0) {
        snprintf(w->path, sizeof(w->path), "%s", path);
        snprintf(w->msg, sizeof(w->msg), "%s", msg);
    }
}

static const ab_val_t *parse_quoted(tu_ctx_t *ctx, const char *src)
{
    size_t n = strlen(src);
    char *json = malloc(n + 1);
    assert_non_null(json);
    for (size_t i = 0; i <= n; i++)
        json[i] = src[i] == '\'' ? '"' : src[i];
    const ab_val_t *v = tu_json(ctx, json);
    free(json);
    return v;
}

static void run_one(tu_ctx_t *ctx, const vcase_t *k, size_t idx, ab_agui_mode_t mode,
                    ab_status_t want)
{
    const ab_val_t *ev = parse_quoted(ctx, k->json);
    struct warns w = {0};
    ab_error_t err = AB_ERROR_INIT;
    ab_agui_info_t info;
    const char *mname = mode == AB_AGUI_STRICT ? "strict" : "lenient";
    ab_status_t rc = ab_agui_validate(ev, mode, on_warn, &w, &info, &err);
    if (rc != want)
        fail_msg("case %zu (%s) %s: expected %s, got %s: %s (at '%s')", idx, mname, k->json,
                 ab_status_name(want), ab_status_name(rc), err.message, err.field);
    const char *got_path = rc == AB_OK ? w.path : err.field;
    const char *got_msg = rc == AB_OK ? w.msg : err.message;
    if (rc != AB_OK) {
        tu_assert_error(&err, want, k->path);
    } else if (mode == AB_AGUI_LENIENT && k->path) {
        if (w.n == 0 || strcmp(w.path, k->path) != 0)
            fail_msg("case %zu (%s) %s: expected a warning at '%s', got %d (first at '%s')", idx,
                     mname, k->json, k->path, w.n, w.path);
    } else if (w.n != 0) {
        fail_msg("case %zu (%s) %s: unexpected warning at '%s': %s", idx, mname, k->json, w.path,
                 w.msg);
    }
    if (k->msg && (rc != AB_OK || k->path) && !strstr(got_msg, k->msg))
        fail_msg("case %zu (%s) %s: message '%s' lacks '%s' (at '%s')", idx, mname, k->json,
                 got_msg, k->msg, got_path);
}

static void run_cases(const vcase_t *cases, size_t n)
{
    tu_ctx_t ctx;
    tu_ctx_init(&ctx);
    for (size_t i = 0; i < n; i++) {
        const vcase_t *k = &cases[i];
        if (k->mode == 'S' || k->mode == 'B')
            run_one(&ctx, k, i, AB_AGUI_STRICT, k->want);
        if (k->mode == 'L' || k->mode == 'B')
            run_one(&ctx, k, i, AB_AGUI_LENIENT, k->want);
        if (k->mode == 'U') {
            run_one(&ctx, k, i, AB_AGUI_STRICT, BAD);
            run_one(&ctx, k, i, AB_AGUI_LENIENT, OK);
        }
    }
    tu_ctx_free(&ctx);
}

#endif

/*
 * fuzz_validate.c - libFuzzer target for AG-UI event validation.
 *
 * The input is read as one msgpack event body (ab_doc_parse with the bus
 * limits), then validated in strict and in lenient mode. Checks, for any
 * input:
 *  1. nothing crashes, reads out of bounds or overflows (ASan/UBSan);
 *  2. strict AB_OK implies lenient AB_OK: lenient accepts a superset;
 *  3. a rejection is AB_INVALID_EVENT whose field is "" or a JSON pointer
 *     ("/..."), with a non-empty message; warnings carry such paths too;
 *  4. on AB_OK, info->event is the root, strict never yields
 *     AB_AGUI_UNKNOWN, and the type agrees with ab_agui_type_from();
 *  5. strict mode never warns about unknown material (it rejects instead),
 *     so a strict AB_OK run emits no warning.
 * Any broken invariant abort()s so libFuzzer (or the corpus replay) stops.
 */
#include "agentbus/agui.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct wstate {
    int n;
};

static void on_warn(void *ud, const char *path, const char *msg)
{
    struct wstate *w = ud;
    if (!path || !msg || !msg[0] || (path[0] != '\0' && path[0] != '/'))
        abort();
    w->n++;
}

static void check_error(ab_status_t rc, const ab_error_t *err)
{
    if (rc != AB_INVALID_EVENT || err->code != AB_INVALID_EVENT)
        abort();
    if (err->field[0] != '\0' && err->field[0] != '/')
        abort();
    if (err->message[0] == '\0')
        abort();
}

static void check_info(const ab_val_t *root, const ab_agui_info_t *info, bool strict)
{
    if (info->event != root)
        abort();
    if (strict && info->type == AB_AGUI_UNKNOWN)
        abort();
    const ab_val_t *t = ab_val_get(root, "type");
    if (!t || t->type != AB_VAL_STR || ab_agui_type_from(t->u.s, t->len) != info->type)
        abort();
}

/* Validate in one mode; returns the status after checking invariants 3-5. */
static ab_status_t run_mode(const ab_val_t *root, ab_agui_mode_t mode)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_agui_info_t info;
    struct wstate w = {0};
    ab_status_t rc = ab_agui_validate(root, mode, on_warn, &w, &info, &err);
    if (rc == AB_OK) {
        if (err.code != AB_OK)
            abort();
        check_info(root, &info, mode == AB_AGUI_STRICT);
        if (mode == AB_AGUI_STRICT && w.n != 0)
            abort();
    } else {
        check_error(rc, &err);
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the type lookup takes any bytes */
    (void)ab_agui_type_from((const char *)data, size < 64 ? size : 64);

    ab_doc_t *doc = NULL;
    if (ab_doc_new(&doc) != AB_OK)
        return 0;
    const ab_val_t *root = NULL;
    ab_error_t perr = AB_ERROR_INIT;
    if (ab_doc_parse(doc, data, size, 1u << 20, 64, AB_INVALID_EVENT, &root, &perr) == AB_OK) {
        ab_status_t strict = run_mode(root, AB_AGUI_STRICT);
        ab_status_t lenient = run_mode(root, AB_AGUI_LENIENT);
        if (strict == AB_OK && lenient != AB_OK)
            abort(); /* invariant 2 */
        /* NULL err/info/warn must behave the same */
        if (ab_agui_validate(root, AB_AGUI_STRICT, NULL, NULL, NULL, NULL) != strict ||
            ab_agui_validate(root, AB_AGUI_LENIENT, NULL, NULL, NULL, NULL) != lenient)
            abort();
    }
    ab_doc_destroy(&doc);
    return 0;
}

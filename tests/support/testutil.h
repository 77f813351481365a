/*
 * testutil.h - helpers shared by the cmocka unit tests.
 *
 * tu_json() turns JSON text into a parsed ab_val_t tree through the real
 * JSON bridge and strict reader, so tests can write events as JSON. The
 * tree lives in the tu_ctx until the next call or tu_ctx_free().
 */
#ifndef AB_TESTUTIL_H
#define AB_TESTUTIL_H

#include "agentbus/buf.h"
#include "agentbus/json.h"
#include "agentbus/status.h"
#include "agentbus/value.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka needs the headers above first */
#include <cmocka.h>

typedef struct tu_ctx {
    ab_doc_t *doc;
    ab_buf_t buf;
} tu_ctx_t;

void tu_ctx_init(tu_ctx_t *c);
void tu_ctx_free(tu_ctx_t *c);

/** Parse JSON text into a tree; fails the test on any error. */
const ab_val_t *tu_json(tu_ctx_t *c, const char *json);

/** The nesting depth of @p v by a walk of the tree (1: a scalar or an empty container): the
 *  reference the parse's own figure is checked against. */
uint32_t tu_val_depth(const ab_val_t *v);

/** Read a whole file into a NUL-terminated heap buffer; fails the test on error. */
char *tu_read_file(const char *path, size_t *len);

/** Assert that @p err holds @p code and its field equals @p field (if non-NULL). */
#define tu_assert_error(err, code_, field_)                                                        \
    do {                                                                                           \
        if ((err)->code != (code_))                                                                \
            fail_msg("expected %s, got %s: %s (at %s)", ab_status_name(code_),                     \
                     ab_status_name((err)->code), (err)->message, (err)->field);                   \
        if ((field_) != NULL && strcmp((err)->field, (const char *)(field_)) != 0)                 \
            fail_msg("expected field '%s', got '%s' (%s)", (const char *)(field_), (err)->field,   \
                     (err)->message);                                                              \
    } while (0)

#endif

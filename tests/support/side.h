/*
 * side.h - one side of a conversation with a broker in an integration test:
 * a connection (a client or a worker) with the decoding doc and the test
 * context its requests use. Shared by the dispatch, action and PostgreSQL
 * dispatch tests.
 */
#ifndef AB_TESTS_SIDE_H
#define AB_TESTS_SIDE_H

#include "broker_proc.h"
#include "testutil.h"

#include <string.h>

typedef struct side {
    ab_conn_t *c;
    ab_doc_t *doc;
    tu_ctx_t tu;
} side_t;

/* A new connection to broker @p b (hello/welcome done). */
static inline side_t side_new(const bp_t *b)
{
    side_t s = {it_connect(b), NULL, {0}};
    assert_int_equal(ab_doc_new(&s.doc), AB_OK);
    tu_ctx_init(&s.tu);
    return s;
}

static inline void side_free(side_t *s)
{
    ab_conn_destroy(&s->c);
    ab_doc_destroy(&s->doc);
    tu_ctx_free(&s->tu);
}

#ifndef SV
#define SV(s) ((ab_str_t){(s), strlen(s)})
#endif

#endif

/*
 * seq_fixture.h - test events for the sequencer's tests (test_sequencer.c,
 * test_seq_resume.c): an envelope with an AG-UI body given as JSON, encoded
 * and validated as the command thread would, kept alive in a pool until the
 * test frees it, handed to the sequencer as an ab_seq_item_t.
 */
#ifndef AB_TEST_SEQ_FIXTURE_H
#define AB_TEST_SEQ_FIXTURE_H

#include "testutil.h"

#include "agentbus/codec.h"
#include "sequencer.h"

#include <stdlib.h>
#include <string.h>

#define TEV_POOL 1024

typedef struct tev {
    tu_ctx_t c;
    ab_event_t ev;
    ab_agui_info_t info;
    ab_buf_t bytes;
} tev_t;

typedef struct tev_pool {
    tev_t *v[TEV_POOL];
    size_t n;
} tev_pool_t;

/* An item for the event of (thread, run) at @p seq and @p epoch with body @p json. */
static inline ab_seq_item_t tev_item(tev_pool_t *p, const char *thread, const char *run,
                                     uint64_t seq, uint64_t epoch, const char *json)
{
    assert_true(p->n < TEV_POOL);
    tev_t *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    p->v[p->n++] = e;
    tu_ctx_init(&e->c);
    e->ev.v = 1;
    e->ev.thread = (ab_str_t){thread, strlen(thread)};
    e->ev.run = (ab_str_t){run, strlen(run)};
    e->ev.seq = seq;
    e->ev.epoch = epoch;
    e->ev.ts = 1000;
    e->ev.body = tu_json(&e->c, json);
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_event_encode(&e->ev, &e->bytes, &err), AB_OK);
    if (ab_agui_validate(e->ev.body, AB_AGUI_STRICT, NULL, NULL, &e->info, &err) != AB_OK)
        fail_msg("invalid test event %s: %s at %s", json, err.message, err.field);
    ab_seq_item_t it;
    memset(&it, 0, sizeof(it));
    it.ev = &e->ev;
    it.info = &e->info;
    it.bytes = e->bytes.data;
    it.len = e->bytes.len;
    return it;
}

static inline void tev_pool_free(tev_pool_t *p)
{
    for (size_t i = 0; i < p->n; i++) {
        tu_ctx_free(&p->v[i]->c);
        ab_buf_free(&p->v[i]->bytes);
        free(p->v[i]);
    }
    p->n = 0;
}

#endif /* AB_TEST_SEQ_FIXTURE_H */

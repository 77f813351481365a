/*
 * append_fixture.h - an event to append to a store in a broker unit test: its
 * envelope encoded by the proto library (broker tests link no client
 * library) from a JSON body. Header-only, as the other broker fixtures.
 */
#ifndef AB_TESTS_APPEND_FIXTURE_H
#define AB_TESTS_APPEND_FIXTURE_H

#include "agentbus/codec.h"
#include "agentbus/plugin.h"
#include "testutil.h"

#include <string.h>

/* Event @p seq (epoch 1) of @p run of @p thread with JSON @p body (parsed in @p tu): its
 * envelope into @p env (the caller frees it), and the append that borrows it. */
static inline ab_append_event_t tb_append_of(tu_ctx_t *tu, ab_buf_t *env, const char *thread,
                                             const char *run, uint64_t seq, const char *body)
{
    ab_event_t ev = {.v = 1,
                     .thread = {thread, strlen(thread)},
                     .run = {run, strlen(run)},
                     .seq = seq,
                     .epoch = 1,
                     .body = tu_json(tu, body)};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_event_encode(&ev, env, &err), AB_OK);
    return (ab_append_event_t){.thread = ev.thread,
                               .run = ev.run,
                               .seq = seq,
                               .epoch = 1,
                               .bytes = env->data,
                               .len = env->len};
}

#endif

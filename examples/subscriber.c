/*
 * subscriber.c - example: follow one thread of an agentbus broker from the
 * start, printing each event's run, seq and AG-UI type, for N seconds.
 *
 *   subscriber [ENDPOINT] [THREAD] [SECONDS]
 *   (defaults: tcp://127.0.0.1:7710, "demo", 10)
 *
 * The subscriber delivers every event of each run exactly once, in seq
 * order, whether it came from the store (replay) or live; it fills holes,
 * catches up after a broker restart, and its cursor (printed at the end)
 * is what an application persists to resume after its own restart.
 */
#include "agentbus/subscriber.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int on_event(void *ud, const ab_sub_event_t *e)
{
    unsigned long *count = ud;
    const ab_val_t *type = ab_val_get(e->ev.body, "type");
    printf("%.*s #%llu  %.*s%s  (pos %llu)\n", (int)e->ev.run.len, e->ev.run.ptr,
           (unsigned long long)e->ev.seq, type ? (int)type->len : 1, type ? type->u.s : "?",
           e->replayed ? " [store]" : "", (unsigned long long)e->stamp.pos);
    (*count)++;
    return 0; /* non-zero would stop ab_sub_poll() */
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
    const char *endpoint = argc > 1 ? argv[1] : "tcp://127.0.0.1:7710";
    const char *thread = argc > 2 ? argv[2] : "demo";
    long seconds = argc > 3 ? atol(argv[3]) : 10;
    unsigned long count = 0;

    ab_sub_opts_t opts = {
        .scope = AB_SUB_THREAD, /* every run of the thread */
        .thread = thread,
        .start = AB_SUB_FROM_CURSOR, /* no cursors given: from the start */
        .on_event = on_event,
        .ud = &count,
    };
    ab_sub_t *sub = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_sub_new(&sub, endpoint, &opts, &err) != AB_OK) {
        fprintf(stderr, "subscribe: %s: %s\n", ab_status_name(err.code), err.message);
        return 1;
    }
    long end = now_ms() + seconds * 1000;
    while (now_ms() < end) {
        ab_status_t rc = ab_sub_poll(sub, 200, &err);
        if (rc != AB_OK && !ab_status_retryable(rc)) {
            fprintf(stderr, "poll: %s: %s\n", ab_status_name(rc), err.message);
            break;
        }
    }
    /* the cursor to persist: per run, the last seq delivered */
    const ab_sub_cursor_t *cur = NULL;
    size_t n = ab_sub_cursors(sub, &cur);
    for (size_t i = 0; i < n; i++)
        printf("cursor %s = %llu\n", cur[i].run, (unsigned long long)cur[i].after_seq);
    printf("%lu events\n", count);
    ab_sub_destroy(&sub);
    return 0;
}

/*
 * fake_plugin.h - an in-memory persistence plugin (ab_plugin_t) for broker
 * unit tests. Header-only (static functions) because each test executable
 * is built from one test_*.c file.
 *
 * Follows the plugin contract where the tests rely on it: all-or-nothing
 * append_batch (AB_CONFLICT on a stored (run, seq)), contiguous positions,
 * claim bumps the epoch (creating the run at 2), head reports UNKNOWN for a
 * run never seen, read in position order. fail_append (fail_read) makes the
 * next append_batch (read) calls fail with AB_UNAVAILABLE; counters let tests
 * see the calls. fp_plugin_shared() adds wake_fd/wake_drain, so the broker
 * takes the store as shared by several brokers (its follower reads the
 * others' events back by position with read, scope AB_REPLAY_ALL).
 */
#ifndef AB_TESTS_FAKE_PLUGIN_H
#define AB_TESTS_FAKE_PLUGIN_H

#include "agentbus/plugin.h"

#include <stdlib.h>
#include <string.h>

typedef struct fp_event {
    char thread[AB_ID_MAX_BYTES + 1];
    char run[AB_ID_MAX_BYTES + 1];
    uint64_t seq, epoch, pos;
    uint8_t *bytes;
    size_t len;
} fp_event_t;

typedef struct fp_run {
    ab_run_head_t head;
} fp_run_t;

struct ab_plugin_db {
    fp_event_t *ev;
    size_t nev;
    fp_run_t *runs;
    size_t nruns;
    int fail_append; /**< fail the next append_batch calls */
    int fail_read;   /**< fail the next read calls */
    bool claim_v1;   /**< claim as plugin.h once said: a new run at epoch 1 */
    unsigned appends, claims, heads, reads, event_bytes, heads_of; /* heads_of: calls */
};

static bool fp_is(const char *s, ab_str_t v)
{
    return strlen(s) == v.len && memcmp(s, v.ptr, v.len) == 0;
}

static fp_run_t *fp_find_run(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, bool create)
{
    for (size_t i = 0; i < db->nruns; i++)
        if (fp_is(db->runs[i].head.thread, thread) && fp_is(db->runs[i].head.run, run))
            return &db->runs[i];
    if (!create)
        return NULL;
    db->runs = realloc(db->runs, (db->nruns + 1) * sizeof(*db->runs));
    fp_run_t *r = &db->runs[db->nruns++];
    memset(r, 0, sizeof(*r));
    memcpy(r->head.thread, thread.ptr, thread.len);
    memcpy(r->head.run, run.ptr, run.len);
    return r;
}

static fp_event_t *fp_find_event(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, uint64_t seq)
{
    for (size_t i = 0; i < db->nev; i++)
        if (db->ev[i].seq == seq && fp_is(db->ev[i].thread, thread) && fp_is(db->ev[i].run, run))
            return &db->ev[i];
    return NULL;
}

static ab_status_t fp_append_batch(ab_plugin_db_t *db, const ab_append_event_t *evs, size_t n,
                                   int64_t commit_us, uint64_t *first_pos, ab_error_t *err)
{
    (void)commit_us;
    db->appends++;
    if (db->fail_append) {
        db->fail_append--;
        return ab_error_set(err, AB_UNAVAILABLE, NULL, "fake: disk full");
    }
    for (size_t i = 0; i < n; i++)
        if (fp_find_event(db, evs[i].thread, evs[i].run, evs[i].seq))
            return ab_error_set(err, AB_CONFLICT, "seq", "fake: seq stored");
    *first_pos = db->nev + 1;
    db->ev = realloc(db->ev, (db->nev + n) * sizeof(*db->ev));
    for (size_t i = 0; i < n; i++) {
        fp_event_t *e = &db->ev[db->nev++];
        memset(e, 0, sizeof(*e));
        memcpy(e->thread, evs[i].thread.ptr, evs[i].thread.len);
        memcpy(e->run, evs[i].run.ptr, evs[i].run.len);
        e->seq = evs[i].seq;
        e->epoch = evs[i].epoch;
        e->pos = db->nev;
        e->bytes = malloc(evs[i].len);
        memcpy(e->bytes, evs[i].bytes, evs[i].len);
        e->len = evs[i].len;
        fp_run_t *r = fp_find_run(db, evs[i].thread, evs[i].run, true);
        if (r->head.epoch == 0)
            r->head.epoch = evs[i].epoch;
        r->head.last_seq = e->seq;
        r->head.last_pos = e->pos;
        if (evs[i].status != AB_RUN_STATUS_UNKNOWN)
            r->head.status = evs[i].status;
        if (evs[i].status == AB_RUN_STATUS_FINISHED)
            r->head.outcome = evs[i].outcome;
        if (evs[i].status == AB_RUN_STATUS_ACTIVE && evs[i].parent_run.ptr)
            memcpy(r->head.parent_run, evs[i].parent_run.ptr, evs[i].parent_run.len);
    }
    return AB_OK;
}

static ab_status_t fp_claim(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, uint64_t *epoch,
                            uint64_t *last_seq, ab_error_t *err)
{
    (void)err;
    db->claims++;
    fp_run_t *r = fp_find_run(db, thread, run, true);
    if (db->claim_v1)
        r->head.epoch++;
    else
        r->head.epoch = (r->head.epoch > 1 ? r->head.epoch : 1) + 1; /* at least 2 (plugin.h) */
    *epoch = r->head.epoch;
    *last_seq = r->head.last_seq;
    return AB_OK;
}

static ab_status_t fp_head(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, ab_run_head_t *out,
                           ab_error_t *err)
{
    (void)err;
    db->heads++;
    fp_run_t *r = fp_find_run(db, thread, run, false);
    if (r) {
        *out = r->head;
        return AB_OK;
    }
    memset(out, 0, sizeof(*out));
    memcpy(out->thread, thread.ptr, thread.len);
    memcpy(out->run, run.ptr, run.len);
    return AB_OK;
}

/* heads_of: head for each, in order (fp_plugin_heads_of's table only). */
static inline ab_status_t fp_heads_of(ab_plugin_db_t *db, const ab_str_t *threads,
                                      const ab_str_t *runs, size_t n, ab_head_cb cb, void *ud,
                                      ab_error_t *err)
{
    db->heads_of++;
    unsigned heads = db->heads; /* not counted as head calls */
    for (size_t i = 0; i < n; i++) {
        ab_run_head_t h;
        fp_head(db, threads[i], runs[i], &h, err);
        if (cb(ud, &h) != 0)
            break;
    }
    db->heads = heads;
    return AB_OK;
}

static ab_status_t fp_thread_heads(ab_plugin_db_t *db, ab_str_t thread, ab_head_cb cb, void *ud,
                                   ab_error_t *err)
{
    (void)err;
    for (size_t i = 0; i < db->nruns; i++)
        if (fp_is(db->runs[i].head.thread, thread) && cb(ud, &db->runs[i].head))
            break;
    return AB_OK;
}

static ab_status_t fp_head_pos(ab_plugin_db_t *db, uint64_t *pos, ab_error_t *err)
{
    (void)err;
    *pos = db->nev;
    return AB_OK;
}

static bool fp_match(const fp_event_t *e, const ab_read_t *req)
{
    switch (req->scope) {
    case AB_REPLAY_RUN:
        return fp_is(e->thread, req->thread) && fp_is(e->run, req->run) && e->seq > req->after_seq;
    case AB_REPLAY_THREAD: return fp_is(e->thread, req->thread) && e->pos > req->after_pos;
    default: return e->pos > req->after_pos;
    }
}

static ab_status_t fp_read(ab_plugin_db_t *db, const ab_read_t *req, ab_row_cb cb, void *ud,
                           uint32_t *count, ab_error_t *err)
{
    db->reads++;
    if (db->fail_read) {
        db->fail_read--;
        return ab_error_set(err, AB_UNAVAILABLE, NULL, "fake: read failed");
    }
    uint32_t n = 0;
    for (size_t i = 0; i < db->nev && n < req->limit; i++) {
        const fp_event_t *e = &db->ev[i];
        if (!fp_match(e, req))
            continue;
        ab_row_t row = {
            e->pos,   0,     e->seq, {e->thread, strlen(e->thread)}, {e->run, strlen(e->run)},
            e->bytes, e->len};
        n++;
        if (cb(ud, &row))
            break;
    }
    *count = n;
    return AB_OK;
}

static ab_status_t fp_event_bytes(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, uint64_t seq,
                                  ab_buf_t *out, uint64_t *pos, ab_error_t *err)
{
    db->event_bytes++;
    fp_event_t *e = fp_find_event(db, thread, run, seq);
    if (!e)
        return ab_error_set(err, AB_NOT_FOUND, "seq", "fake: no such event");
    ab_buf_reset(out);
    if (ab_buf_append(out, e->bytes, e->len) != AB_OK)
        return ab_error_set(err, AB_NOMEM, NULL, "fake: nomem");
    *pos = e->pos;
    return AB_OK;
}

static const ab_plugin_t *fp_plugin(void)
{
    static const ab_plugin_t p = {
        .abi_version = AB_PLUGIN_ABI_VERSION,
        .struct_size = sizeof(ab_plugin_t),
        .name = "fake",
        .append_batch = fp_append_batch,
        .claim = fp_claim,
        .head = fp_head,
        .thread_heads = fp_thread_heads,
        .head_pos = fp_head_pos,
        .read = fp_read,
        .event_bytes = fp_event_bytes,
    };
    return &p;
}

/* The same with heads_of (ab__seq_prefetch reads the heads of many runs at once). */
static inline const ab_plugin_t *fp_plugin_heads_of(void)
{
    static ab_plugin_t p;
    p = *fp_plugin();
    p.name = "fake-heads-of";
    p.heads_of = fp_heads_of;
    return &p;
}

/* wake_fd/wake_drain (fp_plugin_shared's table only): no descriptor, never a notification. */
static inline int fp_wake_fd(ab_plugin_db_t *db)
{
    (void)db;
    return -1;
}

static inline ab_status_t fp_wake_drain(ab_plugin_db_t *db, uint32_t *woken, ab_error_t *err)
{
    (void)db;
    (void)err;
    *woken = 0;
    return AB_OK;
}

/* The same as a store shared by several brokers (ab__plugin_shared: the follower runs). */
static inline const ab_plugin_t *fp_plugin_shared(void)
{
    static ab_plugin_t p;
    p = *fp_plugin();
    p.name = "fake-shared";
    p.wake_fd = fp_wake_fd;
    p.wake_drain = fp_wake_drain;
    return &p;
}

static void fp_free(ab_plugin_db_t *db)
{
    for (size_t i = 0; i < db->nev; i++)
        free(db->ev[i].bytes);
    free(db->ev);
    free(db->runs);
    memset(db, 0, sizeof(*db));
}

#endif /* AB_TESTS_FAKE_PLUGIN_H */

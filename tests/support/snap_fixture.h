/*
 * snap_fixture.h - what the snapshot integration tests share (header-only,
 * every function static inline): a fixture that publishes to a real broker
 * while folding the same events into a local reducer, the check that the
 * broker's `snapshot` answer equals that local fold, and a readonly look at
 * the stored snapshot of a thread in a broker's data directory.
 *
 * Include after testutil.h and broker_proc.h.
 */
#ifndef AB_TESTS_SNAP_FIXTURE_H
#define AB_TESTS_SNAP_FIXTURE_H

#include "agentbus/json.h"
#include "agentbus/nego.h"
#include "agentbus/plugin.h"
#include "agentbus/snapshot.h"
#include "jansson_internal.h"
#include "loader.h"

#include <unistd.h>

/** A client publishing to the broker of @p t and folding what it publishes into @p r. */
typedef struct snapfx {
    it_t *t;
    ab_conn_t *c;
    ab_reducer_t *r;
    const char *thread;
    uint64_t epoch, next_seq, last_pos;
} snapfx_t;

/** Connect to the broker of @p t and start an empty local fold of @p thread. */
static inline snapfx_t snapfx_open(it_t *t, const char *thread)
{
    snapfx_t f = {.t = t, .thread = thread};
    ab_error_t err = AB_ERROR_INIT;
    f.c = it_connect(&t->bp);
    assert_int_equal(ab_reducer_new(&f.r, thread, &err), AB_OK);
    return f;
}

/** Fail unless the broker announced durableThreadSnapshots `available`. */
static inline void snapfx_require_available(const snapfx_t *f)
{
    size_t ncaps = 0;
    const ab_cap_t *caps = ab_conn_caps(f->c, &ncaps);
    assert_int_equal(ab_caps_lookup(caps, ncaps, AB_CAP_DURABLE_SNAPSHOTS), AB_CAP_AVAILABLE);
}

/** Free the local fold and close the connection. */
static inline void snapfx_close(snapfx_t *f)
{
    ab_reducer_destroy(&f->r);
    ab_conn_destroy(&f->c);
}

/**
 * Send `snapshot` for fx->thread; fail unless the reply passes the snapshot
 * parser and its projection equals the local fold. @return its checkpoint
 * position.
 */
static inline uint64_t snapfx_check(snapfx_t *f)
{
    ab_msg_t q = {.op = AB_OP_SNAPSHOT, .u.snapshot = {.thread = {f->thread, strlen(f->thread)}}};
    ab_msg_t m;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_request(f->c, &q, NULL, 0, f->t->doc, &m, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("snapshot: %s", err.message);
    assert_int_equal(m.op, AB_OP_SNAPSHOT_REPLY);
    ab_buf_t text = AB_BUF_INIT;
    assert_int_equal(ab_val_to_json(m.u.snapshot_reply.snapshot, &text), AB_OK);
    ab_snapshot_t *snap = NULL;
    if (ab_snapshot_parse((const char *)text.data, text.len, &snap, &err) != AB_OK)
        fail_msg("snapshot rejected: %s", err.message);
    const json_t *proj = json_object_get(ab__snapshot_document(snap), "projection");
    if (!json_equal((json_t *)(uintptr_t)proj, (json_t *)(uintptr_t)ab__reducer_state(f->r))) {
        char *a = json_dumps(proj, JSON_COMPACT),
             *b = json_dumps(ab__reducer_state(f->r), JSON_COMPACT);
        fail_msg("projection differs:\n broker %s\n local  %s", a, b);
    }
    uint64_t pos = ab_snapshot_position(snap);
    ab_snapshot_destroy(&snap);
    ab_buf_free(&text);
    return pos;
}

/**
 * The stored snapshot of @p thread in data directory @p dir, read with a
 * readonly plugin handle: its position (0 = none) and, when @p size is not
 * NULL, its size in bytes. With @p validate the stored document must pass
 * the snapshot parser and name the row's position.
 */
static inline uint64_t snapfx_stored(const char *dir, const char *thread, size_t *size,
                                     bool validate)
{
    const ab_plugin_t *p = ab__plugin_sqlite();
    assert_non_null(p->snapshot_get);
    ab_plugin_open_opts_t o = {.data_dir = dir, .readonly = true};
    ab_plugin_db_t *db = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(p->open(&o, &db, &err), AB_OK);
    ab_buf_t doc = AB_BUF_INIT;
    uint64_t pos = 0;
    ab_status_t st = p->snapshot_get(db, (ab_str_t){thread, strlen(thread)}, &doc, &pos, &err);
    if (st == AB_OK && validate) {
        ab_snapshot_t *s = NULL;
        /* the broker stores the binary form (one msgpack map; docs/REDUCER.md section 7) */
        assert_true(doc.len > 0 &&
                    ((doc.data[0] & 0xf0) == 0x80 || doc.data[0] == 0xde || doc.data[0] == 0xdf));
        if (ab_snapshot_load(doc.data, doc.len, &s, &err) != AB_OK)
            fail_msg("stored snapshot rejected: %s", err.message);
        assert_int_equal(ab_snapshot_position(s), pos);
        ab_snapshot_destroy(&s);
    } else if (st != AB_OK) {
        assert_int_equal(st, AB_NOT_FOUND);
        pos = 0;
    }
    if (size != NULL)
        *size = doc.len;
    ab_buf_free(&doc);
    p->close(db);
    return pos;
}

/** Wait (bounded by IT_TIMEOUT) until the stored snapshot's position is at least @p want. */
static inline uint64_t snapfx_wait_stored(const char *dir, const char *thread, uint64_t want,
                                          bool validate)
{
    long end = ab__mono_ms() + IT_TIMEOUT;
    uint64_t got = 0;
    while ((got = snapfx_stored(dir, thread, NULL, validate)) < want && ab__mono_ms() < end)
        usleep(20 * 1000);
    if (got < want)
        fail_msg("stored snapshot at %llu, want at least %llu", (unsigned long long)got,
                 (unsigned long long)want);
    return got;
}

/** cmocka setup: a broker storing a snapshot every 50 events (the every-N tests). */
static inline int snapfx_setup_every50(void **state)
{
    static const char *const extra[] = {"--snapshot-every", "50", NULL};
    return it_setup_with(state, extra);
}

#endif /* AB_TESTS_SNAP_FIXTURE_H */

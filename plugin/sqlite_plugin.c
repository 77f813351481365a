/*
 * sqlite_plugin.c - the built-in persistence plugin: the ab_plugin_t table
 * of agentbus/plugin.h over the SQLite event store (store/, docs/STORE.md).
 *
 * Invariants:
 *  1. A writer handle is an exclusive store handle (ab_store_opts_t.exclusive:
 *     flock on agentbus.db itself, pid in <dir>/LOCK) from open to close; a
 *     readonly handle never takes the lock.
 *  2. append_batch is one store transaction: begin, one staged append per
 *     event, commit. On any failure the transaction is rolled back whole, so
 *     the batch is stored all or nothing and positions stay dense.
 *  3. Errors of the store pass through unchanged (same status, message,
 *     field, details); the plugin adds only its own argument checks.
 */
#include "agentbus/plugin.h"
#include "agentbus/store.h"

#include <stdlib.h>
#include <string.h>

/** How long a handle waits for a lock held by a checkpoint or a recovery. */
#define PLUGIN_BUSY_TIMEOUT_MS 1000

struct ab_plugin_db {
    ab_store_t *st;
    bool readonly;
};

static ab_status_t bad_handle(ab_error_t *err)
{
    return ab_error_set(err, AB_INVALID_ARGUMENT, "db", "sqlite plugin: NULL handle or argument");
}

static ab_status_t sq_open(const ab_plugin_open_opts_t *opts, ab_plugin_db_t **out, ab_error_t *err)
{
    if (!opts || !out || !opts->data_dir || !*opts->data_dir)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "data_dir",
                            "sqlite plugin: NULL options, out or data directory");
    ab_plugin_db_t *db = calloc(1, sizeof *db);
    if (!db)
        return ab_error_set(err, AB_NOMEM, "db", "out of memory");
    db->readonly = opts->readonly;
    ab_store_opts_t so = {
        .durability = opts->durability,
        .readonly = opts->readonly,
        .busy_timeout_ms = PLUGIN_BUSY_TIMEOUT_MS,
        .exclusive = !opts->readonly,
    };
    ab_status_t s = ab__store_open(&db->st, opts->data_dir, &so, err);
    if (s != AB_OK) {
        free(db);
        return s;
    }
    *out = db;
    return AB_OK;
}

static void sq_close(ab_plugin_db_t *db)
{
    if (!db)
        return;
    ab__store_close(&db->st); /* releases the lock after the connections */
    free(db);
}

static ab_store_event_t to_store_event(const ab_plugin_event_t *e, int64_t commit_us)
{
    return (ab_store_event_t){
        .thread = e->thread.ptr,
        .thread_len = e->thread.len,
        .run = e->run.ptr,
        .run_len = e->run.len,
        .seq = e->seq,
        .epoch = e->epoch,
        .commit_us = commit_us,
        .bytes = e->bytes,
        .len = e->len,
        .status = e->new_status,
        .outcome = e->outcome,
        .parent_run = e->parent_run.ptr,
        .parent_run_len = e->parent_run.ptr ? e->parent_run.len : 0,
    };
}

static ab_status_t sq_append_batch(ab_plugin_db_t *db, const ab_plugin_event_t *evs, size_t n,
                                   int64_t commit_us, uint64_t *first_pos, ab_error_t *err)
{
    if (!db || (!evs && n) || !first_pos)
        return bad_handle(err);
    if (n == 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "events", "sqlite plugin: empty batch");
    ab_status_t s = ab__store_begin(db->st, err);
    if (s != AB_OK)
        return s;
    uint64_t first = 0;
    for (size_t i = 0; i < n; i++) {
        ab_store_event_t ev = to_store_event(&evs[i], commit_us);
        s = ab__store_append(db->st, &ev, i == 0 ? &first : NULL, err);
        if (s != AB_OK) {
            ab_error_detail_int(err, "index", (int64_t)i);
            ab__store_rollback(db->st);
            return s;
        }
    }
    s = ab__store_commit(db->st, err); /* rolls back whole on failure */
    if (s != AB_OK)
        return s;
    *first_pos = first;
    return AB_OK;
}

static ab_status_t sq_claim(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, uint64_t *epoch,
                            uint64_t *last_seq, ab_error_t *err)
{
    if (!db)
        return bad_handle(err);
    return ab__store_claim(db->st, thread.ptr, thread.len, run.ptr, run.len, epoch, last_seq, err);
}

static void copy_id(char *dst, const char *src, size_t len)
{
    if (len > AB_ID_MAX_BYTES)
        len = AB_ID_MAX_BYTES;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

static void to_head(const ab_store_run_t *r, ab_plugin_head_t *h)
{
    memset(h, 0, sizeof *h);
    copy_id(h->thread, r->thread, strlen(r->thread));
    copy_id(h->run, r->run, strlen(r->run));
    h->epoch = r->epoch;
    h->last_seq = r->last_seq;
    h->last_pos = r->last_pos;
    h->status = r->status;
    h->outcome = r->outcome;
}

static ab_status_t sq_head(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, ab_plugin_head_t *out,
                           ab_error_t *err)
{
    if (!db || !out)
        return bad_handle(err);
    ab_error_t local = AB_ERROR_INIT;
    ab_store_run_t r;
    ab_status_t s = ab__store_head(db->st, thread.ptr, thread.len, run.ptr, run.len, &r, &local);
    if (s == AB_NOT_FOUND) { /* never seen: an UNKNOWN head, not an error */
        memset(out, 0, sizeof *out);
        copy_id(out->thread, thread.ptr, thread.len);
        copy_id(out->run, run.ptr, run.len);
        out->status = AB_RUN_STATUS_UNKNOWN;
        return AB_OK;
    }
    if (s != AB_OK) {
        if (err && err->code == AB_OK)
            *err = local;
        return s;
    }
    to_head(&r, out);
    return AB_OK;
}

typedef struct head_adapter {
    ab_plugin_head_cb cb;
    void *ud;
} head_adapter_t;

static int head_cb(void *ud, const ab_store_run_t *r)
{
    head_adapter_t *a = ud;
    ab_plugin_head_t h;
    to_head(r, &h);
    return a->cb ? a->cb(a->ud, &h) : 0;
}

static ab_status_t sq_thread_heads(ab_plugin_db_t *db, ab_str_t thread, ab_plugin_head_cb cb,
                                   void *ud, ab_error_t *err)
{
    if (!db)
        return bad_handle(err);
    head_adapter_t a = {.cb = cb, .ud = ud};
    return ab__store_runs_of_thread(db->st, thread.ptr, thread.len, head_cb, &a, NULL, err);
}

static ab_status_t sq_head_pos(ab_plugin_db_t *db, uint64_t *pos, ab_error_t *err)
{
    if (!db)
        return bad_handle(err);
    return ab__store_head_pos(db->st, pos, err);
}

typedef struct row_adapter {
    ab_plugin_row_cb cb;
    void *ud;
} row_adapter_t;

static int row_cb(void *ud, const ab_store_row_t *r)
{
    row_adapter_t *a = ud;
    ab_plugin_row_t row = {
        .pos = r->pos,
        .commit_us = r->commit_us,
        .seq = r->seq,
        .thread = {.ptr = r->thread, .len = strlen(r->thread)},
        .run = {.ptr = r->run, .len = strlen(r->run)},
        .bytes = r->bytes,
        .len = r->len,
    };
    return a->cb ? a->cb(a->ud, &row) : 0;
}

static ab_status_t sq_read(ab_plugin_db_t *db, const ab_plugin_read_t *req, ab_plugin_row_cb cb,
                           void *ud, uint32_t *count, ab_error_t *err)
{
    if (!db || !req)
        return bad_handle(err);
    if (req->limit == 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "limit", "sqlite plugin: limit must be >= 1");
    row_adapter_t a = {.cb = cb, .ud = ud};
    size_t n = 0;
    ab_status_t s;
    switch (req->scope) {
    case AB_REPLAY_RUN:
        s = ab__store_read_run(db->st, req->thread.ptr, req->thread.len, req->run.ptr, req->run.len,
                               req->after_seq, req->limit, row_cb, &a, &n, err);
        break;
    case AB_REPLAY_THREAD:
        s = ab__store_read_thread(db->st, req->thread.ptr, req->thread.len, req->after_pos,
                                  req->limit, row_cb, &a, &n, err);
        break;
    case AB_REPLAY_ALL:
        s = ab__store_read_all(db->st, req->after_pos, req->limit, row_cb, &a, &n, err);
        break;
    default:
        return ab_error_set(err, AB_INVALID_ARGUMENT, "scope", "sqlite plugin: unknown scope %d",
                            (int)req->scope);
    }
    if (s == AB_OK && count)
        *count = (uint32_t)n;
    return s;
}

static ab_status_t sq_event_bytes(ab_plugin_db_t *db, ab_str_t thread, ab_str_t run, uint64_t seq,
                                  ab_buf_t *out, uint64_t *pos, ab_error_t *err)
{
    if (!db)
        return bad_handle(err);
    return ab__store_event_bytes(db->st, thread.ptr, thread.len, run.ptr, run.len, seq, out, pos,
                                 err);
}

static ab_status_t sq_snapshot_put(ab_plugin_db_t *db, ab_str_t thread, uint64_t pos,
                                   const uint8_t *doc, size_t len, ab_error_t *err)
{
    if (!db)
        return bad_handle(err);
    return ab__store_snapshot_put(db->st, thread.ptr, thread.len, pos, doc, len, err);
}

static ab_status_t sq_snapshot_get(ab_plugin_db_t *db, ab_str_t thread, ab_buf_t *doc,
                                   uint64_t *pos, ab_error_t *err)
{
    if (!db)
        return bad_handle(err);
    return ab__store_snapshot_get(db->st, thread.ptr, thread.len, doc, pos, err);
}

static const ab_plugin_t SQLITE_PLUGIN = {
    .abi_version = AB_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(ab_plugin_t),
    .name = "sqlite",
    .open = sq_open,
    .close = sq_close,
    .append_batch = sq_append_batch,
    .claim = sq_claim,
    .head = sq_head,
    .thread_heads = sq_thread_heads,
    .head_pos = sq_head_pos,
    .read = sq_read,
    .event_bytes = sq_event_bytes,
    .snapshot_put = sq_snapshot_put,
    .snapshot_get = sq_snapshot_get,
};

const ab_plugin_t *ab__plugin_sqlite(void)
{
    return &SQLITE_PLUGIN;
}

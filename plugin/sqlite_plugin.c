/*
 * sqlite_plugin.c - the built-in persistence plugin: the ab_plugin_t table
 * of agentbus/plugin.h over the SQLite event store (store/, docs/STORE.md).
 *
 * The store speaks the plugin ABI's own types (agentbus/model.h) and its
 * handle is this plugin's ab_plugin_db_t, so the table points straight at
 * the store's functions; only open and close are adapted here.
 *
 * Invariants:
 *  1. A writer handle is an exclusive store handle (ab_store_opts_t.exclusive:
 *     flock on agentbus.db itself, pid in <dir>/LOCK) from open to close; a
 *     readonly handle never takes the lock.
 *  2. append_batch is one store transaction (ab__store_append_batch): on any
 *     failure it is rolled back whole, so the batch is stored all or nothing
 *     and positions stay dense.
 *  3. Errors of the store pass through unchanged (same status, message,
 *     field, details).
 */
#include "agentbus/plugin.h"
#include "loader.h"
#include "store.h"

/** How long a handle waits for a lock held by a checkpoint or a recovery. */
#define PLUGIN_BUSY_TIMEOUT_MS 1000

static ab_status_t sq_open(const ab_plugin_open_opts_t *opts, ab_plugin_db_t **out, ab_error_t *err)
{
    if (!opts || !out || !opts->data_dir || !*opts->data_dir)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "data_dir",
                            "sqlite plugin: NULL options, out or data directory");
    ab_store_opts_t so = {
        .durability = opts->durability,
        .readonly = opts->readonly,
        .busy_timeout_ms = PLUGIN_BUSY_TIMEOUT_MS,
        .exclusive = !opts->readonly,
    };
    return ab__store_open(out, opts->data_dir, &so, err);
}

static void sq_close(ab_plugin_db_t *db)
{
    ab__store_close(&db); /* releases the lock after the connections */
}

static const ab_plugin_t SQLITE_PLUGIN = {
    .abi_version = AB_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(ab_plugin_t),
    .name = "sqlite",
    .open = sq_open,
    .close = sq_close,
    .append_batch = ab__store_append_batch,
    .claim = ab__store_claim,
    .head = ab__store_head,
    .thread_heads = ab__store_thread_heads,
    .head_pos = ab__store_head_pos,
    .read = ab__store_read,
    .event_bytes = ab__store_event_bytes,
    .snapshot_put = ab__store_snapshot_put,
    .snapshot_get = ab__store_snapshot_get,
    .request_put = ab__store_request_put,
    .request_get = ab__store_request_get,
    .request_by_key = ab__store_request_by_key,
    .request_move = ab__store_request_move,
    .request_list = ab__store_request_list,
    .request_thread_open = ab__store_request_thread_open,
    .request_position = ab__store_request_position,
    .request_by_run = ab__store_request_by_run,
    .stats = ab__store_stats,
    .snapshot_put_part = ab__store_snapshot_put_part,
    .threads_list = ab__store_threads_list,
    .set_lock_wait = ab__store_set_lock_wait,
};

const ab_plugin_t *ab__plugin_sqlite(void)
{
    return &SQLITE_PLUGIN;
}

/*
 * bad_abi_module.c - a loadable plugin with a broken function table, for the
 * loader tests. Built once per variant (tests/CMakeLists.txt): with AB_BAD_ABI=1
 * its table claims ABI AB_PLUGIN_ABI_VERSION + 1; with AB_BAD_OLD=1 the ABI
 * before the oldest one loaded (AB_PLUGIN_ABI_OLDEST - 1, i.e. ABI 6, whose
 * ab_request_t was shorter); with AB_BAD_NULLFN=1 it has the right ABI but no read function; with
 * AB_BAD_PARTIAL=1 it has every required function but only one of the seven
 * request_* entries; with AB_BAD_TAKE=1 it has request_take alone (none of
 * the entries it comes with); with AB_BAD_FENCE=1 it has append_fenced without
 * wake_fd/wake_drain; with AB_BAD_NODISPATCH=1 it is a valid table without
 * any request_* entry (a plugin that cannot dispatch, which loads); with
 * AB_BAD_ABI7=1 the same as a table of ABI 7, which ends before ABI 8's first
 * entry (it loads, its later entries read as NULL); with AB_BAD_SHORT=1 a
 * table of ABI 7 cut before its own last entries (refused).
 *
 * Invariants:
 *  1. No function of the table does anything: the loader must refuse the
 *     table (or, NODISPATCH, the test must not call one) before any is called.
 *  2. It includes agentbus/plugin.h alone, and checks that no third-party
 *     header came with it.
 */
#include "agentbus/plugin.h"

/* plugin.h is all a plugin author includes: it must not bring in msgpack,
 * jansson, ZeroMQ or SQLite (this file is built with the agentbus headers
 * only, so a header that did would fail this check at build time). */
#if defined(MSGPACK_VERSION_H) || defined(JANSSON_H) || defined(__ZMQ_H_INCLUDED__) ||             \
    defined(SQLITE3_H)
#error "agentbus/plugin.h pulls in a third-party header"
#endif

static ab_status_t bad_open(const ab_plugin_open_opts_t *o, ab_plugin_db_t **out, ab_error_t *e)
{
    (void)o, (void)out, (void)e;
    return AB_INTERNAL;
}

static void bad_close(ab_plugin_db_t *db)
{
    (void)db;
}

static ab_status_t bad_append(ab_plugin_db_t *db, const ab_append_event_t *evs, size_t n,
                              int64_t commit_us, uint64_t *first, ab_error_t *e)
{
    (void)db, (void)evs, (void)n, (void)commit_us, (void)first, (void)e;
    return AB_INTERNAL;
}

static ab_status_t bad_claim(ab_plugin_db_t *db, ab_str_t t, ab_str_t r, uint64_t *ep, uint64_t *ls,
                             ab_error_t *e)
{
    (void)db, (void)t, (void)r, (void)ep, (void)ls, (void)e;
    return AB_INTERNAL;
}

static ab_status_t bad_head(ab_plugin_db_t *db, ab_str_t t, ab_str_t r, ab_run_head_t *h,
                            ab_error_t *e)
{
    (void)db, (void)t, (void)r, (void)h, (void)e;
    return AB_INTERNAL;
}

static ab_status_t bad_heads(ab_plugin_db_t *db, ab_str_t t, ab_head_cb cb, void *ud, ab_error_t *e)
{
    (void)db, (void)t, (void)cb, (void)ud, (void)e;
    return AB_INTERNAL;
}

static ab_status_t bad_head_pos(ab_plugin_db_t *db, uint64_t *pos, ab_error_t *e)
{
    (void)db, (void)pos, (void)e;
    return AB_INTERNAL;
}

#ifndef AB_BAD_NULLFN
static ab_status_t bad_read(ab_plugin_db_t *db, const ab_read_t *req, ab_row_cb cb, void *ud,
                            uint32_t *count, ab_error_t *e)
{
    (void)db, (void)req, (void)cb, (void)ud, (void)count, (void)e;
    return AB_INTERNAL;
}
#endif

static ab_status_t bad_bytes(ab_plugin_db_t *db, ab_str_t t, ab_str_t r, uint64_t seq,
                             ab_buf_t *out, uint64_t *pos, ab_error_t *e)
{
    (void)db, (void)t, (void)r, (void)seq, (void)out, (void)pos, (void)e;
    return AB_INTERNAL;
}

#ifdef AB_BAD_TAKE
static ab_status_t bad_take(ab_plugin_db_t *db, uint64_t id, ab_str_t w, ab_str_t b,
                            ab_request_t *out, ab_buf_t *in, ab_error_t *e)
{
    (void)db, (void)id, (void)w, (void)b, (void)out, (void)in, (void)e;
    return AB_INTERNAL;
}
#endif

#ifdef AB_BAD_FENCE
static ab_status_t bad_fenced(ab_plugin_db_t *db, const ab_append_event_t *evs, size_t n,
                              const ab_str_t *th, size_t nth, uint64_t seen, int64_t now,
                              uint64_t *first, ab_error_t *e)
{
    (void)db, (void)evs, (void)n, (void)th, (void)nth, (void)seen, (void)now, (void)first, (void)e;
    return AB_INTERNAL;
}
#endif

#ifdef AB_BAD_PARTIAL
static ab_status_t bad_put(ab_plugin_db_t *db, const ab_request_new_t *r, ab_request_t *out,
                           bool *existing, ab_error_t *e)
{
    (void)db, (void)r, (void)out, (void)existing, (void)e;
    return AB_INTERNAL;
}
#endif

static const ab_plugin_t BAD = {
#if defined(AB_BAD_ABI)
    .abi_version = AB_PLUGIN_ABI_VERSION + 1,
#elif defined(AB_BAD_OLD)
    .abi_version = AB_PLUGIN_ABI_OLDEST - 1,
#elif defined(AB_BAD_ABI7) || defined(AB_BAD_SHORT)
    .abi_version = 7,
#else
    .abi_version = AB_PLUGIN_ABI_VERSION,
#endif
#if defined(AB_BAD_ABI7)
    .struct_size = offsetof(ab_plugin_t, append_fenced), /* ABI 8 added it: not in ABI 7 */
#elif defined(AB_BAD_SHORT)
    .struct_size = offsetof(ab_plugin_t, threads_list), /* ABI 7's own last entry cut off */
#else
    .struct_size = sizeof(ab_plugin_t),
#endif
    .name = "bad",
    .open = bad_open,
    .close = bad_close,
    .append_batch = bad_append,
    .claim = bad_claim,
    .head = bad_head,
    .thread_heads = bad_heads,
    .head_pos = bad_head_pos,
#ifndef AB_BAD_NULLFN
    .read = bad_read,
#endif
    .event_bytes = bad_bytes,
#ifdef AB_BAD_PARTIAL
    .request_put = bad_put,
#endif
#ifdef AB_BAD_TAKE
    .request_take = bad_take, /* without the request_* entries, wake_fd and the other two */
#endif
#ifdef AB_BAD_FENCE
    .append_fenced = bad_fenced, /* without wake_fd/wake_drain */
#endif
};

/** The plugin entry point (AB_PLUGIN_ENTRY_SYMBOL). */
__attribute__((visibility("default"))) const ab_plugin_t *ab_plugin_entry(void);

const ab_plugin_t *ab_plugin_entry(void)
{
    return &BAD;
}

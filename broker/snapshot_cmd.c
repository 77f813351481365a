/*
 * snapshot_cmd.c - the `snapshot` request on a replay reader: the current
 * snapshot document of a thread (docs/REDUCER.md section 7, docs/PROTOCOL.md
 * 7.8), and the writer's durable snapshot step (ab_snapshot_store()).
 *
 * ab_snapshot_compute() starts from the latest stored snapshot when the
 * plugin has snapshot_get (ab_snapshot_parse, then
 * ab_snapshot_builder_from), and folds only the thread's events after its
 * checkpoint.position (plugin read, scope thread, after_pos, pages of
 * PAGE_ROWS); without a stored snapshot (or a plugin without the function)
 * it folds every stored event of the thread. A stored snapshot that does
 * not parse, or names another thread, is logged and ignored (full fold).
 *
 * Invariants:
 *  1. The document covers a prefix of the commit order: every event up to
 *     its checkpoint.position that belongs to the thread, and no other.
 *     Stored snapshots are computed only from committed events, so a stored
 *     one never claims more than is committed.
 *  2. Memory: the builder's state (projection plus the events of active
 *     runs), one page of decoded rows at a time (one arena, reset per row)
 *     and the encoded reply; never the whole thread's events.
 *  3. Every request gets exactly one answer: snapshot_reply, or error
 *     not_found (no stored event of the thread), too_large (the document
 *     does not fit a reply frame of AB_MAX_REPLY_BYTES or max_depth), the
 *     store's error, corrupt (a stored event that does not decode or fold),
 *     or no_memory.
 *  4. The request runs to completion on the reader's thread: replays
 *     served by the same reader wait meanwhile (cost: one pass over the
 *     events after the stored snapshot).
 */
#include "agentbus/json.h"
#include "agentbus/snapshot.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define PAGE_ROWS 1024u

typedef struct fold {
    ab_snapshot_builder_t *sb;
    ab_doc_t *doc;
    const ab_limits_t *lim;
    uint64_t last_pos;
    uint64_t events;
    ab_status_t st;
    ab_error_t *err;
} fold_t;

static int fold_row(void *ud, const ab_plugin_row_t *row)
{
    fold_t *f = ud;
    ab_event_t ev;
    char run[AB_ID_MAX_BYTES + 1];
    f->last_pos = row->pos;
    if (row->run.len > AB_ID_MAX_BYTES) {
        f->st = ab_error_set(f->err, AB_CORRUPT, "", "stored run id at position %llu too long",
                             (unsigned long long)row->pos);
        return 1;
    }
    memcpy(run, row->run.ptr, row->run.len);
    run[row->run.len] = '\0';
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t st = ab_event_decode(f->doc, row->bytes, row->len, NULL, &ev, &e);
    if (st == AB_OK)
        st = ab_snapshot_builder_feed(f->sb, run, row->seq, row->pos, ev.body, &e);
    if (st != AB_OK) {
        f->st = st == AB_NOMEM ? AB_NOMEM
                               : ab_error_set(f->err, AB_CORRUPT, "",
                                              "stored event at position %llu (run %s seq %llu) "
                                              "cannot be folded: %s",
                                              (unsigned long long)row->pos, run,
                                              (unsigned long long)row->seq, e.message);
        return 1;
    }
    f->events++;
    return 0;
}

/* Fold every stored event of the thread. */
static ab_status_t fold_thread(ab_broker_t *b, ab_plugin_db_t *db, ab_str_t thread, fold_t *f)
{
    const ab_plugin_t *p = b->plugin;
    for (;;) {
        ab_plugin_read_t req = {.scope = AB_REPLAY_THREAD, .thread = thread};
        req.after_pos = f->last_pos;
        req.limit = PAGE_ROWS;
        uint32_t got = 0;
        ab_status_t st = p->read(db, &req, fold_row, f, &got, f->err);
        if (f->st != AB_OK)
            return f->st;
        if (st != AB_OK)
            return st;
        if (got < req.limit)
            return AB_OK;
    }
}

/* The document as a value tree in @p doc (root in *out), pointing into @p buf. */
static ab_status_t to_tree(const json_t *js, const ab_limits_t *lim, ab_doc_t *doc, ab_buf_t *buf,
                           const ab_val_t **out, ab_error_t *err)
{
    /* the snapshot map sits at depth 2 of the reply header */
    uint32_t depth = lim->max_depth > 1 ? lim->max_depth - 1 : 1;
    uint32_t max_bytes = AB_MAX_REPLY_BYTES - 4096; /* room for the header's other fields */
    char *text = json_dumps(js, JSON_COMPACT);
    if (text == NULL)
        return ab_error_set(err, AB_NOMEM, "", "out of memory encoding the snapshot");
    ab_status_t st =
        ab_json_to_msgpack(text, strlen(text), depth, max_bytes, AB_INTERNAL, buf, err);
    free(text);
    if (st == AB_OK)
        st = ab_doc_parse(doc, buf->data, buf->len, max_bytes, depth, AB_INTERNAL, out, err);
    return st;
}

/* Start @p f->sb from the stored snapshot of @p thread, if any (else a fresh builder). */
static ab_status_t start_builder(ab_broker_t *b, ab_plugin_db_t *db, ab_str_t thread, fold_t *f,
                                 bool *from_stored)
{
    const ab_plugin_t *p = b->plugin;
    *from_stored = false;
    if (p->snapshot_get != NULL) {
        ab_buf_t text = AB_BUF_INIT;
        uint64_t pos = 0;
        ab_error_t e = AB_ERROR_INIT;
        ab_status_t st = p->snapshot_get(db, thread, &text, &pos, &e);
        ab_snapshot_t *snap = NULL;
        if (st == AB_OK)
            st = ab_snapshot_parse((const char *)text.data, text.len, &snap, &e);
        ab_buf_free(&text);
        if (st == AB_OK) {
            const char *tid =
                json_string_value(json_object_get(ab_snapshot_document(snap), "threadId"));
            if (tid == NULL || strlen(tid) != thread.len || memcmp(tid, thread.ptr, thread.len))
                st = ab_error_set(&e, AB_CORRUPT, "threadId", "stored snapshot of another thread");
        }
        if (st == AB_OK)
            st = ab_snapshot_builder_from(&f->sb, snap, &e);
        if (st == AB_OK) {
            f->last_pos = ab_snapshot_position(snap);
            *from_stored = true;
        }
        ab_snapshot_destroy(&snap);
        if (st == AB_OK)
            return AB_OK;
        if (st == AB_NOMEM)
            return ab_error_set(f->err, AB_NOMEM, "", "out of memory restoring a snapshot");
        if (st != AB_NOT_FOUND) {
            char line[512];
            ab_log(AB_LOG_WARN, "stored snapshot of %.*s ignored (full fold): %s", (int)thread.len,
                   thread.ptr, ab_error_format(&e, line, sizeof(line)));
        }
    }
    return ab_snapshot_builder_new(&f->sb, thread.ptr, f->err);
}

ab_status_t ab_snapshot_compute(ab_broker_t *b, ab_plugin_db_t *db, ab_str_t thread, json_t **out,
                                uint64_t *folded, ab_error_t *err)
{
    fold_t f = {.lim = &b->cfg->limits, .err = err};
    bool from_stored = false;
    *out = NULL;
    ab_status_t st = start_builder(b, db, thread, &f, &from_stored);
    if (st == AB_OK)
        st = ab_doc_new(&f.doc);
    if (st == AB_OK)
        st = fold_thread(b, db, thread, &f);
    ab_doc_destroy(&f.doc);
    if (st == AB_OK && f.events == 0 && !from_stored)
        st = ab_error_set(err, AB_NOT_FOUND, "thread", "thread '%.*s' has no stored events",
                          (int)thread.len, thread.ptr);
    if (st == AB_OK)
        st = ab_snapshot_builder_document(f.sb, out, err);
    ab_snapshot_builder_destroy(&f.sb);
    if (folded != NULL)
        *folded = f.events;
    return st;
}

ab_status_t ab_snapshot_store(ab_broker_t *b, ab_plugin_db_t *db, ab_str_t thread, ab_error_t *err)
{
    const ab_plugin_t *p = b->plugin;
    if (p->snapshot_put == NULL || p->snapshot_get == NULL)
        return AB_OK;
    json_t *js = NULL;
    uint64_t folded = 0;
    ab_status_t st = ab_snapshot_compute(b, db, thread, &js, &folded, err);
    if (st != AB_OK)
        return st;
    if (folded > 0) { /* nothing new since the stored one: keep it */
        json_int_t pos =
            json_integer_value(json_object_get(json_object_get(js, "checkpoint"), "position"));
        char *text = json_dumps(js, JSON_COMPACT);
        if (text == NULL)
            st = ab_error_set(err, AB_NOMEM, "", "out of memory encoding the snapshot");
        else
            st = p->snapshot_put(db, thread, (uint64_t)pos, (const uint8_t *)text, strlen(text),
                                 err);
        free(text);
    }
    json_decref(js);
    return st;
}

void ab_reader_snapshot(ab_broker_t *b, ab_plugin_db_t *db, void *sock, ab_job_t *job)
{
    ab_error_t e = AB_ERROR_INIT;
    const ab_limits_t *lim = &b->cfg->limits;
    json_t *js = NULL;
    ab_doc_t *out_doc = NULL;
    uint64_t folded = 0;
    ab_status_t st = ab_snapshot_compute(b, db, job->thread, &js, &folded, &e);
    const ab_val_t *root = NULL;
    ab_buf_t buf = {0};
    if (st == AB_OK)
        st = ab_doc_new(&out_doc);
    if (st == AB_OK)
        st = to_tree(js, lim, out_doc, &buf, &root, &e);
    json_decref(js);
    if (st == AB_OK) {
        ab_msg_t m = {.op = AB_OP_SNAPSHOT_REPLY, .v = job->v, .cid = job->cid};
        m.u.snapshot_reply.thread = job->thread;
        m.u.snapshot_reply.snapshot = root;
        if (ab_reply_msg(sock, &job->identity, &m) != 0)
            st = ab_error_set(&e, AB_TOO_LARGE, "thread",
                              "the thread's snapshot does not fit a reply");
        else
            ab_log(AB_LOG_DEBUG, "snapshot of %s: %llu events folded", job->thread.ptr,
                   (unsigned long long)folded);
    }
    ab_doc_destroy(&out_doc);
    ab_buf_free(&buf);
    if (st != AB_OK) {
        ab_error_set(&e, st, "", "cannot compute the snapshot"); /* no-op when e is set */
        ab_reply_error(sock, &job->identity, job->v, job->cid, &e);
    }
}

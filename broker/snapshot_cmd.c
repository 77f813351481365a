/*
 * snapshot_cmd.c - the `snapshot` request on a replay reader: the current
 * snapshot document of a thread (docs/REDUCER.md section 7), computed from
 * the store on demand (docs/PROTOCOL.md 7.8).
 *
 * No stored snapshot is used yet: the reader reads every stored event of the
 * thread in commit order (plugin read, scope thread, pages of PAGE_ROWS) on
 * its own read-only handle, decodes each envelope and feeds its body to an
 * ab_snapshot_builder, then sends the builder's document as the
 * `snapshot_reply` map. Hence `durableThreadSnapshots` is announced
 * `degraded`.
 *
 * Invariants:
 *  1. The document covers a prefix of the commit order: every event up to
 *     its checkpoint.position that belongs to the thread, and no other.
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
 *     thread's events).
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

void ab_reader_snapshot(ab_broker_t *b, ab_plugin_db_t *db, void *sock, ab_job_t *job)
{
    ab_error_t e = AB_ERROR_INIT;
    const ab_limits_t *lim = &b->cfg->limits;
    fold_t f = {.lim = lim, .err = &e};
    json_t *js = NULL;
    ab_doc_t *out_doc = NULL;
    ab_status_t st = ab_snapshot_builder_new(&f.sb, job->thread.ptr, &e);
    if (st == AB_OK)
        st = ab_doc_new(&f.doc);
    if (st == AB_OK)
        st = fold_thread(b, db, job->thread, &f);
    ab_doc_destroy(&f.doc);
    if (st == AB_OK && f.events == 0)
        st = ab_error_set(&e, AB_NOT_FOUND, "thread", "thread '%s' has no stored events",
                          job->thread.ptr);
    if (st == AB_OK)
        st = ab_snapshot_builder_document(f.sb, &js, &e);
    ab_snapshot_builder_destroy(&f.sb);
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
            ab_log(AB_LOG_DEBUG, "snapshot of %s: %llu events", job->thread.ptr,
                   (unsigned long long)f.events);
    }
    ab_doc_destroy(&out_doc);
    ab_buf_free(&buf);
    if (st != AB_OK) {
        ab_error_set(&e, st, "", "cannot compute the snapshot"); /* no-op when e is set */
        ab_reply_error(sock, &job->identity, job->v, job->cid, &e);
    }
}

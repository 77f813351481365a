/*
 * snapstore.c - storing the snapshot worker's documents on the writer thread,
 * a bounded piece between two group commits (writer_int.h; docs/OPERATIONS.md
 * "Snapshots", "Storing, a piece at a time").
 *
 * The writer is the only thread with a writer handle, and the store commits
 * one transaction at a time: while a document is written no publish is
 * committed. A document written whole holds publishes for the whole of it
 * (39 ms for 16 MiB measured here); written in parts, for one part.
 *
 * Invariants:
 *  1. One ab__snapstore_step() writes at most one piece: a document of at
 *     most AB_SNAP_PART_BYTES whole, or one part of AB_SNAP_PART_BYTES of a
 *     larger one (plugin snapshot_put_part). A plugin without
 *     snapshot_put_part gets each document whole, one per step.
 *  2. The queue holds one document per thread, oldest first: a newer one of
 *     a thread replaces the waiting one, also one half stored (the plugin
 *     leaves the stored snapshot as it was and deletes the parts later), and
 *     takes the end of the queue. Its bytes are bounded by the caller:
 *     ab__snapsched_collect() takes documents only up to
 *     AB_SNAP_PENDING_BYTES (one more when the first alone is over), and
 *     the worker, whose own waiting documents are bounded the same way
 *     (snapshot_worker.c invariant 8), keeps coalescing per thread.
 *  3. A piece that fails drops its document with a warning; the stored
 *     snapshot is then the previous one (the next run end or N events ask
 *     again).
 */
#include "ab_common.h"
#include "log.h"
#include "writer_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct ab__snappend {
    char thread[AB_ID_MAX_BYTES + 1];
    size_t tlen;
    uint64_t pos;
    ab_buf_t doc;
    size_t off;   /**< bytes stored */
    uint32_t idx; /**< the next part */
} snappend_t;

static void drop(ab__snapsched_t *s, size_t i)
{
    snappend_t *p = &s->pend[i];
    s->pend_bytes -= p->doc.len - p->off;
    ab_buf_free(&p->doc);
    memmove(p, p + 1, (s->npend - i - 1) * sizeof(*p));
    s->npend--;
}

void ab__snapstore_add(ab__snapsched_t *s, ab_str_t thread, uint64_t pos, ab_buf_t *doc)
{
    if (thread.len > AB_ID_MAX_BYTES || doc->len == 0)
        return;
    for (size_t i = 0; i < s->npend; i++)
        if (s->pend[i].tlen == thread.len &&
            memcmp(s->pend[i].thread, thread.ptr, thread.len) == 0) {
            drop(s, i); /* invariant 2: the newer one replaces it (one per thread) */
            break;
        }
    if (s->npend == s->pend_cap) {
        size_t cap = s->pend_cap;
        snappend_t *v = ab__grow(s->pend, &cap, s->npend + 1, sizeof(*v), 8);
        if (v == NULL) {
            ab__log(AB_LOG_WARN, "snapshot of %.*s not stored: out of memory", (int)thread.len,
                    thread.ptr);
            return;
        }
        s->pend = v;
        s->pend_cap = cap;
    }
    snappend_t *p = &s->pend[s->npend++];
    memcpy(p->thread, thread.ptr, thread.len);
    p->thread[thread.len] = '\0';
    p->tlen = thread.len;
    p->pos = pos;
    p->doc = *doc;
    *doc = (ab_buf_t)AB_BUF_INIT;
    p->off = 0;
    p->idx = 0;
    s->pend_bytes += p->doc.len;
}

bool ab__snapstore_pending(const ab__snapsched_t *s)
{
    return s->npend > 0;
}

/* Write the next piece of @p p: the rest whole, or one part. @return done with it. */
static bool write_piece(ab__snapsched_t *s, snappend_t *p, ab_error_t *e, ab_status_t *st)
{
    const ab_plugin_t *pl = s->b->plugin;
    ab_str_t t = {p->thread, p->tlen};
    size_t rest = p->doc.len - p->off;
    if (pl->snapshot_put_part == NULL || (p->idx == 0 && rest <= AB_SNAP_PART_BYTES)) {
        *st = pl->snapshot_put(s->b->wdb, t, p->pos, p->doc.data, p->doc.len, e);
        s->pend_bytes -= rest;
        p->off = p->doc.len;
        return true;
    }
    size_t n = rest < AB_SNAP_PART_BYTES ? rest : AB_SNAP_PART_BYTES;
    bool last = n == rest;
    *st = pl->snapshot_put_part(s->b->wdb, t, p->pos, p->idx, p->doc.data + p->off, n, last, e);
    p->off += n;
    p->idx++;
    s->pend_bytes -= n;
    return last;
}

bool ab__snapstore_step(ab__snapsched_t *s)
{
    if (s->npend == 0)
        return false;
    snappend_t *p = &s->pend[0];
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t st = AB_OK;
    int64_t t0 = ab__mono_us();
    bool done = write_piece(s, p, &e, &st);
    int64_t dt = ab__mono_us() - t0; /* the writer's time: publishes wait meanwhile */
    if (dt >= 5000)
        ab__log(AB_LOG_DEBUG, "slow snapshot store: %s, %zu bytes (part %u), %.1f ms on the writer",
                p->thread, p->doc.len, p->idx > 0 ? p->idx - 1 : 0, (double)dt / 1e3);
    if (st != AB_OK) {
        char line[512];
        ab__log(AB_LOG_WARN, "cannot store the snapshot of %s: %s", p->thread,
                ab_error_format(&e, line, sizeof(line)));
        done = true;
    }
    if (done)
        drop(s, 0);
    return s->npend > 0;
}

void ab__snapstore_drain(ab__snapsched_t *s)
{
    while (ab__snapstore_step(s))
        ;
    free(s->pend);
    s->pend = NULL;
    s->npend = s->pend_cap = 0;
    s->pend_bytes = 0;
}

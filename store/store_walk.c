/*
 * store_walk.c - walking a run's or a thread's chain of chunks, oldest
 * first (docs/STORE.md "Chains and anchors").
 *
 * A chunk names the previous chunk of its run (prev_run) and of its thread
 * (prev_thread); a chain ends in its tails table. The indexes hold only
 * anchors, so a walk finds the first anchor above its bound (or, past the
 * last anchor, the chain's tail), follows the links back down to the bound
 * and delivers that segment reversed; then the next anchor, and so on.
 *
 * Invariants:
 *  1. A segment is at most AB_STORE_ANCHOR_EVERY chunks: the anchor (or the
 *     tail) and the non-anchors between it and the anchor before it. A
 *     longer one, a link to a chunk of another owner or to a higher rowid,
 *     a distance that does not count down by one, a run's seqs that do not
 *     fall, or an anchor above the bound met on the way down is AB_CORRUPT:
 *     no damage makes a walk loop or deliver out of order.
 *  2. The key is a run's last_seq or a thread chunk's rowid; a segment's
 *     chunks all have keys above the bound, and the bound then moves to
 *     the anchor's key, so no chunk is delivered twice.
 *  3. The caller holds one read transaction across the walk, so every
 *     statement sees the same committed chains.
 *  4. Every statement is reset (and its bindings cleared) before returning.
 *  5. A link to a chunk that is gone (a row deleted by hand, say) does not
 *     end the walk: the owner's chunks between the anchor below the bound
 *     and the missing one are found by a range scan of the table instead,
 *     so a read still delivers every chunk that is stored, and the hole
 *     shows as missing seqs or positions, as it would with an index. Such
 *     a segment may be twice as long; longer still is AB_CORRUPT.
 *  6. A thread's segment whose rowids span at most AB_STORE_SCAN_SPAN
 *     positions above the bound (many runs speaking in turn: a chunk a
 *     row) is taken by one scan of that range of the table for the
 *     thread's chunks instead of a lookup of each chunk's links. It is
 *     used only when it finds what the links would: the top as its last
 *     chunk, at most AB_STORE_ANCHOR_EVERY chunks, distances that count up
 *     by one to the top and no anchor but the top; anything else walks the
 *     links as above, which names the damage or recovers the segment.
 *  7. A chain's tail is its newest chunk: a chain with a chunk has one
 *     (its first chunk is an anchor), it names a chunk (1 or more), and it is
 *     never below the newest anchor. A tail of 0 or less, none beside an
 *     anchor, or, once a walk passed an anchor, one whose key is below that
 *     anchor's is AB_CORRUPT, where the walk would end there and leave the
 *     newer chunks out unsaid.
 */
#include "ab_common.h"
#include "store_int.h"

/* A chunk's place in the walk's chain. */
typedef struct link {
    sqlite3_int64 owner, prev, key;
    uint32_t dist;
} link_t;

void ab__walk_init(ab__walk_t *w, ab_store_t *st, bool thread, sqlite3_int64 owner,
                   sqlite3_int64 lower)
{
    *w = (ab__walk_t){.st = st, .thread = thread, .owner = owner, .lower = lower};
}

static ab_status_t broken(const ab__walk_t *w, sqlite3_int64 chunk, const char *why,
                          ab_error_t *err)
{
    ab_error_set(err, AB_CORRUPT, "store",
                 "database %s is damaged: the chain of %s %lld breaks at chunk %lld (%s)",
                 w->st->path, w->thread ? "thread" : "run", (long long)w->owner, (long long)chunk,
                 why);
    ab_error_detail_int(err, "chunk", chunk);
    return AB_CORRUPT;
}

/* Step a statement bound to (@p a[, @p b]) for up to two integer columns; *found: a row whose
 * first column is not NULL. */
static ab_status_t one_row(ab_store_t *st, int which, sqlite3_int64 a, const sqlite3_int64 *b,
                           sqlite3_int64 out[2], bool *found, ab_error_t *err)
{
    sqlite3_stmt *q = st->q[which];
    sqlite3_bind_int64(q, 1, a);
    if (b)
        sqlite3_bind_int64(q, 2, *b);
    int rc = sqlite3_step(q);
    *found = rc == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL;
    if (*found) {
        out[0] = sqlite3_column_int64(q, 0);
        out[1] = sqlite3_column_count(q) > 1 ? sqlite3_column_int64(q, 1) : 0;
    }
    ab__store_done(q);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? AB_OK : ab__store_sqlerr(st, rc, "walk", err);
}

/* The chain has no tail (invariant 7): sound only when it has no chunk, so no anchor either
 * (its first chunk is one). */
static ab_status_t no_tail(ab__walk_t *w, ab_error_t *err)
{
    if (w->anchored)
        return broken(w, 0, "no tail above the last anchor", err);
    sqlite3_int64 any = -1, row[2] = {0, 0};
    bool found = false;
    ab_status_t s = one_row(w->st, w->thread ? Q_THREAD_ANCHOR : Q_RUN_ANCHOR, w->owner, &any, row,
                            &found, err);
    return s == AB_OK && found ? broken(w, row[0], "an anchor but no tail", err) : s;
}

/* The top of the next segment: the first anchor above the bound (its key into *key), or
 * with *anchor false the chain's tail (0: the chain is empty). A tail that names no chunk
 * (0 or less: no writer stores one) is AB_CORRUPT. */
static ab_status_t top_of(ab__walk_t *w, sqlite3_int64 *top, sqlite3_int64 *key, bool *anchor,
                          ab_error_t *err)
{
    sqlite3_int64 row[2] = {0, 0};
    ab_status_t s = one_row(w->st, w->thread ? Q_THREAD_ANCHOR : Q_RUN_ANCHOR, w->owner, &w->lower,
                            row, anchor, err);
    bool found = *anchor;
    if (s == AB_OK && !*anchor)
        s = one_row(w->st, w->thread ? Q_THREAD_TAIL : Q_RUN_TAIL, w->owner, NULL, row, &found,
                    err);
    if (s == AB_OK && !found)
        s = no_tail(w, err);
    else if (s == AB_OK && row[0] <= 0)
        s = broken(w, row[0], "a tail that names no chunk", err);
    *top = row[0];
    *key = row[1];
    return s;
}

/* The chunk's links into *lk; *gone when no such chunk is stored (invariant 5). */
static ab_status_t link_of(ab__walk_t *w, sqlite3_int64 chunk, link_t *lk, bool *gone,
                           ab_error_t *err)
{
    sqlite3_stmt *q = w->st->q[Q_CHUNK_LINK];
    sqlite3_bind_int64(q, 1, chunk);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        int c = w->thread ? 4 : 0; /* LINK_COLS: run's three, last_seq, thread's three */
        lk->owner = sqlite3_column_int64(q, c);
        lk->prev = sqlite3_column_int64(q, c + 1);
        lk->dist = (uint32_t)sqlite3_column_int64(q, c + 2);
        lk->key = w->thread ? chunk : sqlite3_column_int64(q, 3);
    }
    ab__store_done(q);
    *gone = rc == SQLITE_DONE;
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? AB_OK : ab__store_sqlerr(w->st, rc, "walk", err);
}

/* The owner's chunks below the missing @p gone and above the bound, oldest first, into
 * @p out (at most @p room; more is AB_CORRUPT), by a scan of the table (invariant 5). */
static ab_status_t recover(ab__walk_t *w, sqlite3_int64 gone, sqlite3_int64 *out, size_t room,
                           size_t *n, ab_error_t *err)
{
    sqlite3_int64 floor = w->lower, row[2] = {0, 0};
    bool found = false;
    ab_status_t s = AB_OK;
    if (!w->thread) /* a run's bound is a seq: start at the rowid of the anchor below it */
        s = one_row(w->st, Q_RUN_ANCHOR_BELOW, w->owner, &w->lower, row, &found, err);
    if (s != AB_OK)
        return s;
    if (!w->thread)
        floor = found ? row[0] : 0;
    sqlite3_stmt *q = w->st->q[w->thread ? Q_THREAD_RANGE : Q_RUN_RANGE];
    sqlite3_bind_int64(q, 1, floor);
    sqlite3_bind_int64(q, 2, gone);
    sqlite3_bind_int64(q, 3, w->owner);
    sqlite3_bind_int64(q, 4, w->lower);
    int rc;
    *n = 0;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW && *n < room)
        out[(*n)++] = sqlite3_column_int64(q, 0);
    ab__store_done(q);
    if (rc == SQLITE_ROW)
        return broken(w, gone, "too many chunks missing", err);
    return rc == SQLITE_DONE ? AB_OK : ab__store_sqlerr(w->st, rc, "walk", err);
}

/* Check one chunk met on the way down (invariant 1); *done: it is at or below the bound. */
static ab_status_t check_link(const ab__walk_t *w, sqlite3_int64 c, const link_t *lk,
                              const link_t *above, size_t n, bool *done, ab_error_t *err)
{
    *done = false;
    if (lk->owner != w->owner)
        return broken(w, c, "chunk of another owner", err);
    if (above && above->dist > 0 && lk->dist != above->dist - 1)
        return broken(w, c, "distance", err);
    if (above && lk->key >= above->key)
        return broken(w, c, "order", err);
    if (lk->key <= w->lower) {
        *done = true;
        return AB_OK;
    }
    if (n > 0 && lk->dist == 0)
        return broken(w, c, "anchor above the bound", err);
    if (n == AB_STORE_ANCHOR_EVERY)
        return broken(w, c, "segment too long", err);
    return AB_OK;
}

/* Whether the thread's chunks @p seg (rowid order) found by scan up to @p top form a
 * segment of a sound chain (invariant 6). */
static bool seg_sound(const sqlite3_int64 *seg, const uint32_t *dist, size_t n, sqlite3_int64 top)
{
    if (n == 0 || seg[n - 1] != top)
        return false;
    for (size_t i = 0; i + 1 < n; i++)
        if (dist[i] == 0 || (dist[i + 1] != 0 && dist[i + 1] != dist[i] + 1))
            return false;
    return true;
}

/* Fill the segment below @p top by a scan of the table (invariant 6); *ok false when it
 * must be walked instead. */
static ab_status_t scan_fill(ab__walk_t *w, sqlite3_int64 top, bool *ok, ab_error_t *err)
{
    uint32_t dist[AB_STORE_ANCHOR_EVERY + 1];
    sqlite3_stmt *q = w->st->q[Q_THREAD_SEG];
    sqlite3_bind_int64(q, 1, w->lower);
    sqlite3_bind_int64(q, 2, top);
    sqlite3_bind_int64(q, 3, w->owner);
    size_t n = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW && n <= AB_STORE_ANCHOR_EVERY) {
        w->seg[n] = sqlite3_column_int64(q, 0);
        dist[n++] = (uint32_t)sqlite3_column_int64(q, 1);
    }
    ab__store_done(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return ab__store_sqlerr(w->st, rc, "walk", err);
    *ok = rc == SQLITE_DONE && n <= AB_STORE_ANCHOR_EVERY && seg_sound(w->seg, dist, n, top);
    if (*ok) {
        w->scanned = true;
        w->n = n;
        w->i = 0;
        w->fills++;
    }
    return AB_OK;
}

/* Walk down from @p top (the chain's tail when @p tail) to the bound and keep the segment,
 * oldest first (invariant 1). A tail at or below an anchor's key is the chain's end only when
 * it is that anchor (invariant 7). */
static ab_status_t fill(ab__walk_t *w, sqlite3_int64 top, bool tail, ab_error_t *err)
{
    sqlite3_int64 down[AB_STORE_ANCHOR_EVERY];
    size_t n = 0, below = 0;
    link_t lk, above;
    bool done = false, gone = false;
    bool check_tail = tail && w->anchored;
    for (sqlite3_int64 c = top; c != 0;) {
        ab_status_t s = link_of(w, c, &lk, &gone, err);
        if (s == AB_OK && gone) /* invariant 5: what is older comes from a scan */
            s = recover(w, c, w->seg, AB_STORE_ANCHOR_EVERY, &below, err);
        else if (s == AB_OK)
            s = check_link(w, c, &lk, n ? &above : NULL, n, &done, err);
        if (s != AB_OK)
            return s;
        if (done && n == 0 && check_tail && lk.key < w->lower)
            return broken(w, c, "tail below the last anchor", err);
        if (done || gone)
            break;
        down[n++] = c;
        if (lk.prev >= c)
            return broken(w, c, "link upwards", err);
        above = lk;
        c = lk.prev;
    }
    for (size_t i = 0; i < n; i++)
        w->seg[below + i] = down[n - 1 - i];
    w->scanned = false;
    w->n = below + n;
    w->i = 0;
    w->fills++;
    return AB_OK;
}

ab_status_t ab__walk_next(ab__walk_t *w, sqlite3_int64 *chunk, ab_error_t *err)
{
    *chunk = 0;
    while (w->i == w->n) {
        if (w->done)
            return AB_OK;
        sqlite3_int64 top = 0, key = 0;
        bool anchor = false;
        ab_status_t s = top_of(w, &top, &key, &anchor, err);
        bool scanned = false;
        if (s == AB_OK && w->thread && top > w->lower && top - w->lower <= AB_STORE_SCAN_SPAN)
            s = scan_fill(w, top, &scanned, err);
        if (s == AB_OK && scanned)
            w->st->segs_scanned++;
        else if (s == AB_OK) {
            w->st->segs_walked += w->thread; /* a thread's segments only */
            s = fill(w, top, !anchor, err);
        }
        if (s != AB_OK)
            return s;
        if (anchor && w->n == 0)
            return broken(w, top, "anchor at or below the bound", err);
        if (anchor) {
            w->lower = key; /* invariant 2 */
            w->anchored = true;
        } else {
            w->done = true;
        }
    }
    *chunk = w->seg[w->i++];
    return AB_OK;
}

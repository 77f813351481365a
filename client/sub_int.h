/*
 * sub_int.h - internals of the subscriber (client/subscriber.c): the
 * per-run cursor map and the bounded FIFO of live events buffered while a
 * replay runs (client/sub_state.c).
 */
#ifndef AB_CLIENT_SUB_INT_H
#define AB_CLIENT_SUB_INT_H

#include "agentbus/client.h"
#include "agentbus/subscriber.h"

/* Run id -> last delivered seq. Entries are never removed. */
typedef struct sub_map {
    ab_sub_cursor_t *ent; /* ent[i].run is an owned NUL-terminated copy */
    size_t *lens;
    size_t n, cap;
    uint32_t *idx; /* open addressing: entry index + 1, 0 = empty */
    size_t icap;   /* power of two, > 2 * n */
} sub_map_t;

/* The cursor of @p run (0 when absent). */
uint64_t ab__sub_map_get(const sub_map_t *m, const char *run, size_t len);
/* Set the cursor of @p run, adding it. @return AB_OK or AB_NOMEM. */
ab_status_t ab__sub_map_set(sub_map_t *m, const char *run, size_t len, uint64_t seq);
void ab__sub_map_free(sub_map_t *m);

/* One buffered live event: stamp and envelope bytes, copied. */
typedef struct sub_item {
    ab_stamp_t stamp;
    size_t len;
    uint8_t bytes[];
} sub_item_t;

/* FIFO of at most `max` items. */
typedef struct sub_fifo {
    sub_item_t **items;
    size_t head, n, cap, max;
} sub_fifo_t;

/* Append a copy; @return AB_OK, AB_TOO_LARGE (full: nothing added) or AB_NOMEM. */
ab_status_t ab__sub_fifo_push(sub_fifo_t *f, const ab_stamp_t *st, const uint8_t *b, size_t len);
/* The oldest item, or NULL. */
const sub_item_t *ab__sub_fifo_front(const sub_fifo_t *f);
/* Drop the oldest item. */
void ab__sub_fifo_pop(sub_fifo_t *f);
/* Drop every item. */
void ab__sub_fifo_clear(sub_fifo_t *f);
void ab__sub_fifo_free(sub_fifo_t *f);

/* The subscriber (client/subscriber.c, sub_sync.c, sub_live.c). */
struct ab_sub {
    ab_sub_opts_t o;  /* copied; thread/run/key/server_key point at the owned copies below */
    ab_keypair_t key; /* o.key's copy */
    char server_key[AB_KEY_Z85_SIZE];
    char *endpoint, *thread, *run;
    void *ctx;
    bool own_ctx;
    ab_conn_t *conn; /* NULL while disconnected */
    void *sock;      /* the SUB, NULL while disconnected */
    ab_buf_t topic;  /* subscription prefix */
    ab_doc_t *doc;   /* replies */
    ab_doc_t *edoc;  /* envelopes being delivered */
    ab_doc_t *ldoc;  /* live stamps and heartbeats */
    ab_limits_t lim;
    sub_map_t map;       /* run/thread scope cursors */
    uint64_t last_pos;   /* pos of the last delivered event (all: the cursor) */
    uint64_t synced_pos; /* every in-scope event up to it was delivered (sub_sync.c inv. 6) */
    uint64_t hb_head;    /* head_pos of the last heartbeat */
    long last_hb_ms;     /* monotonic time of the last heartbeat (or connect, or replay) */
    /* reconnect backoff (subscriber.c invariant 4) */
    uint32_t fails;   /* arms since the connection last proved to work */
    long retry_at_ms; /* no reconnect attempt or replay before it (monotonic) */
    uint64_t rng;     /* jitter state */
    bool need_replay, reconnect, stop;
    /* Set by the poll loop around its own drain of the SUB: live events that
     * are next may be delivered straight from the ZeroMQ message (no FIFO
     * copy); a delivery failure is written to *live_err and kept in live_rc. */
    ab_error_t *live_err;
    ab_status_t live_rc;
    size_t drained; /* live events taken by the current ab__sub_live_drain() */
    uint64_t rows;
    sub_fifo_t fifo;
    ab_cursor_t *req_cursors; /* scratch for thread replays */
    ab_sub_stats_t stats;
};

/* A reconnect attempt or a replay failed: draw the delay before the next one. */
void ab__sub_backoff_arm(ab_sub_t *s);
/* The connection works (a heartbeat of its broker, a completed replay): no delay. */
void ab__sub_backoff_reset(ab_sub_t *s);
/* Open the SUB on the conn's event endpoint and subscribe. */
ab_status_t ab__sub_live_open(ab_sub_t *s, ab_error_t *err);
void ab__sub_live_close(ab_sub_t *s);
/* Move what arrives on the SUB within @p wait_ms (0: what is ready) into the
 * FIFO / heartbeat state. @return messages handled (>= 0) or -1 (AB_IO). */
int ab__sub_live_drain(ab_sub_t *s, int wait_ms);
/* Replay from the cursor, delivering; then the FIFO is drained by ab__sub_fifo_run. */
ab_status_t ab__sub_resync(ab_sub_t *s, ab_error_t *err);
/* Deliver the buffered live events that are next; a hole asks for a replay. */
ab_status_t ab__sub_fifo_run(ab_sub_t *s, ab_error_t *err);
/* One live event: deliver it if it is next, count a duplicate, or on a hole
 * clear the FIFO and ask for a replay. @return AB_OK or the delivery error. */
ab_status_t ab__sub_live_event(ab_sub_t *s, const ab_stamp_t *st, const uint8_t *b, size_t len,
                               ab_error_t *err);

#endif

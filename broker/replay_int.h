/*
 * replay_int.h - what the replay reader's two files share (broker/replay*.c).
 *
 * A reader thread (replay.c) streams chunks; its book (replay_book.c) knows
 * every replay session it serves and every connection those sessions belong
 * to, and keeps the memory bounds of docs/OPERATIONS.md "Memory bounds":
 *
 *  - a chunk's bytes count as unread from the moment it is handed to the
 *    command thread until the client's `credit` for it arrives (the client
 *    credits every chunk it receives, docs/PROTOCOL.md 7.6.1), the
 *    connection is found gone, or the ROUTER reports it dropped;
 *  - a session sends only while its unread bytes are below its byte window
 *    (max_replay_bytes or the request's window_bytes) and the unread bytes
 *    of all readers are below --replay-mib;
 *  - a replay holds a slot of its connection (--replays-per-connection) and
 *    of the broker (--replays) from its start until it has ended AND its
 *    chunks are read: an ended session with unread chunks stays as a "tail";
 *  - a connection with unread bytes and no credit for --replay-idle seconds
 *    is stalled: its running replays end with `timeout`, new ones are
 *    refused `overloaded`, and it is probed (an unsolicited `pong` with cid
 *    0) until it reads again or the ROUTER says it is gone;
 *  - a session with credit that could send nothing for --replay-idle
 *    seconds because the broker's unread bytes were at --replay-mib ends
 *    with `overloaded`, so a client is never left waiting without an answer.
 */
#ifndef AB_BROKER_REPLAY_INT_H
#define AB_BROKER_REPLAY_INT_H

#include "internal.h"

#define AB__RB_RECENT 256 /* fully ended sessions remembered to ignore late credit/cancel */

/** One connection with replays on this reader. */
typedef struct ab__rpeer {
    zmq_msg_t id;           /**< the connection's ROUTER identity (a copy) */
    uint32_t slots;         /**< its sessions, running or tails */
    uint64_t unread;        /**< bytes of its chunks sent and not credited */
    int64_t owing_since_ms; /**< last credit, or when unread last became non-zero */
    int64_t active_ms;      /**< last credit, chunk sent or replay started */
    int64_t next_probe_ms;
    bool stalled; /**< unread for replay_idle without credit: replays cancelled */
} ab__rpeer_t;

/** One replay request being served (or a tail: ended, chunks unread). */
typedef struct ab__rsession {
    ab_job_t *job; /**< the replay request: identity, cid, v, copied ids */
    ab__rpeer_t *peer;
    bool ended;     /**< its replay_end or error was sent */
    ab_read_t from; /**< the next read: scope and cursor (moved past every row read) */
    uint32_t credits;
    uint64_t events;
    uint64_t window_bytes; /**< most unread bytes this session may have */
    uint64_t unread;       /**< bytes of its chunks sent and not credited */
    int64_t sent_ms;       /**< its start, or its last turn: a chunk sent or rows read */
    uint32_t *ring;        /**< sizes of the unread chunks, oldest first */
    uint32_t ring_head, ring_n, ring_cap;
} ab__rsession_t;

/** The sessions and connections of one reader thread. */
typedef struct ab__rbook {
    ab__shared_t *b;
    void *sock; /**< the reader's PAIR to the command thread */
    ab__rsession_t **s;
    size_t ns, cap_s;
    ab__rpeer_t **p;
    size_t np, cap_p;
    uint64_t recent[AB__RB_RECENT]; /**< keys of fully ended sessions (0 = empty) */
    size_t recent_next;
    int64_t released;     /**< bytes given back since the last heap trim */
    int64_t last_trim_ms; /**< when the heap was last trimmed */
} ab__rbook_t;

/** Start a replay session for @p job (consumed), or answer why not. */
void ab__rb_start(ab__rbook_t *bk, ab_job_t *job);

/** Apply a `credit` or `cancel` job (consumed). */
void ab__rb_steer(ab__rbook_t *bk, ab_job_t *job);

/** The connection of @p job is gone (GONE) or lost one chunk (UNDELIVERED); consumed. */
void ab__rb_refused(ab__rbook_t *bk, ab_job_t *job);

/** Bytes @p s may put into its next chunk now; 0 when it must wait for credit. */
uint64_t ab__rb_room(const ab__rbook_t *bk, const ab__rsession_t *s);

/** Count a chunk of @p bytes just handed to the command thread for @p s. */
void ab__rb_sent(ab__rbook_t *bk, ab__rsession_t *s, uint32_t bytes);

/** @p s ended (its replay_end or error was sent): free it, or keep it as a tail. */
void ab__rb_ended(ab__rbook_t *bk, ab__rsession_t *s);

/** Once a second: stall idle connections, probe them, give freed memory back. */
void ab__rb_tick(ab__rbook_t *bk, int64_t now_ms);

/** At shutdown: end every running session with `unavailable`, free everything. */
void ab__rb_close(ab__rbook_t *bk);

#endif /* AB_BROKER_REPLAY_INT_H */

/*
 * cmd_drops.h - the command thread's replay streams that lost a chunk at a
 * full queue (broker/ only; cmd_drops.c).
 */
#ifndef AB_BROKER_CMD_DROPS_H
#define AB_BROKER_CMD_DROPS_H

#include "internal.h"

/** The message of the `overloaded` error that ends a replay one of whose chunks was dropped. */
#define AB__RB_DROPPED                                                                             \
    "replay ended: one of its chunks was dropped, this connection's queue of answers was full"     \
    " (1000 unread); read it and retry"

/** One broken stream: (connection, cid). */
typedef struct ab__drop {
    zmq_msg_t id;
    uint64_t cid;
} ab__drop_t;

/** The broken streams, at most @p max (cfg->replays: one per replay slot). */
typedef struct ab__drops {
    ab__drop_t *v;
    size_t n, cap, max;
} ab__drops_t;

void ab__drops_init(ab__drops_t *d, size_t max);
void ab__drops_free(ab__drops_t *d);

/** A replay_chunk of (@p id, @p cid) was dropped: remember the stream (once). */
void ab__drops_add(ab__drops_t *d, zmq_msg_t *id, uint64_t cid);

/** The connection @p id is gone: forget its streams. */
void ab__drops_forget(ab__drops_t *d, zmq_msg_t *id);

/** Whether a broken stream belongs to @p id (cheap when there is none). */
bool ab__drops_peer(ab__drops_t *d, zmq_msg_t *id);

/** What the command thread does with a reader's message (ab__drops_filter). */
typedef enum ab__drop_act {
    AB__DROP_PASS,  /**< forward it */
    AB__DROP_CHUNK, /**< a later chunk of a broken stream: drop it, tell the reader (UNDELIVERED) */
    AB__DROP_END,   /**< the replay_end of a broken stream: send the drop's error instead */
} ab__drop_act_t;

/** What to do with a reader's message @p m to @p id; a broken stream is forgotten at its end. */
ab__drop_act_t ab__drops_filter(ab__drops_t *d, zmq_msg_t *id, const ab_msg_t *m);

/** Receive the rest of a message (after its identity) into @p f: at most @p max frames are
 *  kept (closed by the caller), the others dropped. @return the frames kept. */
size_t ab__drops_recv(void *from, zmq_msg_t *f, size_t max);

/** Send [a copy of @p id][@p f, moved] on the ROUTER @p router. @return 0, or the errno of
 *  the refused identity frame (nothing sent then; the frames stay the caller's). */
int ab__drops_send(void *router, zmq_msg_t *id, zmq_msg_t *f, size_t n);

#endif /* AB_BROKER_CMD_DROPS_H */

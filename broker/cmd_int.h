/*
 * cmd_int.h - the command thread's state, shared by cmd.c (requests) and
 * cmd_forward.c (the writer's and readers' answers on their way to the
 * clients). Internal to the broker; one thread owns a cmd_t.
 */
#ifndef AB_BROKER_CMD_INT_H
#define AB_BROKER_CMD_INT_H

#include "ab_common.h"
#include "cmd_drops.h"
#include "internal.h"
#include "workers.h"

#include <stdbool.h>
#include <stdint.h>

/* The most messages of one socket handled in one pass of the loop. */
#define FORWARD_BURST 256

typedef struct cmd {
    ab__shared_t *b;
    void *router;
    void *wsock;
    void **rsocks;
    uint32_t nreaders;
    ab_doc_t *doc;
    ab__workers_t *wk; /* workers and their action calls (workers.h) */
    bool stopping;
    bool writer_done;
    uint64_t wsent;        /* jobs sent to the writer (invariant 7) */
    uint64_t wsent_marked; /* wsent when the writer's socket was last marked (invariant 8) */
    bool rsent;            /* a job went to a reader since the last wait (invariant 8) */
    uint32_t readers_done;
    ab__access_t *acc;          /* this thread's reference to the access table; NULL = no keys */
    const ab__principal_t *who; /* the current request's principal (invariant 6) */
    ab__drops_t drops;          /* replay streams that lost a chunk (invariant 4) */
} cmd_t;

/* Answer @p id with error @p e (cid @p cid, version @p v); a refused send is logged. */
void ab__cmd_reply_error(cmd_t *c, zmq_msg_t *id, uint32_t v, uint64_t cid, const ab_error_t *e);

/* A job of @p kind for connection @p id, from request @p m (NULL: none); NULL when out of
 * memory. */
ab_job_t *ab__cmd_job_new(ab_job_kind_t kind, zmq_msg_t *id, const ab_msg_t *m);

/* Send @p job to the reader at @p sock, marking the readers used (cmd.c invariant 8).
 * @return 0 or -1 (still owned). */
int ab__cmd_send_reader(cmd_t *c, void *sock, ab_job_t *job);

/* Forward one message of worker socket @p from to the ROUTER (cmd_forward.c).
 * @return 0 none, 1 forwarded, 2 "stopped". */
int ab__cmd_forward(cmd_t *c, void *from, bool is_reader);

/* Forward up to FORWARD_BURST messages of @p sock (the writer's when @p is_writer), noting a
 * worker's stop. */
void ab__cmd_drain_worker(cmd_t *c, void *sock, bool is_writer);

#endif

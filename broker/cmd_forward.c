/*
 * cmd_forward.c - the command thread forwards the writer's and the readers'
 * answers to the clients on the ROUTER (cmd.c invariants 2 and 4): a
 * message the ROUTER refuses is reported back to its reader, and nothing of
 * a replay stream that lost a chunk reaches its client after the hole but
 * its end, as an error (cmd_drops.c).
 */
#include "cmd_int.h"

#include <errno.h>

/*
 * A reader's message to @p id was refused by the ROUTER with @p why
 * (invariant 4): the connection is gone, or a replay_chunk (header @p hdr)
 * was dropped at a full queue. Tell the reader, so it can stop counting
 * those bytes as unread.
 */
static void report_refused(cmd_t *c, void *reader, zmq_msg_t *id, zmq_msg_t *hdr, int why)
{
    ab_job_t *job = NULL;
    ab_msg_t m;
    bool chunk = false;
    if (why == EAGAIN)
        ab__reply_acquire(hdr); /* read below: the reader wrote it (job.c invariant 4) */
    if (why == EHOSTUNREACH) {
        ab__drops_forget(&c->drops, id);
        job = ab__cmd_job_new(AB_JOB_GONE, id, NULL);
    } else if (why == EAGAIN &&
               ab_msg_decode(c->doc, zmq_msg_data(hdr), zmq_msg_size(hdr), NULL, &m, NULL) ==
                   AB_OK &&
               m.op == AB_OP_REPLAY_CHUNK) {
        chunk = true;
        ab__drops_add(&c->drops, id, m.cid);
        job = ab__cmd_job_new(AB_JOB_UNDELIVERED, id, &m);
        if (job != NULL)
            job->bytes = (int64_t)m.u.replay_chunk.bytes;
    }
    if (job != NULL && ab__cmd_send_reader(c, reader, job) != 0)
        ab__job_free(job);
    if (chunk) /* after the job: a test waits for this line, then for the reader's answer */
        ab__log(AB_LOG_DEBUG, "dropped a replay_chunk (cid %llu): the connection's queue is full",
                (unsigned long long)m.cid);
}

/* A reader's message (its identity @p id received) to a connection with a stream that lost a
 * chunk: dropped, replaced by the drop's error, or forwarded (invariant 4, cmd_drops.c). */
static void forward_broken(cmd_t *c, void *from, zmq_msg_t *id)
{
    zmq_msg_t f[2];
    size_t n = ab__drops_recv(from, f, 2);
    ab_msg_t m;
    ab__drop_act_t act = AB__DROP_PASS;
    if (n > 0) {
        ab__reply_acquire(&f[0]); /* read here: the reader wrote it (job.c invariant 4) */
        if (ab_msg_decode(c->doc, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), NULL, &m, NULL) ==
            AB_OK)
            act = ab__drops_filter(&c->drops, id, &m);
    }
    if (act == AB__DROP_CHUNK && !c->stopping) {
        report_refused(c, from, id, &f[0], EAGAIN); /* the hole's later chunks: never sent */
    } else if (act == AB__DROP_END) {
        ab_error_t e = AB_ERROR_INIT;
        ab_error_set(&e, AB_OVERLOADED, "", "%s", AB__RB_DROPPED);
        ab__cmd_reply_error(c, id, m.v, m.cid, &e);
    } else if (act == AB__DROP_PASS && n > 0) {
        int why = ab__drops_send(c->router, id, f, n);
        if (why != 0 && !c->stopping)
            report_refused(c, from, id, &f[0], why);
    }
    for (size_t i = 0; i < n; i++)
        zmq_msg_close(&f[i]);
}

/* Forward one worker message to the ROUTER. @return 0 none, 1 forwarded, 2 "stopped". */
int ab__cmd_forward(cmd_t *c, void *from, bool is_reader)
{
    bool more = true;
    int refused = 0; /* errno of the refused identity frame: the ROUTER drops the rest */
    int n = 0;
    zmq_msg_t id;
    zmq_msg_init(&id);
    for (; more; n++) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, from, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(&part);
            break;
        }
        more = zmq_msg_more(&part);
        if (n == 0 && !more) {
            zmq_msg_close(&part);
            zmq_msg_close(&id);
            return 2;
        }
        if (n == 0 && is_reader)
            zmq_msg_copy(&id, &part);
        if (n == 0 && is_reader && ab__drops_peer(&c->drops, &id)) {
            zmq_msg_close(&part);
            forward_broken(c, from, &id);
            zmq_msg_close(&id);
            return 1;
        }
        if (n == 1 && refused != 0 && is_reader && !c->stopping) /* none after its stop job */
            report_refused(c, from, &id, &part, refused);
        if (refused == 0 && zmq_msg_send(&part, c->router, more ? ZMQ_SNDMORE : 0) < 0) {
            refused = zmq_errno();
            ab__log(AB_LOG_DEBUG, "dropped a reply: %s", zmq_strerror(refused));
        }
        zmq_msg_close(&part);
    }
    zmq_msg_close(&id);
    return n > 0 ? 1 : 0;
}

void ab__cmd_drain_worker(cmd_t *c, void *sock, bool is_writer)
{
    for (int i = 0; i < FORWARD_BURST; i++) {
        int r = ab__cmd_forward(c, sock, !is_writer);
        if (r == 0)
            return;
        if (r == 2 && is_writer)
            c->writer_done = true;
        else if (r == 2)
            c->readers_done++;
    }
}

/*
 * job.c - jobs and replies passed between the broker's threads.
 *
 * Invariants:
 *  1. A job is owned by exactly one thread: the sender gives it up when
 *     ab__job_send() succeeds, and whoever answers it frees it.
 *  2. Replies are [identity][header][frames...]; the identity is copied
 *     (zmq_msg_copy shares the buffer) so the job keeps its own, and extra
 *     frames are moved without copying their bytes.
 *  3. Inproc PAIR sockets have no high-water mark: every bound on what they
 *     carry is enforced by the sender (ingest queue, replay credits).
 *  4. Handing a job over is a release by the sender and an acquire by the
 *     receiver: everything the sender wrote before ab__job_send() is visible
 *     to the receiver after ab__job_recv(). libzmq's pipes already guarantee
 *     this, but libzmq is not built with ThreadSanitizer, which therefore
 *     cannot see it; under TSan the two calls say so explicitly with
 *     __tsan_release()/__tsan_acquire() on the job's address (no cost in
 *     other builds).
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__SANITIZE_THREAD__)
#define AB_JOB_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define AB_JOB_TSAN 1
#endif
#endif

#ifdef AB_JOB_TSAN
/* ThreadSanitizer's annotation interface (compiler-rt's tsan_interface.h). */
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define HANDOFF_RELEASE(job) __tsan_release(job)
#define HANDOFF_ACQUIRE(job) __tsan_acquire(job)
#else
#define HANDOFF_RELEASE(job) ((void)(job))
#define HANDOFF_ACQUIRE(job) ((void)(job))
#endif

void ab__job_free(ab_job_t *job)
{
    if (job == NULL)
        return;
    zmq_msg_close(&job->identity);
    for (uint32_t i = 0; job->frames != NULL && i < job->nframes; i++)
        zmq_msg_close(&job->frames[i]);
    ab_doc_destroy(&job->doc);
    free(job->frames);
    free(job->evs);
    free(job->infos);
    free(job->items);
    free(job->refs);
    free(job->cursors);
    free(job->pfx);
    free(job->strings);
    free(job->raw);
    free(job);
}

int ab__job_send(void *sock, ab_job_t *job)
{
    HANDOFF_RELEASE(job); /* before the pointer leaves: the receiver may run at once */
    return zmq_send(sock, &job, sizeof(job), ZMQ_DONTWAIT) == (int)sizeof(job) ? 0 : -1;
}

ab_job_t *ab__job_recv(void *sock, int flags)
{
    ab_job_t *job = NULL;
    int n = zmq_recv(sock, &job, sizeof(job), flags);
    if (n != (int)sizeof(job))
        return NULL;
    HANDOFF_ACQUIRE(job);
    return job;
}

size_t ab__discard_rest(void *sock, bool more)
{
    size_t n = 0;
    while (more) {
        zmq_msg_t f;
        zmq_msg_init(&f);
        if (zmq_msg_recv(&f, sock, 0) < 0) {
            zmq_msg_close(&f);
            break;
        }
        more = zmq_msg_more(&f);
        zmq_msg_close(&f);
        n++;
    }
    return n;
}

void ab__reply_acquire(zmq_msg_t *hdr)
{
    HANDOFF_ACQUIRE(zmq_msg_data(hdr));
}

int ab__reply_send(void *sock, zmq_msg_t *identity, const ab_buf_t *header, zmq_msg_t *extra,
                   size_t nextra)
{
    zmq_msg_t id, hdr;
    int rc = -1;
    zmq_msg_init(&id);
    if (zmq_msg_init_size(&hdr, header->len) != 0)
        goto close_id;
    if (header->len > 0)
        memcpy(zmq_msg_data(&hdr), header->data, header->len);
    HANDOFF_RELEASE(zmq_msg_data(&hdr)); /* the command thread may decode it (invariant 4) */
    if (zmq_msg_copy(&id, identity) != 0)
        goto close_hdr;
    if (zmq_msg_send(&id, sock, ZMQ_SNDMORE) < 0)
        goto close_hdr;
    if (zmq_msg_send(&hdr, sock, nextra > 0 ? ZMQ_SNDMORE : 0) < 0)
        goto close_hdr;
    rc = 0;
    for (size_t i = 0; i < nextra; i++) {
        if (rc == 0 && zmq_msg_send(&extra[i], sock, i + 1 < nextra ? ZMQ_SNDMORE : 0) < 0)
            rc = -1;
        if (rc != 0)
            zmq_msg_close(&extra[i]);
    }
    return rc;
close_hdr:
    zmq_msg_close(&hdr);
close_id:
    zmq_msg_close(&id);
    for (size_t i = 0; i < nextra; i++)
        zmq_msg_close(&extra[i]);
    return rc;
}

int ab__reply_msg(void *sock, zmq_msg_t *identity, const ab_msg_t *m)
{
    ab_buf_t buf = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    int rc = -1;
    if (ab_msg_encode(m, &buf, &err) != AB_OK) {
        char line[512];
        ab__log(AB_LOG_ERROR, "cannot encode %s reply: %s", ab_op_name(m->op),
                ab_error_format(&err, line, sizeof(line)));
        goto done;
    }
    rc = ab__reply_send(sock, identity, &buf, NULL, 0);
done:
    ab_buf_free(&buf);
    return rc;
}

int ab__reply_error(void *sock, zmq_msg_t *identity, uint32_t v, uint64_t cid, const ab_error_t *e)
{
    ab_error_t copy = *e;
    ab_buf_t buf = AB_BUF_INIT;
    copy.cid = cid;
    if (copy.code == AB_OK)
        copy.code = AB_INTERNAL;
    if (v != 0 && !ab_version_supported(v))
        v = 0;
    int rc = -1;
    if (ab_error_encode_reply(&copy, v, &buf) == AB_OK)
        rc = ab__reply_send(sock, identity, &buf, NULL, 0);
    else
        ab__log(AB_LOG_ERROR, "cannot encode an error reply (code %d)", (int)copy.code);
    ab_buf_free(&buf);
    return rc;
}

int64_t ab__now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void *ab__pair_socket(void *zctx, const char *ep, bool bind)
{
    void *s = zmq_socket(zctx, ZMQ_PAIR);
    if (s == NULL)
        return NULL;
    int zero = 0;
    zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof(zero));
    zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof(zero));
    if ((bind ? zmq_bind(s, ep) : zmq_connect(s, ep)) != 0) {
        zmq_close(s);
        return NULL;
    }
    return s;
}

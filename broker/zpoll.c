/*
 * zpoll.c - wait on ZeroMQ sockets, asking only those that may have input
 * (zpoll.h).
 *
 * Invariants:
 *  1. A socket is clean only after its ZMQ_EVENTS said "no input" and
 *     nothing touched it since: the caller's sends and receives make it
 *     dirty (ab__zpoll_touch), and so does input found at a wait, which the
 *     caller reads next (and may leave some of, FORWARD_BURST).
 *  2. Every dirty socket is asked before the thread sleeps; a clean one is
 *     asked only when its descriptor turned readable. ZMQ_EVENTS runs the
 *     socket's pending commands and so drains that descriptor: the next
 *     message into a drained socket signals it again (ZMQ_FD's contract).
 *  3. When input waits at once the descriptors are still polled (without
 *     waiting), so a busy socket does not hide the others' input.
 */
#include "zpoll.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <zmq.h>

struct ab__zpoll {
    ab__zpoll_item_t *items;
    size_t n;
    struct pollfd *fds;
    bool *dirty;
};

ab__zpoll_t *ab__zpoll_new(ab__zpoll_item_t *items, size_t n)
{
    ab__zpoll_t *zp = calloc(1, sizeof(*zp));
    if (zp == NULL)
        return NULL;
    zp->items = items;
    zp->n = n;
    zp->fds = calloc(n ? n : 1, sizeof(*zp->fds));
    zp->dirty = calloc(n ? n : 1, sizeof(*zp->dirty));
    if (zp->fds == NULL || zp->dirty == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        int fd = items[i].fd;
        size_t len = sizeof(fd);
        if (items[i].socket != NULL && zmq_getsockopt(items[i].socket, ZMQ_FD, &fd, &len) != 0)
            goto fail;
        zp->fds[i] = (struct pollfd){.fd = fd, .events = POLLIN};
        zp->dirty[i] = items[i].socket != NULL;
    }
    return zp;
fail:
    ab__zpoll_destroy(&zp);
    return NULL;
}

void ab__zpoll_destroy(ab__zpoll_t **zpp)
{
    ab__zpoll_t *zp = zpp ? *zpp : NULL;
    if (zp == NULL)
        return;
    free(zp->fds);
    free(zp->dirty);
    free(zp);
    *zpp = NULL;
}

void ab__zpoll_touch(ab__zpoll_t *zp, size_t i)
{
    if (i < zp->n)
        zp->dirty[i] = true;
}

/* Ask socket entry @p i (invariant 2). @return 1 input, 0 none, -1 failed (errno set). */
static int ask(ab__zpoll_t *zp, size_t i)
{
    int ev = 0;
    size_t len = sizeof(ev);
    if (zmq_getsockopt(zp->items[i].socket, ZMQ_EVENTS, &ev, &len) != 0)
        return -1;
    bool in = (ev & ZMQ_POLLIN) != 0;
    zp->items[i].ready = in;
    zp->dirty[i] = in; /* invariant 1: input found is read next */
    return in;
}

/* The entries whose descriptors fired and that are not ready yet. @return how many became
 * ready, or -1 (errno set). */
static int fired(ab__zpoll_t *zp)
{
    int ready = 0;
    for (size_t i = 0; i < zp->n; i++) {
        if (!(zp->fds[i].revents & (POLLIN | POLLERR | POLLHUP)) || zp->items[i].ready)
            continue;
        int r = 1;
        if (zp->items[i].socket != NULL)
            r = ask(zp, i);
        else
            zp->items[i].ready = true;
        if (r < 0)
            return -1;
        ready += r;
    }
    return ready;
}

int ab__zpoll_wait(ab__zpoll_t *zp, long timeout_ms)
{
    int ready = 0;
    for (size_t i = 0; i < zp->n; i++)
        zp->items[i].ready = false;
    for (size_t i = 0; i < zp->n; i++) {
        if (!zp->dirty[i])
            continue;
        int r = ask(zp, i);
        if (r < 0)
            return -1;
        ready += r;
    }
    int wait = ready > 0              ? 0
               : timeout_ms < 0       ? -1
               : timeout_ms > INT_MAX ? INT_MAX
                                      : (int)timeout_ms;
    int rc = poll(zp->fds, (nfds_t)zp->n, wait);
    if (rc < 0)
        return ready > 0 ? ready : -1; /* errno from poll (EINTR): the caller asks again */
    if (rc == 0)
        return ready;
    int more = fired(zp);
    return more < 0 ? -1 : ready + more;
}

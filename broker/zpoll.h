/*
 * zpoll.h - wait on a few ZeroMQ sockets and plain descriptors, asking a
 * socket for its events only when it may have some (internal).
 *
 * zmq_poll() asks every socket for ZMQ_EVENTS before it sleeps and again
 * after it wakes; in libzmq 4.3 each ask of an idle socket is a poll(2) of
 * its mailbox and a getpid(2). The command thread waits on five sockets and
 * uses one or two of them per request, so most of those asks are wasted on a
 * lone publish (docs/PERFORMANCE.md "The command thread's wait").
 *
 * The rule it relies on (libzmq's ZMQ_FD contract): a socket whose
 * ZMQ_EVENTS said "no input" and that this thread has neither sent on nor
 * received from since gets input only after its descriptor turns readable.
 * So a socket is asked only when it is *dirty* (the caller used it, or it
 * had input at the last wait) or its descriptor fired.
 *
 * Not thread-safe: one thread owns the set and its sockets.
 */
#ifndef AB_BROKER_ZPOLL_H
#define AB_BROKER_ZPOLL_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ab__zpoll ab__zpoll_t;

/** One entry: a ZeroMQ socket, or (socket NULL) a plain descriptor. */
typedef struct ab__zpoll_item {
    void *socket;
    int fd;
    bool ready; /**< set by ab__zpoll_wait(): input waits here */
} ab__zpoll_item_t;

/**
 * A set over @p items (@p n entries, kept by the caller and not moved while
 * the set lives). Every socket starts dirty. @return NULL when out of
 * memory or a socket's ZMQ_FD cannot be read.
 */
ab__zpoll_t *ab__zpoll_new(ab__zpoll_item_t *items, size_t n);
void ab__zpoll_destroy(ab__zpoll_t **zp);

/** The caller sent on or received from entry @p i: ask it at the next wait. */
void ab__zpoll_touch(ab__zpoll_t *zp, size_t i);

/**
 * Set each entry's `ready` and @return how many are, waiting up to
 * @p timeout_ms (-1: no limit) when none is at once; 0 when the time ran out
 * (or a descriptor fired for ZeroMQ's own commands only), -1 with errno set
 * (EINTR) when poll(2) failed. An entry found ready stays dirty for the next
 * wait.
 */
int ab__zpoll_wait(ab__zpoll_t *zp, long timeout_ms);

#endif

/*
 * notify.c - telling a service manager the broker is ready: systemd's
 * readiness protocol (a unit of Type=notify), written here rather than
 * linking libsystemd for one datagram.
 *
 * The protocol (sd_notify(3)): when $NOTIFY_SOCKET names a unix datagram
 * socket (a path, or "@name" for the abstract namespace), send it the text
 * "READY=1" (and "STATUS=..."). Without the variable this does nothing.
 *
 * Invariants:
 *  1. It never blocks and never fails the broker: a missing or refusing
 *     socket is logged at debug and forgotten.
 *  2. It runs after the ready line is printed, so a manager that waits for
 *     READY=1 starts dependants only once both endpoints are bound.
 */
#include "internal.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

void ab__notify_ready(const char *status)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (path == NULL || path[0] == '\0')
        return;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n >= sizeof sa.sun_path || (path[0] != '/' && path[0] != '@')) {
        ab__log(AB_LOG_DEBUG, "NOTIFY_SOCKET '%s' is not a socket path: readiness not sent", path);
        return;
    }
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* the abstract namespace */
    char msg[1024];
    int len = snprintf(msg, sizeof msg, "READY=1\nSTATUS=%s\nMAINPID=%ld", status, (long)getpid());
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    if (fd < 0 || sendto(fd, msg, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT,
                         (const struct sockaddr *)&sa, salen) < 0)
        ab__log(AB_LOG_DEBUG, "readiness not sent to %s: %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
}

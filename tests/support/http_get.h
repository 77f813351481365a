/*
 * http_get.h - one plain HTTP/1.0 exchange with a broker's --metrics listener
 * on 127.0.0.1 (header-only), and a counter read out of its Prometheus text.
 */
#ifndef AB_TESTS_HTTP_GET_H
#define AB_TESTS_HTTP_GET_H

#include "testutil.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Send @p request to 127.0.0.1:@p port and read the whole answer into @p out. */
static inline size_t it_http(int port, const char *request, char *out, size_t size)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    size_t len = strlen(request);
    assert_int_equal(write(fd, request, len), (ssize_t)len);
    size_t n = 0;
    ssize_t k;
    while (n + 1 < size && (k = read(fd, out + n, size - n - 1)) > 0)
        n += (size_t)k;
    out[n] = '\0';
    close(fd);
    return n;
}

/* The value of the unlabelled sample @p name in /metrics on @p port (fails when absent). */
static inline uint64_t it_metric(int port, const char *name)
{
    static char out[16384];
    char key[128];
    it_http(port, "GET /metrics HTTP/1.0\r\n\r\n", out, sizeof out);
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = strstr(out, key);
    if (at == NULL)
        fail_msg("no %s in /metrics", name);
    return strtoull(at + strlen(key), NULL, 10);
}

#endif /* AB_TESTS_HTTP_GET_H */

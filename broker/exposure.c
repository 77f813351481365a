/*
 * exposure.c - the safe default of the broker: without `keys` it binds only
 * endpoints that local processes alone can reach, unless the operator says
 * `insecure` (docs/OPERATIONS.md "Securing a bus across machines").
 *
 * Invariants:
 *  1. The check runs on the configuration before anything is bound, both
 *     when `agentbus broker` parses its flags and in ab_broker_new(), so an
 *     embedded broker gets the same rule.
 *  2. Only what is certainly local passes: ipc://, inproc://, and tcp:// on
 *     a literal loopback address or `localhost`. A wildcard, an interface
 *     name, a host name, a source address (`;`) and every other transport
 *     count as reachable from elsewhere.
 *  3. `insecure` never passes silently: each endpoint it lets through is
 *     logged as a warning when the broker starts.
 */
#include "exposure.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* Whether the host text @p h[0..n) is a loopback address or localhost. */
static bool host_is_loopback(const char *h, size_t n)
{
    char host[INET6_ADDRSTRLEN + 1];
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']')
        h++, n -= 2;
    if (n == 0 || n >= sizeof host)
        return false;
    memcpy(host, h, n);
    host[n] = '\0';
    if (strcasecmp(host, "localhost") == 0)
        return true;
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return ((const unsigned char *)&a4)[0] == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return false;
}

bool ab__endpoint_is_local(const char *endpoint)
{
    if (strncmp(endpoint, "ipc://", 6) == 0 || strncmp(endpoint, "inproc://", 9) == 0)
        return true;
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return false;
    const char *addr = endpoint + 6;
    if (strchr(addr, ';') != NULL)
        return false;
    const char *colon = strrchr(addr, ':'); /* the port follows the last ':' */
    if (colon == NULL)
        return false;
    size_t n = (size_t)(colon - addr);
    if (addr[0] == '[' && (n < 2 || addr[n - 1] != ']'))
        return false;
    return host_is_loopback(addr, n);
}

static ab_status_t check_keys_dir(const char *dir, ab_error_t *err)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return ab_error_set(err, AB_INVALID_CONFIG, "keys", "keys: %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return ab_error_set(err, AB_INVALID_CONFIG, "keys", "keys: %s is not a directory", dir);
    return AB_OK;
}

static ab_status_t check_endpoint(const ab_broker_config_t *cfg, const char *key, const char *ep,
                                  bool at_start, ab_error_t *err)
{
    if (ab__endpoint_is_local(ep))
        return AB_OK;
    if (!cfg->insecure)
        return ab_error_set(err, AB_INVALID_ARGUMENT, key,
                            "%s: %s is not loopback: use --keys DIR (authenticated CURVE) or "
                            "--insecure (anyone who can reach the port can read and write every "
                            "thread)",
                            key, ep);
    if (at_start)
        ab__log(AB_LOG_WARN,
                "insecure: %s endpoint %s is not loopback and the broker has no keys: anyone who "
                "can reach it can read and write every thread",
                key, ep);
    return AB_OK;
}

ab_status_t ab__broker_check_exposure(const ab_broker_config_t *cfg, bool at_start, ab_error_t *err)
{
    if (cfg->keys_dir[0] != '\0') {
        return check_keys_dir(cfg->keys_dir, err); /* CURVE: any endpoint (broker/zap.c) */
    }
    if (cfg->access_file[0] != '\0')
        return ab_error_set(err, AB_INVALID_CONFIG, "access",
                            "access: an access file needs --keys DIR (the keys it admits are "
                            "authenticated with CURVE)");
    ab_status_t st = check_endpoint(cfg, "cmd", cfg->cmd_endpoint, at_start, err);
    if (st == AB_OK)
        st = check_endpoint(cfg, "events", cfg->events_endpoint, at_start, err);
    return st;
}

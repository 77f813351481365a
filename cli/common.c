/*
 * common.c - helpers shared by the client subcommands.
 */
#include "ab_json_out.h"
#include "agentbus/ids.h"
#include "agentbus/json.h"
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

/* "host:port" and ":port" (no "://") as tcp:// endpoints, the host 127.0.0.1 when omitted. */
static const char *expand(const char *ep)
{
    static char buf[300];
    const char *colon = strrchr(ep, ':');
    if (strstr(ep, "://") != NULL || colon == NULL || colon[1] == '\0' ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1))
        return ep;
    snprintf(buf, sizeof buf, "tcp://%.*s%s", (int)(colon - ep), ep,
             colon == ep ? "127.0.0.1" : "");
    size_t n = strlen(buf);
    snprintf(buf + n, sizeof buf - n, "%s", colon);
    return buf;
}

const char *cli_broker_endpoint(const char *flag)
{
    if (flag && *flag)
        return expand(flag);
    const char *env = getenv("AGENTBUS_BROKER");
    if (env && *env)
        return expand(env);
    return AB_DEFAULT_BROKER;
}

/* 0 when ZeroMQ parses @p ep as an endpoint to connect to (a connect that sends nothing and
 * waits for nothing), else its errno. */
static int endpoint_errno(const char *ep)
{
    void *ctx = zmq_ctx_new();
    void *s = ctx ? zmq_socket(ctx, ZMQ_DEALER) : NULL;
    int linger = 0, e = s ? 0 : zmq_errno();
    if (s &&
        (zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger) != 0 || zmq_connect(s, ep) != 0))
        e = zmq_errno();
    if (s)
        zmq_close(s);
    if (ctx)
        zmq_ctx_term(ctx);
    return e;
}

int cli_check_endpoint(const char *cmd, const char *what, const char *ep)
{
    int e = endpoint_errno(ep);
    return e ? cli_usage_error(cmd, "bad %s '%s': %s", what, ep, zmq_strerror(e)) : 0;
}

int cli_endpoint(const char *cmd, const char *flag, const char **out)
{
    const char *env = getenv("AGENTBUS_BROKER");
    const char *what = flag && *flag ? "--broker" : env && *env ? "$AGENTBUS_BROKER" : "endpoint";
    *out = cli_broker_endpoint(flag);
    return cli_check_endpoint(cmd, what, *out);
}

bool cli_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !*s || !end || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool cli_parse_u64(const char *s, uint64_t *out)
{
    char *end = NULL;
    if (!s || !*s || *s == '-')
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || !end || *end)
        return false;
    *out = v;
    return true;
}

bool cli_parse_seconds(const char *s, double hi, double *out)
{
    char *end = NULL;
    if (!s || !((*s >= '0' && *s <= '9') || *s == '.') || strspn(s, "0123456789.eE+-") != strlen(s))
        return false;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || !end || *end || !(v > 0) || !(v <= hi))
        return false;
    *out = v;
    return true;
}

int cli_check_id(const char *cmd, const char *what, const char *id)
{
    ab_error_t err = AB_ERROR_INIT;
    if (ab_id_check(id, strlen(id), 0, what, &err) != AB_OK)
        return cli_usage_error(cmd, "%s '%s': %s", what, id, err.message);
    return 0;
}

char **cli_argv;

/* The option a "--name=VALUE" named when it takes no value (cli_getopt), else NULL. */
static const char *no_value_opt;

int cli_bad_option(const char *cmd, int c)
{
    const char *arg = cli_argv && optind > 0 ? cli_argv[optind - 1] : "";
    if (c == '?' && no_value_opt)
        return cli_usage_error(cmd, "option '--%s' takes no value", no_value_opt);
    if (c == ':')
        return cli_usage_error(cmd, "option '%s' needs a value", arg);
    if (optopt && arg[0] == '-' && arg[1] != '-')
        return cli_usage_error(cmd, "unknown option '-%c'", optopt);
    return cli_usage_error(cmd, "unknown option '%.*s'", (int)strcspn(arg, "="), arg);
}

/* The long option of @p lo that "--name=VALUE" @p arg names (as getopt_long matches: the
 * name or a prefix of it) when it takes no value, else NULL. */
static const char *no_value_of(const char *arg, const struct option *lo)
{
    const char *eq = strchr(arg, '=');
    if (strncmp(arg, "--", 2) != 0 || eq == NULL || eq == arg + 2)
        return NULL;
    size_t n = (size_t)(eq - arg - 2);
    for (; lo->name; lo++)
        if (lo->has_arg == no_argument && strncmp(lo->name, arg + 2, n) == 0)
            return lo->name;
    return NULL;
}

int cli_getopt(int argc, char **argv, const char *optstring, const struct option *lo, int *idx)
{
    int c = getopt_long(argc, argv, optstring, lo, idx);
    no_value_opt = c == '?' ? no_value_of(argv[optind - 1], lo) : NULL;
    if (c == -1 || c == '?' || c == ':' || optarg == NULL || optind < 2)
        return c;
    if (optarg == argv[optind - 1] && strncmp(optarg, "--", 2) == 0) {
        optind--; /* cli_bad_option names argv[optind - 1]: the option */
        return ':';
    }
    return c;
}

void cli_json_str(FILE *out, const char *s)
{
    ab__json_str_out(out, s);
}

/* A wire field ("event/messageId", "seq") as a JSON Pointer: an event's own
 * fields relative to the event (the line the user gave), the rest from the
 * envelope's root. */
static void field_pointer(const char *field, char *buf, size_t size)
{
    if (field[0] == '/' || field[0] == '\0')
        snprintf(buf, size, "%s", field);
    else if (strncmp(field, "event/", 6) == 0)
        snprintf(buf, size, "%s", field + 5);
    else if (strcmp(field, "event") == 0)
        snprintf(buf, size, "/");
    else
        snprintf(buf, size, "/%s", field);
}

void cli_json_error(FILE *out, const ab_error_t *err)
{
    char ptr[AB_ERROR_FIELD_MAX + 2];
    field_pointer(err->field, ptr, sizeof(ptr));
    fprintf(out, "{\"code\":");
    cli_json_str(out, ab_status_name(err->code));
    fprintf(out, ",\"message\":");
    cli_json_str(out, err->message);
    fprintf(out, ",\"pointer\":");
    cli_json_str(out, ptr);
    fprintf(out, "}");
}

const char *cli_error_text(const ab_error_t *err, char *buf, size_t size)
{
    char ptr[AB_ERROR_FIELD_MAX + 2];
    field_pointer(err->field, ptr, sizeof(ptr));
    if (ptr[0])
        snprintf(buf, size, "%s: %s (at %s)", ab_status_name(err->code), err->message, ptr);
    else
        snprintf(buf, size, "%s: %s", ab_status_name(err->code), err->message);
    return buf;
}

bool cli_stdout_gone(void)
{
    struct pollfd p = {.fd = STDOUT_FILENO, .events = POLLOUT};
    if (ferror(stdout))
        return true;
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0;
}

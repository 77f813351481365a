/*
 * test_cli_args.c - the commands' arguments, checked before anything is sent:
 * each bad argument is a usage error (exit 2) with its own message, the same
 * form in every command, and no connection is tried for it (the broker named
 * is a loopback port nobody listens on, so a command that connected first
 * would answer exit 1 instead).
 */
#include "testutil.h"

#include "broker_proc.h"
#include "cli_run.h"

typedef struct usage_case {
    const char *args; /* %s: the unreachable endpoint, at most once */
    int rc;
    const char *says; /* in the output, or NULL */
} usage_case_t;

/* Run each case against the endpoint @p ep: its exit status and its message. */
static void run_cases(const usage_case_t *cases, size_t n, const char *ep)
{
    char out[OUT_MAX], args[600];
    for (size_t i = 0; i < n; i++) {
        snprintf(args, sizeof args, cases[i].args, ep);
        int rc = it_run_cli(out, "%s", args);
        if (rc != cases[i].rc || (cases[i].says && strstr(out, cases[i].says) == NULL))
            fail_msg("agentbus %s: exit %d (want %d, saying \"%s\"): %s", args, rc, cases[i].rc,
                     cases[i].says ? cases[i].says : "", out);
    }
}

/* A loopback endpoint nobody listens on. */
static const char *nowhere(void)
{
    static char ep[64];
    int port = bp_free_port();
    assert_true(port > 0);
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    return ep;
}

#define NCASES(a) (sizeof(a) / sizeof((a)[0]))

/* tail --for: a decimal number of seconds in (0, 30 days], nothing else. */
static void test_tail_for(void **state)
{
    (void)state;
    static const usage_case_t cases[] = {
        {"tail --broker %s --for 1e16", 2, "--for takes seconds in (0, 2592000]"},
        {"tail --broker %s --for inf", 2, "--for takes seconds in (0, 2592000]"},
        {"tail --broker %s --for 2abc", 2, "not '2abc'"},
        {"tail --broker %s --for 0", 2, "--for takes seconds"},
        {"tail --broker %s --for -1", 2, "--for takes seconds"},
        {"tail --broker %s --for 0x10", 2, "--for takes seconds"},
        {"tail --broker %s --for ' 1'", 2, "--for takes seconds"},
        {"tail --broker %s --for 2592001", 2, "--for takes seconds"},
        {"tail --broker %s --for nan", 2, "--for takes seconds"},
        {"tail --broker %s --for 0.2", 1, NULL}, /* accepted: then nothing answers */
        {"bench --seconds nan", 2, "--seconds takes a number in (0, 600]"},
    };
    run_cases(cases, NCASES(cases), nowhere());
}

/* A loopback TCP port that accepts connections and never says a word (no ZMTP). */
static int silent_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 8), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* invoke --timeout bounds connecting too: the error names the bound given, not 5000 ms. */
static void test_invoke_timeout_bounds_connecting(void **state)
{
    (void)state;
    int port = 0, fd = silent_listener(&port);
    char out[OUT_MAX];
    assert_int_equal(it_run_cli(out, "invoke --broker :%d --timeout 1500 a b", port), 1);
    assert_non_null(strstr(out, "in 1500 ms"));
    close(fd);
}

/* publish: a pretty-printed or non-JSON first line is reported as such (exit 1) before the
 * run's ids are asked for; --json prints its object for an empty input; a FILE that cannot
 * be read is a usage error. Nothing connects. */
static void test_publish_input_errors(void **state)
{
    (void)state;
    char pretty[64], junk[64], empty[64], a[4][200];
    it_temp_file(pretty, sizeof pretty, "{\n  \"type\": \"RUN_STARTED\"\n}\n");
    it_temp_file(junk, sizeof junk, "hello\n");
    it_temp_file(empty, sizeof empty, "\n\n");
    snprintf(a[0], sizeof a[0], "publish --broker %%s %s", pretty);
    snprintf(a[1], sizeof a[1], "publish --broker %%s %s", junk);
    snprintf(a[2], sizeof a[2], "publish --broker %%s --json %s", pretty);
    snprintf(a[3], sizeof a[3], "publish --broker %%s --json %s", empty);
    const usage_case_t cases[] = {
        {a[0], 1, "line 1: invalid_event: not JSON Lines"},
        {a[1], 1, "line 1: invalid_event: invalid JSON"},
        {a[2], 1, "\"ok\":false"},
        {a[3], 1, "{\"ok\":false,\"thread\":\"\",\"run\":\"\",\"events\":0,"},
        {a[3], 1, "\"error\":{\"code\":\"invalid_argument\",\"message\":\"no events in the input"},
        {"publish --broker %s --json /tmp", 2, "cannot read /tmp"},
    };
    run_cases(cases, NCASES(cases), nowhere());
    unlink(pretty);
    unlink(junk);
    unlink(empty);
}

/* approve/deny --input: a missing file or one that is not a JSON object is a usage error
 * found before anything is sent. */
static void test_approve_input_first(void **state)
{
    (void)state;
    char arr[64];
    it_temp_file(arr, sizeof arr, "[1]\n");
    char a[200], b[200], d[200];
    snprintf(a, sizeof a, "approve --broker %%s t r --input %s", "/nonexistent/in.json");
    snprintf(b, sizeof b, "deny --broker %%s t r --input %s", arr);
    snprintf(d, sizeof d, "approve --broker %%s t r --input %s", arr);
    const usage_case_t cases[] = {
        {a, 2, "agentbus approve: --input /nonexistent/in.json: cannot open it"},
        {b, 2, "a RunAgentInput is a JSON object"},
        {d, 2, "a RunAgentInput is a JSON object"},
    };
    run_cases(cases, NCASES(cases), nowhere());
    unlink(arr);
}

/* broker and every other command: an unknown flag, or one whose value is missing (none
 * follows, or the next argument is another flag), is named itself; nothing starts. The
 * broker cases end in a bad --readers so that a parser that took the next flag for a value
 * still stops there (and starts no broker). */
static void test_missing_values(void **state)
{
    (void)state;
    static const usage_case_t cases[] = {
        {"broker --readers --data /tmp/x --readers 0", 2, "option '--readers' needs a value"},
        {"broker --data --insecure --readers 0", 2, "option '--data' needs a value"},
        {"broker --insecure --data", 2, "option '--data' needs a value"},
        {"broker --bogus 3", 2, "unknown option '--bogus'"},
        {"broker --bogus=3", 2, "unknown option '--bogus'"},
        {"broker stray --bogus", 2, "unexpected argument 'stray'"},
        {"broker --readers 0", 2, "readers: '0' is not an integer in 1..64"},
        {"tail --broker %s --thread --json", 2, "agentbus tail: option '--thread' needs a value"},
        {"publish --thread --run r --broker %s", 2, "option '--thread' needs a value"},
        {"runs --broker --json", 2, "agentbus runs: option '--broker' needs a value"},
        {"run a --input --json", 2, "agentbus run: option '--input' needs a value"},
    };
    run_cases(cases, NCASES(cases), nowhere());
}

/* status --watch [SECONDS]: a bad value is named, spaced or attached; --json takes none. */
static void test_status_watch(void **state)
{
    (void)state;
    static const usage_case_t cases[] = {
        {"status --broker %s --watch 0", 2, "--watch wants 1..3600 seconds, got '0'"},
        {"status --broker %s --watch 3601", 2, "--watch wants 1..3600 seconds, got '3601'"},
        {"status --broker %s --watch abc", 2, "--watch wants 1..3600 seconds, got 'abc'"},
        {"status --broker %s --watch=0", 2, "--watch wants 1..3600 seconds, got '0'"},
        {"status --broker %s --json=1", 2, "option '--json' takes no value"},
        {"status --broker %s --bogus=1", 2, "unknown option '--bogus'\n"},
        {"status --broker %s --watch 2 --count 1", 1, NULL}, /* accepted: nothing answers */
    };
    run_cases(cases, NCASES(cases), nowhere());
}

/* whoami's timeout error says the hint once (the connection's message holds it). */
static void test_whoami_hint_once(void **state)
{
    (void)state;
    int port = 0, fd = silent_listener(&port);
    char out[OUT_MAX];
    assert_int_equal(it_run_cli(out, "whoami --broker :%d --timeout 300", port), 1);
    const char *hint = strstr(out, "never answers");
    assert_non_null(hint);
    assert_null(strstr(hint + 1, "never answers"));
    close(fd);
}

/* conformance ENDPOINT: :PORT is expanded as in every command; a malformed one is a usage
 * error, not a failed check. */
static void test_conformance_endpoint(void **state)
{
    (void)state;
    const char *ep = nowhere();
    char port[80], says[96];
    snprintf(port, sizeof port, "conformance --only version %s", strrchr(ep, ':'));
    snprintf(says, sizeof says, "FAIL version: hello to %s: ", ep);
    const usage_case_t cases[] = {
        {"conformance foo", 2, "agentbus conformance: bad ENDPOINT 'foo': "},
        {"conformance tcp://127.0.0.1:abc", 2, "bad ENDPOINT 'tcp://127.0.0.1:abc'"},
        {"conformance http://x:1", 2, "bad ENDPOINT 'http://x:1'"},
        {"conformance ''", 2, "expected one ENDPOINT"},
        {port, 1, says},
    };
    run_cases(cases, NCASES(cases), ep);
}

/* An empty, over-long or control-character id is a usage error in every command, found before
 * connecting (and before any table header); threads --after too, a cursor that is an id. */
static void test_ids_checked_first(void **state)
{
    (void)state;
    char cases_args[20][600];
    static const struct {
        const char *args, *says;
    } ids[] = {
        {"snapshot --broker %s ''", "THREAD '': THREAD id is empty"},
        {"runs --broker %s --thread ''", "--thread id is empty"},
        {"replay --broker %s --thread ''", "--thread id is empty"},
        {"replay --broker %s --thread t --run LONG", "--run 'xxxx"},
        {"tail --broker %s --thread LONG", "--thread 'xxxx"},
        {"tail --broker %s --thread t --run ''", "--run id is empty"},
        {"invoke --broker %s '' act", "AGENT '': AGENT id is empty"},
        {"invoke --broker %s agent act --thread ''", "--thread id is empty"},
        {"threads --broker %s --prefix ''", "--prefix id is empty"},
        {"threads --broker %s --prefix LONG", "--prefix 'xxxx"},
        {"threads --broker %s --after ''", "--after '': --after id is empty"},
        {"threads --broker %s --after LONG", "--after 'xxxx"},
        {"threads --broker %s --after \"$(printf 'a\\001b')\"",
         "--after id contains a control character at byte 1"},
        {"run --broker %s ''", "AGENT id is empty"},
        {"cancel --broker %s t ''", "RUN id is empty"},
        {"abandon --broker %s '' r", "THREAD id is empty"},
        {"approve --broker %s t LONG", "RUN 'xxxx"},
    };
    char lng[300];
    memset(lng, 'x', 257);
    lng[257] = '\0';
    usage_case_t cases[20];
    for (size_t i = 0; i < NCASES(ids); i++) {
        const char *at = strstr(ids[i].args, "LONG");
        if (at)
            snprintf(cases_args[i], sizeof cases_args[i], "%.*s%s%s", (int)(at - ids[i].args),
                     ids[i].args, lng, at + 4);
        else
            snprintf(cases_args[i], sizeof cases_args[i], "%s", ids[i].args);
        cases[i] = (usage_case_t){cases_args[i], 2, ids[i].says};
    }
    run_cases(cases, NCASES(ids), nowhere());
}

/* Run `timeout -s KILL 60 sh -c LINE` (stdout and stderr together into @p out, OUT_MAX bytes):
 * for what it_run_cli has no room for - an environment variable, an input, or a bound on a
 * command that would never end without the fix under test. @return its exit status. */
static int run_bounded(char *out, const char *line)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "timeout -s KILL 60 sh -c \"%s\" 2>&1", line);
    return it_capture(cmd, out, OUT_MAX, line);
}

/* A --broker endpoint ZeroMQ cannot parse is a usage error in every command (exit 2 naming it,
 * before anything is read or connected), as conformance's ENDPOINT is; $AGENTBUS_BROKER too.
 * The gateway, which would serve for ever on such an endpoint, is run bounded. */
static void test_bad_broker_endpoint(void **state)
{
    (void)state;
    static const char *const cmds[] = {
        "runs",
        "runs --requests",
        "threads",
        "status",
        "workers",
        "invoke a b",
        "whoami",
        "snapshot t",
        "replay --all",
        "tail",
        "run a",
        "cancel t r",
        "abandon t r",
        "approve t r",
        "deny t r",
        "demo",
        "publish /nonexistent",
    };
    static const char *const eps[] = {"foo", "tcp://127.0.0.1:abc", "http://x:1"};
    char args[200], says[96], out[OUT_MAX];
    for (size_t i = 0; i < NCASES(cmds); i++) {
        for (size_t k = 0; k < NCASES(eps); k++) {
            snprintf(args, sizeof args, "%s --broker '%s'", cmds[i], eps[k]);
            snprintf(says, sizeof says, ": bad --broker '%s': ", eps[k]);
            run_cases(&(usage_case_t){args, 2, says}, 1, "");
        }
    }
    static const usage_case_t bench[] = {
        {"bench ingest --broker foo", 2, "agentbus bench: bad --broker 'foo': Invalid argument"},
        {"bench dispatch --broker %s --workers-broker http://x:1", 2,
         "agentbus bench: bad --workers-broker 'http://x:1': Protocol not supported"},
        /* HOST:PORT is an endpoint here as in every command: taken, then the next rule */
        {"bench proto --broker 127.0.0.1:1", 2, "are for the bus benchmarks"},
    };
    run_cases(bench, NCASES(bench), nowhere());
    snprintf(args, sizeof args, "%s gateway --listen 127.0.0.1:0 --broker foo", AB_AGENTBUS_BIN);
    assert_int_equal(run_bounded(out, args), 2);
    assert_non_null(strstr(out, "agentbus gateway: bad --broker 'foo': Invalid argument"));
    snprintf(args, sizeof args, "AGENTBUS_BROKER='tcp://127.0.0.1:abc' %s status", AB_AGENTBUS_BIN);
    assert_int_equal(run_bounded(out, args), 2);
    assert_non_null(strstr(out, "agentbus status: bad $AGENTBUS_BROKER 'tcp://127.0.0.1:abc'"));
}

/* publish reading an input without a newline (`< /dev/zero`) stops once the line passes the
 * limit, naming the line and the limit, instead of reading it for ever; nothing is sent (the
 * whole input is checked first). */
static void test_publish_endless_line(void **state)
{
    (void)state;
    char line[600], out[OUT_MAX];
    snprintf(line, sizeof line, "env -u AGENTBUS_BROKER %s publish --broker %s --json </dev/zero",
             AB_AGENTBUS_BIN, nowhere());
    assert_int_equal(run_bounded(out, line), 1);
    assert_non_null(strstr(out, "agentbus publish: line 1: too_large: line longer than 4194304 "
                                "bytes; nothing was published\n"));
    assert_non_null(strstr(out, "\"events\":0,"));
    assert_non_null(strstr(out, "\"line\":1,\"error\":{\"code\":\"too_large\""));
}

/* The small ones: the unexpected argument is named; bench lists every benchmark; the help of
 * abandon and cancel lists their options. */
static void test_messages_and_help(void **state)
{
    (void)state;
    static const usage_case_t cases[] = {
        {"tail --broker %s extra", 2, "agentbus tail: unexpected argument 'extra'"},
        {"workers --broker %s extra", 2, "agentbus workers: unexpected argument 'extra'"},
        {"bench", 2, "ingest, scale, latency"},
        {"abandon --help", 0, "options:\n  --reason TEXT"},
        {"abandon --help", 0, "  --timeout MS"},
        {"cancel --help", 0, "  --no-color"},
    };
    run_cases(cases, NCASES(cases), nowhere());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tail_for),
        cmocka_unit_test(test_invoke_timeout_bounds_connecting),
        cmocka_unit_test(test_publish_input_errors),
        cmocka_unit_test(test_approve_input_first),
        cmocka_unit_test(test_missing_values),
        cmocka_unit_test(test_status_watch),
        cmocka_unit_test(test_whoami_hint_once),
        cmocka_unit_test(test_conformance_endpoint),
        cmocka_unit_test(test_ids_checked_first),
        cmocka_unit_test(test_bad_broker_endpoint),
        cmocka_unit_test(test_publish_endless_line),
        cmocka_unit_test(test_messages_and_help),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_validate.c - `agentbus validate` run as a process over the fixture
 * corpus: every valid stream passes with --lifecycle, every invalid stream
 * fails at the line, path and reason its .expect file names; plus stdin,
 * lenient mode and usage errors.
 */
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

struct run_result {
    int status;
    char *out;
};

/* Run a shell command, capture stdout+stderr and the exit status. */
static struct run_result run(const char *cmd)
{
    struct run_result r = {0};
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, len = 0;
    r.out = malloc(cap);
    assert_non_null(r.out);
    size_t n;
    while ((n = fread(r.out + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 1024) {
            cap *= 2;
            r.out = realloc(r.out, cap);
            assert_non_null(r.out);
        }
    }
    r.out[len] = '\0';
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

static int for_each_fixture(const char *sub, const char *ext, void (*fn)(const char *path))
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/streams/%s", AB_FIXTURES_DIR, sub);
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int count = 0;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name), el = strlen(ext);
        if (n <= el || strcmp(e->d_name + n - el, ext) != 0)
            continue;
        char path[2048];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        fn(path);
        count++;
    }
    closedir(d);
    return count;
}

static void check_valid(const char *path)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s validate --lifecycle '%s' 2>&1", AB_AGENTBUS_BIN, path);
    struct run_result r = run(cmd);
    if (r.status != 0 || !strstr(r.out, " passed, 0 failed\n"))
        fail_msg("%s should pass:\n%s", path, r.out);
    free(r.out);
}

static void test_valid_streams_pass(void **state)
{
    (void)state;
    assert_true(for_each_fixture("valid", ".jsonl", check_valid) >= 10);
}

/* .expect: LINE<TAB>PATH<TAB>SUBSTRING */
static void check_invalid(const char *path)
{
    char expect_path[2048], cmd[4096], want[512];
    snprintf(expect_path, sizeof(expect_path), "%.*s.expect", (int)(strlen(path) - 6), path);
    char *exp = tu_read_file(expect_path, NULL);
    char *line = exp, *jpath = strchr(line, '\t'), *sub = jpath ? strchr(jpath + 1, '\t') : NULL;
    if (!jpath || !sub)
        fail_msg("malformed %s (want LINE<TAB>PATH<TAB>TEXT)", expect_path);
    *jpath++ = '\0';
    *sub++ = '\0';
    sub[strcspn(sub, "\r\n")] = '\0';
    snprintf(cmd, sizeof(cmd), "%s validate --lifecycle '%s' 2>&1", AB_AGENTBUS_BIN, path);
    struct run_result r = run(cmd);
    if (r.status != 1)
        fail_msg("%s should fail with status 1, got %d:\n%s", path, r.status, r.out);
    /* the first FAIL line must be at LINE and name PATH and SUBSTRING */
    char *fail = strstr(r.out, "  FAIL  ");
    if (!fail)
        fail_msg("%s: no FAIL line:\n%s", path, r.out);
    char *bol = fail;
    while (bol > r.out && bol[-1] != '\n')
        bol--;
    snprintf(want, sizeof(want), "%6s", line);
    if (strncmp(bol, want, strlen(want)) != 0 && strncmp(bol, "   end", 6) != 0)
        fail_msg("%s: expected the first failure at line %s:\n%s", path, line, r.out);
    char *eol = strchr(fail, '\n');
    if (eol)
        *eol = '\0';
    bool path_ok = jpath[0] == '\0' || strstr(fail, jpath) != NULL;
    if (!path_ok || !strstr(fail, sub))
        fail_msg("%s: failure line '%s' lacks path '%s' or text '%s'", path, bol, jpath, sub);
    free(r.out);
    free(exp);
}

static void test_invalid_streams_fail_where_expected(void **state)
{
    (void)state;
    assert_true(for_each_fixture("invalid", ".jsonl", check_invalid) >= 25);
}

static void test_stdin_and_summary(void **state)
{
    (void)state;
    char cmd[4096];
    snprintf(cmd, sizeof(cmd),
             "printf '%%s\\n' '{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\","
             "\"protocolVersion\":\"1.0\"}' '' '{\"type\":\"TEXT_MESSAGE_CONTENT\"}' "
             "'not json' | %s validate 2>&1",
             AB_AGENTBUS_BIN);
    struct run_result r = run(cmd);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "     1  ok    RUN_STARTED"));
    assert_non_null(strstr(r.out, "     3  FAIL  invalid_event"));
    assert_non_null(strstr(r.out, "     4  FAIL  invalid_event"));
    assert_non_null(strstr(r.out, "1 passed, 2 failed\n"));
    free(r.out);
}

/* --json: one object per line, the field as a JSON Pointer; and "not JSON Lines" (issue 16). */
static void test_json_output_and_not_jsonl(void **state)
{
    (void)state;
    char cmd[4096];
    snprintf(cmd, sizeof(cmd),
             "printf '%%s\\n' '{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\","
             "\"protocolVersion\":\"1.0\"}' '{\"type\":\"TEXT_MESSAGE_START\"}' "
             "| %s validate --json 2>&1",
             AB_AGENTBUS_BIN);
    struct run_result r = run(cmd);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "{\"line\":1,\"ok\":true,\"type\":\"RUN_STARTED\"}\n"));
    assert_non_null(strstr(r.out, "{\"line\":2,\"ok\":false,\"error\":{\"code\":"
                                  "\"invalid_event\",\"message\":"));
    assert_non_null(strstr(r.out, "\"pointer\":\"/messageId\"}}\n"));
    assert_non_null(strstr(r.out, "{\"passed\":1,\"failed\":1}\n"));
    free(r.out);
    /* a pretty-printed file: said once, not a failure per line */
    snprintf(cmd, sizeof(cmd), "printf '{\\n  \"type\": \"RUN_STARTED\"\\n}\\n' | %s validate 2>&1",
             AB_AGENTBUS_BIN);
    r = run(cmd);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "1  FAIL  invalid_event /: not JSON Lines: a line holds only "
                                  "'{' (pretty-printed JSON?)"));
    assert_non_null(strstr(r.out, "0 passed, 1 failed\n"));
    free(r.out);
}

static void test_lenient_warns_on_unknown_material(void **state)
{
    (void)state;
    char cmd[4096];
    const char *ev = "'{\"type\":\"STEP_STARTED\",\"stepName\":\"s\",\"futureField\":1}'";
    snprintf(cmd, sizeof(cmd), "echo %s | %s validate 2>&1", ev, AB_AGENTBUS_BIN);
    struct run_result strict = run(cmd);
    assert_int_equal(strict.status, 1);
    assert_non_null(strstr(strict.out, "/futureField"));
    snprintf(cmd, sizeof(cmd), "echo %s | %s validate --lenient 2>&1", ev, AB_AGENTBUS_BIN);
    struct run_result lenient = run(cmd);
    assert_int_equal(lenient.status, 0);
    assert_non_null(strstr(lenient.out, "warn  /futureField"));
    assert_non_null(strstr(lenient.out, "1 passed, 0 failed"));
    free(strict.out);
    free(lenient.out);
}

static void test_truncated_run_fails_with_lifecycle(void **state)
{
    (void)state;
    char cmd[4096];
    snprintf(cmd, sizeof(cmd),
             "echo '{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\","
             "\"protocolVersion\":\"1.0\"}' | %s validate --lifecycle 2>&1",
             AB_AGENTBUS_BIN);
    struct run_result r = run(cmd);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "still active"));
    assert_non_null(strstr(r.out, "1 passed, 1 failed"));
    free(r.out);
}

/* A line over the 4 MiB limit fails as too_large, once, and the lines after it are judged. */
static void test_long_line_skipped(void **state)
{
    (void)state;
    char cmd[4096];
    snprintf(cmd, sizeof(cmd),
             "{ echo '{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\","
             "\"protocolVersion\":\"1.0\"}'; head -c 5000000 /dev/zero | tr '\\0' '{'; echo; "
             "echo '{\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"r\"}'; } "
             "| %s validate --lifecycle 2>&1",
             AB_AGENTBUS_BIN);
    struct run_result r = run(cmd);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "     2  FAIL  too_large /: line longer than 4194304 bytes\n"));
    assert_non_null(strstr(r.out, "     3  ok    RUN_FINISHED\n"));
    assert_non_null(strstr(r.out, "2 passed, 1 failed\n"));
    free(r.out);
}

static void test_usage_errors(void **state)
{
    (void)state;
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s validate --bogus 2>&1", AB_AGENTBUS_BIN);
    struct run_result r = run(cmd);
    assert_int_equal(r.status, 2);
    free(r.out);
    snprintf(cmd, sizeof(cmd), "%s validate /nonexistent/file 2>&1", AB_AGENTBUS_BIN);
    r = run(cmd);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.out, "cannot open"));
    free(r.out);
    snprintf(cmd, sizeof(cmd), "%s validate --help", AB_AGENTBUS_BIN);
    r = run(cmd);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "--lifecycle"));
    free(r.out);
    snprintf(cmd, sizeof(cmd), "%s frobnicate 2>&1", AB_AGENTBUS_BIN);
    r = run(cmd);
    assert_int_equal(r.status, 2);
    free(r.out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_streams_pass),
        cmocka_unit_test(test_invalid_streams_fail_where_expected),
        cmocka_unit_test(test_stdin_and_summary),
        cmocka_unit_test(test_json_output_and_not_jsonl),
        cmocka_unit_test(test_lenient_warns_on_unknown_material),
        cmocka_unit_test(test_truncated_run_fails_with_lifecycle),
        cmocka_unit_test(test_long_line_skipped),
        cmocka_unit_test(test_usage_errors),
    };
    return cmocka_run_group_tests_name("cli_validate", tests, NULL, NULL);
}

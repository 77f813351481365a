/*
 * test_lines.c - the bounded JSON Lines reader of validate and publish (cli/lines.c): a line
 * over CLI_LINE_MAX_BYTES is answered -2 as soon as it passes the limit, with nothing more of
 * it read (so an input without newlines ends the read), and cli_skip_line() goes on to the
 * next line; lines within the limit come whole, without their newline or a trailing CR.
 */
#include "testutil.h"

#include "lines.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A temporary stream holding @p head, @p n bytes of 'a', then @p tail. */
static FILE *stream_of(const char *head, size_t n, const char *tail)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    fputs(head, f);
    for (size_t i = 0; i < n; i++)
        fputc('a', f);
    fputs(tail, f);
    rewind(f);
    return f;
}

static void test_lines_within_the_limit(void **state)
{
    (void)state;
    FILE *f = stream_of("one\r\n\n", CLI_LINE_MAX_BYTES, "\nlast");
    ab_buf_t b = AB_BUF_INIT;
    assert_int_equal(cli_read_line(f, &b), 3);
    assert_memory_equal(b.data, "one", 3);
    assert_int_equal(cli_read_line(f, &b), 0);
    assert_true(cli_blank(&b));
    assert_int_equal(cli_read_line(f, &b), (long)CLI_LINE_MAX_BYTES); /* exactly the limit */
    assert_int_equal(cli_read_line(f, &b), 4);                        /* no newline at the end */
    assert_int_equal(cli_read_line(f, &b), -1);
    ab_buf_free(&b);
    fclose(f);
}

static void test_over_long_line_stops_at_the_limit(void **state)
{
    (void)state;
    FILE *f = stream_of("first\n", CLI_LINE_MAX_BYTES + 1000, "\nnext\n");
    ab_buf_t b = AB_BUF_INIT;
    assert_int_equal(cli_read_line(f, &b), 5);
    assert_int_equal(cli_read_line(f, &b), -2);
    /* nothing read past the byte that broke the limit */
    assert_int_equal(ftell(f), (long)(6 + CLI_LINE_MAX_BYTES + 1));
    assert_true(b.len <= CLI_LINE_MAX_BYTES);
    cli_skip_line(f);
    assert_int_equal(cli_read_line(f, &b), 4);
    assert_memory_equal(b.data, "next", 4);
    assert_int_equal(cli_read_line(f, &b), -1);
    cli_skip_line(f); /* at the end: nothing to skip */
    ab_buf_free(&b);
    fclose(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines_within_the_limit),
        cmocka_unit_test(test_over_long_line_stops_at_the_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

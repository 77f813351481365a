/*
 * test_json_locale.c - JSON text in and out is the same whatever LC_NUMERIC
 * an embedding program selects: with a German locale (decimal comma) the
 * bridge still reads "1.5" and writes "1.5", and fractions round-trip.
 *
 * The locale is compiled here with localedef into a temporary LOCPATH, so
 * the test needs no locale installed; without localedef it is skipped.
 */
#include "testutil.h"

#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_dir[] = "/tmp/ab-locale-XXXXXX";

static int make_locale(void **state)
{
    (void)state;
    if (!mkdtemp(g_dir))
        return -1;
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1", g_dir);
    if (system(cmd) != 0) /* no localedef or no locale sources: the test skips */
        return 0;
    setenv("LOCPATH", g_dir, 1);
    return 0;
}

static int drop_locale(void **state)
{
    (void)state;
    setlocale(LC_ALL, "C");
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void to_json(const char *in, char *out, size_t outsz)
{
    tu_ctx_t c;
    tu_ctx_init(&c);
    const ab_val_t *v = tu_json(&c, in);
    ab_buf_t b = {0};
    assert_int_equal(ab_val_to_json(v, &b), AB_OK);
    assert_true(b.len < outsz);
    memcpy(out, b.data, b.len);
    out[b.len] = '\0';
    ab_buf_free(&b);
    tu_ctx_free(&c);
}

static void test_decimal_comma_locale(void **state)
{
    (void)state;
    if (!setlocale(LC_ALL, "de_DE.UTF-8"))
        skip();
    char probe[16];
    snprintf(probe, sizeof(probe), "%.1f", 1.5);
    assert_string_equal(probe, "1,5"); /* the locale really is in force */

    char out[128];
    to_json("{\"a\":1.5,\"b\":-0.25,\"c\":3.0,\"d\":1e-7,\"e\":2}", out, sizeof(out));
    assert_string_equal(out, "{\"a\":1.5,\"b\":-0.25,\"c\":3.0,\"d\":1e-07,\"e\":2}");
    to_json("[0.1,123456.789]", out, sizeof(out));
    assert_string_equal(out, "[0.1,123456.789]");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decimal_comma_locale),
    };
    return cmocka_run_group_tests_name("json_locale", tests, make_locale, drop_locale);
}

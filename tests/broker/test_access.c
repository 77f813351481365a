/*
 * test_access.c - the access table (broker/access.c): parsing with NAME:LINE
 * errors, role and prefix checks, the subscriptions a topic becomes, and
 * whether a reload narrowed what a key could read.
 */
#include "access.h"
#include "agentbus/keys.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <zmq.h>

static ab_keypair_t k1, k2, k3;

static int setup(void **state)
{
    (void)state;
    ab_error_t e = AB_ERROR_INIT;
    if (ab_keypair_new(&k1, &e) != AB_OK || ab_keypair_new(&k2, &e) != AB_OK ||
        ab_keypair_new(&k3, &e) != AB_OK)
        return -1;
    return 0;
}

/* Parse @p text (printf format, keys as %1$s %2$s %3$s); @return the status. */
static ab_status_t parse(ab__access_t **a, ab_error_t *e, const char *fmt)
{
    char text[4096];
    /* the keys by position: K1, K2, K3 in the format are replaced */
    const char *src = fmt;
    size_t o = 0;
    while (*src && o < sizeof text - 64) {
        if (src[0] == 'K' && src[1] >= '1' && src[1] <= '3') {
            const ab_keypair_t *k = src[1] == '1' ? &k1 : src[1] == '2' ? &k2 : &k3;
            memcpy(text + o, k->public_key, AB_KEY_Z85_LEN);
            o += AB_KEY_Z85_LEN;
            src += 2;
        } else {
            text[o++] = *src++;
        }
    }
    *a = NULL;
    ab_error_clear(e);
    return ab__access_parse(a, "acl", text, o, ".", e);
}

static const ab__principal_t *find(const ab__access_t *a, const ab_keypair_t *k)
{
    return ab__access_find_z85(a, k->public_key, AB_KEY_Z85_LEN);
}

static void test_roles_and_prefixes(void **state)
{
    (void)state;
    ab__access_t *a;
    ab_error_t e;
    assert_int_equal(parse(&a, &e,
                           "# team a\n"
                           "alice K1 publish:team-a/ observe:team-a/,shared/\n"
                           "  \n"
                           "ops K2 admin\n"
                           "svc K3 serve control:* observe:x,xy,x\n"),
                     AB_OK);
    assert_int_equal(ab__access_count(a), 3);
    const ab__principal_t *al = find(a, &k1), *ops = find(a, &k2), *svc = find(a, &k3);
    assert_non_null(al);
    assert_string_equal(ab__principal_name(al), "alice");
    assert_true(ab__access_may(al, AB__ROLE_PUBLISH, "team-a/1", 8));
    assert_false(ab__access_may(al, AB__ROLE_PUBLISH, "team-b/1", 8));
    assert_false(ab__access_may(al, AB__ROLE_PUBLISH, "team-a", 6)); /* shorter than the prefix */
    assert_false(ab__access_may(al, AB__ROLE_PUBLISH, "shared/1", 8));
    assert_true(ab__access_may(al, AB__ROLE_OBSERVE, "shared/1", 8));
    assert_false(ab__access_may(al, AB__ROLE_CONTROL, "team-a/1", 8));
    assert_false(ab__access_may_all(al, AB__ROLE_OBSERVE));
    assert_true(ab__access_has(al, AB__ROLE_OBSERVE));
    assert_false(ab__access_has(al, AB__ROLE_SERVE));
    for (int r = 0; r < AB__ROLES; r++) {
        assert_true(ab__access_may_all(ops, (ab__role_t)r));
        assert_true(ab__access_may(ops, (ab__role_t)r, "anything", 8));
    }
    assert_true(ab__access_may_all(svc, AB__ROLE_SERVE));
    assert_true(ab__access_may_all(svc, AB__ROLE_CONTROL));
    assert_false(ab__access_may_all(svc, AB__ROLE_ADMIN));
    bool all;
    const char *const *pfx;
    const uint16_t *lens;
    size_t n;
    ab__access_grant(svc, AB__ROLE_OBSERVE, &all, &pfx, &lens, &n);
    assert_false(all);
    assert_int_equal(n, 1); /* x covers xy and itself again */
    assert_memory_equal(pfx[0], "x", 1);
    assert_null(ab__access_find_z85(a, "short", 5));
    ab__access_unref(&a);
    assert_null(a);
}

/* Each wrong line is refused with its line number and a message naming what is wrong. */
static void test_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *want; /* in the message */
    } cases[] = {
        {"alice K1\n", "acl:1: "},
        {"\n\nalice K1 sing\n", "acl:3: unknown role 'sing'"},
        {"alice notakey publish\n", "is not a key"},
        {"al/ce K1 publish\n", "name 'al/ce'"},
        {"alice K1 admin:x\n", "admin covers every thread"},
        {"alice K1 observe:a,,b\n", "an empty prefix"},
        {"alice K1 observe:team-*\n", "no '*'"},
        {"alice K1 observe:team-**\n", "no '*'"}, /* not only a single trailing '*' */
        {"alice K1 publish:a,*\n", "no '*'"},     /* '*' in a list is no prefix either */
        {"alice K1 publish\nbob K1 observe\n", "acl:2: the key of bob is already given on line 1"},
        {"alice nosuch.key publish\n", "nosuch.key"},
        {"alice ../x.key publish\n", "give a file name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ab__access_t *a;
        ab_error_t e;
        assert_int_equal(parse(&a, &e, cases[i].text), AB_INVALID_CONFIG);
        assert_null(a);
        if (strstr(e.message, cases[i].want) == NULL)
            fail_msg("case %zu: '%s' lacks '%s'", i, e.message, cases[i].want);
        assert_string_equal(e.field, "access");
    }
    /* a NUL byte and an over-long line */
    ab__access_t *a = NULL;
    ab_error_t e = AB_ERROR_INIT;
    assert_int_equal(ab__access_parse(&a, "acl", "x\0y\n", 4, ".", &e), AB_INVALID_CONFIG);
    assert_non_null(strstr(e.message, "acl:1: a NUL byte"));
    char *longl = malloc(5000);
    memset(longl, 'a', 5000);
    ab_error_clear(&e);
    assert_int_equal(ab__access_parse(&a, "acl", longl, 5000, ".", &e), AB_INVALID_CONFIG);
    assert_non_null(strstr(e.message, "longer than 4096"));
    free(longl);
}

typedef struct topics {
    char got[8][300];
    size_t len[8];
    size_t n;
} topics_t;

static void collect(void *ud, const uint8_t *t, size_t len)
{
    topics_t *ts = ud;
    if (ts->n < 8) {
        memcpy(ts->got[ts->n], t, len);
        ts->len[ts->n++] = len;
    }
}

static void test_topics(void **state)
{
    (void)state;
    ab__access_t *a;
    ab_error_t e;
    assert_int_equal(parse(&a, &e, "obs K1 observe:a,bc\nops K2 admin\npub K3 publish\n"), AB_OK);
    const ab__principal_t *obs = find(a, &k1), *ops = find(a, &k2), *pub = find(a, &k3);
    topics_t ts = {0};
    /* everything ("ev" NUL) becomes the observer's two prefixes */
    assert_int_equal(ab__access_topics(obs, (const uint8_t *)"ev", 3, collect, &ts), 2);
    assert_int_equal(ts.len[0], 4);
    assert_memory_equal(ts.got[0], "ev\0a", 4);
    assert_memory_equal(ts.got[1], "ev\0bc", 5);
    /* one thread inside a prefix stays itself; one outside becomes nothing */
    memset(&ts, 0, sizeof ts);
    assert_int_equal(ab__access_topics(obs, (const uint8_t *)"ev\0a1\0", 6, collect, &ts), 1);
    assert_int_equal(ts.len[0], 6);
    assert_int_equal(ab__access_topics(obs, (const uint8_t *)"ev\0b\0", 5, collect, &ts), 0);
    /* "ev" NUL "b" is narrowed to the prefix "bc" */
    memset(&ts, 0, sizeof ts);
    assert_int_equal(ab__access_topics(obs, (const uint8_t *)"ev\0b", 4, collect, &ts), 1);
    assert_memory_equal(ts.got[0], "ev\0bc", 5);
    /* heartbeats for anyone admitted; the empty topic: heartbeats and the prefixes */
    memset(&ts, 0, sizeof ts);
    assert_int_equal(ab__access_topics(pub, (const uint8_t *)"hb", 2, collect, &ts), 1);
    assert_int_equal(ab__access_topics(pub, (const uint8_t *)"", 0, collect, &ts), 1);
    assert_int_equal(ab__access_topics(pub, (const uint8_t *)"ev", 3, collect, &ts), 0);
    assert_int_equal(ab__access_topics(obs, (const uint8_t *)"", 0, collect, &ts), 3);
    /* admin: the topic as asked */
    memset(&ts, 0, sizeof ts);
    assert_int_equal(ab__access_topics(ops, (const uint8_t *)"", 0, collect, &ts), 1);
    assert_int_equal(ts.len[0], 0);
    assert_int_equal(ab__access_topics(NULL, (const uint8_t *)"", 0, collect, &ts), 0);
    ab__access_unref(&a);
}

static void test_narrowed(void **state)
{
    (void)state;
    ab__access_t *old, *same, *wider, *narrower, *gone, *nonobs;
    ab_error_t e;
    assert_int_equal(parse(&old, &e, "a K1 observe:x,y\nb K2 publish\n"), AB_OK);
    assert_int_equal(parse(&same, &e, "a K1 observe:y,x\n"), AB_OK); /* b did not observe */
    assert_int_equal(parse(&wider, &e, "a K1 observe:x,y,z\nb K2 admin\n"), AB_OK);
    assert_int_equal(parse(&narrower, &e, "a K1 observe:x\nb K2 publish\n"), AB_OK);
    assert_int_equal(parse(&gone, &e, "b K2 publish\n"), AB_OK);
    assert_int_equal(parse(&nonobs, &e, "a K1 admin\n"), AB_OK);
    assert_false(ab__access_narrowed(old, same));
    assert_false(ab__access_narrowed(old, wider));
    assert_true(ab__access_narrowed(old, narrower));
    assert_true(ab__access_narrowed(old, gone));
    assert_false(ab__access_narrowed(old, nonobs));
    assert_true(ab__access_narrowed(nonobs, old)); /* admin to two prefixes */
    ab__access_unref(&old);
    ab__access_unref(&same);
    ab__access_unref(&wider);
    ab__access_unref(&narrower);
    ab__access_unref(&gone);
    ab__access_unref(&nonobs);
}

/* The broker's keys directory: DIR/access when present, else every NAME.key as admin. */
static void test_load_dir(void **state)
{
    (void)state;
    char dir[] = "/tmp/ab-access-XXXXXX";
    assert_non_null(mkdtemp(dir));
    ab_error_t e = AB_ERROR_INIT;
    assert_int_equal(ab_keypair_write(&k1, dir, "alice", &e), AB_OK);
    assert_int_equal(ab_keypair_write(&k2, dir, "broker", &e), AB_OK);
    ab__access_t *a = NULL;
    assert_int_equal(ab__access_load(&a, dir, "", &e), AB_OK);
    assert_int_equal(ab__access_count(a), 1);
    const ab__principal_t *p = find(a, &k1);
    assert_non_null(p);
    assert_string_equal(ab__principal_name(p), "alice");
    assert_true(ab__access_may_all(p, AB__ROLE_ADMIN));
    ab__access_unref(&a);
    /* an access file naming a key file of the directory */
    char path[300];
    snprintf(path, sizeof path, "%s/access", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "alice alice.key observe:t\n");
    fclose(f);
    assert_int_equal(ab__access_load(&a, dir, "", &e), AB_OK);
    p = find(a, &k1);
    assert_non_null(p);
    assert_false(ab__access_may_all(p, AB__ROLE_ADMIN));
    assert_true(ab__access_may(p, AB__ROLE_OBSERVE, "t1", 2));
    ab__access_unref(&a);
    /* an explicit file that does not exist */
    ab_error_clear(&e);
    assert_int_not_equal(ab__access_load(&a, dir, "/nonexistent/acl", &e), AB_OK);
    assert_non_null(strstr(e.message, "/nonexistent/acl"));
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_box(void **state)
{
    (void)state;
    ab__access_box_t box;
    ab__access_box_init(&box);
    assert_null(ab__access_box_get(&box));
    ab__access_t *a;
    ab_error_t e;
    assert_int_equal(parse(&a, &e, "a K1 publish\n"), AB_OK);
    ab__access_box_set(&box, a);
    ab__access_t *held = ab__access_box_get(&box);
    assert_ptr_equal(held, a);
    ab__access_t *b;
    assert_int_equal(parse(&b, &e, "b K2 publish\n"), AB_OK);
    ab__access_box_set(&box, b); /* the held reference keeps the old table alive */
    assert_non_null(find(held, &k1));
    ab__access_unref(&held);
    ab__access_box_free(&box);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roles_and_prefixes),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_topics),
        cmocka_unit_test(test_narrowed),
        cmocka_unit_test(test_load_dir),
        cmocka_unit_test(test_box),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}

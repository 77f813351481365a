/*
 * fuzz_access.c - libFuzzer target for the broker's access file parser
 * (ab__access_parse, broker/access.c).
 *
 * Input: the text of an access file, any bytes; key files it names are
 * looked up in a directory that does not exist.
 *
 * Checks, for any input; a violation calls abort():
 *  1. the answer is AB_OK or AB_INVALID_CONFIG (AB_NOMEM aside); a refusal's
 *     message starts with "acl:LINE: " (LINE >= 1, at most the number of
 *     lines) or "acl: " and its field is "access", and no table is returned;
 *  2. on AB_OK every principal is found again by its own key, its name is
 *     1..63 bytes, a principal's roles answer consistently (may_all implies
 *     may on any thread, may on a thread implies has), and a table never
 *     narrows against itself;
 *  3. the subscriptions a topic becomes are each a topic that the
 *     principal may read: admin or observe on every thread, the heartbeat
 *     topic, or within one of its observe prefixes.
 * ASan/UBSan watch the rest.
 */
#include "access.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct seen {
    const ab__principal_t *p;
    size_t n;
} seen_t;

static void check_topic(void *ud, const uint8_t *t, size_t len)
{
    seen_t *s = ud;
    s->n++;
    if (ab__access_may_all(s->p, AB__ROLE_OBSERVE))
        return;
    if (len >= 2 && memcmp(t, "hb", 2) == 0)
        return;
    if (len < 4 || memcmp(t, "ev", 3) != 0)
        abort();
    if (!ab__access_may(s->p, AB__ROLE_OBSERVE, (const char *)t + 3, len - 3))
        abort();
}

static void check_refusal(const ab_error_t *e, const uint8_t *data, size_t size)
{
    size_t lines = 1;
    for (size_t i = 0; i < size; i++)
        lines += data[i] == '\n';
    if (strcmp(e->field, "access") != 0 || strncmp(e->message, "acl:", 4) != 0)
        abort();
    const char *m = e->message + 4;
    if (*m == ' ')
        return; /* not about one line */
    char *end = NULL;
    unsigned long line = strtoul(m, &end, 10);
    if (line < 1 || line > lines || end == NULL || end[0] != ':' || end[1] != ' ')
        abort();
}

static void check_principal(const ab__access_t *a, const ab__principal_t *p)
{
    static const char *const topics[] = {"", "ev", "ev\0a", "ev\0a\0r\0", "hb", "x"};
    static const size_t tlen[] = {0, 3, 4, 8, 2, 1};
    static const char *const threads[] = {"a", "team-a/1", "x", "\xc3\xa9t\xc3\xa9"};
    char z85[AB_KEY_Z85_SIZE];
    memcpy(z85, ab__principal_key(p), sizeof z85);
    if (ab__access_find_z85(a, z85, strlen(z85)) != p)
        abort();
    size_t nl = strlen(ab__principal_name(p));
    if (nl < 1 || nl > 63)
        abort();
    for (int r = 0; r < AB__ROLES; r++) {
        for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
            bool may = ab__access_may(p, (ab__role_t)r, threads[t], strlen(threads[t]));
            if (ab__access_may_all(p, (ab__role_t)r) && !may)
                abort();
            if (may && !ab__access_has(p, (ab__role_t)r))
                abort();
        }
    }
    for (size_t t = 0; t < sizeof topics / sizeof topics[0]; t++) {
        seen_t s = {.p = p};
        size_t n = ab__access_topics(p, (const uint8_t *)topics[t], tlen[t], check_topic, &s);
        if (n != s.n)
            abort();
    }
}

static void check_table(const ab__access_t *a)
{
    if (ab__access_narrowed(a, a))
        abort();
    for (size_t i = 0; i < ab__access_count(a); i++)
        check_principal(a, ab__access_at(a, i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ab__access_t *a = NULL;
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t rc = ab__access_parse(&a, "acl", (const char *)data, size, "/nonexistent", &e);
    if (rc == AB_NOMEM)
        return 0;
    if (rc != AB_OK) {
        if (rc != AB_INVALID_CONFIG || a != NULL)
            abort();
        check_refusal(&e, data, size);
        return 0;
    }
    check_table(a);
    ab__access_unref(&a);
    return 0;
}

/*
 * test_store_threads.c - the SQLite store's thread listing (the plugin's
 * threads_list, store/store_threads.c): an empty store, paging by cursor
 * and limit, prefixes (with no match, with the cursor before, inside and
 * after their range), ids with multibyte UTF-8 bytes in byte order, a
 * claimed-only thread left out, the figures of each thread (runs, active,
 * the newest event even when it is not in the newest chunk), a read-only
 * handle beside the writer, and the refusals.
 */
#include "store.h"
#include "store_fixture.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef sf_fx_t fx_t;

static int setup(void **state)
{
    return sf_fx_setup(state, "sthreads", true);
}

static int teardown(void **state)
{
    return sf_fx_teardown(state);
}

static ab_str_t S(const char *s)
{
    return (ab_str_t){s, s ? strlen(s) : 0};
}

static ab_append_event_t ev(const char *thread, const char *run, uint64_t seq,
                            ab_run_status_t status)
{
    return (ab_append_event_t){.thread = S(thread),
                               .run = S(run),
                               .seq = seq,
                               .epoch = 1,
                               .bytes = (const uint8_t *)"x",
                               .len = 1,
                               .status = status};
}

static void batch(ab_store_t *st, const ab_append_event_t *evs, size_t n)
{
    ab_error_t err = AB_ERROR_INIT;
    uint64_t first = 0;
    ab_status_t s = ab__store_append_batch(st, evs, n, 1000, &first, &err);
    if (s != AB_OK)
        fail_msg("append: %s", err.message);
}

/* Collects "thread:runs/active/last_run@last_pos;" */
typedef struct acc {
    char text[4096];
    uint32_t stop_after;
    uint32_t n;
    char last[AB_ID_MAX_BYTES + 1];
} acc_t;

static int collect(void *ud, const ab_thread_info_t *t)
{
    acc_t *a = ud;
    size_t used = strlen(a->text);
    snprintf(a->text + used, sizeof a->text - used, "%s:%llu/%llu/%s@%llu;", t->thread,
             (unsigned long long)t->runs, (unsigned long long)t->runs_active, t->last_run,
             (unsigned long long)t->last_pos);
    snprintf(a->last, sizeof a->last, "%s", t->thread);
    a->n++;
    return a->stop_after && a->n >= a->stop_after;
}

/* The listing as text; "" with *n = 0 when empty. */
static const char *list(ab_store_t *st, const char *after, const char *prefix, uint32_t limit,
                        acc_t *a)
{
    memset(a, 0, sizeof *a);
    uint32_t n = 99;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = ab__store_threads_list(st, S(after), S(prefix), limit, collect, a, &n, &err);
    if (s != AB_OK)
        fail_msg("threads_list: %s", err.message);
    assert_int_equal(n, a->n);
    return a->text;
}

/* Only the ids, for the order tests: "a,b,". */
static const char *ids(ab_store_t *st, const char *after, const char *prefix, uint32_t limit,
                       char *out, size_t cap)
{
    acc_t a;
    list(st, after, prefix, limit, &a);
    out[0] = '\0';
    for (char *p = a.text; *p;) {
        char *colon = strchr(p, ':');
        char *semi = strchr(p, ';');
        size_t used = strlen(out);
        snprintf(out + used, cap - used, "%.*s,", (int)(colon - p), p);
        p = semi + 1;
    }
    return out;
}

#define E_ACUTE "\xc3\xa9"
#define NIHON   "\xe6\x97\xa5\xe6\x9c\xac"

/* Threads a, a-1, a-2, b, z, é-1, é, 日本 (one event each but a), and c claimed only. */
static void fill(ab_store_t *st)
{
    const char *one[] = {"a-2", "b", "z", E_ACUTE "-1", E_ACUTE, NIHON, "a-1"};
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) {
        ab_append_event_t e = ev(one[i], "r", 1, AB_RUN_STATUS_ACTIVE);
        batch(st, &e, 1); /* positions 1..7 */
    }
    ab_append_event_t fin[] = {ev("a", "r1", 1, AB_RUN_STATUS_ACTIVE),
                               ev("a", "r1", 2, AB_RUN_STATUS_FINISHED)};
    fin[1].outcome = AB_OUTCOME_SUCCESS;
    batch(st, fin, 2); /* 8, 9 */
    /* one commit: r1's chunk starts first (at 11) and ends last (13), r2's is at 12 */
    ab_append_event_t mix[] = {
        ev("b", "r", 2, AB_RUN_STATUS_UNKNOWN), ev("a", "r3", 1, AB_RUN_STATUS_ACTIVE),
        ev("a", "r2", 1, AB_RUN_STATUS_ACTIVE), ev("a", "r3", 2, AB_RUN_STATUS_UNKNOWN)};
    batch(st, mix, 4); /* 10..13 */
    uint64_t epoch = 0, last = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_claim(st, S("c"), S("r"), &epoch, &last, &err), AB_OK);
}

static void test_empty_store(void **state)
{
    fx_t *f = *state;
    acc_t a;
    assert_string_equal(list(f->st, NULL, NULL, 100, &a), "");
    assert_string_equal(list(f->st, "a", "b", 1, &a), "");
    uint64_t epoch = 0, last = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_claim(f->st, S("t"), S("r"), &epoch, &last, &err), AB_OK);
    assert_string_equal(list(f->st, NULL, NULL, 100, &a), ""); /* claimed only: no event */
}

static void test_figures(void **state)
{
    fx_t *f = *state;
    fill(f->st);
    acc_t a;
    /* a: runs r1 (finished), r3, r2 (active); its newest event is r3's at 13, whose chunk
     * begins at 11, before r2's (12): the newest chunk is not the newest event's */
    assert_string_equal(list(f->st, NULL, "a", 1, &a), "a:3/2/r3@13;");
    assert_string_equal(list(f->st, "a", "b", 5, &a), "b:1/1/r@10;");
}

static void test_order_and_paging(void **state)
{
    fx_t *f = *state;
    fill(f->st);
    char out[512], walk[512] = "";
    const char *all = "a,a-1,a-2,b,z," E_ACUTE "," E_ACUTE "-1," NIHON ",";
    assert_string_equal(ids(f->st, NULL, NULL, 100, out, sizeof out), all); /* no c */
    assert_string_equal(ids(f->st, "", "", 100, out, sizeof out), all);
    assert_string_equal(ids(f->st, NULL, NULL, 2, out, sizeof out), "a,a-1,");
    assert_string_equal(ids(f->st, "a-1", NULL, 2, out, sizeof out), "a-2,b,");
    assert_string_equal(ids(f->st, "a-10", NULL, 1, out, sizeof out), "a-2,"); /* not a thread */
    assert_string_equal(ids(f->st, NIHON, NULL, 5, out, sizeof out), "");
    for (uint32_t limit = 1; limit <= 3; limit++) { /* every page size walks the same list */
        acc_t a;
        walk[0] = '\0';
        char after[AB_ID_MAX_BYTES + 1] = "";
        for (int pages = 0; pages < 20; pages++) {
            ids(f->st, after, NULL, limit, out, sizeof out);
            strncat(walk, out, sizeof walk - strlen(walk) - 1);
            list(f->st, after, NULL, limit, &a);
            if (a.n < limit)
                break;
            snprintf(after, sizeof after, "%s", a.last);
        }
        assert_string_equal(walk, all);
    }
}

static void test_prefixes(void **state)
{
    fx_t *f = *state;
    fill(f->st);
    char out[512];
    assert_string_equal(ids(f->st, NULL, "a", 100, out, sizeof out), "a,a-1,a-2,");
    assert_string_equal(ids(f->st, NULL, "a-", 100, out, sizeof out), "a-1,a-2,");
    assert_string_equal(ids(f->st, "a-1", "a-", 100, out, sizeof out), "a-2,");
    assert_string_equal(ids(f->st, "a", "b", 100, out, sizeof out), "b,"); /* cursor before */
    assert_string_equal(ids(f->st, "b", "a", 100, out, sizeof out), "");   /* cursor after */
    assert_string_equal(ids(f->st, NULL, "x", 100, out, sizeof out), "");  /* no match */
    assert_string_equal(ids(f->st, NULL, "c", 100, out, sizeof out), "");  /* claimed only */
    assert_string_equal(ids(f->st, NULL, "a-2-", 100, out, sizeof out), "");
    assert_string_equal(ids(f->st, NULL, E_ACUTE, 100, out, sizeof out), E_ACUTE "," E_ACUTE "-1,");
    assert_string_equal(ids(f->st, E_ACUTE, E_ACUTE, 100, out, sizeof out), E_ACUTE "-1,");
    assert_string_equal(ids(f->st, NULL, "\xc3", 100, out, sizeof out), E_ACUTE "," E_ACUTE "-1,");
    assert_string_equal(ids(f->st, NULL, "\xe6\x97", 100, out, sizeof out), NIHON ",");
    assert_string_equal(ids(f->st, NULL, "z", 1, out, sizeof out), "z,");
}

static void test_reader_and_stop(void **state)
{
    fx_t *f = *state;
    fill(f->st);
    ab_store_t *ro = open_ok(f->dir, true);
    acc_t a, b;
    assert_string_equal(list(ro, NULL, NULL, 100, &a), list(f->st, NULL, NULL, 100, &b));
    memset(&a, 0, sizeof a);
    a.stop_after = 2;
    uint32_t n = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab__store_threads_list(ro, S(NULL), S(NULL), 100, collect, &a, &n, &err),
                     AB_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ab__store_threads_list(ro, S(NULL), S(NULL), 0, collect, &a, &n, &err),
                     AB_INVALID_ARGUMENT);
    ab__store_close(&ro);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_empty_store, setup, teardown),
        cmocka_unit_test_setup_teardown(test_figures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_order_and_paging, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prefixes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_and_stop, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_pg_threads.c - the PostgreSQL plugin's thread listing (threads_list,
 * plugin/postgres/pg_threads.c) on a server of its own (pg_fixture.h,
 * locale C): the same answers as the SQLite store's for the same events
 * (tests/store/test_store_threads.c): byte order with multibyte ids,
 * paging with every page size, prefixes with the cursor before, inside and
 * after their range, a claimed-only thread left out, the figures (runs,
 * active, the newest event's run and position), and a read-only handle.
 */
#define PGMOD_FILE_SERVER
#include "pg_module.h"

#include "agentbus/plugin.h"
#include "loader.h"
#include "testutil.h"

static ab_plugin_db_t *open_db(bool readonly)
{
    return pgmod_open(P, &g_pg, readonly, AB_DURABILITY_FSYNC); /* the default durability */
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

static uint64_t batch(ab_plugin_db_t *db, const ab_append_event_t *evs, size_t n)
{
    ab_error_t err = AB_ERROR_INIT;
    uint64_t first = 0;
    ab_status_t s = P->append_batch(db, evs, n, 1000, &first, &err);
    if (s != AB_OK)
        fail_msg("append: %s", err.message);
    return first;
}

typedef struct acc {
    char text[4096];
    uint32_t n;
    char last[AB_ID_MAX_BYTES + 1];
    uint64_t base; /* positions are printed relative to it */
    bool figures;
} acc_t;

static int collect(void *ud, const ab_thread_info_t *t)
{
    acc_t *a = ud;
    size_t used = strlen(a->text);
    if (a->figures)
        snprintf(a->text + used, sizeof a->text - used, "%s:%llu/%llu/%s@%llu;", t->thread,
                 (unsigned long long)t->runs, (unsigned long long)t->runs_active, t->last_run,
                 (unsigned long long)(t->last_pos - a->base));
    else
        snprintf(a->text + used, sizeof a->text - used, "%s,", t->thread);
    snprintf(a->last, sizeof a->last, "%s", t->thread);
    a->n++;
    return 0;
}

static const char *list(ab_plugin_db_t *db, const char *after, const char *prefix, uint32_t limit,
                        acc_t *a)
{
    uint64_t base = a->base;
    bool figures = a->figures;
    memset(a, 0, sizeof *a);
    a->base = base;
    a->figures = figures;
    uint32_t n = 99;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t s = P->threads_list(db, S(after), S(prefix), limit, collect, a, &n, &err);
    if (s != AB_OK)
        fail_msg("threads_list: %s: %s", ab_status_name(s), err.message);
    assert_int_equal(n, a->n);
    return a->text;
}

#define E_ACUTE "\xc3\xa9"
#define NIHON   "\xe6\x97\xa5\xe6\x9c\xac"

static void test_listing(void **state)
{
    (void)state;
    ab_plugin_db_t *db = open_db(false), *rd = open_db(true);
    assert_true(ab_plugin_has(P, threads_list));
    acc_t a = {0};
    assert_string_equal(list(db, NULL, NULL, 100, &a), ""); /* empty store */
    const char *one[] = {"a-2", "b", "z", E_ACUTE "-1", E_ACUTE, NIHON, "a-1"};
    uint64_t base = 0;
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) {
        ab_append_event_t e = ev(one[i], "r", 1, AB_RUN_STATUS_ACTIVE);
        uint64_t first = batch(db, &e, 1);
        if (i == 0)
            base = first - 1;
    }
    ab_append_event_t fin[] = {ev("a", "r1", 1, AB_RUN_STATUS_ACTIVE),
                               ev("a", "r1", 2, AB_RUN_STATUS_FINISHED)};
    fin[1].outcome = AB_OUTCOME_SUCCESS;
    batch(db, fin, 2);
    ab_append_event_t mix[] = {
        ev("b", "r", 2, AB_RUN_STATUS_UNKNOWN), ev("a", "r3", 1, AB_RUN_STATUS_ACTIVE),
        ev("a", "r2", 1, AB_RUN_STATUS_ACTIVE), ev("a", "r3", 2, AB_RUN_STATUS_UNKNOWN)};
    batch(db, mix, 4);
    uint64_t epoch = 0, last = 0;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(P->claim(db, S("c"), S("r"), &epoch, &last, &err), AB_OK);

    a.figures = true;
    a.base = base;
    assert_string_equal(list(rd, NULL, "a", 1, &a), "a:3/2/r3@13;");
    assert_string_equal(list(rd, "a", "b", 5, &a), "b:1/1/r@10;");
    a.figures = false;
    const char *all = "a,a-1,a-2,b,z," E_ACUTE "," E_ACUTE "-1," NIHON ",";
    assert_string_equal(list(rd, NULL, NULL, 100, &a), all);
    assert_string_equal(list(db, "", "", 100, &a), all);
    assert_string_equal(list(rd, "a-10", NULL, 1, &a), "a-2,");
    for (uint32_t limit = 1; limit <= 3; limit++) {
        char walk[512] = "", after[AB_ID_MAX_BYTES + 1] = "";
        for (int pages = 0; pages < 20; pages++) {
            list(rd, after, NULL, limit, &a);
            strncat(walk, a.text, sizeof walk - strlen(walk) - 1);
            if (a.n < limit)
                break;
            snprintf(after, sizeof after, "%s", a.last);
        }
        assert_string_equal(walk, all);
    }
    assert_string_equal(list(rd, NULL, "a-", 100, &a), "a-1,a-2,");
    assert_string_equal(list(rd, "a-1", "a-", 100, &a), "a-2,");
    assert_string_equal(list(rd, "a", "b", 100, &a), "b,");
    assert_string_equal(list(rd, "b", "a", 100, &a), "");
    assert_string_equal(list(rd, NULL, "x", 100, &a), "");
    assert_string_equal(list(rd, NULL, "c", 100, &a), ""); /* claimed only */
    assert_string_equal(list(rd, NULL, E_ACUTE, 100, &a), E_ACUTE "," E_ACUTE "-1,");
    assert_string_equal(list(rd, E_ACUTE, E_ACUTE, 100, &a), E_ACUTE "-1,");
    uint32_t n = 0;
    assert_int_equal(P->threads_list(rd, S(NULL), S(NULL), 0, collect, &a, &n, &err),
                     AB_INVALID_ARGUMENT);
    P->close(rd);
    P->close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listing),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

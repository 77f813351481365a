/*
 * test_embed.c - the embeddable broker's API (include/agentbus/broker.h) as
 * a program that embeds one uses it: stopping from another thread while one
 * waits, and log levels that belong to each broker, not to the process.
 */
#include "testutil.h"

#include "broker_proc.h"
#include "embedded.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct embedded {
    char dir[64];
    ab_broker_t *b;
} embedded_t;

static void start(embedded_t *e, ab_log_level_t level)
{
    e->b = tu_broker_new(e->dir, sizeof(e->dir), "/tmp/ab_embed_XXXXXX", level);
    assert_non_null(strstr(ab_broker_cmd_endpoint(e->b), "tcp://127.0.0.1:"));
}

static void finish(embedded_t *e)
{
    assert_int_equal(ab_broker_destroy(&e->b), 0);
    assert_null(e->b);
    bp_rm_tree(e->dir);
}

typedef struct waiter {
    ab_broker_t *b;
    int rc;
} waiter_t;

static void *wait_main(void *arg)
{
    waiter_t *w = arg;
    w->rc = ab_broker_wait(w->b);
    return NULL;
}

/* One thread waits; another asks the broker to stop; the wait ends with 0. */
static void test_stop_while_another_thread_waits(void **state)
{
    (void)state;
    embedded_t e;
    start(&e, AB_LOG_ERROR);
    waiter_t w = {.b = e.b, .rc = -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, wait_main, &w), 0);
    ab_broker_stop(e.b);
    ab_broker_stop(e.b); /* a second request is harmless */
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(w.rc, 0);
    finish(&e);
    ab_broker_stop(NULL);
    assert_int_equal(ab_broker_destroy(NULL), 0);
}

/* Count the lines of @p path holding @p needle. */
static int count_lines(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/*
 * Two brokers in one process, one at error and one at info: each broker's
 * threads log at its own level. The level was process-wide until issue 12:
 * the quiet broker's command thread then logged its "shutting down" line at
 * whatever level the process had last been given.
 */
static void test_log_levels_belong_to_each_broker(void **state)
{
    (void)state;
    char path[] = "/tmp/ab_embed_log_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fd, STDERR_FILENO) >= 0);
    embedded_t quiet, loud;
    start(&quiet, AB_LOG_ERROR);
    start(&loud, AB_LOG_INFO);
    ab_broker_stop(quiet.b); /* its command thread logs "shutting down" at info ... */
    assert_int_equal(ab_broker_wait(quiet.b), 0); /* ... which its level (error) drops */
    finish(&loud);  /* its command thread and the destroying thread log at info */
    finish(&quiet); /* nothing: error only */
    fflush(stderr);
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    close(fd);
    int shutting = count_lines(path, " info shutting down");
    int stopped = count_lines(path, " info stopped");
    unlink(path);
    assert_int_equal(shutting, 1);
    assert_int_equal(stopped, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_while_another_thread_waits),
        cmocka_unit_test(test_log_levels_belong_to_each_broker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_dispatch_pool.c - a pool of worker processes (examples/worker) and
 * many start requests across threads through a real broker
 * (docs/PROTOCOL.md 7.12): every request ends; each run is started by
 * exactly one worker process (their "run T/R started" lines never name a
 * run twice, and the store holds one RUN_STARTED per run); killing a worker
 * in the middle loses nothing: what it held before RUN_STARTED is run by
 * another, what it had started is orphaned (never re-run) and is ended by
 * abandon_run; the whole store then verifies (`agentbus replay --all
 * --verify`).
 */
#include "testutil.h"

#include "broker_proc.h"
#define OUT_MAX 65536 /* replay --verify prints a line per run */
#include "cli_run.h"
#include "worker_proc.h"

#include <string.h>

#define POOL    3
#define THREADS 12
#define PER     4 /* requests per thread */
#define NREQ    (THREADS * PER)

#define SV(s) ((ab_str_t){(s), strlen(s)})

typedef struct pool {
    wproc_t w[POOL];
    char out[POOL][16384]; /* what each printed, for the started lines */
    size_t used[POOL];
} pool_t;

static pool_t pool;

static int teardown_pool(void **state)
{
    for (int i = 0; i < POOL; i++)
        if (pool.w[i].pid > 0) {
            kill(pool.w[i].pid, SIGKILL);
            waitpid(pool.w[i].pid, NULL, 0);
            pool.w[i].pid = 0;
        }
    return it_teardown(state);
}

/* Append what worker @p i printed so far (non-blocking). */
static void drain(int i)
{
    struct pollfd p = {.fd = pool.w[i].out, .events = POLLIN};
    while (pool.w[i].pid > 0 && poll(&p, 1, 0) > 0) {
        size_t room = sizeof(pool.out[i]) - 1 - pool.used[i];
        ssize_t n = room ? read(pool.w[i].out, pool.out[i] + pool.used[i], room) : 0;
        if (n <= 0)
            break;
        pool.used[i] += (size_t)n;
        pool.out[i][pool.used[i]] = '\0';
    }
}

/* How many times any worker printed "run THREAD/RUN started". */
static int started_lines(const char *thread, const char *run)
{
    char needle[256];
    snprintf(needle, sizeof needle, "run %s/%s started\n", thread, run);
    int n = 0;
    for (int i = 0; i < POOL; i++)
        for (const char *s = pool.out[i]; (s = strstr(s, needle)) != NULL; s++)
            n++;
    return n;
}

typedef struct req {
    uint64_t id;
    char thread[32], run[64];
} req_t;

/* The open requests now; each orphaned one is abandoned (its thread waits behind it: one
 * dispatched run per thread). @return how many were open. */
static int open_requests(ab_conn_t *c, ab_doc_t *doc, int *abandoned)
{
    ab_requests_t q = {AB_REQ_NONE, {0}, 0, 1000};
    ab_requests_reply_t r;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_requests(c, &q, doc, &r, IT_TIMEOUT, &err), AB_OK);
    static req_t orphan[NREQ];
    int n = 0, open = (int)r.nrequests;
    for (size_t i = 0; i < r.nrequests; i++)
        if (r.requests[i].orphaned) { /* copied: the abandon's answer reuses @p doc */
            snprintf(orphan[n].thread, sizeof orphan[n].thread, "%.*s",
                     (int)r.requests[i].thread.len, r.requests[i].thread.ptr);
            snprintf(orphan[n].run, sizeof orphan[n].run, "%.*s", (int)r.requests[i].run.len,
                     r.requests[i].run.ptr);
            n++;
        }
    for (int i = 0; i < n; i++) {
        ab_msg_t m = {.op = AB_OP_ABANDON_RUN}, a;
        m.u.abandon_run = (ab_abandon_run_t){SV(orphan[i].thread), SV(orphan[i].run), {0}};
        assert_int_equal(ab_conn_request(c, &m, NULL, 0, doc, &a, IT_TIMEOUT, &err), AB_OK);
        assert_int_equal(a.op, AB_OP_ABANDONED);
    }
    *abandoned += n;
    return open;
}

static void test_pool_runs_each_once(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    memset(&pool, 0, sizeof pool);
    for (int i = 0; i < POOL; i++) {
        char name[16];
        snprintf(name, sizeof name, "pool-%d", i + 1);
        const char *argv[] = {t->bp.cmd, name, "coder", NULL};
        worker_start_args(&pool.w[i], argv);
        running_worker = 0; /* teardown_pool stops them all */
    }
    ab_conn_t *c = it_connect(&t->bp);
    ab_doc_t *doc = NULL;
    assert_int_equal(ab_doc_new(&doc), AB_OK);
    tu_ctx_t tu;
    tu_ctx_init(&tu);
    const ab_val_t *in =
        tu_json(&tu, "{\"messages\":[],\"forwardedProps\":{\"steps\":3,\"step_ms\":15}}");
    static req_t reqs[NREQ];
    ab_error_t err = AB_ERROR_INIT;
    for (int k = 0; k < NREQ; k++) {
        req_t *q = &reqs[k];
        snprintf(q->thread, sizeof q->thread, "pool-t%d", k % THREADS);
        char key[32];
        snprintf(key, sizeof key, "pool-k%d", k);
        ab_start_run_t s = {SV("coder"), SV(q->thread), {0}, in, SV(key), AB_IF_BUSY_OMIT};
        ab_run_accepted_t a;
        assert_int_equal(ab_conn_start_run(c, &s, doc, &a, IT_TIMEOUT, &err), AB_OK);
        q->id = a.request;
        snprintf(q->run, sizeof q->run, "%.*s", (int)a.run.len, a.run.ptr);
        if (k == NREQ / 2) { /* kill one worker in the middle, whatever it holds */
            for (int i = 0; i < POOL; i++)
                drain(i);
            kill(pool.w[0].pid, SIGKILL);
            waitpid(pool.w[0].pid, NULL, 0);
            pool.w[0].pid = 0;
        }
    }
    /* every request ends; the runs the killed worker had started are orphaned, abandoned */
    int open = NREQ, abandoned = 0;
    for (int i = 0; i < 3000 && open > 0; i++) {
        for (int w = 1; w < POOL; w++)
            drain(w);
        open = open_requests(c, doc, &abandoned);
        if (open > 0)
            (void)ab_conn_wait(c, 10);
    }
    assert_int_equal(open, 0);
    print_message("%d runs abandoned after the kill\n", abandoned);
    for (int w = 1; w < POOL; w++)
        drain(w);
    /* each run started exactly once, by one worker, and the store holds it once */
    for (int k = 0; k < NREQ; k++) {
        ab_head_t h = it_head(c, doc, reqs[k].thread, reqs[k].run);
        if (h.last_seq == 0)
            fail_msg("request %llu's run %s never started", (unsigned long long)reqs[k].id,
                     reqs[k].run);
        int n = started_lines(reqs[k].thread, reqs[k].run);
        if (n > 1)
            fail_msg("run %s was started %d times", reqs[k].run, n);
    }
    char out[65536];
    assert_int_equal(it_run_cli(out, "replay --broker %s --all --verify", t->bp.cmd), 0);
    char want[64];
    snprintf(want, sizeof want, "verified: %d runs ok, 0 failed, 0 still active", NREQ);
    assert_non_null(strstr(out, want));
    tu_ctx_free(&tu);
    ab_doc_destroy(&doc);
    ab_conn_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pool_runs_each_once, it_setup, teardown_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_dispatch_moves.c - the kept moves of dispatch (broker/dispatch_moves.c) over an
 * in-memory request store whose request_move the test makes fail: a move the store refuses
 * retryably is kept, at most one per request (a start then an end of one request stay one
 * kept move, and the store gets the start first), tried again only after its back-off and
 * then once per try (not once per kept move), and stored once the store takes it; a hard
 * error parks it on its request (still kept, not retried on the timer) until its run notes
 * another move; a conflict drops it.
 */
#include "dispatch_int.h"
#include "testutil.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NREQ 3

/* The store: NREQ requests and the moves to started and ended it took, in order. */
struct ab_plugin_db {
    ab_request_t r[NREQ];
    ab_status_t fail; /* what request_move answers the moves to started and ended; AB_OK: none */
    unsigned calls;   /* request_move calls */
    struct {
        uint64_t id;
        ab_request_state_t to;
    } took[16];
    size_t ntook;
};

static ab_status_t fake_move(ab_plugin_db_t *db, uint64_t id, const ab_request_move_t *mv,
                             ab_request_t *out, ab_error_t *err)
{
    db->calls++;
    if (id == 0 || id > NREQ)
        return ab_error_set(err, AB_NOT_FOUND, "id", "no request %llu", (unsigned long long)id);
    ab_request_t *r = &db->r[id - 1];
    if (db->fail != AB_OK)
        return ab_error_set(err, db->fail, "store", "refused (test)");
    if (r->state != mv->expect_state || r->epoch != mv->expect_epoch)
        return ab_error_set(err, AB_CONFLICT, "", "moved on");
    r->state = mv->state;
    r->epoch = mv->epoch;
    assert_true(db->ntook < 16);
    db->took[db->ntook].id = id;
    db->took[db->ntook++].to = mv->state;
    *out = *r;
    return AB_OK;
}

typedef struct fx {
    ab_plugin_t p;
    ab_plugin_db_t db;
    ab__shared_t *b;
    ab__dispatch_t *d;
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->p.request_move = fake_move;
    f->b = calloc(1, sizeof(*f->b));
    f->d = calloc(1, sizeof(*f->d));
    assert_non_null(f->b);
    assert_non_null(f->d);
    f->d->b = f->b;
    f->d->p = &f->p;
    f->d->db = &f->db;
    /* loaded (dispatch_load.c): the table is the store's */
    f->d->ready = true;
    for (uint64_t i = 0; i < NREQ; i++) { /* assigned to w1 at epoch 1 */
        ab_request_t *r = &f->db.r[i];
        r->id = i + 1;
        r->state = AB_REQ_ASSIGNED;
        r->epoch = 1;
        r->attempts = 1;
        snprintf(r->thread, sizeof r->thread, "t-%llu", (unsigned long long)r->id);
        snprintf(r->run, sizeof r->run, "r-%llu", (unsigned long long)r->id);
        snprintf(r->worker, sizeof r->worker, "w1");
        snprintf(r->agent, sizeof r->agent, "coder");
        assert_true(ab__dq_add(f->d, r, ""));
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    free(f->d->q);
    free(f->d);
    free(f->b);
    free(f);
    return 0;
}

/* A commit of the event of status @p st of request @p id's run (epoch 1). */
static void commit(fx_t *f, uint64_t id, ab_run_status_t st)
{
    char thread[16], run[16];
    snprintf(thread, sizeof thread, "t-%llu", (unsigned long long)id);
    snprintf(run, sizeof run, "r-%llu", (unsigned long long)id);
    ab_append_event_t ev = {.thread = {thread, strlen(thread)},
                            .run = {run, strlen(run)},
                            .seq = 1,
                            .epoch = 1,
                            .status = st};
    ab__dispatch_committed(f->d, &ev, 1);
}

/* Run the dispatcher's timer as the writer does (poll for what tick asks) until the store
 * saw more than @p calls request_move calls, or the kept moves are gone. */
static void tick_until_call(fx_t *f, unsigned calls)
{
    for (int64_t end = ab__mono_ms() + 5000; ab__mono_ms() < end;) {
        long ms = ab__dispatch_tick(f->d);
        if (f->db.calls > calls || f->d->nmoves == 0)
            return;
        assert_true(ms >= 0 && ms <= AB__DISPATCH_MOVE_RETRY_MAX_MS); /* no spin, no stall */
        poll(NULL, 0, (int)ms);
    }
    fail_msg("no try of the kept moves within 5 s");
}

static ab__dreq_t *req(fx_t *f, uint64_t id)
{
    return ab__dq_by_id(f->d, id);
}

static void test_kept_once_per_request(void **state)
{
    fx_t *f = *state;
    f->db.fail = AB_UNAVAILABLE;
    commit(f, 1, AB_RUN_STATUS_ACTIVE);
    ab__dispatch_pump(f->d);
    assert_int_equal(f->db.calls, 1);
    assert_int_equal(f->d->nmoves, 1);           /* kept, not lost */
    assert_false(ab__dispatch_wants_pump(f->d)); /* its back-off runs */
    long due = ab__dispatch_tick(f->d);
    assert_true(due > 0 && due <= AB__DISPATCH_MOVE_RETRY_MS);
    /* more commits of the same runs: still one kept move per request */
    commit(f, 1, AB_RUN_STATUS_ACTIVE);
    commit(f, 1, AB_RUN_STATUS_FINISHED);
    commit(f, 2, AB_RUN_STATUS_ACTIVE);
    commit(f, 3, AB_RUN_STATUS_ACTIVE);
    commit(f, 2, AB_RUN_STATUS_ACTIVE);
    commit(f, 3, AB_RUN_STATUS_ERRORED);
    commit(f, 1, AB_RUN_STATUS_ACTIVE); /* a start after the end: the end stays */
    assert_int_equal(f->d->nmoves, NREQ);
    assert_int_equal(req(f, 1)->mv_to, AB_REQ_ENDED);
    assert_int_equal(req(f, 2)->mv_to, AB_REQ_STARTED);
    assert_int_equal(req(f, 3)->mv_to, AB_REQ_ENDED);
    ab__dispatch_pump(f->d); /* dirty, but the back-off is not over: the store is left alone */
    assert_int_equal(f->db.calls, 1);
    tick_until_call(f, 1);
    assert_int_equal(f->db.calls, 2); /* one try: it stops at the first refusal */
    assert_int_equal(f->d->nmoves, NREQ);
    f->db.fail = AB_OK;
    while (f->d->nmoves > 0)
        tick_until_call(f, f->db.calls);
    assert_int_equal(f->db.ntook, 5);
    assert_int_equal(f->db.took[0].id, 1); /* request 1: started, then ended */
    assert_int_equal(f->db.took[0].to, AB_REQ_STARTED);
    assert_int_equal(f->db.took[1].id, 1);
    assert_int_equal(f->db.took[1].to, AB_REQ_ENDED);
    assert_int_equal(f->db.took[2].id, 2);
    assert_int_equal(f->db.took[2].to, AB_REQ_STARTED);
    assert_int_equal(f->db.took[3].id, 3);
    assert_int_equal(f->db.took[3].to, AB_REQ_STARTED);
    assert_int_equal(f->db.took[4].to, AB_REQ_ENDED);
    assert_int_equal(f->d->nq, 1); /* 1 and 3 ended: they left the table */
    assert_int_equal(req(f, 2)->r.state, AB_REQ_STARTED);
    assert_false(ab__dq_kept(req(f, 2)));
    assert_int_equal(ab__dispatch_tick(f->d), -1); /* nothing more to wake for */
}

static void test_hard_error_parks(void **state)
{
    fx_t *f = *state;
    f->db.fail = AB_CORRUPT;
    commit(f, 1, AB_RUN_STATUS_ACTIVE);
    ab__dispatch_pump(f->d);
    assert_int_equal(f->db.calls, 1);
    assert_true(ab__dq_kept(req(f, 1))); /* still counts as started */
    assert_true(req(f, 1)->mv_parked);
    assert_int_equal(f->d->nmoves, 0);             /* but no timer for it */
    assert_int_equal(ab__dispatch_tick(f->d), -1); /* nothing to wake for */
    ab__dispatch_pump(f->d);
    assert_int_equal(f->db.calls, 1);
    f->db.fail = AB_OK;
    commit(f, 1, AB_RUN_STATUS_FINISHED); /* its run moved on: tried again */
    assert_int_equal(f->d->nmoves, 1);
    ab__dispatch_pump(f->d);
    assert_int_equal(f->db.ntook, 2);
    assert_null(req(f, 1)); /* ended */
}

static void test_conflict_drops(void **state)
{
    fx_t *f = *state;
    f->db.fail = AB_CONFLICT;
    commit(f, 2, AB_RUN_STATUS_ACTIVE);
    ab__dispatch_pump(f->d);
    assert_int_equal(f->db.calls, 1);
    assert_false(ab__dq_kept(req(f, 2)));
    assert_int_equal(f->d->nmoves, 0);
    assert_int_equal(ab__dispatch_tick(f->d), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_kept_once_per_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hard_error_parks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conflict_drops, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

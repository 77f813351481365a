/*
 * test_soak.c - the broker SIGKILLed at pseudo-random moments under load
 * (issue 6, "Faults"): 2 producers (ab_producer_t, one never-ending run
 * each) and 1 subscriber (ab_sub_t, scope thread) run in threads; the main
 * thread kills the broker K times (after the load made progress since the
 * last restart, plus a random delay from a printed seed) and restarts it on
 * the same data directory and ports. K = 3 normally, 20 with AB_LONG_TESTS=1;
 * AB_SOAK_SEED=N repeats a run.
 *
 * At the end the producers flush: every acknowledged event is in the store
 * exactly once (a replay of each run is contiguous from seq 1, each seq
 * once, at least as long as what was acknowledged and exactly that long
 * after the final flush), and the subscriber delivered every event of both
 * runs exactly once, in seq order.
 *
 * Threads never call cmocka asserts; every wait has a deadline; the broker
 * is killed and reaped in the teardown also on failure.
 */
#include "testutil.h"

#include "agentbus/producer.h"
#include "agentbus/subscriber.h"
#include "broker_proc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#define SP        2   /* producers */
#define SBATCH    20  /* events per flush */
#define SPROGRESS 200 /* events acknowledged after a restart before the next kill */
#define PHASE_MS  15000
#define FINISH_MS 30000

static char fixed_cmd[64], fixed_ev[64];

static int setup_fixed_ports(void **state)
{
    static const char *extra[5];
    bp_fixed_ports(fixed_cmd, fixed_ev, extra);
    return it_setup_with(state, extra);
}

typedef struct shared {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t acked_total; /* events acknowledged by all producers */
    atomic_int stop;      /* producers: finish (flush) and end */
    atomic_int sub_stop;
} shared_t;

typedef struct prod {
    shared_t *sh;
    char run[8];
    uint64_t acked; /* highest seq acknowledged at the end */
    int claims;
    int recreated;
    bool done; /* stopped with an empty outbox */
    char last_error[400];
} prod_t;

static void *prod_main(void *arg)
{
    prod_t *w = arg;
    ab_producer_opts_t o = {.client_name = "soak-producer",
                            .batch_max = SBATCH,
                            .timeout_ms = 1000,
                            .backoff_base_ms = 10,
                            .backoff_max_ms = 200,
                            .max_retries = 4};
    ab_producer_t *p = NULL;
    uint64_t next = 1, reported = 0;
    long deadline = 0;
    while (!w->done) {
        if (atomic_load(&w->sh->stop) && !deadline)
            deadline = ab__mono_ms() + FINISH_MS;
        if (deadline && ab__mono_ms() > deadline)
            break;
        ab_error_t err = AB_ERROR_INIT;
        if (!p) {
            if (ab_producer_new(&p, fixed_cmd, &o, &err) != AB_OK) {
                snprintf(w->last_error, sizeof(w->last_error), "new: %s", err.message);
                ab_producer_destroy(&p);
                continue; /* bounded by opts.timeout_ms */
            }
            uint64_t last = 0;
            if (ab_producer_claim(p, "soak", w->run, &last, &err) != AB_OK) {
                snprintf(w->last_error, sizeof(w->last_error), "claim: %s", err.message);
                ab_producer_destroy(&p);
                continue;
            }
            w->claims++;
            next = last + 1;
        }
        ab_status_t rc = AB_OK;
        while (rc == AB_OK && !atomic_load(&w->sh->stop)) {
            char body[256];
            it_body(body, sizeof(body), "soak", w->run, next, 0, 24);
            rc = ab_producer_publish_json(p, body, strlen(body), &err);
            if (rc == AB_OK && next++ % SBATCH == 0)
                rc = ab_producer_flush(p, 2000, &err);
            uint64_t a = ab_producer_acked_seq(p);
            if (a > reported) {
                pthread_mutex_lock(&w->sh->mu);
                w->sh->acked_total += a - reported;
                pthread_cond_broadcast(&w->sh->cv);
                pthread_mutex_unlock(&w->sh->mu);
                reported = a;
            }
        }
        if (rc == AB_OK)
            rc = ab_producer_flush(p, 2000, &err);
        if (rc == AB_OK) {
            w->acked = ab_producer_acked_seq(p);
            w->done = true;
        } else {
            snprintf(w->last_error, sizeof(w->last_error), "publish: %s: %s",
                     ab_status_name(err.code), err.message);
            if (ab_producer_acked_seq(p) > w->acked)
                w->acked = ab_producer_acked_seq(p);
            ab_producer_destroy(&p);
            w->recreated++;
        }
    }
    ab_producer_destroy(&p);
    return NULL;
}

typedef struct ssub {
    shared_t *sh;
    uint64_t next[SP]; /* next expected seq per run */
    uint64_t total;
    char error[400];
    ab_sub_stats_t stats;
    uint64_t seen[SP]; /* delivered per run, read by the main thread under sh->mu */
} ssub_t;

static int ssub_on_event(void *ud, const ab_sub_event_t *e)
{
    ssub_t *s = ud;
    int i = -1;
    if (e->ev.run.len == 2 && e->ev.run.ptr[0] == 'p')
        i = e->ev.run.ptr[1] - '0';
    if (i < 0 || i >= SP) {
        snprintf(s->error, sizeof(s->error), "unexpected run %.*s", (int)e->ev.run.len,
                 e->ev.run.ptr);
        return 1;
    }
    if (e->ev.seq != s->next[i]) {
        snprintf(s->error, sizeof(s->error), "run p%d: got seq %llu, expected %llu (%s)", i,
                 (unsigned long long)e->ev.seq, (unsigned long long)s->next[i],
                 e->replayed ? "replayed" : "live");
        return 1;
    }
    s->next[i]++;
    s->total++;
    pthread_mutex_lock(&s->sh->mu);
    s->seen[i] = e->ev.seq;
    pthread_cond_broadcast(&s->sh->cv);
    pthread_mutex_unlock(&s->sh->mu);
    return 0;
}

static void *ssub_main(void *arg)
{
    ssub_t *s = arg;
    for (int i = 0; i < SP; i++)
        s->next[i] = 1;
    ab_sub_opts_t o = {.scope = AB_SUB_THREAD,
                       .thread = "soak",
                       .on_event = ssub_on_event,
                       .ud = s,
                       .silence_ms = 1500,
                       .timeout_ms = 1000};
    ab_sub_t *sub = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_sub_new(&sub, fixed_cmd, &o, &err) != AB_OK) {
        snprintf(s->error, sizeof(s->error), "ab_sub_new: %s", err.message);
        return NULL;
    }
    while (!s->error[0] && !atomic_load(&s->sh->sub_stop)) {
        ab_error_clear(&err);
        ab_status_t rc = ab_sub_poll(sub, 100, &err);
        if (rc != AB_OK && !ab_status_retryable(rc) && !s->error[0])
            snprintf(s->error, sizeof(s->error), "poll: %s: %s", ab_status_name(rc), err.message);
    }
    s->stats = ab_sub_stats(sub);
    ab_sub_destroy(&sub);
    return NULL;
}

typedef struct verify {
    ab_doc_t *edoc;
    uint64_t next;
    char error[200];
} verify_t;

static ab_status_t verify_row(void *ud, const ab_stamp_t *st, const uint8_t *b, size_t len,
                              ab_error_t *err)
{
    verify_t *v = ud;
    (void)st;
    ab_event_t ev;
    if (ab_event_decode(v->edoc, b, len, NULL, &ev, err) != AB_OK)
        snprintf(v->error, sizeof(v->error), "undecodable event after seq %llu",
                 (unsigned long long)(v->next - 1));
    else if (ev.seq != v->next && !v->error[0])
        snprintf(v->error, sizeof(v->error), "seq %llu where %llu was due (duplicate or hole)",
                 (unsigned long long)ev.seq, (unsigned long long)v->next);
    v->next++;
    return AB_OK;
}

static uint64_t store_count(ab_conn_t *c, ab_doc_t *doc, const char *run)
{
    verify_t v = {.next = 1};
    assert_int_equal(ab_doc_new(&v.edoc), AB_OK);
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay.scope = AB_REPLAY_RUN;
    q.u.replay.thread = (ab_str_t){"soak", 4};
    q.u.replay.run = (ab_str_t){run, strlen(run)};
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t rc = ab_conn_replay(c, &q, verify_row, &v, doc, NULL, IT_TIMEOUT, &err);
    ab_doc_destroy(&v.edoc);
    if (rc != AB_OK)
        fail_msg("replay %s: %s", run, err.message);
    if (v.error[0])
        fail_msg("run %s in the store: %s", run, v.error);
    return v.next - 1;
}

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static void test_soak_kill9(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    const char *lt = getenv("AB_LONG_TESTS");
    int kills_wanted = lt && strcmp(lt, "1") == 0 ? 20 : 3;
    const char *se = getenv("AB_SOAK_SEED");
    uint64_t seed = se ? strtoull(se, NULL, 10) : (uint64_t)time(NULL) ^ (uint64_t)getpid();
    if (!seed)
        seed = 1;
    print_message("soak: seed %llu (AB_SOAK_SEED=%llu repeats it), %d kills\n",
                  (unsigned long long)seed, (unsigned long long)seed, kills_wanted);
    uint64_t rng = seed;
    long t0 = ab__mono_ms();

    shared_t sh = {.acked_total = 0};
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.cv, NULL);
    atomic_init(&sh.stop, 0);
    atomic_init(&sh.sub_stop, 0);
    ssub_t sub = {.sh = &sh};
    prod_t w[SP];
    pthread_t sth, wth[SP];
    assert_int_equal(pthread_create(&sth, NULL, ssub_main, &sub), 0);
    for (int i = 0; i < SP; i++) {
        w[i] = (prod_t){.sh = &sh};
        snprintf(w[i].run, sizeof(w[i].run), "p%d", i);
        assert_int_equal(pthread_create(&wth[i], NULL, prod_main, &w[i]), 0);
    }

    int kills = 0, restart_failed = 0, stalled = 0;
    for (int k = 0; k < kills_wanted; k++) {
        /* wait for the load to make progress since the last restart */
        pthread_mutex_lock(&sh.mu);
        uint64_t want = sh.acked_total + SPROGRESS;
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += PHASE_MS / 1000;
        while (sh.acked_total < want && pthread_cond_timedwait(&sh.cv, &sh.mu, &dl) == 0)
            ;
        bool progressed = sh.acked_total >= want;
        pthread_mutex_unlock(&sh.mu);
        if (!progressed) {
            stalled = k + 1;
            break;
        }
        /* then a random moment within the next 0..400 ms */
        long delay = (long)(rng_next(&rng) % 400);
        struct timespec ts = {.tv_sec = 0, .tv_nsec = delay * 1000000L};
        nanosleep(&ts, NULL); /* the random moment itself: nothing to poll for */
        bp_kill(&t->bp);
        kills++;
        if (bp_restart(&t->bp) != 0) {
            restart_failed = k + 1;
            break;
        }
    }
    atomic_store(&sh.stop, 1);
    for (int i = 0; i < SP; i++)
        pthread_join(wth[i], NULL);

    /* the store: each run contiguous from 1, each seq once, all acked kept */
    uint64_t found[SP] = {0};
    uint64_t events = 0;
    ab_conn_t *c = NULL;
    if (!restart_failed) {
        c = it_connect(&t->bp);
        for (int i = 0; i < SP; i++) {
            found[i] = store_count(c, t->doc, w[i].run);
            events += found[i];
        }
    }
    /* the subscriber catches up with the store (bounded wait on its
     * progress), then gets a short grace to show a duplicate after the last
     * event (it would stop with an error) and stops */
    if (!restart_failed) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += FINISH_MS / 1000;
        pthread_mutex_lock(&sh.mu);
        while ((sub.seen[0] < found[0] || sub.seen[1] < found[1]) &&
               pthread_cond_timedwait(&sh.cv, &sh.mu, &dl) == 0)
            ;
        pthread_mutex_unlock(&sh.mu);
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 300 * 1000000L};
        nanosleep(&ts, NULL);
    }
    atomic_store(&sh.sub_stop, 1);
    pthread_join(sth, NULL);
    ab_conn_destroy(&c);
    pthread_mutex_destroy(&sh.mu);
    pthread_cond_destroy(&sh.cv);

    print_message("soak: %d kills survived in %ld ms; %llu events checked in the store\n", kills,
                  ab__mono_ms() - t0, (unsigned long long)events);
    for (int i = 0; i < SP; i++)
        print_message("producer %s: acked %llu, stored %llu, claims %d, re-created %d (%s)\n",
                      w[i].run, (unsigned long long)w[i].acked, (unsigned long long)found[i],
                      w[i].claims, w[i].recreated, w[i].last_error);
    print_message("subscriber: %llu delivered, %llu replays, %llu holes, %llu dups, "
                  "%llu reconnects\n",
                  (unsigned long long)sub.total, (unsigned long long)sub.stats.replays,
                  (unsigned long long)sub.stats.holes, (unsigned long long)sub.stats.dups,
                  (unsigned long long)sub.stats.reconnects);
    if (restart_failed)
        fail_msg("restart %d failed", restart_failed);
    if (stalled)
        fail_msg("no progress of the load within %d ms before kill %d", PHASE_MS, stalled);
    assert_int_equal(kills, kills_wanted);
    for (int i = 0; i < SP; i++) {
        if (!w[i].done)
            fail_msg("producer %s did not finish: %s", w[i].run, w[i].last_error);
        assert_true(found[i] >= w[i].acked);
        assert_int_equal(found[i], w[i].acked); /* after the final flush */
    }
    if (sub.error[0])
        fail_msg("subscriber: %s", sub.error);
    for (int i = 0; i < SP; i++)
        assert_int_equal(sub.next[i] - 1, found[i]);
    assert_int_equal(sub.total, events);
    assert_int_equal(sub.stats.delivered, events);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_soak_kill9, setup_fixed_ports, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

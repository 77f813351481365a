/*
 * test_fabric.c - the whole fabric with real processes on loopback
 * (issue 4, "Tests"):
 *  - the broker is killed with SIGKILL and restarted (same ports) while
 *    ab_producer_t workers and ab_sub_t subscribers run in threads: every
 *    producer finishes its run (re-creating itself, claiming and continuing
 *    from last_seq when its retries run out: the documented restart path)
 *    and every subscriber delivers each run's events exactly once, in seq
 *    order, as many as the producers got acknowledged;
 *  - a worker process killed with SIGKILL mid-run is replaced by one that
 *    claims the run and continues from the last committed seq; the old
 *    epoch (and an older producer) is then fenced;
 *  - `agentbus tail --json` of a whole demo, split per run, passes
 *    `agentbus validate --lifecycle`;
 *  - `agentbus replay --verify` fails (exit 1, naming the hole) on a store
 *    where a middle chunk of a run was deleted.
 *
 * Threads never call cmocka asserts: they record what happened and the main
 * thread checks it after joining. Every wait has a deadline; every process
 * started here is stopped (or killed) and reaped, also on failure.
 */
#include "testutil.h"

#include "agentbus/producer.h"
#include "agentbus/subscriber.h"
#include "broker_proc.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/socket.h>

/* ---- shared helpers --------------------------------------------------------- */

static char fixed_cmd[64], fixed_ev[64];

/* A broker on fixed loopback ports, so a restarted one is where clients
 * reconnect (the later --cmd/--events win over broker_proc's ephemeral ones). */
static int setup_fixed_ports(void **state)
{
    static const char *extra[5];
    bp_fixed_ports(fixed_cmd, fixed_ev, extra);
    return it_setup_with(state, extra);
}

/* Run a shell command, capture stdout (and what it redirects) into @p out. */
static int run_cmd(const char *cmd, char *out, size_t size)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- 1. SIGKILL of the broker under producers and subscribers ---------------- */

#define KP      3    /* producer workers, one run each */
#define KEVENTS 3000 /* events per run (RUN_STARTED ... RUN_FINISHED) */
#define KBATCH  20
#define KSUBS   2 /* one thread subscriber, one "all" subscriber */
#define KRUN_MS 60000

typedef struct kshared {
    const char *endpoint;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int halfway; /* workers past half their run */
    atomic_int stop;
} kshared_t;

typedef struct kworker {
    kshared_t *sh;
    int id;
    char run[16];
    uint64_t acked;   /* highest seq acknowledged at the end */
    int recreated;    /* producers re-created after a failure */
    int claims;       /* claims made (first included) */
    uint64_t resumed; /* a last_seq learned by a later claim */
    char last_error[400];
    atomic_bool done; /* read by the main thread before the join */
} kworker_t;

static void kworker_note(kworker_t *w, const char *what, const ab_error_t *err)
{
    snprintf(w->last_error, sizeof(w->last_error), "%s: %s: %s", what, ab_status_name(err->code),
             err->message);
}

static void *kworker_main(void *arg)
{
    kworker_t *w = arg;
    ab_producer_opts_t o = {.client_name = "fabric-worker",
                            .batch_max = KBATCH,
                            .timeout_ms = 1000,
                            .backoff_base_ms = 10,
                            .backoff_max_ms = 200,
                            .max_retries = 4};
    ab_producer_t *p = NULL;
    uint64_t next = 1;
    bool told = false;
    long deadline = ab__mono_ms() + KRUN_MS;
    while (!atomic_load(&w->done) && !atomic_load(&w->sh->stop) && ab__mono_ms() < deadline) {
        ab_error_t err = AB_ERROR_INIT;
        if (!p) {
            /* (re)create, claim, continue from the last committed seq */
            if (ab_producer_new(&p, w->sh->endpoint, &o, &err) != AB_OK) {
                kworker_note(w, "new", &err);
                ab_producer_destroy(&p);
                continue; /* bounded by opts.timeout_ms */
            }
            uint64_t last = 0;
            if (ab_producer_claim(p, "fab", w->run, &last, &err) != AB_OK) {
                kworker_note(w, "claim", &err);
                ab_producer_destroy(&p);
                continue;
            }
            if (w->claims++ > 0)
                w->resumed = last;
            next = last + 1;
        }
        ab_status_t rc = AB_OK;
        while (rc == AB_OK && next <= KEVENTS) {
            char body[256];
            it_body(body, sizeof(body), "fab", w->run, next, KEVENTS, 32);
            rc = ab_producer_publish_json(p, body, strlen(body), &err);
            if (rc == AB_OK)
                next++;
            if (rc == AB_OK && (next % KBATCH == 0 || next > KEVENTS))
                rc = ab_producer_flush(p, 2000, &err);
            if (rc == AB_OK && !told && next > KEVENTS / 2) {
                told = true;
                pthread_mutex_lock(&w->sh->mu);
                w->sh->halfway++;
                pthread_cond_broadcast(&w->sh->cv);
                pthread_mutex_unlock(&w->sh->mu);
            }
        }
        if (rc == AB_OK) {
            w->acked = ab_producer_acked_seq(p);
            atomic_store(&w->done, true);
        } else {
            /* retries ran out (the broker is gone) or the session was lost:
             * the restart path of a worker */
            kworker_note(w, "publish", &err);
            ab_producer_destroy(&p);
            w->recreated++;
        }
    }
    ab_producer_destroy(&p);
    return NULL;
}

typedef struct ksub {
    kshared_t *sh;
    ab_sub_scope_t scope;
    uint64_t next[KP]; /* next expected seq per run */
    uint64_t total;
    uint64_t last_pos;
    char error[400];
    ab_sub_stats_t stats;
} ksub_t;

static int ksub_on_event(void *ud, const ab_sub_event_t *e)
{
    ksub_t *s = ud;
    int i = -1;
    if (e->ev.run.len == 2 && e->ev.run.ptr[0] == 'w')
        i = e->ev.run.ptr[1] - '0';
    if (i < 0 || i >= KP) {
        snprintf(s->error, sizeof(s->error), "unexpected run %.*s", (int)e->ev.run.len,
                 e->ev.run.ptr);
        return 1;
    }
    if (e->ev.seq != s->next[i]) {
        snprintf(s->error, sizeof(s->error), "run w%d: got seq %llu, expected %llu (%s)", i,
                 (unsigned long long)e->ev.seq, (unsigned long long)s->next[i],
                 e->replayed ? "replayed" : "live");
        return 1;
    }
    if (e->stamp.pos <= s->last_pos && s->scope == AB_SUB_ALL) {
        snprintf(s->error, sizeof(s->error), "position %llu after %llu",
                 (unsigned long long)e->stamp.pos, (unsigned long long)s->last_pos);
        return 1;
    }
    s->last_pos = e->stamp.pos;
    s->next[i]++;
    s->total++;
    return 0;
}

static void *ksub_main(void *arg)
{
    ksub_t *s = arg;
    for (int i = 0; i < KP; i++)
        s->next[i] = 1;
    ab_sub_opts_t o = {.scope = s->scope,
                       .thread = s->scope == AB_SUB_THREAD ? "fab" : NULL,
                       .on_event = ksub_on_event,
                       .ud = s,
                       .silence_ms = 1500,
                       .timeout_ms = 1000};
    ab_sub_t *sub = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_sub_new(&sub, s->sh->endpoint, &o, &err) != AB_OK) {
        snprintf(s->error, sizeof(s->error), "ab_sub_new: %s", err.message);
        return NULL;
    }
    long deadline = ab__mono_ms() + KRUN_MS;
    while (s->total < (uint64_t)KP * KEVENTS && !s->error[0] && ab__mono_ms() < deadline &&
           !atomic_load(&s->sh->stop)) {
        ab_error_clear(&err);
        ab_status_t rc = ab_sub_poll(sub, 100, &err);
        if (rc != AB_OK && !ab_status_retryable(rc) && !s->error[0])
            snprintf(s->error, sizeof(s->error), "poll: %s: %s", ab_status_name(rc), err.message);
    }
    /* nothing more may arrive: no duplicate after the last event */
    if (!s->error[0] && s->total == (uint64_t)KP * KEVENTS) {
        ab_error_clear(&err);
        if (ab_sub_poll(sub, 300, &err) != AB_OK && !ab_status_retryable(err.code))
            snprintf(s->error, sizeof(s->error), "final poll: %s", err.message);
    }
    s->stats = ab_sub_stats(sub);
    ab_sub_destroy(&sub);
    return NULL;
}

static void test_broker_kill9_producers_and_subscribers(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    kshared_t sh = {.endpoint = fixed_cmd, .halfway = 0};
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.cv, NULL);
    atomic_init(&sh.stop, 0);
    ksub_t subs[KSUBS] = {{.sh = &sh, .scope = AB_SUB_THREAD}, {.sh = &sh, .scope = AB_SUB_ALL}};
    kworker_t w[KP];
    pthread_t sth[KSUBS], wth[KP];
    for (int i = 0; i < KSUBS; i++)
        assert_int_equal(pthread_create(&sth[i], NULL, ksub_main, &subs[i]), 0);
    for (int i = 0; i < KP; i++) {
        w[i] = (kworker_t){.sh = &sh, .id = i};
        snprintf(w[i].run, sizeof(w[i].run), "w%d", i);
        assert_int_equal(pthread_create(&wth[i], NULL, kworker_main, &w[i]), 0);
    }
    /* kill as soon as every worker is past half its run (bounded wait) */
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 30;
    pthread_mutex_lock(&sh.mu);
    while (sh.halfway < KP && pthread_cond_timedwait(&sh.cv, &sh.mu, &dl) == 0)
        ;
    int halfway = sh.halfway;
    pthread_mutex_unlock(&sh.mu);
    int done_before = 0;
    for (int i = 0; i < KP; i++)
        done_before += atomic_load(&w[i].done);
    bp_kill(&t->bp);
    int restarted = bp_restart(&t->bp);
    if (restarted != 0)
        atomic_store(&sh.stop, 1); /* nothing can finish: end the threads now */
    for (int i = 0; i < KP; i++)
        pthread_join(wth[i], NULL);
    for (int i = 0; i < KSUBS; i++)
        pthread_join(sth[i], NULL);
    pthread_mutex_destroy(&sh.mu);
    pthread_cond_destroy(&sh.cv);

    assert_int_equal(restarted, 0);
    assert_int_equal(halfway, KP);
    print_message("killed with %d of %d runs finished\n", done_before, KP);
    for (int i = 0; i < KP; i++) {
        print_message("worker %d: acked %llu, claims %d, re-created %d, resumed at %llu (%s)\n", i,
                      (unsigned long long)w[i].acked, w[i].claims, w[i].recreated,
                      (unsigned long long)w[i].resumed, w[i].last_error);
        if (!atomic_load(&w[i].done))
            fail_msg("worker %d did not finish its run: %s", i, w[i].last_error);
        assert_int_equal(w[i].acked, KEVENTS);
    }
    for (int k = 0; k < KSUBS; k++) {
        ksub_t *s = &subs[k];
        print_message("subscriber %d: %llu delivered, %llu replays, %llu holes, %llu dups, "
                      "%llu reconnects\n",
                      k, (unsigned long long)s->total, (unsigned long long)s->stats.replays,
                      (unsigned long long)s->stats.holes, (unsigned long long)s->stats.dups,
                      (unsigned long long)s->stats.reconnects);
        if (s->error[0])
            fail_msg("subscriber %d: %s", k, s->error);
        /* every acknowledged event, exactly once, in order */
        for (int i = 0; i < KP; i++)
            assert_int_equal(s->next[i] - 1, w[i].acked);
        assert_int_equal(s->total, (uint64_t)KP * KEVENTS);
        assert_int_equal(s->stats.delivered, (uint64_t)KP * KEVENTS);
        assert_true(s->stats.reconnects >= 1 || s->stats.replays >= 2);
    }
}

/* ---- 2. a worker process killed mid-run, replaced and fenced ---------------- */

#define WK_FIRST 5  /* events of the first (older) producer */
#define WK_CHILD 40 /* events the child has acknowledged before it reports */

/* The child worker: claim, publish WK_CHILD events, report its epoch and
 * acked seq on @p fd, then go on publishing until killed (at most 30 s). */
static void child_worker(const char *ep, int fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    ab_producer_opts_t o = {.client_name = "fabric-child", .batch_max = 10, .timeout_ms = 2000};
    ab_producer_t *p = NULL;
    ab_error_t err = AB_ERROR_INIT;
    uint64_t last = 0;
    if (ab_producer_new(&p, ep, &o, &err) != AB_OK ||
        ab_producer_claim(p, "kw", "r", &last, &err) != AB_OK)
        _exit(3);
    long deadline = ab__mono_ms() + 30000;
    bool told = false;
    for (uint64_t seq = last + 1; ab__mono_ms() < deadline; seq++) {
        char body[256];
        it_body(body, sizeof(body), "kw", "r", seq, 0, 8);
        if (ab_producer_publish_json(p, body, strlen(body), &err) != AB_OK)
            _exit(4);
        if (!told && seq == last + WK_CHILD) {
            if (ab_producer_flush(p, 2000, &err) != AB_OK)
                _exit(5);
            uint64_t msg[2] = {ab_producer_epoch(p), ab_producer_acked_seq(p)};
            if (write(fd, msg, sizeof(msg)) != (ssize_t)sizeof(msg))
                _exit(6);
            told = true;
        }
    }
    _exit(0);
}

typedef struct epochs {
    ab_doc_t *doc;
    uint64_t next, bad;
    uint64_t epoch_at[3]; /* epoch of seq 1, of seq WK_FIRST + 1 and of the last */
} epochs_t;

static ab_status_t epochs_row(void *ud, const ab_stamp_t *st, const uint8_t *b, size_t len,
                              ab_error_t *err)
{
    epochs_t *k = ud;
    (void)st;
    ab_event_t ev;
    memset(&ev, 0, sizeof(ev));
    if (ab_event_decode(k->doc, b, len, NULL, &ev, err) != AB_OK || ev.seq != k->next) {
        k->bad++;
        return AB_OK;
    }
    if (ev.seq == 1)
        k->epoch_at[0] = ev.epoch;
    if (ev.seq == WK_FIRST + 1)
        k->epoch_at[1] = ev.epoch;
    k->epoch_at[2] = ev.epoch;
    k->next++;
    return AB_OK;
}

static void test_worker_killed_replaced_fenced(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_error_t err = AB_ERROR_INIT;
    /* an older producer of the run: it will be stale too */
    ab_producer_opts_t po = {.client_name = "fabric-old", .timeout_ms = IT_TIMEOUT};
    ab_producer_t *old = NULL;
    assert_int_equal(ab_producer_new(&old, t->bp.cmd, &po, &err), AB_OK);
    assert_int_equal(ab_producer_claim(old, "kw", "r", NULL, &err), AB_OK);
    for (uint64_t s = 1; s <= WK_FIRST; s++) {
        char body[256];
        it_body(body, sizeof(body), "kw", "r", s, 0, 8);
        assert_int_equal(ab_producer_publish_json(old, body, strlen(body), &err), AB_OK);
    }
    assert_int_equal(ab_producer_flush(old, IT_TIMEOUT, &err), AB_OK);
    uint64_t old_epoch = ab_producer_epoch(old);

    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        child_worker(t->bp.cmd, fds[1]);
    }
    close(fds[1]);
    uint64_t msg[2] = {0, 0};
    struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
    bool reported = poll(&pfd, 1, 20000) > 0 && read(fds[0], msg, sizeof(msg)) == sizeof(msg);
    /* the worker is now publishing: kill it mid-run, whatever happened */
    kill(pid, SIGKILL);
    int st = 0;
    waitpid(pid, &st, 0);
    close(fds[0]);
    if (!reported) {
        ab_producer_destroy(&old);
        fail_msg("the child worker did not report (exit status 0x%x)", st);
    }
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    uint64_t child_epoch = msg[0], child_acked = msg[1];
    assert_true(child_epoch > old_epoch);
    assert_int_equal(child_acked, WK_FIRST + WK_CHILD);

    /* the replacement: claim, continue from the last committed seq, finish */
    ab_producer_t *rep = NULL;
    uint64_t last = 0;
    assert_int_equal(ab_producer_new(&rep, t->bp.cmd, &po, &err), AB_OK);
    assert_int_equal(ab_producer_claim(rep, "kw", "r", &last, &err), AB_OK);
    print_message("child acked %llu, the store has %llu\n", (unsigned long long)child_acked,
                  (unsigned long long)last);
    assert_true(last >= child_acked);
    assert_true(ab_producer_epoch(rep) > child_epoch);
    assert_int_equal(ab_producer_next_seq(rep), last + 1);
    uint64_t end = last + 2;
    for (uint64_t s = last + 1; s <= end; s++) {
        char body[256];
        it_body(body, sizeof(body), "kw", "r", s, end, 8);
        assert_int_equal(ab_producer_publish_json(rep, body, strlen(body), &err), AB_OK);
    }
    assert_int_equal(ab_producer_flush(rep, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(ab_producer_acked_seq(rep), end);

    /* the killed worker's epoch is fenced: what a zombie copy would send */
    ab_conn_t *c = it_connect(&t->bp);
    ab_buf_t ev = AB_BUF_INIT;
    char body[256];
    it_body(body, sizeof(body), "kw", "r", end + 1, 0, 8);
    it_event_json(&ev, "kw", "r", end + 1, child_epoch, body);
    ab_error_t rej = AB_ERROR_INIT;
    ab_result_t r = it_publish1(c, t->doc, &ev, &rej);
    ab_buf_free(&ev);
    assert_int_equal(r.status, AB_RESULT_REJECTED);
    assert_int_equal(rej.code, AB_FENCED);
    /* and the older producer, still holding its epoch, gets AB_FENCED too */
    char more[256];
    it_body(more, sizeof(more), "kw", "r", WK_FIRST + 1, 0, 8);
    ab_error_clear(&err);
    ab_status_t rc = ab_producer_publish_json(old, more, strlen(more), &err);
    if (rc == AB_OK)
        rc = ab_producer_flush(old, IT_TIMEOUT, &err);
    assert_int_equal(rc, AB_FENCED);

    /* the run in the store: contiguous 1..end, epochs in claim order */
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay.scope = AB_REPLAY_RUN;
    q.u.replay.thread = (ab_str_t){"kw", 2};
    q.u.replay.run = (ab_str_t){"r", 1};
    epochs_t k = {.next = 1};
    assert_int_equal(ab_doc_new(&k.doc), AB_OK);
    rc = ab_conn_replay(c, &q, epochs_row, &k, t->doc, NULL, IT_TIMEOUT, &err);
    ab_doc_destroy(&k.doc);
    ab_producer_destroy(&old);
    ab_producer_destroy(&rep);
    ab_conn_destroy(&c);
    assert_int_equal(rc, AB_OK);
    assert_int_equal(k.bad, 0);
    assert_int_equal(k.next - 1, end);
    assert_int_equal(k.epoch_at[0], old_epoch);
    assert_int_equal(k.epoch_at[1], child_epoch);
    assert_true(k.epoch_at[2] > child_epoch);
}

/* ---- 3. tail --json of a demo passes validate --lifecycle, run by run ------- */

#define MAX_GROUPS 64

/* Setup without a broker: the demo brings its own first. */
static int setup_nobroker(void **state)
{
    it_t *t = calloc(1, sizeof(*t));
    *state = t;
    if (!t || ab_doc_new(&t->doc) != AB_OK)
        return -1;
    t->bp.out_fd = -1;
    t->available = bp_available();
    return 0;
}

typedef struct group {
    char key[160];
    FILE *f;
    uint64_t next; /* next expected seq in the tail output */
    uint64_t n;
} group_t;

static void test_demo_tail_json_validates(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char dir[] = "/tmp/agentbus-it-demo-XXXXXX";
    assert_non_null(mkdtemp(dir));
    snprintf(t->bp.dir, sizeof(t->bp.dir), "%s", dir);
    t->bp.own_dir = true; /* removed by the teardown, whatever happens */
    static char out[1 << 16];
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "timeout -s KILL 120 %s demo --data '%s/data' --pace 0 --no-color >/dev/null 2>&1; "
             "echo \"exit=$?\"",
             AB_AGENTBUS_BIN, dir);
    assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
    if (strstr(out, "exit=0") == NULL)
        fail_msg("agentbus demo: %s", out);

    /* a broker on the demo's data; the history of the whole bus */
    char data[300];
    snprintf(data, sizeof(data), "%s/data", dir);
    assert_int_equal(bp_start(&t->bp, data, NULL), 0);
    snprintf(t->bp.dir, sizeof(t->bp.dir), "%s", dir); /* the teardown removes it all */
    t->bp.own_dir = true;
    snprintf(cmd, sizeof(cmd), "%s replay --broker '%s' --all | wc -l", AB_AGENTBUS_BIN, t->bp.cmd);
    assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
    long total = strtol(out, NULL, 10);
    assert_true(total > 50);

    char tailf[300];
    snprintf(tailf, sizeof(tailf), "%s/tail.jsonl", dir);
    snprintf(cmd, sizeof(cmd),
             "timeout -s KILL 60 %s tail --broker '%s' --json --from-start --count %ld "
             "--for 30 >'%s' 2>'%s.err'; echo \"exit=$?\"; cat '%s.err'",
             AB_AGENTBUS_BIN, t->bp.cmd, total, tailf, tailf, tailf);
    assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
    if (strstr(out, "exit=0") == NULL)
        fail_msg("agentbus tail: %s", out);

    /* split the tail output by run, keeping only each line's "event" */
    static group_t g[MAX_GROUPS];
    int ng = 0;
    long lines = 0;
    FILE *in = fopen(tailf, "r");
    assert_non_null(in);
    static char line[1 << 16];
    while (fgets(line, sizeof(line), in)) {
        json_error_t jerr;
        json_t *o = json_loads(line, 0, &jerr);
        if (!o) {
            fclose(in);
            fail_msg("tail line %ld is not JSON: %s: %s", lines + 1, jerr.text, line);
        }
        const char *th = json_string_value(json_object_get(o, "thread"));
        const char *run = json_string_value(json_object_get(o, "run"));
        json_int_t seq = json_integer_value(json_object_get(o, "seq"));
        json_t *ev = json_object_get(o, "event");
        assert_non_null(th);
        assert_non_null(run);
        assert_non_null(ev);
        char key[160];
        snprintf(key, sizeof(key), "%s/%s", th, run);
        int i = 0;
        while (i < ng && strcmp(g[i].key, key) != 0)
            i++;
        if (i == ng) {
            assert_true(ng < MAX_GROUPS);
            snprintf(g[i].key, sizeof(g[i].key), "%s", key);
            char path[320];
            snprintf(path, sizeof(path), "%s/run-%d.jsonl", dir, i);
            g[i].f = fopen(path, "w");
            assert_non_null(g[i].f);
            g[i].next = 1;
            g[i].n = 0;
            ng++;
        }
        assert_int_equal((uint64_t)seq, g[i].next); /* exactly once, in order */
        g[i].next++;
        g[i].n++;
        char *text = json_dumps(ev, JSON_COMPACT);
        assert_non_null(text);
        fprintf(g[i].f, "%s\n", text);
        free(text);
        json_decref(o);
        lines++;
    }
    fclose(in);
    for (int i = 0; i < ng; i++)
        fclose(g[i].f);
    assert_int_equal(lines, total);
    assert_true(ng >= 6); /* the demo's default six runs at least */
    for (int i = 0; i < ng; i++) {
        snprintf(cmd, sizeof(cmd), "%s validate --lifecycle --quiet '%s/run-%d.jsonl' 2>&1",
                 AB_AGENTBUS_BIN, dir, i);
        int rc = run_cmd(cmd, out, sizeof(out));
        if (rc != 0 || strstr(out, " 0 failed") == NULL)
            fail_msg("run %s (%llu events): validate --lifecycle exit %d: %s", g[i].key,
                     (unsigned long long)g[i].n, rc, out);
    }
    print_message("%ld events in %d runs, each passes validate --lifecycle\n", lines, ng);
    assert_int_equal(bp_stop(&t->bp), 0);
}

/* ---- 4. replay --verify on a store with a chunk removed -------------------- */

static void test_verify_finds_removed_chunk(void **state)
{
    enum { N = 30, PER = 5 };
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    ab_conn_t *c = it_connect(&t->bp);
    ab_buf_t ev[PER];
    for (uint64_t from = 1; from <= N; from += PER) {
        /* one publish = one commit = one chunk row of the run */
        for (int i = 0; i < PER; i++) {
            ev[i] = (ab_buf_t)AB_BUF_INIT;
            it_event(&ev[i], "hole", "r", from + (uint64_t)i, N, 1);
        }
        const ab_result_t *res = NULL;
        ab_error_t err = AB_ERROR_INIT;
        ab_status_t rc = ab_conn_publish(c, ev, PER, t->doc, &res, IT_TIMEOUT, &err);
        for (int i = 0; i < PER; i++) {
            if (rc == AB_OK)
                assert_int_equal(res[i].status, AB_RESULT_ACCEPTED);
            ab_buf_free(&ev[i]);
        }
        assert_int_equal(rc, AB_OK);
    }
    ab_conn_destroy(&c);
    /* before: the audit passes */
    static char out[1 << 14];
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s replay --broker '%s' --thread hole --verify 2>&1",
             AB_AGENTBUS_BIN, t->bp.cmd);
    if (run_cmd(cmd, out, sizeof(out)) != 0)
        fail_msg("verify of the intact run failed: %s", out);
    assert_int_equal(bp_stop(&t->bp), 0);

    /* remove a middle chunk of the run with our own SQLite connection */
    char db[320];
    snprintf(db, sizeof(db), "%s/agentbus.db", t->bp.dir);
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_stmt *q = NULL;
    assert_int_equal(
        sqlite3_prepare_v2(h, "SELECT rowid, first_seq, last_seq FROM chunks ORDER BY first_seq",
                           -1, &q, NULL),
        SQLITE_OK);
    int64_t rowid[N], first[N], lastseq[N];
    int nch = 0;
    while (nch < N && sqlite3_step(q) == SQLITE_ROW) {
        rowid[nch] = sqlite3_column_int64(q, 0);
        first[nch] = sqlite3_column_int64(q, 1);
        lastseq[nch] = sqlite3_column_int64(q, 2);
        nch++;
    }
    sqlite3_finalize(q);
    int mid = nch / 2;
    char sql[128];
    snprintf(sql, sizeof(sql), "DELETE FROM chunks WHERE rowid = %lld", (long long)rowid[mid]);
    int drc = nch >= 3 ? sqlite3_exec(h, sql, NULL, NULL, NULL) : SQLITE_ERROR;
    int changes = sqlite3_changes(h);
    sqlite3_close(h);
    assert_true(nch >= 3);
    assert_int_equal(drc, SQLITE_OK);
    assert_int_equal(changes, 1);
    print_message("removed chunk %d of %d: seqs %lld..%lld\n", mid + 1, nch, (long long)first[mid],
                  (long long)lastseq[mid]);

    assert_int_equal(bp_restart(&t->bp), 0);
    snprintf(cmd, sizeof(cmd), "%s replay --broker '%s' --thread hole --verify 2>&1",
             AB_AGENTBUS_BIN, t->bp.cmd);
    int rc = run_cmd(cmd, out, sizeof(out));
    print_message("%s", out);
    assert_int_equal(rc, 1);
    char want[64];
    snprintf(want, sizeof(want), "expected seq %lld", (long long)first[mid]);
    if (strstr(out, want) == NULL)
        fail_msg("the verdict does not name the hole (%s): %s", want, out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_broker_kill9_producers_and_subscribers,
                                        setup_fixed_ports, it_teardown),
        cmocka_unit_test_setup_teardown(test_worker_killed_replaced_fenced, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_demo_tail_json_validates, setup_nobroker, it_teardown),
        cmocka_unit_test_setup_teardown(test_verify_finds_removed_chunk, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

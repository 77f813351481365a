/*
 * test_access.c - authorization through a real broker process with an
 * access file (docs/OPERATIONS.md "The access file", PROTOCOL.md 1.2):
 * every command of every role is allowed inside the role's prefixes and
 * refused (typed unauthorized) outside them or without the role; a
 * publisher of `a` can neither claim nor publish into a run of `b` (so it
 * cannot fence that run's writer); an observer of `a` subscribed to
 * everything receives nothing of `b`; welcome says what a key may do; a
 * worker is assigned only runs of its serve prefixes; SIGHUP takes a
 * removed key's rights away without a restart (a broken file is refused
 * and the old table kept); a broken access file keeps the broker from
 * starting.
 */
#include "testutil.h"

#include "agentbus/keys.h"
#include "agentbus/worker.h"
#include "broker_proc.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

/* The principals: one role each on prefix "a" (admin: everything; ctl_all: control everywhere). */
enum { P_PUB, P_OBS, P_SRV, P_CTL, P_CTLALL, P_ADMIN, P_NONE, NP };
static const char *const pname[NP] = {"pub_a",   "obs_a", "srv_a", "ctl_a",
                                      "ctl_all", "admin", "none"};
static const char *const prole[NP] = {"publish:a", "observe:a", "serve:a publish:a", "control:a",
                                      "control",   "admin",     "observe:zzz"};

typedef struct afx {
    char dir[64];  /* the broker's keys and access file */
    char mine[64]; /* the clients' key files */
    ab_keypair_t broker, k[NP];
    it_t it;
} afx_t;

static void write_access(const afx_t *f, int skip)
{
    char path[160];
    snprintf(path, sizeof path, "%s/access", f->dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fprintf(fp, "# the test's principals\n");
    for (int i = 0; i < NP; i++)
        if (i != skip)
            fprintf(fp, "%s %s %s\n", pname[i], f->k[i].public_key, prole[i]);
    fclose(fp);
}

static void rm_dir(const char *d)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    assert_int_equal(system(cmd), 0);
}

static int setup(void **state)
{
    static afx_t f;
    memset(&f, 0, sizeof f);
    snprintf(f.dir, sizeof f.dir, "/tmp/ab-access-keys-XXXXXX");
    snprintf(f.mine, sizeof f.mine, "/tmp/ab-access-mine-XXXXXX");
    assert_non_null(mkdtemp(f.dir));
    assert_non_null(mkdtemp(f.mine));
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_keypair_new(&f.broker, &err), AB_OK);
    assert_int_equal(ab_keypair_write(&f.broker, f.dir, "broker", &err), AB_OK);
    for (int i = 0; i < NP; i++) {
        assert_int_equal(ab_keypair_new(&f.k[i], &err), AB_OK);
        assert_int_equal(ab_keypair_write(&f.k[i], f.mine, pname[i], &err), AB_OK);
    }
    write_access(&f, -1);
    snprintf(f.it.bp.log, sizeof f.it.bp.log, "%s/broker.log", f.mine);
    f.it.available = bp_available();
    *state = &f;
    if (!f.it.available)
        return 0;
    assert_int_equal(ab_doc_new(&f.it.doc), AB_OK);
    const char *extra[] = {"--keys", f.dir, NULL};
    return bp_start(&f.it.bp, NULL, extra);
}

static int teardown(void **state)
{
    afx_t *f = *state;
    bp_cleanup(&f->it.bp);
    ab_doc_destroy(&f->it.doc);
    rm_dir(f->dir);
    rm_dir(f->mine);
    return 0;
}

static ab_status_t connect_as(afx_t *f, int who, ab_conn_t **c, int ms)
{
    ab_conn_opts_t o = {.timeout_ms = ms, .key = &f->k[who], .server_key = f->broker.public_key};
    return ab_conn_new(c, f->it.bp.cmd, &o, NULL);
}

static ab_conn_t *conn_as(afx_t *f, int who)
{
    ab_conn_t *c = NULL;
    assert_int_equal(connect_as(f, who, &c, IT_TIMEOUT), AB_OK);
    return c;
}

/* ---- the matrix: each command, each principal, inside and outside "a" ---- */

typedef enum need { N_THREAD, N_ANY, N_ALL } need_t;
typedef struct cmd {
    const char *name;
    int role; /* the role the command needs: an index into role_of below */
    need_t need;
} cmd_t;

enum { R_PUBLISH, R_OBSERVE, R_SERVE, R_CONTROL, R_ADMIN };
/* Which role each principal holds, and whether on every thread (the access file above). */
static bool holds(int p, int role, bool *everywhere)
{
    *everywhere = p == P_ADMIN || (p == P_CTLALL && role == R_CONTROL);
    if (p == P_ADMIN)
        return true;
    switch (p) {
    case P_PUB: return role == R_PUBLISH;
    case P_OBS: return role == R_OBSERVE;
    case P_SRV: return role == R_SERVE || role == R_PUBLISH;
    case P_CTL: return role == R_CONTROL;
    case P_CTLALL: return role == R_CONTROL;
    default: return false; /* none: observe on "zzz" only, which no thread here starts with */
    }
}

static const cmd_t cmds[] = {
    {"claim", R_PUBLISH, N_THREAD},
    {"heads", R_OBSERVE, N_THREAD},
    {"replay", R_OBSERVE, N_THREAD},
    {"snapshot", R_OBSERVE, N_THREAD},
    {"start_run", R_CONTROL, N_THREAD},
    {"cancel_run", R_CONTROL, N_THREAD},
    {"resume_run", R_CONTROL, N_THREAD},
    {"abandon_run", R_CONTROL, N_THREAD},
    {"invoke_action", R_CONTROL, N_THREAD},
    {"workers", R_CONTROL, N_ANY},
    {"requests", R_CONTROL, N_ANY},
    {"replay_all", R_ADMIN, N_ALL},
    {"serve", R_SERVE, N_ANY},
    {"decline", R_SERVE, N_ANY},
};

/* The request of command @p i on thread @p thread (values live in @p store). */
static ab_msg_t request(size_t i, const char *thread, ab_kv_t *store, ab_served_agent_t *agent)
{
    ab_msg_t m = {.v = AB_PROTOCOL_VERSION};
    ab_str_t t = {thread, strlen(thread)}, r = {"r1", 2}, ag = {"ag", 2};
    static const ab_val_t empty_list = {.type = AB_VAL_ARRAY, .len = 0};
    static const ab_kv_t entry_kv[1] = {
        {.key = "interruptId", .klen = 11, .val = {.type = AB_VAL_STR, .len = 2, .u.s = "i1"}}};
    static const ab_val_t entry = {.type = AB_VAL_MAP, .len = 1, .u.pairs = entry_kv};
    static const ab_val_t one_entry = {.type = AB_VAL_ARRAY, .len = 1, .u.items = &entry};
    store[0] = (ab_kv_t){.key = "messages", .klen = 8, .val = empty_list};
    static ab_val_t input;
    input = (ab_val_t){.type = AB_VAL_MAP, .len = 1, .u.pairs = store};
    const char *n = cmds[i].name;
    if (strcmp(n, "claim") == 0)
        m = (ab_msg_t){.op = AB_OP_CLAIM, .u.claim = {t, r}};
    else if (strcmp(n, "heads") == 0)
        m = (ab_msg_t){.op = AB_OP_HEADS, .u.heads = {.thread = t}};
    else if (strcmp(n, "replay") == 0)
        m = (ab_msg_t){.op = AB_OP_REPLAY,
                       .u.replay = {.scope = AB_REPLAY_THREAD, .window = 1, .thread = t}};
    else if (strcmp(n, "snapshot") == 0)
        m = (ab_msg_t){.op = AB_OP_SNAPSHOT, .u.snapshot = {t}};
    else if (strcmp(n, "start_run") == 0)
        m = (ab_msg_t){.op = AB_OP_START_RUN,
                       .u.start_run = {.agent = ag, .thread = t, .input = &input, .key = t}};
    else if (strcmp(n, "cancel_run") == 0)
        m = (ab_msg_t){.op = AB_OP_CANCEL_RUN, .u.cancel_run = {.thread = t, .run = r}};
    else if (strcmp(n, "resume_run") == 0)
        m = (ab_msg_t){.op = AB_OP_RESUME_RUN,
                       .u.resume_run = {.thread = t, .run = r, .resume = &one_entry, .key = t}};
    else if (strcmp(n, "abandon_run") == 0)
        m = (ab_msg_t){.op = AB_OP_ABANDON_RUN, .u.abandon_run = {.thread = t, .run = r}};
    else if (strcmp(n, "invoke_action") == 0)
        m = (ab_msg_t){
            .op = AB_OP_INVOKE_ACTION,
            .u.invoke_action = {.agent = ag, .action = {"x", 1}, .thread = t, .timeout_ms = 200}};
    else if (strcmp(n, "workers") == 0)
        m = (ab_msg_t){.op = AB_OP_WORKERS};
    else if (strcmp(n, "requests") == 0)
        m = (ab_msg_t){.op = AB_OP_REQUESTS};
    else if (strcmp(n, "replay_all") == 0)
        m = (ab_msg_t){.op = AB_OP_REPLAY, .u.replay = {.scope = AB_REPLAY_ALL, .window = 1}};
    else if (strcmp(n, "serve") == 0) {
        *agent = (ab_served_agent_t){.name = {"zz", 2}, .capacity = 1};
        m = (ab_msg_t){.op = AB_OP_SERVE,
                       .u.serve = {.worker = {"w", 1}, .agents = agent, .nagents = 1}};
    } else
        m = (ab_msg_t){.op = AB_OP_DECLINE, .u.decline = {.request = 999, .epoch = 1}};
    m.v = AB_PROTOCOL_VERSION;
    return m;
}

/* Send @p m; @return the error code of the answer (AB_OK for any other answer). */
static ab_status_t answer_code(ab_conn_t *c, ab_doc_t *doc, const ab_msg_t *m, char *why,
                               size_t size)
{
    ab_msg_t reply;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t rc = ab_conn_request(c, m, NULL, 0, doc, &reply, IT_TIMEOUT, &err);
    snprintf(why, size, "%s (field '%s')", err.message, err.field);
    return rc;
}

static void test_every_role_and_command(void **state)
{
    afx_t *f = *state;
    if (!f->it.available)
        skip();
    for (int p = 0; p < NP; p++) {
        ab_conn_t *c = conn_as(f, p);
        for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
            for (int inside = 1; inside >= 0; inside--) {
                if (cmds[i].need != N_THREAD && !inside)
                    continue;
                const char *thread = inside ? "a-t1" : "b-t1";
                bool everywhere = false;
                bool has = holds(p, cmds[i].role, &everywhere);
                bool allowed = cmds[i].need == N_ALL   ? everywhere
                               : cmds[i].need == N_ANY ? has
                                                       : has && (inside || everywhere);
                ab_kv_t store[1];
                ab_served_agent_t agent;
                ab_msg_t m = request(i, thread, store, &agent);
                char why[512];
                ab_status_t rc = answer_code(c, f->it.doc, &m, why, sizeof why);
                if (allowed && rc == AB_UNAUTHORIZED)
                    fail_msg("%s %s on %s: refused: %s", pname[p], cmds[i].name, thread, why);
                if (!allowed && rc != AB_UNAUTHORIZED)
                    fail_msg("%s %s on %s: not refused (%s): %s", pname[p], cmds[i].name, thread,
                             ab_status_name(rc), why);
                if (!allowed && cmds[i].need == N_THREAD && has) /* names the key, not the run */
                    assert_non_null(strstr(why, pname[p]));
            }
        }
        ab_conn_destroy(&c);
    }
}

/* A publisher of a can neither claim nor publish into b's run, so b's writer is never fenced. */
static void test_publisher_cannot_fence_another_prefix(void **state)
{
    afx_t *f = *state;
    if (!f->it.available)
        skip();
    ab_conn_t *adm = conn_as(f, P_ADMIN), *pub = conn_as(f, P_PUB);
    ab_error_t err = AB_ERROR_INIT;
    ab_claimed_t cl;
    assert_int_equal(ab_conn_claim(adm, "b-run", "r1", f->it.doc, &cl, IT_TIMEOUT, &err), AB_OK);
    uint64_t epoch = cl.epoch;
    ab_buf_t ev = AB_BUF_INIT;
    it_event(&ev, "b-run", "r1", 1, 0, epoch); /* RUN_STARTED */
    assert_int_equal(it_publish1(adm, f->it.doc, &ev, NULL).status, AB_RESULT_ACCEPTED);
    ab_claimed_t dummy;
    ab_error_clear(&err);
    assert_int_equal(ab_conn_claim(pub, "b-run", "r1", f->it.doc, &dummy, IT_TIMEOUT, &err),
                     AB_UNAUTHORIZED);
    assert_string_equal(err.field, "thread");
    /* an event forged with the writer's epoch is refused on its thread alone */
    ab_buf_reset(&ev);
    it_event(&ev, "b-run", "r1", 2, 1, epoch);
    ab_error_t perr = AB_ERROR_INIT;
    ab_result_t r = it_publish1(pub, f->it.doc, &ev, &perr);
    assert_int_equal(r.status, AB_RESULT_REJECTED);
    assert_int_equal(perr.code, AB_UNAUTHORIZED);
    assert_string_equal(perr.field, "thread");
    /* the real writer goes on with its epoch: seq 2 is still free */
    assert_int_equal(it_publish1(adm, f->it.doc, &ev, NULL).status, AB_RESULT_ACCEPTED);
    /* inside its prefix the publisher works */
    assert_int_equal(ab_conn_claim(pub, "a-run", "r1", f->it.doc, &cl, IT_TIMEOUT, &err), AB_OK);
    ab_buf_reset(&ev);
    it_event(&ev, "a-run", "r1", 1, 0, cl.epoch);
    assert_int_equal(it_publish1(pub, f->it.doc, &ev, NULL).status, AB_RESULT_ACCEPTED);
    ab_buf_free(&ev);
    ab_conn_destroy(&pub);
    ab_conn_destroy(&adm);
}

/* A raw SUB with @p who's key, subscribed to @p topic (tl bytes). */
static void *sub_as(afx_t *f, void *ctx, int who, const char *topic, size_t tl)
{
    void *s = zmq_socket(ctx, ZMQ_SUB);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    assert_int_equal(zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, f->broker.public_key, 40), 0);
    assert_int_equal(zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, f->k[who].public_key, 40), 0);
    assert_int_equal(zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, f->k[who].secret_key, 40), 0);
    assert_int_equal(zmq_setsockopt(s, ZMQ_SUBSCRIBE, topic, tl), 0);
    assert_int_equal(zmq_connect(s, f->it.bp.events), 0);
    return s;
}

/* Receive live messages until one of thread @p want comes; count those of @p other. */
static bool wait_thread(void *s, const char *want, const char *other, int *others, long ms)
{
    long deadline = ab__mono_ms() + ms;
    while (ab__mono_ms() < deadline) {
        zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 50) <= 0)
            continue;
        char topic[256];
        int n = zmq_recv(s, topic, sizeof topic - 1, 0);
        int more = 0;
        size_t ml = sizeof more;
        zmq_getsockopt(s, ZMQ_RCVMORE, &more, &ml);
        while (more) {
            char sink[64];
            zmq_recv(s, sink, sizeof sink, 0);
            zmq_getsockopt(s, ZMQ_RCVMORE, &more, &ml);
        }
        if (n < 3 || memcmp(topic, "ev", 3) != 0)
            continue; /* a heartbeat */
        topic[n] = '\0';
        if (strcmp(topic + 3, other) == 0)
            ++*others;
        if (strcmp(topic + 3, want) == 0)
            return true;
    }
    return false;
}

/* Publish one RUN_STARTED as admin on (thread, r1). */
static void admin_publish(afx_t *f, ab_conn_t *adm, const char *thread)
{
    ab_claimed_t cl;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_claim(adm, thread, "r1", f->it.doc, &cl, IT_TIMEOUT, &err), AB_OK);
    ab_buf_t ev = AB_BUF_INIT;
    it_event(&ev, thread, "r1", 1, 0, cl.epoch);
    assert_int_equal(it_publish1(adm, f->it.doc, &ev, NULL).status, AB_RESULT_ACCEPTED);
    ab_buf_free(&ev);
}

/* Subscribed to everything, an observer of a gets a's events and none of b's. */
static void test_live_subscriptions_filtered(void **state)
{
    afx_t *f = *state;
    if (!f->it.available)
        skip();
    void *ctx = zmq_ctx_new();
    void *obs = sub_as(f, ctx, P_OBS, "", 0), *adm_sub = sub_as(f, ctx, P_ADMIN, "", 0);
    ab_conn_t *adm = conn_as(f, P_ADMIN);
    /* both subscriptions are in place once each sees a heartbeat-covered event of "a" */
    int others = 0, admin_b = 0;
    for (int round = 0; round < 50; round++) {
        char t[32];
        snprintf(t, sizeof t, "a-warm%d", round);
        admin_publish(f, adm, t);
        if (wait_thread(obs, t, "", &others, 200) && wait_thread(adm_sub, t, "", &others, 1000))
            break;
    }
    admin_publish(f, adm, "b-secret"); /* b first, then a: b would arrive first */
    admin_publish(f, adm, "a-after");
    assert_true(wait_thread(adm_sub, "b-secret", "", &admin_b, IT_TIMEOUT)); /* it went out */
    int leaked = 0;
    assert_true(wait_thread(obs, "a-after", "b-secret", &leaked, IT_TIMEOUT));
    assert_int_equal(leaked, 0);
    /* and the observer's replay and snapshot of b are refused, as its heads */
    ab_conn_t *oc = conn_as(f, P_OBS);
    ab_heads_t q = {.thread = {"b-secret", 8}};
    ab_heads_reply_t hr;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_heads(oc, &q, f->it.doc, &hr, IT_TIMEOUT, &err), AB_UNAUTHORIZED);
    ab_conn_destroy(&oc);
    ab_conn_destroy(&adm);
    zmq_close(obs);
    zmq_close(adm_sub);
    zmq_ctx_term(ctx);
}

static void test_welcome_tells_access(void **state)
{
    afx_t *f = *state;
    if (!f->it.available)
        skip();
    ab_conn_t *c = conn_as(f, P_SRV);
    const char *a = ab_conn_access(c);
    assert_non_null(a);
    assert_non_null(strstr(a, "\"name\":\"srv_a\""));
    assert_non_null(strstr(a, "\"serve\":[\"a\"]"));
    assert_non_null(strstr(a, "\"publish\":[\"a\"]"));
    assert_null(strstr(a, "observe"));
    ab_conn_destroy(&c);
    c = conn_as(f, P_ADMIN);
    assert_non_null(strstr(ab_conn_access(c), "\"admin\":true"));
    ab_conn_destroy(&c);
}

/* agentbus whoami, with a key and as JSON */
static void test_cli_whoami(void **state)
{
    afx_t *f = *state;
    if (!f->it.available)
        skip();
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd,
             "env -u AGENTBUS_KEY -u AGENTBUS_SERVER_KEY %s --key %s/ctl_a.key_secret "
             "--server-key %s/broker.key whoami --broker %s 2>&1",
             AB_AGENTBUS_BIN, f->mine, f->dir, f->it.bp.cmd);
    /* text: one line per role */
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    assert_int_equal(pclose(p), 0);
    assert_non_null(strstr(out, "key       ctl_a\n"));
    assert_non_null(strstr(out, "control   a*\n"));
    assert_non_null(strstr(out, "observe   -\n"));
    /* the same with --json, the broker's key taken from its keys directory */
    snprintf(cmd, sizeof cmd,
             "env -u AGENTBUS_KEY -u AGENTBUS_SERVER_KEY %s --key %s/ctl_a.key_secret "
             "--server-key %s whoami --broker %s --json 2>&1",
             AB_AGENTBUS_BIN, f->mine, f->dir, f->it.bp.cmd);
    p = popen(cmd, "r");
    assert_non_null(p);
    n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    assert_int_equal(pclose(p), 0);
    assert_non_null(strstr(out, "\"access\":{\"name\":\"ctl_a\",\"roles\":{\"control\":[\"a\"]}}"));
}

typedef struct got {
    char thread[64];
    int n;
} got_t;

static void on_assign(void *ud, ab_worker_t *w, const ab_assign_t *a)
{
    got_t *g = ud;
    (void)w;
    snprintf(g->thread, sizeof g->thread, "%.*s", (int)a->thread.len, a->thread.ptr);
    g->n++;
}

static void start(afx_t *f, ab_conn_t *c, const char *thread)
{
    ab_kv_t store[1];
    ab_served_agent_t agent;
    ab_msg_t m = request(4, thread, store, &agent); /* start_run of agent "ag" */
    ab_run_accepted_t acc;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_start_run(c, &m.u.start_run, f->it.doc, &acc, IT_TIMEOUT, &err),
                     AB_OK);
}

/* A worker is assigned only runs of threads within its serve prefixes. */
static void test_worker_serves_its_prefixes_only(void **state)
{
    afx_t *f = *state;
    if (!f->it.available)
        skip();
    ab_conn_t *adm = conn_as(f, P_ADMIN);
    start(f, adm, "b-job"); /* queued first: an unfiltered pick would assign it first */
    start(f, adm, "a-job");
    char kf[160], sf[160];
    snprintf(kf, sizeof kf, "%s/srv_a.key_secret", f->mine);
    snprintf(sf, sizeof sf, "%s/broker.key", f->dir);
    setenv("AGENTBUS_KEY", kf, 1);
    setenv("AGENTBUS_SERVER_KEY", sf, 1);
    ab_worker_t *w = NULL;
    ab_worker_opts_t wo = {.name = "wa"};
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_worker_new(&w, f->it.bp.cmd, &wo, &err), AB_OK);
    unsetenv("AGENTBUS_KEY");
    unsetenv("AGENTBUS_SERVER_KEY");
    assert_int_equal(ab_worker_add_agent(w, "ag", 4, NULL, 0, &err), AB_OK);
    got_t g = {0};
    ab_worker_on_assign(w, on_assign, &g);
    assert_int_equal(ab_worker_serve(w, &err), AB_OK);
    for (int i = 0; i < 100 && g.n == 0; i++)
        assert_int_equal(ab_worker_run(w, 50, &err), AB_OK);
    assert_int_equal(g.n, 1);
    assert_string_equal(g.thread, "a-job");
    ab_requests_t rq = {.state = AB_REQ_QUEUED};
    ab_requests_reply_t rr;
    assert_int_equal(ab_conn_requests(adm, &rq, f->it.doc, &rr, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(rr.nrequests, 1);
    assert_memory_equal(rr.requests[0].thread.ptr, "b-job", 5);
    /* a controller of "a" lists only a's requests: the assigned a-job, not the queued b-job */
    ab_conn_t *ctl = conn_as(f, P_CTL);
    ab_requests_t all = {.state = AB_REQ_NONE};
    assert_int_equal(ab_conn_requests(ctl, &all, f->it.doc, &rr, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(rr.nrequests, 1);
    assert_memory_equal(rr.requests[0].thread.ptr, "a-job", 5);
    assert_int_equal(ab_conn_requests(ctl, &rq, f->it.doc, &rr, IT_TIMEOUT, &err), AB_OK);
    assert_int_equal(rr.nrequests, 0);
    ab_conn_destroy(&ctl);
    ab_worker_destroy(&w);
    ab_conn_destroy(&adm);
}

/* SIGHUP: a removed key loses access on the connection it has and cannot connect again. */
static void test_reload_takes_access_away(void **state)
{
    afx_t *f = *state;
    if (!f->it.available)
        skip();
    ab_conn_t *pub = conn_as(f, P_PUB);
    ab_claimed_t cl;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_claim(pub, "a-h", "r1", f->it.doc, &cl, IT_TIMEOUT, &err), AB_OK);
    /* a broken file is refused at reload: the old table stays */
    char path[160];
    snprintf(path, sizeof path, "%s/access", f->dir);
    FILE *fp = fopen(path, "a");
    assert_non_null(fp);
    fprintf(fp, "broken-line\n");
    fclose(fp);
    kill(f->it.bp.pid, SIGHUP);
    assert_int_equal(bp_wait_log(&f->it.bp, "reload refused", 1, IT_TIMEOUT), 1);
    assert_true(bp_wait_log(&f->it.bp, "access:9: ", 1, IT_TIMEOUT) >= 1);
    assert_int_equal(ab_conn_claim(pub, "a-h", "r2", f->it.doc, &cl, IT_TIMEOUT, &err), AB_OK);
    /* pub_a removed */
    write_access(f, P_PUB);
    kill(f->it.bp.pid, SIGHUP);
    assert_int_equal(bp_wait_log(&f->it.bp, "access: reloaded", 1, IT_TIMEOUT), 1);
    ab_error_clear(&err);
    assert_int_equal(ab_conn_claim(pub, "a-h", "r3", f->it.doc, &cl, IT_TIMEOUT, &err),
                     AB_UNAUTHORIZED);
    assert_non_null(strstr(err.message, "no longer"));
    ab_conn_t *again = NULL;
    assert_int_equal(connect_as(f, P_PUB, &again, 1000), AB_TIMEOUT); /* refused at the handshake */
    ab_conn_destroy(&pub);
    ab_conn_t *obs = conn_as(f, P_OBS); /* the others keep theirs */
    ab_heads_t q = {.thread = {"a-h", 3}};
    ab_heads_reply_t hr;
    assert_int_equal(ab_conn_heads(obs, &q, f->it.doc, &hr, IT_TIMEOUT, &err), AB_OK);
    ab_conn_destroy(&obs);
}

/* Narrowing an observer rebinds the event endpoint: its live subscription ends. */
static void test_reload_ends_live_subscription(void **state)
{
    afx_t *f = *state;
    if (!f->it.available)
        skip();
    void *ctx = zmq_ctx_new();
    void *obs = sub_as(f, ctx, P_OBS, "", 0);
    ab_conn_t *adm = conn_as(f, P_ADMIN);
    int others = 0;
    bool seen = false;
    for (int round = 0; round < 50 && !seen; round++) {
        char t[32];
        snprintf(t, sizeof t, "a-warm%d", round);
        admin_publish(f, adm, t);
        seen = wait_thread(obs, t, "", &others, 200);
    }
    assert_true(seen);
    write_access(f, P_OBS);
    kill(f->it.bp.pid, SIGHUP);
    assert_int_equal(bp_wait_log(&f->it.bp, "bound again", 1, IT_TIMEOUT), 1);
    ab_conn_destroy(&adm);
    adm = conn_as(f, P_ADMIN); /* the command endpoint was not touched */
    void *witness = sub_as(f, ctx, P_ADMIN, "", 0);
    seen = false;
    for (int round = 0; round < 50 && !seen; round++) {
        char t[32];
        snprintf(t, sizeof t, "a-later%d", round);
        admin_publish(f, adm, t);
        seen = wait_thread(witness, t, "", &others, 200);
    }
    assert_true(seen);
    int leaked = 0;
    assert_false(wait_thread(obs, "a-never", "", &leaked, 300));
    assert_true(bp_wait_log(&f->it.bp, "refused a connection", 1, IT_TIMEOUT) >= 1);
    ab_conn_destroy(&adm);
    zmq_close(obs);
    zmq_close(witness);
    zmq_ctx_term(ctx);
}

static void test_broken_access_file_refuses_start(void **state)
{
    afx_t *f = *state;
    if (!f->it.available)
        skip();
    char path[160], out[2048], cmd[1024];
    snprintf(path, sizeof path, "%s/bad-access", f->mine);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fprintf(fp, "# ok\nalice %s publish:a\nbob %s sing\n", f->k[0].public_key, f->k[1].public_key);
    fclose(fp);
    snprintf(cmd, sizeof cmd,
             "%s broker --data %s/d2 --keys %s --access %s --cmd 'tcp://127.0.0.1:*' --events "
             "'tcp://127.0.0.1:*' 2>&1",
             AB_AGENTBUS_BIN, f->mine, f->dir, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    char want[200];
    snprintf(want, sizeof want, "%s:3: unknown role 'sing'", path);
    if (strstr(out, want) == NULL)
        fail_msg("no '%s' in: %s", want, out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_role_and_command, setup, teardown),
        cmocka_unit_test_setup_teardown(test_publisher_cannot_fence_another_prefix, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_live_subscriptions_filtered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_welcome_tells_access, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cli_whoami, setup, teardown),
        cmocka_unit_test_setup_teardown(test_worker_serves_its_prefixes_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reload_takes_access_away, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reload_ends_live_subscription, setup, teardown),
        cmocka_unit_test_setup_teardown(test_broken_access_file_refuses_start, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

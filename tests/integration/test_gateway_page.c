/*
 * test_gateway_page.c - the observer page the gateway serves at /, driven by
 * headless Chromium (Debian's chromium, installed by scripts/install-deps)
 * against a live broker, examples/worker and the gateway: a run written by
 * the test (a user message, an assistant message streamed in deltas, a tool
 * call with arguments and a result, a state snapshot and a delta, and an
 * interrupt) and a dispatched run are shown as they should be - the thread
 * list, the message texts, the tool call, the state after the patch, the
 * run outcomes and approve / deny buttons for the pending interrupt.
 * Chromium dumps the page's DOM after running it; the test reads that.
 * AB_GATEWAY_SCREENSHOT=FILE also writes a screenshot of the first test's page
 * (docs/gateway-observer.png).
 *
 * Reconnect: the page reaches the gateway through a loopback proxy of the
 * test's (cut_proxy_t) that cuts the thread's event stream after a given
 * number of SSE frames, in the middle of a streaming message; while the page
 * is away the test writes the rest of the run, then lets its next request
 * through. The page must ask again with Last-Event-ID = the last id it got,
 * the gateway must send exactly the frames after it, and the page must show
 * the message's deltas each exactly once and the run finished.
 * A hostile STATE_DELTA: a patch whose path goes through __proto__ (add
 * /__proto__/polluted) set Object.prototype.polluted in the observer's page.
 * The page is served through the same proxy with a probe script added that
 * writes ({}).polluted into the DOM; it must stay undefined, the patch must be
 * refused whole (shown as an error, the state unchanged), and the events after
 * it shown on the same stream (a patch through a missing member threw out of
 * the stream's reader, which reconnected).
 * Skipped (77) only when chromium is not installed.
 */
#include "testutil.h"

#include "gw_proc.h"
#include "worker_proc.h"

#include "agentbus/producer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

static gwp_t gw;
static char dom[1 << 18];

static int teardown(void **state)
{
    if (gw.pid > 0)
        gw_stop(&gw, true);
    return teardown_worker(state);
}

static void publish(ab_producer_t *p, const char *json)
{
    ab_error_t err = AB_ERROR_INIT;
    if (ab_producer_publish_json(p, json, strlen(json), &err) != AB_OK)
        fail_msg("publish %s: %s (%s)", json, err.message, err.field);
}

/* A producer on @p cmd that claimed run @p run of @p thread and published its RUN_STARTED. */
static ab_producer_t *started_run(const char *cmd, const char *thread, const char *run)
{
    ab_producer_t *p = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_producer_opts_t po = {.timeout_ms = IT_TIMEOUT};
    assert_int_equal(ab_producer_new(&p, cmd, &po, &err), AB_OK);
    assert_int_equal(ab_producer_claim(p, thread, run, NULL, &err), AB_OK);
    char json[512];
    snprintf(json, sizeof json,
             "{\"type\":\"RUN_STARTED\",\"threadId\":\"%s\",\"runId\":\"%s\","
             "\"protocolVersion\":\"1.0\"}",
             thread, run);
    publish(p, json);
    return p;
}

/* Skip the test when chromium is not installed. */
static void need_chromium(void)
{
    if (system("chromium --version >/dev/null 2>&1") != 0) {
        print_message("chromium is not installed (scripts/install-deps installs it): skipped\n");
        skip();
    }
}

/* Run r-tool of thread t-page: every kind of event the page shows. */
static void write_run(const char *cmd)
{
    ab_producer_t *p = started_run(cmd, "t-page", "r-tool");
    ab_error_t err = AB_ERROR_INIT;
    publish(p, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"u1\",\"role\":\"user\"}");
    publish(p, "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"u1\",\"delta\":\"What is "
               "the weather?\"}");
    publish(p, "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"u1\"}");
    publish(p, "{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":{\"city\":\"Lyon\",\"step\":1}}");
    publish(p, "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"tc1\",\"toolCallName\":"
               "\"get_weather\"}");
    publish(p, "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"tc1\",\"delta\":\"{\\\"city\\\":\"}");
    publish(p, "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"tc1\",\"delta\":\"\\\"Lyon\\\"}\"}");
    publish(p, "{\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"tc1\"}");
    publish(p, "{\"type\":\"TOOL_CALL_RESULT\",\"messageId\":\"tr1\",\"toolCallId\":\"tc1\","
               "\"content\":\"sunny, 21 C\"}");
    publish(p, "{\"type\":\"STATE_DELTA\",\"delta\":[{\"op\":\"replace\",\"path\":\"/step\","
               "\"value\":2},{\"op\":\"add\",\"path\":\"/forecast\",\"value\":\"sunny\"}]}");
    publish(p, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"a1\",\"role\":\"assistant\"}");
    publish(p, "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"a1\",\"delta\":\"It is \"}");
    publish(p, "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"a1\",\"delta\":\"sunny in "
               "Lyon.\"}");
    publish(p, "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"a1\"}");
    publish(p, "{\"type\":\"RUN_FINISHED\",\"threadId\":\"t-page\",\"runId\":\"r-tool\","
               "\"outcome\":{\"type\":\"interrupt\",\"interrupts\":[{\"id\":\"book-1\","
               "\"reason\":\"confirmation\",\"message\":\"Book the train?\"}]}}");
    assert_int_equal(ab_producer_flush(p, IT_TIMEOUT, &err), AB_OK);
    ab_producer_destroy(&p);
}

/* Chromium: load @p url, run it for a few seconds of virtual time, dump the DOM; with
 * @p screenshot, also write $AB_GATEWAY_SCREENSHOT when it is set. */
static void chromium_dom_budget(const char *url, int budget_ms, bool screenshot)
{
    char dir[] = "/tmp/agentbus-chromium-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const char *shot = screenshot ? getenv("AB_GATEWAY_SCREENSHOT") : NULL;
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "timeout 60 chromium --headless=new --no-sandbox --disable-gpu --no-first-run "
             "--user-data-dir=%s --virtual-time-budget=%d --window-size=1280,760 %s%s "
             "--dump-dom '%s' 2>/dev/null",
             dir, budget_ms, shot ? "--screenshot=" : "", shot ? shot : "", url);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(dom, 1, sizeof dom - 1, p);
    dom[n] = '\0';
    pclose(p);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void chromium_dom(const char *url)
{
    chromium_dom_budget(url, 4000, true); /* the first test's view is the docs' picture */
}

static void shows(const char *needle)
{
    if (strstr(dom, needle) == NULL)
        fail_msg("the page does not show %s; its DOM:\n%.6000s", needle, dom);
}

static void test_observer_page_shows_a_thread(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    need_chromium();
    wproc_t w;
    const char *wargs[] = {t->bp.cmd, "w1", "demo", NULL};
    worker_start_args(&w, wargs);
    assert_int_equal(gw_start(&gw, t->bp.cmd, NULL), 0);
    write_run(t->bp.cmd);
    /* A dispatched run (followed to its end, so it has events) and a produced one: the list
     * (GET /threads) has every thread with events. */
    gw_sse_t s;
    gw_ev_t e;
    assert_int_equal(gw_sse_open(&s, &gw, "POST", "/agents/demo", "",
                                 "{\"threadId\":\"t-listed\",\"runId\":\"r1\",\"messages\":[],"
                                 "\"tools\":[],\"context\":[],\"state\":{},\"forwardedProps\":{}}",
                                 0),
                     0);
    int events = 0;
    while (gw_sse_next(&s, &e, IT_TIMEOUT) == 1)
        events++;
    gw_sse_close(&s);
    assert_true(events > 0);
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/#thread=t-page", gw.port);
    chromium_dom(url);
    shows("<h2 id=\"title\">Thread t-page</h2>");
    shows("data-thread=\"t-listed\""); /* the thread list */
    shows("data-thread=\"t-page\"");   /* a thread written by a producer is listed too */
    shows("1 run · idle · r1 @ ");     /* with its runs, whether one is active, its newest */
    shows("<span class=\"text\">What is the weather?</span>"); /* a user message */
    shows("<span class=\"text\">It is sunny in Lyon.</span>"); /* deltas joined */
    shows("<b class=\"name\">get_weather</b>");                /* the tool call */
    shows("<code class=\"args\">{\"city\":\"Lyon\"}</code>");  /* its arguments */
    shows("<div class=\"result\">→ sunny, 21 C</div>");        /* its result */
    shows("\"step\": 2");                                      /* state, patched */
    shows("\"forecast\": \"sunny\"");
    shows("<span class=\"outcome interrupt\">interrupt</span>"); /* the run outcome */
    shows("data-interrupt=\"book-1\"");                          /* pending approval */
    shows("Approval needed: Book the train? (book-1)");
    shows("<button class=\"approve\">approve</button>");
    shows("<button class=\"deny\">deny</button>");
    shows("live · t-page");
}

/* ---- a proxy that cuts the event stream once ------------------------------------------ */

#define CUT_CONNS 64

typedef struct cut_proxy {
    int lfd;
    unsigned port, upstream;
    int cut_after;        /* SSE frames with an id forwarded before the cut */
    atomic_int streams;   /* event-stream requests seen */
    atomic_int lists;     /* GET /threads requests seen (the page's timer) */
    atomic_bool cut, go;  /* the first stream was cut; the next may pass */
    char resume_hdr[128]; /* the Last-Event-ID header of the second stream */
    char reqs[4][160];
    uint64_t ids[2][64]; /* ids forwarded per stream */
    atomic_int nids[2];
    pthread_t acceptor, conns[CUT_CONNS];
    atomic_int nconns;
    atomic_bool stop;
    const char *page; /* when set: the answer to GET / (the page with a probe) */
} cut_proxy_t;

typedef struct cut_conn {
    cut_proxy_t *p;
    int cfd, slot;
} cut_conn_t;

/* @p needle in @p hay, ASCII case ignored (HTTP header names). */
static const char *find_nocase(const char *hay, const char *needle)
{
    for (size_t n = strlen(needle); *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return hay;
    return NULL;
}

static int connect_port(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* The ids of the whole frames in @p buf (@p *used bytes); consumed frames are dropped.
 * @return bytes of @p buf up to the end of the frame holding the cut_after-th id, or 0. */
static size_t scan_frames(cut_proxy_t *p, int stream, char *buf, size_t *used, size_t *fwd)
{
    char *end;
    size_t cut = 0;
    buf[*used] = '\0';
    while ((end = strstr(buf + *fwd, "\n\n")) != NULL) {
        size_t flen = (size_t)(end - buf) + 2;
        const char *id = strstr(buf + *fwd, "id: ");
        if (id != NULL && id < end) {
            int n = atomic_load(&p->nids[stream]);
            if (n < 64)
                p->ids[stream][n] = strtoull(id + 4, NULL, 10);
            atomic_store(&p->nids[stream], n + 1);
            if (stream == 0 && n + 1 == p->cut_after)
                cut = flen;
        }
        *fwd = flen;
        if (cut)
            return cut;
    }
    return 0;
}

/* One client connection: forward its request (an event stream's only after `go` once the
 * first was cut), then pump both ways; the first event stream ends after cut_after frames. */
static void *cut_conn_main(void *arg)
{
    cut_conn_t *c = arg;
    cut_proxy_t *p = c->p;
    char req[8192];
    size_t rn = 0;
    while (rn < sizeof req - 1 && (rn < 4 || !strstr(req, "\r\n\r\n"))) {
        ssize_t k = read(c->cfd, req + rn, sizeof req - 1 - rn);
        if (k <= 0)
            goto out;
        rn += (size_t)k;
        req[rn] = '\0';
    }
    /* one request per connection, so each one is seen here: ask for the connection's close */
    const char *cf = find_nocase(req, "\r\nConnection:");
    char *conn = cf ? req + (cf - req) : NULL;
    if (conn != NULL) {
        char *v = conn + strlen("\r\nConnection:"), *eol = strstr(v, "\r\n");
        if (eol == NULL || eol - v < 6)
            goto out;
        memset(v, ' ', (size_t)(eol - v));
        memcpy(v + 1, "close", 5);
    } else {
        char *eol = strstr(req, "\r\n");
        if (eol == NULL || rn + 19 >= sizeof req)
            goto out;
        memmove(eol + 19, eol, rn - (size_t)(eol - req) + 1);
        memcpy(eol, "\r\nConnection: close", 19);
        rn += 19;
    }
    if (p->page != NULL && strncmp(req, "GET / HTTP/1.1", 14) == 0) {
        char head[160];
        int hn = snprintf(head, sizeof head,
                          "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
                          "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                          strlen(p->page));
        if (gw_write_all(c->cfd, head, (size_t)hn))
            gw_write_all(c->cfd, p->page, strlen(p->page));
        goto out;
    }
    int stream = -1;
    if (strncmp(req, "GET /threads HTTP/1.1", 21) == 0)
        atomic_fetch_add(&p->lists, 1);
    if (strstr(req, "/events HTTP/1.1") != NULL) {
        stream = atomic_fetch_add(&p->streams, 1);
        if (stream < 4) {
            const char *h = find_nocase(req, "Last-Event-ID:");
            snprintf(p->reqs[stream], sizeof p->reqs[0], "%.*s | %.*s cut=%d",
                     (int)strcspn(req, "\r"), req, h ? (int)strcspn(h, "\r") : 0, h ? h : "",
                     (int)atomic_load(&p->cut));
        }
        if (stream >= 1) {
            while (!atomic_load(&p->go) && !atomic_load(&p->stop))
                usleep(1000);
            const char *h = find_nocase(req, "Last-Event-ID:");
            if (stream == 1 && h)
                snprintf(p->resume_hdr, sizeof p->resume_hdr, "%.*s", (int)strcspn(h, "\r"), h);
        }
    }
    int ufd = connect_port(p->upstream);
    if (ufd < 0 || !gw_write_all(ufd, req, rn))
        goto out_u;
    static char bufs[CUT_CONNS][1 << 16];
    char *buf = bufs[c->slot];
    size_t used = 0, fwd = 0;
    for (;;) {
        struct pollfd pf[2] = {{.fd = c->cfd, .events = POLLIN}, {.fd = ufd, .events = POLLIN}};
        if (poll(pf, 2, 100) < 0 || atomic_load(&p->stop))
            break;
        char tmp[8192];
        if (pf[0].revents) {
            ssize_t k = read(c->cfd, tmp, sizeof tmp);
            if (k <= 0 || !gw_write_all(ufd, tmp, (size_t)k))
                break;
        }
        if (pf[1].revents) {
            ssize_t k = read(ufd, tmp, sizeof tmp);
            if (k <= 0)
                break;
            if (stream < 0 || stream > 1) {
                if (!gw_write_all(c->cfd, tmp, (size_t)k))
                    break;
                continue;
            }
            if (used + (size_t)k >= (1 << 16) - 1)
                break; /* the test's streams are small */
            memcpy(buf + used, tmp, (size_t)k);
            used += (size_t)k;
            size_t before = fwd, cut = scan_frames(p, stream, buf, &used, &fwd);
            size_t upto = cut ? cut : (stream == 0 ? fwd : used);
            if (upto > before && !gw_write_all(c->cfd, buf + before, upto - before))
                break;
            if (stream == 1)
                fwd = used;
            if (cut) {
                /* The connection drops in the middle of the run, once the page's timer
                 * asked for the thread list again: the page has run on since the frames
                 * arrived, so it has read them (a stream that errors drops what its
                 * reader did not take yet, and the page would resume from an earlier id). */
                int lists = atomic_load(&p->lists);
                while (atomic_load(&p->lists) == lists && !atomic_load(&p->stop))
                    usleep(1000);
                atomic_store(&p->cut, true);
                break;
            }
        }
    }
out_u:
    if (ufd >= 0)
        close(ufd);
out:
    close(c->cfd);
    free(c);
    return NULL;
}

static void *cut_accept_main(void *arg)
{
    cut_proxy_t *p = arg;
    while (!atomic_load(&p->stop)) {
        struct pollfd pf = {.fd = p->lfd, .events = POLLIN};
        if (poll(&pf, 1, 50) <= 0)
            continue;
        int fd = accept(p->lfd, NULL, NULL);
        int i = atomic_load(&p->nconns);
        if (fd < 0 || i >= CUT_CONNS) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        cut_conn_t *c = calloc(1, sizeof *c);
        assert_non_null(c);
        *c = (cut_conn_t){.p = p, .cfd = fd, .slot = i};
        assert_int_equal(pthread_create(&p->conns[i], NULL, cut_conn_main, c), 0);
        atomic_store(&p->nconns, i + 1);
    }
    return NULL;
}

/* Start the proxy before gateway port @p upstream; @p page (NULL: the gateway's) is served for
 * GET /, set before any of the proxy's threads starts. */
static void cut_start(cut_proxy_t *p, unsigned upstream, int cut_after, const char *page)
{
    memset(p, 0, sizeof *p);
    p->upstream = upstream;
    p->cut_after = cut_after;
    p->page = page;
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    assert_int_equal(bind(p->lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(p->lfd, 16), 0);
    assert_int_equal(getsockname(p->lfd, (struct sockaddr *)&a, &al), 0);
    p->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&p->acceptor, NULL, cut_accept_main, p), 0);
}

static void cut_stop(cut_proxy_t *p)
{
    atomic_store(&p->stop, true);
    pthread_join(p->acceptor, NULL);
    for (int i = 0; i < atomic_load(&p->nconns); i++)
        pthread_join(p->conns[i], NULL);
    close(p->lfd);
}

#define DELTAS 30

static void publish_deltas(ab_producer_t *p, int from, int to)
{
    for (int i = from; i < to; i++) {
        char json[160];
        snprintf(json, sizeof json,
                 "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"a1\",\"delta\":\"d%02d \"}",
                 i);
        publish(p, json);
    }
}

typedef struct dom_job {
    char url[256];
} dom_job_t;

static void *dom_main(void *arg)
{
    chromium_dom_budget(((dom_job_t *)arg)->url, 20000, false);
    return NULL;
}

static void test_observer_page_resumes_after_a_cut(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    need_chromium();
    assert_int_equal(gw_start(&gw, t->bp.cmd, NULL), 0);
    ab_producer_t *p = started_run(t->bp.cmd, "t-cut", "r-cut");
    ab_error_t err = AB_ERROR_INIT;
    publish(p, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"a1\",\"role\":\"assistant\"}");
    publish_deltas(p, 0, DELTAS / 2);
    assert_int_equal(ab_producer_flush(p, IT_TIMEOUT, &err), AB_OK);
    /* the stream is cut after RUN_STARTED, TEXT_MESSAGE_START and 10 deltas */
    static cut_proxy_t px;
    cut_start(&px, gw.port, 12, NULL);
    static dom_job_t job;
    snprintf(job.url, sizeof job.url, "http://127.0.0.1:%u/#thread=t-cut", px.port);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, dom_main, &job), 0);
    long deadline = ab__mono_ms() + 30000;
    while (!atomic_load(&px.cut) && ab__mono_ms() < deadline)
        usleep(1000);
    if (!atomic_load(&px.cut))
        fail_msg("the stream was not cut: %d connections, %d streams, %d frames",
                 atomic_load(&px.nconns), atomic_load(&px.streams), atomic_load(&px.nids[0]));
    /* while the page is away: the rest of the run */
    publish_deltas(p, DELTAS / 2, DELTAS);
    publish(p, "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"a1\"}");
    publish(p, "{\"type\":\"RUN_FINISHED\",\"threadId\":\"t-cut\",\"runId\":\"r-cut\"}");
    assert_int_equal(ab_producer_flush(p, IT_TIMEOUT, &err), AB_OK);
    ab_producer_destroy(&p);
    atomic_store(&px.go, true);
    pthread_join(th, NULL);
    cut_stop(&px);

    /* the page asked again after the last id it got, and got exactly the rest */
    assert_int_equal(atomic_load(&px.nids[0]), 12);
    char want[64];
    snprintf(want, sizeof want, "Last-Event-ID: %llu", (unsigned long long)px.ids[0][11]);
    for (int i = 0; i < 4 && i < atomic_load(&px.streams); i++)
        print_message("stream %d: %s\n", i, px.reqs[i]);
    if (strcasecmp(px.resume_hdr, want) != 0)
        fail_msg("the page resumed with '%s', not '%s' (%d streams, %d frames after the cut)",
                 px.resume_hdr, want, atomic_load(&px.streams), atomic_load(&px.nids[1]));

    int n1 = atomic_load(&px.nids[1]);
    assert_int_equal(12 + n1, 2 + DELTAS + 2);
    assert_true(px.ids[1][0] > px.ids[0][11]);
    for (int i = 1; i < n1; i++)
        assert_true(px.ids[1][i] > px.ids[1][i - 1]);
    /* and shows each delta once, in order, and the run's end */
    char text[512] = "<span class=\"text\">";
    for (int i = 0; i < DELTAS; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text), "d%02d ", i);
    snprintf(text + strlen(text), sizeof text - strlen(text), "</span>");
    shows(text);
    shows("run r-cut finished: success");
    char resumed[96];
    snprintf(resumed, sizeof resumed, "resumed after %llu", (unsigned long long)px.ids[0][11]);
    shows(resumed);
}

/* ---- a hostile STATE_DELTA ---------------------------------------------------------- */

/* The gateway's page with a probe that shows ({}).polluted in the DOM (data-polluted). */
static char *probed_page(void)
{
    static char page[1 << 16];
    static const char probe[] =
        "<script>setInterval(() => { document.body.dataset.polluted = "
        "String(({}).polluted) + \",\" + String(({}).polluted2); }, 50);</script></body>";
    assert_int_equal(gw_http(&gw, "GET", "/", NULL, NULL, page, sizeof page - sizeof probe), 200);
    char *end = strstr(page, "</body>");
    assert_non_null(end);
    memcpy(end, probe, sizeof probe);
    return page;
}

static void test_observer_page_refuses_a_polluting_patch(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    need_chromium();
    assert_int_equal(gw_start(&gw, t->bp.cmd, NULL), 0);
    ab_producer_t *p = started_run(t->bp.cmd, "t-proto", "r-proto");
    ab_error_t err = AB_ERROR_INIT;
    publish(p, "{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":{\"step\":1}}");
    /* the broker takes both: a patch's path is a string to it */
    publish(p,
            "{\"type\":\"STATE_DELTA\",\"delta\":[{\"op\":\"replace\",\"path\":\"/step\","
            "\"value\":2},{\"op\":\"add\",\"path\":\"/__proto__/polluted\",\"value\":\"yes\"}]}");
    publish(p, "{\"type\":\"STATE_DELTA\",\"delta\":[{\"op\":\"add\",\"path\":"
               "\"/constructor/prototype/polluted2\",\"value\":\"yes\"}]}");
    publish(p, "{\"type\":\"STATE_DELTA\",\"delta\":[{\"op\":\"add\",\"path\":\"/missing/x\","
               "\"value\":1}]}");
    publish(p, "{\"type\":\"STATE_DELTA\",\"delta\":[{\"op\":\"add\",\"path\":\"/city\","
               "\"value\":\"Lyon\"}]}");
    publish(p, "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m1\",\"role\":\"assistant\"}");
    publish(p, "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"after the "
               "patches\"}");
    publish(p, "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m1\"}");
    publish(p, "{\"type\":\"RUN_FINISHED\",\"threadId\":\"t-proto\",\"runId\":\"r-proto\"}");
    assert_int_equal(ab_producer_flush(p, IT_TIMEOUT, &err), AB_OK);
    ab_producer_destroy(&p);

    static cut_proxy_t px;
    cut_start(&px, gw.port, 0, probed_page()); /* never cut */
    atomic_store(&px.go, true);
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/#thread=t-proto", px.port);
    chromium_dom_budget(url, 4000, false);
    cut_stop(&px);
    const char *probe = strstr(dom, "data-polluted=");
    print_message("the probe: %.*s; event streams: %d\n", probe ? (int)strcspn(probe, ">") : 6,
                  probe ? probe : "(none)", atomic_load(&px.streams));
    shows("data-polluted=\"undefined,undefined\""); /* Object.prototype untouched */
    shows("STATE_DELTA not applied: path /__proto__/polluted goes through __proto__");
    shows("STATE_DELTA not applied: path /constructor/prototype/polluted2 goes through "
          "constructor");
    shows("STATE_DELTA not applied: path /missing/x: no member missing");
    shows("\"step\": 1");                                   /* the first patch refused whole */
    shows("\"city\": \"Lyon\"");                            /* a later patch applied */
    shows("<span class=\"text\">after the patches</span>"); /* and the events after them */
    shows("run r-proto finished: success");
    if (atomic_load(&px.streams) != 1)
        fail_msg("the page read the thread in %d streams, not 1 (a bad patch broke its reader)",
                 atomic_load(&px.streams));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_observer_page_shows_a_thread, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_observer_page_resumes_after_a_cut, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_observer_page_refuses_a_polluting_patch, it_setup,
                                        teardown),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

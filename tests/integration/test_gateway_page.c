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
 * AB_GATEWAY_SCREENSHOT=FILE also writes a screenshot (docs/gateway-observer.png).
 * Skipped (77) only when chromium is not installed.
 */
#include "testutil.h"

#include "gw_proc.h"
#include "worker_proc.h"

#include "agentbus/producer.h"

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

/* Run r-tool of thread t-page: every kind of event the page shows. */
static void write_run(const char *cmd)
{
    ab_producer_t *p = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_producer_opts_t po = {.timeout_ms = IT_TIMEOUT};
    assert_int_equal(ab_producer_new(&p, cmd, &po, &err), AB_OK);
    assert_int_equal(ab_producer_claim(p, "t-page", "r-tool", NULL, &err), AB_OK);
    publish(p, "{\"type\":\"RUN_STARTED\",\"threadId\":\"t-page\",\"runId\":\"r-tool\","
               "\"protocolVersion\":\"1.0\"}");
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

/* Chromium: load @p url, run it for a few seconds of virtual time, dump the DOM. */
static void chromium_dom(const char *url)
{
    char dir[] = "/tmp/agentbus-chromium-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const char *shot = getenv("AB_GATEWAY_SCREENSHOT");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "timeout 60 chromium --headless=new --no-sandbox --disable-gpu --no-first-run "
             "--user-data-dir=%s --virtual-time-budget=4000 --window-size=1280,760 %s%s "
             "--dump-dom '%s' 2>/dev/null",
             dir, shot ? "--screenshot=" : "", shot ? shot : "", url);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(dom, 1, sizeof dom - 1, p);
    dom[n] = '\0';
    pclose(p);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
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
    if (system("chromium --version >/dev/null 2>&1") != 0) {
        print_message("chromium is not installed (scripts/install-deps installs it): skipped\n");
        skip();
    }
    wproc_t w;
    const char *wargs[] = {t->bp.cmd, "w1", "demo", NULL};
    worker_start_args(&w, wargs);
    assert_int_equal(gw_start(&gw, t->bp.cmd, NULL), 0);
    write_run(t->bp.cmd);
    char body[4096];
    /* A dispatched run: the thread list comes from the broker's run requests. */
    assert_int_equal(gw_http(&gw, "POST", "/agents/demo", "Accept: application/json\r\n",
                             "{\"threadId\":\"t-listed\",\"runId\":\"r1\",\"messages\":[],"
                             "\"tools\":[],\"context\":[],\"state\":{},\"forwardedProps\":{}}",
                             body, sizeof body),
                     200);
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/#thread=t-page", gw.port);
    chromium_dom(url);
    shows("<h2 id=\"title\">Thread t-page</h2>");
    shows("data-thread=\"t-listed\"");                         /* the thread list */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_observer_page_shows_a_thread, it_setup, teardown),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

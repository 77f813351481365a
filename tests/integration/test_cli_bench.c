/*
 * test_cli_bench.c - `agentbus bench` refuses what a benchmark does not take
 * (cli/bench_cmd.c invariant 2) with a usage error (exit 2) naming the
 * option, before it starts anything; --json puts the rows on stdout as JSON
 * and the human lines on stderr; latency --row runs that row alone, --rounds
 * times (delivery: every delivery row, beside the maximum with its subscribers),
 * and scale --row the 100-run row and that one in turn, each with the
 * group commits the broker made during it and the CPU of each of its threads;
 * scale --durability process starts its brokers at that durability and says
 * so in every row, and rows against a broker given with --broker say
 * durability=broker (the bench cannot know it), ingest then running one row,
 * not two of one broker, and latency no process row. After its rows a
 * latency run reports the targets those rows judged (bench/targets.c):
 * each verdict agrees with its figure and limit, the limit is made of figures
 * of the same run, and a `targets` row counts them.
 */
#define OUT_MAX 16384 /* latency --row delivery writes about 6 KB of rows */
#include "testutil.h"

#include "broker_proc.h"
#include "cli_run.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static void refused(const char *args, const char *says)
{
    char out[OUT_MAX];
    assert_int_equal(it_run_cli(out, "bench %s", args), 2);
    if (strstr(out, says) == NULL)
        fail_msg("'agentbus bench %s' did not say '%s': %s", args, says, out);
}

static void test_options_a_benchmark_does_not_take(void **state)
{
    (void)state;
    refused("ingest --rounds 3", "--rounds is for bench fanout");
    refused("latency --rounds 3",
            "--rounds is for bench fanout, and bench latency or scale with --row");
    refused("scale --rounds 3", "--rounds is for bench fanout, and bench latency or scale");
    refused("actions --rounds 3", "--rounds is for bench fanout");
    refused("latency --row heavy", "--row takes light, loaded or delivery (latency), or 10000");
    refused("scale --row 1000", "--row takes light, loaded or delivery (latency), or 10000");
    refused("scale --row 100-scatter", "each also with -scatter (scale)");
    refused("ingest --row light", "--row light|loaded|delivery is for bench latency");
    refused("scale --row loaded", "--row light|loaded|delivery is for bench latency");
    refused("fanout --row delivery", "--row light|loaded|delivery is for bench latency");
    refused("latency --row 100000", "--row RUNS is for bench scale");
    refused("ingest --row 100000-each", "--row RUNS is for bench scale");
    refused("latency --row 10000-scatter", "--row RUNS is for bench scale");
    refused("latency --row loaded --rounds 0", "--rounds takes a whole number from 1 to 64");
    refused("zmq --frame-per-event", "--frame-per-event is for the benchmarks that publish");
    refused("actions --frame-per-event", "--frame-per-event is for the benchmarks that publish");
    refused("proto --broker tcp://127.0.0.1:1", "are for the bus benchmarks");
    refused("ingest --size 256", "--size is for bench proto");
    refused("fanout --rounds 65", "--rounds takes a whole number from 1 to 64");
    refused("latency --rate 1000", "--rate is for bench ingest");
    refused("ingest --events 100000", "--events is for bench replay and bench pg");
    refused("latency --text", "--text is for bench replay and bench pg");
    refused("ingest --text", "--text is for bench replay and bench pg");
    refused("ingest --stalls", "--stalls is for bench latency");
    refused("scale --row 10000 --stalls", "--stalls is for bench latency");
    refused("ingest --durability process", "--durability is for bench scale");
    refused("scale --durability none", "--durability takes fsync or process");
    refused("scale --durability", "--durability");
    refused("scale --broker tcp://127.0.0.1:1 --durability process",
            "a broker given with --broker keeps its own");
    refused("replay --events 999", "--events takes a whole number in [1000, 10000000]");
    refused("replay --events 1e6", "--events takes a whole number");
    refused("pg --events 20000000", "--events takes a whole number in [1000, 10000000]");
    refused("ingest --rate 0", "--rate takes events per second in [1, 100000000]");
    refused("ingest --rate 10x", "--rate takes events per second");
    refused("proto --rate 1000", "are for the bus benchmarks");
    refused("ingest --broker tcp://127.0.0.1:1 --workers-broker tcp://127.0.0.1:2",
            "--workers-broker is for bench dispatch");
    refused("dispatch --workers-broker tcp://127.0.0.1:2", "--workers-broker needs --broker");
    refused("proto --workers-broker tcp://127.0.0.1:2", "are for the bus benchmarks");
    refused("nosuch", "unknown benchmark 'nosuch'");
    refused("", "name a benchmark");
}

/* --json: the rows as JSON objects on stdout, the human lines on stderr (issue 16). */
static void test_json_rows(void **state)
{
    (void)state;
    char out[OUT_MAX], cmd[512];
    snprintf(cmd, sizeof cmd, "%s bench zmq --seconds 0.3 --json 2>/dev/null", AB_AGENTBUS_BIN);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    assert_int_equal(pclose(p), 0);
    assert_non_null(strstr(out, "{\"bench\":\"zmq\",\"row\":\"DEALER/ROUTER round trips\","
                                "\"per_s\":"));
    assert_non_null(strstr(out, "{\"bench\":\"zmq\",\"row\":\"PUSH/PULL one-way\",\"per_s\":"));
    assert_null(strstr(out, "zmq     "));              /* no human line on stdout */
    for (char *l = out; *l; l = strchr(l, '\n') + 1) { /* every line one object */
        if (strncmp(l, "{\"bench\":", 9) != 0)
            fail_msg("not a JSON row: %s", l);
        if (!strchr(l, '\n'))
            break;
    }
    snprintf(cmd, sizeof cmd, "%s bench proto --seconds 0.1 --json 2>&1 >/dev/null",
             AB_AGENTBUS_BIN);
    assert_non_null(p = popen(cmd, "r"));
    n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    assert_int_equal(pclose(p), 0);
    assert_non_null(strstr(out, "decode + validate")); /* the human lines, on stderr */
    assert_null(strstr(out, "{\"bench\""));
}

static int count_of(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)) != NULL; p += strlen(what))
        n++;
    return n;
}

/* `agentbus bench ARGS --json`, its rows (stdout) into @p out; fails the test unless it
 * exits 0. */
static void json_rows(char *out, const char *args)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s bench %s --json 2>/dev/null", AB_AGENTBUS_BIN, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, OUT_MAX - 1, p);
    out[n] = '\0';
    assert_int_equal(pclose(p), 0);
}

/* The number after "KEY": in the JSON row that starts at @p row (fails the test if that row
 * has no such key). */
static double field_of(const char *row, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *end = strchr(row, '\n'), *at = strstr(row, k);
    if (at == NULL || (end != NULL && at > end))
        fail_msg("no %s in the row %.120s", key, row);
    return atof(at + strlen(k));
}

/* Equal but for the rounding of a figure written with 10 significant digits. */
static bool near(double x, double y)
{
    return fabs(x - y) <= 1e-6 * fmax(1, fabs(y));
}

/* Whether the JSON row at @p row has "KEY":null. */
static bool is_null(const char *row, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":null", key);
    const char *end = strchr(row, '\n'), *at = strstr(row, k);
    return at != NULL && (end == NULL || at < end);
}

/*
 * Every `target: ` row of @p out agrees with its own figures: `met` is 1 exactly when the
 * value stands against the limit as its words say (`<=`, `>=`, `under`), null when either
 * is not a number; the `targets` row counts them. @return the number of target rows.
 */
static int check_targets(const char *out)
{
    int n = 0, met = 0, judged = 0;
    for (const char *t = strstr(out, "\"row\":\"target: "); t;
         t = strstr(t + 1, "\"row\":\"target: ")) {
        n++;
        const char *end = strchr(t, '\n');
        assert_non_null(end);
        if (is_null(t, "value") || is_null(t, "limit")) {
            assert_true(is_null(t, "met"));
            continue;
        }
        double v = field_of(t, "value"), l = field_of(t, "limit");
        const char *under = strstr(t, " under "), *least = strstr(t, ">=");
        bool ok = under && under < end ? v < l : least && least < end ? v >= l : v <= l;
        assert_int_equal((int)field_of(t, "met"), ok);
        judged++;
        met += ok;
    }
    const char *sum = strstr(out, "\"row\":\"targets\"");
    assert_true(n == 0 ? sum == NULL : sum != NULL);
    if (sum) {
        assert_int_equal((int)field_of(sum, "met"), met);
        assert_int_equal((int)field_of(sum, "judged"), judged);
        assert_int_equal((int)field_of(sum, "left_out"), 0);
    }
    return n;
}

/* latency --row light --rounds 2: the three floor rows, then the light fsync ack row twice,
 * and no other row (bench_latency.c one_row). */
static void test_latency_one_row(void **state)
{
    (void)state;
    char out[OUT_MAX];
    json_rows(out, "latency --row light --rounds 2 --seconds 0.2");
    assert_int_equal(count_of(out, "\"row\":\"floor: "), 3); /* fdatasync, two round trips */
    assert_int_equal(count_of(out, "\"row\":\"ack, 1 event/publish, 1,000/s, fsync\""), 2);
    assert_int_equal(count_of(out, "\"row\":\"stalls: "), 0); /* only with --stalls */
    /* after them, the light row's three targets for each round, and their count */
    assert_int_equal(check_targets(out), 6);
    assert_int_equal(count_of(out, "{\"bench\":"), 5 + 6 + 1); /* no process, 80%, delivery */
    const char *p50 = "\"row\":\"target: fsync light, ack p50 <= fdatasync p50 + round trip + "
                      "50 us\"";
    const char *t = strstr(out, p50), *ack = strstr(out, "\"row\":\"ack, 1 event/publish");
    assert_true(t != NULL && ack != NULL && ack < t);
    assert_int_equal(count_of(out, p50), 2);
    /* its figure is the first round's p50, its limit made of the floors of the same run */
    double fs = field_of(strstr(out, "\"row\":\"floor: write+fdatasync"), "p50_us");
    double rt2 = field_of(strstr(out, "\"row\":\"floor: ZeroMQ round trip, two"), "p50_us");
    assert_true(near(field_of(t, "value"), field_of(ack, "p50_us")));
    assert_true(near(field_of(t, "limit"), fs + rt2 + 50));
    const char *over = strstr(out, "\"row\":\"target: fsync light, publishes over 10 ms in 0.2 s");
    assert_non_null(over);
    assert_true(field_of(over, "value") <= field_of(ack, "samples"));
}

/* latency --row delivery: the fsync maximum, then for 1 and 4 subscribers the delivery rows
 * (at 1,000/s, at 80% of that maximum, and at 80% of the maximum with those subscribers,
 * each followed by its acks) and that maximum, given as a share of the one without
 * subscribers; the last delivery row is paced from it (bench_latency.c delivery_rows). */
static void test_latency_delivery_rows(void **state)
{
    (void)state;
    char out[OUT_MAX], row[96];
    json_rows(out, "latency --row delivery --seconds 0.2");
    const char *ingest = strstr(out, "{\"bench\":\"ingest\",\"row\":\"fsync\"");
    assert_non_null(ingest);
    double max = field_of(ingest, "events_per_s");
    for (int nsub = 1; nsub <= 4; nsub += 3) {
        const char *s = nsub > 1 ? "s" : "";
        snprintf(row, sizeof row, "\"row\":\"max with %d subscriber%s, fsync\"", nsub, s);
        const char *with = strstr(out, row);
        assert_non_null(with);
        double w = field_of(with, "events_per_s");
        assert_true(w > 0);
        assert_true(fabs(field_of(with, "share_of_max") - w / max) < 1e-6 * (w / max));
        snprintf(row, sizeof row, "\"row\":\"delivery, 80%% of its max, fsync, %d subscriber%s\"",
                 nsub, s);
        const char *paced = strstr(out, row);
        assert_true(paced != NULL && paced > with); /* measured after its maximum */
        double got = field_of(paced, "events_per_s");
        assert_true(got > 0 && got < w); /* paced at 80% of it */
        assert_true(field_of(paced, "samples") > 0);
    }
    assert_int_equal(count_of(out, "\"row\":\"delivery, "), 6);
    assert_int_equal(count_of(out, "\"row\":\"  its acks (the same publishes)\""), 6);
    assert_int_equal(count_of(out, "\"row\":\"max with "), 2);
    assert_int_equal(count_of(out, "\"row\":\"ack, "), 0); /* no light or 80% ack row */
    assert_int_equal(count_of(out, "\"row\":\"floor: "), 0);
    /* a target for each delivery row: its p50 at most its acks' p50 + 50 us */
    assert_int_equal(check_targets(out), 6);
    const char *d = strstr(out, "\"row\":\"delivery, 80% of its max, fsync, 4 subscribers\"");
    assert_non_null(d);
    const char *a = strstr(d, "\"row\":\"  its acks (the same publishes)\"");
    const char *t = strstr(out, "\"row\":\"target: delivery p50 <= its acks' p50 + 50 us, 80% "
                                "of its max, 4 subscribers\"");
    assert_true(a != NULL && t != NULL);
    assert_true(near(field_of(t, "value"), field_of(d, "p50_us")));
    assert_true(near(field_of(t, "limit"), field_of(a, "p50_us") + 50));
}

/* latency --row light --stalls: a stalls row after each of the three floors and the ack row,
 * with its figures; the samples over 5 ms it counts are a part of the row's samples. */
static void test_latency_stalls(void **state)
{
    (void)state;
    char out[OUT_MAX];
    json_rows(out, "latency --row light --seconds 0.2 --stalls");
    assert_int_equal(count_of(out, "\"row\":\"stalls: floor: "), 3);
    const char *ack = strstr(out, "\"row\":\"stalls: ack, 1 event/publish, 1,000/s, fsync\"");
    assert_non_null(ack);
    const char *row = strstr(out, "\"row\":\"ack, 1 event/publish, 1,000/s, fsync\"");
    assert_true(row != NULL && row < ack); /* after its row */
    const char *over = strstr(ack, "\"over_5ms\":"), *samples = strstr(row, "\"samples\":");
    assert_true(over != NULL && samples != NULL && strstr(ack, "\"timer_stalls\":") != NULL);
    assert_true(atof(over + 11) <= atof(samples + 10));
    const char *during = strstr(ack, "\"during_a_stall\":");
    assert_true(during != NULL && atof(during + 17) <= atof(over + 11));
}

/* scale --row 10000 --rounds 2: the 100-run row and the 10,000-run row, twice, in turn, and
 * no 100,000-run row (bench_latency.c bench_scale). */
static void test_scale_one_row(void **state)
{
    (void)state;
    char out[OUT_MAX];
    json_rows(out, "scale --row 10000 --rounds 2 --seconds 0.2");
    const char *base = "\"row\":\"100 runs in flight\"", *row = "\"row\":\"10000 runs in flight\"";
    assert_int_equal(count_of(out, base), 2);
    assert_int_equal(count_of(out, row), 2);
    assert_int_equal(count_of(out, "\"row\":\"100000 runs"), 0);
    const char *b2 = strstr(strstr(out, base) + 1, base), *r1 = strstr(out, row);
    assert_true(r1 != NULL && b2 != NULL && r1 < b2); /* in turn: base, row, base, row */
    /* each of the four ingest rows says how it committed: the groups the broker made while
     * the row ran, their mean size and the commit times */
    const char *commits = "\"row\":\"group commits, fsync\"";
    assert_int_equal(count_of(out, commits), 4);
    for (const char *c = strstr(out, commits); c; c = strstr(c + 1, commits)) {
        const char *g = strstr(c, "\"groups\":"), *e = strstr(c, "\"events_per_group\":");
        const char *p50 = strstr(c, "\"commit_p50_us\":"), *nl = strchr(c, '\n');
        assert_true(g && e && p50 && nl && g < nl && e < nl && p50 < nl); /* in this row */
        double groups = atof(g + 9), per = atof(e + 19);
        assert_true(groups >= 1 && per >= 1 && per <= 4096); /* group-max 4096 */
        assert_true(atof(p50 + 16) > 0);
    }
    /* and what each of the broker's threads used: the writer a share of one core, the
     * store's checkpointer by its own name (store_ckpt.c invariant 5) */
    const char *threads = "\"row\":\"threads, fsync\"";
    assert_int_equal(count_of(out, threads), 4);
    for (const char *c = strstr(out, threads); c; c = strstr(c + 1, threads)) {
        const char *w = strstr(c, "\"ab-writer\":"), *k = strstr(c, "\"ab-checkpoint\":");
        const char *m = strstr(c, "\"ab-command\":"), *nl = strchr(c, '\n');
        assert_true(w && k && m && nl && w < nl && k < nl && m < nl); /* in this row */
        double writer = atof(w + 12);
        assert_true(writer > 0 && writer <= 1.5); /* one thread: at most a core, and slack */
    }
}

/* scale --durability process: every ingest and commits row of the run is a process one. */
static void test_scale_durability(void **state)
{
    (void)state;
    char out[OUT_MAX];
    json_rows(out, "scale --row 10000 --durability process --seconds 0.2");
    assert_int_equal(count_of(out, "{\"bench\":\"ingest\",\"row\":\"process\""), 2);
    assert_int_equal(count_of(out, "\"row\":\"group commits, process\""), 2);
    assert_int_equal(count_of(out, "fsync"), 0);
    assert_int_equal(count_of(out, "\"row\":\"10000 runs in flight\""), 1);
}

/* ingest --broker: one row, named for the broker's own durability, not two named fsync and
 * process that both measured the same broker; latency's rows likewise. */
static void test_ingest_against_a_broker(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    char out[OUT_MAX], args[256];
    snprintf(args, sizeof args, "ingest --broker %s --seconds 0.2", t->bp.cmd);
    json_rows(out, args);
    assert_int_equal(count_of(out, "{\"bench\":\"ingest\",\"row\":\"broker\""), 1);
    assert_int_equal(count_of(out, "\"row\":\"group commits, broker\""), 1);
    assert_int_equal(count_of(out, "{\"bench\":"), 2);
    assert_int_equal(count_of(out, "fsync") + count_of(out, "process"), 0);
    /* latency: the light ack row named for the broker, the floors as ever */
    snprintf(args, sizeof args, "latency --row light --broker %s --seconds 0.2", t->bp.cmd);
    json_rows(out, args);
    assert_int_equal(count_of(out, "\"row\":\"ack, 1 event/publish, 1,000/s, broker\""), 1);
    assert_int_equal(count_of(out, "\"row\":\"floor: "), 3);
    assert_int_equal(count_of(out, "fsync") + count_of(out, "process"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options_a_benchmark_does_not_take),
        cmocka_unit_test(test_json_rows),
        cmocka_unit_test(test_latency_one_row),
        cmocka_unit_test(test_latency_stalls),
        cmocka_unit_test(test_latency_delivery_rows),
        cmocka_unit_test(test_scale_one_row),
        cmocka_unit_test(test_scale_durability),
        cmocka_unit_test_setup_teardown(test_ingest_against_a_broker, it_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

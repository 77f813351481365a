/*
 * test_cli_bench.c - `agentbus bench` refuses what a benchmark does not take
 * (cli/bench_cmd.c invariant 2) with a usage error (exit 2) naming the
 * option, before it starts anything.
 */
#include "testutil.h"

#include "cli_run.h"

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
    refused("latency --rounds 3", "--rounds is for bench fanout");
    refused("actions --rounds 3", "--rounds is for bench fanout");
    refused("zmq --frame-per-event", "--frame-per-event is for the benchmarks that publish");
    refused("actions --frame-per-event", "--frame-per-event is for the benchmarks that publish");
    refused("proto --broker tcp://127.0.0.1:1", "are for the bus benchmarks");
    refused("ingest --size 256", "--size is for bench proto");
    refused("fanout --rounds 65", "--rounds takes a whole number from 1 to 64");
    refused("nosuch", "unknown benchmark 'nosuch'");
    refused("", "name a benchmark");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options_a_benchmark_does_not_take),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

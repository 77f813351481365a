/*
 * conformance.c - the check table and the runner of the conformance suite
 * (conformance.h): runs the checks against a broker's command endpoint,
 * prints `PASS name`, `FAIL name: reason` or `SKIP name: reason` per check
 * and a final `N passed, M failed, K skipped`. `agentbus conformance`
 * (cli/conformance_cmd.c) is its command line; docs/CONFORMANCE.md says what
 * each check proves.
 *
 * Invariants:
 *  1. Each check gets a fresh connection (hello/welcome done) and its own
 *     docs; the runner frees them and any SUB socket afterwards.
 *  2. A check that cannot even connect FAILs (the endpoint must answer hello).
 */
#include "conformance.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

struct check {
    const char *name;
    conf_fn fn;
};

static const struct check checks[] = {
    {"version", conf_check_version},
    {"ordering", conf_check_ordering},
    {"gap", conf_check_gap},
    {"duplicate", conf_check_duplicate},
    {"conflict", conf_check_conflict},
    {"fencing", conf_check_fencing},
    {"terminal", conf_check_terminal},
    {"errors", conf_check_errors},
    {"replay_run", conf_check_replay_run},
    {"replay_thread", conf_check_replay_thread},
    {"replay_all", conf_check_replay_all},
    {"heartbeat", conf_check_heartbeat},
    {"flow_control", conf_check_flow_control},
    {"unsupported", conf_check_unsupported},
    {"snapshots", conf_check_snapshots},
    {"actions", conf_check_actions},
    {"dispatch", conf_check_dispatch},
    {"cancel_run", conf_check_cancel_run},
    {"resume_run", conf_check_resume_run},
    {"threads", conf_check_threads},
};
#define NCHECKS (sizeof(checks) / sizeof(checks[0]))

static conf_result_t run_one(conf_t *cf, const struct check *ck)
{
    cf->reason[0] = '\0';
    ab_error_t err = AB_ERROR_INIT;
    conf_result_t r = CONF_FAIL;
    if (ab_doc_new(&cf->doc) != AB_OK || ab_doc_new(&cf->tmp) != AB_OK)
        conf_fail(cf, "out of memory");
    else if ((cf->c = conf_connect(cf, NULL, 0, &err)) != NULL)
        r = ck->fn(cf);
    if (cf->sub)
        zmq_close(cf->sub);
    cf->sub = NULL;
    ab_conn_destroy(&cf->c);
    ab_doc_destroy(&cf->doc);
    ab_doc_destroy(&cf->tmp);
    return r;
}

static int run_all(conf_t *cf, char **only, int nonly)
{
    int npass = 0, nfail = 0, nskip = 0;
    for (size_t i = 0; i < NCHECKS; i++) {
        bool want = nonly == 0;
        for (int k = 0; k < nonly; k++)
            want = want || strcmp(only[k], checks[i].name) == 0;
        if (!want)
            continue;
        conf_result_t r = run_one(cf, &checks[i]);
        npass += r == CONF_PASS;
        nskip += r == CONF_SKIP;
        nfail += r == CONF_FAIL;
        if (cf->json) {
            static const char *const names[] = {"pass", "fail", "skip"};
            printf("{\"check\":\"%s\",\"result\":\"%s\"", checks[i].name, names[r]);
            if (r != CONF_PASS) {
                printf(",\"reason\":");
                conf_json_str(cf->reason);
            }
            printf("}\n");
        } else if (r == CONF_PASS)
            printf("PASS %s\n", checks[i].name);
        else if (r == CONF_SKIP)
            printf("SKIP %s: %s\n", checks[i].name, cf->reason);
        else
            printf("FAIL %s: %s\n", checks[i].name, cf->reason);
        fflush(stdout);
    }
    conf_cleanup(cf);
    if (cf->json)
        printf("{\"passed\":%d,\"failed\":%d,\"skipped\":%d}\n", npass, nfail, nskip);
    else
        printf("%d passed, %d failed, %d skipped\n", npass, nfail, nskip);
    return nfail ? 1 : 0;
}

size_t conf_ncheck(void)
{
    return NCHECKS;
}

const char *conf_check_name(size_t i)
{
    return i < NCHECKS ? checks[i].name : NULL;
}

bool conf_check_known(const char *name)
{
    for (size_t i = 0; i < NCHECKS; i++)
        if (strcmp(name, checks[i].name) == 0)
            return true;
    return false;
}

int conf_run(const char *endpoint, int timeout_ms, char **only, int nonly, bool json)
{
    conf_t cf = {.endpoint = endpoint, .timeout_ms = timeout_ms, .json = json};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(cf.prefix, sizeof(cf.prefix), "conf-%ld-%lx%05lx", (long)getpid(), (long)ts.tv_sec,
             (long)(ts.tv_nsec / 10000));
    return run_all(&cf, only, nonly);
}

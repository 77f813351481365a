/*
 * demo.h - the demo fabric behind `agentbus demo` (demo/demo.c: the broker,
 * agent worker processes, observer and summary; demo/demo_agents.c: the body
 * of an agent worker process, the AG-UI runs it publishes and the one-line
 * report per run it sends back to the demo). The command line is
 * cli/demo_cmd.c. Not installed.
 */
#ifndef AB_DEMO_H
#define AB_DEMO_H

#include "agentbus/status.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define DEMO_OK         0
#define DEMO_FAIL       1
#define DEMO_MAX_AGENTS 32  /* agent worker processes */
#define DEMO_MAX_RUNS   599 /* runs of one demo */

/** What the command line asks of a demo. */
typedef struct demo_opts {
    const char *broker; /**< command endpoint of a running broker; NULL: start one */
    const char *data;   /**< data directory of the started broker; NULL: a temporary one */
    int agents, runs, pace_ms;
    bool json, no_color;
    bool secure;        /**< --secure: keys and an access file (demo_secure.c) */
    int worker;         /**< internal: --agent-worker K (0-based); -1 = the demo itself */
    const char *thread; /**< internal: --thread T of a worker */
    int dworker;        /**< internal: --dispatch-worker K (1, 2); 0 = none */
    const char *python; /**< --python SCRIPT: a Python worker's act after dispatch; NULL = none */
    /** The audit: `agentbus replay --verify` (argv as the command's); NULL = none. */
    int (*audit)(int argc, char **argv);
} demo_opts_t;

/**
 * Run the demo fabric (or, with o->worker >= 0, one agent worker process).
 * Installs SIGINT/SIGTERM handlers for its duration. @return DEMO_OK when
 * every run completed with its outcome, every acknowledged event was
 * observed exactly once and the audit passed; DEMO_FAIL (reason printed)
 * otherwise; 130 after SIGINT.
 */
int demo_run(const demo_opts_t *o);

/** The kinds of run the agents play, in the order the plan cycles through. */
typedef enum demo_kind {
    DEMO_PLANNER = 0, /* text streamed, a step, state snapshot + deltas, agentkit.task */
    DEMO_RESEARCHER,  /* reasoning span, a tool call with streamed args and its result */
    DEMO_APPROVAL,    /* ends with the interrupt outcome, asking for confirmation */
    DEMO_RESUME,      /* RUN_STARTED input.resume resolves the approval's interrupt */
    DEMO_FAILING,     /* ends with RUN_ERROR */
    DEMO_CANCELLED,   /* ends with the cancelled outcome */
    DEMO_NKINDS
} demo_kind_t;

/**
 * One run of the plan. The plan is computed the same way (make_plan() in
 * demo.c) by the demo and by every agent worker process. In a worker the
 * agent writes the producer side (published .. why) and reports it with
 * demo_report_run(); in the demo, demo_parse_report() copies the report in,
 * and the observer writes the observer side (observed .. outcome).
 */
typedef struct demo_run {
    char run[64];
    demo_kind_t kind;
    int agent;
    /* producer side */
    uint64_t published, acked;
    bool done;
    bool reported; /* demo: the worker's report line for this run arrived */
    char why[256]; /* the producer's failure, "" when none */
    /* observer side */
    uint64_t observed, last_seq;
    bool disorder;       /* a seq arrived twice or out of order */
    const char *outcome; /* the terminal event seen: "success", "interrupt", ... or NULL */
} demo_run_t;

/** One agent worker (a process of its own): its producer, its runs in order. */
typedef struct demo_agent {
    const char *endpoint, *thread;
    int pace_ms;
    volatile sig_atomic_t *stop; /* set on SIGINT/SIGTERM: stop between events */
    int index;
    demo_run_t **runs;
    int nruns;
    int failed;   /* runs that did not complete */
    FILE *report; /* one demo_report_run() line per run as it ends; NULL = none */
    /* the agent as a worker (agentbus/worker.h): serves agent "agent-K" with action
     * "status", answered between events; NULL when the broker has no workers */
    struct ab_worker *worker;
    const demo_run_t *current; /* the run being played, for "status" */
    uint64_t published;        /* events published so far, all runs */
} demo_agent_t;

/** The agent name agent worker @p index (0-based) serves: "agent-<index+1>". */
void demo_agent_name(int index, char *out, size_t size);

/** The agent's role name for a kind ("planner", "researcher", ...). */
const char *demo_kind_name(demo_kind_t k);

/** The outcome a kind's run ends with ("success", "interrupt", "error", "cancelled"). */
const char *demo_kind_outcome(demo_kind_t k);

/** Body of an agent worker process: publishes its runs, reporting each. */
void demo_agent_main(demo_agent_t *ag);

/**
 * Write the report line of a finished run, then flush:
 *   run <id> <published> <acked> <done 0|1> <why, to the end of the line>
 * @return 0, or -1 when it could not be written.
 */
int demo_report_run(FILE *f, const demo_run_t *r);

/**
 * Parse one report line (no newline) into the run of @p runs with its id,
 * which must belong to @p agent; sets r->reported.
 * @return 0, or -1 when the line is malformed or names no run of the agent.
 */
int demo_parse_report(const char *line, demo_run_t *runs, int nruns, int agent);

/** Body of a dispatch worker process (demo_dispatch.c): serves agent "demo-coder". */
int demo_dispatch_worker(const char *ep, int k, int pace_ms, volatile sig_atomic_t *stop);

/**
 * The demo's second act (demo_dispatch.c): two dispatch worker processes, an
 * approved interrupt, a cancel and a killed worker's reassigned run, on
 * thread @p thread. @return 0, or -1 with the reason in @p why.
 */
int demo_dispatch_act(FILE *info, const char *ep, const char *thread, int pace_ms, char *why,
                      size_t size);

/* ---- --secure (demo_secure.c) ------------------------------------------------ */

/**
 * Make the keys and the access file under DATA/keys for threads starting
 * @p prefix, and take the console's key for this process (the environment).
 * @return 0, or -1 (the reason printed).
 */
int demo_secure_setup(const char *data, const char *prefix, FILE *info);
/** The keys directory the broker gets (--keys), or NULL without --secure. */
const char *demo_secure_keys_dir(void);
/** Write the agents' global key options (4 entries) to @p argv; @return how many (0 or 4). */
int demo_key_args(const char **argv);
/**
 * With --secure, make this process's AGENTBUS_KEY the agents' key (@p agents) or
 * the console's again: around the fork of a child that is not an `agentbus`
 * command (the Python worker), which reads the environment. No-op otherwise.
 */
void demo_secure_child_env(bool agents);
/** Show (and check) that the access file is enforced; DEMO_OK without --secure. */
int demo_secure_check(const char *ep, const char *thread, FILE *info);

/**
 * The demo's third act (demo_dispatch.c, with --python SCRIPT): SCRIPT (the Python
 * package's python/examples/worker_agent.py) run by $AGENTBUS_PYTHON (default python3)
 * as a worker of agent "demo-py"; a run of it is started, ends interrupted, is approved
 * by its interrupt id with resume_run, and the replacement run succeeds. @return 0, or -1
 * with the reason in @p why. The worker process is stopped and reaped before it returns.
 */
int demo_python_act(FILE *info, const char *ep, const char *thread, const char *script, char *why,
                    size_t size);

#endif

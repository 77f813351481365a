/*
 * demo.h - the parts of `agentbus demo` (cli/demo.c: the command, broker,
 * observer and summary; cli/demo_agents.c: the agent workers and the AG-UI
 * runs they publish).
 */
#ifndef AB_CLI_DEMO_H
#define AB_CLI_DEMO_H

#include "agentbus/status.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

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
 * One run of the plan. Ids are set before any thread starts; then the agent
 * writes only the producer side (published .. why) and the observer (main
 * thread) only the observer side (observed .. outcome).
 */
typedef struct demo_run {
    char run[64];
    demo_kind_t kind;
    int agent;
    /* producer side */
    uint64_t published, acked;
    bool done;
    char why[256]; /* the producer's failure, "" when none */
    /* observer side */
    uint64_t observed, last_seq;
    bool disorder;       /* a seq arrived twice or out of order */
    const char *outcome; /* the terminal event seen: "success", "interrupt", ... or NULL */
} demo_run_t;

/** One agent worker: its own producer, its runs in order. */
typedef struct demo_agent {
    const char *endpoint, *thread;
    int pace_ms;
    volatile sig_atomic_t *stop; /* set on SIGINT/SIGTERM: stop between events */
    int index;
    demo_run_t **runs;
    int nruns;
    int failed; /* runs that did not complete */
    pthread_t tid;
} demo_agent_t;

/** The agent's role name for a kind ("planner", "researcher", ...). */
const char *demo_kind_name(demo_kind_t k);

/** The outcome a kind's run ends with ("success", "interrupt", "error", "cancelled"). */
const char *demo_kind_outcome(demo_kind_t k);

/** Thread body of an agent (arg: demo_agent_t *): publishes its runs. */
void *demo_agent_main(void *arg);

#endif

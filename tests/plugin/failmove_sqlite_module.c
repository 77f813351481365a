/*
 * failmove_sqlite_module.c - the SQLite plugin as a loadable module whose request_move
 * refuses the moves committed events ask for (to started, to ended) with AB_UNAVAILABLE
 * while the file named by the environment variable AB_FAILMOVE_FILE exists, as a store
 * write-locked by another connection would; every other call, and every other move
 * (assignment, back to the queue, cancel), is the built-in plugin's. Each refusal is one
 * line "failmove: request <id> to <state> refused" on stderr, each such move stored one line
 * "failmove: request <id> to <state> stored", so a test counts the tries and sees their order
 * (tests/integration/test_dispatch_retry.c).
 */
#include "agentbus/plugin.h"
#include "loader.h"
#include "store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static ab_plugin_t table;

static const char *to_name(ab_request_state_t s)
{
    return s == AB_REQ_STARTED ? "started" : "ended";
}

static ab_status_t failing_move(ab_plugin_db_t *db, uint64_t id, const ab_request_move_t *mv,
                                ab_request_t *out, ab_error_t *err)
{
    const char *flag = getenv("AB_FAILMOVE_FILE");
    bool ours = mv->state == AB_REQ_STARTED || mv->state == AB_REQ_ENDED;
    if (ours && flag != NULL && access(flag, F_OK) == 0) {
        fprintf(stderr, "failmove: request %" PRIu64 " to %s refused\n", id, to_name(mv->state));
        fflush(stderr);
        return ab_error_set(err, AB_UNAVAILABLE, "store", "failmove: the store is locked (test)");
    }
    ab_status_t rc = ab__store_request_move(db, id, mv, out, err);
    if (ours && rc == AB_OK) {
        fprintf(stderr, "failmove: request %" PRIu64 " to %s stored\n", id, to_name(mv->state));
        fflush(stderr);
    }
    return rc;
}

/** The plugin entry point (AB_PLUGIN_ENTRY_SYMBOL). */
__attribute__((visibility("default"))) const ab_plugin_t *ab_plugin_entry(void);

const ab_plugin_t *ab_plugin_entry(void)
{
    table = *ab__plugin_sqlite();
    table.request_move = failing_move;
    return &table;
}

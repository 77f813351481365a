/*
 * nolist_sqlite_module.c - the SQLite plugin as a loadable module without the
 * optional threads_list entry: its table is the built-in one with that entry
 * NULL. The broker must load it, announce capability `threads` unsupported
 * and answer the request `unsupported` (tests/integration/test_threads.c).
 */
#include "agentbus/plugin.h"
#include "loader.h"

static ab_plugin_t table;

/** The plugin entry point (AB_PLUGIN_ENTRY_SYMBOL). */
__attribute__((visibility("default"))) const ab_plugin_t *ab_plugin_entry(void);

const ab_plugin_t *ab_plugin_entry(void)
{
    table = *ab__plugin_sqlite();
    table.threads_list = NULL;
    return &table;
}

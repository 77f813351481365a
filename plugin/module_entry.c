/*
 * module_entry.c - the exported entry point of libagentbus-sqlite.so, the
 * built-in SQLite plugin packaged as a loadable module.
 *
 * Invariants:
 *  1. ab_plugin_entry is the only symbol the loader looks up; it returns the
 *     same constant table as the built-in ab__plugin_sqlite().
 */
#include "agentbus/plugin.h"
#include "loader.h"

/** The plugin entry point (AB_PLUGIN_ENTRY_SYMBOL). */
__attribute__((visibility("default"))) const ab_plugin_t *ab_plugin_entry(void);

const ab_plugin_t *ab_plugin_entry(void)
{
    return ab__plugin_sqlite();
}

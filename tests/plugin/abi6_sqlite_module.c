/*
 * abi6_sqlite_module.c - the SQLite plugin as a loadable module that says it
 * was built for plugin ABI 6: its table is the built-in one, its abi_version
 * 6 and its struct_size the ABI 6 table's (AB_PLUGIN_SIZE_ABI6), which ends
 * before threads_list. The loader must load it, and the broker must read its
 * threads_list as absent although the entry past struct_size is set
 * (tests/integration/test_threads.c: capability `threads` unsupported, the
 * request answered `unsupported`).
 */
#include "agentbus/plugin.h"
#include "loader.h"

static ab_plugin_t table;

/** The plugin entry point (AB_PLUGIN_ENTRY_SYMBOL). */
__attribute__((visibility("default"))) const ab_plugin_t *ab_plugin_entry(void);

const ab_plugin_t *ab_plugin_entry(void)
{
    table = *ab__plugin_sqlite();
    table.abi_version = 6;
    table.struct_size = AB_PLUGIN_SIZE_ABI6;
    return &table;
}

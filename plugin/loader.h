/*
 * loader.h - finding a persistence plugin (inside the build only: the
 * broker, the benchmarks and the tests; plugin authors need plugin.h alone).
 *
 * The built-in SQLite plugin is linked into the broker; any other is a
 * shared module loaded by path, whose entry point is checked against the ABI
 * of agentbus/plugin.h before any of its functions is called.
 */
#ifndef AB_PLUGIN_LOADER_H
#define AB_PLUGIN_LOADER_H

#include "agentbus/plugin.h"

/** The built-in SQLite persistence plugin (linked into the broker). */
const ab_plugin_t *ab__plugin_sqlite(void);

/** A loaded plugin: the table and the dlopen handle (NULL for built-ins). */
typedef struct ab_plugin_lib {
    const ab_plugin_t *plugin;
    void *dl;
} ab_plugin_lib_t;

/**
 * Load a plugin: "sqlite" (or NULL) is the built-in one; "postgres" is the
 * module libagentbus-postgres.so found as loader.c says (invariant 4);
 * anything containing a '/' is a path given to dlopen(). Checks the entry symbol, abi_version and
 * struct_size.
 * @return AB_OK; AB_NOT_FOUND (no such file / no entry symbol, message has
 *         dlerror()); AB_UNSUPPORTED (ABI mismatch, details "expected" and
 *         "actual"); AB_INVALID_CONFIG (missing function pointers, or only
 *         some of the request_* ones).
 */
AB_NODISCARD ab_status_t ab__plugin_load(const char *name_or_path, ab_plugin_lib_t *out,
                                         ab_error_t *err);

/**
 * Whether the plugin stores run requests (its request_* entries are set): a
 * broker over one that does not announces `dispatch` unsupported.
 */
bool ab__plugin_dispatches(const ab_plugin_t *p);

/**
 * Whether several writers may share the plugin's store (its wake_fd and
 * wake_drain entries are set, ABI 4): the broker then fans out the other
 * writers' commits and retries a batch the store refused as a conflict.
 */
bool ab__plugin_shared(const ab_plugin_t *p);

/** Whether a shared store serialises the thread rules (its append_fenced, ABI 8). */
bool ab__plugin_fences(const ab_plugin_t *p);
/** Whether brokers dispatch across the store (ABI 6: request_take, broker_lease and
 *  request_cancel set). */
bool ab__plugin_takes(const ab_plugin_t *p);

/** Unload (dlclose) a plugin loaded by path; no-op for built-ins. */
void ab__plugin_unload(ab_plugin_lib_t *lib);

#endif /* AB_PLUGIN_LOADER_H */

/*
 * loader.c - loading a persistence plugin: the built-in SQLite one by name,
 * any other shared object by path (dlopen), with the ABI checks of
 * agentbus/plugin.h.
 *
 * Invariants:
 *  1. A table is handed out only after every check passed: abi_version from
 *     AB_PLUGIN_ABI_OLDEST to AB_PLUGIN_ABI_VERSION, struct_size at least
 *     that ABI's table, a name and every required function pointer non-NULL;
 *     the optional groups (snapshots, requests) may be NULL, but the request
 *     entries only all together. An entry added after the oldest ABI is read
 *     only through ab_plugin_has(), which treats what lies past the table's
 *     struct_size as NULL (threads_list is read so already).
 *  2. A shared object whose table is refused is dlclose()d before returning:
 *     a failed load leaks nothing.
 *  3. dlopen() uses RTLD_NOW (missing symbols fail at load, not at the first
 *     call) and RTLD_LOCAL (a plugin's symbols never satisfy another's).
 *  4. A bare name other than "sqlite" is a module of this build or install:
 *     "postgres" is libagentbus-postgres.so, looked for in $AGENTBUS_PLUGIN_DIR,
 *     beside the running executable (a build tree) and in the installed
 *     plugin directory (AB_PLUGIN_INSTALL_DIR), in that order.
 */
#include "loader.h"
#include "agentbus/plugin.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef AB_PLUGIN_INSTALL_DIR
#define AB_PLUGIN_INSTALL_DIR "/usr/local/lib/agentbus"
#endif

static ab_status_t check_version(const ab_plugin_t *p, const char *what, ab_error_t *err)
{
    if (p->abi_version < AB_PLUGIN_ABI_OLDEST || p->abi_version > AB_PLUGIN_ABI_VERSION) {
        ab_error_set(err, AB_UNSUPPORTED, "abi_version",
                     "plugin %s was built for ABI %u, this broker speaks ABI %d (and loads %d)",
                     what, (unsigned)p->abi_version, AB_PLUGIN_ABI_VERSION, AB_PLUGIN_ABI_OLDEST);
        ab_error_detail_int(err, "expected", AB_PLUGIN_ABI_VERSION);
        ab_error_detail_int(err, "actual", p->abi_version);
        return AB_UNSUPPORTED;
    }
    /* the table of the oldest ABI loaded (7) ends where ABI 8's first entry begins; entries
     * past a table's struct_size read as NULL (ab_plugin_has(), plugin.h) */
    size_t need = offsetof(ab_plugin_t, append_fenced);
    if (p->struct_size < need) {
        ab_error_set(err, AB_UNSUPPORTED, "struct_size",
                     "plugin %s has a function table of %u bytes, this broker needs %zu (ABI %u)",
                     what, (unsigned)p->struct_size, need, (unsigned)p->abi_version);
        ab_error_detail_int(err, "expected", (int64_t)need);
        ab_error_detail_int(err, "actual", p->struct_size);
        return AB_UNSUPPORTED;
    }
    return AB_OK;
}

/* Name of the first NULL function pointer of the table, or NULL if none. */
static const char *missing_function(const ab_plugin_t *p)
{
    if (!p->open)
        return "open";
    if (!p->close)
        return "close";
    if (!p->append_batch)
        return "append_batch";
    if (!p->claim)
        return "claim";
    if (!p->head)
        return "head";
    if (!p->thread_heads)
        return "thread_heads";
    if (!p->head_pos)
        return "head_pos";
    if (!p->read)
        return "read";
    if (!p->event_bytes)
        return "event_bytes";
    return NULL;
}

bool ab__plugin_dispatches(const ab_plugin_t *p)
{
    return p && p->request_put && p->request_get && p->request_by_key && p->request_move &&
           p->request_list && p->request_thread_open && p->request_position && p->request_by_run;
}

/* Whether the request entries are all set or all NULL (plugin.h). */
static bool requests_whole(const ab_plugin_t *p)
{
    bool any = p->request_put || p->request_get || p->request_by_key || p->request_move ||
               p->request_list || p->request_thread_open || p->request_position ||
               p->request_by_run;
    return !any || ab__plugin_dispatches(p);
}

bool ab__plugin_shared(const ab_plugin_t *p)
{
    return p && p->wake_fd && p->wake_drain;
}

bool ab__plugin_takes(const ab_plugin_t *p)
{
    return ab__plugin_dispatches(p) && ab__plugin_shared(p) && p->request_take && p->broker_lease &&
           p->request_cancel;
}

bool ab__plugin_fences(const ab_plugin_t *p)
{
    return ab__plugin_shared(p) && ab_plugin_has(p, append_fenced);
}

static ab_status_t check_table(const ab_plugin_t *p, const char *what, ab_error_t *err)
{
    if (!p)
        return ab_error_set(err, AB_INVALID_CONFIG, "plugin",
                            "plugin %s: " AB_PLUGIN_ENTRY_SYMBOL "() returned NULL", what);
    ab_status_t s = check_version(p, what, err);
    if (s != AB_OK)
        return s;
    if (!p->name || !*p->name)
        return ab_error_set(err, AB_INVALID_CONFIG, "name", "plugin %s has no name", what);
    const char *fn = missing_function(p);
    if (fn)
        return ab_error_set(err, AB_INVALID_CONFIG, fn,
                            "plugin %s (%s) does not implement the required function %s", what,
                            p->name, fn);
    if (!requests_whole(p))
        return ab_error_set(err, AB_INVALID_CONFIG, "request_put",
                            "plugin %s (%s) implements only some request_* functions: a plugin "
                            "that dispatches implements all eight, one that cannot leaves all NULL",
                            what, p->name);
    if (!p->wake_fd != !p->wake_drain)
        return ab_error_set(err, AB_INVALID_CONFIG, "wake_fd",
                            "plugin %s (%s) implements only one of wake_fd and wake_drain", what,
                            p->name);
    bool any = p->request_take || p->broker_lease || p->request_cancel;
    if (any && !ab__plugin_takes(p))
        return ab_error_set(err, AB_INVALID_CONFIG, "request_take",
                            "plugin %s (%s): request_take, broker_lease and request_cancel come "
                            "together, and only with the request_* functions and "
                            "wake_fd/wake_drain",
                            what, p->name);
    if (p->request_cancel_held && !ab__plugin_takes(p))
        return ab_error_set(err, AB_INVALID_CONFIG, "request_cancel_held",
                            "plugin %s (%s): request_cancel_held comes only with request_take, "
                            "broker_lease and request_cancel",
                            what, p->name);
    if (ab_plugin_has(p, append_fenced) && !ab__plugin_shared(p))
        return ab_error_set(err, AB_INVALID_CONFIG, "append_fenced",
                            "plugin %s (%s): append_fenced comes only with wake_fd/wake_drain (a "
                            "store that other brokers write)",
                            what, p->name);
    return AB_OK;
}

static ab_status_t load_path(const char *path, ab_plugin_lib_t *out, ab_error_t *err)
{
    dlerror(); /* clear a stale error */
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *why = dlerror();
        return ab_error_set(err, AB_NOT_FOUND, "plugin", "cannot load plugin %s: %s", path,
                            why ? why : "unknown dlopen error");
    }
    dlerror();
    void *sym = dlsym(dl, AB_PLUGIN_ENTRY_SYMBOL);
    const char *why = dlerror();
    ab_status_t s = AB_OK;
    if (!sym || why) {
        s = ab_error_set(err, AB_NOT_FOUND, "plugin",
                         "plugin %s has no entry symbol " AB_PLUGIN_ENTRY_SYMBOL ": %s", path,
                         why ? why : "symbol is NULL");
        goto cleanup;
    }
    ab_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry); /* object -> function pointer, as POSIX allows */
    const ab_plugin_t *p = entry();
    s = check_table(p, path, err);
    if (s != AB_OK)
        goto cleanup;
    out->plugin = p;
    out->dl = dl;
    return AB_OK;
cleanup:
    dlclose(dl);
    return s;
}

/* The directory of the running executable into @p dir (no trailing '/'). */
static bool exe_dir(char *dir, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", dir, cap - 1);
    if (n <= 0)
        return false;
    dir[n] = '\0';
    char *slash = strrchr(dir, '/');
    if (!slash)
        return false;
    *slash = '\0';
    return true;
}

/* A module by name (invariant 4): the first of the candidate files that exists. */
static ab_status_t load_named(const char *name, ab_plugin_lib_t *out, ab_error_t *err)
{
    char dirs[3][2048] = {{0}};
    const char *env = getenv("AGENTBUS_PLUGIN_DIR");
    if (env && *env)
        snprintf(dirs[0], sizeof dirs[0], "%s", env);
    if (!exe_dir(dirs[1], sizeof dirs[1]))
        dirs[1][0] = '\0';
    snprintf(dirs[2], sizeof dirs[2], "%s", AB_PLUGIN_INSTALL_DIR);
    char path[2048 + 64];
    for (int i = 0; i < 3; i++) {
        if (!dirs[i][0])
            continue;
        snprintf(path, sizeof path, "%.2000s/libagentbus-%.16s.so", dirs[i], name);
        if (access(path, R_OK) == 0)
            return load_path(path, out, err);
    }
    return ab_error_set(err, AB_NOT_FOUND, "plugin",
                        "plugin %s: libagentbus-%s.so is not in $AGENTBUS_PLUGIN_DIR, beside the "
                        "agentbus executable (%s) nor in %s",
                        name, name, dirs[1][0] ? dirs[1] : "?", AB_PLUGIN_INSTALL_DIR);
}

ab_status_t ab__plugin_load(const char *name_or_path, ab_plugin_lib_t *out, ab_error_t *err)
{
    if (!out)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "plugin", "plugin load: NULL out");
    if (!name_or_path || strcmp(name_or_path, "sqlite") == 0) {
        const ab_plugin_t *p = ab__plugin_sqlite();
        ab_status_t s = check_table(p, "sqlite", err);
        if (s != AB_OK)
            return s;
        out->plugin = p;
        out->dl = NULL;
        return AB_OK;
    }
    if (strchr(name_or_path, '/'))
        return load_path(name_or_path, out, err);
    if (strcmp(name_or_path, "postgres") == 0)
        return load_named(name_or_path, out, err);
    return ab_error_set(err, AB_NOT_FOUND, "plugin",
                        "unknown plugin %s: the built-in one is \"sqlite\", the module "
                        "\"postgres\"; give any other as a path containing '/'",
                        name_or_path);
}

void ab__plugin_unload(ab_plugin_lib_t *lib)
{
    if (!lib)
        return;
    if (lib->dl)
        dlclose(lib->dl);
    lib->dl = NULL;
    lib->plugin = NULL;
}

/*
 * tool.h - what the standalone benchmark programs of bench/tools share:
 * dying with an agentbus error, and emptying a data directory between
 * measurements. Header-only; each program defines TOOL_NAME first.
 */
#ifndef AB_BENCH_TOOL_H
#define AB_BENCH_TOOL_H

#include "agentbus/status.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef TOOL_NAME
#error "define TOOL_NAME (the program's name, for its messages) before including tool.h"
#endif

/* Print "TOOL_NAME: what: status: message" and exit 1. */
static inline void die(const char *what, const ab_error_t *err)
{
    fprintf(stderr, TOOL_NAME ": %s: %s: %s\n", what, ab_status_name(err->code), err->message);
    exit(1);
}

/* Remove the files of @p dir (not its subdirectories) and make sure it exists. */
static inline void empty_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[1024];
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    mkdir(dir, 0700);
}

#endif /* AB_BENCH_TOOL_H */

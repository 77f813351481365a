/*
 * alloc.c - the allocator hooks of agentbus/alloc.h.
 */
#include "alloc_internal.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static ab_malloc_fn g_malloc = malloc;
static ab_realloc_fn g_realloc = realloc;
static ab_free_fn g_free = free;
static _Thread_local unsigned long g_failures;

unsigned long ab__alloc_failures(void)
{
    return g_failures;
}

void ab_set_allocator(ab_malloc_fn malloc_fn, ab_realloc_fn realloc_fn, ab_free_fn free_fn)
{
    g_malloc = malloc_fn ? malloc_fn : malloc;
    g_realloc = realloc_fn ? realloc_fn : realloc;
    g_free = free_fn ? free_fn : free;
    json_set_alloc_funcs(ab__malloc, ab__free);
}

void *ab__malloc(size_t size)
{
    void *p = g_malloc(size ? size : 1);
    if (!p)
        g_failures++;
    return p;
}

void *ab__calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    size_t total = n * size;
    void *p = ab__malloc(total);
    if (p)
        memset(p, 0, total);
    return p;
}

void *ab__realloc(void *ptr, size_t size)
{
    if (!ptr)
        return ab__malloc(size);
    void *p = g_realloc(ptr, size ? size : 1);
    if (!p)
        g_failures++;
    return p;
}

void ab__free(void *ptr)
{
    if (ptr)
        g_free(ptr);
}

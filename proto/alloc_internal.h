/*
 * alloc_internal.h - the proto library's allocation entry points, all
 * routed through the hooks of ab_set_allocator() (agentbus/alloc.h).
 */
#ifndef AB_ALLOC_INTERNAL_H
#define AB_ALLOC_INTERNAL_H

#include "agentbus/alloc.h"

#include <stddef.h>

void *ab__malloc(size_t size);
void *ab__calloc(size_t n, size_t size);
/** Like realloc(): NULL @p ptr allocates; on failure @p ptr stays valid. */
void *ab__realloc(void *ptr, size_t size);
void ab__free(void *ptr);

/**
 * Allocations (by agentbus or jansson) that failed on this thread so far.
 * jansson does not always report a failed allocation (some parsers drop the
 * value), and the reducer's helpers degrade silently, so callers compare
 * this count before and after such a call.
 */
unsigned long ab__alloc_failures(void);

#endif /* AB_ALLOC_INTERNAL_H */

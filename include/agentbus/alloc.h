/*
 * agentbus/alloc.h - the allocator behind the proto library.
 *
 * Every allocation made by the proto decoder, the JSON bridge, the
 * lifecycle checker, the reducer, the snapshot builder and the codec goes
 * through the hooks set here, and so does every allocation jansson makes
 * (ab_set_allocator() installs them with json_set_alloc_funcs()). Tests use
 * it to fail the n-th allocation; embedders to account memory.
 *
 * Set the allocator once, before any other agentbus or jansson call: memory
 * is released through the hook that is current at the time, and jansson
 * requires its functions to be set before any json_t exists. Not
 * thread-safe: no other thread may be running agentbus code meanwhile.
 */
#ifndef AGENTBUS_ALLOC_H
#define AGENTBUS_ALLOC_H

#include "agentbus/status.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void *(*ab_malloc_fn)(size_t size);
typedef void *(*ab_realloc_fn)(void *ptr, size_t size);
typedef void (*ab_free_fn)(void *ptr);

/**
 * Install the allocator. A NULL function selects libc's (malloc, realloc,
 * free). @p realloc_fn must, like realloc, leave the block untouched when it
 * fails; it is never called with a NULL pointer or a zero size.
 */
AB_API void ab_set_allocator(ab_malloc_fn malloc_fn, ab_realloc_fn realloc_fn, ab_free_fn free_fn);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_ALLOC_H */

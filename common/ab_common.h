/*
 * ab_common.h - the few helpers every module of agentbus needs, written once:
 * the monotonic clock, the FNV-1a hash, a UTF-8 cut and a doubling array.
 *
 * Header-only (static inline), so each library (proto, store, plugin, client,
 * broker, cli) carries its own copy and none has to export an internal symbol
 * for another. Never installed, never included by a public header.
 */
#ifndef AB_COMMON_H
#define AB_COMMON_H

#include "agentbus/value.h" /* ab_limits_t, ab_utf8_valid() */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* ---- the monotonic clock ------------------------------------------------- */

/** Milliseconds of CLOCK_MONOTONIC: for deadlines and intervals, never dates. */
static inline int64_t ab__mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/** Microseconds of CLOCK_MONOTONIC: for short intervals (the writer's slow-group log). */
static inline int64_t ab__mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/** Seconds of CLOCK_MONOTONIC with nanosecond resolution (benchmarks). */
static inline double ab__mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- decoding what a broker stored ---------------------------------------- */

/**
 * The limits for decoding an event a broker stored, read back from its store or replayed
 * to a client: the defaults, but any size. Each such event passed that broker's own limits
 * when it was published, and --max-event-bytes may be above the default 1 MiB (or have
 * been): with the defaults such an event would read as damaged. The frame or row that
 * carries it already bounds the memory.
 */
static inline ab_limits_t ab__limits_stored(void)
{
    ab_limits_t lim = ab_limits_default();
    lim.max_event_bytes = UINT32_MAX;
    return lim;
}

/** The CLOCK_REALTIME time @p ms milliseconds from now, in @p ts: the deadline of a
 *  pthread_cond_timedwait() on a condition variable of the default clock. */
static inline void ab__deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/** A seed for a per-object random generator: the clock's nanoseconds mixed
 *  with @p salt (an address, a pid), so two objects made at once differ. */
static inline uint64_t ab__mono_seed(uint64_t salt)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 32 ^ salt;
}

/* ---- FNV-1a ---------------------------------------------------------------- */

#define AB__FNV64_BASIS 0xcbf29ce484222325ull /* 14695981039346656037 */
#define AB__FNV32_BASIS 2166136261u

/** Continue the 64-bit FNV-1a hash @p h over @p n bytes at @p p. */
static inline uint64_t ab__fnv64_more(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h;
}

/** The 64-bit FNV-1a hash of @p n bytes at @p p. */
static inline uint64_t ab__fnv64(const void *p, size_t n)
{
    return ab__fnv64_more(AB__FNV64_BASIS, p, n);
}

/** Continue the 32-bit FNV-1a hash @p h over @p n bytes at @p p. */
static inline uint32_t ab__fnv32_more(uint32_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 16777619u;
    }
    return h;
}

/* ---- UTF-8 ---------------------------------------------------------------- */

/**
 * The length of the longest prefix of s[0..n) of at most @p max bytes that is valid UTF-8
 * (ab_utf8_valid()): a cut at @p max steps back before a character it would split, and the
 * prefix ends before the first byte that starts no valid character (a stray continuation
 * byte, an overlong or surrogate form, a sequence cut short by @p n), so what is left can
 * always go on the wire, whose strings are UTF-8. s[0..n) must be readable; s need not be
 * NUL-terminated. 0 when @p max is 0.
 */
static inline size_t ab__utf8_cut(const char *s, size_t n, size_t max)
{
    size_t end = n < max ? n : max, i = 0;
    while (i < end) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        if (len > end - i || (len > 1 && !ab_utf8_valid(s + i, len)))
            break; /* split by the cut, or not UTF-8 */
        i += len;
    }
    return i;
}

/* ---- the doubling array ------------------------------------------------------ */

typedef void *(*ab__realloc_fn)(void *ptr, size_t size);

/**
 * Room for @p need elements of @p size bytes in the array @p items of
 * capacity *@p cap, allocated with @p re (which must behave like realloc).
 * The capacity doubles from @p first until it holds @p need.
 *
 * Returns the array to use from now on (@p items itself when it had room) and
 * updates *@p cap; returns NULL when memory runs out or the size would
 * overflow, and then @p items and *@p cap are as they were.
 */
static inline void *ab__grow_with(ab__realloc_fn re, void *items, size_t *cap, size_t need,
                                  size_t size, size_t first)
{
    if (need <= *cap)
        return items;
    size_t n = *cap ? *cap : first;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return NULL;
        n *= 2;
    }
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = re(items, n * size);
    if (!p)
        return NULL;
    *cap = n;
    return p;
}

/** ab__grow_with() on libc's realloc. */
static inline void *ab__grow(void *items, size_t *cap, size_t need, size_t size, size_t first)
{
    return ab__grow_with(realloc, items, cap, need, size, first);
}

#endif /* AB_COMMON_H */

/*
 * pg_chunk.c - reading the records of a stored chunk (pg_chunk.h).
 *
 * Invariants:
 *  1. Every read is bounds-checked against the chunk's length before it is
 *     made: a record whose header or bytes would run past the end is -1, and
 *     nothing of it is returned.
 *  2. *at only grows, by exactly one record per call that returns 1.
 */
#include "pg_chunk.h"

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int ab__pg_chunk_next(const uint8_t *data, size_t len, size_t *at, pg_rec_t *out)
{
    if (*at == len)
        return 0;
    if (*at > len || len - *at < PG_REC_HDR)
        return -1;
    const uint8_t *p = data + *at;
    uint32_t n = get32(p + 4);
    if (len - *at - PG_REC_HDR < n)
        return -1;
    out->off = get32(p);
    out->len = n;
    out->seq = (uint64_t)get32(p + 8) << 32 | get32(p + 12);
    out->bytes = p + PG_REC_HDR;
    *at += PG_REC_HDR + n;
    return 1;
}

/*
 * pg_chunk.c - reading the records of a stored chunk (pg_chunk.h).
 *
 * Invariants:
 *  1. Every read is bounds-checked against the chunk's length before it is
 *     made: a record whose header or bytes would run past the end is -1, and
 *     nothing of it is returned.
 *  2. *at only grows, by exactly one record per call that returns 1.
 *  3. A packed chunk is trusted for nothing: its plain length is checked
 *     against what LZ4 can make of the bytes that follow before anything is
 *     allocated for it, and the block must unpack to exactly that length.
 */
#include "pg_chunk.h"

#include <lz4.h>

/* LZ4 makes at most 255 bytes of one (its format's largest ratio), plus a few at the end */
#define LZ4_MAX_RATIO 255u

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

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

size_t ab__pg_chunk_pack_bound(size_t len)
{
    return len > PG_PLAIN_MAX ? 0 : PG_PACK_HDR + (size_t)LZ4_compressBound((int)len);
}

size_t ab__pg_chunk_pack(const uint8_t *plain, size_t len, uint8_t *out)
{
    if (len < PG_PACK_MIN || len > PG_PLAIN_MAX)
        return 0;
    int n = LZ4_compress_default((const char *)plain, (char *)out + PG_PACK_HDR, (int)len,
                                 LZ4_compressBound((int)len));
    if (n <= 0 || (size_t)n + PG_PACK_HDR >= len)
        return 0;
    put32(out, 0xffffffffu);
    put32(out + 4, (uint32_t)len);
    return (size_t)n + PG_PACK_HDR;
}

int ab__pg_chunk_packed(const uint8_t *data, size_t len, size_t *plain_len)
{
    if (len < 4 || get32(data) != 0xffffffffu)
        return 0;
    if (len < PG_PACK_HDR)
        return -1;
    size_t plain = get32(data + 4), block = len - PG_PACK_HDR;
    if (plain == 0 || plain > PG_PLAIN_MAX || plain / LZ4_MAX_RATIO > block)
        return -1;
    *plain_len = plain;
    return 1;
}

int ab__pg_chunk_unpack(const uint8_t *data, size_t len, uint8_t *out, size_t plain_len)
{
    if (len <= PG_PACK_HDR || len - PG_PACK_HDR > (size_t)INT32_MAX || plain_len > PG_PLAIN_MAX)
        return -1;
    int n = LZ4_decompress_safe((const char *)data + PG_PACK_HDR, (char *)out,
                                (int)(len - PG_PACK_HDR), (int)plain_len);
    return n >= 0 && (size_t)n == plain_len ? 0 : -1;
}

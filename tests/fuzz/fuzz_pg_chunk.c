/*
 * fuzz_pg_chunk.c - the PostgreSQL plugin's chunk reader (plugin/postgres/
 * pg_chunk.h) over any bytes, as a stored chunk could hold them after damage:
 * a packed chunk is unpacked first (its header refused, or its block, without
 * writing past the plain length it names); every record then returned lies
 * inside the plain bytes, the cursor only grows, and it ends with 0 (the end)
 * or -1 (malformed), never by reading past the end.
 */
#include "pg_chunk.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void records(const uint8_t *data, size_t size)
{
    size_t at = 0, prev = 0;
    pg_rec_t rec;
    int k;
    while ((k = ab__pg_chunk_next(data, size, &at, &rec)) == 1) {
        if (at <= prev || at > size || rec.bytes < data || rec.bytes + rec.len > data + size)
            abort();
        prev = at;
    }
    if (k != 0 && k != -1)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t plain = 0;
    int k = ab__pg_chunk_packed(data, size, &plain);
    if (k == 0) {
        records(data, size);
        return 0;
    }
    if (k != 1) {
        if (k != -1)
            abort();
        return 0;
    }
    if (plain == 0 || plain > PG_PLAIN_MAX || plain / 255 > size)
        abort(); /* the header's bound (pg_chunk.c invariant 3) */
    uint8_t *out = malloc(plain);
    if (!out)
        return 0;
    if (ab__pg_chunk_unpack(data, size, out, plain) == 0)
        records(out, plain);
    free(out);
    return 0;
}

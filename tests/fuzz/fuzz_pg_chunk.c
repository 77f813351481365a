/*
 * fuzz_pg_chunk.c - the PostgreSQL plugin's chunk reader (plugin/postgres/
 * pg_chunk.h) over any bytes, as a stored chunk could hold them after damage:
 * every record it returns lies inside the input, the cursor only grows, and
 * it ends with 0 (the end) or -1 (malformed), never by reading past the end.
 */
#include "pg_chunk.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
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
    return 0;
}

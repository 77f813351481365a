/*
 * pg_chunk.h - the records of a chunk, the PostgreSQL plugin's storage unit
 * (docs/SCALING.md "Layout"): a batch stores one row per run (ab_chunks), its
 * events of the batch as records, each a 16-byte big-endian header - u32
 * position offset from the batch's first position, u32 length, u64 seq - and
 * the producer's bytes, in position order. No libpq here, so the fuzz target
 * (tests/fuzz/fuzz_pg_chunk.c) builds the parser alone.
 */
#ifndef AB_PG_CHUNK_H
#define AB_PG_CHUNK_H

#include <stddef.h>
#include <stdint.h>

#define PG_REC_HDR 16

/** One record of a chunk (views into the chunk). */
typedef struct pg_rec {
    uint32_t off; /**< position - batch_first */
    uint64_t seq;
    const uint8_t *bytes;
    uint32_t len;
} pg_rec_t;

/**
 * The next record of chunk @p data (@p len bytes) at *@p at, which moves past it.
 * @return 1 (a record in *out), 0 (the end), -1 (malformed: a header or bytes
 *         running past the end). Never reads outside [data, data + len).
 */
int ab__pg_chunk_next(const uint8_t *data, size_t len, size_t *at, pg_rec_t *out);

#endif /* AB_PG_CHUNK_H */

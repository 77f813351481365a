/*
 * pg_chunk.h - the records of a chunk, the PostgreSQL plugin's storage unit
 * (docs/SCALING.md "Layout"): a batch stores one row per run (ab_chunks), its
 * events of the batch as records, each a 16-byte big-endian header - u32
 * position offset from the batch's first position, u32 length, u64 seq - and
 * the producer's bytes, in position order. Since schema 7 the plugin stores a
 * chunk packed when that makes it smaller: the 4 bytes ff ff ff ff (a plain
 * chunk cannot start with them: its first record's offset is below 2^31), the
 * u32 big-endian length of the plain records, then those records as one LZ4
 * block. No libpq here, so the fuzz target (tests/fuzz/fuzz_pg_chunk.c) builds
 * the parser alone.
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

#define PG_PACK_HDR  8          /**< the packed form's marker and plain length */
#define PG_PACK_MIN  256        /**< plain chunks shorter than this are stored plain */
#define PG_PLAIN_MAX (1u << 30) /**< longest plain chunk (PostgreSQL's own field bound) */

/** Bytes ab__pg_chunk_pack may write for @p len plain bytes. */
size_t ab__pg_chunk_pack_bound(size_t len);
/**
 * Pack the @p len plain bytes at @p plain into @p out (at least
 * ab__pg_chunk_pack_bound(len) bytes).
 * @return the packed length; 0 when packing would not make the chunk smaller
 *         (or it is shorter than PG_PACK_MIN): store it plain.
 */
size_t ab__pg_chunk_pack(const uint8_t *plain, size_t len, uint8_t *out);
/**
 * Whether stored chunk @p data (@p len bytes) is packed.
 * @return 1 (packed; *plain_len: the length it unpacks to), 0 (plain), -1 (a
 *         packed header that cannot be right: a plain length over PG_PLAIN_MAX
 *         or more than LZ4 can make of the bytes that follow).
 */
int ab__pg_chunk_packed(const uint8_t *data, size_t len, size_t *plain_len);
/**
 * Unpack packed chunk @p data (@p len bytes, ab__pg_chunk_packed() 1 with
 * @p plain_len) into @p out (@p plain_len bytes).
 * @return 0, or -1 when the block is malformed or does not unpack to exactly
 *         @p plain_len bytes. Never writes outside [out, out + plain_len).
 */
int ab__pg_chunk_unpack(const uint8_t *data, size_t len, uint8_t *out, size_t plain_len);

#endif /* AB_PG_CHUNK_H */

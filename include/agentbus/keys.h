/*
 * agentbus/keys.h - CURVE key pairs and their files (docs/OPERATIONS.md
 * "Securing a bus across machines").
 *
 * A key is 32 bytes, written as 40 characters of Z85 (ZeroMQ's text form).
 * `agentbus keygen NAME` writes two files:
 *
 *   NAME.key         the public key: one line "public-key <40 chars>\n"
 *   NAME.key_secret  the secret key: "public-key <40>\nsecret-key <40>\n",
 *                    mode 0600 (readable by its owner only)
 *
 * Lines starting with '#' and blank lines are ignored when read; nothing
 * else may be in the file. A secret file whose mode lets the group or others
 * read it is refused.
 */
#ifndef AGENTBUS_KEYS_H
#define AGENTBUS_KEYS_H

#include "agentbus/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Characters of a key in Z85, and the size of a buffer holding one (NUL-terminated). */
#define AB_KEY_Z85_LEN  40
#define AB_KEY_Z85_SIZE 41

/** A key pair in Z85; secret is "" for a public key only. */
typedef struct ab_keypair {
    char public_key[AB_KEY_Z85_SIZE];
    char secret_key[AB_KEY_Z85_SIZE];
} ab_keypair_t;

/** Make a new CURVE key pair. @return AB_OK, or AB_UNSUPPORTED (libzmq without CURVE). */
AB_API AB_NODISCARD ab_status_t ab_keypair_new(ab_keypair_t *out, ab_error_t *err);

/**
 * Write @p kp as DIR/NAME.key and DIR/NAME.key_secret (the secret file
 * created with mode 0600, neither overwritten when it exists).
 * @return AB_OK; AB_CONFLICT (a file exists); AB_INVALID_ARGUMENT (a name
 *         with '/' or empty); AB_IO (with the path and errno's text).
 */
AB_API AB_NODISCARD ab_status_t ab_keypair_write(const ab_keypair_t *kp, const char *dir,
                                                 const char *name, ab_error_t *err);

/**
 * Read a key file: a public one (only public_key is set) or a secret one
 * (both; the secret must match the public key).
 * @return AB_OK; AB_INVALID_ARGUMENT with "PATH:LINE: what" for a malformed
 *         line or a bad key; AB_UNAUTHORIZED for a secret file readable by
 *         group or others; AB_UNSUPPORTED for a secret file when libzmq
 *         was built without CURVE (the pair cannot be checked);
 *         AB_NOT_FOUND, AB_IO.
 */
AB_API AB_NODISCARD ab_status_t ab_keypair_read(ab_keypair_t *out, const char *path,
                                                ab_error_t *err);

/** The fingerprint logged for a key: the first 8 characters of its Z85, NUL-terminated. */
AB_API void ab_key_fingerprint(const char *z85, char out[9]);

#ifdef __cplusplus
}
#endif
#endif /* AGENTBUS_KEYS_H */

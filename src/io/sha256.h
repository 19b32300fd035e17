/* io/sha256.h: SHA-256 (FIPS 180-4), streaming, for checking downloaded files against
 * the sha256 the Hugging Face hub publishes for LFS files. */
#ifndef CELER_SHA256_H
#define CELER_SHA256_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];       /* chaining state */
    uint64_t bytes;      /* message length so far */
    uint8_t buf[64];     /* a partial block of bytes % 64 bytes */
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
/* Writes the 32-byte digest; c must be initialised again before reuse. */
void sha256_final(sha256_ctx *c, uint8_t out[32]);
/* The digest as 64 lower-case hex digits plus NUL. */
void sha256_hex(const uint8_t d[32], char out[65]);
/* SHA-256 of a whole file as hex into out. 0, or -1 with a message naming the file. */
int sha256_file(const char *path, char out[65]);
#endif

/* sha256.h — SHA-256 (FIPS 180-4), streamed: the hub's downloads are checked
 * against the sha256 the hub reports for each LFS file while they arrive, so a
 * multi-gigabyte model is hashed once, not read back after the transfer.
 *
 * A sha256_ctx is plain data on the caller's stack; nothing to free. */
#ifndef BK_SHA256_H
#define BK_SHA256_H
#include <stddef.h>
#include <stdint.h>

typedef struct sha256_ctx {
    uint32_t h[8];   /* the running hash state */
    uint64_t n;      /* bytes hashed so far */
    uint8_t buf[64]; /* a partial block: n % 64 bytes of it are filled */
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t len);
/* The digest as 64 lower-case hex digits and a NUL; c is spent afterwards. */
void sha256_final_hex(sha256_ctx *c, char hex[65]);
#endif

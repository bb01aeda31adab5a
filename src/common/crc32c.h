/* crc32c.h - CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum that S3
 * (x-amz-checksum-crc32c), iSCSI and ext4 use, and that s3direct stores per tensor.
 *
 * Values are the finished CRC (init and final xor of 0xFFFFFFFF applied inside), so a run
 * starts from 0 and chains: s3d_crc32c(s3d_crc32c(0, a, na), b, nb) == CRC of a||b.
 * s3d_crc32c(0, "123456789", 9) == 0xE3069283.
 *
 * Every function is pure and thread-safe. The implementation (SSE4.2 with three interleaved
 * streams, ARMv8 CRC instructions, or slicing-by-8 tables) is chosen once, at first use. */
#ifndef S3D_COMMON_CRC32C_H
#define S3D_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include "common/compiler.h"

/* CRC of p[0..n) continued from crc (0 to start). p may be NULL when n is 0. */
uint32_t s3d_crc32c(uint32_t crc, const void *p, size_t n);

/* The CRC of A||B from crc1 = CRC(A), crc2 = CRC(B) and len2 = length of B in bytes.
 * O(log len2); lets pieces of one tensor be summed on different threads, in any order. */
uint32_t s3d_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

/* Length of the base64 form, NUL included ("4waSgw==" is 8 characters). */
#define S3D_CRC32C_B64_LEN 9
/* Writes the x-amz-checksum-crc32c header value of crc: base64 of its 4 big-endian bytes,
 * NUL-terminated, into out (S3D_CRC32C_B64_LEN bytes). */
void s3d_crc32c_base64(uint32_t crc, char out[S3D_CRC32C_B64_LEN]);
/* Parses such a value (exactly 8 characters at s, no NUL needed); 0 and *out on success, -1
 * if it is not the base64 of 4 bytes. */
S3D_NODISCARD int s3d_crc32c_from_base64(const char *s, size_t len, uint32_t *out);

/* Name of the implementation in use: "sse4.2", "armv8", or "table". Static string. */
const char *s3d_crc32c_impl(void);

/* The portable table implementation, always available (tests compare against it; the
 * benchmark measures it). Same contract as s3d_crc32c. */
uint32_t s3d_crc32c_table(uint32_t crc, const void *p, size_t n);

#endif

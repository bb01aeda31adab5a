/* crc32c.c - CRC-32C in software (slicing-by-8) and with the CRC instructions of the CPU:
 * SSE4.2's crc32 on x86-64, ARMv8's crc32c[bd] on aarch64 (Grace, Graviton: an optional
 * ARMv8.0 feature, so checked at run time through HWCAP_CRC32).
 *
 * The hardware path follows the structure of Mark Adler's crc32c.c: the crc32 instruction has
 * a latency of 3 cycles and a throughput of 1 per cycle (on ARM cores alike), so three
 * independent streams over three adjacent blocks run at full rate; the three partial CRCs are
 * then merged by shifting the earlier ones over the later blocks' length (a multiplication by
 * x^(8*len) modulo the polynomial, done with four 256-entry tables per block length). The
 * loop is written once over two per-architecture primitives, crc_u64 and crc_u8.
 *
 * "Raw" CRC below means the register without the initial and final inversion: raw CRCs are
 * linear, which is what makes shifting and combining work. */
#include "common/crc32c.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include "common/compiler.h"

#define POLY 0x82f63b78u /* reflected Castagnoli polynomial */

/* Block sizes of the three-stream hardware loop: LONG for large buffers, SHORT for the
 * remainder. LONG amortizes the merge; SHORT keeps mid-size buffers (4 KiB tensors) fast. */
#define LONG_BLOCK  8192
#define SHORT_BLOCK 256

static uint32_t tab8[8][256];        /* slicing-by-8 tables */
static uint32_t x2n[32];             /* x^(2^k) mod P */
static uint32_t shift_long[4][256];  /* raw CRC times x^(8*LONG_BLOCK) */
static uint32_t shift_short[4][256]; /* raw CRC times x^(8*SHORT_BLOCK) */
static bool have_hw;                 /* the CPU has the instructions of the hardware path below */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* a(x) * b(x) mod P, both reflected (bit 31 is x^0). */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

/* x^(n * 2^k) mod P. */
static uint32_t x2nmodp(uint64_t n, unsigned k)
{
    uint32_t p = 1u << 31; /* x^0 */
    while (n) {
        if (n & 1)
            p = multmodp(x2n[k & 31], p);
        n >>= 1;
        k++;
    }
    return p;
}

static void make_shift_table(uint32_t t[4][256], size_t len)
{
    uint32_t op = x2nmodp(len, 3); /* x^(8 * len) */
    for (unsigned i = 0; i < 256; i++) {
        t[0][i] = multmodp(op, i);
        t[1][i] = multmodp(op, i << 8);
        t[2][i] = multmodp(op, i << 16);
        t[3][i] = multmodp(op, i << 24);
    }
}

static void crc_init(void)
{
    for (unsigned n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        tab8[0][n] = c;
    }
    for (unsigned n = 0; n < 256; n++) {
        uint32_t c = tab8[0][n];
        for (int k = 1; k < 8; k++) {
            c = tab8[0][c & 0xff] ^ (c >> 8);
            tab8[k][n] = c;
        }
    }
    uint32_t p = 1u << 30; /* x^1 */
    x2n[0] = p;
    for (int k = 1; k < 32; k++)
        x2n[k] = p = multmodp(p, p);
    make_shift_table(shift_long, LONG_BLOCK);
    make_shift_table(shift_short, SHORT_BLOCK);
#if defined(__x86_64__)
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2");
#elif defined(__aarch64__)
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7) /* asm/hwcap.h, which older C libraries do not include */
#endif
    have_hw = (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
#endif
}

static inline uint32_t shift(const uint32_t t[4][256], uint32_t crc)
{
    return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
}

static uint32_t raw_table(uint32_t crc, const unsigned char *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        crc = tab8[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc; /* little-endian: the CRC folds into the first four bytes */
        crc = tab8[7][w & 0xff] ^ tab8[6][(w >> 8) & 0xff] ^ tab8[5][(w >> 16) & 0xff] ^
              tab8[4][(w >> 24) & 0xff] ^ tab8[3][(w >> 32) & 0xff] ^ tab8[2][(w >> 40) & 0xff] ^
              tab8[1][(w >> 48) & 0xff] ^ tab8[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = tab8[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__)
#include <nmmintrin.h>
#define S3D_CRC_HW "sse4.2"
/* Newer clang (zig cc, the glibc 2.28 build of the GPU bundle) keeps crc32 apart from SSE4.2. */
#if defined(__clang__) && __clang_major__ >= 14
#define S3D_CRC_TARGET "sse4.2,crc32"
#else
#define S3D_CRC_TARGET "sse4.2"
#endif
#define crc_u64(crc, w) _mm_crc32_u64(crc, w)
#define crc_u8(crc, b)  _mm_crc32_u8((uint32_t)(crc), b)
#elif defined(__aarch64__)
#include <arm_acle.h>
#define S3D_CRC_HW "armv8"
#if defined(__clang__)
#define S3D_CRC_TARGET "crc"
#else
#define S3D_CRC_TARGET "+crc"
#endif
#define crc_u64(crc, w) __crc32cd((uint32_t)(crc), w)
#define crc_u8(crc, b)  __crc32cb((uint32_t)(crc), b)
#endif

#if defined(S3D_CRC_HW)

/* One pass of the three-stream loop: the CRCs of three adjacent blocks of block bytes are
 * computed side by side (the crc32 instruction has a latency of three and a throughput of one)
 * and joined by shifting with the block's table. Inlined with a constant block size. */
__attribute__((target(S3D_CRC_TARGET), always_inline)) static inline uint64_t
three_blocks(uint64_t crc0, const unsigned char *p, size_t block, const uint32_t t[4][256])
{
    uint64_t crc1 = 0, crc2 = 0;
    const unsigned char *end = p + block;
    do {
        uint64_t a, b, c;
        memcpy(&a, p, 8);
        memcpy(&b, p + block, 8);
        memcpy(&c, p + 2 * block, 8);
        crc0 = crc_u64(crc0, a);
        crc1 = crc_u64(crc1, b);
        crc2 = crc_u64(crc2, c);
        p += 8;
    } while (p < end);
    crc0 = shift(t, (uint32_t)crc0) ^ crc1;
    return shift(t, (uint32_t)crc0) ^ crc2;
}

__attribute__((target(S3D_CRC_TARGET))) static uint64_t raw_hw(uint64_t crc0,
                                                               const unsigned char *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        crc0 = crc_u8(crc0, *p++);
        n--;
    }
    /* Three streams over LONG blocks, then over SHORT blocks. */
    for (; n >= 3 * LONG_BLOCK; p += 3 * LONG_BLOCK, n -= 3 * LONG_BLOCK)
        crc0 = three_blocks(crc0, p, LONG_BLOCK, shift_long);
    for (; n >= 3 * SHORT_BLOCK; p += 3 * SHORT_BLOCK, n -= 3 * SHORT_BLOCK)
        crc0 = three_blocks(crc0, p, SHORT_BLOCK, shift_short);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        crc0 = crc_u64(crc0, w);
        p += 8;
        n -= 8;
    }
    while (n--)
        crc0 = crc_u8(crc0, *p++);
    return crc0;
}
#endif

uint32_t s3d_crc32c_table(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&init_once, crc_init);
    if (n == 0)
        return crc;
    return ~raw_table(~crc, p, n);
}

uint32_t s3d_crc32c(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&init_once, crc_init);
    if (n == 0)
        return crc;
#if defined(S3D_CRC_HW)
    if (have_hw)
        return ~(uint32_t)raw_hw(~crc, p, n);
#endif
    return ~raw_table(~crc, p, n);
}

const char *s3d_crc32c_impl(void)
{
    pthread_once(&init_once, crc_init);
#if defined(S3D_CRC_HW)
    if (have_hw)
        return S3D_CRC_HW;
#endif
    return "table";
}

uint32_t s3d_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    pthread_once(&init_once, crc_init);
    /* The finished CRC's inversions cancel out in this form (as in zlib's crc32_combine). */
    return multmodp(x2nmodp(len2, 3), crc1) ^ crc2;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void s3d_crc32c_base64(uint32_t crc, char out[S3D_CRC32C_B64_LEN])
{
    const unsigned char b[4] = {(unsigned char)(crc >> 24), (unsigned char)(crc >> 16),
                                (unsigned char)(crc >> 8), (unsigned char)crc};
    out[0] = b64[b[0] >> 2];
    out[1] = b64[((b[0] & 3) << 4) | (b[1] >> 4)];
    out[2] = b64[((b[1] & 15) << 2) | (b[2] >> 6)];
    out[3] = b64[b[2] & 63];
    out[4] = b64[b[3] >> 2];
    out[5] = b64[(b[3] & 3) << 4];
    out[6] = '=';
    out[7] = '=';
    out[8] = '\0';
}

static int b64_val(char c)
{
    const char *q = c ? memchr(b64, c, 64) : NULL;
    return q ? (int)(q - b64) : -1;
}

int s3d_crc32c_from_base64(const char *s, size_t len, uint32_t *out)
{
    int v[6];
    if (s == NULL || len != 8 || s[6] != '=' || s[7] != '=')
        return -1;
    for (int i = 0; i < 6; i++) {
        v[i] = b64_val(s[i]);
        if (v[i] < 0)
            return -1;
    }
    if (v[5] & 15) /* bits beyond the 32 encoded must be zero (canonical form) */
        return -1;
    uint64_t bits = 0;
    for (int i = 0; i < 6; i++)
        bits = (bits << 6) | (uint64_t)v[i];
    *out = (uint32_t)(bits >> 4);
    return 0;
}

/* test_crc32c.c - CRC-32C: published vectors, hardware against table at every length and
 * alignment, chaining, combine, the S3 base64 form; prints the speed of both (no assert). */
#include <string.h>
#include <time.h>
#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#endif

#include "common/compiler.h"
#include "common/crc32c.h"
#include "testutil.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void check_vectors(void)
{
    /* RFC 3720 (iSCSI) B.4 and the usual check value. */
    static const struct {
        const char *name;
        unsigned char fill; /* 0, 0xff, or 1 for 0..31 ascending, 2 for 31..0 descending */
        uint32_t crc;
    } v[] = {
        {"32 zeros", 0, 0x8a9136aa},
        {"32 ones", 0xff, 0x62a8ab43},
        {"ascending", 1, 0x46dd794e},
        {"descending", 2, 0x113fdb5c},
    };
    for (size_t i = 0; i < S3D_ARRAY_LEN(v); i++) {
        unsigned char b[32];
        for (int k = 0; k < 32; k++)
            b[k] = v[i].fill == 1   ? (unsigned char)k
                   : v[i].fill == 2 ? (unsigned char)(31 - k)
                                    : v[i].fill;
        if (s3d_crc32c(0, b, 32) != v[i].crc || s3d_crc32c_table(0, b, 32) != v[i].crc)
            t_fail(__FILE__, __LINE__, "vector %s: %08x / %08x, want %08x", v[i].name,
                   s3d_crc32c(0, b, 32), s3d_crc32c_table(0, b, 32), v[i].crc);
    }
    CHECK(s3d_crc32c(0, "123456789", 9) == 0xe3069283u);
    CHECK(s3d_crc32c_table(0, "123456789", 9) == 0xe3069283u);
    CHECK(s3d_crc32c(0, NULL, 0) == 0);
    CHECK(s3d_crc32c(0x12345678u, "", 0) == 0x12345678u);
}

int main(void)
{
    check_vectors();
    printf("implementation: %s\n", s3d_crc32c_impl());
    /* Where the CPU has the instructions, the hardware path is the one compared with the
     * table below (qemu-aarch64's default CPU has ARMv8's CRC32: make test-aarch64). */
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2"))
        CHECK(strcmp(s3d_crc32c_impl(), "sse4.2") == 0);
#elif defined(__aarch64__)
    if (getauxval(AT_HWCAP) & HWCAP_CRC32)
        CHECK(strcmp(s3d_crc32c_impl(), "armv8") == 0);
#endif

    /* Every length up to 3 long blocks + some, every alignment: hw == table. */
    size_t big = 3 * 8192 + 3 * 256 + 77;
    unsigned char *buf = malloc(big + 16);
    CHECK(buf != NULL);
    t_fill_random(buf, big + 16, 42);
    for (size_t off = 0; off < 8; off++) {
        for (size_t len = 0; len <= 1100; len++)
            CHECK(s3d_crc32c(7, buf + off, len) == s3d_crc32c_table(7, buf + off, len));
        for (size_t len = big - 1100; len <= big; len += 13)
            CHECK(s3d_crc32c(0, buf + off, len) == s3d_crc32c_table(0, buf + off, len));
    }

    /* Chaining and combine at many split points. */
    uint32_t whole = s3d_crc32c(0, buf, big);
    for (size_t cut = 0; cut <= big; cut += (cut < 300 ? 1 : 997)) {
        uint32_t a = s3d_crc32c(0, buf, cut);
        uint32_t b = s3d_crc32c(0, buf + cut, big - cut);
        CHECK(s3d_crc32c(a, buf + cut, big - cut) == whole);
        CHECK(s3d_crc32c_combine(a, b, big - cut) == whole);
    }
    /* Three pieces combined out of order of arrival still give the whole. */
    {
        size_t c1 = 1000, c2 = 20000;
        uint32_t p0 = s3d_crc32c(0, buf, c1), p1 = s3d_crc32c(0, buf + c1, c2 - c1);
        uint32_t p2 = s3d_crc32c(0, buf + c2, big - c2);
        uint32_t right = s3d_crc32c_combine(p1, p2, big - c2);
        CHECK(s3d_crc32c_combine(p0, right, big - c1) == whole);
    }
    /* combine over a length > 4 GiB must match chaining zero bytes... checked through the
     * identity combine(combine(a,b,n),c,m) == combine(a, combine(b,c,m), n+m). */
    {
        uint32_t a = 0x1111u, b = 0x2222u, c = 0x3333u;
        uint64_t n = 5ull << 30, m = 123456789;
        CHECK(s3d_crc32c_combine(s3d_crc32c_combine(a, b, n), c, m) ==
              s3d_crc32c_combine(a, s3d_crc32c_combine(b, c, m), n + m));
    }

    /* base64 header value. */
    char s[S3D_CRC32C_B64_LEN];
    s3d_crc32c_base64(0xe3069283u, s);
    CHECK_STREQ(s, "4waSgw==");
    s3d_crc32c_base64(0, s);
    CHECK_STREQ(s, "AAAAAA==");
    uint32_t back;
    for (uint32_t x = 1; x != 0 && x < 0xfff00000u; x = x * 3 + 0x9e3779b9u % 7919) {
        s3d_crc32c_base64(x, s);
        CHECK(s3d_crc32c_from_base64(s, 8, &back) == 0 && back == x);
    }
    CHECK(s3d_crc32c_from_base64("4waSgw==", 8, &back) == 0 && back == 0xe3069283u);
    CHECK(s3d_crc32c_from_base64("4waSgx==", 8, &back) == -1); /* non-canonical tail bits */
    CHECK(s3d_crc32c_from_base64("4waSg===", 8, &back) == -1);
    CHECK(s3d_crc32c_from_base64("4waSgw=", 7, &back) == -1);
    CHECK(s3d_crc32c_from_base64("4wa*gw==", 8, &back) == -1);
    free(buf);

    /* Speed, for the report: 64 MiB, best of 3. */
    size_t n = 64u << 20;
    unsigned char *m = malloc(n);
    CHECK(m != NULL);
    t_fill_random(m, n, 1);
    double best_hw = 1e9, best_tab = 1e9;
    volatile uint32_t sink = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        sink ^= s3d_crc32c(0, m, n);
        double t1 = now_s();
        sink ^= s3d_crc32c_table(0, m, n);
        double t2 = now_s();
        best_hw = S3D_MIN(best_hw, t1 - t0);
        best_tab = S3D_MIN(best_tab, t2 - t1);
    }
    printf("crc32c %s: %.2f GB/s, table: %.2f GB/s\n", s3d_crc32c_impl(), n / best_hw / 1e9,
           n / best_tab / 1e9);
    free(m);
    (void)sink;
    return 0;
}

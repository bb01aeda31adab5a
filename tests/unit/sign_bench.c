/* sign_bench.c - CPU cost of request signing on this machine, the figures quoted in
 * docs/internals/sigv4.md:
 *   - the payload hash: s3d_sha256_hex over 1 GiB in 8 MiB parts (one part at a time, as the
 *     engine hashes a part before sending it), in CPU seconds and MB/s per core;
 *   - s3d_sigv4_sign of a ranged GET (header form), in microseconds per request.
 * Process CPU time (CLOCK_PROCESS_CPUTIME_ID), so a loaded machine slows it little.
 *   build/tests/bin/sign_bench
 * OpenSSL picks the SHA-256 code for the CPU; OPENSSL_ia32cap=":~0x20000000" masks the x86
 * SHA extensions, to see the rate without them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/dynbuf.h"
#include "s3/sigv4.h"

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(void)
{
    const size_t part = 8u << 20;
    const int parts = 128, signs = 100000;
    char *buf = malloc(part), hex[65];
    const struct s3d_kv range = {"Range", "bytes=8388608-16777215"};
    const struct s3d_sigv4_request req = {.method = "GET",
                                          .host = "127.0.0.1:8000",
                                          .canonical_path = "/bucket/model-00001-of-00004.st",
                                          .headers = &range,
                                          .n_headers = 1,
                                          .payload_hash = S3D_UNSIGNED_PAYLOAD,
                                          .region = "us-east-1",
                                          .now = 1764748800};
    const struct s3d_sigv4_creds creds = {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                                          NULL};
    struct s3d_dynbuf hdrs;
    double t0, t;

    if (buf == NULL)
        return 1;
    memset(buf, 0x5a, part);
    t0 = cpu_now();
    for (int i = 0; i < parts; i++)
        if (s3d_sha256_hex(buf, part, hex) != 0)
            return 1;
    t = cpu_now() - t0;
    printf("sha256 payload hash: 1 GiB in 8 MiB parts, %.3f CPU-s, %.0f MB/s per core\n", t,
           (double)part * parts / t / 1e6);

    s3d_dynbuf_init(&hdrs, 1 << 16);
    t0 = cpu_now();
    for (int i = 0; i < signs; i++) {
        s3d_dynbuf_reset(&hdrs);
        if (s3d_sigv4_sign(&req, &creds, &hdrs, NULL) != 0)
            return 1;
    }
    t = cpu_now() - t0;
    printf("sigv4 sign, ranged GET: %.2f us per request (%d requests)\n", t / signs * 1e6, signs);
    s3d_dynbuf_free(&hdrs);
    free(buf);
    return 0;
}

/* tproxied.h - the set-up of a test that breaks requests to the S3 server through the TCP
 * proxy of integ/tproxy.c (which such a test links: s3d_test(... integ/tproxy.c)), written
 * once for test_xfer_retry and test_download_file. */
#ifndef S3D_TEST_TPROXIED_H
#define S3D_TEST_TPROXIED_H

#include <stdint.h>

#include "s3direct/s3direct.h"

struct tproxy;

struct t_proxied {
    struct s3d_client *direct; /* straight to the server */
    char bucket[128];          /* a fresh bucket */
    char host[256];            /* the server's, for tproxy_start */
    int port;
};

/* Quick retries (S3D_TEST_RETRY_BASE_MS=20), the server's host and port, a client straight to
 * it, a fresh bucket "PREFIX-...", and in it the object "obj": n bytes of src, filled first by
 * t_fill_random(seed). Skips the test without a server. */
void t_proxied_setup(struct t_proxied *t, const char *prefix, void *src, uint64_t n, uint64_t seed);

/* A proxy to t's server that resets one connection once cut_s2c_after response bytes have
 * gone through it (nothing else cut or stalled), and a client through it with part_size and
 * one request at a time (*via). */
struct tproxy *t_proxied_cut_response(const struct t_proxied *t, int64_t cut_s2c_after,
                                      uint64_t part_size, struct s3d_client **via);

#endif

/* tproxied.c - see tproxied.h. Its own object in s3d_testlib, so that only the tests that
 * call it need tproxy.c. */
#include "tproxied.h"

#include <stdlib.h>
#include <string.h>

#include "../integ/tproxy.h"
#include "testutil.h"

void t_proxied_setup(struct t_proxied *t, const char *prefix, void *src, uint64_t n, uint64_t seed)
{
    setenv("S3D_TEST_RETRY_BASE_MS", "20", 1);
    tproxy_parse_endpoint(t_s3_endpoint(), t->host, sizeof(t->host), &t->port);
    t->direct = t_s3_client();
    t_s3_bucket(t->direct, prefix, t->bucket, sizeof(t->bucket));
    t_fill_random(src, n, seed);
    CHECK_OK(s3d_upload_from_buffer(t->direct, t->bucket, "obj", src, n, NULL));
}

struct tproxy *t_proxied_cut_response(const struct t_proxied *t, int64_t cut_s2c_after,
                                      uint64_t part_size, struct s3d_client **via)
{
    struct tproxy_opts po;
    struct tproxy *px;
    memset(&po, 0, sizeof(po));
    po.cut_s2c_after = cut_s2c_after;
    po.cut_c2s_after = -1;
    po.stall_s2c_after = -1;
    px = tproxy_start(t->host, t->port, &po);
    *via = t_s3_client_at(tproxy_url(px), part_size, 1);
    return px;
}

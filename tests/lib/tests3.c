/* tests3.c - helpers for tests against the S3 server (a separate object so that tests
 * without S3 do not pull in the S3 client). */
#include "testutil.h"

#include <unistd.h>

const char *t_s3_endpoint(void)
{
    const char *e = getenv("AWS_ENDPOINT_URL");
    if (e == NULL || *e == '\0')
        t_skip("no S3 server (AWS_ENDPOINT_URL unset; run scripts/start-rgw.sh)");
    return e;
}

struct s3d_client *t_s3_client(void)
{
    struct s3d_client_options o;
    struct s3d_client *c = NULL;
    memset(&o, 0, sizeof(o));
    o.endpoint_url = t_s3_endpoint();
    CHECK_OK(s3d_client_new(&o, &c));
    return c;
}

struct s3d_client *t_s3_client_at(const char *url, uint64_t part_size, uint32_t conc)
{
    struct s3d_client_options o;
    struct s3d_client *c = NULL;
    memset(&o, 0, sizeof(o));
    o.endpoint_url = url;
    o.part_size = part_size;
    o.max_concurrency = conc;
    CHECK_OK(s3d_client_new(&o, &c));
    return c;
}

void t_s3_bucket(struct s3d_client *c, const char *prefix, char *out, size_t cap)
{
    static int counter;
    snprintf(out, cap, "%s-%ld-%d", prefix, (long)getpid(), counter++);
    CHECK_OK(s3d_create_bucket(c, out));
}

/* test_interop_aws.c - objects written by s3direct read back by the AWS CLI and the reverse,
 * multipart both ways (the CLI switches to multipart at 8 MiB), with a key holding a space. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define MiB (1024ull * 1024ull)

static char *slurp(const char *path, uint64_t *len)
{
    FILE *f = fopen(path, "rb");
    char *p;
    long n;
    CHECK(f != NULL);
    CHECK(fseek(f, 0, SEEK_END) == 0);
    n = ftell(f);
    CHECK(n >= 0);
    rewind(f);
    p = malloc((size_t)n + 1);
    CHECK(p != NULL);
    CHECK(fread(p, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len = (uint64_t)n;
    return p;
}

int main(void)
{
    const uint64_t n = 20 * MiB + 3;
    struct s3d_client_options o;
    struct s3d_client *c;
    char bucket[128], cmd[2048], path[512], path2[512];
    char *src = malloc(n), *back, *dst = malloc(n);
    uint64_t len = 0, got = 0;
    FILE *f;

    t_s3_endpoint();
    if (system("aws --version >/dev/null 2>&1") != 0)
        t_skip("no aws CLI");
    CHECK(src != NULL && dst != NULL);
    memset(&o, 0, sizeof(o));
    o.endpoint_url = t_s3_endpoint();
    o.part_size = 5 * MiB;
    CHECK_OK(s3d_client_new(&o, &c));
    t_s3_bucket(c, "interop", bucket, sizeof(bucket));
    t_fill_random(src, n, 77);
    snprintf(path, sizeof(path), "%s/from-cli", t_tmpdir());
    snprintf(path2, sizeof(path2), "%s/to-cli", t_tmpdir());

    /* s3direct writes (5 parts), the CLI reads. */
    CHECK_OK(s3d_upload_from_buffer(c, bucket, "by s3direct", src, n, NULL));
    snprintf(cmd, sizeof(cmd), "aws s3 cp --only-show-errors 's3://%s/by s3direct' '%s'", bucket,
             path);
    CHECK(system(cmd) == 0);
    back = slurp(path, &len);
    CHECK_EQ_U64(len, n);
    CHECK(memcmp(back, src, n) == 0);
    free(back);

    /* The CLI writes (multipart), s3direct reads, into a buffer and a file. */
    f = fopen(path2, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(src, 1, n, f) == n);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "aws s3 cp --only-show-errors '%s' 's3://%s/by cli'", path2, bucket);
    CHECK(system(cmd) == 0);
    CHECK_OK(s3d_download_to_buffer(c, bucket, "by cli", 0, UINT64_MAX, dst, n, &got, NULL));
    CHECK_EQ_U64(got, n);
    CHECK(memcmp(dst, src, n) == 0);
    CHECK_OK(s3d_download_to_file(c, bucket, "by cli", path, NULL));
    back = slurp(path, &len);
    CHECK_EQ_U64(len, n);
    CHECK(memcmp(back, src, n) == 0);
    free(back);

    unlink(path);
    unlink(path2);
    {
        const char *keys[] = {"by s3direct", "by cli"};
        CHECK_OK(s3d_delete_objects(c, bucket, keys, 2));
    }
    CHECK_OK(s3d_delete_bucket(c, bucket));
    s3d_client_free(c);
    free(src);
    free(dst);
    return 0;
}

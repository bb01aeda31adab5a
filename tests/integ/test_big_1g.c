/* test_big_1g.c - a 1 GiB object through both paths: uploaded from a buffer, downloaded to a
 * file; that file uploaded to a second key, downloaded into a buffer; bytes compared each
 * time. The objects and the file are deleted at the end (the test server keeps data in RAM). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

int main(void)
{
    const uint64_t n = 1ull << 30;
    struct s3d_client *c = t_s3_client();
    struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
    char bucket[128], path[512];
    char *src, *dst, *map;
    uint64_t got = 0;
    struct stat st;
    int fd;

    src = malloc(n);
    dst = malloc(n);
    if (src == NULL || dst == NULL)
        t_skip("not enough memory for 2 GiB of buffers");
    t_fill_random(src, n, 1234);
    t_s3_bucket(c, "big", bucket, sizeof(bucket));
    snprintf(path, sizeof(path), "%s/big.bin", t_tmpdir());

    CHECK_OK(s3d_upload_from_buffer(c, bucket, "one", src, n, NULL));
    CHECK_OK(s3d_head_object(c, bucket, "one", &info));
    CHECK_EQ_U64(info.size, n);
    CHECK_OK(s3d_download_to_file(c, bucket, "one", path, NULL));
    fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    CHECK(fstat(fd, &st) == 0);
    CHECK_EQ_U64(st.st_size, n);
    map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(map != MAP_FAILED);
    CHECK(memcmp(map, src, n) == 0);
    munmap(map, n);
    close(fd);

    CHECK_OK(s3d_upload_from_file(c, bucket, "two", path, NULL));
    unlink(path);
    CHECK_OK(s3d_delete_object(c, bucket, "one"));
    memset(dst, 0, n);
    CHECK_OK(s3d_download_to_buffer(c, bucket, "two", 0, UINT64_MAX, dst, n, &got, NULL));
    CHECK_EQ_U64(got, n);
    CHECK(memcmp(dst, src, n) == 0);

    CHECK_OK(s3d_delete_object(c, bucket, "two"));
    CHECK_OK(s3d_delete_bucket(c, bucket));
    s3d_client_free(c);
    free(src);
    free(dst);
    return 0;
}

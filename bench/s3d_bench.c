/* s3d_bench.c - times s3direct transfers between S3 and memory, through the public API only.
 *
 *   s3direct-bench get BUCKET KEY [--runs N] [--concurrency N] [--part-size BYTES]
 *   s3direct-bench put BUCKET KEY --size BYTES [--runs N] [--concurrency N] [--part-size BYTES]
 *
 * The endpoint, keys and region come from the environment (AWS_ENDPOINT_URL ...), as for the
 * CLI. The buffer is allocated and touched once before the first run, so that page faults
 * (0.1-0.3 CPU-s per GiB here) are not counted as transfer cost; each run then prints
 *   run I seconds S cpu C bytes B
 * with wall seconds and the process's user+system CPU seconds (all threads) of that run.
 * Exit status 0 when every run succeeded. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "s3direct/s3direct.h"

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static int usage(void)
{
    fprintf(stderr, "usage: s3direct-bench get BUCKET KEY [--runs N] [--concurrency N] "
                    "[--part-size BYTES]\n"
                    "       s3direct-bench put BUCKET KEY --size BYTES [--runs N] "
                    "[--concurrency N] [--part-size BYTES]\n");
    return 2;
}

int main(int argc, char **argv)
{
    struct s3d_client_options co;
    struct s3d_client *c = NULL;
    struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
    uint64_t size = 0, got, x = 0x9e3779b97f4a7c15ull;
    unsigned char *buf = NULL;
    int runs = 3, i, rc, get, ret = 1;
    double t0, c0;

    if (argc < 4)
        return usage();
    get = strcmp(argv[1], "get") == 0;
    if (!get && strcmp(argv[1], "put") != 0)
        return usage();
    memset(&co, 0, sizeof(co));
    co.struct_size = sizeof(co);
    co.device = -1;
    for (i = 4; i < argc; i++) {
        if (i + 1 >= argc)
            return usage();
        if (strcmp(argv[i], "--runs") == 0)
            runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--size") == 0)
            size = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--concurrency") == 0)
            co.max_concurrency = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--part-size") == 0)
            co.part_size = strtoull(argv[++i], NULL, 10);
        else
            return usage();
    }
    if (runs < 1 || (!get && size == 0))
        return usage();
    rc = s3d_client_new(&co, &c);
    if (rc < 0)
        goto fail;
    if (get) {
        rc = s3d_head_object(c, argv[2], argv[3], &info);
        if (rc < 0)
            goto fail;
        size = info.size;
    }
    buf = malloc(size ? size : 1);
    if (buf == NULL) {
        fprintf(stderr, "s3direct-bench: cannot allocate %" PRIu64 " bytes\n", size);
        goto out;
    }
    /* Touch every page; for uploads, with incompressible data. */
    for (got = 0; got + 8 <= size; got += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(buf + got, &x, 8);
    }
    memset(buf + got, 0x5a, size - got);
    for (i = 0; i < runs; i++) {
        t0 = now();
        c0 = cpu();
        if (get)
            rc = s3d_download_to_buffer(c, argv[2], argv[3], 0, UINT64_MAX, buf, size, &got, NULL);
        else
            rc = s3d_upload_from_buffer(c, argv[2], argv[3], buf, size, NULL);
        if (rc < 0)
            goto fail;
        printf("run %d seconds %.4f cpu %.4f bytes %" PRIu64 "\n", i, now() - t0, cpu() - c0, size);
        fflush(stdout);
    }
    ret = 0;
    goto out;
fail:
    fprintf(stderr, "s3direct-bench: %s\n",
            s3d_last_error_message()[0] ? s3d_last_error_message() : s3d_strerror(rc));
out:
    free(buf);
    s3d_client_free(c);
    return ret;
}

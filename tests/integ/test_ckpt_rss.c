/* test_ckpt_rss.c - loading a 2 GiB checkpoint from S3 into preallocated host memory raises
 * peak RSS by no more than the staging pool + 64 MiB (the bytes land in the destination;
 * nothing else grows with the checkpoint). Peak RSS is VmHWM, reset through
 * /proc/self/clear_refs after the setup. */
#include <sys/mman.h>

#include "ckpt_util.h"

#define MiB     (1ull << 20)
#define N_BIG   16
#define BIG     (128 * MiB)
#define N_SMALL 200
#define SMALL   (64 * 1024)

static uint64_t status_kib(const char *field)
{
    char line[256];
    uint64_t v = 0;
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f != NULL);
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, strlen(field)) == 0)
            v = strtoull(line + strlen(field) + 1, NULL, 10);
    fclose(f);
    return v;
}

static int reset_hwm(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f == NULL)
        return -1;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

int main(void)
{
    const uint64_t total = (uint64_t)N_BIG * BIG + (uint64_t)N_SMALL * SMALL;
    struct s3d_client *c = t_s3_client();
    struct s3d_tensor_src src[N_BIG + N_SMALL];
    struct s3d_tensor_dest dst[N_BIG + N_SMALL];
    int64_t shapes[N_BIG + N_SMALL][1];
    char names[N_BIG + N_SMALL][32];
    struct s3d_client_config cfg = {.struct_size = sizeof(struct s3d_client_config)};
    struct s3d_reader *r = NULL;
    char bucket[128], uri[256];
    unsigned char *buf;
    uint64_t off = 0, before, peak, limit;

    t_s3_bucket(c, "rss", bucket, sizeof(bucket));
    snprintf(uri, sizeof(uri), "s3://%s/two-gib.safetensors", bucket);
    buf = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(buf != MAP_FAILED);
    for (int i = 0; i < N_BIG + N_SMALL; i++) {
        uint64_t n = i < N_BIG ? BIG : SMALL;
        snprintf(names[i], sizeof(names[i]), "t%03d", i);
        shapes[i][0] = (int64_t)(n / 2);
        src[i] = (struct s3d_tensor_src){.name = names[i],
                                         .dtype = S3D_DTYPE_BF16,
                                         .ndim = 1,
                                         .shape = shapes[i],
                                         .ptr = buf + off,
                                         .device = -1,
                                         .nbytes = n};
        t_fill_random(buf + off, n, (uint64_t)i);
        off += n;
    }
    CHECK_OK(s3d_checkpoint_write(c, uri, src, N_BIG + N_SMALL, NULL, 0, NULL));

    /* Destination: the same mapping, cleared (already resident: part of the baseline). */
    memset(buf, 0, total);
    CHECK_OK(s3d_reader_open(c, uri, &r));
    for (int i = 0; i < N_BIG + N_SMALL; i++) {
        size_t idx;
        CHECK_OK(s3d_reader_find(r, names[i], &idx));
        dst[i] = (struct s3d_tensor_dest){
            .index = idx, .ptr = (void *)src[i].ptr, .device = -1, .capacity = src[i].nbytes};
    }
    if (reset_hwm() != 0)
        t_skip("cannot reset VmHWM through /proc/self/clear_refs");
    before = status_kib("VmRSS:");
    CHECK_OK(s3d_reader_read(r, dst, N_BIG + N_SMALL, NULL));
    peak = status_kib("VmHWM:");
    CHECK_OK(s3d_client_get_config(c, &cfg));
    limit = cfg.staging_bytes / 1024 + 64 * 1024;
    printf("2 GiB load: RSS before %llu KiB, peak %llu KiB, growth %llu KiB, limit %llu KiB\n",
           (unsigned long long)before, (unsigned long long)peak,
           (unsigned long long)(peak - before), (unsigned long long)limit);
    CHECK(peak - before <= limit);
    /* and the bytes are right */
    off = 0;
    for (int i = 0; i < N_BIG + N_SMALL; i++) {
        unsigned char *expect = malloc(src[i].nbytes);
        t_fill_random(expect, src[i].nbytes, (uint64_t)i);
        CHECK(memcmp(expect, src[i].ptr, src[i].nbytes) == 0);
        free(expect);
    }
    s3d_reader_close(r);
    CHECK_OK(s3d_delete_object(c, bucket, "two-gib.safetensors"));
    CHECK_OK(s3d_delete_bucket(c, bucket));
    munmap(buf, total);
    s3d_client_free(c);
    printf("ok\n");
    return 0;
}

/* ckpt_bench.c - the tensor pipeline against the engine's raw byte transfers, same bytes,
 * same server, one run:
 *   load: s3d_reader_read into preallocated host memory  vs  s3d_download_to_buffer
 *   save: s3d_checkpoint_write from host memory         vs  s3d_upload_from_buffer
 * Prints a Markdown table (median of RUNS with min and max, GB/s; client CPU-s per GB) and
 * the ratio the target asks for (load >= 0.9x raw GET).
 *
 *   ckpt_bench BUCKET [SIZE_MIB=2048] [RUNS=3]      (endpoint and keys from the environment) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "s3direct/s3direct.h"

#define MiB (1ull << 20)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "ckpt_bench: %s: %s (%s)\n", what, s3d_last_error_message(), s3d_err_name(rc));
    exit(1);
}

static int dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct stat3 {
    double t[16];
    double cpu[16];
    int n;
};

static void row(const char *name, const struct stat3 *s, uint64_t bytes)
{
    double t[16], c = 0;
    memcpy(t, s->t, sizeof(t));
    qsort(t, (size_t)s->n, sizeof(double), dcmp);
    for (int i = 0; i < s->n; i++)
        c += s->cpu[i];
    c /= s->n;
    printf("| %-44s | %6.3f | %6.3f | %6.3f | %5.2f |\n", name, bytes / t[s->n / 2] / 1e9,
           bytes / t[s->n - 1] / 1e9, bytes / t[0] / 1e9, c / (bytes / 1e9));
}

static double median_rate(const struct stat3 *s, uint64_t bytes)
{
    double t[16];
    memcpy(t, s->t, sizeof(t));
    qsort(t, (size_t)s->n, sizeof(double), dcmp);
    return bytes / t[s->n / 2] / 1e9;
}

int main(int argc, char **argv)
{
    const char *bucket = argc > 1 ? argv[1] : NULL;
    uint64_t size = (argc > 2 ? strtoull(argv[2], NULL, 10) : 2048) * MiB;
    int runs = argc > 3 ? atoi(argv[3]) : 3;
    struct s3d_client *c = NULL;
    struct s3d_tensor_src *src;
    struct s3d_tensor_dest *dst;
    int64_t(*shapes)[2];
    char(*names)[48];
    size_t n = 0, cap = 4096;
    uint64_t off = 0, total;
    unsigned char *buf;
    char uri[512];
    struct stat3 load = {0}, get = {0}, save = {0}, put = {0};
    int rc;

    if (bucket == NULL || runs < 1 || runs > 16) {
        fprintf(stderr, "usage: ckpt_bench BUCKET [SIZE_MIB] [RUNS<=16]\n");
        return 2;
    }
    rc = s3d_client_new(NULL, &c);
    if (rc < 0)
        die("client", rc);
    rc = s3d_create_bucket(c, bucket);
    if (rc < 0 && rc != S3D_EBUCKETEXISTS)
        die("create bucket", rc);

    /* Shaped like a small transformer: per layer 4 attention matrices (d x d), 2 MLP matrices
     * (d x 4d), 4 norms (d); bf16 weights plus an fp32 copy of the norms. */
    src = calloc(cap, sizeof(*src));
    dst = calloc(cap, sizeof(*dst));
    shapes = calloc(cap, sizeof(*shapes));
    names = calloc(cap, sizeof(*names));
    buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!src || !dst || !shapes || !names || buf == MAP_FAILED) {
        fprintf(stderr, "ckpt_bench: out of memory\n");
        return 1;
    }
    for (int layer = 0; n + 10 < cap; layer++) {
        const int64_t d = 2048;
        struct {
            const char *what;
            int64_t r, c;
            int dtype;
        } kinds[] = {{"attn.q", d, d, S3D_DTYPE_BF16},     {"attn.k", d, d, S3D_DTYPE_BF16},
                     {"attn.v", d, d, S3D_DTYPE_BF16},     {"attn.o", d, d, S3D_DTYPE_BF16},
                     {"mlp.up", 4 * d, d, S3D_DTYPE_BF16}, {"mlp.down", d, 4 * d, S3D_DTYPE_BF16},
                     {"norm1.w", 1, d, S3D_DTYPE_F32},     {"norm1.b", 1, d, S3D_DTYPE_F32},
                     {"norm2.w", 1, d, S3D_DTYPE_F32},     {"norm2.b", 1, d, S3D_DTYPE_F32}};
        int full = 0;
        for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
            uint64_t nb =
                (uint64_t)kinds[k].r * kinds[k].c * (kinds[k].dtype == S3D_DTYPE_F32 ? 4 : 2);
            if (off + nb > size) {
                full = 1;
                break;
            }
            snprintf(names[n], sizeof(names[n]), "layers.%d.%s", layer, kinds[k].what);
            shapes[n][0] = kinds[k].r;
            shapes[n][1] = kinds[k].c;
            src[n] = (struct s3d_tensor_src){.name = names[n],
                                             .dtype = kinds[k].dtype,
                                             .ndim = 2,
                                             .shape = shapes[n],
                                             .ptr = buf + off,
                                             .device = -1,
                                             .nbytes = nb};
            for (uint64_t i = 0; i < nb; i += 4096)
                buf[off + i] = (unsigned char)(i * 31 + n);
            off += nb;
            n++;
        }
        if (full)
            break;
    }
    total = off;
    snprintf(uri, sizeof(uri), "s3://%s/bench/ckpt.safetensors", bucket);

    /* Per run: save, load, raw GET of the same object, delete; then raw PUT, delete. At most
     * one copy lives on the server at a time (the test server keeps objects in RAM). */
    for (int r = 0; r < runs; r++) {
        double t0, c0;
        struct s3d_reader *rd = NULL;
        uint64_t got = 0;

        c0 = cpu();
        t0 = now();
        rc = s3d_checkpoint_write(c, uri, src, n, NULL, 0, NULL);
        if (rc < 0)
            die("save", rc);
        save.t[save.n] = now() - t0;
        save.cpu[save.n++] = cpu() - c0;

        c0 = cpu();
        t0 = now();
        rc = s3d_reader_open(c, uri, &rd);
        for (size_t i = 0; rc == 0 && i < n; i++) {
            size_t idx;
            rc = s3d_reader_find(rd, names[i], &idx);
            dst[i] = (struct s3d_tensor_dest){
                .index = idx, .ptr = (void *)src[i].ptr, .device = -1, .capacity = src[i].nbytes};
        }
        if (rc == 0)
            rc = s3d_reader_read(rd, dst, n, NULL);
        if (rc < 0)
            die("load", rc);
        s3d_reader_close(rd);
        load.t[load.n] = now() - t0;
        load.cpu[load.n++] = cpu() - c0;

        c0 = cpu();
        t0 = now();
        rc = s3d_download_to_buffer(c, bucket, "bench/ckpt.safetensors", 0, UINT64_MAX, buf, size,
                                    &got, NULL);
        if (rc < 0)
            die("download", rc);
        get.t[get.n] = now() - t0;
        get.cpu[get.n++] = cpu() - c0;
        s3d_delete_object(c, bucket, "bench/ckpt.safetensors");

        c0 = cpu();
        t0 = now();
        rc = s3d_upload_from_buffer(c, bucket, "bench/raw.bin", buf, total, NULL);
        if (rc < 0)
            die("upload", rc);
        put.t[put.n] = now() - t0;
        put.cpu[put.n++] = cpu() - c0;
        s3d_delete_object(c, bucket, "bench/raw.bin");
    }
    printf("Checkpoint of %zu tensors, %.2f GiB, %d runs, against %s\n\n", n,
           total / (double)(1ull << 30), runs, getenv("AWS_ENDPOINT_URL"));
    printf("| %-44s | GB/s   | min    | max    | CPU-s/GB |\n", "operation (same bytes)");
    printf("|%s|--------|--------|--------|----------|\n",
           "----------------------------------------------");
    row("load: s3d_reader_read -> host memory", &load, total);
    row("raw GET: s3d_download_to_buffer", &get, total);
    row("save: s3d_checkpoint_write from host memory", &save, total);
    row("raw PUT: s3d_upload_from_buffer", &put, total);
    printf("\nload / raw GET = %.2f (target >= 0.90: %s)\n",
           median_rate(&load, total) / median_rate(&get, total),
           median_rate(&load, total) >= 0.9 * median_rate(&get, total) ? "PASS" : "MISS");
    printf("save / raw PUT = %.2f\n", median_rate(&save, total) / median_rate(&put, total));
    s3d_delete_object(c, bucket, "bench/ckpt.safetensors");
    s3d_delete_object(c, bucket, "bench/raw.bin");
    s3d_client_free(c);
    munmap(buf, size);
    return 0;
}

/* bench_gpu.c - transfer rates between files, S3, host memory and the GPU, printed as a table
 * (scripts/gpu-check.sh runs it on a GPU machine). Not a test: it asserts only that data
 * arrived (spot checks), never a speed.
 *
 *   bench_gpu [--dir DIR] [--mib N] [--origin-root DIR --endpoint URL]
 *
 * --dir: where the scratch file goes (default $TMPDIR or /tmp); --mib: its size (default
 * 1024). --origin-root/--endpoint: a plain HTTP origin that serves ROOT/BUCKET/KEY for
 * GET /BUCKET/KEY with Range (scripts/nginx-origin.sh, or the Python one in gpu-check.sh),
 * for the S3 -> GPU vs S3 -> host rows. S3D_BENCH_EMULATE=1 runs on the emulated device
 * (copies are memcpy): file-path numbers on a machine without a GPU.
 *
 * "cold" runs drop the file from the page cache first (posix_fadvise DONTNEED). */
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/compiler.h"
#include "common/crc32c.h"
#include "engine/fileio.h"
#include "engine/pool.h"
#include "gpu_util.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void row(const char *what, uint64_t bytes, double secs, const char *note)
{
    if (secs > 0)
        printf("| %-44s | %8.2f | %s\n", what, (double)bytes / secs / 1e9, note ? note : "");
    else
        printf("| %-44s | %8s | %s\n", what, "n/a", note ? note : "");
    fflush(stdout);
}

static void drop_cache(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

struct ctx {
    struct s3d_device *dev;
    struct s3d_pool *pool;
    uint64_t size;
    uint64_t d; /* device buffer of size bytes */
    unsigned char *host;
    const char *path;
};

/* Host <-> device out of pool chunks: the ceiling for every staged path. */
static void bench_copies(struct ctx *c)
{
    struct s3d_stream *s;
    const size_t cs = s3d_pool_chunk_size(c->pool);
    void *ch[4];
    CHECK_OK(s3d_device_stream_new(c->dev, 0, &s));
    for (int i = 0; i < 4; i++)
        CHECK((ch[i] = s3d_pool_try_get(c->pool)) != NULL);
    for (int dir = 0; dir < 2; dir++) {
        double best = 1e9;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now_s();
            for (uint64_t off = 0, i = 0; off + cs <= c->size; off += cs, i++) {
                if (dir == 0)
                    CHECK_OK(s3d_device_copy_htod(c->dev, s, c->d + off, ch[i % 4], cs));
                else
                    CHECK_OK(s3d_device_copy_dtoh(c->dev, s, ch[i % 4], c->d + off, cs));
            }
            CHECK_OK(s3d_device_stream_sync(c->dev, s));
            best = S3D_MIN(best, now_s() - t0);
        }
        row(dir == 0 ? "host->GPU pinned pool chunks" : "GPU->host pinned pool chunks",
            c->size / cs * cs, best, "best of 3");
    }
    for (int i = 0; i < 4; i++)
        s3d_pool_put(c->pool, ch[i]);
    s3d_device_stream_free(c->dev, s);
}

static void bench_read(struct ctx *c, const char *what, int mode, int device, int cold,
                       int with_crc)
{
    uint32_t crc = 0;
    struct s3d_file_range r = {0, c->size, device ? (void *)(uintptr_t)c->d : c->host,
                               device ? 0 : -1, with_crc ? &crc : NULL};
    struct s3d_file_io_opts o = {.mode = mode};
    if (cold)
        drop_cache(c->path);
    else
        /* Warm it; the timed read below checks the result. */
        s3d_ignore_rc(s3d_file_read_ranges(c->dev, c->pool, c->path, &r, 1, &o));
    double t0 = now_s();
    int rc = s3d_file_read_ranges(c->dev, c->pool, c->path, &r, 1, &o);
    double t = now_s() - t0;
    row(what, c->size, rc == 0 ? t : -1,
        rc == 0 ? (cold ? "cold cache" : "warm cache") : s3d_last_error_message());
}

static void bench_write(struct ctx *c, const char *what, int mode)
{
    char out[600];
    struct s3d_file_writer *w;
    struct s3d_file_seg seg = {(const void *)(uintptr_t)c->d, c->size, 0};
    struct s3d_file_io_opts o = {.mode = mode};
    uint32_t crc;
    snprintf(out, sizeof(out), "%s.out", c->path);
    double t0 = now_s();
    int rc = s3d_file_writer_open(c->dev, c->pool, out, &o, &w);
    if (rc == 0)
        rc = s3d_file_writer_write(w, 0, &seg, 1, &crc);
    if (rc == 0)
        rc = s3d_file_writer_commit(w);
    double t = now_s() - t0;
    row(what, c->size, rc == 0 ? t : -1,
        rc == 0 ? "CRC on, incl. fsync" : s3d_last_error_message());
    s3d_file_writer_free(w);
    unlink(out);
}

/* ---- S3 -> GPU vs S3 -> host --------------------------------------------------------------
 * LEAD: wire/adjust here. Writes a checkpoint of 4 U8 tensors (size/4 each) under
 * ROOT/bench/ckpt.safetensors with the public API, then loads it from the origin at
 * endpoint as s3://bench/ckpt.safetensors into host memory and into GPU memory, CRC verified
 * (the default). Anonymous requests: the origin ignores signatures. */
static void bench_s3(struct ctx *c, const char *root, const char *endpoint)
{
#ifdef S3D_BENCH_NO_S3 /* the minimal build of scripts/gpu-check.sh has no S3 client */
    row("S3->GPU vs S3->host", 0, -1, "minimal build: no S3 client");
#else
    char dir[600], path[700];
    struct s3d_client *local = NULL, *remote = NULL;
    struct s3d_reader *rd = NULL;
    int rc;
    snprintf(dir, sizeof(dir), "%s/bench", root);
    mkdir(root, 0755);
    mkdir(dir, 0755);
    snprintf(path, sizeof(path), "%s/ckpt.safetensors", dir);

    const uint64_t each = c->size / 4;
    int64_t shape[1] = {(int64_t)each};
    struct s3d_tensor_src t[4];
    char names[4][16];
    for (int i = 0; i < 4; i++) {
        snprintf(names[i], sizeof(names[i]), "t%d", i);
        t[i] =
            (struct s3d_tensor_src){names[i], S3D_DTYPE_U8, 1, shape, c->host + i * each, -1, each};
    }
    struct s3d_client_options lo = {.struct_size = sizeof(lo), .device = -1};
    rc = s3d_client_new(&lo, &local);
    if (rc == 0)
        rc = s3d_checkpoint_write(local, path, t, 4, NULL, 0, NULL);
    if (rc != 0) {
        row("S3->host / S3->GPU", 0, -1, s3d_last_error_message());
        goto out;
    }
    struct s3d_client_options ro = {.struct_size = sizeof(ro),
                                    .endpoint_url = endpoint,
                                    .anonymous = 1,
                                    .addressing = S3D_ADDRESSING_PATH,
                                    .max_concurrency = 16};
    if ((rc = s3d_client_new(&ro, &remote)) == 0)
        rc = s3d_reader_open(remote, "s3://bench/ckpt.safetensors", &rd);
    if (rc != 0) {
        row("S3 open", 0, -1, s3d_last_error_message());
        goto out;
    }
    for (int device = 0; device <= 1; device++) {
        struct s3d_tensor_dest dst[4];
        for (int i = 0; i < 4; i++) {
            dst[i] = (struct s3d_tensor_dest){(size_t)i, NULL, device ? 0 : -1, each, 0, 0};
            dst[i].ptr = device ? (void *)(uintptr_t)(c->d + i * each)
                                : (void *)(c->host + c->size - (4 - i) * each);
        }
        double t0 = now_s();
        rc = s3d_reader_read(rd, dst, 4, NULL);
        double secs = now_s() - t0;
        row(device ? "S3->GPU (reader, CRC verified)" : "S3->host (reader, CRC verified)", 4 * each,
            rc == 0 ? secs : -1, rc == 0 ? endpoint : s3d_last_error_message());
    }
out:
    s3d_reader_close(rd);
    s3d_client_free(remote);
    s3d_client_free(local);
    unlink(path);
#endif
}

int main(int argc, char **argv)
{
    const char *dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    const char *root = NULL, *endpoint = NULL;
    uint64_t mib = 1024;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
            mib = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--origin-root") && i + 1 < argc)
            root = argv[++i];
        else if (!strcmp(argv[i], "--endpoint") && i + 1 < argc)
            endpoint = argv[++i];
        else {
            fprintf(stderr, "usage: bench_gpu [--dir DIR] [--mib N] "
                            "[--origin-root DIR --endpoint URL]\n");
            return 2;
        }
    }
    struct ctx c = {0};
    const char *emu = getenv("S3D_BENCH_EMULATE");
    if (emu != NULL && emu[0] == '1')
        CHECK_OK(s3d_device_open(S3D_DEVICE_EMULATE, &c.dev));
    else
        c.dev = gpu_open_or_skip();
    c.size = mib << 20;
    CHECK_OK(s3d_pool_new(c.dev, 0, 0, &c.pool));
    CHECK_OK(s3d_device_mem_alloc(c.dev, 0, c.size, &c.d));
    CHECK_OK(s3d_device_host_alloc(c.dev, c.size, (void **)&c.host));
    t_fill_random(c.host, c.size, 3);

    char path[600];
    snprintf(path, sizeof(path), "%s/s3d-bench-%ld.bin", dir, (long)getpid());
    c.path = path;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, c.host, c.size) == (ssize_t)c.size);
    fsync(fd);
    close(fd);

    const char *why = NULL;
    int cuf = s3d_cufile_available(c.dev, 0, &why);
    printf("backend: %s, cuFile: %s, crc32c: %s, file: %s (%llu MiB), pool %zu x %zu MiB\n",
           s3d_device_backend(c.dev), cuf ? "available" : why, s3d_crc32c_impl(), path,
           (unsigned long long)mib, s3d_pool_chunk_count(c.pool),
           s3d_pool_chunk_size(c.pool) >> 20);
    printf("| %-44s | %8s | %s\n", "path", "GB/s", "note");
    printf("|%s|%s|%s\n", "----------------------------------------------", "----------", "------");
    bench_copies(&c);
    bench_read(&c, "file->GPU cuFile", S3D_FILE_IO_CUFILE, 1, 1, 0);
    bench_read(&c, "file->GPU cuFile + CRC (D2H pass)", S3D_FILE_IO_CUFILE, 1, 1, 1);
    bench_read(&c, "file->GPU O_DIRECT via pool", S3D_FILE_IO_DIRECT, 1, 1, 0);
    bench_read(&c, "file->GPU O_DIRECT via pool + CRC", S3D_FILE_IO_DIRECT, 1, 1, 1);
    bench_read(&c, "file->GPU buffered via pool", S3D_FILE_IO_BUFFERED, 1, 1, 0);
    bench_read(&c, "file->GPU buffered via pool", S3D_FILE_IO_BUFFERED, 1, 0, 0);
    bench_read(&c, "file->host pread", S3D_FILE_IO_BUFFERED, 0, 1, 0);
    bench_read(&c, "file->host pread", S3D_FILE_IO_BUFFERED, 0, 0, 0);
    bench_read(&c, "file->host O_DIRECT (aligned dst)", S3D_FILE_IO_DIRECT, 0, 1, 0);
    /* The GPU buffer holds the file now (last device read): write it back. */
    bench_write(&c, "GPU->file via pool (DIRECT mode)", S3D_FILE_IO_DIRECT);
    bench_write(&c, "GPU->file cuFile", S3D_FILE_IO_CUFILE);
    if (root != NULL && endpoint != NULL)
        bench_s3(&c, root, endpoint);
    else
        row("S3->GPU vs S3->host", 0, -1, "no origin given (--origin-root, --endpoint)");

    unlink(path);
    s3d_device_host_free(c.dev, c.host, c.size);
    s3d_device_mem_free(c.dev, 0, c.d);
    s3d_pool_free(c.pool);
    s3d_device_free(c.dev);
    return 0;
}

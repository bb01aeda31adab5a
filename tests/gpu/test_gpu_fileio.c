/* test_gpu_fileio.c - file <-> GPU memory on a real GPU (skipped without one): reads of
 * misaligned ranges in every mode (cuFile when it opens), checked by copying back and by CRC;
 * the writer from device memory, checked against the file. Each read and write prints the
 * bytes each path moved (s3d_file_io_opts.counts) and checks that they add up to the data
 * and fit the mode (CUFILE all cuFile, BUFFERED all buffered, writes never O_DIRECT). Mode
 * CUFILE on a file cuFile cannot reach directly (no nvidia-fs, a disk it does not serve) must
 * fail with CU_FILE_IO_NOT_SUPPORTED, cuFile's compatibility mode being off: then printed and
 * not run again for writes. */
#include <fcntl.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "engine/fileio.h"
#include "engine/pool.h"
#include "gpu_util.h"

#define SIZE ((40u << 20) + 777u)

/* The counters of one call in mode, checked against the bytes it moved (host_bytes of them
 * from host memory, always buffered). */
static void check_counts(const char *what, int mode, const struct s3d_file_io_counts *n,
                         uint64_t bytes, uint64_t host_bytes)
{
    printf("%s mode %d: cufile %llu direct %llu buffered %llu of %llu\n", what, mode,
           (unsigned long long)n->cufile, (unsigned long long)n->direct,
           (unsigned long long)n->buffered, (unsigned long long)bytes);
    CHECK(n->cufile + n->direct + n->buffered == bytes);
    if (mode == S3D_FILE_IO_CUFILE)
        CHECK(n->cufile == bytes - host_bytes);
    if (mode == S3D_FILE_IO_BUFFERED)
        CHECK(n->buffered == bytes);
    if (mode == S3D_FILE_IO_DIRECT || mode == S3D_FILE_IO_BUFFERED)
        CHECK(n->cufile == 0);
    if (host_bytes > 0) /* a write */
        CHECK(n->direct == 0);
}

int main(void)
{
    struct s3d_device *dev = gpu_open_or_skip();
    struct s3d_pool *pool;
    char path[512], out[512];
    CHECK_OK(s3d_pool_new(dev, 4 * (8u << 20), 8u << 20, &pool));
    snprintf(path, sizeof(path), "%s/gpu-data.bin", t_tmpdir());
    snprintf(out, sizeof(out), "%s/gpu-out.bin", t_tmpdir());

    unsigned char *data = malloc(SIZE), *back = malloc(SIZE);
    CHECK(data != NULL && back != NULL);
    t_fill_random(data, SIZE, 5);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, data, SIZE) == (ssize_t)SIZE);
    close(fd);

    uint64_t d;
    CHECK_OK(s3d_device_mem_alloc(dev, 0, SIZE + 4096, &d));
    struct s3d_stream *s;
    CHECK_OK(s3d_device_stream_new(dev, 0, &s));

    const char *why = NULL;
    int have_cufile = s3d_cufile_available(dev, 0, &why);
    printf("cuFile: %s\n", have_cufile ? "available" : why);
    const int modes[] = {S3D_FILE_IO_AUTO, S3D_FILE_IO_DIRECT, S3D_FILE_IO_BUFFERED,
                         S3D_FILE_IO_CUFILE};
    int refused = 0; /* mode CUFILE refused: cuFile cannot reach the scratch file directly */
    for (size_t mi = 0; mi < 4; mi++) {
        if (modes[mi] == S3D_FILE_IO_CUFILE && !have_cufile)
            continue;
        /* Ranges laid out back to back in device memory, 8-byte aligned there. */
        const uint64_t offs[] = {0, 1, 4095, 4097, (8u << 20) - 3, 12345678, SIZE - 20};
        const uint64_t lens[] = {4096, 8, 1, 20u << 20, 9u << 20, 100000, 20};
        struct s3d_file_range r[7];
        uint32_t crc[7];
        uint64_t at = 0;
        for (int i = 0; i < 7; i++) {
            r[i] =
                (struct s3d_file_range){offs[i], lens[i], (void *)(uintptr_t)(d + at), 0, &crc[i]};
            at += (lens[i] + 7) & ~7ull;
        }
        struct s3d_file_io_counts n = {0, 0, 0};
        struct s3d_file_io_opts o = {.mode = modes[mi], .counts = &n};
        int rc = s3d_file_read_ranges(dev, pool, path, r, 7, &o);
        if (rc == S3D_ECUFILE && modes[mi] == S3D_FILE_IO_CUFILE &&
            strstr(s3d_last_error_message(), "CU_FILE_IO_NOT_SUPPORTED") != NULL) {
            /* cuFile's compatibility mode is off (staging-pool.md): no GPUDirect path to this
             * file, so mode CUFILE fails with cuFile's code instead of a slow read. */
            printf("read mode %d refused by cuFile: %s\n", modes[mi], s3d_last_error_message());
            refused = 1;
            continue;
        }
        CHECK_OK(rc);
        CHECK_OK(s3d_device_copy_dtoh(dev, s, back, d, at));
        CHECK_OK(s3d_device_stream_sync(dev, s));
        at = 0;
        for (int i = 0; i < 7; i++) {
            if (memcmp(back + at, data + offs[i], lens[i]) != 0)
                t_fail(__FILE__, __LINE__, "mode %d range %d: wrong bytes", modes[mi], i);
            CHECK(crc[i] == s3d_crc32c(0, data + offs[i], lens[i]));
            at += (lens[i] + 7) & ~7ull;
        }
        CHECK(s3d_pool_free_count(pool) == 4);
        uint64_t sum = 0;
        for (int i = 0; i < 7; i++)
            sum += lens[i];
        check_counts("read", modes[mi], &n, sum, 0);
        printf("read mode %d ok\n", modes[mi]);
    }

    /* Writer: the whole file from device memory (placed there by a plain copy), header from
     * the host. */
    CHECK_OK(s3d_device_copy_htod(dev, s, d, data, SIZE));
    CHECK_OK(s3d_device_stream_sync(dev, s));
    for (size_t mi = 0; mi < 4; mi++) {
        if (modes[mi] == S3D_FILE_IO_CUFILE && (!have_cufile || refused))
            continue;
        struct s3d_file_io_counts n = {0, 0, 0};
        struct s3d_file_io_opts o = {.mode = modes[mi], .counts = &n};
        struct s3d_file_writer *w;
        struct s3d_file_seg seg[2] = {{(const void *)(uintptr_t)(d + 100), SIZE - 100 - 5, 0},
                                      {data + SIZE - 5, 5, -1}};
        uint32_t crc[2];
        CHECK_OK(s3d_file_writer_open(dev, pool, out, &o, &w));
        CHECK_OK(s3d_file_writer_write(w, 100, seg, 2, crc));
        CHECK_OK(s3d_file_writer_pwrite(w, 0, data, 100));
        CHECK_OK(s3d_file_writer_commit(w));
        s3d_file_writer_free(w);
        CHECK(crc[0] == s3d_crc32c(0, data + 100, SIZE - 105));
        fd = open(out, O_RDONLY);
        CHECK(fd >= 0 && read(fd, back, SIZE) == (ssize_t)SIZE);
        close(fd);
        CHECK(memcmp(back, data, SIZE) == 0);
        check_counts("write", modes[mi], &n, SIZE - 100, 5);
        printf("write mode %d ok\n", modes[mi]);
    }

    unlink(path);
    unlink(out);
    rmdir(t_tmpdir());
    s3d_device_stream_free(dev, s);
    s3d_device_mem_free(dev, 0, d);
    s3d_pool_free(pool);
    s3d_device_free(dev);
    free(data);
    free(back);
    return 0;
}

/* test_ckpt_file_paths.c - s3d_write_stats and s3d_read_stats say which path moved the tensor
 * bytes of a local checkpoint (bytes_cufile, bytes_direct, bytes_buffered), through the public
 * API on the emulated device (S3D_DEVICE_EMULATE=1): saves from device and host memory in
 * modes BUFFERED and DIRECT (saves never write with O_DIRECT: all buffered), loads into device
 * memory in BUFFERED, DIRECT and AUTO (no cuFile here: O_DIRECT through the pool), and a
 * caller's struct_size 0 (the first layout) left alone past it. Each counter must equal the
 * checkpoint's tensor bytes for the path that ran and be 0 for the others. The O_DIRECT load
 * needs a file system that takes O_DIRECT: $TMPDIR, else the current folder, else that part
 * is skipped with the reason. cuFile's counts are checked against the fake libcufile in
 * test_cuda_fake. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_util.h"
#include "device/device.h"

#define NT 3
static const uint64_t sizes[NT] = {(3u << 20) + 5, 100003, 4096};
static const uint64_t total = (3u << 20) + 5 + 100003 + 4096;

/* 1 when a file in dir can be read with O_DIRECT (not tmpfs). */
static int takes_direct(const char *dir)
{
    char path[700];
    void *buf = NULL;
    int ok = 0;
    snprintf(path, sizeof(path), "%s/direct-probe", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return 0;
    CHECK(posix_memalign(&buf, 4096, 4096) == 0);
    memset(buf, 1, 4096);
    CHECK(write(fd, buf, 4096) == 4096);
    close(fd);
    fd = open(path, O_RDONLY | O_DIRECT);
    if (fd >= 0) {
        ok = pread(fd, buf, 4096, 0) == 4096;
        close(fd);
    }
    free(buf);
    unlink(path);
    return ok;
}

static void check_counts(const char *what, uint64_t cufile, uint64_t direct, uint64_t buffered,
                         uint64_t want_cufile, uint64_t want_direct, uint64_t want_buffered)
{
    if (cufile != want_cufile || direct != want_direct || buffered != want_buffered)
        t_fail(__FILE__, __LINE__, "%s: cufile %llu direct %llu buffered %llu, want %llu %llu %llu",
               what, (unsigned long long)cufile, (unsigned long long)direct,
               (unsigned long long)buffered, (unsigned long long)want_cufile,
               (unsigned long long)want_direct, (unsigned long long)want_buffered);
}

static void save(struct s3d_client *c, const char *path, const struct s3d_tensor_src *src, int mode,
                 const char *what)
{
    struct s3d_write_options wo;
    struct s3d_write_stats st;
    memset(&wo, 0, sizeof(wo));
    memset(&st, 0, sizeof(st));
    st.struct_size = sizeof(st);
    wo.file_io = mode;
    wo.stats = &st;
    CHECK_OK(s3d_checkpoint_write(c, path, src, NT, NULL, 0, &wo));
    check_counts(what, st.bytes_cufile, st.bytes_direct, st.bytes_buffered, 0, 0, total);
}

/* Loads every tensor of path into emulated device memory in mode; returns the stats. */
static struct s3d_read_stats load(struct s3d_client *c, const char *path, int mode,
                                  const unsigned char *const *data)
{
    struct s3d_reader *r = NULL;
    struct s3d_tensor_dest d[NT];
    struct s3d_read_options ro;
    struct s3d_read_stats st;
    memset(d, 0, sizeof(d));
    memset(&ro, 0, sizeof(ro));
    memset(&st, 0, sizeof(st));
    st.struct_size = sizeof(st);
    st.bytes_cufile = 99; /* must be overwritten with 0 */
    CHECK_OK(s3d_reader_open(c, path, &r));
    for (size_t i = 0; i < NT; i++) {
        d[i].index = i;
        d[i].device = 0;
        d[i].capacity = sizes[i];
        d[i].ptr = (void *)(uintptr_t)t_emu_copy(data[i] + 1, sizes[i] - 1); /* not the bytes */
    }
    ro.file_io = mode;
    ro.stats = &st;
    CHECK_OK(s3d_reader_read(r, d, NT, &ro));
    for (size_t i = 0; i < NT; i++) {
        CHECK(memcmp(s3d_device_emu_view((uint64_t)(uintptr_t)d[i].ptr), data[i], sizes[i]) == 0);
        t_emu_free((uint64_t)(uintptr_t)d[i].ptr);
    }
    s3d_reader_close(r);
    return st;
}

int main(void)
{
    struct s3d_client *c = NULL;
    struct s3d_client_options co;
    struct s3d_tensor_src src[NT], dsrc[NT];
    int64_t shape[NT];
    char names[NT][8], dir[600], path[700];
    unsigned char *data[NT];

    setenv("S3D_DEVICE_EMULATE", "1", 1);
    memset(&co, 0, sizeof(co));
    co.staging_bytes = 16 << 20;
    CHECK_OK(s3d_client_new(&co, &c));
    memset(src, 0, sizeof(src));
    for (size_t i = 0; i < NT; i++) {
        data[i] = malloc(sizes[i]);
        CHECK(data[i] != NULL);
        for (uint64_t b = 0; b < sizes[i]; b++)
            data[i][b] = (unsigned char)(b * 131 + i * 7 + (b >> 9));
        snprintf(names[i], sizeof(names[i]), "t%zu", i);
        shape[i] = (int64_t)sizes[i];
        src[i].name = names[i];
        src[i].dtype = S3D_DTYPE_U8;
        src[i].ndim = 1;
        src[i].shape = &shape[i];
        src[i].ptr = data[i];
        src[i].device = -1;
        src[i].nbytes = sizes[i];
        dsrc[i] = src[i];
        dsrc[i].ptr = (const void *)(uintptr_t)t_emu_copy(data[i], sizes[i]);
        dsrc[i].device = 0;
    }
    snprintf(dir, sizeof(dir), "%s", t_tmpdir());
    if (!takes_direct(dir)) {
        snprintf(dir, sizeof(dir), "s3d-paths-%ld", (long)getpid());
        CHECK(mkdir(dir, 0755) == 0 || errno == EEXIST);
        if (!takes_direct(dir))
            dir[0] = '\0';
    }
    snprintf(path, sizeof(path), "%s/paths.safetensors", dir[0] ? dir : t_tmpdir());

    /* Saves: device tensors staged through the pool and host tensors, all through the page
     * cache whatever the mode. */
    save(c, path, dsrc, S3D_FILE_IO_DIRECT, "save from device, DIRECT");
    save(c, path, src, S3D_FILE_IO_DIRECT, "save from host, DIRECT");
    save(c, path, dsrc, S3D_FILE_IO_BUFFERED, "save from device, BUFFERED");
    {
        /* struct_size 0: the first layout, which ends before the counters. */
        struct s3d_write_options wo;
        struct s3d_write_stats st;
        memset(&wo, 0, sizeof(wo));
        memset(&st, 0, sizeof(st));
        st.bytes_buffered = 12345;
        wo.stats = &st;
        CHECK_OK(s3d_checkpoint_write(c, path, dsrc, NT, NULL, 0, &wo));
        CHECK(st.struct_size == 0 && st.tensors_total == NT && st.bytes_buffered == 12345);
    }

    struct s3d_read_stats rs = load(c, path, S3D_FILE_IO_BUFFERED, (const unsigned char **)data);
    check_counts("load BUFFERED", rs.bytes_cufile, rs.bytes_direct, rs.bytes_buffered, 0, 0, total);
    if (dir[0] != '\0') {
        rs = load(c, path, S3D_FILE_IO_DIRECT, (const unsigned char **)data);
        check_counts("load DIRECT", rs.bytes_cufile, rs.bytes_direct, rs.bytes_buffered, 0, total,
                     0);
        rs = load(c, path, S3D_FILE_IO_AUTO, (const unsigned char **)data);
        check_counts("load AUTO", rs.bytes_cufile, rs.bytes_direct, rs.bytes_buffered, 0, total, 0);
    } else {
        printf("O_DIRECT load skipped: neither %s nor the current folder takes O_DIRECT\n",
               t_tmpdir());
    }

    unlink(path);
    if (strncmp(dir, "s3d-paths-", 10) == 0)
        rmdir(dir);
    rmdir(t_tmpdir());
    for (size_t i = 0; i < NT; i++) {
        t_emu_free((uint64_t)(uintptr_t)dsrc[i].ptr);
        free(data[i]);
    }
    s3d_client_free(c);
    printf("ok\n");
    return 0;
}

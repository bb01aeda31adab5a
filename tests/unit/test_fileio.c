/* test_fileio.c - local file reads and writes with real files, on ext4 ($TMPDIR or /tmp) and
 * tmpfs (/dev/shm):
 *   - host and (emulated) device destinations at every alignment of offset and length around
 *     4 KiB boundaries, in every mode, with CRCs checked against the data;
 *   - the O_DIRECT path and the buffered fallback (forced refusal at open and at read time);
 *   - many small ranges sharing windows, overlapping and unsorted ranges, a tiny pool (so
 *     windows wrap around chunks) and the pool left whole afterwards;
 *   - a short file: S3D_EFMT_TRUNCATED naming path and offset, before any byte moves;
 *   - the writer: host and device segments, header pwrite, CRCs, atomic commit; abort, free
 *     without commit and a canceled write leave the previous file intact and no temp files;
 *   - the bytes counted for each path (O_DIRECT, buffered, the fallback) by reads and writes.
 * The emulated device defers copies until an event is seen complete, so a chunk reused too
 * early shows up here as wrong bytes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/compiler.h"
#include "common/crc32c.h"
#include "device/device.h"
#include "engine/fileio.h"
#include "engine/fileio_stage.h"
#include "engine/pool.h"
#include "testutil.h"

#define FILE_SIZE ((3u << 20) + 777u)

static struct s3d_device *g_host, *g_emu;
static unsigned char *g_data; /* the file's content */

static void write_file(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, data, n) == (ssize_t)n);
    close(fd);
}

static unsigned char *read_file(const char *path, size_t *n)
{
    struct stat st;
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    CHECK(fstat(fd, &st) == 0);
    unsigned char *b = malloc((size_t)st.st_size + 1);
    CHECK(b != NULL);
    CHECK(read(fd, b, (size_t)st.st_size) == st.st_size);
    close(fd);
    *n = (size_t)st.st_size;
    return b;
}

/* Files in dir whose name starts with ".name." (the writer's temporaries). */
static int count_temps(const char *dir, const char *name)
{
    char prefix[256];
    int n = 0;
    snprintf(prefix, sizeof(prefix), ".%s.", name);
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    closedir(d);
    return n;
}

static const uint64_t offs[] = {
    0, 1, 7, 8, 4088, 4095, 4096, 4097, 8191, 8192, 12345, (1u << 20) - 1, FILE_SIZE - 4097};
static const uint64_t lens[] = {0, 1, 7, 8, 4095, 4096, 4097, 8195, 65536 + 8, (1u << 20) + 5};

/* Every (offset, length) pair that fits, one call per pair, host destination. */
static void host_alignment(const char *path, int mode)
{
    struct s3d_file_io_opts o = {.mode = mode};
    unsigned char *buf = malloc((2u << 20) + 8192);
    CHECK(buf != NULL);
    for (size_t i = 0; i < S3D_ARRAY_LEN(offs); i++) {
        for (size_t j = 0; j < S3D_ARRAY_LEN(lens); j++) {
            uint64_t off = offs[i], len = lens[j];
            if (off + len > FILE_SIZE)
                continue;
            /* Destination with the file offset's alignment, so DIRECT can use O_DIRECT. */
            unsigned char *dst =
                (unsigned char *)(((uintptr_t)buf + 4095) & ~(uintptr_t)4095) + (off & 4095);
            uint32_t crc = 0xdeadbeef;
            memset(dst, 0xee, len + 1);
            struct s3d_file_range r = {off, len, dst, -1, &crc};
            CHECK_OK(s3d_file_read_ranges(g_host, NULL, path, &r, 1, &o));
            if (memcmp(dst, g_data + off, len) != 0 || dst[len] != 0xee)
                t_fail(__FILE__, __LINE__, "mode %d off %llu len %llu: wrong bytes", mode,
                       (unsigned long long)off, (unsigned long long)len);
            CHECK(crc == s3d_crc32c(0, g_data + off, len));
        }
    }
    free(buf);
}

/* All pairs in one call each to the emulated device, through a pool of 4 x 16 KiB chunks. */
static void device_alignment(const char *path, int mode)
{
    struct s3d_pool *pool;
    struct s3d_file_io_opts o = {.mode = mode};
    uint64_t dmem;
    CHECK_OK(s3d_pool_new(g_emu, 4 * 16384, 16384, &pool));
    CHECK_OK(s3d_device_mem_alloc(g_emu, 0, (2u << 20) + 64, &dmem));
    unsigned char *dev = (unsigned char *)(uintptr_t)dmem; /* not host-accessible */
    unsigned char *view = s3d_device_emu_view(dmem);
    for (size_t i = 0; i < S3D_ARRAY_LEN(offs); i++) {
        for (size_t j = 0; j < S3D_ARRAY_LEN(lens); j++) {
            uint64_t off = offs[i], len = lens[j];
            if (off + len > FILE_SIZE)
                continue;
            uint32_t crc = 0xdeadbeef;
            /* 8-byte aligned destination, as safetensors data is */
            memset(view, 0xee, len + 16);
            struct s3d_file_range r = {off, len, dev + 8, 0, &crc};
            CHECK_OK(s3d_file_read_ranges(g_emu, pool, path, &r, 1, &o));
            if (memcmp(view + 8, g_data + off, len) != 0 || view[7] != 0xee ||
                view[8 + len] != 0xee)
                t_fail(__FILE__, __LINE__, "device mode %d off %llu len %llu: wrong bytes", mode,
                       (unsigned long long)off, (unsigned long long)len);
            CHECK(crc == s3d_crc32c(0, g_data + off, len));
        }
    }
    CHECK(s3d_pool_free_count(pool) == 4);
    CHECK(s3d_pool_high_water(pool) <= 4);
    s3d_device_mem_free(g_emu, 0, dmem);
    s3d_pool_free(pool);
}

/* Many ranges in one call: tensor-like (8-byte aligned, adjacent, some tiny), plus overlaps,
 * gaps beyond the merge distance, unsorted, host and device mixed. */
static void many_ranges(const char *path, int mode, uint64_t chunk)
{
    enum { N = 200 };
    struct s3d_file_range r[N];
    uint32_t crc[N];
    struct s3d_pool *pool;
    struct s3d_file_io_opts o = {.mode = mode};
    uint64_t dmem;
    CHECK_OK(s3d_pool_new(g_emu, 3 * chunk, chunk, &pool));
    CHECK_OK(s3d_device_mem_alloc(g_emu, 0, 64u << 20, &dmem));
    unsigned char *host = malloc(64u << 20);
    CHECK(host != NULL);
    uint64_t seed = 12345, pos = 0, dpos = 0;
    for (int i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t len = (seed >> 33) % (i % 10 == 0 ? 300000 : 5000);
        len &= ~7ull;
        if (i % 17 == 0)
            pos += 200000; /* a gap wider than the merge distance */
        if (i % 13 == 5 && pos > 3000)
            pos -= 3000; /* overlaps the previous range */
        if (pos + len > FILE_SIZE)
            pos = (seed >> 40) % (FILE_SIZE - len);
        pos &= ~7ull;
        int on_dev = i % 4 != 3;
        r[i] = (struct s3d_file_range){pos, len,
                                       on_dev ? (void *)(uintptr_t)(dmem + dpos) : host + dpos,
                                       on_dev ? 0 : -1, i % 5 == 4 ? NULL : &crc[i]};
        dpos += len + 8;
        pos += len;
    }
    /* Unsorted: swap pairs. */
    for (int i = 0; i + 7 < N; i += 7) {
        struct s3d_file_range t = r[i];
        r[i] = r[i + 6];
        r[i + 6] = t;
    }
    memset(crc, 0, sizeof(crc));
    CHECK_OK(s3d_file_read_ranges(g_emu, pool, path, r, N, &o));
    for (int i = 0; i < N; i++) {
        const unsigned char *d =
            r[i].device >= 0 ? s3d_device_emu_view((uint64_t)(uintptr_t)r[i].dst) : r[i].dst;
        if (memcmp(d, g_data + r[i].file_offset, r[i].length) != 0)
            t_fail(__FILE__, __LINE__, "range %d (off %llu len %llu dev %d): wrong bytes", i,
                   (unsigned long long)r[i].file_offset, (unsigned long long)r[i].length,
                   r[i].device);
        if (r[i].crc_out != NULL)
            CHECK(*r[i].crc_out == s3d_crc32c(0, g_data + r[i].file_offset, r[i].length));
    }
    CHECK(s3d_pool_free_count(pool) == 3);
    free(host);
    s3d_device_mem_free(g_emu, 0, dmem);
    s3d_pool_free(pool);
}

/* Staged reads keep more than one pread in flight while copies run (the hold makes the first
 * pread wait for a second, so the overlap is seen on a loaded machine), with the right bytes
 * for many offsets and lengths and every chunk back in the pool. */
static void read_depth(const char *path, int mode)
{
    static const uint64_t doffs[] = {0, 8, 4096, 4104, 65536 + 8, 1000000};
    static const uint64_t dlens[] = {8,          4096,     65536,          65536 + 8,
                                     200000 + 8, 1u << 20, (1u << 20) + 8, (2u << 20) + 777};
    struct s3d_pool *pool;
    struct s3d_file_io_opts o = {.mode = mode};
    uint64_t dmem;
    CHECK_OK(s3d_pool_new(g_emu, 4 * 65536, 65536, &pool));
    CHECK_OK(s3d_device_mem_alloc(g_emu, 0, FILE_SIZE + 64, &dmem));
    unsigned char *view = s3d_device_emu_view(dmem);
    for (size_t i = 0; i < S3D_ARRAY_LEN(doffs); i++) {
        for (size_t j = 0; j < S3D_ARRAY_LEN(dlens); j++) {
            uint64_t off = doffs[i], len = dlens[j];
            uint32_t crc = 0;
            if (off + len > FILE_SIZE)
                continue;
            memset(view, 0xee, len + 16);
            s3d_fileio_read_hold = len >= 3 * 65536; /* a second read is queued at once */
            s3d_fileio_reads_peak = 0;
            struct s3d_file_range r = {off, len, (void *)(uintptr_t)(dmem + 8), 0, &crc};
            CHECK_OK(s3d_file_read_ranges(g_emu, pool, path, &r, 1, &o));
            s3d_fileio_read_hold = 0;
            if (memcmp(view + 8, g_data + off, len) != 0 || view[7] != 0xee ||
                view[8 + len] != 0xee)
                t_fail(__FILE__, __LINE__, "depth mode %d off %llu len %llu: wrong bytes", mode,
                       (unsigned long long)off, (unsigned long long)len);
            CHECK(crc == s3d_crc32c(0, g_data + off, len));
            /* Three windows or more: reads overlapped. */
            if (len >= 3 * 65536 && s3d_fileio_reads_peak < 2)
                t_fail(__FILE__, __LINE__, "mode %d off %llu len %llu: %d read(s) at once", mode,
                       (unsigned long long)off, (unsigned long long)len, s3d_fileio_reads_peak);
            CHECK(s3d_fileio_reads_peak <= 3);
            CHECK(s3d_pool_free_count(pool) == 4);
        }
    }
    s3d_device_mem_free(g_emu, 0, dmem);
    s3d_pool_free(pool);
}

static int cancel_after(void *user, uint64_t done, uint64_t total)
{
    uint64_t *limit = user;
    return done >= *limit;
}

static void errors(const char *dir, const char *path)
{
    char p[1024];
    unsigned char buf[64];
    struct s3d_pool *pool;
    CHECK_OK(s3d_pool_new(g_emu, 2 * 4096, 4096, &pool));

    /* Past the end: fails before reading, names the path and the offset. */
    struct s3d_file_range r[2] = {{0, 8, buf, -1, NULL}, {FILE_SIZE - 8, 16, buf + 8, -1, NULL}};
    memset(buf, 0x55, sizeof(buf));
    CHECK_ERR(s3d_file_read_ranges(g_host, NULL, path, r, 2, NULL), S3D_EFMT_TRUNCATED);
    CHECK_MSG_HAS(path);
    snprintf(p, sizeof(p), "%llu", (unsigned long long)(FILE_SIZE - 8));
    CHECK_MSG_HAS(p);
    CHECK(buf[0] == 0x55); /* nothing moved */
    r[1].device = 0;
    CHECK_ERR(s3d_file_read_ranges(g_emu, pool, path, r, 2, NULL), S3D_EFMT_TRUNCATED);
    /* Offset + length overflow. */
    struct s3d_file_range big = {UINT64_MAX - 2, 8, buf, -1, NULL};
    CHECK_ERR(s3d_file_read_ranges(g_host, NULL, path, &big, 1, NULL), S3D_EFMT_TRUNCATED);

    snprintf(p, sizeof(p), "%s/no-such-file", dir);
    CHECK_ERR(s3d_file_read_ranges(g_host, NULL, p, r, 1, NULL), S3D_ENOENT);
    CHECK_MSG_HAS("no-such-file");

    /* A device destination without a GPU, and without a pool. */
    struct s3d_file_range d = {0, 8, (void *)(uintptr_t)4096, 0, NULL};
    CHECK_ERR(s3d_file_read_ranges(g_host, pool, path, &d, 1, NULL), S3D_ENODEVICE);
    CHECK_ERR(s3d_file_read_ranges(g_emu, NULL, path, &d, 1, NULL), S3D_EINVAL);
    /* CUFILE mode where cuFile cannot work is an error; AUTO falls back (tested above). */
    uint64_t dmem;
    CHECK_OK(s3d_device_mem_alloc(g_emu, 0, 4096, &dmem));
    d.dst = (void *)(uintptr_t)dmem;
    struct s3d_file_io_opts o = {.mode = S3D_FILE_IO_CUFILE};
    CHECK_ERR(s3d_file_read_ranges(g_emu, pool, path, &d, 1, &o), S3D_ECUFILE);
    CHECK_MSG_HAS("cuFile");
    o.mode = 9;
    CHECK_ERR(s3d_file_read_ranges(g_emu, pool, path, &d, 1, &o), S3D_EINVAL);

    /* Cancel through the progress callback, host and device. */
    uint64_t limit = 1;
    unsigned char *host = malloc(FILE_SIZE);
    struct s3d_file_range all = {0, FILE_SIZE, host, -1, NULL};
    o = (struct s3d_file_io_opts){.progress = cancel_after, .progress_user = &limit};
    CHECK_ERR(s3d_file_read_ranges(g_host, NULL, path, &all, 1, &o), S3D_ECANCELED);
    uint64_t dbig;
    CHECK_OK(s3d_device_mem_alloc(g_emu, 0, FILE_SIZE, &dbig));
    all.dst = (void *)(uintptr_t)dbig;
    all.device = 0;
    limit = 100000;
    CHECK_ERR(s3d_file_read_ranges(g_emu, pool, path, &all, 1, &o), S3D_ECANCELED);
    CHECK(s3d_pool_free_count(pool) == 2); /* chunks back even on failure */
    struct s3d_cancel *c;
    CHECK_OK(s3d_cancel_new(&c));
    s3d_cancel_request(c);
    o = (struct s3d_file_io_opts){.cancel = c};
    CHECK_ERR(s3d_file_read_ranges(g_emu, pool, path, &all, 1, &o), S3D_ECANCELED);
    s3d_cancel_free(c);
    s3d_device_mem_free(g_emu, 0, dbig);
    s3d_device_mem_free(g_emu, 0, dmem);
    free(host);
    s3d_pool_free(pool);
}

static void writer(const char *dir, int mode)
{
    char path[1024];
    struct s3d_pool *pool;
    struct s3d_file_writer *w;
    struct s3d_file_io_opts o = {.mode = mode};
    snprintf(path, sizeof(path), "%s/ckpt.safetensors", dir);
    write_file(path, "previous", 8);
    CHECK_OK(s3d_pool_new(g_emu, 3 * 8192, 8192, &pool));

    /* Segments: host, device (several chunks), empty, device (sub-chunk), host. */
    uint64_t dmem;
    CHECK_OK(s3d_device_mem_alloc(g_emu, 0, 1u << 20, &dmem));
    memcpy(s3d_device_emu_view(dmem), g_data + 5000, 100000);
    struct s3d_file_seg segs[] = {
        {g_data, 777, -1},       {(const void *)(uintptr_t)dmem, 100000, 0},
        {g_data, 0, -1},         {(const void *)(uintptr_t)(dmem + 8), 4100, 0},
        {g_data + 9, 70001, -1},
    };
    const unsigned char *expect_src[] = {g_data, g_data + 5000, g_data, g_data + 5008, g_data + 9};
    const uint64_t hdr = 4104;
    uint32_t crc[5];
    CHECK_OK(s3d_file_writer_open(g_emu, pool, path, &o, &w));
    CHECK(strstr(s3d_file_writer_tmp_path(w), "/.ckpt.safetensors.") != NULL);
    CHECK(count_temps(dir, "ckpt.safetensors") == 1);
    CHECK_OK(s3d_file_writer_write(w, hdr, segs, 5, crc));
    unsigned char header[4104];
    memset(header, 'h', sizeof(header));
    CHECK_OK(s3d_file_writer_pwrite(w, 0, header, sizeof(header)));
    /* Not visible before commit. */
    size_t n;
    unsigned char *got = read_file(path, &n);
    CHECK(n == 8 && memcmp(got, "previous", 8) == 0);
    free(got);
    CHECK_OK(s3d_file_writer_commit(w));
    CHECK_ERR(s3d_file_writer_commit(w), S3D_EINVAL);
    s3d_file_writer_free(w);
    CHECK(count_temps(dir, "ckpt.safetensors") == 0);
    got = read_file(path, &n);
    uint64_t at = hdr;
    CHECK(memcmp(got, header, hdr) == 0);
    for (int i = 0; i < 5; i++) {
        CHECK(memcmp(got + at, expect_src[i], segs[i].length) == 0);
        CHECK(crc[i] == s3d_crc32c(0, expect_src[i], segs[i].length));
        at += segs[i].length;
    }
    CHECK(n == at);
    free(got);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644);
    CHECK(s3d_pool_free_count(pool) == 3);

    /* Abort and free-without-commit leave the committed file as it was, and no temp. */
    got = read_file(path, &n);
    CHECK_OK(s3d_file_writer_open(g_emu, pool, path, &o, &w));
    CHECK_OK(s3d_file_writer_write(w, 0, segs, 2, NULL));
    s3d_file_writer_abort(w);
    CHECK(count_temps(dir, "ckpt.safetensors") == 0);
    CHECK_ERR(s3d_file_writer_write(w, 0, segs, 1, NULL), S3D_EINVAL);
    s3d_file_writer_free(w);
    CHECK_OK(s3d_file_writer_open(g_emu, pool, path, &o, &w));
    CHECK_OK(s3d_file_writer_write(w, 0, segs, 1, NULL));
    s3d_file_writer_free(w);
    CHECK(count_temps(dir, "ckpt.safetensors") == 0);

    /* A write canceled half-way: error, then the caller frees; previous file intact. */
    uint64_t limit = 20000;
    struct s3d_file_io_opts oc = {
        .mode = mode, .progress = cancel_after, .progress_user = &limit, .progress_total = 123};
    CHECK_OK(s3d_file_writer_open(g_emu, pool, path, &oc, &w));
    CHECK_ERR(s3d_file_writer_write(w, 0, segs, 5, NULL), S3D_ECANCELED);
    s3d_file_writer_free(w);
    CHECK(count_temps(dir, "ckpt.safetensors") == 0);
    CHECK(s3d_pool_free_count(pool) == 3);
    size_t n2;
    unsigned char *again = read_file(path, &n2);
    CHECK(n2 == n && memcmp(again, got, n) == 0);
    free(again);
    free(got);

    /* A folder that does not exist: clear error, nothing created. */
    char bad[1100];
    snprintf(bad, sizeof(bad), "%s/missing/x.safetensors", dir);
    CHECK_ERR(s3d_file_writer_open(g_emu, pool, bad, &o, &w), S3D_ENOENT);
    CHECK(w == NULL);
    CHECK_MSG_HAS("missing/x.safetensors");
    /* Device segments on the host backend. */
    CHECK_OK(s3d_file_writer_open(g_host, pool, path, &o, &w));
    CHECK_ERR(s3d_file_writer_write(w, 0, &segs[1], 1, NULL), S3D_ENODEVICE);
    s3d_file_writer_free(w);
    CHECK(count_temps(dir, "ckpt.safetensors") == 0);

    s3d_device_mem_free(g_emu, 0, dmem);
    s3d_pool_free(pool);
}

/* The bytes each path moved (s3d_file_io_opts.counts): one device range and one host range
 * whose middle is O_DIRECT-aligned, with and without O_DIRECT refused, and a writer. */
static void counts_one(const char *path, int mode, struct s3d_file_range *r, uint64_t want_direct)
{
    struct s3d_file_io_counts n = {0, 0, 0};
    struct s3d_file_io_opts o = {.mode = mode, .counts = &n};
    struct s3d_pool *pool;
    CHECK_OK(s3d_pool_new(g_emu, 4 * 16384, 16384, &pool));
    CHECK_OK(s3d_file_read_ranges(g_emu, pool, path, r, 1, &o));
    if (n.cufile != 0 || n.direct != want_direct || n.buffered != r->length - want_direct)
        t_fail(__FILE__, __LINE__,
               "mode %d refuse %d device %d: cufile %llu direct %llu "
               "buffered %llu, want direct %llu of %llu",
               mode, s3d_fileio_refuse_direct, r->device, (unsigned long long)n.cufile,
               (unsigned long long)n.direct, (unsigned long long)n.buffered,
               (unsigned long long)want_direct, (unsigned long long)r->length);
    CHECK(memcmp(r->device >= 0 ? s3d_device_emu_view((uint64_t)(uintptr_t)r->dst) : r->dst,
                 g_data + r->file_offset, r->length) == 0);
    s3d_pool_free(pool);
}

static void path_counts(const char *dir, const char *path)
{
    int fd = fio_open_direct(path, O_RDONLY);
    void *buf = NULL;
    uint64_t dmem;
    CHECK(posix_memalign(&buf, 4096, 4096) == 0);
    /* tmpfs refuses O_DIRECT, or (Linux 6.6 on) takes it. */
    const int direct = fd >= 0 && pread(fd, buf, 4096, 0) == 4096;
    if (fd >= 0)
        close(fd);
    free(buf);
    CHECK_OK(s3d_device_mem_alloc(g_emu, 0, 2u << 20, &dmem));
    CHECK(posix_memalign(&buf, 4096, 3u << 20) == 0);
    struct s3d_file_range dr = {1, (1u << 20) + 5, (void *)(uintptr_t)(dmem + 8), 0, NULL};
    /* Host: the middle [4096, 2 MiB) O_DIRECT in mode DIRECT, the edges buffered. */
    struct s3d_file_range hr = {100, 2u << 20, (char *)buf + 100, -1, NULL};
    const uint64_t mid = (2u << 20) - 4096;
    counts_one(path, S3D_FILE_IO_DIRECT, &dr, direct ? dr.length : 0);
    counts_one(path, S3D_FILE_IO_AUTO, &dr, direct ? dr.length : 0);
    counts_one(path, S3D_FILE_IO_BUFFERED, &dr, 0);
    counts_one(path, S3D_FILE_IO_DIRECT, &hr, direct ? mid : 0);
    counts_one(path, S3D_FILE_IO_AUTO, &hr, 0);
    for (int refuse = 1; refuse <= 2; refuse++) {
        s3d_fileio_refuse_direct = refuse;
        counts_one(path, S3D_FILE_IO_DIRECT, &dr, 0);
        counts_one(path, S3D_FILE_IO_DIRECT, &hr, 0);
        s3d_fileio_refuse_direct = 0;
    }
    /* Writes never use O_DIRECT: host and staged device segments are buffered; the header
     * pwrite is not tensor data. */
    char out[1024];
    struct s3d_file_io_counts n = {0, 0, 0};
    struct s3d_file_io_opts o = {.mode = S3D_FILE_IO_DIRECT, .counts = &n};
    struct s3d_file_seg segs[2] = {{g_data, 5000, -1}, {(void *)(uintptr_t)dmem, 70000, 0}};
    struct s3d_file_writer *w;
    struct s3d_pool *pool;
    snprintf(out, sizeof(out), "%s/counts.bin", dir);
    CHECK_OK(s3d_pool_new(g_emu, 4 * 16384, 16384, &pool));
    CHECK_OK(s3d_file_writer_open(g_emu, pool, out, &o, &w));
    CHECK_OK(s3d_file_writer_write(w, 8, segs, 2, NULL));
    CHECK_OK(s3d_file_writer_pwrite(w, 0, "header..", 8));
    CHECK_OK(s3d_file_writer_commit(w));
    s3d_file_writer_free(w);
    CHECK(n.cufile == 0 && n.direct == 0 && n.buffered == 75000);
    unlink(out);
    s3d_pool_free(pool);
    free(buf);
    s3d_device_mem_free(g_emu, 0, dmem);
}

static void run_in(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/data.bin", dir);
    write_file(path, g_data, FILE_SIZE);
    printf("%s\n", dir);
    const int modes[] = {S3D_FILE_IO_AUTO, S3D_FILE_IO_DIRECT, S3D_FILE_IO_BUFFERED};
    for (size_t m = 0; m < S3D_ARRAY_LEN(modes); m++) {
        host_alignment(path, modes[m]);
        device_alignment(path, modes[m]);
        many_ranges(path, modes[m], 16384);
        many_ranges(path, modes[m], 1u << 20);
        read_depth(path, modes[m]);
    }
    /* The buffered fallback when the file system refuses O_DIRECT at open or at read. */
    for (int refuse = 1; refuse <= 2; refuse++) {
        s3d_fileio_refuse_direct = refuse;
        host_alignment(path, S3D_FILE_IO_DIRECT);
        device_alignment(path, S3D_FILE_IO_DIRECT);
        many_ranges(path, S3D_FILE_IO_AUTO, 16384);
        read_depth(path, S3D_FILE_IO_AUTO);
        s3d_fileio_refuse_direct = 0;
    }
    path_counts(dir, path);
    errors(dir, path);
    writer(dir, S3D_FILE_IO_AUTO);
    writer(dir, S3D_FILE_IO_DIRECT);
    unlink(path);
    snprintf(path, sizeof(path), "%s/ckpt.safetensors", dir);
    unlink(path);
}

int main(void)
{
    CHECK_OK(s3d_device_open(S3D_DEVICE_FORCE_HOST, &g_host));
    CHECK_OK(s3d_device_open(S3D_DEVICE_EMULATE, &g_emu));
    g_data = malloc(FILE_SIZE);
    CHECK(g_data != NULL);
    t_fill_random(g_data, FILE_SIZE, 7);

    run_in(t_tmpdir());
    char shm[256];
    snprintf(shm, sizeof(shm), "/dev/shm/s3d-test-%ld", (long)getpid());
    if (mkdir(shm, 0700) == 0) {
        run_in(shm);
        rmdir(shm);
    } else {
        printf("no /dev/shm: tmpfs part skipped\n");
    }
    rmdir(t_tmpdir());
    free(g_data);
    s3d_device_free(g_emu);
    s3d_device_free(g_host);
    return 0;
}

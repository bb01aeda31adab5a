/* fileio_read.c - byte ranges of a local file into host or GPU memory (fileio.h).
 *
 * Staged reads into GPU memory:
 *
 *   ranges (sorted by file offset, grouped into extents when less than FIO_MERGE_GAP apart)
 *     file: ....[ext_start ...................................... ext_end)....
 *   windows:  [w0: chunk bytes, 4 KiB-aligned start][w1]......[wn: rounded up to 4 KiB]
 *     each window: pread (O_DIRECT) into a pool chunk by a reader thread -> CRC of each
 *     range's part -> async host-to-device copy of each range's part -> event recorded.
 *     Up to FIO_MAX_INFLIGHT windows are in the ring: while the calling thread sums and
 *     queues the copies of window k, up to FIO_READERS threads read windows k+1.. (NVMe wants
 *     more than one request outstanding; one 8 MiB read at a time left the queue mostly
 *     idle between reads). A chunk goes back to the pool only once its event says the copy
 *     is done, and every read in flight ends before any chunk goes back.
 *
 * safetensors data is only 8-byte aligned, so windows start at the 4 KiB boundary below the
 * extent and bytes are placed at their offset inside the chunk.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "common/fdio.h"
#include "common/log.h"
#include "engine/fileio_stage.h"
#include "engine/pool.h"
#include "s3direct/checkpoint.h"

struct reader {
    struct s3d_device *dev;
    struct s3d_pool *pool;
    const char *path;
    const struct s3d_file_io_opts *o;
    int fd;             /* buffered */
    int fd_direct;      /* O_DIRECT, or -1 when refused or not wanted */
    int direct_refused; /* staged reads: O_DIRECT refused at read time, fd_direct unused */
    uint64_t size;
    uint64_t done, total;
    struct s3d_stream_set gpu;
};

/* Reads [off, off + len) into buf, O_DIRECT when rd has it (buf, off and len then aligned),
 * falling back to buffered reads if the file system refuses at read time. */
static int read_window(struct reader *rd, void *buf, uint64_t len, uint64_t off, uint64_t *got)
{
    int rc;
    if (rd->fd_direct >= 0) {
        rc = s3d_fileio_refuse_direct == 2 ? -EINVAL
                                           : s3d_pread_full(rd->fd_direct, buf, len, off, got);
        if (rc == 0)
            FIO_COUNT(rd->o, direct, *got);
        if (rc != -EINVAL)
            goto out;
        S3D_DEBUG("fileio: O_DIRECT read of %s refused, using buffered I/O", rd->path);
        close(rd->fd_direct);
        rd->fd_direct = -1;
    }
    rc = s3d_pread_full(rd->fd, buf, len, off, got);
    if (rc == 0)
        FIO_COUNT(rd->o, buffered, *got);
out:
    return rc < 0 ? fio_io_fail(-rc, "read", rd->path, off) : 0;
}

static int truncated(const struct reader *rd, uint64_t off, uint64_t need)
{
    return s3d_fail(S3D_EFMT_TRUNCATED,
                    "%s: file ends at byte %llu but a range needs bytes %llu..%llu", rd->path,
                    (unsigned long long)rd->size, (unsigned long long)off,
                    (unsigned long long)(off + need));
}

static int read_host_range(struct reader *rd, const struct s3d_file_range *r)
{
    uint32_t crc = 0;
    uint64_t pos = 0;
    int rc;
    while (pos < r->length) {
        uint64_t step = S3D_MIN(r->length - pos, FIO_HOST_PIECE), got;
        unsigned char *dst = (unsigned char *)r->dst + pos;
        rc = s3d_pread_full(rd->fd, dst, step, r->file_offset + pos, &got);
        if (rc < 0)
            return fio_io_fail(-rc, "read", rd->path, r->file_offset + pos + got);
        if (got < step)
            return truncated(rd, r->file_offset + pos + got, step - got);
        if (r->crc_out != NULL)
            crc = s3d_crc32c(crc, dst, (size_t)step);
        FIO_COUNT(rd->o, buffered, step);
        pos += step;
        rd->done += step;
        if ((rc = fio_check_cancel(rd->o, rd->done, rd->total)) < 0)
            return rc;
    }
    if (r->crc_out != NULL)
        *r->crc_out = crc;
    return 0;
}

/* mode DIRECT into host memory: O_DIRECT for the 4 KiB-aligned middle when the destination
 * has the same alignment as the file offset, buffered edges. Otherwise buffered. */
static int read_host_range_direct(struct reader *rd, const struct s3d_file_range *r)
{
    uint64_t a = (r->file_offset + FIO_BLK - 1) & ~(FIO_BLK - 1);
    uint64_t b = (r->file_offset + r->length) & ~(FIO_BLK - 1);
    if (rd->fd_direct < 0 || r->length < (1u << 20) ||
        ((uintptr_t)r->dst & (FIO_BLK - 1)) != (r->file_offset & (FIO_BLK - 1)) || b <= a)
        return read_host_range(rd, r);
    uint32_t crc = 0;
    int rc;
    struct s3d_file_range part[3] = {
        {r->file_offset, a - r->file_offset, r->dst, -1, NULL},
        {a, b - a, (char *)r->dst + (a - r->file_offset), -1, NULL},
        {b, r->file_offset + r->length - b, (char *)r->dst + (b - r->file_offset), -1, NULL},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t pc = 0;
        part[i].crc_out = r->crc_out ? &pc : NULL;
        if (i != 1 || rd->fd_direct < 0) {
            rc = read_host_range(rd, &part[i]);
        } else {
            uint64_t pos = 0;
            rc = 0;
            while (pos < part[1].length && rc == 0) {
                uint64_t step = S3D_MIN(part[1].length - pos, FIO_HOST_PIECE), got;
                unsigned char *dst = (unsigned char *)part[1].dst + pos;
                rc = read_window(rd, dst, step, a + pos, &got);
                if (rc == 0 && got < step)
                    rc = truncated(rd, a + pos + got, step - got);
                if (rc == 0 && r->crc_out)
                    pc = s3d_crc32c(pc, dst, (size_t)step);
                pos += step;
                rd->done += step;
                if (rc == 0)
                    rc = fio_check_cancel(rd->o, rd->done, rd->total);
            }
        }
        if (rc < 0)
            return rc;
        if (r->crc_out != NULL)
            crc = s3d_crc32c_combine(crc, pc, part[i].length);
    }
    if (r->crc_out != NULL)
        *r->crc_out = crc;
    return 0;
}

static int cmp_by_offset(const void *a, const void *b, void *ctx)
{
    const struct s3d_file_range *r = ctx;
    uint64_t x = r[*(const size_t *)a].file_offset, y = r[*(const size_t *)b].file_offset;
    return x < y ? -1 : x > y;
}

/* The windows of the staged path, in file order: each extent (ranges closer than
 * FIO_MERGE_GAP) cut into chunk-sized windows, 4 KiB-aligned when direct. */
struct win_iter {
    const struct s3d_file_range *ranges;
    const size_t *idx;
    size_t m, i, j; /* the extent being cut: ranges idx[i..j) */
    uint64_t pos, ext_end, chunk;
    int active, direct;
};

/* The next window into slot s (file_off, len, seg, seg_end, ext_end); 0 when none is left. */
static int next_window(struct win_iter *it, struct fio_slot *s)
{
    const struct s3d_file_range *r = it->ranges;
    while (!it->active) {
        if (it->i >= it->m)
            return 0;
        uint64_t ext_start = r[it->idx[it->i]].file_offset;
        it->ext_end = ext_start + r[it->idx[it->i]].length;
        it->j = it->i + 1;
        while (it->j < it->m && r[it->idx[it->j]].file_offset <= it->ext_end + FIO_MERGE_GAP) {
            it->ext_end =
                S3D_MAX(it->ext_end, r[it->idx[it->j]].file_offset + r[it->idx[it->j]].length);
            it->j++;
        }
        if (it->ext_end == ext_start) { /* zero-length ranges only */
            it->i = it->j;
            continue;
        }
        it->pos = it->direct ? ext_start & ~(FIO_BLK - 1) : ext_start;
        it->active = 1;
    }
    if (s == NULL)
        return 1;
    uint64_t want = it->ext_end - it->pos;
    if (it->direct)
        want = (want + FIO_BLK - 1) & ~(FIO_BLK - 1);
    s->file_off = it->pos;
    s->len = S3D_MIN(want, it->chunk);
    s->seg = it->i;
    s->seg_end = it->j;
    s->ext_end = it->ext_end;
    it->pos += s->len;
    if (it->pos >= it->ext_end) {
        it->active = 0;
        it->i = it->j;
    }
    return 1;
}

/* Fills slot s with the next window and hands its pread to the readers. */
static void submit_window(struct reader *rd, struct win_iter *it, struct fio_readers *rs,
                          struct fio_slot *s)
{
    next_window(it, s);
    s->job.fd = rd->fd_direct >= 0 && !rd->direct_refused ? rd->fd_direct : rd->fd;
    s->job.buf = s->chunk;
    s->job.len = s->len;
    s->job.off = s->file_off;
    fio_readers_submit(rs, &s->job);
}

/* A window whose pread is done: checks it (a refused O_DIRECT read is read again buffered),
 * sums each range's part and queues its copies, one event per stream after them. *k is the
 * first range of the extent that may still need bytes. */
static int copy_window(struct reader *rd, const struct s3d_file_range *ranges, const size_t *idx,
                       struct fio_ring *ring, struct fio_slot *s, size_t *k, uint32_t *crc)
{
    const uint64_t pos = s->file_off;
    uint64_t got = s->job.got;
    int rc = s->job.rc;
    int direct = rd->fd_direct >= 0 && s->job.fd == rd->fd_direct; /* which path read it */
    if (direct && (rc == -EINVAL || s3d_fileio_refuse_direct == 2)) {
        /* Refused at read time: this and every later window buffered. The descriptor stays
         * open until the end of the call: reads in flight may still use it. */
        S3D_DEBUG("fileio: O_DIRECT read of %s refused, using buffered I/O", rd->path);
        rd->direct_refused = 1;
        direct = 0;
        rc = s3d_pread_full(rd->fd, s->chunk, s->len, pos, &got);
    }
    if (rc < 0)
        return fio_io_fail(-rc, "read", rd->path, pos + got);
    /* Bytes of this window that belong to the extent must all be there. */
    const uint64_t valid = S3D_MIN(s->len, s->ext_end - pos);
    if (got < valid)
        return truncated(rd, pos + got, valid - got);
    const uint64_t wend = pos + valid;
    unsigned char used[S3D_MAX_DEVICES] = {0};
    for (size_t q = *k; q < s->seg_end; q++) {
        const struct s3d_file_range *r = &ranges[idx[q]];
        if (r->file_offset >= wend)
            break;
        uint64_t a = S3D_MAX(r->file_offset, pos);
        uint64_t b = S3D_MIN(r->file_offset + r->length, wend);
        if (a >= b)
            continue;
        const unsigned char *src = (const unsigned char *)s->chunk + (a - pos);
        struct s3d_stream *st;
        if (r->crc_out != NULL)
            crc[q] = s3d_crc32c(crc[q], src, (size_t)(b - a));
        if ((rc = s3d_stream_set_get(&rd->gpu, r->device, &st)) < 0)
            return rc;
        rc = s3d_device_copy_htod(rd->dev, st, (uint64_t)(uintptr_t)r->dst + (a - r->file_offset),
                                  src, (size_t)(b - a));
        if (rc < 0)
            return rc;
        used[r->device] = 1;
        rd->done += b - a;
        if (direct)
            FIO_COUNT(rd->o, direct, b - a);
        else
            FIO_COUNT(rd->o, buffered, b - a);
    }
    for (int o = 0; o < S3D_MAX_DEVICES; o++)
        if (used[o] && (rc = fio_slot_record(ring, s, o, rd->gpu.stream[o])) < 0)
            return rc;
    while (*k < s->seg_end && ranges[idx[*k]].file_offset + ranges[idx[*k]].length <= wend)
        (*k)++;
    return 0;
}

/* Staged path for the device ranges idx[0..m), sorted by file offset.
 *
 * The ring holds, oldest first, windows whose copies are queued and then windows being read
 * (the newest `reading` slots). Each turn: as many new windows as the ring and the pool allow
 * go to the reader threads; the oldest window read is summed and copied; copies seen complete
 * give their chunks back. So up to FIO_READERS preads run while the GPU copies. */
static int read_staged(struct reader *rd, const struct s3d_file_range *ranges, const size_t *idx,
                       size_t m)
{
    struct fio_ring ring;
    struct fio_readers rs;
    struct win_iter it = {
        ranges, idx, m, 0, 0, 0, 0, s3d_pool_chunk_size(rd->pool), 0, rd->fd_direct >= 0};
    uint32_t *crc = NULL;
    size_t reading = 0, k = 0, k_ext = (size_t)-1;
    int rc = 0;

    crc = calloc(m ? m : 1, sizeof(*crc));
    if (crc == NULL)
        return s3d_fail(S3D_ENOMEM, "read %s: out of memory", rd->path);
    fio_ring_init(&ring, rd->dev, rd->pool);
    /* One reader per chunk the ring may hold beyond the one being copied; none for a ring of
     * one (the reads then run on this thread). */
    fio_readers_start(&rs, ring.max > 1 ? (int)ring.max - 1 : 0);

    for (;;) {
        struct fio_slot *s;
        while (next_window(&it, NULL) && fio_ring_try_push(&ring, &s)) {
            submit_window(rd, &it, &rs, s);
            reading++;
        }
        if (reading == 0) {
            if (!next_window(&it, NULL))
                break;
            /* Ring full of copies, or the pool empty: wait for room (every slot is a copy). */
            if ((rc = fio_ring_next(&ring, rd->o->cancel, NULL, NULL, &s)) < 0)
                goto out;
            submit_window(rd, &it, &rs, s);
            reading++;
        }
        s = &ring.s[(ring.head + ring.count - reading) % FIO_MAX_INFLIGHT];
        fio_readers_wait(&rs, &s->job);
        reading--;
        if (s->seg != k_ext) { /* the first window of its extent */
            k_ext = s->seg;
            k = s->seg;
        }
        if ((rc = copy_window(rd, ranges, idx, &ring, s, &k, crc)) < 0)
            goto out;
        if ((rc = fio_check_cancel(rd->o, rd->done, rd->total)) < 0)
            goto out;
        /* Copies already done give their chunks back, without waiting. */
        while (ring.count > reading) {
            if ((rc = fio_slot_query(&ring, fio_ring_oldest(&ring), 0)) < 0)
                goto out;
            if (rc == 0)
                break;
            fio_ring_pop(&ring);
        }
        rc = 0;
    }
    /* Every copy must be complete before the caller may use the tensors. */
    while (ring.count > 0 && rc == 0) {
        rc = fio_slot_query(&ring, fio_ring_oldest(&ring), 1);
        if (rc >= 0) {
            rc = 0;
            fio_ring_pop(&ring);
        }
    }
    if (rc == 0)
        rc = s3d_stream_set_sync(&rd->gpu);
    if (rc == 0)
        for (size_t q = 0; q < m; q++)
            if (ranges[idx[q]].crc_out != NULL)
                *ranges[idx[q]].crc_out = crc[q];
out:
    /* Reads in flight write into chunks of the ring: they end before the chunks go back. */
    fio_readers_stop(&rs);
    if (rc < 0) /* copies queued before a failure may read chunks; rc is what is reported */
        s3d_ignore_rc(s3d_stream_set_sync(&rd->gpu));
    fio_ring_drain(&ring);
    free(crc);
    return rc;
}

/* cuFile path; 1 when cuFile cannot be used here and AUTO should fall back. */
static int read_cufile(struct reader *rd, const struct s3d_file_range *ranges, const size_t *idx,
                       size_t m)
{
    struct s3d_cufile *cf = NULL;
    const uint64_t done_before = rd->done;
    uint64_t moved = 0; /* counted once all is read: a fallback reads it all again */
    int rc;

    /* Registered in the context of the first destination's device (never GPU 0's by
     * default: the helper threads Python calls on have no current context). */
    rc = s3d_cufile_open(rd->dev, ranges[idx[0]].device,
                         rd->fd_direct >= 0 ? rd->fd_direct : rd->fd, &cf);
    if (rc < 0) {
        if (rd->o->mode == S3D_FILE_IO_AUTO) {
            S3D_INFO("fileio: cuFile refused %s (%s), using O_DIRECT", rd->path,
                     s3d_last_error_message());
            s3d_clear_error();
            return 1;
        }
        return s3d_fail_prefix(rc == S3D_ENOTSUP ? S3D_ECUFILE : rc, "read %s", rd->path);
    }
    if (rd->o->mode == S3D_FILE_IO_AUTO && s3d_cufile_file_mode(cf) == S3D_CUFILE_MODE_COMPAT) {
        /* Registered, but cuFile would only copy through its own bounce buffers. */
        S3D_DEBUG("fileio: cuFile serves %s in compatibility mode only, using O_DIRECT", rd->path);
        s3d_cufile_close(cf);
        return 1;
    }
    S3D_DEBUG("fileio: %s read by cuFile, mode %s (%s)", rd->path,
              s3d_cufile_mode_name(s3d_cufile_file_mode(cf)), s3d_cufile_file_why(cf));
    /* cuFile does not follow stream order: the caller's work on each destination device
     * (kernels still reading the memory) must be finished before the first read. */
    for (size_t q = 0; q < m && rc == 0; q++) {
        struct s3d_stream *st;
        const int dv = ranges[idx[q]].device;
        if (ranges[idx[q]].length == 0 || (dv < S3D_MAX_DEVICES && rd->gpu.stream[dv] != NULL))
            continue;
        if ((rc = s3d_stream_set_get(&rd->gpu, dv, &st)) == 0)
            rc = s3d_device_stream_sync(rd->dev, st);
    }
    for (size_t q = 0; q < m && rc == 0; q++) {
        const struct s3d_file_range *r = &ranges[idx[q]];
        uint64_t got = 0;
        if (r->length == 0) {
            if (r->crc_out != NULL)
                *r->crc_out = 0;
            continue;
        }
        const struct fio_cufile_io io = {
            rd->dev,       rd->pool,       &rd->gpu,  cf,
            rd->o->cancel, r->device,      0,         (uint64_t)(uintptr_t)r->dst,
            r->length,     r->file_offset, r->crc_out};
        int io_failed = 0;
        rc = fio_cufile_crc_io(&io, &got, &io_failed);
        if (rc < 0 && io_failed && rd->o->mode == S3D_FILE_IO_AUTO) {
            /* A run-time cuFile failure is not the load's: the staged path reads it all. */
            S3D_WARN("fileio: cuFileRead of %s failed (%s), reading through the staging pool",
                     rd->path, s3d_last_error_message());
            s3d_clear_error();
            rd->done = done_before;
            rc = 1;
            break;
        }
        if (rc < 0) {
            rc = s3d_fail_prefix(rc, "read %s", rd->path);
            break;
        }
        if (got < r->length) {
            rc = truncated(rd, r->file_offset + got, r->length - got);
            break;
        }
        rd->done += r->length;
        moved += r->length;
        if ((rc = fio_check_cancel(rd->o, rd->done, rd->total)) < 0)
            break;
    }
    if (rc == 0)
        FIO_COUNT(rd->o, cufile, moved);
    s3d_cufile_close(cf);
    return rc;
}

int s3d_file_read_ranges(struct s3d_device *dev, struct s3d_pool *pool, const char *path,
                         const struct s3d_file_range *ranges, size_t n,
                         const struct s3d_file_io_opts *opts)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc;
    if (fd < 0)
        return s3d_fail(s3d_err_from_errno(errno), "open %s: %s", path, strerror(errno));
    rc = s3d_file_read_ranges_fd(dev, pool, fd, path, ranges, n, opts);
    close(fd);
    return rc;
}

int s3d_file_read_ranges_fd(struct s3d_device *dev, struct s3d_pool *pool, int fd, const char *path,
                            const struct s3d_file_range *ranges, size_t n,
                            const struct s3d_file_io_opts *opts)
{
    static const struct s3d_file_io_opts defaults;
    struct reader rd;
    struct stat st;
    size_t *idx = NULL, m = 0;
    int rc = 0;

    memset(&rd, 0, sizeof(rd));
    rd.dev = dev;
    rd.pool = pool;
    rd.path = path;
    rd.o = opts != NULL ? opts : &defaults;
    rd.fd = rd.fd_direct = -1;
    /* Copies into device memory wait for the caller's stream. */
    s3d_stream_set_init(&rd.gpu, dev);
    s3d_stream_set_wait_caller(&rd.gpu, rd.o->cuda_stream, rd.o->cuda_streams,
                               rd.o->n_cuda_streams);
    const int mode = rd.o->mode;
    if (mode < S3D_FILE_IO_AUTO || mode > S3D_FILE_IO_BUFFERED)
        return s3d_fail(S3D_EINVAL, "read %s: unknown file I/O mode %d", path, mode);

    rd.fd = fd;
    if (fstat(rd.fd, &st) != 0) {
        rc = s3d_fail(s3d_err_from_errno(errno), "stat %s: %s", path, strerror(errno));
        goto out;
    }
    rd.size = (uint64_t)st.st_size;
    for (size_t i = 0; i < n; i++) {
        uint64_t end;
        if (s3d_add_u64(ranges[i].file_offset, ranges[i].length, &end) < 0 || end > rd.size) {
            rc = truncated(&rd, ranges[i].file_offset, ranges[i].length);
            goto out;
        }
        if (ranges[i].device >= 0) {
            m++;
            if (pool == NULL) {
                rc = s3d_fail(S3D_EINVAL, "read %s: a GPU destination needs a staging pool", path);
                goto out;
            }
        }
        rd.total += ranges[i].length;
    }
    if (mode != S3D_FILE_IO_BUFFERED)
        rd.fd_direct = fio_reopen_direct(rd.fd, path);

    /* Host destinations first: they need nothing from the GPU. */
    for (size_t i = 0; i < n; i++) {
        if (ranges[i].device >= 0)
            continue;
        rc = mode == S3D_FILE_IO_DIRECT ? read_host_range_direct(&rd, &ranges[i])
                                        : read_host_range(&rd, &ranges[i]);
        if (rc < 0)
            goto out;
    }
    if (m == 0)
        goto out;
    idx = calloc(m, sizeof(*idx));
    if (idx == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "read %s: out of memory", path);
        goto out;
    }
    for (size_t i = 0, k = 0; i < n; i++)
        if (ranges[i].device >= 0)
            idx[k++] = i;
    qsort_r(idx, m, sizeof(*idx), cmp_by_offset, (void *)ranges);

    rc = 1;
    /* AUTO: nvidia-fs first, so that cuFile is not even opened where it would not be used;
     * its driver opens in the first destination's device's context. */
    if (mode == S3D_FILE_IO_CUFILE || (mode == S3D_FILE_IO_AUTO && s3d_cufile_gds() &&
                                       s3d_cufile_available(dev, ranges[idx[0]].device, NULL)))
        rc = read_cufile(&rd, ranges, idx, m);
    if (rc == 1)
        rc = read_staged(&rd, ranges, idx, m);
out:
    s3d_stream_set_free(&rd.gpu);
    if (rd.fd_direct >= 0)
        close(rd.fd_direct);
    free(idx);
    return rc;
}

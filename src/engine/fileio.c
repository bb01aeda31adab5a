/* fileio.c - local file reads and writes for the tensor pipeline (see fileio.h for the paths
 * taken).
 *
 * Staged reads into GPU memory:
 *
 *   ranges (sorted by file offset, grouped into extents when less than MERGE_GAP apart)
 *     file: ....[ext_start ...................................... ext_end)....
 *   windows:  [w0: chunk bytes, 4 KiB-aligned start][w1]......[wn: rounded up to 4 KiB]
 *     each window: pread (O_DIRECT) into a pool chunk -> CRC of each range's part -> async
 *     host-to-device copy of each range's part -> event recorded; while the GPU copies
 *     window k, the CPU reads window k+1. A chunk goes back to the pool only once its event
 *     says the copy is done. Up to MAX_INFLIGHT windows are in flight.
 *
 * safetensors data is only 8-byte aligned, so windows start at the 4 KiB boundary below the
 * extent and bytes are placed at their offset inside the chunk. The reads are synchronous on
 * the calling thread: one 8 MiB O_DIRECT read is split by the block layer into many requests
 * in parallel, and the copy engine overlaps with it, so a thread set or io_uring would add
 * complexity for little (measure before changing: bench/ numbers in the report).
 *
 * Staged writes from GPU memory mirror this: device-to-host copy into a chunk, event, then
 * CRC and pwrite of the oldest chunk whose copy is done. */
#include "engine/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "common/log.h"
#include "device/device.h"
#include "engine/pool.h"
#include "s3direct/checkpoint.h"

#define BLK 4096ull
#define MERGE_GAP (64ull << 10)   /* read through gaps smaller than this */
#define HOST_PIECE (8ull << 20)   /* host reads/writes: CRC summed per piece, in cache */
#define MAX_INFLIGHT 4
#define MAX_ORDINALS 16

/* ---- shared helpers ------------------------------------------------------------------- */

static int io_fail(int e, const char *what, const char *path, uint64_t off)
{
    return s3d_fail(s3d_err_from_errno(e), "%s %s at offset %llu: %s", what, path,
                    (unsigned long long)off, strerror(e));
}

static int check_cancel(const struct s3d_file_io_opts *o, uint64_t done, uint64_t total)
{
    if (o->cancel != NULL && s3d_cancel_requested(o->cancel))
        return s3d_fail(S3D_ECANCELED, "canceled");
    if (o->progress != NULL && o->progress(o->progress_user, done, total) != 0)
        return s3d_fail(S3D_ECANCELED, "canceled by the progress callback");
    return 0;
}

/* pread until len bytes or end of file; *got = bytes read. */
static int pread_full(int fd, void *buf, uint64_t len, uint64_t off, uint64_t *got)
{
    uint64_t done = 0;
    *got = 0;
    while (done < len) {
        size_t step = (size_t)S3D_MIN(len - done, 1ull << 30);
        ssize_t r = pread(fd, (char *)buf + done, step, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            *got = done;
            return -errno;
        }
        if (r == 0)
            break;
        done += (uint64_t)r;
    }
    *got = done;
    return 0;
}

static int pwrite_full(int fd, const void *buf, uint64_t len, uint64_t off)
{
    uint64_t done = 0;
    while (done < len) {
        size_t step = (size_t)S3D_MIN(len - done, 1ull << 30);
        ssize_t r = pwrite(fd, (const char *)buf + done, step, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -EIO;
        done += (uint64_t)r;
    }
    return 0;
}

/* Per-call GPU resources: one stream per device ordinal used, created on first use. */
struct gpu_set {
    struct s3d_device *dev;
    struct s3d_stream *stream[MAX_ORDINALS];
};

static int gpu_stream(struct gpu_set *g, int ordinal, struct s3d_stream **out)
{
    int rc;
    if (ordinal < 0 || ordinal >= MAX_ORDINALS)
        return s3d_fail(S3D_ENODEVICE, "GPU device %d: out of range", ordinal);
    if (g->stream[ordinal] == NULL) {
        rc = s3d_device_stream_new(g->dev, ordinal, &g->stream[ordinal]);
        if (rc < 0)
            return rc;
    }
    *out = g->stream[ordinal];
    return 0;
}

/* Waits for every copy queued on the set's streams (errors ignored: used on failure paths,
 * before staging chunks go back to the pool). */
static void gpu_set_sync(struct gpu_set *g)
{
    for (int i = 0; i < MAX_ORDINALS; i++)
        if (g->stream[i] != NULL)
            s3d_device_stream_sync(g->dev, g->stream[i]);
}

static void gpu_set_free(struct gpu_set *g)
{
    for (int i = 0; i < MAX_ORDINALS; i++) {
        s3d_device_stream_free(g->dev, g->stream[i]); /* waits for the stream's copies */
        g->stream[i] = NULL;
    }
}

/* A chunk in flight with the events recorded after its copies, one per device used. */
struct slot {
    void *chunk;
    struct s3d_event *ev[MAX_ORDINALS];
    unsigned char recorded[MAX_ORDINALS];
    /* writes: where the chunk's bytes go once copied */
    uint64_t file_off, len;
    size_t seg;
};

struct slot_ring {
    struct s3d_device *dev;
    struct s3d_pool *pool;
    struct slot s[MAX_INFLIGHT];
    size_t head, count, max;
};

static void ring_init(struct slot_ring *r, struct s3d_device *dev, struct s3d_pool *pool)
{
    memset(r, 0, sizeof(*r));
    r->dev = dev;
    r->pool = pool;
    r->max = S3D_MIN((size_t)MAX_INFLIGHT, s3d_pool_chunk_count(pool));
}

/* 1 when every event of slot s is complete, 0 if not, < 0 on error. */
static int slot_query(struct slot_ring *r, struct slot *s, int block)
{
    for (int o = 0; o < MAX_ORDINALS; o++) {
        if (!s->recorded[o])
            continue;
        int rc = block ? s3d_device_event_sync(r->dev, s->ev[o])
                       : s3d_device_event_query(r->dev, s->ev[o]);
        if (rc < 0)
            return rc;
        if (!block && rc == 0)
            return 0;
        s->recorded[o] = 0;
    }
    return 1;
}

static struct slot *ring_oldest(struct slot_ring *r)
{
    return r->count ? &r->s[r->head] : NULL;
}

static void ring_pop(struct slot_ring *r)
{
    struct slot *s = &r->s[r->head];
    s3d_pool_put(r->pool, s->chunk);
    s->chunk = NULL;
    r->head = (r->head + 1) % MAX_INFLIGHT;
    r->count--;
}

/* On every exit path: waits for whatever copy may still use a chunk, then returns the
 * chunks and frees the events. */
static void ring_drain(struct slot_ring *r)
{
    while (r->count > 0) {
        slot_query(r, ring_oldest(r), 1);
        ring_pop(r);
    }
    for (int i = 0; i < MAX_INFLIGHT; i++)
        for (int o = 0; o < MAX_ORDINALS; o++) {
            s3d_device_event_free(r->dev, r->s[i].ev[o]);
            r->s[i].ev[o] = NULL;
        }
}

/* The slot to fill next, with a chunk. For reads (on_done NULL) completed slots are simply
 * released; for writes on_done consumes the oldest slot's bytes first. */
typedef int (*slot_done_fn)(void *ctx, struct slot *s);

static int ring_next(struct slot_ring *r, struct s3d_cancel *cancel, slot_done_fn on_done,
                     void *ctx, struct slot **out)
{
    void *chunk = NULL;
    int rc;

    for (;;) {
        /* Release what already finished, without waiting. */
        while (r->count > 0) {
            rc = slot_query(r, ring_oldest(r), 0);
            if (rc < 0)
                return rc;
            if (rc == 0)
                break;
            if (on_done != NULL && (rc = on_done(ctx, ring_oldest(r))) < 0)
                return rc;
            ring_pop(r);
        }
        if (r->count < r->max && (chunk = s3d_pool_try_get(r->pool)) != NULL)
            break;
        if (r->count > 0) {
            /* Full, or the pool is empty: wait for our oldest copy. */
            if ((rc = slot_query(r, ring_oldest(r), 1)) < 0)
                return rc;
            if (on_done != NULL && (rc = on_done(ctx, ring_oldest(r))) < 0)
                return rc;
            ring_pop(r);
            continue;
        }
        /* Nothing of ours in flight and other users hold every chunk: wait for one. */
        chunk = s3d_pool_get(r->pool, cancel);
        if (chunk == NULL)
            return s3d_fail(S3D_ECANCELED, "canceled while waiting for a staging buffer");
        break;
    }
    struct slot *s = &r->s[(r->head + r->count) % MAX_INFLIGHT];
    s->chunk = chunk;
    memset(s->recorded, 0, sizeof(s->recorded));
    r->count++;
    *out = s;
    return 0;
}

static int slot_record(struct slot_ring *r, struct slot *s, int ordinal,
                       struct s3d_stream *stream)
{
    int rc;
    if (s->ev[ordinal] == NULL &&
        (rc = s3d_device_event_new(r->dev, ordinal, &s->ev[ordinal])) < 0)
        return rc;
    if ((rc = s3d_device_event_record(r->dev, s->ev[ordinal], stream)) < 0)
        return rc;
    s->recorded[ordinal] = 1;
    return 0;
}

/* ---- reads ------------------------------------------------------------------------------ */

struct reader {
    struct s3d_device *dev;
    struct s3d_pool *pool;
    const char *path;
    const struct s3d_file_io_opts *o;
    int fd;        /* buffered */
    int fd_direct; /* O_DIRECT, or -1 when refused or not wanted */
    uint64_t size;
    uint64_t done, total;
    struct gpu_set gpu;
};

int s3d_fileio_refuse_direct;

static int open_direct(const char *path, int flags)
{
    int fd;
    if (s3d_fileio_refuse_direct == 1) {
        errno = EINVAL;
        return -1;
    }
    fd = open(path, flags | O_DIRECT | O_CLOEXEC);
    if (fd < 0 && errno == EINVAL)
        S3D_DEBUG("fileio: %s refuses O_DIRECT, using buffered I/O", path);
    return fd;
}

/* Reads [off, off + len) into buf, O_DIRECT when rd has it (buf, off and len then aligned),
 * falling back to buffered reads if the file system refuses at read time. */
static int read_window(struct reader *rd, void *buf, uint64_t len, uint64_t off, uint64_t *got)
{
    int rc;
    if (rd->fd_direct >= 0) {
        rc = s3d_fileio_refuse_direct == 2 ? -EINVAL
                                           : pread_full(rd->fd_direct, buf, len, off, got);
        if (rc != -EINVAL)
            goto out;
        S3D_DEBUG("fileio: O_DIRECT read of %s refused, using buffered I/O", rd->path);
        close(rd->fd_direct);
        rd->fd_direct = -1;
    }
    rc = pread_full(rd->fd, buf, len, off, got);
out:
    return rc < 0 ? io_fail(-rc, "read", rd->path, off) : 0;
}

static int truncated(const struct reader *rd, uint64_t off, uint64_t need)
{
    return s3d_fail(S3D_EFMT_TRUNCATED,
                    "%s: file ends at byte %llu but a range needs bytes %llu..%llu",
                    rd->path, (unsigned long long)rd->size, (unsigned long long)off,
                    (unsigned long long)(off + need));
}

static int read_host_range(struct reader *rd, const struct s3d_file_range *r)
{
    uint32_t crc = 0;
    uint64_t pos = 0;
    int rc;
    while (pos < r->length) {
        uint64_t step = S3D_MIN(r->length - pos, HOST_PIECE), got;
        unsigned char *dst = (unsigned char *)r->dst + pos;
        rc = pread_full(rd->fd, dst, step, r->file_offset + pos, &got);
        if (rc < 0)
            return io_fail(-rc, "read", rd->path, r->file_offset + pos + got);
        if (got < step)
            return truncated(rd, r->file_offset + pos + got, step - got);
        if (r->crc_out != NULL)
            crc = s3d_crc32c(crc, dst, (size_t)step);
        pos += step;
        rd->done += step;
        if ((rc = check_cancel(rd->o, rd->done, rd->total)) < 0)
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
    uint64_t a = (r->file_offset + BLK - 1) & ~(BLK - 1);
    uint64_t b = (r->file_offset + r->length) & ~(BLK - 1);
    if (rd->fd_direct < 0 || r->length < (1u << 20) ||
        ((uintptr_t)r->dst & (BLK - 1)) != (r->file_offset & (BLK - 1)) || b <= a)
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
                uint64_t step = S3D_MIN(part[1].length - pos, HOST_PIECE), got;
                unsigned char *dst = (unsigned char *)part[1].dst + pos;
                rc = read_window(rd, dst, step, a + pos, &got);
                if (rc == 0 && got < step)
                    rc = truncated(rd, a + pos + got, step - got);
                if (rc == 0 && r->crc_out)
                    pc = s3d_crc32c(pc, dst, (size_t)step);
                pos += step;
                rd->done += step;
                if (rc == 0)
                    rc = check_cancel(rd->o, rd->done, rd->total);
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

/* Staged path for the device ranges idx[0..m), sorted by file offset. */
static int read_staged(struct reader *rd, const struct s3d_file_range *ranges,
                       const size_t *idx, size_t m)
{
    struct slot_ring ring;
    uint32_t *crc = NULL;
    const uint64_t chunk = s3d_pool_chunk_size(rd->pool);
    int rc = 0;

    ring_init(&ring, rd->dev, rd->pool);
    crc = calloc(m ? m : 1, sizeof(*crc));
    if (crc == NULL)
        return s3d_fail(S3D_ENOMEM, "read %s: out of memory", rd->path);

    for (size_t i = 0; i < m && rc == 0;) {
        /* One extent: ranges i..j-1. */
        uint64_t ext_start = ranges[idx[i]].file_offset;
        uint64_t ext_end = ext_start + ranges[idx[i]].length;
        size_t j = i + 1;
        while (j < m && ranges[idx[j]].file_offset <= ext_end + MERGE_GAP) {
            ext_end = S3D_MAX(ext_end, ranges[idx[j]].file_offset + ranges[idx[j]].length);
            j++;
        }
        if (ext_end == ext_start) { /* zero-length ranges only */
            i = j;
            continue;
        }
        const int direct = rd->fd_direct >= 0;
        uint64_t pos = direct ? ext_start & ~(BLK - 1) : ext_start;
        size_t k = i; /* first range of the extent that may still need bytes */
        while (pos < ext_end) {
            uint64_t want = ext_end - pos, win, got;
            struct slot *s;
            if (direct)
                want = (want + BLK - 1) & ~(BLK - 1);
            win = S3D_MIN(want, chunk);
            if ((rc = ring_next(&ring, rd->o->cancel, NULL, NULL, &s)) < 0)
                goto out;
            if ((rc = read_window(rd, s->chunk, win, pos, &got)) < 0)
                goto out;
            /* Bytes of this window that belong to the extent must all be there. */
            uint64_t valid = S3D_MIN(win, ext_end - pos);
            if (got < valid) {
                rc = truncated(rd, pos + got, valid - got);
                goto out;
            }
            uint64_t wend = pos + valid;
            unsigned char used[MAX_ORDINALS] = {0};
            for (size_t q = k; q < j; q++) {
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
                if ((rc = gpu_stream(&rd->gpu, r->device, &st)) < 0)
                    goto out;
                rc = s3d_device_copy_htod(rd->dev, st,
                                          (uint64_t)(uintptr_t)r->dst + (a - r->file_offset),
                                          src, (size_t)(b - a));
                if (rc < 0)
                    goto out;
                used[r->device] = 1;
                rd->done += b - a;
            }
            /* One event per stream used, after the window's last copy on it. */
            for (int o = 0; o < MAX_ORDINALS; o++)
                if (used[o] && (rc = slot_record(&ring, s, o, rd->gpu.stream[o])) < 0)
                    goto out;
            while (k < j && ranges[idx[k]].file_offset + ranges[idx[k]].length <= wend)
                k++;
            pos += win;
            if ((rc = check_cancel(rd->o, rd->done, rd->total)) < 0)
                goto out;
        }
        i = j;
    }
    /* Every copy must be complete before the caller may use the tensors. */
    while (ring.count > 0 && rc == 0) {
        rc = slot_query(&ring, ring_oldest(&ring), 1);
        if (rc >= 0) {
            rc = 0;
            ring_pop(&ring);
        }
    }
    for (int o = 0; o < MAX_ORDINALS && rc == 0; o++)
        if (rd->gpu.stream[o] != NULL)
            rc = s3d_device_stream_sync(rd->dev, rd->gpu.stream[o]);
    if (rc == 0)
        for (size_t q = 0; q < m; q++)
            if (ranges[idx[q]].crc_out != NULL)
                *ranges[idx[q]].crc_out = crc[q];
out:
    if (rc < 0)
        gpu_set_sync(&rd->gpu); /* copies queued before a failure may still read chunks */
    ring_drain(&ring);
    free(crc);
    return rc;
}

/* CRC of device memory: copied back through pool chunks (the cuFile path). */
static int crc_of_device(struct s3d_device *dev, struct s3d_pool *pool, struct gpu_set *g,
                         int ordinal, uint64_t dptr, uint64_t len, struct s3d_cancel *cancel,
                         uint32_t *out)
{
    struct s3d_stream *st;
    uint32_t crc = 0;
    int rc = gpu_stream(g, ordinal, &st);
    if (rc < 0)
        return rc;
    void *chunk = s3d_pool_get(pool, cancel);
    if (chunk == NULL)
        return s3d_fail(S3D_ECANCELED, "canceled while waiting for a staging buffer");
    for (uint64_t pos = 0; pos < len && rc == 0; pos += s3d_pool_chunk_size(pool)) {
        size_t step = (size_t)S3D_MIN(len - pos, s3d_pool_chunk_size(pool));
        rc = s3d_device_copy_dtoh(dev, st, chunk, dptr + pos, step);
        if (rc == 0)
            rc = s3d_device_stream_sync(dev, st);
        if (rc == 0)
            crc = s3d_crc32c(crc, chunk, step);
    }
    s3d_pool_put(pool, chunk);
    if (rc == 0)
        *out = crc;
    return rc;
}

/* cuFile path; 1 when cuFile cannot be used here and AUTO should fall back. */
static int read_cufile(struct reader *rd, const struct s3d_file_range *ranges, const size_t *idx,
                       size_t m)
{
    struct s3d_cufile *cf = NULL;
    int rc;

    rc = s3d_cufile_open(rd->dev, rd->fd_direct >= 0 ? rd->fd_direct : rd->fd, &cf);
    if (rc < 0) {
        if (rd->o->mode == S3D_FILE_IO_AUTO) {
            S3D_INFO("fileio: cuFile refused %s (%s), using O_DIRECT", rd->path,
                     s3d_last_error_message());
            s3d_clear_error();
            return 1;
        }
        return s3d_fail_prefix(rc == S3D_ENOTSUP ? S3D_ECUFILE : rc, "read %s", rd->path);
    }
    for (size_t q = 0; q < m; q++) {
        const struct s3d_file_range *r = &ranges[idx[q]];
        uint64_t got = 0;
        if (r->length == 0) {
            if (r->crc_out != NULL)
                *r->crc_out = 0;
            continue;
        }
        rc = s3d_cufile_read(cf, r->device, (uint64_t)(uintptr_t)r->dst, r->length,
                             r->file_offset, &got);
        if (rc < 0) {
            rc = s3d_fail_prefix(rc, "read %s", rd->path);
            break;
        }
        if (got < r->length) {
            rc = truncated(rd, r->file_offset + got, r->length - got);
            break;
        }
        if (r->crc_out != NULL &&
            (rc = crc_of_device(rd->dev, rd->pool, &rd->gpu, r->device,
                                (uint64_t)(uintptr_t)r->dst, r->length, rd->o->cancel,
                                r->crc_out)) < 0)
            break;
        rd->done += r->length;
        if ((rc = check_cancel(rd->o, rd->done, rd->total)) < 0)
            break;
    }
    s3d_cufile_close(cf);
    return rc;
}

int s3d_file_read_ranges(struct s3d_device *dev, struct s3d_pool *pool, const char *path,
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
    rd.gpu.dev = dev;
    const int mode = rd.o->mode;
    if (mode < S3D_FILE_IO_AUTO || mode > S3D_FILE_IO_BUFFERED)
        return s3d_fail(S3D_EINVAL, "read %s: unknown file I/O mode %d", path, mode);

    rd.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (rd.fd < 0)
        return s3d_fail(s3d_err_from_errno(errno), "open %s: %s", path, strerror(errno));
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
                rc = s3d_fail(S3D_EINVAL, "read %s: a GPU destination needs a staging pool",
                              path);
                goto out;
            }
        }
        rd.total += ranges[i].length;
    }
    if (mode != S3D_FILE_IO_BUFFERED)
        rd.fd_direct = open_direct(path, O_RDONLY);

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
    if (mode == S3D_FILE_IO_CUFILE ||
        (mode == S3D_FILE_IO_AUTO && s3d_cufile_available(dev, NULL)))
        rc = read_cufile(&rd, ranges, idx, m);
    if (rc == 1)
        rc = read_staged(&rd, ranges, idx, m);
out:
    gpu_set_free(&rd.gpu);
    if (rd.fd_direct >= 0)
        close(rd.fd_direct);
    close(rd.fd);
    free(idx);
    return rc;
}

/* ---- writes ---------------------------------------------------------------------------- */

struct s3d_file_writer {
    struct s3d_device *dev;
    struct s3d_pool *pool;
    struct s3d_file_io_opts o;
    char *path;
    char *tmp_path;
    int fd;
    int fd_direct;             /* for cuFile: opened on first use */
    struct s3d_cufile *cf;
    int cufile_state;          /* 0 not tried, 1 in use, -1 not used */
    int committed;
    uint64_t written;          /* for progress */
    struct gpu_set gpu;
    /* the segment CRCs of the write in progress */
    uint32_t *crc_out;
};

const char *s3d_file_writer_tmp_path(const struct s3d_file_writer *w)
{
    return w->tmp_path;
}

int s3d_file_writer_open(struct s3d_device *dev, struct s3d_pool *pool, const char *path,
                         const struct s3d_file_io_opts *opts, struct s3d_file_writer **out)
{
    struct s3d_file_writer *w;
    char *dir = NULL, *base = NULL;
    int rc;

    *out = NULL;
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return s3d_fail(S3D_ENOMEM, "write %s: out of memory", path);
    w->dev = dev;
    w->pool = pool;
    w->fd = w->fd_direct = -1;
    w->gpu.dev = dev;
    if (opts != NULL)
        w->o = *opts;
    if (w->o.mode < S3D_FILE_IO_AUTO || w->o.mode > S3D_FILE_IO_BUFFERED) {
        rc = s3d_fail(S3D_EINVAL, "write %s: unknown file I/O mode %d", path, w->o.mode);
        goto fail;
    }
    w->path = strdup(path);
    dir = strdup(path);
    base = strdup(path);
    if (w->path == NULL || dir == NULL || base == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "write %s: out of memory", path);
        goto fail;
    }
    /* dirname/basename may modify their argument: each gets its own copy. */
    const char *d = dirname(dir), *b = basename(base);
    size_t len = strlen(d) + strlen(b) + 32;
    w->tmp_path = malloc(len);
    if (w->tmp_path == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "write %s: out of memory", path);
        goto fail;
    }
    snprintf(w->tmp_path, len, "%s/.%s.XXXXXX.tmp", d, b);
    w->fd = mkstemps(w->tmp_path, 4);
    if (w->fd < 0) {
        rc = s3d_fail(s3d_err_from_errno(errno), "create a temporary file for %s: %s", path,
                      strerror(errno));
        w->tmp_path[0] = '\0';
        goto fail;
    }
    /* mkstemp makes 0600; a checkpoint is an ordinary file. */
    if (fchmod(w->fd, 0644) != 0)
        S3D_WARN("fileio: chmod %s: %s", w->tmp_path, strerror(errno));
    free(dir);
    free(base);
    *out = w;
    return 0;
fail:
    free(dir);
    free(base);
    s3d_file_writer_free(w);
    return rc;
}

/* cuFile for device segments? Decided once per writer. 1 yes, 0 no, < 0 error (CUFILE). */
static int writer_cufile(struct s3d_file_writer *w)
{
    int rc;
    if (w->cufile_state != 0)
        return w->cufile_state > 0;
    w->cufile_state = -1;
    if (w->o.mode == S3D_FILE_IO_DIRECT || w->o.mode == S3D_FILE_IO_BUFFERED)
        return 0;
    if (w->o.mode == S3D_FILE_IO_AUTO && !s3d_cufile_available(w->dev, NULL))
        return 0;
    w->fd_direct = open_direct(w->tmp_path, O_WRONLY);
    rc = s3d_cufile_open(w->dev, w->fd_direct >= 0 ? w->fd_direct : w->fd, &w->cf);
    if (rc < 0) {
        if (w->o.mode == S3D_FILE_IO_AUTO) {
            S3D_INFO("fileio: cuFile refused %s (%s), writing through the staging pool",
                     w->path, s3d_last_error_message());
            s3d_clear_error();
            return 0;
        }
        return s3d_fail_prefix(rc == S3D_ENOTSUP ? S3D_ECUFILE : rc, "write %s", w->path);
    }
    w->cufile_state = 1;
    return 1;
}

static int write_host_seg(struct s3d_file_writer *w, const struct s3d_file_seg *sg,
                          uint64_t off, uint32_t *crc)
{
    int rc;
    for (uint64_t pos = 0; pos < sg->length;) {
        uint64_t step = S3D_MIN(sg->length - pos, HOST_PIECE);
        const unsigned char *src = (const unsigned char *)sg->src + pos;
        if (crc != NULL)
            *crc = s3d_crc32c(*crc, src, (size_t)step);
        if ((rc = pwrite_full(w->fd, src, step, off + pos)) < 0)
            return io_fail(-rc, "write", w->tmp_path, off + pos);
        pos += step;
        w->written += step;
        if ((rc = check_cancel(&w->o, w->written, w->o.progress_total)) < 0)
            return rc;
    }
    return 0;
}

/* A chunk's device-to-host copy is done: sum and write its bytes. */
static int write_slot_done(void *ctx, struct slot *s)
{
    struct s3d_file_writer *w = ctx;
    int rc;
    if (w->crc_out != NULL)
        w->crc_out[s->seg] = s3d_crc32c(w->crc_out[s->seg], s->chunk, (size_t)s->len);
    if ((rc = pwrite_full(w->fd, s->chunk, s->len, s->file_off)) < 0)
        return io_fail(-rc, "write", w->tmp_path, s->file_off);
    w->written += s->len;
    return check_cancel(&w->o, w->written, w->o.progress_total);
}

int s3d_file_writer_write(struct s3d_file_writer *w, uint64_t offset,
                          const struct s3d_file_seg *segs, size_t n, uint32_t *crc_out)
{
    struct slot_ring ring;
    unsigned char waited[MAX_ORDINALS] = {0};
    uint64_t off = offset;
    int rc = 0, have_ring = 0;

    if (w->committed || w->fd < 0)
        return s3d_fail(S3D_EINVAL, "write %s: writer already committed or aborted", w->path);
    if (crc_out != NULL)
        memset(crc_out, 0, n * sizeof(*crc_out));
    w->crc_out = crc_out;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const struct s3d_file_seg *sg = &segs[i];
        if (sg->device < 0) {
            rc = write_host_seg(w, sg, off, crc_out ? &crc_out[i] : NULL);
            off += sg->length;
            continue;
        }
        if (sg->length == 0)
            continue;
        struct s3d_stream *st;
        if ((rc = gpu_stream(&w->gpu, sg->device, &st)) < 0)
            break;
        /* The kernels that produce the tensors may still run on the caller's stream. */
        if (!waited[sg->device]) {
            if ((rc = s3d_device_wait_external(w->dev, st, w->o.cuda_stream)) < 0)
                break;
            waited[sg->device] = 1;
        }
        if ((rc = writer_cufile(w)) < 0)
            break;
        if (rc == 1) {
            /* cuFile does not follow stream order: finish the producers first. */
            if ((rc = s3d_device_stream_sync(w->dev, st)) < 0)
                break;
            rc = s3d_cufile_write(w->cf, sg->device, (uint64_t)(uintptr_t)sg->src, sg->length,
                                  off);
            if (rc < 0) {
                rc = s3d_fail_prefix(rc, "write %s", w->path);
                break;
            }
            if (crc_out != NULL &&
                (rc = crc_of_device(w->dev, w->pool, &w->gpu, sg->device,
                                    (uint64_t)(uintptr_t)sg->src, sg->length, w->o.cancel,
                                    &crc_out[i])) < 0)
                break;
            w->written += sg->length;
            off += sg->length;
            rc = check_cancel(&w->o, w->written, w->o.progress_total);
            continue;
        }
        if (w->pool == NULL) {
            rc = s3d_fail(S3D_EINVAL, "write %s: a GPU source needs a staging pool", w->path);
            break;
        }
        if (!have_ring) {
            ring_init(&ring, w->dev, w->pool);
            have_ring = 1;
        }
        const uint64_t chunk = s3d_pool_chunk_size(w->pool);
        for (uint64_t pos = 0; pos < sg->length;) {
            uint64_t step = S3D_MIN(sg->length - pos, chunk);
            struct slot *s;
            if ((rc = ring_next(&ring, w->o.cancel, write_slot_done, w, &s)) < 0)
                goto out;
            s->file_off = off + pos;
            s->len = step;
            s->seg = i;
            if ((rc = s3d_device_copy_dtoh(w->dev, st, s->chunk,
                                           (uint64_t)(uintptr_t)sg->src + pos,
                                           (size_t)step)) < 0)
                goto out;
            if ((rc = slot_record(&ring, s, sg->device, st)) < 0)
                goto out;
            pos += step;
        }
        off += sg->length;
    }
out:
    if (have_ring && rc < 0)
        gpu_set_sync(&w->gpu);
    if (have_ring) {
        /* Write what is still in flight, oldest first, so CRCs chain in order. */
        while (rc == 0 && ring.count > 0) {
            rc = slot_query(&ring, ring_oldest(&ring), 1);
            if (rc >= 0)
                rc = write_slot_done(w, ring_oldest(&ring));
            if (rc >= 0) {
                rc = 0;
                ring_pop(&ring);
            }
        }
        ring_drain(&ring);
    }
    w->crc_out = NULL;
    return rc;
}

int s3d_file_writer_pwrite(struct s3d_file_writer *w, uint64_t offset, const void *buf,
                           size_t len)
{
    int rc;
    if (w->committed || w->fd < 0)
        return s3d_fail(S3D_EINVAL, "write %s: writer already committed or aborted", w->path);
    if ((rc = pwrite_full(w->fd, buf, len, offset)) < 0)
        return io_fail(-rc, "write", w->tmp_path, offset);
    return 0;
}

static void writer_close_fds(struct s3d_file_writer *w)
{
    s3d_cufile_close(w->cf);
    w->cf = NULL;
    if (w->fd_direct >= 0)
        close(w->fd_direct);
    w->fd_direct = -1;
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
}

int s3d_file_writer_commit(struct s3d_file_writer *w)
{
    char *dir = NULL;
    int dfd, rc = 0;

    if (w->committed || w->fd < 0)
        return s3d_fail(S3D_EINVAL, "commit %s: writer already committed or aborted", w->path);
    gpu_set_free(&w->gpu);
    if (fsync(w->fd) != 0) {
        rc = s3d_fail(s3d_err_from_errno(errno), "fsync %s: %s", w->tmp_path, strerror(errno));
        goto fail;
    }
    writer_close_fds(w);
    if (rename(w->tmp_path, w->path) != 0) {
        rc = s3d_fail(s3d_err_from_errno(errno), "rename %s to %s: %s", w->tmp_path, w->path,
                      strerror(errno));
        goto fail;
    }
    w->committed = 1;
    /* The rename is durable only once the folder is synced. */
    dir = strdup(w->path);
    if (dir == NULL)
        return s3d_fail(S3D_ENOMEM, "commit %s: out of memory", w->path);
    dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (fsync(dfd) != 0)
            rc = s3d_fail(s3d_err_from_errno(errno), "fsync folder of %s: %s", w->path,
                          strerror(errno));
        close(dfd);
    }
    free(dir);
    return rc;
fail:
    s3d_file_writer_abort(w);
    return rc;
}

void s3d_file_writer_abort(struct s3d_file_writer *w)
{
    if (w == NULL)
        return;
    gpu_set_free(&w->gpu);
    writer_close_fds(w);
    if (!w->committed && w->tmp_path != NULL && w->tmp_path[0] != '\0') {
        unlink(w->tmp_path);
        w->tmp_path[0] = '\0';
    }
}

void s3d_file_writer_free(struct s3d_file_writer *w)
{
    if (w == NULL)
        return;
    s3d_file_writer_abort(w);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

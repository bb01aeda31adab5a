/* fileio_write.c - the atomic file writer (fileio.h): host segments written from their memory,
 * device segments copied device -> pool chunks (after waiting for the caller's CUDA stream)
 * and written oldest first, or written by cuFile. The temporary file and its commit (fsync,
 * rename, fsync of the folder) are tmpfile.c's, as for downloads and the public file stream.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "common/fdio.h"
#include "common/log.h"
#include "engine/fileio_stage.h"
#include "engine/pool.h"
#include "engine/tmpfile.h"
#include "s3direct/checkpoint.h"

struct s3d_file_writer {
    struct s3d_device *dev;
    struct s3d_pool *pool;
    struct s3d_file_io_opts o;
    char *path;
    struct s3d_tmpfile tmp; /* tmp.fd: buffered writes; tmp.path NULL once committed or aborted */
    int fd_direct;          /* for cuFile: opened on first use */
    struct s3d_cufile *cf;
    int cufile_state; /* 0 not tried, 1 in use, -1 not used */
    int committed;
    uint64_t written; /* for progress */
    struct s3d_stream_set gpu;
    /* the segment CRCs of the write in progress */
    uint32_t *crc_out;
};

const char *s3d_file_writer_tmp_path(const struct s3d_file_writer *w)
{
    return w->tmp.path;
}

int s3d_file_writer_open(struct s3d_device *dev, struct s3d_pool *pool, const char *path,
                         const struct s3d_file_io_opts *opts, struct s3d_file_writer **out)
{
    struct s3d_file_writer *w;
    int rc;

    *out = NULL;
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return s3d_fail(S3D_ENOMEM, "write %s: out of memory", path);
    w->dev = dev;
    w->pool = pool;
    w->tmp.fd = w->fd_direct = -1;
    s3d_stream_set_init(&w->gpu, dev);
    if (opts != NULL)
        w->o = *opts;
    if (w->o.mode < S3D_FILE_IO_AUTO || w->o.mode > S3D_FILE_IO_BUFFERED) {
        rc = s3d_fail(S3D_EINVAL, "write %s: unknown file I/O mode %d", path, w->o.mode);
        goto fail;
    }
    w->path = strdup(path);
    if (w->path == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "write %s: out of memory", path);
        goto fail;
    }
    /* Beside the target (tmpfile.h: the name, the mode a new or overwritten file gets, and
     * the removal of leftovers of killed saves). */
    rc = s3d_tmpfile_create(path, 0, &w->tmp);
    if (rc < 0)
        goto fail;
    *out = w;
    return 0;
fail:
    s3d_file_writer_free(w);
    return rc;
}

/* cuFile for device segments? Decided once per writer, at its first device segment (on
 * device ordinal, whose context cuFile is set up in). 1 yes, 0 no, < 0 error (CUFILE). */
static int writer_cufile(struct s3d_file_writer *w, int ordinal)
{
    int rc;
    if (w->cufile_state != 0)
        return w->cufile_state > 0;
    w->cufile_state = -1;
    if (w->o.mode == S3D_FILE_IO_DIRECT || w->o.mode == S3D_FILE_IO_BUFFERED)
        return 0;
    /* AUTO: nvidia-fs first, so that cuFile is not even opened where it would not be used. */
    if (w->o.mode == S3D_FILE_IO_AUTO &&
        (!s3d_cufile_gds() || !s3d_cufile_available(w->dev, ordinal, NULL)))
        return 0;
    /* Read-write: GDS writes an unaligned head or tail as a read-modify-write of its 4 KiB
     * blocks through this descriptor. */
    w->fd_direct = fio_open_direct(w->tmp.path, O_RDWR);
    rc = s3d_cufile_open(w->dev, ordinal, w->fd_direct >= 0 ? w->fd_direct : w->tmp.fd, &w->cf);
    if (rc < 0) {
        if (w->o.mode == S3D_FILE_IO_AUTO) {
            S3D_INFO("fileio: cuFile refused %s (%s), writing through the staging pool", w->path,
                     s3d_last_error_message());
            s3d_clear_error();
            return 0;
        }
        return s3d_fail_prefix(rc == S3D_ENOTSUP ? S3D_ECUFILE : rc, "write %s", w->path);
    }
    if (w->o.mode == S3D_FILE_IO_AUTO && s3d_cufile_file_mode(w->cf) == S3D_CUFILE_MODE_COMPAT) {
        /* Registered, but cuFile would only copy through its own bounce buffers. */
        S3D_DEBUG("fileio: cuFile serves %s in compatibility mode only (%s), writing through "
                  "the staging pool",
                  w->path, s3d_cufile_file_why(w->cf));
        s3d_cufile_close(w->cf);
        w->cf = NULL;
        return 0;
    }
    S3D_DEBUG("fileio: %s written by cuFile, mode %s (%s)", w->path,
              s3d_cufile_mode_name(s3d_cufile_file_mode(w->cf)), s3d_cufile_file_why(w->cf));
    w->cufile_state = 1;
    return 1;
}

static int write_host_seg(struct s3d_file_writer *w, const struct s3d_file_seg *sg, uint64_t off,
                          uint32_t *crc)
{
    int rc;
    for (uint64_t pos = 0; pos < sg->length;) {
        uint64_t step = S3D_MIN(sg->length - pos, FIO_HOST_PIECE);
        const unsigned char *src = (const unsigned char *)sg->src + pos;
        if (crc != NULL)
            *crc = s3d_crc32c(*crc, src, (size_t)step);
        if ((rc = s3d_pwrite_full(w->tmp.fd, src, step, off + pos)) < 0)
            return fio_io_fail(-rc, "write", w->tmp.path, off + pos);
        FIO_COUNT(&w->o, buffered, step);
        pos += step;
        w->written += step;
        if ((rc = fio_check_cancel(&w->o, w->written, w->o.progress_total)) < 0)
            return rc;
    }
    return 0;
}

/* A chunk's device-to-host copy is done: sum and write its bytes. */
static int write_slot_done(void *ctx, struct fio_slot *s)
{
    struct s3d_file_writer *w = ctx;
    int rc;
    if (w->crc_out != NULL)
        w->crc_out[s->seg] = s3d_crc32c(w->crc_out[s->seg], s->chunk, (size_t)s->len);
    if ((rc = s3d_pwrite_full(w->tmp.fd, s->chunk, s->len, s->file_off)) < 0)
        return fio_io_fail(-rc, "write", w->tmp.path, s->file_off);
    FIO_COUNT(&w->o, buffered, s->len);
    w->written += s->len;
    return fio_check_cancel(&w->o, w->written, w->o.progress_total);
}

int s3d_file_writer_write(struct s3d_file_writer *w, uint64_t offset,
                          const struct s3d_file_seg *segs, size_t n, uint32_t *crc_out)
{
    struct fio_ring ring;
    uint64_t off = offset;
    int rc = 0, have_ring = 0;

    if (w->committed || w->tmp.fd < 0)
        return s3d_fail(S3D_EINVAL, "write %s: writer already committed or aborted", w->path);
    if (crc_out != NULL)
        memset(crc_out, 0, n * sizeof(*crc_out));
    w->crc_out = crc_out;
    /* The kernels that produce the tensors may still run on the caller's stream: each write
     * waits for them again, before its first copy from a device. */
    s3d_stream_set_wait_caller(&w->gpu, w->o.cuda_stream, w->o.cuda_streams, w->o.n_cuda_streams);
    s3d_stream_set_wait_events(&w->gpu, w->o.cuda_events, w->o.n_cuda_events);
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
        if ((rc = s3d_stream_set_get(&w->gpu, sg->device, &st)) < 0)
            break;
        if ((rc = writer_cufile(w, sg->device)) < 0)
            break;
        int via_cufile = rc == 1;
        if (via_cufile) {
            /* cuFile does not follow stream order: finish the producers first. */
            if ((rc = s3d_device_stream_sync(w->dev, st)) < 0)
                break;
            const struct fio_cufile_io io = {w->dev,
                                             w->pool,
                                             &w->gpu,
                                             w->cf,
                                             w->o.cancel,
                                             sg->device,
                                             1,
                                             (uint64_t)(uintptr_t)sg->src,
                                             sg->length,
                                             off,
                                             crc_out ? &crc_out[i] : NULL};
            uint64_t moved;
            int io_failed = 0;
            rc = fio_cufile_crc_io(&io, &moved, &io_failed);
            if (rc < 0 && io_failed && w->o.mode == S3D_FILE_IO_AUTO) {
                /* A run-time cuFile failure is not the save's: this segment and the rest go
                 * through the staging pool (rewriting whatever cuFile wrote). */
                S3D_WARN("fileio: cuFileWrite of %s failed (%s), writing through the staging "
                         "pool",
                         w->path, s3d_last_error_message());
                s3d_clear_error();
                w->cufile_state = -1;
                via_cufile = 0;
                rc = 0;
                if (crc_out != NULL)
                    crc_out[i] = 0;
            } else if (rc < 0) {
                rc = s3d_fail_prefix(rc, "write %s", w->path);
                break;
            }
        }
        if (via_cufile) {
            FIO_COUNT(&w->o, cufile, sg->length);
            w->written += sg->length;
            off += sg->length;
            rc = fio_check_cancel(&w->o, w->written, w->o.progress_total);
            continue;
        }
        if (w->pool == NULL) {
            rc = s3d_fail(S3D_EINVAL, "write %s: a GPU source needs a staging pool", w->path);
            break;
        }
        if (!have_ring) {
            fio_ring_init(&ring, w->dev, w->pool);
            have_ring = 1;
        }
        const uint64_t chunk = s3d_pool_chunk_size(w->pool);
        for (uint64_t pos = 0; pos < sg->length;) {
            uint64_t step = S3D_MIN(sg->length - pos, chunk);
            struct fio_slot *s;
            if ((rc = fio_ring_next(&ring, w->o.cancel, write_slot_done, w, &s)) < 0)
                goto out;
            s->file_off = off + pos;
            s->len = step;
            s->seg = i;
            if ((rc = s3d_device_copy_dtoh(w->dev, st, s->chunk, (uint64_t)(uintptr_t)sg->src + pos,
                                           (size_t)step)) < 0)
                goto out;
            if ((rc = fio_slot_record(&ring, s, sg->device, st)) < 0)
                goto out;
            pos += step;
        }
        off += sg->length;
    }
out:
    if (have_ring && rc < 0) /* the copies before the failure; rc is what is reported */
        s3d_ignore_rc(s3d_stream_set_sync(&w->gpu));
    if (have_ring) {
        /* Write what is still in flight, oldest first, so CRCs chain in order. */
        while (rc == 0 && ring.count > 0) {
            rc = fio_slot_query(&ring, fio_ring_oldest(&ring), 1);
            if (rc >= 0)
                rc = write_slot_done(w, fio_ring_oldest(&ring));
            if (rc >= 0) {
                rc = 0;
                fio_ring_pop(&ring);
            }
        }
        fio_ring_drain(&ring);
    }
    w->crc_out = NULL;
    return rc;
}

int s3d_file_writer_pwrite(struct s3d_file_writer *w, uint64_t offset, const void *buf, size_t len)
{
    int rc;
    if (w->committed || w->tmp.fd < 0)
        return s3d_fail(S3D_EINVAL, "write %s: writer already committed or aborted", w->path);
    if ((rc = s3d_pwrite_full(w->tmp.fd, buf, len, offset)) < 0)
        return fio_io_fail(-rc, "write", w->tmp.path, offset);
    return 0;
}

/* Plain reads and writes through a buffer, where copy_file_range cannot copy. */
static int copy_by_hand(struct s3d_file_writer *w, uint64_t offset, int src_fd, uint64_t src_off,
                        uint64_t len)
{
    size_t cap = (size_t)S3D_MIN(len, (uint64_t)4 << 20);
    char *buf = malloc(cap ? cap : 1);
    int rc = 0;
    if (buf == NULL)
        return s3d_fail(S3D_ENOMEM, "write %s: out of memory", w->path);
    while (rc == 0 && len > 0) {
        uint64_t n = S3D_MIN(len, (uint64_t)cap), got = 0;
        rc = s3d_pread_full(src_fd, buf, n, src_off, &got);
        if (rc < 0) {
            rc = fio_io_fail(-rc, "read the base of", w->path, src_off);
        } else if (got != n) {
            rc = s3d_fail(S3D_EIO, "write %s: the base ends at %llu", w->path,
                          (unsigned long long)(src_off + got));
        } else if ((rc = s3d_pwrite_full(w->tmp.fd, buf, n, offset)) < 0) {
            rc = fio_io_fail(-rc, "write", w->tmp.path, offset);
        }
        offset += n;
        src_off += n;
        len -= n;
    }
    free(buf);
    return rc;
}

int s3d_file_writer_copy(struct s3d_file_writer *w, uint64_t offset, int src_fd, uint64_t src_off,
                         uint64_t len, uint32_t *crc)
{
    loff_t in = (loff_t)src_off, out = (loff_t)offset;
    uint64_t left = len, at = offset;
    char *buf = NULL;
    int rc = 0;

    if (w->committed || w->tmp.fd < 0)
        return s3d_fail(S3D_EINVAL, "write %s: writer already committed or aborted", w->path);
    while (left > 0) {
        ssize_t n = copy_file_range(src_fd, &in, w->tmp.fd, &out,
                                    (size_t)S3D_MIN(left, (uint64_t)1 << 30), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP ||
                      errno == EBADF)) {
            rc = copy_by_hand(w, (uint64_t)out, src_fd, (uint64_t)in, left);
            break;
        }
        if (n < 0)
            return fio_io_fail(errno, "copy into", w->tmp.path, (uint64_t)out);
        if (n == 0)
            return s3d_fail(S3D_EIO, "write %s: the base ends at %llu", w->path,
                            (unsigned long long)in);
        left -= (uint64_t)n;
    }
    if (rc < 0)
        return rc;
    /* What the new file holds now, read back: the copy is kept only if it is the bytes the
     * caller saves (the base may have been changed in place since its header was read). */
    *crc = 0;
    buf = malloc((size_t)S3D_MIN(len, (uint64_t)4 << 20) + 1);
    if (buf == NULL)
        return s3d_fail(S3D_ENOMEM, "write %s: out of memory", w->path);
    left = len;
    while (rc == 0 && left > 0) {
        uint64_t n = S3D_MIN(left, (uint64_t)4 << 20), got = 0;
        rc = s3d_pread_full(w->tmp.fd, buf, n, at, &got);
        if (rc < 0)
            rc = fio_io_fail(-rc, "read back", w->tmp.path, at);
        else if (got != n)
            rc = s3d_fail(S3D_EIO, "write %s: %llu bytes copied, fewer read back", w->path,
                          (unsigned long long)len);
        else
            *crc = s3d_crc32c(*crc, buf, (size_t)n);
        at += n;
        left -= n;
    }
    free(buf);
    return rc;
}

/* cuFile's handle and the O_DIRECT descriptor; the temporary file's own stays with w->tmp. */
static void writer_close_direct(struct s3d_file_writer *w)
{
    s3d_cufile_close(w->cf);
    w->cf = NULL;
    if (w->fd_direct >= 0)
        close(w->fd_direct);
    w->fd_direct = -1;
}

int s3d_file_writer_commit(struct s3d_file_writer *w)
{
    int rc;

    if (w->committed || w->tmp.fd < 0)
        return s3d_fail(S3D_EINVAL, "commit %s: writer already committed or aborted", w->path);
    s3d_stream_set_free(&w->gpu);
    writer_close_direct(w);
    /* On failure tmpfile_commit has removed the temporary file; path is as it was. */
    rc = s3d_tmpfile_commit(&w->tmp, w->path);
    w->committed = rc == 0;
    return rc;
}

void s3d_file_writer_abort(struct s3d_file_writer *w)
{
    if (w == NULL)
        return;
    s3d_stream_set_free(&w->gpu);
    writer_close_direct(w);
    s3d_tmpfile_discard(&w->tmp);
}

void s3d_file_writer_free(struct s3d_file_writer *w)
{
    if (w == NULL)
        return;
    s3d_file_writer_abort(w);
    free(w->path);
    free(w);
}

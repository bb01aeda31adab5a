/* fileio.h - local file reads and writes for the tensor pipeline (checkpoint reader and
 * writer on local paths): byte ranges of a file into host or GPU memory, and segments of host
 * or GPU memory into a file that appears atomically.
 *
 * Paths taken (mode is enum s3d_file_io from s3direct/checkpoint.h):
 *   read, host destination: pread straight into the destination (no staging), in pieces
 *     whose CRC is summed while they are still in cache.
 *   read, device destination: cuFile straight into GPU memory when mode is CUFILE, or AUTO
 *     with nvidia-fs (s3d_cufile_gds(), asked first) and s3d_cufile_available(); a
 *     requested CRC is then computed by a second pass that copies the bytes back device ->
 *     pool chunk (the CRC is never skipped). Otherwise the
 *     ranges are read in 4 KiB-aligned windows with O_DIRECT into staging-pool chunks
 *     (over-reading to block edges; adjacent ranges share windows), their CRC summed in the
 *     chunk, and copied host -> device asynchronously while the next window is read (up to 4
 *     chunks in flight). A file system that refuses O_DIRECT (EINVAL: tmpfs) or mode
 *     BUFFERED reads the same windows with buffered pread.
 *   write: host segments are written from their memory; device segments are copied device
 *     -> pool chunks (after waiting for the caller's CUDA stream) and written from there, up
 *     to 4 chunks in flight; or written with cuFileWrite when mode is CUFILE, or AUTO and
 *     cuFile is available. Writes go through the page cache; commit fsyncs.
 * CUFILE mode fails with S3D_ECUFILE when cuFile is not available (the reason in the message)
 * or refuses a file it cannot reach directly (its compatibility mode is off: cufile_dl.c).
 *
 * Errors name the path and the offset: S3D_ENOENT / S3D_EACCESS / S3D_EIO from the OS,
 * S3D_EFMT_TRUNCATED when the file is shorter than a range needs, S3D_ECANCELED.
 *
 * Threads: each call runs on the calling thread and returns when done; calls on different
 * files or writers may run on different threads at once (they share the pool, whose chunks
 * bound the memory). A writer is used by one thread at a time. */
#ifndef S3D_ENGINE_FILEIO_H
#define S3D_ENGINE_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "s3direct/client.h"
#include "common/compiler.h"

struct s3d_device;
struct s3d_pool;

/* Bytes by the path that moved them (s3d_read_stats, s3d_write_stats): range or segment
 * bytes only, counted where each path's I/O succeeded, added atomically (the shards of a save
 * write on several threads into one). */
struct s3d_file_io_counts {
    uint64_t cufile, direct, buffered;
};

/* Options shared by reads and writers. NULL means all defaults. */
struct s3d_file_io_opts {
    int32_t mode;             /* enum s3d_file_io; 0 = AUTO */
    s3d_progress_fn progress; /* may be NULL. Reads: bytes of ranges done / their sum.
                                 Writers: bytes written so far / progress_total */
    void *progress_user;
    struct s3d_cancel *cancel;    /* may be NULL */
    uint64_t progress_total;      /* writers: the total given to progress (0 = unknown) */
    uint64_t cuda_stream;         /* the caller's CUstream (0 = legacy default stream): copies
                                     from (writers) or into (reads, and cuFile reads after a
                                     synchronize) device memory wait for its work so far */
    const uint64_t *cuda_streams; /* per device ordinal; NULL or k >= n: cuda_stream */
    uint32_t n_cuda_streams;
    const uint64_t *cuda_events; /* writers: the caller's CUevents per device ordinal, waited
                                    for instead of the stream where set (k < n, non-zero):
                                    s3d_write_options.cuda_events. Reads ignore them */
    uint32_t n_cuda_events;
    struct s3d_file_io_counts *counts; /* NULL, or where the bytes of each path are added */
};

/* One byte range of the file and where it goes. */
struct s3d_file_range {
    uint64_t file_offset;
    uint64_t length;   /* 0 is allowed (nothing read; crc is 0) */
    void *dst;         /* host pointer, or CUdeviceptr when device >= 0 */
    int32_t device;    /* -1: host memory; >= 0: CUDA device ordinal */
    uint32_t *crc_out; /* if not NULL: CRC32C of the range's bytes */
};

/* Reads every range of the file at path into its destination. Ranges may come in any order
 * and may overlap in the file; destinations must not overlap. When it returns 0 every byte
 * is in place (copies to GPUs are complete) and every crc_out is set. The whole file size is
 * checked first: a range past the end fails with S3D_EFMT_TRUNCATED before any byte moves.
 * pool may be NULL when no range has a device destination and mode is not DIRECT. */
S3D_NODISCARD int s3d_file_read_ranges(struct s3d_device *dev, struct s3d_pool *pool,
                                       const char *path, const struct s3d_file_range *ranges,
                                       size_t n, const struct s3d_file_io_opts *opts);

/* The same on fd, a descriptor the caller opened (read-only or read-write) and keeps: every
 * byte comes from the file fd is open on, even when path has since been replaced or removed
 * (the checkpoint reader keeps the descriptor it parsed the header from). O_DIRECT reads use
 * a second descriptor onto the same file (fio_reopen_direct), never the path. path names the
 * file in messages only. fd stays open. */
S3D_NODISCARD int s3d_file_read_ranges_fd(struct s3d_device *dev, struct s3d_pool *pool, int fd,
                                          const char *path, const struct s3d_file_range *ranges,
                                          size_t n, const struct s3d_file_io_opts *opts);

/* One piece of memory to write. */
struct s3d_file_seg {
    const void *src; /* host pointer, or CUdeviceptr when device >= 0 */
    uint64_t length;
    int32_t device; /* -1: host memory; >= 0: CUDA device ordinal */
};

struct s3d_file_writer;

/* Creates a temporary file ".NAME.s3d-tmp-PID-RAND" in path's folder (tmpfile.h: the name of
 * a long NAME, 0666 less the umask or the mode of the file it replaces, the lock, leftovers
 * of killed saves removed); path
 * itself is untouched until commit. opts is copied (NULL: defaults).
 * *out is NULL on failure. */
S3D_NODISCARD int s3d_file_writer_open(struct s3d_device *dev, struct s3d_pool *pool,
                                       const char *path, const struct s3d_file_io_opts *opts,
                                       struct s3d_file_writer **out);
/* Writes the segments one after the other starting at file offset offset. crc_out, if not
 * NULL, has n entries and receives each segment's CRC32C. Returns when the bytes are handed
 * to the kernel (or cuFile) and every source may be reused. */
S3D_NODISCARD int s3d_file_writer_write(struct s3d_file_writer *w, uint64_t offset,
                                        const struct s3d_file_seg *segs, size_t n,
                                        uint32_t *crc_out);
/* Writes len bytes of host memory at offset (the safetensors header, written last). */
S3D_NODISCARD int s3d_file_writer_pwrite(struct s3d_file_writer *w, uint64_t offset,
                                         const void *buf, size_t len);
/* Copies len bytes at src_off of the file src_fd to offset of the temporary file
 * (copy_file_range: a reflink where the file system shares blocks, XFS and btrfs; an
 * in-kernel copy elsewhere; reads and writes where it cannot), then reads them back and
 * stores their CRC-32C in *crc, for the caller to compare with the bytes it meant. */
S3D_NODISCARD int s3d_file_writer_copy(struct s3d_file_writer *w, uint64_t offset, int src_fd,
                                       uint64_t src_off, uint64_t len, uint32_t *crc);
/* Makes the file durable and visible: s3d_tmpfile_commit (fsync, rename over path, fsync of
 * the folder). After a commit that failed before the rename the previous file at path is
 * intact and the temporary file is removed. The writer must still be freed. */
S3D_NODISCARD int s3d_file_writer_commit(struct s3d_file_writer *w);
/* Removes the temporary file unless committed. Idempotent. */
void s3d_file_writer_abort(struct s3d_file_writer *w);
/* Aborts (if not committed) and frees. NULL ok. */
void s3d_file_writer_free(struct s3d_file_writer *w);
/* The temporary file's path (tests); NULL once committed or aborted. Owned by w. */
const char *s3d_file_writer_tmp_path(const struct s3d_file_writer *w);

/* Tests only: 1 makes O_DIRECT opens fail with EINVAL, 2 makes O_DIRECT reads fail with
 * EINVAL (as file systems without direct I/O do), to reach the buffered fallback. 0 in the
 * library. */
extern int s3d_fileio_refuse_direct;

#endif

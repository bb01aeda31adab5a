/* fileio_stage.h - internal to fileio_read.c and fileio_write.c: shared I/O helpers and the
 * ring of staging chunks in flight between the file and a GPU.
 *
 * A ring holds up to FIO_MAX_INFLIGHT slots, oldest first. A slot is one pool chunk plus the
 * events recorded after the copies that use it (one per device ordinal). A chunk returns to
 * the pool only once every event of its slot has completed, so no copy can still be reading
 * or writing it. Single-threaded: a ring belongs to the call that made it. */
#ifndef S3D_ENGINE_FILEIO_STAGE_H
#define S3D_ENGINE_FILEIO_STAGE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/compiler.h"
#include "device/device.h"
#include "engine/fileio.h"

#define FIO_BLK          4096ull       /* O_DIRECT alignment */
#define FIO_MERGE_GAP    (64ull << 10) /* reads go through gaps smaller than this */
#define FIO_HOST_PIECE   (8ull << 20)  /* host reads/writes: CRC summed per piece, in cache */
#define FIO_MAX_INFLIGHT 4
#define FIO_READERS      3 /* threads reading staged windows, so up to 3 preads at once */

/* Adds n bytes to the counter of o->counts that field names (cufile, direct, buffered). */
#define FIO_COUNT(o, field, n)                                                                     \
    do {                                                                                           \
        if ((o)->counts != NULL)                                                                   \
            __atomic_fetch_add(&(o)->counts->field, (uint64_t)(n), __ATOMIC_RELAXED);              \
    } while (0)

/* s3d_fail with the errno e naming what ("read", "write"), the path and the offset. */
int fio_io_fail(int e, const char *what, const char *path, uint64_t off);
/* S3D_ECANCELED when o's cancel token is set or its progress callback (called with done,
 * total) asks to stop; else 0. */
int fio_check_cancel(const struct s3d_file_io_opts *o, uint64_t done, uint64_t total);
/* open(path, flags | O_DIRECT); -1 with errno (EINVAL: the file system refuses). */
int fio_open_direct(const char *path, int flags);
/* A second descriptor, read-only with O_DIRECT, onto the very file fd is open on (through
 * /proc/self/fd, checked by device and inode), never onto whatever path names now: the file
 * may have been replaced by a rename since fd was opened. -1 with errno when not possible
 * (EINVAL: the file system refuses O_DIRECT; ESTALE: another file came back). path is for
 * messages. */
int fio_reopen_direct(int fd, const char *path);

/* One pread of a staged window, run by a reader thread (struct fio_readers). The submitter
 * sets fd, len, off (the buffer is the slot's chunk) and reads rc and got after
 * fio_readers_wait; state is under the readers' lock. */
struct fio_read_job {
    int fd;
    void *buf;
    uint64_t len, off;
    int state; /* 0 idle, 1 queued, 2 reading, 3 done */
    int rc;    /* 0 or -errno, as fio_pread_full */
    uint64_t got;
};

struct fio_slot {
    void *chunk;
    struct fio_read_job job; /* staged reads: the window read into chunk */
    struct s3d_event *ev[S3D_MAX_DEVICES];
    unsigned char recorded[S3D_MAX_DEVICES];
    /* writes: where the chunk's bytes go once copied, and their segment; staged reads: the
     * window [file_off, file_off + len) of the extent of ranges seg..seg_end-1 that ends at
     * ext_end */
    uint64_t file_off, len;
    size_t seg;
    size_t seg_end;
    uint64_t ext_end;
};

struct fio_ring {
    struct s3d_device *dev;
    struct s3d_pool *pool;
    struct fio_slot s[FIO_MAX_INFLIGHT];
    size_t head, count, max;
};

/* For writes: consumes a slot whose copy is done (its bytes are in the chunk). */
typedef int (*fio_slot_done_fn)(void *ctx, struct fio_slot *s);

void fio_ring_init(struct fio_ring *r, struct s3d_device *dev, struct s3d_pool *pool);
/* 1 when every event of s is complete, 0 if not (block = 0), < 0 on error. */
int fio_slot_query(struct fio_ring *r, struct fio_slot *s, int block);
/* The oldest slot in flight, or NULL. */
struct fio_slot *fio_ring_oldest(struct fio_ring *r);
/* Returns the oldest slot's chunk to the pool and drops the slot. */
void fio_ring_pop(struct fio_ring *r);
/* The next slot to fill, with a chunk: releases finished slots first (through on_done when
 * not NULL, oldest first), waits for the oldest when the ring is full or the pool empty, and
 * blocks on the pool when nothing of ours is in flight. S3D_ECANCELED on cancel. */
int fio_ring_next(struct fio_ring *r, struct s3d_cancel *cancel, fio_slot_done_fn on_done,
                  void *ctx, struct fio_slot **out);
/* Records slot s's event for ordinal on stream, after the copies queued there. */
int fio_slot_record(struct fio_ring *r, struct fio_slot *s, int ordinal, struct s3d_stream *stream);
/* Every exit path: waits for each slot's events, returns the chunks, frees the events. */
void fio_ring_drain(struct fio_ring *r);

/* Reader threads for staged reads: up to FIO_READERS preads of windows run at once while the
 * calling thread sums and queues the copies of the windows already read (the block layer
 * splits each 8 MiB O_DIRECT read, but one read at a time leaves NVMe queues mostly empty).
 * Locked part: every field but th and n, under mu; th and n belong to the caller. A job's
 * buffer belongs to the reader from submit until fio_readers_wait returns. */
struct fio_readers {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a job queued, started or done; stop */
    pthread_t th[FIO_READERS];
    int n; /* threads started: 0 means reads run in fio_readers_submit itself */
    struct fio_read_job *q[FIO_MAX_INFLIGHT];
    size_t q_head, q_count;
    int running, peak, stop, held;
};

/* Starts up to n (at most FIO_READERS) threads; fewer (none) if threads cannot be made, in
 * which case reads run synchronously. Never fails. */
void fio_readers_start(struct fio_readers *rs, int n);
/* Queues job (at most FIO_MAX_INFLIGHT queued at once). With no thread, reads it now. */
void fio_readers_submit(struct fio_readers *rs, struct fio_read_job *job);
/* Blocks until job, submitted before, is read; then job->rc and job->got are the result. */
void fio_readers_wait(struct fio_readers *rs, struct fio_read_job *job);
/* Drops the jobs not started, waits for those being read, joins the threads. Before the
 * chunks the jobs read into go back to the pool. */
void fio_readers_stop(struct fio_readers *rs);

/* Tests only. s3d_fileio_reads_peak: the most staged preads seen running at once since it
 * was last set to 0. s3d_fileio_read_hold = 1: the first pread of each staged read waits (up
 * to 2 s) until a second one runs, so that a test sees the overlap on a loaded machine (set
 * it only for reads of several windows: a read of one waits the 2 s). */
extern int s3d_fileio_reads_peak;
extern int s3d_fileio_read_hold;

/* A new slot with a chunk, without waiting: 1 and *out set, or 0 when the ring is full or
 * the pool has no free chunk. */
int fio_ring_try_push(struct fio_ring *r, struct fio_slot **out);

/* One cuFile transfer between device memory and a file, with the CRC32C of its bytes. */
struct fio_cufile_io {
    struct s3d_device *dev;
    struct s3d_pool *pool; /* for the copies back that the CRC is summed from */
    struct s3d_stream_set *g;
    struct s3d_cufile *cf;
    struct s3d_cancel *cancel;
    int ordinal, is_write;
    uint64_t dptr, len, file_off;
    uint32_t *crc_out; /* NULL: no CRC, the range moves in one cuFile call */
};

/* Reads (or writes) io's range with cuFile and, when io->crc_out is set, sums the bytes from
 * copies back through two pool chunks that overlap the cuFile I/O of the next piece (see
 * fileio_stage.c). *moved: bytes moved (a read stops early only at end of file; *crc_out is
 * then the CRC of those). *io_failed = 1 when the error is cuFile's own (mode AUTO falls back
 * to the staged path), 0 for any other (a copy back, cancel). Every copy into the chunks is
 * complete before they go back to the pool. */
S3D_NODISCARD int fio_cufile_crc_io(const struct fio_cufile_io *io, uint64_t *moved,
                                    int *io_failed);

#endif

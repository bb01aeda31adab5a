/* fileio_stage.h - internal to fileio_read.c and fileio_write.c: shared I/O helpers and the
 * ring of staging chunks in flight between the file and a GPU.
 *
 * A ring holds up to FIO_MAX_INFLIGHT slots, oldest first. A slot is one pool chunk plus the
 * events recorded after the copies that use it (one per device ordinal). A chunk returns to
 * the pool only once every event of its slot has completed, so no copy can still be reading
 * or writing it. Single-threaded: a ring belongs to the call that made it. */
#ifndef S3D_ENGINE_FILEIO_STAGE_H
#define S3D_ENGINE_FILEIO_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"
#include "engine/fileio.h"

#define FIO_BLK          4096ull       /* O_DIRECT alignment */
#define FIO_MERGE_GAP    (64ull << 10) /* reads go through gaps smaller than this */
#define FIO_HOST_PIECE   (8ull << 20)  /* host reads/writes: CRC summed per piece, in cache */
#define FIO_MAX_INFLIGHT 4

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

struct fio_slot {
    void *chunk;
    struct s3d_event *ev[S3D_MAX_DEVICES];
    unsigned char recorded[S3D_MAX_DEVICES];
    /* writes: where the chunk's bytes go once copied, and their segment */
    uint64_t file_off, len;
    size_t seg;
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

/* CRC32C of len bytes of device memory, copied back through one pool chunk (cuFile paths). */
int fio_crc_of_device(struct s3d_device *dev, struct s3d_pool *pool, struct s3d_stream_set *g,
                      int ordinal, uint64_t dptr, uint64_t len, struct s3d_cancel *cancel,
                      uint32_t *out);

#endif

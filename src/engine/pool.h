/* pool.h - the staging pool: a fixed set of fixed-size chunks of pinned host memory,
 * allocated once per client and reused by every transfer that passes through host memory
 * on its way to or from a GPU (and by file transfers that need aligned buffers).
 *
 * Host memory used by GPU loads and saves is bounded by the pool's size whatever the
 * checkpoint's size: a producer that finds no free chunk waits (or tries again later), it
 * never allocates.
 *
 * Chunks are aligned to 4096 bytes and their size is a multiple of 4096, so O_DIRECT reads
 * and writes can target them directly.
 *
 * Threads: every function is thread-safe. A chunk is owned by whoever got it until put back. */
#ifndef S3D_ENGINE_POOL_H
#define S3D_ENGINE_POOL_H

#include <stddef.h>
#include <stdint.h>
#include "common/compiler.h"

struct s3d_device;
struct s3d_cancel;
struct s3d_pool;

/* Also the client's defaults of staging_bytes and part_size (client_impl.h). */
#define S3D_POOL_DEFAULT_TOTAL (256u << 20)
#define S3D_POOL_DEFAULT_CHUNK (8u << 20)

/* Creates a pool of total_bytes / chunk_bytes chunks (at least 2) of chunk_bytes each,
 * carved out of a few large blocks from s3d_device_host_alloc (pinned when a GPU is there),
 * or of plain page-aligned memory when dev is NULL (no CUDA call at all; see s3d_pool_pin).
 * 0 in either size means its default; chunk_bytes is rounded up to a multiple of 4096.
 * dev must outlive the pool. Errors: S3D_ENOMEM, S3D_ECUDA, S3D_EINVAL (a chunk over 4 GiB).
 * *out is NULL on failure. */
S3D_NODISCARD int s3d_pool_new(struct s3d_device *dev, uint64_t total_bytes, uint64_t chunk_bytes,
                               struct s3d_pool **out);
/* Pins a pool made with dev NULL (plain memory, for host-only transfers) the first time a
 * device transfer needs it: cuMemHostRegister of each block in device ordinal's primary
 * context (retained by dev until s3d_device_free; dev must outlive the pool). Before that,
 * the blocks are made to prefer ordinal's NUMA node (s3d_device_numa_node), their pages
 * touched already moved there; a node unknown or refused is logged, never an error. No-op
 * when the pool is pinned already (a pool allocated pinned is not placed). Not thread-safe
 * against itself: the caller serializes (the client's lazy_lock). Chunks may be in use
 * meanwhile. */
S3D_NODISCARD int s3d_pool_pin(struct s3d_pool *pool, struct s3d_device *dev, int ordinal);
int s3d_pool_is_pinned(const struct s3d_pool *pool);
/* Frees the pool's memory. Every chunk must have been put back. NULL ok. */
void s3d_pool_free(struct s3d_pool *pool);

/* A free chunk (chunk_size bytes), or NULL when none is free. Never blocks. */
void *s3d_pool_try_get(struct s3d_pool *pool);
/* A free chunk, waiting for one to be put back if none is free. Returns NULL only when
 * cancel (may be NULL) is requested while waiting; the caller then reports S3D_ECANCELED. */
void *s3d_pool_get(struct s3d_pool *pool, struct s3d_cancel *cancel);
/* n chunks at once into out, all or none, so that callers needing several never hold some
 * while waiting for the rest (two such callers would wait for each other forever). Returns 0
 * when taken; 1 when !blocking and fewer than n are free; -1 when n exceeds the pool or
 * cancel (may be NULL) is requested while waiting. */
int s3d_pool_get_n(struct s3d_pool *pool, size_t n, void **out, int blocking,
                   struct s3d_cancel *cancel);
/* Gives a chunk back (any pointer inside it is accepted). NULL ok. Every device copy into or
 * out of it must be complete (s3d_device_host_released: the emulated device checks). */
void s3d_pool_put(struct s3d_pool *pool, void *chunk);

size_t s3d_pool_chunk_size(const struct s3d_pool *pool);
size_t s3d_pool_chunk_count(const struct s3d_pool *pool);
/* Chunks free right now (a snapshot). */
size_t s3d_pool_free_count(struct s3d_pool *pool);
/* The most chunks ever out at once since creation or the last reset (tests: proves memory
 * stayed bounded). */
size_t s3d_pool_high_water(struct s3d_pool *pool);
void s3d_pool_reset_high_water(struct s3d_pool *pool);
/* 1 when p lies inside one of the pool's chunks. */
int s3d_pool_owns(const struct s3d_pool *pool, const void *p);

#endif

/* ckpt_write.h - the pieces of the checkpoint writer that the sharded save (ckpt_shards.c)
 * is built from (internal). Threads: each call runs on the calling thread; calls on distinct
 * objects may run on several threads at once (they share only the client and its pool, which
 * are thread-safe). */
#ifndef S3D_ENGINE_CKPT_WRITE_H
#define S3D_ENGINE_CKPT_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "common/compiler.h"
#include "s3direct/checkpoint.h"

struct s3d_device;
struct s3d_pool;
struct s3d_ckpt_base;

/* Writes tensors t[0..n) with the metadata as one safetensors object or file at uri, atomically
 * (checkpoint.h); generation (NULL for a lone object) is the id of the sharded save this shard
 * belongs to. dev and pool may be NULL when no tensor is on a device. base: the save's base
 * (base->r NULL: none) and the sums of what it did (ckpt_delta.h), never NULL. */
S3D_NODISCARD int s3d_ckpt_write_one(struct s3d_client *c, struct s3d_device *dev,
                                     struct s3d_pool *pool, const char *uri,
                                     const struct s3d_tensor_src *t, size_t n,
                                     const struct s3d_metadata_entry *meta, size_t n_meta,
                                     const char *generation, struct s3d_ckpt_base *base,
                                     const struct s3d_write_options *o);

/* Writes data[0..len) (an index) to uri atomically: one PutObject, or a temporary file
 * renamed over the path. */
S3D_NODISCARD int s3d_ckpt_write_small(struct s3d_client *c, struct s3d_device *dev,
                                       const char *uri, const char *data, size_t len,
                                       const struct s3d_write_options *o);

/* A sharded save's partition (pure): greedy, in order, a shard closes when the next tensor
 * would push it over max_bytes; a tensor bigger than max_bytes gets a shard of its own; no
 * tensor at all is one empty shard. Fills first[0..k] (shard j = tensors [first[j],
 * first[j+1]); first holds n + 1 entries) and *total (the tensors' bytes); returns k, the
 * number of shards (1 .. max(n, 1)). */
uint32_t s3d_shard_partition(const struct s3d_tensor_src *t, size_t n, uint64_t max_bytes,
                             size_t *first, uint64_t *total);

/* The sharded save (ckpt_shards.c): o->max_shard_size > 0, uri ends in the index suffix:
 * partition (s3d_shard_partition), the shards written (several at once to S3: fanout.h),
 * then the index swapped in. */
S3D_NODISCARD int s3d_ckpt_write_sharded(struct s3d_client *c, struct s3d_device *dev,
                                         struct s3d_pool *pool, const char *uri,
                                         const struct s3d_tensor_src *t, size_t n,
                                         const struct s3d_metadata_entry *meta, size_t n_meta,
                                         struct s3d_ckpt_base *base,
                                         const struct s3d_write_options *o);

#endif

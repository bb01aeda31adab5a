/* ckpt_delta.h - what an incremental save (s3d_write_options.base) knows of its base and of
 * the bytes it writes (internal). ckpt_write.c plans and uploads; this file finds the tensors
 * the base already holds, and reads the object's bytes on the host where a plan needs them
 * (the tensors' CRCs before planning, a copied part's CRC and MD5 to prove the copy).
 *
 * Threads: the base and its sums are shared by the shards of one save, written on several
 * threads at once: the sums are added atomically, the reader is only read. */
#ifndef S3D_ENGINE_CKPT_DELTA_H
#define S3D_ENGINE_CKPT_DELTA_H

#include <stddef.h>
#include <stdint.h>

#include "common/compiler.h"
#include "device/device.h"
#include "engine/fileio.h"
#include "s3direct/checkpoint.h"

struct s3d_pool;

/* One source of the bytes of an object being written: the header (tensor -1) or a tensor. */
struct s3d_wsrc {
    const char *ptr; /* host pointer, or device address */
    uint64_t len;
    int32_t device; /* -1 host */
    long tensor;    /* index in the object's tensors, -1 for the header */
};

/* The base of a save and what the save did (s3d_write_stats, summed over every object). */
struct s3d_ckpt_base {
    struct s3d_reader *r; /* NULL: no base (a full save; the sums still count) */
    uint64_t bytes_total, bytes_sent, bytes_copied, tensors_total, tensors_reused;
    uint32_t parts_copied, copies_refused;
    int32_t base_used;
    struct s3d_file_io_counts io; /* files: the tensor bytes written by each path */
};

/* Adds v to *p atomically (the shards' threads). */
#define S3D_DELTA_ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)

/* Opens the base at uri for a save to a target on S3 (target_s3) or in files. A base that
 * cannot serve (missing, unreadable, on the other kind of storage, a malformed header)
 * leaves b->r NULL and logs at info why: the save is then a full one. Only a failure of
 * memory or a cancel is returned. */
S3D_NODISCARD int s3d_delta_base_open(struct s3d_client *c, const char *uri, int target_s3,
                                      struct s3d_ckpt_base *b);
void s3d_delta_base_close(struct s3d_ckpt_base *b);

/* Where the bytes come from when they must be on the host: device sources are copied into a
 * chunk of pool on a stream of streams, one chunk at a time. */
struct s3d_delta_io {
    struct s3d_device *dev;
    struct s3d_pool *pool; /* NULL when no source is on a device */
    struct s3d_stream_set *streams;
    struct s3d_cancel *cancel;
    const struct s3d_wsrc *srcs;
    size_t nsrcs;
    const uint64_t *start; /* object offset of each source (nsrcs entries) */
};

/* Calls fn(user, bytes, len) over [off, off + len) of the object in order, with host bytes. */
S3D_NODISCARD int s3d_delta_walk(const struct s3d_delta_io *io, uint64_t off, uint64_t len,
                                 int (*fn)(void *user, const void *p, size_t n), void *user);

/* The CRC-32C of each tensor (sources 1..nsrcs-1) into crcs[tensor]. */
S3D_NODISCARD int s3d_delta_tensor_crcs(const struct s3d_delta_io *io, uint32_t *crcs);

/* The CRC-32C of [off, off + len): whole tensors from crcs (combined), edges read. */
S3D_NODISCARD int s3d_delta_range_crc(const struct s3d_delta_io *io, const uint32_t *crcs,
                                      uint64_t off, uint64_t len, uint32_t *out);

/* The MD5 of [off, off + len) as 32 lowercase hex digits (NUL-terminated). */
S3D_NODISCARD int s3d_delta_range_md5(const struct s3d_delta_io *io, uint64_t off, uint64_t len,
                                      char hex[33]);

/* For tensors t[0..n) with CRCs crcs: the base shard and absolute offset of each that the
 * base holds unchanged (same name, dtype, shape, bytes and stored CRC-32C), else shard -1.
 * Returns how many match. */
size_t s3d_delta_match(const struct s3d_reader *base, const struct s3d_tensor_src *t, size_t n,
                       const uint32_t *crcs, int32_t *shard, uint64_t *offset);

#endif

/* ckpt_plan.h - planning the ranged reads of a checkpoint load (pure, no I/O).
 *
 * Input: pieces, each a byte range of one object (shard) and where it goes. Output: jobs (one
 * ranged GET each, at most max_job bytes) and segments (the part of a piece a job carries).
 *
 *   object:  |--piece A (host, 20 MiB)--|-B-|-C-|--piece D (device, 10 MiB)--|   |-E-|
 *   jobs:    [ direct 8M ][ direct 8M ][4M][ staged: B C D... up to 8M ][ D ]   [ E ]
 *
 * A host piece of at least direct_min bytes is fetched straight into its destination by
 * "direct" jobs that cover it alone. Everything else (small pieces, device pieces) is
 * "staged": exactly adjacent pieces are coalesced into jobs of up to max_job bytes that land
 * in a staging chunk and are then scattered (memcpy to host, async copy to device). Pieces
 * that are not adjacent are never joined: a subset load fetches only the needed bytes. */
#ifndef S3D_ENGINE_CKPT_PLAN_H
#define S3D_ENGINE_CKPT_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include "common/compiler.h"

struct s3d_rpiece {
    uint32_t shard;   /* which object */
    uint64_t obj_off; /* absolute offset in the object */
    uint64_t len;     /* > 0 */
    void *dst;        /* host pointer, or CUdeviceptr when device >= 0 */
    int32_t device;   /* -1 host */
    size_t dest;      /* the caller's destination index (for CRC and messages) */
};

struct s3d_rseg {
    size_t piece;       /* index into the (sorted) pieces */
    uint64_t piece_off; /* offset inside the piece */
    uint64_t job_off;   /* offset inside the job's bytes */
    uint64_t len;
    uint32_t crc; /* filled in when the job completes */
};

struct s3d_rjob {
    uint32_t shard;
    uint64_t obj_off;
    uint64_t len;
    size_t seg0; /* first segment */
    size_t nseg;
    int direct; /* 1: lands in the host destination of its only segment */
};

struct s3d_rplan {
    struct s3d_rjob *jobs;
    size_t njobs;
    struct s3d_rseg *segs;
    size_t nsegs;
};

/* Sorts pieces by (shard, obj_off, dest) in place and plans the jobs. Segments of one piece
 * come out in piece order, so CRCs can be combined in order. Returns 0 or S3D_ENOMEM /
 * S3D_EINVAL (max_job 0, a zero-length piece). */
S3D_NODISCARD int s3d_rplan_build(struct s3d_rpiece *pieces, size_t n, uint64_t max_job,
                                  uint64_t direct_min, struct s3d_rplan *out);
void s3d_rplan_free(struct s3d_rplan *plan);

/* The order in which to start the plan's jobs, order[k] = a job index, every job once: those
 * of at least half the longest job's bytes first, then the others, each group in plan order.
 * Where each connection is capped, a request's time grows with its bytes: a load whose few
 * whole 8 MiB tensors (embeddings, the output layer) came last ended with them alone in
 * flight, 210 ms each at 40 MB/s per connection, the level's other connections idle
 * (docs/internals/performance.md, "The tail of a load"). The rest keep the plan's order
 * (each object read front to back). */
void s3d_rplan_start_order(const struct s3d_rplan *plan, size_t *order);

#endif

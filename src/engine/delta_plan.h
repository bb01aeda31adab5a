/* delta_plan.h - the parts of an incremental save (internal, pure: no I/O, no clock).
 *
 * An object being written is a sequence of byte runs in object order: runs the client must
 * send (the header, changed tensors) and runs whose bytes a base object already holds
 * (unchanged tensors, at some offset of base object `src`). The planner turns them into the
 * parts of one multipart upload, each either sent or copied server-side from one base range,
 * under S3's rules: every part but the last at least min_part bytes (5 MiB), at most 10,000
 * parts. It keeps the copied share as large as those rules allow: a sent run too short to be a
 * part takes bytes from the copied run after it (or before it) - the client holds every byte,
 * so sending a few more is always possible - and a copied run too short to stand alone is
 * sent. Local files use the same planner with min_part 0 (no size rule) and a min_copy that
 * keeps tiny copies from costing more system calls than they save. */
#ifndef S3D_ENGINE_DELTA_PLAN_H
#define S3D_ENGINE_DELTA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "common/compiler.h"

/* One run of the object, in order (offsets follow from the lengths). */
struct s3d_dseg {
    uint64_t len;
    int32_t src;      /* -1: sent by the client; >= 0: the base object holding these bytes */
    uint64_t src_off; /* src >= 0: where they start in that object */
};

/* One part of the plan: [off, off + len) of the object, sent or copied. */
struct s3d_dpart {
    uint64_t off;
    uint64_t len;
    int32_t src; /* -1: sent; >= 0: copied from base object src at src_off */
    uint64_t src_off;
};

struct s3d_dplan_limits {
    uint64_t part_size; /* the size of sent parts (the last of a run may be up to min_part
                           longer); > 0 */
    uint64_t min_part;  /* every part but the object's last is at least this; 0 = no rule */
    uint64_t min_copy;  /* copied runs shorter than this are sent */
    uint64_t max_copy;  /* copied parts are at most this long (split beyond); > 0 */
    uint32_t max_parts; /* S3D_ETOOBIG beyond this many parts */
};

/* Plans the parts of segs[0..n) (their lengths summing to the object's size, > 0) into
 * *out (malloc'ed, *n_out entries, in object order: part number = index + 1). Adjacent runs
 * are merged first: sent with sent, copied with copied when the second starts in the same
 * base object where the first ends. Returns 0, S3D_ENOMEM, S3D_EINVAL (no bytes, bad limits)
 * or S3D_ETOOBIG (more parts than max_parts). */
S3D_NODISCARD int s3d_delta_plan(const struct s3d_dseg *segs, size_t n,
                                 const struct s3d_dplan_limits *lim, struct s3d_dpart **out,
                                 size_t *n_out);

#endif

/* part_size.c - the part size of a multipart upload (contract in part_size.h). */
#include "engine/part_size.h"

#include "common/compiler.h"
#include "s3/limits.h"

uint64_t s3d_upload_part_size(uint64_t wanted, uint64_t total)
{
    const uint64_t mib = 1ull << 20;
    uint64_t p = S3D_MAX(wanted, S3D_MIN_PART_SIZE);
    uint64_t min_for_total = (total + S3D_MAX_PARTS - 1) / S3D_MAX_PARTS;
    if (p < min_for_total)
        p = (min_for_total + mib - 1) & ~(mib - 1);
    return p;
}

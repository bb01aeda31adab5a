/* part_size.c - the part size of a multipart upload and the range size of a download
 * (contract in part_size.h). */
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

uint64_t s3d_download_range_size(uint64_t part_size, uint64_t len)
{
    const uint64_t step = 256ull << 10;
    uint64_t r = (len + S3D_DL_MIN_RANGES - 1) / S3D_DL_MIN_RANGES;
    r = (r + step - 1) & ~(step - 1);
    if (r < S3D_DL_MIN_RANGE)
        r = S3D_DL_MIN_RANGE;
    return part_size != 0 && r > part_size ? part_size : r;
}

/* part_size.c - the part size of a multipart upload and the range size of a download
 * (contract in part_size.h). */
#include "engine/part_size.h"

#include <stddef.h>

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

/* ---- guessing an upload's part size from its part count ------------------------------------ */

#define MIB          (1ull << 20)
#define AWS_CLI_PART (8ull << 20) /* the AWS CLI's (s3transfer's) and s3direct's default */

/* 1 when an upload in parts of p bytes (the last one 1..p) makes n parts of size bytes:
 * ceil(size / p) == n, and p a part size S3 takes (5 MiB at least unless n is 1). */
static int part_fits(uint64_t p, uint64_t size, uint32_t n)
{
    if (p == 0 || p > S3D_MAX_PART_SIZE || (n > 1 && p < S3D_MIN_PART_SIZE))
        return 0;
    return (size + p - 1) / p == n;
}

/* The AWS CLI's part size for size bytes: 8 MiB, doubled while that makes over 10,000 parts
 * (s3transfer's ChunksizeAdjuster). */
static uint64_t aws_cli_part(uint64_t size)
{
    uint64_t p = AWS_CLI_PART;
    while ((size + p - 1) / p > S3D_MAX_PARTS)
        p *= 2;
    return p;
}

uint64_t s3d_guess_part_size(uint64_t size, uint32_t n, uint64_t part_size)
{
    const uint64_t known[3] = {s3d_upload_part_size(part_size, size),
                               s3d_upload_part_size(AWS_CLI_PART, size), aws_cli_part(size)};
    uint64_t lo, hi;
    if (n < 2 || size < n)
        return 0;
    for (size_t k = 0; k < 3; k++)
        if (part_fits(known[k], size, n))
            return known[k];
    /* ceil(size / p) == n: size / n <= p < size / (n - 1) */
    lo = S3D_MAX((size + n - 1) / n, S3D_MIN_PART_SIZE);
    hi = (size - 1) / (n - 1);
    lo = (lo + MIB - 1) / MIB;
    hi /= MIB;
    return lo == hi && part_fits(lo * MIB, size, n) ? lo * MIB : 0;
}

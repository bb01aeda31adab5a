/* part_size.h - the part size of a multipart upload, one rule for every upload: the byte
 * transfers (api_upload.c, api_upload_stream.c) and checkpoint saves (ckpt_write.c); and
 * the part size of another's upload guessed from its part count (server-side copies).
 *
 * S3's limits (s3/limits.h): every part but the last at least S3D_MIN_PART_SIZE (5 MiB), at
 * most S3D_MAX_PARTS (10,000) parts. Pure function, tested as a table (test_part_size). */
#ifndef S3D_ENGINE_PART_SIZE_H
#define S3D_ENGINE_PART_SIZE_H

#include <stdint.h>

/* The part size for an upload of total bytes (0 = not known yet, e.g. a stream): wanted, at
 * least 5 MiB, and raised, to a MiB multiple, when total would otherwise need more than
 * 10,000 parts. */
uint64_t s3d_upload_part_size(uint64_t wanted, uint64_t total);

/* Downloads: a download's requests in flight cannot outnumber its ranges, so an object of a
 * few dozen part sizes (0.5 GB = 64 ranges of 8 MiB) capped the adaptive level where a load,
 * cutting by tensors, went to 150-180 (issue 34: `cp s3://... -` 0.39 vs 0.48 GB/s with 2 MiB
 * ranges at 12 MB/s per connection, the same on loopback). */
#define S3D_DL_MIN_RANGES 256u
#define S3D_DL_MIN_RANGE  (1ull << 20)

/* The range size for a download of len bytes: len / S3D_DL_MIN_RANGES rounded up to 256 KiB,
 * at least S3D_DL_MIN_RANGE, at most part_size (0 = no cap). */
uint64_t s3d_download_range_size(uint64_t part_size, uint64_t len);

/* The part size of an upload of size bytes in n parts, every one but the last of that size,
 * when it is a likely one, else 0 (also for n < 2): the first that fits (ceil(size / p) == n,
 * 5 MiB..5 GiB) of s3d_upload_part_size(part_size, size) (s3direct's uploads with that
 * part_size), s3d_upload_part_size(8 MiB, size) (its default), the AWS CLI's 8 MiB doubled
 * while over 10,000 parts; else the MiB multiple that fits when exactly one does. One answer:
 * a server-side copy (api_copy.c) pays a whole copy for each wrong guess. */
uint64_t s3d_guess_part_size(uint64_t size, uint32_t n, uint64_t part_size);

#endif

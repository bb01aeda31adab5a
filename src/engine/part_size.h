/* part_size.h - the part size of a multipart upload, one rule for every upload: the byte
 * transfers (api_transfer.c, api_upload_stream.c) and checkpoint saves (ckpt_write.c).
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

#endif

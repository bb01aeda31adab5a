/* limits.h - S3's own limits, the one place they are written (internal).
 *
 * What the S3 API allows, not what s3direct chooses: s3direct's defaults and caps
 * (concurrency, staging, default part size) live with the code that owns them
 * (s3/config.h, engine/client_impl.h, engine/pool.h). Every other header that needs one of
 * these includes this file rather than restating the number. */
#ifndef S3D_S3_LIMITS_H
#define S3D_S3_LIMITS_H

/* Bucket names and keys (uri.h checks them). */
#define S3D_BUCKET_MIN 3
#define S3D_BUCKET_MAX 63
#define S3D_KEY_MAX    1024

/* Uploads: a single PutObject, and the parts of a multipart upload. */
#define S3D_MAX_SINGLE_PUT (5ull << 30) /* one PutObject */
#define S3D_MIN_PART_SIZE  (5ull << 20) /* every part but the last */
#define S3D_MAX_PART_SIZE  (5ull << 30) /* also the largest part size options may ask for */
#define S3D_MAX_PARTS      10000u       /* part numbers 1..10000 in one multipart upload */

/* Keys in one DeleteObjects request. */
#define S3D_MAX_DELETE_KEYS 1000u

#endif

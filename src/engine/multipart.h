/* multipart.h - the lifecycle of one multipart upload around the parts the transfer loop
 * sends (xfer.c, s3d_xfer_put_multipart): CreateMultipartUpload before the first part, then
 * CompleteMultipartUpload with the parts in number order, or AbortMultipartUpload after a
 * failure, with the messages that say what is left on the server. As aws-c-s3 keeps its
 * s3_auto_ranged_put.c apart from the client's loop.
 *
 * Threads: the thread that runs the upload; nothing here keeps state between calls. */
#ifndef S3D_ENGINE_MULTIPART_H
#define S3D_ENGINE_MULTIPART_H

#include <stddef.h>

#include "common/compiler.h"
#include "engine/xfer.h"
#include "s3/ops.h"
#include "s3direct/client.h"

/* CreateMultipartUpload of s3://bucket/key (content_type NULL = application/octet-stream):
 * the malloc'ed upload id into *upload_id. Then, with payload_signing AUTO over plain http,
 * the one probe of whether the server checks the parts' CRC-32C (s3d_op_probe_body_crc),
 * before any part is sent. */
S3D_NODISCARD int s3d_multipart_create(struct s3d_client *c, const char *bucket, const char *key,
                                       const char *content_type, char **upload_id);

/* Ends the upload upload_id whose parts ran with the result rc (0 or a recorded negative
 * code). When rc is 0: parts[0..n) are sorted by number, checked against o's expect_crc32c
 * (the source's CRC32C of a copy, s3d_own_check_expected) and expect_etag (the ETag they
 * must combine to), and the upload completed; Complete's ETag, when it sends one, must be
 * expect_etag too. Once complete, the object gets its CRC-32C tag (s3d_own_tag; o's
 * object_crc32c when set). On any failure before Complete, rc's or these steps', the upload
 * is aborted, so the key keeps its previous object, and the first error is kept as the last
 * error with what the abort tells (still open, or none open); o's made_etag gets the ETag
 * the parts made when it was not expect_etag and the abort left none open. o may be NULL (no
 * checks).
 * Returns rc, or the error of a step that failed. */
S3D_NODISCARD int s3d_multipart_finish(struct s3d_client *c, const char *bucket, const char *key,
                                       const char *upload_id, struct s3d_op_part *parts, size_t n,
                                       const struct s3d_put_options *o, int rc);

#endif
